//! A WebRTC participant's leg, sans-IO: offer/answer, ICE-lite and DTLS-SRTP on one bundled,
//! rtcp-muxed transport.
//!
//! A [`WebRtcLeg`] is built from a parsed [`Offer`], our certificate and a [`WebRtcConfig`];
//! it chooses codecs and our DTLS role and writes the answer ([`WebRtcLeg::answer_sdp`]).
//! Or we make the offer ([`WebRtcLeg::new_offer`]: a SIP proxy's call towards a WebRTC
//! callee): our sections with `a=setup:actpass`, and the peer's answer
//! ([`WebRtcLeg::accept_answer`]) decides the codecs, the directions and our DTLS role. The
//! peer's ICE checks, and a ClientHello when it chose to be the DTLS client, can arrive before
//! its answer reaches us: checks are answered, and the first DTLS records are kept and handed
//! to the endpoint once the answer has named the fingerprint they must match.
//! Datagrams arrive classified where they were read: STUN messages (already parsed) go to the
//! [`IceLite`] agent through [`WebRtcLeg::handle_stun`], whose responses are queued to the
//! sender; DTLS records go to the DTLS-SRTP [`Endpoint`] through [`WebRtcLeg::handle_dtls`],
//! but only from an address that passed an ICE check. Once DTLS has connected, the leg holds
//! the SRTP contexts its keys make; the shard unprotects what the participant sends and
//! protects what it receives with them, in batches ([`crate::leg`]), after asking
//! [`WebRtcLeg::media_gate`] whether the source may send media now.
//!
//! # Drive contract
//! After every input (`handle_stun`, `handle_dtls`, `handle_timeout`, `close`), call
//! [`WebRtcLeg::poll_output`] until it returns [`LegOutput::Timeout`] (call
//! [`WebRtcLeg::handle_timeout`] then) or `None` (the leg is closed and has nothing left to
//! send).
//!
//! # Allocation
//! Transmits are carried in byte buffers recycled through a small pool: a buffer lent by
//! `poll_output` goes back to the pool on the next call. In steady state (connected, consent
//! checks answered, outputs drained) nothing allocates. What allocates: construction and the
//! answer; the DTLS handshake (the engine hands out its own `Vec`s); and the pool growing when
//! outputs are left undrained.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_dtls::fingerprint::FingerprintError;
use secrelay_dtls::{
    Endpoint, EndpointConfig, Event as DtlsEvent, FailReason, Fingerprint, HashAlgorithm,
    LocalCertificate, Output as DtlsOutput, Role, Timers,
};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::sdp::{
    write_answer, write_offer, AnswerParams, Codec, Direction, MediaAnswer, MediaKind, MediaOffer,
    Offer, SctpAnswer, Setup,
};
use secrelay_wire::stun::{Class as StunClass, Message};
use zeroize::Zeroize;

use super::data::{DataLimits, DataLink, DataMessage};
use super::{
    CloseReason, CodecId, HeaderExt, IceMarks, LegEvent, LegOutput, NegotiatedMedia,
    SectionFeedback, SrtpMark, TransmitKind, Via,
};
use crate::counters::{Counters, DropReason};
use crate::ice_lite::{Credentials, IceConfig, IceError, IceEvent, IceLite};

/// How a WebRTC leg is set up.
#[derive(Debug, Clone)]
pub struct WebRtcConfig {
    /// ICE-lite timers.
    pub ice: IceConfig,
    /// Our host candidates, written into the answer.
    pub candidates: Vec<SocketAddr>,
    /// Our passive ICE-TCP host candidates (RFC 6544), written after the UDP ones.
    pub tcp_candidates: Vec<SocketAddr>,
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
    /// Data channels (SCTP over DTLS) with these limits; `None` rejects an offer's
    /// data-channel section.
    pub data_channels: Option<DataLimits>,
}

impl WebRtcConfig {
    /// The session description of ours for `media` (an answer, or an offer with
    /// `Setup::Actpass`): session id and version `session`, our ICE credentials `local`, our
    /// fingerprint, our candidates.
    fn description(
        &self,
        session: (u64, u64),
        local: &Credentials,
        fingerprint: String,
        setup: Setup,
        media: Vec<MediaAnswer>,
    ) -> AnswerParams {
        AnswerParams {
            session_id: session.0,
            version: session.1,
            ice_ufrag: local.ufrag.clone(),
            ice_pwd: local.pwd.clone(),
            fingerprint,
            setup,
            candidates: self.candidates.clone(),
            tcp_candidates: self.tcp_candidates.clone(),
            media,
        }
    }
}

impl Default for WebRtcConfig {
    fn default() -> WebRtcConfig {
        WebRtcConfig {
            ice: IceConfig::default(),
            candidates: Vec::new(),
            tcp_candidates: Vec::new(),
            audio_codecs: CodecId::DEFAULT_AUDIO.to_vec(),
            video_codecs: vec![CodecId::Vp8, CodecId::H264],
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec(),
            dtls_timers: Timers::default(),
            replay_window: 1024,
            cname: "secrelay".into(),
            data_channels: None,
        }
    }
}

/// Why a WebRTC leg cannot be made from an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebRtcError {
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
    /// An answer came for a leg that made no offer, or whose offer was answered already.
    NotAwaitingAnswer,
    /// The answer says `a=setup:actpass` (RFC 5763 §5: an answerer chooses `active` or
    /// `passive`).
    AnswerSetupActpass,
    /// A new offer in the session names another certificate: a new DTLS association, which
    /// the leg does not make (its keys stay those of the first).
    DtlsRestart,
    /// A new offer in the session leaves out or reorders a section it had (RFC 3264 §8: the
    /// mid of our section at that index).
    SectionMissing(String),
    /// A new offer in the session came while one of ours waits for its answer (glare).
    OfferPending,
    /// A leg taken over from another node whose peer knows another certificate of ours.
    OtherCertificate,
}

impl fmt::Display for WebRtcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebRtcError::NoDtlsRole => write!(f, "offer says a=setup:holdconn"),
            WebRtcError::NoCommonCodec => {
                write!(f, "offer has no codec the gateway accepts")
            }
            WebRtcError::Fingerprint(e) => write!(f, "offer fingerprint unusable: {e}"),
            WebRtcError::NoCertificate => write!(f, "our certificate chain is empty"),
            WebRtcError::Dtls(e) => write!(f, "DTLS endpoint configuration: {e}"),
            WebRtcError::Srtp(e) => write!(f, "SRTP context: {e}"),
            WebRtcError::NotAwaitingAnswer => write!(f, "no offer of ours waits for an answer"),
            WebRtcError::DtlsRestart => write!(
                f,
                "the new offer names another certificate (a DTLS restart is not supported)"
            ),
            WebRtcError::SectionMissing(mid) => write!(
                f,
                "the new offer leaves out or moves section mid {mid:?} of the session"
            ),
            WebRtcError::OtherCertificate => write!(
                f,
                "the peer knows another certificate of ours (nodes that take calls over need the same `cert`)"
            ),
            WebRtcError::OfferPending => {
                write!(f, "an offer of ours waits for its answer")
            }
            WebRtcError::AnswerSetupActpass => {
                write!(
                    f,
                    "the answer says a=setup:actpass (an answerer must choose)"
                )
            }
        }
    }
}

impl std::error::Error for WebRtcError {}

/// Pooled buffer capacity: a STUN response (512 bytes at most here) or a DTLS record.
const BUFFER_CAPACITY: usize = 1500;
/// Most buffers kept in the pool; more are freed.
const POOL_MAX: usize = 64;
/// DTLS records kept while an offer of ours waits for its answer (a ClientHello flight, and
/// its retransmissions); more are dropped.
const EARLY_DTLS_MAX: usize = 8;

/// A section of an offer of ours to a WebRTC peer.
#[derive(Debug, Clone)]
pub struct WebRtcOfferSection {
    /// Audio or video.
    pub kind: MediaKind,
    /// Our direction (`sendrecv`: we send and receive on it).
    pub direction: Direction,
    /// The codecs offered, our preference first, with the payload types we chose (codecs the
    /// gateway does not relay are left out).
    pub codecs: Vec<Codec>,
}

/// A new offer of ours in an established session: its revision, and the sections it adds
/// (what each would be once answered).
struct Reoffer {
    revision: u64,
    added: Vec<NegotiatedMedia>,
}

/// An offer of ours that waits for its answer.
struct Awaiting {
    certificate: LocalCertificate,
    /// DTLS records from validated addresses that came before the answer.
    early_dtls: Vec<(SocketAddr, Vec<u8>)>,
}

#[derive(Debug)]
enum Pending {
    Transmit(SocketAddr, Vec<u8>, TransmitKind),
    Event(LegEvent),
}

struct Srtp {
    inbound: Context,
    outbound: Context,
    /// The keys the contexts were made with (ours, the peer's), for a node taking the leg
    /// over ([`WebRtcLeg::marks`]).
    keys: (MasterKey, MasterKey),
}

/// What a node taking a connected WebRTC leg over needs of it besides its SRTP streams' marks
/// (a call the browser then restarts ICE towards that node on, [`WebRtcLeg::take_offer`]):
/// the DTLS association's SRTP keys, which it keeps (no new handshake), and what the peer
/// knows of our SDP: our certificate's fingerprint (the node must have the same), the `o=`
/// session and each section's SSRCs of ours. Debug does not print the keys; they are
/// zeroized when dropped.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WebRtcMarks {
    /// Our fingerprint as SDP writes it.
    pub fingerprint: String,
    /// Our `o=` session id and version.
    pub session: (u64, u64),
    /// Per section (by mid): our SSRC and our retransmissions' SSRC.
    pub ssrcs: Vec<(String, u32, u32)>,
    /// The SRTP profile DTLS negotiated (its SDP name).
    pub profile: String,
    /// Our master key and salt (SDES `inline:` form).
    pub ours: String,
    /// The peer's.
    pub theirs: String,
    /// Our ICE credentials and the peer's (the nominated address is not kept: the peer's
    /// next check names it): a leg made again on the same address (a hand-over the directory
    /// refused, a node started again) answers the peer's consent checks as before, and media
    /// goes on with no ICE restart.
    pub ice: IceMarks,
}

impl Drop for WebRtcMarks {
    fn drop(&mut self) {
        self.ours.zeroize();
        self.theirs.zeroize();
    }
}

impl fmt::Debug for WebRtcMarks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebRtcMarks")
            .field("session", &self.session)
            .field("ssrcs", &self.ssrcs)
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

/// A WebRTC participant's leg. See the [module documentation](self) for the drive contract.
pub struct WebRtcLeg {
    config: WebRtcConfig,
    ice: IceLite,
    role: Role,
    /// The DTLS endpoint and, before it starts, its configuration: boxed, as the data
    /// channels are, so that what a relayed copy reads of the leg sits on fewer lines.
    dtls: Option<Box<Endpoint>>,
    dtls_config: Option<Box<EndpointConfig>>,
    dtls_timeout: Option<Instant>,
    dtls_started: Option<Instant>,
    /// Where DTLS goes before ICE nominates: the last validated address that sent DTLS.
    dtls_peer: Option<SocketAddr>,
    srtp: Option<Srtp>,
    media: Vec<NegotiatedMedia>,
    /// Our SDP: the answer, or the offer of ours.
    local_sdp: String,
    /// Our description's sections, in order (what a new offer of ours keeps), its `o=`
    /// session id and version, and our fingerprint as SDP writes it.
    sections: Vec<MediaAnswer>,
    session: (u64, u64),
    fingerprint: String,
    /// A new offer of ours in the session (more sections to receive on), waiting for its
    /// answer.
    reoffer: Option<Reoffer>,
    /// Set while an offer of ours waits for the answer.
    awaiting: Option<Awaiting>,
    queue: VecDeque<Pending>,
    pool: Vec<Vec<u8>>,
    /// The buffer lent by the last `poll_output`, returned to the pool on the next.
    lent: Option<Vec<u8>>,
    closed: Option<CloseReason>,
    counters: Counters,
    /// DTLS handshake time, once connected.
    handshake_time: Option<Duration>,
    /// The SRTP profile DTLS negotiated, once connected.
    profile: Option<Profile>,
    /// Data channels, when the offer's data-channel section was accepted (boxed: few members
    /// have them, and inline they would put the rest of the leg on more lines).
    data: Option<Box<DataLink>>,
    /// The peer's certificate fingerprint, once its offer or answer named it: a new offer
    /// in the session must name it again (the same DTLS association).
    peer_fingerprint: Option<Fingerprint>,
}

impl fmt::Debug for WebRtcLeg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebRtcLeg")
            .field("role", &self.role)
            .field("selected", &self.ice.selected())
            .field("connected", &self.srtp.is_some())
            .field("closed", &self.closed)
            .field("counters", &self.counters)
            .finish()
    }
}

/// The feedback a video section takes (those of `nack`, `nack pli`, `ccm fir` the offer lists
/// for every codec chosen) and the RTX codecs offered for the chosen ones once NACKs are on:
/// what the leg agreed on, the `a=rtcp-fb` values to answer (by payload type), and the RTX
/// codecs to answer. Audio sections take none.
fn video_feedback(
    m: &secrelay_wire::sdp::MediaOffer,
    chosen: &[(CodecId, &Codec)],
) -> (SectionFeedback, Vec<(u8, String)>, Vec<Codec>) {
    let mut fb = SectionFeedback {
        rtx_ssrc: random_u32().max(1),
        peer_rtx: m.fid.clone(),
        ..SectionFeedback::default()
    };
    if m.kind != MediaKind::Video || chosen.is_empty() {
        return (fb, Vec::new(), Vec::new());
    }
    let all = |line: &str| chosen.iter().all(|(_, c)| m.offers_feedback(c.pt, line));
    let mut lines = Vec::new();
    for (line, on) in [
        ("nack", &mut fb.nack),
        ("nack pli", &mut fb.pli),
        ("ccm fir", &mut fb.fir),
    ] {
        if all(line) {
            *on = true;
            lines.extend(chosen.iter().map(|(_, c)| (c.pt, line.to_owned())));
        }
    }
    let mut rtx = Vec::new();
    if fb.nack {
        for (_, c) in chosen {
            if let Some(r) = m.rtx_for(c.pt) {
                fb.rtx.push((r.pt, c.pt));
                rtx.push(r.clone());
            }
        }
    }
    (fb, lines, rtx)
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("the OS random source works");
    u32::from_be_bytes(b)
}

/// Our side of the data channels' SCTP association follows our DTLS role (RFC 8832 §6).
fn data_side(role: Role) -> secrelay_datachannel::Side {
    match role {
        Role::Client => secrelay_datachannel::Side::Client,
        Role::Server => secrelay_datachannel::Side::Server,
    }
}

/// The header extensions of `m` we use, with the offer's ids.
fn agreed_extmaps(m: &MediaOffer) -> Vec<(u8, HeaderExt)> {
    m.extmaps
        .iter()
        .filter_map(|(id, uri)| Some((u8::try_from(*id).ok()?, HeaderExt::of(uri)?)))
        .filter(|(id, _)| (1..=255).contains(id))
        .collect()
}

/// The simulcast layers (`rid`s) of `m` we take: where they can be told apart, the peer
/// sending them and the rid extension agreed (`extmaps`).
fn simulcast_layers(m: &MediaOffer, extmaps: &[(u8, HeaderExt)]) -> Vec<String> {
    if m.direction.sends()
        && m.kind == MediaKind::Video
        && extmaps.iter().any(|(_, e)| *e == HeaderExt::Rid)
    {
        m.simulcast_send.clone()
    } else {
        Vec::new()
    }
}

/// Our answer to the media section `m` (`usable`: not rejected, or bundled) and, when it is
/// taken (a codec of ours, usable), what was negotiated for it: the codecs in our order, an
/// SSRC of ours, video feedback and RTX, the header extensions we use with the offer's ids,
/// and simulcast where the layers can be told apart.
fn answer_media(
    m: &MediaOffer,
    usable: bool,
    config: &WebRtcConfig,
) -> (Option<NegotiatedMedia>, MediaAnswer) {
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
    let direction = (usable && !chosen.is_empty()).then(|| m.direction.reversed());
    let our_ssrc = random_u32().max(1);
    let (feedback, mut lines, rtx) = video_feedback(m, &chosen);
    let extmaps = agreed_extmaps(m);
    let simulcast = simulcast_layers(m, &extmaps);
    // transport-cc feedback where its extension is agreed and the offer lists it for the
    // codecs taken.
    if extmaps.iter().any(|(_, e)| *e == HeaderExt::TransportCc) {
        lines.extend(
            chosen
                .iter()
                .filter(|(_, c)| m.offers_feedback(c.pt, "transport-cc"))
                .map(|(_, c)| (c.pt, "transport-cc".to_owned())),
        );
    }
    let negotiated = direction.is_some().then(|| {
        let owned: Vec<(CodecId, Codec)> =
            chosen.iter().map(|(id, c)| (*id, (*c).clone())).collect();
        NegotiatedMedia {
            mid: m.mid.clone(),
            kind: m.kind.clone(),
            codecs: super::rtp::in_offer_order(&owned, &m.codecs),
            peer_sends: m.direction.sends(),
            peer_receives: m.direction.receives(),
            our_ssrc,
            feedback: feedback.clone(),
            extmaps: extmaps.clone(),
            simulcast: simulcast.clone(),
            ptime: None,
            amr_mode: None,
        }
    });
    let answer = MediaAnswer {
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
        feedback: lines,
        rtx,
        rtx_ssrc: Some(feedback.rtx_ssrc),
        extmaps: extmaps
            .iter()
            .map(|(id, e)| (u16::from(*id), e.uri().to_owned()))
            .collect(),
        rtcp_rsize: m.rtcp_rsize,
        simulcast_recv: simulcast.clone(),
        sctp: None,
    };
    (negotiated, answer)
}

/// Our answer to an offer's data-channel section: accepted (`take`) with our SCTP port and
/// our message size limit, or rejected.
fn data_section(m: &MediaOffer, take: bool, limits: Option<&DataLimits>) -> MediaAnswer {
    MediaAnswer {
        sctp: Some(SctpAnswer {
            port: 5000,
            max_message_size: limits.map_or(0, |l| l.max_message_size as u64),
        }),
        ..MediaAnswer::bare(
            m.mid.clone(),
            m.kind.clone(),
            take.then_some(Direction::SendRecv),
        )
    }
}

/// The certificate fingerprint an offer or answer names.
fn fingerprint_of(d: &Offer) -> Result<Fingerprint, WebRtcError> {
    let algorithm: HashAlgorithm = d.fingerprint.0.parse().map_err(WebRtcError::Fingerprint)?;
    Fingerprint::from_digest(algorithm, &d.fingerprint.1).map_err(WebRtcError::Fingerprint)
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source works");
    u64::from_be_bytes(b) >> 2
}

impl WebRtcLeg {
    /// A leg with no DTLS, SRTP or data channels yet, nothing queued and no offer waiting:
    /// its ICE agent and DTLS role, its sections as negotiated (`media`), as written
    /// (`sections`) and our SDP (`local_sdp`, session `session`), and our fingerprint.
    fn with_sdp(
        config: WebRtcConfig,
        (ice, role): (IceLite, Role),
        (media, sections, local_sdp, session): (
            Vec<NegotiatedMedia>,
            Vec<MediaAnswer>,
            String,
            (u64, u64),
        ),
        fingerprint: String,
    ) -> WebRtcLeg {
        WebRtcLeg {
            config,
            ice,
            role,
            dtls: None,
            dtls_config: None,
            dtls_timeout: None,
            dtls_started: None,
            dtls_peer: None,
            srtp: None,
            media,
            local_sdp,
            sections,
            session,
            fingerprint,
            reoffer: None,
            awaiting: None,
            queue: VecDeque::new(),
            pool: Vec::new(),
            lent: None,
            closed: None,
            counters: Counters::default(),
            handshake_time: None,
            profile: None,
            data: None,
            peer_fingerprint: None,
        }
    }

    /// A leg for `offer`, created at `now` (the ICE consent clock starts).
    ///
    /// Our DTLS role follows the offer's `a=setup`: `actpass` or `active` make us the DTLS
    /// server (`passive`), `passive` makes us the client (`active`; the ClientHello leaves once
    /// ICE nominates a pair).
    pub fn new(
        offer: &Offer,
        certificate: LocalCertificate,
        config: WebRtcConfig,
        now: Instant,
    ) -> Result<WebRtcLeg, WebRtcError> {
        let (role, our_setup) = match offer.setup {
            Setup::Actpass | Setup::Active => (Role::Server, Setup::Passive),
            Setup::Passive => (Role::Client, Setup::Active),
            Setup::Holdconn => return Err(WebRtcError::NoDtlsRole),
        };
        let peer_fp = fingerprint_of(offer)?;
        let our_fp = certificate
            .fingerprint()
            .ok_or(WebRtcError::NoCertificate)?;

        let mut media = Vec::new();
        let mut answers = Vec::new();
        let mut data_offer: Option<&MediaOffer> = None;
        for m in &offer.media {
            let usable = m.port != 0 || offer.bundle.contains(&m.mid);
            if m.sctp.is_some() {
                let take = usable && data_offer.is_none() && config.data_channels.is_some();
                answers.push(data_section(m, take, config.data_channels.as_ref()));
                if take {
                    data_offer = Some(m);
                }
                continue;
            }
            let (negotiated, answer) = answer_media(m, usable, &config);
            media.extend(negotiated);
            answers.push(answer);
        }
        if media.is_empty() && data_offer.is_none() {
            return Err(WebRtcError::NoCommonCodec);
        }
        let data = match (data_offer.and_then(|m| m.sctp), &config.data_channels) {
            (Some(sctp), Some(limits)) => Some(Box::new(
                DataLink::new(limits.clone(), data_side(role), sctp.max_message_size, now)
                    .map_err(|e| WebRtcError::Dtls(e.to_string()))?,
            )),
            _ => None,
        };

        let local = Credentials::random();
        let session = (random_u64(), 1);
        let answer = write_answer(&config.description(
            session,
            &local,
            our_fp.to_string(),
            our_setup,
            answers.clone(),
        ));
        let ice = IceLite::new(
            config.ice.clone(),
            local,
            Credentials {
                ufrag: offer.ice_ufrag.clone(),
                pwd: offer.ice_pwd.clone(),
            },
            now,
        );
        let mut dtls_config = EndpointConfig::new(role, certificate, peer_fp.clone());
        dtls_config.srtp_profiles = config.srtp_profiles.clone();
        dtls_config.timers = config.dtls_timers;
        dtls_config.application_data = data.is_some();
        let mut p = WebRtcLeg::with_sdp(
            config,
            (ice, role),
            (media, answers, answer, session),
            our_fp.to_string(),
        );
        p.dtls_config = Some(Box::new(dtls_config));
        p.data = data;
        p.peer_fingerprint = Some(peer_fp);
        if role == Role::Server {
            // A server waits for the ClientHello; the clock of its handshake starts then.
            p.start_dtls(now)?;
        }
        Ok(p)
    }

    /// A leg that offers `sections` to a WebRTC peer (a SIP proxy's call towards a browser),
    /// created at `now`: ICE-lite with fresh credentials, `a=setup:actpass`, our candidates,
    /// and an SSRC of ours on every section we send on ([`WebRtcLeg::offer_sdp`]). Media waits
    /// for [`WebRtcLeg::accept_answer`]; until then the peer's checks are answered and its
    /// first DTLS records kept, and the session ends if nothing comes for
    /// [`IceConfig::answer_timeout`](crate::ice_lite::IceConfig::answer_timeout).
    pub fn new_offer(
        sections: &[WebRtcOfferSection],
        certificate: LocalCertificate,
        config: WebRtcConfig,
        now: Instant,
    ) -> Result<WebRtcLeg, WebRtcError> {
        let our_fp = certificate
            .fingerprint()
            .ok_or(WebRtcError::NoCertificate)?;
        let mut media = Vec::new();
        let mut offered = Vec::new();
        for (i, sec) in sections.iter().enumerate() {
            let codecs: Vec<(CodecId, &Codec)> = sec
                .codecs
                .iter()
                .filter_map(|c| CodecId::of(c).map(|id| (id, c)))
                .filter(|(id, _)| id.is_audio() == (sec.kind == MediaKind::Audio))
                .collect();
            if codecs.is_empty() {
                return Err(WebRtcError::NoCommonCodec);
            }
            let mid = i.to_string();
            let our_ssrc = random_u32().max(1);
            media.push(NegotiatedMedia {
                mid: mid.clone(),
                kind: sec.kind.clone(),
                codecs: codecs.iter().map(|(id, c)| (*id, c.pt)).collect(),
                // Provisional until the answer: what we offered to do.
                peer_sends: sec.direction.receives(),
                peer_receives: sec.direction.sends(),
                our_ssrc,
                // Audio sections only, for now: no feedback offered.
                feedback: SectionFeedback::default(),
                extmaps: Vec::new(),
                simulcast: Vec::new(),
                ptime: None,
                amr_mode: None,
            });
            offered.push(MediaAnswer {
                codecs: codecs.iter().map(|(_, c)| (*c).clone()).collect(),
                ssrc: Some((our_ssrc, config.cname.clone())),
                ..MediaAnswer::bare(mid, sec.kind.clone(), Some(sec.direction))
            });
        }
        if media.is_empty() {
            return Err(WebRtcError::NoCommonCodec);
        }
        let local = Credentials::random();
        let session = (random_u64(), 1);
        let offer = write_offer(&config.description(
            session,
            &local,
            our_fp.to_string(),
            Setup::Actpass,
            offered.clone(),
        ));
        let ice = IceLite::offering(config.ice.clone(), local, now);
        // The role is provisional: the answer's a=setup decides.
        let mut leg = WebRtcLeg::with_sdp(
            config,
            (ice, Role::Server),
            (media, offered, offer, session),
            our_fp.to_string(),
        );
        leg.awaiting = Some(Awaiting {
            certificate,
            early_dtls: Vec::new(),
        });
        Ok(leg)
    }

    /// The peer's answer to [`WebRtcLeg::new_offer`], at `now`: its ICE credentials, its
    /// fingerprint, its DTLS role (`active` makes us the DTLS server, `passive` the client),
    /// and per section (by `a=mid`) the codecs it took among ours and its direction; a
    /// section it rejected (port 0, not bundled, or no codec of ours) carries nothing. DTLS
    /// records that came early are handed to the endpoint now. Err: an answer that cannot be
    /// taken (the leg is unchanged and still waits).
    pub fn accept_answer(&mut self, answer: &Offer, now: Instant) -> Result<(), WebRtcError> {
        if self.awaiting.is_none() || self.closed.is_some() {
            return Err(WebRtcError::NotAwaitingAnswer);
        }
        let (role, _) = match answer.setup {
            Setup::Active => (Role::Server, ()),
            Setup::Passive => (Role::Client, ()),
            Setup::Actpass => return Err(WebRtcError::AnswerSetupActpass),
            Setup::Holdconn => return Err(WebRtcError::NoDtlsRole),
        };
        let peer_fp = fingerprint_of(answer)?;
        let mut media = self.media.clone();
        for m in &mut media {
            let a = answer
                .media
                .iter()
                .find(|a| a.mid == m.mid)
                .filter(|a| a.port != 0 || answer.bundle.contains(&a.mid));
            let Some(a) = a else {
                m.codecs.clear();
                m.peer_sends = false;
                m.peer_receives = false;
                continue;
            };
            // RFC 3264 §6.1: the answer uses the offer's payload types.
            m.codecs
                .retain(|(_, pt)| a.codecs.iter().any(|c| c.pt == *pt));
            let usable = !m.codecs.is_empty();
            m.peer_sends = usable && a.direction.sends();
            m.peer_receives = usable && a.direction.receives();
        }
        if media.iter().all(|m| m.codecs.is_empty()) {
            return Err(WebRtcError::NoCommonCodec);
        }
        let awaiting = self.awaiting.take().expect("checked above");
        self.media = media;
        self.role = role;
        self.ice.set_remote(
            Credentials {
                ufrag: answer.ice_ufrag.clone(),
                pwd: answer.ice_pwd.clone(),
            },
            now,
        );
        self.peer_fingerprint = Some(peer_fp.clone());
        let mut dtls_config = EndpointConfig::new(role, awaiting.certificate, peer_fp);
        dtls_config.srtp_profiles = self.config.srtp_profiles.clone();
        dtls_config.timers = self.config.dtls_timers;
        self.dtls_config = Some(Box::new(dtls_config));
        // A server listens from now on; a client says its ClientHello once ICE has nominated
        // (now, if it already has).
        if role == Role::Server || self.ice.selected().is_some() {
            if let Err(e) = self.start_dtls(now) {
                self.close_with(CloseReason::DtlsFailed(FailReason::Internal));
                return Err(e);
            }
        }
        for (from, d) in awaiting.early_dtls {
            self.handle_dtls(now, from, &d);
        }
        Ok(())
    }

    /// Whether an offer of ours waits for its answer.
    pub fn awaiting_answer(&self) -> bool {
        self.awaiting.is_some()
    }

    /// A new offer of ours in the established session, adding `add` sections the peer
    /// receives on (kind, how many): every section so far as it stands (same mids, order,
    /// codecs, directions), then the new ones, each with codecs, feedback and extensions
    /// like the peer's section of that kind (our defaults where it has none), an SSRC of ours
    /// and our direction `sendonly`; the same ICE credentials and fingerprint, `actpass`, one
    /// `o=` version on. Its revision (for the answer) and its SDP. Err: an offer of ours
    /// already waits for its answer, or the leg made the first offer and it is unanswered.
    pub fn reoffer(&mut self, add: &[(MediaKind, usize)]) -> Result<(u64, String), WebRtcError> {
        if self.awaiting.is_some() || self.reoffer.is_some() || self.closed.is_some() {
            return Err(WebRtcError::NotAwaitingAnswer);
        }
        let mut sections = self.sections.clone();
        let mut added = Vec::new();
        let mut next_mid = 0u32;
        for (kind, n) in add {
            for _ in 0..*n {
                while sections.iter().any(|m| m.mid == next_mid.to_string()) {
                    next_mid += 1;
                }
                let mid = next_mid.to_string();
                if let Some((negotiated, section)) = self.added_section(kind, mid) {
                    added.push(negotiated);
                    sections.push(section);
                }
            }
        }
        self.session.1 += 1;
        let local = self.ice.local().clone();
        let sdp = write_offer(&self.config.description(
            self.session,
            &local,
            self.fingerprint.clone(),
            Setup::Actpass,
            sections.clone(),
        ));
        let revision = self.session.1;
        self.reoffer = Some(Reoffer { revision, added });
        self.sections = sections;
        self.local_sdp = sdp.clone();
        Ok((revision, sdp))
    }

    /// A section of `kind` we add to a new offer as `mid`, with its negotiated state: the
    /// codecs, feedback and extensions of the peer's section of that kind (our defaults where
    /// it has none), an SSRC of ours, `sendonly`; none when there is no codec to offer.
    fn added_section(
        &self,
        kind: &MediaKind,
        mid: String,
    ) -> Option<(NegotiatedMedia, MediaAnswer)> {
        let our_ssrc = random_u32().max(1);
        // Like the peer's section of this kind: its codecs, feedback and extensions.
        let like = self
            .media
            .iter()
            .zip(
                self.sections
                    .iter()
                    .filter(|s| s.direction.is_some() && s.sctp.is_none()),
            )
            .find(|(m, _)| m.kind == *kind);
        let (codecs, rtx, feedback_lines, extmaps, fb, extmap_ids) = match like {
            Some((m, s)) => (
                s.codecs.clone(),
                s.rtx.clone(),
                s.feedback.clone(),
                s.extmaps.clone(),
                SectionFeedback {
                    rtx_ssrc: random_u32().max(1),
                    peer_rtx: Vec::new(),
                    ..m.feedback.clone()
                },
                m.extmaps.clone(),
            ),
            None => {
                let prefs = match kind {
                    MediaKind::Audio => &self.config.audio_codecs,
                    _ => &self.config.video_codecs,
                };
                let codecs: Vec<Codec> = prefs.iter().map(|c| c.offer_codec()).collect();
                (
                    codecs,
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    SectionFeedback::default(),
                    Vec::new(),
                )
            }
        };
        if codecs.is_empty() {
            return None;
        }
        let negotiated = NegotiatedMedia {
            mid: mid.clone(),
            kind: kind.clone(),
            codecs: codecs
                .iter()
                .filter_map(|c| CodecId::of(c).map(|id| (id, c.pt)))
                .collect(),
            peer_sends: false,
            peer_receives: true,
            our_ssrc,
            feedback: fb.clone(),
            extmaps: extmap_ids,
            simulcast: Vec::new(),
            ptime: None,
            amr_mode: None,
        };
        let section = MediaAnswer {
            mid,
            kind: kind.clone(),
            direction: Some(Direction::SendOnly),
            codecs,
            ssrc: Some((our_ssrc, self.config.cname.clone())),
            feedback: feedback_lines,
            rtx_ssrc: (!rtx.is_empty()).then_some(fb.rtx_ssrc),
            rtx,
            extmaps,
            rtcp_rsize: true,
            simulcast_recv: Vec::new(),
            sctp: None,
        };
        Some((negotiated, section))
    }

    /// The peer's new offer in the established session (a re-INVITE through the ng protocol):
    /// the same DTLS association (the fingerprint it named before: a DTLS restart is
    /// refused); every section of the session again, at its index, each with the direction
    /// now offered (hold) and the agreed codecs it still lists; sections it adds are
    /// refused (port 0). New ICE credentials restart ICE (RFC 8445 §9): the selected pair and
    /// the SRTP keys stay, consent is renewed with the new credentials. Our answer
    /// ([`WebRtcLeg::answer_sdp`]) is one `o=` version on when it changed. Ok: our new ICE
    /// credentials after a restart. Err: the leg is unchanged.
    pub fn take_offer(
        &mut self,
        offer: &Offer,
        now: Instant,
    ) -> Result<Option<Credentials>, WebRtcError> {
        if self.awaiting.is_some() || self.reoffer.is_some() {
            return Err(WebRtcError::OfferPending);
        }
        if self.closed.is_some() {
            return Err(WebRtcError::NotAwaitingAnswer);
        }
        if self.peer_fingerprint.as_ref() != Some(&fingerprint_of(offer)?) {
            return Err(WebRtcError::DtlsRestart);
        }
        let mut media = self.media.clone();
        let mut sections = self.sections.clone();
        for (i, s) in sections.iter_mut().enumerate() {
            let o = offer
                .media
                .get(i)
                .filter(|o| o.mid == s.mid)
                .ok_or_else(|| WebRtcError::SectionMissing(s.mid.clone()))?;
            let Some(m) = media.iter_mut().find(|m| m.mid == s.mid) else {
                // Refused before, or the data channels' section: as it was.
                continue;
            };
            m.codecs
                .retain(|(_, pt)| o.codecs.iter().any(|c| c.pt == *pt));
            if m.codecs.is_empty() {
                return Err(WebRtcError::NoCommonCodec);
            }
            s.codecs
                .retain(|c| m.codecs.iter().any(|(_, pt)| *pt == c.pt));
            let usable = o.port != 0 || offer.bundle.contains(&o.mid);
            m.peer_sends = usable && o.direction.sends();
            m.peer_receives = usable && o.direction.receives();
            s.direction = usable.then(|| o.direction.reversed());
        }
        for o in offer.media.iter().skip(sections.len()) {
            sections.push(MediaAnswer::bare(o.mid.clone(), o.kind.clone(), None));
        }
        let remote = Credentials {
            ufrag: offer.ice_ufrag.clone(),
            pwd: offer.ice_pwd.clone(),
        };
        let restarted = (self.ice.remote() != Some(&remote)).then(|| {
            let local = Credentials::random();
            self.ice.restart(local.clone(), remote, now);
            local
        });
        let setup = match self.role {
            Role::Server => Setup::Passive,
            Role::Client => Setup::Active,
        };
        let write = |session| {
            write_answer(&self.config.description(
                session,
                self.ice.local(),
                self.fingerprint.clone(),
                setup,
                sections.clone(),
            ))
        };
        let mut answer = write(self.session);
        if answer != self.local_sdp {
            self.session.1 += 1;
            answer = write(self.session);
        }
        self.media = media;
        self.sections = sections;
        self.local_sdp = answer;
        Ok(restarted)
    }

    /// Takes back a new offer of ours that will get no answer (the re-INVITE it was made for
    /// was refused at the other side); the sections it would have added are forgotten.
    pub fn withdraw_offer(&mut self) {
        if let Some(r) = self.reoffer.take() {
            self.sections
                .retain(|s| !r.added.iter().any(|m| m.mid == s.mid));
        }
    }

    /// The revision of our new offer that waits for its answer, if one does.
    pub fn reoffer_pending(&self) -> Option<u64> {
        self.reoffer.as_ref().map(|r| r.revision)
    }

    /// The peer's answer to our new offer ([`WebRtcLeg::reoffer`]): the sections it added
    /// that the peer took (it receives on them, with the codecs it kept of ours) join the
    /// leg's media; the number that did. Err: no new offer of ours waits, or `revision` is
    /// not its own (the leg is unchanged).
    pub fn accept_reanswer(
        &mut self,
        answer: &Offer,
        revision: Option<u64>,
    ) -> Result<usize, WebRtcError> {
        let Some(pending) = self.reoffer.as_ref() else {
            return Err(WebRtcError::NotAwaitingAnswer);
        };
        if revision.is_some_and(|r| r != pending.revision) {
            return Err(WebRtcError::NotAwaitingAnswer);
        }
        let pending = self.reoffer.take().expect("checked above");
        let mut n = 0;
        for mut m in pending.added {
            let a = answer
                .media
                .iter()
                .find(|a| a.mid == m.mid)
                .filter(|a| a.port != 0 || answer.bundle.contains(&a.mid));
            let Some(a) = a else { continue };
            m.codecs
                .retain(|(_, pt)| a.codecs.iter().any(|c| c.pt == *pt));
            if m.codecs.is_empty() || !a.direction.receives() {
                continue;
            }
            m.peer_sends = false;
            m.peer_receives = true;
            self.media.push(m);
            n += 1;
        }
        Ok(n)
    }

    /// Our offer (from [`WebRtcLeg::new_offer`]): the SDP for the peer to answer.
    pub fn offer_sdp(&self) -> &str {
        &self.local_sdp
    }

    fn start_dtls(&mut self, now: Instant) -> Result<(), WebRtcError> {
        if let Some(cfg) = self.dtls_config.take() {
            let ep = Endpoint::new(*cfg, now).map_err(|e| WebRtcError::Dtls(e.to_string()))?;
            self.dtls = Some(Box::new(ep));
            if self.role == Role::Client {
                self.dtls_started = Some(now);
            }
            self.drain_dtls(now);
        }
        Ok(())
    }

    /// The answer SDP to send back to the offerer (for a leg that made the offer, our offer:
    /// [`WebRtcLeg::offer_sdp`]).
    pub fn answer_sdp(&self) -> &str {
        &self.local_sdp
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

    /// The payload type negotiated for `codec` (our most preferred one if several were).
    pub fn payload_type_for(&self, codec: CodecId) -> Option<u8> {
        super::payload_type_in(&self.media, codec)
    }

    /// The codec negotiated for payload type `pt`.
    pub fn codec_for(&self, pt: u8) -> Option<CodecId> {
        super::codec_in(&self.media, pt)
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
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// The DTLS handshake's time, once connected.
    pub fn handshake_time(&self) -> Option<Duration> {
        self.handshake_time
    }

    /// The SRTP profile DTLS negotiated, once connected.
    pub fn srtp_profile(&self) -> Option<Profile> {
        self.profile
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

    /// A STUN message from `from`, parsed where the datagram was read. Binding requests go to
    /// the ICE agent (answered, or refused and counted); Binding indications are keepalives
    /// (RFC 8489 §6.3.2 with no answer, nothing refused); anything else is refused.
    pub fn handle_stun(&mut self, now: Instant, from: SocketAddr, msg: &Message<'_>) {
        if self.closed.is_some() {
            self.counters.drop(DropReason::AfterClose);
            return;
        }
        self.counters.stun_in += 1;
        if msg.class() == StunClass::Indication {
            return;
        }
        let was_validated = self.ice.is_validated(from);
        let mut out = self.take_buffer();
        out.resize(512, 0);
        match self.ice.handle_binding(now, from, msg, &mut out) {
            Ok(outcome) => {
                out.truncate(outcome.response_len);
                self.queue
                    .push_back(Pending::Transmit(from, out, TransmitKind::Stun));
                if !was_validated && self.ice.is_validated(from) {
                    self.queue
                        .push_back(Pending::Event(LegEvent::Validated(from)));
                }
                if let Some(IceEvent::Selected(addr)) = outcome.event {
                    self.queue
                        .push_back(Pending::Event(LegEvent::IceSelected(addr)));
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
                self.counters.drop(DropReason::StunRejected);
                out.truncate(n);
                self.queue
                    .push_back(Pending::Transmit(from, out, TransmitKind::Stun));
            }
            Err(_) => {
                self.counters.drop(DropReason::StunRejected);
                self.recycle(out);
            }
        }
    }

    /// Whether a DTLS flight has been handled (or sent, as the client).
    pub fn handshake_started(&self) -> bool {
        self.dtls_started.is_some()
    }

    /// A DTLS record from `from`: handed to the endpoint if ICE validated the address.
    pub fn handle_dtls(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if self.closed.is_some() {
            self.counters.drop(DropReason::AfterClose);
            return;
        }
        if !self.ice.is_validated(from) {
            self.counters.drop(DropReason::UnvalidatedSource);
            return;
        }
        let Some(ep) = self.dtls.as_mut() else {
            if let Some(a) = self.awaiting.as_mut() {
                // Before the answer names the fingerprint: kept for the endpoint.
                if a.early_dtls.len() < EARLY_DTLS_MAX {
                    // Counted when the endpoint takes it.
                    a.early_dtls.push((from, datagram.to_vec()));
                } else {
                    self.counters.drop(DropReason::UnknownKind);
                }
                return;
            }
            // A client before nomination: nothing to say to DTLS yet.
            self.counters.drop(DropReason::UnknownKind);
            return;
        };
        self.counters.dtls_in += 1;
        if self.dtls_started.is_none() {
            self.dtls_started = Some(now);
        }
        self.dtls_peer = Some(from);
        if let secrelay_dtls::Verdict::Discarded(d) = ep.handle_datagram(now, datagram) {
            self.counters.drop(DropReason::of_dtls(d));
        }
        self.drain_dtls(now);
    }

    /// Whether SRTP/SRTCP from `from` may be unprotected now (open, keyed, the source
    /// validated by ICE), or why not.
    pub fn media_gate(&self, from: SocketAddr) -> Result<(), DropReason> {
        if self.closed.is_some() {
            Err(DropReason::AfterClose)
        } else if !self.ice.is_validated(from) {
            Err(DropReason::UnvalidatedSource)
        } else if self.srtp.is_none() {
            Err(DropReason::BeforeKeys)
        } else {
            Ok(())
        }
    }

    /// The context that unprotects what the peer sends (once keyed).
    pub fn inbound_context(&mut self) -> Option<&mut Context> {
        self.srtp.as_mut().map(|s| &mut s.inbound)
    }

    /// The context that protects what we send the peer (once keyed).
    pub fn outbound_context(&mut self) -> Option<&mut Context> {
        self.srtp.as_mut().map(|s| &mut s.outbound)
    }

    /// Where protected media for the peer goes: the ICE-selected address, once keyed and open,
    /// while it is this leg's (validated, not given up to another session).
    pub fn media_destination(&self) -> Option<SocketAddr> {
        if self.closed.is_some() || self.srtp.is_none() {
            return None;
        }
        self.selected_own()
    }

    /// Asks the CPU to start loading what a copy to this leg reads of it (where it goes, its
    /// counters): a hint for a fan-out loop, a few members ahead.
    pub(crate) fn prefetch_copy(&self) {
        use secrelay_srtp::simd::prefetch::value;
        value(&self.closed, 1);
        value(&self.srtp, 1);
        self.ice.prefetch_usable();
        value(&self.counters, 2);
    }

    /// The selected address while it is validated for this leg.
    fn selected_own(&self) -> Option<SocketAddr> {
        self.ice.usable()
    }

    fn dtls_destination(&self) -> Option<SocketAddr> {
        match self.ice.selected() {
            Some(_) => self.selected_own(),
            None => self.dtls_peer,
        }
    }

    /// Gives `addr` up: another session on the shared port validated it since (one remote
    /// address belongs to one session). Nothing is sent to it, and nothing from it is taken,
    /// until a check of this leg's validates it again.
    pub fn yield_address(&mut self, addr: SocketAddr) {
        self.ice.forget(addr);
        if self.dtls_peer == Some(addr) {
            self.dtls_peer = None;
        }
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
                self.queue
                    .push_back(Pending::Transmit(dest, d, TransmitKind::Dtls));
            }
        }
        // With no destination yet (a client before nomination cannot have one: it starts on
        // nomination), the engine retransmits on its timer.
        for e in events {
            match e {
                DtlsEvent::Connected { profile, keys, .. } => {
                    if let Err(reason) = self.install_keys(keys) {
                        self.close_with(reason);
                        return;
                    }
                    let handshake = now.saturating_duration_since(self.dtls_started.unwrap_or(now));
                    self.handshake_time = Some(handshake);
                    self.profile = Some(profile);
                    self.queue
                        .push_back(Pending::Event(LegEvent::Connected { profile, handshake }));
                }
                DtlsEvent::Failed(FailReason::FingerprintMismatch) => {
                    self.close_with(CloseReason::FingerprintMismatch)
                }
                DtlsEvent::Failed(r) => self.close_with(CloseReason::DtlsFailed(r)),
                DtlsEvent::Closed => self.close_with(CloseReason::CloseNotify),
                DtlsEvent::ApplicationData(packet) => {
                    if let Some(data) = self.data.as_mut() {
                        data.handle_packet(now, &packet, &mut self.counters.data);
                    }
                }
                _ => {}
            }
        }
        self.flush_data(now);
    }

    /// Sends what the data channels queued, each SCTP packet as one DTLS record, once DTLS is
    /// up (SCTP retransmits what it could not send before).
    fn flush_data(&mut self, now: Instant) {
        let (Some(data), Some(ep)) = (self.data.as_mut(), self.dtls.as_mut()) else {
            return;
        };
        if self.closed.is_some() || ep.state() != secrelay_dtls::State::Connected {
            return;
        }
        let mut sent = false;
        while let Some(packet) = data.poll_transmit() {
            if ep.send_application_data(now, &packet).is_err() {
                break;
            }
            sent = true;
        }
        if sent {
            self.drain_dtls(now);
        }
    }

    /// The next message the participant sent on a data channel, for the room to relay, with
    /// the time it came.
    pub fn take_data(&mut self) -> Option<(DataMessage, Instant)> {
        self.data.as_mut()?.take()
    }

    /// Sends other participants' messages on this participant's channels of the same labels
    /// (opened on first use), then what SCTP made of them in one flush; `false` when this leg
    /// has no data channels.
    pub fn send_data(&mut self, now: Instant, msgs: &[DataMessage]) -> bool {
        let Some(data) = self.data.as_mut() else {
            return false;
        };
        for msg in msgs {
            data.send(msg, &mut self.counters.data);
        }
        self.flush_data(now);
        true
    }

    /// The data channels, when negotiated.
    pub fn data(&self) -> Option<&DataLink> {
        self.data.as_deref()
    }

    fn install_keys(&mut self, keys: secrelay_dtls::SrtpKeys) -> Result<(), CloseReason> {
        self.srtp = Some(
            self.contexts(keys.local.clone(), keys.remote.clone())
                .map_err(|_| CloseReason::DtlsFailed(FailReason::Internal))?,
        );
        Ok(())
    }

    /// The SRTP contexts for our key `ours` and the peer's `theirs`.
    fn contexts(
        &self,
        ours: MasterKey,
        theirs: MasterKey,
    ) -> Result<Srtp, secrelay_srtp::ConfigError> {
        let window = self.config.replay_window;
        let make = |p: Policy| Context::new(p.replay_window(window));
        let inbound = make(Policy::new(theirs.clone()).any_inbound())?;
        // A NACK answered without RTX sends a packet again under its index: byte for byte the
        // packet first sent (the room makes it so), never other bytes under the same index.
        let outbound = make(
            Policy::new(ours.clone())
                .any_outbound()
                .allow_repeat_tx(true),
        )?;
        Ok(Srtp {
            inbound,
            outbound,
            keys: (ours, theirs),
        })
    }

    /// What a node taking the leg over needs ([`WebRtcMarks`]), and where its SRTP streams
    /// stand; `None` before DTLS connected.
    pub fn marks(&self) -> Option<(WebRtcMarks, Vec<SrtpMark>)> {
        let srtp = self.srtp.as_ref()?;
        let profile = self.profile?;
        let (local, remote) = (self.ice.local(), self.ice.remote()?);
        let marks = WebRtcMarks {
            fingerprint: self.fingerprint.clone(),
            session: self.session,
            ssrcs: self
                .media
                .iter()
                .map(|m| (m.mid.clone(), m.our_ssrc, m.feedback.rtx_ssrc))
                .collect(),
            profile: profile.sdp_name().to_owned(),
            ours: srtp.keys.0.to_sdes_inline(),
            theirs: srtp.keys.1.to_sdes_inline(),
            ice: IceMarks {
                ufrag: local.ufrag.clone(),
                pwd: local.pwd.clone(),
                remote: Some((remote.ufrag.clone(), remote.pwd.clone())),
                rtp: None,
                rtcp: None,
            },
        };
        Some((marks, SrtpMark::of(&srtp.inbound, &srtp.outbound)))
    }

    /// Takes over a connected leg of another node (made again here from the same signaling,
    /// at `now`): its SRTP keys and streams where `srtp` left them, without a DTLS handshake
    /// (the peer's association goes on), its `o=` session, its SSRCs of ours and its ICE
    /// credentials. On the address the peer knows, its consent checks validate it again; on
    /// another, the peer restarts ICE towards it through its signaling. Our ICE credentials
    /// after: the shard must route checks naming them here. Err: our certificate is not the
    /// one the peer knows, or the keys do not make contexts (the leg is unchanged).
    pub fn resume(
        &mut self,
        m: &WebRtcMarks,
        srtp: &[SrtpMark],
        now: Instant,
    ) -> Result<Credentials, WebRtcError> {
        if m.fingerprint != self.fingerprint {
            return Err(WebRtcError::OtherCertificate);
        }
        let (local, Some(remote)) = m.ice.credentials() else {
            return Err(WebRtcError::Srtp(
                "the kept state has no peer credentials".into(),
            ));
        };
        let bad = |e: &dyn fmt::Display| WebRtcError::Srtp(e.to_string());
        let profile: Profile = m.profile.parse().map_err(|e| bad(&e))?;
        let key = |inline: &str| MasterKey::from_sdes_inline(profile, inline).map_err(|e| bad(&e));
        let mut contexts = self
            .contexts(key(&m.ours)?, key(&m.theirs)?)
            .map_err(|e| bad(&e))?;
        SrtpMark::resume(srtp, &mut contexts.inbound, &mut contexts.outbound)
            .map_err(|e| bad(&e))?;
        for (mid, ssrc, rtx) in &m.ssrcs {
            if let Some(x) = self.media.iter_mut().find(|x| &x.mid == mid) {
                x.our_ssrc = *ssrc;
                x.feedback.rtx_ssrc = *rtx;
            }
            if let Some(s) = self.sections.iter_mut().find(|s| &s.mid == mid) {
                if let Some((ours, _)) = s.ssrc.as_mut() {
                    *ours = *ssrc;
                }
                if s.rtx_ssrc.is_some() {
                    s.rtx_ssrc = Some(*rtx);
                }
            }
        }
        self.session = m.session;
        self.ice.restart(local.clone(), remote, now);
        self.srtp = Some(contexts);
        self.profile = Some(profile);
        self.dtls = None;
        self.dtls_config = None;
        self.dtls_timeout = None;
        self.awaiting = None;
        Ok(local)
    }

    fn close_with(&mut self, reason: CloseReason) {
        if self.closed.is_none() {
            self.closed = Some(reason);
            self.srtp = None;
            self.queue
                .push_back(Pending::Event(LegEvent::Closed(reason)));
        }
    }

    /// Ends the leg without `close_notify` (another node goes on with the association):
    /// reports [`CloseReason::Ended`].
    pub fn close_quietly(&mut self) {
        self.close_with(CloseReason::Ended);
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
        if let Some(data) = self.data.as_mut() {
            if data.poll_timeout().is_some_and(|t| now >= t) {
                data.handle_timeout(now, &mut self.counters.data);
                self.flush_data(now);
            }
        }
    }

    /// When [`WebRtcLeg::handle_timeout`] must next be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let data = self.data.as_deref().and_then(DataLink::poll_timeout);
        [self.ice.poll_timeout(), self.dtls_timeout, data]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether outputs other than the closing timeout are queued.
    pub fn has_output(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The next output: queued transmits and events in order, then [`LegOutput::Timeout`]
    /// (which ends a drain), or `None` once closed with nothing left. Borrowed bytes stay
    /// valid until the next call.
    pub fn poll_output(&mut self) -> Option<LegOutput<'_>> {
        if let Some(b) = self.lent.take() {
            self.recycle(b);
        }
        let Some(p) = self.queue.pop_front() else {
            return self.poll_timeout().map(LegOutput::Timeout);
        };
        Some(match p {
            Pending::Transmit(destination, buf, kind) => {
                let contents = self.lent.insert(buf);
                LegOutput::Transmit {
                    destination,
                    via: Via::Shared,
                    contents,
                    kind,
                }
            }
            Pending::Event(e) => LegOutput::Event(e),
        })
    }
}
