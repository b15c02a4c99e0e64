//! `rulesctl signature`: the cell's side of signed proxied requests: make
//! a signing key pair, and verify the router's signature header (for a
//! cell's auth hook, e.g. nginx `auth_request` through a small wrapper).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use router_core::forward::signing::{DEFAULT_ISSUER, DEFAULT_TTL_SECS};
use router_keys::{public_key_from_base64, signer_from_base64, verify, Expected, SignerKeys};

use crate::cli::{Failure, Outcome};
use crate::out;

/// Signing keys, and checking the router's request signatures.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Print a new Ed25519 key pair
    #[command(after_help = "\
Prints two lines: `secret: <base64 seed>` (set it with `wrangler secret put
GITLAB_ROUTER_SIGNING_KEY`) and `public: <base64>` (give it to the cells).")]
    Keygen,
    /// Print the public key of the secret key in FILE
    PublicKey {
        /// The secret key (base64 seed), as keygen prints it
        #[arg(long, value_name = "FILE")]
        key_file: String,
    },
    /// Check the router's signature header a cell received
    Verify(Verify),
}

#[derive(clap::Args)]
#[command(after_long_help = "\
Checks the signature (EdDSA only), expiry, iat and nbf (within --leeway),
the lifetime (exp - iat at most --max-lifetime: the router's default
GITLAB_ROUTER_SIGNATURE_TTL_SECONDS), the issuer, the audience, method,
path and query, Content-Type (signed when present) and Content-Length
(checked when signed). The body is not covered: it is streamed, and hashing
it would mean buffering it. On success it prints the token's claims as JSON
and exits 0; otherwise it prints why on stderr and exits 1.

Replays: verify alone accepts a token again within its lifetime (with the
same path, method and headers). Refuse a second use of its `jti` with your
own store: from Rust, router_keys::check_replay with a
ReplayStore (MemoryReplayStore for one process; a shared store such as
Redis `SET <jti> 1 NX EXAT <exp>` for many); from a hook, keep the printed
`jti` until the printed `exp` and refuse one seen before.

exit: 0 ok, 1 refused or bad key, 2 usage")]
pub struct Verify {
    /// The router's public key (keygen's `public:`)
    #[arg(long, value_name = "BASE64")]
    public_key: String,
    /// The cell's own address, as the router dialled it
    #[arg(long, value_name = "HOST[:PORT]")]
    audience: String,
    /// The request's method
    #[arg(long)]
    method: String,
    /// The request's path and query
    #[arg(long, value_name = "PATH[?QUERY]")]
    url: String,
    /// The Content-Length received, if any
    #[arg(long, value_name = "N")]
    content_length: Option<String>,
    /// The Content-Type received, if any
    #[arg(long, value_name = "TYPE")]
    content_type: Option<String>,
    /// The issuer to expect
    #[arg(long, value_name = "ISS", default_value = DEFAULT_ISSUER)]
    issuer: String,
    /// The longest lifetime (exp - iat) to accept
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TTL_SECS)]
    max_lifetime: u32,
    /// The clock skew to allow for exp, iat and nbf
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    leeway: u32,
    /// The time to check at [default: now]
    #[arg(long, value_name = "UNIX_MS")]
    now: Option<u64>,
    /// The signature header's value
    token: String,
}

pub fn run(command: Command) -> Outcome<i32> {
    match command {
        Command::Keygen => keygen(),
        Command::PublicKey { key_file } => public_key(&key_file),
        Command::Verify(args) => verify_cmd(args),
    }
}

fn keygen() -> Outcome<i32> {
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

fn public_key(file: &str) -> Outcome<i32> {
    let key = std::fs::read_to_string(file).map_err(|e| Failure::data(format!("{file}: {e}")))?;
    let signer = signer_from_base64(key.trim(), "gitlab-http-router", 60)
        .map_err(|e| Failure::data(format!("{file}: {e}")))?;
    out::line(&signer.public_key_base64());
    Ok(0)
}

fn verify_cmd(args: Verify) -> Outcome<i32> {
    let key = public_key_from_base64(&args.public_key).map_err(Failure::data)?;
    let now = args.now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    });
    let url = args.url;
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let expected = Expected {
        content_length: args.content_length.as_deref(),
        content_type: args.content_type.as_deref(),
        issuer: &args.issuer,
        max_lifetime_secs: args.max_lifetime,
        leeway_secs: args.leeway,
        ..Expected::new(&args.audience, &args.method, path, query, now)
    };
    match verify(args.token.trim(), &key, &expected) {
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
