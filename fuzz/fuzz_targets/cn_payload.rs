#![no_main]

//! Comfort-noise payloads from the network (RFC 3389): a payload either reads as a level of
//! 0–127 and the spectral bytes after it, or is the sender's fault (empty, or a level beyond
//! 127); a level read makes noise of the asked length, and written back is the first byte.
//! The input's bytes as PCM are also asked whether they are silence (never a panic).

use libfuzzer_sys::fuzz_target;
use secrelay_media::cn::{self, NoiseSynth, MAX_LEVEL};

fuzz_target!(|data: &[u8]| {
    match cn::parse(data) {
        Ok(sid) => {
            assert!(sid.level <= MAX_LEVEL);
            assert_eq!(sid.coefficients.len(), data.len() - 1);
            let mut out = Vec::new();
            cn::write(sid.level, &mut out);
            assert_eq!(out, &data[..1]);
            let mut synth = NoiseSynth::new(u32::from(sid.level));
            let mut pcm = Vec::new();
            synth.render(sid.level, sid.coefficients.len().min(960), &mut pcm);
            assert_eq!(pcm.len(), sid.coefficients.len().min(960));
        }
        Err(e) => {
            assert!(e.is_peer_fault(), "{e}");
            assert!(data.first().is_none_or(|&l| l > MAX_LEVEL));
        }
    }
    let pcm: Vec<i16> = data
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    let _ = cn::is_silent(&pcm);
});
