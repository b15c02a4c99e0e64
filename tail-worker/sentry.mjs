// The Sentry side: the DSN, the envelope endpoint and its auth header, and
// one envelope per event (Sentry's envelope format allows at most one
// `event` item in an envelope; the envelope header's `event_id` is the
// event's).

export const CLIENT = "gitlab-http-router-tail/1.0";

/** Whether a URL's `hostname` is this machine: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(hostname) {
  const host = String(hostname).toLowerCase().replace(/\.$/, "");
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function urlOf(dsn) {
  try {
    return new URL(String(dsn ?? "").trim());
  } catch {
    return null;
  }
}

/**
 * Why `dsn` is refused although it is written as a DSN: an `http:` one to
 * a host that is not loopback (the envelope, its key and the scrubbed
 * errors would cross the network in the clear); null otherwise.
 */
export function dsnRefusal(dsn) {
  const url = urlOf(dsn);
  if (url?.protocol !== "http:" || isLoopback(url.hostname)) return null;
  return `SENTRY_DSN is refused: http://${url.host} is not a loopback host, and a DSN must be https: anywhere else`;
}

/**
 * `https://<public key>@<host>[/<path>]/<project id>` as the envelope
 * endpoint and the public key; null when `dsn` is not one. `http:` only to
 * a loopback host (a local stand-in): `dsnRefusal` says why. A legacy
 * `key:secret@` DSN's secret part is never used.
 */
export function parseDsn(dsn) {
  const url = urlOf(dsn);
  if (!url || !url.username) return null;
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopback(url.hostname))) return null;
  const parts = url.pathname.split("/").filter(Boolean);
  const project = parts.pop();
  if (!project || !/^[0-9]+$/.test(project)) return null;
  const prefix = parts.length ? `/${parts.join("/")}` : "";
  return {
    endpoint: `${url.protocol}//${url.host}${prefix}/api/${project}/envelope/`,
    publicKey: decodeURIComponent(url.username),
    projectId: project,
  };
}

/** The `X-Sentry-Auth` header for `dsn` (a parsed DSN). */
export function authHeader(dsn) {
  return `Sentry sentry_version=7, sentry_key=${dsn.publicKey}, sentry_client=${CLIENT}`;
}

/** A new event id: 32 lower-case hex digits. */
export function eventId() {
  return crypto.randomUUID().replaceAll("-", "");
}

/** The envelope carrying one event: its header line, the item's header line, the event. */
export function envelope(event, sentAt = new Date()) {
  const payload = JSON.stringify(event);
  const header = JSON.stringify({ event_id: event.event_id, sent_at: sentAt.toISOString(), sdk: { name: "gitlab-http-router-tail", version: "1.0" } });
  const item = JSON.stringify({ type: "event", content_type: "application/json", length: new TextEncoder().encode(payload).length });
  return `${header}\n${item}\n${payload}\n`;
}
