//! A simulated WebRTC client built from secrelay's own pieces (an offer written as Chrome
//! writes one, STUN checks from `MessageBuilder`, a `secrelay_dtls` endpoint, `secrelay_srtp`
//! contexts from its keys), wired to a gateway participant in memory on simulated time.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, Event as DtlsEvent, FailReason, Fingerprint, KeyType,
    LocalCertificate, Output as DtlsOutput, Role, SrtpKeys,
};
use secrelay_gateway::participant::{
    CloseReason, CodecId, Event, Output, Participant, ParticipantConfig,
};
use secrelay_srtp::{Context, Policy, Profile};
use secrelay_wire::rtp::{classify, PacketKind, RtpHeader};
use secrelay_wire::sdp::{parse_offer, Offer};
use secrelay_wire::stun::{attr, Class, MessageBuilder, BINDING};

/// The browser offer the clients start from.
pub const CHROME_OFFER: &str = include_str!("../../../wire/tests/data/chrome_offer.sdp");

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

/// A simulated browser.
pub struct SimClient {
    pub addr: SocketAddr,
    pub cert: Certificate,
    pub ufrag: String,
    pub pwd: String,
    pub ssrc: u32,
    pub opus_pt: u8,
    pub dtls: Option<Endpoint>,
    pub dtls_timer: Option<Instant>,
    pub keys: Option<SrtpKeys>,
    pub failed: Option<FailReason>,
    pub tx: Option<Context>,
    pub rx: Option<Context>,
    /// Unprotected RTP the gateway sent us.
    pub received: Vec<Vec<u8>>,
    /// Unprotected RTCP the gateway sent us.
    pub received_rtcp: Vec<Vec<u8>>,
    /// STUN success responses received.
    pub stun_ok: usize,
    pub seq: u16,
    tid: u32,
}

impl SimClient {
    /// A client at 198.51.100.`n`:50000+`n`, announcing SSRC 1001 for audio (as Chrome's offer).
    pub fn new(n: u8) -> SimClient {
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "sim-browser").unwrap();
        SimClient {
            addr: format!("198.51.100.{n}:{}", 50000 + u16::from(n))
                .parse()
                .unwrap(),
            cert,
            ufrag: format!("cl{n:02}"),
            pwd: format!("client-password-number-{n:03}"),
            ssrc: 1001,
            opus_pt: 111,
            dtls: None,
            dtls_timer: None,
            keys: None,
            failed: None,
            tx: None,
            rx: None,
            received: Vec::new(),
            received_rtcp: Vec::new(),
            stun_ok: 0,
            seq: 1,
            tid: 0,
        }
    }

    /// The offer with our credentials and fingerprint.
    pub fn offer(&self) -> String {
        self.offer_with(&self.cert.fingerprint(), "actpass")
    }

    /// The offer with a chosen fingerprint and a=setup value.
    pub fn offer_with(&self, fp: &Fingerprint, setup: &str) -> String {
        let mut s = CHROME_OFFER
            .replace("a=ice-ufrag:Fx3k", &format!("a=ice-ufrag:{}", self.ufrag))
            .replace(
                "a=ice-pwd:mWmR9dHJ4PcoyR+l8UkmBVlo",
                &format!("a=ice-pwd:{}", self.pwd),
            )
            .replace("a=setup:actpass", &format!("a=setup:{setup}"));
        let chrome_fp = "sha-256 3D:9E:1B:7A:22:4C:35:0F:3E:C3:6F:AF:9B:56:C4:41:17:5C:9F:02:A0:0E:77:27:4B:23:0F:9B:D8:77:D5:23";
        s = s.replace(chrome_fp, &fp.to_string());
        if self.opus_pt != 111 {
            s = s.replace("111", &self.opus_pt.to_string());
        }
        s
    }

    /// A Binding request as a controlling full agent sends it, nominating if asked.
    pub fn binding_request(&mut self, answer: &Offer, use_candidate: bool) -> Vec<u8> {
        self.tid += 1;
        let mut tid = [0u8; 12];
        tid[..4].copy_from_slice(&self.tid.to_be_bytes());
        tid[4..8].copy_from_slice(&u32::from(self.addr.port()).to_be_bytes());
        let username = format!("{}:{}", answer.ice_ufrag, self.ufrag);
        let mut buf = [0u8; 512];
        let mut b = MessageBuilder::new(&mut buf, Class::Request, BINDING, tid)
            .attribute(attr::USERNAME, username.as_bytes())
            .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes())
            .attribute(
                attr::ICE_CONTROLLING,
                &0x1234_5678_9abc_def0u64.to_be_bytes(),
            );
        if use_candidate {
            b = b.attribute(attr::USE_CANDIDATE, &[]);
        }
        let n = b
            .integrity(answer.ice_pwd.as_bytes())
            .fingerprint()
            .unwrap();
        buf[..n].to_vec()
    }

    /// Starts DTLS against the answer: we are the client when the gateway said passive.
    pub fn start_dtls(&mut self, answer: &Offer, now: Instant) {
        let fp: Fingerprint = format!(
            "{} {}",
            answer.fingerprint.0,
            answer
                .fingerprint
                .1
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(":")
        )
        .parse()
        .unwrap();
        let role = match answer.setup {
            secrelay_wire::sdp::Setup::Passive => Role::Client,
            _ => Role::Server,
        };
        let cfg = EndpointConfig::new(role, LocalCertificate::from(&self.cert), fp);
        self.dtls = Some(Endpoint::new(cfg, now).unwrap());
    }

    /// A datagram from the gateway.
    pub fn receive(&mut self, now: Instant, d: &[u8]) {
        match classify(d) {
            PacketKind::Stun => {
                let m = secrelay_wire::stun::Message::parse(d).unwrap();
                if m.class() == Class::Success {
                    self.stun_ok += 1;
                }
            }
            PacketKind::Dtls => {
                if let Some(ep) = self.dtls.as_mut() {
                    ep.handle_datagram(now, d);
                }
            }
            PacketKind::Rtp => {
                let rx = self.rx.as_mut().expect("SRTP before keys");
                let mut buf = d.to_vec();
                let n = rx
                    .unprotect_rtp(&mut buf, d.len())
                    .expect("our own keys decrypt");
                buf.truncate(n);
                self.received.push(buf);
            }
            PacketKind::Rtcp => {
                let rx = self.rx.as_mut().expect("SRTCP before keys");
                let mut buf = d.to_vec();
                let n = rx
                    .unprotect_rtcp(&mut buf, d.len())
                    .expect("our own keys decrypt");
                buf.truncate(n);
                self.received_rtcp.push(buf);
            }
            other => panic!("unexpected {other:?} from the gateway"),
        }
    }

    /// Drains the DTLS endpoint: datagrams to send.
    pub fn drain_dtls(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let Some(ep) = self.dtls.as_mut() else {
            return out;
        };
        self.dtls_timer = None;
        while let Some(o) = ep.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => out.push(d),
                DtlsOutput::Timeout(t) => {
                    self.dtls_timer = Some(t);
                    break;
                }
                DtlsOutput::Event(DtlsEvent::Connected { keys, .. }) => {
                    self.tx =
                        Some(Context::new(Policy::new(keys.local.clone()).any_outbound()).unwrap());
                    self.rx =
                        Some(Context::new(Policy::new(keys.remote.clone()).any_inbound()).unwrap());
                    self.keys = Some(keys);
                }
                DtlsOutput::Event(DtlsEvent::Failed(r)) => self.failed = Some(r),
                DtlsOutput::Event(_) => {}
            }
        }
        out
    }

    /// An RTP packet: our SSRC, our opus PT, the next sequence number, `payload`.
    pub fn rtp(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[0] = 0x80;
        p[1] = self.opus_pt;
        p[2..4].copy_from_slice(&self.seq.to_be_bytes());
        p[4..8].copy_from_slice(&(u32::from(self.seq) * 960).to_be_bytes());
        p[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        p.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        p
    }

    /// `rtp(payload)`, protected with our outbound context.
    pub fn srtp(&mut self, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let plain = self.rtp(payload);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 32, 0);
        let n = self
            .tx
            .as_mut()
            .expect("connected")
            .protect_rtp(&mut buf, plain.len())
            .unwrap();
        buf.truncate(n);
        (plain, buf)
    }
}

/// A receiver report (RTCP RR, no report blocks) from `ssrc`.
pub fn receiver_report(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 201, 0, 1];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p
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
        if client.dtls_timer.is_some_and(|t| now >= t) {
            if let Some(ep) = client.dtls.as_mut() {
                ep.handle_timeout(now);
            }
        }
    }
    Connection {
        now,
        events,
        answer,
    }
}
