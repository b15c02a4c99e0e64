//! `cargo fuzz run request`: arbitrary bytes as a request's URL, method and headers, through
//! everything the worker does natively for a request, in an isolate of every shipped ruleset:
//! the entry's framing read back (`src/ingest.rs`), the trace context, routing (the memory
//! cache, then the fake Topology Service or learn endpoint), the forward plan, its log line and
//! data point.
//!
//! Input: one flags byte, then lines separated by `\n`: the URL, the method, then headers as
//! `name: value` (a line without `:` is a name with an empty value). Flags: bit 0, the bytes
//! are read as Latin-1 (how a JS `ByteString` carries a header's raw bytes) instead of UTF-8
//! with invalid sequences replaced; bit 1, the URL line is used as it is instead of after
//! `https://gitlab.example.com`; bits 2-3, how the service answers (by the question, 404, 503,
//! a 200 naming an address outside the allow-list).
//!
//! Asserts, besides "no panic": the plan decodes to itself (no client byte in a plan field
//! unescaped), the headers it sets carry no CR, LF or NUL, its log lines are JSON objects
//! naming the request's method and path as they are, its data point has every field, and
//! every classify body the service gets is JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::resolve::RawAnswer;
use router_core_fuzz::{ingest, settings, text, Answers, RawRequest, World, SHIPPED};

thread_local! {
    static WORLDS: Vec<World> = SHIPPED.iter().map(|(name, _)| World::new(&settings(name))).collect();
}

fn answers(flags: u8) -> Answers {
    let fixed = |status: u16, body: &str| {
        Answers::Fixed(RawAnswer {
            status,
            body: body.into(),
            cache_control: Some("max-age=30".into()),
            cache_tag: Some("t".into()),
        })
    };
    match (flags >> 2) & 3 {
        0 => Answers::ByQuestion,
        1 => fixed(404, r#"{"path":"/"}"#),
        2 => fixed(503, ""),
        _ => fixed(
            200,
            r#"{"action":"PROXY","proxy":{"address":"evil.example"},"path":"/","cell":"c","source":"routable","address":"evil.example"}"#,
        ),
    }
}

fn request(flags: u8, data: &[u8]) -> RawRequest {
    let latin1 = flags & 1 == 1;
    let mut lines = data.split(|&b| b == b'\n');
    let url = text(lines.next().unwrap_or_default(), latin1);
    let url = if flags & 2 == 2 {
        url
    } else {
        format!("https://gitlab.example.com{url}")
    };
    let method = text(lines.next().unwrap_or(b"GET"), latin1);
    let headers = lines
        .map(|line| {
            let line = text(line, latin1);
            match line.split_once(':') {
                Some((name, value)) => (name.to_string(), value.trim_start().to_string()),
                None => (line, String::new()),
            }
        })
        .collect();
    RawRequest {
        url,
        method,
        headers,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let raw = request(flags, rest);
    WORLDS.with(|worlds| {
        for world in worlds {
            *world.service.answers.borrow_mut() = answers(flags);
            *world.service.learn_answers.borrow_mut() = answers(flags);
            // Cached answers expire now and then.
            world.clock.0.set(world.clock.0.get() + 7_000);
            if let Some(incoming) = ingest(world, &raw) {
                world.route(&incoming);
            }
        }
    });
});
