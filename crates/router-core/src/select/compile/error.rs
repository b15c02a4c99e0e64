//! What can be wrong with one rule, block by block; each message names the
//! field (`rulesctl validate` and the build print them as they are).

use thiserror::Error;

#[derive(Debug, Error)]
pub(in crate::select) enum RuleError {
    // Any block.
    #[error("{field}: invalid regex {regex:?}: {error}")]
    Regex {
        field: String,
        regex: String,
        error: String,
    },
    #[error("{field}: {error}")]
    Template { field: String, error: String },
    #[error("{field}: ${{{var}}}: {error}")]
    TemplateKey {
        field: String,
        var: String,
        error: String,
    },
    #[error("{field}: ${{{var}}} names no capture group of this rule's matchers and no transform output before it")]
    UnknownName { field: String, var: String },
    #[error("{field}: empty template")]
    EmptyTemplate { field: String },

    // The matchers.
    #[error("method: empty list matches nothing")]
    NoMethod,
    #[error("{field}: give name or regexName, not both")]
    TwoNames { field: String },
    #[error("{field}: a {kind} matcher needs name or regexName")]
    NeedsName { field: String, kind: String },
    #[error("{field}: a {kind} matcher takes no name")]
    TakesNoName { field: String, kind: String },
    #[error("{field}: a {kind} matcher needs regexValue")]
    NeedsValue { field: String, kind: String },
    #[error(
        "{field}.type: unknown matcher {kind:?} (known: path, header, cookie, query, method, host)"
    )]
    UnknownMatcher { field: String, kind: String },

    // The transforms.
    #[error("{field}.type: unknown transform {kind:?} (known: routable-token-payload, base64, jwt-claims)")]
    UnknownTransform { field: String, kind: String },
    #[error("{field}.output: {output:?} is not a plain name")]
    NotAPlainName { field: String, output: String },
    #[error("{field}.output: {output:?} is already defined")]
    AlreadyDefined { field: String, output: String },
    #[error("{field}.extract: only a text transform (base64, lowercase, percent-decode) has text to extract from")]
    NoTextToExtract { field: String },

    // rollout.
    #[error("rollout.percentage: {0} is not within 0..=100")]
    Percentage(f64),

    // The action and its block.
    #[error("action: {0:?} is not classify, proxy, spread or reject")]
    UnknownAction(String),
    /// A block another action takes (`given`: its name, or `classify or
    /// proxy`).
    #[error("action is {action} but a {given} block is given")]
    OtherBlock {
        action: &'static str,
        given: &'static str,
    },
    #[error("action is {0} but there is no {0} block")]
    NoBlock(&'static str),
    #[error("a reject block is given but the action is not reject")]
    RejectBlock,
    #[error("classify.value: a learn classification asks with the request's method and path; it takes no value")]
    LearnTakesNoValue,
    #[error("classify.type: a learn classification has no type (the cell's learn endpoint answers for the path)")]
    LearnHasNoType,
    #[error("classify.type: unknown type {0:?}")]
    UnknownType(String),
    #[error("classify.type: missing (or give \"source\": \"learn\")")]
    NoType,
    #[error("classify.source: {0:?} is neither topology nor learn")]
    UnknownSource(String),
    #[error("classify.target: {0:?} is neither web nor registry")]
    UnknownTarget(String),
    #[error("classify.value: {0} needs a value")]
    NoValue(&'static str),
    /// A setting that is one of two words.
    #[error("{field}: {value:?} is neither {first} nor {second}")]
    Neither {
        field: &'static str,
        value: String,
        first: &'static str,
        second: &'static str,
    },
    #[error("proxy.address: {0}")]
    ProxyAddress(String),
    #[error("reject.status: {0} is not a client error (400..=499)")]
    NotAClientError(u16),
    #[error("reject.message: must be one line")]
    MultiLineMessage,

    // The rule among the others.
    #[error("unreachable: rule {0} before it matches every request")]
    Unreachable(String),
    #[error("duplicate rule id {0:?}")]
    DuplicateId(String),

    // circuit.
    #[error("circuit.countGatewayStatuses: a reject rule forwards nothing to count")]
    NothingToCount,
}
