//! TLS alert descriptions (RFC 5246 §7.2, RFC 8446 §6): what a failed handshake says to the
//! peer, and what a peer's fatal alert told us.

use core::fmt;

/// A TLS/DTLS alert description. `Copy`, small, printable by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AlertDescription(u8);

impl AlertDescription {
    /// `close_notify` (0).
    pub const CLOSE_NOTIFY: Self = Self(0);
    /// `unexpected_message` (10).
    pub const UNEXPECTED_MESSAGE: Self = Self(10);
    /// `bad_record_mac` (20).
    pub const BAD_RECORD_MAC: Self = Self(20);
    /// `handshake_failure` (40): no common cipher suite, SRTP profile or certificate type, or
    /// no client certificate where one is required.
    pub const HANDSHAKE_FAILURE: Self = Self(40);
    /// `bad_certificate` (42): the certificate is not the one announced (fingerprint) or not
    /// trusted.
    pub const BAD_CERTIFICATE: Self = Self(42);
    /// `unsupported_certificate` (43).
    pub const UNSUPPORTED_CERTIFICATE: Self = Self(43);
    /// `certificate_unknown` (46).
    pub const CERTIFICATE_UNKNOWN: Self = Self(46);
    /// `illegal_parameter` (47).
    pub const ILLEGAL_PARAMETER: Self = Self(47);
    /// `decode_error` (50).
    pub const DECODE_ERROR: Self = Self(50);
    /// `decrypt_error` (51): a signature or Finished did not verify.
    pub const DECRYPT_ERROR: Self = Self(51);
    /// `protocol_version` (70).
    pub const PROTOCOL_VERSION: Self = Self(70);
    /// `insufficient_security` (71).
    pub const INSUFFICIENT_SECURITY: Self = Self(71);
    /// `internal_error` (80).
    pub const INTERNAL_ERROR: Self = Self(80);
    /// `unsupported_extension` (110).
    pub const UNSUPPORTED_EXTENSION: Self = Self(110);

    /// The description with this code (any value: unknown ones print as their number).
    pub const fn from_code(code: u8) -> Self {
        Self(code)
    }

    /// The code on the wire.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The registry name (`handshake_failure`), or `None` for a code not listed here.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "close_notify",
            10 => "unexpected_message",
            20 => "bad_record_mac",
            21 => "decryption_failed",
            22 => "record_overflow",
            30 => "decompression_failure",
            40 => "handshake_failure",
            41 => "no_certificate",
            42 => "bad_certificate",
            43 => "unsupported_certificate",
            44 => "certificate_revoked",
            45 => "certificate_expired",
            46 => "certificate_unknown",
            47 => "illegal_parameter",
            48 => "unknown_ca",
            49 => "access_denied",
            50 => "decode_error",
            51 => "decrypt_error",
            60 => "export_restriction",
            70 => "protocol_version",
            71 => "insufficient_security",
            80 => "internal_error",
            86 => "inappropriate_fallback",
            90 => "user_canceled",
            100 => "no_renegotiation",
            109 => "missing_extension",
            110 => "unsupported_extension",
            112 => "unrecognized_name",
            116 => "certificate_required",
            120 => "no_application_protocol",
            _ => return None,
        })
    }

    /// What the alert usually means in a DTLS-SRTP handshake, for logs.
    fn hint(self) -> Option<&'static str> {
        Some(match self.0 {
            40 => "no cipher suite, SRTP profile or certificate type in common, or a client certificate missing",
            42 | 43 | 46 | 48 => "the peer refused our certificate",
            47 | 50 => "the peer could not parse or accept a handshake message",
            51 => "a signature or Finished check failed at the peer",
            70 => "no DTLS version in common",
            71 => "our parameters are too weak for the peer",
            _ => return None,
        })
    }
}

impl fmt::Display for AlertDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n)?,
            None => write!(f, "alert {}", self.0)?,
        }
        if let Some(h) = self.hint() {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_hints() {
        assert_eq!(AlertDescription::HANDSHAKE_FAILURE.code(), 40);
        assert_eq!(
            AlertDescription::from_code(40).to_string(),
            "handshake_failure (no cipher suite, SRTP profile or certificate type in common, or a client certificate missing)"
        );
        assert_eq!(
            AlertDescription::from_code(80).to_string(),
            "internal_error"
        );
        assert_eq!(AlertDescription::from_code(200).to_string(), "alert 200");
        assert_eq!(AlertDescription::from_code(200).name(), None);
    }
}
