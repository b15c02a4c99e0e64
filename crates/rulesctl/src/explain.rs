//! `rulesctl explain`: which rule takes one request, and what it does.

use crate::cli::{Failure, Outcome};
use crate::decision::View;
use crate::out;
use crate::request::{parse_cookie_arg, parse_header_arg, RequestSpec};
use crate::route_lookup::Lookup;
use crate::rules::{self, DirArg};

/// Show which rule takes one request, and what it does.
#[derive(clap::Args)]
#[command(after_long_help = "\
Prints one JSON object:
  {\"rule\": ID|null, \"action\": \"classify\"|\"proxy\"|\"reject\",
   \"classify\": BODY|null, \"proxy\": {\"address\": HOST|null}|null}
and, for a rejection, \"reject\": {\"status\": N, \"message\": TEXT}.
A classify rule with notFound next-rule adds \"not_found\": \"next-rule\" and
\"on_not_found\": what the rules after it decide when the Topology Service
does not know the key (the same object, nested).
BODY is the exact JSON the router POSTs to /v1/classify; a null address is
the legacy cell. No matching rule: rule null, proxy to the legacy cell.

\"gitlab_route\": which of GitLab's routes the path is (the most specific
template of the route snapshot, --routes) and what the expectation table
(--claims) says of it:
  {\"template\": T, \"entry\": PATTERN|null, \"line\": N|null,
   \"expect\": {CLAIM: VALUE}|null, \"as_expected\": BOOL, \"note\": TEXT|null}
(entry null: unclassified, or no owner parameter), or null when the path is
none of GitLab's routes. Left out when neither file is there.

exit: 0 explained, 1 bad ruleset or request, 2 usage")]
pub struct Args {
    /// The ruleset to run the request through
    #[arg(long, value_name = "NAME_OR_FILE")]
    ruleset: String,
    /// The request's URL
    #[arg(long)]
    url: String,
    /// The request's method
    #[arg(long, default_value = "GET")]
    method: String,
    /// A request header; repeatable, repeated names are joined with ", "
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = header)]
    headers: Vec<(String, String)>,
    /// A cookie; repeatable, all sent as one Cookie header "a=1; b=2"
    #[arg(long = "cookie", value_name = "NAME=VALUE", value_parser = cookie)]
    cookies: Vec<(String, String)>,
    #[command(flatten)]
    rules_dir: DirArg,
    /// GitLab's route snapshot [default: tests/rules/gitlab_routes.json
    /// beside the rules directory]
    #[arg(long, value_name = "FILE")]
    routes: Option<String>,
    /// The expectation table [default: route_claims.txt in the rules
    /// directory]
    #[arg(long, value_name = "FILE")]
    claims: Option<String>,
}

fn header(v: &str) -> Result<(String, String), &'static str> {
    parse_header_arg(v).ok_or("expected 'Name: value'")
}

fn cookie(v: &str) -> Result<(String, String), &'static str> {
    parse_cookie_arg(v).ok_or("expected 'name=value'")
}

pub fn run(args: Args) -> Outcome<i32> {
    let spec = RequestSpec {
        method: args.method,
        url: args.url,
        headers: args.headers,
        cookies: args.cookies,
    };
    let dir = args.rules_dir.dir();
    let loaded = rules::load_arg(&dir, &args.ruleset)?;
    let request = spec.build().map_err(Failure::data)?;
    let mut line = explain_from(&loaded.ruleset, &request, 0);
    if let Some(lookup) = Lookup::load(&dir, args.routes, args.claims)? {
        let decision = loaded.ruleset.decide(&request);
        line.pop();
        line.push_str(&format!(
            r#","gitlab_route":{}}}"#,
            lookup.explain(&request.path, &decision)
        ));
    }
    out::line(&line);
    Ok(0)
}

/// The decision of the rules from position `first` on, and for a
/// `notFound: next-rule` rule, what the rules after it would decide if the
/// Topology Service did not know its key, as `"on_not_found"`.
fn explain_from(
    ruleset: &router_core::Ruleset,
    request: &router_core::RequestParts,
    first: usize,
) -> String {
    let decision = ruleset.decide_from(request, first);
    let mut line = View::from(decision.clone()).to_json().to_string();
    if let Some(next) = decision.next_on_not_found {
        line.pop();
        line.push_str(&format!(
            r#","on_not_found":{}}}"#,
            explain_from(ruleset, request, next)
        ));
    }
    line
}
