//! SRTP/SRTCP contexts: streams per SSRC, protect and unprotect.

use std::sync::{Arc, OnceLock};

use zeroize::Zeroizing;

use crate::error::{ConfigError, Error};
use crate::f8::{self, F8};
use crate::index::IndexState;
use crate::kdf::derive_session;
use crate::keys::MasterKey;
use crate::profile::{CipherKind, Profile};
use crate::provider::{self, tags_equal, AesCtr, AesGcm, CryptoProvider, HmacSha1, HmacSha1State};
use crate::replay::{ReplayError, ReplayWindow, DEFAULT_WINDOW};
use crate::simd::aes_ctr::AesKey;
use crate::simd::gcm::GcmKey;

/// Which way a stream's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Packets we receive and unprotect.
    Inbound,
    /// Packets we send and protect.
    Outbound,
}

/// Default cap on streams per context.
pub const DEFAULT_MAX_STREAMS: usize = 1024;

/// How to build a [`Context`].
#[derive(Clone, Debug)]
pub struct Policy {
    key: MasterKey,
    rtcp_key: Option<MasterKey>,
    template: Option<Direction>,
    window: usize,
    allow_repeat_tx: bool,
    max_streams: usize,
    provider: &'static dyn CryptoProvider,
}

impl Policy {
    /// A policy for `key` with no template (streams must be added), a 1024-packet replay
    /// window, at most 1024 streams, and the default provider.
    pub fn new(key: MasterKey) -> Self {
        Policy {
            key,
            rtcp_key: None,
            template: None,
            window: DEFAULT_WINDOW,
            allow_repeat_tx: false,
            max_streams: DEFAULT_MAX_STREAMS,
            provider: provider::default(),
        }
    }

    /// Streams for unknown SSRCs are made on their first packet, as inbound ("any inbound").
    pub fn any_inbound(mut self) -> Self {
        self.template = Some(Direction::Inbound);
        self
    }

    /// Streams for unknown SSRCs are made on their first packet, as outbound ("any outbound").
    pub fn any_outbound(mut self) -> Self {
        self.template = Some(Direction::Outbound);
        self
    }

    /// The replay window in packets (64..=32768), used for SRTP and SRTCP.
    pub fn replay_window(mut self, packets: usize) -> Self {
        self.window = packets;
        self
    }

    /// Lets a sender protect a packet index again (retransmissions of the same packet).
    pub fn allow_repeat_tx(mut self, allow: bool) -> Self {
        self.allow_repeat_tx = allow;
        self
    }

    /// The most streams (SSRCs) this context holds.
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// The crypto provider.
    pub fn provider(mut self, provider: &'static dyn CryptoProvider) -> Self {
        self.provider = provider;
        self
    }

    /// SRTCP's session keys derived from `key` instead of the policy's master key: DTLS-SRTP
    /// with RTCP on a port of its own keys each component in its own handshake (RFC 5764
    /// §4.1.2). `key` must be of the policy's profile ([`Context::new`] refuses it otherwise).
    pub fn rtcp_key(mut self, key: MasterKey) -> Self {
        self.rtcp_key = Some(key);
        self
    }

    /// The profile of the policy's key.
    pub fn profile(&self) -> Profile {
        self.key.profile()
    }
}

enum Cipher {
    Null,
    Ctr(Box<dyn AesCtr>),
    F8(Box<F8>),
    Gcm(Box<dyn AesGcm>),
}

impl Cipher {
    /// Encrypts or decrypts (both are the same XOR) the payload `buf[hdr..end]` of the SRTP
    /// packet `span` in counter or f8 mode; nothing for NULL (GCM seals and opens elsewhere).
    #[inline]
    fn apply_rtp(&self, salt: &[u8; 14], span: &RtpSpan, buf: &mut [u8], end: usize) {
        match self {
            Cipher::Ctr(c) => {
                c.apply_keystream(&cm_iv(salt, span.ssrc, span.index), &mut buf[span.hdr..end]);
            }
            Cipher::F8(f) => {
                let iv = f8::rtp_iv(&buf[..12], span.roc());
                f.apply(&iv, &mut buf[span.hdr..end]);
            }
            Cipher::Gcm(_) | Cipher::Null => {}
        }
    }

    /// The same for the SRTCP packet `span`: `buf[8..end]`.
    #[inline]
    fn apply_rtcp(&self, salt: &[u8; 14], span: &RtcpSpan, buf: &mut [u8], end: usize) {
        match self {
            Cipher::Ctr(c) => {
                let iv = cm_iv(salt, span.ssrc, u64::from(span.index()));
                c.apply_keystream(&iv, &mut buf[8..end]);
            }
            Cipher::F8(f) => {
                let iv = f8::rtcp_iv(&buf[..8], span.trailer);
                f.apply(&iv, &mut buf[8..end]);
            }
            Cipher::Gcm(_) | Cipher::Null => {}
        }
    }
}

/// Keyed primitives and salt for RTP or RTCP.
struct DirKeys {
    cipher: Cipher,
    auth: Option<Box<dyn HmacSha1>>,
    /// The session keys again: what the multi-buffer engines' forms of them are made from
    /// (RTP), and what offload engines copy to their device (RTP and SRTCP). Kept by every key
    /// set, a few dozen bytes in two small allocations made once.
    raw: RawKeys,
    /// Those forms, made the first time a multi-buffer engine asks (a context only ever used
    /// one packet at a time never pays their ~0.6–1.2 KiB). Boxed, so that the keys a packet
    /// reads stay a few cache lines apart whether or not these were made.
    lanes: OnceLock<Option<LaneKeys>>,
    salt: Zeroizing<[u8; 14]>,
}

/// The raw session keys the multi-buffer forms are made from; wiped on drop.
struct RawKeys {
    profile: Profile,
    enc: Zeroizing<Vec<u8>>,
    auth: Zeroizing<Vec<u8>>,
}

/// The keys in the forms the multi-buffer kernels take (the provider's primitives are opaque);
/// each wipes itself on drop.
enum LaneKeys {
    /// HMAC-SHA1 profiles.
    Hmac(Box<HmacLaneKeys>),
    /// AEAD profiles: the AES-GCM key (schedule, GHASH key powers) for the AEAD kernel.
    Gcm(Box<GcmKey>),
}

/// The keyed HMAC-SHA1 states, and the AES-CM key expanded for the keystream kernel (none for
/// NULL). `repr(C)`, the round keys first: see [`DirKeys::prefetch_lanes`].
#[repr(C)]
struct HmacLaneKeys {
    ctr: Option<AesKey>,
    auth: HmacSha1State,
}

impl LaneKeys {
    /// `None` if a kernel refuses the key (lengths were checked by the provider already), or
    /// if the profile has neither an AEAD cipher nor an HMAC-SHA1 tag.
    fn new(src: &RawKeys) -> Option<LaneKeys> {
        Some(match src.profile.cipher() {
            CipherKind::AesGcm => LaneKeys::Gcm(Box::new(GcmKey::new(&src.enc).ok()?)),
            // The keystream kernel is counter mode: f8's chained blocks stay on the scalar path.
            CipherKind::AesF8 => return None,
            cipher if src.profile.auth_key_len() > 0 => LaneKeys::Hmac(Box::new(HmacLaneKeys {
                auth: HmacSha1State::new(&src.auth),
                ctr: match cipher {
                    CipherKind::AesCm => Some(AesKey::new(&src.enc).ok()?),
                    _ => None,
                },
            })),
            _ => return None,
        })
    }
}

impl DirKeys {
    /// Starts loading the multi-buffer forms of the keys, if they were made (a hint): the
    /// lines the kernels read for a packet of `len` bytes, found from the boxes' addresses
    /// without reading them.
    #[inline]
    fn prefetch_lanes(&self, len: usize) {
        use crate::simd::prefetch;
        match self.lanes.get() {
            Some(Some(LaneKeys::Hmac(h))) => {
                prefetch::prefetch_bytes((&raw const **h).cast(), AesKey::HOT_BYTES, 5);
                prefetch::line((&raw const h.auth).cast());
            }
            Some(Some(LaneKeys::Gcm(g))) => g.prefetch(len),
            _ => {}
        }
    }

    /// Starts loading the provider's keyed primitives, which the scalar path uses (a hint).
    #[inline]
    fn prefetch_scalar(&self) {
        use crate::simd::prefetch;
        let boxed = |p: *const u8, len: usize| prefetch::prefetch_bytes(p, len, 8);
        match &self.cipher {
            Cipher::Ctr(c) => boxed((&raw const **c).cast(), core::mem::size_of_val(&**c)),
            Cipher::Gcm(g) => boxed((&raw const **g).cast(), core::mem::size_of_val(&**g)),
            Cipher::F8(_) | Cipher::Null => {}
        }
        if let Some(a) = &self.auth {
            boxed((&raw const **a).cast(), core::mem::size_of_val(&**a));
        }
    }

    /// The session keys in raw form: encryption key, authentication key, salt.
    fn raw_keys(&self) -> (&[u8], &[u8], &[u8; 14]) {
        (&self.raw.enc, &self.raw.auth, &self.salt)
    }

    /// The multi-buffer forms of the keys, made on first use.
    fn lanes(&self) -> Option<&LaneKeys> {
        self.lanes.get_or_init(|| LaneKeys::new(&self.raw)).as_ref()
    }
}

/// The bytes from the start of [`Keys`] the RTP packet path reads: its RTP keys (`Keys` is
/// `repr(C)`).
const RTP_KEYS_BYTES: usize = core::mem::size_of::<DirKeys>();

/// Session keys derived from one master key.
#[repr(C)]
pub(crate) struct Keys {
    rtp: DirKeys,
    rtcp: DirKeys,
    profile: Profile,
    /// Unique for the process's life: names this key set to engines that keep keys elsewhere
    /// (a GPU's key slots, [`crate::offload`]); an address could be reused after a drop.
    id: u64,
}

/// The next [`Keys::id`]: even numbers, so that a key set's SRTCP keys can be named `id + 1`.
fn next_key_set_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(2);
    NEXT.fetch_add(2, Ordering::Relaxed)
}

impl DirKeys {
    fn new(
        provider: &dyn CryptoProvider,
        profile: Profile,
        enc: &[u8],
        auth: &[u8],
        salt: &[u8],
    ) -> Result<Self, ConfigError> {
        let pe = |e: provider::KeyError| ConfigError::Provider(e.0);
        let cipher = match profile.cipher() {
            CipherKind::Null => Cipher::Null,
            CipherKind::AesCm => Cipher::Ctr(provider.aes_ctr(enc).map_err(pe)?),
            CipherKind::AesF8 => Cipher::F8(Box::new(F8::new(provider, enc, salt).map_err(pe)?)),
            CipherKind::AesGcm => Cipher::Gcm(provider.aes_gcm(enc).map_err(pe)?),
        };
        let raw = RawKeys {
            profile,
            enc: Zeroizing::new(enc.to_vec()),
            auth: Zeroizing::new(auth.to_vec()),
        };
        let auth = if profile.auth_key_len() == 0 {
            None
        } else {
            Some(provider.hmac_sha1(auth).map_err(pe)?)
        };
        if salt.len() != profile.salt_len() {
            return Err(ConfigError::SaltLength {
                profile,
                expected: profile.salt_len(),
                got: salt.len(),
            });
        }
        let mut s = Zeroizing::new([0u8; 14]);
        s[..salt.len()].copy_from_slice(salt);
        Ok(DirKeys {
            cipher,
            auth,
            raw,
            lanes: OnceLock::new(),
            salt: s,
        })
    }
}

impl Keys {
    /// The key set's process-unique name ([`Keys::id`]).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The RTP session keys in raw form (encryption key, authentication key, salt), for the
    /// offload engines.
    pub(crate) fn rtp_raw(&self) -> (&[u8], &[u8], &[u8; 14]) {
        self.rtp.raw_keys()
    }

    /// The SRTCP session keys in raw form, for the offload engines.
    pub(crate) fn rtcp_raw(&self) -> (&[u8], &[u8], &[u8; 14]) {
        self.rtcp.raw_keys()
    }

    /// The session keys of master key `key`, SRTCP's of `rtcp_key` where given.
    fn derive(
        provider: &dyn CryptoProvider,
        key: &MasterKey,
        rtcp_key: Option<&MasterKey>,
    ) -> Result<Self, ConfigError> {
        let p = key.profile();
        let mk = |key: &MasterKey, rtcp: bool| -> Result<DirKeys, ConfigError> {
            let s = derive_session(provider, key, rtcp)?;
            DirKeys::new(provider, p, &s.enc, &s.auth, &s.salt)
        };
        let rtcp_key = rtcp_key.unwrap_or(key);
        if rtcp_key.profile() != p {
            return Err(ConfigError::ProfileMismatch);
        }
        Ok(Keys {
            profile: p,
            rtp: mk(key, false)?,
            rtcp: mk(rtcp_key, true)?,
            id: next_key_set_id(),
        })
    }
}

/// What the multi-buffer engines need to protect or unprotect an RTP packet of an AES-CM or
/// NULL profile: the keystream primitive (none for NULL), the keyed HMAC-SHA1 states, the salt.
#[derive(Clone, Copy)]
pub(crate) struct CmRtpKeys<'a> {
    /// The AES-CM key for the multi-buffer keystream kernel (none for NULL).
    pub(crate) ctr: Option<&'a AesKey>,
    pub(crate) auth: &'a HmacSha1State,
    pub(crate) salt: &'a [u8; 14],
}

impl Keys {
    /// The RTP keys in multi-buffer form, for the profiles authenticated with HMAC-SHA1 (none
    /// for AEAD profiles).
    pub(crate) fn cm_rtp(&self) -> Option<CmRtpKeys<'_>> {
        let k = &self.rtp;
        if let Cipher::Gcm(_) = k.cipher {
            return None;
        }
        match k.lanes()? {
            LaneKeys::Hmac(h) => Some(CmRtpKeys {
                ctr: h.ctr.as_ref(),
                auth: &h.auth,
                salt: &k.salt,
            }),
            LaneKeys::Gcm(_) => None,
        }
    }

    /// The RTP keys of an AEAD profile in multi-buffer form, with the salt.
    pub(crate) fn gcm_rtp(&self) -> Option<(&GcmKey, &[u8; 14])> {
        match self.rtp.lanes()? {
            LaneKeys::Gcm(g) => Some((g, &self.rtp.salt)),
            LaneKeys::Hmac(_) => None,
        }
    }
}

/// The multi-buffer kernels a context's RTP packets can go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lanes {
    /// HMAC-SHA1 in lanes, AES-CM keystreams in the AES kernel.
    Cm,
    /// The AES-GCM kernel.
    Gcm,
    /// None: the scalar path.
    None,
}

/// Where the crypto of one RTP packet works in its buffer, found by the checks that come
/// before it (header, stream, index, replay window).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RtpSpan {
    /// Header length (the encrypted part starts here).
    pub(crate) hdr: usize,
    /// Input length.
    pub(crate) len: usize,
    pub(crate) ssrc: u32,
    pub(crate) seq: u16,
    /// The packet's extended index (ROC ‖ SEQ).
    pub(crate) index: u64,
    pub(crate) tag_len: usize,
}

impl RtpSpan {
    /// The rollover counter, authenticated after the packet.
    pub(crate) fn roc(&self) -> u32 {
        (self.index >> 16) as u32
    }
}

/// Where the crypto of one SRTCP packet works, found by the checks that come before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RtcpSpan {
    /// Input length.
    pub(crate) len: usize,
    pub(crate) ssrc: u32,
    /// The E‖SRTCP index word (E: the payload is encrypted).
    pub(crate) trailer: u32,
    pub(crate) tag_len: usize,
}

impl RtcpSpan {
    /// The SRTCP index.
    pub(crate) fn index(&self) -> u32 {
        self.trailer & MAX_SRTCP_INDEX
    }
    /// Whether the payload is (to be) encrypted.
    pub(crate) fn encrypted(&self) -> bool {
        self.trailer & E_BIT != 0
    }
}

/// Per-SSRC state.
struct Stream {
    direction: Direction,
    keys: Arc<Keys>,
    rtp_index: IndexState,
    rtp_replay: ReplayWindow,
    /// Outbound: the next SRTCP index to send. Inbound: unused.
    rtcp_next: u32,
    rtcp_replay: ReplayWindow,
}

impl Stream {
    fn new(direction: Direction, keys: Arc<Keys>, window: usize) -> Result<Self, ConfigError> {
        Ok(Stream {
            direction,
            keys,
            rtp_index: IndexState::Fresh { roc: 0 },
            rtp_replay: ReplayWindow::new(window)?,
            rtcp_next: 0,
            rtcp_replay: ReplayWindow::new(window)?,
        })
    }
}

type StreamMap = crate::ssrc_map::SsrcMap<Stream>;

/// An SRTP/SRTCP context: one master key (or several, per stream), many SSRCs.
///
/// # Threading
/// A context is `Send` and is driven through `&mut self`: own one per call, per participant
/// or per worker thread. There are no global locks and no shared mutable state between
/// contexts; the keyed primitives are shared read-only (`Arc`) between the streams made from
/// one master key. To process packets of many contexts at once, see [`crate::batch`].
pub struct Context {
    profile: Profile,
    keys: Arc<Keys>,
    template: Option<Direction>,
    window: usize,
    allow_repeat_tx: bool,
    max_streams: usize,
    provider: &'static dyn CryptoProvider,
    streams: StreamMap,
    /// Where an offload engine keeps this context's key sets on its device
    /// ([`crate::offload::OffloadNote`]; the RTP keys' and the SRTCP keys').
    pub(crate) offload_notes: [crate::offload::OffloadNote; 2],
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("profile", &self.profile)
            .field("template", &self.template)
            .field("streams", &self.streams.len())
            .field("provider", &self.provider.name())
            .finish_non_exhaustive()
    }
}

#[inline]
fn rtp_header_len(pkt: &[u8]) -> Result<usize, Error> {
    if pkt.len() < 12 {
        return Err(Error::TooShort);
    }
    if pkt[0] >> 6 != 2 {
        return Err(Error::BadHeader);
    }
    let cc = (pkt[0] & 0x0f) as usize;
    let mut n = 12 + 4 * cc;
    if pkt[0] & 0x10 != 0 {
        if pkt.len() < n + 4 {
            return Err(Error::BadHeader);
        }
        let words = u16::from_be_bytes([pkt[n + 2], pkt[n + 3]]) as usize;
        n += 4 + 4 * words;
    }
    if n > pkt.len() {
        return Err(Error::BadHeader);
    }
    Ok(n)
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// AES-CM IV (RFC 3711 §4.1.1): (salt·2^16) ⊕ (SSRC·2^64) ⊕ (index·2^16).
#[inline]
pub(crate) fn cm_iv(salt: &[u8; 14], ssrc: u32, index: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..14].copy_from_slice(salt);
    let iv = u128::from_be_bytes(s)
        ^ ((ssrc as u128) << 64)
        ^ (((index & 0xffff_ffff_ffff) as u128) << 16);
    iv.to_be_bytes()
}

/// GCM IV for SRTP (RFC 7714 §8.1): salt ⊕ (0x0000 ‖ SSRC ‖ ROC ‖ SEQ).
#[inline]
pub(crate) fn gcm_rtp_iv(salt: &[u8; 14], ssrc: u32, roc: u32, seq: u16) -> [u8; 12] {
    gcm_iv(
        salt,
        ((ssrc as u128) << 48) | ((roc as u128) << 16) | seq as u128,
    )
}

/// GCM IV for SRTCP (RFC 7714 §9.1): salt ⊕ (0x0000 ‖ SSRC ‖ 0x0000 ‖ 0 ‖ SRTCP index).
#[inline]
fn gcm_rtcp_iv(salt: &[u8; 14], ssrc: u32, index: u32) -> [u8; 12] {
    gcm_iv(salt, ((ssrc as u128) << 48) | index as u128)
}

/// The first 12 salt bytes ⊕ `x` (a 96-bit value, right-aligned).
#[inline]
fn gcm_iv(salt: &[u8; 14], x: u128) -> [u8; 12] {
    let mut s = [0u8; 16];
    s[4..].copy_from_slice(&salt[..12]);
    let v = (u128::from_be_bytes(s) ^ x).to_be_bytes();
    let mut iv = [0u8; 12];
    iv.copy_from_slice(&v[4..]);
    iv
}

const E_BIT: u32 = 0x8000_0000;
const MAX_SRTCP_INDEX: u32 = 0x7fff_ffff;

fn replay_err(e: ReplayError) -> Error {
    match e {
        ReplayError::Duplicate => Error::ReplayDuplicate,
        ReplayError::Old => Error::ReplayOld,
    }
}

impl Context {
    /// Derives the session keys and sets the context up.
    pub fn new(policy: Policy) -> Result<Self, ConfigError> {
        // Check the window size once, here, so streams made later cannot fail on it.
        ReplayWindow::new(policy.window)?;
        if policy.max_streams == 0 {
            return Err(ConfigError::MaxStreams);
        }
        let keys = Arc::new(Keys::derive(
            policy.provider,
            &policy.key,
            policy.rtcp_key.as_ref(),
        )?);
        Ok(Context {
            profile: policy.key.profile(),
            keys,
            template: policy.template,
            window: policy.window,
            allow_repeat_tx: policy.allow_repeat_tx,
            max_streams: policy.max_streams,
            provider: policy.provider,
            streams: StreamMap::default(),
            offload_notes: Default::default(),
        })
    }

    /// The context's profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The name of the crypto provider in use.
    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// The context's master keys (those of its template and of streams not keyed apart).
    pub(crate) fn master_keys(&self) -> &Arc<Keys> {
        &self.keys
    }

    /// The keys of the stream for `ssrc`: the master keys unless `own` (the stream was keyed
    /// apart, [`Self::add_stream_with_key`]).
    pub(crate) fn rtp_keys_for(&self, ssrc: u32, own: bool) -> Option<&Keys> {
        if own {
            self.streams.get(ssrc).map(|s| &*s.keys)
        } else {
            Some(&self.keys)
        }
    }

    /// Starts loading what a batch engine will read to protect or unprotect an RTP packet of
    /// this context (hints: nothing changes), in two stages a few packets apart, each reading
    /// only what the stage before asked for. First, from the context alone: its master keys
    /// and its first stream (its only one, in most contexts).
    #[inline]
    pub(crate) fn prefetch_rtp_stream(&self) {
        use crate::simd::prefetch;
        prefetch::prefetch_bytes(Arc::as_ptr(&self.keys).cast(), RTP_KEYS_BYTES, 4);
        if let Some((p, len)) = self.streams.first_entry_addr() {
            prefetch::prefetch_bytes(p, len, 3);
        }
    }

    /// Second stage of [`Self::prefetch_rtp_stream`], for a packet of `ssrc` and `len` bytes:
    /// the stream's replay window and the keys, in multi-buffer form if `lanes`, else the
    /// provider's.
    #[inline]
    pub(crate) fn prefetch_rtp_keys(&self, ssrc: u32, len: usize, lanes: bool) {
        let keys = match self.streams.get(ssrc) {
            Some(s) => {
                s.rtp_replay.prefetch();
                &s.keys
            }
            None => &self.keys,
        };
        if lanes {
            keys.rtp.prefetch_lanes(len);
        } else {
            keys.rtp.prefetch_scalar();
        }
    }

    /// Which multi-buffer kernels this context's RTP packets can go to (streams keyed apart
    /// share the context's profile).
    pub(crate) fn rtp_lanes(&self) -> Lanes {
        if self.keys.cm_rtp().is_some() {
            Lanes::Cm
        } else if self.keys.gcm_rtp().is_some() {
            Lanes::Gcm
        } else {
            Lanes::None
        }
    }

    /// Number of streams held.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Adds (or replaces) a stream for `ssrc` keyed with the context's master key.
    pub fn add_stream(&mut self, ssrc: u32, direction: Direction) -> Result<(), Error> {
        let keys = self.keys.clone();
        self.insert_stream(ssrc, direction, keys)
    }

    /// Adds (or replaces) a stream for `ssrc` with its own master key (same profile).
    pub fn add_stream_with_key(
        &mut self,
        ssrc: u32,
        direction: Direction,
        key: &MasterKey,
    ) -> Result<(), ConfigError> {
        if key.profile() != self.profile {
            return Err(ConfigError::ProfileMismatch);
        }
        let keys = Arc::new(Keys::derive(self.provider, key, None)?);
        self.insert_stream(ssrc, direction, keys)
            .map_err(|_| ConfigError::MaxStreams)
    }

    fn insert_stream(
        &mut self,
        ssrc: u32,
        direction: Direction,
        keys: Arc<Keys>,
    ) -> Result<(), Error> {
        if !self.streams.contains_key(ssrc) && self.streams.len() >= self.max_streams {
            return Err(Error::StreamLimit);
        }
        // The window size was checked in `new`.
        let s = Stream::new(direction, keys, self.window).map_err(|_| Error::StreamLimit)?;
        self.streams.insert(ssrc, s);
        Ok(())
    }

    /// Removes the stream for `ssrc`; returns whether there was one.
    pub fn remove_stream(&mut self, ssrc: u32) -> bool {
        self.streams.remove(ssrc).is_some()
    }

    /// The stream for `ssrc`, made from the template if there is none yet (a node resuming a
    /// stream another node carried).
    fn stream_or_template(&mut self, ssrc: u32) -> Result<&mut Stream, Error> {
        if !self.streams.contains_key(ssrc) {
            let dir = self.template.ok_or(Error::UnknownSsrc(ssrc))?;
            self.add_stream(ssrc, dir)?;
        }
        self.streams.get_mut(ssrc).ok_or(Error::UnknownSsrc(ssrc))
    }

    /// The rollover counter of the stream for `ssrc`.
    pub fn roc(&self, ssrc: u32) -> Option<u32> {
        self.streams.get(ssrc).map(|s| s.rtp_index.roc())
    }

    /// Sets the rollover counter of the stream for `ssrc` (making the stream from the template
    /// if needed), so that a node taking over a stream resumes it: the next packet's index is
    /// `roc·2^16 + SEQ` exactly, and the replay window starts afresh from it.
    pub fn set_roc(&mut self, ssrc: u32, roc: u32) -> Result<(), Error> {
        if roc >= 1 << 16 {
            // ROC·2^16 must fit the 48-bit index.
            return Err(Error::KeyExhausted);
        }
        let s = self.stream_or_template(ssrc)?;
        s.rtp_index = IndexState::Fresh { roc };
        s.rtp_replay.reset();
        Ok(())
    }

    /// Each stream's SSRC, the highest SRTP index it processed (none yet: `None`) and the
    /// SRTCP index it sends next: what a node taking the streams over needs
    /// ([`Context::resume_at`], [`Context::set_rtcp_index`]).
    pub fn stream_indices(&self) -> Vec<(u32, Option<u64>, u32)> {
        self.streams
            .iter()
            .map(|(ssrc, s)| (ssrc, s.rtp_index.highest(), s.rtcp_next))
            .collect()
    }

    /// Resumes the stream for `ssrc` (making it from the template if needed) as if it had
    /// processed index `highest` last: the next packet's index is the one of its SEQ nearest
    /// `highest` (RFC 3711 §3.3.1), so a stream taken over from another node keeps its
    /// rollover counter as long as `highest` is within 2^15 packets of where the stream is.
    /// The replay window starts afresh.
    pub fn resume_at(&mut self, ssrc: u32, highest: u64) -> Result<(), Error> {
        if highest >= 1 << 48 {
            return Err(Error::KeyExhausted);
        }
        let s = self.stream_or_template(ssrc)?;
        s.rtp_index = IndexState::Seen { highest };
        s.rtp_replay.reset();
        Ok(())
    }

    /// The SRTCP index the stream for `ssrc` sends next (outbound streams).
    pub fn rtcp_index(&self, ssrc: u32) -> Option<u32> {
        self.streams.get(ssrc).map(|s| s.rtcp_next)
    }

    /// Sets the SRTCP index an outbound stream sends next (making the stream from the template
    /// if needed), so a node taking over a stream never reuses an index.
    pub fn set_rtcp_index(&mut self, ssrc: u32, index: u32) -> Result<(), Error> {
        if index > MAX_SRTCP_INDEX {
            return Err(Error::KeyExhausted);
        }
        let s = self.stream_or_template(ssrc)?;
        s.rtcp_next = index;
        Ok(())
    }

    /// Replaces the session keys (for streams made from now on) with keys given directly
    /// instead of derived from the master key, the same for SRTP and SRTCP. Only for
    /// known-answer tests whose vectors start from session keys (RFC 7714 §16–17).
    #[doc(hidden)]
    pub fn set_session_keys_for_known_answer_tests(
        &mut self,
        enc: &[u8],
        auth: &[u8],
        salt: &[u8],
    ) -> Result<(), ConfigError> {
        let p = self.profile;
        self.keys = Arc::new(Keys {
            profile: p,
            rtp: DirKeys::new(self.provider, p, enc, auth, salt)?,
            rtcp: DirKeys::new(self.provider, p, enc, auth, salt)?,
            id: next_key_set_id(),
        });
        Ok(())
    }

    /// The stream for `ssrc`, made from the template if there is none (used on the sending
    /// side, where packets are our own). One scan of a few SSRCs (or one hash lookup past
    /// [`crate::ssrc_map::SCAN`] streams).
    #[inline]
    fn stream(&mut self, ssrc: u32, direction: Direction) -> Result<&mut Stream, Error> {
        if let Some(at) = self.streams.position(ssrc) {
            return match self.streams.at_mut(at) {
                Some(s) if s.direction == direction => Ok(s),
                Some(_) => Err(Error::WrongDirection(ssrc)),
                None => Err(Error::UnknownSsrc(ssrc)),
            };
        }
        match self.template {
            Some(d) if d == direction => {}
            Some(_) => return Err(Error::WrongDirection(ssrc)),
            None => return Err(Error::UnknownSsrc(ssrc)),
        }
        if self.streams.len() >= self.max_streams {
            return Err(Error::StreamLimit);
        }
        let s = Stream::new(direction, self.keys.clone(), self.window)
            .map_err(|_| Error::StreamLimit)?;
        Ok(self.streams.insert(ssrc, s))
    }

    /// Protects the RTP packet `buf[..len]` in place; `buf` must have room for the tag
    /// ([`Profile::rtp_overhead`] more bytes). Returns the SRTP packet's length.
    pub fn protect_rtp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let (span, keys) = self.protect_rtp_begin(buf, len)?;
        Ok(protect_rtp_with(keys, buf, &span))
    }

    /// Everything protecting an RTP packet does before its crypto: parse the header, find (or
    /// make) the stream, check that the output fits, estimate the index and check it against
    /// the window, and move the stream on (the crypto that follows cannot fail). Shared by
    /// [`Self::protect_rtp`] and the multi-buffer engines.
    pub(crate) fn protect_rtp_begin(
        &mut self,
        buf: &[u8],
        len: usize,
    ) -> Result<(RtpSpan, &Arc<Keys>), Error> {
        if len > buf.len() {
            return Err(Error::TooShort);
        }
        let hdr = rtp_header_len(&buf[..len])?;
        let seq = u16::from_be_bytes([buf[2], buf[3]]);
        let ssrc = be32(buf, 8);
        let allow_repeat = self.allow_repeat_tx;
        // Streams keyed apart share the context's profile.
        let tag_len = self.profile.rtp_tag_len();
        let s = self.stream(ssrc, Direction::Outbound)?;
        let out_len = len + tag_len;
        if buf.len() < out_len {
            return Err(Error::BufferTooSmall { needed: out_len });
        }
        let index = s.rtp_index.index_for(seq).ok_or(Error::ReplayOld)?;
        match s.rtp_replay.check(index) {
            Ok(()) => {}
            Err(ReplayError::Duplicate) if allow_repeat => {}
            Err(e) => return Err(replay_err(e)),
        }
        s.rtp_index.advance(index);
        s.rtp_replay.update(index);
        let span = RtpSpan {
            hdr,
            len,
            ssrc,
            seq,
            index,
            tag_len,
        };
        Ok((span, &s.keys))
    }

    /// Unprotects the SRTP packet `buf[..len]` in place. Returns the RTP packet's length.
    ///
    /// Nothing changes in the context unless the packet authenticates: a stream for a new SSRC
    /// is made from the template only once its first packet has passed authentication (so
    /// forged packets with made-up SSRCs cannot fill the stream table).
    pub fn unprotect_rtp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let (span, keys) = self.unprotect_rtp_begin(buf, len)?;
        let n = unprotect_rtp_with(keys, buf, &span)?;
        self.unprotect_rtp_commit(&span)?;
        Ok(n)
    }

    /// Everything unprotecting an RTP packet does before its crypto, changing nothing: parse
    /// the header, find the stream (or check that the template may make one), estimate the
    /// index and check it against the replay window. Shared by [`Self::unprotect_rtp`] and the
    /// multi-buffer engines, which call [`Self::unprotect_rtp_commit`] once the packet has
    /// authenticated.
    pub(crate) fn unprotect_rtp_begin(
        &self,
        buf: &[u8],
        len: usize,
    ) -> Result<(RtpSpan, &Arc<Keys>), Error> {
        if len > buf.len() {
            return Err(Error::TooShort);
        }
        let pkt = &buf[..len];
        let hdr = rtp_header_len(pkt)?;
        let seq = u16::from_be_bytes([pkt[2], pkt[3]]);
        let ssrc = be32(pkt, 8);
        let tag_len = self.profile.rtp_tag_len();
        if len < hdr + tag_len {
            return Err(Error::TooShort);
        }
        let (index, keys) = if let Some(s) = self.streams.get(ssrc) {
            if s.direction != Direction::Inbound {
                return Err(Error::WrongDirection(ssrc));
            }
            let index = s.rtp_index.index_for(seq).ok_or(Error::ReplayOld)?;
            s.rtp_replay.check(index).map_err(replay_err)?;
            (index, &s.keys)
        } else {
            self.check_template(ssrc, Direction::Inbound)?;
            let index = IndexState::Fresh { roc: 0 }
                .index_for(seq)
                .ok_or(Error::ReplayOld)?;
            (index, &self.keys)
        };
        let span = RtpSpan {
            hdr,
            len,
            ssrc,
            seq,
            index,
            tag_len,
        };
        Ok((span, keys))
    }

    /// Moves the stream on past a packet that [`Self::unprotect_rtp_begin`] checked and that
    /// has authenticated, making the stream from the template if it is new.
    pub(crate) fn unprotect_rtp_commit(&mut self, span: &RtpSpan) -> Result<(), Error> {
        let s = self.inbound_stream_to_commit(span.ssrc)?;
        s.rtp_index.advance(span.index);
        s.rtp_replay.update(span.index);
        Ok(())
    }

    /// Whether a stream for an unknown `ssrc` may be made from the template for `direction`.
    #[inline]
    fn check_template(&self, ssrc: u32, direction: Direction) -> Result<(), Error> {
        match self.template {
            Some(d) if d == direction => {
                if self.streams.len() >= self.max_streams {
                    Err(Error::StreamLimit)
                } else {
                    Ok(())
                }
            }
            Some(_) => Err(Error::WrongDirection(ssrc)),
            None => Err(Error::UnknownSsrc(ssrc)),
        }
    }

    /// The inbound stream a packet that authenticated moves on: `ssrc`'s, or one made from the
    /// template if it is new (its begin checked that the template may).
    fn inbound_stream_to_commit(&mut self, ssrc: u32) -> Result<&mut Stream, Error> {
        match self.streams.position(ssrc) {
            Some(at) => self.streams.at_mut(at).ok_or(Error::UnknownSsrc(ssrc)),
            None => {
                let s = Stream::new(Direction::Inbound, self.keys.clone(), self.window)
                    .map_err(|_| Error::StreamLimit)?;
                Ok(self.streams.insert(ssrc, s))
            }
        }
    }

    /// Protects the (compound) RTCP packet `buf[..len]` in place; `buf` must have room for
    /// [`Profile::rtcp_overhead`] more bytes. Returns the SRTCP packet's length.
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let (span, keys) = self.protect_rtcp_begin(buf, len)?;
        Ok(protect_rtcp_with(keys, buf, &span))
    }

    /// Everything protecting an RTCP packet does before its crypto: the header, the stream,
    /// the room for the trailer and tag, the next SRTCP index, which it takes (the crypto that
    /// follows cannot fail). Shared by [`Self::protect_rtcp`] and the offload engines.
    pub(crate) fn protect_rtcp_begin(
        &mut self,
        buf: &[u8],
        len: usize,
    ) -> Result<(RtcpSpan, &Arc<Keys>), Error> {
        if len > buf.len() || len < 8 {
            return Err(Error::TooShort);
        }
        if buf[0] >> 6 != 2 {
            return Err(Error::BadHeader);
        }
        let ssrc = be32(buf, 4);
        let s = self.stream(ssrc, Direction::Outbound)?;
        let profile = s.keys.profile;
        let tag_len = profile.rtcp_tag_len();
        let out_len = len + 4 + tag_len;
        if buf.len() < out_len {
            return Err(Error::BufferTooSmall { needed: out_len });
        }
        let index = s.rtcp_next;
        if index > MAX_SRTCP_INDEX {
            return Err(Error::KeyExhausted);
        }
        let e = profile.encrypts();
        s.rtcp_next = index + 1;
        let span = RtcpSpan {
            len,
            ssrc,
            trailer: if e { E_BIT } else { 0 } | index,
            tag_len,
        };
        Ok((span, &s.keys))
    }

    /// Unprotects the SRTCP packet `buf[..len]` in place. Returns the RTCP packet's length.
    /// As for SRTP, nothing changes unless the packet authenticates.
    pub fn unprotect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let (span, keys) = self.unprotect_rtcp_begin(buf, len)?;
        let n = unprotect_rtcp_with(keys, buf, &span)?;
        self.unprotect_rtcp_commit(&span)?;
        Ok(n)
    }

    /// Everything unprotecting an SRTCP packet does before its crypto, changing nothing: the
    /// lengths and header, the stream (or that the template may make one), the E‖index word
    /// and, for a known stream, the replay check. Shared by [`Self::unprotect_rtcp`] and the
    /// offload engines, which call [`Self::unprotect_rtcp_commit`] once it authenticated.
    pub(crate) fn unprotect_rtcp_begin(
        &self,
        buf: &[u8],
        len: usize,
    ) -> Result<(RtcpSpan, &Arc<Keys>), Error> {
        if len > buf.len() {
            return Err(Error::TooShort);
        }
        let tag_len = self.profile.rtcp_tag_len();
        if len < 8 + 4 + tag_len {
            return Err(Error::TooShort);
        }
        if buf[0] >> 6 != 2 {
            return Err(Error::BadHeader);
        }
        let ssrc = be32(buf, 4);
        // Layout: CM/NULL [rtcp][E|index][tag]; AEAD [rtcp'][tag][E|index].
        let trailer_at = if self.profile.is_aead() {
            len - 4
        } else {
            len - tag_len - 4
        };
        let span = RtcpSpan {
            len,
            ssrc,
            trailer: be32(buf, trailer_at),
            tag_len,
        };
        if let Some(s) = self.streams.get(ssrc) {
            if s.direction != Direction::Inbound {
                return Err(Error::WrongDirection(ssrc));
            }
            s.rtcp_replay
                .check(span.index() as u64)
                .map_err(replay_err)?;
            return Ok((span, &s.keys));
        }
        self.check_template(ssrc, Direction::Inbound)?;
        Ok((span, &self.keys))
    }

    /// Moves the stream's SRTCP replay window past a packet that
    /// [`Self::unprotect_rtcp_begin`] checked and that authenticated, making the stream from
    /// the template if it is new.
    pub(crate) fn unprotect_rtcp_commit(&mut self, span: &RtcpSpan) -> Result<(), Error> {
        let s = self.inbound_stream_to_commit(span.ssrc)?;
        s.rtcp_replay.update(span.index() as u64);
        Ok(())
    }

    /// Protects `input` (an RTP packet) into `output`. Returns the SRTP packet's length.
    pub fn protect_rtp_into(&mut self, input: &[u8], output: &mut [u8]) -> Result<usize, Error> {
        let n = copy_in(input, output, self.profile.rtp_overhead())?;
        self.protect_rtp(output, n)
    }

    /// Unprotects `input` (an SRTP packet) into `output`. Returns the RTP packet's length.
    pub fn unprotect_rtp_into(&mut self, input: &[u8], output: &mut [u8]) -> Result<usize, Error> {
        let n = copy_in(input, output, 0)?;
        self.unprotect_rtp(output, n)
    }

    /// Protects `input` (an RTCP packet) into `output`. Returns the SRTCP packet's length.
    pub fn protect_rtcp_into(&mut self, input: &[u8], output: &mut [u8]) -> Result<usize, Error> {
        let n = copy_in(input, output, self.profile.rtcp_overhead())?;
        self.protect_rtcp(output, n)
    }

    /// Unprotects `input` (an SRTCP packet) into `output`. Returns the RTCP packet's length.
    pub fn unprotect_rtcp_into(&mut self, input: &[u8], output: &mut [u8]) -> Result<usize, Error> {
        let n = copy_in(input, output, 0)?;
        self.unprotect_rtcp(output, n)
    }
}

#[inline]
fn copy_in(input: &[u8], output: &mut [u8], extra: usize) -> Result<usize, Error> {
    let needed = input.len() + extra;
    if output.len() < needed {
        return Err(Error::BufferTooSmall { needed });
    }
    output[..input.len()].copy_from_slice(input);
    Ok(input.len())
}

/// The crypto of SRTP protect, after [`Context::protect_rtp_begin`] (which checked that `buf`
/// holds the tag): encrypt or seal, append the tag. Returns the SRTP length.
#[inline]
pub(crate) fn protect_rtp_with(keys: &Keys, buf: &mut [u8], span: &RtpSpan) -> usize {
    let RtpSpan {
        hdr,
        len,
        ssrc,
        seq,
        tag_len,
        ..
    } = *span;
    let k = &keys.rtp;
    match &k.cipher {
        Cipher::Gcm(g) => {
            let nonce = gcm_rtp_iv(&k.salt, ssrc, span.roc(), seq);
            let (aad, rest) = buf.split_at_mut(hdr);
            let (data, tail) = rest.split_at_mut(len - hdr);
            let mut tag = [0u8; 16];
            g.seal(&nonce, aad, data, &mut tag);
            tail[..16].copy_from_slice(&tag);
        }
        cipher => {
            cipher.apply_rtp(&k.salt, span, buf, len);
            if let Some(auth) = &k.auth {
                let mut mac = [0u8; 20];
                auth.sign2(&buf[..len], &span.roc().to_be_bytes(), &mut mac);
                buf[len..len + tag_len].copy_from_slice(&mac[..tag_len]);
            }
        }
    }
    len + tag_len
}

/// The crypto of SRTP unprotect: check the tag (constant time) or open the AEAD, decrypt.
#[inline]
pub(crate) fn unprotect_rtp_with(
    keys: &Keys,
    buf: &mut [u8],
    span: &RtpSpan,
) -> Result<usize, Error> {
    let RtpSpan {
        hdr,
        len,
        ssrc,
        seq,
        tag_len,
        ..
    } = *span;
    let roc = span.roc();
    let k = &keys.rtp;
    let body_end = len - tag_len;
    match &k.cipher {
        Cipher::Gcm(g) => {
            let nonce = gcm_rtp_iv(&k.salt, ssrc, roc, seq);
            let (aad, rest) = buf.split_at_mut(hdr);
            g.open(&nonce, aad, &mut rest[..len - hdr])
                .map_err(|_| Error::AuthFailed)?;
        }
        cipher => {
            if let Some(auth) = &k.auth {
                let mut mac = [0u8; 20];
                auth.sign2(&buf[..body_end], &roc.to_be_bytes(), &mut mac);
                if !tags_equal(&mac[..tag_len], &buf[body_end..len]) {
                    return Err(Error::AuthFailed);
                }
            }
            cipher.apply_rtp(&k.salt, span, buf, body_end);
        }
    }
    Ok(body_end)
}

/// The crypto of SRTCP protect, after [`Context::protect_rtcp_begin`] (which checked that
/// `buf` holds the trailer and tag): encrypt or seal, append the E‖index word and the tag (in
/// RFC 3711's order, or RFC 7714's for AEAD). Returns the SRTCP length.
#[inline]
pub(crate) fn protect_rtcp_with(keys: &Keys, buf: &mut [u8], span: &RtcpSpan) -> usize {
    let RtcpSpan {
        len, ssrc, tag_len, ..
    } = *span;
    let out_len = len + 4 + tag_len;
    let trailer = span.trailer.to_be_bytes();
    let k = &keys.rtcp;
    match &k.cipher {
        Cipher::Gcm(g) => {
            let nonce = gcm_rtcp_iv(&k.salt, ssrc, span.index());
            let mut aad = [0u8; 12];
            aad[..8].copy_from_slice(&buf[..8]);
            aad[8..].copy_from_slice(&trailer);
            let (_, rest) = buf.split_at_mut(8);
            let (data, tail) = rest.split_at_mut(len - 8);
            let mut tag = [0u8; 16];
            g.seal(&nonce, &aad, data, &mut tag);
            tail[..16].copy_from_slice(&tag);
            tail[16..20].copy_from_slice(&trailer);
        }
        cipher => {
            cipher.apply_rtcp(&k.salt, span, buf, len);
            buf[len..len + 4].copy_from_slice(&trailer);
            if let Some(auth) = &k.auth {
                let mut mac = [0u8; 20];
                auth.sign2(&buf[..len + 4], &[], &mut mac);
                buf[len + 4..out_len].copy_from_slice(&mac[..tag_len]);
            }
        }
    }
    out_len
}

/// The crypto of SRTCP unprotect, after [`Context::unprotect_rtcp_begin`]: check the tag
/// (constant time) or open the AEAD, decrypt what was encrypted. Returns the RTCP length.
#[inline]
pub(crate) fn unprotect_rtcp_with(
    keys: &Keys,
    buf: &mut [u8],
    span: &RtcpSpan,
) -> Result<usize, Error> {
    let RtcpSpan {
        len, ssrc, tag_len, ..
    } = *span;
    let index = span.index();
    let encrypted = span.encrypted();
    let aead = keys.profile.is_aead();
    let trailer_at = if aead { len - 4 } else { len - tag_len - 4 };
    let k = &keys.rtcp;
    let rtcp_len = len - 4 - tag_len;
    match &k.cipher {
        Cipher::Gcm(g) => {
            let nonce = gcm_rtcp_iv(&k.salt, ssrc, index);
            if encrypted {
                let mut aad = [0u8; 12];
                aad[..8].copy_from_slice(&buf[..8]);
                aad[8..].copy_from_slice(&buf[trailer_at..len]);
                g.open(&nonce, &aad, &mut buf[8..trailer_at])
                    .map_err(|_| Error::AuthFailed)?;
            } else {
                // Authenticated only: the AAD is the whole RTCP packet and the trailer, which
                // sit on either side of the tag. Swap tag and trailer so both are contiguous,
                // and swap back afterwards, verified or not.
                buf[rtcp_len..len].rotate_right(4);
                let (aad, tag) = buf[..len].split_at_mut(rtcp_len + 4);
                let opened = g.open(&nonce, aad, tag);
                buf[rtcp_len..len].rotate_left(4);
                opened.map_err(|_| Error::AuthFailed)?;
            }
        }
        cipher => {
            if let Some(auth) = &k.auth {
                let mut mac = [0u8; 20];
                auth.sign2(&buf[..len - tag_len], &[], &mut mac);
                if !tags_equal(&mac[..tag_len], &buf[len - tag_len..len]) {
                    return Err(Error::AuthFailed);
                }
            }
            if encrypted {
                cipher.apply_rtcp(&k.salt, span, buf, rtcp_len);
            }
        }
    }
    Ok(rtcp_len)
}
