//! Certificates of every key type: generation, PEM round trips, fingerprints, and the key
//! staying out of `Debug`.

use proptest::prelude::*;
use secrelay_dtls::cert::{CertError, Certificate, KeyType};
use secrelay_dtls::fingerprint::{Fingerprint, FingerprintError, HashAlgorithm};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_key_type_generates_round_trips_and_fingerprints() {
    let other = Certificate::self_signed(KeyType::EcdsaP256, "other").unwrap();
    for kt in KeyType::ALL {
        let cert = Certificate::self_signed(kt, "secrelay test").unwrap();
        assert_eq!(cert.key_type(), kt);
        assert_eq!(cert.chain().len(), 1);
        assert_eq!(cert.der(), cert.chain()[0].as_slice());
        assert!(!cert.private_key_der().is_empty());

        // PEM round trip keeps the certificate, the key and the key type.
        let (cert_pem, key_pem) = cert.to_pem();
        assert!(cert_pem.starts_with("-----BEGIN CERTIFICATE-----"), "{kt}");
        assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{kt}");
        let back = Certificate::from_pem(&cert_pem, &key_pem).unwrap();
        assert_eq!(back.der(), cert.der(), "{kt}");
        assert_eq!(back.private_key_der(), cert.private_key_der(), "{kt}");
        assert_eq!(back.key_type(), kt);

        // Fingerprint: formats as SDP, parses back (also lower-case), matches only its own DER.
        for alg in HashAlgorithm::ALL {
            let fp = cert.fingerprint_with(alg);
            let sdp = fp.to_string();
            assert!(sdp.starts_with(&format!("{} ", alg.sdp_name())), "{sdp}");
            assert_eq!(sdp.split(':').count(), alg.output_len());
            assert_eq!(sdp.parse::<Fingerprint>().unwrap(), fp);
            assert_eq!(sdp.to_lowercase().parse::<Fingerprint>().unwrap(), fp);
            assert!(fp.matches(cert.der()));
            assert!(!fp.matches(other.der()), "{kt} {alg}");
        }
        assert_eq!(cert.fingerprint().algorithm(), HashAlgorithm::Sha256);
    }
}

#[test]
fn key_type_names_parse_and_bad_names_list_the_valid_ones() {
    for kt in KeyType::ALL {
        assert_eq!(kt.to_string().parse::<KeyType>().unwrap(), kt);
        assert_eq!(kt.name().to_uppercase().parse::<KeyType>().unwrap(), kt);
    }
    assert_eq!(KeyType::default(), KeyType::EcdsaP256);
    let err = "dsa-1024".parse::<KeyType>().unwrap_err();
    assert!(matches!(err, CertError::UnknownKeyType(_)));
    let msg = err.to_string();
    for kt in KeyType::ALL {
        assert!(msg.contains(kt.name()), "{msg}");
    }
}

#[test]
fn debug_does_not_show_the_key() {
    let cert = Certificate::self_signed(KeyType::EcdsaP256, "debug").unwrap();
    let dbg = format!("{cert:?} {cert:#?}");
    let key = cert.private_key_der();
    assert!(!dbg.contains(&hex(key)));
    assert!(!dbg.to_uppercase().contains(&hex(key).to_uppercase()));
    // Not even a 16-byte run of the key, in decimal-list form as derived Debug would print.
    let decimal = format!("{:?}", &key[key.len() - 16..]);
    assert!(!dbg.contains(decimal.trim_matches(|c| c == '[' || c == ']')));
    let (_, key_pem) = cert.to_pem();
    let body: String = key_pem.lines().nth(1).unwrap().to_owned();
    assert!(!dbg.contains(&body));
    assert!(dbg.contains("redacted"));
}

#[test]
fn from_pem_rejects_a_key_of_another_certificate() {
    let a = Certificate::self_signed(KeyType::EcdsaP256, "a").unwrap();
    let b = Certificate::self_signed(KeyType::EcdsaP256, "b").unwrap();
    let (a_pem, _) = a.to_pem();
    let (_, b_key) = b.to_pem();
    assert_eq!(
        Certificate::from_pem(&a_pem, &b_key).unwrap_err(),
        CertError::KeyMismatch
    );
    assert!(matches!(
        Certificate::from_pem("", &b_key).unwrap_err(),
        CertError::NoCertificate | CertError::Pem(_)
    ));
    assert!(matches!(
        Certificate::from_pem(&a_pem, "not pem").unwrap_err(),
        CertError::Pem(_)
    ));
    // A key in a non-PKCS#8 block is refused with a hint.
    let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
    let err = Certificate::from_pem(&a_pem, sec1).unwrap_err();
    assert!(err.to_string().contains("PKCS#8"), "{err}");
}

#[test]
fn bad_fingerprints_are_errors() {
    let ok = Fingerprint::of(b"x", HashAlgorithm::Sha256).to_string();
    // Whitespace around and inside is tolerated.
    let spaced = format!("  {}  ", ok.replacen(' ', " \t ", 1));
    assert!(spaced.parse::<Fingerprint>().is_ok());
    assert!(ok
        .replace("sha-256", "SHA-256")
        .parse::<Fingerprint>()
        .is_ok());

    assert_eq!("".parse::<Fingerprint>(), Err(FingerprintError::Empty));
    assert_eq!(
        "sha-256".parse::<Fingerprint>(),
        Err(FingerprintError::MissingDigest)
    );
    // Wrong length: one byte short.
    let short = &ok[..ok.len() - 3];
    assert_eq!(
        short.parse::<Fingerprint>(),
        Err(FingerprintError::WrongLength {
            algorithm: HashAlgorithm::Sha256,
            expected: 32,
            got: 31
        })
    );
    // A SHA-1 sized digest labelled sha-256.
    let sha1_digest = Fingerprint::of(b"x", HashAlgorithm::Sha1).to_string();
    let mislabelled = sha1_digest.replace("sha-1", "sha-256");
    assert!(matches!(
        mislabelled.parse::<Fingerprint>(),
        Err(FingerprintError::WrongLength { got: 20, .. })
    ));
    // Bad hex.
    let bad = ok.replacen("sha-256 ", "sha-256 ZZ", 1);
    assert!(matches!(
        bad.parse::<Fingerprint>(),
        Err(FingerprintError::BadHex { index: 0, .. })
    ));
    let single = "sha-256 A:BC";
    assert!(matches!(
        single.parse::<Fingerprint>(),
        Err(FingerprintError::BadHex { index: 0, .. })
    ));
    let trailing = format!("{ok}:");
    assert!(matches!(
        trailing.parse::<Fingerprint>(),
        Err(FingerprintError::BadHex { index: 32, .. })
    ));
    // Unknown algorithm, and the message lists the supported ones.
    let err = ok
        .replace("sha-256", "md5")
        .parse::<Fingerprint>()
        .unwrap_err();
    assert!(matches!(err, FingerprintError::UnknownAlgorithm(ref n) if n == "md5"));
    assert!(err.to_string().contains("sha-256"), "{err}");
}

proptest! {
    #[test]
    fn fingerprint_parsing_never_panics(s in "\\PC{0,200}") {
        let _ = s.parse::<Fingerprint>();
    }

    #[test]
    fn fingerprint_like_strings_never_panic(
        alg in prop::sample::select(vec!["sha-1", "sha-256", "SHA-384", "sha-512", "md5", ""]),
        groups in prop::collection::vec("[0-9a-fA-FxX:é ]{0,3}", 0..70),
    ) {
        let s = format!("{alg} {}", groups.join(":"));
        if let Ok(fp) = s.parse::<Fingerprint>() {
            prop_assert_eq!(fp.bytes().len(), fp.algorithm().output_len());
            prop_assert_eq!(fp.to_string().parse::<Fingerprint>().unwrap(), fp);
        }
    }
}
