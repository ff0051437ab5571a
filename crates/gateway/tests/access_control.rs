//! Who may do what, against a live gateway over real sockets: each hole an attacker found is
//! closed (a session ended through another room's path, the room list and metrics open to
//! anyone, a viewer's token that publishes and kicks, the HTTP API reaching the SIP proxy's
//! calls, settings kept for any name, anonymous offers locking protected rooms out, CORS for
//! every origin, offers that never connect piling up), and every route × every kind of caller
//! answers as docs/security.md's table says (the table is made from this test's run).

use std::collections::BTreeMap;

use secrelay_dtls::{Certificate, KeyType};
use secrelay_gateway::server::auth::{mint, unix_now, Claims, Grants};
use secrelay_gateway::server::config::RoomConfig;
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::browser::audio_offer;
use secrelay_testkit::Leg;

const KEY: &str = "0123456789abcdef0123456789abcdef-k1";
const RETIRED: &str = "fedcba9876543210fedcba9876543210-k0";
const ADMIN_KEY: &str = "admin-0123456789abcdef0123456789abcdef";

struct Reply {
    status: u16,
    location: Option<String>,
    etag: Option<String>,
    allow_origin: Option<String>,
    body: String,
}

fn call(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let req = ureq::http::Request::builder().method(method).uri(url);
    let req = headers.iter().fold(req, |r, (k, v)| r.header(*k, *v));
    let mut r = agent
        .run(req.body(body.unwrap_or("").to_owned()).unwrap())
        .unwrap();
    let h = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (location, etag, allow_origin) =
        (h("location"), h("etag"), h("access-control-allow-origin"));
    Reply {
        status: r.status().as_u16(),
        location,
        etag,
        allow_origin,
        body: r.body_mut().read_to_string().unwrap_or_default(),
    }
}

fn offer(leg: Leg) -> String {
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "access-test").unwrap();
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
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn base_config() -> ServeConfig {
    ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.0,
        ..ServeConfig::default()
    }
}

/// A token from key `k1` (or `key`/`secret`) for `identity` with `grants`, valid for `ttl`
/// seconds from now (negative: expired).
fn token_with(key: &str, secret: &str, identity: &str, grants: Grants, ttl: i64) -> String {
    let now = unix_now() as i64;
    mint(
        key,
        secret.as_bytes(),
        &Claims {
            iss: None,
            sub: identity.into(),
            exp: (now + ttl).max(1) as u64,
            nbf: None,
            iat: Some(now as u64),
            grants,
        },
    )
    .unwrap()
}

fn token(identity: &str, grants: Grants) -> String {
    token_with("k1", KEY, identity, grants, 3600)
}

fn room_grants(room: &str, publish: bool, subscribe: bool, admin: bool) -> Grants {
    Grants {
        room: Some(room.into()),
        publish,
        subscribe,
        admin,
        ..Grants::default()
    }
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

/// A gateway in the simple mode, as the attacker found it: rooms `a` and `b` with tokens of
/// their own, every other room open.
fn simple_mode() -> Server {
    let mut c = base_config();
    for (room, t) in [("a", "token-of-a"), ("b", "token-of-b")] {
        c.rooms.insert(
            room.into(),
            RoomConfig {
                token: Some(t.into()),
                ..RoomConfig::default()
            },
        );
    }
    Server::start(c).unwrap()
}

#[test]
fn a_session_is_ended_only_through_its_own_room_and_path_by_its_holder() {
    let s = simple_mode();
    let u = s.url();
    let b = bearer("token-of-b");
    let victim = call(
        "POST",
        &format!("{u}/whip/b"),
        &[SDP, ("Authorization", &b)],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(victim.status, 201, "{}", victim.body);
    let location = victim.location.unwrap();
    let id = location.rsplit('/').next().unwrap().to_owned();
    let a = bearer("token-of-a");
    // Through an open room's path, another protected room's, its own room without the token,
    // the telephony path, the API: never.
    for (method, path, auth, want) in [
        ("DELETE", format!("/whip/lobby/{id}"), None, 404),
        ("DELETE", format!("/whep/lobby/{id}"), None, 404),
        (
            "DELETE",
            format!("/rooms/lobby/participants/{id}"),
            None,
            404,
        ),
        ("DELETE", format!("/whip/a/{id}"), Some(a.as_str()), 404),
        ("DELETE", format!("/whip/b/{id}"), None, 401),
        ("DELETE", format!("/whip/b/{id}"), Some(a.as_str()), 401),
        ("DELETE", format!("/whep/b/{id}"), Some(b.as_str()), 404),
        ("DELETE", format!("/rooms/lobby/rtp/{id}"), None, 404),
        (
            "DELETE",
            format!("/rooms/b/rtp/{id}"),
            Some(b.as_str()),
            404,
        ),
        (
            "DELETE",
            format!("/api/rooms/lobby/participants/{id}"),
            None,
            401,
        ),
        (
            "DELETE",
            format!("/api/rooms/a/participants/{id}"),
            Some(a.as_str()),
            404,
        ),
        ("GET", format!("/whip/lobby/{id}/events"), None, 404),
        ("GET", format!("/whip/lobby/{id}/room"), None, 404),
    ] {
        let headers: Vec<(&str, &str)> = auth.map(|t| ("Authorization", t)).into_iter().collect();
        let r = call(method, &format!("{u}{path}"), &headers, None);
        assert_eq!(r.status, want, "{method} {path}: {}", r.body);
    }
    // The victim's session is whole: its PATCH still answers.
    let etag = victim.etag.unwrap();
    let r = call(
        "PATCH",
        &format!("{u}{location}"),
        &[FRAG, ("If-Match", &etag), ("Authorization", &b)],
        Some("a=end-of-candidates\r\n"),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.gateway().stats().totals().participants, 1);
    // Its holder (the room's token) ends it.
    let r = call(
        "DELETE",
        &format!("{u}{location}"),
        &[("Authorization", &b)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    s.shutdown();
}

#[test]
fn the_room_list_participant_ids_and_metrics_are_not_public() {
    let s = simple_mode();
    let u = s.url();
    let r = call(
        "POST",
        &format!("{u}/whip/b"),
        &[SDP, ("Authorization", "Bearer token-of-b")],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(r.status, 201);
    let id = r.location.unwrap().rsplit('/').next().unwrap().to_owned();
    for path in ["/api/rooms", "/api/rooms/b", "/api/cluster", "/metrics"] {
        let r = call("GET", &format!("{u}{path}"), &[], None);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert!(!r.body.contains(&id), "{path} shows an id: {}", r.body);
    }
    // A room's token sees its room, not the list of every room (there it is no credential).
    let r = call(
        "GET",
        &format!("{u}/api/rooms"),
        &[("Authorization", "Bearer token-of-b")],
        None,
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let r = call(
        "GET",
        &format!("{u}/api/rooms/b"),
        &[("Authorization", "Bearer token-of-b")],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // The operator sees everything.
    let admin = bearer(s.admin_key().expose());
    let r = call(
        "GET",
        &format!("{u}/api/rooms"),
        &[("Authorization", &admin)],
        None,
    );
    assert_eq!(r.status, 200);
    assert!(r.body.contains(&id), "{}", r.body);
    let r = call(
        "GET",
        &format!("{u}/metrics"),
        &[("Authorization", &admin)],
        None,
    );
    assert_eq!(r.status, 200);
    s.shutdown();
}

/// A gateway with access tokens: room `r` closed, `lobby` open.
fn token_mode(edit: impl FnOnce(&mut ServeConfig)) -> Server {
    let mut c = base_config();
    c.api_keys.insert("k1".into(), KEY.into());
    c.admin_key = Some(ADMIN_KEY.into());
    c.rooms.insert(
        "lobby".into(),
        RoomConfig {
            open: true,
            ..RoomConfig::default()
        },
    );
    edit(&mut c);
    Server::start(c).unwrap()
}

#[test]
fn a_viewers_token_only_views_and_names_its_holder() {
    let s = token_mode(|_| {});
    let u = s.url();
    let publisher = bearer(&token("pub", room_grants("r", true, true, false)));
    let viewer = bearer(&token("viewer", room_grants("r", false, true, false)));
    let p = call(
        "POST",
        &format!("{u}/whip/r"),
        &[SDP, ("Authorization", &publisher)],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(p.status, 201, "{}", p.body);
    let p_location = p.location.unwrap();
    for path in ["/whip/r", "/rooms/r/join", "/rooms/r/rtp"] {
        let r = call(
            "POST",
            &format!("{u}{path}"),
            &[SDP, ("Authorization", &viewer)],
            Some(&offer(Leg::Join)),
        );
        assert_eq!(r.status, 403, "{path}: {}", r.body);
    }
    let w = call(
        "POST",
        &format!("{u}/whep/r"),
        &[SDP, ("Authorization", &viewer)],
        Some(&offer(Leg::Whep)),
    );
    assert_eq!(w.status, 201, "{}", w.body);
    // The viewer cannot end the publisher's session, change the room, or see the list.
    let r = call(
        "DELETE",
        &format!("{u}{p_location}"),
        &[("Authorization", &viewer)],
        None,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let id = p_location.rsplit('/').next().unwrap();
    let r = call(
        "DELETE",
        &format!("{u}/api/rooms/r/participants/{id}"),
        &[("Authorization", &viewer)],
        None,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/r"),
        &[JSON, ("Authorization", &viewer)],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call(
        "GET",
        &format!("{u}/api/rooms"),
        &[("Authorization", &viewer)],
        None,
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // The viewer's own view of the room names both, the others by identity.
    let r = call(
        "GET",
        &format!("{u}{}/room", w.location.unwrap()),
        &[("Authorization", &viewer)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let names: Vec<&str> = v["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pub") && names.contains(&"viewer"), "{v}");
    assert!(
        !r.body.contains(id),
        "the view shows another's id: {}",
        r.body
    );
    // The API names participants by identity too.
    let r = call(
        "GET",
        &format!("{u}/api/rooms/r"),
        &[("Authorization", &bearer(ADMIN_KEY))],
        None,
    );
    assert!(r.body.contains("\"name\":\"pub\""), "{}", r.body);
    // A room admin's token ends it.
    let admin = bearer(&token("moderator", room_grants("r", false, false, true)));
    let r = call(
        "DELETE",
        &format!("{u}{p_location}"),
        &[("Authorization", &admin)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    s.shutdown();
}

#[test]
fn forged_expired_early_and_retired_tokens_are_refused_and_counted() {
    let s = token_mode(|_| {});
    let u = s.url();
    let g = room_grants("r", true, true, false);
    let early = {
        let now = unix_now();
        mint(
            "k1",
            KEY.as_bytes(),
            &Claims {
                iss: None,
                sub: "e".into(),
                exp: now + 7200,
                nbf: Some(now + 3600),
                iat: None,
                grants: g.clone(),
            },
        )
        .unwrap()
    };
    let cases = [
        (token_with("k1", KEY, "x", g.clone(), -3600), "expired"),
        (early, "not valid yet"),
        (
            token_with("k0", RETIRED, "x", g.clone(), 3600),
            "invalid credentials",
        ),
        (
            token_with("k1", RETIRED, "x", g.clone(), 3600),
            "invalid credentials",
        ),
        ("not.a.token".to_owned(), "invalid credentials"),
    ];
    for (t, why) in &cases {
        let r = call(
            "POST",
            &format!("{u}/whip/r"),
            &[SDP, ("Authorization", &bearer(t))],
            Some(&offer(Leg::Whip)),
        );
        assert_eq!(r.status, 401, "{why}: {}", r.body);
        assert!(r.body.contains(why), "{why}: {}", r.body);
    }
    let m = call(
        "GET",
        &format!("{u}/metrics"),
        &[("Authorization", &bearer(ADMIN_KEY))],
        None,
    )
    .body;
    for (reason, n) in [
        ("expired", 1),
        ("not_yet_valid", 1),
        ("unknown_key", 1),
        ("bad_signature", 1),
        ("malformed", 1),
    ] {
        let line = format!("secrelay_auth_failures_total{{reason=\"{reason}\"}} {n}");
        assert!(m.contains(&line), "{line} missing:\n{m}");
    }
    s.shutdown();
}

#[test]
fn keys_rotate_on_reload_without_a_restart() {
    let s = token_mode(|_| {});
    let u = s.url();
    let old = bearer(&token("a", room_grants("r", true, true, false)));
    let post = |t: &str| {
        call(
            "POST",
            &format!("{u}/whip/r"),
            &[SDP, ("Authorization", t)],
            Some(&offer(Leg::Whip)),
        )
        .status
    };
    assert_eq!(post(&old), 201);
    // k2 added, k1 retired.
    let mut c = base_config();
    c.api_keys.insert("k2".into(), RETIRED.into());
    c.admin_key = Some(ADMIN_KEY.into());
    s.reload_access(&c).unwrap();
    assert_eq!(post(&old), 401, "a token of the retired key");
    let new = bearer(&token_with(
        "k2",
        RETIRED,
        "a",
        room_grants("r", true, true, false),
        60,
    ));
    assert_eq!(post(&new), 201);
    // A configuration that does not check changes nothing.
    let mut bad = c.clone();
    bad.api_keys.insert("short".into(), "too short".into());
    assert!(s.reload_access(&bad).is_err());
    assert_eq!(post(&new), 201);
    s.shutdown();
}

#[test]
fn ng_calls_are_out_of_reach_of_the_http_api_unless_a_grant_names_them() {
    let s = token_mode(|c| c.ng = Some("127.0.0.1:0".parse().unwrap()));
    let u = s.url();
    let mut ng = secrelay_testkit::ng::Ng::new(s.ng_addr().unwrap()).unwrap();
    let phone =
        secrelay_testkit::phone::SocketPhone::bind("127.0.0.1".parse().unwrap(), None, 7).unwrap();
    let reply = ng
        .call(vec![
            (
                "command".into(),
                secrelay_wire::bencode::Bencode::str("offer"),
            ),
            (
                "call-id".into(),
                secrelay_wire::bencode::Bencode::str("c1@proxy"),
            ),
            (
                "from-tag".into(),
                secrelay_wire::bencode::Bencode::str("alice"),
            ),
            (
                "sdp".into(),
                secrelay_wire::bencode::Bencode::str(&phone.phone.offer()),
            ),
        ])
        .unwrap();
    assert!(reply.contains_key("sdp"));
    // Each media section of a call is a room of its own: "call:<call-id>:<index>".
    let room = "call:c1@proxy:0";
    let every_room_admin = bearer(&token(
        "ops",
        Grants {
            admin: true,
            list: true,
            ..Grants::default()
        },
    ));
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/{room}"),
        &[JSON, ("Authorization", &every_room_admin)],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let r = call(
        "GET",
        &format!("{u}/api/rooms"),
        &[("Authorization", &every_room_admin)],
        None,
    );
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("c1@proxy"), "{}", r.body);
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/{room}"),
        &[JSON],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    // A grant that names the calls, and the admin key, reach them.
    let calls_admin = bearer(&token(
        "sip-ops",
        Grants {
            room_prefix: Some("call:".into()),
            admin: true,
            ..Grants::default()
        },
    ));
    let r = call(
        "GET",
        &format!("{u}/api/rooms/{room}"),
        &[("Authorization", &calls_admin)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/{room}"),
        &[JSON, ("Authorization", &bearer(ADMIN_KEY))],
        Some(r#"{"mix": false}"#),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    s.shutdown();
}

#[test]
fn settings_are_bounded_and_bad_names_cost_nothing() {
    let s = token_mode(|c| c.max_room_settings = 3);
    let u = s.url();
    // Anonymous requests with huge names: refused before anything is kept.
    let long = "x".repeat(60_000);
    for _ in 0..200 {
        let r = call(
            "PATCH",
            &format!("{u}/api/rooms/{long}"),
            &[JSON],
            Some(r#"{"mix": true}"#),
        );
        assert!(
            matches!(r.status, 400 | 401 | 414 | 431),
            "{}: {}",
            r.status,
            r.body
        );
    }
    let admin = bearer(ADMIN_KEY);
    for i in 0..3 {
        let r = call(
            "PATCH",
            &format!("{u}/api/rooms/room{i}"),
            &[JSON, ("Authorization", &admin)],
            Some(r#"{"mix": true}"#),
        );
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/room3"),
        &[JSON, ("Authorization", &admin)],
        Some(r#"{"mix": true}"#),
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("max_room_settings"), "{}", r.body);
    // Changing a kept room's settings still works.
    let r = call(
        "PATCH",
        &format!("{u}/api/rooms/room1"),
        &[JSON, ("Authorization", &admin)],
        Some(r#"{"mix": false}"#),
    );
    assert_eq!(r.status, 204, "{}", r.body);
    s.shutdown();
}

#[test]
fn anonymous_offers_cannot_lock_a_protected_room_out() {
    let s = token_mode(|c| {
        c.max_participants = 5;
        c.reserved_for_authenticated = 0.2;
    });
    let u = s.url();
    let statuses: Vec<u16> = (0..5)
        .map(|_| {
            call(
                "POST",
                &format!("{u}/whip/lobby"),
                &[SDP],
                Some(&offer(Leg::Whip)),
            )
            .status
        })
        .collect();
    assert_eq!(
        statuses,
        [201, 201, 201, 201, 503],
        "anonymous callers take 4 of 5"
    );
    let t = bearer(&token("host", room_grants("r", true, true, false)));
    let r = call(
        "POST",
        &format!("{u}/whip/r"),
        &[SDP, ("Authorization", &t)],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!(
        r.status, 201,
        "the protected room's publisher gets in: {}",
        r.body
    );
    s.shutdown();
}

#[test]
fn rooms_have_a_limit_of_their_own_with_places_kept_for_tokens() {
    let s = token_mode(|c| {
        c.max_participants_per_room = 3;
        c.reserved_for_authenticated = 0.3;
    });
    let u = s.url();
    let anon: Vec<u16> = (0..3)
        .map(|_| {
            call(
                "POST",
                &format!("{u}/whep/lobby"),
                &[SDP],
                Some(&offer(Leg::Whep)),
            )
            .status
        })
        .collect();
    assert_eq!(anon, [201, 201, 503]);
    let t = bearer(&token("v", room_grants("lobby", false, true, false)));
    let r = call(
        "POST",
        &format!("{u}/whep/lobby"),
        &[SDP, ("Authorization", &t)],
        Some(&offer(Leg::Whep)),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let r = call(
        "POST",
        &format!("{u}/whep/lobby"),
        &[SDP, ("Authorization", &t)],
        Some(&offer(Leg::Whep)),
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("room is full"), "{}", r.body);
    s.shutdown();
}

#[test]
fn one_source_cannot_pile_up_offers_that_never_connect() {
    let s = token_mode(|c| c.max_pending_offers_per_source = 3);
    let u = s.url();
    let statuses: Vec<u16> = (0..4)
        .map(|_| {
            call(
                "POST",
                &format!("{u}/whep/lobby"),
                &[SDP],
                Some(&offer(Leg::Whep)),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [201, 201, 201, 429]);
    // A caller with a credential is accountable for its own: not counted, not capped.
    let t = bearer(&token("loadtest", room_grants("lobby", false, true, false)));
    let statuses: Vec<u16> = (0..4)
        .map(|_| {
            call(
                "POST",
                &format!("{u}/whep/lobby"),
                &[SDP, ("Authorization", &t)],
                Some(&offer(Leg::Whep)),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [201, 201, 201, 201]);
    s.shutdown();
}

#[test]
fn cors_is_closed_unless_origins_are_configured() {
    let s = token_mode(|_| {});
    let u = s.url();
    let r = call(
        "OPTIONS",
        &format!("{u}/whip/lobby"),
        &[
            ("Origin", "https://evil.example"),
            ("Access-Control-Request-Method", "POST"),
        ],
        None,
    );
    assert_eq!(r.allow_origin, None);
    let r = call(
        "POST",
        &format!("{u}/whip/lobby"),
        &[SDP, ("Origin", "https://evil.example")],
        Some(&offer(Leg::Whip)),
    );
    assert_eq!((r.status, r.allow_origin), (201, None));
    s.shutdown();
}

// ---- The table of docs/security.md ------------------------------------------------------------

/// The callers of the table, in its column order.
const CALLERS: [&str; 8] = [
    "anonymous",
    "viewer",
    "publisher",
    "room admin",
    "global admin",
    "expired token",
    "token for another room",
    "unknown or retired key",
];

/// The `Authorization` value each caller sends.
fn credential(caller: &str) -> Option<String> {
    let g = |p, s, a| room_grants("r", p, s, a);
    let t = match caller {
        "anonymous" => return None,
        "viewer" => token("viewer", g(false, true, false)),
        "publisher" => token("owner", g(true, true, false)),
        "room admin" => token("moderator", g(false, false, true)),
        "global admin" => return Some(bearer(ADMIN_KEY)),
        "expired token" => token_with("k1", KEY, "owner", g(true, true, true), -3600),
        "token for another room" => token("owner", room_grants("elsewhere", true, true, true)),
        "unknown or retired key" => token_with("k0", RETIRED, "owner", g(true, true, true), 3600),
        other => unreachable!("{other}"),
    };
    Some(bearer(&t))
}

/// One route of the table: how to call it on room `r` (with a fresh session of the
/// publisher's, `owner`, where it acts on one).
struct Route {
    name: &'static str,
    method: &'static str,
    /// `{id}` and `{etag}` are the session's.
    path: &'static str,
    body: Option<fn() -> String>,
    headers: &'static [(&'static str, &'static str)],
    session: bool,
    /// The statuses, one per caller, in [`CALLERS`]' order.
    want: [u16; 8],
}

fn routes() -> Vec<Route> {
    fn sdp_whip() -> String {
        offer(Leg::Whip)
    }
    fn sdp_whep() -> String {
        offer(Leg::Whep)
    }
    fn sdp_join() -> String {
        offer(Leg::Join)
    }
    fn sdp_phone() -> String {
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n".into()
    }
    fn frag() -> String {
        "a=end-of-candidates\r\n".into()
    }
    fn mix() -> String {
        r#"{"mix": true}"#.into()
    }
    fn layer() -> String {
        r#"{"rid": null}"#.into()
    }
    fn data() -> String {
        r#"{"label": "chat", "text": "hello"}"#.into()
    }
    fn gate() -> String {
        r#"{"block_dtmf": true}"#.into()
    }
    fn media() -> String {
        r#"{"file": "a.wav"}"#.into()
    }
    const SDP_H: &[(&str, &str)] = &[SDP];
    const JSON_H: &[(&str, &str)] = &[JSON];
    const FRAG_H: &[(&str, &str)] = &[FRAG, ("If-Match", "{etag}")];
    //                       anon viewer pub  radmin admin expired other retired
    vec![
        Route {
            name: "POST /whip/{room}",
            method: "POST",
            path: "/whip/r",
            body: Some(sdp_whip),
            headers: SDP_H,
            session: false,
            want: [401, 403, 201, 403, 201, 401, 403, 401],
        },
        Route {
            name: "POST /whep/{room}",
            method: "POST",
            path: "/whep/r",
            body: Some(sdp_whep),
            headers: SDP_H,
            session: false,
            want: [401, 201, 201, 403, 201, 401, 403, 401],
        },
        Route {
            name: "POST /rooms/{room}/join",
            method: "POST",
            path: "/rooms/r/join",
            body: Some(sdp_join),
            headers: SDP_H,
            session: false,
            want: [401, 403, 201, 403, 201, 401, 403, 401],
        },
        Route {
            name: "POST /rooms/{room}/rtp",
            method: "POST",
            path: "/rooms/r/rtp",
            body: Some(sdp_phone),
            headers: SDP_H,
            session: false,
            want: [401, 403, 201, 403, 201, 401, 403, 401],
        },
        Route {
            name: "GET /rooms/{room}/ice-servers",
            method: "GET",
            path: "/rooms/r/ice-servers",
            body: None,
            headers: &[],
            session: false,
            want: [401, 200, 200, 403, 200, 401, 403, 401],
        },
        Route {
            name: "PATCH /whip/{room}/{id} (the publisher's)",
            method: "PATCH",
            path: "/whip/r/{id}",
            body: Some(frag),
            headers: FRAG_H,
            session: true,
            want: [401, 403, 204, 204, 204, 401, 403, 401],
        },
        Route {
            name: "GET /whip/{room}/{id}/room",
            method: "GET",
            path: "/whip/r/{id}/room",
            body: None,
            headers: &[],
            session: true,
            want: [401, 403, 200, 200, 200, 401, 403, 401],
        },
        Route {
            name: "DELETE /whip/{room}/{id}",
            method: "DELETE",
            path: "/whip/r/{id}",
            body: None,
            headers: &[],
            session: true,
            want: [401, 403, 200, 200, 200, 401, 403, 401],
        },
        Route {
            name: "GET /api/rooms",
            method: "GET",
            path: "/api/rooms",
            body: None,
            headers: &[],
            session: false,
            want: [401, 403, 403, 200, 200, 401, 200, 401],
        },
        // The table's gateway is no node of a cluster: who may ask gets 404, saying so.
        Route {
            name: "GET /api/cluster",
            method: "GET",
            path: "/api/cluster",
            body: None,
            headers: &[],
            session: false,
            want: [401, 403, 403, 404, 404, 401, 404, 401],
        },
        Route {
            name: "POST /api/cluster/drain",
            method: "POST",
            path: "/api/cluster/drain",
            body: None,
            headers: &[],
            session: false,
            want: [401, 403, 403, 403, 404, 401, 403, 401],
        },
        Route {
            name: "POST /api/cluster/handover",
            method: "POST",
            path: "/api/cluster/handover?to=b",
            body: None,
            headers: &[],
            session: false,
            want: [401, 403, 403, 403, 404, 401, 403, 401],
        },
        Route {
            name: "GET /api/rooms/{room}",
            method: "GET",
            path: "/api/rooms/r",
            body: None,
            headers: &[],
            session: true,
            want: [401, 403, 403, 200, 200, 401, 403, 401],
        },
        Route {
            name: "PATCH /api/rooms/{room}",
            method: "PATCH",
            path: "/api/rooms/r",
            body: Some(mix),
            headers: JSON_H,
            session: false,
            want: [401, 403, 403, 204, 204, 401, 403, 401],
        },
        Route {
            name: "PUT /api/rooms/{room}/participants/{id}/layer (the publisher's)",
            method: "PUT",
            path: "/api/rooms/r/participants/{id}/layer",
            body: Some(layer),
            headers: JSON_H,
            session: true,
            // Let through, the request is refused for what it asks: the session in the test
            // receives no simulcast publisher.
            want: [401, 403, 400, 400, 400, 401, 403, 401],
        },
        Route {
            name: "POST /api/rooms/{room}/data",
            method: "POST",
            path: "/api/rooms/r/data",
            body: Some(data),
            headers: JSON_H,
            session: true,
            want: [401, 403, 403, 200, 200, 401, 403, 401],
        },
        Route {
            name: "PATCH /api/rooms/{room}/participants/{id}",
            method: "PATCH",
            path: "/api/rooms/r/participants/{id}",
            body: Some(gate),
            headers: JSON_H,
            session: true,
            want: [401, 403, 403, 200, 200, 401, 403, 401],
        },
        Route {
            name: "POST /api/rooms/{room}/participants/{id}/media (the publisher's)",
            method: "POST",
            path: "/api/rooms/r/participants/{id}/media",
            body: Some(media),
            headers: JSON_H,
            session: true,
            // Let through, the request is refused for what it asks: the session in the test
            // (a WHIP publisher) receives no audio to play the file in.
            want: [401, 403, 403, 422, 422, 401, 403, 401],
        },
        Route {
            name: "DELETE /api/rooms/{room}/participants/{id}/media",
            method: "DELETE",
            path: "/api/rooms/r/participants/{id}/media",
            body: None,
            headers: &[],
            session: true,
            want: [401, 403, 403, 200, 200, 401, 403, 401],
        },
        Route {
            name: "DELETE /api/rooms/{room}/participants/{id}",
            method: "DELETE",
            path: "/api/rooms/r/participants/{id}",
            body: None,
            headers: &[],
            session: true,
            want: [401, 403, 403, 204, 204, 401, 403, 401],
        },
        Route {
            name: "GET /metrics",
            method: "GET",
            path: "/metrics",
            body: None,
            headers: &[],
            session: false,
            want: [401, 403, 403, 403, 200, 401, 403, 401],
        },
        Route {
            name: "GET /healthz",
            method: "GET",
            path: "/healthz",
            body: None,
            headers: &[],
            session: false,
            want: [200, 200, 200, 200, 200, 200, 200, 200],
        },
        Route {
            name: "GET /room/{room}",
            method: "GET",
            path: "/room/r",
            body: None,
            headers: &[],
            session: false,
            want: [200, 200, 200, 200, 200, 200, 200, 200],
        },
    ]
}

/// Where the table lives in docs/security.md.
const TABLE_START: &str = "<!-- access-table: made by crates/gateway/tests/access_control.rs; SECRELAY_BLESS=1 rewrites it -->";
const TABLE_END: &str = "<!-- /access-table -->";

#[test]
fn every_route_answers_every_caller_as_the_security_table_says() {
    // A file to play (`POST …/media`).
    let media = tempfile::tempdir().unwrap();
    let wav = secrelay_media::clip::wav_pcm16(8000, 1, &[0; 800]);
    std::fs::write(media.path().join("a.wav"), wav).unwrap();
    let s = token_mode(|c| {
        c.max_pending_offers_per_source = 10_000;
        c.media_dir = Some(media.path().to_owned());
    });
    let u = s.url();
    let owner = bearer(&token("owner", room_grants("r", true, true, false)));
    let mut got: BTreeMap<usize, [u16; 8]> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (ri, route) in routes().iter().enumerate() {
        let mut row = [0u16; 8];
        for (ci, caller) in CALLERS.iter().enumerate() {
            // A fresh session of the publisher's for each cell that acts on one.
            let (id, etag) = if route.session {
                let r = call(
                    "POST",
                    &format!("{u}/whip/r"),
                    &[SDP, ("Authorization", &owner)],
                    Some(&offer(Leg::Whip)),
                );
                assert_eq!(r.status, 201, "{}", r.body);
                (
                    r.location.unwrap().rsplit('/').next().unwrap().to_owned(),
                    r.etag.unwrap(),
                )
            } else {
                (String::new(), String::new())
            };
            let path = route.path.replace("{id}", &id);
            let auth = credential(caller);
            let mut headers: Vec<(&str, String)> = route
                .headers
                .iter()
                .map(|(k, v)| (*k, v.replace("{etag}", &etag)))
                .collect();
            if let Some(a) = &auth {
                headers.push(("Authorization", a.clone()));
            }
            let hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let body = route.body.map(|b| b());
            let r = call(route.method, &format!("{u}{path}"), &hs, body.as_deref());
            row[ci] = r.status;
            if r.status != route.want[ci] {
                wrong.push(format!(
                    "{} as {caller}: {} (want {}): {}",
                    route.name,
                    r.status,
                    route.want[ci],
                    r.body.trim()
                ));
            }
        }
        got.insert(ri, row);
    }
    s.shutdown();
    assert!(wrong.is_empty(), "cells that differ:\n{}", wrong.join("\n"));
    check_table(&render(&got));
}

fn render(got: &BTreeMap<usize, [u16; 8]>) -> String {
    let routes = routes();
    let mut t = format!(
        "| route | {} |\n|---|{}\n",
        CALLERS.join(" | "),
        "---|".repeat(CALLERS.len())
    );
    for (ri, row) in got {
        let cells: Vec<String> = row.iter().map(u16::to_string).collect();
        t += &format!("| `{}` | {} |\n", routes[*ri].name, cells.join(" | "));
    }
    t
}

fn check_table(table: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (Some(a), Some(b)) = (doc.find(TABLE_START), doc.find(TABLE_END)) else {
        panic!("docs/security.md has no {TABLE_START} … {TABLE_END} section");
    };
    let inside = &doc[a + TABLE_START.len()..b];
    let want = format!("\n{table}");
    if inside == want {
        return;
    }
    if std::env::var_os("SECRELAY_BLESS").is_some() {
        let new = format!("{}{}{}", &doc[..a + TABLE_START.len()], want, &doc[b..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    panic!("docs/security.md's access table differs from this run; SECRELAY_BLESS=1 rewrites it:\n{table}");
}
