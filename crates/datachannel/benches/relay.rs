//! Data-channel messages per second through two engines back to back, in one process, on one
//! core: 100-byte text messages on one reliable ordered channel.
//!
//! Each timed batch: the client sends 1 000 messages; packets move both ways in memory (the
//! client's DATA to the server, the server's SACKs back to the client, which frees the
//! client's window) until the server has reported all 1 000 as `ChannelEvent::Message`.
//! Simulated time jumps to the next timer whenever nothing is left to move (a delayed SACK),
//! which costs no wall time. What is timed is both engines' work: DCEP-framed sends, SCTP
//! packetisation, checksums, reassembly, SACK processing, and event delivery; no DTLS.
//!
//! `cargo bench -p secrelay-datachannel --bench relay`

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use secrelay_datachannel::{ChannelEvent, MessageKind, Reliability, Side};
use support::{spec, Loss, Pair};

const BATCH: usize = 1000;
const MESSAGE: [u8; 100] = [b'm'; 100];

fn relay(c: &mut Criterion) {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    pair.server_events.clear();
    let mut g = c.benchmark_group("relay");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("text-100B-reliable-ordered", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                pair.client
                    .send(id, MessageKind::Text, black_box(&MESSAGE))
                    .expect("send");
            }
            let done = pair.run_until(Duration::from_secs(60), |p| p.server_events.len() == BATCH);
            assert!(done, "batch not delivered");
            assert!(matches!(
                pair.server_events.last(),
                Some(ChannelEvent::Message { data, .. }) if data.len() == MESSAGE.len()
            ));
            pair.server_events.clear();
            pair.client_events.clear();
        })
    });
    g.finish();
    let (c, s) = (pair.client.counters(), pair.server.counters());
    assert_eq!(c.messages_out, s.messages_in);
    println!(
        "relay: {} messages, {} packets client->server, {} server->client (SACKs)",
        s.messages_in, c.packets_out, s.packets_out
    );
}

criterion_group!(benches, relay);
criterion_main!(benches);
