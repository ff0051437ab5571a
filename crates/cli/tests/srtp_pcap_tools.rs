//! `secrelay srtp encrypt|decrypt` on real capture files: round trips, libsrtp-made SRTP,
//! failures counted, and bad flags or files refused with one clear line and no output.

use std::path::Path;
use std::process::Command;

use secrelay_peers::libsrtp::{Direction, LibSrtp, LibsrtpProfile};
use secrelay_wire::pcap::{Capture, CaptureFormat, CapturedPacket, LinkType, PcapPrecision};
use serde_json::Value;

const KEY: &str = "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz"; // RFC 4568 example, 30 bytes
const GCM_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGw"; // 28 bytes

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
}

/// Ethernet + IPv4 + UDP frame around `payload`, with a correct UDP checksum left at zero.
fn eth_ipv4_udp(payload: &[u8], sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00];
    let total = 20 + 8 + payload.len();
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    let mut sum: u32 = 0;
    for c in ip.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let ck = !(sum as u16);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn rtp(ssrc: u32, seq: u16, payload_len: usize) -> Vec<u8> {
    let mut p = vec![0x80, 0];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(seq as u32 * 160).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..payload_len).map(|i| (i as u8) ^ (seq as u8)));
    p
}

fn rtcp_rr(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 201, 0, 1];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p
}

fn write_capture(path: &Path, payloads: &[(Vec<u8>, u16)]) {
    let packets = payloads
        .iter()
        .enumerate()
        .map(|(i, (p, port))| {
            CapturedPacket::new(
                LinkType::ETHERNET,
                1_700_000_000_000_000_000 + i as u64 * 20_000_000,
                eth_ipv4_udp(p, 5004, *port),
            )
        })
        .collect();
    let cap = Capture {
        format: CaptureFormat::new_pcap(LinkType::ETHERNET, PcapPrecision::Micro, 65535),
        packets,
    };
    std::fs::write(path, cap.to_bytes().unwrap()).unwrap();
}

fn read_payloads(path: &Path) -> Vec<Vec<u8>> {
    let cap = Capture::parse(&std::fs::read(path).unwrap()).unwrap();
    cap.packets
        .iter()
        .map(|p| p.udp_payload().unwrap().to_vec())
        .collect()
}

fn run_tool(
    verb: &str,
    profile: &str,
    key: &str,
    input: &Path,
    out: &Path,
    extra: &[&str],
) -> (bool, Value, String) {
    let o = bin()
        .args(["srtp", verb, "--profile", profile, "--key", key, "--in"])
        .arg(input)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        o.status.success(),
        json,
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn encrypt_then_decrypt_round_trips_every_profile() {
    let dir = tempfile::tempdir().unwrap();
    for (profile, key) in [
        ("AES_CM_128_HMAC_SHA1_80", KEY),
        ("AES_CM_128_HMAC_SHA1_32", KEY),
        ("AEAD_AES_128_GCM", GCM_KEY),
        ("NULL_HMAC_SHA1_80", KEY),
    ] {
        let plain = dir.path().join("plain.pcap");
        let enc = dir.path().join("enc.pcap");
        let dec = dir.path().join("dec.pcap");
        let mut payloads: Vec<(Vec<u8>, u16)> = (0..50u16)
            .map(|i| (rtp(0xabc, 65520u16.wrapping_add(i), 160), 6000))
            .collect();
        payloads.push((rtcp_rr(0xabc), 6000));
        payloads.push((b"not rtp at all".to_vec(), 5060));
        write_capture(&plain, &payloads);
        let (ok, j, err) = run_tool("encrypt", profile, key, &plain, &enc, &[]);
        assert!(ok, "{profile}: {err}");
        assert_eq!(j["encrypted"], 51, "{profile}: {j}");
        assert_eq!(j["rtp"], 50);
        assert_eq!(j["rtcp"], 1);
        assert_eq!(j["not_rtp"], 1);
        assert!(err.contains("51 encrypted"), "{err}");
        let encp = read_payloads(&enc);
        assert_ne!(encp[0], payloads[0].0);
        let (ok, j, err) = run_tool("decrypt", profile, key, &enc, &dec, &[]);
        assert!(ok, "{err}");
        assert_eq!(j["decrypted"], 51, "{profile}: {j}");
        assert_eq!(j["auth_failed"], 0);
        let back = read_payloads(&dec);
        let want: Vec<Vec<u8>> = payloads.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(back, want, "{profile}");
    }
}

#[test]
fn decrypts_libsrtp_made_srtp_and_counts_tampered_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let mut tx = libsrtp_sender();
    let mut payloads = Vec::new();
    let mut plain = Vec::new();
    for i in 0..40u16 {
        let p = rtp(0x1234, 1000 + i, 160);
        payloads.push((libsrtp_protect(&mut tx, &p), 7000));
        plain.push(p);
    }
    let dup = payloads[5].clone();
    payloads.push(dup); // replayed
    let mut bad = libsrtp_protect(&mut tx, &rtp(0x1234, 2000, 160));
    bad[30] ^= 1;
    payloads.push((bad, 7000)); // tampered (a replayed copy would be refused as a replay first)
    payloads.push((rtp(0x99, 1, 20), 7002)); // other port
    let input = dir.path().join("in.pcap");
    let out = dir.path().join("out.pcap");
    write_capture(&input, &payloads);
    let (ok, j, err) = run_tool(
        "decrypt",
        "AES_CM_128_HMAC_SHA1_80",
        &format!("inline:{KEY}|2^31"),
        &input,
        &out,
        &["--port", "7000"],
    );
    assert!(ok, "{err}");
    assert_eq!(j["packets"], 43);
    assert_eq!(j["decrypted"], 40, "{j}");
    assert_eq!(j["replayed"], 1);
    assert_eq!(j["auth_failed"], 1);
    assert_eq!(j["not_rtp"], 1);
    let back = read_payloads(&out);
    assert_eq!(&back[..40], &plain[..]);
    assert_eq!(back.len(), 41); // the other-port packet passes through
}

#[test]
fn roc_flag_resumes_a_stream_captured_mid_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut tx = libsrtp_sender();
    let mut payloads = Vec::new();
    // Send through two rollovers, capture only the last 30 packets.
    let mut seq: u16 = 0;
    for i in 0..(2 * 65536 + 30u32) {
        let p = rtp(0x77, seq, 8);
        let b = libsrtp_protect(&mut tx, &p);
        if i >= 2 * 65536 {
            payloads.push((b, 7000));
        }
        seq = seq.wrapping_add(1);
    }
    let input = dir.path().join("in.pcap");
    write_capture(&input, &payloads);
    let out = dir.path().join("out.pcap");
    let (_, j, _) = run_tool("decrypt", "AES_CM_128_HMAC_SHA1_80", KEY, &input, &out, &[]);
    assert_eq!(
        j["auth_failed"], 30,
        "without --roc every packet fails: {j}"
    );
    let (ok, j, err) = run_tool(
        "decrypt",
        "AES_CM_128_HMAC_SHA1_80",
        KEY,
        &input,
        &out,
        &["--roc", "2"],
    );
    assert!(ok, "{err}");
    assert_eq!(j["decrypted"], 30, "{j}");
}

#[test]
fn bad_flags_and_files_fail_with_one_line_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    write_capture(&input, &[(rtp(1, 1, 10), 7000)]);
    let out = dir.path().join("out.pcap");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--profile", "AES_CM_999", "--key", KEY], "--profile"),
        (
            vec!["--profile", "AES_CM_128_HMAC_SHA1_80", "--key", "AAAA"],
            "--key",
        ),
        (vec!["--profile", "AEAD_AES_128_GCM", "--key", KEY], "--key"),
        (
            vec!["--profile", "AES_CM_128_HMAC_SHA1_80", "--key", "%%%"],
            "--key",
        ),
    ];
    for (flags, names) in cases {
        let o = bin()
            .args(["srtp", "decrypt"])
            .args(&flags)
            .arg("--in")
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(names), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists());
    }
    // A missing input and a file that is not a capture.
    let o = bin()
        .args([
            "srtp",
            "decrypt",
            "--profile",
            "AES_CM_128_HMAC_SHA1_80",
            "--key",
            KEY,
            "--in",
            "/nonexistent.pcap",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.pcap"));
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let o = bin()
        .args([
            "srtp",
            "decrypt",
            "--profile",
            "AES_CM_128_HMAC_SHA1_80",
            "--key",
            KEY,
            "--in",
        ])
        .arg(&junk)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("junk.pcap"), "{err}");
    assert!(!out.exists(), "nothing written half-way");
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("partial")));
}

#[test]
fn decrypt_with_both_directions_keys_binds_each_ssrc_to_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.pcap");
    let a_out = dir.path().join("a.pcap");
    let b_out = dir.path().join("b.pcap");
    let key_b = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNk"; // another 30 bytes
    write_capture(
        &plain,
        &(0..20u16)
            .map(|i| (rtp(0xa, i, 80), 7000))
            .collect::<Vec<_>>(),
    );
    run_tool(
        "encrypt",
        "AES_CM_128_HMAC_SHA1_80",
        KEY,
        &plain,
        &a_out,
        &[],
    );
    let plain_b = dir.path().join("plain_b.pcap");
    write_capture(
        &plain_b,
        &(0..20u16)
            .map(|i| (rtp(0xb, i, 80), 7001))
            .collect::<Vec<_>>(),
    );
    run_tool(
        "encrypt",
        "AES_CM_128_HMAC_SHA1_80",
        key_b,
        &plain_b,
        &b_out,
        &[],
    );
    // Interleave the two directions in one capture.
    let a = read_payloads(&a_out);
    let b = read_payloads(&b_out);
    let mixed: Vec<(Vec<u8>, u16)> = a
        .iter()
        .zip(&b)
        .flat_map(|(x, y)| [(x.clone(), 7000), (y.clone(), 7001)])
        .collect();
    let both = dir.path().join("both.pcap");
    write_capture(&both, &mixed);
    let out = dir.path().join("out.pcap");
    let o = bin()
        .args([
            "srtp",
            "decrypt",
            "--profile",
            "AES_CM_128_HMAC_SHA1_80",
            "--key",
            KEY,
            "--key",
            key_b,
            "--json",
            "--in",
        ])
        .arg(&both)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["decrypted"], 40, "{j}");
    assert_eq!(j["auth_failed"], 0);
    // One key only: the other direction fails authentication and is left out.
    let (_, j, _) = run_tool("decrypt", "AES_CM_128_HMAC_SHA1_80", KEY, &both, &out, &[]);
    assert_eq!(j["decrypted"], 20);
    assert_eq!(j["auth_failed"], 20);
    // Encrypt refuses two keys.
    let o = bin()
        .args([
            "srtp",
            "encrypt",
            "--profile",
            "AES_CM_128_HMAC_SHA1_80",
            "--key",
            KEY,
            "--key",
            key_b,
            "--in",
        ])
        .arg(&plain)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--key"));
}

#[test]
fn keygen_makes_keys_the_tools_accept() {
    for profile in [
        "AES_CM_128_HMAC_SHA1_80",
        "AES_256_CM_HMAC_SHA1_32",
        "AEAD_AES_256_GCM",
    ] {
        let o = bin()
            .args(["srtp", "keygen", "--profile", profile])
            .output()
            .unwrap();
        assert!(o.status.success());
        let k = String::from_utf8(o.stdout).unwrap();
        let k = k.trim();
        assert!(k.starts_with("inline:"));
        let p: secrelay_srtp::Profile = profile.parse().unwrap();
        assert!(secrelay_srtp::MasterKey::from_sdes_inline(p, k).is_ok());
    }
}

/// A libsrtp sender keyed with `KEY` (AES_CM_128_HMAC_SHA1_80).
fn libsrtp_sender() -> LibSrtp {
    let raw = base64_decode(KEY);
    LibSrtp::new(
        LibsrtpProfile::AesCm128HmacSha1_80,
        Direction::Outbound,
        &raw[..16],
        &raw[16..],
        1024,
        false,
    )
    .unwrap()
}

/// `plain` protected by libsrtp.
fn libsrtp_protect(tx: &mut LibSrtp, plain: &[u8]) -> Vec<u8> {
    let mut b = plain.to_vec();
    b.resize(plain.len() + 16, 0);
    let n = tx.protect(&mut b, plain.len()).unwrap();
    b.truncate(n);
    b
}

fn base64_decode(s: &str) -> Vec<u8> {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|&c| c != b'=') {
        acc = (acc << 6) | T.iter().position(|&t| t == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
