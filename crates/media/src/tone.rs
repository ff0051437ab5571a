//! Tones and how to find them again: what the tests (here, in the gateway and in the interop
//! suites) and the lab measure audio with.
//!
//! - [`sine`] and [`dual_tone`] make test signals;
//! - [`goertzel_power`] is the power at one frequency (Goertzel's recurrence), and
//!   [`tone_share`] the fraction of a signal's power that one tone holds (a least-squares fit
//!   of a sinusoid at that frequency), so "the 1 kHz tone is there and nothing else" is
//!   `tone_share(x, rate, 1000.0) > 0.9`;
//! - [`sinad_db`]: tone power over everything else (noise and distortion), no alignment
//!   needed, so it suits codecs that do not keep the waveform (Opus);
//! - [`snr_db`]: waveform SNR of a decoded signal against its reference, the codec's delay
//!   found by search (for waveform coders: G.711, G.722);
//! - [`zero_crossing_hz`]: the frequency of a clean tone, to a fraction of a hertz.

use std::f64::consts::PI;

/// `samples` samples of a sine of `freq` Hz and peak `amplitude` at `rate` Hz.
pub fn sine(rate: u32, freq: f64, amplitude: f64, samples: usize) -> Vec<i16> {
    let w = 2.0 * PI * freq / rate as f64;
    (0..samples)
        .map(|i| (amplitude * (w * i as f64).sin()).round() as i16)
        .collect()
}

/// Two sines of equal peak `amplitude` each (a DTMF digit's two frequencies, say).
pub fn dual_tone(rate: u32, f1: f64, f2: f64, amplitude: f64, samples: usize) -> Vec<i16> {
    let (w1, w2) = (2.0 * PI * f1 / rate as f64, 2.0 * PI * f2 / rate as f64);
    (0..samples)
        .map(|i| {
            let t = i as f64;
            (amplitude * ((w1 * t).sin() + (w2 * t).sin()))
                .round()
                .clamp(-32768.0, 32767.0) as i16
        })
        .collect()
}

/// Power of `x` at `freq` (Goertzel), normalised so a sine of peak A over a whole number of
/// periods gives about A²/2 (the power of that sine).
pub fn goertzel_power(x: &[i16], rate: u32, freq: f64) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let w = 2.0 * PI * freq / rate as f64;
    let c = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s0 = v as f64 + c * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    let mag2 = s1 * s1 + s2 * s2 - c * s1 * s2;
    let n = x.len() as f64;
    2.0 * mag2 / (n * n)
}

/// Least-squares fit of `a·sin + b·cos + dc` at `freq`: (power of the fitted sinusoid,
/// power of the signal without its DC, power of the residual).
fn fit(x: &[i16], rate: u32, freq: f64) -> (f64, f64, f64) {
    let n = x.len();
    if n == 0 {
        return (0.0, 0.0, 0.0);
    }
    let w = 2.0 * PI * freq / rate as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    // Normal equations of the 2×2 system in (a, b) after removing the mean.
    let (mut ss, mut cc, mut sc, mut xs, mut xc, mut xx) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (i, &v) in x.iter().enumerate() {
        let (s, c) = (w * i as f64).sin_cos();
        let v = v as f64 - mean;
        ss += s * s;
        cc += c * c;
        sc += s * c;
        xs += v * s;
        xc += v * c;
        xx += v * v;
    }
    let det = ss * cc - sc * sc;
    if det.abs() < 1e-9 {
        return (0.0, xx / n as f64, xx / n as f64);
    }
    let a = (xs * cc - xc * sc) / det;
    let b = (xc * ss - xs * sc) / det;
    // Energy of the fit and of the residual (the fit is a projection: they add up to xx).
    let fitted = a * xs + b * xc;
    let residual = (xx - fitted).max(0.0);
    (fitted / n as f64, xx / n as f64, residual / n as f64)
}

/// Fraction (0 to 1) of the power of `x` (DC removed) that a sinusoid at `freq` holds.
/// Silence gives 0.
pub fn tone_share(x: &[i16], rate: u32, freq: f64) -> f64 {
    let (fitted, total, _) = fit(x, rate, freq);
    if total <= 0.0 {
        0.0
    } else {
        (fitted / total).clamp(0.0, 1.0)
    }
}

/// Signal to noise and distortion, dB: the power of the best-fitting sinusoid at `freq` over
/// the power of everything else in `x`. Needs no reference and no alignment.
pub fn sinad_db(x: &[i16], rate: u32, freq: f64) -> f64 {
    let (fitted, _, residual) = fit(x, rate, freq);
    10.0 * (fitted / residual.max(1e-12)).log10()
}

/// Waveform SNR, dB, of `decoded` against `reference`, with `decoded` delayed by the lag in
/// `0..=max_lag` samples that gives the best SNR (a codec's algorithmic delay); returns
/// (SNR, lag).
pub fn snr_db(reference: &[i16], decoded: &[i16], max_lag: usize) -> (f64, usize) {
    let mut best = (f64::NEG_INFINITY, 0);
    for lag in 0..=max_lag.min(decoded.len()) {
        let n = reference.len().min(decoded.len() - lag);
        if n == 0 {
            continue;
        }
        let (mut sig, mut noise) = (0.0f64, 0.0f64);
        for i in 0..n {
            let r = reference[i] as f64;
            let e = decoded[i + lag] as f64 - r;
            sig += r * r;
            noise += e * e;
        }
        let snr = 10.0 * (sig / noise.max(1e-12)).log10();
        if snr > best.0 {
            best = (snr, lag);
        }
    }
    best
}

/// Frequency of a clean tone from its rising zero crossings (linearly interpolated), Hz;
/// 0 when there are fewer than two.
pub fn zero_crossing_hz(x: &[i16], rate: u32) -> f64 {
    let mut first = None;
    let mut last = 0.0;
    let mut count = 0usize;
    for i in 1..x.len() {
        let (a, b) = (x[i - 1] as f64, x[i] as f64);
        if a < 0.0 && b >= 0.0 {
            let t = i as f64 - 1.0 + (-a) / (b - a);
            if first.is_none() {
                first = Some(t);
            }
            last = t;
            count += 1;
        }
    }
    match first {
        Some(f) if count >= 2 && last > f => (count - 1) as f64 * rate as f64 / (last - f),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tone_is_found_where_it_is_and_not_elsewhere() {
        let x = sine(8000, 1000.0, 10_000.0, 8000);
        let p = goertzel_power(&x, 8000, 1000.0);
        assert!((p / 50e6 - 1.0).abs() < 0.01, "power {p}");
        assert!(goertzel_power(&x, 8000, 1200.0) < p * 1e-4);
        assert!(tone_share(&x, 8000, 1000.0) > 0.9999);
        assert!(tone_share(&x, 8000, 700.0) < 0.001);
        assert!(sinad_db(&x, 8000, 1000.0) > 80.0);
        assert!((zero_crossing_hz(&x, 8000) - 1000.0).abs() < 0.01);
        assert_eq!(tone_share(&[0; 100], 8000, 1000.0), 0.0);
        assert_eq!(zero_crossing_hz(&[0; 100], 8000), 0.0);
    }

    #[test]
    fn two_tones_share_the_power() {
        let x = dual_tone(8000, 697.0, 1209.0, 8000.0, 8000);
        let (a, b) = (tone_share(&x, 8000, 697.0), tone_share(&x, 8000, 1209.0));
        assert!((a - 0.5).abs() < 0.01 && (b - 0.5).abs() < 0.01, "{a} {b}");
        assert!(sinad_db(&x, 8000, 697.0).abs() < 0.5);
    }

    #[test]
    fn snr_finds_the_delay_and_the_noise() {
        let x = sine(8000, 440.0, 10_000.0, 4000);
        let mut delayed = vec![0i16; 17];
        delayed.extend(
            x.iter()
                .map(|&v| v.saturating_add(if v % 2 == 0 { 10 } else { -10 })),
        );
        let (snr, lag) = snr_db(&x, &delayed, 40);
        assert_eq!(lag, 17);
        // Noise of ±10 on a 10,000-peak sine: 10·log10(5e7 / 100) ≈ 57 dB.
        assert!((snr - 57.0).abs() < 1.0, "{snr}");
    }
}
