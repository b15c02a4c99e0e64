// For the bench's own tests: one request through a worker module in
// workerd, started with the bench's Miniflare options
// (bench/workerd-options.mjs), against a loopback upstream that answers
// "ok\n" and keeps each request's headers.
import assert from "node:assert/strict";
import http from "node:http";
import { dirname } from "node:path";
import { Miniflare } from "miniflare";
import { workerdOptions } from "../../bench/workerd-options.mjs";

/**
 * Sends `GET /a/b` (with `headers`) to the worker at `scriptPath`, its
 * `UPSTREAM` binding the loopback upstream and `bindings` besides; the
 * headers the upstream got and the JSON lines the worker logged (waiting
 * up to 3 s for `lines` of them: workerd's output arrives through a pipe).
 */
export async function runInWorkerd(scriptPath, { bindings = {}, headers = {}, outboundHop = false, lines = 0 } = {}) {
  const seen = [];
  const upstream = http.createServer((req, res) => {
    seen.push(req.headers);
    res.end("ok\n");
  });
  await new Promise((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const logged = [];
  const mf = new Miniflare({
    ...workerdOptions({ outboundHop, onLine: (line) => line.startsWith("{") && logged.push(line) }),
    scriptPath,
    // workerd refuses module names that climb out of the root with "..".
    modulesRoot: dirname(scriptPath),
    bindings: { UPSTREAM: `127.0.0.1:${upstream.address().port}`, ...bindings },
  });
  try {
    await mf.ready;
    const res = await fetch(new URL("/a/b", await mf.unsafeGetDirectURL("")), { headers });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "ok\n");
    for (const until = Date.now() + 3000; logged.length < lines && Date.now() < until; ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    await mf.dispose();
    await new Promise((resolve) => upstream.close(resolve));
  }
  assert.equal(seen.length, 1);
  return { sent: seen[0], logged };
}
