//! Hooks for batch engines outside this crate that do the crypto of SRTP packets somewhere
//! else (a GPU: `secrelay-srtp-gpu`).
//!
//! Protecting or unprotecting an RTP packet is split as the multi-buffer engine splits it
//! ([`crate::SimdEngine`]), and through the same code as [`Context::protect_rtp`] and
//! [`Context::unprotect_rtp`]:
//! 1. *begin*, on the context, in batch order ([`Context::offload_protect_rtp_begin`],
//!    [`Context::offload_unprotect_rtp_begin`]): the header, the stream, the index estimate
//!    and the replay check. Protect moves the stream on here (its crypto cannot fail);
//!    unprotect changes nothing. The result, an [`OffloadRtp`], says where the crypto works
//!    in the packet (header length, tag length), with what IV inputs (SSRC, ROC, sequence
//!    number) and under which key set ([`OffloadRtp::key_set`]).
//! 2. the crypto, elsewhere. The key set's raw session keys ([`Context::offload_rtp_keys`])
//!    are copied to the device once per key set, not per packet: [`OffloadRtp::key_set`] is
//!    unique for the life of the process, so a cache keyed by it never confuses two key sets.
//!    [`Context::offload_rtp_crypto`] does the same crypto on the CPU, through the context's
//!    provider: for packets the device cannot take, or when the device fails.
//! 3. *commit*, unprotect only, in batch order, for a packet that authenticated
//!    ([`Context::offload_unprotect_rtp_commit`]): the stream moves on past it.
//!
//! An engine that has an unprotect of a context waiting for its crypto must not begin
//! another packet of that context before committing it (the begin reads the state the
//! commit changes): the engine keeps each context's packets in order.
//!
//! SRTCP has the same three steps ([`OffloadRtcp`]): protect takes the next SRTCP index at
//! begin; unprotect checks the E‖index word against the replay window at begin and moves the
//! window at commit. Its keys are a key set of their own ([`OffloadRtcp::key_set`]: the RTP
//! keys' name + 1).

use crate::context::{
    protect_rtcp_with, protect_rtp_with, unprotect_rtcp_with, unprotect_rtp_with, Context, Keys,
    RtcpSpan, RtpSpan,
};
use crate::error::Error;
use crate::profile::Profile;

/// One RTP packet begun for offloaded crypto: where the crypto works and with what.
#[derive(Debug, Clone, Copy)]
pub struct OffloadRtp {
    span: RtpSpan,
    protect: bool,
    /// The stream has keys of its own (else its context's master keys).
    own_keys: bool,
    key_set: u64,
}

impl OffloadRtp {
    /// Whether this is a protect (else an unprotect).
    pub fn is_protect(&self) -> bool {
        self.protect
    }
    /// The RTP header's length: the crypto encrypts from here.
    pub fn header_len(&self) -> usize {
        self.span.hdr
    }
    /// The input's length (RTP for protect, SRTP for unprotect).
    pub fn len(&self) -> usize {
        self.span.len
    }
    /// Whether the input is empty (never: an RTP header is 12 bytes at least).
    pub fn is_empty(&self) -> bool {
        self.span.len == 0
    }
    /// The tag's length: appended by protect, at the end of the input for unprotect.
    pub fn tag_len(&self) -> usize {
        self.span.tag_len
    }
    /// The output's length once the crypto succeeds.
    pub fn output_len(&self) -> usize {
        if self.protect {
            self.span.len + self.span.tag_len
        } else {
            self.span.len - self.span.tag_len
        }
    }
    /// The packet's SSRC.
    pub fn ssrc(&self) -> u32 {
        self.span.ssrc
    }
    /// The packet's sequence number.
    pub fn seq(&self) -> u16 {
        self.span.seq
    }
    /// The rollover counter estimated for the packet (authenticated, and in the IV).
    pub fn roc(&self) -> u32 {
        self.span.roc()
    }
    /// The packet's extended index, ROC ‖ SEQ.
    pub fn index(&self) -> u64 {
        self.span.index
    }
    /// The key set the crypto uses: unique for the life of the process (never reused, even
    /// after the context is dropped).
    pub fn key_set(&self) -> u64 {
        self.key_set
    }
}

/// One SRTCP packet begun for offloaded crypto: where the crypto works and with what.
#[derive(Debug, Clone, Copy)]
pub struct OffloadRtcp {
    span: RtcpSpan,
    protect: bool,
    own_keys: bool,
    key_set: u64,
}

impl OffloadRtcp {
    /// Whether this is a protect (else an unprotect).
    pub fn is_protect(&self) -> bool {
        self.protect
    }
    /// The input's length (RTCP for protect, SRTCP for unprotect).
    pub fn len(&self) -> usize {
        self.span.len
    }
    /// Whether the input is empty (never: an RTCP header is 8 bytes).
    pub fn is_empty(&self) -> bool {
        self.span.len == 0
    }
    /// The SRTCP tag's length.
    pub fn tag_len(&self) -> usize {
        self.span.tag_len
    }
    /// The output's length once the crypto succeeds: protect adds the E‖index word and the
    /// tag, unprotect takes them off.
    pub fn output_len(&self) -> usize {
        if self.protect {
            self.span.len + 4 + self.span.tag_len
        } else {
            self.span.len - 4 - self.span.tag_len
        }
    }
    /// The packet's SSRC (its first report's sender).
    pub fn ssrc(&self) -> u32 {
        self.span.ssrc
    }
    /// The E‖SRTCP index word, as sent (E, the top bit: the payload is encrypted).
    pub fn trailer(&self) -> u32 {
        self.span.trailer
    }
    /// The SRTCP keys' name: unique for the life of the process, never the RTP keys' name.
    pub fn key_set(&self) -> u64 {
        self.key_set
    }
}

/// An offload engine's note, kept on the context, of where one of its key sets lives on the
/// engine's device (a key slot): the engine finds it with the packet it is beginning, in the
/// context it already touches, instead of in a table shared by its host threads. The note
/// names the key set and the engine's own `owner` tag (unique to an engine and to each
/// filling of its slots); it answers only to both, so a note left by another engine, by an
/// earlier filling of the slots or for keys since replaced is never taken for a slot.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OffloadNote {
    key_set: u64,
    owner: u64,
    slot: u32,
}

/// The raw session keys of a key set (RTP's or SRTCP's), borrowed from the context, for an
/// engine to copy to its device. Never printed: `Debug` shows the profile only.
#[derive(Clone, Copy)]
pub struct RtpKeyMaterial<'a> {
    profile: Profile,
    enc: &'a [u8],
    auth: &'a [u8],
    salt: &'a [u8; 14],
}

impl core::fmt::Debug for RtpKeyMaterial<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RtpKeyMaterial")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl<'a> RtpKeyMaterial<'a> {
    /// The profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }
    /// The encryption key (16 or 32 bytes; empty for the NULL cipher).
    pub fn enc(&self) -> &'a [u8] {
        self.enc
    }
    /// The HMAC-SHA1 key (20 bytes; empty for AEAD profiles).
    pub fn auth(&self) -> &'a [u8] {
        self.auth
    }
    /// The session salt: 14 bytes, of which AEAD profiles use the first 12.
    pub fn salt(&self) -> &'a [u8; 14] {
        self.salt
    }
}

impl Context {
    /// Step 1 of an offloaded protect (see the [module docs](crate::offload)): everything
    /// [`Context::protect_rtp`] does before its crypto, which moves the stream on.
    pub fn offload_protect_rtp_begin(
        &mut self,
        buf: &[u8],
        len: usize,
    ) -> Result<OffloadRtp, Error> {
        let master = std::sync::Arc::as_ptr(self.master_keys());
        let (span, keys) = self.protect_rtp_begin(buf, len)?;
        let (own_keys, key_set) = job_keys(master, keys, false);
        Ok(OffloadRtp {
            span,
            protect: true,
            own_keys,
            key_set,
        })
    }

    /// Step 1 of an offloaded unprotect: everything [`Context::unprotect_rtp`] does before its
    /// crypto; nothing changes.
    pub fn offload_unprotect_rtp_begin(&self, buf: &[u8], len: usize) -> Result<OffloadRtp, Error> {
        let master = std::sync::Arc::as_ptr(self.master_keys());
        let (span, keys) = self.unprotect_rtp_begin(buf, len)?;
        let (own_keys, key_set) = job_keys(master, keys, false);
        Ok(OffloadRtp {
            span,
            protect: false,
            own_keys,
            key_set,
        })
    }

    /// Step 3 of an offloaded unprotect, once `job`'s packet authenticated: the stream moves
    /// on past it (and is made from the template if it is new), as [`Context::unprotect_rtp`]
    /// does.
    pub fn offload_unprotect_rtp_commit(&mut self, job: &OffloadRtp) -> Result<(), Error> {
        self.unprotect_rtp_commit(&job.span)
    }

    /// The slot an offload engine noted for `key_set` under `owner`
    /// ([`Context::set_offload_note`]), if that note is still the context's.
    pub fn offload_note(&self, key_set: u64, owner: u64) -> Option<u32> {
        let n = &self.offload_notes[(key_set & 1) as usize];
        (n.key_set == key_set && n.owner == owner && owner != 0).then_some(n.slot)
    }

    /// Notes that `key_set` is in slot `slot` of the engine whose tag is `owner` (not 0),
    /// replacing the note of the key set's kind (RTP or SRTCP) that was there.
    pub fn set_offload_note(&mut self, key_set: u64, owner: u64, slot: u32) {
        self.offload_notes[(key_set & 1) as usize] = OffloadNote {
            key_set,
            owner,
            slot,
        };
    }

    /// The raw session keys `job`'s crypto uses (`None` only for a context not made by this
    /// crate's constructors, or if `job` came from another context).
    pub fn offload_rtp_keys(&self, job: &OffloadRtp) -> Option<RtpKeyMaterial<'_>> {
        let keys = self.offload_key_set(job.span.ssrc, job.own_keys, false, job.key_set)?;
        Some(self.offload_material(keys.rtp_raw()))
    }

    /// Step 2 on the CPU, through the context's provider, exactly as the one-packet methods do
    /// it: protect writes the SRTP packet into `buf` and returns its length; unprotect checks
    /// the tag in constant time, decrypts only if it matched and returns the RTP length (the
    /// caller then commits). `buf` must be the buffer `job` was begun on.
    pub fn offload_rtp_crypto(&self, job: &OffloadRtp, buf: &mut [u8]) -> Result<usize, Error> {
        let keys = self
            .offload_key_set(job.span.ssrc, job.own_keys, false, job.key_set)
            .ok_or(Error::UnknownContext)?;
        let need = if job.protect {
            job.output_len()
        } else {
            job.len()
        };
        if buf.len() < need {
            return Err(Error::BufferTooSmall { needed: need });
        }
        if job.protect {
            Ok(protect_rtp_with(keys, buf, &job.span))
        } else {
            unprotect_rtp_with(keys, buf, &job.span)
        }
    }
}

impl Context {
    /// Step 1 of an offloaded SRTCP protect: everything [`Context::protect_rtcp`] does before
    /// its crypto, which takes the stream's next SRTCP index.
    pub fn offload_protect_rtcp_begin(
        &mut self,
        buf: &[u8],
        len: usize,
    ) -> Result<OffloadRtcp, Error> {
        let master = std::sync::Arc::as_ptr(self.master_keys());
        let (span, keys) = self.protect_rtcp_begin(buf, len)?;
        let (own_keys, key_set) = job_keys(master, keys, true);
        Ok(OffloadRtcp {
            span,
            protect: true,
            own_keys,
            key_set,
        })
    }

    /// Step 1 of an offloaded SRTCP unprotect: everything [`Context::unprotect_rtcp`] does
    /// before its crypto; nothing changes.
    pub fn offload_unprotect_rtcp_begin(
        &self,
        buf: &[u8],
        len: usize,
    ) -> Result<OffloadRtcp, Error> {
        let master = std::sync::Arc::as_ptr(self.master_keys());
        let (span, keys) = self.unprotect_rtcp_begin(buf, len)?;
        let (own_keys, key_set) = job_keys(master, keys, true);
        Ok(OffloadRtcp {
            span,
            protect: false,
            own_keys,
            key_set,
        })
    }

    /// Step 3 of an offloaded SRTCP unprotect, once it authenticated: the replay window moves
    /// on (the stream is made from the template if it is new).
    pub fn offload_unprotect_rtcp_commit(&mut self, job: &OffloadRtcp) -> Result<(), Error> {
        self.unprotect_rtcp_commit(&job.span)
    }

    /// The raw SRTCP session keys `job`'s crypto uses.
    pub fn offload_rtcp_keys(&self, job: &OffloadRtcp) -> Option<RtpKeyMaterial<'_>> {
        let keys = self.offload_key_set(job.span.ssrc, job.own_keys, true, job.key_set)?;
        Some(self.offload_material(keys.rtcp_raw()))
    }

    /// The keys of the stream a job names (its own, or its context's master keys), if they
    /// are the key set the job was begun with (`rtcp`: named by their SRTCP name).
    fn offload_key_set(&self, ssrc: u32, own: bool, rtcp: bool, name: u64) -> Option<&Keys> {
        self.rtp_keys_for(ssrc, own)
            .filter(|k| k.id() + u64::from(rtcp) == name)
    }

    fn offload_material<'a>(
        &'a self,
        (enc, auth, salt): (&'a [u8], &'a [u8], &'a [u8; 14]),
    ) -> RtpKeyMaterial<'a> {
        RtpKeyMaterial {
            profile: self.profile(),
            enc,
            auth,
            salt,
        }
    }

    /// Step 2 of SRTCP on the CPU, through the context's provider, as the one-packet methods
    /// do it (unprotect: the caller then commits).
    pub fn offload_rtcp_crypto(&self, job: &OffloadRtcp, buf: &mut [u8]) -> Result<usize, Error> {
        let keys = self
            .offload_key_set(job.span.ssrc, job.own_keys, true, job.key_set)
            .ok_or(Error::UnknownContext)?;
        let need = if job.protect {
            job.output_len()
        } else {
            job.len()
        };
        if buf.len() < need {
            return Err(Error::BufferTooSmall { needed: need });
        }
        if job.protect {
            Ok(protect_rtcp_with(keys, buf, &job.span))
        } else {
            unprotect_rtcp_with(keys, buf, &job.span)
        }
    }
}

/// A begun job's key set: whether it is its stream's own (not the context's master keys,
/// `master`, only compared), and its name (the SRTCP keys' is the RTP keys' + 1).
fn job_keys(master: *const Keys, keys: &std::sync::Arc<Keys>, rtcp: bool) -> (bool, u64) {
    (
        !core::ptr::eq(std::sync::Arc::as_ptr(keys), master),
        keys.id() + u64::from(rtcp),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MasterKey, Policy};

    fn pair(p: Profile) -> (Context, Context) {
        let key = MasterKey::new(p, &vec![3; p.key_len()], &vec![4; p.salt_len()]).unwrap();
        (
            Context::new(Policy::new(key.clone()).any_outbound()).unwrap(),
            Context::new(Policy::new(key).any_inbound()).unwrap(),
        )
    }

    fn rtp(seq: u16) -> Vec<u8> {
        let mut b = vec![0u8; 12 + 50 + 16];
        b[0] = 0x80;
        b[2..4].copy_from_slice(&seq.to_be_bytes());
        b[8..12].copy_from_slice(&0xabcdu32.to_be_bytes());
        for (i, x) in b[12..62].iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    #[test]
    fn the_three_steps_give_the_one_packet_methods_bytes() {
        for p in Profile::ALL {
            let (mut tx, mut rx) = pair(p);
            let (mut tx2, mut rx2) = pair(p);
            for seq in [65_534u16, 65_535, 0, 1] {
                let mut a = rtp(seq);
                let n = tx.protect_rtp(&mut a, 62).unwrap();
                let mut b = rtp(seq);
                let job = tx2.offload_protect_rtp_begin(&b, 62).unwrap();
                assert_eq!(job.key_set(), tx2.master_keys().id());
                assert_eq!(job.key_set() % 2, 0, "RTP names are even");
                assert!(tx2.offload_rtp_keys(&job).is_some());
                assert_eq!(tx2.offload_rtp_crypto(&job, &mut b), Ok(n));
                assert_eq!(a, b, "{p}");

                let job = rx2.offload_unprotect_rtp_begin(&b, n).unwrap();
                assert_eq!(job.output_len(), 62);
                let want = rx.unprotect_rtp(&mut a, n).unwrap();
                assert_eq!(rx2.offload_rtp_crypto(&job, &mut b), Ok(want));
                rx2.offload_unprotect_rtp_commit(&job).unwrap();
                assert_eq!(a, b, "{p}");
                assert_eq!(rx.roc(0xabcd), rx2.roc(0xabcd));
            }
        }
    }

    #[test]
    fn key_sets_are_named_apart_and_keys_are_not_printed() {
        let (a, _) = pair(Profile::AesCm128HmacSha1_80);
        let (b, _) = pair(Profile::AesCm128HmacSha1_80);
        assert_ne!(a.master_keys().id(), b.master_keys().id());
        let (mut tx, _) = pair(Profile::AeadAes128Gcm);
        let buf = rtp(1);
        let job = tx.offload_protect_rtp_begin(&buf, 62).unwrap();
        let m = tx.offload_rtp_keys(&job).unwrap();
        assert_eq!((m.enc().len(), m.salt().len()), (16, 14));
        assert!(!format!("{m:?}").contains('3'));
        // A job from one context does not find keys in another.
        assert!(a.offload_rtp_keys(&job).is_none());
    }

    fn rtcp(n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n + 4 + 16];
        b[0] = 0x81;
        b[1] = 200;
        b[4..8].copy_from_slice(&0xabcdu32.to_be_bytes());
        for (i, x) in b[8..n].iter_mut().enumerate() {
            *x = i as u8 ^ 0x5a;
        }
        b
    }

    #[test]
    fn srtcp_in_three_steps_gives_the_one_packet_methods_bytes() {
        for p in Profile::ALL {
            let (mut tx, mut rx) = pair(p);
            let (mut tx2, mut rx2) = pair(p);
            for n in [8usize, 28, 61] {
                let mut a = rtcp(n);
                let out = tx.protect_rtcp(&mut a, n).unwrap();
                let mut b = rtcp(n);
                let job = tx2.offload_protect_rtcp_begin(&b, n).unwrap();
                assert_eq!(job.output_len(), out);
                assert_eq!(job.key_set() % 2, 1, "SRTCP names are odd");
                assert!(tx2.offload_rtcp_keys(&job).is_some());
                assert_eq!(tx2.offload_rtcp_crypto(&job, &mut b), Ok(out));
                assert_eq!(a, b, "{p}");

                let job = rx2.offload_unprotect_rtcp_begin(&b, out).unwrap();
                assert_eq!(
                    job.trailer() & 0x7fff_ffff,
                    tx.rtcp_index(0xabcd).unwrap() - 1
                );
                let want = rx.unprotect_rtcp(&mut a, out).unwrap();
                assert_eq!(rx2.offload_rtcp_crypto(&job, &mut b), Ok(want));
                rx2.offload_unprotect_rtcp_commit(&job).unwrap();
                assert_eq!(a, b, "{p}");
                // Replayed: refused at begin, as by the one-packet method.
                assert_eq!(
                    rx2.offload_unprotect_rtcp_begin(&b, out).err(),
                    Some(Error::ReplayDuplicate)
                );
            }
        }
    }
}
