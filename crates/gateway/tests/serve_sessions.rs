//! Sessions through `secrelay serve` over real sockets, with the lab's simulated participants
//! (HTTP offer, ICE checks, DTLS-SRTP, SRTP on their own UDP sockets): media relayed between
//! WHIP, WHEP and conference legs; consent expiry, a wrong fingerprint, DELETE and shutdown
//! tear sessions down, count why, and leave nothing behind.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_dtls::{Certificate, KeyType};
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::{Leg, Phase, Signaling, SimParticipant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn start(consent_secs: f64) -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        consent_timeout_secs: consent_secs,
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap()
}

fn signaling(s: &Server) -> Signaling {
    Signaling::new(s.url()).with_admin(s.admin_key().expose())
}

/// Datagrams the gateway dropped for `reason` so far.
fn dropped(s: &Server, reason: &str) -> u64 {
    s.gateway()
        .stats()
        .totals()
        .drops_by_reason
        .iter()
        .find(|e| e.0 == reason)
        .map_or(0, |e| e.1)
}

/// Drives the participants until each has received `packets`; whether they did in 20 s.
fn until_all_hear(group: &mut [SimParticipant], packets: u64) -> bool {
    SimParticipant::drive_until(group, Duration::from_secs(20), |g| {
        g.iter().all(|p| p.received() >= packets)
    })
    .unwrap()
}

fn wait(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn whip_whep_and_join_legs_relay_media_both_ways() {
    let s = start(30.0);
    let sig = signaling(&s);
    let epoch = Instant::now();
    // The subscriber first: it must receive publishers that arrive after it.
    let mut group = vec![
        SimParticipant::join(&sig, "hall", Leg::Whep, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "hall", Leg::Whip, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "hall", Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "hall", Leg::Join, LOCAL, epoch).unwrap(),
    ];
    let up = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter().all(|p| p.phase == Phase::Connected)
    })
    .unwrap();
    assert!(up, "not all connected: {group:?}");
    // Everybody who receives hears every sender but itself.
    let heard = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter().filter(|p| p.leg.receives()).all(|p| {
            p.streams.len()
                == g.iter()
                    .filter(|q| q.leg.sends() && !std::ptr::eq(*q, p))
                    .count()
                && p.streams.values().all(|st| st.received >= 25)
        })
    })
    .unwrap();
    let summary: Vec<_> = group
        .iter()
        .map(|p| (p.leg, p.sent, p.streams.len(), p.received()))
        .collect();
    assert!(heard, "media did not reach every receiver: {summary:?}");
    for p in &group {
        assert_eq!(
            p.rx_errors, 0,
            "{:?} got packets it could not unprotect",
            p.leg
        );
        if p.leg == Leg::Whip {
            assert_eq!(p.received(), 0, "a WHIP publisher receives nothing");
        }
    }
    // The WHEP subscriber hears 3 senders; a conference member hears 2.
    assert_eq!(group[0].streams.len(), 3);
    assert_eq!(group[2].streams.len(), 2);

    // The API sees the four, connected, with a DTLS-SRTP profile and counters.
    let body = ureq::get(&format!("{}/api/rooms/hall", s.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", s.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ps = v["participants"].as_array().unwrap();
    assert_eq!(ps.len(), 4, "{v}");
    for p in ps {
        assert_eq!(p["state"], "connected", "{p}");
        let profile = p["srtp_profile"].as_str().unwrap();
        assert!(
            secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES
                .iter()
                .any(|d| d.to_string() == profile),
            "{p}"
        );
        assert!(p["handshake_ms"].as_f64().unwrap() > 0.0, "{p}");
    }
    let whep = ps.iter().find(|p| p["kind"] == "whep").unwrap();
    assert!(whep["packets_out"].as_u64().unwrap() >= 75, "{whep}");
    let whip = ps.iter().find(|p| p["kind"] == "whip").unwrap();
    assert!(whip["packets_in"].as_u64().unwrap() >= 25, "{whip}");

    // Leaving: close_notify from each, then DELETE; nothing is left.
    let now = Instant::now();
    for p in &mut group {
        p.close(now);
        assert_eq!(sig.delete(&p.location).unwrap(), 200);
    }
    let g = s.gateway().clone();
    wait("every session to go", Duration::from_secs(5), || {
        g.stats().totals().participants == 0
    });
    assert_eq!(g.directory_sizes(), (0, 0));
    let t = g.stats().totals();
    assert_eq!(t.handshakes_ok, 4);
    assert_eq!(t.rooms, 0);
    assert!(t.media_forwarded >= 25 * 7, "{t:?}");
    // The media went through the workers' SRTP batches, not one packet at a time.
    assert!(
        t.srtp_batches > 0 && t.srtp_batched >= t.media_routed,
        "{t:?}"
    );
    s.shutdown();
}

#[test]
fn replayed_and_forged_packets_are_dropped_and_counted() {
    let s = start(30.0);
    let sig = signaling(&s);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, "attack", Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "attack", Leg::Join, LOCAL, epoch).unwrap(),
    ];
    group[0].inject_bad = true;
    let done =
        SimParticipant::drive_until(&mut group, Duration::from_secs(30), |g| g[0].bad_sent >= 4)
            .unwrap();
    assert!(done, "{group:?}");
    wait("the drops to be counted", Duration::from_secs(5), || {
        dropped(&s, "replayed") >= 2 && dropped(&s, "auth_failed") >= 2
    });
    // The receiver got only genuine packets.
    assert_eq!(group[1].rx_errors, 0);
    let st = group[1].streams.values().next().unwrap();
    assert!(st.received <= group[0].sent);
    s.shutdown();
}

/// Media a participant sends right before its close_notify is relayed, not dropped as arriving
/// after the close, whether or not the worker reads them in one batch (where the media waits
/// for the batch's SRTP call and the close would otherwise be handled first).
#[test]
fn media_sent_right_before_close_notify_is_relayed() {
    let s = start(30.0);
    let sig = signaling(&s);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, "tail", Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "tail", Leg::Join, LOCAL, epoch).unwrap(),
    ];
    assert!(until_all_hear(&mut group, 10), "{group:?}");
    for round in 0..5 {
        // A burst and the close, back to back, then only the other side is driven.
        let mut sender = group.remove(0);
        let before = group[0].received();
        sender.send_audio_burst(40);
        sender.close(Instant::now());
        let all = SimParticipant::drive_until(&mut group, Duration::from_secs(5), |g| {
            g[0].received() >= before + 40
        })
        .unwrap();
        assert!(
            all,
            "round {round}: the receiver got {} of the burst's 40",
            group[0].received() - before
        );
        assert_eq!(
            dropped(&s, "after_close"),
            0,
            "round {round}: media dropped after the close"
        );
        // The next round's sender joins.
        group.push(SimParticipant::join(&sig, "tail", Leg::Join, LOCAL, epoch).unwrap());
        assert!(until_all_hear(&mut group, 10), "{group:?}");
        group.swap(0, 1);
    }
    s.shutdown();
}

#[test]
fn a_silent_participant_loses_consent_and_is_removed() {
    let s = start(1.0);
    let sig = signaling(&s);
    // Offer answered, then nothing: no ICE check ever arrives.
    let p = SimParticipant::join(&sig, "quiet", Leg::Join, LOCAL, Instant::now()).unwrap();
    let g = s.gateway().clone();
    assert_eq!(g.stats().totals().participants, 1);
    wait("consent to expire", Duration::from_secs(10), || {
        g.stats().totals().participants == 0
    });
    let t = g.stats().totals();
    assert!(
        t.closed_by_reason.contains(&("consent_expired", 1)),
        "{t:?}"
    );
    assert_eq!(g.directory_sizes(), (0, 0));
    // Its resource still takes the client's DELETE (it ended on its own a moment ago), once.
    assert_eq!(sig.delete(&p.location).unwrap(), 200);
    assert_eq!(sig.delete(&p.location).unwrap(), 404);
    s.shutdown();
}

#[test]
fn a_wrong_fingerprint_fails_the_handshake_and_is_counted() {
    let s = start(30.0);
    let sig = signaling(&s);
    let other = Certificate::self_signed(KeyType::EcdsaP256, "not-me").unwrap();
    let mut group = vec![SimParticipant::join_announcing(
        &sig,
        "fp",
        Leg::Join,
        LOCAL,
        Instant::now(),
        Some(other.fingerprint()),
    )
    .unwrap()];
    let g = s.gateway().clone();
    // The client side may or may not hear the gateway's alert; the gateway must end it.
    let _ = SimParticipant::drive_until(&mut group, Duration::from_secs(10), |_| {
        g.stats().totals().handshakes_failed > 0
    });
    wait("the session to be removed", Duration::from_secs(5), || {
        g.stats().totals().participants == 0
    });
    let t = g.stats().totals();
    assert_eq!(t.handshakes_failed, 1, "{t:?}");
    assert_eq!(t.handshakes_ok, 0, "{t:?}");
    assert!(
        t.closed_by_reason.contains(&("fingerprint_mismatch", 1)),
        "{t:?}"
    );
    assert_ne!(group[0].phase, Phase::Connected);
    s.shutdown();
}

#[test]
fn shutdown_sends_close_notify_and_leaves_nothing() {
    let s = start(30.0);
    let sig = signaling(&s);
    let epoch = Instant::now();
    let mut group: Vec<SimParticipant> = (0..3)
        .map(|_| SimParticipant::join(&sig, "bye", Leg::Join, LOCAL, epoch).unwrap())
        .collect();
    assert!(
        SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
            g.iter().all(|p| p.phase == Phase::Connected)
        })
        .unwrap()
    );
    let g = s.gateway().clone();
    let url = s.url();
    s.shutdown();
    let t = g.stats().totals();
    assert!(t.closed_by_reason.contains(&("shutdown", 3)), "{t:?}");
    assert_eq!(t.participants, 0);
    assert_eq!(g.directory_sizes(), (0, 0));
    assert!(!g.admitting());
    // The participants heard close_notify.
    let closed = SimParticipant::drive_until(&mut group, Duration::from_secs(5), |g| {
        g.iter()
            .all(|p| matches!(p.phase, Phase::Failed(_)) || p.peer_closed())
    })
    .unwrap();
    assert!(closed, "{group:?}");
    // And the HTTP side is gone.
    assert!(ureq::get(&format!("{url}/healthz")).call().is_err());
}

#[test]
fn ice_restart_keeps_the_session_and_its_media() {
    // Consent lasts 3 s (the participants check every 2 s): after the restart only checks
    // with the new credentials arrive, so the session lives past that only if the gateway
    // routes and accepts them.
    let s = start(3.0);
    let sig = signaling(&s);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, "restart", Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "restart", Leg::Join, LOCAL, epoch).unwrap(),
    ];
    assert!(
        SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
            g.iter().all(|p| p.phase == Phase::Connected)
        })
        .unwrap()
    );
    group[0].ice_restart(&sig).unwrap();
    let before = group[1].received();
    // 7 s: more than twice the consent timeout.
    SimParticipant::drive_until(&mut group, Duration::from_secs(7), |_| false).unwrap();
    let g = s.gateway().clone();
    let t = g.stats().totals();
    assert_eq!(t.participants, 2, "both sessions alive: {t:?}");
    assert!(t.closed_by_reason.is_empty(), "{t:?}");
    // Media from the restarted participant kept flowing.
    assert!(
        group[1].received() >= before + 150,
        "{} then {}",
        before,
        group[1].received()
    );
    // The old credentials are kept in the directory until the session ends; both go then.
    let now = Instant::now();
    for p in &mut group {
        p.close(now);
        assert_eq!(sig.delete(&p.location).unwrap(), 200);
    }
    wait("every session to go", Duration::from_secs(5), || {
        g.stats().totals().participants == 0
    });
    assert_eq!(g.directory_sizes(), (0, 0));
    s.shutdown();
}

/// A refused control operation answers with what its refusal is: an unknown participant 404,
/// a layer the participant is not sent 400 (typed errors, not matched on their text).
#[test]
fn a_layer_for_nobody_is_404_and_a_layer_nobody_sends_is_400() {
    let s = start(30.0);
    let sig = signaling(&s);
    let room = "layers";
    let mut p = vec![SimParticipant::join(&sig, room, Leg::Whep, LOCAL, Instant::now()).unwrap()];
    assert!(
        SimParticipant::drive_until(&mut p, Duration::from_secs(10), |g| g
            .iter()
            .all(|p| p.phase == Phase::Connected))
        .unwrap()
    );
    let id = p[0].location.rsplit('/').next().unwrap().to_owned();
    let put = |who: &str| {
        ureq::put(&format!(
            "{}/api/rooms/{room}/participants/{who}/layer",
            s.url()
        ))
        .header(
            "Authorization",
            &format!("Bearer {}", s.admin_key().expose()),
        )
        .config()
        .http_status_as_error(false)
        .build()
        .send("{\"rid\": \"h\"}")
        .unwrap()
        .status()
        .as_u16()
    };
    assert_eq!(put("nobody"), 404);
    assert_eq!(put(&id), 400);
}

/// Two conference participants of `room` that hear each other: (them, the first one's id, an
/// HTTP client that reads every status, the admin key's `Authorization`).
fn two_hearing(s: &Server, room: &str) -> (Vec<SimParticipant>, String, ureq::Agent, String) {
    let sig = signaling(s);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, room, Leg::Join, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, room, Leg::Join, LOCAL, epoch).unwrap(),
    ];
    assert!(until_all_hear(&mut group, 20));
    let id = group[0].location.rsplit('/').next().unwrap().to_owned();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let admin = format!("Bearer {}", s.admin_key().expose());
    (group, id, agent, admin)
}

/// `PATCH /api/rooms/{room}/participants/{id}` (the admin muting someone): with
/// `block_media` its peers stop hearing it while it still hears them, and again once it is
/// unset; the room's figures show the gate; the route is the admin's, names what a bad body
/// gets wrong, and says when there is no such participant.
#[test]
fn an_admin_blocks_a_participants_media_and_its_peers_stop_hearing_it() {
    let s = start(30.0);
    let (mut group, id, agent, admin) = two_hearing(&s, "moderated");
    let patch = |who: &str, body: &str, auth: Option<&str>| {
        let mut req = agent
            .patch(&format!(
                "{}/api/rooms/moderated/participants/{who}",
                s.url()
            ))
            .header("Content-Type", "application/json");
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let mut r = req.send(body).unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap_or_default())
    };
    // Blocked: the other hears nothing more of it (what was in flight aside), it goes on
    // hearing the other.
    let (status, body) = patch(&id, r#"{"block_media": true}"#, Some(&admin));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["gate"]["block_media"], true, "{v}");
    assert_eq!(v["gate"]["block_dtmf"], false, "{v}");
    SimParticipant::drive_until(&mut group, Duration::from_millis(300), |_| false).unwrap();
    let (heard_by_other, heard_by_it) = (group[1].received(), group[0].received());
    SimParticipant::drive_until(&mut group, Duration::from_secs(1), |_| false).unwrap();
    assert!(
        group[1].received() <= heard_by_other + 2,
        "still heard: {} then {}",
        heard_by_other,
        group[1].received()
    );
    assert!(group[0].received() > heard_by_it + 10, "it still hears");
    assert!(dropped(&s, "media_blocked") > 10);
    let (status, body) = signaling(&s).get("/api/rooms/moderated").unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let gates: Vec<bool> = v["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["gate"]["block_media"] == true)
        .collect();
    assert_eq!(gates.iter().filter(|g| **g).count(), 1, "{v}");
    // Unset (the other fields as they were): heard again.
    let (status, body) = patch(&id, r#"{"block_media": false}"#, Some(&admin));
    assert_eq!(status, 200, "{body}");
    let again = group[1].received();
    assert!(
        SimParticipant::drive_until(&mut group, Duration::from_secs(10), |g| g[1].received()
            > again + 10)
        .unwrap(),
        "heard again"
    );
    // The route's refusals.
    let (status, _) = patch(&id, r#"{"block_media": true}"#, None);
    assert_eq!(status, 401, "the admin's route");
    let (status, body) = patch(&id, r#"{"mute": true}"#, Some(&admin));
    assert_eq!(status, 400);
    assert!(body.contains("mute"), "{body}");
    let (status, _) = patch("nobody", r#"{"block_media": true}"#, Some(&admin));
    assert_eq!(status, 404);
}

/// `POST /api/rooms/{room}/participants/{id}/media` (an announcement to one participant): a
/// file from `media_dir` is played to it, encoded for it on the room's clock, while the other's
/// audio to it is held back (`played_over`); `DELETE` stops it and the other is heard again;
/// the route is the admin's, names a file it will not read, and says when there is no such
/// participant.
#[test]
fn an_admin_plays_a_file_to_a_participant_in_place_of_what_it_hears() {
    let media = tempfile::tempdir().unwrap();
    let tone = secrelay_media::tone::sine(16_000, 440.0, 8000.0, 160_000);
    let wav = secrelay_media::clip::wav_pcm16(16_000, 1, &tone);
    std::fs::write(media.path().join("welcome.wav"), wav).unwrap();
    let s = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        drain_secs: 0.1,
        media_dir: Some(media.path().to_owned()),
        ..ServeConfig::default()
    })
    .unwrap();
    let (mut group, id, agent, admin) = two_hearing(&s, "announced");
    let url = |who: &str| format!("{}/api/rooms/announced/participants/{who}/media", s.url());
    let answer = |r: Result<ureq::http::Response<ureq::Body>, ureq::Error>| {
        let mut r = r.unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap_or_default())
    };
    let post = |who: &str, body: &str, auth: Option<&str>| {
        let mut req = agent
            .post(&url(who))
            .header("Content-Type", "application/json");
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        answer(req.send(body))
    };
    let (status, body) = post(&id, r#"{"file": "welcome.wav"}"#, Some(&admin));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["duration_ms"], 10_000, "{v}");
    // A second of it: a packet every 20 ms reaches it, and the other's audio does not.
    let heard = group[0].received();
    SimParticipant::drive_until(&mut group, Duration::from_secs(1), |_| false).unwrap();
    let played = group[0].received() - heard;
    assert!(
        (35..=60).contains(&played),
        "{played} packets of the file in 1 s"
    );
    let held_back = dropped(&s, "played_over");
    assert!(held_back >= 25, "the other's audio held back: {held_back}");
    // Stopped: where it was, and the other heard again (nothing more held back).
    let (status, body) = answer(
        agent
            .delete(&url(&id))
            .header("Authorization", &admin)
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let at = v["last_frame_pos"].as_u64().unwrap();
    assert!((40..=70).contains(&at), "{v}");
    let heard = group[0].received();
    SimParticipant::drive_until(&mut group, Duration::from_millis(1500), |_| false).unwrap();
    assert!(group[0].received() > heard + 45, "the other heard again");
    // (The figures are the workers' last published ones: read again a second later.)
    let held = dropped(&s, "played_over");
    SimParticipant::drive_until(&mut group, Duration::from_secs(1), |_| false).unwrap();
    assert_eq!(
        dropped(&s, "played_over"),
        held,
        "nothing held back once stopped"
    );
    // The route's refusals.
    assert_eq!(post(&id, r#"{"file": "welcome.wav"}"#, None).0, 401);
    let (status, body) = post(&id, r#"{"file": "/etc/passwd"}"#, Some(&admin));
    assert_eq!(status, 400);
    assert!(body.contains("outside media_dir"), "{body}");
    let (status, body) = post(&id, r#"{"file": 7}"#, Some(&admin));
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        post("nobody", r#"{"file": "welcome.wav"}"#, Some(&admin)).0,
        404
    );
}
