//! The resolver's memory cache: one per isolate, bounded, answers kept
//! past their TTL for the stale window.

use std::collections::{HashMap, VecDeque};

use super::topology::Classification;
use super::CachedAnswer;

/// A bounded memory cache with CLOCK eviction (an LRU approximation at
/// O(1) per operation). Entries outlive their TTL by the stale window so a
/// failing service can be answered from them.
pub(super) struct MemoryCache {
    capacity: usize,
    map: HashMap<String, MemoryEntry>,
    order: VecDeque<String>,
}

pub(super) struct MemoryEntry {
    pub(super) classification: Classification,
    expires_at_ms: u64,
    stale_until_ms: u64,
    referenced: bool,
    /// What targeted invalidation matches ([`super::invalidate`]): when
    /// the service was asked, the answer's tags, and its claim
    /// ([`crate::question::CLAIM_TYPES`] index and value) if it answers one.
    pub(super) asked_at_ms: u64,
    /// The tags joined by `,` (one allocation, not one per tag).
    pub(super) tags: Box<str>,
    pub(super) claim: Option<(usize, Box<str>)>,
}

impl MemoryCache {
    pub(super) fn new(capacity: usize) -> Self {
        MemoryCache {
            capacity: capacity.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Forgets every entry (a purge).
    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// How many entries it holds.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The entry and whether it is still fresh; entries past their stale
    /// window are not answered. They stay until overwritten or evicted, so
    /// every key in `map` is in `order` exactly once.
    pub(super) fn get(&mut self, key: &str, now: u64) -> Option<(&MemoryEntry, bool)> {
        let entry = self.map.get_mut(key)?;
        if entry.stale_until_ms <= now {
            return None;
        }
        entry.referenced = true;
        let fresh = entry.expires_at_ms > now;
        Some((entry, fresh))
    }

    /// Forgets the entries `drop` names (targeted invalidation, once per
    /// control read); returns how many.
    pub(super) fn drop_where(&mut self, mut drop: impl FnMut(&MemoryEntry) -> bool) -> usize {
        let before = self.map.len();
        self.map.retain(|_, entry| !drop(entry));
        let dropped = before - self.map.len();
        if dropped > 0 {
            let map = &self.map;
            self.order.retain(|key| map.contains_key(key));
        }
        dropped
    }

    /// Keeps `answer` under `key`; `claim`: the claim it answers, if any.
    pub(super) fn insert(
        &mut self,
        key: String,
        answer: &CachedAnswer,
        stale_secs: u32,
        claim: Option<(usize, &str)>,
    ) {
        let entry = MemoryEntry {
            asked_at_ms: answer.asked_at_ms,
            tags: answer.tags.join(",").into(),
            claim: claim.map(|(i, v)| (i, v.into())),
            classification: answer.classification.clone(),
            expires_at_ms: answer.expires_at_ms,
            stale_until_ms: answer
                .expires_at_ms
                .saturating_add(u64::from(stale_secs) * 1000),
            referenced: false,
        };
        if let Some(existing) = self.map.get_mut(&key) {
            *existing = entry;
            return;
        }
        while self.map.len() >= self.capacity {
            let Some(victim) = self.order.pop_front() else {
                break;
            };
            match self.map.get_mut(&victim) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    self.order.push_back(victim);
                }
                Some(_) => {
                    self.map.remove(&victim);
                }
                None => {}
            }
        }
        self.order.push_back(key.clone());
        self.map.insert(key, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_keys_asked_again_are_kept_once() {
        // A key that expires and is answered again, over and over, must not
        // pile up in the eviction order (a leak in a long-lived isolate, and a
        // stale copy that would evict the live entry early).
        let mut cache = MemoryCache::new(10);
        let answer = |expires_at_ms| CachedAnswer {
            question: String::new(),
            classification: Classification::NotFound,
            expires_at_ms,
            tags: Vec::new(),
            asked_at_ms: 0,
        };
        for round in 0..50u64 {
            let now = round * 100_000;
            assert!(
                cache.get("cell-2", now).is_none(),
                "expired in round {round}"
            );
            cache.insert("cell-2".into(), &answer(now + 1_000), 1, None);
            assert!(matches!(cache.get("cell-2", now), Some((_, true))));
        }
        assert_eq!((cache.map.len(), cache.order.len()), (1, 1));
        // Dropped and asked again: still once.
        assert_eq!(cache.drop_where(|_| true), 1);
        assert_eq!((cache.map.len(), cache.order.len()), (0, 0));
        cache.insert("cell-2".into(), &answer(1_000), 1, None);
        assert_eq!((cache.map.len(), cache.order.len()), (1, 1));
    }
}
