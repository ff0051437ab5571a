//! Helpers shared by the integration tests.
#![allow(dead_code)]

/// Decodes hex, ignoring spaces.
pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test vector is hex"))
        .collect()
}

/// An RTP packet: V=2, PT 0, the given SEQ/SSRC, timestamp, `payload_len` payload bytes.
pub fn rtp(ssrc: u32, seq: u16, ts: u32, payload_len: usize, fill: u8) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..payload_len).map(|i| fill.wrapping_add(i as u8)));
    p
}

/// A receiver report RTCP packet from `ssrc` with `extra` bytes of report body.
pub fn rtcp(ssrc: u32, extra_words: usize, fill: u8) -> Vec<u8> {
    let mut p = vec![0x80, 201];
    p.extend_from_slice(&(1 + extra_words as u16).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..extra_words * 4).map(|i| fill.wrapping_add(i as u8)));
    p
}
