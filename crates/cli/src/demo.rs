//! `secrelay demo`: simulated secure calls relayed over loopback UDP.
//!
//! Until the gateway (`secrelay serve`) lands, the demo shows the SRTP engine doing a relay's
//! work for real: participants send G.711 (20 ms, 172-byte RTP) protected with their own key
//! K1; a relay thread on its own UDP socket unprotects each packet with the sender's key and
//! protects it again with the receiver's key K2 (the scheme of the teleconference study), and
//! the receiver unprotects it. An attacker injects a replayed and a forged packet per call
//! every second; the relay must drop and count them. Latency is measured end to end through
//! both sockets and all three SRTP operations.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Args;
use secrelay_srtp::{Context, Error as SrtpError, MasterKey, Policy, Profile};

/// Flags of `secrelay demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of two-party calls (each has two participants sending 50 packets/s).
    #[arg(long, default_value_t = 20)]
    pub calls: u32,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// SRTP profile for every leg.
    #[arg(long, default_value = "AES_CM_128_HMAC_SHA1_80")]
    pub profile: String,
}

const PACKET_INTERVAL: Duration = Duration::from_millis(20);
const PAYLOAD: usize = 160;

#[derive(Default)]
struct Stats {
    sent: AtomicU64,
    relayed: AtomicU64,
    received: AtomicU64,
    relay_auth_failed: AtomicU64,
    relay_replayed: AtomicU64,
    relay_other: AtomicU64,
    receiver_failed: AtomicU64,
    injected: AtomicU64,
    srtp_ns: AtomicU64,
    srtp_ops: AtomicU64,
}

fn key(profile: Profile) -> Result<MasterKey> {
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    getrandom::fill(&mut raw).map_err(|e| anyhow!("no randomness from the OS: {e}"))?;
    MasterKey::from_concatenated(profile, &raw).map_err(|e| anyhow!("{e}"))
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs the demo.
pub fn run(a: &DemoArgs) -> Result<()> {
    let profile: Profile = a.profile.parse().map_err(|e| anyhow!("--profile: {e}"))?;
    if a.calls == 0 || a.calls > 5000 {
        bail!("--calls {}: must be 1..=5000", a.calls);
    }
    let n = (a.calls * 2) as usize;
    let ssrc = |i: usize| 0x5ec0_0000u32 + i as u32;
    // Participant i sends with K1[i]; the relay re-protects toward participant i with K2[i].
    let k1: Vec<MasterKey> = (0..n).map(|_| key(profile)).collect::<Result<_>>()?;
    let k2: Vec<MasterKey> = (0..n).map(|_| key(profile)).collect::<Result<_>>()?;
    let peer = |i: usize| i ^ 1;

    let relay_sock = UdpSocket::bind("127.0.0.1:0").context("binding the relay's UDP socket")?;
    let client_sock =
        UdpSocket::bind("127.0.0.1:0").context("binding the participants' UDP socket")?;
    relay_sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    client_sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let relay_addr = relay_sock.local_addr()?;
    let client_addr: SocketAddr = client_sock.local_addr()?;

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::<u32>::with_capacity(1 << 16)));
    let start = Instant::now();

    // The relay: one inbound context per sender (K1), one outbound per receiver (K2).
    let relay = {
        let stats = stats.clone();
        let stop = stop.clone();
        let mut inbound: Vec<Context> = k1
            .iter()
            .map(|k| Context::new(Policy::new(k.clone()).any_inbound()))
            .collect::<Result<_, _>>()?;
        let mut outbound: Vec<Context> = k2
            .iter()
            .map(|k| Context::new(Policy::new(k.clone()).any_outbound()))
            .collect::<Result<_, _>>()?;
        let by_ssrc: HashMap<u32, usize> = (0..n).map(|i| (ssrc(i), i)).collect();
        thread::Builder::new().name("relay".into()).spawn(move || {
            let mut buf = [0u8; 1500];
            while !stop.load(Ordering::Relaxed) {
                let Ok((len, _from)) = relay_sock.recv_from(&mut buf) else {
                    continue;
                };
                let Some(&from) = (len >= 12)
                    .then(|| u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]))
                    .and_then(|s| by_ssrc.get(&s))
                else {
                    stats.relay_other.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let t = Instant::now();
                let r = inbound[from]
                    .unprotect_rtp(&mut buf, len)
                    .and_then(|m| outbound[peer(from)].protect_rtp(&mut buf, m));
                stats
                    .srtp_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                stats.srtp_ops.fetch_add(1, Ordering::Relaxed);
                match r {
                    Ok(m) => {
                        if relay_sock.send_to(&buf[..m], client_addr).is_ok() {
                            stats.relayed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(SrtpError::AuthFailed) => {
                        stats.relay_auth_failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(SrtpError::ReplayDuplicate | SrtpError::ReplayOld) => {
                        stats.relay_replayed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        stats.relay_other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })?
    };

    // The receivers: participant i unprotects what the relay sends it with K2[i].
    let receiver = {
        let stats = stats.clone();
        let stop = stop.clone();
        let latencies = latencies.clone();
        let sock = client_sock.try_clone()?;
        let mut rx: Vec<Context> = k2
            .iter()
            .map(|k| Context::new(Policy::new(k.clone()).any_inbound()))
            .collect::<Result<_, _>>()?;
        let by_ssrc: HashMap<u32, usize> = (0..n).map(|i| (ssrc(i), peer(i))).collect();
        thread::Builder::new()
            .name("receivers".into())
            .spawn(move || {
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((len, _)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    let to = (len >= 12)
                        .then(|| u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]))
                        .and_then(|s| by_ssrc.get(&s).copied());
                    match to.map(|to| rx[to].unprotect_rtp(&mut buf, len)) {
                        Some(Ok(m)) if m >= 20 => {
                            let sent_ns =
                                u64::from_be_bytes(buf[12..20].try_into().unwrap_or_default());
                            let now_ns = start.elapsed().as_nanos() as u64;
                            let us =
                                (now_ns.saturating_sub(sent_ns) / 1000).min(u32::MAX as u64) as u32;
                            if let Ok(mut l) = latencies.lock() {
                                l.push(us);
                            }
                            stats.received.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            stats.receiver_failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })?
    };

    // The senders, paced at 20 ms, plus an attacker once a second.
    let mut tx: Vec<Context> = k1
        .iter()
        .map(|k| Context::new(Policy::new(k.clone()).any_outbound()))
        .collect::<Result<_, _>>()?;
    let mut last_sent: Vec<Vec<u8>> = vec![Vec::new(); n];
    let ticks = a.duration * 1000 / PACKET_INTERVAL.as_millis() as u64;
    let tty = std::io::stderr().is_terminal();
    eprintln!(
        "secrelay demo: {} calls ({} participants), {profile}, G.711 20 ms over loopback UDP, relay re-protects per receiver, {} s",
        a.calls, n, a.duration
    );
    let mut buf = vec![0u8; 12 + PAYLOAD + 16];
    for tick in 0..ticks {
        let due = start + PACKET_INTERVAL * tick as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        for (i, ctx) in tx.iter_mut().enumerate() {
            buf[0] = 0x80;
            buf[1] = 0; // PCMU
            buf[2..4].copy_from_slice(&(tick as u16).to_be_bytes());
            buf[4..8].copy_from_slice(&((tick * 160) as u32).to_be_bytes());
            buf[8..12].copy_from_slice(&ssrc(i).to_be_bytes());
            buf[12..20].copy_from_slice(&(start.elapsed().as_nanos() as u64).to_be_bytes());
            buf[20..12 + PAYLOAD].fill(0xff); // PCMU silence
            let m = ctx
                .protect_rtp(&mut buf, 12 + PAYLOAD)
                .map_err(|e| anyhow!("protect: {e}"))?;
            client_sock.send_to(&buf[..m], relay_addr)?;
            stats.sent.fetch_add(1, Ordering::Relaxed);
            if tick % 50 == 25 {
                // The attacker: a replay of the previous packet and a forged one.
                let _ = client_sock.send_to(&last_sent[i], relay_addr);
                let mut forged = buf[..m].to_vec();
                forged[30] ^= 0x40;
                forged[2] = forged[2].wrapping_add(1);
                let _ = client_sock.send_to(&forged, relay_addr);
                stats.injected.fetch_add(2, Ordering::Relaxed);
            }
            last_sent[i].clear();
            last_sent[i].extend_from_slice(&buf[..m]);
        }
        if tick % 50 == 49 {
            let line = progress(&stats, &latencies, start.elapsed());
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
        }
    }
    thread::sleep(Duration::from_millis(200)); // let the last packets land
    stop.store(true, Ordering::Relaxed);
    relay.join().map_err(|_| anyhow!("relay thread panicked"))?;
    receiver
        .join()
        .map_err(|_| anyhow!("receiver thread panicked"))?;
    if tty {
        eprintln!();
    }
    summary(&stats, &latencies, a, profile)
}

fn progress(stats: &Stats, lat: &Mutex<Vec<u32>>, t: Duration) -> String {
    let (p50, p99) = {
        let l = lat.lock().map(|l| l.clone()).unwrap_or_default();
        let tail: Vec<u32> = l.iter().rev().take(5000).copied().collect();
        let mut s = tail;
        s.sort_unstable();
        (percentile(&s, 0.5), percentile(&s, 0.99))
    };
    format!(
        "[{:>4.1}s] sent {} relayed {} received {} | dropped at relay: {} forged, {} replayed | latency p50 {} µs p99 {} µs",
        t.as_secs_f64(),
        stats.sent.load(Ordering::Relaxed),
        stats.relayed.load(Ordering::Relaxed),
        stats.received.load(Ordering::Relaxed),
        stats.relay_auth_failed.load(Ordering::Relaxed),
        stats.relay_replayed.load(Ordering::Relaxed),
        p50,
        p99
    )
}

fn summary(stats: &Stats, lat: &Mutex<Vec<u32>>, a: &DemoArgs, profile: Profile) -> Result<()> {
    let mut l = lat
        .lock()
        .map(|l| l.clone())
        .map_err(|_| anyhow!("latency lock poisoned"))?;
    l.sort_unstable();
    let sent = stats.sent.load(Ordering::Relaxed);
    let received = stats.received.load(Ordering::Relaxed);
    let forged = stats.relay_auth_failed.load(Ordering::Relaxed);
    let replayed = stats.relay_replayed.load(Ordering::Relaxed);
    let injected = stats.injected.load(Ordering::Relaxed);
    let ops = stats.srtp_ops.load(Ordering::Relaxed).max(1);
    println!(
        "secrelay demo summary ({} calls, {profile}, {} s)",
        a.calls, a.duration
    );
    println!("  media packets sent          {sent}");
    println!(
        "  relayed (K1 -> K2)          {}",
        stats.relayed.load(Ordering::Relaxed)
    );
    println!(
        "  received and authenticated  {received} ({:.2}% of sent)",
        100.0 * received as f64 / sent.max(1) as f64
    );
    println!("  attacker packets injected   {injected}: {forged} dropped as forged, {replayed} as replays");
    println!(
        "  other drops                 relay {}, receivers {}",
        stats.relay_other.load(Ordering::Relaxed),
        stats.receiver_failed.load(Ordering::Relaxed)
    );
    println!(
        "  relay SRTP work per packet  {:.0} ns (unprotect + protect)",
        stats.srtp_ns.load(Ordering::Relaxed) as f64 / ops as f64
    );
    println!(
        "  end-to-end latency          p50 {} µs, p90 {} µs, p99 {} µs, max {} µs",
        percentile(&l, 0.5),
        percentile(&l, 0.9),
        percentile(&l, 0.99),
        l.last().copied().unwrap_or(0)
    );
    if stats.relayed.load(Ordering::Relaxed) > sent {
        bail!("the relay forwarded more packets than were sent: attacker packets got through");
    }
    if received == 0 {
        bail!("no packet arrived");
    }
    Ok(())
}
