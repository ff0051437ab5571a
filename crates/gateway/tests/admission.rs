//! Admission control (`secrelay_gateway::admission`): what an overloaded gateway sheds, in
//! order, and that it takes work again once the load falls. The shard's part in memory here;
//! the server's (503 with `Retry-After`, the ng error, the metrics) over real sockets.

use std::time::Duration;

use secrelay_gateway::admission::Shed;
use secrelay_gateway::counters::DropReason;
use secrelay_gateway::server::{ServeConfig, Server};
use secrelay_gateway::shard::JoinKind;
use secrelay_testkit::gateway::Harness;
use secrelay_testkit::memory::SimClient;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SimPhone;
use secrelay_wire::bencode::Bencode;

/// While handshakes are shed, a new participant's ClientHellos are dropped (`overload`) and
/// it does not connect, while two established members go on talking; once the shedding ends,
/// its retransmitted handshake completes.
#[test]
fn shed_handshakes_wait_while_established_media_flows_and_complete_after() {
    let mut h = Harness::simd();
    let a = h.join_connected("r", 1, JoinKind::Join);
    let b = h.join_connected("r", 2, JoinKind::Join);
    h.shard.set_shed(Shed::Handshakes);
    let c = h
        .join("r", SimClient::new(3), JoinKind::Join, None)
        .unwrap();
    // ICE passes (a STUN check costs little); its DTLS flights are dropped, retransmissions
    // included, for 5 s of simulated time.
    let answer = h.members[c].answer.clone();
    let req = h.client(c).binding_request(&answer, true);
    h.send(c, &req);
    let now = h.now;
    h.client(c).start_dtls(&answer, now);
    for d in h.client(c).drain_dtls() {
        h.send(c, &d);
    }
    // (The harness fires the client's retransmission timer as time advances.)
    let end = h.now + Duration::from_secs(5);
    let mut sent_a = 0;
    while h.now < end {
        let (_, srtp) = h.srtp(a, &[0x55; 160]);
        h.send(a, &srtp);
        sent_a += 1;
        h.pump();
        let t = h.now + Duration::from_millis(20);
        h.advance_to(t);
    }
    let cc = h.member_counters(c).unwrap();
    assert!(cc.drops[DropReason::Overload] >= 2, "{cc:?}");
    assert_eq!(cc.dtls_in, 0, "no flight reached the endpoint");
    assert!(h.client(c).keys.is_none());
    // Established media was never shed.
    assert_eq!(h.client(b).received.len(), sent_a);
    // The load fell: the handshake goes through.
    h.shard.set_shed(Shed::Nothing);
    assert!(
        h.connect(c),
        "the deferred participant connects once shedding ends"
    );
    assert!(h.member_counters(c).unwrap().dtls_in > 0);
}

/// A telephony leg has no handshake to defer: its media is taken while handshakes are shed.
#[test]
fn telephony_legs_are_not_held_back_by_handshake_shedding() {
    let mut h = Harness::simd();
    h.shard.set_shed(Shed::Handshakes);
    let p = h.join_phone("t", SimPhone::plain(1)).unwrap();
    let q = h.join_phone("t", SimPhone::plain(2)).unwrap();
    let (_, w) = h.phones[p].phone.packet(&[0xff; 160]);
    h.send_phone(p, &w);
    h.pump();
    assert_eq!(h.phone_counters(q).unwrap().packets_out, 1);
    assert_eq!(h.phone_counters(p).unwrap().drops[DropReason::Overload], 0);
}

fn server(shed_handshakes_at: f64, shed_joins_at: f64) -> Server {
    Server::start(ServeConfig {
        http: Some("127.0.0.1:0".parse().unwrap()),
        udp: "127.0.0.1:0".parse().unwrap(),
        ng: Some("127.0.0.1:0".parse().unwrap()),
        rtp_ports: "47000-47199".into(),
        workers: 2,
        drain_secs: 0.0,
        shed_handshakes_at,
        shed_joins_at,
        ..ServeConfig::default()
    })
    .unwrap()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// (status, Retry-After, body) of a plain RTP leg's join.
fn join_phone(url: &str) -> (u16, Option<String>, String) {
    let offer = SimPhone::plain(7).offer();
    let mut r = agent()
        .post(&format!("{url}/rooms/busy/rtp"))
        .header("Content-Type", "application/sdp")
        .send(offer.as_str())
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (
        r.status().as_u16(),
        retry,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

fn metrics(s: &Server) -> String {
    agent()
        .get(&format!("{}/metrics", s.url()))
        .header(
            "Authorization",
            &format!("Bearer {}", s.admin_key().expose()),
        )
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// Thresholds of 0 make every worker shed joins from its first load interval (an operator
/// closing the doors does the same): a join gets 503 with `Retry-After` and the reason, an ng
/// offer for a new call an error saying so, and the metrics show each worker's load and what
/// it sheds. Thresholds above 1 (never): the same join is taken.
#[test]
fn an_overloaded_gateway_refuses_new_legs_with_retry_after_and_an_ng_error() {
    let s = server(0.0, 0.0);
    let url = s.url();
    // The workers publish their load every 200 ms.
    std::thread::sleep(Duration::from_millis(600));
    let (status, retry, body) = join_phone(&url);
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry.as_deref(), Some("2"));
    assert!(
        body.contains("overloaded") && body.contains("retry later"),
        "{body}"
    );
    let mut ng = Ng::new(s.ng_addr().unwrap()).unwrap();
    let offer = vec![
        ("command".to_owned(), Bencode::str("offer")),
        ("call-id".to_owned(), Bencode::str("storm-1")),
        ("from-tag".to_owned(), Bencode::str("a")),
        ("sdp".to_owned(), Bencode::str(&SimPhone::plain(8).offer())),
    ];
    let e = ng.call(offer).unwrap_err().to_string();
    assert!(e.contains("error") && e.contains("overloaded"), "{e}");
    let m = metrics(&s);
    assert!(
        m.contains("secrelay_worker_shedding{worker=\"0\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("secrelay_worker_shedding{worker=\"1\"} 2"),
        "{m}"
    );
    assert!(m.contains("secrelay_worker_load{worker=\"0\"}"), "{m}");
    s.shutdown();

    let s = server(1.5, 1.5);
    std::thread::sleep(Duration::from_millis(600));
    let (status, retry, body) = join_phone(&s.url());
    assert_eq!(status, 201, "{body}");
    assert_eq!(retry, None);
    let m = metrics(&s);
    assert!(
        m.contains("secrelay_worker_shedding{worker=\"0\"} 0"),
        "{m}"
    );
    s.shutdown();
}
