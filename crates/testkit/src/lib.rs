//! secrelay's test kit: the simulated peers and links that the gateway's tests, the dtls tests,
//! the lab and the demo share, so that each exists once.
//!
//! * [`browser`]: a simulated WebRTC browser, sans-IO (offers, ICE checks, a DTLS-SRTP
//!   endpoint, SRTP in and out), the core of every simulated participant.
//! * [`memory`]: a browser for tests in memory, at a made-up address, strict about what it gets.
//! * [`gateway`]: such browsers wired to the gateway's sans-IO parts: one WebRTC leg, or a
//!   whole shard with rooms of them ([`gateway::Harness`]).
//! * [`participant`]: a browser on a real UDP socket with HTTP signaling (WHIP, WHEP, room
//!   joins), sending a G.711 tone and measuring what it receives.
//! * [`phone`]: a SIP phone's media side (plain RTP or SDES-SRTP), sans-IO.
//! * [`fleet`]: many socket participants in rooms on a few threads (the demo, `lab calls`,
//!   `lab gateway-load`, `lab relay-compare`).
//! * [`signaling`]: the gateway's HTTP side as a client sees it.
//! * [`netns`]: network namespaces of a test's own, joined by veth pairs.
//! * [`ng`]: a SIP proxy's side of rtpengine's ng control protocol.
//! * [`video`]: a simulated VP8 simulcast sender (three `rid` layers, paced, keyframes on
//!   request) and the offers of a WHIP publisher and a WHEP viewer of it.
//! * [`twcc`]: a receiver's transport-cc feedback (what a browser reports of what arrived).
//! * [`link`]: a simulated lossy, reordering, duplicating link on simulated time.
//! * [`forged_dtls`]: DTLS records a forger without keys can send to a live association.
//! * [`redis`]: a Redis server of a test's own (a cluster's directory).
//! * [`ports`]: fixed ports for peers told a number before they start, never the same in two
//!   test processes.
#![forbid(unsafe_code)]

pub mod browser;
pub mod fleet;
pub mod forged_dtls;
pub mod gateway;
pub mod ice;
pub mod keylog;
pub mod link;
pub mod memory;
pub mod netns;
pub mod ng;
pub mod participant;
pub mod phone;
pub mod ports;
pub mod redis;
pub mod signaling;
pub mod twcc;
pub mod video;

pub use browser::{Browser, Inbound};
pub use link::{Air, Link, Rng};
pub use participant::{Media, PeerDtls, Phase, SentStamps, SimParticipant, StreamRx, VideoRx};
pub use signaling::{AdminKeyFile, Leg, Signaling};

/// Polls `f` every 20 ms until it holds; panics naming `what` when `timeout` passes first.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + timeout;
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
