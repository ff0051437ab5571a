//! `secrelay ca init/issue/fingerprint` run as a binary.

use std::path::Path;
use std::process::{Command, Output};
use std::time::SystemTime;

use secrelay_dtls::ca::{load_ca, verify_chain, Role};
use secrelay_dtls::cert::Certificate;
use secrelay_dtls::fingerprint::Fingerprint;

fn secrelay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(args)
        .output()
        .expect("the secrelay binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn load(dir: &Path, name: &str) -> Certificate {
    let pem = std::fs::read_to_string(dir.join(format!("{name}.pem"))).unwrap();
    let key = std::fs::read_to_string(dir.join(format!("{name}.key"))).unwrap();
    Certificate::from_pem(&pem, &key).unwrap()
}

#[test]
fn init_issue_and_fingerprint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lab-ca");
    let d = dir.to_str().unwrap();

    let out = secrelay(&["ca", "init", "--dir", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err.contains("ca.pem") && err.contains("ca.key"), "{err}");

    // A second init is refused and names the file; --force replaces.
    let out = secrelay(&["ca", "init", "--dir", d]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("ca.pem"),
        "{}",
        text(&out.stderr)
    );
    let out = secrelay(&["ca", "init", "--dir", d, "--force", "--key", "ed25519"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = secrelay(&["ca", "issue", "--dir", d, "--name", "media.lab", "--server"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).lines().count(), 2);
    let out = secrelay(&[
        "ca", "issue", "--dir", d, "--name", "10.1.2.3", "--client", "--key", "rsa-2048",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = secrelay(&["ca", "issue", "--dir", d, "--name", "peer"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let ca = load_ca(&dir).unwrap();
    let now = SystemTime::now();
    let server = load(&dir, "media.lab");
    let client = load(&dir, "10.1.2.3");
    let peer = load(&dir, "peer");
    let ca_der = ca.certificate().der();
    assert_eq!(
        verify_chain(server.chain(), ca_der, now, Role::Server),
        Ok(())
    );
    assert!(verify_chain(server.chain(), ca_der, now, Role::Client).is_err());
    assert_eq!(
        verify_chain(client.chain(), ca_der, now, Role::Client),
        Ok(())
    );
    assert!(verify_chain(client.chain(), ca_der, now, Role::Server).is_err());
    assert_eq!(verify_chain(peer.chain(), ca_der, now, Role::Both), Ok(()));

    // Fingerprint of the leaf (the first certificate in the file), as SDP wants it.
    let cert_file = dir.join("media.lab.pem");
    let out = secrelay(&["ca", "fingerprint", "--cert", cert_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    assert!(line.starts_with("sha-256 "), "{line}");
    let fp: Fingerprint = line.trim().parse().unwrap();
    assert!(fp.matches(server.der()));
    // The same for a DER file, with another hash.
    let der_file = tmp.path().join("leaf.der");
    std::fs::write(&der_file, server.der()).unwrap();
    let out = secrelay(&[
        "ca",
        "fingerprint",
        "--cert",
        der_file.to_str().unwrap(),
        "--hash",
        "sha-512",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fp: Fingerprint = text(&out.stdout).trim().parse().unwrap();
    assert!(fp.matches(server.der()));
}

#[test]
fn bad_flags_and_paths_name_themselves() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();

    let out = secrelay(&["ca", "init", "--dir", d, "--key", "dsa-512"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--key") && err.contains("dsa-512"), "{err}");
    assert!(
        err.contains("ecdsa-p256") && err.contains("rsa-4096"),
        "{err}"
    );

    // No CA in the directory.
    let out = secrelay(&["ca", "issue", "--dir", d, "--name", "x"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--dir") && err.contains("ca.pem"), "{err}");

    // A name that is not a DNS name or IP address.
    assert!(secrelay(&["ca", "init", "--dir", d]).status.success());
    let out = secrelay(&["ca", "issue", "--dir", d, "--name", "../up"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("../up"), "{}", text(&out.stderr));

    // A directory that cannot be created.
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let under = file.join("ca");
    let out = secrelay(&["ca", "init", "--dir", under.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("plain-file"),
        "{}",
        text(&out.stderr)
    );

    // A missing certificate file.
    let out = secrelay(&["ca", "fingerprint", "--cert", "/nonexistent/cert.pem"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent/cert.pem"));
}
