//! An upstream address as the router accepts one: a bare `host[:port]`.
//! Cells, fixed rule addresses, learned cells and the allow-list all go
//! through [`validate_address`].

/// Checks that an address is a bare `host[:port]`: no scheme, userinfo,
/// path or whitespace, a DNS name or IPv4 literal, a port in range.
pub fn validate_address(address: &str) -> Result<(), String> {
    let (host, port) = split_host_port(address)?;
    if host.is_empty() || host.len() > 253 {
        return Err(format!("{address:?}: empty or overlong host"));
    }
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !host.split('.').all(ok_label) {
        return Err(format!("{address:?}: not a host name"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(format!("{address:?}: bad port")),
        }
    }
    Ok(())
}

fn split_host_port(address: &str) -> Result<(&str, Option<&str>), String> {
    // Byte by byte: every character refused is ASCII (one pass, where a
    // pattern of characters decodes and compares each in turn).
    let refused = |b: u8| {
        matches!(
            b,
            b'/' | b'@' | b'?' | b'#' | b'\\' | b' ' | b'\t' | b'\r' | b'\n' | b'[' | b']'
        )
    };
    if address.bytes().any(refused) {
        return Err(format!("{address:?}: expected host[:port] only"));
    }
    Ok(match address.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (address, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_addresses() {
        for ok in [
            "cell-2.example.com",
            "127.0.0.1:9102",
            "localhost",
            "a.b:443",
        ] {
            assert!(validate_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "http://x", "user@x", "x/y", "x y", "x:0", "x:99999", "x:", "-x.com", "x..com",
            "[::1]:80", "x\r\n",
        ] {
            assert!(validate_address(bad).is_err(), "{bad}");
        }
    }
}
