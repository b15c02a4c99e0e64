//! What one isolate builds once, from its settings and its ruleset, and
//! keeps for every request: the allow-list of upstreams, the headers the
//! edge must read, the cells' circuits. The edge adds its I/O (the
//! resolver's transport, the control document, KV) around it.

use std::cell::RefCell;

use crate::config::Config;
use crate::forward::headers::{CF_CONNECTING_IP, SMOKE_TEST_HEADER, VERSION_OVERRIDES};
use crate::forward::{AllowList, IsolateView};
use crate::log::RequestLogging;
use crate::resolve::cells::CellHealth;
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
        for cell in config.cells.cells() {
            allowed.allow_exact(&cell.address);
            if let Some(registry) = &cell.registry_address {
                allowed.allow_exact(registry);
            }
        }
        let rule_headers = match ruleset.as_ref().map(Ruleset::header_interest) {
            Some(HeaderInterest::All) => None,
            Some(HeaderInterest::Names(names)) => Some(names.clone()),
            None => Some(Vec::new()),
        };
        let relied_on = rule_headers.clone().unwrap_or_default();
        let header_names = rule_headers.map(|mut names| {
            for extra in EDGE_HEADERS {
                if !names.iter().any(|n| n == extra) {
                    names.push(extra.to_string());
                }
            }
            names
        });
        let health = RefCell::new(CellHealth::new(&config.cells, config.circuits));
        IsolateState {
            config,
            ruleset,
            allowed,
            header_names,
            relied_on,
            health,
            version: None,
            metrics: None,
        }
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
