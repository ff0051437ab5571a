//! SDP offer/answer for telephony legs: plain RTP (`RTP/AVP`, `RTP/AVPF`) and SDES-SRTP
//! (`RTP/SAVP`, `RTP/SAVPF` with `a=crypto`, RFC 4568), as SIP phones, PBXs and SIP proxies
//! write them: a connection address (`c=`) and a port per section, static or mapped payload
//! types, RTCP on the next port (or `a=rtcp`, or `a=rtcp-mux`).
//!
//! Parsing is done by [`crate::sdp_doc`] (as lenient as rtpengine: SIP peers write lines out of
//! RFC 8866's order), and reduced here to what a gateway decides on ([`RtpDescription`]);
//! [`write_rtp_answer`] writes the answer.
//! Untrusted input never panics: every error says what was wrong.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::sdes::{Crypto, SdesError};
use crate::sdp::{Codec, Direction, MediaKind, SdpError, Setup};
use crate::sdp_doc::{connection_address, Line, Media, SdpDoc, SdpDocError};

/// The transport a media section names (`m=<media> <port> <proto> …`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// `RTP/AVP`: plain RTP.
    RtpAvp,
    /// `RTP/AVPF`: plain RTP with RTCP feedback.
    RtpAvpf,
    /// `RTP/SAVP`: SRTP (SDES keys).
    RtpSavp,
    /// `RTP/SAVPF`: SRTP with RTCP feedback.
    RtpSavpf,
    /// `UDP/TLS/RTP/SAVP`: DTLS-SRTP.
    UdpTlsRtpSavp,
    /// `UDP/TLS/RTP/SAVPF`: DTLS-SRTP with feedback (WebRTC).
    UdpTlsRtpSavpf,
    /// Anything else (named).
    Other(String),
}

impl Transport {
    /// From an `m=` line's proto field.
    pub fn parse(s: &str) -> Transport {
        match s.to_ascii_uppercase().as_str() {
            "RTP/AVP" => Transport::RtpAvp,
            "RTP/AVPF" => Transport::RtpAvpf,
            "RTP/SAVP" => Transport::RtpSavp,
            "RTP/SAVPF" => Transport::RtpSavpf,
            "UDP/TLS/RTP/SAVP" => Transport::UdpTlsRtpSavp,
            "UDP/TLS/RTP/SAVPF" => Transport::UdpTlsRtpSavpf,
            _ => Transport::Other(s.to_owned()),
        }
    }

    /// The proto field.
    pub fn as_str(&self) -> &str {
        match self {
            Transport::RtpAvp => "RTP/AVP",
            Transport::RtpAvpf => "RTP/AVPF",
            Transport::RtpSavp => "RTP/SAVP",
            Transport::RtpSavpf => "RTP/SAVPF",
            Transport::UdpTlsRtpSavp => "UDP/TLS/RTP/SAVP",
            Transport::UdpTlsRtpSavpf => "UDP/TLS/RTP/SAVPF",
            Transport::Other(s) => s,
        }
    }

    /// Plain RTP (`RTP/AVP`, `RTP/AVPF`).
    pub fn is_plain(&self) -> bool {
        matches!(self, Transport::RtpAvp | Transport::RtpAvpf)
    }

    /// SRTP keyed by SDES (`RTP/SAVP`, `RTP/SAVPF`).
    pub fn is_sdes(&self) -> bool {
        matches!(self, Transport::RtpSavp | Transport::RtpSavpf)
    }

    /// DTLS-SRTP (`UDP/TLS/RTP/SAVP[F]`).
    pub fn is_dtls(&self) -> bool {
        matches!(self, Transport::UdpTlsRtpSavp | Transport::UdpTlsRtpSavpf)
    }
}

/// One media section of a telephony offer.
#[derive(Debug, Clone)]
pub struct RtpSection {
    /// Audio, video, …
    pub kind: MediaKind,
    /// The RTP port (0: the section is rejected or disabled).
    pub port: u16,
    /// The transport.
    pub transport: Transport,
    /// Where the offerer receives: the section's `c=` address, else the session's (`None` for
    /// neither, or `0.0.0.0`: on hold).
    pub address: Option<IpAddr>,
    /// The codecs in the offer's order: `a=rtpmap` where given, RFC 3551's static payload
    /// types otherwise (0 PCMU, 8 PCMA, 9 G722, 18 G729, …); a dynamic type neither names has
    /// an empty name and clock 0.
    pub codecs: Vec<Codec>,
    /// The `a=crypto` lines that parsed, in the offer's order.
    pub crypto: Vec<Crypto>,
    /// The `a=crypto` lines that did not, with why.
    pub bad_crypto: Vec<SdesError>,
    /// `a=rtcp` (RFC 3605): the port the offerer receives RTCP on, when not port + 1.
    pub rtcp_port: Option<u16>,
    /// `a=rtcp-mux`, or `a=rtcp` naming the RTP port itself (RTCP on the RTP port, as RFC 5761
    /// §5.1.3 has a muxing offerer tell answerers that do not know `a=rtcp-mux`).
    pub rtcp_mux: bool,
    /// The direction (`a=sendrecv` by default, the session's if the section has none).
    pub direction: Direction,
    /// `a=ptime`, in milliseconds.
    pub ptime: Option<u32>,
    /// `a=mid`, if any.
    pub mid: Option<String>,
    /// ICE credentials (`a=ice-ufrag`, `a=ice-pwd`, the section's or the session's): the
    /// offerer does ICE.
    pub ice: Option<IceCredentials>,
    /// DTLS-SRTP (RFC 5763): the certificate fingerprints (`a=fingerprint`, the section's or
    /// the session's) and `a=setup`; `None` without a fingerprint.
    pub dtls: Option<SectionDtls>,
}

/// What an SDP section says of its DTLS-SRTP association.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionDtls {
    /// `a=setup` (RFC 4145), if given.
    pub setup: Option<Setup>,
    /// Each `a=fingerprint` value (`sha-256 AB:CD:…`), as written.
    pub fingerprints: Vec<String>,
}

impl RtpSection {
    /// Whether the section is keyed by DTLS-SRTP: a `UDP/TLS/RTP/SAVP[F]` transport, or
    /// `RTP/SAVP[F]` with a fingerprint and no crypto line (RFC 5763's SIP offers).
    pub fn keyed_by_dtls(&self) -> bool {
        self.transport.is_dtls()
            || (self.transport.is_sdes() && self.dtls.is_some() && self.crypto.is_empty())
    }
}

/// The ICE credentials an SDP gives. Debug does not print the password.
#[derive(Clone, PartialEq, Eq)]
pub struct IceCredentials {
    /// `a=ice-ufrag`.
    pub ufrag: String,
    /// `a=ice-pwd`.
    pub pwd: String,
}

impl std::fmt::Debug for IceCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IceCredentials")
            .field("ufrag", &self.ufrag)
            .field("pwd", &"<redacted>")
            .finish()
    }
}

/// Our ICE in a section we write: an ICE-lite agent's credentials and host candidates.
#[derive(Clone, PartialEq, Eq)]
pub struct IceAnswer {
    /// Our credentials.
    pub credentials: IceCredentials,
    /// `a=candidate` values, complete.
    pub candidates: Vec<String>,
}

impl std::fmt::Debug for IceAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IceAnswer")
            .field("credentials", &self.credentials)
            .field("candidates", &self.candidates)
            .finish()
    }
}

/// A host candidate's `a=candidate` value (RFC 8839): foundation 1, UDP, the host type's
/// priority for `component` (1 RTP, 2 RTCP; RFC 8445 §5.1.2.1).
pub fn host_candidate(component: u8, addr: std::net::SocketAddr) -> String {
    let priority = (126u32 << 24) | (65_535 << 8) | (256 - u32::from(component));
    format!(
        "1 {component} UDP {priority} {} {} typ host",
        addr.ip(),
        addr.port()
    )
}

/// A telephony offer, reduced to what the gateway decides on.
#[derive(Debug, Clone)]
pub struct RtpDescription {
    /// The session-level `c=` address, if any.
    pub session_address: Option<IpAddr>,
    /// The media sections, in order.
    pub sections: Vec<RtpSection>,
}

/// RFC 3551's static payload types (audio and video), which a section may name without an
/// `a=rtpmap`.
pub fn static_codec(pt: u8) -> Option<Codec> {
    let (name, rate, channels) = match pt {
        0 => ("PCMU", 8000, None),
        3 => ("GSM", 8000, None),
        4 => ("G723", 8000, None),
        5 => ("DVI4", 8000, None),
        6 => ("DVI4", 16000, None),
        7 => ("LPC", 8000, None),
        8 => ("PCMA", 8000, None),
        9 => ("G722", 8000, None),
        10 => ("L16", 44100, Some(2)),
        11 => ("L16", 44100, None),
        12 => ("QCELP", 8000, None),
        13 => ("CN", 8000, None),
        14 => ("MPA", 90000, None),
        15 => ("G728", 8000, None),
        16 => ("DVI4", 11025, None),
        17 => ("DVI4", 22050, None),
        18 => ("G729", 8000, None),
        25 => ("CelB", 90000, None),
        26 => ("JPEG", 90000, None),
        28 => ("nv", 90000, None),
        31 => ("H261", 90000, None),
        32 => ("MPV", 90000, None),
        33 => ("MP2T", 90000, None),
        34 => ("H263", 90000, None),
        _ => return None,
    };
    Some(Codec {
        pt,
        name: name.into(),
        clock_rate: rate,
        channels,
        fmtp: None,
    })
}

/// The `a=rtpmap` encoding (`PCMU/8000`, `L16/44100/2`) RFC 3551 gives a static payload type
/// written as a format (`"0"`).
pub fn static_rtpmap(format: &str) -> Option<String> {
    Some(static_codec(format.parse().ok()?)?.encoding())
}

fn direction_attribute(lines: &[Line]) -> Option<Direction> {
    lines.iter().rev().find_map(|l| match l.attribute() {
        Some(("sendrecv", None)) => Some(Direction::SendRecv),
        Some(("sendonly", None)) => Some(Direction::SendOnly),
        Some(("recvonly", None)) => Some(Direction::RecvOnly),
        Some(("inactive", None)) => Some(Direction::Inactive),
        _ => None,
    })
}

/// The direction section `m` of `doc` states: its own attribute, else the session's, else
/// `sendrecv`.
pub fn section_direction(doc: &SdpDoc, m: &Media) -> Direction {
    direction_attribute(&m.lines)
        .or_else(|| direction_attribute(&doc.session))
        .unwrap_or(Direction::SendRecv)
}

/// A `c=` value's address; `None` for none, a name, or `0.0.0.0` (hold).
fn address_of(c: Option<&str>) -> Option<IpAddr> {
    let ip = connection_address(c?)?;
    (!ip.is_unspecified()).then_some(ip)
}

fn media_kind(name: &str) -> MediaKind {
    match name {
        "audio" => MediaKind::Audio,
        "video" => MediaKind::Video,
        "application" => MediaKind::Application,
        other => MediaKind::Other(other.to_owned()),
    }
}

/// A section's formats as codecs, in the `m=` line's order: `a=rtpmap` where given, RFC 3551's
/// static payload types otherwise; a dynamic type without `a=rtpmap` is kept nameless (clock
/// 0), for a relay to pass on as it came.
fn codecs_of(m: &Media) -> Vec<Codec> {
    let for_pt = |name: &'static str, pt: u8| {
        m.attributes(name).flatten().find_map(|v| {
            let (p, rest) = v.split_once(' ')?;
            (p.parse::<u8>().ok()? == pt).then(|| rest.trim())
        })
    };
    let mut codecs = Vec::new();
    for f in &m.formats {
        let Ok(pt) = f.parse::<u8>() else { continue };
        let fmtp = for_pt("fmtp", pt).map(str::to_owned);
        let codec = match for_pt("rtpmap", pt) {
            Some(map) => {
                let mut parts = map.split('/');
                let name = parts.next().unwrap_or("").trim().to_owned();
                let clock_rate = parts
                    .next()
                    .and_then(|r| r.trim().parse().ok())
                    .unwrap_or(0);
                Codec {
                    pt,
                    name,
                    clock_rate,
                    channels: parts.next().and_then(|c| c.trim().parse().ok()),
                    fmtp,
                }
            }
            None => match static_codec(pt) {
                Some(c) => Codec { fmtp, ..c },
                None => Codec {
                    pt,
                    name: String::new(),
                    clock_rate: 0,
                    channels: None,
                    fmtp,
                },
            },
        };
        codecs.push(codec);
    }
    codecs
}

/// Section `m` of `doc` as a gateway decides on it.
pub fn rtp_section(doc: &SdpDoc, m: &Media) -> RtpSection {
    let session_address = address_of(doc.session_line('c'));
    let value = |key: &'static str| m.attributes(key).flatten();
    let rtcp_port: Option<u16> =
        value("rtcp").find_map(|v| v.split_whitespace().next()?.parse().ok());
    let (mut crypto, mut bad_crypto) = (Vec::new(), Vec::new());
    for v in value("crypto") {
        match Crypto::parse(v) {
            Ok(c) => crypto.push(c),
            Err(e) => bad_crypto.push(e),
        }
    }
    RtpSection {
        kind: media_kind(&m.media),
        port: m.port,
        transport: Transport::parse(&m.proto),
        // A section's own c= wins, 0.0.0.0 (hold) included.
        address: match m.connection() {
            Some(c) => address_of(Some(c)),
            None => session_address,
        },
        codecs: codecs_of(m),
        crypto,
        bad_crypto,
        rtcp_port,
        rtcp_mux: m.has("rtcp-mux") || rtcp_port == Some(m.port),
        direction: section_direction(doc, m),
        ptime: value("ptime").find_map(|v| v.trim().parse().ok()),
        mid: value("mid").next().map(str::to_owned),
        ice: ice_credentials(doc, m),
        dtls: section_dtls(doc, m),
    }
}

/// The `a=fingerprint` and `a=setup` lines of section `m` (else the session's).
fn section_dtls(doc: &SdpDoc, m: &Media) -> Option<SectionDtls> {
    let values = |key: &'static str| -> Vec<String> {
        let own: Vec<String> = m
            .attributes(key)
            .flatten()
            .map(|v| v.trim().to_owned())
            .collect();
        if own.is_empty() {
            doc.session_attribute(key)
                .map(|v| vec![v.trim().to_owned()])
                .unwrap_or_default()
        } else {
            own
        }
    };
    let fingerprints = values("fingerprint");
    if fingerprints.is_empty() {
        return None;
    }
    let setup = values("setup")
        .first()
        .and_then(|v| match v.to_ascii_lowercase().as_str() {
            "active" => Some(Setup::Active),
            "passive" => Some(Setup::Passive),
            "actpass" => Some(Setup::Actpass),
            "holdconn" => Some(Setup::Holdconn),
            _ => None,
        });
    Some(SectionDtls {
        setup,
        fingerprints,
    })
}

/// The ICE credentials section `m` of `doc` gives (its own lines, else the session's).
pub fn ice_credentials(doc: &SdpDoc, m: &Media) -> Option<IceCredentials> {
    let of = |key: &'static str| {
        m.attributes(key)
            .flatten()
            .next()
            .or_else(|| doc.session_attribute(key))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    Some(IceCredentials {
        ufrag: of("ice-ufrag")?,
        pwd: of("ice-pwd")?,
    })
}

/// `doc` as a gateway decides on it.
pub fn rtp_description(doc: &SdpDoc) -> RtpDescription {
    RtpDescription {
        session_address: address_of(doc.session_line('c')),
        sections: doc.media.iter().map(|m| rtp_section(doc, m)).collect(),
    }
}

/// Parses a telephony offer (or answer), as leniently as rtpengine does ([`SdpDoc`]).
/// Sections of any transport are returned (the caller decides what it takes); an SDP without
/// media is an error.
pub fn parse_rtp(text: &str) -> Result<RtpDescription, SdpError> {
    let doc = SdpDoc::parse(text).map_err(|e| match e {
        SdpDocError::NoMedia => SdpError::NoMedia,
        other => SdpError::Parse(other.to_string()),
    })?;
    Ok(rtp_description(&doc))
}

/// One answered section.
#[derive(Debug, Clone)]
pub struct RtpSectionAnswer {
    /// The offer's kind.
    pub kind: MediaKind,
    /// Our RTP port; `None` rejects the section (port 0).
    pub port: Option<u16>,
    /// The transport answered (the offer's).
    pub transport: Transport,
    /// The codecs accepted, with the offer's payload types, our preference first.
    pub codecs: Vec<Codec>,
    /// The crypto lines: the one accepted in an answer (the offer's tag and suite, our key),
    /// or those we offer.
    pub crypto: Vec<Crypto>,
    /// Our RTCP port when it is not RTP's + 1 (`a=rtcp`), or RTCP muxed (`a=rtcp-mux`).
    pub rtcp: RtcpAnswer,
    /// The answered direction.
    pub direction: Direction,
    /// `a=ptime`, if we state one.
    pub ptime: Option<u32>,
    /// The offer's `a=mid`, repeated.
    pub mid: Option<String>,
    /// Our ICE (ICE-lite: `a=ice-lite` at the session's level), if the section has any.
    pub ice: Option<IceAnswer>,
    /// Our DTLS-SRTP role and certificate fingerprint (`a=setup`, `a=fingerprint`), for a
    /// section keyed by DTLS.
    pub dtls: Option<(Setup, String)>,
}

/// Where our RTCP goes, as the answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtcpAnswer {
    /// On RTP's port + 1 (nothing written).
    NextPort,
    /// Muxed with RTP (`a=rtcp-mux`).
    Mux,
}

/// Writes our telephony SDP (an answer, or an offer of ours) from `address` (the `o=` and `c=`
/// lines), as version 1 of session `session_id`.
pub fn write_rtp_answer(session_id: u64, address: IpAddr, sections: &[RtpSectionAnswer]) -> String {
    write_rtp_sdp((session_id, 1), address, sections)
}

/// [`write_rtp_answer`] for a given `o=` session id and version (a re-offer, or the answer to
/// one, in a session that exists: the same id, the version one up).
pub fn write_rtp_sdp(origin: (u64, u64), address: IpAddr, sections: &[RtpSectionAnswer]) -> String {
    let (session_id, version) = origin;
    let ip = match address {
        IpAddr::V4(_) => "IP4",
        IpAddr::V6(_) => "IP6",
    };
    let mut s = String::new();
    let _ = write!(
        s,
        "v=0\r\no=secrelay {session_id} {version} IN {ip} {address}\r\ns=-\r\nc=IN {ip} {address}\r\nt=0 0\r\n"
    );
    if sections.iter().any(|m| m.ice.is_some() && m.port.is_some()) {
        s.push_str("a=ice-lite\r\n");
    }
    for m in sections {
        let pts: Vec<String> = m.codecs.iter().map(|c| c.pt.to_string()).collect();
        let (port, fmts) = match (m.port, pts.is_empty()) {
            (Some(p), false) => (p, pts.join(" ")),
            _ => (
                0,
                m.codecs
                    .first()
                    .map_or_else(|| "0".into(), |c| c.pt.to_string()),
            ),
        };
        let _ = write!(
            s,
            "m={} {port} {} {fmts}\r\n",
            m.kind.as_str(),
            m.transport.as_str()
        );
        if let Some(mid) = &m.mid {
            let _ = write!(s, "a=mid:{mid}\r\n");
        }
        if port == 0 {
            continue;
        }
        for c in &m.codecs {
            crate::sdp::write_rtpmap(&mut s, c);
        }
        for c in &m.crypto {
            let _ = write!(s, "a=crypto:{}\r\n", c.to_value());
        }
        if m.rtcp == RtcpAnswer::Mux {
            s.push_str("a=rtcp-mux\r\n");
        }
        if let Some((setup, fingerprint)) = &m.dtls {
            let _ = write!(
                s,
                "a=setup:{}\r\na=fingerprint:{fingerprint}\r\n",
                setup.as_str()
            );
        }
        if let Some(ice) = &m.ice {
            let c = &ice.credentials;
            let _ = write!(s, "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n", c.ufrag, c.pwd);
            for candidate in &ice.candidates {
                let _ = write!(s, "a=candidate:{candidate}\r\n");
            }
            s.push_str("a=end-of-candidates\r\n");
        }
        if let Some(p) = m.ptime {
            let _ = write!(s, "a=ptime:{p}\r\n");
        }
        let _ = write!(s, "a={}\r\n", m.direction.as_str());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const PHONE: &str = "v=0\r\n\
        o=alice 2890844526 2890844526 IN IP4 192.0.2.10\r\n\
        s=-\r\n\
        c=IN IP4 192.0.2.10\r\n\
        t=0 0\r\n\
        m=audio 49170 RTP/SAVP 0 8 101\r\n\
        a=rtpmap:101 telephone-event/8000\r\n\
        a=fmtp:101 0-15\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|2^20\r\n\
        a=crypto:2 AEAD_AES_256_GCM inline:bad!key\r\n\
        a=ptime:20\r\n\
        a=sendrecv\r\n\
        m=video 0 RTP/AVP 96\r\n\
        c=IN IP4 0.0.0.0\r\n";

    #[test]
    fn rtcp_on_the_rtp_port_reads_as_muxed() {
        let sdp = "v=0\r\no=- 1 1 IN IP4 192.0.2.10\r\ns=-\r\nc=IN IP4 192.0.2.10\r\nt=0 0\r\n\
            m=audio 4328 RTP/AVP 0\r\na=rtcp:4328 IN IP4 192.0.2.10\r\n";
        let a = &parse_rtp(sdp).unwrap().sections[0];
        assert_eq!(a.rtcp_port, Some(4328));
        assert!(a.rtcp_mux);
        let apart = sdp.replace("a=rtcp:4328", "a=rtcp:4329");
        assert!(!parse_rtp(&apart).unwrap().sections[0].rtcp_mux);
    }

    #[test]
    fn a_phones_offer_reads_as_a_gateway_needs_it() {
        let d = parse_rtp(PHONE).unwrap();
        assert_eq!(d.session_address, Some("192.0.2.10".parse().unwrap()));
        let a = &d.sections[0];
        assert_eq!(a.kind, MediaKind::Audio);
        assert_eq!(a.port, 49170);
        assert!(a.transport.is_sdes());
        assert_eq!(a.address, d.session_address);
        let names: Vec<(u8, &str)> = a.codecs.iter().map(|c| (c.pt, c.name.as_str())).collect();
        assert_eq!(
            names,
            vec![(0, "PCMU"), (8, "PCMA"), (101, "telephone-event")]
        );
        assert_eq!(a.codecs[2].fmtp.as_deref(), Some("0-15"));
        assert_eq!(a.crypto.len(), 1);
        assert_eq!(a.crypto[0].suite, "AES_CM_128_HMAC_SHA1_80");
        assert_eq!(
            a.bad_crypto.len(),
            1,
            "the bad line is reported, not dropped silently"
        );
        assert_eq!(a.ptime, Some(20));
        assert!(!a.rtcp_mux);
        assert_eq!(a.direction, Direction::SendRecv);
        let v = &d.sections[1];
        assert_eq!(v.port, 0);
        assert_eq!(v.address, None, "0.0.0.0 is no address (hold)");
    }

    #[test]
    fn an_answer_writes_back_what_was_chosen() {
        let d = parse_rtp(PHONE).unwrap();
        let a = &d.sections[0];
        let answer = write_rtp_answer(
            7,
            "203.0.113.5".parse().unwrap(),
            &[
                RtpSectionAnswer {
                    kind: MediaKind::Audio,
                    port: Some(30000),
                    transport: a.transport.clone(),
                    codecs: vec![a.codecs[0].clone()],
                    crypto: vec![a.crypto[0].clone()],
                    rtcp: RtcpAnswer::Mux,
                    direction: Direction::SendRecv,
                    ptime: Some(20),
                    mid: None,
                    ice: None,
                    dtls: None,
                },
                RtpSectionAnswer {
                    kind: MediaKind::Video,
                    port: None,
                    transport: Transport::RtpAvp,
                    codecs: vec![],
                    crypto: vec![],
                    rtcp: RtcpAnswer::NextPort,
                    direction: Direction::Inactive,
                    ptime: None,
                    mid: None,
                    ice: None,
                    dtls: None,
                },
            ],
        );
        let back = parse_rtp(&answer).unwrap();
        assert_eq!(back.session_address, Some("203.0.113.5".parse().unwrap()));
        assert_eq!(back.sections[0].port, 30000);
        assert!(back.sections[0].rtcp_mux);
        assert_eq!(back.sections[0].crypto[0].tag, 1);
        assert_eq!(back.sections[1].port, 0);
    }

    #[test]
    fn lines_out_of_order_and_unnamed_formats_are_read_as_rtpengine_reads_them() {
        // The session c= after t=, a dynamic type without a=rtpmap.
        let d = parse_rtp(
            "v=0\no=- 1 1 IN IP4 192.0.2.1\ns=-\nt=0 0\nc=IN IP4 192.0.2.1\n\
             m=audio 0 RTP/AVP 8 101\nm=image 4000 udptl t38\nm=audio 4002 RTP/AVP 31 97\n",
        )
        .unwrap();
        assert_eq!(d.session_address, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(d.sections.len(), 3);
        assert_eq!(d.sections[1].kind, MediaKind::Other("image".into()));
        let c = &d.sections[2].codecs;
        assert_eq!((c[0].name.as_str(), c[0].clock_rate), ("H261", 90000));
        assert_eq!((c[1].pt, c[1].name.as_str(), c[1].clock_rate), (97, "", 0));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            "",
            "v=0\r\n",
            "hello",
            "v=0\r\no=- 1 1 IN IP4 x\r\ns=-\r\nt=0 0\r\nm=audio 99999 RTP/AVP 0\r\n",
        ] {
            assert!(parse_rtp(bad).is_err(), "{bad:?}");
        }
    }
}
