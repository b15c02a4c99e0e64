// The router's tail consumer (wrangler.toml `tail_consumers`): after each
// router invocation Cloudflare hands it the invocation's trace items (its
// console lines, uncaught exceptions, outcome and request), and it sends
// the errors among them (reports.mjs) to Sentry, one envelope per event,
// scrubbed of secrets (scrub.mjs). docs/logging.md, "Errors to Sentry:
// the tail worker".
//
// It runs apart from the router, after the router's response is sent: a
// slow or absent Sentry costs this worker's time, never a request's. Its
// own time is bounded too: drafting an event is cheap, and only the events
// that are sent (one per fingerprint, within the batch's and the minute's
// limits) are scrubbed, their strings cut before any rule runs.
//
// Bindings:
//   SENTRY_DSN                   secret: `https://<key>@<host>/<project id>`; unset, everything is dropped
//   SENTRY_ENVIRONMENT           the event's `environment` (the router's wrangler environment)
//   SENTRY_MAX_EVENTS            [20] events sent per tail batch; past it, one event counts the rest
//   SENTRY_MAX_EVENTS_PER_MINUTE [60] distinct events sent per minute by one isolate (budget.mjs)
//   SENTRY_TIMEOUT_MS            [5000] how long the batch's sends may take in all
import { MinuteBudget } from "./budget.mjs";
import { bounded, deduplicated, droppedEvent, finished, itemDrafts } from "./reports.mjs";
import { authHeader, dsnRefusal, envelope, parseDsn } from "./sentry.mjs";
import { scrubText } from "./scrub.mjs";

// (Only handlers may be exported from a Worker's main module.)
const DEFAULT_MAX_EVENTS = 20;
const DEFAULT_MAX_PER_MINUTE = 60;
const DEFAULT_TIMEOUT_MS = 5000;

/** A positive integer setting, at most `max`; `fallback` when unset or not one. */
function setting(value, fallback, max) {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? Math.min(n, max) : fallback;
}

const line = (level, message) => JSON.stringify({ level, scope: "tail", message });

/** Said once per isolate: a missing DSN would otherwise write a line per router request. */
let toldNoDsn = false;

/** This isolate's minute window. */
const minute = new MinuteBudget();

/** Sends one envelope; resolves with null when Sentry took it, else why not. */
async function send(dsn, event, signal) {
  try {
    const res = await fetch(dsn.endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-sentry-envelope", "x-sentry-auth": authHeader(dsn) },
      body: envelope(event),
      // A redirect is not followed: the envelope goes to the DSN's host or nowhere.
      redirect: "manual",
      signal,
    });
    await res.body?.cancel();
    if (res.status >= 300 && res.status < 400) return `answered ${res.status}, a redirect (not followed)`;
    return res.ok ? null : `answered ${res.status}`;
  } catch (e) {
    return signal.aborted ? "timed out" : scrubText(e?.message ?? String(e));
  }
}

/**
 * The events one batch sends: its drafts one per fingerprint, those the
 * minute window lets through, at most `maxEvents`; then scrubbed.
 */
function reportsOf(events, env) {
  const drafts = deduplicated(events.flatMap((item) => itemDrafts(item, env)));
  if (drafts.length === 0) return [];
  const perMinute = setting(env.SENTRY_MAX_EVENTS_PER_MINUTE, DEFAULT_MAX_PER_MINUTE, 1000);
  const { admitted, held, tell, until } = minute.admit(drafts, perMinute);
  const chosen = bounded(
    admitted.map((d) => d.event),
    setting(env.SENTRY_MAX_EVENTS, DEFAULT_MAX_EVENTS, 100),
  );
  if (tell) {
    const message = `error events over ${perMinute} a minute in one tail worker isolate are held back until ${new Date(until).toISOString()} (${held} so far)`;
    chosen.push(droppedEvent(drafts[0].event, message, { held, limit_per_minute: perMinute }));
  }
  return chosen.map(finished);
}

export default {
  async tail(events, env) {
    const dsn = parseDsn(env.SENTRY_DSN);
    if (!dsn) {
      if (!toldNoDsn) {
        const refused = dsnRefusal(env.SENTRY_DSN);
        console.log(refused ? line("error", `${refused}: the router's errors are not sent anywhere`) : line("warn", "SENTRY_DSN is not set (or is not a DSN): the router's errors are not sent anywhere"));
      }
      toldNoDsn = true;
      return;
    }
    const reports = reportsOf(events, env);
    if (reports.length === 0) return;
    const timeoutMs = setting(env.SENTRY_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, 30_000);
    const signal = AbortSignal.timeout(timeoutMs);
    const problems = (await Promise.all(reports.map((event) => send(dsn, event, signal)))).filter(Boolean);
    if (problems.length > 0) {
      const why = problems[0] === "timed out" ? `timed out after ${timeoutMs} ms` : problems[0];
      console.log(line("warn", `${problems.length} of ${reports.length} error reports not delivered to Sentry: ${why}`));
    }
  },
};
