//! The 16-lane SHA-1 kernel gives exactly what the library's compression function gives, lane
//! by lane, on random states and blocks (and on the SHA-1 initial state with a padded "abc").

use proptest::prelude::*;
use secrelay_srtp::simd::sha1_x16::{
    accelerated, compress_portable, compress_x16, compress_x16_soa, LANES,
};

const IV: [u32; 5] = [
    0x6745_2301,
    0xEFCD_AB89,
    0x98BA_DCFE,
    0x1032_5476,
    0xC3D2_E1F0,
];

#[test]
fn abc_in_every_lane_is_the_fips_digest() {
    eprintln!(
        "AVX-512 path: {}",
        if accelerated() {
            "yes"
        } else {
            "no (portable path tested)"
        }
    );
    let mut block = [0u8; 64];
    block[..3].copy_from_slice(b"abc");
    block[3] = 0x80;
    block[63] = 24;
    let mut states = [IV; LANES];
    compress_x16(&mut states, &[block; LANES]);
    for s in states {
        assert_eq!(
            s,
            [
                0xA999_3E36,
                0x4706_816A,
                0xBA3E_2571,
                0x7850_C26C,
                0x9CD0_D89D
            ]
        );
    }
}

proptest! {
    #[test]
    fn lanes_match_the_library(
        seed_states in proptest::collection::vec(proptest::array::uniform5(any::<u32>()), LANES),
        seed_blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 64), LANES),
    ) {
        let mut states = [[0u32; 5]; LANES];
        let mut blocks = [[0u8; 64]; LANES];
        for i in 0..LANES {
            states[i] = seed_states[i];
            blocks[i].copy_from_slice(&seed_blocks[i]);
        }
        let mut expected = states;
        compress_portable(&mut expected, &blocks);
        compress_x16(&mut states, &blocks);
        prop_assert_eq!(states, expected);
        // The same through word-by-word states.
        let mut soa = [[0u32; LANES]; 5];
        for (l, st) in seed_states.iter().enumerate() {
            for j in 0..5 {
                soa[j][l] = st[j];
            }
        }
        compress_x16_soa(&mut soa, &core::array::from_fn(|i| &blocks[i]));
        for l in 0..LANES {
            let got: [u32; 5] = core::array::from_fn(|j| soa[j][l]);
            prop_assert_eq!(got, expected[l]);
        }
    }
}
