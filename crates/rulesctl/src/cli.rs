//! A small command-line parser: `--name value`, `--name=value`, flags,
//! positionals and `--`. No derive macros, no dependencies.

use std::collections::VecDeque;
use std::fmt;

/// Why a command failed. The variant decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong (exit 2).
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

/// One item of the command line.
#[derive(Debug, PartialEq, Eq)]
pub enum Arg {
    /// `--name` or `-h`, with the value given inline as `--name=value`.
    Opt(String, Option<String>),
    Positional(String),
}

/// The arguments of one subcommand.
pub struct Args {
    items: VecDeque<String>,
    only_positionals: bool,
}

impl Args {
    pub fn new(items: impl IntoIterator<Item = String>) -> Args {
        Args {
            items: items.into_iter().collect(),
            only_positionals: false,
        }
    }

    /// The next item, or `None` at the end.
    pub fn next_arg(&mut self) -> Option<Arg> {
        let item = self.items.pop_front()?;
        if self.only_positionals {
            return Some(Arg::Positional(item));
        }
        if item == "--" {
            self.only_positionals = true;
            return self.next_arg();
        }
        if let Some(long) = item.strip_prefix("--") {
            return Some(match long.split_once('=') {
                Some((name, value)) => Arg::Opt(format!("--{name}"), Some(value.to_string())),
                None => Arg::Opt(item.clone(), None),
            });
        }
        if item.len() > 1 && item.starts_with('-') {
            return Some(Arg::Opt(item, None));
        }
        Some(Arg::Positional(item))
    }

    /// The value of option `name`: the inline one, else the next item.
    pub fn value(&mut self, name: &str, inline: Option<String>) -> Outcome<String> {
        if let Some(v) = inline {
            return Ok(v);
        }
        match self.items.front() {
            Some(next) if !(next.starts_with("--") && next.len() > 2) => {
                Ok(self.items.pop_front().unwrap_or_default())
            }
            _ => Err(Failure::usage(format!("{name} needs a value"))),
        }
    }
}

/// Rejects a value given to a flag (`--json=yes`).
pub fn no_value(name: &str, inline: Option<String>) -> Outcome<()> {
    match inline {
        Some(_) => Err(Failure::usage(format!("{name} takes no value"))),
        None => Ok(()),
    }
}

/// Stores a value for an option that may be given only once.
pub fn set_once(slot: &mut Option<String>, name: &str, value: String) -> Outcome<()> {
    if slot.is_some() {
        return Err(Failure::usage(format!("{name} given twice")));
    }
    *slot = Some(value);
    Ok(())
}

pub fn unknown(command: &str, arg: Arg) -> Failure {
    match arg {
        Arg::Opt(name, _) => Failure::usage(format!("{command}: unknown option {name}")),
        Arg::Positional(p) => Failure::usage(format!("{command}: unexpected argument {p:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Args {
        Args::new(items.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options_values_and_positionals() {
        let mut a = args(&["--x", "1", "--y=2", "pos", "-h", "--", "--z"]);
        assert_eq!(a.next_arg(), Some(Arg::Opt("--x".into(), None)));
        assert_eq!(a.value("--x", None).unwrap(), "1");
        assert_eq!(a.next_arg(), Some(Arg::Opt("--y".into(), Some("2".into()))));
        assert_eq!(a.next_arg(), Some(Arg::Positional("pos".into())));
        assert_eq!(a.next_arg(), Some(Arg::Opt("-h".into(), None)));
        assert_eq!(a.next_arg(), Some(Arg::Positional("--z".into())));
        assert_eq!(a.next_arg(), None);
    }

    #[test]
    fn missing_values_are_usage_errors() {
        let mut a = args(&["--x"]);
        a.next_arg();
        assert!(matches!(a.value("--x", None), Err(Failure::Usage(_))));
        let mut a = args(&["--x", "--y"]);
        a.next_arg();
        assert!(matches!(a.value("--x", None), Err(Failure::Usage(_))));
        // A dash alone or a negative-looking value is a value.
        let mut a = args(&["--x", "-"]);
        a.next_arg();
        assert_eq!(a.value("--x", None).unwrap(), "-");
    }
}
