//! The edge's own log lines (not a request's): `{"level", "message",
//! "scope"}`, written through [`held_lines`](crate::held_lines) (held while
//! the isolate starts).

use crate::held_lines;

/// One line: keys in that order, as serde_json writes a map.
fn line(level: &str, scope: &str, message: &str) -> String {
    let mut out = String::from(r#"{"level":"#);
    router_core::json::push_quoted(&mut out, level);
    out.push_str(r#","message":"#);
    router_core::json::push_quoted(&mut out, message);
    out.push_str(r#","scope":"#);
    router_core::json::push_quoted(&mut out, scope);
    out.push('}');
    out
}

/// An `info` line, to the console's log stream.
pub(crate) fn info(scope: &str, message: &str) {
    held_lines::write(false, line("info", scope, message));
}

/// A `warn` line, to the console's error stream.
pub(crate) fn warn(scope: &str, message: &str) {
    held_lines::write(true, line("warn", scope, message));
}

/// An `error` line, to the console's error stream.
pub(crate) fn error(scope: &str, message: &str) {
    held_lines::write(true, line("error", scope, message));
}

/// A line at `level`: `info` to the console's log stream, anything else
/// to its error stream.
pub(crate) fn at(level: &str, scope: &str, message: &str) {
    held_lines::write(level != "info", line(level, scope, message));
}

/// A line the core wrote whole (a shadow disagreement): to the console's
/// log stream, or its error stream when `to_error`.
pub(crate) fn whole(to_error: bool, line: String) {
    held_lines::write(to_error, line);
}
