//! `rulesctl control`: shows and changes the router's runtime control
//! document (router_core::control) in the `ROUTER_CONTROL` KV namespace
//! through the pinned wrangler, validated by the router's own parser.
//! Every write shows the stored document against the one it writes, asks
//! before a remote write (or takes `--yes`), and re-reads the stored
//! document just before writing, refusing when it moved meanwhile.

use router_core::control::{Control, CONTROL_KEY};
use router_core::resolve::invalidate::{parse_claim, Invalidation, Subject, MAX_AHEAD_MS};
use serde_json::{json, Map, Value};

use crate::cli::{Failure, Outcome};
use crate::confirm::{self, Yes};
use crate::docdiff::{self, pretty};
use crate::kv::{self, Kv, Wrangler};
use crate::out;
use crate::rules::{self, DirArg, RulesDir};

const ABOUT: &str = "\
The router reads one JSON document, key \"control\" in the KV namespace
bound as ROUTER_CONTROL, at most every GITLAB_CONTROL_REFRESH_SECONDS (30)
per isolate, through KV's edge cache (up to 60 s old): a change takes
effect everywhere within about 90 s, no deploy.
--env must name an environment of wrangler.toml. set, put and invalidate
print the stored document against the new one (- old, + new); to a remote
namespace they ask first on a terminal, and refuse without one unless
--yes. Just before writing they read the document again and refuse if it
changed meanwhile (KV has no compare-and-swap: a write landing in the
second between that read and the write is not caught).
--dry-run writes nothing; with --document FILE it reads no KV either
(no wrangler, no network, no token).
Rule ids are checked against the rulesets in rules/. The purge generation
never goes down: put and set refuse a lower one than the stored document's.
Fields the router does not know are refused by put and check (a typo); the
router itself ignores them with a warn line. An invalidation dated more
than 5 minutes ahead of this machine's clock is refused.

exit: 0 ok, 1 invalid or missing document (show: the router is degraded),
wrangler failed, or not confirmed; 2 usage, or a remote write without a
terminal and without --yes";

/// Show or change the runtime control document in KV (no deploy)
#[derive(clap::Subcommand)]
#[command(after_help = ABOUT)]
pub enum Command {
    /// Print the stored document (a missing one: degraded, exit 1)
    Show {
        /// One JSON object: environment, status (ok, missing, invalid),
        /// degraded, document, summary, problem
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        options: Options,
    },
    /// Apply CHANGEs to the stored document, show old -> new and write it
    #[command(after_long_help = CHANGES)]
    Set {
        /// What to change, applied in order (see below)
        #[arg(value_name = "CHANGE", required = true, value_parser = parse_change)]
        changes: Vec<Change>,
        #[command(flatten)]
        start: Start,
        #[command(flatten)]
        write: Write,
        #[command(flatten)]
        options: Options,
    },
    /// Show the stored document against the one in FILE and write it
    Put {
        /// The document (- for stdin)
        file: String,
        #[command(flatten)]
        write: Write,
        #[command(flatten)]
        options: Options,
    },
    /// Make the cached answers to some claims, tags or cells unusable
    /// (targeted invalidation), instead of every answer (purge)
    #[command(after_long_help = INVALIDATE)]
    Invalidate {
        /// A claim, key=value with the service's camelCase key, e.g.
        /// route=acme (also every route under it), organizationPath=acme-org,
        /// projectId=200; repeatable
        #[arg(long, value_name = "KEY=VALUE")]
        claim: Vec<String>,
        /// A Cache-Tag value as the service sends it (or the router's own,
        /// e.g. router-cell-<address>); repeatable
        #[arg(long, value_name = "TAG")]
        tag: Vec<String>,
        /// Every answer naming this cell (GITLAB_CELLS id); repeatable
        #[arg(long, value_name = "ID")]
        cell: Vec<u64>,
        /// Drop invalidations older than this from the document: the
        /// deployment's GITLAB_CACHE_MAX_TTL_SECONDS plus
        /// GITLAB_CACHE_STALE_IF_ERROR_SECONDS, past which no answer asked
        /// for before them can be used
        #[arg(long, value_name = "SECS", default_value_t = DEFAULT_KEEP_SECS)]
        keep_secs: u64,
        #[command(flatten)]
        start: Start,
        #[command(flatten)]
        write: Write,
        #[command(flatten)]
        options: Options,
    },
    /// Validate the document in FILE (no --env needed)
    Check {
        /// The document (- for stdin)
        file: String,
        /// One JSON object: file, valid, summary, problem
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        options: Options,
    },
}

const CHANGES: &str = "\
CHANGE:
  mode=passthrough        every request to the legacy cell, no service calls
  mode=normal             routing by the ruleset again
  disable=RULE_ID         evaluate that rule as if absent
  enable=RULE_ID          undo disable
  purge                   raise purge_generation by one: every cached
                          classification (memory and Cache API) is dropped
  request_log=VALUE       all | errors | sample:SHARE overrides
                          GITLAB_REQUEST_LOG; request_log=default removes it
  shadow_sample=SHARE     0 to 1: the share of requests the shadow ruleset
                          (GITLAB_SHADOW_RULES_CONFIG) is evaluated on,
                          overriding GITLAB_SHADOW_SAMPLE; 0 stops it;
                          shadow_sample=default removes the override
  note=TEXT               who and why (logged by every isolate applying it)
  reset                   normal routing: every field dropped but
                          purge_generation and invalidations (dropping
                          them would make purged answers usable again)

exit: 0 ok, 1 invalid document or wrangler failed, 2 usage";

const INVALIDATE: &str = "\
Each invalidation is written with the time it is made (at_ms): answers the
service gave before it, in memory or in the Cache API, are asked again by
the first request that needs them; answers given after it (the new ones)
and every other key are untouched. Make the move first, then invalidate.

  rulesctl control invalidate --env production --claim route=acme --claim organizationPath=acme-org --dry-run
  rulesctl control invalidate --env production --cell 2

exit: 0 ok, 1 invalid document or wrangler failed, 2 usage";

/// The default of `invalidate --keep-secs`: the router's default longest
/// TTL (3,600 s) plus its default stale window (600 s).
pub const DEFAULT_KEEP_SECS: u64 = 4_200;

/// What set and invalidate start from when there is no stored document to
/// change.
#[derive(clap::Args)]
pub struct Start {
    /// With no readable stored document (missing, or not a JSON object):
    /// start from an empty one with this purge_generation (--help: which)
    ///
    /// Without it set and invalidate refuse to write then: running isolates
    /// ignore a generation lower than theirs, so later purges would do
    /// nothing. Take the highest purge_generation the router's "control
    /// document applied" log lines show (higher is safe: it is a purge), 0
    /// for a new deployment. Ignored when the stored document can be read.
    #[arg(long, value_name = "N")]
    start_generation: Option<u64>,
}

/// What every verb takes (check uses only --rules-dir).
#[derive(clap::Args)]
pub struct Options {
    #[command(flatten)]
    rules_dir: DirArg,
    #[command(
        flatten,
        next_help_heading = "Wrangler options (show, set, put, invalidate)"
    )]
    kv: Kv,
}

/// What the writing verbs take.
#[derive(clap::Args)]
pub struct Write {
    /// Print old -> new and the wrangler command, write nothing
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: the stored document is FILE's (- for stdin; an
    /// empty FILE: none stored), KV is not read: no wrangler, no network,
    /// no token
    #[arg(long, value_name = "FILE", requires = "dry_run")]
    document: Option<String>,
    #[command(flatten)]
    yes: Yes,
}

/// What `set` changes, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Mode(String),
    Disable(String),
    Enable(String),
    Purge,
    RequestLog(Option<String>),
    ShadowSample(Option<f64>),
    Note(String),
    Reset,
}

fn parse_change(text: &str) -> Result<Change, String> {
    Ok(match text.split_once('=') {
        None if text == "purge" => Change::Purge,
        None if text == "reset" => Change::Reset,
        Some(("mode", m)) => Change::Mode(m.to_string()),
        Some(("disable", id)) if !id.is_empty() => Change::Disable(id.to_string()),
        Some(("enable", id)) if !id.is_empty() => Change::Enable(id.to_string()),
        Some(("request_log", "default")) => Change::RequestLog(None),
        Some(("request_log", v)) => Change::RequestLog(Some(v.to_string())),
        Some(("shadow_sample", "default")) => Change::ShadowSample(None),
        Some(("shadow_sample", v)) => match v.parse::<f64>() {
            Ok(share) if (0.0..=1.0).contains(&share) => Change::ShadowSample(Some(share)),
            _ => return Err(format!("shadow_sample={v}: not a share from 0 to 1")),
        },
        Some(("note", n)) => Change::Note(n.to_string()),
        _ => {
            return Err(
                "not a change (mode=, disable=, enable=, purge, request_log=, shadow_sample=, note=, reset)"
                    .into(),
            )
        }
    })
}

/// Applies `changes` to the document `doc` (an object).
fn apply(doc: &mut Map<String, Value>, changes: &[Change]) {
    for change in changes {
        match change {
            Change::Mode(m) => {
                doc.insert("mode".into(), Value::String(m.clone()));
            }
            Change::Disable(id) | Change::Enable(id) => {
                let mut ids: Vec<Value> = doc
                    .get("disabled_rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                ids.retain(|v| v.as_str() != Some(id));
                if matches!(change, Change::Disable(_)) {
                    ids.push(Value::String(id.clone()));
                }
                if ids.is_empty() {
                    doc.remove("disabled_rules");
                } else {
                    doc.insert("disabled_rules".into(), Value::Array(ids));
                }
            }
            Change::Purge => {
                let next = doc
                    .get("purge_generation")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    + 1;
                doc.insert("purge_generation".into(), next.into());
            }
            Change::RequestLog(None) => {
                doc.remove("request_log");
            }
            Change::RequestLog(Some(v)) => {
                doc.insert("request_log".into(), Value::String(v.clone()));
            }
            Change::ShadowSample(None) => {
                doc.remove("shadow_sample");
            }
            Change::ShadowSample(Some(share)) => {
                doc.insert("shadow_sample".into(), (*share).into());
            }
            Change::Note(n) => {
                doc.insert("note".into(), Value::String(n.clone()));
            }
            Change::Reset => {
                // The generation and the invalidations are kept: lowering
                // or dropping them would make purged answers readable again.
                let generation = doc.get("purge_generation").cloned();
                let invalidations = doc.get("invalidations").cloned();
                doc.clear();
                if let Some(g) = generation {
                    doc.insert("purge_generation".into(), g);
                }
                if let Some(list) = invalidations {
                    doc.insert("invalidations".into(), list);
                }
            }
        }
    }
}

/// Validates `text` as the router would, and its rule ids against the
/// shipped rulesets.
fn validate(text: &str, rules_dir: &RulesDir) -> Outcome<Control> {
    let control = Control::parse(text).map_err(Failure::data)?;
    if control.disabled_rules.is_empty() {
        return Ok(control);
    }
    let mut known = Vec::new();
    for path in rules_dir.all()? {
        let loaded = rules::load(&path)?;
        known.extend(loaded.ruleset.rules().iter().map(|r| r.id.clone()));
    }
    let unknown: Vec<&String> = control
        .disabled_rules
        .iter()
        .filter(|id| !known.contains(id))
        .collect();
    if !unknown.is_empty() {
        return Err(Failure::data(format!(
            "disabled_rules: {} names no rule of any ruleset in {}",
            unknown
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            rules_dir.locate()?.display()
        )));
    }
    Ok(control)
}

fn read_file(arg: &str) -> Outcome<String> {
    if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| Failure::data(format!("stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(arg).map_err(|e| Failure::data(format!("{arg}: cannot read: {e}")))
}

/// What a write tells the operator about when it holds everywhere.
const PROPAGATION: &str = "every isolate applies it within about 90 s: KV's edge cache (up to 60 s) plus GITLAB_CONTROL_REFRESH_SECONDS (30 s by default); docs/operations.md, How fast";

pub fn run(command: Command) -> Outcome<i32> {
    let now_ms = kv::now_ms();
    match command {
        Command::Check {
            file,
            json,
            options,
        } => check(&file, json, &options, now_ms),
        Command::Show { json, options } => show(&options.kv.wrangler("control show")?, json),
        command => write(command, now_ms),
    }
}

fn check(file: &str, json: bool, options: &Options, now_ms: u64) -> Outcome<i32> {
    let checked = read_file(file).and_then(|text| {
        let control = validate(&text, &options.rules_dir.dir())?;
        check_written(&control, now_ms)?;
        refuse_unknown_fields(&control)?;
        Ok(control)
    });
    match (checked, json) {
        (Ok(control), false) => {
            out::line(&format!("{file}: valid: {}", control.summary()));
            Ok(0)
        }
        (Err(e), false) => Err(e),
        (Ok(control), true) => {
            out::line(
                &json!({"file": file, "valid": true, "summary": control.summary()}).to_string(),
            );
            Ok(0)
        }
        (Err(Failure::Usage(m)), true) => Err(Failure::Usage(m)),
        (Err(Failure::Data(problem)), true) => {
            out::line(&json!({"file": file, "valid": false, "problem": problem}).to_string());
            Ok(1)
        }
    }
}

/// set, put and invalidate.
fn write(command: Command, now_ms: u64) -> Outcome<i32> {
    let (verb, options, write) = match &command {
        Command::Set { options, write, .. } => ("set", options, write),
        Command::Put { options, write, .. } => ("put", options, write),
        Command::Invalidate { options, write, .. } => ("invalidate", options, write),
        Command::Show { .. } | Command::Check { .. } => {
            return Err(Failure::usage("control: not a writing verb"))
        }
    };
    let what = format!("control {verb}");
    let rules_dir = options.rules_dir.dir();
    let wrangler = options.kv.wrangler(&what)?;
    let remote = !wrangler.local;
    // What invalidate adds, checked before wrangler is asked anything.
    let added = match &command {
        Command::Invalidate {
            claim, tag, cell, ..
        } => invalidations_of(claim, tag, cell, now_ms)?,
        _ => Vec::new(),
    };
    if !write.dry_run {
        confirm::refuse_unconfirmable(
            &write.yes,
            remote,
            &format!("{what} --env {}", wrangler.env),
        )?;
    }
    let current = match &write.document {
        Some(document) => {
            if document == "-" && matches!(&command, Command::Put { file, .. } if file == "-") {
                return Err(Failure::usage(format!(
                    "{what}: the document and --document cannot both be stdin"
                )));
            }
            let text = read_file(document)?;
            let text = text.trim_end_matches('\n');
            (!text.trim().is_empty()).then(|| text.to_string())
        }
        None => wrangler.get(CONTROL_KEY)?,
    };
    let text = match &command {
        Command::Put { file, .. } => {
            let text = read_file(file)?;
            refuse_unknown_fields(&Control::parse(&text).map_err(Failure::data)?)?;
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(mut doc)) => {
                    let kept = carry_invalidations(current.as_deref(), &mut doc, now_ms);
                    if kept > 0 {
                        out::line(&format!(
                            "kept {kept} invalidation(s) of the stored document that {file} leaves out (they end by themselves after --keep-secs of invalidate)"
                        ));
                    }
                    Value::Object(doc).to_string()
                }
                // Invalid: validate says why.
                _ => text,
            }
        }
        Command::Invalidate {
            keep_secs, start, ..
        } => {
            let mut doc = starting_document(current.as_deref(), start)?;
            let pruned = add_invalidations(&mut doc, &added, now_ms, *keep_secs);
            out::line(&format!(
                "adding {} invalidation(s) at {now_ms} ms ({}); dropping {pruned} older than {keep_secs} s",
                added.len(),
                added.iter().map(Invalidation::describe).collect::<Vec<_>>().join(", ")
            ));
            Value::Object(doc).to_string()
        }
        Command::Set { changes, start, .. } => {
            let mut doc = starting_document(current.as_deref(), start)?;
            apply(&mut doc, changes);
            Value::Object(doc).to_string()
        }
        Command::Show { .. } | Command::Check { .. } => {
            return Err(Failure::usage("control: not a writing verb"))
        }
    };
    let control = validate(&text, &rules_dir)?;
    check_written(&control, now_ms)?;
    if !control.ignored_fields.is_empty() {
        // Only set and invalidate get here with them: kept from the stored
        // document (a later version's), which they change in place.
        out::line(&format!(
            "keeping fields of the stored document this version does not know: {}",
            control.ignored_fields.join(", ")
        ));
    }
    check_generation(current.as_deref(), &control)?;
    let source = match &write.document {
        Some(document) => format!("--document {document}"),
        None => wrangler.place(),
    };
    let stored = match current.as_deref().map(Control::parse) {
        None => "nothing stored".to_string(),
        Some(Ok(c)) => c.summary(),
        Some(Err(_)) => "not a valid document".to_string(),
    };
    out::line(&format!("--- stored ({source}): {stored}"));
    out::line(&format!("+++ to write: {}", control.summary()));
    let lines = docdiff::diff(current.as_deref(), &text);
    if lines.is_empty() {
        out::line("unchanged: the stored document already reads so; nothing written");
        return Ok(0);
    }
    for line in &lines {
        out::line(line);
    }
    let put = wrangler.args("put", CONTROL_KEY, &[text.trim()]);
    if write.dry_run {
        out::line(&format!(
            "dry run: would run {} {}",
            wrangler.program.display(),
            put.iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        return Ok(0);
    }
    confirm::ask(
        &write.yes,
        remote,
        &format!("write this to {}?", wrangler.place()),
    )?;
    // KV has no compare-and-swap: read again just before writing, and
    // refuse if another writer changed the document since it was read.
    if wrangler.get(CONTROL_KEY)? != current {
        return Err(Failure::data(format!(
            "the stored document changed since rulesctl read it (another writer): nothing written. Run `rulesctl control show --env {}` and the command again: it applies the change to the new document",
            wrangler.env
        )));
    }
    wrangler.run(&put)?;
    out::line(&format!("written ({}); {PROPAGATION}", control.summary()));
    Ok(0)
}

/// The stored document `current` as an object to change; when it is
/// missing or unreadable, an empty one with `--start-generation`, which
/// must then be given.
fn starting_document(current: Option<&str>, start: &Start) -> Outcome<Map<String, Value>> {
    let why = match current.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(map))) => {
            if start.start_generation.is_some() {
                out::line("--start-generation ignored: the stored document is read and changed");
            }
            return Ok(map);
        }
        None => "there is no stored document",
        Some(_) => "the stored document is not a JSON object",
    };
    let Some(generation) = start.start_generation else {
        return Err(Failure::data(format!(
            "{why}: refused to write one from scratch, since running isolates ignore a purge_generation lower than theirs (later purges would do nothing). Say the generation to start from with --start-generation N: the highest purge_generation of the router's \"control document applied\" log lines (higher is safe: it is a purge), 0 for a new deployment"
        )));
    };
    out::line(&format!(
        "{why}: starting from an empty document with purge_generation {generation}"
    ));
    let mut doc = Map::new();
    doc.insert("purge_generation".into(), generation.into());
    Ok(doc)
}

/// Refuses what no isolate should be given: an invalidation dated more
/// than [`MAX_AHEAD_MS`] ahead of `now_ms` (the router ignores it; in
/// force, it would make its answers uncacheable until then).
fn check_written(control: &Control, now_ms: u64) -> Outcome<()> {
    for inv in &control.invalidations {
        if let Some(ahead) = inv.too_far_ahead(now_ms) {
            return Err(Failure::data(format!(
                "invalidation {} has at_ms {}, {ahead} ms ahead of this machine's clock (more than {MAX_AHEAD_MS} ms): refused. at_ms is milliseconds since the Unix epoch; leave it out (put a document without it: put keeps none dated ahead)",
                inv.describe(),
                inv.at_ms
            )));
        }
    }
    Ok(())
}

/// Refuses a document written by hand with fields the router does not
/// know (a typo such as "mdoe" would silently change nothing).
fn refuse_unknown_fields(control: &Control) -> Outcome<()> {
    if control.ignored_fields.is_empty() {
        return Ok(());
    }
    Err(Failure::data(format!(
        "control document: unknown field(s) {} (known: mode, disabled_rules, purge_generation, request_log, shadow_sample, note, invalidations; an invalidation: at_ms and one of claim, tag, cell)",
        control.ignored_fields.join(", ")
    )))
}

/// The invalidations `--claim`, `--tag` and `--cell` name, made at `now_ms`.
fn invalidations_of(
    claims: &[String],
    tags: &[String],
    cells: &[u64],
    now_ms: u64,
) -> Outcome<Vec<Invalidation>> {
    let mut added = Vec::new();
    for c in claims {
        let subject = parse_claim(c).map_err(Failure::usage)?;
        added.push(Invalidation {
            at_ms: now_ms,
            subject,
        });
    }
    for t in tags {
        if t.is_empty() {
            return Err(Failure::usage("control invalidate: --tag is empty"));
        }
        added.push(Invalidation {
            at_ms: now_ms,
            subject: Subject::Tag(t.clone()),
        });
    }
    for id in cells {
        added.push(Invalidation {
            at_ms: now_ms,
            subject: Subject::Cell(*id),
        });
    }
    if added.is_empty() {
        return Err(Failure::usage(
            "control invalidate: name at least one --claim, --tag or --cell",
        ));
    }
    Ok(added)
}

/// Appends `added` to the document's `invalidations` (one per subject:
/// a subject already listed gets the new time), dropping those older than
/// `keep_secs` at `now_ms`; returns how many were dropped.
fn add_invalidations(
    doc: &mut Map<String, Value>,
    added: &[Invalidation],
    now_ms: u64,
    keep_secs: u64,
) -> usize {
    let existing: Vec<Value> = doc
        .get("invalidations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut values: Vec<Value> = Vec::new();
    let mut pruned = 0;
    for value in existing {
        match Invalidation::from_value(&value) {
            // An entry the router cannot read is kept for validate to
            // report.
            Err(_) => values.push(value),
            Ok(inv) if inv.at_ms.saturating_add(keep_secs * 1000) <= now_ms => pruned += 1,
            Ok(inv) if added.iter().any(|a| a.subject == inv.subject) => {}
            Ok(_) => values.push(value),
        }
    }
    values.extend(added.iter().map(Invalidation::to_value));
    doc.insert("invalidations".into(), Value::Array(values));
    pruned
}

/// Carries the stored document's invalidations that `doc` leaves out (and
/// that are younger than [`DEFAULT_KEEP_SECS`], and not dated too far
/// ahead) into `doc`; returns how many. Dropping one would make the answers it invalidated usable again
/// in isolates that start later.
fn carry_invalidations(current: Option<&str>, doc: &mut Map<String, Value>, now_ms: u64) -> usize {
    let Some(Ok(Value::Object(stored))) = current.map(serde_json::from_str::<Value>) else {
        return 0;
    };
    let stored: Vec<Invalidation> = stored
        .get("invalidations")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|v| Invalidation::from_value(v).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut list: Vec<Value> = doc
        .get("invalidations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let present: Vec<Invalidation> = list
        .iter()
        .filter_map(|v| Invalidation::from_value(v).ok())
        .collect();
    let mut kept = 0;
    for inv in stored {
        let young = inv.at_ms.saturating_add(DEFAULT_KEEP_SECS * 1000) > now_ms;
        if young
            && inv.too_far_ahead(now_ms).is_none()
            && !present
                .iter()
                .any(|p| p.subject == inv.subject && p.at_ms >= inv.at_ms)
        {
            list.push(inv.to_value());
            kept += 1;
        }
    }
    if kept > 0 {
        doc.insert("invalidations".into(), Value::Array(list));
    }
    kept
}

/// The purge generation of the stored document `current`, if it has one
/// that can be read.
fn stored_generation(current: Option<&str>) -> Option<u64> {
    let value: Value = serde_json::from_str(current?).ok()?;
    value.get("purge_generation")?.as_u64()
}

/// Refuses a document whose `purge_generation` is lower than the stored
/// one's: lowering it would make answers a purge made unusable readable
/// again (isolates ignore a lower one, but new isolates would start from it).
fn check_generation(current: Option<&str>, next: &Control) -> Outcome<()> {
    match stored_generation(current) {
        Some(stored) if next.purge_generation < stored => Err(Failure::data(format!(
            "purge_generation {} is lower than the stored document's {stored}: refused (the generation never goes down; lowering it would make purged answers readable again). Keep \"purge_generation\": {stored} or raise it",
            next.purge_generation
        ))),
        _ => Ok(()),
    }
}

fn show(wrangler: &Wrangler, json: bool) -> Outcome<i32> {
    let stored = wrangler.get(CONTROL_KEY)?;
    let parsed = stored.as_deref().map(Control::parse);
    let missing = format!(
        "no control document (key \"{CONTROL_KEY}\") in {}: the router is DEGRADED. Isolates that read one keep it; every new isolate routes with the default document (normal mode, nothing disabled) but without the Cache API (it cannot know the purge generation), so it asks the Topology Service once per key per TTL, and logs a warn line at every read. Write it back: rulesctl control set --env {} --start-generation N reset (N: the highest purge_generation of the router's \"control document applied\" log lines, 0 for a new deployment)",
        wrangler.place(),
        wrangler.env
    );
    if json {
        let (status, summary, problem) = match &parsed {
            None => ("missing", Value::Null, Value::String(missing)),
            Some(Ok(c)) => ("ok", Value::String(c.summary()), Value::Null),
            Some(Err(e)) => (
                "invalid",
                Value::Null,
                Value::String(format!(
                    "the stored document is invalid, the router ignores it (keeping its last good one): {e}"
                )),
            ),
        };
        let document = stored.as_deref().map_or(Value::Null, |t| {
            serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.to_string()))
        });
        out::line(
            &json!({
                "environment": wrangler.env,
                "local": wrangler.local,
                "key": CONTROL_KEY,
                "status": status,
                "degraded": status == "missing",
                "summary": summary,
                "problem": problem,
                "document": document,
            })
            .to_string(),
        );
        return Ok(if status == "ok" { 0 } else { 1 });
    }
    match (stored, parsed) {
        (Some(text), Some(Ok(_))) => {
            out::line(&pretty(&text));
            Ok(0)
        }
        (Some(text), Some(Err(e))) => {
            out::line(&pretty(&text));
            out::err_line(&format!(
                "rulesctl: the stored document is invalid, the router ignores it: {e}"
            ));
            Ok(1)
        }
        _ => {
            out::err_line(&format!("rulesctl: {missing}"));
            Ok(1)
        }
    }
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(start: &str, changes: &[&str]) -> String {
        let mut doc: Map<String, Value> = serde_json::from_str(start).unwrap();
        let changes: Vec<Change> = changes.iter().map(|c| parse_change(c).unwrap()).collect();
        apply(&mut doc, &changes);
        Value::Object(doc).to_string()
    }

    #[test]
    fn changes_apply_in_order() {
        assert_eq!(
            applied("{}", &["mode=passthrough", "note=INC-1"]),
            r#"{"mode":"passthrough","note":"INC-1"}"#
        );
        assert_eq!(
            applied(
                r#"{"disabled_rules":["a"]}"#,
                &["disable=b", "disable=a", "enable=b"]
            ),
            r#"{"disabled_rules":["a"]}"#
        );
        assert_eq!(applied(r#"{"disabled_rules":["a"]}"#, &["enable=a"]), "{}");
        assert_eq!(
            applied(r#"{"purge_generation":4}"#, &["purge"]),
            r#"{"purge_generation":5}"#
        );
        assert_eq!(
            applied(
                r#"{"mode":"passthrough","purge_generation":2,"note":"x"}"#,
                &["reset"]
            ),
            r#"{"purge_generation":2}"#,
            "reset keeps the generation: lowering it would revive old entries"
        );
        assert_eq!(
            applied(r#"{"request_log":"all"}"#, &["request_log=default"]),
            "{}"
        );
        assert_eq!(
            applied("{}", &["shadow_sample=0.25"]),
            r#"{"shadow_sample":0.25}"#
        );
        assert_eq!(
            applied(r#"{"shadow_sample":1.0}"#, &["shadow_sample=default"]),
            "{}"
        );
        for bad in [
            "shadow_sample=1.5",
            "shadow_sample=-0.1",
            "shadow_sample=half",
        ] {
            assert!(parse_change(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_lower_generation_is_refused() {
        let doc = |text: &str| Control::parse(text).unwrap();
        let stored = Some(r#"{"purge_generation":3,"mode":"passthrough"}"#);
        let refused = check_generation(stored, &doc("{}")).unwrap_err();
        assert!(
            format!("{refused:?}").contains("lower than the stored document's 3"),
            "{refused:?}"
        );
        assert!(check_generation(stored, &doc(r#"{"purge_generation":2}"#)).is_err());
        assert!(check_generation(stored, &doc(r#"{"purge_generation":3}"#)).is_ok());
        assert!(check_generation(stored, &doc(r#"{"purge_generation":4}"#)).is_ok());
        assert!(
            check_generation(None, &doc("{}")).is_ok(),
            "no stored document"
        );
        assert!(check_generation(Some("{}"), &doc("{}")).is_ok());
        // What `set` writes never lowers it: reset and every change keep it.
        assert_eq!(
            applied(r#"{"purge_generation":3}"#, &["reset", "mode=normal"]),
            r#"{"mode":"normal","purge_generation":3}"#
        );
    }

    #[test]
    fn invalidations_are_added_once_per_subject_and_expire_from_the_document() {
        let mut doc: Map<String, Value> = serde_json::from_str(
            r#"{"purge_generation":2,"invalidations":[{"at_ms":1000,"claim":"route=old"},{"at_ms":9000000,"claim":"route=acme"},{"at_ms":9000000,"cell":3}]}"#,
        )
        .unwrap();
        let now = 10_000_000;
        let added = [
            Invalidation {
                at_ms: now,
                subject: parse_claim("route=acme").unwrap(),
            },
            Invalidation {
                at_ms: now,
                subject: Subject::Tag("org-acme".into()),
            },
        ];
        assert_eq!(
            add_invalidations(&mut doc, &added, now, 4_200),
            1,
            "route=old"
        );
        assert_eq!(
            Value::Object(doc.clone()).to_string(),
            r#"{"invalidations":[{"at_ms":9000000,"cell":3},{"at_ms":10000000,"claim":"route=acme"},{"at_ms":10000000,"tag":"org-acme"}],"purge_generation":2}"#
        );
        let control = Control::parse(&Value::Object(doc.clone()).to_string()).unwrap();
        assert_eq!(control.invalidations.len(), 3);
        // reset keeps them (and the generation).
        let text = Value::Object(doc).to_string();
        assert!(applied(&text, &["reset"]).contains(r#""tag":"org-acme""#));
        // put of a document without them carries the young ones over.
        let mut put: Map<String, Value> = serde_json::from_str(r#"{"mode":"normal"}"#).unwrap();
        assert_eq!(carry_invalidations(Some(&text), &mut put, now), 3);
        assert_eq!(put["invalidations"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn no_readable_document_is_started_from_only_with_a_stated_generation() {
        let from = |current: Option<&str>, start_generation| {
            starting_document(current, &Start { start_generation })
                .map(|doc| Value::Object(doc).to_string())
        };
        for current in [None, Some("[1]"), Some("not json"), Some("")] {
            let refused = format!("{:?}", from(current, None).unwrap_err());
            assert!(refused.contains("--start-generation N"), "{refused}");
            assert_eq!(
                from(current, Some(12)).unwrap(),
                r#"{"purge_generation":12}"#
            );
        }
        assert_eq!(
            from(Some(r#"{"purge_generation":3}"#), Some(0)).unwrap(),
            r#"{"purge_generation":3}"#,
            "a readable document is changed in place"
        );
    }

    #[test]
    fn put_does_not_carry_an_invalidation_dated_ahead() {
        let now = 10_000_000;
        let stored = format!(
            r#"{{"invalidations":[{{"at_ms":{},"cell":2}},{{"at_ms":{now},"cell":3}}]}}"#,
            now * 1000
        );
        let mut put: Map<String, Value> = serde_json::from_str("{}").unwrap();
        assert_eq!(carry_invalidations(Some(&stored), &mut put, now), 1);
        assert_eq!(put["invalidations"][0]["cell"], 3);
        let ahead = Control::parse(&stored).unwrap();
        let refused = format!("{:?}", check_written(&ahead, now).unwrap_err());
        assert!(
            refused.contains("cell=2 has at_ms 10000000000"),
            "{refused}"
        );
    }

    #[test]
    fn unknown_changes_are_usage_errors() {
        for bad in ["mode", "disable=", "purge=3", "colour=red"] {
            assert!(parse_change(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wrangler_command_lines() {
        let w = Wrangler {
            program: "wrangler".into(),
            env: "production".into(),
            local: false,
            persist_to: None,
            config: Some("wrangler.toml".into()),
        };
        assert_eq!(
            w.args("put", CONTROL_KEY, &[r#"{"mode":"passthrough"}"#])
                .join(" "),
            r#"kv key put control {"mode":"passthrough"} --binding ROUTER_CONTROL --env production --remote --config wrangler.toml"#
        );
        assert_eq!(shell_quote(r#"{"a":1}"#), r#"'{"a":1}'"#);
    }
}
