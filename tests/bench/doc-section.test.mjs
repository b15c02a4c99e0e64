// bench/doc-section.mjs and the benchmark's results section: a run's
// figures replace what lies between two markers and nothing else, and the
// section says what ran, when, and what it measured.
import { test } from "node:test";
import assert from "node:assert/strict";
import { replaceSection } from "../../bench/doc-section.mjs";
import { resultsSection } from "../../bench/driver/report.mjs";

test("the text between the markers is replaced, the rest kept; missing markers write nothing", () => {
  const doc = "# Title\n\nintro\n\n<!-- a -->\n\nold figures\n\n<!-- b -->\n\nafter\n";
  assert.equal(replaceSection(doc, "<!-- a -->", "<!-- b -->", "new\nfigures\n"), "# Title\n\nintro\n\n<!-- a -->\n\nnew\nfigures\n\n<!-- b -->\n\nafter\n");
  assert.equal(replaceSection(doc, "<!-- a -->", "<!-- c -->", "x"), null);
  assert.equal(replaceSection(doc, "<!-- b -->", "<!-- a -->", "x"), null, "markers out of order");
});

/** A timed run's result as the driver builds it, two configurations at one concurrency. */
function result() {
  const row = (config, cpu, overFloor, peer) => ({ config, concurrency: 8, rps: 4000, p50_ms: 1.9, p99_ms: 4.2, cpu_us_per_req: cpu, vs_floor_log_cpu_extra_us: overFloor, vs_peer_log_rps: peer, ts_calls_per_req: 0 });
  return {
    meta: { cores: 2, loadavg_at_end: [1.25, 1, 1], options: { rounds: 3, seconds: 8, concurrency: [8], coldSamples: 7, streamSmallMiB: 64, streamMiB: 1024 } },
    summary: [row("floor-log", 124, 0, 1.16), row("token-warm", 143, 19, 0.99)],
    cold_start: { summary: [{ config: "peer", ready_ms: 70, first_ms: 4, total_ms: 74, cpu_first_ms: 2.4, cpu_total_ms: 38, over_floor_cpu_ms: 2 }, { config: "router-session_token", ready_ms: 90, first_ms: 40, total_ms: 130, cpu_first_ms: 4.5, cpu_total_ms: 73, over_floor_cpu_ms: 37 }] },
    streaming: [],
    memory: [],
    sizes: { wasm_gzip_bytes: 357_171, wasm_raw_bytes: 827_000, js_gzip_bytes: 9_000 },
    native: null,
  };
}

test("the results section names the command, the commit and the time, and holds the run's rows", () => {
  const text = resultsSection(result(), {
    command: "BENCH_SKIP_BUILD=1 bash bench/run.sh",
    commit: "abc1234",
    started: new Date("2026-12-02T08:00:00Z"),
    ended: new Date("2026-12-02T08:14:00Z"),
    runStarted: new Date("2026-12-02T07:58:00Z"),
    bad: 0,
  });
  assert.match(text, /^`BENCH_SKIP_BUILD=1 bash bench\/run.sh` on 2026-12-02, 07:58–08:14 UTC \(16 min, builds and the native bench included\), commit abc1234; 2 cores, load average 1\.3 at the end\./);
  assert.match(text, /\| `token-warm` \| 8 \| 4000 \| 1\.90 \| 4\.20 \| 143 \| 19 \| 0\.99 \| 0\.00 \|/);
  assert.match(text, /c=8 session_token \(token-warm\): 19\.0 µs over floor-log, 0\.990× peer-log req\/s \(target ≥ 1\.00: NOT met\)/);
  assert.match(text, /router-session_token: first request CPU 4\.5 ms \(target ≤ 8 ms: met; no rust-floor in the run\); 1\.9× the peer's 2\.4 ms; total time 1\.76× the peer's/);
  assert.match(text, /\| `router-session_token` \| 90\.0 \| 40\.0 \| 130\.0 \| 4\.5 \| 73\.0 \| 37\.0 \|/);
  assert.match(text, /357,171 bytes gzip -9/);
  assert.match(text, /Rules engine, native: not run\./);
  assert.doesNotMatch(text, /had errors/);
  assert.match(resultsSection(result(), { command: "c", commit: "x", started: new Date(), ended: new Date(), runStarted: null, bad: 2 }), /\*\*2 part\(s\) had errors\*\*/);
});

test("the cold verdicts set the router beside peer-log over floor-log when the run has it", async () => {
  const { coldVerdicts } = await import("../../bench/driver/report.mjs");
  const row = (config, cpu_first_ms, over_floor_cpu_ms, over_floor_log_cpu_ms) => ({ config, total_ms: 100, cpu_first_ms, over_floor_cpu_ms, over_floor_log_cpu_ms });
  const withLog = [row("peer", 2, 4, 2), row("peer-log", 4, 6, 4), row("rust-floor", 5, 5, 3), row("router-cells", 20, 36, 34)];
  const [line] = coldVerdicts(withLog);
  assert.match(line, /^router-cells: first request CPU 20\.0 ms, 4\.0× rust-floor's 5\.0 ms \(target ≤ 2×, rust-floor being over 4 ms: NOT met\); 10\.0× the peer's 2\.0 ms, 5\.0× peer-log's 4\.0 ms; CPU over floor-log 34\.0 vs peer-log's 4\.0 ms; total time 1\.00× the peer's$/);
  const [plain] = coldVerdicts(withLog.filter((x) => x.config !== "peer-log"));
  assert.doesNotMatch(plain, /peer-log/);
});
