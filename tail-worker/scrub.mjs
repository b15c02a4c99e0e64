// What of a request may leave Cloudflare in an error report, and how
// secrets are taken out of the rest. Headers go by an allow-list (nothing
// else is sent), URLs lose their query string and user info, and every
// string of a report passes through scrubText, which replaces what looks
// like a credential with "[redacted]".

/** The only request headers a report carries: none of them holds a credential. */
export const SENT_HEADERS = ["user-agent", "content-type", "content-length", "accept", "cf-ray", "host"];

export const REDACTED = "[redacted]";

/** Names (keys, header names, parameters) whose values are credentials. */
const SECRET_NAME = /token|secret|passw(?:or)?d|pwd|session|cookie|auth|signature|credential|api[_-]?key|private|dsn/i;

const TEXT_RULES = [
  // A header written out: `Authorization: Bearer …`, `PRIVATE-TOKEN: …`.
  [
    /\b(authorization|proxy-authorization|set-cookie|cookie|private-token|job-token|deploy-token|cf-access-client-secret|cf-access-client-id|x-gitlab-token|x-api-key)(\s*:\s*)[^\r\n"]*/gi,
    (_, name, sep) => `${name}${sep}${REDACTED}`,
  ],
  // A scheme's credential: `Bearer …`, `Basic …`.
  [/\b(Bearer|Basic|Token|Digest)(\s+)[A-Za-z0-9._~+/=-]{6,}/g, (_, scheme, sep) => `${scheme}${sep}${REDACTED}`],
  // GitLab tokens (`glpat-…`, `gldt-…`, `glrt-…`, `glcbt-…`, any instance prefix before them).
  [/(?<![A-Za-z0-9])gl[a-z]{2,8}-[A-Za-z0-9_.-]{8,}/g, () => REDACTED],
  // Runner registration tokens.
  [/\bGR1348941[A-Za-z0-9_-]+/g, () => REDACTED],
  // JSON Web Tokens.
  [/\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g, () => REDACTED],
  // User info in a URL: `https://user:password@host`.
  [/\b([a-z][a-z0-9+.-]*:\/\/)[^/\s:@"]+(?::[^/\s@"]*)?@/gi, (_, scheme) => `${scheme}${REDACTED}@`],
  // `name=value` with a secret-looking name (a query string, a cookie header's pairs).
  [
    /([A-Za-z0-9_.\-[\]]*)(\s*=\s*)([^&\s"';,)}]+)/g,
    (all, name, sep) => (SECRET_NAME.test(name) ? `${name}${sep}${REDACTED}` : all),
  ],
  // `"name":"value"` (JSON text) with a secret-looking name.
  [
    /"([A-Za-z0-9_.-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)"/g,
    (all, name, sep) => (SECRET_NAME.test(name) ? `"${name}"${sep}"${REDACTED}"` : all),
  ],
  // Long hexadecimal runs (session ids, raw keys); a trace id is kept by the caller.
  [/(?<![A-Za-z0-9])[0-9a-fA-F]{32,}(?![A-Za-z0-9])/g, () => REDACTED],
];

/** `text` with everything that looks like a credential replaced. */
export function scrubText(text) {
  let out = String(text);
  for (const [pattern, replace] of TEXT_RULES) out = out.replace(pattern, replace);
  return out;
}

/**
 * A URL without its query string, fragment and user info: a path can
 * name a project, a query string can carry `private_token`.
 */
export function stripUrl(raw) {
  const text = String(raw ?? "");
  try {
    const url = new URL(text);
    const cut = `${url.protocol}//${url.host}${url.pathname}`;
    return scrubText(url.search ? `${cut}?${REDACTED}` : cut);
  } catch {
    const cut = text.split(/[?#]/, 1)[0];
    return scrubText(cut.length < text.length && text[cut.length] === "?" ? `${cut}?${REDACTED}` : cut);
  }
}

/** The allow-listed headers of `headers` (an object or a Headers), values scrubbed. */
export function sentHeaders(headers) {
  const out = {};
  if (!headers) return out;
  const get = typeof headers.get === "function" ? (n) => headers.get(n) : (n) => headers[n] ?? headers[n.toLowerCase()];
  for (const name of SENT_HEADERS) {
    const value = get(name);
    if (typeof value === "string") out[name] = scrubText(value);
  }
  return out;
}

/** The router's W3C trace context header, exactly (kept: it names no secret). */
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * `value` (any JSON value) with every string scrubbed, the values of
 * secret-looking keys replaced whole, and `url`/`path` fields stripped of
 * their query strings.
 */
export function scrubValue(value, key = "") {
  if (typeof value === "string") {
    if (key === "traceparent" && TRACEPARENT.test(value)) return value;
    if (key === "url" || key === "path") return stripUrl(value);
    return scrubText(value);
  }
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, key));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = SECRET_NAME.test(k) && v !== null && typeof v !== "object" ? REDACTED : scrubValue(v, k);
    return out;
  }
  return value;
}
