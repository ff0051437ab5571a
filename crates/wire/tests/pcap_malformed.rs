//! Malformed capture files are errors that say what is wrong; nothing
//! panics on arbitrary input.

mod common;

use std::net::Ipv4Addr;

use common::*;
use proptest::prelude::*;
use secrelay_wire::pcap::{Capture, CaptureError, CaptureReader};

fn small_pcap() -> Vec<u8> {
    let ip = ipv4_udp(
        Ipv4Addr::new(1, 2, 3, 4),
        Ipv4Addr::new(5, 6, 7, 8),
        9,
        10,
        b"0123456789",
        true,
        &[],
    );
    let frame = ethernet(&[], 0x0800, &ip);
    pcap_file(
        &PcapSpec {
            big_endian: false,
            nano: false,
            link_type: 1,
            snaplen: 65535,
        },
        &[
            (1, frame.clone(), frame.len() as u32),
            (2, frame.clone(), frame.len() as u32),
        ],
    )
}

fn small_pcapng() -> Vec<u8> {
    let ip = ipv4_udp(
        Ipv4Addr::new(1, 2, 3, 4),
        Ipv4Addr::new(5, 6, 7, 8),
        9,
        10,
        b"0123456789",
        true,
        &[],
    );
    let mut f = ng_shb(&[]);
    f.extend(ng_idb(101, 0, &[(9, vec![9])]));
    f.extend(ng_epb(0, 5, &ip, ip.len() as u32, &[(1, b"c".to_vec())]));
    f.extend(ng_epb(0, 6, &ip, ip.len() as u32, &[]));
    f
}

#[test]
fn bad_magic() {
    match Capture::parse(b"GIF89a......................") {
        Err(CaptureError::UnknownFormat { magic }) => assert_eq!(&magic, b"GIF8"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(Capture::parse(b""), Err(CaptureError::TooShort)));
    assert!(matches!(
        Capture::parse(b"\xd4\xc3"),
        Err(CaptureError::TooShort)
    ));
    let e = Capture::parse(b"GIF89a").unwrap_err();
    assert!(e.to_string().contains("not a pcap or pcapng file"), "{e}");
}

#[test]
fn truncated_pcap() {
    let file = small_pcap();
    // Header cut.
    for cut in 4..24 {
        assert!(
            matches!(Capture::parse(&file[..cut]), Err(CaptureError::Truncated)),
            "cut {cut}"
        );
    }
    // Header alone: no packets, not an error.
    assert_eq!(Capture::parse(&file[..24]).unwrap().packets.len(), 0);
    let first_end = 24 + 16 + (file.len() - 24) / 2 - 16;
    assert_eq!(Capture::parse(&file[..first_end]).unwrap().packets.len(), 1);
    // Record header or data cut: the packets before it come out, then an error.
    for cut in [
        first_end + 1,
        first_end + 15,
        first_end + 16,
        file.len() - 1,
    ] {
        let mut reader = CaptureReader::new(&file[..cut]).unwrap();
        assert!(reader.next_packet().unwrap().is_ok());
        assert!(
            matches!(reader.next_packet(), Some(Err(CaptureError::Truncated))),
            "cut {cut}"
        );
        assert!(
            reader.next_packet().is_none(),
            "iteration ends after an error"
        );
        assert!(matches!(
            Capture::parse(&file[..cut]),
            Err(CaptureError::Truncated)
        ));
    }
}

#[test]
fn truncated_pcapng() {
    let file = small_pcapng();
    for cut in (4..file.len()).filter(|c| c % 4 == 0 || c % 7 == 0) {
        let r = Capture::parse(&file[..cut]);
        // Either cleanly at a block boundary, or a truncation error.
        match r {
            Ok(c) => assert!(c.packets.len() < 2, "cut {cut}"),
            Err(CaptureError::Truncated) => {}
            Err(e) => panic!("cut {cut}: {e}"),
        }
    }
}

#[test]
fn malformed_pcapng_blocks() {
    // Block length not a multiple of 4.
    let mut f = small_pcapng();
    let shb_len = 28;
    f[shb_len + 4] = 21;
    assert!(matches!(
        Capture::parse(&f),
        Err(CaptureError::Malformed(_))
    ));

    // Trailer length differs from the header length.
    let mut f = small_pcapng();
    let idb_len = u32::from_le_bytes(f[shb_len + 4..shb_len + 8].try_into().unwrap()) as usize;
    f[shb_len + idb_len - 4] ^= 0x40;
    let e = Capture::parse(&f).unwrap_err();
    assert!(matches!(e, CaptureError::Malformed(_)), "{e:?}");
    assert!(e.to_string().contains("length"), "{e}");

    // Packet on an interface that was never described.
    let ip = [0u8; 20];
    let mut f = ng_shb(&[]);
    f.extend(ng_idb(101, 0, &[]));
    f.extend(ng_epb(3, 0, &ip, 20, &[]));
    assert!(matches!(
        Capture::parse(&f),
        Err(CaptureError::UnknownInterface(3))
    ));

    // Packet before any interface.
    let mut f = ng_shb(&[]);
    f.extend(ng_epb(0, 0, &ip, 20, &[]));
    assert!(matches!(
        Capture::parse(&f),
        Err(CaptureError::UnknownInterface(0))
    ));

    // First block is not a section header.
    let mut f = ng_idb(1, 0, &[]);
    f.extend(ng_shb(&[]));
    assert!(matches!(
        Capture::parse(&f),
        Err(CaptureError::UnknownFormat { .. })
    ));

    // A second section resets interface numbering per section but keeps
    // global indices distinct.
    let mut f = small_pcapng();
    f.extend(ng_shb(&[]));
    f.extend(ng_idb(228, 0, &[]));
    f.extend(ng_epb(0, 7, &ip, 20, &[]));
    let c = Capture::parse(&f).unwrap();
    assert_eq!(c.format.interface_count(), 2);
    assert_eq!(c.packets[2].interface(), 1);
    assert_eq!(c.packets[2].link_type().0, 228);
    // Written back as one section with both interfaces.
    let back = Capture::parse(&c.to_bytes().unwrap()).unwrap();
    assert_eq!(back.packets[2].interface(), 1);
    assert_eq!(back.packets[2].timestamp_ns(), c.packets[2].timestamp_ns());
}

#[test]
fn reader_errors_from_io() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let e = CaptureReader::new(Failing).unwrap_err();
    assert!(matches!(e, CaptureError::Io(_)));
    assert!(std::error::Error::source(&e).is_some());

    // A reader that hands out one byte at a time works.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }
    for file in [small_pcap(), small_pcapng()] {
        let c = Capture::read(Trickle(&file)).unwrap();
        assert_eq!(c.packets.len(), 2);
        assert!(c.packets.iter().all(|p| p.udp().is_some()));
    }
}

fn same_result(a: &Result<Capture, CaptureError>, b: &Result<Capture, CaptureError>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            a.packets.len() == b.packets.len()
                && a.packets.iter().zip(&b.packets).all(|(x, y)| {
                    x.data() == y.data()
                        && x.timestamp_ns() == y.timestamp_ns()
                        && x.interface() == y.interface()
                        && x.orig_len() == y.orig_len()
                        && x.udp() == y.udp()
                })
        }
        (Err(a), Err(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
        _ => false,
    }
}

fn exercise(bytes: &[u8]) {
    // The slice parser and the streaming reader agree.
    let parsed = Capture::parse(bytes);
    let read = Capture::read(bytes);
    assert!(
        same_result(&parsed, &read),
        "{:?} vs {:?}",
        parsed.err(),
        read.err()
    );
    if let Ok(reader) = CaptureReader::new(bytes) {
        for p in reader.take(64) {
            let Ok(p) = p else { break };
            if p.udp().is_some() {
                let _ = p.with_udp_payload(b"0123456789abcdef0123");
                let _ = p.with_udp_payload(b"");
            }
        }
    }
    if let Ok(mut c) = Capture::parse(bytes) {
        for p in &mut c.packets {
            if p.udp().is_some() {
                p.replace_udp_payload(b"xyz").unwrap();
            }
        }
        if let Ok(out) = c.to_bytes() {
            let back = Capture::parse(&out).expect("own output must parse");
            assert_eq!(back.packets.len(), c.packets.len());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(
        magic in prop::sample::select(vec![
            vec![0xd4, 0xc3, 0xb2, 0xa1],
            vec![0xa1, 0xb2, 0x3c, 0x4d],
            vec![0x0a, 0x0d, 0x0d, 0x0a],
            vec![],
        ]),
        rest in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let bytes = [magic, rest].concat();
        exercise(&bytes);
    }

    #[test]
    fn mutated_captures_never_panic(
        which in any::<bool>(),
        flips in proptest::collection::vec((0usize..200, any::<u8>()), 1..4),
        cut in 0usize..220,
    ) {
        let mut f = if which { small_pcap() } else { small_pcapng() };
        for (at, v) in flips {
            if let Some(b) = f.get_mut(at) {
                *b ^= v;
            }
        }
        f.truncate(cut.max(4));
        exercise(&f);
    }
}
