//! SDP offer/answer for a WebRTC gateway (RFC 8829 JSEP, RFC 8843 BUNDLE, RFC 5763/8842
//! DTLS-SRTP, RFC 8839 ICE): an offer is parsed by Mozilla's `webrtc-sdp` and reduced to what
//! the gateway decides on ([`Offer`]); the answer is written by [`write_answer`].

use std::fmt::{self, Write as _};
use std::net::SocketAddr;

use webrtc_sdp::attribute_type::{
    SdpAttribute, SdpAttributeGroupSemantic, SdpAttributePayloadType, SdpAttributeSetup,
    SdpAttributeType, SdpSingleDirection, SdpSsrcGroupSemantic,
};
use webrtc_sdp::media_type::{SdpFormatList, SdpMedia, SdpMediaValue};

/// Why an offer cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SdpError {
    /// The SDP does not parse (the parser's message).
    Parse(String),
    /// No m= section.
    NoMedia,
    /// A media section has no ICE ufrag/pwd (neither its own nor the session's).
    MissingIceCredentials,
    /// No `a=fingerprint` (DTLS-SRTP needs one).
    MissingFingerprint,
    /// The fingerprint uses a hash other than SHA-256/384/512 (named).
    UnsupportedFingerprint(String),
    /// Media sections disagree on ICE credentials or fingerprint but are bundled.
    InconsistentBundle,
    /// A media section of a BUNDLE offer has no a=mid.
    MissingMid,
}

impl fmt::Display for SdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdpError::Parse(m) => write!(f, "SDP does not parse: {m}"),
            SdpError::NoMedia => write!(f, "SDP offer has no media section"),
            SdpError::MissingIceCredentials => write!(f, "SDP offer lacks a=ice-ufrag/a=ice-pwd"),
            SdpError::MissingFingerprint => write!(f, "SDP offer lacks a=fingerprint"),
            SdpError::UnsupportedFingerprint(h) => write!(
                f,
                "SDP fingerprint hash {h} not supported (sha-256/384/512)"
            ),
            SdpError::InconsistentBundle => write!(
                f,
                "bundled media sections disagree on ICE credentials or fingerprint"
            ),
            SdpError::MissingMid => write!(f, "SDP media section lacks a=mid"),
        }
    }
}

impl std::error::Error for SdpError {}

/// DTLS role negotiation (`a=setup`, RFC 4145/5763).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// Will initiate (DTLS client).
    Active,
    /// Will accept (DTLS server).
    Passive,
    /// Either (offers must say this, RFC 5763).
    Actpass,
    /// Neither, for now.
    Holdconn,
}

impl Setup {
    /// The SDP token.
    pub fn as_str(self) -> &'static str {
        match self {
            Setup::Active => "active",
            Setup::Passive => "passive",
            Setup::Actpass => "actpass",
            Setup::Holdconn => "holdconn",
        }
    }
}

/// Media direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// sendrecv (the default).
    SendRecv,
    /// sendonly.
    SendOnly,
    /// recvonly.
    RecvOnly,
    /// inactive.
    Inactive,
}

impl Direction {
    /// The SDP token.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }
    /// The direction an answerer uses when it wants to do everything the offer allows.
    pub fn reversed(self) -> Direction {
        match self {
            Direction::SendOnly => Direction::RecvOnly,
            Direction::RecvOnly => Direction::SendOnly,
            d => d,
        }
    }
    /// Whether the side that wrote this direction sends media.
    pub fn sends(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::SendOnly)
    }
    /// Whether the side that wrote this direction receives media.
    pub fn receives(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::RecvOnly)
    }
}

/// Media kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaKind {
    /// audio
    Audio,
    /// video
    Video,
    /// application (data channels), which a media gateway rejects
    Application,
    /// anything else (named)
    Other(String),
}

impl MediaKind {
    /// The SDP token.
    pub fn as_str(&self) -> &str {
        match self {
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
            MediaKind::Application => "application",
            MediaKind::Other(s) => s,
        }
    }
}

/// A codec offered (`a=rtpmap` + `a=fmtp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Codec {
    /// Payload type.
    pub pt: u8,
    /// Encoding name as offered (case kept; compare case-insensitively).
    pub name: String,
    /// Clock rate.
    pub clock_rate: u32,
    /// Channels, if given.
    pub channels: Option<u32>,
    /// Format parameters, as an fmtp line's value, if any.
    pub fmtp: Option<String>,
}

impl Codec {
    /// Whether this is the named codec (case-insensitive) at this clock rate.
    pub fn is(&self, name: &str, clock_rate: u32) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.clock_rate == clock_rate
    }

    /// Its `a=rtpmap` encoding: `NAME/CLOCK`, or `NAME/CLOCK/CHANNELS` when the channel count
    /// is given.
    pub fn encoding(&self) -> String {
        match self.channels {
            Some(ch) => format!("{}/{}/{ch}", self.name, self.clock_rate),
            None => format!("{}/{}", self.name, self.clock_rate),
        }
    }
}

/// One offered m= section.
#[derive(Debug, Clone)]
pub struct MediaOffer {
    /// a=mid.
    pub mid: String,
    /// Kind.
    pub kind: MediaKind,
    /// Port (0: rejected or bundle-only).
    pub port: u32,
    /// Offered direction.
    pub direction: Direction,
    /// Codecs in preference order.
    pub codecs: Vec<Codec>,
    /// a=rtcp-mux.
    pub rtcp_mux: bool,
    /// SSRCs the offerer announces (a=ssrc).
    pub ssrcs: Vec<u32>,
    /// a=extmap lines as (id, uri).
    pub extmaps: Vec<(u16, String)>,
    /// a=rtcp-fb lines as (payload type, `None` for `*`; the feedback, e.g. `nack pli`).
    pub rtcp_fb: Vec<(Option<u8>, String)>,
    /// a=rtcp-rsize (RFC 5506: reduced-size RTCP).
    pub rtcp_rsize: bool,
    /// `a=ssrc-group:FID` pairs: (primary SSRC, its retransmission SSRC).
    pub fid: Vec<(u32, u32)>,
    /// Simulcast layers the offerer sends (RFC 8853 `a=simulcast:send`, each layer's first
    /// alternative, paused ones left out), in the offer's order, when each has its
    /// `a=rid:… send`.
    pub simulcast_send: Vec<String>,
    /// Data channels: an `m=application … UDP/DTLS/SCTP webrtc-datachannel` section (or
    /// TCP/DTLS/SCTP), RFC 8841.
    pub sctp: Option<SctpOffer>,
}

/// What a data-channel section offers (RFC 8841).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpOffer {
    /// `a=sctp-port` (5000 when absent, RFC 8841 §5.1).
    pub port: u16,
    /// `a=max-message-size` (RFC 8841 §6): the largest message the offerer takes; `None` when
    /// absent (then 64 KiB may be assumed, §6.1), 0 for "any size".
    pub max_message_size: Option<u64>,
}

/// What our answer says about its data-channel section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpAnswer {
    /// Our `a=sctp-port`.
    pub port: u16,
    /// Our `a=max-message-size`.
    pub max_message_size: u64,
}

impl MediaOffer {
    /// Whether the offer lists feedback `fb` (e.g. `nack`, `nack pli`, `ccm fir`,
    /// `transport-cc`, `goog-remb`) for payload type `pt`, or for every payload type.
    pub fn offers_feedback(&self, pt: u8, fb: &str) -> bool {
        self.rtcp_fb
            .iter()
            .any(|(p, f)| p.is_none_or(|p| p == pt) && f.eq_ignore_ascii_case(fb))
    }

    /// The retransmission codec (RFC 4588 `rtx`, with `apt=`) offered for payload type `pt`.
    pub fn rtx_for(&self, pt: u8) -> Option<&Codec> {
        self.codecs.iter().find(|c| {
            c.name.eq_ignore_ascii_case("rtx")
                && c.fmtp.as_deref().is_some_and(|f| {
                    f.split(';')
                        .filter_map(|kv| kv.trim().split_once('='))
                        .any(|(k, v)| k.trim() == "apt" && v.trim().parse::<u8>() == Ok(pt))
                })
        })
    }

    /// The id the offer gave header extension `uri`.
    pub fn extmap_id(&self, uri: &str) -> Option<u16> {
        self.extmaps
            .iter()
            .find(|(_, u)| u == uri)
            .map(|(id, _)| *id)
    }
}

/// An offer, reduced to what the gateway decides on.
#[derive(Debug, Clone)]
pub struct Offer {
    /// ICE username fragment.
    pub ice_ufrag: String,
    /// ICE password.
    pub ice_pwd: String,
    /// DTLS fingerprint: hash name (`sha-256`) and bytes.
    pub fingerprint: (String, Vec<u8>),
    /// a=setup (defaults to actpass when absent).
    pub setup: Setup,
    /// Mids in the BUNDLE group, if any.
    pub bundle: Vec<String>,
    /// Media sections in order.
    pub media: Vec<MediaOffer>,
    /// The offerer is ICE-lite.
    pub ice_lite: bool,
}

fn attr_str<'a>(
    attrs: &'a [SdpAttribute],
    f: impl Fn(&'a SdpAttribute) -> Option<&'a str>,
) -> Option<&'a str> {
    attrs.iter().find_map(f)
}

fn setup_of(a: &SdpAttribute) -> Option<Setup> {
    match a {
        SdpAttribute::Setup(SdpAttributeSetup::Active) => Some(Setup::Active),
        SdpAttribute::Setup(SdpAttributeSetup::Passive) => Some(Setup::Passive),
        SdpAttribute::Setup(SdpAttributeSetup::Actpass) => Some(Setup::Actpass),
        SdpAttribute::Setup(SdpAttributeSetup::Holdconn) => Some(Setup::Holdconn),
        _ => None,
    }
}

fn fingerprint_of(a: &SdpAttribute) -> Option<(String, Vec<u8>)> {
    match a {
        SdpAttribute::Fingerprint(f) => Some((f.hash_algorithm.to_string(), f.fingerprint.clone())),
        _ => None,
    }
}

/// The codecs of section `m` (its `attrs`), in the `m=` line's order: each payload type with
/// its `a=rtpmap` and `a=fmtp`; a static one (PCMU, PCMA, G.722) may come without `a=rtpmap`
/// (RFC 3551), any other without one is left out.
fn codecs_of(m: &SdpMedia, attrs: &[SdpAttribute]) -> Vec<Codec> {
    let pts: Vec<u32> = match m.get_formats() {
        SdpFormatList::Integers(v) => v.clone(),
        _ => Vec::new(),
    };
    let mut codecs = Vec::new();
    for pt in pts {
        let Ok(pt8) = u8::try_from(pt) else { continue };
        let rtpmap = attrs.iter().find_map(|a| match a {
            SdpAttribute::Rtpmap(r) if u32::from(r.payload_type) == pt => Some(r),
            _ => None,
        });
        let fmtp = attrs.iter().find_map(|a| match a {
            SdpAttribute::Fmtp(f) if u32::from(f.payload_type) == pt => {
                Some(f.parameters.to_string())
            }
            _ => None,
        });
        // Static payload types may come without a=rtpmap (RFC 3551).
        let (name, clock_rate, channels) = match (rtpmap, pt8) {
            (Some(r), _) => (r.codec_name.clone(), r.frequency, r.channels),
            (None, 0) => ("PCMU".to_string(), 8000, None),
            (None, 8) => ("PCMA".to_string(), 8000, None),
            (None, 9) => ("G722".to_string(), 8000, None),
            _ => continue,
        };
        codecs.push(Codec {
            pt: pt8,
            name,
            clock_rate,
            channels,
            fmtp: fmtp.filter(|s| !s.is_empty()),
        });
    }
    codecs
}

/// The section's `a=rtcp-fb` lines: each one's payload type (none for `*`) and the line
/// without it (`nack pli`, `ccm fir`, `transport-cc`).
fn rtcp_feedback_of(attrs: &[SdpAttribute]) -> Vec<(Option<u8>, String)> {
    attrs
        .iter()
        .filter_map(|a| {
            let SdpAttribute::Rtcpfb(f) = a else {
                return None;
            };
            let pt = match f.payload_type {
                SdpAttributePayloadType::PayloadType(p) => Some(p),
                SdpAttributePayloadType::Wildcard => None,
            };
            // The line without its payload type: `nack pli`, `ccm fir`, `transport-cc`.
            let line = f.to_string();
            let fb = line.split_once(' ').map_or("", |(_, rest)| rest).trim();
            Some((pt, fb.to_owned()))
        })
        .collect()
}

/// The simulcast layers the peer sends (`a=simulcast` send, each alternative's first layer not
/// paused) that an `a=rid` send line describes.
fn simulcast_send_of(attrs: &[SdpAttribute]) -> Vec<String> {
    let send_rids: Vec<&str> = attrs
        .iter()
        .filter_map(|a| match a {
            SdpAttribute::Rid(r) if r.direction == SdpSingleDirection::Send => Some(r.id.as_str()),
            _ => None,
        })
        .collect();
    attrs
        .iter()
        .find_map(|a| match a {
            SdpAttribute::Simulcast(sc) => Some(
                sc.send
                    .iter()
                    .filter_map(|v| v.ids.iter().find(|id| !id.paused))
                    .map(|id| id.id.clone())
                    .filter(|id| send_rids.contains(&id.as_str()))
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

/// Media section `m`, the `index`th. A section without `a=mid` is taken by its index as mid
/// unless the offer bundles (`bundled`), where mids name what is bundled: a DTLS-SRTP offer
/// from before RFC 8843 (a SIP phone's, through the ng protocol) may have none.
fn media_offer(m: &SdpMedia, index: usize, bundled: bool) -> Result<MediaOffer, SdpError> {
    let attrs = m.get_attributes();
    let given = attr_str(attrs, |a| {
        if let SdpAttribute::Mid(s) = a {
            Some(s.as_str())
        } else {
            None
        }
    });
    let mid = match given {
        Some(mid) => mid.to_string(),
        None if !bundled => index.to_string(),
        None => return Err(SdpError::MissingMid),
    };
    let kind = match m.get_type() {
        SdpMediaValue::Audio => MediaKind::Audio,
        SdpMediaValue::Video => MediaKind::Video,
        SdpMediaValue::Application => MediaKind::Application,
        SdpMediaValue::Unknown(s) => MediaKind::Other(s.clone()),
    };
    let direction = attrs
        .iter()
        .find_map(|a| match a {
            SdpAttribute::Sendrecv => Some(Direction::SendRecv),
            SdpAttribute::Sendonly => Some(Direction::SendOnly),
            SdpAttribute::Recvonly => Some(Direction::RecvOnly),
            SdpAttribute::Inactive => Some(Direction::Inactive),
            _ => None,
        })
        .unwrap_or(Direction::SendRecv);
    let codecs = codecs_of(m, attrs);
    let ssrcs: Vec<u32> = {
        let mut v: Vec<u32> = attrs
            .iter()
            .filter_map(|a| {
                if let SdpAttribute::Ssrc(s) = a {
                    Some(s.id)
                } else {
                    None
                }
            })
            .collect();
        v.dedup();
        v
    };
    let extmaps = attrs
        .iter()
        .filter_map(|a| {
            if let SdpAttribute::Extmap(e) = a {
                Some((e.id, e.url.clone()))
            } else {
                None
            }
        })
        .collect();
    let rtcp_fb = rtcp_feedback_of(attrs);
    let simulcast_send = simulcast_send_of(attrs);
    let fid = attrs
        .iter()
        .filter_map(|a| match a {
            SdpAttribute::SsrcGroup(SdpSsrcGroupSemantic::FlowIdentification, v)
                if v.len() == 2 =>
            {
                Some((v[0].id, v[1].id))
            }
            _ => None,
        })
        .collect();
    Ok(MediaOffer {
        mid,
        kind,
        port: m.get_port(),
        direction,
        codecs,
        rtcp_mux: m.get_attribute(SdpAttributeType::RtcpMux).is_some(),
        ssrcs,
        extmaps,
        rtcp_fb,
        rtcp_rsize: m.get_attribute(SdpAttributeType::RtcpRsize).is_some(),
        fid,
        simulcast_send,
        sctp: sctp_offer(m),
    })
}

/// The data-channel part of an `m=application` section: SCTP over DTLS with the
/// `webrtc-datachannel` format. The old form (`DTLS/SCTP 5000` with `a=sctpmap`) is not taken.
fn sctp_offer(m: &SdpMedia) -> Option<SctpOffer> {
    use webrtc_sdp::media_type::SdpProtocolValue as P;
    if !matches!(m.get_proto(), P::UdpDtlsSctp | P::TcpDtlsSctp) {
        return None;
    }
    match m.get_formats() {
        SdpFormatList::Strings(f) if f.iter().any(|f| f == "webrtc-datachannel") => {}
        _ => return None,
    }
    let attrs = m.get_attributes();
    let port = attrs.iter().find_map(|a| match a {
        SdpAttribute::SctpPort(p) => Some(u16::try_from(*p).ok()),
        _ => None,
    });
    let port = match port {
        None => 5000,
        Some(Some(p)) if p != 0 => p,
        Some(_) => return None,
    };
    let max_message_size = attrs.iter().find_map(|a| match a {
        SdpAttribute::MaxMessageSize(n) => Some(*n),
        _ => None,
    });
    Some(SctpOffer {
        port,
        max_message_size,
    })
}

/// Lines webrtc-sdp did not understand and skipped (browsers' `a=rtcp-xr`, `a=extmap-allow-mixed`
/// on older parsers, …): routine, so at DEBUG, naming the attribute and the line number only
/// (a line's value may hold a participant's address). webrtc-sdp logs the same lines whole at
/// WARN through the `log` crate; `secrelay serve` turns that target off.
fn log_unsupported(warnings: &[webrtc_sdp::error::SdpParserError]) {
    for w in warnings {
        if let webrtc_sdp::error::SdpParserError::Unsupported {
            line, line_number, ..
        } = w
        {
            let attribute = line.split(':').next().unwrap_or_default();
            tracing::debug!(attribute, line_number, "SDP line not understood, ignored");
        }
    }
}

/// ICE ufrag, ICE password, fingerprint and setup of the first non-rejected section.
type Transport = (String, String, (String, Vec<u8>), Option<Setup>);

/// Parses an offer (or a re-offer) and reduces it. Session-level ICE credentials,
/// fingerprint and setup apply where a media section has none of its own; bundled
/// sections must agree.
pub fn parse_offer(sdp: &str) -> Result<Offer, SdpError> {
    let session = webrtc_sdp::parse_sdp(sdp, false).map_err(|e| SdpError::Parse(e.to_string()))?;
    log_unsupported(&session.warnings);
    if session.media.is_empty() {
        return Err(SdpError::NoMedia);
    }
    let sa = &session.attribute;
    let s_ufrag = attr_str(sa, |a| {
        if let SdpAttribute::IceUfrag(s) = a {
            Some(s.as_str())
        } else {
            None
        }
    });
    let s_pwd = attr_str(sa, |a| {
        if let SdpAttribute::IcePwd(s) = a {
            Some(s.as_str())
        } else {
            None
        }
    });
    let s_fp = sa.iter().find_map(fingerprint_of);
    let s_setup = sa.iter().find_map(setup_of);
    let bundle: Vec<String> = sa
        .iter()
        .find_map(|a| match a {
            SdpAttribute::Group(g) if matches!(g.semantics, SdpAttributeGroupSemantic::Bundle) => {
                Some(g.tags.clone())
            }
            _ => None,
        })
        .unwrap_or_default();
    let mut creds: Option<Transport> = None;
    let mut media = Vec::new();
    for (i, m) in session.media.iter().enumerate() {
        let offer = media_offer(m, i, !bundle.is_empty())?;
        let attrs = m.get_attributes();
        let ufrag = attr_str(attrs, |a| {
            if let SdpAttribute::IceUfrag(s) = a {
                Some(s.as_str())
            } else {
                None
            }
        })
        .or(s_ufrag);
        let pwd = attr_str(attrs, |a| {
            if let SdpAttribute::IcePwd(s) = a {
                Some(s.as_str())
            } else {
                None
            }
        })
        .or(s_pwd);
        let fp = attrs
            .iter()
            .find_map(fingerprint_of)
            .or_else(|| s_fp.clone());
        let setup = attrs.iter().find_map(setup_of).or(s_setup);
        if offer.port != 0 || bundle.contains(&offer.mid) {
            let (Some(u), Some(p)) = (ufrag, pwd) else {
                return Err(SdpError::MissingIceCredentials);
            };
            let fp = fp.ok_or(SdpError::MissingFingerprint)?;
            let this = (u.to_string(), p.to_string(), fp, setup);
            match &creds {
                None => creds = Some(this),
                Some(c)
                    if bundle.contains(&offer.mid)
                        && (c.0 != this.0 || c.1 != this.1 || c.2 != this.2) =>
                {
                    return Err(SdpError::InconsistentBundle)
                }
                Some(_) => {}
            }
        }
        media.push(offer);
    }
    let (ice_ufrag, ice_pwd, fingerprint, setup) = creds.ok_or(SdpError::MissingIceCredentials)?;
    if !matches!(fingerprint.0.as_str(), "sha-256" | "sha-384" | "sha-512") {
        return Err(SdpError::UnsupportedFingerprint(fingerprint.0));
    }
    Ok(Offer {
        ice_ufrag,
        ice_pwd,
        fingerprint,
        setup: setup.unwrap_or(Setup::Actpass),
        bundle,
        media,
        ice_lite: sa.iter().any(|a| matches!(a, SdpAttribute::IceLite)),
    })
}

/// One answered m= section.
#[derive(Debug, Clone)]
pub struct MediaAnswer {
    /// a=mid (the offer's).
    pub mid: String,
    /// Kind (the offer's).
    pub kind: MediaKind,
    /// Answered direction; `None` rejects the section (port 0).
    pub direction: Option<Direction>,
    /// Codecs accepted, in our order of preference, with the offer's payload types.
    pub codecs: Vec<Codec>,
    /// Our SSRC for what we send, with its CNAME (written with an `a=msid` naming a stream and
    /// track after the CNAME and mid, when the answer's direction sends).
    pub ssrc: Option<(u32, String)>,
    /// RTCP feedback we take, by payload type (`a=rtcp-fb:PT …`: `nack`, `nack pli`,
    /// `ccm fir`, `transport-cc`, …), written after that codec's `a=rtpmap`.
    pub feedback: Vec<(u8, String)>,
    /// Retransmission codecs (`rtx` with `apt=`), written after `codecs`.
    pub rtx: Vec<Codec>,
    /// The SSRC of our retransmissions, grouped with `ssrc` (`a=ssrc-group:FID`), when
    /// `rtx` is not empty and we send.
    pub rtx_ssrc: Option<u32>,
    /// Header extensions we use, with the offer's ids (`a=extmap`).
    pub extmaps: Vec<(u16, String)>,
    /// `a=rtcp-rsize`.
    pub rtcp_rsize: bool,
    /// Simulcast layers we receive (`a=rid:… recv` and `a=simulcast:recv`), in order.
    pub simulcast_recv: Vec<String>,
    /// A data-channel section (`m=application … UDP/DTLS/SCTP webrtc-datachannel`): written
    /// with `a=sctp-port` and `a=max-message-size` instead of codecs; `kind` is
    /// [`MediaKind::Application`].
    pub sctp: Option<SctpAnswer>,
}

impl MediaAnswer {
    /// A section with its mid, kind and direction and nothing else (no codecs, SSRC,
    /// feedback, extensions or SCTP): the rest is filled in with struct update syntax.
    pub fn bare(mid: String, kind: MediaKind, direction: Option<Direction>) -> MediaAnswer {
        MediaAnswer {
            mid,
            kind,
            direction,
            codecs: Vec::new(),
            ssrc: None,
            feedback: Vec::new(),
            rtx: Vec::new(),
            rtx_ssrc: None,
            extmaps: Vec::new(),
            rtcp_rsize: false,
            simulcast_recv: Vec::new(),
            sctp: None,
        }
    }
}

/// What an answer (or an offer, [`write_offer`]) of ours says about us.
#[derive(Debug, Clone)]
pub struct AnswerParams {
    /// Session id for o=.
    pub session_id: u64,
    /// Session version for o= (one more in each new description of the same session).
    pub version: u64,
    /// Our ICE ufrag.
    pub ice_ufrag: String,
    /// Our ICE password.
    pub ice_pwd: String,
    /// Our fingerprint in SDP form (`sha-256 AB:CD:…`).
    pub fingerprint: String,
    /// Our DTLS role (`active` or `passive`).
    pub setup: Setup,
    /// Our host candidates (ICE-lite: host only).
    pub candidates: Vec<SocketAddr>,
    /// Our passive ICE-TCP host candidates (RFC 6544), after the UDP ones.
    pub tcp_candidates: Vec<SocketAddr>,
    /// Answered sections, in the offer's order.
    pub media: Vec<MediaAnswer>,
}

/// Writes an ICE-lite offer of ours, for a WebRTC peer that will answer it (a SIP proxy's call
/// towards a browser): the shape of [`write_answer`], every section offered (a section's
/// `direction` is ours, its codecs with the payload types we chose) and `p.setup` =
/// [`Setup::Actpass`] (RFC 5763 §5: the offerer lets the answerer choose its DTLS role).
pub fn write_offer(p: &AnswerParams) -> String {
    debug_assert_eq!(p.setup, Setup::Actpass, "an offer says a=setup:actpass");
    write_answer(p)
}

/// Writes an ICE-lite answer: BUNDLE of every accepted section, rtcp-mux, our candidates in
/// every accepted section with end-of-candidates.
pub fn write_answer(p: &AnswerParams) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "v=0\r\no=secrelay {} {} IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=ice-lite\r\n",
        p.session_id, p.version
    );
    let accepted: Vec<&str> = p
        .media
        .iter()
        .filter(|m| m.direction.is_some())
        .map(|m| m.mid.as_str())
        .collect();
    if !accepted.is_empty() {
        let _ = write!(s, "a=group:BUNDLE {}\r\n", accepted.join(" "));
    }
    s.push_str("a=msid-semantic: WMS *\r\n");
    let first_port = p.candidates.first().map(|c| c.port()).unwrap_or(9);
    for m in &p.media {
        match m.sctp {
            Some(sctp) => write_sctp_section(&mut s, p, m, sctp, first_port),
            None => write_rtp_section(&mut s, p, m, first_port),
        }
    }
    s
}

/// The lines every accepted section carries: ICE credentials, fingerprint, DTLS role.
fn write_transport(s: &mut String, p: &AnswerParams) {
    let _ = write!(
        s,
        "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=fingerprint:{}\r\na=setup:{}\r\n",
        p.ice_ufrag,
        p.ice_pwd,
        p.fingerprint,
        p.setup.as_str(),
    );
}

/// A data-channel section: accepted with our SCTP port and message size limit, or rejected
/// (port 0) when `m.direction` is `None`.
fn write_sctp_section(
    s: &mut String,
    p: &AnswerParams,
    m: &MediaAnswer,
    sctp: SctpAnswer,
    first_port: u16,
) {
    let port = if m.direction.is_some() { first_port } else { 0 };
    let _ = write!(
        s,
        "m=application {port} UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:{}\r\n",
        m.mid
    );
    if m.direction.is_none() {
        return;
    }
    write_transport(s, p);
    let _ = write!(
        s,
        "a=sctp-port:{}\r\na=max-message-size:{}\r\n",
        sctp.port, sctp.max_message_size
    );
    write_candidates(s, &p.candidates, &p.tcp_candidates);
    s.push_str("a=end-of-candidates\r\n");
}

/// An RTP section: accepted with its codecs, feedback, extensions and SSRCs, or rejected
/// (port 0, `a=inactive`) when `m.direction` is `None` or no codec was taken.
fn write_rtp_section(s: &mut String, p: &AnswerParams, m: &MediaAnswer, first_port: u16) {
    let pts: Vec<String> = m
        .codecs
        .iter()
        .chain(m.rtx.iter())
        .map(|c| c.pt.to_string())
        .collect();
    let profile = "UDP/TLS/RTP/SAVPF";
    let (port, fmts) = match (&m.direction, pts.is_empty()) {
        (Some(_), false) => (first_port, pts.join(" ")),
        // Rejected: port 0 and one format to keep the line well formed.
        _ => (
            0,
            m.codecs
                .first()
                .map(|c| c.pt.to_string())
                .unwrap_or_else(|| "0".into()),
        ),
    };
    let _ = write!(
        s,
        "m={} {port} {profile} {fmts}\r\nc=IN IP4 0.0.0.0\r\n",
        m.kind.as_str()
    );
    let _ = write!(s, "a=mid:{}\r\n", m.mid);
    let Some(dir) = m.direction.filter(|_| !pts.is_empty()) else {
        s.push_str("a=inactive\r\n");
        return;
    };
    write_transport(s, p);
    let _ = write!(s, "a={}\r\na=rtcp-mux\r\n", dir.as_str());
    if m.rtcp_rsize {
        s.push_str("a=rtcp-rsize\r\n");
    }
    for (id, uri) in &m.extmaps {
        let _ = write!(s, "a=extmap:{id} {uri}\r\n");
    }
    if !m.simulcast_recv.is_empty() {
        for rid in &m.simulcast_recv {
            let _ = write!(s, "a=rid:{rid} recv\r\n");
        }
        let _ = write!(s, "a=simulcast:recv {}\r\n", m.simulcast_recv.join(";"));
    }
    write_codecs(s, m);
    if let (Some((ssrc, cname)), true) = (&m.ssrc, dir.sends()) {
        // One media stream and track per section (RFC 8830), named after the CNAME and mid.
        let _ = write!(s, "a=msid:{cname}-{mid} {cname}-{mid}\r\n", mid = m.mid);
        match m.rtx_ssrc.filter(|_| !m.rtx.is_empty()) {
            Some(rtx) => {
                let _ = write!(
                    s,
                    "a=ssrc-group:FID {ssrc} {rtx}\r\na=ssrc:{ssrc} cname:{cname}\r\na=ssrc:{rtx} cname:{cname}\r\n"
                );
            }
            None => {
                let _ = write!(s, "a=ssrc:{ssrc} cname:{cname}\r\n");
            }
        }
    }
    write_candidates(s, &p.candidates, &p.tcp_candidates);
    s.push_str("a=end-of-candidates\r\n");
}

/// A codec's `a=rtpmap` line and, when it has parameters, its `a=fmtp` line.
pub(crate) fn write_rtpmap(s: &mut String, c: &Codec) {
    match c.channels {
        Some(ch) => {
            let _ = write!(s, "a=rtpmap:{} {}/{}/{ch}\r\n", c.pt, c.name, c.clock_rate);
        }
        None => {
            let _ = write!(s, "a=rtpmap:{} {}/{}\r\n", c.pt, c.name, c.clock_rate);
        }
    }
    if let Some(f) = &c.fmtp {
        let _ = write!(s, "a=fmtp:{} {f}\r\n", c.pt);
    }
}

/// A section's `a=rtpmap`/`a=fmtp` lines, each codec's feedback after it, then the rtx ones.
fn write_codecs(s: &mut String, m: &MediaAnswer) {
    for (k, c) in m.codecs.iter().chain(m.rtx.iter()).enumerate() {
        write_rtpmap(s, c);
        if k < m.codecs.len() {
            for (_, fb) in m.feedback.iter().filter(|(pt, _)| *pt == c.pt) {
                let _ = write!(s, "a=rtcp-fb:{} {fb}\r\n", c.pt);
            }
        }
    }
}

/// Writes our host candidates' `a=candidate` lines: the UDP ones (`udp`), then the passive
/// ICE-TCP ones (`tcp`, RFC 6544), numbered from 1 in that order. Priorities (RFC 8445
/// §5.1.2.1): type preference 126 (host); local preference by order, UDP's above every
/// TCP one's (RFC 6544 §4.2: direction preference 4 for passive, times 2^13), so that a peer
/// that can reach both prefers UDP.
pub fn write_candidates(s: &mut String, udp: &[SocketAddr], tcp: &[SocketAddr]) {
    let mut foundation = 0;
    for (i, c) in udp.iter().enumerate() {
        foundation += 1;
        let prio = (126u32 << 24) | ((65535 - i as u32) << 8) | 255;
        let _ = write!(
            s,
            "a=candidate:{foundation} 1 udp {prio} {} {} typ host\r\n",
            c.ip(),
            c.port()
        );
    }
    for (i, c) in tcp.iter().enumerate() {
        foundation += 1;
        let local = (4u32 << 13) | (8191 - (i as u32).min(8191));
        let prio = (126u32 << 24) | (local << 8) | 255;
        let _ = write!(
            s,
            "a=candidate:{foundation} 1 tcp {prio} {} {} typ host tcptype passive\r\n",
            c.ip(),
            c.port()
        );
    }
}
