//! Data-channel messages relayed through a room of 50 participants, on one core: what one
//! message costs the gateway from the sender's SCTP packet to 49 receivers' SCTP packets.
//!
//! Each participant is a [`DataLink`] (the gateway's side: SCTP and DCEP over what would be its
//! DTLS association) wired back to back, in memory, to a [`DataChannels`] playing the browser,
//! which opened a `chat` channel as the room page does. Each timed batch: the sender's browser
//! sends 100 text messages of 100 bytes; the gateway's side of the sender takes them in, and
//! the room's relay step hands each to the other 49 links ([`DataLink::send`]); every link's
//! packets go to its browser and the browsers' SACKs come back, until each of the 49 browsers
//! has all 100. Simulated time jumps to the next timer when nothing is left to move (a delayed
//! SACK). Timed: the gateway's 50 links and the 50 browsers' engines alike (the browsers'
//! share is about the gateway's: the same SCTP work in the other direction); no DTLS record
//! protection (docs/dtls.md has its cost per record).
//!
//! `cargo bench -p secrelay-gateway --bench data_relay`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_core::counters::DataCounters;
use secrelay_core::leg::{DataLimits, DataLink};
use secrelay_datachannel::{
    ChannelEvent, ChannelSpec, Config, DataChannels, MessageKind, Reliability, Side,
};

const PARTICIPANTS: usize = 50;
const BATCH: usize = 100;
const MESSAGE: [u8; 100] = [b'm'; 100];

struct Participant {
    link: DataLink,
    browser: DataChannels,
    received: usize,
}

struct Room {
    members: Vec<Participant>,
    counters: DataCounters,
    now: Instant,
}

impl Room {
    fn new() -> Room {
        let now = Instant::now();
        let limits = DataLimits {
            messages_per_second: 1_000_000,
            bytes_per_second: 1 << 40,
            ..DataLimits::default()
        };
        let members = (0..PARTICIPANTS)
            .map(|_| Participant {
                link: DataLink::new(limits.clone(), Side::Server, None, now).expect("link"),
                browser: DataChannels::new(Config::default(), Side::Client, now).expect("browser"),
                received: 0,
            })
            .collect();
        let mut room = Room {
            members,
            counters: DataCounters::default(),
            now,
        };
        room.settle();
        for p in &mut room.members {
            assert!(p.browser.is_connected(), "association up");
            p.browser
                .open(ChannelSpec {
                    label: "chat".into(),
                    protocol: String::new(),
                    ordered: true,
                    reliability: Reliability::Reliable,
                    priority: 256,
                })
                .expect("open chat");
        }
        room.settle();
        room
    }

    /// Moves packets both ways, relays what the gateway took in, and fires timers, until
    /// nothing moves and no timer is due within a minute.
    fn settle(&mut self) {
        let end = self.now + Duration::from_secs(60);
        loop {
            let mut moved = self.pump();
            while let Some((msg, _)) = self.members[0].link.take() {
                for p in &mut self.members[1..] {
                    p.link.send(&msg, &mut self.counters);
                }
                moved = true;
            }
            if moved {
                continue;
            }
            let next = self
                .members
                .iter()
                .flat_map(|p| [p.link.poll_timeout(), p.browser.poll_timeout()])
                .flatten()
                .min();
            match next {
                Some(t) if t <= end && self.busy() => {
                    self.now = self.now.max(t);
                    for p in &mut self.members {
                        p.link.handle_timeout(self.now, &mut self.counters);
                        p.browser.handle_timeout(self.now);
                    }
                }
                _ => return,
            }
        }
    }

    /// Whether a browser still waits for messages of the batch (or the room is being set up).
    fn busy(&self) -> bool {
        self.members[1..].iter().any(|p| p.received % BATCH != 0)
            || self.members.iter().any(|p| !p.browser.is_connected())
    }

    /// One round of packets both ways; whether anything moved.
    fn pump(&mut self) -> bool {
        let now = self.now;
        let mut moved = false;
        for p in &mut self.members {
            while let Some(packet) = p.browser.poll_transmit(now) {
                p.link.handle_packet(now, &packet, &mut self.counters);
                moved = true;
            }
            while let Some(packet) = p.link.poll_transmit() {
                p.browser.handle_packet(now, &packet);
                moved = true;
            }
            while let Some(e) = p.browser.poll_event() {
                if matches!(e, ChannelEvent::Message { .. }) {
                    p.received += 1;
                }
            }
        }
        moved
    }
}

fn relay(c: &mut Criterion) {
    let mut room = Room::new();
    let chat = room.members[0]
        .browser
        .channels()
        .next()
        .map(|(id, _)| id)
        .expect("the sender's chat channel");
    let mut g = c.benchmark_group("data_relay");
    // Copies delivered: each message to the 49 others.
    g.throughput(Throughput::Elements((BATCH * (PARTICIPANTS - 1)) as u64));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("50-participants-text-100B", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                room.members[0]
                    .browser
                    .send(chat, MessageKind::Text, black_box(&MESSAGE))
                    .expect("send");
            }
            room.settle();
        })
    });
    g.finish();
    let want = room.members[1].received;
    assert!(want >= BATCH, "no message relayed");
    for p in &room.members[1..] {
        assert_eq!(p.received, want, "every receiver got every message");
    }
    assert_eq!(room.counters.rate_limited, 0);
    assert_eq!(room.counters.dropped_out, 0);
}

criterion_group!(benches, relay);
criterion_main!(benches);
