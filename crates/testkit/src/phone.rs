//! A simulated SIP phone's media side, sans-IO: an SDP offer for one audio section (plain RTP,
//! or SDES-SRTP with a key of its own in `a=crypto`), the gateway's answer taken (where to send,
//! and the gateway's key), G.711 packets out, and what comes back opened and kept. Strict, as
//! [`crate::memory::SimClient`] is: SRTP from the gateway that its key does not open panics.

use std::net::SocketAddr;

use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::rtp::{classify, PacketKind};
use secrelay_wire::sdp_rtp::parse_rtp;

use crate::browser::random_bytes;

/// A simulated phone.
pub struct SimPhone {
    /// Where it sends from and receives RTP.
    pub addr: SocketAddr,
    /// The SDES suite, or `None` for plain RTP.
    pub sdes: Option<Profile>,
    /// Offer `a=rtcp-mux`.
    pub rtcp_mux: bool,
    /// Its own key (what it sends is protected with it).
    pub key: Option<MasterKey>,
    /// The gateway's key (what it is sent is protected with it), from the answer or offer.
    pub gateway_key: Option<MasterKey>,
    /// Protects what it sends.
    pub tx: Option<Context>,
    /// Opens what the gateway sends (from the answer's key).
    pub rx: Option<Context>,
    /// The payload type it sends under (0, PCMU, by default).
    pub pt: u8,
    /// The formats its offers list, in order: (payload type, `a=rtpmap` value). PCMU, PCMA
    /// and Opus by default; a test makes a PCMA-only phone, or adds telephone-event.
    pub formats: Vec<(u8, String)>,
    /// The `a=ptime` of its offers (20 by default; `None`: no line).
    pub ptime: Option<u32>,
    /// Timestamp step per packet (160: 20 ms of G.711).
    pub ts_step: u32,
    /// The direction its offers say (`sendrecv` by default; `sendonly` puts the call on
    /// hold).
    pub direction: &'static str,
    /// Its SSRC.
    pub ssrc: u32,
    /// The next sequence number.
    pub seq: u16,
    /// The next timestamp.
    pub ts: u32,
    /// The gateway's RTP address, from the answer.
    pub gateway: Option<SocketAddr>,
    /// RTP received (opened).
    pub received: Vec<Vec<u8>>,
    /// RTCP received (opened).
    pub received_rtcp: Vec<Vec<u8>>,
    /// Every datagram received, as it crossed the wire.
    pub wire: Vec<Vec<u8>>,
}

impl SimPhone {
    /// Phone `n` at 198.51.100.`100+n`:`20000+2n`, plain RTP.
    pub fn plain(n: u8) -> SimPhone {
        SimPhone {
            addr: format!(
                "198.51.100.{}:{}",
                100 + u16::from(n),
                20000 + 2 * u16::from(n)
            )
            .parse()
            .expect("a literal address"),
            sdes: None,
            rtcp_mux: false,
            key: None,
            gateway_key: None,
            tx: None,
            rx: None,
            pt: 0,
            formats: vec![
                (0, "PCMU/8000".into()),
                (8, "PCMA/8000".into()),
                (111, "opus/48000/2".into()),
            ],
            ptime: Some(20),
            ts_step: 160,
            direction: "sendrecv",
            ssrc: 0x5000_0000 | u32::from(n),
            seq: 1,
            ts: 160,
            gateway: None,
            received: Vec::new(),
            received_rtcp: Vec::new(),
            wire: Vec::new(),
        }
    }

    /// Phone `n` with SDES-SRTP on `profile`, with a fresh key of its own.
    pub fn sdes(n: u8, profile: Profile) -> SimPhone {
        let raw = random_bytes::<64>();
        let key =
            MasterKey::from_concatenated(profile, &raw[..profile.key_len() + profile.salt_len()])
                .expect("lengths from the profile");
        SimPhone {
            sdes: Some(profile),
            tx: Some(
                Context::new(Policy::new(key.clone()).any_outbound())
                    .expect("a fresh key makes a context"),
            ),
            key: Some(key),
            gateway_key: None,
            ..SimPhone::plain(n)
        }
    }

    /// The phone offering only `formats` ((payload type, `a=rtpmap` value), in order) and
    /// sending under the first.
    pub fn with_formats(mut self, formats: &[(u8, &str)]) -> SimPhone {
        self.formats = formats.iter().map(|(pt, m)| (*pt, m.to_string())).collect();
        self.pt = formats.first().map_or(0, |f| f.0);
        self
    }

    /// The offer: one audio section with [`SimPhone::formats`] (PCMU, PCMA, Opus by default),
    /// its `a=ptime`, and its crypto line when it is an SDES phone.
    pub fn offer(&self) -> String {
        let proto = if self.sdes.is_some() {
            "RTP/SAVP"
        } else {
            "RTP/AVP"
        };
        let pts: Vec<String> = self.formats.iter().map(|(pt, _)| pt.to_string()).collect();
        let mut s = format!(
            "v=0\r\no=phone 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} {proto} {pts}\r\n",
            ip = self.addr.ip(),
            port = self.addr.port(),
            pts = pts.join(" "),
        );
        for (pt, map) in &self.formats {
            s.push_str(&format!("a=rtpmap:{pt} {map}\r\n"));
            if map.starts_with("telephone-event") {
                s.push_str(&format!("a=fmtp:{pt} 0-16\r\n"));
            }
        }
        if let Some(p) = self.ptime {
            s.push_str(&format!("a=ptime:{p}\r\n"));
        }
        s.push_str(&format!("a={}\r\n", self.direction));
        if let (Some(p), Some(k)) = (self.sdes, &self.key) {
            s.push_str(&format!(
                "a=crypto:1 {} {}\r\n",
                p.sdp_name(),
                k.to_sdes_inline()
            ));
        }
        if self.rtcp_mux {
            s.push_str("a=rtcp-mux\r\n");
        }
        s
    }

    /// A new key of its own (SDES), for what it sends from now on and offers next; the
    /// context of the old one, to show what it sent is no longer taken.
    pub fn rekey(&mut self) -> Option<Context> {
        let p = self.sdes?;
        let raw = random_bytes::<64>();
        let key = MasterKey::from_concatenated(p, &raw[..p.key_len() + p.salt_len()])
            .expect("lengths from the profile");
        let tx = Context::new(Policy::new(key.clone()).any_outbound())
            .expect("a fresh key makes a context");
        self.key = Some(key);
        self.tx.replace(tx)
    }

    /// Its key log ([`crate::keylog`]): its own SDES key and the gateway's, once known (none
    /// for plain RTP).
    pub fn key_log(&self) -> Vec<crate::keylog::KeyLogLine> {
        use crate::keylog::{KeyLabel, KeyLogLine};
        [
            (KeyLabel::SrtpSend, &self.key),
            (KeyLabel::SrtpReceive, &self.gateway_key),
        ]
        .into_iter()
        .filter_map(|(label, k)| {
            k.as_ref()
                .map(|k| KeyLogLine::master_key(self.addr, label, k))
        })
        .collect()
    }

    /// Takes the gateway's answer: where to send, and (SDES) its key. Err: what was wrong.
    pub fn accept_answer(&mut self, answer: &str) -> Result<(), String> {
        let d = parse_rtp(answer).map_err(|e| e.to_string())?;
        let a = d
            .sections
            .iter()
            .find(|s| s.port != 0)
            .ok_or("the answer rejects every section")?;
        let ip = a.address.ok_or("the answer has no address")?;
        self.gateway = Some(SocketAddr::new(ip, a.port));
        if let Some(p) = self.sdes {
            let c = a.crypto.first().ok_or("an SDES answer without a=crypto")?;
            if c.suite != p.sdp_name() {
                return Err(format!(
                    "answer chose {}, we offered {}",
                    c.suite,
                    p.sdp_name()
                ));
            }
            let key = c.keys.first().ok_or("a=crypto without a key")?;
            let k = MasterKey::from_sdes_inline(p, &key.inline()).map_err(|e| e.to_string())?;
            self.rx = Some(
                Context::new(Policy::new(k.clone()).any_inbound()).map_err(|e| e.to_string())?,
            );
            self.gateway_key = Some(k);
        }
        Ok(())
    }

    /// Answers an offer made to the phone (by a gateway, for a SIP proxy): takes where to
    /// send, the first of its [`SimPhone::formats`] the offer has (PCMU by default) and a
    /// telephone-event of its own the offer has, under the offer's payload types (it sends
    /// audio under that one from then on), and (SDES) the offered line of its own suite with
    /// the gateway's key; the answer names that line's tag with the phone's key. Err: what it
    /// cannot answer.
    pub fn answer_offer(&mut self, offer: &str) -> Result<String, String> {
        let d = parse_rtp(offer).map_err(|e| e.to_string())?;
        let a = d
            .sections
            .iter()
            .find(|s| s.port != 0)
            .ok_or("the offer has no section with a port")?;
        let ip = a.address.ok_or("the offer has no address")?;
        self.gateway = Some(SocketAddr::new(ip, a.port));
        // (payload type in the offer, rtpmap) of each of our formats it has, ours in order.
        let offered: Vec<(u8, String)> = self
            .formats
            .iter()
            .filter_map(|(_, map)| {
                let mut it = map.split('/');
                let (name, clock) = (it.next()?, it.next()?.parse::<u32>().ok()?);
                a.codecs
                    .iter()
                    .find(|c| c.name.eq_ignore_ascii_case(name) && c.clock_rate == clock)
                    .map(|c| (c.pt, map.clone()))
            })
            .collect();
        let audio = offered
            .iter()
            .find(|(_, m)| !m.starts_with("telephone-event"))
            .cloned()
            .ok_or("the offer has none of the phone's codecs")?;
        let events = offered
            .iter()
            .find(|(_, m)| m.starts_with("telephone-event"))
            .cloned();
        self.pt = audio.0;
        let mut formats = format!("{}", audio.0);
        let mut maps = format!("a=rtpmap:{} {}\r\n", audio.0, audio.1);
        if let Some((pt, map)) = &events {
            formats.push_str(&format!(" {pt}"));
            maps.push_str(&format!("a=rtpmap:{pt} {map}\r\na=fmtp:{pt} 0-16\r\n"));
        }
        let mut crypto_line = String::new();
        if let (Some(p), Some(k)) = (self.sdes, &self.key) {
            let c = a
                .crypto
                .iter()
                .find(|c| c.suite == p.sdp_name())
                .ok_or_else(|| format!("the offer has no {} line", p.sdp_name()))?;
            let theirs =
                MasterKey::from_sdes_inline(p, &c.keys[0].inline()).map_err(|e| e.to_string())?;
            self.rx = Some(
                Context::new(Policy::new(theirs.clone()).any_inbound())
                    .map_err(|e| e.to_string())?,
            );
            self.gateway_key = Some(theirs);
            crypto_line = format!(
                "a=crypto:{} {} {}\r\n",
                c.tag,
                p.sdp_name(),
                k.to_sdes_inline()
            );
        }
        Ok(format!(
            "v=0\r\no=phone 2 2 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} {proto} {formats}\r\n{maps}{crypto_line}a=sendrecv\r\n",
            ip = self.addr.ip(),
            port = self.addr.port(),
            proto = if self.sdes.is_some() {
                "RTP/SAVP"
            } else {
                "RTP/AVP"
            },
        ))
    }

    /// An RTP packet of `payload` (the next sequence number and timestamp).
    pub fn rtp(&mut self, payload: &[u8]) -> Vec<u8> {
        let p = self.rtp_with(self.pt, self.ts, false, payload);
        self.ts = self.ts.wrapping_add(self.ts_step);
        p
    }

    /// An RTP packet of `payload` under payload type `pt` with timestamp `ts` and the marker
    /// bit `marker`, on the next sequence number (the timestamp does not move: a
    /// telephone-event packet).
    pub fn rtp_with(&mut self, pt: u8, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p[0] = 0x80;
        p[1] = pt | if marker { 0x80 } else { 0 };
        p[2..4].copy_from_slice(&self.seq.to_be_bytes());
        p[4..8].copy_from_slice(&ts.to_be_bytes());
        p[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        p.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        p
    }

    /// [`SimPhone::rtp_with`], protected for an SDES phone: what goes on the wire.
    pub fn packet_with(&mut self, pt: u8, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let plain = self.rtp_with(pt, ts, marker, payload);
        self.protect(plain)
    }

    fn protect(&mut self, plain: Vec<u8>) -> Vec<u8> {
        let Some(tx) = self.tx.as_mut() else {
            return plain;
        };
        let mut buf = plain.clone();
        buf.resize(plain.len() + 32, 0);
        let n = tx
            .protect_rtp(&mut buf, plain.len())
            .expect("our own context protects");
        buf.truncate(n);
        buf
    }

    /// What it sends for `payload`: (plain, on the wire), SRTP for an SDES phone.
    pub fn packet(&mut self, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let plain = self.rtp(payload);
        let wire = self.protect(plain.clone());
        (plain, wire)
    }

    /// Opens a datagram from the gateway in place (SDES: with the answer's key): whether it
    /// is RTCP, and the length of what it holds in the clear. Err: what was wrong with it.
    pub fn open(&mut self, buf: &mut [u8], len: usize) -> Result<(bool, usize), String> {
        let rtcp = match classify(&buf[..len]) {
            PacketKind::Rtp => false,
            PacketKind::Rtcp => true,
            other => return Err(format!("a phone got {other:?} from the gateway")),
        };
        let n = match self.rx.as_mut() {
            Some(rx) => if rtcp {
                rx.unprotect_rtcp(buf, len)
            } else {
                rx.unprotect_rtp(buf, len)
            }
            .map_err(|e| {
                format!("SRTP from the gateway that the answer's key does not open: {e}")
            })?,
            None if self.sdes.is_some() => return Err("SRTP before the answer".into()),
            None => len,
        };
        Ok((rtcp, n))
    }

    /// A datagram from the gateway: opened (SDES) and kept. Panics on what it cannot open.
    pub fn receive(&mut self, d: &[u8]) {
        self.wire.push(d.to_vec());
        let mut buf = d.to_vec();
        let (rtcp, n) = self
            .open(&mut buf, d.len())
            .unwrap_or_else(|e| panic!("{e}"));
        buf.truncate(n);
        if rtcp {
            self.received_rtcp.push(buf);
        } else {
            self.received.push(buf);
        }
    }
}

/// A [`SimPhone`] on a real UDP socket (loopback): its address is the socket's.
pub struct SocketPhone {
    /// The phone.
    pub phone: SimPhone,
    /// Its socket (non-blocking).
    pub socket: std::net::UdpSocket,
}

impl SocketPhone {
    /// A phone bound on `ip` (port chosen by the OS): plain, or SDES with `profile`.
    pub fn bind(
        ip: std::net::IpAddr,
        sdes: Option<Profile>,
        ssrc: u32,
    ) -> std::io::Result<SocketPhone> {
        let socket = std::net::UdpSocket::bind((ip, 0))?;
        socket.set_nonblocking(true)?;
        let mut phone = match sdes {
            Some(p) => SimPhone::sdes(1, p),
            None => SimPhone::plain(1),
        };
        phone.addr = socket.local_addr()?;
        phone.ssrc = ssrc;
        Ok(SocketPhone { phone, socket })
    }

    /// Sends one packet of `payload` to the gateway (once it answered).
    pub fn send(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let to = self
            .phone
            .gateway
            .ok_or_else(|| std::io::Error::other("no answer yet"))?;
        let (_, wire) = self.phone.packet(payload);
        self.socket.send_to(&wire, to).map(|_| ())
    }

    /// Packets received whose payload starts with `fill` (a test's marker of who sent them).
    pub fn heard(&self, fill: u8) -> usize {
        self.phone
            .received
            .iter()
            .filter(|r| {
                secrelay_wire::RtpHeader::parse(r).is_ok_and(|h| h.payload().first() == Some(&fill))
            })
            .count()
    }

    /// Reads what is waiting (only from the gateway's address).
    pub fn read(&mut self) {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            if Some(from) == self.phone.gateway {
                self.phone.receive(&buf[..n]);
            }
        }
    }
}
