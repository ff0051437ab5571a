#![no_main]

//! An `Authorization` header as the gateway's signaling reads it (the admin key, an access
//! token — a JWT checked for its key, algorithm, signature and times —, a room's token), then
//! every access decision for the caller it names: never a panic, whatever the bytes; a caller
//! is named only for a credential that verifies. The first byte picks the room the request
//! names (none, an open one, the token room, an ng call).

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::fuzzing::access_credential;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let room = match pick % 4 {
        0 => None,
        1 => Some("lobby"),
        2 => Some("tokened"),
        _ => Some("call:abc@host"),
    };
    if let Ok(caller) = access_credential(value, room) {
        assert!(!caller.is_empty());
    }
});
