//! Interop with WebRTC clients in Python nobody here wrote (aiortc, aioice), through
//! `secrelay serve` as a user starts it: aiortc publishes a tone with WHIP that a WHEP
//! subscriber and a room participant decode; aiortc participants exchange data channel messages
//! (negotiated in and out of band, across a spread room's workers and across a room's nodes);
//! an aiortc participant, an SDES-SRTP phone whose SRTP is libsrtp's and a plain RTP phone share
//! a room and each hears the others' tones; an ICE phone on aioice does the same; phones that
//! speak only Opus or only PCMU hear each other transcoded. Each test starts the gateway, runs a
//! script from `interop/webrtc/` with a time limit, checks what it measured, then checks that
//! the gateway kept no session. Its tests run one at a time (`ONE_AT_A_TIME`); unlike the
//! browsers' (`interop_webrtc`), beside other test executables.

mod lab_support;
mod webrtc_support;

use std::process::Command;

use webrtc_support::*;

#[test]
fn aiortc_hears_the_tone_through_whip_whep_and_a_room_join() {
    let test = "aiortc_hears_the_tone_through_whip_whep_and_a_room_join";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    let (v, ok) = run_script(
        &python,
        "aiortc_tone.py",
        &["--base", &gw.base, "--room", "tone"],
        &gw,
    );
    assert!(ok, "aiortc_tone.py failed: {v}");
    for (who, hz) in [
        ("whep", 440.0),
        ("join", 440.0),
        ("whep_from_joiner", 660.0),
    ] {
        let r = &v[who];
        assert_eq!(r["detected"], true, "{who}: {r}");
        let peak = r["peak_hz"].as_f64().expect("peak_hz");
        assert!((peak - hz).abs() <= 5.0, "{who}: peak at {peak} Hz");
        assert!(r["frames"].as_u64().unwrap_or(0) > 0, "{who}: frames");
    }
    // Two talkers at once reach a listener with two receive slots, each on its own track.
    let mut tones: Vec<f64> = v["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| s["tone_hz"].as_f64().unwrap_or(0.0))
        .collect();
    tones.sort_by(f64::total_cmp);
    assert_eq!(tones, [660.0, 880.0], "one tone per receive slot: {v}");
    let parts = v["participants"].as_array().expect("participants");
    let mut kinds: Vec<&str> = parts.iter().filter_map(|p| p["kind"].as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["join", "whep", "whip"], "{v}");
    for p in parts {
        assert_eq!(p["state"], "connected", "{p}");
        assert!(p["srtp_profile"].is_string(), "negotiated profile: {p}");
    }
    for (who, status) in v["delete"].as_object().expect("delete") {
        assert_eq!(status, 200, "DELETE of {who}");
    }
    let rooms = gw.rooms_when_empty();
    assert_eq!(rooms["rooms"], serde_json::json!([]), "rooms left behind");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
    assert!(gw.metric("secrelay_handshakes_total{result=\"ok\"}") >= 3.0);
    // The WHEP subscriber has one slot: while the participant held it, the second talker
    // found none. aiortc agreed on `mid` (it binds tracks by section), so the gateway kept that
    // talker from taking the occupied section over, and counted it.
    assert!(gw.metric("secrelay_drops_total{reason=\"no_slot\"}") > 0.0);
    assert_eq!(
        gw.metric("secrelay_handshakes_total{result=\"failed\"}"),
        0.0
    );
}

/// Data channels with aiortc (an SCTP stack nobody here wrote) on both ends, joined with data
/// channels and no media: 500 messages each way in order, a 60 kB binary message intact, and
/// an unordered channel without retransmissions that the receiver never opened reaches it on
/// a channel the gateway opened with the sender's settings.
#[test]
fn aiortc_peers_exchange_data_channel_messages_through_the_room() {
    let test = "aiortc_peers_exchange_data_channel_messages_through_the_room";
    let Some((v, gw)) = aiortc_data(test, &[], "aiortc-data", &[]) else {
        return;
    };
    assert_chat_exchanged(&v, 500);
    assert_eq!(
        v["lossy_channel_at_b"],
        serde_json::json!({"ordered": false, "max_retransmits": 0}),
        "{v}"
    );
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
}

/// Data channels agreed on out of band (`negotiated: true`), with aiortc on both ends: the
/// gateway configured with the channel (`[[data_negotiated]]`, its stream id 100) opens it on
/// each participant's association without DCEP, and 100 messages each way on it reach the
/// other peer's channel of that id in order, beside the channels opened by DCEP.
#[test]
fn aiortc_negotiated_data_channels_carry_messages_through_the_room() {
    let test = "aiortc_negotiated_data_channels_carry_messages_through_the_room";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("negotiated.toml");
    std::fs::write(
        &config,
        "[[data_negotiated]]\nid = 100\nlabel = \"agreed\"\n",
    )
    .unwrap();
    let serve = ["--config", config.to_str().unwrap()];
    let args = ["--negotiated", "100", "--messages", "100"];
    let Some((v, gw)) = aiortc_data(test, &serve, "negotiated", &args) else {
        return;
    };
    let agreed = &v["negotiated"];
    assert_eq!(agreed["received"], serde_json::json!([100, 100]), "{v}");
    assert_eq!(agreed["in_order"], serde_json::json!([true, true]), "{v}");
    assert_chat_exchanged(&v, 100);
    assert_eq!(
        gw.metric("secrelay_data_discarded_total{reason=\"unknown_channel\"}"),
        0.0
    );
}

/// Data channels in a room spread over two workers, with aiortc on both ends: a member joins
/// (the room's worker) and a WHEP viewer with data channels joins on the other worker; their
/// messages cross between the workers both ways, complete and in order, a 60 kB binary message
/// intact; and a message the API sends to the room reaches both.
#[test]
fn aiortc_data_channels_cross_between_the_workers_of_a_spread_room() {
    let test = "aiortc_data_channels_cross_between_the_workers_of_a_spread_room";
    let args = ["--b-whep", "--server-message"];
    let Some((v, gw)) = aiortc_data(test, &["--workers", "2"], "spread-data", &args) else {
        return;
    };
    assert_eq!(
        v["worker_participants"],
        serde_json::json!([1, 1]),
        "the viewer joined on the other worker: {v}"
    );
    assert_chat_exchanged(&v, 500);
    let to_room = &v["server_message"]["received"];
    assert_eq!(to_room, &serde_json::json!([true, true]), "{v}");
    assert_eq!(gw.metric("secrelay_participants"), 0.0);
}

#[test]
fn aiortc_an_sdes_phone_on_libsrtp_and_a_plain_phone_hear_each_other_in_one_room() {
    let test = "aiortc_an_sdes_phone_on_libsrtp_and_a_plain_phone_hear_each_other_in_one_room";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    let (stop, talker) = talking_phones(&gw.base, "mixed");
    let (v, ok) = run_script(
        &python,
        "aiortc_phones.py",
        &[
            "--base",
            &gw.base,
            "--room",
            "mixed",
            "--expect",
            "1000,1400",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let phones = talker.join().expect("the phones' thread");
    assert!(ok, "aiortc_phones.py failed: {v}");
    assert_eq!(v["codecs"][0], "PCMU", "{v}");
    for (p, name, other_hz) in [(&phones[0], "sdes", 1400.0), (&phones[1], "plain", 1000.0)] {
        assert_eq!(
            p.failed, 0,
            "{name}: libsrtp opens everything the gateway sends it"
        );
        let (share, samples) = p.tone_share(660.0);
        assert!(
            share >= 0.5,
            "{name} phone: aiortc's 660 Hz holds {share:.2} of the energy of the best of {} streams ({samples} samples)",
            p.heard.len()
        );
        let (share, _) = p.tone_share(other_hz);
        assert!(
            share >= 0.5,
            "{name} phone: the other phone's {other_hz} Hz: {share:.2}"
        );
    }
    leave_and_check_empty(&gw, &phones);
}

#[test]
fn an_ice_phone_on_aioice_and_a_plain_phone_hear_each_other_in_one_room() {
    let test = "an_ice_phone_on_aioice_and_a_plain_phone_hear_each_other_in_one_room";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    // The plain phone talks (1000 Hz) and listens while aioice's phone does ICE and talks.
    let (stop, talker) = talking(vec![TonePhone::join(
        &gw.base, "ice", false, 0x1ce0, 1000.0,
    )]);
    let (v, ok) = run_script(
        &python,
        "aioice_phone.py",
        &[
            "--base", &gw.base, "--room", "ice", "--expect", "1000", "--sends", "500",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let plain = talker.join().expect("the plain phone's thread").remove(0);
    assert!(ok, "aioice_phone.py failed: {v}");
    assert_eq!(
        v["ice_lite"], true,
        "the gateway's answer says a=ice-lite: {v}"
    );
    let candidate = v["gateway_candidates"][0].as_str().unwrap_or_default();
    let port = candidate.split_whitespace().nth(5).unwrap_or_default();
    assert_eq!(
        v["nominated"].as_str(),
        Some(format!("127.0.0.1:{port}").as_str()),
        "the pair nominated is the leg's own port: {v}"
    );
    assert!(v["expect_share"].as_f64().unwrap() >= 0.5, "{v}");
    let (share, samples) = plain.tone_share(500.0);
    assert!(
        share >= 0.5,
        "the plain phone: aioice's 500 Hz holds {share:.2} of the energy ({samples} samples)"
    );
    assert!(
        gw.metric("secrelay_drops_total{reason=\"stun_rejected\"}") == 0.0,
        "every check aioice sent was answered"
    );
}

#[test]
fn aiortc_speaking_only_opus_and_pcmu_phones_hear_each_other_transcoded() {
    let test = "aiortc_speaking_only_opus_and_pcmu_phones_hear_each_other_transcoded";
    let Some(python) = python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let gw = Gateway::start();
    // Phones that offer PCMU only: an SDES one whose SRTP is libsrtp's, and a plain one.
    let (stop, talker) = talking_phones(&gw.base, "transcoded");
    // aiortc offers Opus only: it hears the phones' PCMU as Opus, they hear its Opus as PCMU.
    let (v, ok) = run_script(
        &python,
        "aiortc_phones.py",
        &[
            "--base",
            &gw.base,
            "--room",
            "transcoded",
            "--expect",
            "1000,1400",
            "--codec",
            "opus",
        ],
        &gw,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let phones = talker.join().expect("the phones' thread");
    assert!(ok, "aiortc_phones.py failed: {v}");
    assert_eq!(v["codecs"][0], "opus", "{v}");
    for (p, name) in [(&phones[0], "sdes"), (&phones[1], "plain")] {
        assert_eq!(
            p.failed, 0,
            "{name}: libsrtp opens everything the gateway sends it"
        );
        let (share, samples) = p.tone_share(660.0);
        assert!(
            share >= 0.5,
            "{name} phone: aiortc's 660 Hz, sent as Opus, holds {share:.2} of the energy of the best of {} PCMU streams ({samples} samples)",
            p.heard.len()
        );
    }
    assert!(gw.metric("secrelay_media_transcoded_total") > 100.0);
    assert!(gw.metric("secrelay_media_decoded_total") > 100.0);
    leave_and_check_empty(&gw, &phones);
}

/// Data channels in a room across two nodes of a cluster, with aiortc on both ends: a member
/// joins at the room's node a, and a WHEP viewer with data channels is served at node b (not
/// redirected); their messages cross the link between the nodes both ways, complete and in
/// order, a 60 kB binary message intact; and a message the API at a sends to the room reaches
/// the viewer at b.
#[test]
fn aiortc_data_channels_cross_between_the_nodes_of_a_room() {
    use secrelay_testkit::redis::RedisServer;

    let test = "aiortc_data_channels_cross_between_the_nodes_of_a_room";
    let Some(python) = python(test) else { return };
    let Some(redis) = RedisServer::start(0) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_certs, nodes, sig) = piped_nodes(&redis, &["a", "b"]);
    let out = Command::new("timeout")
        .args(["--kill-after=5", "90"])
        .arg(&python)
        .arg(script("aiortc_data.py"))
        .args(["--base", &nodes[0].url(), "--base-b", &nodes[1].url()])
        .args(["--room", "nodes-data", "--b-whep", "--server-message"])
        .env("SECRELAY_ADMIN_KEY", nodes[0].admin_key().expose())
        .output()
        .expect("running timeout(1) with python");
    let v = lab_support::script_json("aiortc_data.py", &out, "");
    eprintln!("aiortc_data.py across nodes: {v}");
    assert!(out.status.success(), "{v}");
    let b_location = v["b_location"].as_str().unwrap_or_default();
    assert!(
        b_location.starts_with(&nodes[1].url()),
        "the viewer was served at b: {v}"
    );
    assert_chat_exchanged(&v, 500);
    let to_room = &v["server_message"]["received"];
    assert_eq!(to_room, &serde_json::json!([true, true]), "{v}");
    let data = |n: usize, event: &str| {
        sig[n]
            .metric(&format!(
                "secrelay_cluster_pipe_data_messages_total{{event=\"{event}\"}}"
            ))
            .unwrap()
    };
    // a's 500 chat messages, its binary one, its 10 unreliable ones and the server's; b's 500.
    assert!(data(0, "sent") >= 512, "a sent {}", data(0, "sent"));
    assert!(
        data(1, "received") >= 512,
        "b received {}",
        data(1, "received")
    );
    assert!(data(1, "sent") >= 500 && data(0, "received") >= 500);
    assert_eq!(data(0, "dropped") + data(1, "dropped"), 0);
    for n in nodes {
        n.shutdown();
    }
}
