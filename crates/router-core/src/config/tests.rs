use super::*;
use std::collections::HashMap;

fn read(pairs: &[(&str, &str)]) -> (Config, Vec<Problem>) {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|name| map.get(name).cloned())
}

#[test]
fn not_found_delay_ranges() {
    let r = |v| DelayRange::parse(v);
    assert_eq!(
        r("50-250"),
        Some(DelayRange {
            min_ms: 50,
            max_ms: 250
        })
    );
    assert_eq!(
        r(" 100 "),
        Some(DelayRange {
            min_ms: 100,
            max_ms: 100
        })
    );
    assert_eq!(r("0-0").map(|d| d.max_ms), Some(0));
    for bad in [
        "", "-", "250-50", "a-b", "1-2-3", "-5", "5-", "0-10001", "1.5-2",
    ] {
        assert_eq!(r(bad), None, "{bad:?}");
    }
    let d = r("50-250").unwrap();
    assert_eq!(d.pick(0.0), 50);
    assert_eq!(d.pick(0.999_999), 250);
    assert_eq!(d.pick(1.0), 250);
    assert_eq!(d.pick(0.5), 150);

    let (c, problems) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "50-250")]);
    assert_eq!(c.not_found_delay, d.into());
    assert!(problems
        .iter()
        .all(|p| p.setting != "GITLAB_NOT_FOUND_DELAY_MS"));
    let (c, _) = read(&[]);
    assert_eq!(c.not_found_delay, None, "off by default");
    let (c, _) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "0")]);
    assert_eq!(c.not_found_delay, None);
    let (c, problems) = read(&[("GITLAB_NOT_FOUND_DELAY_MS", "250-50")]);
    assert_eq!(c.not_found_delay, None);
    assert!(problems
        .iter()
        .any(|p| p.setting == "GITLAB_NOT_FOUND_DELAY_MS"
            && p.value.as_deref() == Some("250-50")
            && p.level == Level::Warn));
}

#[test]
fn request_log_sampling() {
    let log_problems = |p: Vec<Problem>| -> Vec<Problem> {
        p.into_iter()
            .filter(|p| p.setting == "GITLAB_REQUEST_LOG")
            .collect()
    };
    let (c, problems) = read(&[("GITLAB_REQUEST_LOG", "sample:0.01")]);
    assert!(log_problems(problems).is_empty());
    assert_eq!(
        c.request_logging,
        RequestLogging::Sample {
            per_million: 10_000
        }
    );
    let sample = c.request_logging;
    assert!(sample.always(true, || panic!("notable lines are not drawn")));
    assert!(sample.always(false, || 0.0099));
    assert!(!sample.always(false, || 0.01));
    assert!(!RequestLogging::Errors.always(false, || 0.0));
    assert!(RequestLogging::All.always(false, || 1.0));
    for (share, expected) in [
        ("1", 1_000_000),
        (".5", 500_000),
        ("0.0000019", 1),
        ("0", 0),
    ] {
        assert_eq!(
            RequestLogging::parse(&format!("sample:{share}")),
            Some(RequestLogging::Sample {
                per_million: expected
            }),
            "{share}"
        );
    }
    for bad in [
        "sample:2",
        "sample:1.5",
        "sample:x",
        "sample:",
        "sample:.",
        "sample:-0.1",
        "some",
    ] {
        let (c, problems) = read(&[("GITLAB_REQUEST_LOG", bad)]);
        assert_eq!(c.request_logging, RequestLogging::All, "{bad}");
        assert_eq!(log_problems(problems).len(), 1, "{bad}");
    }
}

#[test]
fn a_complete_config_has_no_problems() {
    let (c, problems) = read(&[
        ("GITLAB_RULES_CONFIG", "session_prefix"),
        ("GITLAB_TOPOLOGY_SERVICE_URL", "http://127.0.0.1:9096/"),
        ("GITLAB_PROXY_HOST", "127.0.0.1:9101"),
        ("GITLAB_UPSTREAM_SCHEME", "http"),
        ("GITLAB_ALLOWED_UPSTREAMS", "127.0.0.1:9102,127.0.0.1:9103"),
        ("GITLAB_TOPOLOGY_TIMEOUT_MS", "250"),
        (
            "GITLAB_ROUTER_SIGNING_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        ),
        ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
    ]);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(matches!(c.signer, Ok(Some(_))));
    assert_eq!(c.signing_policy, SigningPolicy::Required);
    assert_eq!(c.topology_url.as_deref(), Some("http://127.0.0.1:9096"));
    assert_eq!(c.upstream_scheme, "http");
    assert_eq!(c.client.timeout_ms, 250);
    assert!(c.allowed_upstreams.allows("127.0.0.1:9103"));
}

#[test]
fn malformed_values_are_reported_and_fall_back() {
    let (c, problems) = read(&[
        ("GITLAB_PROXY_HOST", "https://legacy/"),
        ("GITLAB_UPSTREAM_SCHEME", "gopher"),
        ("GITLAB_TOPOLOGY_SERVICE_URL", "ts.internal"),
        ("GITLAB_TOPOLOGY_RETRIES", "many"),
        ("GITLAB_ALLOWED_UPSTREAMS", "ok.example.com, bad/host"),
    ]);
    assert_eq!(c.proxy_host, None);
    assert_eq!(c.upstream_scheme, "https");
    assert_eq!(c.topology_url, None);
    assert_eq!(c.client.retries, ClientPolicy::default().retries);
    assert!(c.allowed_upstreams.allows("ok.example.com"));
    assert_eq!(problems.len(), 6, "{problems:#?}");
    assert!(problems
        .iter()
        .all(|p| p.to_string().starts_with("GITLAB_")));
}

#[test]
fn signing_policy_is_explicit_about_a_missing_or_bad_key() {
    let (c, problems) = read(&[
        ("GITLAB_PROXY_HOST", "legacy"),
        ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
    ]);
    assert!(matches!(c.signer, Ok(None)));
    assert!(
        problems[0].to_string().contains("refused (503)"),
        "{problems:?}"
    );
    assert_eq!(problems[0].level, Level::Error);
    let (c, problems) = read(&[
        ("GITLAB_PROXY_HOST", "legacy"),
        ("GITLAB_ROUTER_SIGNING_KEY", "short"),
    ]);
    assert!(c.signer.is_err());
    assert_eq!(c.signing_policy, SigningPolicy::Optional);
    assert!(
        problems[0].to_string().contains("forwarded unsigned"),
        "{problems:?}"
    );
    assert_eq!(problems[0].level, Level::Warn);
}

#[test]
fn cache_namespaces_separate_deployments() {
    let ns = |url: &str, legacy: &str| {
        read(&[
            ("GITLAB_TOPOLOGY_SERVICE_URL", url),
            ("GITLAB_PROXY_HOST", legacy),
        ])
        .0
        .cache_namespace()
    };
    let production = ns("https://ts.gitlab.com", "legacy.gitlab.com");
    assert_eq!(production.len(), 32);
    assert_eq!(
        production,
        ns("https://ts.gitlab.com/", "legacy.gitlab.com")
    );
    assert_ne!(
        production,
        ns("https://ts.staging.gitlab.com", "legacy.gitlab.com")
    );
    assert_ne!(
        production,
        ns("https://ts.gitlab.com", "legacy.staging.gitlab.com")
    );
    // No ambiguity from where one value ends and the other begins.
    assert_ne!(
        ns("https://a.example", "b.example"),
        ns("https://a.exampleb", "example")
    );
}

#[test]
fn the_cell_list_and_circuit_settings() {
    let (c, problems) = read(&[
        ("GITLAB_PROXY_HOST", "legacy"),
        (
            "GITLAB_CELLS",
            r#"[{"id": 2, "address": "cell2.example"}, {"id": 3, "address": "bad/"}]"#,
        ),
        ("GITLAB_CELL_FAILURES", "3"),
        ("GITLAB_CELL_OPEN_MS", "1"),
    ]);
    assert_eq!(c.cells.len(), 1);
    assert_eq!(c.circuits.failures, 3);
    assert_eq!(c.circuits.open_ms, 100, "below the minimum: the minimum");
    assert_eq!(c.health_refresh_ms, 5_000);
    let mine: Vec<String> = problems
        .iter()
        .filter(|p| p.setting.starts_with("GITLAB_CELL"))
        .map(ToString::to_string)
        .collect();
    assert_eq!(mine.len(), 2, "{problems:#?}");
    assert!(
        mine.iter()
            .any(|p| p.starts_with("GITLAB_CELLS: entry 2: cell 3: address")),
        "{mine:?}"
    );
    let (c, problems) = read(&[("GITLAB_PROXY_HOST", "legacy"), ("GITLAB_CELLS", "{")]);
    assert!(c.cells.is_empty());
    assert!(problems
        .iter()
        .any(|p| p.to_string().starts_with("GITLAB_CELLS: not JSON")
            && p.instead == "no cell list is used"));
}

#[test]
fn missing_proxy_host_is_a_problem() {
    let (c, problems) = read(&[]);
    assert_eq!(c.proxy_host, None);
    assert_eq!(problems[0].setting, "GITLAB_PROXY_HOST");
    assert!(problems[0]
        .to_string()
        .starts_with("GITLAB_PROXY_HOST: not set; "));
    assert_eq!(problems[0].level, Level::Error);
}

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn about<'a>(problems: &'a [Problem], setting: &str) -> Vec<&'a Problem> {
    problems.iter().filter(|p| p.setting == setting).collect()
}

#[test]
fn a_signing_policy_typo_falls_back_to_optional_not_to_refusing_everything() {
    // No key: `required` would refuse every request (503).
    let (c, problems) = read(&[
        ("GITLAB_PROXY_HOST", "legacy"),
        ("GITLAB_ROUTER_SIGNING_POLICY", "requird"),
    ]);
    assert_eq!(c.signing_policy, SigningPolicy::Optional);
    let mine = about(&problems, "GITLAB_ROUTER_SIGNING_POLICY");
    assert_eq!(mine.len(), 1, "{problems:#?}");
    assert_eq!(mine[0].level, Level::Warn);
    assert_eq!(mine[0].value.as_deref(), Some("requird"));
    assert!(mine[0].instead.starts_with("using optional"), "{mine:?}");
    assert!(
        problems.iter().all(|p| p.level != Level::Error),
        "nothing is refused: {problems:#?}"
    );
    // With a usable key every request is still signed.
    let (c, _) = read(&[
        ("GITLAB_PROXY_HOST", "legacy"),
        ("GITLAB_ROUTER_SIGNING_KEY", KEY),
        ("GITLAB_ROUTER_SIGNING_POLICY", "requierd"),
    ]);
    assert!(matches!(c.signer, Ok(Some(_))));
    // The two words in any case; unset is optional without a problem.
    for (value, policy) in [
        ("REQUIRED", SigningPolicy::Required),
        (" Optional ", SigningPolicy::Optional),
    ] {
        let (c, problems) = read(&[
            ("GITLAB_ROUTER_SIGNING_KEY", KEY),
            ("GITLAB_ROUTER_SIGNING_POLICY", value),
        ]);
        assert_eq!(c.signing_policy, policy, "{value}");
        assert!(about(&problems, "GITLAB_ROUTER_SIGNING_POLICY").is_empty());
    }
}

#[test]
fn one_bad_allowed_upstream_leaves_the_others_allowed() {
    let (c, problems) = read(&[(
        "GITLAB_ALLOWED_UPSTREAMS",
        "*.cells.example.com, bad/host,10.0.0.1:8080 https://x.example",
    )]);
    assert!(c.allowed_upstreams.allows("cell-2.cells.example.com"));
    assert!(c.allowed_upstreams.allows("10.0.0.1:8080"));
    assert!(!c.allowed_upstreams.allows("bad"));
    let mine = about(&problems, "GITLAB_ALLOWED_UPSTREAMS");
    let values: Vec<Option<&str>> = mine.iter().map(|p| p.value.as_deref()).collect();
    assert_eq!(values, [Some("bad/host"), Some("https://x.example")]);
    assert!(mine.iter().all(|p| p.level == Level::Warn));
    assert!(mine[0]
        .to_string()
        .starts_with(r#"GITLAB_ALLOWED_UPSTREAMS="bad/host": not an allow-list entry"#));
}

#[test]
fn numbers_out_of_range_take_the_nearest_bound_and_non_numbers_the_default() {
    let timeout = |v: &str| {
        let (c, problems) = read(&[("GITLAB_TOPOLOGY_TIMEOUT_MS", v)]);
        let mine: Vec<Problem> = about(&problems, "GITLAB_TOPOLOGY_TIMEOUT_MS")
            .into_iter()
            .cloned()
            .collect();
        (c.client.timeout_ms, mine)
    };
    let default = ClientPolicy::default().timeout_ms;
    for (value, used) in [("250", 250), (" 30000 ", 30_000), ("+10", 10)] {
        let (n, problems) = timeout(value);
        assert_eq!(n, used, "{value}");
        assert!(problems.is_empty(), "{value}: {problems:?}");
    }
    for (value, used, instead) in [
        ("50000", 30_000, "using 30000"),
        ("99999999999999999999999", 30_000, "using 30000"),
        ("5", 10, "using 10"),
        ("-3", 10, "using 10"),
        ("abc", default, "using the default, 1000"),
        ("1e3", default, "using the default, 1000"),
        ("2.5", default, "using the default, 1000"),
        ("-", default, "using the default, 1000"),
    ] {
        let (n, problems) = timeout(value);
        assert_eq!(n, used, "{value}");
        assert_eq!(problems.len(), 1, "{value}");
        assert_eq!(problems[0].level, Level::Warn);
        assert_eq!(problems[0].value.as_deref(), Some(value.trim()));
        assert_eq!(problems[0].instead, instead, "{value}");
    }
}

#[test]
fn a_secret_value_is_never_in_a_problem() {
    let secret = "this-is-not-a-key-but-secret";
    let (c, problems) = read(&[
        ("GITLAB_ROUTER_SIGNING_KEY", secret),
        ("GITLAB_ROUTER_SIGNING_POLICY", "required"),
    ]);
    assert!(c.signer.is_err());
    let mine = about(&problems, "GITLAB_ROUTER_SIGNING_KEY");
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].value, None);
    assert!(problems
        .iter()
        .all(|p| !format!("{p} {p:?}").contains(secret)));
}

#[test]
fn levels_say_what_fails_a_deploy() {
    let (_, problems) = read(&[]);
    let levels: Vec<(&str, Level)> = problems
        .iter()
        .map(|p| (p.setting.as_str(), p.level))
        .collect();
    assert_eq!(
        levels,
        [
            ("GITLAB_PROXY_HOST", Level::Error),
            ("GITLAB_ROUTER_SIGNING_KEY", Level::Note),
        ]
    );
    assert!(Level::Error.fails_check() && Level::Warn.fails_check());
    assert!(!Level::Note.fails_check());
    assert_eq!(
        [Level::Error, Level::Warn, Level::Note].map(Level::as_str),
        ["error", "warn", "info"]
    );
}

#[test]
fn every_setting_read_is_declared_once_and_secret_stand_ins_read_as_set() {
    let asked = std::cell::RefCell::new(Vec::new());
    let _ = Config::from_lookup(|name| {
        asked.borrow_mut().push(name.to_string());
        None
    });
    let mut asked = asked.into_inner();
    asked.sort();
    let mut declared: Vec<&str> = settings().iter().map(|s| s.name).collect();
    declared.sort_unstable();
    assert_eq!(asked, declared, "each setting read once, and declared");
    let mut once = declared.clone();
    once.dedup();
    assert_eq!(once, declared, "a setting declared twice");
    let secrets = secrets();
    assert_eq!(
        secrets,
        [
            "GITLAB_SMOKE_TEST_SECRET",
            "GITLAB_TOPOLOGY_SERVICE_CLIENT_ID",
            "GITLAB_TOPOLOGY_SERVICE_CLIENT_SECRET",
            "GITLAB_ROUTER_SIGNING_KEY",
        ]
    );
    let (c, problems) = Config::from_lookup(|name| {
        secrets
            .contains(&name)
            .then(|| secret_stand_in(name).to_string())
    });
    assert!(matches!(c.signer, Ok(Some(_))));
    assert!(about(&problems, "GITLAB_ROUTER_SIGNING_KEY").is_empty());
    assert!(c.smoke_test_secret.is_some() && c.client_secret.is_some());
}

/// A number's row shows the default and range it is read with.
#[test]
fn a_number_row_is_what_the_reader_uses() {
    let rows = settings();
    let row = |name: &str| rows.iter().find(|r| r.name == name).cloned().unwrap();
    let timeout = row("GITLAB_TOPOLOGY_TIMEOUT_MS");
    assert_eq!(
        (timeout.default.as_str(), timeout.accepted.as_str()),
        ("1000", "10–30000")
    );
    for row in rows
        .iter()
        .filter(|r| r.accepted.contains('–') && !r.name.ends_with("DELAY_MS"))
    {
        let (min, max) = row.accepted.split_once('–').unwrap();
        let used = |v: &str| {
            let (_, problems) = read(&[(row.name, v)]);
            about(&problems, row.name)
                .first()
                .map(|p| p.instead.clone())
        };
        assert_eq!(used(&row.default), None, "{}: its default reads", row.name);
        assert_eq!(used(min), None, "{}", row.name);
        assert_eq!(used(max), None, "{}", row.name);
        let above = format!("{max}0");
        assert_eq!(used(&above), Some(format!("using {max}")), "{}", row.name);
        assert_eq!(
            used("x"),
            Some(format!("using the default, {}", row.default)),
            "{}",
            row.name
        );
    }
}

/// README.md's settings table is [`readme_table`] printed: a setting
/// added, renamed, or given another default, range or meaning fails this
/// until README.md follows.
#[test]
fn the_readme_table_is_the_declarations_printed() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let (begin, end) = ("<!-- settings: begin -->", "<!-- settings: end -->");
    let from = readme
        .find(begin)
        .expect("README.md has the settings markers")
        + begin.len();
    let to = readme
        .find(end)
        .expect("README.md has the settings markers");
    assert_eq!(
        readme.get(from..to).map(str::trim),
        Some(readme_table().trim()),
        "README.md's settings table differs: print it with `cargo run -q -p rulesctl -- config table`"
    );
}
