#![no_main]

//! What one cluster node reads from another through the node pipes: a media datagram (its
//! header read, then opened with the link's key: never taken unless its tag checks) or a
//! control frame of the link's TLS connection (JSON). Never a panic, whatever the bytes. The
//! first byte picks which.

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::fuzzing::node_pipe;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let _ = node_pipe(pick, rest);
});
