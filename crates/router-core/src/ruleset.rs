//! Rulesets: parsed, validated and compiled once, then matched per request.
//!
//! Two spellings load (SPEC §3): the seed form `{"rules": [...]}` with
//! `cookies` / `headers` maps of `match_regex` and `method` lists, and the
//! array form with `id`, `match`, `transform`, `validate`, `action`. Both
//! compile to the same [`Rule`]s. Regexes keep GitLab's semantics: they
//! search the value and are anchored only by `^` / `$`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::classify::{ClassifyKind, ClassifyRequest, Target};
use crate::error::RulesetError;
use crate::request::RequestParts;
use crate::template::{self, Scope, Segment, Template, VarRef};
use crate::transform::{Output, TransformKind};

// ---------------------------------------------------------------------------
// The JSON model (both spellings).

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesetObjectSpec {
    rules: Vec<Value>,
    #[serde(rename = "$schema", default)]
    _schema: Option<String>,
    #[serde(rename = "description", default)]
    _description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleSpec {
    #[serde(default)]
    id: Option<String>,
    /// Accepted for the people reading the ruleset; the router ignores it.
    #[serde(rename = "description", default)]
    _description: Option<String>,
    #[serde(rename = "match", default)]
    matchers: Option<OneOrMany<MatcherSpec>>,
    /// Seed form: cookie name -> `{"match_regex": RE}`.
    #[serde(default)]
    cookies: Option<BTreeMap<String, SeedMatchSpec>>,
    /// Seed form: header name -> `{"match_regex": RE}`.
    #[serde(default)]
    headers: Option<BTreeMap<String, SeedMatchSpec>>,
    /// Seed form: accepted methods.
    #[serde(default)]
    method: Option<OneOrMany<String>>,
    #[serde(default)]
    transform: Option<OneOrMany<TransformSpec>>,
    #[serde(default)]
    validate: Option<ValidateSpec>,
    #[serde(default)]
    rollout: Option<RolloutSpec>,
    action: String,
    #[serde(default)]
    classify: Option<ClassifySpec>,
    #[serde(default)]
    proxy: Option<ProxySpec>,
    #[serde(default)]
    reject: Option<RejectSpec>,
}

/// `"action": "reject"`: the router answers the request itself with a
/// client error, e.g. a repository name a registry would decode
/// differently from the rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RejectSpec {
    status: u16,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedMatchSpec {
    #[serde(alias = "matchRegex")]
    match_regex: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MatcherSpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, alias = "regex_name")]
    regex_name: Option<String>,
    #[serde(default, alias = "regex_value")]
    regex_value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransformSpec {
    #[serde(rename = "type")]
    kind: String,
    input: String,
    output: String,
    /// A regex over a text output whose named captures become the output's
    /// fields, e.g. the password of a decoded `user:password`.
    #[serde(default)]
    extract: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateSpec {
    #[serde(default)]
    exist: Vec<String>,
    /// Templates whose value must not be a reserved top-level route
    /// ([`crate::reserved`]), e.g. the first segment of a path claim.
    #[serde(default, rename = "notReserved", alias = "not_reserved")]
    not_reserved: Vec<String>,
}

/// Gradual migration: which values of a captured key a rule applies to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RolloutSpec {
    value: String,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    percentage: Option<f64>,
    #[serde(default)]
    seed: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassifySpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    target: Option<String>,
    /// What a 404 from the Topology Service means: `legacy-cell` (the
    /// default) or `next-rule`, evaluation goes on after this rule.
    #[serde(default, rename = "notFound", alias = "not_found")]
    not_found: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxySpec {
    #[serde(default)]
    address: Option<String>,
}

// ---------------------------------------------------------------------------
// The compiled form.

/// A compiled ruleset: rules in order, regexes compiled, templates resolved.
#[derive(Debug)]
pub struct Ruleset {
    name: String,
    rules: Vec<Rule>,
    interest: HeaderInterest,
}

/// Which headers the rules read; the edge copies only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderInterest {
    /// Lower-case names.
    Names(Vec<String>),
    /// A matcher tests header names by regex, so every header is needed.
    All,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub id: String,
    matchers: Vec<Matcher>,
    transforms: Vec<Transform>,
    exist: Vec<Template>,
    not_reserved: Vec<Template>,
    rollout: Option<Rollout>,
    action: RuleAction,
}

#[derive(Debug)]
enum NameMatch {
    Exact(String),
    Regex(Regex),
}

impl NameMatch {
    fn accepts(&self, name: &str) -> bool {
        match self {
            NameMatch::Exact(n) => n == name,
            NameMatch::Regex(re) => re.is_match(name),
        }
    }
}

#[derive(Debug)]
enum Matcher {
    Path(Regex),
    Host(Regex),
    Method(MethodMatch),
    Header {
        name: NameMatch,
        value: Option<Regex>,
    },
    Cookie {
        name: NameMatch,
        value: Option<Regex>,
    },
    Query {
        name: NameMatch,
        value: Option<Regex>,
    },
}

#[derive(Debug)]
enum MethodMatch {
    List(Vec<String>),
    Regex(Regex),
}

#[derive(Debug)]
struct Transform {
    kind: TransformKind,
    input: Template,
    extract: Option<Regex>,
}

/// What a transform's output offers to templates, known at compile time.
#[derive(Debug)]
enum OutputShape {
    Plain(TransformKind),
    /// Named captures of an `extract` regex.
    Extracted(Vec<String>),
}

impl OutputShape {
    fn check_key(&self, key: Option<&str>) -> Result<(), String> {
        match (self, key) {
            (OutputShape::Plain(kind), key) => kind.check_key(key),
            (OutputShape::Extracted(names), Some(k)) if names.iter().any(|n| n == k) => Ok(()),
            (OutputShape::Extracted(names), _) => Err(format!(
                "name a capture group of the extract regex ({})",
                names.join(", ")
            )),
        }
    }
}

#[derive(Debug)]
struct Rollout {
    value: Template,
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    /// Hundredths of a percent (0..=10_000) of values that the rule takes.
    basis_points: Option<u32>,
    seed: String,
}

#[derive(Debug)]
enum RuleAction {
    Proxy {
        address: Option<String>,
    },
    Reject {
        status: u16,
        message: String,
    },
    Classify {
        kind: ClassifyKind,
        value: Option<Template>,
        target: Target,
        /// `notFound: next-rule`.
        next_on_not_found: bool,
    },
}

/// What a rule decided for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'r> {
    /// The matching rule's id; `None` when no rule matched.
    pub rule_id: Option<&'r str>,
    pub action: Action<'r>,
    /// For a classify rule with `notFound: next-rule`: the position of the
    /// rule after it, where [`Ruleset::decide_from`] resumes when the
    /// Topology Service does not know the key.
    pub next_on_not_found: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'r> {
    /// Proxy to a fixed address; `None` is the legacy cell.
    Proxy { address: Option<&'r str> },
    /// Ask the Topology Service.
    Classify(ClassifyRequest),
    /// Answer with this client error; nothing is forwarded.
    Reject { status: u16, message: &'r str },
}

impl Decision<'_> {
    /// The decision as `rulesctl explain` prints it and route tables
    /// state it: `{"rule", "action", "classify": <classify body> | null,
    /// "proxy": {"address": <host> | null} | null}`, plus `"reject":
    /// {"status", "message"}` for a rejection.
    pub fn explain(&self) -> Value {
        serde_json::from_str(&self.explain_json()).unwrap_or(Value::Null)
    }

    /// [`Decision::explain`] as text: keys in that order and the classify
    /// body embedded byte for byte as it is POSTed.
    pub fn explain_json(&self) -> String {
        let text = |s: &str| Value::String(s.to_string()).to_string();
        let text_or_null = |s: Option<&str>| s.map_or_else(|| "null".to_string(), text);
        let null = || "null".to_string();
        let (classify, proxy, reject) = match &self.action {
            Action::Classify(c) => (c.body(), null(), String::new()),
            Action::Proxy { address } => (
                null(),
                format!(r#"{{"address":{}}}"#, text_or_null(*address)),
                String::new(),
            ),
            Action::Reject { status, message } => (
                null(),
                null(),
                format!(
                    r#","reject":{{"status":{status},"message":{}}}"#,
                    text(message)
                ),
            ),
        };
        let not_found = if self.next_on_not_found.is_some() {
            r#","not_found":"next-rule""#
        } else {
            ""
        };
        format!(
            r#"{{"rule":{},"action":"{}","classify":{classify},"proxy":{proxy}{reject}{not_found}}}"#,
            text_or_null(self.rule_id),
            self.action.name()
        )
    }
}

impl Action<'_> {
    /// `classify` or `proxy`, as `X-Gitlab-Http-Router-Rule-Action` says.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Proxy { .. } => "proxy",
            Action::Classify(_) => "classify",
            Action::Reject { .. } => "reject",
        }
    }
}

// ---------------------------------------------------------------------------
// Compilation.

struct RuleCompiler<'a> {
    ruleset: &'a str,
    rule: String,
}

impl RuleCompiler<'_> {
    fn err(&self, message: impl Into<String>) -> RulesetError {
        RulesetError::Rule {
            ruleset: self.ruleset.to_string(),
            rule: self.rule.clone(),
            message: message.into(),
        }
    }

    fn regex(&self, field: &str, source: &str) -> Result<Regex, RulesetError> {
        regex::RegexBuilder::new(source)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| self.err(format!("{field}: invalid regex {source:?}: {e}")))
    }

    fn opt_regex(&self, field: &str, source: Option<&str>) -> Result<Option<Regex>, RulesetError> {
        source.map(|s| self.regex(field, s)).transpose()
    }
}

impl Ruleset {
    /// Parses, validates and compiles a ruleset. `name` is used in errors
    /// (the file stem, e.g. `session_token`).
    pub fn from_json(name: &str, json: &str) -> Result<Ruleset, RulesetError> {
        let doc: Value = serde_json::from_str(json).map_err(|e| RulesetError::Json {
            ruleset: name.to_string(),
            message: e.to_string(),
        })?;
        let raw_rules = match doc {
            Value::Array(rules) => rules,
            Value::Object(_) => {
                serde_json::from_value::<RulesetObjectSpec>(doc)
                    .map_err(|e| RulesetError::Shape {
                        ruleset: name.to_string(),
                        message: format!("expected {{\"rules\": [...]}} or an array of rules: {e}"),
                    })?
                    .rules
            }
            _ => {
                return Err(RulesetError::Shape {
                    ruleset: name.to_string(),
                    message: "expected {\"rules\": [...]} or an array of rules".into(),
                })
            }
        };
        if raw_rules.is_empty() {
            return Err(RulesetError::Shape {
                ruleset: name.to_string(),
                message: "has no rules".into(),
            });
        }

        let mut rules = Vec::with_capacity(raw_rules.len());
        let mut catch_all: Option<String> = None;
        for (index, raw) in raw_rules.into_iter().enumerate() {
            let label = raw
                .get("id")
                .and_then(Value::as_str)
                .map(|id| format!("{id:?}"))
                .unwrap_or_else(|| format!("#{}", index + 1));
            let compiler = RuleCompiler {
                ruleset: name,
                rule: label,
            };
            let spec: RuleSpec =
                serde_json::from_value(raw).map_err(|e| compiler.err(e.to_string()))?;
            let rule = compile_rule(&compiler, spec, index)?;
            if let Some(earlier) = &catch_all {
                return Err(compiler.err(format!(
                    "unreachable: rule {earlier} before it matches every request"
                )));
            }
            if rule.is_catch_all() {
                catch_all = Some(compiler.rule.clone());
            }
            if rules.iter().any(|r: &Rule| r.id == rule.id) {
                return Err(compiler.err(format!("duplicate rule id {:?}", rule.id)));
            }
            rules.push(rule);
        }
        let interest = header_interest(&rules);
        Ok(Ruleset {
            name: name.to_string(),
            rules,
            interest,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Addresses that rules proxy to directly; they are allowed upstreams.
    pub fn fixed_addresses(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().filter_map(|r| match &r.action {
            RuleAction::Proxy { address } => address.as_deref(),
            RuleAction::Classify { .. } | RuleAction::Reject { .. } => None,
        })
    }

    /// The headers the rules read (lower case), so the edge copies no more.
    pub fn header_interest(&self) -> &HeaderInterest {
        &self.interest
    }

    /// The select phase: the first rule whose matchers, transforms,
    /// validations and templates all hold decides. No match: the legacy
    /// cell.
    pub fn decide<'r>(&'r self, request: &RequestParts) -> Decision<'r> {
        self.decide_from(request, 0)
    }

    /// [`Ruleset::decide`] over the rules from position `first` on: where
    /// evaluation resumes when a `notFound: next-rule` rule's key is unknown
    /// ([`Decision::next_on_not_found`]).
    pub fn decide_from<'r>(&'r self, request: &RequestParts, first: usize) -> Decision<'r> {
        let mut eval = Eval::default();
        for (index, rule) in self.rules.iter().enumerate().skip(first) {
            eval.clear();
            if let Some(action) = rule.evaluate(request, &mut eval) {
                let next = matches!(
                    rule.action,
                    RuleAction::Classify {
                        next_on_not_found: true,
                        ..
                    }
                );
                return Decision {
                    rule_id: Some(&rule.id),
                    action,
                    next_on_not_found: next.then_some(index + 1),
                };
            }
        }
        Decision {
            rule_id: None,
            action: Action::Proxy { address: None },
            next_on_not_found: None,
        }
    }
}

fn compile_rule(c: &RuleCompiler, spec: RuleSpec, index: usize) -> Result<Rule, RulesetError> {
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
            let kind = ClassifyKind::parse(&cl.kind)
                .ok_or_else(|| c.err(format!("classify.type: unknown type {:?}", cl.kind)))?;
            let target = match cl.target.as_deref() {
                None => Target::Web,
                Some(t) => Target::parse(t).ok_or_else(|| {
                    c.err(format!(
                        "classify.target: {t:?} is neither web nor registry"
                    ))
                })?,
            };
            let value = match (&cl.value, kind.needs_value()) {
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
            RuleAction::Classify {
                kind,
                value,
                target,
                next_on_not_found,
            }
        }
        "proxy" => {
            if spec.classify.is_some() {
                return Err(c.err("action is proxy but a classify block is given"));
            }
            let address = spec.proxy.and_then(|p| p.address);
            if let Some(address) = &address {
                crate::forward::validate_address(address)
                    .map_err(|e| c.err(format!("proxy.address: {e}")))?;
            }
            RuleAction::Proxy { address }
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
                "action: {other:?} is not classify, proxy or reject"
            )))
        }
    };
    if !matches!(action, RuleAction::Reject { .. }) && has_reject_block {
        return Err(c.err("a reject block is given but the action is not reject"));
    }

    Ok(Rule {
        id: spec.id.unwrap_or_else(|| format!("rule-{}", index + 1)),
        matchers,
        transforms,
        exist,
        not_reserved,
        rollout,
        action,
    })
}

fn compile_matcher(c: &RuleCompiler, field: &str, m: MatcherSpec) -> Result<Matcher, RulesetError> {
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

fn compile_template(
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
                let var_ref = if let Some(i) = outputs.iter().position(|(n, _)| *n == var.head) {
                    outputs[i]
                        .1
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

fn header_interest(rules: &[Rule]) -> HeaderInterest {
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

// ---------------------------------------------------------------------------
// Evaluation.

/// Per-request scratch space for one rule's captures and transform outputs.
#[derive(Default)]
struct Eval<'r, 'q> {
    captures: Vec<(&'r str, Cow<'q, str>)>,
    outputs: Vec<Option<Output>>,
}

impl Eval<'_, '_> {
    fn clear(&mut self) {
        self.captures.clear();
        self.outputs.clear();
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
fn match_value<'r, 'q>(
    re: &'r Regex,
    value: Cow<'q, str>,
    captures: &mut Vec<(&'r str, Cow<'q, str>)>,
) -> bool {
    if re.captures_len() == 1 {
        return re.is_match(&value);
    }
    let Some(caps) = re.captures(&value) else {
        return false;
    };
    for (i, name) in re.capture_names().enumerate() {
        let (Some(name), Some(m)) = (name, caps.get(i)) else {
            continue;
        };
        let captured = match &value {
            Cow::Borrowed(v) => Cow::Borrowed(&v[m.range()]),
            Cow::Owned(v) => Cow::Owned(v[m.range()].to_string()),
        };
        captures.push((name, captured));
    }
    true
}

impl Matcher {
    fn capture_names(&self) -> Vec<String> {
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

    fn matches<'r, 'q>(
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
            && self.rollout.is_none()
            && match &self.action {
                RuleAction::Proxy { .. } | RuleAction::Reject { .. } => true,
                RuleAction::Classify { value, .. } => value
                    .as_ref()
                    .is_none_or(|t| t.segments.iter().all(|s| matches!(s, Segment::Literal(_)))),
            }
    }

    fn evaluate<'r, 'q>(
        &'r self,
        req: &'q RequestParts,
        eval: &mut Eval<'r, 'q>,
    ) -> Option<Action<'r>> {
        for matcher in &self.matchers {
            if !matcher.matches(req, &mut eval.captures) {
                return None;
            }
        }
        for transform in &self.transforms {
            let output = transform
                .input
                .render(eval)
                .and_then(|input| transform.kind.apply(&input))
                .and_then(|output| match (&transform.extract, output) {
                    (None, output) => Some(output),
                    (Some(re), Output::Text(text)) => {
                        let caps = re.captures(&text)?;
                        let fields = re
                            .capture_names()
                            .enumerate()
                            .filter_map(|(i, name)| {
                                Some((name?.to_string(), caps.get(i)?.as_str().to_string()))
                            })
                            .collect();
                        Some(Output::Fields(fields))
                    }
                    (Some(_), _) => None,
                });
            eval.outputs.push(output);
        }
        if !self.exist.iter().all(|t| t.exists(eval)) {
            return None;
        }
        for guarded in &self.not_reserved {
            if crate::reserved::is_reserved_top_level_route(&guarded.render(eval)?) {
                return None;
            }
        }
        if let Some(rollout) = &self.rollout {
            if !rollout.admits(&rollout.value.render(eval)?) {
                return None;
            }
        }
        Some(match &self.action {
            RuleAction::Proxy { address } => Action::Proxy {
                address: address.as_deref(),
            },
            RuleAction::Reject { status, message } => Action::Reject {
                status: *status,
                message,
            },
            RuleAction::Classify {
                kind,
                value,
                target,
                ..
            } => Action::Classify(ClassifyRequest {
                kind: *kind,
                value: match value {
                    Some(t) => Some(t.render(eval)?),
                    None => None,
                },
                target: *target,
            }),
        })
    }
}

impl Rollout {
    fn admits(&self, value: &str) -> bool {
        if !self.include.is_empty() && !self.include.iter().any(|re| re.is_match(value)) {
            return false;
        }
        if self.exclude.iter().any(|re| re.is_match(value)) {
            return false;
        }
        match self.basis_points {
            Some(bp) => rollout_bucket(&self.seed, value) < bp,
            None => true,
        }
    }
}

/// A value's stable bucket in `0..10_000` for a seed: FNV-1a over seed and
/// value, then a 64-bit finalizer so nearby paths spread evenly. The same
/// (seed, value) always lands in the same bucket on every isolate and
/// build, so a repository never splits between two registries, and raising
/// a percentage only adds buckets.
pub fn rollout_bucket(seed: &str, value: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes().chain(std::iter::once(0)).chain(value.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash % 10_000) as u32
}

#[cfg(test)]
mod tests;
