//! A room's members, of several kinds behind one interface: a [`Leg`].
//!
//! A leg terminates one participant's transport and security: for a WebRTC participant
//! ([`WebRtcLeg`]) that is ICE-lite, DTLS-SRTP and the SRTP contexts its keys make. What the
//! room and the shard need from any leg is here: the media sections it negotiated (codecs,
//! payload types, receive slots), whether media from an address may be unprotected now and
//! with which context, where protected copies go, its timers and control datagrams, and its
//! [`Counters`]. Routing, batching and re-protection are written against [`Leg`] only, so a
//! new kind of leg (SDES-SRTP, plain RTP, a trunk to another node) is a new variant here and
//! touches no routing.
//!
//! Media itself never passes through a leg's own methods: the shard unprotects and protects
//! it in batches with the leg's contexts ([`Leg::inbound_context`],
//! [`Leg::outbound_context`]). A leg's control traffic (STUN answers, DTLS flights) and its
//! events come out of [`Leg::poll_output`].
//!
//! # Drive contract
//! After every input ([`Leg::handle_stun`], [`Leg::handle_dtls`], [`Leg::handle_timeout`],
//! [`Leg::close`]), call [`Leg::poll_output`] until it returns [`LegOutput::Timeout`] or
//! `None` (closed, nothing left to send).

pub mod data;
pub mod pipe;
pub mod rtp;
mod rtp_dtls;
pub mod webrtc;

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::FailReason;
use secrelay_media::registry::Fmtp;
use secrelay_srtp::{Context, Profile};
use secrelay_wire::sdp::{Codec, MediaKind};
use secrelay_wire::stun::Message;

use crate::counters::{Counters, DropReason, EndReason};
pub use data::{DataLimits, DataLink, DataMessage};
pub use pipe::{MirrorSpec, PipeKey, PipeLeg, PIPE_KEY_LEN};
pub use rtp::{
    DtlsChoice, IceMarks, IceMode, Latch, LegMarks, Ports, Quarantine, Resume, RtpConfig, RtpLeg,
    RtpLegError, RtpLegOptions, RtpOfferSpec, Sources, SrtpMark,
};
pub use rtp_dtls::{DtlsMarks, RtpDtls};
pub use webrtc::{WebRtcConfig, WebRtcError, WebRtcLeg, WebRtcMarks, WebRtcOfferSection};

/// A codec the gateway forwards (and, for audio, transcodes through `secrelay_media`'s
/// registry), identified independently of payload type numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum CodecId {
    /// Opus, 48 kHz.
    Opus,
    /// G.711 µ-law, 8 kHz.
    Pcmu,
    /// G.711 A-law, 8 kHz.
    Pcma,
    /// G.722 (16 kHz audio, RTP clock 8000 as RFC 3551 says).
    G722,
    /// RFC 4733 telephone-events (DTMF) at 8000 Hz, beside G.711 and G.722.
    TelephoneEvent,
    /// RFC 4733 telephone-events at 48000 Hz, beside Opus.
    TelephoneEvent48k,
    /// VP8, 90 kHz.
    Vp8,
    /// H.264, 90 kHz (any profile: the first offered H.264 payload type of our preference is
    /// the one a receiver gets).
    H264,
    /// AMR narrowband (RFC 4867), 8 kHz, in the octet-aligned payload format
    /// (`octet-align=1`): what the gateway offers when it adds AMR.
    AmrOctet,
    /// AMR narrowband in the bandwidth-efficient payload format (the RFC's default). The two
    /// payload formats are different formats (RFC 4867 §8.3.1: an answer keeps the offer's
    /// `octet-align`), so they are two codecs here.
    Amr,
    /// AMR wideband (RFC 4867), 16 kHz, octet-aligned.
    AmrWbOctet,
    /// AMR wideband, bandwidth-efficient.
    AmrWb,
    /// RFC 4733 telephone-events at 16000 Hz, beside AMR-WB (and any 16 kHz audio).
    TelephoneEvent16k,
    /// RFC 3389 comfort noise at 8000 Hz (`CN/8000`, static payload type 13), beside 8 kHz
    /// audio: carried beside the audio like telephone-events, never the audio codec itself.
    /// Between a side with it and one without, made into noise one way and from silence the
    /// other (`crate::transcode::Cn`). At other clocks it is a format the gateway only relays.
    ComfortNoise,
    /// A format the gateway relays without knowing it (G.729, EVS, CN at 16 kHz, H.263,
    /// telephone-events at another clock, …): relaying needs no decoder. Told apart by a hash
    /// of its encoding name (case-insensitive), clock rate and channels ([`CodecId::passthrough`]);
    /// never transcoded.
    Other(u64),
}

impl CodecId {
    /// Every codec the gateway knows.
    pub const ALL: [CodecId; 14] = [
        CodecId::Opus,
        CodecId::Pcmu,
        CodecId::Pcma,
        CodecId::G722,
        CodecId::TelephoneEvent,
        CodecId::TelephoneEvent48k,
        CodecId::Vp8,
        CodecId::H264,
        CodecId::AmrOctet,
        CodecId::Amr,
        CodecId::AmrWbOctet,
        CodecId::AmrWb,
        CodecId::TelephoneEvent16k,
        CodecId::ComfortNoise,
    ];

    /// The audio codecs (and telephone-events) legs accept by default, most preferred first.
    pub const DEFAULT_AUDIO: [CodecId; 6] = [
        CodecId::Opus,
        CodecId::Pcmu,
        CodecId::Pcma,
        CodecId::G722,
        CodecId::TelephoneEvent48k,
        CodecId::TelephoneEvent,
    ];

    /// The encoding name (as in `a=rtpmap`).
    pub fn name(self) -> &'static str {
        match self {
            CodecId::Opus => "opus",
            CodecId::Pcmu => "PCMU",
            CodecId::Pcma => "PCMA",
            CodecId::G722 => "G722",
            CodecId::TelephoneEvent | CodecId::TelephoneEvent48k | CodecId::TelephoneEvent16k => {
                "telephone-event"
            }
            CodecId::Vp8 => "VP8",
            CodecId::H264 => "H264",
            CodecId::Amr | CodecId::AmrOctet => "AMR",
            CodecId::AmrWb | CodecId::AmrWbOctet => "AMR-WB",
            CodecId::ComfortNoise => "CN",
            CodecId::Other(_) => "passthrough",
        }
    }

    /// The RTP clock rate.
    pub fn clock_rate(self) -> u32 {
        match self {
            CodecId::Opus | CodecId::TelephoneEvent48k => 48_000,
            CodecId::Pcmu
            | CodecId::Pcma
            | CodecId::G722
            | CodecId::TelephoneEvent
            | CodecId::Amr
            | CodecId::AmrOctet
            | CodecId::ComfortNoise => 8_000,
            CodecId::AmrWb | CodecId::AmrWbOctet | CodecId::TelephoneEvent16k => 16_000,
            CodecId::Vp8 | CodecId::H264 => 90_000,
            // Not known here: the SDP that named it says.
            CodecId::Other(_) => 0,
        }
    }

    /// Whether this is an audio codec or telephone-events (else video). A passthrough format
    /// counts as audio: it is relayed as it is, with none of the video handling (keyframe
    /// requests, simulcast layers) the gateway gives the video codecs it knows.
    pub fn is_audio(self) -> bool {
        !matches!(self, CodecId::Vp8 | CodecId::H264)
    }

    /// Whether this is RFC 4733 telephone-events (carried beside audio, never decoded).
    pub const fn is_event(self) -> bool {
        matches!(
            self,
            CodecId::TelephoneEvent | CodecId::TelephoneEvent16k | CodecId::TelephoneEvent48k
        )
    }

    /// Whether it is carried beside an audio codec rather than being one: telephone-events
    /// and comfort noise. Never what a receiver is sent transcoded audio in, never the codec a
    /// section is answered in.
    pub const fn is_supplemental(self) -> bool {
        self.is_event() || matches!(self, CodecId::ComfortNoise)
    }

    /// Whether the gateway can decode and encode it (an audio codec of the media registry):
    /// what transcoding and mixing can take and give. AMR only where its libraries load
    /// (`secrelay_media::amr`); without them it is relayed like a format the gateway does not
    /// know.
    pub fn is_transcodable(self) -> bool {
        match self {
            CodecId::Opus | CodecId::Pcmu | CodecId::Pcma | CodecId::G722 => true,
            _ => self.amr_band().is_some_and(secrelay_media::amr::amr_loads),
        }
    }

    /// Whether this is AMR (either band, either payload format).
    pub fn is_amr(self) -> bool {
        self.amr_band().is_some()
    }

    /// AMR's band, when this is AMR.
    pub fn amr_band(self) -> Option<secrelay_media::amr::Band> {
        use secrelay_media::amr::Band;
        match self {
            CodecId::Amr | CodecId::AmrOctet => Some(Band::Narrow),
            CodecId::AmrWb | CodecId::AmrWbOctet => Some(Band::Wide),
            _ => None,
        }
    }

    /// Whether this is AMR in the octet-aligned payload format.
    pub fn is_octet_aligned(self) -> bool {
        matches!(self, CodecId::AmrOctet | CodecId::AmrWbOctet)
    }

    /// The telephone-event format at this audio codec's clock rate (RFC 4733 §2.1: events
    /// use the clock of the audio they go with).
    pub fn event_for_clock(clock_rate: u32) -> Option<CodecId> {
        match clock_rate {
            8_000 => Some(CodecId::TelephoneEvent),
            16_000 => Some(CodecId::TelephoneEvent16k),
            48_000 => Some(CodecId::TelephoneEvent48k),
            _ => None,
        }
    }

    /// How we offer it when nobody said: the static payload types of G.711 and G.722 (0, 8,
    /// 9), 111 for Opus (stereo, in-band FEC), 101 and 126 for telephone-events, 13 for comfort
    /// noise, 96 and 102 for the video codecs.
    pub fn offer_codec(self) -> Codec {
        let (pt, channels, fmtp) = match self {
            CodecId::Opus => (111, Some(2), Some("minptime=10;useinbandfec=1")),
            CodecId::Pcmu => (0, None, None),
            CodecId::Pcma => (8, None, None),
            CodecId::G722 => (9, None, None),
            CodecId::TelephoneEvent => (101, None, Some("0-16")),
            CodecId::TelephoneEvent48k => (126, None, Some("0-16")),
            CodecId::TelephoneEvent16k => (96, None, Some("0-16")),
            CodecId::Vp8 => (96, None, None),
            CodecId::H264 => (
                102,
                None,
                Some("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"),
            ),
            // What rtpengine offers when it adds AMR.
            CodecId::AmrOctet | CodecId::AmrWbOctet => {
                (96, None, Some("octet-align=1;mode-change-capability=2"))
            }
            CodecId::Amr | CodecId::AmrWb => (96, None, Some("mode-change-capability=2")),
            CodecId::ComfortNoise => (13, None, None),
            CodecId::Other(_) => (96, None, None),
        };
        Codec {
            pt,
            name: self.name().to_owned(),
            clock_rate: self.clock_rate(),
            channels,
            fmtp: fmtp.map(str::to_owned),
        }
    }

    /// Its place in [`CodecId::ALL`]; `None` for [`CodecId::Other`]. What tables of the
    /// known codecs are indexed by (no search on a copy's path).
    pub const fn known_index(self) -> Option<usize> {
        Some(match self {
            CodecId::Opus => 0,
            CodecId::Pcmu => 1,
            CodecId::Pcma => 2,
            CodecId::G722 => 3,
            CodecId::TelephoneEvent => 4,
            CodecId::TelephoneEvent48k => 5,
            CodecId::Vp8 => 6,
            CodecId::H264 => 7,
            CodecId::AmrOctet => 8,
            CodecId::Amr => 9,
            CodecId::AmrWbOctet => 10,
            CodecId::AmrWb => 11,
            CodecId::TelephoneEvent16k => 12,
            CodecId::ComfortNoise => 13,
            CodecId::Other(_) => return None,
        })
    }

    /// The codec an offered `a=rtpmap` names, if we know it (AMR by its `octet-align` too).
    pub fn of(codec: &Codec) -> Option<CodecId> {
        CodecId::ALL.into_iter().find(|c| {
            codec.is(c.name(), c.clock_rate())
                && (!c.is_amr()
                    || c.is_octet_aligned() == (fmtp(codec).flag("octet-align") == Some(true)))
        })
    }

    /// The codec an offered format is, known or not: [`CodecId::of`], else
    /// [`CodecId::Other`] keyed by its name (case-insensitive), clock rate and channels (one
    /// when not given); a format without a name by its payload type.
    pub fn passthrough(codec: &Codec) -> CodecId {
        if let Some(id) = CodecId::of(codec) {
            return id;
        }
        // FNV-1a: stable across runs and processes, so both sides of a call agree.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        if codec.name.is_empty() {
            eat(&[b'#', codec.pt]);
        } else {
            eat(codec.name.to_ascii_lowercase().as_bytes());
            eat(&codec.clock_rate.to_be_bytes());
            eat(&codec.channels.unwrap_or(1).to_be_bytes());
        }
        CodecId::Other(h)
    }

    /// The codec an ng `codec` flag or an API request names (`opus`, `PCMU`, `G722`,
    /// `telephone-event`; case-insensitive; an `/8000`-style clock rate may follow).
    pub fn by_name(name: &str) -> Option<CodecId> {
        let mut it = name.split('/');
        let base = it.next()?.trim();
        let clock: Option<u32> = match it.next() {
            Some(c) => Some(c.trim().parse().ok()?),
            None => None,
        };
        CodecId::ALL.into_iter().find(|c| {
            c.name().eq_ignore_ascii_case(base)
                && clock.map_or(
                    // Bare `telephone-event` is the 8 kHz one.
                    *c == CodecId::TelephoneEvent || !c.is_event(),
                    |k| k == c.clock_rate(),
                )
        })
    }
}

/// A codec's `a=fmtp`, parsed as the media registry parses one.
fn fmtp(codec: &Codec) -> Fmtp {
    codec.fmtp.as_deref().map(Fmtp::parse).unwrap_or_default()
}

/// The AMR modes a peer takes in what it is sent, as a bit set (bit N: mode N), from the
/// `mode-set` of its `a=fmtp` for `codec` (RFC 4867 §8.1, `Band::mode_set`); `None` when it
/// names none of AMR's modes (any mode) or `codec` is not AMR.
pub fn amr_mode_set(id: CodecId, codec: &Codec) -> Option<u16> {
    id.amr_band()?.mode_set(&fmtp(codec))
}

/// One answered media section: what we agreed on. Serialized for another node's replica of
/// a room (a publisher's sections as its mirror there has them).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NegotiatedMedia {
    /// The section's mid.
    pub mid: String,
    /// Audio or video.
    #[serde(with = "media_kind_serde")]
    pub kind: MediaKind,
    /// Codecs accepted with the offerer's payload types, in the order of the peer's offer (or
    /// answer): its preference first, what it is sent transcoded audio in
    /// ([`crate::transcode::Format::for_receiver`]). The SDP answer lists them in ours.
    pub codecs: Vec<(CodecId, u8)>,
    /// Whether the participant sends on this section.
    pub peer_sends: bool,
    /// Whether the participant receives on this section.
    pub peer_receives: bool,
    /// The SSRC of what we send on this section (its receive slot, see [`crate::room`]),
    /// announced in the answer when the participant receives on it.
    pub our_ssrc: u32,
    /// RTCP feedback and retransmission agreed on for the section.
    pub feedback: SectionFeedback,
    /// Header extensions agreed on for the section, with the ids the SDP gave them.
    pub extmaps: Vec<(u8, HeaderExt)>,
    /// Simulcast layers the peer sends on the section (their rids, in its order: RFC 8853),
    /// told apart by the `rid` header extension; empty without simulcast.
    pub simulcast: Vec<String>,
    /// The packet time the peer asked for (`a=ptime`, ms), if it did: what transcoded audio
    /// for it is framed in (20 ms when it did not say).
    pub ptime: Option<u32>,
    /// The AMR mode transcoded audio is sent to the peer in, when it takes AMR: the highest
    /// its `mode-set` allows (at most the bitrate the gateway was told to send), or `None` for
    /// the encoder's default ([`amr_mode_set`], [`choose_amr_mode`]).
    #[serde(default)]
    pub amr_mode: Option<u8>,
}

/// The AMR mode to send a peer whose `mode-set` is `set` (`None`: any mode), at most
/// `cap` (the mode of a bitrate the gateway was told to send) when given: the highest allowed
/// mode not above `cap`, else the lowest allowed one. `None` (the encoder's default) when
/// neither restricts.
pub fn choose_amr_mode(set: Option<u16>, cap: Option<u8>) -> Option<u8> {
    let Some(set) = set else {
        return cap;
    };
    let allowed = |m: u8| set & (1 << m) != 0;
    let top = cap.unwrap_or(15);
    (0..=top.min(15))
        .rev()
        .find(|m| allowed(*m))
        .or_else(|| (0..16).find(|m| allowed(*m)))
}

/// The RTP header extensions the gateway reads or writes (RFC 8285 `a=extmap` URIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum HeaderExt {
    /// The media section a packet belongs to (RFC 8843 BUNDLE, `sdes:mid`).
    Mid,
    /// A simulcast layer's id (RFC 8852 `sdes:rtp-stream-id`).
    Rid,
    /// The layer a retransmission repairs (RFC 8852 `sdes:repaired-rtp-stream-id`).
    RepairedRid,
    /// The sender's send time (webrtc.org `abs-send-time`).
    AbsSendTime,
    /// A transport-wide sequence number (transport-cc).
    TransportCc,
    /// The audio level of the packet (RFC 6464).
    AudioLevel,
}

impl HeaderExt {
    /// Every extension the gateway negotiates.
    pub const ALL: [HeaderExt; 6] = [
        HeaderExt::Mid,
        HeaderExt::Rid,
        HeaderExt::RepairedRid,
        HeaderExt::AbsSendTime,
        HeaderExt::TransportCc,
        HeaderExt::AudioLevel,
    ];

    /// Its URI in `a=extmap`.
    pub fn uri(self) -> &'static str {
        match self {
            HeaderExt::Mid => "urn:ietf:params:rtp-hdrext:sdes:mid",
            HeaderExt::Rid => "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id",
            HeaderExt::RepairedRid => "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id",
            HeaderExt::AbsSendTime => "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
            HeaderExt::TransportCc => {
                "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
            }
            HeaderExt::AudioLevel => "urn:ietf:params:rtp-hdrext:ssrc-audio-level",
        }
    }

    /// The extension an `a=extmap` URI names, if the gateway negotiates it.
    pub fn of(uri: &str) -> Option<HeaderExt> {
        HeaderExt::ALL.into_iter().find(|e| e.uri() == uri)
    }
}

/// The ids a member's SDP gave the header extensions the gateway uses (0: not agreed on).
/// WebRTC bundles its sections on one transport and gives each URI one id across them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtIds {
    /// `sdes:mid`.
    pub mid: u8,
    /// `sdes:rtp-stream-id`.
    pub rid: u8,
    /// `sdes:repaired-rtp-stream-id`.
    pub repaired_rid: u8,
    /// `abs-send-time`.
    pub abs_send_time: u8,
    /// transport-cc.
    pub twcc: u8,
    /// `ssrc-audio-level`.
    pub audio_level: u8,
}

impl ExtIds {
    /// The ids of `media`'s sections (the first section that names an extension wins).
    pub fn of(media: &[NegotiatedMedia]) -> ExtIds {
        let mut ids = ExtIds::default();
        for (id, e) in media.iter().flat_map(|m| m.extmaps.iter()) {
            let slot = match e {
                HeaderExt::Mid => &mut ids.mid,
                HeaderExt::Rid => &mut ids.rid,
                HeaderExt::RepairedRid => &mut ids.repaired_rid,
                HeaderExt::AbsSendTime => &mut ids.abs_send_time,
                HeaderExt::TransportCc => &mut ids.twcc,
                HeaderExt::AudioLevel => &mut ids.audio_level,
            };
            if *slot == 0 {
                *slot = *id;
            }
        }
        ids
    }

    /// Whether the member agreed on any extension the gateway writes in what it sends it.
    pub fn rewritten(&self) -> bool {
        self.mid != 0 || self.abs_send_time != 0 || self.twcc != 0 || self.audio_level != 0
    }
}

/// What a section agreed on beyond its codecs: RTCP feedback (RFC 4585, 5104) and
/// retransmission (RFC 4588). Telephony legs agree on none.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SectionFeedback {
    /// Generic NACKs (`nack`): the peer asks for what it lost, answered from what we sent.
    pub nack: bool,
    /// Picture loss indications (`nack pli`).
    pub pli: bool,
    /// Full intra requests (`ccm fir`).
    pub fir: bool,
    /// Retransmission payload types: (`rtx` payload type, the payload type it repairs).
    pub rtx: Vec<(u8, u8)>,
    /// Our retransmission SSRC on the section (announced with `a=ssrc-group:FID`).
    pub rtx_ssrc: u32,
    /// The peer's retransmission SSRCs on the section, by the primary SSRC they repair
    /// (`a=ssrc-group:FID` of its SDP).
    pub peer_rtx: Vec<(u32, u32)>,
}

impl SectionFeedback {
    /// The retransmission payload type that repairs `pt`, if RTX was agreed for it.
    pub fn rtx_pt(&self, pt: u8) -> Option<u8> {
        self.rtx.iter().find(|(_, apt)| *apt == pt).map(|(r, _)| *r)
    }

    /// The payload type a retransmission payload type `rtx` repairs.
    pub fn repaired_pt(&self, rtx: u8) -> Option<u8> {
        self.rtx
            .iter()
            .find(|(r, _)| *r == rtx)
            .map(|(_, apt)| *apt)
    }
}

/// The payload type `media` negotiated for `codec` (the first section's).
fn payload_type_in(media: &[NegotiatedMedia], codec: CodecId) -> Option<u8> {
    media
        .iter()
        .flat_map(|m| m.codecs.iter())
        .find(|(c, _)| *c == codec)
        .map(|(_, pt)| *pt)
}

/// The codec `media` negotiated for payload type `pt`.
fn codec_in(media: &[NegotiatedMedia], pt: u8) -> Option<CodecId> {
    media
        .iter()
        .flat_map(|m| m.codecs.iter())
        .find(|(_, p)| *p == pt)
        .map(|(c, _)| *c)
}

/// Why a leg ended on its own (the control plane's reasons are [`EndReason`]s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// No authenticated ICE check within the consent timeout.
    ConsentExpired,
    /// The DTLS handshake or association failed (the reason).
    DtlsFailed(FailReason),
    /// The peer's certificate does not match the offer's fingerprint.
    FingerprintMismatch,
    /// The peer (or we, through [`Leg::close`]) sent `close_notify`.
    CloseNotify,
    /// A telephony leg received no media or RTCP for its media timeout.
    MediaTimeout,
    /// A telephony leg ended by the control plane ([`Leg::close`]).
    Ended,
}

impl CloseReason {
    /// The session's end reason.
    pub fn end_reason(self) -> EndReason {
        match self {
            CloseReason::ConsentExpired => EndReason::ConsentExpired,
            CloseReason::DtlsFailed(_) => EndReason::DtlsFailed,
            CloseReason::FingerprintMismatch => EndReason::FingerprintMismatch,
            CloseReason::CloseNotify => EndReason::CloseNotify,
            CloseReason::MediaTimeout => EndReason::MediaTimeout,
            // Only the control plane ends a leg this way, and it names its own reason first.
            CloseReason::Ended => EndReason::Deleted,
        }
    }

    /// Whether it ends a handshake that never finished as a failure.
    pub fn fails_handshake(self) -> bool {
        match self {
            CloseReason::DtlsFailed(_) | CloseReason::FingerprintMismatch => true,
            CloseReason::ConsentExpired
            | CloseReason::CloseNotify
            | CloseReason::MediaTimeout
            | CloseReason::Ended => false,
        }
    }
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
            CloseReason::MediaTimeout => write!(f, "no media within the media timeout"),
            CloseReason::Ended => write!(f, "ended by the control plane"),
        }
    }
}

/// The local socket a datagram came in on or goes out from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// The worker's shared media port (WebRTC legs: ICE demultiplexes).
    Shared,
    /// A telephony leg's own port.
    Port(u16),
    /// No socket: a mirrored publisher's RTCP, handed to its home's worker
    /// ([`PipeLeg`]).
    Pipe,
}

/// Where a copy of media for a member goes, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyTarget {
    /// The member's address.
    pub destination: SocketAddr,
    /// Our socket it leaves from.
    pub via: Via,
    /// Whether it is protected with the member's keys (SRTP) or sent as it is (plain RTP).
    pub protect: bool,
}

/// What a datagram the gateway sends is; set where it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransmitKind {
    /// A STUN response.
    Stun,
    /// A DTLS flight or alert.
    Dtls,
    /// An SRTP copy of another member's media.
    Media,
    /// SRTCP the gateway sends.
    Rtcp,
}

/// Something the owner of a leg must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LegEvent {
    /// A check from this address authenticated for the first time: DTLS and media are
    /// accepted from it, so datagrams from it are this leg's.
    Validated(SocketAddr),
    /// ICE nominated this remote address: media and DTLS go there.
    IceSelected(SocketAddr),
    /// DTLS-SRTP connected: keys are in place.
    Connected {
        /// The negotiated SRTP profile.
        profile: Profile,
        /// From the first DTLS datagram (or our ClientHello) to the keys.
        handshake: Duration,
    },
    /// The leg is finished.
    Closed(CloseReason),
    /// What a telephony leg's local ports take datagrams from changed
    /// ([`RtpLeg::sources`]): it was made, latched, renegotiated or closed.
    SourcesChanged,
}

/// What [`Leg::poll_output`] hands back.
#[derive(Debug, Clone, Copy)]
pub enum LegOutput<'a> {
    /// Send `contents` to `destination`.
    Transmit {
        /// Where to.
        destination: SocketAddr,
        /// Our socket it leaves from (a telephony leg's STUN answer leaves from the port the
        /// check came to).
        via: Via,
        /// The datagram.
        contents: &'a [u8],
        /// What it is.
        kind: TransmitKind,
    },
    /// Something happened.
    Event(LegEvent),
    /// Call [`Leg::handle_timeout`] at (or after) this instant. Ends a drain.
    Timeout(Instant),
}

/// The kinds of member, as the API and the metrics split them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegKind {
    /// WebRTC: ICE-lite, DTLS-SRTP.
    WebRtc,
    /// Telephony with SDES-SRTP.
    Sdes,
    /// Telephony with plain RTP.
    Plain,
    /// A publisher of another worker's room, mirrored ([`PipeLeg`]): not a participant.
    Pipe,
}

impl LegKind {
    /// Every kind of participant, in the order of [`LegKind::index`].
    pub const ALL: [LegKind; 3] = [LegKind::WebRtc, LegKind::Sdes, LegKind::Plain];
    /// The number of kinds, pipes included (the size of arrays indexed by kind).
    pub const COUNT: usize = 4;

    /// `webrtc`, `sdes` or `plain`.
    pub fn name(self) -> &'static str {
        match self {
            LegKind::WebRtc => "webrtc",
            LegKind::Sdes => "sdes",
            LegKind::Plain => "plain",
            LegKind::Pipe => "pipe",
        }
    }

    /// Its place in [`LegKind::ALL`] (and in arrays indexed by kind).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A member of a room. See the [module documentation](self).
// Inline, not boxed: a room keeps its members in one Vec and reaches a leg's SRTP contexts on
// every packet; the smaller kinds' unused bytes cost less than a pointer chase per packet.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Leg {
    /// A WebRTC participant: ICE-lite, DTLS-SRTP.
    WebRtc(WebRtcLeg),
    /// A telephony leg: plain RTP or SDES-SRTP on ports of its own.
    Rtp(RtpLeg),
    /// A publisher of another worker's room, mirrored here.
    Pipe(PipeLeg),
}

impl From<WebRtcLeg> for Leg {
    fn from(l: WebRtcLeg) -> Leg {
        Leg::WebRtc(l)
    }
}

impl From<RtpLeg> for Leg {
    fn from(l: RtpLeg) -> Leg {
        Leg::Rtp(l)
    }
}

impl From<PipeLeg> for Leg {
    fn from(l: PipeLeg) -> Leg {
        Leg::Pipe(l)
    }
}

impl Leg {
    /// The WebRTC leg, if it is one.
    pub fn as_webrtc(&self) -> Option<&WebRtcLeg> {
        match self {
            Leg::WebRtc(l) => Some(l),
            Leg::Rtp(_) | Leg::Pipe(_) => None,
        }
    }

    /// The WebRTC leg, if it is one, to change it (ICE restart, a test's close).
    pub fn as_webrtc_mut(&mut self) -> Option<&mut WebRtcLeg> {
        match self {
            Leg::WebRtc(l) => Some(l),
            Leg::Rtp(_) | Leg::Pipe(_) => None,
        }
    }

    /// The telephony leg, if it is one.
    pub fn as_rtp(&self) -> Option<&RtpLeg> {
        match self {
            Leg::Rtp(l) => Some(l),
            Leg::WebRtc(_) | Leg::Pipe(_) => None,
        }
    }

    /// The telephony leg, if it is one, to change it (an answer to our offer).
    pub fn as_rtp_mut(&mut self) -> Option<&mut RtpLeg> {
        match self {
            Leg::Rtp(l) => Some(l),
            Leg::WebRtc(_) | Leg::Pipe(_) => None,
        }
    }

    /// The mirrored publisher, if it is one.
    pub fn as_pipe(&self) -> Option<&PipeLeg> {
        match self {
            Leg::Pipe(l) => Some(l),
            Leg::WebRtc(_) | Leg::Rtp(_) => None,
        }
    }

    /// The mirrored publisher, if it is one, to change it (its close).
    pub fn as_pipe_mut(&mut self) -> Option<&mut PipeLeg> {
        match self {
            Leg::Pipe(l) => Some(l),
            Leg::WebRtc(_) | Leg::Rtp(_) => None,
        }
    }

    /// What kind of leg it is now (a renegotiation may turn a plain leg into an SDES one).
    pub fn kind(&self) -> LegKind {
        match self {
            Leg::WebRtc(_) => LegKind::WebRtc,
            Leg::Rtp(l) if l.sdes_profile().is_some() => LegKind::Sdes,
            Leg::Rtp(_) => LegKind::Plain,
            Leg::Pipe(_) => LegKind::Pipe,
        }
    }

    /// What kind of leg: `webrtc`, `sdes` or `plain` (for the API and logs).
    pub fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    /// The negotiated SRTP profile, once there is one (`None` for plain RTP).
    pub fn srtp_profile(&self) -> Option<Profile> {
        match self {
            Leg::WebRtc(l) => l.srtp_profile(),
            Leg::Rtp(l) => l.sdes_profile(),
            Leg::Pipe(_) => None,
        }
    }

    /// The answer SDP.
    pub fn answer_sdp(&self) -> &str {
        match self {
            Leg::WebRtc(l) => l.answer_sdp(),
            Leg::Rtp(l) => l.answer_sdp(),
            Leg::Pipe(_) => "",
        }
    }

    /// The local ports of the leg's own sockets (none for WebRTC, on the shared port).
    pub fn local_ports(&self) -> Vec<u16> {
        match self {
            Leg::WebRtc(_) | Leg::Pipe(_) => Vec::new(),
            Leg::Rtp(l) => l.local_ports(),
        }
    }

    /// The accepted media sections.
    pub fn media(&self) -> &[NegotiatedMedia] {
        match self {
            Leg::WebRtc(l) => l.media(),
            Leg::Rtp(l) => l.media(),
            Leg::Pipe(l) => l.media(),
        }
    }

    /// The payload type negotiated for `codec` (our most preferred one if several were).
    pub fn payload_type_for(&self, codec: CodecId) -> Option<u8> {
        payload_type_in(self.media(), codec)
    }

    /// The codec negotiated for payload type `pt`.
    pub fn codec_for(&self, pt: u8) -> Option<CodecId> {
        codec_in(self.media(), pt)
    }

    /// Whether the participant receives media of this codec (a receiving section with it).
    pub fn receives(&self, codec: CodecId) -> bool {
        self.media()
            .iter()
            .any(|m| m.peer_receives && m.codecs.iter().any(|(c, _)| *c == codec))
    }

    /// Whether the keys are in place and the leg is open.
    pub fn is_connected(&self) -> bool {
        match self {
            Leg::WebRtc(l) => l.is_connected(),
            Leg::Rtp(l) => l.is_connected(),
            Leg::Pipe(l) => l.closed().is_none(),
        }
    }

    /// Why the leg ended, once it has.
    pub fn closed(&self) -> Option<CloseReason> {
        match self {
            Leg::WebRtc(l) => l.closed(),
            Leg::Rtp(l) => l.closed(),
            Leg::Pipe(l) => l.closed(),
        }
    }

    /// The leg's counters.
    pub fn counters(&self) -> &Counters {
        match self {
            Leg::WebRtc(l) => l.counters(),
            Leg::Rtp(l) => l.counters(),
            Leg::Pipe(l) => l.counters(),
        }
    }

    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        match self {
            Leg::WebRtc(l) => l.counters_mut(),
            Leg::Rtp(l) => l.counters_mut(),
            Leg::Pipe(l) => l.counters_mut(),
        }
    }

    /// A STUN message from `from`, parsed where the datagram was read (a telephony leg or a
    /// pipe takes none: dropped as an unknown kind).
    pub fn handle_stun(&mut self, now: Instant, from: SocketAddr, via: Via, msg: &Message<'_>) {
        match self {
            Leg::WebRtc(l) => l.handle_stun(now, from, msg),
            Leg::Rtp(l) => l.handle_stun(now, from, via, msg),
            Leg::Pipe(_) => self.counters_mut().drop(DropReason::UnknownKind),
        }
    }

    /// A DTLS record from `from` on our socket `via` (a pipe, or a telephony leg not keyed by
    /// DTLS, takes none: dropped as an unknown kind).
    pub fn handle_dtls(&mut self, now: Instant, from: SocketAddr, via: Via, datagram: &[u8]) {
        match self {
            Leg::WebRtc(l) => l.handle_dtls(now, from, datagram),
            Leg::Rtp(l) => l.handle_dtls(now, from, via, datagram),
            Leg::Pipe(_) => self.counters_mut().drop(DropReason::UnknownKind),
        }
    }

    /// Whether the member's DTLS handshake has started (a telephony leg has none to start).
    pub fn handshake_started(&self) -> bool {
        match self {
            Leg::WebRtc(l) => l.handshake_started(),
            Leg::Rtp(l) => l.handshake_started(),
            Leg::Pipe(_) => true,
        }
    }

    /// Whether RTP (`rtcp` false) or RTCP from `from` is taken now: `Ok(true)` to unprotect
    /// it first (SRTP), `Ok(false)` to take it as it is (plain RTP, latched here), or why it
    /// is dropped.
    pub fn admit(
        &mut self,
        from: SocketAddr,
        rtcp: bool,
        now: Instant,
    ) -> Result<bool, DropReason> {
        match self {
            Leg::WebRtc(l) => l.media_gate(from).map(|()| true),
            Leg::Rtp(l) => l.admit(from, rtcp, now),
            // What the home handed over is plain already, and only ever comes from there.
            Leg::Pipe(l) => match l.closed() {
                None => Ok(false),
                Some(_) => Err(DropReason::AfterClose),
            },
        }
    }

    /// An SRTP or SRTCP packet from `from` authenticated (a telephony leg latches to it).
    pub fn authenticated(&mut self, from: SocketAddr, rtcp: bool, now: Instant) {
        match self {
            Leg::WebRtc(_) | Leg::Pipe(_) => {}
            Leg::Rtp(l) => l.authenticated(from, rtcp, now),
        }
    }

    /// Asks the CPU to start loading what a copy to this leg reads (a WebRTC leg's: the
    /// others are few).
    pub(crate) fn prefetch_copy(&self) {
        if let Leg::WebRtc(l) = self {
            l.prefetch_copy();
        }
    }

    /// Whether DTMF crosses between this member and one whose telephone-events it lacks (or
    /// which lacks its) even where the audio needs no transcoding
    /// ([`RtpConfig::dtmf_transcode`]; a telephony leg's setting, never a WebRTC leg's).
    pub fn dtmf_transcode(&self) -> bool {
        matches!(self, Leg::Rtp(l) if l.dtmf_transcode())
    }

    /// Whether comfort noise crosses between this member and one whose comfort noise it lacks
    /// (or which lacks its) even where the audio needs no transcoding
    /// ([`RtpConfig::cn_transcode`]; a telephony leg's setting, never a WebRTC leg's).
    pub fn cn_transcode(&self) -> bool {
        matches!(self, Leg::Rtp(l) if l.cn_transcode())
    }

    /// Where a copy of media for this member goes now, if it can be sent.
    pub fn copy_target(&self) -> Option<CopyTarget> {
        match self {
            Leg::WebRtc(l) => l.media_destination().map(|destination| CopyTarget {
                destination,
                via: Via::Shared,
                protect: true,
            }),
            Leg::Rtp(l) => l.media_destination().map(|destination| CopyTarget {
                destination,
                via: Via::Port(l.ports().rtp.port()),
                protect: l.protects(),
            }),
            // A mirror only publishes: nothing is sent to it as media.
            Leg::Pipe(_) => None,
        }
    }

    /// Where RTCP of ours for this member goes now, and from which socket.
    pub fn rtcp_target(&self) -> Option<CopyTarget> {
        match self {
            Leg::WebRtc(_) => self.copy_target(),
            Leg::Rtp(l) => l.rtcp_destination().map(|destination| CopyTarget {
                destination,
                via: Via::Port(if l.rtcp_mux() {
                    l.ports().rtp.port()
                } else {
                    l.ports().rtcp.port()
                }),
                protect: l.protects(),
            }),
            Leg::Pipe(l) => l.rtcp_target(),
        }
    }

    /// The context that unprotects what the participant sends, once keyed.
    pub fn inbound_context(&mut self) -> Option<&mut Context> {
        match self {
            Leg::WebRtc(l) => l.inbound_context(),
            Leg::Rtp(l) => l.inbound_context(),
            Leg::Pipe(_) => None,
        }
    }

    /// The context that protects what the participant receives, once keyed.
    pub fn outbound_context(&mut self) -> Option<&mut Context> {
        match self {
            Leg::WebRtc(l) => l.outbound_context(),
            Leg::Rtp(l) => l.outbound_context(),
            Leg::Pipe(_) => None,
        }
    }

    /// Where protected media for the participant goes now, if it can be sent.
    pub fn media_destination(&self) -> Option<SocketAddr> {
        match self {
            Leg::WebRtc(l) => l.media_destination(),
            Leg::Rtp(l) => l.media_destination(),
            Leg::Pipe(_) => None,
        }
    }

    /// Advances time.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self {
            Leg::WebRtc(l) => l.handle_timeout(now),
            Leg::Rtp(l) => l.handle_timeout(now),
            Leg::Pipe(_) => {}
        }
    }

    /// When [`Leg::handle_timeout`] must next be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Leg::WebRtc(l) => l.poll_timeout(),
            Leg::Rtp(l) => l.poll_timeout(),
            Leg::Pipe(_) => None,
        }
    }

    /// Whether outputs other than the closing timeout are queued.
    pub fn has_output(&self) -> bool {
        match self {
            Leg::WebRtc(l) => l.has_output(),
            Leg::Rtp(l) => l.has_output(),
            Leg::Pipe(l) => l.has_output(),
        }
    }

    /// The next output (see the drive contract).
    pub fn poll_output(&mut self) -> Option<LegOutput<'_>> {
        match self {
            Leg::WebRtc(l) => l.poll_output(),
            Leg::Rtp(l) => l.poll_output(),
            Leg::Pipe(l) => l.poll_output(),
        }
    }

    /// Ends the leg (for WebRTC: close_notify), reported as [`CloseReason::CloseNotify`].
    pub fn close(&mut self, now: Instant) {
        match self {
            Leg::WebRtc(l) => l.close(now),
            Leg::Rtp(l) => l.close(now),
            Leg::Pipe(l) => l.close(),
        }
    }

    /// Ends the leg without a word to its peer (no DTLS `close_notify`): another node goes on
    /// with its association.
    pub fn close_quietly(&mut self, now: Instant) {
        match self {
            Leg::WebRtc(l) => l.close_quietly(),
            other => other.close(now),
        }
    }
}

/// A section's media kind as its SDP name (`audio`, `video`, …), for [`NegotiatedMedia`]'s
/// serialized form.
mod media_kind_serde {
    use secrelay_wire::sdp::MediaKind;
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(kind: &MediaKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MediaKind, D::Error> {
        let name = String::deserialize(d)?;
        Ok(match name.as_str() {
            "audio" => MediaKind::Audio,
            "video" => MediaKind::Video,
            "application" => MediaKind::Application,
            _ => MediaKind::Other(name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amr(name: &str, clock: u32, fmtp: Option<&str>) -> Codec {
        Codec {
            pt: 96,
            name: name.into(),
            clock_rate: clock,
            channels: None,
            fmtp: fmtp.map(str::to_owned),
        }
    }

    #[test]
    fn amr_payload_formats_are_two_codecs() {
        let octet = amr("AMR-WB", 16_000, Some("mode-set=0,1,2; octet-align=1"));
        assert_eq!(CodecId::of(&octet), Some(CodecId::AmrWbOctet));
        let efficient = amr("amr-wb", 16_000, Some("octet-align=0"));
        assert_eq!(CodecId::of(&efficient), Some(CodecId::AmrWb));
        assert_eq!(CodecId::of(&amr("AMR", 8000, None)), Some(CodecId::Amr));
        assert_eq!(CodecId::of(&amr("AMR", 16_000, None)), None);
        // A name alone means what the gateway offers: octet-aligned.
        assert_eq!(CodecId::by_name("AMR"), Some(CodecId::AmrOctet));
        assert_eq!(CodecId::by_name("amr-wb/16000"), Some(CodecId::AmrWbOctet));
        assert_eq!(CodecId::AmrWb.clock_rate(), 16_000);
        assert_eq!(
            CodecId::AmrOctet.offer_codec().fmtp.as_deref(),
            Some("octet-align=1;mode-change-capability=2")
        );
        for (i, c) in CodecId::ALL.into_iter().enumerate() {
            assert_eq!(c.known_index(), Some(i), "{c:?}");
        }
    }

    #[test]
    fn comfort_noise_at_8k_is_known_and_supplemental() {
        let cn = |clock: u32| amr("cn", clock, None);
        assert_eq!(CodecId::of(&cn(8000)), Some(CodecId::ComfortNoise));
        assert_eq!(CodecId::of(&cn(16_000)), None);
        assert!(matches!(
            CodecId::passthrough(&cn(16_000)),
            CodecId::Other(_)
        ));
        assert_eq!(CodecId::by_name("CN"), Some(CodecId::ComfortNoise));
        assert_eq!(CodecId::by_name("CN/8000"), Some(CodecId::ComfortNoise));
        assert_eq!(CodecId::by_name("CN/16000"), None);
        let c = CodecId::ComfortNoise;
        assert!(c.is_supplemental() && !c.is_event() && !c.is_transcodable() && c.is_audio());
        assert!(CodecId::TelephoneEvent.is_supplemental() && !CodecId::Pcmu.is_supplemental());
        assert_eq!(
            (c.offer_codec().pt, c.offer_codec().name.as_str()),
            (13, "CN")
        );
    }

    #[test]
    fn the_amr_mode_sent_keeps_to_the_mode_set_and_the_bitrate_named() {
        let set = |f: &str| amr_mode_set(CodecId::AmrWbOctet, &amr("AMR-WB", 16_000, Some(f)));
        assert_eq!(set("mode-set=0,1,2"), Some(0b111));
        assert_eq!(set("mode-set= 8 ,x,9"), Some(1 << 8));
        assert_eq!(set("mode-set=9"), None);
        assert_eq!(set("octet-align=1"), None);
        let nb = amr_mode_set(CodecId::Amr, &amr("AMR", 8000, Some("mode-set=7,8")));
        assert_eq!(nb, Some(1 << 7));
        assert_eq!(choose_amr_mode(Some(0b111), None), Some(2));
        assert_eq!(choose_amr_mode(Some(0b111), Some(8)), Some(2));
        assert_eq!(choose_amr_mode(Some(0b1_0000_0100), Some(5)), Some(2));
        assert_eq!(choose_amr_mode(Some(0b1_0000_0000), Some(1)), Some(8));
        assert_eq!(choose_amr_mode(None, Some(8)), Some(8));
        assert_eq!(choose_amr_mode(None, None), None);
    }
}
