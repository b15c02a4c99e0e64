// The change lock (change-lock.toml): windows in which nothing is deployed.
// evaluateChangeLock is pure; readChangeLock parses the file.
import fs from "node:fs";
import { parse } from "smol-toml";

const DAY_MS = 24 * 3600 * 1000;
const ANNOUNCE_MS = 3 * DAY_MS;
const LOCK_KEYS = ["start", "end", "reason", "environments"];
const ZONE = /(Z|[+-]\d\d:?\d\d)$/i;

/** A malformed lock file: nothing is deployed while it is. */
export class ChangeLockError extends Error {}

/** 2026-05-01T12:00:00Z (no milliseconds). */
export function formatTime(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** A TOML date-time or an ISO 8601 string with a zone -> ms since the epoch. */
export function parseLockTime(value, what) {
  if (value instanceof Date && typeof value.isLocal === "function") {
    if (!value.isDateTime()) throw new ChangeLockError(`${what}: ${value.toISOString()} is not a date-time (write e.g. 2026-12-18T00:00:00Z)`);
    if (value.isLocal()) throw new ChangeLockError(`${what}: ${value.toISOString()} has no time zone: write it in UTC with a Z`);
    return value.getTime();
  }
  if (typeof value === "string") {
    const text = value.trim();
    const ms = Date.parse(text);
    if (!/^\d{4}-\d\d-\d\d[T ]\d\d:\d\d/.test(text) || Number.isNaN(ms)) throw new ChangeLockError(`${what}: '${value}' is not an ISO 8601 time`);
    if (!ZONE.test(text)) throw new ChangeLockError(`${what}: '${value}' has no time zone: write it in UTC with a Z`);
    return ms;
  }
  throw new ChangeLockError(`${what}: ${JSON.stringify(value)} is not a time (write e.g. 2026-12-18T00:00:00Z)`);
}

/** CHANGE_LOCK_NOW (ISO 8601; UTC when it has no zone) -> ms. */
export function parseNow(text) {
  const t = text.trim();
  const ms = Date.parse(ZONE.test(t) ? t : `${t}Z`);
  if (!/^\d{4}-\d\d-\d\d/.test(t) || Number.isNaN(ms)) throw new ChangeLockError(`CHANGE_LOCK_NOW='${text}' is not an ISO 8601 time`);
  return ms;
}

/**
 * The locks of a parsed lock file that matter at `now` for `environments`
 * (all locks when the list is empty): {active, upcoming}, each a list of
 * "START until END (ENVIRONMENTS): REASON"; upcoming = starting within 3 days.
 * Throws ChangeLockError for a malformed file.
 */
export function evaluateChangeLock(doc, { now, environments = [], file = "change-lock.toml" }) {
  const unknown = Object.keys(doc).filter((k) => k !== "lock");
  const locks = doc.lock ?? [];
  if (unknown.length > 0 || !Array.isArray(locks)) {
    throw new ChangeLockError(`${file}: only [[lock]] tables are allowed (found ${unknown.length ? unknown.join(", ") : "lock = ..."})`);
  }
  const active = [];
  const upcoming = [];
  locks.forEach((lock, i) => {
    const where = `${file}: lock #${i + 1}`;
    if (!lock || typeof lock !== "object" || Array.isArray(lock) || lock instanceof Date) throw new ChangeLockError(`${where}: not a table`);
    const extra = Object.keys(lock).filter((k) => !LOCK_KEYS.includes(k));
    if (extra.length) throw new ChangeLockError(`${where}: unknown key(s) ${extra.join(", ")}`);
    for (const key of ["start", "end", "reason"]) {
      if (!(key in lock)) throw new ChangeLockError(`${where}: \`${key}\` is missing`);
    }
    const start = parseLockTime(lock.start, `${where} start`);
    const end = parseLockTime(lock.end, `${where} end`);
    if (end <= start) throw new ChangeLockError(`${where}: end ${formatTime(end)} is not after start ${formatTime(start)}`);
    const scope = lock.environments;
    if (scope !== undefined && (!Array.isArray(scope) || !scope.every((e) => typeof e === "string"))) {
      throw new ChangeLockError(`${where}: \`environments\` must be a list of environment names`);
    }
    if (scope !== undefined && environments.length > 0 && !scope.some((e) => environments.includes(e))) return;
    const label = scope === undefined ? "all environments" : scope.join(", ");
    const text = `${formatTime(start)} until ${formatTime(end)} (${label}): ${lock.reason}`;
    if (start <= now && now < end) active.push(text);
    else if (now < start && start <= now + ANNOUNCE_MS) upcoming.push(text);
  });
  return { active, upcoming };
}

/** Parses a lock file; a TOML syntax error becomes a ChangeLockError. */
export function readChangeLock(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    throw new ChangeLockError(`cannot read the change lock file ${file}: ${e.message}`);
  }
  try {
    return parse(text);
  } catch (e) {
    throw new ChangeLockError(`cannot read the change lock file ${file}: ${e.message}`);
  }
}
