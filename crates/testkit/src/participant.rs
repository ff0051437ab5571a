//! A simulated participant on a real UDP socket, using a gateway exactly as an outside client
//! would. A WebRTC one: HTTP signaling (WHIP, WHEP or a room join, with a one-section audio
//! offer), ICE connectivity checks, a DTLS-SRTP handshake, then G.711 μ-law audio every 20 ms
//! over SRTP, and SRTP in; the protocol work is a [`Browser`]. A SIP phone's leg
//! ([`Leg::Sdes`], [`Leg::Plain`]): its offer POSTed to the room's telephony endpoint, then
//! the same audio over SDES-SRTP or plain RTP to the port the answer names; the protocol work
//! is a [`SimPhone`]. This adds the socket, the timers and what the demo and the lab count.
//!
//! The audio is a real G.711 tone; the first 8 bytes of each payload carry the send instant
//! (nanoseconds since the fleet's epoch) so that a receiver in the same process measures the
//! delay through the gateway. Loss is counted per received stream from RTP sequence numbers.
//!
//! With [`Media::SimulcastVideo`] a WebRTC participant offers what a browser with a camera
//! does (Chrome's offer: Opus audio, VP8 video): a WHIP publisher sends Opus-sized audio and
//! VP8 in three simulcast layers ([`crate::video::SimulcastSender`], with keyframes on PLI and
//! FIR from the gateway), and a WHEP viewer receives both and counts its video packets per
//! layer ([`VideoRx`]).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use secrelay_dtls::{Certificate, Fingerprint};
use secrelay_media::g711::Pcmu;
use secrelay_media::Codec as _;
use secrelay_srtp::Profile;
use secrelay_wire::rtp::RtpHeader;
use secrelay_wire::sdp::parse_offer;

use crate::browser::{
    answer_candidate, answer_tcp_candidate, random_bytes, random_token, Browser, Inbound,
};
use crate::phone::SimPhone;
use crate::signaling::{Leg, Signaling};
use crate::twcc::TwccReceiver;
use crate::video::{self, SimulcastSender};

/// What a WebRTC participant offers and sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Media {
    /// One audio section with PCMU; a G.711 tone every 20 ms.
    #[default]
    Pcmu,
    /// Chrome's offer, Opus audio and VP8 video: a WHIP publisher sends Opus-sized audio every
    /// 20 ms and video in three simulcast layers ([`crate::video`]); a WHEP viewer receives
    /// both. Only for [`Leg::Whip`] and [`Leg::Whep`].
    SimulcastVideo {
        /// Viewers offer the transport-cc header extension and send transport-cc feedback
        /// every 100 ms ([`crate::twcc`]), so the gateway's estimate chooses their layer;
        /// without it they send no feedback and the gateway sends them its best layer.
        transport_cc: bool,
    },
}

impl Media {
    /// Whether it is [`Media::SimulcastVideo`].
    pub fn is_video(self) -> bool {
        matches!(self, Media::SimulcastVideo { .. })
    }
}

/// What a viewer received on video, per simulcast layer (from each payload's marker,
/// [`crate::video::read_marker`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VideoRx {
    /// Video packets received, per layer index (as [`crate::video::LAYERS`]).
    pub by_layer: [u64; video::MAX_LAYER_COUNT],
    /// The layer of the last video packet received.
    pub last_layer: Option<u8>,
    /// Changes of layer seen (the gateway's switches, as the viewer sees them).
    pub switches: u64,
    /// Send instants (ns since the epoch) of the audio packets received.
    pub audio_stamps: Vec<u64>,
    /// Send instants of the video packets received since the last change of layer (all of
    /// [`VideoRx::last_layer`]).
    pub video_stamps: Vec<u64>,
    /// Retransmissions received (RTX: answers to NACKs, the gateway's bandwidth probes); not
    /// a stream of their own.
    pub rtx: u64,
}

/// What a publisher of simulcast video sent, by send instant (ns since the epoch), for the
/// viewers' delivery figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SentStamps {
    /// Audio packets' send instants, in order.
    pub audio: Vec<u64>,
    /// Video packets' send instants, per layer, in order.
    pub video: [Vec<u64>; video::MAX_LAYER_COUNT],
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
    /// The payload type of its first packet.
    pub payload_type: Option<u8>,
}

impl StreamRx {
    /// One packet with sequence number `seq`.
    pub fn on_seq(&mut self, seq: u16) {
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

/// The protocol side of a participant.
enum Transport {
    /// A WebRTC browser: ICE checks, then DTLS-SRTP.
    WebRtc {
        browser: Box<Browser>,
        dtls_started: bool,
    },
    /// A SIP phone: media from the answer on, no handshake.
    Phone(Box<SimPhone>),
}

/// The gateway answered a join with an error status (a 503 of admission control, a 422 of an
/// offer it cannot take, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRefused {
    /// The path the offer went to.
    pub path: String,
    /// The HTTP status.
    pub status: u16,
    /// The gateway's reason (the body).
    pub reason: String,
}

impl std::fmt::Display for JoinRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} answered {}: {}", self.path, self.status, self.reason)
    }
}

impl std::error::Error for JoinRefused {}

/// How a simulated WebRTC participant's DTLS differs from the simulated browser's defaults
/// (a fresh ECDSA P-256 certificate, the endpoint's SRTP profiles, `a=setup:actpass`).
#[derive(Debug, Clone, Default)]
pub struct PeerDtls {
    /// Announce this fingerprint instead of the certificate's own (the handshake must fail).
    pub announce: Option<Fingerprint>,
    /// This certificate instead of a fresh ECDSA P-256 one. An RSA certificate runs the
    /// participant's endpoint on the OpenSSL engine (`EngineChoice::Auto`).
    pub certificate: Option<Certificate>,
    /// Offer and accept only these SRTP profiles.
    pub srtp_profiles: Option<Vec<Profile>>,
    /// Offer `a=setup:passive`, so that the gateway is the DTLS client.
    pub passive: bool,
    /// Offer and send Opus only (a 20 ms frame of a 440 Hz tone), not PCMU: in a room with
    /// PCMU-only phones the gateway must transcode. No send instant is stamped into the payload
    /// (it would not survive transcoding): no end-to-end delay is measured.
    pub opus_only: bool,
    /// Reach the gateway over ICE-TCP (a connection to the answer's passive TCP candidate,
    /// RFC 4571 frames) instead of UDP.
    pub ice_tcp: bool,
    /// With `ice_tcp`: read the connection at most this many bytes a second, its receive
    /// buffer small (a viewer behind a narrow link: the gateway's queue for it fills).
    pub tcp_read_limit: Option<u64>,
}

/// One simulated participant.
pub struct SimParticipant {
    /// The room.
    pub room: String,
    /// Its leg.
    pub leg: Leg,
    /// The resource URL path the gateway gave (`Location`), for DELETE.
    pub location: String,
    socket: Wire,
    gateway: SocketAddr,
    transport: Transport,
    /// Where it is.
    pub phase: Phase,
    next_send: Instant,
    next_check: Instant,
    /// When a throttled reader reads its connection next.
    next_read: Instant,
    /// Time from the POST to the keys.
    pub setup_time: Option<Duration>,
    started: Instant,
    epoch: Instant,
    payload: Vec<u8>,
    /// Whether the send instant is stamped into each payload's first 8 bytes (and read from
    /// what arrives): not when the gateway transcodes.
    stamp: bool,
    /// Media packets sent (audio and video).
    pub sent: u64,
    /// Of them, video packets.
    pub video_sent: u64,
    /// What it offers and sends.
    pub media: Media,
    /// A publisher's video sender ([`Media::SimulcastVideo`] on [`Leg::Whip`]).
    pub video: Option<Box<SimulcastSender>>,
    /// What a viewer received on video, per layer.
    pub video_rx: VideoRx,
    /// A viewer's transport-cc feedback ([`Media::SimulcastVideo`] with `transport_cc`).
    pub twcc: Option<TwccReceiver>,
    /// A publisher's send instants ([`Media::SimulcastVideo`]).
    pub sent_stamps: SentStamps,
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

/// 20 ms of a 440 Hz tone in Opus (48 kHz, mono).
fn opus_tone() -> anyhow::Result<Vec<u8>> {
    let pcm: Vec<i16> = (0..960)
        .map(|i| ((i as f64 * 2.0 * std::f64::consts::PI * 440.0 / 48_000.0).sin() * 8000.0) as i16)
        .collect();
    let mut enc = secrelay_media::opus::Opus::new(48_000, 32_000)
        .map_err(|e| anyhow!("an Opus encoder: {e}"))?;
    let mut payload = Vec::with_capacity(200);
    enc.from_pcm(&pcm, &mut payload)
        .map_err(|e| anyhow!("encoding the tone: {e}"))?;
    Ok(payload)
}

/// 20 ms of a 440 Hz tone in μ-law.
fn tone() -> anyhow::Result<Vec<u8>> {
    let pcm: Vec<i16> = (0..160)
        .map(|i| ((i as f64 * 2.0 * std::f64::consts::PI * 440.0 / 8000.0).sin() * 8000.0) as i16)
        .collect();
    let mut payload = Vec::with_capacity(160);
    Pcmu.from_pcm(&pcm, &mut payload)
        .map_err(|e| anyhow!("encoding the tone: {e}"))?;
    Ok(payload)
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
        let dtls = PeerDtls {
            announce: fingerprint,
            ..PeerDtls::default()
        };
        Self::join_with(signaling, room, leg, bind_ip, epoch, dtls)
    }

    /// As [`SimParticipant::join`], with its DTLS set up as `dtls` says (another certificate,
    /// fewer SRTP profiles, the gateway as the DTLS client).
    pub fn join_with(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
        dtls: PeerDtls,
    ) -> anyhow::Result<SimParticipant> {
        Self::join_full(signaling, room, leg, bind_ip, epoch, dtls, Media::Pcmu)
    }

    /// As [`SimParticipant::join`], offering and sending `media` (a WHIP publisher of
    /// simulcast video, or a WHEP viewer of it, with [`Media::SimulcastVideo`]).
    pub fn join_media(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
        media: Media,
    ) -> anyhow::Result<SimParticipant> {
        Self::join_full(
            signaling,
            room,
            leg,
            bind_ip,
            epoch,
            PeerDtls::default(),
            media,
        )
    }

    pub(crate) fn join_full(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
        dtls: PeerDtls,
        media: Media,
    ) -> anyhow::Result<SimParticipant> {
        if media.is_video() && !matches!(leg, Leg::Whip | Leg::Whep) {
            bail!("simulcast video is sent by a WHIP publisher and received by WHEP viewers, not by a {} leg", leg.name());
        }
        if leg.is_phone() {
            if dtls.announce.is_some() || dtls.certificate.is_some() {
                bail!("a phone's leg ({leg:?}) has no DTLS");
            }
            return Self::join_phone(signaling, room, leg, bind_ip, epoch, false);
        }
        let (opus_only, ice_tcp, read_limit) = (dtls.opus_only, dtls.ice_tcp, dtls.tcp_read_limit);
        let mut browser = match media {
            // Opus only (the gateway transcodes for PCMU phones): 20 ms at 48 kHz per packet.
            Media::Pcmu if opus_only => {
                let mut b = Browser::random(111);
                b.ts_step = 960;
                b
            }
            Media::Pcmu => {
                let mut b = Browser::random(0);
                b.ts_step = 160;
                b
            }
            // 20 ms of Opus at 48 kHz per packet.
            Media::SimulcastVideo { .. } => Browser::random(video::OPUS_PT),
        };
        if let Some(cert) = dtls.certificate {
            browser.cert = cert;
        }
        if let Some(profiles) = dtls.srtp_profiles {
            browser.srtp_profiles = profiles;
        }
        if dtls.passive {
            browser.offer_setup = "passive";
        }
        let mut offer = match (media, leg) {
            (Media::Pcmu, _) => browser.audio_offer(leg.direction(), dtls.announce.as_ref()),
            (Media::SimulcastVideo { .. }, Leg::Whip) => {
                let own = browser.cert.fingerprint();
                let chrome = browser
                    .chrome_offer_with(dtls.announce.as_ref().unwrap_or(&own), browser.offer_setup);
                video::publisher_offer(&chrome, browser.ssrc, &video::LAYERS)
            }
            (Media::SimulcastVideo { transport_cc }, _) => {
                let own = browser.cert.fingerprint();
                video::viewer_offer(
                    &browser.chrome_offer_with(
                        dtls.announce.as_ref().unwrap_or(&own),
                        browser.offer_setup,
                    ),
                    transport_cc,
                )
            }
        };
        if opus_only && media == Media::Pcmu {
            offer = offer
                .replace("UDP/TLS/RTP/SAVPF 0\r\n", "UDP/TLS/RTP/SAVPF 111\r\n")
                .replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:111 opus/48000/2");
        }
        let started = Instant::now();
        let (status, location, body) = signaling.post_offer(&leg.path(room), &offer)?;
        if status != 201 {
            return Err(JoinRefused {
                path: leg.path(room),
                status,
                reason: body.trim().to_owned(),
            }
            .into());
        }
        let location = location.ok_or_else(|| anyhow!("201 without a Location"))?;
        let answer = parse_offer(&body).map_err(|e| anyhow!("the answer does not parse: {e}"))?;
        let gateway = match ice_tcp {
            true => answer_tcp_candidate(&body)
                .ok_or_else(|| anyhow!("the answer has no passive ICE-TCP candidate"))?,
            false => answer_candidate(&body)
                .ok_or_else(|| anyhow!("the answer has no host candidate"))?,
        };
        browser.set_answer(answer);
        let now = Instant::now();
        browser.start_dtls(now).map_err(|e| anyhow!(e))?;
        let bind_ip = if bind_ip.is_unspecified() && gateway.ip().is_loopback() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bind_ip
        };
        let socket = match ice_tcp {
            // A browser's first check follows its connection at once: the gateway keeps a
            // connection that names no participant only briefly, and few of them per address.
            true => {
                let mut w = Wire::connect(gateway, read_limit)
                    .context("connecting to the ICE-TCP candidate")?;
                if let Some(req) = browser.binding_request(true) {
                    w.send(&req, gateway);
                }
                w
            }
            false => Wire::Udp(
                mio::net::UdpSocket::bind(SocketAddr::new(bind_ip, 0))
                    .context("binding the participant's UDP socket")?,
            ),
        };
        let transport = Transport::WebRtc {
            browser: Box::new(browser),
            dtls_started: false,
        };
        let mut p = Self::new(
            room, leg, location, socket, gateway, transport, started, epoch,
        )?;
        p.media = media;
        if let Media::SimulcastVideo { transport_cc } = media {
            // An Opus-sized payload (its first 8 bytes the send instant).
            p.payload = vec![0x78; video::OPUS_PAYLOAD];
            if transport_cc && leg == Leg::Whep {
                p.twcc = Some(TwccReceiver::new(video::TWCC_EXT_ID, Instant::now(), epoch));
            }
            if leg == Leg::Whip {
                p.video = Some(Box::new(SimulcastSender::new(
                    &video::LAYERS,
                    Instant::now(),
                    epoch,
                )));
            }
        }
        if opus_only {
            p.payload = opus_tone()?;
            p.stamp = false;
        }
        Ok(p)
    }

    /// A phone's leg (`leg` is [`Leg::Sdes`] or [`Leg::Plain`]) that offers PCMU only, and
    /// stamps no send instant into its audio (so that the gateway transcodes for WebRTC
    /// participants that offered Opus only: see [`PeerDtls::opus_only`]).
    pub fn join_pcmu_phone(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
    ) -> anyhow::Result<SimParticipant> {
        if !leg.is_phone() {
            bail!("{leg:?} is not a phone's leg");
        }
        Self::join_phone(signaling, room, leg, bind_ip, epoch, true)
    }

    /// A WebRTC participant that answers an offer the gateway made (a SIP proxy's call towards
    /// a browser, set up through ng rather than HTTP): its socket bound on `bind_ip`, and its
    /// answer SDP for the proxy to hand back. It is the DTLS client (`a=setup:active`) and
    /// sends PCMU under the offer's payload type; `room` names it in reports, and it has no
    /// HTTP resource to DELETE.
    pub fn answer_gateway_offer(
        offer_sdp: &str,
        room: &str,
        bind_ip: IpAddr,
        epoch: Instant,
    ) -> anyhow::Result<(SimParticipant, String)> {
        let offer = parse_offer(offer_sdp)
            .map_err(|e| anyhow!("the gateway's offer does not parse: {e}"))?;
        let gateway = answer_candidate(offer_sdp)
            .ok_or_else(|| anyhow!("the gateway's offer has no host candidate"))?;
        let mut browser = Browser::random(0);
        browser.ts_step = 160;
        let started = Instant::now();
        let answer = browser
            .answer_offer(offer, Leg::Join.direction())
            .map_err(|e| anyhow!("answering the gateway's offer: {e}"))?;
        browser.start_dtls(started).map_err(|e| anyhow!(e))?;
        let socket = mio::net::UdpSocket::bind(SocketAddr::new(bind_ip, 0))
            .context("binding the participant's UDP socket")?;
        let transport = Transport::WebRtc {
            browser: Box::new(browser),
            dtls_started: false,
        };
        let p = Self::new(
            room,
            Leg::Join,
            String::new(),
            Wire::Udp(socket),
            gateway,
            transport,
            started,
            epoch,
        )?;
        Ok((p, answer))
    }

    /// A phone's leg: its socket bound first (the offer names its address), the offer POSTed
    /// to the room's telephony endpoint, the answer's address and (SDES) key taken. It is
    /// connected from then on: its media flows without a handshake.
    fn join_phone(
        signaling: &Signaling,
        room: &str,
        leg: Leg,
        bind_ip: IpAddr,
        epoch: Instant,
        pcmu_only: bool,
    ) -> anyhow::Result<SimParticipant> {
        let bind_ip = if bind_ip.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bind_ip
        };
        let socket = mio::net::UdpSocket::bind(SocketAddr::new(bind_ip, 0))
            .context("binding the phone's UDP socket")?;
        let mut phone = match leg {
            Leg::Sdes => SimPhone::sdes(1, secrelay_srtp::Profile::AesCm128HmacSha1_80),
            _ => SimPhone::plain(1),
        };
        if pcmu_only {
            phone = phone.with_formats(&[(0, "PCMU/8000")]);
        }
        phone.addr = socket.local_addr().context("the phone's socket address")?;
        phone.ssrc = u32::from_be_bytes(random_bytes::<4>());
        phone.seq = u16::from_be_bytes(random_bytes::<2>());
        // RTP and RTCP on one port: the gateway's reports come back to this socket.
        phone.rtcp_mux = true;
        let started = Instant::now();
        let path = leg.path(room);
        let (status, location, body) = signaling.post_offer(&path, &phone.offer())?;
        if status != 201 {
            return Err(JoinRefused {
                path: path.clone(),
                status,
                reason: body.trim().to_owned(),
            }
            .into());
        }
        let location = location.ok_or_else(|| anyhow!("201 without a Location"))?;
        phone
            .accept_answer(&body)
            .map_err(|e| anyhow!("{path}: the answer: {e}"))?;
        let gateway = phone
            .gateway
            .ok_or_else(|| anyhow!("{path}: the answer names no address"))?;
        let mut p = Self::new(
            room,
            leg,
            location,
            Wire::Udp(socket),
            gateway,
            Transport::Phone(Box::new(phone)),
            started,
            epoch,
        )?;
        p.phase = Phase::Connected;
        p.setup_time = Some(started.elapsed());
        p.stamp = !pcmu_only;
        Ok(p)
    }

    /// A phone whose call was set up elsewhere (a SIP proxy's, through the ng control socket):
    /// `phone` has taken the gateway's SDP (its [`SimPhone::gateway`] is set) and sends from
    /// `socket` (its [`SimPhone::addr`]). Connected from the start, like a phone joined over
    /// HTTP; `room` names it in reports, and it has no HTTP resource to DELETE.
    pub fn from_phone(
        room: &str,
        phone: SimPhone,
        socket: std::net::UdpSocket,
        epoch: Instant,
    ) -> anyhow::Result<SimParticipant> {
        let gateway = phone
            .gateway
            .ok_or_else(|| anyhow!("the phone has no gateway address yet"))?;
        if socket.local_addr().ok() != Some(phone.addr) {
            bail!("the phone's socket is not at the address its SDP names");
        }
        socket
            .set_nonblocking(true)
            .context("making the phone's socket non-blocking")?;
        let leg = if phone.sdes.is_some() {
            Leg::Sdes
        } else {
            Leg::Plain
        };
        let started = Instant::now();
        let mut p = Self::new(
            room,
            leg,
            String::new(),
            Wire::Udp(mio::net::UdpSocket::from_std(socket)),
            gateway,
            Transport::Phone(Box::new(phone)),
            started,
            epoch,
        )?;
        p.phase = Phase::Connected;
        p.setup_time = Some(Duration::ZERO);
        Ok(p)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        room: &str,
        leg: Leg,
        location: String,
        socket: Wire,
        gateway: SocketAddr,
        transport: Transport,
        started: Instant,
        epoch: Instant,
    ) -> anyhow::Result<SimParticipant> {
        let now = Instant::now();
        // Spread the senders over the 20 ms period.
        let phase =
            Duration::from_micros(u64::from(u16::from_be_bytes(random_bytes::<2>())) % 20_000);
        Ok(SimParticipant {
            room: room.to_owned(),
            leg,
            location,
            socket,
            gateway,
            transport,
            phase: Phase::Checking,
            next_send: now + phase,
            next_check: now,
            next_read: now,
            setup_time: None,
            started,
            epoch,
            payload: tone()?,
            stamp: true,
            sent: 0,
            video_sent: 0,
            media: Media::Pcmu,
            video: None,
            video_rx: VideoRx::default(),
            twcc: None,
            sent_stamps: SentStamps::default(),
            streams: HashMap::new(),
            rx_errors: 0,
            delays_us: Vec::new(),
            buf: vec![0u8; 2048],
            inject_bad: false,
            bad_sent: 0,
        })
    }

    /// Its socket (UDP, or its ICE-TCP connection), to register with a poll with
    /// [`SimParticipant::interest`].
    pub fn socket_mut(&mut self) -> &mut dyn mio::event::Source {
        self.socket.source_mut()
    }

    /// The readiness to register its socket for (a connection also for writable: what waits
    /// in its send buffer goes out then).
    pub fn interest(&self) -> mio::Interest {
        self.socket.interest()
    }

    fn send_to_gateway(&mut self, d: &[u8]) {
        self.socket.send(d, self.gateway);
    }

    /// The next instant it needs [`SimParticipant::on_timer`].
    pub fn deadline(&self) -> Instant {
        let mut t = match &self.transport {
            Transport::WebRtc {
                browser,
                dtls_started,
            } => {
                let mut t = self.next_check;
                if let Some(d) = browser.dtls_timer.filter(|_| *dtls_started) {
                    t = t.min(d);
                }
                t
            }
            // A phone has no checks to make: only its media clock.
            Transport::Phone(_) => Instant::now() + Duration::from_secs(3600),
        };
        if self.phase == Phase::Connected && self.leg.sends() {
            t = t.min(self.next_send);
            if let Some(v) = &self.video {
                t = t.min(v.deadline());
            }
        }
        if self.socket.throttled() {
            t = t.min(self.next_read);
        }
        if let Some(f) = self
            .twcc
            .as_ref()
            .filter(|_| self.phase == Phase::Connected)
        {
            t = t.min(f.deadline());
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
        if self.socket.throttled() && now >= self.next_read {
            self.next_read = now + THROTTLED_READ_EVERY;
            // A connection lost shows when the gateway's datagrams stop: the test reads that.
            let _ = self.on_readable(now);
        }
        if let Transport::WebRtc {
            browser,
            dtls_started,
        } = &mut self.transport
        {
            if now >= self.next_check {
                if let Some(req) = browser.binding_request(true) {
                    self.socket.send(&req, self.gateway);
                }
                self.next_check = now
                    + if self.phase == Phase::Checking {
                        Duration::from_millis(200)
                    } else {
                        Duration::from_secs(2)
                    };
            }
            if *dtls_started && browser.dtls_timer.is_some_and(|t| now >= t) {
                browser.handle_timeout(now);
                self.drain_dtls(now);
            }
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
            self.send_video(now);
        }
        if self.phase == Phase::Connected {
            self.send_feedback(now);
        }
    }

    /// Sends a viewer's transport-cc feedback when it is due.
    fn send_feedback(&mut self, now: Instant) {
        let (Some(t), Transport::WebRtc { browser, .. }) = (&mut self.twcc, &mut self.transport)
        else {
            return;
        };
        if let Some(rtcp) = t.poll(now, browser.ssrc) {
            if let Some(p) = browser.srtcp(&rtcp) {
                self.socket.send(&p, self.gateway);
            }
        }
    }

    /// Sends the video packets the pacer lets out at `now` (a publisher of simulcast video).
    fn send_video(&mut self, now: Instant) {
        let (Some(v), Transport::WebRtc { browser, .. }) = (&mut self.video, &mut self.transport)
        else {
            return;
        };
        let Some(tx) = browser.tx.as_mut() else {
            return;
        };
        while let Some(mut p) = v.poll(now) {
            if let Some((layer, sent)) = RtpHeader::parse(&p)
                .ok()
                .and_then(|h| video::read_marker(h.payload()))
            {
                if let Some(s) = self.sent_stamps.video.get_mut(usize::from(layer)) {
                    s.push(sent);
                }
            }
            let len = p.len();
            p.resize(len + 32, 0);
            let Ok(n) = tx.protect_rtp(&mut p, len) else {
                continue;
            };
            self.socket.send(&p[..n], self.gateway);
            self.sent += 1;
            self.video_sent += 1;
        }
    }

    fn send_audio(&mut self) {
        let mut payload = self.payload.clone();
        let sent_at = self.epoch.elapsed().as_nanos() as u64;
        if self.stamp && payload.len() >= 8 {
            payload[..8].copy_from_slice(&sent_at.to_be_bytes());
        }
        let (mut pkt, next_seq) = match &mut self.transport {
            Transport::WebRtc { browser, .. } => {
                let Some((_, pkt)) = browser.srtp(&payload) else {
                    return;
                };
                (pkt, browser.seq)
            }
            Transport::Phone(phone) => (phone.packet(&payload).1, phone.seq),
        };
        self.send_to_gateway(&pkt);
        self.sent += 1;
        if self.media.is_video() {
            self.sent_stamps.audio.push(sent_at);
        }
        if self.inject_bad && self.sent.is_multiple_of(50) {
            self.send_to_gateway(&pkt);
            // A forgery: a sequence number not seen yet (so the replay check passes) on a
            // packet whose tag was computed for another (on a plain leg, from the signalled
            // address, indistinguishable from the phone's own: the gateway relays it).
            let forged_seq = next_seq.wrapping_add(24);
            pkt[2..4].copy_from_slice(&forged_seq.to_be_bytes());
            self.send_to_gateway(&pkt);
            self.bad_sent += 2;
        }
    }

    /// Reads every datagram waiting on the socket (and, on a connection, writes what waits
    /// to be sent).
    pub fn on_readable(&mut self, now: Instant) -> io::Result<()> {
        if let Wire::Tcp(c) = &mut self.socket {
            let got = c.flush().and_then(|()| c.read());
            let rbuf = std::mem::take(&mut c.rbuf);
            let mut at = 0;
            while let Some((d, n)) = secrelay_wire::framing::next_frame(&rbuf[at..]) {
                at += n;
                let len = d.len();
                if let Some(b) = self.buf.get_mut(..len) {
                    b.copy_from_slice(d);
                    let mut b = std::mem::take(&mut self.buf);
                    self.on_datagram(now, &mut b, len);
                    self.buf = b;
                }
            }
            if let Wire::Tcp(c) = &mut self.socket {
                c.rbuf = rbuf;
                c.rbuf.drain(..at);
            }
            return got;
        }
        loop {
            let Wire::Udp(socket) = &self.socket else {
                return Ok(());
            };
            let (n, from) = match socket.recv_from(&mut self.buf) {
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
        let inbound = match &mut self.transport {
            Transport::WebRtc { browser, .. } => browser.receive(now, d, n),
            Transport::Phone(phone) => match phone.open(d, n) {
                Ok((false, len)) => Inbound::Rtp(len),
                Ok((true, len)) => Inbound::Rtcp(len),
                Err(_) => Inbound::Other,
            },
        };
        match inbound {
            Inbound::StunSuccess => {
                if self.phase == Phase::Checking {
                    self.phase = Phase::Handshaking;
                    if let Transport::WebRtc { dtls_started, .. } = &mut self.transport {
                        if !*dtls_started {
                            *dtls_started = true;
                            self.drain_dtls(now);
                        }
                    }
                }
            }
            Inbound::StunOther => {}
            Inbound::Dtls => self.drain_dtls(now),
            Inbound::Rtp(len) => {
                let Ok(h) = RtpHeader::parse(&d[..len]) else {
                    self.rx_errors += 1;
                    return;
                };
                let p = h.payload();
                if let Some(t) = &mut self.twcc {
                    let seq = h.extension_header().and_then(|e| {
                        e.elements()
                            .find(|(id, d, _)| *id == t.ext_id && d.len() == 2)
                            .map(|(_, d, _)| u16::from_be_bytes([d[0], d[1]]))
                    });
                    if let Some(seq) = seq {
                        t.on_packet(h.ssrc(), seq, now);
                    }
                }
                if self.media.is_video() && h.payload_type() == video::RTX_PT {
                    // Reported on in transport-cc feedback (above), like any packet.
                    self.video_rx.rtx += 1;
                    return;
                }
                let video_marker = (self.media.is_video() && h.payload_type() == video::VP8_PT)
                    .then(|| video::read_marker(p))
                    .flatten();
                if let Some((layer, sent)) = video_marker {
                    let rx = &mut self.video_rx;
                    if let Some(n) = rx.by_layer.get_mut(usize::from(layer)) {
                        *n += 1;
                    }
                    if rx.last_layer.is_some_and(|l| l != layer) {
                        rx.switches += 1;
                        rx.video_stamps.clear();
                    }
                    rx.last_layer = Some(layer);
                    rx.video_stamps.push(sent);
                } else if self.media.is_video() && h.payload_type() == video::OPUS_PT {
                    if let Some(b) = p.get(..8) {
                        let sent = u64::from_be_bytes(b.try_into().expect("8 bytes"));
                        self.video_rx.audio_stamps.push(sent);
                    }
                }
                let stamp = match video_marker {
                    Some((_, sent)) => Some(sent),
                    None => p
                        .get(..8)
                        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes"))),
                };
                if let Some(sent) = stamp.filter(|_| self.stamp) {
                    let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
                    // A stamp after now is not a fleet sender's (a phone's G.711 in the same
                    // room): no delay from it.
                    if sent <= now_ns {
                        let us = (now_ns - sent) / 1_000;
                        self.delays_us.push(us.min(u64::from(u32::MAX)) as u32);
                    }
                }
                let s = self.streams.entry(h.ssrc()).or_default();
                s.payload_type.get_or_insert(h.payload_type());
                s.on_seq(h.sequence());
            }
            Inbound::Rtcp(len) => {
                // A publisher makes a keyframe of the layer a PLI or FIR names.
                if let Some(v) = &mut self.video {
                    if let Ok(c) = secrelay_wire::rtcp::compound(&d[..len]) {
                        for f in c.feedback {
                            match f {
                                secrelay_wire::rtcp::Feedback::Pli { media, .. } => {
                                    v.request_keyframe(media);
                                }
                                secrelay_wire::rtcp::Feedback::Fir { requests, .. } => {
                                    for (media, _) in requests {
                                        v.request_keyframe(media);
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            Inbound::Refused(_) | Inbound::Other => self.rx_errors += 1,
        }
    }

    fn drain_dtls(&mut self, now: Instant) {
        let Transport::WebRtc {
            browser,
            dtls_started: true,
        } = &mut self.transport
        else {
            return;
        };
        let had_keys = browser.keys.is_some();
        for d in browser.drain_dtls() {
            self.socket.send(&d, self.gateway);
        }
        if let Some(r) = browser.failed {
            if !matches!(self.phase, Phase::Failed(_)) {
                self.phase = Phase::Failed(format!("DTLS: {r}"));
            }
        } else if !had_keys && browser.keys.is_some() {
            self.phase = Phase::Connected;
            self.setup_time = Some(now.duration_since(self.started));
            self.next_send = self.next_send.max(now);
        }
    }

    /// ICE restart (RFC 9725 §4.3): new credentials of ours in a PATCH with `If-Match: *`;
    /// the gateway's new ones from the answer fragment are used for every check after this.
    pub fn ice_restart(&mut self, signaling: &Signaling) -> anyhow::Result<()> {
        let Transport::WebRtc { browser, .. } = &mut self.transport else {
            bail!("a phone's leg has no ICE to restart");
        };
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
        browser.ufrag = ufrag;
        browser.pwd = pwd;
        if let Some(a) = browser.answer.as_mut() {
            a.ice_ufrag = remote_ufrag;
            a.ice_pwd = remote_pwd;
        }
        // Check with the new credentials at once.
        self.next_check = Instant::now();
        Ok(())
    }

    /// An ICE restart through a SIP proxy's signaling, for a participant that answered the
    /// gateway's offer ([`SimParticipant::answer_gateway_offer`]): a new offer with new ICE
    /// credentials on the same DTLS association (what a browser re-INVITEs with after a
    /// network change, or when its gateway node died), for the proxy to send as an ng
    /// `offer`; the gateway's answer goes to [`SimParticipant::take_restart_answer`].
    pub fn restart_offer(&mut self) -> anyhow::Result<String> {
        let Transport::WebRtc { browser, .. } = &mut self.transport else {
            bail!("a phone's leg has no ICE to restart");
        };
        browser
            .restart_offer()
            .ok_or_else(|| anyhow!("no offer of the gateway's was answered"))
    }

    /// The gateway's answer to [`SimParticipant::restart_offer`]: its new credentials, and its
    /// candidate (another node's, after a takeover), checked at once; media goes there.
    pub fn take_restart_answer(&mut self, sdp: &str) -> anyhow::Result<()> {
        let Transport::WebRtc { browser, .. } = &mut self.transport else {
            bail!("a phone's leg has no ICE to restart");
        };
        let answer = parse_offer(sdp).map_err(|e| anyhow!("the answer does not parse: {e}"))?;
        let gateway =
            answer_candidate(sdp).ok_or_else(|| anyhow!("the answer has no host candidate"))?;
        let Some(known) = browser.answer.as_mut() else {
            bail!("no offer of the gateway's was answered");
        };
        known.ice_ufrag = answer.ice_ufrag;
        known.ice_pwd = answer.ice_pwd;
        self.gateway = gateway;
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

    /// Whether the DTLS association closed (close_notify sent or received); a phone's leg
    /// never does (it ends with its DELETE).
    pub fn peer_closed(&self) -> bool {
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser.closed,
            Transport::Phone(_) => false,
        }
    }

    /// The DTLS engine its endpoint runs on (`"dimpl"`, `"openssl"`), while it is alive.
    pub fn dtls_engine(&self) -> Option<&'static str> {
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser.dtls.as_ref()?.engine_name(),
            Transport::Phone(_) => None,
        }
    }

    /// Its DTLS role (the gateway plays the other), once its endpoint exists.
    pub fn dtls_role(&self) -> Option<secrelay_dtls::Role> {
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser.dtls.as_ref().map(|ep| ep.role()),
            Transport::Phone(_) => None,
        }
    }

    /// The SRTP profile DTLS negotiated, once connected.
    pub fn srtp_profile(&self) -> Option<Profile> {
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser.keys.as_ref().map(|k| k.profile),
            Transport::Phone(_) => None,
        }
    }

    /// Its key log ([`crate::keylog`]): the SRTP keys both ways and, for WebRTC, the DTLS
    /// exporter output they came from; SDES keys for a phone; nothing before it has keys.
    pub fn key_log(&self) -> Vec<crate::keylog::KeyLogLine> {
        let Ok(addr) = self.socket.local_addr() else {
            return Vec::new();
        };
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser
                .keys
                .as_ref()
                .map(|k| {
                    use crate::keylog::{KeyLabel, KeyLogLine};
                    vec![
                        KeyLogLine::master_key(addr, KeyLabel::SrtpSend, &k.local),
                        KeyLogLine::master_key(addr, KeyLabel::SrtpReceive, &k.remote),
                        KeyLogLine {
                            addr,
                            label: KeyLabel::DtlsExporter,
                            profile: k.profile,
                            secret: zeroize::Zeroizing::new(k.exported().as_bytes().to_vec()),
                        },
                    ]
                })
                .unwrap_or_default(),
            Transport::Phone(p) => p.key_log(),
        }
    }

    /// The gateway's address this participant sends to: the shared media port for a WebRTC
    /// participant, its own leg's port for a phone.
    pub fn gateway_addr(&self) -> SocketAddr {
        self.gateway
    }

    /// The USERNAME its ICE checks carry (`gateway-ufrag:our-ufrag`), once it has the answer;
    /// `None` for a phone (no ICE). A flood test sends checks under a member's USERNAME with
    /// the wrong password, as an attacker who read the ufrags off the wire could.
    pub fn ice_username(&self) -> Option<String> {
        match &self.transport {
            Transport::WebRtc { browser, .. } => browser
                .answer
                .as_ref()
                .map(|a| format!("{}:{}", a.ice_ufrag, browser.ufrag)),
            Transport::Phone(_) => None,
        }
    }

    /// A second handle on its UDP socket, for sending datagrams from its own address (a flood
    /// test's forged packets from a member's latched address). Reading stays with the
    /// participant.
    pub fn send_socket(&self) -> io::Result<std::net::UdpSocket> {
        use std::os::fd::AsFd;
        let Wire::Udp(socket) = &self.socket else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "an ICE-TCP participant has no UDP socket",
            ));
        };
        Ok(std::net::UdpSocket::from(
            socket.as_fd().try_clone_to_owned()?,
        ))
    }

    /// The next audio packet it would send (protected on an SRTP leg), made but not sent: it
    /// counts as sent, and the caller sends it (from [`SimParticipant::send_socket`]), then
    /// may replay it. `None` before it has keys.
    pub fn next_audio_packet(&mut self) -> Option<Vec<u8>> {
        let pkt = match &mut self.transport {
            Transport::WebRtc { browser, .. } => browser.srtp(&self.payload)?.1,
            Transport::Phone(phone) => phone.packet(&self.payload).1,
        };
        self.sent += 1;
        Some(pkt)
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

    /// Sends close_notify (a phone's leg has none: it ends with its DELETE).
    pub fn close(&mut self, now: Instant) {
        if let Transport::WebRtc { browser, .. } = &mut self.transport {
            browser.close(now);
            self.drain_dtls(now);
        }
    }
}

/// How a participant's datagrams reach the gateway.
enum Wire {
    /// Its UDP socket (a full buffer drops a datagram, as the network would).
    Udp(mio::net::UdpSocket),
    /// An ICE-TCP connection (RFC 6544 active), datagrams framed as RFC 4571 says.
    Tcp(TcpWire),
}

/// An ICE-TCP connection and what waits in it both ways.
struct TcpWire {
    stream: mio::net::TcpStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// A reader slower than the link: what it may read now, and at what rate it may.
    limit: Option<ReadLimit>,
}

/// A token bucket on a connection's reads.
struct ReadLimit {
    bytes_per_sec: u64,
    budget: f64,
    refilled: Instant,
}

impl ReadLimit {
    /// How many bytes may be read now (the bucket refilled for the time since the last read,
    /// holding at most 20 ms of the rate).
    fn allowance(&mut self) -> usize {
        let now = Instant::now();
        let rate = self.bytes_per_sec as f64;
        self.budget =
            (self.budget + rate * now.duration_since(self.refilled).as_secs_f64()).min(rate * 0.02);
        self.refilled = now;
        self.budget as usize
    }
}

/// How often a throttled reader looks at its connection (edge-triggered readiness does not
/// come back for bytes it left unread).
const THROTTLED_READ_EVERY: Duration = Duration::from_millis(5);
/// A throttled reader's socket receive buffer: small, so that the link, not the kernel,
/// holds what it has not read.
const THROTTLED_RCVBUF: usize = 16 * 1024;

/// Bytes waiting to be written on a participant's connection before its datagrams are dropped
/// (a browser's socket buffer, as a browser would lose them).
const TCP_SEND_BUFFER: usize = 1 << 20;

impl Wire {
    /// A connection to `gateway`'s passive ICE-TCP candidate (made before it is handed to a
    /// poll: loopback and lab networks connect at once).
    /// With `read_limit`, the connection is read at most that many bytes a second, its receive
    /// buffer set small before it connects (so the window it offers stays small).
    fn connect(gateway: SocketAddr, read_limit: Option<u64>) -> io::Result<Wire> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(gateway),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        if read_limit.is_some() {
            socket.set_recv_buffer_size(THROTTLED_RCVBUF)?;
        }
        socket.connect_timeout(&gateway.into(), Duration::from_secs(5))?;
        let stream: std::net::TcpStream = socket.into();
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(Wire::Tcp(TcpWire {
            stream: mio::net::TcpStream::from_std(stream),
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            limit: read_limit.map(|bytes_per_sec| ReadLimit {
                bytes_per_sec,
                budget: 0.0,
                refilled: Instant::now(),
            }),
        }))
    }

    /// Whether it reads slower than its link (it must be read on a timer).
    fn throttled(&self) -> bool {
        matches!(self, Wire::Tcp(TcpWire { limit: Some(_), .. }))
    }

    fn send(&mut self, d: &[u8], gateway: SocketAddr) {
        match self {
            Wire::Udp(s) => {
                let _ = s.send_to(d, gateway);
            }
            Wire::Tcp(c) => {
                if c.wbuf.len() + d.len() + 2 <= TCP_SEND_BUFFER
                    && secrelay_wire::framing::write_frame(&mut c.wbuf, d).is_ok()
                {
                    let _ = c.flush();
                }
            }
        }
    }

    fn source_mut(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Wire::Udp(s) => s,
            Wire::Tcp(c) => &mut c.stream,
        }
    }

    fn interest(&self) -> mio::Interest {
        match self {
            Wire::Udp(_) => mio::Interest::READABLE,
            Wire::Tcp(_) => mio::Interest::READABLE | mio::Interest::WRITABLE,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Wire::Udp(s) => s.local_addr(),
            Wire::Tcp(c) => c.stream.local_addr(),
        }
    }
}

impl TcpWire {
    /// Writes what waits, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        use std::io::Write as _;
        let mut at = 0;
        while at < self.wbuf.len() {
            match self.stream.write(&self.wbuf[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.drain(..at);
        Ok(())
    }

    /// Reads what arrived into `rbuf` (what its limit allows, if it has one).
    fn read(&mut self) -> io::Result<()> {
        use std::io::Read as _;
        let mut chunk = [0u8; 16 * 1024];
        let mut allowed = self.limit.as_mut().map_or(usize::MAX, ReadLimit::allowance);
        loop {
            let n = chunk.len().min(allowed);
            if n == 0 {
                return Ok(());
            }
            match self.stream.read(&mut chunk[..n]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the gateway closed the ICE-TCP connection",
                    ))
                }
                Ok(n) => {
                    self.rbuf.extend_from_slice(&chunk[..n]);
                    allowed -= n.min(allowed);
                    if let Some(l) = self.limit.as_mut() {
                        l.budget -= n as f64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
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
    fn the_tone_is_20_ms_of_mu_law() {
        assert_eq!(tone().unwrap().len(), 160);
    }
}
