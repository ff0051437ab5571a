//! A telephony leg, sans-IO: plain RTP (`RTP/AVP[F]`) or SDES-SRTP (`RTP/SAVP[F]`, keys in
//! `a=crypto`, RFC 4568) on local ports of its own, as SIP phones, PBXs and SIP proxies use them.
//!
//! A [`RtpLeg`] is made from a parsed offer ([`RtpDescription`]), the local ports the worker
//! bound for it ([`Ports`]: RTP on an even port, RTCP on the next one unless `a=rtcp-mux` is
//! negotiated) and a [`RtpConfig`]. It takes the first audio section whose transport it
//! serves (others are answered with port 0), chooses codecs by our preference and, for SDES,
//! the first offered crypto line whose suite we serve in our preference order, makes a fresh
//! key of ours for what we send (so no two legs share keys, even when their offers did: K1/K2)
//! and writes the answer.
//!
//! # Symmetric RTP and latching
//! Media goes back to where the leg's media comes from (symmetric RTP), guarded against
//! hijacking:
//! * an SDES leg accepts SRTP from any source, and latches to a source only once a packet from
//!   it has authenticated (and re-latches when authenticated packets come from a new address:
//!   a NAT rebinding); forged or replayed packets from elsewhere are dropped by SRTP and move
//!   nothing;
//! * a plain leg cannot tell a forgery from the real thing, so it takes media only from the
//!   address the offer signalled ([`Latch::Signalled`], the default) or, configured for
//!   phones behind NAT ([`Latch::FirstPackets`]), from the first source seen within its first
//!   packets, and from nowhere else after that. Everything else is dropped and counted
//!   ([`DropReason::UnlatchedSource`]). A plain leg is strict about its source once latched,
//!   whatever the configuration: it cannot tell its phone's packets from another's;
//! * with [`RtpConfig::strict_source`] an SDES leg is strict too: once latched, packets from
//!   any other source are dropped ([`DropReason::UnlatchedSource`]) before they are
//!   unprotected, authentic or not (rtpengine's `strict-source`); without it the leg follows its
//!   phone to a new address, as rtpengine's `media-handover` does.
//!
//! # A port's previous peers
//! Local ports are re-used once their leg ends. A leg made on a re-used pair is given the
//! remote addresses the pair's last leg latched to or sent to ([`Quarantine`]), and drops what
//! they send until the quarantine ends ([`DropReason::StaleSource`]), before any latching
//! (so they count towards no first packets), unless one is exactly the address this leg's own
//! SDP signals (the same phone calling again).
//!
//! Until a source is latched, copies go to the signalled address (none while the offer holds
//! with `0.0.0.0`). RTCP latches the same way, on its own port.
//!
//! # Renegotiation
//! A leg in a call takes a new offer from its phone ([`RtpLeg::take_offer`]: a re-INVITE: new
//! address, codecs, direction or keys) and makes new offers of ours ([`RtpLeg::make_offer`],
//! answered through [`RtpLeg::accept_answer`]) while media flows. A key that did not change
//! keeps its SRTP context (its replay window and rollover counter go on); a new key of the
//! phone's gets a new inbound context. Our key stays while the suite does (a fresh context
//! for a key already used would reuse keystream), and is new with a new suite.
//!
//! # Session expiry
//! A telephony leg has no consent checks: it ends ([`CloseReason::MediaTimeout`]) when no
//! media or RTCP has been admitted for [`RtpConfig::media_timeout`], as rtpengine's sessions
//! do.

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::sdes::Crypto;
use secrelay_wire::sdp::{Direction, MediaKind, Setup};
use zeroize::{Zeroize, Zeroizing};

use secrelay_wire::sdp::Codec;
use secrelay_wire::sdp_rtp::{
    host_candidate, write_rtp_sdp, IceAnswer, IceCredentials, RtcpAnswer, RtpDescription,
    RtpSection, RtpSectionAnswer,
};
use secrelay_wire::stun::{Class as StunClass, Message};

use super::rtp_dtls::{DtlsKeying, DtlsMarks, RtpDtls, Transmit};
use super::{
    CloseReason, CodecId, LegEvent, LegOutput, NegotiatedMedia, SectionFeedback, TransmitKind, Via,
};
use crate::counters::{Counters, DropReason};
use crate::ice_lite::{Credentials, IceConfig, IceError, IceEvent, IceLite};

/// Where a plain leg takes media from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latch {
    /// Only the address the offer signalled (the safe default).
    Signalled,
    /// The first source seen within the leg's first `n` packets (phones behind NAT send from
    /// another address than they signal), then only that one.
    FirstPackets(u32),
}

/// What one of a telephony leg's local ports takes datagrams from, as far as a filter that sees
/// only the source address can tell ([`RtpLeg::sources`]): never less than [`RtpLeg::admit`]
/// takes, so that such a filter in front of the port drops nothing the leg would have taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sources {
    /// Any source: the leg authenticates what it takes (SDES, following its phone to a new
    /// address) or latches to a first source it has not seen yet.
    Any,
    /// These sources only (none: the port takes nothing now).
    Only(Vec<SocketAddr>),
}

impl Sources {
    fn union(self, other: Sources) -> Sources {
        match (self, other) {
            (Sources::Only(mut a), Sources::Only(b)) => {
                for s in b {
                    if !a.contains(&s) {
                        a.push(s);
                    }
                }
                Sources::Only(a)
            }
            _ => Sources::Any,
        }
    }
}

/// The remote addresses the legs before a leg used its local ports with, and until when the
/// leg drops what they send ([`DropReason::StaleSource`]). See the
/// [module documentation](self).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quarantine {
    /// The addresses.
    pub sources: Vec<SocketAddr>,
    /// Until when they are refused (`None`: nothing is).
    pub until: Option<Instant>,
}

impl Quarantine {
    /// Whether `from` is refused at `now`.
    pub fn holds(&self, from: SocketAddr, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t) && self.sources.contains(&from)
    }
}

/// Most remote addresses a leg remembers having latched to (for [`RtpLeg::peers`]).
const MAX_PEERS: usize = 8;

/// How telephony legs are set up.
#[derive(Debug, Clone)]
pub struct RtpConfig {
    /// The address our answers announce (`c=`).
    pub announce: IpAddr,
    /// Audio codecs we accept, most preferred first.
    pub audio_codecs: Vec<CodecId>,
    /// SDES suites we accept, most preferred first.
    pub sdes_suites: Vec<Profile>,
    /// Where plain legs take media from.
    pub latch: Latch,
    /// No media or RTCP admitted for this long ends the leg.
    pub media_timeout: Duration,
    /// SRTP replay window in packets.
    pub replay_window: usize,
    /// SDES legs too keep to the source they latched to (see the
    /// [module documentation](self)); plain legs always do.
    pub strict_source: bool,
    /// Relay every offered format, known or not, in the offer's order, on a section of any
    /// media type (the ng protocol's legs, as rtpengine relays): transcoding still needs a
    /// codec the gateway has. Otherwise only the first audio section, and only
    /// `audio_codecs`, in our preference.
    pub passthrough: bool,
    /// Answer an offer of SDES on `RTP/AVP` (opportunistic SRTP, RFC 8643) with SDES, on
    /// `RTP/AVP`; otherwise such an offer is answered as plain RTP, its crypto lines ignored.
    pub osrtp: bool,
    /// DTMF crosses between this leg and a member whose telephone-events it lacks (or which
    /// lacks its), as tones one way and telephone-events heard in the audio the other, even
    /// where the audio itself needs no transcoding (`crate::transcode::Dtmf`): rtpengine's
    /// `transcode: telephone-event`. Without it, DTMF crosses so only where the audio is
    /// transcoded anyway (tones), and events go nowhere a receiver did not take them.
    pub dtmf_transcode: bool,
    /// Comfort noise (RFC 3389) crosses between this leg and a member whose comfort noise it
    /// lacks (or which lacks its), as noise in the audio one way and comfort-noise packets in
    /// place of silent audio the other (`crate::transcode::Cn`), even where the audio itself
    /// needs no transcoding: rtpengine's `transcode`, `accept` or `consume` of `CN`. Without
    /// it, comfort noise crosses so only where the audio is transcoded anyway.
    pub cn_transcode: bool,
    /// The AMR mode transcoded audio is sent to this leg's phone in, at most (rtpengine's
    /// `transcode: AMR-WB/16000/1/23850` names a bitrate): the phone's `mode-set` still
    /// bounds it ([`crate::leg::choose_amr_mode`]). `None`: the encoder's default.
    pub amr_mode: Option<u8>,
    /// DTLS-SRTP for a leg keyed by it (our certificate, role choice and fingerprint hash);
    /// `None`: a section keyed by DTLS is not served.
    pub dtls: Option<RtpDtls>,
}

/// How one telephony leg differs from the gateway's telephony defaults ([`RtpConfig`]): the
/// ng protocol's legs relay every format, and take the SDES suites the call's flags leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpLegOptions {
    /// [`RtpConfig::passthrough`].
    pub passthrough: bool,
    /// The media type of the section a leg offers (audio by default).
    pub kind: MediaKind,
    /// The SDES suites the leg takes, most preferred first, instead of the configured ones.
    pub sdes_suites: Option<Vec<Profile>>,
    /// The tags of the crypto lines a leg offers, one per suite of its offer (empty: 1, 2,
    /// …): rtpengine keeps the tags of the suites the other side offered.
    pub sdes_tags: Vec<u32>,
    /// The local address its ports are bound on (a media interface's), instead of the
    /// gateway's UDP address.
    pub bind: Option<IpAddr>,
    /// The address its SDP announces (that media interface's advertised one), instead of
    /// [`RtpConfig::announce`].
    pub announce: Option<IpAddr>,
    /// The exact address its RTP socket is bound on (RTCP on the next port), instead of a
    /// pair from the port range: a call taken over from a node that died keeps its ports.
    pub at: Option<SocketAddr>,
    /// The remote addresses the leg refuses at first: its ports' previous peers, as the
    /// server's port pool remembers them (filled in by the worker that binds the ports).
    pub quarantine: Quarantine,
    /// For a leg made again (a call taken over from a node that died): the keys and SRTP
    /// state its phone already has, taken as the leg is made, before any media.
    pub resume: Option<Resume>,
    /// Whether the leg does ICE with its phone.
    pub ice: IceMode,
    /// [`RtpConfig::osrtp`].
    pub osrtp: bool,
    /// [`RtpConfig::dtmf_transcode`].
    pub dtmf_transcode: bool,
    /// [`RtpConfig::cn_transcode`].
    pub cn_transcode: bool,
    /// [`RtpConfig::amr_mode`].
    pub amr_mode: Option<u8>,
    /// Key the leg by DTLS-SRTP, so (its offer's transport keeps its name: `RTP/SAVP` or
    /// `UDP/TLS/RTP/SAVP`); the shard adds its certificate ([`RtpConfig::dtls`]).
    pub dtls: Option<DtlsChoice>,
}

/// How a telephony leg keyed by DTLS-SRTP differs from the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DtlsChoice {
    /// [`RtpDtls::passive`].
    pub passive: bool,
    /// [`RtpDtls::hash`].
    pub hash: secrelay_dtls::HashAlgorithm,
}

/// Whether a telephony leg does ICE with its phone: as an ICE-lite agent (RFC 8445 §2.5), it
/// puts `a=ice-lite`, its credentials and host candidates (its RTP port, and its RTCP port
/// unless muxed) in its SDP, answers the phone's checks on those ports, and sends media to the
/// address the phone nominates. A phone that does not do ICE ignores the lines and uses `c=`
/// and `m=` as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IceMode {
    /// When the phone's SDP has ICE credentials (the answer to an ICE offer; never in an
    /// offer of ours).
    #[default]
    Auto,
    /// Always (rtpengine's `ICE: force`).
    Force,
    /// Never (`ICE: remove`).
    Off,
}

/// What a leg made again for a call taken over from another node takes before any media:
/// our SDP's crypto lines as the other node wrote them ([`RtpLeg::restore_keys`]) and where
/// its SRTP streams stood ([`RtpLeg::resume_srtp`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Resume {
    /// Our crypto lines (`a=crypto` values, keys included).
    pub crypto: Vec<Zeroizing<String>>,
    /// Where its streams stood.
    pub srtp: Vec<SrtpMark>,
    /// Its ICE, when it did ICE with its phone ([`RtpLeg::resume_ice`]).
    pub ice: Option<IceMarks>,
    /// Its DTLS-SRTP keys, when its handshakes had connected ([`RtpLeg::resume_dtls`]: taken
    /// once the replayed answer gave the leg its role, not as it is made).
    pub dtls: Option<DtlsMarks>,
}

/// What a node taking a leg over needs of it besides its keys ([`RtpLeg::marks`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegMarks {
    /// Where its SRTP streams stand.
    pub srtp: Vec<SrtpMark>,
    /// Where its ICE stands, when it does ICE.
    pub ice: Option<IceMarks>,
    /// A WebRTC leg's DTLS-SRTP keys and what its peer knows of our SDP, once connected.
    pub webrtc: Option<super::webrtc::WebRtcMarks>,
    /// A telephony leg's DTLS-SRTP keys, once its handshakes connected.
    pub dtls: Option<DtlsMarks>,
}

impl LegMarks {
    /// Whether there is nothing to keep (a plain leg without ICE).
    pub fn is_empty(&self) -> bool {
        self.srtp.is_empty() && self.ice.is_none() && self.webrtc.is_none() && self.dtls.is_none()
    }
}

/// Where a leg's ICE stands, for a node taking the leg over: our credentials (which the phone
/// holds), the phone's, and the addresses the phone nominated for RTP and RTCP. Debug does not
/// print the passwords.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IceMarks {
    /// Our `a=ice-ufrag`.
    pub ufrag: String,
    /// Our `a=ice-pwd` (zeroized when dropped).
    pub pwd: String,
    /// The phone's credentials, once known.
    pub remote: Option<(String, String)>,
    /// Where RTP goes (the phone's nomination, or its first packets'), if anywhere yet.
    pub rtp: Option<SocketAddr>,
    /// Where RTCP goes, likewise.
    pub rtcp: Option<SocketAddr>,
}

impl IceMarks {
    /// Ours and the peer's credentials, as an ICE agent takes them.
    pub(crate) fn credentials(&self) -> (Credentials, Option<Credentials>) {
        let local = Credentials {
            ufrag: self.ufrag.clone(),
            pwd: self.pwd.clone(),
        };
        let remote = self.remote.as_ref().map(|(ufrag, pwd)| Credentials {
            ufrag: ufrag.clone(),
            pwd: pwd.clone(),
        });
        (local, remote)
    }
}

impl Drop for IceMarks {
    fn drop(&mut self) {
        self.pwd.zeroize();
        if let Some((_, pwd)) = &mut self.remote {
            pwd.zeroize();
        }
    }
}

impl fmt::Debug for IceMarks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IceMarks")
            .field("ufrag", &self.ufrag)
            .field("remote", &self.remote.as_ref().map(|(u, _)| u))
            .field("rtp", &self.rtp)
            .field("rtcp", &self.rtcp)
            .finish_non_exhaustive()
    }
}

/// Counts what it holds: never a key.
impl fmt::Debug for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resume")
            .field("crypto_lines", &self.crypto.len())
            .field("srtp", &self.srtp)
            .field("dtls", &self.dtls)
            .finish()
    }
}

impl Default for RtpLegOptions {
    fn default() -> RtpLegOptions {
        RtpLegOptions {
            passthrough: false,
            kind: MediaKind::Audio,
            sdes_suites: None,
            sdes_tags: Vec::new(),
            bind: None,
            announce: None,
            at: None,
            quarantine: Quarantine::default(),
            resume: None,
            ice: IceMode::Auto,
            osrtp: false,
            dtmf_transcode: false,
            cn_transcode: false,
            amr_mode: None,
            dtls: None,
        }
    }
}

impl RtpLegOptions {
    /// A leg just made, as these options finish it: its ports' quarantine, and what it
    /// resumes (before any media reaches it).
    pub fn finish(&self, leg: RtpLeg) -> Result<RtpLeg, RtpLegError> {
        let mut leg = leg.with_quarantine(self.quarantine.clone());
        let ice = match self.ice {
            IceMode::Auto => leg.peer_ice.is_some(),
            IceMode::Force => true,
            IceMode::Off => false,
        };
        if ice {
            leg.start_ice();
        }
        if let Some(r) = &self.resume {
            if r.dtls.is_some() {
                leg.expect_dtls_resume();
            }
            leg.restore_keys(&r.crypto)?;
            leg.resume_srtp(&r.srtp)?;
            if let Some(ice) = &r.ice {
                leg.resume_ice(ice);
            }
        }
        Ok(leg)
    }

    /// `config` as this leg has it.
    pub fn apply(&self, mut config: RtpConfig) -> RtpConfig {
        config.passthrough = self.passthrough;
        config.osrtp = self.osrtp;
        config.dtmf_transcode = self.dtmf_transcode;
        config.cn_transcode = self.cn_transcode;
        config.amr_mode = self.amr_mode;
        if let Some(s) = &self.sdes_suites {
            config.sdes_suites = s.clone();
        }
        if let Some(a) = self.announce {
            config.announce = a;
        }
        config
    }
}

impl Default for RtpConfig {
    fn default() -> RtpConfig {
        RtpConfig {
            announce: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            audio_codecs: CodecId::DEFAULT_AUDIO.to_vec(),
            sdes_suites: vec![
                Profile::AeadAes256Gcm,
                Profile::AeadAes128Gcm,
                Profile::AesCm256HmacSha1_80,
                Profile::AesCm128HmacSha1_80,
                Profile::AesCm256HmacSha1_32,
                Profile::AesCm128HmacSha1_32,
                Profile::AesCm192HmacSha1_80,
                Profile::AesCm192HmacSha1_32,
                Profile::F8Aes128HmacSha1_80,
                Profile::F8Aes128HmacSha1_32,
            ],
            latch: Latch::Signalled,
            media_timeout: Duration::from_secs(60),
            replay_window: 1024,
            strict_source: false,
            passthrough: false,
            osrtp: false,
            dtmf_transcode: false,
            cn_transcode: false,
            amr_mode: None,
            dtls: None,
        }
    }
}

/// What our offer towards a phone carries.
#[derive(Debug, Clone)]
pub struct RtpOfferSpec {
    /// `RTP/AVP[F]` or `RTP/SAVP[F]`.
    pub transport: secrelay_wire::sdp_rtp::Transport,
    /// The codecs, with the payload types and format parameters to offer.
    pub codecs: Vec<(CodecId, secrelay_wire::sdp::Codec)>,
    /// SDES suites to offer, in order (one crypto line each). With an `RTP/AVP[F]` transport,
    /// suites make the offer opportunistic SRTP (RFC 8643): crypto lines on `RTP/AVP`, and an
    /// answer without them makes the leg plain RTP.
    pub suites: Vec<Profile>,
    /// Offer `a=rtcp-mux`.
    pub rtcp_mux: bool,
    /// `a=ptime`, if any.
    pub ptime: Option<u32>,
}

/// The local sockets the worker bound for a leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// RTP (and RTCP when muxed).
    pub rtp: SocketAddr,
    /// RTCP, on RTP's port + 1 (unused when RTCP is muxed).
    pub rtcp: SocketAddr,
}

/// Where one of a leg's SRTP streams stands, coarsely: what a node taking the leg over needs
/// to resume it without reusing an index under its key ([`RtpLeg::srtp_marks`],
/// [`RtpLeg::resume_srtp`]). It changes every 2^14 packets of the stream and every 1,024
/// SRTCP packets, so keeping it costs a steady call next to nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SrtpMark {
    /// A stream of ours (protected towards the phone) or the phone's.
    pub outbound: bool,
    /// The stream's SSRC.
    pub ssrc: u32,
    /// The highest SRTP index processed, to the quarter of a rollover (`index >> 14`).
    pub quarter: Option<u64>,
    /// The SRTCP index the stream sends next, to the block (`index >> 10`; outbound).
    pub rtcp_block: u32,
}

impl SrtpMark {
    /// Where the streams of a leg's two contexts stand (ours protected with `outbound`, the
    /// peer's unprotected with `inbound`), in order.
    pub(crate) fn of(inbound: &Context, outbound: &Context) -> Vec<SrtpMark> {
        let mut marks = Vec::new();
        for (ctx, out) in [(inbound, false), (outbound, true)] {
            for (ssrc, highest, rtcp_next) in ctx.stream_indices() {
                marks.push(SrtpMark {
                    outbound: out,
                    ssrc,
                    quarter: highest.map(|h| h >> 14),
                    rtcp_block: if out { rtcp_next >> 10 } else { 0 },
                });
            }
        }
        marks.sort_by_key(|m| (m.outbound, m.ssrc));
        marks
    }

    /// Resumes a leg's streams where `marks` (another node's, for the leg this one replaces)
    /// left them: each stream's index from the start of its quarter, so the rollover counter
    /// the peer and the other node had is kept while the stream went less than 2^14 packets
    /// past its mark; each stream of ours sends SRTCP from two blocks past its mark's, so no
    /// SRTCP index the other node used is used again.
    pub(crate) fn resume(
        marks: &[SrtpMark],
        inbound: &mut Context,
        outbound: &mut Context,
    ) -> Result<(), secrelay_srtp::Error> {
        for m in marks {
            let ctx = if m.outbound {
                &mut *outbound
            } else {
                &mut *inbound
            };
            if let Some(q) = m.quarter {
                ctx.resume_at(m.ssrc, q << 14)?;
            }
            if m.outbound {
                ctx.set_rtcp_index(m.ssrc, (m.rtcp_block + 2) << 10)?;
            }
        }
        Ok(())
    }
}

/// Why a telephony leg cannot be made from an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtpLegError {
    /// No section with port, an RTP or SDES-SRTP transport and audio.
    NoServableSection,
    /// No offered codec we accept.
    NoCommonCodec,
    /// An SDES section without a crypto line we can use (why, for each line).
    NoUsableCrypto(String),
    /// The SRTP context refused a key (the reason).
    Srtp(String),
    /// An answer to our offer that cannot be used (why).
    BadAnswer(String),
    /// A new offer in the call that cannot be taken now (why).
    Renegotiation(String),
    /// The SDP's DTLS-SRTP lines cannot be taken (why).
    Dtls(String),
    /// A call taken over whose phone's DTLS association knows another certificate than ours
    /// (every node that takes such calls needs the same one).
    OtherCertificate,
}

impl fmt::Display for RtpLegError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RtpLegError::NoServableSection => write!(
                f,
                "no audio section with RTP/AVP, RTP/AVPF, RTP/SAVP or RTP/SAVPF and a port"
            ),
            RtpLegError::NoCommonCodec => write!(f, "offer has no codec the gateway accepts"),
            RtpLegError::NoUsableCrypto(why) => write!(f, "no usable a=crypto line: {why}"),
            RtpLegError::Srtp(e) => write!(f, "SRTP context: {e}"),
            RtpLegError::BadAnswer(why) => write!(f, "the answer to our offer: {why}"),
            RtpLegError::Renegotiation(why) => write!(f, "the new offer: {why}"),
            RtpLegError::Dtls(why) => write!(f, "DTLS-SRTP: {why}"),
            RtpLegError::OtherCertificate => write!(
                f,
                "DTLS-SRTP: our certificate is not the one the phone's association knows"
            ),
        }
    }
}

impl std::error::Error for RtpLegError {}

/// How a leg's media is protected.
// Inline, not boxed: the contexts are read on every packet, and a plain leg's unused bytes
// cost less than a pointer chase per packet on a secure one.
#[allow(clippy::large_enum_variant)]
enum Security {
    Plain,
    /// Our offer's keys, one per offered suite, until the answer picks one.
    Offered(Vec<(u32, Profile, MasterKey)>),
    Sdes {
        profile: Profile,
        inbound: Context,
        outbound: Context,
        /// Our key and the phone's, as their `inline:` values (to tell a new key in a new
        /// offer or answer from the same one, and to offer ours again).
        ours: Zeroizing<String>,
        theirs: Zeroizing<String>,
    },
    /// DTLS-SRTP: the associations, and the contexts once every component is keyed.
    Dtls(Box<DtlsKeying>),
}

/// A source latched by a leg, for RTP or RTCP.
#[derive(Debug, Clone, Copy, Default)]
struct Source {
    signalled: Option<SocketAddr>,
    latched: Option<SocketAddr>,
}

impl Source {
    fn destination(&self) -> Option<SocketAddr> {
        self.latched.or(self.signalled)
    }
}

/// A telephony leg. See the [module documentation](self).
pub struct RtpLeg {
    config: RtpConfig,
    security: Security,
    /// Our offer waits for the answer (no media either way until it comes).
    awaiting: bool,
    /// Made as an offer of ours (its ports were bound before anyone said whether RTCP muxes).
    offerer: bool,
    /// The codecs of our last offer, which an answer may take (a later answer to the same
    /// offer may take others than the first did).
    offered: Vec<(CodecId, u8)>,
    media: Vec<NegotiatedMedia>,
    answer: String,
    /// The sections of our last SDP, and its `o=` session id and version.
    sdp: Vec<RtpSectionAnswer>,
    origin: (u64, u64),
    /// Our new offer in the call waits for its answer (media flows meanwhile).
    reoffered: bool,
    ports: Ports,
    rtcp_mux: bool,
    rtp: Source,
    rtcp: Source,
    /// Packets a plain leg has seen before latching (for [`Latch::FirstPackets`]).
    seen: u32,
    /// What the legs before this one on its ports used them with.
    quarantine: Quarantine,
    /// Sources it latched to, the first first (at most [`MAX_PEERS`]).
    latched_peers: Vec<SocketAddr>,
    last_admitted: Instant,
    /// A listener's (an ng subscription's): it expects no media from its peer, so no media
    /// timeout ends it (it ends with its call).
    listening: bool,
    closed: Option<CloseReason>,
    counters: Counters,
    queue: VecDeque<LegEvent>,
    /// What [`RtpLeg::sources`] said when [`LegEvent::SourcesChanged`] was last queued.
    told: Vec<(u16, Sources)>,
    /// The ICE credentials of the phone's last SDP, if it had any.
    peer_ice: Option<IceCredentials>,
    /// Our ICE-lite agent, when the leg does ICE ([`IceMode`]).
    ice: Option<IceLite>,
    /// STUN answers to send (to, from which of our ports, the datagram), and the one lent out
    /// by [`RtpLeg::poll_output`] (whose buffer the next answer is written in).
    transmits: VecDeque<Transmit>,
    lent: Option<Vec<u8>>,
    /// DTLS-SRTP offered beside SDES, until the answer takes one or the other.
    dtls_alongside: Option<Box<DtlsKeying>>,
    /// What a later answer to our first offer may still take (see [`FirstOffer`]).
    first_offer: Option<Box<FirstOffer>>,
}

/// What a later answer to a leg's first offer (another branch of a forked call, answering in
/// another suite) may still take: the keys no answer took, with their crypto lines, and the
/// SDES states of the suites answers took before, kept as they stopped: a key never gets a
/// fresh context twice (which would reuse its keystream).
#[derive(Default)]
struct FirstOffer {
    untaken: Vec<(u32, Profile, MasterKey)>,
    lines: Vec<Crypto>,
    taken: Vec<(Crypto, Security)>,
}

impl fmt::Debug for RtpLeg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtpLeg")
            .field("sdes", &self.sdes_profile())
            .field("ports", &self.ports)
            .field("rtcp_mux", &self.rtcp_mux)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// The agent's form of credentials an SDP gave.
fn credentials(c: &IceCredentials) -> Credentials {
    Credentials {
        ufrag: c.ufrag.clone(),
        pwd: c.pwd.clone(),
    }
}

/// An `o=` session id (positive in 62 bits, as RFC 4566 wants it to fit NTP-like numbers).
fn random_session_id() -> u64 {
    u64::from_be_bytes(random_bytes(8).try_into().unwrap_or([1; 8])) >> 2
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source works");
    b
}

/// A fresh SSRC of ours (never 0).
fn random_ssrc() -> u32 {
    u32::from_be_bytes(random_bytes(4).try_into().unwrap_or([1; 4])).max(1)
}

/// A fresh master key and salt for `profile`, the random bytes wiped once taken.
fn fresh_master_key(profile: Profile) -> Result<MasterKey, RtpLegError> {
    let mut raw = random_bytes(profile.key_len() + profile.salt_len());
    let key =
        MasterKey::from_concatenated(profile, &raw).map_err(|e| RtpLegError::Srtp(e.to_string()));
    raw.zeroize();
    key
}

/// The SRTP context for one direction of an SDES leg: `key` the sender's, any SSRC, replays
/// refused within `window` packets.
fn sdes_context(key: MasterKey, inbound: bool, window: usize) -> Result<Context, RtpLegError> {
    let policy = Policy::new(key).replay_window(window);
    let policy = if inbound {
        policy.any_inbound()
    } else {
        policy.any_outbound()
    };
    Context::new(policy).map_err(|e| RtpLegError::Srtp(e.to_string()))
}

/// An `a=crypto` line of ours: `tag`, `suite`, one key without lifetime or MKI
/// (`key_salt`: the base64 after `inline:`).
fn crypto_line(tag: u32, suite: &str, key_salt: String) -> Crypto {
    Crypto {
        tag,
        suite: suite.to_owned(),
        keys: vec![secrelay_wire::sdes::KeyParam {
            key_salt,
            lifetime: None,
            mki: None,
        }],
        session_params: Vec::new(),
    }
}

/// `key` as an `a=crypto` line's key (the base64 after `inline:`).
fn inline_of(key: &MasterKey) -> Zeroizing<String> {
    let inline = Zeroizing::new(key.to_sdes_inline());
    Zeroizing::new(inline.trim_start_matches("inline:").to_owned())
}

/// Where a section says it receives RTP and RTCP (`c=` address, `m=` port, `a=rtcp`, or the
/// next port; the same one with `a=rtcp-mux`): nothing without an address.
fn signalled_addresses(s: &RtpSection) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let rtcp_port = if s.rtcp_mux {
        s.port
    } else {
        s.rtcp_port.unwrap_or_else(|| s.port.wrapping_add(1))
    };
    (
        s.address.map(|ip| SocketAddr::new(ip, s.port)),
        s.address.map(|ip| SocketAddr::new(ip, rtcp_port)),
    )
}

/// Chooses the crypto line: our most preferred suite among the offered lines that parse, carry
/// one key without MKI, and no session parameter we cannot honour; the reasons otherwise.
fn choose_crypto(
    section: &RtpSection,
    ours: &[Profile],
) -> Result<(Crypto, Profile, MasterKey), RtpLegError> {
    let mut why: Vec<String> = section.bad_crypto.iter().map(|e| e.to_string()).collect();
    let mut usable = Vec::new();
    for c in &section.crypto {
        let Ok(profile) = c.suite.parse::<Profile>() else {
            why.push(format!("tag {}: suite {} not supported", c.tag, c.suite));
            continue;
        };
        if !ours.contains(&profile) {
            why.push(format!("tag {}: suite {} not enabled", c.tag, c.suite));
            continue;
        }
        if let Some(p) = c.unsupported_session_param() {
            why.push(format!(
                "tag {}: session parameter {p} not supported",
                c.tag
            ));
            continue;
        }
        let [key] = c.keys.as_slice() else {
            why.push(format!(
                "tag {}: {} keys (one without MKI is supported)",
                c.tag,
                c.keys.len()
            ));
            continue;
        };
        match MasterKey::from_sdes_inline(profile, &key.inline()) {
            Ok(k) => usable.push((c, profile, k)),
            Err(e) => why.push(format!("tag {}: {e}", c.tag)),
        }
    }
    let best = ours
        .iter()
        .find_map(|p| usable.iter().position(|(_, q, _)| q == p))
        .ok_or_else(|| {
            RtpLegError::NoUsableCrypto(if why.is_empty() {
                "the section offers none".into()
            } else {
                why.join("; ")
            })
        })?;
    let (c, profile, key) = usable.swap_remove(best);
    Ok((c.clone(), profile, key))
}

/// `chosen` (in our order) as (codec, payload type) in the order `offered` lists them.
/// The AMR mode a section's first AMR codec is sent in ([`crate::leg::choose_amr_mode`]).
fn amr_mode_of(codecs: &[(CodecId, Codec)], cap: Option<u8>) -> Option<u8> {
    let (id, c) = codecs.iter().find(|(id, _)| id.is_amr())?;
    crate::leg::choose_amr_mode(crate::leg::amr_mode_set(*id, c), cap)
}

pub(crate) fn in_offer_order(chosen: &[(CodecId, Codec)], offered: &[Codec]) -> Vec<(CodecId, u8)> {
    let mut v: Vec<(CodecId, u8)> = chosen.iter().map(|(id, c)| (*id, c.pt)).collect();
    v.sort_by_key(|(_, pt)| offered.iter().position(|c| c.pt == *pt));
    v
}

/// The codecs of `section` a leg with `config` takes, in our order (with `passthrough`: every
/// one, passed through, refused only when there is none); refused when none but supplemental
/// ones (telephone-events, comfort noise) are left.
fn codecs_taken(
    section: &RtpSection,
    config: &RtpConfig,
) -> Result<Vec<(CodecId, Codec)>, RtpLegError> {
    if config.passthrough {
        if section.codecs.is_empty() {
            return Err(RtpLegError::NoCommonCodec);
        }
        return Ok(section
            .codecs
            .iter()
            .map(|c| (CodecId::passthrough(c), c.clone()))
            .collect());
    }
    let codecs: Vec<(CodecId, Codec)> = config
        .audio_codecs
        .iter()
        .flat_map(|want| {
            section
                .codecs
                .iter()
                .filter(move |c| CodecId::of(c) == Some(*want))
                .map(move |c| (*want, c.clone()))
        })
        .collect();
    if codecs.iter().all(|(id, _)| id.is_supplemental()) {
        return Err(RtpLegError::NoCommonCodec);
    }
    Ok(codecs)
}

/// How a leg answering `section` is keyed, and the crypto line of its answer (SDES): DTLS-SRTP
/// where the section is keyed by it, SDES (or opportunistic SRTP on `RTP/AVP`) with a fresh
/// key of ours in the suite chosen from its lines, else plain.
fn answer_security(
    section: &RtpSection,
    config: &RtpConfig,
) -> Result<(Security, Option<Crypto>), RtpLegError> {
    let osrtp = config.osrtp && section.transport.is_plain() && !section.crypto.is_empty();
    if section.keyed_by_dtls() {
        let (Some(d), Some(sdp)) = (&config.dtls, &section.dtls) else {
            return Err(RtpLegError::Dtls("the section has no a=fingerprint".into()));
        };
        let mut keying = DtlsKeying::new(d.clone()).map_err(RtpLegError::Dtls)?;
        keying.take_offer(sdp).map_err(RtpLegError::Dtls)?;
        return Ok((Security::Dtls(Box::new(keying)), None));
    }
    if !(section.transport.is_sdes() || osrtp) {
        return Ok((Security::Plain, None));
    }
    let (offered, profile, their_key) = choose_crypto(section, &config.sdes_suites)?;
    let theirs = Zeroizing::new(
        offered
            .keys
            .first()
            .map(|k| k.key_salt.clone())
            .unwrap_or_default(),
    );
    let our_key = fresh_master_key(profile)?;
    let ours = inline_of(&our_key);
    let answer = crypto_line(offered.tag, &offered.suite, ours.to_string());
    let window = config.replay_window;
    let security = Security::Sdes {
        profile,
        inbound: sdes_context(their_key, true, window)?,
        outbound: sdes_context(our_key, false, window)?,
        ours,
        theirs,
    };
    Ok((security, Some(answer)))
}

/// Our answer's sections to `offer`: `taken` (the section the leg serves) as `served` says,
/// every other one refused (port 0, inactive, its first codec).
fn answer_sections(
    offer: &RtpDescription,
    taken: usize,
    served: RtpSectionAnswer,
) -> Vec<RtpSectionAnswer> {
    let mut served = Some(served);
    offer
        .sections
        .iter()
        .enumerate()
        .map(|(i, s)| match served.take_if(|_| i == taken) {
            Some(a) => a,
            None => RtpSectionAnswer {
                kind: s.kind.clone(),
                port: None,
                transport: s.transport.clone(),
                codecs: s.codecs.iter().take(1).cloned().collect(),
                crypto: Vec::new(),
                rtcp: RtcpAnswer::NextPort,
                direction: Direction::Inactive,
                ptime: None,
                mid: s.mid.clone(),
                ice: None,
                dtls: None,
            },
        })
        .collect()
}

/// What [`offer_security`] gives: the leg's keying, our crypto lines, DTLS-SRTP offered beside.
type OfferKeying = (Security, Vec<Crypto>, Option<Box<DtlsKeying>>);

/// How a leg offering `spec` is keyed, its crypto lines (one per SDES suite, tagged `tags` or
/// 1, 2, …, each with a fresh key of ours), and the DTLS-SRTP keying offered beside SDES
/// (rtpengine's default towards `RTP/SAVP[F]` when DTLS is configured).
fn offer_security(
    spec: &RtpOfferSpec,
    tags: &[u32],
    config: &RtpConfig,
) -> Result<OfferKeying, RtpLegError> {
    let osrtp = spec.transport.is_plain() && !spec.suites.is_empty();
    // SDES and DTLS-SRTP both offered (rtpengine's default towards `RTP/SAVP[F]`): the
    // answer's crypto line, or its fingerprint, decides.
    let alongside = match (
        &config.dtls,
        spec.transport.is_sdes() && !spec.suites.is_empty(),
    ) {
        (Some(d), true) => Some(Box::new(
            DtlsKeying::new(d.clone()).map_err(RtpLegError::Dtls)?,
        )),
        _ => None,
    };
    let (security, crypto) = if let (Some(d), None) = (&config.dtls, &alongside) {
        if !(spec.transport.is_sdes() || spec.transport.is_dtls()) {
            return Err(RtpLegError::NoServableSection);
        }
        let keying = DtlsKeying::new(d.clone()).map_err(RtpLegError::Dtls)?;
        (Security::Dtls(Box::new(keying)), Vec::new())
    } else if spec.transport.is_sdes() || osrtp {
        if spec.suites.is_empty() {
            return Err(RtpLegError::NoUsableCrypto(
                "no SDES suite left to offer".into(),
            ));
        }
        let mut keys = Vec::new();
        let mut lines = Vec::new();
        for (i, p) in spec.suites.iter().enumerate() {
            let tag = tags.get(i).copied().unwrap_or(i as u32 + 1);
            let key = fresh_master_key(*p)?;
            lines.push(crypto_line(tag, p.sdp_name(), inline_of(&key).to_string()));
            keys.push((tag, *p, key));
        }
        (Security::Offered(keys), lines)
    } else if spec.transport.is_plain() {
        (Security::Plain, Vec::new())
    } else {
        return Err(RtpLegError::NoServableSection);
    };
    Ok((security, crypto, alongside))
}

/// How RTCP is answered: on the RTP port with `a=rtcp-mux`, else on the next one.
fn rtcp_answer(mux: bool) -> RtcpAnswer {
    if mux {
        RtcpAnswer::Mux
    } else {
        RtcpAnswer::NextPort
    }
}

impl RtpLeg {
    /// A leg with nothing received, no peer known and no offer waiting, keyed by `security`
    /// and negotiated as `media` and `sdp` (our SDP `answer`, written with `origin`).
    fn with_sdp(
        config: RtpConfig,
        security: Security,
        ports: Ports,
        (media, sdp, answer, origin): (
            Vec<NegotiatedMedia>,
            Vec<RtpSectionAnswer>,
            String,
            (u64, u64),
        ),
        now: Instant,
    ) -> RtpLeg {
        RtpLeg {
            config,
            security,
            awaiting: false,
            offerer: false,
            offered: Vec::new(),
            media,
            answer,
            sdp,
            origin,
            reoffered: false,
            ports,
            rtcp_mux: false,
            rtp: Source::default(),
            rtcp: Source::default(),
            seen: 0,
            quarantine: Quarantine::default(),
            latched_peers: Vec::new(),
            last_admitted: now,
            listening: false,
            closed: None,
            counters: Counters::default(),
            queue: VecDeque::new(),
            told: Vec::new(),
            peer_ice: None,
            ice: None,
            transmits: VecDeque::new(),
            lent: None,
            dtls_alongside: None,
            first_offer: None,
        }
    }

    /// A leg for `offer` on the local `ports`, created at `now` (the media timeout starts).
    pub fn new(
        offer: &RtpDescription,
        ports: Ports,
        config: RtpConfig,
        now: Instant,
    ) -> Result<RtpLeg, RtpLegError> {
        let serves = |s: &RtpSection| {
            s.port != 0
                && (config.passthrough || s.kind == MediaKind::Audio)
                && if s.keyed_by_dtls() {
                    config.dtls.is_some()
                } else {
                    s.transport.is_plain() || s.transport.is_sdes()
                }
        };
        let chosen = offer
            .sections
            .iter()
            .position(serves)
            .ok_or(RtpLegError::NoServableSection)?;
        let section = &offer.sections[chosen];
        let codecs = codecs_taken(section, &config)?;
        let (security, answer_crypto) = answer_security(section, &config)?;
        let media = vec![NegotiatedMedia {
            mid: section.mid.clone().unwrap_or_else(|| chosen.to_string()),
            kind: section.kind.clone(),
            codecs: in_offer_order(&codecs, &section.codecs),
            peer_sends: section.direction.sends(),
            peer_receives: section.direction.receives(),
            our_ssrc: random_ssrc(),
            feedback: SectionFeedback::default(),
            extmaps: Vec::new(),
            simulcast: Vec::new(),
            ptime: section.ptime,
            amr_mode: amr_mode_of(&codecs, config.amr_mode),
        }];
        let served = RtpSectionAnswer {
            kind: section.kind.clone(),
            port: Some(ports.rtp.port()),
            transport: section.transport.clone(),
            codecs: codecs.into_iter().map(|(_, c)| c).collect(),
            crypto: answer_crypto.into_iter().collect(),
            rtcp: rtcp_answer(section.rtcp_mux),
            direction: section.direction.reversed(),
            ptime: section.ptime,
            mid: section.mid.clone(),
            ice: None,
            dtls: match &security {
                Security::Dtls(k) => Some(k.attributes()),
                _ => None,
            },
        };
        let sections = answer_sections(offer, chosen, served);
        let origin = (random_session_id(), 1);
        let answer = write_rtp_sdp(origin, config.announce, &sections);
        let mut leg = RtpLeg::with_sdp(
            config,
            security,
            ports,
            (media, sections, answer, origin),
            now,
        );
        let (rtp, rtcp) = signalled_addresses(section);
        leg.rtp.signalled = rtp;
        leg.rtcp.signalled = rtcp;
        leg.rtcp_mux = section.rtcp_mux;
        leg.peer_ice = section.ice.clone();
        leg.start_dtls(now)?;
        leg.note_sources();
        Ok(leg)
    }

    /// A leg that makes the offer (towards a callee, for a SIP proxy's `offer`): our SDP
    /// offers `spec`'s codecs and, for SDES, one crypto line per suite with a fresh key of
    /// ours for each; media waits for [`RtpLeg::accept_answer`].
    pub fn new_offer(
        spec: &RtpOfferSpec,
        ports: Ports,
        config: RtpConfig,
        now: Instant,
    ) -> Result<RtpLeg, RtpLegError> {
        RtpLeg::new_offer_of(MediaKind::Audio, &[], spec, ports, config, now)
    }

    /// [`RtpLeg::new_offer`] for a section of media type `kind`, its crypto lines tagged
    /// `tags` (one per suite; 1, 2, … where not given).
    pub fn new_offer_of(
        kind: MediaKind,
        tags: &[u32],
        spec: &RtpOfferSpec,
        ports: Ports,
        config: RtpConfig,
        now: Instant,
    ) -> Result<RtpLeg, RtpLegError> {
        if spec.codecs.is_empty() {
            return Err(RtpLegError::NoCommonCodec);
        }
        let (security, crypto, alongside) = offer_security(spec, tags, &config)?;
        let media = vec![NegotiatedMedia {
            mid: "0".into(),
            kind: kind.clone(),
            codecs: spec.codecs.iter().map(|(id, c)| (*id, c.pt)).collect(),
            peer_sends: true,
            peer_receives: true,
            our_ssrc: random_ssrc(),
            feedback: SectionFeedback::default(),
            extmaps: Vec::new(),
            simulcast: Vec::new(),
            ptime: spec.ptime,
            amr_mode: amr_mode_of(&spec.codecs, config.amr_mode),
        }];
        let section = RtpSectionAnswer {
            kind,
            port: Some(ports.rtp.port()),
            transport: spec.transport.clone(),
            codecs: spec.codecs.iter().map(|(_, c)| c.clone()).collect(),
            crypto,
            rtcp: rtcp_answer(spec.rtcp_mux),
            direction: Direction::SendRecv,
            ptime: spec.ptime,
            mid: None,
            ice: None,
            dtls: match (&security, &alongside) {
                (Security::Dtls(k), _) | (_, Some(k)) => Some(k.attributes()),
                _ => None,
            },
        };
        let origin = (random_session_id(), 1);
        let sdp = write_rtp_sdp(origin, config.announce, std::slice::from_ref(&section));
        let offered = spec.codecs.iter().map(|(id, c)| (*id, c.pt)).collect();
        let mut leg = RtpLeg::with_sdp(
            config,
            security,
            ports,
            (media, vec![section], sdp, origin),
            now,
        );
        leg.awaiting = true;
        leg.offerer = true;
        leg.offered = offered;
        leg.dtls_alongside = alongside;
        leg.note_sources();
        Ok(leg)
    }

    /// The phone's answer to our offer: where it receives, the codecs it took, and (SDES) the
    /// crypto line it accepted with its key. Media flows from then on.
    pub fn accept_answer(
        &mut self,
        answer: &RtpDescription,
        now: Instant,
    ) -> Result<(), RtpLegError> {
        // A leg made as an offer also takes a later answer to it: a SIP proxy passes on every
        // answer an early dialog gets (a 183, then the 200 with other codecs or keys).
        if !self.awaiting && !self.reoffered && !self.offerer {
            return Err(RtpLegError::BadAnswer(
                "no offer of ours waits for one".into(),
            ));
        }
        let bad = |why: &str| RtpLegError::BadAnswer(why.to_owned());
        let kind = self.media[0].kind.clone();
        let a = answer
            .sections
            .iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| bad(&format!("no {} section", kind.as_str())))?;
        if a.port == 0 {
            return Err(bad(&format!(
                "the {} section is rejected (port 0)",
                kind.as_str()
            )));
        }
        self.take_answer_transport(a)?;
        let answered = self.answered_codecs(a)?;
        let codecs: Vec<(CodecId, u8)> = answered.iter().map(|(id, c)| (*id, c.pt)).collect();
        self.take_answer_keys(a)?;
        self.media[0].amr_mode = amr_mode_of(&answered, self.config.amr_mode);
        self.sdp[0].codecs = answered.into_iter().map(|(_, c)| c).collect();
        self.media[0].codecs = codecs;
        if a.ptime.is_some() {
            self.media[0].ptime = a.ptime;
        }
        self.media[0].peer_sends = a.direction.sends();
        self.media[0].peer_receives = a.direction.receives();
        self.rtcp_mux = a.rtcp_mux;
        (self.rtp.signalled, self.rtcp.signalled) = signalled_addresses(a);
        if let (Security::Dtls(k), Some(sdp)) = (&mut self.security, &a.dtls) {
            k.take_answer(sdp).map_err(|e| bad(&e))?;
            let lines = k.attributes();
            self.sdp[0].dtls = Some(lines);
        }
        self.awaiting = false;
        self.reoffered = false;
        self.last_admitted = now;
        self.peer_ice = a.ice.clone();
        self.take_peer_ice(now, false);
        self.start_dtls(now)?;
        self.note_sources();
        Ok(())
    }

    /// Checks the answer's section `a` answers our offer's transport (SDES, DTLS-SRTP, plain,
    /// or opportunistic SRTP taken or declined) and keys the leg as it chose where we offered
    /// SDES and DTLS-SRTP together.
    fn take_answer_transport(&mut self, a: &RtpSection) -> Result<(), RtpLegError> {
        let bad = |why: &str| RtpLegError::BadAnswer(why.to_owned());
        let sdes = self.protects();
        // Crypto lines of ours on `RTP/AVP`: opportunistic SRTP (RFC 8643), answered on
        // `RTP/AVP` with crypto (SRTP) or without (plain RTP).
        let osrtp = self
            .sdp
            .iter()
            .any(|s| s.port.is_some() && s.transport.is_plain() && !s.crypto.is_empty());
        if let Some(k) = self.dtls_alongside.take() {
            // SDES and DTLS-SRTP were offered: a fingerprint without a crypto line takes
            // DTLS-SRTP; anything else, SDES.
            if a.crypto.is_empty() && a.dtls.is_some() {
                self.security = Security::Dtls(k);
                for s in &mut self.sdp {
                    s.crypto.clear();
                }
            } else {
                self.sdp[0].dtls = None;
            }
        }
        let dtls = matches!(self.security, Security::Dtls(_));
        let answers = if osrtp {
            a.transport.is_plain()
        } else if dtls {
            a.keyed_by_dtls()
        } else {
            sdes == a.transport.is_sdes() && (sdes || a.transport.is_plain())
        };
        if !answers {
            return Err(bad(&format!(
                "transport {} does not answer ours",
                a.transport.as_str()
            )));
        }
        if dtls && a.dtls.is_none() {
            return Err(bad("no a=fingerprint in the answer to our DTLS-SRTP offer"));
        }
        if osrtp && a.crypto.is_empty() && matches!(self.security, Security::Offered(_)) {
            // Declined: plain RTP, and plain in our offers from now on.
            self.security = Security::Plain;
            for s in &mut self.sdp {
                s.crypto.clear();
            }
        }
        Ok(())
    }

    /// The codecs of our offer that the answer's section `a` took, in its order; refused when
    /// it took none.
    fn answered_codecs(&self, a: &RtpSection) -> Result<Vec<(CodecId, Codec)>, RtpLegError> {
        let offered = &self.offered;
        let answered: Vec<(CodecId, Codec)> = a
            .codecs
            .iter()
            .filter_map(|c| {
                let id = if self.config.passthrough {
                    CodecId::passthrough(c)
                } else {
                    CodecId::of(c)?
                };
                offered
                    .iter()
                    .any(|(o, _)| *o == id)
                    .then(|| (id, c.clone()))
            })
            .collect();
        if answered.is_empty() {
            return Err(RtpLegError::BadAnswer(
                "no codec of our offer in the answer".into(),
            ));
        }
        Ok(answered)
    }

    /// The SDES key the answer's section `a` gives: the suite a later answer to our first
    /// offer takes, the peer's new key in an answer to a new offer of ours, or, on the first
    /// answer, the offered suite it took (its tag, else its name) with the peer's key.
    fn take_answer_keys(&mut self, a: &RtpSection) -> Result<(), RtpLegError> {
        let bad = |why: &str| RtpLegError::BadAnswer(why.to_owned());
        if !self.reoffered {
            self.take_other_suite(a);
        }
        if let Security::Sdes {
            profile,
            inbound,
            theirs,
            ..
        } = &mut self.security
        {
            // The answer to a new offer of ours: our key stays; theirs may be new.
            let c = a
                .crypto
                .iter()
                .find(|c| c.suite.eq_ignore_ascii_case(profile.sdp_name()))
                .ok_or_else(|| bad(&format!("no a=crypto line for {profile}")))?;
            let [key] = c.keys.as_slice() else {
                return Err(bad("the answer's crypto line has no single key"));
            };
            if key.key_salt != **theirs {
                let k = MasterKey::from_sdes_inline(*profile, &key.inline())
                    .map_err(|e| bad(&format!("the answer's key: {e}")))?;
                let window = self.config.replay_window;
                *inbound = sdes_context(k, true, window)?;
                *theirs = Zeroizing::new(key.key_salt.clone());
            }
        }
        self.take_offered_suite(a)
    }

    /// On the first answer to our SDES offer: the offered suite the answer's section `a` took
    /// (its tag, else its name) keys the leg with the peer's key; the suites it did not take
    /// are kept for a later answer to the same offer.
    fn take_offered_suite(&mut self, a: &RtpSection) -> Result<(), RtpLegError> {
        let bad = |why: &str| RtpLegError::BadAnswer(why.to_owned());
        if let Security::Offered(keys) = &mut self.security {
            let c = a
                .crypto
                .first()
                .ok_or_else(|| bad("no a=crypto in an SDES answer"))?;
            // The tag and suite we offered; else the suite under another tag (rtpengine takes
            // an answer that names an offered suite by another tag, and proxies' answers are
            // written for its tags).
            let named = |p: &Profile| p.sdp_name().eq_ignore_ascii_case(&c.suite);
            let i = keys
                .iter()
                .position(|(tag, p, _)| *tag == c.tag && named(p))
                .or_else(|| keys.iter().position(|(_, p, _)| named(p)))
                .ok_or_else(|| {
                    bad(&format!(
                        "a=crypto tag {} {} was not offered",
                        c.tag, c.suite
                    ))
                })?;
            let [key] = c.keys.as_slice() else {
                return Err(bad("the answer's crypto line has no single key"));
            };
            let (tag, profile, our_key) = keys.swap_remove(i);
            if !self.reoffered {
                let f = self.first_offer.get_or_insert_with(Default::default);
                f.untaken = keys.clone();
                f.lines = self.sdp[0].crypto.clone();
                f.lines.retain(|c| c.tag != tag);
            }
            let their_key = MasterKey::from_sdes_inline(profile, &key.inline())
                .map_err(|e| bad(&format!("the answer's key: {e}")))?;
            let window = self.config.replay_window;
            let inbound = sdes_context(their_key, true, window)?;
            let ours = Zeroizing::new(
                self.sdp[0]
                    .crypto
                    .iter()
                    .find(|c| c.tag == tag)
                    .and_then(|c| c.keys.first())
                    .map(|k| k.key_salt.clone())
                    .unwrap_or_default(),
            );
            let outbound = sdes_context(our_key, false, window)?;
            self.security = Security::Sdes {
                profile,
                inbound,
                outbound,
                ours,
                theirs: Zeroizing::new(key.key_salt.clone()),
            };
            // What we offer again from now on: the suite and key the answer took.
            self.sdp[0].crypto.retain(|c| c.tag == tag);
        }
        Ok(())
    }

    /// A later answer to our first offer (`a`) taking a suite other than the one an answer
    /// took before: the leg goes back to that suite's state if an answer took it before, or
    /// to our offer's untaken keys (the answer then picks among them); the state left is kept.
    fn take_other_suite(&mut self, a: &RtpSection) {
        let (Security::Sdes { profile, .. }, Some(f), Some(c)) =
            (&self.security, self.first_offer.as_mut(), a.crypto.first())
        else {
            return;
        };
        let named = |suite: &str, p: Profile| p.sdp_name().eq_ignore_ascii_case(suite);
        if a.crypto.iter().any(|c| named(&c.suite, *profile)) {
            return;
        }
        let ours = self.sdp[0].crypto.first().cloned();
        let (next, lines) = if let Some(i) = f
            .taken
            .iter()
            .position(|(l, _)| l.suite.eq_ignore_ascii_case(&c.suite))
        {
            let (line, state) = f.taken.swap_remove(i);
            (state, vec![line])
        } else if f.untaken.iter().any(|k| named(&c.suite, k.1)) {
            (Security::Offered(f.untaken.clone()), f.lines.clone())
        } else {
            return;
        };
        let left = std::mem::replace(&mut self.security, next);
        if let Some(line) = ours {
            f.taken.push((line, left));
        }
        self.sdp[0].crypto = lines;
    }

    /// A new offer from the phone in the call (a re-INVITE): new address, codecs, direction or
    /// keys, answered on the same ports ([`RtpLeg::answer_sdp`] is the new answer). The
    /// stream we send keeps its SSRC; keys that did not change keep their contexts (see the
    /// [module documentation](self)); the latch is kept while the address is.
    pub fn take_offer(&mut self, offer: &RtpDescription, now: Instant) -> Result<(), RtpLegError> {
        let refuse = |why: &str| Err(RtpLegError::Renegotiation(why.to_owned()));
        if self.closed.is_some() {
            return refuse("the leg has ended");
        }
        if self.awaiting || self.reoffered {
            return refuse("an offer of ours waits for its answer");
        }
        let mut next = RtpLeg::new(offer, self.ports, self.config.clone(), now)?;
        if !next.rtcp_mux && self.rtcp_mux && !self.offerer {
            return refuse(
                "RTCP was muxed, and no port of its own was set aside for it: keep a=rtcp-mux",
            );
        }
        if let (
            Security::Sdes {
                profile: was,
                inbound: old_in,
                outbound: old_out,
                ours: old_ours,
                theirs: old_theirs,
            },
            Security::Sdes {
                profile,
                inbound,
                outbound,
                ours,
                theirs,
            },
        ) = (&mut self.security, &mut next.security)
        {
            if was == profile {
                std::mem::swap(outbound, old_out);
                std::mem::swap(ours, old_ours);
                for c in next.sdp.iter_mut().flat_map(|s| s.crypto.iter_mut()) {
                    for k in &mut c.keys {
                        k.key_salt = ours.to_string();
                    }
                }
                if *theirs == *old_theirs {
                    std::mem::swap(inbound, old_in);
                }
            }
        }
        if let (Security::Dtls(old), Security::Dtls(new)) = (&self.security, &next.security) {
            if !old.continued_by(new) {
                return refuse("a new DTLS association (another role or certificate) in the call");
            }
            if old.started() {
                next.security = std::mem::replace(&mut self.security, Security::Plain);
                next.transmits.clear();
                next.queue.clear();
            }
        }
        next.origin = (self.origin.0, self.origin.1 + 1);
        next.ice = self.ice.take();
        next.transmits = std::mem::take(&mut self.transmits);
        next.take_peer_ice(now, true);
        next.write_ice();
        next.answer = write_rtp_sdp(next.origin, next.config.announce, &next.sdp);
        next.media[0].our_ssrc = self.media[0].our_ssrc;
        for (src, new) in [(&self.rtp, &mut next.rtp), (&self.rtcp, &mut next.rtcp)] {
            if src.signalled == new.signalled {
                new.latched = src.latched;
            }
        }
        next.seen = if next.rtp.latched.is_some() {
            self.seen
        } else {
            0
        };
        next.offerer = self.offerer;
        next.offered = std::mem::take(&mut self.offered);
        next.counters = self.counters;
        next.quarantine = std::mem::take(&mut self.quarantine);
        next.latched_peers = std::mem::take(&mut self.latched_peers);
        next.told = std::mem::take(&mut self.told);
        next.queue = std::mem::take(&mut self.queue);
        *self = next;
        self.note_sources();
        Ok(())
    }

    /// A new offer of ours in the call (a re-INVITE towards the phone): the codecs it
    /// answered, our key and suite (SDES), the same ports; the next SDP version. Media keeps
    /// flowing; the phone's answer comes to [`RtpLeg::accept_answer`].
    pub fn make_offer(&mut self) -> Result<&str, RtpLegError> {
        if self.closed.is_some() {
            return Err(RtpLegError::Renegotiation("the leg has ended".into()));
        }
        if self.awaiting {
            return Err(RtpLegError::Renegotiation(
                "our first offer still waits for its answer".into(),
            ));
        }
        let crypto = match &self.security {
            Security::Sdes { profile, ours, .. } => {
                vec![crypto_line(1, profile.sdp_name(), ours.to_string())]
            }
            _ => Vec::new(),
        };
        let Some(section) = self.sdp.iter_mut().find(|s| s.port.is_some()) else {
            return Err(RtpLegError::Renegotiation(
                "the leg has no media section".into(),
            ));
        };
        section.crypto = crypto;
        // An offer says `actpass` (RFC 8842 §5.3), a new one in the call too: the answer keeps
        // the association's roles, or is refused.
        if let Security::Dtls(k) = &self.security {
            section.dtls = Some((Setup::Actpass, k.attributes().1));
        }
        section.direction = Direction::SendRecv;
        section.rtcp = if self.rtcp_mux {
            RtcpAnswer::Mux
        } else {
            RtcpAnswer::NextPort
        };
        self.origin.1 += 1;
        self.answer = write_rtp_sdp(self.origin, self.config.announce, &self.sdp);
        self.offered = self.media[0].codecs.clone();
        self.reoffered = true;
        // Answers from now on answer this offer, which offers one suite.
        self.first_offer = None;
        Ok(&self.answer)
    }

    /// Takes the keys of ours that `crypto` (our SDP's `a=crypto` values, as another node
    /// wrote them for this leg) carries, in place of those this leg made: a call taken over
    /// from a node that died is made again from its signaling, then given the keys its phones
    /// already have. Each key of ours finds the line of its suite (and, in an offer still
    /// open, its tag); a key without a line keeps its value. Err: a line whose key does not
    /// fit its suite.
    pub fn restore_keys(&mut self, crypto: &[Zeroizing<String>]) -> Result<(), RtpLegError> {
        let lines: Vec<Crypto> = crypto
            .iter()
            .filter_map(|c| Crypto::parse(c).ok())
            .collect();
        let key_of = |profile: Profile,
                      tag: Option<u32>|
         -> Result<Option<MasterKey>, RtpLegError> {
            let Some(line) = lines.iter().find(|c| {
                c.suite.parse::<Profile>().ok() == Some(profile) && tag.is_none_or(|t| t == c.tag)
            }) else {
                return Ok(None);
            };
            let Some(key) = line.keys.first() else {
                return Ok(None);
            };
            MasterKey::from_sdes_inline(profile, &key.inline())
                .map(Some)
                .map_err(|e| RtpLegError::Srtp(e.to_string()))
        };
        let window = self.config.replay_window;
        match &mut self.security {
            // DTLS-SRTP's keys are the handshake's, never in the SDP.
            Security::Plain | Security::Dtls(_) => return Ok(()),
            Security::Offered(keys) => {
                for (tag, profile, key) in keys.iter_mut() {
                    if let Some(k) = key_of(*profile, Some(*tag))? {
                        *key = k;
                    }
                }
            }
            Security::Sdes {
                profile,
                outbound,
                ours,
                ..
            } => {
                if let Some(k) = key_of(*profile, None)? {
                    *ours = inline_of(&k);
                    *outbound = sdes_context(k, false, window)?;
                }
            }
        }
        self.write_keys();
        Ok(())
    }

    /// Where each of its SRTP streams stands ([`SrtpMark`]); none for a plain leg.
    pub fn srtp_marks(&self) -> Vec<SrtpMark> {
        match &self.security {
            Security::Sdes {
                inbound, outbound, ..
            } => SrtpMark::of(inbound, outbound),
            Security::Dtls(k) => k
                .keyed
                .as_ref()
                .map(|k| SrtpMark::of(&k.inbound, &k.outbound))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Resumes its SRTP streams where `marks` (another node's, for the leg this one replaces)
    /// left them ([`SrtpMark::resume`]).
    pub fn resume_srtp(&mut self, marks: &[SrtpMark]) -> Result<(), RtpLegError> {
        let (inbound, outbound) = match &mut self.security {
            Security::Sdes {
                inbound, outbound, ..
            } => (inbound, outbound),
            Security::Dtls(k) => match k.keyed.as_mut() {
                Some(k) => (&mut k.inbound, &mut k.outbound),
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
        SrtpMark::resume(marks, inbound, outbound).map_err(|e| RtpLegError::Srtp(e.to_string()))
    }

    /// A leg made again for a call taken over, whose DTLS-SRTP keys [`RtpLeg::resume_dtls`] will
    /// give it once the replayed answer has given it its role: as the client it sends no
    /// ClientHello meanwhile (the phone's association goes on; a new handshake would only
    /// disturb it).
    fn expect_dtls_resume(&mut self) {
        let keyings = [
            match &mut self.security {
                Security::Dtls(k) => Some(k),
                _ => None,
            },
            self.dtls_alongside.as_mut(),
        ];
        for k in keyings.into_iter().flatten() {
            k.expect_resume();
        }
        self.transmits.retain(|t| t.3 != TransmitKind::Dtls);
    }

    /// Takes the DTLS-SRTP keys another node's leg had (a call taken over: this leg made again
    /// from the same requests), without a handshake: the phone's association goes on. Any
    /// flight a handshake begun here queued is not sent. Err, and the leg unchanged: not a
    /// DTLS-SRTP leg, our certificate not the other node's, the keys not usable here.
    pub fn resume_dtls(&mut self, now: Instant, marks: &DtlsMarks) -> Result<(), RtpLegError> {
        let Security::Dtls(k) = &mut self.security else {
            return Err(RtpLegError::Dtls("not a DTLS-SRTP leg".into()));
        };
        if k.attributes().1 != marks.fingerprint {
            return Err(RtpLegError::OtherCertificate);
        }
        k.resume(now, marks, self.config.replay_window)
            .map_err(RtpLegError::Dtls)?;
        self.transmits.retain(|t| t.3 != TransmitKind::Dtls);
        self.last_admitted = now;
        Ok(())
    }

    /// Our SDP's crypto lines written again with the keys the leg holds now.
    fn write_keys(&mut self) {
        for c in self.sdp.iter_mut().flat_map(|s| s.crypto.iter_mut()) {
            let inline = match &self.security {
                Security::Plain | Security::Dtls(_) => None,
                Security::Offered(keys) => keys
                    .iter()
                    .find(|(tag, p, _)| *tag == c.tag && p.sdp_name() == c.suite)
                    .map(|(_, _, k)| Zeroizing::new(k.to_sdes_inline())),
                Security::Sdes { profile, ours, .. } => (profile.sdp_name() == c.suite)
                    .then(|| Zeroizing::new(format!("inline:{}", ours.as_str()))),
            };
            if let (Some(inline), Some(k)) = (inline, c.keys.first_mut()) {
                k.key_salt = inline.trim_start_matches("inline:").to_owned();
            }
        }
        self.answer = write_rtp_sdp(self.origin, self.config.announce, &self.sdp);
    }

    /// Our SDP: the answer to the phone's offer, or our offer to it.
    pub fn answer_sdp(&self) -> &str {
        &self.answer
    }

    /// The accepted media section.
    pub fn media(&self) -> &[NegotiatedMedia] {
        &self.media
    }

    /// The SDES suite, for an SRTP leg (the first offered one while our offer waits for its
    /// answer); `None` for a plain one.
    pub fn sdes_profile(&self) -> Option<Profile> {
        match &self.security {
            Security::Plain | Security::Dtls(_) => None,
            Security::Offered(keys) => keys.first().map(|k| k.1),
            Security::Sdes { profile, .. } => Some(*profile),
        }
    }

    /// Whether an offer of ours (the first, or a new one in the call) waits for the phone's
    /// answer.
    pub fn awaiting_answer(&self) -> bool {
        self.awaiting || self.reoffered
    }

    /// Takes back a new offer of ours that will get no answer (the re-INVITE it was made for
    /// was refused at the other side): the next SDP from the phone is an offer again.
    pub fn withdraw_offer(&mut self) {
        self.reoffered = false;
    }

    /// The local ports; the RTCP one is unused when RTCP is muxed.
    pub fn ports(&self) -> Ports {
        self.ports
    }

    /// Whether RTCP is muxed with RTP on one port.
    pub fn rtcp_mux(&self) -> bool {
        self.rtcp_mux
    }

    /// The local ports this leg receives on (one when RTCP is muxed).
    pub fn local_ports(&self) -> Vec<u16> {
        // A leg made as an offer keeps both: the answer decides about muxing later.
        if self.rtcp_mux && !self.offerer {
            vec![self.ports.rtp.port()]
        } else {
            vec![self.ports.rtp.port(), self.ports.rtcp.port()]
        }
    }

    /// The source RTP is latched to, once one is.
    pub fn latched(&self) -> Option<SocketAddr> {
        self.rtp.latched
    }

    /// The leg refuses what the legs before it on its ports used them with, as `quarantine`
    /// says (see the [module documentation](self)).
    pub fn with_quarantine(mut self, quarantine: Quarantine) -> RtpLeg {
        self.quarantine = quarantine;
        self
    }

    /// The remote addresses the leg used its ports with: every source it latched to (RTP and
    /// RTCP, the last [`MAX_PEERS`]) and the addresses its SDP signalled. What its ports'
    /// next leg refuses for a while.
    pub fn peers(&self) -> Vec<SocketAddr> {
        let mut v = self.latched_peers.clone();
        for a in [self.rtp.signalled, self.rtcp.signalled]
            .into_iter()
            .flatten()
        {
            if !v.contains(&a) {
                v.push(a);
            }
        }
        v
    }

    /// What each local port takes datagrams from, by source address (see [`Sources`]): the RTP
    /// port (RTCP's sources too when RTCP is muxed) and the RTCP port, as
    /// [`RtpLeg::local_ports`] lists them. [`LegEvent::SourcesChanged`] tells when it changes.
    pub fn sources(&self) -> Vec<(u16, Sources)> {
        let (rtp, rtcp) = (self.sources_of(&self.rtp), self.sources_of(&self.rtcp));
        match self.local_ports()[..] {
            [one] => vec![(one, rtp.union(rtcp))],
            _ => vec![(self.ports.rtp.port(), rtp), (self.ports.rtcp.port(), rtcp)],
        }
    }

    /// What [`RtpLeg::admit`] can take from `src`'s port, by address alone.
    fn sources_of(&self, src: &Source) -> Sources {
        if self.closed.is_some() {
            return Sources::Only(Vec::new());
        }
        if self.ice.is_some() && src.latched.is_none() {
            // Checks come from whichever candidate of the phone's reaches us (authenticated).
            return Sources::Any;
        }
        match (&self.security, src.latched, self.config.latch) {
            (Security::Sdes { .. } | Security::Dtls(_), Some(l), _)
                if self.config.strict_source =>
            {
                Sources::Only(vec![l])
            }
            (Security::Sdes { .. } | Security::Offered(_) | Security::Dtls(_), ..) => Sources::Any,
            (Security::Plain, Some(l), _) => Sources::Only(vec![l]),
            (Security::Plain, None, Latch::Signalled) => {
                Sources::Only(src.signalled.into_iter().collect())
            }
            (Security::Plain, None, Latch::FirstPackets(_)) => Sources::Any,
        }
    }

    /// Queues [`LegEvent::SourcesChanged`] when [`RtpLeg::sources`] says something new.
    fn note_sources(&mut self) {
        let now = self.sources();
        if now != self.told {
            self.told = now;
            self.queue.push_back(LegEvent::SourcesChanged);
        }
    }

    /// Latches RTP or RTCP to `from`, remembering it among the leg's peers.
    fn latch_to(&mut self, from: SocketAddr, rtcp: bool) {
        let src = self.source_mut(rtcp);
        if src.latched == Some(from) {
            return;
        }
        src.latched = Some(from);
        if !self.latched_peers.contains(&from) {
            if self.latched_peers.len() >= MAX_PEERS {
                self.latched_peers.remove(0);
            }
            self.latched_peers.push(from);
        }
        self.note_sources();
    }

    /// Whether the leg is open (a telephony leg is keyed from its start).
    pub fn is_connected(&self) -> bool {
        self.closed.is_none()
    }

    /// Why the leg ended, once it has.
    pub fn closed(&self) -> Option<CloseReason> {
        self.closed
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    fn source_mut(&mut self, rtcp: bool) -> &mut Source {
        if rtcp {
            &mut self.rtcp
        } else {
            &mut self.rtp
        }
    }

    /// Whether RTP (`rtcp` false) or RTCP from `from` is taken now: `Ok(true)` to unprotect it
    /// first (SDES: latched only once it authenticates, see [`RtpLeg::authenticated`]),
    /// `Ok(false)` to take it as it is (plain: latched here), or why it is dropped.
    pub fn admit(
        &mut self,
        from: SocketAddr,
        rtcp: bool,
        now: Instant,
    ) -> Result<bool, DropReason> {
        if self.closed.is_some() {
            return Err(DropReason::AfterClose);
        }
        let src = *self.source_mut(rtcp);
        if self.quarantine.holds(from, now) && src.signalled != Some(from) {
            return Err(DropReason::StaleSource);
        }
        match self.security {
            Security::Sdes { .. } => {
                let strict = self.config.strict_source;
                return match src.latched {
                    Some(l) if strict && l != from => Err(DropReason::UnlatchedSource),
                    _ => Ok(true),
                };
            }
            Security::Dtls(ref k) => {
                let strict = self.config.strict_source;
                return match (&k.keyed, src.latched) {
                    (None, _) => Err(DropReason::BeforeKeys),
                    (Some(_), Some(l)) if strict && l != from => Err(DropReason::UnlatchedSource),
                    (Some(_), _) => Ok(true),
                };
            }
            Security::Offered(_) => return Err(DropReason::BeforeKeys),
            Security::Plain if self.awaiting => return Err(DropReason::BeforeKeys),
            Security::Plain => {}
        }
        let ok = match (src.latched, self.config.latch) {
            (Some(l), _) => l == from,
            (None, Latch::Signalled) => src.signalled == Some(from),
            (None, Latch::FirstPackets(n)) => self.seen < n || src.signalled == Some(from),
        };
        if !ok {
            if !rtcp {
                self.seen = self.seen.saturating_add(1);
            }
            return Err(DropReason::UnlatchedSource);
        }
        self.latch_to(from, rtcp);
        if !rtcp {
            self.seen = self.seen.saturating_add(1);
        }
        self.last_admitted = now;
        Ok(false)
    }

    /// An SRTP (or SRTCP) packet from `from` authenticated: latch to its source.
    pub fn authenticated(&mut self, from: SocketAddr, rtcp: bool, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        self.latch_to(from, rtcp);
        self.last_admitted = now;
    }

    /// The context that unprotects what the phone sends (SDES legs).
    pub fn inbound_context(&mut self) -> Option<&mut Context> {
        match &mut self.security {
            Security::Plain | Security::Offered(_) => None,
            Security::Sdes { inbound, .. } => Some(inbound),
            Security::Dtls(k) => k.keyed.as_mut().map(|k| &mut k.inbound),
        }
    }

    /// The context that protects what we send the phone (SDES legs).
    pub fn outbound_context(&mut self) -> Option<&mut Context> {
        match &mut self.security {
            Security::Plain | Security::Offered(_) => None,
            Security::Sdes { outbound, .. } => Some(outbound),
            Security::Dtls(k) => k.keyed.as_mut().map(|k| &mut k.outbound),
        }
    }

    /// [`RtpConfig::dtmf_transcode`].
    pub fn dtmf_transcode(&self) -> bool {
        self.config.dtmf_transcode
    }

    /// [`RtpConfig::cn_transcode`].
    pub fn cn_transcode(&self) -> bool {
        self.config.cn_transcode
    }

    /// Sets [`RtpConfig::cn_transcode`] (a re-offer's codec flags can ask for it).
    pub fn set_cn_transcode(&mut self, on: bool) {
        self.config.cn_transcode = on;
    }

    /// Whether what we send is protected (SDES, DTLS-SRTP) or not (plain).
    pub fn protects(&self) -> bool {
        !matches!(self.security, Security::Plain)
    }

    /// Where media for the phone goes now: the latched source, else the signalled address
    /// (nowhere while our offer waits for its answer).
    pub fn media_destination(&self) -> Option<SocketAddr> {
        if self.closed.is_some() || self.awaiting {
            return None;
        }
        self.rtp.destination()
    }

    /// Where our RTCP for the phone goes now.
    pub fn rtcp_destination(&self) -> Option<SocketAddr> {
        if self.closed.is_some() {
            return None;
        }
        self.rtcp.destination()
    }

    fn close_with(&mut self, reason: CloseReason) {
        if self.closed.is_none() {
            self.closed = Some(reason);
            self.security = Security::Plain;
            self.queue.push_back(LegEvent::Closed(reason));
            self.note_sources();
        }
    }

    /// Ends the leg (the control plane's), reported as [`CloseReason::Ended`].
    pub fn close(&mut self, _now: Instant) {
        self.close_with(CloseReason::Ended);
    }

    /// Makes it a listener's leg: its peer is expected to send nothing, so no media timeout
    /// ends it ([`crate::shard::Shard::listen_to`]).
    pub fn listen_only(&mut self) {
        self.listening = true;
    }

    /// Advances time: the media timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        let timed_out = now >= self.last_admitted + self.config.media_timeout;
        if self.closed.is_none() && !self.listening && timed_out {
            self.close_with(CloseReason::MediaTimeout);
        }
        if let Security::Dtls(k) = &mut self.security {
            k.handle_timeout(now);
            self.drain_dtls(now);
        }
    }

    /// When [`RtpLeg::handle_timeout`] must next be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let media = (!self.listening).then(|| self.last_admitted + self.config.media_timeout);
        match &self.security {
            Security::Dtls(k) => match (k.poll_timeout(), media) {
                (Some(t), Some(m)) => Some(t.min(m)),
                (t, m) => t.or(m),
            },
            _ => media,
        }
    }

    /// Whether STUN answers, DTLS flights or events are queued.
    pub fn has_output(&self) -> bool {
        !self.queue.is_empty() || !self.transmits.is_empty()
    }

    /// The next STUN answer or DTLS flight, then the next event, then [`LegOutput::Timeout`],
    /// or `None` once closed with nothing left. A datagram's bytes are valid until the next
    /// call.
    pub fn poll_output(&mut self) -> Option<LegOutput<'_>> {
        if let Some((destination, via, buf, kind)) = self.transmits.pop_front() {
            let contents = self.lent.insert(buf);
            return Some(LegOutput::Transmit {
                destination,
                via,
                contents,
                kind,
            });
        }
        match self.queue.pop_front() {
            Some(e) => Some(LegOutput::Event(e)),
            None => self.poll_timeout().map(LegOutput::Timeout),
        }
    }

    /// Starts ICE with the phone: our credentials and host candidates in our SDP, its checks
    /// answered from now on.
    fn start_ice(&mut self) {
        if self.ice.is_some() {
            return;
        }
        let remote = self.peer_ice.as_ref().map(credentials);
        self.install_ice(Credentials::random(), remote);
    }

    /// The leg's ICE agent, with `local` credentials (`remote`: the phone's, once known),
    /// written into our SDP.
    fn install_ice(&mut self, local: Credentials, remote: Option<Credentials>) {
        let now = self.last_admitted;
        let agent = match remote {
            Some(r) => IceLite::new(IceConfig::default(), local, r, now),
            None => IceLite::offering(IceConfig::default(), local, now),
        };
        self.ice = Some(agent);
        self.write_ice();
        self.answer = write_rtp_sdp(self.origin, self.config.announce, &self.sdp);
    }

    /// Takes the phone's ICE credentials from its last SDP: the first ones its agent learns,
    /// or new ones (an ICE restart, RFC 8839 §4.4.1.1.2) answered with new credentials of ours.
    fn take_peer_ice(&mut self, now: Instant, offer: bool) {
        let (Some(ice), Some(peer)) = (self.ice.as_mut(), self.peer_ice.as_ref()) else {
            return;
        };
        let remote = credentials(peer);
        match ice.remote() {
            Some(r) if r.ufrag == remote.ufrag => {}
            Some(_) if offer => ice.restart(Credentials::random(), remote, now),
            _ => ice.set_remote(remote, now),
        }
    }

    /// Our ICE in the SDP section that carries the leg's port.
    fn write_ice(&mut self) {
        let Some(ice) = &self.ice else { return };
        let ip = self.config.announce;
        let Some(section) = self.sdp.iter_mut().find(|s| s.port.is_some()) else {
            return;
        };
        let mut candidates = vec![host_candidate(
            1,
            SocketAddr::new(ip, self.ports.rtp.port()),
        )];
        if section.rtcp != RtcpAnswer::Mux {
            candidates.push(host_candidate(
                2,
                SocketAddr::new(ip, self.ports.rtcp.port()),
            ));
        }
        let local = ice.local();
        section.ice = Some(IceAnswer {
            credentials: IceCredentials {
                ufrag: local.ufrag.clone(),
                pwd: local.pwd.clone(),
            },
            candidates,
        });
    }

    /// What a node taking it over needs besides its keys: its SRTP marks and its ICE.
    pub fn marks(&self) -> LegMarks {
        LegMarks {
            srtp: self.srtp_marks(),
            ice: self.ice_marks(),
            webrtc: None,
            dtls: match &self.security {
                Security::Dtls(k) => k.marks(),
                _ => None,
            },
        }
    }

    /// Where its ICE stands ([`IceMarks`]), when it does ICE.
    pub fn ice_marks(&self) -> Option<IceMarks> {
        let ice = self.ice.as_ref()?;
        Some(IceMarks {
            ufrag: ice.local().ufrag.clone(),
            pwd: ice.local().pwd.clone(),
            remote: ice.remote().map(|r| (r.ufrag.clone(), r.pwd.clone())),
            rtp: self.rtp.latched,
            rtcp: self.rtcp.latched,
        })
    }

    /// Takes the ICE a leg had on another node (a call taken over): the same credentials in
    /// our SDP and for the phone's checks, and media where the phone had nominated, before it
    /// sends anything here.
    pub fn resume_ice(&mut self, m: &IceMarks) {
        let (local, remote) = m.credentials();
        self.install_ice(local, remote);
        for (addr, rtcp) in [(m.rtp, false), (m.rtcp, true)] {
            if let Some(a) = addr {
                self.latch_to(a, rtcp);
            }
        }
    }

    /// Where RTP and RTCP go now (the SDP's addresses, or the sources latched to).
    fn signalled(&self) -> super::rtp_dtls::Signalled {
        (self.rtp.destination(), self.rtcp.destination())
    }

    /// The component ports a DTLS-SRTP leg's associations run on: RTP's, and RTCP's unless
    /// muxed.
    fn dtls_ports(&self) -> (Via, Option<Via>) {
        let rtp = Via::Port(self.ports.rtp.port());
        let rtcp = (!self.rtcp_mux && self.ports.rtcp != self.ports.rtp)
            .then(|| Via::Port(self.ports.rtcp.port()));
        (rtp, rtcp)
    }

    /// Starts a DTLS-SRTP leg's associations once its role and the peer's fingerprint are
    /// known (as the client, the first flight goes out now).
    fn start_dtls(&mut self, now: Instant) -> Result<(), RtpLegError> {
        let (ports, signalled) = (self.dtls_ports(), self.signalled());
        if let Security::Dtls(k) = &mut self.security {
            k.start(now, ports).map_err(RtpLegError::Dtls)?;
            for (from, via, d) in k.take_early() {
                let record = (from, via, d.as_slice());
                k.handle(
                    now,
                    record,
                    signalled,
                    &mut self.counters,
                    &mut self.transmits,
                );
            }
            self.drain_dtls(now);
        }
        Ok(())
    }

    /// What the associations made: flights queued, the leg keyed (or closed) as they say.
    fn drain_dtls(&mut self, now: Instant) {
        let signalled = self.signalled();
        let window = self.config.replay_window;
        let Security::Dtls(k) = &mut self.security else {
            return;
        };
        match k.drain(
            now,
            signalled,
            window,
            &mut self.transmits,
            &mut self.counters,
        ) {
            Ok(Some(event)) => {
                self.last_admitted = now;
                self.queue.push_back(event);
            }
            Ok(None) => {}
            Err(reason) => self.close_with(reason),
        }
    }

    /// A DTLS record that came to our port `via` from `from`: to the association there
    /// (dropped and counted on a leg not keyed by DTLS).
    pub fn handle_dtls(&mut self, now: Instant, from: SocketAddr, via: Via, datagram: &[u8]) {
        if self.closed.is_some() {
            return self.counters.drop(DropReason::AfterClose);
        }
        if self.quarantine.holds(from, now) {
            return self.counters.drop(DropReason::StaleSource);
        }
        let signalled = self.signalled();
        let k = match (&mut self.security, &mut self.dtls_alongside) {
            (Security::Dtls(k), _) | (_, Some(k)) => k,
            _ => return self.counters.drop(DropReason::UnknownKind),
        };
        let record = (from, via, datagram);
        k.handle(
            now,
            record,
            signalled,
            &mut self.counters,
            &mut self.transmits,
        );
        self.drain_dtls(now);
    }

    /// Whether a DTLS-SRTP leg's handshake has begun (other legs have none to begin).
    pub fn handshake_started(&self) -> bool {
        match &self.security {
            Security::Dtls(k) => k.started(),
            _ => true,
        }
    }

    /// A STUN message that came to our port `via` from `from`: a check the ICE agent answers
    /// (its answer queued to leave from the same port), the address it nominates taken as where
    /// RTP (or, on the RTCP port, RTCP) goes; dropped and counted without ICE.
    pub fn handle_stun(&mut self, now: Instant, from: SocketAddr, via: Via, msg: &Message<'_>) {
        if self.closed.is_some() {
            return self.counters.drop(DropReason::AfterClose);
        }
        let Some(ice) = self.ice.as_mut() else {
            return self.counters.drop(DropReason::UnknownKind);
        };
        if self.quarantine.holds(from, now) {
            return self.counters.drop(DropReason::StaleSource);
        }
        self.counters.stun_in += 1;
        if msg.class() == StunClass::Indication {
            return;
        }
        let rtcp = !self.rtcp_mux && via == Via::Port(self.ports.rtcp.port());
        // The answer lent out last time is written again (a STUN answer is < 512 bytes).
        let mut out = self.lent.take().unwrap_or_default();
        out.resize(512, 0);
        match ice.handle_binding(now, from, msg, &mut out) {
            Ok(outcome) => {
                out.truncate(outcome.response_len);
                self.transmits
                    .push_back((from, via, out, TransmitKind::Stun));
                if let Some(IceEvent::Selected(addr)) = outcome.event {
                    self.latch_to(addr, rtcp);
                }
            }
            Err(IceError::Unauthenticated(Some(n)) | IceError::RoleConflict(n)) => {
                self.counters.drop(DropReason::StunRejected);
                out.truncate(n);
                self.transmits
                    .push_back((from, via, out, TransmitKind::Stun));
            }
            Err(_) => self.counters.drop(DropReason::StunRejected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::sdp_rtp::parse_rtp;

    fn ports(base: u16) -> Ports {
        Ports {
            rtp: SocketAddr::from(([127, 0, 0, 2], base)),
            rtcp: SocketAddr::from(([127, 0, 0, 2], base + 1)),
        }
    }

    fn crypto_lines(sdp: &str) -> Vec<Zeroizing<String>> {
        sdp.lines()
            .filter_map(|l| l.strip_prefix("a=crypto:"))
            .map(|c| Zeroizing::new(c.to_owned()))
            .collect()
    }

    /// Later answers to one offer (a forked call's branches) may take other offered suites,
    /// and one taken before again: its SRTP state goes on where it stopped, never a fresh
    /// context for a key already used.
    #[test]
    fn later_answers_to_one_offer_switch_suites_without_reusing_a_key() {
        let now = Instant::now();
        let pcma = Codec {
            pt: 8,
            name: "PCMA".into(),
            clock_rate: 8000,
            channels: None,
            fmtp: None,
        };
        let spec = RtpOfferSpec {
            transport: secrelay_wire::sdp_rtp::Transport::RtpSavp,
            codecs: vec![(CodecId::Pcma, pcma)],
            suites: vec![Profile::AeadAes256Gcm, Profile::AesCm128HmacSha1_80],
            rtcp_mux: false,
            ptime: None,
        };
        let mut leg = RtpLeg::new_offer(&spec, ports(31000), RtpConfig::default(), now).unwrap();
        let answer = |line: &str| {
            parse_rtp(&format!(
                "v=0\r\no=- 1 1 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\n\
                 m=audio 9000 RTP/SAVP 8\r\na=crypto:{line}\r\n"
            ))
            .unwrap()
        };
        let gcm = "1 AEAD_AES_256_GCM inline:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKyw=";
        let cm = "2 AES_CM_128_HMAC_SHA1_80 inline:MjM0NTY3ODk6Ozw9Pj9AQUJDREVGR0hJSktMTU5P";
        let protect = |leg: &mut RtpLeg| {
            let mut p = vec![0x80, 8, 0, 1, 0, 0, 0, 160, 0, 0, 0, 9];
            p.extend([0xd5; 160]);
            let n = p.len();
            p.resize(n + 16, 0);
            leg.outbound_context().unwrap().protect_rtp(&mut p, n)
        };
        leg.accept_answer(&answer(gcm), now).unwrap();
        assert_eq!(leg.sdes_profile(), Some(Profile::AeadAes256Gcm));
        assert!(protect(&mut leg).is_ok());
        leg.accept_answer(&answer(cm), now).unwrap();
        assert_eq!(leg.sdes_profile(), Some(Profile::AesCm128HmacSha1_80));
        assert!(protect(&mut leg).is_ok(), "a suite's first packet");
        leg.accept_answer(&answer(gcm), now).unwrap();
        assert_eq!(leg.sdes_profile(), Some(Profile::AeadAes256Gcm));
        assert!(
            protect(&mut leg).is_err(),
            "the GCM context went on: the index it protected is not protected again"
        );
        assert!(leg.answer_sdp().contains("a=crypto:1 AEAD_AES_256_GCM "));
        // A suite never offered is not taken.
        let f8 = "3 AES_256_CM_HMAC_SHA1_80 inline:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkQ==";
        assert!(leg.accept_answer(&answer(f8), now).is_err());
    }

    /// A leg made again (another node's call taken over) with fresh keys takes the keys of
    /// the leg it replaces: the same crypto lines in its SDP, and its outbound context
    /// protects as the first one's does (what the phone opens).
    #[test]
    fn a_leg_made_again_takes_the_keys_its_phone_holds() {
        let offer = parse_rtp(
            "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
             m=audio 4000 RTP/SAVP 0\r\n\
             a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n",
        )
        .unwrap();
        let now = Instant::now();
        let mut first = RtpLeg::new(&offer, ports(30000), RtpConfig::default(), now).unwrap();
        let mut again = RtpLeg::new(&offer, ports(30000), RtpConfig::default(), now).unwrap();
        let held = crypto_lines(first.answer_sdp());
        assert_eq!(held.len(), 1);
        assert_ne!(crypto_lines(again.answer_sdp()), held, "fresh keys differ");
        again.restore_keys(&held).unwrap();
        assert_eq!(crypto_lines(again.answer_sdp()), held);
        let rtp = |seq: u8| {
            let mut p = vec![0x80, 0, 0, seq, 0, 0, 0, 1, 0, 0, 0, 7];
            p.extend_from_slice(&[0xd5; 160]);
            p
        };
        for seq in 1..3 {
            let (mut a, mut b) = (rtp(seq), rtp(seq));
            let n = a.len();
            a.resize(n + 16, 0);
            b.resize(n + 16, 0);
            let la = first
                .outbound_context()
                .unwrap()
                .protect_rtp(&mut a, n)
                .unwrap();
            let lb = again
                .outbound_context()
                .unwrap()
                .protect_rtp(&mut b, n)
                .unwrap();
            assert_eq!(a[..la], b[..lb]);
        }
        // A key that does not fit its suite is refused, naming the SRTP error.
        let bad = vec![Zeroizing::new(
            "1 AES_CM_128_HMAC_SHA1_80 inline:c2hvcnQ=".to_owned(),
        )];
        assert!(matches!(
            again.restore_keys(&bad),
            Err(RtpLegError::Srtp(_))
        ));
    }

    fn events(leg: &mut RtpLeg) -> usize {
        let mut n = 0;
        while let Some(o) = leg.poll_output() {
            match o {
                LegOutput::Event(LegEvent::SourcesChanged) => n += 1,
                LegOutput::Timeout(_) => break,
                _ => {}
            }
        }
        n
    }

    /// What a filter by source address may pass to a leg's ports never leaves out what the leg
    /// takes, and is told (one event per change): a plain leg's signalled address, then its
    /// latched source; a leg still latching and an SDES leg that follows its phone take
    /// anyone; a strict SDES leg its latched source; a closed leg nobody.
    #[test]
    fn a_legs_sources_follow_its_latch_and_are_told_when_they_change() {
        let sdp = |profile: &str, crypto: &str| {
            parse_rtp(&format!(
                "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
                 m=audio 4000 {profile} 0\r\n{crypto}"
            ))
            .unwrap()
        };
        let now = Instant::now();
        let signalled = SocketAddr::from(([192, 0, 2, 1], 4000));
        let rtcp = SocketAddr::from(([192, 0, 2, 1], 4001));
        let natted = SocketAddr::from(([203, 0, 113, 9], 61000));
        let only = |a: &[SocketAddr]| Sources::Only(a.to_vec());

        // Plain, signalled latch: the SDP's addresses, on each port.
        let plain = sdp("RTP/AVP", "");
        let mut leg = RtpLeg::new(&plain, ports(30000), RtpConfig::default(), now).unwrap();
        assert_eq!(
            leg.sources(),
            vec![(30000, only(&[signalled])), (30001, only(&[rtcp]))]
        );
        assert_eq!(events(&mut leg), 1, "told once it is made");
        assert_eq!(leg.admit(signalled, false, now), Ok(false));
        assert_eq!(
            events(&mut leg),
            0,
            "latching to the signalled address changes nothing"
        );
        leg.close(now);
        assert_eq!(leg.sources(), vec![(30000, only(&[])), (30001, only(&[]))]);
        assert_eq!(events(&mut leg), 1);

        // Plain behind NAT: anyone until the first source, then that one only.
        let config = RtpConfig {
            latch: Latch::FirstPackets(5),
            ..RtpConfig::default()
        };
        let mut leg = RtpLeg::new(&plain, ports(30002), config.clone(), now).unwrap();
        assert_eq!(leg.sources()[0], (30002, Sources::Any));
        events(&mut leg);
        assert_eq!(leg.admit(natted, false, now), Ok(false));
        assert_eq!(leg.sources()[0], (30002, only(&[natted])));
        assert_eq!(events(&mut leg), 1);
        assert_eq!(
            leg.sources()[1],
            (30003, Sources::Any),
            "RTCP has not latched yet"
        );

        // SDES: anyone (authenticated), unless strict, and then its latched source once latched.
        let sdes = sdp(
            "RTP/SAVP",
            "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n",
        );
        let mut leg = RtpLeg::new(&sdes, ports(30004), RtpConfig::default(), now).unwrap();
        leg.authenticated(natted, false, now);
        assert_eq!(leg.sources()[0], (30004, Sources::Any));
        let strict = RtpConfig {
            strict_source: true,
            ..RtpConfig::default()
        };
        let mut leg = RtpLeg::new(&sdes, ports(30006), strict, now).unwrap();
        events(&mut leg);
        leg.authenticated(natted, false, now);
        assert_eq!(leg.sources()[0], (30006, only(&[natted])));
        assert_eq!(events(&mut leg), 1);
    }

    /// A full agent's check from `from` to our port `via` (USERNAME `ours:theirs`, integrity
    /// with `pwd`, USE-CANDIDATE).
    fn check(
        leg: &mut RtpLeg,
        from: SocketAddr,
        via: Via,
        (ours, theirs, pwd): (&str, &str, &str),
    ) {
        use secrelay_wire::stun::{attr, Class, MessageBuilder, BINDING};
        let mut buf = [0u8; 256];
        let n = MessageBuilder::new(&mut buf, Class::Request, BINDING, [3; 12])
            .attribute(attr::USERNAME, format!("{ours}:{theirs}").as_bytes())
            .attribute(attr::PRIORITY, &1u32.to_be_bytes())
            .attribute(attr::ICE_CONTROLLING, &9u64.to_be_bytes())
            .attribute(attr::USE_CANDIDATE, &[])
            .integrity(pwd.as_bytes())
            .fingerprint()
            .unwrap();
        let msg = Message::parse(&buf[..n]).unwrap();
        leg.handle_stun(Instant::now(), from, via, &msg);
    }

    fn our_ice(sdp: &str) -> (String, String, Vec<String>) {
        let v = |k: &str| {
            sdp.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap()
                .to_owned()
        };
        let c = sdp.lines().filter_map(|l| l.strip_prefix("a=candidate:"));
        (
            v("a=ice-ufrag:"),
            v("a=ice-pwd:"),
            c.map(str::to_owned).collect(),
        )
    }

    #[test]
    fn a_leg_answers_an_ice_phone_as_a_lite_agent_and_sends_where_it_nominates() {
        let offer = |ufrag: &str| {
            parse_rtp(&format!(
                "v=0\r\no=- 1 1 IN IP4 10.0.0.5\r\ns=-\r\nc=IN IP4 10.0.0.5\r\nt=0 0\r\n\
                 a=ice-ufrag:{ufrag}\r\na=ice-pwd:{ufrag}-password-0123456789\r\n\
                 m=audio 4000 RTP/AVP 0\r\n"
            ))
            .unwrap()
        };
        let now = Instant::now();
        let made = RtpLeg::new(&offer("ph1"), ports(30000), RtpConfig::default(), now).unwrap();
        let mut leg = RtpLegOptions::default().finish(made).unwrap();
        let sdp = leg.answer_sdp().to_owned();
        assert!(sdp.contains("\r\na=ice-lite\r\nm=audio"), "{sdp}");
        let (ufrag, pwd, candidates) = our_ice(&sdp);
        let announce = RtpConfig::default().announce;
        assert_eq!(
            candidates,
            [
                format!("1 1 UDP 2130706431 {announce} 30000 typ host"),
                format!("1 2 UDP 2130706430 {announce} 30001 typ host"),
            ]
        );
        assert_eq!(
            leg.sources()[0].1,
            Sources::Any,
            "checks come from any candidate"
        );

        // The phone's checks from behind a NAT, on each port: answered from that port, and
        // what they nominate is where RTP and RTCP go.
        let natted = SocketAddr::from(([203, 0, 113, 9], 61000));
        let natted_rtcp = SocketAddr::from(([203, 0, 113, 9], 61001));
        check(&mut leg, natted, Via::Port(30000), (&ufrag, "ph1", &pwd));
        check(
            &mut leg,
            natted_rtcp,
            Via::Port(30001),
            (&ufrag, "ph1", &pwd),
        );
        let mut sent = Vec::new();
        while let Some(LegOutput::Transmit {
            destination,
            via,
            contents,
            ..
        }) = leg.poll_output()
        {
            let m = Message::parse(contents).unwrap();
            assert_eq!(m.class(), StunClass::Success);
            assert_eq!(m.xor_mapped_address(), Some(destination));
            sent.push((destination, via));
        }
        assert_eq!(
            sent,
            [(natted, Via::Port(30000)), (natted_rtcp, Via::Port(30001))]
        );
        assert_eq!(leg.media_destination(), Some(natted));
        assert_eq!(leg.rtcp_destination(), Some(natted_rtcp));

        // A wrong password: a 401 and nothing latched; a stranger's ufrag: no answer.
        let other = SocketAddr::from(([198, 51, 100, 1], 5000));
        check(&mut leg, other, Via::Port(30000), (&ufrag, "ph1", "wrong"));
        check(&mut leg, other, Via::Port(30000), ("someone", "ph1", &pwd));
        assert!(matches!(
            leg.poll_output(),
            Some(LegOutput::Transmit { .. })
        ));
        assert!(!matches!(
            leg.poll_output(),
            Some(LegOutput::Transmit { .. })
        ));
        assert_eq!(leg.counters().drops[DropReason::StunRejected], 2);
        assert_eq!(leg.media_destination(), Some(natted));

        // A re-INVITE with the same credentials keeps ours; new ones restart ICE with new ours.
        leg.take_offer(&offer("ph1"), now).unwrap();
        assert_eq!(our_ice(leg.answer_sdp()).0, ufrag);
        leg.take_offer(&offer("ph2"), now).unwrap();
        let (restarted, new_pwd, _) = our_ice(leg.answer_sdp());
        assert_ne!(restarted, ufrag);
        check(
            &mut leg,
            natted,
            Via::Port(30000),
            (&restarted, "ph2", &new_pwd),
        );
        assert!(matches!(
            leg.poll_output(),
            Some(LegOutput::Transmit { .. })
        ));

        // Without ICE (ICE: remove), a check is no kind of packet the leg takes.
        let made = RtpLeg::new(&offer("ph1"), ports(30002), RtpConfig::default(), now).unwrap();
        let options = RtpLegOptions {
            ice: IceMode::Off,
            ..RtpLegOptions::default()
        };
        let mut plain = options.finish(made).unwrap();
        assert!(
            !plain.answer_sdp().contains("a=ice"),
            "{}",
            plain.answer_sdp()
        );
        check(&mut plain, natted, Via::Port(30002), (&ufrag, "ph1", &pwd));
        assert_eq!(plain.counters().drops[DropReason::UnknownKind], 1);
        assert!(!matches!(
            plain.poll_output(),
            Some(LegOutput::Transmit { .. })
        ));
    }

    #[test]
    fn a_leg_made_again_keeps_its_ice_credentials_and_the_nominated_addresses() {
        let offer = parse_rtp(
            "v=0\r\no=- 1 1 IN IP4 10.0.0.5\r\ns=-\r\nc=IN IP4 10.0.0.5\r\nt=0 0\r\n\
             a=ice-ufrag:ph1\r\na=ice-pwd:ph1-password-0123456789\r\n\
             m=audio 4000 RTP/AVP 0\r\n",
        )
        .unwrap();
        let now = Instant::now();
        let made = RtpLeg::new(&offer, ports(30000), RtpConfig::default(), now).unwrap();
        let mut leg = RtpLegOptions::default().finish(made).unwrap();
        let (ufrag, pwd, _) = our_ice(leg.answer_sdp());
        let natted = SocketAddr::from(([203, 0, 113, 9], 61000));
        check(&mut leg, natted, Via::Port(30000), (&ufrag, "ph1", &pwd));
        let marks = leg.marks();
        let ice = marks.ice.clone().expect("ICE marks");
        assert_eq!(ice.rtp, Some(natted));
        assert!(
            !format!("{ice:?}").contains(&pwd),
            "no password in Debug: {ice:?}"
        );

        // The node dies; the leg is made again from the same offer on the same ports.
        let made = RtpLeg::new(&offer, ports(30000), RtpConfig::default(), now).unwrap();
        let options = RtpLegOptions {
            resume: Some(Resume {
                ice: Some(ice),
                ..Resume::default()
            }),
            ..RtpLegOptions::default()
        };
        let mut again = options.finish(made).unwrap();
        let (ufrag2, pwd2, _) = our_ice(again.answer_sdp());
        assert_eq!(
            (ufrag2, pwd2),
            (ufrag.clone(), pwd.clone()),
            "the phone's credentials still work"
        );
        assert_eq!(
            again.media_destination(),
            Some(natted),
            "before the phone sends anything"
        );
        check(&mut again, natted, Via::Port(30000), (&ufrag, "ph1", &pwd));
        let answered = matches!(again.poll_output(), Some(LegOutput::Transmit { .. }));
        assert!(answered, "its consent checks are answered");
        assert_eq!(again.marks(), marks);
    }
}
