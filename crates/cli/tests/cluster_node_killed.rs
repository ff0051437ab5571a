//! A cluster node killed with SIGKILL (`secrelay serve` as a process of its own, sharing a real
//! Redis with a second node): while its lease runs, offers for its room are still sent to it;
//! once the lease is out, the room is placed on the living node and a publisher there is taken,
//! within the lease plus one renewal of the kill (its key, still naming the dead node, is
//! claimed over). Nothing of the dead node is left in the directory's view.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::redis::RedisServer;
use secrelay_testkit::{wait_for, Leg, Signaling, SimParticipant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const LEASE_SECS: f64 = 1.5;

/// POSTs an offer without following a redirect: (status, Location).
fn post_once(base: &str, path: &str, sdp: &str) -> (u16, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    match agent
        .post(&format!("{base}{path}"))
        .header("Content-Type", "application/sdp")
        .send(sdp)
    {
        Ok(r) => (
            r.status().as_u16(),
            r.headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ),
        Err(_) => (0, None),
    }
}

#[test]
fn a_killed_nodes_room_goes_to_a_living_node_once_its_lease_is_out() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("a.toml");
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\nworkers = 1\n\
             cluster_redis = \"{}\"\ncluster_node = \"a\"\ncluster_lease_secs = {LEASE_SECS}\n",
            redis.url()
        ),
    )
    .unwrap();
    let (mut a, banner, log) = lab_support::serve_config(&config, &[]);
    let a_url = banner
        .and_then(|b| b.url())
        .unwrap_or_else(|| panic!("no address in the banner:\n{}", log.lock().unwrap()));
    let b = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        cluster_redis: Some(redis.url()),
        cluster_node: Some("b".into()),
        cluster_lease_secs: LEASE_SECS,
        ..ServeConfig::default()
    })
    .unwrap();
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    wait_for("both nodes registered", Duration::from_secs(5), || {
        at_b.cluster_nodes().unwrap() == ["a", "b"]
    });

    // A publisher at a: the room is a's.
    let epoch = Instant::now();
    let first =
        SimParticipant::join(&Signaling::new(&a_url), "stage", Leg::Whip, LOCAL, epoch).unwrap();
    let (status, location) = post_once(&b.url(), "/whip/stage", "v=0\r\n");
    assert_eq!(status, 307);
    assert_eq!(location, Some(format!("{a_url}/whip/stage")));

    // SIGKILL: no leaving, no release.
    a.kill().unwrap();
    a.wait().unwrap();
    let killed = Instant::now();
    drop(first);
    // While a's lease runs, b still sends the room's offers to a.
    let mut redirected_to_dead = 0;
    let mut taken = None;
    while killed.elapsed() < Duration::from_secs(10) {
        match post_once(&b.url(), "/whip/stage", "v=0\r\n") {
            (307, _) => redirected_to_dead += 1,
            // Placed here now: the offer is read (and refused: it is no SDP).
            (400, _) => {
                taken = Some(killed.elapsed());
                break;
            }
            other => panic!("unexpected answer {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let taken = taken.expect("the room was never placed on b");
    assert!(
        taken <= Duration::from_secs_f64(LEASE_SECS * 4.0 / 3.0 + 0.5),
        "b took the room {taken:?} after the kill (lease {LEASE_SECS} s)"
    );
    assert!(
        redirected_to_dead > 0,
        "b never sent the room to a after the kill"
    );
    eprintln!(
        "the room went to b {:.0} ms after the kill ({redirected_to_dead} offers were sent to the dead node meanwhile)",
        taken.as_secs_f64() * 1e3
    );
    // A publisher is taken at b, and the directory shows b alone, owning the room.
    let second = SimParticipant::join(&at_b, "stage", Leg::Whip, LOCAL, epoch).unwrap();
    assert!(
        second.location.starts_with("/whip/stage/"),
        "{}",
        second.location
    );
    assert_eq!(at_b.cluster_nodes().unwrap(), ["b"]);
    let (_, body) = at_b.get("/api/cluster").unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["rooms"]["stage"], "b", "{v}");
    drop(second);
    b.shutdown();
}
