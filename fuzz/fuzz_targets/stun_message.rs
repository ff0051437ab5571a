#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_wire::stun::{Class, Message, MessageBuilder};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::parse(data) {
        let _ = m.check_integrity(b"password");
        let _ = (
            m.username(),
            m.priority(),
            m.use_candidate(),
            m.ice_controlling(),
            m.ice_controlled(),
        );
        let _ = (
            m.xor_mapped_address(),
            m.error_code(),
            m.attributes().count(),
        );
        // Answering what parsed must never fail for lack of room in a 1500-byte buffer
        // (USERNAME is at most what fits in the request).
        let mut out = [0u8; 1500];
        let mut b = MessageBuilder::new(&mut out, Class::Success, m.method(), m.transaction_id());
        if let Some(u) = m.username() {
            b = b.attribute(0x0006, u);
        }
        let n = b
            .integrity(b"password")
            .fingerprint()
            .expect("room for the answer");
        let back = Message::parse(&out[..n]).expect("our own message parses");
        back.check_integrity(b"password")
            .expect("our own integrity verifies");
    }
});
