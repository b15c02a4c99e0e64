//! The cells the router knows ([`CellList`]), their circuits
//! ([`CircuitPolicy`], whose defaults these are) and the health probe that
//! marks them down.

use super::setting::{Meaning, Number, Reader, Row, Text};
use crate::resolve::cells::{CellList, CircuitPolicy};

pub const CELLS: Text = Text {
    name: "GITLAB_CELLS",
    meaning: "every cell, a JSON list of `{\"id\", \"address\", \"registry_address\"?, \
              \"session_prefix\"?, \"health_path\"?}` (defaults `cell-<id>`, `/-/readiness`); \
              checked by `deploy-worker.sh`, a bad entry is logged and left out at run time. \
              Listed cells are allowed upstreams, resolve `CELL_ID`/`SESSION_PREFIX` keys when \
              the Topology Service cannot answer (`cache: \"static\"`), have a circuit each, are \
              probed by the Cron Trigger and are what `spread` rules choose from \
              (docs/operations.md, cell health). `devstack cells --config \
              devstack/topology.toml` prints the dev stack's",
    default: "none: no cell list",
    accepted: "JSON as described",
    fallback: "that entry left out, the others used (not JSON: no list); `warn` per entry",
    secret: false,
};

/// The health probe's settings, which no policy of the resolve phase holds.
pub(super) struct Probe {
    /// How often an isolate re-reads the scheduled probe's record.
    pub refresh_ms: u32,
    /// A probe record older than this is not believed (the cron stopped).
    pub max_age_secs: u32,
    /// Per probe of a cell's health URL.
    pub timeout_ms: u32,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            refresh_ms: 5_000,
            max_age_secs: 180,
            timeout_ms: 2_000,
        }
    }
}

/// The circuits' and the probe's settings, each bound to its field.
fn numbers<'a, M: Meaning>(
    circuits: &'a mut CircuitPolicy,
    probe: &'a mut Probe,
) -> [Number<'a, M>; 8] {
    [
        Number {
            name: "GITLAB_CELL_FAILURES",
            meaning: M::of(
                "the cell's own failures in a row that open the circuit of one of its \
                      addresses (web or registry) in an isolate: a request without a body that \
                      the cell never answered (connection refused or reset, no response headers \
                      within `GITLAB_CELL_HEADERS_TIMEOUT_MS`) while it answered no one else; no \
                      status counts unless the rule says `\"circuit\": \
                      {\"countGatewayStatuses\": true}` (502, 503, 504; a 503 with `Retry-After` \
                      never). Requests then get a 503 with `Retry-After` at once; `0`: no \
                      circuits (and the probe marks nothing down)",
            ),
            min: 0,
            max: 10_000,
            value: &mut circuits.failures,
        },
        Number {
            name: "GITLAB_CELL_FAILURE_WINDOW_MS",
            meaning: M::of("a run of failures whose first is older than this starts over"),
            min: 100,
            max: 600_000,
            value: &mut circuits.window_ms,
        },
        Number {
            name: "GITLAB_CELL_OPEN_MS",
            meaning: M::of(
                "how long a circuit stays open before trial requests (an answer closes it, \
                      a failed trial opens it again; `Retry-After` counts down to it)",
            ),
            min: 100,
            max: 600_000,
            value: &mut circuits.open_ms,
        },
        Number {
            name: "GITLAB_CELL_TRIAL_SPACING_MS",
            meaning: M::of(
                "while a circuit is half-open, at most one trial request (no body, no \
                      WebSocket or long poll) per this, however long the trials take",
            ),
            min: 10,
            max: 600_000,
            value: &mut circuits.trial_spacing_ms,
        },
        Number {
            name: "GITLAB_CELL_HEADERS_TIMEOUT_MS",
            meaning: M::of(
                "a request without a body whose response headers have not come after this \
                      long counts as a failure of the cell (the request goes on); `0`: never",
            ),
            min: 0,
            max: 3_600_000,
            value: &mut circuits.headers_timeout_ms,
        },
        Number {
            name: "GITLAB_CELL_HEALTH_REFRESH_MS",
            meaning: M::of(
                "how often an isolate reads the probe's record from KV (`ROUTER_CONTROL`, \
                      key `cell-health`; one request per interval pays the read)",
            ),
            min: 500,
            max: 600_000,
            value: &mut probe.refresh_ms,
        },
        Number {
            name: "GITLAB_CELL_HEALTH_MAX_AGE_SECONDS",
            meaning: M::of(
                "a probe record older than this is ignored (the cron stopped); also its KV \
                      expiry (at least 60 s, KV's least)",
            ),
            min: 10,
            max: 86_400,
            value: &mut probe.max_age_secs,
        },
        Number {
            name: "GITLAB_CELL_PROBE_TIMEOUT_MS",
            meaning: M::of(
                "per health probe (`GET <scheme>://<address><health_path>`; up is a 2xx)",
            ),
            min: 100,
            max: 30_000,
            value: &mut probe.timeout_ms,
        },
    ]
}

pub(super) fn rows() -> Vec<Row> {
    let mut rows = vec![CELLS.row()];
    let (mut circuits, mut probe) = (CircuitPolicy::default(), Probe::default());
    rows.extend(numbers(&mut circuits, &mut probe).iter().map(Number::row));
    rows
}

/// The block as read.
pub(super) struct Cells {
    pub list: CellList,
    pub circuits: CircuitPolicy,
    pub probe: Probe,
}

pub(super) fn read(r: &mut Reader<'_>) -> Cells {
    let list = cell_list(r);
    let (mut circuits, mut probe) = (CircuitPolicy::default(), Probe::default());
    for number in numbers(&mut circuits, &mut probe) {
        r.number(number);
    }
    Cells {
        list,
        circuits,
        probe,
    }
}

/// `GITLAB_CELLS`, its bad entries left out (and reported).
fn cell_list(r: &mut Reader<'_>) -> CellList {
    let Some(json) = r.get(CELLS.name) else {
        return CellList::default();
    };
    let (cells, bad) = CellList::parse(&json);
    let whole = cells.is_empty() && bad.len() == 1;
    for problem in bad {
        let wrong = problem.strip_suffix("; left out").unwrap_or(&problem);
        let instead = if whole && !problem.starts_with("entry ") {
            "no cell list is used"
        } else {
            "this entry is left out; the other cells are used"
        };
        r.warn(CELLS.name, None, wrong, instead);
    }
    cells
}
