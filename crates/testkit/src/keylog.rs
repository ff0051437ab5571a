//! Key logs of simulated clients: every SRTP secret a simulated participant or phone holds,
//! one line each, as browsers write `SSLKEYLOGFILE`. They let an engineer decrypt a capture of
//! a demo or test run (`secrelay srtp decrypt --key` takes a line's SDES inline form), and let
//! a test look for those secrets where none may appear, such as the gateway's logs.
//!
//! Only the simulated clients write them, and only when asked (`secrelay demo --keylog`): the
//! gateway never writes a key anywhere. A line holds the client's half of a secret it shares
//! with the gateway, which the client has anyway.
//!
//! A line: `ADDRESS LABEL PROFILE HEX`, where ADDRESS is the client's socket address, LABEL one
//! of [`KeyLabel`]'s names, PROFILE the RFC 4568/5764 name of the SRTP profile and HEX the
//! secret (for SRTP master keys: key then salt, as SDES concatenates them).

use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use secrelay_srtp::{MasterKey, Profile};

/// Which secret a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLabel {
    /// The master key and salt the client protects what it sends with (DTLS-SRTP or SDES).
    SrtpSend,
    /// The master key and salt of what the gateway sends the client.
    SrtpReceive,
    /// The whole DTLS-SRTP exporter output (RFC 5764 §4.2) both keys came from.
    DtlsExporter,
}

impl KeyLabel {
    /// The label's name in a line.
    pub fn name(self) -> &'static str {
        match self {
            KeyLabel::SrtpSend => "SRTP_SEND",
            KeyLabel::SrtpReceive => "SRTP_RECEIVE",
            KeyLabel::DtlsExporter => "DTLS_SRTP_EXPORTER",
        }
    }

    fn parse(s: &str) -> Option<KeyLabel> {
        [
            KeyLabel::SrtpSend,
            KeyLabel::SrtpReceive,
            KeyLabel::DtlsExporter,
        ]
        .into_iter()
        .find(|l| l.name() == s)
    }
}

/// One secret of one client.
#[derive(Clone)]
pub struct KeyLogLine {
    /// The client's socket address.
    pub addr: SocketAddr,
    /// Which secret.
    pub label: KeyLabel,
    /// The SRTP profile it is for.
    pub profile: Profile,
    /// The secret's bytes (wiped on drop).
    pub secret: zeroize::Zeroizing<Vec<u8>>,
}

impl fmt::Debug for KeyLogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyLogLine")
            .field("addr", &self.addr)
            .field("label", &self.label)
            .field("profile", &self.profile)
            .field("secret_len", &self.secret.len())
            .finish()
    }
}

impl KeyLogLine {
    /// A master key's line.
    pub fn master_key(addr: SocketAddr, label: KeyLabel, key: &MasterKey) -> KeyLogLine {
        KeyLogLine {
            addr,
            label,
            profile: key.profile(),
            secret: zeroize::Zeroizing::new(key.concatenated()),
        }
    }

    /// The line's text (no newline).
    pub fn to_line(&self) -> String {
        let hex: String = self.secret.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {} {hex}",
            self.addr,
            self.label.name(),
            self.profile.sdp_name()
        )
    }

    /// Reads a line written by [`KeyLogLine::to_line`]. Err: what is wrong with it.
    pub fn parse(line: &str) -> Result<KeyLogLine, String> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [addr, label, profile, hex] = f[..] else {
            return Err(format!(
                "a key log line has four fields (address, label, profile, hex), this one {}",
                f.len()
            ));
        };
        let addr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
        let label = KeyLabel::parse(label).ok_or_else(|| format!("unknown label {label:?}"))?;
        let profile = Profile::ALL
            .into_iter()
            .find(|p| p.sdp_name() == profile)
            .ok_or_else(|| format!("unknown SRTP profile {profile:?}"))?;
        if hex.len() % 2 != 0 {
            return Err("the secret's hex has an odd length".into());
        }
        let secret = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|e| format!("the secret's hex: {e}"))?;
        Ok(KeyLogLine {
            addr,
            label,
            profile,
            secret: zeroize::Zeroizing::new(secret),
        })
    }

    /// The master key, for SRTP lines.
    pub fn as_master_key(&self) -> Option<MasterKey> {
        match self.label {
            KeyLabel::DtlsExporter => None,
            _ => MasterKey::from_concatenated(self.profile, &self.secret).ok(),
        }
    }
}

/// Appends `lines` to the key log at `path` (made readable by its owner only).
pub fn append(path: &Path, lines: &[KeyLogLine]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut text = zeroize::Zeroizing::new(String::new());
    for l in lines {
        text.push_str(&l.to_line());
        text.push('\n');
    }
    f.write_all(text.as_bytes())
}

/// Every line of the key log at `path`. Err: the file, or the first bad line, named.
pub fn read(path: &Path) -> Result<Vec<KeyLogLine>, String> {
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            KeyLogLine::parse(l).map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_written_and_bad_lines_say_why() {
        let key = MasterKey::new(Profile::AesCm128HmacSha1_80, &[7; 16], &[9; 14]).unwrap();
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let line = KeyLogLine::master_key(addr, KeyLabel::SrtpSend, &key);
        let text = line.to_line();
        assert!(text.starts_with("127.0.0.1:4000 SRTP_SEND AES_CM_128_HMAC_SHA1_80 0707"));
        let back = KeyLogLine::parse(&text).unwrap();
        assert_eq!(back.as_master_key().unwrap().key(), key.key());
        assert_eq!(back.as_master_key().unwrap().salt(), key.salt());
        assert!(
            !format!("{line:?}").contains("0707"),
            "Debug shows no secret"
        );
        for (bad, why) in [
            ("x", "four fields"),
            ("nowhere SRTP_SEND AES_CM_128_HMAC_SHA1_80 00", "address"),
            ("127.0.0.1:1 KEY AES_CM_128_HMAC_SHA1_80 00", "label"),
            ("127.0.0.1:1 SRTP_SEND ROT13 00", "profile"),
            ("127.0.0.1:1 SRTP_SEND AES_CM_128_HMAC_SHA1_80 0", "odd"),
            ("127.0.0.1:1 SRTP_SEND AES_CM_128_HMAC_SHA1_80 zz", "hex"),
        ] {
            let e = KeyLogLine::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
