//! A node pipe's media datagram (sans-IO): a 40-byte header, then the packet sealed with
//! AES-128-GCM under the key the receiving node drew for the link and sent over the link's
//! mutually authenticated TLS connection. The header is authenticated with it (the AEAD's
//! associated data): nothing of a datagram is taken before its tag checks.
//!
//! ```text
//!  0      version (1)
//!  1      kind: 0 a publisher's packet (home to replica), 1 a mirror's RTCP (replica to home)
//!  2..6   link: the receiver's name for the link (the key to open it with)
//!  6..14  counter: the sender's count on the link (the nonce; never twice under one key)
//!  14..16 worker: the receiving node's worker it is for
//!  16..38 the publisher's key, in its home's terms (`PipeKey::encode`)
//!  38, 39 its simulcast section and layer (255, 255: none)
//!  40..   the packet, sealed; the 16-byte tag last
//! ```
//!
//! The receiver keeps a window of the last 1,024 counters per link: a datagram seen before,
//! or older than the window, is dropped (a replay).

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use secrelay_core::leg::{PipeKey, PIPE_KEY_LEN};

/// The header's length.
pub const HEADER_LEN: usize = 16 + PIPE_KEY_LEN + 2;
/// The tag's length.
pub const TAG_LEN: usize = 16;
/// A link key's length (AES-128).
pub const KEY_LEN: usize = 16;
const VERSION: u8 = 1;
/// Counters remembered behind the highest.
const WINDOW: u64 = 1024;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A publisher's packet (plain RTP), home to replica.
    Media,
    /// A mirror's RTCP about its publisher, replica to home.
    Feedback,
}

/// A datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What it carries.
    pub kind: Kind,
    /// The receiver's name for the link.
    pub link: u32,
    /// The sender's count on the link.
    pub counter: u64,
    /// The receiving node's worker it is for.
    pub worker: u16,
    /// The publisher, in its home's terms.
    pub key: PipeKey,
    /// Its simulcast section and layer, if it is a layer's.
    pub layer: Option<(u8, u8)>,
}

impl Header {
    fn write(&self, b: &mut [u8; HEADER_LEN]) {
        b[0] = VERSION;
        b[1] = match self.kind {
            Kind::Media => 0,
            Kind::Feedback => 1,
        };
        b[2..6].copy_from_slice(&self.link.to_be_bytes());
        b[6..14].copy_from_slice(&self.counter.to_be_bytes());
        b[14..16].copy_from_slice(&self.worker.to_be_bytes());
        b[16..16 + PIPE_KEY_LEN].copy_from_slice(&self.key.encode());
        let (g, k) = self.layer.unwrap_or((u8::MAX, u8::MAX));
        b[HEADER_LEN - 2] = g;
        b[HEADER_LEN - 1] = k;
    }

    /// The header of `datagram`, unauthenticated (for the link it names); `None` when it is
    /// too short to be one, of another version or kind.
    pub fn read(datagram: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = datagram.get(..HEADER_LEN)?.try_into().ok()?;
        if b[0] != VERSION || datagram.len() < HEADER_LEN + TAG_LEN {
            return None;
        }
        let kind = match b[1] {
            0 => Kind::Media,
            1 => Kind::Feedback,
            _ => return None,
        };
        let mut counter = [0u8; 8];
        counter.copy_from_slice(&b[6..14]);
        let mut key = [0u8; PIPE_KEY_LEN];
        key.copy_from_slice(&b[16..16 + PIPE_KEY_LEN]);
        let layer = match (b[HEADER_LEN - 2], b[HEADER_LEN - 1]) {
            (u8::MAX, u8::MAX) => None,
            gk => Some(gk),
        };
        Some(Header {
            kind,
            link: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
            counter: u64::from_be_bytes(counter),
            worker: u16::from_be_bytes([b[14], b[15]]),
            key: PipeKey::decode(&key),
            layer,
        })
    }
}

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// One direction of a link's key: what seals (at the sender) or opens (at the receiver).
pub struct LinkKey(LessSafeKey);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

impl LinkKey {
    /// The key of `bytes` (16).
    pub fn new(bytes: &[u8; KEY_LEN]) -> LinkKey {
        let key = UnboundKey::new(&AES_128_GCM, bytes).expect("a 16-byte AES-128 key");
        LinkKey(LessSafeKey::new(key))
    }

    /// Writes the datagram of `header` and `packet` into `out` (cleared first).
    pub fn seal(&self, header: &Header, packet: &[u8], out: &mut Vec<u8>) {
        let mut h = [0u8; HEADER_LEN];
        header.write(&mut h);
        out.clear();
        out.extend_from_slice(&h);
        out.extend_from_slice(packet);
        let (head, body) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .0
            .seal_in_place_separate_tag(nonce(header.counter), Aad::from(&*head), body)
            .expect("a packet far below AES-GCM's limit");
        out.extend_from_slice(tag.as_ref());
    }

    /// Opens `datagram` (whose header is `header`, read from it) in place: the packet's range
    /// in it, or `None` when its tag does not check.
    pub fn open(&self, header: &Header, datagram: &mut [u8]) -> Option<std::ops::Range<usize>> {
        let (head, body) = datagram.split_at_mut(HEADER_LEN);
        let plain = self
            .0
            .open_in_place(nonce(header.counter), Aad::from(&*head), body)
            .ok()?;
        Some(HEADER_LEN..HEADER_LEN + plain.len())
    }
}

/// The counters a link's receiver has taken: the highest and a window of 1,024 behind it.
#[derive(Debug, Default)]
pub struct Replay {
    top: u64,
    seen: [u64; (WINDOW / 64) as usize],
    any: bool,
}

impl Replay {
    /// Whether `counter` may be taken (not seen, not older than the window): checked before
    /// the tag, recorded ([`Replay::take`]) after.
    pub fn fresh(&self, counter: u64) -> bool {
        if !self.any || counter > self.top {
            return true;
        }
        let behind = self.top - counter;
        behind < WINDOW && !self.bit(counter)
    }

    /// Records `counter` as taken (its datagram authenticated).
    pub fn take(&mut self, counter: u64) {
        if !self.any {
            self.any = true;
            self.top = counter;
        } else if counter > self.top {
            let ahead = counter - self.top;
            if ahead >= WINDOW {
                self.seen = [0; (WINDOW / 64) as usize];
            } else {
                for c in self.top + 1..counter {
                    self.clear(c);
                }
            }
            self.top = counter;
        }
        self.set(counter);
    }

    fn slot(counter: u64) -> (usize, u64) {
        let i = counter % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn bit(&self, counter: u64) -> bool {
        let (w, m) = Self::slot(counter);
        self.seen[w] & m != 0
    }

    fn set(&mut self, counter: u64) {
        let (w, m) = Self::slot(counter);
        self.seen[w] |= m;
    }

    fn clear(&mut self, counter: u64) {
        let (w, m) = Self::slot(counter);
        self.seen[w] &= !m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(counter: u64) -> Header {
        Header {
            kind: Kind::Media,
            link: 7,
            counter,
            worker: 1,
            key: PipeKey::decode(&[3; PIPE_KEY_LEN]),
            layer: Some((0, 2)),
        }
    }

    #[test]
    fn a_sealed_datagram_opens_with_its_key_and_header_only() {
        let key = LinkKey::new(&[9; KEY_LEN]);
        let mut d = Vec::new();
        key.seal(&header(5), b"\x80\x60rtp packet", &mut d);
        assert_eq!(d.len(), HEADER_LEN + 12 + TAG_LEN);
        let h = Header::read(&d).unwrap();
        assert_eq!(h, header(5));
        let mut copy = d.clone();
        let r = key.open(&h, &mut copy).unwrap();
        assert_eq!(&copy[r], b"\x80\x60rtp packet");
        // Another key, a changed header byte or a changed packet byte: refused.
        assert!(LinkKey::new(&[8; KEY_LEN])
            .open(&h, &mut d.clone())
            .is_none());
        for at in [1, 3, 15, 20, 39, 41, d.len() - 1] {
            let mut bad = d.clone();
            bad[at] ^= 1;
            let opened = Header::read(&bad).and_then(|h| key.open(&h, &mut bad));
            assert!(opened.is_none(), "byte {at} changed, still opened");
        }
    }

    #[test]
    fn short_or_foreign_datagrams_have_no_header() {
        let mut d = Vec::new();
        LinkKey::new(&[1; KEY_LEN]).seal(&header(1), b"", &mut d);
        assert!(Header::read(&d).is_some());
        assert!(Header::read(&d[..d.len() - 1]).is_none());
        let mut v2 = d.clone();
        v2[0] = 2;
        assert!(Header::read(&v2).is_none());
        let mut kind = d.clone();
        kind[1] = 9;
        assert!(Header::read(&kind).is_none());
        assert!(Header::read(&[]).is_none());
    }

    #[test]
    fn the_replay_window_takes_each_counter_once_and_nothing_older_than_it() {
        let mut r = Replay::default();
        assert!(r.fresh(100));
        r.take(100);
        assert!(!r.fresh(100));
        assert!(r.fresh(99), "older, inside the window, not seen");
        r.take(99);
        assert!(!r.fresh(99));
        r.take(1100);
        assert!(!r.fresh(76), "1,024 behind the highest: too old");
        assert!(r.fresh(1099) && r.fresh(77));
        assert!(!r.fresh(1100));
        // A jump past the window forgets everything behind it.
        r.take(5000);
        assert!(r.fresh(4999) && !r.fresh(5000) && !r.fresh(3000));
        // Counters wrap around the window's slots without ghosts of older ones.
        let mut r = Replay::default();
        r.take(0);
        r.take(WINDOW);
        assert!(!r.fresh(0), "too old");
        assert!(r.fresh(WINDOW - 1));
    }
}
