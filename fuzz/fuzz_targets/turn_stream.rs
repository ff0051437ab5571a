#![no_main]

// A TURN client's byte stream (TCP, TLS), read in arbitrary pieces, cut into frames and
// handled.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (cuts, stream) = data.split_at(data.len().min(4));
    let _ = secrelay_turn::fuzzing::stream(stream, cuts);
});
