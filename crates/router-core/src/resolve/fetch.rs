//! A question memory could not answer: read the shared cache, call the
//! service ([`super::call`]), store its answer; when the service fails, a
//! stale entry (memory, else shared) or the legacy cell.

use crate::error::{RouterError, ServiceFailure};
use crate::log::CacheLevel;
use crate::question::ClassifyRequest;
use crate::trace::Trace;

use super::call::Answered;
use super::guard::Refusal;
use super::learn::{self, Scope};
use super::topology::{cache_tags, Classification};
use super::{
    claim_of, CachedAnswer, Platform, Resolution, Resolver, SharedCache, TopologyTransport,
    CONTRADICTED_NOT_FOUND_TTL_SECS,
};

/// The shared cache as one fetch finds it when it starts: the purge
/// generation its keys are under, and whether it is used at all.
#[derive(Clone, Copy)]
pub(super) struct SharedView {
    generation: u64,
    usable: bool,
}

impl SharedView {
    /// The shared key of the entry whose memory key is `entry_key`: its
    /// SHA-256 ([`ClassifyRequest::cache_key`]), under a purge generation
    /// prefixed by it.
    fn key(self, request: &ClassifyRequest, entry_key: &str) -> String {
        let k = ClassifyRequest::cache_key_of(request.kind, request.target, entry_key);
        if self.generation == 0 {
            k
        } else {
            format!("g{}/{k}", self.generation)
        }
    }
}

/// An expired shared entry read under purge `generation`, with the end of
/// its stale window (ms), kept for the failure path.
pub(super) struct SharedStale {
    generation: u64,
    answer: Option<(Classification, u64)>,
}

impl<T, C, P> Resolver<T, C, P>
where
    T: TopologyTransport,
    C: SharedCache,
    P: Platform,
{
    /// Shared cache, then the service, then a stale entry (memory, else
    /// shared). `key` is the canonical body (the memory key).
    pub(super) async fn fetch(
        &self,
        request: &ClassifyRequest,
        key: &str,
        trace: &Trace,
    ) -> Resolution {
        let shared = SharedView {
            generation: self.generation.get(),
            usable: self.shared_usable.get(),
        };
        let stale = match self.read_shared(request, key, shared).await {
            Ok(hit) => return hit,
            Err(stale) => stale,
        };
        let service = request.kind.service();
        let started = self.platform.now_ms();
        if let Err(refusal) = self.guard_of(service).borrow_mut().allow_first(started) {
            let why = match refusal {
                Refusal::Open => "circuit open",
                Refusal::Budget => "retry budget spent",
            };
            let error = service.failed(ServiceFailure::Guarded(why));
            return self.failed(request, key, error, 0, None, stale);
        }
        let (result, attempts) = self.call_service(service, request, key, trace).await;
        let service_ms = Some(self.platform.now_ms().saturating_sub(started));
        match result {
            Ok(answered) => Resolution {
                classification: Some(self.store(request, key, answered, shared, started)),
                level: CacheLevel::Service,
                attempts,
                service_ms,
                coalesced: false,
                error: None,
            },
            Err(error) => self.failed(request, key, error, attempts, service_ms, stale),
        }
    }

    /// A fresh shared entry answering `request`, kept in memory too; else
    /// the expired one that may stand in if the service fails. A learn
    /// question is answered by its own entry or a learned prefix of its
    /// path (the first found, in that order); any other by its own entry.
    async fn read_shared(
        &self,
        request: &ClassifyRequest,
        key: &str,
        shared: SharedView,
    ) -> Result<Resolution, SharedStale> {
        let mut stale = SharedStale {
            generation: shared.generation,
            answer: None,
        };
        if !shared.usable {
            return Err(stale);
        }
        let keys = shared_keys(request, key);
        for entry_key in &keys {
            let shared_key = shared.key(request, entry_key);
            let Some(answer) = self.shared.get(&shared_key).await else {
                continue;
            };
            let now = self.platform.now_ms();
            if shared.generation != self.generation.get() {
                // Purged while it was read: not cached, not answered.
            } else if answer.question != *entry_key {
                self.warn_mismatch(&shared_key, &answer.question, entry_key);
            } else if self.invalidated(claim_of(request, entry_key, key), &answer) {
                // Asked for before an invalidation that matches it: a
                // miss, and not a stale stand-in either.
            } else if answer.expires_at_ms > now {
                self.memory.borrow_mut().insert(
                    entry_key,
                    &answer,
                    self.cache.stale_if_error,
                    claim_of(request, entry_key, key),
                );
                return Ok(Resolution::hit(answer.classification, CacheLevel::CacheApi));
            } else if stale.answer.is_none() {
                let until = answer
                    .expires_at_ms
                    .saturating_add(u64::from(self.cache.stale_if_error) * 1000);
                stale.answer = Some((answer.classification, until));
            }
        }
        Err(stale)
    }

    /// A shared entry found under another question's key (never written
    /// so; kept out of line, as it never happens on a first request).
    #[cold]
    #[inline(never)]
    fn warn_mismatch(&self, shared_key: &str, question: &str, entry_key: &str) {
        self.platform.warn(&format!(
            "shared cache entry {shared_key} answers {question:?}, not {entry_key:?}: ignored"
        ));
    }

    /// Keeps the service's answer for its TTL (in memory, and in the
    /// shared cache), unless a purge or an invalidation came while it was
    /// asked for (`started`); returns its classification.
    fn store(
        &self,
        request: &ClassifyRequest,
        key: &str,
        answered: Answered,
        shared: SharedView,
        started: u64,
    ) -> Classification {
        let Answered {
            classification,
            raw,
            scope,
        } = answered;
        // A 404 for a key the cell list names contradicts the list: kept
        // briefly, in this isolate only (the edge routes the key by the
        // list meanwhile).
        let contradicted = classification == Classification::NotFound
            && request
                .value
                .as_deref()
                .is_some_and(|value| self.cells.named_by(request.kind, value).is_some());
        let ttl = if contradicted {
            self.platform.warn(&format!(
                "the topology service answered 404 for {} {:?}, a cell GITLAB_CELLS lists: routed by the list, asked again in {CONTRADICTED_NOT_FOUND_TTL_SECS} s",
                request.kind.name(),
                request.value.as_deref().unwrap_or("")
            ));
            Some(CONTRADICTED_NOT_FOUND_TTL_SECS)
        } else {
            self.cache.ttl(raw.cache_control.as_deref(), &classification)
        }
        .filter(|_| shared.generation == self.generation.get());
        let Some(ttl) = ttl else {
            return classification;
        };
        // A learned prefix is kept under the prefix, for every path under
        // it; anything else under its question.
        let entry_key = match scope {
            Scope::Prefix(prefix) => learn::prefix_key(&prefix),
            Scope::Exact => key.to_string(),
        };
        let answer = CachedAnswer {
            question: entry_key.clone(),
            tags: cache_tags(raw.cache_tag.as_deref(), request, &classification),
            classification,
            expires_at_ms: self.platform.now_ms() + u64::from(ttl) * 1000,
            asked_at_ms: started,
        };
        let claim = claim_of(request, &entry_key, key);
        // An invalidation applied while the call was under way may name
        // it: then it is answered, not cached.
        let cacheable = !self.invalidated(claim, &answer);
        if cacheable {
            self.memory
                .borrow_mut()
                .insert(&entry_key, &answer, self.cache.stale_if_error, claim);
        }
        if shared.usable && cacheable && !contradicted {
            self.shared.put(
                &shared.key(request, &entry_key),
                &answer,
                ttl.saturating_add(self.cache.stale_if_error),
            );
        }
        answer.classification
    }

    /// No answer from the service: a stale memory entry, else the stale
    /// shared entry read before the call (inside its window, and unless a
    /// purge came since), else the legacy cell.
    fn failed(
        &self,
        request: &ClassifyRequest,
        key: &str,
        error: RouterError,
        attempts: u32,
        service_ms: Option<u64>,
        shared: SharedStale,
    ) -> Resolution {
        let now = self.platform.now_ms();
        let stale = self
            .memory_lookup(request, key, now)
            .map(|(classification, _)| classification)
            .or(shared
                .answer
                .filter(|(_, until)| now < *until && shared.generation == self.generation.get())
                .map(|(classification, _)| classification));
        Resolution {
            level: if stale.is_some() {
                CacheLevel::Stale
            } else {
                CacheLevel::Fallback
            },
            classification: stale,
            attempts,
            service_ms,
            coalesced: false,
            error: Some(error),
        }
    }
}

/// The shared cache keys that may answer `request` (`key`: its own): its
/// own, then, for a learn question, every learned prefix of its path.
fn shared_keys(request: &ClassifyRequest, key: &str) -> Vec<String> {
    let mut keys = vec![key.to_string()];
    if let Some((_, path)) = request.learn_method_and_path() {
        push_prefix_keys(&mut keys, path);
    }
    keys
}

/// The keys of every learned prefix of `path`. Not inlined: a classify
/// question (every first request but route learning's) never needs it.
#[inline(never)]
fn push_prefix_keys(keys: &mut Vec<String>, path: &str) {
    keys.extend(learn::ancestors(path).map(learn::prefix_key));
}
