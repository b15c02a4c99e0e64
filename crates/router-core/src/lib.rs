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

pub mod b64;
pub mod cells;
pub mod classify;
pub mod config;
pub mod control;
pub mod error;
pub mod forward;
pub mod guard;
pub mod hex;
pub mod isolate;
pub mod json;
pub mod jwt;
pub mod learn;
pub mod log;
pub mod platform;
pub mod request;
pub mod reserved;
pub mod resolve;
pub mod route;
pub mod ruleset;
pub mod template;
pub mod token;
pub mod topology;
pub mod transform;
pub mod wire;

pub use classify::{ClassifyKind, ClassifyRequest, Target};
pub use error::{RouterError, RulesetError};
pub use request::RequestParts;
pub use ruleset::{Action, Decision, Ruleset};
