//! `rulesctl routes-check`: replays a snapshot of GitLab's routes (the
//! shape of GitLab's `gitlab_routes.json`: a template, an example path, and
//! whether it accepts a format suffix or has a dotted example) against a
//! ruleset as anonymous requests, and checks the path claims.

use serde::Deserialize;

use crate::cli::{set_once, unknown, Arg, Args, Failure, Outcome};
use crate::out;
use crate::rules::{self, RulesDir};
use router_core::reserved::is_reserved_top_level_route;
use router_core::{Action, ClassifyKind, RequestParts};

pub const HELP: &str = "\
usage: rulesctl routes-check FILE [--ruleset NAME_OR_FILE] [--rules-dir DIR] [--quiet]

FILE is a JSON array (or {\"routes\": [...]}) of routes as GitLab's route
snapshot lists them:
  {\"verb\": \"GET\", \"path\": \"/:namespace_id/:project_id/-/issues(.:format)\",
   \"example\": \"/gitlab-org/gitlab/-/issues\", \"acceptsFormat\": true,
   \"dottedExample\": \"/john.doe/my.project/-/issues\"}
(\"method\" for \"verb\"). Each example is sent as an anonymous request, also
with \".json\" appended when the route accepts a format, and the dotted
example. Prints the rule and claim per request, then a summary.

Fails (exit 1) when
  a route claim names a reserved top-level route;
  a route whose template starts with a parameter (a namespace) is not
    claimed, or claimed with another value than the example's first
    segment (lower-cased, one format suffix dropped, a dotted name whole);
  a route with no parameter at all (a literal Rails route such as
    /users/sign_in or /groups/new) is classified by any claim.

  --ruleset  default cells
  --quiet    print only failures and the summary

exit: 0 all routes as expected, 1 a failure or bad data, 2 usage";

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Snapshot {
    List(Vec<RouteEntry>),
    Wrapped { routes: Vec<RouteEntry> },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RouteEntry {
    #[serde(alias = "method")]
    verb: String,
    path: String,
    example: String,
    #[serde(default)]
    accepts_format: bool,
    #[serde(default)]
    dotted_example: Option<String>,
}

pub fn run(mut args: Args) -> Outcome<i32> {
    let (mut file, mut ruleset, mut rules_dir) = (None, None, None);
    let mut quiet = false;
    while let Some(arg) = args.next_arg() {
        match arg {
            Arg::Opt(name, None) if name == "--quiet" => quiet = true,
            Arg::Opt(name, inline) => {
                let slot = match name.as_str() {
                    "--ruleset" => &mut ruleset,
                    "--rules-dir" => &mut rules_dir,
                    _ => return Err(unknown("routes-check", Arg::Opt(name, inline))),
                };
                let v = args.value(&name, inline)?;
                set_once(slot, &name, v)?;
            }
            Arg::Positional(p) if file.is_none() => file = Some(p),
            other => return Err(unknown("routes-check", other)),
        }
    }
    let file = file.ok_or_else(|| Failure::usage("routes-check needs FILE"))?;
    let text = std::fs::read_to_string(&file).map_err(|e| Failure::data(format!("{file}: {e}")))?;
    let routes = match serde_json::from_str::<Snapshot>(&text)
        .map_err(|e| Failure::data(format!("{file}: not a route snapshot: {e}")))?
    {
        Snapshot::List(r) | Snapshot::Wrapped { routes: r } => r,
    };
    let loaded = rules::load_arg(
        &RulesDir::new(rules_dir),
        ruleset.as_deref().unwrap_or("cells"),
    )?;

    let (mut requests, mut failures) = (0, 0);
    for route in &routes {
        for (path, expected) in replays(route) {
            requests += 1;
            let url = format!("https://gitlab.com{path}");
            let request = RequestParts::from_url(&route.verb, &url)
                .ok_or_else(|| Failure::data(format!("{}: bad example {path:?}", route.path)))?;
            let decision = loaded.ruleset.decide(&request);
            let rule = decision.rule_id.unwrap_or("no rule");
            let (claim, route_claim) = match &decision.action {
                Action::Classify(q) => (
                    q.body(),
                    match q.kind {
                        ClassifyKind::Claim(0) => q.value.clone(),
                        _ => None,
                    },
                ),
                Action::Proxy { address } => (
                    format!("proxy {}", address.unwrap_or("(legacy cell)")),
                    None,
                ),
                Action::Reject { status, .. } => (format!("reject {status}"), None),
                Action::Spread => ("spread".to_string(), None),
            };
            let classified = matches!(decision.action, Action::Classify(_));
            let problem = check(route_claim.as_deref(), classified, &expected);
            let line = format!("{} {path} -> [{rule}] {claim}", route.verb);
            match problem {
                Some(why) => {
                    failures += 1;
                    out::line(&format!("FAIL {line}: {why} (template {})", route.path));
                }
                None if !quiet => out::line(&format!("ok   {line}")),
                None => {}
            }
        }
    }
    out::line(&format!(
        "{} routes, {requests} requests: {} as expected, {failures} failed",
        routes.len(),
        requests - failures
    ));
    Ok(i32::from(failures > 0))
}

/// What a replayed request must be decided as.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// The template starts with a namespace parameter: a route claim of the
    /// example's first segment (lower-cased, one format suffix dropped from
    /// a last segment, a dotted name whole).
    Route(String),
    /// The template has no parameter at all: a Rails route of its own,
    /// never claimed.
    NoClaim,
    /// Anything, as long as a route claim names no reserved word.
    Any,
}

/// The paths to send for a route, each with what it must be decided as.
fn replays(route: &RouteEntry) -> Vec<(String, Expect)> {
    let template = route.path.replace("(.:format)", "");
    let claims_namespace = template.trim_start_matches('/').starts_with([':', '*']);
    let literal = !template.contains([':', '*']);
    let expect = |path: &str| -> Expect {
        if literal {
            return Expect::NoClaim;
        }
        if !claims_namespace {
            return Expect::Any;
        }
        let trimmed = path.trim_start_matches('/');
        let first = trimmed.split('/').next().unwrap_or("");
        let leaf = !trimmed.trim_end_matches('/').contains('/');
        let first = match first.rsplit_once('.') {
            Some((name, ext)) if leaf && FORMATS.contains(&ext) => name,
            _ => first,
        };
        Expect::Route(first.to_ascii_lowercase())
    };
    let mut out = vec![(route.example.clone(), expect(&route.example))];
    if route.accepts_format && !route.example.ends_with('/') {
        let with = format!("{}.json", route.example);
        let expected = expect(&with);
        out.push((with, expected));
    }
    if let Some(dotted) = &route.dotted_example {
        out.push((dotted.clone(), expect(dotted)));
    }
    out
}

/// The format suffixes the `cells` ruleset strips from a last segment.
const FORMATS: &[&str] = &["atom", "json", "keys", "gpg"];

fn check(claimed: Option<&str>, classified: bool, expect: &Expect) -> Option<String> {
    if let Some(value) = claimed {
        let top = value.split('/').next().unwrap_or(value);
        if is_reserved_top_level_route(top) {
            return Some(format!("route claim {value:?} is a reserved word"));
        }
    }
    match (expect, claimed) {
        (Expect::Route(want), Some(got)) if want == got => None,
        (Expect::Route(want), Some(got)) => Some(format!("claimed {got:?}, expected {want:?}")),
        (Expect::Route(want), None) => Some(format!("not claimed, expected route {want:?}")),
        (Expect::NoClaim, _) if classified => {
            Some("a literal Rails route is classified by a claim".to_string())
        }
        _ => None,
    }
}
