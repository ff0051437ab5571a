#![no_main]

//! AMR-NB and AMR-WB payloads from the network (RFC 4867), in both packings, each into one
//! decoder across the packets of one input, as for one stream: a payload either decodes to
//! 160 (NB) or 320 (WB) samples per frame of its table of contents, 1 to 12 frames, or is
//! the peer's fault and appends nothing. Skipped where the AMR libraries do not load.

use libfuzzer_sys::fuzz_target;
use secrelay_media::amr::{amr_available, Amr, Band, Packing, MAX_FRAMES};
use secrelay_media::Codec;

fuzz_target!(|data: &[u8]| {
    for band in [Band::Narrow, Band::Wide] {
        if amr_available(band).is_err() {
            continue;
        }
        for packing in [Packing::BandwidthEfficient, Packing::OctetAligned] {
            let mut amr = Amr::new(band).expect("AMR sets up").with_packing(packing);
            let per = band.frame_samples();
            // Packets: a length byte, then that many bytes.
            let mut rest = data;
            let mut pcm = Vec::new();
            while let Some((&len, tail)) = rest.split_first() {
                let n = usize::from(len).min(tail.len());
                let (packet, tail) = tail.split_at(n);
                rest = tail;
                pcm.clear();
                match amr.to_pcm(packet, &mut pcm) {
                    Ok(got) => {
                        assert_eq!(got, pcm.len());
                        assert!(got % per == 0, "{got} samples is not whole frames of {per}");
                        assert!((1..=MAX_FRAMES).contains(&(got / per)), "{got} samples");
                    }
                    Err(e) => {
                        assert!(e.is_peer_fault(), "{e}");
                        assert!(pcm.is_empty());
                        assert_eq!(amr.conceal(per, &mut pcm).unwrap(), per);
                    }
                }
            }
        }
    }
});
