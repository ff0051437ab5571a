//! OpenSSL DTLS 1.2 client ↔ OpenSSL DTLS 1.2 server over the in-memory datagram transport:
//! the handshake completes, both sides export the same `EXTRACTOR-dtls_srtp` block, agree on
//! the SRTP profile, and each saw the other's certificate.

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::x509::{X509NameBuilder, X509};
use secrelay_peers::openssl_dtls::{DtlsRole, OpensslDtls, OpensslDtlsContext, Step};

/// A self-signed ECDSA P-256 certificate: (cert PEM, PKCS#8 key PEM, cert DER, key DER).
fn identity(cn: &str) -> (String, String, Vec<u8>, Vec<u8>) {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", cn).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&BigNum::from_u32(1).unwrap().to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    let cert = b.build();
    (
        String::from_utf8(cert.to_pem().unwrap()).unwrap(),
        String::from_utf8(key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
        cert.to_der().unwrap(),
        key.private_key_to_pkcs8().unwrap(),
    )
}

/// Steps both until done, moving datagrams between them; returns the datagram count.
fn handshake(client: &mut OpensslDtls, server: &mut OpensslDtls) -> usize {
    let mut datagrams = 0;
    for _ in 0..20 {
        let c = client.handshake_step().expect("client step");
        for d in client.take_outgoing() {
            datagrams += 1;
            server.push_incoming(d);
        }
        let s = server.handshake_step().expect("server step");
        for d in server.take_outgoing() {
            datagrams += 1;
            client.push_incoming(d);
        }
        if c == Step::Done && s == Step::Done {
            return datagrams;
        }
    }
    panic!("handshake did not complete in 20 rounds");
}

#[test]
fn openssl_client_and_server_export_the_same_block() {
    let (ccert, ckey, cder, _) = identity("client");
    let (scert, skey, sder, _) = identity("server");
    let mut client = OpensslDtls::client(&ccert, &ckey).unwrap();
    let mut server = OpensslDtls::server(&scert, &skey).unwrap();
    assert!(
        client.keying_material(60).is_err(),
        "no keys before the handshake"
    );
    let datagrams = handshake(&mut client, &mut server);
    assert!(datagrams >= 4, "{datagrams} datagrams");

    assert_eq!(client.version(), "DTLSv1.2");
    assert_eq!(server.version(), "DTLSv1.2");
    assert_eq!(client.cipher_name(), Some("ECDHE-ECDSA-AES128-GCM-SHA256"));
    let profile = client.srtp_profile_name().expect("client profile");
    assert_eq!(
        server.srtp_profile_name().as_deref(),
        Some(profile.as_str())
    );
    assert_eq!(
        profile, "SRTP_AES128_CM_SHA1_80",
        "server picks its first listed profile"
    );
    assert_eq!(client.srtp_profile_id(), Some(1));
    // AES128_CM_SHA1_80: 2 × (16 + 14) bytes.
    let ck = client.keying_material(60).unwrap();
    let sk = server.keying_material(60).unwrap();
    assert_eq!(ck, sk);
    assert_ne!(ck, vec![0u8; 60]);
    assert_eq!(client.peer_certificate_der(), Some(sder));
    assert_eq!(server.peer_certificate_der(), Some(cder));
}

#[test]
fn der_contexts_make_many_independent_handshakes() {
    let (_, _, cder, ckey) = identity("client");
    let (_, _, sder, skey) = identity("server");
    let cctx = OpensslDtlsContext::from_der(DtlsRole::Client, &cder, &ckey).unwrap();
    let sctx = OpensslDtlsContext::from_der(DtlsRole::Server, &sder, &skey).unwrap();
    let mut blocks = Vec::new();
    for _ in 0..3 {
        let mut client = cctx.endpoint().unwrap();
        let mut server = sctx.endpoint().unwrap();
        handshake(&mut client, &mut server);
        let k = client.keying_material(60).unwrap();
        assert_eq!(k, server.keying_material(60).unwrap());
        assert!(!blocks.contains(&k), "a fresh block every handshake");
        blocks.push(k);
    }
}

#[test]
fn a_truncated_handshake_message_fails_the_server() {
    let (scert, skey, _, _) = identity("server");
    let mut server = OpensslDtls::server(&scert, &skey).unwrap();
    assert_eq!(server.handshake_step().unwrap(), Step::WantRead);
    assert!(server.take_outgoing().is_empty(), "a server speaks second");
    // A DTLS 1.2 handshake record (epoch 0, seq 0) whose 3-byte body is no handshake message.
    server.push_incoming(vec![22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3]);
    assert!(server.handshake_step().is_err());
    assert!(server.keying_material(60).is_err());
}
