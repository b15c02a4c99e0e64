// mTLS to the Topology Service through the real worker in workerd. On
// Cloudflare an `mtls_certificates` binding is a Fetcher whose `fetch`
// presents the uploaded client certificate; the router calls the service
// through `env.TOPOLOGY_MTLS.fetch` when the binding exists. Miniflare's
// own `mtlsCertificates` option only proxies to a remote Cloudflare
// binding, but workerd can present a client certificate itself: an
// external service binding with a TLS keypair. That stands in for the
// binding here, so the handshake is real: a local CA, a TLS front for
// devstack's Topology Service that rejects any client without a
// certificate from that CA, and three routers:
//
//   router 0  TOPOLOGY_MTLS presents the CA's client certificate: classifies
//   router 1  no binding: global fetch, no certificate: the legacy cell
//   router 2  TOPOLOGY_MTLS presents a certificate from another CA: refused,
//             the legacy cell
//
// Each router names the service by another URL, so their shared-cache
// namespaces differ and none reads another's answers. The last test shows
// that wrangler accepts the binding as wrangler.toml declares it
// (`wrangler deploy --dry-run`, offline).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import https from "node:https";
import http from "node:http";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startDemoStack, request, requestLogs, eventually, freePort, waitForOutput, ROOT, scratchDir } from "./harness.mjs";
import { COMPATIBILITY_DATE } from "../../scripts/runtime-config.mjs";

const dir = scratchDir("router-mtls-");
const ssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
const read = (name) => readFileSync(join(dir, name), "utf8");

/** A key and a certificate signed by `ca` (self-signed without one). */
function issue(name, subject, ext, ca) {
  if (ca) {
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject);
    writeFileSync(join(dir, `${name}.ext`), ext);
    ssl("x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.pem`, "-CAkey", `${ca}.key`, "-CAcreateserial", "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`);
  } else {
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.pem`, "-days", "2", "-subj", subject);
  }
  return { key: read(`${name}.key`), cert: read(`${name}.pem`) };
}

let stack;
let front;
const seen = { accepted: [], refused: 0 };

before(async () => {
  const ca = issue("ca", "/CN=router-test-ca");
  const server = issue("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", "ca");
  const client = issue("client", "/CN=gitlab-http-router", "extendedKeyUsage=clientAuth\n", "ca");
  const rogue = issue("rogue", "/CN=someone-else");
  const port = await freePort();

  // The Topology Service behind TLS that requires a client certificate
  // from the local CA; it forwards classify calls to devstack's service.
  front = https.createServer({ ...server, ca: [ca.cert], requestCert: true, rejectUnauthorized: true }, (req, res) => {
    seen.accepted.push(req.socket.getPeerCertificate().subject.CN);
    const up = http.request(`http://${stack.topology.addr}/v1/classify`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    up.on("error", () => res.writeHead(502).end());
    req.pipe(up);
  });
  front.on("tlsClientError", (e) => {
    seen.refused++;
    if (process.env.MTLS_DEBUG) console.error("tlsClientError", e.message);
  });
  await new Promise((resolve) => front.listen(port, "127.0.0.1", resolve));

  // `http: null` is a workaround: Miniflare's schema for an external
  // server is a union whose first member ({http?}) accepts any object and
  // drops `https`, so workerd would speak plain HTTP; null fails that
  // member and the {https} one is used.
  const binding = (pair) => ({
    external: {
      address: `127.0.0.1:${port}`,
      http: null,
      https: { tlsOptions: { keypair: { privateKey: pair.key, certificateChain: pair.cert }, trustedCertificates: [ca.cert] }, certificateHost: "localhost" },
    },
  });
  stack = await startDemoStack({
    routers: 3,
    vars: { GITLAB_TOPOLOGY_RETRIES: "0" },
    routerVars: [
      { GITLAB_TOPOLOGY_SERVICE_URL: `https://localhost:${port}` },
      { GITLAB_TOPOLOGY_SERVICE_URL: `https://127.0.0.1:${port}` },
      { GITLAB_TOPOLOGY_SERVICE_URL: `https://localhost:${port}/rogue` },
    ],
    routerOptions: [{ serviceBindings: { TOPOLOGY_MTLS: binding(client) } }, {}, { serviceBindings: { TOPOLOGY_MTLS: binding(rogue) } }],
  });
});

after(async () => {
  await stack?.stop();
  await new Promise((resolve) => (front ? front.close(resolve) : resolve()));
});

async function cellOf(router, path) {
  const res = await request(`${stack.urls[router]}${path}`);
  assert.equal(res.status, 200, res.text);
  return res.headers["x-demo-cell"];
}

test("with the binding, service calls present the client certificate and classify", async () => {
  const before = seen.accepted.length;
  const cell = await cellOf(0, "/cell2-group/app");
  assert.equal(cell, "2", JSON.stringify(requestLogs(stack).slice(-1)));
  assert.deepEqual(seen.accepted.slice(before), ["gitlab-http-router"], "one call, with the router's certificate");
  const line = requestLogs(stack).findLast((l) => l.path === "/cell2-group/app");
  assert.equal(line.cache, "service");
  assert.ok(await waitForOutput(stack, (l) => l.includes("go through the TOPOLOGY_MTLS mtls_certificates binding")), "the isolate said so once");
});

test("without the binding, plain fetch reaches no service that requires a certificate: the legacy cell", async () => {
  const before = seen.accepted.length;
  assert.equal(await cellOf(1, "/cell3-group/app"), "1");
  assert.equal(seen.accepted.length, before, "the service answered nothing");
  await eventually(() => {
    const line = requestLogs(stack).findLast((l) => l.path === "/cell3-group/app");
    assert.equal(line.cache, "fallback");
    assert.match(line.error, /topology service unreachable/);
  });
});

test("a binding with a certificate from another CA is refused by the service: the legacy cell", async () => {
  const refused = seen.refused;
  const before = seen.accepted.length;
  assert.equal(await cellOf(2, "/acme/app"), "1");
  assert.equal(seen.accepted.length, before);
  assert.ok(seen.refused > refused, "the TLS handshake was refused");
  await eventually(() => {
    const line = requestLogs(stack).findLast((l) => l.path === "/acme/app");
    assert.equal(line.cache, "fallback");
    assert.match(line.error, /topology service unreachable/);
  });
});

test("wrangler accepts the mtls_certificates binding as wrangler.toml declares it (dry run)", () => {
  const config = join(dir, "wrangler.toml");
  writeFileSync(
    config,
    `name = "mtls-dry-run"\nmain = ${JSON.stringify(join(ROOT, "build", "index.js"))}\ncompatibility_date = "${COMPATIBILITY_DATE}"\n` +
      `mtls_certificates = [\n  { binding = "TOPOLOGY_MTLS", certificate_id = "8c5a4f0e-2b1d-4e3a-9f6b-0d7c1e2a3b4c" },\n]\n`,
  );
  const out = execFileSync(join(ROOT, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "--outdir", join(dir, "dist"), "-c", config], {
    cwd: dir,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_HIDE_BANNER: "true", NO_COLOR: "1" },
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  assert.match(out, /TOPOLOGY_MTLS/);
  assert.match(out, /mTLS Certificate/i);
  assert.match(out, /--dry-run: exiting now/);
});
