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
}

/// Per-thread scratch, kept between batches so that a batch allocates nothing once warm.
#[derive(Default)]
struct Scratch {
    waiting: Vec<Waiting>,
    tags: Vec<[u8; 20]>,
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
        busy,
        generation,
    } = scratch;
    if waiting.is_empty() {
        return;
    }
    // Protect: encrypt first (the tag covers the ciphertext).
    for w in waiting.iter().filter(|w| w.protect) {
        if let Some(k) = w.keys.cm_rtp() {
            if let Some(ctr) = k.ctr {
                let RtpSpan { hdr, len, ssrc, .. } = w.span;
                let iv = cm_iv(k.salt, ssrc, w.span.index);
                ctr.apply_keystream(&iv, &mut packets[w.packet].buf[hdr..len]);
            }
        }
    }
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
                let end = if w.protect {
                    w.span.len
                } else {
                    w.span.len - w.span.tag_len
                };
                Some(HmacJob {
                    key: w.keys.cm_rtp()?.auth,
                    a: &packets[w.packet].buf[..end],
                    b: &w.roc,
                })
            },
            tags,
        );
    }
    for (w, tag) in waiting.iter().zip(tags.iter()) {
        let RtpSpan {
            hdr,
            len,
            ssrc,
            index,
            tag_len,
            ..
        } = w.span;
        let buf = &mut *packets[w.packet].buf;
        let Some(k) = w.keys.cm_rtp() else {
            // Queued only for keys that have lanes; kept total rather than assumed.
            results[w.packet] = Err(Error::AuthFailed);
            continue;
        };
        results[w.packet] = if w.protect {
            buf[len..len + tag_len].copy_from_slice(&tag[..tag_len]);
            Ok(len + tag_len)
        } else {
            let body_end = len - tag_len;
            if !tags_equal(&tag[..tag_len], &buf[body_end..len]) {
                Err(Error::AuthFailed)
            } else {
                if let Some(ctr) = k.ctr {
                    ctr.apply_keystream(&cm_iv(k.salt, ssrc, index), &mut buf[hdr..body_end]);
                }
                contexts[w.context]
                    .unprotect_rtp_commit(&w.span)
                    .map(|()| body_end)
            }
        };
    }
    waiting.clear();
    *generation = generation.wrapping_add(1);
    if *generation == 0 {
        busy.fill(0);
        *generation = 1;
    }
}
