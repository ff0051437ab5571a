//! Two engines back to back (support/mod.rs): the association, DCEP both ways, messages in
//! order and intact, partial reliability under loss, limits, closing, and what a bad peer
//! sends.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use secrelay_datachannel::{
    dcep, ChannelEvent, ChannelId, Config, DataChannelError, Discard, MessageKind, Refusal,
    Reliability, Side,
};
use support::{init_packet, rewrite_data, spec, Dir, Loss, Pair, UNORDERED};

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn client_opens_chat_and_server_gets_the_same_spec() {
    let mut pair = Pair::connected(Loss::None);
    let mut chat = spec("chat", true, Reliability::Reliable);
    chat.protocol = "json".into();
    chat.priority = 512;
    let id = pair.open(Side::Client, chat.clone());
    assert_eq!(
        id,
        ChannelId(0),
        "the DTLS client opens even ids, lowest first"
    );
    assert_eq!(pair.server.channel(id), Some(&chat));
    assert_eq!(pair.client.channel(id), Some(&chat));
    let (c, s) = (pair.client.counters(), pair.server.counters());
    assert_eq!((c.dcep_opens_sent, c.dcep_acks_received), (1, 1));
    assert_eq!((s.dcep_opens_received, s.dcep_acks_sent), (1, 1));
    assert_eq!((c.channels_opened, s.channels_opened), (1, 1));
    assert_eq!(c.total_discarded() + s.total_discarded(), 0);
}

#[test]
fn a_thousand_text_messages_each_way_arrive_complete_and_in_order() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    let text = |side: &str, i: usize| format!("{side} message {i}").into_bytes();
    for i in 0..1000 {
        pair.client
            .send(id, MessageKind::Text, &text("client", i))
            .unwrap();
        pair.server
            .send(id, MessageKind::Text, &text("server", i))
            .unwrap();
    }
    let ok = pair.run_until(MINUTE, |p| {
        p.received(Side::Server, id).len() == 1000 && p.received(Side::Client, id).len() == 1000
    });
    assert!(ok, "not all delivered within a minute");
    let want = |side| {
        (0..1000)
            .map(|i| (MessageKind::Text, text(side, i)))
            .collect::<Vec<_>>()
    };
    assert_eq!(pair.received(Side::Server, id), want("client"));
    assert_eq!(pair.received(Side::Client, id), want("server"));
    let (c, s) = (pair.client.counters(), pair.server.counters());
    assert_eq!(
        (c.messages_out, c.messages_in, s.messages_out, s.messages_in),
        (1000, 1000, 1000, 1000)
    );
    let bytes: u64 = (0..1000).map(|i| text("client", i).len() as u64).sum();
    assert_eq!(c.bytes_out, bytes);
    assert_eq!(s.bytes_in, bytes);
}

#[test]
fn ordered_reliable_delivery_survives_every_fifth_packet_lost() {
    let mut pair = Pair::connected(Loss::EveryNth(5));
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    for i in 0u32..300 {
        pair.client
            .send(id, MessageKind::Binary, &i.to_be_bytes())
            .unwrap();
    }
    assert!(pair.run_until(10 * MINUTE, |p| p.received(Side::Server, id).len() == 300));
    let got: Vec<u32> = pair
        .received(Side::Server, id)
        .into_iter()
        .map(|(_, d)| u32::from_be_bytes(d.try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..300).collect::<Vec<_>>());
    assert!(pair.wire.lost > 0);
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn a_megabyte_message_arrives_intact_when_allowed() {
    let big = Config {
        max_message_size: 1_000_000,
        ..Config::default()
    };
    let mut pair = Pair::new(big.clone(), big, Loss::None);
    pair.connect();
    let id = pair.open(Side::Client, spec("files", true, Reliability::Reliable));
    let data = pattern(1_000_000);
    pair.client.send(id, MessageKind::Binary, &data).unwrap();
    assert!(pair.run_until(MINUTE, |p| !p.received(Side::Server, id).is_empty()));
    assert_eq!(
        pair.received(Side::Server, id),
        vec![(MessageKind::Binary, data)]
    );
    assert_eq!(pair.server.counters().bytes_in, 1_000_000);
}

#[test]
fn a_megabyte_message_is_refused_when_over_the_limit() {
    // Sending: refused at once, counted, nothing on the wire.
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("files", true, Reliability::Reliable));
    let data = pattern(1_000_000);
    assert_eq!(
        pair.client.send(id, MessageKind::Binary, &data),
        Err(DataChannelError::TooLarge {
            len: 1_000_000,
            max: 262_144
        })
    );
    assert_eq!(pair.client.counters().refused(Refusal::TooLarge), 1);
    assert_eq!(pair.client.counters().messages_out, 0);

    // Receiving: a peer that ignores our limit has the message dropped and counted, and the
    // association carries on.
    let big = Config {
        max_message_size: 1_000_000,
        ..Config::default()
    };
    let mut pair = Pair::new(big, Config::default(), Loss::None);
    pair.connect();
    let id = pair.open(Side::Client, spec("files", true, Reliability::Reliable));
    pair.client.send(id, MessageKind::Binary, &data).unwrap();
    pair.client.send(id, MessageKind::Text, b"after").unwrap();
    assert!(pair.run_until(MINUTE, |p| !p.received(Side::Server, id).is_empty()));
    assert_eq!(
        pair.received(Side::Server, id),
        vec![(MessageKind::Text, b"after".to_vec())]
    );
    assert_eq!(pair.server.counters().discarded(Discard::TooLarge), 1);
    assert!(pair.server.is_connected());
}

#[test]
fn unreliable_unordered_channel_delivers_a_subset_while_reliable_delivers_all() {
    let mut pair = Pair::connected(Loss::Random {
        percent: 10,
        seed: 0x5eed,
    });
    let lossy = pair.open(
        Side::Client,
        spec("state", false, Reliability::MaxRetransmits(0)),
    );
    let reliable = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    const N: u32 = 500;
    let started = pair.now;
    for i in 0..N {
        let mut payload = i.to_be_bytes().to_vec();
        payload.resize(200, 0xab);
        pair.client
            .send(lossy, MessageKind::Binary, &payload)
            .unwrap();
        pair.client
            .send(reliable, MessageKind::Binary, &payload)
            .unwrap();
    }
    assert!(
        pair.run_until(10 * MINUTE, |p| p.received(Side::Server, reliable).len()
            == N as usize)
    );
    let reliable_done = pair.now - started;
    // Let the abandoned messages' FORWARD TSNs and the last SACKs settle.
    pair.run_until(MINUTE, |p| {
        p.client.buffered(lossy) == 0 && p.client.buffered(reliable) == 0
    });
    assert_eq!(
        pair.client.buffered(lossy),
        0,
        "abandoned messages still held: the lossy channel stalled"
    );

    let index = |(_, d): (MessageKind, Vec<u8>)| u32::from_be_bytes(d[..4].try_into().unwrap());
    let reliable_got: Vec<u32> = pair
        .received(Side::Server, reliable)
        .into_iter()
        .map(index)
        .collect();
    assert_eq!(reliable_got, (0..N).collect::<Vec<_>>());
    let lossy_got: Vec<u32> = pair
        .received(Side::Server, lossy)
        .into_iter()
        .map(index)
        .collect();
    let distinct: BTreeSet<u32> = lossy_got.iter().copied().collect();
    assert_eq!(distinct.len(), lossy_got.len(), "a message delivered twice");
    assert!(
        lossy_got.len() < N as usize,
        "nothing lost at 10 % loss with no retransmissions"
    );
    assert!(
        lossy_got.len() > N as usize / 2,
        "only {} of {N} delivered",
        lossy_got.len()
    );
    // Messages after the first loss came through: a gap did not hold the rest back.
    let first_gap = (0..N).find(|i| !distinct.contains(i)).unwrap();
    assert!(distinct.iter().any(|&i| i > first_gap));
    println!(
        "10 % loss: unreliable unordered {}/{N} delivered; reliable {N}/{N} in order after {:?} simulated; {} packets lost",
        lossy_got.len(),
        reliable_done,
        pair.wire.lost
    );
}

#[test]
fn empty_messages_travel_as_rfc_8831_says() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    pair.client.send(id, MessageKind::Text, b"").unwrap();
    pair.client.send(id, MessageKind::Binary, b"").unwrap();
    pair.client.send(id, MessageKind::Text, b"x").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 3));
    assert_eq!(
        pair.received(Side::Server, id),
        vec![
            (MessageKind::Text, vec![]),
            (MessageKind::Binary, vec![]),
            (MessageKind::Text, b"x".to_vec()),
        ]
    );
    assert_eq!(pair.server.counters().bytes_in, 1);
}

#[test]
fn empty_message_ppids_are_56_and_57() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    pair.wire.mutate = Some(Box::new(move |dir, packet: &[u8]| {
        if dir == Dir::ToServer {
            rewrite_data(packet, |chunk| {
                log.borrow_mut().push((chunk.ppid, chunk.payload.clone()));
                false
            });
        }
        None
    }));
    pair.client.send(id, MessageKind::Text, b"").unwrap();
    pair.client.send(id, MessageKind::Binary, b"").unwrap();
    pair.client.send(id, MessageKind::Text, b"t").unwrap();
    pair.client.send(id, MessageKind::Binary, b"b").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 4));
    assert_eq!(
        *seen.borrow(),
        vec![
            (56, vec![0]),
            (57, vec![0]),
            (51, b"t".to_vec()),
            (53, b"b".to_vec())
        ]
    );
}

#[test]
fn unordered_channel_sends_ordered_until_the_ack() {
    let mut pair = Pair::connected(Loss::None);
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    pair.wire.mutate = Some(Box::new(move |dir, packet: &[u8]| {
        if dir == Dir::ToServer {
            rewrite_data(packet, |chunk| {
                let unordered = chunk.flags & UNORDERED != 0;
                log.borrow_mut().push((chunk.ppid, unordered));
                false
            });
        }
        None
    }));
    let lossy = spec("state", false, Reliability::MaxRetransmits(0));
    let id = pair.client.open(lossy).unwrap();
    // RFC 8832 §6: data may follow the OPEN at once, but ordered, so it cannot overtake it.
    pair.client.send(id, MessageKind::Text, b"early").unwrap();
    assert!(pair.run_until(MINUTE, |p| p
        .client_events
        .contains(&ChannelEvent::Acked { id })));
    pair.client.send(id, MessageKind::Text, b"late").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 2));
    assert_eq!(
        *seen.borrow(),
        [(dcep::PPID, false), (51, false), (51, true)],
        "OPEN and the early message ordered, the one after the ACK unordered"
    );
}

#[test]
fn server_opens_on_odd_ids() {
    let mut pair = Pair::connected(Loss::None);
    let a = pair.open(
        Side::Server,
        spec("from-server", true, Reliability::Reliable),
    );
    let b = pair.open(
        Side::Server,
        spec("second", false, Reliability::MaxRetransmits(3)),
    );
    assert_eq!((a, b), (ChannelId(1), ChannelId(3)));
    let c = pair.open(
        Side::Client,
        spec("from-client", true, Reliability::Reliable),
    );
    assert_eq!(c, ChannelId(0));
    pair.server.send(a, MessageKind::Text, b"hello").unwrap();
    pair.client.send(a, MessageKind::Text, b"back").unwrap();
    assert!(pair.run_until(MINUTE, |p| {
        !p.received(Side::Client, a).is_empty() && !p.received(Side::Server, a).is_empty()
    }));
    assert_eq!(
        pair.received(Side::Client, a),
        vec![(MessageKind::Text, b"hello".to_vec())]
    );
    assert_eq!(
        pair.received(Side::Server, a),
        vec![(MessageKind::Text, b"back".to_vec())]
    );
}

#[test]
fn timed_channel_spec_reaches_the_peer() {
    let mut pair = Pair::connected(Loss::None);
    let timed = spec(
        "telemetry",
        false,
        Reliability::MaxLifetime(Duration::from_millis(1500)),
    );
    let id = pair.open(Side::Client, timed.clone());
    assert_eq!(pair.server.channel(id), Some(&timed));
}

#[test]
fn close_is_seen_by_both_sides_and_the_id_comes_back() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    pair.client
        .send(id, MessageKind::Text, b"last words")
        .unwrap();
    pair.client.close(id).unwrap();
    assert_eq!(pair.client.channel(id), None);
    assert_eq!(
        pair.client.send(id, MessageKind::Text, b"too late"),
        Err(DataChannelError::UnknownChannel(id))
    );
    assert_eq!(pair.client.counters().refused(Refusal::UnknownChannel), 1);
    assert!(pair.run_until(MINUTE, |p| {
        p.server_events.contains(&ChannelEvent::Closed { id })
            && p.client_events.contains(&ChannelEvent::Closed { id })
    }));
    // The message sent before the close still arrived, before the close.
    assert_eq!(
        pair.received(Side::Server, id),
        vec![(MessageKind::Text, b"last words".to_vec())]
    );
    assert_eq!(pair.server.channel(id), None);
    assert_eq!(pair.client.counters().channels_closed, 1);
    assert_eq!(pair.server.counters().channels_closed, 1);
    // Once both resets are done the id is free again.
    pair.run_until(MINUTE, |_| false);
    let again = pair.open(Side::Client, spec("chat-2", true, Reliability::Reliable));
    assert_eq!(again, id);
    pair.client.send(again, MessageKind::Text, b"new").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, again).len() == 2));
}

#[test]
fn the_peer_closing_closes_ours() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    pair.server.close(id).unwrap();
    assert!(pair.run_until(MINUTE, |p| p
        .client_events
        .contains(&ChannelEvent::Closed { id })));
    assert_eq!(pair.client.channel(id), None);
    assert_eq!(
        pair.client.send(id, MessageKind::Text, b"x"),
        Err(DataChannelError::UnknownChannel(id))
    );
}

#[test]
fn limits_refuse_with_named_errors() {
    let tight = Config {
        max_channels: 4,
        max_buffered: 1000,
        ..Config::default()
    };
    let mut pair = Pair::new(tight, Config::default(), Loss::None);
    assert_eq!(
        pair.client.open(spec("early", true, Reliability::Reliable)),
        Err(DataChannelError::NotConnected)
    );
    pair.connect();
    let a = pair.open(Side::Client, spec("a", true, Reliability::Reliable));
    let b = pair.open(Side::Client, spec("b", true, Reliability::Reliable));
    assert_eq!((a, b), (ChannelId(0), ChannelId(2)));
    assert_eq!(
        pair.client.open(spec("c", true, Reliability::Reliable)),
        Err(DataChannelError::NoFreeStream)
    );
    pair.client.send(a, MessageKind::Binary, &[1; 600]).unwrap();
    assert_eq!(pair.client.buffered(a), 600);
    assert_eq!(
        pair.client.send(a, MessageKind::Binary, &[2; 600]),
        Err(DataChannelError::BufferFull {
            buffered: 600,
            len: 600,
            max: 1000
        })
    );
    assert_eq!(pair.client.counters().refused(Refusal::BufferFull), 1);
    assert!(pair.run_until(MINUTE, |p| p.client.buffered(a) == 0));
    pair.client.send(a, MessageKind::Binary, &[2; 600]).unwrap();
    let long = "x".repeat(70_000);
    assert!(matches!(
        pair.client.open(spec(&long, true, Reliability::Reliable)),
        Err(DataChannelError::InvalidSpec(
            dcep::DcepError::LabelTooLong(70_000)
        ))
    ));
    assert_eq!(
        Config {
            max_channels: 1,
            ..Config::default()
        }
        .validate()
        .unwrap_err()
        .field,
        "max_channels"
    );
    assert_eq!(
        Config {
            max_message_size: 0,
            ..Config::default()
        }
        .validate()
        .unwrap_err()
        .field,
        "max_message_size"
    );
}

#[test]
fn random_bytes_are_dropped_and_counted() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    let mut rng = 0x1234_5678_9abc_def1_u64;
    for n in 0..2000usize {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let len = n % 300;
        let junk: Vec<u8> = (0..len)
            .map(|i| (rng >> (i % 8 * 8)) as u8 ^ i as u8)
            .collect();
        pair.server.handle_packet(pair.now, &junk);
        pair.client.handle_packet(pair.now, &junk);
    }
    let (c, s) = (pair.client.counters(), pair.server.counters());
    assert_eq!(s.discarded(Discard::MalformedPacket), 2000);
    assert_eq!(c.discarded(Discard::MalformedPacket), 2000);
    // Still up.
    pair.client
        .send(id, MessageKind::Text, b"still here")
        .unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 1));
}

/// Edits, on the wire and once, the first DATA chunk with payload protocol `ppid` that the
/// client sends.
fn rewrite_first(pair: &mut Pair, ppid: u32, edit: impl Fn(&mut support::DataChunk) + 'static) {
    let mut done = false;
    pair.wire.mutate = Some(Box::new(move |dir, packet: &[u8]| {
        if done || dir != Dir::ToServer {
            return None;
        }
        rewrite_data(packet, |chunk| {
            if chunk.ppid != ppid || done {
                return false;
            }
            edit(chunk);
            done = true;
            true
        })
    }));
}

/// The client opens "chat" with its OPEN corrupted on the wire: the server must refuse it
/// (counted under `reason`), send no ACK, and reset the stream, which closes the client's
/// channel.
fn refused_open(edit: impl Fn(&mut support::DataChunk) + 'static, reason: Discard, stream: u16) {
    let mut pair = Pair::connected(Loss::None);
    rewrite_first(&mut pair, dcep::PPID, edit);
    let id = pair
        .client
        .open(spec("chat", true, Reliability::Reliable))
        .unwrap();
    pair.run_until(MINUTE, |_| false);
    let s = pair.server.counters();
    assert_eq!(s.discarded(reason), 1, "{:?}", s);
    assert_eq!(s.dcep_acks_sent, 0);
    assert_eq!(s.channels_opened, 0);
    assert!(!pair
        .server_events
        .iter()
        .any(|e| matches!(e, ChannelEvent::Opened { .. })));
    assert!(!pair.client_events.contains(&ChannelEvent::Acked { id }));
    assert_eq!(pair.server.channel(ChannelId(stream)), None);
    // The association is unharmed: another channel opens fine.
    pair.open(Side::Client, spec("next", true, Reliability::Reliable));
}

#[test]
fn truncated_open_is_refused() {
    refused_open(|c| c.payload.truncate(10), Discard::MalformedDcep, 0);
}

#[test]
fn open_with_label_not_utf8_is_refused() {
    refused_open(|c| c.payload[12] = 0xff, Discard::MalformedDcep, 0);
}

#[test]
fn open_with_trailing_bytes_is_refused() {
    refused_open(|c| c.payload.push(0), Discard::MalformedDcep, 0);
}

#[test]
fn open_on_the_wrong_parity_is_refused() {
    // The DTLS client must use even ids: its OPEN moved to stream 1.
    refused_open(|c| c.stream = 1, Discard::RefusedOpen, 1);
}

#[test]
fn open_above_max_channels_is_refused() {
    refused_open(|c| c.stream = 2000, Discard::RefusedOpen, 2000);
}

#[test]
fn refused_open_closes_the_openers_channel() {
    let mut pair = Pair::connected(Loss::None);
    rewrite_first(&mut pair, dcep::PPID, |c| c.payload.truncate(3));
    let id = pair
        .client
        .open(spec("chat", true, Reliability::Reliable))
        .unwrap();
    assert!(pair.run_until(MINUTE, |p| p
        .client_events
        .contains(&ChannelEvent::Closed { id })));
}

#[test]
fn message_on_an_unopened_stream_is_dropped_and_counted() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    rewrite_first(&mut pair, 51, |chunk| {
        // Onto stream 6, where no OPEN came; unordered, so its sequence number is moot.
        chunk.stream = 6;
        chunk.flags |= UNORDERED;
    });
    pair.client.send(id, MessageKind::Text, b"astray").unwrap();
    pair.client.send(id, MessageKind::Text, b"home").unwrap();
    pair.run_until(MINUTE, |_| false);
    assert_eq!(pair.server.counters().discarded(Discard::UnknownChannel), 1);
    assert!(pair.received(Side::Server, ChannelId(6)).is_empty());
    // "home" went with SSN 2 on stream 0 after SSN 1 was taken away: ordered delivery waits
    // for it, so nothing arrives there either; the engine neither panics nor invents it.
    assert!(pair.server.is_connected());
}

#[test]
fn ack_without_open_is_counted() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    // Turn the client's next text message into a second DATA_CHANNEL_ACK towards the server.
    rewrite_first(&mut pair, 51, |chunk| {
        chunk.ppid = dcep::PPID;
        chunk.payload = dcep::ACK.to_vec();
    });
    pair.client
        .send(id, MessageKind::Text, b"not an ack")
        .unwrap();
    pair.client.send(id, MessageKind::Text, b"next").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 1));
    assert_eq!(pair.server.counters().discarded(Discard::UnexpectedDcep), 1);
    assert_eq!(
        pair.received(Side::Server, id),
        vec![(MessageKind::Text, b"next".to_vec())]
    );
}

#[test]
fn unknown_ppid_is_counted() {
    let mut pair = Pair::connected(Loss::None);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    rewrite_first(&mut pair, 51, |chunk| chunk.ppid = 52); // the deprecated partial string
    pair.client.send(id, MessageKind::Text, b"partial").unwrap();
    pair.client.send(id, MessageKind::Text, b"whole").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 1));
    assert_eq!(pair.server.counters().discarded(Discard::UnknownPpid), 1);
}

#[test]
fn a_peer_init_during_and_after_the_handshake_is_ignored() {
    let mut pair = Pair::new(Config::default(), Config::default(), Loss::None);
    // What a browser that is DTLS server does: start its own association as ours starts.
    let now = pair.now;
    pair.client.handle_packet(now, &init_packet(0x1234_5678));
    assert_eq!(pair.client.counters().discarded(Discard::StrayInit), 1);
    pair.connect();
    pair.client
        .handle_packet(pair.now, &init_packet(0x0bad_cafe));
    pair.server
        .handle_packet(pair.now, &init_packet(0x0bad_cafe));
    assert_eq!(pair.client.counters().discarded(Discard::StrayInit), 2);
    assert_eq!(pair.server.counters().discarded(Discard::StrayInit), 1);
    let id = pair.open(Side::Client, spec("chat", true, Reliability::Reliable));
    pair.client.send(id, MessageKind::Text, b"ok").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Server, id).len() == 1));
}

#[test]
fn a_server_without_an_association_counts_what_is_not_an_init() {
    let mut pair = Pair::new(Config::default(), Config::default(), Loss::None);
    // A SACK, and an INIT with a verification tag (RFC 9260 §8.5.1: an INIT carries 0).
    let mut sack = vec![0x13, 0x88, 0x13, 0x88, 0, 0, 0, 9, 0, 0, 0, 0];
    sack.extend_from_slice(&[3, 0, 0, 16, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    pair.server
        .handle_packet(pair.now, &support::with_checksum(sack));
    let mut init = init_packet(1);
    init[4..8].copy_from_slice(&[0, 0, 0, 9]);
    pair.server
        .handle_packet(pair.now, &support::with_checksum(init));
    assert_eq!(
        pair.server.counters().discarded(Discard::MalformedPacket),
        2
    );
    pair.connect();
}

#[test]
fn lost_inits_are_sent_again() {
    let mut pair = Pair::new(Config::default(), Config::default(), Loss::None);
    for _ in 0..2 {
        let init = pair.client.poll_transmit(pair.now).expect("an INIT");
        assert_eq!(init[12], 1, "chunk type INIT");
        assert_eq!(pair.client.poll_transmit(pair.now), None);
        // Lost: the retransmission timer brings it back.
        pair.now = pair.client.poll_timeout().expect("T1-init running");
        pair.client.handle_timeout(pair.now);
    }
    pair.connect();
}

#[test]
fn an_abort_ends_the_association_and_every_channel() {
    let mut pair = Pair::connected(Loss::None);
    let a = pair.open(Side::Client, spec("a", true, Reliability::Reliable));
    let b = pair.open(Side::Server, spec("b", true, Reliability::Reliable));
    // The server's verification tag, from a packet the client sends it.
    pair.client.send(a, MessageKind::Text, b"x").unwrap();
    let packet = pair.client.poll_transmit(pair.now).unwrap();
    let mut abort = packet[..12].to_vec();
    abort.extend_from_slice(&[6, 0, 0, 4]);
    pair.server
        .handle_packet(pair.now, &support::with_checksum(abort));
    pair.flush();
    let tail = &pair.server_events[pair.server_events.len() - 3..];
    assert_eq!(
        tail,
        [
            ChannelEvent::Closed { id: a },
            ChannelEvent::Closed { id: b },
            ChannelEvent::Disconnected
        ]
    );
    assert!(!pair.server.is_connected());
    assert_eq!(pair.server.channel(a), None);
    assert_eq!(
        pair.server.send(a, MessageKind::Text, b"y"),
        Err(DataChannelError::UnknownChannel(a))
    );
    assert_eq!(
        pair.server.open(spec("c", true, Reliability::Reliable)),
        Err(DataChannelError::NotConnected)
    );
    assert_eq!(pair.server.poll_timeout(), None);
    pair.server.handle_packet(pair.now, &packet);
    assert_eq!(
        pair.server.counters().discarded(Discard::AfterDisconnect),
        1
    );
    assert_eq!(pair.server.counters().channels_closed, 2);
}

#[test]
fn a_message_over_the_receive_buffer_ends_the_association() {
    // What sctp-proto does with a message it cannot reassemble (1 MiB receive buffer for the
    // default 256 KiB messages): an ABORT, so the sender learns too.
    let huge = Config {
        max_message_size: 2_000_000,
        max_buffered: 4 << 20,
        ..Config::default()
    };
    let mut pair = Pair::new(huge, Config::default(), Loss::None);
    pair.connect();
    let id = pair.open(Side::Client, spec("files", true, Reliability::Reliable));
    pair.client
        .send(id, MessageKind::Binary, &pattern(2_000_000))
        .unwrap();
    let ok = pair.run_until(MINUTE, |p| {
        p.server_events.contains(&ChannelEvent::Disconnected)
            && p.client_events.contains(&ChannelEvent::Disconnected)
    });
    assert!(ok);
    assert!(pair.received(Side::Server, id).is_empty());
}

#[test]
fn sctp_ports_other_than_5000_connect() {
    let ports = |local_port, remote_port| Config {
        local_port,
        remote_port,
        ..Config::default()
    };
    let mut pair = Pair::new(ports(5001, 6000), ports(6000, 5001), Loss::None);
    pair.connect();
    let id = pair.open(Side::Server, spec("chat", true, Reliability::Reliable));
    pair.server.send(id, MessageKind::Text, b"hi").unwrap();
    assert!(pair.run_until(MINUTE, |p| p.received(Side::Client, id).len() == 1));
    let packet = {
        pair.client.send(id, MessageKind::Text, b"x").unwrap();
        pair.client.poll_transmit(pair.now).unwrap()
    };
    assert_eq!(
        &packet[..4],
        &[0x13, 0x89, 0x17, 0x70],
        "source 5001, destination 6000"
    );
    assert_eq!(ports(0, 5000).validate().unwrap_err().field, "local_port");
}

/// Channels agreed on out of band (W3C `negotiated: true`): both sides configured with the
/// same stream ids open them when the association comes up, with no DATA_CHANNEL_OPEN either
/// way; messages cross both ways on them with their settings; channels opened by DCEP take
/// other ids; a DATA_CHANNEL_OPEN a peer that did not agree sends on one of their ids is
/// refused (the stream reset, closing both).
#[test]
fn negotiated_channels_open_without_dcep_and_refuse_an_open_on_their_ids() {
    use secrelay_datachannel::Negotiated;
    let chat = spec("chat", true, Reliability::Reliable);
    let lossy = spec("lossy", false, Reliability::MaxRetransmits(0));
    let agreed = vec![
        Negotiated {
            id: 0,
            spec: chat.clone(),
        },
        Negotiated {
            id: 7,
            spec: lossy.clone(),
        },
    ];
    let with = |negotiated: Vec<Negotiated>| Config {
        negotiated,
        ..Config::default()
    };
    let mut pair = Pair::new(with(agreed.clone()), with(agreed), Loss::None);
    pair.connect();
    for side in [Side::Client, Side::Server] {
        let opened: Vec<_> = pair
            .events(side)
            .iter()
            .filter(|e| matches!(e, ChannelEvent::Opened { .. }))
            .cloned()
            .collect();
        assert_eq!(
            opened,
            [
                ChannelEvent::Opened {
                    id: ChannelId(0),
                    spec: chat.clone()
                },
                ChannelEvent::Opened {
                    id: ChannelId(7),
                    spec: lossy.clone()
                },
            ],
            "{side:?}"
        );
    }
    for i in 0..100u8 {
        pair.client
            .send(ChannelId(0), MessageKind::Text, &[b'a' + i % 26])
            .unwrap();
        pair.server
            .send(ChannelId(7), MessageKind::Binary, &[i])
            .unwrap();
    }
    let ok = pair.run_until(MINUTE, |p| {
        p.received(Side::Server, ChannelId(0)).len() == 100
            && p.received(Side::Client, ChannelId(7)).len() == 100
    });
    assert!(ok, "the negotiated channels did not carry every message");
    let in_order: Vec<_> = (0..100u8)
        .map(|i| (MessageKind::Text, vec![b'a' + i % 26]))
        .collect();
    assert_eq!(pair.received(Side::Server, ChannelId(0)), in_order);
    let (c, s) = (pair.client.counters(), pair.server.counters());
    assert_eq!(c.dcep_opens_sent + s.dcep_opens_sent, 0, "no DCEP");
    assert_eq!((c.channels_opened, s.channels_opened), (2, 2));
    // A channel opened by DCEP skips the negotiated ids (the client's first even id is 2).
    let id = pair.open(Side::Client, spec("later", true, Reliability::Reliable));
    assert_eq!(id, ChannelId(2));

    // A peer that did not agree opens its first channel on id 0, which the other side has
    // agreed on: refused.
    let mut pair = Pair::new(
        Config::default(),
        with(vec![Negotiated {
            id: 0,
            spec: chat.clone(),
        }]),
        Loss::None,
    );
    pair.connect();
    let id = pair
        .client
        .open(spec("other", true, Reliability::Reliable))
        .unwrap();
    assert_eq!(id, ChannelId(0));
    pair.run_until(Duration::from_secs(5), |p| {
        p.server.counters().discarded(Discard::RefusedOpen) > 0
    });
    assert_eq!(pair.server.counters().discarded(Discard::RefusedOpen), 1);
    // Its stream is reset (the refusal RFC 8832 §6 asks for), which ends the agreed channel
    // too: the two sides disagree about that stream.
    let closed = ChannelEvent::Closed { id: ChannelId(0) };
    let ok = pair.run_until(Duration::from_secs(5), |p| {
        p.server_events.contains(&closed) && p.client_events.contains(&closed)
    });
    assert!(ok, "the stream was not reset both ways");
    assert_eq!(pair.server.channel(ChannelId(0)), None);
}

#[test]
fn negotiated_channels_are_checked_with_the_config() {
    use secrelay_datachannel::Negotiated;
    let n = |id| Negotiated {
        id,
        spec: spec("x", true, Reliability::Reliable),
    };
    let config = |negotiated| Config {
        negotiated,
        ..Config::default()
    };
    let field = |c: Config| c.validate().unwrap_err().to_string();
    assert!(field(config(vec![n(1024)])).contains("not below max_channels"));
    assert!(field(config(vec![n(3), n(3)])).contains("given twice"));
    assert!(config(vec![n(0), n(1023)]).validate().is_ok());
}
