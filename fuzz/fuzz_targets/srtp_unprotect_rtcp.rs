//! SRTCP unprotect (and protect) on arbitrary packets, several per input: never a panic.
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
        &vec![0x11; profile.key_len()],
        &vec![0x22; profile.salt_len()],
    )
    .unwrap();
    let mut rx = Context::new(Policy::new(key.clone()).any_inbound()).unwrap();
    let mut tx = Context::new(Policy::new(key).any_outbound()).unwrap();
    let mut input = rest;
    let mut buf = vec![0u8; 512];
    while !input.is_empty() {
        let n = (input[0] as usize).min(input.len() - 1);
        let pkt = &input[1..1 + n];
        input = &input[1 + n..];
        buf[..pkt.len()].copy_from_slice(pkt);
        if let Ok(m) = rx.unprotect_rtcp(&mut buf, pkt.len()) {
            assert!(m + profile.rtcp_overhead() == pkt.len());
        }
        buf[..pkt.len()].copy_from_slice(pkt);
        if let Ok(m) = tx.protect_rtcp(&mut buf, pkt.len()) {
            let mut open = buf[..m].to_vec();
            assert_eq!(rx.unprotect_rtcp(&mut open, m), Ok(pkt.len()));
            assert_eq!(&open[..pkt.len()], pkt);
        }
    }
});
