//! secrelay's SRTP engine against rtpengine's (Debian's rtpengine-daemon; `scripts/setup`
//! installs it) in the SDES suites libsrtp does not have: AES-192 counter mode and AES in f8
//! mode, each with an 80- and a 32-bit tag, and the NULL cipher with a 32-bit tag. Two phones
//! whose SRTP is this crate's call each other through rtpengine in one suite: rtpengine
//! unprotects what the caller protected and protects it again, in the same suite under its own
//! key, for the callee, and the other way round. Every packet must come through both ways, which
//! happens only if both ends agree on the keystream, the IVs (the rollover counter included:
//! the sequence numbers roll over during the call), the key derivation and the tags (a phone
//! panics on a packet that does not unprotect).
//!
//! Without rtpengine the test fails under CI (`CI` set) and says SKIPPED elsewhere.

mod lab_support;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use secrelay_lab::failover::PhoneCall;
use secrelay_srtp::Profile;
use secrelay_testkit::ng::{command, Ng};
use secrelay_wire::bencode::Bencode;

/// Kills rtpengine when the test ends, however it ends.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

#[test]
fn rtpengine_and_secrelay_agree_on_aes_192_f8_and_null_32() {
    let test = "rtpengine_and_secrelay_agree_on_aes_192_f8_and_null_32";
    let Some(rtpengine) = lab_support::rtpengine(test) else {
        return;
    };
    let ng_port = free_udp_port();
    let _daemon = Daemon(
        Command::new(&rtpengine)
            .args([
                "--config-file=none",
                "--interface=127.0.0.1",
                &format!("--listen-ng=127.0.0.1:{ng_port}"),
                "--foreground",
                "--log-stderr",
                "--log-level=3",
                "--table=-1",
                "--num-threads=1",
                "--port-min=47000",
                "--port-max=47999",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("rtpengine starts"),
    );
    let mut ng = Ng::new(([127, 0, 0, 1], ng_port).into()).unwrap();
    let up = Instant::now() + Duration::from_secs(10);
    while ng
        .call(vec![("command".into(), Bencode::str("ping"))])
        .is_err()
    {
        assert!(Instant::now() < up, "rtpengine does not answer ping");
        std::thread::sleep(Duration::from_millis(100));
    }
    let suites = [
        Profile::AesCm192HmacSha1_80,
        Profile::AesCm192HmacSha1_32,
        Profile::F8Aes128HmacSha1_80,
        Profile::F8Aes128HmacSha1_32,
        Profile::NullHmacSha1_32,
    ];
    for (n, suite) in suites.into_iter().enumerate() {
        let id = format!("suite-{n}@test");
        let mut call = PhoneCall::open(&mut ng, &id, Some(suite), 0x5000 + n as u32, 65_520)
            .unwrap_or_else(|e| panic!("{suite}: the call through rtpengine: {e:#}"));
        let rounds = 40;
        for _ in 0..rounds {
            call.exchange().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let end = Instant::now() + Duration::from_secs(2);
        while call.heard() != (rounds, rounds) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
            call.caller.read();
            call.callee.read();
        }
        assert_eq!(
            call.heard(),
            (rounds, rounds),
            "{suite}: packets that came through rtpengine and unprotected (caller, callee)"
        );
        ng.call(command("delete", &id, "caller", None, None))
            .unwrap();
    }
}
