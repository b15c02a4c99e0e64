// The router's tail consumer (wrangler.toml `tail_consumers`): after each
// router invocation Cloudflare hands it the invocation's trace items (its
// console lines, uncaught exceptions, outcome and request), and it sends
// the errors among them (reports.mjs) to Sentry, one envelope per event,
// scrubbed of secrets (scrub.mjs). docs/operations.md, "Errors to Sentry:
// the tail worker".
//
// It runs apart from the router, after the router's response is sent: a
// slow or absent Sentry costs this worker's time, never a request's.
//
// Bindings:
//   SENTRY_DSN          secret: `https://<key>@<host>/<project id>`; unset, everything is dropped
//   SENTRY_ENVIRONMENT  the event's `environment` (the router's wrangler environment)
//   SENTRY_MAX_EVENTS   [20] events sent per tail batch; past it, one event counts the rest
//   SENTRY_TIMEOUT_MS   [5000] how long the batch's sends may take in all
import { bounded, finished, itemDrafts } from "./reports.mjs";
import { authHeader, envelope, parseDsn } from "./sentry.mjs";
import { scrubText } from "./scrub.mjs";

// (Only handlers may be exported from a Worker's main module.)
const DEFAULT_MAX_EVENTS = 20;
const DEFAULT_TIMEOUT_MS = 5000;

/** A positive integer setting, at most `max`; `fallback` when unset or not one. */
function setting(value, fallback, max) {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? Math.min(n, max) : fallback;
}

const line = (level, message) => JSON.stringify({ level, scope: "tail", message });

/** Said once per isolate: a missing DSN would otherwise write a line per router request. */
let toldNoDsn = false;

/** Sends one envelope; resolves with null when Sentry took it, else why not. */
async function send(dsn, event, signal) {
  try {
    const res = await fetch(dsn.endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-sentry-envelope", "x-sentry-auth": authHeader(dsn) },
      body: envelope(event),
      signal,
    });
    await res.body?.cancel();
    return res.ok ? null : `answered ${res.status}`;
  } catch (e) {
    return signal.aborted ? "timed out" : scrubText(e?.message ?? String(e));
  }
}

export default {
  async tail(events, env) {
    const dsn = parseDsn(env.SENTRY_DSN);
    if (!dsn) {
      if (!toldNoDsn) console.log(line("warn", "SENTRY_DSN is not set (or is not a DSN): the router's errors are not sent anywhere"));
      toldNoDsn = true;
      return;
    }
    const reports = bounded(
      events.flatMap((item) => itemDrafts(item, env)),
      setting(env.SENTRY_MAX_EVENTS, DEFAULT_MAX_EVENTS, 100),
    ).map(finished);
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
