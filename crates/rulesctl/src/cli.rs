//! What a command returns. Parsing the command line is clap's (each
//! command's `Args` in its module, the command list in main.rs).

use std::fmt;

/// Why a command failed. The variant decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong (exit 2), found after clap parsed it.
    Usage(String),
    /// The data it points at is wrong: a file, a URL, a ruleset (exit 1).
    Data(String),
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::Usage(message.into())
    }

    pub fn data(message: impl Into<String>) -> Failure {
        Failure::Data(message.into())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Data(m) => f.write_str(m),
        }
    }
}

pub type Outcome<T> = Result<T, Failure>;
