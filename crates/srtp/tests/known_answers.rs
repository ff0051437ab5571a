//! Known answers from the RFCs and from libsrtp's own reference packets, run against every
//! crypto provider compiled in.

mod common;
use common::hex;

use secrelay_srtp::kdf::{derive, Label};
use secrelay_srtp::provider::{self, CryptoProvider};
use secrelay_srtp::{Context, Direction, MasterKey, Policy, Profile};

fn providers() -> Vec<&'static dyn CryptoProvider> {
    provider::all()
}

/// RFC 3711 Appendix B.2: the AES-CM keystream.
#[test]
fn rfc3711_b2_aes_cm_keystream() {
    let key = hex("2B7E151628AED2A6ABF7158809CF4F3C");
    let iv: [u8; 16] = hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000").try_into().unwrap();
    let want_first = hex(
        "E03EAD0935C95E80E166B16DD92B4EB4 D23513162B02D0F72A43A2FE4A5F97AB 41E95B3BB0A2E8DD477901E4FCA894C0",
    );
    let want_last = hex(
        "EC8CDF7398607CB0F2D21675EA9EA1E4 362B7C3C6773516318A077D7FC5073AE 6A2CC3787889374FBEB4C81B17BA6C44",
    );
    for p in providers() {
        let ctr = p.aes_ctr(&key).unwrap();
        let mut ks = vec![0u8; 0xff02 * 16];
        ctr.apply_keystream(&iv, &mut ks);
        assert_eq!(&ks[..48], &want_first[..], "{}", p.name());
        assert_eq!(&ks[0xfeff * 16..], &want_last[..], "{}", p.name());
        // Starting mid-stream at a later counter gives the same blocks.
        let mut iv2 = iv;
        iv2[14] = 0xfe;
        iv2[15] = 0xff;
        let mut tail = vec![0u8; 48];
        ctr.apply_keystream(&iv2, &mut tail);
        assert_eq!(tail, want_last, "{}", p.name());
    }
}

/// Derives the RTP session keys of `profile` from a master key and salt with every provider,
/// and checks them against a published vector (hex strings).
fn kdf_vector(profile: Profile, master: [&str; 2], want: [&str; 3]) {
    let mk = MasterKey::new(profile, &hex(master[0]), &hex(master[1])).unwrap();
    for p in providers() {
        for (label, want) in [
            Label::RtpEncryption,
            Label::RtpSalt,
            Label::RtpAuthentication,
        ]
        .into_iter()
        .zip(want)
        {
            let want = hex(want);
            let mut got = vec![0u8; want.len()];
            derive(p, &mk, label, &mut got).unwrap();
            assert_eq!(got, want, "{profile} {label:?} with {}", p.name());
        }
    }
}

/// RFC 3711 Appendix B.3: key derivation.
#[test]
fn rfc3711_b3_key_derivation() {
    kdf_vector(
        Profile::AesCm128HmacSha1_80,
        [
            "E1F97A0D3E018BE0D64FA32C06DE4139",
            "0EC675AD498AFEEBB6960B3AABE6",
        ],
        [
            "C61E7A93744F39EE10734AFE3FF7A087",
            "30CBBC08863D8C85D49DB34A9AE1",
            "CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4",
        ],
    );
}

/// RFC 6188 §7.1: AES-256 key derivation.
#[test]
fn rfc6188_aes256_key_derivation() {
    kdf_vector(
        Profile::AesCm256HmacSha1_80,
        [
            "f0f04914b513f2763a1b1fa130f10e2998f6f6e43e4309d1e622a0e332b9f1b6",
            "3b04803de51ee7c96423ab5b78d2",
        ],
        [
            "5ba1064e30ec51613cad926c5a28ef731ec7fb397f70a960653caf06554cd8c4",
            "fa31791685ca444a9e07c6c64e93",
            "fd9c32d39ed5fbb5a9dc96b30818454d1313dc05",
        ],
    );
}

/// RFC 6188 §7.4: AES-192 key derivation (the AES_192_CM PRF keyed with the 24-byte master
/// key). libsrtp before its 2025 fix (its issue 763) derived these keys with the AES-256 PRF,
/// so this vector, not libsrtp, is what AES-192 is checked against here; rtpengine derives
/// them as RFC 6188 does (`crates/cli/tests/interop_rtpengine_suites.rs`).
#[test]
fn rfc6188_aes192_key_derivation() {
    kdf_vector(
        Profile::AesCm192HmacSha1_80,
        [
            "73edc66c4fa15776fb57f9505c17136550ffda71f3e8e5f1",
            "c8522f3acd4ce86d5add78edbb11",
        ],
        [
            "31874736a8f1143870c26e4857d8a5b2c4a354407faadabb",
            "2372b82d639b6d8503a47adc0a6c",
            "355b10973cd95b9eacf4061c7e1a7151e7cfbfcb",
        ],
    );
}

const GCM_KEY_128: &str = "000102030405060708090a0b0c0d0e0f";
const GCM_KEY_256: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const GCM_SALT: &str = "517569642070726f2071756f"; // "Quid pro quo"
const GCM_RTP: &str = "8040f17b8041f8d35501a0b2 47616c6c696120657374206f6d6e69732064697669736120696e207061727465732074726573";
const GCM_RTCP: &str = "81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
const GCM_SRTCP_INDEX: u32 = 0x5d4;

fn gcm_context(
    p: &'static dyn CryptoProvider,
    profile: Profile,
    key: &str,
    dir: Direction,
) -> Context {
    let dummy = MasterKey::new(profile, &vec![0; profile.key_len()], &[0; 12]).unwrap();
    let policy = Policy::new(dummy).provider(p);
    let policy = match dir {
        Direction::Inbound => policy.any_inbound(),
        Direction::Outbound => policy.any_outbound(),
    };
    let mut c = Context::new(policy).unwrap();
    c.set_session_keys_for_known_answer_tests(&hex(key), &[], &hex(GCM_SALT))
        .unwrap();
    c
}

fn check_gcm(profile: Profile, key: &str, srtp: &str, srtcp: &str) {
    for p in providers() {
        // SRTP, RFC 7714 §16.x.1/16.x.2.
        let plain = hex(GCM_RTP);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 16, 0);
        let mut tx = gcm_context(p, profile, key, Direction::Outbound);
        let n = tx.protect_rtp(&mut buf, plain.len()).unwrap();
        assert_eq!(&buf[..n], &hex(srtp)[..], "{} {profile} protect", p.name());
        let mut rx = gcm_context(p, profile, key, Direction::Inbound);
        let n = rx.unprotect_rtp(&mut buf, n).unwrap();
        assert_eq!(&buf[..n], &plain[..], "{} {profile} unprotect", p.name());

        // SRTCP, RFC 7714 §17.1/17.2.
        let plain = hex(GCM_RTCP);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 20, 0);
        tx.set_rtcp_index(0x4d617273, GCM_SRTCP_INDEX).unwrap();
        let n = tx.protect_rtcp(&mut buf, plain.len()).unwrap();
        assert_eq!(
            &buf[..n],
            &hex(srtcp)[..],
            "{} {profile} SRTCP protect",
            p.name()
        );
        let n = rx.unprotect_rtcp(&mut buf, n).unwrap();
        assert_eq!(
            &buf[..n],
            &plain[..],
            "{} {profile} SRTCP unprotect",
            p.name()
        );
    }
}

/// RFC 7714 §16.1 and §17.1: AEAD_AES_128_GCM.
#[test]
fn rfc7714_aead_aes_128_gcm() {
    check_gcm(
        Profile::AeadAes128Gcm,
        GCM_KEY_128,
        "8040f17b8041f8d35501a0b2f24de3a3fb34de6cacba861c9d7e4bcabe633bd50d294e6f42a5f47a51c7d19b36de3adf8833899d7f27beb16a9152cf765ee4390cce",
        "81c8000d4d61727363e94885dcdab67ca727d7662f6b7e997ff5c0f76c06f32dc676a5f1730d6fda4ce09b4686303ded0bb9275bc84aa45896cf4d2fc5abf87245d9eade800005d4",
    );
}

/// RFC 7714 §16.2 and §17.2: AEAD_AES_256_GCM.
#[test]
fn rfc7714_aead_aes_256_gcm() {
    check_gcm(
        Profile::AeadAes256Gcm,
        GCM_KEY_256,
        "8040f17b8041f8d35501a0b232b1de78a822fe12ef9f78fa332e33aab18012389a58e2f3b50b2a0276ffae0f1ba63799b87b7aa3db36dfffd6b0f9bb7878d7a76c13",
        "81c8000d4d617273d50ae4d1f5ce5d304ba297e47d470c282c3ece5dbffe0a50a2eaa5c1110555be8415f658c61de0476f1b6fad1d1eb30c4446839f57ff6f6cb26ac3be800005d4",
    );
}

/// RFC 7714 §17.3: SRTCP authenticated but not encrypted (E = 0) is accepted, and a flipped
/// bit is not.
#[test]
fn rfc7714_srtcp_tag_only() {
    let tagged = hex("81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61deadbeefdeadbeefdeadbeefdeadbeefdeadbeef841dd9683dd78ec92ae58790125f62b3000005d4");
    for p in providers() {
        let mut rx = gcm_context(p, Profile::AeadAes128Gcm, GCM_KEY_128, Direction::Inbound);
        let mut bad = tagged.clone();
        bad[20] ^= 4;
        let n = bad.len();
        assert_eq!(
            rx.unprotect_rtcp(&mut bad, n),
            Err(secrelay_srtp::Error::AuthFailed)
        );
        let mut buf = tagged.clone();
        let n = rx.unprotect_rtcp(&mut buf, tagged.len()).unwrap();
        assert_eq!(&buf[..n], &hex(GCM_RTCP)[..], "{}", p.name());
    }
}

/// libsrtp's reference packets (test/srtp_driver.c: srtp_validate, srtp_validate_aes_256,
/// srtp_validate_gcm), from master keys through key derivation to the wire.
#[test]
fn libsrtp_reference_packets() {
    let rtp_plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
    let rtcp_plain = hex("81c8000bcafebabe abababababababababababababababab");
    let cases: [(Profile, &str, &str, Option<&str>); 3] = [
        (
            Profile::AesCm128HmacSha1_80,
            "e1f97a0d3e018be0d64fa32c06de41390ec675ad498afeebb6960b3aabe6",
            "800f1234decafbadcafebabe4e55dc4ce79978d88ca4d215949d2402b78d6acc99ea179b8dbb",
            Some("81c8000bcafebabe7128035be487b9bdbef89041f977a5a880000001993e08cd54d6c1230798"),
        ),
        (
            Profile::AesCm256HmacSha1_80,
            "f0f04914b513f2763a1b1fa130f10e2998f6f6e43e4309d1e622a0e332b9f1b63b04803de51ee7c96423ab5b78d2",
            "800f1234decafbadcafebabef1d9de17ff251ff1aa007774b0b4b40da08d9d9a5b3a55d8873b",
            None,
        ),
        (
            Profile::AeadAes128Gcm,
            "000102030405060708090a0b0c0d0e0fa0a1a2a3a4a5a6a7a8a9aaab",
            "800f1234decafbadcafebabec5002ede04cfdd2eb91159e0880aa06ed2976826f796b201df3131a127e8a392",
            Some("81c8000bcafebabec98b8b5df0392a55852b6c21ac8e7025c52c6fbea2b3b446ea31123ba88ce61e80000001"),
        ),
    ];
    for p in providers() {
        for (profile, key, srtp, srtcp) in cases {
            let mk = MasterKey::from_concatenated(profile, &hex(key)).unwrap();
            let mut tx = Context::new(Policy::new(mk.clone()).any_outbound().provider(p)).unwrap();
            let mut rx = Context::new(Policy::new(mk).any_inbound().provider(p)).unwrap();
            let mut buf = rtp_plain.clone();
            buf.resize(rtp_plain.len() + 16, 0);
            let n = tx.protect_rtp(&mut buf, rtp_plain.len()).unwrap();
            assert_eq!(&buf[..n], &hex(srtp)[..], "{} {profile}", p.name());
            let n = rx.unprotect_rtp(&mut buf, n).unwrap();
            assert_eq!(&buf[..n], &rtp_plain[..]);
            if let Some(srtcp) = srtcp {
                // libsrtp numbers its first SRTCP packet 1 (RFC 3711 says 0, as we do).
                tx.set_rtcp_index(0xcafebabe, 1).unwrap();
                let mut buf = rtcp_plain.clone();
                buf.resize(rtcp_plain.len() + 20, 0);
                let n = tx.protect_rtcp(&mut buf, rtcp_plain.len()).unwrap();
                assert_eq!(&buf[..n], &hex(srtcp)[..], "{} {profile} SRTCP", p.name());
                let n = rx.unprotect_rtcp(&mut buf, n).unwrap();
                assert_eq!(&buf[..n], &rtcp_plain[..]);
            }
        }
    }
}
