//! Batch processing: many packets, from many contexts, in one call.
//!
//! The caller owns every buffer; results come back in a caller-owned slice, one per packet, so
//! nothing is allocated per packet. [`SerialEngine`] processes packets one after another in the
//! order given. Parallel engines (SIMD lanes, worker threads: [`crate::ThreadedEngine`], a GPU) implement [`Engine`] too
//! and must give byte-identical output and identical statuses.
//!
//! Packets of one stream are processed in the order they appear in the batch, so replay
//! protection and index estimation see them as they would one at a time.

use crate::context::Context;
use crate::error::Error;

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// RTP → SRTP.
    ProtectRtp,
    /// SRTP → RTP.
    UnprotectRtp,
    /// RTCP → SRTCP.
    ProtectRtcp,
    /// SRTCP → RTCP.
    UnprotectRtcp,
}

/// One packet of a batch: `buf[..len]` is the input, and the output is written in place
/// (`buf` needs room for the tag when protecting).
#[derive(Debug)]
pub struct Packet<'a> {
    /// Index of the packet's context in the `contexts` slice given to [`Engine::process`].
    pub context: usize,
    /// The operation.
    pub op: Op,
    /// The packet's buffer.
    pub buf: &'a mut [u8],
    /// Length of the input in `buf`.
    pub len: usize,
}

/// The result for one packet: the output length, or what went wrong.
pub type PacketResult = Result<usize, Error>;

/// The contexts a batch's packets name by index ([`Packet::context`]): a slice, or any store
/// that finds a context by index without the contexts being side by side in memory, such as a
/// gateway's, where each participant owns its own ([`Engine::process_in`]).
pub trait Contexts {
    /// How many contexts there are; indices from here on are unknown contexts.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Context `i`, if there is one.
    fn get(&self, i: usize) -> Option<&Context>;
    /// Context `i`, to update, if there is one.
    fn get_mut(&mut self, i: usize) -> Option<&mut Context>;
}

impl Contexts for [Context] {
    fn len(&self) -> usize {
        <[Context]>::len(self)
    }
    fn get(&self, i: usize) -> Option<&Context> {
        <[Context]>::get(self, i)
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut Context> {
        <[Context]>::get_mut(self, i)
    }
}

/// Contexts borrowed from wherever they live, in the order the batch names them.
impl Contexts for Vec<&mut Context> {
    fn len(&self) -> usize {
        <[&mut Context]>::len(self)
    }
    fn get(&self, i: usize) -> Option<&Context> {
        <[&mut Context]>::get(self, i).map(|c| &**c)
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut Context> {
        <[&mut Context]>::get_mut(self, i).map(|c| &mut **c)
    }
}

/// Something that processes batches of packets.
pub trait Engine: Send + Sync {
    /// A short name for reports.
    fn name(&self) -> &'static str;

    /// Processes `packets` against `contexts`, writing one result per packet into
    /// `results[i]`. A packet naming a context out of range gets [`Error::UnknownContext`].
    ///
    /// # Panics
    /// If `results` is shorter than `packets` (a caller's bug, never caused by packet data).
    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    );

    /// [`Engine::process`] against contexts that are not in one slice (see [`Contexts`]), with
    /// the same results. The default runs the packets one at a time on the calling thread, as
    /// [`SerialEngine`] does; [`crate::SimdEngine`] runs its lanes here too. Engines that move
    /// contexts to other threads ([`crate::ThreadedEngine`]) keep the default.
    ///
    /// # Panics
    /// If `results` is shorter than `packets` (a caller's bug, never caused by packet data).
    fn process_in(
        &self,
        contexts: &mut dyn Contexts,
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        check_results_len(packets.len(), results.len());
        for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
            *r = process_one(contexts, p);
        }
    }
}

/// The caller's contract of [`Engine::process`]: one result slot per packet.
///
/// # Panics
/// If `results` is shorter than `packets` (a caller's bug, never caused by packet data).
pub fn check_results_len(packets: usize, results: usize) {
    assert!(
        results >= packets,
        "results slice ({results}) shorter than the batch ({packets})"
    );
}

/// Packets one at a time, in order, on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct SerialEngine;

impl Engine for SerialEngine {
    fn name(&self) -> &'static str {
        "serial"
    }

    fn process(
        &self,
        contexts: &mut [Context],
        packets: &mut [Packet<'_>],
        results: &mut [PacketResult],
    ) {
        check_results_len(packets.len(), results.len());
        for (p, r) in packets.iter_mut().zip(results.iter_mut()) {
            *r = process_one(contexts, p);
        }
    }
}

/// Processes one batch packet with the scalar code, as [`SerialEngine`] does (for engines,
/// in this crate or outside it, that send some packets down the serial path).
#[inline]
pub fn process_one<C: Contexts + ?Sized>(contexts: &mut C, p: &mut Packet<'_>) -> PacketResult {
    let ctx = contexts.get_mut(p.context).ok_or(Error::UnknownContext)?;
    process_on(ctx, p)
}

/// Processes one batch packet against `ctx` (its context, already looked up), as
/// [`process_one`] does.
#[inline]
pub(crate) fn process_on(ctx: &mut Context, p: &mut Packet<'_>) -> PacketResult {
    match p.op {
        Op::ProtectRtp => ctx.protect_rtp(p.buf, p.len),
        Op::UnprotectRtp => ctx.unprotect_rtp(p.buf, p.len),
        Op::ProtectRtcp => ctx.protect_rtcp(p.buf, p.len),
        Op::UnprotectRtcp => ctx.unprotect_rtcp(p.buf, p.len),
    }
}
