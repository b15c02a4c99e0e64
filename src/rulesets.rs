//! The rulesets `build.rs` compiled into the Worker, and the one
//! `GITLAB_RULES_CONFIG` names.

use router_core::config::Config;
use router_core::Ruleset;

mod compiled {
    include!(concat!(env!("OUT_DIR"), "/rulesets.rs"));
}

/// The compiled ruleset `GITLAB_RULES_CONFIG` names, or `None` (every
/// request then goes to the legacy cell), with what is wrong logged.
pub fn compiled_ruleset(config: &Config, log_error: &impl Fn(&str, &str)) -> Option<Ruleset> {
    let Some(name) = config.rules_config.as_deref() else {
        log_error(
            "config",
            "GITLAB_RULES_CONFIG is not set: every request goes to the legacy cell",
        );
        return None;
    };
    let Some((_, json, regexes)) = compiled::RULESETS.iter().find(|(n, _, _)| *n == name) else {
        let known: Vec<&str> = compiled::RULESETS.iter().map(|(n, _, _)| *n).collect();
        log_error(
            "config",
            &format!(
                "GITLAB_RULES_CONFIG={name:?} names no compiled ruleset (known: {}): every request goes to the legacy cell",
                known.join(", ")
            ),
        );
        return None;
    };
    // Validated by build.rs, which compiled every regex to the program the
    // table holds; an error here would be a bug, and it still only sends
    // traffic to the legacy cell.
    Ruleset::from_prechecked_json(name, json, regexes)
        .map_err(|e| log_error("config", &e.to_string()))
        .ok()
}
