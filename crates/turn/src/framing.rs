//! TURN over a byte stream (TCP, TLS): STUN messages and ChannelData back to back, ChannelData
//! padded to a multiple of 4 bytes (RFC 8656 §12.5). [`Framer`] cuts what a connection reads
//! into frames without copying them; a stream whose bytes are neither is not TURN, and the
//! connection is closed.

use std::ops::Range;

/// The largest frame: a STUN message or padded ChannelData with 65,535 bytes of value.
pub const MAX_FRAME: usize = 20 + 65_535 + 3;

/// The bytes at the start of a stream are not a TURN frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotTurn;

/// The length of the frame `buf` starts with: `Ok(Some(n))` when it holds all of it,
/// `Ok(None)` when more bytes are needed, `Err` when it is not a frame.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, NotTurn> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first & 0x80 != 0 {
        return Err(NotTurn);
    }
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
    let total = if first & 0x40 == 0 {
        if len % 4 != 0 {
            return Err(NotTurn);
        }
        20 + len
    } else {
        4 + ((len + 3) & !3)
    };
    Ok((buf.len() >= total).then_some(total))
}

/// A connection's read buffer, cut into frames.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for Framer {
    fn default() -> Self {
        Framer::new()
    }
}

/// Room kept free for a read.
const READ_ROOM: usize = 16 * 1024;

impl Framer {
    /// An empty buffer.
    pub fn new() -> Framer {
        Framer {
            buf: vec![0; READ_ROOM],
            start: 0,
            end: 0,
        }
    }

    /// A buffer that starts with `prefix` (bytes already read from the stream).
    pub fn with_prefix(prefix: &[u8]) -> Framer {
        let mut f = Framer::new();
        f.buf.resize(prefix.len().max(READ_ROOM), 0);
        f.buf[..prefix.len()].copy_from_slice(prefix);
        f.end = prefix.len();
        f
    }

    /// Where to read into: free room after the unconsumed bytes, made by moving them to the
    /// front (and growing to hold one whole frame at most).
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_ROOM / 2 {
            let want = (self.end + READ_ROOM).min(MAX_FRAME + READ_ROOM);
            self.buf.resize(want.max(self.buf.len()), 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`Framer::spare`].
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// The next whole frame's place in [`Framer::bytes`], if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Range<usize>>, NotTurn> {
        match frame_len(&self.buf[self.start..self.end])? {
            Some(n) => {
                let r = self.start..self.start + n;
                self.start += n;
                Ok(Some(r))
            }
            None => Ok(None),
        }
    }

    /// The buffer [`Framer::next_frame`] indexes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_however_the_bytes_arrive() {
        // A STUN header (no attributes), ChannelData of 5 bytes padded to 8, another STUN.
        let mut stream = Vec::new();
        stream.extend_from_slice(&[0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42]);
        stream.extend_from_slice(&[7; 12]);
        stream.extend_from_slice(&[0x40, 0x00, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0]);
        stream.extend_from_slice(&[0, 1, 0, 4, 0x21, 0x12, 0xa4, 0x42]);
        stream.extend_from_slice(&[8; 16]);
        for piece in [1usize, 3, 7, 100] {
            let mut f = Framer::new();
            let mut got = Vec::new();
            for chunk in stream.chunks(piece) {
                f.spare()[..chunk.len()].copy_from_slice(chunk);
                f.filled(chunk.len());
                while let Some(r) = f.next_frame().unwrap() {
                    got.push(f.bytes()[r].to_vec());
                }
            }
            assert_eq!(got.len(), 3, "pieces of {piece}");
            assert_eq!(got[0].len(), 20);
            assert_eq!(got[1], [0x40, 0x00, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0]);
            assert_eq!(got[2].len(), 24);
        }
    }

    #[test]
    fn what_is_not_turn_is_refused() {
        // 'G' (0x47) reads as a ChannelData header: streams are told apart from HTTP before
        // the framer sees them (by ALPN or the first byte, see the gateway's HTTPS listener).
        assert_eq!(frame_len(b"GET / HTTP/1.1"), Ok(None));
        assert_eq!(frame_len(&[0x80]), Err(NotTurn));
        assert_eq!(
            frame_len(&[0, 1, 0, 3]),
            Err(NotTurn),
            "STUN length not a multiple of 4"
        );
        assert_eq!(frame_len(&[]), Ok(None));
        let mut f = Framer::with_prefix(&[0xff, 0, 0, 0]);
        assert_eq!(f.next_frame(), Err(NotTurn));
    }

    #[test]
    fn the_largest_frame_fits() {
        let mut f = Framer::new();
        let mut left = 4 + 65_536;
        let mut first = true;
        while left > 0 {
            let room = f.spare();
            let n = room.len().min(left);
            if first {
                room[..4].copy_from_slice(&[0x40, 0x01, 0xff, 0xff]);
                first = false;
            }
            f.filled(n);
            left -= n;
        }
        assert_eq!(f.next_frame().unwrap(), Some(0..4 + 65_536));
    }
}
