#![no_main]

//! Codec decoders on payloads from the network: G.711 and G.722 decode every byte (to one
//! and two samples); Opus (one decoder across the packets of one input, as for one stream)
//! either decodes a packet to at most 120 ms or says the peer sent something malformed,
//! and appends nothing then. The silence written in an Opus packet's place (a silenced
//! participant's) lasts what the packet's TOC says it lasts, and decodes to zeros.

use libfuzzer_sys::fuzz_target;
use secrelay_media::g711::{Pcma, Pcmu};
use secrelay_media::g722::G722;
use secrelay_media::opus::Opus;
use secrelay_media::{silence, Codec};

fuzz_target!(|data: &[u8]| {
    let mut pcm = Vec::new();
    assert_eq!(Pcmu.to_pcm(data, &mut pcm).unwrap(), data.len());
    assert_eq!(Pcma.to_pcm(data, &mut pcm).unwrap(), data.len());
    assert_eq!(pcm.len(), 2 * data.len());
    pcm.clear();
    let mut g722 = G722::new();
    assert_eq!(g722.to_pcm(data, &mut pcm).unwrap(), 2 * data.len());

    // Packets: a length byte, then that many bytes.
    let mut opus = Opus::narrowband().expect("narrowband Opus sets up");
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (packet, tail) = tail.split_at(n);
        rest = tail;
        if let Some(samples) = silence::opus_samples(packet) {
            let mut quiet = Vec::new();
            if silence::opus(samples, &mut quiet) {
                assert_eq!(silence::opus_samples(&quiet), Some(samples));
                let mut zeros = Vec::new();
                let mut fresh = Opus::narrowband().expect("narrowband Opus sets up");
                fresh.to_pcm(&quiet, &mut zeros).expect("silence decodes");
                assert!(zeros.iter().all(|&s| s == 0));
            }
        }
        pcm.clear();
        match opus.to_pcm(packet, &mut pcm) {
            Ok(got) => {
                assert_eq!(got, pcm.len());
                assert!(got <= 960, "{got} samples is more than 120 ms at 8 kHz");
            }
            Err(e) => {
                assert!(e.is_peer_fault(), "{e}");
                assert!(pcm.is_empty());
                assert_eq!(opus.conceal(160, &mut pcm).unwrap(), 160);
                // FEC from whatever came: rebuilt or concealed, never more than asked.
                pcm.clear();
                assert_eq!(opus.recover(packet, 160, &mut pcm).unwrap(), 160);
            }
        }
    }
});
