//! The log line's words: what the router did with a request, why its
//! upstream was chosen, and the routing mode. Each word's wire string is
//! written here only; the line, the data point and the forwarded headers
//! read it from here.

use serde::{Serialize, Serializer};

/// What the router did with a request (the line's `action`): its rule's
/// action, or `internal` for a request the edge could not route at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestAction {
    /// Forwarded as a proxy rule (or no rule) says.
    #[default]
    Proxy,
    Classify,
    Reject,
    /// Forwarded to a cell chosen among the healthy ones.
    Spread,
    /// An exception in the entry or a wasm instance that panicked.
    Internal,
}

impl RequestAction {
    pub fn name(self) -> &'static str {
        match self {
            RequestAction::Proxy => "proxy",
            RequestAction::Classify => "classify",
            RequestAction::Reject => "reject",
            RequestAction::Spread => "spread",
            RequestAction::Internal => "internal",
        }
    }
}

/// Why the upstream was chosen, or refused (the line's `chosen_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    /// The Topology Service's (or a cell's learn endpoint's) answer.
    Service,
    /// A cached answer (memory or the shared cache).
    Cache,
    /// A stale answer, the service failing.
    Stale,
    /// The cell list (`GITLAB_CELLS`), the service down.
    Static,
    Spread,
    /// A proxy rule's address.
    Fixed,
    /// The legacy cell.
    Legacy,
    /// Answered 503: the cell's circuit is open.
    CircuitOpen,
}

impl ChosenBy {
    pub fn name(self) -> &'static str {
        match self {
            ChosenBy::Service => "service",
            ChosenBy::Cache => "cache",
            ChosenBy::Stale => "stale",
            ChosenBy::Static => "static",
            ChosenBy::Spread => "spread",
            ChosenBy::Fixed => "fixed",
            ChosenBy::Legacy => "legacy",
            ChosenBy::CircuitOpen => "circuit_open",
        }
    }
}

/// The routing mode a line names (its `mode`) when it is not the normal
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The control document says every request goes to the legacy cell.
    Passthrough,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Passthrough => "passthrough",
        }
    }
}

macro_rules! serialize_by_name {
    ($($word:ty),*) => {$(
        impl Serialize for $word {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }
    )*};
}

serialize_by_name!(RequestAction, ChosenBy, Mode);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serialized_word_is_its_name() {
        let words = [
            (serde_json::to_string(&RequestAction::Spread), "spread"),
            (
                serde_json::to_string(&ChosenBy::CircuitOpen),
                "circuit_open",
            ),
            (serde_json::to_string(&Mode::Passthrough), "passthrough"),
        ];
        for (json, name) in words {
            assert_eq!(json.unwrap(), format!("{name:?}"));
        }
    }
}
