// The reports' test inputs (tests/bench/fixtures/): a short soak's JSON as
// `bash bench/soak.sh --short` wrote it (target/soak/latest.json, its
// router log tail trimmed), and a narrow benchmark run's
// (`BENCH_CONFIGS=passthrough BENCH_SKIP_STREAM=1 BENCH_RECORD=0
// BENCH_SKIP_NATIVE=1 bash bench/run.sh`: target/bench/latest.json without
// its every-run rows and cold-start samples).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "fixtures");
const read = (name) => JSON.parse(readFileSync(join(FIXTURES, name), "utf8"));

export const soakFixture = () => read("soak-short.json");
export const benchFixture = () => read("bench-passthrough.json");
