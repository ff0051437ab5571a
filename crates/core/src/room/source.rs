//! A packet from a publisher, read once: what every subscription that forwards it needs
//! (codec, media kind, simulcast layer, whether it starts a keyframe, its VP8 descriptor, the
//! header extension elements copies carry on) is read here, when the packet arrives, into a
//! [`SourcePacket`] that each subscription only reads. A packet the gateway makes itself
//! (transcoded or mixed audio) is a [`MadePacket`].

use std::time::Instant;

use secrelay_wire::demux::RtpFacts;
use secrelay_wire::video::{starts_keyframe, vp8_descriptor, VideoFormat, Vp8Descriptor};

use crate::leg::CodecId;
use crate::room::copy::Original;
use crate::simulcast::{LayerInfo, MAX_LAYERS};

/// A received RTP packet as routing reads it. See the [module documentation](self).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SourcePacket<'a> {
    /// The packet (plain RTP: unprotected, or unwrapped from RTX).
    pub rtp: &'a [u8],
    /// Its header, read where it arrived.
    pub facts: RtpFacts,
    /// Its codec, by the publisher's payload types.
    pub codec: CodecId,
    /// Whether it is video.
    pub video: bool,
    /// When it was received.
    pub received: Instant,
    /// Our send time for its copies (24-bit `abs-send-time`).
    pub abs_send: u32,
    /// The publisher's audio level element, when it sent one.
    pub audio_level: Option<&'a [u8]>,
    /// Its simulcast layer, with what the layers look like now.
    pub layer: Option<LayerOf>,
    /// Whether it starts a keyframe (video).
    pub keyframe: bool,
    /// Its VP8 payload descriptor (VP8).
    pub vp8: Option<Vp8Descriptor>,
}

/// A packet's simulcast layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerOf {
    /// The layer (index in its section's layers).
    pub k: usize,
    /// Every layer of the section, as receivers are shown them now.
    pub info: [LayerInfo; MAX_LAYERS],
}

impl<'a> SourcePacket<'a> {
    /// Reads `rtp` (its header `facts`, of `codec`), received at `received`; `audio_level_id`
    /// is the publisher's id for the audio level extension (0: none).
    pub fn read(
        rtp: &'a [u8],
        facts: &RtpFacts,
        codec: CodecId,
        audio_level_id: u8,
        (received, abs_send): (Instant, u32),
    ) -> SourcePacket<'a> {
        let video = !codec.is_audio();
        let body = rtp.get(usize::from(facts.header_len)..).unwrap_or_default();
        let (keyframe, vp8) = match codec {
            CodecId::Vp8 => (
                starts_keyframe(VideoFormat::Vp8, body),
                vp8_descriptor(body),
            ),
            CodecId::H264 => (starts_keyframe(VideoFormat::H264, body), None),
            _ => (false, None),
        };
        SourcePacket {
            rtp,
            facts: *facts,
            codec,
            video,
            received,
            abs_send,
            audio_level: (audio_level_id != 0)
                .then(|| facts.ext.get(rtp, audio_level_id))
                .flatten(),
            layer: None,
            keyframe,
            vp8,
        }
    }

    /// The packet as a copy is made from it.
    pub fn original(&self) -> Original<'a> {
        Original::of(self.rtp, &self.facts)
    }

    /// Its payload's length (what RTCP sender reports count).
    pub fn payload_len(&self) -> usize {
        self.rtp
            .len()
            .saturating_sub(usize::from(self.facts.header_len))
    }
}

/// A packet the gateway made for receivers (transcoded or mixed audio): its payload and its
/// numbering on its own stream, mapped per receiver as a relayed stream's is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MadePacket<'a> {
    pub seq: u16,
    pub ts: u32,
    pub marker: bool,
    pub payload: &'a [u8],
    /// When what it was made from was received (or the mix's tick).
    pub received: Instant,
    /// Our send time for its copies.
    pub abs_send: u32,
}

/// The `abs-send-time` of `at` (6.18 fixed-point seconds, 24 bits) on a clock from `epoch`.
pub(crate) fn abs_send_time(epoch: Instant, at: Instant) -> u32 {
    let us = at.saturating_duration_since(epoch).as_micros();
    ((us << 18) / 1_000_000) as u32 & 0x00ff_ffff
}
