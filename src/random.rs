//! CSPRNG bytes for request ids and trace ids, drawn from
//! `crypto.getRandomValues` a pool at a time.

use std::cell::RefCell;

use wasm_bindgen::JsCast;

/// Bytes drawn from the CSPRNG at a time for [`random_bytes`]: one
/// `getRandomValues` call per ~100 requests (a call costs workerd tens of
/// µs, most of it whatever the size, which is at most 64 KiB).
const RANDOM_POOL: usize = 4096;

thread_local! {
    /// The CSPRNG bytes not handed out yet, and how many of the pool are used.
    static RANDOM: RefCell<([u8; RANDOM_POOL], usize)> = const { RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
}

/// Fills `out` with CSPRNG bytes, for request ids and trace ids.
///
/// A request needs up to 56 (a request id, a trace id and a parent id,
/// a signature id);
/// asking `crypto.randomUUID()` for each id cost three calls out of wasm
/// (the global, its `crypto`, the UUID) and a string copied back per id.
/// Instead the bytes are drawn [`RANDOM_POOL`] at a time
/// (`crypto.getRandomValues`, one call per ~100 requests) and handed out
/// from the pool, which does not keep them.
pub fn random_bytes(out: &mut [u8]) {
    let drawn = RANDOM.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (buf, used) = &mut *pool;
        if out.len() > RANDOM_POOL {
            return false;
        }
        if *used + out.len() > RANDOM_POOL {
            let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
            let filled = global
                .crypto()
                .and_then(|c| c.get_random_values_with_u8_array(&mut buf[..]));
            if filled.is_err() {
                return false;
            }
            *used = 0;
        }
        let Some(taken) = buf.get_mut(*used..*used + out.len()) else {
            return false;
        };
        out.copy_from_slice(taken);
        // Used bytes are not kept around.
        taken.fill(0);
        *used += out.len();
        true
    });
    if !drawn {
        // Never reached by the trace ids on workerd (at most 24 bytes at a
        // time, and crypto is there); still unique enough for routing.
        for b in out.iter_mut() {
            *b = (js_sys::Math::random() * 256.0) as u8;
        }
    }
}
