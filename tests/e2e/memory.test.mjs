// The memory cache bounded in bytes, through workerd: 10,000
// anonymous registry requests, each for a repository never asked before,
// against the built worker (the test build's `memory-probe` feature reads
// the isolate's wasm memory and the cache's size) with devstack's Topology
// Service answering every name under `gitlab-org` by prefix, cacheable.
// Half the names are 255 characters long (the longest a registry stores:
// classified and cached), half 4,000 (over the rules' `validate.maxLength`,
// under the core's cap on classify values: not classified, the legacy
// registry). The isolate's wasm memory must grow by less than the memory
// cache's byte budget, and the cache must hold no more than it.
//
// Needs the test build (harness.mjs buildTestWorker) and cargo build -p devstack.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { startStack, request, requestLogs, buildTestWorker, TEST_BUILD } from "./harness.mjs";

const REQUESTS = 10_000;
const CONCURRENCY = 32;
const ACCEPTED = 255;
const REFUSED = 4_000;

/** A distribution-grammar repository name under gitlab-org, `length` characters long, distinct per `i`. */
export function repository(i, length) {
  let name = `gitlab-org/r${i}`;
  while (name.length < length) name += "/a";
  name = name.slice(0, length);
  return name.endsWith("/") ? `${name.slice(0, -1)}b` : name;
}

/** A loopback stand-in for cell 2's registry: answers every request 200 and counts them. */
async function startRegistryStandIn() {
  const standIn = { hits: 0 };
  standIn.server = http.createServer((req, res) => {
    standIn.hits++;
    req.resume();
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
  await new Promise((resolve) => standIn.server.listen(0, "127.0.0.1", resolve));
  standIn.addr = `127.0.0.1:${standIn.server.address().port}`;
  standIn.stop = () => new Promise((resolve) => standIn.server.close(resolve));
  return standIn;
}

const probe = async (stack) => (await request(`${stack.url}/__memory_probe__`)).json();
const mib = (bytes) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

test("10,000 long-path registry requests: the isolate's wasm memory grows by less than the memory cache's byte budget", { timeout: 300_000 }, async (t) => {
  buildTestWorker();
  const registry = await startRegistryStandIn();
  const stack = await startStack({
    ruleset: "container_registry",
    build: TEST_BUILD,
    cellCount: 2,
    cellRoutes: { 2: ["gitlab-org"] },
    topology: { registryAddresses: { 2: registry.addr }, cacheControl: "max-age=600" },
    vars: { GITLAB_TOPOLOGY_TIMEOUT_MS: "2000" },
  });
  try {
    // One classification first, so the probe's baseline includes a warm
    // isolate (rulesets compiled, first allocations made).
    const warm = await request(`${stack.url}/v2/${repository(-1, 20)}/manifests/latest`);
    assert.equal(warm.status, 200);
    const before = await probe(stack);

    const started = Date.now();
    const statuses = new Map();
    let next = 0;
    const worker = async () => {
      while (next < REQUESTS) {
        const i = next++;
        const length = i % 2 === 0 ? ACCEPTED : REFUSED;
        const res = await request(`${stack.url}/v2/${repository(i, length)}/manifests/latest`);
        const key = `${length}:${res.status}:${res.headers["x-demo-cell"] ?? "registry"}`;
        statuses.set(key, (statuses.get(key) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const seconds = (Date.now() - started) / 1000;
    const after = await probe(stack);
    const grown = after.wasm_bytes - before.wasm_bytes;
    const budget = after.cache_budget_bytes;
    t.diagnostic(
      `${REQUESTS} requests in ${seconds.toFixed(1)} s (${CONCURRENCY} at a time); wasm memory ${mib(before.wasm_bytes)} -> ${mib(after.wasm_bytes)} (+${mib(grown)}); ` +
        `memory cache ${after.cache_entries} entries, ${mib(after.cache_bytes)} counted; budget ${mib(budget)}; outcomes ${JSON.stringify(Object.fromEntries(statuses))}`,
    );

    assert.ok(grown <= budget, `wasm memory grew by ${mib(grown)}, over the memory cache's budget of ${mib(budget)}`);
    assert.ok(after.cache_bytes <= budget, `the memory cache counts ${mib(after.cache_bytes)}, over its budget`);
    // Names of 255 characters are classified (cell 2's registry) and
    // cached; names of 4,000 go to the legacy registry (demo cell 1).
    assert.equal(statuses.get(`${ACCEPTED}:200:registry`), REQUESTS / 2, "every 255-character name at cell 2's registry");
    assert.equal(statuses.get(`${REFUSED}:200:1`), REQUESTS / 2, "every 4,000-character name at the legacy registry");
    assert.ok(after.cache_entries >= REQUESTS / 2, `${after.cache_entries} entries cached`);
    const refused = requestLogs(stack).find((l) => l.path?.length > REFUSED);
    assert.equal(refused?.rule, "legacy_registry");
  } finally {
    await stack.stop();
    await registry.stop();
  }
});
