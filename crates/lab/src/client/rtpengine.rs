//! Calls set up through rtpengine's ng control protocol (bencode over UDP: `offer` and
//! `answer`), on rtpengine or on secrelay (which speaks it too), driven at a fixed offered
//! packet rate: SDES-SRTP calls with the two legs on different crypto suites (so the relay
//! must decrypt and re-encrypt every packet), or plain RTP calls.
//!
//! Each call has two legs (caller and callee), each a UDP socket sending G.711 20 ms packets
//! (50/s), SDES legs protected with their own key and unprotecting what the relay sends with
//! the key the relay announced. So a call offers 100 packets/s to the relay, and 1,000 calls
//! offer 100,000 packets/s.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use mio::{Events, Interest, Poll, Token};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::rtp::RtpHeader;

use secrelay_testkit::StreamRx;

pub use secrelay_testkit::ng::{reply_strings, Ng};
pub use secrelay_wire::bencode::Bencode;

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

/// How the calls' legs are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keying {
    /// SDES-SRTP: the caller on one suite, the callee on another.
    Sdes {
        /// The caller's suite.
        caller: Profile,
        /// The callee's suite.
        callee: Profile,
    },
    /// Plain RTP both sides.
    Plain,
}

impl Keying {
    /// `sdes` or `plain`.
    pub fn name(self) -> &'static str {
        match self {
            Keying::Sdes { .. } => "sdes",
            Keying::Plain => "plain",
        }
    }
}

/// The audio port of an SDP.
fn sdp_port(sdp: &str) -> anyhow::Result<u16> {
    sdp.lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow!("no m=audio port in the relay's SDP"))
}

/// The audio port of an SDP, and the tag and inline key of its crypto line for `suite`.
fn sdp_port_and_crypto(sdp: &str, suite: &str) -> anyhow::Result<(u16, u32, String)> {
    let port = sdp_port(sdp)?;
    let (tag, key) = sdp
        .lines()
        .filter_map(|l| l.trim().strip_prefix("a=crypto:"))
        .find_map(|r| {
            let f: Vec<&str> = r.split_whitespace().collect();
            (f.len() >= 3 && f[1] == suite).then(|| (f[0].parse().ok(), f[2].to_owned()))
        })
        .ok_or_else(|| anyhow!("the relay's SDP has no {suite} crypto line"))?;
    let tag = tag.ok_or_else(|| anyhow!("the relay's {suite} crypto line has no numeric tag"))?;
    Ok((port, tag, key))
}

fn random_key(profile: Profile) -> MasterKey {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    getrandom_04::fill(&mut raw).expect("the OS random source works");
    MasterKey::from_concatenated(profile, &raw).expect("lengths from the profile")
}

/// A leg's SDP on `ip`: SDES with its crypto line, or plain.
fn leg_sdp(ip: Ipv4Addr, port: u16, crypto: Option<(u32, Profile, &MasterKey)>) -> String {
    let (proto, line) = match crypto {
        Some((tag, profile, key)) => (
            "RTP/SAVP",
            format!(
                "a=crypto:{tag} {} {}\r\n",
                profile.sdp_name(),
                key.to_sdes_inline()
            ),
        ),
        None => ("RTP/AVP", String::new()),
    };
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
         m=audio {port} {proto} 0\r\na=rtpmap:0 PCMU/8000\r\n{line}a=sendrecv\r\n"
    )
}

/// A leg's RTP socket and its RTCP socket on the port after it, bound as a phone binds them: a
/// relay sends its reports to the RTP port + 1, which would otherwise be any socket's that
/// happens to have it (another leg's, or one of the relay's own ports, which then drops them as
/// coming from a stranger).
fn bind_rtp_pair(local: Ipv4Addr) -> anyhow::Result<(UdpSocket, UdpSocket)> {
    for _ in 0..1000 {
        let rtp = UdpSocket::bind((local, 0))?;
        let Some(next) = rtp.local_addr()?.port().checked_add(1) else {
            continue;
        };
        match UdpSocket::bind((local, next)) {
            Ok(rtcp) => return Ok((rtp, rtcp)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e).context("binding a leg's RTCP port"),
        }
    }
    bail!("no free pair of ports on {local} for a leg's RTP and RTCP")
}

/// One leg of a call: its socket, where it sends, its keys (none for plain RTP).
pub struct CallLeg {
    socket: mio::net::UdpSocket,
    /// The RTCP port after `socket`'s, held so that the relay's reports land here (not read).
    _rtcp: UdpSocket,
    relay: SocketAddr,
    tx: Option<Context>,
    rx: Option<Context>,
    ssrc: u32,
    seq: u16,
    ts: u32,
    next_send: Instant,
    /// Packets sent.
    pub sent: u64,
    /// What arrived.
    pub stream: StreamRx,
    /// Packets that failed to unprotect.
    pub rx_errors: u64,
    /// RTCP that arrived at the RTP port (a relay's reports, should it send them there):
    /// counted apart, never as media.
    pub rtcp_received: u64,
    buf: Vec<u8>,
}

fn context(key: MasterKey, outbound: bool) -> anyhow::Result<Context> {
    let p = Policy::new(key);
    Context::new(if outbound {
        p.any_outbound()
    } else {
        p.any_inbound()
    })
    .map_err(|e| anyhow!("SRTP context: {e}"))
}

/// The call-id of call `c` of a run.
fn call_id(c: usize) -> String {
    format!("secrelay-lab-{c}-{}", std::process::id())
}

/// Creates `calls` calls through a relay's ng socket, keyed as `keying` says, their legs'
/// sockets on `local` and the relay's media on `relay`.
pub fn create_calls(
    ng: &mut Ng,
    calls: usize,
    keying: Keying,
    (local, relay): (Ipv4Addr, Ipv4Addr),
) -> anyhow::Result<Vec<CallLeg>> {
    let mut legs = Vec::with_capacity(calls * 2);
    let now = Instant::now();
    for c in 0..calls {
        let (a, a_rtcp) = bind_rtp_pair(local)?;
        let (b, b_rtcp) = bind_rtp_pair(local)?;
        let call_id = call_id(c);
        let keys = match keying {
            Keying::Sdes { caller, callee } => {
                Some(((caller, random_key(caller)), (callee, random_key(callee))))
            }
            Keying::Plain => None,
        };
        let caller_sdp = leg_sdp(
            local,
            a.local_addr()?.port(),
            keys.as_ref().map(|((p, k), _)| (1, *p, k)),
        );
        let offer = ng.call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s(&call_id)),
            ("from-tag".into(), s("caller")),
            ("sdp".into(), s(&caller_sdp)),
        ])?;
        let to_callee = offer
            .get("sdp")
            .ok_or_else(|| anyhow!("offer reply without sdp"))?;
        // The relay offers the callee every suite it has, with keys of its own; the callee
        // picks another suite than the caller's, so every packet is decrypted with one suite
        // and key and encrypted with another.
        let (port_b, callee_crypto) = match &keys {
            Some((_, (p, _))) => {
                let (port, tag, key) = sdp_port_and_crypto(to_callee, p.sdp_name())?;
                (port, Some((tag, key)))
            }
            None => (sdp_port(to_callee)?, None),
        };
        let callee_sdp = leg_sdp(
            local,
            b.local_addr()?.port(),
            keys.as_ref()
                .zip(callee_crypto.as_ref())
                .map(|((_, (p, k)), (tag, _))| (*tag, *p, k)),
        );
        let answer = ng.call(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s(&call_id)),
            ("from-tag".into(), s("caller")),
            ("to-tag".into(), s("callee")),
            ("sdp".into(), s(&callee_sdp)),
        ])?;
        let to_caller = answer
            .get("sdp")
            .ok_or_else(|| anyhow!("answer reply without sdp"))?;
        let contexts = match (keys, callee_crypto) {
            (Some(((pa, ka), (pb, kb))), Some((_, key_to_b))) => {
                let (port_a, _, key_to_a) = sdp_port_and_crypto(to_caller, pa.sdp_name())?;
                let rx_a = MasterKey::from_sdes_inline(pa, &key_to_a)
                    .map_err(|e| anyhow!("the relay's key for the caller: {e}"))?;
                let rx_b = MasterKey::from_sdes_inline(pb, &key_to_b)
                    .map_err(|e| anyhow!("the relay's key for the callee: {e}"))?;
                (
                    port_a,
                    [
                        Some((context(ka, true)?, context(rx_a, false)?)),
                        Some((context(kb, true)?, context(rx_b, false)?)),
                    ],
                )
            }
            _ => (sdp_port(to_caller)?, [None, None]),
        };
        let (port_a, [ctx_a, ctx_b]) = contexts;
        let pairs = [
            (a, a_rtcp, port_a, ctx_a, 0u32),
            (b, b_rtcp, port_b, ctx_b, 1),
        ];
        for (sock, rtcp, port, ctx, i) in pairs {
            sock.set_nonblocking(true)?;
            let phase = Duration::from_micros(((c as u64) * 7919 + u64::from(i) * 10_007) % 20_000);
            let (tx, rx) = ctx.unzip();
            legs.push(CallLeg {
                socket: mio::net::UdpSocket::from_std(sock),
                _rtcp: rtcp,
                relay: SocketAddr::from((relay, port)),
                tx,
                rx,
                ssrc: 0x5000_0000 + (c as u32) * 2 + i,
                seq: 1,
                ts: 0,
                next_send: now + phase,
                sent: 0,
                stream: StreamRx::default(),
                rx_errors: 0,
                rtcp_received: 0,
                buf: vec![0u8; 2048],
            });
        }
    }
    Ok(legs)
}

/// Ends the calls.
pub fn delete_calls(ng: &mut Ng, calls: usize) {
    for c in 0..calls {
        let _ = ng.call(vec![
            ("command".into(), s("delete")),
            ("call-id".into(), s(&call_id(c))),
            ("from-tag".into(), s("caller")),
        ]);
    }
}

impl CallLeg {
    fn send(&mut self) {
        let mut pkt = [0u8; 12 + 160 + 16];
        pkt[0] = 0x80;
        pkt[2..4].copy_from_slice(&self.seq.to_be_bytes());
        pkt[4..8].copy_from_slice(&self.ts.to_be_bytes());
        pkt[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        pkt[12..172].fill(0xff);
        let n = match self.tx.as_mut() {
            Some(tx) => tx.protect_rtp(&mut pkt, 172).ok(),
            None => Some(172),
        };
        if let Some(n) = n {
            let _ = self.socket.send_to(&pkt[..n], self.relay);
            self.sent += 1;
        }
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(160);
    }

    fn readable(&mut self) -> io::Result<()> {
        loop {
            let n = match self.socket.recv_from(&mut self.buf) {
                Ok((n, _)) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            // RTCP (packet types 200-207, RFC 5761) before any key is tried: another leg's
            // SRTCP is not this leg's failure.
            if n >= 8 && (200..=207).contains(&self.buf[1]) {
                self.rtcp_received += 1;
                continue;
            }
            let opened = match self.rx.as_mut() {
                Some(rx) => rx.unprotect_rtp(&mut self.buf, n),
                None => Ok(n),
            };
            match opened {
                Ok(len) => match RtpHeader::parse(&self.buf[..len]) {
                    Ok(h) => self.stream.on_seq(h.sequence()),
                    Err(_) => self.rx_errors += 1,
                },
                Err(_) => self.rx_errors += 1,
            }
        }
    }
}

/// Drives the legs for `duration` after a one-second warm-up, each sending every 20 ms; calls
/// `at_start` when the warm-up ends. Returns the seconds measured after that instant and the
/// packets the legs had received by then.
pub fn drive(
    legs: &mut [CallLeg],
    duration: Duration,
    mut at_start: impl FnMut(),
) -> anyhow::Result<(f64, u64)> {
    let mut poll = Poll::new()?;
    for (i, l) in legs.iter_mut().enumerate() {
        poll.registry()
            .register(&mut l.socket, Token(i), Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(1024);
    let begin = Instant::now();
    let warm = begin + Duration::from_secs(1);
    let end = warm + duration;
    let mut started = None;
    let mut received_at_start = 0;
    loop {
        let now = Instant::now();
        if started.is_none() && now >= warm {
            received_at_start = legs.iter().map(|l| l.stream.received).sum();
            at_start();
            started = Some(now);
        }
        if now >= end {
            break;
        }
        let next = legs.iter().map(|l| l.next_send).min().unwrap_or(end);
        poll.poll(
            &mut events,
            Some(
                next.saturating_duration_since(now)
                    .min(Duration::from_millis(5)),
            ),
        )?;
        for ev in events.iter() {
            if let Some(l) = legs.get_mut(ev.token().0) {
                l.readable()?;
            }
        }
        let now = Instant::now();
        for l in legs.iter_mut() {
            if now >= l.next_send {
                l.send();
                l.next_send += Duration::from_millis(20);
                if now > l.next_send + Duration::from_millis(100) {
                    // Far behind (an overloaded machine): skip rather than burst.
                    l.next_send = now;
                }
            }
        }
    }
    // The last packets in flight.
    let drain_end = Instant::now() + Duration::from_millis(50);
    while Instant::now() < drain_end {
        poll.poll(&mut events, Some(Duration::from_millis(5)))?;
        for ev in events.iter() {
            if let Some(l) = legs.get_mut(ev.token().0) {
                l.readable()?;
            }
        }
    }
    Ok((
        started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
        received_at_start,
    ))
}
