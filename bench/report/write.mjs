// Writing a report beside the JSON it is made from, from a run or by hand
// (`node bench/report/<name>.mjs [run.json [out.html]]`).
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(import.meta.url), "..", "..", "..");

/** Writes `render(JSON at jsonPath)` at `htmlPath` (default: beside it, .html for .json); its path. */
export function writeReport(render, jsonPath, htmlPath = `${jsonPath.replace(/\.json$/, "")}.html`) {
  writeFileSync(htmlPath, render(JSON.parse(readFileSync(jsonPath, "utf8"))));
  return htmlPath;
}

/**
 * When the module at `moduleUrl` is the script node runs: the report of the
 * JSON named first (default `defaultJson`, from the repository's root) at the
 * path named second or beside it; prints where.
 */
export function reportCommand(moduleUrl, render, defaultJson) {
  if (!process.argv[1] || resolve(process.argv[1]) !== fileURLToPath(moduleUrl)) return;
  const json = resolve(process.argv[2] ?? resolve(ROOT, defaultJson));
  process.stdout.write(`${writeReport(render, json, process.argv[3] ? resolve(process.argv[3]) : undefined)}\n`);
}
