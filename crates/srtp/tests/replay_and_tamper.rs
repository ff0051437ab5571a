//! Tampered and replayed packets are refused with the right status, and refusing a packet
//! changes nothing in the receiver's state.

mod common;

use secrelay_srtp::{Context, Direction, Error, MasterKey, Policy, Profile};

fn pair(profile: Profile, window: usize) -> (Context, Context) {
    let mk = MasterKey::new(
        profile,
        &vec![0x11; profile.key_len()],
        &vec![0x22; profile.salt_len()],
    )
    .unwrap();
    (
        Context::new(Policy::new(mk.clone()).any_outbound().replay_window(window)).unwrap(),
        Context::new(Policy::new(mk).any_inbound().replay_window(window)).unwrap(),
    )
}

fn protect(tx: &mut Context, p: &[u8]) -> Vec<u8> {
    let mut b = p.to_vec();
    b.resize(p.len() + 16, 0);
    let n = tx.protect_rtp(&mut b, p.len()).unwrap();
    b.truncate(n);
    b
}

fn unprotect(rx: &mut Context, p: &[u8]) -> Result<Vec<u8>, Error> {
    let mut b = p.to_vec();
    let n = rx.unprotect_rtp(&mut b, p.len())?;
    b.truncate(n);
    Ok(b)
}

#[test]
fn every_bit_flip_is_caught() {
    for profile in Profile::ALL {
        let (mut tx, mut rx) = pair(profile, 64);
        let p = common::rtp(7, 100, 0, 40, 9);
        let s = protect(&mut tx, &p);
        for bit in 0..s.len() * 8 {
            let mut t = s.clone();
            t[bit / 8] ^= 1 << (bit % 8);
            let r = unprotect(&mut rx, &t);
            assert!(r.is_err(), "{profile}: flipped bit {bit} accepted");
        }
        // The real packet is still accepted afterwards: failures changed no state.
        assert_eq!(unprotect(&mut rx, &s).unwrap(), p, "{profile}");
        assert_eq!(
            unprotect(&mut rx, &s),
            Err(Error::ReplayDuplicate),
            "{profile}"
        );
    }
}

#[test]
fn duplicate_and_old_are_reported_apart() {
    let (mut tx, mut rx) = pair(Profile::AesCm128HmacSha1_80, 64);
    let pkts: Vec<Vec<u8>> = (0..200u16)
        .map(|i| protect(&mut tx, &common::rtp(1, 1000 + i, 0, 10, 0)))
        .collect();
    assert!(unprotect(&mut rx, &pkts[150]).is_ok());
    assert_eq!(unprotect(&mut rx, &pkts[150]), Err(Error::ReplayDuplicate));
    assert!(unprotect(&mut rx, &pkts[100]).is_ok()); // 50 behind: inside the window
    assert_eq!(unprotect(&mut rx, &pkts[86]), Err(Error::ReplayOld)); // 64 behind
    assert!(unprotect(&mut rx, &pkts[87]).is_ok()); // 63 behind
}

#[test]
fn forged_packet_does_not_move_the_window() {
    let (mut tx, mut rx) = pair(Profile::AeadAes128Gcm, 64);
    let good = protect(&mut tx, &common::rtp(1, 10, 0, 10, 0));
    assert!(unprotect(&mut rx, &good).is_ok());
    // A forged packet far ahead, with a bad tag: if it moved the window, packet 11 would be
    // "too old".
    let next = protect(&mut tx, &common::rtp(1, 11, 0, 10, 0));
    let mut forged = protect(&mut tx, &common::rtp(1, 5000, 0, 10, 0));
    let n = forged.len();
    forged[n - 1] ^= 0xff;
    assert_eq!(unprotect(&mut rx, &forged), Err(Error::AuthFailed));
    assert!(unprotect(&mut rx, &next).is_ok());
}

#[test]
fn sender_refuses_to_reuse_an_index_unless_allowed() {
    let mk = MasterKey::new(Profile::AesCm128HmacSha1_80, &[1; 16], &[2; 14]).unwrap();
    let p = common::rtp(5, 7, 0, 20, 0);
    let mut strict = Context::new(Policy::new(mk.clone()).any_outbound()).unwrap();
    let first = protect(&mut strict, &p);
    let mut b = p.clone();
    b.resize(p.len() + 10, 0);
    assert_eq!(
        strict.protect_rtp(&mut b, p.len()),
        Err(Error::ReplayDuplicate)
    );
    let mut lenient = Context::new(Policy::new(mk).any_outbound().allow_repeat_tx(true)).unwrap();
    assert_eq!(protect(&mut lenient, &p), first);
    assert_eq!(
        protect(&mut lenient, &p),
        first,
        "a retransmission is protected identically"
    );
}

#[test]
fn srtcp_replay_and_tamper() {
    for profile in Profile::ALL {
        let (mut tx, mut rx) = pair(profile, 64);
        let p = common::rtcp(9, 6, 1);
        let mut b = p.clone();
        b.resize(p.len() + 20, 0);
        let n = tx.protect_rtcp(&mut b, p.len()).unwrap();
        assert_eq!(n, p.len() + profile.rtcp_overhead());
        b.truncate(n);
        for bit in 0..n * 8 {
            let mut t = b.clone();
            t[bit / 8] ^= 1 << (bit % 8);
            assert!(
                rx.unprotect_rtcp(&mut t, n).is_err(),
                "{profile}: SRTCP bit {bit}"
            );
        }
        let mut t = b.clone();
        assert_eq!(rx.unprotect_rtcp(&mut t, n), Ok(p.len()));
        assert_eq!(&t[..p.len()], &p[..]);
        let mut t = b.clone();
        assert_eq!(rx.unprotect_rtcp(&mut t, n), Err(Error::ReplayDuplicate));
    }
}

#[test]
fn short_and_malformed_packets_get_their_own_status() {
    let (mut tx, mut rx) = pair(Profile::AesCm128HmacSha1_80, 64);
    let mut b = [0u8; 64];
    assert_eq!(rx.unprotect_rtp(&mut b, 5), Err(Error::TooShort));
    b[0] = 0x40; // version 1
    assert_eq!(rx.unprotect_rtp(&mut b, 30), Err(Error::BadHeader));
    b[0] = 0x8f; // 15 CSRCs: header longer than the packet
    assert_eq!(rx.unprotect_rtp(&mut b, 30), Err(Error::BadHeader));
    b[0] = 0x80;
    assert_eq!(rx.unprotect_rtp(&mut b, 16), Err(Error::TooShort)); // no room for a tag
    assert_eq!(rx.unprotect_rtp(&mut b, 65), Err(Error::TooShort)); // len beyond the buffer
    let p = common::rtp(1, 1, 0, 20, 0);
    let mut small = p.clone();
    let n = small.len();
    assert_eq!(
        tx.protect_rtp(&mut small, n),
        Err(Error::BufferTooSmall { needed: n + 10 })
    );
    let mut out = [0u8; 40];
    assert_eq!(
        tx.protect_rtp_into(&p, &mut out),
        Err(Error::BufferTooSmall { needed: 42 })
    );
    assert_eq!(rx.unprotect_rtcp(&mut b, 10), Err(Error::TooShort));
    for len in 0..64 {
        let mut junk = [0xa5u8; 64];
        let _ = rx.unprotect_rtp(&mut junk, len);
        let _ = rx.unprotect_rtcp(&mut junk, len);
    }
}

#[test]
fn streams_templates_directions_and_the_cap() {
    let mk = MasterKey::new(Profile::AesCm128HmacSha1_80, &[1; 16], &[2; 14]).unwrap();
    let mut none = Context::new(Policy::new(mk.clone())).unwrap();
    let mut b = common::rtp(77, 1, 0, 10, 0);
    b.resize(40, 0);
    assert_eq!(none.protect_rtp(&mut b, 22), Err(Error::UnknownSsrc(77)));
    none.add_stream(77, Direction::Outbound).unwrap();
    assert!(none.protect_rtp(&mut b, 22).is_ok());
    assert_eq!(
        none.unprotect_rtp(&mut b, 32),
        Err(Error::WrongDirection(77))
    );

    let mut capped = Context::new(Policy::new(mk.clone()).any_inbound().max_streams(2)).unwrap();
    let mut tx = Context::new(Policy::new(mk).any_outbound()).unwrap();
    let mut sealed = |ssrc: u32| {
        let p = common::rtp(ssrc, 1, 0, 10, 0);
        let mut b = p.clone();
        b.resize(40, 0);
        let n = tx.protect_rtp(&mut b, p.len()).unwrap();
        b.truncate(n);
        b
    };
    // Forged packets with made-up SSRCs make no streams.
    for ssrc in 100..200u32 {
        let mut p = common::rtp(ssrc, 1, 0, 10, 0);
        p.resize(32, 0);
        assert_eq!(capped.unprotect_rtp(&mut p, 32), Err(Error::AuthFailed));
        let mut r = common::rtcp(ssrc, 4, 0);
        r.resize(40, 0);
        assert_eq!(capped.unprotect_rtcp(&mut r, 40), Err(Error::AuthFailed));
    }
    assert_eq!(capped.stream_count(), 0);
    for ssrc in [1u32, 2] {
        let mut b = sealed(ssrc);
        let n = b.len();
        assert!(capped.unprotect_rtp(&mut b, n).is_ok());
    }
    assert_eq!(capped.stream_count(), 2);
    let mut third = sealed(3);
    let n = third.len();
    assert_eq!(
        capped.unprotect_rtp(&mut third.clone(), n),
        Err(Error::StreamLimit)
    );
    assert!(capped.remove_stream(1));
    assert!(capped.unprotect_rtp(&mut third, n).is_ok());
}

#[test]
fn failover_node_resumes_with_set_roc() {
    let profile = Profile::AeadAes128Gcm;
    let mk = MasterKey::new(profile, &[9; 16], &[8; 12]).unwrap();
    let mut tx = Context::new(Policy::new(mk.clone()).any_outbound()).unwrap();
    tx.set_roc(42, 5).unwrap();
    let p = common::rtp(42, 65535, 0, 10, 0);
    let s1 = protect(&mut tx, &p);
    let s2 = protect(&mut tx, &common::rtp(42, 0, 0, 10, 0));
    assert_eq!(tx.roc(42), Some(6));
    // A fresh receiver without the ROC cannot open it; one told the ROC can.
    let mut naive = Context::new(Policy::new(mk.clone()).any_inbound()).unwrap();
    assert_eq!(unprotect(&mut naive, &s1), Err(Error::AuthFailed));
    let mut resumed = Context::new(Policy::new(mk).any_inbound()).unwrap();
    resumed.set_roc(42, 5).unwrap();
    assert_eq!(unprotect(&mut resumed, &s1).unwrap(), p);
    assert!(unprotect(&mut resumed, &s2).is_ok());
    assert_eq!(resumed.roc(42), Some(6));
}

/// A stream taken over from a mark of where it stood (its highest index to the quarter of a
/// rollover, from `stream_indices`) continues with the right rollover counter on both sides of
/// a rollover the mark did not see, in either direction.
#[test]
fn failover_node_resumes_from_a_quarter_mark() {
    let profile = Profile::AesCm128HmacSha1_80;
    let mk = MasterKey::new(profile, &[3; 16], &[4; 14]).unwrap();
    let mut tx = Context::new(Policy::new(mk.clone()).any_outbound()).unwrap();
    tx.set_roc(7, 2).unwrap();
    // The mark is taken at SEQ 50,000 of rollover 2; the stream then rolls over to 3.
    for seq in 49_990..50_001u16 {
        protect(&mut tx, &common::rtp(7, seq, 0, 10, 0));
    }
    let indices = |c: &Context| c.stream_indices().into_iter().find(|(s, _, _)| *s == 7);
    let (_, highest, rtcp_next) = indices(&tx).unwrap();
    assert_eq!(highest, Some((2 << 16) + 50_000));
    assert_eq!(rtcp_next, indices(&tx).unwrap().2);
    let mark = highest.unwrap() >> 14;
    let mut later = Vec::new();
    for seq in (50_001..=65_535u16).chain(0..20) {
        let p = common::rtp(7, seq, 0, 10, 0);
        later.push((p.clone(), protect(&mut tx, &p)));
    }
    assert_eq!(tx.roc(7), Some(3));
    // A receiver resumed from the mark opens what comes after the rollover; a sender resumed
    // from it protects the next packet as the first sender would have.
    let mut taken_rx = Context::new(Policy::new(mk.clone()).any_inbound()).unwrap();
    taken_rx.resume_at(7, mark << 14).unwrap();
    let (p, s) = later.last().unwrap();
    assert_eq!(&unprotect(&mut taken_rx, s).unwrap(), p);
    assert_eq!(taken_rx.roc(7), Some(3));
    let mut taken_tx = Context::new(Policy::new(mk).any_outbound()).unwrap();
    taken_tx.resume_at(7, mark << 14).unwrap();
    let next = common::rtp(7, 20, 0, 10, 0);
    assert_eq!(protect(&mut taken_tx, &next), protect(&mut tx, &next));
    assert!(taken_tx.resume_at(7, 1 << 48).is_err());
}

/// DTLS-SRTP with RTCP on a port of its own: a context whose SRTCP keys come from a second
/// master key protects RTCP that only that key unprotects, and RTP that only the first does.
#[test]
fn a_separate_rtcp_key_keys_srtcp_alone() {
    for profile in Profile::ALL {
        let key = |b: u8| {
            MasterKey::new(
                profile,
                &vec![b; profile.key_len()],
                &vec![b ^ 0x5a; profile.salt_len()],
            )
            .unwrap()
        };
        let (rtp_key, rtcp_key) = (key(0x11), key(0x33));
        let mut tx = Context::new(
            Policy::new(rtp_key.clone())
                .rtcp_key(rtcp_key.clone())
                .any_outbound(),
        )
        .unwrap();
        let mut rx_rtp = Context::new(Policy::new(rtp_key.clone()).any_inbound()).unwrap();
        let mut rx_rtcp = Context::new(Policy::new(rtcp_key.clone()).any_inbound()).unwrap();
        let mut rx_both = Context::new(
            Policy::new(rtp_key.clone())
                .rtcp_key(rtcp_key)
                .any_inbound(),
        )
        .unwrap();

        let p = common::rtp(7, 100, 0, 40, 9);
        let s = protect(&mut tx, &p);
        assert_eq!(unprotect(&mut rx_rtp, &s).unwrap(), p, "{profile}");
        assert_eq!(unprotect(&mut rx_both, &s).unwrap(), p, "{profile}");

        let sr = common::rtcp(7, 6, 3);
        let mut b = sr.clone();
        b.resize(sr.len() + 32, 0);
        let n = tx.protect_rtcp(&mut b, sr.len()).unwrap();
        b.truncate(n);
        for (rx, takes) in [
            (&mut rx_rtp, false),
            (&mut rx_rtcp, true),
            (&mut rx_both, true),
        ] {
            let mut c = b.clone();
            let r = rx.unprotect_rtcp(&mut c, b.len());
            assert_eq!(r.is_ok(), takes, "{profile}: {r:?}");
            if let Ok(m) = r {
                assert_eq!(&c[..m], &sr[..], "{profile}");
            }
        }
    }
    let other = MasterKey::new(Profile::AeadAes128Gcm, &[1; 16], &[2; 12]).unwrap();
    let cm = MasterKey::new(Profile::AesCm128HmacSha1_80, &[1; 16], &[2; 14]).unwrap();
    assert!(Context::new(Policy::new(cm).rtcp_key(other)).is_err());
}
