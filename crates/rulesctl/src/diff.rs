//! `rulesctl diff`: what changes for a set of requests when one ruleset
//! replaces another.

use router_core::select::shadow;

use crate::cli::{Failure, Outcome};
use crate::decision::{json_str, View};
use crate::out;
use crate::request::{parse_request_line, RequestSpec};
use crate::rules::{self, DirArg};

/// List the requests whose decision changes from one ruleset to another.
#[derive(clap::Args)]
#[command(after_long_help = "\
Runs every request of FILE through rulesets OLD and NEW and reports each
request whose decision changes: rule id, action, classify body or proxy
address. FILE has one JSON object per line:
  {\"method\": \"GET\", \"url\": \"https://gitlab.com/...\",
   \"headers\": {\"Name\": \"value\"}, \"cookies\": {\"name\": \"value\"}}
(method defaults to GET; headers, cookies and a free-text \"comment\" are
optional; blank lines and lines starting with # are skipped).

Text output: one line per changed request,
  FILE:LINE: METHOD URL: [old-rule] OLD-ACTION -> [new-rule] NEW-ACTION
then `N requests, M changed, K unchanged` and the count of each transition.
--json prints {\"old\", \"new\", \"requests\", \"changed\", \"unchanged\",
\"transitions\": [{\"old\", \"new\", \"count\"}], \"changes\": [{\"line\", \"method\",
\"url\", \"difference\", \"old\", \"new\"}]} where old/new of a change are explain's objects
and difference is what the worker's shadow evaluation (OLD active, NEW as
GITLAB_SHADOW_RULES_CONFIG) reports for that request: rule, action,
claim_type, claim_value, proxy or reject (null: only a flag that matters
after the Topology Service answers differs).

exit: 0 (also when decisions change), 1 bad ruleset or requests file, 2 usage")]
pub struct Args {
    /// The ruleset before
    #[arg(value_name = "OLD")]
    old: String,
    /// The ruleset after
    #[arg(value_name = "NEW")]
    new: String,
    /// The requests, one JSON object per line
    #[arg(long, value_name = "FILE")]
    requests: String,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    rules_dir: DirArg,
}

/// Errors listed before giving up on a requests file.
const MAX_LISTED_ERRORS: usize = 20;

struct Change {
    line: usize,
    spec: RequestSpec,
    old: View,
    new: View,
    /// What the worker's shadow evaluation would report for it, with OLD
    /// active and NEW the shadow (`router_core::select::shadow`); `None`:
    /// only flags that matter after the service answers differ.
    difference: Option<&'static str>,
}

pub fn run(args: Args) -> Outcome<i32> {
    let (requests, json) = (args.requests, args.json);
    let dir = args.rules_dir.dir();
    let old = rules::load_arg(&dir, &args.old)?;
    let new = rules::load_arg(&dir, &args.new)?;
    let text = std::fs::read_to_string(&requests)
        .map_err(|e| Failure::data(format!("{requests}: cannot read: {e}")))?;

    let mut errors = Vec::new();
    let mut total = 0usize;
    let mut changes = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let number = index + 1;
        let parsed =
            parse_request_line(trimmed).and_then(|spec| spec.build().map(|parts| (spec, parts)));
        let (spec, parts) = match parsed {
            Ok(ok) => ok,
            Err(e) => {
                errors.push(format!("{requests}:{number}: {e}"));
                continue;
            }
        };
        total += 1;
        let (old_decision, new_decision) = (old.ruleset.decide(&parts), new.ruleset.decide(&parts));
        let difference = shadow::difference(&old_decision, &new_decision).map(|d| d.name());
        let (before, after) = (View::from(old_decision), View::from(new_decision));
        if before != after {
            changes.push(Change {
                line: number,
                spec,
                old: before,
                new: after,
                difference,
            });
        }
    }
    if !errors.is_empty() {
        let count = errors.len();
        for e in errors.iter().take(MAX_LISTED_ERRORS) {
            out::err_line(&format!("rulesctl: {e}"));
        }
        if count > MAX_LISTED_ERRORS {
            out::err_line(&format!(
                "rulesctl: ... and {} more",
                count - MAX_LISTED_ERRORS
            ));
        }
        return Err(Failure::data(format!(
            "{requests}: {count} bad request line(s); nothing compared"
        )));
    }

    let transitions = count_transitions(&changes);
    if json {
        out::line(&json_report(
            &old.display(),
            &new.display(),
            total,
            &changes,
            &transitions,
        ));
    } else {
        for c in &changes {
            out::line(&format!(
                "{requests}:{}: {} {}: {} -> {}",
                c.line,
                c.spec.method.to_ascii_uppercase(),
                c.spec.url,
                c.old.summary(),
                c.new.summary()
            ));
        }
        if !changes.is_empty() {
            out::line("");
        }
        out::line(&format!(
            "{total} requests, {} changed, {} unchanged",
            changes.len(),
            total - changes.len()
        ));
        for (from, to, count) in &transitions {
            out::line(&format!("  {count:>5}  {from} -> {to}"));
        }
    }
    Ok(0)
}

/// `(old category, new category, count)`, most frequent first.
fn count_transitions(changes: &[Change]) -> Vec<(String, String, usize)> {
    let mut counts: Vec<(String, String, usize)> = Vec::new();
    for c in changes {
        let (from, to) = (c.old.category(), c.new.category());
        match counts.iter_mut().find(|(f, t, _)| *f == from && *t == to) {
            Some(entry) => entry.2 += 1,
            None => counts.push((from, to, 1)),
        }
    }
    counts.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
    counts
}

fn json_report(
    old: &str,
    new: &str,
    total: usize,
    changes: &[Change],
    transitions: &[(String, String, usize)],
) -> String {
    let transitions: Vec<String> = transitions
        .iter()
        .map(|(from, to, count)| {
            format!(
                "{{\"old\":{},\"new\":{},\"count\":{count}}}",
                json_str(from),
                json_str(to)
            )
        })
        .collect();
    let changes_json: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "{{\"line\":{},\"method\":{},\"url\":{},\"difference\":{},\"old\":{},\"new\":{}}}",
                c.line,
                json_str(&c.spec.method.to_ascii_uppercase()),
                json_str(&c.spec.url),
                c.difference.map_or_else(|| "null".to_string(), json_str),
                c.old.to_json(),
                c.new.to_json()
            )
        })
        .collect();
    format!(
        "{{\"old\":{},\"new\":{},\"requests\":{total},\"changed\":{},\"unchanged\":{},\"transitions\":[{}],\"changes\":[{}]}}",
        json_str(old),
        json_str(new),
        changes.len(),
        total - changes.len(),
        transitions.join(","),
        changes_json.join(",")
    )
}
