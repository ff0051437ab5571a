//! AMR-NB (`AMR/8000`) and AMR-WB (`AMR-WB/16000`), RTP payload format RFC 4867, through
//! the system's opencore-amr and vo-amrwbenc libraries ([`secrelay_amr`], loaded at run
//! time: where they are missing, making an [`Amr`] is an [`Error::Setup`] that names the
//! library and its Debian package, and [`amr_available`] says so beforehand).
//!
//! The payload format, single channel, without CRCs, interleaving or robust sorting:
//!
//! - bandwidth-efficient (RFC 4867 §4.3, the default): a 4-bit CMR (codec mode request),
//!   then one 6-bit table-of-contents entry per frame (F: more entries follow, FT: frame
//!   type, Q: frame quality), then the frames' speech bits back to back, the whole payload
//!   padded with zero bits to an octet;
//! - octet-aligned (§4.4, fmtp `octet-align=1`): the CMR and 4 reserved bits in one octet,
//!   one octet per TOC entry (F, FT, Q, 2 padding bits), each frame padded to an octet.
//!
//! Speech bits are in the order of the libraries' storage format (RFC 4867 §5.3), so moving
//! a frame between the two is bit shifting. A payload holds 1 to 12 frames of 20 ms.
//!
//! Encoding: no DTX, one mode for every frame: the highest of the fmtp's `mode-set`, else
//! 12.2 kbit/s (NB mode 7) or 14.25 kbit/s (WB mode 3, what rtpengine sends by default); CMR
//! 15 (no request), Q = 1. The peer's CMR is not acted on. Decoding takes every mode and
//! SID (comfort noise as the library makes it); NO_DATA, WB speech-lost and Q = 0 frames are
//! concealed by the library, as are lost packets ([`Codec::conceal`]).
//!
//! ```
//! use secrelay_media::{amr::{Amr, Band}, Codec};
//! # if secrelay_media::amr::amr_available(Band::Wide).is_err() { return; }
//! let mut wb = Amr::new(Band::Wide).unwrap();
//! let mut payload = Vec::new();
//! wb.from_pcm(&[0; 320], &mut payload).unwrap();
//! // CMR 15, then F = 0, FT = 3 (14.25 kbit/s), Q = 1: 4 + 6 + 285 bits in 37 octets.
//! assert_eq!((payload.len(), payload[0]), (37, 0xF1));
//! let mut pcm = Vec::new();
//! assert_eq!(wb.to_pcm(&payload, &mut pcm).unwrap(), 320);
//! ```

use secrelay_amr::{
    NbDecoder, NbEncoder, WbDecoder, WbEncoder, NB_MAX_FRAME, NB_SAMPLES, WB_MAX_FRAME, WB_SAMPLES,
};

use crate::registry::Fmtp;
use crate::{Codec, Error};

/// Most frames one payload may carry (240 ms); more is taken as malformed.
pub const MAX_FRAMES: usize = 12;

/// Frame type of NO_DATA (no speech bits; both bands).
pub const FT_NO_DATA: u8 = 15;
/// Frame type of AMR-WB's "speech lost" (no speech bits).
pub const FT_SPEECH_LOST: u8 = 14;

/// Speech bytes of the largest frame (AMR-WB mode 8: 477 bits).
const MAX_SPEECH_BYTES: usize = WB_MAX_FRAME - 1;

/// AMR-NB frame sizes in bits by FT 0–8 (8 is SID).
const NB_BITS: [u16; 9] = [95, 103, 118, 134, 148, 159, 204, 244, 39];
/// AMR-WB frame sizes in bits by FT 0–9 (9 is SID).
const WB_BITS: [u16; 10] = [132, 177, 253, 285, 317, 365, 397, 461, 477, 40];

/// AMR-NB bitrates by mode 0–7, bit/s.
const NB_RATES: [u32; 8] = [4750, 5150, 5900, 6700, 7400, 7950, 10_200, 12_200];
/// AMR-WB bitrates by mode 0–8, bit/s.
const WB_RATES: [u32; 9] = [
    6600, 8850, 12_650, 14_250, 15_850, 18_250, 19_850, 23_050, 23_850,
];

/// AMR-NB (narrowband, 8 kHz) or AMR-WB (wideband, 16 kHz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Band {
    /// AMR-NB, `AMR/8000`: 160 samples per 20 ms frame, modes 0–7.
    Narrow,
    /// AMR-WB, `AMR-WB/16000`: 320 samples per 20 ms frame, modes 0–8.
    Wide,
}

impl Band {
    /// Speech bits of a frame of type `ft`: None for the reserved types (NB 9–14, WB
    /// 10–13), 0 for NO_DATA and WB speech-lost.
    pub fn frame_bits(self, ft: u8) -> Option<usize> {
        let table: &[u16] = match self {
            Band::Narrow => &NB_BITS,
            Band::Wide => &WB_BITS,
        };
        match ft {
            FT_NO_DATA => Some(0),
            FT_SPEECH_LOST if self == Band::Wide => Some(0),
            _ => table.get(ft as usize).map(|&b| b as usize),
        }
    }
    /// PCM samples in one 20 ms frame (160 or 320).
    pub fn frame_samples(self) -> usize {
        match self {
            Band::Narrow => NB_SAMPLES,
            Band::Wide => WB_SAMPLES,
        }
    }
    /// Sample rate and RTP clock rate, Hz.
    pub fn rate(self) -> u32 {
        match self {
            Band::Narrow => 8000,
            Band::Wide => 16_000,
        }
    }
    /// Highest speech mode (7 or 8).
    pub fn max_mode(self) -> u8 {
        match self {
            Band::Narrow => secrelay_amr::NB_MAX_MODE,
            Band::Wide => secrelay_amr::WB_MAX_MODE,
        }
    }
    /// The mode we send without a `mode-set`: NB 7 (12.2 kbit/s), WB 3 (14.25 kbit/s).
    pub fn default_mode(self) -> u8 {
        match self {
            Band::Narrow => 7,
            Band::Wide => 3,
        }
    }
    /// The modes an fmtp's `mode-set` names (RFC 4867 §8.1), as a bit set (bit N: mode N):
    /// entries the band does not have are left out; `None` when it names none of its modes
    /// (or has no `mode-set`: any mode).
    pub fn mode_set(self, fmtp: &Fmtp) -> Option<u16> {
        let set = fmtp
            .get("mode-set")?
            .split(',')
            .filter_map(|m| m.trim().parse::<u8>().ok())
            .filter(|&m| m <= self.max_mode())
            .fold(0u16, |set, m| set | 1 << m);
        (set != 0).then_some(set)
    }
    /// The bitrate of speech mode `mode`, bit/s (`None` beyond [`Band::max_mode`]).
    pub fn bitrate(self, mode: u8) -> Option<u32> {
        let table: &[u32] = match self {
            Band::Narrow => &NB_RATES,
            Band::Wide => &WB_RATES,
        };
        table.get(usize::from(mode)).copied()
    }
    /// The highest mode whose bitrate is at most `bps` (mode 0 below the lowest): what a
    /// bitrate named in signalling (rtpengine's `AMR-WB/16000/1/23850`) sends.
    pub fn mode_for_bitrate(self, bps: u32) -> u8 {
        (0..=self.max_mode())
            .rev()
            .find(|m| self.bitrate(*m).is_some_and(|r| r <= bps))
            .unwrap_or(0)
    }
    /// The encoding name in `a=rtpmap`.
    pub fn encoding_name(self) -> &'static str {
        match self {
            Band::Narrow => "AMR",
            Band::Wide => "AMR-WB",
        }
    }
}

/// How a payload packs its header and frames (RFC 4867 §4.3 or §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Packing {
    /// Bandwidth-efficient mode (§4.3): everything back to back, padded once at the end.
    #[default]
    BandwidthEfficient,
    /// Octet-aligned mode (§4.4, fmtp `octet-align=1`): each field padded to an octet.
    OctetAligned,
}

/// One frame of a payload: its TOC entry's frame type and quality bit, and its speech bits
/// (MSB first, zero-padded; as many as [`Band::frame_bits`] says for `ft`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Frame type (FT): a mode, SID, NO_DATA, …
    pub ft: u8,
    /// Frame quality (Q): false when the frame is damaged.
    pub q: bool,
    /// Speech bits, MSB first, as in the storage format.
    pub bits: [u8; MAX_SPEECH_BYTES],
}

impl Frame {
    /// A frame without speech bits (NO_DATA, or WB speech lost), Q = 1.
    pub fn empty(ft: u8) -> Frame {
        Frame {
            ft,
            q: true,
            bits: [0; MAX_SPEECH_BYTES],
        }
    }

    /// The frame in storage format (header byte, speech bits), zero-padded to the largest
    /// frame: what the decoders take.
    fn storage(&self) -> [u8; WB_MAX_FRAME] {
        let mut s = [0u8; WB_MAX_FRAME];
        s[0] = (self.ft << 3) | (u8::from(self.q) << 2);
        s[1..].copy_from_slice(&self.bits);
        s
    }
}

/// Reads bits MSB first.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    fn left(&self) -> usize {
        self.data.len() * 8 - self.pos
    }
    /// The next `n` (≤ 8) bits, or None past the end.
    fn read(&mut self, n: usize) -> Option<u8> {
        if self.left() < n {
            return None;
        }
        let mut v = 0u8;
        for _ in 0..n {
            v = (v << 1) | ((self.data[self.pos / 8] >> (7 - self.pos % 8)) & 1);
            self.pos += 1;
        }
        Some(v)
    }
    /// The next `n` bits into `dst`, MSB first (the caller checked that they are there).
    fn read_into(&mut self, dst: &mut [u8], n: usize) {
        if self.pos.is_multiple_of(8) {
            let start = self.pos / 8;
            let whole = n / 8;
            dst[..whole].copy_from_slice(&self.data[start..start + whole]);
            if !n.is_multiple_of(8) {
                let keep = 0xFFu8 << (8 - n % 8);
                dst[whole] = self.data[start + whole] & keep;
            }
            self.pos += n;
            return;
        }
        for i in 0..n {
            let bit = (self.data[self.pos / 8] >> (7 - self.pos % 8)) & 1;
            dst[i / 8] |= bit << (7 - i % 8);
            self.pos += 1;
        }
    }
    fn align(&mut self) {
        self.pos = self.pos.div_ceil(8) * 8;
    }
}

/// Appends bits MSB first to a byte vector.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    bits: usize,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> BitWriter<'a> {
        let bits = out.len() * 8;
        BitWriter { out, bits }
    }
    fn push_bit(&mut self, bit: u8) {
        if self.bits.is_multiple_of(8) {
            self.out.push(0);
        }
        if bit != 0 {
            let last = self.out.len() - 1;
            self.out[last] |= 0x80 >> (self.bits % 8);
        }
        self.bits += 1;
    }
    /// The low `n` bits of `v`, MSB first.
    fn push(&mut self, v: u8, n: usize) {
        for i in (0..n).rev() {
            self.push_bit((v >> i) & 1);
        }
    }
    /// The first `n` bits of `src`, MSB first.
    fn push_bits(&mut self, src: &[u8], n: usize) {
        if self.bits.is_multiple_of(8) {
            self.out.extend_from_slice(&src[..n.div_ceil(8)]);
            if !n.is_multiple_of(8) {
                let last = self.out.len() - 1;
                self.out[last] &= 0xFFu8 << (8 - n % 8);
            }
            self.bits += n;
            return;
        }
        for i in 0..n {
            self.push_bit((src[i / 8] >> (7 - i % 8)) & 1);
        }
    }
    /// Zero bits up to an octet boundary.
    fn align(&mut self) {
        self.bits = self.bits.div_ceil(8) * 8;
    }
}

/// Parses an RFC 4867 payload (single channel, no CRC, no interleaving) into `frames`
/// (cleared first); returns the CMR. A truncated payload, a reserved frame type, more than
/// [`MAX_FRAMES`] frames or bytes that do not add up are an [`Error::Decode`], and leave
/// `frames` empty.
pub fn parse_payload(
    band: Band,
    packing: Packing,
    payload: &[u8],
    frames: &mut Vec<Frame>,
) -> Result<u8, Error> {
    frames.clear();
    let r = parse_into(band, packing, payload, frames);
    if r.is_err() {
        frames.clear();
    }
    r
}

fn parse_into(
    band: Band,
    packing: Packing,
    payload: &[u8],
    frames: &mut Vec<Frame>,
) -> Result<u8, Error> {
    let name = band.encoding_name();
    let short = || {
        Error::Decode(format!(
            "{name} payload of {} bytes is truncated",
            payload.len()
        ))
    };
    let octets = packing == Packing::OctetAligned;
    let mut r = BitReader {
        data: payload,
        pos: 0,
    };
    let cmr = r.read(4).ok_or_else(short)?;
    if octets {
        r.align();
    }
    // The table of contents.
    loop {
        let follow = r.read(1).ok_or_else(short)?;
        let ft = r.read(4).ok_or_else(short)?;
        let q = r.read(1).ok_or_else(short)?;
        if octets {
            r.read(2).ok_or_else(short)?;
        }
        if band.frame_bits(ft).is_none() {
            return Err(Error::Decode(format!("{name} frame type {ft} is reserved")));
        }
        if frames.len() == MAX_FRAMES {
            return Err(Error::Decode(format!(
                "{name} payload has more than {MAX_FRAMES} frames"
            )));
        }
        let mut f = Frame::empty(ft);
        f.q = q == 1;
        frames.push(f);
        if follow == 0 {
            break;
        }
    }
    // The speech bits.
    for f in frames.iter_mut() {
        let n = band.frame_bits(f.ft).unwrap_or(0);
        if r.left() < n {
            return Err(short());
        }
        r.read_into(&mut f.bits, n);
        if octets {
            r.align();
        }
    }
    // Bandwidth-efficient: at most 7 padding bits; octet-aligned: nothing more.
    if r.left() >= 8 {
        return Err(Error::Decode(format!(
            "{name} payload has {} bytes past its last frame",
            r.left() / 8
        )));
    }
    Ok(cmr)
}

/// Appends the RFC 4867 payload of `frames` with `cmr` to `out` (F set on every TOC entry
/// but the last); returns its length. No frames, more than [`MAX_FRAMES`], or a reserved
/// frame type are an [`Error::Encode`], and nothing is appended.
pub fn build_payload(
    band: Band,
    packing: Packing,
    cmr: u8,
    frames: &[Frame],
    out: &mut Vec<u8>,
) -> Result<usize, Error> {
    if frames.is_empty() || frames.len() > MAX_FRAMES {
        return Err(Error::Encode(format!(
            "{} frames in one payload (1 to {MAX_FRAMES})",
            frames.len()
        )));
    }
    if let Some(f) = frames.iter().find(|f| band.frame_bits(f.ft).is_none()) {
        return Err(Error::Encode(format!(
            "{} frame type {} is reserved",
            band.encoding_name(),
            f.ft
        )));
    }
    let start = out.len();
    let octets = packing == Packing::OctetAligned;
    let mut w = BitWriter::new(out);
    w.push(cmr, 4);
    if octets {
        w.align();
    }
    for (i, f) in frames.iter().enumerate() {
        w.push(u8::from(i + 1 < frames.len()), 1);
        w.push(f.ft, 4);
        w.push(u8::from(f.q), 1);
        if octets {
            w.align();
        }
    }
    for f in frames {
        w.push_bits(&f.bits, band.frame_bits(f.ft).unwrap_or(0));
        if octets {
            w.align();
        }
    }
    w.align();
    let end = w.bits / 8;
    out.resize(end, 0);
    Ok(end - start)
}

/// Whether AMR of `band` can be used here (its libraries load); the error names the missing
/// library and its Debian package. Ask before offering AMR in SDP.
pub fn amr_available(band: Band) -> Result<(), String> {
    match band {
        Band::Narrow => secrelay_amr::nb_available(),
        Band::Wide => {
            secrelay_amr::wb_decoder_available().and_then(|_| secrelay_amr::wb_encoder_available())
        }
    }
    .map_err(|e| e.to_string())
}

/// [`amr_available`] as a yes or no, asked once per process and band (the libraries load once
/// and stay): cheap enough for a packet's path, where a missing library is no error to format.
pub fn amr_loads(band: Band) -> bool {
    static LOADS: [std::sync::OnceLock<bool>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    let i = match band {
        Band::Narrow => 0,
        Band::Wide => 1,
    };
    *LOADS[i].get_or_init(|| amr_available(band).is_ok())
}

/// The library states of one stream.
enum Coder {
    Narrow(NbEncoder, NbDecoder),
    Wide(WbEncoder, WbDecoder),
}

impl Coder {
    fn new(band: Band) -> Result<Coder, Error> {
        let setup = |e: secrelay_amr::LoadError| Error::Setup(e.to_string());
        Ok(match band {
            Band::Narrow => Coder::Narrow(
                NbEncoder::new(false).map_err(setup)?,
                NbDecoder::new().map_err(setup)?,
            ),
            Band::Wide => Coder::Wide(
                WbEncoder::new(false).map_err(setup)?,
                WbDecoder::new().map_err(setup)?,
            ),
        })
    }

    /// Decodes one frame (None: lost) and appends its samples.
    fn decode(&mut self, frame: Option<&Frame>, pcm: &mut Vec<i16>) {
        match self {
            Coder::Narrow(_, dec) => {
                let mut out = [0i16; NB_SAMPLES];
                let storage = frame.map(Frame::storage);
                dec.decode(storage.as_ref().map(|s| &s[..NB_MAX_FRAME]), &mut out);
                pcm.extend_from_slice(&out);
            }
            Coder::Wide(_, dec) => {
                let mut out = [0i16; WB_SAMPLES];
                let storage = frame.map(Frame::storage);
                dec.decode(storage.as_ref().map(|s| &s[..]), &mut out);
                pcm.extend_from_slice(&out);
            }
        }
    }

    /// Encodes one frame of PCM (the band's frame length) at `mode`.
    fn encode(&mut self, band: Band, mode: u8, pcm: &[i16]) -> Result<Frame, Error> {
        let mut storage = [0u8; WB_MAX_FRAME];
        let n = match self {
            Coder::Narrow(enc, _) => {
                let pcm = pcm.try_into().map_err(|_| wrong_length(pcm.len()))?;
                let mut out = [0u8; NB_MAX_FRAME];
                let n = enc.encode(mode, pcm, &mut out);
                storage[..NB_MAX_FRAME].copy_from_slice(&out);
                n
            }
            Coder::Wide(enc, _) => {
                let pcm = pcm.try_into().map_err(|_| wrong_length(pcm.len()))?;
                enc.encode(mode, pcm, &mut storage)
            }
        };
        let ft = secrelay_amr::frame_type(storage[0]);
        let bits = band.frame_bits(ft);
        if n == 0 || bits.map(|b| 1 + b.div_ceil(8)) != Some(n) {
            return Err(Error::Encode(format!(
                "the {} encoder gave {n} bytes of frame type {ft}",
                band.encoding_name()
            )));
        }
        let mut f = Frame::empty(ft);
        f.q = storage[0] & 0x04 != 0;
        f.bits.copy_from_slice(&storage[1..]);
        Ok(f)
    }
}

fn wrong_length(n: usize) -> Error {
    Error::Encode(format!("{n} samples is not one AMR frame"))
}

/// An AMR-NB or AMR-WB codec for one stream: encoder and decoder states of the system's
/// libraries, and the payload format's settings.
pub struct Amr {
    band: Band,
    packing: Packing,
    mode: u8,
    payload_type: u8,
    coder: Coder,
    frames: Vec<Frame>,
}

impl std::fmt::Debug for Amr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Amr")
            .field("band", &self.band)
            .field("packing", &self.packing)
            .field("mode", &self.mode)
            .field("payload_type", &self.payload_type)
            .finish()
    }
}

impl Amr {
    /// Dynamic payload type of `AMR/8000` unless [`Amr::with_payload_type`] says otherwise.
    pub const NB_PAYLOAD_TYPE: u8 = 96;
    /// Dynamic payload type of `AMR-WB/16000` unless [`Amr::with_payload_type`] says otherwise.
    pub const WB_PAYLOAD_TYPE: u8 = 97;

    /// AMR of `band`, bandwidth-efficient, sending the band's default mode.
    pub fn new(band: Band) -> Result<Amr, Error> {
        Ok(Amr {
            band,
            packing: Packing::BandwidthEfficient,
            mode: band.default_mode(),
            payload_type: match band {
                Band::Narrow => Self::NB_PAYLOAD_TYPE,
                Band::Wide => Self::WB_PAYLOAD_TYPE,
            },
            coder: Coder::new(band)?,
            frames: Vec::with_capacity(MAX_FRAMES),
        })
    }

    /// AMR of `band` as an `a=fmtp` sets it up: `octet-align=1` → octet-aligned; the mode
    /// sent is the highest valid one of `mode-set` (the default without one, or when none
    /// of its entries is valid). `crc=1`, `robust-sorting=1`, `interleaving` or `channels`
    /// above 1 are an [`Error::Setup`] naming the parameter (not supported here).
    pub fn from_fmtp(band: Band, fmtp: &Fmtp) -> Result<Amr, Error> {
        let name = band.encoding_name();
        for flag in ["crc", "robust-sorting"] {
            if fmtp.flag(flag) == Some(true) {
                return Err(Error::Setup(format!("{name} {flag}=1 is not supported")));
            }
        }
        if fmtp.get("interleaving").is_some() {
            return Err(Error::Setup(format!(
                "{name} interleaving is not supported"
            )));
        }
        if let Some(ch) = fmtp.get("channels") {
            if ch.trim() != "1" {
                return Err(Error::Setup(format!(
                    "{name} channels={ch}: only one channel is supported"
                )));
            }
        }
        let mut amr = Amr::new(band)?;
        if fmtp.flag("octet-align") == Some(true) {
            amr.packing = Packing::OctetAligned;
        }
        if let Some(set) = band.mode_set(fmtp) {
            // The highest mode of the set.
            amr.mode = (15 - set.leading_zeros()) as u8;
        }
        Ok(amr)
    }

    /// Uses `pt` as the RTP payload type.
    pub fn with_payload_type(mut self, pt: u8) -> Amr {
        self.payload_type = pt;
        self
    }

    /// Uses `packing` for the payloads sent and expected.
    pub fn with_packing(mut self, packing: Packing) -> Amr {
        self.packing = packing;
        self
    }

    /// Sends `mode` from now on (0–7 for NB, 0–8 for WB).
    pub fn set_mode(&mut self, mode: u8) -> Result<(), Error> {
        if mode > self.band.max_mode() {
            return Err(Error::Setup(format!(
                "{} has modes 0 to {}, not {mode}",
                self.band.encoding_name(),
                self.band.max_mode()
            )));
        }
        self.mode = mode;
        Ok(())
    }

    /// The mode sent.
    pub fn mode(&self) -> u8 {
        self.mode
    }

    /// AMR-NB or AMR-WB.
    pub fn band(&self) -> Band {
        self.band
    }

    /// Bandwidth-efficient or octet-aligned.
    pub fn packing(&self) -> Packing {
        self.packing
    }
}

impl Codec for Amr {
    fn encoding_name(&self) -> &'static str {
        self.band.encoding_name()
    }
    fn payload_type(&self) -> u8 {
        self.payload_type
    }
    fn clock_rate(&self) -> u32 {
        self.band.rate()
    }
    fn pcm_rate(&self) -> u32 {
        self.band.rate()
    }
    fn ptimes(&self) -> &'static [u32] {
        &[20, 40, 60]
    }
    fn has_plc(&self) -> bool {
        true
    }

    fn to_pcm(&mut self, payload: &[u8], pcm: &mut Vec<i16>) -> Result<usize, Error> {
        let mut frames = std::mem::take(&mut self.frames);
        let r = parse_payload(self.band, self.packing, payload, &mut frames);
        let n = frames.len() * self.band.frame_samples();
        if r.is_ok() {
            for f in &frames {
                self.coder.decode(Some(f), pcm);
            }
        }
        self.frames = frames;
        r.map(|_| n)
    }

    fn from_pcm(&mut self, pcm: &[i16], out: &mut Vec<u8>) -> Result<usize, Error> {
        let per = self.band.frame_samples();
        let count = pcm.len() / per;
        if pcm.is_empty() || !pcm.len().is_multiple_of(per) || count > MAX_FRAMES {
            return Err(Error::Encode(format!(
                "{} samples is not 1 to {MAX_FRAMES} {} frames of {per}",
                pcm.len(),
                self.band.encoding_name()
            )));
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut r = Ok(());
        for chunk in pcm.chunks_exact(per) {
            match self.coder.encode(self.band, self.mode, chunk) {
                Ok(f) => frames.push(f),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        let r = r.and_then(|_| build_payload(self.band, self.packing, 15, &frames, out));
        self.frames = frames;
        r
    }

    fn conceal(&mut self, samples: usize, pcm: &mut Vec<i16>) -> Result<usize, Error> {
        // Whole frames from the decoder, the last one cut to what was asked.
        let start = pcm.len();
        for _ in 0..samples.div_ceil(self.band.frame_samples()) {
            self.coder.decode(None, pcm);
        }
        pcm.truncate(start + samples);
        Ok(samples)
    }

    fn reset(&mut self) {
        if let Ok(c) = Coder::new(self.band) {
            self.coder = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tone;

    const BANDS: [Band; 2] = [Band::Narrow, Band::Wide];
    const PACKINGS: [Packing; 2] = [Packing::BandwidthEfficient, Packing::OctetAligned];

    /// Every frame type with a size, for `band`.
    fn valid_fts(band: Band) -> Vec<u8> {
        (0..16)
            .filter(|&ft| band.frame_bits(ft).is_some())
            .collect()
    }

    /// A frame of type `ft` whose speech bits are a pattern seeded by `seed`, zero past them.
    fn patterned(band: Band, ft: u8, seed: u8) -> Frame {
        let mut f = Frame::empty(ft);
        let n = band.frame_bits(ft).unwrap();
        for i in 0..n {
            let bit = ((i as u32 * 7 + seed as u32 * 13) % 5 < 2) as u8;
            f.bits[i / 8] |= bit << (7 - i % 8);
        }
        f.q = !seed.is_multiple_of(3);
        f
    }

    #[test]
    fn frame_sizes_follow_rfc_4867() {
        assert_eq!(Band::Narrow.frame_bits(7), Some(244));
        assert_eq!(Band::Narrow.frame_bits(8), Some(39));
        assert_eq!(Band::Narrow.frame_bits(15), Some(0));
        assert!((9..=14).all(|ft| Band::Narrow.frame_bits(ft).is_none()));
        assert_eq!(Band::Wide.frame_bits(8), Some(477));
        assert_eq!(Band::Wide.frame_bits(9), Some(40));
        assert_eq!(Band::Wide.frame_bits(14), Some(0));
        assert!((10..=13).all(|ft| Band::Wide.frame_bits(ft).is_none()));
        assert_eq!(Band::Wide.frame_bits(16), None);
        assert_eq!(valid_fts(Band::Narrow).len(), 10);
        assert_eq!(valid_fts(Band::Wide).len(), 12);
    }

    #[test]
    fn pack_unpack_round_trips_every_frame_type() {
        for band in BANDS {
            for packing in PACKINGS {
                // One frame of each type alone, then all of them in payloads of up to 12.
                let fts = valid_fts(band);
                let mut singles: Vec<Vec<Frame>> = fts
                    .iter()
                    .map(|&ft| vec![patterned(band, ft, ft + 1)])
                    .collect();
                let all: Vec<Frame> = fts
                    .iter()
                    .cycle()
                    .take(MAX_FRAMES)
                    .enumerate()
                    .map(|(i, &ft)| patterned(band, ft, i as u8))
                    .collect();
                singles.push(all);
                singles.push(vec![Frame::empty(FT_NO_DATA); 3]);
                for frames in singles {
                    let mut payload = vec![0xAA];
                    let n = build_payload(band, packing, 5, &frames, &mut payload).unwrap();
                    assert_eq!(n, payload.len() - 1);
                    let header_bits = match packing {
                        Packing::BandwidthEfficient => 4 + 6 * frames.len(),
                        Packing::OctetAligned => 8 + 8 * frames.len(),
                    };
                    let speech: usize = frames
                        .iter()
                        .map(|f| {
                            let b = band.frame_bits(f.ft).unwrap();
                            match packing {
                                Packing::BandwidthEfficient => b,
                                Packing::OctetAligned => b.div_ceil(8) * 8,
                            }
                        })
                        .sum();
                    assert_eq!(
                        n,
                        (header_bits + speech).div_ceil(8),
                        "{band:?} {packing:?}"
                    );
                    let mut back = Vec::new();
                    let cmr = parse_payload(band, packing, &payload[1..], &mut back).unwrap();
                    assert_eq!(cmr, 5);
                    assert_eq!(back, frames, "{band:?} {packing:?}");
                }
            }
        }
    }

    #[test]
    fn hand_computed_payloads() {
        // NB FT 0 (95 bits, all ones), bandwidth-efficient: CMR 1111, F 0, FT 0000, Q 1,
        // the 95 ones, 7 zero bits of padding: 105 bits in 14 octets.
        let mut f = Frame::empty(0);
        f.bits[..11].fill(0xFF);
        f.bits[11] = 0xFE;
        let mut p = Vec::new();
        build_payload(Band::Narrow, Packing::BandwidthEfficient, 15, &[f], &mut p).unwrap();
        let mut want = vec![0xF0, 0x7F];
        want.extend([0xFF; 11]);
        want.push(0x80);
        assert_eq!(p, want);
        // Octet-aligned: CMR 1111 + 0000, TOC 0 0000 1 00, then 12 octets (95 bits + 1 pad).
        p.clear();
        build_payload(Band::Narrow, Packing::OctetAligned, 15, &[f], &mut p).unwrap();
        let mut want = vec![0xF0, 0x04];
        want.extend([0xFF; 11]);
        want.push(0xFE);
        assert_eq!(p, want);
        // Two WB frames, bandwidth-efficient: mode 3 then NO_DATA, CMR 2:
        // 0010 | 1 0011 1 | 0 1111 1 | 285 zero bits | 3 bits padding: 304 bits, 38 octets.
        let frames = [Frame::empty(3), Frame::empty(FT_NO_DATA)];
        p.clear();
        build_payload(Band::Wide, Packing::BandwidthEfficient, 2, &frames, &mut p).unwrap();
        assert_eq!(p.len(), 38);
        assert_eq!(&p[..2], &[0b0010_1001, 0b1101_1111]);
        assert!(p[2..].iter().all(|&b| b == 0));
    }

    #[test]
    fn encoded_payloads_have_the_expected_headers() {
        // Octet-aligned WB mode 3: CMR 15 + reserved, TOC 0x1C, then 36 octets (285 bits).
        let mut wb = Amr::from_fmtp(Band::Wide, &Fmtp::parse("octet-align=1")).unwrap();
        let pcm = tone::sine(16_000, 1000.0, 8000.0, 320);
        let mut p = Vec::new();
        assert_eq!(wb.from_pcm(&pcm, &mut p).unwrap(), 38);
        assert_eq!(&p[..2], &[0xF0, 0x1C]);
        // Bandwidth-efficient: 0xF1, then Q = 1 as the second octet's top bit, and the
        // same speech bits shifted by 10 (a fresh encoder gives the same frame).
        let mut be = Amr::new(Band::Wide).unwrap();
        let mut q = Vec::new();
        assert_eq!(be.from_pcm(&pcm, &mut q).unwrap(), 37);
        assert_eq!(q[0], 0xF1);
        assert_eq!(q[1] & 0x80, 0x80);
        let mut fo = Vec::new();
        let mut fb = Vec::new();
        parse_payload(Band::Wide, Packing::OctetAligned, &p, &mut fo).unwrap();
        parse_payload(Band::Wide, Packing::BandwidthEfficient, &q, &mut fb).unwrap();
        assert_eq!(fo, fb);
        // An octet-aligned single frame is the CMR octet and the storage-format frame.
        let mut enc = secrelay_amr::NbEncoder::new(false).unwrap();
        let mut storage = [0u8; NB_MAX_FRAME];
        let pcm8: [i16; NB_SAMPLES] = tone::sine(8000, 1000.0, 8000.0, 160).try_into().unwrap();
        let n = enc.encode(7, &pcm8, &mut storage);
        let mut nb = Amr::from_fmtp(Band::Narrow, &Fmtp::parse("octet-align=1")).unwrap();
        let mut p = Vec::new();
        nb.from_pcm(&pcm8, &mut p).unwrap();
        assert_eq!(p[0], 0xF0);
        assert_eq!(&p[1..], &storage[..n]);
    }

    #[test]
    fn multi_frame_packets_set_f_on_all_but_the_last() {
        let mut nb = Amr::from_fmtp(Band::Narrow, &Fmtp::parse("octet-align=1")).unwrap();
        let mut p = Vec::new();
        nb.from_pcm(&[0; 480], &mut p).unwrap();
        // Three TOC octets for mode 7: F=1 0111 1 00, twice, then F=0.
        assert_eq!(&p[..4], &[0xF0, 0xBC, 0xBC, 0x3C]);
        assert_eq!(p.len(), 4 + 3 * 31);
        let mut pcm = Vec::new();
        assert_eq!(nb.to_pcm(&p, &mut pcm).unwrap(), 480);
        assert_eq!(pcm.len(), 480);
        assert!(nb.from_pcm(&[0; 100], &mut p).is_err());
        assert!(nb.from_pcm(&[], &mut p).is_err());
        assert!(nb.from_pcm(&[0; 160 * 13], &mut p).is_err());
    }

    fn tone_through(codec: &mut Amr, ptime_frames: usize) -> Vec<i16> {
        let rate = codec.pcm_rate();
        let pcm = tone::sine(rate, 1000.0, 8000.0, rate as usize);
        let chunk = codec.frame_samples() * ptime_frames;
        let mut out = Vec::new();
        for c in pcm.chunks_exact(chunk) {
            let mut p = Vec::new();
            codec.from_pcm(c, &mut p).unwrap();
            assert_eq!(codec.to_pcm(&p, &mut out).unwrap(), chunk);
        }
        out
    }

    #[test]
    fn a_tone_survives_both_bands_and_packings() {
        for band in BANDS {
            for (fmtp, frames) in [("", 1), ("octet-align=1", 3), ("mode-set=0,2", 2)] {
                let mut c = Amr::from_fmtp(band, &Fmtp::parse(fmtp)).unwrap();
                let out = tone_through(&mut c, frames);
                let rate = c.pcm_rate();
                let tail = &out[rate as usize / 5..];
                let share = tone::tone_share(tail, rate, 1000.0);
                let f = tone::zero_crossing_hz(tail, rate);
                let level =
                    tone::goertzel_power(tail, rate, 1000.0).sqrt() / (8000.0 / 2f64.sqrt());
                eprintln!(
                    "{band:?} [{fmtp}] ×{frames}: share {share:.3}, {f:.1} Hz, level {level:.2}"
                );
                assert!(share > 0.9, "{band:?} {fmtp}: share {share}");
                assert!((f - 1000.0).abs() < 5.0, "{band:?} {fmtp}: {f} Hz");
                assert!(
                    (0.7..1.3).contains(&level),
                    "{band:?} {fmtp}: level {level}"
                );
            }
        }
    }

    #[test]
    fn concealment_and_no_data_frames_give_samples() {
        for band in BANDS {
            let mut c = Amr::new(band).unwrap();
            let n = c.frame_samples();
            tone_through(&mut c, 1);
            let mut pcm = Vec::new();
            assert_eq!(c.conceal(n, &mut pcm).unwrap(), n);
            assert_eq!(c.conceal(n / 2 + 3, &mut pcm).unwrap(), n / 2 + 3);
            assert_eq!(pcm.len(), n + n / 2 + 3);
            // Just after a tone, concealment is not silence.
            let rms = (pcm[..n].iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
            assert!(rms > 300.0, "{band:?}: concealment rms {rms}");
            // NO_DATA, speech-lost and Q = 0 frames are decoded (concealed) too.
            let mut frames = vec![Frame::empty(FT_NO_DATA)];
            if band == Band::Wide {
                frames.push(Frame::empty(FT_SPEECH_LOST));
            }
            let mut bad = patterned(band, 2, 0);
            bad.q = false;
            frames.push(bad);
            let mut p = Vec::new();
            build_payload(band, Packing::BandwidthEfficient, 15, &frames, &mut p).unwrap();
            pcm.clear();
            assert_eq!(c.to_pcm(&p, &mut pcm).unwrap(), frames.len() * n);
            assert_eq!(pcm.len(), frames.len() * n);
            assert!(c.has_plc());
            c.reset();
        }
    }

    #[test]
    fn malformed_payloads_are_decode_errors_and_append_nothing() {
        for band in BANDS {
            for packing in PACKINGS {
                let mut c = Amr::new(band).unwrap().with_packing(packing);
                let mut good = Vec::new();
                let f = patterned(band, 2, 1);
                build_payload(band, packing, 15, &[f, f], &mut good).unwrap();
                let mut pcm = vec![1];
                let mut check = |payload: &[u8], what: &str| {
                    let e = c.to_pcm(payload, &mut pcm).unwrap_err();
                    assert!(e.is_peer_fault(), "{band:?} {packing:?} {what}: {e}");
                    assert_eq!(pcm, [1], "{band:?} {packing:?} {what}");
                };
                check(&[], "empty");
                check(&good[..1], "CMR only");
                for cut in 2..good.len() {
                    check(&good[..cut], "truncated");
                }
                let mut long = good.clone();
                long.push(0);
                check(&long, "an octet too many");
                // Reserved frame types.
                let reserved = if band == Band::Narrow {
                    9..=14
                } else {
                    10..=13
                };
                for ft in reserved {
                    let p = match packing {
                        Packing::BandwidthEfficient => {
                            vec![0xF0 | (ft >> 1), ((ft & 1) << 7) | 0x40, 0]
                        }
                        Packing::OctetAligned => vec![0xF0, (ft << 3) | 0x04, 0, 0],
                    };
                    check(&p, "reserved FT");
                }
                // 13 NO_DATA entries (F set on the first 12).
                let frames = [Frame::empty(FT_NO_DATA); MAX_FRAMES];
                let mut twelve = Vec::new();
                build_payload(band, packing, 15, &frames, &mut twelve).unwrap();
                let thirteen = match packing {
                    // 4 + 13·6 = 82 bits: the 12 entries' bits, then 1 1111 1 … 0 1111 1.
                    Packing::BandwidthEfficient => {
                        let mut w = Vec::new();
                        let mut bw = BitWriter::new(&mut w);
                        bw.push(15, 4);
                        for i in 0..13 {
                            bw.push(u8::from(i < 12), 1);
                            bw.push(FT_NO_DATA, 4);
                            bw.push(1, 1);
                        }
                        w
                    }
                    Packing::OctetAligned => {
                        let mut t = vec![0xF0];
                        t.extend([0xFC; 12]);
                        t.push(0x7C);
                        t
                    }
                };
                check(&thirteen, "13 frames");
                assert_eq!(c.to_pcm(&twelve, &mut pcm).unwrap(), 12 * c.frame_samples());
                pcm.truncate(1);
                assert_eq!(c.to_pcm(&good, &mut pcm).unwrap(), 2 * c.frame_samples());
            }
        }
        assert!(build_payload(
            Band::Narrow,
            Packing::OctetAligned,
            15,
            &[],
            &mut Vec::new()
        )
        .is_err());
        let mut out = vec![7];
        let e = build_payload(
            Band::Wide,
            Packing::OctetAligned,
            15,
            &[Frame::empty(11)],
            &mut out,
        );
        assert!(matches!(e, Err(Error::Encode(_))) && out == [7]);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u32 = 0x9E37_79B9;
        let mut codecs: Vec<Amr> = BANDS
            .iter()
            .flat_map(|&b| PACKINGS.map(|p| Amr::new(b).unwrap().with_packing(p)))
            .collect();
        for round in 0..3000 {
            let len = round % 90;
            let p: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            for c in codecs.iter_mut() {
                let mut pcm = Vec::new();
                match c.to_pcm(&p, &mut pcm) {
                    Ok(n) => assert!(n == pcm.len() && n % c.frame_samples() == 0 && n > 0),
                    Err(e) => assert!(e.is_peer_fault() && pcm.is_empty()),
                }
            }
        }
    }

    #[test]
    fn fmtp_sets_packing_and_mode() {
        let f = |s: &str| Amr::from_fmtp(Band::Narrow, &Fmtp::parse(s));
        let w = |s: &str| Amr::from_fmtp(Band::Wide, &Fmtp::parse(s));
        let c = f("").unwrap();
        assert_eq!(
            (c.packing(), c.mode(), c.payload_type()),
            (Packing::BandwidthEfficient, 7, 96)
        );
        assert_eq!(w("").unwrap().mode(), 3);
        assert_eq!(w("").unwrap().payload_type(), 97);
        assert_eq!(f("octet-align=1").unwrap().packing(), Packing::OctetAligned);
        assert_eq!(
            f("octet-align=0").unwrap().packing(),
            Packing::BandwidthEfficient
        );
        assert_eq!(f("mode-set=0,2,5").unwrap().mode(), 5);
        assert_eq!(f("mode-set=2, 9, x").unwrap().mode(), 2);
        assert_eq!(f("mode-set=9").unwrap().mode(), 7);
        assert_eq!(f("mode-set=").unwrap().mode(), 7);
        assert_eq!(w("mode-set=0,1,2;octet-align=1").unwrap().mode(), 2);
        assert_eq!(w("mode-set=8").unwrap().mode(), 8);
        assert_eq!(
            w("octet-align=1;mode-change-capability=2;max-red=0")
                .unwrap()
                .mode(),
            3
        );
        for bad in ["crc=1", "robust-sorting=1", "interleaving=4", "channels=2"] {
            let e = f(bad).unwrap_err();
            let key = bad.split('=').next().unwrap();
            assert!(
                matches!(&e, Error::Setup(m) if m.contains(key)),
                "{bad}: {e}"
            );
        }
        assert!(f("crc=0;robust-sorting=0;channels=1").is_ok());
        // A bitrate named in signalling: the highest mode not above it.
        assert_eq!(Band::Wide.mode_for_bitrate(23_850), 8);
        assert_eq!(Band::Wide.mode_for_bitrate(14_000), 2);
        assert_eq!(Band::Wide.mode_for_bitrate(1000), 0);
        assert_eq!(Band::Narrow.mode_for_bitrate(12_200), 7);
        assert_eq!(Band::Narrow.mode_for_bitrate(99_000), 7);
        assert_eq!(Band::Narrow.bitrate(3), Some(6700));
        assert_eq!(Band::Narrow.bitrate(8), None);
        let mut c = f("").unwrap().with_payload_type(118);
        assert_eq!(c.payload_type(), 118);
        assert!(c.set_mode(8).is_err());
        c.set_mode(0).unwrap();
        assert_eq!(c.mode(), 0);
        assert_eq!(
            (c.encoding_name(), c.clock_rate(), c.pcm_rate()),
            ("AMR", 8000, 8000)
        );
        assert_eq!(
            (c.frame_samples(), c.clock_ticks(160), c.ptimes()),
            (160, 160, &[20, 40, 60][..])
        );
        let c = w("").unwrap();
        assert_eq!(
            (c.encoding_name(), c.clock_rate(), c.frame_samples()),
            ("AMR-WB", 16_000, 320)
        );
        amr_available(Band::Narrow).unwrap();
        amr_available(Band::Wide).unwrap();
    }
}
