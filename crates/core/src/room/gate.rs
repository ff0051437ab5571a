//! What of a member's media the room passes on: all of it, unless it was told to block the
//! member's media, silence it, or block its telephone-events (what a SIP proxy asks rtpengine
//! for with `block media`, `silence media` and `block DTMF`: hold without re-INVITE, a caller
//! muted while an agent takes a card number, digits kept from the far end).
//!
//! The gate stands where a member's packet enters its room, after its reception is noted (the
//! member's RTCP reports go on as before) and before anything else sees it: receivers, the
//! transcoder, the mix, the room's replicas on other workers and nodes. A blocked packet is
//! dropped and counted at its sender (`media_blocked`, `dtmf_blocked`); a silenced one goes on
//! with its payload replaced by silence in its own format ([`secrelay_media::silence`]), so
//! the receiver's stream, numbering and timing go on unbroken. Media with no silence to write
//! (video, AMR, formats the gateway only relays) is dropped while silenced. Telephone-events are
//! not media here: blocking or silencing media lets them through, `block DTMF` stops them.

use secrelay_media::silence;

use crate::counters::DropReason;
use crate::leg::CodecId;

/// What a member's gate stops. All open by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    /// Its media (everything but telephone-events) dropped.
    pub block_media: bool,
    /// Its audio sent on as silence; its other media dropped.
    pub silence_media: bool,
    /// Its telephone-events (RFC 4733) dropped.
    pub block_dtmf: bool,
}

impl Gate {
    /// Whether it lets everything through.
    pub fn is_open(self) -> bool {
        self == Gate::default()
    }

    /// Whether a packet of `codec` has its payload replaced by silence.
    pub(crate) fn silences(self, codec: CodecId) -> bool {
        self.silence_media && !self.block_media && !codec.is_event()
    }

    /// Why a packet of `codec` stops here, if it does: blocked, or silenced in a format with
    /// no silence (a silenced packet of a format with one comes here silent already).
    pub(crate) fn stops(self, codec: CodecId) -> Option<DropReason> {
        if codec.is_event() {
            self.block_dtmf.then_some(DropReason::DtmfBlocked)
        } else {
            let quiet = self.silence_media && !has_silence(codec);
            (self.block_media || quiet).then_some(DropReason::MediaBlocked)
        }
    }
}

/// Whether we write silence in this format ([`silence_packet`]).
fn has_silence(codec: CodecId) -> bool {
    matches!(
        codec,
        CodecId::Pcmu | CodecId::Pcma | CodecId::G722 | CodecId::Opus | CodecId::ComfortNoise
    )
}

/// Writes into `out` the RTP packet `rtp` (of `codec`, its header `header_len` octets) with its
/// payload replaced by silence of the same length and format: the header as it was, without
/// padding. `false` when the format has no silence we write (the packet is dropped).
pub(crate) fn silence_packet(
    rtp: &[u8],
    header_len: usize,
    codec: CodecId,
    out: &mut Vec<u8>,
) -> bool {
    let Some(payload) = header_into(rtp, header_len, out) else {
        return false;
    };
    let fill = match codec {
        CodecId::Pcmu => silence::PCMU,
        CodecId::Pcma => silence::PCMA,
        CodecId::G722 => silence::G722,
        CodecId::ComfortNoise => {
            out.extend_from_slice(&silence::CN);
            return true;
        }
        CodecId::Opus => {
            let mut quiet = Vec::new();
            let Some(samples) = silence::opus_samples(payload) else {
                return false;
            };
            if !silence::opus(samples, &mut quiet) {
                return false;
            }
            out.extend_from_slice(&quiet);
            return true;
        }
        _ => return false,
    };
    out.resize(header_len + payload.len(), fill);
    true
}

/// Writes the header of the RTP packet `rtp` (its first `header_len` octets) into `out`, its
/// padding bit cleared, and gives its payload without the padding; `None` when the lengths do
/// not hold.
pub(crate) fn header_into<'a>(
    rtp: &'a [u8],
    header_len: usize,
    out: &mut Vec<u8>,
) -> Option<&'a [u8]> {
    let (header, payload) = rtp.split_at_checked(header_len)?;
    let padding = if header.first().is_some_and(|b| b & 0x20 != 0) {
        usize::from(*payload.last()?)
    } else {
        0
    };
    let payload = payload.get(..payload.len().checked_sub(padding)?)?;
    out.clear();
    out.extend_from_slice(header);
    if let Some(b) = out.first_mut() {
        *b &= !0x20;
    }
    Some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![first, 0, 0, 1, 0, 0, 0, 160, 0, 0, 0, 7];
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn what_each_setting_stops() {
        let open = Gate::default();
        assert!(open.is_open());
        assert_eq!(open.stops(CodecId::Pcmu), None);
        let media = Gate {
            block_media: true,
            ..Gate::default()
        };
        assert_eq!(media.stops(CodecId::Opus), Some(DropReason::MediaBlocked));
        assert_eq!(media.stops(CodecId::Vp8), Some(DropReason::MediaBlocked));
        assert_eq!(media.stops(CodecId::TelephoneEvent), None, "DTMF passes");
        let dtmf = Gate {
            block_dtmf: true,
            ..Gate::default()
        };
        assert_eq!(
            dtmf.stops(CodecId::TelephoneEvent48k),
            Some(DropReason::DtmfBlocked)
        );
        assert_eq!(dtmf.stops(CodecId::Pcma), None);
        let quiet = Gate {
            silence_media: true,
            ..Gate::default()
        };
        assert!(quiet.silences(CodecId::Pcmu) && !quiet.silences(CodecId::TelephoneEvent));
        assert_eq!(quiet.stops(CodecId::Pcmu), None, "goes on silent");
        assert_eq!(
            quiet.stops(CodecId::Vp8),
            Some(DropReason::MediaBlocked),
            "no silence"
        );
        assert_eq!(quiet.stops(CodecId::TelephoneEvent), None);
        assert!(
            !Gate {
                block_media: true,
                ..quiet
            }
            .silences(CodecId::Pcmu),
            "blocked wins"
        );
    }

    #[test]
    fn silence_keeps_the_header_and_length_and_drops_padding() {
        let mut out = Vec::new();
        let mut speech = packet(0x80, &[0x12; 160]);
        assert!(silence_packet(&speech, 12, CodecId::Pcmu, &mut out));
        assert_eq!((&out[..12], &out[12..]), (&speech[..12], &[0xFF; 160][..]));
        // Padded: three octets of padding gone, the padding bit cleared.
        speech[0] |= 0x20;
        speech.extend_from_slice(&[0, 0, 3]);
        assert!(silence_packet(&speech, 12, CodecId::Pcma, &mut out));
        assert_eq!((out[0], out.len(), out[12]), (0x80, 12 + 160, 0xD5));
        assert!(silence_packet(&speech, 12, CodecId::G722, &mut out));
        assert_eq!(out.len(), 172);
        // Opus: a 20 ms SILK packet becomes a 20 ms CELT silence.
        assert!(silence_packet(
            &packet(0x80, &[0x0B, 1, 2, 3, 4]),
            12,
            CodecId::Opus,
            &mut out
        ));
        assert_eq!(secrelay_media::silence::opus_samples(&out[12..]), Some(960));
        assert!(silence_packet(
            &packet(0x80, &[0x40, 9]),
            12,
            CodecId::ComfortNoise,
            &mut out
        ));
        assert_eq!(&out[12..], &[127]);
        // No silence to write: video, AMR, a format only relayed; or no payload to read.
        for codec in [CodecId::Vp8, CodecId::Amr, CodecId::Other(7)] {
            assert!(!silence_packet(
                &packet(0x80, &[1; 20]),
                12,
                codec,
                &mut out
            ));
        }
        assert!(!silence_packet(
            &packet(0x80, &[]),
            12,
            CodecId::Opus,
            &mut out
        ));
        assert!(!silence_packet(
            &packet(0xA0, &[9]),
            12,
            CodecId::Pcmu,
            &mut out
        ));
    }
}
