//! The test kit's simulated browser ([`SimClient`]) wired to a gateway participant in memory
//! on simulated time.
#![allow(dead_code, unused_imports)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType, LocalCertificate};
use secrelay_gateway::participant::{
    CloseReason, CodecId, Event, Output, Participant, ParticipantConfig,
};
use secrelay_srtp::Profile;
pub use secrelay_testkit::browser::receiver_report;
pub use secrelay_testkit::memory::SimClient;
use secrelay_wire::rtp::RtpHeader;
use secrelay_wire::sdp::{parse_offer, Offer};

/// Our gateway certificate (one per test is enough; fresh each time keeps tests independent).
pub fn gateway_cert() -> LocalCertificate {
    let c = Certificate::self_signed(KeyType::EcdsaP256, "secrelay-gateway-test").unwrap();
    LocalCertificate::from(&c)
}

/// Gateway config with one host candidate.
pub fn gateway_config() -> ParticipantConfig {
    ParticipantConfig {
        candidates: vec!["192.0.2.1:3478".parse().unwrap()],
        ..ParticipantConfig::default()
    }
}

/// An owned copy of a participant event.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    IceSelected(SocketAddr),
    Connected(Profile, Duration),
    Media {
        ssrc: u32,
        pt: u8,
        codec: Option<CodecId>,
        rtp: Vec<u8>,
    },
    Rtcp(Vec<u8>),
    Closed(CloseReason),
}

/// Datagrams and where they go.
pub type Transmits = Vec<(SocketAddr, Vec<u8>)>;

/// Drains a participant per its drive contract: (transmits, events, next timer).
pub fn drain(p: &mut Participant) -> (Transmits, Vec<Ev>, Option<Instant>) {
    let mut tx = Vec::new();
    let mut evs = Vec::new();
    let mut timer = None;
    while let Some(o) = p.poll_output() {
        match o {
            Output::Transmit {
                destination,
                contents,
            } => tx.push((destination, contents.to_vec())),
            Output::Timeout(t) => {
                timer = Some(t);
                break;
            }
            Output::Event(e) => evs.push(match e {
                Event::IceSelected(a) => Ev::IceSelected(a),
                Event::Connected { profile, handshake } => Ev::Connected(profile, handshake),
                Event::Media(m) => Ev::Media {
                    ssrc: m.ssrc,
                    pt: m.payload_type,
                    codec: m.codec,
                    rtp: m.rtp.to_vec(),
                },
                Event::Rtcp(b) => Ev::Rtcp(b.to_vec()),
                Event::Closed(r) => Ev::Closed(r),
                other => panic!("unexpected event {other:?}"),
            }),
        }
    }
    (tx, evs, timer)
}

/// Header facts of an RTP packet: (ssrc, pt, seq, payload).
pub fn rtp_facts(p: &[u8]) -> (u32, u8, u16, Vec<u8>) {
    let h = RtpHeader::parse(p).unwrap();
    (
        h.ssrc(),
        h.payload_type(),
        h.sequence(),
        h.payload().to_vec(),
    )
}

/// What a connection attempt ended with.
pub struct Connection {
    pub now: Instant,
    pub events: Vec<Ev>,
    pub answer: Offer,
}

impl Connection {
    pub fn closed(&self) -> Option<CloseReason> {
        self.events.iter().find_map(|e| match e {
            Ev::Closed(r) => Some(*r),
            _ => None,
        })
    }
    pub fn connected(&self) -> Option<(Profile, Duration)> {
        self.events.iter().find_map(|e| match e {
            Ev::Connected(p, d) => Some((*p, *d)),
            _ => None,
        })
    }
}

/// Makes a participant for `client`'s offer at `now`.
pub fn participant_for(offer_sdp: &str, now: Instant) -> Participant {
    let offer = parse_offer(offer_sdp).unwrap();
    Participant::new(&offer, gateway_cert(), gateway_config(), now).unwrap()
}

/// ICE check with nomination, then DTLS over a 5 ms link on simulated time, until both
/// sides connect or the participant closes (or 60 simulated seconds pass).
pub fn connect(client: &mut SimClient, p: &mut Participant, start: Instant) -> Connection {
    let answer = parse_offer(p.answer_sdp()).expect("our answer parses");
    let mut now = start;
    let mut events = Vec::new();
    let req = client.binding_request(&answer, true);
    p.handle_datagram(now, client.addr, &req);
    client.start_dtls(&answer, now);
    let step = Duration::from_millis(5);
    let deadline = start + Duration::from_secs(60);
    loop {
        let (tx, evs, p_timer) = drain(p);
        let closed = evs.iter().any(|e| matches!(e, Ev::Closed(_)));
        events.extend(evs);
        let from_p = tx.len();
        for (dest, d) in tx {
            assert_eq!(dest, client.addr, "the participant sends to its client");
            client.receive(now, &d);
        }
        let from_c = client.drain_dtls();
        let moved = from_p + from_c.len();
        for d in &from_c {
            p.handle_datagram(now, client.addr, d);
        }
        let up = client.keys.is_some() && events.iter().any(|e| matches!(e, Ev::Connected(..)));
        if (up && moved == 0) || closed || client.failed.is_some() || now > deadline {
            if closed || client.failed.is_some() {
                // Let the last words (alerts) through.
                let (_, evs, _) = drain(p);
                events.extend(evs);
            }
            break;
        }
        if moved > 0 {
            now += step;
            continue;
        }
        // Quiet: jump to the earliest timer.
        let next = [p_timer, client.dtls_timer].into_iter().flatten().min();
        let Some(next) = next else { break };
        now = now.max(next);
        if p.poll_timeout().is_some_and(|t| now >= t) {
            p.handle_timeout(now);
        }
        client.handle_timeout(now);
    }
    Connection {
        now,
        events,
        answer,
    }
}
