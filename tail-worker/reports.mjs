// Which parts of the router's trace items are errors, and the Sentry event
// each one becomes. An error is:
//   - a router line at level "error" (`{"level":"error","scope",…}`, src/lib.rs log_error);
//   - a request line with an `error` field (crates/router-core/src/log.rs RequestLog),
//     unless the client caused it (below);
//   - any other console.error output that is not a router JSON line (a panic's message);
//   - an uncaught exception (TraceItem.exceptions);
//   - an invocation that ended badly without one (outcome exceededCpu, exceededMemory, …).
// Info and warn lines, and request lines without `error`, are not. Nor is
// what a client causes, told by fields, never by a message's words: a
// request line the router marks `"error_level":"warn"` (an upstream fetch
// of a request with a body failed: an aborted upload looks like a dead
// cell), and a request line of an invocation whose client went away
// before its answer (outcome `canceled`, `responseStreamDisconnected`).
//
// Drafts are cheap (no scrubbing, nothing cut); the caller deduplicates
// them by fingerprint and bounds them before `finished` scrubs the few
// that are sent.
import { eventId } from "./sentry.mjs";
import { scrubValue, sentHeaders } from "./scrub.mjs";

/** Outcomes of an invocation whose client went away before its answer. */
const CLIENT_GONE = new Set(["canceled", "responseStreamDisconnected"]);

/** Outcomes that are not the router's failure (a client that went away is not). */
const FINE_OUTCOMES = new Set(["ok", ...CLIENT_GONE]);

/** How much of a message a fingerprint reads. */
const FINGERPRINT_TEXT = 300;

/**
 * What tells one error from another: its kind and its words, the first
 * FINGERPRINT_TEXT characters with numbers and hex runs (ids, times,
 * counts) made alike, so the same failure of many requests is one.
 */
function fingerprint(kind, text) {
  return `${kind}\u0000${String(text).slice(0, FINGERPRINT_TEXT).replace(/[0-9a-f]{8,}|[0-9]+/gi, "#")}`;
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
  if (request) base.request = { method: request.method, url: String(request.url ?? ""), headers: sentHeaders(request.headers) };
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
 * drafts `{ fingerprint, event }`: the event not scrubbed yet, nothing cut,
 * no event id (`finished` makes it one).
 */
export function itemDrafts(item, env = {}) {
  let shared;
  const base = () => (shared ??= context(item, env));
  const clientGone = CLIENT_GONE.has(item.outcome);
  const out = [];
  const draft = (kind, text, fields) => out.push({ fingerprint: fingerprint(kind, text), event: event(base(), fields) });
  for (const log of item.logs ?? []) {
    // Nearly every line is a console.log without `"error"` in it (a routine
    // request line, an info line): none is an error, none is parsed.
    const first = Array.isArray(log.message) ? log.message[0] : log.message;
    if (log.level !== "error" && !(typeof first === "string" && first.includes('"error"'))) continue;
    const line = routerLine(log);
    if (line) {
      const failedRequest = line.ruleset !== undefined && line.error !== undefined && line.error !== null;
      if (failedRequest && (line.error_level === "warn" || clientGone)) continue;
      if (line.level !== "error" && !failedRequest) continue;
      const text = failedRequest ? `${line.method ?? ""} request failed: ${line.error}` : `${line.scope ?? "router"}: ${line.message ?? ""}`;
      const release = line.version && !base().release ? { release: String(line.version) } : {};
      const kind = failedRequest ? `request\u0000${line.rule}\u0000${line.cell}` : `line\u0000${line.scope}`;
      out.push({
        fingerprint: fingerprint(kind, text),
        event: event({ ...base(), ...release }, { timestamp: log.timestamp, message: text, tags: lineTags(line), extra: { line } }),
      });
    } else if (log.level === "error") {
      const args = Array.isArray(log.message) ? log.message : [log.message];
      const text = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ");
      draft("console", text, { timestamp: log.timestamp, message: text, tags: { scope: "console" } });
    }
  }
  for (const ex of item.exceptions ?? []) {
    const type = ex.name || "Error";
    const value = String(ex.message ?? "");
    draft(`exception\u0000${type}`, value, {
      timestamp: ex.timestamp,
      exception: { type, value, mechanism: { type: "cloudflare-tail", handled: false } },
      extra: ex.stack ? { stack: String(ex.stack) } : undefined,
    });
  }
  if (!FINE_OUTCOMES.has(item.outcome) && (item.exceptions ?? []).length === 0) {
    draft("outcome", item.outcome, { timestamp: item.eventTimestamp, message: `invocation ended with outcome ${item.outcome}` });
  }
  return out;
}

/**
 * The drafts with one per fingerprint, the first of each, in order; an
 * event that stands for more says how many in `extra.repeats`.
 */
export function deduplicated(drafts) {
  const firsts = new Map();
  for (const d of drafts) {
    const seen = firsts.get(d.fingerprint);
    if (seen) seen.repeats += 1;
    else firsts.set(d.fingerprint, { ...d, repeats: 0 });
  }
  return [...firsts.values()].map(({ repeats, ...d }) => (repeats > 0 ? { ...d, event: { ...d.event, extra: { ...d.event.extra, repeats } } } : d));
}

/**
 * An event as it is sent: scrubbed whole (nothing leaves without passing
 * the scrubber, which also cuts every string), and its event id (32 hex
 * digits: added after the scrubber).
 */
export function finished(event) {
  return { event_id: eventId(), ...scrubValue(event) };
}

/** The events of one trace item, finished. */
export function itemReports(item, env = {}) {
  return itemDrafts(item, env).map((d) => finished(d.event));
}

/** A `warning` event about events not sent, like the batch's other events. */
export function droppedEvent(like, message, extra) {
  return {
    timestamp: Date.now() / 1000,
    level: "warning",
    platform: "javascript",
    logger: "gitlab-http-router",
    ...(like?.environment ? { environment: like.environment } : {}),
    ...(like?.release ? { release: like.release } : {}),
    message: { formatted: message },
    tags: { scope: "tail", outcome: like?.tags?.outcome ?? "unknown" },
    extra,
  };
}

/**
 * At most `limit` events: when there are more, the first `limit - 1` and
 * one saying how many were dropped.
 */
export function bounded(events, limit) {
  if (events.length <= limit) return events;
  const kept = events.slice(0, limit - 1);
  const dropped = events.length - kept.length;
  kept.push(droppedEvent(events[0], `${dropped} more error events of one tail batch were dropped (at most ${limit} are sent per batch)`, { dropped, limit }));
  return kept;
}
