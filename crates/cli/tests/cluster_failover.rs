//! Telephony calls that survive their node's death: node `a` (`secrelay serve` as a process of
//! its own, media on 127.0.0.2) keeps its calls' states, sealed, in a real Redis; node `b`
//! (`cluster_takeover = ["a"]`) takes them over when `a` is killed with SIGKILL. The phones
//! keep sending to the addresses `a` gave them (on one machine 127.0.0.2 is already `b`'s too,
//! as a virtual address moved by keepalived would be) with the keys they have, and hear each
//! other again, the SDES ones past a rollover of their sequence numbers (their SRTP streams
//! resumed where `a` left them); ng `query` and `delete` work on `b` for the old calls. What
//! each call lost in the gap and how long it was silent are printed. A call keyed by DTLS-SRTP
//! towards rtpengine goes on at `b` with rtpengine's association (no new handshake).

// scripts/run-tests: alone (headless Chromium plays media here, and its ICE restart towards the
// standby has to finish in time; a second heavy test executable beside it would disturb the
// browser's timing)

mod lab_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_lab::failover::{PhoneCall, WebRtcCall};
use secrelay_srtp::Profile;
use secrelay_testkit::ice::{check, our_ice, with_ice};
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::redis::RedisServer;
use secrelay_testkit::{wait_for, Signaling};
use secrelay_wire::bencode::Bencode;

const MEDIA_A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const MEDIA_C: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const MEDIA_D: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));
const MEDIA_E: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5));
const LEASE_SECS: f64 = 1.0;
const KEY: &str = "8d3b0f1e2c4a69758b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d";

fn command(name: &str, call: &str) -> Vec<(String, Bencode)> {
    secrelay_testkit::ng::command(name, call, "caller", None, None)
}

/// A plain call that does ICE, through `ng`: the callee is "behind a NAT" (its `c=` names an
/// address nothing listens on) and its check nominates where it really is. The two phones and
/// the callee's leg's ICE credentials.
fn ice_call(ng: &mut Ng, id: &str) -> (SocketPhone, SocketPhone, (String, String)) {
    let phones = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut caller = SocketPhone::bind(phones, None, 0x1ce1).unwrap();
    let mut callee = SocketPhone::bind(phones, None, 0x1ce2).unwrap();
    let offer = with_ice(&caller.phone.offer(), "cal1");
    let offer = secrelay_testkit::ng::command("offer", id, "caller", None, Some(&offer));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let (ufrag, pwd, _) = our_ice(&to_callee).expect("ICE towards the callee");
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let hidden = with_ice(&answer, "cle1").replace("c=IN IP4 127.0.0.1", "c=IN IP4 192.0.2.77");
    let back = secrelay_testkit::ng::command("answer", id, "caller", Some("callee"), Some(&hidden));
    let to_caller = ng.call(back).unwrap()["sdp"].clone();
    caller.phone.accept_answer(&to_caller).unwrap();
    let leg = callee.phone.gateway.unwrap();
    let (class, ..) = check(&callee.socket, leg, (&ufrag, "cle1"), &pwd);
    assert_eq!(class, secrelay_wire::stun::Class::Success);
    (caller, callee, (ufrag, pwd))
}

/// Whether the callee of an ICE call, which sends nothing, hears the caller within 5 s.
fn ice_callee_hears(caller: &mut SocketPhone, callee: &mut SocketPhone) -> bool {
    let before = callee.heard(0xca);
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        caller.send(&[0xca; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        callee.read();
        if callee.heard(0xca) >= before + 5 {
            return true;
        }
    }
    false
}

fn exchange_all(calls: &mut [PhoneCall]) {
    for c in calls.iter_mut() {
        c.exchange().unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
}

/// A cluster of this test's own: a Redis, the sealing key, node `a` as a process of its own
/// (media on `media`, ports `a_ports`) and its standby `b` in this process (ports `b_ports`).
struct Pair {
    redis: RedisServer,
    dir: tempfile::TempDir,
    a: Reaped,
    a_ng: SocketAddr,
    /// `a`'s signaling, with its admin key.
    at_a: Signaling,
    b: Server,
}

impl Pair {
    /// `None` where redis-server cannot start (a failure instead under CI).
    fn start(media: IpAddr, a_ports: &str, b_ports: &str) -> Option<Pair> {
        Pair::start_with(media, a_ports, b_ports, true)
    }

    /// [`Pair::start`], `b` with the DTLS certificate `a` has only if `same_cert`.
    fn start_with(media: IpAddr, a_ports: &str, b_ports: &str, same_cert: bool) -> Option<Pair> {
        let redis = RedisServer::start(0)?;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("state.key");
        std::fs::write(&key, format!("{KEY}\n")).unwrap();
        // One DTLS certificate for both nodes: a WebRTC call taken over goes on with the
        // browser's DTLS association, which knows its fingerprint.
        let (cert, cert_key) = shared_certificate(dir.path());
        let config = dir.path().join("a.toml");
        std::fs::write(
            &config,
            format!(
                "http = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\nng = \"127.0.0.1:0\"\nworkers = 1\n\
                 interfaces = [\"{media}\"]\nrtp_ports = \"{a_ports}\"\ndrain_secs = 0.2\n\
                 cluster_redis = \"{}\"\ncluster_node = \"a\"\ncluster_lease_secs = {LEASE_SECS}\n\
                 cluster_state_key = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
                redis.url(),
                key.display(),
                cert.display(),
                cert_key.display()
            ),
        )
        .unwrap();
        let (a, banner, log) = lab_support::serve_config(&config, &[]);
        let banner = banner.unwrap_or_else(|| panic!("no banner:\n{}", log.lock().unwrap()));
        let (Some(a_ng), Some(url), Some(admin)) =
            (banner.ng, banner.url(), banner.admin_key_file.clone())
        else {
            panic!(
                "the banner lacks ng, URL or admin key:\n{}",
                log.lock().unwrap()
            );
        };
        let at_a = Signaling::new(url).with_admin(std::fs::read_to_string(admin).unwrap().trim());
        let b = Server::start(ServeConfig {
            cert: same_cert.then_some(cert),
            key: same_cert.then_some(cert_key),
            ..standby(&redis, &key, b_ports)
        })
        .unwrap();
        let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
        wait_for("both nodes registered", Duration::from_secs(5), || {
            at_b.cluster_nodes().unwrap() == ["a", "b"]
        });
        Some(Pair {
            redis,
            dir,
            a: Reaped(a),
            a_ng,
            at_a,
            b,
        })
    }
}

/// A DTLS certificate and its key as PEM files in `dir`, for every node of the pair.
fn shared_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let c = secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "media")
        .unwrap();
    let (pem, key) = c.to_pem();
    let (cert_path, key_path) = (dir.join("media.pem"), dir.join("media.key"));
    std::fs::write(&cert_path, pem).unwrap();
    std::fs::write(&key_path, key.as_bytes()).unwrap();
    (cert_path, key_path)
}

/// Node `a`'s process, killed (if it still runs) and reaped when dropped: a test that ends
/// with `a` alive, or panics, leaves no gateway behind.
struct Reaped(std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Node `b`: the standby of `a`, its telephony ports in `ports`.
fn standby(redis: &RedisServer, key: &std::path::Path, ports: &str) -> ServeConfig {
    ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 1,
        rtp_ports: ports.into(),
        drain_secs: 0.2,
        cluster_redis: Some(redis.url()),
        cluster_node: Some("b".into()),
        cluster_lease_secs: LEASE_SECS,
        cluster_state_key: Some(key.to_owned()),
        cluster_takeover: vec!["a".into()],
        // Every call opened at `a` stays there, however slowly the calls are opened (a
        // node that is not a standby would take new calls once `a`'s record shows it busier).
        cluster_standby: true,
        ..ServeConfig::default()
    }
}

/// Rounds of packets until every call's phones both heard the other since their mark (`each`
/// told the time since `from` after every round); how long after `from` each call did, or a
/// panic naming the calls still silent after `limit`.
fn until_heard(
    calls: &mut [PhoneCall],
    from: Instant,
    limit: Duration,
    mut each: impl FnMut(Duration),
) -> Vec<Duration> {
    let mut resumed: Vec<Option<Duration>> = vec![None; calls.len()];
    while resumed.iter().any(Option::is_none) {
        assert!(
            from.elapsed() < limit,
            "calls still silent {:?} on: {:?}",
            from.elapsed(),
            calls
                .iter()
                .zip(&resumed)
                .filter(|(_, r)| r.is_none())
                .map(|(c, _)| c.id.as_str())
                .collect::<Vec<_>>()
        );
        exchange_all(calls);
        each(from.elapsed());
        for (r, c) in resumed.iter_mut().zip(calls.iter()) {
            if r.is_none() && c.heard_since_mark() {
                *r = Some(from.elapsed());
            }
        }
    }
    resumed.into_iter().flatten().collect()
}

#[test]
fn a_killed_nodes_sdes_and_plain_calls_continue_on_its_standby() {
    let Some(Pair {
        redis,
        dir: _dir,
        mut a,
        a_ng,
        b,
        ..
    }) = Pair::start(MEDIA_A, "44000-44499", "45000-45499")
    else {
        return;
    };
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());

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
    // One more, its callee's media blocked (ng `block media`): the standby keeps it blocked.
    let mut gated = PhoneCall::open(&mut ng_a, "failover-gated@proxy", None, 0x1100, 100).unwrap();
    let gated_id = gated.id.clone();
    let block = |name: &str| {
        let mut c = command(name, &gated_id);
        c.retain(|(k, _)| k != "from-tag");
        c.push(("from-tag".into(), Bencode::str("callee")));
        c
    };
    ng_a.call(block("block media")).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while calls.iter().any(|c| c.heard().0 < 10 || c.heard().1 < 10) {
        assert!(Instant::now() < end, "the calls through a are silent");
        exchange_all(&mut calls);
    }
    for _ in 0..10 {
        gated.exchange().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    gated.caller.read();
    gated.callee.read();
    assert_eq!(gated.heard().0, 0, "the callee's media is blocked");
    assert!(gated.heard().1 > 0, "the caller's is not");
    // Each call's state is in the directory, sealed: no key of any phone in clear.
    let kept = redis.cli(&["HKEYS", "secrelay:calls:a"]);
    assert_eq!(kept.lines().count(), 21, "{kept}");
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
    gated.mark();
    let resumed = until_heard(&mut calls, killed, Duration::from_secs(15), |elapsed| {
        if elapsed >= blocked_for {
            blocker = None;
        }
    });
    // The gated call at b: the caller heard again, the callee's media still blocked until
    // b is told otherwise.
    let mut ng_b = Ng::new(b.ng_addr().unwrap()).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while gated.heard().1 <= gated.heard_at_mark().1 {
        assert!(Instant::now() < end, "the gated call is silent at b");
        gated.exchange().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gated.heard().0, 0, "the callee's media still blocked at b");
    ng_b.call(block("unblock media")).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while gated.heard().0 == 0 {
        assert!(
            Instant::now() < end,
            "the callee's media unblocked at b is not heard"
        );
        gated.exchange().unwrap();
        std::thread::sleep(Duration::from_millis(20));
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
    let held_up = resumed[0];
    assert!(
        held_up >= blocked_for,
        "the blocked call resumed after {held_up:?}"
    );
    let mut gaps: Vec<f64> = resumed[1..].iter().map(|r| r.as_secs_f64() * 1e3).collect();
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
        21
    );
    assert_eq!(
        at_b.metric("secrelay_cluster_takeover_failures_total")
            .unwrap(),
        0
    );
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 21);
    // The directory: the calls are b's now, and their rooms too.
    assert_eq!(redis.cli(&["EXISTS", "secrelay:calls:a"]), "0");
    assert_eq!(
        redis.cli(&["HKEYS", "secrelay:calls:b"]).lines().count(),
        21
    );
    assert_eq!(
        redis.cli(&["GET", &format!("secrelay:room:call:{}", calls[0].id)]),
        "b"
    );

    // ng on b answers for the old calls: query, then delete.
    calls.push(gated);
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

/// The browser's ICE restart through `ng`, sent again every 50 ms while it is refused (the
/// node has not taken the call yet), for 5 s at most.
fn restart_until_taken(c: &mut WebRtcCall, ng: &mut Ng) {
    let until = Instant::now() + Duration::from_secs(5);
    while !c.restart_ice(ng).unwrap() {
        assert!(Instant::now() < until, "{}: the re-INVITE is refused", c.id);
        c.exchange().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Exchanges media on WebRTC call `c` until both sides heard 10 packets more than they had,
/// and how long that took; a panic naming `what` after `limit`.
fn webrtc_heard_again(c: &mut WebRtcCall, what: &str, limit: Duration) -> Duration {
    let (from, before) = (Instant::now(), c.heard());
    loop {
        c.exchange().unwrap();
        let (p, w) = c.heard();
        if p > before.0 + 10 && w > before.1 + 10 {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < limit,
            "{what}: {} silent ({:?} heard, {before:?} before)",
            c.id,
            c.heard()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls with a WebRTC side survive their node too: 4 calls from a phone to a browser on
/// `a` (the browser's DTLS connected there); `a` killed with SIGKILL; `b` takes them over
/// with their SRTP keys, streams and SSRCs, and when each browser restarts ICE through its
/// signaling (a re-INVITE, here to `b`'s ng socket: `a`'s address moved), its DTLS association
/// goes on at `b` with no new handshake and both sides hear each other again.
#[test]
fn a_killed_nodes_webrtc_calls_continue_on_its_standby_after_an_ice_restart() {
    let Some(Pair {
        redis,
        dir: _dir,
        mut a,
        a_ng,
        b,
        ..
    }) = Pair::start(MEDIA_A, "44500-44599", "47000-47099")
    else {
        return;
    };
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    let mut ng_a = Ng::new(a_ng).unwrap();
    let epoch = Instant::now();
    let mut calls: Vec<WebRtcCall> = (0..4)
        .map(|n| WebRtcCall::open(&mut ng_a, &format!("webrtc-failover-{n}@proxy"), epoch).unwrap())
        .collect();
    let end = Instant::now() + Duration::from_secs(10);
    while calls.iter().any(|c| c.heard().0 < 20 || c.heard().1 < 20) {
        assert!(Instant::now() < end, "the calls through a are silent");
        for c in calls.iter_mut() {
            c.exchange().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The keys of the connected browsers reach the kept states within a second.
    for _ in 0..75 {
        for c in calls.iter_mut() {
            c.exchange().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let kept = redis.cli(&["HKEYS", "secrelay:calls:a"]);
    assert_eq!(kept.lines().count(), 4, "{kept}");

    a.kill().unwrap();
    a.wait().unwrap();
    let killed = Instant::now();
    let before: Vec<(usize, u64)> = calls.iter().map(WebRtcCall::heard).collect();
    let mut ng_b = Ng::new(b.ng_addr().unwrap()).unwrap();
    let mut restarted = vec![None; calls.len()];
    let mut resumed = vec![None; calls.len()];
    while resumed.iter().any(Option::is_none) {
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "restarted {restarted:?}, heard again {resumed:?}"
        );
        for (k, c) in calls.iter_mut().enumerate() {
            if restarted[k].is_none() && c.restart_ice(&mut ng_b).unwrap() {
                restarted[k] = Some(killed.elapsed());
            }
            c.exchange().unwrap();
            let (p, w) = c.heard();
            if resumed[k].is_none() && p > before[k].0 + 10 && w > before[k].1 + 10 {
                resumed[k] = Some(killed.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "WebRTC calls: re-INVITE taken {restarted:?}, both sides heard again {resumed:?} after the kill (lease {LEASE_SECS} s)"
    );
    for c in &calls {
        assert_eq!(c.browser.rx_errors, 0, "{}: SRTP that did not open", c.id);
    }
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        4
    );
    assert_eq!(
        at_b.metric("secrelay_cluster_takeover_failures_total")
            .unwrap(),
        0
    );
    // No new DTLS handshake at b: its sessions connected from the kept keys.
    assert_eq!(
        at_b.metric("secrelay_handshakes_total{result=\"ok\"}")
            .unwrap(),
        0
    );
    for c in &calls {
        let q = ng_b.call(command("query", &c.id)).unwrap();
        assert_eq!(q["result"], "ok", "{q:?}");
        ng_b.call(command("delete", &c.id)).unwrap();
    }
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 0);
    b.shutdown();
}

/// The same with a real browser: Chromium calls a phone through node `a` (chromium_ng.py in
/// the SIP proxy's place, with the phone); the script kills `a` with SIGKILL; the page's
/// connection goes `disconnected`, it restarts ICE, and its re-INVITE reaches `b` once `b` took
/// the call. Chromium's first DTLS association goes on at `b`: audio both ways, no handshake.
#[test]
fn chromium_calls_a_phone_through_a_node_that_dies_and_goes_on_at_its_standby() {
    let test = "chromium_calls_a_phone_through_a_node_that_dies_and_goes_on_at_its_standby";
    let Some(chromium) = lab_support::chromium(test) else {
        return;
    };
    let Some(Pair {
        redis: _redis,
        dir: _dir,
        a,
        a_ng,
        b,
        ..
    }) = Pair::start(MEDIA_A, "44600-44699", "47100-47199")
    else {
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop/webrtc/chromium_ng.py");
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120"])
        .arg("python3")
        .arg(script)
        .args(["--ng", &a_ng.to_string()])
        .args(["--kill-pid", &a.id().to_string()])
        .args(["--standby-ng", &b.ng_addr().unwrap().to_string()])
        .arg("--chromium")
        .arg(chromium)
        .output()
        .unwrap();
    let v = lab_support::script_json("chromium_ng.py", &out, "");
    eprintln!("chromium_ng.py: {}", v["failover"]);
    assert!(out.status.success(), "{v}");
    let f = &v["failover"];
    assert_ne!(f["remote_ufrag_before"], f["remote_ufrag_after"], "{v}");
    let n = |at: &str, way: &str, what: &str| f[at][way][what].as_u64().unwrap_or(0);
    assert!(
        n("after", "inbound", "packetsReceived") > n("before", "inbound", "packetsReceived") + 100,
        "{v}"
    );
    assert_eq!(f["after"]["transport"]["dtlsState"], "connected", "{v}");
    assert!(f["phone_heard_after"].as_u64().unwrap_or(0) >= 100, "{v}");
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        1
    );
    assert_eq!(
        at_b.metric("secrelay_handshakes_total{result=\"ok\"}")
            .unwrap(),
        0,
        "Chromium's DTLS association went on: no handshake at b"
    );
    b.shutdown();
}

/// A standby with another DTLS certificate than the dead node's cannot carry its WebRTC calls
/// (the browsers know the old fingerprint): such a call is counted as a failed takeover at
/// once, not tried again for 30 s, while its phone calls are taken over as ever.
#[test]
fn a_standby_with_another_certificate_fails_webrtc_calls_at_once_and_takes_the_others() {
    let Some(Pair {
        redis: _redis,
        dir: _dir,
        mut a,
        a_ng,
        b,
        ..
    }) = Pair::start_with(MEDIA_A, "44700-44799", "47200-47299", false)
    else {
        return;
    };
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    let mut ng_a = Ng::new(a_ng).unwrap();
    let mut webrtc = WebRtcCall::open(&mut ng_a, "other-cert@proxy", Instant::now()).unwrap();
    webrtc_heard_again(&mut webrtc, "through a", Duration::from_secs(10));
    let mut phones =
        vec![PhoneCall::open(&mut ng_a, "other-cert-phones@proxy", None, 0x5000, 9).unwrap()];
    phones[0].mark();
    until_heard(&mut phones, Instant::now(), Duration::from_secs(10), |_| {});
    // The browser's keys reach the kept state within a second.
    for _ in 0..75 {
        webrtc.exchange().unwrap();
        exchange_all(&mut phones);
    }
    a.kill().unwrap();
    a.wait().unwrap();
    let killed = Instant::now();
    phones[0].mark();
    until_heard(&mut phones, killed, Duration::from_secs(10), |_| {});
    wait_for(
        "the WebRTC call counted as failed",
        Duration::from_secs(5),
        || {
            at_b.metric("secrelay_cluster_takeover_failures_total")
                .unwrap()
                == 1
        },
    );
    eprintln!(
        "the WebRTC call given up {:.0} ms after the kill",
        killed.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        1
    );
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 1);
    b.shutdown();
}

/// A clean stop (SIGTERM) leaves the node's calls' states for its standby, which takes them
/// within a third of the lease of the node leaving (no lease to wait out); and a node that
/// shuts down and starts again (the standby here, as a rolling restart would) takes the calls
/// it carried back, on the same addresses with the same keys. A call from a phone to a
/// browser goes along: neither stop says a word to the browser (no `close_notify`), which
/// restarts ICE towards the node that took its call each time and goes on there.
#[test]
fn a_node_stopped_cleanly_hands_its_calls_over_and_a_restarted_node_takes_its_own_back() {
    let Some(Pair {
        redis,
        dir,
        mut a,
        a_ng,
        b,
        ..
    }) = Pair::start(MEDIA_C, "44500-44999", "45500-45999")
    else {
        return;
    };
    let key = dir.path().join("state.key");
    let mut ng_a = Ng::new(a_ng).unwrap();
    let mut calls: Vec<PhoneCall> = (0..6u32)
        .map(|n| {
            let sdes = [None, Some(Profile::AesCm128HmacSha1_80)][n as usize % 2];
            PhoneCall::open(
                &mut ng_a,
                &format!("handover-{n}@proxy"),
                sdes,
                0x3000 + n,
                100,
            )
            .unwrap()
        })
        .collect();
    // And a phone calling a browser.
    let mut webrtc = WebRtcCall::open(&mut ng_a, "webrtc-stopped@proxy", Instant::now()).unwrap();
    webrtc_heard_again(&mut webrtc, "through a", Duration::from_secs(10));
    for c in calls.iter_mut() {
        c.mark();
    }
    until_heard(&mut calls, Instant::now(), Duration::from_secs(10), |_| {});
    for _ in 0..60 {
        exchange_all(&mut calls);
        webrtc.exchange().unwrap();
    }

    // SIGTERM, the phones talking on while a stops.
    let stopping = Instant::now();
    let term = Command::new("kill")
        .args(["-TERM", &a.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    while a.try_wait().unwrap().is_none() {
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "a did not stop"
        );
        exchange_all(&mut calls);
        webrtc.exchange().unwrap();
    }
    // a stopped without a word to the browser (no close_notify), which restarts ICE through
    // its proxy towards b once b took the call, and goes on there.
    assert!(!webrtc.browser.peer_closed(), "a sent close_notify");
    let stopped = Instant::now();
    for c in calls.iter_mut() {
        c.mark();
    }
    let handed = until_heard(&mut calls, stopped, Duration::from_secs(10), |_| {});
    let mut ng_b = Ng::new(b.ng_addr().unwrap()).unwrap();
    restart_until_taken(&mut webrtc, &mut ng_b);
    webrtc_heard_again(&mut webrtc, "taken by b", Duration::from_secs(5));
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        7
    );
    for _ in 0..60 {
        exchange_all(&mut calls);
        webrtc.exchange().unwrap();
    }

    // b shuts down and starts again: its calls come back with it.
    b.shutdown();
    let down = Instant::now();
    assert_eq!(
        redis.cli(&["HLEN", "secrelay:calls:b"]),
        "7",
        "b's calls kept for its restart"
    );
    assert!(!webrtc.browser.peer_closed(), "b sent close_notify");
    let b2 = Server::start(ServeConfig {
        cert: Some(dir.path().join("media.pem")),
        key: Some(dir.path().join("media.key")),
        ..standby(&redis, &key, "45500-45999")
    })
    .unwrap();
    for c in calls.iter_mut() {
        c.mark();
    }
    let back = until_heard(&mut calls, down, Duration::from_secs(10), |_| {});
    // b started again on another WebRTC port: the browser restarts ICE towards it.
    let mut ng_b2 = Ng::new(b2.ng_addr().unwrap()).unwrap();
    restart_until_taken(&mut webrtc, &mut ng_b2);
    webrtc_heard_again(&mut webrtc, "taken back by b", Duration::from_secs(5));
    assert_eq!(webrtc.browser.rx_errors, 0);
    eprintln!(
        "handed over {:.0}–{:.0} ms after a exited (it stopped {:.0} ms after SIGTERM); back {:.0}–{:.0} ms after b shut down",
        handed.iter().min().unwrap().as_secs_f64() * 1e3,
        handed.iter().max().unwrap().as_secs_f64() * 1e3,
        (stopped - stopping).as_secs_f64() * 1e3,
        back.iter().min().unwrap().as_secs_f64() * 1e3,
        back.iter().max().unwrap().as_secs_f64() * 1e3,
    );
    let at_b2 = Signaling::new(b2.url()).with_admin(b2.admin_key().expose());
    assert_eq!(at_b2.metric("secrelay_ng_calls").unwrap(), 7);
    assert_eq!(
        redis.cli(&["TTL", "secrelay:calls:b"]),
        "-1",
        "taken back: kept for good"
    );
    for c in &calls {
        assert_eq!(ng_b2.call(command("query", &c.id)).unwrap()["result"], "ok");
        ng_b2.call(command("delete", &c.id)).unwrap();
    }
    ng_b2.call(command("delete", &webrtc.id)).unwrap();
    b2.shutdown();
}

/// A live node's calls handed to another on request (`POST /api/cluster/handover`): refused
/// towards itself or a node that is not in the cluster; kept, made again on the node, when the
/// directory refuses the transaction; then every call is heard again on the other node, which
/// answers for them, and the first holds none.
#[test]
fn a_live_nodes_calls_are_handed_to_another_node_on_request() {
    let Some(Pair {
        redis,
        dir: _dir,
        a: _a,
        a_ng,
        at_a,
        b,
    }) = Pair::start(MEDIA_D, "46000-46499", "46500-46999")
    else {
        return;
    };
    let mut ng_a = Ng::new(a_ng).unwrap();
    let mut calls: Vec<PhoneCall> = (0..4u32)
        .map(|n| {
            let sdes = [Some(Profile::AeadAes128Gcm), None][n as usize % 2];
            PhoneCall::open(&mut ng_a, &format!("handed-{n}@proxy"), sdes, 0x4000 + n, 7).unwrap()
        })
        .collect();
    // And one that does ICE: its callee is found only by the address its check nominated.
    let (mut ice_caller, mut ice_callee, (ufrag, pwd)) = ice_call(&mut ng_a, "ice@proxy");
    assert!(ice_callee_hears(&mut ice_caller, &mut ice_callee));
    // And a phone calling a browser, whose DTLS connects at a.
    let mut webrtc = WebRtcCall::open(&mut ng_a, "webrtc@proxy", Instant::now()).unwrap();
    webrtc_heard_again(&mut webrtc, "through a", Duration::from_secs(10));
    for c in calls.iter_mut() {
        c.mark();
    }
    until_heard(&mut calls, Instant::now(), Duration::from_secs(10), |_| {});
    // The nomination reaches the kept state at the next read of the legs' marks.
    std::thread::sleep(Duration::from_millis(1500));
    for (to, status) in [("a", 409), ("nobody", 409)] {
        let (got, body) = at_a
            .post(&format!("/api/cluster/handover?to={to}"))
            .unwrap();
        assert_eq!(got, status, "to {to}: {body}");
    }
    let (status, _) = at_a.post("/api/cluster/handover").unwrap();
    assert_eq!(status, 400);
    // A directory that refuses the transaction (Redis out of memory: reads answered, writes
    // refused) after the calls were ended here: 503, and the calls are made again here from
    // their states, on the same addresses with the same keys.
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = at_a.post("/api/cluster/handover?to=b").unwrap();
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(refused.0, 503, "{}", refused.1);
    for c in calls.iter_mut() {
        c.mark();
    }
    let kept = until_heard(&mut calls, Instant::now(), Duration::from_secs(10), |_| {});
    eprintln!(
        "kept after a refused hand-over: heard again within {:.0} ms",
        kept.iter().max().unwrap().as_secs_f64() * 1e3
    );
    assert!(
        ice_callee_hears(&mut ice_caller, &mut ice_callee),
        "the ICE callee, made again, is sent to where it had nominated"
    );
    // The browser was told nothing (no close_notify): its next consent check, with the
    // credentials it has, validates it at the call made again, and media goes on.
    let again = webrtc_heard_again(&mut webrtc, "kept at a", Duration::from_secs(6));
    assert!(!webrtc.browser.peer_closed());
    eprintln!(
        "the WebRTC call kept after a refused hand-over: heard again within {:.0} ms",
        again.as_secs_f64() * 1e3
    );
    assert_eq!(at_a.metric("secrelay_ng_calls").unwrap(), 6);
    assert_eq!(redis.cli(&["HLEN", "secrelay:calls:a"]), "6");
    assert_eq!(redis.cli(&["EXISTS", "secrelay:handover:b"]), "0");
    let asked = Instant::now();
    let (status, body) = at_a.post("/api/cluster/handover?to=b").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["to"].as_str(), v["calls"].as_u64()),
        (Some("b"), Some(6)),
        "{v}"
    );
    for c in calls.iter_mut() {
        c.mark();
    }
    let handed = until_heard(&mut calls, asked, Duration::from_secs(10), |_| {});
    eprintln!(
        "handed over on request: heard again {:.0}–{:.0} ms after it was asked",
        handed.iter().min().unwrap().as_secs_f64() * 1e3,
        handed.iter().max().unwrap().as_secs_f64() * 1e3
    );
    assert!(
        ice_callee_hears(&mut ice_caller, &mut ice_callee),
        "the ICE callee hears the caller through b before it sent anything there"
    );
    let leg = ice_callee.phone.gateway.unwrap();
    let (class, mapped, _) = check(&ice_callee.socket, leg, (&ufrag, "cle1"), &pwd);
    assert_eq!(
        (class, mapped),
        (
            secrelay_wire::stun::Class::Success,
            ice_callee.socket.local_addr().ok()
        ),
        "b answers the callee's checks with the credentials a gave it"
    );
    // The browser, told nothing, restarts ICE through its proxy (whose command at a goes to
    // b, which owns the call now) and goes on at b with the DTLS association it has.
    assert!(!webrtc.browser.peer_closed());
    restart_until_taken(&mut webrtc, &mut ng_a);
    webrtc_heard_again(&mut webrtc, "handed to b", Duration::from_secs(5));
    assert_eq!(webrtc.browser.rx_errors, 0);
    assert_eq!(at_a.metric("secrelay_ng_calls").unwrap(), 0);
    let at_b = Signaling::new(b.url()).with_admin(b.admin_key().expose());
    assert_eq!(at_b.metric("secrelay_ng_calls").unwrap(), 6);
    assert_eq!(
        at_a.metric("secrelay_sessions_closed_total{reason=\"handed_over\"}")
            .unwrap(),
        4,
        "the WebRTC call's two members, quietly, at the refused hand-over and at the hand-over"
    );
    assert_eq!(redis.cli(&["HLEN", "secrelay:calls:a"]), "0");
    assert_eq!(redis.cli(&["EXISTS", "secrelay:handover:b"]), "0");
    // The proxy's next command at a goes to b, which owns the call now.
    let q = ng_a.call(command("query", &calls[0].id)).unwrap();
    assert_eq!(q["result"], "ok", "{q:?}");
    let mut ng_b = Ng::new(b.ng_addr().unwrap()).unwrap();
    for c in &calls {
        ng_b.call(command("delete", &c.id)).unwrap();
    }
    ng_b.call(command("delete", "ice@proxy")).unwrap();
    ng_b.call(command("delete", "webrtc@proxy")).unwrap();
    b.shutdown();
}

/// The SDP of an ng reply that says `ok`.
fn ok_sdp(reply: &std::collections::HashMap<String, String>) -> String {
    assert_eq!(
        reply.get("result").map(String::as_str),
        Some("ok"),
        "{reply:?}"
    );
    reply["sdp"].clone()
}

/// Until `alice` hears `bob` and `bob` hears `alice` `n` more times than now (each phone's
/// payload filled with its own byte), sending both ways every 20 ms; false after `limit`.
fn both_hear(alice: &mut SocketPhone, bob: &mut SocketPhone, n: usize, limit: Duration) -> bool {
    let (a0, b0) = (alice.heard(0xb0), bob.heard(0xa1));
    let end = Instant::now() + limit;
    while Instant::now() < end {
        alice.send(&[0xa1; 160]).unwrap();
        bob.send(&[0xb0; 160]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        alice.read();
        bob.read();
        if alice.heard(0xb0) >= a0 + n && bob.heard(0xa1) >= b0 + n {
            return true;
        }
    }
    false
}

/// A call of `pair`'s node `a` whose callee side is keyed by DTLS-SRTP without ICE, with
/// rtpengine as the other end of the DTLS (plain Alice → secrelay → DTLS-SRTP → rtpengine →
/// plain Bob), audio heard both ways and its state (with the association's keys) kept, sealed.
/// Alice and Bob.
fn dtls_call(
    pair: &Pair,
    rtpengine: &mut lab_support::Rtpengine,
    rtpengine_role: &str,
) -> (SocketPhone, SocketPhone) {
    let ng_command = secrelay_testkit::ng::command;
    let mut ng_a = Ng::new(pair.a_ng).unwrap();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut alice = SocketPhone::bind(lo, None, 0xa11ce).unwrap();
    let mut bob = SocketPhone::bind(lo, None, 0xb0b).unwrap();
    let alice_offer = alice.phone.offer();
    let mut offer = ng_command("offer", "dtls@proxy", "alice", None, Some(&alice_offer));
    offer.extend([
        ("transport-protocol".into(), Bencode::str("RTP/SAVP")),
        ("SDES".into(), Bencode::List(vec![Bencode::str("off")])),
        ("ICE".into(), Bencode::str("remove")),
    ]);
    let to_callee = ok_sdp(&ng_a.call(offer).unwrap());
    assert!(to_callee.contains("a=setup:actpass"), "{to_callee}");
    let mut offer = ng_command("offer", "rtpe@proxy", "gw", None, Some(&to_callee));
    offer.extend([
        ("transport-protocol".into(), Bencode::str("RTP/AVP")),
        ("ICE".into(), Bencode::str("remove")),
    ]);
    let to_bob = ok_sdp(&rtpengine.ng.call(offer).unwrap());
    let bob_answer = bob.phone.answer_offer(&to_bob).unwrap();
    let mut answer = ng_command("answer", "rtpe@proxy", "gw", Some("bob"), Some(&bob_answer));
    if rtpengine_role == "passive" {
        answer.push(("DTLS".into(), Bencode::str("passive")));
    }
    let from_callee = ok_sdp(&rtpengine.ng.call(answer).unwrap());
    let role = format!("a=setup:{rtpengine_role}");
    assert!(from_callee.contains(&role), "{from_callee}");
    let answer = ng_command(
        "answer",
        "dtls@proxy",
        "alice",
        Some("callee"),
        Some(&from_callee),
    );
    let to_alice = ok_sdp(&ng_a.call(answer).unwrap());
    alice.phone.accept_answer(&to_alice).unwrap();
    assert_eq!(alice.phone.gateway.unwrap().ip(), MEDIA_E);
    assert!(
        both_hear(&mut alice, &mut bob, 5, Duration::from_secs(15)),
        "the call through a is silent: alice heard {}, bob {}",
        alice.heard(0xb0),
        bob.heard(0xa1)
    );
    // Kept: the offer, the answer, then the marks with the association's keys, sealed.
    let end = Instant::now() + Duration::from_secs(10);
    while pair.redis.calls("hset") < 3 {
        assert!(Instant::now() < end, "the call's keys were not kept");
        both_hear(&mut alice, &mut bob, 1, Duration::from_secs(1));
    }
    let state = pair.redis.cli(&["HGET", "secrelay:calls:a", "dtls@proxy"]);
    assert!(state.starts_with("sealed1:"), "{state}");
    assert!(!state.contains("inline:"), "{state}");
    (alice, bob)
}

/// Node `a` dies, `b` takes the DTLS-SRTP call over with the keys the association made, and
/// rtpengine's association goes on (it never handshakes again: a new handshake's keys would not
/// be its own).
#[test]
fn a_killed_nodes_dtls_srtp_call_continues_on_its_standby_with_the_phones_association() {
    let test = "a_killed_nodes_dtls_srtp_call_continues_on_its_standby_with_the_phones_association";
    // rtpengine the DTLS client: the standby, the server, waits for no handshake.
    dtls_call_taken_over(
        test,
        "active",
        (47500, 47599),
        ("47300-47399", "47400-47499"),
    );
}

/// As above with rtpengine the DTLS server: the standby, the client, begins no handshake of its
/// own (its replayed answer would otherwise send rtpengine a ClientHello before the keys).
#[test]
fn a_killed_nodes_dtls_srtp_call_as_the_client_continues_on_its_standby() {
    let test = "a_killed_nodes_dtls_srtp_call_as_the_client_continues_on_its_standby";
    dtls_call_taken_over(
        test,
        "passive",
        (48100, 48199),
        ("47900-47999", "48000-48099"),
    );
}

/// [`dtls_call`] with rtpengine in `rtpengine_role` (its ports `rtpe`), node `a` killed: both
/// phones hear each other through `b`, which made no handshake (`a`'s and `b`'s ports `ports`).
fn dtls_call_taken_over(test: &str, rtpengine_role: &str, rtpe: (u16, u16), ports: (&str, &str)) {
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, rtpe) else {
        return;
    };
    let Some(mut pair) = Pair::start(MEDIA_E, ports.0, ports.1) else {
        return;
    };
    let (mut alice, mut bob) = dtls_call(&pair, &mut rtpengine, rtpengine_role);
    pair.a.kill().unwrap();
    pair.a.wait().unwrap();
    let killed = Instant::now();
    assert!(
        both_hear(&mut alice, &mut bob, 10, Duration::from_secs(15)),
        "the call is silent at the standby: alice heard {}, bob {}",
        alice.heard(0xb0),
        bob.heard(0xa1)
    );
    println!(
        "DTLS-SRTP call (rtpengine {rtpengine_role}) heard again {} ms after the kill",
        killed.elapsed().as_millis()
    );
    let at_b = Signaling::new(pair.b.url()).with_admin(pair.b.admin_key().expose());
    let metric = |name: &str| at_b.metric(name).unwrap();
    assert_eq!(metric("secrelay_cluster_calls_taken_over_total"), 1);
    assert_eq!(metric("secrelay_cluster_takeover_failures_total"), 0);
    // No handshake at b: the keys are the ones a's handshake made.
    assert_eq!(metric("secrelay_handshakes_total{result=\"ok\"}"), 0);
}

/// A standby with another certificate than the one rtpengine's association knows cannot go on
/// with it: the call fails there at once (no retry makes the certificate the other), counted.
#[test]
fn a_standby_with_another_certificate_fails_a_dtls_srtp_call_at_once() {
    let test = "a_standby_with_another_certificate_fails_a_dtls_srtp_call_at_once";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (47800, 47899)) else {
        return;
    };
    let Some(mut pair) = Pair::start_with(MEDIA_E, "47600-47699", "47700-47799", false) else {
        return;
    };
    let _phones = dtls_call(&pair, &mut rtpengine, "active");
    pair.a.kill().unwrap();
    pair.a.wait().unwrap();
    let at_b = Signaling::new(pair.b.url()).with_admin(pair.b.admin_key().expose());
    // Well inside the 30 s a call that cannot be made yet is tried for.
    wait_for("the takeover's failure", Duration::from_secs(8), || {
        at_b.metric("secrelay_cluster_takeover_failures_total").ok() == Some(1)
    });
    assert_eq!(
        at_b.metric("secrelay_cluster_calls_taken_over_total")
            .unwrap(),
        0
    );
}
