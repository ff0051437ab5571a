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
//! (namespaces, and the capabilities to hand on), and a kernel that allows XDP sockets; without
//! them the test says so and passes, except under CI.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use lab_support::veth::{self, call, exchange, received, Log};
use secrelay_srtp::Profile;
use secrelay_testkit::netns::Netns;
use secrelay_testkit::ng::{command as ng_command, Ng};
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};
use secrelay_wire::bencode::Bencode;

/// The subnet of a test's veth pair, one per test process: 10.`net`.N.0/24.
fn subnet(net: u8) -> (Ipv4Addr, Ipv4Addr) {
    let n = (std::process::id() % 250) as u8;
    (Ipv4Addr::new(10, net, n, 1), Ipv4Addr::new(10, net, n, 2))
}

/// The gateway's end of the first test's pair, and this side's.
fn gateway_ip() -> Ipv4Addr {
    subnet(234).0
}

fn here() -> Ipv4Addr {
    subnet(234).1
}

const SHARED_PORT: u16 = 20000;

/// The namespace, the gateway in it with `workers` workers on a veth pair with as many queues
/// (10.`net`.N.0/24, interfaces named from `prefix`), and this side's end of the pair; None
/// (skipped) where this process may not make them.
fn gateway(
    test: &str,
    (net, prefix): (u8, &str),
    workers: usize,
) -> Option<(
    Netns,
    std::process::Child,
    Signaling,
    SocketAddr,
    Log,
    String,
)> {
    let (gw, here) = subnet(net);
    let (ns, outside, inside) =
        veth::namespace_with_queues(test, prefix, (here, gw), workers as u32)?;
    // This end computes its UDP checksums (veth's offload would leave them unfinished, and
    // the XDP socket gets no word that they are).
    secrelay_xsk::set_tx_checksum_offload(&outside, false).expect("checksum offload off");
    let config = format!(
        "http = \"{gw}:8080\"\nudp = \"{gw}:{SHARED_PORT}\"\nng = \"{gw}:2223\"\n\
         workers = {workers}\nrtp_ports = \"30000-30199\"\nplain_latch = \"first-packets\"\n\
         drain_secs = 0.2\nxdp = \"{inside}\"\nmedia_io = \"af_xdp\"\n"
    );
    let (child, sig, ng, log) =
        veth::serve_as_nobody(&ns, &config, "+bpf,+net_admin,+perfmon,+net_raw,+ipc_lock");
    if xdp_refused(test, &log) {
        stop(child);
        return None;
    }
    for w in 0..workers {
        let open = format!("XDP socket open worker={w}");
        assert!(
            log.lock().unwrap().contains(&open),
            "{open}: {}",
            log.lock().unwrap()
        );
    }
    Some((ns, child, sig, ng, log, outside))
}

/// Whether the gateway logged that the kernel refused a worker its XDP socket (said: the
/// test is skipped, or fails under CI).
fn xdp_refused(test: &str, log: &Log) -> bool {
    let refused = log
        .lock()
        .unwrap()
        .lines()
        .find(|l| {
            l.contains("no XDP socket for this worker")
                || l.contains("the XDP filter refused this worker's XDP socket")
        })
        .map(str::to_owned);
    if let Some(why) = &refused {
        lab_support::missing(test, &format!("the kernel refused an XDP socket: {why}"));
    }
    refused.is_some()
}

fn stop(mut child: std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `rounds` packets each way, 20 ms apart: how many of them each phone heard.
fn talk(caller: &mut SocketPhone, callee: &mut SocketPhone, rounds: usize) -> (usize, usize) {
    let before = (caller.heard(0xb0), callee.heard(0xc1));
    for _ in 0..rounds {
        exchange(caller, callee);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    caller.read();
    callee.read();
    (caller.heard(0xb0) - before.0, callee.heard(0xc1) - before.1)
}

/// Drives the room for `d`.
fn drive(group: &mut [SimParticipant], d: Duration) {
    let until = Instant::now() + d;
    SimParticipant::drive_until(group, d, |_| Instant::now() > until).unwrap();
}

#[test]
fn browsers_and_phones_flow_through_the_xdp_socket_past_the_socket_layer() {
    let test = "browsers_and_phones_flow_through_the_xdp_socket_past_the_socket_layer";
    let Some((ns, child, sig, ng_addr, log, outside)) = gateway(test, (234, "sa"), 1) else {
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
        here(),
        None,
        Some("192.0.2.50:7000".parse().unwrap()),
    );
    let (mut s_caller, mut s_callee) = call(
        &mut ng,
        "sdes",
        here(),
        Some(Profile::AesCm128HmacSha1_80),
        None,
    );
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
    stop(child);
}

/// An IPv6 call: the gateway's media address is an IPv6 one of the veth pair, and the phones
/// call each other over IPv6 through ng. What they send is read from the XDP socket, and what
/// the gateway sends them goes out as frames it writes to the next hop's MAC address from the
/// kernel's IPv6 neighbour table (read over rtnetlink): the namespace's kernel UDP counters for
/// IPv6 do not move while media flows, and nothing is left for the sockets to send.
#[test]
fn an_ipv6_call_goes_both_ways_through_the_xdp_socket() {
    let test = "an_ipv6_call_goes_both_ways_through_the_xdp_socket";
    let (gw4, here4) = subnet(239);
    let Some((ns, outside, inside)) = veth::namespace(test, "s6", here4, gw4) else {
        return;
    };
    secrelay_xsk::set_tx_checksum_offload(&outside, false).expect("checksum offload off");
    let n = (std::process::id() % 250) as u16;
    let gw6: std::net::Ipv6Addr = format!("fd00:239:{n:x}::1").parse().unwrap();
    let here6: std::net::Ipv6Addr = format!("fd00:239:{n:x}::2").parse().unwrap();
    let add = |ip: std::net::Ipv6Addr, dev: &str| {
        vec![
            "ip".to_owned(),
            "-6".into(),
            "addr".into(),
            "add".into(),
            format!("{ip}/64"),
            "dev".into(),
            dev.into(),
            "nodad".into(),
        ]
    };
    let here_args = add(here6, &outside);
    let status = std::process::Command::new(&here_args[0])
        .args(&here_args[1..])
        .status()
        .unwrap();
    assert!(status.success(), "{here_args:?}");
    let inside_args = add(gw6, &inside);
    let inside_args: Vec<&str> = inside_args.iter().map(String::as_str).collect();
    ns.run(&inside_args).unwrap();
    let config = format!(
        "http = \"{gw4}:8080\"\nudp = \"[{gw6}]:{SHARED_PORT}\"\nng = \"{gw4}:2223\"\n\
         workers = 1\nrtp_ports = \"30000-30199\"\ndrain_secs = 0.2\nxdp = \"{inside}\"\n\
         media_io = \"af_xdp\"\n"
    );
    let (child, sig, ng_addr, log) =
        veth::serve_as_nobody(&ns, &config, "+bpf,+net_admin,+perfmon,+net_raw,+ipc_lock");
    if xdp_refused(test, &log) {
        return stop(child);
    }
    let metric = |s: &str| sig.metric(s).unwrap_or_else(|e| panic!("{e}"));
    let mut ng = Ng::new(ng_addr).unwrap();
    let (mut caller, mut callee) = call(&mut ng, "v6", here6, None, None);
    // The first packets make both ends resolve each other (the gateway's first copies go
    // through its socket, which makes the kernel ask).
    assert!(
        veth::until_both_heard(&mut caller, &mut callee, 100),
        "the IPv6 call does not flow: {} {}\n{}",
        caller.heard(0xb0),
        callee.heard(0xc1),
        log.lock().unwrap()
    );
    // Media alone for a while: in and out as frames, none of it through a socket.
    std::thread::sleep(Duration::from_millis(1100));
    let udp6 = || {
        let snmp6 = ns.run(&["cat", "/proc/net/snmp6"]).unwrap();
        let value = |name: &str| -> u64 {
            snmp6
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/net/snmp6"))
        };
        (value("Udp6InDatagrams"), value("Udp6OutDatagrams"))
    };
    let before = udp6();
    let socket_sends = metric("secrelay_xsk_socket_sends_total");
    let rounds = 20;
    let heard = talk(&mut caller, &mut callee, rounds);
    assert!(
        heard.0 + 1 >= rounds && heard.1 + 1 >= rounds,
        "{heard:?} of {rounds}"
    );
    assert_eq!(udp6(), before, "IPv6 media went through a socket (in, out)");
    assert_eq!(
        metric("secrelay_xsk_socket_sends_total"),
        socket_sends,
        "copies left for the socket"
    );
    ng.call(secrelay_testkit::ng::command(
        "delete", "v6", "caller", None, None,
    ))
    .unwrap();
    stop(child);
}

/// Two workers, each with its XDP socket on its own receive queue of a two-queue veth pair.
/// A datagram arrives on the queue the sending socket's kernel picked: a browser's, to the
/// shared port, is read by that queue's worker and handed to its member's worker if need be;
/// a telephony leg's goes to its worker's XDP socket on that worker's queue, and to the leg's
/// own socket on the other (the filter knows each leg port's queue). Every call flows either
/// way.
#[test]
fn two_workers_read_their_own_queues_and_every_call_flows() {
    let test = "two_workers_read_their_own_queues_and_every_call_flows";
    let Some((ns, child, sig, ng_addr, log, _)) = gateway(test, (236, "sb"), 2) else {
        return;
    };
    let here = subnet(236).1;
    let metric = |s: &str| sig.metric(s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(metric("secrelay_media_io_workers{path=\"af_xdp\"}"), 2);
    let epoch = Instant::now();
    let mut group: Vec<SimParticipant> = (0..4)
        .map(|i| {
            SimParticipant::join(
                &sig,
                &format!("r{}", i / 2),
                Leg::Join,
                IpAddr::V4(here),
                epoch,
            )
            .unwrap_or_else(|e| panic!("{e}\n{}", log.lock().unwrap()))
        })
        .collect();
    let up = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter().all(|p| p.phase == Phase::Connected)
    })
    .unwrap();
    assert!(up, "{group:?}\n{}", log.lock().unwrap());
    let mut ng = Ng::new(ng_addr).unwrap();
    let mut calls: Vec<_> = (0..8)
        .map(|i| call(&mut ng, &format!("c{i}"), here, None, None))
        .collect();
    let udp_before = ns.udp_counters().unwrap();
    let redirected_before = metric("secrelay_xdp_redirected_total");
    let rx_before = received(&group);
    let rounds = 20;
    for _ in 0..rounds {
        drive(&mut group, Duration::from_millis(30));
        for (a, b) in &mut calls {
            exchange(a, b);
        }
    }
    drive(&mut group, Duration::from_millis(200));
    for (a, b) in &mut calls {
        a.read();
        b.read();
    }
    let udp_after = ns.udp_counters().unwrap();
    let heard: Vec<(usize, usize)> = calls
        .iter()
        .map(|(a, b)| (a.heard(0xb0), b.heard(0xc1)))
        .collect();
    eprintln!(
        "heard {heard:?} of {rounds}; {} through the XDP sockets, {} through the legs' sockets",
        metric("secrelay_xdp_redirected_total") - redirected_before,
        udp_after["InDatagrams"] - udp_before["InDatagrams"]
    );
    for (i, (a, b)) in heard.iter().enumerate() {
        assert!(
            a + 1 >= rounds && b + 1 >= rounds,
            "call {i}: heard {a} and {b} of {rounds}\n{}",
            log.lock().unwrap()
        );
    }
    assert!(
        received(&group) > rx_before + 40,
        "the browsers stopped hearing each other"
    );
    assert!(metric("secrelay_xdp_redirected_total") > redirected_before);
    assert_eq!(metric("secrelay_drops_total{reason=\"bad_frame\"}"), 0);
    for p in &mut group {
        p.close(Instant::now());
    }
    stop(child);
}

/// Call `bridge` through ng with `direction` external → internal: the caller on `here_ext`,
/// answered on the gateway's `gw_ext`; the callee on `here_int`, offered `gw_int`.
fn bridge_call(
    ng: &mut Ng,
    (here_ext, gw_ext): (Ipv4Addr, Ipv4Addr),
    (here_int, gw_int): (Ipv4Addr, Ipv4Addr),
) -> (SocketPhone, SocketPhone) {
    let mut caller = SocketPhone::bind(here_ext.into(), None, 0x1111).unwrap();
    let mut callee = SocketPhone::bind(here_int.into(), None, 0x2222).unwrap();
    let mut offer = ng_command(
        "offer",
        "bridge",
        "caller",
        None,
        Some(&caller.phone.offer()),
    );
    offer.push((
        "direction".into(),
        Bencode::List(vec![Bencode::str("external"), Bencode::str("internal")]),
    ));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    assert!(
        to_callee.contains(&format!("c=IN IP4 {gw_int}")),
        "{to_callee}"
    );
    let answer = callee.phone.answer_offer(&to_callee).unwrap();
    let back = ng_command("answer", "bridge", "caller", Some("callee"), Some(&answer));
    let to_caller = ng.call(back).unwrap()["sdp"].clone();
    assert!(
        to_caller.contains(&format!("c=IN IP4 {gw_ext}")),
        "{to_caller}"
    );
    caller.phone.accept_answer(&to_caller).unwrap();
    (caller, callee)
}

/// A gateway bridging two networks, each behind a veth pair of its own: `xdp` names both
/// interfaces, and each worker has an XDP socket on each. An ng call with `direction` puts the
/// caller's leg on the external interface's address and the callee's on the internal one's:
/// what each phone sends is read from the XDP socket of the interface it came in on, and what
/// the gateway sends each goes out as frames through the interface its route goes out of (the
/// phones read only from the address their SDP named). The namespace's kernel UDP counters do
/// not move while media flows, and nothing is left for the sockets to send.
#[test]
fn a_call_between_two_interfaces_goes_through_the_xdp_socket_on_each() {
    let test = "a_call_between_two_interfaces_goes_through_the_xdp_socket_on_each";
    let ((gw_ext, here_ext), (gw_int, here_int)) = (subnet(237), subnet(238));
    let Some((ns, out_ext, in_ext)) = veth::namespace(test, "se", here_ext, gw_ext) else {
        return;
    };
    let id = std::process::id();
    let (out_int, in_int) = (format!("sno{id}"), format!("sni{id}"));
    ns.veth_queues(
        &out_int,
        &format!("{here_int}/24"),
        &in_int,
        &format!("{gw_int}/24"),
        1,
    )
    .expect("a second veth pair into the namespace");
    for outside in [&out_ext, &out_int] {
        secrelay_xsk::set_tx_checksum_offload(outside, false).expect("checksum offload off");
    }
    let config = format!(
        "http = \"{gw_ext}:8080\"\nudp = \"{gw_ext}:{SHARED_PORT}\"\nng = \"{gw_ext}:2223\"\n\
         workers = 1\nrtp_ports = \"30000-30199\"\ndrain_secs = 0.2\n\
         xdp = [\"{in_ext}\", \"{in_int}\"]\nmedia_io = \"af_xdp\"\n\
         interfaces = [\"external/{gw_ext}\", \"internal/{gw_int}\"]\n"
    );
    let (child, sig, ng_addr, log) =
        veth::serve_as_nobody(&ns, &config, "+bpf,+net_admin,+perfmon,+net_raw,+ipc_lock");
    if xdp_refused(test, &log) {
        return stop(child);
    }
    for iface in [&in_ext, &in_int] {
        let log = log.lock().unwrap();
        let open = log
            .lines()
            .any(|l| l.contains("XDP socket open worker=0") && l.contains(iface.as_str()));
        assert!(open, "no XDP socket open on {iface}:\n{log}");
    }
    let metric = |s: &str| sig.metric(s).unwrap_or_else(|e| panic!("{e}"));

    let mut ng = Ng::new(ng_addr).unwrap();
    let (mut caller, mut callee) = bridge_call(&mut ng, (here_ext, gw_ext), (here_int, gw_int));
    // The first packets make both ends resolve each other.
    assert!(
        veth::until_both_heard(&mut caller, &mut callee, 100),
        "the call does not flow: {} {}\n{}",
        caller.heard(0xb0),
        callee.heard(0xc1),
        log.lock().unwrap()
    );
    // Media alone for a while (past the neighbour tables' next read): in and out as frames on
    // both interfaces, none of it through a socket.
    std::thread::sleep(Duration::from_millis(1100));
    caller.read();
    callee.read();
    let udp_before = ns.udp_counters().unwrap();
    let socket_sends = metric("secrelay_xsk_socket_sends_total");
    let redirected = metric("secrelay_xdp_redirected_total");
    let rounds = 20;
    let heard = talk(&mut caller, &mut callee, rounds);
    let redirected = metric("secrelay_xdp_redirected_total") - redirected;
    eprintln!("heard {heard:?} of {rounds}; {redirected} datagrams through the XDP sockets");
    assert!(
        heard.0 + 1 >= rounds && heard.1 + 1 >= rounds,
        "{heard:?} of {rounds}"
    );
    assert!(
        redirected >= 2 * rounds as u64 - 2,
        "only {redirected} datagrams through the XDP sockets"
    );
    let udp_after = ns.udp_counters().unwrap();
    for counter in ["InDatagrams", "OutDatagrams", "NoPorts", "InErrors"] {
        assert_eq!(
            udp_after[counter], udp_before[counter],
            "the kernel's UDP {counter} moved: media went through a socket"
        );
    }
    assert_eq!(
        metric("secrelay_xsk_socket_sends_total"),
        socket_sends,
        "copies left for the socket"
    );
    assert_eq!(metric("secrelay_drops_total{reason=\"bad_frame\"}"), 0);
    ng.call(ng_command("delete", "bridge", "caller", None, None))
        .unwrap();
    stop(child);
}
