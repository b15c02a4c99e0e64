//! The resolver's memory cache: one per isolate, bounded in entries and in
//! bytes, answers kept past their TTL for the stale window.

use std::collections::{HashMap, VecDeque};
use std::mem::{align_of, size_of};
use std::rc::Rc;

use super::topology::Classification;
use super::CachedAnswer;

/// The most bytes the memory cache holds ([`MemoryCache::bytes`]): 32 MiB
/// of an isolate's 128 MB. The rest is the wasm module's own (its code
/// compiled by V8, its linear memory's stack, data and the compiled
/// rulesets: a few MB), V8's heap for the JavaScript entry and the requests
/// in flight, and a margin for the allocator's fragmentation (wasm memory
/// never shrinks). Derivation and figures: docs/decisions.md, "The memory
/// cache is bounded in bytes".
pub const MEMORY_CACHE_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// A bounded memory cache with CLOCK eviction (an LRU approximation at
/// O(1) per operation). Entries outlive their TTL by the stale window so a
/// failing service can be answered from them.
///
/// Bounded twice: at most `capacity` entries and at most `budget` bytes,
/// entries evicted by CLOCK until both hold. Each key is kept once, shared
/// by the map and the eviction order (`Rc<str>`), and a claim's value
/// is a span of the key when the key holds it verbatim.
pub(super) struct MemoryCache {
    capacity: usize,
    budget: usize,
    /// The entries' own heap bytes ([`MemoryEntry::bytes`]), summed.
    entry_bytes: usize,
    /// The most `map.capacity()` has been: the map's buckets never go (it
    /// is never shrunk), but its `capacity()` dips while removed entries'
    /// buckets wait to be reused.
    map_capacity: usize,
    map: HashMap<Rc<str>, MemoryEntry>,
    order: VecDeque<Rc<str>>,
}

pub(super) struct MemoryEntry {
    pub(super) classification: Classification,
    expires_at_ms: u64,
    stale_until_ms: u64,
    referenced: bool,
    /// What targeted invalidation matches ([`super::invalidate`]): when
    /// the service was asked, the answer's tags, and its claim
    /// ([`crate::question::CLAIM_TYPES`] index and value,
    /// [`MemoryEntry::claim`]) if it answers one.
    pub(super) asked_at_ms: u64,
    /// The tags joined by `,` (one allocation, not one per tag).
    pub(super) tags: Box<str>,
    claim: Option<(usize, ClaimText)>,
    /// The heap bytes this entry holds ([`entry_bytes`]).
    bytes: usize,
}

/// Where an entry's claim value is kept.
enum ClaimText {
    /// `key[start..start + len]`: the key (the classify body) holds the
    /// value verbatim, as it does unless JSON escaping changed it.
    InKey { start: u32, len: u32 },
    /// A copy of its own.
    Own(Box<str>),
}

impl ClaimText {
    fn of(key: &str, value: &str) -> ClaimText {
        let span = key
            .find(value)
            .and_then(|start| Some((u32::try_from(start).ok()?, u32::try_from(value.len()).ok()?)));
        match span {
            Some((start, len)) => ClaimText::InKey { start, len },
            None => ClaimText::Own(value.into()),
        }
    }
}

impl MemoryEntry {
    /// The claim this entry answers (type index and value), `key` being
    /// the key it is stored under.
    pub(super) fn claim<'a>(&'a self, key: &'a str) -> Option<(usize, &'a str)> {
        let (index, text) = self.claim.as_ref()?;
        let value = match text {
            ClaimText::InKey { start, len } => {
                let start = *start as usize;
                key.get(start..start.checked_add(*len as usize)?)?
            }
            ClaimText::Own(value) => value,
        };
        Some((*index, value))
    }
}

/// The heap bytes of an entry under a key of `key_len` bytes: the key's
/// one allocation (the `Rc`'s two counts and the text), the tags, a
/// claim's own copy and the classification's addresses. Its slots in the
/// map and the order are the tables' ([`MemoryCache::table_bytes`]).
fn entry_bytes(key_len: usize, entry: &MemoryEntry) -> usize {
    let key = (2 * size_of::<usize>() + key_len).next_multiple_of(align_of::<usize>());
    let claim = match &entry.claim {
        Some((_, ClaimText::Own(value))) => value.len(),
        _ => 0,
    };
    let classification = match &entry.classification {
        Classification::Cell(cell) => {
            cell.address.capacity() + cell.registry_address.as_ref().map_or(0, String::capacity)
        }
        Classification::NotFound => 0,
    };
    key + entry.tags.len() + claim + classification
}

impl MemoryCache {
    pub(super) fn new(capacity: usize, budget: usize) -> Self {
        MemoryCache {
            capacity: capacity.max(1),
            budget,
            entry_bytes: 0,
            map_capacity: 0,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Forgets every entry (a purge).
    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
        self.entry_bytes = 0;
    }

    /// How many entries it holds.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// The heap bytes it holds: the entries' own and the tables'.
    pub(super) fn bytes(&self) -> usize {
        self.entry_bytes.saturating_add(self.table_bytes())
    }

    /// The map's and the order's allocations, by capacity: a slot (key
    /// pointer and entry) and a control byte per bucket, a bucket per
    /// 7/8 of the capacity (the hash map's load factor), and a key pointer
    /// per place in the order.
    fn table_bytes(&self) -> usize {
        let slot = size_of::<(Rc<str>, MemoryEntry)>() + 1;
        let buckets = self.map_capacity.saturating_mul(8) / 7;
        buckets
            .saturating_mul(slot)
            .saturating_add(self.order.capacity().saturating_mul(size_of::<Rc<str>>()))
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

    /// Forgets the entries `drop` names, given each key and entry
    /// (targeted invalidation, once per control read); returns how many.
    pub(super) fn drop_where(&mut self, mut drop: impl FnMut(&str, &MemoryEntry) -> bool) -> usize {
        let before = self.map.len();
        let mut freed = 0;
        self.map.retain(|key, entry| {
            let dropped = drop(key, entry);
            if dropped {
                freed += entry.bytes;
            }
            !dropped
        });
        self.entry_bytes = self.entry_bytes.saturating_sub(freed);
        let dropped = before - self.map.len();
        if dropped > 0 {
            let map = &self.map;
            self.order.retain(|key| map.contains_key(key));
        }
        dropped
    }

    /// Keeps `answer` under `key`; `claim`: the claim it answers, if any.
    /// An entry bigger than the whole budget is not kept.
    pub(super) fn insert(
        &mut self,
        key: &str,
        answer: &CachedAnswer,
        stale_secs: u32,
        claim: Option<(usize, &str)>,
    ) {
        let mut entry = MemoryEntry {
            asked_at_ms: answer.asked_at_ms,
            tags: answer.tags.join(",").into(),
            claim: claim.map(|(i, v)| (i, ClaimText::of(key, v))),
            classification: answer.classification.clone(),
            expires_at_ms: answer.expires_at_ms,
            stale_until_ms: answer
                .expires_at_ms
                .saturating_add(u64::from(stale_secs) * 1000),
            referenced: false,
            bytes: 0,
        };
        entry.bytes = entry_bytes(key.len(), &entry);
        if let Some(existing) = self.map.get_mut(key) {
            self.entry_bytes = self.entry_bytes.saturating_sub(existing.bytes) + entry.bytes;
            *existing = entry;
            self.evict_while(|cache| cache.bytes() > cache.budget);
            return;
        }
        let incoming = entry.bytes;
        if incoming > self.budget {
            return;
        }
        // The tables grow before the entries are counted against the
        // budget, so their growth is counted too.
        self.map.reserve(1);
        self.order.reserve(1);
        self.map_capacity = self.map_capacity.max(self.map.capacity());
        self.evict_while(|cache| {
            cache.map.len() >= cache.capacity
                || cache.bytes().saturating_add(incoming) > cache.budget
        });
        let key: Rc<str> = Rc::from(key);
        self.order.push_back(Rc::clone(&key));
        self.map.insert(key, entry);
        self.entry_bytes += incoming;
    }

    /// Evicts by CLOCK while `over` holds: the entry at the front of the
    /// order goes unless it was read since it last came round (then it goes
    /// to the back, unmarked).
    fn evict_while(&mut self, over: impl Fn(&MemoryCache) -> bool) {
        while over(self) {
            let Some(victim) = self.order.pop_front() else {
                break;
            };
            match self.map.get_mut(&victim) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    self.order.push_back(victim);
                }
                Some(_) => {
                    if let Some(evicted) = self.map.remove(&victim) {
                        self.entry_bytes = self.entry_bytes.saturating_sub(evicted.bytes);
                    }
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(expires_at_ms: u64) -> CachedAnswer {
        CachedAnswer {
            question: String::new(),
            classification: Classification::NotFound,
            expires_at_ms,
            tags: Vec::new(),
            asked_at_ms: 0,
        }
    }

    #[test]
    fn expired_keys_asked_again_are_kept_once() {
        // A key that expires and is answered again, over and over, must not
        // pile up in the eviction order (a leak in a long-lived isolate, and a
        // stale copy that would evict the live entry early).
        let mut cache = MemoryCache::new(10, MEMORY_CACHE_BUDGET_BYTES);
        for round in 0..50u64 {
            let now = round * 100_000;
            assert!(
                cache.get("cell-2", now).is_none(),
                "expired in round {round}"
            );
            cache.insert("cell-2", &answer(now + 1_000), 1, None);
            assert!(matches!(cache.get("cell-2", now), Some((_, true))));
        }
        assert_eq!((cache.map.len(), cache.order.len()), (1, 1));
        // Dropped and asked again: still once.
        assert_eq!(cache.drop_where(|_, _| true), 1);
        assert_eq!((cache.map.len(), cache.order.len()), (0, 0));
        assert_eq!(cache.entry_bytes, 0);
        cache.insert("cell-2", &answer(1_000), 1, None);
        assert_eq!((cache.map.len(), cache.order.len()), (1, 1));
    }

    #[test]
    fn long_keys_are_evicted_down_to_the_byte_budget() {
        const BUDGET: usize = 256 * 1024;
        let mut cache = MemoryCache::new(10_000, BUDGET);
        let key = |i: usize| format!("{i:06}/{}", "a/".repeat(2_000));
        for i in 0..1_000 {
            cache.insert(&key(i), &answer(u64::MAX), 1, None);
            assert!(cache.bytes() <= BUDGET, "{} bytes after {i}", cache.bytes());
        }
        // Far fewer than the entry bound: the bytes bind.
        let kept = cache.len();
        assert!((50..200).contains(&kept), "{kept} entries kept");
        assert_eq!(cache.order.len(), kept);
        // A key read since it last came round outlives the others (CLOCK).
        let hot = key(999);
        assert!(cache.get(&hot, 0).is_some());
        for i in 1_000..1_000 + kept {
            cache.insert(&key(i), &answer(u64::MAX), 1, None);
        }
        assert!(cache.get(&hot, 0).is_some(), "the entry read was evicted");
        // Dropped and purged, the entries' bytes go with them.
        let before = cache.bytes();
        assert!(cache.drop_where(|_, _| true) > 0);
        assert!(cache.bytes() < before / 4, "{} of {before}", cache.bytes());
        cache.insert(&key(0), &answer(u64::MAX), 1, None);
        cache.clear();
        assert_eq!((cache.len(), cache.entry_bytes), (0, 0));
    }

    #[test]
    fn an_entry_bigger_than_the_budget_is_not_kept() {
        let mut cache = MemoryCache::new(10, 4096);
        cache.insert("small", &answer(u64::MAX), 1, None);
        cache.insert(&"a".repeat(8192), &answer(u64::MAX), 1, None);
        assert_eq!(cache.len(), 1);
        assert!(cache.get("small", 0).is_some());
    }

    #[test]
    fn a_claim_is_a_span_of_its_key_unless_escaping_changed_it() {
        let mut cache = MemoryCache::new(10, MEMORY_CACHE_BUDGET_BYTES);
        let plain = r#"{"claims":[{"route":"gitlab-org/gitlab"}]}"#;
        let escaped = r#"{"claims":[{"route":"a\"b"}]}"#;
        cache.insert(plain, &answer(u64::MAX), 1, Some((0, "gitlab-org/gitlab")));
        cache.insert(escaped, &answer(u64::MAX), 1, Some((0, r#"a"b"#)));
        let claim = |cache: &MemoryCache, key: &str| {
            let (k, entry) = cache.map.get_key_value(key).map(|(k, e)| (&**k, e))?;
            let own = matches!(entry.claim, Some((_, ClaimText::Own(_))));
            entry.claim(k).map(|(i, v)| (i, v.to_string(), own))
        };
        assert_eq!(
            claim(&cache, plain),
            Some((0, "gitlab-org/gitlab".into(), false))
        );
        assert_eq!(claim(&cache, escaped), Some((0, r#"a"b"#.into(), true)));
        // What drop_where hands its caller is the same.
        let mut seen = Vec::new();
        cache.drop_where(|key, e| {
            seen.push(e.claim(key).map(|(_, v)| v.to_string()));
            false
        });
        seen.sort();
        assert_eq!(
            seen,
            [Some(r#"a"b"#.to_string()), Some("gitlab-org/gitlab".into())]
        );
    }
}
