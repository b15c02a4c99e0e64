//! How a setting is declared and read. Each block of settings (one file
//! beside this one per policy it fills) declares every setting once: its
//! name, meaning, default, accepted values and what a value the router
//! cannot read does at run time, as a [`Text`] or a [`Number`]. The
//! [`Reader`] reads them and collects the [`Problem`]s; [`Row`] is the
//! same declaration as README.md's settings table shows it.

use super::problem::Problem;

/// A setting its block reads with its own parser (written beside the
/// declaration), described for the table.
pub struct Text {
    pub name: &'static str,
    pub meaning: &'static str,
    pub default: &'static str,
    pub accepted: &'static str,
    /// What a value the router cannot read does at run time, with the
    /// line's level.
    pub fallback: &'static str,
    /// A Worker secret (`wrangler secret put`), never `[vars]`: its value
    /// is never shown.
    pub secret: bool,
}

/// A whole-number setting, bound to the field it sets; the field's value
/// before reading is the default. Out of `min..=max` a value takes the
/// nearest bound; not a whole number, the default (`warn` either way).
/// Its meaning is `M`: the text for the table, `()` for reading.
pub struct Number<'a, M> {
    pub name: &'static str,
    pub meaning: M,
    pub min: u32,
    pub max: u32,
    pub value: &'a mut dyn Slot,
}

/// What a [`Number`]'s meaning is made into: its text for the table,
/// nothing when reading, so that the worker's wasm holds no meaning.
pub trait Meaning {
    fn of(text: &'static str) -> Self;
}

impl Meaning for &'static str {
    fn of(text: &'static str) -> Self {
        text
    }
}

impl Meaning for () {
    fn of(_: &'static str) -> Self {}
}

/// A field a [`Number`] sets.
pub trait Slot {
    fn get(&self) -> u32;
    fn set(&mut self, n: u32);
}

impl Slot for u32 {
    fn get(&self) -> u32 {
        *self
    }
    fn set(&mut self, n: u32) {
        *self = n;
    }
}

impl Slot for usize {
    fn get(&self) -> u32 {
        u32::try_from(*self).unwrap_or(u32::MAX)
    }
    fn set(&mut self, n: u32) {
        *self = usize::try_from(n).unwrap_or(usize::MAX);
    }
}

/// What a whole number the router cannot read does.
const NUMBER_FALLBACK: &str = "the nearest bound, or the default if not a whole number; `warn`";

/// One setting as README.md's settings table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub meaning: &'static str,
    pub default: String,
    pub accepted: String,
    pub fallback: String,
    pub secret: bool,
}

impl Text {
    pub fn row(&self) -> Row {
        Row {
            name: self.name,
            meaning: self.meaning,
            default: self.default.to_string(),
            accepted: self.accepted.to_string(),
            fallback: self.fallback.to_string(),
            secret: self.secret,
        }
    }
}

impl Number<'_, &'static str> {
    pub fn row(&self) -> Row {
        Row {
            name: self.name,
            meaning: self.meaning,
            default: self.value.get().to_string(),
            accepted: format!("{}–{}", self.min, self.max),
            fallback: NUMBER_FALLBACK.to_string(),
            secret: false,
        }
    }
}

/// Reads settings through the environment's lookup, collecting what is
/// wrong with them.
pub struct Reader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    pub problems: Vec<Problem>,
}

impl<'a> Reader<'a> {
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Reader {
            lookup,
            problems: Vec::new(),
        }
    }

    /// The value of the setting named `name` (a [`Text`]'s; the name alone
    /// is passed so that the wasm holds no meaning), trimmed; `None` when
    /// not set or empty.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// Reads `number` into the field it is bound to (left at its default
    /// when not set).
    pub fn number(&mut self, number: Number<'_, ()>) {
        let Some(v) = self.get(number.name) else {
            return;
        };
        let (n, problem) = read_number(&v, number.value.get(), number.min, number.max);
        number.value.set(n);
        if let Some((wrong, instead)) = problem {
            self.warn(number.name, Some(v.as_str()), &wrong, &instead);
        }
    }

    pub fn error(&mut self, setting: &str, value: Option<&str>, wrong: &str, instead: &str) {
        self.problems
            .push(Problem::error(setting, value, wrong, instead));
    }

    pub fn warn(&mut self, setting: &str, value: Option<&str>, wrong: &str, instead: &str) {
        self.problems
            .push(Problem::warn(setting, value, wrong, instead));
    }

    pub fn note(&mut self, setting: &str, value: Option<&str>, wrong: &str, instead: &str) {
        self.problems
            .push(Problem::note(setting, value, wrong, instead));
    }
}

/// A whole-number setting's value: `(the number used, Some((what is wrong,
/// what is used instead)))`. Out of `min..=max` it is the nearest bound;
/// not a whole number, `default`.
fn read_number(v: &str, default: u32, min: u32, max: u32) -> (u32, Option<(String, String)>) {
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return (
            default,
            Some((
                format!("not a whole number ({min}..={max})"),
                format!("using the default, {default}"),
            )),
        );
    }
    // Digits alone: too many for u64 is above any maximum.
    let n = if negative {
        None
    } else {
        Some(digits.parse::<u64>().unwrap_or(u64::MAX))
    };
    match n {
        Some(n) if n >= u64::from(min) && n <= u64::from(max) => {
            (u32::try_from(n).unwrap_or(max), None)
        }
        Some(n) if n > u64::from(max) => (
            max,
            Some((format!("above the maximum, {max}"), format!("using {max}"))),
        ),
        _ => (
            min,
            Some((format!("below the minimum, {min}"), format!("using {min}"))),
        ),
    }
}
