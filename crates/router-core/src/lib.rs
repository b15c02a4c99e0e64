//! The pure routing core of the GitLab Cells HTTP router.
//!
//! Nothing here knows about Cloudflare Workers: the worker edge (the root
//! crate) turns a `web_sys::Request` into [`RequestParts`], asks a compiled
//! [`Ruleset`] for a [`Decision`], resolves it to a cell through
//! [`resolve`], and applies the [`forward`] plan. Everything in this crate
//! runs natively, so it is unit tested, benchmarked and fuzzed without
//! workerd.
//!
//! A request flows through phases named after what they do:
//! **select** ([`Ruleset::decide`]), **resolve** ([`resolve::Resolver`]),
//! **forward** ([`forward`]) and **log** ([`log::RequestLog`]).

// A panic in the wasm fails every request in flight in the isolate: no
// code outside the tests may panic on a value from outside
// (docs/decisions.md, "What can still panic").
#![cfg_attr(
    not(test),
    deny(
        clippy::string_slice,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented,
        clippy::get_unwrap
    )
)]
#![deny(unsafe_code)]

// Leaves: the request, the select -> resolve contract, writers, and the
// JS <-> Rust wire format, which every phase may use.
pub mod address;
pub mod base64_codec;
pub mod decision;
pub mod disagreement;
pub mod error;
mod fields;
pub mod hex;
pub mod input;
pub mod json;
pub mod log;
pub mod metrics;
pub mod out_of_line;
pub mod platform;
pub mod question;
pub mod request;
pub mod trace;
pub mod wire;

// The phases, in the order a request meets them; each imports only
// leaves and earlier phases (tests/module_graph.rs).
pub mod forward;
pub mod resolve;
pub mod route;
pub mod select;

// The isolate: settings, the control document, and what lives as long as
// the isolate does.
pub mod config;
pub mod control;
pub mod isolate;

// The fakes the tests share (the `testutil` feature: integration tests).
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

pub use decision::{Action, Decision};
pub use error::{RouterError, RulesetError};
pub use question::{ClassifyKind, ClassifyRequest, Target};
pub use request::RequestParts;
pub use select::Ruleset;
