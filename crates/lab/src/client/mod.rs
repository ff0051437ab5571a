//! A simulated WebRTC participant that uses a gateway exactly as an outside client would:
//! HTTP signaling (WHIP, WHEP or a room join, with an SDP offer written as a browser writes
//! one), ICE connectivity checks with short-term credentials, a DTLS-SRTP handshake, then
//! G.711 μ-law audio every 20 ms over SRTP on its own UDP socket, and SRTP in.
//!
//! [`SimParticipant`] is sans-IO in time (every step takes `now`) but owns its socket;
//! [`fleet`] drives many of them on a few threads (the demo, the calls study).
//!
//! The audio is a real G.711 tone; the first 8 bytes of each payload carry the send instant
//! (nanoseconds since the fleet's epoch) so that a receiver in the same process measures the
//! delay through the gateway. Loss is counted per received stream from RTP sequence numbers.

pub mod compare;
pub mod fleet;
pub mod load;
pub mod rtpengine;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, Event as DtlsEvent, Fingerprint, HashAlgorithm, KeyType,
    LocalCertificate, Output as DtlsOutput, Role,
};
use secrelay_media::g711::Pcmu;
use secrelay_media::Codec as _;
use secrelay_srtp::{Context, Policy};
use secrelay_wire::rtp::{classify, PacketKind, RtpHeader};
use secrelay_wire::sdp::{parse_offer, Setup};
use secrelay_wire::stun::{attr, Class, Message, MessageBuilder, BINDING};

/// What a participant does in its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// `POST /whip/{room}`: sends only.
    Whip,
    /// `POST /whep/{room}`: receives only.
    Whep,
    /// `POST /rooms/{room}/join`: sends and receives.
    Join,
}

impl Leg {
    fn path(self, room: &str) -> String {
        match self {
            Leg::Whip => format!("/whip/{room}"),
            Leg::Whep => format!("/whep/{room}"),
            Leg::Join => format!("/rooms/{room}/join"),
        }
    }
    fn direction(self) -> &'static str {
        match self {
            Leg::Whip => "sendonly",
            Leg::Whep => "recvonly",
            Leg::Join => "sendrecv",
        }
    }
    /// Whether it sends audio.
    pub fn sends(self) -> bool {
        self != Leg::Whep
    }
    /// Whether it receives audio.
    pub fn receives(self) -> bool {
        self != Leg::Whip
    }
}

/// Where a participant is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// ICE checks sent, no answer yet.
    Checking,
    /// ICE answered; DTLS in progress.
    Handshaking,
    /// DTLS-SRTP up: media flows.
    Connected,
    /// Failed (the reason).
    Failed(String),
}

/// Per received stream: RTP sequence numbers seen, for loss.
#[derive(Debug, Clone, Default)]
pub struct StreamRx {
    first: Option<u64>,
    highest: u64,
    cycles: u64,
    last_seq: u16,
    /// Packets received.
    pub received: u64,
}

impl StreamRx {
    fn on_seq(&mut self, seq: u16) {
        self.received += 1;
        match self.first {
            None => {
                self.first = Some(u64::from(seq));
                self.highest = u64::from(seq);
                self.last_seq = seq;
            }
            Some(_) => {
                // RFC 3550 A.1 in short: a sequence number below the last by more than half
                // the space is a wrap.
                if seq < self.last_seq && self.last_seq - seq > 0x8000 {
                    self.cycles += 1 << 16;
                }
                let ext = self.cycles + u64::from(seq);
                if ext > self.highest {
                    self.highest = ext;
                }
                self.last_seq = seq;
            }
        }
    }

    /// Packets expected (from the first to the highest sequence number seen).
    pub fn expected(&self) -> u64 {
        self.first.map_or(0, |f| self.highest + 1 - f)
    }

    /// Expected minus received (0 or more; duplicates can make received exceed expected).
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }
}

/// One simulated participant.
pub struct SimParticipant {
    /// The room.
    pub room: String,
    /// Its leg.
    pub leg: Leg,
    /// The resource URL path the gateway gave (`Location`), for DELETE.
    pub location: String,
    socket: mio::net::UdpSocket,
    gateway: SocketAddr,
    local_ufrag: String,
    remote_ufrag: String,
    remote_pwd: String,
    dtls: Endpoint,
    dtls_timer: Option<Instant>,
    dtls_started: bool,
    tx: Option<Context>,
    rx: Option<Context>,
    /// Where it is.
    pub phase: Phase,
    ssrc: u32,
    seq: u16,
    rtp_ts: u32,
    next_send: Instant,
    next_check: Instant,
    tid: u64,
    /// Time from the POST to the keys.
    pub setup_time: Option<Duration>,
    started: Instant,
    epoch: Instant,
    payload: Vec<u8>,
    /// Packets sent.
    pub sent: u64,
    /// Received streams by (mapped) SSRC.
    pub streams: HashMap<u32, StreamRx>,
    /// Packets that failed to unprotect.
    pub rx_errors: u64,
    /// End-to-end delays of received packets, in microseconds.
    pub delays_us: Vec<u32>,
    buf: Vec<u8>,
    /// Every 50th packet (once a second) is followed by a replay of itself and a forged copy
    /// (another sequence number under the same tag), as an attacker on the path would send:
    /// the gateway must drop both.
    pub inject_bad: bool,
    /// Bad packets sent (replays + forgeries).
    pub bad_sent: u64,
    closed: bool,
}

impl std::fmt::Debug for SimParticipant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimParticipant")
            .field("room", &self.room)
            .field("leg", &self.leg)
            .field("phase", &self.phase)
            .finish()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom_04::fill(&mut b).expect("the OS random source works");
    b
}

fn random_token(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    random_bytes::<32>()
        .iter()
        .take(n)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The offer a browser would send for one audio section with PCMU.
pub fn audio_offer(
    leg: Leg,
    ufrag: &str,
    pwd: &str,
    fingerprint: &Fingerprint,
    ssrc: u32,
) -> String {
    let session = u64::from_be_bytes(random_bytes::<8>()) >> 2;
    format!(
        "v=0\r\n\
         o=- {session} 2 IN IP4 127.0.0.1\r\n\
         s=-\r\n\
         t=0 0\r\n\
         a=group:BUNDLE 0\r\n\
         a=msid-semantic: WMS\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 0\r\n\
         c=IN IP4 0.0.0.0\r\n\
         a=rtcp:9 IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:{ufrag}\r\n\
         a=ice-pwd:{pwd}\r\n\
         a=ice-options:trickle\r\n\
         a=fingerprint:{fingerprint}\r\n\
         a=setup:actpass\r\n\
         a=mid:0\r\n\
         a={dir}\r\n\
         a=rtcp-mux\r\n\
         a=rtpmap:0 PCMU/8000\r\n\
         a=ssrc:{ssrc} cname:sim-{ufrag}\r\n",
        dir = leg.direction(),
    )
}

/// The first host candidate in an answer.
fn answer_candidate(answer: &str) -> Option<SocketAddr> {
    answer.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("a=candidate:")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 6 || !f[2].eq_ignore_ascii_case("udp") {
            return None;
        }
        let ip: IpAddr = f[4].parse().ok()?;
        let port: u16 = f[5].parse().ok()?;
        Some(SocketAddr::new(ip, port))
    })
}

/// How to reach the gateway's HTTP side.
#[derive(Debug, Clone)]
pub struct Signaling {
    /// `http://host:port`.
    pub base_url: String,
    /// A Bearer token, if the rooms need one.
    pub token: Option<String>,
}

impl Signaling {
    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into()
    }

    /// POSTs an offer: (status, Location, body).
    pub fn post_offer(
        &self,
        path: &str,
        sdp: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let url = format!("{}{}", self.base_url, path);
        let mut req = Self::agent()
            .post(&url)
            .header("Content-Type", "application/sdp");
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.send(sdp).with_context(|| format!("POST {url}"))?;
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("POST {url}: reading the answer"))?;
        Ok((status, location, body))
    }

    /// PATCHes a resource with a trickle-ice-sdpfrag body: (status, ETag, body).
    pub fn patch(
        &self,
        location: &str,
        if_match: &str,
        fragment: &str,
    ) -> anyhow::Result<(u16, Option<String>, String)> {
        let url = format!("{}{}", self.base_url, location);
        let mut req = Self::agent()
            .patch(&url)
            .header("Content-Type", "application/trickle-ice-sdpfrag")
            .header("If-Match", if_match);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.send(fragment).with_context(|| format!("PATCH {url}"))?;
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("PATCH {url}: reading the fragment"))?;
        Ok((status, etag, body))
    }

    /// DELETEs a resource; the status.
    pub fn delete(&self, location: &str) -> anyhow::Result<u16> {
        let url = format!("{}{}", self.base_url, location);
        let mut req = Self::agent().delete(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        Ok(req
            .call()
            .with_context(|| format!("DELETE {url}"))?
            .status()
            .as_u16())
    }
}

impl SimParticipant {
    /// Sends the offer and builds the participant from the answer; the socket is bound on
    /// `bind_ip` (port chosen by the OS). `epoch` is the instant send times are counted from.
    pub fn join(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
    ) -> anyhow::Result<SimParticipant> {
        Self::join_announcing(signaling, room, leg, bind_ip, epoch, None)
    }

    /// As [`SimParticipant::join`], announcing `fingerprint` in the offer instead of its own
    /// certificate's (a test of the gateway's fingerprint check: the handshake must fail).
    pub fn join_announcing(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
        fingerprint: Option<Fingerprint>,
    ) -> anyhow::Result<SimParticipant> {
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "secrelay-sim")
            .context("generating the participant's certificate")?;
        let ufrag = random_token(8);
        let pwd = random_token(24);
        let ssrc = u32::from_be_bytes(random_bytes::<4>()).max(1);
        let announced = fingerprint.unwrap_or_else(|| cert.fingerprint());
        let offer = audio_offer(leg, &ufrag, &pwd, &announced, ssrc);
        let started = Instant::now();
        let (status, location, body) = signaling.post_offer(&leg.path(room), &offer)?;
        if status != 201 {
            bail!("{} answered {status}: {}", leg.path(room), body.trim());
        }
        let location = location.ok_or_else(|| anyhow!("201 without a Location"))?;
        let answer = parse_offer(&body).map_err(|e| anyhow!("the answer does not parse: {e}"))?;
        let gateway =
            answer_candidate(&body).ok_or_else(|| anyhow!("the answer has no host candidate"))?;
        let algorithm: HashAlgorithm = answer
            .fingerprint
            .0
            .parse()
            .map_err(|e| anyhow!("answer fingerprint: {e}"))?;
        let fp = Fingerprint::from_digest(algorithm, &answer.fingerprint.1)
            .map_err(|e| anyhow!("answer fingerprint: {e}"))?;
        let role = match answer.setup {
            Setup::Active => Role::Server,
            _ => Role::Client,
        };
        let now = Instant::now();
        let dtls = Endpoint::new(
            EndpointConfig::new(role, LocalCertificate::from(&cert), fp),
            now,
        )
        .map_err(|e| anyhow!("DTLS endpoint: {e}"))?;
        let bind_ip = if bind_ip.is_unspecified() && gateway.ip().is_loopback() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bind_ip
        };
        let socket = mio::net::UdpSocket::bind(SocketAddr::new(bind_ip, 0))
            .context("binding the participant's UDP socket")?;
        // A 440 Hz tone, 20 ms of μ-law.
        let pcm: Vec<i16> = (0..160)
            .map(|i| {
                ((i as f64 * 2.0 * std::f64::consts::PI * 440.0 / 8000.0).sin() * 8000.0) as i16
            })
            .collect();
        let mut payload = Vec::with_capacity(160);
        Pcmu.from_pcm(&pcm, &mut payload)
            .map_err(|e| anyhow!("encoding the tone: {e}"))?;
        // Spread the senders over the 20 ms period.
        let phase =
            Duration::from_micros(u64::from(u16::from_be_bytes(random_bytes::<2>())) % 20_000);
        Ok(SimParticipant {
            room: room.to_owned(),
            leg,
            location,
            socket,
            gateway,
            local_ufrag: ufrag,
            remote_ufrag: answer.ice_ufrag,
            remote_pwd: answer.ice_pwd,
            dtls,
            dtls_timer: None,
            dtls_started: false,
            tx: None,
            rx: None,
            phase: Phase::Checking,
            ssrc,
            seq: u16::from_be_bytes(random_bytes::<2>()),
            rtp_ts: u32::from_be_bytes(random_bytes::<4>()),
            next_send: now + phase,
            next_check: now,
            tid: 0,
            setup_time: None,
            started,
            epoch,
            payload,
            sent: 0,
            streams: HashMap::new(),
            rx_errors: 0,
            delays_us: Vec::new(),
            buf: vec![0u8; 2048],
            inject_bad: false,
            bad_sent: 0,
            closed: false,
        })
    }

    /// Its socket, to register with a poll.
    pub fn socket_mut(&mut self) -> &mut mio::net::UdpSocket {
        &mut self.socket
    }

    fn send_to_gateway(&self, d: &[u8]) {
        // UDP: a full buffer drops the datagram, as the network would.
        let _ = self.socket.send_to(d, self.gateway);
    }

    fn binding_request(&mut self) -> Vec<u8> {
        self.tid += 1;
        let mut tid = [0u8; 12];
        tid[..8].copy_from_slice(&self.tid.to_be_bytes());
        tid[8..].copy_from_slice(&random_bytes::<4>());
        let username = format!("{}:{}", self.remote_ufrag, self.local_ufrag);
        let mut buf = [0u8; 512];
        let n = MessageBuilder::new(&mut buf, Class::Request, BINDING, tid)
            .attribute(attr::USERNAME, username.as_bytes())
            .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes())
            .attribute(attr::ICE_CONTROLLING, &random_bytes::<8>())
            .attribute(attr::USE_CANDIDATE, &[])
            .integrity(self.remote_pwd.as_bytes())
            .fingerprint()
            .expect("a Binding request of fixed small size fits 512 bytes");
        buf[..n].to_vec()
    }

    /// The next instant it needs [`SimParticipant::on_timer`].
    pub fn deadline(&self) -> Instant {
        let mut t = self.next_check;
        if let Some(d) = self.dtls_timer {
            t = t.min(d);
        }
        if self.phase == Phase::Connected && self.leg.sends() {
            t = t.min(self.next_send);
        }
        t
    }

    /// Timers: ICE checks (every 200 ms until answered, then consent every 2 s), DTLS
    /// retransmissions, one audio packet per 20 ms.
    pub fn on_timer(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Failed(_)) {
            self.next_check = now + Duration::from_secs(3600);
            return;
        }
        if now >= self.next_check {
            let req = self.binding_request();
            self.send_to_gateway(&req);
            self.next_check = now
                + if self.phase == Phase::Checking {
                    Duration::from_millis(200)
                } else {
                    Duration::from_secs(2)
                };
        }
        if self.dtls_timer.is_some_and(|t| now >= t) {
            self.dtls.handle_timeout(now);
            self.drain_dtls(now);
        }
        if self.phase == Phase::Connected && self.leg.sends() {
            // One packet per period; after a stall, catch up at most 5 so a slow loop shows as
            // delay rather than as a burst.
            let mut n = 0;
            while now >= self.next_send && n < 5 {
                self.send_audio();
                self.next_send += Duration::from_millis(20);
                n += 1;
            }
            if now >= self.next_send {
                let behind = now.duration_since(self.next_send).as_micros() / 20_000 + 1;
                self.next_send += Duration::from_millis(20) * behind as u32;
            }
        }
    }

    fn send_audio(&mut self) {
        let Some(tx) = self.tx.as_mut() else { return };
        let mut pkt = [0u8; 12 + 160 + 16];
        pkt[0] = 0x80;
        pkt[1] = 0;
        pkt[2..4].copy_from_slice(&self.seq.to_be_bytes());
        pkt[4..8].copy_from_slice(&self.rtp_ts.to_be_bytes());
        pkt[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        pkt[12..172].copy_from_slice(&self.payload);
        let sent_at = self.epoch.elapsed().as_nanos() as u64;
        pkt[12..20].copy_from_slice(&sent_at.to_be_bytes());
        if let Ok(n) = tx.protect_rtp(&mut pkt, 172) {
            self.send_to_gateway(&pkt[..n]);
            self.sent += 1;
            if self.inject_bad && self.sent.is_multiple_of(50) {
                self.send_to_gateway(&pkt[..n]);
                // A forgery: a sequence number not seen yet (so the replay check passes) on a
                // packet whose tag was computed for another.
                let forged_seq = self.seq.wrapping_add(25);
                pkt[2..4].copy_from_slice(&forged_seq.to_be_bytes());
                self.send_to_gateway(&pkt[..n]);
                self.bad_sent += 2;
            }
        }
        self.seq = self.seq.wrapping_add(1);
        self.rtp_ts = self.rtp_ts.wrapping_add(160);
    }

    /// Reads every datagram waiting on the socket.
    pub fn on_readable(&mut self, now: Instant) -> io::Result<()> {
        loop {
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            if from != self.gateway {
                continue;
            }
            let mut d = std::mem::take(&mut self.buf);
            self.on_datagram(now, &mut d, n);
            self.buf = d;
        }
    }

    fn on_datagram(&mut self, now: Instant, d: &mut [u8], n: usize) {
        match classify(&d[..n]) {
            PacketKind::Stun => {
                let ok = Message::parse(&d[..n]).is_ok_and(|m| {
                    m.class() == Class::Success
                        && m.check_integrity(self.remote_pwd.as_bytes()).is_ok()
                });
                if ok && self.phase == Phase::Checking {
                    self.phase = Phase::Handshaking;
                    if !self.dtls_started {
                        self.dtls_started = true;
                        self.drain_dtls(now);
                    }
                }
            }
            PacketKind::Dtls => {
                self.dtls.handle_datagram(now, &d[..n]);
                self.drain_dtls(now);
            }
            PacketKind::Rtp => {
                let Some(rx) = self.rx.as_mut() else {
                    self.rx_errors += 1;
                    return;
                };
                match rx.unprotect_rtp(d, n) {
                    Ok(len) => {
                        let Ok(h) = RtpHeader::parse(&d[..len]) else {
                            self.rx_errors += 1;
                            return;
                        };
                        let p = h.payload();
                        if p.len() >= 8 {
                            let sent = u64::from_be_bytes(p[..8].try_into().expect("8 bytes"));
                            let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
                            let us = now_ns.saturating_sub(sent) / 1_000;
                            self.delays_us.push(us.min(u64::from(u32::MAX)) as u32);
                        }
                        self.streams
                            .entry(h.ssrc())
                            .or_default()
                            .on_seq(h.sequence());
                    }
                    Err(_) => self.rx_errors += 1,
                }
            }
            PacketKind::Rtcp => {
                if let Some(rx) = self.rx.as_mut() {
                    if rx.unprotect_rtcp(d, n).is_err() {
                        self.rx_errors += 1;
                    }
                }
            }
            PacketKind::Other => self.rx_errors += 1,
        }
    }

    fn drain_dtls(&mut self, now: Instant) {
        if !self.dtls_started {
            return;
        }
        self.dtls_timer = None;
        while let Some(o) = self.dtls.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => self.send_to_gateway(&d),
                DtlsOutput::Timeout(t) => {
                    self.dtls_timer = Some(t);
                    break;
                }
                DtlsOutput::Event(DtlsEvent::Connected { keys, .. }) => {
                    let tx = Context::new(Policy::new(keys.local.clone()).any_outbound());
                    let rx = Context::new(Policy::new(keys.remote.clone()).any_inbound());
                    match (tx, rx) {
                        (Ok(tx), Ok(rx)) => {
                            self.tx = Some(tx);
                            self.rx = Some(rx);
                            self.phase = Phase::Connected;
                            self.setup_time = Some(now.duration_since(self.started));
                            self.next_send = self.next_send.max(now);
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            self.phase = Phase::Failed(format!("SRTP context: {e}"))
                        }
                    }
                }
                DtlsOutput::Event(DtlsEvent::Failed(r)) => {
                    self.phase = Phase::Failed(format!("DTLS: {r}"));
                }
                DtlsOutput::Event(DtlsEvent::Closed) => self.closed = true,
                DtlsOutput::Event(_) => {}
            }
        }
    }

    /// ICE restart (RFC 9725 §4.3): new credentials of ours in a PATCH with `If-Match: *`;
    /// the gateway's new ones from the answer fragment are used for every check after this.
    pub fn ice_restart(&mut self, signaling: &Signaling) -> anyhow::Result<()> {
        let ufrag = random_token(8);
        let pwd = random_token(24);
        let frag = format!("a=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\n");
        let (status, _, body) = signaling.patch(&self.location, "*", &frag)?;
        if status != 200 {
            bail!("ICE restart answered {status}: {}", body.trim());
        }
        let field = |name: &str| {
            body.lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let (Some(remote_ufrag), Some(remote_pwd)) = (field("a=ice-ufrag:"), field("a=ice-pwd:"))
        else {
            bail!("the ICE restart answer has no credentials: {body}");
        };
        self.local_ufrag = ufrag;
        self.remote_ufrag = remote_ufrag;
        self.remote_pwd = remote_pwd;
        // Check with the new credentials at once.
        self.next_check = Instant::now();
        Ok(())
    }

    /// One step without a poll: reads what is waiting, runs the timers that are due.
    pub fn step(&mut self, now: Instant) -> io::Result<()> {
        self.on_readable(now)?;
        if self.deadline() <= now {
            self.on_timer(now);
        }
        Ok(())
    }

    /// Steps every participant (sleeping 1 ms between rounds) until `done` holds or `timeout`
    /// passes; whether `done` held.
    pub fn drive_until(
        group: &mut [SimParticipant],
        timeout: Duration,
        mut done: impl FnMut(&[SimParticipant]) -> bool,
    ) -> io::Result<bool> {
        let end = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            for p in group.iter_mut() {
                p.step(now)?;
            }
            if done(group) {
                return Ok(true);
            }
            if now >= end {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the DTLS association closed (close_notify sent or received).
    pub fn peer_closed(&self) -> bool {
        self.closed
    }

    /// Packets received, all streams.
    pub fn received(&self) -> u64 {
        self.streams.values().map(|s| s.received).sum()
    }

    /// Sends `packets` audio packets at once, beside the 20 ms clock (tests: a burst right
    /// before a close). Nothing is sent before the participant has its SRTP keys.
    pub fn send_audio_burst(&mut self, packets: usize) {
        for _ in 0..packets {
            self.send_audio();
        }
    }

    /// Sends close_notify.
    pub fn close(&mut self, now: Instant) {
        self.dtls.close(now);
        self.drain_dtls(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_counts_gaps_and_wraps() {
        let mut s = StreamRx::default();
        for seq in [65530u16, 65531, 65533, 65535, 0, 1, 3] {
            s.on_seq(seq);
        }
        assert_eq!(s.expected(), 10);
        assert_eq!(s.received, 7);
        assert_eq!(s.lost(), 3);
    }

    #[test]
    fn candidate_from_answer() {
        let a = "a=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\n";
        assert_eq!(
            answer_candidate(a),
            Some("127.0.0.1:40000".parse().unwrap())
        );
        assert_eq!(
            answer_candidate("a=candidate:1 1 tcp 1 1.2.3.4 5 typ host"),
            None
        );
    }
}
