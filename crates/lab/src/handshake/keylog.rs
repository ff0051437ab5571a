//! The handshake keylog: one JSON line per finished handshake,
//! `{"peer":"ip:port","srtp_profile":"SRTP_…","keying_material":"<hex>"}`, with the whole
//! `EXTRACTOR-dtls_srtp` block (60 bytes for the AES-CM profiles, 56 for AEAD_AES_128_GCM,
//! 88 for AEAD_AES_256_GCM). The load generator adds `"local"`, its own address, so its lines
//! can be matched with the server's by address.
//!
//! The keylog holds secrets on purpose: it exists so that tests and people can compare both
//! sides' keys. Each line is flushed as it is written, so a reader never waits for an exit.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// One keylog line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeylogLine {
    /// The other side's address.
    pub peer: String,
    /// Our own address (the load generator writes it; the server leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The negotiated profile's DTLS-SRTP name.
    pub srtp_profile: String,
    /// The exported block, lower-case hex.
    pub keying_material: String,
}

/// Appends keylog lines to a file (created if missing, mode 0600 on Unix).
pub struct Keylog {
    path: PathBuf,
    out: BufWriter<File>,
}

impl std::fmt::Debug for Keylog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keylog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Keylog {
    /// Opens `path` for appending.
    pub fn open(path: &Path) -> anyhow::Result<Keylog> {
        let mut opts = OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let file = opts
            .open(path)
            .with_context(|| format!("--keylog {}: cannot open for appending", path.display()))?;
        Ok(Keylog {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    /// Writes one line and flushes it.
    pub fn write(
        &mut self,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        srtp_profile: &str,
        block: &[u8],
    ) -> anyhow::Result<()> {
        let line = KeylogLine {
            peer: peer.to_string(),
            local: local.map(|l| l.to_string()),
            srtp_profile: srtp_profile.to_string(),
            keying_material: hex(block),
        };
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")?;
        self.out
            .flush()
            .with_context(|| format!("writing --keylog {}", self.path.display()))
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Reads a keylog file back (for tests and comparisons).
pub fn read(path: &Path) -> anyhow::Result<Vec<KeylogLine>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading keylog {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not a keylog line", path.display(), i + 1))
        })
        .collect()
}
