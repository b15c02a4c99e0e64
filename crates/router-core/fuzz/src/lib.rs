//! What the fuzz targets share: isolates made as the edge makes them (settings through
//! `Config::from_lookup`, a shipped ruleset, the resolver over a fake Topology Service, a fake
//! clock), a request carried in as the entry carries it (`src/ingest.rs`'s framing), routed as
//! `routeSync` / `routeAsync` route it, and the checks every plan must pass.
//!
//! Not part of the worker: built only by `cargo fuzz` (nightly), so it may panic on a finding.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use router_core::config::Config;
use router_core::forward::{self, Incoming};
use router_core::input::{fill_headers, split_input};
use router_core::isolate::IsolateState;
use router_core::resolve::{
    CachedAnswer, Platform, RawAnswer, Resolver, SharedCache, TopologyTransport, TransportError,
};
use router_core::route::{self, Routed};
use router_core::trace::Trace;
use router_core::wire::{Plan, FIELD, HEADER_ABSENT, ITEM, SEPARATOR};
use router_core::Ruleset;

/// Every shipped ruleset (`rules/*.json`), as `build.rs` compiles them into the worker.
pub const SHIPPED: &[(&str, &str)] = &[
    ("cells", include_str!("../../../../rules/cells.json")),
    (
        "container_registry",
        include_str!("../../../../rules/container_registry.json"),
    ),
    (
        "firstcell",
        include_str!("../../../../rules/firstcell.json"),
    ),
    (
        "passthrough",
        include_str!("../../../../rules/passthrough.json"),
    ),
    (
        "registry_migration",
        include_str!("../../../../rules/registry_migration.json"),
    ),
    (
        "route_learning",
        include_str!("../../../../rules/route_learning.json"),
    ),
    (
        "session_prefix",
        include_str!("../../../../rules/session_prefix.json"),
    ),
    (
        "session_token",
        include_str!("../../../../rules/session_token.json"),
    ),
];

/// The legacy cell every isolate here forwards to by default.
pub const LEGACY: &str = "legacy.example:8080";

/// Three listed cells, each with a registry.
pub const CELLS: &str = r#"[
  {"id": 1, "address": "cell-1.example:443", "registry_address": "registry-1.example:443", "session_prefix": "cell-1"},
  {"id": 2, "address": "cell-2.example:443", "registry_address": "registry-2.example:443", "session_prefix": "cell-2"},
  {"id": 3, "address": "cell-3.example:443", "registry_address": "registry-3.example:443", "session_prefix": "cell-3"}
]"#;

/// A complete set of settings for `ruleset`: a legacy cell, the listed cells, a Topology
/// Service, signing, the 404 delay, a small memory cache (so eviction runs too) and another
/// shipped ruleset evaluated in the shadow on every request.
pub fn settings(ruleset: &str) -> Vec<(String, String)> {
    let shadow = if ruleset == "cells" {
        "session_token"
    } else {
        "cells"
    };
    [
        ("GITLAB_RULES_CONFIG", ruleset),
        ("GITLAB_SHADOW_RULES_CONFIG", shadow),
        ("GITLAB_SHADOW_SAMPLE", "1"),
        ("GITLAB_PROXY_HOST", LEGACY),
        ("GITLAB_UPSTREAM_SCHEME", "https"),
        ("GITLAB_TOPOLOGY_SERVICE_URL", "https://topology.example/"),
        ("GITLAB_CELLS", CELLS),
        (
            "GITLAB_ROUTER_SIGNING_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        ),
        ("GITLAB_ROUTER_SIGNING_POLICY", "optional"),
        ("GITLAB_NOT_FOUND_DELAY_MS", "10-20"),
        ("GITLAB_MEMORY_CACHE_ENTRIES", "64"),
        ("GITLAB_SMOKE_TEST_SECRET", "smoke-secret"),
        ("GITLAB_ENVIRONMENT", "fuzz"),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

/// How the fake Topology Service (and learn endpoint) answers.
#[derive(Debug, Clone, Default)]
pub enum Answers {
    /// By the question: a cell chosen from the body's hash, a 404, a 500 or a timeout.
    #[default]
    ByQuestion,
    /// This answer to every call.
    Fixed(RawAnswer),
}

/// The fake service: answers as told, and checks every classify body it gets is JSON.
#[derive(Default)]
pub struct Service {
    pub answers: RefCell<Answers>,
    pub learn_answers: RefCell<Answers>,
    pub calls: Cell<u64>,
}

fn by_question(key: &str) -> Result<RawAnswer, TransportError> {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let cell = hash % 3 + 1;
    Ok(match (hash >> 8) % 8 {
        0 => RawAnswer {
            status: 404,
            body: r#"{"code":5}"#.into(),
            cache_control: Some("max-age=10".into()),
            cache_tag: None,
        },
        1 => RawAnswer {
            status: 500,
            body: "oops".into(),
            ..RawAnswer::default()
        },
        2 => return Err(TransportError::Timeout),
        _ => RawAnswer {
            status: 200,
            body: format!(
                r#"{{"action":"PROXY","proxy":{{"address":"cell-{cell}.example:443","registry_address":"registry-{cell}.example:443"}},"path":"/","cell":"cell_{cell}","source":"routable","address":"cell-{cell}.example:443"}}"#
            ),
            cache_control: Some("max-age=60".into()),
            cache_tag: Some(format!("cell-{cell}")),
        },
    })
}

/// The transport the resolver holds (a local type, so the core's trait can be implemented).
#[derive(Clone)]
pub struct Transport(pub Rc<Service>);

impl TopologyTransport for Transport {
    async fn classify(
        &self,
        body: &str,
        _: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.0.calls.set(self.0.calls.get() + 1);
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(body);
        assert!(parsed.is_ok(), "a classify body that is not JSON: {body:?}");
        check_header_value(&trace.traceparent);
        check_header_value(&trace.request_id);
        match &*self.0.answers.borrow() {
            Answers::ByQuestion => by_question(body),
            Answers::Fixed(answer) => Ok(answer.clone()),
        }
    }

    async fn learn(
        &self,
        method: &str,
        path: &str,
        _: u32,
        _: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.0.calls.set(self.0.calls.get() + 1);
        match &*self.0.learn_answers.borrow() {
            Answers::ByQuestion => {
                let mut answer = by_question(&format!("{method} {path}"))?;
                if answer.status == 200 {
                    let cell = answer.body.len() % 3 + 1;
                    let prefix = path.split('/').take(2).collect::<Vec<_>>().join("/");
                    answer.body = serde_json::json!({
                        "path": if prefix.is_empty() { "/".to_string() } else { prefix },
                        "cell": format!("cell_{cell}"),
                        "source": "routable",
                        "address": format!("cell-{cell}.example:443"),
                    })
                    .to_string();
                }
                Ok(answer)
            }
            Answers::Fixed(answer) => Ok(answer.clone()),
        }
    }
}

/// No Cache API: every memory miss asks the service.
pub struct NoSharedCache;

impl SharedCache for NoSharedCache {
    async fn get(&self, _: &str) -> Option<CachedAnswer> {
        None
    }
    fn put(&self, _: &str, _: &CachedAnswer, _: u32) {}
}

/// A clock that moves only when slept on or told to, and fixed random draws.
#[derive(Clone)]
pub struct Clock(pub Rc<Cell<u64>>);

impl Platform for Clock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
    fn random(&self) -> f64 {
        0.5
    }
    fn random_bytes(&self, out: &mut [u8]) {
        out.fill(0xab);
    }
    async fn sleep(&self, ms: u32) {
        self.0.set(self.0.get() + u64::from(ms));
    }
}

pub type FuzzResolver = Resolver<Transport, NoSharedCache, Clock>;

/// One isolate, made as `src/isolate.rs` makes it.
pub struct World {
    pub state: IsolateState,
    pub resolver: Option<FuzzResolver>,
    pub service: Rc<Service>,
    pub clock: Clock,
    /// What `Config::from_lookup` reported.
    pub problems: Vec<String>,
    /// The control document says passthrough.
    pub passthrough: Cell<bool>,
}

impl World {
    /// The isolate for these settings (a `GITLAB_RULES_CONFIG` that names no shipped ruleset
    /// leaves it without one, as the edge does).
    pub fn new(vars: &[(String, String)]) -> World {
        let lookup = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        World::from_config(Config::from_lookup(lookup))
    }

    pub fn from_config((config, problems): (Config, Vec<router_core::config::Problem>)) -> World {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let shipped = |name: &str| {
            let (_, json) = SHIPPED.iter().find(|(n, _)| *n == name)?;
            Some(Ruleset::from_json(name, json).expect("a shipped ruleset compiles"))
        };
        let ruleset = config.rules_config.as_deref().and_then(shipped);
        let shadow = config.shadow_rules_config.as_deref().and_then(shipped);
        let service = Rc::new(Service::default());
        let clock = Clock(Rc::new(Cell::new(1_700_000_000_000)));
        let learning = ruleset.as_ref().is_some_and(Ruleset::uses_learning);
        let resolver = (config.topology_url.is_some() || learning).then(|| {
            Resolver::new(
                Transport(service.clone()),
                NoSharedCache,
                clock.clone(),
                config.cache.clone(),
                config.client.clone(),
            )
            .with_cells(config.cells.clone())
        });
        let mut state = IsolateState::new(config, ruleset).with_shadow(shadow);
        state.version = Some("fuzz-version".into());
        state.bind_metrics();
        World {
            state,
            resolver,
            service,
            clock,
            problems,
            passthrough: Cell::new(false),
        }
    }

    /// The header names the entry reads for this isolate (`None`: all of them).
    pub fn header_names(&self) -> Option<&[String]> {
        self.state.header_names.as_deref()
    }

    /// Routes `incoming` as the edge does: `routeSync` from the memory cache, and on a miss
    /// `routeAsync` from where it stopped; returns the plan encoded, after checking it.
    pub fn route(&self, incoming: &Incoming) -> String {
        let view = self
            .state
            .forward_view(self.state.config.request_logging, self.passthrough.get());
        let rules = self
            .state
            .ruleset
            .as_ref()
            .filter(|_| !self.passthrough.get());
        let mut routed: Option<Routed> = rules.map(|rules| {
            match route::route_from_memory(rules, self.resolver.as_ref(), &incoming.parts) {
                Ok(routed) => routed,
                Err(pending) => {
                    let resolver = self
                        .resolver
                        .as_ref()
                        .expect("a pending request has a resolver");
                    futures_executor::block_on(route::route_pending(
                        rules,
                        resolver,
                        &incoming.parts,
                        &incoming.trace,
                        pending,
                    ))
                }
            }
        });
        if let Some(routed) = &mut routed {
            let share = self.state.config.shadow_per_million;
            if let Some(line) = self.state.evaluate_shadow(share, || 0.5, incoming, routed) {
                check_shadow_line(&line, incoming);
            }
        }
        let plan = forward::plan(&view, &self.clock, incoming, routed.as_ref());
        check_plan(&plan, incoming)
    }
}

/// A shadow disagreement's line: one JSON object naming the request's method and path as they
/// are, both decisions and what differs.
fn check_shadow_line(line: &str, incoming: &Incoming) {
    let parsed: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the shadow line is not JSON ({e}): {line}"));
    assert_eq!(parsed["method"], incoming.parts.method.as_str(), "{line}");
    assert_eq!(parsed["path"], incoming.parts.path.as_str(), "{line}");
    assert!(
        parsed["difference"].is_string()
            && parsed["active"].is_object()
            && parsed["shadow"].is_object(),
        "{line}"
    );
}

/// A header value the entry can set: no CR, LF or NUL.
fn check_header_value(value: &str) {
    assert!(
        !value.contains(['\r', '\n', '\0']),
        "a header value with CR, LF or NUL: {value:?}"
    );
}

/// The plan's checks: it encodes and decodes to itself (no field or item separator in any
/// value it carries), its log line is one JSON object naming the request's method and path as
/// they are, its data point has every field, and the headers it sets can be set.
pub fn check_plan(plan: &Plan, incoming: &Incoming) -> String {
    let encoded = plan.encode();
    let decoded = Plan::decode(&encoded);
    assert!(
        decoded.as_ref() == Some(plan),
        "the plan does not decode to itself:\n{plan:?}\n{decoded:?}"
    );
    let (log, point) = match plan {
        Plan::Forward(f) => {
            for (name, value) in &f.set {
                assert!(
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()),
                    "{name:?}"
                );
                check_header_value(value);
            }
            for name in &f.drop {
                assert!(!name.contains([FIELD, ITEM]), "{name:?}");
            }
            if let Some(signing) = &f.signing {
                check_header_value(&signing.header);
                if let Some(failure) = &signing.on_failure {
                    check_failure_line(&f.log.head, &failure.log_error_open, incoming);
                }
            }
            check_failure_line(&f.log.head, &f.upstream_failure_log, incoming);
            (Some(&f.log), f.log.point.as_str())
        }
        Plan::Answer { log, .. } => (log.as_ref(), log.as_ref().map_or("", |l| l.point.as_str())),
    };
    if let Some(log) = log {
        let line = format!("{}\"status\":200,\"duration_ms\":3{}", log.head, log.tail);
        check_log_line(&line, incoming);
    }
    if !point.is_empty() {
        assert_eq!(
            point.split(FIELD).count(),
            router_core::metrics::item::END,
            "{point:?}"
        );
        assert!(!point.contains(ITEM), "{point:?}");
    }
    encoded
}

/// The line the entry writes when a step of its own fails.
fn check_failure_line(head: &str, error_open: &str, incoming: &Incoming) {
    let line = format!("{head}\"status\":502,\"duration_ms\":3{error_open}: it failed\"}}");
    check_log_line(&line, incoming);
}

fn check_log_line(line: &str, incoming: &Incoming) {
    let value: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => panic!("the log line is not JSON ({e}): {line:?}"),
    };
    assert!(value.is_object(), "{line:?}");
    assert_eq!(
        value["path"].as_str(),
        Some(incoming.parts.path.as_str()),
        "{line:?}"
    );
    assert_eq!(
        value["method"].as_str(),
        Some(incoming.parts.method.as_str()),
        "{line:?}"
    );
    assert_eq!(
        value["request_id"].as_str(),
        Some(incoming.trace.request_id.as_str())
    );
}

/// A request as the client sent it: arbitrary text in every part.
#[derive(Debug, Clone, Default)]
pub struct RawRequest {
    pub url: String,
    pub method: String,
    /// Names as the client wrote them (the entry's `Headers` lower-cases them).
    pub headers: Vec<(String, String)>,
}

impl RawRequest {
    /// `Headers.get(name)`: every value of that name, joined by `, `.
    pub fn get(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }

    /// `routeSync`'s input as the entry writes it (`scanHeaders`): URL, NUL, method, NUL, the
    /// values of `names` joined by NUL, an absent one as `\x01`.
    pub fn input(&self, names: &[String]) -> String {
        let mut out = format!("{}{SEPARATOR}{}{SEPARATOR}", self.url, self.method);
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                out.push(SEPARATOR);
            }
            out.push_str(self.get(name).as_deref().unwrap_or(HEADER_ABSENT));
        }
        out
    }
}

/// The request's parts as the edge reads them: `routeSync`'s framing when it reads back
/// (else `routeAsync`'s: the URL and method as strings, each named header asked of the
/// request, or every header when the rules need them all). `None`: the URL does not parse
/// (`routeAsync` answers 400).
pub fn ingest(world: &World, raw: &RawRequest) -> Option<Incoming> {
    let framed = world.header_names().map(|names| (names, raw.input(names)));
    if let Some((names, input)) = &framed {
        if let Some((url, method, headers)) = split_input(input.as_bytes()) {
            if let Some(mut incoming) = Incoming::parse(url, method.to_string()) {
                if fill_headers(&mut incoming.parts, names, headers) {
                    incoming.trace_from_headers(&world.clock);
                    return Some(incoming);
                }
            }
        }
    }
    let mut incoming = Incoming::parse(&raw.url, raw.method.clone())?;
    match world.header_names() {
        Some(names) => {
            for name in names {
                if let Some(value) = raw.get(name) {
                    incoming.parts.headers.push((name.clone(), value));
                }
            }
        }
        None => {
            for (name, value) in &raw.headers {
                incoming
                    .parts
                    .headers
                    .push((name.to_ascii_lowercase(), value.clone()));
            }
        }
    }
    incoming.trace_from_headers(&world.clock);
    Some(incoming)
}

/// `routeAsync`'s answer to a URL that does not parse, checked like any plan.
pub fn bad_url_plan() -> String {
    Plan::Answer {
        answer: router_core::wire::Answer::text(400, "gitlab-http-router: bad request URL\n"),
        log: None,
    }
    .encode()
}

/// Bytes as text: UTF-8 with invalid sequences replaced, or each byte as the character of
/// that code point (Latin-1: how a JS `ByteString` carries a header's raw bytes).
pub fn text(bytes: &[u8], latin1: bool) -> String {
    if latin1 {
        bytes.iter().map(|&b| char::from(b)).collect()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// A plain request to the legacy cell: after any settings, control document or probe record,
/// an isolate still forwards it there.
pub fn plain_request(world: &World) -> Incoming {
    let raw = RawRequest {
        url: "https://gitlab.example.com/explore".into(),
        method: "GET".into(),
        headers: vec![("user-agent".into(), "fuzz".into())],
    };
    ingest(world, &raw).expect("a plain URL parses")
}

/// The plan's upstream URL, for a forward plan.
pub fn forward_url(encoded: &str) -> Option<String> {
    match Plan::decode(encoded)? {
        Plan::Forward(f) => Some(f.url),
        Plan::Answer { .. } => None,
    }
}

/// The router's own answer's status, for an answer plan.
pub fn answer_status(encoded: &str) -> Option<u16> {
    match Plan::decode(encoded)? {
        Plan::Answer { answer, .. } => Some(answer.status),
        Plan::Forward(_) => None,
    }
}

/// The cell's answer or plan text, for messages.
pub fn describe(encoded: &str) -> Cow<'_, str> {
    Cow::Owned(encoded.replace([FIELD, ITEM], "|"))
}

/// Every answer the fake service gives is a 404: the plain request of [`plain_request`] then
/// goes to the legacy cell under every shipped ruleset.
pub fn answer_not_found(world: &World) {
    let not_found = Answers::Fixed(RawAnswer {
        status: 404,
        body: r#"{"code":5}"#.into(),
        cache_control: Some("max-age=10".into()),
        cache_tag: None,
    });
    *world.service.answers.borrow_mut() = not_found.clone();
    *world.service.learn_answers.borrow_mut() = not_found;
}

/// Asserts that `world` forwards [`plain_request`] to its legacy cell, whatever else happened
/// to it; what it may legitimately answer instead: without a legacy cell (`GITLAB_PROXY_HOST`
/// missing or malformed) a 502 naming it, and with signing required but no usable key a 503
/// (cells refuse unsigned requests then: forwarding would not help).
pub fn assert_routes_plain_request(world: &World) {
    answer_not_found(world);
    let incoming = plain_request(world);
    let plan = world.route(&incoming);
    let config = &world.state.config;
    let signing_broken = config.signing_policy == router_core::forward::SigningPolicy::Required
        && !matches!(config.signer, Ok(Some(_)));
    match (&config.proxy_host, forward_url(&plan)) {
        (Some(host), Some(url)) => {
            let expected = format!("{}://{host}/explore", config.upstream_scheme);
            assert_eq!(url, expected, "{}", describe(&plan));
        }
        (Some(_), None) if signing_broken => {
            assert_eq!(answer_status(&plan), Some(503), "{}", describe(&plan));
        }
        (None, None) => {
            assert_eq!(answer_status(&plan), Some(502), "{}", describe(&plan));
            assert!(
                world
                    .problems
                    .iter()
                    .any(|p| p.contains("GITLAB_PROXY_HOST")),
                "{:?}",
                world.problems
            );
        }
        (host, _) => panic!(
            "a plain request was refused (legacy cell {host:?}): {}\nproblems: {:?}",
            describe(&plan),
            world.problems
        ),
    }
}
