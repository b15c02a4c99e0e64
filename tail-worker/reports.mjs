// Which parts of the router's trace items are errors, and the Sentry event
// each one becomes. An error is:
//   - a router line at level "error" (`{"level":"error","scope",…}`, src/lib.rs log_error);
//   - a request line with an `error` field (crates/router-core/src/log.rs RequestLog);
//   - any other console.error output that is not a router JSON line (a panic's message);
//   - an uncaught exception (TraceItem.exceptions);
//   - an invocation that ended badly without one (outcome exceededCpu, exceededMemory, …).
// Info and warn lines, and request lines without `error`, are not.
import { eventId } from "./sentry.mjs";
import { scrubValue, sentHeaders, stripUrl } from "./scrub.mjs";

/** Outcomes that are not the router's failure (a client that went away is not). */
const FINE_OUTCOMES = new Set(["ok", "canceled", "responseStreamDisconnected"]);

/** The longest string sent (Sentry truncates long ones anyway). */
const MAX_TEXT = 2000;

/**
 * `value` with every string cut to MAX_TEXT. Cut after scrubbing: a secret
 * cut in two first could be too short for the scrubber to know it.
 */
function cutStrings(value) {
  if (typeof value === "string") return value.length > MAX_TEXT ? `${value.slice(0, MAX_TEXT)}…` : value;
  if (Array.isArray(value)) return value.map(cutStrings);
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, cutStrings(v)]));
  return value;
}

/** A log entry's single JSON object argument, parsed; null when it is anything else. */
function routerLine(log) {
  const args = Array.isArray(log.message) ? log.message : [log.message];
  if (args.length !== 1 || typeof args[0] !== "string" || !args[0].startsWith("{")) return null;
  try {
    const value = JSON.parse(args[0]);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** What every event of one trace item shares: the request (allow-listed), the tags, the release. */
function context(item, env) {
  const request = item.event?.request;
  const tags = { outcome: item.outcome ?? "unknown" };
  if (item.scriptName) tags.worker = item.scriptName;
  if (item.event?.cron !== undefined) tags.trigger = "cron";
  if (item.truncated) tags.truncated = "true";
  const base = {
    platform: "javascript",
    logger: "gitlab-http-router",
    ...(env.SENTRY_ENVIRONMENT ? { environment: env.SENTRY_ENVIRONMENT } : {}),
    ...(item.scriptVersion?.id ? { release: item.scriptVersion.id } : {}),
    tags,
  };
  if (request) base.request = { method: request.method, url: stripUrl(request.url), headers: sentHeaders(request.headers) };
  return base;
}

function event(base, { timestamp, level = "error", message, exception, tags = {}, extra }) {
  return {
    timestamp: (timestamp ?? Date.now()) / 1000,
    level,
    ...base,
    ...(message !== undefined ? { message: { formatted: message } } : {}),
    ...(exception ? { exception: { values: [exception] } } : {}),
    tags: { ...base.tags, ...tags },
    ...(extra ? { extra } : {}),
  };
}

/** The tags a router line contributes (strings, as Sentry wants them). */
function lineTags(line) {
  const tags = {};
  for (const key of ["scope", "rule", "action", "cell", "status", "chosen_by", "cache", "request_id"]) {
    if (line[key] !== undefined && line[key] !== null) tags[key] = String(line[key]);
  }
  return tags;
}

/**
 * The error events of one trace item, in the order they happened, as
 * drafts: not scrubbed yet, no event id (`finished` makes them events).
 * Drafts are cheap; scrubbing is not, so only the events that are sent
 * are finished.
 */
export function itemDrafts(item, env = {}) {
  let shared;
  const base = () => (shared ??= context(item, env));
  const out = [];
  for (const log of item.logs ?? []) {
    // Nearly every line is a console.log without `"error"` in it (a routine
    // request line, an info line): none is an error, none is parsed.
    const first = Array.isArray(log.message) ? log.message[0] : log.message;
    if (log.level !== "error" && !(typeof first === "string" && first.includes('"error"'))) continue;
    const line = routerLine(log);
    if (line) {
      const failedRequest = line.ruleset !== undefined && line.error !== undefined && line.error !== null;
      if (line.level !== "error" && !failedRequest) continue;
      const text = failedRequest ? `${line.method ?? ""} request failed: ${line.error}` : `${line.scope ?? "router"}: ${line.message ?? ""}`;
      const release = line.version && !base().release ? { release: String(line.version) } : {};
      out.push(event({ ...base(), ...release }, { timestamp: log.timestamp, message: text, tags: lineTags(line), extra: { line } }));
    } else if (log.level === "error") {
      const args = Array.isArray(log.message) ? log.message : [log.message];
      const text = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ");
      out.push(event(base(), { timestamp: log.timestamp, message: text, tags: { scope: "console" } }));
    }
  }
  for (const ex of item.exceptions ?? []) {
    out.push(
      event(base(), {
        timestamp: ex.timestamp,
        exception: { type: ex.name || "Error", value: String(ex.message ?? ""), mechanism: { type: "cloudflare-tail", handled: false } },
        extra: ex.stack ? { stack: String(ex.stack) } : undefined,
      }),
    );
  }
  if (!FINE_OUTCOMES.has(item.outcome) && (item.exceptions ?? []).length === 0) {
    out.push(event(base(), { timestamp: item.eventTimestamp, message: `invocation ended with outcome ${item.outcome}` }));
  }
  return out;
}

/**
 * A draft as it is sent: scrubbed whole (nothing leaves without passing
 * the scrubber), its strings cut, and its event id (32 hex digits: added
 * after the scrubber).
 */
export function finished(draft) {
  return { event_id: eventId(), ...cutStrings(scrubValue(draft)) };
}

/** The events of one trace item, finished. */
export function itemReports(item, env = {}) {
  return itemDrafts(item, env).map(finished);
}

/**
 * At most `limit` drafts: when there are more, the first `limit - 1` and
 * one saying how many were dropped.
 */
export function bounded(drafts, limit) {
  if (drafts.length <= limit) return drafts;
  const kept = drafts.slice(0, limit - 1);
  const dropped = drafts.length - kept.length;
  const first = drafts[0];
  kept.push({
    timestamp: Date.now() / 1000,
    level: "warning",
    platform: "javascript",
    logger: "gitlab-http-router",
    ...(first.environment ? { environment: first.environment } : {}),
    ...(first.release ? { release: first.release } : {}),
    message: { formatted: `${dropped} more error events of one tail batch were dropped (at most ${limit} are sent per batch)` },
    tags: { scope: "tail", outcome: first.tags?.outcome ?? "unknown" },
    extra: { dropped, limit },
  });
  return kept;
}
