//! A SIP phone's side of ICE with a gateway's telephony leg, for tests: ICE credentials in a
//! phone's SDP, the gateway's ICE read from its SDP, and a full agent's check over a real
//! socket.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use secrelay_wire::stun::{attr, Class, Message, MessageBuilder, BINDING};

/// `sdp` with ICE credentials of a phone's (`ufrag`, and a password made from it) added at the
/// session's level.
pub fn with_ice(sdp: &str, ufrag: &str) -> String {
    sdp.replacen(
        "t=0 0\r\n",
        &format!("t=0 0\r\na=ice-ufrag:{ufrag}\r\na=ice-pwd:{ufrag}-password-of-22+\r\n"),
        1,
    )
}

/// The gateway's ICE in its SDP: (ufrag, pwd, candidates), when it says `a=ice-lite` and has
/// credentials. Panics on ICE lines without `a=end-of-candidates`.
pub fn our_ice(sdp: &str) -> Option<(String, String, Vec<String>)> {
    if !sdp.contains("\r\na=ice-lite\r\n") {
        return None;
    }
    let value = |key: &str| {
        sdp.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_owned)
    };
    let candidates = sdp
        .lines()
        .filter_map(|l| l.strip_prefix("a=candidate:"))
        .map(str::to_owned)
        .collect();
    assert!(sdp.contains("a=end-of-candidates\r\n"), "{sdp}");
    Some((value("a=ice-ufrag:")?, value("a=ice-pwd:")?, candidates))
}

/// What a check got back: the response's class, its XOR-MAPPED-ADDRESS and its error code.
pub type CheckAnswer = (Class, Option<SocketAddr>, Option<u16>);

/// A full agent's check from `socket` to `to` (USERNAME `ufrag:theirs`, integrity with `pwd`,
/// ICE-CONTROLLING, USE-CANDIDATE), and what came back within 5 s (panics without an answer).
/// Datagrams that are not its answer are read and dropped meanwhile.
pub fn check(
    socket: &UdpSocket,
    to: SocketAddr,
    (ufrag, theirs): (&str, &str),
    pwd: &str,
) -> CheckAnswer {
    let mut buf = [0u8; 512];
    let tid = [0x1c; 12];
    let n = MessageBuilder::new(&mut buf, Class::Request, BINDING, tid)
        .attribute(attr::USERNAME, format!("{ufrag}:{theirs}").as_bytes())
        .attribute(attr::PRIORITY, &1_862_270_975u32.to_be_bytes())
        .attribute(attr::ICE_CONTROLLING, &7u64.to_be_bytes())
        .attribute(attr::USE_CANDIDATE, &[])
        .integrity(pwd.as_bytes())
        .fingerprint()
        .expect("a check fits 512 bytes");
    socket.send_to(&buf[..n], to).expect("sending a check");
    let end = Instant::now() + Duration::from_secs(5);
    let mut reply = [0u8; 1500];
    loop {
        if let Ok((len, from)) = socket.recv_from(&mut reply) {
            if let Ok(m) = Message::parse(&reply[..len]) {
                if from == to && m.transaction_id() == tid {
                    let code = m.error_code().map(|(c, _)| c);
                    return (m.class(), m.xor_mapped_address(), code);
                }
            }
        }
        assert!(Instant::now() < end, "no answer to the check from {to}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
