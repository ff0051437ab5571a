//! Gateways sharing a directory in a real Redis (`cluster_redis`, Debian's `redis-server` started
//! per test on a free loopback port): nodes register with leases, a room is owned by one node,
//! a new room goes to the node with the fewest participants, an offer that reaches another node
//! is redirected (307) to the owner and a WHIP/WHEP client that follows it plays; `/api/cluster`
//! shows the nodes and the rooms; a node that shuts down leaves at once; a standby gets new
//! rooms only when no other node lives; Redis restarted in the
//! middle of a call loses no media, and the nodes write their records and rooms again.
//!
//! Without `redis-server` the tests say so and pass, except with `CI` set, where they fail.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::redis::RedisServer;
use secrelay_testkit::{wait_for, Leg, Signaling, SimParticipant};
use secrelay_wire::bencode::Bencode;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LEASE_SECS: f64 = 1.5;

fn node(redis: &RedisServer, name: &str) -> Server {
    node_with(redis, name, ServeConfig::default())
}

fn node_with(redis: &RedisServer, name: &str, config: ServeConfig) -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        drain_secs: 0.1,
        cluster_redis: Some(redis.url()),
        cluster_node: Some(name.into()),
        cluster_lease_secs: LEASE_SECS,
        ..config
    })
    .unwrap()
}

fn signaling(s: &Server) -> Signaling {
    Signaling::new(s.url()).with_admin(s.admin_key().expose())
}

/// `GET /api/cluster` on `s`.
fn cluster(s: &Server) -> serde_json::Value {
    let (status, body) = signaling(s).get("/api/cluster").unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn metric(s: &Server, series: &str) -> u64 {
    signaling(s).metric(series).unwrap()
}

/// POSTs an offer to `path` on `s` without following a redirect: (status, Location).
fn post_once(s: &Server, path: &str, sdp: &str) -> (u16, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let resp = agent
        .post(&format!("{}{path}", s.url()))
        .header("Content-Type", "application/sdp")
        .send(sdp)
        .unwrap();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (resp.status().as_u16(), location)
}

fn until_heard(group: &mut [SimParticipant], packets: u64) -> bool {
    SimParticipant::drive_until(group, Duration::from_secs(20), |g| {
        g.iter()
            .filter(|p| p.leg.receives())
            .all(|p| p.received() >= packets)
    })
    .unwrap()
}

#[test]
fn rooms_are_owned_by_one_node_and_offers_elsewhere_are_sent_there() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let (a, b, c) = (node(&redis, "a"), node(&redis, "b"), node(&redis, "c"));
    wait_for("three nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b", "c"]
    });
    let v = cluster(&c);
    assert_eq!(v["node"], "c");
    assert_eq!(v["directory_up"], true);
    for n in v["nodes"].as_array().unwrap() {
        let lease = n["lease_ms"].as_i64().unwrap();
        assert!(lease > 0 && lease <= 1500, "{n}");
    }
    assert_eq!(v["nodes"][1]["url"], b.url().as_str());

    // A publisher at b: all three are empty, so b (asked) takes the room.
    let epoch = Instant::now();
    let mut group =
        vec![SimParticipant::join(&signaling(&b), "r1", Leg::Whip, LOCAL, epoch).unwrap()];
    // An offer for r1 at c goes to b, the same path.
    let (status, location) = post_once(&c, "/whep/r1", "v=0\r\n");
    assert_eq!(status, 307);
    assert_eq!(
        location.as_deref(),
        Some(format!("{}/whep/r1", b.url()).as_str())
    );
    // A viewer that follows it plays, and its session lives at b.
    let viewer = SimParticipant::join(&signaling(&c), "r1", Leg::Whep, LOCAL, epoch).unwrap();
    assert!(viewer.location.starts_with(&b.url()), "{}", viewer.location);
    group.push(viewer);
    assert!(
        until_heard(&mut group, 50),
        "the redirected viewer hears nothing"
    );
    assert_eq!(b.gateway().stats().totals().participants, 2);
    assert_eq!(c.gateway().stats().totals().participants, 0);
    assert!(metric(&c, "secrelay_cluster_redirects_total") >= 2);
    assert_eq!(metric(&c, "secrelay_cluster_directory_up"), 1);

    // Once b has published its two participants, a new room asked of b goes to the emptiest
    // node (a and c have none: a by name).
    wait_for(
        "b's record to show its participants",
        Duration::from_secs(5),
        || cluster(&a)["nodes"][1]["participants"] == 2,
    );
    let (status, location) = post_once(&b, "/whip/r2", "v=0\r\n");
    assert_eq!(status, 307);
    assert_eq!(
        location.as_deref(),
        Some(format!("{}/whip/r2", a.url()).as_str())
    );
    let v = cluster(&b);
    assert_eq!(v["rooms"]["r1"], "b", "{v}");
    assert_eq!(v["rooms"]["r2"], "a", "{v}");

    // The session is ended at its node, through the URL the client was given.
    let now = Instant::now();
    for p in &mut group {
        p.close(now);
        assert_eq!(signaling(&b).delete(&p.location).unwrap(), 200);
    }
    wait_for("b to be empty", Duration::from_secs(5), || {
        b.gateway().stats().totals().participants == 0
    });
    // Its room is released once gone; r2, which b claimed for a and whose client never came,
    // is released by a's sweep.
    wait_for("r1 to be released", Duration::from_secs(5), || {
        cluster(&a)["rooms"].get("r1").is_none()
    });
    wait_for("r2 to be swept", Duration::from_secs(15), || {
        cluster(&a)["rooms"].as_object().unwrap().is_empty()
    });

    // A node that shuts down leaves the directory at once, without waiting for its lease.
    c.shutdown();
    let left = Instant::now();
    wait_for("c to leave", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    assert!(
        left.elapsed() < Duration::from_secs_f64(LEASE_SECS),
        "c's key ran out instead"
    );
    a.shutdown();
    b.shutdown();
}

#[test]
fn redis_restarted_in_a_call_loses_no_media_and_the_directory_is_written_again() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let port = redis.port();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    let sig = signaling(&a);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, "call", Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "call", Leg::Join, LOCAL, epoch).unwrap(),
    ];
    assert!(until_heard(&mut group, 25));
    // A steady call writes nothing to the directory: only the nodes' records are renewed.
    let (scripts, sets) = (redis.calls("eval"), redis.calls("set"));
    SimParticipant::drive_until(&mut group, Duration::from_secs(3), |_| false).unwrap();
    assert_eq!(
        redis.calls("eval"),
        scripts,
        "a room was written while steady"
    );
    let renewals = redis.calls("set") - sets;
    assert!(
        renewals <= 2 * (3.0 / (LEASE_SECS / 3.0)) as u64 + 2,
        "{renewals} writes in 3 s"
    );

    // Redis goes away: media goes on, and a new room is served where it is asked for.
    drop(redis);
    let before: Vec<u64> = group.iter().map(SimParticipant::received).collect();
    SimParticipant::drive_until(&mut group, Duration::from_secs(2), |_| false).unwrap();
    for (p, n) in group.iter().zip(&before) {
        assert!(
            p.received() >= n + 50,
            "media stopped with Redis: {} then {}",
            n,
            p.received()
        );
    }
    wait_for(
        "a to see the directory gone",
        Duration::from_secs(5),
        || metric(&a, "secrelay_cluster_directory_up") == 0,
    );
    assert!(metric(&a, "secrelay_cluster_directory_errors_total") > 0);
    let lone = SimParticipant::join(&signaling(&b), "alone", Leg::Whip, LOCAL, epoch).unwrap();
    assert!(
        lone.location.starts_with("/whip/alone/"),
        "{}",
        lone.location
    );
    let (status, _) = signaling(&a).get("/api/cluster").unwrap();
    assert_eq!(status, 503);

    // It comes back, empty: the nodes write themselves and their rooms again.
    let redis = RedisServer::start(port).expect("redis-server started before");
    wait_for(
        "the directory written again",
        Duration::from_secs(10),
        || {
            let (status, body) = signaling(&a).get("/api/cluster").unwrap();
            status == 200 && {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                v["nodes"].as_array().map(Vec::len) == Some(2)
                    && v["rooms"]["call"] == "a"
                    && v["rooms"]["alone"] == "b"
            }
        },
    );
    assert_eq!(metric(&a, "secrelay_cluster_directory_up"), 1);
    let before: Vec<u64> = group.iter().map(SimParticipant::received).collect();
    assert!(until_heard(
        &mut group,
        before.iter().copied().max().unwrap() + 25
    ));
    drop(lone);
    a.shutdown();
    b.shutdown();
    drop(redis);
}

/// A node with an ng socket whose telephony legs take ports in `ports`.
fn ng_node(redis: &RedisServer, name: &str, ports: &str) -> Server {
    node_with(
        redis,
        name,
        ServeConfig {
            ng: Some("127.0.0.1:0".parse().unwrap()),
            rtp_ports: ports.into(),
            ..ServeConfig::default()
        },
    )
}

fn ng_command(
    command: &str,
    call: &str,
    to: Option<&str>,
    sdp: Option<&str>,
) -> Vec<(String, Bencode)> {
    secrelay_testkit::ng::command(command, call, "alice", to, sdp)
}

/// The port of an SDP's audio section.
fn audio_port(sdp: &str) -> u16 {
    let m = sdp.lines().find(|l| l.starts_with("m=audio ")).unwrap();
    m.split(' ').nth(1).unwrap().parse().unwrap()
}

#[test]
fn an_ng_command_for_a_call_another_node_owns_is_forwarded_there() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let (a, b) = (
        ng_node(&redis, "a", "42000-42999"),
        ng_node(&redis, "b", "43000-43999"),
    );
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    let (mut ng_a, mut ng_b) = (
        Ng::new(a.ng_addr().unwrap()).unwrap(),
        Ng::new(b.ng_addr().unwrap()).unwrap(),
    );
    let mut caller = SocketPhone::bind(LOCAL, None, 0xca11).unwrap();
    let mut callee = SocketPhone::bind(LOCAL, None, 0xca1e).unwrap();
    // The offer at a: a takes the call. The answer, the query and the delete go to b, which
    // forwards each to a.
    let offer = ng_command("offer", "c1@proxy", None, Some(&caller.phone.offer()));
    let to_callee = ng_a.call(offer).unwrap()["sdp"].clone();
    assert!(
        (42000..43000).contains(&audio_port(&to_callee)),
        "{to_callee}"
    );
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let to_caller = ng_b
        .call(ng_command("answer", "c1@proxy", Some("bob"), Some(&answer)))
        .unwrap()["sdp"]
        .clone();
    assert!(
        (42000..43000).contains(&audio_port(&to_caller)),
        "{to_caller}"
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    for _ in 0..60 {
        caller.send(&[0xc1; 160]).unwrap();
        callee.send(&[0xb0; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    while caller.heard(0xb0) < 50 || callee.heard(0xc1) < 50 {
        assert!(Instant::now() < end, "the call through a is silent");
        std::thread::sleep(Duration::from_millis(10));
        caller.read();
        callee.read();
    }
    let q = ng_b
        .call(ng_command("query", "c1@proxy", None, None))
        .unwrap();
    assert_eq!(q["result"], "ok");
    assert_eq!(metric(&a, "secrelay_ng_calls"), 1);
    assert_eq!(metric(&b, "secrelay_ng_calls"), 0);
    ng_b.call(ng_command("delete", "c1@proxy", None, None))
        .unwrap();
    assert_eq!(metric(&a, "secrelay_ng_calls"), 0);
    assert!(metric(&b, "secrelay_cluster_redirects_total") >= 3);
    // A call nobody knows is answered where it is asked, as before.
    let unknown = ng_b.call(ng_command("query", "nobody@proxy", None, None));
    assert!(unknown.unwrap_err().to_string().contains("unknown call-id"));
    // A new call offered at b (no busier than a) stays at b.
    let mut other = SocketPhone::bind(LOCAL, None, 0x0e).unwrap();
    let offer = ng_command("offer", "c2@proxy", None, Some(&other.phone.offer()));
    let sdp = ng_b.call(offer).unwrap()["sdp"].clone();
    assert!((43000..44000).contains(&audio_port(&sdp)), "{sdp}");
    other.read();
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_drained_node_takes_no_new_room_and_keeps_its_own() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    let epoch = Instant::now();
    let mut group =
        vec![SimParticipant::join(&signaling(&a), "kept", Leg::Join, LOCAL, epoch).unwrap()];
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let drain = format!("{}/api/cluster/drain", a.url());
    let admin = format!("Bearer {}", a.admin_key().expose());
    // Only the admin may drain a node.
    let r = agent.post(&drain).send_empty().unwrap();
    assert_eq!(r.status(), 401);
    let mut r = agent
        .post(&drain)
        .header("Authorization", &admin)
        .send_empty()
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(
        (v["draining"].as_bool(), v["rooms"].as_u64()),
        (Some(true), Some(1)),
        "{v}"
    );
    // Load balancers are told, the directory says so, and a new room goes to b.
    let (status, _) = signaling(&a).get("/healthz").unwrap();
    assert_eq!(status, 503);
    assert_eq!(cluster(&b)["nodes"][0]["draining"], true);
    assert_eq!(metric(&a, "secrelay_cluster_draining"), 1);
    let (status, location) = post_once(&a, "/whip/fresh", "v=0\r\n");
    assert_eq!(status, 307);
    assert_eq!(
        location.as_deref(),
        Some(format!("{}/whip/fresh", b.url()).as_str())
    );
    // Its own room goes on, and takes a new member.
    group.push(SimParticipant::join(&signaling(&a), "kept", Leg::Join, LOCAL, epoch).unwrap());
    assert!(
        group[1].location.starts_with("/rooms/kept/"),
        "{}",
        group[1].location
    );
    assert!(until_heard(&mut group, 25));
    // Taken back.
    let r = agent
        .delete(&drain)
        .header("Authorization", &admin)
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, _) = signaling(&a).get("/healthz").unwrap();
    assert_eq!(status, 200);
    assert_eq!(cluster(&b)["nodes"][0]["draining"], false);
    drop(group);
    a.shutdown();
    b.shutdown();
}

/// A hot standby (`cluster_standby`) stays healthy and shown as one, gets no new room while
/// another node lives even when it carries fewer participants (an offer for a new room that
/// reaches it is sent to that node), and takes new rooms itself once that node is gone.
#[test]
fn a_standby_takes_new_rooms_only_when_no_other_node_lives() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let a = node(&redis, "a");
    let b = node_with(
        &redis,
        "b",
        ServeConfig {
            cluster_standby: true,
            ..ServeConfig::default()
        },
    );
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    let (status, _) = signaling(&b).get("/healthz").unwrap();
    assert_eq!(status, 200);
    let nodes = cluster(&a)["nodes"].clone();
    assert_eq!(
        (&nodes[0]["standby"], &nodes[1]["standby"]),
        (&false.into(), &true.into())
    );
    // a carries a participant and b none, yet new rooms go to a, from either node.
    let epoch = Instant::now();
    let first = SimParticipant::join(&signaling(&a), "busy", Leg::Join, LOCAL, epoch).unwrap();
    wait_for(
        "a's record shows its participant",
        Duration::from_secs(5),
        || cluster(&b)["nodes"][0]["participants"] == 1,
    );
    let (status, location) = post_once(&b, "/whip/fresh", "v=0\r\n");
    assert_eq!(status, 307);
    assert_eq!(
        location.as_deref(),
        Some(format!("{}/whip/fresh", a.url()).as_str())
    );
    drop(first);
    // With a gone, b takes the new room itself.
    a.shutdown();
    wait_for("a left", Duration::from_secs(5), || {
        signaling(&b).cluster_nodes().unwrap() == ["b"]
    });
    let mut group =
        vec![SimParticipant::join(&signaling(&b), "later", Leg::Join, LOCAL, epoch).unwrap()];
    group.push(SimParticipant::join(&signaling(&b), "later", Leg::Join, LOCAL, epoch).unwrap());
    assert!(until_heard(&mut group, 25));
    assert_eq!(cluster(&b)["rooms"]["later"], "b");
    drop(group);
    b.shutdown();
}

#[test]
fn a_cluster_needs_a_node_name() {
    let e = ServeConfig::from_toml("cluster_redis = \"redis://127.0.0.1:6379\"\n").unwrap_err();
    assert!(e.to_string().contains("cluster_node"), "{e}");
    let e = ServeConfig::from_toml(
        "cluster_redis = \"redis://127.0.0.1:6379\"\ncluster_node = \"a b\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("cluster_node"), "{e}");
    let e = ServeConfig::from_toml(
        "cluster_redis = \"redis://127.0.0.1:6379\"\ncluster_node = \"a\"\ncluster_lease_secs = 0.1\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("cluster_lease_secs"), "{e}");
    // Not a Redis URL: the start names the key.
    let e = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        cluster_redis: Some("memcached://127.0.0.1".into()),
        cluster_node: Some("a".into()),
        ..ServeConfig::default()
    })
    .expect_err("a non-Redis URL is refused");
    assert!(e.to_string().contains("cluster_redis"), "{e}");
}
