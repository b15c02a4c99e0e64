//! The JSON model of a ruleset, both spellings (SPEC §3), as serde reads
//! it; `compile` turns it into the compiled form.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The object spelling (`{"rules": [...]}`). Its rules are read as
/// `Value`s where errors name each rule (`Ruleset::from_json`), or as
/// [`RuleSpec`]s directly (`Ruleset::from_prechecked_json`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesetObjectSpec<R = Value> {
    pub(super) rules: Vec<R>,
    #[serde(rename = "$schema", default)]
    pub(super) _schema: Option<String>,
    #[serde(rename = "description", default)]
    pub(super) _description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub(super) fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RuleSpec {
    #[serde(default)]
    pub(super) id: Option<String>,
    /// Accepted for the people reading the ruleset; the router ignores it.
    #[serde(rename = "description", default)]
    pub(super) _description: Option<String>,
    #[serde(rename = "match", default)]
    pub(super) matchers: Option<OneOrMany<MatcherSpec>>,
    /// Seed form: cookie name -> `{"match_regex": RE}`.
    #[serde(default)]
    pub(super) cookies: Option<BTreeMap<String, SeedMatchSpec>>,
    /// Seed form: header name -> `{"match_regex": RE}`.
    #[serde(default)]
    pub(super) headers: Option<BTreeMap<String, SeedMatchSpec>>,
    /// Seed form: accepted methods.
    #[serde(default)]
    pub(super) method: Option<OneOrMany<String>>,
    #[serde(default)]
    pub(super) transform: Option<OneOrMany<TransformSpec>>,
    #[serde(default)]
    pub(super) validate: Option<ValidateSpec>,
    #[serde(default)]
    pub(super) rollout: Option<RolloutSpec>,
    pub(super) action: String,
    #[serde(default)]
    pub(super) classify: Option<ClassifySpec>,
    #[serde(default)]
    pub(super) proxy: Option<ProxySpec>,
    #[serde(default)]
    pub(super) reject: Option<RejectSpec>,
    /// How the circuit of the cell a request of this rule goes to counts
    /// its answers ([`crate::resolve::cells::circuit`]).
    #[serde(default)]
    pub(super) circuit: Option<CircuitSpec>,
}

/// A rule's `circuit` block.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CircuitSpec {
    /// Count 502, 503 and 504 from the cell as its failures (off by
    /// default: a status is the cell's choice; a 503 with `Retry-After`
    /// never counts).
    #[serde(
        default,
        rename = "countGatewayStatuses",
        alias = "count_gateway_statuses"
    )]
    pub(super) count_gateway_statuses: bool,
}

/// `"action": "reject"`: the router answers the request itself with a
/// client error, e.g. a repository name a registry would decode
/// differently from the rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RejectSpec {
    pub(super) status: u16,
    #[serde(default)]
    pub(super) message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SeedMatchSpec {
    #[serde(alias = "matchRegex")]
    pub(super) match_regex: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct MatcherSpec {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default, alias = "regex_name")]
    pub(super) regex_name: Option<String>,
    #[serde(default, alias = "regex_value")]
    pub(super) regex_value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TransformSpec {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) input: String,
    pub(super) output: String,
    /// A regex over a text output whose named captures become the output's
    /// fields, e.g. the password of a decoded `user:password`.
    #[serde(default)]
    pub(super) extract: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ValidateSpec {
    #[serde(default)]
    pub(super) exist: Vec<String>,
    /// Templates whose value must not be a reserved top-level route
    /// ([`crate::select::reserved`]), e.g. the first segment of a path claim.
    #[serde(default, rename = "notReserved", alias = "not_reserved")]
    pub(super) not_reserved: Vec<String>,
    /// Templates whose value may have at most so many characters, e.g. a
    /// namespace path (255): a bound a regex would have to spell as a
    /// counted repetition, which is costly to compile and to run.
    #[serde(default, rename = "maxLength", alias = "max_length")]
    pub(super) max_length: MaxLengths,
}

/// `validate.maxLength`: template → most characters, as two lists (the
/// templates compile like `exist`'s and `notReserved`'s). Read by hand
/// because a `BTreeMap` of them cost the worker 3.4 KiB of wasm (gzip) and
/// this 1.5.
#[derive(Debug, Default)]
pub(super) struct MaxLengths {
    pub(super) templates: Vec<String>,
    pub(super) bounds: Vec<usize>,
}

impl<'de> Deserialize<'de> for MaxLengths {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bounds;
        impl<'de> Visitor<'de> for Bounds {
            type Value = MaxLengths;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of template → most characters")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaxLengths, A::Error> {
                let mut bounds = MaxLengths::default();
                while let Some(template) = map.next_key::<String>()? {
                    let Bound(max) = map.next_value()?;
                    bounds.templates.push(template);
                    bounds.bounds.push(max);
                }
                Ok(bounds)
            }
        }
        deserializer.deserialize_map(Bounds)
    }
}

/// One `validate.maxLength` bound: a whole number of characters.
struct Bound(usize);

impl<'de> Deserialize<'de> for Bound {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Whole;
        impl Visitor<'_> for Whole {
            type Value = Bound;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a validate.maxLength bound: a whole number of characters ≥ 0")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bound, E> {
                usize::try_from(v)
                    .map(Bound)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
        }
        deserializer.deserialize_u64(Whole)
    }
}

/// Gradual migration: which values of a captured key a rule applies to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RolloutSpec {
    pub(super) value: String,
    #[serde(default)]
    pub(super) include: Vec<String>,
    #[serde(default)]
    pub(super) exclude: Vec<String>,
    #[serde(default)]
    pub(super) percentage: Option<f64>,
    #[serde(default)]
    pub(super) seed: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClassifySpec {
    /// The classify type; not given with `"source": "learn"`.
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    /// Who answers: `topology` (the Topology Service, the default) or
    /// `learn` (route learning: a cell's learn endpoint, asked with the
    /// request's method and path; no type or value).
    #[serde(default)]
    pub(super) source: Option<String>,
    #[serde(default)]
    pub(super) value: Option<String>,
    #[serde(default)]
    pub(super) target: Option<String>,
    /// What a 404 from the Topology Service means: `legacy-cell` (the
    /// default) or `next-rule`, evaluation goes on after this rule.
    #[serde(default, rename = "notFound", alias = "not_found")]
    pub(super) not_found: Option<String>,
    /// What happens when the service cannot answer and nothing is cached:
    /// `legacy-cell` (the default) or `unavailable` (a 503 with
    /// `Retry-After`).
    #[serde(default, rename = "onOutage", alias = "on_outage")]
    pub(super) on_outage: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProxySpec {
    #[serde(default)]
    pub(super) address: Option<String>,
}
