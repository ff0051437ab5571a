//! rtpengine beside secrelay: SDES-SRTP calls set up through rtpengine's ng control protocol
//! (bencode over UDP: `offer` and `answer`, two legs on different crypto suites so that it
//! must decrypt and re-encrypt every packet), driven at a fixed offered packet rate, with
//! rtpengine's CPU time read from `/proc` over the media window.
//!
//! Each call has two legs (caller and callee), each a UDP socket sending G.711 20 ms packets
//! (50/s) protected with its own SDES key and unprotecting what the relay sends it with the
//! key the relay announced. So a call offers 100 packets/s to the relay, and 1,000 calls offer
//! 100,000 packets/s.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use mio::{Events, Interest, Poll, Token};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::rtp::RtpHeader;

use secrelay_testkit::StreamRx;

pub use secrelay_testkit::ng::{reply_strings, Ng};
pub use secrelay_wire::bencode::Bencode;

fn s(v: &str) -> Bencode {
    Bencode::str(v)
}

/// The audio port of an SDP, and the tag and inline key of its crypto line for `suite`.
fn sdp_port_and_crypto(sdp: &str, suite: &str) -> anyhow::Result<(u16, u32, String)> {
    let port = sdp
        .lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow!("no m=audio port in rtpengine's SDP"))?;
    let (tag, key) = sdp
        .lines()
        .filter_map(|l| l.trim().strip_prefix("a=crypto:"))
        .find_map(|r| {
            let f: Vec<&str> = r.split_whitespace().collect();
            (f.len() >= 3 && f[1] == suite).then(|| (f[0].parse().ok(), f[2].to_owned()))
        })
        .ok_or_else(|| anyhow!("rtpengine's SDP has no {suite} crypto line"))?;
    let tag = tag.ok_or_else(|| anyhow!("rtpengine's {suite} crypto line has no numeric tag"))?;
    Ok((port, tag, key))
}

fn random_key(profile: Profile) -> MasterKey {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    getrandom_04::fill(&mut raw).expect("the OS random source works");
    MasterKey::from_concatenated(profile, &raw).expect("lengths from the profile")
}

fn sdes_sdp(port: u16, tag: u32, profile: Profile, key: &MasterKey) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {port} RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n\
         a=crypto:{tag} {} {}\r\na=sendrecv\r\n",
        profile.sdp_name(),
        key.to_sdes_inline()
    )
}

/// One leg of a call: its socket, where it sends, its keys.
pub struct SdesLeg {
    socket: mio::net::UdpSocket,
    relay: SocketAddr,
    tx: Context,
    rx: Context,
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
    buf: Vec<u8>,
}

/// Creates `calls` calls through rtpengine: caller on `caller_suite`, callee on
/// `callee_suite`.
pub fn create_calls(
    ng: &mut Ng,
    calls: usize,
    caller_suite: Profile,
    callee_suite: Profile,
) -> anyhow::Result<Vec<SdesLeg>> {
    let mut legs = Vec::with_capacity(calls * 2);
    let now = Instant::now();
    for c in 0..calls {
        let a = UdpSocket::bind("127.0.0.1:0")?;
        let b = UdpSocket::bind("127.0.0.1:0")?;
        let (ka, kb) = (random_key(caller_suite), random_key(callee_suite));
        let call_id = format!("secrelay-lab-{c}-{}", std::process::id());
        let offer = ng.call(vec![
            ("command".into(), s("offer")),
            ("call-id".into(), s(&call_id)),
            ("from-tag".into(), s("caller")),
            (
                "sdp".into(),
                s(&sdes_sdp(a.local_addr()?.port(), 1, caller_suite, &ka)),
            ),
        ])?;
        let to_callee = offer
            .get("sdp")
            .ok_or_else(|| anyhow!("offer reply without sdp"))?;
        // rtpengine offers the callee every suite it has, with keys of its own; the callee
        // picks another suite than the caller's, so every packet is decrypted with one suite
        // and key and encrypted with another.
        let (port_b, tag_b, key_to_b) = sdp_port_and_crypto(to_callee, callee_suite.sdp_name())?;
        let answer = ng.call(vec![
            ("command".into(), s("answer")),
            ("call-id".into(), s(&call_id)),
            ("from-tag".into(), s("caller")),
            ("to-tag".into(), s("callee")),
            (
                "sdp".into(),
                s(&sdes_sdp(b.local_addr()?.port(), tag_b, callee_suite, &kb)),
            ),
        ])?;
        let to_caller = answer
            .get("sdp")
            .ok_or_else(|| anyhow!("answer reply without sdp"))?;
        let (port_a, _, key_to_a) = sdp_port_and_crypto(to_caller, caller_suite.sdp_name())?;
        let rx_a = MasterKey::from_sdes_inline(caller_suite, &key_to_a)
            .map_err(|e| anyhow!("rtpengine's key for the caller: {e}"))?;
        let rx_b = MasterKey::from_sdes_inline(callee_suite, &key_to_b)
            .map_err(|e| anyhow!("rtpengine's key for the callee: {e}"))?;
        for (sock, port, tx, rx, i) in [(a, port_a, ka, rx_a, 0u32), (b, port_b, kb, rx_b, 1)] {
            sock.set_nonblocking(true)?;
            let phase = Duration::from_micros(((c as u64) * 7919 + u64::from(i) * 10_007) % 20_000);
            legs.push(SdesLeg {
                socket: mio::net::UdpSocket::from_std(sock),
                relay: SocketAddr::from(([127, 0, 0, 1], port)),
                tx: Context::new(Policy::new(tx).any_outbound())
                    .map_err(|e| anyhow!("SRTP context: {e}"))?,
                rx: Context::new(Policy::new(rx).any_inbound())
                    .map_err(|e| anyhow!("SRTP context: {e}"))?,
                ssrc: 0x5000_0000 + (c as u32) * 2 + i,
                seq: 1,
                ts: 0,
                next_send: now + phase,
                sent: 0,
                stream: StreamRx::default(),
                rx_errors: 0,
                buf: vec![0u8; 2048],
            });
        }
    }
    Ok(legs)
}

/// Ends the calls.
pub fn delete_calls(ng: &mut Ng, calls: usize) {
    for c in 0..calls {
        let call_id = format!("secrelay-lab-{c}-{}", std::process::id());
        let _ = ng.call(vec![
            ("command".into(), s("delete")),
            ("call-id".into(), s(&call_id)),
        ]);
    }
}

impl SdesLeg {
    fn send(&mut self) {
        let mut pkt = [0u8; 12 + 160 + 16];
        pkt[0] = 0x80;
        pkt[2..4].copy_from_slice(&self.seq.to_be_bytes());
        pkt[4..8].copy_from_slice(&self.ts.to_be_bytes());
        pkt[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        pkt[12..172].fill(0xff);
        if let Ok(n) = self.tx.protect_rtp(&mut pkt, 172) {
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
            match self.rx.unprotect_rtp(&mut self.buf, n) {
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
    legs: &mut [SdesLeg],
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
