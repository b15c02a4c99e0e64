// Path routing (SPEC §9) through the real worker in workerd with
// the `cells` ruleset, in front of `devstack up` with the shipped demo
// topology: cell 2 owns cell2-group, acme, acme-org, projects 200/201,
// namespace 20 and serves cell2-group/demo over git http-backend; cell 3
// owns cell3-group, cell3-org, project 300, namespace 30.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startDemoStack, requestLogs, sessionCookie, getJson, scratchDir, via, assertClassifiedTo } from "./harness.mjs";

const stats = (stack) => getJson(`${stack.topology.admin}/_stats`);


describe("path routing with the cells ruleset", () => {
  let stack;
  before(async () => {
    stack = await startDemoStack();
  });
  after(async () => stack?.stop());

  test("anonymous web, API, feed and organization requests reach the owning cell", async () => {
    const cases = [
      ["/cell2-group/app", "2", "path_namespace"],
      ["/cell2-group/app/-/tree/main", "2", "path_namespace"],
      ["/Cell2-Group/App/-/issues", "2", "path_namespace"],
      ["/cell2-group/app.atom", "2", "path_namespace"],
      ["/acme.atom", "2", "path_namespace"],
      ["/groups/cell3-group/-/edit", "3", "path_group"],
      ["/cell3-group", "3", "path_namespace"],
      ["/o/acme-org/projects", "2", "path_organization"],
      ["/o/cell3-org", "3", "path_organization"],
      ["/api/v4/projects/200", "2", "api_project_id"],
      ["/api/v4/projects/300/issues?state=opened", "3", "api_project_id"],
      ["/api/v4/projects/cell2-group%2Fapp", "2", "api_project_path"],
      ["/api/v4/projects/cell3-group%2Fsub%2Ftool/repository/tree", "3", "api_project_path"],
      ["/api/v4/groups/20", "2", "api_namespace_id"],
      ["/api/v4/groups/cell3-group", "3", "api_namespace_path"],
      ["/api/v4/users/30", "3", "api_user_id"],
      ["/-/snippets/200/raw", "2", "path_snippet"],
      ["/gitlab-org/gitlab/-/tree/master", "1", "path_namespace"],
    ];
    await assertClassifiedTo(stack, cases);
  });

  test("reserved paths never cost a service call", async () => {
    const before = (await stats(stack)).classify_calls;
    for (const path of ["/users/sign_in", "/-/health", "/api/v4/version", "/explore/projects", "/help", "/admin", "/assets/app.css", "/API/v4/projects", "/.well-known/openid-configuration", "/robots.txt", "/favicon.ico", "/search?search=x", "/dashboard/projects"]) {
      const r = await via(stack, path);
      assert.equal(r.cell, "1", path);
      // The sign-in form is spread over GITLAB_CELLS (none listed here:
      // the legacy cell), still without a service call.
      assert.equal(r.log.rule, path === "/users/sign_in" ? "sign_in_spread" : "legacy", path);
      assert.equal(r.log.fell_through, undefined, path);
    }
    assert.equal((await stats(stack)).classify_calls, before, "no classify call for reserved paths");
  });

  test("an unknown namespace falls back to the session rule, then the legacy cell; negative-cached", async () => {
    const cookie = sessionCookie(3);
    // The session's own answer first, so only the path claim costs a call below.
    assert.equal((await via(stack, "/dashboard", { headers: { cookie } })).cell, "3");
    let calls = (await stats(stack)).classify_calls;

    const first = await via(stack, "/nobody-owns-this/app", { headers: { cookie } });
    assert.equal(first.cell, "3");
    assert.equal(first.log.rule, "session_cookie");
    assert.deepEqual(first.log.fell_through, ["path_namespace"]);
    assert.equal(first.log.attempts, 1);
    assert.equal((await stats(stack)).classify_calls, calls + 1, "one call for the unknown route");
    calls += 1;

    const again = await via(stack, "/nobody-owns-this/app", { headers: { cookie } });
    assert.equal(again.cell, "3");
    assert.deepEqual(again.log.fell_through, ["path_namespace"]);
    assert.equal((await stats(stack)).classify_calls, calls, "the not-found answer is cached");

    const anonymous = await via(stack, "/nobody-owns-this/other");
    assert.equal(anonymous.cell, "1");
    assert.equal(anonymous.log.rule, "legacy");
    assert.deepEqual(anonymous.log.fell_through, ["path_namespace"]);
    assert.equal((await stats(stack)).classify_calls, calls, "same top-level namespace, same cached answer");

    const otherAnonymous = await via(stack, "/someone-else/x");
    assert.equal(otherAnonymous.cell, "1");
    assert.equal((await stats(stack)).classify_calls, calls + 1);
    await via(stack, "/someone-else/y");
    assert.equal((await stats(stack)).classify_calls, calls + 1);
  });

  test("a project on cell 2 wins over a cell-3 session (the path decides first)", async () => {
    const r = await via(stack, "/cell2-group/app/-/issues", { headers: { cookie: sessionCookie(3) } });
    assert.equal(r.cell, "2");
    assert.equal(r.log.rule, "path_namespace");
  });

  test("git clone, push and ls-remote through the router", async () => {
    const home = scratchDir("router-git-");
    const env = { ...process.env, HOME: home, GIT_CONFIG_NOSYSTEM: "1", GIT_TERMINAL_PROMPT: "0" };
    // Asynchronous, so the router's log lines keep arriving while git runs.
    const git = (args, cwd = home) =>
      new Promise((resolve) => {
        const child = spawn("git", ["-c", "user.name=Router Test", "-c", "user.email=router@example.com", ...args], { cwd, env });
        let stderr = "";
        child.stderr.on("data", (d) => (stderr += d));
        const timer = setTimeout(() => child.kill("SIGKILL"), 60000);
        child.on("close", (status) => {
          clearTimeout(timer);
          resolve({ status, stderr });
        });
      });
    const from = stack.logs.length;

    const clone = (await git(["clone", `${stack.url}/cell2-group/demo.git`, "demo"]));
    assert.equal(clone.status, 0, clone.stderr);
    assert.match(readFileSync(join(home, "demo", "README.md"), "utf8"), /./);

    writeFileSync(join(home, "demo", "pushed.txt"), "through the router\n");
    assert.equal((await git(["add", "pushed.txt"], join(home, "demo"))).status, 0);
    assert.equal((await git(["commit", "-m", "push through the router"], join(home, "demo"))).status, 0);
    const push = (await git(["push", "origin", "HEAD:main"], join(home, "demo")));
    assert.equal(push.status, 0, push.stderr);

    const second = (await git(["clone", `${stack.url}/cell2-group/demo.git`, "again"]));
    assert.equal(second.status, 0, second.stderr);
    assert.equal(readFileSync(join(home, "again", "pushed.txt"), "utf8"), "through the router\n");

    await new Promise((r) => setTimeout(r, 100));
    const gitLines = requestLogs(stack, from).filter((l) => l.path.startsWith("/cell2-group/demo.git/"));
    assert.ok(gitLines.some((l) => l.path.endsWith("/git-receive-pack")), `the push went through the router: ${JSON.stringify(requestLogs(stack, from).map((l) => [l.method, l.path, l.status]))}`);
    for (const l of gitLines) {
      assert.equal(l.rule, "path_namespace");
      assert.equal(l.upstream, stack.cells[2].addr);
    }

    await new Promise((r) => setTimeout(r, 100));
    const fromUnknown = stack.logs.length;
    const unknown = (await git(["ls-remote", `${stack.url}/unknown-group/nothing.git`]));
    assert.notEqual(unknown.status, 0, "no such repository");
    await new Promise((r) => setTimeout(r, 100));
    const lines = requestLogs(stack, fromUnknown);
    assert.ok(lines.length >= 1);
    for (const l of lines) {
      assert.equal(l.upstream, stack.cells[1].addr, "the legacy cell answered");
      assert.deepEqual(l.fell_through, ["path_namespace"]);
    }
  });

  test("a 255-character top-level namespace is claimed (and asked about once)", async () => {
    const before = (await stats(stack)).classify_calls;
    for (const path of ["/" + "a".repeat(255) + "/x", "/groups/" + "a".repeat(255) + ".json"]) {
      const r = await via(stack, path);
      assert.equal(r.cell, "1", path);
      assert.equal(r.log.rule, "legacy", path);
      assert.equal(r.log.fell_through?.length, 1, `${path}: ${JSON.stringify(r.log.fell_through)}`);
    }
    assert.equal((await stats(stack)).classify_calls, before + 1, "one call for the unknown route, then its cached answer");
  });

  test("hostile paths never produce an unintended claim or a 5xx", async () => {
    const hostile = [
      "/%2e%2e/admin",
      "/%2E%2E/%2e%2e/admin",
      "/a%00b/c",
      "/a%0d%0ab/c",
      "/%01/x",
      "/cell2-group%2Fapp",
      "//cell2-group/app",
      "///",
      "/" + "a".repeat(300) + "/x",
      // One over the 255 characters a namespace path may have
      // (validate.maxLength in rules/cells.json).
      "/" + "a".repeat(256) + "/x",
      "/groups/" + "b".repeat(256) + ".json",
      "/o/" + "c".repeat(256),
      "/api/v4/projects/" + "d".repeat(256) + "%2Fapp",
      "/api/v4/groups/" + "e".repeat(256),
      "/%61dmin/users",
      "/-cell2-group/app",
      "/cell2%20group",
      "/..%2f..%2fadmin",
      "/api/v4/projects/%00%2Fx",
      "/api/v4/projects/cell2-group%252Fapp",
      "/api/v4/groups/%ff",
      "/o/%00",
    ];
    const before = (await stats(stack)).classify_calls;
    for (const path of hostile) {
      const r = await via(stack, path);
      assert.ok(r.status < 500, `${path}: ${r.status}`);
      assert.equal(r.log.rule, "legacy", `${path} decided by ${r.log.rule}`);
    }
    assert.equal((await stats(stack)).classify_calls, before, "hostile paths cost no service call");
  });
});
