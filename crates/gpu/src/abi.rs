//! The layout the kernels (`kernels/srtp.cu`) and the host agree on: per-packet descriptors,
//! raw key sets, the sizes of the key slots and tables. Everything is written and read as
//! little-endian bytes, so no Rust struct is handed to the device as memory.

use secrelay_srtp::offload::{OffloadRtp, RtpKeyMaterial};
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
/// Room after each packet's input: the longest tag (GCM's 16 bytes).
pub const TAG_ROOM: usize = 16;
/// Packets start on 16-byte boundaries in the data area.
pub const ALIGN: usize = 16;

/// `PacketDesc.status` once the kernel has done a packet.
pub const STATUS_DONE: u8 = 1;
/// `PacketDesc.status` for an unprotect whose tag did not verify (nothing was written).
pub const STATUS_AUTH_FAILED: u8 = 2;
/// Byte offset of `status` in a descriptor.
const STATUS_AT: usize = 14;

/// The bytes a packet of input length `len` takes in the data area.
pub fn packet_room(len: usize) -> usize {
    (len + TAG_ROOM).next_multiple_of(ALIGN)
}

/// Whether the kernels can take a packet of this length (the descriptor's lengths are 16-bit).
pub fn fits(job: &OffloadRtp) -> bool {
    job.len() <= u16::MAX as usize
}

/// Writes the descriptor of `job`'s packet, at `offset` in the data area, keyed by `slot`.
/// The status byte starts at zero: a packet the kernel never reached reads as not done.
pub fn put_desc(out: &mut [u8], job: &OffloadRtp, offset: u32, slot: u32) {
    let d = &mut out[..DESC_BYTES];
    d[0..4].copy_from_slice(&offset.to_le_bytes());
    d[4..8].copy_from_slice(&slot.to_le_bytes());
    d[8..10].copy_from_slice(&(job.len() as u16).to_le_bytes());
    d[10..12].copy_from_slice(&(job.header_len() as u16).to_le_bytes());
    d[12] = u8::from(!job.is_protect());
    d[13] = job.tag_len() as u8;
    d[STATUS_AT] = 0;
    d[15] = 0;
    d[16..20].copy_from_slice(&job.ssrc().to_le_bytes());
    d[20..24].copy_from_slice(&job.roc().to_le_bytes());
    d[24..26].copy_from_slice(&job.seq().to_le_bytes());
    d[26..32].fill(0);
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
/// NULL cipher with HMAC-SHA1, or AES-128/256-GCM.
pub fn supported(m: &RtpKeyMaterial<'_>) -> bool {
    let enc_ok = !m.profile().encrypts() || matches!(m.enc().len(), 16 | 32);
    let auth_ok = m.profile().is_aead() || m.auth().len() == 20;
    enc_ok && auth_ok
}
