//! SRTP protection profiles and their parameters.

use core::fmt;
use core::str::FromStr;

/// An SRTP protection profile, named as in SDP `a=crypto` (RFC 4568, RFC 6188, RFC 7714).
///
/// DTLS-SRTP negotiates only the profiles with a [`Profile::dtls_profile`]; the others are
/// SDES suites (AES-192 and AES-256 counter mode, AES in f8 mode, and the NULL cipher with a
/// 32-bit tag that rtpengine offers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Profile {
    /// AES-128 counter mode, HMAC-SHA1 with an 80-bit tag (RFC 3711 default, RFC 4568).
    AesCm128HmacSha1_80,
    /// AES-128 counter mode, HMAC-SHA1 with a 32-bit SRTP tag (SRTCP keeps 80 bits).
    AesCm128HmacSha1_32,
    /// AES-256 counter mode, HMAC-SHA1 with an 80-bit tag (RFC 6188).
    AesCm256HmacSha1_80,
    /// AES-256 counter mode, HMAC-SHA1 with a 32-bit SRTP tag (RFC 6188; SRTCP keeps 80 bits).
    AesCm256HmacSha1_32,
    /// AES-128 in Galois/Counter Mode with a 16-byte tag (RFC 7714).
    AeadAes128Gcm,
    /// AES-256 in Galois/Counter Mode with a 16-byte tag (RFC 7714).
    AeadAes256Gcm,
    /// No encryption, HMAC-SHA1 with an 80-bit tag: authentication only (for measurements,
    /// or where an operator enables it).
    NullHmacSha1_80,
    /// AES-192 counter mode, HMAC-SHA1 with an 80-bit tag (RFC 6188).
    AesCm192HmacSha1_80,
    /// AES-192 counter mode, HMAC-SHA1 with a 32-bit SRTP tag (RFC 6188; SRTCP keeps 80 bits).
    AesCm192HmacSha1_32,
    /// AES-128 in f8 mode, HMAC-SHA1 with an 80-bit tag (RFC 3711 §4.1.2, RFC 4568).
    F8Aes128HmacSha1_80,
    /// AES-128 in f8 mode, HMAC-SHA1 with a 32-bit SRTP tag (as rtpengine and libzrtp offer
    /// it; SRTCP keeps 80 bits).
    F8Aes128HmacSha1_32,
    /// No encryption, HMAC-SHA1 with a 32-bit SRTP tag (as rtpengine offers it).
    NullHmacSha1_32,
}

/// The cipher a profile encrypts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CipherKind {
    Null,
    AesCm,
    AesF8,
    AesGcm,
}

impl Profile {
    /// Every profile, in a stable order.
    pub const ALL: [Profile; 12] = [
        Profile::AesCm128HmacSha1_80,
        Profile::AesCm128HmacSha1_32,
        Profile::AesCm256HmacSha1_80,
        Profile::AesCm256HmacSha1_32,
        Profile::AeadAes128Gcm,
        Profile::AeadAes256Gcm,
        Profile::NullHmacSha1_80,
        Profile::AesCm192HmacSha1_80,
        Profile::AesCm192HmacSha1_32,
        Profile::F8Aes128HmacSha1_80,
        Profile::F8Aes128HmacSha1_32,
        Profile::NullHmacSha1_32,
    ];

    /// The SDP `a=crypto` suite name, e.g. `AES_CM_128_HMAC_SHA1_80`.
    pub const fn sdp_name(self) -> &'static str {
        match self {
            Profile::AesCm128HmacSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            Profile::AesCm128HmacSha1_32 => "AES_CM_128_HMAC_SHA1_32",
            Profile::AesCm256HmacSha1_80 => "AES_256_CM_HMAC_SHA1_80",
            Profile::AesCm256HmacSha1_32 => "AES_256_CM_HMAC_SHA1_32",
            Profile::AeadAes128Gcm => "AEAD_AES_128_GCM",
            Profile::AeadAes256Gcm => "AEAD_AES_256_GCM",
            Profile::NullHmacSha1_80 => "NULL_HMAC_SHA1_80",
            Profile::AesCm192HmacSha1_80 => "AES_192_CM_HMAC_SHA1_80",
            Profile::AesCm192HmacSha1_32 => "AES_192_CM_HMAC_SHA1_32",
            Profile::F8Aes128HmacSha1_80 => "F8_128_HMAC_SHA1_80",
            Profile::F8Aes128HmacSha1_32 => "F8_128_HMAC_SHA1_32",
            Profile::NullHmacSha1_32 => "NULL_HMAC_SHA1_32",
        }
    }

    /// The DTLS-SRTP protection profile name and IANA identifier (RFC 5764, RFC 7714), where
    /// one is assigned.
    pub const fn dtls_profile(self) -> Option<(&'static str, u16)> {
        match self {
            Profile::AesCm128HmacSha1_80 => Some(("SRTP_AES128_CM_SHA1_80", 0x0001)),
            Profile::AesCm128HmacSha1_32 => Some(("SRTP_AES128_CM_SHA1_32", 0x0002)),
            Profile::NullHmacSha1_80 => Some(("SRTP_NULL_SHA1_80", 0x0005)),
            Profile::AeadAes128Gcm => Some(("SRTP_AEAD_AES_128_GCM", 0x0007)),
            Profile::AeadAes256Gcm => Some(("SRTP_AEAD_AES_256_GCM", 0x0008)),
            Profile::AesCm256HmacSha1_80
            | Profile::AesCm256HmacSha1_32
            | Profile::AesCm192HmacSha1_80
            | Profile::AesCm192HmacSha1_32
            | Profile::F8Aes128HmacSha1_80
            | Profile::F8Aes128HmacSha1_32
            | Profile::NullHmacSha1_32 => None,
        }
    }

    /// The profile with this DTLS-SRTP identifier, if secrelay implements it.
    pub fn from_dtls_id(id: u16) -> Option<Profile> {
        Profile::ALL
            .into_iter()
            .find(|p| p.dtls_profile().map(|(_, i)| i) == Some(id))
    }

    /// Master (and session) encryption key length in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            Profile::AesCm256HmacSha1_80
            | Profile::AesCm256HmacSha1_32
            | Profile::AeadAes256Gcm => 32,
            Profile::AesCm192HmacSha1_80 | Profile::AesCm192HmacSha1_32 => 24,
            _ => 16,
        }
    }

    /// Master (and session) salt length in bytes: 14 for the counter-mode profiles, 12 for GCM.
    pub const fn salt_len(self) -> usize {
        match self {
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => 12,
            _ => 14,
        }
    }

    /// Length of the SRTP authentication tag in bytes.
    pub const fn rtp_tag_len(self) -> usize {
        match self {
            Profile::AesCm128HmacSha1_32
            | Profile::AesCm256HmacSha1_32
            | Profile::AesCm192HmacSha1_32
            | Profile::F8Aes128HmacSha1_32
            | Profile::NullHmacSha1_32 => 4,
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => 16,
            _ => 10,
        }
    }

    /// Length of the SRTCP authentication tag in bytes (80 bits for every HMAC profile,
    /// RFC 4568 §6.2; 16 bytes for GCM).
    pub const fn rtcp_tag_len(self) -> usize {
        match self {
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => 16,
            _ => 10,
        }
    }

    /// How many bytes SRTP protection adds to an RTP packet.
    pub const fn rtp_overhead(self) -> usize {
        self.rtp_tag_len()
    }

    /// How many bytes SRTCP protection adds to an RTCP packet (tag and the 4-byte E‖index word).
    pub const fn rtcp_overhead(self) -> usize {
        self.rtcp_tag_len() + 4
    }

    /// Whether this is an AEAD (GCM) profile.
    pub const fn is_aead(self) -> bool {
        matches!(self, Profile::AeadAes128Gcm | Profile::AeadAes256Gcm)
    }

    /// Whether the payload is encrypted (false only for the NULL profiles).
    pub const fn encrypts(self) -> bool {
        !matches!(self, Profile::NullHmacSha1_80 | Profile::NullHmacSha1_32)
    }

    /// Whether the payload is encrypted with AES in f8 mode (each block chained to the one
    /// before: engines that run AES-CM's blocks side by side cannot take these profiles).
    pub const fn is_f8(self) -> bool {
        matches!(
            self,
            Profile::F8Aes128HmacSha1_80 | Profile::F8Aes128HmacSha1_32
        )
    }

    pub(crate) const fn cipher(self) -> CipherKind {
        match self {
            Profile::NullHmacSha1_80 | Profile::NullHmacSha1_32 => CipherKind::Null,
            Profile::AeadAes128Gcm | Profile::AeadAes256Gcm => CipherKind::AesGcm,
            Profile::F8Aes128HmacSha1_80 | Profile::F8Aes128HmacSha1_32 => CipherKind::AesF8,
            _ => CipherKind::AesCm,
        }
    }

    /// Session encryption key length (0 for NULL).
    pub(crate) const fn session_key_len(self) -> usize {
        match self.cipher() {
            CipherKind::Null => 0,
            _ => self.key_len(),
        }
    }

    /// Session authentication key length (20 bytes for HMAC-SHA1, none for GCM).
    pub(crate) const fn auth_key_len(self) -> usize {
        if self.is_aead() {
            0
        } else {
            20
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sdp_name())
    }
}

/// The name given does not name an SRTP profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProfile(pub String);

impl fmt::Display for UnknownProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown SRTP profile `{}` (expected one of ", self.0)?;
        for (i, p) in Profile::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(p.sdp_name())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for UnknownProfile {}

impl FromStr for Profile {
    type Err = UnknownProfile;

    /// Accepts the SDP names (`AES_CM_128_HMAC_SHA1_80`), the DTLS-SRTP names
    /// (`SRTP_AES128_CM_SHA1_80`), RFC 6188's older `AES_CM_256_…` spelling, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let up = s.trim().to_ascii_uppercase();
        let found = Profile::ALL
            .into_iter()
            .find(|p| p.sdp_name() == up || p.dtls_profile().map(|(n, _)| n) == Some(up.as_str()));
        if let Some(p) = found {
            return Ok(p);
        }
        match up.as_str() {
            "AES_CM_256_HMAC_SHA1_80" => Ok(Profile::AesCm256HmacSha1_80),
            "AES_CM_256_HMAC_SHA1_32" => Ok(Profile::AesCm256HmacSha1_32),
            "SRTP_AEAD_AES_128_GCM_16" | "AEAD_AES_128_GCM_16" => Ok(Profile::AeadAes128Gcm),
            "SRTP_AEAD_AES_256_GCM_16" | "AEAD_AES_256_GCM_16" => Ok(Profile::AeadAes256Gcm),
            "SRTP_NULL_HMAC_SHA1_80" => Ok(Profile::NullHmacSha1_80),
            "SRTP_NULL_HMAC_SHA1_32" => Ok(Profile::NullHmacSha1_32),
            "AES_CM_192_HMAC_SHA1_80" => Ok(Profile::AesCm192HmacSha1_80),
            "AES_CM_192_HMAC_SHA1_32" => Ok(Profile::AesCm192HmacSha1_32),
            _ => Err(UnknownProfile(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Profile::ALL {
            assert_eq!(p.sdp_name().parse::<Profile>().unwrap(), p);
            assert_eq!(p.sdp_name().to_lowercase().parse::<Profile>().unwrap(), p);
            if let Some((name, id)) = p.dtls_profile() {
                assert_eq!(name.parse::<Profile>().unwrap(), p);
                assert_eq!(Profile::from_dtls_id(id), Some(p));
            }
        }
        let err = "AES_CM_129".parse::<Profile>().unwrap_err();
        assert!(err.to_string().contains("AES_CM_129"));
    }

    #[test]
    fn tag_lengths_follow_the_rfcs() {
        assert_eq!(Profile::AesCm128HmacSha1_32.rtp_tag_len(), 4);
        assert_eq!(Profile::AesCm128HmacSha1_32.rtcp_tag_len(), 10);
        assert_eq!(Profile::AeadAes256Gcm.rtp_tag_len(), 16);
        assert_eq!(Profile::AeadAes128Gcm.salt_len(), 12);
        assert_eq!(Profile::AesCm256HmacSha1_80.key_len(), 32);
        assert_eq!(Profile::AesCm192HmacSha1_32.key_len(), 24);
        assert_eq!(Profile::AesCm192HmacSha1_32.rtp_tag_len(), 4);
        assert_eq!(Profile::F8Aes128HmacSha1_80.rtp_tag_len(), 10);
        assert_eq!(Profile::F8Aes128HmacSha1_32.rtcp_tag_len(), 10);
        assert_eq!(Profile::NullHmacSha1_32.rtp_tag_len(), 4);
        assert!(!Profile::NullHmacSha1_32.encrypts());
        for p in Profile::ALL {
            assert_eq!(p.salt_len(), if p.is_aead() { 12 } else { 14 }, "{p}");
        }
    }
}
