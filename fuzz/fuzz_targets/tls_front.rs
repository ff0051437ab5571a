#![no_main]

//! Bytes from a TCP client into the HTTPS front's TLS server connection, made as `secrelay
//! serve` makes it (TLS 1.3 and 1.2, ECDSA P-256, tickets, ALPN), in pieces of the sizes the
//! input's first bytes give: rustls reads and answers them and the listener names any failure
//! as it counts it; never a panic, and a stranger's bytes never complete a handshake.

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::fuzzing::tls_front;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (cuts, records) = rest.split_at(usize::from(n % 8).min(rest.len()));
    match tls_front(records, cuts) {
        Ok(state) => assert_eq!(
            state, "handshaking",
            "no handshake completes without a client"
        ),
        Err(reason) => assert!(!reason.is_empty()),
    }
});
