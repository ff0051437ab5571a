//! Rooms across nodes (`cluster_pipe`), with a real Redis (Debian's `redis-server`, started
//! per test on a free loopback port) and certificates from a private CA made per test: a
//! publisher on node a, viewers on nodes b and c served there (not redirected), each node
//! receiving the publisher's packets once whatever its number of viewers; the pipes close with
//! their last viewer and break with their node; a node whose certificate another CA issued
//! gets no link, and its viewers are redirected to the room's node instead.
//!
//! Without `redis-server` the tests say so and pass, except with `CI` set, where they fail.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use secrelay_dtls::ca::{CaDir, Role};
use secrelay_dtls::KeyType;
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::redis::RedisServer;
use secrelay_testkit::{wait_for, Leg, Signaling, SimParticipant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A private CA in `dir` with a certificate for each of `nodes`.
fn ca(dir: &Path, nodes: &[&str]) {
    let ca = CaDir::init(dir, KeyType::EcdsaP256, false).unwrap();
    for n in nodes {
        ca.issue(n, Role::Both, KeyType::EcdsaP256, false).unwrap();
    }
}

/// Node `name` of the cluster in `redis`, with pipes whose certificates are in `certs`.
fn node(redis: &RedisServer, name: &str, certs: &Path) -> Server {
    node_with(redis, name, certs, ServeConfig::default())
}

fn node_with(redis: &RedisServer, name: &str, certs: &Path, config: ServeConfig) -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        drain_secs: 0.1,
        cluster_redis: Some(redis.url()),
        cluster_node: Some(name.into()),
        cluster_lease_secs: 1.5,
        // On IPv4 loopback unless `config` says where.
        cluster_pipe: config
            .cluster_pipe
            .or_else(|| Some("127.0.0.1:0".parse().unwrap())),
        cluster_pipe_ca: Some(certs.join("ca.pem")),
        cluster_pipe_cert: Some(certs.join(format!("{name}.pem"))),
        cluster_pipe_key: Some(certs.join(format!("{name}.key"))),
        ..config
    })
    .unwrap()
}

/// Nodes a and b (both with `config`), once both are registered.
fn two_nodes(redis: &RedisServer, certs: &Path, config: ServeConfig) -> (Server, Server) {
    let a = node_with(redis, "a", certs, config.clone());
    let b = node_with(redis, "b", certs, config);
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b"]
    });
    (a, b)
}

/// Nodes a (with `a_config`), b and c, once all three are registered.
fn three_nodes(
    redis: &RedisServer,
    certs: &Path,
    a_config: ServeConfig,
) -> (Server, Server, Server) {
    let a = node_with(redis, "a", certs, a_config);
    let (b, c) = (node(redis, "b", certs), node(redis, "c", certs));
    wait_for("three nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "b", "c"]
    });
    (a, b, c)
}

fn signaling(s: &Server) -> Signaling {
    Signaling::new(s.url()).with_admin(s.admin_key().expose())
}

fn metric(s: &Server, series: &str) -> u64 {
    signaling(s).metric(series).unwrap()
}

/// Drives `group` until each receiving member has `more` packets more than it had.
fn hear_more(group: &mut [SimParticipant], more: u64) -> bool {
    let start: Vec<u64> = group.iter().map(SimParticipant::received).collect();
    SimParticipant::drive_until(group, Duration::from_secs(20), |g| {
        g.iter()
            .zip(&start)
            .filter(|(p, _)| p.leg.receives())
            .all(|(p, s)| p.received() >= s + more)
    })
    .unwrap()
}

#[test]
fn viewers_on_other_nodes_are_served_there_through_one_pipe_per_node() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    ca(certs.path(), &["a", "b", "c"]);
    let (a, b, c) = three_nodes(&redis, certs.path(), ServeConfig::default());
    let epoch = Instant::now();
    let mut group =
        vec![SimParticipant::join(&signaling(&a), "r", Leg::Whip, LOCAL, epoch).unwrap()];
    group.push(SimParticipant::join(&signaling(&a), "r", Leg::Whep, LOCAL, epoch).unwrap());
    // Three viewers at b, one at c: each served where it asked (its resource is there).
    for s in [&b, &b, &b, &c] {
        let v = SimParticipant::join(&signaling(s), "r", Leg::Whep, LOCAL, epoch).unwrap();
        assert!(v.location.starts_with("/whep/r/"), "{}", v.location);
        group.push(v);
    }
    assert!(hear_more(&mut group, 50), "a viewer hears nothing");
    assert_eq!(a.gateway().stats().totals().participants, 2);
    assert_eq!(b.gateway().stats().totals().participants, 3);
    assert_eq!(c.gateway().stats().totals().participants, 1);
    assert_eq!(metric(&a, "secrelay_cluster_pipe_links"), 2);
    let (_, body) = signaling(&a).get("/api/cluster").unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let links: Vec<(&str, bool)> = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["node"].as_str().unwrap(),
                l["made_here"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(links, [("b", false), ("c", false)], "{v}");

    // The publisher's packets cross once per node: a sends one copy to b and one to c of each,
    // however many viewers b has.
    let (sent, to_b, to_c) = (
        metric(&a, "secrelay_cluster_pipe_sent_total"),
        metric(&b, "secrelay_cluster_pipe_received_total"),
        metric(&c, "secrelay_cluster_pipe_received_total"),
    );
    let published = group[0].sent;
    assert!(to_b > 0 && to_c > 0, "b {to_b}, c {to_c}");
    assert!(
        to_b <= published + 5 && to_c <= published + 5,
        "{published} published, b got {to_b}, c {to_c}"
    );
    assert!(
        sent >= to_b + to_c,
        "a sent {sent}, b and c got {to_b} + {to_c}"
    );
    for s in [&a, &b, &c] {
        for reason in ["bad", "replayed", "unknown_link"] {
            let series = format!("secrelay_cluster_pipe_drops_total{{reason=\"{reason}\"}}");
            assert_eq!(metric(s, &series), 0, "{series}");
        }
    }

    // c's viewer leaves: its replica closes, and a sends nothing more there.
    let viewer_c = group.pop().unwrap();
    assert_eq!(signaling(&c).delete(&viewer_c.location).unwrap(), 200);
    drop(viewer_c);
    wait_for("c's replica closed", Duration::from_secs(5), || {
        c.gateway().stats().totals().participants == 0
    });
    assert!(hear_more(&mut group, 20));
    let at_c = metric(&c, "secrelay_cluster_pipe_received_total");
    assert!(hear_more(&mut group, 50));
    assert_eq!(
        metric(&c, "secrelay_cluster_pipe_received_total"),
        at_c,
        "a still pipes to c"
    );

    // Drained, a sends a new viewer of its room away (it does not spread its viewers
    // otherwise), to the least loaded node: c, which has none now.
    let (status, _) = signaling(&a).post("/api/cluster/drain").unwrap();
    assert_eq!(status, 200);
    wait_for("c's record to count none", Duration::from_secs(5), || {
        participants_of(&a, "c") == 0
    });
    let v = SimParticipant::join(&signaling(&a), "r", Leg::Whep, LOCAL, epoch).unwrap();
    assert!(v.location.starts_with(&c.url()), "{}", v.location);
    drop(v);

    // b dies: its link breaks, and a goes on with its own viewer.
    b.shutdown();
    group.truncate(2);
    wait_for("a's link to b gone", Duration::from_secs(5), || {
        metric(&a, "secrelay_cluster_pipe_links") <= 1
    });
    assert!(metric(&a, "secrelay_cluster_pipe_links_lost_total") >= 1);
    assert!(hear_more(&mut group, 50));
    a.shutdown();
    c.shutdown();
}

#[test]
fn viewers_whose_rooms_node_goes_are_ended_so_that_they_join_again() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    ca(certs.path(), &["a", "b"]);
    let (a, b) = two_nodes(&redis, certs.path(), ServeConfig::default());
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&signaling(&a), "gone", Leg::Whip, LOCAL, epoch).unwrap(),
        SimParticipant::join(&signaling(&b), "gone", Leg::Whep, LOCAL, epoch).unwrap(),
    ];
    assert!(hear_more(&mut group, 25));
    // a goes: b's viewer is told (close_notify) and counted, and b keeps nothing of the room.
    a.shutdown();
    let mut viewer = group.pop().unwrap();
    let told = SimParticipant::drive_until(
        std::slice::from_mut(&mut viewer),
        Duration::from_secs(10),
        |v| v[0].peer_closed(),
    )
    .unwrap();
    assert!(told, "b's viewer was not told");
    assert_eq!(
        metric(&b, "secrelay_sessions_closed_total{reason=\"source_lost\"}"),
        1
    );
    wait_for("b empty", Duration::from_secs(5), || {
        b.gateway().stats().totals().participants == 0
    });
    b.shutdown();
}

#[test]
fn nodes_whose_pipes_listen_on_ipv6_link_and_carry_the_room() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    ca(certs.path(), &["a", "b"]);
    let v6 = ServeConfig {
        cluster_pipe: Some("[::1]:0".parse().unwrap()),
        ..ServeConfig::default()
    };
    let (a, b) = two_nodes(&redis, certs.path(), v6);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&signaling(&a), "six", Leg::Whip, LOCAL, epoch).unwrap(),
        SimParticipant::join(&signaling(&b), "six", Leg::Whep, LOCAL, epoch).unwrap(),
    ];
    assert!(group[1].location.starts_with("/whep/six/"), "served at b");
    assert!(hear_more(&mut group, 50));
    assert!(metric(&b, "secrelay_cluster_pipe_received_total") >= 50);
    a.shutdown();
    b.shutdown();
}

/// What `/api/cluster` at `s` says node `node` carries.
fn participants_of(s: &Server, node: &str) -> u64 {
    let (_, body) = signaling(s).get("/api/cluster").unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == node))
        .and_then(|n| n["participants"].as_u64())
        .unwrap_or(0)
}

#[test]
fn the_rooms_node_sends_its_viewers_to_the_least_loaded_nodes() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    ca(certs.path(), &["a", "b", "c"]);
    let spread = ServeConfig {
        cluster_spread_viewers: true,
        ..ServeConfig::default()
    };
    let (a, b, c) = three_nodes(&redis, certs.path(), spread);
    let epoch = Instant::now();
    let mut group =
        vec![SimParticipant::join(&signaling(&a), "big", Leg::Whip, LOCAL, epoch).unwrap()];
    assert!(
        group[0].location.starts_with("/whip/big/"),
        "the publisher stays"
    );
    wait_for(
        "a's record to count its publisher",
        Duration::from_secs(5),
        || participants_of(&a, "a") == 1,
    );
    // Each viewer asked of a goes to the emptiest node while one has fewer than a (b, then
    // c, by name on a tie), and is served there; then a keeps the next.
    for (at, n) in [(&b, "b"), (&c, "c")] {
        let v = SimParticipant::join(&signaling(&a), "big", Leg::Whep, LOCAL, epoch).unwrap();
        assert!(v.location.starts_with(&at.url()), "{}", v.location);
        group.push(v);
        wait_for(
            "its node's record to count it",
            Duration::from_secs(5),
            || participants_of(&a, n) == 1,
        );
    }
    let v = SimParticipant::join(&signaling(&a), "big", Leg::Whep, LOCAL, epoch).unwrap();
    assert!(v.location.starts_with("/whep/big/"), "{}", v.location);
    group.push(v);
    assert!(hear_more(&mut group, 50));
    for s in [&a, &b, &c] {
        assert_eq!(
            s.gateway().stats().totals().participants,
            1 + u64::from(s.url() == a.url())
        );
    }
    a.shutdown();
    b.shutdown();
    c.shutdown();
}

#[test]
fn a_node_another_ca_certified_gets_no_link_and_its_viewers_go_to_the_room() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    ca(ours.path(), &["a"]);
    // d's certificate names d, from a CA a does not trust (and d trusts only it).
    ca(theirs.path(), &["d"]);
    let a = node(&redis, "a", ours.path());
    let d = node(&redis, "d", theirs.path());
    wait_for("two nodes registered", Duration::from_secs(5), || {
        signaling(&a).cluster_nodes().unwrap() == ["a", "d"]
    });
    let epoch = Instant::now();
    let mut group =
        vec![SimParticipant::join(&signaling(&a), "r", Leg::Whip, LOCAL, epoch).unwrap()];
    let v = SimParticipant::join(&signaling(&d), "r", Leg::Whep, LOCAL, epoch).unwrap();
    assert!(v.location.starts_with(&a.url()), "{}", v.location);
    group.push(v);
    // A second viewer right after is redirected without another try (one failure counted).
    let v = SimParticipant::join(&signaling(&d), "r", Leg::Whep, LOCAL, epoch).unwrap();
    assert!(v.location.starts_with(&a.url()), "{}", v.location);
    group.push(v);
    assert!(hear_more(&mut group, 50));
    assert_eq!(metric(&a, "secrelay_cluster_pipe_links"), 0);
    assert_eq!(metric(&d, "secrelay_cluster_pipe_links"), 0);
    assert_eq!(metric(&d, "secrelay_cluster_pipe_link_failures_total"), 1);
    assert_eq!(d.gateway().stats().totals().participants, 0);
    a.shutdown();
    d.shutdown();
}

#[test]
fn cluster_pipe_settings_come_together_or_name_what_is_missing() {
    let base = ServeConfig {
        cluster_redis: Some("redis://127.0.0.1:1".into()),
        cluster_node: Some("a".into()),
        ..ServeConfig::default()
    };
    let e = ServeConfig {
        cluster_pipe: Some("127.0.0.1:0".parse().unwrap()),
        ..base.clone()
    }
    .check()
    .unwrap_err();
    assert!(e.0.contains("cluster_pipe_ca"), "{e}");
    let e = ServeConfig {
        cluster_pipe_cert: Some("x.pem".into()),
        ..base.clone()
    }
    .check()
    .unwrap_err();
    assert!(e.0.contains("cluster_pipe_cert is set"), "{e}");
    let e = ServeConfig {
        cluster_pipe: Some("0.0.0.0:7400".parse().unwrap()),
        ..base.clone()
    }
    .check()
    .unwrap_err();
    assert!(e.0.contains("not an unspecified one"), "{e}");
    let e = ServeConfig {
        cluster_spread_viewers: true,
        ..base.clone()
    }
    .check()
    .unwrap_err();
    assert!(
        e.0.contains("cluster_spread_viewers needs cluster_pipe"),
        "{e}"
    );
    let e = ServeConfig {
        cluster_pipe: Some("127.0.0.1:0".parse().unwrap()),
        cluster_redis: None,
        ..base
    }
    .check()
    .unwrap_err();
    assert!(e.0.contains("cluster_pipe needs cluster_redis"), "{e}");
}
