// bench/workerd-options.mjs: the benchmark's workers fetch their upstream
// directly, not through Miniflare's outbound hop (which sets `CF-Worker`
// on everything it forwards), unless BENCH_OUTBOUND_HOP asks for it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { runInWorkerd } from "./run-in-workerd.mjs";

const NULL_WORKER = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "bench", "null-worker.mjs");

/** The headers the upstream gets from the null worker run with `options`. */
async function upstreamHeaders(options) {
  const { sent } = await runInWorkerd(NULL_WORKER, { ...options, headers: { "x-probe": "1" } });
  return sent;
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
