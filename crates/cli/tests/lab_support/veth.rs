//! For the tests of a gateway in a network namespace of the test's own, behind a veth pair
//! (the XDP filter and the AF_XDP path need a real interface): the gateway started there as
//! `nobody` with only the capabilities it is given, and the phones and calls the tests drive
//! through it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Child;
use std::sync::{Arc, Mutex};

use secrelay_srtp::Profile;
use secrelay_testkit::netns::Netns;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::{Signaling, SimParticipant};

/// A gateway's log so far.
pub type Log = Arc<Mutex<String>>;

/// A namespace of the test's own, joined to this one by a veth pair: `prefix` + `o` + this
/// process's id here with `here`/24, `prefix` + `i` + the id in the namespace with
/// `gateway`/24; both names. None, said, where this process may not make one (not root: under
/// CI a failure).
pub fn namespace(
    test: &str,
    prefix: &str,
    here: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Option<(Netns, String, String)> {
    namespace_with_queues(test, prefix, (here, gateway), 1)
}

/// [`namespace`] with `queues` queues at each end of the pair.
pub fn namespace_with_queues(
    test: &str,
    prefix: &str,
    (here, gateway): (Ipv4Addr, Ipv4Addr),
    queues: u32,
) -> Option<(Netns, String, String)> {
    let ns = match Netns::new() {
        Ok(ns) => ns,
        Err(e) => {
            super::missing(test, &format!("no network namespace: {e}"));
            return None;
        }
    };
    let id = std::process::id();
    let (outside, inside) = (format!("{prefix}o{id}"), format!("{prefix}i{id}"));
    ns.veth_queues(
        &outside,
        &format!("{here}/24"),
        &inside,
        &format!("{gateway}/24"),
        queues,
    )
    .expect("a veth pair into the namespace");
    Some((ns, outside, inside))
}

/// `secrelay serve --config` (with `config` as the file) in `ns`, as `nobody` with only the
/// capabilities `caps` (`+bpf,+net_admin,…`: what a systemd drop-in would give it, so that
/// the claim is checked): the process, its API (admin), its ng address and its log. Panics
/// with the log when it does not start.
pub fn serve_as_nobody(
    ns: &Netns,
    config: &str,
    caps: &str,
) -> (Child, Signaling, SocketAddr, Log) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    for (p, mode) in [(dir.path(), 0o755), (path.as_path(), 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut cmd = ns.command("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(env!("CARGO_BIN_EXE_secrelay"))
        .args(["serve", "--log", "info", "--config"])
        .arg(&path);
    let (child, banner, log) = super::spawn_serve(cmd);
    let banner = banner.unwrap_or_else(|| panic!("no banner:\n{}", log.lock().unwrap()));
    let admin = std::fs::read_to_string(banner.admin_key_file.clone().unwrap()).unwrap();
    let sig = Signaling::new(banner.url().unwrap()).with_admin(admin.trim());
    // The config file and the admin key outlive the start: the directory may go.
    drop(dir);
    (child, sig, banner.ng.unwrap(), log)
}

/// A call `id` through the ng socket between two phones on `here`: plain, or SDES with
/// `sdes`; with `signal`, the caller's SDP names that address instead of its own (a phone
/// behind NAT).
pub fn call(
    ng: &mut Ng,
    id: &str,
    here: impl Into<IpAddr>,
    sdes: Option<Profile>,
    signal: Option<SocketAddr>,
) -> (SocketPhone, SocketPhone) {
    let here = here.into();
    let mut caller = SocketPhone::bind(here, sdes, 0x1111).unwrap();
    let mut callee = SocketPhone::bind(here, sdes, 0x2222).unwrap();
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

/// One packet each way, then what came.
pub fn exchange(caller: &mut SocketPhone, callee: &mut SocketPhone) {
    caller.send(&[0xc1; 160]).unwrap();
    callee.send(&[0xb0; 160]).unwrap();
    caller.read();
    callee.read();
}

/// Packets both ways, one each way every 10 ms, at most `rounds` times, until each phone heard
/// the other more than 5 times (the first ones make the ends resolve each other); whether they
/// did.
pub fn until_both_heard(caller: &mut SocketPhone, callee: &mut SocketPhone, rounds: usize) -> bool {
    let heard = |a: &SocketPhone, b: &SocketPhone| a.heard(0xb0) > 5 && b.heard(0xc1) > 5;
    for _ in 0..rounds {
        exchange(caller, callee);
        std::thread::sleep(std::time::Duration::from_millis(10));
        if heard(caller, callee) {
            return true;
        }
    }
    heard(caller, callee)
}

/// The media packets a room's participants received, all streams.
pub fn received(group: &[SimParticipant]) -> u64 {
    group
        .iter()
        .flat_map(|p| p.streams.values())
        .map(|s| s.received)
        .sum()
}
