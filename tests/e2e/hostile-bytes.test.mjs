// Non-ASCII and non-UTF-8 bytes at many positions of every header the
// router reads, in the path and in the query, sent while other users'
// requests wait on a slow Topology Service. A panic in the wasm would fail
// every request in flight in the instance (docs/decisions.md, "Panics"):
// here each waiting request must get its own cell's answer, no panic may be
// logged, and no hostile request may get a 502 (or no answer).
//
// The bytes travel raw (hostile-lib's rawRequest): workerd hands header
// bytes >= 0x80 to the worker as Latin-1 characters, so every byte sequence
// below reaches Rust as non-ASCII text at the position it was sent.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { TEST_BUILD, buildTestWorker, startStack, request, postJson, getJson } from "./harness.mjs";
import { rawRequest, rawHead } from "./hostile-lib.mjs";

const VALID_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const HEX32 = "0123456789abcdef0123456789abcdef";

/** Every header the router reads, each with a value of the shape it expects. */
const HEADERS = {
  traceparent: `${VALID_TRACEPARENT}-${"a".repeat(16)}`,
  tracestate: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
  cookie: `_gitlab_session=cell-2-${HEX32}; other=1`,
  authorization: `Bearer glpat-${"a".repeat(20)}`,
  "private-token": `glpat-${"b".repeat(20)}`,
  "job-token": `glcbt-${"c".repeat(20)}`,
  "runner-token": `glrt-${"d".repeat(20)}`,
  "x-gitlab-runner-token": `glrt-${"e".repeat(20)}`,
  "x-request-id": "5b99b570-747a-4b24-8bdf-01c7b5e4b988",
  "cf-ray": "8f1c2a3b4c5d6e7f-AMS",
  connection: "keep-alive, x-custom",
  upgrade: "websocket",
  "content-type": "application/json; charset=utf-8",
  "cf-connecting-ip": "203.0.113.7",
  "x-gitlab-http-router-smoke-test": "a".repeat(64),
};

/** UTF-8 of 2, 3 and 4 bytes, a truncated lead, a lone continuation, 0xFF. */
const SEQUENCES = [[0xc3, 0xa9], [0xe2, 0x82, 0xac], [0xf0, 0x9f, 0x98, 0x80], [0xc3], [0x80], [0xff]];

/** Byte positions: the ends, the traceparent's field boundaries, the middle. */
const positions = (length) => [...new Set([0, 1, 2, 3, 35, 36, 52, 53, 54, 55, 56, length >> 1, length - 1, length].filter((p) => p >= 0 && p <= length))];

const splice = (value, at, seq) => Buffer.concat([Buffer.from(value.slice(0, at), "latin1"), Buffer.from(seq), Buffer.from(value.slice(at), "latin1")]);

/** Raw requests for `name`: every sequence at every position of its value. */
function headerCases(host, name, value) {
  const out = [];
  for (const at of positions(value.length)) {
    for (const seq of SEQUENCES) {
      const line = Buffer.concat([Buffer.from(`${name}: `, "latin1"), splice(value, at, seq)]);
      out.push({ label: `${name} @${at} ${Buffer.from(seq).toString("hex")}`, bytes: rawHead(["GET /explore HTTP/1.1", `host: ${host}`, line, "connection: close"]) });
    }
  }
  return out;
}

/** Raw requests with the sequences in the path and in the query. */
function targetCases(host) {
  const out = [];
  const path = "/cell2-group/project/-/issues";
  const query = "scope=repository:cell2-group/project:pull&state=opened";
  for (const seq of SEQUENCES) {
    for (const at of positions(path.length).filter((p) => p > 0)) {
      const target = Buffer.concat([splice(path, at, seq), Buffer.from(`?${query}`, "latin1")]);
      out.push({ label: `path @${at} ${Buffer.from(seq).toString("hex")}`, target });
    }
    for (const at of positions(query.length)) {
      const target = Buffer.concat([Buffer.from(`/jwt/auth?`, "latin1"), splice(query, at, seq)]);
      out.push({ label: `query @${at} ${Buffer.from(seq).toString("hex")}`, target });
    }
  }
  return out.map(({ label, target }) => ({
    label,
    bytes: Buffer.concat([Buffer.from("GET ", "latin1"), target, rawHead([" HTTP/1.1", `host: ${host}`, "connection: close"])]),
  }));
}

let stack;
before(async () => {
  buildTestWorker();
  // Nothing the Topology Service answers is kept, so every waiting
  // request below asks it again and waits the full latency.
  stack = await startStack({ ruleset: "session_token", build: TEST_BUILD, topology: { cacheControl: "no-store", notFoundCacheControl: "no-store" }, vars: { GITLAB_TOPOLOGY_TIMEOUT_MS: "5000" } });
});
after(() => stack?.stop());

describe("hostile bytes while other users wait", () => {
  const groups = () => {
    const host = new URL(stack.url).host;
    return [...Object.entries(HEADERS).map(([name, value]) => [name, headerCases(host, name, value)]), ["path and query", targetCases(host)]];
  };

  test("every waiting request gets its cell's answer, no panic, no 502", async () => {
    await postJson(`${stack.topology.admin}/_faults`, { latency_ms: 1500 });
    const problems = [];
    let hostileSent = 0;
    let round = 0;
    for (const [group, cases] of groups()) {
      round += 1;
      // Three users with fresh sessions, waiting in routeAsync on the
      // slow Topology Service while the hostile requests arrive (three
      // cells: one question per key is in flight at a time).
      const before = (await getJson(`${stack.topology.admin}/_stats`)).classify_calls;
      const waiting = [2, 3, 1].map((cell, i) => {
        const hex = (round * 10 + i).toString(16).padStart(32, "0");
        return request(`${stack.url}/waiting-${round}-${i}`, { headers: { cookie: `_gitlab_session=cell-${cell}-${hex}` } }).then((res) => ({ cell, res }));
      });
      const deadline = Date.now() + 5000;
      while ((await getJson(`${stack.topology.admin}/_stats`)).classify_calls < before + 3) {
        assert.ok(Date.now() < deadline, `${group}: the waiting requests reach the Topology Service`);
        await sleep(10);
      }
      const hostile = await Promise.all(cases.map(async (c) => ({ c, res: await rawRequest(stack.url, c.bytes, { timeout: 10_000 }) })));
      hostileSent += hostile.length;
      for (const { c, res } of hostile) {
        if (res.status === null || res.status === 502) problems.push(`${c.label}: ${res.status ?? res.error} ${res.text.slice(0, 80)}`);
      }
      for (const { cell, res } of await Promise.all(waiting)) {
        if (res.status !== 200 || res.json().cell !== String(cell)) problems.push(`${group}: a waiting cell-${cell} user got ${res.status} ${res.text.slice(0, 80)}`);
      }
    }
    const panics = stack.logs.filter((l) => /panicked|RuntimeError|unreachable|restarting the wasm instance/.test(l));
    assert.deepEqual(panics, [], "no panic logged");
    assert.deepEqual(problems, [], `of ${hostileSent} hostile requests`);
    assert.ok(hostileSent > 600, `${hostileSent} hostile requests sent`);
  });
});
