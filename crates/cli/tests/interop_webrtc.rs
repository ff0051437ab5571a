//! Interop with browsers nobody here wrote, through `secrelay serve` as a user starts it:
//! headless Chromium publishes its fake camera and microphone with WHIP to a page that plays
//! them through WHEP (Firefox ESR too), room pages play each other (over HTTPS with the private
//! CA trusted, in a token room, behind a narrow link with simulcast, joining late with loss, at
//! other nodes of a room), and Chromium calls a plain RTP phone through secrelay's ng socket, as
//! a SIP proxy sets such a call up, with audio both ways, and the other way round. The clients
//! are the scripts in `interop/webrtc/`; each test starts the gateway, runs a script with a time
//! limit, checks what it measured, then checks that the gateway kept no session
//! (`GET /api/rooms`) and counted the handshakes (`/metrics`). The Python clients' tests are
//! `interop_aiortc`; what both share, `webrtc_support`.

// scripts/run-tests: alone (headless Chromium plays media here; a second heavy test
// executable beside it would disturb the browser's timing)

mod lab_support;
mod webrtc_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use lab_support::{chromium, firefox, missing};
use webrtc_support::*;

/// Firefox ESR (headless, fake devices) publishes with WHIP and plays with WHEP through the
/// gateway's defaults: its ECDSA certificate and its DTLS as Firefox makes it. Firefox gathers
/// no loopback candidates, so this gateway listens on the host's own address.
#[test]
fn firefox_esr_publishes_and_plays_through_whip_and_whep() {
    let test = "firefox_esr_publishes_and_plays_through_whip_and_whep";
    let Some(firefox) = firefox(test) else {
        return;
    };
    let Some(ip) = host_ipv4() else {
        missing(
            test,
            "the host has no global IPv4 address for Firefox's candidates",
        );
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::spawn(&format!("{ip}:0"), &ip, &[]);
    let firefox = firefox.to_string_lossy().into_owned();
    let args = [
        "--base",
        &gw.base,
        "--chromium",
        &firefox,
        "--room",
        "firefox",
        "--timeout",
        "40",
    ];
    let (v, ok) = run_script(Path::new("python3"), "chromium_av.py", &args, &gw);
    assert!(ok, "chromium_av.py with Firefox failed: {v}");
    assert!(
        v["chromium"].as_str().unwrap_or("").contains("Firefox"),
        "{v}"
    );
    let play = &v["play"];
    let video = &play["inbound"]["video"];
    assert!(video["framesDecoded"].as_u64().unwrap_or(0) > 0, "{play}");
    assert!(play["videoWidth"].as_u64().unwrap_or(0) > 0, "{play}");
    let audio = &play["inbound"]["audio"];
    assert!(
        audio["packetsReceived"].as_u64().unwrap_or(0) > 0,
        "{audio}"
    );
    assert_eq!(play["transport"]["dtlsState"], "connected", "{play}");
    assert_eq!(v["play_delete"], 200);
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// A decoded video frame reached the screen: `requestVideoFrameCallback` fired for it, or the
/// element's playback quality counts it. Chromium updates that count a little after the
/// callback, so a page that reads both at once on a busy machine can see 1 callback and
/// 0 frames.
fn assert_frame_shown(play: &serde_json::Value) {
    let n = |k: &str| play[k].as_u64().unwrap_or(0);
    assert!(
        play["inbound"]["video"]["framesDecoded"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no video frame decoded: {play}"
    );
    assert!(
        n("totalVideoFrames") > 0 || n("frameCallbacks") > 0,
        "no video frame shown: {play}"
    );
}

#[test]
fn chromium_plays_what_chromium_publishes_through_whip_and_whep() {
    let test = "chromium_plays_what_chromium_publishes_through_whip_and_whep";
    let Some((v, gw)) = chromium_script(test, "chromium_av.py", &["--room", "av"]) else {
        return;
    };
    let play = &v["play"];
    assert_frame_shown(play);
    assert!(play["videoWidth"].as_u64().unwrap_or(0) > 0, "{play}");
    let audio = &play["inbound"]["audio"];
    assert!(
        audio["packetsReceived"].as_u64().unwrap_or(0) > 0,
        "{audio}"
    );
    assert!(
        play["inbound"]["video"]["framesDecoded"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{play}"
    );
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(v["play_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
    assert!(gw.metric("secrelay_handshakes_total{result=\"ok\"}") >= 2.0);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
}

/// Data channels through a room, between two pages of the gateway's own room page (each
/// page's chat channel): 1,000 text messages each way arrive complete and in order, a 200 kB
/// binary message arrives intact, and a page that joins late gets what is sent after it
/// joined and nothing from before; the server's messages through the API reach the room or
/// one participant; the gateway's metrics count what it relayed.
#[test]
fn chromium_pages_exchange_data_channel_messages_through_the_room() {
    let test = "chromium_pages_exchange_data_channel_messages_through_the_room";
    let Some((v, gw)) = chromium_venv_script(
        test,
        "chromium_data.py",
        &["--room", "data", "--messages", "1000", "--binary", "200000"],
    ) else {
        return;
    };
    assert_eq!(v["sent"], serde_json::json!([1000, 1000]), "{v}");
    assert_eq!(v["in_order"], serde_json::json!([true, true]), "{v}");
    assert_eq!(v["binary"]["size"], 200000, "{v}");
    assert_eq!(v["late"]["earlier"], 0, "{v}");
    // The server's own messages: to the room (all three pages), to one participant (one page);
    // a body without text or binary is refused.
    assert_eq!(v["api_room"], serde_json::json!([200, {"sent": 3}]), "{v}");
    assert_eq!(v["api_bad"], 400, "{v}");
    assert_eq!(v["api_one"], serde_json::json!([200]), "{v}");
    assert_eq!(v["api_one_received"], 1, "{v}");
    // Both pages' 1,000 and the binary one, then 10 to the two others: relayed, none dropped.
    let relayed = gw.metric("secrelay_data_messages_total{event=\"in\"}");
    assert!(relayed >= 2011.0, "messages relayed: {relayed}");
    assert!(gw.metric("secrelay_data_messages_total{event=\"out\"}") >= 2025.0);
    assert_eq!(
        gw.metric("secrelay_data_messages_total{event=\"rate_limited\"}"),
        0.0
    );
    assert!(gw.metric("secrelay_data_bytes_total{direction=\"in\"}") >= 200_000.0);
}

/// The same over HTTPS: the gateway's certificate from a private CA, which is the one trust
/// anchor added to Chromium's NSS database; the pages come over HTTPS too.
#[test]
fn chromium_publishes_and_plays_over_https_with_the_private_ca_trusted() {
    let test = "chromium_publishes_and_plays_over_https_with_the_private_ca_trusted";
    let Some(chromium) = chromium(test) else {
        return;
    };
    if Command::new("certutil").arg("-H").output().is_err() {
        missing(test, "no certutil (Debian package libnss3-tools)");
        return;
    }
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let ok = |c: &mut Command| {
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["ca", "init", "--dir"])
        .arg(dir.path()));
    ok(Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["ca", "issue", "--dir"])
        .arg(dir.path())
        .args(["--name", "127.0.0.1", "--server"]));
    let gw = Gateway::start_https(dir.path());
    assert!(gw.base.starts_with("https://"), "{}", gw.base);
    let chromium = chromium.to_string_lossy().into_owned();
    let ca = dir.path().join("ca.pem");
    let page_cert = dir.path().join("127.0.0.1.pem");
    let page_key = dir.path().join("127.0.0.1.key");
    let (v, ok) = run_script(
        &python,
        "chromium_av.py",
        &[
            "--base",
            &gw.base,
            "--ca",
            ca.to_str().unwrap(),
            "--page-cert",
            page_cert.to_str().unwrap(),
            "--page-key",
            page_key.to_str().unwrap(),
            "--room",
            "av-https",
            "--chromium",
            &chromium,
        ],
        &gw,
    );
    assert!(ok, "chromium_av.py failed: {v}");
    assert_eq!(v["page_origin"], "https", "{v}");
    let play = &v["play"];
    assert_frame_shown(play);
    assert!(
        play["inbound"]["audio"]["packetsReceived"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{play}"
    );
    assert_eq!(v["publish_delete"], 200);
    assert_eq!(v["play_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    // The signaling really went over TLS: the browsers' handshakes are counted, and none failed.
    let (_, metrics) = gw.get("/metrics");
    let handshakes: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("secrelay_tls_handshakes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(handshakes >= 2.0, "{metrics}");
    for reason in ["alert_received", "incompatible", "malformed"] {
        assert_eq!(
            gw.metric(&format!(
                "secrelay_tls_handshake_failures_total{{reason=\"{reason}\"}}"
            )),
            0.0,
            "Chromium refused something: {reason}"
        );
    }
}

/// The gateway's own room page (`/room/{name}`) in five tabs of one headless Chromium: each
/// publishes its fake camera and microphone when it loads, and the gateway's new offers (the
/// page's events channel) give every page sections for those who come after it, so each plays
/// the other four videos and four audios; a screenshot shows a remote video that is not black.
/// The gateway offers ICE-TCP too, and every page's media takes UDP (the API says so).
#[test]
fn five_room_pages_each_play_the_other_four_and_show_video() {
    let test = "five_room_pages_each_play_the_other_four_and_show_video";
    let Some(chromium) = chromium(test) else {
        return;
    };
    // The driver needs websocket-client (DevTools protocol) and pillow (the screenshot), from
    // scripts/setup's venv.
    let Some(python) = python(test) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start_with(&["--ice-tcp", "127.0.0.1:0"]);
    let chromium = chromium.to_string_lossy().into_owned();
    let (v, ok) = run_script(
        &python,
        "chromium_room.py",
        &[
            "--base",
            &gw.base,
            "--pages",
            "5",
            "--room",
            "five",
            "--chromium",
            &chromium,
            "--timeout",
            "60",
        ],
        &gw,
    );
    assert!(ok, "chromium_room.py failed: {v}");
    let pages = v["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 5, "{v}");
    for p in pages {
        assert_eq!(p["videos_decoding"], 4, "{p}");
        assert_eq!(p["audios_playing"], 4, "{p}");
        assert!(p["error"].is_null(), "{p}");
        // Each remote tile is labelled with who is on it: every other participant's video
        // and audio, and never the page's own name.
        let me = p["me"].as_str().expect("the page knows its name");
        let mut want: Vec<String> = p["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m.as_str())
            .filter(|m| *m != me)
            .flat_map(|m| [format!("{m} audio"), format!("{m} video")])
            .collect();
        want.sort();
        assert_eq!(p["tiles"], serde_json::json!(want), "{p}");
    }
    // The first page joined alone and was offered sections as the others came.
    assert!(pages[0]["offers"].as_u64().unwrap_or(0) >= 1, "{v}");
    // Offered both, each browser nominated UDP (the TCP candidate's priority is lower).
    assert_eq!(
        v["transports"],
        serde_json::json!(["udp", "udp", "udp", "udp", "udp"]),
        "{v}"
    );
    assert!(
        v["screenshot"]["mean"].as_f64().unwrap_or(0.0) > 20.0,
        "{v}"
    );
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// The room page in a room that needs a token: three headless Chromium pages given an access
/// token in their address's fragment each play the other two (renegotiating as the others
/// arrive), list the others by the token's identity, and keep the token out of the address.
#[test]
fn three_room_pages_in_a_token_room_each_play_the_other_two() {
    let test = "three_room_pages_in_a_token_room_each_play_the_other_two";
    let Some(chromium) = chromium(test) else {
        return;
    };
    let Some(python) = python(test) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    std::fs::write(
        &config,
        "[api_keys]\npages = \"0123456789abcdef0123456789abcdef-pages\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(["token", "create", "--config", &config, "--key", "pages"])
        .args([
            "--identity",
            "page",
            "--room",
            "locked",
            "--publish",
            "--subscribe",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let gw = Gateway::start_with(&["--config", &config]);
    let chromium = chromium.to_string_lossy().into_owned();
    let (v, ok) = run_script(
        &python,
        "chromium_room.py",
        &[
            "--base",
            &gw.base,
            "--pages",
            "3",
            "--room",
            "locked",
            "--token",
            &token,
            "--chromium",
            &chromium,
            "--timeout",
            "60",
        ],
        &gw,
    );
    assert!(ok, "chromium_room.py failed: {v}");
    let pages = v["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 3, "{v}");
    for p in pages {
        assert_eq!(p["videos_decoding"], 2, "{p}");
        assert_eq!(p["audios_playing"], 2, "{p}");
        assert!(p["error"].is_null(), "{p}");
        assert_eq!(p["token_in_address"], false, "{p}");
        assert_eq!(
            p["members"],
            serde_json::json!(["page", "page", "page"]),
            "{p}"
        );
    }
    assert!(
        pages[0]["offers"].as_u64().unwrap_or(0) >= 1,
        "renegotiated: {v}"
    );
    // Without the token the room refuses a join.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let r = agent
        .post(&format!("{}/rooms/locked/join", gw.base))
        .header("Content-Type", "application/sdp")
        .send("v=0\r\n")
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

/// Viewers that come late and lose packets (issue 17): Chromium publishes; 5 s later one
/// WHEP viewer joins directly and another through a relay that drops 5 % of the media the
/// gateway sends it. Both must decode their first frame quickly (the gateway asks the publisher
/// for a keyframe when a viewer takes the stream: the late viewer's within 1 s of connecting),
/// and keep decoding for 8 s; the lossy one NACKs what it lost and gets it retransmitted from
/// the gateway's buffer, with at most 2 freezes.
/// A simulcast publisher (three layers from a 1280x720 camera) and a viewer behind a link
/// limited to 300 kbit/s (a token-bucket relay, drop-tail): the viewer is sent the low layer
/// while limited (its estimate from transport-cc feedback, probes that fail), and a higher
/// one once the limit is lifted (a probe delivered cleanly raises the estimate); it decodes
/// throughout.
#[test]
fn chromium_simulcast_viewer_behind_a_narrow_link_gets_the_low_layer_then_a_higher_one() {
    let test =
        "chromium_simulcast_viewer_behind_a_narrow_link_gets_the_low_layer_then_a_higher_one";
    let args = [
        "--limit",
        "300",
        "--limited",
        "12",
        "--after",
        "30",
        "--timeout",
        "20",
    ];
    let Some((v, gw)) = chromium_script(test, "chromium_simulcast.py", &args) else {
        return;
    };
    let checks = &v["checks"];
    for check in [
        "low_layer_while_limited",
        "higher_layer_after_lift",
        "decoding_throughout",
        "left",
    ] {
        assert_eq!(checks[check], true, "{check}: {v}");
    }
    let timeline = v["timeline"].as_array().expect("timeline");
    // The gateway's side of it: the low layer chosen while limited, probes sent, one
    // delivered after the lift, and a higher layer chosen.
    let limited_end = timeline
        .iter()
        .rfind(|x| x["limited"] == true)
        .expect("a limited sample");
    assert_eq!(limited_end["gateway"]["current"], "q", "{v}");
    let last = timeline.last().expect("samples");
    assert_ne!(last["gateway"]["current"], "q", "{v}");
    assert!(
        last["gateway"]["probes_delivered"].as_u64().unwrap_or(0) >= 1,
        "{v}"
    );
    assert!(gw.metric("secrelay_feedback_total{event=\"probe_packets\"}") > 0.0);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

#[test]
fn chromium_viewers_that_join_late_and_lose_packets_keep_decoding() {
    let test = "chromium_viewers_that_join_late_and_lose_packets_keep_decoding";
    let args = [
        "--room",
        "late",
        "--late",
        "5",
        "--lossy-viewer",
        "5",
        "--watch",
        "8",
        "--timeout",
        "30",
    ];
    let Some((v, gw)) = chromium_script(test, "chromium_av.py", &args) else {
        return;
    };
    let first = v["play"]["firstFrameAfterConnectMs"].as_f64();
    assert!(
        first.is_some_and(|ms| ms <= 1000.0),
        "the late viewer's first frame {first:?} ms after connecting: {v}"
    );
    for page in ["play", "lossy"] {
        let w = &v[format!("{page}_watched")];
        let per_second: Vec<u64> = w["framesDecodedPerSecond"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}: no samples: {v}"))
            .iter()
            .map(|x| x.as_u64().unwrap_or(0))
            .collect();
        assert_eq!(per_second.len(), 8, "{v}");
        assert!(
            per_second.windows(2).all(|p| p[1] > p[0]),
            "{page} kept decoding every second: {per_second:?}"
        );
        let end = &w["end"];
        assert!(
            end["freezeCount"].as_u64().unwrap_or(99) <= 2,
            "{page}: {w}"
        );
        assert!(
            end["totalFreezesDuration"].as_f64().unwrap_or(99.0) <= 2.0,
            "{page}: {w}"
        );
    }
    let lossy = &v["lossy_watched"]["end"];
    assert!(v["relay"]["dropped"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(lossy["nackCount"].as_u64().unwrap_or(0) > 0, "{lossy}");
    assert!(
        lossy["retransmittedPacketsReceived"].as_u64().unwrap_or(0) > 0,
        "the gateway answered the NACKs: {lossy}"
    );
    assert!(gw.metric("secrelay_feedback_total{event=\"retransmitted\"}") > 0.0);
    assert!(gw.metric("secrelay_feedback_total{event=\"keyframe_requests_out\"}") >= 1.0);
    assert_eq!(v["play_delete"], 200);
    assert_eq!(v["lossy_delete"], 200);
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
}

/// Chromium calls a plain phone through the ng protocol (chromium_ng.py in the SIP proxy's
/// place); then each side offers again in the answered call: the browser restarts ICE, the
/// phone re-INVITEs and the page answers our new offer ([`reinvited`]).
#[test]
fn chromium_calls_a_plain_rtp_phone_through_the_ng_protocol() {
    ng_call_between_chromium_and_a_phone(
        "chromium_calls_a_plain_rtp_phone_through_the_ng_protocol",
        false,
    );
}

/// The other way: the phone calls, and secrelay offers WebRTC (ICE-lite, DTLS actpass) to the
/// browser, which answers it.
#[test]
fn a_plain_rtp_phone_calls_chromium_through_the_ng_protocol() {
    ng_call_between_chromium_and_a_phone(
        "a_plain_rtp_phone_calls_chromium_through_the_ng_protocol",
        true,
    );
}

/// What the browser's and the phone's re-INVITEs left: the browser's ICE restart gave it new
/// credentials of ours, and after it and after our new offer to the page (the phone's
/// re-INVITE) audio went on both ways on the call's first DTLS association.
fn reinvited(v: &serde_json::Value) {
    let r = &v["restart"];
    assert_ne!(r["remote_ufrag_before"], r["remote_ufrag_after"], "{v}");
    assert!(r["remote_ufrag_after"].is_string(), "{v}");
    for step in [r, &v["reinvite"]] {
        let heard = |at: &str, way: &str, n: &str| step[at][way][n].as_u64().unwrap_or(0);
        for (way, n) in [("inbound", "packetsReceived"), ("outbound", "packetsSent")] {
            assert!(
                heard("after", way, n) > heard("before", way, n) + 100,
                "{way} {n}: {v}"
            );
        }
        assert_eq!(step["after"]["transport"]["dtlsState"], "connected", "{v}");
    }
    assert_eq!(v["reinvite"]["signaling"], "stable", "{v}");
    assert!(
        v["reinvite"]["phone_heard_since_restart"]
            .as_u64()
            .unwrap_or(0)
            >= 100,
        "{v}"
    );
}

fn ng_call_between_chromium_and_a_phone(test: &str, callee: bool) {
    let Some(chromium) = chromium(test) else {
        return;
    };
    // The driver (the SIP proxy's part and the phone) needs only Python's standard library.
    let python = std::env::var_os("SECRELAY_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start_with(&["--ng", "127.0.0.1:0"]);
    let ng = gw.ng.clone().expect("serve printed its ng address");
    let chromium = chromium.to_string_lossy().into_owned();
    let mut args = vec!["--ng", &ng, "--chromium", &chromium];
    if callee {
        args.push("--callee");
    } else {
        args.push("--reinvite");
    }
    let (v, ok) = run_script(&python, "chromium_ng.py", &args, &gw);
    assert!(ok, "chromium_ng.py failed: {v}");
    if !callee {
        reinvited(&v);
    }
    // The callee's side was plain RTP; the browser's DTLS-SRTP, both on PCMU (the codec the
    // phone took), and audio went both ways.
    assert_eq!(v["sdp_to_phone_transport"], "RTP/AVP", "{v}");
    let b = &v["browser"];
    assert_eq!(b["inbound"]["codec"], "audio/PCMU", "{v}");
    assert_eq!(b["outbound"]["codec"], "audio/PCMU", "{v}");
    assert!(
        b["inbound"]["packetsReceived"].as_u64().unwrap_or(0) > 100,
        "{v}"
    );
    assert!(
        b["inbound"]["totalAudioEnergy"].as_f64().unwrap_or(0.0) > 0.0,
        "{v}"
    );
    assert_eq!(b["transport"]["dtlsState"], "connected", "{v}");
    let phone = &v["phone"];
    assert!(phone["received"].as_u64().unwrap_or(0) > 100, "{v}");
    assert!(phone["loudest_rms"].as_f64().unwrap_or(0.0) >= 300.0, "{v}");
    assert_eq!(phone["other_payload_types"], 0, "{v}");
    assert_eq!(
        v["query_tags"],
        serde_json::json!(["browser", "phone"]),
        "{v}"
    );
    assert_eq!(v["delete"], "ok");
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert!(gw.metric("secrelay_ng_requests_total{result=\"ok\"}") >= 4.0);
    assert_eq!(
        gw.metric("secrelay_ng_requests_total{result=\"error\"}"),
        0.0
    );
}

/// A room across three nodes of a cluster (a real Redis; the nodes' pipes authenticated by
/// certificates of a private CA made here): Chromium publishes its fake camera and microphone
/// at node a, and three Chromium pages play them, one from a and one each from b and c, where
/// each is served (not redirected): what they decode crossed to b and c through the pipes,
/// once per node, and their keyframe requests went back through them.
#[test]
fn chromium_viewers_at_two_other_nodes_play_what_chromium_publishes_at_the_rooms_node() {
    use secrelay_testkit::redis::RedisServer;

    let test = "chromium_viewers_at_two_other_nodes_play_what_chromium_publishes_at_the_rooms_node";
    let Some(chromium) = chromium(test) else {
        return;
    };
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_certs, nodes, sig) = piped_nodes(&redis, &["a", "b", "c"]);
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120"])
        .arg("python3")
        .arg(script("chromium_av.py"))
        .args(["--base", &nodes[0].url()])
        .args(["--viewer-base", &nodes[1].url()])
        .args(["--viewer-base", &nodes[2].url()])
        .args(["--room", "spread", "--publisher-first", "--timeout", "30"])
        .args(["--watch", "3"])
        .arg("--chromium")
        .arg(&chromium)
        .env("SECRELAY_ADMIN_KEY", nodes[0].admin_key().expose())
        .output()
        .expect("running timeout(1) with python3");
    let v = lab_support::script_json("chromium_av.py", &out, "");
    eprintln!("chromium_av.py across nodes: {v}");
    assert!(out.status.success(), "{v}");
    for page in ["play", "far1", "far2"] {
        assert_frame_shown(&v[page]);
        assert_eq!(v[format!("{page}_delete")], 200, "{v}");
        // Decoding went on while it watched for 3 s.
        let w = &v[format!("{page}_watched")];
        let decoded = |at: &str| w[at]["framesDecoded"].as_u64().unwrap_or(0);
        assert!(decoded("end") >= decoded("start") + 30, "{page}: {w}");
    }
    let metric = |n: usize, series: &str| sig[n].metric(series).unwrap();
    // Each far viewer was a participant of its own node, fed through a pipe from a.
    for n in [1, 2] {
        assert!(metric(n, "secrelay_handshakes_total{result=\"ok\"}") >= 1);
        assert!(metric(n, "secrelay_cluster_pipe_received_total") > 100);
        assert!(
            metric(n, "secrelay_cluster_pipe_sent_total") > 0,
            "no feedback went back"
        );
    }
    assert!(metric(0, "secrelay_cluster_pipe_sent_total") > 200);
    for n in nodes {
        n.shutdown();
    }
}
