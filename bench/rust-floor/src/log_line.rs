//! The floor's JSON log line, shared by `rust-floor` and `workers-rs`.

/// Appends `text` to `out` as the inside of a JSON string.
pub fn push_json_str(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[(c as usize) >> 4]));
                out.push(char::from(HEX[(c as usize) & 15]));
            }
            c => out.push(c),
        }
    }
}

/// The log line up to its status: `{"method":…,"path":…,"action":"proxy","upstream":…,`
/// (js-floor.mjs's fields, in its order); the caller appends `"status":…,"duration_ms":…}`.
pub fn log_head(method: &str, path: &str, upstream: &str) -> String {
    let mut out = String::with_capacity(64 + path.len());
    out.push_str("{\"method\":\"");
    push_json_str(&mut out, method);
    out.push_str("\",\"path\":\"");
    push_json_str(&mut out, path);
    out.push_str("\",\"action\":\"proxy\",\"upstream\":\"");
    push_json_str(&mut out, upstream);
    out.push_str("\",");
    out
}

/// Whether the floor drops a client header (js-floor.mjs's `HOP` set and
/// the router's own `x-gitlab-http-router-*` headers); `name` is lower case.
pub fn dropped(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "x-forwarded-host"
    ) || name.starts_with("x-gitlab-http-router-")
}
