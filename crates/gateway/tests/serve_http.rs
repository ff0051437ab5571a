//! The HTTP side of `secrelay serve` over a real socket: every refusal gets the status the
//! standard names and a one-line reason; the JSON API, metrics and health answer.

use std::time::Instant;

use secrelay_dtls::{Certificate, KeyType};
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::browser::audio_offer;
use secrelay_testkit::Leg;

/// The admin key the tests' gateways are given.
const ADMIN_KEY: &str = "admin-key-of-the-http-tests-0123456789";
/// Its header.
const ADMIN: (&str, &str) = (
    "Authorization",
    "Bearer admin-key-of-the-http-tests-0123456789",
);

fn start(token_room: Option<(&str, &str)>) -> Server {
    let mut c = ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        drain_secs: 0.0,
        max_body_bytes: 4096,
        admin_key: Some(ADMIN_KEY.into()),
        cors_origins: vec!["https://app.example".into()],
        ..ServeConfig::default()
    };
    if let Some((room, token)) = token_room {
        c.rooms.insert(
            room.into(),
            secrelay_gateway::server::config::RoomConfig {
                token: Some(token.into()),
                ..Default::default()
            },
        );
    }
    Server::start(c).unwrap()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// (status, headers we look at, body)
struct Reply {
    status: u16,
    location: Option<String>,
    etag: Option<String>,
    www_auth: Option<String>,
    body: String,
}

fn call(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    let a = agent();
    let mut r = match (method, body) {
        ("POST", b) | ("PATCH", b) => {
            let mut req = if method == "POST" {
                a.post(url)
            } else {
                a.patch(url)
            };
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.send(b.unwrap_or("")).unwrap()
        }
        ("DELETE", _) => {
            let mut req = a.delete(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call().unwrap()
        }
        _ => {
            let mut req = a.get(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call().unwrap()
        }
    };
    let h = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (location, etag, www_auth) = (h("location"), h("etag"), h("www-authenticate"));
    Reply {
        status: r.status().as_u16(),
        location,
        etag,
        www_auth,
        body: r.body_mut().read_to_string().unwrap_or_default(),
    }
}

fn offer(leg: Leg) -> String {
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "http-test").unwrap();
    audio_offer(
        leg.direction(),
        "abcd",
        "0123456789abcdefghijklmn",
        &cert.fingerprint(),
        1234,
    )
}

const SDP: (&str, &str) = ("Content-Type", "application/sdp");
const FRAG: (&str, &str) = ("Content-Type", "application/trickle-ice-sdpfrag");

#[test]
fn refusals_name_the_standard_status_and_a_reason() {
    let s = start(Some(("locked", "s3cret")));
    let u = s.url();

    let r = call(
        "POST",
        &format!("{u}/whip/a"),
        &[("Content-Type", "text/plain")],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 415, "{}", r.body);
    assert!(r.body.contains("application/sdp"), "{}", r.body);

    let r = call(
        "POST",
        &format!("{u}/whip/a"),
        &[SDP],
        Some("v=0\r\nthis is not sdp\r\n"),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.starts_with("bad SDP offer"), "{}", r.body);
    assert_eq!(r.body.trim_end().lines().count(), 1, "one line: {}", r.body);

    // Audio offered only as G.729: nothing the gateway forwards.
    let g729 = offer(Leg::Whip)
        .replace(
            "m=audio 9 UDP/TLS/RTP/SAVPF 0",
            "m=audio 9 UDP/TLS/RTP/SAVPF 18",
        )
        .replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:18 G729/8000");
    let r = call("POST", &format!("{u}/whip/a"), &[SDP], Some(&g729));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("codec"), "{}", r.body);

    let big = format!(
        "{}{}",
        offer(Leg::Whip),
        "a=x-padding:".to_owned() + &"x".repeat(8000)
    );
    let r = call("POST", &format!("{u}/whip/a"), &[SDP], Some(&big));
    assert_eq!(r.status, 413, "{}", r.body);

    // A name outside the rule: 400 saying the rule, on every route.
    for (method, path) in [
        ("POST", "/whip/bad%2Fname"),
        ("POST", "/whep/caf%C3%A9"),
        ("POST", "/rooms/my%20room/join"),
        ("GET", "/room/my%20room"),
    ] {
        let r = call(
            method,
            &format!("{u}{path}"),
            &[SDP],
            Some(&offer(Leg::Whip)),
        );
        assert_eq!(r.status, 400, "{method} {path}: {}", r.body);
        assert!(r.body.contains("1-64 characters"), "{}", r.body);
    }

    // The locked room: no token, a wrong one, the right one.
    let r = call(
        "POST",
        &format!("{u}/whip/locked"),
        &[SDP],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.www_auth.as_deref(), Some("Bearer"));
    let r = call(
        "POST",
        &format!("{u}/whip/locked"),
        &[SDP, ("Authorization", "Bearer wrong!")],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let r = call(
        "POST",
        &format!("{u}/whip/locked"),
        &[SDP, ("Authorization", "Bearer s3cret")],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 201, "{}", r.body);

    // The operator's routes need the admin key; with it, unknown things are 404.
    let r = call("GET", &format!("{u}/api/rooms/nowhere"), &[], None);
    assert_eq!(r.status, 401, "{}", r.body);
    let r = call("GET", &format!("{u}/api/rooms/nowhere"), &[ADMIN], None);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = call("DELETE", &format!("{u}/whip/a/0123456789"), &[], None);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = call(
        "DELETE",
        &format!("{u}/api/rooms/a/participants/0123456789"),
        &[],
        None,
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let r = call(
        "DELETE",
        &format!("{u}/api/rooms/a/participants/0123456789"),
        &[ADMIN],
        None,
    );
    assert_eq!(r.status, 404, "{}", r.body);
    let r = call("GET", &format!("{u}/no/such/route"), &[], None);
    assert_eq!(r.status, 404, "{}", r.body);
    s.shutdown();
}

#[test]
fn whip_resource_lifecycle_etag_patch_delete() {
    let s = start(None);
    let u = s.url();
    let r = call(
        "POST",
        &format!("{u}/whip/stage"),
        &[SDP],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.starts_with("v=0"), "an SDP answer: {}", r.body);
    assert!(r.body.contains("a=ice-lite"), "{}", r.body);
    assert!(r.body.contains("a=setup:passive"), "{}", r.body);
    let location = r.location.expect("Location");
    assert!(location.starts_with("/whip/stage/"), "{location}");
    let etag = r.etag.expect("ETag");
    let resource = format!("{u}{location}");

    let r = call(
        "PATCH",
        &resource,
        &[FRAG],
        Some("a=candidate:1 1 udp 1 192.0.2.9 9 typ host\r\n"),
    );
    assert_eq!(r.status, 428, "{}", r.body);
    let r = call(
        "PATCH",
        &resource,
        &[FRAG, ("If-Match", "\"stale\"")],
        Some("a=end-of-candidates\r\n"),
    );
    assert_eq!(r.status, 412, "{}", r.body);
    let r = call(
        "PATCH",
        &resource,
        &[("Content-Type", "application/sdp"), ("If-Match", &etag)],
        Some(""),
    );
    assert_eq!(r.status, 415, "{}", r.body);
    let r = call(
        "PATCH",
        &resource,
        &[FRAG, ("If-Match", &etag)],
        Some("a=candidate:1 1 udp 1 192.0.2.9 9 typ host\r\n"),
    );
    assert_eq!(r.status, 204, "trickle: {}", r.body);

    // ICE restart: new credentials, If-Match: *, our new credentials back and a new ETag.
    let r = call(
        "PATCH",
        &resource,
        &[FRAG, ("If-Match", "*")],
        Some("a=ice-ufrag:wxyz\r\na=ice-pwd:zyxwvutsrqponmlkjihgfedcba\r\n"),
    );
    assert_eq!(r.status, 200, "restart: {}", r.body);
    assert!(
        r.body.contains("a=ice-ufrag:") && r.body.contains("a=ice-pwd:"),
        "{}",
        r.body
    );
    let new_etag = r.etag.expect("a new ETag");
    assert_ne!(new_etag, etag);

    let room = call("GET", &format!("{u}/api/rooms/stage"), &[ADMIN], None);
    assert_eq!(room.status, 200);
    let v: serde_json::Value = serde_json::from_str(&room.body).unwrap();
    let p = &v["participants"][0];
    assert_eq!(p["kind"], "whip");
    assert_eq!(p["state"], "new");
    assert_eq!(
        p["id"].as_str().unwrap(),
        location.rsplit('/').next().unwrap()
    );
    for f in [
        "packets_in",
        "bytes_in",
        "packets_out",
        "bytes_out",
        "auth_failures",
        "replays",
    ] {
        assert_eq!(p[f], 0, "{f}");
    }
    let all = call("GET", &format!("{u}/api/rooms"), &[ADMIN], None);
    let v: serde_json::Value = serde_json::from_str(&all.body).unwrap();
    assert_eq!(v["rooms"].as_array().unwrap().len(), 1);

    let r = call("DELETE", &resource, &[], None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call("DELETE", &resource, &[], None);
    assert_eq!(r.status, 404, "deleted twice: {}", r.body);
    let all = call("GET", &format!("{u}/api/rooms"), &[ADMIN], None);
    let v: serde_json::Value = serde_json::from_str(&all.body).unwrap();
    assert!(v["rooms"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(
        s.gateway().directory_sizes(),
        (0, 0),
        "nothing left in the routing directory"
    );
    s.shutdown();
}

#[test]
fn cors_preflight_health_and_metrics() {
    let s = start(None);
    let u = s.url();
    let a = agent();
    let r = a
        .options(&format!("{u}/whip/x"))
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type,authorization",
        )
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .unwrap()
            .to_str()
            .unwrap(),
        "https://app.example"
    );
    // An origin that is not configured gets nothing a browser would accept.
    let r = a
        .options(&format!("{u}/whip/x"))
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "DELETE")
        .call()
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = call("GET", &format!("{u}/healthz"), &[], None);
    assert_eq!((r.status, r.body.trim()), (200, "ok"));
    let _ = call(
        "POST",
        &format!("{u}/whip/m"),
        &[("Content-Type", "text/plain")],
        Some("x"),
    );
    let r = call("GET", &format!("{u}/metrics"), &[], None);
    assert_eq!(r.status, 401, "metrics need the admin key");
    let r = call("GET", &format!("{u}/metrics"), &[ADMIN], None);
    assert_eq!(r.status, 200);
    for name in [
        "secrelay_datagrams_total{direction=\"in\"}",
        "secrelay_handshakes_total{result=\"ok\"}",
        "secrelay_drops_total{reason=\"auth_failed\"}",
        "secrelay_relay_latency_seconds_bucket",
        "secrelay_handshake_duration_seconds_count",
        "secrelay_participants ",
        "secrelay_rooms ",
        // Read from the kernel's UDP table at the scrape: none dropped on this idle gateway.
        "secrelay_media_socket_drops_total 0",
    ] {
        assert!(
            r.body.contains(name),
            "{name} missing from /metrics:\n{}",
            r.body
        );
    }
    assert!(
        r.body.contains("secrelay_http_refused_total 2"),
        "the 415 and the 401 were counted:\n{}",
        r.body
    );
    assert!(
        r.body
            .contains("secrelay_auth_failures_total{reason=\"missing\"} 1"),
        "the 401 was counted by reason:\n{}",
        r.body
    );
    // Histogram buckets are cumulative and end at the count.
    let inf = r
        .body
        .lines()
        .find(|l| l.starts_with("secrelay_handshake_duration_seconds_bucket{le=\"+Inf\"}"))
        .expect("a +Inf bucket");
    let count = r
        .body
        .lines()
        .find(|l| l.starts_with("secrelay_handshake_duration_seconds_count"))
        .unwrap();
    assert_eq!(
        inf.rsplit(' ').next(),
        count.rsplit(' ').next(),
        "{inf} vs {count}"
    );
    let start = Instant::now();
    s.shutdown();
    assert!(start.elapsed().as_secs() < 10);
}

#[test]
fn a_room_is_set_to_mix_before_it_exists_and_says_so() {
    let s = start(Some(("private", "sesame")));
    let u = s.url();
    let json = [("Content-Type", "application/json"), ADMIN];
    // Set before anyone joined: 204, and the room mixes once it is made.
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/conf"),
        &json,
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let r = call(
        "POST",
        &format!("{u}/rooms/conf/join"),
        &[("Content-Type", "application/sdp")],
        Some(&offer(Leg::Join)),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call("GET", &format!("{u}/api/rooms/conf"), &[ADMIN], None);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["mixing"], true, "{v}");
    assert_eq!(v["transcoded"], 0, "{v}");
    assert_eq!(v["mix"]["speakers"], 0, "{v}");
    // A limit on talkers, on the room that mixes already.
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/conf"),
        &json,
        Some(r#"{"mix": true, "speakers": 3}"#),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    let r = call("GET", &format!("{u}/api/rooms/conf"), &[ADMIN], None);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["mix"]["speakers"], 3, "{v}");
    // A limit without mixing means nothing: 400 saying so.
    for body in [r#"{"speakers": 3}"#, r#"{"mix": false, "speakers": 3}"#] {
        let r = call("PATCH", &format!("{u}/api/rooms/conf"), &json, Some(body));
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains("speakers"), "{}", r.body);
    }
    // And back.
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/conf"),
        &json,
        Some(r#"{"mix": false}"#),
    );
    assert_eq!(r.status, 204);
    let r = call("GET", &format!("{u}/api/rooms/conf"), &[ADMIN], None);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["mixing"], false, "{v}");
    assert!(v["mix"].is_null(), "{v}");
    // A body that is not the settings: 400 naming what is wrong; without the admin key (or the
    // room's token) the settings are not the caller's to change.
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/conf"),
        &json,
        Some(r#"{"mixx": 1}"#),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("mixx"), "{}", r.body);
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/private"),
        &[("Content-Type", "application/json")],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/private"),
        &[
            ("Content-Type", "application/json"),
            ("Authorization", "Bearer sesame"),
        ],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 204, "the room's token is its admin: {}", r.body);
}

/// Whether the server ended the connection within `within`: EOF, a reset, or a status line
/// (then returned).
fn ended_within(s: &mut std::net::TcpStream, within: std::time::Duration) -> Option<String> {
    use std::io::Read;
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => Some("closed".into()),
        Ok(n) => Some(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()?
                .to_string(),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some("reset".into()),
        Err(_) => None,
    }
}

/// Slowloris on plain HTTP: connections that send nothing cannot hold `max_connections` for
/// ever (each is closed once `http_request_timeout_secs` passes with no request begun, and
/// counted), and a body trickled in a little at a time, each part well within the timeout, is
/// cut off with 408 once the timeout has passed since its headers.
#[test]
fn idle_connections_and_trickled_bodies_are_cut_off_and_the_slots_come_back() {
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::Duration;
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.0,
        max_connections: 4,
        http_request_timeout_secs: 1.0,
        ..ServeConfig::default()
    })
    .unwrap();
    let base = server.http_url().unwrap();
    let addr: std::net::SocketAddr = base.strip_prefix("http://").unwrap().parse().unwrap();
    let stats = server.gateway().stats().clone();

    // Four idle connections take every slot; a fifth is refused at once.
    let mut idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(addr).unwrap();
    assert!(ended_within(&mut fifth, Duration::from_secs(2)).is_some());
    // Then the idle ones are closed: nothing keeps them past the timeout.
    for s in &mut idle {
        let end = ended_within(s, Duration::from_secs(5));
        assert_eq!(
            end.as_deref(),
            Some("closed"),
            "an idle connection was kept"
        );
    }
    let idle_closed = || {
        stats
            .tls
            .http_idle_closed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let end = Instant::now() + Duration::from_secs(5);
    while idle_closed() < 4 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(idle_closed(), 4);
    assert_eq!(
        call("GET", &format!("{base}/healthz"), &[], None).status,
        200
    );
    let admin = format!("Bearer {}", server.admin_key().expose());
    let metrics = call(
        "GET",
        &format!("{base}/metrics"),
        &[("Authorization", &admin)],
        None,
    )
    .body;
    assert!(
        metrics.contains("secrelay_http_connections_idle_closed_total 4"),
        "{metrics}"
    );

    // A slow POST: complete headers, then one short line of body every 200 ms, for 10 s if
    // nothing stopped it.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(
        b"POST /whip/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\nContent-Length: 400\r\n\r\n",
    )
    .unwrap();
    let mut status = None;
    for _ in 0..50 {
        if slow.write_all(b"a=x\r\n").is_err() {
            break;
        }
        if let Some(s) = ended_within(&mut slow, Duration::from_millis(200)) {
            status = Some(s);
            break;
        }
    }
    let status = status.expect("the trickled body was never cut off");
    assert!(status.starts_with("HTTP/1.1 408"), "{status}");
    server.shutdown();
}

#[test]
fn a_source_over_its_request_rate_gets_a_429_a_browser_on_another_origin_can_read() {
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.0,
        cors_origins: vec!["https://app.example".into()],
        // One request, then one every 100 s: the next ones are refused.
        requests_per_source: 0.01,
        request_burst_per_source: 1,
        ..ServeConfig::default()
    })
    .unwrap();
    let url = format!("{}/healthz", server.http_url().unwrap());
    let a = agent();
    let get = |origin: &str| {
        let r = a.get(&url).header("Origin", origin).call().unwrap();
        let h = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        (
            r.status().as_u16(),
            h("access-control-allow-origin"),
            h("access-control-expose-headers"),
            h("retry-after"),
            h("vary"),
        )
    };
    let (status, allow, ..) = get("https://app.example");
    assert_eq!(status, 200);
    assert_eq!(allow.as_deref(), Some("https://app.example"));
    // Refused before the router: the CORS headers are the router's all the same, and the
    // script may read Retry-After.
    let (status, allow, expose, retry, vary) = get("https://app.example");
    assert_eq!(status, 429);
    assert_eq!(allow.as_deref(), Some("https://app.example"));
    assert!(
        expose.is_some_and(|e| e.to_ascii_lowercase().contains("retry-after")),
        "Retry-After not exposed"
    );
    let secs: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=100).contains(&secs), "Retry-After: {secs}");
    assert_eq!(vary.as_deref(), Some("origin"));
    // An origin that is not listed gets no CORS headers, as from the router.
    let (status, allow, ..) = get("https://other.example");
    assert_eq!((status, allow), (429, None));
    let metrics = call(
        "GET",
        &format!("{}/metrics", server.http_url().unwrap()),
        &[],
        None,
    );
    assert_eq!(metrics.status, 429, "the limit is per source, /metrics too");
    server.shutdown();
}
