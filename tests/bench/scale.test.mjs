// The scale run's variants and its comparisons (bench/driver/scale-mode.mjs),
// the cell lists it loads (bench/driver/mix.mjs) and the Rust yardsticks'
// verdicts (bench/driver/report.mjs, bench/instructions.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { compare } from "../../bench/instructions.mjs";
import { coldVerdicts, targetVerdicts } from "../../bench/driver/report.mjs";
import { cellList } from "../../bench/driver/mix.mjs";
import { againstSmallest, fillRequests, scaleVariants } from "../../bench/driver/scale-mode.mjs";

test("a cell list gives every cell an address of its own, cell 1 the sink's", () => {
  const cells = JSON.parse(cellList("127.0.0.1:4000", 1000));
  assert.equal(cells.length, 1000);
  assert.equal(cells[0].address, "127.0.0.1:4000");
  assert.equal(new Set(cells.map((c) => c.address)).size, 1000);
  assert.equal(new Set(cells.map((c) => c.session_prefix)).size, 1000);
  assert.deepEqual(cells.map((c) => c.id).slice(0, 3), [1, 2, 3]);
  assert.equal(JSON.parse(cellList("s:1")).length, 10);
});

test("the scale variants cover each dimension's sizes with the settings that make them", () => {
  const v = scaleVariants("127.0.0.1:4000", 33);
  const sizes = (d) => v.filter((x) => x.dimension === d).map((x) => x.size);
  assert.deepEqual(sizes("cells"), [10, 100, 1000]);
  assert.deepEqual(sizes("cache entries"), [100, 1000, 10000]);
  assert.deepEqual(sizes("rules"), [33, 50, 200]);
  const byName = Object.fromEntries(v.map((x) => [x.name, x]));
  assert.equal(JSON.parse(byName["scale-cells-1000"].bindings.GITLAB_CELLS).length, 1000);
  assert.equal(byName["scale-cache-10000"].bindings.GITLAB_MEMORY_CACHE_ENTRIES, "10000");
  assert.equal(byName["scale-cache-10000"].fill, 10000);
  assert.deepEqual([byName["scale-rules-33"].ruleset, byName["scale-rules-200"].ruleset], ["cells", "cells_200"]);
  assert.equal(new Set(v.map((x) => x.name)).size, v.length);
});

test("fill requests each name a session prefix of their own", () => {
  const fill = fillRequests(500, 100);
  const prefixes = fill.map((r) => r.headers.cookie.match(/_gitlab_session=(cell-[^-]+)-/)[1]);
  assert.equal(new Set(prefixes).size, 500);
  assert.notDeepEqual(fillRequests(1, 100)[0].headers, fillRequests(1, 1000)[0].headers);
});

test("each variant is read against the smallest size of its own dimension", () => {
  const rows = againstSmallest([
    { dimension: "cells", size: 1000, warm: 110, first_median_ms: 30 },
    { dimension: "cells", size: 10, warm: 100, first_median_ms: 20 },
    { dimension: "rules", size: 200, warm: 300, first_median_ms: null },
  ]);
  assert.equal(rows[0].warm_vs_smallest_pct, 10);
  assert.equal(rows[0].first_vs_smallest_pct, 50);
  assert.equal(rows[1].warm_vs_smallest_pct, 0);
  assert.equal(rows[2].first_vs_smallest_pct, null);
});

test("instruction counts are also read against the Rust yardsticks", () => {
  const rows = compare([
    { config: "rust-floor", main: 500_000 },
    { config: "workers-rs", main: 700_000 },
    { config: "token-warm", main: 960_000 },
  ]);
  const tw = rows.find((r) => r.config === "token-warm");
  assert.equal(tw.over_rust_floor, 460_000);
  assert.equal(tw.over_workers_rs, 260_000);
  assert.equal(compare([{ config: "cells", main: 1 }])[0].over_rust_floor, null);
});

test("the cold verdicts hold the router's first request to 2× rust-floor's and 8 ms, or to 2× alone when rust-floor is over 4 ms", () => {
  const row = (config, cpu_first_ms) => ({ config, total_ms: 100, cpu_first_ms, over_floor_cpu_ms: 1, over_floor_log_cpu_ms: 1 });
  const [line] = coldVerdicts([row("peer", 2), row("rust-floor", 3), row("workers-rs", 5), row("router-cells", 9)]);
  assert.match(line, /^router-cells: first request CPU 9\.0 ms, 3\.0× rust-floor's 3\.0 ms \(target ≤ 2× and ≤ 8 ms: NOT met\); 1\.8× workers-rs's 5\.0 ms, 4\.5× the peer's 2\.0 ms; total time 1\.00× the peer's$/);
  const [met] = coldVerdicts([row("rust-floor", 3), row("router-cells", 6)]);
  assert.match(met, /\(target ≤ 2× and ≤ 8 ms: met\)$/);
  const [over8] = coldVerdicts([row("rust-floor", 4), row("router-cells", 8.5)]);
  assert.match(over8, /\(target ≤ 2× and ≤ 8 ms: NOT met\)$/);
  const [slowFloor] = coldVerdicts([row("rust-floor", 6), row("router-cells", 11)]);
  assert.match(slowFloor, /\(target ≤ 2×, rust-floor being over 4 ms: met\)$/);
  const [none] = coldVerdicts([row("peer", 2), row("router-cells", 6)]);
  assert.match(none, /\(target ≤ 8 ms: met; no rust-floor in the run\)/);
});

test("the warm verdicts hold token-warm and cells to peer-log, with the Rust yardsticks beside", () => {
  const summary = [
    { config: "peer-log", concurrency: 8, vs_floor_log_cpu_extra_us: 41, vs_peer_log_rps: 1 },
    { config: "token-warm", concurrency: 8, cpu_us_per_req: 150, vs_floor_log_cpu_extra_us: 40, vs_peer_log_rps: 0.9, vs_rust_floor_cpu_extra_us: 30, vs_rust_floor_rps: 0.95, vs_workers_rs_cpu_extra_us: -10, vs_workers_rs_rps: 1.1 },
    { config: "cells", concurrency: 8, vs_floor_log_cpu_extra_us: 45, vs_peer_log_rps: 1.02 },
    { config: "passthrough", concurrency: 8, vs_floor_log_cpu_extra_us: 20, vs_peer_log_rps: 1.1 },
  ];
  const [tok, cells, pass] = targetVerdicts(summary, [8]);
  assert.match(tok, /^c=8 session_token \(token-warm\): 40\.0 µs over floor-log against peer-log's 41\.0 \(target ≤ peer-log's: met\), 0\.900× peer-log req\/s \(target ≥ 1\.00: NOT met\); 30\.0 µs over rust-floor \(0\.95× its req\/s\), -10\.0 µs over workers-rs \(1\.10× its req\/s\)$/);
  assert.match(cells, /^c=8 cells: 45\.0 µs over floor-log against peer-log's 41\.0 \(target ≤ peer-log's: NOT met\), 1\.020× peer-log req\/s \(target ≥ 1\.00: met\)$/);
  assert.match(pass, /^c=8 passthrough \(no rule runs\): 20\.0 µs over floor-log, 1\.10× peer-log req\/s$/);
  const [plain] = targetVerdicts([{ ...summary[1], vs_rust_floor_cpu_extra_us: null, vs_workers_rs_cpu_extra_us: null }], [8]);
  assert.doesNotMatch(plain, /rust-floor/);
  assert.match(plain, /40\.0 µs over floor-log, 0\.900×/);
});
