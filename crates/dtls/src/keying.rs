//! DTLS-SRTP keying (RFC 5764 §4.2): the exported `EXTRACTOR-dtls_srtp` block and its split
//! into the two SRTP master keys.
//!
//! The exporter yields `2 * (key_len + salt_len)` bytes laid out as
//!
//! ```text
//! client_write_SRTP_master_key[key_len]
//! server_write_SRTP_master_key[key_len]
//! client_write_SRTP_master_salt[salt_len]
//! server_write_SRTP_master_salt[salt_len]
//! ```
//!
//! The client protects what it sends with the client write key and salt, the server with the
//! server write key and salt; each side unprotects with the other's.
//!
//! Key material is zeroized when dropped and never printed: `Debug` shows only lengths and the
//! profile. The raw block is available on purpose ([`ExportedKeyingMaterial::as_bytes`],
//! [`ExportedKeyingMaterial::to_hex`]) for the handshake lab, which compares it with other
//! stacks; nothing in this crate logs it.

use core::fmt;

use secrelay_srtp::{MasterKey, Profile};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::endpoint::Role;

/// The exporter label for DTLS-SRTP (RFC 5764 §4.2).
pub const EXPORTER_LABEL: &str = "EXTRACTOR-dtls_srtp";

/// Why a keying block could not be turned into SRTP keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyingError {
    /// The block is not `2 * (key_len + salt_len)` bytes long for the profile.
    Length {
        /// The profile the block was exported for.
        profile: Profile,
        /// Expected length in bytes.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// The SRTP crate refused the key or salt (a profile without DTLS-SRTP keys).
    Srtp,
}

impl fmt::Display for KeyingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyingError::Length {
                profile,
                expected,
                got,
            } => write!(
                f,
                "DTLS-SRTP keying block for {profile} must be {expected} bytes, got {got}"
            ),
            KeyingError::Srtp => write!(f, "the SRTP crate refused the exported key"),
        }
    }
}

impl std::error::Error for KeyingError {}

/// Length in bytes of the `EXTRACTOR-dtls_srtp` block for `profile`.
pub const fn keying_material_len(profile: Profile) -> usize {
    2 * (profile.key_len() + profile.salt_len())
}

/// The raw `EXTRACTOR-dtls_srtp` block, wiped on drop.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct ExportedKeyingMaterial(Vec<u8>);

impl ExportedKeyingMaterial {
    /// Wraps exported bytes (copied; the caller wipes its own copy).
    pub fn new(bytes: &[u8]) -> Self {
        ExportedKeyingMaterial(bytes.to_vec())
    }

    /// The block's bytes. Secret: do not log.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The block as lowercase hex, for the handshake lab's comparisons. Secret: do not log.
    pub fn to_hex(&self) -> Zeroizing<String> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(self.0.len() * 2);
        for b in &self.0 {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0x0f)] as char);
        }
        Zeroizing::new(s)
    }

    /// Length of the block in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ExportedKeyingMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExportedKeyingMaterial({} bytes)", self.0.len())
    }
}

/// The four parts of a keying block (RFC 5764 §4.2), each a view into the block.
#[derive(Clone, Copy)]
pub struct KeyingParts<'a> {
    /// `client_write_SRTP_master_key`.
    pub client_write_key: &'a [u8],
    /// `server_write_SRTP_master_key`.
    pub server_write_key: &'a [u8],
    /// `client_write_SRTP_master_salt`.
    pub client_write_salt: &'a [u8],
    /// `server_write_SRTP_master_salt`.
    pub server_write_salt: &'a [u8],
}

impl fmt::Debug for KeyingParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyingParts")
            .field("key_len", &self.client_write_key.len())
            .field("salt_len", &self.client_write_salt.len())
            .finish()
    }
}

/// Splits a keying block into client/server write keys and salts.
pub fn split(profile: Profile, block: &[u8]) -> Result<KeyingParts<'_>, KeyingError> {
    let (k, s) = (profile.key_len(), profile.salt_len());
    let expected = 2 * (k + s);
    if block.len() != expected {
        return Err(KeyingError::Length {
            profile,
            expected,
            got: block.len(),
        });
    }
    Ok(KeyingParts {
        client_write_key: &block[..k],
        server_write_key: &block[k..2 * k],
        client_write_salt: &block[2 * k..2 * k + s],
        server_write_salt: &block[2 * k + s..],
    })
}

/// SRTP master keys for one DTLS-SRTP association.
///
/// `local` is what this endpoint protects its outgoing SRTP/SRTCP with (the client write key for
/// the client role, the server write key for the server role); `remote` is what it unprotects
/// the peer's packets with. So one side's `local` is the other side's `remote`.
#[derive(Clone)]
pub struct SrtpKeys {
    /// The negotiated SRTP protection profile.
    pub profile: Profile,
    /// The key this endpoint protects with.
    pub local: MasterKey,
    /// The key this endpoint unprotects the peer's packets with.
    pub remote: MasterKey,
    exported: ExportedKeyingMaterial,
}

impl SrtpKeys {
    /// Builds the keys for `role` from an exported block.
    pub fn from_exported(
        profile: Profile,
        role: Role,
        exported: ExportedKeyingMaterial,
    ) -> Result<SrtpKeys, KeyingError> {
        let parts = split(profile, exported.as_bytes())?;
        let client = MasterKey::new(profile, parts.client_write_key, parts.client_write_salt)
            .map_err(|_| KeyingError::Srtp)?;
        let server = MasterKey::new(profile, parts.server_write_key, parts.server_write_salt)
            .map_err(|_| KeyingError::Srtp)?;
        let (local, remote) = match role {
            Role::Client => (client, server),
            Role::Server => (server, client),
        };
        Ok(SrtpKeys {
            profile,
            local,
            remote,
            exported,
        })
    }

    /// The raw `EXTRACTOR-dtls_srtp` block these keys were split from (for the handshake lab).
    pub fn exported(&self) -> &ExportedKeyingMaterial {
        &self.exported
    }
}

impl fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrtpKeys")
            .field("profile", &self.profile)
            .field("exported", &self.exported)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: usize) -> Vec<u8> {
        (0..len).map(|i| i as u8).collect()
    }

    #[test]
    fn split_cm_sha1_80_fixed_block() {
        let p = Profile::AesCm128HmacSha1_80;
        assert_eq!(keying_material_len(p), 60);
        let b = block(60);
        let parts = split(p, &b).unwrap();
        assert_eq!(parts.client_write_key, &b[0..16]);
        assert_eq!(parts.server_write_key, &b[16..32]);
        assert_eq!(parts.client_write_salt, &b[32..46]);
        assert_eq!(parts.server_write_salt, &b[46..60]);
    }

    #[test]
    fn split_gcm_fixed_blocks() {
        let p = Profile::AeadAes128Gcm;
        assert_eq!(keying_material_len(p), 56);
        let b = block(56);
        let parts = split(p, &b).unwrap();
        assert_eq!(parts.client_write_key, &b[0..16]);
        assert_eq!(parts.server_write_key, &b[16..32]);
        assert_eq!(parts.client_write_salt, &b[32..44]);
        assert_eq!(parts.server_write_salt, &b[44..56]);

        let p = Profile::AeadAes256Gcm;
        assert_eq!(keying_material_len(p), 88);
        let b = block(88);
        let parts = split(p, &b).unwrap();
        assert_eq!(parts.client_write_key, &b[0..32]);
        assert_eq!(parts.server_write_key, &b[32..64]);
        assert_eq!(parts.client_write_salt, &b[64..76]);
        assert_eq!(parts.server_write_salt, &b[76..88]);
    }

    #[test]
    fn roles_mirror_each_other() {
        let p = Profile::AesCm128HmacSha1_32;
        let b = ExportedKeyingMaterial::new(&block(60));
        let c = SrtpKeys::from_exported(p, Role::Client, b.clone()).unwrap();
        let s = SrtpKeys::from_exported(p, Role::Server, b).unwrap();
        assert_eq!(c.local.key(), &block(60)[0..16]);
        assert_eq!(c.local.salt(), &block(60)[32..46]);
        assert_eq!(c.remote.key(), &block(60)[16..32]);
        assert_eq!(c.remote.salt(), &block(60)[46..60]);
        assert_eq!(c.local.concatenated(), s.remote.concatenated());
        assert_eq!(c.remote.concatenated(), s.local.concatenated());
        assert_eq!(c.exported().to_hex().len(), 120);
        assert!(c.exported().to_hex().starts_with("000102030405"));
    }

    #[test]
    fn wrong_length_is_an_error() {
        let p = Profile::AeadAes128Gcm;
        assert_eq!(
            split(p, &block(60)).unwrap_err(),
            KeyingError::Length {
                profile: p,
                expected: 56,
                got: 60
            }
        );
        let e = SrtpKeys::from_exported(p, Role::Client, ExportedKeyingMaterial::new(&[1; 3]));
        assert!(e.is_err());
    }

    #[test]
    fn debug_does_not_print_keys() {
        let p = Profile::AesCm128HmacSha1_80;
        let keys =
            SrtpKeys::from_exported(p, Role::Client, ExportedKeyingMaterial::new(&[0xab; 60]))
                .unwrap();
        let s = format!("{keys:?}");
        assert!(!s.contains("ab"), "{s}");
        assert!(!s.contains("171"), "{s}");
    }
}
