// bench/workerd-options.mjs: the benchmark's workers fetch their upstream
// directly, not through Miniflare's outbound hop (which sets `CF-Worker`
// on everything it forwards), unless BENCH_OUTBOUND_HOP asks for it.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { workerdOptions } from "../../bench/workerd-options.mjs";

const NULL_WORKER = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "bench", "null-worker.mjs");

/** The headers the upstream gets from the null worker run with `options`. */
async function upstreamHeaders(options) {
  const seen = [];
  const upstream = http.createServer((req, res) => {
    seen.push(req.headers);
    res.end("ok\n");
  });
  await new Promise((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const mf = new Miniflare({
    ...workerdOptions(options),
    scriptPath: NULL_WORKER,
    bindings: { UPSTREAM: `127.0.0.1:${upstream.address().port}` },
  });
  try {
    await mf.ready;
    const url = await mf.unsafeGetDirectURL("");
    const res = await fetch(new URL("/x", url), { headers: { "x-probe": "1" } });
    assert.equal(await res.text(), "ok\n");
    assert.equal(seen.length, 1);
    return seen[0];
  } finally {
    await mf.dispose();
    upstream.close();
  }
}

test("the benchmarked worker reaches its upstream without Miniflare's outbound hop", async () => {
  const headers = await upstreamHeaders({});
  assert.equal(headers["x-probe"], "1");
  assert.equal(headers["cf-worker"], undefined, "the hop's CF-Worker arrived: the fetch went through it");
});

test("BENCH_OUTBOUND_HOP's setting puts the hop back", async () => {
  const headers = await upstreamHeaders({ outboundHop: true });
  assert.equal(headers["x-probe"], "1");
  assert.equal(headers["cf-worker"], "worker.example.com");
});
