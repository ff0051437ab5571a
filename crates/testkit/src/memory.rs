//! A simulated browser for tests in memory: a [`Browser`] at a made-up address, whose every
//! datagram from the gateway must make sense (it panics otherwise, naming what arrived), and
//! which keeps what it received for the test to look at.

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::time::Instant;

use secrelay_dtls::Fingerprint;
use secrelay_wire::sdp::Offer;

use crate::browser::{Browser, Inbound};

/// A simulated browser in memory. It derefs to its [`Browser`].
pub struct SimClient {
    /// Its address (198.51.100.n, port 50000 + n).
    pub addr: SocketAddr,
    /// The browser.
    pub browser: Browser,
    /// Unprotected RTP the gateway sent us.
    pub received: Vec<Vec<u8>>,
    /// Unprotected RTCP the gateway sent us.
    pub received_rtcp: Vec<Vec<u8>>,
    /// STUN success responses received.
    pub stun_ok: usize,
}

impl Deref for SimClient {
    type Target = Browser;
    fn deref(&self) -> &Browser {
        &self.browser
    }
}

impl DerefMut for SimClient {
    fn deref_mut(&mut self) -> &mut Browser {
        &mut self.browser
    }
}

impl SimClient {
    /// Client `n`: at 198.51.100.`n`:50000+`n`, credentials `cl{n}` and
    /// `client-password-number-{n}`, announcing SSRC 1001 and Opus on 111 (as Chrome's offer),
    /// sending from sequence number 1 with timestamps 960 × the sequence number.
    pub fn new(n: u8) -> SimClient {
        SimClient::numbered(u16::from(n))
    }

    /// Client `n` of up to 65,536 (a broadcast's viewers): as [`SimClient::new`] for `n` below
    /// 256, else at 198.18.`n / 256`.`n % 256` (the benchmarking range), port 50000 + `n % 256`.
    pub fn numbered(n: u16) -> SimClient {
        let mut browser = Browser::new(
            &format!("cl{n:02}"),
            &format!("client-password-number-{n:03}"),
            1001,
            111,
        );
        // Timestamps 960 × the sequence number (20 ms of Opus each, from sequence number 1).
        browser.ts = 960;
        let [hi, lo] = n.to_be_bytes();
        let ip = match hi {
            0 => format!("198.51.100.{lo}"),
            _ => format!("198.18.{hi}.{lo}"),
        };
        SimClient {
            addr: format!("{ip}:{}", 50000 + u16::from(lo))
                .parse()
                .expect("a literal address"),
            browser,
            received: Vec::new(),
            received_rtcp: Vec::new(),
            stun_ok: 0,
        }
    }

    /// Chrome's offer with our credentials and fingerprint.
    pub fn offer(&self) -> String {
        self.browser.chrome_offer()
    }

    /// Chrome's offer with a chosen fingerprint and `a=setup` value.
    pub fn offer_with(&self, fp: &Fingerprint, setup: &str) -> String {
        self.browser.chrome_offer_with(fp, setup)
    }

    /// A Binding request against `answer`, nominating if asked.
    pub fn binding_request(&mut self, answer: &Offer, use_candidate: bool) -> Vec<u8> {
        self.browser.set_answer(answer.clone());
        self.browser
            .binding_request(use_candidate)
            .expect("the answer was just set")
    }

    /// Starts DTLS against `answer`: we are the client when the gateway said passive.
    pub fn start_dtls(&mut self, answer: &Offer, now: Instant) {
        self.browser.set_answer(answer.clone());
        self.browser
            .start_dtls(now)
            .expect("the gateway's answer has a usable fingerprint");
    }

    /// A datagram from the gateway: STUN counted, DTLS handed to the endpoint, SRTP and SRTCP
    /// opened with our keys and kept. Panics on anything our keys do not open.
    pub fn receive(&mut self, now: Instant, d: &[u8]) {
        let mut buf = d.to_vec();
        match self.browser.receive(now, &mut buf, d.len()) {
            Inbound::StunSuccess => self.stun_ok += 1,
            Inbound::StunOther | Inbound::Dtls => {}
            Inbound::Rtp(n) => {
                buf.truncate(n);
                self.received.push(buf);
            }
            Inbound::Rtcp(n) => {
                buf.truncate(n);
                self.received_rtcp.push(buf);
            }
            Inbound::Refused(e) => panic!("SRTP from the gateway that our keys do not open: {e:?}"),
            Inbound::Other => panic!("unexpected datagram from the gateway: {d:02x?}"),
        }
    }

    /// [`Browser::srtp`] once connected: (plain, protected).
    pub fn srtp(&mut self, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.browser.srtp(payload).expect("connected")
    }

    /// [`Browser::srtp_as`] once connected: (plain, protected).
    pub fn srtp_as(&mut self, ssrc: u32, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        self.browser.srtp_as(ssrc, payload).expect("connected")
    }
}
