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

/** The longest string an event carries (Sentry truncates long ones anyway). */
export const MAX_TEXT = 2000;

/**
 * How much past MAX_TEXT a string is scrubbed: a secret that starts before
 * the cut and fits in the margin is recognised whole. Longer strings are
 * cut to MAX_TEXT + TEXT_MARGIN before any rule runs, so scrubbing costs
 * the same for a 16 KiB header as for a 2 KiB one.
 */
export const TEXT_MARGIN = 256;

// Every rule finds spans to replace in the text as it came, in one pass
// each: each regex either starts only where its run of characters starts
// (a lookbehind on the run's own class) or stops at the first character
// that cannot continue it, so no match attempt rescans a run another
// already scanned; `name=value` is a hand scan from each `=`. The spans
// are merged and the text rebuilt once, so what is kept is known by its
// place in the original text (see `scrubText`).
const REGEX_RULES = [
  // A header written out: `Authorization: Bearer …`, `PRIVATE-TOKEN: …` (the value to the line's end).
  [/\b(authorization|proxy-authorization|set-cookie|cookie|private-token|job-token|deploy-token|cf-access-client-secret|cf-access-client-id|x-gitlab-token|x-api-key)(\s*:\s*)[^\r\n"]*/gi, (m) => m[1].length + m[2].length],
  // A scheme's credential: `Bearer …`, `Basic …`.
  [/\b(Bearer|Basic|Token|Digest)(\s+)[A-Za-z0-9._~+/=-]{6,}/g, (m) => m[1].length + m[2].length],
  // GitLab tokens (`glpat-…`, `gldt-…`, `glrt-…`, `glcbt-…`, any instance prefix before them).
  [/(?<![A-Za-z0-9])gl[a-z]{2,8}-[A-Za-z0-9_.-]{8,}/g, () => 0],
  // Runner registration tokens.
  [/\bGR1348941[A-Za-z0-9_-]+/g, () => 0],
  // JSON Web Tokens (from the start of a run of token characters only).
  [/(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g, () => 0],
  // User info in a URL: `https://user:password@host` (the scheme from the start of its run only).
  [/(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*:\/\/)[^/\s:@"]+(?::[^/\s@"]*)?(?=@)/gi, (m) => m[1].length],
  // `"name":"value"` (JSON text) with a secret-looking name.
  [/"([A-Za-z0-9_.-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)"/g, (m) => (SECRET_NAME.test(m[1]) ? m[1].length + m[2].length + 3 : -1), 1],
  // Long hexadecimal runs (session ids, raw keys); a trace id is kept by the caller.
  [/(?<![A-Za-z0-9])[0-9a-fA-F]{32,}(?![A-Za-z0-9])/g, () => 0],
];

const NAME_CHAR = /[A-Za-z0-9_.\-[\]]/;
const VALUE_END = /[&\s"';,)}]/;
const SPACE = /\s/;

/**
 * `name=value` with a secret-looking name (a query string, a cookie
 * header's pairs): the value spans. From each `=`, back over spaces and
 * the name, forward over spaces and the value; the next `=` is looked for
 * after the value, so every character is read a bounded number of times.
 */
function namedValueSpans(text, out) {
  let from = 0;
  for (;;) {
    const eq = text.indexOf("=", from);
    if (eq < 0) return;
    let nameEnd = eq;
    while (nameEnd > 0 && SPACE.test(text[nameEnd - 1])) nameEnd--;
    let nameStart = nameEnd;
    while (nameStart > 0 && NAME_CHAR.test(text[nameStart - 1])) nameStart--;
    let valueStart = eq + 1;
    while (valueStart < text.length && SPACE.test(text[valueStart])) valueStart++;
    let valueEnd = valueStart;
    while (valueEnd < text.length && !VALUE_END.test(text[valueEnd])) valueEnd++;
    if (valueEnd > valueStart && SECRET_NAME.test(text.slice(nameStart, nameEnd))) out.push([valueStart, valueEnd]);
    from = valueEnd > valueStart ? valueEnd : eq + 1;
  }
}

/** The spans of `text` to replace with REDACTED, sorted and merged where they overlap. */
function secretSpans(text) {
  const spans = [];
  for (const [pattern, keptBefore, keptAfter = 0] of REGEX_RULES) {
    for (const m of text.matchAll(pattern)) {
      const kept = keptBefore(m);
      if (kept >= 0) spans.push([m.index + kept, m.index + m[0].length - keptAfter]);
    }
  }
  namedValueSpans(text, spans);
  spans.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const merged = [];
  for (const span of spans) {
    const last = merged[merged.length - 1];
    if (last && span[0] < last[1]) last[1] = Math.max(last[1], span[1]);
    else if (!last || span[0] > last[0] || span[1] > last[1]) merged.push([...span]);
  }
  return merged;
}

/**
 * `text` with everything that looks like a credential replaced, at most
 * MAX_TEXT characters (then `…`). A longer text is cut to MAX_TEXT +
 * TEXT_MARGIN before scrubbing, and of the original only what lies before
 * MAX_TEXT is kept: a secret across the cut is recognised whole when its
 * form fits in the margin, and whatever of it is not recognised is past
 * the cut, never moved before it by a shorter replacement earlier on.
 */
export function scrubText(input) {
  const whole = String(input);
  const long = whole.length > MAX_TEXT;
  const text = long ? whole.slice(0, MAX_TEXT + TEXT_MARGIN) : whole;
  const keep = long ? MAX_TEXT : text.length;
  let out = "";
  let at = 0;
  for (const [start, end] of secretSpans(text)) {
    if (start >= keep) break;
    out += text.slice(at, start) + REDACTED;
    at = end;
  }
  if (at < keep) out += text.slice(at, keep);
  return long || out.length > MAX_TEXT ? `${out.slice(0, MAX_TEXT)}…` : out;
}

/**
 * A URL without its query string, fragment and user info: a path can
 * name a project, a query string can carry `private_token`. By hand, not
 * `new URL`: parsing would move text (`..` segments, escapes) across the
 * cut scrubText makes.
 */
export function stripUrl(raw) {
  const text = String(raw ?? "");
  const query = text.indexOf("?");
  const fragment = text.indexOf("#");
  const end = Math.min(query < 0 ? text.length : query, fragment < 0 ? text.length : fragment);
  let cut = text.slice(0, Math.min(end, MAX_TEXT + TEXT_MARGIN));
  // User info: the authority (to the first `/`) up to its last `@`.
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(cut);
  if (scheme) {
    const authorityEnd = cut.indexOf("/", scheme[0].length);
    const at = cut.lastIndexOf("@", authorityEnd < 0 ? cut.length : authorityEnd);
    if (at >= scheme[0].length) cut = scheme[0] + cut.slice(at + 1);
  }
  return scrubText(end === query && query >= 0 && end <= MAX_TEXT ? `${cut}?${REDACTED}` : cut);
}

/** The allow-listed headers of `headers` (an object or a Headers), as they came: `scrubValue` scrubs them. */
export function sentHeaders(headers) {
  const out = {};
  if (!headers) return out;
  const get = typeof headers.get === "function" ? (n) => headers.get(n) : (n) => headers[n] ?? headers[n.toLowerCase()];
  for (const name of SENT_HEADERS) {
    const value = get(name);
    if (typeof value === "string") out[name] = value;
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
