//! Asking before a write to a deployed environment's namespace: on a
//! terminal the operator answers; without one `--yes` must say so, since
//! nobody can answer (a pipe, a CI job).

use std::io::{BufRead, IsTerminal, Write};

use crate::cli::{Failure, Outcome};

/// `--yes`, shared by the commands that write.
#[derive(clap::Args)]
pub struct Yes {
    /// Write to a remote namespace without asking (CI); without it rulesctl
    /// asks on a terminal and refuses without one
    #[arg(long)]
    pub yes: bool,
}

/// Before anything is read: refuses (exit 2) a remote write that nobody
/// can confirm.
pub fn refuse_unconfirmable(yes: &Yes, remote: bool, what: &str) -> Outcome<()> {
    if !remote || yes.yes || std::io::stdin().is_terminal() {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{what} writes to a remote namespace and there is no terminal to confirm on: pass --yes to write without asking (CI jobs do), or --dry-run to see the change first"
    )))
}

/// Asks `question` on the terminal when the write needs confirming;
/// anything but y or yes refuses.
pub fn ask(yes: &Yes, remote: bool, question: &str) -> Outcome<()> {
    if !remote || yes.yes {
        return Ok(());
    }
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "{question} [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::data(format!("reading the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::data("not confirmed: nothing written")),
    }
}
