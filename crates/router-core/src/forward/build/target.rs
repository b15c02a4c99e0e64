//! The target of a routed request: the address its decision and the
//! resolver's answer name (a fixed address, a cell of the list, a spread
//! cell, or the legacy cell), with how it was chosen in the log line.

use crate::decision::Action;
use crate::error::RouterError;
use crate::log::{CacheLevel, ChosenBy, RequestLog};
use crate::platform::Platform;
use crate::question::{ClassifyKind, ClassifyRequest, Target};
use crate::resolve::topology::Classification;
use crate::route::Routed;

use super::super::settings::Settings;
use super::{IsolateView, RequestContext};

/// The address the request goes to: its target, else the legacy cell.
pub(super) fn address_of<P: Platform>(
    view: &IsolateView,
    platform: &P,
    ctx: &mut RequestContext,
) -> Result<String, RouterError> {
    target_of(view, platform, ctx.routed, &mut ctx.log)?
        .or_else(|| view.settings.proxy_host.map(str::to_owned))
        .ok_or(RouterError::NoLegacyCell)
}

/// The address a routed request goes to (`None`: the legacy cell), with
/// how it was resolved written into `log`.
fn target_of<'r, P: Platform>(
    view: &IsolateView,
    platform: &P,
    routed: Option<&Routed<'r>>,
    log: &mut RequestLog<'r>,
) -> Result<Option<String>, RouterError> {
    let Some(routed) = routed else {
        log.chosen_by = Some(ChosenBy::Legacy);
        return Ok(None);
    };
    log.fell_through = routed.fell_through.iter().map(|(rule, _)| *rule).collect();
    log.value_too_long = routed.decision.value_too_long;
    // A rule that handed the request on may have done so on a stale
    // not-found while the service failed: its error and level belong in
    // the line (found by the soak test).
    for (rule, res) in &routed.fell_through {
        if let Some(e) = &res.error {
            log.add_error_of_kind(e.kind(), format_args!("{rule}: {e}"));
        }
        if res.level == CacheLevel::Stale {
            log.cache = Some(CacheLevel::Stale);
        }
    }
    let attempts = routed.attempts();
    log.attempts = (attempts > 0).then_some(attempts);
    log.service_ms = routed.service_ms();
    log.coalesced = routed.coalesced();
    let question = match &routed.decision.action {
        Action::Proxy { address } => {
            log.chosen_by = Some(if address.is_some() {
                ChosenBy::Fixed
            } else {
                ChosenBy::Legacy
            });
            return Ok(address.map(str::to_string));
        }
        Action::Reject { .. } => return Ok(None),
        Action::Spread => return Ok(spread(view, platform, log)),
        Action::Classify(question) => question,
    };
    let Some(res) = &routed.resolution else {
        if let Some(address) = static_target(&view.settings, question, log) {
            return address.map(Some);
        }
        log.cache = Some(CacheLevel::Fallback);
        log.chosen_by = Some(ChosenBy::Legacy);
        log.add_error_of_kind(
            "no_topology_service",
            "GITLAB_TOPOLOGY_SERVICE_URL is not set",
        );
        return Ok(None);
    };
    if log.cache != Some(CacheLevel::Stale) || res.level == CacheLevel::Fallback {
        log.cache = Some(res.level);
    }
    if let Some(e) = &res.error {
        log.add_error_of_kind(e.kind(), e);
    }
    match &res.classification {
        // The service could not answer and nothing was cached: a listed
        // cell the key names, else the rule's outage policy.
        None => match static_target(&view.settings, question, log) {
            Some(address) => address.map(Some),
            None if routed.unavailable() => {
                let error = RouterError::OutageUnavailable {
                    retry_after_secs: view.settings.outage_retry_after_secs,
                    registry: question.target == Target::Registry,
                };
                Err(error)
            }
            None => {
                log.chosen_by = Some(ChosenBy::Legacy);
                Ok(None)
            }
        },
        // A 404 for a `CELL_ID` / `SESSION_PREFIX` key that names a listed
        // cell contradicts the list: the list's answer (the resolver keeps
        // such a 404 for a second only, and says so in a warn line).
        Some(Classification::NotFound) => match static_target(&view.settings, question, log) {
            Some(address) => {
                log.add_error_of_kind("topology_contradicts_cells", "the Topology Service answered 404 for a cell GITLAB_CELLS lists; routed by the list");
                address.map(Some)
            }
            None => {
                log.chosen_by = Some(ChosenBy::Legacy);
                Ok(None)
            }
        },
        Some(c) => {
            log.chosen_by = Some(match res.level {
                CacheLevel::Memory | CacheLevel::CacheApi => ChosenBy::Cache,
                CacheLevel::Service => ChosenBy::Service,
                CacheLevel::Stale => ChosenBy::Stale,
                CacheLevel::Fallback | CacheLevel::Static => ChosenBy::Legacy,
            });
            c.address_for(question.target)
                .map(|a| a.map(str::to_string))
        }
    }
}

/// Resolution without the service: a `CELL_ID` or `SESSION_PREFIX` key
/// naming a cell of `GITLAB_CELLS` goes to that cell (`None`: the key
/// names no listed cell).
fn static_target(
    settings: &Settings,
    question: &ClassifyRequest,
    log: &mut RequestLog,
) -> Option<Result<String, RouterError>> {
    if !matches!(
        question.kind,
        ClassifyKind::CellId | ClassifyKind::SessionPrefix
    ) {
        return None;
    }
    let cell = settings
        .cells
        .named_by(question.kind, question.value.as_deref()?)?;
    log.cache = Some(CacheLevel::Static);
    log.chosen_by = Some(ChosenBy::Static);
    Some(match question.target {
        Target::Web => Ok(cell.address.clone()),
        Target::Registry => cell
            .registry_address
            .clone()
            .ok_or(RouterError::NoRegistryAddress),
    })
}

/// A cell for a spread rule (its address), or `None`: the legacy cell.
fn spread<P: Platform>(view: &IsolateView, platform: &P, log: &mut RequestLog) -> Option<String> {
    let chosen = view
        .health
        .borrow()
        .choose(platform.random(), platform.now_ms());
    match chosen.and_then(|i| view.settings.cells.cells().get(i)) {
        Some(cell) => {
            log.chosen_by = Some(ChosenBy::Spread);
            Some(cell.address.clone())
        }
        None => {
            log.chosen_by = Some(ChosenBy::Legacy);
            if !view.settings.cells.is_empty() {
                log.add_error_of_kind(
                    "no_healthy_cell",
                    "spread: no healthy cell in GITLAB_CELLS; the legacy cell serves it",
                );
            }
            None
        }
    }
}
