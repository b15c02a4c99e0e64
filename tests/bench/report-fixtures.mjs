// The reports' test inputs (tests/bench/fixtures/): a short soak's JSON as
// `bash bench/soak.sh --short` wrote it (target/soak/latest.json, its
// failure list and log tail trimmed), and a benchmark result carrying the
// figures of docs/benchmark.md's results section (run on 60df236).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "fixtures");
const read = (name) => JSON.parse(readFileSync(join(FIXTURES, name), "utf8"));

export const soakFixture = () => read("soak-short.json");
export const benchFixture = () => read("bench-docs-60df236.json");
