//! The credentials part of `secrelay lab flood control`: what signaling requests with forged
//! tokens cost the gateway and how it counts them, and what tokens add to a join.
//!
//! * **Forged tokens**: `GET /api/rooms` with a credential of each kind (none; a token naming
//!   a key the gateway holds with a wrong signature; one naming a key it does not hold; an
//!   expired one, validly signed, when the lab knows the key; garbage that is no token), the
//!   same number of each, on keep-alive connections from sources of their own (so that no
//!   source reaches `requests_per_source`). Every one must be refused with 401; the gateway's
//!   CPU time over each kind's window (`/proc`) gives its cost per request, and the difference
//!   with "none" the check's own; `secrelay_auth_failures_total` must have counted each by
//!   reason.
//! * **Joins with and without a token**: WHEP offers alternately into an open room without a
//!   credential and into a closed one with a valid token (each session deleted at once), their
//!   answers' latency percentiles side by side (needs the lab's own gateway: the key and the
//!   open room are its configuration).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use super::flood::metrics;
use secrelay_gateway::server::auth::{mint, unix_now, Claims, Grants};
use secrelay_testkit::Signaling;

/// An API key of the gateway, for validly signed tokens.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// Its id (`api_keys`).
    pub id: String,
    /// Its secret.
    pub secret: String,
}

/// What the credentials part needs.
#[derive(Debug, Clone)]
pub struct CredentialOptions {
    /// Requests of each kind.
    pub requests: usize,
    /// The gateway's `request_burst_per_source` (requests per source, so none is limited).
    pub per_source: usize,
    /// The gateway's key, when the lab started it: expired tokens validly signed, and the
    /// joins part.
    pub key: Option<ApiKey>,
    /// An open room and a closed one the key's tokens reach, for the joins part.
    pub rooms: Option<(String, String)>,
    /// WHEP joins of each kind.
    pub joins: usize,
}

/// One kind of credential: what it cost and how it was answered.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// The kind.
    pub kind: &'static str,
    /// Requests sent.
    pub requests: u64,
    /// Answers by status.
    pub statuses: Vec<(String, u64)>,
    /// The gateway's CPU time (user + system) per request over the window, microseconds.
    pub gateway_us_per_request: Option<f64>,
    /// Of which the check itself: the difference with requests that carry no credential.
    pub check_us_per_request: Option<f64>,
    /// The reason `secrelay_auth_failures_total` counted them under, and how many it counted.
    pub counted: (String, f64),
}

/// Join latency without and with a token.
#[derive(Debug, Clone, Serialize)]
pub struct JoinRow {
    /// Joins of each kind.
    pub joins: usize,
    /// Anonymous (open room): p50 and p99 of the offer's answer, microseconds.
    pub anonymous_us: [f64; 2],
    /// With a token (closed room): the same.
    pub token_us: [f64; 2],
    /// token p99 / anonymous p99.
    pub p99_ratio: f64,
    /// Statuses other than 201 (with their count), of either kind.
    pub refused: Vec<(String, u64)>,
}

/// The part's report.
#[derive(Debug, Clone, Serialize)]
pub struct CredentialReport {
    /// One row per kind of credential, "none" first.
    pub costs: Vec<CostRow>,
    /// The joins, when the lab started the gateway.
    pub joins: Option<JoinRow>,
}

/// The CPU time a process's threads have run, in nanoseconds (the sum of
/// `/proc/PID/task/*/schedstat`'s first field): finer than `/proc/PID/stat`'s clock ticks,
/// which would round a few thousand requests' microseconds to 10 ms steps.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0u64;
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        sum += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(sum)
}

/// The `n`-th source of kind `k`: 127.0.(10 + k).(1 + n), apart from the other parts' sources.
fn source(k: usize, n: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 10 + k as u8, 1 + n as u8))
}

fn connect_from(ip: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(s)
}

/// Sends one request on a keep-alive connection and reads its answer: the status and the
/// `Location` header, if any.
fn exchange(c: &mut TcpStream, request: &[u8]) -> Option<(String, Option<String>)> {
    c.write_all(request).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = c.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&got[..end]).into_owned();
        let len: usize = head
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if got.len() >= end + 4 + len {
            let status = head.get(9..12).unwrap_or("???").to_owned();
            let location = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("location")
                    .then(|| v.trim().to_owned())
            });
            return Some((status, location));
        }
    }
}

fn tally(t: &mut Vec<(String, u64)>, what: String) {
    match t.iter_mut().find(|(k, _)| *k == what) {
        Some((_, n)) => *n += 1,
        None => t.push((what, 1)),
    }
}

/// A token: `kid` names `key`, signed with `secret`, expiring `ttl` seconds from now.
fn token(key: &str, secret: &str, ttl: i64) -> anyhow::Result<String> {
    let now = unix_now() as i64;
    let claims = Claims {
        iss: None,
        sub: "lab-flood".into(),
        exp: (now + ttl).max(1) as u64,
        nbf: None,
        iat: Some(now as u64),
        grants: Grants {
            list: true,
            ..Grants::default()
        },
    };
    mint(key, secret.as_bytes(), &claims).map_err(|e| anyhow::anyhow!("a token: {e}"))
}

/// The kinds of credential, with the reason the gateway counts each under.
fn kinds(
    o: &CredentialOptions,
) -> anyhow::Result<Vec<(&'static str, Option<String>, &'static str)>> {
    let wrong = "0000000000000000000000000000000000000000-not-the-key";
    let held = o.key.as_ref().map_or("lab", |k| k.id.as_str());
    let mut k = vec![
        ("none", None, "missing"),
        (
            "forged signature",
            Some(token(held, wrong, 3600)?),
            "bad_signature",
        ),
        (
            "unknown key",
            Some(token("not-a-key-here", wrong, 3600)?),
            "unknown_key",
        ),
    ];
    if let Some(key) = &o.key {
        k.push((
            "expired",
            Some(token(&key.id, &key.secret, -3600)?),
            "expired",
        ));
    }
    k.push((
        "not a token",
        Some("garbage-that-is-no-token".into()),
        "wrong_token",
    ));
    // A held key only when the lab knows it: against another gateway a forged signature of an
    // unknown key is counted as unknown_key.
    if o.key.is_none() {
        k[1].2 = "unknown_key";
    }
    Ok(k)
}

/// Runs the part against the plain-HTTP signaling at `addr`.
pub fn run(
    o: &CredentialOptions,
    signaling: &Signaling,
    addr: SocketAddr,
    server_pid: Option<u32>,
) -> anyhow::Result<CredentialReport> {
    let mut costs: Vec<CostRow> = Vec::new();
    for (k, (kind, credential, reason)) in kinds(o)?.into_iter().enumerate() {
        let request = match &credential {
            Some(t) => {
                format!("GET /api/rooms HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer {t}\r\n\r\n")
            }
            None => "GET /api/rooms HTTP/1.1\r\nHost: lab\r\n\r\n".to_owned(),
        };
        let m0 = metrics(signaling)?;
        let cpu0 = server_pid.and_then(cpu_ns);
        let mut statuses = Vec::new();
        let mut sent = 0u64;
        let per = o.per_source.max(1);
        for s in 0..o.requests.div_ceil(per) {
            let mut c = connect_from(source(k, s), addr)
                .with_context(|| format!("connecting from {} to {addr}", source(k, s)))?;
            for _ in 0..per.min(o.requests - s * per) {
                sent += 1;
                match exchange(&mut c, request.as_bytes()) {
                    Some((status, _)) => tally(&mut statuses, status),
                    None => {
                        tally(&mut statuses, "closed".into());
                        break;
                    }
                }
            }
        }
        let cpu1 = server_pid.and_then(cpu_ns);
        let m1 = metrics(signaling)?;
        let name = format!("secrelay_auth_failures_total{{reason=\"{reason}\"}}");
        let gateway_us = cpu0
            .zip(cpu1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e3 / sent.max(1) as f64);
        let base = costs.first().and_then(|r| r.gateway_us_per_request);
        costs.push(CostRow {
            kind,
            requests: sent,
            statuses,
            gateway_us_per_request: gateway_us,
            check_us_per_request: gateway_us.zip(base).filter(|_| k > 0).map(|(g, b)| g - b),
            counted: (reason.to_owned(), m1.get(&name) - m0.get(&name)),
        });
    }
    let joins = match (&o.key, &o.rooms) {
        (Some(key), Some(rooms)) if o.joins > 0 => Some(joins(o, key, rooms, addr)?),
        _ => None,
    };
    Ok(CredentialReport { costs, joins })
}

/// A WHEP offer (audio, receive only) of a fresh simulated browser.
fn whep_offer() -> anyhow::Result<String> {
    let cert = secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "lab")
        .map_err(|e| anyhow::anyhow!("a certificate: {e}"))?;
    Ok(secrelay_testkit::browser::audio_offer(
        secrelay_testkit::browser::Direction::RecvOnly,
        "labj",
        "0123456789abcdefghijklmn",
        &cert.fingerprint(),
        7,
    ))
}

/// Offers, alternately anonymous and with a token, each answered session deleted at once
/// (with the credential that made it).
fn joins(
    o: &CredentialOptions,
    key: &ApiKey,
    (open, closed): &(String, String),
    addr: SocketAddr,
) -> anyhow::Result<JoinRow> {
    let offer = whep_offer()?;
    let t = {
        let now = unix_now();
        let claims = Claims {
            iss: None,
            sub: "lab-joiner".into(),
            exp: now + 3600,
            nbf: None,
            iat: Some(now),
            grants: Grants {
                room: Some(closed.clone()),
                subscribe: true,
                ..Grants::default()
            },
        };
        mint(&key.id, key.secret.as_bytes(), &claims).map_err(|e| anyhow::anyhow!("{e}"))?
    };
    let (mut anon, mut with) = (Vec::new(), Vec::new());
    let mut refused = Vec::new();
    // Each pair from a source of its own: two requests apiece, far from any limit.
    for i in 0..o.joins {
        let mut c = connect_from(source(9, i % 250), addr)?;
        for (room, auth, into) in [
            (open.as_str(), String::new(), &mut anon),
            (
                closed.as_str(),
                format!("Authorization: Bearer {t}\r\n"),
                &mut with,
            ),
        ] {
            let request = format!(
                "POST /whep/{room} HTTP/1.1\r\nHost: lab\r\n{auth}Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{offer}",
                offer.len()
            );
            let start = Instant::now();
            let answer = exchange(&mut c, request.as_bytes());
            let took = start.elapsed();
            match answer {
                Some((status, Some(location))) if status == "201" => {
                    into.push(took.as_secs_f64() * 1e6);
                    let delete = format!("DELETE {location} HTTP/1.1\r\nHost: lab\r\n{auth}\r\n");
                    match exchange(&mut c, delete.as_bytes()) {
                        Some((s, _)) if s == "200" => {}
                        Some((s, _)) => tally(&mut refused, format!("delete {s}")),
                        None => tally(&mut refused, "delete closed".into()),
                    }
                }
                Some((status, _)) => tally(&mut refused, status),
                None => tally(&mut refused, "closed".into()),
            }
        }
    }
    let pct = |v: &mut Vec<f64>, q: f64| -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    };
    let anonymous_us = [pct(&mut anon, 0.5), pct(&mut anon, 0.99)];
    let token_us = [pct(&mut with, 0.5), pct(&mut with, 0.99)];
    Ok(JoinRow {
        joins: o.joins,
        anonymous_us,
        token_us,
        p99_ratio: token_us[1] / anonymous_us[1],
        refused,
    })
}
