//! Webhooks as a receiver sees them: a participant joining with a token, connecting,
//! publishing and leaving makes room_started, participant_joined, publishing_started,
//! publishing_stopped, participant_left and room_finished, in that order, each signed with the
//! receiver's API key over the body's hash; a receiver that fails is retried, one that never
//! answers is given up (counted) without holding up another receiver or the media.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use secrelay_gateway::server::auth::{mint, unix_now, Claims, Grants};
use secrelay_gateway::server::config::WebhookConfig;
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};

const KEY: &str = "0123456789abcdef0123456789abcdef-hooks";

/// One request as the receiver read it.
#[derive(Debug, Clone)]
struct Got {
    authorization: String,
    event: String,
    body: String,
    /// The status it was answered with.
    status: u16,
}

/// A receiver on loopback: answers each request with the next of `statuses` (then 200), or
/// never when `silent`; keeps what it read.
fn receiver(statuses: Vec<u16>, silent: bool) -> (String, Arc<Mutex<Vec<Got>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                headers.push(line.trim_end().to_owned());
            }
            let header = |name: &str| {
                headers
                    .iter()
                    .find_map(|h| {
                        let (k, v) = h.split_once(':')?;
                        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                    })
                    .unwrap_or_default()
            };
            let len: usize = header("content-length").parse().unwrap_or(0);
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_err() {
                continue;
            }
            if silent {
                // Holds the connection without a word, past the gateway's timeout.
                std::thread::sleep(Duration::from_secs(2));
                continue;
            }
            let status = statuses.next().unwrap_or(200);
            keep.lock().unwrap().push(Got {
                authorization: header("authorization"),
                event: header("x-secrelay-event"),
                body: String::from_utf8(body).unwrap(),
                status,
            });
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (url, got)
}

/// The body's claims, once the signature and the body's hash are checked.
fn verified(g: &Got) -> serde_json::Value {
    let token = g
        .authorization
        .strip_prefix("Bearer ")
        .expect("a bearer token");
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    v.set_required_spec_claims(&["exp", "iss"]);
    let data = jsonwebtoken::decode::<serde_json::Value>(
        token,
        &jsonwebtoken::DecodingKey::from_secret(KEY.as_bytes()).unwrap(),
        &v,
    )
    .expect("signed with the receiver's key");
    assert_eq!(data.header.kid.as_deref(), Some("hooks"));
    use base64::Engine as _;
    use sha2::Digest as _;
    let hash =
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(g.body.as_bytes()));
    assert_eq!(data.claims["sha256"], hash.as_str(), "the body's hash");
    serde_json::from_str(&g.body).unwrap()
}

#[test]
fn a_session_makes_signed_events_in_order_and_a_dead_receiver_holds_nothing_up() {
    // The good receiver fails its first request once: the gateway tries it again.
    let (good, got) = receiver(vec![500], false);
    let (dead, _) = receiver(vec![], true);
    let mut c = ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.1,
        webhook_timeout_secs: 0.3,
        webhook_attempts: 2,
        ..ServeConfig::default()
    };
    c.api_keys.insert("hooks".into(), KEY.into());
    for url in [dead, good] {
        c.webhooks.push(WebhookConfig {
            url,
            key: "hooks".into(),
            events: Vec::new(),
        });
    }
    let s = Server::start(c).unwrap();
    let now = unix_now();
    let token = mint(
        "hooks",
        KEY.as_bytes(),
        &Claims {
            iss: None,
            sub: "alice".into(),
            exp: now + 600,
            nbf: None,
            iat: Some(now),
            grants: Grants {
                room: Some("stage".into()),
                publish: true,
                subscribe: true,
                ..Grants::default()
            },
        },
    )
    .unwrap();
    let mut sig = Signaling::new(s.url()).with_admin(s.admin_key().expose());
    sig.token = Some(token);
    let epoch = Instant::now();
    let mut p = vec![SimParticipant::join(
        &sig,
        "stage",
        Leg::Whip,
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        epoch,
    )
    .unwrap()];
    let up = SimParticipant::drive_until(&mut p, Duration::from_secs(20), |g| {
        g[0].phase == Phase::Connected
    })
    .unwrap();
    assert!(up, "{p:?}");
    p[0].close(Instant::now());
    // The DELETE goes once the gateway has ended the session on its close_notify: sent at once,
    // it could reach the worker before that datagram and end it as `deleted`.
    let g = s.gateway().clone();
    let end = Instant::now() + Duration::from_secs(10);
    while g.stats().totals().participants > 0 {
        assert!(
            Instant::now() < end,
            "the close_notify did not end the session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sig.delete(&p[0].location).unwrap(), 200);

    let want = [
        "room_started",
        "participant_joined",
        "publishing_started",
        "publishing_stopped",
        "participant_left",
        "room_finished",
    ];
    let end = Instant::now() + Duration::from_secs(20);
    let delivered = loop {
        let d: Vec<Got> = got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.status == 200)
            .cloned()
            .collect();
        if d.len() >= want.len() || Instant::now() > end {
            break d;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let events: Vec<&str> = delivered.iter().map(|g| g.event.as_str()).collect();
    let log: Vec<(u16, String, String)> = got
        .lock()
        .unwrap()
        .iter()
        .map(|g| (g.status, g.event.clone(), verified(g)["id"].to_string()))
        .collect();
    assert_eq!(events, want, "in order; every request: {log:?}");
    let bodies: Vec<serde_json::Value> = delivered.iter().map(verified).collect();
    for (b, name) in bodies.iter().zip(want) {
        assert_eq!(b["event"], name, "{b}");
        assert_eq!(b["room"]["name"], "stage", "{b}");
    }
    for b in &bodies[1..5] {
        assert_eq!(b["participant"]["name"], "alice", "{b}");
    }
    assert_eq!(bodies[1]["participant"]["kind"], "whip");
    assert_eq!(
        bodies[4]["reason"], "close_notify",
        "it closed before its DELETE"
    );
    // The one the receiver failed came again, the same event.
    let all = got.lock().unwrap().clone();
    assert_eq!(all[0].status, 500);
    assert_eq!(verified(&all[0])["id"], bodies[0]["id"]);

    // The dead receiver was given up on, every event, and counted so.
    let admin = format!("Bearer {}", s.admin_key().expose());
    let metric = |name: &str| -> u64 {
        let body = ureq::get(&format!("{}/metrics", s.url()))
            .header("Authorization", &admin)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let end = Instant::now() + Duration::from_secs(20);
    while metric("secrelay_webhooks_total{result=\"failed\"}") < want.len() as u64 {
        assert!(
            Instant::now() < end,
            "the dead receiver's events were not given up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        metric("secrelay_webhooks_total{result=\"sent\"}"),
        want.len() as u64
    );
    s.shutdown();
}
