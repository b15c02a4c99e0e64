//! `cargo fuzz run cells`: an arbitrary `GITLAB_CELLS` (UTF-8, invalid sequences replaced)
//! in an isolate with every other setting right: its bad entries are left out and reported,
//! never a panic; a plain request still goes to the legacy cell, and requests naming cells by
//! session, by `/v2/` path and by spread rule get a plan that passes the plan's checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::resolve::cells::CellList;
use router_core_fuzz::{assert_routes_plain_request, ingest, settings, RawRequest, World};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (list, _problems) = CellList::parse(&text);
    let _ = list.to_json();
    for ruleset in ["session_prefix", "firstcell"] {
        let mut vars = settings(ruleset);
        vars.retain(|(n, _)| n != "GITLAB_CELLS");
        vars.push(("GITLAB_CELLS".into(), text.to_string()));
        let world = World::new(&vars);
        assert_routes_plain_request(&world);
        for (url, cookie) in [
            (
                "https://gitlab.example.com/dashboard",
                "_gitlab_session=cell-2-0123456789abcdef",
            ),
            ("https://gitlab.example.com/v2/", ""),
            ("https://gitlab.example.com/users/sign_in", ""),
        ] {
            let raw = RawRequest {
                url: url.into(),
                method: "GET".into(),
                headers: vec![("cookie".into(), cookie.into())],
            };
            if let Some(incoming) = ingest(&world, &raw) {
                world.route(&incoming);
            }
        }
    }
});
