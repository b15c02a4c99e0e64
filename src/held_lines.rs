//! Log lines written while the isolate starts, held for its first
//! invocation.
//!
//! The entry's top level makes the isolate's state (`routerStart`), and the
//! settings' problems are logged then. But what a Worker writes outside an
//! invocation reaches neither its tail consumers (the Sentry tail worker)
//! nor Workers Logs: both are fed per invocation. So the lines written
//! during start-up are kept here and written by the first invocation: its
//! fetch (`routerRelease`) or its cron run (`routerScheduled`).

use std::cell::RefCell;

thread_local! {
    /// `Some` while the isolate starts: the lines held, each with whether
    /// it goes to `console.error`.
    static HELD: RefCell<Option<Vec<(bool, String)>>> = const { RefCell::new(None) };
}

/// Holds the lines written from now until [`release`].
pub(crate) fn hold() {
    HELD.with(|held| {
        held.borrow_mut().get_or_insert_with(Vec::new);
    });
}

/// Writes `line` to the console, or holds it while the isolate starts.
pub(crate) fn write(to_error: bool, line: String) {
    let line = HELD.with(|held| match held.borrow_mut().as_mut() {
        Some(lines) => {
            lines.push((to_error, line));
            None
        }
        None => Some(line),
    });
    if let Some(line) = line {
        console(to_error, &line);
    }
}

/// Writes the held lines, in order, and stops holding. Nothing when
/// nothing is held.
pub(crate) fn release() {
    let Some(lines) = HELD.with(|held| held.borrow_mut().take()) else {
        return;
    };
    for (to_error, line) in lines {
        console(to_error, &line);
    }
}

fn console(to_error: bool, line: &str) {
    if to_error {
        web_sys::console::error_1(&line.into());
    } else {
        web_sys::console::log_1(&line.into());
    }
}
