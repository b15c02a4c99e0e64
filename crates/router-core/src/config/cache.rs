//! How long the Topology Service's answers are kept ([`CachePolicy`], whose
//! defaults these are).

use super::setting::{Meaning, Number, Reader, Row};
use crate::resolve::topology::CachePolicy;

/// The cache's settings, each bound to its field of `p`.
fn numbers<M: Meaning>(p: &mut CachePolicy) -> [Number<'_, M>; 4] {
    [
        Number {
            name: "GITLAB_CACHE_MAX_TTL_SECONDS",
            meaning: M::of("cap on the service's `Cache-Control`"),
            min: 0,
            max: 86_400 * 7,
            value: &mut p.max_ttl,
        },
        Number {
            name: "GITLAB_CACHE_DEFAULT_TTL_SECONDS",
            meaning: M::of("TTL when the service sends none"),
            min: 0,
            max: 86_400,
            value: &mut p.default_ttl,
        },
        Number {
            name: "GITLAB_CACHE_NEGATIVE_TTL_SECONDS",
            meaning: M::of("cap for 404 answers"),
            min: 0,
            max: 86_400,
            value: &mut p.negative_ttl,
        },
        Number {
            name: "GITLAB_CACHE_STALE_IF_ERROR_SECONDS",
            meaning: M::of(
                "how long an expired answer may stand in for a failing service (memory \
                      entries are kept that long unless evicted, Cache API entries for their TTL \
                      plus this)",
            ),
            min: 0,
            max: 86_400,
            value: &mut p.stale_if_error,
        },
    ]
}

pub(super) fn rows() -> Vec<Row> {
    numbers(&mut CachePolicy::default())
        .iter()
        .map(Number::row)
        .collect()
}

pub(super) fn read(r: &mut Reader<'_>) -> CachePolicy {
    let mut cache = CachePolicy::default();
    for number in numbers(&mut cache) {
        r.number(number);
    }
    cache
}
