//! The SRTP stacks `lab srtp` measures beside secrelay and libsrtp that are not C: webrtc-rs'
//! `webrtc-srtp` (in process) and pion/srtp (Go, `peers/pion-srtp`, run as a child process
//! that times itself with the same method).

use std::collections::BTreeMap;
use std::process::Command;

use secrelay_srtp::Profile;
use webrtc_srtp::context::Context as WContext;
use webrtc_srtp::protection_profile::ProtectionProfile as WProfile;

use super::srtp::SrtpStack;
use crate::measure::Bench;

/// webrtc-srtp's profile for ours, if it has one.
fn webrtc_profile(p: Profile) -> Option<WProfile> {
    Some(match p {
        Profile::AesCm128HmacSha1_80 => WProfile::Aes128CmHmacSha1_80,
        Profile::AesCm128HmacSha1_32 => WProfile::Aes128CmHmacSha1_32,
        Profile::AesCm256HmacSha1_80 => WProfile::Aes256CmHmacSha1_80,
        Profile::AesCm256HmacSha1_32 => WProfile::Aes256CmHmacSha1_32,
        Profile::AeadAes128Gcm => WProfile::AeadAes128Gcm,
        Profile::AeadAes256Gcm => WProfile::AeadAes256Gcm,
        _ => return None,
    })
}

/// webrtc-srtp: its API returns a new buffer per packet; the copy back into the caller's
/// buffer is part of what is timed (a user of that API pays for the allocation too).
pub struct WebrtcSrtp {
    tx: WContext,
    rx: WContext,
}

impl WebrtcSrtp {
    /// A sender/receiver pair with the lab's key, or why not.
    pub fn new(profile: Profile) -> Result<WebrtcSrtp, String> {
        let wp = webrtc_profile(profile)
            .ok_or_else(|| format!("webrtc-srtp 0.17 has no {}", profile.sdp_name()))?;
        let key = vec![0x42; profile.key_len()];
        let salt = vec![0x17; profile.salt_len()];
        let tx = WContext::new(&key, &salt, wp, None, None).map_err(|e| e.to_string())?;
        let rx = WContext::new(
            &key,
            &salt,
            wp,
            Some(webrtc_srtp::option::srtp_replay_protection(1024)),
            None,
        )
        .map_err(|e| e.to_string())?;
        Ok(WebrtcSrtp { tx, rx })
    }
}

fn copy_back(buf: &mut [u8], out: &[u8]) -> Result<usize, String> {
    buf.get_mut(..out.len())
        .ok_or("buffer too small")?
        .copy_from_slice(out);
    Ok(out.len())
}

impl SrtpStack for WebrtcSrtp {
    fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        let out = self
            .tx
            .encrypt_rtp(&buf[..len])
            .map_err(|e| e.to_string())?;
        copy_back(buf, &out)
    }
    fn unprotect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        let out = self
            .rx
            .decrypt_rtp(&buf[..len])
            .map_err(|e| e.to_string())?;
        copy_back(buf, &out)
    }
}

/// pion/srtp's figures: (protect ns, unprotect ns, spread %) per (profile SDP name, size), or
/// one reason for all when the Go peer cannot run here.
pub type PionResults = Result<BTreeMap<(String, usize), Result<(f64, f64, f64), String>>, String>;

/// Runs `peers/pion-srtp` for the given profiles and sizes with the bench's run settings.
pub fn pion(bench: &Bench, profiles: &[Profile], sizes: &[usize]) -> PionResults {
    let bin = crate::go_peer::build("pion-srtp")?;
    let names: Vec<&str> = profiles.iter().map(|p| p.sdp_name()).collect();
    let sizes_arg: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    let out = Command::new(&bin)
        .arg("--profiles")
        .arg(names.join(","))
        .arg("--sizes")
        .arg(sizes_arg.join(","))
        .arg("--runs")
        .arg(bench.runs.to_string())
        .arg("--run-ms")
        .arg(bench.run_time.as_millis().max(1).to_string())
        .arg("--warmup-ms")
        .arg(bench.warmup.as_millis().to_string())
        .output()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "pion-srtp failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut results = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("pion-srtp printed {line:?}: {e}"))?;
        let profile = v["profile"].as_str().unwrap_or_default().to_string();
        let size = v["size"].as_u64().unwrap_or_default() as usize;
        let r = match v["error"].as_str() {
            Some(e) => Err(format!("pion/srtp: {e}")),
            None => match (v["protect_ns"].as_f64(), v["unprotect_ns"].as_f64()) {
                (Some(p), Some(u)) => Ok((p, u, v["protect_spread_pct"].as_f64().unwrap_or(0.0))),
                _ => Err(format!("pion-srtp printed no figures: {line}")),
            },
        };
        results.insert((profile, size), r);
    }
    Ok(results)
}
