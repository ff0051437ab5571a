//! `secrelay lab turn` as a user runs it, against the real coturn (Debian's coturn package;
//! `scripts/setup` installs it): few allocations, few clients, a low rate, so that it holds on
//! a loaded 2-core machine. Checks the JSON, not the figures' size: every server (coturn,
//! secrelay on io_uring, secrelay on epoll) made every allocation and relayed the clients'
//! packets both ways, each server's CPU was read over both parts, and the ratios were worked
//! out from those figures.
//!
//! Without coturn the test fails under CI (`CI` set) and says SKIPPED elsewhere
//! (`lab_support::missing`). The run is bounded; on overrun its whole process group (the
//! servers it started included) is killed.

mod lab_support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const ALLOCATIONS: f64 = 60.0;
const CLIENTS: f64 = 4.0;
/// Bound on the whole run (a few seconds here).
const WAIT: Duration = Duration::from_secs(120);

#[test]
fn lab_turn_measures_secrelay_and_coturn_in_one_run() {
    let test = "lab_turn_measures_secrelay_and_coturn_in_one_run";
    let coturn = PathBuf::from("/usr/bin/turnserver");
    if !coturn.is_file() {
        lab_support::missing(
            test,
            "no coturn at /usr/bin/turnserver (Debian package coturn)",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("turn.json");
    // Relay ports below the ephemeral range, claimed against every other test process.
    let relay = secrelay_testkit::ports::reserve(200);
    let low = relay.first;
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["lab", "turn", "--allocations", &ALLOCATIONS.to_string()])
        .args(["--clients", &CLIENTS.to_string(), "--rate", "400"])
        .args(["--duration", "1", "--window", "8"])
        .args(["--relay-ports", &format!("{low}-{}", relay.last())])
        .arg("--coturn")
        .arg(&coturn)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("the secrelay binary runs");
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(200));
            if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                return;
            }
        }
        // The servers are its children: kill the group, not only the lab.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
    });
    let out = child.wait_with_output().expect("waiting for secrelay");
    let _ = watchdog.join();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("lab turn took {:.1?}\n{stdout}", started.elapsed());
    assert!(out.status.success(), "lab turn: {}\n{stderr}", out.status);

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let rows = report["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["server"].as_str()).collect();
    assert_eq!(
        names,
        ["coturn", "secrelay", "secrelay (epoll)"],
        "{report}"
    );
    for r in rows {
        let n = |k: &str| {
            r[k].as_f64()
                .unwrap_or_else(|| panic!("{k} is not a number in {r}"))
        };
        assert_eq!(n("allocations"), ALLOCATIONS, "every allocation made: {r}");
        assert_eq!(n("allocation_failures"), 0.0, "{r}");
        assert!(n("allocation_cpu_secs") > 0.0, "the server's CPU read: {r}");
        assert!(n("allocations_per_cpu_sec") > 0.0, "{r}");
        assert_eq!(n("relay_clients"), CLIENTS, "{r}");
        assert!(n("sent") > 0.0 && n("relay_cpu_secs") > 0.0, "{r}");
        assert!(
            n("relayed") >= 1.8 * n("sent"),
            "each packet relayed to the peer and back, little lost: {r}"
        );
        let want = n("relayed") / n("relay_cpu_secs");
        assert!(
            (n("relayed_per_cpu_sec") - want).abs() <= 1e-6 * want,
            "{r}"
        );
    }
    for k in ["allocations_ratio", "relayed_ratio", "relayed_ratio_epoll"] {
        let v = report[k].as_f64().unwrap_or(0.0);
        assert!(v.is_finite() && v > 0.0, "{k}: {report}");
    }
    assert!(stdout.contains("secrelay ÷ coturn"), "{stdout}");
}
