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
//! Who a component takes records from (a media port is reachable by anyone who learns it, so
//! the first source to reach it must not be the one that decides):
//! - **as the client**, its one handshake runs with the address the SDP signals (with the first
//!   source only when the SDP signals none); records from any other source are dropped, and so
//!   are those that came before the answer made us the client, and every ClientHello.
//! - **as the server**, a ClientHello from a new source is answered with a stateless cookie
//!   (HelloVerifyRequest, RFC 6347 §4.2.1), and a source that returns it gets a handshake of its
//!   own: one per IP address, at most [`MAX_ATTEMPTS`] at once, so that a forged flood holds
//!   nothing and a stranger who learnt the port cannot shut the phone out. The first handshake
//!   whose certificate hashes to the SDP's fingerprint keys the component; the others end, and
//!   no other source is taken after it.
//!
//! The peer's certificate must hash to the fingerprint its SDP gave. A handshake that fails
//! (that certificate wrong, an alert) ends the leg ([`CloseReason::FingerprintMismatch`],
//! [`CloseReason::DtlsFailed`]) when it is the client's, the connected one, or the signalled
//! address's; a server's handshake with any other source ends alone
//! ([`DropReason::DtlsRejected`]).

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::Instant;

use zeroize::Zeroize;

use secrelay_dtls::cookie::{Admission, CookieResponder, CookieVerdict};
use secrelay_dtls::record::inspect;
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

/// The SDP-signalled addresses of a leg's components: RTP's, RTCP's.
pub(crate) type Signalled = (Option<SocketAddr>, Option<SocketAddr>);

/// A connected handshake's profile and keys: ours, the peer's.
type Keys = (Profile, MasterKey, MasterKey);

/// The most handshakes a component's server runs at once, each with another IP address.
const MAX_ATTEMPTS: usize = 8;

/// A handshake with one source.
struct Attempt {
    endpoint: Endpoint,
    /// Where its records come from and its flights go (the client's: the signalled address
    /// until the peer's first record).
    peer: Option<SocketAddr>,
    timeout: Option<Instant>,
}

impl Attempt {
    /// One of its peer's records.
    fn take(&mut self, now: Instant, datagram: &[u8], counters: &mut Counters) {
        counters.dtls_in += 1;
        if let Verdict::Discarded(d) = self.endpoint.handle_datagram(now, datagram) {
            counters.drop(DropReason::of_dtls(d));
        }
    }

    /// What it has to say: its flights queued on `out` (to its peer, else to `signalled`), its
    /// keys once it connects, or why it failed.
    fn poll(
        &mut self,
        via: Via,
        signalled: Option<SocketAddr>,
        out: &mut VecDeque<Transmit>,
    ) -> Result<Option<Keys>, CloseReason> {
        self.timeout = None;
        let mut keys = None;
        while let Some(o) = self.endpoint.poll_output() {
            match o {
                DtlsOutput::Transmit(d) => {
                    if let Some(to) = self.peer.or(signalled) {
                        out.push_back((to, via, d, TransmitKind::Dtls));
                    }
                }
                DtlsOutput::Timeout(t) => {
                    self.timeout = Some(t);
                    break;
                }
                DtlsOutput::Event(DtlsEvent::Connected {
                    profile, keys: k, ..
                }) => {
                    keys = Some((profile, k.local.clone(), k.remote.clone()));
                }
                DtlsOutput::Event(DtlsEvent::Failed(FailReason::FingerprintMismatch)) => {
                    return Err(CloseReason::FingerprintMismatch)
                }
                DtlsOutput::Event(DtlsEvent::Failed(r)) => return Err(CloseReason::DtlsFailed(r)),
                DtlsOutput::Event(DtlsEvent::Closed) => return Err(CloseReason::CloseNotify),
                DtlsOutput::Event(_) => {}
            }
        }
        Ok(keys)
    }
}

/// One component's association.
struct Component {
    /// Our port it runs on.
    via: Via,
    /// The handshakes under way: the client's one; the server's, one per IP address that
    /// returned our cookie, until one connects and the others end.
    attempts: Vec<Attempt>,
    /// The keys, once a handshake connected (its attempt is then the only one).
    keys: Option<Keys>,
}

impl Component {
    /// A ClientHello that returned our cookie from `from`: a handshake of its own, in place of
    /// an earlier one from the same IP address (a NAT's new mapping, a phone started again).
    fn admit(
        &mut self,
        config: EndpointConfig,
        now: Instant,
        from: SocketAddr,
        admission: &Admission,
        counters: &mut Counters,
    ) {
        self.attempts
            .retain(|a| a.peer.is_none_or(|p| p.ip() != from.ip()));
        if self.attempts.len() >= MAX_ATTEMPTS {
            return counters.drop(DropReason::HandshakeLimit);
        }
        counters.dtls_in += 1;
        match Endpoint::new_admitted(config, now, admission) {
            Ok(endpoint) => self.attempts.push(Attempt {
                endpoint,
                peer: Some(from),
                timeout: None,
            }),
            Err(_) => counters.drop(DropReason::InternalError),
        }
    }

    /// Polls every handshake (see [`Attempt::poll`]). One that fails ends the leg when it is
    /// the client's, the connected one, or the signalled address's; any other (a source the SDP
    /// did not name: a NAT's mapping, or someone who learnt the port) ends alone, counted.
    fn drain(
        &mut self,
        role: Role,
        signalled: Option<SocketAddr>,
        out: &mut VecDeque<Transmit>,
        counters: &mut Counters,
    ) -> Result<(), CloseReason> {
        let mut i = 0;
        while i < self.attempts.len() {
            let a = &mut self.attempts[i];
            match a.poll(self.via, signalled, out) {
                Ok(None) => i += 1,
                Ok(Some(keys)) => {
                    self.keys = Some(keys);
                    self.attempts.swap(0, i);
                    self.attempts.truncate(1);
                    return Ok(());
                }
                Err(why) if role == Role::Client || self.keys.is_some() => return Err(why),
                Err(why) if signalled.is_some() && a.peer == signalled => return Err(why),
                Err(_) => {
                    self.attempts.swap_remove(i);
                    counters.drop(DropReason::DtlsRejected);
                }
            }
        }
        Ok(())
    }
}

/// The SRTP contexts a leg's associations made.
pub(crate) struct Keyed {
    pub(crate) inbound: Context,
    pub(crate) outbound: Context,
}

/// Ours and the peer's master keys.
type KeyPair = (MasterKey, MasterKey);

impl Keyed {
    /// Contexts from RTP's handshake's keys (`rtp`: ours, the peer's), SRTCP's from RTCP's
    /// (`rtcp`) when RTCP has a port of its own.
    fn new(
        rtp: KeyPair,
        rtcp: Option<KeyPair>,
        window: usize,
    ) -> Result<Keyed, secrelay_srtp::ConfigError> {
        let policy = |key: MasterKey, rtcp_key: Option<MasterKey>| {
            let p = Policy::new(key).replay_window(window);
            match rtcp_key {
                Some(k) => p.rtcp_key(k),
                None => p,
            }
        };
        let (rtcp_ours, rtcp_theirs) = rtcp.unzip();
        Ok(Keyed {
            inbound: Context::new(policy(rtp.1, rtcp_theirs).any_inbound())?,
            outbound: Context::new(policy(rtp.0, rtcp_ours).any_outbound())?,
        })
    }
}

/// What a node taking a DTLS-SRTP telephony leg's call over needs besides its SRTP streams'
/// marks ([`super::RtpLeg::marks`], [`super::RtpLeg::resume_dtls`]): the keys its associations
/// made, which that node keeps (no new handshake: the phone's association goes on), and our
/// certificate's fingerprint (the node must have the same certificate). Debug does not print
/// the keys; they are zeroized when dropped.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DtlsMarks {
    /// Our fingerprint as our SDP wrote it.
    pub fingerprint: String,
    /// The SRTP profile the handshakes chose (its SDP name).
    pub profile: String,
    /// RTP's port's keys (SRTP's): ours, the peer's, in SDES `inline:` form.
    pub rtp: (String, String),
    /// RTCP's port's keys (SRTCP's), when RTCP had a port of its own.
    pub rtcp: Option<(String, String)>,
}

impl fmt::Debug for DtlsMarks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DtlsMarks")
            .field("fingerprint", &self.fingerprint)
            .field("profile", &self.profile)
            .field("rtcp", &self.rtcp.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for DtlsMarks {
    fn drop(&mut self) {
        for (a, b) in std::iter::once(&mut self.rtp).chain(self.rtcp.as_mut()) {
            a.zeroize();
            b.zeroize();
        }
    }
}

/// A leg's DTLS-SRTP keying. See the [module documentation](self).
pub(crate) struct DtlsKeying {
    config: RtpDtls,
    ours: Fingerprint,
    role: Option<Role>,
    peer_fingerprint: Option<Fingerprint>,
    rtp: Option<Component>,
    rtcp: Option<Component>,
    /// When a handshake with a peer began (our first flight, or a source admitted).
    started: Option<Instant>,
    pub(crate) keyed: Option<Keyed>,
    /// Records that came before the associations started (a peer that answered as the client
    /// sends its ClientHello as its answer leaves, and it can reach us first), handed to them
    /// when they start.
    early: Vec<(SocketAddr, Via, Vec<u8>)>,
    /// As the server: a source gets a handshake once it returns one of these cookies (RFC 6347
    /// §4.2.1), so no handshake is held for an address that cannot receive.
    cookies: CookieResponder,
    /// A leg made again for a call taken over whose keys come from the other node
    /// ([`DtlsKeying::resume`]): as the client it begins no handshake meanwhile, so the
    /// phone's association sees no ClientHello.
    resuming: bool,
}

/// The most records kept before the associations start (a flight or two per component).
const EARLY_MAX: usize = 8;

impl RtpDtls {
    /// An endpoint's configuration in `role`, verifying `peer`.
    fn endpoint(&self, role: Role, peer: &Fingerprint) -> EndpointConfig {
        let mut cfg = EndpointConfig::new(role, self.certificate.clone(), peer.clone());
        cfg.srtp_profiles = self.srtp_profiles.clone();
        cfg.timers = self.timers;
        cfg
    }
}

impl DtlsKeying {
    /// Keying with `config`, our role not yet known.
    pub(crate) fn new(config: RtpDtls) -> Result<DtlsKeying, String> {
        let leaf = config
            .certificate
            .leaf_der()
            .ok_or("our DTLS certificate has no leaf")?;
        let ours = Fingerprint::of(leaf, config.hash);
        let cookies =
            CookieResponder::random().map_err(|_| "no randomness for DTLS cookies".to_string())?;
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
            cookies,
            resuming: false,
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
            .ok_or_else(|| format!("no usable a=fingerprint among {:?}", sdp.fingerprints))?;
        if self.started.is_some() && self.peer_fingerprint.as_ref() != Some(&fp) {
            return Err("a new certificate fingerprint for a DTLS association under way".into());
        }
        self.peer_fingerprint = Some(fp);
        Ok(())
    }

    /// The phone's offer: our role from its `a=setup`, its fingerprint.
    pub(crate) fn take_offer(&mut self, sdp: &SectionDtls) -> Result<(), String> {
        let role = match sdp.setup {
            Some(Setup::Active) => Role::Server,
            Some(Setup::Passive) => Role::Client,
            Some(Setup::Holdconn) => return Err("a=setup:holdconn leaves no DTLS role".into()),
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
            Some(Setup::Holdconn) => return Err("a=setup:holdconn leaves no DTLS role".into()),
        };
        self.set_role(role)?;
        self.take_fingerprint(sdp)
    }

    fn set_role(&mut self, role: Role) -> Result<(), String> {
        match self.role {
            Some(r) if r != role && self.started.is_some() => {
                Err("the DTLS role of an association under way cannot change".into())
            }
            _ => {
                self.role = Some(role);
                Ok(())
            }
        }
    }

    /// Starts the associations (once role and fingerprint are known): RTP's on `ports.0`, and
    /// RTCP's on `ports.1` when RTCP has a port of its own. As the client, each component's one
    /// handshake begins now; as the server, one begins per source that returns our cookie.
    pub(crate) fn start(&mut self, now: Instant, ports: (Via, Option<Via>)) -> Result<(), String> {
        if self.rtp.is_some() {
            return Ok(());
        }
        let (Some(role), Some(fp)) = (self.role, self.peer_fingerprint.clone()) else {
            return Ok(());
        };
        let make = |via: Via| -> Result<Component, String> {
            let mut attempts = Vec::new();
            if role == Role::Client && !self.resuming {
                let endpoint = Endpoint::new(self.config.endpoint(role, &fp), now)
                    .map_err(|e| e.to_string())?;
                attempts.push(Attempt {
                    endpoint,
                    peer: None,
                    timeout: None,
                });
            }
            Ok(Component {
                via,
                attempts,
                keys: None,
            })
        };
        self.rtp = Some(make(ports.0)?);
        self.rtcp = ports.1.map(make).transpose()?;
        if role == Role::Client && !self.resuming {
            self.started = Some(now);
        }
        Ok(())
    }

    /// Marks the keying as one whose keys another node's association made and
    /// [`DtlsKeying::resume`] will give it: no handshake of ours begins before.
    pub(crate) fn expect_resume(&mut self) {
        self.resuming = true;
        if self.role == Some(Role::Client) {
            // A leg made from the phone's offer began as the client when it was made.
            for c in [&mut self.rtp, &mut self.rtcp].into_iter().flatten() {
                c.attempts.clear();
            }
            self.started = None;
        }
    }

    /// Whether `next` (made from the phone's new offer) describes this keying's association:
    /// the same role, the same certificate, so the association goes on.
    pub(crate) fn continued_by(&self, next: &DtlsKeying) -> bool {
        self.started.is_none()
            || (self.role == next.role && self.peer_fingerprint == next.peer_fingerprint)
    }

    /// The records that came before the associations started, once they have.
    pub(crate) fn take_early(&mut self) -> Vec<(SocketAddr, Via, Vec<u8>)> {
        match (&self.rtp, self.role) {
            (Some(_), Some(Role::Server)) => std::mem::take(&mut self.early),
            // As the client nothing the peer sent before our first flight is for us: ClientHellos
            // of a role it took before the answer settled them (rtpengine answering
            // `DTLS: passive` sends them as it takes our offer), which would derail our client.
            (Some(_), _) => {
                self.early.clear();
                Vec::new()
            }
            (None, _) => Vec::new(),
        }
    }

    /// Whether a handshake has begun (we sent the first flight, or a source was admitted).
    pub(crate) fn started(&self) -> bool {
        self.started.is_some()
    }

    /// A DTLS record from `from` on our port `via`, to the handshake with `from` there. A
    /// source without one: as the client, taken only from the signalled address (from the
    /// first source when none is signalled); as the server, a ClientHello is answered with a
    /// cookie, and one that returns it begins a handshake; anything else is dropped, counted.
    pub(crate) fn handle(
        &mut self,
        now: Instant,
        (from, via, datagram): (SocketAddr, Via, &[u8]),
        signalled: Signalled,
        counters: &mut Counters,
        out: &mut VecDeque<Transmit>,
    ) {
        let muxed = self.rtcp.is_none();
        let (comp, signalled) = match (&mut self.rtp, &mut self.rtcp) {
            (_, Some(c)) if c.via == via => (c, signalled.1),
            (Some(c), _) if c.via == via || muxed => (c, signalled.0),
            // Before our role is known (an offer of ours waits for its answer): kept.
            (None, _) if self.early.len() < EARLY_MAX => {
                return self.early.push((from, via, datagram.to_vec()));
            }
            _ => return counters.drop(DropReason::BeforeKeys),
        };
        let (Some(role), Some(fp)) = (self.role, &self.peer_fingerprint) else {
            return counters.drop(DropReason::BeforeKeys);
        };
        // A client takes no ClientHello: one from the peer is of a role it held before the
        // answer settled ours (rtpengine told `DTLS: passive` sends them as it takes our
        // offer, and they can arrive after the answer), and would derail our handshake.
        if role == Role::Client && inspect(datagram).is_ok_and(|r| r.client_hello) {
            return counters.drop(DropReason::UnknownKind);
        }
        if let Some(a) = comp.attempts.iter_mut().find(|a| a.peer == Some(from)) {
            return a.take(now, datagram, counters);
        }
        if role == Role::Client {
            let first = comp.attempts.first_mut().filter(|a| {
                a.peer.is_none() && signalled.is_none_or(|s| s == from) && comp.keys.is_none()
            });
            let Some(a) = first else {
                return counters.drop(DropReason::UnlatchedSource);
            };
            a.peer = Some(from);
            return a.take(now, datagram, counters);
        }
        if comp.keys.is_some() {
            return counters.drop(DropReason::UnlatchedSource);
        }
        match self.cookies.check(from, datagram) {
            CookieVerdict::HelloVerifyRequest(d) => {
                counters.dtls_in += 1;
                out.push_back((from, comp.via, d, TransmitKind::Dtls));
            }
            CookieVerdict::Admit(admission) => {
                self.started.get_or_insert(now);
                let config = self.config.endpoint(role, fp);
                comp.admit(config, now, from, &admission, counters);
            }
            _ => counters.drop(DropReason::UnlatchedSource),
        }
    }

    /// Every handshake, RTP's component's then RTCP's.
    fn attempts_mut(&mut self) -> impl Iterator<Item = &mut Attempt> {
        [&mut self.rtp, &mut self.rtcp]
            .into_iter()
            .flatten()
            .flat_map(|c| c.attempts.iter_mut())
    }

    /// Advances the handshakes' timers.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for a in self.attempts_mut() {
            if a.timeout.is_some_and(|t| t <= now) {
                a.timeout = None;
                a.endpoint.handle_timeout(now);
            }
        }
    }

    /// The earliest timer.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        [&self.rtp, &self.rtcp]
            .into_iter()
            .flatten()
            .flat_map(|c| c.attempts.iter())
            .filter_map(|a| a.timeout)
            .min()
    }

    /// What the handshakes have to say: their flights queued on `out` (to each one's peer,
    /// else to the `signalled` address: RTP's, RTCP's), and the leg's event once every
    /// component is keyed.
    pub(crate) fn drain(
        &mut self,
        now: Instant,
        signalled: Signalled,
        replay_window: usize,
        out: &mut VecDeque<Transmit>,
        counters: &mut Counters,
    ) -> Result<Option<LegEvent>, CloseReason> {
        let Some(role) = self.role else {
            return Ok(None);
        };
        let comps = [(&mut self.rtp, signalled.0), (&mut self.rtcp, signalled.1)];
        for (comp, signalled) in comps {
            if let Some(c) = comp.as_mut() {
                c.drain(role, signalled, out, counters)?;
            }
        }
        if self.keyed.is_some() {
            return Ok(None);
        }
        self.key(now, replay_window)
    }

    /// Its keys for a node taking the call over, once every component is keyed.
    pub(crate) fn marks(&self) -> Option<DtlsMarks> {
        self.keyed.as_ref()?;
        let inline = |c: &Component| {
            let (_, ours, theirs) = c.keys.as_ref()?;
            Some((ours.to_sdes_inline(), theirs.to_sdes_inline()))
        };
        let rtp = self.rtp.as_ref()?;
        let profile = rtp.keys.as_ref()?.0;
        let rtcp = match &self.rtcp {
            Some(c) => Some(inline(c)?),
            None => None,
        };
        Some(DtlsMarks {
            fingerprint: self.ours.to_string(),
            profile: profile.sdp_name().to_owned(),
            rtp: inline(rtp)?,
            rtcp,
        })
    }

    /// Takes the keys another node's leg had (this leg made again here from the same
    /// signaling, at `now`): its contexts without a handshake, every handshake under way
    /// ended. Err (and the keying unchanged): our certificate is not the one the phone knows,
    /// the leg's components are not those the marks were taken of, or the keys do not parse.
    pub(crate) fn resume(
        &mut self,
        now: Instant,
        m: &DtlsMarks,
        window: usize,
    ) -> Result<(), String> {
        if m.fingerprint != self.ours.to_string() {
            return Err("our certificate is not the one the phone's association knows".into());
        }
        let Some(rtp) = self.rtp.as_mut() else {
            return Err("no association here to resume (our role is not known)".into());
        };
        if m.rtcp.is_some() != self.rtcp.is_some() {
            return Err("RTCP's port is not as it was".into());
        }
        let profile: Profile = m.profile.parse().map_err(|e| format!("{e}"))?;
        let pair = |(ours, theirs): &(String, String)| -> Result<KeyPair, String> {
            let key = |k: &str| MasterKey::from_sdes_inline(profile, k).map_err(|e| e.to_string());
            Ok((key(ours)?, key(theirs)?))
        };
        let rtp_keys = pair(&m.rtp)?;
        let rtcp_keys = m.rtcp.as_ref().map(pair).transpose()?;
        let keyed =
            Keyed::new(rtp_keys.clone(), rtcp_keys.clone(), window).map_err(|e| e.to_string())?;
        for (c, keys) in [(Some(rtp), Some(rtp_keys))]
            .into_iter()
            .chain([(self.rtcp.as_mut(), rtcp_keys)])
        {
            if let (Some(c), Some((ours, theirs))) = (c, keys) {
                c.attempts.clear();
                c.keys = Some((profile, ours, theirs));
            }
        }
        self.keyed = Some(keyed);
        self.started.get_or_insert(now);
        Ok(())
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
        let keyed = Keyed::new((ours, theirs), rtcp, window)
            .map_err(|_| CloseReason::DtlsFailed(FailReason::Internal))?;
        self.keyed = Some(keyed);
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
        config_of(&cert, passive)
    }

    /// [`config`] with our certificate `cert`.
    fn config_of(cert: &Certificate, passive: bool) -> RtpConfig {
        RtpConfig {
            announce: LO,
            passthrough: true,
            dtls: Some(RtpDtls {
                certificate: LocalCertificate::from(cert),
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

    /// Carries each leg's datagrams to the other (`legs[i]` on `ports[i]`, sending from their
    /// addresses) until neither has any; the events each saw.
    fn run(legs: &mut [RtpLeg; 2], at: [Ports; 2], now: Instant) -> [Vec<LegEvent>; 2] {
        let [a, b] = legs;
        run_between([a, b], at, now)
    }

    /// [`run`] for two legs held elsewhere.
    fn run_between(legs: [&mut RtpLeg; 2], at: [Ports; 2], now: Instant) -> [Vec<LegEvent>; 2] {
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
                    let from = SocketAddr::new(at[i].rtp.ip(), p);
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

    /// Our offer (DTLS alone, RTCP muxed) on `at`, answered by a phone on `phone` that takes the
    /// client's role, so that we are the server; the phone's answer taken.
    fn served(at: Ports, phone: Ports, now: Instant) -> [RtpLeg; 2] {
        let spec = spec(Vec::new(), true);
        let mut us = RtpLeg::new_offer(&spec, at, config(false), now).unwrap();
        let answerer = RtpLeg::new(
            &parse_rtp(us.answer_sdp()).unwrap(),
            phone,
            config(false),
            now,
        );
        let answerer = answerer.unwrap();
        assert!(answerer.answer_sdp().contains("a=setup:active"));
        us.accept_answer(&parse_rtp(answerer.answer_sdp()).unwrap(), now)
            .unwrap();
        [us, answerer]
    }

    /// Someone on `at` who learnt our offer: a client with a certificate of its own.
    fn stranger(us: &RtpLeg, at: Ports, now: Instant) -> RtpLeg {
        RtpLeg::new(&parse_rtp(us.answer_sdp()).unwrap(), at, config(false), now).unwrap()
    }

    fn ports_at(ip: [u8; 4], base: u16) -> Ports {
        let ip = IpAddr::V4(Ipv4Addr::from(ip));
        Ports {
            rtp: SocketAddr::new(ip, base),
            rtcp: SocketAddr::new(ip, base + 1),
        }
    }

    /// The datagrams `leg` has to send now.
    fn sent(leg: &mut RtpLeg) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(o) = leg.poll_output() {
            match o {
                LegOutput::Transmit {
                    destination,
                    contents,
                    ..
                } => out.push((destination, contents.to_vec())),
                LegOutput::Event(_) => {}
                _ => break,
            }
        }
        out
    }

    fn connected(events: &[LegEvent]) -> bool {
        events
            .iter()
            .any(|e| matches!(e, LegEvent::Connected { .. }))
    }

    #[test]
    fn a_stranger_who_learnt_the_port_cannot_take_it_from_the_phone() {
        let now = Instant::now();
        let (at, phone_at) = (ports(30080), ports(30090));
        let [mut us, mut phone] = served(at, phone_at, now);
        let port = Via::Port(at.rtp.port());
        // A forged record that is no ClientHello, first: dropped, nothing kept or answered.
        let forged = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 8)), 5000);
        us.handle_dtls(
            now,
            forged,
            port,
            &[22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        );
        assert_eq!(us.counters().drops[DropReason::UnlatchedSource], 1);
        assert!(sent(&mut us).is_empty());

        // A stranger's whole handshake with a certificate of its own, before the phone's: it
        // ends alone, and the leg goes on.
        let stranger_at = ports_at([127, 0, 0, 7], 30100);
        let mut stranger = stranger(&us, stranger_at, now);
        let events = run_between([&mut us, &mut stranger], [at, stranger_at], now);
        assert!(!connected(&events[0]), "{:?}", events[0]);
        assert!(events[0].iter().all(|e| !matches!(e, LegEvent::Closed(_))));
        assert_eq!(us.counters().drops[DropReason::DtlsRejected], 1);
        assert!(us.inbound_context().is_none());

        // The phone's handshake keys the leg; the stranger is not taken after it.
        let events = run_between([&mut us, &mut phone], [at, phone_at], now);
        assert!(connected(&events[0]), "{:?}", events[0]);
        assert!(connected(&events[1]), "{:?}", events[1]);
        let again = RtpLeg::new(
            &parse_rtp(us.answer_sdp()).unwrap(),
            stranger_at,
            config(false),
            now,
        );
        let mut again = again.unwrap();
        let before = us.counters().drops[DropReason::UnlatchedSource];
        for (_, d) in sent(&mut again) {
            us.handle_dtls(now, stranger_at.rtp, port, &d);
        }
        assert_eq!(us.counters().drops[DropReason::UnlatchedSource], before + 1);
        assert!(sent(&mut us).is_empty());
    }

    #[test]
    fn a_forged_flood_of_client_hellos_holds_nothing_and_the_phone_connects() {
        let now = Instant::now();
        let (at, phone_at) = (ports(30110), ports(30120));
        let [mut us, mut phone] = served(at, phone_at, now);
        let port = Via::Port(at.rtp.port());
        let mut someone = stranger(&us, ports_at([127, 0, 0, 9], 30130), now);
        let hello = sent(&mut someone).pop().unwrap().1;
        // 500 forged sources (more than the handshakes a port runs at once): each is answered
        // with a cookie to where it claims to be, and nothing is kept for any.
        for i in 0..500u16 {
            let ip = Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8);
            let from = SocketAddr::new(IpAddr::V4(ip), 40000 + i);
            us.handle_dtls(now, from, port, &hello);
            let answer = sent(&mut us);
            assert_eq!(answer.len(), 1, "one cookie for {from}");
            assert_eq!(answer[0].0, from);
            assert!(answer[0].1.len() < hello.len(), "no amplification");
        }
        assert_eq!(us.counters().drops[DropReason::HandshakeLimit], 0);
        let events = run_between([&mut us, &mut phone], [at, phone_at], now);
        assert!(connected(&events[0]), "{:?}", events[0]);
    }

    #[test]
    fn a_port_runs_a_bounded_number_of_handshakes_one_per_address() {
        let now = Instant::now();
        let (at, phone_at) = (ports(30140), ports(30150));
        let [mut us, _phone] = served(at, phone_at, now);
        let port = Via::Port(at.rtp.port());
        // A stranger's ClientHello, our cookie, its ClientHello with the cookie: admitted, and
        // left there (our flight never reaches it).
        let admit = |us: &mut RtpLeg, from: Ports| {
            let mut s = stranger(us, from, now);
            for _ in 0..2 {
                for (_, d) in sent(&mut s) {
                    us.handle_dtls(now, from.rtp, port, &d);
                }
                for (to, d) in sent(us) {
                    assert_eq!(to, from.rtp);
                    s.handle_dtls(now, at.rtp, Via::Port(from.rtp.port()), &d);
                }
            }
        };
        for i in 0..MAX_ATTEMPTS as u8 {
            admit(&mut us, ports_at([127, 0, 1, i], 30160));
        }
        assert_eq!(us.counters().drops[DropReason::HandshakeLimit], 0);
        admit(&mut us, ports_at([127, 0, 2, 0], 30160));
        assert_eq!(us.counters().drops[DropReason::HandshakeLimit], 1);
        // A new handshake from an address already under way takes that one's place.
        admit(&mut us, ports_at([127, 0, 1, 0], 30170));
        assert_eq!(us.counters().drops[DropReason::HandshakeLimit], 1);
    }

    #[test]
    fn as_the_client_records_come_from_the_signalled_address_alone() {
        let now = Instant::now();
        let spec = spec(Vec::new(), true);
        let (phone_at, at) = (ports(30180), ports(30190));
        let phone = RtpLeg::new_offer(&spec, phone_at, config(false), now).unwrap();
        // We answer the phone's actpass as the client: our first flight goes to its address.
        let us = RtpLeg::new(
            &parse_rtp(phone.answer_sdp()).unwrap(),
            at,
            config(false),
            now,
        );
        let mut us = us.unwrap();
        assert!(us.answer_sdp().contains("a=setup:active"));
        let hello = sent(&mut us);
        assert!(hello.iter().all(|(to, _)| *to == phone_at.rtp), "{hello:?}");
        // Anything from another source is dropped, answered by nothing.
        let stranger = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7)), 30200);
        let record = [22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2];
        us.handle_dtls(now, stranger, Via::Port(at.rtp.port()), &record);
        assert_eq!(us.counters().drops[DropReason::UnlatchedSource], 1);
        assert!(sent(&mut us).is_empty());
        // A ClientHello, even from the phone's address (of a role it held before), is not for
        // a client: dropped, and our handshake goes on.
        us.handle_dtls(now, phone_at.rtp, Via::Port(at.rtp.port()), &hello[0].1);
        assert_eq!(us.counters().drops[DropReason::UnknownKind], 1);
        assert!(sent(&mut us).is_empty());
        let mut legs = [phone, us];
        legs[0]
            .accept_answer(&parse_rtp(legs[1].answer_sdp()).unwrap(), now)
            .unwrap();
        for (_, d) in hello {
            legs[0].handle_dtls(now, at.rtp, Via::Port(phone_at.rtp.port()), &d);
        }
        let events = run(&mut legs, [phone_at, at], now);
        assert!(connected(&events[1]), "{:?}", events[1]);
    }

    /// A packet of ours: PCMU, sequence number `seq`.
    fn pcmu_packet(seq: u16) -> Vec<u8> {
        let mut p = vec![
            0x80,
            0,
            (seq >> 8) as u8,
            seq as u8,
            0,
            0,
            0,
            160,
            0,
            0,
            0,
            7,
        ];
        p.extend([0x55; 160]);
        p
    }

    /// `from` protects a packet (or a report, `rtcp`) that `to` unprotects.
    fn crosses(from: &mut RtpLeg, to: &mut RtpLeg, seq: u16, rtcp: bool) -> bool {
        let plain = match rtcp {
            false => pcmu_packet(seq),
            true => vec![0x80, 201, 0, 1, 0, 0, 0, 7],
        };
        let mut buf = plain.clone();
        buf.resize(plain.len() + 64, 0);
        let ctx = from.outbound_context().unwrap();
        let n = match rtcp {
            false => ctx.protect_rtp(&mut buf, plain.len()).unwrap(),
            true => ctx.protect_rtcp(&mut buf, plain.len()).unwrap(),
        };
        let ctx = to.inbound_context().unwrap();
        let got = match rtcp {
            false => ctx.unprotect_rtp(&mut buf, n),
            true => ctx.unprotect_rtcp(&mut buf, n),
        };
        got.is_ok_and(|m| buf[..m] == plain[..])
    }

    #[test]
    fn a_node_taking_the_call_over_keeps_the_phones_association() {
        // We the server (the phone answers as the client), then we the client.
        for phone_passive in [false, true] {
            taken_over_with(phone_passive);
        }
    }

    fn taken_over_with(phone_passive: bool) {
        let now = Instant::now();
        let spec = spec(Vec::new(), false);
        let (at, phone_at) = (ports(30210), ports(30220));
        let ours = Certificate::self_signed(KeyType::EcdsaP256, "node").unwrap();
        let offer =
            |cert: &Certificate| RtpLeg::new_offer(&spec, at, config_of(cert, false), now).unwrap();
        let mut us = offer(&ours);
        let offered = parse_rtp(us.answer_sdp()).unwrap();
        let phone = RtpLeg::new(&offered, phone_at, config(phone_passive), now).unwrap();
        let answer = parse_rtp(phone.answer_sdp()).unwrap();
        us.accept_answer(&answer, now).unwrap();
        let role = if phone_passive { "passive" } else { "active" };
        assert!(phone.answer_sdp().contains(&format!("a=setup:{role}")));
        assert!(us.marks().dtls.is_none(), "nothing to keep before the keys");
        let [mut us, mut phone] = {
            let mut legs = [us, phone];
            let events = run(&mut legs, [at, phone_at], now);
            assert!(connected(&events[0]), "{:?}", events[0]);
            legs
        };
        for seq in 1..=3 {
            assert!(crosses(&mut phone, &mut us, seq, false));
            assert!(crosses(&mut us, &mut phone, seq, false));
        }
        assert!(crosses(&mut us, &mut phone, 0, true) && crosses(&mut phone, &mut us, 0, true));
        let marks = us.marks();
        let dtls = marks.dtls.clone().expect("the keys, once connected");
        assert!(dtls.rtcp.is_some(), "RTCP's port's keys too");
        assert!(
            !format!("{dtls:?}").contains(&dtls.rtp.0),
            "no key in Debug"
        );
        assert!(!marks.srtp.is_empty());

        // The node dies; another with the same certificate makes the leg again from the same
        // offer and answer (told the keys will come: as the client it sends no ClientHello),
        // and takes the keys: no handshake, the phone's streams go on.
        let again = |cert: &Certificate| {
            let kept = crate::leg::Resume {
                srtp: marks.srtp.clone(),
                dtls: Some(dtls.clone()),
                ..Default::default()
            };
            let options = crate::leg::RtpLegOptions {
                resume: Some(kept),
                ..Default::default()
            };
            let mut leg = options.finish(offer(cert)).unwrap();
            leg.accept_answer(&answer, now).unwrap();
            assert!(sent(&mut leg).is_empty(), "no flight of a new handshake");
            leg
        };
        let mut standby = again(&ours);
        standby.resume_dtls(now, &dtls).unwrap();
        standby.resume_srtp(&marks.srtp).unwrap();
        assert!(
            sent(&mut standby).is_empty(),
            "no flight of a new handshake"
        );
        for seq in 4..=6 {
            assert!(crosses(&mut phone, &mut standby, seq, false), "{seq}");
            assert!(crosses(&mut standby, &mut phone, seq, false), "{seq}");
        }
        assert!(crosses(&mut phone, &mut standby, 0, true), "SRTCP in");
        assert!(crosses(&mut standby, &mut phone, 0, true), "SRTCP out");

        // A node with another certificate cannot: the phone's association knows ours.
        let other = Certificate::self_signed(KeyType::EcdsaP256, "other").unwrap();
        let mut elsewhere = again(&other);
        let refused = elsewhere.resume_dtls(now, &dtls);
        assert_eq!(refused, Err(crate::leg::RtpLegError::OtherCertificate));
        assert!(elsewhere.inbound_context().is_none());
    }
}
