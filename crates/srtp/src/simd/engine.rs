//! The multi-buffer batch engine: the HMAC-SHA1 tags of many packets computed side by side in
//! SIMD lanes ([`super::hmac_sha1_mb`] over [`super::sha1_x16`]).
//!
//! # What runs where
//! Protecting and unprotecting an RTP packet of an HMAC-SHA1 profile (AES-CM 128/256 with
//! 80- or 32-bit tags, NULL with an 80-bit tag) is split in three, with one code path shared
//! with the scalar [`Context`] methods:
//! 1. *begin*, in batch order, on the context: header, stream, index estimate, replay check
//!    (protect also moves the stream on here: its crypto cannot fail);
//! 2. the crypto of a group of packets at once: protect encrypts each packet, then computes
//!    every tag in the lanes and appends it; unprotect computes every tag in the lanes,
//!    compares each in constant time, and decrypts only the packets whose tag matched;
//! 3. *commit* (unprotect only), in batch order: the stream moves on past a packet that
//!    authenticated, exactly as the scalar path does.
//!
//! Everything else (AEAD profiles, SRTCP) runs through the scalar code in batch order.
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
//! [`super::hmac_sha1_mb::MIN_ACTIVE_LANES`] the tags are computed one by one, as the serial
//! engine would. Without AVX-512 the lanes run lane by lane on the scalar compression function:
//! correct, and no faster than [`crate::SerialEngine`].

use std::cell::RefCell;
use std::sync::Arc;

use super::aes_ctr::{self, AesKey, Streams};
use super::hmac_sha1_mb::{hmac_sha1_many_by, HmacJob};
use crate::batch::{check_results_len, process_on, Engine, Op, Packet, PacketResult};
use crate::context::{cm_iv, Context, Keys, RtpSpan};
use crate::error::Error;
use crate::provider::tags_equal;

/// Packets held for one group of lane crypto by default.
pub const DEFAULT_GROUP: usize = 64;

/// The multi-buffer engine (see the module docs).
#[derive(Debug, Clone)]
pub struct SimdEngine {
    group: usize,
}

impl Default for SimdEngine {
    fn default() -> Self {
        SimdEngine::new()
    }
}

impl SimdEngine {
    /// Groups of [`DEFAULT_GROUP`] packets.
    pub fn new() -> Self {
        SimdEngine {
            group: DEFAULT_GROUP,
        }
    }

    /// Groups of `packets` packets at most (at least 1): larger groups fill the lanes better,
    /// smaller ones keep the group's buffers in the first-level cache.
    pub fn with_group(packets: usize) -> Self {
        SimdEngine {
            group: packets.max(1),
        }
    }

    /// Whether this CPU runs the lanes in SIMD (AVX-512); otherwise the engine is correct but
    /// no faster than the serial one.
    pub fn accelerated() -> bool {
        super::sha1_x16::accelerated()
    }
}

/// A packet whose crypto waits for the group.
struct Waiting {
    packet: usize,
    context: usize,
    span: RtpSpan,
    keys: Arc<Keys>,
    protect: bool,
    roc: [u8; 4],
    /// Unprotect: the tag matched.
    authentic: bool,
}

impl Waiting {
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
    waiting: &'s [Waiting],
    /// Indices into `waiting` of the packets to encrypt or decrypt (each has an AES key).
    selected: &'s [u32],
    packets: &'s mut [Packet<'p>],
}

impl<'s> Keystreams<'s, '_> {
    fn waiting(&self, i: usize) -> &'s Waiting {
        &self.waiting[self.selected[i] as usize]
    }
}

impl<'s> Streams<'s> for Keystreams<'s, '_> {
    fn count(&self) -> usize {
        self.selected.len()
    }
    fn key(&self, i: usize) -> &'s AesKey {
        match self.waiting(i).keys.cm_rtp().and_then(|k| k.ctr) {
            Some(k) => k,
            None => unreachable!("only packets with an AES key are selected"),
        }
    }
    fn counter(&self, i: usize) -> ([u8; 16], bool) {
        let w = self.waiting(i);
        let salt = match w.keys.cm_rtp() {
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
fn keystreams(
    waiting: &[Waiting],
    selected: &mut Vec<u32>,
    packets: &mut [Packet<'_>],
    pick: impl Fn(&Waiting) -> bool,
) {
    selected.clear();
    selected.extend(
        waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| pick(w) && w.keys.cm_rtp().is_some_and(|k| k.ctr.is_some()))
            .map(|(i, _)| i as u32),
    );
    if selected.is_empty() {
        return;
    }
    let mut streams = Keystreams {
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
        check_results_len(packets.len(), results.len());
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut scratch) => self.run(&mut scratch, contexts, packets, results),
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
            ),
        });
    }
}

impl SimdEngine {
    fn run(
        &self,
        scratch: &mut Scratch,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        if scratch.busy.len() < contexts.len() {
            scratch.busy.resize(contexts.len(), 0);
        }
        for pi in 0..packets.len() {
            let ci = packets[pi].context;
            if ci >= contexts.len() {
                results[pi] = Err(Error::UnknownContext);
                continue;
            }
            if scratch.busy[ci] == scratch.generation {
                flush(scratch, contexts, packets, results);
            }
            let ctx = &mut contexts[ci];
            let p = &mut packets[pi];
            let lanes = matches!(p.op, Op::ProtectRtp | Op::UnprotectRtp) && ctx.rtp_in_lanes();
            if !lanes {
                results[pi] = process_on(ctx, p);
                continue;
            }
            let protect = p.op == Op::ProtectRtp;
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
                        keys: keys.clone(),
                        protect,
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

/// Runs the crypto of every waiting packet, then commits the unprotected ones in order.
fn flush(
    scratch: &mut Scratch,
    contexts: &mut [Context],
    packets: &mut [Packet<'_>],
    results: &mut [PacketResult],
) {
    let Scratch {
        waiting,
        tags,
        selected,
        busy,
        generation,
    } = scratch;
    if waiting.is_empty() {
        return;
    }
    // Protect: encrypt first (the tag covers the ciphertext).
    keystreams(waiting, selected, packets, |w| w.protect);
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
                    key: w.keys.cm_rtp()?.auth,
                    a: &packets[w.packet].buf[..w.payload().end],
                    b: &w.roc,
                })
            },
            tags,
        );
    }
    // Protect: append the tag. Unprotect: compare it (constant time).
    for (w, tag) in waiting.iter_mut().zip(tags.iter()) {
        let RtpSpan { len, tag_len, .. } = w.span;
        let buf = &mut *packets[w.packet].buf;
        if w.protect {
            buf[len..len + tag_len].copy_from_slice(&tag[..tag_len]);
        } else {
            w.authentic =
                w.keys.cm_rtp().is_some() && tags_equal(&tag[..tag_len], &buf[len - tag_len..len]);
        }
    }
    // Unprotect: decrypt only what authenticated.
    keystreams(waiting, selected, packets, |w| !w.protect && w.authentic);
    for w in waiting.iter() {
        let RtpSpan { len, tag_len, .. } = w.span;
        results[w.packet] = if w.protect {
            Ok(len + tag_len)
        } else if w.authentic {
            contexts[w.context]
                .unprotect_rtp_commit(&w.span)
                .map(|()| len - tag_len)
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
