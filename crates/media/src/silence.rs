//! Silence written in a codec's own payload format, without an encoder: what a gateway puts in
//! the place of a participant's audio when it is told to silence it (rtpengine's `silence media`)
//! while the packets, their numbering and timing go on as they were.
//!
//! - G.711: every octet the code of a zero sample (µ-law 0xFF, A-law 0xD5).
//! - G.722: every octet the one code a decoder goes quietest on (G.722 has no code of exact
//!   silence: its predictors adapt).
//! - Opus: CELT frames that carry only the silence flag (RFC 6716 §4.3), as many as the packet
//!   they replace lasted, so the receiver's clock and the decoder's agree.
//! - Comfort noise (RFC 3389): the quietest level there is (−127 dBov), no spectrum.

/// A silent G.711 µ-law sample.
pub const PCMU: u8 = 0xFF;
/// A silent G.711 A-law sample.
pub const PCMA: u8 = 0xD5;
/// A G.722 octet of near silence: of the 256 codes, repeated, the one a decoder goes quietest
/// on (about −59 dBov, within 25 ms of loud speech; the encoder itself never settles on one
/// code for a zero signal, its predictors keep moving).
pub const G722: u8 = 0xFC;
/// A comfort-noise payload at −127 dBov: no noise at all.
pub const CN: [u8; 1] = [127];

/// The two octets of a CELT frame that codes silence: the range decoder reads the silence
/// flag set from them, whatever the frame's length.
const CELT_SILENT_FRAME: [u8; 2] = [0xFF, 0xFE];

/// How long an Opus packet lasts, in 48 kHz samples (its TOC octet and, for code 3, its frame
/// count; RFC 6716 §3.1); `None` for a packet too short to say.
pub fn opus_samples(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame = match config {
        // SILK: 10, 20, 40, 60 ms.
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        // Hybrid: 10, 20 ms.
        12..=15 => [480, 960][usize::from(config % 2)],
        // CELT: 2.5, 5, 10, 20 ms.
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3F),
    };
    (frames > 0).then_some(frame * frames)
}

/// Writes into `out` an Opus packet of silence lasting `samples` 48 kHz samples (what
/// [`opus_samples`] read of the packet it replaces): one CELT frame when a CELT frame lasts
/// that long, else equal frames of the longest CELT length that divides it (at most 48, the
/// format's limit). `false` when no such packet exists (more than 120 ms, or not a multiple
/// of 2.5 ms).
pub fn opus(samples: u32, out: &mut Vec<u8>) -> bool {
    // CELT configurations 28..=31 (fullband; mono): 2.5, 5, 10 and 20 ms frames.
    let Some((config, frames)) = [(31u8, 960u32), (30, 480), (29, 240), (28, 120)]
        .into_iter()
        .find(|&(_, len)| samples.is_multiple_of(len))
        .map(|(config, len)| (config, samples / len))
    else {
        return false;
    };
    if frames == 0 || frames > 48 || samples > 5760 {
        return false;
    }
    out.clear();
    match frames {
        1 => out.push(config << 3),
        2 => out.push(config << 3 | 1),
        n => {
            // Code 3, constant bit rate, no padding: the count, then the frames.
            out.push(config << 3 | 3);
            out.push(n as u8);
        }
    }
    for _ in 0..frames {
        out.extend_from_slice(&CELT_SILENT_FRAME);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g711::{Pcma, Pcmu};
    use crate::g722::{G722Decoder, G722Encoder};
    use crate::opus::Opus;
    use crate::Codec;

    fn peak(pcm: &[i16]) -> i32 {
        pcm.iter().map(|&s| i32::from(s).abs()).max().unwrap_or(0)
    }

    #[test]
    fn g711_silence_decodes_to_zero() {
        let mut pcm = Vec::new();
        Pcmu.to_pcm(&[PCMU; 160], &mut pcm).unwrap();
        assert_eq!(peak(&pcm), 0);
        pcm.clear();
        Pcma.to_pcm(&[PCMA; 160], &mut pcm).unwrap();
        assert!(peak(&pcm) <= 8, "A-law has no exact zero: {}", peak(&pcm));
    }

    #[test]
    fn g722_silence_is_the_quietest_code_and_quiets_a_loud_decoder() {
        let tone = crate::tone::sine(16_000, 440.0, 12_000.0, 640);
        let after_speech = |code: u8| {
            let (mut enc, mut dec) = (G722Encoder::new(), G722Decoder::new());
            let (mut speech, mut pcm) = (Vec::new(), Vec::new());
            enc.encode(&tone, &mut speech);
            dec.decode(&speech, &mut pcm);
            pcm.clear();
            dec.decode(&[code; 400], &mut pcm);
            // After 25 ms of it.
            peak(&pcm[400..])
        };
        let quietest = (0..=255u8).map(after_speech).min().unwrap();
        assert_eq!(after_speech(G722), quietest);
        assert!(quietest < 64, "{quietest}");
    }

    #[test]
    fn opus_durations_are_read_from_the_toc() {
        assert_eq!(opus_samples(&[31 << 3]), Some(960));
        assert_eq!(opus_samples(&[1 << 3, 0, 0]), Some(960)); // SILK NB 20 ms
        assert_eq!(opus_samples(&[15 << 3 | 1, 0]), Some(1920)); // hybrid 20 ms, two frames
        assert_eq!(opus_samples(&[16 << 3 | 3, 5]), Some(600)); // five 2.5 ms frames
        assert_eq!(opus_samples(&[16 << 3 | 3, 0]), None);
        assert_eq!(opus_samples(&[]), None);
    }

    #[test]
    fn opus_silence_decodes_to_zero_for_the_duration_it_replaces() {
        for ms10 in [25u32, 50, 100, 200, 300, 400, 600, 1200] {
            let samples = ms10 * 48 / 10;
            let mut packet = Vec::new();
            assert!(opus(samples, &mut packet), "{ms10}");
            assert_eq!(opus_samples(&packet), Some(samples), "{ms10}");
            let mut dec = Opus::with_channels(48_000, 2, 32_000).unwrap();
            let mut pcm = Vec::new();
            let n = dec.to_pcm(&packet, &mut pcm).unwrap();
            assert_eq!(n, 2 * samples as usize, "{ms10}: samples, both channels");
            assert_eq!(peak(&pcm), 0, "{ms10}");
        }
        let mut packet = Vec::new();
        assert!(!opus(100, &mut packet), "not a multiple of 2.5 ms");
        assert!(!opus(5760 + 960, &mut packet), "over 120 ms");
    }
}
