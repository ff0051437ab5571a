//! The record layer of a datagram in the DTLS range, read before the engine sees it: the
//! headers only, never a payload under protection.
//!
//! A datagram carries one or more records (RFC 6347 §4.1, RFC 9147 §4). DTLS 1.0/1.2 records
//! and DTLS 1.3 plaintext records have a 13-byte header (type, version, epoch, sequence
//! number, length); DTLS 1.3 protected records have the unified header (first byte
//! `001CSLEE`), whose length may be left out when the record runs to the end of the datagram.
//! [`inspect`] walks the headers and says what kinds of record the datagram holds, or that it
//! is not DTLS records at all: what [`crate::Endpoint::handle_datagram`] decides a datagram's
//! fate from without trusting anything an engine keeps to itself.

/// A record's content type, as a plaintext header says it (RFC 6347 §4.1).
const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
/// The handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 1;
/// A plaintext record's header length.
const PLAIN_HEADER: usize = 13;

/// What the records of one datagram are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Records in it (at least one).
    pub records: usize,
    /// A record in epoch 0: in the clear, authenticated by nothing once keys are in use.
    pub plaintext: bool,
    /// Of those, a handshake record whose (first) message is a ClientHello.
    pub client_hello: bool,
    /// A record under an epoch's keys (epoch 1 or later, or a DTLS 1.3 unified header).
    pub protected: bool,
    /// Of those, a DTLS 1.0/1.2 handshake record (a Finished, or its retransmission).
    pub protected_handshake: bool,
    /// Of those, a DTLS 1.3 record whose content type is hidden by its protection.
    pub hidden_type: bool,
}

/// Why a datagram is not DTLS records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Nothing in it.
    Empty,
    /// A first byte that begins no record: a content type DTLS-SRTP has no use for (heartbeat,
    /// connection-id records, which it never negotiates) or none at all.
    Type(u8),
    /// A plaintext header whose version is not DTLS's (`0xfe..`).
    Version,
    /// A header cut short, or a length running past the datagram's end.
    Truncated,
    /// A record with no content.
    EmptyRecord,
}

/// One record's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// A plaintext header: the content type, the epoch, the fragment's first byte.
    Plain {
        content_type: u8,
        epoch: u16,
        first: u8,
    },
    /// A DTLS 1.3 unified header: the type is hidden.
    Unified,
}

/// The headers of `datagram`'s records, in order; an error ends the walk.
fn headers(datagram: &[u8]) -> impl Iterator<Item = Result<Header, Malformed>> + '_ {
    let mut rest = Some(datagram);
    std::iter::from_fn(move || {
        let r = rest?;
        let &first = r.first()?;
        let out = next_record(r, first);
        rest = match &out {
            Ok((_, tail)) => Some(tail),
            Err(_) => None,
        };
        Some(out.map(|(h, _)| h))
    })
}

/// The header of the record `r` starts with (`first`: its first byte), and what follows it.
fn next_record(r: &[u8], first: u8) -> Result<(Header, &[u8]), Malformed> {
    let (header, len_at, header_len) = match first {
        CHANGE_CIPHER_SPEC..=APPLICATION_DATA => {
            if r.len() < PLAIN_HEADER {
                return Err(Malformed::Truncated);
            }
            if r[1] != 0xfe {
                return Err(Malformed::Version);
            }
            let h = Header::Plain {
                content_type: first,
                epoch: u16::from_be_bytes([r[3], r[4]]),
                first: r.get(PLAIN_HEADER).copied().unwrap_or(0),
            };
            (h, Some(11), PLAIN_HEADER)
        }
        // The unified header without a connection id (bit C clear: 0b0010_xxxx).
        0x20..=0x2f => {
            let seq = if first & 0x08 != 0 { 2 } else { 1 };
            let length = first & 0x04 != 0;
            let len = 1 + seq + if length { 2 } else { 0 };
            (Header::Unified, length.then_some(1 + seq), len)
        }
        other => return Err(Malformed::Type(other)),
    };
    let body = match len_at {
        Some(at) => {
            let b = r.get(at..at + 2).ok_or(Malformed::Truncated)?;
            usize::from(u16::from_be_bytes([b[0], b[1]]))
        }
        // No length: the record runs to the end of the datagram.
        None => r
            .len()
            .checked_sub(header_len)
            .ok_or(Malformed::Truncated)?,
    };
    if body == 0 {
        return Err(Malformed::EmptyRecord);
    }
    let tail = r.get(header_len + body..).ok_or(Malformed::Truncated)?;
    Ok((header, tail))
}

/// Walks the records of `datagram` (see the [module documentation](self)).
pub fn inspect(datagram: &[u8]) -> Result<Shape, Malformed> {
    let mut shape = Shape::default();
    for h in headers(datagram) {
        shape.records += 1;
        match h? {
            Header::Plain {
                content_type,
                epoch: 0,
                first,
            } => {
                shape.plaintext = true;
                shape.client_hello |= content_type == HANDSHAKE && first == CLIENT_HELLO;
            }
            Header::Plain { content_type, .. } => {
                shape.protected = true;
                shape.protected_handshake |= content_type == HANDSHAKE;
            }
            Header::Unified => {
                shape.protected = true;
                shape.hidden_type = true;
            }
        }
    }
    if shape.records == 0 {
        return Err(Malformed::Empty);
    }
    Ok(shape)
}

/// Whether `datagram` is one or more whole alert records with plaintext headers (DTLS
/// 1.0/1.2: a DTLS 1.3 protected record hides its type, so it is not one).
pub(crate) fn only_alerts(datagram: &[u8]) -> bool {
    !datagram.is_empty()
        && headers(datagram).all(|h| {
            matches!(
                h,
                Ok(Header::Plain {
                    content_type: ALERT,
                    ..
                })
            )
        })
}

/// Whether `datagram` holds a plaintext-header record of epoch 1 or later (records walked up
/// to the first that does not parse).
pub(crate) fn carries_epoch1(datagram: &[u8]) -> bool {
    headers(datagram)
        .map_while(Result::ok)
        .any(|h| matches!(h, Header::Plain { epoch, .. } if epoch >= 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(content_type: u8, epoch: u16, fragment: &[u8]) -> Vec<u8> {
        let mut r = vec![content_type, 0xfe, 0xfd];
        r.extend_from_slice(&epoch.to_be_bytes());
        r.extend_from_slice(&[0, 0, 0, 0, 0, 7]);
        r.extend_from_slice(&(fragment.len() as u16).to_be_bytes());
        r.extend_from_slice(fragment);
        r
    }

    #[test]
    fn records_are_told_apart_by_their_headers() {
        let hello = record(HANDSHAKE, 0, &[CLIENT_HELLO, 0, 0, 1, 0]);
        let s = inspect(&hello).unwrap();
        assert!(s.plaintext && s.client_hello && !s.protected);
        assert_eq!(s.records, 1);

        let mut flight = record(HANDSHAKE, 0, &[16, 0, 0, 1, 0]);
        flight.extend(record(CHANGE_CIPHER_SPEC, 0, &[1]));
        flight.extend(record(HANDSHAKE, 1, &[0x55; 40]));
        let s = inspect(&flight).unwrap();
        assert_eq!(s.records, 3);
        assert!(s.plaintext && !s.client_hello && s.protected && s.protected_handshake);

        let alert = record(ALERT, 1, &[0x33; 26]);
        let s = inspect(&alert).unwrap();
        assert!(s.protected && !s.protected_handshake && !s.plaintext);
        assert!(only_alerts(&alert));
        assert!(!only_alerts(&flight));

        // DTLS 1.3: unified headers, with and without a length.
        let mut ciphertext = vec![0b0010_1101, 0x12, 0x34, 0, 20];
        ciphertext.extend([0x77; 20]);
        ciphertext.extend([0b0010_0001, 0x12, 0x99, 0x99]);
        let s = inspect(&ciphertext).unwrap();
        assert_eq!(s.records, 2);
        assert!(s.protected && s.hidden_type && !only_alerts(&ciphertext));
    }

    #[test]
    fn what_is_not_dtls_records_says_why() {
        assert_eq!(inspect(&[]), Err(Malformed::Empty));
        assert_eq!(inspect(&[24; 40]), Err(Malformed::Type(24)));
        assert_eq!(inspect(&[0x30; 40]), Err(Malformed::Type(0x30)));
        assert_eq!(inspect(&[HANDSHAKE, 0xfe]), Err(Malformed::Truncated));
        let mut r = record(ALERT, 0, &[2, 40]);
        r[1] = 0x03;
        assert_eq!(inspect(&r), Err(Malformed::Version));
        let mut r = record(ALERT, 0, &[2, 40]);
        r.pop();
        assert_eq!(inspect(&r), Err(Malformed::Truncated));
        let mut r = record(ALERT, 0, &[2, 40]);
        r.push(ALERT);
        assert_eq!(inspect(&r), Err(Malformed::Truncated));
        assert_eq!(inspect(&record(ALERT, 0, &[])), Err(Malformed::EmptyRecord));
        assert_eq!(inspect(&[0x20, 1]), Err(Malformed::EmptyRecord));
    }
}
