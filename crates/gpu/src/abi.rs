//! The layout the kernels (`kernels/srtp.cu`) and the host agree on: per-packet descriptors,
//! raw key sets, the sizes of the key slots and tables. Everything is written and read as
//! little-endian bytes, so no Rust struct is handed to the device as memory.

use secrelay_srtp::offload::{OffloadRtcp, OffloadRtp, RtpKeyMaterial};
use secrelay_srtp::{Context, Error};
use zeroize::Zeroizing;

/// Bytes of one packet descriptor (`PacketDesc`).
pub const DESC_BYTES: usize = 32;
/// Bytes of one raw key set (`RawKeys`).
pub const RAW_KEY_BYTES: usize = 80;
/// Bytes of one expanded key slot on the device (`SRTP_KEY_SLOT_BYTES`).
pub const KEY_SLOT_BYTES: usize = 1024;
/// 32-bit words of the tables buffer (`SRTP_TABLE_WORDS`): the four AES T-tables and the
/// GHASH reduction constants.
pub const TABLE_WORDS: usize = 4 * 256 + 16;
/// Room after each packet's input: the longest tag (GCM's 16 bytes) and SRTCP's E‖index word.
pub const TAG_ROOM: usize = 20;
/// Packets start on 16-byte boundaries in the data area.
pub const ALIGN: usize = 16;

/// `PacketDesc.status` once the kernel has done a packet.
pub const STATUS_DONE: u8 = 1;
/// `PacketDesc.status` for an unprotect whose tag did not verify (nothing was written).
pub const STATUS_AUTH_FAILED: u8 = 2;
/// Byte offset of `status` in a descriptor.
const STATUS_AT: usize = 14;

/// Where a chunk of `packets` packets' data starts in its staging: after the descriptors,
/// aligned (the engine fills and reads a chunk with the same figure).
pub fn data_at(packets: usize) -> usize {
    (packets * DESC_BYTES).next_multiple_of(ALIGN)
}

/// The bytes a packet of input length `len` takes in the data area.
pub fn packet_room(len: usize) -> usize {
    (len + TAG_ROOM).next_multiple_of(ALIGN)
}

/// A packet begun for the device: SRTP or SRTCP.
#[derive(Debug, Clone, Copy)]
pub enum Work {
    /// An RTP packet.
    Rtp(OffloadRtp),
    /// An RTCP packet.
    Rtcp(OffloadRtcp),
}

impl Work {
    /// Whether it is a protect.
    pub fn is_protect(&self) -> bool {
        match self {
            Work::Rtp(j) => j.is_protect(),
            Work::Rtcp(j) => j.is_protect(),
        }
    }
    /// The input's length.
    pub fn len(&self) -> usize {
        match self {
            Work::Rtp(j) => j.len(),
            Work::Rtcp(j) => j.len(),
        }
    }
    /// Whether the input is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The output's length once the crypto succeeds.
    pub fn output_len(&self) -> usize {
        match self {
            Work::Rtp(j) => j.output_len(),
            Work::Rtcp(j) => j.output_len(),
        }
    }
    /// Where the encrypted part starts: the RTP header's end, or SRTCP's 8 bytes.
    pub fn header_len(&self) -> usize {
        match self {
            Work::Rtp(j) => j.header_len(),
            Work::Rtcp(_) => 8,
        }
    }
    /// The name of the key set its crypto uses.
    pub fn key_set(&self) -> u64 {
        match self {
            Work::Rtp(j) => j.key_set(),
            Work::Rtcp(j) => j.key_set(),
        }
    }
    /// Its raw keys, from its context.
    pub fn keys<'c>(&self, ctx: &'c Context) -> Option<RtpKeyMaterial<'c>> {
        match self {
            Work::Rtp(j) => ctx.offload_rtp_keys(j),
            Work::Rtcp(j) => ctx.offload_rtcp_keys(j),
        }
    }
    /// Its crypto on the CPU (the context's provider).
    pub fn crypto_on_cpu(&self, ctx: &Context, buf: &mut [u8]) -> Result<usize, Error> {
        match self {
            Work::Rtp(j) => ctx.offload_rtp_crypto(j, buf),
            Work::Rtcp(j) => ctx.offload_rtcp_crypto(j, buf),
        }
    }
    /// The commit of an unprotect that authenticated.
    pub fn commit(&self, ctx: &mut Context) -> Result<(), Error> {
        match self {
            Work::Rtp(j) => ctx.offload_unprotect_rtp_commit(j),
            Work::Rtcp(j) => ctx.offload_unprotect_rtcp_commit(j),
        }
    }
    /// Whether the kernels can take it: the descriptor's lengths are 16-bit.
    pub fn fits(&self) -> bool {
        self.len() <= u16::MAX as usize
    }
}

/// What [`put_desc`] wrote of a descriptor's placing: the packet's offset in the data area, its
/// key slot, its length and its header's length.
pub fn desc_place(d: &[u8]) -> (usize, usize, usize, usize) {
    let u32_at = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]) as usize;
    let u16_at = |i: usize| u16::from_le_bytes([d[i], d[i + 1]]) as usize;
    (u32_at(0), u32_at(4), u16_at(8), u16_at(10))
}

/// Writes the descriptor of `work`'s packet, at `offset` in the data area, keyed by `slot`.
/// The status byte starts at zero: a packet the kernel never reached reads as not done.
pub fn put_desc(out: &mut [u8], work: &Work, offset: u32, slot: u32) {
    let d = &mut out[..DESC_BYTES];
    d[0..4].copy_from_slice(&offset.to_le_bytes());
    d[4..8].copy_from_slice(&slot.to_le_bytes());
    d[8..10].copy_from_slice(&(work.len() as u16).to_le_bytes());
    d[10..12].copy_from_slice(&(work.header_len() as u16).to_le_bytes());
    d[STATUS_AT] = 0;
    d[15] = 0;
    d[26..32].fill(0);
    match work {
        Work::Rtp(j) => {
            d[12] = u8::from(!j.is_protect());
            d[13] = j.tag_len() as u8;
            d[16..20].copy_from_slice(&j.ssrc().to_le_bytes());
            d[20..24].copy_from_slice(&j.roc().to_le_bytes());
            d[24..26].copy_from_slice(&j.seq().to_le_bytes());
        }
        Work::Rtcp(j) => {
            // SRTCP: ops 2 and 3, the E‖index word where SRTP has its ROC.
            d[12] = 2 + u8::from(!j.is_protect());
            d[13] = j.tag_len() as u8;
            d[16..20].copy_from_slice(&j.ssrc().to_le_bytes());
            d[20..24].copy_from_slice(&j.trailer().to_le_bytes());
            d[24..26].fill(0);
        }
    }
}

/// The status the kernel wrote into a descriptor.
pub fn status(desc: &[u8]) -> u8 {
    desc[STATUS_AT]
}

/// A key set in the form `srtp_keys_setup` expands (`RawKeys`), wiped on drop.
pub fn raw_keys(m: &RtpKeyMaterial<'_>) -> Zeroizing<[u8; RAW_KEY_BYTES]> {
    let mut r = Zeroizing::new([0u8; RAW_KEY_BYTES]);
    let enc = m.enc();
    let auth = m.auth();
    r[..enc.len().min(32)].copy_from_slice(&enc[..enc.len().min(32)]);
    r[32..32 + auth.len().min(20)].copy_from_slice(&auth[..auth.len().min(20)]);
    r[52..66].copy_from_slice(m.salt());
    r[66] = if m.profile().encrypts() {
        enc.len() as u8
    } else {
        0
    };
    r[67] = u8::from(m.profile().is_aead());
    r
}

/// Whether the kernels implement this key set's profile: AES-128/256 counter mode or the
/// NULL cipher with HMAC-SHA1, or AES-128/256-GCM (not AES-192, nor f8 mode, whose chained
/// blocks the counter-mode kernel cannot run: those stay on the CPU).
pub fn supported(m: &RtpKeyMaterial<'_>) -> bool {
    let enc_ok =
        !m.profile().encrypts() || (!m.profile().is_f8() && matches!(m.enc().len(), 16 | 32));
    let auth_ok = m.profile().is_aead() || m.auth().len() == 20;
    enc_ok && auth_ok
}
