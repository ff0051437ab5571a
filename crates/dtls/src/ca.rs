//! A private certificate authority for lab set-ups (the teleconference study), and chain
//! verification against it.
//!
//! The in-memory operations are [`generate_ca`], [`issue_certificate`] and [`verify_chain`];
//! [`CaDir`] keeps a CA in a directory as PEM files:
//!
//! | file         | holds                                                  | mode |
//! |--------------|--------------------------------------------------------|------|
//! | `ca.pem`     | the CA certificate                                     |      |
//! | `ca.key`     | the CA private key (PKCS#8)                            | 0600 |
//! | `<name>.pem` | an issued certificate followed by the CA certificate   |      |
//! | `<name>.key` | its private key (PKCS#8)                               | 0600 |
//!
//! Certificates are made with `rcgen`; chains are verified with `rustls-webpki` (the verifier
//! rustls uses) over `aws-lc-rs`.
//!
//! ```
//! use std::time::SystemTime;
//! use secrelay_dtls::ca::{generate_ca, issue_certificate, verify_chain, Role, VerifyError};
//! use secrelay_dtls::cert::KeyType;
//!
//! let ca = generate_ca(KeyType::EcdsaP256).unwrap();
//! let server = issue_certificate(&ca, "media.lab", Role::Server, KeyType::EcdsaP256).unwrap();
//! let now = SystemTime::now();
//! assert_eq!(verify_chain(server.chain(), ca.der(), now, Role::Server), Ok(()));
//! assert!(matches!(
//!     verify_chain(server.chain(), ca.der(), now, Role::Client),
//!     Err(VerifyError::WrongUsage { .. })
//! ));
//! ```

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::extensions::ParsedExtension;

use crate::cert::{
    distinguished_name, parse_x509, random_serial, set_validity, CertError, Certificate, KeyType,
};

/// File name of the CA certificate in a [`CaDir`].
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key in a [`CaDir`].
pub const CA_KEY_FILE: &str = "ca.key";
/// How long a CA certificate is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 3600);
/// How long an issued certificate is valid.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(397 * 24 * 3600);

/// What an issued certificate may be used for (its extended key usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// TLS server authentication (`serverAuth`): the DTLS server side.
    Server,
    /// TLS client authentication (`clientAuth`): the DTLS client side.
    Client,
    /// Both: a peer that may take either DTLS role (the usual case for media endpoints).
    Both,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Both => "server and client",
        }
    }

    fn ekus(self) -> Vec<ExtendedKeyUsagePurpose> {
        match self {
            Role::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Role::Both => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fresh self-signed CA certificate and key.
///
/// Subject `CN=secrelay private CA <8 hex digits>` (the digits tell CAs apart), basic
/// constraints `CA:TRUE, pathlen:0` (it signs end-entity certificates only), key usage
/// `keyCertSign, cRLSign`, valid for [`CA_VALIDITY`] from one day ago.
pub fn generate_ca(key_type: KeyType) -> Result<Certificate, CaError> {
    let key = key_type.generate()?;
    let mut tag = [0u8; 4];
    aws_lc_rs::rand::fill(&mut tag)
        .map_err(|_| CertError::Signing("CA name: RNG failure".into()))?;
    let cn = format!(
        "secrelay private CA {}",
        tag.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&cn);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "secrelay lab");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_VALIDITY)?;
    params.serial_number = Some(random_serial()?);
    let cert = params
        .self_signed(&key)
        .map_err(|e| CertError::Signing(e.to_string()))?;
    Ok(Certificate::from_parts(
        vec![cert.der().to_vec()],
        key,
        key_type,
    ))
}

/// Issues a certificate for `name` signed by `ca`, with a new key of `key_type`.
///
/// `name` becomes the subject common name and the one subject alternative name: an IP address
/// if it parses as one, a DNS name otherwise. The extended key usage follows `role`. The
/// returned chain is the new certificate followed by the CA certificate.
pub fn issue_certificate(
    ca: &Certificate,
    name: &str,
    role: Role,
    key_type: KeyType,
) -> Result<Certificate, CaError> {
    issue_certificate_for(ca, &[name], role, key_type)
}

/// Issues a certificate for several names (an HTTPS server reached as `localhost`, `127.0.0.1`
/// and its DNS name), signed by `ca`, with a new key of `key_type`.
///
/// The first name is the subject common name; every name becomes a subject alternative name
/// (an IP address if it parses as one, a DNS name otherwise), duplicates once. Otherwise as
/// [`issue_certificate`].
pub fn issue_certificate_for(
    ca: &Certificate,
    names: &[&str],
    role: Role,
    key_type: KeyType,
) -> Result<Certificate, CaError> {
    let Some(first) = names.first() else {
        return Err(CaError::InvalidName("no name to issue for".into()));
    };
    for name in names {
        check_name(name)?;
    }
    ensure_ca(ca.der()).map_err(CaError::NotACa)?;
    let ca_key = ca.key_pair()?;
    let issuer = Issuer::from_ca_cert_der(&CertificateDer::from(ca.der()), ca_key)
        .map_err(|e| CaError::NotACa(format!("cannot sign with it: {e}")))?;

    let key = key_type.generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(first);
    let mut sans = Vec::new();
    for name in names {
        let san = match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                (*name)
                    .try_into()
                    .map_err(|e| CaError::InvalidName(format!("{name:?}: {e}")))?,
            ),
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    params.subject_alt_names = sans;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if key_type.is_rsa() {
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    params.extended_key_usages = role.ekus();
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_VALIDITY)?;
    params.serial_number = Some(random_serial()?);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| CertError::Signing(e.to_string()))?;
    Ok(Certificate::from_parts(
        vec![cert.der().to_vec(), ca.der().to_vec()],
        key,
        key_type,
    ))
}

/// A private CA kept in a directory (see the [module docs](self) for the files).
#[derive(Debug)]
pub struct CaDir {
    dir: PathBuf,
    ca: Certificate,
}

/// Paths of the files [`CaDir::issue`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedFiles {
    /// `<name>.pem`: the certificate followed by the CA certificate.
    pub cert: PathBuf,
    /// `<name>.key`: the private key, mode 0600.
    pub key: PathBuf,
}

impl CaDir {
    /// Creates a new CA in `dir` (created if missing): writes `ca.pem` and `ca.key` (mode
    /// 0600). Refuses if either file exists, unless `overwrite` is true.
    pub fn init(
        dir: impl AsRef<Path>,
        key_type: KeyType,
        overwrite: bool,
    ) -> Result<Self, CaError> {
        let dir = dir.as_ref().to_path_buf();
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if !overwrite {
            for p in [&cert_path, &key_path] {
                if p.exists() {
                    return Err(CaError::Exists(p.clone()));
                }
            }
        }
        let ca = generate_ca(key_type)?;
        fs::create_dir_all(&dir).map_err(|e| CaError::io(&dir, e))?;
        let (cert_pem, key_pem) = ca.to_pem();
        write_file(&key_path, key_pem.as_bytes(), true, overwrite)?;
        write_file(&cert_path, cert_pem.as_bytes(), false, overwrite)?;
        Ok(CaDir { dir, ca })
    }

    /// Loads the CA in `dir` (`ca.pem` and `ca.key`).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, CaError> {
        let dir = dir.as_ref().to_path_buf();
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let cert_pem = fs::read_to_string(&cert_path).map_err(|e| CaError::io(&cert_path, e))?;
        let key_pem = zeroize::Zeroizing::new(
            fs::read_to_string(&key_path).map_err(|e| CaError::io(&key_path, e))?,
        );
        let ca = Certificate::from_pem(&cert_pem, &key_pem).map_err(|source| CaError::Load {
            path: dir.clone(),
            source,
        })?;
        ensure_ca(ca.der())
            .map_err(|why| CaError::NotACa(format!("{}: {why}", cert_path.display())))?;
        Ok(CaDir { dir, ca })
    }

    /// Issues a certificate for `name` (see [`issue_certificate`]) and writes `<name>.pem`
    /// (certificate then CA certificate) and `<name>.key` (mode 0600). Refuses if either file
    /// exists, unless `overwrite` is true.
    pub fn issue(
        &self,
        name: &str,
        role: Role,
        key_type: KeyType,
        overwrite: bool,
    ) -> Result<(Certificate, IssuedFiles), CaError> {
        check_name(name)?;
        let files = IssuedFiles {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        if !overwrite {
            for p in [&files.cert, &files.key] {
                if p.exists() {
                    return Err(CaError::Exists(p.clone()));
                }
            }
        }
        let cert = issue_certificate(&self.ca, name, role, key_type)?;
        let (cert_pem, key_pem) = cert.to_pem();
        write_file(&files.key, key_pem.as_bytes(), true, overwrite)?;
        write_file(&files.cert, cert_pem.as_bytes(), false, overwrite)?;
        Ok((cert, files))
    }

    /// The CA certificate and key.
    pub fn certificate(&self) -> &Certificate {
        &self.ca
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the CA certificate (`ca.pem`).
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CA_CERT_FILE)
    }

    /// Path of the CA key (`ca.key`).
    pub fn key_path(&self) -> PathBuf {
        self.dir.join(CA_KEY_FILE)
    }
}

/// Loads the CA kept in `dir`; the same as [`CaDir::load`].
pub fn load_ca(dir: impl AsRef<Path>) -> Result<CaDir, CaError> {
    CaDir::load(dir)
}

/// Writes `contents` to `path`; a key file gets mode 0600 (on Unix) before any byte is written.
fn write_file(path: &Path, contents: &[u8], secret: bool, overwrite: bool) -> Result<(), CaError> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            CaError::Exists(path.to_path_buf())
        } else {
            CaError::io(path, e)
        }
    })?;
    #[cfg(unix)]
    if secret {
        // An existing file keeps its old mode when truncated: tighten it before writing.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| CaError::io(path, e))?;
    }
    f.write_all(contents)
        .and_then(|()| f.sync_all())
        .map_err(|e| CaError::io(path, e))
}

/// A name must be a DNS name or an IP address, and safe as a file name.
fn check_name(name: &str) -> Result<(), CaError> {
    let bad = |why: &str| Err(CaError::InvalidName(format!("{name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 253 {
        return bad("longer than 253 characters");
    }
    if name.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return bad("empty label (leading, trailing or doubled dot)");
        }
        if label.len() > 63 {
            return bad("a label is longer than 63 characters");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return bad("a label starts or ends with '-'");
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return bad(&format!(
                "{c:?} is not allowed (use a DNS name or an IP address)"
            ));
        }
    }
    Ok(())
}

/// Checks that `der` is a CA certificate (basic constraints `CA:TRUE`).
fn ensure_ca(der: &[u8]) -> Result<(), String> {
    let x509 = parse_x509(der).map_err(|e| e.to_string())?;
    let is_ca = x509.extensions().iter().any(
        |ext| matches!(ext.parsed_extension(), ParsedExtension::BasicConstraints(bc) if bc.ca),
    );
    if is_ca {
        Ok(())
    } else {
        Err("not a CA certificate (no basic constraints CA:TRUE)".into())
    }
}

// DER contents of the id-kp-serverAuth and id-kp-clientAuth OIDs (RFC 5280, 4.2.1.12).
const EKU_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const EKU_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// Verifies a chain (leaf first; the CA certificate may be included last) against the CA
/// certificate `ca_der` at time `now`, for `role`.
///
/// Uses `rustls-webpki` with the `aws-lc-rs` signature algorithms. The leaf must carry the
/// extended key usage of `role` (both for [`Role::Both`]). Names are not checked here; see
/// [`verify_name`].
pub fn verify_chain(
    chain_der: &[Vec<u8>],
    ca_der: &[u8],
    now: SystemTime,
    role: Role,
) -> Result<(), VerifyError> {
    let leaf_der = chain_der.first().ok_or(VerifyError::EmptyChain)?;
    ensure_ca(ca_der).map_err(VerifyError::BadCa)?;
    // Without intermediates the leaf must name the CA as its issuer. Checked first so that a
    // self-signed or foreign certificate is reported as such, not by whichever of its own
    // properties (usage, validity) webpki looks at before the issuer.
    if chain_der[1..].iter().all(|c| c.as_slice() == ca_der) {
        let leaf = parse_x509(leaf_der).map_err(|e| VerifyError::BadCertificate(e.to_string()))?;
        let ca = parse_x509(ca_der).map_err(|e| VerifyError::BadCa(e.to_string()))?;
        if leaf_der.as_slice() != ca_der && leaf.issuer().as_raw() != ca.subject().as_raw() {
            return Err(if leaf.issuer().as_raw() == leaf.subject().as_raw() {
                VerifyError::SelfSigned
            } else {
                VerifyError::NotSignedByCa
            });
        }
    }
    let ca_cert = CertificateDer::from(ca_der);
    let anchor = webpki::anchor_from_trusted_cert(&ca_cert)
        .map_err(|e| VerifyError::BadCa(format!("{e:?}")))?;
    let anchors = [anchor];
    let leaf_cert = CertificateDer::from(leaf_der.as_slice());
    let leaf = webpki::EndEntityCert::try_from(&leaf_cert)
        .map_err(|e| VerifyError::BadCertificate(format!("{e:?}")))?;
    let intermediates: Vec<CertificateDer<'_>> = chain_der[1..]
        .iter()
        .filter(|d| d.as_slice() != ca_der)
        .map(|d| CertificateDer::from(d.as_slice()))
        .collect();
    let since_epoch = now
        .duration_since(UNIX_EPOCH)
        .map_err(|_| VerifyError::Other("time before 1970".into()))?;
    let time = UnixTime::since_unix_epoch(since_epoch);
    let ekus: &[&'static [u8]] = match role {
        Role::Server => &[EKU_SERVER_AUTH],
        Role::Client => &[EKU_CLIENT_AUTH],
        Role::Both => &[EKU_SERVER_AUTH, EKU_CLIENT_AUTH],
    };
    for eku in ekus {
        leaf.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            time,
            // `required` would also demand the EKU of intermediates (a foreign CA presented in
            // the chain would then read as "wrong usage"); the leaf's EKU is checked below.
            webpki::KeyUsage::required_if_present(eku),
            None,
            None,
        )
        .map_err(|e| VerifyError::from_webpki(e, leaf_der, role))?;
    }
    // The leaf must say what it is for: a certificate without extended key usage is refused.
    let leaf = parse_x509(leaf_der).map_err(|e| VerifyError::BadCertificate(e.to_string()))?;
    let eku = match leaf.extended_key_usage() {
        Ok(Some(eku)) => eku.value,
        Ok(None) => return Err(VerifyError::WrongUsage { role }),
        Err(e) => return Err(VerifyError::BadCertificate(e.to_string())),
    };
    let ok = match role {
        Role::Server => eku.server_auth,
        Role::Client => eku.client_auth,
        Role::Both => eku.server_auth && eku.client_auth,
    };
    if !ok {
        return Err(VerifyError::WrongUsage { role });
    }
    Ok(())
}

/// Checks that the leaf certificate `leaf_der` names `name` (a DNS name or an IP address) in
/// its subject alternative names. Run it after [`verify_chain`].
pub fn verify_name(leaf_der: &[u8], name: &str) -> Result<(), VerifyError> {
    let server_name = ServerName::try_from(name)
        .map_err(|_| VerifyError::NameMismatch(format!("{name:?} is not a DNS name or IP")))?;
    let leaf_cert = CertificateDer::from(leaf_der);
    let leaf = webpki::EndEntityCert::try_from(&leaf_cert)
        .map_err(|e| VerifyError::BadCertificate(format!("{e:?}")))?;
    leaf.verify_is_valid_for_subject_name(&server_name)
        .map_err(|_| VerifyError::NameMismatch(format!("certificate is not valid for {name:?}")))
}

/// Why a certificate chain was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// No certificate was presented.
    EmptyChain,
    /// The CA certificate is unusable as a trust anchor.
    BadCa(String),
    /// A presented certificate is malformed.
    BadCertificate(String),
    /// The certificate has expired.
    Expired,
    /// The certificate is not valid yet.
    NotYetValid,
    /// The leaf is self-signed, not issued by the CA.
    SelfSigned,
    /// The leaf was not signed by this CA (another CA, or a bad signature).
    NotSignedByCa,
    /// The leaf lacks the extended key usage for the role.
    WrongUsage {
        /// The role asked for.
        role: Role,
    },
    /// A CA certificate was presented as the leaf.
    CaAsLeaf,
    /// The key or signature algorithm is not one we accept.
    UnsupportedKeyType(String),
    /// The certificate does not name the expected peer.
    NameMismatch(String),
    /// Another rejection by the verifier (its words).
    Other(String),
}

impl VerifyError {
    // The deprecated unit variants are still matched in case an older path reports them.
    #[allow(deprecated)]
    fn from_webpki(e: webpki::Error, leaf_der: &[u8], role: Role) -> VerifyError {
        use webpki::Error as E;
        match e {
            E::CertExpired { .. } => VerifyError::Expired,
            E::CertNotValidYet { .. } => VerifyError::NotYetValid,
            E::UnknownIssuer | E::InvalidSignatureForPublicKey => {
                if is_self_issued(leaf_der) {
                    VerifyError::SelfSigned
                } else {
                    VerifyError::NotSignedByCa
                }
            }
            E::RequiredEkuNotFound | E::RequiredEkuNotFoundContext(_) | E::EmptyEkuExtension => {
                VerifyError::WrongUsage { role }
            }
            E::CaUsedAsEndEntity => VerifyError::CaAsLeaf,
            E::UnsupportedSignatureAlgorithm
            | E::UnsupportedSignatureAlgorithmContext(_)
            | E::UnsupportedSignatureAlgorithmForPublicKey
            | E::UnsupportedSignatureAlgorithmForPublicKeyContext(_) => {
                VerifyError::UnsupportedKeyType(format!("{e:?}"))
            }
            E::BadDer | E::BadDerTime | E::TrailingData(_) | E::UnsupportedCertVersion => {
                VerifyError::BadCertificate(format!("{e:?}"))
            }
            other => VerifyError::Other(format!("{other:?}")),
        }
    }
}

fn is_self_issued(der: &[u8]) -> bool {
    parse_x509(der)
        .map(|c| c.issuer().as_raw() == c.subject().as_raw())
        .unwrap_or(false)
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::EmptyChain => f.write_str("no certificate presented"),
            VerifyError::BadCa(r) => write!(f, "bad CA certificate: {r}"),
            VerifyError::BadCertificate(r) => write!(f, "malformed certificate: {r}"),
            VerifyError::Expired => f.write_str("certificate has expired"),
            VerifyError::NotYetValid => f.write_str("certificate is not valid yet"),
            VerifyError::SelfSigned => {
                f.write_str("certificate is self-signed, not issued by this CA")
            }
            VerifyError::NotSignedByCa => f.write_str("certificate is not signed by this CA"),
            VerifyError::WrongUsage { role } => write!(
                f,
                "certificate is not allowed for {role} authentication (extended key usage)"
            ),
            VerifyError::CaAsLeaf => f.write_str("a CA certificate was presented as the leaf"),
            VerifyError::UnsupportedKeyType(r) => {
                write!(f, "unsupported key or signature algorithm: {r}")
            }
            VerifyError::NameMismatch(r) => write!(f, "name mismatch: {r}"),
            VerifyError::Other(r) => write!(f, "certificate rejected: {r}"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// What went wrong with the private CA.
#[derive(Debug)]
#[non_exhaustive]
pub enum CaError {
    /// A file exists and overwriting was not asked for.
    Exists(PathBuf),
    /// Reading or writing a file failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The CA files in a directory do not load.
    Load {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: CertError,
    },
    /// The CA certificate cannot issue certificates.
    NotACa(String),
    /// The name to issue for is not a DNS name or IP address.
    InvalidName(String),
    /// Making a key or certificate failed.
    Cert(CertError),
}

impl CaError {
    fn io(path: &Path, source: io::Error) -> CaError {
        CaError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<CertError> for CaError {
    fn from(e: CertError) -> Self {
        CaError::Cert(e)
    }
}

impl fmt::Display for CaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaError::Exists(p) => {
                write!(f, "{} already exists, refusing to overwrite", p.display())
            }
            CaError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            CaError::Load { path, source } => {
                write!(f, "cannot load the CA in {}: {source}", path.display())
            }
            CaError::NotACa(r) => write!(f, "not a usable CA: {r}"),
            CaError::InvalidName(r) => write!(f, "invalid certificate name {r}"),
            CaError::Cert(e) => e.fmt(f),
        }
    }
}

/// Messages are self-contained (the cause is part of the text), so no `source` is chained.
impl std::error::Error for CaError {}
