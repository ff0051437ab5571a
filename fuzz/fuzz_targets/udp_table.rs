#![no_main]

//! The kernel's UDP socket table as the gateway reads it for `/metrics` (and the lab for its
//! floods): whatever the text, every line is read or passed over, never a panic.

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::process::udp_table;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for row in udp_table(&text) {
        std::hint::black_box(row);
    }
});
