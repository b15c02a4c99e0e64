//! Request tracing: the request id and the W3C `traceparent` every
//! forwarded request and every Topology Service call carry, and that the
//! request's log line names, so a line can be joined with the cell's own
//! logs and traces.
//!
//! The request id is Cloudflare's `CF-Ray` (set by Cloudflare on every
//! request, never the client's) or, without one, a generated UUID; a
//! client's own `X-Request-Id` is never trusted (the forwarded request's is
//! replaced). The client's `traceparent` is kept when it is valid
//! (W3C Trace Context, level 1); otherwise a new one is started.

use crate::hex::push_hex;

/// The header the request id travels in.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// W3C Trace Context.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// Cloudflare's id of the request.
pub const CF_RAY_HEADER: &str = "cf-ray";

/// One request's ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub request_id: String,
    pub traceparent: String,
}

impl Trace {
    /// The ids for a request with these headers. `random` fills a buffer
    /// with CSPRNG bytes (asked at most twice, and only for what the
    /// request lacks).
    pub fn from_headers(
        cf_ray: Option<&str>,
        traceparent: Option<&str>,
        mut random: impl FnMut(&mut [u8]),
    ) -> Trace {
        let request_id = match cf_ray.filter(|r| is_ray(r)) {
            Some(ray) => ray.to_string(),
            None => {
                let mut bytes = [0u8; 16];
                random(&mut bytes);
                uuid_v4(bytes)
            }
        };
        let traceparent = match traceparent.map(str::trim).filter(|t| is_traceparent(t)) {
            Some(t) => t.to_string(),
            None => {
                // The trace id's 16 bytes and the parent id's 8, drawn at once.
                let mut ids = [0u8; 24];
                random(&mut ids);
                let (trace_id, parent_id) = ids.split_at_mut(16);
                make_nonzero(trace_id);
                make_nonzero(parent_id);
                let mut t = String::with_capacity(55);
                t.push_str("00-");
                push_hex(&mut t, trace_id);
                t.push('-');
                push_hex(&mut t, parent_id);
                t.push_str("-01");
                t
            }
        };
        Trace {
            request_id,
            traceparent,
        }
    }

    /// The headers a forwarded request or a service call carries.
    pub fn headers(&self) -> [(&'static str, &str); 2] {
        [
            (REQUEST_ID_HEADER, &self.request_id),
            (TRACEPARENT_HEADER, &self.traceparent),
        ]
    }
}

/// A `CF-Ray` as Cloudflare writes it (`8f1c2a3b4c5d6e7f-AMS`): short, and
/// only letters, digits and `-`.
fn is_ray(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `version-traceid-parentid-flags` as W3C Trace Context level 1 reads it:
/// version 00 has exactly these four fields; a later version may add more
/// after a `-`; version ff, and all-zero ids, are invalid.
pub fn is_traceparent(value: &str) -> bool {
    if value.len() < 55 || !value.is_ascii() {
        return false;
    }
    let (version, trace_id, parent_id, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    let dashes = [2, 35, 52].iter().all(|&i| value.as_bytes()[i] == b'-');
    let rest_ok = match value.len() {
        55 => true,
        _ => version != "00" && value.as_bytes()[55] == b'-',
    };
    dashes
        && rest_ok
        && version != "ff"
        && [version, trace_id, parent_id, flags]
            .iter()
            .all(|f| is_lower_hex(f))
        && trace_id.bytes().any(|b| b != b'0')
        && parent_id.bytes().any(|b| b != b'0')
}

/// An all-zero trace or parent id is invalid: its last bit is set then.
fn make_nonzero(id: &mut [u8]) {
    if id.iter().all(|&b| b == 0) {
        if let Some(last) = id.last_mut() {
            *last = 1;
        }
    }
}

/// These random bytes as a v4 UUID (version and variant bits set as
/// `crypto.randomUUID` sets them), in lowercase 8-4-4-4-12 groups: request
/// ids, and the edge's signature ids.
pub fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut uuid = String::with_capacity(36);
    for (i, group) in [0..4, 4..6, 6..8, 8..10, 10..16].into_iter().enumerate() {
        if i > 0 {
            uuid.push('-');
        }
        push_hex(&mut uuid, &bytes[group]);
    }
    uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// Fills the first buffer with 0x11, the next with 0x22, and so on.
    fn counter() -> impl FnMut(&mut [u8]) {
        let mut n = 0u8;
        move |out| {
            n += 1;
            out.fill(n * 0x11);
        }
    }

    #[test]
    fn keeps_the_ray_and_a_valid_traceparent() {
        let t = Trace::from_headers(Some("8f1c2a3b4c5d6e7f-AMS"), Some(VALID), |_| {
            panic!("nothing to generate")
        });
        assert_eq!(t.request_id, "8f1c2a3b4c5d6e7f-AMS");
        assert_eq!(t.traceparent, VALID);
        assert_eq!(
            t.headers(),
            [
                ("x-request-id", "8f1c2a3b4c5d6e7f-AMS"),
                ("traceparent", VALID)
            ]
        );
    }

    #[test]
    fn generates_what_is_missing_or_malformed() {
        let t = Trace::from_headers(None, Some("00-xyz-abc-01"), counter());
        // A v4 UUID: version 4, variant 10xx.
        assert_eq!(t.request_id, "11111111-1111-4111-9111-111111111111");
        assert_eq!(
            t.traceparent,
            "00-22222222222222222222222222222222-2222222222222222-01"
        );
        assert!(is_traceparent(&t.traceparent));
        let t = Trace::from_headers(Some("bad ray\"}"), None, counter());
        assert_eq!(t.request_id, "11111111-1111-4111-9111-111111111111");
        assert!(is_traceparent(&t.traceparent));
        let mut asked = Vec::new();
        Trace::from_headers(None, None, |out| asked.push(out.len()));
        assert_eq!(asked, [16, 24], "one draw per id kind");
    }

    #[test]
    fn traceparent_validation() {
        assert!(is_traceparent(VALID));
        assert!(is_traceparent(&format!("01{}-extra", &VALID[2..])));
        for bad in [
            "",
            &VALID[..54],
            &format!("{VALID}-extra"),
            &VALID.to_uppercase(),
            &format!("ff{}", &VALID[2..]),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
        let zero = Trace::from_headers(Some("r"), None, |out| out.fill(0));
        assert!(is_traceparent(&zero.traceparent), "{}", zero.traceparent);
        assert_eq!(
            zero.traceparent,
            "00-00000000000000000000000000000001-0000000000000001-01"
        );
    }
}
