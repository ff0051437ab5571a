//! `secrelay lab xdp` as a user runs it, short: every path (the kernel's socket path, native
//! and generic XDP) gets its run over a veth pair into a namespace of its own, the flood is
//! accounted for (dropped by the filter, or taken and dropped by the gateway), the figures
//! per datagram and per core-second come out, and the plain call beside the flood goes on.
//!
//! Needs root; without it the test says so and passes, except under CI.

mod lab_support;

#[test]
fn lab_xdp_measures_every_path_and_accounts_for_the_flood() {
    let test = "lab_xdp_measures_every_path_and_accounts_for_the_flood";
    if let Err(e) = secrelay_testkit::netns::Netns::new() {
        lab_support::missing(test, &format!("no network namespace: {e}"));
        return;
    }
    let (report, stdout) =
        lab_support::lab_json(&["xdp", "--secs", "0.5", "--rounds", "1", "--sources", "64"]);
    let runs = report["runs"].as_array().unwrap();
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["off", "native", "generic"], "{stdout}");
    let n = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    for r in runs {
        let sent = n(r, "sent");
        assert!(sent > 1000.0, "{r}");
        let (xdp, gw, overflow) = (
            n(r, "xdp_dropped"),
            n(r, "gateway_dropped"),
            n(r, "socket_overflow"),
        );
        if r["mode"] == "off" {
            assert_eq!(xdp, 0.0, "{r}");
            assert!(
                gw + overflow >= 0.9 * sent,
                "the socket path took the flood: {r}"
            );
            assert!(r["program_ns"].is_null(), "{r}");
        } else {
            assert_eq!(r["attached"], r["mode"], "{r}");
            assert_eq!(gw, 0.0, "nothing reached the gateway: {r}");
            assert!(xdp >= 0.9 * sent, "the filter dropped the flood: {r}");
            assert!(n(r, "program_ns") > 0.0, "{r}");
        }
        assert_eq!(n(r, "elsewhere"), sent - xdp - gw - overflow, "{r}");
        assert!(n(r, "per_core_second") > 0.0, "{r}");
        let (lost, call) = (n(r, "call_lost"), n(r, "call_sent"));
        assert!(
            call >= 10.0 && lost <= call * 0.1,
            "the call beside the flood: {r}"
        );
    }
}
