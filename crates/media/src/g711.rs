//! ITU-T G.711 μ-law (PCMU, RTP payload type 0) and A-law (PCMA, payload type 8).
//!
//! Written from the recommendation: 16-bit linear samples are reduced to the 14-bit
//! (μ-law) or 13-bit (A-law) range G.711 works in, negative samples by one's complement as
//! in the ITU-T G.191 reference code (so the quantiser is symmetric around zero), then
//! coded as sign, 3-bit segment and 4-bit step. Decoding reads a 256-entry table built at
//! compile time and yields the midpoint of each step, scaled back to 16 bits; encoding reads
//! a table of the codes by the sample's top 14 (μ-law) or 13 (A-law) bits, built at compile
//! time from the same arithmetic (24 KiB together).

use crate::{Codec, Error};

/// Encodes one 16-bit sample as G.711 μ-law (a table lookup: the code depends only on the
/// sample's 14 high bits).
pub const fn ulaw_encode(x: i16) -> u8 {
    ULAW_ENCODE[((x >> 2) as i32 + 8192) as usize]
}

const fn ulaw_encode_slow(x: i16) -> u8 {
    // 14-bit magnitude (one's complement for negatives), plus the μ-law bias of 33.
    let (mag, sign) = if x < 0 {
        ((!x) as i32 >> 2, 0x00)
    } else {
        ((x as i32) >> 2, 0x80)
    };
    let mut biased = mag + 33;
    if biased > 0x1FFF {
        biased = 0x1FFF;
    }
    // biased ≥ 33, so its top bit is at position 5..=12: segments 0..=7.
    let seg = (31 - (biased as u32).leading_zeros()) as i32 - 5;
    let step = (biased >> (seg + 1)) & 0x0F;
    ((sign | (seg << 4) | step) ^ 0x7F) as u8
}

/// Decodes one G.711 μ-law code to a 16-bit sample.
pub const fn ulaw_decode(code: u8) -> i16 {
    ULAW_TABLE[code as usize]
}

const fn ulaw_decode_slow(code: u8) -> i16 {
    let c = !code;
    let seg = ((c >> 4) & 0x07) as i32;
    let step = (c & 0x0F) as i32;
    // Midpoint of the step in the biased 14-bit domain, unbiased and scaled by 4 (0x84 = 33·4).
    let mag = (((step << 3) + 0x84) << seg) - 0x84;
    if c & 0x80 != 0 {
        -mag as i16
    } else {
        mag as i16
    }
}

/// Encodes one 16-bit sample as G.711 A-law (a table lookup: the code depends only on the
/// sample's 13 high bits).
pub const fn alaw_encode(x: i16) -> u8 {
    ALAW_ENCODE[((x >> 3) as i32 + 4096) as usize]
}

const fn alaw_encode_slow(x: i16) -> u8 {
    // 12-bit magnitude (13-bit signed range), one's complement for negatives.
    let (mag, sign) = if x < 0 {
        ((!x) as i32 >> 3, 0x00)
    } else {
        ((x as i32) >> 3, 0x80)
    };
    let code = if mag < 32 {
        mag >> 1
    } else {
        // mag in 32..=4095: top bit at 5..=11, segments 1..=7.
        let seg = (31 - (mag as u32).leading_zeros()) as i32 - 4;
        (seg << 4) | ((mag >> seg) & 0x0F)
    };
    ((sign | code) ^ 0x55) as u8
}

/// Decodes one G.711 A-law code to a 16-bit sample.
pub const fn alaw_decode(code: u8) -> i16 {
    ALAW_TABLE[code as usize]
}

const fn alaw_decode_slow(code: u8) -> i16 {
    let c = code ^ 0x55;
    let seg = ((c >> 4) & 0x07) as i32;
    let step = (c & 0x0F) as i32;
    // Midpoint of the step in the 12-bit domain, scaled by 8.
    let mag = if seg == 0 {
        (step << 1) + 1
    } else {
        ((step << 1) + 33) << (seg - 1)
    } << 3;
    if c & 0x80 != 0 {
        mag as i16
    } else {
        -mag as i16
    }
}

const fn table(ulaw: bool) -> [i16; 256] {
    let mut t = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = if ulaw {
            ulaw_decode_slow(i as u8)
        } else {
            alaw_decode_slow(i as u8)
        };
        i += 1;
    }
    t
}

const ULAW_TABLE: [i16; 256] = table(true);
const ALAW_TABLE: [i16; 256] = table(false);

/// μ-law codes by the sample's top 14 bits (x >> 2, offset by 8192), computed at compile
/// time from the arithmetic above (negatives in one's complement: !x >> 2 == !(x >> 2)).
const ULAW_ENCODE: [u8; 16384] = {
    let mut t = [0u8; 16384];
    let mut i = 0;
    while i < 16384 {
        t[i] = ulaw_encode_slow(((i as i32 - 8192) << 2) as i16);
        i += 1;
    }
    t
};

/// A-law codes by the sample's top 13 bits (x >> 3, offset by 4096).
const ALAW_ENCODE: [u8; 8192] = {
    let mut t = [0u8; 8192];
    let mut i = 0;
    while i < 8192 {
        t[i] = alaw_encode_slow(((i as i32 - 4096) << 3) as i16);
        i += 1;
    }
    t
};

/// G.711 μ-law (`PCMU/8000`, payload type 0). Sample by sample: any number of samples per
/// payload; 20 ms is 160. No loss concealment of its own: a lost packet is silence.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pcmu;

/// G.711 A-law (`PCMA/8000`, payload type 8). Sample by sample, like [`Pcmu`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Pcma;

impl Codec for Pcmu {
    fn encoding_name(&self) -> &'static str {
        "PCMU"
    }
    fn payload_type(&self) -> u8 {
        0
    }
    fn clock_rate(&self) -> u32 {
        8000
    }
    fn pcm_rate(&self) -> u32 {
        8000
    }
    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        pcm.extend(payload.iter().map(|&c| ulaw_decode(c)));
        Ok(payload.len())
    }
    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        out.extend(pcm.iter().map(|&s| ulaw_encode(s)));
        Ok(pcm.len())
    }
}

impl Codec for Pcma {
    fn encoding_name(&self) -> &'static str {
        "PCMA"
    }
    fn payload_type(&self) -> u8 {
        8
    }
    fn clock_rate(&self) -> u32 {
        8000
    }
    fn pcm_rate(&self) -> u32 {
        8000
    }
    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        pcm.extend(payload.iter().map(|&c| alaw_decode(c)));
        Ok(payload.len())
    }
    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        out.extend(pcm.iter().map(|&s| alaw_encode(s)));
        Ok(pcm.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Decoded values as CPython's audioop (Sun's g711.c) gives them: ulaw2lin / alaw2lin.
    const DECODED: [(u8, i16, i16); 14] = [
        (0x00, -32124, -5504),
        (0x01, -31100, -5248),
        (0x0F, -16764, -6784),
        (0x10, -15996, -2752),
        (0x3F, -1980, -13568),
        (0x55, -716, -8),
        (0x7E, -8, -880),
        (0x7F, 0, -848),
        (0x80, 32124, 5504),
        (0x81, 31100, 5248),
        (0xAA, 5372, 32256),
        (0xD5, 716, 8),
        (0xFE, 8, 880),
        (0xFF, 0, 848),
    ];

    // (sample, μ-law, A-law) as audioop's lin2ulaw / lin2alaw give them, except where
    // marked: audioop truncates negative samples in two's complement, G.711 (G.191) in
    // one's complement, so for some negatives μ-law differs by one step.
    const ENCODED: [(i16, u8, u8); 24] = [
        (0, 0xFF, 0xD5),
        (1, 0xFF, 0xD5),
        (-1, 0x7F, 0x55), // audioop: 0x7E
        (7, 0xFE, 0xD5),
        (8, 0xFE, 0xD5),
        (-8, 0x7E, 0x55),
        (15, 0xFD, 0xD5),
        (16, 0xFD, 0xD4),
        (31, 0xFB, 0xD4),
        (32, 0xFB, 0xD7),
        (100, 0xF2, 0xD3),
        (-100, 0x73, 0x53), // audioop: 0x72
        (1000, 0xCE, 0xFA),
        (-1000, 0x4E, 0x7A),
        (4000, 0xAF, 0x9A),
        (8000, 0xA0, 0x8A),
        (-8000, 0x20, 0x0A),
        (16000, 0x90, 0xBA),
        (32000, 0x80, 0xAA),
        (32767, 0x80, 0xAA),
        (-32768, 0x00, 0x2A),
        (-32767, 0x00, 0x2A),
        (12345, 0x97, 0xBD),
        (-12345, 0x17, 0x3D),
    ];

    #[test]
    fn encode_tables_are_the_arithmetic() {
        for x in i16::MIN..=i16::MAX {
            assert_eq!(ulaw_encode(x), ulaw_encode_slow(x), "μ-law {x}");
            assert_eq!(alaw_encode(x), alaw_encode_slow(x), "A-law {x}");
        }
    }

    #[test]
    fn known_decoded_values() {
        for (code, mu, a) in DECODED {
            assert_eq!(ulaw_decode(code), mu, "μ-law {code:#04x}");
            assert_eq!(alaw_decode(code), a, "A-law {code:#04x}");
        }
    }

    #[test]
    fn known_encoded_values() {
        for (x, mu, a) in ENCODED {
            assert_eq!(ulaw_encode(x), mu, "μ-law of {x}");
            assert_eq!(alaw_encode(x), a, "A-law of {x}");
        }
    }

    #[test]
    fn every_code_survives_decode_then_encode() {
        for c in 0..=255u8 {
            // 0x7F is μ-law's negative zero: it decodes to 0, which encodes as 0xFF.
            let back = ulaw_encode(ulaw_decode(c));
            assert!(
                back == c || (c == 0x7F && back == 0xFF),
                "μ-law {c:#04x} → {back:#04x}"
            );
            assert_eq!(alaw_encode(alaw_decode(c)), c, "A-law {c:#04x}");
        }
    }

    #[test]
    fn quantiser_is_symmetric_and_monotonic() {
        let mut prev = (i16::MIN, i16::MIN);
        for x in i16::MIN..=i16::MAX {
            // One's complement: !x is the mirror image of x.
            assert_eq!(ulaw_encode(!x), ulaw_encode(x) ^ 0x80, "μ-law at {x}");
            assert_eq!(alaw_encode(!x), alaw_encode(x) ^ 0x80, "A-law at {x}");
            let d = (ulaw_decode(ulaw_encode(x)), alaw_decode(alaw_encode(x)));
            assert!(d.0 >= prev.0 && d.1 >= prev.1, "not monotonic at {x}");
            prev = d;
        }
    }

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        // Steps double per segment, so the error grows with the level: about 1/32 of it
        // (half a step), plus the few LSBs lost reducing to 14 or 13 bits.
        for x in i16::MIN..=i16::MAX {
            let xi = x as i32;
            let bound = 8 + xi.abs() / 30;
            let mu = ulaw_decode(ulaw_encode(x)) as i32;
            if xi.abs() <= 32124 {
                assert!((mu - xi).abs() <= bound, "μ-law {x} → {mu}");
            } else {
                assert_eq!(mu, 32124 * xi.signum(), "μ-law clips {x}");
            }
            let a = alaw_decode(alaw_encode(x)) as i32;
            if xi.abs() <= 32256 {
                assert!((a - xi).abs() <= bound, "A-law {x} → {a}");
            } else {
                assert_eq!(a, 32256 * xi.signum(), "A-law clips {x}");
            }
        }
    }

    fn snr_db(codec: &mut dyn Codec, amplitude: f64) -> f64 {
        let pcm: Vec<i16> = (0..8000)
            .map(|i| {
                (amplitude * (2.0 * std::f64::consts::PI * 1004.0 * i as f64 / 8000.0).sin()) as i16
            })
            .collect();
        let mut coded = Vec::new();
        codec.from_pcm(&pcm, &mut coded).unwrap();
        let mut back = Vec::new();
        codec.to_pcm(&coded, &mut back).unwrap();
        let signal: f64 = pcm.iter().map(|&s| (s as f64).powi(2)).sum();
        let noise: f64 = pcm
            .iter()
            .zip(&back)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum();
        10.0 * (signal / noise).log10()
    }

    #[test]
    fn tone_snr_is_that_of_8_bit_log_pcm() {
        // G.711 gives about 38 dB SNR over a wide range of levels (G.712 asks ≥ 35 dB
        // from -30 to 0 dBm0 for the whole channel).
        for amp in [1000.0, 10000.0, 30000.0] {
            let mu = snr_db(&mut Pcmu, amp);
            let a = snr_db(&mut Pcma, amp);
            assert!(mu > 33.0, "μ-law at {amp}: {mu:.1} dB");
            assert!(a > 33.0, "A-law at {amp}: {a:.1} dB");
        }
    }

    #[test]
    fn codec_interface() {
        let mut pcm = Vec::new();
        assert_eq!(Pcmu.to_pcm(&[0xFF, 0x80], &mut pcm).unwrap(), 2);
        assert_eq!(pcm, [0, 32124]);
        let mut out = Vec::new();
        assert_eq!(Pcma.from_pcm(&[0, -8000], &mut out).unwrap(), 2);
        assert_eq!(out, [0xD5, 0x0A]);
        assert_eq!(
            (Pcmu.encoding_name(), Pcmu.payload_type(), Pcmu.clock_rate()),
            ("PCMU", 0, 8000)
        );
        assert_eq!(
            (
                Pcma.encoding_name(),
                Pcma.payload_type(),
                Pcma.frame_samples()
            ),
            ("PCMA", 8, 160)
        );
        let mut lost = Vec::new();
        assert_eq!(Pcmu.conceal(160, &mut lost).unwrap(), 160);
        assert!(lost.iter().all(|&s| s == 0));
    }

    /// The segment end points of G.711's Tables 1 and 2: the largest input magnitude of each
    /// segment (A-law in the 12-bit magnitude domain of 13-bit PCM, μ-law in the 13-bit
    /// magnitude domain of 14-bit PCM, both after the one's complement of negatives) and the
    /// decoder output values of each segment's first and last step.
    #[test]
    fn segments_match_the_recommendations_tables() {
        // A-law: segment ends 31, 63, 127, …, 4095; outputs (2·step + 1) in segment 0 and
        // (2·step + 33)·2^(seg-1) above it: 1…31, 33…63, 66…126, …, 2112…4032.
        let a_ends = [31, 63, 127, 255, 511, 1023, 2047, 4095];
        let a_out = [
            (1, 31),
            (33, 63),
            (66, 126),
            (132, 252),
            (264, 504),
            (528, 1008),
            (1056, 2016),
            (2112, 4032),
        ];
        for seg in 0..8 {
            let end = a_ends[seg];
            let code = alaw_encode((end << 3) as i16) ^ 0x55;
            assert_eq!(((code >> 4) & 7) as usize, seg, "A-law segment end {end}");
            assert_eq!(code & 0x0F, 15, "A-law segment {seg} ends on step 15");
            if seg < 7 {
                let next = alaw_encode(((end + 1) << 3) as i16) ^ 0x55;
                assert_eq!(((next >> 4) & 7) as usize, seg + 1, "A-law after {end}");
            }
            let first = alaw_decode(((seg as u8) << 4 | 0x80) ^ 0x55) as i32 >> 3;
            let last = alaw_decode(((seg as u8) << 4 | 0x8F) ^ 0x55) as i32 >> 3;
            assert_eq!((first, last), a_out[seg], "A-law segment {seg} outputs");
        }
        // μ-law: decision values end at 30, 94, 222, 478, 990, 2014, 4062, 8158 (input
        // magnitude in 14-bit units); outputs ((2·step + 33)·2^seg − 33): 0…30, 33…93, …,
        // 4191…8031.
        let mu_ends = [30, 94, 222, 478, 990, 2014, 4062, 8158];
        for (seg, &end) in mu_ends.iter().enumerate() {
            let code = !ulaw_encode((end << 2) as i16);
            assert_eq!(((code >> 4) & 7) as usize, seg, "μ-law segment end {end}");
            assert_eq!(code & 0x0F, 15, "μ-law segment {seg} ends on step 15");
            if seg < 7 {
                let next = !ulaw_encode(((end + 1) << 2) as i16);
                assert_eq!(((next >> 4) & 7) as usize, seg + 1, "μ-law after {end}");
            }
            // Positive codes: the sign bit is 1 on the wire, 0 once the code is inverted.
            let first = ulaw_decode(!((seg as u8) << 4)) as i32 >> 2;
            let last = ulaw_decode(!((seg as u8) << 4 | 0x0F)) as i32 >> 2;
            let expect = |q: i32| ((2 * q + 33) << seg) - 33;
            assert_eq!(
                (first, last),
                (expect(0), expect(15)),
                "μ-law segment {seg}"
            );
        }
        assert_eq!(ulaw_decode(0x80) >> 2, 8031);
        assert_eq!(alaw_decode(0xAA) >> 3, 4032);
    }
}
