// Cache effectiveness and the cost of a Topology Service outage, through
// the real worker in workerd (Miniflare) against devstack.
//   node bench/cache-figures.mjs
// Prints: service calls per 1,000 requests for a Zipf-like key mix, and the
// router's latency (p50/p99) for uncached keys with the service up vs down.
import { startStack, request, sessionCookie, getJson, postJson } from "../tests/e2e/harness.mjs";
import { routableToken } from "../tests/e2e/tokens.mjs";

const N = Number(process.env.FIG_REQUESTS ?? 1000);
// 300 keys: sessions and tokens for the 3 known cells and for users of
// cells the service does not know (404s), drawn with Zipf(1.1) weights.
const keys = [];
for (let i = 0; i < 150; i++) keys.push({ cookie: sessionCookie(1 + (i % 3) + (i % 10 === 9 ? 20 + i : 0)) });
for (let i = 0; i < 150; i++) keys.push({ "private-token": routableToken("glpat-", { c: 1 + (i % 3) + (i % 10 === 9 ? 40 + i : 0), o: 1, u: i }) });
const weights = keys.map((_, i) => 1 / Math.pow(i + 1, 1.1));
const total = weights.reduce((a, b) => a + b, 0);
let seed = 42;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
function pick() {
  let r = rand() * total;
  for (let i = 0; i < keys.length; i++) if ((r -= weights[i]) <= 0) return keys[i];
  return keys.at(-1);
}
const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

const stack = await startStack({ ruleset: "session_token", topology: { cacheControl: "max-age=300" } });
try {
  const calls0 = (await getJson(`${stack.topology.admin}/_stats`)).classify_calls;
  const seen = new Set();
  for (let i = 0; i < N; i++) {
    const k = pick();
    seen.add(JSON.stringify(k));
    const res = await request(`${stack.url}/api/v4/user`, { headers: k });
    if (res.status !== 200) throw new Error(`status ${res.status}`);
  }
  const calls = (await getJson(`${stack.topology.admin}/_stats`)).classify_calls - calls0;
  console.log(`key mix: ${N} requests over ${seen.size} distinct keys (Zipf 1.1 over ${keys.length})`);
  console.log(`service calls: ${calls} for ${N} requests = ${((calls * 1000) / N).toFixed(1)} per 1,000 (${(100 - (calls * 100) / N).toFixed(1)} % answered from cache; tokens of one cell share one CELL_ID key)`);

  const measure = async (label, prefix) => {
    const ms = [];
    for (let i = 0; i < 60; i++) {
      const t = process.hrtime.bigint();
      const res = await request(`${stack.url}/`, { headers: { cookie: `_gitlab_session=cell-${prefix + i}-0123456789abcdef0123456789abcdef` } });
      ms.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (res.status !== 200) throw new Error(`${label}: status ${res.status}`);
    }
    console.log(`${label}: p50 ${pct(ms, 50).toFixed(1)} ms, p99 ${pct(ms, 99).toFixed(1)} ms (uncached keys, 60 requests)`);
  };
  await measure("service up  ", 1000);
  await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: true });
  await measure("service down", 2000);
  await postJson(`${stack.topology.admin}/_faults`, { refuse_connections: false, latency_ms: 5000 });
  await measure("service hung", 3000);
  console.log(`(timeout ${stack.vars.GITLAB_TOPOLOGY_TIMEOUT_MS} ms per attempt, 2 retries, back-off 50/100 ms with jitter)`);
} finally {
  await stack.stop();
}
