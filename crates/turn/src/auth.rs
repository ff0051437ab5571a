//! Credentials: time-limited ones minted the way the TURN REST API does, checked with RFC 8489's
//! long-term credential mechanism; and the stateless nonces of the challenge.
//!
//! A credential is `username = "EXPIRY:IDENTITY"` (EXPIRY in Unix seconds) and
//! `password = base64(HMAC-SHA1(secret, username))`: whoever holds the shared secret mints
//! them (the gateway, per participant; coturn's `--use-auth-secret` takes the same ones), and
//! the server needs no table of users. The long-term key is `MD5(username:realm:password)`
//! (RFC 5389's, what Chromium and coturn use) or `SHA-256(username:realm:password)` when a
//! client picks SHA-256 from PASSWORD-ALGORITHMS (RFC 8489 §9.2.2).
//!
//! A nonce carries its own expiry and an HMAC over that expiry and the client's address under
//! a key made at start, so any shard checks any nonce without shared state, a nonce from one
//! address is stale from another, and none outlives [`NONCE_LIFETIME_SECS`].

use std::net::IpAddr;

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use md5::Md5;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// How long a nonce stays good (then the client is told 438 Stale Nonce and retries with the
/// new one it is given).
pub const NONCE_LIFETIME_SECS: u64 = 600;

/// RFC 8489 §9.2: a nonce starting with this cookie carries the server's security features.
pub const NONCE_COOKIE: &str = "obMatJos2";

/// The security feature set after the cookie: bit 0 (password algorithms) set, base64 of 24
/// bits (RFC 8489 §18.1).
const FEATURES: &str = "AAAB";

/// PASSWORD-ALGORITHMS as this server offers them, most preferred first: SHA-256 (2), then MD5
/// (1), each with no parameters (RFC 8489 §14.11).
pub const PASSWORD_ALGORITHMS: [u8; 8] = [0, 2, 0, 0, 0, 1, 0, 0];

/// A password algorithm (RFC 8489 §18.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// MD5 (the RFC 5389 key; the default when a client names none).
    Md5,
    /// SHA-256.
    Sha256,
}

/// Why a username yields no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialError {
    /// Not `EXPIRY[:IDENTITY]` with EXPIRY a decimal number of Unix seconds.
    Malformed,
    /// EXPIRY has passed.
    Expired,
}

/// The long-term keys of one credential, wiped when dropped.
#[derive(Clone)]
pub struct Keys {
    md5: Zeroizing<[u8; 16]>,
    sha256: Zeroizing<[u8; 32]>,
    /// The credential's expiry (Unix seconds), from its username.
    pub expires: u64,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// The key for `algorithm`.
    pub fn key(&self, algorithm: Algorithm) -> &[u8] {
        match algorithm {
            Algorithm::Md5 => &self.md5[..],
            Algorithm::Sha256 => &self.sha256[..],
        }
    }
}

/// A credential as minted: the username and the password to hand to a client.
#[derive(Clone)]
pub struct Minted {
    /// `EXPIRY:IDENTITY`.
    pub username: String,
    /// base64(HMAC-SHA1(secret, username)).
    pub password: Zeroizing<String>,
    /// Unix seconds after which it is refused.
    pub expires: u64,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The shared secret and the realm: mints credentials and derives their keys.
pub struct Credentials {
    secret: Zeroizing<Vec<u8>>,
    realm: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("realm", &self.realm)
            .finish_non_exhaustive()
    }
}

/// The expiry and the identity of a REST API username.
pub fn parse_username(username: &[u8]) -> Result<(u64, &[u8]), CredentialError> {
    let (expiry, identity) = match username.iter().position(|&b| b == b':') {
        Some(i) => (&username[..i], &username[i + 1..]),
        None => (username, &[][..]),
    };
    if expiry.is_empty() || expiry.len() > 19 || !expiry.iter().all(u8::is_ascii_digit) {
        return Err(CredentialError::Malformed);
    }
    let n = expiry
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok((n, identity))
}

impl Credentials {
    /// The secret (any bytes) and the realm written in challenges.
    pub fn new(secret: &[u8], realm: &str) -> Credentials {
        Credentials {
            secret: Zeroizing::new(secret.to_vec()),
            realm: realm.to_owned(),
        }
    }

    /// The realm.
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The password of `username`: base64(HMAC-SHA1(secret, username)).
    pub fn password(&self, username: &[u8]) -> Zeroizing<String> {
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(&self.secret)
            .expect("HMAC takes keys of any length");
        mac.update(username);
        let mut tag = mac.finalize().into_bytes();
        let s = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(tag));
        tag.zeroize();
        s
    }

    /// A credential for `identity` valid until `expires` (Unix seconds).
    pub fn mint(&self, identity: &str, expires: u64) -> Minted {
        let username = format!("{expires}:{identity}");
        Minted {
            password: self.password(username.as_bytes()),
            username,
            expires,
        }
    }

    /// The long-term keys of `username` at `now` (Unix seconds), or why there are none.
    pub fn keys(&self, username: &[u8], now: u64) -> Result<Keys, CredentialError> {
        let (expires, _) = parse_username(username)?;
        if expires < now {
            return Err(CredentialError::Expired);
        }
        let password = self.password(username);
        let mut md5 = Md5::new();
        let mut sha = Sha256::new();
        for part in [
            username,
            b":",
            self.realm.as_bytes(),
            b":",
            password.as_bytes(),
        ] {
            md5.update(part);
            sha.update(part);
        }
        let mut keys = Keys {
            md5: Zeroizing::new([0; 16]),
            sha256: Zeroizing::new([0; 32]),
            expires,
        };
        keys.md5.copy_from_slice(&md5.finalize());
        keys.sha256.copy_from_slice(&sha.finalize());
        Ok(keys)
    }
}

/// Makes and checks nonces (see the module's documentation).
pub struct Nonces {
    key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nonces")
    }
}

/// Hex digits of the nonce's MAC (64 bits).
const NONCE_MAC_HEX: usize = 16;

impl Default for Nonces {
    fn default() -> Self {
        Nonces::new()
    }
}

impl Nonces {
    /// Nonces under a fresh random key.
    pub fn new() -> Nonces {
        let mut key = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut key[..]).expect("the OS random source works");
        Nonces { key }
    }

    fn mac(&self, expires: u64, client: IpAddr) -> [u8; 8] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key[..])
            .expect("HMAC takes keys of any length");
        mac.update(&expires.to_be_bytes());
        match client {
            IpAddr::V4(a) => mac.update(&a.octets()),
            IpAddr::V6(a) => mac.update(&a.octets()),
        }
        let mut out = [0u8; 8];
        out.copy_from_slice(&mac.finalize().into_bytes()[..8]);
        out
    }

    /// A nonce for `client`, good until `now + NONCE_LIFETIME_SECS`.
    pub fn make(&self, client: IpAddr, now: u64) -> String {
        use std::fmt::Write as _;
        let expires = now + NONCE_LIFETIME_SECS;
        let mut s = String::with_capacity(NONCE_COOKIE.len() + FEATURES.len() + 16 + 16);
        s.push_str(NONCE_COOKIE);
        s.push_str(FEATURES);
        let _ = write!(s, "{expires:016x}");
        for b in self.mac(expires, client) {
            let _ = write!(s, "{b:02x}");
        }
        s
    }

    /// Whether `nonce` was made here for `client` and has not expired at `now`.
    pub fn check(&self, nonce: &[u8], client: IpAddr, now: u64) -> bool {
        let head = NONCE_COOKIE.len() + FEATURES.len();
        if nonce.len() != head + 16 + NONCE_MAC_HEX
            || &nonce[..head] != format!("{NONCE_COOKIE}{FEATURES}").as_bytes()
        {
            return false;
        }
        let Some(expires) = hex_u64(&nonce[head..head + 16]) else {
            return false;
        };
        let Some(mac) = hex_u64(&nonce[head + 16..]) else {
            return false;
        };
        let ok = self.mac(expires, client).ct_eq(&mac.to_be_bytes());
        bool::from(ok) && now <= expires
    }
}

fn hex_u64(s: &[u8]) -> Option<u64> {
    if s.len() != 16 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &c| {
        let d = (c as char).to_digit(16)?;
        Some(n << 4 | u64::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_parse_as_the_rest_api_writes_them() {
        assert_eq!(
            parse_username(b"1700000000:alice"),
            Ok((1_700_000_000, &b"alice"[..]))
        );
        assert_eq!(parse_username(b"1700000000"), Ok((1_700_000_000, &b""[..])));
        assert_eq!(parse_username(b"12:a:b"), Ok((12, &b"a:b"[..])));
        for bad in [
            &b""[..],
            b":alice",
            b"x1:alice",
            b"99999999999999999999:a",
            b"-1:a",
        ] {
            assert_eq!(
                parse_username(bad),
                Err(CredentialError::Malformed),
                "{bad:?}"
            );
        }
    }

    /// The password coturn's `turnutils_uclient -W SECRET` computes for the same username
    /// (base64 of HMAC-SHA1), here checked against a value worked out independently with
    /// `printf %s 1700000000:alice | openssl dgst -sha1 -hmac secret -binary | base64`.
    #[test]
    fn the_password_is_base64_of_hmac_sha1() {
        let c = Credentials::new(b"secret", "secrelay");
        assert_eq!(
            c.password(b"1700000000:alice").as_str(),
            "d8soP47RbdIKLDUOpnJPVQyq5Ts="
        );
        let m = c.mint("alice", 1_700_000_000);
        assert_eq!(m.username, "1700000000:alice");
        assert_eq!(m.password.as_str(), "d8soP47RbdIKLDUOpnJPVQyq5Ts=");
        assert!(!format!("{m:?}").contains("d8so"));
    }

    #[test]
    fn keys_refuse_expired_and_malformed_usernames() {
        let c = Credentials::new(b"secret", "secrelay");
        assert!(c.keys(b"100:a", 100).is_ok());
        assert_eq!(c.keys(b"100:a", 101).unwrap_err(), CredentialError::Expired);
        assert_eq!(c.keys(b"a:100", 0).unwrap_err(), CredentialError::Malformed);
        let k = c.keys(b"100:a", 0).unwrap();
        // MD5("100:a:secrelay:" + password): the RFC 5389 long-term key.
        let pw = c.password(b"100:a");
        let want = Md5::digest(format!("100:a:secrelay:{}", pw.as_str()).as_bytes());
        assert_eq!(k.key(Algorithm::Md5), &want[..]);
        assert_eq!(k.key(Algorithm::Sha256).len(), 32);
    }

    #[test]
    fn nonces_are_bound_to_their_address_and_expire() {
        let n = Nonces::new();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let nonce = n.make(a, 1000);
        assert!(nonce.starts_with("obMatJos2AAAB"), "{nonce}");
        assert!(n.check(nonce.as_bytes(), a, 1000));
        assert!(n.check(nonce.as_bytes(), a, 1000 + NONCE_LIFETIME_SECS));
        assert!(!n.check(nonce.as_bytes(), a, 1001 + NONCE_LIFETIME_SECS));
        assert!(!n.check(nonce.as_bytes(), b, 1000));
        assert!(
            !Nonces::new().check(nonce.as_bytes(), a, 1000),
            "another key"
        );
        let mut forged = nonce.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        assert!(!n.check(&forged, a, 1000));
        // A later expiry written into the nonce does not verify either.
        let mut later = nonce.into_bytes();
        later[13] = b'f';
        assert!(!n.check(&later, a, 1000));
        assert!(!n.check(b"", a, 0));
    }
}
