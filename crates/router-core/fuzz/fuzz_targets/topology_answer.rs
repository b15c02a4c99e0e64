//! `cargo fuzz run topology_answer`: an arbitrary Topology Service answer (status, its
//! `Cache-Control` and `Cache-Tag`, body) to every classify call of requests under the
//! rulesets that classify, parsed, cached and routed on: never a panic, every plan passes the
//! plan's checks (an address outside the allow-list is refused, never forwarded to), and the
//! answer parsed alone (`topology::parse_answer`, its TTL and cache tags) never panics either.
//!
//! Input: two bytes of status (big-endian, modulo 600), then lines (UTF-8, invalid sequences
//! replaced): `Cache-Control` (empty: absent), `Cache-Tag` (empty: absent), then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::resolve::topology::parse_answer;
use router_core::resolve::RawAnswer;
use router_core_fuzz::{ingest, settings, Answers, RawRequest, World};

thread_local! {
    static WORLDS: Vec<World> = ["cells", "session_token", "container_registry", "registry_migration"]
        .iter()
        .map(|name| World::new(&settings(name)))
        .collect();
}

/// Requests that make each of those rulesets classify.
const REQUESTS: &[(&str, &str, &str)] = &[
    (
        "https://gitlab.example.com/group/project/-/issues",
        "cookie",
        "",
    ),
    (
        "https://gitlab.example.com/dashboard",
        "cookie",
        "_gitlab_session=cell-2-0123abcd",
    ),
    (
        "https://gitlab.example.com/api/v4/projects",
        "private-token",
        "glpat-xxxxxxxxxxxxxxxxxxxx",
    ),
    (
        "https://gitlab.example.com/v2/group/project/manifests/latest",
        "authorization",
        "",
    ),
    ("https://gitlab.example.com/v2/", "authorization", ""),
];

fn answer(data: &[u8]) -> Option<RawAnswer> {
    let (status, rest) = data.split_first_chunk::<2>()?;
    let status = u16::from_be_bytes(*status) % 600;
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.splitn(3, '\n');
    let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    let cache_control = non_empty(parts.next());
    let cache_tag = non_empty(parts.next());
    Some(RawAnswer {
        status,
        body: parts.next().unwrap_or_default().to_string(),
        cache_control,
        cache_tag,
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(raw) = answer(data) else {
        return;
    };
    WORLDS.with(|worlds| {
        for world in worlds {
            if let Some(resolver) = &world.resolver {
                // Answers of earlier inputs are not read again.
                resolver.purge(resolver.generation() + 1);
                if let Ok(classification) = parse_answer(raw.status, &raw.body) {
                    let _ = world
                        .state
                        .config
                        .cache
                        .ttl(raw.cache_control.as_deref(), &classification);
                }
            }
            *world.service.answers.borrow_mut() = Answers::Fixed(raw.clone());
            for (url, name, value) in REQUESTS {
                let raw_request = RawRequest {
                    url: url.to_string(),
                    method: "GET".into(),
                    headers: vec![(name.to_string(), value.to_string())],
                };
                if let Some(incoming) = ingest(world, &raw_request) {
                    world.route(&incoming);
                    // Again: now from the memory cache.
                    world.route(&incoming);
                }
            }
        }
    });
});
