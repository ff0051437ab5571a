//! DTLS-SRTP keying for a telephony leg (RFC 5763 and RFC 5764 as SIP uses them: no ICE, the
//! leg's own ports, `RTP/SAVP[F]` or `UDP/TLS/RTP/SAVP[F]` with `a=setup` and `a=fingerprint`).
//!
//! Each component has its own association: one on the RTP port, and, when RTCP has a port of
//! its own, one there (RFC 5764 §4.1.2: SRTP's keys come from the RTP port's handshake,
//! SRTCP's from the RTCP port's). Media waits until every component is keyed. Our role comes
//! from the SDP: an offer of ours says `actpass` and the answer decides (`active`: we are the
//! server; `passive`, or an answer that wrongly says `actpass`: the client); answering an
//! offer that says `actpass` we take the client's role unless [`RtpDtls::passive`] says
//! otherwise. As the client we send the first flight to the address the SDP signals.
//!
//! An association takes records from the first source whose records reach it and from no
//! other after that: the peer's certificate must hash to the fingerprint its SDP gave, and a
//! handshake whose certificate does not ends the leg ([`CloseReason::FingerprintMismatch`]).

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::Instant;

use secrelay_dtls::{
    Endpoint, EndpointConfig, Event as DtlsEvent, FailReason, Fingerprint, HashAlgorithm,
    LocalCertificate, Output as DtlsOutput, Role, Timers, Verdict,
};
use secrelay_srtp::{Context, MasterKey, Policy, Profile};
use secrelay_wire::sdp::Setup;
use secrelay_wire::sdp_rtp::SectionDtls;

use super::{CloseReason, LegEvent, TransmitKind, Via};
use crate::counters::{Counters, DropReason};

/// What a telephony leg keyed by DTLS-SRTP is made with.
#[derive(Clone)]
pub struct RtpDtls {
    /// Our certificate.
    pub certificate: LocalCertificate,
    /// The SRTP profiles we take, most preferred first.
    pub srtp_profiles: Vec<Profile>,
    /// Retransmission timers and the handshake's deadline.
    pub timers: Timers,
    /// The hash of the fingerprint our SDP carries (rtpengine's `DTLS-fingerprint`).
    pub hash: HashAlgorithm,
    /// Answering an offer that leaves the role to us (`a=setup:actpass`), take the server's
    /// (`passive`) rather than the client's (rtpengine's `DTLS-reverse: passive`).
    pub passive: bool,
}

impl fmt::Debug for RtpDtls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtpDtls")
            .field("hash", &self.hash)
            .field("passive", &self.passive)
            .finish_non_exhaustive()
    }
}

/// A transmit queued by a telephony leg: to, from which of our ports, the datagram, what it is.
pub(crate) type Transmit = (SocketAddr, Via, Vec<u8>, TransmitKind);

/// One component's association.
struct Component {
    endpoint: Endpoint,
    /// Our port it runs on.
    via: Via,
    /// Where its records come from, once one has reached the endpoint.
    peer: Option<SocketAddr>,
    timeout: Option<Instant>,
    /// Its keys, once connected: ours, the peer's.
    keys: Option<(Profile, MasterKey, MasterKey)>,
}

/// The SRTP contexts a leg's associations made.
pub(crate) struct Keyed {
    pub(crate) inbound: Context,
    pub(crate) outbound: Context,
}

/// A leg's DTLS-SRTP keying. See the [module documentation](self).
pub(crate) struct DtlsKeying {
    config: RtpDtls,
    ours: Fingerprint,
    role: Option<Role>,
    peer_fingerprint: Option<Fingerprint>,
    rtp: Option<Component>,
    rtcp: Option<Component>,
    started: Option<Instant>,
    pub(crate) keyed: Option<Keyed>,
    /// Records that came before the associations started (a peer that answered as the client
    /// sends its ClientHello as its answer leaves, and it can reach us first), handed to them
    /// when they start.
    early: Vec<(SocketAddr, Via, Vec<u8>)>,
}

/// The most records kept before the associations start (a flight or two per component).
const EARLY_MAX: usize = 8;

/// Why the SDP's DTLS lines cannot be taken.
fn bad(why: impl Into<String>) -> String {
    why.into()
}

impl DtlsKeying {
    /// Keying with `config`, our role not yet known.
    pub(crate) fn new(config: RtpDtls) -> Result<DtlsKeying, String> {
        let leaf = config
            .certificate
            .leaf_der()
            .ok_or_else(|| bad("our DTLS certificate has no leaf"))?;
        let ours = Fingerprint::of(leaf, config.hash);
        Ok(DtlsKeying {
            config,
            ours,
            role: None,
            peer_fingerprint: None,
            rtp: None,
            rtcp: None,
            started: None,
            keyed: None,
            early: Vec::new(),
        })
    }

    /// Our `a=setup` and `a=fingerprint` values.
    pub(crate) fn attributes(&self) -> (Setup, String) {
        let setup = match self.role {
            None => Setup::Actpass,
            Some(Role::Client) => Setup::Active,
            Some(Role::Server) => Setup::Passive,
        };
        (setup, self.ours.to_string())
    }

    /// The peer's fingerprint: the first of its `a=fingerprint` lines whose hash we know.
    fn take_fingerprint(&mut self, sdp: &SectionDtls) -> Result<(), String> {
        let fp = sdp
            .fingerprints
            .iter()
            .find_map(|f| f.parse::<Fingerprint>().ok())
            .ok_or_else(|| {
                bad(format!(
                    "no usable a=fingerprint among {:?}",
                    sdp.fingerprints
                ))
            })?;
        if self.started.is_some() && self.peer_fingerprint.as_ref() != Some(&fp) {
            return Err(bad(
                "a new certificate fingerprint for a DTLS association under way",
            ));
        }
        self.peer_fingerprint = Some(fp);
        Ok(())
    }

    /// The phone's offer: our role from its `a=setup`, its fingerprint.
    pub(crate) fn take_offer(&mut self, sdp: &SectionDtls) -> Result<(), String> {
        let role = match sdp.setup {
            Some(Setup::Active) => Role::Server,
            Some(Setup::Passive) => Role::Client,
            Some(Setup::Holdconn) => return Err(bad("a=setup:holdconn leaves no DTLS role")),
            Some(Setup::Actpass) | None if self.config.passive => Role::Server,
            Some(Setup::Actpass) | None => Role::Client,
        };
        self.set_role(role)?;
        self.take_fingerprint(sdp)
    }

    /// The phone's answer to our `actpass`: our role from its `a=setup` (`active` by default,
    /// RFC 4145; an `actpass` it should not have written makes us the client), its fingerprint.
    pub(crate) fn take_answer(&mut self, sdp: &SectionDtls) -> Result<(), String> {
        let role = match sdp.setup {
            Some(Setup::Active) | None => Role::Server,
            Some(Setup::Passive) | Some(Setup::Actpass) => Role::Client,
            Some(Setup::Holdconn) => return Err(bad("a=setup:holdconn leaves no DTLS role")),
        };
        self.set_role(role)?;
        self.take_fingerprint(sdp)
    }

    fn set_role(&mut self, role: Role) -> Result<(), String> {
        match self.role {
            Some(r) if r != role && self.started.is_some() => Err(bad(
                "the DTLS role of an association under way cannot change",
            )),
            _ => {
                self.role = Some(role);
                Ok(())
            }
        }
    }

    /// Starts the associations (once role and fingerprint are known): RTP's on `ports.0`, and
    /// RTCP's on `ports.1` when RTCP has a port of its own.
    pub(crate) fn start(&mut self, now: Instant, ports: (Via, Option<Via>)) -> Result<(), String> {
        if self.rtp.is_some() {
            return Ok(());
        }
        let (Some(role), Some(fp)) = (self.role, self.peer_fingerprint.clone()) else {
            return Ok(());
        };
        let make = |via: Via| -> Result<Component, String> {
            let mut cfg = EndpointConfig::new(role, self.config.certificate.clone(), fp.clone());
            cfg.srtp_profiles = self.config.srtp_profiles.clone();
            cfg.timers = self.config.timers;
            let endpoint = Endpoint::new(cfg, now).map_err(|e| bad(e.to_string()))?;
            Ok(Component {
                endpoint,
                via,
                peer: None,
                timeout: None,
                keys: None,
            })
        };
        self.rtp = Some(make(ports.0)?);
        self.rtcp = ports.1.map(make).transpose()?;
        if role == Role::Client {
            self.started = Some(now);
        }
        Ok(())
    }

    /// Whether `next` (made from the phone's new offer) describes this keying's association:
    /// the same role, the same certificate, so the association goes on.
    pub(crate) fn continued_by(&self, next: &DtlsKeying) -> bool {
        self.started.is_none()
            || (self.role == next.role && self.peer_fingerprint == next.peer_fingerprint)
    }

    /// The records that came before the associations started, once they have.
    pub(crate) fn take_early(&mut self) -> Vec<(SocketAddr, Via, Vec<u8>)> {
        match self.rtp {
            Some(_) => std::mem::take(&mut self.early),
            None => Vec::new(),
        }
    }

    /// Whether a handshake has begun (a record came, or we sent the first flight).
    pub(crate) fn started(&self) -> bool {
        self.started.is_some()
    }

    /// A DTLS record from `from` on our port `via`, to the association there.
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        via: Via,
        datagram: &[u8],
        counters: &mut Counters,
    ) {
        let muxed = self.rtcp.is_none();
        let comp = match (&mut self.rtp, &mut self.rtcp) {
            (_, Some(c)) if c.via == via => c,
            (Some(c), _) if c.via == via || muxed => c,
            // Before our role is known (an offer of ours waits for its answer): kept.
            (None, _) if self.early.len() < EARLY_MAX => {
                return self.early.push((from, via, datagram.to_vec()));
            }
            _ => return counters.drop(DropReason::BeforeKeys),
        };
        if comp.peer.is_some_and(|p| p != from) {
            return counters.drop(DropReason::UnlatchedSource);
        }
        counters.dtls_in += 1;
        comp.peer = Some(from);
        self.started.get_or_insert(now);
        if let Verdict::Discarded(d) = comp.endpoint.handle_datagram(now, datagram) {
            counters.drop(DropReason::of_dtls(d));
        }
    }

    /// Advances the associations' timers.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for c in [&mut self.rtp, &mut self.rtcp].into_iter().flatten() {
            if c.timeout.is_some_and(|t| t <= now) {
                c.timeout = None;
                c.endpoint.handle_timeout(now);
            }
        }
    }

    /// The earliest timer.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [&self.rtp, &self.rtcp]
            .into_iter()
            .flatten()
            .filter_map(|c| c.timeout)
            .min()
    }

    /// What the associations have to say: their flights queued on `out` (to each one's peer,
    /// else to `signalled`: RTP's, RTCP's), and the leg's event once every component is keyed.
    pub(crate) fn drain(
        &mut self,
        now: Instant,
        signalled: (Option<SocketAddr>, Option<SocketAddr>),
        replay_window: usize,
        out: &mut VecDeque<Transmit>,
    ) -> Result<Option<LegEvent>, CloseReason> {
        let comps = [(&mut self.rtp, signalled.0), (&mut self.rtcp, signalled.1)];
        for (comp, signalled) in comps {
            let Some(c) = comp.as_mut() else { continue };
            c.timeout = None;
            while let Some(o) = c.endpoint.poll_output() {
                match o {
                    DtlsOutput::Transmit(d) => {
                        if let Some(to) = c.peer.or(signalled) {
                            out.push_back((to, c.via, d, TransmitKind::Dtls));
                        }
                    }
                    DtlsOutput::Timeout(t) => {
                        c.timeout = Some(t);
                        break;
                    }
                    DtlsOutput::Event(DtlsEvent::Connected { profile, keys, .. }) => {
                        c.keys = Some((profile, keys.local.clone(), keys.remote.clone()));
                    }
                    DtlsOutput::Event(DtlsEvent::Failed(FailReason::FingerprintMismatch)) => {
                        return Err(CloseReason::FingerprintMismatch)
                    }
                    DtlsOutput::Event(DtlsEvent::Failed(r)) => {
                        return Err(CloseReason::DtlsFailed(r))
                    }
                    DtlsOutput::Event(DtlsEvent::Closed) => return Err(CloseReason::CloseNotify),
                    DtlsOutput::Event(_) => {}
                }
            }
        }
        if self.keyed.is_some() {
            return Ok(None);
        }
        self.key(now, replay_window)
    }

    /// The contexts, once every component is keyed.
    fn key(&mut self, now: Instant, window: usize) -> Result<Option<LegEvent>, CloseReason> {
        let Some((profile, ours, theirs)) = self.rtp.as_ref().and_then(|c| c.keys.clone()) else {
            return Ok(None);
        };
        let rtcp = match &self.rtcp {
            None => None,
            Some(Component { keys: None, .. }) => return Ok(None),
            Some(Component {
                keys: Some((p, o, t)),
                ..
            }) if *p == profile => Some((o.clone(), t.clone())),
            // RTP's and RTCP's handshakes chose different profiles: one context cannot hold
            // both.
            Some(_) => return Err(CloseReason::DtlsFailed(FailReason::Internal)),
        };
        let policy = |key: MasterKey, rtcp_key: Option<MasterKey>| {
            let p = Policy::new(key).replay_window(window);
            match rtcp_key {
                Some(k) => p.rtcp_key(k),
                None => p,
            }
        };
        let (rtcp_ours, rtcp_theirs) = rtcp.unzip();
        let made = Context::new(policy(theirs, rtcp_theirs).any_inbound()).and_then(|inbound| {
            let outbound = Context::new(policy(ours, rtcp_ours).any_outbound())?;
            Ok((inbound, outbound))
        });
        let (inbound, outbound) =
            made.map_err(|_| CloseReason::DtlsFailed(FailReason::Internal))?;
        self.keyed = Some(Keyed { inbound, outbound });
        let handshake = now.saturating_duration_since(self.started.unwrap_or(now));
        Ok(Some(LegEvent::Connected { profile, handshake }))
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use secrelay_dtls::{Certificate, KeyType};
    use secrelay_wire::sdp_rtp::{parse_rtp, Transport};

    use super::*;
    use crate::leg::{CodecId, LegOutput, Ports, RtpConfig, RtpLeg, RtpOfferSpec};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn config(passive: bool) -> RtpConfig {
        let cert = Certificate::self_signed(KeyType::EcdsaP256, "leg").unwrap();
        RtpConfig {
            announce: LO,
            passthrough: true,
            dtls: Some(RtpDtls {
                certificate: LocalCertificate::from(&cert),
                srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES.to_vec(),
                timers: Timers::default(),
                hash: HashAlgorithm::Sha256,
                passive,
            }),
            ..RtpConfig::default()
        }
    }

    fn pcmu() -> secrelay_wire::sdp::Codec {
        secrelay_wire::sdp::Codec {
            pt: 0,
            name: "PCMU".into(),
            clock_rate: 8000,
            channels: None,
            fmtp: None,
        }
    }

    /// Our offer of PCMU on `RTP/SAVP`, with SDES `suites` beside DTLS (none: DTLS alone).
    fn spec(suites: Vec<Profile>, rtcp_mux: bool) -> RtpOfferSpec {
        RtpOfferSpec {
            transport: Transport::RtpSavp,
            codecs: vec![(CodecId::Pcmu, pcmu())],
            suites,
            rtcp_mux,
            ptime: None,
        }
    }

    fn ports(base: u16) -> Ports {
        Ports {
            rtp: SocketAddr::new(LO, base),
            rtcp: SocketAddr::new(LO, base + 1),
        }
    }

    /// Carries each leg's datagrams to the other (`legs[i]` on `ports[i]`) until neither has
    /// any; the events each saw.
    fn run(legs: &mut [RtpLeg; 2], at: [Ports; 2], now: Instant) -> [Vec<LegEvent>; 2] {
        let mut events: [Vec<LegEvent>; 2] = Default::default();
        for _ in 0..50 {
            let mut moved = false;
            for i in 0..2 {
                let mut out = Vec::new();
                while let Some(o) = legs[i].poll_output() {
                    match o {
                        LegOutput::Transmit {
                            destination,
                            via,
                            contents,
                            ..
                        } => out.push((destination, via, contents.to_vec())),
                        LegOutput::Event(e) => events[i].push(e),
                        _ => break,
                    }
                }
                for (to, via, d) in out {
                    let Via::Port(p) = via else { panic!("{via:?}") };
                    let from = SocketAddr::new(LO, p);
                    let j = 1 - i;
                    assert!(
                        to == at[j].rtp || to == at[j].rtcp,
                        "{to} is not the other leg's"
                    );
                    legs[j].handle_dtls(now, from, Via::Port(to.port()), &d);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        events
    }

    /// Carries what `from` has to send to `to` (on `to_ports`) now; whether it had anything.
    fn carry(from: &mut RtpLeg, to: &mut RtpLeg, to_ports: Ports, now: Instant) -> bool {
        let mut out = Vec::new();
        while let Some(o) = from.poll_output() {
            match o {
                LegOutput::Transmit {
                    destination,
                    via,
                    contents,
                    ..
                } => out.push((destination, via, contents.to_vec())),
                LegOutput::Event(_) => {}
                _ => break,
            }
        }
        for (dest, via, d) in &out {
            let Via::Port(p) = via else { panic!("{via:?}") };
            assert!(*dest == to_ports.rtp || *dest == to_ports.rtcp);
            to.handle_dtls(now, SocketAddr::new(LO, *p), Via::Port(dest.port()), d);
        }
        !out.is_empty()
    }

    #[test]
    fn two_legs_key_rtp_and_rtcp_each_over_its_own_port() {
        let now = Instant::now();
        let spec = spec(Vec::new(), false);
        for passive in [false, true] {
            let at = [ports(30000), ports(30010)];
            let offerer = RtpLeg::new_offer(&spec, at[0], config(false), now).unwrap();
            let offer = offerer.answer_sdp().to_owned();
            assert!(offer.contains("a=setup:actpass\r\n"), "{offer}");
            assert!(!offer.contains("a=crypto"), "{offer}");
            let answerer =
                RtpLeg::new(&parse_rtp(&offer).unwrap(), at[1], config(passive), now).unwrap();
            let answer = answerer.answer_sdp().to_owned();
            let ours = if passive { "passive" } else { "active" };
            assert!(answer.contains(&format!("a=setup:{ours}\r\n")), "{answer}");
            let mut legs = [offerer, answerer];
            // The answerer as the client sends its first flight as its answer leaves: it
            // reaches us before the answer does, and is kept until then.
            let [offering, answering] = &mut legs;
            let early = carry(answering, offering, at[0], now);
            assert_eq!(early, !passive, "a client's first flight before the answer");
            legs[0]
                .accept_answer(&parse_rtp(&answer).unwrap(), now)
                .unwrap();
            assert!(
                legs[0].admit(at[1].rtp, false, now).is_err(),
                "keyed before the handshake"
            );
            let events = run(&mut legs, at, now);
            for (i, e) in events.iter().enumerate() {
                assert!(
                    e.iter().any(|e| matches!(e, LegEvent::Connected { .. })),
                    "leg {i} (answerer passive: {passive}): {e:?}"
                );
            }
            // RTP under the RTP port's keys, RTCP under the RTCP port's, each way.
            let rtp = {
                let mut p = vec![0x80, 0, 0, 1, 0, 0, 0, 160, 0, 0, 0, 7];
                p.extend([0xd5; 160]);
                p
            };
            let rtcp = vec![0x80, 201, 0, 1, 0, 0, 0, 7];
            for t in [0, 1] {
                let [a, b] = &mut legs;
                let (tx, rx) = if t == 0 { (a, b) } else { (b, a) };
                let mut buf = rtp.clone();
                buf.resize(256, 0);
                let n = tx
                    .outbound_context()
                    .unwrap()
                    .protect_rtp(&mut buf, rtp.len())
                    .unwrap();
                let m = rx
                    .inbound_context()
                    .unwrap()
                    .unprotect_rtp(&mut buf, n)
                    .unwrap();
                assert_eq!(&buf[..m], &rtp[..]);
                let mut buf = rtcp.clone();
                buf.resize(64, 0);
                let n = tx
                    .outbound_context()
                    .unwrap()
                    .protect_rtcp(&mut buf, rtcp.len())
                    .unwrap();
                let m = rx
                    .inbound_context()
                    .unwrap()
                    .unprotect_rtcp(&mut buf, n)
                    .unwrap();
                assert_eq!(&buf[..m], &rtcp[..]);
            }
        }
    }

    #[test]
    fn sdes_and_dtls_offered_together_key_as_the_answer_chooses() {
        let now = Instant::now();
        let spec = spec(vec![Profile::AesCm128HmacSha1_80], false);
        // A phone that keys by DTLS-SRTP answers without the crypto lines it does not use.
        let at = [ports(30040), ports(30050)];
        let offerer = RtpLeg::new_offer(&spec, at[0], config(false), now).unwrap();
        let offer = offerer.answer_sdp().to_owned();
        for line in [
            "a=crypto:1 AES_CM_128_HMAC_SHA1_80 ",
            "a=setup:actpass",
            "a=fingerprint:",
        ] {
            assert!(offer.contains(line), "{line} in {offer}");
        }
        let dtls_only: String = offer
            .lines()
            .filter(|l| !l.starts_with("a=crypto"))
            .map(|l| format!("{l}\r\n"))
            .collect();
        let answerer =
            RtpLeg::new(&parse_rtp(&dtls_only).unwrap(), at[1], config(false), now).unwrap();
        let mut legs = [offerer, answerer];
        legs[0]
            .accept_answer(&parse_rtp(legs[1].answer_sdp()).unwrap(), now)
            .unwrap();
        assert_eq!(legs[0].sdes_profile(), None);
        let events = run(&mut legs, at, now);
        assert!(
            events[0]
                .iter()
                .any(|e| matches!(e, LegEvent::Connected { .. })),
            "{:?}",
            events[0]
        );

        // A phone that keys by SDES answers with its crypto line: SDES, and our next offer
        // carries no fingerprint.
        let at = [ports(30060), ports(30070)];
        let mut offerer = RtpLeg::new_offer(&spec, at[0], config(false), now).unwrap();
        let answerer = RtpLeg::new(
            &parse_rtp(offerer.answer_sdp()).unwrap(),
            at[1],
            RtpConfig {
                dtls: None,
                ..config(false)
            },
            now,
        )
        .unwrap();
        assert!(answerer.answer_sdp().contains("a=crypto:1 "));
        offerer
            .accept_answer(&parse_rtp(answerer.answer_sdp()).unwrap(), now)
            .unwrap();
        assert_eq!(offerer.sdes_profile(), Some(Profile::AesCm128HmacSha1_80));
        assert!(offerer.inbound_context().is_some());
        let again = offerer.make_offer().unwrap();
        assert!(
            !again.contains("a=fingerprint") && !again.contains("a=setup"),
            "{again}"
        );
    }

    #[test]
    fn a_phone_whose_certificate_is_not_its_fingerprint_ends_the_leg() {
        let now = Instant::now();
        let spec = spec(Vec::new(), true);
        let at = [ports(30020), ports(30030)];
        let offerer = RtpLeg::new_offer(&spec, at[0], config(false), now).unwrap();
        let answerer = RtpLeg::new(
            &parse_rtp(offerer.answer_sdp()).unwrap(),
            at[1],
            config(false),
            now,
        )
        .unwrap();
        // The answer reaches us with another certificate's fingerprint.
        let other = config(false);
        let forged = DtlsKeying::new(other.dtls.unwrap()).unwrap().attributes().1;
        let answer = answerer
            .answer_sdp()
            .lines()
            .map(|l| match l.starts_with("a=fingerprint:") {
                true => format!("a=fingerprint:{forged}\r\n"),
                false => format!("{l}\r\n"),
            })
            .collect::<String>();
        let mut legs = [offerer, answerer];
        legs[0]
            .accept_answer(&parse_rtp(&answer).unwrap(), now)
            .unwrap();
        let events = run(&mut legs, at, now);
        assert!(
            events[0].contains(&LegEvent::Closed(CloseReason::FingerprintMismatch)),
            "{:?}",
            events[0]
        );
        assert!(legs[0].inbound_context().is_none());
    }
}
