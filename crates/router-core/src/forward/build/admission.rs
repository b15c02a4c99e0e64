//! Circuit admission: a request to a listed cell is forwarded, sent as a
//! trial, or refused at once while the cell's circuit is open; what the
//! entry reports of the outcome is fed back to the circuit.

use crate::error::RouterError;
use crate::log::ChosenBy;
use crate::platform::Platform;
use crate::resolve::cells::{self, Admission, Change, OpenedBy, Outcome};
use crate::wire::Report;

use super::{IsolateView, RequestContext};

/// A listed cell's circuit decides between forwarding (with the report
/// the entry sends back) and a fast 503; any other address is forwarded
/// with no report.
pub(super) fn admit<P: Platform>(
    view: &IsolateView,
    platform: &P,
    ctx: &mut RequestContext,
) -> Result<Option<Report>, RouterError> {
    let Some(circuit) = view.settings.cells.circuit_of_address(ctx.address()) else {
        return Ok(None);
    };
    // A listed address's circuit is always one of the list's cells.
    let cell_id = view
        .settings
        .cells
        .cells()
        .get(cells::health::cell_of_circuit(circuit))
        .map_or(0, |cell| cell.id);
    ctx.log.cell = Some(cell_id);
    let parts = &ctx.incoming.parts;
    let long_lived = cells::circuit::is_long_lived(&parts.path, parts.header("upgrade"));
    let trial_eligible = !ctx.body && !long_lived;
    let admission = view
        .health
        .borrow_mut()
        .admit(circuit, || platform.now_ms(), trial_eligible);
    match admission {
        Admission::Refused { retry_after_secs } => {
            let opened_by = view
                .health
                .borrow()
                .circuit(circuit)
                .and_then(|c| c.opened_by());
            let why = match opened_by {
                Some(OpenedBy::Probe) => "the health probe found it down",
                _ => "its requests failed",
            };
            ctx.log.chosen_by = Some(ChosenBy::CircuitOpen);
            Err(RouterError::CellUnavailable {
                cell: cell_id,
                address: ctx.address().to_string(),
                why,
                retry_after_secs,
            })
        }
        Admission::Forward | Admission::Trial => {
            let counts_failures = !ctx.body;
            Ok(Some(Report {
                circuit,
                trial: admission == Admission::Trial,
                long_lived,
                counts_failures,
                gateway_statuses: ctx
                    .routed
                    .is_some_and(|r| r.decision.counts_gateway_statuses),
                headers_timeout_ms: if counts_failures && !long_lived {
                    view.settings.headers_timeout_ms
                } else {
                    0
                },
            }))
        }
    }
}

/// What an outcome the entry reported (the plan's report fields: circuit
/// and flags; `status` as [`cells::Outcome::of`] reads it) did to its
/// circuit, as a log line's message (`None`: nothing worth a line).
pub fn report_outcome(
    view: &IsolateView,
    circuit: usize,
    flags: u32,
    status: u16,
    sent_ms: u64,
    retry_after: bool,
    now_ms: u64,
) -> Option<String> {
    let report = Report::decode(circuit, flags)?;
    let outcome = Outcome::of(status, retry_after, report.gateway_statuses);
    let cell = view
        .settings
        .cells
        .cells()
        .get(cells::health::cell_of_circuit(circuit))?;
    let change = view.health.borrow_mut().record(
        circuit,
        outcome,
        sent_ms,
        now_ms,
        report.long_lived,
        report.counts_failures,
    );
    let policy = *view.health.borrow().policy();
    let address = if circuit % 2 == 1 {
        cell.registry_address.as_deref().unwrap_or(&cell.address)
    } else {
        &cell.address
    };
    let message = match change {
        Change::Opened => format!(
            "circuit opened in this isolate after {} failures in a row with no answer in between (last: {}); 503 for {} ms, then trial requests",
            policy.failures,
            outcome.describe(),
            policy.open_ms
        ),
        Change::Closed => format!("circuit closed in this isolate ({})", outcome.describe()),
        Change::TrialFailed => format!(
            "trial request failed ({}); circuit open again",
            outcome.describe()
        ),
        Change::None => return None,
    };
    Some(format!("cell {} ({address}): {message}", cell.id))
}
