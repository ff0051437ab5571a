//! RFC 4571 framing: datagrams (STUN, DTLS, SRTP) carried over a TCP connection, each
//! preceded by its length as a 16-bit big-endian number. ICE over TCP (RFC 6544) uses it, so
//! a browser that cannot send UDP reaches the media port over TCP with the same datagrams.
//!
//! Sans-IO: [`next_frame`] reads the first complete frame of a receive buffer, whatever piece
//! of the stream the buffer ends in; [`write_frame`] appends one to a send buffer.

/// The largest datagram a frame carries (its length field is 16 bits).
pub const MAX_FRAME: usize = u16::MAX as usize;

/// A datagram too long for one frame (more than [`MAX_FRAME`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong(pub usize);

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a datagram of {} bytes does not fit an RFC 4571 frame (at most {MAX_FRAME})",
            self.0
        )
    }
}

impl std::error::Error for TooLong {}

/// The first complete frame at the start of `buf`: its datagram and the bytes it took (length
/// field included). `None` while the frame is incomplete (read more of the stream). A frame
/// of length zero is complete and empty.
pub fn next_frame(buf: &[u8]) -> Option<(&[u8], usize)> {
    let len = usize::from(u16::from_be_bytes([*buf.first()?, *buf.get(1)?]));
    let datagram = buf.get(2..2 + len)?;
    Some((datagram, 2 + len))
}

/// Appends `datagram`, framed, to `out`.
pub fn write_frame(out: &mut Vec<u8>, datagram: &[u8]) -> Result<(), TooLong> {
    let len = u16::try_from(datagram.len()).map_err(|_| TooLong(datagram.len()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(datagram);
    Ok(())
}

/// The frames of a byte stream delivered in pieces: what a connection's reader sees. Feeds
/// `stream` to a buffer in pieces of the lengths `cuts` gives (cycling, each 1–256 bytes) and
/// takes every complete frame after each piece; the datagrams, in order. For the fuzz target
/// and the tests: the pieces must not change the frames.
pub fn frames_of_pieces(stream: &[u8], cuts: &[u8]) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < stream.len() {
        let piece = cuts
            .get(k % cuts.len().max(1))
            .map_or(stream.len(), |c| usize::from(*c) + 1);
        let end = (at + piece).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        k += 1;
        let mut taken = 0;
        while let Some((d, n)) = next_frame(&buf[taken..]) {
            out.push(d.to_vec());
            taken += n;
        }
        buf.drain(..taken);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_written_are_read_back_whatever_the_pieces() {
        let datagrams: Vec<Vec<u8>> = vec![
            vec![0x00, 0x01, 0x00, 0x00],
            Vec::new(),
            vec![0x16; 1200],
            vec![0x80; MAX_FRAME],
        ];
        let mut stream = Vec::new();
        for d in &datagrams {
            write_frame(&mut stream, d).unwrap();
        }
        for cuts in [&[][..], &[0], &[1, 200, 7], &[255]] {
            assert_eq!(frames_of_pieces(&stream, cuts), datagrams, "cuts {cuts:?}");
        }
    }

    #[test]
    fn an_incomplete_frame_is_not_read_and_a_long_datagram_is_refused() {
        assert_eq!(next_frame(&[]), None);
        assert_eq!(next_frame(&[0]), None);
        assert_eq!(next_frame(&[0, 3, 1, 2]), None);
        assert_eq!(next_frame(&[0, 2, 1, 2, 9]), Some((&[1u8, 2][..], 4)));
        let mut out = Vec::new();
        assert_eq!(
            write_frame(&mut out, &vec![0; MAX_FRAME + 1]),
            Err(TooLong(MAX_FRAME + 1))
        );
        assert!(out.is_empty(), "nothing written for a refused datagram");
    }
}
