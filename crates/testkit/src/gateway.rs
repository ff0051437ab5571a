//! Simulated browsers ([`SimClient`]) wired to the gateway's sans-IO parts in memory, on
//! simulated time: one WebRTC leg on its own ([`connect_leg`], for its control plane: ICE,
//! DTLS, consent, close), or a whole [`Shard`] with rooms of clients ([`Harness`], for
//! everything that carries media: the shard's batched path is the gateway's only one).
//!
//! Every datagram a client sends is classified once, as the worker classifies it
//! ([`Datagram::classify`]), and every datagram the gateway sends is delivered to the client
//! at its destination (a client whose keys do not open what it gets panics, see
//! [`SimClient::receive`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType, LocalCertificate};
use secrelay_gateway::counters::{Counters, DropReason, ShardCounters};
use secrelay_gateway::leg::{
    CloseReason, LegEvent, LegOutput, Ports, Quarantine, RtpConfig, RtpLegOptions, Via,
    WebRtcConfig, WebRtcLeg,
};
use secrelay_gateway::room::{MemberId, Room};
use secrelay_gateway::shard::{
    Datagram, Event, Handled, JoinError, JoinKind, Output, Shard, ShardConfig, Who,
};
use secrelay_srtp::{Engine, Profile, SimdEngine};
use secrelay_wire::demux::{demux, Class};
use secrelay_wire::sdp::{parse_offer, Offer};
use secrelay_wire::sdp_rtp::parse_rtp;

use crate::memory::SimClient;
use crate::phone::SimPhone;

/// The gateway's host candidate in these tests.
pub const CANDIDATE: &str = "192.0.2.1:3478";

/// A fresh gateway certificate (ECDSA P-256).
pub fn gateway_cert() -> LocalCertificate {
    let c = Certificate::self_signed(KeyType::EcdsaP256, "secrelay-gateway-test")
        .expect("an ECDSA P-256 certificate can always be made");
    LocalCertificate::from(&c)
}

/// The WebRTC legs' configuration: defaults, one host candidate.
pub fn webrtc_config() -> WebRtcConfig {
    WebRtcConfig {
        candidates: vec![CANDIDATE.parse().expect("a literal address")],
        ..WebRtcConfig::default()
    }
}

/// The telephony legs' configuration: defaults, announcing the candidate's address.
pub fn rtp_config() -> RtpConfig {
    RtpConfig {
        announce: CANDIDATE
            .parse::<SocketAddr>()
            .expect("a literal address")
            .ip(),
        ..RtpConfig::default()
    }
}

/// A leg for `offer_sdp`, created at `now`, with [`gateway_cert`] and [`webrtc_config`].
pub fn leg_for(offer_sdp: &str, now: Instant) -> WebRtcLeg {
    let offer = parse_offer(offer_sdp).expect("the offer parses");
    WebRtcLeg::new(&offer, gateway_cert(), webrtc_config(), now).expect("the offer is answered")
}

/// Datagrams and where they go.
pub type Transmits = Vec<(SocketAddr, Vec<u8>)>;

/// Drains a leg per its drive contract: (transmits, events, next timer).
pub fn drain_leg(leg: &mut WebRtcLeg) -> (Transmits, Vec<LegEvent>, Option<Instant>) {
    let mut tx = Vec::new();
    let mut evs = Vec::new();
    let mut timer = None;
    while let Some(o) = leg.poll_output() {
        match o {
            LegOutput::Transmit {
                destination,
                contents,
                ..
            } => tx.push((destination, contents.to_vec())),
            LegOutput::Timeout(t) => {
                timer = Some(t);
                break;
            }
            LegOutput::Event(e) => evs.push(e),
        }
    }
    (tx, evs, timer)
}

/// Hands a leg a control datagram from `from`, classified as the worker classifies it: STUN
/// (parsed once) to ICE, DTLS to DTLS. `false` for anything else (media goes through a shard).
pub fn to_leg(leg: &mut WebRtcLeg, now: Instant, from: SocketAddr, d: &[u8]) -> bool {
    match demux(d) {
        Class::Stun(facts) => match facts.message(d) {
            Some(m) => {
                leg.handle_stun(now, from, &m);
                true
            }
            None => false,
        },
        Class::Dtls => {
            leg.handle_dtls(now, from, d);
            true
        }
        _ => false,
    }
}

/// What a connection attempt ended with.
#[derive(Debug)]
pub struct Connection {
    /// Simulated time at the end.
    pub now: Instant,
    /// The leg's events on the way.
    pub events: Vec<LegEvent>,
    /// The gateway's answer.
    pub answer: Offer,
}

impl Connection {
    /// Why the leg closed, if it did.
    pub fn closed(&self) -> Option<CloseReason> {
        self.events.iter().find_map(|e| match e {
            LegEvent::Closed(r) => Some(*r),
            _ => None,
        })
    }

    /// The profile and handshake time, if it connected.
    pub fn connected(&self) -> Option<(Profile, Duration)> {
        self.events.iter().find_map(|e| match e {
            LegEvent::Connected { profile, handshake } => Some((*profile, *handshake)),
            _ => None,
        })
    }
}

/// ICE check with nomination, then DTLS over a 5 ms link on simulated time, until both sides
/// connect or the leg closes (or 60 simulated seconds pass).
pub fn connect_leg(client: &mut SimClient, leg: &mut WebRtcLeg, start: Instant) -> Connection {
    let answer = parse_offer(leg.answer_sdp()).expect("our answer parses");
    let mut now = start;
    let mut events = Vec::new();
    let req = client.binding_request(&answer, true);
    to_leg(leg, now, client.addr, &req);
    client.start_dtls(&answer, now);
    let step = Duration::from_millis(5);
    let deadline = start + Duration::from_secs(60);
    loop {
        let (tx, evs, leg_timer) = drain_leg(leg);
        let closed = evs.iter().any(|e| matches!(e, LegEvent::Closed(_)));
        events.extend(evs);
        let from_leg = tx.len();
        for (dest, d) in tx {
            assert_eq!(dest, client.addr, "the leg sends to its client");
            client.receive(now, &d);
        }
        let from_client = client.drain_dtls();
        let moved = from_leg + from_client.len();
        for d in &from_client {
            to_leg(leg, now, client.addr, d);
        }
        let up = client.keys.is_some()
            && events
                .iter()
                .any(|e| matches!(e, LegEvent::Connected { .. }));
        if (up && moved == 0) || closed || client.failed.is_some() || now > deadline {
            if closed || client.failed.is_some() {
                // Let the last words (alerts) through.
                let (_, evs, _) = drain_leg(leg);
                events.extend(evs);
            }
            break;
        }
        if moved > 0 {
            now += step;
            continue;
        }
        // Quiet: jump to the earliest timer.
        let next = [leg_timer, client.dtls_timer].into_iter().flatten().min();
        let Some(next) = next else { break };
        now = now.max(next);
        if leg.poll_timeout().is_some_and(|t| now >= t) {
            leg.handle_timeout(now);
        }
        client.handle_timeout(now);
    }
    Connection {
        now,
        events,
        answer,
    }
}

/// A member of a [`Harness`]: its client and where it joined.
pub struct Member {
    /// The simulated browser.
    pub client: SimClient,
    /// Its room.
    pub room: String,
    /// Its id (as the signaling knows it).
    pub id: String,
    /// The gateway's answer.
    pub answer: Offer,
    /// The gateway's answer as it was written.
    pub answer_sdp: String,
}

/// A telephony member of a [`Harness`]: its phone, where it joined, and its local ports.
pub struct PhoneMember {
    /// The simulated phone.
    pub phone: SimPhone,
    /// Its room.
    pub room: String,
    /// Its id.
    pub id: String,
    /// The local ports the harness gave it (RTP, RTCP).
    pub ports: Ports,
}

/// A shard with simulated browsers (and phones) as its members, on simulated time. Clients are
/// addressed by their index in [`Harness::members`], phones by theirs in [`Harness::phones`].
pub struct Harness {
    /// The shard under test.
    pub shard: Shard,
    /// Simulated time.
    pub now: Instant,
    /// The members, in order of joining.
    pub members: Vec<Member>,
    /// The telephony members, in order of joining.
    pub phones: Vec<PhoneMember>,
    /// The shard's events so far.
    pub events: Vec<Event>,
    /// Datagrams the shard sent to an address no member has (delivered nowhere).
    pub stray: Transmits,
    /// The DTLS datagrams each member's client sent while [`Harness::connect`] ran (member
    /// index, datagram), in order: what a test replays.
    pub client_dtls: Vec<(usize, Vec<u8>)>,
}

impl Harness {
    /// A shard running `engine`, made with a fresh certificate and [`webrtc_config`].
    pub fn new(engine: Box<dyn Engine>) -> Harness {
        Harness {
            shard: Shard::new(
                ShardConfig {
                    certificate: gateway_cert(),
                    webrtc: webrtc_config(),
                    rtp: rtp_config(),
                    rtcp: secrelay_gateway::rtcp::RtcpConfig::default(),
                    codecs: secrelay_media::Registry::standard(),
                    limits: Default::default(),
                },
                engine,
            ),
            now: Instant::now(),
            members: Vec::new(),
            phones: Vec::new(),
            events: Vec::new(),
            stray: Vec::new(),
            client_dtls: Vec::new(),
        }
    }

    /// [`Harness::new`] with the multi-buffer engine the server uses by default.
    pub fn simd() -> Harness {
        Harness::new(Box::new(SimdEngine::new()))
    }

    /// `client` joins `room` with `offer` (its Chrome offer when `None`); its index.
    pub fn join(
        &mut self,
        room: &str,
        client: SimClient,
        kind: JoinKind,
        offer: Option<&str>,
    ) -> Result<usize, JoinError> {
        let sdp = offer.map_or_else(|| client.offer(), str::to_owned);
        let parsed = parse_offer(&sdp).expect("the offer parses");
        let joined = self
            .shard
            .join(self.now, room, &parsed, kind, &Who::default())?;
        let answer = parse_offer(&joined.answer).expect("our answer parses");
        self.members.push(Member {
            client,
            room: room.to_owned(),
            id: joined.id,
            answer,
            answer_sdp: joined.answer,
        });
        self.pump();
        Ok(self.members.len() - 1)
    }

    /// Joins client `n` ([`SimClient::new`]) to `room` and connects it; its index. Panics if
    /// it does not connect.
    pub fn join_connected(&mut self, room: &str, n: u8, kind: JoinKind) -> usize {
        let i = self
            .join(room, SimClient::new(n), kind, None)
            .expect("the offer is answered");
        assert!(self.connect(i), "member {i} connects");
        i
    }

    /// A datagram from member `i`'s client, classified and handled.
    pub fn send(&mut self, i: usize, d: &[u8]) -> Handled {
        let from = self.members[i].client.addr;
        self.send_from(from, d)
    }

    /// A datagram from anywhere, classified and handled. One the shard does not own is
    /// counted as from an unknown source, as a worker with no other worker to hand it to does.
    pub fn send_from(&mut self, from: SocketAddr, d: &[u8]) -> Handled {
        let h = self
            .shard
            .handle(self.now, Datagram::classify(from, d, self.now));
        if h == Handled::NotOurs {
            self.shard.count_drop(DropReason::UnknownSource);
        }
        h
    }

    /// `phone` joins `room` as a telephony leg on ports 30000 + 2k (k: its index) of the
    /// candidate's address, and takes the answer; its index in [`Harness::phones`].
    pub fn join_phone(&mut self, room: &str, phone: SimPhone) -> Result<usize, JoinError> {
        self.join_phone_with(room, phone, RtpLegOptions::default())
    }

    /// As [`Harness::join_phone`], its leg made with `options`.
    pub fn join_phone_with(
        &mut self,
        room: &str,
        phone: SimPhone,
        options: RtpLegOptions,
    ) -> Result<usize, JoinError> {
        let base = 30000 + 2 * self.phones.len() as u16;
        self.join_phone_opts(room, phone, base, options)
    }

    /// `phone` joins `room` as a telephony leg on ports `base` and `base + 1` of the
    /// candidate's address (a pair another leg may have had: its previous peers in
    /// `quarantine`), and takes the answer; its index in [`Harness::phones`].
    pub fn join_phone_on(
        &mut self,
        room: &str,
        phone: SimPhone,
        base: u16,
        quarantine: Quarantine,
    ) -> Result<usize, JoinError> {
        let options = RtpLegOptions {
            quarantine,
            ..Default::default()
        };
        self.join_phone_opts(room, phone, base, options)
    }

    fn join_phone_opts(
        &mut self,
        room: &str,
        mut phone: SimPhone,
        base: u16,
        options: RtpLegOptions,
    ) -> Result<usize, JoinError> {
        let ip = CANDIDATE
            .parse::<SocketAddr>()
            .expect("a literal address")
            .ip();
        let ports = Ports {
            rtp: SocketAddr::new(ip, base),
            rtcp: SocketAddr::new(ip, base + 1),
        };
        let offer = parse_rtp(&phone.offer()).expect("the phone's offer parses");
        let joined =
            self.shard
                .join_rtp_with(self.now, room, &offer, ports, &options, &Who::default())?;
        phone
            .accept_answer(&joined.answer)
            .expect("the phone takes the gateway's answer");
        self.phones.push(PhoneMember {
            phone,
            room: room.to_owned(),
            id: joined.id,
            ports,
        });
        self.pump();
        Ok(self.phones.len() - 1)
    }

    /// A datagram from phone `i` to its RTP port, from its address.
    pub fn send_phone(&mut self, i: usize, d: &[u8]) -> Handled {
        let (from, port) = (self.phones[i].phone.addr, self.phones[i].ports.rtp.port());
        self.send_phone_from(i, from, port, d)
    }

    /// A datagram to phone `i`'s port `port` (its RTP or RTCP port) from `from`.
    pub fn send_phone_from(&mut self, _i: usize, from: SocketAddr, port: u16, d: &[u8]) -> Handled {
        let h = self.shard.handle(
            self.now,
            Datagram::classify_on(Via::Port(port), from, d, self.now),
        );
        if h == Handled::NotOurs {
            self.shard.count_drop(DropReason::UnknownSource);
        }
        h
    }

    /// Phone `i`'s counters, while it is a member.
    pub fn phone_counters(&self, i: usize) -> Option<Counters> {
        let m = &self.phones[i];
        self.shard.member_counters(&m.room, &m.id)
    }

    /// Drains the shard: transmits delivered to the clients and phones at their destinations,
    /// events kept. The number of transmits delivered.
    pub fn pump(&mut self) -> usize {
        let mut n = 0;
        let now = self.now;
        while let Some(o) = self.shard.poll_output() {
            match o {
                Output::Transmit(t) => {
                    if let Some(m) = self
                        .members
                        .iter_mut()
                        .find(|m| m.client.addr == t.destination)
                    {
                        assert_eq!(
                            t.via,
                            Via::Shared,
                            "a browser's datagrams use the shared port"
                        );
                        m.client.receive(now, t.contents);
                        n += 1;
                    } else if let Some(p) = self.phones.iter_mut().find(|p| {
                        p.phone.addr == t.destination || p.phone.addr.ip() == t.destination.ip()
                    }) {
                        assert!(
                            t.via == Via::Port(p.ports.rtp.port())
                                || t.via == Via::Port(p.ports.rtcp.port()),
                            "a phone's media and RTCP leave from its own ports"
                        );
                        p.phone.receive(t.contents);
                        n += 1;
                    } else {
                        self.stray.push((t.destination, t.contents.to_vec()))
                    }
                }
                Output::Event(e) => self.events.push(e),
                Output::Pipe(_) => panic!("one shard has no pipes to other workers"),
                Output::Timeout(_) => break,
            }
        }
        n
    }

    /// ICE check with nomination, then DTLS on simulated time (5 ms per exchange) until
    /// member `i` and the gateway are connected, its leg closed, or 60 s pass; whether it
    /// connected.
    pub fn connect(&mut self, i: usize) -> bool {
        let answer = self.members[i].answer.clone();
        let req = self.members[i].client.binding_request(&answer, true);
        self.send(i, &req);
        let now = self.now;
        self.members[i].client.start_dtls(&answer, now);
        let deadline = self.now + Duration::from_secs(60);
        loop {
            let moved_in = self.pump();
            let out = self.members[i].client.drain_dtls();
            let moved = moved_in + out.len();
            for d in &out {
                self.send(i, d);
            }
            self.client_dtls.extend(out.into_iter().map(|d| (i, d)));
            let c = &self.members[i].client;
            let up = c.keys.is_some() && self.leg_connected(i);
            if (up && moved == 0) || c.failed.is_some() || self.now > deadline {
                self.pump();
                return up;
            }
            if self.shard.member_id(&self.members[i].id).is_none() {
                // The leg closed and left.
                return false;
            }
            if moved > 0 {
                self.now += Duration::from_millis(5);
                continue;
            }
            let next = [self.shard.poll_timeout(), c.dtls_timer]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next else { return up };
            self.advance_to(next);
        }
    }

    fn leg_connected(&self, i: usize) -> bool {
        let m = &self.members[i];
        let Some(id) = self.shard.member_id(&m.id) else {
            return false;
        };
        self.shard
            .room(&m.room)
            .and_then(|r| r.leg(id))
            .is_some_and(|l| l.is_connected())
    }

    /// Moves simulated time to `t` (if later), firing the shard's and the clients' timers.
    pub fn advance_to(&mut self, t: Instant) {
        self.now = self.now.max(t);
        let now = self.now;
        if self.shard.poll_timeout().is_some_and(|d| d <= now) {
            self.shard.handle_timeout(now);
        }
        let mut out = Vec::new();
        for (k, m) in self.members.iter_mut().enumerate() {
            if m.client.dtls_timer.is_some_and(|d| d <= now) {
                m.client.handle_timeout(now);
                out.extend(m.client.drain_dtls().into_iter().map(|d| (k, d)));
            }
        }
        for (k, d) in out {
            self.send(k, &d);
        }
        self.pump();
    }

    /// A consent check (a STUN binding request) from every member's client, answered, and
    /// every output taken as [`drain_copies`] does: what browsers send every few seconds, for
    /// a benchmark to keep its members' sessions alive between timed steps.
    pub fn consent_round(&mut self) {
        for i in 0..self.members.len() {
            let answer = self.members[i].answer.clone();
            let req = self.members[i].client.binding_request(&answer, false);
            self.send(i, &req);
        }
        let now = self.now;
        drain_copies(&mut self.shard, now);
    }

    /// Member `i`'s SRTP of `payload`: (plain, protected).
    pub fn srtp(&mut self, i: usize, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.members[i].client.srtp(payload)
    }

    /// Member `i`'s client.
    pub fn client(&mut self, i: usize) -> &mut SimClient {
        &mut self.members[i].client
    }

    /// Member `i`'s id in its room.
    pub fn member_id(&self, i: usize) -> MemberId {
        self.shard
            .member_id(&self.members[i].id)
            .expect("the member is still in the shard")
    }

    /// Member `i`'s room.
    pub fn room_of(&self, i: usize) -> &Room {
        self.shard
            .room(&self.members[i].room)
            .expect("the member's room exists")
    }

    /// Member `i`'s counters, while it is a member.
    pub fn member_counters(&self, i: usize) -> Option<Counters> {
        let m = &self.members[i];
        self.shard.member_counters(&m.room, &m.id)
    }

    /// The shard's counters.
    pub fn counters(&self) -> ShardCounters {
        self.shard.counters()
    }
}

/// Takes every output of `shard` (its timers fired when due at `now`) without delivering any:
/// how many copies of media it sent. For benchmarks, which time the shard alone.
pub fn drain_copies(shard: &mut Shard, now: Instant) -> u64 {
    let mut sent = 0;
    loop {
        match shard.poll_output() {
            Some(Output::Transmit(t)) => sent += u64::from(t.received.is_some()),
            Some(Output::Event(_)) => {}
            Some(Output::Pipe(_)) => unreachable!("one shard has no pipes"),
            Some(Output::Timeout(t)) if t <= now => shard.handle_timeout(now),
            Some(Output::Timeout(_)) | None => return sent,
        }
    }
}
