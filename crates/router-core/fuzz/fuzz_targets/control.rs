//! `cargo fuzz run control`: an arbitrary runtime control document (UTF-8, invalid sequences
//! replaced), read and applied as the edge applies it (`src/control.rs`: disabled rules, the
//! purge generation, targeted invalidations, passthrough), in isolates of three rulesets: an
//! invalid document is a reported problem, never a panic, and a plain request still goes to
//! the legacy cell; a session request gets a plan that passes the plan's checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::control::{ControlState, Mode, ReadOutcome};
use router_core_fuzz::{assert_routes_plain_request, ingest, settings, RawRequest, World};

thread_local! {
    static WORLDS: Vec<World> = ["session_token", "cells", "route_learning"]
        .iter()
        .map(|name| World::new(&settings(name)))
        .collect();
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let _ = router_core::control::Control::parse(&text).map(|c| c.summary());
    WORLDS.with(|worlds| {
        for world in worlds {
            // Invalidations in force from earlier inputs run out meanwhile.
            world.clock.0.set(world.clock.0.get() + 2 * 3_600_000);
            let now = world.clock.0.get();
            let mut state = ControlState::new(30_000);
            state.begin_read(now);
            let applied = state.finish_read(ReadOutcome::Text(text.clone()), now);
            let control = state.current();
            if let Some(rules) = &world.state.ruleset {
                let _unknown = rules.set_disabled(&control.disabled_rules);
            }
            if let Some(resolver) = &world.resolver {
                if applied.purged {
                    resolver.purge(control.purge_generation);
                }
                let _ = resolver.invalidate(&control.invalidations);
            }
            world.passthrough.set(control.mode == Mode::Passthrough);
            assert_routes_plain_request(&world);
            let raw = RawRequest {
                url: "https://gitlab.example.com/group/project".into(),
                method: "GET".into(),
                headers: vec![("cookie".into(), "_gitlab_session=cell-2-0123abcd".into())],
            };
            if let Some(incoming) = ingest(&world, &raw) {
                world.route(&incoming);
            }
            if let Some(rules) = &world.state.ruleset {
                rules.set_disabled(&[]);
            }
        }
    });
});
