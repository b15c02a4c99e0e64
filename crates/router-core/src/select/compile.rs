//! Compilation: the JSON model checked and turned into rules, with errors
//! that name the ruleset, the rule and the field.

use super::pattern::Regex;

use super::model::*;
use super::spec::*;
use super::HeaderInterest;
use crate::error::RulesetError;
use crate::question::{ClassifyKind, Target};
use crate::select::template::{self, Segment, Template, VarRef};
use crate::select::transform::TransformKind;

// ---------------------------------------------------------------------------
// Compilation.

pub(super) struct RuleCompiler<'a> {
    pub(super) ruleset: &'a str,
    pub(super) rule: String,
    /// Makes a rule's regex: [`Regex::prebuilt`] from the build-time table
    /// (rulesets compiled whole at build time) or `Regex::eager`.
    pub(super) make_regex: &'a dyn Fn(&str) -> Result<Regex, String>,
}

impl RuleCompiler<'_> {
    pub(super) fn err(&self, message: impl Into<String>) -> RulesetError {
        RulesetError::Rule {
            ruleset: self.ruleset.to_string(),
            rule: self.rule.clone(),
            message: message.into(),
        }
    }

    pub(super) fn regex(&self, field: &str, source: &str) -> Result<Regex, RulesetError> {
        (self.make_regex)(source)
            .map_err(|e| self.err(format!("{field}: invalid regex {source:?}: {e}")))
    }

    pub(super) fn opt_regex(
        &self,
        field: &str,
        source: Option<&str>,
    ) -> Result<Option<Regex>, RulesetError> {
        source.map(|s| self.regex(field, s)).transpose()
    }
}

pub(super) fn compile_rule(
    c: &RuleCompiler,
    spec: RuleSpec,
    index: usize,
) -> Result<Rule, RulesetError> {
    let mut matchers = Vec::new();
    for (name, m) in spec.cookies.into_iter().flatten() {
        matchers.push(Matcher::Cookie {
            name: NameMatch::Exact(name.clone()),
            value: Some(c.regex(&format!("cookies.{name}.match_regex"), &m.match_regex)?),
        });
    }
    for (name, m) in spec.headers.into_iter().flatten() {
        matchers.push(Matcher::Header {
            name: NameMatch::Exact(name.to_ascii_lowercase()),
            value: Some(c.regex(&format!("headers.{name}.match_regex"), &m.match_regex)?),
        });
    }
    if let Some(methods) = spec.method {
        let methods: Vec<String> = methods
            .into_vec()
            .iter()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        if methods.is_empty() {
            return Err(c.err("method: empty list matches nothing"));
        }
        matchers.push(Matcher::Method(MethodMatch::List(methods)));
    }
    for (i, m) in spec
        .matchers
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        matchers.push(compile_matcher(c, &format!("match[{i}]"), m)?);
    }

    // Names a template may use: captures of the matchers, then transform
    // outputs as they are declared.
    let captures: Vec<String> = matchers.iter().flat_map(Matcher::capture_names).collect();
    let mut outputs: Vec<(String, OutputShape)> = Vec::new();
    let mut transforms = Vec::new();
    for (i, t) in spec
        .transform
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let field = format!("transform[{i}]");
        let kind = TransformKind::parse(&t.kind).ok_or_else(|| {
            c.err(format!(
                "{field}.type: unknown transform {:?} (known: routable-token-payload, base64, jwt-claims)",
                t.kind
            ))
        })?;
        if t.output.is_empty()
            || !t
                .output
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        {
            return Err(c.err(format!(
                "{field}.output: {:?} is not a plain name",
                t.output
            )));
        }
        if captures.contains(&t.output) || outputs.iter().any(|(n, _)| *n == t.output) {
            return Err(c.err(format!("{field}.output: {:?} is already defined", t.output)));
        }
        let input = compile_template(c, &format!("{field}.input"), &t.input, &captures, &outputs)?;
        let extract = match &t.extract {
            None => None,
            Some(_) if !kind.yields_text() => {
                return Err(c.err(format!(
                    "{field}.extract: only a text transform (base64, lowercase, percent-decode) has text to extract from"
                )))
            }
            Some(re) => Some(c.regex(&format!("{field}.extract"), re)?),
        };
        let shape = match &extract {
            Some(re) => {
                OutputShape::Extracted(re.capture_names().flatten().map(str::to_string).collect())
            }
            None => OutputShape::Plain(kind),
        };
        transforms.push(Transform {
            kind,
            input,
            extract,
        });
        outputs.push((t.output, shape));
    }
    let validate = spec.validate.unwrap_or(ValidateSpec {
        exist: Vec::new(),
        not_reserved: Vec::new(),
        max_length: Default::default(),
    });
    let templates = |field: &str, sources: &[String]| {
        sources
            .iter()
            .enumerate()
            .map(|(i, t)| compile_template(c, &format!("{field}[{i}]"), t, &captures, &outputs))
            .collect::<Result<Vec<_>, _>>()
    };
    let exist = templates("validate.exist", &validate.exist)?;
    let not_reserved = templates("validate.notReserved", &validate.not_reserved)?;
    let bounded = templates("validate.maxLength", &validate.max_length.templates)?;
    let max_length = bounded
        .into_iter()
        .zip(validate.max_length.bounds)
        .collect();

    let rollout = spec
        .rollout
        .map(|r| -> Result<Rollout, RulesetError> {
            let basis_points = match r.percentage {
                None => None,
                Some(p) if (0.0..=100.0).contains(&p) => Some((p * 100.0).round() as u32),
                Some(p) => {
                    return Err(c.err(format!("rollout.percentage: {p} is not within 0..=100")))
                }
            };
            Ok(Rollout {
                value: compile_template(c, "rollout.value", &r.value, &captures, &outputs)?,
                include: r
                    .include
                    .iter()
                    .map(|s| c.regex("rollout.include", s))
                    .collect::<Result<_, _>>()?,
                exclude: r
                    .exclude
                    .iter()
                    .map(|s| c.regex("rollout.exclude", s))
                    .collect::<Result<_, _>>()?,
                basis_points,
                seed: r.seed,
            })
        })
        .transpose()?;

    let has_reject_block = spec.reject.is_some();
    let action = match spec.action.to_ascii_lowercase().as_str() {
        "classify" => {
            if spec.proxy.is_some() {
                return Err(c.err("action is classify but a proxy block is given"));
            }
            let cl = spec
                .classify
                .ok_or_else(|| c.err("action is classify but there is no classify block"))?;
            let kind = match (cl.source.as_deref(), cl.kind.as_deref()) {
                (Some("learn"), None) => {
                    if cl.value.is_some() {
                        return Err(c.err(
                            "classify.value: a learn classification asks with the request's method and path; it takes no value",
                        ));
                    }
                    ClassifyKind::Learn
                }
                (Some("learn"), Some(_)) => {
                    return Err(c.err(
                        "classify.type: a learn classification has no type (the cell's learn endpoint answers for the path)",
                    ))
                }
                (None | Some("topology"), Some(kind)) => ClassifyKind::parse(kind)
                    .ok_or_else(|| c.err(format!("classify.type: unknown type {kind:?}")))?,
                (None | Some("topology"), None) => {
                    return Err(c.err("classify.type: missing (or give \"source\": \"learn\")"))
                }
                (Some(other), _) => {
                    return Err(c.err(format!(
                        "classify.source: {other:?} is neither topology nor learn"
                    )))
                }
            };
            let target = match cl.target.as_deref() {
                None => Target::Web,
                Some(t) => Target::parse(t).ok_or_else(|| {
                    c.err(format!(
                        "classify.target: {t:?} is neither web nor registry"
                    ))
                })?,
            };
            let value = match (&cl.value, kind.needs_value() && kind != ClassifyKind::Learn) {
                (Some(v), _) => Some(compile_template(
                    c,
                    "classify.value",
                    v,
                    &captures,
                    &outputs,
                )?),
                (None, true) => {
                    return Err(c.err(format!("classify.value: {} needs a value", kind.name())))
                }
                (None, false) => None,
            };
            let next_on_not_found = match cl.not_found.as_deref() {
                None | Some("legacy-cell") => false,
                Some("next-rule") => true,
                Some(other) => {
                    return Err(c.err(format!(
                        "classify.notFound: {other:?} is neither legacy-cell nor next-rule"
                    )))
                }
            };
            let unavailable_on_outage = match cl.on_outage.as_deref() {
                None | Some("legacy-cell") => false,
                Some("unavailable") => true,
                Some(other) => {
                    return Err(c.err(format!(
                        "classify.onOutage: {other:?} is neither legacy-cell nor unavailable"
                    )))
                }
            };
            RuleAction::Classify {
                kind,
                value,
                target,
                next_on_not_found,
                unavailable_on_outage,
            }
        }
        "proxy" => {
            if spec.classify.is_some() {
                return Err(c.err("action is proxy but a classify block is given"));
            }
            let address = spec.proxy.and_then(|p| p.address);
            if let Some(address) = &address {
                crate::address::validate_address(address)
                    .map_err(|e| c.err(format!("proxy.address: {e}")))?;
            }
            RuleAction::Proxy { address }
        }
        "spread" => {
            if spec.classify.is_some() || spec.proxy.is_some() {
                return Err(c.err("action is spread but a classify or proxy block is given"));
            }
            RuleAction::Spread
        }
        "reject" => {
            if spec.classify.is_some() || spec.proxy.is_some() {
                return Err(c.err("action is reject but a classify or proxy block is given"));
            }
            let r = spec
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
            RuleAction::Reject {
                status: r.status,
                message,
            }
        }
        other => {
            return Err(c.err(format!(
                "action: {other:?} is not classify, proxy, spread or reject"
            )))
        }
    };
    if !matches!(action, RuleAction::Reject { .. }) && has_reject_block {
        return Err(c.err("a reject block is given but the action is not reject"));
    }
    let counts_gateway_statuses = spec.circuit.is_some_and(|b| b.count_gateway_statuses);
    if counts_gateway_statuses && matches!(action, RuleAction::Reject { .. }) {
        return Err(c.err("circuit.countGatewayStatuses: a reject rule forwards nothing to count"));
    }

    Ok(Rule {
        id: spec.id.unwrap_or_else(|| format!("rule-{}", index + 1)),
        matchers,
        transforms,
        exist,
        not_reserved,
        max_length,
        rollout,
        action,
        counts_gateway_statuses,
    })
}

pub(super) fn compile_matcher(
    c: &RuleCompiler,
    field: &str,
    m: MatcherSpec,
) -> Result<Matcher, RulesetError> {
    let value = c.opt_regex(&format!("{field}.regexValue"), m.regex_value.as_deref())?;
    let name = match (m.name, m.regex_name) {
        (Some(_), Some(_)) => {
            return Err(c.err(format!("{field}: give name or regexName, not both")))
        }
        (Some(n), None) => Some(NameMatch::Exact(n)),
        (None, Some(re)) => Some(NameMatch::Regex(
            c.regex(&format!("{field}.regexName"), &re)?,
        )),
        (None, None) => None,
    };
    let needs_name = |name: Option<NameMatch>, lower: bool| -> Result<NameMatch, RulesetError> {
        match name {
            Some(NameMatch::Exact(n)) if lower => Ok(NameMatch::Exact(n.to_ascii_lowercase())),
            Some(n) => Ok(n),
            None => Err(c.err(format!(
                "{field}: a {} matcher needs name or regexName",
                m.kind
            ))),
        }
    };
    let no_name = |name: &Option<NameMatch>| -> Result<(), RulesetError> {
        match name {
            Some(_) => Err(c.err(format!("{field}: a {} matcher takes no name", m.kind))),
            None => Ok(()),
        }
    };
    let needs_value = |value: Option<Regex>| -> Result<Regex, RulesetError> {
        value.ok_or_else(|| c.err(format!("{field}: a {} matcher needs regexValue", m.kind)))
    };
    Ok(match m.kind.as_str() {
        "path" => {
            no_name(&name)?;
            Matcher::Path(needs_value(value)?)
        }
        "host" => {
            no_name(&name)?;
            Matcher::Host(needs_value(value)?)
        }
        "method" => {
            no_name(&name)?;
            Matcher::Method(MethodMatch::Regex(needs_value(value)?))
        }
        "header" => Matcher::Header {
            name: needs_name(name, true)?,
            value,
        },
        "cookie" => Matcher::Cookie {
            name: needs_name(name, false)?,
            value,
        },
        "query" => Matcher::Query {
            name: needs_name(name, false)?,
            value,
        },
        other => {
            return Err(c.err(format!(
                "{field}.type: unknown matcher {other:?} (known: path, header, cookie, query, method, host)"
            )))
        }
    })
}

pub(super) fn compile_template(
    c: &RuleCompiler,
    field: &str,
    source: &str,
    captures: &[String],
    outputs: &[(String, OutputShape)],
) -> Result<Template, RulesetError> {
    let parts = template::parse(source).map_err(|e| c.err(format!("{field}: {e}")))?;
    let mut segments = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            Ok(literal) => segments.push(Segment::Literal(literal)),
            Err(var) => {
                let output = outputs
                    .iter()
                    .enumerate()
                    .find(|(_, (n, _))| *n == var.head);
                let var_ref = if let Some((i, (_, shape))) = output {
                    shape
                        .check_key(var.tail.as_deref())
                        .map_err(|e| c.err(format!("{field}: ${{{}}}: {e}", var.head)))?;
                    VarRef::Output {
                        output: i,
                        key: var.tail,
                    }
                } else if var.tail.is_none() && captures.contains(&var.head) {
                    VarRef::Capture(var.head)
                } else {
                    let shown = match &var.tail {
                        Some(t) => format!("{}.{t}", var.head),
                        None => var.head.clone(),
                    };
                    return Err(c.err(format!(
                        "{field}: ${{{shown}}} names no capture group of this rule's matchers and no transform output before it"
                    )));
                };
                segments.push(Segment::Var(var_ref));
            }
        }
    }
    if segments.is_empty() {
        return Err(c.err(format!("{field}: empty template")));
    }
    Ok(Template {
        source: source.to_string(),
        segments,
    })
}

pub(super) fn header_interest(rules: &[Rule]) -> HeaderInterest {
    let mut names: Vec<String> = Vec::new();
    for matcher in rules.iter().flat_map(|r| &r.matchers) {
        let name = match matcher {
            Matcher::Header {
                name: NameMatch::Exact(n),
                ..
            } => n.clone(),
            Matcher::Header { .. } => return HeaderInterest::All,
            Matcher::Cookie { .. } => "cookie".to_string(),
            _ => continue,
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    HeaderInterest::Names(names)
}
