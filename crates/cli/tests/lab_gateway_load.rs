//! `secrelay lab gateway-load` as a user runs it: a `secrelay serve` started on loopback, and
//! a short run of simulated participants against it with rooms of four that mix the three kinds
//! of leg (two WebRTC participants, an SDES-SRTP phone and a plain RTP phone). Checks the JSON
//! report, not the figures' size: every participant connected, each kind heard the other three
//! members of its room, little was lost, and the gateway's CPU per relayed copy was read from
//! `/proc`. And the broadcast scenario small: one simulcast publisher, five viewers, each
//! viewer got audio and one video stream, every layer was sent, the loss and the
//! retransmission buffer's memory per stream are in the report.

use std::time::Duration;

use serde_json::Value;

mod lab_support;
use lab_support::{lab_json, serve, serve_with};

#[test]
fn gateway_load_mixes_webrtc_sdes_and_plain_legs_in_each_room() {
    let (server, url) = serve();

    let pid = server.0.id().to_string();
    let (r, stdout) = lab_json(&[
        "gateway-load",
        "--target",
        &url,
        "--participants",
        "16",
        "--per-room",
        "4",
        "--duration",
        "2",
        "--legs",
        "join,join,sdes,plain",
        "--server-pid",
        &pid,
        "--admin-key-file",
        server.admin_key_file(),
    ]);

    assert_eq!(r["participants"], 16, "{r}");
    assert_eq!(r["connected"], 16, "every participant connected: {r}");
    // The WebRTC and SDES legs' SRTP went through receive batches of at least one datagram.
    let batch = r["gateway_receive_batch"]
        .as_f64()
        .expect("a receive batch figure");
    assert!(batch >= 1.0, "{r}");
    assert!(stdout.contains("receive batches"), "{stdout}");
    assert_eq!(
        r["legs"],
        serde_json::json!(["join", "join", "sdes", "plain"]),
        "{r}"
    );
    let by_leg = r["by_leg"].as_array().expect("by_leg rows");
    for (kind, n) in [("join", 8), ("sdes", 4), ("plain", 4)] {
        let row = by_leg
            .iter()
            .find(|t| t["leg"] == kind)
            .unwrap_or_else(|| panic!("no {kind} row: {r}"));
        assert_eq!(row["participants"], n, "{row}");
        assert_eq!(row["connected"], n, "{row}");
        let count = |k: &str| {
            row[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{kind} {k}: {row}"))
        };
        assert!(count("sent") > 0, "{kind} sent nothing: {row}");
        // Each member hears the other three of its room: about three times what it sent.
        assert!(
            count("received") >= 2 * count("sent"),
            "{kind} heard too little of its room: {row}"
        );
        assert!(
            count("lost") * 20 <= count("expected"),
            "{kind} lost more than 5 %: {row}"
        );
    }
    let cpu = r["gateway_cpu_us_per_relayed"]
        .as_f64()
        .unwrap_or_else(|| panic!("no CPU per relayed copy: {r}"));
    assert!(cpu.is_finite() && cpu > 0.0, "{r}");
    assert!(
        stdout.contains("sdes") && stdout.contains("plain"),
        "{stdout}"
    );
}

/// `--ice-tcp`: the WebRTC participants connect to the gateway's passive TCP candidate and
/// every packet of theirs goes over TCP; the phones stay on UDP. Each hears its room.
#[test]
fn gateway_load_over_ice_tcp_hears_every_room() {
    let (server, url) = serve_with(&["--ice-tcp", "127.0.0.1:0"]);
    let pid = server.0.id().to_string();
    let (r, _) = lab_json(&[
        "gateway-load",
        "--target",
        &url,
        "--participants",
        "8",
        "--per-room",
        "4",
        "--duration",
        "2",
        "--legs",
        "join,join,join,sdes",
        "--ice-tcp",
        "--server-pid",
        &pid,
        "--admin-key-file",
        server.admin_key_file(),
    ]);
    assert_eq!(r["connected"], 8, "every participant connected: {r}");
    for row in r["by_leg"].as_array().expect("by_leg rows") {
        let count = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k}: {row}"));
        assert!(count("sent") > 0, "{row}");
        assert!(count("received") >= 2 * count("sent"), "{row}");
        assert!(count("lost") * 20 <= count("expected"), "{row}");
    }
    let metrics = ureq::get(&format!("{url}/metrics"))
        .header("Authorization", &format!("Bearer {}", server.1.key()))
        .call()
        .expect("/metrics answers")
        .body_mut()
        .read_to_string()
        .expect("/metrics body");
    let accepted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("secrelay_ice_tcp_connections_accepted_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(accepted, Some(6.0), "the six WebRTC participants over TCP");
}

/// `lab gateway-load --viewers 5` (plus `extra`) against a fresh `secrelay serve`: the JSON
/// report and the table.
fn broadcast(extra: &[&str]) -> (Value, String) {
    broadcast_on(&[], extra)
}

/// [`broadcast`] against a gateway started with `serve_args`.
fn broadcast_on(serve_args: &[&str], extra: &[&str]) -> (Value, String) {
    let (server, url) = serve_with(serve_args);
    let pid = server.0.id().to_string();
    let mut args = vec!["gateway-load", "--target", &url];
    args.extend(["--viewers", "5", "--publishers", "1", "--duration", "3"]);
    args.extend_from_slice(extra);
    args.extend(["--server-pid", &pid]);
    args.extend(["--admin-key-file", server.admin_key_file()]);
    lab_json(&args)
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"))
}

/// What every broadcast report shows of its viewers: all connected, each viewer got the audio
/// and one video stream, every layer was sent with keyframes, each viewer ended on one layer,
/// loss counted.
fn check_viewers(r: &Value) {
    assert_eq!(r["participants"], 6, "{r}");
    assert_eq!(
        r["connected"], 6,
        "the publisher and every viewer connected: {r}"
    );
    let b = &r["broadcast"];
    assert_eq!(n(b, "publishers"), 1, "{b}");
    assert_eq!(n(b, "viewers"), 5, "{b}");
    // Each viewer got the audio and one video stream (one SSRC across the layers).
    assert_eq!(n(b, "viewers_with_audio"), 5, "{b}");
    assert_eq!(n(b, "viewers_with_video"), 5, "{b}");
    assert_eq!(n(b, "viewers_one_video_stream"), 5, "{b}");
    assert_eq!(n(&b["audio"], "streams"), 5, "{b}");
    assert_eq!(n(&b["video"], "streams"), 5, "{b}");
    for kind in ["audio", "video"] {
        let s = &b[kind];
        assert!(n(s, "received") > 0, "{kind}: {s}");
        // The loss figure is there, from sequence numbers (not more lost than expected).
        assert!(n(s, "lost") <= n(s, "expected"), "{kind}: {s}");
        assert!(
            n(s, "lost") * 20 <= n(s, "expected"),
            "{kind} lost more than 5 %: {s}"
        );
    }
    // Delivery within the viewers' windows: counted, never more than was sent.
    for kind in ["audio_delivery", "video_delivery"] {
        let d = &b[kind];
        assert!(n(d, "expected") > 0, "{kind}: {d}");
        assert!(n(d, "delivered") <= n(d, "expected"), "{kind}: {d}");
        assert_eq!(
            n(d, "undelivered"),
            n(d, "expected") - n(d, "delivered"),
            "{kind}: {d}"
        );
    }
    // The publisher sent all three layers with keyframes; each viewer ended on one layer,
    // and what it got of that layer is counted.
    let layers = b["layers"].as_array().expect("layer rows");
    let rids: Vec<&str> = layers.iter().filter_map(|l| l["rid"].as_str()).collect();
    assert_eq!(rids, ["q", "h", "f"], "{b}");
    for l in layers {
        assert!(n(l, "packets_sent") > 0, "{l}");
        assert!(n(l, "keyframes") >= 1, "{l}");
    }
    let at_end: u64 = layers.iter().map(|l| n(l, "viewers_at_end")).sum();
    assert_eq!(at_end, 5, "every viewer is on one layer at the end: {b}");
    for l in layers.iter().filter(|l| n(l, "viewers_at_end") > 0) {
        assert!(n(l, "packets_received") > 0, "{l}");
    }
    let received: u64 = layers.iter().map(|l| n(l, "packets_received")).sum();
    assert_eq!(received, n(&b["video"], "received"), "{b}");
}

/// [`check_viewers`], and the gateway's side: one retransmission buffer per layer (at the
/// publisher's gateway), the relay's latency, CPU and memory reported.
fn check_broadcast(r: &Value) {
    check_viewers(r);
    let b = &r["broadcast"];
    // One retransmission buffer per layer, its memory per stream reported.
    assert_eq!(b["retransmit_streams"].as_f64(), Some(3.0), "{b}");
    let per = b["retransmit_bytes_per_stream"]
        .as_f64()
        .unwrap_or_else(|| panic!("no buffer memory per stream: {b}"));
    assert!(per > 0.0, "{b}");
    for k in [
        "relay_latency_us",
        "gateway_cpu_us_per_relayed",
        "gateway_rss_bytes",
    ] {
        assert!(!r[k].is_null(), "{k}: {r}");
    }
}

#[test]
fn broadcast_sends_each_viewer_audio_and_one_simulcast_layer() {
    let (r, stdout) = broadcast(&[]);
    check_broadcast(&r);
    let b = &r["broadcast"];
    assert!(
        b["layer_choice"]
            .as_str()
            .is_some_and(|c| c.starts_with("best layer")),
        "{b}"
    );
    assert_eq!(n(b, "viewers_with_feedback"), 0, "{b}");
    assert!(stdout.contains("layer choice"), "{stdout}");
    assert!(stdout.contains("retransmit buffer"), "{stdout}");
}

#[test]
fn broadcast_viewers_with_transport_cc_have_the_estimate_choose() {
    let (r, stdout) = broadcast(&["--transport-cc"]);
    check_broadcast(&r);
    let b = &r["broadcast"];
    assert!(
        b["layer_choice"]
            .as_str()
            .is_some_and(|c| c.starts_with("estimate")),
        "{b}"
    );
    assert_eq!(n(b, "viewers_with_feedback"), 5, "{b}");
    assert!(n(b, "feedbacks_sent") >= 5, "{b}");
    assert!(stdout.contains("viewer feedback"), "{stdout}");
}

/// `--slow-viewer 300`: one more viewer over ICE-TCP that reads 300 kbit/s of the ~2 Mbit/s
/// broadcast. It connects and gets media, less than was sent (what waited past half a second
/// in its queue is dropped, `tcp_queue_stale`), on a line of its own; the other figures are
/// the five viewers' without it.
#[test]
fn broadcast_with_a_slow_tcp_viewer_reports_it_apart() {
    let (r, stdout) = broadcast_on(&["--ice-tcp", "127.0.0.1:0"], &["--slow-viewer", "300"]);
    check_broadcast(&r);
    let slow = &r["slow_viewer"];
    assert_eq!(slow["connected"], true, "{slow}");
    assert_eq!(n(slow, "read_kbps"), 300, "{slow}");
    assert!(n(slow, "received") > 0, "{slow}");
    assert!(n(slow, "received") < n(slow, "expected"), "{slow}");
    let drops = r["gateway_drops"].to_string();
    assert!(drops.contains("tcp_queue_stale"), "{drops}");
    assert!(stdout.contains("slow viewer"), "{stdout}");
}

/// `--publish-at`: the publisher at node a of a cluster (a real Redis; the nodes' pipes
/// authenticated by a private CA's certificates), the viewers at node b, which serves them
/// through its pipe from a: every viewer gets the broadcast as from one gateway, and b's
/// figures are its own (the packets it received through the pipe, once each).
#[test]
fn broadcast_with_the_publisher_at_another_node_reaches_the_viewers_through_the_pipe() {
    use secrelay_dtls::ca::{CaDir, Role};
    use secrelay_dtls::KeyType;
    use secrelay_testkit::redis::RedisServer;
    use secrelay_testkit::{wait_for, Signaling};

    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = CaDir::init(dir.path(), KeyType::EcdsaP256, false).unwrap();
    let config = |name: &str| {
        ca.issue(name, Role::Both, KeyType::EcdsaP256, false)
            .unwrap();
        let at = |f: String| dir.path().join(f).display().to_string();
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "cluster_redis = \"{}\"\ncluster_node = \"{name}\"\ncluster_lease_secs = 1.5\n\
                 cluster_pipe = \"127.0.0.1:0\"\ncluster_pipe_ca = \"{}\"\n\
                 cluster_pipe_cert = \"{}\"\ncluster_pipe_key = \"{}\"\n",
                redis.url(),
                at("ca.pem".into()),
                at(format!("{name}.pem")),
                at(format!("{name}.key")),
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let (a_config, b_config) = (config("a"), config("b"));
    let (_a, a_url) = serve_with(&["--config", &a_config]);
    let (b, b_url) = serve_with(&["--config", &b_config]);
    let key = std::fs::read_to_string(b.admin_key_file()).unwrap();
    let at_b = Signaling::new(&b_url).with_admin(key.trim());
    wait_for("two nodes registered", Duration::from_secs(10), || {
        at_b.cluster_nodes().is_ok_and(|n| n == ["a", "b"])
    });
    let pid = b.0.id().to_string();
    let (r, _) = lab_json(&[
        "gateway-load",
        "--target",
        &b_url,
        "--publish-at",
        &a_url,
        "--viewers",
        "5",
        "--duration",
        "3",
        "--server-pid",
        &pid,
        "--admin-key-file",
        b.admin_key_file(),
    ]);
    // (The retransmission buffers are at a, the publisher's node.)
    check_viewers(&r);
    let piped = at_b.metric("secrelay_cluster_pipe_received_total").unwrap();
    let sent = n(&r, "sent");
    assert!(piped > 0 && piped <= sent, "{piped} piped of {sent}: {r}");
}
