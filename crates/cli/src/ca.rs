//! `secrelay ca`: a private CA for lab set-ups, and certificate fingerprints for SDP.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use secrelay_dtls::ca::{CaDir, CaError, Role};
use secrelay_dtls::cert::{chain_from_pem, KeyType};
use secrelay_dtls::fingerprint::{Fingerprint, HashAlgorithm};

/// `secrelay ca …`
#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Create a private CA in a directory: ca.pem (certificate) and ca.key (key, mode 0600).
    Init(InitArgs),
    /// Issue a certificate signed by the CA: <name>.pem (certificate then CA) and <name>.key.
    Issue(IssueArgs),
    /// Print a certificate's fingerprint as used in SDP a=fingerprint ("sha-256 AB:CD:…").
    Fingerprint(FingerprintArgs),
}

/// Flags of `ca init`.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory for the CA files (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// Key type: ecdsa-p256, ecdsa-p384, ed25519, rsa-2048, rsa-3072 or rsa-4096.
    #[arg(long, default_value = "ecdsa-p256", value_parser = parse_key_type)]
    pub key: KeyType,
    /// Replace an existing CA in the directory.
    #[arg(long)]
    pub force: bool,
}

/// Flags of `ca issue`.
#[derive(Args, Debug)]
pub struct IssueArgs {
    /// Directory of the CA (made by `secrelay ca init`); the new files go there too.
    #[arg(long)]
    pub dir: PathBuf,
    /// Name of the peer: DNS name or IP address (subject and SAN), also the file name.
    #[arg(long)]
    pub name: String,
    /// Server certificate only (serverAuth). Neither flag: both usages.
    #[arg(long)]
    pub server: bool,
    /// Client certificate only (clientAuth). Neither flag: both usages.
    #[arg(long)]
    pub client: bool,
    /// Key type: ecdsa-p256, ecdsa-p384, ed25519, rsa-2048, rsa-3072 or rsa-4096.
    #[arg(long, default_value = "ecdsa-p256", value_parser = parse_key_type)]
    pub key: KeyType,
    /// Replace an existing certificate of that name.
    #[arg(long)]
    pub force: bool,
}

/// Flags of `ca fingerprint`.
#[derive(Args, Debug)]
pub struct FingerprintArgs {
    /// Certificate file, PEM (the first certificate is used) or DER.
    #[arg(long)]
    pub cert: PathBuf,
    /// Hash function: sha-256, sha-384, sha-512 or sha-1.
    #[arg(long, default_value = "sha-256", value_parser = parse_hash)]
    pub hash: HashAlgorithm,
}

fn parse_key_type(s: &str) -> Result<KeyType, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_hash(s: &str) -> Result<HashAlgorithm, String> {
    s.parse().map_err(|e| format!("{e}"))
}

/// Runs a `ca` subcommand.
pub fn run(cmd: &CaCommand) -> Result<()> {
    match cmd {
        CaCommand::Init(a) => init(a),
        CaCommand::Issue(a) => issue(a),
        CaCommand::Fingerprint(a) => fingerprint(a),
    }
}

fn init(a: &InitArgs) -> Result<()> {
    let ca = CaDir::init(&a.dir, a.key, a.force).map_err(|e| {
        let hint = if matches!(e, CaError::Exists(_)) {
            " (--force replaces it)"
        } else {
            ""
        };
        anyhow::Error::new(e).context(format!("ca init --dir {}{hint}", a.dir.display()))
    })?;
    eprintln!(
        "wrote {} (CA certificate, {})",
        ca.cert_path().display(),
        a.key
    );
    eprintln!(
        "wrote {} (CA private key, mode 0600)",
        ca.key_path().display()
    );
    Ok(())
}

fn issue(a: &IssueArgs) -> Result<()> {
    let role = match (a.server, a.client) {
        (true, false) => Role::Server,
        (false, true) => Role::Client,
        _ => Role::Both,
    };
    let ca = CaDir::load(&a.dir).with_context(|| format!("ca issue --dir {}", a.dir.display()))?;
    let (cert, files) = ca.issue(&a.name, role, a.key, a.force).map_err(|e| {
        let hint = if matches!(e, CaError::Exists(_)) {
            " (--force replaces it)"
        } else {
            ""
        };
        anyhow::Error::new(e).context(format!("ca issue --name {}{hint}", a.name))
    })?;
    eprintln!(
        "wrote {} ({role} certificate for {}, {}, then the CA certificate)",
        files.cert.display(),
        a.name,
        cert.key_type()
    );
    eprintln!("wrote {} (private key, mode 0600)", files.key.display());
    Ok(())
}

fn fingerprint(a: &FingerprintArgs) -> Result<()> {
    let bytes = std::fs::read(&a.cert)
        .with_context(|| format!("ca fingerprint --cert {}", a.cert.display()))?;
    let der = match std::str::from_utf8(&bytes) {
        Ok(text) if text.contains("-----BEGIN") => chain_from_pem(text)
            .with_context(|| format!("ca fingerprint --cert {}", a.cert.display()))?
            .swap_remove(0),
        _ => bytes,
    };
    println!("{}", Fingerprint::of(&der, a.hash));
    Ok(())
}
