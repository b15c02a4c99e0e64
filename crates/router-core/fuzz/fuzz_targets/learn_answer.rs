//! `cargo fuzz run learn_answer`: an arbitrary route-learning answer (status and body, from a
//! cell's learn endpoint) to every learn call of requests under `route_learning`, parsed,
//! cached (by exact path or by prefix) and routed on: never a panic, every plan passes the
//! plan's checks, and `learn::parse_answer` alone never panics for any of the paths.
//!
//! Input: two bytes of status (big-endian, modulo 600), then the body (UTF-8, invalid
//! sequences replaced).
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::resolve::learn::parse_answer;
use router_core::resolve::RawAnswer;
use router_core_fuzz::{assert_routes_plain_request, ingest, settings, Answers, RawRequest, World};

thread_local! {
    static WORLD: World = World::new(&settings("route_learning"));
}

const PATHS: &[&str] = &[
    "/gitlab-org/gitlab-test/-/issues",
    "/gitlab-org",
    "/-/profile",
    "/a/b/c/d/e/f/g/h/i/j",
    "/",
];

fuzz_target!(|data: &[u8]| {
    let Some((status, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let status = u16::from_be_bytes(*status) % 600;
    let body = String::from_utf8_lossy(rest).into_owned();
    for path in PATHS {
        let _ = parse_answer(status, &body, path);
    }
    WORLD.with(|world| {
        if let Some(resolver) = &world.resolver {
            resolver.purge(resolver.generation() + 1);
        }
        let answer = Answers::Fixed(RawAnswer {
            status,
            body,
            cache_control: None,
            cache_tag: None,
        });
        for path in PATHS {
            *world.service.learn_answers.borrow_mut() = answer.clone();
            let raw = RawRequest {
                url: format!("https://gitlab.example.com{path}"),
                method: "GET".into(),
                headers: Vec::new(),
            };
            if let Some(incoming) = ingest(world, &raw) {
                world.route(&incoming);
                world.route(&incoming);
            }
        }
        assert_routes_plain_request(world);
    });
});
