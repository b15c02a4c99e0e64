//! `cargo fuzz run probe_record`: an arbitrary probe record (the scheduled probe's KV value;
//! UTF-8, invalid sequences replaced) decoded, summarised and applied to an isolate's circuits
//! as the edge applies it: never a panic; a plain request still goes to the legacy cell, and
//! requests to each listed cell get a plan (forwarded, or the circuit's 503) that passes the
//! plan's checks. The isolate's clock is 1,000,000 ms, so records dated near it apply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::resolve::cells::{CellHealth, HealthRecord};
use router_core_fuzz::{assert_routes_plain_request, ingest, settings, RawRequest, World};

thread_local! {
    static WORLD: World = World::new(&settings("session_prefix"));
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Some(record) = HealthRecord::decode(&text) else {
        return;
    };
    WORLD.with(|world| {
        world.clock.0.set(1_000_000);
        let config = &world.state.config;
        let _ = record.summary_line(&config.cells);
        *world.state.health.borrow_mut() = CellHealth::new(&config.cells, config.circuits);
        let _opened = world.state.health.borrow_mut().apply_record(
            &config.cells,
            &record,
            world.clock.0.get(),
            u64::from(config.health_max_age_secs) * 1000,
        );
        assert_routes_plain_request(world);
        for cell in 1..=3 {
            let raw = RawRequest {
                url: "https://gitlab.example.com/dashboard".into(),
                method: "GET".into(),
                headers: vec![("cookie".into(), format!("_gitlab_session=cell-{cell}-00ff"))],
            };
            if let Some(incoming) = ingest(world, &raw) {
                world.route(&incoming);
            }
        }
    });
});
