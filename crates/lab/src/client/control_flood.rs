//! `secrelay lab flood control`: the gateway's control surfaces under abuse, each part with
//! the statuses, closes and counters seen.
//!
//! * **Huge bodies**: offers far above `max_body_bytes`, declared (`Content-Length`) and
//!   streamed (`Transfer-Encoding: chunked`): refused with 413 before they are read.
//! * **Slow headers** (slowloris): connections that trickle a request's headers, a byte at a
//!   time, each byte well within `http_request_timeout_secs` of the last; and **slow bodies**,
//!   complete headers then a body trickled likewise. Both must be cut off once the timeout has
//!   passed since the request began, whatever the trickle; meanwhile `GET /healthz` from a
//!   legitimate client is answered.
//! * **Idle connections** beyond `max_connections`, from several source addresses: the excess
//!   is closed at once, the rest once the timeout passes.
//! * **One source** holding idle connections past `max_connections_per_source`: its excess is
//!   refused at once with 429 while other sources are served.
//! * **A request flood** from one source past `requests_per_source`: answered 429 with
//!   `Retry-After` beyond its bucket while other sources are served.
//! * **Half-open TLS** on the HTTPS port (when the gateway serves it): a record header and
//!   nothing more; cut off after `tls_handshake_timeout_secs` and counted by reason.
//! * **ng**: bencode garbage, a huge dictionary, lists nested past the decoder's limit and
//!   unknown commands at the ng control socket at a rate, while a legitimate client pings it:
//!   every one answered with an error and counted, the pings answered, the memory flat; and
//!   commands from a source outside `ng_allow`, dropped unanswered and counted.
//!
//! All of it is plain TCP and UDP from this process (std sockets): the bytes are the attack.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use serde::Serialize;

use super::flood::{
    kernel_udp_drops, load_average, metrics, source_sockets, Flood, FloodStream, SentRow,
};
use super::load::proc_sample;
use secrelay_testkit::Signaling;

/// What to run.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// The gateway's plain-HTTP signaling (base URL).
    pub signaling: Signaling,
    /// Its HTTPS address, for the half-open TLS part (skipped without it).
    pub https: Option<SocketAddr>,
    /// Its ng control socket, for the ng part (skipped without it).
    pub ng: Option<SocketAddr>,
    /// The gateway's process id, for its memory.
    pub server_pid: Option<u32>,
    /// Its `http_request_timeout_secs` (and `tls_handshake_timeout_secs`): how long a slow
    /// client should last at most.
    pub timeout_secs: f64,
    /// Connections of each slow kind (headers, body, half-open TLS), and idle connections.
    pub connections: usize,
    /// Idle connections beyond those, to pass `max_connections`.
    pub idle_connections: usize,
    /// Huge-body requests of each kind.
    pub big_requests: usize,
    /// Bytes each huge body declares (or streams).
    pub big_body_bytes: usize,
    /// The gateway's `max_connections_per_source`.
    pub per_source_connections: usize,
    /// The gateway's `requests_per_source` (0: the request-flood part is skipped).
    pub requests_per_source: f64,
    /// The gateway's `request_burst_per_source`.
    pub request_burst: u32,
    /// The gateway's `ng_allow` leaves out this address: commands from it must go unanswered
    /// (part skipped without one).
    pub ng_outsider: Option<IpAddr>,
    /// ng flood datagrams per second.
    pub ng_rate: u64,
    /// The credentials part (forged tokens, joins with and without a token); skipped without.
    pub credentials: Option<super::credentials::CredentialOptions>,
    /// Seconds of each ng window (unloaded, flood).
    pub ng_secs: f64,
}

/// Statuses (or what happened instead) and how many of each.
pub type Tally = Vec<(String, u64)>;

fn tally(t: &mut Tally, what: String) {
    match t.iter_mut().find(|e| e.0 == what) {
        Some(e) => e.1 += 1,
        None => t.push((what, 1)),
    }
}

/// Slow clients of one kind: when and how the gateway ended them.
#[derive(Debug, Clone, Serialize)]
pub struct SlowRow {
    /// `slow_headers`, `slow_body`, `idle`, `tls_half_open`.
    pub kind: &'static str,
    /// Connections opened.
    pub connections: usize,
    /// What ended each: the status line the gateway sent (`408`, …), `closed` (the gateway
    /// closed without a word), `reset`, or `open` (still open when the lab gave up, at
    /// three times the timeout plus 2 s).
    pub ended: Tally,
    /// Seconds from the connection to its end: min, median, max, over those the gateway ended.
    pub ended_after_secs: Option<[f64; 3]>,
    /// `GET /healthz` from a legitimate client while they were open: status (or error) tally.
    pub healthz: Tally,
    /// The same once they had all ended (or the lab gave up).
    pub healthz_after: Option<String>,
}

/// The ng part.
#[derive(Debug, Clone, Serialize)]
pub struct NgRow {
    /// Window name: `unloaded` or `flood`.
    pub name: &'static str,
    /// Seconds.
    pub secs: f64,
    /// Pings sent by the legitimate client, answered, and their round trip p50/p99 in µs.
    pub pings: [u64; 2],
    /// Round trip p50, p99 (µs).
    pub ping_rtt_us: Option<[f64; 2]>,
    /// What the flood sent.
    pub flood: Vec<SentRow>,
    /// `secrelay_ng_requests_total` by result during the window (`ok`, `error`). A message
    /// that repeats a cookie from the same source gets the reply cached for it (rtpengine's
    /// rule for retransmissions), counted as `ok` even when that reply is an error: the flood
    /// reuses its 4,096 messages from 16 sockets, so past 4,096 datagrams some are repeats.
    pub gateway_requests: [f64; 2],
    /// Flood datagrams the gateway answered (its requests less the pings it answered), and of
    /// those, answered with an error computed afresh (not from the reply cache).
    pub flood_answered: [f64; 2],
    /// Datagrams the kernel dropped at the ng socket (its receive buffer full).
    pub kernel_drops: Option<u64>,
    /// Gateway resident memory at the start and the end.
    pub rss_bytes: Option<[u64; 2]>,
}

/// One source asking as fast as it can, over one keep-alive connection.
#[derive(Debug, Clone, Serialize)]
pub struct RequestFloodRow {
    /// The flooding source address.
    pub source: IpAddr,
    /// Seconds it asked for.
    pub secs: f64,
    /// The gateway's `requests_per_source` and `request_burst_per_source`.
    pub limit: [f64; 2],
    /// Answers by status (or what happened instead).
    pub answers: Tally,
    /// Of the 429s, those that carried a `Retry-After`.
    pub retry_after: u64,
    /// `GET /healthz` from another source meanwhile.
    pub healthz: Tally,
}

/// ng commands from a source outside `ng_allow`.
#[derive(Debug, Clone, Serialize)]
pub struct NgOutsiderRow {
    /// The source address.
    pub source: IpAddr,
    /// Commands sent (`ping`).
    pub sent: u64,
    /// Answers that came back (must be none).
    pub answered: u64,
    /// `secrelay_ng_requests_total{result="not_allowed"}` during the part.
    pub not_allowed: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    /// The load average when the run started.
    pub load_average: Option<[f64; 3]>,
    /// The timeout the slow clients are measured against, s.
    pub timeout_secs: f64,
    /// Huge bodies: kind (`declared`, `chunked`) → status tally.
    pub big_bodies: Vec<(String, Tally)>,
    /// The slow clients.
    pub slow: Vec<SlowRow>,
    /// `secrelay_http_connections_refused_total`, `secrelay_http_connections_idle_closed_total`,
    /// `secrelay_http_source_limited_total` by what (`source_connections`, `source_requests`)
    /// and `secrelay_tls_handshake_failures_total` by reason, during the slow parts and the
    /// request flood.
    pub gateway_refused: Vec<(String, f64)>,
    /// One source's request flood (when the gateway limits requests per source).
    pub request_flood: Option<RequestFloodRow>,
    /// The ng windows.
    pub ng: Vec<NgRow>,
    /// ng from outside `ng_allow` (when the lab knows an address it leaves out).
    pub ng_outsider: Option<NgOutsiderRow>,
    /// Gateway resident memory before and after everything.
    pub rss_bytes: Option<[u64; 2]>,
    /// Forged tokens and joins with tokens, when asked for.
    pub credentials: Option<super::credentials::CredentialReport>,
}

fn http_addr(s: &Signaling) -> anyhow::Result<SocketAddr> {
    let rest = s.base_url.strip_prefix("http://").ok_or_else(|| {
        anyhow!(
            "{}: the control flood needs the plain-HTTP signaling (http://host:port)",
            s.base_url
        )
    })?;
    rest.trim_end_matches('/')
        .parse()
        .with_context(|| format!("{}: give http://IP:PORT", s.base_url))
}

/// A TCP connection to `addr` from `source` (any port), or from the default address.
fn connect_from(source: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(ip) = source else {
        return TcpStream::connect_timeout(&addr, Duration::from_secs(5));
    };
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    Ok(s.into())
}

/// Loopback addresses `127.0.0.first` onwards, `n` of them: sources of their own for the parts
/// that need more than one client address (every 127/8 address is this host's).
fn loopback_sources(first: u8, n: usize) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, first.wrapping_add(i as u8))))
        .collect()
}

/// The status code of the first response line in `buf`, if one is there.
fn status_of(buf: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(buf.get(..buf.len().min(64))?).ok()?;
    let code = text.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    Some(code.to_string())
}

/// One request with a huge body: the headers, then the body as long as the gateway reads it;
/// the status it answered, or what happened.
fn big_body(source: IpAddr, addr: SocketAddr, chunked: bool, bytes: usize) -> String {
    let Ok(mut c) = connect_from(Some(source), addr) else {
        return "connect_failed".into();
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = c.set_write_timeout(Some(Duration::from_secs(5)));
    let head = if chunked {
        "POST /whip/flood-big HTTP/1.1\r\nHost: flood\r\nContent-Type: application/sdp\r\nTransfer-Encoding: chunked\r\n\r\n".to_string()
    } else {
        format!("POST /whip/flood-big HTTP/1.1\r\nHost: flood\r\nContent-Type: application/sdp\r\nContent-Length: {bytes}\r\n\r\n")
    };
    if c.write_all(head.as_bytes()).is_err() {
        return "write_failed".into();
    }
    let chunk = vec![b'a'; 16 * 1024];
    let mut sent = 0;
    let mut buf = [0u8; 512];
    while sent < bytes {
        let r = if chunked {
            c.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .and_then(|_| c.write_all(&chunk))
                .and_then(|_| c.write_all(b"\r\n"))
        } else {
            c.write_all(&chunk)
        };
        if r.is_err() {
            // The gateway stopped reading: its answer, if it sent one, is waiting.
            break;
        }
        sent += chunk.len();
    }
    if chunked && sent >= bytes {
        let _ = c.write_all(b"0\r\n\r\n");
    }
    match c.read(&mut buf) {
        Ok(0) => "closed".into(),
        Ok(n) => status_of(&buf[..n]).unwrap_or_else(|| "not_http".into()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            "no_answer".into()
        }
        Err(_) => "reset".into(),
    }
}

/// A slow client: `first` bytes at once, then one byte of `trickle` at a time (none when
/// `trickle` is empty).
struct Slow {
    c: TcpStream,
    opened: Instant,
    trickle: &'static [u8],
    next: usize,
    ended: Option<(String, f64)>,
    /// `first` was a whole request: its answer does not end the connection.
    complete: bool,
    /// The status that request got.
    answered: Option<String>,
}

fn open_slow(
    source: Option<IpAddr>,
    addr: SocketAddr,
    first: &[u8],
    trickle: &'static [u8],
) -> Option<Slow> {
    let mut c = connect_from(source, addr).ok()?;
    let opened = Instant::now();
    if !first.is_empty() {
        let _ = c.write_all(first);
    }
    c.set_nonblocking(true).ok()?;
    Some(Slow {
        c,
        opened,
        trickle,
        next: 0,
        ended: None,
        complete: first.ends_with(b"\r\n\r\n") && first.starts_with(b"GET "),
        answered: None,
    })
}

/// Runs `n` slow clients, each sending a byte of its trickle every `every`, until the gateway
/// has ended every one or `give_up` passes; a legitimate client asks for `/healthz` every
/// 200 ms meanwhile. The clients take their source addresses from `sources` in turn (the
/// default address when it is empty).
#[allow(clippy::too_many_arguments)]
fn run_slow(
    kind: &'static str,
    addr: SocketAddr,
    sources: &[IpAddr],
    n: usize,
    first: &[u8],
    trickle: &'static [u8],
    (every, give_up): (Duration, Duration),
    healthz: Option<&Signaling>,
) -> SlowRow {
    let mut conns: Vec<Slow> = Vec::new();
    let mut ended = Tally::new();
    for i in 0..n {
        let source = (!sources.is_empty()).then(|| sources[i % sources.len()]);
        match open_slow(source, addr, first, trickle) {
            Some(s) => conns.push(s),
            None => tally(&mut ended, "connect_failed".into()),
        }
    }
    let start = Instant::now();
    let mut next_trickle = start + every;
    let mut next_health = start;
    let mut health = Tally::new();
    let mut buf = [0u8; 256];
    while start.elapsed() < give_up && conns.iter().any(|s| s.ended.is_none()) {
        let now = Instant::now();
        for s in conns.iter_mut().filter(|s| s.ended.is_none()) {
            let end = match s.c.read(&mut buf) {
                Ok(0) => Some(match s.answered.take() {
                    Some(status) => format!("{status} then closed"),
                    None => "closed".to_string(),
                }),
                // The answer to a complete request: the connection goes on (keep-alive).
                Ok(n) if s.complete && s.answered.is_none() => {
                    s.answered = status_of(&buf[..n]);
                    None
                }
                Ok(_) if s.complete => None,
                Ok(n) => Some(status_of(&buf[..n]).unwrap_or_else(|| "answered".into())),
                Err(e) if e.kind() == ErrorKind::WouldBlock => None,
                Err(_) => Some("reset".to_string()),
            };
            if let Some(e) = end {
                s.ended = Some((e, s.opened.elapsed().as_secs_f64()));
            }
        }
        if now >= next_trickle {
            next_trickle = now + every;
            for s in conns.iter_mut().filter(|s| s.ended.is_none()) {
                if let Some(b) = s.trickle.get(s.next % s.trickle.len().max(1)) {
                    if s.c.write_all(&[*b]).is_err() {
                        s.ended = Some(("reset".into(), s.opened.elapsed().as_secs_f64()));
                    }
                    s.next += 1;
                }
            }
        }
        if let Some(sig) = healthz.filter(|_| now >= next_health) {
            next_health = now + Duration::from_millis(200);
            tally(&mut health, health_check(sig));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut times: Vec<f64> = Vec::new();
    for s in &conns {
        match &s.ended {
            Some((e, t)) => {
                tally(&mut ended, e.clone());
                times.push(*t);
            }
            None => tally(
                &mut ended,
                match &s.answered {
                    Some(status) => format!("{status} then open"),
                    None => "open".into(),
                },
            ),
        }
    }
    times.sort_by(f64::total_cmp);
    let healthz_after = healthz.map(health_check);
    SlowRow {
        kind,
        connections: n,
        ended,
        ended_after_secs: (!times.is_empty())
            .then(|| [times[0], times[times.len() / 2], times[times.len() - 1]]),
        healthz: health,
        healthz_after,
    }
}

/// One source asks for `/healthz` as fast as one keep-alive connection goes, for twice the
/// time its burst lasts at the limit (at least a second); another source asks every 200 ms.
fn request_flood(
    o: &ControlOptions,
    addr: SocketAddr,
    source: IpAddr,
) -> anyhow::Result<RequestFloodRow> {
    let secs = (2.0 * f64::from(o.request_burst) / o.requests_per_source).clamp(1.0, 10.0);
    let mut answers = Tally::new();
    let mut healthz = Tally::new();
    let mut retry_after = 0;
    let mut c = connect_from(Some(source), addr)
        .with_context(|| format!("connecting from {source} to {addr}"))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    let start = Instant::now();
    let mut next_health = start;
    let mut buf = vec![0u8; 4096];
    while start.elapsed().as_secs_f64() < secs {
        if c.write_all(b"GET /healthz HTTP/1.1\r\nHost: flood\r\n\r\n")
            .is_err()
        {
            tally(&mut answers, "write_failed".into());
            break;
        }
        // One answer: headers, then the body its Content-Length says.
        let mut got = Vec::new();
        let answer = loop {
            match c.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break None,
            }
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                break Some(head);
            }
        };
        let Some(head) = answer else {
            tally(&mut answers, "closed".into());
            break;
        };
        let status =
            status_of(head.to_ascii_uppercase().as_bytes()).unwrap_or_else(|| "not_http".into());
        if status == "429" && head.lines().any(|l| l.starts_with("retry-after:")) {
            retry_after += 1;
        }
        tally(&mut answers, status);
        if Instant::now() >= next_health {
            next_health += Duration::from_millis(200);
            tally(&mut healthz, health_check(&o.signaling));
        }
    }
    Ok(RequestFloodRow {
        source,
        secs: start.elapsed().as_secs_f64(),
        limit: [o.requests_per_source, f64::from(o.request_burst)],
        answers,
        retry_after,
        healthz,
    })
}

/// ng pings from `source`, outside `ng_allow`: none may be answered, every one counted.
fn ng_from_outside(
    o: &ControlOptions,
    ng: SocketAddr,
    source: IpAddr,
) -> anyhow::Result<NgOutsiderRow> {
    let m0 = metrics(&o.signaling)?;
    let s = UdpSocket::bind(SocketAddr::new(source, 0))
        .with_context(|| format!("binding an ng client on {source}"))?;
    let sent = 200u64;
    for i in 0..sent {
        s.send_to(format!("out{i} d7:command4:pinge").as_bytes(), ng)?;
    }
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut answered = 0;
    let mut buf = [0u8; 512];
    while s.recv_from(&mut buf).is_ok() {
        answered += 1;
    }
    let m1 = metrics(&o.signaling)?;
    let n = "secrelay_ng_requests_total{result=\"not_allowed\"}";
    Ok(NgOutsiderRow {
        source,
        sent,
        answered,
        not_allowed: m1.get(n) - m0.get(n),
    })
}

/// `GET /healthz`: the status, or the error.
fn health_check(sig: &Signaling) -> String {
    let url = format!("{}/healthz", sig.base_url);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .http_status_as_error(false)
        .build()
        .into();
    match agent.get(&url).call() {
        Ok(r) => r.status().as_u16().to_string(),
        Err(e) => format!("error: {}", short(&e.to_string())),
    }
}

fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

/// ng messages that must each be answered with an error: bencode garbage, a dictionary of
/// thousands of keys (about 60 kB), lists nested past the decoder's depth limit, unknown
/// commands; each under its own cookie (the reply cache keys on it).
pub fn ng_abuse(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut m = format!("flood{i} ").into_bytes();
            match i % 4 {
                0 => {
                    let mut junk = vec![0u8; 40 + i % 200];
                    getrandom_04::fill(&mut junk).expect("the OS random source works");
                    // Never a valid start of a dictionary.
                    junk[0] = b'x';
                    m.extend(junk);
                }
                1 => {
                    m.push(b'd');
                    let mut k = 0;
                    while m.len() < 60_000 {
                        m.extend(format!("6:k{k:05}3:val").as_bytes());
                        k += 1;
                    }
                    m.push(b'e');
                }
                2 => {
                    m.extend(b"d7:command".iter());
                    m.extend(std::iter::repeat_n(b'l', 200));
                    m.extend(std::iter::repeat_n(b'e', 201));
                }
                _ => m.extend(b"d7:command5:bogus7:call-id4:nonee"),
            }
            m
        })
        .collect()
}

/// Pings the ng socket every 10 ms (waiting up to 500 ms for each answer) until `until`.
fn ng_pinger(ng: SocketAddr, until: Instant) -> anyhow::Result<(u64, u64, Vec<f64>)> {
    let s = UdpSocket::bind(SocketAddr::new(ng.ip(), 0))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let (mut sent, mut answered, mut rtts) = (0u64, 0u64, Vec::new());
    let mut buf = vec![0u8; 65_536];
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let cookie = format!("ping{i}");
        let msg = format!("{cookie} d7:command4:pinge");
        let t = Instant::now();
        s.send_to(msg.as_bytes(), ng)?;
        sent += 1;
        let deadline = t + Duration::from_millis(500);
        while Instant::now() < deadline {
            match s.recv_from(&mut buf) {
                Ok((n, _))
                    if buf[..n].starts_with(cookie.as_bytes())
                        && buf.get(cookie.len()) == Some(&b' ') =>
                {
                    answered += 1;
                    rtts.push(t.elapsed().as_secs_f64() * 1e6);
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((sent, answered, rtts))
}

fn ng_window(
    o: &ControlOptions,
    ng: SocketAddr,
    name: &'static str,
    flood: Option<Vec<FloodStream>>,
) -> anyhow::Result<NgRow> {
    let m0 = metrics(&o.signaling)?;
    let p0 = o.server_pid.and_then(|p| proc_sample(p).ok());
    let k0 = kernel_udp_drops(&[ng.port()]);
    let started = Instant::now();
    let f = flood
        .map(|s| Flood::start(s, o.ng_rate, None))
        .transpose()?;
    let (sent, answered, mut rtts) = ng_pinger(ng, started + Duration::from_secs_f64(o.ng_secs))?;
    let (rows, _) = match f {
        Some(f) => f.stop()?,
        None => (Vec::new(), 0.0),
    };
    // Answers to what is still queued.
    std::thread::sleep(Duration::from_millis(500));
    let m1 = metrics(&o.signaling)?;
    let p1 = o.server_pid.and_then(|p| proc_sample(p).ok());
    let k1 = kernel_udp_drops(&[ng.port()]);
    rtts.sort_by(f64::total_cmp);
    let q = |p: f64| rtts[((rtts.len() as f64 * p).ceil() as usize).clamp(1, rtts.len()) - 1];
    let d = |n: &str| m1.get(n) - m0.get(n);
    Ok(NgRow {
        name,
        secs: started.elapsed().as_secs_f64(),
        pings: [sent, answered],
        ping_rtt_us: (!rtts.is_empty()).then(|| [q(0.5), q(0.99)]),
        flood: rows,
        gateway_requests: [
            d("secrelay_ng_requests_total{result=\"ok\"}"),
            d("secrelay_ng_requests_total{result=\"error\"}"),
        ],
        kernel_drops: k0.zip(k1).map(|(a, b)| b.saturating_sub(a)),
        rss_bytes: p0.zip(p1).map(|(a, b)| [a.rss_bytes, b.rss_bytes]),
        flood_answered: [
            d("secrelay_ng_requests_total{result=\"ok\"}")
                + d("secrelay_ng_requests_total{result=\"error\"}")
                - answered as f64,
            d("secrelay_ng_requests_total{result=\"error\"}"),
        ],
    })
}

/// Requests with bodies past the limit, declared and chunked, each from sources of their own
/// (8 requests each, so that none reaches its request limit).
fn big_bodies(o: &ControlOptions, addr: SocketAddr) -> Vec<(String, Tally)> {
    let big_sources = loopback_sources(60, (2 * o.big_requests).div_ceil(8));
    let mut big_bodies = Vec::new();
    for (kind, chunked) in [("declared", false), ("chunked", true)] {
        let mut t = Tally::new();
        for i in 0..o.big_requests {
            let source = big_sources[(i + usize::from(chunked) * o.big_requests) / 8];
            tally(&mut t, big_body(source, addr, chunked, o.big_body_bytes));
        }
        big_bodies.push((kind.to_string(), t));
    }
    big_bodies
}

/// Slow and idle clients: headers and bodies trickled, connections idle past
/// `max_connections` and after a request, a half-open TLS handshake, one source past its
/// own limit.
fn slow_clients(o: &ControlOptions, addr: SocketAddr) -> Vec<SlowRow> {
    let timeout = Duration::from_secs_f64(o.timeout_secs);
    let every = timeout / 4;
    let give_up = timeout * 3 + Duration::from_secs(2);
    let idle_total = o.connections + o.idle_connections;
    // The slow and idle clients come from several addresses, as a real flood would, enough
    // that none reaches its source's connection or request limit (those have parts of their
    // own below).
    let client_sources = loopback_sources(
        100,
        idle_total.div_ceil(o.per_source_connections.max(1)) + 1,
    );
    let mut slow = vec![
        run_slow(
            "slow_headers",
            addr,
            &client_sources,
            o.connections,
            b"POST /whip/flood-slow HTTP/1.1\r\nHost: flood\r\n",
            b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            (every, give_up),
            Some(&o.signaling),
        ),
        run_slow(
            "slow_body",
            addr,
            &client_sources,
            o.connections,
            b"POST /whip/flood-slow HTTP/1.1\r\nHost: flood\r\nContent-Type: application/sdp\r\nContent-Length: 60000\r\n\r\nv=0\r\n",
            b"a=slow\r\n",
            (every, give_up),
            Some(&o.signaling),
        ),
        // Idle past max_connections, from enough sources that none reaches its own limit: a
        // legitimate client meanwhile finds a slot only once the gateway has closed idle ones.
        run_slow(
            "idle",
            addr,
            &client_sources,
            o.connections + o.idle_connections,
            b"",
            b"",
            (every, give_up),
            Some(&o.signaling),
        ),
        // One request answered, then the connection kept open and idle (keep-alive).
        run_slow(
            "idle_after_request",
            addr,
            &client_sources,
            o.connections,
            b"GET /healthz HTTP/1.1\r\nHost: flood\r\n\r\n",
            b"",
            (every, give_up),
            None,
        ),
    ];
    if let Some(https) = o.https {
        // A TLS handshake record's header that promises 512 bytes, and nothing after it.
        slow.push(run_slow(
            "tls_half_open",
            https,
            &client_sources,
            o.connections,
            &[22, 3, 1, 2, 0],
            b"",
            (every, give_up),
            None,
        ));
    }
    // One source past its own limit: the excess refused at once while the lab's default
    // address is served.
    slow.push(run_slow(
        "one_source",
        addr,
        &loopback_sources(30, 1),
        o.per_source_connections + o.connections,
        b"",
        b"",
        (every, give_up),
        Some(&o.signaling),
    ));
    slow
}

/// What the gateway counted refusing between two scrapes: connections refused and closed
/// idle, sources limited, TLS handshakes failed by reason.
fn gateway_refused(m0: &super::flood::Metrics, m1: &super::flood::Metrics) -> Vec<(String, f64)> {
    let mut gateway_refused = Vec::new();
    for (name, metric) in [
        (
            "http_connections_refused",
            "secrelay_http_connections_refused_total",
        ),
        (
            "http_idle_closed",
            "secrelay_http_connections_idle_closed_total",
        ),
        (
            "source_connections",
            "secrelay_http_source_limited_total{what=\"connection\"}",
        ),
        (
            "source_requests",
            "secrelay_http_source_limited_total{what=\"request\"}",
        ),
    ] {
        gateway_refused.push((name.to_string(), m1.get(metric) - m0.get(metric)));
    }
    for reason in ["timeout", "busy", "closed_early", "not_tls", "malformed"] {
        let n = format!("secrelay_tls_handshake_failures_total{{reason=\"{reason}\"}}");
        let v = m1.get(&n) - m0.get(&n);
        if v > 0.0 {
            gateway_refused.push((format!("tls_{reason}"), v));
        }
    }
    gateway_refused
}

/// The ng socket's answers unloaded, then under a flood of malformed commands.
fn ng_windows(o: &ControlOptions) -> anyhow::Result<Vec<NgRow>> {
    let mut ng = Vec::new();
    if let Some(ng_addr) = o.ng {
        ng.push(ng_window(o, ng_addr, "unloaded", None)?);
        let sources = Arc::new(source_sockets(ng_addr.ip(), 16)?);
        let streams = vec![FloodStream {
            kind: "ng_abuse",
            expect: "ng_error",
            target: ng_addr,
            packets: ng_abuse(4096),
            sockets: sources,
        }];
        ng.push(ng_window(o, ng_addr, "flood", Some(streams))?);
    }
    Ok(ng)
}

/// Runs every part in turn.
pub fn run(o: &ControlOptions) -> anyhow::Result<ControlReport> {
    let addr = http_addr(&o.signaling)?;
    metrics(&o.signaling).context("the gateway's /metrics (is --target a secrelay gateway?)")?;
    let load_average = load_average();
    let rss0 = o.server_pid.and_then(|p| proc_sample(p).ok());
    // From sources of their own, 8 requests each, so that none reaches its request limit.
    let big_bodies = big_bodies(o, addr);
    let m0 = metrics(&o.signaling)?;
    let slow = slow_clients(o, addr);
    let request_flood = (o.requests_per_source > 0.0)
        .then(|| request_flood(o, addr, loopback_sources(40, 1)[0]))
        .transpose()?;
    let credentials = o
        .credentials
        .as_ref()
        .map(|c| super::credentials::run(c, &o.signaling, addr, o.server_pid))
        .transpose()?;
    let m1 = metrics(&o.signaling)?;
    let gateway_refused = gateway_refused(&m0, &m1);
    let ng = ng_windows(o)?;
    let ng_outsider = match (o.ng, o.ng_outsider) {
        (Some(ng_addr), Some(source)) => Some(ng_from_outside(o, ng_addr, source)?),
        _ => None,
    };
    let rss1 = o.server_pid.and_then(|p| proc_sample(p).ok());
    Ok(ControlReport {
        load_average,
        timeout_secs: o.timeout_secs,
        big_bodies,
        slow,
        gateway_refused,
        request_flood,
        ng,
        ng_outsider,
        rss_bytes: rss0.zip(rss1).map(|(a, b)| [a.rss_bytes, b.rss_bytes]),
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::bencode::Bencode;

    #[test]
    fn every_abusive_ng_message_is_refused_by_the_decoder_or_names_no_command() {
        let m = ng_abuse(8);
        for (i, msg) in m.iter().enumerate() {
            let body = &msg[msg.iter().position(|b| *b == b' ').unwrap() + 1..];
            let decoded = Bencode::decode(body);
            match i % 4 {
                0 | 2 => assert!(decoded.is_err(), "message {i} decoded"),
                1 => assert!(msg.len() >= 60_000 && msg.len() < 65_000),
                _ => assert!(decoded.is_ok()),
            }
        }
    }

    #[test]
    fn status_lines_are_read() {
        assert_eq!(
            status_of(b"HTTP/1.1 413 Payload Too Large\r\n").as_deref(),
            Some("413")
        );
        assert_eq!(status_of(b"garbage"), None);
    }
}
