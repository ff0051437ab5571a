//! Safe wrapper around libsrtp 2.
//!
//! The library comes from the crates.io crate `srtp2-sys` 3.0.2 with the
//! features `build` and `enable-openssl`: it compiles the **libsrtp 2.3.0**
//! sources bundled in that crate (`./configure --enable-openssl && make
//! libsrtp2.a`) and links them against the system OpenSSL through
//! `openssl-sys`. The OpenSSL backend is what provides AES-256-CM and
//! AES-GCM.
//!
//! Each [`LibSrtp`] owns one `srtp_t` session created with exactly one
//! *wildcard* stream policy (`ssrc_any_inbound` or `ssrc_any_outbound`), so
//! any SSRC is accepted; libsrtp clones a per-SSRC stream from that template
//! the first time it sees an SSRC.
//!
//! Quirks of libsrtp 2.3.0 that this wrapper knows about:
//!
//! * `srtp_crypto_policy_set_null_cipher_hmac_sha1_80()` sets
//!   `cipher_key_len = 0`, which makes libsrtp 2.3.0 run its key derivation
//!   over an *all-zero* master key and salt (the caller's key is never read),
//!   so the derived authentication keys do not depend on the master key. That
//!   is not RFC 4568 `NULL_HMAC_SHA1_80` and cannot interoperate with a
//!   correct implementation. For [`LibsrtpProfile::NullHmacSha1_80`] this
//!   wrapper therefore sets `cipher_key_len` to 30 (16-byte key + 14-byte
//!   salt), which makes libsrtp feed the real master key and salt into the
//!   AES-CM KDF; the null cipher ignores the derived encryption key.
//! * [`LibSrtp::set_roc`] / [`LibSrtp::get_roc`] (`srtp_set_stream_roc` /
//!   `srtp_get_stream_roc`) only find streams that already exist, i.e. SSRCs
//!   for which a packet has been processed; before that they return
//!   `srtp_err_status_bad_param`. The ROC set is a *pending* ROC applied to
//!   the next packet's index estimate, and in 2.3.0 the AEAD (AES-GCM)
//!   *protect* path ignores it (unprotect honours it for all profiles).
//!   A pending ROC of 0 means "none".

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

use srtp2_sys as sys;
use zeroize::Zeroize;

/// Length of the SRTCP trailer (E flag + 31-bit SRTCP index) that
/// `srtp_protect_rtcp` appends before the authentication tag.
const SRTCP_INDEX_LEN: usize = 4;

/// Longest master key + master salt any profile uses (AES-256: 32 + 14).
const MAX_KEY_AND_SALT_LEN: usize = 46;

/// SRTP protection profiles, named as in SDP `a=crypto` (RFC 4568, RFC 6188,
/// RFC 7714).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LibsrtpProfile {
    /// `AES_CM_128_HMAC_SHA1_80` (RFC 4568).
    AesCm128HmacSha1_80,
    /// `AES_CM_128_HMAC_SHA1_32` (RFC 4568); SRTCP keeps an 80-bit tag.
    AesCm128HmacSha1_32,
    /// `AES_256_CM_HMAC_SHA1_80` (RFC 6188).
    AesCm256HmacSha1_80,
    /// `AES_256_CM_HMAC_SHA1_32` (RFC 6188); SRTCP keeps an 80-bit tag.
    AesCm256HmacSha1_32,
    /// `AEAD_AES_128_GCM` (RFC 7714), 16-byte tag.
    AeadAes128Gcm,
    /// `AEAD_AES_256_GCM` (RFC 7714), 16-byte tag.
    AeadAes256Gcm,
    /// `NULL_HMAC_SHA1_80` (RFC 4568): authentication only, no encryption.
    NullHmacSha1_80,
    /// `AES_192_CM_HMAC_SHA1_80` (RFC 6188).
    AesCm192HmacSha1_80,
    /// `AES_192_CM_HMAC_SHA1_32` (RFC 6188); SRTCP keeps an 80-bit tag.
    AesCm192HmacSha1_32,
}

impl LibsrtpProfile {
    /// Every profile, in declaration order.
    pub const ALL: [Self; 9] = [
        Self::AesCm128HmacSha1_80,
        Self::AesCm128HmacSha1_32,
        Self::AesCm256HmacSha1_80,
        Self::AesCm256HmacSha1_32,
        Self::AeadAes128Gcm,
        Self::AeadAes256Gcm,
        Self::NullHmacSha1_80,
        Self::AesCm192HmacSha1_80,
        Self::AesCm192HmacSha1_32,
    ];

    /// Master key length in bytes (for the NULL cipher the key still feeds
    /// the key derivation of the authentication key).
    pub fn master_key_len(self) -> usize {
        match self {
            Self::AesCm128HmacSha1_80
            | Self::AesCm128HmacSha1_32
            | Self::AeadAes128Gcm
            | Self::NullHmacSha1_80 => 16,
            Self::AesCm192HmacSha1_80 | Self::AesCm192HmacSha1_32 => 24,
            Self::AesCm256HmacSha1_80 | Self::AesCm256HmacSha1_32 | Self::AeadAes256Gcm => 32,
        }
    }

    /// Master salt length in bytes (14 for AES-CM/NULL, 12 for AES-GCM).
    pub fn master_salt_len(self) -> usize {
        match self {
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 12,
            _ => 14,
        }
    }

    /// Authentication tag length of an SRTP packet in bytes.
    pub fn rtp_tag_len(self) -> usize {
        match self {
            Self::AesCm128HmacSha1_32 | Self::AesCm192HmacSha1_32 | Self::AesCm256HmacSha1_32 => 4,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 16,
            Self::AesCm128HmacSha1_80
            | Self::AesCm192HmacSha1_80
            | Self::AesCm256HmacSha1_80
            | Self::NullHmacSha1_80 => 10,
        }
    }

    /// Authentication tag length of an SRTCP packet in bytes (the `_32`
    /// profiles still use an 80-bit SRTCP tag, RFC 4568 §6.2).
    pub fn rtcp_tag_len(self) -> usize {
        match self {
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 16,
            _ => 10,
        }
    }

    /// Bytes that [`LibSrtp::protect`] adds to an RTP packet (the tag).
    pub fn rtp_overhead(self) -> usize {
        self.rtp_tag_len()
    }

    /// Bytes that [`LibSrtp::protect_rtcp`] adds to an RTCP packet (SRTCP
    /// index word + tag).
    pub fn rtcp_overhead(self) -> usize {
        SRTCP_INDEX_LEN + self.rtcp_tag_len()
    }

    /// The crypto-suite name used in SDP `a=crypto`.
    pub fn sdp_name(self) -> &'static str {
        match self {
            Self::AesCm128HmacSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            Self::AesCm128HmacSha1_32 => "AES_CM_128_HMAC_SHA1_32",
            Self::AesCm256HmacSha1_80 => "AES_256_CM_HMAC_SHA1_80",
            Self::AesCm256HmacSha1_32 => "AES_256_CM_HMAC_SHA1_32",
            Self::AeadAes128Gcm => "AEAD_AES_128_GCM",
            Self::AeadAes256Gcm => "AEAD_AES_256_GCM",
            Self::NullHmacSha1_80 => "NULL_HMAC_SHA1_80",
            Self::AesCm192HmacSha1_80 => "AES_192_CM_HMAC_SHA1_80",
            Self::AesCm192HmacSha1_32 => "AES_192_CM_HMAC_SHA1_32",
        }
    }

    /// Looks a profile up by its SDP crypto-suite name (exact match).
    pub fn from_sdp_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.sdp_name() == name)
    }

    /// Fills `policy` with this profile's SRTP (`rtcp == false`) or SRTCP
    /// crypto policy.
    fn set_crypto_policy(self, policy: &mut sys::srtp_crypto_policy_t, rtcp: bool) {
        let p: *mut sys::srtp_crypto_policy_t = policy;
        // SAFETY: `p` comes from a live `&mut srtp_crypto_policy_t`; these
        // libsrtp setters only write plain integer fields of that struct.
        unsafe {
            match self {
                Self::AesCm128HmacSha1_80 => sys::srtp_crypto_policy_set_rtp_default(p),
                Self::AesCm128HmacSha1_32 if rtcp => sys::srtp_crypto_policy_set_rtp_default(p),
                Self::AesCm128HmacSha1_32 => sys::srtp_crypto_policy_set_aes_cm_128_hmac_sha1_32(p),
                Self::AesCm256HmacSha1_80 => sys::srtp_crypto_policy_set_aes_cm_256_hmac_sha1_80(p),
                Self::AesCm192HmacSha1_80 => sys::srtp_crypto_policy_set_aes_cm_192_hmac_sha1_80(p),
                Self::AesCm192HmacSha1_32 if rtcp => {
                    sys::srtp_crypto_policy_set_aes_cm_192_hmac_sha1_80(p)
                }
                Self::AesCm192HmacSha1_32 => sys::srtp_crypto_policy_set_aes_cm_192_hmac_sha1_32(p),
                Self::AesCm256HmacSha1_32 if rtcp => {
                    sys::srtp_crypto_policy_set_aes_cm_256_hmac_sha1_80(p)
                }
                Self::AesCm256HmacSha1_32 => sys::srtp_crypto_policy_set_aes_cm_256_hmac_sha1_32(p),
                Self::AeadAes128Gcm => sys::srtp_crypto_policy_set_aes_gcm_128_16_auth(p),
                Self::AeadAes256Gcm => sys::srtp_crypto_policy_set_aes_gcm_256_16_auth(p),
                Self::NullHmacSha1_80 => sys::srtp_crypto_policy_set_null_cipher_hmac_sha1_80(p),
            }
        }
        if self == Self::NullHmacSha1_80 {
            // libsrtp 2.3.0 sets cipher_key_len = 0 here, which makes its KDF
            // run over an all-zero master key (see the module docs). 30 =
            // 16-byte key + 14-byte salt: the KDF then reads the real master
            // key and salt; the null cipher ignores its derived key.
            policy.cipher_key_len = (self.master_key_len() + self.master_salt_len()) as c_int;
        }
    }
}

impl fmt::Display for LibsrtpProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sdp_name())
    }
}

/// Which way a [`LibSrtp`] session's wildcard stream points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Receiver side (`ssrc_any_inbound`): use `unprotect*`.
    Inbound,
    /// Sender side (`ssrc_any_outbound`): use `protect*`.
    Outbound,
}

/// A libsrtp error: the raw `srtp_err_status_t` value (never 0 = ok).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibsrtpError(pub i32);

impl LibsrtpError {
    /// `srtp_err_status_fail` (1).
    pub const FAIL: Self = Self(1);
    /// `srtp_err_status_bad_param` (2): also returned by this wrapper for
    /// wrong key/salt lengths, an out-of-range replay window, or a buffer
    /// without room for the tag.
    pub const BAD_PARAM: Self = Self(2);
    /// `srtp_err_status_auth_fail` (7).
    pub const AUTH_FAIL: Self = Self(7);
    /// `srtp_err_status_replay_fail` (9): index already seen.
    pub const REPLAY_FAIL: Self = Self(9);
    /// `srtp_err_status_replay_old` (10): index older than the window.
    pub const REPLAY_OLD: Self = Self(10);

    /// Authentication (tag) check failed.
    pub fn is_auth_fail(self) -> bool {
        self == Self::AUTH_FAIL
    }

    /// Replay check failed because the index was already received.
    pub fn is_replay_fail(self) -> bool {
        self == Self::REPLAY_FAIL
    }

    /// Replay check failed because the index is behind the replay window.
    pub fn is_replay_old(self) -> bool {
        self == Self::REPLAY_OLD
    }

    /// The libsrtp name of this status, e.g. `"srtp_err_status_auth_fail"`,
    /// or `None` for a value libsrtp 2 does not define.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "srtp_err_status_ok",
            1 => "srtp_err_status_fail",
            2 => "srtp_err_status_bad_param",
            3 => "srtp_err_status_alloc_fail",
            4 => "srtp_err_status_dealloc_fail",
            5 => "srtp_err_status_init_fail",
            6 => "srtp_err_status_terminus",
            7 => "srtp_err_status_auth_fail",
            8 => "srtp_err_status_cipher_fail",
            9 => "srtp_err_status_replay_fail",
            10 => "srtp_err_status_replay_old",
            11 => "srtp_err_status_algo_fail",
            12 => "srtp_err_status_no_such_op",
            13 => "srtp_err_status_no_ctx",
            14 => "srtp_err_status_cant_check",
            15 => "srtp_err_status_key_expired",
            16 => "srtp_err_status_socket_err",
            17 => "srtp_err_status_signal_err",
            18 => "srtp_err_status_nonce_bad",
            19 => "srtp_err_status_read_fail",
            20 => "srtp_err_status_write_fail",
            21 => "srtp_err_status_parse_err",
            22 => "srtp_err_status_encode_err",
            23 => "srtp_err_status_semaphore_err",
            24 => "srtp_err_status_pfkey_err",
            25 => "srtp_err_status_bad_mki",
            26 => "srtp_err_status_pkt_idx_old",
            27 => "srtp_err_status_pkt_idx_adv",
            _ => return None,
        })
    }

    /// Converts a libsrtp status into `Ok(())` / `Err(LibsrtpError)`.
    fn check(status: sys::srtp_err_status_t) -> Result<(), Self> {
        if status == sys::srtp_err_status_t_srtp_err_status_ok {
            Ok(())
        } else {
            Err(Self(i32::try_from(status).unwrap_or(i32::MAX)))
        }
    }
}

impl fmt::Display for LibsrtpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "libsrtp error {} ({name})", self.0),
            None => write!(f, "libsrtp error {} (unknown status)", self.0),
        }
    }
}

impl std::error::Error for LibsrtpError {}

/// Runs `srtp_init()` once per process and returns its (cached) status.
fn ensure_init() -> Result<(), LibsrtpError> {
    static INIT: OnceLock<Result<(), LibsrtpError>> = OnceLock::new();
    // OnceLock is built on std::sync::Once: the closure runs exactly once
    // even under concurrent first use, and everyone sees its result.
    *INIT.get_or_init(|| {
        // SAFETY: srtp_init takes no arguments and only initialises
        // libsrtp's global crypto kernel; OnceLock guarantees it runs once
        // and never concurrently with itself.
        LibsrtpError::check(unsafe { sys::srtp_init() })
    })
}

/// One libsrtp session (`srtp_t`) with a single wildcard stream policy.
///
/// Created for one [`LibsrtpProfile`] and one [`Direction`]: an
/// [`Direction::Outbound`] session protects, an [`Direction::Inbound`] one
/// unprotects, for any SSRC.
pub struct LibSrtp {
    session: NonNull<sys::srtp_ctx_t>,
    profile: LibsrtpProfile,
    direction: Direction,
}

// SAFETY: a libsrtp session has no thread affinity: it is heap state owned
// exclusively by this value, and libsrtp's only global state (the crypto
// kernel) is set up once by srtp_init and read-only afterwards. Moving the
// session to another thread is fine as long as it is used from one thread at
// a time, which `&mut self` on every mutating method guarantees. `LibSrtp` is
// deliberately not `Sync`.
unsafe impl Send for LibSrtp {}

impl fmt::Debug for LibSrtp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LibSrtp")
            .field("profile", &self.profile)
            .field("direction", &self.direction)
            .finish_non_exhaustive()
    }
}

/// Checks that `buf[..len]` exists, that `buf` has `extra` bytes of room
/// after it, and that the grown length still fits libsrtp's `int`.
fn check_room(buf: &[u8], len: usize, extra: usize) -> Result<c_int, LibsrtpError> {
    let end = len.checked_add(extra).ok_or(LibsrtpError::BAD_PARAM)?;
    if end > buf.len() {
        return Err(LibsrtpError::BAD_PARAM);
    }
    c_int::try_from(end).map_err(|_| LibsrtpError::BAD_PARAM)?;
    c_int::try_from(len).map_err(|_| LibsrtpError::BAD_PARAM)
}

/// Signature shared by `srtp_protect`, `srtp_unprotect`, and their RTCP
/// counterparts in libsrtp 2.
type PacketFn = unsafe extern "C" fn(
    sys::srtp_t,
    *mut std::os::raw::c_void,
    *mut c_int,
) -> sys::srtp_err_status_t;

impl LibSrtp {
    /// Creates a session with one wildcard stream.
    ///
    /// `master_key` and `master_salt` must have exactly
    /// [`LibsrtpProfile::master_key_len`] / [`LibsrtpProfile::master_salt_len`]
    /// bytes. `replay_window` is libsrtp's `window_size` and must be in
    /// `64..=0x7fff`. `allow_repeat_tx` lets an outbound session protect the
    /// same index twice (retransmissions). Any violation gives
    /// `srtp_err_status_bad_param`.
    pub fn new(
        profile: LibsrtpProfile,
        direction: Direction,
        master_key: &[u8],
        master_salt: &[u8],
        replay_window: usize,
        allow_repeat_tx: bool,
    ) -> Result<Self, LibsrtpError> {
        if master_key.len() != profile.master_key_len()
            || master_salt.len() != profile.master_salt_len()
            || !(64..=0x7fff).contains(&replay_window)
        {
            return Err(LibsrtpError::BAD_PARAM);
        }
        ensure_init()?;

        // libsrtp wants key ‖ salt in one buffer; it copies it during
        // srtp_create, after which the temporary copy is wiped.
        let mut key_and_salt = [0u8; MAX_KEY_AND_SALT_LEN];
        let key_len = master_key.len();
        key_and_salt[..key_len].copy_from_slice(master_key);
        key_and_salt[key_len..key_len + master_salt.len()].copy_from_slice(master_salt);

        // SAFETY: srtp_policy_t is a plain C struct of integers, raw pointers
        // and nested such structs, for which all-zero bytes are a valid value
        // (the same `memset(&policy, 0, ...)` libsrtp's own tests do).
        let mut policy: sys::srtp_policy_t = unsafe { std::mem::zeroed() };
        profile.set_crypto_policy(&mut policy.rtp, false);
        profile.set_crypto_policy(&mut policy.rtcp, true);
        policy.ssrc.type_ = match direction {
            Direction::Inbound => sys::srtp_ssrc_type_t_ssrc_any_inbound,
            Direction::Outbound => sys::srtp_ssrc_type_t_ssrc_any_outbound,
        };
        policy.ssrc.value = 0;
        policy.key = key_and_salt.as_mut_ptr();
        policy.keys = ptr::null_mut();
        policy.num_master_keys = 0;
        policy.ekt = ptr::null_mut();
        // Range-checked above (64..=0x7fff), so this cannot truncate.
        policy.window_size = replay_window as std::os::raw::c_ulong;
        policy.allow_repeat_tx = c_int::from(allow_repeat_tx);
        policy.enc_xtn_hdr = ptr::null_mut();
        policy.enc_xtn_hdr_count = 0;
        policy.next = ptr::null_mut();

        let mut session: sys::srtp_t = ptr::null_mut();
        // SAFETY: `session` is a valid out-pointer; `policy` is fully
        // initialised, its `next`/`ekt`/`keys`/`enc_xtn_hdr` are null, and
        // `policy.key` points to `key_and_salt`, which outlives this call and
        // holds at least as many bytes as the policy's cipher key length
        // (46 >= 30/44/46/28). libsrtp copies what it needs and keeps no
        // pointer into `policy` or `key_and_salt`.
        let status = unsafe { sys::srtp_create(&mut session, &policy) };
        key_and_salt.zeroize();
        LibsrtpError::check(status)?;
        let session = NonNull::new(session).ok_or(LibsrtpError::FAIL)?;
        Ok(Self {
            session,
            profile,
            direction,
        })
    }

    /// The profile this session was created with.
    pub fn profile(&self) -> LibsrtpProfile {
        self.profile
    }

    /// The direction this session was created with.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Runs one of libsrtp's in-place packet functions on `buf[..len]` after
    /// checking that `buf` has `room` spare bytes behind the packet.
    fn run(
        &mut self,
        f: PacketFn,
        buf: &mut [u8],
        len: usize,
        room: usize,
    ) -> Result<usize, LibsrtpError> {
        let mut c_len = check_room(buf, len, room)?;
        // SAFETY: `self.session` is a live session owned by `self` (and
        // `&mut self` rules out concurrent use). `buf` is valid for writes of
        // `buf.len()` bytes, and check_room guaranteed
        // `len + room <= buf.len()` where `room` is the most these libsrtp 2
        // functions write past `len` when no MKI is configured (the tag, plus
        // the 4-byte SRTCP index for RTCP; unprotect only shrinks).
        let status = unsafe { f(self.session.as_ptr(), buf.as_mut_ptr().cast(), &mut c_len) };
        LibsrtpError::check(status)?;
        let new_len = usize::try_from(c_len).map_err(|_| LibsrtpError::FAIL)?;
        debug_assert!(new_len <= len + room);
        Ok(new_len)
    }

    /// Protects the RTP packet in `buf[..len]` in place and returns the SRTP
    /// length (`len + rtp_tag_len`).
    ///
    /// `buf` must have room for the tag: `buf.len() >= len +
    /// profile.rtp_tag_len()`, else `srtp_err_status_bad_param`. Without an
    /// MKI, libsrtp 2 writes nothing past the tag (it does not need the full
    /// `SRTP_MAX_TRAILER_LEN`). No heap allocation.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, LibsrtpError> {
        let room = self.profile.rtp_overhead();
        self.run(sys::srtp_protect, buf, len, room)
    }

    /// Verifies and decrypts the SRTP packet in `buf[..len]` in place and
    /// returns the RTP length. Replays give `srtp_err_status_replay_fail` /
    /// `_replay_old`, a bad tag `srtp_err_status_auth_fail`.
    pub fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, LibsrtpError> {
        self.run(sys::srtp_unprotect, buf, len, 0)
    }

    /// Protects the RTCP compound packet in `buf[..len]` in place and returns
    /// the SRTCP length (`len + 4 + rtcp_tag_len`).
    ///
    /// `buf` must have room for the SRTCP index and tag: `buf.len() >= len +
    /// profile.rtcp_overhead()`, else `srtp_err_status_bad_param`.
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, LibsrtpError> {
        let room = self.profile.rtcp_overhead();
        self.run(sys::srtp_protect_rtcp, buf, len, room)
    }

    /// Verifies and decrypts the SRTCP packet in `buf[..len]` in place and
    /// returns the RTCP length.
    pub fn unprotect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, LibsrtpError> {
        self.run(sys::srtp_unprotect_rtcp, buf, len, 0)
    }

    /// Sets the rollover counter for `ssrc` (`srtp_set_stream_roc`).
    ///
    /// In libsrtp 2.3.0 this only works once the stream for `ssrc` exists,
    /// i.e. after a packet with that SSRC went through this session
    /// (otherwise `srtp_err_status_bad_param`). The value is a *pending* ROC
    /// used to estimate the next packet's index (0 means "none"); the
    /// AES-GCM protect path of 2.3.0 ignores it.
    pub fn set_roc(&mut self, ssrc: u32, roc: u32) -> Result<(), LibsrtpError> {
        // SAFETY: `self.session` is a live session owned by `self`;
        // srtp_set_stream_roc only looks the stream up and stores `roc`.
        LibsrtpError::check(unsafe { sys::srtp_set_stream_roc(self.session.as_ptr(), ssrc, roc) })
    }

    /// Returns the rollover counter of the stream for `ssrc`
    /// (`srtp_get_stream_roc`): the ROC of the highest index seen so far,
    /// not a pending one set with [`LibSrtp::set_roc`]. Errors with
    /// `srtp_err_status_bad_param` if no packet with that SSRC has been
    /// processed yet.
    pub fn get_roc(&self, ssrc: u32) -> Result<u32, LibsrtpError> {
        let mut roc = 0u32;
        // SAFETY: `self.session` is a live session owned by `self`;
        // srtp_get_stream_roc only reads the stream list and writes the ROC
        // through the valid out-pointer `&mut roc`. libsrtp takes `srtp_t`
        // (non-const) but does not modify the session here.
        let status = unsafe { sys::srtp_get_stream_roc(self.session.as_ptr(), ssrc, &mut roc) };
        LibsrtpError::check(status)?;
        Ok(roc)
    }

    /// libsrtp's version string (`srtp_get_version_string`), e.g.
    /// `"libsrtp2 2.3.0"`.
    pub fn version_string() -> String {
        // SAFETY: srtp_get_version_string needs no initialisation and returns
        // a pointer to a static NUL-terminated string literal.
        let s = unsafe { sys::srtp_get_version_string() };
        if s.is_null() {
            return String::new();
        }
        // SAFETY: `s` is non-null and points to a static NUL-terminated C
        // string that lives for the whole program.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }
}

impl Drop for LibSrtp {
    fn drop(&mut self) {
        // SAFETY: `self.session` came from a successful srtp_create, is owned
        // exclusively by `self`, and is deallocated exactly once, here.
        let status = unsafe { sys::srtp_dealloc(self.session.as_ptr()) };
        debug_assert_eq!(status, sys::srtp_err_status_t_srtp_err_status_ok);
    }
}
