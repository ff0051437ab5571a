//! ITU-T G.722 (7 kHz audio coding within 64 kbit/s): sub-band ADPCM, RTP payload type 9.
//!
//! Written here from the recommendation (11/88 text, its block diagrams and the fixed-point
//! arithmetic of its §6), 64 kbit/s (mode 1) only: that is what RTP carries (RFC 3551 §4.5.2,
//! one octet per pair of 16 kHz samples). The two crates on crates.io that offer G.722
//! (`ezk-g722`, `audio-codec`) are ports of one C implementation whose reset state differs
//! from the recommendation's (DETL = 32, DETH = 8; one of them starts its encoder and decoder
//! from different states), and one of them panics on an odd sample count; so this one is our
//! own, and `tests/interop_ffmpeg_g722.rs` checks it bit for bit against FFmpeg's (an
//! implementation nobody here wrote).
//!
//! - Input and output are 16-bit PCM at 16 kHz. The transmit QMF takes the 16-bit samples
//!   directly (the recommendation's 14-bit input, left-justified, gives the same sums) and
//!   scales its outputs to the 15-bit range of the sub-band ADPCM.
//! - One octet per two samples: bits 7-6 the high band's 2-bit code, bits 5-0 the low band's
//!   6-bit code (the first bit on the wire is the high band's MSB, RFC 3551).
//! - The RTP clock is 8000 Hz although the signal is sampled at 16 kHz (RFC 3551 §4.5.2, an
//!   error kept for compatibility): a 20 ms packet is 160 octets, 320 samples, and its
//!   timestamp advances by 160.

use crate::{Codec, Error};

/// RTP payload type of G.722 (static, RFC 3551).
pub const PAYLOAD_TYPE: u8 = 9;

/// The 12 distinct QMF coefficients h0, h2, …, h22 (Table 11/G.722, scaled by 2^13;
/// h(23-i) = h(i), so the odd ones are these reversed).
const QMF_EVEN: [i32; 12] = [3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11];

/// Lower-band quantizer decision levels (Table 6/G.722, ×detL/4096), intervals 1..=29.
const Q6: [i32; 30] = [
    0, 35, 72, 110, 150, 190, 233, 276, 323, 370, 422, 473, 530, 587, 650, 714, 786, 858, 940,
    1023, 1121, 1219, 1339, 1458, 1612, 1765, 1980, 2195, 2557, 2919,
];
/// 6-bit output codes of the lower-band quantizer for a negative / positive difference, by
/// interval (Table 6/G.722; index 0 unused).
const ILN: [u8; 31] = [
    0, 63, 62, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11,
    10, 9, 8, 7, 6, 5, 4,
];
const ILP: [u8; 31] = [
    0, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39,
    38, 37, 36, 35, 34, 33, 32,
];
/// Inverse quantizer outputs, lower band, 6-bit codes (Table 7/G.722, QQ6 × 2^3 with sign).
const QM6: [i32; 64] = [
    -136, -136, -136, -136, -24808, -21904, -19008, -16704, -14984, -13512, -12280, -11192, -10232,
    -9360, -8576, -7856, -7192, -6576, -6000, -5456, -4944, -4464, -4008, -3576, -3168, -2776,
    -2400, -2032, -1688, -1360, -1040, -728, 24808, 21904, 19008, 16704, 14984, 13512, 12280,
    11192, 10232, 9360, 8576, 7856, 7192, 6576, 6000, 5456, 4944, 4464, 4008, 3576, 3168, 2776,
    2400, 2032, 1688, 1360, 1040, 728, 432, 136, -432, -136,
];
/// Inverse quantizer outputs for the 4-bit truncated lower-band code (Table 7, QQ4).
const QM4: [i32; 16] = [
    0, -20456, -12896, -8968, -6288, -4240, -2584, -1200, 20456, 12896, 8968, 6288, 4240, 2584,
    1200, 0,
];
/// 4-bit code → 3-bit magnitude for the log scale factor (RIL → IL4, Table 8).
const RL42: [usize; 16] = [0, 7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3, 2, 1, 0];
/// Log scale factor multipliers, lower band (WL, Table 8).
const WL: [i32; 8] = [-60, -30, 58, 172, 334, 538, 1198, 3042];
/// Inverse log2 table for the scale factors (ILB, Table 10... 2048·2^(i/32)).
const ILB: [i32; 32] = [
    2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
    2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008,
];
/// Higher band: inverse quantizer outputs (QQ2 × 2^3 with sign), by 2-bit code.
const QM2: [i32; 4] = [-7408, -1616, 7408, 1616];
/// Higher band: 2-bit code → magnitude for the log scale factor, and its multipliers (WH).
const RH2: [usize; 4] = [2, 1, 2, 1];
const WH: [i32; 3] = [0, -214, 798];

#[inline]
fn sat16(x: i32) -> i32 {
    x.clamp(i16::MIN as i32, i16::MAX as i32)
}

/// State of one sub-band's adaptive predictor and scale factor (the recommendation's block 4
/// variables, and NB/DET of blocks 3L/3H).
#[derive(Debug, Clone)]
struct Band {
    /// Predicted signal s, its pole part sp and zero part sz.
    s: i32,
    sp: i32,
    sz: i32,
    /// Reconstructed signal r(j), r(j-1), r(j-2).
    r: [i32; 3],
    /// Pole predictor coefficients a1, a2 (index 0 unused).
    a: [i32; 3],
    /// Partially reconstructed signal p(j), p(j-1), p(j-2).
    p: [i32; 3],
    /// Quantized difference d(j)…d(j-6).
    d: [i32; 7],
    /// Zero predictor coefficients b1…b6 (index 0 unused).
    b: [i32; 7],
    /// Log scale factor NB and scale factor DET.
    nb: i32,
    det: i32,
}

impl Band {
    fn new(det: i32) -> Band {
        Band {
            s: 0,
            sp: 0,
            sz: 0,
            r: [0; 3],
            a: [0; 3],
            p: [0; 3],
            d: [0; 7],
            b: [0; 7],
            nb: 0,
            det,
        }
    }

    /// Blocks 3L/3H: LOGSCL/LOGSCH then SCALEL/SCALEH. `w` is the multiplier for the code,
    /// `nb_max` the log scale factor's limit, `shift` 8 (lower band) or 10 (higher band).
    #[inline]
    fn adapt_scale(&mut self, w: i32, nb_max: i32, shift: i32) {
        self.nb = (((self.nb * 127) >> 7) + w).clamp(0, nb_max);
        let mantissa = ILB[((self.nb >> 6) & 31) as usize];
        let exp = shift - (self.nb >> 11);
        let v = if exp < 0 {
            mantissa << -exp
        } else {
            mantissa >> exp
        };
        self.det = v << 2;
    }

    /// Block 4: reconstruction, predictor adaptation and prediction, given the quantized
    /// difference `d` (for the lower band, the 4-bit one).
    #[inline]
    fn predict(&mut self, d: i32) {
        // RECONS and PARREC.
        let r0 = sat16(self.s + d);
        let p0 = sat16(self.sz + d);
        let sg0 = p0 >> 15;
        let sg1 = self.p[1] >> 15;
        let sg2 = self.p[2] >> 15;

        // UPPOL2: second pole coefficient.
        let f_a1 = sat16(self.a[1] << 2);
        let mut wd = if sg0 == sg1 { -f_a1 } else { f_a1 };
        wd = wd.min(32767);
        let mut a2 = (wd >> 7) + if sg0 == sg2 { 128 } else { -128 };
        a2 += (self.a[2] * 32512) >> 15;
        let a2 = a2.clamp(-12288, 12288);

        // UPPOL1: first pole coefficient, limited by the new a2.
        let leak = (self.a[1] * 32640) >> 15;
        let a1 = sat16(leak + if sg0 == sg1 { 192 } else { -192 });
        let lim = sat16(15360 - a2);
        let a1 = a1.clamp(-lim, lim);

        // UPZERO: the six zero coefficients.
        let step = if d == 0 { 0 } else { 128 };
        let sgd = d >> 15;
        let mut b = [0i32; 7];
        for (i, bi) in b.iter_mut().enumerate().skip(1) {
            let sgi = self.d[i] >> 15;
            let w = if sgi == sgd { step } else { -step };
            *bi = sat16(w + ((self.b[i] * 32640) >> 15));
        }

        // DELAYA: shift the histories, take the new coefficients.
        self.d.copy_within(0..6, 1);
        self.d[1] = d;
        self.b = b;
        self.r = [0, r0, self.r[1]];
        self.p = [0, p0, self.p[1]];
        self.a = [0, a1, a2];

        // FILTEP, FILTEZ, PREDIC.
        let sp1 = (self.a[1] * sat16(self.r[1] + self.r[1])) >> 15;
        let sp2 = (self.a[2] * sat16(self.r[2] + self.r[2])) >> 15;
        self.sp = sat16(sp1 + sp2);
        let mut sz = 0;
        for i in 1..7 {
            sz += (self.b[i] * sat16(self.d[i] + self.d[i])) >> 15;
        }
        self.sz = sat16(sz);
        self.s = sat16(self.sp + self.sz);
    }
}

/// Lower-band adaptive quantizer (block 1L, QUANTL): the 6-bit code for difference `el`.
#[inline]
fn quantl(el: i32, det: i32) -> u8 {
    let wd = if el >= 0 { el } else { -(el + 1) };
    let mut mil = 1;
    while mil < 30 && wd >= (Q6[mil] * det) >> 12 {
        mil += 1;
    }
    if el < 0 {
        ILN[mil]
    } else {
        ILP[mil]
    }
}

/// Higher-band adaptive quantizer (block 1H, QUANTH): the 2-bit code for difference `eh`.
#[inline]
fn quanth(eh: i32, det: i32) -> u8 {
    let wd = if eh >= 0 { eh } else { -(eh + 1) };
    let outer = wd >= (564 * det) >> 12;
    match (eh < 0, outer) {
        (true, false) => 1,
        (true, true) => 0,
        (false, false) => 3,
        (false, true) => 2,
    }
}

/// The G.722 encoder: 16 kHz PCM → one octet per two samples.
#[derive(Debug, Clone)]
pub struct G722Encoder {
    low: Band,
    high: Band,
    /// Transmit QMF delay line, the 24 latest input samples (oldest first).
    x: [i32; 24],
    /// An odd sample left over from the previous call, waiting for its pair.
    pending: Option<i16>,
}

impl Default for G722Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl G722Encoder {
    /// An encoder in the reset state (DETL = 32, DETH = 8, everything else 0).
    pub fn new() -> G722Encoder {
        G722Encoder {
            low: Band::new(32),
            high: Band::new(8),
            x: [0; 24],
            pending: None,
        }
    }

    /// Encodes one pair of samples (in time order) to one octet.
    #[inline]
    pub fn encode_pair(&mut self, s0: i16, s1: i16) -> u8 {
        // Transmit QMF.
        self.x.copy_within(2..24, 0);
        self.x[22] = s0 as i32;
        self.x[23] = s1 as i32;
        // xA: the even coefficients over x(j), x(j-2), …; xB: the odd ones over x(j-1), ….
        // (x[23 - k] is x(j - k), and h(2i+1) = h(22-2i).)
        let (mut xa, mut xb) = (0i32, 0i32);
        for i in 0..12 {
            xa += self.x[2 * i + 1] * QMF_EVEN[11 - i];
            xb += self.x[2 * i] * QMF_EVEN[i];
        }
        let xl = (xa + xb) >> 14;
        let xh = (xa - xb) >> 14;

        // Lower band: SUBTRA, QUANTL, INVQAL (4-bit), LOGSCL, SCALEL, block 4.
        let el = sat16(xl - self.low.s);
        let il = quantl(el, self.low.det);
        let ril = (il >> 2) as usize;
        let dlt = (self.low.det * QM4[ril]) >> 15;
        self.low.adapt_scale(WL[RL42[ril]], 18432, 8);
        self.low.predict(dlt);

        // Higher band: SUBTRA, QUANTH, INVQAH, LOGSCH, SCALEH, block 4.
        let eh = sat16(xh - self.high.s);
        let ih = quanth(eh, self.high.det);
        let dh = (self.high.det * QM2[ih as usize]) >> 15;
        self.high.adapt_scale(WH[RH2[ih as usize]], 22528, 10);
        self.high.predict(dh);

        (ih << 6) | il
    }

    /// Encodes `pcm` (16 kHz), appending one octet per pair of samples to `out`. An odd
    /// trailing sample is kept for the next call.
    pub fn encode(&mut self, pcm: &[i16], out: &mut Vec<u8>) {
        let mut rest = pcm;
        if let Some(first) = self.pending.take() {
            match rest.split_first() {
                Some((&second, tail)) => {
                    let c = self.encode_pair(first, second);
                    out.push(c);
                    rest = tail;
                }
                None => {
                    self.pending = Some(first);
                    return;
                }
            }
        }
        let pairs = rest.chunks_exact(2);
        if let [odd] = pairs.remainder() {
            self.pending = Some(*odd);
        }
        out.reserve(rest.len() / 2);
        for p in pairs {
            let c = self.encode_pair(p[0], p[1]);
            out.push(c);
        }
    }
}

/// The G.722 decoder: one octet → two 16 kHz samples.
#[derive(Debug, Clone)]
pub struct G722Decoder {
    low: Band,
    high: Band,
    /// Receive QMF delay line: rL−rH and rL+rH interleaved, 12 pairs (oldest first).
    x: [i32; 24],
}

impl Default for G722Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl G722Decoder {
    /// A decoder in the reset state.
    pub fn new() -> G722Decoder {
        G722Decoder {
            low: Band::new(32),
            high: Band::new(8),
            x: [0; 24],
        }
    }

    /// Decodes one octet to two samples (in time order).
    #[inline]
    pub fn decode_octet(&mut self, code: u8) -> [i16; 2] {
        let ilr = (code & 0x3F) as usize;
        let ih = (code >> 6) as usize;

        // Lower band: INVQBL (6-bit, for the output), RECONS, LIMIT; INVQAL (4-bit, for
        // the predictor), LOGSCL, SCALEL, block 4.
        let ril = ilr >> 2;
        let dl = (self.low.det * QM6[ilr]) >> 15;
        let rl = (self.low.s + dl).clamp(-16384, 16383);
        let dlt = (self.low.det * QM4[ril]) >> 15;
        self.low.adapt_scale(WL[RL42[ril]], 18432, 8);
        self.low.predict(dlt);

        // Higher band: INVQAH, RECONS, LIMIT, LOGSCH, SCALEH, block 4.
        let dh = (self.high.det * QM2[ih]) >> 15;
        let rh = (self.high.s + dh).clamp(-16384, 16383);
        self.high.adapt_scale(WH[RH2[ih]], 22528, 10);
        self.high.predict(dh);

        // Receive QMF: x[23 - 2i] is xd(j - i) = rL - rH, x[22 - 2i] is xs(j - i) = rL + rH;
        // the first output sample takes the even coefficients over xd, the second the odd
        // ones over xs.
        self.x.copy_within(2..24, 0);
        self.x[22] = rl + rh;
        self.x[23] = rl - rh;
        let (mut x0, mut x1) = (0i32, 0i32);
        for i in 0..12 {
            x1 += self.x[2 * i] * QMF_EVEN[i];
            x0 += self.x[2 * i + 1] * QMF_EVEN[11 - i];
        }
        [sat16(x0 >> 11) as i16, sat16(x1 >> 11) as i16]
    }

    /// Decodes `payload`, appending two samples per octet to `pcm`.
    pub fn decode(&mut self, payload: &[u8], pcm: &mut Vec<i16>) {
        pcm.reserve(payload.len() * 2);
        for &c in payload {
            let [a, b] = self.decode_octet(c);
            pcm.push(a);
            pcm.push(b);
        }
    }
}

/// G.722 behind the [`Codec`] interface (`G722/8000`, payload type 9, PCM at 16 kHz).
#[derive(Debug, Clone, Default)]
pub struct G722 {
    enc: G722Encoder,
    dec: G722Decoder,
}

impl G722 {
    /// A codec in the reset state.
    pub fn new() -> G722 {
        G722::default()
    }
}

impl Codec for G722 {
    fn encoding_name(&self) -> &'static str {
        "G722"
    }
    fn payload_type(&self) -> u8 {
        PAYLOAD_TYPE
    }
    fn clock_rate(&self) -> u32 {
        8000
    }
    fn pcm_rate(&self) -> u32 {
        16_000
    }
    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        self.dec.decode(payload, pcm);
        Ok(payload.len() * 2)
    }
    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        if !pcm.len().is_multiple_of(2) {
            return Err(Error::Encode(format!(
                "G.722 codes pairs of samples; {} is odd",
                pcm.len()
            )));
        }
        let start = out.len();
        self.enc.encode(pcm, out);
        Ok(out.len() - start)
    }
    fn reset(&mut self) {
        *self = G722::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tone;

    fn round_trip(pcm: &[i16]) -> Vec<i16> {
        let mut c = G722::new();
        let mut coded = Vec::new();
        c.from_pcm(pcm, &mut coded).unwrap();
        assert_eq!(coded.len(), pcm.len() / 2);
        let mut back = Vec::new();
        c.to_pcm(&coded, &mut back).unwrap();
        back
    }

    #[test]
    fn silence_stays_near_silent() {
        // A zero difference falls in the quantizer's fourth interval at the smallest scale
        // factor, so the predictor idles a few LSBs off zero (−84 dBFS), never more.
        let back = round_trip(&[0; 3200]);
        assert!(back.iter().all(|&s| s.abs() <= 4), "{:?}", &back[..40]);
    }

    #[test]
    fn a_sweep_comes_back_delayed_by_the_two_qmfs() {
        // A chirp has one best alignment (a pure tone has one per period).
        let rate = 16_000.0;
        let pcm: Vec<i16> = (0..16_000)
            .map(|i| {
                let t = i as f64 / rate;
                let phase = 2.0 * std::f64::consts::PI * (200.0 * t + 1400.0 * t * t);
                (9000.0 * phase.sin()) as i16
            })
            .collect();
        let back = round_trip(&pcm);
        let (snr, lag) = tone::snr_db(&pcm[1600..15_000], &back[1600..], 64);
        assert!((20..=26).contains(&lag), "delay {lag}");
        assert!(snr > 20.0, "sweep SNR {snr:.1} dB");
    }

    #[test]
    fn tones_in_both_bands_survive_with_their_frequency_and_snr() {
        // Measured past the first 100 ms (the predictors' start-up), the codec's delay found
        // by search.
        for (freq, floor_db) in [
            (300.0, 30.0),
            (1004.0, 30.0),
            (3000.0, 25.0),
            (5500.0, 12.0),
        ] {
            let pcm = tone::sine(16_000, freq, 12_000.0, 16_000);
            let back = round_trip(&pcm);
            let (snr, _) = tone::snr_db(&pcm[1600..15_000], &back[1600..], 64);
            assert!(snr > floor_db, "{freq} Hz: SNR {snr:.1} dB");
            let sinad = tone::sinad_db(&back[1600..], 16_000, freq);
            assert!(sinad > floor_db, "{freq} Hz: SINAD {sinad:.1} dB");
            let f = tone::zero_crossing_hz(&back[4000..], 16_000);
            assert!(
                (f - freq).abs() < freq * 0.005,
                "{freq} Hz came back as {f:.1} Hz"
            );
        }
    }

    #[test]
    fn chunking_does_not_change_the_bits() {
        let pcm = tone::sine(16_000, 1234.0, 9000.0, 1601);
        let mut whole = Vec::new();
        G722Encoder::new().encode(&pcm, &mut whole);
        let mut parts = Vec::new();
        let mut enc = G722Encoder::new();
        for chunk in pcm.chunks(7) {
            enc.encode(chunk, &mut parts);
        }
        assert_eq!(whole, parts);
        assert_eq!(whole.len(), 800);
    }

    #[test]
    fn codec_interface_and_odd_frames() {
        let mut c = G722::new();
        assert_eq!(
            (
                c.encoding_name(),
                c.payload_type(),
                c.clock_rate(),
                c.pcm_rate()
            ),
            ("G722", 9, 8000, 16_000)
        );
        assert_eq!(c.frame_samples(), 320);
        // 20 ms is 160 octets and 160 ticks of the 8 kHz RTP clock.
        assert_eq!(c.clock_ticks(320), 160);
        let mut out = Vec::new();
        assert!(matches!(
            c.from_pcm(&[0; 321], &mut out),
            Err(Error::Encode(_))
        ));
        assert!(out.is_empty());
        // Every octet is a valid code: any payload decodes.
        let mut pcm = Vec::new();
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(c.to_pcm(&all, &mut pcm).unwrap(), 512);
    }

    #[test]
    fn extreme_input_saturates_without_overflow() {
        let mut pcm = Vec::new();
        for i in 0..8000 {
            pcm.push(if (i / 3) % 2 == 0 { i16::MAX } else { i16::MIN });
        }
        let back = round_trip(&pcm);
        assert_eq!(back.len(), pcm.len());
    }
}
