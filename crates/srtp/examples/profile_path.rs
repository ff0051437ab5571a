//! Runs one profile's protect and unprotect path in a loop, for profilers
//! (`valgrind --tool=callgrind target/release/examples/profile_path AEAD_AES_128_GCM 172`).

use secrelay_srtp::{Context, MasterKey, Policy, Profile};

fn main() {
    let mut args = std::env::args().skip(1);
    let profile: Profile = args
        .next()
        .unwrap_or_else(|| "AEAD_AES_128_GCM".into())
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(172);
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let mk = MasterKey::new(
        profile,
        &vec![1; profile.key_len()],
        &vec![2; profile.salt_len()],
    )
    .expect("key lengths come from the profile");
    let mut tx = Context::new(Policy::new(mk.clone()).any_outbound()).expect("valid policy");
    let mut rx = Context::new(Policy::new(mk).any_inbound()).expect("valid policy");
    let mut buf = vec![0u8; size + 16];
    let mut total = 0usize;
    for i in 0..n {
        buf[..size].fill(7);
        buf[0] = 0x80;
        buf[2..4].copy_from_slice(&(i as u16).to_be_bytes());
        let m = tx.protect_rtp(&mut buf, size).expect("protect");
        total += rx.unprotect_rtp(&mut buf, m).expect("unprotect");
    }
    println!("{total}");
}
