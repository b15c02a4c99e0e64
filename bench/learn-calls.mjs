// Learn calls per 1,000 requests for a realistic path mix under the
// `route_learning` ruleset (no Topology Service), through the real worker
// in workerd against `devstack up` with the shipped demo topology; the
// router asks the legacy cell, whose `/_stats` counts learn calls.
//   node bench/learn-calls.mjs            (FIG_REQUESTS=1000 by default)
// The same mix as bench/path-calls.mjs: namespaces drawn Zipf(1.1) from
// 300, the demo topology's 6 known ones hot and 294 no cell owns (the learn
// endpoint answers 404, cached per path for the negative TTL: devstack's
// max-age=10), projects drawn from 50 per namespace; plus the
// application's own routes (/dashboard, /api/v4, /users: fixed prefixes;
// /-/profile: fixed, exact).
import { known, namespaces, rand, namespace } from "./path-mix.mjs";
import { startDemoStack, request, getJson, requestLogs } from "../tests/e2e/harness.mjs";

const N = Number(process.env.FIG_REQUESTS ?? 1000);

/** One request of the mix: [share, path]. */
const KINDS = [
  [30, () => `/${namespace()}/project-${Math.floor(rand() * 50)}/-/tree/main`],
  [15, () => `/${namespace()}/app/-/merge_requests/${Math.floor(rand() * 20)}`],
  [10, () => `/api/v4/projects/${[1, 2, 200, 201, 300, 999][Math.floor(rand() * 6)]}`],
  [5, () => `/${namespace()}/repo.git/info/refs`],
  [15, () => "/dashboard/projects"],
  [10, () => "/-/profile"],
  [15, () => "/users/sign_in"],
];
const kindTotal = KINDS.reduce((a, [w]) => a + w, 0);
const next = () => {
  let r = rand() * kindTotal;
  for (const [w, make] of KINDS) if ((r -= w) <= 0) return make();
  return KINDS[0][1]();
};

const stack = await startDemoStack({ ruleset: "route_learning", vars: { GITLAB_TOPOLOGY_SERVICE_URL: undefined } });
try {
  const learnCalls = async () => (await getJson(`${stack.cells[1].url}/_stats`)).learn_calls;
  const before = await learnCalls();
  const started = Date.now();
  const byCell = {};
  for (let i = 0; i < N; i++) {
    const res = await request(stack.url + next());
    if (res.status >= 500) throw new Error(`${res.status}`);
    byCell[res.headers["x-demo-cell"]] = (byCell[res.headers["x-demo-cell"]] ?? 0) + 1;
  }
  const calls = (await learnCalls()) - before;
  console.log(`route_learning mix: ${N} requests in ${Date.now() - started} ms (${KINDS.map(([w]) => w).join("/")} % kinds; namespaces Zipf 1.1 over ${namespaces.length}, ${known.length} known)`);
  console.log(`learn calls: ${calls} = ${((calls * 1000) / N).toFixed(1)} per 1,000 requests; answered by cell ${JSON.stringify(byCell)}`);
  // Which requests asked (their log line's level is the service).
  await new Promise((r) => setTimeout(r, 200));
  const asked = {};
  for (const line of requestLogs(stack)) {
    if (line.cache !== "service") continue;
    const first = line.path.split("/")[1];
    const kind = first.startsWith("ns-") ? "unknown namespaces (404)" : known.includes(first) ? `known: ${first}` : `fixed: /${first}`;
    asked[kind] = (asked[kind] ?? 0) + 1;
  }
  console.log(`requests that made a learn call, by kind: ${JSON.stringify(asked)}`);
} finally {
  await stack.stop();
}
