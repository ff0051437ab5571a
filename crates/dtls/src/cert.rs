//! DTLS certificates: a DER chain (leaf first) and its PKCS#8 private key.
//!
//! DTLS-SRTP endpoints usually present a short-lived self-signed certificate whose hash travels
//! in the SDP (`a=fingerprint`, see [`crate::fingerprint`]); [`Certificate::self_signed`] makes
//! one. Certificates issued by the private CA ([`crate::ca`]) carry the chain up to the CA.
//!
//! Generation and signing use `rcgen` over `aws-lc-rs` (which also generates the RSA keys);
//! certificates are read with `x509-parser`. The private key is wiped on drop and never shown
//! by `Debug`.
//!
//! ```
//! use secrelay_dtls::cert::{Certificate, KeyType};
//!
//! let cert = Certificate::self_signed(KeyType::EcdsaP256, "secrelay").unwrap();
//! let (cert_pem, key_pem) = cert.to_pem();
//! let again = Certificate::from_pem(&cert_pem, &key_pem).unwrap();
//! assert_eq!(again.der(), cert.der());
//! assert!(cert.fingerprint().matches(cert.der()));
//! assert!(!format!("{cert:?}").contains("PRIVATE"));
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose, RsaKeySize,
    SerialNumber, SignatureAlgorithm,
};
use rustls_pki_types::PrivatePkcs8KeyDer;
use x509_parser::prelude::{FromDer, X509Certificate};
use zeroize::Zeroizing;

use crate::fingerprint::{Fingerprint, HashAlgorithm};

/// How long a self-signed certificate is valid (from `not_before`).
pub const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(31 * 24 * 3600);
/// How far back `not_before` is set, so that peers with a slow clock accept the certificate.
pub const BACKDATE: Duration = Duration::from_secs(24 * 3600);

/// The key algorithm (and size) of a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeyType {
    /// ECDSA on P-256 with SHA-256 (`ecdsa-p256`), the default: what browsers use for DTLS.
    #[default]
    EcdsaP256,
    /// ECDSA on P-384 with SHA-384 (`ecdsa-p384`).
    EcdsaP384,
    /// Ed25519 (`ed25519`).
    Ed25519,
    /// RSA 2048 bits, PKCS#1 v1.5 SHA-256 signatures (`rsa-2048`).
    Rsa2048,
    /// RSA 3072 bits (`rsa-3072`).
    Rsa3072,
    /// RSA 4096 bits (`rsa-4096`).
    Rsa4096,
}

impl KeyType {
    /// Every key type, default first.
    pub const ALL: [KeyType; 6] = [
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
        KeyType::Rsa2048,
        KeyType::Rsa3072,
        KeyType::Rsa4096,
    ];

    /// The name used on the command line and in messages (`ecdsa-p256`, …).
    pub fn name(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::EcdsaP384 => "ecdsa-p384",
            KeyType::Ed25519 => "ed25519",
            KeyType::Rsa2048 => "rsa-2048",
            KeyType::Rsa3072 => "rsa-3072",
            KeyType::Rsa4096 => "rsa-4096",
        }
    }

    /// Whether this is one of the RSA sizes.
    pub fn is_rsa(self) -> bool {
        matches!(self, KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096)
    }

    /// The valid names, comma-separated (for error messages and help text).
    pub fn valid_names() -> String {
        Self::ALL
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(crate) fn signature_algorithm(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyType::Ed25519 => &rcgen::PKCS_ED25519,
            KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
        }
    }

    /// Generates a fresh key pair of this type.
    pub(crate) fn generate(self) -> Result<KeyPair, CertError> {
        let alg = self.signature_algorithm();
        let rsa = |size| KeyPair::generate_rsa_for(alg, size);
        let kp = match self {
            KeyType::Rsa2048 => rsa(RsaKeySize::_2048),
            KeyType::Rsa3072 => rsa(RsaKeySize::_3072),
            KeyType::Rsa4096 => rsa(RsaKeySize::_4096),
            _ => KeyPair::generate_for(alg),
        };
        kp.map_err(|e| CertError::KeyGeneration {
            key_type: self,
            reason: e.to_string(),
        })
    }

    /// Recognises a key pair loaded from PKCS#8.
    fn of_key_pair(kp: &KeyPair, pkcs8: &[u8]) -> Result<KeyType, CertError> {
        let alg = kp.algorithm();
        if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            Ok(KeyType::EcdsaP256)
        } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
            Ok(KeyType::EcdsaP384)
        } else if alg == &rcgen::PKCS_ED25519 {
            Ok(KeyType::Ed25519)
        } else if alg == &rcgen::PKCS_RSA_SHA256 {
            let rsa = aws_lc_rs::rsa::KeyPair::from_pkcs8(pkcs8)
                .map_err(|e| CertError::PrivateKey(e.to_string()))?;
            match rsa.public_modulus_len() * 8 {
                2048 => Ok(KeyType::Rsa2048),
                3072 => Ok(KeyType::Rsa3072),
                4096 => Ok(KeyType::Rsa4096),
                bits => Err(CertError::UnsupportedKey(format!(
                    "RSA key of {bits} bits (supported: {})",
                    KeyType::valid_names()
                ))),
            }
        } else {
            Err(CertError::UnsupportedKey(format!(
                "{alg:?} (supported: {})",
                KeyType::valid_names()
            )))
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyType {
    type Err = CertError;

    /// Parses `ecdsa-p256`, `ecdsa-p384`, `ed25519`, `rsa-2048`, `rsa-3072` or `rsa-4096`
    /// (case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        KeyType::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| CertError::UnknownKeyType(t.chars().take(40).collect()))
    }
}

/// A certificate chain (leaf first) and the leaf's private key.
///
/// The private key is held as PKCS#8 DER, wiped on drop, and left out of `Debug`.
#[derive(Clone)]
pub struct Certificate {
    chain: Vec<Vec<u8>>,
    key: Zeroizing<Vec<u8>>,
    key_type: KeyType,
}

impl Certificate {
    /// A fresh self-signed certificate for DTLS-SRTP with a new key of `key_type`.
    ///
    /// Subject `CN=<common_name>`, no subject alternative names, valid from one day ago
    /// ([`BACKDATE`]) for [`SELF_SIGNED_VALIDITY`], random 128-bit serial number. Peers
    /// authenticate it by its fingerprint, not by a CA.
    pub fn self_signed(key_type: KeyType, common_name: &str) -> Result<Certificate, CertError> {
        let key = key_type.generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name);
        params.subject_alt_names = Vec::new();
        params.is_ca = IsCa::NoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params, SELF_SIGNED_VALIDITY)?;
        params.serial_number = Some(random_serial()?);
        let cert = params
            .self_signed(&key)
            .map_err(|e| CertError::Signing(e.to_string()))?;
        Ok(Certificate {
            chain: vec![cert.der().to_vec()],
            key: Zeroizing::new(key.serialize_der()),
            key_type,
        })
    }

    /// Builds a certificate from a DER chain (leaf first) and the leaf's PKCS#8 DER key.
    ///
    /// Checks that every certificate parses, that the key is a supported type, and that it
    /// belongs to the leaf.
    pub fn from_der(chain: Vec<Vec<u8>>, private_key_pkcs8: Vec<u8>) -> Result<Self, CertError> {
        let key = Zeroizing::new(private_key_pkcs8);
        let leaf = chain.first().ok_or(CertError::NoCertificate)?;
        for der in &chain {
            parse_x509(der)?;
        }
        let kp = KeyPair::try_from(&PrivatePkcs8KeyDer::from(key.as_slice()))
            .map_err(|e| CertError::PrivateKey(e.to_string()))?;
        let key_type = KeyType::of_key_pair(&kp, &key)?;
        let x509 = parse_x509(leaf)?;
        if x509.public_key().subject_public_key.data.as_ref() != kp.public_key_raw() {
            return Err(CertError::KeyMismatch);
        }
        Ok(Certificate {
            chain,
            key,
            key_type,
        })
    }

    /// Loads a certificate from PEM: `cert_pem` holds one or more `CERTIFICATE` blocks (leaf
    /// first), `key_pem` one `PRIVATE KEY` block (PKCS#8, unencrypted).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let chain = chain_from_pem(cert_pem)?;
        let key = pem::parse(key_pem).map_err(|e| CertError::Pem(format!("private key: {e}")))?;
        if key.tag() != "PRIVATE KEY" {
            let tag = key.tag().to_owned();
            drop(Zeroizing::new(key.into_contents()));
            return Err(CertError::Pem(format!(
                "expected an unencrypted PKCS#8 \"PRIVATE KEY\" block, found {tag:?} \
                 (convert with `openssl pkcs8 -topk8 -nocrypt`)"
            )));
        }
        Certificate::from_der(chain, key.into_contents())
    }

    /// The chain as PEM (`CERTIFICATE` blocks, leaf first) and the key as PKCS#8 PEM
    /// (`PRIVATE KEY`). The key text is wiped when dropped.
    pub fn to_pem(&self) -> (String, Zeroizing<String>) {
        let certs: Vec<pem::Pem> = self
            .chain
            .iter()
            .map(|der| pem::Pem::new("CERTIFICATE", der.clone()))
            .collect();
        let cfg = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
        let cert_pem = pem::encode_many_config(&certs, cfg);
        let key = pem::Pem::new("PRIVATE KEY", self.key.to_vec());
        let key_pem = Zeroizing::new(pem::encode_config(&key, cfg));
        drop(Zeroizing::new(key.into_contents()));
        (cert_pem, key_pem)
    }

    /// The leaf certificate, DER.
    pub fn der(&self) -> &[u8] {
        &self.chain[0]
    }

    /// The whole chain, leaf first, DER.
    pub fn chain(&self) -> &[Vec<u8>] {
        &self.chain
    }

    /// The private key, PKCS#8 DER. Handle with care: do not log it.
    pub fn private_key_der(&self) -> &[u8] {
        &self.key
    }

    /// The key algorithm and size.
    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    /// The SHA-256 fingerprint of the leaf, for SDP `a=fingerprint`.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.der(), HashAlgorithm::Sha256)
    }

    /// The fingerprint of the leaf with another hash algorithm.
    pub fn fingerprint_with(&self, algorithm: HashAlgorithm) -> Fingerprint {
        Fingerprint::of(self.der(), algorithm)
    }

    /// The key as an rcgen key pair, for signing.
    pub(crate) fn key_pair(&self) -> Result<KeyPair, CertError> {
        KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(self.key.as_slice()),
            self.key_type.signature_algorithm(),
        )
        .map_err(|e| CertError::PrivateKey(e.to_string()))
    }

    /// Assembles a certificate whose parts were produced together here.
    pub(crate) fn from_parts(chain: Vec<Vec<u8>>, key: KeyPair, key_type: KeyType) -> Self {
        Certificate {
            chain,
            key: Zeroizing::new(key.serialize_der()),
            key_type,
        }
    }
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("key_type", &self.key_type)
            .field("chain_len", &self.chain.len())
            .field("fingerprint", &self.fingerprint().to_string())
            .field("private_key", &"<redacted>")
            .finish()
    }
}

/// The DER certificates of the `CERTIFICATE` blocks in `cert_pem`, in order (at least one).
///
/// Certificates only: a private key or any other block in the text is an error.
pub fn chain_from_pem(cert_pem: &str) -> Result<Vec<Vec<u8>>, CertError> {
    let blocks = pem::parse_many(cert_pem).map_err(|e| CertError::Pem(e.to_string()))?;
    let mut chain = Vec::new();
    for b in blocks {
        if b.tag() != "CERTIFICATE" {
            let tag = b.tag().to_owned();
            drop(Zeroizing::new(b.into_contents()));
            return Err(CertError::Pem(format!(
                "expected CERTIFICATE blocks, found {tag:?}"
            )));
        }
        chain.push(b.into_contents());
    }
    if chain.is_empty() {
        return Err(CertError::NoCertificate);
    }
    for der in &chain {
        parse_x509(der)?;
    }
    Ok(chain)
}

pub(crate) fn parse_x509(der: &[u8]) -> Result<X509Certificate<'_>, CertError> {
    match X509Certificate::from_der(der) {
        Ok(([], c)) => Ok(c),
        Ok(_) => Err(CertError::Certificate(
            "trailing bytes after the certificate".into(),
        )),
        Err(e) => Err(CertError::Certificate(e.to_string())),
    }
}

pub(crate) fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// Sets `not_before` to now − [`BACKDATE`] and `not_after` to `not_before + validity`.
pub(crate) fn set_validity(
    params: &mut CertificateParams,
    validity: Duration,
) -> Result<(), CertError> {
    let now = time::OffsetDateTime::now_utc();
    let backdate = time::Duration::try_from(BACKDATE)
        .map_err(|e| CertError::Signing(format!("validity: {e}")))?;
    let validity = time::Duration::try_from(validity)
        .map_err(|e| CertError::Signing(format!("validity: {e}")))?;
    params.not_before = now - backdate;
    params.not_after = params.not_before + validity;
    Ok(())
}

/// A random positive 128-bit serial number (RFC 5280 allows up to 20 octets).
pub(crate) fn random_serial() -> Result<SerialNumber, CertError> {
    let mut b = [0u8; 16];
    aws_lc_rs::rand::fill(&mut b)
        .map_err(|_| CertError::Signing("random serial number: RNG failure".into()))?;
    // Positive and without a leading zero octet, so it encodes in exactly 16 octets.
    b[0] = (b[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&b))
}

/// What went wrong making, loading or saving a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertError {
    /// A key type name that is not one of [`KeyType::ALL`] (the name, truncated).
    UnknownKeyType(String),
    /// The crypto library could not generate a key.
    KeyGeneration {
        /// The key type asked for.
        key_type: KeyType,
        /// The library's reason.
        reason: String,
    },
    /// Building or signing the certificate failed.
    Signing(String),
    /// The PEM text is malformed or holds the wrong kind of block.
    Pem(String),
    /// No certificate was given.
    NoCertificate,
    /// A certificate does not parse as X.509 DER.
    Certificate(String),
    /// The private key does not parse as PKCS#8.
    PrivateKey(String),
    /// The key is of a type we do not use.
    UnsupportedKey(String),
    /// The private key does not belong to the leaf certificate.
    KeyMismatch,
}

impl fmt::Display for CertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertError::UnknownKeyType(name) => write!(
                f,
                "unknown key type {name:?} (valid: {})",
                KeyType::valid_names()
            ),
            CertError::KeyGeneration { key_type, reason } => {
                write!(f, "could not generate a {key_type} key: {reason}")
            }
            CertError::Signing(r) => write!(f, "could not build the certificate: {r}"),
            CertError::Pem(r) => write!(f, "bad PEM: {r}"),
            CertError::NoCertificate => f.write_str("no certificate found"),
            CertError::Certificate(r) => write!(f, "bad certificate: {r}"),
            CertError::PrivateKey(r) => write!(f, "bad private key: {r}"),
            CertError::UnsupportedKey(r) => write!(f, "unsupported key type: {r}"),
            CertError::KeyMismatch => {
                f.write_str("the private key does not belong to the leaf certificate")
            }
        }
    }
}

impl std::error::Error for CertError {}
