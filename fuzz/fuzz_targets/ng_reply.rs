#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_wire::bencode::{ng_decode, ng_encode, Bencode};

fuzz_target!(|data: &[u8]| {
    // An rtpengine ng reply off the network: decoding never panics, never recurses without
    // bound, and what decodes re-encodes to something that decodes to the same value.
    if let Ok((cookie, body)) = ng_decode(data) {
        let _ = (
            body.get("result"),
            body.get("sdp").and_then(Bencode::as_text),
        );
        let cookie = String::from_utf8_lossy(cookie).replace(' ', "_");
        let again = ng_encode(&cookie, &body);
        let (_, back) = ng_decode(&again).expect("our own encoding decodes");
        // Dictionaries are encoded sorted, so compare the re-encodings, not the trees.
        let mut a = Vec::new();
        let mut b = Vec::new();
        body.encode(&mut a);
        back.encode(&mut b);
        assert_eq!(a, b);
    }
});
