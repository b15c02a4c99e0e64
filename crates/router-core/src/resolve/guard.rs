//! Bounded load on the Topology Service during an outage: a
//! retry budget and a circuit breaker, one of each per isolate, as pure
//! state machines over the caller's clock.
//!
//! Without them every request for an uncached key made `1 + retries`
//! attempts whatever the service's state: 1,000 requests during an outage
//! were 3,000 calls on a service that was already failing. With them:
//!
//! * **Retry budget**: retries may add at most `retry_percent` % to the
//!   first attempts of the current window (plus `min_retries` per window,
//!   so a quiet isolate can still retry a lone failure).
//! * **Breaker**: `failures` failed attempts in a row (timeouts, connection
//!   errors, 5xx, 3xx) open it for `open_ms`: no calls at all, requests get
//!   a stale entry or the legacy cell at once. Then one request probes
//!   (half-open, no retries): a success closes it, a failure opens it
//!   again. An outage so costs about one call per `open_ms` per isolate.
//!
//! An answer the service gives (a 200, a 404, a 4xx) is a success here:
//! the service is up.

/// How the guard is set; see the module docs. `failures: 0` turns the
/// breaker off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardPolicy {
    pub retry_percent: u32,
    pub min_retries: u32,
    /// The budget's window.
    pub window_ms: u32,
    pub failures: u32,
    pub open_ms: u32,
}

impl Default for GuardPolicy {
    fn default() -> Self {
        GuardPolicy {
            retry_percent: 10,
            min_retries: 10,
            window_ms: 10_000,
            failures: 5,
            open_ms: 5_000,
        }
    }
}

impl GuardPolicy {
    /// The old behaviour: every retry allowed, no breaker (for comparisons).
    pub fn unlimited() -> GuardPolicy {
        GuardPolicy {
            retry_percent: u32::MAX,
            min_retries: u32::MAX,
            failures: 0,
            ..GuardPolicy::default()
        }
    }
}

/// Why the guard refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The breaker is open (or another request is probing).
    Open,
    /// The retry budget is spent for this window.
    Budget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    Closed {
        failures: u32,
    },
    Open {
        until_ms: u64,
    },
    /// One probe is out; another may go after `until_ms` (the probe's
    /// request may have been cancelled and never report back).
    Probing {
        until_ms: u64,
    },
}

/// The guard's state; see the module docs.
#[derive(Debug, Clone)]
pub struct ServiceGuard {
    policy: GuardPolicy,
    /// How long a probe may take before another request probes instead.
    probe_ms: u32,
    breaker: Breaker,
    window_start_ms: u64,
    first_attempts: u64,
    retries: u64,
}

impl ServiceGuard {
    /// `probe_ms`: the longest one resolution can take (the client's worst
    /// case), after which a probe that never reported is given up.
    pub fn new(policy: GuardPolicy, probe_ms: u32) -> ServiceGuard {
        ServiceGuard {
            policy,
            probe_ms,
            breaker: Breaker::Closed { failures: 0 },
            window_start_ms: 0,
            first_attempts: 0,
            retries: 0,
        }
    }

    /// Whether a request may make its first attempt now (and counts it).
    pub fn allow_first(&mut self, now_ms: u64) -> Result<(), Refusal> {
        match self.breaker {
            Breaker::Closed { .. } => {}
            Breaker::Open { until_ms } | Breaker::Probing { until_ms } if now_ms >= until_ms => {
                self.breaker = Breaker::Probing {
                    until_ms: now_ms + u64::from(self.probe_ms),
                };
            }
            Breaker::Open { .. } | Breaker::Probing { .. } => return Err(Refusal::Open),
        }
        self.roll_window(now_ms);
        self.first_attempts += 1;
        Ok(())
    }

    /// Whether a request may retry now (and counts it): only while the
    /// breaker is closed and within the budget.
    pub fn allow_retry(&mut self, now_ms: u64) -> Result<(), Refusal> {
        if !matches!(self.breaker, Breaker::Closed { .. }) {
            return Err(Refusal::Open);
        }
        self.roll_window(now_ms);
        let allowed = u64::from(self.policy.min_retries).saturating_add(
            self.first_attempts
                .saturating_mul(u64::from(self.policy.retry_percent))
                / 100,
        );
        if self.retries >= allowed {
            return Err(Refusal::Budget);
        }
        self.retries += 1;
        Ok(())
    }

    /// Records an attempt's outcome: `true` when the service answered.
    pub fn record(&mut self, ok: bool, now_ms: u64) {
        if self.policy.failures == 0 {
            return;
        }
        self.breaker = match (self.breaker, ok) {
            (_, true) => Breaker::Closed { failures: 0 },
            (Breaker::Closed { failures }, false) if failures + 1 < self.policy.failures => {
                Breaker::Closed {
                    failures: failures + 1,
                }
            }
            // The threshold, a failed probe, or a late failure while open.
            (_, false) => Breaker::Open {
                until_ms: now_ms + u64::from(self.policy.open_ms),
            },
        };
    }

    /// Whether the breaker is open (or probing) at `now_ms`.
    pub fn is_open(&self) -> bool {
        !matches!(self.breaker, Breaker::Closed { .. })
    }

    fn roll_window(&mut self, now_ms: u64) {
        if now_ms >= self.window_start_ms + u64::from(self.policy.window_ms) {
            self.window_start_ms = now_ms;
            self.first_attempts = 0;
            self.retries = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> ServiceGuard {
        ServiceGuard::new(GuardPolicy::default(), 3_000)
    }

    #[test]
    fn opens_after_consecutive_failures_and_probes_once_per_open_period() {
        let mut g = guard();
        for i in 0..5 {
            assert_eq!(g.allow_first(1_000 + i), Ok(()));
            g.record(false, 1_000 + i);
        }
        assert!(g.is_open());
        assert_eq!(g.allow_first(2_000), Err(Refusal::Open));
        assert_eq!(g.allow_first(5_999), Err(Refusal::Open));
        // After open_ms one probe goes; others wait for it.
        assert_eq!(g.allow_first(6_010), Ok(()));
        assert_eq!(g.allow_first(6_011), Err(Refusal::Open));
        assert_eq!(
            g.allow_retry(6_012),
            Err(Refusal::Open),
            "a probe never retries"
        );
        g.record(false, 6_100);
        assert_eq!(
            g.allow_first(6_200),
            Err(Refusal::Open),
            "a failed probe reopens"
        );
        assert_eq!(g.allow_first(11_100), Ok(()));
        g.record(true, 11_150);
        assert!(!g.is_open());
        assert_eq!(g.allow_first(11_200), Ok(()));
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let mut g = guard();
        for _ in 0..4 {
            g.record(false, 0);
        }
        g.record(true, 0);
        for _ in 0..4 {
            g.record(false, 0);
        }
        assert!(!g.is_open());
        g.record(false, 0);
        assert!(g.is_open());
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced() {
        let mut g = guard();
        for _ in 0..5 {
            g.record(false, 0);
        }
        assert_eq!(g.allow_first(5_000), Ok(()));
        assert_eq!(g.allow_first(7_999), Err(Refusal::Open));
        assert_eq!(
            g.allow_first(8_000),
            Ok(()),
            "the first probe's request is gone"
        );
    }

    #[test]
    fn retries_are_bounded_by_the_budget() {
        let mut g = ServiceGuard::new(
            GuardPolicy {
                failures: 0,
                ..GuardPolicy::default()
            },
            3_000,
        );
        for _ in 0..100 {
            g.allow_first(1).unwrap();
        }
        // 10 minimum + 10 % of 100 first attempts.
        let granted = (0..100).filter(|_| g.allow_retry(2).is_ok()).count();
        assert_eq!(granted, 20);
        assert_eq!(g.allow_retry(3), Err(Refusal::Budget));
        // A new window, a new budget.
        assert_eq!(g.allow_retry(10_001), Ok(()));
    }

    #[test]
    fn unlimited_is_the_old_behaviour() {
        let mut g = ServiceGuard::new(GuardPolicy::unlimited(), 3_000);
        for _ in 0..1_000 {
            g.record(false, 0);
            assert_eq!(g.allow_first(0), Ok(()));
            assert_eq!(g.allow_retry(0), Ok(()));
        }
    }
}
