#![no_main]

// TURN messages from clients (datagrams and stream frames, allocated or not) and datagrams
// from peers, through the embedded TURN server's core.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    secrelay_turn::fuzzing::messages(data);
});
