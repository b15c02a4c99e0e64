//! What goes out with a forwarded request besides its URL: the signing
//! input (the JWT's header and claims, signed by the entry) and the
//! headers to drop and set.

use std::borrow::Cow;

use crate::error::RouterError;
use crate::log::RequestAction;
use crate::platform::Platform;
use crate::trace::{uuid_v4, TRACESTATE_HEADER};
use crate::wire::{Failure, Signing};

use super::super::headers::{
    self, CF_CONNECTING_IP, RULE_ACTION_HEADER, RULE_TYPE_HEADER, X_FORWARDED_FOR,
    X_FORWARDED_HOST, X_FORWARDED_PROTO,
};
use super::super::settings::SigningPolicy;
use super::super::signing::{SignedRequest, SIGNATURE_HEADER};
use super::{IsolateView, RequestContext};

/// The request's signing, when a signer is configured; a required
/// signature without a valid key ends the request.
pub(super) fn signing<P: Platform>(
    view: &IsolateView,
    platform: &P,
    ctx: &RequestContext,
) -> Result<Option<Signing>, RouterError> {
    let signer = match (view.settings.signer, view.settings.signing_policy) {
        (Ok(Some(signer)), _) => signer,
        (_, SigningPolicy::Optional) => return Ok(None),
        (_, SigningPolicy::Required) => return Err(RouterError::SigningUnavailable),
    };
    let parts = &ctx.incoming.parts;
    let mut jti = [0u8; 16];
    platform.random_bytes(&mut jti);
    let input = signer.signing_input(&SignedRequest {
        audience: ctx.address(),
        method: &parts.method,
        path: &parts.path,
        query: &parts.query,
        rule: ctx.log.rule,
        classify_type: ctx.rule_type,
        content_length: parts.header("content-length"),
        content_type: parts.header("content-type"),
        jti: &uuid_v4(jti),
        now_ms: platform.now_ms(),
    });
    Ok(Some(Signing {
        input,
        header: SIGNATURE_HEADER.to_string(),
        on_failure: (view.settings.signing_policy == SigningPolicy::Required).then(|| Failure {
            answer: RouterError::SigningFailed(String::new()).answer(),
            log_error_open: ctx.log.error_open("request signing failed: "),
        }),
    }))
}

/// The headers the entry drops from the forwarded request: those a
/// client's `Connection` names, unless the rules read them.
pub(super) fn dropped_headers(view: &IsolateView, ctx: &RequestContext) -> Vec<String> {
    let parts = &ctx.incoming.parts;
    let (connection, upgrade) = (parts.header("connection"), parts.header("upgrade"));
    if headers::needs_own_drops(connection, upgrade, view.relied_on) {
        headers::dropped_names(connection, upgrade, view.relied_on)
    } else {
        Vec::new()
    }
}

/// The headers the entry sets on the forwarded request.
pub(super) fn set_headers<'a>(
    ctx: &RequestContext<'a, '_>,
) -> Vec<(Cow<'static, str>, Cow<'a, str>)> {
    let incoming = ctx.incoming;
    let parts = &incoming.parts;
    // A spread rule proxies without classifying: cells know the header's
    // values `classify` and `proxy` only.
    let rule_action = match ctx.log.action {
        RequestAction::Spread => RequestAction::Proxy,
        action => action,
    };
    let mut set: Vec<(Cow<'static, str>, Cow<'a, str>)> = Vec::with_capacity(8);
    set.extend([
        (
            X_FORWARDED_HOST.into(),
            incoming.public_host.as_str().into(),
        ),
        (X_FORWARDED_PROTO.into(), incoming.public_proto.into()),
        (RULE_ACTION_HEADER.into(), rule_action.name().into()),
    ]);
    if let Some(rule_type) = ctx.rule_type {
        set.push((RULE_TYPE_HEADER.into(), rule_type.into()));
    }
    if let Some(client) = headers::forwarded_for(parts.header(CF_CONNECTING_IP)) {
        set.push((X_FORWARDED_FOR.into(), client.into()));
    }
    // Replaces a client's own X-Request-Id.
    for (name, value) in incoming.trace.headers() {
        if !value.is_empty() {
            set.push((name.into(), value.into()));
        }
    }
    if !incoming.trace.tracestate.is_empty() {
        set.push((
            TRACESTATE_HEADER.into(),
            incoming.trace.tracestate.as_str().into(),
        ));
    }
    set
}
