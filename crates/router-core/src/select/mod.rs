//! Rulesets: parsed, validated and compiled once, then matched per request.
//!
//! Two spellings load (SPEC §3): the seed form `{"rules": [...]}` with
//! `cookies` / `headers` maps of `match_regex` and `method` lists, and the
//! array form with `id`, `match`, `transform`, `validate`, `action`. Both
//! compile to the same [`Rule`]s. Regexes keep GitLab's semantics: they
//! search the value and are anchored only by `^` / `$`.

mod compile;
mod dispatch;
mod eval;
mod model;
mod pattern;
pub mod reserved;
mod rollout;
pub mod shadow;
mod spec;
pub mod template;
pub mod transform;

#[cfg(feature = "compile")]
use serde_json::Value;

use crate::error::RulesetError;
use crate::request::RequestParts;

use crate::decision::{Action, Decision};
use compile::{compile_rule, header_interest, RuleCompiler, RuleError};
use dispatch::PathDispatch;
use eval::Eval;
pub use model::Rule;
use model::RuleAction;
use pattern::Regex;
#[cfg(all(feature = "oracle", feature = "compile"))]
pub use pattern::RegexOracle;
pub use pattern::{OwnedRegexFacts, RegexFacts, RegexTable};
pub use rollout::rollout_bucket;
use spec::{RuleSpec, RulesetObjectSpec};

/// A compiled ruleset: rules in order, regexes compiled, templates resolved.
#[derive(Debug)]
pub struct Ruleset {
    name: String,
    rules: Vec<Rule>,
    interest: HeaderInterest,
    /// Passes over the rules ([`Ruleset::decide_from`] calls), so tests can
    /// show a request is routed in one pass.
    evaluations: std::sync::atomic::AtomicU64,
    /// Per rule: switched off at run time ([`Ruleset::set_disabled`], the
    /// control document's `disabled_rules`).
    disabled: Vec<std::sync::atomic::AtomicBool>,
    /// The rules a path can reach, by their path regexes' prefixes.
    dispatch: PathDispatch,
}

/// Which headers the rules read; the edge copies only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderInterest {
    /// Lower-case names.
    Names(Vec<String>),
    /// A matcher tests header names by regex, so every header is needed.
    All,
}

impl Ruleset {
    /// Parses, validates and compiles a ruleset (every regex to its
    /// program). `name` is used in errors (the file stem, e.g.
    /// `session_token`).
    #[cfg(feature = "compile")]
    pub fn from_json(name: &str, json: &str) -> Result<Ruleset, RulesetError> {
        Self::parse(name, json)
    }

    /// [`Ruleset::from_json`] for a ruleset that `from_json` accepted at
    /// build time (the worker's `rules/`, checked by `build.rs`): the same
    /// rules, each regex's program, names and prefixes taken from
    /// `regexes`, what [`Ruleset::regex_facts`] listed at build time, so
    /// nothing is parsed or compiled (select/pattern/mod.rs). A regex it
    /// does not list is compiled now (feature `compile`) or an error.
    pub fn from_prechecked_json(
        name: &str,
        json: &str,
        regexes: RegexTable,
    ) -> Result<Ruleset, RulesetError> {
        Self::parse_prechecked(name, json, regexes)
    }

    /// Every regex of the rules (deduplicated, sorted by source) with its
    /// capture group names, required prefixes and program: the table `build.rs`
    /// embeds for [`Ruleset::from_prechecked_json`].
    pub fn regex_facts(&self) -> Vec<OwnedRegexFacts<'_>> {
        let mut out: Vec<OwnedRegexFacts> = self
            .rules
            .iter()
            .flat_map(Rule::regexes)
            .map(|re| re.facts())
            .collect();
        out.sort_by(|a, b| a.source.cmp(b.source));
        out.dedup_by(|a, b| a.source == b.source);
        out
    }

    #[cfg(feature = "compile")]
    fn parse(name: &str, json: &str) -> Result<Ruleset, RulesetError> {
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
        let specs = raw_rules.into_iter().enumerate().map(|(index, raw)| {
            let label = label(raw.get("id").and_then(Value::as_str), index);
            match serde_json::from_value::<RuleSpec>(raw) {
                Ok(spec) => Ok((label, spec)),
                Err(e) => Err(RulesetError::Rule {
                    ruleset: name.to_string(),
                    rule: label,
                    message: e.to_string(),
                }),
            }
        });
        Self::compile(name, specs, &Regex::eager)
    }

    /// [`Ruleset::from_prechecked_json`]'s reading: the rules straight into
    /// their specs, without a `serde_json::Value` of the whole document in
    /// between (half the allocations and less code on a fresh isolate's
    /// first request). A build-checked ruleset cannot fail here, so the
    /// error messages need not match [`Ruleset::parse`]'s.
    fn parse_prechecked(
        name: &str,
        json: &str,
        regexes: RegexTable,
    ) -> Result<Ruleset, RulesetError> {
        let json_error = |e: serde_json::Error| RulesetError::Json {
            ruleset: name.to_string(),
            message: e.to_string(),
        };
        let specs: Vec<RuleSpec> = if json.trim_start().starts_with('[') {
            serde_json::from_str(json).map_err(json_error)?
        } else {
            serde_json::from_str::<RulesetObjectSpec<RuleSpec>>(json)
                .map_err(json_error)?
                .rules
        };
        let specs = specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| Ok((label(spec.id.as_deref(), index), spec)));
        Self::compile(name, specs, &|source| Regex::prebuilt(source, regexes))
    }

    /// Compiles the rules in order (`(label, spec)`: the label names the
    /// rule in errors) and checks the ruleset as a whole; `make_regex`:
    /// `Regex::eager` (feature `compile`) or [`Regex::prebuilt`].
    fn compile(
        name: &str,
        specs: impl ExactSizeIterator<Item = Result<(String, RuleSpec), RulesetError>>,
        make_regex: &dyn Fn(&str) -> Result<Regex, String>,
    ) -> Result<Ruleset, RulesetError> {
        if specs.len() == 0 {
            return Err(RulesetError::Shape {
                ruleset: name.to_string(),
                message: "has no rules".into(),
            });
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(specs.len());
        // The rules so far by id (positions in `rules`): a duplicate id is
        // found by a binary search, not by comparing with every rule.
        let mut by_id: Vec<usize> = Vec::with_capacity(specs.len());
        let mut catch_all: Option<String> = None;
        for (index, spec) in specs.enumerate() {
            let (label, spec) = spec?;
            let compiler = RuleCompiler {
                ruleset: name,
                rule: label,
                make_regex,
            };
            let rule = compile_rule(&compiler, spec, index)?;
            if let Some(earlier) = &catch_all {
                return Err(compiler.err(RuleError::Unreachable(earlier.clone())));
            }
            if rule.is_catch_all() {
                catch_all = Some(compiler.rule.clone());
            }
            let id_of = |i: &usize| rules.get(*i).map(|r| r.id.as_str());
            let at = by_id.partition_point(|i| id_of(i) < Some(rule.id.as_str()));
            if by_id.get(at).and_then(id_of) == Some(rule.id.as_str()) {
                return Err(compiler.err(RuleError::DuplicateId(rule.id.clone())));
            }
            by_id.insert(at, rules.len());
            rules.push(rule);
        }
        let interest = header_interest(&rules);
        let disabled = rules.iter().map(|_| Default::default()).collect();
        let dispatch = PathDispatch::new(&rules);
        Ok(Ruleset {
            name: name.to_string(),
            rules,
            interest,
            evaluations: Default::default(),
            disabled,
            dispatch,
        })
    }

    /// How many passes over the rules this ruleset has made.
    pub fn evaluations(&self) -> u64 {
        self.evaluations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Evaluates the rules named in `ids` as if they were absent, and every
    /// other rule again; returns the ids that name no rule of this ruleset.
    pub fn set_disabled(&self, ids: &[String]) -> Vec<String> {
        for (rule, off) in self.rules.iter().zip(&self.disabled) {
            let skip = ids.contains(&rule.id);
            off.store(skip, std::sync::atomic::Ordering::Relaxed);
        }
        ids.iter()
            .filter(|id| !self.rules.iter().any(|r| r.id == **id))
            .cloned()
            .collect()
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
            RuleAction::Classify { .. } | RuleAction::Reject { .. } | RuleAction::Spread => None,
        })
    }

    /// Whether a rule classifies through route learning
    /// (`"source": "learn"`): the edge then needs a resolver even without
    /// a Topology Service.
    pub fn uses_learning(&self) -> bool {
        self.rules.iter().any(|r| {
            matches!(
                &r.action,
                RuleAction::Classify { kind, .. } if *kind == crate::ClassifyKind::Learn
            )
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
        self.evaluations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut eval = Eval::default();
        // Rules whose path regexes the path cannot match are not evaluated.
        // In order, as the rules are: the index only leaves gaps.
        let candidates = self.dispatch.candidates(&request.path);
        let mut value_too_long = None;
        for index in candidates.from(first) {
            let Some(rule) = self.rules.get(index) else {
                break;
            };
            if self
                .disabled
                .get(index)
                .is_some_and(|d| d.load(std::sync::atomic::Ordering::Relaxed))
            {
                continue;
            }
            eval.clear();
            if let Some(action) = rule.evaluate(request, &mut eval) {
                let (next, unavailable_on_outage) = match rule.action {
                    RuleAction::Classify {
                        next_on_not_found,
                        unavailable_on_outage,
                        ..
                    } => (next_on_not_found, unavailable_on_outage),
                    _ => (false, false),
                };
                return Decision {
                    rule_id: Some(&rule.id),
                    action,
                    next_on_not_found: next.then_some(index + 1),
                    unavailable_on_outage,
                    counts_gateway_statuses: rule.counts_gateway_statuses,
                    value_too_long,
                };
            }
            if eval.value_too_long && value_too_long.is_none() {
                value_too_long = Some(rule.id.as_str());
            }
        }
        Decision {
            rule_id: None,
            action: Action::Proxy { address: None },
            next_on_not_found: None,
            unavailable_on_outage: false,
            counts_gateway_statuses: false,
            value_too_long,
        }
    }
}

/// How errors name a rule: its id, or its position.
fn label(id: Option<&str>, index: usize) -> String {
    match id {
        Some(id) => format!("{id:?}"),
        None => format!("#{}", index + 1),
    }
}

#[cfg(test)]
mod tests;
