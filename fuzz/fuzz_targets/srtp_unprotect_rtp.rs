//! SRTP unprotect on arbitrary packets, several per input so the replay window, index
//! estimation and stream creation see sequences: never a panic, never a length past the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_srtp::{Context, MasterKey, Policy, Profile};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let profile = Profile::ALL[sel as usize % Profile::ALL.len()];
    let key = MasterKey::new(
        profile,
        &vec![0x2b; profile.key_len()],
        &vec![0x5a; profile.salt_len()],
    )
    .unwrap();
    let mut rx = Context::new(
        Policy::new(key.clone())
            .any_inbound()
            .replay_window(64 + (sel as usize >> 3) * 64),
    )
    .unwrap();
    let mut tx = Context::new(Policy::new(key).any_outbound()).unwrap();
    // Packets are length-prefixed (one byte); a leftover tail is one more packet.
    let mut input = rest;
    let mut buf = vec![0u8; 512];
    while !input.is_empty() {
        let n = (input[0] as usize).min(input.len() - 1);
        let pkt = &input[1..1 + n];
        input = &input[1 + n..];
        buf[..pkt.len()].copy_from_slice(pkt);
        if let Ok(m) = rx.unprotect_rtp(&mut buf, pkt.len()) {
            assert!(m <= pkt.len());
        }
        // The same bytes as plaintext: protect must either succeed or refuse cleanly, and
        // what it makes must open again.
        buf[..pkt.len()].copy_from_slice(pkt);
        if let Ok(m) = tx.protect_rtp(&mut buf, pkt.len()) {
            assert_eq!(m, pkt.len() + profile.rtp_tag_len());
        }
    }
});
