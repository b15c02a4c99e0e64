// Hostile input through the real worker in workerd.
//
// Every case is generated from a family × its variations, with the outcome
// it must have: routed to the cell named (checked by the echo's cell and by
// each cell's request counter), or a clear 4xx. Never a 5xx from the worker
// (the refused-upstream family points at a closed port on purpose and wants
// its 502), never a panic or wasm trap in workerd's output, never a request
// at a cell that did not answer. Cell 3 (and registry r3) is the victim:
// hostile variants name it, well-formed controls name cell 2, so cell 3 may
// only see the few cases that legitimately route there, counted exactly.
//
// Limits found here (and written into docs/fuzzing.md):
// * workerd (1.20261117) answers 431 "message head is too large" itself
//   when the request head reaches about 449 KiB (HEAD_LIMIT below), and 414
//   "URI too long" from 64 KiB of request target; up to 384 KiB of one
//   header routes normally. It refuses a raw `"` or `<` in the query with
//   400 "invalid URI".
// * a Host that is no host name (a space, a comma from two Host headers, a
//   path, userinfo) reaches the worker, which answers 400 itself.
// * the demo cells' HTTP server (hyper) refuses more than 100 header lines
//   with 431, which the router passes back (outcome 4xx:upstream).
// * workerd refuses CR, NUL and bad header names with 400, unknown methods
//   with 501, and answers 500 on its own (logging "Uncaught exception:
//   kj/...") for a Host it cannot put in a URL, an absolute-form target for
//   another host, two Content-Length values or a non-path target: those
//   never reach the worker (no router log line), so they are outcome
//   5xx:runtime, allowed only for the raw cases that provoke them. Behind
//   Cloudflare's edge they are refused before any worker runs.
// * a bare LF ends a header line and obs-fold continues one (workerd
//   unfolds it): the router sees exactly what workerd parsed.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { startStack, HEX32 } from "./harness.mjs";
import { routableToken } from "./tokens.mjs";
import {
  MARK, KIB, HEAD_LIMIT, session, rawHead, craftToken, crcOf, basicAuth, jwt, b64url, startCell, stopChild,
  makeContext, runCase, commonProblems, summary, RANDOM16, closedPort,
} from "./hostile-lib.mjs";

const CELL_ROUTES = { 1: ["gitlab-org"], 2: ["acme"], 3: ["cell3-group"] };
const hostOf = (ctx) => new URL(ctx.stack.url).host;
const tok2 = routableToken("glpat-", { c: 2, o: 1, u: 7 }, RANDOM16);
const tok3 = routableToken("glpat-", { c: 3, o: 1, u: 9 }, RANDOM16);

// ===========================================================================
// Case generation: session_token stack.

function sessionTokenCases() {
  const cases = [];
  const add = (family, name, spec) => cases.push({ family, name, ...spec });

  // -- oversized headers and cookies ----------------------------------------
  const small = [1, 8, 16, 32, 64, 96, 120, 128, 192, 256, 384];
  const large = [512, 1024];
  const placements = {
    "junk header + cell-2 session": (n) => ({ headers: { "x-junk": "j".repeat(n), cookie: session(2) }, ok: "cell:2" }),
    "junk cookie before cell-2 session": (n) => ({ headers: { cookie: `junk=${"j".repeat(n)}; ${session(2)}` }, ok: "cell:2" }),
    "oversized cell-3 session value": (n) => ({ headers: { cookie: `_gitlab_session=cell-3-${HEX32}${"0".repeat(n)}` }, ok: "cell:1" }),
    "huge private-token naming cell 3": (n) => ({ headers: { "private-token": craftToken({ prefix: "a".repeat(n) }) }, ok: "cell:1" }),
    "huge bearer": (n) => ({ headers: { authorization: `Bearer ${"A".repeat(n)}.01.0000000aa` }, ok: "cell:1" }),
  };
  for (const [pname, make] of Object.entries(placements)) {
    for (const kib of [...small, ...large]) {
      const { headers, ok } = make(kib * KIB);
      add("oversized-header", `${pname}, ${kib} KiB`, {
        path: "/api/v4/user",
        headers,
        // Below workerd's head limit the request routes; at or above it
        // workerd answers 431 itself (or drops the connection).
        expect: kib * KIB < HEAD_LIMIT ? [ok] : ["4xx:runtime", "error"],
      });
    }
  }
  for (const n of [10, 50, 90, 94, 95, 100, 150, 500, 1000]) {
    const headers = { cookie: session(2) };
    for (let i = 0; i < n; i++) headers[`x-h${i}`] = String(i);
    // hyper (the demo cell) takes at most 100 header lines; the router adds
    // a few of its own, so from ~95 client headers the cell answers 431.
    add("oversized-header", `${n} headers`, { headers, expect: ["cell:2", "4xx"] });
  }
  for (const kib of [1, 8, 16, 32, 60, 64, 96, 120, 128, 256]) {
    // workerd answers 414 itself from 64 KiB of request target (the demo
    // cell, hyper, would too).
    add("oversized-header", `${kib} KiB URL path`, { path: `/api/v4/${"p".repeat(kib * KIB)}`, headers: { cookie: session(2) }, expect: kib < 64 ? ["cell:2"] : ["4xx:runtime", "error"] });
  }

  // -- thousands of cookies ---------------------------------------------------
  for (const count of [100, 1000, 5000, 10000]) {
    const junk = Array.from({ length: count }, (_, i) => `c${i}=${i}`);
    const at = { first: 0, middle: count >> 1, last: count };
    for (const [where, idx] of Object.entries(at)) {
      const list = [...junk];
      list.splice(idx, 0, session(2));
      add("cookie-flood", `${count} cookies, cell-2 session ${where}`, { headers: { cookie: list.join("; ") }, expect: ["cell:2"] });
    }
    add("cookie-flood", `${count} cookies, no session`, { headers: { cookie: junk.join("; ") }, expect: ["cell:1"] });
  }
  for (const count of [100, 1000]) {
    const bad = Array.from({ length: count }, (_, i) => `_gitlab_session_${i.toString(16)}=cell-3-${HEX32.slice(1)}`);
    add("cookie-flood", `${count} near-miss cell-3 sessions`, { headers: { cookie: bad.join("; ") }, expect: ["cell:1"] });
    add("cookie-flood", `${count} near-miss cell-3 sessions, then a cell-2 one`, { headers: { cookie: [...bad, session(2)].join("; ") }, expect: ["cell:2"] });
  }
  for (const count of [1000, 10000]) {
    add("cookie-flood", `${count} pieces without '='`, { headers: { cookie: `${"x;".repeat(count)} ${session(2)}` }, expect: ["cell:2"] });
    add("cookie-flood", `${count} empty pieces`, { headers: { cookie: `${";".repeat(count)}${session(2)}` }, expect: ["cell:2"] });
  }
  // Two Cookie header lines (HTTP/1.1 clients must not send them; HTTP/2
  // splits cookies, and Cloudflare joins them with "; "). workerd joins two
  // lines with ", ", which makes the session unreadable: the legacy cell.
  for (const [first, second, ok] of [["a=1", session(2), ["cell:1", "cell:2"]], [session(2), session(3), ["cell:1", "cell:2"]], ["a=1", session(3, "_gitlab_session", HEX32.slice(1)), ["cell:1"]]]) {
    add("cookie-flood", `two Cookie lines: ${first.slice(0, 24)} | ${second.slice(0, 24)}`, {
      raw: (ctx) => rawHead([`GET / HTTP/1.1`, `Host: ${hostOf(ctx)}`, `Cookie: ${first}`, `Cookie: ${second}`, `Connection: close`]),
      expect: ok,
    });
  }

  // -- duplicate session cookies: the first cookie whose name AND value match wins
  const s3 = `cell-3-${HEX32}`;
  const combos = [
    ["cell-2 then cell-3", [session(2), session(3)], "cell:2"],
    ["cell-3 then cell-2 (first wins: legitimately cell 3)", [session(3), session(2)], "cell:3"],
    ["legacy (no prefix) then cell-2", [`_gitlab_session=${HEX32}`, session(2)], "cell:2"],
    ["short-hex cell-3 then cell-2", [`_gitlab_session=cell-3-${HEX32.slice(1)}`, session(2)], "cell:2"],
    ["non-hex name suffix cell-3 then cell-2", [`_gitlab_session_xyz=${s3}`, session(2)], "cell:2"],
    ["upper-case name cell-3 then cell-2", [`_GITLAB_SESSION=${s3}`, session(2)], "cell:2"],
    ["hex-suffixed cell-2 then plain cell-3", [session(2, "_gitlab_session_beef"), session(3)], "cell:2"],
    ["unknown cell-99 then cell-3 (first match decides, 404: legacy)", [session(99), session(3)], "cell:1"],
    ["prefixed name x_gitlab_session cell-3 then cell-2", [`x_gitlab_session=${s3}`, session(2)], "cell:2"],
    ["quoted cell-2 then cell-3", [`_gitlab_session="cell-2-${HEX32}"`, session(3)], "cell:2"],
    ["cell-3 with trailing junk then cell-2", [`_gitlab_session=${s3}-x`, session(2)], "cell:2"],
    ["zero-padded cell-03 (404: legacy)", [`_gitlab_session=cell-03-${HEX32}`], "cell:1"],
    ["upper-case hex cell-3 then cell-2", [`_gitlab_session=cell-3-${HEX32.toUpperCase()}`, session(2)], "cell:2"],
    ["empty value then cell-2", [`_gitlab_session=`, session(2)], "cell:2"],
  ];
  for (const sep of ["; ", ";", " ;  ", ";\t"]) {
    for (const [name, list, ok] of combos) {
      add("duplicate-session", `${name} [sep ${JSON.stringify(sep)}]`, { headers: { cookie: list.join(sep) }, expect: [ok] });
    }
  }

  // -- routable tokens: broken in every field, in every header ----------------
  const standardAlphabet = (b) => b.toString("base64");
  const mutations = [
    ["valid c:2 (control)", () => craftToken({ payload: "c:2\no:1" }), "cell:2"],
    ["bad CRC", () => { const t = craftToken(); return t.slice(0, -1) + (t.at(-1) === "0" ? "1" : "0"); }],
    ["upper-case CRC", () => craftToken({ crc: (s) => crcOf(s).toUpperCase() })],
    ["CRC one char short", () => craftToken().slice(0, -1)],
    ["CRC of another token", () => craftToken({ crc: () => crcOf("glpat-other.01.10") })],
    ["truncated in the middle", () => craftToken().slice(0, 20)],
    ["base64 truncated, length and CRC fixed", () => craftToken({ encode: (b) => b.toString("base64url").slice(0, -4) })],
    ["bad base64 character", () => craftToken({ encode: (b) => `*${b.toString("base64url").slice(1)}` })],
    ["standard alphabet (+ and /)", () => craftToken({ random: Buffer.alloc(16, 0xfb), encode: standardAlphabet })],
    ["padded base64", () => craftToken({ payload: "c:3\no:1\nu:1", encode: standardAlphabet })],
    ["version 02", () => craftToken({ version: "02" })],
    ["version 1", () => craftToken({ version: "1" })],
    ["huge prefix (2000 chars, valid CRC)", () => craftToken({ prefix: "g".repeat(2000) })],
    ["payload over 255 bytes (length byte wraps)", () => craftToken({ payload: `c:3\no:1\nu:${"1".repeat(300)}` })],
    ["length field off by one", () => craftToken({ lenField: "zz" })],
    ["payload length byte wrong", () => craftToken({ lengthByte: 3 })],
    ["c not base36", () => craftToken({ payload: "c:3!\no:1" })],
    ["duplicate c keys (3 then 2)", () => craftToken({ payload: "c:3\nc:2" })],
    ["empty payload", () => craftToken({ payload: "" })],
    ["no c field", () => craftToken({ payload: "o:1\nu:7" })],
    ["c overflows u64", () => craftToken({ payload: "c:zzzzzzzzzzzzzzzz" })],
    ["prefix with a dot", () => craftToken({ prefix: "gl.pat-" })],
    ["JSON in the payload", () => craftToken({ payload: 'c:3","value":"2' })],
  ];
  const tokenPlacements = {
    "PRIVATE-TOKEN": (t) => ({ "private-token": t }),
    "JOB-TOKEN": (t) => ({ "job-token": t }),
    "RUNNER-TOKEN": (t) => ({ "runner-token": t }),
    "X-GITLAB-RUNNER-TOKEN": (t) => ({ "x-gitlab-runner-token": t }),
    "Authorization: Bearer": (t) => ({ authorization: `Bearer ${t}` }),
    "Authorization: Basic": (t) => ({ authorization: basicAuth("oauth2", t) }),
  };
  for (const [mname, make, ok = "cell:1"] of mutations) {
    for (const [pname, place] of Object.entries(tokenPlacements)) {
      const token = make();
      add("routable-token", `${mname} in ${pname}`, {
        path: "/api/v4/user",
        headers: place(token),
        expect: [ok],
        check: (r) => (ok === "cell:2" && r.echo?.headers?.["x-gitlab-http-router-rule-type"] !== "CELL_ID" ? ["rule type is not CELL_ID"] : []),
      });
    }
  }

  // -- JWTs where the session_token rules look for tokens ---------------------
  const claims3 = { iss: "gitlab-issuer", aud: "container_registry", sub: "root", access: [{ type: "repository", name: "cell3-group/img", actions: ["pull", "push"] }] };
  const valid = jwt({ alg: "RS256", typ: "JWT" }, claims3);
  const jwts = [
    ["RS256-shaped, claims name cell3-group", valid],
    ["alg none", jwt({ alg: "none", typ: "JWT" }, claims3, "")],
    ["alg none, signature kept", jwt({ alg: "none" }, claims3)],
    ["two parts", valid.split(".").slice(0, 2).join(".")],
    ["four parts", `${valid}.eHh4`],
    ["truncated at 30%", valid.slice(0, Math.floor(valid.length * 0.3))],
    ["truncated at 99%", valid.slice(0, -1)],
    ["huge (100 KiB of claims)", jwt({ alg: "RS256" }, { ...claims3, pad: "x".repeat(75 * KIB) })],
    ["claims not JSON", `${b64url('{"alg":"RS256"}')}.${b64url("not json")}.c2ln`],
    ["header not JSON", `${b64url("{{")}.${b64url(JSON.stringify(claims3))}.c2ln`],
    ["padded base64 parts", `${Buffer.from('{"alg":"RS256"}').toString("base64")}.${Buffer.from(JSON.stringify(claims3)).toString("base64")}.c2ln`],
    ["claims smuggling JSON in the repository name", jwt({ alg: "RS256" }, { access: [{ type: "repository", name: 'acme/img","route":"cell3-group', actions: ["pull"] }] })],
    ["deeply nested claims", `${b64url('{"alg":"RS256"}')}.${b64url("[".repeat(5000) + "]".repeat(5000))}.c2ln`],
  ];
  const jwtEndpoints = [
    ["/jwt/auth, no scope", "/jwt/auth?service=container_registry", "cell:1"],
    ["/jwt/auth, acme scope", "/jwt/auth?service=container_registry&scope=repository:acme/img:pull", "cell:2"],
    ["/api/v4/user", "/api/v4/user", "cell:1"],
  ];
  for (const [jname, token] of jwts) {
    for (const [ename, path, ok] of jwtEndpoints) {
      add("jwt", `${jname} at ${ename}`, { path, headers: { authorization: `Bearer ${token}` }, expect: [ok] });
    }
  }

  // -- /jwt/auth scopes that try to smuggle JSON or a second repository -------
  const scopes = [
    ["plain acme scope (control)", "repository:acme/img:pull", "cell:2"],
    ["percent-encoded acme scope", "repository%3Aacme%2Fimg%3Apull", "cell:2"],
    // workerd refuses a raw `"` in the query (400 "invalid URI"); the
    // encoded spelling below reaches the router.
    ["quotes closing the JSON string", 'repository:acme/x","route":"cell3-group:pull', ["cell:1", "4xx:runtime"]],
    ["encoded quotes", "repository:acme/x%22%2C%22route%22%3A%22cell3-group:pull", "cell:1"],
    ["backslash escape", "repository:acme/x%5C%22:pull", "cell:1"],
    ["newline then a cell-3 scope", "repository:acme/x:pull%0Arepository:cell3-group/x:pull", "cell:1"],
    ["NUL after the actions", "repository:cell3-group/x:pull%00", "cell:1"],
    ["two scopes in one parameter (space)", "repository:cell3-group/x:pull+repository:acme/y:pull", "cell:1"],
    ["dot-dot in the repository", "repository:cell3-group/../acme/x:pull", "cell:1"],
    ["upper-case repository", "repository:CELL3-GROUP/x:pull", "cell:1"],
    ["unicode lookalike", "repository:cell3-gr%C3%B6up/x:pull", "cell:1"],
    ["empty actions", "repository:cell3-group/x:", "cell:1"],
    ["repository type typo", "repositry:cell3-group/x:pull", "cell:1"],
  ];
  for (const [sname, scope, ok] of scopes) {
    add("classify-smuggle", `scope ${sname}`, { path: `/jwt/auth?service=container_registry&scope=${scope}`, expect: [ok].flat() });
  }
  add("classify-smuggle", "acme scope first, cell-3 scope second", { path: "/jwt/auth?scope=repository:acme/img:pull&scope=repository:cell3-group/x:pull", expect: ["cell:2"] });
  add("classify-smuggle", "junk scope, then acme scope", { path: "/jwt/auth?scope=registry:catalog:*&scope=repository:acme/img:pull", expect: ["cell:2"] });
  add("classify-smuggle", "Scope (capitalised) naming cell 3", { path: "/jwt/auth?Scope=repository:cell3-group/x:pull", expect: ["cell:1"] });
  add("classify-smuggle", "scope[] naming cell 3", { path: "/jwt/auth?scope[]=repository:cell3-group/x:pull", expect: ["cell:1"] });
  const sessionValues = [
    'cell-1","value":"cell-3',
    `cell-1","value":"cell-3-${HEX32}`,
    `cell-2-${HEX32}","value":"cell-3`,
    `cell-3-${HEX32.slice(0, 16)}","x":"${HEX32.slice(16)}`,
    `cell-3\\u002d${HEX32}`,
    `cell-3%2D${HEX32}`,
    `{"type":"SESSION_PREFIX","value":"cell-3"}`,
    `cell-3-${HEX32}\\`,
  ];
  for (const v of sessionValues) {
    add("classify-smuggle", `session cookie ${v.slice(0, 40)}`, { headers: { cookie: `_gitlab_session=${v}` }, expect: v.startsWith(`cell-2-${HEX32}"`) ? ["cell:1", "cell:2"] : ["cell:1"] });
  }
  for (const pw of [`${tok3}"`, `"${tok3}`, `${tok3}\\`]) {
    add("classify-smuggle", `basic password ${JSON.stringify(pw.slice(-12))}`, { headers: { authorization: basicAuth("me", pw) }, expect: ["cell:1"] });
  }

  // -- path normalization on the session_token rules (/jwt/auth) ------------
  // Paths go out verbatim. workerd resolves literal "." and ".." itself;
  // fetch (WHATWG) also turns "\\" into "/" and resolves %2e dot segments
  // when the router forwards, so the router has to classify that same
  // path: the common check compares what it logged with what the cell got.
  const scope = "scope=repository:acme/img:pull";
  for (const [pname, path, ok] of [
    ["/jwt/./auth", `/jwt/./auth?${scope}`, "cell:2"],
    ["/jwt/x/../auth", `/jwt/x/../auth?${scope}`, "cell:2"],
    ["/jwt/%2e/auth", `/jwt/%2e/auth?${scope}`, "cell:2"],
    ["/jwt/%2E/auth", `/jwt/%2E/auth?${scope}`, "cell:2"],
    ["/jwt/x/%2e%2e/auth", `/jwt/x/%2e%2e/auth?${scope}`, "cell:2"],
    ["/jwt/x/.%2E/auth", `/jwt/x/.%2E/auth?${scope}`, "cell:2"],
    ["/jwt/x/%2E./auth", `/jwt/x/%2E./auth?${scope}`, "cell:2"],
    ["/jwt\\auth", `/jwt\\auth?${scope}`, "cell:2"],
    ["/jwt\\x\\..\\auth", `/jwt\\x\\..\\auth?${scope}`, "cell:2"],
    ["/jwt/auth/", `/jwt/auth/?${scope}`, "cell:1"],
    ["/jwt/auth/.", `/jwt/auth/.?${scope}`, "cell:1"],
    ["/jwt/auth/%2e%2e/auth", `/jwt/auth/%2e%2e/auth?${scope}`, "cell:2"],
    ["/JWT/AUTH", `/JWT/AUTH?${scope}`, "cell:1"],
    ["/jwt/%61uth", `/jwt/%61uth?${scope}`, "cell:1"],
    ["/jwt/auth;x", `/jwt/auth;x?${scope}`, "cell:1"],
    ["//jwt/auth", `//jwt/auth?${scope}`, "cell:1"],
    ["/jwt/auth%3F", `/jwt/auth%3F${scope}`, "cell:1"],
    ["/jwt/auth%00", `/jwt/auth%00?${scope}`, "cell:1"],
    ["/jwt/auth..", `/jwt/auth..?${scope}`, "cell:1"],
    ["/x/../../../jwt/auth", `/x/../../../jwt/auth?${scope}`, "cell:2"],
  ]) {
    // A 4xx would be a fine answer too; routing elsewhere is not.
    add("path-normalization", pname, { path, expect: [ok, "4xx"] });
  }

  // -- header injection: what node:http refuses, sent raw --------------------
  const injections = {
    "router action": `X-Gitlab-Http-Router-Rule-Action: ${MARK}`,
    "router type": `X-Gitlab-Http-Router-Rule-Type: ${MARK}`,
    "forwarded host": `X-Forwarded-Host: ${MARK}.example`,
    "forwarded proto": `X-Forwarded-Proto: ${MARK}`,
    "cell-2 session cookie": `Cookie: ${session(2)}`,
  };
  const techniques = {
    "own line (CRLF)": (h) => [`X-A: a`, h],
    "bare LF": (h) => [`X-A: a\n${h}`],
    "bare CR": (h) => [`X-A: a\r${h}`],
    "obs-fold (SP)": (h) => [`X-A: a`, ` ${h}`],
    "obs-fold (HTAB)": (h) => [`X-A: a`, `\t${h}`],
    "NUL": (h) => [`X-A: a\0${h}`],
  };
  for (const [iname, header] of Object.entries(injections)) {
    for (const [tname, lines] of Object.entries(techniques)) {
      add("header-injection", `${iname} via ${tname}`, {
        raw: (ctx) => rawHead([`GET /api/v4/user HTTP/1.1`, `Host: ${hostOf(ctx)}`, ...lines(header), `Connection: close`]),
        expect: iname.includes("cookie") ? ["cell:1", "cell:2", "4xx"] : ["cell:1", "4xx"],
      });
    }
  }
  // and what node:http itself refuses to send
  for (const [name, value] of [["x-a", "a\r\nx-gitlab-http-router-rule-action: x"], ["x-a", "a\nb"], ["x-a", "a\0b"], ["x a", "b"], ["x-a", "\u0100"]]) {
    add("header-injection", `node:http refuses ${JSON.stringify(name)}: ${JSON.stringify(value)}`, { headers: { [name]: value }, expect: ["error:ERR_INVALID_CHAR", "error:ERR_INVALID_HTTP_TOKEN"] });
  }
  for (const [lname, line] of [
    ["space before colon", `X-Gitlab-Http-Router-Rule-Action : ${MARK}`],
    ["no colon", `X-Gitlab-Http-Router-Rule-Action ${MARK}`],
    ["empty name", `: ${MARK}`],
    ["8 KiB name", `X-${"n".repeat(8 * KIB)}: 1`],
    ["DEL in value", `X-A: a\x7fb`],
    ["VT and FF in value", `X-A: a\x0b\x0cb`],
    ["name with parentheses", `X(A): 1`],
    ["duplicate router header", `X-Gitlab-Http-Router-Rule-Action: ${MARK}\r\nX-Gitlab-Http-Router-Rule-Action: ${MARK}2`],
  ]) {
    add("header-injection", lname, { raw: (ctx) => rawHead([`GET / HTTP/1.1`, `Host: ${hostOf(ctx)}`, line, `Connection: close`]), expect: ["cell:1", "4xx"] });
  }
  add("header-injection", "Transfer-Encoding and Content-Length together (pipelined second request)", {
    raw: (ctx) => rawHead([`POST /first HTTP/1.1`, `Host: ${hostOf(ctx)}`, `Content-Length: 4`, `Transfer-Encoding: chunked`], { body: `0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: ${hostOf(ctx)}\r\nConnection: close\r\n\r\n` }),
    expect: ["cell:1", "4xx"],
    maxRequests: 2,
    routerLines: 2,
    responses: 2,
    check: (r) => {
      // The second request is the client's own, routed like any other: the
      // router logged it, so nothing slipped past it to the cell.
      const paths = r.counters.cells["1"].paths;
      return paths.includes("/smuggled") && !r.routerLines.some((l) => l.path === "/smuggled") ? ["/smuggled reached cell 1 without a router log line"] : [];
    },
  });
  add("header-injection", "two Content-Length values", {
    raw: (ctx) => rawHead([`POST / HTTP/1.1`, `Host: ${hostOf(ctx)}`, `Content-Length: 4`, `Content-Length: 5`, `Connection: close`], { body: "abcde" }),
    expect: ["4xx", "5xx:runtime"],
  });

  // -- non-UTF-8 and Unicode-whitespace bytes in headers, cookies, tokens, paths
  const byteSeqs = {
    "0x80": [0x80],
    "lone 0xC3": [0xc3],
    "0xC3 0x28": [0xc3, 0x28],
    "latin1 é": [0xe9],
    "0xFF 0xFE": [0xff, 0xfe],
    "UTF-8 emoji": [0xf0, 0x9f, 0x98, 0x80],
    "UTF-8 surrogate": [0xed, 0xa0, 0x80],
    "UTF-8 NBSP (U+00A0)": [0xc2, 0xa0],
    "UTF-8 EM SPACE (U+2003)": [0xe2, 0x80, 0x83],
    "UTF-8 IDEOGRAPHIC SPACE (U+3000)": [0xe3, 0x80, 0x80],
  };
  const bytePlacements = {
    "junk header value (with a cell-2 session)": (b) => [Buffer.concat([Buffer.from("X-Junk: a"), b, Buffer.from("z")]), `Cookie: ${session(2)}`],
    "after a cell-3 session value": (b) => [Buffer.concat([Buffer.from(`Cookie: ${session(3)}`), b])],
    "before a cell-3 session name": (b) => [Buffer.concat([Buffer.from("Cookie: a=1;"), b, Buffer.from(session(3))])],
    "after a cell-3 private token": (b) => [Buffer.concat([Buffer.from(`Private-Token: ${tok3}`), b])],
  };
  for (const [bname, bytes] of Object.entries(byteSeqs)) {
    const b = Buffer.from(bytes);
    for (const [pname, lines] of Object.entries(bytePlacements)) {
      add("non-utf8", `${bname} ${pname}`, {
        raw: (ctx) => rawHead([`GET /api/v4/user HTTP/1.1`, `Host: ${hostOf(ctx)}`, ...lines(b), `Connection: close`]),
        expect: pname.startsWith("junk") ? ["cell:2", "4xx"] : ["cell:1", "4xx"],
      });
    }
    add("non-utf8", `${bname} in the path`, {
      raw: (ctx) => rawHead([Buffer.concat([Buffer.from("GET /jwt/auth"), b, Buffer.from(`?${scope} HTTP/1.1`)]), `Host: ${hostOf(ctx)}`, `Connection: close`]),
      expect: ["cell:1", "4xx"],
    });
  }

  // -- Host / X-Forwarded-* games ---------------------------------------------
  const hosts = ["gitlab.example.com", "EVIL.Example", "evil.example:8443", "127.0.0.1", "[::1]:8080", "xn--bcher-kva.example", `${"a".repeat(63)}.example`, "evil.example."];
  for (const host of hosts) {
    const expectedHost = new URL(`http://${host}`).host;
    const checkForwarded = (r) => {
      const h = r.echo?.headers ?? {};
      const problems = [];
      if (h["x-forwarded-host"]?.toLowerCase() !== expectedHost) problems.push(`x-forwarded-host ${h["x-forwarded-host"]}, want ${expectedHost}`);
      if (h["x-forwarded-proto"] !== "http") problems.push(`x-forwarded-proto ${h["x-forwarded-proto"]}`);
      for (const name of ["forwarded"]) if (h[name] !== undefined) problems.push(`client's ${name}: ${h[name]} reached the cell`);
      return problems;
    };
    add("host-games", `Host ${host}, spoofed X-Forwarded-Host/-Proto`, {
      headers: { host, "x-forwarded-host": `${MARK}.example`, "x-forwarded-proto": MARK, cookie: session(2) },
      expect: ["cell:2"],
      check: checkForwarded,
    });
    add("host-games", `Host ${host}, spoofed Forwarded`, {
      headers: { host, forwarded: `host=${MARK}.example;proto=https`, cookie: session(2) },
      expect: ["cell:2"],
      check: checkForwarded,
    });
  }
  for (const [hname, target, lines, ok] of [
    ["two Host headers", "/api/v4/user", (ctx) => [`Host: ${hostOf(ctx)}`, `Host: evil.example`], ["4xx", "5xx:runtime"]],
    ["userinfo in Host", "/api/v4/user", () => [`Host: gitlab.example.com@evil.example`], ["4xx", "5xx:runtime"]],
    ["space in Host", "/api/v4/user", () => [`Host: a b`], ["4xx", "5xx:runtime"]],
    // workerd (1.20261117) makes the URL http://evil.example/../x/api/v4/user:
    // the worker sees Host evil.example, as for any Host a zone's route
    // would not deliver to it.
    ["path in Host", "/api/v4/user", () => [`Host: evil.example/../x`], ["cell:1", "4xx", "5xx:runtime"]],
    ["empty Host", "/api/v4/user", () => [`Host: `], ["cell:1", "4xx", "5xx:runtime"]],
    ["no Host", "/api/v4/user", () => [], ["4xx", "5xx:runtime"]],
    ["port out of range", "/api/v4/user", () => [`Host: evil.example:99999`], ["cell:1", "4xx"]],
    ["non-ASCII byte in Host", "/api/v4/user", () => [`Host: ev\xefl.example`], ["cell:1", "4xx", "5xx:runtime"]],
    ["absolute-form target for another host", "http://evil.example/api/v4/user", () => [`Host: gitlab.example.com`], ["cell:1", "4xx", "5xx:runtime"]],
    ["absolute-form target for the same host", null, (ctx) => [`Host: ${hostOf(ctx)}`], ["cell:1", "4xx", "5xx:runtime"]],
  ]) {
    add("host-games", hname, {
      raw: (ctx) => rawHead([`GET ${target ?? `http://${hostOf(ctx)}/api/v4/user`} HTTP/1.1`, ...lines(ctx), `Connection: close`]),
      expect: ok,
    });
  }
  add("host-games", "X-Forwarded-Host listed in Connection", {
    raw: (ctx) => rawHead([`GET /api/v4/user HTTP/1.1`, `Host: ${hostOf(ctx)}`, `Connection: close, x-forwarded-host, x-forwarded-proto`, `X-Forwarded-Host: ${MARK}`, `X-Forwarded-Proto: ${MARK}`]),
    expect: ["cell:1"],
    check: (r) => (r.echo?.headers?.["x-forwarded-host"] === r.host ? [] : [`x-forwarded-host ${r.echo?.headers?.["x-forwarded-host"]}`]),
  });

  // -- spoofed X-Gitlab-Http-Router-* and CF-Access-* headers ----------------
  const spoofNames = ["X-Gitlab-Http-Router-Rule-Action", "X-Gitlab-Http-Router-Rule-Type", "X-Gitlab-Http-Router-Signature", "X-Gitlab-Http-Router-Anything", "X-GITLAB-HTTP-ROUTER-RULE-ACTION", "x-gitlab-http-router-", "CF-Access-Client-Id", "CF-Access-Client-Secret"];
  for (const name of spoofNames) {
    for (const [vname, cookie, ok, action] of [["classified request", session(2), "cell:2", "classify"], ["proxied request", undefined, "cell:1", "proxy"]]) {
      add("router-header-spoof", `${name} on a ${vname}`, {
        headers: { [name]: MARK, ...(cookie ? { cookie } : {}) },
        expect: [ok],
        check: (r) => {
          const h = r.echo?.headers ?? {};
          const problems = [];
          if (h["x-gitlab-http-router-rule-action"] !== action) problems.push(`rule action ${h["x-gitlab-http-router-rule-action"]}`);
          if (action === "proxy" && h["x-gitlab-http-router-rule-type"] !== undefined) problems.push(`rule type ${h["x-gitlab-http-router-rule-type"]} on a proxied request`);
          if (JSON.stringify(h).includes(MARK)) problems.push("the spoofed value reached the cell");
          return problems;
        },
      });
    }
  }

  // -- client identity, URL rewrites, underscore spellings --------
  const CLIENT_IP = "203.0.113.7";
  const identity = [
    "X-Forwarded-For", "X-Real-IP", "True-Client-IP", "X-Original-URL", "X-Rewrite-URL",
    "CF-Access-Jwt-Assertion", "Cf-Access-Authenticated-User-Email", "X-Forwarded-Port", "X-Forwarded-Anything", "Forwarded",
    "X_Forwarded_Host", "X_Forwarded_Proto", "X_Forwarded_For", "X_Gitlab_Http_Router_Rule_Type", "X_Gitlab_Http_Router_Signature",
    "CF_Access_Client_Secret", "Cf_Access_Jwt_Assertion", "X_Real_IP", "True_Client_IP", "X-Forwarded_Host",
  ];
  for (const name of identity) {
    for (const [vname, cookie, ok] of [["classified request", session(2), "cell:2"], ["proxied request", undefined, "cell:1"]]) {
      for (const withIp of [true, false]) {
        add("identity-header-spoof", `${name} on a ${vname}${withIp ? ", with CF-Connecting-IP" : ""}`, {
          headers: { [name]: MARK, ...(cookie ? { cookie } : {}), ...(withIp ? { "cf-connecting-ip": CLIENT_IP } : {}) },
          expect: [ok],
          check: (r) => {
            const h = r.echo?.headers ?? {};
            const problems = [];
            if (JSON.stringify(h).includes(MARK)) problems.push(`the spoofed value reached the cell: ${JSON.stringify(h)}`);
            const xff = h["x-forwarded-for"];
            if (withIp ? xff !== CLIENT_IP : xff !== undefined) problems.push(`x-forwarded-for ${xff}`);
            return problems;
          },
        });
      }
    }
  }
  // A client-sent chain is replaced, not extended.
  add("identity-header-spoof", "X-Forwarded-For chain with CF-Connecting-IP", {
    headers: { "x-forwarded-for": `${MARK}-1, 198.51.100.1`, "cf-connecting-ip": CLIENT_IP, cookie: session(2) },
    expect: ["cell:2"],
    check: (r) => (r.echo?.headers?.["x-forwarded-for"] === CLIENT_IP ? [] : [`x-forwarded-for ${r.echo?.headers?.["x-forwarded-for"]}`]),
  });
  // Naming a header the router relies on in Connection never removes it
  // (these reach the worker through Miniflare's socket). workerd never
  // sends CF-Connecting-IP on a subrequest: X-Forwarded-For carries it.
  for (const [conn, want] of [
    ["close, cf-connecting-ip", (h) => h["x-forwarded-for"] === CLIENT_IP && h["cf-connecting-ip"] === undefined],
    ["close, cookie", (h) => h.cookie === session(2)],
    ["close, x-forwarded-for", (h) => h["x-forwarded-for"] === CLIENT_IP],
    ["close, x-gitlab-http-router-rule-type", (h) => h["x-gitlab-http-router-rule-type"] === "SESSION_PREFIX"],
  ]) {
    add("identity-header-spoof", `Connection: ${conn}`, {
      raw: (ctx) => rawHead([`GET /api/v4/user HTTP/1.1`, `Host: ${hostOf(ctx)}`, `Connection: ${conn}`, `CF-Connecting-IP: ${CLIENT_IP}`, `Cookie: ${session(2)}`]),
      expect: ["cell:2"],
      check: (r) => (r.echo?.headers && want(r.echo.headers) ? [] : [`headers at the cell: ${JSON.stringify(r.echo?.headers)}`]),
    });
  }
  return cases;
}

// ===========================================================================
// Case generation: container_registry stack (registries r1..r3, web cells
// 1..3 must see nothing at all).

function registryCases() {
  const cases = [];
  const add = (family, name, spec) => cases.push({ family, name, ...spec });
  const paths = [
    // [name, path sent, outcome, path the registry must see (when routed)]
    ["/v2/ (first cell)", "/v2/", "cell:r1"],
    ["/v2/_catalog (first cell)", "/v2/_catalog", "cell:r1"],
    ["/v2 without slash (legacy)", "/v2", "cell:r1"],
    ["/v2/_catalog/ (legacy)", "/v2/_catalog/", "cell:r1"],
    ["acme manifest (control)", "/v2/acme/img/manifests/latest", "cell:r2"],
    ["acme blob", "/v2/acme/img/blobs/sha256:0123", "cell:r2"],
    ["acme nested tags", "/v2/acme/sub/group/img/tags/list", "cell:r2"],
    ["acme referrers", "/v2/acme/img/referrers/sha256:0123", "cell:r2"],
    ["no trailing slash after manifests", "/v2/acme/img/manifests", "cell:r1"],
    ["no operation", "/v2/acme/img", "cell:r1"],
    ["upper-case name", "/v2/ACME/img/manifests/x", "cell:r1"],
    ["upper-case cell-3 name", "/v2/Cell3-Group/x/manifests/y", "cell:r1"],
    ["cell3/../acme (normalized: acme)", "/v2/cell3-group/../acme/img/manifests/x", "cell:r2", "/v2/acme/img/manifests/x"],
    ["cell3/%2e%2e/acme (normalized: acme, or refused as encoded)", "/v2/cell3-group/%2e%2e/acme/img/manifests/x", ["cell:r2", "4xx"], "/v2/acme/img/manifests/x"],
    ["cell3/.%2E/acme (normalized: acme, or refused as encoded)", "/v2/cell3-group/.%2E/acme/img/manifests/x", ["cell:r2", "4xx"], "/v2/acme/img/manifests/x"],
    ["acme/../../cell3 (normalized: legitimately cell3-group)", "/v2/acme/img/../../cell3-group/x/manifests/y", "cell:r3", "/v2/cell3-group/x/manifests/y"],
    ["/v2/a/../../b (normalized: /b/...)", "/v2/a/../../b/manifests/x", "cell:r1", "/b/manifests/x"],
    ["/v2/a/%2e%2e/b (normalized: /v2/b, unknown; or refused)", "/v2/a/%2e%2e/b/manifests/x", ["cell:r1", "4xx"], "/v2/b/manifests/x"],
    ["/v2/./acme", "/v2/./acme/img/manifests/x", "cell:r2", "/v2/acme/img/manifests/x"],
    ["/v2/acme/./img", "/v2/acme/./img/manifests/x", "cell:r2", "/v2/acme/img/manifests/x"],
    ["climbing out of /v2", "/v2/acme/img/manifests/../../../../../etc/passwd", "cell:r1", "/etc/passwd"],
    ["backslashes (normalized to slashes)", "/v2\\acme\\img\\manifests\\x", ["cell:r2", "4xx"], "/v2/acme/img/manifests/x"],
    ["backslashes climbing to cell 3 (normalized: legitimately cell3-group)", "/v2/acme/img\\..\\..\\cell3-group/x/manifests/y", ["cell:r3", "4xx"], "/v2/cell3-group/x/manifests/y"],
    ["acme/%2e%2e/%2e%2e/cell3 (normalized: cell3-group, or refused)", "/v2/acme/img/%2e%2e/%2e%2e/cell3-group/x/manifests/y", ["cell:r3", "4xx"], "/v2/cell3-group/x/manifests/y"],
    ["%2F inside the name (cell 3)", "/v2/cell3-group%2Fx/manifests/y", "4xx"],
    ["%2F inside the name (acme)", "/v2/acme%2Fimg/manifests/x", "4xx"],
    ["%2f blob upload for cell 3", "/v2/cell3-group%2fx/blobs/uploads/", "4xx"],
    ["percent-encoded letter", "/v2/%63ell3-group/x/manifests/y", "4xx"],
    ["encoded ../ inside the name", "/v2/acme/img%2F..%2F..%2Fcell3-group/manifests/x", "4xx"],
    ["%00 in the name", "/v2/acme/img%00/manifests/x", "4xx"],
    ["%0a in the name", "/v2/acme/img%0a/manifests/x", "4xx"],
    ["encoding after manifests (a reference)", "/v2/acme/img/manifests/%2e%2e%2f%2e%2e%2fcell3", "cell:r2"],
    ["double slash before the name", "/v2//cell3-group/x/manifests/y", "cell:r1"],
    ["double slash inside the name", "/v2/cell3-group//x/manifests/y", "cell:r1"],
    ["leading dash", "/v2/-acme/img/manifests/x", "cell:r1"],
    ["trailing dash", "/v2/acme-/img/manifests/x", "cell:r1"],
    ["double dash (unknown route)", "/v2/acme--x/img/manifests/y", "cell:r1"],
    ["double underscore (unknown route)", "/v2/acme__x/img/manifests/y", "cell:r1"],
    ["4 KiB of nested groups (unknown)", `/v2/${"a/".repeat(2048)}img/manifests/x`, "cell:r1"],
    // Over distribution's 255 characters: not classified (the rules' maxLength), the legacy registry's.
    ["60 KiB project under acme", `/v2/acme/${"a".repeat(60 * KIB)}/manifests/x`, "cell:r1"],
    ["255-character name under acme", `/v2/acme/${"a".repeat(250)}/manifests/x`, "cell:r2"],
    ["query naming cell 3", "/v2/acme/img/manifests/x?x=/v2/cell3-group/y/manifests/z", "cell:r2"],
    ["/v2/ with a cell-3 query", "/v2/?/v2/cell3-group/x/manifests/y", "cell:r1"],
  ];
  for (const method of ["GET", "HEAD"]) {
    for (const [name, path, ok, seen] of paths) {
      add("registry-path", `${method} ${name}`, {
        method,
        path,
        expect: Array.isArray(ok) ? ok : [ok],
        check: (r) => {
          const want = seen ?? path.split("?")[0];
          const cellId = r.outcome.startsWith("cell:") ? r.outcome.slice(5) : null;
          const got = cellId ? r.counters.cells[cellId]?.paths[0] : undefined;
          return cellId && got !== undefined && got !== want ? [`the registry saw ${got}, the router classified ${want}`] : [];
        },
      });
    }
  }
  for (const [name, target, ok] of [
    // Not a valid repository name whichever way it is read: refused, or the
    // legacy registry (which answers NAME_INVALID).
    ["raw UTF-8 in the name", Buffer.from("/v2/acmé/img/manifests/x", "utf8"), ["4xx", "cell:r1"]],
    ["raw 0xFF in the name", Buffer.concat([Buffer.from("/v2/acme"), Buffer.from([0xff]), Buffer.from("/manifests/x")]), ["4xx", "cell:r1"]],
    // workerd does not cut a '#' out of a request target: "x#" is a path
    // segment that the two ".." remove, so /v2/acme/img/cell3-group (legacy).
    ["fragment naming cell 3", Buffer.from("/v2/acme/img/manifests/x#/../../cell3-group"), ["cell:r1", "cell:r2", "4xx"]],
    ["raw percent-encoded dot segments", Buffer.from("/v2/cell3-group/%2E%2e/acme/img/manifests/x"), ["cell:r2", "4xx"]],
    ["tab inside the target", Buffer.from("/v2/acme/img/manifests/x\t/../../cell3-group"), ["cell:r2", "cell:r1", "4xx"]],
  ]) {
    add("registry-path", `raw ${name}`, {
      raw: (ctx) => rawHead([Buffer.concat([Buffer.from("GET "), target, Buffer.from(" HTTP/1.1")]), `Host: ${hostOf(ctx)}`, `Connection: close`]),
      expect: ok,
    });
  }

  // JWTs on the registry: the rules route by path only, whatever a token says.
  const claims3 = { access: [{ type: "repository", name: "cell3-group/img", actions: ["pull", "push"] }] };
  const jwts = [
    ["RS256-shaped naming cell3-group", jwt({ alg: "RS256" }, claims3)],
    ["alg none naming cell3-group", jwt({ alg: "none" }, claims3, "")],
    ["truncated", jwt({ alg: "RS256" }, claims3).slice(0, 40)],
    ["huge (100 KiB)", jwt({ alg: "RS256" }, { ...claims3, pad: "x".repeat(75 * KIB) })],
    ["two parts", jwt({ alg: "RS256" }, claims3).split(".").slice(0, 2).join(".")],
    ["not base64", "!!!.###.$$$"],
    ["smuggled JSON name", jwt({ alg: "RS256" }, { access: [{ type: "repository", name: 'acme/x","route":"cell3-group' }] })],
    ["oversized (512 KiB)", "e".repeat(512 * KIB)],
  ];
  for (const [jname, token] of jwts) {
    for (const [pname, path, ok] of [["/v2/", "/v2/", "cell:r1"], ["acme manifest", "/v2/acme/img/manifests/latest", "cell:r2"], ["gitlab-org manifest", "/v2/gitlab-org/img/manifests/latest", "cell:r1"]]) {
      add("jwt", `${jname} on ${pname}`, { path, headers: { authorization: `Bearer ${token}` }, expect: token.length >= HEAD_LIMIT ? ["4xx:runtime", "error"] : [ok] });
    }
  }
  // Forwarding headers on the registry, which builds its Location URLs from them.
  for (const [name, headers] of [
    ["X-Forwarded-Host/-Proto", { "x-forwarded-host": `${MARK}.example`, "x-forwarded-proto": MARK }],
    ["Forwarded", { forwarded: `host=${MARK}.example;proto=https` }],
  ]) {
    add("host-games", `spoofed ${name} on a blob upload`, {
      method: "POST",
      path: "/v2/acme/img/blobs/uploads/",
      headers: { host: "registry.example.com", ...headers },
      expect: ["cell:r2"],
      check: (r) => {
        const h = r.echo?.headers ?? {};
        const problems = [];
        if (h["x-forwarded-host"] !== "registry.example.com") problems.push(`x-forwarded-host ${h["x-forwarded-host"]}`);
        if (h.forwarded !== undefined) problems.push(`client's Forwarded: ${h.forwarded} reached the registry`);
        return problems;
      },
    });
  }
  return cases;
}

// ===========================================================================
// Running them.

function runAll(title, getCtx, cases, { extraChecks } = {}) {
  for (const c of cases) {
    test(`${c.family}: ${c.name}`, async () => {
      const ctx = getCtx();
      const r = await runCase(ctx, c);
      r.problems = [...commonProblems(r, c), ...(c.check?.(r) ?? [])];
      r.expected = c.expect;
      assert.deepEqual(r.problems, [], `${c.family}: ${c.name}`);
    });
  }
  test(`${title}: summary, and the victim cells saw only legitimate requests`, (t) => {
    const ctx = getCtx();
    for (const line of summary(ctx.results, title)) console.log(line);
    const failed = ctx.results.filter((r) => r.problems?.length);
    for (const r of failed) t.diagnostic(`FAILED ${r.family}: ${r.name}: ${r.problems.join("; ")}`);
    extraChecks?.(ctx, t);
  });
}

describe("hostile input: session_token", () => {
  let ctx;
  const cases = sessionTokenCases();
  before(async () => {
    const stack = await startStack({ ruleset: "session_token", cellRoutes: CELL_ROUTES });
    ctx = makeContext(stack, Object.fromEntries(Object.values(stack.cells).map((c) => [String(c.id), c.url])));
  });
  after(() => ctx?.stack.stop());
  test(`generates at least 200 cases (${cases.length})`, () => assert.ok(cases.length >= 200));
  runAll("session_token", () => ctx, cases, {
    extraChecks: (c) => {
      const legit = c.results.filter((r) => r.outcome === "cell:3" && r.expected?.includes("cell:3")).length;
      assert.equal(c.totals["3"], legit, `cell 3 saw ${c.totals["3"]} requests; only ${legit} cases legitimately route there`);
    },
  });
});

describe("hostile input: container_registry", () => {
  let ctx;
  const registries = [];
  const cases = registryCases();
  before(async () => {
    for (const id of [1, 2, 3]) registries.push(await startCell(`r${id}`));
    const stack = await startStack({
      ruleset: "container_registry",
      cellRoutes: CELL_ROUTES,
      topology: { registryAddresses: { 1: registries[0].addr, 2: registries[1].addr, 3: registries[2].addr } },
      vars: { GITLAB_PROXY_HOST: registries[0].addr },
    });
    const cells = Object.fromEntries(Object.values(stack.cells).map((c) => [String(c.id), c.url]));
    for (const r of registries) cells[r.id] = r.url;
    ctx = makeContext(stack, cells);
  });
  after(async () => {
    await ctx?.stack.stop();
    for (const r of registries) await stopChild(r.child);
  });
  test(`generates cases (${cases.length})`, () => assert.ok(cases.length >= 100));
  runAll("container_registry", () => ctx, cases, {
    extraChecks: (c) => {
      for (const web of ["1", "2", "3"]) assert.equal(c.totals[web], 0, `web cell ${web} saw registry traffic`);
      const legit = c.results.filter((r) => r.outcome === "cell:r3" && r.expected?.includes("cell:r3")).length;
      assert.equal(c.totals.r3, legit, `registry r3 saw ${c.totals.r3} requests; only ${legit} cases legitimately route there`);
    },
  });
});

describe("hostile input: refused upstream", () => {
  // The legacy cell is a closed port: every hostile request that would go
  // there must get the router's clear 502, and the worker must not trap.
  let ctx;
  before(async () => {
    const closed = await closedPort();
    const stack = await startStack({ ruleset: "session_token", cellCount: 2, vars: { GITLAB_PROXY_HOST: `127.0.0.1:${closed}` } });
    ctx = makeContext(stack, Object.fromEntries(Object.values(stack.cells).map((c) => [String(c.id), c.url])));
  });
  after(() => ctx?.stack.stop());
  const cases = [
    ["plain request", { headers: {} }],
    ["bad-CRC token", { headers: { "private-token": craftToken() } }],
    ["smuggling session cookie", { headers: { cookie: '_gitlab_session=cell-1","value":"cell-3' } }],
    ["1000 cookies", { headers: { cookie: Array.from({ length: 1000 }, (_, i) => `c${i}=1`).join("; ") } }],
    ["alg none JWT", { headers: { authorization: `Bearer ${jwt({ alg: "none" }, { sub: "x" }, "")}` } }],
    ["64 KiB header", { headers: { "x-big": "b".repeat(64 * KIB) } }],
    ["unknown session prefix", { headers: { cookie: session(99) } }],
    ["POST with a body", { method: "POST", headers: { "content-type": "text/plain" } }],
  ].map(([name, spec]) => ({ family: "refused-upstream", name, path: "/api/v4/user", ...spec, expect: ["5xx:router"], check: (r) => (/upstream unreachable/.test(r.res.text) && r.status === 502 ? [] : [`want the router's 502, got ${r.status} ${r.res.text}`]) }));
  runAll("refused upstream", () => ctx, cases);
});
