#![no_main]

//! A call's state as a cluster node reads it from the directory (Redis): in clear (`clear1:`
//! and JSON) or sealed (`sealed1:` and base64 of an AES-256-GCM box). Never a panic, whatever
//! the bytes; a state is taken only for its own call-id. The first byte picks the form; for
//! the clear form the prefix is added, so the fuzzer works on the JSON.

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::fuzzing::call_state;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let rest = String::from_utf8_lossy(rest);
    let (sealed, text) = match pick % 3 {
        0 => (false, format!("clear1:{rest}")),
        1 => (true, format!("sealed1:{rest}")),
        _ => (pick & 0x80 != 0, rest.into_owned()),
    };
    if let Ok((call_id, _)) = call_state(sealed, &text) {
        assert_eq!(call_id, "c1");
    }
});
