//! `secrelay srtp decrypt|encrypt`: SRTP over the packets of a capture file.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _, Result};
use secrelay_srtp::{Context, Error as SrtpError, MasterKey, Policy, Profile};
use secrelay_wire::pcap::{CaptureFormat, CaptureReader, CaptureWriter};
use secrelay_wire::{classify, PacketKind};
use serde::Serialize;

use crate::CaptureArgs;

/// Which way the capture is transformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// SRTP/SRTCP → RTP/RTCP.
    Decrypt,
    /// RTP/RTCP → SRTP/SRTCP.
    Encrypt,
}

/// What happened to the packets of a capture.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Every packet (frame) in the input.
    pub packets: u64,
    /// UDP packets that parsed as RTP.
    pub rtp: u64,
    /// UDP packets that parsed as RTCP.
    pub rtcp: u64,
    /// RTP + RTCP packets decrypted (or encrypted).
    #[serde(skip)]
    pub processed: u64,
    /// Packets whose authentication tag did not verify (left out).
    pub auth_failed: u64,
    /// Packets refused as replays, duplicate or too old (left out).
    pub replayed: u64,
    /// Packets that are not RTP/RTCP (or not on --port): passed through unchanged.
    pub not_rtp: u64,
    /// RTP/RTCP packets refused for another reason (too short, malformed, stream cap) (left out).
    pub failed_other: u64,
}

fn parse_key(profile: &str, key: &str) -> Result<MasterKey> {
    let profile: Profile = profile.parse().map_err(|e| anyhow!("--profile: {e}"))?;
    MasterKey::from_sdes_inline(profile, key).map_err(|e| anyhow!("--key: {e}"))
}

/// Runs decrypt or encrypt as the flags say; writes OUT only if everything succeeds.
pub fn run(mode: Mode, args: &CaptureArgs) -> Result<()> {
    if mode == Mode::Encrypt && args.key.len() > 1 {
        return Err(anyhow!(
            "--key: encrypt takes one key, got {}",
            args.key.len()
        ));
    }
    let keys = args
        .key
        .iter()
        .map(|k| parse_key(&args.profile, k))
        .collect::<Result<Vec<_>>>()?;
    let input =
        File::open(&args.input).with_context(|| format!("--in {}", args.input.display()))?;
    let tmp = temp_path(&args.output);
    let result = (|| -> Result<Counters> {
        let out = File::create(&tmp).with_context(|| format!("--out {}", args.output.display()))?;
        let counters = process(mode, keys, BufReader::new(input), BufWriter::new(out), args)
            .with_context(|| format!("--in {}", args.input.display()))?;
        std::fs::rename(&tmp, &args.output)
            .with_context(|| format!("--out {}", args.output.display()))?;
        Ok(counters)
    })();
    let counters = match result {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let verb = if mode == Mode::Decrypt {
        "decrypted"
    } else {
        "encrypted"
    };
    eprintln!(
        "secrelay srtp {}: {} packets, {} RTP, {} RTCP, {} {verb}, {} auth failed, {} replayed, {} not RTP, {} other failures -> {}",
        if mode == Mode::Decrypt { "decrypt" } else { "encrypt" },
        counters.packets,
        counters.rtp,
        counters.rtcp,
        counters.processed,
        counters.auth_failed,
        counters.replayed,
        counters.not_rtp,
        counters.failed_other,
        args.output.display()
    );
    if args.json {
        let mut v = serde_json::to_value(&counters)?;
        v[verb] = counters.processed.into();
        println!("{v}");
    }
    Ok(())
}

fn temp_path(out: &Path) -> PathBuf {
    let mut name = out
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".partial-{}", std::process::id()));
    out.with_file_name(name)
}

/// Transforms a capture; the core of `run`, kept free of file names for tests.
pub fn process<R: std::io::Read, W: Write>(
    mode: Mode,
    keys: Vec<MasterKey>,
    input: R,
    output: W,
    args: &CaptureArgs,
) -> Result<Counters> {
    let mut contexts = keys
        .into_iter()
        .map(|key| {
            let policy = Policy::new(key).max_streams(1 << 16);
            Context::new(match mode {
                Mode::Decrypt => policy.any_inbound(),
                Mode::Encrypt => policy.any_outbound(),
            })
            .map_err(|e| anyhow!("--key: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    // Which key each SSRC authenticated with (several keys: a call's two directions).
    let mut bound: HashMap<u32, usize> = HashMap::new();
    let mut orig: Vec<u8> = Vec::with_capacity(2048);
    let mut reader = CaptureReader::new(input).map_err(|e| anyhow!("{e}"))?;
    // Encrypted packets grow by up to 20 bytes: make room in the output's snap length.
    let out_format = |f: &CaptureFormat| {
        let mut f = f.clone();
        if mode == Mode::Encrypt {
            f.raise_snaplen(65535 + 64);
        }
        f
    };
    let mut writer =
        CaptureWriter::new(output, &out_format(reader.format())).map_err(|e| anyhow!("{e}"))?;
    let mut interfaces = reader.format().interface_count();
    let mut counters = Counters::default();
    let mut roc_set: HashSet<u32> = HashSet::new();
    let mut buf = vec![0u8; 65536 + 64];
    while let Some(packet) = reader.next_packet() {
        let mut packet = packet.map_err(|e| anyhow!("packet {}: {e}", counters.packets + 1))?;
        counters.packets += 1;
        // pcapng may declare new interfaces as it goes.
        if reader.format().interface_count() != interfaces {
            interfaces = reader.format().interface_count();
            writer
                .add_new_interfaces(&out_format(reader.format()))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let on_port = |p: u16| args.port.is_none_or(|want| want == p);
        let kind = match (packet.udp(), packet.udp_payload()) {
            (Some(u), Some(payload)) if on_port(u.src_port) || on_port(u.dst_port) => {
                classify(payload)
            }
            _ => PacketKind::Other,
        };
        let rtcp = match kind {
            PacketKind::Rtp => false,
            PacketKind::Rtcp => true,
            _ => {
                counters.not_rtp += 1;
                writer.write_packet(&packet).map_err(|e| anyhow!("{e}"))?;
                continue;
            }
        };
        orig.clear();
        orig.extend_from_slice(packet.udp_payload().unwrap_or_default());
        let len = orig.len();
        // classify() saw at least 8 (RTCP) or 12 (RTP) bytes.
        let ssrc_at = if rtcp { 4 } else { 8 };
        let ssrc = u32::from_be_bytes([
            orig[ssrc_at],
            orig[ssrc_at + 1],
            orig[ssrc_at + 2],
            orig[ssrc_at + 3],
        ]);
        if rtcp {
            counters.rtcp += 1;
        } else {
            counters.rtp += 1;
            if let Some(roc) = args.roc {
                if roc_set.insert(ssrc) {
                    for ctx in contexts.iter_mut() {
                        ctx.set_roc(ssrc, roc)
                            .map_err(|e| anyhow!("--roc {roc}: {e}"))?;
                    }
                }
            }
        }
        let candidates = match bound.get(&ssrc) {
            Some(&i) => i..i + 1,
            None => 0..contexts.len(),
        };
        let mut r = Err(SrtpError::AuthFailed);
        for i in candidates {
            buf[..len].copy_from_slice(&orig);
            let ctx = &mut contexts[i];
            r = match (mode, rtcp) {
                (Mode::Decrypt, false) => ctx.unprotect_rtp(&mut buf, len),
                (Mode::Decrypt, true) => ctx.unprotect_rtcp(&mut buf, len),
                (Mode::Encrypt, false) => ctx.protect_rtp(&mut buf, len),
                (Mode::Encrypt, true) => ctx.protect_rtcp(&mut buf, len),
            };
            if r.is_ok() {
                bound.insert(ssrc, i);
            }
            if r != Err(SrtpError::AuthFailed) {
                break;
            }
        }
        match r {
            Ok(n) => {
                packet
                    .replace_udp_payload(&buf[..n])
                    .map_err(|e| anyhow!("packet {}: {e}", counters.packets))?;
                writer.write_packet(&packet).map_err(|e| anyhow!("{e}"))?;
                counters.processed += 1;
            }
            Err(SrtpError::AuthFailed) => counters.auth_failed += 1,
            Err(SrtpError::ReplayDuplicate | SrtpError::ReplayOld) => counters.replayed += 1,
            Err(_) => counters.failed_other += 1,
        }
    }
    let mut out = writer.finish().map_err(|e| anyhow!("{e}"))?;
    out.flush()?;
    Ok(counters)
}

/// `secrelay srtp keygen`.
pub fn keygen(profile: &str) -> Result<()> {
    let profile: Profile = profile.parse().map_err(|e| anyhow!("--profile: {e}"))?;
    let mut raw = vec![0u8; profile.key_len() + profile.salt_len()];
    getrandom::fill(&mut raw).map_err(|e| anyhow!("no randomness from the OS: {e}"))?;
    let key = MasterKey::from_concatenated(profile, &raw).map_err(|e| anyhow!("{e}"))?;
    raw.iter_mut().for_each(|b| *b = 0);
    println!("{}", key.to_sdes_inline());
    Ok(())
}

/// `secrelay srtp profiles`.
pub fn print_profiles() {
    println!(
        "{:<26} {:>9} {:>10} {:>12} {:>13}  DTLS-SRTP",
        "profile", "key bytes", "salt bytes", "SRTP tag", "SRTCP tag"
    );
    for p in Profile::ALL {
        println!(
            "{:<26} {:>9} {:>10} {:>12} {:>13}  {}",
            p.sdp_name(),
            p.key_len(),
            p.salt_len(),
            p.rtp_tag_len(),
            p.rtcp_tag_len(),
            p.dtls_profile().map(|(n, _)| n).unwrap_or("-")
        );
    }
}
