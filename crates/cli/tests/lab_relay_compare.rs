//! `secrelay lab relay-compare` as a user runs it, against the real rtpengine (Debian's
//! rtpengine-daemon, forwarding in userspace; `scripts/setup` installs it): briefly and at a
//! low rate, so that it holds on a loaded 2-core machine. Checks the JSON rows, not the
//! figures' size: both relays relayed the same SDES and plain calls set up through their ng
//! sockets (and secrelay its WebRTC participants), nothing failed to unprotect, secrelay
//! dropped nothing, CPU per relayed packet (user and kernel) was measured, and little was
//! lost.
//!
//! Without rtpengine the test fails under CI (`CI` set) and says SKIPPED elsewhere
//! (`lab_support::missing`). The run is bounded; on overrun its whole process group (the
//! relays it started included) is killed.

mod lab_support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Offered packets per second (20 calls to each relay for SDES and for plain, 40 WebRTC
/// participants to secrelay).
const RATE: u64 = 2000;
/// Seconds measured per relay (each relay also gets set-up and a 1 s warm-up).
const SECS: &str = "2";
/// Bound on the whole run (about 10 s here).
const WAIT: Duration = Duration::from_secs(120);

#[test]
fn relay_compare_measures_both_relays_at_a_low_rate() {
    let test = "relay_compare_measures_both_relays_at_a_low_rate";
    let Some(rtpengine) = lab_support::rtpengine(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("relay-compare.json");
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["lab", "relay-compare", "--rates", &RATE.to_string()])
        .args([
            "--duration",
            SECS,
            "--media-io",
            "io_uring,mmsg",
            "--rtpengine",
        ])
        .arg(&rtpengine)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .process_group(0)
        .spawn()
        .expect("the secrelay binary runs");
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for secrelay") {
            break Some(s);
        }
        if started.elapsed() > WAIT {
            // The relays are its children: kill the group, not only the lab.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = started.elapsed();
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    eprintln!("lab relay-compare took {wall:.1?}\n{stdout}");
    let status = status.unwrap_or_else(|| panic!("still running after {WAIT:?}:\n{stderr}"));
    assert!(status.success(), "lab relay-compare: {status}\n{stderr}");

    let rows: Value =
        serde_json::from_str(&read(&json)).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let rows = rows.as_array().expect("an array of rows");
    assert_eq!(
        rows.len(),
        8,
        "a row per relay (secrelay on each media path), kind of call and rate: {rows:?}"
    );
    for (relay, io, legs) in [
        ("rtpengine", None, "sdes"),
        ("secrelay", Some("io_uring"), "sdes"),
        ("secrelay", Some("mmsg"), "sdes"),
        ("rtpengine", None, "plain"),
        ("secrelay", Some("io_uring"), "plain"),
        ("secrelay", Some("mmsg"), "plain"),
        ("secrelay", Some("io_uring"), "webrtc"),
        ("secrelay", Some("mmsg"), "webrtc"),
    ] {
        let mine: Vec<&Value> = rows
            .iter()
            .filter(|r| r["relay"] == relay && r["legs"] == legs && r["media_io"].as_str() == io)
            .collect();
        assert_eq!(mine.len(), 1, "{relay} {io:?} {legs}: {rows:?}");
        let r = mine[0];
        let relay = format!("{relay} {io:?} ({legs})");
        let n = |k: &str| {
            r[k].as_f64()
                .unwrap_or_else(|| panic!("{relay}: {k} is not a number in {r}"))
        };
        assert_eq!(n("offered_pps"), RATE as f64, "{r}");
        assert!(n("secs") > 0.0, "{r}");
        assert!(n("sent") > 0.0, "{relay} sent nothing: {r}");
        assert!(n("relayed") > 0.0, "{relay} relayed nothing: {r}");
        assert_eq!(
            n("rx_errors"),
            0.0,
            "{relay}: packets that failed to unprotect: {r}"
        );
        let cpu = n("cpu_us_per_relayed");
        assert!(
            n("user_us_per_relayed") >= 0.0 && n("kernel_us_per_relayed") >= 0.0,
            "{r}"
        );
        assert!(
            cpu.is_finite() && cpu > 0.0,
            "{relay}: CPU µs per relayed packet {cpu}: {r}"
        );
        assert!(
            n("lost") <= 0.05 * n("sent"),
            "{relay} lost more than 5 % of what was sent: {r}"
        );
        // Every datagram secrelay received in the window was a call's (the legs hold their
        // RTCP ports as phones do, so no report lands on a port of someone else's).
        assert_eq!(
            r["gateway_drops"].as_array().map(Vec::len),
            Some(0),
            "{relay} dropped datagrams: {r}"
        );
    }
    assert!(
        stdout.contains("rtpengine") && stdout.contains("secrelay"),
        "{stdout}"
    );
}
