//! Data-channel messages between nodes: a room's messages cross a link in its control
//! connection (TLS, in order, reliable, as the channels they came on may be), as JSON frames of
//! [`WireData`], the bytes in base64. A frame holds at most [`FRAME_DATA`] bytes of messages
//! (the reader takes frames of at most 1 MiB); a batch is cut into as many frames as that takes,
//! in order, and a single message larger than that does not cross (it is counted).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use secrelay_core::leg::DataMessage;
use secrelay_datachannel::{ChannelSpec, MessageKind, Reliability};
use serde::{Deserialize, Serialize};

/// The most message bytes one frame carries (base64 makes them a third larger).
pub(crate) const FRAME_DATA: usize = 512 << 10;

/// One message as a link carries it: its channel's settings and its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WireData {
    label: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    protocol: String,
    ordered: bool,
    reliability: WireReliability,
    priority: u16,
    binary: bool,
    /// The message, base64.
    data: String,
}

/// A channel's [`Reliability`] on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireReliability {
    Reliable,
    MaxRetransmits(u32),
    MaxLifetimeMs(u64),
}

impl From<&DataMessage> for WireData {
    fn from(m: &DataMessage) -> WireData {
        let s = &m.spec;
        WireData {
            label: s.label.clone(),
            protocol: s.protocol.clone(),
            ordered: s.ordered,
            reliability: match s.reliability {
                Reliability::Reliable => WireReliability::Reliable,
                Reliability::MaxRetransmits(n) => WireReliability::MaxRetransmits(n),
                Reliability::MaxLifetime(d) => {
                    WireReliability::MaxLifetimeMs(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }
            },
            priority: s.priority,
            binary: m.kind == MessageKind::Binary,
            data: base64::engine::general_purpose::STANDARD.encode(&m.data),
        }
    }
}

impl WireData {
    /// The message, `None` when its bytes are not base64 (the other node's bug: dropped).
    fn message(self) -> Option<DataMessage> {
        let data = base64::engine::general_purpose::STANDARD
            .decode(self.data.as_bytes())
            .ok()?;
        let reliability = match self.reliability {
            WireReliability::Reliable => Reliability::Reliable,
            WireReliability::MaxRetransmits(n) => Reliability::MaxRetransmits(n),
            WireReliability::MaxLifetimeMs(ms) => {
                Reliability::MaxLifetime(Duration::from_millis(ms))
            }
        };
        Some(DataMessage {
            spec: Arc::new(ChannelSpec {
                label: self.label,
                protocol: self.protocol,
                ordered: self.ordered,
                reliability,
                priority: self.priority,
            }),
            kind: if self.binary {
                MessageKind::Binary
            } else {
                MessageKind::Text
            },
            data,
        })
    }
}

/// `msgs` cut into frames of at most [`FRAME_DATA`] message bytes each, in order, and how many
/// were left out (each larger than a frame).
pub(crate) fn frames(msgs: &[DataMessage]) -> (Vec<Vec<WireData>>, u64) {
    let (mut frames, mut left_out) = (Vec::new(), 0);
    let mut frame: Vec<WireData> = Vec::new();
    let mut bytes = 0;
    for m in msgs {
        if m.data.len() > FRAME_DATA {
            left_out += 1;
            continue;
        }
        if bytes + m.data.len() > FRAME_DATA && !frame.is_empty() {
            frames.push(std::mem::take(&mut frame));
            bytes = 0;
        }
        bytes += m.data.len();
        frame.push(WireData::from(m));
    }
    if !frame.is_empty() {
        frames.push(frame);
    }
    (frames, left_out)
}

/// The messages of a frame another node sent, and how many of them did not read.
pub(crate) fn messages(wire: Vec<WireData>) -> (Vec<DataMessage>, u64) {
    let n = wire.len();
    let msgs: Vec<DataMessage> = wire.into_iter().filter_map(WireData::message).collect();
    let bad = (n - msgs.len()) as u64;
    (msgs, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(label: &str, reliability: Reliability, kind: MessageKind, len: usize) -> DataMessage {
        DataMessage {
            spec: Arc::new(ChannelSpec {
                label: label.into(),
                protocol: "p".into(),
                ordered: false,
                reliability,
                priority: 512,
            }),
            kind,
            data: (0..len).map(|i| (i % 251) as u8).collect(),
        }
    }

    #[test]
    fn messages_cross_as_they_were_sent_in_frames_of_bounded_size() {
        let sent = vec![
            msg("chat", Reliability::Reliable, MessageKind::Text, 10),
            msg(
                "lossy",
                Reliability::MaxRetransmits(0),
                MessageKind::Binary,
                300_000,
            ),
            msg(
                "timed",
                Reliability::MaxLifetime(Duration::from_millis(250)),
                MessageKind::Binary,
                300_000,
            ),
            msg(
                "huge",
                Reliability::Reliable,
                MessageKind::Binary,
                FRAME_DATA + 1,
            ),
            msg("chat", Reliability::Reliable, MessageKind::Text, 0),
        ];
        let (frames, left_out) = frames(&sent);
        assert_eq!(left_out, 1, "the message larger than a frame");
        assert_eq!(
            frames.len(),
            2,
            "{:?}",
            frames.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let mut got = Vec::new();
        for f in frames {
            let json = serde_json::to_vec(&f).unwrap();
            assert!(json.len() < 1 << 20, "a frame of {} bytes", json.len());
            let (msgs, bad) = messages(serde_json::from_slice(&json).unwrap());
            assert_eq!(bad, 0);
            got.extend(msgs);
        }
        let expected: Vec<DataMessage> = sent
            .into_iter()
            .filter(|m| m.data.len() <= FRAME_DATA)
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_message_whose_bytes_are_not_base64_is_dropped() {
        let mut w = WireData::from(&msg("chat", Reliability::Reliable, MessageKind::Text, 4));
        w.data = "not base64!".into();
        let ok = WireData::from(&msg("chat", Reliability::Reliable, MessageKind::Text, 4));
        let (msgs, bad) = messages(vec![w, ok]);
        assert_eq!((msgs.len(), bad), (1, 1));
    }
}
