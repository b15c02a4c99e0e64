//! The compiled form of a rule: regexes compiled, templates resolved.

use super::pattern::Regex;

use crate::question::{ClassifyKind, Target};
use crate::select::template::Template;
use crate::select::transform::TransformKind;

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub id: String,
    pub(super) matchers: Vec<Matcher>,
    pub(super) transforms: Vec<Transform>,
    pub(super) exist: Vec<Template>,
    pub(super) not_reserved: Vec<Template>,
    /// Templates and the most characters their value may have.
    pub(super) max_length: Vec<(Template, usize)>,
    pub(super) rollout: Option<Rollout>,
    pub(super) action: RuleAction,
    /// `circuit.countGatewayStatuses`.
    pub(super) counts_gateway_statuses: bool,
}

impl Rule {
    /// Every regex of the rule: matchers, transform extracts, rollout.
    pub(super) fn regexes(&self) -> impl Iterator<Item = &Regex> {
        let matchers = self.matchers.iter().flat_map(|m| {
            let (name, value) = match m {
                Matcher::Path(r) | Matcher::Host(r) => (None, Some(r)),
                Matcher::Method(MethodMatch::Regex(r)) => (None, Some(r)),
                Matcher::Method(MethodMatch::List(_)) => (None, None),
                Matcher::Header { name, value }
                | Matcher::Cookie { name, value }
                | Matcher::Query { name, value } => match name {
                    NameMatch::Regex(r) => (Some(r), value.as_ref()),
                    NameMatch::Exact(_) => (None, value.as_ref()),
                },
            };
            name.into_iter().chain(value)
        });
        let extracts = self.transforms.iter().filter_map(|t| t.extract.as_ref());
        let rollout = self
            .rollout
            .iter()
            .flat_map(|r| r.include.iter().chain(&r.exclude));
        matchers.chain(extracts).chain(rollout)
    }
}

#[derive(Debug)]
pub(super) enum NameMatch {
    Exact(String),
    Regex(Regex),
}

impl NameMatch {
    pub(super) fn accepts(&self, name: &str) -> bool {
        match self {
            NameMatch::Exact(n) => n == name,
            NameMatch::Regex(re) => re.is_match(name),
        }
    }
}

#[derive(Debug)]
pub(super) enum Matcher {
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
pub(super) enum MethodMatch {
    List(Vec<String>),
    Regex(Regex),
}

#[derive(Debug)]
pub(super) struct Transform {
    pub(super) kind: TransformKind,
    pub(super) input: Template,
    pub(super) extract: Option<Regex>,
}

/// What a transform's output offers to templates, known at compile time.
#[derive(Debug)]
pub(super) enum OutputShape {
    Plain(TransformKind),
    /// Named captures of an `extract` regex.
    Extracted(Vec<String>),
}

impl OutputShape {
    pub(super) fn check_key(&self, key: Option<&str>) -> Result<(), String> {
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
pub(super) struct Rollout {
    pub(super) value: Template,
    pub(super) include: Vec<Regex>,
    pub(super) exclude: Vec<Regex>,
    /// Hundredths of a percent (0..=10_000) of values that the rule takes.
    pub(super) basis_points: Option<u32>,
    pub(super) seed: String,
}

#[derive(Debug)]
pub(super) enum RuleAction {
    Proxy {
        address: Option<String>,
    },
    Reject {
        status: u16,
        message: String,
    },
    /// A random healthy cell of `GITLAB_CELLS` (the legacy cell when none
    /// is healthy): for pages that need no key, such as `/users/sign_in`.
    Spread,
    Classify {
        kind: ClassifyKind,
        value: Option<Template>,
        target: Target,
        /// `notFound: next-rule`.
        next_on_not_found: bool,
        /// `onOutage: unavailable`.
        unavailable_on_outage: bool,
    },
}
