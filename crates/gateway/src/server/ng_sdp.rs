//! Our SDP for an ng request, written as rtpengine writes it: the request's own SDP rewritten,
//! section by section, with our ports, address, codecs, keys and ICE, and every other line
//! passed through where it stood. A SIP proxy that swaps rtpengine for secrelay so keeps the
//! SDP its phones and PBXs saw.
//!
//! What rtpengine does, and so what is done here:
//! * Session lines pass through: `o=` (its address ours under `replace: origin`), `s=`, `i=`,
//!   `b=`, `t=`, unknown attributes. A session `c=` stays where it stood with our address (a
//!   hold's `0.0.0.0` kept). Session-level directions, `a=group`, ICE and DTLS attributes are
//!   not passed on: each section states its own.
//! * A relayed section keeps its `i=`, `b=` and `c=` lines (the address ours) and its unknown
//!   attributes in their order, then writes, in this order: `a=mid`, per format its
//!   `a=rtpmap` (RFC 3551's for a static type without one), `a=fmtp` and `a=rtcp-fb`, the
//!   direction, `a=rtcp:PORT` (RTP only), `a=rtcp-mux`, `a=crypto` lines, `a=setup` and
//!   `a=fingerprint`, `a=ptime`, and our ICE credentials and candidates.
//! * A rejected section keeps its `m=` line with port 0 and its lines (the address ours); a
//!   section of a protocol that is not relayed over UDP (`TCP/MSRP`) passes through whole,
//!   with the session's `c=` (its peer's address) written in it when it had none.

use std::fmt::Write as _;
use std::net::IpAddr;

use secrelay_wire::sdp::Direction;
use secrelay_wire::sdp_doc::{connection_address, Line, Media, SdpDoc};
use secrelay_wire::sdp_rtp::{ice_credentials, section_direction, static_rtpmap};

/// One format as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodecOut {
    /// The payload type (the `m=` line's format).
    pub pt: String,
    /// `a=rtpmap`'s encoding (`PCMU/8000`), if any.
    pub rtpmap: Option<String>,
    /// `a=fmtp`'s parameters, if any.
    pub fmtp: Option<String>,
    /// `a=rtcp-fb` values for the format (after the payload type).
    pub rtcp_fb: Vec<String>,
}

/// Our ICE for a section (ICE-lite: `a=ice-lite` goes at the session's level).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IceOut {
    /// `a=ice-ufrag`.
    pub ufrag: String,
    /// `a=ice-pwd`.
    pub pwd: String,
    /// `a=candidate` values.
    pub candidates: Vec<String>,
}

/// A relayed section: what we write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relayed {
    /// Our port.
    pub port: u16,
    /// Our RTCP port (`a=rtcp`), for an RTP protocol.
    pub rtcp_port: Option<u16>,
    /// The protocol.
    pub proto: String,
    /// The formats with their lines; `None` for a protocol that is not RTP (its formats as
    /// they came, no `a=rtpmap`).
    pub codecs: Option<Vec<CodecOut>>,
    /// The direction; `None` keeps the section's direction lines where they stood
    /// (`original sendrecv`).
    pub direction: Option<Direction>,
    /// `a=rtcp-mux`.
    pub rtcp_mux: bool,
    /// `a=crypto` values.
    pub crypto: Vec<String>,
    /// `a=setup` and `a=fingerprint` values.
    pub dtls: Option<(String, String)>,
    /// `a=ptime`.
    pub ptime: Option<u32>,
    /// Our ICE.
    pub ice: Option<IceOut>,
    /// The offer's `a=mid`, written in an answer whose section has none (RFC 5888: an answer
    /// repeats the offer's).
    pub mid: Option<String>,
}

/// What becomes of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SectionOut {
    /// Passed through whole (a protocol not relayed over UDP).
    AsIs,
    /// Rejected: port 0.
    Rejected,
    /// Relayed on our port.
    Relayed(Box<Relayed>),
}

/// The rewrite of a request's SDP.
#[derive(Debug, Clone)]
pub(crate) struct Rewrite<'a> {
    /// The address we announce.
    pub address: IpAddr,
    /// `replace: origin`: the `o=` line's address ours.
    pub replace_origin: bool,
    /// `replace: zero address`: a hold's null address ours too (the direction still holds).
    pub replace_null: bool,
    /// Each section's fate, in order.
    pub sections: &'a [SectionOut],
    /// `loop-protect`: our mark (`a=rtpengine:ID` at the end of the session part).
    pub loop_mark: Option<&'a str>,
}

/// Attributes a section's rewrite writes itself (so not passed through).
const WRITTEN: [&str; 21] = [
    "rtpmap",
    "fmtp",
    "rtcp-fb",
    "sendrecv",
    "sendonly",
    "recvonly",
    "inactive",
    "rtcp",
    "rtcp-mux",
    "crypto",
    "setup",
    "fingerprint",
    "tls-id",
    "ptime",
    "ice-ufrag",
    "ice-pwd",
    "ice-options",
    "ice-lite",
    "candidate",
    "end-of-candidates",
    "mid",
];

const DIRECTIONS: [&str; 4] = ["sendrecv", "sendonly", "recvonly", "inactive"];

/// Session attributes not passed on.
const SESSION_DROPPED: [&str; 12] = [
    "sendrecv",
    "sendonly",
    "recvonly",
    "inactive",
    "group",
    "ice-ufrag",
    "ice-pwd",
    "ice-lite",
    "ice-options",
    "fingerprint",
    "setup",
    "tls-id",
];

fn family(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "IP4",
        IpAddr::V6(_) => "IP6",
    }
}

/// A `c=` value with our address; a null address (`0.0.0.0`, `::`) stays null when
/// `keep_null` (a hold), in our address's family as rtpengine writes it.
fn connection(value: &str, ours: IpAddr, keep_null: bool) -> String {
    match connection_address(value) {
        Some(ip) if ip.is_unspecified() && keep_null => {
            let null = match ours {
                IpAddr::V4(_) => "0.0.0.0",
                IpAddr::V6(_) => "::",
            };
            format!("IN {} {null}", family(ours))
        }
        _ => format!("IN {} {ours}", family(ours)),
    }
}

/// Whether section `i` of `doc` is on hold by the old convention: its address is the null one
/// (`0.0.0.0`, `::`) and it has no ICE credentials. With them ([`ice_credentials`]), the
/// null address is trickle ICE's placeholder until candidates come (RFC 8840), not a hold.
pub(crate) fn held(doc: &SdpDoc, i: usize) -> bool {
    doc.address_of(i).is_some_and(|ip| ip.is_unspecified()) && !has_ice(doc, i)
}

fn has_ice(doc: &SdpDoc, i: usize) -> bool {
    doc.media
        .get(i)
        .is_some_and(|m| ice_credentials(doc, m).is_some())
}

/// An `o=` value with our address.
fn origin(value: &str, ours: IpAddr) -> String {
    let f: Vec<&str> = value.split_whitespace().collect();
    if f.len() < 6 {
        return value.to_owned();
    }
    format!(
        "{} {} {} {} {} {ours}",
        f[0],
        f[1],
        f[2],
        f[3],
        family(ours)
    )
}

// Lines are appended piece by piece, not through `write!`: every ng reply is written here.
fn line(out: &mut String, kind: char, value: &str) {
    out.push(kind);
    out.push('=');
    out.push_str(value);
    out.push_str("\r\n");
}

fn attr(out: &mut String, name: &str, value: &str) {
    attr_pt(out, name, "", value);
}

/// `a=NAME:PT VALUE` (`pt` empty: `a=NAME:VALUE`).
fn attr_pt(out: &mut String, name: &str, pt: &str, value: &str) {
    out.push_str("a=");
    out.push_str(name);
    out.push(':');
    if !pt.is_empty() {
        out.push_str(pt);
        out.push(' ');
    }
    out.push_str(value);
    out.push_str("\r\n");
}

fn attr_num(out: &mut String, name: &str, n: impl Into<u32>) {
    attr(out, name, &n.into().to_string());
}

/// Writes the session part.
fn session(out: &mut String, doc: &SdpDoc, r: &Rewrite<'_>) {
    for l in &doc.session {
        match l.kind {
            'o' if r.replace_origin => line(out, 'o', &origin(&l.value, r.address)),
            'c' => {
                // A session address sections inherit: null kept while no section is a trickle
                // ICE placeholder.
                let keep = !r.replace_null && (0..doc.media.len()).all(|i| !has_ice(doc, i));
                line(out, 'c', &connection(&l.value, r.address, keep));
            }
            'a' if SESSION_DROPPED.iter().any(|n| l.is_attribute(n)) => {}
            _ => line(out, l.kind, &l.value),
        }
    }
    if let Some(mark) = r.loop_mark {
        attr(out, "rtpengine", mark);
    }
    let ice = |s: &SectionOut| matches!(s, SectionOut::Relayed(x) if x.ice.is_some());
    if r.sections.iter().any(ice) {
        out.push_str("a=ice-lite\r\n");
    }
}

/// The `m=` line of a section with `port` and `proto` (the formats as given).
fn media_line(out: &mut String, m: &Media, port: u16, proto: &str, formats: &[&str]) {
    let count = m.port_count.map(|c| format!("/{c}")).unwrap_or_default();
    let _ = write!(out, "m={} {port}{count} {proto}", m.media);
    for f in formats {
        out.push(' ');
        out.push_str(f);
    }
    out.push_str("\r\n");
}

/// Section `m` written as `s` says; `keep_null`: a null `c=` address stays null (a hold).
fn relayed(out: &mut String, m: &Media, s: &Relayed, ours: IpAddr, keep_null: bool) {
    let formats: Vec<&str> = match &s.codecs {
        Some(c) => c.iter().map(|c| c.pt.as_str()).collect(),
        None => m.formats.iter().map(String::as_str).collect(),
    };
    media_line(out, m, s.port, &s.proto, &formats);
    let kept = |l: &Line| {
        s.direction.is_none() && DIRECTIONS.iter().any(|d| l.is_attribute(d))
            || !WRITTEN.iter().any(|n| l.is_attribute(n))
    };
    for l in &m.lines {
        match l.kind {
            'c' => line(out, 'c', &connection(&l.value, ours, keep_null)),
            'a' if !kept(l) => {}
            _ => line(out, l.kind, &l.value),
        }
    }
    let mut mids = m.attributes("mid").flatten().peekable();
    if mids.peek().is_none() {
        if let Some(mid) = &s.mid {
            attr(out, "mid", mid);
        }
    }
    for mid in mids {
        attr(out, "mid", mid);
    }
    for c in s.codecs.iter().flatten() {
        if let Some(map) = c.rtpmap.clone().or_else(|| static_rtpmap(&c.pt)) {
            attr_pt(out, "rtpmap", &c.pt, &map);
        }
        if let Some(f) = &c.fmtp {
            attr_pt(out, "fmtp", &c.pt, f);
        }
        for fb in &c.rtcp_fb {
            attr_pt(out, "rtcp-fb", &c.pt, fb);
        }
    }
    if let Some(d) = s.direction {
        let _ = write!(out, "a={}\r\n", d.as_str());
    }
    if let Some(p) = s.rtcp_port {
        attr_num(out, "rtcp", p);
    }
    if s.rtcp_mux {
        out.push_str("a=rtcp-mux\r\n");
    }
    for c in &s.crypto {
        attr(out, "crypto", c);
    }
    if let Some((setup, fingerprint)) = &s.dtls {
        attr(out, "setup", setup);
        attr(out, "fingerprint", fingerprint);
    }
    if let Some(p) = s.ptime {
        attr_num(out, "ptime", p);
    }
    if let Some(ice) = &s.ice {
        attr(out, "ice-ufrag", &ice.ufrag);
        attr(out, "ice-pwd", &ice.pwd);
        for c in &ice.candidates {
            attr(out, "candidate", c);
        }
        out.push_str("a=end-of-candidates\r\n");
    }
}

/// Writes `doc` rewritten as `r` says (CRLF line ends).
pub(crate) fn rewrite(doc: &SdpDoc, r: &Rewrite<'_>) -> String {
    let mut out = String::with_capacity(1024);
    session(&mut out, doc, r);
    for (i, m) in doc.media.iter().enumerate() {
        let keep_null = !r.replace_null && held(doc, i);
        match r.sections.get(i).unwrap_or(&SectionOut::AsIs) {
            SectionOut::AsIs => {
                let formats: Vec<&str> = m.formats.iter().map(String::as_str).collect();
                media_line(&mut out, m, m.port, &m.proto, &formats);
                // Its peer's address was the session's, which now names ours: written here.
                if !m.lines.iter().any(|l| l.kind == 'c') {
                    if let Some(c) = doc.session.iter().find(|l| l.kind == 'c') {
                        line(&mut out, 'c', &c.value);
                    }
                }
                for l in &m.lines {
                    line(&mut out, l.kind, &l.value);
                }
            }
            SectionOut::Rejected => {
                let formats: Vec<&str> = m.formats.iter().map(String::as_str).collect();
                media_line(&mut out, m, 0, &m.proto, &formats);
                for l in &m.lines {
                    match l.kind {
                        'c' => line(&mut out, 'c', &connection(&l.value, r.address, keep_null)),
                        _ => line(&mut out, l.kind, &l.value),
                    }
                }
            }
            SectionOut::Relayed(s) => relayed(&mut out, m, s, r.address, keep_null),
        }
    }
    out
}

/// A section's formats as the request wrote them: each with its `a=rtpmap`, `a=fmtp` and
/// `a=rtcp-fb` values.
pub(crate) fn codecs_of(m: &Media) -> Vec<CodecOut> {
    let for_pt = |name: &str, pt: &str| -> Vec<String> {
        m.attributes(name)
            .flatten()
            .filter_map(|v| {
                let (p, rest) = v.split_once(' ')?;
                (p == pt).then(|| rest.trim().to_owned())
            })
            .collect()
    };
    m.formats
        .iter()
        .map(|pt| CodecOut {
            pt: pt.clone(),
            rtpmap: for_pt("rtpmap", pt).into_iter().next(),
            fmtp: for_pt("fmtp", pt).into_iter().next(),
            rtcp_fb: for_pt("rtcp-fb", pt),
        })
        .collect()
}

/// The direction a section states: its own attribute, else the session's, else `sendrecv`.
pub(crate) fn direction_of(doc: &SdpDoc, m: &Media) -> Direction {
    section_direction(doc, m)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A phone's offer of our own, with lines rtpengine passes through and lines it rewrites.
    const OFFER: &str = "v=0\r\no=alice 10 20 IN IP4 192.0.2.10\r\ns=call\r\n\
        c=IN IP4 192.0.2.10\r\nt=0 0\r\na=tool:phone\r\na=sendonly\r\na=group:BUNDLE 0\r\n\
        m=audio 5004 RTP/AVP 0 96 101\r\ni=voice\r\nb=AS:80\r\na=mid:0\r\na=x-custom:1\r\n\
        a=ptime:20\r\na=rtpmap:96 AMR/8000\r\na=fmtp:96 octet-align=1\r\na=rtcp-fb:96 nack\r\n\
        a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=rtcp:5005\r\n\
        m=video 0 RTP/AVP 31\r\nm=message 5010 TCP/MSRP *\r\na=path:msrp://192.0.2.10:5010/s;tcp\r\n";

    #[test]
    fn a_relayed_offer_is_written_as_rtpengine_writes_it() {
        let doc = SdpDoc::parse(OFFER).unwrap();
        let m = &doc.media[0];
        let sections = [
            SectionOut::Relayed(Box::new(Relayed {
                port: 30000,
                rtcp_port: Some(30001),
                proto: m.proto.clone(),
                codecs: Some(codecs_of(m)),
                direction: Some(direction_of(&doc, m)),
                rtcp_mux: false,
                crypto: vec![],
                dtls: None,
                mid: None,
                ptime: Some(20),
                ice: None,
            })),
            SectionOut::Rejected,
            SectionOut::AsIs,
        ];
        let out = rewrite(
            &doc,
            &Rewrite {
                address: "203.0.113.1".parse().unwrap(),
                replace_origin: false,
                replace_null: false,
                sections: &sections,
                loop_mark: None,
            },
        );
        assert_eq!(
            out.split("\r\n").collect::<Vec<_>>(),
            [
                "v=0",
                "o=alice 10 20 IN IP4 192.0.2.10",
                "s=call",
                "c=IN IP4 203.0.113.1",
                "t=0 0",
                "a=tool:phone",
                "m=audio 30000 RTP/AVP 0 96 101",
                "i=voice",
                "b=AS:80",
                "a=x-custom:1",
                "a=mid:0",
                "a=rtpmap:0 PCMU/8000",
                "a=rtpmap:96 AMR/8000",
                "a=fmtp:96 octet-align=1",
                "a=rtcp-fb:96 nack",
                "a=rtpmap:101 telephone-event/8000",
                "a=fmtp:101 0-15",
                "a=sendonly",
                "a=rtcp:30001",
                "a=ptime:20",
                "m=video 0 RTP/AVP 31",
                "m=message 5010 TCP/MSRP *",
                // Not relayed: its peer's address, the session's, written where it is kept.
                "c=IN IP4 192.0.2.10",
                "a=path:msrp://192.0.2.10:5010/s;tcp",
                "",
            ]
        );
    }

    #[test]
    fn origin_is_ours_when_asked_and_a_hold_keeps_a_null_address_in_our_family() {
        let doc = SdpDoc::parse(
            "v=0\no=- 1 2 IN IP4 192.0.2.10\ns=-\nt=0 0\nm=audio 5004 RTP/AVP 8\nc=IN IP4 0.0.0.0\n",
        )
        .unwrap();
        let out = rewrite(
            &doc,
            &Rewrite {
                address: "2001:db8::1".parse().unwrap(),
                replace_origin: true,
                replace_null: false,
                sections: &[SectionOut::Rejected],
                loop_mark: Some("0123456789ab"),
            },
        );
        assert!(out.contains("o=- 1 2 IN IP6 2001:db8::1\r\n"), "{out}");
        assert!(
            out.contains("t=0 0\r\na=rtpengine:0123456789ab\r\nm="),
            "{out}"
        );
        assert!(
            out.contains("m=audio 0 RTP/AVP 8\r\nc=IN IP6 ::\r\n"),
            "{out}"
        );
    }

    #[test]
    fn a_null_address_with_ice_credentials_is_trickle_ices_placeholder_not_a_hold() {
        let held_one = "v=0\no=- 1 2 IN IP4 192.0.2.10\ns=-\nc=IN IP4 0.0.0.0\nt=0 0\n\
            m=audio 9 RTP/AVP 8\n";
        let trickle = format!("{held_one}a=ice-ufrag:Ci7n\na=ice-pwd:l9QndxLG6OycZRcQe9zcT95c\n");
        let relayed = |doc: &SdpDoc, replace_null: bool| {
            let sections = [SectionOut::Relayed(Box::new(Relayed {
                port: 30000,
                rtcp_port: None,
                proto: "RTP/AVP".into(),
                codecs: None,
                direction: None,
                rtcp_mux: false,
                crypto: Vec::new(),
                dtls: None,
                mid: None,
                ptime: None,
                ice: None,
            }))];
            rewrite(
                doc,
                &Rewrite {
                    address: "203.0.113.1".parse().unwrap(),
                    replace_origin: false,
                    replace_null,
                    sections: &sections,
                    loop_mark: None,
                },
            )
        };
        let doc = SdpDoc::parse(held_one).unwrap();
        assert!(held(&doc, 0));
        assert!(relayed(&doc, false).contains("c=IN IP4 0.0.0.0\r\n"));
        // `replace: zero address`: our address, though the section still holds.
        assert!(relayed(&doc, true).contains("c=IN IP4 203.0.113.1\r\n"));
        let doc = SdpDoc::parse(&trickle).unwrap();
        assert!(!held(&doc, 0));
        assert!(relayed(&doc, false).contains("c=IN IP4 203.0.113.1\r\n"));
    }
}
