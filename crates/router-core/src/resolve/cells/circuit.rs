//! Passive health: a circuit per upstream address of every listed cell
//! (its web address and its registry address apart), per isolate, as a
//! pure state machine over the caller's clock (like [`crate::resolve::guard`] for
//! the Topology Service).
//!
//! Only the cell's own failure opens a circuit (docs/decisions-operations.md,
//! "Cells as configuration"):
//!
//! * **What counts.** A request without a body that the cell never
//!   answered: the connection refused or reset, or no response headers
//!   within [`CircuitPolicy::headers_timeout_ms`]. No status counts by
//!   default; a rule may opt in to 502, 503 and 504 ([`Outcome::of`]), and
//!   a 503 with `Retry-After` (GitLab's maintenance mode) never counts. A
//!   request with a body never counts: workerd reports the client's
//!   aborted upload and a dead cell alike ("Network connection lost.").
//! * **Only while the cell answers nobody.** The entry writes, for every
//!   response, when the address last answered (the `answered_ms` the
//!   functions here are given). A failure counts only when nothing was
//!   answered since its request was sent, and a run of failures starts
//!   over whenever something was (consecutive counting). A client's slow
//!   or broken requests therefore cannot open a circuit while other users
//!   of the cell are being answered.
//! * **Open**: requests for the address get a 503 with `Retry-After` at
//!   once, for `open_ms`. Then the circuit is half-open: one trial request
//!   per `trial_spacing_ms`, never one with a body or a long-lived one (a
//!   WebSocket or long poll could hold it for minutes). Any answer from the
//!   address closes it; a failed trial opens it again.

/// How the circuits are set. `failures: 0` turns them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitPolicy {
    /// Consecutive failures that open a circuit.
    pub failures: u32,
    /// A run of failures whose first is older than this starts over.
    pub window_ms: u32,
    /// How long a circuit stays open before trial requests.
    pub open_ms: u32,
    /// At most one trial request per this while half-open, however long
    /// the trials before it take.
    pub trial_spacing_ms: u32,
    /// A request without a body whose response headers have not come
    /// after this long counts as a failure (the cell hangs); 0: never.
    pub headers_timeout_ms: u32,
}

impl Default for CircuitPolicy {
    fn default() -> Self {
        CircuitPolicy {
            failures: 5,
            window_ms: 10_000,
            open_ms: 10_000,
            trial_spacing_ms: 1_000,
            headers_timeout_ms: 60_000,
        }
    }
}

/// What a circuit says about one request for its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Forward,
    /// A trial request of a half-open circuit: its outcome, whatever it
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

/// How one forwarded request to a listed cell ended, as the circuit sees
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Response headers came: the address is alive.
    Answered,
    /// The fetch failed before any response (refused, reset, DNS).
    Unreachable,
    /// No response headers within the bound.
    NoHeaders,
    /// A 502, 503 or 504, for a rule that counts them.
    GatewayStatus(u16),
}

/// What a reported outcome did to a circuit (for the log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    Opened,
    Closed,
    /// A trial failed: open for another cool-down.
    TrialFailed,
}

pub use crate::wire::{FETCH_FAILED, NO_HEADERS};

impl Outcome {
    /// The outcome the entry reported: [`FETCH_FAILED`], [`NO_HEADERS`] or
    /// a response status (`retry_after`: the response carries
    /// `Retry-After`). `gateway_statuses`: the rule counts 502, 503 and
    /// 504; a 503 with `Retry-After` is GitLab's maintenance mode for one
    /// organization, an answer.
    pub fn of(status: u16, retry_after: bool, gateway_statuses: bool) -> Outcome {
        match status {
            FETCH_FAILED => Outcome::Unreachable,
            NO_HEADERS => Outcome::NoHeaders,
            503 if retry_after => Outcome::Answered,
            502..=504 if gateway_statuses => Outcome::GatewayStatus(status),
            _ => Outcome::Answered,
        }
    }

    pub fn is_failure(self) -> bool {
        self != Outcome::Answered
    }

    /// For the log line.
    pub fn describe(self) -> String {
        match self {
            Outcome::Answered => "answered".into(),
            Outcome::Unreachable => "fetch failed".into(),
            Outcome::NoHeaders => "no response headers in time".into(),
            Outcome::GatewayStatus(s) => format!("status {s}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `failures` counted in a row, the first at `run_started_ms`.
    Closed { failures: u32, run_started_ms: u64 },
    Open {
        until_ms: u64,
        opened_ms: u64,
        by: OpenedBy,
    },
    /// Cool-down over: a trial may go at `next_trial_ms`.
    HalfOpen {
        next_trial_ms: u64,
        opened_ms: u64,
        by: OpenedBy,
    },
}

/// One address's circuit; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    state: State,
}

impl Default for Circuit {
    fn default() -> Self {
        Circuit {
            state: State::Closed {
                failures: 0,
                run_started_ms: 0,
            },
        }
    }
}

fn retry_after(until_ms: u64, now_ms: u64) -> u32 {
    let secs = until_ms.saturating_sub(now_ms).div_ceil(1000);
    secs.clamp(1, 3600) as u32
}

impl Circuit {
    /// The admission of a request at `now_ms`; `answered_ms`: when the
    /// address last answered; `trial_eligible`: the request has no body and
    /// is not long-lived.
    pub fn admit(
        &mut self,
        policy: &CircuitPolicy,
        now_ms: u64,
        answered_ms: u64,
        trial_eligible: bool,
    ) -> Admission {
        // Open past its time is half-open, a trial due at once.
        let (next_trial_ms, opened_ms, by) = match self.state {
            State::Closed { .. } => return Admission::Forward,
            State::Open { until_ms, .. } if now_ms < until_ms => {
                return Admission::Refused {
                    retry_after_secs: retry_after(until_ms, now_ms),
                }
            }
            State::Open { opened_ms, by, .. } => (now_ms, opened_ms, by),
            State::HalfOpen {
                next_trial_ms,
                opened_ms,
                by,
            } => (next_trial_ms, opened_ms, by),
        };
        // Something was answered since it opened (a trial, a late
        // response): the address is alive.
        if answered_ms > opened_ms {
            self.close();
            return Admission::Forward;
        }
        if trial_eligible && now_ms >= next_trial_ms {
            self.state = State::HalfOpen {
                next_trial_ms: now_ms + u64::from(policy.trial_spacing_ms.max(1)),
                opened_ms,
                by,
            };
            return Admission::Trial;
        }
        self.state = State::HalfOpen {
            next_trial_ms,
            opened_ms,
            by,
        };
        Admission::Refused {
            retry_after_secs: retry_after(next_trial_ms, now_ms),
        }
    }

    /// Records a failure of a request sent at `sent_ms`; `answered_ms` as
    /// for [`Circuit::admit`].
    pub fn record_failure(
        &mut self,
        policy: &CircuitPolicy,
        sent_ms: u64,
        now_ms: u64,
        answered_ms: u64,
    ) -> Change {
        if policy.failures == 0 || answered_ms > sent_ms {
            // Off, or the address answered since: not its failure.
            return Change::None;
        }
        let open = |opened_ms| State::Open {
            until_ms: opened_ms + u64::from(policy.open_ms),
            opened_ms,
            by: OpenedBy::Requests,
        };
        match self.state {
            State::Closed {
                failures,
                run_started_ms,
            } => {
                let run_over = failures == 0
                    || answered_ms > run_started_ms
                    || now_ms.saturating_sub(run_started_ms) > u64::from(policy.window_ms);
                let (failures, run_started_ms) = if run_over {
                    (1, now_ms)
                } else {
                    (failures + 1, run_started_ms)
                };
                if failures >= policy.failures {
                    self.state = open(now_ms);
                    return Change::Opened;
                }
                self.state = State::Closed {
                    failures,
                    run_started_ms,
                };
                Change::None
            }
            // A trial failed: open again for a whole cool-down.
            State::HalfOpen { .. } => {
                self.state = open(now_ms);
                Change::TrialFailed
            }
            // A late failure of a request sent before it opened.
            State::Open { .. } => Change::None,
        }
    }

    /// The address answered (a reported trial, a maintenance 503): closes
    /// the circuit and ends a run of failures.
    pub fn record_answer(&mut self) -> Change {
        let was_open = !self.is_closed();
        self.close();
        if was_open {
            Change::Closed
        } else {
            Change::None
        }
    }

    fn close(&mut self) {
        self.state = State::Closed {
            failures: 0,
            run_started_ms: 0,
        };
    }

    /// The probe found the cell down at `checked_ms`: open, unless the
    /// address answered after the probe looked (then the probe was wrong
    /// or the cell is back) or the circuit is not closed.
    pub fn probe_down(
        &mut self,
        policy: &CircuitPolicy,
        checked_ms: u64,
        now_ms: u64,
        answered_ms: u64,
    ) -> bool {
        if answered_ms > checked_ms || !self.is_closed() {
            return false;
        }
        self.state = State::Open {
            until_ms: now_ms + u64::from(policy.open_ms),
            opened_ms: now_ms,
            by: OpenedBy::Probe,
        };
        true
    }

    /// Whether requests go to the address now (closed).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed { .. })
    }

    /// Whether a trial-eligible request for the address would be
    /// forwarded at `now_ms`: closed, or half-open with a trial due.
    /// Spreading picks among these, so a cell that only gets spread
    /// traffic still recovers.
    pub fn is_available(&self, now_ms: u64) -> bool {
        match self.state {
            State::Closed { .. } => true,
            State::Open { until_ms, .. } => now_ms >= until_ms,
            State::HalfOpen { next_trial_ms, .. } => now_ms >= next_trial_ms,
        }
    }

    /// Why the circuit is open, when it is.
    pub fn opened_by(&self) -> Option<OpenedBy> {
        match self.state {
            State::Closed { .. } => None,
            State::Open { by, .. } | State::HalfOpen { by, .. } => Some(by),
        }
    }

    /// Failures counted in the current run (0 when not closed).
    pub fn failures(&self) -> u32 {
        match self.state {
            State::Closed { failures, .. } => failures,
            _ => 0,
        }
    }
}

/// A long-lived request ([`is_long_lived`]) whose fetch fails later than
/// this after it was sent is a stream that ended, not a dead cell.
pub const LONG_LIVED_CONNECT_MS: u64 = 5_000;

/// Requests that may legitimately stay open for a long time: WebSocket
/// upgrades and GitLab's long polls (the runner job request, Workhorse's
/// long polling of `/api/v4/jobs/request`).
pub fn is_long_lived(path: &str, upgrade: Option<&str>) -> bool {
    upgrade.is_some_and(|u| !u.is_empty()) || path == "/api/v4/jobs/request"
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::policy;
    use super::*;

    /// Three failures of requests sent at `at` and reported just after,
    /// with nothing answered since `answered`.
    fn fail_three(c: &mut Circuit, p: &CircuitPolicy, at: u64, answered: u64) -> bool {
        let mut opened = false;
        for k in 0..3 {
            opened |= c.record_failure(p, at + k, at + k + 10, answered) == Change::Opened;
        }
        opened
    }

    #[test]
    fn consecutive_failures_open_it_then_trials_decide() {
        let p = policy();
        let mut c = Circuit::default();
        c.record_failure(&p, 100, 110, 0);
        c.record_failure(&p, 200, 210, 0);
        assert_eq!(c.failures(), 2);
        assert_eq!(c.admit(&p, 250, 0, true), Admission::Forward);
        assert_eq!(c.record_failure(&p, 300, 310, 0), Change::Opened);
        assert_eq!(c.opened_by(), Some(OpenedBy::Requests));
        assert_eq!(
            c.admit(&p, 311, 0, true),
            Admission::Refused {
                retry_after_secs: 5
            }
        );
        assert_eq!(
            c.admit(&p, 4_500, 0, true),
            Admission::Refused {
                retry_after_secs: 1
            }
        );
        // Cool-down over: a trial, the others wait for the next one.
        assert_eq!(c.admit(&p, 5_400, 0, true), Admission::Trial);
        assert!(matches!(
            c.admit(&p, 5_401, 0, true),
            Admission::Refused { .. }
        ));
        // The trial failed: a whole cool-down again.
        assert_eq!(c.record_failure(&p, 5_400, 5_450, 0), Change::TrialFailed);
        assert!(matches!(
            c.admit(&p, 10_000, 0, true),
            Admission::Refused { .. }
        ));
        assert_eq!(c.admit(&p, 10_450, 0, true), Admission::Trial);
        // Its answer closes it (the entry wrote when it came).
        assert_eq!(c.admit(&p, 10_500, 10_470, true), Admission::Forward);
        assert!(c.is_closed());
    }

    #[test]
    fn a_success_in_between_starts_the_count_over() {
        let p = policy();
        let mut c = Circuit::default();
        for t in [100, 200] {
            c.record_failure(&p, t, t + 5, 0);
        }
        // Answered at 250: the next failure starts a new run.
        c.record_failure(&p, 300, 305, 250);
        assert_eq!(c.failures(), 1);
        c.record_failure(&p, 400, 405, 250);
        assert_eq!(c.record_failure(&p, 500, 505, 250), Change::Opened);
    }

    #[test]
    fn failures_of_requests_sent_before_an_answer_never_count() {
        // Five slow requests of one client, all sent at 0, time out at
        // 2 000 while other users were answered at 1 500.
        let p = policy();
        let mut c = Circuit::default();
        for k in 0..50 {
            assert_eq!(c.record_failure(&p, k, 2_000 + k, 1_500), Change::None);
        }
        assert!(c.is_closed());
        assert_eq!(c.failures(), 0);
    }

    #[test]
    fn failures_spread_over_more_than_the_window_never_open_it() {
        let p = policy();
        let mut c = Circuit::default();
        for t in 0..20 {
            c.record_failure(&p, t * 600, t * 600 + 1, 0);
            assert!(c.is_closed(), "at {}", t * 600);
        }
    }

    #[test]
    fn a_slow_trial_never_holds_it_open_past_the_spacing() {
        let p = policy();
        let mut c = Circuit::default();
        assert!(fail_three(&mut c, &p, 0, 0));
        assert_eq!(c.admit(&p, 5_100, 0, true), Admission::Trial);
        // That trial never answers; the next goes one spacing later.
        assert!(matches!(
            c.admit(&p, 5_599, 0, true),
            Admission::Refused { .. }
        ));
        assert_eq!(c.admit(&p, 5_600, 0, true), Admission::Trial);
        assert_eq!(c.admit(&p, 6_100, 0, true), Admission::Trial);
    }

    #[test]
    fn bodies_and_long_lived_requests_are_never_trials() {
        let p = policy();
        let mut c = Circuit::default();
        fail_three(&mut c, &p, 0, 0);
        for t in [5_100, 6_000, 9_000] {
            assert!(matches!(
                c.admit(&p, t, 0, false),
                Admission::Refused { .. }
            ));
        }
        assert_eq!(c.admit(&p, 9_001, 0, true), Admission::Trial);
    }

    #[test]
    fn the_probe_opens_only_a_closed_circuit_no_one_answered_since() {
        let p = policy();
        let mut c = Circuit::default();
        // Answered after the probe looked: the probe is not believed.
        assert!(!c.probe_down(&p, 1_000, 1_200, 1_100));
        assert!(c.is_closed());
        assert!(c.probe_down(&p, 1_000, 1_200, 900));
        assert_eq!(c.opened_by(), Some(OpenedBy::Probe));
        assert!(!c.is_available(1_300));
        assert!(c.is_available(6_200));
        assert_eq!(c.record_answer(), Change::Closed);
        assert!(c.is_closed());
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            Outcome::of(FETCH_FAILED, false, false),
            Outcome::Unreachable
        );
        assert_eq!(Outcome::of(NO_HEADERS, false, false), Outcome::NoHeaders);
        for s in [200, 301, 404, 429, 500, 502, 503, 504] {
            assert_eq!(Outcome::of(s, false, false), Outcome::Answered, "{s}");
        }
        for s in [502, 503, 504] {
            assert_eq!(Outcome::of(s, false, true), Outcome::GatewayStatus(s));
        }
        assert_eq!(
            Outcome::of(503, true, true),
            Outcome::Answered,
            "maintenance"
        );
        assert_eq!(Outcome::of(500, false, true), Outcome::Answered);
        assert!(is_long_lived("/-/cable", Some("websocket")));
        assert!(is_long_lived("/api/v4/jobs/request", None));
        assert!(!is_long_lived("/api/v4/jobs/request/x", None));
        assert!(!is_long_lived("/users/sign_in", Some("")));
    }

    #[test]
    fn off_counts_nothing() {
        let p = CircuitPolicy {
            failures: 0,
            ..policy()
        };
        let mut c = Circuit::default();
        for t in 0..10 {
            assert_eq!(c.record_failure(&p, t, t + 1, 0), Change::None);
        }
        assert!(c.is_closed());
    }
}
