//! The select phase (`Ruleset::decide`) natively, over a realistic request
//! mix for `rules/session_token.json`: session cookies with a cell prefix,
//! legacy sessions, anonymous requests, routable tokens in every header the
//! ruleset reads, HTTP Basic (Git over HTTPS) and registry token requests.
//!
//! Requests are built the way the edge builds them: `RequestParts` with only
//! the headers in `Ruleset::header_interest` (the edge copies no others).
//! `mix_decide` decides the whole 1000-request mix per iteration: its time
//! / 1000 is ns per request (the edge's per-request rules cost, target
//! < 2 µs); `mix_with_cache_key` adds the memory-cache key the resolver
//! computes for classify decisions; `kind` breaks the mix down (`cells_kind` the `cells` mix);
//! `mix_parts_and_log_line` is the core's part of the edge's own work (the
//! URL split, the log line).
//!
//! Run: `cargo bench -p router-core --bench rules` (divan; `bash bench/run.sh`
//! runs it too and puts the median of `mix` in its table).

use std::cell::Cell;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use divan::{black_box, Bencher};
use router_core::select::transform::routable_token::encode_routable_token;
use router_core::select::HeaderInterest;
use router_core::{Action, RequestParts, Ruleset};

const RULES: &str = include_str!("../../../rules/session_token.json");
const CELLS_RULES: &str = include_str!("../../../rules/cells.json");

/// The `cells` ruleset's mix (path routing first): (kind, weight, rule).
const CELLS_KINDS: &[(&str, u32, &str)] = &[
    ("anonymous_project_page", 25, "path_namespace"),
    ("anonymous_api_project_id", 10, "api_project_id"),
    ("anonymous_api_project_path", 5, "api_project_path"),
    ("git_clone_basic_token", 5, "path_namespace"),
    ("session_dashboard", 25, "session_cookie"),
    ("token_api_user", 15, "private_token"),
    ("runner_job_request", 5, "runner_token"),
    ("sign_in_page", 10, "sign_in_spread"),
];

/// (kind, weight in the mix, rule expected to decide).
const KINDS: &[(&str, u32, &str)] = &[
    ("session_cookie", 35, "session_cookie"),
    ("legacy_session", 10, "legacy"),
    ("anonymous", 15, "legacy"),
    ("private_token", 12, "private_token"),
    ("job_token", 8, "job_token"),
    ("bearer_token", 6, "bearer_token"),
    ("basic_auth_token", 6, "basic_auth_token"),
    ("runner_token", 4, "runner_token"),
    ("registry_jwt_auth", 4, "registry_jwt_auth_scope"),
];

/// A small deterministic generator (xorshift64*), so the mix is the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes16(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next().to_le_bytes());
        out[8..].copy_from_slice(&self.next().to_le_bytes());
        out
    }
    fn hex32(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

fn token(rng: &mut Rng, prefix: &str, cell: u64) -> String {
    let fields = [
        ('c', cell),
        ('o', 1 + rng.below(5000)),
        ('u', 1 + rng.below(1_000_000)),
    ];
    encode_routable_token(prefix, rng.bytes16(), &fields)
}

/// One request of `kind`, with every header a browser or client would
/// send; `keep` then drops what the edge would not copy.
fn request(rng: &mut Rng, kind: &str) -> RequestParts {
    let cell = 2 + rng.below(8);
    let project = format!("group-{}/project-{}", rng.below(100), rng.below(1000));
    let (method, url) = match kind {
        "basic_auth_token" => ("GET", format!("https://gitlab.com/{project}.git/info/refs?service=git-upload-pack")),
        "registry_jwt_auth" => ("GET", format!(
            "https://gitlab.com/jwt/auth?account=user&client_id=docker&offline_token=true&service=container_registry&scope=repository:{project}:pull,push"
        )),
        "private_token" | "job_token" | "bearer_token" => {
            ("GET", format!("https://gitlab.com/api/v4/projects/{}/issues?state=opened&per_page=20", rng.below(100_000)))
        }
        "runner_token" => ("POST", "https://gitlab.com/api/v4/jobs/request".to_string()),
        _ => ("GET", format!("https://gitlab.com/{project}/-/merge_requests?scope=all&state=opened")),
    };
    let mut r = RequestParts::from_url(method, &url).expect("URL");
    r.add_header("Host", "gitlab.com");
    r.add_header(
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    );
    r.add_header(
        "Accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    );
    r.add_header("Accept-Language", "en-US,en;q=0.5");
    r.add_header("Accept-Encoding", "gzip, deflate, br, zstd");
    match kind {
        "session_cookie" => r.add_header(
            "Cookie",
            &format!(
                "preferred_language=en; known_sign_in={}; _gitlab_session=cell-{cell}-{}; event_filter=all",
                rng.hex32(),
                rng.hex32()
            ),
        ),
        "legacy_session" => r.add_header(
            "Cookie",
            &format!("preferred_language=en; _gitlab_session={}", rng.hex32()),
        ),
        "anonymous" => {}
        "private_token" => r.add_header("PRIVATE-TOKEN", &token(rng, "glpat-", cell)),
        "job_token" => r.add_header("JOB-TOKEN", &token(rng, "glcbt-", cell)),
        "bearer_token" => r.add_header("Authorization", &format!("Bearer {}", token(rng, "glpat-", cell))),
        "basic_auth_token" => {
            let creds = format!("user-{}:{}", rng.below(1000), token(rng, "glpat-", cell));
            r.add_header("Authorization", &format!("Basic {}", STANDARD.encode(creds.as_bytes())));
        }
        "runner_token" => r.add_header("RUNNER-TOKEN", &token(rng, "glrt-", cell)),
        "registry_jwt_auth" => r.add_header(
            "Authorization",
            &format!("Basic {}", STANDARD.encode(b"user:not-a-routable-password")),
        ),
        other => panic!("unknown kind {other}"),
    }
    r
}

/// One request of a `cells` mix kind.
fn cells_request(rng: &mut Rng, kind: &str) -> RequestParts {
    let cell = 2 + rng.below(8);
    let (group, project) = (rng.below(100), rng.below(1000));
    let (method, path) = match kind {
        "anonymous_project_page" => (
            "GET",
            format!("/group-{group}/project-{project}/-/tree/main"),
        ),
        "anonymous_api_project_id" => (
            "GET",
            format!("/api/v4/projects/{}/issues", rng.below(100_000)),
        ),
        "anonymous_api_project_path" => (
            "GET",
            format!("/api/v4/projects/group-{group}%2Fproject-{project}"),
        ),
        "git_clone_basic_token" => (
            "GET",
            format!("/group-{group}/project-{project}.git/info/refs?service=git-upload-pack"),
        ),
        "session_dashboard" => ("GET", "/dashboard/merge_requests?scope=all".to_string()),
        "token_api_user" => ("GET", "/api/v4/user".to_string()),
        "runner_job_request" => ("POST", "/api/v4/jobs/request".to_string()),
        "sign_in_page" => ("GET", "/users/sign_in".to_string()),
        other => panic!("unknown kind {other}"),
    };
    let mut r = RequestParts::from_url(method, &format!("https://gitlab.com{path}")).expect("URL");
    r.add_header("User-Agent", "git/2.47.3");
    match kind {
        "git_clone_basic_token" => {
            let creds = format!("oauth2:{}", token(rng, "glpat-", cell));
            r.add_header(
                "Authorization",
                &format!("Basic {}", STANDARD.encode(creds.as_bytes())),
            );
        }
        "session_dashboard" => r.add_header(
            "Cookie",
            &format!(
                "preferred_language=en; _gitlab_session=cell-{cell}-{}",
                rng.hex32()
            ),
        ),
        "token_api_user" => r.add_header("PRIVATE-TOKEN", &token(rng, "glpat-", cell)),
        "runner_job_request" => r.add_header("RUNNER-TOKEN", &token(rng, "glrt-", cell)),
        _ => {}
    }
    r
}

/// Drops the headers the edge would not copy.
fn keep(rules: &Ruleset, mut r: RequestParts) -> RequestParts {
    if let HeaderInterest::Names(names) = rules.header_interest() {
        r.headers.retain(|(n, _)| names.iter().any(|k| k == n));
    }
    r
}

fn ruleset() -> Ruleset {
    Ruleset::from_json("session_token", RULES).expect("rules/session_token.json compiles")
}

fn checked(rules: &Ruleset, r: RequestParts, kind: &str, rule: &str) -> RequestParts {
    let r = keep(rules, r);
    let d = rules.decide(&r);
    assert_eq!(
        d.rule_id,
        Some(rule),
        "{kind} request decided by the wrong rule: {r:?}"
    );
    r
}

const MIX_LEN: usize = 1000;

/// 1000 requests in the mix's proportions, shuffled deterministically.
fn mix(rules: &Ruleset) -> Vec<RequestParts> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let total: u32 = KINDS.iter().map(|k| k.1).sum();
    let mut out = Vec::new();
    for (kind, weight, rule) in KINDS {
        for _ in 0..(1000 * weight / total) {
            out.push(checked(rules, request(&mut rng, kind), kind, rule));
        }
    }
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    out
}

/// The `cells` mix: 1000 requests in [`CELLS_KINDS`]' proportions.
fn cells_mix(rules: &Ruleset) -> Vec<RequestParts> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let total: u32 = CELLS_KINDS.iter().map(|k| k.1).sum();
    let mut out = Vec::new();
    for (kind, weight, rule) in CELLS_KINDS {
        for _ in 0..(1000 * weight / total) {
            out.push(checked(rules, cells_request(&mut rng, kind), kind, rule));
        }
    }
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    out
}

fn cycle<'a>(requests: &'a [RequestParts], at: &Cell<usize>) -> &'a RequestParts {
    let i = at.get();
    at.set(if i + 1 == requests.len() { 0 } else { i + 1 });
    &requests[i]
}

/// One iteration decides all 1000 requests of the mix, so the time shown
/// divided by 1000 is ns per request (`bench/run.sh` reports the median
/// that way); the item rate below it is requests/s.
#[divan::bench(counter = divan::counter::ItemsCount::new(MIX_LEN))]
fn mix_decide(bencher: Bencher) {
    let rules = ruleset();
    let requests = mix(&rules);
    assert_eq!(requests.len(), MIX_LEN);
    bencher.bench_local(|| {
        for r in &requests {
            black_box(rules.decide(black_box(r)));
        }
    });
}

/// The `cells` ruleset (path routing first) over its own mix: ns per
/// request = time / 1000, as for `mix_decide`.
#[divan::bench(counter = divan::counter::ItemsCount::new(MIX_LEN))]
fn cells_mix_decide(bencher: Bencher) {
    let rules = Ruleset::from_json("cells", CELLS_RULES).expect("rules/cells.json compiles");
    let requests = cells_mix(&rules);
    assert_eq!(requests.len(), MIX_LEN);
    bencher.bench_local(|| {
        for r in &requests {
            black_box(rules.decide(black_box(r)));
        }
    });
}

/// The mix plus the resolver's memory-cache key for classify decisions
/// (what a warm request costs in the core before the memory-cache lookup):
/// the canonical body itself.
#[divan::bench(counter = divan::counter::ItemsCount::new(MIX_LEN))]
fn mix_with_cache_key(bencher: Bencher) {
    let rules = ruleset();
    let requests = mix(&rules);
    bencher.bench_local(|| {
        for r in &requests {
            let d = rules.decide(black_box(r));
            if let Action::Classify(c) = &d.action {
                black_box(c.body());
            }
            black_box(d);
        }
    });
}

/// The cell health check the edge adds to every forwarded request (issue
/// 16): find the upstream in a 12-cell `GITLAB_CELLS` list and ask its
/// circuit (closed: no clock read). 1000 upstreams per iteration, 9 in 10
/// of them listed cells; ns per request = time / 1000.
#[divan::bench(counter = divan::counter::ItemsCount::new(MIX_LEN))]
fn mix_cell_health(bencher: Bencher) {
    use router_core::resolve::cells::{CellHealth, CellList, CircuitPolicy};
    let json: Vec<String> = (1..=12)
        .map(|id| format!(r#"{{"id": {id}, "address": "cell-{id}.cells.gitlab.net"}}"#))
        .collect();
    let list = CellList::check(&format!("[{}]", json.join(","))).expect("valid list");
    let mut health = CellHealth::new(&list, CircuitPolicy::default());
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let upstreams: Vec<String> = (0..MIX_LEN)
        .map(|_| match rng.below(13) {
            0 => "legacy-origin.gprd.gitlab.net".to_string(),
            n => format!("cell-{n}.cells.gitlab.net"),
        })
        .collect();
    bencher.bench_local(|| {
        for address in &upstreams {
            if let Some(i) = list.circuit_of_address(black_box(address)) {
                black_box(health.admit(i, || black_box(1_000), true));
            }
        }
    });
}

/// The per-request work around the rules that the edge does in the core:
/// the URL split into `RequestParts` (path normalised) and the log line
/// written around its status, for the mix's 1000 URLs; ns per request =
/// time / 1000.
#[divan::bench(counter = divan::counter::ItemsCount::new(MIX_LEN))]
fn mix_parts_and_log_line(bencher: Bencher) {
    use router_core::log::{ChosenBy, RequestAction, RequestLog};
    let rules = ruleset();
    let urls: Vec<(String, String)> = mix(&rules)
        .iter()
        .map(|r| {
            let query = if r.query.is_empty() {
                String::new()
            } else {
                format!("?{}", r.query)
            };
            (
                r.method.clone(),
                format!("https://gitlab.com{}{query}", r.path),
            )
        })
        .collect();
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    bencher.bench_local(|| {
        for (method, url) in &urls {
            let parts = RequestParts::from_url(black_box(method), black_box(url)).expect("URL");
            let log = RequestLog {
                ruleset: "session_token",
                method: &parts.method,
                path: &parts.path,
                rule: Some("session_cookie"),
                action: RequestAction::Classify,
                upstream: Some("cell-3.cells.gitlab.net".to_string()),
                chosen_by: Some(ChosenBy::Cache),
                request_id: "0f1e2d3c-4b5a-4697-8877-665544332211",
                traceparent: trace,
                ..Default::default()
            };
            black_box(log.to_json_around_status());
        }
    });
}

/// One kind at a time (64 distinct requests of it, cycled).
#[divan::bench(args = KINDS.iter().map(|k| k.0))]
fn kind(bencher: Bencher, kind: &str) {
    bench_kind(bencher, ruleset(), KINDS, request, kind);
}

/// One kind of the `cells` mix at a time (64 distinct requests of it,
/// cycled): where the path rules' cost goes.
#[divan::bench(args = CELLS_KINDS.iter().map(|k| k.0))]
fn cells_kind(bencher: Bencher, kind: &str) {
    let rules = Ruleset::from_json("cells", CELLS_RULES).expect("rules/cells.json compiles");
    bench_kind(bencher, rules, CELLS_KINDS, cells_request, kind);
}

/// Decides 64 distinct requests of `kind` (made by `make`, each checked
/// against its rule in `kinds`), one an iteration, cycled.
fn bench_kind(
    bencher: Bencher,
    rules: Ruleset,
    kinds: &[(&str, u32, &str)],
    make: fn(&mut Rng, &str) -> RequestParts,
    kind: &str,
) {
    let rule = kinds.iter().find(|k| k.0 == kind).unwrap().2;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let requests: Vec<_> = (0..64)
        .map(|_| checked(&rules, make(&mut rng, kind), kind, rule))
        .collect();
    let at = Cell::new(0);
    bencher.bench_local(|| {
        let r = cycle(&requests, &at);
        black_box(rules.decide(black_box(r)));
    });
}

fn main() {
    divan::main();
}
