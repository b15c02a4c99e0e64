//! The shipped gradual registry migration (rules/registry_migration.json)
//! over many repositories: the share a percentage sends to the new
//! registries, that raising it keeps every repository already moved, that
//! one repository never splits between registries (whatever the request:
//! manifests, blobs, uploads, tags, referrers, or a token ping), and that
//! include and exclude lists hold at any percentage.
//!
//! Run with `--nocapture` to see the measured shares.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use router_core::{RequestParts, Ruleset};
use serde_json::Value;

const MIGRATED_RULE: &str = "registry_repository_migrated";
const LEGACY_RULE: &str = "registry_repository_legacy";
/// The migrated repositories' writes (`onOutage: unavailable`).
const WRITE_RULE: &str = "registry_repository_migrated_write";
const TOKEN_RULE: &str = "registry_base_token_migrated";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shipped_json() -> Value {
    let text = std::fs::read_to_string(repo_root().join("rules/registry_migration.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The shipped ruleset, with every rollout's percentage set to `pct` when given.
fn ruleset(pct: Option<f64>) -> Ruleset {
    let mut json = shipped_json();
    if let Some(pct) = pct {
        for rule in json.as_array_mut().unwrap() {
            if let Some(rollout) = rule.get_mut("rollout") {
                rollout["percentage"] = Value::from(pct);
            }
        }
    }
    Ruleset::from_json("registry_migration", &json.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// Deterministic generator (splitmix64), so the figures are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One path component of the distribution spec's grammar:
    /// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
    fn component(&mut self) -> String {
        const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        const SEPARATORS: &[&str] = &[".", "_", "__", "-", "--"];
        let mut s = String::new();
        for part in 0..=self.below(3) {
            if part > 0 {
                s.push_str(SEPARATORS[self.below(SEPARATORS.len() as u64) as usize]);
            }
            for _ in 0..=self.below(8) {
                s.push(ALNUM[self.below(ALNUM.len() as u64) as usize] as char);
            }
        }
        s
    }

    /// `<root>/<1..4 nested groups and projects>/<image>`-like paths.
    fn repository(&mut self, root: &str) -> String {
        let mut path = root.to_string();
        for _ in 0..=self.below(4) {
            path.push('/');
            path.push_str(&self.component());
        }
        path
    }
}

fn is_excluded(repo: &str) -> bool {
    repo == "gitlab-org/gitlab"
        || repo.starts_with("gitlab-org/gitlab/")
        || repo.starts_with("gitlab-com/gl-infra/")
}

/// `n` distinct repositories under gitlab-org/ and gitlab-com/ that the
/// include lists admit and the exclude lists do not touch.
fn eligible_repositories(n: usize) -> Vec<String> {
    let mut rng = Rng(0x5eed_0001);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let root = if rng.below(2) == 0 {
            "gitlab-org"
        } else {
            "gitlab-com"
        };
        let repo = rng.repository(root);
        if !is_excluded(&repo) && seen.insert(repo.clone()) {
            out.push(repo);
        }
    }
    out
}

fn get(url: &str) -> RequestParts {
    RequestParts::from_url("GET", url).unwrap()
}

fn manifest_request(repo: &str) -> RequestParts {
    get(&format!(
        "https://registry.gitlab.com/v2/{repo}/manifests/latest"
    ))
}

/// A registry bearer token (claims read unverified; any signature does).
fn bearer_jwt(repo: &str) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let header = serde_json::json!({"alg": "HS256", "typ": "JWT"});
    let claims = serde_json::json!({
        "iss": "gitlab-issuer", "aud": "container_registry", "sub": "root",
        "iat": 1_800_000_000, "nbf": 1_800_000_000, "exp": 1_800_000_300,
        "access": [{"type": "repository", "name": repo, "actions": ["pull", "push"]}],
    });
    format!("Bearer {}.{}.c2lnbmF0dXJl", b64(&header), b64(&claims))
}

/// Every kind of request a client makes for one repository.
fn requests_of(repo: &str) -> Vec<RequestParts> {
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let uuid = "5f6c1a2e-0d7b-4c4e-9d2a-1b2c3d4e5f60";
    let base = format!("https://registry.gitlab.com/v2/{repo}");
    [
        ("HEAD", format!("{base}/manifests/latest")),
        ("GET", format!("{base}/manifests/v1.2.3")),
        ("GET", format!("{base}/manifests/{digest}")),
        ("PUT", format!("{base}/manifests/latest")),
        ("DELETE", format!("{base}/manifests/{digest}")),
        ("HEAD", format!("{base}/blobs/{digest}")),
        ("GET", format!("{base}/blobs/{digest}")),
        ("DELETE", format!("{base}/blobs/{digest}")),
        ("POST", format!("{base}/blobs/uploads/")),
        ("POST", format!("{base}/blobs/uploads/?digest={digest}")),
        (
            "POST",
            format!("{base}/blobs/uploads/?mount={digest}&from=other/repo"),
        ),
        (
            "PATCH",
            format!("{base}/blobs/uploads/{uuid}?_state=abc%3D%3D"),
        ),
        (
            "PUT",
            format!("{base}/blobs/uploads/{uuid}?_state=abc&digest={digest}"),
        ),
        ("GET", format!("{base}/blobs/uploads/{uuid}")),
        ("DELETE", format!("{base}/blobs/uploads/{uuid}")),
        ("GET", format!("{base}/tags/list")),
        ("GET", format!("{base}/tags/list?n=100&last=v1")),
        ("GET", format!("{base}/referrers/{digest}")),
    ]
    .into_iter()
    .map(|(method, url)| RequestParts::from_url(method, &url).unwrap())
    .collect()
}

/// Where a decision sends a request: action, classify question, proxy.
fn destination(d: &router_core::Decision) -> (Value, Value, Value) {
    let e = d.explain();
    (
        e["action"].clone(),
        e["classify"].clone(),
        e["proxy"].clone(),
    )
}

fn migrated(rules: &Ruleset, repo: &str) -> bool {
    let decision = rules.decide(&manifest_request(repo));
    match decision.rule_id {
        Some(MIGRATED_RULE) => {
            assert_eq!(
                decision.explain()["classify"],
                serde_json::json!({"claims": [{"route": repo}], "target": "registry"}),
                "{repo}"
            );
            true
        }
        Some(LEGACY_RULE) => false,
        other => panic!("{repo}: unexpected rule {other:?}"),
    }
}

fn share(rules: &Ruleset, repos: &[String]) -> (Vec<bool>, f64) {
    let flags: Vec<bool> = repos.iter().map(|r| migrated(rules, r)).collect();
    let count = flags.iter().filter(|m| **m).count();
    (flags, 100.0 * count as f64 / repos.len() as f64)
}

#[test]
fn token_and_path_rollouts_are_the_same_knobs() {
    let json = shipped_json();
    let rollout = |id: &str| {
        let mut r = json
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("rule {id}"))["rollout"]
            .clone();
        r.as_object_mut().unwrap().remove("value");
        r
    };
    assert_eq!(
        rollout(TOKEN_RULE),
        rollout(MIGRATED_RULE),
        "the token rule's include/exclude/percentage/seed must equal the path rule's, or a repository's ping and its pushes would go to different registries"
    );
    assert_eq!(
        rollout(WRITE_RULE),
        rollout(MIGRATED_RULE),
        "the write rule's rollout must equal the read rule's, or a repository's pushes and pulls would go to different registries"
    );
    assert_eq!(
        rollout(MIGRATED_RULE)["percentage"],
        5.0,
        "the shipped step is 5 %"
    );
}

#[test]
fn five_percent_then_twenty_five_percent_of_10000_repositories() {
    let repos = eligible_repositories(10_000);
    let shipped = ruleset(None);
    let (at5, share5) = share(&shipped, &repos);
    let (at25, share25) = share(&ruleset(Some(25.0)), &repos);
    println!(
        "registry_migration over {} eligible repositories: {share5:.2} % migrated at 5 %, {share25:.2} % at 25 %",
        repos.len()
    );
    assert!((share5 - 5.0).abs() <= 1.0, "share at 5 %: {share5:.2} %");
    assert!(
        (share25 - 25.0).abs() <= 1.0,
        "share at 25 %: {share25:.2} %"
    );
    let lost: Vec<&String> = repos
        .iter()
        .zip(at5.iter().zip(&at25))
        .filter(|(_, (five, twenty_five))| **five && !**twenty_five)
        .map(|(r, _)| r)
        .collect();
    assert!(
        lost.is_empty(),
        "raising to 25 % moved these back: {lost:?}"
    );

    // 0 % moves nothing, 100 % moves every eligible repository.
    assert_eq!(share(&ruleset(Some(0.0)), &repos).1, 0.0);
    assert_eq!(share(&ruleset(Some(100.0)), &repos).1, 100.0);
}

#[test]
fn include_and_exclude_lists_hold_at_any_percentage() {
    let mut rng = Rng(0x5eed_0002);
    let mut outside = Vec::new();
    let mut excluded = Vec::new();
    for i in 0..2_000 {
        let root = [
            "acme",
            "gitlab-orgs",
            "my-gitlab-org",
            "gitlab",
            "gitlab-com-x",
        ][i % 5];
        outside.push(rng.repository(root));
        excluded.push(if i % 2 == 0 {
            rng.repository("gitlab-org/gitlab")
        } else {
            rng.repository("gitlab-com/gl-infra")
        });
    }
    excluded.push("gitlab-org/gitlab".to_string());
    for pct in [5.0, 25.0, 100.0] {
        let rules = ruleset(Some(pct));
        for repo in outside.iter().chain(&excluded) {
            assert!(!migrated(&rules, repo), "{repo} moved at {pct} %");
        }
    }
    // A name that only starts like an excluded one is not excluded.
    let all = ruleset(Some(100.0));
    assert!(migrated(&all, "gitlab-org/gitlab-runner"));
    assert!(migrated(&all, "gitlab-org/gitlab-foss/image"));
    assert!(migrated(&all, "gitlab-com/gl-infra-tools/x"));
}

#[test]
fn every_request_of_a_repository_goes_to_one_place() {
    let mut repos = eligible_repositories(1_000);
    // Components that look like endpoint keywords must not change the repository.
    repos.extend(
        [
            "gitlab-org/blobs/image",
            "gitlab-org/manifests",
            "gitlab-org/x/tags/uploads",
            "gitlab-com/referrers/blobs/manifests",
            "gitlab-org/a/blobs/uploads",
        ]
        .map(String::from),
    );
    for pct in [5.0, 25.0] {
        let rules = ruleset(Some(pct));
        let mut moved = 0;
        for repo in &repos {
            let first = rules.decide(&manifest_request(repo));
            for request in requests_of(repo) {
                let got = rules.decide(&request);
                // Writes have their own rule (onOutage: unavailable) that
                // must send them where the reads go.
                assert!(
                    destination(&got) == destination(&first),
                    "{repo} at {pct} %: {} {}: {} but the manifest went {}",
                    request.method,
                    request.path,
                    got.explain(),
                    first.explain()
                );
            }
            let expected = first.explain();
            // The /v2/ ping with this repository's token goes the same way.
            let mut ping = get("https://registry.gitlab.com/v2/");
            ping.add_header("Authorization", &bearer_jwt(repo));
            let decision = rules.decide(&ping);
            if expected["rule"] == MIGRATED_RULE {
                moved += 1;
                assert_eq!(decision.rule_id, Some(TOKEN_RULE), "{repo}");
                assert_eq!(
                    decision.explain()["classify"],
                    expected["classify"],
                    "{repo}"
                );
            } else {
                assert_eq!(decision.rule_id, Some("registry_base"), "{repo}");
            }
        }
        assert!(moved > 0, "some repositories move at {pct} %");
    }
}

#[test]
fn what_is_not_a_repository_request_stays_put() {
    let rules = ruleset(Some(100.0));
    for (url, rule) in [
        ("https://registry.gitlab.com/v2/", "registry_base"),
        (
            "https://registry.gitlab.com/v2/_catalog?n=10",
            "registry_base",
        ),
        (
            "https://registry.gitlab.com/v2/gitlab-org%2Fapp/manifests/latest",
            "encoded_repository_name",
        ),
        (
            "https://registry.gitlab.com/v2/Gitlab-Org/App/manifests/latest",
            "legacy_registry",
        ),
        (
            "https://registry.gitlab.com/v2/gitlab-org//app/manifests/latest",
            "legacy_registry",
        ),
        (
            "https://registry.gitlab.com/v2//gitlab-org/app/manifests/latest",
            "legacy_registry",
        ),
        (
            "https://registry.gitlab.com/v2/gitlab-org/app/",
            "legacy_registry",
        ),
        (
            "https://registry.gitlab.com/v2/gitlab-org/app/unknown/x",
            "legacy_registry",
        ),
        ("https://registry.gitlab.com/", "legacy_registry"),
        (
            "https://registry.gitlab.com/gitlab-org/app/manifests/latest",
            "legacy_registry",
        ),
    ] {
        assert_eq!(rules.decide(&get(url)).rule_id, Some(rule), "{url}");
    }
    // Bad tokens on the ping: the first cell's registry, never an error.
    for auth in [
        "Bearer x",
        "Bearer a.b.c",
        "Bearer eyJhbGciOiJub25lIn0.W10.",
        "Bearer eyJhbGciOiJub25lIn0.eyJhY2Nlc3MiOiJ4In0.",
        "Basic Zm9vOmJhcg==",
        "bearer ",
    ] {
        let mut ping = get("https://registry.gitlab.com/v2/");
        ping.add_header("Authorization", auth);
        assert_eq!(rules.decide(&ping).rule_id, Some("registry_base"), "{auth}");
    }
    let mut huge = get("https://registry.gitlab.com/v2/");
    huge.add_header(
        "Authorization",
        &bearer_jwt(&format!("gitlab-org/{}", "a".repeat(20_000))),
    );
    assert_eq!(
        rules.decide(&huge).rule_id,
        Some("registry_base"),
        "oversized JWT"
    );
}
