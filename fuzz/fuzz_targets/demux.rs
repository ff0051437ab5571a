#![no_main]

//! The edge's one parse of a datagram (`secrelay_wire::demux`): never panics, agrees with the
//! first-byte classifier, and what it keeps reads back over the same bytes without a second
//! parse (the STUN message, its target ufrag) and agrees with a full parse.

use libfuzzer_sys::fuzz_target;
use secrelay_wire::demux::{demux, Class};
use secrelay_wire::rtp::{classify, PacketKind, RtcpHeader, RtpHeader};
use secrelay_wire::stun::Message;

fuzz_target!(|data: &[u8]| {
    let class = demux(data);
    let kind = classify(data);
    match class {
        Class::Stun(facts) => {
            assert_eq!(kind, PacketKind::Stun);
            let m = facts.message(data).expect("the bytes it was parsed from");
            let full = Message::parse(data).expect("demux parsed it");
            assert_eq!(m.parts(), full.parts());
            if let Some(u) = facts.target_ufrag(data) {
                let user = full.username().expect("a target ufrag comes from USERNAME");
                assert!(user.starts_with(u.as_bytes()));
                assert_eq!(user.get(u.len()), Some(&b':'));
            }
            // Other bytes do not read back.
            if !data.is_empty() {
                assert!(facts.message(&data[..data.len() - 1]).is_none());
            }
        }
        Class::Dtls => assert_eq!(kind, PacketKind::Dtls),
        Class::Rtp(f) => {
            assert_eq!(kind, PacketKind::Rtp);
            let h = RtpHeader::parse(data).expect("demux parsed it");
            assert_eq!(f.ssrc, h.ssrc());
            assert_eq!(f.sequence, h.sequence());
            assert_eq!(usize::from(f.header_len), h.header_len());
        }
        Class::Rtcp(f) => {
            assert_eq!(kind, PacketKind::Rtcp);
            assert_eq!(
                f.ssrc,
                RtcpHeader::parse(data)
                    .expect("demux parsed it")
                    .sender_ssrc()
            );
        }
        Class::Malformed(_) => assert!(matches!(
            kind,
            PacketKind::Stun | PacketKind::Rtp | PacketKind::Rtcp
        )),
        Class::Other => {
            assert_eq!(kind, PacketKind::Other);
            assert!(matches!(data[0], 16..=19 | 64..=79 | 128..=191));
        }
        Class::Unclassified => {
            assert_eq!(kind, PacketKind::Other);
            assert!(!matches!(data.first(), Some(0..=3 | 16..=79 | 128..=191)));
        }
    }
});
