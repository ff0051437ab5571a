//! The pieces of RTCP feedback a room needs beside its routing, sans-IO: the retransmission
//! buffer of a video stream (what the gateway received from the publisher, to answer
//! receivers' NACKs without asking the publisher again), RTX packets made (RFC 4588) and
//! unwrapped, and the deduplication of keyframe requests per publisher stream.
//!
//! A stream's buffer is one per *source* stream, not per receiver: every receiver's copy of a
//! packet carries the same payload, with a header rewritten for that receiver, so a
//! retransmission is made from the buffered packet with the same rewrite. Its memory is
//! [`BUFFER_PACKETS`] packets per video stream whatever the number of viewers. Audio streams
//! get none: a lost audio packet is concealed, not repaired.

use std::time::{Duration, Instant};

use secrelay_wire::demux::RtpFacts;

/// Packets kept per video stream: about two seconds of a 2.5 Mbit/s stream of 1,200-byte
/// packets, more than a receiver's NACK history (Chrome asks for packets up to about a
/// second old).
pub const BUFFER_PACKETS: usize = 512;

/// What the buffer says of a sequence number.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The packet as received (plain RTP), and its header as read where it arrived.
    Found(&'a [u8], RtpFacts),
    /// Inside the window, but the gateway never received it: the publisher must be asked.
    NeverReceived,
    /// Older than the window (or ahead of anything received): nothing to do.
    Gone,
}

#[derive(Default)]
struct Entry {
    seq: u16,
    valid: bool,
    facts: RtpFacts,
    packet: Vec<u8>,
}

/// The last [`BUFFER_PACKETS`] packets of one stream, by sequence number. Buffers are reused:
/// once every slot has held a packet, storing allocates nothing.
pub struct RetransmitBuffer {
    entries: Vec<Entry>,
    /// The highest sequence number stored, extended (wraps counted).
    highest: Option<u64>,
}

impl Default for RetransmitBuffer {
    fn default() -> Self {
        RetransmitBuffer::new()
    }
}

impl std::fmt::Debug for RetransmitBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetransmitBuffer")
            .field("highest", &self.highest)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// `seq` extended to 64 bits next to `highest` (the nearest value with those low 16 bits).
fn extend(highest: u64, seq: u16) -> u64 {
    let base = highest & !0xffff;
    let candidates = [
        base.wrapping_sub(0x1_0000) | u64::from(seq),
        base | u64::from(seq),
        (base + 0x1_0000) | u64::from(seq),
    ];
    candidates
        .into_iter()
        .filter(|c| *c < u64::MAX / 2)
        .min_by_key(|c| c.abs_diff(highest))
        .unwrap_or(u64::from(seq))
}

impl RetransmitBuffer {
    /// An empty buffer (its entries are made as packets arrive).
    pub fn new() -> RetransmitBuffer {
        RetransmitBuffer {
            entries: Vec::new(),
            highest: None,
        }
    }

    /// Keeps `packet` (plain RTP, its header read as `facts`) under its sequence number.
    pub fn store(&mut self, packet: &[u8], facts: &RtpFacts) {
        let seq = facts.sequence;
        // Start high enough that the first wraps backwards stay positive.
        let ext = match self.highest {
            None => (1 << 32) | u64::from(seq),
            Some(h) => extend(h, seq),
        };
        if self.highest.is_none_or(|h| ext > h) {
            if let Some(h) = self.highest {
                // Slots skipped by a gap hold older packets: mark them as not this window's.
                for missing in (h + 1)..ext.min(h + 1 + BUFFER_PACKETS as u64) {
                    if let Some(e) = self.entries.get_mut(missing as usize % BUFFER_PACKETS) {
                        e.valid = false;
                    }
                }
            }
            self.highest = Some(ext);
        } else if self
            .highest
            .is_some_and(|h| h - ext >= BUFFER_PACKETS as u64)
        {
            // Too old to keep.
            return;
        }
        let i = ext as usize % BUFFER_PACKETS;
        if self.entries.len() <= i {
            self.entries.resize_with(i + 1, Entry::default);
        }
        let e = &mut self.entries[i];
        e.seq = seq;
        e.valid = true;
        e.facts = *facts;
        e.packet.clear();
        e.packet.extend_from_slice(packet);
    }

    /// What the buffer holds for `seq`.
    pub fn get(&self, seq: u16) -> Lookup<'_> {
        let Some(h) = self.highest else {
            return Lookup::Gone;
        };
        let ext = extend(h, seq);
        if ext > h || h - ext >= BUFFER_PACKETS as u64 {
            return Lookup::Gone;
        }
        match self.entries.get(ext as usize % BUFFER_PACKETS) {
            Some(e) if e.valid && e.seq == seq => Lookup::Found(&e.packet, e.facts),
            _ => Lookup::NeverReceived,
        }
    }

    /// Bytes held: the slots (their headers' size, for every slot allocated) and the packet
    /// buffers' capacity, for the memory figures (`secrelay_retransmit_buffer_bytes`).
    pub fn bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self
                .entries
                .iter()
                .map(|e| e.packet.capacity())
                .sum::<usize>()
    }
}

/// Writes into `out` the RTX packet (RFC 4588 §4) that retransmits `packet` (plain RTP whose
/// header is `header_len` bytes, already rewritten for its receiver): the same header with
/// payload type `rtx_pt`, SSRC `rtx_ssrc` and sequence number `rtx_seq`, and as payload the
/// original sequence number followed by the original payload (its padding left out).
pub fn write_rtx(
    out: &mut Vec<u8>,
    packet: &[u8],
    header_len: usize,
    rtx_pt: u8,
    rtx_ssrc: u32,
    rtx_seq: u16,
) {
    out.clear();
    if packet.len() < 12 || header_len < 12 || header_len > packet.len() {
        return;
    }
    let mut end = packet.len();
    if packet[0] & 0x20 != 0 {
        // Padding: its count is the last byte.
        let pad = usize::from(packet[end - 1]);
        end = end.saturating_sub(pad).max(header_len);
    }
    out.extend_from_slice(&packet[..header_len]);
    out[0] &= !0x20;
    out[1] = (out[1] & 0x80) | (rtx_pt & 0x7f);
    let osn = [packet[2], packet[3]];
    out[2..4].copy_from_slice(&rtx_seq.to_be_bytes());
    out[8..12].copy_from_slice(&rtx_ssrc.to_be_bytes());
    out.extend_from_slice(&osn);
    out.extend_from_slice(&packet[header_len..end]);
}

/// Writes into `out` the packet an RTX packet (`rtx`, header `header_len` bytes) repairs: its
/// header with payload type `pt`, SSRC `ssrc` and the original sequence number from its
/// payload, and the rest of its payload. `false` (and `out` empty) when the RTX payload holds
/// no original packet: a padding-only probe, or too short.
pub fn unwrap_rtx(out: &mut Vec<u8>, rtx: &[u8], header_len: usize, pt: u8, ssrc: u32) -> bool {
    out.clear();
    if rtx.len() < 12 || header_len < 12 || header_len > rtx.len() {
        return false;
    }
    let mut end = rtx.len();
    if rtx[0] & 0x20 != 0 {
        let pad = usize::from(rtx[end - 1]);
        end = end.saturating_sub(pad).max(header_len);
    }
    if end < header_len + 2 {
        return false;
    }
    let osn = [rtx[header_len], rtx[header_len + 1]];
    if end == header_len + 2 {
        // The original sequence number and nothing else: a probe.
        return false;
    }
    out.extend_from_slice(&rtx[..header_len]);
    out[0] &= !0x20;
    out[1] = (out[1] & 0x80) | (pt & 0x7f);
    out[2..4].copy_from_slice(&osn);
    out[8..12].copy_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(&rtx[header_len + 2..end]);
    true
}

/// Keyframe requests for one publisher stream: at most one per interval however many
/// receivers ask, with the FIR command sequence number (RFC 5104) kept.
#[derive(Debug, Default, Clone)]
pub struct KeyframeGate {
    last: Option<Instant>,
    fir_seq: u8,
}

impl KeyframeGate {
    /// Whether a request may go to the publisher at `now` (and it is noted as sent), or must
    /// be merged into the one sent less than `interval` ago.
    pub fn admit(&mut self, now: Instant, interval: Duration) -> bool {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < interval)
        {
            return false;
        }
        self.last = Some(now);
        self.fir_seq = self.fir_seq.wrapping_add(1);
        true
    }

    /// The FIR command sequence number of the request last admitted.
    pub fn fir_seq(&self) -> u8 {
        self.fir_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(seq: u16) -> RtpFacts {
        RtpFacts {
            sequence: seq,
            header_len: 12,
            ..RtpFacts::default()
        }
    }

    fn found(p: &[u8], seq: u16) -> Lookup<'_> {
        Lookup::Found(p, facts(seq))
    }

    fn pkt(seq: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, 96, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7];
        p[2..4].copy_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn the_buffer_holds_a_window_and_tells_gaps_from_old_packets() {
        let mut b = RetransmitBuffer::new();
        for seq in (65000u16..=65535).chain(0..100) {
            if seq != 5 {
                b.store(&pkt(seq, &[seq as u8]), &facts(seq));
            }
        }
        assert_eq!(b.get(99), found(&pkt(99, &[99]), 99));
        assert_eq!(b.get(65535), found(&pkt(65535, &[255]), 65535));
        assert_eq!(b.get(5), Lookup::NeverReceived);
        // 636 packets stored: the first 124 are gone.
        assert_eq!(b.get(65000), Lookup::Gone);
        assert_eq!(b.get(100), Lookup::Gone, "ahead of what was received");
        // A late packet fills its gap.
        b.store(&pkt(5, &[5]), &facts(5));
        assert!(matches!(b.get(5), Lookup::Found(..)));
        // A jump forward past the window leaves nothing old answering for new numbers.
        b.store(&pkt(2000, &[1]), &facts(2000));
        assert_eq!(b.get(99), Lookup::Gone);
        assert_eq!(b.get(1999), Lookup::NeverReceived);
        assert!(b.bytes() > 0);
    }

    #[test]
    fn rtx_wraps_and_unwraps_to_the_same_packet() {
        let mut original = pkt(4242, b"frame data");
        original[1] |= 0x80; // marker
        let mut rtx = Vec::new();
        write_rtx(&mut rtx, &original, 12, 97, 0xabcd, 7);
        assert_eq!(rtx[1], 0x80 | 97);
        assert_eq!(&rtx[2..4], &7u16.to_be_bytes());
        assert_eq!(&rtx[8..12], &0xabcdu32.to_be_bytes());
        assert_eq!(&rtx[12..14], &4242u16.to_be_bytes());
        let mut back = Vec::new();
        assert!(unwrap_rtx(&mut back, &rtx, 12, 96, 7));
        assert_eq!(back, original);
        // Padding is left out, and a padding-only probe repairs nothing.
        let mut padded = original.clone();
        padded[0] |= 0x20;
        padded.extend_from_slice(&[0, 0, 3]);
        write_rtx(&mut rtx, &padded, 12, 97, 0xabcd, 8);
        assert!(unwrap_rtx(&mut back, &rtx, 12, 96, 7));
        assert_eq!(back, original);
        let mut probe = pkt(1, &[0, 9, 0, 0, 0, 4]);
        probe[0] |= 0x20;
        assert!(!unwrap_rtx(&mut back, &probe, 12, 96, 7));
        assert!(back.is_empty());
    }

    #[test]
    fn keyframe_requests_are_merged_within_the_interval() {
        let t = Instant::now();
        let mut g = KeyframeGate::default();
        let i = Duration::from_millis(500);
        assert!(g.admit(t, i));
        assert_eq!(g.fir_seq(), 1);
        assert!(!g.admit(t + Duration::from_millis(100), i));
        assert!(g.admit(t + Duration::from_millis(600), i));
        assert_eq!(g.fir_seq(), 2);
    }
}
