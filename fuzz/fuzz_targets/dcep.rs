//! The DCEP parser (RFC 8832) every DATA_CHANNEL_OPEN and DATA_CHANNEL_ACK from a peer goes
//! through (`secrelay_datachannel::dcep::parse`): never panics, and what it accepts encodes back
//! to the same bytes (bar a reliable channel's reliability parameter, which RFC 8832 §5.1 says
//! is ignored and ours writes as 0).
#![no_main]

use libfuzzer_sys::fuzz_target;
use secrelay_datachannel::dcep::{self, Message};
use secrelay_datachannel::Reliability;

fuzz_target!(|data: &[u8]| {
    match dcep::parse(data) {
        Ok(Message::Ack) => assert_eq!(data, dcep::ACK),
        Ok(Message::Open(spec)) => {
            let again = dcep::encode_open(&spec).expect("a parsed OPEN encodes");
            assert_eq!(again.len(), data.len());
            if spec.reliability == Reliability::Reliable {
                assert_eq!(again[..4], data[..4]);
                assert_eq!(again[8..], data[8..]);
            } else {
                assert_eq!(again, data);
            }
            assert_eq!(dcep::parse(&again), Ok(Message::Open(spec)));
        }
        Err(_) => {}
    }
});
