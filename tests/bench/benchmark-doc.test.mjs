// docs/benchmark.md is partly written by the bench: its table of settings
// is bench/driver/settings.mjs printed, and its results section sits
// between the markers a timed run writes between.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { RESULTS_BEGIN, RESULTS_END } from "../../bench/driver/report.mjs";
import { ROOT, settingsTable } from "../../bench/driver/settings.mjs";

const doc = () => readFileSync(join(ROOT, "docs", "benchmark.md"), "utf8");

test("docs/benchmark.md's table of settings is bench/driver/settings.mjs printed", () => {
  const text = doc();
  const begin = "<!-- settings: begin -->";
  const end = "<!-- settings: end -->";
  const from = text.indexOf(begin);
  const to = text.indexOf(end);
  assert.ok(from >= 0 && to > from, "docs/benchmark.md has no settings markers");
  assert.equal(text.slice(from + begin.length, to).trim(), settingsTable(), "regenerate it: node bench/driver/settings.mjs");
});

test("docs/benchmark.md has the results markers, once each", () => {
  const text = doc();
  assert.equal(text.split(RESULTS_BEGIN).length, 2);
  assert.equal(text.split(RESULTS_END).length, 2);
  assert.ok(text.indexOf(RESULTS_BEGIN) < text.indexOf(RESULTS_END));
});
