//! An SDP kept whole, line by line, read as leniently as rtpengine reads it: what a media
//! relay needs to rewrite a SIP peer's SDP (its ports, addresses, codecs and keys) and pass
//! everything else through as it came.
//!
//! [`crate::sdp_rtp`] reads SDP into what a gateway decides on, over the `sdp` crate, which
//! holds to RFC 8866's line order. SIP peers do not always: a session `c=` after `t=`, several
//! `v=` blocks in one body, `m=message … TCP/MSRP *`, attributes no RFC names. rtpengine takes
//! them, so a relay that replaces it must too; this reader keeps every line, in order, with
//! its type letter, and checks only what a rewrite relies on: each line is `X=value`, each
//! `m=` line has a media type, a port (and an optional port count), a protocol and formats.
//!
//! Untrusted input never panics: each error names the line.

use std::fmt;
use std::net::IpAddr;

/// Most lines an SDP may have (an ng request carries at most 64 KiB).
pub const MAX_LINES: usize = 8192;

/// Why a text is not SDP.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SdpDocError {
    /// No `m=` line.
    NoMedia,
    /// A line that is not `X=value` (its number, from 1).
    NotALine(usize),
    /// An `m=` line without media, port, protocol and formats, or with a bad port (its
    /// number).
    BadMediaLine(usize),
    /// The first line is not `v=`.
    NoVersion,
    /// More than [`MAX_LINES`] lines.
    TooLong,
}

impl fmt::Display for SdpDocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdpDocError::NoMedia => write!(f, "SDP has no m= line"),
            SdpDocError::NotALine(n) => write!(f, "SDP line {n} is not of the form X=value"),
            SdpDocError::BadMediaLine(n) => write!(
                f,
                "SDP line {n}: an m= line needs a media type, a port, a protocol and formats"
            ),
            SdpDocError::NoVersion => write!(f, "SDP does not start with v="),
            SdpDocError::TooLong => write!(f, "SDP has more than {MAX_LINES} lines"),
        }
    }
}

impl std::error::Error for SdpDocError {}

/// One line: its type letter and its value (after `X=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// `v`, `o`, `s`, `c`, `t`, `a`, `b`, `i`, …
    pub kind: char,
    /// What follows `=`, as written.
    pub value: String,
}

impl Line {
    /// A line.
    pub fn new(kind: char, value: impl Into<String>) -> Line {
        Line {
            kind,
            value: value.into(),
        }
    }

    /// For an attribute line (`a=name[:value]`): its name and value.
    pub fn attribute(&self) -> Option<(&str, Option<&str>)> {
        if self.kind != 'a' {
            return None;
        }
        Some(match self.value.split_once(':') {
            Some((n, v)) => (n, Some(v)),
            None => (self.value.as_str(), None),
        })
    }

    /// Whether this is attribute `name` (case-insensitively).
    pub fn is_attribute(&self, name: &str) -> bool {
        self.attribute()
            .is_some_and(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

/// A connection line's address (`c=IN IP4 192.0.2.1`, `c=IN IP6 ::1`); `None` if it does not
/// name an IP address (a FQDN, a multicast TTL suffix is dropped).
pub fn connection_address(value: &str) -> Option<IpAddr> {
    let mut f = value.split_whitespace();
    let (_net, _family, addr) = (f.next()?, f.next()?, f.next()?);
    addr.split('/').next()?.parse().ok()
}

/// A media section: its `m=` line's fields and its other lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// `audio`, `video`, `image`, `application`, `message`, …
    pub media: String,
    /// The port (0: rejected or disabled).
    pub port: u16,
    /// The port count (`m=audio 4000/2 …`), if given.
    pub port_count: Option<u16>,
    /// The protocol (`RTP/AVP`, `udptl`, `TCP/MSRP`, …), as written.
    pub proto: String,
    /// The formats (payload types for RTP), as written.
    pub formats: Vec<String>,
    /// The section's other lines, in order.
    pub lines: Vec<Line>,
}

impl Media {
    /// The values of attribute `name`, in order.
    pub fn attributes<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Option<&'a str>> + 'a {
        self.lines
            .iter()
            .filter_map(Line::attribute)
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Whether the section has attribute `name`.
    pub fn has(&self, name: &str) -> bool {
        self.lines.iter().any(|l| l.is_attribute(name))
    }

    /// The section's own `c=` line value, if any.
    pub fn connection(&self) -> Option<&str> {
        self.lines
            .iter()
            .find(|l| l.kind == 'c')
            .map(|l| l.value.as_str())
    }

    /// Whether the protocol carries RTP (`RTP/…`, `UDP/TLS/RTP/…`).
    pub fn is_rtp(&self) -> bool {
        let p = self.proto.to_ascii_uppercase();
        p.starts_with("RTP/") || p.contains("/RTP/")
    }
}

/// An SDP: its session lines and its media sections, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdpDoc {
    /// The session-level lines (before the first `m=`), `v=` first.
    pub session: Vec<Line>,
    /// The media sections.
    pub media: Vec<Media>,
}

impl SdpDoc {
    /// Reads an SDP (lines ending in CRLF or LF; blank lines skipped). A later `v=` line
    /// starts no new session: it is kept where it stands, in the section it falls in.
    pub fn parse(text: &str) -> Result<SdpDoc, SdpDocError> {
        let mut session = Vec::new();
        let mut media: Vec<Media> = Vec::new();
        let mut n = 0;
        for raw in text.split('\n') {
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if raw.trim().is_empty() {
                continue;
            }
            n += 1;
            if n > MAX_LINES {
                return Err(SdpDocError::TooLong);
            }
            let mut chars = raw.chars();
            let (Some(kind), Some('=')) = (chars.next(), chars.next()) else {
                return Err(SdpDocError::NotALine(n));
            };
            if !kind.is_ascii_alphabetic() {
                return Err(SdpDocError::NotALine(n));
            }
            let value = &raw[2..];
            if n == 1 && kind != 'v' {
                return Err(SdpDocError::NoVersion);
            }
            if kind == 'm' {
                media.push(media_line(value).ok_or(SdpDocError::BadMediaLine(n))?);
                continue;
            }
            let line = Line::new(kind, value);
            match media.last_mut() {
                Some(m) => m.lines.push(line),
                None => session.push(line),
            }
        }
        if media.is_empty() {
            return Err(SdpDocError::NoMedia);
        }
        Ok(SdpDoc { session, media })
    }

    /// The session-level line of type `kind`, if any.
    pub fn session_line(&self, kind: char) -> Option<&str> {
        self.session
            .iter()
            .find(|l| l.kind == kind)
            .map(|l| l.value.as_str())
    }

    /// Whether the session has attribute `name`.
    pub fn session_has(&self, name: &str) -> bool {
        self.session.iter().any(|l| l.is_attribute(name))
    }

    /// The value of session attribute `name`, if any.
    pub fn session_attribute(&self, name: &str) -> Option<&str> {
        self.session
            .iter()
            .filter_map(Line::attribute)
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v)
    }

    /// Where section `i` receives: its own `c=` address, else the session's.
    pub fn address_of(&self, i: usize) -> Option<IpAddr> {
        let own = self.media.get(i)?.connection();
        own.or_else(|| self.session_line('c'))
            .and_then(connection_address)
    }
}

/// An `m=` line's fields: `media port[/count] proto fmt…` (formats may be empty only for a
/// rejected section).
fn media_line(value: &str) -> Option<Media> {
    let mut f = value.split_whitespace();
    let media = f.next()?.to_owned();
    let port_field = f.next()?;
    let proto = f.next()?.to_owned();
    let formats: Vec<String> = f.map(str::to_owned).collect();
    let (port, count) = match port_field.split_once('/') {
        Some((p, c)) => (p, Some(c.parse().ok()?)),
        None => (port_field, None),
    };
    let port: u16 = port.parse().ok()?;
    if formats.is_empty() && port != 0 {
        return None;
    }
    Some(Media {
        media,
        port,
        port_count: count,
        proto,
        formats,
        lines: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_is_read_or_refused_without_a_panic(text in "(v=0\\n)?([a-z]=[ -~]{0,40}\\r?\\n){0,12}") {
            if let Ok(d) = SdpDoc::parse(&text) {
                prop_assert!(!d.media.is_empty());
                for i in 0..d.media.len() {
                    let _ = d.address_of(i);
                }
            }
        }
    }

    #[test]
    fn lines_out_of_rfc_order_and_unknown_sections_are_kept() {
        let d = SdpDoc::parse(
            "v=0\no=- 1 2 IN IP4 192.0.2.1\ns=-\nt=0 0\nc=IN IP4 192.0.2.1\n\
             a=tool:x\nm=audio 4000 RTP/AVP 0 96\r\na=rtpmap:96 AMR/8000\r\n\
             m=message 4002/2 TCP/MSRP *\na=path:msrp://h/x;tcp\nm=application 0 UDP/BFCP\n",
        )
        .unwrap();
        assert_eq!(d.session.len(), 6);
        assert_eq!(d.session_line('c'), Some("IN IP4 192.0.2.1"));
        assert_eq!(d.session_attribute("tool"), Some("x"));
        assert_eq!(d.media.len(), 3);
        assert_eq!(d.media[0].formats, ["0", "96"]);
        assert_eq!(
            d.media[0].attributes("rtpmap").collect::<Vec<_>>(),
            [Some("96 AMR/8000")]
        );
        assert!(d.media[0].is_rtp());
        assert_eq!(d.media[1].port_count, Some(2));
        assert_eq!(d.media[1].formats, ["*"]);
        assert!(!d.media[1].is_rtp());
        assert_eq!(d.media[2].port, 0);
        assert_eq!(d.address_of(1), Some("192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn each_bad_sdp_says_which_line() {
        assert_eq!(SdpDoc::parse(""), Err(SdpDocError::NoMedia));
        assert_eq!(SdpDoc::parse("v=0\ns=-\n"), Err(SdpDocError::NoMedia));
        assert_eq!(SdpDoc::parse("o=x\n"), Err(SdpDocError::NoVersion));
        assert_eq!(SdpDoc::parse("v=0\nhello\n"), Err(SdpDocError::NotALine(2)));
        assert_eq!(
            SdpDoc::parse("v=0\nm=audio 99999 RTP/AVP 0\n"),
            Err(SdpDocError::BadMediaLine(2))
        );
        assert_eq!(
            SdpDoc::parse("v=0\nm=audio 4000 RTP/AVP\n"),
            Err(SdpDocError::BadMediaLine(2))
        );
        assert_eq!(
            SdpDoc::parse("v=0\nm=audio 4000/x RTP/AVP 0\n"),
            Err(SdpDocError::BadMediaLine(2))
        );
        assert!(SdpDoc::parse("v=0\nm=audio 0 RTP/AVP\n").is_ok());
        assert_eq!(
            SdpDoc::parse(&"v=0\n".repeat(MAX_LINES + 1)),
            Err(SdpDocError::TooLong)
        );
        assert_eq!(
            connection_address("IN IP4 224.2.1.1/127"),
            Some("224.2.1.1".parse().unwrap())
        );
        assert_eq!(connection_address("IN IP4 host.example"), None);
    }
}
