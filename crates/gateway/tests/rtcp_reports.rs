//! The gateway's own RTCP: what a member sent it over a lossy, jittery link shows in the API
//! as the link made it (the loss the link caused, interarrival jitter within 10 % of RFC 3550's
//! estimate from the true arrival times); the gateway's receiver reports reach the member
//! protected with the member's keys (SRTCP) and say the same; a member that is sent media gets
//! sender reports whose counts are what it was sent, and the round-trip time comes from its
//! reports' LSR and DLSR; in a room of forty, each member's reports keep their own schedule.
//! Driven through a shard on simulated time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use secrelay_gateway::shard::JoinKind;
use secrelay_srtp::Profile;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::link::{Air, Link};
use secrelay_testkit::phone::SimPhone;
use secrelay_wire::rtcp::{reports, write_report, ReportBlock};
use secrelay_wire::RtpHeader;

const FRAME: Duration = Duration::from_millis(20);

/// RFC 3550 A.8 in floating point from the true arrival times: (arrival, RTP timestamp) in
/// order of arrival, 8 kHz; in milliseconds.
fn reference_jitter_ms(arrivals: &[(Instant, u32)]) -> f64 {
    let t0 = arrivals[0].0;
    let mut j = 0.0;
    let mut last: Option<f64> = None;
    for &(at, ts) in arrivals {
        let transit = at.duration_since(t0).as_secs_f64() * 8000.0 - f64::from(ts);
        if let Some(l) = last {
            j += ((transit - l).abs() - j) / 16.0;
        }
        last = Some(transit);
    }
    j / 8.0
}

type Arrivals = Vec<(Instant, u32)>;

/// Hands phone `p`'s datagrams that arrived by `until` to the harness at their arrival times,
/// noting (arrival, RTP timestamp) of each.
fn deliver(
    h: &mut Harness,
    p: usize,
    air: &mut Air<Instant, ()>,
    until: Instant,
    ts_of: &HashMap<Vec<u8>, u32>,
    arrivals: &mut Arrivals,
) {
    while let Some((at, (), d)) = air.pop_due(until) {
        h.advance_to(at);
        h.send_phone(p, &d);
        h.pump();
        arrivals.push((at, ts_of[&d]));
    }
}

/// Phone `p` sends `n` packets of 20 ms over `link`; the harness's time follows. The
/// datagrams in flight and (arrival, RTP timestamp) of each that arrived, in order.
fn talk_over(h: &mut Harness, p: usize, link: &mut Link, n: u32) -> (Air<Instant, ()>, Arrivals) {
    let mut air: Air<Instant, ()> = Air::new();
    let mut ts_of = HashMap::new();
    let mut arrivals = Vec::new();
    let start = h.now;
    for i in 0..n {
        let t = start + FRAME * i;
        deliver(h, p, &mut air, t, &ts_of, &mut arrivals);
        h.advance_to(t);
        let (plain, pkt) = h.phones[p].phone.packet(&[0x55; 160]);
        ts_of.insert(pkt.clone(), RtpHeader::parse(&plain).unwrap().timestamp());
        air.send(link, t, (), pkt);
    }
    deliver(
        h,
        p,
        &mut air,
        start + FRAME * (n + 10),
        &ts_of,
        &mut arrivals,
    );
    (air, arrivals)
}

#[test]
fn loss_and_jitter_in_the_api_are_what_a_lossy_link_did_and_reach_the_phone_in_srtcp() {
    let mut h = Harness::simd();
    let p = h
        .join_phone("r", SimPhone::sdes(1, Profile::AesCm128HmacSha1_80))
        .unwrap();
    // 10 % loss, 40 ms one way plus up to 30 ms of jitter (packets overtake one another).
    let mut link = Link {
        jitter: Duration::from_millis(30),
        ..Link::lossy(Duration::from_millis(40), 0.10, 0x5eed)
    };
    let n = 600;
    let (air, arrivals) = talk_over(&mut h, p, &mut link, n);
    assert_eq!(air.delivered + air.lost, n as usize);
    assert!(air.lost > 30, "the link lost {}", air.lost);

    let snap = h.shard.snapshot(h.now, Some("r"));
    let figures = &snap[0].participants[0].rtcp;
    let got = figures.received[0];
    assert_eq!(got.ssrc, h.phones[p].phone.ssrc);
    assert_eq!(got.received, air.delivered as u64);
    // Lost is counted from the sequence numbers seen: a loss at either end of the run is not
    // seen, so within 10 % of what the link dropped.
    let lost = air.lost as f64;
    assert!(
        (got.lost as f64 - lost).abs() <= 0.1 * lost,
        "API lost {} vs the link's {lost}",
        got.lost
    );
    let want = reference_jitter_ms(&arrivals);
    eprintln!(
        "link lost {} of {n}; API lost {}, jitter {:.2} ms (reference {want:.2} ms)",
        air.lost, got.lost, got.jitter_ms
    );
    assert!(
        (got.jitter_ms - want).abs() <= 0.1 * want,
        "API jitter {} ms vs {want} ms from the true arrivals",
        got.jitter_ms
    );
    // Uniform extra delay up to 30 ms: E|D| = 10 ms, so RFC 3550's estimate is near it.
    assert!((5.0..15.0).contains(&got.jitter_ms), "{}", got.jitter_ms);

    // The gateway's reports reached the phone as SRTCP its key opens (SimPhone::receive
    // panics otherwise): RRs (nothing was sent to it) with its stream's figures.
    assert!(figures.reports_sent >= 1, "a report every ~5 s over 12 s");
    assert_eq!(
        figures.reports_sent,
        h.phones[p].phone.received_rtcp.len() as u64
    );
    let (last, _) = next_report(&mut h, p);
    let phone = &h.phones[p].phone;
    let last = reports(&last).unwrap();
    assert_eq!(last[0].sender, None);
    let block = last[0].blocks[0];
    assert_eq!(block.ssrc, phone.ssrc);
    assert!((i64::from(block.cumulative_lost) - got.lost).abs() <= 3);
    // Each report's fraction is that of its own interval: those made while the phone talked
    // (~125 packets each at 10 % loss) saw some loss, and none near a quarter.
    let fractions: Vec<u8> = phone
        .received_rtcp
        .iter()
        .map(|c| reports(c).unwrap()[0].blocks[0].fraction_lost)
        .collect();
    assert!(fractions.iter().any(|f| *f > 0), "{fractions:?}");
    assert!(fractions.iter().all(|f| *f < 64), "{fractions:?}");
    assert_eq!(h.phone_counters(p).unwrap().drops.total(), 0);
}

#[test]
fn a_phone_sent_media_gets_sender_reports_and_its_receiver_reports_give_the_rtt() {
    let mut h = Harness::simd();
    let talker = h.join_phone("r", SimPhone::plain(1)).unwrap();
    let listener = h
        .join_phone("r", SimPhone::sdes(2, Profile::AeadAes128Gcm))
        .unwrap();
    // 8 s of the talker's audio, forwarded to the listener.
    let mut link = Link::perfect();
    let (air, _) = talk_over(&mut h, talker, &mut link, 400);
    assert_eq!(air.lost, 0);
    let phone = &h.phones[listener].phone;
    assert_eq!(phone.received.len(), 400);
    let srs: Vec<_> = phone
        .received_rtcp
        .iter()
        .flat_map(|c| reports(c).unwrap())
        .filter(|r| r.sender.is_some())
        .collect();
    assert!(!srs.is_empty(), "sender reports to the listener");
    let (sr, sent_at) = next_report(&mut h, listener);
    let sr = &reports(&sr).unwrap()[0];
    let info = sr.sender.expect("an SR: the listener is sent media");
    let phone = &h.phones[listener].phone;
    // The SR speaks for the stream the listener receives, under the SSRC it sees.
    let heard = RtpHeader::parse(&phone.received[0]).unwrap().ssrc();
    assert_eq!(sr.ssrc, heard);
    assert!(info.packets > 0 && info.packets <= 400);
    assert_eq!(info.octets, info.packets * 160, "payload octets only");
    // The plain talker gets plain RRs (it sent; it was sent nothing).
    let talker_rr = reports(h.phones[talker].phone.received_rtcp.last().unwrap()).unwrap();
    assert_eq!(talker_rr[0].sender, None);
    assert_eq!(talker_rr[0].blocks[0].ssrc, h.phones[talker].phone.ssrc);
    assert_eq!(talker_rr[0].blocks[0].cumulative_lost, 0);

    // The listener answers the last SR with an RR after holding it 50 ms, and the RR takes
    // 40 ms more to arrive than the SR took: the RTT is 40 ms. SRTCP from its RTCP port.
    let lsr = (info.ntp >> 16) as u32;
    let mut rr = Vec::new();
    write_report(
        &mut rr,
        phone.ssrc,
        None,
        &[ReportBlock {
            ssrc: heard,
            fraction_lost: 64,
            cumulative_lost: 7,
            highest_seq: 400,
            jitter: 80,
            lsr,
            dlsr: (0.050 * 65536.0) as u32,
        }],
        "listener",
    );
    h.advance_to(sent_at + Duration::from_millis(90));
    let mut buf = rr.clone();
    buf.resize(rr.len() + 32, 0);
    let len = h.phones[listener]
        .phone
        .tx
        .as_mut()
        .unwrap()
        .protect_rtcp(&mut buf, rr.len())
        .unwrap();
    buf.truncate(len);
    let from = h.phones[listener].phone.addr;
    let from = std::net::SocketAddr::new(from.ip(), from.port() + 1);
    let port = h.phones[listener].ports.rtcp.port();
    h.send_phone_from(listener, from, port, &buf);
    h.pump();
    let snap = h.shard.snapshot(h.now, Some("r"));
    let f = &snap[0].participants[1].rtcp;
    let rtt = f.rtt_ms.expect("an RTT from the RR");
    assert!((rtt - 40.0).abs() < 1.0, "rtt {rtt} ms");
    assert_eq!(f.reported[0].ssrc, heard);
    assert_eq!(f.reported[0].fraction_lost_pct, 25);
    assert_eq!(f.reported[0].cumulative_lost, 7);
    assert!((f.reported[0].jitter_ms - 10.0).abs() < 0.01);
    assert_eq!(f.reports_received, 1);
    // A tampered report (the next one, its ciphertext changed) is dropped at authentication
    // and changes nothing.
    let mut bad = rr.clone();
    bad.resize(rr.len() + 32, 0);
    let len = h.phones[listener]
        .phone
        .tx
        .as_mut()
        .unwrap()
        .protect_rtcp(&mut bad, rr.len())
        .unwrap();
    bad.truncate(len);
    bad[12] ^= 1;
    h.send_phone_from(listener, from, port, &bad);
    h.pump();
    let c = h.phone_counters(listener).unwrap();
    assert_eq!(
        c.drops[secrelay_gateway::counters::DropReason::AuthFailed],
        1
    );
    let snap = h.shard.snapshot(h.now, Some("r"));
    assert_eq!(snap[0].participants[1].rtcp.reports_received, 1);
}

/// Runs the harness's clock to the next report the gateway sends phone `i`: that report and
/// when it left (the harness delivers at once).
fn next_report(h: &mut Harness, i: usize) -> (Vec<u8>, Instant) {
    let before = h.phones[i].phone.received_rtcp.len();
    for _ in 0..1000 {
        let t = h.shard.poll_timeout().expect("reports are scheduled");
        h.advance_to(t);
        if let Some(r) = h.phones[i].phone.received_rtcp.get(before) {
            return (r.clone(), h.now);
        }
    }
    panic!("no report to phone {i}");
}

/// Runs the room for `dur` of simulated time: a consent check from each of `members` every
/// 5 s (as browsers do), the shard's timers fired as they fall due, and never a deadline left
/// at or before now after they ran. How many times the timers woke it.
fn run_room(h: &mut Harness, members: &[usize], dur: Duration) -> u32 {
    // What fell due while members connected (the harness connects on simulated time).
    h.advance_to(h.now);
    let end = h.now + dur;
    let mut next_consent = h.now;
    let mut wakes = 0;
    while h.now < end {
        if h.now >= next_consent {
            for &i in members {
                let answer = h.members[i].answer.clone();
                let req = h.members[i].client.binding_request(&answer, false);
                h.send(i, &req);
            }
            h.pump();
            next_consent = h.now + Duration::from_secs(5);
        }
        let due = h.shard.poll_timeout().unwrap_or(end);
        let t = due.min(next_consent).min(end);
        wakes += u32::from(t == due);
        h.advance_to(t);
        assert!(
            h.shard.poll_timeout().is_none_or(|d| d > h.now),
            "a deadline at or before now after the timeouts ran"
        );
    }
    wakes
}

/// In a room of forty, each member's reports come on its own schedule (one every 2.5 to
/// 7.5 s, randomized), and the shard is woken about as often as something falls due: the
/// room's timer loses no member and spins on none. Halfway, ten leave and ten others join
/// in their places: what the leavers left on the timer neither fires for the newcomers nor
/// keeps them from theirs.
#[test]
fn each_member_of_a_room_of_forty_gets_its_reports_on_its_own_schedule() {
    let mut h = Harness::simd();
    for n in 0..40u8 {
        h.join_connected("many", n + 1, JoinKind::Join);
    }
    let half = Duration::from_secs(30);
    let mut wakes = run_room(&mut h, &(0..40).collect::<Vec<_>>(), half);
    for i in 0..10 {
        let id = h.members[i].id.clone();
        assert!(h.shard.leave(h.now, "many", &id));
    }
    h.pump();
    for n in 40..50u8 {
        h.join_connected("many", n + 1, JoinKind::Join);
    }
    let present: Vec<usize> = (10..50).collect();
    wakes += run_room(&mut h, &present, half);

    let snap = h.shard.snapshot(h.now, Some("many"));
    let sent: HashMap<&str, u64> = snap[0]
        .participants
        .iter()
        .map(|p| (p.id.as_str(), p.rtcp.reports_sent))
        .collect();
    assert_eq!(sent.len(), 40);
    for &i in &present {
        let n = sent[h.members[i].id.as_str()];
        // 60 s (or the last 30 s for a newcomer) at 2.5 to 7.5 s apart, the first about one
        // interval after joining.
        let expected = if i < 40 { 7..=25 } else { 3..=13 };
        assert!(expected.contains(&n), "member {i} was sent {n} reports");
    }
    let total: u64 = sent.values().sum();
    // Besides these reports: the leavers' (up to 12 each), the legs' own timers, and a
    // deadline that moved later found stale.
    assert!(
        u64::from(wakes) <= 2 * total + 120,
        "{wakes} wakes for {total} reports: the timer fires for what is due"
    );
}
