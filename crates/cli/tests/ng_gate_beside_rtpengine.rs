//! rtpengine's `block media`, `silence media` and `block DTMF` commands (and their `unblock`s)
//! through secrelay's ng socket and through rtpengine's (Debian's rtpengine-daemon;
//! `scripts/setup` installs it), in one script run against each: two plain phones (PCMU and
//! telephone-events), each phase a burst of speech and one DTMF event from each phone, and what
//! the other phone hears counted. Both relays must give the same counts in every phase (and the
//! counts a SIP proxy expects: a blocked participant's speech gone and its DTMF through, a
//! silenced call's speech there as µ-law silence in the same packets, blocked DTMF gone and
//! the speech through, a participant blocked by name still blocked after a call-wide unblock).
//!
//! Without rtpengine the test fails under CI (`CI` set) and says SKIPPED elsewhere.

mod lab_support;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_testkit::ng::{command, Ng};
use secrelay_testkit::phone::{SimPhone, SocketPhone};
use secrelay_wire::bencode::Bencode;
use secrelay_wire::RtpHeader;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Speech frames each phone sends per phase.
const FRAMES: usize = 5;
/// The first octet of each phone's speech (caller's, callee's).
const SPEECH: [u8; 2] = [0x11, 0x22];

/// What one phone heard of the other in a phase: (speech, µ-law silence, DTMF events).
type Heard = (usize, usize, usize);

fn phone(ssrc: u32) -> SocketPhone {
    let mut p = SocketPhone::bind(LOCAL, None, ssrc).unwrap();
    p.phone = std::mem::replace(&mut p.phone, SimPhone::plain(1))
        .with_formats(&[(0, "PCMU/8000"), (101, "telephone-event/8000")]);
    p
}

/// A request of `name` about call `id`, with `extra` entries.
fn req(name: &str, id: &str, extra: &[(&str, &str)]) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".to_owned(), Bencode::str(name)),
        ("call-id".to_owned(), Bencode::str(id)),
    ];
    d.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Bencode::str(v))),
    );
    d
}

/// One phase: each phone sends [`FRAMES`] of speech and a DTMF event (digit 5, its end);
/// what each heard of the other (caller's, callee's).
fn phase(phones: &mut [SocketPhone; 2]) -> [Heard; 2] {
    for p in phones.iter_mut() {
        p.phone.received.clear();
    }
    for k in 0..FRAMES {
        for (n, p) in phones.iter_mut().enumerate() {
            p.send(&[SPEECH[n]; 160]).unwrap();
            if k == 2 {
                let ts = p.phone.ts;
                let event = p.phone.packet_with(101, ts, true, &[5, 0x8a, 0x03, 0x20]);
                p.socket.send_to(&event, p.phone.gateway.unwrap()).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Until each heard all it can hear (the six packets), or a second passed.
    let end = Instant::now() + Duration::from_secs(1);
    loop {
        phones.iter_mut().for_each(SocketPhone::read);
        let done = phones.iter().all(|p| p.phone.received.len() > FRAMES);
        if done || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // And a moment for anything late.
    std::thread::sleep(Duration::from_millis(50));
    phones.iter_mut().for_each(SocketPhone::read);
    [tally(&phones[0], SPEECH[1]), tally(&phones[1], SPEECH[0])]
}

fn tally(p: &SocketPhone, speech: u8) -> Heard {
    let mut h = (0, 0, 0);
    for r in &p.phone.received {
        let Ok(rtp) = RtpHeader::parse(r) else {
            continue;
        };
        match (rtp.payload_type(), rtp.payload()) {
            (101, _) => h.2 += 1,
            (0, pl) if pl.len() == 160 && pl.iter().all(|&b| b == 0xFF) => h.1 += 1,
            (0, pl) if pl.len() == 160 && pl.iter().all(|&b| b == speech) => h.0 += 1,
            _ => {}
        }
    }
    h
}

/// The script, through the ng socket `ng`: what the phones heard in each phase, named.
fn script(ng: &mut Ng, id: &str) -> Vec<(&'static str, [Heard; 2])> {
    let mut phones = [phone(0x6a7e_0001), phone(0x6a7e_0002)];
    let offer = command("offer", id, "caller", None, Some(&phones[0].phone.offer()));
    let to_callee = ng.call(offer).unwrap()["sdp"].clone();
    let answer = phones[1].phone.answer_offer(&to_callee).unwrap();
    let to_caller = ng
        .call(command(
            "answer",
            id,
            "caller",
            Some("callee"),
            Some(&answer),
        ))
        .unwrap()["sdp"]
        .clone();
    phones[0].phone.accept_answer(&to_caller).unwrap();
    let caller = [("from-tag", "caller")];
    let mut run = |name, ng: &mut Ng, step: Option<Vec<(String, Bencode)>>| {
        if let Some(step) = step {
            ng.call(step).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
        (name, phase(&mut phones))
    };
    let phases = vec![
        run("open", ng, None),
        run(
            "caller's media blocked",
            ng,
            Some(req("block media", id, &caller)),
        ),
        run("unblocked", ng, Some(req("unblock media", id, &caller))),
        run("the call silenced", ng, Some(req("silence media", id, &[]))),
        run("unsilenced", ng, Some(req("unsilence media", id, &[]))),
        run(
            "caller's DTMF blocked",
            ng,
            Some(req("block DTMF", id, &caller)),
        ),
        run("DTMF unblocked", ng, Some(req("unblock DTMF", id, &caller))),
        run(
            "caller's media blocked by name",
            ng,
            Some(req("block media", id, &caller)),
        ),
        run(
            "the call's media blocked",
            ng,
            Some(req("block media", id, &[])),
        ),
        run(
            "the call's unblocked",
            ng,
            Some(req("unblock media", id, &[])),
        ),
    ];
    ng.call(command("delete", id, "caller", None, None))
        .unwrap();
    phases
}

#[test]
fn block_silence_and_unblock_as_rtpengine_does() {
    let test = "block_silence_and_unblock_as_rtpengine_does";
    let Some(mut rtpengine) = lab_support::start_rtpengine(test, (45000, 45499)) else {
        return;
    };
    let server = Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        workers: 1,
        rtp_ports: "45500-45999".into(),
        drain_secs: 0.1,
        ..ServeConfig::default()
    })
    .unwrap();
    let mut ours = Ng::new(server.ng_addr().unwrap()).unwrap();

    let theirs = script(&mut rtpengine.ng, "gate-rtpengine@test");
    let mine = script(&mut ours, "gate-secrelay@test");

    // (caller heard, callee heard), each (speech, silence, events).
    let everything = [(FRAMES, 0, 1); 2];
    let expected = [
        ("open", everything),
        ("caller's media blocked", [(FRAMES, 0, 1), (0, 0, 1)]),
        ("unblocked", everything),
        ("the call silenced", [(0, FRAMES, 1); 2]),
        ("unsilenced", everything),
        ("caller's DTMF blocked", [(FRAMES, 0, 1), (FRAMES, 0, 0)]),
        ("DTMF unblocked", everything),
        (
            "caller's media blocked by name",
            [(FRAMES, 0, 1), (0, 0, 1)],
        ),
        ("the call's media blocked", [(0, 0, 1); 2]),
        ("the call's unblocked", [(FRAMES, 0, 1), (0, 0, 1)]),
    ];
    for ((name, want), ((_, rtpe), (_, ours))) in expected.iter().zip(theirs.iter().zip(&mine)) {
        assert_eq!(rtpe, ours, "{name}: rtpengine heard, secrelay heard");
        assert_eq!(ours, want, "{name}");
    }
    assert_eq!(mine.len(), expected.len());
}
