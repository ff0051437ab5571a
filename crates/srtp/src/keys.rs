//! Master keys and their SDES inline form (RFC 4568 §6.1).
//!
//! Key material is zeroized when dropped and never printed: `Debug` shows only lengths.

use base64::Engine as _;
use core::fmt;
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::error::ConfigError;
use crate::profile::Profile;

/// A master key and master salt for one profile.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct MasterKey {
    #[zeroize(skip)]
    profile: Profile,
    key: [u8; 32],
    salt: [u8; 14],
}

impl MasterKey {
    /// Builds a master key from its parts; lengths must match the profile.
    pub fn new(profile: Profile, key: &[u8], salt: &[u8]) -> Result<Self, ConfigError> {
        if key.len() != profile.key_len() {
            return Err(ConfigError::KeyLength {
                profile,
                expected: profile.key_len(),
                got: key.len(),
            });
        }
        if salt.len() != profile.salt_len() {
            return Err(ConfigError::SaltLength {
                profile,
                expected: profile.salt_len(),
                got: salt.len(),
            });
        }
        let mut mk = MasterKey {
            profile,
            key: [0; 32],
            salt: [0; 14],
        };
        mk.key[..key.len()].copy_from_slice(key);
        mk.salt[..salt.len()].copy_from_slice(salt);
        Ok(mk)
    }

    /// Builds a master key from key‖salt concatenated (the SDES and DTLS-SRTP layout).
    pub fn from_concatenated(profile: Profile, key_and_salt: &[u8]) -> Result<Self, ConfigError> {
        let want = profile.key_len() + profile.salt_len();
        if key_and_salt.len() != want {
            return Err(ConfigError::KeyLength {
                profile,
                expected: want,
                got: key_and_salt.len(),
            });
        }
        let (k, s) = key_and_salt.split_at(profile.key_len());
        Self::new(profile, k, s)
    }

    /// Parses the SDES `inline:` key parameter of an `a=crypto` line
    /// (`inline:<base64 key‖salt>[|lifetime][|MKI:length]`); the `inline:` prefix is optional.
    ///
    /// A lifetime is accepted (keys are not re-keyed by secrelay, so it is only checked for
    /// form); an MKI is refused with [`ConfigError::MkiUnsupported`].
    pub fn from_sdes_inline(profile: Profile, text: &str) -> Result<Self, ConfigError> {
        let text = text.trim();
        let text = text.strip_prefix("inline:").unwrap_or(text);
        let mut parts = text.split('|');
        let b64 = parts.next().unwrap_or("");
        for extra in parts {
            if extra.contains(':') {
                return Err(ConfigError::MkiUnsupported);
            }
            let lifetime_ok = match extra.strip_prefix("2^") {
                Some(exp) => exp.parse::<u8>().is_ok_and(|e| e <= 48),
                None => extra.parse::<u64>().is_ok(),
            };
            if !lifetime_ok {
                return Err(ConfigError::BadSdes("lifetime is neither a number nor 2^N"));
            }
        }
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64.as_bytes()))
            .map_err(|_| ConfigError::BadSdes("key is not valid base64"))?;
        let result = Self::from_concatenated(profile, &raw);
        raw.zeroize();
        result
    }

    /// The SDES inline form, `inline:<base64 key‖salt>`.
    ///
    /// The returned string holds the key: do not log it.
    pub fn to_sdes_inline(&self) -> String {
        let mut raw = self.concatenated();
        let s = format!(
            "inline:{}",
            base64::engine::general_purpose::STANDARD.encode(&raw)
        );
        raw.zeroize();
        s
    }

    /// key‖salt concatenated. The caller must zeroize the result.
    pub fn concatenated(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.profile.key_len() + self.profile.salt_len());
        v.extend_from_slice(self.key());
        v.extend_from_slice(self.salt());
        v
    }

    /// The profile this key is for.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The master key bytes.
    pub fn key(&self) -> &[u8] {
        &self.key[..self.profile.key_len()]
    }

    /// The master salt bytes.
    pub fn salt(&self) -> &[u8] {
        &self.salt[..self.profile.salt_len()]
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKey")
            .field("profile", &self.profile)
            .field(
                "key",
                &format_args!("<{} bytes redacted>", self.profile.key_len()),
            )
            .field(
                "salt",
                &format_args!("<{} bytes redacted>", self.profile.salt_len()),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdes_round_trip_and_debug_redacts() {
        let p = Profile::AesCm128HmacSha1_80;
        // RFC 4568 §6.1 example key.
        let mk =
            MasterKey::from_sdes_inline(p, "inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|2^20")
                .unwrap();
        assert_eq!(&mk.key()[..4], b"YS__");
        assert_eq!(
            mk.to_sdes_inline(),
            "inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz"
        );
        let dbg = format!("{mk:?}");
        assert!(dbg.contains("redacted") && !dbg.contains("YS__"));
    }

    #[test]
    fn sdes_errors_say_what_is_wrong() {
        let p = Profile::AesCm128HmacSha1_80;
        assert!(matches!(
            MasterKey::from_sdes_inline(p, "inline:AAAA"),
            Err(ConfigError::KeyLength {
                expected: 30,
                got: 3,
                ..
            })
        ));
        assert!(matches!(
            MasterKey::from_sdes_inline(p, "inline:!!!"),
            Err(ConfigError::BadSdes(_))
        ));
        assert!(matches!(
            MasterKey::from_sdes_inline(
                p,
                "inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|2^20|1:4"
            ),
            Err(ConfigError::MkiUnsupported)
        ));
        // A GCM key is 16 + 12 bytes.
        assert!(MasterKey::from_sdes_inline(
            Profile::AeadAes128Gcm,
            "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz"
        )
        .is_err());
    }
}
