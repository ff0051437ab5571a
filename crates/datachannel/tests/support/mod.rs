//! Two engines back to back over an in-memory wire that can lose and rewrite packets, with
//! simulated time: a packet crosses the wire at once; time jumps to the next timer.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use secrelay_datachannel::{
    ChannelEvent, ChannelId, ChannelSpec, Config, DataChannels, MessageKind, Reliability, Side,
};

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    ToServer,
    ToClient,
}

/// Which packets the wire loses (both directions, handshake included).
#[derive(Debug, Clone, Copy)]
pub enum Loss {
    None,
    /// Every `n`th packet.
    EveryNth(u64),
    /// Each packet with this probability (percent), from a seeded generator.
    Random {
        percent: u64,
        seed: u64,
    },
}

/// Rewrites a packet on the wire: `Some(new)` replaces it.
pub type Mutator = Box<dyn FnMut(Dir, &[u8]) -> Option<Vec<u8>>>;

pub struct Wire {
    loss: Loss,
    rng: u64,
    carried: u64,
    pub lost: u64,
    pub mutate: Option<Mutator>,
}

impl Wire {
    pub fn new(loss: Loss) -> Self {
        let seed = match loss {
            Loss::Random { seed, .. } => seed | 1,
            _ => 1,
        };
        Wire {
            loss,
            rng: seed,
            carried: 0,
            lost: 0,
            mutate: None,
        }
    }

    /// xorshift64*: reproducible, good enough to pick packets.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The packet as it arrives, or `None` if the wire lost it.
    pub fn carry(&mut self, dir: Dir, packet: Vec<u8>) -> Option<Vec<u8>> {
        self.carried += 1;
        let lose = match self.loss {
            Loss::None => false,
            Loss::EveryNth(n) => self.carried.is_multiple_of(n),
            Loss::Random { percent, .. } => self.next_random() % 100 < percent,
        };
        if lose {
            self.lost += 1;
            return None;
        }
        match self.mutate.as_mut().and_then(|m| m(dir, &packet)) {
            Some(changed) => Some(changed),
            None => Some(packet),
        }
    }
}

pub struct Pair {
    pub client: DataChannels,
    pub server: DataChannels,
    pub now: Instant,
    pub wire: Wire,
    pub client_events: Vec<ChannelEvent>,
    pub server_events: Vec<ChannelEvent>,
}

impl Pair {
    pub fn new(client: Config, server: Config, loss: Loss) -> Self {
        let now = Instant::now();
        Pair {
            client: DataChannels::new(client, Side::Client, now).unwrap(),
            server: DataChannels::new(server, Side::Server, now).unwrap(),
            now,
            wire: Wire::new(loss),
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    /// A pair with default configs, connected.
    pub fn connected(loss: Loss) -> Self {
        let mut pair = Pair::new(Config::default(), Config::default(), loss);
        pair.connect();
        pair
    }

    pub fn engine(&mut self, side: Side) -> &mut DataChannels {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    pub fn events(&self, side: Side) -> &[ChannelEvent] {
        match side {
            Side::Client => &self.client_events,
            Side::Server => &self.server_events,
        }
    }

    /// Carries packets both ways, one each way in turn (so a receiver answers as it would
    /// with packets spaced out on a real path: a SACK every second packet), until neither
    /// side has one to send; then collects events.
    pub fn flush(&mut self) {
        loop {
            let mut moved = false;
            if let Some(p) = self.client.poll_transmit(self.now) {
                moved = true;
                if let Some(p) = self.wire.carry(Dir::ToServer, p) {
                    self.server.handle_packet(self.now, &p);
                }
            }
            if let Some(p) = self.server.poll_transmit(self.now) {
                moved = true;
                if let Some(p) = self.wire.carry(Dir::ToClient, p) {
                    self.client.handle_packet(self.now, &p);
                }
            }
            if !moved {
                break;
            }
        }
        while let Some(e) = self.client.poll_event() {
            self.client_events.push(e);
        }
        while let Some(e) = self.server.poll_event() {
            self.server_events.push(e);
        }
    }

    /// Jumps to the earlier timer of the two and runs both; false when neither has one.
    pub fn tick(&mut self) -> bool {
        let next = [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.flush();
        true
    }

    /// Runs until `done` holds or `limit` of simulated time has passed; says whether `done`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let end = self.now + limit;
        self.flush();
        while !done(self) {
            if self.now > end || !self.tick() {
                return done(self);
            }
        }
        true
    }

    pub fn connect(&mut self) {
        let ok = self.run_until(Duration::from_secs(60), |p| {
            p.client_events.contains(&ChannelEvent::Connected)
                && p.server_events.contains(&ChannelEvent::Connected)
        });
        assert!(ok, "no association within 60 s");
        assert!(self.client.is_connected() && self.server.is_connected());
    }

    /// `side` opens a channel; runs until the other side has it and `side` has the ACK.
    pub fn open(&mut self, side: Side, spec: ChannelSpec) -> ChannelId {
        let id = self.engine(side).open(spec.clone()).expect("open");
        let peer = other(side);
        let ok = self.run_until(Duration::from_secs(60), |p| {
            p.events(peer).contains(&ChannelEvent::Opened {
                id,
                spec: spec.clone(),
            }) && p.events(side).contains(&ChannelEvent::Acked { id })
        });
        assert!(ok, "{id} not opened and acknowledged within 60 s");
        id
    }

    /// The messages `side` received on `id`, in order.
    pub fn received(&self, side: Side, id: ChannelId) -> Vec<(MessageKind, Vec<u8>)> {
        self.events(side)
            .iter()
            .filter_map(|e| match e {
                ChannelEvent::Message {
                    id: got,
                    kind,
                    data,
                } if *got == id => Some((*kind, data.clone())),
                _ => None,
            })
            .collect()
    }
}

pub fn other(side: Side) -> Side {
    match side {
        Side::Client => Side::Server,
        Side::Server => Side::Client,
    }
}

pub fn spec(label: &str, ordered: bool, reliability: Reliability) -> ChannelSpec {
    ChannelSpec {
        label: label.into(),
        protocol: String::new(),
        ordered,
        reliability,
        priority: 256,
    }
}

/// A DATA chunk of an SCTP packet, as [`rewrite_data`] hands it out to edit.
#[derive(Debug, Clone)]
pub struct DataChunk {
    pub flags: u8,
    pub tsn: u32,
    pub stream: u16,
    pub ssn: u16,
    pub ppid: u32,
    pub payload: Vec<u8>,
}

/// The U (unordered) flag of a DATA chunk (RFC 9260 §3.3.1).
pub const UNORDERED: u8 = 0x04;

/// Rewrites the DATA chunks of one SCTP packet with `edit` (which says whether it changed
/// one), fixing chunk lengths and the CRC32c; `None` when nothing changed or the packet does
/// not walk.
pub fn rewrite_data(
    packet: &[u8],
    mut edit: impl FnMut(&mut DataChunk) -> bool,
) -> Option<Vec<u8>> {
    let mut out = packet.get(..12)?.to_vec();
    let mut at = 12;
    let mut changed = false;
    while at < packet.len() {
        let header = packet.get(at..at + 4)?;
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let chunk = packet.get(at..at + len)?;
        if header[0] == 0 && len >= 16 {
            let mut data = DataChunk {
                flags: chunk[1],
                tsn: u32::from_be_bytes(chunk[4..8].try_into().unwrap()),
                stream: u16::from_be_bytes([chunk[8], chunk[9]]),
                ssn: u16::from_be_bytes([chunk[10], chunk[11]]),
                ppid: u32::from_be_bytes(chunk[12..16].try_into().unwrap()),
                payload: chunk[16..].to_vec(),
            };
            changed |= edit(&mut data);
            out.extend_from_slice(&[0, data.flags]);
            out.extend_from_slice(&((16 + data.payload.len()) as u16).to_be_bytes());
            out.extend_from_slice(&data.tsn.to_be_bytes());
            out.extend_from_slice(&data.stream.to_be_bytes());
            out.extend_from_slice(&data.ssn.to_be_bytes());
            out.extend_from_slice(&data.ppid.to_be_bytes());
            out.extend_from_slice(&data.payload);
        } else {
            out.extend_from_slice(chunk);
        }
        while out.len() % 4 != 0 {
            out.push(0);
        }
        at += len.div_ceil(4) * 4;
    }
    changed.then(|| with_checksum(out))
}

/// Sets an SCTP packet's CRC32c (RFC 9260 Appendix A; little-endian on the wire, as
/// sctp-proto reads it).
pub fn with_checksum(mut packet: Vec<u8>) -> Vec<u8> {
    packet[8..12].fill(0);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&packet);
    packet[8..12].copy_from_slice(&crc.to_le_bytes());
    packet
}

/// An SCTP packet holding one INIT (verification tag 0), as a peer starting its own
/// association sends.
pub fn init_packet(initiate_tag: u32) -> Vec<u8> {
    let mut p = vec![0x13, 0x88, 0x13, 0x88, 0, 0, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&[1, 0, 0, 20]);
    p.extend_from_slice(&initiate_tag.to_be_bytes());
    p.extend_from_slice(&131_072u32.to_be_bytes()); // a_rwnd
    p.extend_from_slice(&[0x04, 0x00, 0x04, 0x00]); // 1024 streams out, 1024 in
    p.extend_from_slice(&0x1000u32.to_be_bytes()); // initial TSN
    with_checksum(p)
}
