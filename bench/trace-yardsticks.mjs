// BENCH_TRACE_YARDSTICKS=1: the floor and the peer as they would be if
// they did what SPEC section 11 asks of every router: a request id and a
// W3C traceparent on every forwarded request, and both in its log line.
// Neither yardstick sends them, and each forwarded header costs ~20 k
// instructions in workerd (docs/benchmark.md), so this prices the
// router's excess over them that the SPEC, not the router, asks for. The
// patched copies are written into the run's directory from the peers
// directory at run time (the repository keeps no copy); a yardstick that
// no longer has the lines patched fails the run instead of being measured
// unpatched.
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

/** What each yardstick gets after it sets its last rule header. */
const TRACE = `
    // Added by bench/trace-yardsticks.mjs (SPEC section 11).
    const requestId = crypto.randomUUID();
    const traceparent = \`00-\${crypto.randomUUID().replaceAll("-", "")}-\${requestId.slice(0, 8)}\${requestId.slice(9, 13)}\${requestId.slice(14, 18)}-01\`;
    headers.set("x-request-id", requestId);
    headers.set("traceparent", traceparent);`;

const PATCHES = [
  // The last header either sets before its fetch.
  [/headers\.set\("x-gitlab-http-router-rule-type", [^;\n]*\);/g, (line) => line + TRACE],
  // The log line's last field.
  [/duration_ms: Date\.now\(\) - started(\s*)\}/g, (_, space) => `duration_ms: Date.now() - started, request_id: requestId, traceparent${space}}`],
];

/** `text` (a yardstick's module, named `file` in errors) with the trace headers and log fields. */
export function withTrace(text, file) {
  let out = text;
  for (const [pattern, replace] of PATCHES) {
    const found = out.match(pattern)?.length ?? 0;
    if (found !== 1) {
      throw new Error(`BENCH_TRACE_YARDSTICKS: ${file} has ${found} places matching ${pattern}, not 1: the yardstick changed`);
    }
    out = out.replace(pattern, replace);
  }
  return out;
}

/** Writes the traced floor and peer from `peersDir` into `outDir`; returns `outDir`. */
export function traceYardsticks(peersDir, outDir) {
  mkdirSync(outDir, { recursive: true });
  for (const file of ["js-floor.mjs", "js-router.mjs"]) {
    writeFileSync(join(outDir, file), withTrace(readFileSync(join(peersDir, file), "utf8"), file));
  }
  return outDir;
}
