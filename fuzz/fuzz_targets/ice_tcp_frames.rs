#![no_main]

// An ICE-TCP peer's byte stream (RFC 4571 frames), read in arbitrary pieces: the frames found
// must be the same whatever the pieces.
use libfuzzer_sys::fuzz_target;
use secrelay_wire::framing::frames_of_pieces;

fuzz_target!(|data: &[u8]| {
    let (cuts, stream) = data.split_at(data.len().min(4));
    let whole = frames_of_pieces(stream, &[]);
    assert_eq!(frames_of_pieces(stream, cuts), whole);
});
