//! The private CA of the lab set-up: files written, chains verified, wrong chains refused.

mod interop_support;

use std::time::{Duration, SystemTime};

use secrelay_dtls::ca::{
    generate_ca, issue_certificate, load_ca, verify_chain, verify_name, CaDir, CaError, Role,
    VerifyError,
};
use secrelay_dtls::cert::{Certificate, KeyType};

const DAY: Duration = Duration::from_secs(24 * 3600);

#[test]
fn init_issue_and_verify_in_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let ca = CaDir::init(&dir, KeyType::EcdsaP256, false).unwrap();
    assert!(dir.join("ca.pem").is_file());
    assert!(dir.join("ca.key").is_file());

    let (server, files) = ca
        .issue("media.lab", Role::Server, KeyType::EcdsaP256, false)
        .unwrap();
    assert_eq!(files.cert, dir.join("media.lab.pem"));
    assert_eq!(files.key, dir.join("media.lab.key"));
    let (client, _) = ca
        .issue("10.0.0.7", Role::Client, KeyType::Ed25519, false)
        .unwrap();
    let (both, _) = ca
        .issue("peer-1", Role::Both, KeyType::Rsa2048, false)
        .unwrap();

    // The files hold the chain (leaf then CA) and the key, and load back.
    let pem = std::fs::read_to_string(&files.cert).unwrap();
    assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2);
    let key = std::fs::read_to_string(&files.key).unwrap();
    let loaded = Certificate::from_pem(&pem, &key).unwrap();
    assert_eq!(loaded.chain(), server.chain());
    assert_eq!(loaded.chain()[1], ca.certificate().der());

    // A reloaded CA verifies them, for the right roles.
    let ca = load_ca(&dir).unwrap();
    let ca_der = ca.certificate().der();
    let now = SystemTime::now();
    assert_eq!(
        verify_chain(server.chain(), ca_der, now, Role::Server),
        Ok(())
    );
    assert_eq!(
        verify_chain(client.chain(), ca_der, now, Role::Client),
        Ok(())
    );
    for role in [Role::Server, Role::Client, Role::Both] {
        assert_eq!(verify_chain(both.chain(), ca_der, now, role), Ok(()));
    }
    // The leaf alone (without the CA appended) verifies too.
    assert_eq!(
        verify_chain(&server.chain()[..1], ca_der, now, Role::Server),
        Ok(())
    );
    // Names: DNS for one, IP address for the other.
    assert_eq!(verify_name(server.der(), "media.lab"), Ok(()));
    assert_eq!(verify_name(client.der(), "10.0.0.7"), Ok(()));
    assert!(matches!(
        verify_name(server.der(), "other.lab"),
        Err(VerifyError::NameMismatch(_))
    ));

    // A CA made with another key type still issues what it is asked for.
    let ca2 = CaDir::init(tmp.path().join("ca-rsa"), KeyType::Rsa3072, false).unwrap();
    let (leaf, _) = ca2
        .issue("gw.lab", Role::Server, KeyType::EcdsaP384, false)
        .unwrap();
    assert_eq!(leaf.key_type(), KeyType::EcdsaP384);
    assert_eq!(
        verify_chain(leaf.chain(), ca2.certificate().der(), now, Role::Server),
        Ok(())
    );
}

#[test]
fn wrong_chains_fail_with_the_right_error() {
    let ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let other_ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let now = SystemTime::now();

    let server = issue_certificate(&ca, "media.lab", Role::Server, KeyType::EcdsaP256).unwrap();
    let client = issue_certificate(&ca, "alice", Role::Client, KeyType::EcdsaP256).unwrap();
    let foreign =
        issue_certificate(&other_ca, "media.lab", Role::Server, KeyType::EcdsaP256).unwrap();
    let self_signed = Certificate::self_signed(KeyType::EcdsaP256, "media.lab").unwrap();

    assert_eq!(
        verify_chain(foreign.chain(), ca.der(), now, Role::Server),
        Err(VerifyError::NotSignedByCa)
    );
    assert_eq!(
        verify_chain(&foreign.chain()[..1], ca.der(), now, Role::Server),
        Err(VerifyError::NotSignedByCa)
    );
    assert_eq!(
        verify_chain(self_signed.chain(), ca.der(), now, Role::Server),
        Err(VerifyError::SelfSigned)
    );
    assert_eq!(
        verify_chain(client.chain(), ca.der(), now, Role::Server),
        Err(VerifyError::WrongUsage { role: Role::Server })
    );
    assert_eq!(
        verify_chain(server.chain(), ca.der(), now, Role::Client),
        Err(VerifyError::WrongUsage { role: Role::Client })
    );
    assert_eq!(
        verify_chain(server.chain(), ca.der(), now, Role::Both),
        Err(VerifyError::WrongUsage { role: Role::Both })
    );
    assert_eq!(
        verify_chain(server.chain(), ca.der(), now + 2 * 365 * DAY, Role::Server),
        Err(VerifyError::Expired)
    );
    assert_eq!(
        verify_chain(server.chain(), ca.der(), now - 3 * DAY, Role::Server),
        Err(VerifyError::NotYetValid)
    );
    assert_eq!(
        verify_chain(&[], ca.der(), now, Role::Server),
        Err(VerifyError::EmptyChain)
    );
    // A leaf is not a CA, and a CA is not a leaf.
    assert!(matches!(
        verify_chain(server.chain(), server.der(), now, Role::Server),
        Err(VerifyError::BadCa(_))
    ));
    assert!(matches!(
        verify_chain(ca.chain(), ca.der(), now, Role::Server),
        Err(VerifyError::CaAsLeaf)
    ));
    // Garbage is a malformed certificate, not a panic.
    assert!(matches!(
        verify_chain(
            &[vec![0x30, 0x03, 0x02, 0x01, 0x01]],
            ca.der(),
            now,
            Role::Server
        ),
        Err(VerifyError::BadCertificate(_))
    ));
    // Issuing with a certificate that is not a CA is refused.
    assert!(matches!(
        issue_certificate(&server, "x", Role::Server, KeyType::EcdsaP256),
        Err(CaError::NotACa(_))
    ));
    // Every error says something.
    for e in [VerifyError::NotSignedByCa, VerifyError::Expired] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn init_refuses_to_overwrite_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let first = CaDir::init(tmp.path(), KeyType::EcdsaP256, false).unwrap();
    let before = std::fs::read(tmp.path().join("ca.pem")).unwrap();
    let err = CaDir::init(tmp.path(), KeyType::EcdsaP256, false).unwrap_err();
    assert!(
        matches!(err, CaError::Exists(ref p) if p.ends_with("ca.pem")),
        "{err}"
    );
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert_eq!(std::fs::read(tmp.path().join("ca.pem")).unwrap(), before);

    // Issuing twice under one name is refused too, unless asked.
    first
        .issue("bob", Role::Client, KeyType::EcdsaP256, false)
        .unwrap();
    assert!(matches!(
        first.issue("bob", Role::Client, KeyType::EcdsaP256, false),
        Err(CaError::Exists(_))
    ));
    first
        .issue("bob", Role::Client, KeyType::EcdsaP256, true)
        .unwrap();

    let second = CaDir::init(tmp.path(), KeyType::Ed25519, true).unwrap();
    assert_ne!(std::fs::read(tmp.path().join("ca.pem")).unwrap(), before);
    assert_eq!(second.certificate().key_type(), KeyType::Ed25519);
    assert_eq!(
        load_ca(tmp.path()).unwrap().certificate().der(),
        second.certificate().der()
    );
}

#[test]
fn bad_names_and_missing_dirs_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = CaDir::init(tmp.path(), KeyType::EcdsaP256, false).unwrap();
    for name in ["", "../evil", "a/b", ".hidden", "x..y", "sp ace", "-lead"] {
        assert!(
            matches!(
                ca.issue(name, Role::Both, KeyType::EcdsaP256, false),
                Err(CaError::InvalidName(_))
            ),
            "{name:?}"
        );
    }
    let err = load_ca(tmp.path().join("nowhere")).unwrap_err();
    assert!(matches!(err, CaError::Io { .. }));
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[cfg(unix)]
#[test]
fn key_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let ca = CaDir::init(tmp.path(), KeyType::EcdsaP256, false).unwrap();
    ca.issue("media.lab", Role::Server, KeyType::EcdsaP256, false)
        .unwrap();
    for f in ["ca.key", "media.lab.key"] {
        let mode = std::fs::metadata(tmp.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    // Overwriting a key file that had looser permissions tightens them.
    let key = tmp.path().join("ca.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    CaDir::init(tmp.path(), KeyType::EcdsaP256, true).unwrap();
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Interop: OpenSSL (a stack nobody here wrote) accepts the chains for the right purpose and
/// computes the same fingerprint. Without an `openssl` command: a failure under CI, SKIPPED
/// elsewhere.
#[test]
fn openssl_agrees_when_installed() {
    use std::process::Command;
    let Some(openssl) = interop_support::openssl() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ca = CaDir::init(tmp.path(), KeyType::EcdsaP384, false).unwrap();
    let ca_pem = ca.cert_path();
    for (name, role, key, good, bad) in [
        (
            "srv.lab",
            Role::Server,
            KeyType::Rsa2048,
            "sslserver",
            "sslclient",
        ),
        (
            "cli.lab",
            Role::Client,
            KeyType::Ed25519,
            "sslclient",
            "sslserver",
        ),
        (
            "127.0.0.1",
            Role::Both,
            KeyType::EcdsaP256,
            "sslserver",
            "smimesign",
        ),
    ] {
        let (cert, files) = ca.issue(name, role, key, false).unwrap();
        let verify = |purpose: &str| {
            Command::new(&openssl)
                .args(["verify", "-CAfile"])
                .arg(&ca_pem)
                .args(["-purpose", purpose])
                .arg(&files.cert)
                .output()
                .unwrap()
        };
        let ok = verify(good);
        assert!(
            ok.status.success(),
            "{name} {good}: {}",
            String::from_utf8_lossy(&ok.stdout) + String::from_utf8_lossy(&ok.stderr)
        );
        assert!(!verify(bad).status.success(), "{name} accepted for {bad}");

        let out = Command::new(&openssl)
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&files.cert)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let hex = text.trim().rsplit('=').next().unwrap();
        assert_eq!(
            format!("sha-256 {hex}"),
            cert.fingerprint().to_string(),
            "{name}"
        );
    }
}
