// Service calls per 1,000 requests for a realistic mix of anonymous and
// authenticated traffic under the `cells` ruleset (path routing first),
// through the real worker in workerd against `devstack up` with the shipped
// demo topology.
//   node bench/path-calls.mjs            (FIG_REQUESTS=1000 by default)
// Namespaces are drawn Zipf(1.1) from 300: the demo topology's known ones
// (hot) and many no cell owns (cold: the service answers 404 and the path
// rule falls through to the session and token rules). The default negative
// TTL (devstack: max-age=10) applies, so a long run re-asks cold keys.
import { known, namespaces, rand, namespace } from "./path-mix.mjs";
import { startDemoStack, request, sessionCookie, getJson } from "../tests/e2e/harness.mjs";
import { routableToken } from "../tests/e2e/tokens.mjs";

const N = Number(process.env.FIG_REQUESTS ?? 1000);
const cell = () => 1 + Math.floor(rand() * 3);

/** One request of the mix: [share, path, headers]. */
const KINDS = [
  [30, () => [`/${namespace()}/project-${Math.floor(rand() * 50)}/-/tree/main`, {}]],
  [15, () => [`/${namespace()}/app/-/merge_requests`, { cookie: sessionCookie(cell()) }]],
  [10, () => [`/api/v4/projects/${[1, 2, 200, 201, 300, 999][Math.floor(rand() * 6)]}`, {}]],
  [5, () => [`/${namespace()}/repo.git/info/refs?service=git-upload-pack`, {}]],
  [15, () => ["/dashboard/projects", { cookie: sessionCookie(cell()) }]],
  [15, () => ["/api/v4/user", { "private-token": routableToken("glpat-", { c: cell(), o: 1, u: Math.floor(rand() * 100) }) }]],
  [10, () => ["/users/sign_in", {}]],
];
const kindTotal = KINDS.reduce((a, [w]) => a + w, 0);
const next = () => {
  let r = rand() * kindTotal;
  for (const [w, make] of KINDS) if ((r -= w) <= 0) return make();
  return KINDS[0][1]();
};

const stack = await startDemoStack({ ruleset: "cells" });
try {
  const stats = () => getJson(`${stack.topology.admin}/_stats`);
  const before = await stats();
  let fellThrough = 0;
  for (let i = 0; i < N; i++) {
    const [path, headers] = next();
    const res = await request(stack.url + path, { headers });
    if (res.status >= 500) throw new Error(`${path}: ${res.status}`);
  }
  await new Promise((r) => setTimeout(r, 200));
  for (const line of stack.logs) if (line.includes('"fell_through"')) fellThrough++;
  const after = await stats();
  const calls = after.classify_calls - before.classify_calls;
  const byType = Object.entries(after.by_type).map(([k, v]) => `${k} ${v - (before.by_type[k] ?? 0)}`).join(", ");
  console.log(`cells mix: ${N} requests (${KINDS.map(([w]) => w).join("/")} % kinds; namespaces Zipf 1.1 over ${namespaces.length}, ${known.length} known)`);
  console.log(`service calls: ${calls} = ${((calls * 1000) / N).toFixed(1)} per 1,000 requests (${byType})`);
  console.log(`requests handed on by a path rule (not-found, cached or asked): ${fellThrough}`);
} finally {
  await stack.stop();
}
