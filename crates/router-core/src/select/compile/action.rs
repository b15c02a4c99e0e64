//! A rule's action and its block (`classify`, `proxy`, `reject`; `spread`
//! has none): one compiler per action.

use crate::error::RulesetError;
use crate::question::{ClassifyKind, Target};

use super::super::model::RuleAction;
use super::super::spec::{ClassifySpec, ProxySpec, RejectSpec};
use super::{Names, RuleCompiler, RuleError};

/// The action blocks a rule gives; its action's own is required, the
/// others refused.
pub(super) struct Blocks {
    pub(super) classify: Option<ClassifySpec>,
    pub(super) proxy: Option<ProxySpec>,
    pub(super) reject: Option<RejectSpec>,
}

pub(super) fn compile_action(
    c: &RuleCompiler,
    action: &str,
    blocks: Blocks,
    names: &Names,
) -> Result<RuleAction, RulesetError> {
    match action.to_ascii_lowercase().as_str() {
        "classify" => classify(c, blocks, names),
        "proxy" => proxy(c, blocks),
        "spread" => spread(c, blocks),
        "reject" => reject(c, blocks),
        other => Err(c.err(RuleError::UnknownAction(other.to_string()))),
    }
}

fn classify(c: &RuleCompiler, blocks: Blocks, names: &Names) -> Result<RuleAction, RulesetError> {
    if blocks.proxy.is_some() {
        return Err(c.err(RuleError::OtherBlock {
            action: "classify",
            given: "proxy",
        }));
    }
    let cl = blocks
        .classify
        .ok_or_else(|| c.err(RuleError::NoBlock("classify")))?;
    let kind = classify_kind(c, &cl)?;
    let target = match cl.target.as_deref() {
        None => Target::Web,
        Some(t) => {
            Target::parse(t).ok_or_else(|| c.err(RuleError::UnknownTarget(t.to_string())))?
        }
    };
    let value = match (&cl.value, kind.needs_value() && kind != ClassifyKind::Learn) {
        (Some(v), _) => Some(names.template(c, "classify.value", v)?),
        (None, true) => return Err(c.err(RuleError::NoValue(kind.name()))),
        (None, false) => None,
    };
    let next_on_not_found = either(
        c,
        "classify.notFound",
        cl.not_found.as_deref(),
        "legacy-cell",
        "next-rule",
    )?;
    let unavailable_on_outage = either(
        c,
        "classify.onOutage",
        cl.on_outage.as_deref(),
        "legacy-cell",
        "unavailable",
    )?;
    Ok(RuleAction::Classify {
        kind,
        value,
        target,
        next_on_not_found,
        unavailable_on_outage,
    })
}

/// The question's kind: a Topology Service type, or route learning
/// (`"source": "learn"`, no type and no value).
fn classify_kind(c: &RuleCompiler, cl: &ClassifySpec) -> Result<ClassifyKind, RulesetError> {
    match (cl.source.as_deref(), cl.kind.as_deref()) {
        (Some("learn"), None) => {
            if cl.value.is_some() {
                return Err(c.err(RuleError::LearnTakesNoValue));
            }
            Ok(ClassifyKind::Learn)
        }
        (Some("learn"), Some(_)) => Err(c.err(RuleError::LearnHasNoType)),
        (None | Some("topology"), Some(kind)) => {
            ClassifyKind::parse(kind).ok_or_else(|| c.err(RuleError::UnknownType(kind.to_string())))
        }
        (None | Some("topology"), None) => Err(c.err(RuleError::NoType)),
        (Some(other), _) => Err(c.err(RuleError::UnknownSource(other.to_string()))),
    }
}

/// A choice of two: `first` (or absent) is `false`, `second` is `true`.
fn either(
    c: &RuleCompiler,
    field: &'static str,
    value: Option<&str>,
    first: &'static str,
    second: &'static str,
) -> Result<bool, RulesetError> {
    match value {
        None => Ok(false),
        Some(v) if v == first => Ok(false),
        Some(v) if v == second => Ok(true),
        Some(other) => Err(c.err(RuleError::Neither {
            field,
            value: other.to_string(),
            first,
            second,
        })),
    }
}

fn proxy(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() {
        return Err(c.err(RuleError::OtherBlock {
            action: "proxy",
            given: "classify",
        }));
    }
    let address = blocks.proxy.and_then(|p| p.address);
    if let Some(address) = &address {
        crate::address::validate_address(address)
            .map_err(|e| c.err(RuleError::ProxyAddress(e.to_string())))?;
    }
    Ok(RuleAction::Proxy { address })
}

fn spread(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() || blocks.proxy.is_some() {
        return Err(c.err(RuleError::OtherBlock {
            action: "spread",
            given: "classify or proxy",
        }));
    }
    Ok(RuleAction::Spread)
}

fn reject(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() || blocks.proxy.is_some() {
        return Err(c.err(RuleError::OtherBlock {
            action: "reject",
            given: "classify or proxy",
        }));
    }
    let r = blocks
        .reject
        .ok_or_else(|| c.err(RuleError::NoBlock("reject")))?;
    if !(400..=499).contains(&r.status) {
        return Err(c.err(RuleError::NotAClientError(r.status)));
    }
    let message = r
        .message
        .unwrap_or_else(|| "request rejected by the router".to_string());
    if message.contains(['\r', '\n']) {
        return Err(c.err(RuleError::MultiLineMessage));
    }
    Ok(RuleAction::Reject {
        status: r.status,
        message,
    })
}
