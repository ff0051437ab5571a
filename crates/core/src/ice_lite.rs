//! ICE-lite (RFC 8445 §2.5) for one participant, sans-IO.
//!
//! A lite agent has host candidates only, never sends checks, and is always controlled: it
//! answers the full agent's Binding requests (short-term credentials: USERNAME
//! `our-ufrag:their-ufrag`, MESSAGE-INTEGRITY keyed with our password, FINGERPRINT), and the
//! controlling agent picks the pair with USE-CANDIDATE. Consent (RFC 7675) is the stream of
//! those requests: when none has authenticated for [`IceConfig::consent_timeout`] the
//! participant is gone. ICE restart swaps in new credentials.
//!
//! When we made the offer ([`IceLite::offering`]), the peer's credentials come with its answer
//! ([`IceLite::set_remote`]); its checks can arrive before that (it sends them as soon as it
//! has our offer), and they are answered: a request is authenticated with *our* password, and
//! the USERNAME's second half is taken as it comes until the answer names it. Until then,
//! consent waits [`IceConfig::answer_timeout`] (a callee's phone may ring) instead of
//! [`IceConfig::consent_timeout`].
//!
//! Drive contract: call [`IceLite::handle_binding`] with every STUN message addressed to this
//! participant, parsed once where the datagram was read (the gateway finds the participant by
//! the USERNAME's first half; [`IceLite::handle_stun`] parses a datagram first, for callers
//! that have not), send what it writes, and call [`IceLite::handle_timeout`] at
//! [`IceLite::poll_timeout`].

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_wire::stun::{attr, Class, Message, MessageBuilder, StunError, BINDING};

/// Timers and limits.
#[derive(Debug, Clone)]
pub struct IceConfig {
    /// No authenticated check for this long ends the session (RFC 7675: 30 s).
    pub consent_timeout: Duration,
    /// Remote addresses remembered per participant (a browser tries a few pairs).
    pub max_remote_candidates: usize,
    /// How long an offer of ours waits for the answer (and its checks) before the session
    /// ends: a SIP callee answers when its user picks up.
    pub answer_timeout: Duration,
}

impl Default for IceConfig {
    fn default() -> IceConfig {
        IceConfig {
            consent_timeout: Duration::from_secs(30),
            max_remote_candidates: 16,
            answer_timeout: Duration::from_secs(180),
        }
    }
}

/// ICE credentials (ufrag, password). Debug does not print the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Username fragment.
    pub ufrag: String,
    /// Password.
    pub pwd: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("ufrag", &self.ufrag)
            .field("pwd", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Fresh random credentials: a 8-character ufrag and a 24-character password from the
    /// ice-char set (RFC 8839: at least 24 bits and 128 bits of randomness).
    pub fn random() -> Credentials {
        const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random source works");
        let pick = |b: &[u8]| {
            b.iter()
                .map(|x| CHARS[(*x & 63) as usize] as char)
                .collect::<String>()
        };
        Credentials {
            ufrag: pick(&bytes[..8]),
            pwd: pick(&bytes[8..32]),
        }
    }
}

/// What the agent reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IceEvent {
    /// The controlling agent nominated this remote address (USE-CANDIDATE): media goes there.
    Selected(SocketAddr),
    /// No authenticated check within the consent timeout: the participant is gone.
    ConsentExpired,
}

/// Why a STUN datagram got no success response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IceError {
    /// Not a Binding request (responses and indications are not for a lite agent).
    NotBindingRequest,
    /// STUN framing or FINGERPRINT wrong.
    Stun(StunError),
    /// No FINGERPRINT (ICE requires it).
    NoFingerprint,
    /// USERNAME missing or not `our-ufrag:their-ufrag`.
    WrongUsername,
    /// MESSAGE-INTEGRITY missing or wrong: an error response (401) was written if `Some`.
    Unauthenticated(Option<usize>),
    /// The peer claims the controlled role too: a 487 response was written.
    RoleConflict(usize),
    /// Consent already expired: the session is over.
    Expired,
    /// No room for the response in the output buffer.
    BufferTooSmall,
}

impl fmt::Display for IceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IceError::NotBindingRequest => write!(f, "STUN message is not a Binding request"),
            IceError::Stun(e) => write!(f, "{e}"),
            IceError::NoFingerprint => write!(f, "STUN Binding request without FINGERPRINT"),
            IceError::WrongUsername => write!(f, "STUN USERNAME does not match this session"),
            IceError::Unauthenticated(_) => write!(f, "STUN MESSAGE-INTEGRITY missing or wrong"),
            IceError::RoleConflict(_) => write!(f, "ICE role conflict: peer is controlled too"),
            IceError::Expired => write!(f, "ICE consent expired"),
            IceError::BufferTooSmall => write!(f, "no room for the STUN response"),
        }
    }
}

impl std::error::Error for IceError {}

/// A successful check: the response to send back to `from`, and whether it selected a pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    /// Bytes of the response written at the start of the output buffer.
    pub response_len: usize,
    /// `Some` when this check nominated a new remote address.
    pub event: Option<IceEvent>,
}

/// The ICE-lite agent of one participant.
#[derive(Debug)]
pub struct IceLite {
    config: IceConfig,
    local: Credentials,
    /// The peer's, once its offer or answer named them.
    remote: Option<Credentials>,
    /// Remote addresses that passed a check, with when they last did.
    remotes: Vec<(SocketAddr, Instant)>,
    selected: Option<SocketAddr>,
    /// `selected` while it is in `remotes`: what every copy of media reads, kept in one field
    /// (refreshed wherever either changes) instead of a scan of `remotes` per copy.
    usable: Option<SocketAddr>,
    last_consent: Instant,
    expired: bool,
}

impl IceLite {
    /// A new agent with our credentials and the remote ones from the offer, created at `now`
    /// (the consent clock starts: the first check must arrive within the timeout).
    pub fn new(
        config: IceConfig,
        local: Credentials,
        remote: Credentials,
        now: Instant,
    ) -> IceLite {
        IceLite {
            config,
            local,
            remote: Some(remote),
            remotes: Vec::new(),
            selected: None,
            usable: None,
            last_consent: now,
            expired: false,
        }
    }

    /// A new agent for an offer of ours: the remote credentials come with the answer
    /// ([`IceLite::set_remote`]); created at `now` (the answer clock starts).
    pub fn offering(config: IceConfig, local: Credentials, now: Instant) -> IceLite {
        IceLite {
            config,
            local,
            remote: None,
            remotes: Vec::new(),
            selected: None,
            usable: None,
            last_consent: now,
            expired: false,
        }
    }

    /// The peer's credentials, from its answer to our offer, at `now`: checks must carry its
    /// ufrag from now on, and the consent clock runs on [`IceConfig::consent_timeout`].
    pub fn set_remote(&mut self, remote: Credentials, now: Instant) {
        self.remote = Some(remote);
        self.last_consent = self.last_consent.max(now);
    }

    /// The peer's credentials, once known.
    pub fn remote(&self) -> Option<&Credentials> {
        self.remote.as_ref()
    }

    /// Whether the peer's credentials are known (not an offer of ours still unanswered).
    pub fn has_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Our credentials (for the answer).
    pub fn local(&self) -> &Credentials {
        &self.local
    }

    /// The nominated remote address.
    pub fn selected(&self) -> Option<SocketAddr> {
        self.selected
    }

    /// The nominated remote address while it is validated (it passed a check and was not
    /// given up since): where media goes.
    pub fn usable(&self) -> Option<SocketAddr> {
        self.usable
    }

    /// Asks the CPU to start loading what [`IceLite::usable`] reads.
    pub fn prefetch_usable(&self) {
        secrelay_srtp::simd::prefetch::value(&self.usable, 1);
    }

    fn refresh_usable(&mut self) {
        // From `remotes` alone: `usable` is what is being refreshed.
        self.usable = self.selected.filter(|&s| self.in_remotes(s));
    }

    /// Whether `addr` is among the addresses that passed a check (a scan).
    fn in_remotes(&self, addr: SocketAddr) -> bool {
        self.remotes.iter().any(|(a, _)| *a == addr)
    }

    /// Whether `from` passed a check (media from elsewhere is not this participant's). Media
    /// comes from the selected address, read here first (inline, where a scan of `remotes`
    /// would load their allocation for every packet).
    pub fn is_validated(&self, from: SocketAddr) -> bool {
        self.usable == Some(from) || self.in_remotes(from)
    }

    /// Forgets that `addr` passed a check (another session on the same port validated it
    /// since: one remote address belongs to one session). The selected pair stays selected,
    /// unused until a check of this session's validates the address again.
    pub fn forget(&mut self, addr: SocketAddr) {
        self.remotes.retain(|(a, _)| *a != addr);
        self.refresh_usable();
    }

    /// ICE restart: new credentials on both sides; the selected pair stays until a check with
    /// the new credentials nominates one (RFC 8445 §9).
    pub fn restart(&mut self, local: Credentials, remote: Credentials, now: Instant) {
        self.local = local;
        self.remote = Some(remote);
        self.last_consent = now;
    }

    /// Handles one STUN datagram from `from`; on success writes the Binding success response
    /// into `out`.
    pub fn handle_stun(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Result<CheckOutcome, IceError> {
        if self.expired {
            return Err(IceError::Expired);
        }
        let msg = Message::parse(datagram).map_err(IceError::Stun)?;
        self.handle_binding(now, from, &msg, out)
    }

    /// Handles one parsed STUN message from `from`; on success writes the Binding success
    /// response into `out`.
    pub fn handle_binding(
        &mut self,
        now: Instant,
        from: SocketAddr,
        msg: &Message<'_>,
        out: &mut [u8],
    ) -> Result<CheckOutcome, IceError> {
        if self.expired {
            return Err(IceError::Expired);
        }
        if msg.class() != Class::Request || msg.method() != BINDING {
            return Err(IceError::NotBindingRequest);
        }
        if !msg.has_fingerprint() {
            return Err(IceError::NoFingerprint);
        }
        let ours = self.local.ufrag.len();
        let username_ok = msg.username().is_some_and(|u| {
            u.len() > ours + 1
                && u.starts_with(self.local.ufrag.as_bytes())
                && u[ours] == b':'
                && match &self.remote {
                    Some(r) => {
                        u.len() == ours + 1 + r.ufrag.len() && u.ends_with(r.ufrag.as_bytes())
                    }
                    // Before the answer: any ufrag of theirs (the request authenticates with
                    // our password, which only our offer's reader has).
                    None => true,
                }
        });
        if !username_ok {
            return Err(IceError::WrongUsername);
        }
        if msg.check_integrity(self.local.pwd.as_bytes()).is_err() {
            // RFC 8489 §9.1.3: 401 without MESSAGE-INTEGRITY when the request's was wrong.
            let n = MessageBuilder::new(out, Class::Error, BINDING, msg.transaction_id())
                .error_code(401, "Unauthenticated")
                .fingerprint()
                .ok();
            return Err(IceError::Unauthenticated(n));
        }
        if msg.ice_controlled().is_some() {
            // We are lite, hence controlled; a controlled peer is in conflict (RFC 8445 §7.3.1.1).
            let n = MessageBuilder::new(out, Class::Error, BINDING, msg.transaction_id())
                .error_code(487, "Role Conflict")
                .integrity(self.local.pwd.as_bytes())
                .fingerprint()
                .map_err(|_| IceError::BufferTooSmall)?;
            return Err(IceError::RoleConflict(n));
        }
        let response_len = MessageBuilder::new(out, Class::Success, BINDING, msg.transaction_id())
            .xor_mapped_address(from)
            .integrity(self.local.pwd.as_bytes())
            .fingerprint()
            .map_err(|_| IceError::BufferTooSmall)?;
        self.last_consent = now;
        match self.remotes.iter_mut().find(|(a, _)| *a == from) {
            Some(r) => r.1 = now,
            None => {
                if self.remotes.len() >= self.config.max_remote_candidates {
                    // Forget the longest-silent address that is not the selected one.
                    if let Some(i) = self
                        .remotes
                        .iter()
                        .enumerate()
                        .filter(|(_, (a, _))| Some(*a) != self.selected)
                        .min_by_key(|(_, (_, t))| *t)
                        .map(|(i, _)| i)
                    {
                        self.remotes.swap_remove(i);
                    }
                }
                self.remotes.push((from, now));
            }
        }
        let event = if msg.get(attr::USE_CANDIDATE).is_some() && self.selected != Some(from) {
            self.selected = Some(from);
            Some(IceEvent::Selected(from))
        } else {
            None
        };
        self.refresh_usable();
        Ok(CheckOutcome {
            response_len,
            event,
        })
    }

    /// How long consent lasts without a check: until the answer, the answer timeout.
    fn consent_window(&self) -> Duration {
        if self.remote.is_some() {
            self.config.consent_timeout
        } else {
            self.config.answer_timeout
        }
    }

    /// When [`IceLite::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.expired).then(|| self.last_consent + self.consent_window())
    }

    /// Advances time: reports [`IceEvent::ConsentExpired`] once when consent has lapsed.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<IceEvent> {
        if !self.expired && now >= self.last_consent + self.consent_window() {
            self.expired = true;
            self.selected = None;
            self.usable = None;
            return Some(IceEvent::ConsentExpired);
        }
        None
    }
}
