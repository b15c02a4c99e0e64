// Unit tests of the change lock rules (scripts/deploy/change-lock.mjs), on
// TOML parsed by the same library the program uses.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parse } from "smol-toml";
import { ChangeLockError, evaluateChangeLock, parseNow } from "../../scripts/deploy/change-lock.mjs";

const now = Date.parse("2026-05-02T09:30:00Z");
const lock = (body) => parse(`[[lock]]\n${body}\n`);

describe("evaluateChangeLock", () => {
  test("an active lock for the environment, and one for others that does not count", () => {
    const doc = parse(`[[lock]]
start = 2026-04-30T00:00:00Z
end = 2026-05-04T08:00:00Z
reason = "freeze"
environments = ["production"]
`);
    assert.deepEqual(evaluateChangeLock(doc, { now, environments: ["production"] }).active, ["2026-04-30T00:00:00Z until 2026-05-04T08:00:00Z (production): freeze"]);
    assert.deepEqual(evaluateChangeLock(doc, { now, environments: ["staging"] }).active, []);
    assert.equal(evaluateChangeLock(doc, { now, environments: [] }).active.length, 1, "no environments named: every lock counts");
  });
  test("the end is exclusive; locks within 3 days are upcoming; strings with a zone work", () => {
    const doc = lock(`start = "2026-05-01T00:00:00+02:00"\nend = 2026-05-02T09:30:00Z\nreason = "r"`);
    assert.deepEqual(evaluateChangeLock(doc, { now }).active, []);
    const soon = lock(`start = 2026-05-04T00:00:00Z\nend = 2026-05-05T00:00:00Z\nreason = "soon"`);
    assert.equal(evaluateChangeLock(soon, { now }).upcoming.length, 1);
    const later = lock(`start = 2026-06-04T00:00:00Z\nend = 2026-06-05T00:00:00Z\nreason = "later"`);
    assert.deepEqual(evaluateChangeLock(later, { now }), { active: [], upcoming: [] });
  });
  test("malformed files are errors, so a typo cannot lift a freeze", () => {
    const cases = [
      [lock(`start = 2026-05-01T00:00:00\nend = 2026-05-02T00:00:00Z\nreason = "r"`), /no time zone/],
      [lock(`start = "yesterday"\nend = 2026-05-02T00:00:00Z\nreason = "r"`), /not an ISO 8601 time/],
      [lock(`start = 2026-05-01T00:00:00Z\nreason = "r"`), /`end` is missing/],
      [lock(`start = 2026-05-03T00:00:00Z\nend = 2026-05-02T00:00:00Z\nreason = "r"`), /is not after start/],
      [lock(`start = 2026-05-01T00:00:00Z\nend = 2026-05-02T00:00:00Z\nreason = "r"\nenvs = ["x"]`), /unknown key\(s\) envs/],
      [lock(`start = 2026-05-01T00:00:00Z\nend = 2026-05-02T00:00:00Z\nreason = "r"\nenvironments = "production"`), /must be a list/],
      [parse(`locks = 1`), /only \[\[lock\]\] tables/],
    ];
    for (const [doc, message] of cases) assert.throws(() => evaluateChangeLock(doc, { now }), (e) => e instanceof ChangeLockError && message.test(e.message), String(message));
  });
  test("an empty file locks nothing", () => {
    assert.deepEqual(evaluateChangeLock(parse(""), { now }), { active: [], upcoming: [] });
  });
});

describe("parseNow", () => {
  test("UTC when no zone is given; garbage is refused", () => {
    assert.equal(parseNow("2026-05-01T12:00:00"), Date.parse("2026-05-01T12:00:00Z"));
    assert.equal(parseNow("2026-05-01T14:00:00+02:00"), Date.parse("2026-05-01T12:00:00Z"));
    assert.throws(() => parseNow("noon"), ChangeLockError);
  });
});
