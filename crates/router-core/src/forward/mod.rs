//! The forward phase (SPEC §7): a routed request becomes its plan
//! ([`build::plan`]): where it goes ([`upstream`]), which headers go with
//! it ([`headers`], [`crate::trace`], [`signing`]), what each failure answers
//! ([`answer`]), and how its log line is written. The edge applies the plan
//! without deciding anything; bodies stream and never enter wasm.

pub mod answer;
pub mod build;
pub mod headers;
pub mod incoming;
pub mod settings;
pub mod signing;
pub mod upstream;

pub use build::{plan, IsolateView};
pub use headers::{
    connection_tokens, drop_key, dropped_names, drops_header, forwarded_for, is_smoke_test,
    is_token, is_websocket, needs_own_drops, CF_CONNECTING_IP, FORBIDDEN_PREFIXES,
    ROUTER_HEADER_PREFIX, RULE_ACTION_HEADER, RULE_TYPE_HEADER, SMOKE_TEST_HEADER,
    VERSION_OVERRIDES, X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
pub use incoming::Incoming;
pub use settings::{DelayRange, Settings, SigningPolicy};
pub use upstream::{upstream_url, AllowList};
