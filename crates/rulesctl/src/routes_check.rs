//! `rulesctl routes-check`: replays GitLab's route snapshot (the
//! `gitlab_routes.json` that GitLab's gem `gitlab-cells-http_router`
//! writes) against a ruleset as anonymous requests, and holds every
//! decision to the expectation table (`rules/route_claims.txt`) and the
//! reserved words to the snapshot.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::cli::{Failure, Outcome};
use crate::decision::sent_claim;
use crate::out;
use crate::reserved_words::derive;
use crate::route_claims::{Claim, Expected, Table};
use crate::route_template::{Token, DOTTED_GLOB, DOTTED_PARAM, GLOB, PARAM};
use crate::rules::{self, DirArg};
use crate::snapshot::{Route, Snapshot};
use router_core::select::reserved::is_reserved_top_level_route;
use router_core::{RequestParts, Ruleset};

/// Replay GitLab's route snapshot against a ruleset and the claims table.
#[derive(clap::Args)]
#[command(after_long_help = "\
FILE is GitLab's route snapshot, config/routing/gitlab_routes.json as
GitLab's gem gitlab-cells-http_router writes it: a JSON array (sorted, at
least 1000 routes) of
  {\"template\": \"/groups/*group_id/-/milestones/:id\",
   \"example\": \"/groups/foo/bar/-/milestones/foo\", \"acceptsFormat\": true,
   \"dottedExample\": \"/groups/john.doe/bar/-/milestones/john.doe\"}
or the older form, template and example only. Each example must be the one
the gem derives from its template.

The expectation table (--claims) says for every template what the router
must claim. Sent as anonymous GET requests, per template: the example, the
dotted example, each with \".json\" appended when the route accepts a
format, and for a template whose owner is an id or an encoded path, the
table's samples (a numeric id, an encoded full path, upper case). Prints
the rule and claim per request (\"ok\" or \"FAIL\", with the table entry
that decided), then a summary.

Fails (exit 1) when
  a request does not send the claim its table entry says, or sends one
    where the entry (or a template without an owner parameter) says none;
  a route claim names a reserved word;
  a template has a parameter of the table's owners: line and no entry
    covers it (unclassified);
  the reserved words (rules/reserved_top_level_routes.txt, [snapshot])
    are not the literal first segments of the snapshot and the literal
    words beside a claimed name.

exit: 0 all as expected, 1 a failure or bad data, 2 usage")]
pub struct Args {
    /// GitLab's route snapshot (gitlab_routes.json)
    file: String,
    /// The ruleset to replay against
    #[arg(long, value_name = "NAME_OR_FILE", default_value = "cells")]
    ruleset: String,
    /// The expectation table [default: route_claims.txt in the rules
    /// directory]
    #[arg(long, value_name = "FILE")]
    claims: Option<String>,
    #[command(flatten)]
    rules_dir: DirArg,
    /// Print only failures and the summary
    #[arg(long)]
    quiet: bool,
}

pub fn run(args: Args) -> Outcome<i32> {
    let Args {
        file,
        ruleset,
        claims,
        rules_dir,
        quiet,
    } = args;
    let started = Instant::now();
    let text = std::fs::read_to_string(&file).map_err(|e| Failure::data(format!("{file}: {e}")))?;
    let snapshot = Snapshot::parse(&text).map_err(|e| Failure::data(format!("{file}: {e}")))?;
    let dir = rules_dir.dir();
    let claims = match claims {
        Some(path) => PathBuf::from(path),
        None => dir.locate()?.join("route_claims.txt"),
    };
    let table = load_table(&claims)?;
    let loaded = rules::load_arg(&dir, &ruleset)?;
    let loaded_in = started.elapsed();

    let replayed = Instant::now();
    let report = replay(&snapshot, &table, &loaded.ruleset, |line| {
        if !quiet || line.starts_with("FAIL") || line.starts_with("UNCLASSIFIED") {
            out::line(line);
        }
    });
    let replay_time = replayed.elapsed();
    let reserved = derive(&snapshot, &table).compare();
    for line in reserved.problems() {
        out::line(&format!("FAIL {line}"));
    }
    for entry in &report.unused {
        out::line(&format!(
            "note: route_claims.txt:{} {} covers no template of this snapshot",
            entry.0, entry.1
        ));
    }

    out::line(&format!(
        "{file}: {} routes ({}); table {}: {} entries",
        snapshot.routes.len(),
        snapshot.format.name(),
        claims.display(),
        table.entries.len()
    ));
    out::line(&format!(
        "templates: {} with a claim, {} with none (an entry says why), {} with none (no owner parameter), {} unclassified",
        report.templates_claimed, report.templates_none, report.templates_ownerless, report.unclassified
    ));
    out::line(&format!(
        "{} requests: {} as expected, {} failed",
        report.requests,
        report.requests - report.failures,
        report.failures
    ));
    let sent: Vec<String> = report
        .sent
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    out::line(&format!("claims sent: {}", sent.join(", ")));
    out::line(&format!(
        "reserved words: {} from the snapshot, {} missing, {} listed under [snapshot] that it does not have",
        reserved.derived, reserved.missing.len(), reserved.extra.len()
    ));
    out::line(&format!(
        "time: {} ms to read and check the files, {} ms to replay ({:.1} µs a request)",
        loaded_in.as_millis(),
        replay_time.as_millis(),
        replay_time.as_secs_f64() * 1e6 / report.requests.max(1) as f64
    ));
    let failed = report.failures > 0 || report.unclassified > 0 || !reserved.is_clean();
    Ok(i32::from(failed))
}

pub fn load_table(path: &std::path::Path) -> Outcome<Table> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::data(format!("{}: cannot read: {e}", path.display())))?;
    Table::parse(&text).map_err(|e| Failure::data(format!("{}: {e}", path.display())))
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Report {
    pub requests: usize,
    pub failures: usize,
    pub unclassified: usize,
    pub templates_claimed: usize,
    pub templates_none: usize,
    pub templates_ownerless: usize,
    /// Requests by the claim the router sent (`none`: no claim).
    pub sent: BTreeMap<&'static str, usize>,
    /// Entries (line, pattern) that cover no template.
    pub unused: Vec<(usize, String)>,
}

/// Replays every route of `snapshot` through `ruleset`; `print` gets one
/// line per request (`ok …`, `FAIL …`) and per unclassified template.
pub fn replay(
    snapshot: &Snapshot,
    table: &Table,
    ruleset: &Ruleset,
    mut print: impl FnMut(&str),
) -> Report {
    let mut report = Report::default();
    let mut used = vec![false; table.entries.len()];
    for route in &snapshot.routes {
        let entry = table
            .entries
            .iter()
            .position(|e| e.covers(&route.template_source));
        if let Some(i) = entry {
            used[i] = true;
        }
        let entry = entry.map(|i| &table.entries[i]);
        let owners: Vec<&str> = route
            .template
            .parameters()
            .into_iter()
            .filter(|p| table.owners.iter().any(|o| o == p))
            .collect();
        let label = match entry {
            Some(e) => format!("entry {} at route_claims.txt:{}", e.describe(), e.line),
            None => "no entry: no owner parameter".to_string(),
        };
        let requests = match entry.map(|e| &e.claim) {
            None if !owners.is_empty() => {
                report.unclassified += 1;
                print(&format!(
                    "UNCLASSIFIED {} (parameter {} names an owner; no entry of the table covers it)",
                    route.template_source, owners[0]
                ));
                continue;
            }
            None => {
                report.templates_ownerless += 1;
                examples(route, |_| Expected::None)
            }
            Some(Claim::None) => {
                report.templates_none += 1;
                examples(route, |_| Expected::None)
            }
            Some(Claim::Owner { kind, param }) => {
                report.templates_claimed += 1;
                let glob = is_glob(route, param);
                let mut requests = examples(route, |dotted| {
                    kind.expect(match (dotted, glob) {
                        (false, false) => PARAM,
                        (false, true) => GLOB,
                        (true, false) => DOTTED_PARAM,
                        (true, true) => DOTTED_GLOB,
                    })
                });
                for sample in kind.samples(glob) {
                    let path = route.template.render(&|t: &Token| match t {
                        Token::Param(n) | Token::Glob(n) if n == param => sample.to_string(),
                        Token::Glob(_) => GLOB.to_string(),
                        _ => PARAM.to_string(),
                    });
                    with_format(route, path, kind.expect(sample), &mut requests);
                }
                requests
            }
        };
        for (path, expected) in requests {
            report.requests += 1;
            let (line, ok, sent) =
                check_one(ruleset, &path, &expected, &route.template_source, &label);
            *report.sent.entry(sent).or_default() += 1;
            if !ok {
                report.failures += 1;
            }
            print(&line);
        }
    }
    report.unused = table
        .entries
        .iter()
        .zip(used)
        .filter(|(_, used)| !used)
        .map(|(e, _)| (e.line, e.pattern.clone()))
        .collect();
    report
}

/// The gem's example and dotted example, each with its `.json` variant
/// when the route accepts a format; `expect(dotted)` says what they must
/// be decided as.
fn examples(route: &Route, expect: impl Fn(bool) -> Expected) -> Vec<(String, Expected)> {
    let mut out = Vec::new();
    with_format(route, route.example.clone(), expect(false), &mut out);
    if let Some(dotted) = &route.dotted_example {
        with_format(route, dotted.clone(), expect(true), &mut out);
    }
    out
}

/// `path`, and `path.json` when the route accepts a format: GitLab's gem
/// says a format variant is classified as its plain example.
fn with_format(route: &Route, path: String, expected: Expected, out: &mut Vec<(String, Expected)>) {
    let json = (route.accepts_format && path != "/").then(|| format!("{path}.json"));
    out.push((path, expected.clone()));
    if let Some(json) = json {
        out.push((json, expected));
    }
}

/// Whether the template's first `param` is a glob (`*group_id`).
fn is_glob(route: &Route, param: &str) -> bool {
    route
        .template
        .variants()
        .first()
        .and_then(|v| {
            v.iter().find_map(|t| match t {
                Token::Glob(n) if n == param => Some(true),
                Token::Param(n) if n == param => Some(false),
                _ => None,
            })
        })
        .unwrap_or(false)
}

/// One request: its report line, whether it is as expected, and the claim
/// key it sent (`none`).
fn check_one(
    ruleset: &Ruleset,
    path: &str,
    expected: &Expected,
    template: &str,
    label: &str,
) -> (String, bool, &'static str) {
    let Some(request) = RequestParts::from_url("GET", &format!("https://gitlab.com{path}")) else {
        return (
            format!("FAIL {path}: not a path a request can carry (template {template})"),
            false,
            "none",
        );
    };
    let decision = ruleset.decide(&request);
    let sent = sent_claim(&decision);
    let rule = decision.rule_id.unwrap_or("no rule");
    let shown = match &decision.action {
        router_core::Action::Classify(q) => q.body(),
        router_core::Action::Proxy { address } => {
            format!("proxy {}", address.unwrap_or("(legacy cell)"))
        }
        router_core::Action::Reject { status, .. } => format!("reject {status}"),
        router_core::Action::Spread => "spread".to_string(),
    };
    let problem = match (&sent, expected) {
        (Some(("route", value)), _)
            if is_reserved_top_level_route(value.split('/').next().unwrap_or(value)) =>
        {
            Some(format!("route claim {value:?} is a reserved word"))
        }
        (
            Some((key, value)),
            Expected::Claim {
                key: want,
                value: want_value,
            },
        ) if key == want && value == want_value => None,
        (Some((key, value)), Expected::Claim { .. }) => {
            Some(format!("claimed {key} {value:?}, expected {expected}"))
        }
        (None, Expected::Claim { .. }) => Some(format!("not claimed, expected {expected}")),
        (Some((key, value)), Expected::None) => {
            Some(format!("claimed {key} {value:?}, expected no claim"))
        }
        (None, Expected::None) => None,
    };
    let line = format!("{path} -> [{rule}] {shown}");
    let key = sent.as_ref().map_or("none", |(k, _)| *k);
    match problem {
        Some(why) => (
            format!("FAIL {line}: {why} (template {template}, {label})"),
            false,
            key,
        ),
        None => (format!("ok   {line} ({label})"), true, key),
    }
}
