//! One request as the router received it: the parts the rules see, and
//! what forwarding needs besides them (the public authority and scheme,
//! the request id and trace context). The edge makes it from the URL, the
//! method and the headers it read; the phases borrow it.

use crate::platform::Platform;
use crate::request::{RequestParts, UrlParts};

use crate::trace::{Trace, CF_RAY_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};

#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    pub parts: RequestParts,
    /// `host[:port]` the client asked for (`X-Forwarded-Host`).
    pub public_host: String,
    /// `https` or `http` (`X-Forwarded-Proto`).
    pub public_proto: &'static str,
    /// The request id and trace context it is forwarded with.
    pub trace: Trace,
}

impl Incoming {
    /// The URL split; headers are added by the caller, then
    /// [`Incoming::trace_from_headers`].
    pub fn parse(url: &str, method: String) -> Option<Incoming> {
        let split = UrlParts::parse(url)?;
        Some(Incoming {
            public_host: split.authority.to_string(),
            public_proto: if split.scheme == "https" {
                "https"
            } else {
                "http"
            },
            parts: RequestParts::from_url_parts(method, &split),
            trace: Trace::default(),
        })
    }

    /// Sets the request id and trace context from the headers read
    /// (generated where missing or invalid).
    pub fn trace_from_headers(&mut self, platform: &impl Platform) {
        self.trace = Trace::from_headers(
            self.parts.header(CF_RAY_HEADER),
            self.parts.header(TRACEPARENT_HEADER),
            self.parts.header(TRACESTATE_HEADER),
            |out| platform.random_bytes(out),
        );
    }
}
