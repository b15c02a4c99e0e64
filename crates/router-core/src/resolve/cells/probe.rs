//! Active health: what the scheduled probe (the Cron Trigger) found, as
//! one record every isolate of the deployment reads from the
//! deployment's own KV namespace (docs/operations.md, "Cell health").
//!
//! A cell is down only on a transport failure or a 5xx from its health
//! path. Any other answer (a 3xx, a 4xx: GitLab's `/-/readiness` answers
//! 404 to an address outside its monitoring allowlist) says the probe is
//! misconfigured, not that the cell is down: it is logged as an error and
//! marks nothing.

use serde_json::Value;

use super::CellList;

/// What one probe answer says of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A 2xx.
    Up,
    /// No answer, or a 5xx (a readiness check answers 503 when the cell
    /// cannot serve).
    Down,
    /// Any other answer: a wrong path, or a cell that does not let the
    /// probe in (GitLab's monitoring allowlist). Never marks the cell down.
    Misconfigured,
}

impl Verdict {
    /// The verdict for a probe that got `status` (0: no answer).
    pub fn of(status: u16) -> Verdict {
        match status {
            0 | 500..=599 => Verdict::Down,
            200..=299 => Verdict::Up,
            _ => Verdict::Misconfigured,
        }
    }

    fn letter(self) -> char {
        match self {
            Verdict::Up => 'u',
            Verdict::Down => 'd',
            Verdict::Misconfigured => 'm',
        }
    }

    fn from_letter(text: &str) -> Option<Verdict> {
        match text {
            "u" => Some(Verdict::Up),
            "d" => Some(Verdict::Down),
            "m" => Some(Verdict::Misconfigured),
            _ => None,
        }
    }
}

/// One cell's result in a probe run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub id: u64,
    /// The health URL's status; 0 when the probe got no answer.
    pub status: u16,
    pub ms: u64,
    pub error: Option<String>,
}

impl ProbeResult {
    pub fn verdict(&self) -> Verdict {
        Verdict::of(self.status)
    }
}

/// What the scheduled probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthRecord {
    /// Milliseconds since the Unix epoch.
    pub checked_at_ms: u64,
    pub cells: Vec<ProbeResult>,
}

/// How far ahead of an isolate's clock a record's time may be (clock skew
/// between the cron's machine and the reader's); a record further ahead
/// is refused.
pub const MAX_CLOCK_SKEW_MS: u64 = 60_000;

/// The record's key in the deployment's KV namespace (`ROUTER_CONTROL`),
/// where the scheduled probe writes it and isolates and `rulesctl health
/// show` read it.
pub const HEALTH_KEY: &str = "cell-health";

/// The record's first line; a record without it is refused.
const HEADER: &str = "cell-health 2 ";

impl HealthRecord {
    /// The record as KV keeps it: `cell-health 2 <checked at>`, then a line
    /// per cell, `<id> <verdict u|d|m> <status> <ms> <error>` (text, not
    /// JSON: a serde derive costs the wasm kilobytes).
    pub fn encode(&self) -> String {
        let mut out = format!("{HEADER}{}\n", self.checked_at_ms);
        for c in &self.cells {
            let error = c.error.as_deref().unwrap_or("").replace(['\n', '\r'], " ");
            out.push_str(&format!(
                "{} {} {} {} {error}\n",
                c.id,
                c.verdict().letter(),
                c.status,
                c.ms
            ));
        }
        out
    }

    /// Reads [`HealthRecord::encode`]'s form; `None` for anything else,
    /// including a record whose verdicts do not follow from its statuses.
    pub fn decode(text: &str) -> Option<HealthRecord> {
        let mut lines = text.lines();
        let checked_at_ms = lines.next()?.strip_prefix(HEADER)?.parse().ok()?;
        let mut cells = Vec::new();
        for line in lines {
            let mut parts = line.splitn(5, ' ');
            let id = parts.next()?.parse().ok()?;
            let verdict = Verdict::from_letter(parts.next()?)?;
            let status = parts.next()?.parse().ok()?;
            let ms = parts.next()?.parse().ok()?;
            let error = parts.next().filter(|e| !e.is_empty()).map(str::to_string);
            if Verdict::of(status) != verdict {
                return None;
            }
            cells.push(ProbeResult {
                id,
                status,
                ms,
                error,
            });
        }
        Some(HealthRecord {
            checked_at_ms,
            cells,
        })
    }

    /// Whether an isolate at `now_ms` may apply the record: not older than
    /// `max_age_ms` (the cron stopped) and not from the future.
    pub fn is_current(&self, now_ms: u64, max_age_ms: u64) -> bool {
        self.checked_at_ms <= now_ms.saturating_add(MAX_CLOCK_SKEW_MS)
            && now_ms.saturating_sub(self.checked_at_ms) <= max_age_ms
    }

    /// The ids of the cells with this verdict.
    pub fn ids(&self, verdict: Verdict) -> Vec<u64> {
        self.cells
            .iter()
            .filter(|c| c.verdict() == verdict)
            .map(|c| c.id)
            .collect()
    }

    /// The probe run's summary, one log line (no secrets: ids, addresses,
    /// statuses). An `error` line when a cell's answer says the probe is
    /// misconfigured (once per run), `warn` when a cell is down.
    pub fn summary_line(&self, list: &CellList) -> String {
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        let join = |ids: Vec<u64>| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let down = self.ids(Verdict::Down);
        let misconfigured = self.ids(Verdict::Misconfigured);
        let cells: Vec<String> = self
            .cells
            .iter()
            .map(|r| {
                let address = list.by_id(r.id).map_or("", |c| c.address.as_str());
                let error = r
                    .error
                    .as_deref()
                    .map(|e| format!(r#","error":{}"#, quote(e)))
                    .unwrap_or_default();
                format!(
                    r#"{{"id":{},"address":{},"up":{},"status":{},"ms":{}{error}}}"#,
                    r.id,
                    quote(address),
                    r.verdict() == Verdict::Up,
                    r.status,
                    r.ms
                )
            })
            .collect();
        let (level, message) = if !misconfigured.is_empty() {
            (
                "error",
                format!(
                    r#","message":"the health probe is misconfigured for cells [{}]: their health path answered neither 2xx nor 5xx (GitLab answers 404 to an address outside its monitoring allowlist); they are not marked down (docs/operations.md, cell health)""#,
                    join(misconfigured.clone())
                ),
            )
        } else if !down.is_empty() {
            ("warn", String::new())
        } else {
            ("info", String::new())
        };
        format!(
            r#"{{"level":"{level}","scope":"cell-health","checked_at_ms":{},"up":{},"down":[{}],"misconfigured":[{}]{message},"cells":[{}]}}"#,
            self.checked_at_ms,
            self.ids(Verdict::Up).len(),
            join(down),
            join(misconfigured),
            cells.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::record;
    use super::*;

    fn list() -> CellList {
        CellList::check(
            r#"[{"id": 1, "address": "a.example"}, {"id": 2, "address": "b.example"},
                {"id": 3, "address": "c.example"}]"#,
        )
        .unwrap()
    }

    #[test]
    fn down_is_a_transport_failure_or_a_5xx_only() {
        for s in [0, 500, 502, 503, 504] {
            assert_eq!(Verdict::of(s), Verdict::Down, "{s}");
        }
        for s in [200, 204] {
            assert_eq!(Verdict::of(s), Verdict::Up, "{s}");
        }
        for s in [301, 302, 401, 403, 404, 429] {
            assert_eq!(Verdict::of(s), Verdict::Misconfigured, "{s}");
        }
    }

    #[test]
    fn a_record_reads_back_and_refuses_anything_else() {
        let r = record(9, [200, 0, 404]);
        assert_eq!(HealthRecord::decode(&r.encode()), Some(r.clone()));
        for bad in [
            "",
            "cell-health 1 5\n2 1 0 1 \n",
            "cell-health 2 x\n",
            "cell-health 2 5\n2 u 0 1 \n",
            "cell-health 2 5\n2 d 200 1 \n",
            "cell-health 2 5\n2 q 0 1 \n",
            "cell-health 2 5\n2 u\n",
        ] {
            assert_eq!(HealthRecord::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn old_and_future_records_are_not_current() {
        let r = record(100_000, [200, 200, 200]);
        assert!(r.is_current(100_000, 60_000));
        assert!(r.is_current(160_000, 60_000));
        assert!(!r.is_current(160_001, 60_000), "too old");
        assert!(r.is_current(100_000 - MAX_CLOCK_SKEW_MS, 60_000), "skew");
        assert!(
            !r.is_current(100_000 - MAX_CLOCK_SKEW_MS - 1, 60_000),
            "from the future"
        );
        let ten_years = record(100_000 + 315_360_000_000, [0, 0, 0]);
        assert!(!ten_years.is_current(100_000, 60_000));
    }

    #[test]
    fn the_summary_names_cells_down_and_a_misconfigured_probe() {
        let l = list();
        let line: Value = serde_json::from_str(&record(9, [200, 0, 404]).summary_line(&l)).unwrap();
        assert_eq!(line["level"], "error");
        assert_eq!(line["down"], serde_json::json!([2]));
        assert_eq!(line["misconfigured"], serde_json::json!([3]));
        assert!(line["message"].as_str().unwrap().contains("allowlist"));
        assert_eq!(line["up"], 1);
        assert_eq!(line["cells"][2]["address"], "c.example");
        let line: Value =
            serde_json::from_str(&record(9, [200, 503, 200]).summary_line(&l)).unwrap();
        assert_eq!(line["level"], "warn");
        let line: Value =
            serde_json::from_str(&record(9, [200, 200, 200]).summary_line(&l)).unwrap();
        assert_eq!(line["level"], "info");
    }
}
