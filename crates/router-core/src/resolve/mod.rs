//! The resolve phase: a classify request to a cell, through a bounded
//! in-isolate memory cache, the shared cache (the Cloudflare Cache API on
//! the edge), and the Topology Service with timeouts, retries and back-off;
//! a stale entry is preferred over an error, and every failure ends at the
//! legacy cell (SPEC §6).
//!
//! An answer the router may serve stale is kept for the whole stale window
//! at both levels: a memory entry until evicted (the memory cache is
//! bounded), a shared entry for its TTL plus the stale window (it outlives
//! eviction from memory). Freshness is the entry's own `expires_at_ms`, so
//! a shared entry past it is not a hit but still the stale answer when the
//! service fails.
//!
//! I/O is behind three traits that the edge implements with `worker` types
//! and tests implement with fakes. Futures carry no `Send` bound: wasm is
//! single-threaded.
//!
//! Concurrent misses for one key share one service call, but a waiting
//! request never awaits the leading request's future: workerd binds every
//! continuation to the request whose I/O woke it and cancels a request that
//! only waits on another's. Waiters instead poll a shared slot on their own
//! timers (every [`COALESCE_POLL_MS`]), which costs them a few milliseconds
//! only when they actually coalesce.

mod cached_json;
mod call;
pub mod cells;
mod fetch;
pub mod guard;
pub mod invalidate;
pub mod learn;
mod memory;
pub mod topology;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::error::{RouterError, ServiceError, ServiceFailure};
use crate::log::CacheLevel;
use crate::out_of_line::out_of_line;
pub use crate::platform::Platform;
use crate::question::{ClassifyKind, ClassifyRequest, CLAIM_TYPES};
use crate::resolve::cells::CellList;
use crate::resolve::guard::{GuardPolicy, ServiceGuard};
use crate::resolve::invalidate::{Index, Invalidation};
use crate::resolve::topology::{CachePolicy, Classification};
use crate::trace::Trace;
use memory::MemoryCache;
pub use memory::MEMORY_CACHE_BUDGET_BYTES;

/// What the Topology Service sent back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawAnswer {
    pub status: u16,
    pub body: String,
    pub cache_control: Option<String>,
    pub cache_tag: Option<String>,
}

/// Why a call did not produce an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    Timeout,
    Connect(String),
}

/// Posts a classify body to the Topology Service.
#[allow(async_fn_in_trait)]
pub trait TopologyTransport {
    /// One attempt, abandoned after `timeout_ms`; the call carries the
    /// request's `trace` headers.
    async fn classify(
        &self,
        body: &str,
        timeout_ms: u32,
        trace: &Trace,
    ) -> Result<RawAnswer, TransportError>;

    /// One route-learning attempt ([`crate::resolve::learn`]): `GET` the learn
    /// endpoint of the cell chosen for it, for `method` and `path`. None by
    /// default: a transport without a cell to ask fails every call, and the
    /// request goes to the legacy cell.
    async fn learn(
        &self,
        _method: &str,
        _path: &str,
        _timeout_ms: u32,
        _trace: &Trace,
    ) -> Result<RawAnswer, TransportError> {
        Err(TransportError::Connect(
            "no cell to ask is configured".to_string(),
        ))
    }
}

/// An answer as the caches keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnswer {
    /// The canonical classify body this answers ([`ClassifyRequest::body`]).
    /// A reader compares it with its own question: an entry that answers
    /// another question is a miss, whatever key it was found under.
    pub question: String,
    pub classification: Classification,
    /// Milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    pub tags: Vec<String>,
    /// When the service was asked for it (ms since the epoch; the answer
    /// is no older). Targeted invalidation compares it with an
    /// invalidation's time; 0 (entries written before it was stored) is
    /// older than every invalidation.
    #[serde(default)]
    pub asked_at_ms: u64,
}

/// The shared (level 2) cache: the Cache API on the edge.
#[allow(async_fn_in_trait)]
pub trait SharedCache {
    async fn get(&self, key: &str) -> Option<CachedAnswer>;
    /// Starts a write and returns at once: the request that caused it must
    /// not wait for it (the edge hands it to `waitUntil`). The entry is
    /// kept `keep_secs`: its TTL plus the stale window, so that it can
    /// stand in for a failing service after it expires (its
    /// `expires_at_ms` says when).
    fn put(&self, key: &str, answer: &CachedAnswer, keep_secs: u32);
}

/// How the client calls the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPolicy {
    /// Per attempt.
    pub timeout_ms: u32,
    /// Attempts after the first.
    pub retries: u32,
    pub backoff_base_ms: u32,
    pub backoff_max_ms: u32,
    /// Entries the memory cache holds.
    pub memory_entries: usize,
    /// The retry budget and circuit breaker ([`crate::resolve::guard`]).
    pub guard: GuardPolicy,
}

impl Default for ClientPolicy {
    fn default() -> Self {
        ClientPolicy {
            timeout_ms: 1000,
            retries: 2,
            backoff_base_ms: 50,
            backoff_max_ms: 500,
            memory_entries: 10_000,
            guard: GuardPolicy::default(),
        }
    }
}

impl ClientPolicy {
    /// Back-off before attempt `n + 1` (n ≥ 1): exponential, capped, with
    /// "equal jitter" (half fixed, half random).
    pub fn backoff_ms(&self, n: u32, random: f64) -> u32 {
        let exp = self
            .backoff_base_ms
            .saturating_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX))
            .min(self.backoff_max_ms);
        let half = exp / 2;
        half + (f64::from(exp - half) * random.clamp(0.0, 1.0)) as u32
    }

    /// The longest a resolution can take: every attempt timing out plus
    /// every back-off at its maximum.
    pub fn worst_case_ms(&self) -> u32 {
        let attempts = self.retries + 1;
        let backoffs: u32 = (1..attempts).map(|n| self.backoff_ms(n, 1.0)).sum();
        self.timeout_ms
            .saturating_mul(attempts)
            .saturating_add(backoffs)
    }
}

/// The result of resolving one classify request.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// `None`: nothing usable; the legacy cell serves the request.
    pub classification: Option<Classification>,
    pub level: CacheLevel,
    /// Service attempts this request made or waited on (0 on a cache hit).
    pub attempts: u32,
    /// Time spent on the service, in ms, when it was called.
    pub service_ms: Option<u64>,
    /// Whether this request waited on another request's service call.
    pub coalesced: bool,
    pub error: Option<RouterError>,
}

impl Resolution {
    /// An answer from a cache level: no service call, no error.
    fn hit(classification: Classification, level: CacheLevel) -> Resolution {
        Resolution {
            classification: Some(classification),
            level,
            attempts: 0,
            service_ms: None,
            coalesced: false,
            error: None,
        }
    }
}

/// How often a request waiting on another's service call looks for the
/// answer.
pub const COALESCE_POLL_MS: u32 = 5;

/// Where the request that calls the service leaves its result for the
/// requests waiting on the same key.
type Slot = Rc<RefCell<Option<Resolution>>>;

/// Resolves classify requests; one per isolate.
pub struct Resolver<T, C, P> {
    transport: T,
    shared: C,
    platform: P,
    cache: CachePolicy,
    client: ClientPolicy,
    memory: RefCell<MemoryCache>,
    /// Keyed by the canonical body, like the memory cache.
    inflight: RefCell<HashMap<String, Slot>>,
    guard: RefCell<ServiceGuard>,
    /// Route learning's own breaker and budget: a failing learn endpoint
    /// must not stop Topology Service calls, nor the reverse.
    learn_guard: RefCell<ServiceGuard>,
    /// The purge generation ([`Resolver::purge`]): part of every shared
    /// cache key, so raising it leaves older entries unread.
    generation: std::cell::Cell<u64>,
    /// Whether the shared cache is read and written: not while the purge
    /// generation is unknown ([`Resolver::set_shared_usable`]).
    shared_usable: std::cell::Cell<bool>,
    /// `GITLAB_CELLS`: a by-cell invalidation's addresses, and the cells a
    /// `SESSION_PREFIX` / `CELL_ID` 404 contradicts.
    cells: CellList,
    /// The targeted invalidations in force ([`Resolver::invalidate`]).
    invalidations: RefCell<Index>,
}

/// How long a 404 is kept for a `SESSION_PREFIX` or `CELL_ID` key that
/// names a cell of `GITLAB_CELLS` (in memory only; the edge routes such a
/// key by the list meanwhile): the service contradicts the list, so it is
/// asked again soon instead of after the negative TTL.
pub const CONTRADICTED_NOT_FOUND_TTL_SECS: u32 = 1;

impl<T, C, P> Resolver<T, C, P>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    pub fn new(
        transport: T,
        shared: C,
        platform: P,
        cache: CachePolicy,
        client: ClientPolicy,
    ) -> Self {
        let memory = RefCell::new(MemoryCache::new(
            client.memory_entries,
            MEMORY_CACHE_BUDGET_BYTES,
        ));
        let guard = RefCell::new(ServiceGuard::new(client.guard, client.worst_case_ms()));
        let learn_guard = RefCell::new(ServiceGuard::new(client.guard, client.worst_case_ms()));
        Resolver {
            guard,
            learn_guard,
            transport,
            shared,
            platform,
            cache,
            client,
            memory,
            inflight: RefCell::new(HashMap::new()),
            generation: std::cell::Cell::new(0),
            shared_usable: std::cell::Cell::new(true),
            cells: CellList::default(),
            invalidations: RefCell::new(Index::default()),
        }
    }

    /// The cell list (`GITLAB_CELLS`) the resolver knows of.
    pub fn with_cells(mut self, cells: CellList) -> Self {
        self.cells = cells;
        self
    }

    /// Applies the control document's targeted invalidations (once per
    /// control read, not per request): merges `list` with those already in
    /// force (one left out of a later document stays until its horizon),
    /// drops the memory entries they match that were asked for before
    /// them, and from now on treats such shared entries as misses. Returns
    /// the invalidations in force and the memory entries dropped.
    pub fn invalidate(&self, list: &[Invalidation]) -> (usize, usize) {
        let now = self.platform.now_ms();
        let horizon = invalidate::horizon_ms(&self.cache);
        let index = self
            .invalidations
            .borrow()
            .rebuild(list, &self.cells, now, horizon);
        let dropped = if index.is_empty() {
            0
        } else {
            self.memory.borrow_mut().drop_where(|key, e| {
                let claim = e.claim(key);
                index
                    .invalidated_at(claim, e.tags.split(','), &e.classification)
                    .is_some_and(|at| e.asked_at_ms < at)
            })
        };
        let in_force = index.in_force().len();
        *self.invalidations.borrow_mut() = index;
        (in_force, dropped)
    }

    /// Whether an answer asked for at `asked_at` to `request` (or to the
    /// learned prefix it was found under: no claim) is invalidated.
    fn invalidated(&self, claim: Option<(usize, &str)>, answer: &CachedAnswer) -> bool {
        self.invalidations
            .borrow()
            .invalidated_at(
                claim,
                answer.tags.iter().map(String::as_str),
                &answer.classification,
            )
            .is_some_and(|at| answer.asked_at_ms < at)
    }

    /// Stops or resumes using the shared cache: the edge stops it until the
    /// control document's purge generation is known, so an isolate never
    /// reads answers a purge it has not heard of made unusable.
    pub fn set_shared_usable(&self, usable: bool) {
        self.shared_usable.set(usable);
    }

    /// Makes every cached classification unusable at once: empties the
    /// memory cache and reads and writes the shared cache under
    /// `generation` from now on (the control document's
    /// `purge_generation`; other isolates follow when they read it). An
    /// answer already being fetched is returned to its request but not
    /// cached.
    pub fn purge(&self, generation: u64) {
        self.generation.set(generation);
        self.memory.borrow_mut().clear();
    }

    /// The purge generation in use.
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    pub fn shared_cache(&self) -> &C {
        &self.shared
    }

    /// Entries in the memory cache (for tests and stats).
    pub fn memory_len(&self) -> usize {
        self.memory.borrow().len()
    }

    /// The heap bytes the memory cache holds, at most
    /// [`MEMORY_CACHE_BUDGET_BYTES`] (for tests and stats).
    pub fn memory_bytes(&self) -> usize {
        self.memory.borrow().bytes()
    }

    /// Resolves `request`; never fails: the worst outcome is
    /// `classification: None` (legacy cell) with the error that led there.
    pub async fn resolve(&self, request: &ClassifyRequest) -> Resolution {
        self.resolve_traced(request, &Trace::default()).await
    }

    /// [`Resolver::resolve`] for the request `trace` identifies: a service
    /// call it makes carries its headers (requests that wait on another's
    /// call share that call's).
    pub async fn resolve_traced(&self, request: &ClassifyRequest, trace: &Trace) -> Resolution {
        // The in-isolate maps are keyed by the question itself: two
        // questions can never share an entry, and no hash is computed.
        let key = request.body();
        if let Some(res) = self.memory_hit(request, &key) {
            return res;
        }

        // One call per key at a time: later requests wait on the first.
        let existing = self.inflight.borrow().get(&key).cloned();
        if let Some(slot) = existing {
            // Out of line: an isolate's first request never waits.
            return out_of_line(self.coalesce(slot, request, &key, trace)).await;
        }
        let slot: Slot = Rc::new(RefCell::new(None));
        self.inflight
            .borrow_mut()
            .insert(key.clone(), Rc::clone(&slot));
        let res = self.fetch(request, &key, trace).await;
        *slot.borrow_mut() = Some(res.clone());
        self.inflight.borrow_mut().remove(&key);
        res
    }

    /// A fresh answer from the in-isolate memory cache, without awaiting:
    /// the edge's synchronous fast path asks this first and takes the
    /// asynchronous [`Resolver::resolve`] only when it is `None`.
    pub fn resolve_from_memory(&self, request: &ClassifyRequest) -> Option<Resolution> {
        self.memory_hit(request, &request.body())
    }

    fn memory_hit(&self, request: &ClassifyRequest, key: &str) -> Option<Resolution> {
        match self.memory_lookup(request, key, self.platform.now_ms()) {
            Some((classification, true)) => {
                Some(Resolution::hit(classification, CacheLevel::Memory))
            }
            _ => None,
        }
    }

    /// The memory entry answering `request` (`key`: its body) and whether
    /// it is fresh. A learn question is answered by its own entry (an exact
    /// path or a 404), else by the longest learned prefix that covers its
    /// path; a fresh answer wins over a stale one.
    fn memory_lookup(
        &self,
        request: &ClassifyRequest,
        key: &str,
        now: u64,
    ) -> Option<(Classification, bool)> {
        let mut memory = self.memory.borrow_mut();
        let own = memory
            .get(key, now)
            .map(|(e, fresh)| (e.classification.clone(), fresh));
        let Some((_, path)) = request.learn_method_and_path() else {
            return own;
        };
        if matches!(own, Some((_, true))) {
            return own;
        }
        let mut stale = own;
        for prefix in learn::ancestors(path) {
            match memory.get(&learn::prefix_key(prefix), now) {
                Some((e, true)) => return Some((e.classification.clone(), true)),
                Some((e, false)) if stale.is_none() => {
                    stale = Some((e.classification.clone(), false));
                }
                _ => {}
            }
        }
        stale
    }

    /// The answer of the request already asking for `key` (its `slot`),
    /// else one of our own.
    async fn coalesce(
        &self,
        slot: Slot,
        request: &ClassifyRequest,
        key: &str,
        trace: &Trace,
    ) -> Resolution {
        match self.wait_for(&slot).await {
            Some(res) if !res.error.as_ref().is_some_and(is_callers_own) => Resolution {
                coalesced: true,
                ..res
            },
            // The leading request never finished (its context may have
            // been cancelled), or the service refused something of its
            // own (a 4xx: its trace headers, not the shared question):
            // ask on our own.
            _ => self.fetch(request, key, trace).await,
        }
    }

    /// Polls `slot` on this request's own timers until the leading request
    /// fills it, or its worst case has passed.
    async fn wait_for(&self, slot: &Slot) -> Option<Resolution> {
        let mut waited = 0;
        let limit = self.client.worst_case_ms() + 100;
        while waited <= limit {
            self.platform.sleep(COALESCE_POLL_MS).await;
            waited += COALESCE_POLL_MS;
            if let Some(res) = slot.borrow().as_ref() {
                return Some(res.clone());
            }
        }
        None
    }
}

/// Whether a failed lookup may be the calling request's own doing rather
/// than the service's: a 4xx answer (a 404 is an answer, not an error) can
/// only come from what differs between requests asking the same question,
/// their trace headers. Requests coalesced on such a call ask themselves.
fn is_callers_own(error: &RouterError) -> bool {
    matches!(
        error,
        RouterError::Service(ServiceError {
            failure: ServiceFailure::Status(400..=499),
            ..
        })
    )
}

/// The claim an entry stored under `entry_key` answers: the request's, if
/// it asks one and the entry is its own (`key`), not a learned prefix.
fn claim_of<'a>(
    request: &'a ClassifyRequest,
    entry_key: &str,
    key: &str,
) -> Option<(usize, &'a str)> {
    match request.kind {
        ClassifyKind::Claim(i) if entry_key == key && i < CLAIM_TYPES.len() => {
            request.value.as_deref().map(|v| (i, v))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
