#![no_main]

//! The record-layer walk a DTLS endpoint makes of every datagram before its engine sees it
//! (`secrelay_dtls::record::inspect`): never panics, and what it reports holds together (a
//! ClientHello is a plaintext record, a hidden type a protected one; only the DTLS range
//! starts records).

use libfuzzer_sys::fuzz_target;
use secrelay_dtls::record::inspect;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = inspect(data) {
        assert!(s.records >= 1);
        assert!(!s.client_hello || s.plaintext);
        assert!(!s.protected_handshake || s.protected);
        assert!(!s.hidden_type || s.protected);
        assert!(s.plaintext || s.protected);
        assert!(matches!(data[0], 20..=23 | 0x20..=0x2f));
        // Each record is at least a header and a byte.
        assert!(data.len() >= 2 * s.records);
    }
});
