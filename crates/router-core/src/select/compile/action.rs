//! A rule's action and its block (`classify`, `proxy`, `reject`; `spread`
//! has none): one compiler per action.

use crate::error::RulesetError;
use crate::question::{ClassifyKind, Target};

use super::super::model::RuleAction;
use super::super::spec::{ClassifySpec, ProxySpec, RejectSpec};
use super::{Names, RuleCompiler};

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
        other => Err(c.err(format!(
            "action: {other:?} is not classify, proxy, spread or reject"
        ))),
    }
}

fn classify(c: &RuleCompiler, blocks: Blocks, names: &Names) -> Result<RuleAction, RulesetError> {
    if blocks.proxy.is_some() {
        return Err(c.err("action is classify but a proxy block is given"));
    }
    let cl = blocks
        .classify
        .ok_or_else(|| c.err("action is classify but there is no classify block"))?;
    let kind = classify_kind(c, &cl)?;
    let target = match cl.target.as_deref() {
        None => Target::Web,
        Some(t) => Target::parse(t).ok_or_else(|| {
            c.err(format!(
                "classify.target: {t:?} is neither web nor registry"
            ))
        })?,
    };
    let value = match (&cl.value, kind.needs_value() && kind != ClassifyKind::Learn) {
        (Some(v), _) => Some(names.template(c, "classify.value", v)?),
        (None, true) => return Err(c.err(format!("classify.value: {} needs a value", kind.name()))),
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
                return Err(c.err(
                    "classify.value: a learn classification asks with the request's method and path; it takes no value",
                ));
            }
            Ok(ClassifyKind::Learn)
        }
        (Some("learn"), Some(_)) => {
            Err(c.err(
                "classify.type: a learn classification has no type (the cell's learn endpoint answers for the path)",
            ))
        }
        (None | Some("topology"), Some(kind)) => ClassifyKind::parse(kind)
            .ok_or_else(|| c.err(format!("classify.type: unknown type {kind:?}"))),
        (None | Some("topology"), None) => {
            Err(c.err("classify.type: missing (or give \"source\": \"learn\")"))
        }
        (Some(other), _) => {
            Err(c.err(format!(
                "classify.source: {other:?} is neither topology nor learn"
            )))
        }
    }
}

/// A choice of two: `first` (or absent) is `false`, `second` is `true`.
fn either(
    c: &RuleCompiler,
    field: &str,
    value: Option<&str>,
    first: &str,
    second: &str,
) -> Result<bool, RulesetError> {
    match value {
        None => Ok(false),
        Some(v) if v == first => Ok(false),
        Some(v) if v == second => Ok(true),
        Some(other) => Err(c.err(format!(
            "{field}: {other:?} is neither {first} nor {second}"
        ))),
    }
}

fn proxy(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() {
        return Err(c.err("action is proxy but a classify block is given"));
    }
    let address = blocks.proxy.and_then(|p| p.address);
    if let Some(address) = &address {
        crate::address::validate_address(address)
            .map_err(|e| c.err(format!("proxy.address: {e}")))?;
    }
    Ok(RuleAction::Proxy { address })
}

fn spread(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() || blocks.proxy.is_some() {
        return Err(c.err("action is spread but a classify or proxy block is given"));
    }
    Ok(RuleAction::Spread)
}

fn reject(c: &RuleCompiler, blocks: Blocks) -> Result<RuleAction, RulesetError> {
    if blocks.classify.is_some() || blocks.proxy.is_some() {
        return Err(c.err("action is reject but a classify or proxy block is given"));
    }
    let r = blocks
        .reject
        .ok_or_else(|| c.err("action is reject but there is no reject block"))?;
    if !(400..=499).contains(&r.status) {
        return Err(c.err(format!(
            "reject.status: {} is not a client error (400..=499)",
            r.status
        )));
    }
    let message = r
        .message
        .unwrap_or_else(|| "request rejected by the router".to_string());
    if message.contains(['\r', '\n']) {
        return Err(c.err("reject.message: must be one line"));
    }
    Ok(RuleAction::Reject {
        status: r.status,
        message,
    })
}
