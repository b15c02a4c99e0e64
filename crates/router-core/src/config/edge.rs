//! What the isolate as a whole is set by: the ruleset, request logging
//! ([`RequestLogging`]), the control document's refresh and the name the
//! metrics carry.

use super::setting::{Meaning, Number, Reader, Row, Text};
use crate::log::RequestLogging;

/// Read here as text; the edge compiles the ruleset it names, and reports
/// one it cannot find.
pub const RULES_CONFIG: Text = Text {
    name: "GITLAB_RULES_CONFIG",
    meaning: "ruleset name (file stem in `rules/`)",
    default: "none: everything to the legacy cell, logged",
    accepted: "a ruleset of `rules/`",
    fallback: "everything to the legacy cell, `error`",
    secret: false,
};

pub const REQUEST_LOG: Text = Text {
    name: "GITLAB_REQUEST_LOG",
    meaning: "`all`: one JSON line per request; `errors`: only errors, stale, fallback or static \
              answers, rejections, classify values over the cap (`value_too_long`) and 5xx; \
              `sample:<share>` (e.g. `sample:0.01`): those plus that share, drawn per request, \
              of the routine ones (a log line costs workerd about 10–20 µs of CPU per request: \
              `null-log` in the benchmark). On Cloudflare, Workers Logs then keeps a share of \
              the invocations, their lines with them: 1 % in production, 10 % in staging \
              (wrangler.toml `[env.<name>.observability]`; docs/logging.md, Workers Logs). \
              The control document's `request_log` overrides it",
    default: "`all`",
    accepted: "`all`, `errors`, `sample:<0 to 1>`",
    fallback: "`all`, `warn`",
    secret: false,
};

pub const SHADOW_RULES_CONFIG: Text = Text {
    name: "GITLAB_SHADOW_RULES_CONFIG",
    meaning: "a candidate ruleset evaluated beside `GITLAB_RULES_CONFIG` on a share of requests \
              (`GITLAB_SHADOW_SAMPLE`) without routing anything: where it decides differently, \
              a `shadow` log line and the data point's blob11/blob12 (docs/deploying.md, \
              Shadow evaluation)",
    default: "none: no shadow",
    accepted: "a ruleset of `rules/`",
    fallback: "no shadow, `error`",
    secret: false,
};

pub const SHADOW_SAMPLE: Text = Text {
    name: "GITLAB_SHADOW_SAMPLE",
    meaning: "the share of routed requests the shadow ruleset is evaluated on, drawn per \
              request (`1`: every one). The control document's `shadow_sample` overrides it",
    default: "`0`: off",
    accepted: "a share from `0` to `1` (`0.01`)",
    fallback: "`0`, `warn`",
    secret: false,
};

pub const ENVIRONMENT: Text = Text {
    name: "GITLAB_ENVIRONMENT",
    meaning: "the environment's name in each metrics data point (blob1; \
              [docs/metrics.md](docs/metrics.md))",
    default: "empty",
    accepted: "any",
    fallback: "—",
    secret: false,
};

/// The isolate's whole-number settings, which no policy holds.
pub(super) struct Refresh {
    /// How often an isolate reads the runtime control document.
    pub control_secs: u32,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh { control_secs: 30 }
    }
}

fn numbers<M: Meaning>(refresh: &mut Refresh) -> [Number<'_, M>; 1] {
    [Number {
        name: "GITLAB_CONTROL_REFRESH_SECONDS",
        meaning: M::of("how often each isolate reads the runtime control document"),
        min: 1,
        max: 3_600,
        value: &mut refresh.control_secs,
    }]
}

pub(super) fn rows() -> Vec<Row> {
    let mut rows = vec![
        RULES_CONFIG.row(),
        SHADOW_RULES_CONFIG.row(),
        SHADOW_SAMPLE.row(),
        REQUEST_LOG.row(),
    ];
    rows.extend(numbers(&mut Refresh::default()).iter().map(Number::row));
    rows.push(ENVIRONMENT.row());
    rows
}

/// The block as read.
pub(super) struct Edge {
    pub rules_config: Option<String>,
    pub shadow_rules_config: Option<String>,
    /// `GITLAB_SHADOW_SAMPLE` in millionths.
    pub shadow_per_million: u32,
    pub request_logging: RequestLogging,
    pub refresh: Refresh,
    pub environment: String,
}

pub(super) fn read(r: &mut Reader<'_>) -> Edge {
    let mut refresh = Refresh::default();
    for number in numbers(&mut refresh) {
        r.number(number);
    }
    Edge {
        rules_config: r.get(RULES_CONFIG.name),
        shadow_rules_config: r.get(SHADOW_RULES_CONFIG.name),
        shadow_per_million: shadow_sample(r),
        request_logging: request_logging(r),
        refresh,
        environment: r.get(ENVIRONMENT.name).unwrap_or_default(),
    }
}

fn request_logging(r: &mut Reader<'_>) -> RequestLogging {
    let Some(value) = r.get(REQUEST_LOG.name) else {
        return RequestLogging::All;
    };
    RequestLogging::parse(&value).unwrap_or_else(|| {
        r.warn(
            REQUEST_LOG.name,
            Some(value.as_str()),
            "none of all, errors, sample:<share from 0 to 1>",
            "using all",
        );
        RequestLogging::All
    })
}

fn shadow_sample(r: &mut Reader<'_>) -> u32 {
    let Some(value) = r.get(SHADOW_SAMPLE.name) else {
        return 0;
    };
    crate::log::per_million(&value).unwrap_or_else(|| {
        r.warn(
            SHADOW_SAMPLE.name,
            Some(value.as_str()),
            "not a share from 0 to 1",
            "using 0: no shadow evaluation",
        );
        0
    })
}
