//! The ICE-lite agent answers a full agent's checks, follows USE-CANDIDATE, refuses wrong
//! credentials with the right error responses, and ends a silent participant (consent).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use secrelay_gateway::ice_lite::{Credentials, IceConfig, IceError, IceEvent, IceLite};
use secrelay_wire::stun::{attr, Class, Message, MessageBuilder, BINDING};

fn creds(u: &str, p: &str) -> Credentials {
    Credentials {
        ufrag: u.into(),
        pwd: p.into(),
    }
}

struct Check<'a> {
    username: &'a str,
    key: &'a [u8],
    use_candidate: bool,
    controlled: bool,
    fingerprint: bool,
}

fn check(c: Check<'_>) -> Vec<u8> {
    let mut buf = [0u8; 512];
    let tid = [7u8; 12];
    let mut b = MessageBuilder::new(&mut buf, Class::Request, BINDING, tid)
        .attribute(attr::USERNAME, c.username.as_bytes())
        .attribute(attr::PRIORITY, &1_845_501_695u32.to_be_bytes());
    b = if c.controlled {
        b.attribute(attr::ICE_CONTROLLED, &9u64.to_be_bytes())
    } else {
        b.attribute(attr::ICE_CONTROLLING, &9u64.to_be_bytes())
    };
    if c.use_candidate {
        b = b.attribute(attr::USE_CANDIDATE, &[]);
    }
    b = b.integrity(c.key);
    let n = if c.fingerprint {
        b.fingerprint().unwrap()
    } else {
        b.finish().unwrap()
    };
    buf[..n].to_vec()
}

fn ok_check(use_candidate: bool) -> Vec<u8> {
    check(Check {
        username: "lite:full",
        key: b"local-password-24-chars!",
        use_candidate,
        controlled: false,
        fingerprint: true,
    })
}

fn agent(now: Instant) -> IceLite {
    IceLite::new(
        IceConfig::default(),
        creds("lite", "local-password-24-chars!"),
        creds("full", "remote-password"),
        now,
    )
}

#[test]
fn answers_checks_and_follows_nomination() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let from: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let mut out = [0u8; 256];
    let r = a.handle_stun(t0, from, &ok_check(false), &mut out).unwrap();
    assert_eq!(r.event, None);
    assert!(a.is_validated(from));
    assert_eq!(a.selected(), None);
    let resp = Message::parse(&out[..r.response_len]).unwrap();
    assert_eq!(resp.class(), Class::Success);
    assert_eq!(resp.transaction_id(), [7u8; 12]);
    assert_eq!(resp.xor_mapped_address(), Some(from));
    resp.check_integrity(b"local-password-24-chars!").unwrap();
    // Nomination.
    let r = a.handle_stun(t0, from, &ok_check(true), &mut out).unwrap();
    assert_eq!(r.event, Some(IceEvent::Selected(from)));
    assert_eq!(a.selected(), Some(from));
    // Renominating the same pair is no new event; another address moves the selection.
    assert_eq!(
        a.handle_stun(t0, from, &ok_check(true), &mut out)
            .unwrap()
            .event,
        None
    );
    let other: SocketAddr = "[2001:db8::9]:40000".parse().unwrap();
    assert_eq!(
        a.handle_stun(t0, other, &ok_check(true), &mut out)
            .unwrap()
            .event,
        Some(IceEvent::Selected(other))
    );
}

#[test]
fn wrong_credentials_and_roles_are_refused() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let from: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let mut out = [0u8; 256];
    // Wrong password: 401 without integrity.
    let bad = check(Check {
        username: "lite:full",
        key: b"guess",
        use_candidate: true,
        controlled: false,
        fingerprint: true,
    });
    match a.handle_stun(t0, from, &bad, &mut out) {
        Err(IceError::Unauthenticated(Some(n))) => {
            let m = Message::parse(&out[..n]).unwrap();
            assert_eq!(m.class(), Class::Error);
            assert_eq!(m.error_code().map(|e| e.0), Some(401));
        }
        other => panic!("{other:?}"),
    }
    assert!(!a.is_validated(from));
    // Wrong or swapped username.
    for u in ["full:lite", "lite:other", "lite", "lite:fullx", ""] {
        let m = check(Check {
            username: u,
            key: b"local-password-24-chars!",
            use_candidate: true,
            controlled: false,
            fingerprint: true,
        });
        assert_eq!(
            a.handle_stun(t0, from, &m, &mut out).unwrap_err(),
            IceError::WrongUsername,
            "{u:?}"
        );
    }
    // No FINGERPRINT.
    let m = check(Check {
        username: "lite:full",
        key: b"local-password-24-chars!",
        use_candidate: true,
        controlled: false,
        fingerprint: false,
    });
    assert_eq!(
        a.handle_stun(t0, from, &m, &mut out).unwrap_err(),
        IceError::NoFingerprint
    );
    // A controlled peer: 487.
    let m = check(Check {
        username: "lite:full",
        key: b"local-password-24-chars!",
        use_candidate: false,
        controlled: true,
        fingerprint: true,
    });
    match a.handle_stun(t0, from, &m, &mut out) {
        Err(IceError::RoleConflict(n)) => {
            let m = Message::parse(&out[..n]).unwrap();
            assert_eq!(m.error_code().map(|e| e.0), Some(487));
            m.check_integrity(b"local-password-24-chars!").unwrap();
        }
        other => panic!("{other:?}"),
    }
    // A response is not a request.
    let mut buf = [0u8; 64];
    let n = MessageBuilder::new(&mut buf, Class::Success, BINDING, [1; 12])
        .fingerprint()
        .unwrap();
    assert_eq!(
        a.handle_stun(t0, from, &buf[..n], &mut out).unwrap_err(),
        IceError::NotBindingRequest
    );
    // Garbage.
    assert!(matches!(
        a.handle_stun(t0, from, &[0u8; 7], &mut out),
        Err(IceError::Stun(_))
    ));
    assert_eq!(a.selected(), None);
}

#[test]
fn media_goes_to_the_selected_address_only_while_it_is_validated() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let from: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let other: SocketAddr = "198.51.100.8:50000".parse().unwrap();
    let mut out = [0u8; 256];
    a.handle_stun(t0, from, &ok_check(false), &mut out).unwrap();
    assert_eq!(a.usable(), None, "validated, not nominated");
    a.handle_stun(t0, from, &ok_check(true), &mut out).unwrap();
    assert_eq!(a.usable(), Some(from));
    // Another address validated (not nominated) leaves the selection where it is.
    a.handle_stun(t0, other, &ok_check(false), &mut out)
        .unwrap();
    assert_eq!(a.usable(), Some(from));
    // Given up to another session: selected, but unused until a check validates it again.
    a.forget(from);
    assert_eq!((a.selected(), a.usable()), (Some(from), None));
    assert!(
        !a.is_validated(from) && a.is_validated(other),
        "media from the address given up is not taken"
    );
    a.forget(other);
    assert_eq!(a.usable(), None);
    a.handle_stun(t0, from, &ok_check(false), &mut out).unwrap();
    assert_eq!(a.usable(), Some(from));
    // Consent lost: nothing is usable.
    assert_eq!(
        a.handle_timeout(t0 + Duration::from_secs(30)),
        Some(IceEvent::ConsentExpired)
    );
    assert_eq!(a.usable(), None);
}

#[test]
fn consent_expires_without_checks_and_is_kept_by_them() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let from: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let mut out = [0u8; 256];
    a.handle_stun(t0, from, &ok_check(true), &mut out).unwrap();
    // Checks every 5 s keep consent for a minute.
    let mut now = t0;
    for _ in 0..12 {
        now += Duration::from_secs(5);
        assert_eq!(a.handle_timeout(now), None);
        a.handle_stun(now, from, &ok_check(false), &mut out)
            .unwrap();
    }
    assert_eq!(a.poll_timeout(), Some(now + Duration::from_secs(30)));
    // Then silence.
    assert_eq!(a.handle_timeout(now + Duration::from_secs(29)), None);
    assert_eq!(
        a.handle_timeout(now + Duration::from_secs(30)),
        Some(IceEvent::ConsentExpired)
    );
    assert_eq!(
        a.handle_timeout(now + Duration::from_secs(31)),
        None,
        "reported once"
    );
    assert_eq!(a.selected(), None);
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(
        a.handle_stun(now, from, &ok_check(true), &mut out)
            .unwrap_err(),
        IceError::Expired
    );
}

#[test]
fn ice_restart_switches_credentials() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let from: SocketAddr = "198.51.100.7:50000".parse().unwrap();
    let mut out = [0u8; 256];
    a.handle_stun(t0, from, &ok_check(true), &mut out).unwrap();
    a.restart(
        creds("lit2", "another-local-password-24"),
        creds("ful2", "x"),
        t0,
    );
    assert_eq!(
        a.handle_stun(t0, from, &ok_check(true), &mut out)
            .unwrap_err(),
        IceError::WrongUsername
    );
    let m = check(Check {
        username: "lit2:ful2",
        key: b"another-local-password-24",
        use_candidate: true,
        controlled: false,
        fingerprint: true,
    });
    a.handle_stun(t0, from, &m, &mut out).unwrap();
    assert_eq!(a.selected(), Some(from), "selection kept across restart");
}

#[test]
fn random_credentials_are_ice_chars_of_the_right_length() {
    let c = Credentials::random();
    assert_eq!((c.ufrag.len(), c.pwd.len()), (8, 24));
    assert!(c
        .ufrag
        .chars()
        .chain(c.pwd.chars())
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '+' || ch == '/'));
    assert_ne!(Credentials::random(), c);
    assert!(!format!("{c:?}").contains(&c.pwd));
}

#[test]
fn remote_address_table_is_bounded() {
    let t0 = Instant::now();
    let mut a = agent(t0);
    let mut out = [0u8; 256];
    for port in 1000..1100u16 {
        let from = SocketAddr::from(([198, 51, 100, 7], port));
        a.handle_stun(
            t0 + Duration::from_millis(u64::from(port)),
            from,
            &ok_check(port == 1000),
            &mut out,
        )
        .unwrap();
    }
    // The nominated address survives eviction; the table holds at most 16.
    assert!(a.is_validated(SocketAddr::from(([198, 51, 100, 7], 1000))));
    let validated = (1000..1100u16)
        .filter(|p| a.is_validated(SocketAddr::from(([198, 51, 100, 7], *p))))
        .count();
    assert_eq!(validated, 16);
}
