//! Two SDPs compared at three levels, for `lab ng-compare`: what rtpengine wrote and what
//! secrelay wrote for the same request.
//!
//! 1. **Media sections**: the same number of sections, and for each the media type, whether
//!    its port is zero, the transport, the payload types in order with their `a=rtpmap` (RFC
//!    3551's for a static type without one), whether it carries `a=crypto`, its direction
//!    (the section's attribute, else the session's, else `sendrecv`) and `a=rtcp-mux`.
//! 2. **Lines in any order**: the same session lines and, per section, the same lines, each
//!    compared as a set with repeats, leaving out `o=`, `s=` and `a=rtcp` (which rtpengine
//!    passes through or places by rules of its own); `c=` counts once per section wherever
//!    it was written (the section's own, else the session's).
//! 3. **Exact**: the same text, line for line.
//!
//! Before lines are compared, what differs from run to run is written as a placeholder: media
//! ports (`m=`, `a=rtcp`, ICE candidates), ICE credentials and candidate foundations, SDES
//! keys, DTLS fingerprints and TLS ids. Addresses are compared as they are: both daemons are
//! set to announce the same ones.

use std::collections::BTreeMap;

use secrelay_wire::sdp_rtp::static_rtpmap;

/// How far two SDPs agree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Agreement {
    /// The same media sections (level 1).
    pub sections: bool,
    /// The same lines in any order (level 2).
    pub lines: bool,
    /// The same text (level 3).
    pub exact: bool,
}

/// Whether level 2 leaves a (normalised) line out.
fn not_compared_as_lines(line: &str) -> bool {
    line.starts_with("o=") || line.starts_with("s=") || line.starts_with("a=rtcp:")
}

/// One SDP, normalised.
#[derive(Debug, Clone, Default)]
struct Parsed {
    /// Every line, normalised, in order.
    all: Vec<String>,
    /// Session-level lines other than `c=` (and those level 2 leaves out).
    session: Vec<String>,
    session_c: Option<String>,
    session_direction: Option<String>,
    sections: Vec<Section>,
}

#[derive(Debug, Clone, Default)]
struct Section {
    /// The `m=` line as written.
    m: String,
    /// Its lines other than `c=`, normalised (the `m=` line first).
    lines: Vec<String>,
    c: Option<String>,
    /// `a=rtpmap` values by payload type.
    rtpmap: BTreeMap<String, String>,
    crypto: bool,
    direction: Option<String>,
    rtcp_mux: bool,
}

const DIRECTIONS: [&str; 4] = ["a=sendrecv", "a=sendonly", "a=recvonly", "a=inactive"];

/// `word`'s `n`th field replaced by `with`.
fn replace_field(line: &str, n: usize, with: &str) -> String {
    line.split(' ')
        .enumerate()
        .map(|(i, f)| if i == n { with } else { f })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A line with what differs from run to run replaced by placeholders.
pub fn normalise(line: &str) -> String {
    let line = line.trim_end_matches('\r');
    if let Some(rest) = line.strip_prefix("m=") {
        let port = rest.split(' ').nth(1).unwrap_or("");
        if port != "0" {
            return replace_field(line, 1, "PORT");
        }
        return line.to_owned();
    }
    let Some(attr) = line.strip_prefix("a=") else {
        return line.to_owned();
    };
    let (key, value) = attr.split_once(':').unwrap_or((attr, ""));
    match key {
        "rtcp" => format!("a=rtcp:{}", replace_field(value, 0, "PORT")),
        "ice-ufrag" => "a=ice-ufrag:ICEUFRAG".into(),
        "ice-pwd" => "a=ice-pwd:ICEPWD".into(),
        "candidate" => {
            let v = replace_field(&replace_field(value, 0, "ICEBASE"), 5, "PORT");
            // A related port (raddr/rport) moves with the ports too.
            let f: Vec<&str> = v.split(' ').collect();
            let v = match f.iter().position(|x| *x == "rport") {
                Some(i) if i + 1 < f.len() => replace_field(&v, i + 1, "PORT"),
                _ => v,
            };
            format!("a=candidate:{v}")
        }
        "crypto" => {
            let f: Vec<&str> = value.split(' ').collect();
            let keys: Vec<String> = f
                .get(2)
                .map(|k| {
                    k.split(';')
                        .map(|p| match p.strip_prefix("inline:") {
                            Some(kp) => {
                                let tail: Vec<&str> = kp.split('|').skip(1).collect();
                                let mut s = "inline:CRYPTO".to_owned();
                                for t in tail {
                                    s.push('|');
                                    s.push_str(t);
                                }
                                s
                            }
                            None => p.to_owned(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut out = format!("a=crypto:{}", f[..f.len().min(2)].join(" "));
            if !keys.is_empty() {
                out.push(' ');
                out.push_str(&keys.join(";"));
            }
            for rest in f.iter().skip(3) {
                out.push(' ');
                out.push_str(rest);
            }
            out
        }
        "fingerprint" => format!("a=fingerprint:{}", replace_field(value, 1, "FINGERPRINT")),
        "tls-id" => "a=tls-id:TLS_ID".into(),
        _ => line.to_owned(),
    }
}

fn direction_of(line: &str) -> Option<String> {
    DIRECTIONS
        .iter()
        .find(|d| line == **d)
        .map(|d| d[2..].to_owned())
}

fn parse(sdp: &str) -> Parsed {
    let mut p = Parsed::default();
    for raw in sdp.split('\n') {
        let raw = raw.trim_end_matches('\r');
        if raw.is_empty() {
            continue;
        }
        let line = normalise(raw);
        p.all.push(line.clone());
        if raw.starts_with("m=") {
            p.sections.push(Section {
                m: raw.to_owned(),
                lines: vec![line],
                ..Section::default()
            });
            continue;
        }
        let Some(s) = p.sections.last_mut() else {
            if raw.starts_with("c=") {
                p.session_c = Some(line);
            } else {
                if let Some(d) = direction_of(raw) {
                    p.session_direction = Some(d);
                }
                if !not_compared_as_lines(&line) {
                    p.session.push(line);
                }
            }
            continue;
        };
        if raw.starts_with("c=") {
            s.c = Some(line);
            continue;
        }
        if let Some(d) = direction_of(raw) {
            s.direction = Some(d);
        }
        if raw == "a=rtcp-mux" {
            s.rtcp_mux = true;
        }
        if raw.starts_with("a=crypto:") {
            s.crypto = true;
        }
        if let Some(v) = raw.strip_prefix("a=rtpmap:") {
            if let Some((pt, map)) = v.split_once(' ') {
                s.rtpmap
                    .entry(pt.to_owned())
                    .or_insert_with(|| map.to_owned());
            }
        }
        if !not_compared_as_lines(&line) {
            s.lines.push(line);
        }
    }
    p
}

/// A section as level 1 sees it.
fn summary(s: &Section, session_direction: Option<&str>) -> String {
    let f: Vec<&str> = s.m[2..].split(' ').collect();
    let (media, port, proto) = (
        f.first().copied().unwrap_or(""),
        f.get(1).copied().unwrap_or(""),
        f.get(2).copied().unwrap_or(""),
    );
    let pts: Vec<String> = f
        .iter()
        .skip(3)
        .map(|pt| {
            let map = s
                .rtpmap
                .get(*pt)
                .map(|m| m.to_ascii_lowercase())
                .or_else(|| static_rtpmap(pt).map(|m| m.to_ascii_lowercase()))
                .unwrap_or_default();
            format!("{pt}={map}")
        })
        .collect();
    format!(
        "{media} port{} {proto} [{}]{} {}{}",
        if port == "0" { "=0" } else { ">0" },
        pts.join(" "),
        if s.crypto { " crypto" } else { "" },
        s.direction
            .as_deref()
            .or(session_direction)
            .unwrap_or("sendrecv"),
        if s.rtcp_mux { " rtcp-mux" } else { "" }
    )
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// What one side has and the other lacks, `-` for the reference's, `+` for ours.
fn set_diff(out: &mut Vec<String>, label: &str, reference: &[String], ours: &[String]) {
    let mut theirs: Vec<&String> = reference.iter().collect();
    let mut extra = Vec::new();
    for l in ours {
        match theirs.iter().position(|t| *t == l) {
            Some(i) => {
                theirs.remove(i);
            }
            None => extra.push(l),
        }
    }
    for l in theirs {
        out.push(format!("{label}- {l}"));
    }
    for l in extra {
        out.push(format!("{label}+ {l}"));
    }
}

/// A section's lines for level 2: its own, and its connection line wherever it was written.
fn section_lines(s: &Section, session_c: Option<&String>) -> Vec<String> {
    let mut v = s.lines.clone();
    if let Some(c) = s.c.as_ref().or(session_c) {
        v.push(c.clone());
    }
    sorted(v)
}

/// Compares `ours` with `reference`: how far they agree, and the differences (`-`: only the
/// reference's, `+`: only ours), by section.
pub fn compare(reference: &str, ours: &str) -> (Agreement, Vec<String>) {
    let (r, o) = (parse(reference), parse(ours));
    let mut diff = Vec::new();
    let summaries = |p: &Parsed| -> Vec<String> {
        p.sections
            .iter()
            .map(|s| summary(s, p.session_direction.as_deref()))
            .collect()
    };
    let (rs, os) = (summaries(&r), summaries(&o));
    let sections = rs == os;
    if !sections {
        for i in 0..rs.len().max(os.len()) {
            let (a, b) = (rs.get(i), os.get(i));
            if a != b {
                diff.push(format!(
                    "media {i}: rtpengine {} / secrelay {}",
                    a.map_or("(none)", |s| s),
                    b.map_or("(none)", |s| s)
                ));
            }
        }
    }
    let mut lines = sorted(r.session.clone()) == sorted(o.session.clone());
    set_diff(&mut diff, "session ", &r.session, &o.session);
    for i in 0..r.sections.len().max(o.sections.len()) {
        let a = r
            .sections
            .get(i)
            .map(|s| section_lines(s, r.session_c.as_ref()))
            .unwrap_or_default();
        let b = o
            .sections
            .get(i)
            .map(|s| section_lines(s, o.session_c.as_ref()))
            .unwrap_or_default();
        if a != b {
            lines = false;
            set_diff(&mut diff, &format!("m{i} "), &a, &b);
        }
    }
    let exact = r.all == o.all;
    if lines && !exact {
        diff.push("the same lines in another order".into());
    }
    (
        Agreement {
            sections,
            lines,
            exact,
        },
        diff,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const REF: &str = "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=x\r\nt=0 0\r\n\
        m=audio 30000 RTP/AVP 0 101\r\nc=IN IP4 203.0.113.1\r\na=rtpmap:0 PCMU/8000\r\n\
        a=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\na=rtcp:30001\r\n\
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA|2^31\r\n";

    #[test]
    fn the_same_sdp_with_other_ports_and_keys_is_exact() {
        let ours = REF
            .replace("30000", "40000")
            .replace("30001", "40001")
            .replace("AAAAAAAA", "BBBBBBBB");
        let (a, d) = compare(REF, &ours);
        assert_eq!(
            a,
            Agreement {
                sections: true,
                lines: true,
                exact: true
            },
            "{d:?}"
        );
    }

    #[test]
    fn the_connection_line_may_sit_at_either_level_but_not_for_exact() {
        let ours = REF
            .replace("t=0 0\r\n", "c=IN IP4 203.0.113.1\r\nt=0 0\r\n")
            .replace(
                "RTP/AVP 0 101\r\nc=IN IP4 203.0.113.1\r\n",
                "RTP/AVP 0 101\r\n",
            );
        let (a, _) = compare(REF, &ours);
        assert!(a.sections && a.lines && !a.exact, "{a:?}");
        // Lines in another order.
        let ours = REF.replace(
            "a=sendrecv\r\na=rtcp:30001\r\n",
            "a=rtcp:30001\r\na=sendrecv\r\n",
        );
        let (a, d) = compare(REF, &ours);
        assert!(a.sections && a.lines && !a.exact, "{a:?}");
        assert_eq!(d, vec!["the same lines in another order".to_owned()]);
    }

    #[test]
    fn a_static_type_without_rtpmap_is_the_same_section_not_the_same_lines() {
        let ours = REF.replace("a=rtpmap:0 PCMU/8000\r\n", "");
        let (a, d) = compare(REF, &ours);
        assert!(a.sections && !a.lines, "{a:?}");
        assert_eq!(d, vec!["m0 - a=rtpmap:0 PCMU/8000".to_owned()]);
        // Another direction, a lost codec, no crypto: another section.
        for change in [
            ("a=sendrecv", "a=sendonly"),
            (" 0 101\r\n", " 0\r\n"),
            ("a=crypto", "a=cryptx"),
        ] {
            let (a, d) = compare(REF, &REF.replace(change.0, change.1));
            assert!(!a.sections && !a.lines, "{change:?}: {d:?}");
            assert!(d[0].starts_with("media 0: rtpengine audio port>0"), "{d:?}");
        }
        let (a, d) = compare(REF, "v=0\r\n");
        assert!(!a.sections, "{d:?}");
    }

    #[test]
    fn origin_session_name_and_rtcp_port_lines_count_only_for_exact() {
        let ours = REF
            .replace("o=- 1 1 IN IP4 192.0.2.1", "o=other 9 9 IN IP4 203.0.113.1")
            .replace("s=x", "s=-")
            .replace("a=rtcp:30001\r\n", "");
        let (a, d) = compare(REF, &ours);
        assert!(a.sections && a.lines && !a.exact, "{a:?} {d:?}");
    }

    #[test]
    fn candidates_keep_their_addresses_and_priorities() {
        assert_eq!(
            normalise("a=candidate:abcd 1 UDP 2130706431 203.0.113.1 30000 typ host"),
            "a=candidate:ICEBASE 1 UDP 2130706431 203.0.113.1 PORT typ host"
        );
        assert_eq!(
            normalise("a=rtcp:30001 IN IP4 203.0.113.1"),
            "a=rtcp:PORT IN IP4 203.0.113.1"
        );
        assert_eq!(normalise("m=audio 0 RTP/AVP 0"), "m=audio 0 RTP/AVP 0");
    }
}
