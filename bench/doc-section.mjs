// Figures a run writes into a document, between two marker lines, so a
// document's figures are a run's own output and never pasted: the soak's
// (docs/soak.md, `bash bench/soak.sh --record`) and the benchmark's results
// table (docs/benchmark.md, `bash bench/run.sh`).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { relative } from "node:path";

/**
 * `doc` with what lies between the lines `begin` and `end` replaced by
 * `body` (the markers kept, a blank line either side); null when the
 * markers are missing or out of order.
 */
export function replaceSection(doc, begin, end, body) {
  const from = doc.indexOf(begin);
  const to = doc.indexOf(end, from + begin.length);
  if (from < 0 || to < 0) return null;
  return `${doc.slice(0, from)}${begin}\n\n${body.trim()}\n\n${doc.slice(to)}`;
}

/** Writes `body` into `file` between its markers; false (and nothing written) when they are missing. */
export function writeDocSection(file, begin, end, body) {
  const doc = readFileSync(file, "utf8");
  const next = replaceSection(doc, begin, end, body);
  if (next === null) return false;
  writeFileSync(file, next);
  return true;
}

/**
 * The commit a run measured, short, with " with uncommitted changes" when
 * tracked files other than `ignore` (the document being written) differ.
 */
export function commitLabel(root, ignore) {
  const git = (...a) => execFileSync("git", a, { cwd: root, encoding: "utf8" }).trim();
  const skip = relative(root, ignore);
  const changed = git("status", "--porcelain", "--untracked-files=no")
    .split("\n")
    .filter((l) => l && !l.endsWith(skip));
  return `${git("rev-parse", "--short", "HEAD")}${changed.length ? " with uncommitted changes" : ""}`;
}
