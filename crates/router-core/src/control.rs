//! Runtime controls: switches an on-call engineer flips without a
//! deploy, read by every isolate from one JSON document in Workers KV
//! (`ROUTER_CONTROL`, key [`CONTROL_KEY`]) at most once per interval.
//!
//! ```json
//! {"mode": "passthrough", "disabled_rules": ["path_namespace"],
//!  "purge_generation": 3, "request_log": "all", "shadow_sample": 0.05,
//!  "note": "INC-1234: topology service answering 404 for everything"}
//! ```
//!
//! Every field is optional. Unknown fields (a later version's, after a
//! rollback, or a typo) are ignored and named in a warn line once per
//! document applied: an older version keeps honouring passthrough and
//! purge in a document a newer one wrote. `rulesctl control` refuses them
//! when it writes, so a typo (`"mdoe"`) is caught there. An invalid
//! document is logged and the last good one kept. An invalidation dated
//! more than [`MAX_AHEAD_MS`] ahead of the isolate's clock is ignored (a
//! warn line says so), the rest of the document applied.
//!
//! A purge cannot be undone by accident: the generation an isolate uses
//! never goes down (a lower one in a document is ignored, with a warning),
//! and a missing key is not "back to normal": an isolate that has read a
//! document keeps it, and a new isolate that finds no key routes with the
//! default document but without the shared cache, since it cannot know
//! which answers a purge made unusable (see [`ControlState::finish_read`]).

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::log::RequestLogging;
use crate::resolve::invalidate::{self, Invalidation, MAX_AHEAD_MS, MAX_INVALIDATIONS};

/// The KV key that holds the document.
pub const CONTROL_KEY: &str = "control";

/// The largest document accepted (KV values can be far larger; a control
/// document is a few hundred bytes).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// How requests are routed, as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// By the ruleset.
    #[default]
    Normal,
    /// Every request to the legacy cell, no service calls: the first
    /// remedy when routing itself is the problem.
    Passthrough,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Passthrough => "passthrough",
        }
    }
}

/// One control document, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Control {
    pub mode: Mode,
    /// Rule ids evaluated as if absent.
    pub disabled_rules: Vec<String>,
    /// Raising it makes every cached classification unusable at once
    /// (memory and Cache API): cache keys carry the generation.
    pub purge_generation: u64,
    /// Overrides `GITLAB_REQUEST_LOG` while set, e.g. `"all"` during an
    /// incident.
    pub request_log: Option<RequestLogging>,
    /// Overrides `GITLAB_SHADOW_SAMPLE` while set: the share of requests
    /// the shadow ruleset is evaluated on, in millionths.
    pub shadow_per_million: Option<u32>,
    /// Who set it and why; logged when the document is applied.
    pub note: Option<String>,
    /// Targeted invalidations ([`crate::resolve::invalidate`]): answers by
    /// claim, tag or cell asked for before a time are unusable.
    pub invalidations: Vec<Invalidation>,
    /// The fields this version does not know, ignored: `"mdoe"`,
    /// `"invalidations[2].why"`.
    pub ignored_fields: Vec<String>,
}

#[derive(Deserialize)]
struct ControlSpec {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    disabled_rules: Vec<String>,
    #[serde(default)]
    purge_generation: u64,
    #[serde(default)]
    request_log: Option<String>,
    #[serde(default)]
    shadow_sample: Option<f64>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    invalidations: Vec<serde_json::Value>,
    /// Every other field: ignored, and named.
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl Control {
    /// Parses a document; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Control, String> {
        if text.len() > MAX_DOCUMENT_BYTES {
            return Err(format!(
                "control document is {} bytes, over the {MAX_DOCUMENT_BYTES}-byte limit",
                text.len()
            ));
        }
        if !text.trim_start().starts_with('{') {
            return Err("control document: expected a JSON object".into());
        }
        let spec: ControlSpec =
            serde_json::from_str(text).map_err(|e| format!("control document: {e}"))?;
        let mode = match spec.mode.as_deref() {
            None | Some("normal") => Mode::Normal,
            Some("passthrough") => Mode::Passthrough,
            Some(other) => {
                return Err(format!(
                    "control document: mode {other:?} is neither normal nor passthrough"
                ))
            }
        };
        if let Some(bad) = spec.disabled_rules.iter().find(|id| id.is_empty()) {
            return Err(format!(
                "control document: disabled_rules holds an empty id ({bad:?})"
            ));
        }
        let request_log = match spec.request_log.as_deref() {
            None => None,
            Some(value) => Some(RequestLogging::parse(value).ok_or_else(|| {
                format!(
                    "control document: request_log {value:?} is none of all, errors, sample:<share>"
                )
            })?),
        };
        let shadow_per_million = match spec.shadow_sample {
            None => None,
            Some(share) if (0.0..=1.0).contains(&share) => {
                Some((share * 1_000_000.0).round() as u32)
            }
            // Not the value: formatting a float would add its code to the wasm.
            Some(_) => {
                return Err("control document: shadow_sample is not a share from 0 to 1".into())
            }
        };
        if spec.invalidations.len() > MAX_INVALIDATIONS {
            return Err(format!(
                "control document: {} invalidations, over the limit of {MAX_INVALIDATIONS}",
                spec.invalidations.len()
            ));
        }
        let invalidations = spec
            .invalidations
            .iter()
            .enumerate()
            .map(|(i, v)| {
                Invalidation::from_value(v)
                    .map_err(|e| format!("control document: invalidations[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut ignored_fields: Vec<String> = spec.unknown.into_keys().collect();
        for (i, entry) in spec.invalidations.iter().enumerate() {
            ignored_fields.extend(
                invalidate::unknown_fields(entry).map(|f| format!("invalidations[{i}].{f}")),
            );
        }
        Ok(Control {
            invalidations,
            ignored_fields,
            mode,
            disabled_rules: spec.disabled_rules,
            purge_generation: spec.purge_generation,
            request_log,
            shadow_per_million,
            note: spec.note.filter(|n| !n.is_empty()),
        })
    }

    /// A one-line summary for the log line written when it is applied.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "mode={} disabled_rules=[{}] purge_generation={}",
            self.mode.name(),
            self.disabled_rules.join(","),
            self.purge_generation
        );
        if let Some(log) = self.request_log {
            text.push_str(&format!(" request_log={:?}", log.name()));
        }
        if let Some(per_million) = self.shadow_per_million {
            text.push_str(&format!(" shadow_sample={per_million}/1000000"));
        }
        if !self.invalidations.is_empty() {
            text.push_str(&format!(" invalidations={}", self.invalidations.len()));
        }
        if let Some(note) = &self.note {
            text.push_str(&format!(" note={note:?}"));
        }
        text
    }
}

/// What one read of the KV key gave (the edge reads at most
/// [`MAX_DOCUMENT_BYTES`] + 1 bytes of it, and reports a longer value as
/// failed without reading the rest).
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOutcome {
    /// The key holds this text.
    Text(String),
    /// No such key: the normal state.
    Absent,
    /// KV failed or did not answer in time.
    Failed(String),
}

/// What an isolate knows of the control document and when it reads it
/// next. Pure: time is passed in.
#[derive(Debug)]
pub struct ControlState {
    interval_ms: u64,
    current: Control,
    /// When the next read is due; 0: never read.
    next_read_ms: u64,
    /// A read is under way (started at this time).
    reading_since: Option<u64>,
    /// When the isolate's first read began, until a read has finished.
    first_read_since: Option<u64>,
    /// Whether a read has ever finished (good or not).
    read_once: bool,
    /// Whether a read has ever told what the document is (or that there
    /// is none): until then the purge generation is unknown, and the
    /// shared cache is not used (it may hold answers a purge made unusable).
    known: bool,
}

/// What applying a read changed, for the edge to act on and log.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// The document differs from the one before (log it).
    pub changed: bool,
    /// The purge generation moved (clear the caches).
    pub purged: bool,
    /// Something to log as an error (KV failure, invalid document).
    pub problem: Option<String>,
    /// What to log as warnings (a lower generation ignored, the key
    /// missing; once per document applied: unknown fields, invalidations
    /// dated too far ahead).
    pub warnings: Vec<String>,
}

/// A read that has not finished after this long is abandoned and may be
/// started again by another request.
pub const READ_TIMEOUT_MS: u64 = 2_000;

/// How long an isolate's first requests wait for its first read before
/// they are routed with what the isolate has (the default document, no
/// shared cache). KV answers in a few ms; this bounds what an outage of
/// KV adds to a new isolate's first requests.
pub const FIRST_READ_WAIT_MS: u64 = 200;

impl ControlState {
    pub fn new(interval_ms: u64) -> ControlState {
        ControlState {
            interval_ms: interval_ms.max(1),
            current: Control::default(),
            next_read_ms: 0,
            reading_since: None,
            first_read_since: None,
            read_once: false,
            known: false,
        }
    }

    pub fn current(&self) -> &Control {
        &self.current
    }

    /// Whether a request at `now` should start a read: the interval has
    /// passed and no read is under way (or the one under way is stuck).
    pub fn due(&self, now: u64) -> bool {
        match self.reading_since {
            Some(since) => now.saturating_sub(since) >= READ_TIMEOUT_MS,
            None => now >= self.next_read_ms,
        }
    }

    /// Whether requests at `now` must wait for a read before routing: the
    /// isolate has never finished one (a passthrough set minutes ago must
    /// hold from an isolate's first request on), for at most
    /// [`FIRST_READ_WAIT_MS`] after its first read began.
    pub fn must_wait(&self, now: u64) -> bool {
        !self.read_once
            && self
                .first_read_since
                .is_none_or(|since| now.saturating_sub(since) < FIRST_READ_WAIT_MS)
    }

    /// Whether the document (or its absence) has ever been read: the purge
    /// generation is known, and the shared cache may be used.
    pub fn is_known(&self) -> bool {
        self.known
    }

    /// Marks a read started at `now`; other requests stop asking for one.
    pub fn begin_read(&mut self, now: u64) {
        self.reading_since = Some(now);
        self.first_read_since.get_or_insert(now);
        self.next_read_ms = now + self.interval_ms;
    }

    /// Applies a read's outcome at `now`. Failures and invalid documents
    /// keep the last known document. A document whose `purge_generation`
    /// is lower than the one in use is applied with the generation in use
    /// (a warning says so): lowering it would make purged answers readable
    /// again. A missing key keeps the last known document once one has
    /// been read (a warning says so); before that, the isolate routes with
    /// the default document and the shared cache stays unused
    /// ([`ControlState::is_known`] stays false).
    pub fn finish_read(&mut self, outcome: ReadOutcome, now: u64) -> Applied {
        self.reading_since = None;
        self.read_once = true;
        self.next_read_ms = now + self.interval_ms;
        let mut next = match outcome {
            ReadOutcome::Absent => {
                let warning = if self.known {
                    format!(
                        "the control key is missing: keeping the last known document ({}); write one (rulesctl control set --env ENV --start-generation {} reset), never delete it",
                        self.current.summary(),
                        self.current.purge_generation
                    )
                } else {
                    "the control key is missing: routing with the default document, without the shared cache (a purge this isolate cannot see may have made its answers unusable); write one with rulesctl control set --env ENV --start-generation N reset (N: the highest purge_generation in use, 0 for a new deployment)".to_string()
                };
                return Applied {
                    warnings: vec![warning],
                    ..Applied::default()
                };
            }
            ReadOutcome::Text(text) => match Control::parse(&text) {
                Ok(control) => control,
                Err(problem) => {
                    return Applied {
                        problem: Some(format!("{problem}; keeping the last known document")),
                        ..Applied::default()
                    }
                }
            },
            ReadOutcome::Failed(why) => {
                return Applied {
                    problem: Some(format!(
                    "reading the control document failed: {why}; keeping the last known document"
                )),
                    ..Applied::default()
                }
            }
        };
        let mut warnings = Vec::new();
        if next.purge_generation < self.current.purge_generation {
            warnings.push(format!(
                "the control document lowers purge_generation from {} to {}: ignored (the generation never goes down; purged answers stay unusable)",
                self.current.purge_generation, next.purge_generation
            ));
            next.purge_generation = self.current.purge_generation;
        }
        let mut ahead = Vec::new();
        next.invalidations
            .retain(|inv| match inv.too_far_ahead(now) {
                Some(ms) => {
                    ahead.push(format!(
                        "{} at_ms {} ({ms} ms ahead)",
                        inv.describe(),
                        inv.at_ms
                    ));
                    false
                }
                None => true,
            });
        let changed = next != self.current || !self.known;
        if changed && !next.ignored_fields.is_empty() {
            warnings.push(format!(
                "the control document has fields this version does not know, ignored: {} (a later version's, or a typo; the rest is applied)",
                next.ignored_fields.join(", ")
            ));
        }
        if changed && !ahead.is_empty() {
            warnings.push(format!(
                "invalidations dated more than {MAX_AHEAD_MS} ms ahead of this isolate's clock, ignored (at_ms is milliseconds since the epoch; the rest of the document is applied): {}",
                ahead.join(", ")
            ));
        }
        let applied = Applied {
            changed,
            purged: next.purge_generation != self.current.purge_generation,
            problem: None,
            warnings,
        };
        self.known = true;
        self.current = next;
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_field() {
        let c = Control::parse(
            r#"{"mode":"passthrough","disabled_rules":["a","b"],"purge_generation":7,"request_log":"sample:0.5","shadow_sample":0.05,"note":"INC-1"}"#,
        )
        .unwrap();
        assert_eq!(c.shadow_per_million, Some(50_000));
        assert!(c.summary().contains("shadow_sample=50000/1000000"));
        assert_eq!(c.mode, Mode::Passthrough);
        assert_eq!(c.disabled_rules, vec!["a", "b"]);
        assert_eq!(c.purge_generation, 7);
        assert_eq!(
            c.request_log,
            Some(RequestLogging::Sample {
                per_million: 500_000
            })
        );
        assert_eq!(c.note.as_deref(), Some("INC-1"));
        assert_eq!(Control::parse("{}").unwrap(), Control::default());
        let c = Control::parse(
            r#"{"invalidations":[{"at_ms":1,"claim":"route=acme"},{"at_ms":2,"cell":3}]}"#,
        )
        .unwrap();
        assert_eq!(c.invalidations.len(), 2);
        assert!(c.summary().contains("invalidations=2"));
    }

    #[test]
    fn refuses_what_would_silently_do_nothing() {
        for bad in [
            r#"{"mode":"legacy"}"#,
            r#"{"purge_generation":-1}"#,
            r#"{"purge_generation":"2"}"#,
            r#"{"disabled_rules":"a"}"#,
            r#"{"disabled_rules":[""]}"#,
            r#"{"request_log":"some"}"#,
            r#"{"shadow_sample":1.5}"#,
            r#"{"shadow_sample":-0.1}"#,
            r#"{"shadow_sample":"0.1"}"#,
            r#"{"invalidations":[{"claim":"route=acme"}]}"#,
            r#"{"invalidations":{"at_ms":1,"claim":"route=acme"}}"#,
            "[]",
            "not json",
            "",
        ] {
            assert!(Control::parse(bad).is_err(), "{bad} was accepted");
        }
        let huge = format!(r#"{{"note":"{}"}}"#, "x".repeat(MAX_DOCUMENT_BYTES));
        assert!(Control::parse(&huge).unwrap_err().contains("limit"));
        let many = format!(
            r#"{{"invalidations":[{}]}}"#,
            vec![r#"{"at_ms":1,"cell":2}"#; MAX_INVALIDATIONS + 1].join(",")
        );
        assert!(Control::parse(&many)
            .unwrap_err()
            .contains("over the limit of 1000"));
    }

    #[test]
    fn unknown_fields_are_ignored_and_named_once_per_document() {
        // What a later version may write: after a rollback, passthrough
        // and the purge still apply.
        let text = r#"{"mode":"passthrough","purge_generation":2,"sampling":{"x":1},"invalidations":[{"at_ms":1,"cell":2,"why":"INC-9"}]}"#;
        let c = Control::parse(text).unwrap();
        assert_eq!(c.mode, Mode::Passthrough);
        assert_eq!(c.invalidations.len(), 1);
        assert_eq!(c.ignored_fields, ["sampling", "invalidations[0].why"]);
        let mut s = ControlState::new(1_000);
        s.begin_read(0);
        let a = s.finish_read(ReadOutcome::Text(text.into()), 0);
        assert!(a.changed && a.purged && a.problem.is_none(), "{a:?}");
        assert_eq!(a.warnings.len(), 1, "{a:?}");
        assert!(a.warnings[0].contains("ignored: sampling, invalidations[0].why"));
        assert_eq!(s.current().mode, Mode::Passthrough);
        // The same document read again: applied already, not said again.
        s.begin_read(1_000);
        let a = s.finish_read(ReadOutcome::Text(text.into()), 1_000);
        assert!(!a.changed && a.warnings.is_empty(), "{a:?}");
        // A typo is ignored too (rulesctl refuses it when writing).
        let c = Control::parse(r#"{"mdoe":"passthrough"}"#).unwrap();
        assert_eq!(
            (c.mode, c.ignored_fields),
            (Mode::Normal, vec!["mdoe".to_string()])
        );
    }

    #[test]
    fn an_invalidation_dated_ahead_is_ignored_and_the_rest_applied() {
        let now: u64 = 1_700_000_000_000;
        let doc = |at_ms: u64| {
            format!(
                r#"{{"mode":"passthrough","invalidations":[{{"at_ms":{at_ms},"cell":2}},{{"at_ms":{now},"cell":3}}]}}"#
            )
        };
        let mut s = ControlState::new(1_000);
        s.begin_read(now);
        // at_ms in microseconds: cell 2 would be uncacheable for good.
        let a = s.finish_read(ReadOutcome::Text(doc(now * 1000)), now);
        assert!(a.changed && a.problem.is_none(), "{a:?}");
        assert_eq!(s.current().mode, Mode::Passthrough, "the rest applies");
        let kept: Vec<String> = s
            .current()
            .invalidations
            .iter()
            .map(Invalidation::describe)
            .collect();
        assert_eq!(kept, ["cell=3"]);
        assert_eq!(a.warnings.len(), 1, "{a:?}");
        assert!(
            a.warnings[0].contains("cell=2 at_ms 1700000000000000"),
            "{a:?}"
        );
        s.begin_read(now + 1_000);
        let a = s.finish_read(ReadOutcome::Text(doc(now * 1000)), now + 1_000);
        assert!(!a.changed && a.warnings.is_empty(), "said once: {a:?}");
        // Within the allowed skew: applied.
        s.begin_read(now + 2_000);
        let a = s.finish_read(ReadOutcome::Text(doc(now + MAX_AHEAD_MS)), now + 2_000);
        assert!(a.changed && a.warnings.is_empty(), "{a:?}");
        assert_eq!(s.current().invalidations.len(), 2);
    }

    #[test]
    fn reads_once_per_interval() {
        let mut s = ControlState::new(30_000);
        assert!(s.due(0) && s.must_wait(0) && !s.is_known());
        s.begin_read(1_000);
        assert!(!s.due(1_001), "one read at a time");
        let applied = s.finish_read(ReadOutcome::Text(r#"{"mode":"passthrough"}"#.into()), 1_010);
        assert!(applied.changed && !applied.purged && applied.problem.is_none());
        assert_eq!(s.current().mode, Mode::Passthrough);
        assert!(!s.must_wait(1_010) && s.is_known());
        assert!(!s.due(31_009));
        assert!(s.due(31_010));
    }

    #[test]
    fn the_first_read_holds_requests_for_a_bounded_time_only() {
        let mut s = ControlState::new(30_000);
        s.begin_read(1_000);
        assert!(s.must_wait(1_000 + FIRST_READ_WAIT_MS - 1));
        assert!(
            !s.must_wait(1_000 + FIRST_READ_WAIT_MS),
            "served with what it has"
        );
        assert!(!s.is_known(), "the shared cache stays unused");
        // A read that failed tells nothing: still unknown.
        s.finish_read(ReadOutcome::Failed("KV down".into()), 1_500);
        assert!(!s.must_wait(1_500) && !s.is_known());
        s.begin_read(31_500);
        let a = s.finish_read(ReadOutcome::Text("{}".into()), 31_510);
        assert!(s.is_known() && a.changed && !a.purged, "{a:?}");
    }

    #[test]
    fn a_stuck_read_is_abandoned() {
        let mut s = ControlState::new(30_000);
        s.begin_read(0);
        assert!(!s.due(READ_TIMEOUT_MS - 1));
        assert!(s.due(READ_TIMEOUT_MS));
    }

    #[test]
    fn failures_and_bad_documents_keep_the_last_good_one() {
        let mut s = ControlState::new(1_000);
        s.begin_read(0);
        s.finish_read(
            ReadOutcome::Text(r#"{"disabled_rules":["x"],"purge_generation":2}"#.into()),
            0,
        );
        let kept = s.current().clone();
        s.begin_read(1_000);
        let a = s.finish_read(ReadOutcome::Failed("timeout".into()), 1_000);
        assert!(a.problem.unwrap().contains("timeout"));
        assert_eq!(s.current(), &kept);
        s.begin_read(2_000);
        let a = s.finish_read(ReadOutcome::Text(r#"{"mode":"off"}"#.into()), 2_000);
        assert!(a.problem.unwrap().contains("keeping the last known"));
        assert_eq!(s.current(), &kept);
        // A missing key is not "back to normal": the last known document
        // (and its generation) stays.
        s.begin_read(3_000);
        let a = s.finish_read(ReadOutcome::Absent, 3_000);
        assert!(!a.changed && !a.purged, "{a:?}");
        assert!(a.warnings[0].contains("keeping the last known document"));
        assert_eq!(s.current(), &kept);
        assert!(s.is_known());
    }

    #[test]
    fn the_generation_never_goes_down() {
        let mut s = ControlState::new(1_000);
        s.begin_read(0);
        let a = s.finish_read(ReadOutcome::Text(r#"{"purge_generation":3}"#.into()), 0);
        assert!(a.purged && a.warnings.is_empty());
        s.begin_read(1_000);
        let a = s.finish_read(
            ReadOutcome::Text(r#"{"purge_generation":1,"mode":"passthrough"}"#.into()),
            1_000,
        );
        assert!(a.changed && !a.purged, "{a:?}");
        assert!(a.warnings[0].contains("from 3 to 1: ignored"));
        assert_eq!(s.current().purge_generation, 3);
        assert_eq!(s.current().mode, Mode::Passthrough, "the rest applies");
        // `{}` (generation 0) after a purge: the generation stays too.
        s.begin_read(2_000);
        let a = s.finish_read(ReadOutcome::Text("{}".into()), 2_000);
        assert!(a.changed && !a.purged && !a.warnings.is_empty());
        assert_eq!(s.current().purge_generation, 3);
        s.begin_read(3_000);
        let a = s.finish_read(ReadOutcome::Text(r#"{"purge_generation":4}"#.into()), 3_000);
        assert!(a.purged && a.warnings.is_empty());
    }

    #[test]
    fn a_new_isolate_without_the_key_does_not_use_the_shared_cache() {
        let mut s = ControlState::new(1_000);
        s.begin_read(0);
        let a = s.finish_read(ReadOutcome::Absent, 5);
        assert!(!s.must_wait(5), "it routes");
        assert!(!s.is_known(), "but without the shared cache");
        assert!(!a.changed && a.problem.is_none());
        assert!(a.warnings[0].contains("without the shared cache"));
        assert_eq!(s.current(), &Control::default());
        s.begin_read(1_000);
        let a = s.finish_read(ReadOutcome::Text("{}".into()), 1_000);
        assert!(s.is_known() && a.changed);
    }

    #[test]
    fn a_raised_generation_is_a_purge() {
        let mut s = ControlState::new(1_000);
        s.begin_read(0);
        let a = s.finish_read(ReadOutcome::Text(r#"{"purge_generation":1}"#.into()), 0);
        assert!(a.purged);
        s.begin_read(1_000);
        let a = s.finish_read(ReadOutcome::Text(r#"{"purge_generation":1}"#.into()), 1_000);
        assert!(!a.changed && !a.purged);
    }
}
