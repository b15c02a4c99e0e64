//! The plan's first steps: a request the router answers itself before
//! routing it, or as its rule decided (a rejection); the decision written
//! into the log line; and the 404 deadline of a classified request.

use crate::decision::Action;
use crate::platform::Platform;
use crate::request::RequestParts;
use crate::wire::Answer;

use super::super::headers::{self, SMOKE_TEST_HEADER, VERSION_OVERRIDES};
use super::super::settings::Settings;
use super::{Ending, IsolateView, RequestContext};

/// The router's own answer to a request it must not route at all: `TRACE`
/// and `CONNECT` (405), and a request naming a Worker version
/// (`Cloudflare-Workers-Version-Overrides`) without the deploy's smoke-test
/// secret (403: only the smoke test may reach a version at 0 %).
pub(super) fn refuse_before_routing(
    settings: &Settings,
    parts: &RequestParts,
) -> Result<(), Ending> {
    match refusal_of(settings, parts) {
        Some(answer) => Err(Ending::Answer(answer)),
        None => Ok(()),
    }
}

fn refusal_of(settings: &Settings, parts: &RequestParts) -> Option<Answer> {
    if parts.method.eq_ignore_ascii_case("TRACE") || parts.method.eq_ignore_ascii_case("CONNECT") {
        let mut answer = Answer::text(
            405,
            format!(
                "gitlab-http-router: method {} is not allowed\n",
                parts.method
            ),
        );
        answer.headers.push((
            "allow".into(),
            "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS".into(),
        ));
        return Some(answer);
    }
    parts.header(VERSION_OVERRIDES)?;
    let allowed =
        headers::is_smoke_test(parts.header(SMOKE_TEST_HEADER), settings.smoke_test_secret);
    (!allowed).then(|| {
        Answer::text(
            403,
            "gitlab-http-router: version overrides are for the deploy's smoke test\n",
        )
    })
}

/// The decision in the log line (its rule, action and classify type);
/// a rejecting rule's answer ends the request.
pub(super) fn record_decision(ctx: &mut RequestContext) -> Result<(), Ending> {
    let Some(decision) = ctx.routed.map(|r| &r.decision) else {
        return Ok(());
    };
    ctx.log.rule = decision.rule_id;
    ctx.log.action = decision.action.log_action();
    match &decision.action {
        Action::Classify(request) => {
            ctx.log.classify_type = Some(request.kind.name());
            ctx.rule_type = Some(request.kind.rule_type_header());
            Ok(())
        }
        Action::Reject { status, message } => Err(Ending::Answer(Answer::text(
            *status,
            format!("{message}\n"),
        ))),
        Action::Proxy { .. } | Action::Spread => Ok(()),
    }
}

/// The request's 404 deadline: a classified request (or one a classify
/// rule handed on) has a 404 from its cell held to a deadline, so timing
/// does not tell which cell knew the path. The router's own answers never
/// are.
pub(super) fn not_found_deadline_of<P: Platform>(
    view: &IsolateView,
    platform: &P,
    ctx: &RequestContext,
) -> u32 {
    let classified = ctx.routed.is_some_and(|r| {
        matches!(r.decision.action, Action::Classify(_)) || !r.fell_through.is_empty()
    });
    not_found_deadline(&view.settings, classified, || platform.random())
}

/// The deadline (ms after the request reached the entry) before which a
/// 404 from the upstream is not returned: drawn once per request from
/// `GITLAB_NOT_FOUND_DELAY_MS` for a classified request (`random` is asked
/// only then), else none. A deadline, not a delay added to the cell's
/// time: the answer's timing then does not depend on which cell answered,
/// or how fast, as long as it answered before the deadline.
pub(super) fn not_found_deadline(
    settings: &Settings,
    classified: bool,
    random: impl FnOnce() -> f64,
) -> u32 {
    match settings.not_found_delay {
        Some(range) if classified => range.pick(random()),
        _ => 0,
    }
}
