//! Evaluation: a compiled rule against one request's parts.

use std::borrow::Cow;

use super::pattern::Regex;

use super::model::*;
use super::Action;
use crate::question::{ClassifyKind, ClassifyRequest, MAX_CLASSIFY_VALUE_BYTES};
use crate::request::RequestParts;
use crate::select::template::{Scope, Segment};
use crate::select::transform::Output;

/// Per-request scratch space for one rule's captures and transform outputs.
#[derive(Default)]
pub(super) struct Eval<'r, 'q> {
    pub(super) captures: Vec<(&'r str, Cow<'q, str>)>,
    pub(super) outputs: Vec<Option<Output>>,
    /// Whether the rule did not apply because its classify value was over
    /// [`MAX_CLASSIFY_VALUE_BYTES`].
    pub(super) value_too_long: bool,
}

impl Eval<'_, '_> {
    pub(super) fn clear(&mut self) {
        self.captures.clear();
        self.outputs.clear();
        self.value_too_long = false;
    }

    /// `None` (and noted) when a classify value of `len` bytes is over
    /// [`MAX_CLASSIFY_VALUE_BYTES`].
    fn within_cap(&mut self, len: usize) -> Option<()> {
        self.value_too_long = len > MAX_CLASSIFY_VALUE_BYTES;
        (!self.value_too_long).then_some(())
    }
}

impl Scope for Eval<'_, '_> {
    fn capture(&self, name: &str) -> Option<&str> {
        self.captures
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_ref())
    }

    fn output(&self, output: usize, key: Option<&str>) -> Option<Cow<'_, str>> {
        self.outputs.get(output)?.as_ref()?.get(key)
    }
}

/// Matches `value` against `re`, recording named captures. Returns whether
/// it matched.
pub(super) fn match_value<'r, 'q>(
    re: &'r Regex,
    value: Cow<'q, str>,
    captures: &mut Vec<(&'r str, Cow<'q, str>)>,
) -> bool {
    if re.captures_len() == 1 {
        return re.is_match(&value);
    }
    re.named_groups(&value, |name, span| {
        if let Some(text) = slice(&value, span) {
            captures.push((name, text));
        }
    })
}

/// `value[span]`, borrowed from the request where `value` is; `None` for a
/// span off `value`'s character boundaries (a group the program got wrong
/// is left unset, not a panic).
fn slice<'q>(value: &Cow<'q, str>, span: std::ops::Range<usize>) -> Option<Cow<'q, str>> {
    match value {
        Cow::Borrowed(v) => v.get(span).map(Cow::Borrowed),
        Cow::Owned(v) => v.get(span).map(|t| Cow::Owned(t.to_string())),
    }
}

impl Matcher {
    pub(super) fn capture_names(&self) -> Vec<String> {
        let regexes: Vec<&Regex> = match self {
            Matcher::Path(r) | Matcher::Host(r) => vec![r],
            Matcher::Method(MethodMatch::Regex(r)) => vec![r],
            Matcher::Method(MethodMatch::List(_)) => vec![],
            Matcher::Header { value, .. }
            | Matcher::Cookie { value, .. }
            | Matcher::Query { value, .. } => value.iter().collect(),
        };
        regexes
            .into_iter()
            .flat_map(|r| r.capture_names().flatten().map(str::to_string))
            .collect()
    }

    pub(super) fn matches<'r, 'q>(
        &'r self,
        req: &'q RequestParts,
        captures: &mut Vec<(&'r str, Cow<'q, str>)>,
    ) -> bool {
        let optional =
            |re: &'r Option<Regex>, v: Cow<'q, str>, caps: &mut Vec<(&'r str, Cow<'q, str>)>| {
                re.as_ref().is_none_or(|re| match_value(re, v, caps))
            };
        match self {
            Matcher::Path(re) => match_value(re, Cow::Borrowed(&req.path), captures),
            Matcher::Host(re) => match_value(re, Cow::Borrowed(&req.host), captures),
            Matcher::Method(MethodMatch::List(list)) => list.contains(&req.method),
            Matcher::Method(MethodMatch::Regex(re)) => {
                match_value(re, Cow::Borrowed(&req.method), captures)
            }
            Matcher::Header { name, value } => {
                // Header names are case-insensitive; the edge lower-cases them.
                let found = match name {
                    NameMatch::Exact(n) => req.header(n),
                    NameMatch::Regex(_) => req
                        .headers
                        .iter()
                        .find(|(n, _)| name.accepts(n))
                        .map(|(_, v)| v.as_str()),
                };
                found.is_some_and(|v| optional(value, Cow::Borrowed(v), captures))
            }
            // The first cookie (or query parameter) whose name and value both
            // match decides; junk before it is skipped.
            Matcher::Cookie { name, value } => req
                .cookies()
                .any(|(n, v)| name.accepts(n) && optional(value, Cow::Borrowed(v), captures)),
            Matcher::Query { name, value } => req
                .query_pairs()
                .any(|(n, v)| name.accepts(&n) && optional(value, v, captures)),
        }
    }
}

impl Rule {
    /// Whether this rule takes every request (nothing after it can match).
    pub fn is_catch_all(&self) -> bool {
        self.matchers.is_empty()
            && self.exist.is_empty()
            && self.not_reserved.is_empty()
            && self.max_length.is_empty()
            && self.rollout.is_none()
            && match &self.action {
                RuleAction::Proxy { .. } | RuleAction::Reject { .. } | RuleAction::Spread => true,
                // A rule that hands not-found keys on leaves the rules
                // after it reachable.
                RuleAction::Classify {
                    next_on_not_found: true,
                    ..
                } => false,
                RuleAction::Classify { value, .. } => value
                    .as_ref()
                    .is_none_or(|t| t.segments.iter().all(|s| matches!(s, Segment::Literal(_)))),
            }
    }

    /// The rule's transforms, validations, reserved-route guard and
    /// rollout, after its matchers matched: `None` when one refuses. Out of
    /// line so a fresh isolate compiles the transforms (JWT, base64, the
    /// routable token's CRC) only when a rule that has them matches.
    #[inline(never)]
    fn apply_and_validate<'r, 'q>(&'r self, eval: &mut Eval<'r, 'q>) -> Option<()> {
        for transform in &self.transforms {
            let output = transform
                .input
                .render(eval)
                .and_then(|input| transform.kind.apply(&input))
                .and_then(|output| match (&transform.extract, output) {
                    (None, output) => Some(output),
                    (Some(re), Output::Text(text)) => {
                        let mut fields = Vec::new();
                        re.named_groups(&text, |name, span| {
                            if let Some(field) = text.get(span) {
                                fields.push((name.to_string(), field.to_string()))
                            }
                        })
                        .then_some(Output::Fields(fields))
                    }
                    (Some(_), _) => None,
                });
            eval.outputs.push(output);
        }
        if !self.exist.iter().all(|t| t.exists(eval)) {
            return None;
        }
        for (bounded, max) in &self.max_length {
            if bounded.char_count(eval)? > *max {
                return None;
            }
        }
        for guarded in &self.not_reserved {
            if crate::select::reserved::is_reserved_top_level_route(&guarded.render(eval)?) {
                return None;
            }
        }
        if let Some(rollout) = &self.rollout {
            if !rollout.admits(&rollout.value.render(eval)?) {
                return None;
            }
        }
        Some(())
    }

    pub(super) fn evaluate<'r, 'q>(
        &'r self,
        req: &'q RequestParts,
        eval: &mut Eval<'r, 'q>,
    ) -> Option<Action<'r>> {
        for matcher in &self.matchers {
            if !matcher.matches(req, &mut eval.captures) {
                return None;
            }
        }
        self.apply_and_validate(eval)?;
        Some(match &self.action {
            RuleAction::Proxy { address } => Action::Proxy {
                address: address.as_deref(),
            },
            RuleAction::Reject { status, message } => Action::Reject {
                status: *status,
                message,
            },
            RuleAction::Spread => Action::Spread,
            RuleAction::Classify {
                kind,
                value,
                target,
                ..
            } if *kind == ClassifyKind::Learn => {
                eval.within_cap(req.path.len())?;
                Action::Classify(ClassifyRequest::learn(&req.method, &req.path, *target))
            }
            RuleAction::Classify {
                kind,
                value,
                target,
                ..
            } => Action::Classify(ClassifyRequest {
                kind: *kind,
                value: match value {
                    Some(t) => {
                        let value = t.render(eval)?;
                        eval.within_cap(value.len())?;
                        Some(value)
                    }
                    None => None,
                },
                method: None,
                target: *target,
            }),
        })
    }
}
