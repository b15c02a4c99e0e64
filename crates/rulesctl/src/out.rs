//! Printing that never panics: a closed pipe (`rulesctl diff ... | head`)
//! ends the program quietly instead of with a "failed printing" panic.

use std::io::Write;

pub fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(1);
    }
}

pub fn err_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
