//! Every listed address's circuit in one isolate ([`super::circuit`]),
//! when each last answered, the probe record applied to them, and the
//! choice of a cell for a spread rule.

use std::cell::Cell;

use super::circuit::{Admission, Change, Circuit, CircuitPolicy, Outcome, LONG_LIVED_CONNECT_MS};
use super::probe::{HealthRecord, Verdict};
use super::CellList;

/// Which of a cell's two upstream addresses a circuit covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address {
    Web,
    Registry,
}

/// A circuit's position: two per cell, its web address then its registry
/// address, in `GITLAB_CELLS` order.
pub fn circuit_index(cell: usize, address: Address) -> usize {
    cell * 2 + usize::from(address == Address::Registry)
}

/// The cell a circuit belongs to.
pub fn cell_of_circuit(circuit: usize) -> usize {
    circuit / 2
}

/// Every listed address's circuit, in this isolate.
#[derive(Debug)]
pub struct CellHealth {
    policy: CircuitPolicy,
    circuits: Vec<Circuit>,
    /// When each address last answered (ms since the epoch), written by
    /// the entry for every response it gets from it (no call into wasm:
    /// [`CellHealth::answered_slots`]). Never reallocated.
    answered: Box<[Cell<f64>]>,
    /// The probe record applied last (its `checked_at_ms`), so one record
    /// opens a circuit once.
    applied_ms: u64,
}

impl CellHealth {
    pub fn new(list: &CellList, policy: CircuitPolicy) -> CellHealth {
        let n = list.len() * 2;
        CellHealth {
            policy,
            circuits: vec![Circuit::default(); n],
            answered: (0..n).map(|_| Cell::new(0.0)).collect(),
            applied_ms: 0,
        }
    }

    pub fn policy(&self) -> &CircuitPolicy {
        &self.policy
    }

    /// The answered times, one `f64` per circuit, for the entry to write
    /// into (wasm memory; the slice's address never changes).
    pub fn answered_slots(&self) -> &[Cell<f64>] {
        &self.answered
    }

    /// When circuit `i`'s address last answered.
    pub fn answered_ms(&self, i: usize) -> u64 {
        self.answered.get(i).map_or(0, |t| t.get().max(0.0) as u64)
    }

    /// The admission of a request for circuit `i`; `now_ms` is asked only
    /// when the circuit is not closed (the usual case costs no clock
    /// read). `trial_eligible`: no body and not long-lived.
    pub fn admit(
        &mut self,
        i: usize,
        now_ms: impl FnOnce() -> u64,
        trial_eligible: bool,
    ) -> Admission {
        if self.policy.failures == 0 {
            return Admission::Forward;
        }
        let answered = self.answered_ms(i);
        match self.circuits.get_mut(i) {
            Some(c) if !c.is_closed() => c.admit(&self.policy, now_ms(), answered, trial_eligible),
            _ => Admission::Forward,
        }
    }

    /// Records the outcome of a request sent to circuit `i` at `sent_ms`.
    /// `long_lived`: a WebSocket or long poll, whose fetch failing after
    /// [`LONG_LIVED_CONNECT_MS`] is a closed stream, not a dead cell;
    /// `counts_failures`: false for a request with a body (its failure may
    /// be the client's).
    pub fn record(
        &mut self,
        i: usize,
        outcome: Outcome,
        sent_ms: u64,
        now_ms: u64,
        long_lived: bool,
        counts_failures: bool,
    ) -> Change {
        let answered = self.answered_ms(i);
        let (Some(circuit), Some(slot)) = (self.circuits.get_mut(i), self.answered.get(i)) else {
            return Change::None;
        };
        if !outcome.is_failure() {
            slot.set(slot.get().max(now_ms as f64));
            return circuit.record_answer();
        }
        let stream_ended = long_lived
            && outcome == Outcome::Unreachable
            && now_ms.saturating_sub(sent_ms) >= LONG_LIVED_CONNECT_MS;
        if !counts_failures || stream_ended {
            return Change::None;
        }
        circuit.record_failure(&self.policy, sent_ms, now_ms, answered)
    }

    pub fn circuit(&self, i: usize) -> Option<&Circuit> {
        self.circuits.get(i)
    }

    /// Applies a probe record (ids matched against `list`) to the cells'
    /// web circuits: each cell it found down, and that has answered nothing
    /// since, has its circuit opened. A record that is not current
    /// ([`HealthRecord::is_current`]: too old, or dated in the future) or
    /// was applied before is ignored. Returns the cells it opened.
    pub fn apply_record(
        &mut self,
        list: &CellList,
        record: &HealthRecord,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Vec<u64> {
        if self.policy.failures == 0
            || record.checked_at_ms <= self.applied_ms
            || !record.is_current(now_ms, max_age_ms)
        {
            return Vec::new();
        }
        self.applied_ms = record.checked_at_ms;
        let mut opened = Vec::new();
        for result in record.cells.iter().filter(|r| r.verdict() == Verdict::Down) {
            if let Some(cell) = list.position_of_id(result.id) {
                let i = circuit_index(cell, Address::Web);
                let answered = self.answered_ms(i);
                let down = self.circuits.get_mut(i).is_some_and(|c| {
                    c.probe_down(&self.policy, record.checked_at_ms, now_ms, answered)
                });
                if down {
                    opened.push(result.id);
                }
            }
        }
        opened
    }

    /// A cell for a spread rule: uniformly among the cells whose web
    /// address is available ([`Circuit::is_available`]; `random` uniform
    /// in [0, 1)); `None` when none is.
    pub fn choose(&self, random: f64, now_ms: u64) -> Option<usize> {
        let available = |cell: &usize| {
            self.policy.failures == 0
                || self
                    .circuits
                    .get(circuit_index(*cell, Address::Web))
                    .is_some_and(|c| c.is_available(now_ms))
        };
        let cells = self.circuits.len() / 2;
        let count = (0..cells).filter(available).count();
        if count == 0 {
            return None;
        }
        let pick = ((random.clamp(0.0, 1.0) * count as f64) as usize).min(count - 1);
        (0..cells).filter(available).nth(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::super::circuit::{OpenedBy, FETCH_FAILED};
    use super::super::fixtures::{policy, record};
    use super::*;

    fn list() -> CellList {
        CellList::check(
            r#"[
              {"id": 1, "address": "legacy.example:8080", "registry_address": "registry.example"},
              {"id": 2, "address": "cell2.example"},
              {"id": 3, "address": "cell3.example"}
            ]"#,
        )
        .unwrap()
    }

    fn fail(h: &mut CellHealth, i: usize, at: u64) -> Change {
        h.record(i, Outcome::Unreachable, at, at + 1, false, true)
    }

    #[test]
    fn web_and_registry_addresses_have_circuits_of_their_own() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        let registry = circuit_index(0, Address::Registry);
        let web = circuit_index(0, Address::Web);
        for t in 0..3 {
            fail(&mut h, registry, t);
        }
        assert!(matches!(
            h.admit(registry, || 10, true),
            Admission::Refused { .. }
        ));
        assert_eq!(h.admit(web, || 10, true), Admission::Forward);
        assert_eq!(cell_of_circuit(registry), 0);
        assert_eq!(cell_of_circuit(circuit_index(2, Address::Web)), 2);
    }

    #[test]
    fn bodies_and_ended_streams_never_count() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        for t in 0..10 {
            assert_eq!(
                h.record(2, Outcome::Unreachable, t, t + 1, false, false),
                Change::None
            );
            assert_eq!(
                h.record(2, Outcome::Unreachable, t, t + 6_000, true, true),
                Change::None
            );
        }
        assert!(h.circuit(2).unwrap().is_closed());
        // A WebSocket that cannot connect is a failure like any other.
        for t in 0..3 {
            h.record(2, Outcome::Unreachable, t, t + 10, true, true);
        }
        assert!(!h.circuit(2).unwrap().is_closed());
    }

    #[test]
    fn an_answer_reported_closes_and_is_remembered() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        for t in 0..3 {
            fail(&mut h, 2, t);
        }
        assert_eq!(h.admit(2, || 5_100, true), Admission::Trial);
        assert_eq!(
            h.record(2, Outcome::Answered, 5_100, 5_150, false, true),
            Change::Closed
        );
        assert_eq!(h.answered_ms(2), 5_150);
        // A failure of a request sent before that answer does not count.
        assert_eq!(fail(&mut h, 2, 5_000), Change::None);
        assert_eq!(h.circuit(2).unwrap().failures(), 0);
        assert_eq!(
            Outcome::of(FETCH_FAILED, false, false),
            Outcome::Unreachable
        );
    }

    #[test]
    fn the_entrys_answered_slots_stop_a_client_from_opening_a_circuit() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        // The entry writes the slot for another user's response at 1 500.
        h.answered_slots()[4].set(1_500.0);
        for k in 0..20 {
            assert_eq!(
                h.record(4, Outcome::NoHeaders, k, 2_000 + k, false, true),
                Change::None
            );
        }
        assert!(h.circuit(4).unwrap().is_closed());
    }

    #[test]
    fn a_probe_record_opens_web_circuits_of_cells_found_down_once() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        let c3 = circuit_index(2, Address::Web);
        assert_eq!(
            h.apply_record(&l, &record(1_000, [200, 404, 0]), 1_500, 60_000),
            [3]
        );
        assert_eq!(h.circuit(c3).unwrap().opened_by(), Some(OpenedBy::Probe));
        assert!(matches!(
            h.admit(c3, || 1_600, true),
            Admission::Refused { .. }
        ));
        // A 404 (GitLab's monitoring allowlist) marks nothing.
        assert_eq!(
            h.admit(circuit_index(1, Address::Web), || 1_600, true),
            Admission::Forward
        );
        // The same record again does nothing; the cell recovers by a trial.
        assert!(h
            .apply_record(&l, &record(1_000, [200, 200, 0]), 6_600, 60_000)
            .is_empty());
        assert_eq!(h.admit(c3, || 6_600, true), Admission::Trial);
        h.record(c3, Outcome::Answered, 6_600, 6_700, false, true);
        assert_eq!(h.admit(c3, || 6_800, true), Admission::Forward);
        // Too old, or from the future: not believed.
        assert!(h
            .apply_record(&l, &record(7_000, [0, 0, 0]), 100_000, 60_000)
            .is_empty());
        assert!(h
            .apply_record(&l, &record(10_000_000, [0, 0, 0]), 100_000, 60_000)
            .is_empty());
        assert!(h
            .circuit(circuit_index(1, Address::Web))
            .unwrap()
            .is_closed());
        // The future record was not remembered as applied: today's is read.
        assert_eq!(
            h.apply_record(&l, &record(99_000, [200, 0, 200]), 100_000, 60_000),
            [2]
        );
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
        for t in 0..10 {
            fail(&mut h, 2, t);
        }
        assert_eq!(h.admit(2, || 1, true), Admission::Forward);
        assert!(h
            .apply_record(&l, &record(5, [0, 0, 0]), 6, 60_000)
            .is_empty());
    }

    #[test]
    fn spread_picks_uniformly_among_available_cells() {
        let l = list();
        let mut h = CellHealth::new(&l, policy());
        let mut counts = [0u32; 3];
        for k in 0..3_000 {
            counts[h.choose(f64::from(k) / 3_000.0, 10).unwrap()] += 1;
        }
        assert_eq!(counts, [1_000, 1_000, 1_000]);
        // Cell 2's registry circuit open: spread is about web pages.
        for t in 0..3 {
            fail(&mut h, circuit_index(1, Address::Registry), t);
        }
        assert_eq!(h.choose(0.5, 10), Some(1));
        for t in 0..3 {
            fail(&mut h, circuit_index(1, Address::Web), t);
        }
        let mut counts = [0u32; 3];
        for k in 0..3_000 {
            counts[h.choose(f64::from(k) / 3_000.0, 10).unwrap()] += 1;
        }
        assert_eq!(counts, [1_500, 0, 1_500]);
        for cell in [0, 2] {
            for t in 0..3 {
                fail(&mut h, circuit_index(cell, Address::Web), t);
            }
        }
        assert_eq!(h.choose(0.5, 10), None);
        // Cool-down over: the cells are candidates again (as trials).
        assert_eq!(h.choose(0.5, 5_100), Some(1));
    }
}
