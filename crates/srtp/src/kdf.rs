//! Session key derivation (RFC 3711 §4.3, key derivation rate 0; RFC 6188 for AES-256;
//! RFC 7714 §11 for GCM's 96-bit salts).

use zeroize::Zeroizing;

use crate::error::ConfigError;
use crate::keys::MasterKey;
use crate::provider::CryptoProvider;

/// Key derivation labels (RFC 3711 §4.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Label {
    /// SRTP encryption key.
    RtpEncryption = 0x00,
    /// SRTP authentication key.
    RtpAuthentication = 0x01,
    /// SRTP salt.
    RtpSalt = 0x02,
    /// SRTCP encryption key.
    RtcpEncryption = 0x03,
    /// SRTCP authentication key.
    RtcpAuthentication = 0x04,
    /// SRTCP salt.
    RtcpSalt = 0x05,
}

/// Derives `out.len()` bytes for `label` from the master key: the AES-CM PRF keyed with the
/// master key, run from IV = (master salt ⊕ (label ‖ r=0) at byte 7) · 2^16.
/// A 12-byte (GCM) master salt is padded with two zero bytes on the right.
pub fn derive(
    provider: &dyn CryptoProvider,
    master: &MasterKey,
    label: Label,
    out: &mut [u8],
) -> Result<(), ConfigError> {
    let prf = provider
        .aes_ctr(master.key())
        .map_err(|e| ConfigError::Provider(e.0))?;
    let mut iv = [0u8; 16];
    iv[..master.salt().len()].copy_from_slice(master.salt());
    iv[7] ^= label as u8;
    iv[14] = 0;
    iv[15] = 0;
    out.fill(0);
    prf.apply_keystream(&iv, out);
    Ok(())
}

/// The derived session keys for one direction of RTP or RTCP.
pub(crate) struct SessionKeyBytes {
    pub enc: Zeroizing<Vec<u8>>,
    pub auth: Zeroizing<Vec<u8>>,
    pub salt: Zeroizing<Vec<u8>>,
}

pub(crate) fn derive_session(
    provider: &dyn CryptoProvider,
    master: &MasterKey,
    rtcp: bool,
) -> Result<SessionKeyBytes, ConfigError> {
    let p = master.profile();
    let (le, la, ls) = if rtcp {
        (
            Label::RtcpEncryption,
            Label::RtcpAuthentication,
            Label::RtcpSalt,
        )
    } else {
        (
            Label::RtpEncryption,
            Label::RtpAuthentication,
            Label::RtpSalt,
        )
    };
    let mut enc = Zeroizing::new(vec![0u8; p.session_key_len()]);
    let mut auth = Zeroizing::new(vec![0u8; p.auth_key_len()]);
    let mut salt = Zeroizing::new(vec![0u8; p.salt_len()]);
    if !enc.is_empty() {
        derive(provider, master, le, &mut enc)?;
    }
    if !auth.is_empty() {
        derive(provider, master, la, &mut auth)?;
    }
    derive(provider, master, ls, &mut salt)?;
    Ok(SessionKeyBytes { enc, auth, salt })
}
