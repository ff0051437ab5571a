//! Telephony calls that survive their node's death: node `a` (`secrelay serve` as a process of
//! its own, media on 127.0.0.2) keeps its calls' states, sealed, in a real Redis; node `b`
//! (`cluster_takeover = ["a"]`) takes them over when `a` is killed with SIGKILL. The phones
//! keep sending to the addresses `a` gave them (on one machine 127.0.0.2 is already `b`'s too,
//! as a virtual address moved by keepalived would be) with the keys they have, and hear each
//! other again, the SDES ones past a rollover of their sequence numbers (their SRTP streams
//! resumed where `a` left them); ng `query` and `delete` work on `b` for the old calls. What
//! each call lost in the gap and how long it was silent are printed.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_lab::failover::PhoneCall;
use secrelay_srtp::Profile;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::redis::RedisServer;
use secrelay_testkit::{wait_for, Signaling};
use secrelay_wire::bencode::Bencode;

const MEDIA_A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const LEASE_SECS: f64 = 1.0;
const KEY: &str = "8d3b0f1e2c4a69758b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d";

fn command(name: &str, call: &str) -> Vec<(String, Bencode)> {
    vec![
        ("command".into(), Bencode::str(name)),
        ("call-id".into(), Bencode::str(call)),
        ("from-tag".into(), Bencode::str("caller")),
    ]
}

fn exchange_all(calls: &mut [PhoneCall]) {
    for c in calls.iter_mut() {
        c.exchange().unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
}

#[test]
fn a_killed_nodes_sdes_and_plain_calls_continue_on_its_standby() {
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("state.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let config = dir.path().join("a.toml");
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\nng = \"127.0.0.1:0\"\nworkers = 1\n\
             interfaces = [\"127.0.0.2\"]\nrtp_ports = \"44000-44999\"\n\
             cluster_redis = \"{}\"\ncluster_node = \"a\"\ncluster_lease_secs = {LEASE_SECS}\n\
             cluster_state_key = \"{}\"\n",
            redis.url(),
            key.display()
        ),
    )
    .unwrap();
    let mut a = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["serve", "--log", "info", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("secrelay serve starts");
    let (banner, log) = lab_support::serve_banner(&mut a);
    let a_ng: SocketAddr = banner
        .and_then(|b| b.ng)
        .unwrap_or_else(|| panic!("no ng address in the banner:\n{}", log.lock().unwrap()));
    let b = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 1,
        rtp_ports: "45000-45999".into(),
        cluster_redis: Some(redis.url()),
        cluster_node: Some("b".into()),
        cluster_lease_secs: LEASE_SECS,
        cluster_state_key: Some(key.clone()),
        cluster_takeover: vec!["a".into()],
        ..ServeConfig::default()
    })
    .unwrap();
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    wait_for("both nodes registered", Duration::from_secs(5), || {
        at_b.cluster_nodes().unwrap() == ["a", "b"]
    });

    // 20 calls at a: plain, SDES with AES-CM and with AES-GCM.
    let mut ng_a = Ng::new(a_ng).unwrap();
    let profiles = [
        None,
        Some(Profile::AesCm128HmacSha1_80),
        Some(Profile::AeadAes128Gcm),
    ];
    // Sequence numbers that roll over before the kill: the standby must resume each SRTP
    // stream with rollover counter 1, not 0.
    let mut calls: Vec<PhoneCall> = (0..20u32)
        .map(|n| {
            let id = format!("failover-{n}@proxy");
            let sdes = profiles[n as usize % profiles.len()];
            PhoneCall::open(&mut ng_a, &id, sdes, 0x1000 + n, 65_500).unwrap()
        })
        .collect();
    for c in &calls {
        assert_eq!(c.caller.phone.gateway.unwrap().ip(), MEDIA_A, "{}", c.id);
    }
    let end = Instant::now() + Duration::from_secs(10);
    while calls.iter().any(|c| c.heard().0 < 10 || c.heard().1 < 10) {
        assert!(Instant::now() < end, "the calls through a are silent");
        exchange_all(&mut calls);
    }
    // Each call's state is in the directory, sealed: no key of any phone in clear.
    let kept = redis.cli(&["HKEYS", "secrelay:calls:a"]);
    assert_eq!(kept.lines().count(), 20, "{kept}");
    let state = redis.cli(&["HGET", "secrelay:calls:a", &calls[1].id]);
    assert!(state.starts_with("sealed1:"), "{state}");
    assert!(!state.contains("inline:"), "{state}");
    // Past the rollover, and a while for the marks of where the SRTP streams stand to be
    // written (they move every 2^14 packets: a steady call then writes nothing).
    while calls.iter().any(|c| c.caller.phone.seq > 1_000) {
        exchange_all(&mut calls);
    }
    for _ in 0..60 {
        exchange_all(&mut calls);
    }
    let writes = redis.calls("hset");
    for _ in 0..25 {
        exchange_all(&mut calls);
    }
    assert_eq!(
        redis.calls("hset"),
        writes,
        "steady calls wrote their state"
    );

    // SIGKILL: no leaving, nothing released.
    a.kill().unwrap();
    a.wait().unwrap();
    let killed = Instant::now();
    // One call's port is held by someone else for a while (as an address keepalived has not
    // moved yet would be): that call is taken over once it is free.
    // (The dead process's sockets may take a moment to be let go: its io_uring is torn down
    // by the kernel after it exits.)
    let mut blocker = None;
    while blocker.is_none() {
        assert!(
            killed.elapsed() < Duration::from_millis(800),
            "the dead node's port stays held"
        );
        blocker = std::net::UdpSocket::bind(calls[0].caller.phone.gateway.unwrap()).ok();
    }
    let blocked_for = Duration::from_millis(2500);
    for c in calls.iter_mut() {
        c.mark();
    }
    let mut resumed: Vec<Option<Duration>> = vec![None; calls.len()];
    while resumed.iter().any(Option::is_none) {
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "calls still silent {:?} after the kill: {:?}",
            killed.elapsed(),
            calls
                .iter()
                .zip(&resumed)
                .filter(|(_, r)| r.is_none())
                .map(|(c, _)| c.id.as_str())
                .collect::<Vec<_>>()
        );
        exchange_all(&mut calls);
        if killed.elapsed() >= blocked_for {
            blocker = None;
        }
        for (r, c) in resumed.iter_mut().zip(&calls) {
            if r.is_none() && c.heard_since_mark() {
                *r = Some(killed.elapsed());
            }
        }
    }
    // A while of media after, for what was lost to be counted.
    for _ in 0..25 {
        exchange_all(&mut calls);
    }
    std::thread::sleep(Duration::from_millis(50));
    let lost: Vec<[usize; 2]> = calls
        .iter_mut()
        .map(|c| {
            c.caller.read();
            c.callee.read();
            c.lost_since_mark()
        })
        .collect();
    assert!(blocker.is_none());
    let held_up = resumed[0].unwrap();
    assert!(
        held_up >= blocked_for,
        "the blocked call resumed after {held_up:?}"
    );
    let mut gaps: Vec<f64> = resumed[1..]
        .iter()
        .map(|r| r.unwrap().as_secs_f64() * 1e3)
        .collect();
    gaps.sort_by(f64::total_cmp);
    eprintln!(
        "media again {:.0}–{:.0} ms after the kill (lease {LEASE_SECS} s), the call whose port was held {:.0} ms; packets lost per call each way (20 ms apart): {lost:?}",
        gaps[0],
        gaps[gaps.len() - 1],
        held_up.as_secs_f64() * 1e3
    );
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        20
    );
    assert_eq!(
        at_b.metric("secrelay_cluster_takeover_failures_total")
            .unwrap(),
        0
    );
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 20);
    // The directory: the calls are b's now, and their rooms too.
    assert_eq!(redis.cli(&["EXISTS", "secrelay:calls:a"]), "0");
    assert_eq!(
        redis.cli(&["HKEYS", "secrelay:calls:b"]).lines().count(),
        20
    );
    assert_eq!(
        redis.cli(&["GET", &format!("secrelay:room:call:{}", calls[0].id)]),
        "b"
    );

    // ng on b answers for the old calls: query, then delete.
    let mut ng_b = Ng::new(b.ng_addr().unwrap()).unwrap();
    for c in &calls {
        let q = ng_b.call(command("query", &c.id)).unwrap();
        assert_eq!(q["result"], "ok", "{q:?}");
    }
    for c in &calls {
        ng_b.call(command("delete", &c.id)).unwrap();
    }
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 0);
    wait_for(
        "the ended calls' states removed",
        Duration::from_secs(5),
        || redis.cli(&["EXISTS", "secrelay:calls:b"]) == "0",
    );
    b.shutdown();
}
