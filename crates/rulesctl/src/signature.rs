//! `rulesctl signature`: the cell's side of signed proxied requests: make
//! a signing key pair, and verify the router's signature header (for a
//! cell's auth hook, e.g. nginx `auth_request` through a small wrapper).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use router_keys::{public_key_from_base64, signer_from_base64, verify, Expected, SignerKeys};

use crate::cli::{set_once, unknown, Arg, Args, Failure, Outcome};
use crate::out;

pub const HELP: &str = "\
usage: rulesctl signature keygen
       rulesctl signature public-key --key-file FILE
       rulesctl signature verify --public-key BASE64 --audience HOST[:PORT]
                                 --method METHOD --url PATH[?QUERY]
                                 [--content-length N] [--content-type TYPE]
                                 [--issuer ISS] [--max-lifetime SECONDS]
                                 [--leeway SECONDS] [--now UNIX_MS] TOKEN

keygen prints a new Ed25519 key as two lines: `secret: <base64 seed>` (set
it with `wrangler secret put GITLAB_ROUTER_SIGNING_KEY`) and
`public: <base64>` (give it to the cells).
public-key prints the public key of a secret key read from FILE.
verify checks the X-Gitlab-Http-Router-Signature value a cell received:
signature (EdDSA only), expiry, iat and nbf (leeway default 5 s), lifetime
(exp - iat at most --max-lifetime, default 60 s: the router's default
GITLAB_ROUTER_SIGNATURE_TTL_SECONDS), issuer (default gitlab-http-router),
audience (the cell's own address as the router dialled it), method, path
and query, Content-Type (pass the received one; signed when present) and
Content-Length (pass the received one; checked when signed). The body is
not covered: it is streamed, and hashing it would mean buffering it. On
success it prints the token's claims as JSON and exits 0; otherwise it
prints why on stderr and exits 1.

Replays: verify alone accepts a token again within its lifetime (with the
same path, method and headers). Refuse a second use of its `jti` with your
own store: from Rust, router_keys::check_replay with a
ReplayStore (MemoryReplayStore for one process; a shared store such as
Redis `SET <jti> 1 NX EXAT <exp>` for many); from a hook, keep the printed
`jti` until the printed `exp` and refuse one seen before.

exit: 0 ok, 1 refused or bad key, 2 usage";

pub fn run(mut args: Args) -> Outcome<i32> {
    let sub = match args.next_arg() {
        Some(Arg::Positional(s)) => s,
        Some(other) => return Err(unknown("signature", other)),
        None => {
            return Err(Failure::usage(
                "signature needs keygen, public-key or verify",
            ))
        }
    };
    match sub.as_str() {
        "keygen" => keygen(args),
        "public-key" => public_key(args),
        "verify" => verify_cmd(args),
        other => Err(Failure::usage(format!(
            "signature: unknown subcommand {other:?} (keygen, public-key, verify)"
        ))),
    }
}

fn keygen(mut args: Args) -> Outcome<i32> {
    if let Some(arg) = args.next_arg() {
        return Err(unknown("signature keygen", arg));
    }
    let mut seed = [0u8; 32];
    crate::token::fill_random(&mut seed, "")?;
    let secret = STANDARD.encode(seed);
    let signer = signer_from_base64(&secret, "gitlab-http-router", 60).map_err(Failure::data)?;
    out::line(&format!(
        "secret: {secret}\npublic: {}",
        signer.public_key_base64()
    ));
    Ok(0)
}

fn public_key(mut args: Args) -> Outcome<i32> {
    let mut file = None;
    while let Some(arg) = args.next_arg() {
        match arg {
            Arg::Opt(name, inline) if name == "--key-file" => {
                let v = args.value(&name, inline)?;
                set_once(&mut file, &name, v)?;
            }
            other => return Err(unknown("signature public-key", other)),
        }
    }
    let file = file.ok_or_else(|| Failure::usage("signature public-key needs --key-file FILE"))?;
    let key = std::fs::read_to_string(&file).map_err(|e| Failure::data(format!("{file}: {e}")))?;
    let signer = signer_from_base64(key.trim(), "gitlab-http-router", 60)
        .map_err(|e| Failure::data(format!("{file}: {e}")))?;
    out::line(&signer.public_key_base64());
    Ok(0)
}

fn verify_cmd(mut args: Args) -> Outcome<i32> {
    let (mut key, mut audience, mut method, mut url, mut leeway, mut now, mut token) =
        (None, None, None, None, None, None, None);
    let (mut content_length, mut content_type, mut issuer, mut max_lifetime) =
        (None, None, None, None);
    while let Some(arg) = args.next_arg() {
        match arg {
            Arg::Opt(name, inline) => {
                let slot = match name.as_str() {
                    "--public-key" => &mut key,
                    "--audience" => &mut audience,
                    "--method" => &mut method,
                    "--url" => &mut url,
                    "--leeway" => &mut leeway,
                    "--now" => &mut now,
                    "--content-length" => &mut content_length,
                    "--content-type" => &mut content_type,
                    "--issuer" => &mut issuer,
                    "--max-lifetime" => &mut max_lifetime,
                    _ => return Err(unknown("signature verify", Arg::Opt(name, inline))),
                };
                let v = args.value(&name, inline)?;
                set_once(slot, &name, v)?;
            }
            Arg::Positional(t) => set_once(&mut token, "TOKEN", t)?,
        }
    }
    let need = |v: Option<String>, what: &str| {
        v.ok_or_else(|| Failure::usage(format!("signature verify needs {what}")))
    };
    let key = public_key_from_base64(&need(key, "--public-key")?).map_err(Failure::data)?;
    let (audience, method, url, token) = (
        need(audience, "--audience")?,
        need(method, "--method")?,
        need(url, "--url")?,
        need(token, "TOKEN")?,
    );
    let seconds = |v: Option<String>, name: &str, default: u32| match v {
        None => Ok(default),
        Some(v) => v
            .parse::<u32>()
            .map_err(|_| Failure::usage(format!("{name} {v:?}: expected seconds"))),
    };
    let leeway = seconds(leeway, "--leeway", 5)?;
    let max_lifetime = seconds(
        max_lifetime,
        "--max-lifetime",
        router_core::forward::signing::DEFAULT_TTL_SECS,
    )?;
    let now = match now {
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| Failure::usage(format!("--now {v:?}: expected Unix milliseconds")))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    };
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let expected = Expected {
        content_length: content_length.as_deref(),
        content_type: content_type.as_deref(),
        issuer: issuer
            .as_deref()
            .unwrap_or(router_core::forward::signing::DEFAULT_ISSUER),
        max_lifetime_secs: max_lifetime,
        leeway_secs: leeway,
        ..Expected::new(&audience, &method, path, query, now)
    };
    match verify(token.trim(), &key, &expected) {
        Ok(verified) => {
            let mut json = serde_json::to_value(&verified.claims).unwrap_or_default();
            json["iat"] = verified.issued_at.into();
            json["exp"] = verified.expires_at.into();
            out::line(&json.to_string());
            Ok(0)
        }
        Err(e) => Err(Failure::data(format!("signature refused: {e}"))),
    }
}
