//! A broadcast room's viewers spread over the workers (`spread_viewers`): a WHIP publisher of
//! simulcast video on the room's worker, WHEP viewers joining on whichever worker has the
//! fewest participants. The room's worker pipes each packet once to the other worker, which
//! relays it to its own viewers with their own keys; the keyframe a remote viewer needs is
//! asked of the publisher through the pipe; the API shows one room; and when the viewers
//! leave, the replica and its mirror go, leaving nothing behind.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::{wait_for, Leg, Media, Phase, Signaling, SimParticipant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const VIDEO: Media = Media::SimulcastVideo {
    transport_cc: false,
};

fn start(spread: bool) -> Server {
    start_with(ServeConfig {
        spread_viewers: spread,
        ..ServeConfig::default()
    })
}

fn start_with(config: ServeConfig) -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        drain_secs: 0.1,
        ..config
    })
    .unwrap()
}

fn signaling(s: &Server) -> Signaling {
    Signaling::new(s.url()).with_admin(s.admin_key().expose())
}

fn get(s: &Server, path: &str) -> String {
    let (status, body) = signaling(s).get(path).unwrap();
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn metric(s: &Server, series: &str) -> u64 {
    signaling(s).metric(series).unwrap()
}

/// Drives the group until every viewer has received `video` video packets and `audio` audio
/// packets; whether they did in 20 s.
fn until_viewers_play(group: &mut [SimParticipant], video: u64, audio: u64) -> bool {
    SimParticipant::drive_until(group, Duration::from_secs(20), |g| {
        g.iter().filter(|p| p.leg == Leg::Whep).all(|p| {
            p.phase == Phase::Connected
                && p.video_rx.by_layer.iter().sum::<u64>() >= video
                && p.video_rx.audio_stamps.len() as u64 >= audio
        })
    })
    .unwrap()
}

#[test]
fn a_broadcast_spreads_its_viewers_over_both_workers_and_every_viewer_plays() {
    let s = start(true);
    let sig = signaling(&s);
    let g = s.gateway().clone();
    let epoch = Instant::now();
    let home = g.worker_index("stage");
    let other = 1 - home;
    let mut group =
        vec![SimParticipant::join_media(&sig, "stage", Leg::Whip, LOCAL, epoch, VIDEO).unwrap()];
    // The first viewer goes to the idle worker: the room's worker has the publisher.
    group.push(SimParticipant::join_media(&sig, "stage", Leg::Whep, LOCAL, epoch, VIDEO).unwrap());
    assert_eq!(g.participants_by_worker()[other], 1);
    let played = until_viewers_play(&mut group, 100, 50);
    assert!(
        played,
        "the remote viewer did not play: {:?}",
        group[1].video_rx
    );
    // Its first keyframe was asked of the publisher through the pipe: no viewer is on the
    // publisher's own worker to ask.
    let asked = group[0].video.as_ref().unwrap().keyframe_requests;
    assert!(asked >= 1, "no keyframe request reached the publisher");
    assert_eq!(group[1].rx_errors, 0);

    // Five more: the workers take turns (ties go to the room's own).
    for _ in 0..5 {
        group.push(
            SimParticipant::join_media(&sig, "stage", Leg::Whep, LOCAL, epoch, VIDEO).unwrap(),
        );
    }
    let by_worker = g.participants_by_worker();
    assert_eq!(by_worker[home] + by_worker[other], 7, "{by_worker:?}");
    assert!(by_worker[other] >= 3, "{by_worker:?}");
    let played = until_viewers_play(&mut group, 200, 100);
    let summary: Vec<_> = group
        .iter()
        .map(|p| {
            (
                p.leg,
                p.phase.clone(),
                p.video_rx.by_layer,
                p.video_rx.audio_stamps.len(),
            )
        })
        .collect();
    assert!(played, "not every viewer played: {summary:?}");
    for p in &group {
        assert_eq!(
            p.rx_errors, 0,
            "{:?} could not unprotect what it got",
            p.leg
        );
    }

    // One room in the API, with the seven participants (no mirror among them), and the
    // forwarded copies of both workers.
    let v: serde_json::Value = serde_json::from_str(&get(&s, "/api/rooms/stage")).unwrap();
    let ps = v["participants"].as_array().unwrap();
    assert_eq!(ps.len(), 7, "{v}");
    assert_eq!(ps.iter().filter(|p| p["kind"] == "whep").count(), 6, "{v}");
    let publisher = &ps.iter().find(|p| p["kind"] == "whip").unwrap()["id"];
    for p in ps.iter().filter(|p| p["kind"] == "whep") {
        assert!(p["packets_out"].as_u64().unwrap() >= 300, "{p}");
        let from = p["receiving"].as_array().unwrap();
        assert!(
            !from.is_empty() && from.iter().all(|r| &r["publisher_id"] == publisher),
            "a viewer shows the publisher as the source of what it plays: {p}"
        );
    }
    let listed: serde_json::Value = serde_json::from_str(&get(&s, "/api/rooms")).unwrap();
    assert_eq!(
        listed["rooms"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let totals = g.stats().totals();
    assert_eq!((totals.participants, totals.rooms), (7, 1), "{totals:?}");
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 1);
    // The workers' own figures, as published.
    wait_for("the workers' participants", Duration::from_secs(2), || {
        (0..2)
            .map(|w| {
                metric(
                    &s,
                    &format!("secrelay_worker_participants{{worker=\"{w}\"}}"),
                ) as usize
            })
            .collect::<Vec<_>>()
            == by_worker
    });
    let piped = metric(&s, "secrelay_pipe_packets_total");
    assert!(piped >= 300, "piped {piped}");
    // A packet is piped once per worker, not once per remote viewer: the remote viewers got
    // more copies together than went through the pipe.
    let remote_copies: u64 = 3 * 300;
    assert!(totals.media_forwarded >= remote_copies, "{totals:?}");

    // The viewers leave: the replica and its mirror go; then the publisher.
    let now = Instant::now();
    for p in &mut group[1..] {
        p.close(now);
        assert_eq!(sig.delete(&p.location).unwrap(), 200);
    }
    wait_for("the viewers to go", Duration::from_secs(5), || {
        g.stats().totals().participants == 1
    });
    wait_for("the mirror to go", Duration::from_secs(5), || {
        metric(&s, "secrelay_pipe_mirrors") == 0
    });
    group[0].close(now);
    assert_eq!(sig.delete(&group[0].location).unwrap(), 200);
    wait_for("the room to go", Duration::from_secs(5), || {
        let t = g.stats().totals();
        t.participants == 0 && t.rooms == 0
    });
    assert_eq!(g.directory_sizes(), (0, 0));
    assert_eq!(g.participants_by_worker(), vec![0, 0]);
    s.shutdown();
}

#[test]
fn a_publisher_that_comes_after_the_viewers_reaches_those_on_the_other_worker() {
    let s = start(true);
    let sig = signaling(&s);
    let g = s.gateway().clone();
    let epoch = Instant::now();
    // A first viewer makes the room on its worker; the next goes to the other.
    let mut group = vec![
        SimParticipant::join_media(&sig, "late", Leg::Whep, LOCAL, epoch, VIDEO).unwrap(),
        SimParticipant::join_media(&sig, "late", Leg::Whep, LOCAL, epoch, VIDEO).unwrap(),
    ];
    assert_eq!(g.participants_by_worker(), vec![1, 1]);
    group.push(SimParticipant::join_media(&sig, "late", Leg::Whip, LOCAL, epoch, VIDEO).unwrap());
    assert!(
        until_viewers_play(&mut group, 100, 50),
        "{:?}",
        group
            .iter()
            .map(|p| p.video_rx.by_layer)
            .collect::<Vec<_>>()
    );
    // The publisher leaves and comes back: the remote viewer plays the new one too.
    let now = Instant::now();
    let first = group.pop().unwrap();
    assert_eq!(sig.delete(&first.location).unwrap(), 200);
    wait_for("the mirror to go", Duration::from_secs(5), || {
        metric(&s, "secrelay_pipe_mirrors") == 0
    });
    drop(first);
    let before: Vec<u64> = group
        .iter()
        .map(|p| p.video_rx.by_layer.iter().sum())
        .collect();
    group.push(SimParticipant::join_media(&sig, "late", Leg::Whip, LOCAL, epoch, VIDEO).unwrap());
    let again = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g.iter()
            .zip(&before)
            .all(|(p, b)| p.video_rx.by_layer.iter().sum::<u64>() >= b + 100)
    })
    .unwrap();
    assert!(again, "a viewer did not play the second publisher");
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 1);
    for p in &mut group {
        p.close(now);
        let _ = sig.delete(&p.location);
    }
    wait_for("everybody to go", Duration::from_secs(5), || {
        g.stats().totals().participants == 0 && g.stats().totals().rooms == 0
    });
    s.shutdown();
}

#[test]
fn with_spreading_off_every_viewer_joins_on_the_rooms_worker() {
    let s = start(false);
    let sig = signaling(&s);
    let g = s.gateway().clone();
    let epoch = Instant::now();
    let home = g.worker_index("flat");
    let mut group = vec![SimParticipant::join(&sig, "flat", Leg::Whip, LOCAL, epoch).unwrap()];
    for _ in 0..3 {
        group.push(SimParticipant::join(&sig, "flat", Leg::Whep, LOCAL, epoch).unwrap());
    }
    assert_eq!(g.participants_by_worker()[home], 4);
    let heard = SimParticipant::drive_until(&mut group, Duration::from_secs(20), |g| {
        g[1..].iter().all(|p| p.received() >= 25)
    })
    .unwrap();
    assert!(heard);
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 0);
    assert_eq!(metric(&s, "secrelay_pipe_packets_total"), 0);
    s.shutdown();
}

#[test]
fn viewers_joining_and_leaving_at_once_on_both_workers_leave_nothing_behind() {
    // The burst comes from one address and never connects, and a debug build's workers are
    // busy making its answers: neither limit is what this test is about.
    let s = start_with(ServeConfig {
        max_pending_offers_per_source: 1000,
        shed_handshakes_at: 2.0,
        shed_joins_at: 2.0,
        ..ServeConfig::default()
    });
    let sig = signaling(&s);
    let g = s.gateway().clone();
    let epoch = Instant::now();
    let publisher = SimParticipant::join(&sig, "burst", Leg::Whip, LOCAL, epoch).unwrap();
    // 24 viewers offered from 8 threads at once, then deleted from 8 threads at once, twice:
    // the pipe to the other worker is attached and detached under a race of joins and leaves.
    for round in 0..2 {
        let locations: Vec<String> = std::thread::scope(|scope| {
            let joins: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        (0..3)
                            .map(|_| {
                                SimParticipant::join(&sig, "burst", Leg::Whep, LOCAL, epoch)
                                    .unwrap()
                                    .location
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            joins.into_iter().flat_map(|j| j.join().unwrap()).collect()
        });
        assert_eq!(locations.len(), 24);
        let by_worker = g.participants_by_worker();
        assert_eq!(
            by_worker.iter().sum::<usize>(),
            25,
            "round {round}: {by_worker:?}"
        );
        assert!(
            by_worker.iter().all(|&n| n >= 8),
            "round {round}: {by_worker:?}"
        );
        assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 1);
        std::thread::scope(|scope| {
            for chunk in locations.chunks(3) {
                let sig = &sig;
                scope.spawn(move || {
                    for l in chunk {
                        assert_eq!(sig.delete(l).unwrap(), 200);
                    }
                });
            }
        });
        wait_for("the viewers to go", Duration::from_secs(5), || {
            g.stats().totals().participants == 1 && metric(&s, "secrelay_pipe_mirrors") == 0
        });
    }
    assert_eq!(sig.delete(&publisher.location).unwrap(), 200);
    wait_for("the room to go", Duration::from_secs(5), || {
        let t = g.stats().totals();
        t.participants == 0 && t.rooms == 0
    });
    assert_eq!(g.participants_by_worker(), vec![0, 0]);
    assert_eq!(g.directory_sizes(), (0, 0));
    s.shutdown();
}

#[test]
fn a_phone_that_starts_sending_in_a_re_invite_reaches_the_viewers_on_the_other_worker() {
    use secrelay_testkit::phone::SocketPhone;
    let s = start(true);
    let sig = signaling(&s);
    let g = s.gateway().clone();
    let epoch = Instant::now();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    // A phone on hold (it only receives) makes the room; its viewers join on both workers, the
    // room's and, through a pipe with no publisher to mirror yet, the other.
    let mut phone = SocketPhone::bind(LOCAL, None, 0x0ff1).unwrap();
    phone.phone.direction = "recvonly";
    let mut r = agent
        .post(&format!("{}/rooms/reinvite/rtp", s.url()))
        .header("Content-Type", "application/sdp")
        .send(&phone.phone.offer())
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    phone
        .phone
        .accept_answer(&r.body_mut().read_to_string().unwrap())
        .unwrap();
    let mut group: Vec<SimParticipant> = (0..2)
        .map(|_| SimParticipant::join(&sig, "reinvite", Leg::Whep, LOCAL, epoch).unwrap())
        .collect();
    let home = g.worker_index("reinvite");
    assert!(
        g.participants_by_worker()[1 - home] >= 1,
        "a viewer on the other worker: {:?}",
        g.participants_by_worker()
    );
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 0);
    // Off hold: a re-INVITE that sends. The replica mirrors the phone from then on.
    phone.phone.direction = "sendrecv";
    let mut r = agent
        .put(&format!("{}{location}", s.url()))
        .header("Content-Type", "application/sdp")
        .send(&phone.phone.offer())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    phone
        .phone
        .accept_answer(&r.body_mut().read_to_string().unwrap())
        .unwrap();
    let phone = std::sync::Arc::new(std::sync::Mutex::new(phone));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let talker = {
        let (phone, stop) = (phone.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = phone.lock().unwrap().send(&[0x7e; 160]);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let hear_more = |group: &mut Vec<SimParticipant>, what: &str| {
        let before: Vec<u64> = group.iter().map(SimParticipant::received).collect();
        let heard = SimParticipant::drive_until(group, Duration::from_secs(20), |g| {
            g.iter().zip(&before).all(|(p, b)| p.received() >= b + 25)
        })
        .unwrap();
        let now: Vec<u64> = group.iter().map(SimParticipant::received).collect();
        assert!(
            heard,
            "{what}: every viewer hears the phone: {before:?} -> {now:?}"
        );
    };
    hear_more(&mut group, "off hold");
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 1);
    // Another re-INVITE that still sends (the mirror is updated, not made twice), then one
    // that holds the call again (the mirror goes).
    let reinvite = |direction: &'static str| {
        let mut p = phone.lock().unwrap();
        p.phone.direction = direction;
        let mut r = agent
            .put(&format!("{}{location}", s.url()))
            .header("Content-Type", "application/sdp")
            .send(&p.phone.offer())
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        p.phone
            .accept_answer(&r.body_mut().read_to_string().unwrap())
            .unwrap();
    };
    reinvite("sendrecv");
    hear_more(&mut group, "a second re-INVITE");
    assert_eq!(metric(&s, "secrelay_pipe_mirrors"), 1);
    reinvite("recvonly");
    wait_for("the mirror to go", Duration::from_secs(5), || {
        metric(&s, "secrelay_pipe_mirrors") == 0
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    talker.join().unwrap();
    s.shutdown();
}

/// A room whose viewers spread over both workers and that starts mixing after: the mix is
/// made at the room's worker, and the viewer on the other keeps hearing the talker (as it
/// talks, unmixed) through the pipe, as before the mix.
#[test]
fn a_room_that_mixes_after_it_spread_still_reaches_the_viewer_on_the_other_worker() {
    let s = start(true);
    let sig = signaling(&s);
    let epoch = Instant::now();
    let mut group = vec![
        SimParticipant::join(&sig, "mixlate", Leg::Whip, LOCAL, epoch).unwrap(),
        SimParticipant::join(&sig, "mixlate", Leg::Whep, LOCAL, epoch).unwrap(),
    ];
    // One viewer on each worker.
    assert_eq!(s.gateway().participants_by_worker(), vec![1, 1]);
    let heard = |g: &mut [SimParticipant], more: u64| {
        let start: Vec<u64> = g.iter().map(SimParticipant::received).collect();
        SimParticipant::drive_until(g, Duration::from_secs(20), |g| {
            g[1].received() >= start[1] + more
        })
        .unwrap()
    };
    assert!(
        heard(&mut group, 50),
        "the viewer on the other worker hears nothing"
    );
    sig.set_mixing("mixlate", Some(0)).unwrap();
    // Past the change: it still hears the talker.
    assert!(heard(&mut group, 25));
    assert!(
        heard(&mut group, 50),
        "the room mixes, and the viewer on the other worker hears nothing"
    );
    s.shutdown();
}
