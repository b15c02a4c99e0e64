use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;

use futures_executor::LocalPool;
use futures_util::task::LocalSpawnExt;

use super::*;
use crate::error::{Service, ServiceError, ServiceFailure};
use crate::question::{ClassifyKind, Target};
use crate::resolve::guard::GuardPolicy;
use crate::resolve::topology::CellAnswer;
use crate::testutil::{FakePlatform, Gate};

/// A scripted Topology Service that counts calls and can be slow, fail, or
/// yield once so concurrent callers overlap.
#[derive(Default)]
struct FakeService {
    script: RefCell<VecDeque<Result<RawAnswer, TransportError>>>,
    calls: Cell<u32>,
    platform: Rc<FakePlatform>,
    /// While closed, calls wait, so concurrent callers overlap for sure.
    gate: Rc<Gate>,
    /// Learn calls, as `METHOD path`.
    learned: RefCell<Vec<String>>,
}

impl FakeService {
    fn push(&self, answer: Result<RawAnswer, TransportError>) {
        self.script.borrow_mut().push_back(answer);
    }
}

fn found(address: &str, cache_control: &str) -> Result<RawAnswer, TransportError> {
    Ok(RawAnswer {
        status: 200,
        body: format!(r#"{{"action":"PROXY","proxy":{{"address":"{address}"}}}}"#),
        cache_control: Some(cache_control.into()),
        cache_tag: Some("cell-x".into()),
    })
}

fn status(code: u16) -> Result<RawAnswer, TransportError> {
    Ok(RawAnswer {
        status: code,
        body: r#"{"code":5,"message":"not found","details":[]}"#.into(),
        cache_control: Some("max-age=300".into()),
        cache_tag: None,
    })
}

impl TopologyTransport for Rc<FakeService> {
    async fn classify(
        &self,
        _body: &str,
        timeout_ms: u32,
        _: &crate::trace::Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.calls.set(self.calls.get() + 1);
        self.gate.wait().await;
        let next = self
            .script
            .borrow_mut()
            .pop_front()
            .unwrap_or(Err(TransportError::Connect("script empty".into())));
        if next == Err(TransportError::Timeout) {
            self.platform
                .now
                .set(self.platform.now.get() + u64::from(timeout_ms));
        } else {
            self.platform.now.set(self.platform.now.get() + 5);
        }
        next
    }

    async fn learn(
        &self,
        method: &str,
        path: &str,
        timeout_ms: u32,
        trace: &crate::trace::Trace,
    ) -> Result<RawAnswer, TransportError> {
        self.learned.borrow_mut().push(format!("{method} {path}"));
        self.classify("", timeout_ms, trace).await
    }
}

fn learned(body: &str, cache_control: &str) -> Result<RawAnswer, TransportError> {
    Ok(RawAnswer {
        status: 200,
        body: body.into(),
        cache_control: Some(cache_control.into()),
        cache_tag: None,
    })
}

fn learn_q(path: &str) -> ClassifyRequest {
    ClassifyRequest::learn("GET", path, Target::Web)
}

const PREFIX_G: &str =
    r#"{"path":"/g/p","cell":"cell_2","source":"routable","address":"cell-2:8080"}"#;

#[test]
fn a_learned_prefix_serves_every_path_under_it_without_a_call() {
    let (resolver, service, shared, _) = setup();
    service.push(learned(PREFIX_G, "max-age=60"));
    let first = run(resolver.resolve(&learn_q("/g/p/-/issues")));
    assert_eq!(
        (first.level, address(&first)),
        (CacheLevel::Service, Some("cell-2:8080"))
    );
    assert_eq!(service.learned.borrow().as_slice(), ["GET /g/p/-/issues"]);
    for path in ["/g/p", "/g/p/-/merge_requests/1", "/g/p/sub/deeper/x"] {
        let hit = resolver
            .resolve_from_memory(&learn_q(path))
            .unwrap_or_else(|| panic!("{path} not served by the prefix"));
        assert_eq!(
            (hit.level, address(&hit)),
            (CacheLevel::Memory, Some("cell-2:8080"))
        );
    }
    // Not under it: a sibling, the parent, a longer segment.
    for path in ["/g/q", "/g", "/g/px/y"] {
        assert_eq!(resolver.resolve_from_memory(&learn_q(path)), None, "{path}");
    }
    assert_eq!(service.calls.get(), 1);
    // The shared cache holds it under the prefix: a cold isolate asking
    // another path under it needs no call either.
    assert_eq!(shared.entries.borrow().len(), 1);
    let (cold, cold_service, cold_shared, _) = setup();
    *cold_shared.entries.borrow_mut() = shared.entries.borrow().clone();
    let r = run(cold.resolve(&learn_q("/g/p/-/wikis")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::CacheApi, Some("cell-2:8080"))
    );
    assert_eq!(cold_service.calls.get(), 0);
    assert!(cold.resolve_from_memory(&learn_q("/g/p/x")).is_some());
}

#[test]
fn an_exact_learn_answer_covers_only_its_method_and_path() {
    let (resolver, service, _, _) = setup();
    service.push(learned(
        r#"{"path":"/-/profile","cell":"cell_1","source":"fixed","exact":true,"address":"cell-1"}"#,
        "max-age=60",
    ));
    run(resolver.resolve(&learn_q("/-/profile")));
    assert!(resolver
        .resolve_from_memory(&learn_q("/-/profile"))
        .is_some());
    assert_eq!(
        resolver.resolve_from_memory(&learn_q("/-/profile/keys")),
        None
    );
    let post = ClassifyRequest::learn("POST", "/-/profile", Target::Web);
    assert_eq!(resolver.resolve_from_memory(&post), None);
    // A 404 is a negative answer for that path alone.
    service.push(status(404));
    let none = run(resolver.resolve(&learn_q("/nobody/x")));
    assert_eq!(none.classification, Some(Classification::NotFound));
    assert!(resolver
        .resolve_from_memory(&learn_q("/nobody/x"))
        .is_some());
    assert_eq!(resolver.resolve_from_memory(&learn_q("/nobody/y")), None);
    assert_eq!(service.calls.get(), 2);
}

#[test]
fn a_failing_or_garbage_learn_call_ends_at_the_legacy_cell() {
    let (resolver, service, _, _) = setup();
    service.push(learned(r#"{"path":42}"#, "max-age=60"));
    let garbage = run(resolver.resolve(&learn_q("/g/p")));
    assert_eq!(
        (garbage.level, garbage.classification.clone()),
        (CacheLevel::Fallback, None)
    );
    assert!(
        matches!(
            garbage.error,
            Some(RouterError::Service(ServiceError {
                service: Service::Learn,
                failure: ServiceFailure::BadAnswer(_)
            }))
        ),
        "{garbage:?}"
    );
    // Not cached: the next request asks again.
    for _ in 0..3 {
        service.push(status(500));
    }
    let failed = run(resolver.resolve(&learn_q("/g/p")));
    assert_eq!(failed.classification, None);
    assert_eq!(
        failed.error,
        Some(Service::Learn.failed(ServiceFailure::Status(500)))
    );
    assert_eq!(failed.attempts, 3, "retried like a service 5xx");
    // A prefix that does not cover the path is refused.
    service.push(learned(PREFIX_G, "max-age=60"));
    let other = run(resolver.resolve(&learn_q("/h/x")));
    assert!(matches!(
        other.error,
        Some(RouterError::Service(ServiceError {
            service: Service::Learn,
            failure: ServiceFailure::BadAnswer(_)
        }))
    ));
    assert_eq!(resolver.resolve_from_memory(&learn_q("/g/p/x")), None);
}

#[test]
fn concurrent_first_requests_for_a_path_share_one_learn_call() {
    let (resolver, service, _, _) = setup();
    service.push(learned(PREFIX_G, "max-age=60"));
    let (_, results) = fifty_at_once(&resolver, &service, &learn_q("/g/p/-/issues"));
    assert_eq!(service.calls.get(), 1);
    assert!(results.iter().all(|r| address(r) == Some("cell-2:8080")));
    assert_eq!(results.iter().filter(|r| r.coalesced).count(), 49);
}

/// The Cache API: an entry put is gone `keep_secs` later (its max-age) on
/// the platform's clock; one inserted by a test stays.
#[derive(Default)]
struct FakeShared {
    entries: RefCell<HashMap<String, CachedAnswer>>,
    kept_until: RefCell<HashMap<String, u64>>,
    clock: Option<Rc<FakePlatform>>,
    puts: Cell<u32>,
    keeps: RefCell<Vec<u32>>,
}

impl SharedCache for Rc<FakeShared> {
    async fn get(&self, key: &str) -> Option<CachedAnswer> {
        let until = self.kept_until.borrow().get(key).copied();
        match (&self.clock, until) {
            (Some(clock), Some(until)) if clock.now.get() >= until => None,
            _ => self.entries.borrow().get(key).cloned(),
        }
    }
    fn put(&self, key: &str, answer: &CachedAnswer, keep_secs: u32) {
        self.puts.set(self.puts.get() + 1);
        self.keeps.borrow_mut().push(keep_secs);
        if let Some(clock) = &self.clock {
            self.kept_until.borrow_mut().insert(
                key.to_string(),
                clock.now.get() + u64::from(keep_secs) * 1000,
            );
        }
        self.entries
            .borrow_mut()
            .insert(key.to_string(), answer.clone());
    }
}

type TestResolver = Resolver<Rc<FakeService>, Rc<FakeShared>, Rc<FakePlatform>>;

fn setup() -> (
    Rc<TestResolver>,
    Rc<FakeService>,
    Rc<FakeShared>,
    Rc<FakePlatform>,
) {
    let gate = Rc::new(Gate::default());
    let platform = Rc::new(FakePlatform {
        now: Cell::new(1_000_000),
        gate: gate.clone(),
        ..Default::default()
    });
    let service = Rc::new(FakeService {
        platform: platform.clone(),
        gate,
        ..Default::default()
    });
    let shared = Rc::new(FakeShared {
        clock: Some(platform.clone()),
        ..Default::default()
    });
    let resolver = Rc::new(Resolver::new(
        service.clone(),
        shared.clone(),
        platform.clone(),
        CachePolicy::default(),
        ClientPolicy::default(),
    ));
    (resolver, service, shared, platform)
}

fn session(prefix: &str) -> ClassifyRequest {
    ClassifyRequest {
        kind: ClassifyKind::SessionPrefix,
        value: Some(prefix.into()),
        method: None,
        target: Target::Web,
    }
}

/// Resolves `question` for 50 requests at once while the service is held:
/// the calls made while they all wait, and their results.
fn fifty_at_once(
    resolver: &Rc<TestResolver>,
    service: &Rc<FakeService>,
    question: &ClassifyRequest,
) -> (u32, Vec<Resolution>) {
    service.gate.close();
    let mut pool = LocalPool::new();
    let results = Rc::new(RefCell::new(Vec::new()));
    for _ in 0..50 {
        let (resolver, results, question) = (resolver.clone(), results.clone(), question.clone());
        pool.spawner()
            .spawn_local(async move {
                let r = resolver.resolve(&question).await;
                results.borrow_mut().push(r);
            })
            .unwrap();
    }
    pool.run_until_stalled();
    let waiting = service.calls.get();
    service.gate.open();
    pool.run();
    let results = results.borrow().clone();
    (waiting, results)
}

fn run<F: Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

fn address(r: &Resolution) -> Option<&str> {
    match &r.classification {
        Some(Classification::Cell(CellAnswer { address, .. })) => Some(address),
        _ => None,
    }
}

#[test]
fn second_request_is_a_memory_hit_until_the_ttl_ends() {
    let (resolver, service, shared, platform) = setup();
    service.push(found("cell-2", "max-age=60"));
    let first = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (first.level, address(&first)),
        (CacheLevel::Service, Some("cell-2"))
    );
    let second = run(resolver.resolve(&session("cell-2")));
    assert_eq!((second.level, second.attempts), (CacheLevel::Memory, 0));
    assert_eq!(service.calls.get(), 1);
    // Kept for the TTL plus the stale window.
    assert_eq!(shared.keeps.borrow().as_slice(), &[660]);

    // Past the TTL the shared cache's copy is expired too (still there, not
    // a hit): the service again.
    platform.now.set(platform.now.get() + 61_000);
    service.push(found("cell-2", "max-age=60"));
    let third = run(resolver.resolve(&session("cell-2")));
    assert_eq!(third.level, CacheLevel::Service);
    assert_eq!(service.calls.get(), 2);
}

#[test]
fn memory_lookup_without_awaiting_answers_only_fresh_entries() {
    let (resolver, service, shared, platform) = setup();
    assert_eq!(resolver.resolve_from_memory(&session("cell-2")), None);
    service.push(found("cell-2", "max-age=60"));
    run(resolver.resolve(&session("cell-2")));
    let hit = resolver
        .resolve_from_memory(&session("cell-2"))
        .expect("a fresh entry");
    assert_eq!(
        (hit.level, address(&hit)),
        (CacheLevel::Memory, Some("cell-2"))
    );
    assert_eq!(resolver.resolve_from_memory(&session("cell-3")), None);
    // Only the memory cache: another isolate with the shared cache's copy
    // has no hit.
    let (other, _, other_shared, _) = setup();
    let copied = shared.entries.borrow().clone();
    assert_eq!(copied.len(), 1);
    *other_shared.entries.borrow_mut() = copied;
    assert_eq!(other.resolve_from_memory(&session("cell-2")), None);
    // A stale entry (past max-age, within stale-if-error) needs the service.
    platform.now.set(platform.now.get() + 61_000);
    assert_eq!(resolver.resolve_from_memory(&session("cell-2")), None);
    assert_eq!(service.calls.get(), 1);
}

#[test]
fn shared_cache_answers_a_cold_isolate() {
    let (resolver, service, shared, platform) = setup();
    service.push(found("cell-3", "max-age=60"));
    run(resolver.resolve(&session("cell-3")));
    // A new isolate: empty memory, same shared cache.
    let fresh = Rc::new(Resolver::new(
        service.clone(),
        shared.clone(),
        platform.clone(),
        CachePolicy::default(),
        ClientPolicy::default(),
    ));
    let r = run(fresh.resolve(&session("cell-3")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::CacheApi, Some("cell-3"))
    );
    assert_eq!(service.calls.get(), 1);
    assert_eq!(
        run(fresh.resolve(&session("cell-3"))).level,
        CacheLevel::Memory
    );
}

#[test]
fn not_found_is_cached_for_the_negative_ttl() {
    let (resolver, service, shared, _) = setup();
    service.push(status(404));
    let r = run(resolver.resolve(&session("cell-9")));
    assert_eq!(
        (r.level, r.classification.clone()),
        (CacheLevel::Service, Some(Classification::NotFound))
    );
    for _ in 0..99 {
        assert_eq!(
            run(resolver.resolve(&session("cell-9"))).level,
            CacheLevel::Memory
        );
    }
    assert_eq!(service.calls.get(), 1);
    assert_eq!(
        shared.keeps.borrow().as_slice(),
        &[630],
        "404 capped at the negative TTL, kept for the stale window past it"
    );
}

#[test]
fn no_store_answers_are_used_but_not_kept() {
    let (resolver, service, shared, _) = setup();
    service.push(found("cell-2", "no-store"));
    service.push(found("cell-2", "no-store"));
    assert_eq!(
        address(&run(resolver.resolve(&session("cell-2")))),
        Some("cell-2")
    );
    assert_eq!(
        run(resolver.resolve(&session("cell-2"))).level,
        CacheLevel::Service
    );
    assert_eq!(shared.puts.get(), 0);
}

#[test]
fn retries_5xx_and_timeouts_then_succeeds() {
    let (resolver, service, _, _) = setup();
    service.push(status(503));
    service.push(Err(TransportError::Timeout));
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, r.attempts, address(&r)),
        (CacheLevel::Service, 3, Some("cell-2"))
    );
}

#[test]
fn never_retries_4xx() {
    let (resolver, service, _, _) = setup();
    service.push(status(400));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, r.attempts), (CacheLevel::Fallback, 1));
    assert_eq!(
        r.error,
        Some(Service::Topology.failed(ServiceFailure::Status(400)))
    );
}

#[test]
fn service_down_falls_back_within_the_worst_case_time() {
    let (resolver, service, _, platform) = setup();
    for _ in 0..3 {
        service.push(Err(TransportError::Timeout));
    }
    let start = platform.now_ms();
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, r.classification.clone(), r.attempts),
        (CacheLevel::Fallback, None, 3)
    );
    let took = platform.now_ms() - start;
    assert!(
        took <= u64::from(ClientPolicy::default().worst_case_ms()),
        "took {took} ms"
    );
    assert!(took >= 3000, "three 1 s timeouts: {took} ms");
}

#[test]
fn stale_memory_entry_beats_an_error() {
    let (resolver, service, shared, platform) = setup();
    service.push(found("cell-2", "max-age=60"));
    run(resolver.resolve(&session("cell-2")));
    platform.now.set(platform.now.get() + 120_000);
    shared.entries.borrow_mut().clear();
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, address(&r)), (CacheLevel::Stale, Some("cell-2")));
    assert!(r.error.is_some());
    // Beyond the stale window: the legacy cell.
    platform.now.set(platform.now.get() + 700_000);
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(r.level, CacheLevel::Fallback);
}

/// A resolver over `service`'s and `platform`'s fakes and a shared cache,
/// with a memory cache of `memory_entries`.
fn small_memory(
    service: &Rc<FakeService>,
    shared: &Rc<FakeShared>,
    platform: &Rc<FakePlatform>,
    memory_entries: usize,
) -> Rc<TestResolver> {
    Rc::new(Resolver::new(
        service.clone(),
        shared.clone(),
        platform.clone(),
        CachePolicy::default(),
        ClientPolicy {
            memory_entries,
            ..Default::default()
        },
    ))
}

/// With more keys than the memory cache holds, an answer evicted
/// from memory was gone from the Cache API too once its TTL passed
/// (max-age was the TTL), so a failing service sent its key to the legacy
/// cell well inside the stale window. The shared entry now stays for the
/// TTL plus the window and stands in, also while the breaker is open.
#[test]
fn an_answer_evicted_from_memory_stands_in_from_the_shared_cache() {
    let (_, service, shared, platform) = setup();
    let resolver = small_memory(&service, &shared, &platform, 1);
    for i in 0..6 {
        service.push(found(&format!("cell-{i}"), "max-age=60"));
        run(resolver.resolve(&session(&format!("cell-{i}"))));
    }
    assert_eq!(resolver.memory_len(), 1, "cell-0..4 evicted from memory");
    platform.now.set(platform.now.get() + 120_000);
    for _ in 0..20 {
        service.push(status(503));
    }
    let mut guarded = 0;
    for i in 0..5 {
        let key = format!("cell-{i}");
        let r = run(resolver.resolve(&session(&key)));
        assert_eq!(
            (r.level, address(&r)),
            (CacheLevel::Stale, Some(key.as_str())),
            "{r:?}"
        );
        guarded += u32::from(
            r.error == Some(Service::Topology.failed(ServiceFailure::Guarded("circuit open"))),
        );
    }
    assert!(guarded > 0, "the breaker opened and stale answers went on");
    // Past the stale window: the legacy cell.
    platform.now.set(platform.now.get() + 600_000);
    let r = run(resolver.resolve(&session("cell-0")));
    assert_eq!((r.level, r.classification), (CacheLevel::Fallback, None));
}

#[test]
fn a_stale_shared_entry_is_used_only_inside_the_window_and_for_its_own_question() {
    let (_, service, shared, platform) = setup();
    let resolver = small_memory(&service, &shared, &platform, 1);
    let now = platform.now.get();
    let entry = |question: &str, expires_at_ms| CachedAnswer {
        question: session(question).body(),
        classification: Classification::Cell(CellAnswer {
            address: "from-shared".into(),
            registry_address: None,
        }),
        expires_at_ms,
        tags: Vec::new(),
        asked_at_ms: 0,
    };
    let mut entries = shared.entries.borrow_mut();
    // Expired 599 s ago: within the window.
    entries.insert(
        session("cell-2").cache_key(),
        entry("cell-2", now - 599_000),
    );
    // Expired 601 s ago (the Cache API still had it): past the window.
    entries.insert(
        session("cell-3").cache_key(),
        entry("cell-3", now - 601_000),
    );
    // Under cell-4's key, another question's stale answer.
    entries.insert(
        session("cell-4").cache_key(),
        entry(FORGED_CELL_2, now - 1_000),
    );
    drop(entries);
    let down = || {
        for _ in 0..3 {
            service.push(Err(TransportError::Connect("down".into())));
        }
    };
    down();
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Stale, Some("from-shared"))
    );
    for key in ["cell-3", "cell-4"] {
        down();
        let r = run(resolver.resolve(&session(key)));
        assert_eq!((r.level, r.classification), (CacheLevel::Fallback, None));
    }
    assert_eq!(platform.warnings.borrow().len(), 1, "the forged entry");
    // An expired entry is never a hit: with the service up (and the
    // breaker's open period over) it is asked.
    platform.now.set(platform.now.get() + 10_000);
    service.script.borrow_mut().clear();
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Service, Some("cell-2"))
    );
}

#[test]
fn a_stale_shared_entry_read_before_a_purge_is_not_answered() {
    let (_, service, shared, platform) = setup();
    let resolver = small_memory(&service, &shared, &platform, 1);
    service.push(found("cell-2", "max-age=60"));
    run(resolver.resolve(&session("cell-2")));
    service.push(found("cell-3", "max-age=60"));
    run(resolver.resolve(&session("cell-3")));
    platform.now.set(platform.now.get() + 120_000);
    // cell-2's request reads its stale shared entry, then waits on the
    // service; a purge comes; the service fails.
    service.gate.close();
    let mut pool = LocalPool::new();
    let result = Rc::new(RefCell::new(None));
    {
        let (resolver, result) = (resolver.clone(), result.clone());
        pool.spawner()
            .spawn_local(async move {
                *result.borrow_mut() = Some(resolver.resolve(&session("cell-2")).await);
            })
            .unwrap();
    }
    pool.run_until_stalled();
    assert_eq!(service.calls.get(), 3, "waiting on the service");
    resolver.purge(1);
    service.push(Err(TransportError::Connect("down".into())));
    service.gate.open();
    pool.run();
    let r = result.borrow_mut().take().unwrap();
    assert_eq!((r.level, r.classification), (CacheLevel::Fallback, None));
}

#[test]
fn an_evicted_learned_prefix_stands_in_from_the_shared_cache() {
    let (_, service, shared, platform) = setup();
    let resolver = small_memory(&service, &shared, &platform, 1);
    service.push(learned(PREFIX_G, "max-age=60"));
    run(resolver.resolve(&learn_q("/g/p/-/issues")));
    service.push(status(404));
    run(resolver.resolve(&learn_q("/other")));
    assert_eq!(resolver.resolve_from_memory(&learn_q("/g/p/x")), None);
    platform.now.set(platform.now.get() + 120_000);
    for _ in 0..3 {
        service.push(status(500));
    }
    let r = run(resolver.resolve(&learn_q("/g/p/-/wikis")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Stale, Some("cell-2:8080"))
    );
}

#[test]
fn unreadable_answers_fall_back_without_retry() {
    let (resolver, service, _, _) = setup();
    service.push(Ok(RawAnswer {
        status: 200,
        body: "<html>".into(),
        ..Default::default()
    }));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, r.attempts), (CacheLevel::Fallback, 1));
    assert!(matches!(
        r.error,
        Some(RouterError::Service(ServiceError {
            service: Service::Topology,
            failure: ServiceFailure::BadAnswer(_)
        }))
    ));
}

#[test]
fn concurrent_misses_share_one_call() {
    let (resolver, service, _, _) = setup();
    service.push(found("cell-2", "max-age=60"));
    let (calls_while_waiting, results) = fifty_at_once(&resolver, &service, &session("cell-2"));
    assert_eq!(calls_while_waiting, 1, "one call while 50 requests wait");
    assert_eq!(results.len(), 50);
    assert!(results.iter().all(|r| address(r) == Some("cell-2")));
    assert_eq!(service.calls.get(), 1);
    assert_eq!(results.iter().filter(|r| r.coalesced).count(), 49);
}

#[test]
fn a_4xx_of_the_leading_call_is_not_shared_with_the_requests_waiting_on_it() {
    // The service refused the leader's call (e.g. its traceparent): the
    // others ask on their own and are routed.
    let (resolver, service, _, _) = setup();
    service.push(status(400));
    for _ in 0..49 {
        service.push(found("cell-2", "max-age=60"));
    }
    let (_, results) = fifty_at_once(&resolver, &service, &session("cell-2"));
    assert_eq!(results.len(), 50);
    let failed: Vec<&Resolution> = results.iter().filter(|r| r.error.is_some()).collect();
    assert_eq!(failed.len(), 1, "only the leader's own call failed");
    assert_eq!(
        failed[0].error,
        Some(Service::Topology.failed(ServiceFailure::Status(400)))
    );
    assert!(results
        .iter()
        .filter(|r| r.error.is_none())
        .all(|r| address(r) == Some("cell-2")));
    // A 5xx is the service's: it is shared (no stampede of own calls).
    let (resolver, service, _, _) = setup();
    for _ in 0..3 {
        service.push(status(503));
    }
    let (_, results) = fifty_at_once(&resolver, &service, &session("cell-3"));
    assert_eq!(results.iter().filter(|r| r.coalesced).count(), 49);
    assert_eq!(service.calls.get(), 3, "the leader's attempts only");
}

#[test]
fn an_unusable_shared_cache_is_neither_read_nor_written() {
    let (resolver, service, shared, _) = setup();
    service.push(found("cell-2", "max-age=60"));
    run(resolver.resolve(&session("cell-2")));
    assert_eq!(shared.puts.get(), 1);
    // A fresh isolate before it knows the purge generation: the shared
    // entry is there but not read; its own answer is not written.
    let (cold, cold_service, cold_shared, _) = setup();
    *cold_shared.entries.borrow_mut() = shared.entries.borrow().clone();
    cold.set_shared_usable(false);
    cold_service.push(found("cell-3", "max-age=60"));
    let r = run(cold.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Service, Some("cell-3"))
    );
    assert_eq!(cold_shared.puts.get(), 0);
    cold.set_shared_usable(true);
    let r = run(cold.resolve(&session("cell-2")));
    assert_eq!(r.level, CacheLevel::Memory);
}

#[test]
fn memory_cache_is_bounded() {
    let (_, service, shared, platform) = setup();
    let resolver = Rc::new(Resolver::new(
        service.clone(),
        shared,
        platform,
        CachePolicy::default(),
        ClientPolicy {
            memory_entries: 100,
            ..Default::default()
        },
    ));
    for i in 0..1000 {
        service.push(found("cell-2", "max-age=60"));
        run(resolver.resolve(&session(&format!("cell-{i}"))));
    }
    assert_eq!(resolver.memory_len(), 100);
}

#[test]
fn backoff_grows_caps_and_jitters() {
    let p = ClientPolicy::default();
    assert_eq!(p.backoff_ms(1, 0.0), 25);
    assert_eq!(p.backoff_ms(1, 1.0), 50);
    assert_eq!(p.backoff_ms(2, 1.0), 100);
    assert_eq!(p.backoff_ms(10, 1.0), 500);
    assert_eq!(p.backoff_ms(40, 1.0), 500);
    assert_eq!(p.worst_case_ms(), 3000 + 50 + 100);
}

/// The audit's forged session prefix, whose FNV-1a key was `cell-2`'s
///.
const FORGED_CELL_2: &str = "cell-296371275170884690274592503895712990101298676239";

#[test]
fn a_forged_value_cannot_poison_its_victims_entry() {
    let (resolver, service, shared, _) = setup();
    service.push(status(404));
    let forged = run(resolver.resolve(&session(FORGED_CELL_2)));
    assert_eq!(forged.classification, Some(Classification::NotFound));
    service.push(found("cell-2", "max-age=60"));
    let victim = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (victim.level, address(&victim)),
        (CacheLevel::Service, Some("cell-2"))
    );
    assert_eq!(service.calls.get(), 2, "two questions, two calls");
    assert_eq!(shared.entries.borrow().len(), 2, "two shared entries");
    assert_eq!(resolver.memory_len(), 2, "two memory entries");
}

#[test]
fn a_shared_entry_answering_another_question_is_a_miss_and_a_warning() {
    let (resolver, service, shared, platform) = setup();
    // Whatever lands under cell-2's key (a collision, a bug, an old format),
    // an answer to another question is not used.
    let key = session("cell-2").cache_key();
    shared.entries.borrow_mut().insert(
        key.clone(),
        CachedAnswer {
            question: session(FORGED_CELL_2).body(),
            classification: Classification::NotFound,
            expires_at_ms: platform.now.get() + 60_000,
            tags: Vec::new(),
            asked_at_ms: 0,
        },
    );
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Service, Some("cell-2"))
    );
    let warnings = platform.warnings.borrow();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(&key), "{warnings:?}");
    // And the service's answer replaced the entry.
    assert_eq!(
        shared.entries.borrow()[&key].question,
        session("cell-2").body()
    );
}

#[test]
fn a_redirect_is_a_service_error_retried_like_a_5xx() {
    let (resolver, service, shared, _) = setup();
    for _ in 0..3 {
        service.push(status(307));
    }
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, r.attempts), (CacheLevel::Fallback, 3));
    assert_eq!(
        r.error,
        Some(Service::Topology.failed(ServiceFailure::Status(307)))
    );
    assert!(shared.entries.borrow().is_empty(), "nothing cached");
    service.push(status(302));
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, r.attempts), (CacheLevel::Service, 2));
}

/// Service calls for 1,000 requests, each for a new key, 10 ms apart,
/// while every call fails (connection refused).
fn calls_during_an_outage(guard: GuardPolicy) -> u32 {
    let (_, service, shared, platform) = setup();
    let resolver = Resolver::new(
        service.clone(),
        shared,
        platform.clone(),
        CachePolicy::default(),
        ClientPolicy {
            guard,
            ..Default::default()
        },
    );
    for i in 0..1000 {
        platform.now.set(platform.now.get() + 10);
        let r = run(resolver.resolve(&session(&format!("cell-{i}"))));
        assert_eq!(r.level, CacheLevel::Fallback);
        assert!(r.error.is_some());
    }
    service.calls.get()
}

/// Service calls per 1,000 requests during an outage,
/// before (every request 1 + 2 retries) and after (retry budget and
/// breaker). Run with `--nocapture` to see them.
#[test]
fn an_outage_costs_the_service_about_one_call_per_open_period() {
    let before = calls_during_an_outage(GuardPolicy::unlimited());
    let after = calls_during_an_outage(GuardPolicy::default());
    eprintln!("service calls per 1,000 requests during an outage: before {before}, after {after}");
    assert_eq!(before, 3000);
    // 5 failures open the breaker; then one probe per 5 s over the ~10 s
    // the requests take (plus their own attempts' time).
    assert!(after <= 10, "{after}");
}

#[test]
fn an_open_breaker_answers_from_stale_entries_without_calling() {
    let (resolver, service, _, platform) = setup();
    service.push(found("cell-2", "max-age=1"));
    run(resolver.resolve(&session("cell-2")));
    platform.now.set(platform.now.get() + 2_000);
    // Five failed attempts (two requests) open the breaker.
    for key in ["cell-3", "cell-4"] {
        run(resolver.resolve(&session(key)));
    }
    let calls = service.calls.get();
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r), r.attempts),
        (CacheLevel::Stale, Some("cell-2"), 0)
    );
    assert_eq!(
        r.error,
        Some(Service::Topology.failed(ServiceFailure::Guarded("circuit open")))
    );
    assert_eq!(service.calls.get(), calls, "no call while open");
    // After the open period one probe goes; its success closes the breaker.
    platform.now.set(platform.now.get() + 5_000);
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!((r.level, r.attempts), (CacheLevel::Service, 1));
}

#[test]
fn a_purge_makes_every_cached_answer_unusable_at_once() {
    let (resolver, service, shared, _platform) = setup();
    service.push(found("cell-2", "max-age=600"));
    run(resolver.resolve(&session("cell-2")));
    assert!(resolver.resolve_from_memory(&session("cell-2")).is_some());

    resolver.purge(1);
    assert_eq!(resolver.generation(), 1);
    assert_eq!(resolver.memory_len(), 0, "memory emptied");
    assert!(resolver.resolve_from_memory(&session("cell-2")).is_none());
    // The shared copy of generation 0 is not read: the service is asked,
    // and its answer stored under the new generation.
    service.push(found("cell-3", "max-age=600"));
    let after = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (after.level, address(&after)),
        (CacheLevel::Service, Some("cell-3"))
    );
    assert_eq!(service.calls.get(), 2);
    let keys: Vec<String> = shared.entries.borrow().keys().cloned().collect();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().any(|k| k.starts_with("g1/")), "{keys:?}");

    // An isolate still on generation 0 finds its old entry; one that moved
    // on finds the new one: entries of generations never mix.
    let (other, other_service, _, _) = setup();
    for (key, answer) in shared.entries.borrow().iter() {
        other
            .shared_cache()
            .entries
            .borrow_mut()
            .insert(key.clone(), answer.clone());
    }
    other.purge(1);
    let moved = run(other.resolve(&session("cell-2")));
    assert_eq!(
        (moved.level, address(&moved)),
        (CacheLevel::CacheApi, Some("cell-3"))
    );
    assert_eq!(other_service.calls.get(), 0);
}

#[test]
fn no_stale_answer_survives_a_purge() {
    let (resolver, service, _shared, _platform) = setup();
    service.push(found("cell-2", "max-age=600"));
    run(resolver.resolve(&session("cell-2")));
    resolver.purge(5);
    // The service is down now: without the purge the stale entry would
    // answer; after it, the legacy cell.
    service.push(Err(TransportError::Connect("down".into())));
    service.push(Err(TransportError::Connect("down".into())));
    service.push(Err(TransportError::Connect("down".into())));
    let res = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (res.level, res.classification),
        (CacheLevel::Fallback, None)
    );
}

#[test]
fn a_purge_drops_learned_prefixes_too() {
    let (resolver, service, shared, _) = setup();
    service.push(learned(PREFIX_G, "max-age=60"));
    run(resolver.resolve(&learn_q("/g/p/-/issues")));
    assert!(resolver.resolve_from_memory(&learn_q("/g/p/x")).is_some());
    resolver.purge(1);
    assert_eq!(resolver.resolve_from_memory(&learn_q("/g/p/x")), None);
    // The shared copy is under generation 0: not read. The path is asked
    // again, and the new answer is kept under generation 1.
    service.push(learned(PREFIX_G, "max-age=60"));
    let again = run(resolver.resolve(&learn_q("/g/p/x")));
    assert_eq!(again.level, CacheLevel::Service);
    assert_eq!(service.calls.get(), 2);
    assert!(shared
        .entries
        .borrow()
        .keys()
        .any(|k| k.starts_with("g1/learn-web-")));
}

fn claim_q(key: &str, value: &str) -> ClassifyRequest {
    let index = CLAIM_TYPES.iter().position(|(_, c)| *c == key).unwrap();
    ClassifyRequest::new(ClassifyKind::Claim(index), Some(value.into()), Target::Web)
}

fn invalidation(json: &str) -> Invalidation {
    Invalidation::from_value(&serde_json::from_str(json).unwrap()).unwrap()
}

/// Another isolate of the same colo: its own memory, the same shared cache.
fn other_isolate(
    shared: &Rc<FakeShared>,
    platform: &Rc<FakePlatform>,
) -> (TestResolver, Rc<FakeService>) {
    let service = Rc::new(FakeService {
        platform: platform.clone(),
        gate: platform.gate.clone(),
        ..Default::default()
    });
    let resolver = Resolver::new(
        service.clone(),
        shared.clone(),
        platform.clone(),
        CachePolicy::default(),
        ClientPolicy::default(),
    );
    (resolver, service)
}

#[test]
fn a_targeted_invalidation_asks_again_only_for_the_keys_it_names() {
    let (resolver, service, shared, platform) = setup();
    let acme = [
        claim_q("route", "acme/app"),
        claim_q("organizationPath", "acme-org"),
    ];
    let others = [claim_q("route", "other/app"), session("cell-3")];
    for q in acme.iter().chain(&others) {
        service.push(found("cell-2", "max-age=3600"));
        run(resolver.resolve(q));
    }
    assert_eq!(service.calls.get(), 4);
    // A second isolate has read nothing yet.
    let (b, b_service) = other_isolate(&shared, &platform);
    platform.now.set(platform.now.get() + 1_000);
    let at = platform.now.get();
    let list = [
        invalidation(&format!(r#"{{"at_ms":{at},"claim":"route=acme"}}"#)),
        invalidation(&format!(
            r#"{{"at_ms":{at},"claim":"organizationPath=acme-org"}}"#
        )),
    ];
    assert_eq!(
        resolver.invalidate(&list),
        (2, 2),
        "two in force, two dropped"
    );
    assert_eq!(b.invalidate(&list), (2, 0));
    platform.now.set(at + 10);
    // The others: memory hits in a, Cache API hits in b, no call.
    for q in &others {
        assert_eq!(run(resolver.resolve(q)).level, CacheLevel::Memory);
        assert_eq!(run(b.resolve(q)).level, CacheLevel::CacheApi);
    }
    assert_eq!((service.calls.get(), b_service.calls.get()), (4, 0));
    // acme's: asked again (the moved answer), once per isolate at most.
    for q in &acme {
        service.push(found("cell-3", "max-age=3600"));
        let r = run(resolver.resolve(q));
        assert_eq!(
            (r.level, address(&r)),
            (CacheLevel::Service, Some("cell-3"))
        );
        // b reads the entry a just wrote (asked after the invalidation).
        let r = run(b.resolve(q));
        assert_eq!(
            (r.level, address(&r)),
            (CacheLevel::CacheApi, Some("cell-3"))
        );
    }
    assert_eq!((service.calls.get(), b_service.calls.get()), (6, 0));
    // Applying the same list again drops nothing new.
    assert_eq!(resolver.invalidate(&list), (2, 0));
    assert_eq!(run(resolver.resolve(&acme[0])).level, CacheLevel::Memory);
}

#[test]
fn an_invalidated_shared_entry_is_not_a_stale_stand_in_either() {
    let (resolver, service, shared, platform) = setup();
    let q = claim_q("projectId", "200");
    service.push(found("cell-2", "max-age=60"));
    run(resolver.resolve(&q));
    let (b, b_service) = other_isolate(&shared, &platform);
    let at = platform.now.get() + 1;
    b.invalidate(&[invalidation(&format!(
        r#"{{"at_ms":{at},"claim":"projectId=200"}}"#
    ))]);
    platform.now.set(at + 120_000); // expired, inside the stale window
    b_service.push(status(503));
    b_service.push(status(503));
    b_service.push(status(503));
    let r = run(b.resolve(&q));
    assert_eq!((r.level, r.classification), (CacheLevel::Fallback, None));
}

#[test]
fn by_cell_and_by_tag() {
    let (resolver, service, _, platform) = setup();
    let cells = CellList::parse(
        r#"[{"id":2,"address":"cell-2","session_prefix":"cell-2"},{"id":3,"address":"cell-3","session_prefix":"cell-3"}]"#,
    )
    .0;
    let resolver = Rc::try_unwrap(resolver).ok().unwrap().with_cells(cells);
    for (q, cell) in [
        (claim_q("route", "a"), "cell-2"),
        (claim_q("route", "b"), "cell-3"),
        (claim_q("userId", "7"), "cell-2"),
    ] {
        service.push(found(cell, "max-age=60"));
        run(resolver.resolve(&q));
    }
    let at = platform.now.get() + 1;
    assert_eq!(
        resolver.invalidate(&[invalidation(&format!(r#"{{"at_ms":{at},"cell":2}}"#))]),
        (1, 2),
        "both answers naming cell 2"
    );
    assert_eq!(
        run(resolver.resolve(&claim_q("route", "b"))).level,
        CacheLevel::Memory
    );
    // The service's tags (`cell-x` in these answers) name every one.
    assert_eq!(
        resolver.invalidate(&[invalidation(&format!(r#"{{"at_ms":{at},"tag":"cell-x"}}"#))]),
        (2, 1)
    );
}

#[test]
fn an_answer_asked_for_before_an_invalidation_applied_during_the_call_is_not_cached() {
    let (resolver, service, shared, platform) = setup();
    let q = claim_q("route", "acme");
    service.gate.close();
    let mut pool = LocalPool::new();
    let r2 = resolver.clone();
    let q2 = q.clone();
    let result = Rc::new(RefCell::new(None));
    let out = result.clone();
    pool.spawner()
        .spawn_local(async move {
            *out.borrow_mut() = Some(r2.resolve(&q2).await);
        })
        .unwrap();
    pool.run_until_stalled();
    let at = platform.now.get() + 1;
    platform.now.set(at + 1);
    resolver.invalidate(&[invalidation(&format!(
        r#"{{"at_ms":{at},"claim":"route=acme"}}"#
    ))]);
    service.push(found("cell-2", "max-age=60"));
    service.gate.open();
    pool.run();
    assert_eq!(
        address(result.borrow().as_ref().unwrap()),
        Some("cell-2"),
        "answered"
    );
    assert_eq!(resolver.memory_len(), 0, "not kept");
    assert_eq!(shared.puts.get(), 0);
}

#[test]
fn a_404_for_a_listed_cells_key_is_kept_one_second_in_memory_only() {
    let (resolver, service, shared, platform) = setup();
    let cells = CellList::parse(r#"[{"id":2,"address":"cell-2","session_prefix":"cell-2"}]"#).0;
    let resolver = Rc::try_unwrap(resolver).ok().unwrap().with_cells(cells);
    service.push(status(404));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(r.classification, Some(Classification::NotFound));
    assert!(
        platform.warnings.borrow()[0].contains("GITLAB_CELLS lists"),
        "{:?}",
        platform.warnings.borrow()
    );
    assert_eq!(shared.puts.get(), 0, "not shared");
    assert_eq!(
        run(resolver.resolve(&session("cell-2"))).level,
        CacheLevel::Memory
    );
    platform.now.set(platform.now.get() + 1_000);
    service.push(found("cell-2", "max-age=60"));
    let r = run(resolver.resolve(&session("cell-2")));
    assert_eq!(
        (r.level, address(&r)),
        (CacheLevel::Service, Some("cell-2")),
        "asked again after 1 s"
    );
    // A key the list does not name keeps the negative TTL (30 s).
    service.push(status(404));
    run(resolver.resolve(&session("cell-9")));
    platform.now.set(platform.now.get() + 29_000);
    assert_eq!(
        run(resolver.resolve(&session("cell-9"))).level,
        CacheLevel::Memory
    );
    assert_eq!(shared.puts.get(), 2);
}
