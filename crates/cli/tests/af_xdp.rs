//! The AF_XDP media path: `secrelay serve --media-io af_xdp` in a network namespace of this
//! test's own, reached over a veth pair (native XDP on veth, XDP sockets in copy mode). Two
//! browsers in a room, a plain call whose caller is behind NAT (its leg latches to its real
//! address) and an SDES call all flow with their media read and written as raw frames: the
//! namespace's kernel UDP counters do not move while they do (no datagram of theirs reaches or
//! leaves through a socket), and the gateway counts what went through its XDP socket. Frames
//! whose UDP checksum does not check out are dropped and counted (`bad_frame`), and a spoofed
//! flood is still dropped by the filter in front.
//!
//! The gateway runs as `nobody` with only the capabilities the path needs (CAP_BPF,
//! CAP_NET_ADMIN and CAP_PERFMON for the filter, CAP_NET_RAW for the XDP sockets, CAP_IPC_LOCK
//! for their memory: what `packaging/secrelay-xdp.conf` gives the systemd service). Needs root
//! (namespaces, and the capabilities to hand on); without it the test says so and passes,
//! except under CI.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use secrelay_srtp::Profile;
use secrelay_testkit::netns::Netns;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};

/// The subnet of the veth pair, one per test process: 10.234.N.0/24.
fn subnet() -> u8 {
    (std::process::id() % 250) as u8
}

fn gateway_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 234, subnet(), 1)
}

fn here() -> Ipv4Addr {
    Ipv4Addr::new(10, 234, subnet(), 2)
}

const SHARED_PORT: u16 = 20000;

type Log = std::sync::Arc<std::sync::Mutex<String>>;

/// The namespace, the gateway in it, and this side's end of the veth pair; None (skipped)
/// where this process may not make them.
fn gateway(
    test: &str,
) -> Option<(
    Netns,
    std::process::Child,
    Signaling,
    SocketAddr,
    Log,
    String,
)> {
    let ns = match Netns::new() {
        Ok(ns) => ns,
        Err(e) => {
            lab_support::missing(test, &format!("no network namespace: {e}"));
            return None;
        }
    };
    let (outside, inside) = (
        format!("sao{}", std::process::id()),
        format!("sai{}", std::process::id()),
    );
    ns.veth(
        &outside,
        &format!("{}/24", here()),
        &inside,
        &format!("{}/24", gateway_ip()),
    )
    .expect("a veth pair into the namespace");
    // This end computes its UDP checksums (veth's offload would leave them unfinished, and
    // the XDP socket gets no word that they are).
    secrelay_xsk::set_tx_checksum_offload(&outside, false).expect("checksum offload off");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("af_xdp.toml");
    let gw = gateway_ip();
    std::fs::write(
        &config,
        format!(
            "http = \"{gw}:8080\"\nudp = \"{gw}:{SHARED_PORT}\"\nng = \"{gw}:2223\"\n\
             workers = 1\nrtp_ports = \"30000-30199\"\nplain_latch = \"first-packets\"\n\
             drain_secs = 0.2\nxdp = \"{inside}\"\nmedia_io = \"af_xdp\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for (p, mode) in [(dir.path(), 0o755), (config.as_path(), 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let caps = "+bpf,+net_admin,+perfmon,+net_raw,+ipc_lock";
    let mut cmd = ns.command("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(env!("CARGO_BIN_EXE_secrelay"))
        .args(["serve", "--log", "info", "--config"])
        .arg(&config);
    let (child, banner, log) = lab_support::spawn_serve(cmd);
    let banner = banner.unwrap_or_else(|| panic!("no banner:\n{}", log.lock().unwrap()));
    assert!(
        log.lock().unwrap().contains("XDP socket open"),
        "{}",
        log.lock().unwrap()
    );
    let admin = std::fs::read_to_string(banner.admin_key_file.clone().unwrap()).unwrap();
    let sig = Signaling::new(banner.url().unwrap()).with_admin(admin.trim());
    drop(dir);
    Some((ns, child, sig, banner.ng.unwrap(), log, outside))
}

/// A call `id` through the ng socket between two phones on [`here`]: plain, or SDES with
/// `sdes`; with `signal`, the caller's SDP names that address instead of its own.
fn call(
    ng: &mut Ng,
    id: &str,
    sdes: Option<Profile>,
    signal: Option<SocketAddr>,
) -> (SocketPhone, SocketPhone) {
    let mut caller = SocketPhone::bind(IpAddr::V4(here()), sdes, 0x1111).unwrap();
    let mut callee = SocketPhone::bind(IpAddr::V4(here()), sdes, 0x2222).unwrap();
    let real = caller.phone.addr;
    if let Some(a) = signal {
        caller.phone.addr = a;
    }
    let offer =
        secrelay_testkit::ng::command("offer", id, "caller", None, Some(&caller.phone.offer()));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let back = secrelay_testkit::ng::command("answer", id, "caller", Some("callee"), Some(&answer));
    let to_caller = ng.call(back).unwrap()["sdp"].clone();
    caller.phone.accept_answer(&to_caller).unwrap();
    caller.phone.addr = real;
    (caller, callee)
}

fn exchange(caller: &mut SocketPhone, callee: &mut SocketPhone) {
    caller.send(&[0xc1; 160]).unwrap();
    callee.send(&[0xb0; 160]).unwrap();
    caller.read();
    callee.read();
}

fn received(group: &[SimParticipant]) -> u64 {
    group
        .iter()
        .flat_map(|p| p.streams.values())
        .map(|s| s.received)
        .sum()
}

/// Drives the room for `d`.
fn drive(group: &mut [SimParticipant], d: Duration) {
    let until = Instant::now() + d;
    SimParticipant::drive_until(group, d, |_| Instant::now() > until).unwrap();
}

#[test]
fn browsers_and_phones_flow_through_the_xdp_socket_past_the_socket_layer() {
    let test = "browsers_and_phones_flow_through_the_xdp_socket_past_the_socket_layer";
    let Some((ns, mut child, sig, ng_addr, log, outside)) = gateway(test) else {
        return;
    };
    let metric = |s: &str| sig.metric(s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(metric("secrelay_media_io_workers{path=\"af_xdp\"}"), 1);

    // Two browsers in a room: ICE, DTLS and SRTP all through the XDP socket.
    let epoch = Instant::now();
    let mut group: Vec<SimParticipant> = (0..2)
        .map(|_| {
            SimParticipant::join(&sig, "stage", Leg::Join, IpAddr::V4(here()), epoch)
                .unwrap_or_else(|e| panic!("{e}\n{}", log.lock().unwrap()))
        })
        .collect();
    let up = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter().all(|p| p.phase == Phase::Connected)
    })
    .unwrap();
    assert!(up, "{group:?}\n{}", log.lock().unwrap());
    // A plain call whose caller is behind NAT, and an SDES call.
    let mut ng = Ng::new(ng_addr).unwrap();
    let (mut caller, mut callee) = call(
        &mut ng,
        "nat",
        None,
        Some("192.0.2.50:7000".parse().unwrap()),
    );
    let (mut s_caller, mut s_callee) =
        call(&mut ng, "sdes", Some(Profile::AesCm128HmacSha1_80), None);
    for _ in 0..50 {
        exchange(&mut caller, &mut callee);
        exchange(&mut s_caller, &mut s_callee);
        std::thread::sleep(Duration::from_millis(10));
        if caller.heard(0xb0) > 5 && callee.heard(0xc1) > 5 && s_caller.heard(0xb0) > 5 {
            break;
        }
    }
    assert!(
        caller.heard(0xb0) > 5 && callee.heard(0xc1) > 5,
        "the NAT'd call does not flow: {} {}\n{}",
        caller.heard(0xb0),
        callee.heard(0xc1),
        log.lock().unwrap()
    );

    // Media alone for a while: none of it goes through the namespace's UDP sockets.
    let udp_before = ns.udp_counters().unwrap();
    let redirected_before = metric("secrelay_xdp_redirected_total");
    let rx_before = received(&group);
    let heard_before = [
        caller.heard(0xb0),
        callee.heard(0xc1),
        s_caller.heard(0xb0),
        s_callee.heard(0xc1),
    ];
    let rounds = 20;
    for _ in 0..rounds {
        drive(&mut group, Duration::from_millis(50));
        exchange(&mut caller, &mut callee);
        exchange(&mut s_caller, &mut s_callee);
    }
    drive(&mut group, Duration::from_millis(200));
    caller.read();
    callee.read();
    s_caller.read();
    s_callee.read();
    let udp_after = ns.udp_counters().unwrap();
    let heard = [
        caller.heard(0xb0) - heard_before[0],
        callee.heard(0xc1) - heard_before[1],
        s_caller.heard(0xb0) - heard_before[2],
        s_callee.heard(0xc1) - heard_before[3],
    ];
    let redirected = metric("secrelay_xdp_redirected_total") - redirected_before;
    eprintln!(
        "{redirected} datagrams through the XDP socket; the phones heard {heard:?} of {rounds} each; \
         the sockets took {} and sent {}",
        udp_after["InDatagrams"] - udp_before["InDatagrams"],
        udp_after["OutDatagrams"] - udp_before["OutDatagrams"]
    );
    for (i, h) in heard.iter().enumerate() {
        assert!(*h + 1 >= rounds, "phone {i} heard {h} of {rounds}");
    }
    assert!(
        received(&group) > rx_before + 20,
        "the browsers stopped hearing each other"
    );
    assert!(
        redirected >= 4 * rounds as u64,
        "only {redirected} datagrams through the XDP socket"
    );
    for counter in ["InDatagrams", "OutDatagrams", "NoPorts", "InErrors"] {
        assert_eq!(
            udp_after[counter], udp_before[counter],
            "the kernel's UDP {counter} moved: media went through a socket"
        );
    }
    assert_eq!(metric("secrelay_drops_total{reason=\"bad_frame\"}"), 0);

    // Frames with unfinished checksums (this end's offload back on) are dropped and counted.
    secrelay_xsk::set_tx_checksum_offload(&outside, true).unwrap();
    let heard = callee.heard(0xc1);
    for _ in 0..10 {
        caller.send(&[0xc1; 160]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    callee.read();
    assert_eq!(metric("secrelay_drops_total{reason=\"bad_frame\"}"), 10);
    assert_eq!(callee.heard(0xc1), heard, "a bad frame was relayed");
    secrelay_xsk::set_tx_checksum_offload(&outside, false).unwrap();

    // The filter in front still drops what was not admitted.
    let flood = secrelay_testkit::netns::spoofed_sockets([10, 235], 64).unwrap();
    let dropped = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}");
    let udp_before = ns.udp_counters().unwrap();
    for s in &flood {
        s.send_to(&[0x80u8; 40], (gateway_ip(), SHARED_PORT))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}") - dropped,
        flood.len() as u64
    );
    assert_eq!(
        ns.udp_counters().unwrap()["InDatagrams"],
        udp_before["InDatagrams"]
    );

    // The calls end and their ports close.
    for id in ["nat", "sdes"] {
        ng.call(secrelay_testkit::ng::command(
            "delete", id, "caller", None, None,
        ))
        .unwrap();
    }
    let end = Instant::now() + Duration::from_secs(5);
    while metric("secrelay_rtp_ports_in_use") > 0 {
        assert!(Instant::now() < end, "the call's ports were not given back");
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in &mut group {
        p.close(Instant::now());
    }
    let _ = child.kill();
    let _ = child.wait();
}
