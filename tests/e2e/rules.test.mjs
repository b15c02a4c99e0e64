// The production ruleset (session_token) through the real worker in
// workerd: routable tokens in every place GitLab clients send them, the
// registry token endpoint, and tokens that must classify nothing.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { startStack, request, sessionCookie, getJson } from "./harness.mjs";
import { routableToken, basic } from "./tokens.mjs";

describe("session_token ruleset", () => {
  let stack;
  before(async () => {
    stack = await startStack({ ruleset: "session_token", cellRoutes: { 1: ["gitlab-org"], 2: ["acme"], 3: ["cell3-group"] } });
  });
  after(() => stack?.stop());

  const cellOf = async (path, headers) => {
    const res = await request(`${stack.url}${path}`, { headers });
    assert.equal(res.status, 200, res.text);
    return res.json();
  };

  test("a routable token reaches its cell from every header GitLab clients use", async () => {
    const pat2 = routableToken("glpat-", { c: 2, o: 1, u: 7 });
    const pat3 = routableToken("glpat-", { c: 3, o: 1, u: 9 });
    const cases = [
      [{ "private-token": pat2 }, "2"],
      [{ "job-token": routableToken("glcbt-", { c: 3, o: 1, p: 5 }) }, "3"],
      [{ authorization: `Bearer ${pat3}` }, "3"],
      [{ authorization: basic("oauth2", pat2) }, "2"],
      [{ "runner-token": routableToken("glrt-", { c: 3, o: 1, t: 2 }) }, "3"],
    ];
    for (const [headers, cell] of cases) {
      const echo = await cellOf("/api/v4/user", headers);
      assert.equal(echo.cell, cell, JSON.stringify(headers));
      assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "CELL_ID");
      assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "classify");
    }
    const stats = await getJson(`${stack.topology.admin}/_stats`);
    const bodies = stats.last_requests.map((r) => JSON.stringify(r.body));
    assert.ok(bodies.includes('{"type":"CELL_ID","value":"2"}'), bodies.join("\n"));
  });

  test("a base36 cell id is sent to the Topology Service in decimal", async () => {
    await cellOf("/api/v4/projects", { "private-token": routableToken("glpat-", { c: 11, o: 1 }) });
    const stats = await getJson(`${stack.topology.admin}/_stats`);
    assert.ok(stats.last_requests.some((r) => r.body?.type === "CELL_ID" && r.body.value === "11"));
  });

  test("tokens that fail their CRC, or are not routable, go to the legacy cell", async () => {
    const good = routableToken("glpat-", { c: 2, o: 1 });
    const flipped = good.slice(0, 10) + (good[10] === "A" ? "B" : "A") + good.slice(11);
    // The last character is the CRC's; change it to another one (a random
    // token ends in "0" one time in 36).
    const badCrc = good.slice(0, -1) + (good.at(-1) === "0" ? "1" : "0");
    for (const token of [flipped, badCrc, "glpat-kSaPeOD_-T0JxMi3p28B", "", "glpat-.01.000000000"]) {
      const echo = await cellOf("/api/v4/user", { "private-token": token });
      assert.equal(echo.cell, "1", token);
      assert.equal(echo.headers["x-gitlab-http-router-rule-action"], "proxy");
    }
  });

  test("a session cookie still routes by prefix", async () => {
    const echo = await cellOf("/", { cookie: sessionCookie(3) });
    assert.equal(echo.cell, "3");
    assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "SESSION_PREFIX");
  });

  test("/jwt/auth classifies the repository scope as a route claim", async () => {
    const echo = await cellOf("/jwt/auth?service=container_registry&scope=repository:acme/tools/image:push,pull", {});
    assert.equal(echo.cell, "2");
    assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "route");
    const echo3 = await cellOf("/jwt/auth?service=container_registry&scope=repository%3Acell3-group%2Fimage%3Apull", {});
    assert.equal(echo3.cell, "3");
  });

  test("a scope-less /jwt/auth falls through to the token rules", async () => {
    const echo = await cellOf("/jwt/auth?service=container_registry", { authorization: basic("me", routableToken("glpat-", { c: 3, o: 1 })) });
    assert.equal(echo.cell, "3");
    assert.equal(echo.headers["x-gitlab-http-router-rule-type"], "CELL_ID");
  });
});
