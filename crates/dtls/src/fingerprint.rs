//! Certificate fingerprints as carried in SDP `a=fingerprint` (RFC 8122, RFC 4572).
//!
//! A DTLS-SRTP peer announces the hash of its certificate in the signalling; the handshake then
//! checks that the certificate the peer presented hashes to the announced value. The SDP form
//! is `<hash-func> <HEX:HEX:…>`, e.g. `sha-256 AB:CD:…`.
//!
//! ```
//! use secrelay_dtls::fingerprint::{Fingerprint, HashAlgorithm};
//!
//! let der = b"not really a certificate, but any bytes hash";
//! let fp = Fingerprint::of(der, HashAlgorithm::Sha256);
//! let sdp = fp.to_string();
//! assert!(sdp.starts_with("sha-256 "));
//! let parsed: Fingerprint = sdp.to_lowercase().parse().unwrap();
//! assert_eq!(parsed, fp);
//! assert!(parsed.matches(der));
//! assert!(!parsed.matches(b"other bytes"));
//! ```

use std::fmt;
use std::str::FromStr;

use aws_lc_rs::digest;
use subtle::ConstantTimeEq;

/// The hash function of a fingerprint (RFC 4572 `hash-func`).
///
/// SHA-256 is what browsers and most DTLS-SRTP stacks send and what we produce by default;
/// SHA-1, SHA-384 and SHA-512 are accepted when parsing a peer's fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HashAlgorithm {
    /// SHA-1 (`sha-1`), legacy; accepted from peers, never produced by default.
    Sha1,
    /// SHA-256 (`sha-256`), the default.
    #[default]
    Sha256,
    /// SHA-384 (`sha-384`).
    Sha384,
    /// SHA-512 (`sha-512`).
    Sha512,
}

impl HashAlgorithm {
    /// Every supported algorithm, in the order used in messages.
    pub const ALL: [HashAlgorithm; 4] = [
        HashAlgorithm::Sha256,
        HashAlgorithm::Sha384,
        HashAlgorithm::Sha512,
        HashAlgorithm::Sha1,
    ];

    /// The SDP token (`sha-256`, …).
    pub fn sdp_name(self) -> &'static str {
        match self {
            HashAlgorithm::Sha1 => "sha-1",
            HashAlgorithm::Sha256 => "sha-256",
            HashAlgorithm::Sha384 => "sha-384",
            HashAlgorithm::Sha512 => "sha-512",
        }
    }

    /// Length of the digest in bytes.
    pub fn output_len(self) -> usize {
        self.digest_algorithm().output_len()
    }

    fn digest_algorithm(self) -> &'static digest::Algorithm {
        match self {
            HashAlgorithm::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            HashAlgorithm::Sha256 => &digest::SHA256,
            HashAlgorithm::Sha384 => &digest::SHA384,
            HashAlgorithm::Sha512 => &digest::SHA512,
        }
    }

    fn valid_names() -> String {
        Self::ALL
            .iter()
            .map(|a| a.sdp_name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sdp_name())
    }
}

impl FromStr for HashAlgorithm {
    type Err = FingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        HashAlgorithm::ALL
            .into_iter()
            .find(|a| a.sdp_name().eq_ignore_ascii_case(t))
            .ok_or_else(|| FingerprintError::UnknownAlgorithm(truncate(t)))
    }
}

/// A certificate fingerprint: a hash algorithm and the digest of the DER certificate.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    algorithm: HashAlgorithm,
    bytes: Vec<u8>,
}

impl Fingerprint {
    /// Hashes a DER certificate with `algorithm`.
    pub fn of(der: &[u8], algorithm: HashAlgorithm) -> Fingerprint {
        let d = digest::digest(algorithm.digest_algorithm(), der);
        Fingerprint {
            algorithm,
            bytes: d.as_ref().to_vec(),
        }
    }

    /// Builds a fingerprint from a digest already computed, checking its length.
    pub fn from_digest(algorithm: HashAlgorithm, bytes: &[u8]) -> Result<Self, FingerprintError> {
        if bytes.len() != algorithm.output_len() {
            return Err(FingerprintError::WrongLength {
                algorithm,
                expected: algorithm.output_len(),
                got: bytes.len(),
            });
        }
        Ok(Fingerprint {
            algorithm,
            bytes: bytes.to_vec(),
        })
    }

    /// The hash algorithm.
    pub fn algorithm(&self) -> HashAlgorithm {
        self.algorithm
    }

    /// The digest bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether `der` hashes to this fingerprint, with this fingerprint's algorithm.
    ///
    /// The digests are compared in constant time.
    pub fn matches(&self, der: &[u8]) -> bool {
        let d = digest::digest(self.algorithm.digest_algorithm(), der);
        bool::from(d.as_ref().ct_eq(&self.bytes))
    }
}

impl fmt::Display for Fingerprint {
    /// The SDP `a=fingerprint` value: `sha-256 AB:CD:…` (upper-case hex, colon-separated).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.algorithm.sdp_name())?;
        f.write_str(" ")?;
        for (i, b) in self.bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;

    /// Parses an SDP fingerprint value: `sha-256 ab:cd:…`.
    ///
    /// The algorithm name and the hex digits are case-insensitive; whitespace around and
    /// between the two parts is tolerated. Each byte is exactly two hex digits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(FingerprintError::Empty);
        }
        let (alg, hex) = match s.split_once(|c: char| c.is_ascii_whitespace()) {
            Some((a, h)) => (a, h.trim()),
            None => return Err(FingerprintError::MissingDigest),
        };
        let algorithm: HashAlgorithm = alg.parse()?;
        if hex.is_empty() {
            return Err(FingerprintError::MissingDigest);
        }
        let mut bytes = Vec::with_capacity(algorithm.output_len());
        for (index, part) in hex.split(':').enumerate() {
            let pb = part.as_bytes();
            if pb.len() != 2 {
                return Err(FingerprintError::BadHex {
                    index,
                    found: truncate(part),
                });
            }
            match (hex_val(pb[0]), hex_val(pb[1])) {
                (Some(h), Some(l)) => bytes.push((h << 4) | l),
                _ => {
                    return Err(FingerprintError::BadHex {
                        index,
                        found: truncate(part),
                    })
                }
            }
        }
        Fingerprint::from_digest(algorithm, &bytes)
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// At most 32 characters of a peer-supplied string, for error messages.
fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(32).collect();
    if s.chars().nth(32).is_some() {
        out.push('…');
    }
    out
}

/// Why a fingerprint string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// The string was empty.
    Empty,
    /// A hash algorithm name with no digest after it.
    MissingDigest,
    /// The hash function is not one we support (the name, truncated).
    UnknownAlgorithm(String),
    /// A byte of the digest is not two hex digits.
    BadHex {
        /// Zero-based index of the colon-separated group.
        index: usize,
        /// The group as found (truncated).
        found: String,
    },
    /// The digest has the wrong number of bytes for its algorithm.
    WrongLength {
        /// The algorithm named in the fingerprint.
        algorithm: HashAlgorithm,
        /// Bytes that algorithm produces.
        expected: usize,
        /// Bytes found.
        got: usize,
    },
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintError::Empty => f.write_str("empty fingerprint"),
            FingerprintError::MissingDigest => {
                f.write_str("fingerprint has no digest: expected \"<hash-func> XX:XX:…\"")
            }
            FingerprintError::UnknownAlgorithm(name) => write!(
                f,
                "unknown fingerprint hash function {name:?} (supported: {})",
                HashAlgorithm::valid_names()
            ),
            FingerprintError::BadHex { index, found } => write!(
                f,
                "fingerprint byte {index} is {found:?}, not two hex digits"
            ),
            FingerprintError::WrongLength {
                algorithm,
                expected,
                got,
            } => write!(
                f,
                "{algorithm} fingerprint has {got} bytes, expected {expected}"
            ),
        }
    }
}

impl std::error::Error for FingerprintError {}
