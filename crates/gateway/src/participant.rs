//! One WebRTC participant, sans-IO: offer/answer, ICE-lite, DTLS-SRTP and SRTP on one
//! bundled, rtcp-muxed transport.
//!
//! A [`Participant`] is built from a parsed [`Offer`], our certificate and a
//! [`ParticipantConfig`]; it chooses codecs and our DTLS role and writes the answer
//! ([`Participant::answer_sdp`]). Datagrams come in through [`Participant::handle_datagram`] and
//! are demultiplexed by their first byte (RFC 7983, [`classify`]):
//!
//! * STUN goes to the [`IceLite`] agent; its responses are queued to the sender.
//! * DTLS goes to the DTLS-SRTP [`Endpoint`], but only from an address that passed an ICE check.
//! * SRTP/SRTCP is unprotected with the inbound context once DTLS has connected; what fails is
//!   dropped and counted by reason ([`ParticipantCounters`]), never a panic.
//!
//! Media out goes through [`Participant::send_rtp`] (protected with the outbound context and
//! queued to the selected ICE address).
//!
//! # Drive contract
//! After every input (`handle_datagram`, `handle_timeout`, `send_rtp`, `close`), call
//! [`Participant::poll_output`] until it returns [`Output::Timeout`] (call
//! [`Participant::handle_timeout`] then) or `None` (the participant is closed and has nothing
//! left to send).
//!
//! # Allocation
//! Transmits and media events are carried in byte buffers recycled through a small pool: a
//! buffer lent by `poll_output` goes back to the pool on the next call. In steady state
//! (connected, media flowing, outputs drained) receiving, unprotecting, protecting and sending
//! a packet allocates nothing. What allocates: construction and the answer; the DTLS handshake
//! (the engine hands out its own `Vec`s); the first packet of a new SSRC (an SRTP stream and
//! its replay window); a datagram larger than every pooled buffer (the buffer grows once); and
//! the pool growing when outputs are left undrained.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::fingerprint::FingerprintError;
use secrelay_dtls::{
    Endpoint, EndpointConfig, Event as DtlsEvent, FailReason, Fingerprint, HashAlgorithm,
    LocalCertificate, Output as DtlsOutput, Role, Timers,
};
use secrelay_srtp::{Context, Error as SrtpError, Policy, Profile};
use secrelay_wire::rtp::{classify, PacketKind, RtpHeader};
use secrelay_wire::sdp::{write_answer, AnswerParams, Codec, MediaAnswer, MediaKind, Offer, Setup};

use crate::ice_lite::{Credentials, IceConfig, IceError, IceEvent, IceLite};

/// A codec the gateway forwards, identified independently of payload type numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CodecId {
    /// Opus, 48 kHz.
    Opus,
    /// G.711 µ-law, 8 kHz.
    Pcmu,
    /// G.711 A-law, 8 kHz.
    Pcma,
    /// VP8, 90 kHz.
    Vp8,
    /// H.264, 90 kHz (any profile: the first offered H.264 payload type of our preference is
    /// the one a receiver gets).
    H264,
}

impl CodecId {
    /// Every codec the gateway knows.
    pub const ALL: [CodecId; 5] = [
        CodecId::Opus,
        CodecId::Pcmu,
        CodecId::Pcma,
        CodecId::Vp8,
        CodecId::H264,
    ];

    /// The encoding name (as in `a=rtpmap`).
    pub fn name(self) -> &'static str {
        match self {
            CodecId::Opus => "opus",
            CodecId::Pcmu => "PCMU",
            CodecId::Pcma => "PCMA",
            CodecId::Vp8 => "VP8",
            CodecId::H264 => "H264",
        }
    }

    /// The RTP clock rate.
    pub fn clock_rate(self) -> u32 {
        match self {
            CodecId::Opus => 48_000,
            CodecId::Pcmu | CodecId::Pcma => 8_000,
            CodecId::Vp8 | CodecId::H264 => 90_000,
        }
    }

    /// Whether this is an audio codec (else video).
    pub fn is_audio(self) -> bool {
        matches!(self, CodecId::Opus | CodecId::Pcmu | CodecId::Pcma)
    }

    /// The codec an offered `a=rtpmap` names, if we know it.
    pub fn of(codec: &Codec) -> Option<CodecId> {
        CodecId::ALL
            .into_iter()
            .find(|c| codec.is(c.name(), c.clock_rate()))
    }
}

/// How a participant is set up.
#[derive(Debug, Clone)]
pub struct ParticipantConfig {
    /// ICE-lite timers.
    pub ice: IceConfig,
    /// Our host candidates, written into the answer.
    pub candidates: Vec<SocketAddr>,
    /// Audio codecs we accept, most preferred first.
    pub audio_codecs: Vec<CodecId>,
    /// Video codecs we accept, most preferred first.
    pub video_codecs: Vec<CodecId>,
    /// SRTP profiles we accept from DTLS-SRTP, most preferred first.
    pub srtp_profiles: Vec<Profile>,
    /// DTLS retransmission timers and handshake deadline.
    pub dtls_timers: Timers,
    /// SRTP replay window in packets.
    pub replay_window: usize,
    /// CNAME announced with our SSRCs.
    pub cname: String,
}

impl Default for ParticipantConfig {
    fn default() -> ParticipantConfig {
        ParticipantConfig {
            ice: IceConfig::default(),
            candidates: Vec::new(),
            audio_codecs: vec![CodecId::Opus, CodecId::Pcmu, CodecId::Pcma],
            video_codecs: vec![CodecId::Vp8, CodecId::H264],
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec(),
            dtls_timers: Timers::default(),
            replay_window: 1024,
            cname: "secrelay".into(),
        }
    }
}

/// Why a participant cannot be made from an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParticipantError {
    /// The offer says `a=setup:holdconn`: no DTLS role for us.
    NoDtlsRole,
    /// No offered section has a codec we accept.
    NoCommonCodec,
    /// The offer's fingerprint is unusable (its hash or length).
    Fingerprint(FingerprintError),
    /// Our certificate has no leaf.
    NoCertificate,
    /// The DTLS endpoint refused its configuration (the reason).
    Dtls(String),
    /// The SRTP context refused the keys (the reason).
    Srtp(String),
}

impl fmt::Display for ParticipantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParticipantError::NoDtlsRole => write!(f, "offer says a=setup:holdconn"),
            ParticipantError::NoCommonCodec => {
                write!(f, "offer has no codec the gateway accepts")
            }
            ParticipantError::Fingerprint(e) => write!(f, "offer fingerprint unusable: {e}"),
            ParticipantError::NoCertificate => write!(f, "our certificate chain is empty"),
            ParticipantError::Dtls(e) => write!(f, "DTLS endpoint configuration: {e}"),
            ParticipantError::Srtp(e) => write!(f, "SRTP context: {e}"),
        }
    }
}

impl std::error::Error for ParticipantError {}

/// One answered media section: what we agreed on.
#[derive(Debug, Clone)]
pub struct NegotiatedMedia {
    /// The section's mid.
    pub mid: String,
    /// Audio or video.
    pub kind: MediaKind,
    /// Codecs accepted with the offerer's payload types, our preference first.
    pub codecs: Vec<(CodecId, u8)>,
    /// Whether the participant sends on this section.
    pub peer_sends: bool,
    /// Whether the participant receives on this section.
    pub peer_receives: bool,
    /// The SSRC of what we send on this section (its receive slot, see [`crate::room`]),
    /// announced in the answer when the participant receives on it.
    pub our_ssrc: u32,
}

/// Why a participant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// No authenticated ICE check within the consent timeout.
    ConsentExpired,
    /// The DTLS handshake or association failed (the reason).
    DtlsFailed(FailReason),
    /// The peer's certificate does not match the offer's fingerprint.
    FingerprintMismatch,
    /// The peer (or we, through [`Participant::close`]) sent `close_notify`.
    CloseNotify,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::ConsentExpired => write!(f, "ICE consent expired"),
            CloseReason::DtlsFailed(r) => write!(f, "DTLS failed: {r}"),
            CloseReason::FingerprintMismatch => {
                write!(f, "peer certificate does not match its fingerprint")
            }
            CloseReason::CloseNotify => write!(f, "DTLS close_notify"),
        }
    }
}

/// Media received and unprotected.
#[derive(Debug, Clone, Copy)]
pub struct Media<'a> {
    /// The sender's SSRC.
    pub ssrc: u32,
    /// The payload type as sent.
    pub payload_type: u8,
    /// The codec that payload type was negotiated for, if any.
    pub codec: Option<CodecId>,
    /// The whole unprotected RTP packet (header and payload).
    pub rtp: &'a [u8],
}

/// Something the application must act on.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// ICE nominated this remote address: media and DTLS go there.
    IceSelected(SocketAddr),
    /// DTLS-SRTP connected: keys are in place.
    Connected {
        /// The negotiated SRTP profile.
        profile: Profile,
        /// From the first DTLS datagram (or our ClientHello) to the keys.
        handshake: Duration,
    },
    /// An unprotected RTP packet.
    Media(Media<'a>),
    /// An unprotected RTCP compound packet.
    Rtcp(&'a [u8]),
    /// The participant is finished.
    Closed(CloseReason),
}

/// What [`Participant::poll_output`] hands back.
#[derive(Debug, Clone, Copy)]
pub enum Output<'a> {
    /// Send `contents` to `destination`.
    Transmit {
        /// Where to.
        destination: SocketAddr,
        /// The datagram.
        contents: &'a [u8],
    },
    /// Something happened.
    Event(Event<'a>),
    /// Call [`Participant::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
}

/// Per-participant counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParticipantCounters {
    /// SRTP/SRTCP packets unprotected.
    pub packets_in: u64,
    /// Bytes of those packets, as received.
    pub bytes_in: u64,
    /// SRTP/SRTCP packets protected and queued.
    pub packets_out: u64,
    /// Bytes of those packets, as sent.
    pub bytes_out: u64,
    /// STUN datagrams received.
    pub stun_in: u64,
    /// STUN datagrams refused by the ICE agent.
    pub stun_rejected: u64,
    /// DTLS datagrams handed to the endpoint.
    pub dtls_in: u64,
    /// SRTP/SRTCP dropped: authentication tag wrong.
    pub auth_failures: u64,
    /// SRTP/SRTCP dropped: replayed or too old.
    pub replays: u64,
    /// SRTP/SRTCP dropped: malformed (too short, bad header).
    pub malformed: u64,
    /// Datagrams dropped: unknown kind, or an SRTP error of another kind.
    pub unknown: u64,
    /// DTLS or SRTP dropped because it came from an address ICE has not validated.
    pub unvalidated_source: u64,
    /// SRTP dropped because DTLS had not connected yet.
    pub before_keys: u64,
    /// Datagrams ignored because the participant was closed.
    pub after_close: u64,
    /// `send_rtp`/`send_rtcp` refused (not connected, malformed, SRTP error).
    pub send_refused: u64,
    /// DTLS handshake time, once connected.
    pub handshake_time: Option<Duration>,
}

/// Headroom kept after a packet for the SRTP tag (16 bytes for GCM, 10 for HMAC-SHA1) and the
/// SRTCP index.
const SRTP_HEADROOM: usize = 32;
/// Pooled buffer capacity: an Ethernet MTU plus headroom.
const BUFFER_CAPACITY: usize = 1500 + SRTP_HEADROOM;
/// Most buffers kept in the pool; more are freed.
const POOL_MAX: usize = 64;

#[derive(Debug)]
enum Pending {
    Transmit(SocketAddr, Vec<u8>),
    Media {
        ssrc: u32,
        payload_type: u8,
        codec: Option<CodecId>,
        buf: Vec<u8>,
    },
    Rtcp(Vec<u8>),
    IceSelected(SocketAddr),
    Connected(Profile, Duration),
    Closed(CloseReason),
}

struct Srtp {
    inbound: Context,
    outbound: Context,
}

/// One WebRTC participant. See the [module documentation](self) for the drive contract.
pub struct Participant {
    config: ParticipantConfig,
    ice: IceLite,
    role: Role,
    dtls: Option<Endpoint>,
    dtls_config: Option<EndpointConfig>,
    dtls_timeout: Option<Instant>,
    dtls_started: Option<Instant>,
    /// Where DTLS goes before ICE nominates: the last validated address that sent DTLS.
    dtls_peer: Option<SocketAddr>,
    srtp: Option<Srtp>,
    media: Vec<NegotiatedMedia>,
    answer: String,
    queue: VecDeque<Pending>,
    pool: Vec<Vec<u8>>,
    /// The buffer lent by the last `poll_output`, returned to the pool on the next.
    lent: Option<Vec<u8>>,
    closed: Option<CloseReason>,
    counters: ParticipantCounters,
}

impl fmt::Debug for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Participant")
            .field("role", &self.role)
            .field("selected", &self.ice.selected())
            .field("connected", &self.srtp.is_some())
            .field("closed", &self.closed)
            .field("counters", &self.counters)
            .finish()
    }
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source works");
    u64::from_be_bytes(b) >> 2
}

impl Participant {
    /// A participant for `offer`, created at `now` (the ICE consent clock starts).
    ///
    /// Our DTLS role follows the offer's `a=setup`: `actpass` or `active` make us the DTLS
    /// server (`passive`), `passive` makes us the client (`active`; the ClientHello leaves once
    /// ICE nominates a pair).
    pub fn new(
        offer: &Offer,
        certificate: LocalCertificate,
        config: ParticipantConfig,
        now: Instant,
    ) -> Result<Participant, ParticipantError> {
        let (role, our_setup) = match offer.setup {
            Setup::Actpass | Setup::Active => (Role::Server, Setup::Passive),
            Setup::Passive => (Role::Client, Setup::Active),
            Setup::Holdconn => return Err(ParticipantError::NoDtlsRole),
        };
        let algorithm: HashAlgorithm = offer
            .fingerprint
            .0
            .parse()
            .map_err(ParticipantError::Fingerprint)?;
        let peer_fp = Fingerprint::from_digest(algorithm, &offer.fingerprint.1)
            .map_err(ParticipantError::Fingerprint)?;
        let our_fp = certificate
            .fingerprint()
            .ok_or(ParticipantError::NoCertificate)?;

        let mut media = Vec::new();
        let mut answers = Vec::new();
        for m in &offer.media {
            let prefs: &[CodecId] = match m.kind {
                MediaKind::Audio => &config.audio_codecs,
                MediaKind::Video => &config.video_codecs,
                _ => &[],
            };
            let mut chosen: Vec<(CodecId, &Codec)> = Vec::new();
            for want in prefs {
                for c in &m.codecs {
                    if CodecId::of(c) == Some(*want) {
                        chosen.push((*want, c));
                    }
                }
            }
            let usable = m.port != 0 || offer.bundle.contains(&m.mid);
            let direction = (usable && !chosen.is_empty()).then(|| m.direction.reversed());
            let our_ssrc = random_u32().max(1);
            if direction.is_some() {
                media.push(NegotiatedMedia {
                    mid: m.mid.clone(),
                    kind: m.kind.clone(),
                    codecs: chosen.iter().map(|(id, c)| (*id, c.pt)).collect(),
                    peer_sends: m.direction.sends(),
                    peer_receives: m.direction.receives(),
                    our_ssrc,
                });
            }
            answers.push(MediaAnswer {
                mid: m.mid.clone(),
                kind: m.kind.clone(),
                direction,
                codecs: if chosen.is_empty() {
                    m.codecs.iter().take(1).cloned().collect()
                } else {
                    chosen.iter().map(|(_, c)| (*c).clone()).collect()
                },
                // The section is a receive slot (see `room`): the SSRC announced here is the
                // one its stream is relayed under, so a browser binds the section's track to
                // media that really comes (announcing an SSRC that never carries media leaves
                // the track without frames).
                ssrc: Some((our_ssrc, "secrelay".into())),
            });
        }
        if media.is_empty() {
            return Err(ParticipantError::NoCommonCodec);
        }

        let local = Credentials::random();
        let answer = write_answer(&AnswerParams {
            session_id: random_u64(),
            ice_ufrag: local.ufrag.clone(),
            ice_pwd: local.pwd.clone(),
            fingerprint: our_fp.to_string(),
            setup: our_setup,
            candidates: config.candidates.clone(),
            media: answers,
        });
        let ice = IceLite::new(
            config.ice.clone(),
            local,
            Credentials {
                ufrag: offer.ice_ufrag.clone(),
                pwd: offer.ice_pwd.clone(),
            },
            now,
        );
        let mut dtls_config = EndpointConfig::new(role, certificate, peer_fp);
        dtls_config.srtp_profiles = config.srtp_profiles.clone();
        dtls_config.timers = config.dtls_timers;
        let mut p = Participant {
            config,
            ice,
            role,
            dtls: None,
            dtls_config: Some(dtls_config),
            dtls_timeout: None,
            dtls_started: None,
            dtls_peer: None,
            srtp: None,
            media,
            answer,
            queue: VecDeque::new(),
            pool: Vec::new(),
            lent: None,
            closed: None,
            counters: ParticipantCounters::default(),
        };
        if role == Role::Server {
            // A server waits for the ClientHello; the clock of its handshake starts then.
            p.start_dtls(now)?;
        }
        Ok(p)
    }

    fn start_dtls(&mut self, now: Instant) -> Result<(), ParticipantError> {
        if let Some(cfg) = self.dtls_config.take() {
            let ep = Endpoint::new(cfg, now).map_err(|e| ParticipantError::Dtls(e.to_string()))?;
            self.dtls = Some(ep);
            if self.role == Role::Client {
                self.dtls_started = Some(now);
            }
            self.drain_dtls(now);
        }
        Ok(())
    }

    /// The answer SDP to send back to the offerer.
    pub fn answer_sdp(&self) -> &str {
        &self.answer
    }

    /// Our ICE credentials (as in the answer).
    pub fn ice_credentials(&self) -> &Credentials {
        self.ice.local()
    }

    /// The accepted media sections.
    pub fn media(&self) -> &[NegotiatedMedia] {
        &self.media
    }

    /// Our DTLS role.
    pub fn dtls_role(&self) -> Role {
        self.role
    }

    /// The payload type this participant negotiated for `codec` (our most preferred one if it
    /// offered several).
    pub fn payload_type_for(&self, codec: CodecId) -> Option<u8> {
        self.media
            .iter()
            .flat_map(|m| m.codecs.iter())
            .find(|(c, _)| *c == codec)
            .map(|(_, pt)| *pt)
    }

    /// The codec negotiated for payload type `pt`.
    pub fn codec_for(&self, pt: u8) -> Option<CodecId> {
        self.media
            .iter()
            .flat_map(|m| m.codecs.iter())
            .find(|(_, p)| *p == pt)
            .map(|(c, _)| *c)
    }

    /// Whether the participant receives media of this codec's kind (a recvonly or sendrecv
    /// section of that kind with the codec).
    pub fn receives(&self, codec: CodecId) -> bool {
        self.media
            .iter()
            .any(|m| m.peer_receives && m.codecs.iter().any(|(c, _)| *c == codec))
    }

    /// The ICE-selected remote address.
    pub fn selected(&self) -> Option<SocketAddr> {
        self.ice.selected()
    }

    /// Whether `from` passed an authenticated ICE check (DTLS and SRTP are accepted from it).
    pub fn ice_validated(&self, from: SocketAddr) -> bool {
        self.ice.is_validated(from)
    }

    /// ICE restart (RFC 8445 §9): the peer's new credentials in, our new ones out (to write
    /// into the answer fragment). The selected pair and the DTLS association stay; consent
    /// must be renewed with the new credentials.
    pub fn restart_ice(&mut self, remote: Credentials, now: Instant) -> Credentials {
        let local = Credentials::random();
        self.ice.restart(local.clone(), remote, now);
        local
    }

    /// Whether DTLS-SRTP keys are in place and the participant is not closed.
    pub fn is_connected(&self) -> bool {
        self.srtp.is_some() && self.closed.is_none()
    }

    /// Why the participant ended, once it has.
    pub fn closed(&self) -> Option<CloseReason> {
        self.closed
    }

    /// The counters.
    pub fn counters(&self) -> &ParticipantCounters {
        &self.counters
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        let mut b = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_CAPACITY));
        b.clear();
        b
    }

    fn recycle(&mut self, b: Vec<u8>) {
        if self.pool.len() < POOL_MAX && b.capacity() >= BUFFER_CAPACITY {
            self.pool.push(b);
        }
    }

    /// Handles one datagram from `from`, received at `now`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.closed.is_some() {
            self.counters.after_close += 1;
            return;
        }
        match classify(datagram) {
            PacketKind::Stun => self.handle_stun(now, from, datagram),
            PacketKind::Dtls => {
                if !self.ice.is_validated(from) {
                    self.counters.unvalidated_source += 1;
                    return;
                }
                let Some(ep) = self.dtls.as_mut() else {
                    // A client before nomination: nothing to say to DTLS yet.
                    self.counters.unknown += 1;
                    return;
                };
                self.counters.dtls_in += 1;
                if self.dtls_started.is_none() {
                    self.dtls_started = Some(now);
                }
                self.dtls_peer = Some(from);
                ep.handle_datagram(now, datagram);
                self.drain_dtls(now);
            }
            kind @ (PacketKind::Rtp | PacketKind::Rtcp) => {
                self.handle_srtp(from, datagram, kind == PacketKind::Rtcp)
            }
            PacketKind::Other => self.counters.unknown += 1,
        }
    }

    fn handle_stun(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.counters.stun_in += 1;
        let mut out = self.take_buffer();
        out.resize(512, 0);
        match self.ice.handle_stun(now, from, datagram, &mut out) {
            Ok(outcome) => {
                out.truncate(outcome.response_len);
                self.queue.push_back(Pending::Transmit(from, out));
                if let Some(IceEvent::Selected(addr)) = outcome.event {
                    self.queue.push_back(Pending::IceSelected(addr));
                    if self.role == Role::Client {
                        // An engine refusing our own configuration is our bug, reported so.
                        if self.start_dtls(now).is_err() {
                            self.close_with(CloseReason::DtlsFailed(FailReason::Internal));
                        }
                    } else {
                        self.drain_dtls(now);
                    }
                }
            }
            Err(IceError::Unauthenticated(Some(n)) | IceError::RoleConflict(n)) => {
                self.counters.stun_rejected += 1;
                out.truncate(n);
                self.queue.push_back(Pending::Transmit(from, out));
            }
            Err(_) => {
                self.counters.stun_rejected += 1;
                self.recycle(out);
            }
        }
    }

    fn handle_srtp(&mut self, from: SocketAddr, datagram: &[u8], rtcp: bool) {
        if !self.ice.is_validated(from) {
            self.counters.unvalidated_source += 1;
            return;
        }
        if self.srtp.is_none() {
            self.counters.before_keys += 1;
            return;
        }
        let mut buf = self.take_buffer();
        buf.extend_from_slice(datagram);
        let srtp = self.srtp.as_mut().expect("checked just above");
        let len = buf.len();
        let result = if rtcp {
            srtp.inbound.unprotect_rtcp(&mut buf, len)
        } else {
            srtp.inbound.unprotect_rtp(&mut buf, len)
        };
        self.finish_unprotect(datagram.len(), rtcp, result, buf);
    }

    /// Whether an RTP datagram from `from` would be unprotected now (open, keyed, the source
    /// validated by ICE): the worker's batch path takes only these, and hands the result to
    /// [`Participant::accept_unprotected_rtp`].
    pub(crate) fn takes_srtp_from(&self, from: SocketAddr) -> bool {
        self.closed.is_none() && self.srtp.is_some() && self.ice.is_validated(from)
    }

    /// The context that unprotects what the peer sends (once keyed).
    pub(crate) fn inbound_context(&mut self) -> Option<&mut Context> {
        self.srtp.as_mut().map(|s| &mut s.inbound)
    }

    /// The context that protects what we send the peer (once keyed).
    pub(crate) fn outbound_context(&mut self) -> Option<&mut Context> {
        self.srtp.as_mut().map(|s| &mut s.outbound)
    }

    /// An RTP datagram of `datagram_len` bytes that the batch path unprotected (`result`, the
    /// plaintext in `buf[..n]`): counted and queued exactly as [`Participant::handle_datagram`]
    /// does with its own unprotect. The participant keeps `buf` (no copy) and leaves one of its
    /// spare buffers in its place, so both pools stay as they were.
    pub(crate) fn accept_unprotected_rtp(
        &mut self,
        datagram_len: usize,
        result: Result<usize, SrtpError>,
        buf: &mut Vec<u8>,
    ) {
        if self.closed.is_some() {
            // Closed while the batch ran (an earlier datagram of the same batch closed it).
            self.counters.after_close += 1;
            return;
        }
        let spare = self.take_buffer();
        let buf = std::mem::replace(buf, spare);
        self.finish_unprotect(datagram_len, false, result, buf);
    }

    /// What follows an unprotect, wherever it ran: counters, and the media or RTCP queued.
    fn finish_unprotect(
        &mut self,
        datagram_len: usize,
        rtcp: bool,
        result: Result<usize, SrtpError>,
        mut buf: Vec<u8>,
    ) {
        match result {
            Ok(n) => {
                buf.truncate(n);
                self.counters.packets_in += 1;
                self.counters.bytes_in += datagram_len as u64;
                if rtcp {
                    self.queue.push_back(Pending::Rtcp(buf));
                    return;
                }
                match RtpHeader::parse(&buf) {
                    Ok(h) => {
                        let (ssrc, payload_type) = (h.ssrc(), h.payload_type());
                        let codec = self.codec_for(payload_type);
                        self.queue.push_back(Pending::Media {
                            ssrc,
                            payload_type,
                            codec,
                            buf,
                        });
                    }
                    Err(_) => {
                        // SRTP accepted it, so the header parsed there; keep the count honest.
                        self.counters.malformed += 1;
                        self.recycle(buf);
                    }
                }
            }
            Err(e) => {
                match e {
                    SrtpError::AuthFailed => self.counters.auth_failures += 1,
                    SrtpError::ReplayDuplicate | SrtpError::ReplayOld => self.counters.replays += 1,
                    SrtpError::TooShort | SrtpError::BadHeader => self.counters.malformed += 1,
                    _ => self.counters.unknown += 1,
                }
                self.recycle(buf);
            }
        }
    }

    fn dtls_destination(&self) -> Option<SocketAddr> {
        self.ice.selected().or(self.dtls_peer)
    }

    fn drain_dtls(&mut self, now: Instant) {
        let Some(ep) = self.dtls.as_mut() else { return };
        let mut transmits = Vec::new();
        let mut events = Vec::new();
        self.dtls_timeout = None;
        while let Some(o) = ep.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => transmits.push(d),
                DtlsOutput::Timeout(t) => {
                    self.dtls_timeout = Some(t);
                    break;
                }
                DtlsOutput::Event(e) => events.push(e),
            }
        }
        if let Some(dest) = self.dtls_destination() {
            for d in transmits {
                self.queue.push_back(Pending::Transmit(dest, d));
            }
        }
        // With no destination yet (a client before nomination cannot have one: it starts on
        // nomination), the engine retransmits on its timer.
        for e in events {
            match e {
                DtlsEvent::Connected { profile, keys, .. } => {
                    if let Err(reason) = self.install_keys(profile, keys) {
                        self.close_with(reason);
                        return;
                    }
                    let handshake = now.saturating_duration_since(self.dtls_started.unwrap_or(now));
                    self.counters.handshake_time = Some(handshake);
                    self.queue.push_back(Pending::Connected(profile, handshake));
                }
                DtlsEvent::Failed(FailReason::FingerprintMismatch) => {
                    self.close_with(CloseReason::FingerprintMismatch)
                }
                DtlsEvent::Failed(r) => self.close_with(CloseReason::DtlsFailed(r)),
                DtlsEvent::Closed => self.close_with(CloseReason::CloseNotify),
                _ => {}
            }
        }
    }

    fn install_keys(
        &mut self,
        _profile: Profile,
        keys: secrelay_dtls::SrtpKeys,
    ) -> Result<(), CloseReason> {
        let window = self.config.replay_window;
        let make = |p: Policy| Context::new(p.replay_window(window));
        let inbound = make(Policy::new(keys.remote.clone()).any_inbound());
        let outbound = make(Policy::new(keys.local.clone()).any_outbound());
        match (inbound, outbound) {
            (Ok(inbound), Ok(outbound)) => {
                self.srtp = Some(Srtp { inbound, outbound });
                Ok(())
            }
            _ => Err(CloseReason::DtlsFailed(FailReason::Internal)),
        }
    }

    fn close_with(&mut self, reason: CloseReason) {
        if self.closed.is_none() {
            self.closed = Some(reason);
            self.srtp = None;
            self.queue.push_back(Pending::Closed(reason));
        }
    }

    /// Ends the association: sends `close_notify` and reports [`CloseReason::CloseNotify`].
    pub fn close(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if let Some(ep) = self.dtls.as_mut() {
            ep.close(now);
            self.drain_dtls(now);
        }
        self.close_with(CloseReason::CloseNotify);
    }

    /// Advances time: ICE consent and DTLS retransmissions.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if let Some(IceEvent::ConsentExpired) = self.ice.handle_timeout(now) {
            self.close_with(CloseReason::ConsentExpired);
            return;
        }
        if self.dtls_timeout.is_some_and(|t| now >= t) {
            if let Some(ep) = self.dtls.as_mut() {
                ep.handle_timeout(now);
            }
            self.drain_dtls(now);
        }
    }

    /// When [`Participant::handle_timeout`] must next be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        match (self.ice.poll_timeout(), self.dtls_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Protects an RTP packet with the outbound context and queues it to the selected
    /// address. Refused (and counted) before DTLS connects, without a selected pair, or when
    /// the packet is malformed.
    pub fn send_rtp(&mut self, now: Instant, rtp: &[u8]) -> Result<(), SendError> {
        self.send(now, rtp, false)
    }

    /// Protects an RTCP compound packet and queues it to the selected address.
    pub fn send_rtcp(&mut self, now: Instant, rtcp: &[u8]) -> Result<(), SendError> {
        self.send(now, rtcp, true)
    }

    fn send(&mut self, _now: Instant, packet: &[u8], rtcp: bool) -> Result<(), SendError> {
        let r = self.try_send(packet, rtcp);
        if r.is_err() {
            self.counters.send_refused += 1;
        }
        r
    }

    /// Where protected packets for the peer go, or why none can be sent now.
    pub(crate) fn send_target(&self) -> Result<SocketAddr, SendError> {
        if self.closed.is_some() {
            return Err(SendError::Closed);
        }
        match self.ice.selected() {
            Some(dest) if self.srtp.is_some() => Ok(dest),
            _ => Err(SendError::NotConnected),
        }
    }

    /// The batch path's [`Participant::send_rtp`], first half: where the protected copy will
    /// go, or why it cannot be sent (counted as refused, as `send_rtp` counts it).
    pub(crate) fn rtp_destination(&mut self) -> Result<SocketAddr, SendError> {
        let r = self.send_target();
        if r.is_err() {
            self.counters.send_refused += 1;
        }
        r
    }

    /// The batch path's second half: the outbound context's result for a copy, counted as
    /// `send_rtp` counts its own.
    pub(crate) fn count_protected(&mut self, result: &Result<usize, SrtpError>) {
        match result {
            Ok(n) => {
                self.counters.packets_out += 1;
                self.counters.bytes_out += *n as u64;
            }
            Err(_) => self.counters.send_refused += 1,
        }
    }

    fn try_send(&mut self, packet: &[u8], rtcp: bool) -> Result<(), SendError> {
        let dest = self.send_target()?;
        let mut buf = self.take_buffer();
        buf.extend_from_slice(packet);
        buf.resize(packet.len() + SRTP_HEADROOM, 0);
        let srtp = self.srtp.as_mut().expect("checked just above");
        let r = if rtcp {
            srtp.outbound.protect_rtcp(&mut buf, packet.len())
        } else {
            srtp.outbound.protect_rtp(&mut buf, packet.len())
        };
        match r {
            Ok(n) => {
                buf.truncate(n);
                self.counters.packets_out += 1;
                self.counters.bytes_out += n as u64;
                self.queue.push_back(Pending::Transmit(dest, buf));
                Ok(())
            }
            Err(e) => {
                self.recycle(buf);
                Err(SendError::Srtp(e))
            }
        }
    }

    /// Whether outputs other than the closing timeout are queued.
    pub fn has_output(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether the next queued output is a media event.
    pub(crate) fn next_is_media(&self) -> bool {
        matches!(self.queue.front(), Some(Pending::Media { .. }))
    }

    /// The next output: queued transmits and events in order, then [`Output::Timeout`] (which
    /// ends a drain), or `None` once closed with nothing left. Borrowed bytes stay valid until
    /// the next call.
    pub fn poll_output(&mut self) -> Option<Output<'_>> {
        if let Some(b) = self.lent.take() {
            self.recycle(b);
        }
        let Some(p) = self.queue.pop_front() else {
            return self.poll_timeout().map(Output::Timeout);
        };
        Some(match p {
            Pending::Transmit(destination, buf) => {
                let contents = self.lent.insert(buf);
                Output::Transmit {
                    destination,
                    contents,
                }
            }
            Pending::Media {
                ssrc,
                payload_type,
                codec,
                buf,
            } => {
                let rtp = self.lent.insert(buf);
                Output::Event(Event::Media(Media {
                    ssrc,
                    payload_type,
                    codec,
                    rtp,
                }))
            }
            Pending::Rtcp(buf) => Output::Event(Event::Rtcp(self.lent.insert(buf))),
            Pending::IceSelected(a) => Output::Event(Event::IceSelected(a)),
            Pending::Connected(profile, handshake) => {
                Output::Event(Event::Connected { profile, handshake })
            }
            Pending::Closed(r) => Output::Event(Event::Closed(r)),
        })
    }
}

/// Why [`Participant::send_rtp`] refused a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// No selected ICE pair or no SRTP keys yet.
    NotConnected,
    /// The participant is closed.
    Closed,
    /// SRTP refused the packet (malformed, key exhausted, ...).
    Srtp(SrtpError),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::NotConnected => write!(f, "participant not connected yet"),
            SendError::Closed => write!(f, "participant closed"),
            SendError::Srtp(e) => write!(f, "SRTP: {e}"),
        }
    }
}

impl std::error::Error for SendError {}
