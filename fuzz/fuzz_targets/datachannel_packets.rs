//! Two data-channel engines, connected with one channel open, fed SCTP packets whose chunks are
//! arbitrary. The input is records: a byte (bit 0: to the client rather than the server; bits
//! 1-7: milliseconds to let pass first), a 2-byte length, then that many bytes of chunks. Each
//! goes out under the association's real common header (ports, the receiver's verification tag)
//! with a correct CRC32c, so it reaches the association instead of dying at the checksum; the
//! engines' answers are carried both ways after each. Neither engine may panic (one inside
//! sctp-proto would be caught and end the association, but the fuzzer reports it first), and
//! nothing leaks through as a message on a channel that was never opened.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use secrelay_datachannel::{
    ChannelEvent, ChannelSpec, Config, DataChannels, MessageKind, Reliability, Side,
};

struct Pair {
    client: DataChannels,
    server: DataChannels,
    now: Instant,
    /// The common header of the last packet each way: to the server, to the client.
    headers: [Option<[u8; 12]>; 2],
}

impl Pair {
    /// Carries packets both ways, one each way in turn, until neither side has one (bounded:
    /// a forged packet must not make the two talk forever); checks the events.
    fn exchange(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            if let Some(p) = self.client.poll_transmit(self.now) {
                self.headers[0] = p.get(..12).and_then(|h| h.try_into().ok());
                self.server.handle_packet(self.now, &p);
                moved = true;
            }
            if let Some(p) = self.server.poll_transmit(self.now) {
                self.headers[1] = p.get(..12).and_then(|h| h.try_into().ok());
                self.client.handle_packet(self.now, &p);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        for engine in [&mut self.client, &mut self.server] {
            while let Some(event) = engine.poll_event() {
                if let ChannelEvent::Message { id, .. } = event {
                    assert!(id.0 < 1024, "message on stream {} past max_channels", id.0);
                }
            }
            assert_eq!(engine.counters().panics_caught, 0);
        }
    }

    /// Runs the timers due by `now`.
    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.exchange();
    }
}

fn connected() -> Pair {
    let now = Instant::now();
    let mut pair = Pair {
        client: DataChannels::new(Config::default(), Side::Client, now).unwrap(),
        server: DataChannels::new(Config::default(), Side::Server, now).unwrap(),
        now,
        headers: [None, None],
    };
    pair.exchange();
    let spec = ChannelSpec {
        label: "fuzz".into(),
        protocol: String::new(),
        ordered: true,
        reliability: Reliability::Reliable,
        priority: 256,
    };
    let id = pair
        .client
        .open(spec)
        .expect("connected over a perfect wire");
    pair.client.send(id, MessageKind::Text, b"hello").unwrap();
    pair.exchange();
    pair
}

/// `chunks` under `header` with the CRC32c set (RFC 9260 Appendix A, little-endian as
/// sctp-proto reads it).
fn packet(header: [u8; 12], chunks: &[u8]) -> Vec<u8> {
    let mut p = header.to_vec();
    p[8..12].fill(0);
    p.extend_from_slice(chunks);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p
}

fuzz_target!(|data: &[u8]| {
    let mut pair = connected();
    let mut rest = data;
    while let [control, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
        let (chunks, next) = tail.split_at(len);
        rest = next;
        pair.advance(Duration::from_millis(u64::from(control >> 1)));
        let to_client = control & 1 == 1;
        let Some(header) = pair.headers[usize::from(to_client)] else {
            continue;
        };
        let p = packet(header, chunks);
        let now = pair.now;
        if to_client {
            pair.client.handle_packet(now, &p);
        } else {
            pair.server.handle_packet(now, &p);
        }
        pair.exchange();
    }
    pair.advance(Duration::from_secs(1));
});
