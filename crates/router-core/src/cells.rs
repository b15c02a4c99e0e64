//! Cells as configuration (issue 16, SPEC §10): the cell list
//! (`GITLAB_CELLS`), each cell's health as this isolate sees it, the
//! scheduled probe's record, and the choice of a cell for a spread rule.
//!
//! * **The list** names every cell: id, address, registry address, session
//!   prefix and health path. Listed addresses are allowed upstreams, and a
//!   `CELL_ID` / `SESSION_PREFIX` key naming a listed cell still resolves
//!   when the Topology Service cannot answer ([`CellList::static_address`]).
//! * **Passive health**: a [`Circuit`] per listed cell, per isolate, over
//!   the caller's clock (like [`crate::guard`] for the Topology Service).
//!   `failures` failed requests (connect errors, 502, 503, 504) within
//!   `window_ms` open it for `open_ms`: requests for the cell get a 503
//!   with `Retry-After` at once. Then one trial request goes through: its
//!   outcome closes or reopens the circuit. Only failures are reported by
//!   the entry (a success costs no call), so the count is "failures within
//!   a window", not a ratio.
//! * **Active health**: the scheduled probe writes a [`HealthRecord`];
//!   each isolate applies it at most every few seconds
//!   ([`CellHealth::apply_record`]): a cell found down has its circuit
//!   opened, as if its requests had failed.
//! * **Spread**: [`CellHealth::choose`] picks a random cell among those
//!   whose circuit is closed.

use serde_json::Value;

use crate::forward::validate_address;

/// The health path probed when a cell names none (GitLab's readiness
/// check).
pub const DEFAULT_HEALTH_PATH: &str = "/-/readiness";

/// One listed cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub id: u64,
    pub address: String,
    pub registry_address: Option<String>,
    pub session_prefix: String,
    pub health_path: String,
}

/// The fields a `GITLAB_CELLS` entry may have. Read by hand from a JSON
/// value (a serde derive costs the wasm kilobytes).
const FIELDS: [&str; 5] = [
    "id",
    "address",
    "registry_address",
    "session_prefix",
    "health_path",
];

/// The cells of `GITLAB_CELLS`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellList {
    cells: Vec<Cell>,
}

impl CellList {
    /// Reads `GITLAB_CELLS` (a JSON list of `{id, address,
    /// registry_address?, session_prefix?, health_path?}`). Never fails:
    /// an entry with a problem is left out, and every problem is returned,
    /// a sentence naming the entry. [`CellList::check`] is the strict form.
    pub fn parse(json: &str) -> (CellList, Vec<String>) {
        let mut problems = Vec::new();
        let entries: Vec<Value> = match serde_json::from_str(json) {
            Ok(Value::Array(entries)) => entries,
            Ok(_) => return (CellList::default(), vec!["not a JSON list".to_string()]),
            Err(e) => return (CellList::default(), vec![format!("not JSON: {e}")]),
        };
        let mut cells: Vec<Cell> = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            match Cell::from_value(entry) {
                Err(e) => problems.push(format!("entry {}: {e}; left out", i + 1)),
                Ok(cell) => {
                    let clash = cells.iter().find_map(|c| {
                        if c.id == cell.id {
                            Some(format!("id {}", cell.id))
                        } else if c.session_prefix == cell.session_prefix {
                            Some(format!("session_prefix {:?}", cell.session_prefix))
                        } else if c.address == cell.address {
                            Some(format!("address {:?}", cell.address))
                        } else {
                            None
                        }
                    });
                    match clash {
                        Some(what) => problems.push(format!(
                            "entry {}: {what} is already listed; left out",
                            i + 1
                        )),
                        None => cells.push(cell),
                    }
                }
            }
        }
        (CellList { cells }, problems)
    }

    /// [`CellList::parse`] for build and deploy checks: any problem fails.
    pub fn check(json: &str) -> Result<CellList, Vec<String>> {
        let (list, problems) = CellList::parse(json);
        if problems.is_empty() {
            Ok(list)
        } else {
            Err(problems)
        }
    }

    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// The position of the cell whose web or registry address is `address`.
    pub fn position_of_address(&self, address: &str) -> Option<usize> {
        self.cells
            .iter()
            .position(|c| c.address == address || c.registry_address.as_deref() == Some(address))
    }

    /// The listed cell a `CELL_ID` or `SESSION_PREFIX` key names, for when
    /// the Topology Service cannot answer; `None` for other kinds.
    pub fn named_by(&self, kind: crate::ClassifyKind, value: &str) -> Option<&Cell> {
        use crate::ClassifyKind;
        match kind {
            ClassifyKind::CellId => {
                let id: u64 = value.parse().ok()?;
                self.cells.iter().find(|c| c.id == id)
            }
            ClassifyKind::SessionPrefix => self.cells.iter().find(|c| c.session_prefix == value),
            _ => None,
        }
    }

    /// The list as `GITLAB_CELLS` spells it (every field written).
    pub fn to_json(&self) -> String {
        let cells: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let mut v = serde_json::json!({
                    "id": c.id,
                    "address": c.address,
                    "session_prefix": c.session_prefix,
                    "health_path": c.health_path,
                });
                if let Some(r) = &c.registry_address {
                    v["registry_address"] = Value::String(r.clone());
                }
                v
            })
            .collect();
        Value::Array(cells).to_string()
    }
}

impl Cell {
    fn from_value(value: Value) -> Result<Cell, String> {
        let Value::Object(fields) = value else {
            return Err("not an object".to_string());
        };
        if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(format!("unknown field {unknown:?}"));
        }
        let text = |name: &str| -> Result<Option<String>, String> {
            match fields.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("{name} {other}: not a string")),
            }
        };
        let raw_id = fields.get("id").ok_or("missing field id")?;
        let id = match raw_id {
            Value::Number(n) => n.as_u64(),
            Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok()
            }
            _ => None,
        }
        .ok_or_else(|| format!("id {raw_id}: not a non-negative integer"))?;
        let address =
            text("address")?.ok_or_else(|| format!("cell {id}: missing field address"))?;
        validate_address(&address).map_err(|e| format!("cell {id}: address: {e}"))?;
        let registry_address = text("registry_address")?;
        if let Some(registry) = &registry_address {
            validate_address(registry).map_err(|e| format!("cell {id}: registry_address: {e}"))?;
        }
        let session_prefix = text("session_prefix")?.unwrap_or_else(|| format!("cell-{id}"));
        if session_prefix.is_empty()
            || !session_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "cell {id}: session_prefix {session_prefix:?}: want letters, digits, - and _"
            ));
        }
        let health_path = text("health_path")?.unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_string());
        if !health_path.starts_with('/')
            || health_path.starts_with("//")
            || health_path
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b'#')
        {
            return Err(format!(
                "cell {id}: health_path {health_path:?}: want an absolute path (/-/readiness)"
            ));
        }
        Ok(Cell {
            id,
            address,
            registry_address,
            session_prefix,
            health_path,
        })
    }
}

/// How the per-cell circuits are set. `failures: 0` turns them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitPolicy {
    /// Failed requests within `window_ms` that open a circuit.
    pub failures: u32,
    pub window_ms: u32,
    /// How long a circuit stays open before a trial request.
    pub open_ms: u32,
    /// How long a trial request may take before another one is let
    /// through (its request may have been cancelled and never report).
    pub trial_ms: u32,
}

impl Default for CircuitPolicy {
    fn default() -> Self {
        CircuitPolicy {
            failures: 5,
            window_ms: 10_000,
            open_ms: 10_000,
            trial_ms: 30_000,
        }
    }
}

/// What a circuit says about one request for its cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Forward,
    /// The one trial request after a cool-down: its outcome, whatever it
    /// is, must be reported.
    Trial,
    /// Open: answer 503 now, with this `Retry-After`.
    Refused {
        retry_after_secs: u32,
    },
}

/// Why a circuit opened (for the log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenedBy {
    Requests,
    Probe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32, window_start_ms: u64 },
    Open { until_ms: u64, by: OpenedBy },
    Trial { until_ms: u64, by: OpenedBy },
}

/// One cell's circuit; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    state: State,
}

impl Default for Circuit {
    fn default() -> Self {
        Circuit {
            state: State::Closed {
                failures: 0,
                window_start_ms: 0,
            },
        }
    }
}

fn retry_after(until_ms: u64, now_ms: u64) -> u32 {
    let secs = until_ms.saturating_sub(now_ms).div_ceil(1000);
    secs.clamp(1, 3600) as u32
}

impl Circuit {
    pub fn admit(&mut self, policy: &CircuitPolicy, now_ms: u64) -> Admission {
        match self.state {
            State::Closed { .. } => Admission::Forward,
            State::Open { until_ms, by } | State::Trial { until_ms, by } if now_ms >= until_ms => {
                self.state = State::Trial {
                    until_ms: now_ms + u64::from(policy.trial_ms),
                    by,
                };
                Admission::Trial
            }
            State::Open { until_ms, .. } => Admission::Refused {
                retry_after_secs: retry_after(until_ms, now_ms),
            },
            // A trial is out: the others wait about one cool-down.
            State::Trial { .. } => Admission::Refused {
                retry_after_secs: retry_after(now_ms + u64::from(policy.open_ms), now_ms),
            },
        }
    }

    /// Records a request's outcome: `failed` for a connect error, 502, 503
    /// or 504. Only failures and trial outcomes are reported.
    pub fn record(&mut self, policy: &CircuitPolicy, failed: bool, now_ms: u64) {
        if policy.failures == 0 {
            return;
        }
        self.state = match (self.state, failed) {
            (State::Trial { .. }, false) | (State::Open { .. }, false) => State::Closed {
                failures: 0,
                window_start_ms: now_ms,
            },
            (closed @ State::Closed { .. }, false) => closed,
            (State::Trial { .. }, true) => State::Open {
                until_ms: now_ms + u64::from(policy.open_ms),
                by: OpenedBy::Requests,
            },
            // A late failure of a request sent before the circuit opened.
            (open @ State::Open { .. }, true) => open,
            (
                State::Closed {
                    failures,
                    window_start_ms,
                },
                true,
            ) => {
                let (failures, window_start_ms) =
                    if now_ms >= window_start_ms + u64::from(policy.window_ms) {
                        (1, now_ms)
                    } else {
                        (failures + 1, window_start_ms)
                    };
                if failures >= policy.failures {
                    State::Open {
                        until_ms: now_ms + u64::from(policy.open_ms),
                        by: OpenedBy::Requests,
                    }
                } else {
                    State::Closed {
                        failures,
                        window_start_ms,
                    }
                }
            }
        };
    }

    /// The probe found the cell down: open (unless already open or in
    /// trial, whose own outcome decides).
    pub fn probe_down(&mut self, policy: &CircuitPolicy, now_ms: u64) {
        if matches!(self.state, State::Closed { .. }) {
            self.state = State::Open {
                until_ms: now_ms + u64::from(policy.open_ms),
                by: OpenedBy::Probe,
            };
        }
    }

    /// Whether requests go to the cell now (closed).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed { .. })
    }

    /// Whether a request for the cell would be forwarded at `now_ms`:
    /// closed, or open with its cool-down over (the request is then the
    /// trial). Spreading picks among these, so a cell that only gets
    /// spread traffic still recovers.
    pub fn is_available(&self, now_ms: u64) -> bool {
        match self.state {
            State::Closed { .. } => true,
            State::Open { until_ms, .. } | State::Trial { until_ms, .. } => now_ms >= until_ms,
        }
    }

    /// Why the circuit is open, when it is.
    pub fn opened_by(&self) -> Option<OpenedBy> {
        match self.state {
            State::Closed { .. } => None,
            State::Open { by, .. } | State::Trial { by, .. } => Some(by),
        }
    }
}

/// Whether an upstream outcome counts as a failure of the cell: a fetch
/// that threw (`status` 0) or a 502, 503 or 504. A request that may stay
/// open for long (a WebSocket, a long poll: `long_lived`) and threw after
/// [`LONG_LIVED_CONNECT_MS`] is a closed stream, not a dead cell.
pub fn is_failure(status: u16, elapsed_ms: u64, long_lived: bool) -> bool {
    match status {
        0 => !(long_lived && elapsed_ms >= LONG_LIVED_CONNECT_MS),
        502..=504 => true,
        _ => false,
    }
}

/// See [`is_failure`]: a long-lived request failing sooner than this failed
/// to connect.
pub const LONG_LIVED_CONNECT_MS: u64 = 5_000;

/// Requests that may legitimately stay open for a long time: WebSocket
/// upgrades and GitLab's long polls (the runner job request, Workhorse's
/// long polling of `/api/v4/jobs/request`).
pub fn is_long_lived(path: &str, upgrade: Option<&str>) -> bool {
    upgrade.is_some_and(|u| !u.is_empty()) || path == "/api/v4/jobs/request"
}

/// One cell's result in a probe run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    pub id: u64,
    pub up: bool,
    /// The health URL's status; 0 when the probe got no answer.
    pub status: u16,
    pub ms: u64,
    pub error: Option<String>,
}

/// What the scheduled probe found, as the Cache API keeps it for every
/// isolate of the colo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthRecord {
    /// Milliseconds since the Unix epoch.
    pub checked_at_ms: u64,
    pub cells: Vec<ProbeResult>,
}

impl HealthRecord {
    /// The record as the Cache API keeps it: `cell-health 1 <checked at>`,
    /// then a line per cell, `<id> <up 1|0> <status> <ms> <error>` (text,
    /// not JSON: a serde derive costs the wasm kilobytes).
    pub fn encode(&self) -> String {
        let mut out = format!("cell-health 1 {}\n", self.checked_at_ms);
        for c in &self.cells {
            let error = c.error.as_deref().unwrap_or("").replace(['\n', '\r'], " ");
            out.push_str(&format!(
                "{} {} {} {} {error}\n",
                c.id,
                u8::from(c.up),
                c.status,
                c.ms
            ));
        }
        out
    }

    pub fn decode(text: &str) -> Option<HealthRecord> {
        let mut lines = text.lines();
        let checked_at_ms = lines.next()?.strip_prefix("cell-health 1 ")?.parse().ok()?;
        let mut cells = Vec::new();
        for line in lines {
            let mut parts = line.splitn(5, ' ');
            let id = parts.next()?.parse().ok()?;
            let up = match parts.next()? {
                "1" => true,
                "0" => false,
                _ => return None,
            };
            let status = parts.next()?.parse().ok()?;
            let ms = parts.next()?.parse().ok()?;
            let error = parts.next().filter(|e| !e.is_empty()).map(str::to_string);
            cells.push(ProbeResult {
                id,
                up,
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

    /// Whether a probe answer means up: a 2xx (a readiness check answers
    /// 503 when the cell cannot serve; a 3xx or 404 means a wrong path,
    /// which must not pass for healthy either).
    pub fn is_up(status: u16) -> bool {
        (200..300).contains(&status)
    }

    /// The probe run's summary, one log line (no secrets: ids, addresses,
    /// statuses).
    pub fn summary_line(&self, list: &CellList) -> String {
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        let down: Vec<String> = self
            .cells
            .iter()
            .filter(|c| !c.up)
            .map(|c| c.id.to_string())
            .collect();
        let cells: Vec<String> = self
            .cells
            .iter()
            .map(|r| {
                let address = list
                    .cells()
                    .iter()
                    .find(|c| c.id == r.id)
                    .map_or("", |c| c.address.as_str());
                let error = r
                    .error
                    .as_deref()
                    .map(|e| format!(r#","error":{}"#, quote(e)))
                    .unwrap_or_default();
                format!(
                    r#"{{"id":{},"address":{},"up":{},"status":{},"ms":{}{error}}}"#,
                    r.id,
                    quote(address),
                    r.up,
                    r.status,
                    r.ms
                )
            })
            .collect();
        format!(
            r#"{{"level":"{}","scope":"cell-health","checked_at_ms":{},"up":{},"down":[{}],"cells":[{}]}}"#,
            if down.is_empty() { "info" } else { "warn" },
            self.checked_at_ms,
            self.cells.len() - down.len(),
            down.join(","),
            cells.join(",")
        )
    }
}

/// Every listed cell's circuit, in this isolate.
#[derive(Debug, Clone)]
pub struct CellHealth {
    policy: CircuitPolicy,
    circuits: Vec<Circuit>,
    /// The probe record applied last (its `checked_at_ms`), so one record
    /// opens a circuit once.
    applied_ms: u64,
}

impl CellHealth {
    pub fn new(list: &CellList, policy: CircuitPolicy) -> CellHealth {
        CellHealth {
            policy,
            circuits: vec![Circuit::default(); list.len()],
            applied_ms: 0,
        }
    }

    pub fn policy(&self) -> &CircuitPolicy {
        &self.policy
    }

    /// The admission of a request for cell `i`; `now_ms` is asked only
    /// when its circuit is not closed (the usual case costs no clock read).
    pub fn admit(&mut self, i: usize, now_ms: impl FnOnce() -> u64) -> Admission {
        if self.policy.failures == 0 {
            return Admission::Forward;
        }
        match self.circuits.get_mut(i) {
            Some(c) if !c.is_closed() => c.admit(&self.policy, now_ms()),
            _ => Admission::Forward,
        }
    }

    pub fn record(&mut self, i: usize, failed: bool, now_ms: u64) {
        if let Some(c) = self.circuits.get_mut(i) {
            c.record(&self.policy, failed, now_ms);
        }
    }

    pub fn circuit(&self, i: usize) -> Option<&Circuit> {
        self.circuits.get(i)
    }

    /// Applies a probe record (ids matched against `list`): each cell it
    /// found down has its circuit opened. A record older than `max_age_ms`
    /// or applied before is ignored. Returns the cells it opened.
    pub fn apply_record(
        &mut self,
        list: &CellList,
        record: &HealthRecord,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Vec<u64> {
        if self.policy.failures == 0
            || record.checked_at_ms <= self.applied_ms
            || now_ms.saturating_sub(record.checked_at_ms) > max_age_ms
        {
            return Vec::new();
        }
        self.applied_ms = record.checked_at_ms;
        let mut opened = Vec::new();
        for result in record.cells.iter().filter(|r| !r.up) {
            if let Some(i) = list.cells().iter().position(|c| c.id == result.id) {
                if self.circuits[i].is_closed() {
                    opened.push(result.id);
                }
                self.circuits[i].probe_down(&self.policy, now_ms);
            }
        }
        opened
    }

    /// A cell for a spread rule: uniformly among the available cells
    /// ([`Circuit::is_available`]; `random` uniform in [0, 1)); `None` when
    /// none is.
    pub fn choose(&self, random: f64, now_ms: u64) -> Option<usize> {
        let available = |c: &&Circuit| self.policy.failures == 0 || c.is_available(now_ms);
        let count = self.circuits.iter().filter(available).count();
        if count == 0 {
            return None;
        }
        let pick = ((random.clamp(0.0, 1.0) * count as f64) as usize).min(count - 1);
        self.circuits
            .iter()
            .enumerate()
            .filter(|(_, c)| available(c))
            .nth(pick)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClassifyKind;

    const LIST: &str = r#"[
      {"id": 1, "address": "legacy.example:8080", "registry_address": "registry.example", "session_prefix": "cell-1", "health_path": "/-/readiness"},
      {"id": "2", "address": "cell2.example"},
      {"id": 3, "address": "cell3.example", "health_path": "/-/health"}
    ]"#;

    fn list() -> CellList {
        CellList::check(LIST).expect("valid")
    }

    #[test]
    fn a_list_is_read_with_defaults() {
        let l = list();
        assert_eq!(l.len(), 3);
        assert_eq!(l.cells()[1].session_prefix, "cell-2");
        assert_eq!(l.cells()[1].health_path, DEFAULT_HEALTH_PATH);
        assert_eq!(l.cells()[2].health_path, "/-/health");
        assert_eq!(l.position_of_address("registry.example"), Some(0));
        assert_eq!(l.position_of_address("cell3.example"), Some(2));
        assert_eq!(l.position_of_address("elsewhere"), None);
        // It reads back as it is written.
        assert_eq!(CellList::check(&l.to_json()), Ok(l));
    }

    #[test]
    fn bad_entries_are_left_out_each_with_a_problem() {
        let (l, problems) = CellList::parse(
            r#"[
              {"id": 1, "address": "ok.example"},
              {"id": -1, "address": "a.example"},
              {"id": 2, "address": "https://b.example/"},
              {"id": 3, "address": "c.example", "registry_address": "x y"},
              {"id": 4, "address": "d.example", "session_prefix": "cell 4"},
              {"id": 5, "address": "e.example", "health_path": "health"},
              {"id": 1, "address": "f.example"},
              {"id": 6, "address": "ok.example"},
              {"id": 7, "address": "g.example", "session_prefix": "cell-1"},
              {"id": 8, "address": "h.example", "weight": 3},
              {"address": "i.example"}
            ]"#,
        );
        assert_eq!(l.len(), 1, "{problems:#?}");
        assert_eq!(problems.len(), 10, "{problems:#?}");
        assert!(problems[0].starts_with("entry 2: id -1"), "{problems:?}");
        assert!(
            problems[5].contains("id 1 is already listed"),
            "{problems:?}"
        );
        assert!(problems[8].contains("unknown field"), "{problems:?}");
        for bad in ["", "{}", "[1]", "nope"] {
            assert!(CellList::check(bad).is_err(), "{bad:?}");
        }
        assert_eq!(CellList::check("[]"), Ok(CellList::default()));
    }

    #[test]
    fn keys_name_listed_cells() {
        let l = list();
        let id = |kind, v| l.named_by(kind, v).map(|c| c.id);
        assert_eq!(id(ClassifyKind::CellId, "2"), Some(2));
        assert_eq!(id(ClassifyKind::CellId, "9"), None);
        assert_eq!(id(ClassifyKind::CellId, "x"), None);
        assert_eq!(id(ClassifyKind::SessionPrefix, "cell-3"), Some(3));
        assert_eq!(id(ClassifyKind::SessionPrefix, "cell-9"), None);
        assert_eq!(id(ClassifyKind::FirstCell, "cell-3"), None);
    }

    fn policy() -> CircuitPolicy {
        CircuitPolicy {
            failures: 3,
            window_ms: 1_000,
            open_ms: 5_000,
            trial_ms: 2_000,
        }
    }

    #[test]
    fn failures_within_the_window_open_the_circuit_then_one_trial_decides() {
        let p = policy();
        let mut c = Circuit::default();
        c.record(&p, true, 100);
        c.record(&p, true, 200);
        assert_eq!(c.admit(&p, 250), Admission::Forward);
        c.record(&p, true, 300);
        assert_eq!(c.opened_by(), Some(OpenedBy::Requests));
        assert_eq!(
            c.admit(&p, 301),
            Admission::Refused {
                retry_after_secs: 5
            }
        );
        assert_eq!(
            c.admit(&p, 4_500),
            Admission::Refused {
                retry_after_secs: 1
            }
        );
        // Cool-down over: one trial, the others still refused.
        assert_eq!(c.admit(&p, 5_300), Admission::Trial);
        assert!(matches!(c.admit(&p, 5_301), Admission::Refused { .. }));
        c.record(&p, true, 5_400);
        assert!(matches!(c.admit(&p, 5_500), Admission::Refused { .. }));
        assert_eq!(c.admit(&p, 10_400), Admission::Trial);
        c.record(&p, false, 10_450);
        assert!(c.is_closed());
        assert_eq!(c.admit(&p, 10_500), Admission::Forward);
    }

    #[test]
    fn failures_spread_over_more_than_the_window_never_open_it() {
        let p = policy();
        let mut c = Circuit::default();
        for t in 0..20 {
            c.record(&p, true, t * 600);
            assert!(c.is_closed(), "at {}", t * 600);
        }
    }

    #[test]
    fn a_trial_that_never_reports_is_replaced() {
        let p = policy();
        let mut c = Circuit::default();
        for _ in 0..3 {
            c.record(&p, true, 0);
        }
        assert_eq!(c.admit(&p, 5_000), Admission::Trial);
        assert!(matches!(c.admit(&p, 6_999), Admission::Refused { .. }));
        assert_eq!(c.admit(&p, 7_000), Admission::Trial);
    }

    #[test]
    fn what_counts_as_a_failure() {
        assert!(is_failure(0, 10, false));
        assert!(is_failure(0, 60_000, false));
        assert!(is_failure(0, 10, true), "a WebSocket that cannot connect");
        assert!(!is_failure(0, 60_000, true), "a long poll that ended");
        for s in [502, 503, 504] {
            assert!(is_failure(s, 1, false));
        }
        for s in [200, 301, 404, 429, 499, 500, 501, 505] {
            assert!(!is_failure(s, 1, false), "{s}");
        }
        assert!(is_long_lived("/-/cable", Some("websocket")));
        assert!(is_long_lived("/api/v4/jobs/request", None));
        assert!(!is_long_lived("/api/v4/jobs/request/x", None));
        assert!(!is_long_lived("/users/sign_in", Some("")));
    }

    fn record(at: u64, down: &[u64]) -> HealthRecord {
        HealthRecord {
            checked_at_ms: at,
            cells: (1..=3)
                .map(|id| ProbeResult {
                    id,
                    up: !down.contains(&id),
                    status: if down.contains(&id) { 0 } else { 200 },
                    ms: 3,
                    error: down.contains(&id).then(|| "connection refused".into()),
                })
                .collect(),
        }
    }

    #[test]
    fn a_probe_record_opens_the_circuits_of_cells_found_down_once() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        assert_eq!(h.apply_record(&l, &record(1_000, &[3]), 1_500, 60_000), [3]);
        assert_eq!(h.circuit(2).unwrap().opened_by(), Some(OpenedBy::Probe));
        assert!(matches!(h.admit(2, || 1_600), Admission::Refused { .. }));
        assert_eq!(h.admit(1, || 1_600), Admission::Forward);
        // The same record again does nothing; the cell recovers by a trial.
        assert!(h
            .apply_record(&l, &record(1_000, &[3]), 6_600, 60_000)
            .is_empty());
        assert_eq!(h.admit(2, || 6_600), Admission::Trial);
        h.record(2, false, 6_700);
        assert_eq!(h.admit(2, || 6_800), Admission::Forward);
        // A record too old is not believed.
        assert!(h
            .apply_record(&l, &record(7_000, &[2]), 100_000, 60_000)
            .is_empty());
        assert!(h.circuit(1).unwrap().is_closed());
        // It reads back as written; the summary names the cells down.
        let r = record(9, &[2, 3]);
        assert_eq!(HealthRecord::decode(&r.encode()), Some(r.clone()));
        for bad in [
            "",
            "cell-health 1 x\n",
            "cell-health 1 5\n2 2 0 1 \n",
            "cell-health 1 5\n2 1\n",
        ] {
            assert_eq!(HealthRecord::decode(bad), None, "{bad:?}");
        }
        let line: Value = serde_json::from_str(&r.summary_line(&l)).unwrap();
        assert_eq!(line["down"], serde_json::json!([2, 3]));
        assert_eq!(line["up"], 1);
        assert_eq!(line["cells"][2]["address"], "cell3.example");
        assert!(HealthRecord::is_up(204) && !HealthRecord::is_up(503) && !HealthRecord::is_up(302));
    }

    #[test]
    fn circuits_off_admit_everything() {
        let l = list();
        let mut h = CellHealth::new(
            &l,
            CircuitPolicy {
                failures: 0,
                ..policy()
            },
        );
        for _ in 0..10 {
            h.record(1, true, 0);
        }
        assert_eq!(h.admit(1, || 1), Admission::Forward);
        assert!(h.apply_record(&l, &record(5, &[1]), 6, 60_000).is_empty());
    }

    #[test]
    fn spread_picks_uniformly_among_closed_circuits() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        let mut counts = [0u32; 3];
        for k in 0..3_000 {
            counts[h.choose(f64::from(k) / 3_000.0, 10).unwrap()] += 1;
        }
        assert_eq!(counts, [1_000, 1_000, 1_000]);
        for _ in 0..3 {
            h.record(1, true, 0);
        }
        let mut counts = [0u32; 3];
        for k in 0..3_000 {
            counts[h.choose(f64::from(k) / 3_000.0, 10).unwrap()] += 1;
        }
        assert_eq!(counts, [1_500, 0, 1_500]);
        assert_eq!(h.choose(0.999_999_9, 10), Some(2));
        for i in [0, 2] {
            for _ in 0..3 {
                h.record(i, true, 0);
            }
        }
        assert_eq!(h.choose(0.5, 10), None);
        // Cool-down over: the cells are candidates again (as trials).
        assert_eq!(h.choose(0.5, 5_000), Some(1));
    }
}
