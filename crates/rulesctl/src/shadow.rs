//! `rulesctl shadow report`: the shadow ruleset's disagreements in a
//! Workers Logs export, summarised by rule pair with example requests.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::cli::{Failure, Outcome};
use crate::out;

/// Read the shadow ruleset's disagreements from exported logs
#[derive(clap::Subcommand)]
pub enum Command {
    Report(ReportArgs),
}

/// Summarise the disagreement lines of a Workers Logs export by rule pair
#[derive(clap::Args)]
#[command(after_long_help = "\
FILE holds JSON lines: the router's own lines (`wrangler tail --format json`
messages, or lines copied from the dashboard), Workers Logs events whose
`source` is the router's line (the dashboard's export), or Workers trace
events whose `Logs[].Message` holds it (a Logpush job). Every line whose
`scope` is `shadow` counts; the others are skipped.

Text output: one row per (active rule, shadow rule, difference), most
frequent first, with the count and up to --examples requests (METHOD
path), then the totals. --json prints {\"lines\", \"disagreements\",
\"pairs\": [{\"rule\", \"shadow_rule\", \"difference\", \"count\",
\"examples\"}]}.

exit: 0 (also when there are disagreements), 1 unreadable file or a line
that is not JSON, 2 usage")]
pub struct ReportArgs {
    /// The exported log lines (JSON lines; - for standard input)
    #[arg(value_name = "FILE")]
    file: String,
    /// How many example requests to show per rule pair
    #[arg(long, default_value_t = 3)]
    examples: usize,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

pub fn run(command: Command) -> Outcome<i32> {
    match command {
        Command::Report(args) => report(args),
    }
}

/// A rule pair's tally.
#[derive(Default)]
struct Pair {
    count: u64,
    examples: Vec<String>,
}

fn report(args: ReportArgs) -> Outcome<i32> {
    let text = if args.file == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Failure::data(format!("standard input: cannot read: {e}")))?
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| Failure::data(format!("{}: cannot read: {e}", args.file)))?
    };
    let summary =
        summarise(&text, args.examples).map_err(|e| Failure::data(format!("{}:{e}", args.file)))?;
    if args.json {
        out::line(&summary.to_json().to_string());
    } else {
        for line in summary.to_text() {
            out::line(&line);
        }
    }
    Ok(0)
}

/// Every disagreement in an export, by (rule, shadow rule, difference).
pub struct Summary {
    lines: usize,
    pairs: BTreeMap<(String, String, String), Pair>,
}

/// The router's shadow line inside one exported line, whichever of the
/// export's shapes holds it.
fn shadow_record(value: &Value) -> Option<&Value> {
    let is_shadow = |v: &Value| v.get("scope").and_then(Value::as_str) == Some("shadow");
    if is_shadow(value) {
        return Some(value);
    }
    if let Some(source) = value.get("source").filter(|s| is_shadow(s)) {
        return Some(source);
    }
    None
}

/// The rule id of a decision object (`null`: no rule matched).
fn rule_of(decision: Option<&Value>) -> String {
    decision
        .and_then(|d| d.get("rule"))
        .and_then(Value::as_str)
        .unwrap_or("(none)")
        .to_string()
}

pub fn summarise(text: &str, examples: usize) -> Result<Summary, String> {
    let mut summary = Summary {
        lines: 0,
        pairs: BTreeMap::new(),
    };
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        summary.lines += 1;
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("{}: not JSON: {e} (from a console that mixes other output with the router's lines, such as `wrangler dev`'s, keep the JSON ones: grep '^{{')", index + 1))?;
        // A trace event (Logpush) holds the lines as strings in Logs[].Message.
        let nested: Vec<Value> = value
            .get("Logs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|log| {
                log.get("Message")?
                    .as_array()?
                    .first()?
                    .as_str()
                    .map(str::to_owned)
            })
            .filter_map(|message| serde_json::from_str(&message).ok())
            .collect();
        let records = shadow_record(&value)
            .into_iter()
            .chain(nested.iter().filter_map(shadow_record));
        for record in records {
            let key = (
                rule_of(record.get("active")),
                rule_of(record.get("shadow")),
                record
                    .get("difference")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string(),
            );
            let pair = summary.pairs.entry(key).or_default();
            pair.count += 1;
            if pair.examples.len() < examples {
                let field = |name: &str| record.get(name).and_then(Value::as_str).unwrap_or("?");
                let example = format!("{} {}", field("method"), field("path"));
                if !pair.examples.contains(&example) {
                    pair.examples.push(example);
                }
            }
        }
    }
    Ok(summary)
}

impl Summary {
    fn by_count(&self) -> Vec<(&(String, String, String), &Pair)> {
        let mut pairs: Vec<_> = self.pairs.iter().collect();
        pairs.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
        pairs
    }

    fn disagreements(&self) -> u64 {
        self.pairs.values().map(|p| p.count).sum()
    }

    pub fn to_json(&self) -> Value {
        let pairs: Vec<Value> = self
            .by_count()
            .into_iter()
            .map(|((rule, shadow, difference), pair)| {
                json!({"rule": rule, "shadow_rule": shadow, "difference": difference, "count": pair.count, "examples": pair.examples})
            })
            .collect();
        json!({"lines": self.lines, "disagreements": self.disagreements(), "pairs": pairs})
    }

    pub fn to_text(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_count()
            .into_iter()
            .map(|((rule, shadow, difference), pair)| {
                format!(
                    "{:>8}  {rule} -> {shadow} ({difference}): {}",
                    pair.count,
                    pair.examples.join(", ")
                )
            })
            .collect();
        out.push(format!(
            "{} disagreements in {} rule pairs, {} lines read",
            self.disagreements(),
            self.pairs.len(),
            self.lines
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(active: &str, shadow: &str, path: &str) -> String {
        json!({"level":"info","scope":"shadow","difference":"rule","method":"GET","path":path,
               "active":{"rule":active,"action":"classify"},"shadow":{"rule":shadow,"action":"proxy"}})
        .to_string()
    }

    #[test]
    fn every_export_shape_counts_once_by_rule_pair() {
        let plain = line("session_cookie", "legacy", "/a");
        let event = json!({"source": serde_json::from_str::<Value>(&line("session_cookie", "legacy", "/b")).unwrap(), "$metadata": {"type": "cf-worker"}}).to_string();
        let trace = json!({"Logs": [{"Level": "log", "Message": [line("token", "legacy", "/c")]}], "ScriptName": "w"}).to_string();
        let other = json!({"ruleset":"session_token","path":"/d","status":200}).to_string();
        let text = [plain.clone(), event, trace, other, String::new(), plain].join("\n");
        let summary = summarise(&text, 3).unwrap();
        assert_eq!(
            summary.to_json(),
            json!({"lines": 5, "disagreements": 4, "pairs": [
                {"rule": "session_cookie", "shadow_rule": "legacy", "difference": "rule", "count": 3, "examples": ["GET /a", "GET /b"]},
                {"rule": "token", "shadow_rule": "legacy", "difference": "rule", "count": 1, "examples": ["GET /c"]},
            ]})
        );
        assert_eq!(
            summary.to_text().last().unwrap(),
            "4 disagreements in 2 rule pairs, 5 lines read"
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_named() {
        assert_eq!(
            summarise("{}\nnope", 1).err().unwrap().split(':').next(),
            Some("2")
        );
    }
}
