//! What differs between two decisions on one request, by name: what
//! shadow evaluation ([`crate::select::shadow`]) finds, and the log line,
//! the data point and `rulesctl diff` name.

/// What differs between the active and the shadow decision: the first of
/// these, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Difference {
    /// Another rule decided (or one ruleset matched no rule).
    Rule,
    /// The same rule id, another action (`classify`, `proxy`, `reject`, `spread`).
    Action,
    /// Both classify, with another claim type or target.
    ClaimType,
    /// Both classify the same type, with another claim value (a different
    /// key extracted from the same request).
    ClaimValue,
    /// Both proxy, to another address (the legacy cell is an address too).
    Proxy,
    /// Both reject, with another status or message.
    Reject,
}

impl Difference {
    /// The name the log line and the data point use.
    pub fn name(self) -> &'static str {
        match self {
            Difference::Rule => "rule",
            Difference::Action => "action",
            Difference::ClaimType => "claim_type",
            Difference::ClaimValue => "claim_value",
            Difference::Proxy => "proxy",
            Difference::Reject => "reject",
        }
    }
}

/// What the request's data point says of a request evaluated in the
/// shadow: the shadow's rule (`None`: it matched no rule) and what differs
/// (`None`: the two agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict<'r> {
    pub rule: Option<&'r str>,
    pub difference: Option<Difference>,
}
