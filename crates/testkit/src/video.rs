//! A simulated simulcast video sender, sans-IO, and the SDP that goes with it: what a browser
//! publishing a camera over WHIP sends (VP8 in three `rid` layers, as Chrome does) and what a
//! WHEP viewer offers to receive it.
//!
//! Each layer is its own RTP stream (its own SSRC, sequence numbers and 90 kHz timestamps)
//! carrying one frame every 1/30 s, split into packets of at most [`MAX_PAYLOAD`] bytes of
//! VP8 payload, each with the `rid` header extension, a VP8 payload descriptor with a 15-bit
//! picture ID (S set on a frame's first packet, the marker bit on its last) and a VP8 frame
//! header (a keyframe's starts with the keyframe start code and its size). Keyframes come
//! every [`KEYFRAME_EVERY`] and when a keyframe request (PLI or FIR) names the layer; a keyframe
//! is [`KEYFRAME_SIZE_FACTOR`] times a delta frame. Packets leave through a pacer at
//! [`PACING_FACTOR`] times the layers' total rate, as a browser's pacer sends them, not in one
//! burst per frame.
//!
//! The last [`MARKER_LEN`] bytes of every video payload say which layer sent it and when the
//! pacer let it out (nanoseconds since the run's epoch), so that a receiver in the same process counts packets
//! per layer and measures the delay through the gateway. The gateway rewrites headers and the
//! VP8 picture ID, never the payload's tail.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use secrelay_wire::rtp::write_extension;

/// The `rid` header extension's URI.
pub const RID_URI: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
/// The extension id the publisher's offer gives it.
pub const RID_EXT_ID: u8 = 10;
/// The transport-cc extension's id in a viewer's offer (Chrome's).
pub const TWCC_EXT_ID: u8 = 3;
/// VP8's payload type in the offers (Chrome's).
pub const VP8_PT: u8 = 96;
/// Opus's payload type in the offers (Chrome's).
pub const OPUS_PT: u8 = 111;
/// The RTX payload type of Chrome's offer (`apt=96`): retransmissions and bandwidth probes.
pub const RTX_PT: u8 = 97;
/// VP8 payload per packet at most: with the 12-byte header, the 8-byte `rid` extension and
/// the 4-byte descriptor, RTP packets of at most 1,200 bytes before SRTP's tag.
pub const MAX_PAYLOAD: usize = 1_176;
/// Frames per second on every layer.
pub const FPS: u32 = 30;
/// A keyframe at least this often on every layer.
pub const KEYFRAME_EVERY: Duration = Duration::from_secs(3);
/// A keyframe's size in delta frames.
pub const KEYFRAME_SIZE_FACTOR: usize = 4;
/// The pacer's rate over the layers' total target rate (Chrome paces at 2.5×).
pub const PACING_FACTOR: f64 = 2.5;
/// Bytes at the end of each video payload: the layer (1 byte) and the send instant (8 bytes).
pub const MARKER_LEN: usize = 9;

/// One simulcast layer: its rid and target bitrate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerSpec {
    /// Its rid.
    pub rid: &'static str,
    /// Its target bitrate (RTP payload), bits per second.
    pub bps: u64,
}

/// The three layers, smallest first (Chrome's `q`, `h`, `f` at 320×180, 640×360 and
/// 1280×720): about 150 kbit/s, 500 kbit/s and 1.8 Mbit/s.
pub const LAYERS: [LayerSpec; 3] = [
    LayerSpec {
        rid: "q",
        bps: 150_000,
    },
    LayerSpec {
        rid: "h",
        bps: 500_000,
    },
    LayerSpec {
        rid: "f",
        bps: 1_800_000,
    },
];

/// Most layers a receiver's counts tell apart.
pub const MAX_LAYER_COUNT: usize = 4;

/// The audio a publisher sends beside the video: Opus-sized packets, 20 ms each (100 bytes:
/// about 40 kbit/s).
pub const OPUS_PAYLOAD: usize = 100;

struct LayerState {
    spec: LayerSpec,
    ssrc: u32,
    seq: u16,
    ts: u32,
    picture_id: u16,
    next_frame: Instant,
    last_key: Option<Instant>,
    key_wanted: bool,
    frames: u64,
    keyframes: u64,
    packets: u64,
}

/// The simulated simulcast sender of one publisher: frames made on each layer's clock, queued,
/// and released by the pacer as plain RTP packets ready to protect.
pub struct SimulcastSender {
    layers: Vec<LayerState>,
    queue: VecDeque<Vec<u8>>,
    next_send: Instant,
    pacing_bps: f64,
    epoch: Instant,
    /// Keyframe requests that named one of its layers.
    pub keyframe_requests: u64,
}

impl std::fmt::Debug for SimulcastSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulcastSender")
            .field("layers", &self.layers.len())
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

/// What one layer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSent {
    /// Its rid.
    pub rid: &'static str,
    /// Its SSRC.
    pub ssrc: u32,
    /// Frames made.
    pub frames: u64,
    /// Of them, keyframes.
    pub keyframes: u64,
    /// Packets made.
    pub packets: u64,
}

impl SimulcastSender {
    /// A sender of `layers` (distinct random SSRCs, sequence numbers and timestamps), its first
    /// frames (keyframes) due at `now`; markers count from `epoch`.
    pub fn new(layers: &[LayerSpec], now: Instant, epoch: Instant) -> SimulcastSender {
        let mut ssrcs: Vec<u32> = Vec::new();
        while ssrcs.len() < layers.len() {
            let s = u32::from_be_bytes(crate::browser::random_bytes::<4>()).max(1);
            if !ssrcs.contains(&s) {
                ssrcs.push(s);
            }
        }
        let total: u64 = layers.iter().map(|l| l.bps).sum();
        SimulcastSender {
            layers: layers
                .iter()
                .zip(ssrcs)
                .map(|(spec, ssrc)| LayerState {
                    spec: *spec,
                    ssrc,
                    seq: u16::from_be_bytes(crate::browser::random_bytes::<2>()),
                    ts: u32::from_be_bytes(crate::browser::random_bytes::<4>()),
                    picture_id: u16::from_be_bytes(crate::browser::random_bytes::<2>()) & 0x7fff,
                    next_frame: now,
                    last_key: None,
                    key_wanted: true,
                    frames: 0,
                    keyframes: 0,
                    packets: 0,
                })
                .collect(),
            queue: VecDeque::new(),
            next_send: now,
            pacing_bps: total as f64 * PACING_FACTOR,
            epoch,
            keyframe_requests: 0,
        }
    }

    /// The layers' SSRCs, in order.
    pub fn ssrcs(&self) -> Vec<u32> {
        self.layers.iter().map(|l| l.ssrc).collect()
    }

    /// What each layer sent so far.
    pub fn sent(&self) -> Vec<LayerSent> {
        self.layers
            .iter()
            .map(|l| LayerSent {
                rid: l.spec.rid,
                ssrc: l.ssrc,
                frames: l.frames,
                keyframes: l.keyframes,
                packets: l.packets,
            })
            .collect()
    }

    /// A keyframe request (PLI, or FIR) for `ssrc`: that layer's next frame is a keyframe.
    /// Whether `ssrc` is one of its layers.
    pub fn request_keyframe(&mut self, ssrc: u32) -> bool {
        match self.layers.iter_mut().find(|l| l.ssrc == ssrc) {
            Some(l) => {
                l.key_wanted = true;
                self.keyframe_requests += 1;
                true
            }
            None => false,
        }
    }

    /// The next instant [`SimulcastSender::poll`] has something to do.
    pub fn deadline(&self) -> Instant {
        let frame = self
            .layers
            .iter()
            .map(|l| l.next_frame)
            .min()
            .unwrap_or(self.next_send + Duration::from_secs(3600));
        if self.queue.is_empty() {
            frame
        } else {
            frame.min(self.next_send)
        }
    }

    /// The next packet due at `now` (plain RTP), making the frames that are due first; `None`
    /// once nothing more is due. Call until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Vec<u8>> {
        for k in 0..self.layers.len() {
            // After a stall, skip the frames missed rather than sending them in a burst.
            if now >= self.layers[k].next_frame {
                self.make_frame(k, now);
                let l = &mut self.layers[k];
                let period = Duration::from_secs(1) / FPS;
                l.next_frame += period;
                if l.next_frame <= now {
                    let behind = now.duration_since(l.next_frame).as_nanos() / period.as_nanos();
                    l.next_frame += period * (behind as u32 + 1);
                    l.ts = l.ts.wrapping_add(90_000 / FPS * (behind as u32 + 1));
                }
            }
        }
        if self.queue.is_empty() || now < self.next_send {
            return None;
        }
        let mut p = self.queue.pop_front()?;
        // Stamped as it leaves, so that a receiver's delay is the path's, not the pacer's.
        let sent_ns = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let n = p.len();
        p[n - 8..].copy_from_slice(&sent_ns.to_be_bytes());
        // The pacer: the next packet when this one's bits have left at the pacing rate (not
        // before now: an idle pacer builds no credit beyond one packet).
        let gap = Duration::from_secs_f64(p.len() as f64 * 8.0 / self.pacing_bps);
        let credit = now
            .checked_sub(gap.min(Duration::from_millis(5)))
            .unwrap_or(now);
        self.next_send = self.next_send.max(credit) + gap;
        Some(p)
    }

    fn make_frame(&mut self, k: usize, now: Instant) {
        let l = &mut self.layers[k];
        let key = l.key_wanted
            || l.last_key
                .is_none_or(|t| now.duration_since(t) >= KEYFRAME_EVERY);
        let delta = (l.spec.bps / 8 / u64::from(FPS)) as usize;
        let size = if key {
            delta * KEYFRAME_SIZE_FACTOR
        } else {
            delta
        }
        .max(MARKER_LEN + 10);
        let packets = size.div_ceil(MAX_PAYLOAD);
        let per = size.div_ceil(packets);
        let mut left = size;
        for i in 0..packets {
            let body = per.min(left).max(MARKER_LEN + 10);
            left = left.saturating_sub(per);
            let mut p = Vec::with_capacity(12 + 8 + 4 + body);
            let marker = if i + 1 == packets { 0x80 } else { 0 };
            p.extend_from_slice(&[0x90, marker | VP8_PT]);
            p.extend_from_slice(&l.seq.to_be_bytes());
            p.extend_from_slice(&l.ts.to_be_bytes());
            p.extend_from_slice(&l.ssrc.to_be_bytes());
            write_extension(&mut p, &[(RID_EXT_ID, l.spec.rid.as_bytes())]);
            // The VP8 payload descriptor (RFC 7741 §4.2): X, S on the first packet, PID 0;
            // I with a 15-bit picture ID.
            let s = if i == 0 { 0x10 } else { 0 };
            p.extend_from_slice(&[
                0x80 | s,
                0x80,
                0x80 | (l.picture_id >> 8) as u8,
                l.picture_id as u8,
            ]);
            let at = p.len();
            p.resize(at + body, 0);
            let payload = &mut p[at..];
            if i == 0 {
                // The frame tag (RFC 6386 §9.1): bit 0 clear for a keyframe; show_frame set.
                let first_partition = (body as u32).min(0x7ffff) << 5;
                let tag = first_partition | 0x10 | u32::from(!key);
                payload[..3].copy_from_slice(&tag.to_le_bytes()[..3]);
                if key {
                    // The keyframe start code and the layer's picture size.
                    let (w, h) = [(320u16, 180u16), (640, 360), (1280, 720)][k.min(2)];
                    payload[3..6].copy_from_slice(&[0x9d, 0x01, 0x2a]);
                    payload[6..8].copy_from_slice(&w.to_le_bytes());
                    payload[8..10].copy_from_slice(&h.to_le_bytes());
                }
            }
            let n = payload.len();
            // The layer; the send instant is written as the pacer lets the packet out.
            payload[n - MARKER_LEN] = k as u8;
            l.seq = l.seq.wrapping_add(1);
            l.packets += 1;
            self.queue.push_back(p);
        }
        l.ts = l.ts.wrapping_add(90_000 / FPS);
        l.picture_id = (l.picture_id + 1) & 0x7fff;
        l.frames += 1;
        if key {
            l.keyframes += 1;
            l.last_key = Some(now);
            l.key_wanted = false;
        }
    }
}

/// What a received video payload's tail says: (layer index, send instant in nanoseconds since
/// the epoch). `None` for a payload too short to carry it.
pub fn read_marker(payload: &[u8]) -> Option<(u8, u64)> {
    let n = payload.len();
    let tail = payload.get(n.checked_sub(MARKER_LEN)?..)?;
    let sent = u64::from_be_bytes(tail[1..].try_into().ok()?);
    Some((tail[0], sent))
}

/// A publisher's offer: Chrome's (Opus audio, VP8 video with RTX), audio send-only under
/// `audio_ssrc`, video send-only as the simulcast layers `layers` told apart by the `rid`
/// extension (no `a=ssrc` lines for video, as Chrome's simulcast offers have none). `chrome` is
/// [`crate::Browser::chrome_offer`]'s text.
pub fn publisher_offer(chrome: &str, audio_ssrc: u32, layers: &[LayerSpec]) -> String {
    let rids: String = layers
        .iter()
        .map(|l| format!("a=rid:{} send\r\n", l.rid))
        .collect();
    let names: Vec<&str> = layers.iter().map(|l| l.rid).collect();
    chrome
        .replace("a=sendrecv", "a=sendonly")
        .replace("a=ssrc:1001 ", &format!("a=ssrc:{audio_ssrc} "))
        .replace(
            "a=ssrc-group:FID 2001 2002\r\na=ssrc:2001 cname:abc\r\na=ssrc:2002 cname:abc\r\n",
            &format!(
                "a=extmap:{RID_EXT_ID} {RID_URI}\r\n{rids}a=simulcast:send {}\r\n",
                names.join(";")
            ),
        )
}

/// A WHEP viewer's offer: Chrome's, both sections receive-only, no `a=ssrc` lines (a
/// receive-only browser announces none); with `transport_cc`, the transport-cc header
/// extension (id [`TWCC_EXT_ID`]) in both sections and `a=rtcp-fb:96 transport-cc` on VP8, as
/// Chrome offers them.
pub fn viewer_offer(chrome: &str, transport_cc: bool) -> String {
    let mut s = String::new();
    for l in chrome.lines().filter(|l| !l.starts_with("a=ssrc")) {
        s.push_str(match l {
            "a=sendrecv" | "a=sendonly" => "a=recvonly",
            other => other,
        });
        s.push_str("\r\n");
        if transport_cc && l.starts_with("a=mid:") {
            s.push_str(&format!(
                "a=extmap:{TWCC_EXT_ID} {}\r\n",
                crate::twcc::TWCC_URI
            ));
        }
        if transport_cc && l == "a=rtcp-fb:96 nack pli" {
            s.push_str("a=rtcp-fb:96 transport-cc\r\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrelay_wire::rtp::RtpHeader;
    use secrelay_wire::video::{starts_keyframe, vp8_descriptor, VideoFormat};

    /// Drives a sender for `secs` seconds of simulated time in 1 ms steps.
    fn run(s: &mut SimulcastSender, start: Instant, secs: u64) -> Vec<(Instant, Vec<u8>)> {
        let mut out = Vec::new();
        let mut t = start;
        while t < start + Duration::from_secs(secs) {
            while let Some(p) = s.poll(t) {
                out.push((t, p));
            }
            t += Duration::from_millis(1);
        }
        out
    }

    #[test]
    fn layers_send_their_rates_in_paced_packets_with_keyframes_every_few_seconds() {
        let t0 = Instant::now();
        let mut s = SimulcastSender::new(&LAYERS, t0, t0);
        let out = run(&mut s, t0, 6);
        let ssrcs = s.ssrcs();
        for (k, spec) in LAYERS.iter().enumerate() {
            let mine: Vec<&Vec<u8>> = out
                .iter()
                .map(|(_, p)| p)
                .filter(|p| RtpHeader::parse(p).unwrap().ssrc() == ssrcs[k])
                .collect();
            let bytes: usize = mine
                .iter()
                .map(|p| RtpHeader::parse(p).unwrap().payload().len())
                .sum();
            let bps = bytes as f64 * 8.0 / 6.0;
            // Deltas at the target, keyframes (3 in 6 s) a little above.
            assert!(
                bps >= spec.bps as f64 && bps <= spec.bps as f64 * 1.25,
                "{}: {bps}",
                spec.rid
            );
            assert!(mine.iter().all(|p| p.len() <= 1200));
            let keys = mine
                .iter()
                .filter(|p| {
                    starts_keyframe(VideoFormat::Vp8, RtpHeader::parse(p).unwrap().payload())
                })
                .count();
            assert_eq!(keys, 2, "{}: at 0 s and 3 s", spec.rid);
            // Sequence numbers follow on; every payload names its layer.
            let seqs: Vec<u16> = mine
                .iter()
                .map(|p| RtpHeader::parse(p).unwrap().sequence())
                .collect();
            assert!(seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)));
            for p in &mine {
                let h = RtpHeader::parse(p).unwrap();
                assert_eq!(read_marker(h.payload()).unwrap().0, k as u8);
                assert!(vp8_descriptor(h.payload()).unwrap().picture_id.is_some());
            }
        }
        assert_eq!(s.sent()[2].frames, 180);
        // Paced: never more than a few packets in one millisecond, even at keyframes.
        let mut per_ms = std::collections::HashMap::new();
        for (t, _) in &out {
            *per_ms.entry(*t).or_insert(0) += 1;
        }
        assert!(
            per_ms.values().all(|n| *n <= 3),
            "{:?}",
            per_ms.values().max()
        );
    }

    #[test]
    fn a_keyframe_request_makes_that_layers_next_frame_a_keyframe() {
        let t0 = Instant::now();
        let mut s = SimulcastSender::new(&LAYERS, t0, t0);
        run(&mut s, t0, 1);
        assert!(s.request_keyframe(s.ssrcs()[1]));
        assert!(!s.request_keyframe(7));
        run(&mut s, t0 + Duration::from_secs(1), 1);
        let keys: Vec<u64> = s.sent().iter().map(|l| l.keyframes).collect();
        assert_eq!(keys, vec![1, 2, 1]);
    }

    #[test]
    fn offers_parse_with_the_layers_and_directions() {
        let b = crate::Browser::random(OPUS_PT);
        let p = publisher_offer(&b.chrome_offer(), 4242, &LAYERS);
        let o = secrelay_wire::sdp::parse_offer(&p).unwrap();
        assert_eq!(o.media.len(), 2);
        assert!(p.contains("a=simulcast:send q;h;f\r\n"));
        assert!(p.contains("a=ssrc:4242 cname:abc\r\n"));
        assert!(!p.contains("a=sendrecv"));
        let v = viewer_offer(&b.chrome_offer(), false);
        assert!(secrelay_wire::sdp::parse_offer(&v).is_ok());
        assert_eq!(v.matches("a=recvonly").count(), 2);
        assert!(!v.contains("a=ssrc"));
        assert!(!v.contains("transport-wide-cc"));
        let v = viewer_offer(&b.chrome_offer(), true);
        assert!(secrelay_wire::sdp::parse_offer(&v).is_ok());
        assert_eq!(v.matches("a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n").count(), 2);
        assert!(v.contains("a=rtcp-fb:96 transport-cc\r\n"));
    }
}
