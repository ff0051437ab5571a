//! The Data Channel Establishment Protocol (RFC 8832): the two messages, DATA_CHANNEL_OPEN and
//! DATA_CHANNEL_ACK, carried in SCTP with payload protocol identifier 50.
//!
//! [`parse`] reads what a peer sent and never panics: every length is checked against the
//! message, the label and protocol must be UTF-8, the channel type must be one RFC 8832 §8.2.2
//! defines, and nothing may follow the last field. [`encode_open`] and [`ACK`] write ours.
//!
//! ```text
//! DATA_CHANNEL_OPEN (RFC 8832 §5.1)
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Message Type |  Channel Type |            Priority           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Reliability Parameter                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Label Length          |       Protocol Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Label (Label Length bytes) then Protocol (Protocol Length)   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use std::fmt;
use std::time::Duration;

use crate::{ChannelSpec, Reliability};

/// The SCTP payload protocol identifier of DCEP messages (RFC 8832 §8.1).
pub const PPID: u32 = 50;

/// DATA_CHANNEL_ACK: the whole message is its type byte (RFC 8832 §5.2).
pub const ACK: [u8; 1] = [MSG_ACK];

const MSG_ACK: u8 = 0x02;
const MSG_OPEN: u8 = 0x03;
/// Type, channel type, priority, reliability parameter, label length, protocol length.
const OPEN_HEADER_LEN: usize = 12;
/// The channel type's bit for unordered delivery (RFC 8832 §5.1).
const UNORDERED: u8 = 0x80;
const RELIABLE: u8 = 0x00;
const PARTIAL_RELIABLE_REXMIT: u8 = 0x01;
const PARTIAL_RELIABLE_TIMED: u8 = 0x02;

/// A DCEP message as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// DATA_CHANNEL_OPEN: the peer opens a channel on the stream it arrived on.
    Open(ChannelSpec),
    /// DATA_CHANNEL_ACK: the peer accepted the channel we opened on this stream.
    Ack,
}

/// Why a DCEP message was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DcepError {
    /// No bytes at all.
    Empty,
    /// A message type RFC 8832 does not define.
    UnknownMessageType(u8),
    /// A channel type RFC 8832 does not define.
    UnknownChannelType(u8),
    /// The message ends before the fields it announces: `need` bytes, `have` present.
    Truncated {
        /// Bytes the header and its lengths call for.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Bytes follow the last field: `extra` of them.
    TrailingBytes {
        /// Bytes after the protocol field (or after the ACK's type byte).
        extra: usize,
    },
    /// The label is not UTF-8.
    LabelNotUtf8,
    /// The protocol is not UTF-8.
    ProtocolNotUtf8,
    /// (Encoding) the label is longer than the 16-bit length field allows.
    LabelTooLong(usize),
    /// (Encoding) the protocol is longer than the 16-bit length field allows.
    ProtocolTooLong(usize),
}

impl fmt::Display for DcepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DcepError::Empty => write!(f, "empty DCEP message"),
            DcepError::UnknownMessageType(t) => write!(f, "unknown DCEP message type {t:#04x}"),
            DcepError::UnknownChannelType(t) => write!(f, "unknown DCEP channel type {t:#04x}"),
            DcepError::Truncated { need, have } => {
                write!(
                    f,
                    "DCEP message truncated: {need} bytes needed, {have} present"
                )
            }
            DcepError::TrailingBytes { extra } => {
                write!(f, "{extra} bytes after the end of the DCEP message")
            }
            DcepError::LabelNotUtf8 => write!(f, "DCEP label is not UTF-8"),
            DcepError::ProtocolNotUtf8 => write!(f, "DCEP protocol is not UTF-8"),
            DcepError::LabelTooLong(n) => write!(f, "label of {n} bytes (at most 65535)"),
            DcepError::ProtocolTooLong(n) => write!(f, "protocol of {n} bytes (at most 65535)"),
        }
    }
}

impl std::error::Error for DcepError {}

/// Parses one DCEP message (the user data of one SCTP message with PPID 50).
pub fn parse(data: &[u8]) -> Result<Message, DcepError> {
    match data.first() {
        None => Err(DcepError::Empty),
        Some(&MSG_ACK) if data.len() == 1 => Ok(Message::Ack),
        Some(&MSG_ACK) => Err(DcepError::TrailingBytes {
            extra: data.len() - 1,
        }),
        Some(&MSG_OPEN) => parse_open(data).map(Message::Open),
        Some(&other) => Err(DcepError::UnknownMessageType(other)),
    }
}

fn parse_open(data: &[u8]) -> Result<ChannelSpec, DcepError> {
    let header: &[u8; OPEN_HEADER_LEN] = data
        .get(..OPEN_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(DcepError::Truncated {
            need: OPEN_HEADER_LEN,
            have: data.len(),
        })?;
    let channel_type = header[1];
    let priority = u16::from_be_bytes([header[2], header[3]]);
    let parameter = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let label_len = usize::from(u16::from_be_bytes([header[8], header[9]]));
    let protocol_len = usize::from(u16::from_be_bytes([header[10], header[11]]));
    let need = OPEN_HEADER_LEN + label_len + protocol_len;
    if data.len() < need {
        return Err(DcepError::Truncated {
            need,
            have: data.len(),
        });
    }
    if data.len() > need {
        return Err(DcepError::TrailingBytes {
            extra: data.len() - need,
        });
    }
    let reliability = match channel_type & !UNORDERED {
        RELIABLE => Reliability::Reliable,
        PARTIAL_RELIABLE_REXMIT => Reliability::MaxRetransmits(parameter),
        PARTIAL_RELIABLE_TIMED => Reliability::MaxLifetime(Duration::from_millis(parameter.into())),
        _ => return Err(DcepError::UnknownChannelType(channel_type)),
    };
    let label_end = OPEN_HEADER_LEN + label_len;
    let label = std::str::from_utf8(&data[OPEN_HEADER_LEN..label_end])
        .map_err(|_| DcepError::LabelNotUtf8)?;
    let protocol =
        std::str::from_utf8(&data[label_end..need]).map_err(|_| DcepError::ProtocolNotUtf8)?;
    Ok(ChannelSpec {
        label: label.to_owned(),
        protocol: protocol.to_owned(),
        ordered: channel_type & UNORDERED == 0,
        reliability,
        priority,
    })
}

/// Writes the DATA_CHANNEL_OPEN that announces `spec`. A lifetime is sent in whole
/// milliseconds (rounded down, at most `u32::MAX`).
pub fn encode_open(spec: &ChannelSpec) -> Result<Vec<u8>, DcepError> {
    let label_len =
        u16::try_from(spec.label.len()).map_err(|_| DcepError::LabelTooLong(spec.label.len()))?;
    let protocol_len = u16::try_from(spec.protocol.len())
        .map_err(|_| DcepError::ProtocolTooLong(spec.protocol.len()))?;
    let (kind, parameter) = match spec.reliability {
        Reliability::Reliable => (RELIABLE, 0),
        Reliability::MaxRetransmits(n) => (PARTIAL_RELIABLE_REXMIT, n),
        Reliability::MaxLifetime(d) => (
            PARTIAL_RELIABLE_TIMED,
            u32::try_from(d.as_millis()).unwrap_or(u32::MAX),
        ),
    };
    let channel_type = if spec.ordered { kind } else { kind | UNORDERED };
    let mut out = Vec::with_capacity(OPEN_HEADER_LEN + spec.label.len() + spec.protocol.len());
    out.push(MSG_OPEN);
    out.push(channel_type);
    out.extend_from_slice(&spec.priority.to_be_bytes());
    out.extend_from_slice(&parameter.to_be_bytes());
    out.extend_from_slice(&label_len.to_be_bytes());
    out.extend_from_slice(&protocol_len.to_be_bytes());
    out.extend_from_slice(spec.label.as_bytes());
    out.extend_from_slice(spec.protocol.as_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ordered: bool, reliability: Reliability) -> ChannelSpec {
        ChannelSpec {
            label: "chat".into(),
            protocol: "json".into(),
            ordered,
            reliability,
            priority: 256,
        }
    }

    #[test]
    fn open_round_trips_every_channel_type() {
        for ordered in [true, false] {
            for reliability in [
                Reliability::Reliable,
                Reliability::MaxRetransmits(0),
                Reliability::MaxRetransmits(7),
                Reliability::MaxLifetime(Duration::from_millis(1500)),
            ] {
                let s = spec(ordered, reliability);
                let bytes = encode_open(&s).unwrap();
                assert_eq!(parse(&bytes), Ok(Message::Open(s)));
            }
        }
    }

    #[test]
    fn open_matches_rfc_8832_layout() {
        // An unordered channel, 3 retransmits, priority 512, label "a", protocol "bc".
        let s = ChannelSpec {
            label: "a".into(),
            protocol: "bc".into(),
            ordered: false,
            reliability: Reliability::MaxRetransmits(3),
            priority: 512,
        };
        let wire = [
            0x03, 0x81, 0x02, 0x00, 0, 0, 0, 3, 0, 1, 0, 2, b'a', b'b', b'c',
        ];
        assert_eq!(encode_open(&s).unwrap(), wire);
        assert_eq!(parse(&wire), Ok(Message::Open(s)));
    }

    #[test]
    fn ack_is_one_byte() {
        assert_eq!(parse(&ACK), Ok(Message::Ack));
        assert_eq!(
            parse(&[0x02, 0]),
            Err(DcepError::TrailingBytes { extra: 1 })
        );
    }

    #[test]
    fn refuses_what_rfc_8832_does_not_define() {
        assert_eq!(parse(&[]), Err(DcepError::Empty));
        assert_eq!(parse(&[0x04]), Err(DcepError::UnknownMessageType(4)));
        let mut open = encode_open(&spec(true, Reliability::Reliable)).unwrap();
        open[1] = 0x03;
        assert_eq!(parse(&open), Err(DcepError::UnknownChannelType(3)));
        open[1] = 0x7f;
        assert_eq!(parse(&open), Err(DcepError::UnknownChannelType(0x7f)));
    }

    #[test]
    fn lengths_must_match_the_message() {
        let open = encode_open(&spec(true, Reliability::Reliable)).unwrap();
        for cut in 0..open.len() {
            assert!(parse(&open[..cut]).is_err(), "prefix of {cut} bytes parsed");
        }
        let need = open.len();
        assert_eq!(
            parse(&open[..10]),
            Err(DcepError::Truncated { need: 12, have: 10 })
        );
        assert_eq!(
            parse(&open[..need - 1]),
            Err(DcepError::Truncated {
                need,
                have: need - 1
            })
        );
        let mut long = open.clone();
        long.push(0);
        assert_eq!(parse(&long), Err(DcepError::TrailingBytes { extra: 1 }));
        // A label length that runs past the end.
        let mut lying = open;
        lying[9] = 200;
        assert!(matches!(parse(&lying), Err(DcepError::Truncated { .. })));
    }

    #[test]
    fn label_and_protocol_must_be_utf8() {
        let mut open = encode_open(&spec(true, Reliability::Reliable)).unwrap();
        open[12] = 0xff;
        assert_eq!(parse(&open), Err(DcepError::LabelNotUtf8));
        let mut open = encode_open(&spec(true, Reliability::Reliable)).unwrap();
        let last = open.len() - 1;
        open[last] = 0xc3;
        assert_eq!(parse(&open), Err(DcepError::ProtocolNotUtf8));
    }

    #[test]
    fn encoding_refuses_what_the_length_fields_cannot_hold() {
        let mut s = spec(true, Reliability::Reliable);
        s.label = "x".repeat(65_536);
        assert_eq!(encode_open(&s), Err(DcepError::LabelTooLong(65_536)));
        s.label = "x".repeat(65_535);
        s.protocol = "y".repeat(70_000);
        assert_eq!(encode_open(&s), Err(DcepError::ProtocolTooLong(70_000)));
        s.protocol = "y".repeat(65_535);
        let bytes = encode_open(&s).unwrap();
        assert_eq!(parse(&bytes), Ok(Message::Open(s)));
    }

    #[test]
    fn lifetime_is_sent_in_whole_milliseconds() {
        let mut s = spec(
            false,
            Reliability::MaxLifetime(Duration::from_micros(2_999)),
        );
        let bytes = encode_open(&s).unwrap();
        s.reliability = Reliability::MaxLifetime(Duration::from_millis(2));
        assert_eq!(parse(&bytes), Ok(Message::Open(s)));
        let huge = spec(
            true,
            Reliability::MaxLifetime(Duration::from_secs(u64::MAX)),
        );
        let bytes = encode_open(&huge).unwrap();
        assert_eq!(&bytes[4..8], &u32::MAX.to_be_bytes());
    }
}
