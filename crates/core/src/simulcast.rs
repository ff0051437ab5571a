//! Simulcast (RFC 8853), sans-IO: a publisher sends a video section as several layers of one
//! picture at different sizes and bitrates, each its own SSRC, told apart by the `rid` header
//! extension; each receiver is sent one layer, chosen from what can be sent it (its bandwidth
//! estimate, [`crate::bwe`]) or set through the API, and switched only where the new layer
//! starts a keyframe, so the receiver's decoder never sees a picture that refers to one it was
//! not sent. The receiver sees one stream: the slot's SSRC and numbering carry on across a
//! switch (sequence numbers follow on, timestamps advance with the time between the packets),
//! and VP8's picture ID and TL0PICIDX are renumbered to follow on too.
//!
//! The room keeps the layers a publisher sends ([`Layers`]) and, per receiver and publisher
//! section, which layer it is sent and which it should be ([`LayerView`]).

use std::time::{Duration, Instant};

/// Most layers per section (Chrome sends up to three, some stacks four).
pub const MAX_LAYERS: usize = 4;
/// How often a receiver's target layer is chosen again.
const EVALUATE_EVERY: Duration = Duration::from_millis(250);
/// A layer with no packet for this long is taken as stopped (the publisher's encoder dropped
/// it for its own bandwidth).
const STOPPED_AFTER: Duration = Duration::from_millis(600);
/// Up-switch only when the estimate exceeds the layer's rate by this factor (hysteresis).
pub const UP_MARGIN: f64 = 1.15;

/// One layer a publisher sends.
#[derive(Debug, Clone, Default)]
pub struct Layer {
    /// Its rid.
    pub rid: String,
    /// Its SSRC, once a packet named the rid.
    pub ssrc: Option<u32>,
    /// Its retransmission SSRC, once an RTX packet named it (`repaired-rtp-stream-id`).
    pub rtx_ssrc: Option<u32>,
    window_start: Option<Instant>,
    bytes: u64,
    /// Its bitrate over the last whole second, bits per second.
    pub bps: u64,
    /// When its last packet came.
    pub last: Option<Instant>,
}

/// The simulcast layers of one section a publisher sends.
#[derive(Debug, Clone)]
pub struct Layers {
    /// The section (index in the publisher's negotiated media).
    pub section: usize,
    /// The layers, in the SDP's order.
    pub layers: Vec<Layer>,
}

/// What a receiver is shown of one layer (a copy, so routing reads it without borrowing the
/// publisher).
#[derive(Debug, Clone, Copy, Default)]
pub struct LayerInfo {
    /// Its SSRC, once known.
    pub ssrc: Option<u32>,
    /// Its bitrate, bits per second.
    pub bps: u64,
    /// Whether it is being sent (a packet within the last [`STOPPED_AFTER`]).
    pub active: bool,
}

impl Layers {
    /// A section's layers, by rid.
    pub fn new(section: usize, rids: &[String]) -> Layers {
        Layers {
            section,
            layers: rids
                .iter()
                .take(MAX_LAYERS)
                .map(|r| Layer {
                    rid: r.clone(),
                    ..Layer::default()
                })
                .collect(),
        }
    }

    /// The layer of a packet from `ssrc` (binding the SSRC to the layer its `rid` names, the
    /// first time); `None` if it is none of these layers'.
    pub fn layer_of(&mut self, ssrc: u32, rid: Option<&[u8]>) -> Option<usize> {
        if let Some(k) = self.layers.iter().position(|l| l.ssrc == Some(ssrc)) {
            return Some(k);
        }
        let rid = rid?;
        let k = self.layers.iter().position(|l| l.rid.as_bytes() == rid)?;
        self.layers[k].ssrc = Some(ssrc);
        Some(k)
    }

    /// Binds `ssrc` to layer `k` unless it is bound already (a mirrored publisher's layers, as
    /// its home bound them: the `rid` that bound them may be gone from later packets).
    pub fn bind(&mut self, k: usize, ssrc: u32) {
        if self.layers.iter().any(|l| l.ssrc == Some(ssrc)) {
            return;
        }
        if let Some(l) = self.layers.get_mut(k) {
            l.ssrc = Some(ssrc);
        }
    }

    /// The layer an RTX packet from `rtx_ssrc` repairs (its `repaired-rtp-stream-id` binds it
    /// the first time): the layer's primary SSRC.
    pub fn repaired_by(&mut self, rtx_ssrc: u32, repaired_rid: Option<&[u8]>) -> Option<u32> {
        if let Some(l) = self.layers.iter().find(|l| l.rtx_ssrc == Some(rtx_ssrc)) {
            return l.ssrc;
        }
        let rid = repaired_rid?;
        let l = self.layers.iter_mut().find(|l| l.rid.as_bytes() == rid)?;
        l.rtx_ssrc = Some(rtx_ssrc);
        l.ssrc
    }

    /// A packet of `bytes` on layer `k` at `now`.
    pub fn note(&mut self, k: usize, bytes: usize, now: Instant) {
        let Some(l) = self.layers.get_mut(k) else {
            return;
        };
        l.last = Some(now);
        let start = *l.window_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= Duration::from_secs(1) {
            l.bps = (l.bytes as f64 * 8.0 / elapsed.as_secs_f64()) as u64;
            l.window_start = Some(now);
            l.bytes = 0;
        }
        l.bytes += bytes as u64;
    }

    /// What receivers are shown of the layers at `now`.
    pub fn info(&self, now: Instant) -> [LayerInfo; MAX_LAYERS] {
        let mut out = [LayerInfo::default(); MAX_LAYERS];
        for (o, l) in out.iter_mut().zip(&self.layers) {
            *o = LayerInfo {
                ssrc: l.ssrc,
                bps: l.bps,
                active: l
                    .last
                    .is_some_and(|t| now.saturating_duration_since(t) < STOPPED_AFTER),
            };
        }
        out
    }
}

/// VP8 picture numbering carried across layer switches for one receiver.
#[derive(Debug, Clone, Copy, Default)]
pub struct Picture {
    /// Added to the layer's picture IDs (15 bits).
    pub id_offset: u16,
    /// Added to the layer's TL0PICIDX.
    pub tl0_offset: u8,
    /// The last picture ID and TL0PICIDX sent.
    pub last: Option<(u16, u8)>,
}

/// What one receiver is sent of one publisher section's layers.
#[derive(Debug, Clone)]
pub struct LayerView {
    /// The publisher.
    pub publisher: crate::room::MemberId,
    /// The publisher's section (see [`Layers::section`]).
    pub section: usize,
    /// The layer sent now.
    pub current: Option<usize>,
    /// The layer it should be sent (switched to at its next keyframe).
    pub target: usize,
    /// A layer set through the API (its index), instead of the estimate's choice.
    pub manual: Option<usize>,
    last_eval: Option<Instant>,
    /// When the publisher was last asked for a keyframe of the target for this receiver.
    asked: Option<Instant>,
    /// VP8 picture numbering.
    pub picture: Picture,
    /// Switches made.
    pub switches: u64,
}

/// What to do with one packet of one layer for one receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Forward it (on the layer sent now).
    Forward,
    /// Switch to this packet's layer here (it starts a keyframe of the target) and forward it.
    Switch,
    /// Not this receiver's layer; ask the publisher for a keyframe of the target layer (SSRC)
    /// when it has none coming.
    Skip(Option<u32>),
}

impl LayerView {
    /// A receiver's view of a publisher section, nothing sent yet.
    pub fn new(publisher: crate::room::MemberId, section: usize) -> LayerView {
        LayerView {
            publisher,
            section,
            current: None,
            target: 0,
            manual: None,
            last_eval: None,
            asked: None,
            picture: Picture::default(),
            switches: 0,
        }
    }

    /// Chooses the target layer at `now` from the layers and `estimate_bps` (what can be sent
    /// the receiver; `None`: no limit known): the manual choice if there is one and it is
    /// being sent, else the highest active layer whose rate fits the estimate (with a margin to
    /// go up), else the lowest active one. Returns whether the target changed. At most every
    /// 250 ms, unless `force`.
    pub fn evaluate(
        &mut self,
        layers: &[LayerInfo; MAX_LAYERS],
        estimate_bps: Option<u64>,
        now: Instant,
        force: bool,
    ) -> bool {
        if !force
            && self
                .last_eval
                .is_some_and(|t| now.saturating_duration_since(t) < EVALUATE_EVERY)
        {
            return false;
        }
        self.last_eval = Some(now);
        let mut active = [0usize; MAX_LAYERS];
        let mut n = 0;
        for (k, l) in layers.iter().enumerate() {
            if l.active && l.ssrc.is_some() {
                active[n] = k;
                n += 1;
            }
        }
        let active = &mut active[..n];
        if active.is_empty() {
            return false;
        }
        let manual = self.manual.filter(|k| active.contains(k));
        let target = manual.unwrap_or_else(|| {
            // Quality by rate: the layers' bitrates order them (the SDP's order need not).
            let by_rate = &mut *active;
            by_rate.sort_by_key(|k| layers[*k].bps);
            match estimate_bps {
                None => *by_rate.last().expect("not empty"),
                Some(est) => {
                    let fits = |k: usize| {
                        let need = layers[k].bps as f64;
                        let margin = if Some(k) == self.current {
                            1.0
                        } else {
                            UP_MARGIN
                        };
                        need * margin <= est as f64
                    };
                    by_rate
                        .iter()
                        .rev()
                        .copied()
                        .find(|k| fits(*k))
                        .unwrap_or(by_rate[0])
                }
            }
        });
        let changed = target != self.target;
        self.target = target;
        changed
    }

    /// Whether to ask the publisher for a keyframe of the target for this receiver at `now`
    /// (at most every `interval`, while a switch waits for one).
    pub fn should_ask(&mut self, now: Instant, interval: Duration) -> bool {
        if self.current == Some(self.target)
            || self
                .asked
                .is_some_and(|t| now.saturating_duration_since(t) < interval)
        {
            return false;
        }
        self.asked = Some(now);
        true
    }

    /// What to do with a packet of layer `layer` that starts a keyframe or not: switch to
    /// the target at its keyframe; meanwhile the layer sent now goes on.
    pub fn decide(
        &mut self,
        layer: usize,
        keyframe: bool,
        layers: &[LayerInfo; MAX_LAYERS],
    ) -> Decision {
        if layer == self.target && self.current != Some(layer) && keyframe {
            self.current = Some(layer);
            self.switches += 1;
            return Decision::Switch;
        }
        if self.current == Some(layer) {
            return Decision::Forward;
        }
        Decision::Skip(layers.get(self.target).and_then(|l| l.ssrc))
    }

    /// The picture ID and TL0PICIDX a packet of the layer sent now was given (a retransmission
    /// of it gets the same): the numbering as it stands, nothing changed.
    pub fn mapped(&self, id: u16, tl0: u8, bits: u32) -> (u16, u8) {
        let mask = if bits == 15 { 0x7fff } else { 0x7f };
        (
            id.wrapping_add(self.picture.id_offset) & mask,
            tl0.wrapping_add(self.picture.tl0_offset),
        )
    }

    /// The picture ID and TL0PICIDX a receiver gets for a VP8 packet's (`id` of `bits` bits),
    /// renumbered to follow the last sent; a switch (`switched`) re-bases the numbering so the
    /// new layer's picture follows on.
    pub fn renumber(&mut self, id: u16, tl0: u8, bits: u32, switched: bool) -> (u16, u8) {
        let mask = if bits == 15 { 0x7fff } else { 0x7f };
        let p = &mut self.picture;
        if switched {
            if let Some((last_id, last_tl0)) = p.last {
                p.id_offset = last_id.wrapping_add(1).wrapping_sub(id) & mask;
                p.tl0_offset = last_tl0.wrapping_add(1).wrapping_sub(tl0);
            }
        }
        let out = (
            id.wrapping_add(p.id_offset) & mask,
            tl0.wrapping_add(p.tl0_offset),
        );
        p.last = Some(out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::MemberId;

    fn layers(now: Instant, rates: [u64; 3]) -> (Layers, [LayerInfo; MAX_LAYERS]) {
        let rids: Vec<String> = ["q", "h", "f"].iter().map(|s| s.to_string()).collect();
        let mut l = Layers::new(1, &rids);
        for (k, r) in rates.iter().enumerate() {
            assert_eq!(
                l.layer_of(100 + k as u32, Some(rids[k].as_bytes())),
                Some(k)
            );
            l.layers[k].bps = *r;
            l.note(k, 1000, now);
        }
        let info = l.info(now);
        (l, info)
    }

    #[test]
    fn the_target_fits_the_estimate_with_a_margin_to_go_up() {
        let t = Instant::now();
        let (l, info) = layers(t, [150_000, 500_000, 1_500_000]);
        assert_eq!(l.layers.len(), 3);
        let mut v = LayerView::new(MemberId(1), 1);
        v.evaluate(&info, Some(300_000), t, false);
        assert_eq!(v.target, 0);
        // 560 kbit/s: 500 fits, but not with the margin to go up.
        v.evaluate(&info, Some(560_000), t + Duration::from_secs(1), false);
        assert_eq!(v.target, 0);
        v.evaluate(&info, Some(600_000), t + Duration::from_secs(2), false);
        assert_eq!(v.target, 1);
        v.evaluate(&info, None, t + Duration::from_secs(3), false);
        assert_eq!(v.target, 2, "no limit known: the best");
        v.manual = Some(0);
        v.evaluate(&info, None, t + Duration::from_secs(3), true);
        assert_eq!(v.target, 0, "the API's choice");
    }

    #[test]
    fn switches_wait_for_a_keyframe_of_the_target_and_keep_the_numbering() {
        let t = Instant::now();
        let (_, info) = layers(t, [150_000, 500_000, 1_500_000]);
        let mut v = LayerView::new(MemberId(1), 1);
        v.target = 0;
        assert_eq!(v.decide(0, false, &info), Decision::Skip(Some(100)));
        assert_eq!(v.decide(0, true, &info), Decision::Switch);
        assert_eq!(v.renumber(500, 7, 15, true), (500, 7));
        assert_eq!(v.decide(1, true, &info), Decision::Skip(Some(100)));
        assert_eq!(v.decide(0, false, &info), Decision::Forward);
        assert_eq!(v.renumber(501, 7, 15, false), (501, 7));
        // Up to layer 1: its delta frames are not taken, the layer-0 ones go on until
        // layer 1's keyframe.
        v.target = 1;
        assert_eq!(v.decide(1, false, &info), Decision::Skip(Some(101)));
        assert_eq!(v.decide(0, false, &info), Decision::Forward);
        assert_eq!(v.renumber(502, 7, 15, false), (502, 7));
        assert_eq!(v.decide(1, true, &info), Decision::Switch);
        // Layer 1's own numbering (9000, 40) follows on from 502/7.
        assert_eq!(v.renumber(9000, 40, 15, true), (503, 8));
        assert_eq!(v.renumber(9001, 40, 15, false), (504, 8));
        assert_eq!(v.decide(0, false, &info), Decision::Skip(Some(101)));
        assert_eq!(v.switches, 2);
    }

    #[test]
    fn a_stopped_layer_is_not_a_target_and_rtx_binds_to_its_layer() {
        let t = Instant::now();
        let (mut l, _) = layers(t, [150_000, 500_000, 1_500_000]);
        let later = t + Duration::from_secs(2);
        l.note(0, 1000, later);
        let info = l.info(later);
        assert!(info[0].active && !info[2].active);
        let mut v = LayerView::new(MemberId(1), 1);
        v.evaluate(&info, None, later, false);
        assert_eq!(v.target, 0);
        assert_eq!(l.repaired_by(900, Some(b"h")), Some(101));
        assert_eq!(l.repaired_by(900, None), Some(101));
        assert_eq!(l.repaired_by(901, None), None);
    }
}
