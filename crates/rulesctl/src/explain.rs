//! `rulesctl explain`: which rule takes one request, and what it does.

use crate::cli::{set_once, unknown, Arg, Args, Failure, Outcome};
use crate::decision::View;
use crate::out;
use crate::request::{parse_cookie_arg, parse_header_arg, RequestSpec};
use crate::route_lookup::Lookup;
use crate::rules::{self, RulesDir};

pub const HELP: &str = "\
usage: rulesctl explain --ruleset NAME_OR_FILE --url URL [--method METHOD]
                        [--header 'Name: value']... [--cookie 'name=value']...
                        [--rules-dir DIR] [--routes FILE --claims FILE]

Runs one request through a ruleset and prints one JSON object:
  {\"rule\": ID|null, \"action\": \"classify\"|\"proxy\"|\"reject\",
   \"classify\": BODY|null, \"proxy\": {\"address\": HOST|null}|null}
and, for a rejection, \"reject\": {\"status\": N, \"message\": TEXT}.
A classify rule with notFound next-rule adds \"not_found\": \"next-rule\" and
\"on_not_found\": what the rules after it decide when the Topology Service
does not know the key (the same object, nested).
BODY is the exact JSON the router POSTs to /v1/classify; a null address is
the legacy cell. No matching rule: rule null, proxy to the legacy cell.

\"gitlab_route\": which of GitLab's routes the path is (the most specific
template of the route snapshot, default tests/rules/gitlab_routes.json
beside the rules directory) and what the expectation table (default
route_claims.txt in the rules directory) says of it:
  {\"template\": T, \"entry\": PATTERN|null, \"line\": N|null,
   \"expect\": {CLAIM: VALUE}|null, \"as_expected\": BOOL, \"note\": TEXT|null}
(entry null: unclassified, or no owner parameter), or null when the path is
none of GitLab's routes. Left out when neither file is there.

  --method METHOD  default GET
  --header H       repeatable; repeated names are joined with \", \"
  --cookie C       repeatable; sent as one Cookie header, \"a=1; b=2\"

exit: 0 explained, 1 bad ruleset or request, 2 usage";

pub fn run(mut args: Args) -> Outcome<i32> {
    let (mut ruleset, mut method, mut url, mut rules_dir) = (None, None, None, None);
    let (mut routes, mut claims) = (None, None);
    let mut spec = RequestSpec::default();
    while let Some(arg) = args.next_arg() {
        match arg {
            Arg::Opt(name, inline) => {
                let slot = match name.as_str() {
                    "--ruleset" => &mut ruleset,
                    "--method" => &mut method,
                    "--url" => &mut url,
                    "--rules-dir" => &mut rules_dir,
                    "--routes" => &mut routes,
                    "--claims" => &mut claims,
                    "--header" => {
                        let v = args.value(&name, inline)?;
                        let header = parse_header_arg(&v).ok_or_else(|| {
                            Failure::usage(format!("--header {v:?}: expected 'Name: value'"))
                        })?;
                        spec.headers.push(header);
                        continue;
                    }
                    "--cookie" => {
                        let v = args.value(&name, inline)?;
                        let cookie = parse_cookie_arg(&v).ok_or_else(|| {
                            Failure::usage(format!("--cookie {v:?}: expected 'name=value'"))
                        })?;
                        spec.cookies.push(cookie);
                        continue;
                    }
                    _ => return Err(unknown("explain", Arg::Opt(name, inline))),
                };
                let v = args.value(&name, inline)?;
                set_once(slot, &name, v)?;
            }
            other => return Err(unknown("explain", other)),
        }
    }
    let ruleset = ruleset.ok_or_else(|| Failure::usage("explain needs --ruleset NAME_OR_FILE"))?;
    spec.url = url.ok_or_else(|| Failure::usage("explain needs --url URL"))?;
    spec.method = method.unwrap_or_else(|| "GET".to_string());

    let dir = RulesDir::new(rules_dir);
    let loaded = rules::load_arg(&dir, &ruleset)?;
    let request = spec.build().map_err(Failure::data)?;
    let mut line = explain_from(&loaded.ruleset, &request, 0);
    if let Some(lookup) = Lookup::load(&dir, routes, claims)? {
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
