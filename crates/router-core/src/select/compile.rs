//! Compilation: the JSON model checked and turned into rules, with errors
//! that name the ruleset, the rule and the field.

use std::collections::BTreeMap;

use super::pattern::Regex;

use super::model::*;
use super::spec::*;
use super::HeaderInterest;
use crate::error::RulesetError;
use crate::select::template::{self, Segment, Template, VarRef};
use crate::select::transform::TransformKind;

mod action;
mod error;

pub(super) use error::RuleError;

pub(super) struct RuleCompiler<'a> {
    pub(super) ruleset: &'a str,
    pub(super) rule: String,
    /// Makes a rule's regex: [`Regex::prebuilt`] from the build-time table
    /// (rulesets compiled whole at build time) or `Regex::eager`.
    pub(super) make_regex: &'a dyn Fn(&str) -> Result<Regex, String>,
}

impl RuleCompiler<'_> {
    /// `error` in this rule of this ruleset.
    pub(super) fn err(&self, error: RuleError) -> RulesetError {
        RulesetError::Rule {
            ruleset: self.ruleset.to_string(),
            rule: self.rule.clone(),
            message: error.to_string(),
        }
    }

    pub(super) fn regex(&self, field: &str, source: &str) -> Result<Regex, RulesetError> {
        (self.make_regex)(source).map_err(|error| {
            self.err(RuleError::Regex {
                field: field.to_string(),
                regex: source.to_string(),
                error,
            })
        })
    }

    pub(super) fn opt_regex(
        &self,
        field: &str,
        source: Option<&str>,
    ) -> Result<Option<Regex>, RulesetError> {
        source.map(|s| self.regex(field, s)).transpose()
    }
}

/// The names a rule's templates may use: the matchers' captures, then the
/// transforms' outputs as they are declared.
pub(super) struct Names {
    captures: Vec<String>,
    outputs: Vec<(String, OutputShape)>,
}

impl Names {
    pub(super) fn template(
        &self,
        c: &RuleCompiler,
        field: &str,
        source: &str,
    ) -> Result<Template, RulesetError> {
        compile_template(c, field, source, &self.captures, &self.outputs)
    }
}

/// A rule, block by block in the order its errors are reported: the
/// matchers, the transforms, `validate`, `rollout`, the action, `circuit`.
pub(super) fn compile_rule(
    c: &RuleCompiler,
    spec: RuleSpec,
    index: usize,
) -> Result<Rule, RulesetError> {
    let matchers = compile_matchers(c, spec.cookies, spec.headers, spec.method, spec.matchers)?;
    let mut names = Names {
        captures: matchers.iter().flat_map(Matcher::capture_names).collect(),
        outputs: Vec::new(),
    };
    let transforms = compile_transforms(c, spec.transform, &mut names)?;
    let validate = compile_validate(c, spec.validate, &names)?;
    let rollout = spec
        .rollout
        .map(|r| compile_rollout(c, r, &names))
        .transpose()?;
    let has_reject_block = spec.reject.is_some();
    let action = action::compile_action(
        c,
        &spec.action,
        action::Blocks {
            classify: spec.classify,
            proxy: spec.proxy,
            reject: spec.reject,
        },
        &names,
    )?;
    if !matches!(action, RuleAction::Reject { .. }) && has_reject_block {
        return Err(c.err(RuleError::RejectBlock));
    }
    let counts_gateway_statuses = spec.circuit.is_some_and(|b| b.count_gateway_statuses);
    if counts_gateway_statuses && matches!(action, RuleAction::Reject { .. }) {
        return Err(c.err(RuleError::NothingToCount));
    }
    Ok(Rule {
        id: spec.id.unwrap_or_else(|| format!("rule-{}", index + 1)),
        matchers,
        transforms,
        exist: validate.exist,
        not_reserved: validate.not_reserved,
        max_length: validate.max_length,
        rollout,
        action,
        counts_gateway_statuses,
    })
}

/// The seed matchers (`cookies`, `headers`, `method`), then `match`.
fn compile_matchers(
    c: &RuleCompiler,
    cookies: Option<BTreeMap<String, SeedMatchSpec>>,
    headers: Option<BTreeMap<String, SeedMatchSpec>>,
    method: Option<OneOrMany<String>>,
    listed: Option<OneOrMany<MatcherSpec>>,
) -> Result<Vec<Matcher>, RulesetError> {
    let mut matchers = Vec::new();
    for (name, m) in cookies.into_iter().flatten() {
        matchers.push(Matcher::Cookie {
            name: NameMatch::Exact(name.clone()),
            value: Some(c.regex(&format!("cookies.{name}.match_regex"), &m.match_regex)?),
        });
    }
    for (name, m) in headers.into_iter().flatten() {
        matchers.push(Matcher::Header {
            name: NameMatch::Exact(name.to_ascii_lowercase()),
            value: Some(c.regex(&format!("headers.{name}.match_regex"), &m.match_regex)?),
        });
    }
    if let Some(methods) = method {
        let methods: Vec<String> = methods
            .into_vec()
            .iter()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        if methods.is_empty() {
            return Err(c.err(RuleError::NoMethod));
        }
        matchers.push(Matcher::Method(MethodMatch::List(methods)));
    }
    for (i, m) in listed
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        matchers.push(compile_matcher(c, &format!("match[{i}]"), m)?);
    }
    Ok(matchers)
}

/// The `transform` list; each output joins `names` for the templates
/// after it.
fn compile_transforms(
    c: &RuleCompiler,
    listed: Option<OneOrMany<TransformSpec>>,
    names: &mut Names,
) -> Result<Vec<Transform>, RulesetError> {
    let mut transforms = Vec::new();
    for (i, t) in listed
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let field = format!("transform[{i}]");
        let kind = TransformKind::parse(&t.kind).ok_or_else(|| {
            c.err(RuleError::UnknownTransform {
                field: field.clone(),
                kind: t.kind.clone(),
            })
        })?;
        if t.output.is_empty()
            || !t
                .output
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
        {
            return Err(c.err(RuleError::NotAPlainName {
                field,
                output: t.output,
            }));
        }
        if names.captures.contains(&t.output) || names.outputs.iter().any(|(n, _)| *n == t.output) {
            return Err(c.err(RuleError::AlreadyDefined {
                field,
                output: t.output,
            }));
        }
        let input = names.template(c, &format!("{field}.input"), &t.input)?;
        let extract = match &t.extract {
            None => None,
            Some(_) if !kind.yields_text() => {
                return Err(c.err(RuleError::NoTextToExtract { field }))
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
        names.outputs.push((t.output, shape));
    }
    Ok(transforms)
}

/// A rule's `validate` block, compiled.
struct Validation {
    exist: Vec<Template>,
    not_reserved: Vec<Template>,
    max_length: Vec<(Template, usize)>,
}

fn compile_validate(
    c: &RuleCompiler,
    validate: Option<ValidateSpec>,
    names: &Names,
) -> Result<Validation, RulesetError> {
    let validate = validate.unwrap_or(ValidateSpec {
        exist: Vec::new(),
        not_reserved: Vec::new(),
        max_length: Default::default(),
    });
    let templates = |field: &str, sources: &[String]| {
        sources
            .iter()
            .enumerate()
            .map(|(i, t)| names.template(c, &format!("{field}[{i}]"), t))
            .collect::<Result<Vec<_>, _>>()
    };
    let exist = templates("validate.exist", &validate.exist)?;
    let not_reserved = templates("validate.notReserved", &validate.not_reserved)?;
    let bounded = templates("validate.maxLength", &validate.max_length.templates)?;
    Ok(Validation {
        exist,
        not_reserved,
        max_length: bounded
            .into_iter()
            .zip(validate.max_length.bounds)
            .collect(),
    })
}

fn compile_rollout(
    c: &RuleCompiler,
    r: RolloutSpec,
    names: &Names,
) -> Result<Rollout, RulesetError> {
    let basis_points = match r.percentage {
        None => None,
        Some(p) if (0.0..=100.0).contains(&p) => Some((p * 100.0).round() as u32),
        Some(p) => return Err(c.err(RuleError::Percentage(p))),
    };
    Ok(Rollout {
        value: names.template(c, "rollout.value", &r.value)?,
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
}

pub(super) fn compile_matcher(
    c: &RuleCompiler,
    field: &str,
    m: MatcherSpec,
) -> Result<Matcher, RulesetError> {
    let value = c.opt_regex(&format!("{field}.regexValue"), m.regex_value.as_deref())?;
    let name = match (m.name, m.regex_name) {
        (Some(_), Some(_)) => {
            return Err(c.err(RuleError::TwoNames {
                field: field.to_string(),
            }))
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
            None => Err(c.err(RuleError::NeedsName {
                field: field.to_string(),
                kind: m.kind.clone(),
            })),
        }
    };
    let no_name = |name: &Option<NameMatch>| -> Result<(), RulesetError> {
        match name {
            Some(_) => Err(c.err(RuleError::TakesNoName {
                field: field.to_string(),
                kind: m.kind.clone(),
            })),
            None => Ok(()),
        }
    };
    let needs_value = |value: Option<Regex>| -> Result<Regex, RulesetError> {
        value.ok_or_else(|| {
            c.err(RuleError::NeedsValue {
                field: field.to_string(),
                kind: m.kind.clone(),
            })
        })
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
            return Err(c.err(RuleError::UnknownMatcher {
                field: field.to_string(),
                kind: other.to_string(),
            }))
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
    let parts = template::parse(source).map_err(|e| {
        c.err(RuleError::Template {
            field: field.to_string(),
            error: e.to_string(),
        })
    })?;
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
                    shape.check_key(var.tail.as_deref()).map_err(|e| {
                        c.err(RuleError::TemplateKey {
                            field: field.to_string(),
                            var: var.head.clone(),
                            error: e.to_string(),
                        })
                    })?;
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
                    return Err(c.err(RuleError::UnknownName {
                        field: field.to_string(),
                        var: shown,
                    }));
                };
                segments.push(Segment::Var(var_ref));
            }
        }
    }
    if segments.is_empty() {
        return Err(c.err(RuleError::EmptyTemplate {
            field: field.to_string(),
        }));
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
