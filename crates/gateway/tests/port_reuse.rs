//! A telephony port pair taken again by the next leg: the pair's previous peer, still sending
//! (a phone that never got the BYE, or someone who learnt the port), is neither latched nor
//! relayed by the new leg while the quarantine lasts, whichever way the leg latches, and is
//! counted as `stale_source`; the new leg's own phone flows. Driven through a shard in memory,
//! on simulated time (the pool that hands the quarantine over has its own unit tests, and
//! `serve_telephony.rs` runs the same over real sockets).

use std::net::SocketAddr;
use std::time::Duration;

use secrelay_gateway::counters::DropReason;
use secrelay_gateway::leg::{Latch, Quarantine, RtpConfig};
use secrelay_gateway::shard::{Event, JoinKind, Shard, ShardConfig};
use secrelay_srtp::Profile;
use secrelay_testkit::gateway::{gateway_cert, rtp_config, webrtc_config, Harness};
use secrelay_testkit::memory::SimClient;
use secrelay_testkit::phone::SimPhone;
use secrelay_wire::RtpHeader;

/// The pair both legs take.
const BASE: u16 = 31000;
const QUARANTINE: Duration = Duration::from_secs(60);

/// A harness whose telephony legs are made with `rtp`, and a connected browser in room
/// "call" that hears whatever the legs relay: (harness, browser).
fn room_with(rtp: RtpConfig) -> (Harness, usize) {
    let mut h = Harness::simd();
    h.shard = Shard::new(
        ShardConfig {
            certificate: gateway_cert(),
            webrtc: webrtc_config(),
            rtp,
            rtcp: secrelay_gateway::rtcp::RtcpConfig::default(),
            codecs: secrelay_media::Registry::standard(),
            limits: Default::default(),
        },
        Box::new(secrelay_srtp::SimdEngine::new()),
    );
    let b = h
        .join("call", SimClient::new(1), JoinKind::Join, None)
        .unwrap();
    assert!(h.connect(b));
    (h, b)
}

/// Phone `i`'s leg's latched source.
fn latched(h: &Harness, i: usize) -> Option<SocketAddr> {
    let m = h.shard.member_id(&h.phones[i].id)?;
    h.shard.room("call")?.leg(m)?.as_rtp()?.latched()
}

/// Leg `i` ends (the control plane's DELETE); the peers its ports hand on.
fn end_leg(h: &mut Harness, i: usize) -> Vec<SocketAddr> {
    let (room, id) = (h.phones[i].room.clone(), h.phones[i].id.clone());
    assert!(h.shard.leave(h.now, &room, &id));
    h.pump();
    h.events
        .iter()
        .find_map(|e| match e {
            Event::MemberLeft {
                id: left, peers, ..
            } if *left == id => Some(peers.clone()),
            _ => None,
        })
        .expect("the leg left")
}

/// The payloads' first bytes the browser heard.
fn heard(h: &Harness, b: usize) -> Vec<u8> {
    h.members[b]
        .client
        .received
        .iter()
        .map(|p| RtpHeader::parse(p).unwrap().payload()[0])
        .collect()
}

/// One run: leg 1 with phone X on the pair, ended; leg 2 with phone Y on the same pair; X
/// keeps sending. `y_from`: where Y's packets come from (its signalled address, or a NAT's).
fn x_is_refused_by_the_next_leg(rtp: RtpConfig, sdes: bool, y_from: Option<SocketAddr>) {
    let what = format!("{:?} sdes={sdes}", rtp.latch);
    let (mut h, b) = room_with(rtp);
    let phone = |n| match sdes {
        true => SimPhone::sdes(n, Profile::AesCm128HmacSha1_80),
        false => SimPhone::plain(n),
    };
    let x = h
        .join_phone_on("call", phone(1), BASE, Quarantine::default())
        .unwrap();
    let x_addr = h.phones[x].phone.addr;
    let (_, pkt) = h.phones[x].phone.packet(&[1; 160]);
    h.send_phone(x, &pkt);
    h.pump();
    assert_eq!(heard(&h, b), vec![1], "{what}: leg 1 relays X");
    let peers = end_leg(&mut h, x);
    assert!(peers.contains(&x_addr), "{what}: {peers:?}");

    let quarantine = Quarantine {
        sources: peers,
        until: Some(h.now + QUARANTINE),
    };
    let y = h.join_phone_on("call", phone(2), BASE, quarantine).unwrap();
    // X goes on sending to the pair's RTP port, more packets than a NAT latch window.
    for k in 0..20u8 {
        let (_, pkt) = h.phones[x].phone.packet(&[10 + k; 160]);
        h.send_phone_from(y, x_addr, BASE, &pkt);
        h.pump();
    }
    let c = h.phone_counters(y).unwrap();
    assert_eq!(c.drops[DropReason::StaleSource], 20, "{what}");
    assert_eq!(c.drops.total(), 20, "{what}: {:?}", c.drops);
    assert_eq!((c.packets_in, c.routed), (0, 0), "{what}");
    assert_eq!(latched(&h, y), None, "{what}: X is never latched");
    assert_eq!(heard(&h, b), vec![1], "{what}: nothing of X relayed");

    // Y flows (from where it says, or from its NAT within its first packets).
    let from = y_from.unwrap_or(h.phones[y].phone.addr);
    let (_, pkt) = h.phones[y].phone.packet(&[2; 160]);
    h.send_phone_from(y, from, BASE, &pkt);
    h.pump();
    assert_eq!(heard(&h, b), vec![1, 2], "{what}: Y is relayed");
    assert_eq!(latched(&h, y), Some(from), "{what}");
    // And the browser's copies go to Y, not to X.
    let before = h.phones[x].phone.received.len();
    let (_, web) = h.srtp(b, &[3; 160]);
    h.send(b, &web);
    h.pump();
    assert_eq!(h.phones[x].phone.received.len(), before, "{what}");
    assert_eq!(h.phones[y].phone.received.len(), 1, "{what}");
}

#[test]
fn the_previous_peer_of_a_reused_port_is_refused_whichever_way_the_leg_latches() {
    x_is_refused_by_the_next_leg(rtp_config(), false, None);
    let nat: SocketAddr = "198.51.100.102:61000".parse().unwrap();
    let first_packets = RtpConfig {
        latch: Latch::FirstPackets(3),
        ..rtp_config()
    };
    x_is_refused_by_the_next_leg(first_packets, false, Some(nat));
    x_is_refused_by_the_next_leg(rtp_config(), true, None);
}

/// The same phone calling again (its signalled address is the old peer's) is not refused;
/// and once the quarantine is over, the old peer is an ordinary stranger.
#[test]
fn the_same_phone_calling_again_flows_and_the_quarantine_ends() {
    let (mut h, b) = room_with(rtp_config());
    let x = h
        .join_phone_on("call", SimPhone::plain(1), BASE, Quarantine::default())
        .unwrap();
    let (_, pkt) = h.phones[x].phone.packet(&[1; 160]);
    h.send_phone(x, &pkt);
    h.pump();
    let peers = end_leg(&mut h, x);
    let until = h.now + QUARANTINE;
    let quarantine = Quarantine {
        sources: peers.clone(),
        until: Some(until),
    };
    let again = h
        .join_phone_on("call", SimPhone::plain(1), BASE, quarantine)
        .unwrap();
    let (_, pkt) = h.phones[again].phone.packet(&[2; 160]);
    h.send_phone(again, &pkt);
    h.pump();
    assert_eq!(heard(&h, b), vec![1, 2]);
    assert_eq!(h.phone_counters(again).unwrap().drops.total(), 0);
    end_leg(&mut h, again);

    // Another phone on the pair, its quarantine over a second later: the old peer is then
    // refused as any stranger is (a plain leg takes only its signalled address), not as a
    // stale source.
    let soon = h.now + Duration::from_secs(1);
    let y = h
        .join_phone_on(
            "call",
            SimPhone::plain(2),
            BASE,
            Quarantine {
                sources: peers,
                until: Some(soon),
            },
        )
        .unwrap();
    h.advance_to(soon);
    let x_addr = h.phones[x].phone.addr;
    let (_, pkt) = h.phones[x].phone.packet(&[3; 160]);
    h.send_phone_from(y, x_addr, BASE, &pkt);
    h.pump();
    let c = h.phone_counters(y).unwrap();
    assert_eq!(c.drops[DropReason::StaleSource], 0);
    assert_eq!(c.drops[DropReason::UnlatchedSource], 1);
}

/// With `strict_source`, an SDES leg keeps to the source it latched to: authentic packets from
/// elsewhere are dropped before they are unprotected, and the latch stays (without it the
/// leg follows its phone, as `telephony_legs.rs` shows).
#[test]
fn a_strict_sdes_leg_keeps_to_its_latched_source() {
    let strict = RtpConfig {
        strict_source: true,
        ..rtp_config()
    };
    let (mut h, b) = room_with(strict);
    let p = h
        .join_phone("call", SimPhone::sdes(1, Profile::AesCm128HmacSha1_80))
        .unwrap();
    let (_, pkt) = h.phones[p].phone.packet(&[1; 160]);
    h.send_phone(p, &pkt);
    h.pump();
    let home = h.phones[p].phone.addr;
    assert_eq!(latched(&h, p), Some(home));
    let moved: SocketAddr = "198.51.100.101:30999".parse().unwrap();
    let port = h.phones[p].ports.rtp.port();
    let (_, pkt) = h.phones[p].phone.packet(&[2; 160]);
    h.send_phone_from(p, moved, port, &pkt);
    h.pump();
    let c = h.phone_counters(p).unwrap();
    assert_eq!(c.drops[DropReason::UnlatchedSource], 1);
    assert_eq!(c.packets_in, 1, "never unprotected");
    assert_eq!(latched(&h, p), Some(home));
    assert_eq!(heard(&h, b), vec![1]);
}
