//! Endpoints that verify each other against a private CA instead of a fingerprint (the
//! teleconference study's set-up): certificates issued by the CA are accepted, others are not.

mod handshake_support;

use std::time::Duration;

use handshake_support::{run, Link};
use secrelay_dtls::ca::{generate_ca, issue_certificate, Role as Usage};
use secrelay_dtls::{EndpointConfig, FailReason, KeyType, LocalCertificate, PeerAuth, Role};

fn config(role: Role, cert: &secrelay_dtls::Certificate, ca_der: &[u8]) -> EndpointConfig {
    EndpointConfig::new(
        role,
        LocalCertificate::from(cert),
        PeerAuth::ca(ca_der.to_vec()),
    )
}

#[test]
fn ca_issued_certificates_authenticate_both_sides() {
    let ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let server =
        issue_certificate(&ca, "media.example.test", Usage::Server, KeyType::EcdsaP256).unwrap();
    let client =
        issue_certificate(&ca, "alice.example.test", Usage::Client, KeyType::EcdsaP256).unwrap();
    let r = run(
        config(Role::Client, &client, ca.der()),
        config(Role::Server, &server, ca.der()),
        Link::perfect(),
        Duration::from_secs(60),
    );
    assert!(r.client.connected.is_some(), "{:?}", r.client);
    assert!(r.server.connected.is_some(), "{:?}", r.server);
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let rogue_ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let server =
        issue_certificate(&ca, "media.example.test", Usage::Server, KeyType::EcdsaP256).unwrap();
    let rogue = issue_certificate(
        &rogue_ca,
        "alice.example.test",
        Usage::Client,
        KeyType::EcdsaP256,
    )
    .unwrap();
    let r = run(
        config(Role::Client, &rogue, ca.der()),
        config(Role::Server, &server, ca.der()),
        Link::perfect(),
        Duration::from_secs(60),
    );
    assert_eq!(r.server.failed, Some(FailReason::UntrustedCertificate));
    assert!(r.server.connected.is_none());
}

#[test]
fn a_client_certificate_cannot_act_as_the_server() {
    let ca = generate_ca(KeyType::EcdsaP256).unwrap();
    let client_only =
        issue_certificate(&ca, "bob.example.test", Usage::Client, KeyType::EcdsaP256).unwrap();
    let client =
        issue_certificate(&ca, "alice.example.test", Usage::Client, KeyType::EcdsaP256).unwrap();
    let r = run(
        config(Role::Client, &client, ca.der()),
        config(Role::Server, &client_only, ca.der()),
        Link::perfect(),
        Duration::from_secs(60),
    );
    assert_eq!(r.client.failed, Some(FailReason::UntrustedCertificate));
}
