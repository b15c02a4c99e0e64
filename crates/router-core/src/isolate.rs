//! What one isolate builds once, from its settings and its ruleset, and
//! keeps for every request: the allow-list of upstreams, the headers the
//! edge must read, the cells' circuits. The edge adds its I/O (the
//! resolver's transport, the control document, KV) around it.

use std::cell::RefCell;

use crate::config::Config;
use crate::forward::headers::{CF_CONNECTING_IP, SMOKE_TEST_HEADER, VERSION_OVERRIDES};
use crate::forward::Incoming;
use crate::forward::{AllowList, IsolateView};
use crate::log::RequestLogging;
use crate::resolve::cells::CellHealth;
use crate::route::Routed;
use crate::select::shadow::{sampled, DisagreementLine, Evaluation};
use crate::select::HeaderInterest;
use crate::trace::{CF_RAY_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};
use crate::Ruleset;

/// Headers the forward phase reads besides the rules': for hop-by-hop
/// handling, `X-Forwarded-For`, the signature, tracing and version
/// overrides.
pub const EDGE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    CF_CONNECTING_IP,
    "content-length",
    "content-type",
    CF_RAY_HEADER,
    TRACEPARENT_HEADER,
    TRACESTATE_HEADER,
    VERSION_OVERRIDES,
    SMOKE_TEST_HEADER,
];

/// One isolate's routing state; see the module docs.
pub struct IsolateState {
    pub config: Config,
    pub ruleset: Option<Ruleset>,
    /// The shadow ruleset (`GITLAB_SHADOW_RULES_CONFIG`), evaluated beside
    /// `ruleset` on a sampled share of requests, never routing one.
    pub shadow: Option<Ruleset>,
    /// The configured allow-list plus the legacy cell, the ruleset's fixed
    /// addresses and every listed cell's addresses.
    pub allowed: AllowList,
    /// The headers the edge reads per request (the rules' plus
    /// [`EDGE_HEADERS`]); `None`: the rules need every header.
    pub header_names: Option<Vec<String>>,
    /// Headers a client's `Connection` can never have removed, besides
    /// those forwarding always keeps: the ones the rules read.
    pub relied_on: Vec<String>,
    /// The circuit of every address of `GITLAB_CELLS`.
    pub health: RefCell<CellHealth>,
    /// The Worker version answering, named in every log line.
    pub version: Option<String>,
    /// The data point's isolate items ([`crate::metrics::isolate_items`])
    /// when the metrics dataset ([`crate::metrics::BINDING`]) is bound:
    /// every plan then carries its data point. `None`: not bound.
    pub metrics: Option<String>,
}

impl IsolateState {
    pub fn new(config: Config, ruleset: Option<Ruleset>) -> IsolateState {
        let mut allowed = config.allowed_upstreams.clone();
        if let Some(host) = &config.proxy_host {
            allowed.allow_exact(host);
        }
        if let Some(rules) = &ruleset {
            for address in rules.fixed_addresses() {
                allowed.allow_exact(address);
            }
        }
        // Each checked as the list was read (`CellList::parse`).
        let cells = config.cells.cells();
        allowed.allow_validated(cells.iter().map(|c| c.address.as_str()));
        allowed.allow_validated(cells.iter().filter_map(|c| c.registry_address.as_deref()));
        let relied_on = rule_headers(ruleset.as_ref()).unwrap_or_default();
        let header_names = header_names(ruleset.as_ref(), None);
        let health = RefCell::new(CellHealth::new(&config.cells, config.circuits));
        IsolateState {
            config,
            ruleset,
            shadow: None,
            allowed,
            header_names,
            relied_on,
            health,
            version: None,
            metrics: None,
        }
    }

    /// Evaluates `shadow` beside the active ruleset: the edge reads the
    /// headers both rulesets read (the active one alone still decides
    /// which a client's `Connection` cannot remove).
    pub fn with_shadow(mut self, shadow: Option<Ruleset>) -> IsolateState {
        self.header_names = header_names(self.ruleset.as_ref(), shadow.as_ref());
        self.shadow = shadow;
        self
    }

    /// Runs the shadow ruleset on a request the active ruleset `routed`,
    /// when the share `per_million` draws it (`random`: uniform in [0, 1),
    /// asked only for a share between 0 and 1): the verdict goes on
    /// `routed` for the data point, and a disagreement's log line is
    /// returned. Nothing at all without a shadow ruleset or at share 0.
    pub fn evaluate_shadow<'s>(
        &'s self,
        per_million: u32,
        random: impl FnOnce() -> f64,
        incoming: &Incoming,
        routed: &mut Routed<'s>,
    ) -> Option<String> {
        let (Some(active), Some(shadow)) = (&self.ruleset, &self.shadow) else {
            return None;
        };
        if !sampled(per_million, random) {
            return None;
        }
        // The decision that routed it is the first one unless a rule
        // handed the request on: only then are the active rules run again.
        let first = if routed.fell_through.is_empty() {
            routed.decision.clone()
        } else {
            active.decide(&incoming.parts)
        };
        let evaluation = Evaluation::of(first, shadow, &incoming.parts);
        routed.shadow = Some(evaluation.verdict());
        let difference = evaluation.difference?;
        Some(
            DisagreementLine {
                ruleset: active.name(),
                shadow_ruleset: shadow.name(),
                method: &incoming.parts.method,
                path: &incoming.parts.path,
                request_id: &incoming.trace.request_id,
                active: &evaluation.active,
                shadow: &evaluation.shadow,
                difference,
            }
            .to_json(),
        )
    }

    /// Every plan carries its data point from now on (the metrics dataset
    /// is bound); after [`IsolateState::version`] is set, which each point
    /// names.
    pub fn bind_metrics(&mut self) {
        self.metrics = Some(crate::metrics::isolate_items(
            &self.config.environment,
            self.version.as_deref(),
        ));
    }

    /// The forward phase's view of it, with what the control document says
    /// now (`logging`: `GITLAB_REQUEST_LOG` or its override).
    pub fn forward_view(&self, logging: RequestLogging, passthrough: bool) -> IsolateView<'_> {
        IsolateView {
            ruleset: self.ruleset.as_ref().map_or("none", Ruleset::name),
            version: self.version.as_deref(),
            settings: self.config.forward_settings(),
            allowed: &self.allowed,
            relied_on: &self.relied_on,
            health: &self.health,
            logging,
            passthrough,
            metrics: self.metrics.as_deref(),
        }
    }
}

/// The headers `ruleset`'s rules read: `None` for every header, none
/// without a ruleset.
fn rule_headers(ruleset: Option<&Ruleset>) -> Option<Vec<String>> {
    match ruleset.map(Ruleset::header_interest) {
        Some(HeaderInterest::All) => None,
        Some(HeaderInterest::Names(names)) => Some(names.clone()),
        None => Some(Vec::new()),
    }
}

/// The headers the edge reads per request: both rulesets' plus
/// [`EDGE_HEADERS`]; `None` when either needs every header.
fn header_names(ruleset: Option<&Ruleset>, shadow: Option<&Ruleset>) -> Option<Vec<String>> {
    let mut names = rule_headers(ruleset)?;
    let shadow_names = match shadow {
        Some(shadow) => rule_headers(Some(shadow))?,
        None => Vec::new(),
    };
    for extra in shadow_names
        .iter()
        .map(String::as_str)
        .chain(EDGE_HEADERS.iter().copied())
    {
        if !names.iter().any(|n| n == extra) {
            names.push(extra.to_string());
        }
    }
    Some(names)
}
