//! SDP offer/answer for telephony legs: plain RTP (`RTP/AVP`, `RTP/AVPF`) and SDES-SRTP
//! (`RTP/SAVP`, `RTP/SAVPF` with `a=crypto`, RFC 4568), as SIP phones, PBXs and SIP proxies
//! write them: a connection address (`c=`) and a port per section, static or mapped payload
//! types, RTCP on the next port (or `a=rtcp`, or `a=rtcp-mux`).
//!
//! Parsing is done by the `sdp` crate (a faithful syntax layer over RFC 8866), and reduced here
//! to what a gateway decides on ([`RtpDescription`]); [`write_rtp_answer`] writes the answer.
//! Untrusted input never panics: every error says what was wrong.

use std::fmt::Write as _;
use std::io::Cursor;
use std::net::IpAddr;

use crate::sdes::{Crypto, SdesError};
use crate::sdp::{Codec, Direction, MediaKind, SdpError};

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
    /// types otherwise (0 PCMU, 8 PCMA, 9 G722, 18 G729, …); formats neither names are left
    /// out.
    pub codecs: Vec<Codec>,
    /// The `a=crypto` lines that parsed, in the offer's order.
    pub crypto: Vec<Crypto>,
    /// The `a=crypto` lines that did not, with why.
    pub bad_crypto: Vec<SdesError>,
    /// `a=rtcp` (RFC 3605): the port the offerer receives RTCP on, when not port + 1.
    pub rtcp_port: Option<u16>,
    /// `a=rtcp-mux`.
    pub rtcp_mux: bool,
    /// The direction (`a=sendrecv` by default, the session's if the section has none).
    pub direction: Direction,
    /// `a=ptime`, in milliseconds.
    pub ptime: Option<u32>,
    /// `a=mid`, if any.
    pub mid: Option<String>,
}

/// A telephony offer, reduced to what the gateway decides on.
#[derive(Debug, Clone)]
pub struct RtpDescription {
    /// The session-level `c=` address, if any.
    pub session_address: Option<IpAddr>,
    /// The media sections, in order.
    pub sections: Vec<RtpSection>,
}

/// RFC 3551's static audio payload types a section may name without an `a=rtpmap`.
fn static_codec(pt: u8) -> Option<Codec> {
    let (name, rate) = match pt {
        0 => ("PCMU", 8000),
        3 => ("GSM", 8000),
        4 => ("G723", 8000),
        8 => ("PCMA", 8000),
        9 => ("G722", 8000),
        13 => ("CN", 8000),
        18 => ("G729", 8000),
        _ => return None,
    };
    Some(Codec {
        pt,
        name: name.into(),
        clock_rate: rate,
        channels: None,
        fmtp: None,
    })
}

fn direction_of(attrs: &[sdp::description::common::Attribute]) -> Option<Direction> {
    attrs.iter().find_map(|a| match a.key.as_str() {
        "sendrecv" => Some(Direction::SendRecv),
        "sendonly" => Some(Direction::SendOnly),
        "recvonly" => Some(Direction::RecvOnly),
        "inactive" => Some(Direction::Inactive),
        _ => None,
    })
}

fn address_of(c: &Option<sdp::description::common::ConnectionInformation>) -> Option<IpAddr> {
    let ip: IpAddr = c.as_ref()?.address.as_ref()?.address.parse().ok()?;
    (!ip.is_unspecified()).then_some(ip)
}

/// Parses a telephony offer (or answer). Sections of any transport are returned (the caller
/// decides what it takes); an SDP without media is an error.
pub fn parse_rtp(text: &str) -> Result<RtpDescription, SdpError> {
    let desc = sdp::SessionDescription::unmarshal(&mut Cursor::new(text.as_bytes()))
        .map_err(|e| SdpError::Parse(e.to_string().chars().take(200).collect()))?;
    if desc.media_descriptions.is_empty() {
        return Err(SdpError::NoMedia);
    }
    let session_address = address_of(&desc.connection_information);
    let session_direction = direction_of(&desc.attributes);
    let mut sections = Vec::new();
    for m in &desc.media_descriptions {
        let kind = match m.media_name.media.as_str() {
            "audio" => MediaKind::Audio,
            "video" => MediaKind::Video,
            "application" => MediaKind::Application,
            other => MediaKind::Other(other.to_owned()),
        };
        let port = u16::try_from(m.media_name.port.value)
            .map_err(|_| SdpError::Parse(format!("m= port {}", m.media_name.port.value)))?;
        let transport = Transport::parse(&m.media_name.protos.join("/"));
        let value = |key: &'static str| {
            m.attributes
                .iter()
                .filter(move |a| a.key.eq_ignore_ascii_case(key))
                .filter_map(|a| a.value.as_deref())
        };
        let mut codecs = Vec::new();
        for f in &m.media_name.formats {
            let Ok(pt) = f.parse::<u8>() else { continue };
            let rtpmap = value("rtpmap").find_map(|v| {
                let (p, rest) = v.split_once(' ')?;
                (p.parse::<u8>().ok()? == pt).then_some(rest.trim())
            });
            let fmtp = value("fmtp").find_map(|v| {
                let (p, rest) = v.split_once(' ')?;
                (p.parse::<u8>().ok()? == pt).then(|| rest.trim().to_owned())
            });
            let codec = match rtpmap {
                Some(map) => {
                    let mut parts = map.split('/');
                    let name = parts.next().unwrap_or("").to_owned();
                    let Some(clock_rate) = parts.next().and_then(|r| r.parse().ok()) else {
                        continue;
                    };
                    Codec {
                        pt,
                        name,
                        clock_rate,
                        channels: parts.next().and_then(|c| c.parse().ok()),
                        fmtp,
                    }
                }
                None => match static_codec(pt) {
                    Some(c) => Codec { fmtp, ..c },
                    None => continue,
                },
            };
            codecs.push(codec);
        }
        let (mut crypto, mut bad_crypto) = (Vec::new(), Vec::new());
        for v in value("crypto") {
            match Crypto::parse(v) {
                Ok(c) => crypto.push(c),
                Err(e) => bad_crypto.push(e),
            }
        }
        sections.push(RtpSection {
            kind,
            port,
            transport,
            // A section's own c= wins, 0.0.0.0 (hold) included.
            address: match m.connection_information {
                Some(_) => address_of(&m.connection_information),
                None => session_address,
            },
            codecs,
            crypto,
            bad_crypto,
            rtcp_port: value("rtcp").find_map(|v| v.split_whitespace().next()?.parse().ok()),
            rtcp_mux: m.has_attribute("rtcp-mux"),
            direction: direction_of(&m.attributes)
                .or(session_direction)
                .unwrap_or(Direction::SendRecv),
            ptime: value("ptime").find_map(|v| v.trim().parse().ok()),
            mid: value("mid").next().map(str::to_owned),
        });
    }
    Ok(RtpDescription {
        session_address,
        sections,
    })
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
        for c in &m.crypto {
            let _ = write!(s, "a=crypto:{}\r\n", c.to_value());
        }
        if m.rtcp == RtcpAnswer::Mux {
            s.push_str("a=rtcp-mux\r\n");
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
