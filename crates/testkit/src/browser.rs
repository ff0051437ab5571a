//! The simulated browser: the WebRTC client every simulated participant is built on, sans-IO.
//!
//! A [`Browser`] writes an offer (Chrome's own, or one audio section as a small client sends
//! it), takes the gateway's answer, sends ICE connectivity checks with short-term credentials,
//! runs a `secrelay_dtls` endpoint in the role the answer gives it, and once DTLS-SRTP is up
//! protects what it sends and unprotects what it receives with `secrelay_srtp` contexts made
//! from the exported keys. It never reads a clock or a socket: time comes in as an argument,
//! datagrams come in and go out as bytes. The in-memory clients of the gateway's tests and
//! the socket participants of the demo and the lab both drive one.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use secrelay_dtls::{
    Certificate, Endpoint, EndpointConfig, Event as DtlsEvent, FailReason, Fingerprint,
    HashAlgorithm, KeyType, LocalCertificate, Output as DtlsOutput, Role, SrtpKeys,
};
use secrelay_srtp::{Context, Error as SrtpError, Policy, Profile};
use secrelay_wire::rtp::{classify, PacketKind};
use secrelay_wire::sdp::{MediaKind, Offer, Setup};
use secrelay_wire::stun::{attr, Class, Message, MessageBuilder, BINDING};

/// Chrome's offer (audio with Opus and the usual others, video with VP8), as captured.
pub const CHROME_OFFER: &str = include_str!("../../wire/tests/data/chrome_offer.sdp");

/// `N` random bytes from the OS.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random source works");
    b
}

/// `n` random characters of the ICE alphabet (RFC 8445 §5.3: ice-char).
pub fn random_token(n: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    random_bytes::<64>()
        .iter()
        .take(n)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The direction of a one-section audio offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sends only.
    SendOnly,
    /// Receives only.
    RecvOnly,
    /// Both.
    SendRecv,
}

impl Direction {
    fn attribute(self) -> &'static str {
        match self {
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::SendRecv => "sendrecv",
        }
    }
}

/// The offer a small client sends for one audio section with PCMU (payload type 0).
pub fn audio_offer(
    direction: Direction,
    ufrag: &str,
    pwd: &str,
    fingerprint: &Fingerprint,
    ssrc: u32,
) -> String {
    let session = u64::from_be_bytes(random_bytes::<8>()) >> 2;
    format!(
        "v=0\r\n\
         o=- {session} 2 IN IP4 127.0.0.1\r\n\
         s=-\r\n\
         t=0 0\r\n\
         a=group:BUNDLE 0\r\n\
         a=msid-semantic: WMS\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 0\r\n\
         c=IN IP4 0.0.0.0\r\n\
         a=rtcp:9 IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:{ufrag}\r\n\
         a=ice-pwd:{pwd}\r\n\
         a=ice-options:trickle\r\n\
         a=fingerprint:{fingerprint}\r\n\
         a=setup:actpass\r\n\
         a=mid:0\r\n\
         a={dir}\r\n\
         a=rtcp-mux\r\n\
         a=rtpmap:0 PCMU/8000\r\n\
         a=ssrc:{ssrc} cname:sim-{ufrag}\r\n",
        dir = direction.attribute(),
    )
}

/// The first UDP host candidate in an answer.
pub fn answer_candidate(answer: &str) -> Option<SocketAddr> {
    candidate_of(answer, "udp")
}

/// The first passive ICE-TCP host candidate in an answer (RFC 6544).
pub fn answer_tcp_candidate(answer: &str) -> Option<SocketAddr> {
    candidate_of(answer, "tcp")
}

fn candidate_of(answer: &str, transport: &str) -> Option<SocketAddr> {
    answer.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("a=candidate:")?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 6 || !f[2].eq_ignore_ascii_case(transport) {
            return None;
        }
        if transport == "tcp" && !rest.contains(" tcptype passive") {
            return None;
        }
        let ip: IpAddr = f[4].parse().ok()?;
        let port: u16 = f[5].parse().ok()?;
        Some(SocketAddr::new(ip, port))
    })
}

/// What a datagram from the gateway was, once handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// A Binding success response that authenticates with the gateway's password.
    StunSuccess,
    /// Any other STUN message (an error response, or one that does not authenticate).
    StunOther,
    /// A DTLS record, handed to the endpoint (drain it with [`Browser::drain_dtls`]).
    Dtls,
    /// SRTP opened with our keys: the RTP packet is the first `n` bytes of the buffer.
    Rtp(usize),
    /// SRTCP opened with our keys: the RTCP packet is the first `n` bytes of the buffer.
    Rtcp(usize),
    /// SRTP or SRTCP that did not open (or came before our keys).
    Refused(Option<SrtpError>),
    /// Not STUN, DTLS, RTP or RTCP.
    Other,
}

/// A simulated browser. Fields are public: tests look inside and change what they test.
pub struct Browser {
    /// Our certificate (its fingerprint goes into the offer).
    pub cert: Certificate,
    /// Our ICE username fragment.
    pub ufrag: String,
    /// Our ICE password.
    pub pwd: String,
    /// The gateway's ICE credentials and DTLS fingerprint and role, from its answer.
    pub answer: Option<Offer>,
    /// The SSRC we send under.
    pub ssrc: u32,
    /// The payload type we send under.
    pub pt: u8,
    /// The next sequence number.
    pub seq: u16,
    /// The next RTP timestamp.
    pub ts: u32,
    /// Timestamp step per packet (960 for 20 ms of Opus, 160 for 20 ms of G.711).
    pub ts_step: u32,
    /// The SRTP profiles our DTLS endpoint offers and accepts, most preferred first (the
    /// endpoint's defaults; a test narrows them to play a peer that offers only
    /// SRTP_AES128_CM_SHA1_80, as GStreamer's webrtcbin does).
    pub srtp_profiles: Vec<Profile>,
    /// The `a=setup` of our one-section offers: `actpass` (the gateway answers `passive` and
    /// is the DTLS server), or `passive` (it answers `active` and is the client).
    pub offer_setup: &'static str,
    /// The DTLS endpoint, once started.
    pub dtls: Option<Endpoint>,
    /// When the endpoint wants its timer.
    pub dtls_timer: Option<Instant>,
    /// The exported SRTP keys, once connected.
    pub keys: Option<SrtpKeys>,
    /// Why DTLS failed, if it did.
    pub failed: Option<FailReason>,
    /// Whether close_notify was exchanged.
    pub closed: bool,
    /// Protects what we send.
    pub tx: Option<Context>,
    /// Opens what we receive.
    pub rx: Option<Context>,
    tid: u64,
    tid_salt: [u8; 4],
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("ufrag", &self.ufrag)
            .field("ssrc", &self.ssrc)
            .field("connected", &self.keys.is_some())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Browser {
    /// A browser with a fresh ECDSA P-256 certificate and these credentials, sending under
    /// `ssrc` and payload type `pt` from sequence number 1 and timestamp 0, 20 ms of Opus per
    /// packet.
    pub fn new(ufrag: &str, pwd: &str, ssrc: u32, pt: u8) -> Browser {
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "secrelay-sim-browser")
            .expect("an ECDSA P-256 certificate can always be made");
        Browser {
            cert,
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
            answer: None,
            ssrc,
            pt,
            seq: 1,
            ts: 0,
            ts_step: 960,
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec(),
            offer_setup: "actpass",
            dtls: None,
            dtls_timer: None,
            keys: None,
            failed: None,
            closed: false,
            tx: None,
            rx: None,
            tid: 0,
            tid_salt: random_bytes::<4>(),
        }
    }

    /// A browser with random credentials, a random SSRC, sequence number and timestamp.
    pub fn random(pt: u8) -> Browser {
        let mut b = Browser::new(
            &random_token(8),
            &random_token(24),
            u32::from_be_bytes(random_bytes::<4>()).max(1),
            pt,
        );
        b.seq = u16::from_be_bytes(random_bytes::<2>());
        b.ts = u32::from_be_bytes(random_bytes::<4>());
        b
    }

    /// Chrome's offer with our credentials and fingerprint (`a=setup:actpass`), announcing SSRC
    /// 1001 for audio and our payload type for Opus.
    pub fn chrome_offer(&self) -> String {
        self.chrome_offer_with(&self.cert.fingerprint(), "actpass")
    }

    /// Chrome's offer with a chosen fingerprint and `a=setup` value.
    pub fn chrome_offer_with(&self, fp: &Fingerprint, setup: &str) -> String {
        let mut s = CHROME_OFFER
            .replace("a=ice-ufrag:Fx3k", &format!("a=ice-ufrag:{}", self.ufrag))
            .replace(
                "a=ice-pwd:mWmR9dHJ4PcoyR+l8UkmBVlo",
                &format!("a=ice-pwd:{}", self.pwd),
            )
            .replace("a=setup:actpass", &format!("a=setup:{setup}"));
        let chrome_fp = "sha-256 3D:9E:1B:7A:22:4C:35:0F:3E:C3:6F:AF:9B:56:C4:41:17:5C:9F:02:A0:0E:77:27:4B:23:0F:9B:D8:77:D5:23";
        s = s.replace(chrome_fp, &fp.to_string());
        if self.pt != 111 {
            s = s.replace("111", &self.pt.to_string());
        }
        s
    }

    /// A one-section PCMU offer (see [`audio_offer`]) with our credentials, announcing
    /// `fingerprint` (ours unless a test says otherwise).
    pub fn audio_offer(&self, direction: Direction, fingerprint: Option<&Fingerprint>) -> String {
        let own = self.cert.fingerprint();
        let offer = audio_offer(
            direction,
            &self.ufrag,
            &self.pwd,
            fingerprint.unwrap_or(&own),
            self.ssrc,
        );
        if self.offer_setup == "actpass" {
            offer
        } else {
            offer.replace("a=setup:actpass", &format!("a=setup:{}", self.offer_setup))
        }
    }

    /// Answers an offer the gateway made (a SIP proxy's call towards this browser): takes the
    /// offer as the gateway's description (its credentials, fingerprint and `actpass`, so that
    /// we are the DTLS client) and writes our answer: the offer's first audio section with
    /// PCMU at the offer's payload type (which we then send under), `a=setup:active`, our
    /// credentials and fingerprint. Err: an offer without an audio section offering PCMU.
    pub fn answer_offer(&mut self, offer: Offer, direction: Direction) -> Result<String, String> {
        let section = offer
            .media
            .iter()
            .find(|m| m.kind == MediaKind::Audio && m.port != 0)
            .ok_or("the offer has no audio section")?;
        let pcmu = section
            .codecs
            .iter()
            .find(|c| c.is("PCMU", 8000))
            .ok_or("the offer's audio section has no PCMU")?;
        self.pt = pcmu.pt;
        let answer = audio_offer(
            direction,
            &self.ufrag,
            &self.pwd,
            &self.cert.fingerprint(),
            self.ssrc,
        )
        .replace("a=setup:actpass", "a=setup:active")
        .replace("a=mid:0", &format!("a=mid:{}", section.mid))
        .replace(
            "a=group:BUNDLE 0",
            &format!("a=group:BUNDLE {}", section.mid),
        )
        .replace(
            "UDP/TLS/RTP/SAVPF 0",
            &format!("UDP/TLS/RTP/SAVPF {}", pcmu.pt),
        )
        .replace("a=rtpmap:0 PCMU", &format!("a=rtpmap:{} PCMU", pcmu.pt));
        self.answer = Some(offer);
        Ok(answer)
    }

    /// A new offer of ours in a session whose first offer was the gateway's
    /// ([`Browser::answer_offer`]): new ICE credentials (an ICE restart, as a browser
    /// re-INVITEs after a network change), the same certificate, section and payload type,
    /// `a=setup:active` (the role taken). `None` before the gateway's offer.
    pub fn restart_offer(&mut self) -> Option<String> {
        let gateway = self.answer.clone()?;
        self.ufrag = random_token(8);
        self.pwd = random_token(24);
        self.answer_offer(gateway, Direction::SendRecv).ok()
    }

    /// Takes the gateway's answer (its credentials, fingerprint and DTLS role).
    pub fn set_answer(&mut self, answer: Offer) {
        self.answer = Some(answer);
    }

    /// A Binding request to the gateway as a controlling full agent sends it, nominating the
    /// pair if asked. `None` before the answer.
    pub fn binding_request(&mut self, use_candidate: bool) -> Option<Vec<u8>> {
        let answer = self.answer.as_ref()?;
        self.tid += 1;
        let mut tid = [0u8; 12];
        tid[..8].copy_from_slice(&self.tid.to_be_bytes());
        tid[8..].copy_from_slice(&self.tid_salt);
        let username = format!("{}:{}", answer.ice_ufrag, self.ufrag);
        let mut buf = [0u8; 512];
        let mut b = MessageBuilder::new(&mut buf, Class::Request, BINDING, tid)
            .attribute(attr::USERNAME, username.as_bytes())
            .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes())
            .attribute(
                attr::ICE_CONTROLLING,
                &0x1234_5678_9abc_def0u64.to_be_bytes(),
            );
        if use_candidate {
            b = b.attribute(attr::USE_CANDIDATE, &[]);
        }
        let n = b
            .integrity(answer.ice_pwd.as_bytes())
            .fingerprint()
            .expect("a Binding request of fixed small size fits 512 bytes");
        Some(buf[..n].to_vec())
    }

    /// Starts DTLS against the answer: we are the client when the gateway said `passive`.
    /// Err: no answer yet, or the answer's fingerprint is unusable.
    pub fn start_dtls(&mut self, now: Instant) -> Result<(), String> {
        let answer = self.answer.as_ref().ok_or("no answer yet")?;
        let algorithm: HashAlgorithm = answer
            .fingerprint
            .0
            .parse()
            .map_err(|e| format!("answer fingerprint: {e}"))?;
        let fp = Fingerprint::from_digest(algorithm, &answer.fingerprint.1)
            .map_err(|e| format!("answer fingerprint: {e}"))?;
        let role = match answer.setup {
            Setup::Active => Role::Server,
            _ => Role::Client,
        };
        let mut cfg = EndpointConfig::new(role, LocalCertificate::from(&self.cert), fp);
        cfg.srtp_profiles = self.srtp_profiles.clone();
        self.dtls = Some(Endpoint::new(cfg, now).map_err(|e| format!("DTLS endpoint: {e}"))?);
        Ok(())
    }

    /// Handles a datagram from the gateway (`buf[..n]`; SRTP is opened in place).
    pub fn receive(&mut self, now: Instant, buf: &mut [u8], n: usize) -> Inbound {
        let n = n.min(buf.len());
        match classify(&buf[..n]) {
            PacketKind::Stun => {
                let pwd = self.answer.as_ref().map(|a| a.ice_pwd.as_bytes());
                let ok = Message::parse(&buf[..n]).is_ok_and(|m| {
                    m.class() == Class::Success && pwd.is_some_and(|p| m.check_integrity(p).is_ok())
                });
                if ok {
                    Inbound::StunSuccess
                } else {
                    Inbound::StunOther
                }
            }
            PacketKind::Dtls => {
                if let Some(ep) = self.dtls.as_mut() {
                    ep.handle_datagram(now, &buf[..n]);
                }
                Inbound::Dtls
            }
            PacketKind::Rtp => match self.rx.as_mut() {
                None => Inbound::Refused(None),
                Some(rx) => match rx.unprotect_rtp(buf, n) {
                    Ok(len) => Inbound::Rtp(len),
                    Err(e) => Inbound::Refused(Some(e)),
                },
            },
            PacketKind::Rtcp => match self.rx.as_mut() {
                None => Inbound::Refused(None),
                Some(rx) => match rx.unprotect_rtcp(buf, n) {
                    Ok(len) => Inbound::Rtcp(len),
                    Err(e) => Inbound::Refused(Some(e)),
                },
            },
            PacketKind::Other => Inbound::Other,
        }
    }

    /// Drains the DTLS endpoint: the datagrams to send. Keys, failure and close are noted in
    /// the fields.
    pub fn drain_dtls(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let Some(ep) = self.dtls.as_mut() else {
            return out;
        };
        self.dtls_timer = None;
        while let Some(o) = ep.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => out.push(d),
                DtlsOutput::Timeout(t) => {
                    self.dtls_timer = Some(t);
                    break;
                }
                DtlsOutput::Event(DtlsEvent::Connected { keys, .. }) => {
                    let tx = Context::new(Policy::new(keys.local.clone()).any_outbound());
                    let rx = Context::new(Policy::new(keys.remote.clone()).any_inbound());
                    match (tx, rx) {
                        (Ok(tx), Ok(rx)) => {
                            self.tx = Some(tx);
                            self.rx = Some(rx);
                            self.keys = Some(keys);
                        }
                        // Keys DTLS agreed on that SRTP refuses: a failure on our side.
                        _ => self.failed = Some(FailReason::Internal),
                    }
                }
                DtlsOutput::Event(DtlsEvent::Failed(r)) => self.failed = Some(r),
                DtlsOutput::Event(DtlsEvent::Closed) => self.closed = true,
                DtlsOutput::Event(_) => {}
            }
        }
        out
    }

    /// Fires the DTLS timer if it is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.dtls_timer.is_some_and(|t| now >= t) {
            if let Some(ep) = self.dtls.as_mut() {
                ep.handle_timeout(now);
            }
        }
    }

    /// Sends close_notify (drain it with [`Browser::drain_dtls`]).
    pub fn close(&mut self, now: Instant) {
        if let Some(ep) = self.dtls.as_mut() {
            ep.close(now);
        }
    }

    /// An RTP packet: our SSRC and payload type, the next sequence number and timestamp,
    /// `payload`.
    pub fn rtp(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[0] = 0x80;
        p[1] = self.pt;
        p[2..4].copy_from_slice(&self.seq.to_be_bytes());
        p[4..8].copy_from_slice(&self.ts.to_be_bytes());
        p[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        p.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(self.ts_step);
        p
    }

    /// [`Browser::rtp`], protected with our outbound context: (plain, protected). `None`
    /// before our keys.
    pub fn srtp(&mut self, payload: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let plain = self.rtp(payload);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 32, 0);
        let n = self.tx.as_mut()?.protect_rtp(&mut buf, plain.len()).ok()?;
        buf.truncate(n);
        Some((plain, buf))
    }

    /// [`Browser::srtp`] under another SSRC (the sequence number and timestamp go on as ours):
    /// (plain, protected). `None` before our keys.
    pub fn srtp_as(&mut self, ssrc: u32, payload: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let ours = std::mem::replace(&mut self.ssrc, ssrc);
        let made = self.srtp(payload);
        self.ssrc = ours;
        made
    }

    /// An RTCP compound packet protected with our outbound context. `None` before our keys.
    pub fn srtcp(&mut self, rtcp: &[u8]) -> Option<Vec<u8>> {
        let mut buf = rtcp.to_vec();
        buf.resize(rtcp.len() + 32, 0);
        let n = self.tx.as_mut()?.protect_rtcp(&mut buf, rtcp.len()).ok()?;
        buf.truncate(n);
        Some(buf)
    }
}

/// A receiver report (RTCP RR, no report blocks) from `ssrc`.
pub fn receiver_report(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 201, 0, 1];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_from_answer() {
        let a = "a=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\n";
        assert_eq!(
            answer_candidate(a),
            Some("127.0.0.1:40000".parse().unwrap())
        );
        assert_eq!(
            answer_candidate("a=candidate:1 1 tcp 1 1.2.3.4 5 typ host"),
            None
        );
        let both = format!("{a}a=candidate:2 1 tcp 1 1.2.3.4 5 typ host tcptype passive\r\n");
        assert_eq!(
            answer_tcp_candidate(&both),
            Some("1.2.3.4:5".parse().unwrap())
        );
        assert_eq!(answer_tcp_candidate(a), None);
    }

    #[test]
    fn offers_parse_and_carry_our_credentials() {
        let b = Browser::random(0);
        for sdp in [b.chrome_offer(), b.audio_offer(Direction::SendRecv, None)] {
            let o = secrelay_wire::sdp::parse_offer(&sdp).unwrap();
            assert_eq!(o.ice_ufrag, b.ufrag);
            assert_eq!(o.ice_pwd, b.pwd);
        }
        assert_eq!(random_token(24).len(), 24);
    }

    #[test]
    fn no_request_and_no_media_before_the_answer_and_keys() {
        let mut b = Browser::random(0);
        assert!(b.binding_request(true).is_none());
        assert!(b.srtp(b"x").is_none());
        assert!(b.start_dtls(Instant::now()).is_err());
        let mut junk = [0x80u8, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 9];
        assert_eq!(
            b.receive(Instant::now(), &mut junk, 13),
            Inbound::Refused(None)
        );
    }
}
