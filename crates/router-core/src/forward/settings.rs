//! What the forward phase reads of the isolate's settings: a view that
//! `Config::forward_settings` builds, so the phase never reads `Config`.

use super::signing::Signer;
use crate::resolve::cells::CellList;

/// The isolate's settings as the forward phase reads them.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'i> {
    /// The address when nothing else names one (`GITLAB_PROXY_HOST`).
    pub proxy_host: Option<&'i str>,
    /// `https` or, for the local stack, `http`.
    pub upstream_scheme: &'static str,
    /// The request signer (`Err`: its key did not parse).
    pub signer: &'i Result<Option<Signer>, String>,
    pub signing_policy: SigningPolicy,
    pub not_found_delay: Option<DelayRange>,
    pub smoke_test_secret: Option<&'i str>,
    /// `GITLAB_CELLS`, for static targets and circuits.
    pub cells: &'i CellList,
    /// A body-less request with no response headers by then fails.
    pub headers_timeout_ms: u32,
    /// `Retry-After` of the outage answer: the Topology Service guard's
    /// open time, in whole seconds.
    pub outage_retry_after_secs: u32,
}

/// What the router does when it cannot sign (no key, or a malformed one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningPolicy {
    /// Refuse to proxy: 503. For cells that only accept signed requests.
    Required,
    /// Forward unsigned (logged at start-up): for a migration period.
    Optional,
}

/// The random delay added to a 404 a cell returns for a classified
/// request (`GITLAB_NOT_FOUND_DELAY_MS=min-max`), so its timing does not
/// tell which cell answered, and so whether a private group exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayRange {
    pub min_ms: u32,
    pub max_ms: u32,
}

impl DelayRange {
    /// The longest delay accepted: a 404 held longer than this is a
    /// client-visible outage, not a mitigation.
    pub const MAX_MS: u32 = 10_000;

    /// `"50-250"` (inclusive bounds) or `"100"` (always 100 ms); `None`
    /// when malformed, reversed or above [`DelayRange::MAX_MS`].
    pub fn parse(value: &str) -> Option<DelayRange> {
        let number = |s: &str| -> Option<u32> {
            let s = s.trim();
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let (min_ms, max_ms) = match value.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(value)?;
                (n, n)
            }
        };
        (min_ms <= max_ms && max_ms <= Self::MAX_MS).then_some(DelayRange { min_ms, max_ms })
    }

    /// A delay drawn uniformly from the range; `random` in `[0, 1)`.
    pub fn pick(self, random: f64) -> u32 {
        let span = f64::from(self.max_ms - self.min_ms + 1);
        let offset = (span * random.clamp(0.0, 1.0)) as u32;
        self.min_ms + offset.min(self.max_ms - self.min_ms)
    }
}
