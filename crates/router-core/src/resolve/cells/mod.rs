//! Cells as configuration (SPEC §10): the cell list (`GITLAB_CELLS`),
//! each upstream address's health as this isolate sees it, the scheduled
//! probe's record, and the choice of a cell for a spread rule.
//!
//! * **The list** ([`CellList`], here) names every cell: id, address,
//!   registry address, session prefix and health path. Listed addresses
//!   are allowed upstreams, and a `CELL_ID` / `SESSION_PREFIX` key naming
//!   a listed cell still resolves when the Topology Service cannot answer
//!   ([`CellList::named_by`]).
//! * **Passive health** ([`circuit`]): a circuit per address that only the
//!   cell's own failure opens.
//! * **Active health** ([`probe`]): the scheduled probe's record, which
//!   opens the circuit of a cell it found down.
//! * [`health`]: every address's circuit in one isolate, and the spread.

pub mod circuit;
pub mod health;
pub mod probe;

pub use circuit::{Admission, Change, Circuit, CircuitPolicy, OpenedBy, Outcome};
pub use health::{circuit_index, Address, CellHealth};
pub use probe::{HealthRecord, ProbeResult, Verdict, HEALTH_KEY};

use std::collections::HashMap;

use serde_json::Value;

use crate::address::validate_address;

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

/// The cells of `GITLAB_CELLS`, in the order given, with indexes by id,
/// session prefix and address: a lookup (one per forwarded request) costs
/// the same for the 1,000th cell as for the first, and reading a list of
/// `n` cells is `O(n)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellList {
    cells: Vec<Cell>,
    by_id: HashMap<u64, usize>,
    by_prefix: HashMap<String, usize>,
    /// Web and registry addresses, to their circuit ([`circuit_index`]).
    by_address: HashMap<String, usize>,
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
        let mut list = CellList::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            match Cell::from_value(entry) {
                Err(e) => problems.push(format!("entry {}: {e}; left out", i + 1)),
                Ok(cell) => match list.clash(&cell) {
                    Some(what) => problems.push(format!(
                        "entry {}: {what} is already listed; left out",
                        i + 1
                    )),
                    None => list.push(cell),
                },
            }
        }
        (list, problems)
    }

    /// Room for `n` cells, so reading a list never grows its indexes.
    fn with_capacity(n: usize) -> CellList {
        CellList {
            cells: Vec::with_capacity(n),
            by_id: HashMap::with_capacity(n),
            by_prefix: HashMap::with_capacity(n),
            by_address: HashMap::with_capacity(n),
        }
    }

    /// What of `cell` a listed cell already has, if anything.
    fn clash(&self, cell: &Cell) -> Option<String> {
        if self.by_id.contains_key(&cell.id) {
            Some(format!("id {}", cell.id))
        } else if self.by_prefix.contains_key(&cell.session_prefix) {
            Some(format!("session_prefix {:?}", cell.session_prefix))
        } else if self.by_address.contains_key(&cell.address) {
            Some(format!("address {:?}", cell.address))
        } else {
            None
        }
    }

    fn push(&mut self, cell: Cell) {
        let i = self.cells.len();
        self.by_id.insert(cell.id, i);
        self.by_prefix.insert(cell.session_prefix.clone(), i);
        // A registry address that is also a web address: the web one's
        // circuit (as the scan in list order found it).
        self.by_address
            .entry(cell.address.clone())
            .or_insert(circuit_index(i, Address::Web));
        if let Some(registry) = &cell.registry_address {
            self.by_address
                .entry(registry.clone())
                .or_insert(circuit_index(i, Address::Registry));
        }
        self.cells.push(cell);
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
        self.circuit_of_address(address)
            .map(health::cell_of_circuit)
    }

    /// The circuit ([`circuit_index`]) of the listed address `address`: a
    /// cell's web address, else its registry address.
    pub fn circuit_of_address(&self, address: &str) -> Option<usize> {
        self.by_address.get(address).copied()
    }

    /// The position of the cell with id `id`.
    pub fn position_of_id(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The cell with id `id`.
    pub fn by_id(&self, id: u64) -> Option<&Cell> {
        self.position_of_id(id).and_then(|i| self.cells.get(i))
    }

    /// The listed cell a `CELL_ID` or `SESSION_PREFIX` key names, for when
    /// the Topology Service cannot answer; `None` for other kinds.
    pub fn named_by(&self, kind: crate::ClassifyKind, value: &str) -> Option<&Cell> {
        use crate::ClassifyKind;
        match kind {
            ClassifyKind::CellId => {
                let id: u64 = value.parse().ok()?;
                self.by_id(id)
            }
            ClassifyKind::SessionPrefix => {
                self.by_prefix.get(value).and_then(|&i| self.cells.get(i))
            }
            _ => None,
        }
    }

    /// The list as `GITLAB_CELLS` spells it (every field written).
    pub fn to_json(&self) -> String {
        let cells: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let mut v = serde_json::Map::new();
                v.insert("id".into(), c.id.into());
                v.insert("address".into(), c.address.clone().into());
                v.insert("session_prefix".into(), c.session_prefix.clone().into());
                v.insert("health_path".into(), c.health_path.clone().into());
                if let Some(r) = &c.registry_address {
                    v.insert("registry_address".into(), r.clone().into());
                }
                Value::Object(v)
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

/// What the circuit, health and probe tests share.
#[cfg(test)]
mod fixtures {
    use super::circuit::CircuitPolicy;
    use super::probe::{HealthRecord, ProbeResult};

    pub(super) fn policy() -> CircuitPolicy {
        CircuitPolicy {
            failures: 3,
            window_ms: 1_000,
            open_ms: 5_000,
            trial_spacing_ms: 500,
            headers_timeout_ms: 2_000,
        }
    }

    pub(super) fn record(at: u64, statuses: [u16; 3]) -> HealthRecord {
        HealthRecord {
            checked_at_ms: at,
            cells: (1..=3)
                .zip(statuses)
                .map(|(id, status)| ProbeResult {
                    id,
                    status,
                    ms: 3,
                    error: (status == 0).then(|| "connection refused".into()),
                })
                .collect(),
        }
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
        assert_eq!(l.circuit_of_address("legacy.example:8080"), Some(0));
        assert_eq!(l.circuit_of_address("registry.example"), Some(1));
        assert_eq!(l.circuit_of_address("cell3.example"), Some(4));
        // It reads back as it is written.
        assert_eq!(CellList::check(&l.to_json()), Ok(l));
    }

    #[test]
    fn a_long_list_is_indexed_to_its_last_cell() {
        let mut entries: Vec<String> = (1..=1000)
            .map(|i| format!(r#"{{"id": {i}, "address": "cell-{i}.example", "registry_address": "registry-{i}.example"}}"#))
            .collect();
        // Clashes with the 1,000th cell, each on one field.
        entries.push(r#"{"id": 1000, "address": "new.example"}"#.into());
        entries.push(r#"{"id": 1001, "address": "cell-1000.example"}"#.into());
        entries
            .push(r#"{"id": 1002, "address": "x.example", "session_prefix": "cell-1000"}"#.into());
        let (l, problems) = CellList::parse(&format!("[{}]", entries.join(",")));
        assert_eq!(l.len(), 1000);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("entry 1001: id 1000"), "{problems:?}");
        assert!(problems[1].contains("entry 1002: address"), "{problems:?}");
        assert!(
            problems[2].contains("entry 1003: session_prefix"),
            "{problems:?}"
        );
        assert_eq!(
            l.circuit_of_address("cell-1000.example"),
            Some(circuit_index(999, Address::Web))
        );
        assert_eq!(
            l.circuit_of_address("registry-1000.example"),
            Some(circuit_index(999, Address::Registry))
        );
        assert_eq!(l.position_of_id(1000), Some(999));
        assert_eq!(
            l.named_by(ClassifyKind::SessionPrefix, "cell-1000")
                .map(|c| c.id),
            Some(1000)
        );
        assert_eq!(
            l.named_by(ClassifyKind::CellId, "1000").map(|c| c.id),
            Some(1000)
        );
        assert_eq!(l.named_by(ClassifyKind::CellId, "1001"), None);
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
}
