//! The XDP filter in front of a real interface: `secrelay serve --xdp` in a network namespace
//! of this test's own, reached over a veth pair (native XDP on veth). Two browsers in a room, a
//! plain call whose caller is behind NAT (its SDP names another address than it sends from,
//! so its leg latches to the real one) and an SDES call (its ports open: its legs authenticate
//! what they take) keep flowing while 512 spoofed sources flood the shared
//! WebRTC port, the NAT'd leg's port and a telephony port without a leg: every flooded datagram
//! is dropped in the driver and counted, none reaches the socket layer (the namespace's kernel
//! UDP counters and the gateway's own drop counters do not move), and once the call ends its
//! port takes nothing from its old phone either.
//!
//! The gateway runs as `nobody` with only CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON (what the
//! filter needs, and what `packaging/secrelay-xdp.conf` gives the systemd service). Needs root
//! (namespaces, and the capabilities to hand on); without it the test says so and passes,
//! except under CI.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use lab_support::veth::{self, call, exchange, received, Log};
use secrelay_srtp::Profile;
use secrelay_testkit::netns::Netns;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};

/// The subnet of the veth pair, one per test process (a run killed before it could clean up
/// leaves no route in the next one's way): 10.231.N.0/24.
fn subnet() -> u8 {
    (std::process::id() % 250) as u8
}

/// The gateway's end of the veth pair.
fn gateway_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 231, subnet(), 1)
}

/// The gateway's end of the second veth pair (a second network it is on, with the filter
/// there too): 10.233.N.1.
fn second_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 233, subnet(), 1)
}

/// This test's end.
fn here() -> Ipv4Addr {
    Ipv4Addr::new(10, 231, subnet(), 2)
}
const SHARED_PORT: u16 = 20000;
const UNUSED_PORT: u16 = 30198;
const SOURCES: u16 = 512;
const ROUNDS: usize = 4;

/// The namespace and the gateway in it, or None (skipped) where this process may not make them.
fn gateway(test: &str) -> Option<(Netns, std::process::Child, Signaling, SocketAddr, Log)> {
    let (ns, _, inside) = veth::namespace(test, "sx", here(), gateway_ip())?;
    let (outside2, inside2) = (
        format!("sxp{}", std::process::id()),
        format!("sxj{}", std::process::id()),
    );
    let here2 = Ipv4Addr::new(10, 233, subnet(), 2);
    ns.veth(
        &outside2,
        &format!("{here2}/24"),
        &inside2,
        &format!("{}/24", second_ip()),
    )
    .expect("a second veth pair into the namespace");
    let gw = gateway_ip();
    let config = format!(
        "http = \"{gw}:8080\"\nudp = \"{gw}:{SHARED_PORT}\"\nng = \"{gw}:2223\"\n\
         workers = 1\nrtp_ports = \"30000-30199\"\nplain_latch = \"first-packets\"\n\
         drain_secs = 0.2\nxdp = [\"{inside}\", \"{inside2}\"]\n"
    );
    // Not as root: as nobody with the three capabilities the filter needs (what
    // packaging/secrelay-xdp.conf gives the systemd service), so that the claim is checked.
    let (child, sig, ng, log) = veth::serve_as_nobody(&ns, &config, "+bpf,+net_admin,+perfmon");
    assert!(
        log.lock().unwrap().contains("XDP filter attached"),
        "{}",
        log.lock().unwrap()
    );
    Some((ns, child, sig, ng, log))
}

/// What each phone of a call heard since `before` (what they had heard then) is, give or take
/// two, every one of the `exchanged` packets the other sent.
fn flowed(
    name: &str,
    (caller, callee): (&SocketPhone, &SocketPhone),
    before: (usize, usize),
    exchanged: usize,
) {
    let heard = (caller.heard(0xb0) - before.0, callee.heard(0xc1) - before.1);
    assert!(
        heard.0 + 2 >= exchanged && heard.1 + 2 >= exchanged,
        "the {name} call lost media during the flood: heard {heard:?} of {exchanged} each way"
    );
}

#[test]
fn a_spoofed_flood_never_reaches_the_socket_layer_and_admitted_legs_keep_flowing() {
    let test = "a_spoofed_flood_never_reaches_the_socket_layer_and_admitted_legs_keep_flowing";
    let Some((ns, mut child, sig, ng_addr, log)) = gateway(test) else {
        return;
    };
    let metric = |s: &str| sig.metric(s).unwrap_or_else(|e| panic!("{e}"));
    // Two browsers in a room.
    let epoch = Instant::now();
    let mut group: Vec<SimParticipant> = (0..2)
        .map(|_| {
            SimParticipant::join(&sig, "stage", Leg::Join, IpAddr::V4(here()), epoch)
                .unwrap_or_else(|e| {
                    std::thread::sleep(Duration::from_millis(500));
                    panic!("{e}\n{}", log.lock().unwrap())
                })
        })
        .collect();
    let up = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter().all(|p| p.phase == Phase::Connected)
    })
    .unwrap();
    assert!(up, "{group:?}");
    // A call whose caller is behind NAT: its leg latches to the caller's real address.
    let mut ng = Ng::new(ng_addr).unwrap();
    let (mut caller, mut callee) = call(
        &mut ng,
        "nat",
        here(),
        None,
        Some("192.0.2.50:7000".parse().unwrap()),
    );
    let leg_port = caller.phone.gateway.unwrap().port();
    // An SDES call: its legs take SRTP from any address (they authenticate it), so their ports
    // are open in the filter.
    let (mut s_caller, mut s_callee) = call(
        &mut ng,
        "sdes",
        here(),
        Some(Profile::AesCm128HmacSha1_80),
        None,
    );
    assert!(
        veth::until_both_heard(&mut caller, &mut callee, 50),
        "the NAT'd call does not flow: {} {}",
        caller.heard(0xb0),
        callee.heard(0xc1)
    );

    let flood = secrelay_testkit::netns::spoofed_sockets([10, 232], SOURCES).unwrap();
    let drops = |reason: &str| metric(&format!("secrelay_drops_total{{reason=\"{reason}\"}}"));
    let gateway_drops =
        || drops("unknown_source") + drops("unlatched_source") + drops("auth_failed");
    let (xdp_before, gw_before) = (
        metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}"),
        gateway_drops(),
    );
    let udp_before = ns.udp_counters().unwrap();
    let (rx_before, heard_before) = (received(&group), (caller.heard(0xb0), callee.heard(0xc1)));
    let sdes_before = (s_caller.heard(0xb0), s_callee.heard(0xc1));

    // Forged SRTP to the shared port, to the latched leg's port and to a port without a leg,
    // from every spoofed source, while the legitimate media goes on.
    let forged = [
        0x80u8, 0, 0, 1, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let mut sent = 0u64;
    let mut exchanged = 0usize;
    for _ in 0..ROUNDS {
        for s in &flood {
            for port in [SHARED_PORT, leg_port, UNUSED_PORT] {
                s.send_to(&forged, (gateway_ip(), port)).unwrap();
                sent += 1;
            }
        }
        let until = Instant::now() + Duration::from_millis(100);
        SimParticipant::drive_until(&mut group, Duration::from_millis(100), |_| {
            Instant::now() > until
        })
        .unwrap();
        exchange(&mut caller, &mut callee);
        exchange(&mut s_caller, &mut s_callee);
        exchanged += 1;
    }
    let until = Instant::now() + Duration::from_millis(300);
    SimParticipant::drive_until(&mut group, Duration::from_millis(300), |_| {
        Instant::now() > until
    })
    .unwrap();
    for _ in 0..5 {
        exchange(&mut caller, &mut callee);
        exchange(&mut s_caller, &mut s_callee);
        exchanged += 1;
        std::thread::sleep(Duration::from_millis(10));
    }

    let xdp_dropped = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}") - xdp_before;
    let udp_after = ns.udp_counters().unwrap();
    eprintln!(
        "flood: {sent} spoofed datagrams from {SOURCES} sources, {xdp_dropped} dropped by the filter; \
         the sockets took {} datagrams meanwhile (the room's and the call's media)",
        udp_after["InDatagrams"] - udp_before["InDatagrams"]
    );
    assert_eq!(
        xdp_dropped, sent,
        "every spoofed datagram dropped in the driver"
    );
    assert_eq!(
        gateway_drops(),
        gw_before,
        "none reached the gateway's code"
    );
    for counter in ["NoPorts", "InErrors", "RcvbufErrors"] {
        assert_eq!(
            udp_after[counter], udp_before[counter],
            "the kernel's UDP {counter} moved: a spoofed datagram reached the socket layer"
        );
    }
    // What the sockets took in is the legitimate media (the room's, the call's), far below
    // the flood.
    let taken = udp_after["InDatagrams"] - udp_before["InDatagrams"];
    assert!(
        taken < sent / 10,
        "{taken} datagrams reached sockets during a flood of {sent}"
    );
    // The legitimate legs flowed through it.
    assert!(
        received(&group) > rx_before + 20,
        "the browsers stopped hearing each other"
    );
    flowed("NAT'd", (&caller, &callee), heard_before, exchanged);
    flowed("SDES", (&s_caller, &s_callee), sdes_before, exchanged);
    assert!(metric("secrelay_xdp_datagrams_total{verdict=\"open\"}") >= 2 * exchanged as u64 - 4);
    assert!(metric("secrelay_xdp_datagrams_total{verdict=\"admitted\"}") > 0);
    assert!(metric("secrelay_xdp_datagrams_total{verdict=\"stun\"}") > 0);

    // The second network has the filter too: the same flood to the gateway's address there
    // (no socket is bound on it: without the filter each datagram would be a NoPorts) is
    // dropped in the driver as well.
    let before = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}");
    let no_ports = ns.udp_counters().unwrap()["NoPorts"];
    let mut second = 0u64;
    for s in &flood {
        for port in [SHARED_PORT, leg_port] {
            s.send_to(&forged, (second_ip(), port)).unwrap();
            second += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}") - before,
        second,
        "the flood on the second interface dropped in the driver"
    );
    assert_eq!(ns.udp_counters().unwrap()["NoPorts"], no_ports);
    for interface in [
        &format!("sxi{}", std::process::id()),
        &format!("sxj{}", std::process::id()),
    ] {
        let native = sig
            .metric(&format!("secrelay_xdp_native{{interface=\"{interface}\"}}"))
            .unwrap_or_else(|e| panic!("{interface}: {e}"));
        assert!(native <= 1, "{interface}: {native}");
    }

    // The calls end: the NAT'd call's port takes nothing from its old phone any more.
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
    let before = metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}");
    let no_ports = ns.udp_counters().unwrap()["NoPorts"];
    for _ in 0..10 {
        caller.send(&[0xc1; 160]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        metric("secrelay_xdp_datagrams_total{verdict=\"dropped\"}") - before,
        10,
        "the ended leg's phone is dropped by the filter"
    );
    assert_eq!(ns.udp_counters().unwrap()["NoPorts"], no_ports);
    for p in &mut group {
        p.close(Instant::now());
    }
    let _ = child.kill();
    let _ = child.wait();
}
