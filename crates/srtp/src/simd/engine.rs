//! The multi-buffer batch engine: the crypto of many packets computed side by side — HMAC-SHA1
//! tags in SIMD lanes ([`super::hmac_sha1_mb`] over [`super::sha1_x16`]), AES-CM keystreams
//! ([`super::aes_ctr`]) and AES-GCM ([`super::gcm`]) with VAES and VPCLMULQDQ.
//!
//! # What runs where
//! Protecting and unprotecting an RTP packet is split in three, with one code path shared
//! with the scalar [`Context`] methods:
//! 1. *begin*, in batch order, on the context: header, stream, index estimate, replay check
//!    (protect also moves the stream on here: its crypto cannot fail);
//! 2. the crypto of a group of packets at once:
//!    - HMAC-SHA1 profiles (AES-CM 128/256 with 80- or 32-bit tags, NULL with an 80-bit tag):
//!      protect encrypts every packet in the AES kernel, then computes every tag in the lanes
//!      and appends it; unprotect computes every tag in the lanes, compares each in constant
//!      time, and decrypts only the packets whose tag matched;
//!    - AES-GCM profiles: the GCM kernel seals, or opens (tag checked in constant time,
//!      decryption only of what verified);
//! 3. *commit* (unprotect only), in batch order: the stream moves on past a packet that
//!    authenticated, exactly as the scalar path does.
//!
//! SRTCP runs through the scalar code, in batch order.
//!
//! # Why the results are the serial engine's
//! Unprotecting a packet reads the stream's state (index estimate, replay window) that the
//! previous packet of that stream changes only if it authenticates. So while an unprotect of a
//! context is waiting in the group, the next packet of the same context (any stream, any
//! operation: streams made from the template count against the context's limit) first flushes
//! the group. Protect needs no such care: its state moves at *begin*, in order. Batches whose
//! packets come from many contexts (a gateway's, one context per participant) flush only when
//! the group is full; `tests/engine_equivalence.rs` checks bytes and statuses against the
//! serial engine on batches that mix everything.
//!
//! # When it pays
//! The lanes pay once enough packets are waiting to fill them; with fewer than
//! [`super::hmac_sha1_mb::MIN_ACTIVE_LANES`] the tags are computed one by one. Without AVX-512
//! the HMAC lanes are independent calls of the scalar compression function (which a core with
//! SHA-NI overlaps), and without VAES/VPCLMULQDQ the AES kernels fall back to AES-NI or to the
//! RustCrypto crates: always correct, faster only where the CPU has the instructions, so
//! [`SimdEngine::new`] sends each kind of packet to the lanes only where they run in AVX-512
//! and otherwise through its context's provider (the serial engine's path).

use std::cell::RefCell;
use std::sync::Arc;

use super::aes_ctr::{self, AesKey, Streams};
use super::gcm::{open_many, seal_many, OpenJob, SealJob};
use super::hmac_sha1_mb::{hmac_sha1_many_by, HmacJob};
use crate::batch::{
    check_results_len, process_on, process_one, Contexts, Engine, Op, Packet, PacketResult,
};
use crate::context::{cm_iv, gcm_rtp_iv, CmRtpKeys, Context, Keys, Lanes, RtpSpan};
use crate::error::Error;
use crate::provider::tags_equal;

/// Packets held for one group of lane crypto by default.
pub const DEFAULT_GROUP: usize = 64;

/// Batches smaller than this run one packet at a time, as the serial engine does: `lab srtp`
/// measured the lanes at 0.64× the serial engine for one packet and 0.69× for four (AES-CM),
/// and 1.68× from sixteen.
pub const SERIAL_BELOW: usize = 8;

/// Whether AES-GCM goes to the GCM kernel by default where the CPU runs it
/// ([`super::gcm::accelerated`]: AVX-512, VAES, VPCLMULQDQ), where it was measured faster than
/// the default provider's AES-GCM (aws-lc) one packet at a time (`cargo bench --bench engines`;
/// docs/benchmarks.md). On other CPUs the kernel's fallback is RustCrypto's `aes-gcm` one
/// packet at a time, slower than the provider's, so AEAD packets go to the provider there.
pub const DEFAULT_GCM_KERNEL: bool = true;

/// The multi-buffer engine (see the module docs).
#[derive(Debug, Clone)]
pub struct SimdEngine {
    group: usize,
    lanes: LanesOn,
}

impl Default for SimdEngine {
    fn default() -> Self {
        SimdEngine::new()
    }
}

impl SimdEngine {
    /// Groups of [`DEFAULT_GROUP`] packets, each kind of packet where it runs fastest on this
    /// CPU: HMAC-SHA1 profiles in the lanes where they run in AVX-512 ([`Self::accelerated`]),
    /// AES-GCM on the GCM kernel where the CPU runs it ([`DEFAULT_GCM_KERNEL`]), everything
    /// else through its context's provider one packet at a time, in batch order.
    ///
    /// Without AVX-512 the lanes were measured slower than the provider (aws-lc) for all but
    /// the shortest packets (`cargo bench --bench engines`, batches of 64, on an AMD EPYC core
    /// with AES-NI, SHA-NI and VAES but no AVX-512: AES-CM-80 in the lanes 1.3× the serial
    /// engine's time at 1,200 bytes, 1.7× for a mix of video sizes, 1.0× at 100–172 bytes;
    /// AES-GCM's fallback 1.1× at 100 bytes to 1.8× for video), so there the engine runs the
    /// serial engine's path with the batch's cache hints.
    pub fn new() -> Self {
        SimdEngine {
            group: DEFAULT_GROUP,
            lanes: LanesOn {
                cm: Self::accelerated(),
                gcm: DEFAULT_GCM_KERNEL && super::gcm::accelerated(),
            },
        }
    }

    /// Every packet the lanes or the GCM kernel take, whatever the CPU (what the tests check
    /// against the serial engine and the lab measures as the lanes).
    pub fn all_lanes() -> Self {
        SimdEngine::new().with_cm_lanes(true).with_gcm_kernel(true)
    }

    /// Whether HMAC-SHA1 profiles' packets go to the lanes (`true`), whatever the CPU, or
    /// through the provider one by one, in batch order (`false`). Default: where the lanes
    /// run in AVX-512 ([`Self::new`]). The tests and the lab turn them on to check and measure
    /// the lanes on any CPU.
    pub fn with_cm_lanes(mut self, on: bool) -> Self {
        self.lanes.cm = on;
        self
    }

    /// Groups of `packets` packets at most (at least 1): larger groups fill the lanes better,
    /// smaller ones keep the group's buffers in the first-level cache.
    pub fn with_group(mut self, packets: usize) -> Self {
        self.group = packets.max(1);
        self
    }

    /// Whether AES-GCM packets go to the multi-buffer GCM kernel (`true`) or through the
    /// scalar provider one by one, in batch order (`false`). Default: where the CPU runs it
    /// ([`DEFAULT_GCM_KERNEL`]).
    pub fn with_gcm_kernel(mut self, on: bool) -> Self {
        self.lanes.gcm = on;
        self
    }

    /// Whether this CPU runs the lanes in SIMD (AVX-512); otherwise the lanes are correct but
    /// slower than the provider, and [`Self::new`] leaves them off.
    pub fn accelerated() -> bool {
        super::sha1_x16::accelerated()
    }
}

/// Which kinds of packet an engine sends to the lanes.
#[derive(Debug, Clone, Copy)]
struct LanesOn {
    /// HMAC-SHA1 profiles.
    cm: bool,
    /// AES-GCM profiles (the GCM kernel).
    gcm: bool,
}

impl LanesOn {
    /// Neither kind.
    const NONE: LanesOn = LanesOn {
        cm: false,
        gcm: false,
    };

    /// Whether packets of an AEAD profile (`aead`), or else of an HMAC-SHA1 one, go to the
    /// lanes.
    fn take(self, aead: bool) -> bool {
        if aead {
            self.gcm
        } else {
            self.cm
        }
    }
}

/// A packet whose crypto waits for the group.
struct Waiting {
    packet: usize,
    context: usize,
    span: RtpSpan,
    /// The packet's stream has keys of its own (else it uses its context's master keys).
    own_keys: bool,
    protect: bool,
    /// An AEAD profile (AES-GCM): sealed or opened in the GCM kernel.
    aead: bool,
    roc: [u8; 4],
    /// Unprotect: the tag matched.
    authentic: bool,
}

impl Waiting {
    /// The packet's keys, found again in its context (cheaper than holding a reference count
    /// per packet).
    fn keys<'c, C: Contexts + ?Sized>(&self, contexts: &'c C) -> Option<&'c Keys> {
        contexts
            .get(self.context)?
            .rtp_keys_for(self.span.ssrc, self.own_keys)
    }

    /// The encrypted part of the packet: header to tag (protect: the input's end).
    fn payload(&self) -> core::ops::Range<usize> {
        let end = if self.protect {
            self.span.len
        } else {
            self.span.len - self.span.tag_len
        };
        self.span.hdr..end
    }
}

/// The keystreams of the selected waiting packets, as the AES kernel takes them.
struct Keystreams<'s, 'p> {
    /// Per waiting packet, its HMAC-SHA1 profile keys (found once per flush).
    keys: &'s [Option<CmRtpKeys<'s>>],
    waiting: &'s [Waiting],
    /// Indices into `waiting` of the packets to encrypt or decrypt (each has an AES key).
    selected: &'s [u32],
    packets: &'s mut [Packet<'p>],
}

impl<'s> Keystreams<'s, '_> {
    fn waiting(&self, i: usize) -> &'s Waiting {
        &self.waiting[self.selected[i] as usize]
    }

    fn cm_keys(&self, i: usize) -> Option<CmRtpKeys<'s>> {
        *self.keys.get(self.selected[i] as usize)?
    }
}

impl<'s> Streams<'s> for Keystreams<'s, '_> {
    fn count(&self) -> usize {
        self.selected.len()
    }
    fn key(&self, i: usize) -> &'s AesKey {
        match self.cm_keys(i).and_then(|k| k.ctr) {
            Some(k) => k,
            None => unreachable!("only packets with an AES key are selected"),
        }
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        let w = self.waiting(i);
        let salt = match self.cm_keys(i) {
            Some(k) => k.salt,
            None => unreachable!("only packets with AES-CM keys are selected"),
        };
        (cm_iv(salt, w.span.ssrc, w.span.index), false)
    }
    fn len(&self, i: usize) -> usize {
        self.waiting(i).payload().len()
    }
    fn has_mask(&self, _: usize) -> bool {
        false
    }
    fn bufs(&mut self, i: usize) -> (Option<&mut [u8; 16]>, &mut [u8]) {
        let w = self.waiting(i);
        (None, &mut self.packets[w.packet].buf[w.payload()])
    }
}

/// Encrypts (protect) or decrypts (authentic unprotect) the selected packets' payloads in
/// the multi-buffer AES kernel.
fn keystreams<'s>(
    keys: &'s [Option<CmRtpKeys<'s>>],
    waiting: &'s [Waiting],
    selected: &mut Vec<u32>,
    packets: &mut [Packet<'_>],
    pick: impl Fn(&Waiting) -> bool,
) {
    selected.clear();
    selected.extend(
        waiting
            .iter()
            .enumerate()
            .filter(|(i, w)| {
                pick(w)
                    && keys
                        .get(*i)
                        .is_some_and(|k| k.is_some_and(|k| k.ctr.is_some()))
            })
            .map(|(i, _)| i as u32),
    );
    if selected.is_empty() {
        return;
    }
    let mut streams = Keystreams {
        keys,
        waiting,
        selected,
        packets,
    };
    aes_ctr::run(&mut streams, aes_ctr::backend());
}

/// Per-thread scratch, kept between batches so that a batch allocates nothing once warm.
#[derive(Default)]
struct Scratch {
    waiting: Vec<Waiting>,
    tags: Vec<[u8; 20]>,
    selected: Vec<u32>,
    /// Per waiting packet of a flush, its HMAC-SHA1 profile keys; empty between flushes.
    cm_keys: Vec<Option<CmRtpKeys<'static>>>,
    /// The GCM kernel's job lists, empty between flushes: only their allocations are kept
    /// (see [`recycle`]).
    seal_jobs: Vec<SealJob<'static>>,
    open_jobs: Vec<OpenJob<'static>>,
    opened: Vec<bool>,
    /// `busy[c] == generation` while an unprotect of context `c` waits in the group.
    busy: Vec<u32>,
    generation: u32,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch {
        generation: 1,
        ..Scratch::default()
    });
}

impl Engine for SimdEngine {
    fn name(&self) -> &'static str {
        "simd"
    }

    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        // A slice of a few hundred contexts stays in the caches: no hints.
        let hints = contexts.len() > HINTS_ABOVE_CONTEXTS;
        self.process_generic(contexts, packets, results, hints);
    }

    fn process_in(
        &self,
        contexts: &mut dyn Contexts,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        // A store gathers contexts from wherever they live (a gateway's participants, a
        // threaded lane's share of a large slice): they may be cold however few it holds.
        self.process_generic(contexts, packets, results, true);
    }
}

impl SimdEngine {
    /// A threaded lane's run: its share of a batch's contexts (monomorphised, no `dyn`), with
    /// cache hints only when the slice the contexts came from is too large to stay cached
    /// (`hints`, the rule [`Engine::process`] applies to a whole slice). On contexts that are
    /// cached the hints cost ~14 % per GCM packet (60 → 69 ns).
    pub(crate) fn process_lane(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
        hints: bool,
    ) {
        self.process_generic(contexts, packets, results, hints);
    }

    /// [`Engine::process`] over any [`Contexts`]: a slice (monomorphised, as before) or a
    /// store behind `dyn`.
    fn process_generic<C: Contexts + ?Sized>(
        &self,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
        hints: bool,
    ) {
        check_results_len(packets.len(), results.len());
        if packets.len() < SERIAL_BELOW {
            // Too few to fill the lanes: one by one, as the serial engine does, but with the
            // batch's contexts asked for first.
            if hints && packets.len() > 1 {
                prefetch_all(contexts, packets);
            }
            for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
                *r = process_one(contexts, p);
            }
            return;
        }
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut scratch) => self.run(&mut scratch, contexts, packets, results, hints),
            // Re-entered on this thread (an engine called from inside itself): no scratch to
            // spare, so a fresh one, allocated for this call only.
            Err(_) => self.run(
                &mut Scratch {
                    generation: 1,
                    ..Scratch::default()
                },
                contexts,
                packets,
                results,
                hints,
            ),
        });
    }
}

impl SimdEngine {
    fn run<C: Contexts + ?Sized>(
        &self,
        scratch: &mut Scratch,
        contexts: &mut C,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
        hints: bool,
    ) {
        if scratch.busy.len() < contexts.len() {
            scratch.busy.resize(contexts.len(), 0);
        }
        for pi in 0..packets.len() {
            if hints {
                prefetch_ahead(contexts, packets, pi, self.lanes);
            }
            let ci = packets[pi].context;
            if ci >= contexts.len() {
                results[pi] = Err(Error::UnknownContext);
                continue;
            }
            if scratch.busy[ci] == scratch.generation {
                flush(scratch, contexts, packets, results);
            }
            let Some(ctx) = contexts.get_mut(ci) else {
                results[pi] = Err(Error::UnknownContext);
                continue;
            };
            let p = &mut packets[pi];
            // With its kind's lanes off, a context's lane keys are neither made nor read.
            let lanes = matches!(p.op, Op::ProtectRtp | Op::UnprotectRtp)
                && self.lanes.take(ctx.profile().is_aead())
                && !matches!(ctx.rtp_lanes(), Lanes::None);
            if !lanes {
                results[pi] = process_on(ctx, p);
                continue;
            }
            let protect = p.op == Op::ProtectRtp;
            // Only compared, never dereferenced: whether the stream uses the master keys.
            let master = Arc::as_ptr(ctx.master_keys());
            let begun = if protect {
                ctx.protect_rtp_begin(p.buf, p.len)
            } else {
                ctx.unprotect_rtp_begin(p.buf, p.len)
            };
            match begun {
                Err(e) => results[pi] = Err(e),
                Ok((span, keys)) => {
                    scratch.waiting.push(Waiting {
                        packet: pi,
                        context: ci,
                        span,
                        own_keys: !core::ptr::eq(Arc::as_ptr(keys), master),
                        protect,
                        aead: keys.gcm_rtp().is_some(),
                        roc: span.roc().to_be_bytes(),
                        authentic: false,
                    });
                    if !protect {
                        scratch.busy[ci] = scratch.generation;
                    }
                    if scratch.waiting.len() >= self.group {
                        flush(scratch, contexts, packets, results);
                    }
                }
            }
        }
        flush(scratch, contexts, packets, results);
    }
}

/// A slice of at most this many contexts gets no cache hints ([`Engine::process`]): its
/// contexts stay in the caches between batches (a few hundred contexts take a few hundred KiB),
/// and the hints would only cost instructions (~5–10 % of a 64-context batch, measured with
/// `examples/many_contexts.rs`). Stores ([`Engine::process_in`]) always get them.
pub const HINTS_ABOVE_CONTEXTS: usize = 256;

/// How many packets ahead of the one being taken [`prefetch_ahead`] starts loading a packet's
/// header and its context, then the context's keys and first stream, then the rest.
const PREFETCH_AHEAD: [usize; 3] = [12, 6, 3];

/// Starts loading what the packets a few places after `pi` will need, so that the misses of
/// several packets overlap instead of each packet waiting for its own: with thousands of
/// contexts (a gateway's) they no longer fit in the caches, and each packet's chain of
/// context → stream → keys would otherwise cost a few hundred nanoseconds. Each stage reads
/// only lines an earlier stage asked for.
///
/// `lanes`: which kinds of packet go to the lanes (their lane keys are loaded then, else the
/// provider's).
#[inline]
fn prefetch_ahead<C: Contexts + ?Sized>(
    contexts: &C,
    packets: &[Packet<'_>],
    pi: usize,
    lanes: LanesOn,
) {
    for (stage, ahead) in PREFETCH_AHEAD.into_iter().enumerate() {
        if let Some(p) = packets.get(pi + ahead) {
            prefetch_stage(contexts, p, stage, lanes);
        }
    }
}

/// A batch too small for the lanes: each stage of [`prefetch_ahead`] over the whole batch
/// before the next, so the batch waits about once per stage rather than once per packet.
fn prefetch_all<C: Contexts + ?Sized>(contexts: &C, packets: &[Packet<'_>]) {
    for stage in 0..PREFETCH_AHEAD.len() {
        for p in packets {
            prefetch_stage(contexts, p, stage, LanesOn::NONE);
        }
    }
}

/// One stage of the cache hints for packet `p`: 0, its header and context; 1, the context's
/// keys and first stream; 2, the rest of the packet, the stream's replay window and the keys
/// (in multi-buffer form where `lanes` takes the context's kind of profile; else the
/// provider's).
#[inline]
fn prefetch_stage<C: Contexts + ?Sized>(
    contexts: &C,
    p: &Packet<'_>,
    stage: usize,
    lanes: LanesOn,
) {
    use super::prefetch;
    let rtp = matches!(p.op, Op::ProtectRtp | Op::UnprotectRtp);
    match stage {
        0 => {
            prefetch::line(p.buf.as_ptr());
            if let Some(c) = contexts.get(p.context) {
                prefetch::value(c, 3);
            }
        }
        1 => {
            if let (true, Some(c)) = (rtp, contexts.get(p.context)) {
                c.prefetch_rtp_stream();
            }
        }
        _ => {
            let len = p.len.min(p.buf.len());
            prefetch::prefetch_bytes(p.buf.as_ptr(), len, 4);
            if let (true, Some(b), Some(c)) = (rtp, p.buf.get(8..12), contexts.get(p.context)) {
                let lanes = lanes.take(c.profile().is_aead());
                c.prefetch_rtp_keys(u32::from_be_bytes([b[0], b[1], b[2], b[3]]), len, lanes);
            }
        }
    }
}

/// Runs the crypto of every waiting packet, then commits the unprotected ones in order.
fn flush<C: Contexts + ?Sized>(
    scratch: &mut Scratch,
    contexts: &mut C,
    packets: &mut [Packet<'_>],
    results: &mut [PacketResult],
) {
    let Scratch {
        waiting,
        tags,
        selected,
        cm_keys,
        seal_jobs,
        open_jobs,
        opened,
        busy,
        generation,
    } = scratch;
    if waiting.is_empty() {
        return;
    }
    // AEAD: seal, or open (checking the tag, decrypting only what verifies), in the GCM kernel.
    aead_group(
        contexts, waiting, packets, selected, seal_jobs, open_jobs, opened,
    );
    if waiting.iter().any(|w| !w.aead) {
        // Each packet's keys, found once for the group's three passes.
        let mut keys: Vec<Option<CmRtpKeys<'_>>> = recycle(core::mem::take(cm_keys));
        keys.extend(
            waiting
                .iter()
                .map(|w| w.keys(contexts).and_then(|k| k.cm_rtp())),
        );
        hmac_group(&keys, waiting, packets, selected, tags);
        *cm_keys = recycle(keys);
    }
    for w in waiting.iter() {
        let RtpSpan { len, tag_len, .. } = w.span;
        results[w.packet] = if w.protect {
            Ok(len + tag_len)
        } else if w.authentic {
            match contexts.get_mut(w.context) {
                Some(ctx) => ctx.unprotect_rtp_commit(&w.span).map(|()| len - tag_len),
                // Checked when the packet was taken: the store does not shrink mid-batch.
                None => Err(Error::UnknownContext),
            }
        } else {
            Err(Error::AuthFailed)
        };
    }
    waiting.clear();
    *generation = generation.wrapping_add(1);
    if *generation == 0 {
        busy.fill(0);
        *generation = 1;
    }
}

/// The HMAC-SHA1 profiles' part of a group: protect encrypts then tags; unprotect tags,
/// compares and decrypts what authenticated.
fn hmac_group(
    keys: &[Option<CmRtpKeys<'_>>],
    waiting: &mut [Waiting],
    packets: &mut [Packet<'_>],
    selected: &mut Vec<u32>,
    tags: &mut Vec<[u8; 20]>,
) {
    // Protect: encrypt first (the tag covers the ciphertext).
    keystreams(keys, waiting, selected, packets, |w| w.protect);
    // Every tag, in the lanes: over the packet as sent (protect: all of it; unprotect: all
    // but the received tag), followed by the ROC.
    if tags.len() < waiting.len() {
        tags.resize(waiting.len(), [0; 20]);
    }
    {
        let (waiting, packets) = (&*waiting, &*packets);
        hmac_sha1_many_by(
            waiting.len(),
            |i| {
                let w = &waiting[i];
                Some(HmacJob {
                    key: (*keys.get(i)?)?.auth,
                    a: &packets[w.packet].buf[..w.payload().end],
                    b: &w.roc,
                })
            },
            tags,
        );
    }
    // Protect: append the tag. Unprotect: compare it (constant time).
    for (i, (w, tag)) in waiting.iter_mut().zip(tags.iter()).enumerate() {
        if w.aead {
            continue;
        }
        let RtpSpan { len, tag_len, .. } = w.span;
        let buf = &mut *packets[w.packet].buf;
        if w.protect {
            buf[len..len + tag_len].copy_from_slice(&tag[..tag_len]);
        } else {
            w.authentic = keys.get(i).is_some_and(Option::is_some)
                && tags_equal(&tag[..tag_len], &buf[len - tag_len..len]);
        }
    }
    // Unprotect: decrypt only what authenticated.
    keystreams(keys, waiting, selected, packets, |w| {
        !w.protect && w.authentic
    });
}

/// Takes a job list's allocation over to a list of another lifetime (an empty `Vec` collected
/// in place keeps its buffer: no allocation once the scratch is warm, `tests/no_alloc.rs`).
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// Seals the group's AEAD protects and opens its AEAD unprotects in the GCM kernel, marking
/// each unprotect authentic or not.
fn aead_group<C: Contexts + ?Sized>(
    contexts: &C,
    waiting: &mut [Waiting],
    packets: &mut [Packet<'_>],
    opens: &mut Vec<u32>,
    seal_jobs: &mut Vec<SealJob<'static>>,
    open_jobs: &mut Vec<OpenJob<'static>>,
    opened: &mut Vec<bool>,
) {
    let Some(first) = waiting.iter().position(|w| w.aead) else {
        return;
    };
    let mut seals: Vec<SealJob<'_>> = recycle(core::mem::take(seal_jobs));
    let mut open: Vec<OpenJob<'_>> = recycle(core::mem::take(open_jobs));
    opens.clear();
    {
        // Waiting packets are in batch order: one walk over the group's span of the batch
        // lends each its buffer.
        let lo = waiting[first].packet;
        let mut todo = waiting
            .iter()
            .enumerate()
            .skip(first)
            .filter(|(_, w)| w.aead)
            .peekable();
        for (pi, p) in packets.iter_mut().enumerate().skip(lo) {
            let Some(&(wi, w)) = todo.peek() else { break };
            if w.packet != pi {
                continue;
            }
            todo.next();
            let Some((key, salt)) = w.keys(contexts).and_then(|k| k.gcm_rtp()) else {
                continue;
            };
            let RtpSpan {
                hdr,
                len,
                ssrc,
                seq,
                tag_len,
                ..
            } = w.span;
            let nonce = gcm_rtp_iv(salt, ssrc, w.span.roc(), seq);
            let (aad, rest) = p.buf.split_at_mut(hdr);
            if w.protect {
                let (data, tail) = rest.split_at_mut(len - hdr);
                if let Some(tag) = tail.first_chunk_mut::<16>() {
                    seals.push(SealJob {
                        key,
                        nonce,
                        aad,
                        data,
                        tag,
                    });
                }
            } else {
                let (data, tail) = rest[..len - hdr].split_at_mut(len - hdr - tag_len);
                if let Some(tag) = tail.first_chunk::<16>() {
                    open.push(OpenJob {
                        key,
                        nonce,
                        aad,
                        data,
                        tag,
                    });
                    opens.push(wi as u32);
                }
            }
        }
    }
    seal_many(&mut seals);
    opened.clear();
    opened.resize(open.len(), false);
    open_many(&mut open, opened);
    *seal_jobs = recycle(seals);
    *open_jobs = recycle(open);
    for (&wi, &ok) in opens.iter().zip(opened.iter()) {
        waiting[wi as usize].authentic = ok;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults send each kind of packet to the lanes only where the CPU runs them in
    /// AVX-512 (elsewhere they measured slower than the provider); `all_lanes` forces both.
    #[test]
    fn defaults_use_the_lanes_only_where_the_cpu_runs_them() {
        let e = SimdEngine::new();
        assert_eq!(e.lanes.cm, SimdEngine::accelerated());
        assert_eq!(
            e.lanes.gcm,
            DEFAULT_GCM_KERNEL && super::super::gcm::accelerated()
        );
        let all = SimdEngine::all_lanes();
        assert!(all.lanes.cm && all.lanes.gcm);
        assert!(!SimdEngine::all_lanes().with_cm_lanes(false).lanes.cm);
    }
}
