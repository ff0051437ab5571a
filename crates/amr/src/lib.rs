//! AMR-NB (3GPP TS 26.071/26.090) and AMR-WB (3GPP TS 26.171/26.190) speech codecs,
//! through the system's libraries, loaded at run time: libopencore-amrnb (AMR-NB encoder
//! and decoder), libopencore-amrwb (AMR-WB decoder) and libvo-amrwbenc (AMR-WB encoder),
//! Debian packages `libopencore-amrnb0`, `libopencore-amrwb0` and `libvo-amrwbenc0`.
//!
//! The libraries are found with `dlopen` by soname, once per process, when the first codec
//! state of that kind is made (or [`nb_available`] and friends ask). Nothing links against
//! them: secrelay builds and runs where they are missing, and AMR is then unavailable, with
//! a [`LoadError`] that names the missing library and the package that has it.
//!
//! Frames in and out are in the libraries' storage format (RFC 4867 §5, the "MIME file"
//! format without the file's magic): one header byte `(FT << 3) | (Q << 2)` followed by the
//! frame's speech bits, MSB first, padded with zero bits to a byte. The RTP payload format
//! (CMR, table of contents, bandwidth-efficient packing) is `secrelay_media::amr`'s.
//!
//! # Unsafe code
//! The workspace denies `unsafe_code`. This crate is the project's interface to these C
//! codec libraries, and calling C is unsafe, so it allows it in one private module (`ffi`)
//! and nowhere else. There every buffer C reads or writes is a fixed-size array of the
//! largest frame (so a short or lying frame cannot make C read past it), modes are clamped
//! to the library's range, and each library state is owned by one Rust value, freed on drop.
//! The states are not thread-safe, separate states are: the codec types are `Send`, not
//! `Sync`.
//!
//! ```
//! # fn main() -> Result<(), secrelay_amr::LoadError> {
//! use secrelay_amr::{NbDecoder, NbEncoder};
//! let (mut enc, mut dec) = (NbEncoder::new(false)?, NbDecoder::new()?);
//! let mut frame = [0u8; 32];
//! let n = enc.encode(7, &[0; 160], &mut frame); // 12.2 kbit/s
//! assert_eq!((n, frame[0]), (32, (7 << 3) | 0x04));
//! let mut pcm = [0i16; 160];
//! dec.decode(Some(&frame[..n]), &mut pcm);
//! dec.decode(None, &mut pcm); // a lost frame: the decoder conceals it
//! # Ok(())
//! # }
//! ```

mod ffi;

use std::fmt;

/// PCM samples in one 20 ms AMR-NB frame (8 kHz).
pub const NB_SAMPLES: usize = 160;
/// PCM samples in one 20 ms AMR-WB frame (16 kHz).
pub const WB_SAMPLES: usize = 320;
/// Bytes in the largest AMR-NB storage-format frame (header and 244 bits of mode 7).
pub const NB_MAX_FRAME: usize = 32;
/// Bytes in the largest AMR-WB storage-format frame (header and 477 bits of mode 8).
pub const WB_MAX_FRAME: usize = 61;
/// Highest AMR-NB speech mode (7: 12.2 kbit/s).
pub const NB_MAX_MODE: u8 = 7;
/// Highest AMR-WB speech mode (8: 23.85 kbit/s).
pub const WB_MAX_MODE: u8 = 8;

/// A codec library could not be loaded (or lacks a function we need).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    library: &'static str,
    package: &'static str,
    detail: String,
}

impl LoadError {
    fn new(library: &'static str, package: &'static str, detail: String) -> LoadError {
        LoadError {
            library,
            package,
            detail,
        }
    }
    /// The library's file name (soname), e.g. `libopencore-amrnb.so.0`.
    pub fn library(&self) -> &'static str {
        self.library
    }
    /// The Debian package that installs it (empty when the library loaded but failed).
    pub fn package(&self) -> &'static str {
        self.package
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.package.is_empty() {
            write!(f, "{}: {}", self.library, self.detail)
        } else {
            write!(
                f,
                "cannot load {} (Debian package {}): {}",
                self.library, self.package, self.detail
            )
        }
    }
}

impl std::error::Error for LoadError {}

/// Whether AMR-NB (encoding and decoding: libopencore-amrnb) can be used in this process.
pub fn nb_available() -> Result<(), LoadError> {
    ffi::nb_loaded()
}

/// Whether AMR-WB decoding (libopencore-amrwb) can be used in this process.
pub fn wb_decoder_available() -> Result<(), LoadError> {
    ffi::wb_dec_loaded()
}

/// Whether AMR-WB encoding (libvo-amrwbenc) can be used in this process.
pub fn wb_encoder_available() -> Result<(), LoadError> {
    ffi::wb_enc_loaded()
}

/// Frame type of a storage-format frame's header byte.
pub fn frame_type(header: u8) -> u8 {
    (header >> 3) & 0x0F
}

/// Copies a storage-format frame into a zeroed buffer of the largest frame: what the C
/// decoders read, however short `frame` is. Returns the buffer and whether the frame is bad
/// (empty, or its Q bit 0).
fn staged<const N: usize>(frame: &[u8]) -> ([u8; N], bool) {
    let mut buf = [0u8; N];
    let n = frame.len().min(N);
    buf[..n].copy_from_slice(&frame[..n]);
    let bad = frame.is_empty() || buf[0] & 0x04 == 0;
    (buf, bad)
}

/// An AMR-NB decoder (8 kHz, 20 ms frames of 160 samples).
pub struct NbDecoder(ffi::NbDec);

impl fmt::Debug for NbDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NbDecoder")
    }
}

impl NbDecoder {
    /// A new decoder state (loads libopencore-amrnb on first use).
    pub fn new() -> Result<NbDecoder, LoadError> {
        ffi::NbDec::new().map(NbDecoder)
    }

    /// Decodes one storage-format frame into `out`; `None` is a lost frame (the decoder
    /// conceals). A frame with Q = 0 is decoded as bad (concealed), NO_DATA (FT 15) as the
    /// decoder does between SID updates or in a loss; a reserved frame type (9–14) as lost.
    /// A frame shorter than its frame type says is read as if zero-padded: never past it.
    pub fn decode(&mut self, frame: Option<&[u8]>, out: &mut [i16; NB_SAMPLES]) {
        let (buf, bad) = match frame {
            Some(f) => staged::<NB_MAX_FRAME>(f),
            None => {
                let mut b = [0u8; NB_MAX_FRAME];
                b[0] = 15 << 3;
                (b, true)
            }
        };
        self.0.decode(&buf, bad, out);
    }
}

/// An AMR-NB encoder (8 kHz, 20 ms frames of 160 samples).
pub struct NbEncoder(ffi::NbEnc);

impl fmt::Debug for NbEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NbEncoder")
    }
}

impl NbEncoder {
    /// A new encoder state; with `dtx` it sends SID and NO_DATA frames in silence.
    pub fn new(dtx: bool) -> Result<NbEncoder, LoadError> {
        ffi::NbEnc::new(dtx).map(NbEncoder)
    }

    /// Encodes 160 samples at `mode` (0–7, 4.75 to 12.2 kbit/s; higher is taken as 7) into
    /// one storage-format frame in `out`; returns its length, header byte included (0 if
    /// the library failed).
    pub fn encode(
        &mut self,
        mode: u8,
        pcm: &[i16; NB_SAMPLES],
        out: &mut [u8; NB_MAX_FRAME],
    ) -> usize {
        self.0.encode(mode, pcm, out)
    }
}

/// An AMR-WB decoder (16 kHz, 20 ms frames of 320 samples).
pub struct WbDecoder(ffi::WbDec);

impl fmt::Debug for WbDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WbDecoder")
    }
}

impl WbDecoder {
    /// A new decoder state (loads libopencore-amrwb on first use).
    pub fn new() -> Result<WbDecoder, LoadError> {
        ffi::WbDec::new().map(WbDecoder)
    }

    /// Decodes one storage-format frame into `out`; `None` is a lost frame (the decoder
    /// conceals it as "speech lost", FT 14). Q = 0 is decoded as a bad frame; a reserved
    /// frame type (10–13) as speech lost. A frame shorter than its frame type says is read
    /// as if zero-padded: never past it.
    pub fn decode(&mut self, frame: Option<&[u8]>, out: &mut [i16; WB_SAMPLES]) {
        let (buf, bad) = match frame {
            Some(f) => staged::<WB_MAX_FRAME>(f),
            None => {
                let mut b = [0u8; WB_MAX_FRAME];
                b[0] = 14 << 3;
                (b, false)
            }
        };
        self.0.decode(&buf, bad, out);
    }
}

/// An AMR-WB encoder (16 kHz, 20 ms frames of 320 samples).
pub struct WbEncoder(ffi::WbEnc);

impl fmt::Debug for WbEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WbEncoder")
    }
}

impl WbEncoder {
    /// A new encoder state (loads libvo-amrwbenc on first use); with `dtx` it sends SID and
    /// NO_DATA frames in silence.
    pub fn new(dtx: bool) -> Result<WbEncoder, LoadError> {
        ffi::WbEnc::new(dtx).map(WbEncoder)
    }

    /// Encodes 320 samples at `mode` (0–8, 6.6 to 23.85 kbit/s; higher is taken as 8) into
    /// one storage-format frame in `out`; returns its length, header byte included (0 if
    /// the library failed).
    pub fn encode(
        &mut self,
        mode: u8,
        pcm: &[i16; WB_SAMPLES],
        out: &mut [u8; WB_MAX_FRAME],
    ) -> usize {
        self.0.encode(mode, pcm, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    /// Storage-format frame length by frame type (header byte included).
    const NB_LEN: [usize; 9] = [13, 14, 16, 18, 20, 21, 27, 32, 6];
    const WB_LEN: [usize; 10] = [18, 24, 33, 37, 41, 47, 51, 59, 61, 6];

    fn sine(rate: f64, freq: f64, n: usize) -> Vec<i16> {
        (0..n)
            .map(|i| (8000.0 * (2.0 * PI * freq * i as f64 / rate).sin()).round() as i16)
            .collect()
    }

    /// Fraction of the power of `x` that a sinusoid at `freq` holds (projection on sin/cos).
    fn tone_share(x: &[i16], rate: f64, freq: f64) -> f64 {
        let w = 2.0 * PI * freq / rate;
        let (mut xs, mut xc, mut xx) = (0.0, 0.0, 0.0);
        for (i, &v) in x.iter().enumerate() {
            let v = v as f64;
            xs += v * (w * i as f64).sin();
            xc += v * (w * i as f64).cos();
            xx += v * v;
        }
        let n = x.len() as f64;
        // For whole periods the sin and cos have energy n/2 each.
        ((xs * xs + xc * xc) * 2.0 / n / xx.max(1e-9)).min(1.0)
    }

    fn rms(x: &[i16]) -> f64 {
        (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
    }

    #[test]
    fn nb_every_mode_keeps_a_tone() {
        let pcm = sine(8000.0, 1000.0, 8000);
        for mode in 0..=NB_MAX_MODE {
            let (mut enc, mut dec) = (NbEncoder::new(false).unwrap(), NbDecoder::new().unwrap());
            let mut out = Vec::new();
            for f in pcm.chunks_exact(NB_SAMPLES) {
                let mut frame = [0u8; NB_MAX_FRAME];
                let n = enc.encode(mode, f.try_into().unwrap(), &mut frame);
                assert_eq!(n, NB_LEN[mode as usize], "mode {mode}");
                assert_eq!(frame[0], (mode << 3) | 0x04);
                let mut back = [0i16; NB_SAMPLES];
                dec.decode(Some(&frame[..n]), &mut back);
                out.extend_from_slice(&back);
            }
            let tail = &out[1600..];
            let share = tone_share(tail, 8000.0, 1000.0);
            let level = rms(tail) / rms(&pcm);
            eprintln!("AMR-NB mode {mode}: tone share {share:.3}, level {level:.2}");
            assert!(
                share > 0.8 && (0.7..1.3).contains(&level),
                "mode {mode}: {share} {level}"
            );
        }
    }

    #[test]
    fn wb_every_mode_keeps_a_tone() {
        let pcm = sine(16000.0, 1000.0, 16000);
        for mode in 0..=WB_MAX_MODE {
            let (mut enc, mut dec) = (WbEncoder::new(false).unwrap(), WbDecoder::new().unwrap());
            let mut out = Vec::new();
            for f in pcm.chunks_exact(WB_SAMPLES) {
                let mut frame = [0u8; WB_MAX_FRAME];
                let n = enc.encode(mode, f.try_into().unwrap(), &mut frame);
                assert_eq!(n, WB_LEN[mode as usize], "mode {mode}");
                assert_eq!(frame[0], (mode << 3) | 0x04);
                let mut back = [0i16; WB_SAMPLES];
                dec.decode(Some(&frame[..n]), &mut back);
                out.extend_from_slice(&back);
            }
            let tail = &out[3200..];
            let share = tone_share(tail, 16000.0, 1000.0);
            let level = rms(tail) / rms(&pcm);
            eprintln!("AMR-WB mode {mode}: tone share {share:.3}, level {level:.2}");
            assert!(
                share > 0.8 && (0.7..1.3).contains(&level),
                "mode {mode}: {share} {level}"
            );
        }
    }

    #[test]
    fn lost_frames_are_concealed_not_silence() {
        let pcm = sine(8000.0, 1000.0, 1600);
        let (mut enc, mut dec) = (NbEncoder::new(false).unwrap(), NbDecoder::new().unwrap());
        let mut back = [0i16; NB_SAMPLES];
        for f in pcm.chunks_exact(NB_SAMPLES) {
            let mut frame = [0u8; NB_MAX_FRAME];
            let n = enc.encode(7, f.try_into().unwrap(), &mut frame);
            dec.decode(Some(&frame[..n]), &mut back);
        }
        dec.decode(None, &mut back);
        assert!(rms(&back) > 500.0, "NB concealment rms {}", rms(&back));

        let pcm = sine(16000.0, 1000.0, 3200);
        let (mut enc, mut dec) = (WbEncoder::new(false).unwrap(), WbDecoder::new().unwrap());
        let mut back = [0i16; WB_SAMPLES];
        for f in pcm.chunks_exact(WB_SAMPLES) {
            let mut frame = [0u8; WB_MAX_FRAME];
            let n = enc.encode(2, f.try_into().unwrap(), &mut frame);
            dec.decode(Some(&frame[..n]), &mut back);
        }
        dec.decode(None, &mut back);
        assert!(rms(&back) > 500.0, "WB concealment rms {}", rms(&back));
    }

    #[test]
    fn garbage_and_truncated_frames_do_not_crash() {
        let (mut nb, mut wb) = (NbDecoder::new().unwrap(), WbDecoder::new().unwrap());
        let (mut a, mut b) = (vec![0i16; NB_SAMPLES], vec![0i16; WB_SAMPLES]);
        let (a, b): (&mut [i16; NB_SAMPLES], &mut [i16; WB_SAMPLES]) = (
            (&mut a[..]).try_into().unwrap(),
            (&mut b[..]).try_into().unwrap(),
        );
        let mut x: u32 = 0x1234_5678;
        let mut junk = [0u8; 80];
        for round in 0..2000 {
            for j in junk.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *j = x as u8;
            }
            // Every header byte, at every length from empty to longer than any frame.
            junk[0] = round as u8;
            let len = round % junk.len();
            nb.decode(Some(&junk[..len]), a);
            wb.decode(Some(&junk[..len]), b);
            if round % 7 == 0 {
                nb.decode(None, a);
                wb.decode(None, b);
            }
        }
    }

    #[test]
    fn modes_out_of_range_are_clamped_and_dtx_sends_sid() {
        let mut enc = NbEncoder::new(false).unwrap();
        let mut frame = [0u8; NB_MAX_FRAME];
        assert_eq!(enc.encode(200, &[0; NB_SAMPLES], &mut frame), 32);
        assert_eq!(frame_type(frame[0]), 7);
        let mut enc = WbEncoder::new(false).unwrap();
        let mut frame = [0u8; WB_MAX_FRAME];
        assert_eq!(enc.encode(9, &[0; WB_SAMPLES], &mut frame), 61);
        assert_eq!(frame_type(frame[0]), 8);
        // The encoders take a copy: the caller's PCM (here, read-only memory) is untouched.
        let pcm: Vec<i16> = (0..NB_SAMPLES as i16).map(|i| i * 37 - 2001).collect();
        let before = pcm.clone();
        NbEncoder::new(false).unwrap().encode(
            7,
            pcm[..].try_into().unwrap(),
            &mut [0; NB_MAX_FRAME],
        );
        assert_eq!(pcm, before);
        // With DTX, silence becomes SID (FT 8 / 9) and NO_DATA (FT 15) frames.
        let mut enc = NbEncoder::new(true).unwrap();
        let fts: Vec<u8> = (0..20)
            .map(|_| {
                let mut f = [0u8; NB_MAX_FRAME];
                enc.encode(7, &[0; NB_SAMPLES], &mut f);
                frame_type(f[0])
            })
            .collect();
        assert!(fts.contains(&8) && fts.contains(&15), "{fts:?}");
        let mut enc = WbEncoder::new(true).unwrap();
        let fts: Vec<u8> = (0..20)
            .map(|_| {
                let mut f = [0u8; WB_MAX_FRAME];
                enc.encode(3, &[0; WB_SAMPLES], &mut f);
                frame_type(f[0])
            })
            .collect();
        assert!(fts.contains(&9) && fts.contains(&15), "{fts:?}");
    }

    #[test]
    fn availability_and_errors_name_the_library() {
        nb_available().unwrap();
        wb_decoder_available().unwrap();
        wb_encoder_available().unwrap();
        let e = LoadError::new("libx.so.0", "libx0", "not found".into());
        assert_eq!(
            e.to_string(),
            "cannot load libx.so.0 (Debian package libx0): not found"
        );
        assert_eq!((e.library(), e.package()), ("libx.so.0", "libx0"));
    }

    #[test]
    fn codec_states_are_send() {
        fn send<T: Send>() {}
        send::<NbDecoder>();
        send::<NbEncoder>();
        send::<WbDecoder>();
        send::<WbEncoder>();
    }
}
