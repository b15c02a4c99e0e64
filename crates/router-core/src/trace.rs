//! Request tracing: the request id and the W3C `traceparent` every
//! forwarded request and every Topology Service call carry, and that the
//! request's log line names, so a line can be joined with the cell's own
//! logs and traces.
//!
//! The request id is Cloudflare's `CF-Ray` (set by Cloudflare on every
//! request, never the client's) or, without one, a generated UUID; a
//! client's own `X-Request-Id` is never trusted (the forwarded request's is
//! replaced). The client's `traceparent` is kept when it is valid W3C
//! Trace Context (level 1): version 00 exactly, a later version by its
//! first 55 characters, written as version 00 (the fields this router
//! understands; nothing past them is kept); version `ff` never. Otherwise
//! a new one is started. The client's `tracestate` travels only with its
//! own `traceparent`: dropped when that is replaced, invalid list members
//! drop it whole, and members past 512 bytes are left out.

use crate::hex::push_hex;
use crate::json::PushAscii;

/// The header the request id travels in.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// W3C Trace Context.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// Vendor trace state that goes with `traceparent`.
pub const TRACESTATE_HEADER: &str = "tracestate";
/// Cloudflare's id of the request.
pub const CF_RAY_HEADER: &str = "cf-ray";

/// A `traceparent`'s length in version 00, and what a later version is
/// read by.
const TRACEPARENT_LEN: usize = 55;
/// The most `tracestate` the router forwards (W3C: vendors should
/// propagate at least 512 characters; members beyond are dropped whole).
pub const TRACESTATE_MAX_BYTES: usize = 512;
/// The most list members a `tracestate` may have.
const TRACESTATE_MAX_MEMBERS: usize = 32;

/// One request's ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub request_id: String,
    pub traceparent: String,
    /// The client's `tracestate`, checked; empty: none is forwarded.
    pub tracestate: String,
}

impl Trace {
    /// The ids for a request with these headers. `random` fills a buffer
    /// with CSPRNG bytes (asked at most twice, and only for what the
    /// request lacks).
    pub fn from_headers(
        cf_ray: Option<&str>,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
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
        let kept = traceparent.map(str::trim).and_then(canonical_traceparent);
        let tracestate = match (&kept, tracestate) {
            (Some(_), Some(state)) => checked_tracestate(state),
            _ => String::new(),
        };
        let traceparent = match kept {
            Some(t) => t,
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
                t.push_ascii('-');
                push_hex(&mut t, parent_id);
                t.push_str("-01");
                t
            }
        };
        Trace {
            request_id,
            traceparent,
            tracestate,
        }
    }

    /// The headers a service call carries (a forwarded request carries
    /// [`TRACESTATE_HEADER`] too, when there is one).
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
/// version 00 has exactly these four fields; a later version is read by
/// its first 55 characters, which a `-` must follow if anything does;
/// version ff, and all-zero ids, are invalid.
pub fn is_traceparent(value: &str) -> bool {
    canonical_traceparent(value).is_some()
}

/// A valid `traceparent` ([`is_traceparent`]) as the router forwards it:
/// version 00 as it is, a later version's first four fields written as
/// version 00 (all this router can vouch for).
pub fn canonical_traceparent(value: &str) -> Option<String> {
    // `get` is `None` when byte 55 is inside a character: then the head
    // holds a non-ASCII byte and is invalid anyway.
    let head = value.get(..TRACEPARENT_LEN)?;
    let rest = value.get(TRACEPARENT_LEN..)?;
    let mut fields = head.split('-');
    let (version, trace_id, parent_id, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let lengths_ok = fields.next().is_none()
        && version.len() == 2
        && trace_id.len() == 32
        && parent_id.len() == 16
        && flags.len() == 2;
    let rest_ok = rest.is_empty() || (version != "00" && rest.starts_with('-'));
    let valid = lengths_ok
        && rest_ok
        && version != "ff"
        && [version, trace_id, parent_id, flags]
            .iter()
            .all(|f| is_lower_hex(f))
        && trace_id.bytes().any(|b| b != b'0')
        && parent_id.bytes().any(|b| b != b'0');
    if !valid {
        return None;
    }
    let mut out = String::with_capacity(TRACEPARENT_LEN);
    for (i, field) in ["00", trace_id, parent_id, flags].into_iter().enumerate() {
        if i > 0 {
            out.push_ascii('-');
        }
        out.push_str(field);
    }
    Some(out)
}

/// A client's `tracestate` as the router forwards it: its list members
/// (`key=value`, W3C Trace Context §3.3), at most 32 of them and as many
/// as fit in [`TRACESTATE_MAX_BYTES`]; empty when any member is invalid
/// (it is then not propagated at all).
pub fn checked_tracestate(value: &str) -> String {
    let mut out = String::new();
    let mut members = 0;
    let mut full = false;
    for member in value.split(',').map(|m| m.trim_matches([' ', '\t'])) {
        if member.is_empty() {
            continue;
        }
        if !is_tracestate_member(member) {
            return String::new();
        }
        members += 1;
        let room = out.len() + member.len() + usize::from(!out.is_empty());
        full |= members > TRACESTATE_MAX_MEMBERS || room > TRACESTATE_MAX_BYTES;
        if full {
            // Dropped from the right, as W3C lets a vendor truncate (the
            // rest is still checked).
            continue;
        }
        if !out.is_empty() {
            out.push_ascii(',');
        }
        out.push_str(member);
    }
    out
}

/// `key=value`: key `[a-z0-9][a-z0-9_*/-]{0,255}` (with `@tenant`-style
/// multi-tenant keys), value 1–256 printable ASCII characters but `,` and
/// `=`, not ending in a space.
fn is_tracestate_member(member: &str) -> bool {
    let Some((key, value)) = member.split_once('=') else {
        return false;
    };
    let key_char =
        |b: u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@');
    let key_ok = (1..=256).contains(&key.len())
        && key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && key.bytes().all(key_char)
        && key.bytes().filter(|&b| b == b'@').count() <= 1;
    let value_ok = (1..=256).contains(&value.len())
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        && !value.ends_with(' ');
    key_ok && value_ok
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
            uuid.push_ascii('-');
        }
        push_hex(&mut uuid, bytes.get(group).unwrap_or_default());
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
        let t = Trace::from_headers(Some("8f1c2a3b4c5d6e7f-AMS"), Some(VALID), None, |_| {
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
        let t = Trace::from_headers(None, Some("00-xyz-abc-01"), None, counter());
        // A v4 UUID: version 4, variant 10xx.
        assert_eq!(t.request_id, "11111111-1111-4111-9111-111111111111");
        assert_eq!(
            t.traceparent,
            "00-22222222222222222222222222222222-2222222222222222-01"
        );
        assert!(is_traceparent(&t.traceparent));
        let t = Trace::from_headers(Some("bad ray\"}"), None, None, counter());
        assert_eq!(t.request_id, "11111111-1111-4111-9111-111111111111");
        assert!(is_traceparent(&t.traceparent));
        let mut asked = Vec::new();
        Trace::from_headers(None, None, None, |out| asked.push(out.len()));
        assert_eq!(asked, [16, 24], "one draw per id kind");
    }

    #[test]
    fn traceparent_validation() {
        assert!(is_traceparent(VALID));
        assert!(is_traceparent(&format!("01{}-extra", &VALID[2..])));
        // A later version: its first 55 characters, as version 00.
        assert_eq!(
            canonical_traceparent(&format!("cc{}-{}", &VALID[2..], "x".repeat(100_000))).as_deref(),
            Some(VALID)
        );
        assert_eq!(canonical_traceparent(VALID).as_deref(), Some(VALID));
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
        let zero = Trace::from_headers(Some("r"), None, None, |out| out.fill(0));
        assert!(is_traceparent(&zero.traceparent), "{}", zero.traceparent);
        assert_eq!(
            zero.traceparent,
            "00-00000000000000000000000000000001-0000000000000001-01"
        );
    }

    /// Non-ASCII bytes anywhere in the first 55: refused, never a panic
    /// (a character across byte 2, 35, 52 or 55 panicked the slicing).
    #[test]
    fn non_ascii_traceparent_is_refused() {
        let issue = format!("0\u{e9}{}", "a".repeat(60));
        assert_eq!(canonical_traceparent(&issue), None);
        for at in 0..VALID.len() {
            for wide in ["\u{e9}", "\u{20ac}", "\u{1f600}"] {
                let mut value = String::from(VALID);
                value.replace_range(at..at + 1, wide);
                assert_eq!(canonical_traceparent(&value), None, "{value:?}");
                value.push_str("-extra");
                assert_eq!(canonical_traceparent(&value), None, "{value:?}");
            }
        }
        let later = format!("cc{}-\u{e9}", &VALID[2..]);
        assert_eq!(canonical_traceparent(&later).as_deref(), Some(VALID));
    }

    #[test]
    fn tracestate_goes_only_with_its_own_traceparent() {
        let state = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
        let kept = Trace::from_headers(Some("r"), Some(VALID), Some(state), counter());
        assert_eq!(kept.tracestate, state);
        let replaced = Trace::from_headers(Some("r"), Some("00-bad"), Some(state), counter());
        assert_eq!(
            replaced.tracestate, "",
            "dropped with a replaced traceparent"
        );
        let absent = Trace::from_headers(Some("r"), None, Some(state), counter());
        assert_eq!(absent.tracestate, "");
    }

    #[test]
    fn tracestate_validation_and_cap() {
        assert_eq!(checked_tracestate(" a=1 ,, b@c=x y "), "a=1,b@c=x y");
        for bad in [
            "a=1,B=2",
            "a",
            "a=",
            "=1",
            "a=1=2",
            "a=\"q\"\u{1}",
            "a=x\u{1}cookie",
            "a@b@c=1",
        ] {
            assert_eq!(checked_tracestate(bad), "", "{bad:?}");
        }
        // Printable quotes are allowed by the grammar.
        assert_eq!(checked_tracestate("a=\"q\""), "a=\"q\"");
        let members: Vec<String> = (0..40)
            .map(|i| format!("k{i}={}", "v".repeat(20)))
            .collect();
        let capped = checked_tracestate(&members.join(","));
        assert!(capped.len() <= TRACESTATE_MAX_BYTES, "{}", capped.len());
        assert_eq!(
            capped.split(',').count(),
            20,
            "members past 512 bytes left out"
        );
        assert!(capped.starts_with("k0="));
        let many: Vec<String> = (0..40).map(|i| format!("k{i}=1")).collect();
        assert_eq!(checked_tracestate(&many.join(",")).split(',').count(), 32);
        let huge = format!("a={}", "v".repeat(100_000));
        assert_eq!(checked_tracestate(&huge), "");
    }
}
