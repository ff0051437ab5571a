//! Codec plug-ins behind one trait, after the transcoding plug-ins of seed 003
//! (`encoding_name`, payload type, `to_pcm`, `from_pcm`, `transcode`).
//!
//! Every codec turns RTP payloads into 16-bit linear PCM (`to_pcm`, decode) and back
//! (`from_pcm`, encode). [`Transcoder`] chains two of them through one PCM buffer. The
//! crate is pure: no sockets, no clock, no threads.
//!
//! - [`g711::Pcmu`] and [`g711::Pcma`]: ITU-T G.711 μ-law (PT 0) and A-law (PT 8), written
//!   here from the recommendation (tables built at compile time).
//! - [`opus::Opus`]: Opus (RFC 6716, RTP payload RFC 7587) through libopus (the `opus`
//!   crate, which builds the bundled libopus). It runs at the PCM rate it is given
//!   (8 kHz narrowband for telephone PCM, up to 48 kHz); its RTP clock is always 48 kHz.
//!
//! ```
//! use secrelay_media::{g711::{Pcma, Pcmu}, Codec, Transcoder};
//! let pcm: Vec<i16> = (0..160).map(|i| ((i as f64 * 0.3).sin() * 8000.0) as i16).collect();
//! let mut ulaw = Vec::new();
//! Pcmu.from_pcm(&pcm, &mut ulaw).unwrap();
//! let mut t = Transcoder::new(Box::new(Pcmu), Box::new(Pcma)).unwrap();
//! let mut alaw = Vec::new();
//! t.transcode(&ulaw, &mut alaw).unwrap();
//! assert_eq!(alaw.len(), 160);
//! ```

#![forbid(unsafe_code)]

pub mod g711;
pub mod opus;

use std::fmt;

/// What went wrong in a codec.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The payload could not be decoded (malformed or truncated: the peer's fault).
    Decode(String),
    /// Encoding failed (e.g. a PCM frame whose length the codec cannot take: our fault).
    Encode(String),
    /// A codec could not be set up with these parameters.
    Setup(String),
    /// Two codecs in a [`Transcoder`] run at different PCM rates (no resampler here).
    RateMismatch {
        /// PCM rate of the decoding side, Hz.
        from: u32,
        /// PCM rate of the encoding side, Hz.
        to: u32,
    },
}

impl Error {
    /// True when the input from the network is at fault, false when our use of the codec is.
    pub fn is_peer_fault(&self) -> bool {
        matches!(self, Error::Decode(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Decode(why) => write!(f, "cannot decode payload: {why}"),
            Error::Encode(why) => write!(f, "cannot encode PCM: {why}"),
            Error::Setup(why) => write!(f, "cannot set up codec: {why}"),
            Error::RateMismatch { from, to } => {
                write!(
                    f,
                    "PCM rates differ ({from} Hz → {to} Hz); transcoding needs a resampler"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

/// A codec plug-in: one RTP payload format, decoded to and encoded from 16-bit mono PCM.
pub trait Codec: Send {
    /// The encoding name as in an SDP `a=rtpmap` line (`PCMU`, `PCMA`, `opus`).
    fn encoding_name(&self) -> &'static str;
    /// RTP payload type (static 0 and 8 for G.711, dynamic for Opus).
    fn payload_type(&self) -> u8;
    /// RTP clock rate, Hz (8000 for G.711, always 48000 for Opus).
    fn clock_rate(&self) -> u32;
    /// Sample rate of the PCM that `to_pcm` produces and `from_pcm` takes, Hz.
    fn pcm_rate(&self) -> u32;
    /// PCM samples in one 20 ms frame at [`Codec::pcm_rate`].
    fn frame_samples(&self) -> usize {
        self.pcm_rate() as usize / 50
    }
    /// Decodes one payload, appending its samples to `pcm`; returns how many were appended.
    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error>;
    /// Encodes `pcm` (one frame) as one payload appended to `out`; returns its length.
    #[allow(clippy::wrong_self_convention)] // seed 003's name for the encoder side
    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error>;
    /// Stands in for one lost 20 ms frame (packet loss concealment where the codec has it,
    /// silence otherwise), appending to `pcm`; returns how many samples were appended.
    fn conceal(&mut self, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let n = self.frame_samples();
        pcm.resize(pcm.len() + n, 0);
        Ok(n)
    }
}

/// Decodes with one codec and encodes with another through a reused PCM buffer.
pub struct Transcoder {
    from: Box<dyn Codec>,
    to: Box<dyn Codec>,
    pcm: Vec<i16>,
}

impl Transcoder {
    /// A transcoder from `from`'s payloads to `to`'s; both must run at one PCM rate.
    pub fn new(from: Box<dyn Codec>, to: Box<dyn Codec>) -> Result<Transcoder, Error> {
        if from.pcm_rate() != to.pcm_rate() {
            return Err(Error::RateMismatch {
                from: from.pcm_rate(),
                to: to.pcm_rate(),
            });
        }
        let pcm = Vec::with_capacity(from.frame_samples() * 6);
        Ok(Transcoder { from, to, pcm })
    }

    /// Transcodes one payload, appending the result to `out`; returns its length.
    pub fn transcode(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<usize, Error> {
        self.pcm.clear();
        self.from.to_pcm(payload, &mut self.pcm)?;
        self.to.from_pcm(&self.pcm, out)
    }

    /// Transcodes a lost packet: the decoder conceals it, the encoder encodes the result.
    pub fn transcode_lost(&mut self, out: &mut Vec<u8>) -> Result<usize, Error> {
        self.pcm.clear();
        self.from.conceal(&mut self.pcm)?;
        self.to.from_pcm(&self.pcm, out)
    }

    /// The decoding side.
    pub fn from_codec(&self) -> &dyn Codec {
        self.from.as_ref()
    }

    /// The encoding side.
    pub fn to_codec(&self) -> &dyn Codec {
        self.to.as_ref()
    }
}

/// A codec for a static RTP payload type (0 = PCMU, 8 = PCMA), or None for dynamic ones.
pub fn for_static_payload_type(pt: u8) -> Option<Box<dyn Codec>> {
    match pt {
        0 => Some(Box::new(g711::Pcmu)),
        8 => Some(Box::new(g711::Pcma)),
        _ => None,
    }
}

/// 16-bit PCM as little-endian bytes (the layout of a `.wav`/`.raw` file).
pub fn pcm_to_le_bytes(pcm: &[i16]) -> Vec<u8> {
    pcm.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// Little-endian bytes as 16-bit PCM (a trailing odd byte is ignored).
pub fn le_bytes_to_pcm(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcode_ulaw_to_alaw_matches_direct_encoding() {
        let pcm: Vec<i16> = (0..160)
            .map(|i| ((i as f64 * 0.37).sin() * 12000.0) as i16)
            .collect();
        let mut ulaw = Vec::new();
        g711::Pcmu.from_pcm(&pcm, &mut ulaw).unwrap();
        let mut via = Vec::new();
        let mut t = Transcoder::new(Box::new(g711::Pcmu), Box::new(g711::Pcma)).unwrap();
        assert_eq!(t.transcode(&ulaw, &mut via).unwrap(), 160);
        // Direct: decode μ-law, encode A-law.
        let direct: Vec<u8> = ulaw
            .iter()
            .map(|&c| g711::alaw_encode(g711::ulaw_decode(c)))
            .collect();
        assert_eq!(via, direct);
        assert_eq!(t.from_codec().payload_type(), 0);
        assert_eq!(t.to_codec().encoding_name(), "PCMA");
        let mut lost = Vec::new();
        assert_eq!(t.transcode_lost(&mut lost).unwrap(), 160);
        assert!(lost.iter().all(|&c| c == g711::alaw_encode(0)));
    }

    #[test]
    fn rates_must_match() {
        let wide = opus::Opus::new(48_000, 32_000).unwrap();
        let err = Transcoder::new(Box::new(g711::Pcmu), Box::new(wide))
            .err()
            .unwrap();
        assert_eq!(
            err,
            Error::RateMismatch {
                from: 8000,
                to: 48_000
            }
        );
        assert!(err.to_string().contains("48000 Hz"));
    }

    #[test]
    fn static_payload_types() {
        assert_eq!(for_static_payload_type(0).unwrap().encoding_name(), "PCMU");
        assert_eq!(for_static_payload_type(8).unwrap().encoding_name(), "PCMA");
        assert!(for_static_payload_type(111).is_none());
    }

    #[test]
    fn le_bytes_round_trip() {
        let pcm = [0i16, 1, -1, i16::MAX, i16::MIN, 12345];
        let b = pcm_to_le_bytes(&pcm);
        assert_eq!(&b[..4], &[0, 0, 1, 0]);
        assert_eq!(le_bytes_to_pcm(&b), pcm);
    }
}
