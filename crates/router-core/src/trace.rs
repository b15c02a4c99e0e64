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
    /// The ids for a request with these headers. `random_hex32` gives 32
    /// random lowercase hex digits (asked at most twice, and only for what
    /// the request lacks).
    pub fn from_headers(
        cf_ray: Option<&str>,
        traceparent: Option<&str>,
        mut random_hex32: impl FnMut() -> String,
    ) -> Trace {
        let request_id = match cf_ray.filter(|r| is_ray(r)) {
            Some(ray) => ray.to_string(),
            None => uuid_of(&random_hex32()),
        };
        let traceparent = match traceparent.map(str::trim).filter(|t| is_traceparent(t)) {
            Some(t) => t.to_string(),
            None => {
                let trace_id = random_hex32();
                let parent_id = random_hex32();
                let mut t = String::with_capacity(55);
                t.push_str("00-");
                push_nonzero(&mut t, &trace_id);
                t.push('-');
                push_nonzero(&mut t, &parent_id[..16]);
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

/// `hex`, with its last digit made `1` when it is all zeros (an all-zero
/// trace or parent id is invalid).
fn push_nonzero(out: &mut String, hex: &str) {
    if !hex.is_empty() && hex.bytes().all(|b| b == b'0') {
        out.push_str(&hex[..hex.len() - 1]);
        out.push('1');
    } else {
        out.push_str(hex);
    }
}

/// 32 hex digits as a UUID's 8-4-4-4-12 groups.
fn uuid_of(hex: &str) -> String {
    if hex.len() != 32 || !hex.is_ascii() {
        return hex.to_string();
    }
    let mut uuid = String::with_capacity(36);
    for (i, group) in [0..8, 8..12, 12..16, 16..20, 20..32]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            uuid.push('-');
        }
        uuid.push_str(&hex[group]);
    }
    uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn counter() -> impl FnMut() -> String {
        let mut n = 0u8;
        move || {
            n += 1;
            format!("{n:x}").repeat(32)
        }
    }

    #[test]
    fn keeps_the_ray_and_a_valid_traceparent() {
        let t = Trace::from_headers(Some("8f1c2a3b4c5d6e7f-AMS"), Some(VALID), || {
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
        assert_eq!(t.request_id, "11111111-1111-1111-1111-111111111111");
        assert_eq!(
            t.traceparent,
            "00-22222222222222222222222222222222-3333333333333333-01"
        );
        assert!(is_traceparent(&t.traceparent));
        let t = Trace::from_headers(Some("bad ray\"}"), None, counter());
        assert_eq!(t.request_id, "11111111-1111-1111-1111-111111111111");
        assert!(is_traceparent(&t.traceparent));
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
        let zero = Trace::from_headers(Some("r"), None, || "0".repeat(32));
        assert!(is_traceparent(&zero.traceparent), "{}", zero.traceparent);
    }
}
