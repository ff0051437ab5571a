//! Codec plug-ins behind one trait, after the transcoding plug-ins of seed 003
//! (`encoding_name`, payload type, `to_pcm`, `from_pcm`, `transcode`), and the PCM plumbing
//! a gateway needs to bridge them. The crate is pure: no sockets, no clock, no threads; time
//! is RTP timestamps and sample counts.
//!
//! - [`Codec`]: one RTP payload format, decoded to and encoded from 16-bit PCM, with its
//!   encoding name, clock rate, channels, payload type, packet times, loss concealment and
//!   FEC where it has them. [`Registry`] finds a codec by its `a=rtpmap` (name, clock rate,
//!   channels) and `a=fmtp`, and makes one instance per stream.
//! - Codecs: [`g711::Pcmu`] and [`g711::Pcma`] (ITU-T G.711, ours), [`g722::G722`] (ITU-T
//!   G.722 64 kbit/s, ours), [`opus::Opus`] (libopus through the `opus` crate: 8–48 kHz,
//!   mono or stereo, PLC and in-band FEC), [`amr::Amr`] (AMR-NB and AMR-WB, RFC 4867
//!   payloads in both packings, through the system's opencore-amr and vo-amrwbenc loaded at
//!   run time by `secrelay-amr`: where they are missing AMR is unavailable, the rest is
//!   not affected). [`dtmf`]: RFC 4733 telephone-events (not audio:
//!   parsed, built, generated, collected and carried between legs); [`inband`]: DTMF digits
//!   found in audio and telephone-events rendered as tones, between the two kinds of phone;
//!   [`cn`]: RFC 3389 comfort noise (not audio either): payloads parsed and written, noise
//!   made at a payload's level, digital silence found, between phones with and without it.
//! - Building blocks: [`resample::Resampler`] (8, 16, 48 kHz, through `rubato`),
//!   [`reframe::Reframer`] (PCM to packets of a target packet time), [`mixer::Mixer`]
//!   (N−1 sums, saturating, i16 or f32), [`transcode::Transcoder`] (decode → resample →
//!   re-frame → encode with its own sequence numbers and timestamps, telephone-events
//!   carried across), and [`tone`] (tones, Goertzel, SNR: what tests measure audio with).
//! - [`clip::Clip`]: an audio file (WAV, MP3, FLAC) decoded to mono PCM, for playing into a
//!   call.
//!
//! ```
//! use secrelay_media::{Registry, transcode::{InPacket, Transcoder}};
//! let reg = Registry::standard();
//! let pcmu = reg.make_by_name("PCMU", 8000, 1, None).unwrap();
//! let pcma = reg.make_by_name("PCMA", 8000, 1, None).unwrap();
//! let mut t = Transcoder::new(pcmu, pcma, 20).unwrap();
//! let mut out = Vec::new();
//! t.push(&InPacket { seq: 1, timestamp: 0, marker: false, payload: &[0xFF; 160] }, &mut out).unwrap();
//! assert_eq!((out.len(), out[0].payload.len(), out[0].payload[0]), (1, 160, 0xD5));
//! ```

#![forbid(unsafe_code)]

pub mod amr;
pub mod clip;
pub mod cn;
pub mod dtmf;
pub mod g711;
pub mod g722;
pub mod inband;
pub mod mixer;
pub mod opus;
pub mod reframe;
pub mod registry;
pub mod resample;
pub mod silence;
pub mod tone;
pub mod transcode;

pub use registry::{FormatKind, FormatSpec, Registry};

use std::fmt;

/// What went wrong in a codec or a stage of the PCM pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The payload could not be decoded (malformed or truncated: the peer's fault).
    Decode(String),
    /// Encoding failed (e.g. a PCM frame whose length the codec cannot take: our fault).
    Encode(String),
    /// A codec or stage could not be set up with these parameters (names the parameter).
    Setup(String),
    /// No codec in the registry for this `a=rtpmap` (name/clock rate/channels).
    Unknown(String),
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
            Error::Unknown(what) => write!(f, "no codec for {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// A codec plug-in: one RTP payload format, decoded to and encoded from 16-bit PCM.
///
/// One instance serves one stream (codecs with memory, G.722 and Opus, keep state between
/// packets): make one per stream from the [`Registry`]. PCM with two channels is
/// interleaved. Input from the network goes through [`Codec::to_pcm`], which never panics:
/// a payload it cannot decode is an [`Error::Decode`] (the caller drops the packet and counts
/// it), and nothing is appended.
pub trait Codec: Send {
    /// The encoding name as in an SDP `a=rtpmap` line (`PCMU`, `PCMA`, `G722`, `opus`, `AMR`,
    /// `AMR-WB`).
    fn encoding_name(&self) -> &'static str;
    /// RTP payload type this instance is set up with: the codec's default (static 0, 8, 9
    /// for G.711 and G.722, 111 for Opus) unless the codec was built for another.
    fn payload_type(&self) -> u8;
    /// RTP clock rate, Hz (8000 for G.711 and G.722, always 48000 for Opus).
    fn clock_rate(&self) -> u32;
    /// Sample rate of the PCM that `to_pcm` produces and `from_pcm` takes, Hz.
    fn pcm_rate(&self) -> u32;
    /// Channels of that PCM (interleaved when 2).
    fn channels(&self) -> u8 {
        1
    }
    /// Packet times this codec can encode, in ms (the packetizer re-frames to one of them).
    fn ptimes(&self) -> &'static [u32] {
        &[10, 20, 30, 40, 60]
    }
    /// Whether [`Codec::conceal`] does more than play silence (a real packet-loss concealment).
    fn has_plc(&self) -> bool {
        false
    }
    /// Whether [`Codec::recover`] can rebuild a lost packet from the next one (in-band FEC).
    fn has_fec(&self) -> bool {
        false
    }
    /// PCM samples (per channel) in one 20 ms frame at [`Codec::pcm_rate`].
    fn frame_samples(&self) -> usize {
        self.samples_for_ptime(20)
    }
    /// PCM samples (per channel) in `ptime_ms` milliseconds.
    fn samples_for_ptime(&self, ptime_ms: u32) -> usize {
        (self.pcm_rate() as u64 * ptime_ms as u64 / 1000) as usize
    }
    /// RTP clock ticks for `samples` PCM samples per channel (G.722: half of them; Opus at
    /// 8 kHz PCM: six times as many).
    fn clock_ticks(&self, samples: usize) -> u32 {
        (samples as u64 * self.clock_rate() as u64 / self.pcm_rate() as u64) as u32
    }
    /// Decodes one payload, appending its samples to `pcm`; returns how many were appended
    /// (all channels). On error nothing is appended.
    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error>;
    /// Encodes `pcm` (one packet's worth, one of [`Codec::ptimes`]) as one payload appended
    /// to `out`; returns its length. On error nothing is appended.
    #[allow(clippy::wrong_self_convention)] // seed 003's name for the encoder side
    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error>;
    /// Stands in for `samples` (per channel) of lost signal: packet-loss concealment where
    /// the codec has it ([`Codec::has_plc`]), silence otherwise. Appends to `pcm`, returns
    /// how many samples were appended (all channels).
    fn conceal(&mut self, samples: usize, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let n = samples * self.channels() as usize;
        pcm.resize(pcm.len() + n, 0);
        Ok(n)
    }
    /// Rebuilds the `samples` (per channel) lost just before `next`, the payload that
    /// followed them, from the redundancy `next` carries (Opus in-band FEC); conceals when
    /// the codec has none. `next` itself is decoded afterwards by [`Codec::to_pcm`].
    fn recover(&mut self, next: &[u8], samples: usize, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let _ = next;
        self.conceal(samples, pcm)
    }
    /// Back to the state of a new instance (a new stream: a new SSRC).
    fn reset(&mut self) {}
}

/// A codec for a static RTP payload type (0 = PCMU, 8 = PCMA, 9 = G.722), or None for
/// dynamic ones (those need the SDP's `a=rtpmap`: see [`Registry`]).
pub fn for_static_payload_type(pt: u8) -> Option<Box<dyn Codec>> {
    match pt {
        0 => Some(Box::new(g711::Pcmu)),
        8 => Some(Box::new(g711::Pcma)),
        g722::PAYLOAD_TYPE => Some(Box::new(g722::G722::new())),
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
    fn static_payload_types() {
        assert_eq!(for_static_payload_type(0).unwrap().encoding_name(), "PCMU");
        assert_eq!(for_static_payload_type(8).unwrap().encoding_name(), "PCMA");
        assert_eq!(for_static_payload_type(9).unwrap().encoding_name(), "G722");
        assert!(for_static_payload_type(111).is_none());
    }

    #[test]
    fn le_bytes_round_trip() {
        let pcm = [0i16, 1, -1, i16::MAX, i16::MIN, 12345];
        let b = pcm_to_le_bytes(&pcm);
        assert_eq!(&b[..4], &[0, 0, 1, 0]);
        assert_eq!(le_bytes_to_pcm(&b), pcm);
    }

    #[test]
    fn default_concealment_is_silence_per_channel() {
        struct Stereo;
        impl Codec for Stereo {
            fn encoding_name(&self) -> &'static str {
                "L16"
            }
            fn payload_type(&self) -> u8 {
                10
            }
            fn clock_rate(&self) -> u32 {
                44_100
            }
            fn pcm_rate(&self) -> u32 {
                44_100
            }
            fn channels(&self) -> u8 {
                2
            }
            fn to_pcm(&mut self, _: &[u8], _: &mut Vec<i16>) -> Result<usize, Error> {
                Err(Error::Decode("test".into()))
            }
            fn from_pcm(&mut self, _: &[i16], _: &mut Vec<u8>) -> Result<usize, Error> {
                Err(Error::Encode("test".into()))
            }
        }
        let mut c = Stereo;
        let mut pcm = vec![7];
        assert_eq!(c.conceal(441, &mut pcm).unwrap(), 882);
        assert_eq!(pcm.len(), 883);
        assert!(pcm[1..].iter().all(|&s| s == 0));
        let mut more = Vec::new();
        assert_eq!(c.recover(&[1, 2], 10, &mut more).unwrap(), 20);
        assert_eq!(c.frame_samples(), 882);
        assert_eq!(c.clock_ticks(441), 441);
        assert!(!c.has_plc() && !c.has_fec());
    }
}
