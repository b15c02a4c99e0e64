//! The rulesets `build.rs` compiled into the Worker, and the ones
//! `GITLAB_RULES_CONFIG` and `GITLAB_SHADOW_RULES_CONFIG` name.

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
    named(
        name,
        "GITLAB_RULES_CONFIG",
        "every request goes to the legacy cell",
        log_error,
    )
}

/// The compiled ruleset `GITLAB_SHADOW_RULES_CONFIG` names, if it is set;
/// `None` (no shadow evaluation) when it names none, logged.
pub fn compiled_shadow(config: &Config, log_error: &impl Fn(&str, &str)) -> Option<Ruleset> {
    let name = config.shadow_rules_config.as_deref()?;
    named(
        name,
        "GITLAB_SHADOW_RULES_CONFIG",
        "no shadow evaluation",
        log_error,
    )
}

/// The compiled ruleset `name` (the value of `setting`), or `None` with
/// what is wrong logged and what happens `instead`.
fn named(
    name: &str,
    setting: &str,
    instead: &str,
    log_error: &impl Fn(&str, &str),
) -> Option<Ruleset> {
    let Some((_, json, regexes)) = compiled::RULESETS.iter().find(|(n, _, _)| *n == name) else {
        let known: Vec<&str> = compiled::RULESETS.iter().map(|(n, _, _)| *n).collect();
        log_error(
            "config",
            &format!(
                "{setting}={name:?} names no compiled ruleset (known: {}): {instead}",
                known.join(", ")
            ),
        );
        return None;
    };
    // Validated by build.rs, which compiled every regex to the program the
    // table holds; an error here would be a bug, and it still only costs
    // what `instead` says.
    Ruleset::from_prechecked_json(name, json, regexes)
        .map_err(|e| log_error("config", &e.to_string()))
        .ok()
}
