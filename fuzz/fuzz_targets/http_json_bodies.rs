#![no_main]

//! The HTTP API's JSON request bodies (`PATCH /api/rooms/{room}` mixing settings, `PUT
//! …/layer`, `POST /rooms/{room}/rtp/offer`, `PATCH …/participants/{id}` a participant's
//! gate, `POST …/participants/{id}/media` a file to play), parsed and checked as the handlers
//! do before
//! they act: never a panic; what is refused says why (the 400's reason), and a reason is one
//! line short enough for a response.

use libfuzzer_sys::fuzz_target;
use secrelay_gateway::server::fuzzing::http_json_body;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if let Err(why) = http_json_body(which, body) {
        assert_eq!(why.status().as_u16(), 400, "{why}");
        assert!(!why.reason().is_empty());
    }
});
