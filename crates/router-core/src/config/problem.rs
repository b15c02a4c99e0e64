//! What is wrong with a setting, and how it shows: a log line's level at
//! run time, and whether it stops a deploy.

use std::fmt;

/// How a [`Problem`] shows at run time, and whether it stops a deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The router has nothing to fall back to, or refuses traffic as a
    /// setting says (no legacy cell; signing required without a usable
    /// key): an `error` line (it reaches Sentry). Fails the deploy check.
    Error,
    /// A value the router cannot read, or reads only in part; the fallback
    /// it uses is stated: a `warn` line. Fails the deploy check.
    Warn,
    /// A deliberate state worth stating once (no signing key while signing
    /// is optional): an `info` line. The deploy check passes.
    Note,
}

impl Level {
    /// The log line's `level`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Note => "info",
        }
    }

    /// Whether `rulesctl config check` (and so a deploy) fails on it.
    pub fn fails_check(self) -> bool {
        !matches!(self, Level::Note)
    }
}

/// One setting's problem: which setting, its value as given (never a
/// secret's), what is wrong and what the router does instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub level: Level,
    pub setting: String,
    /// The value as given (trimmed), or the entry of a list that is wrong;
    /// `None` when not set, and always for a secret.
    pub value: Option<String>,
    pub wrong: String,
    /// What the router uses or does instead.
    pub instead: String,
}

impl Problem {
    fn new(level: Level, setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem {
            level,
            setting: setting.to_string(),
            value: value.map(str::to_string),
            wrong: wrong.to_string(),
            instead: instead.to_string(),
        }
    }

    pub fn error(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Error, setting, value, wrong, instead)
    }

    pub fn warn(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Warn, setting, value, wrong, instead)
    }

    pub fn note(setting: &str, value: Option<&str>, wrong: &str, instead: &str) -> Self {
        Problem::new(Level::Note, setting, value, wrong, instead)
    }
}

/// `SETTING="value": what is wrong; what is used instead` (without
/// `="value"` when there is none to show).
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.setting)?;
        if let Some(value) = &self.value {
            write!(f, "={value:?}")?;
        }
        write!(f, ": {}; {}", self.wrong, self.instead)
    }
}
