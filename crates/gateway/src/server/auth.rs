//! Who may do what on the signaling side: the credential a request carries, resolved once per
//! request, and the one decision every handler asks for.
//!
//! Three kinds of credential, each sent as `Authorization: Bearer …`:
//! * the **admin key** (`admin_key`): the operator's. Everything: every room, the calls SIP
//!   proxies set up over ng, the room list, `/metrics`.
//! * an **access token**: a JWT signed (HS256) with one of the `api_keys` secrets, minted per
//!   person by the application's server (or `secrelay token create`). Its header's `kid` (or
//!   its `iss` claim) names the key, so keys rotate without a restart: add the new key, reload
//!   (SIGHUP), mint with it, remove the old one. Claims: `sub` (the identity, which names the
//!   participant in the API, the room page and webhooks), `exp`, optional `nbf`, and
//!   [`Grants`]. Checked without a database: a signature, a clock and the grants.
//! * a **room token** (`token`, `[rooms.NAME] token`): the simple mode. One shared secret per
//!   room (or one for every room) that may do everything in that room: publish, view, kick,
//!   change its settings. No identities, no expiry, no room list.
//!
//! A request without a credential is anonymous: it may publish and view in an *open* room (a
//! gateway with no `api_keys` and no `token` leaves rooms without a token of their own open;
//! `[rooms.NAME] open = true` opens one explicitly) and nothing else. The calls of the ng
//! control socket (rooms named `call:…`) are reached over HTTP only by the admin key or by a
//! token whose grant names them (`room` or `room_prefix` starting with `call:`).
//!
//! Refusals say as little as they can: 401 for a missing, malformed, unverifiable, expired or
//! not-yet-valid credential (the same "invalid credentials" whether the key is unknown or the
//! signature wrong), 403 for a valid one that does not reach the room or lacks the grant. Each
//! is counted by reason (`secrelay_auth_failures_total`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The longest `Authorization` value looked at: a token past it is refused before any parsing.
pub const MAX_CREDENTIAL_LEN: usize = 4096;

/// The prefix of the rooms the ng control socket makes for its calls.
pub const CALL_ROOM_PREFIX: &str = "call:";

/// What a token lets its holder do, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Grants {
    /// The one room the token is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// Or every room whose name starts with this. With neither, every room (but not the
    /// calls of the ng socket, which a grant reaches only by naming them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room_prefix: Option<String>,
    /// Send media: WHIP, room joins, telephony legs.
    pub publish: bool,
    /// Receive media: WHEP, room joins, telephony legs.
    pub subscribe: bool,
    /// The room's settings (`PATCH /api/rooms/{room}`), its participants' sessions (ending
    /// them, their layers), and what `list` shows.
    pub admin: bool,
    /// The room list and the rooms' participants (`GET /api/rooms…`).
    pub list: bool,
}

impl Grants {
    /// Whether the grant reaches `room`.
    pub fn covers(&self, room: &str) -> bool {
        let call = room.starts_with(CALL_ROOM_PREFIX);
        match (&self.room, &self.room_prefix) {
            (Some(r), _) => r == room,
            (None, Some(p)) => {
                room.starts_with(p.as_str()) && (!call || p.starts_with(CALL_ROOM_PREFIX))
            }
            (None, None) => !call,
        }
    }

    /// Whether the grant is for every room (not one room or a prefix).
    pub fn every_room(&self) -> bool {
        self.room.is_none() && self.room_prefix.is_none()
    }
}

/// An access token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The key that signs it (its id in `api_keys`), when the header carries no `kid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The holder's identity: the participant's name in the API, the page and webhooks.
    pub sub: String,
    /// Expiry (seconds since the Unix epoch).
    pub exp: u64,
    /// Not valid before (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Issued at (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// What it allows.
    #[serde(default)]
    pub grants: Grants,
}

/// The longest identity a token may carry.
pub const MAX_IDENTITY_LEN: usize = 128;

/// An identity as the API shows it: 1–128 characters, none of them control characters.
pub fn valid_identity(s: &str) -> bool {
    (1..=MAX_IDENTITY_LEN).contains(&s.chars().count()) && !s.chars().any(char::is_control)
}

/// Why a token could not be minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintError(pub String);

impl std::fmt::Display for MintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MintError {}

/// The shortest API secret, in bytes: HS256 keys shorter than the hash are guessable offline
/// from one token.
pub const MIN_SECRET_LEN: usize = 32;

/// Mints an access token: `claims` signed with `secret` (the value of `api_keys[key_id]`), the
/// header naming `key_id`.
pub fn mint(key_id: &str, secret: &[u8], claims: &Claims) -> Result<String, MintError> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(MintError(format!(
            "the secret of key {key_id:?} is {} bytes: at least {MIN_SECRET_LEN}",
            secret.len()
        )));
    }
    if !valid_identity(&claims.sub) {
        return Err(MintError(format!(
            "identity {:?}: 1-{MAX_IDENTITY_LEN} characters, no control characters",
            claims.sub
        )));
    }
    if claims.grants.room.is_some() && claims.grants.room_prefix.is_some() {
        return Err(MintError(
            "a grant names a room or a room prefix, not both".into(),
        ));
    }
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(key_id.to_owned());
    let key = EncodingKey::from_secret(secret).map_err(|e| MintError(format!("the key: {e}")))?;
    jsonwebtoken::encode(&header, claims, &key).map_err(|e| MintError(format!("signing: {e}")))
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why a request was refused, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No credential where one is needed.
    Missing,
    /// Not `Bearer …`, too long, or not a token at all.
    Malformed,
    /// A token naming a key the gateway does not hold (unknown or retired).
    UnknownKey,
    /// A token whose signature, algorithm or claims do not verify.
    BadSignature,
    /// A token past its `exp`.
    Expired,
    /// A token before its `nbf`.
    NotYetValid,
    /// A bearer value that is neither the admin key, a token, nor the room's token.
    WrongToken,
    /// A valid credential for another room.
    OtherRoom,
    /// A valid credential for the room without the grant the request needs.
    NotGranted,
}

impl Failure {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [Failure; 9] = [
        Failure::Missing,
        Failure::Malformed,
        Failure::UnknownKey,
        Failure::BadSignature,
        Failure::Expired,
        Failure::NotYetValid,
        Failure::WrongToken,
        Failure::OtherRoom,
        Failure::NotGranted,
    ];

    /// The label in `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::Malformed => "malformed",
            Failure::UnknownKey => "unknown_key",
            Failure::BadSignature => "bad_signature",
            Failure::Expired => "expired",
            Failure::NotYetValid => "not_yet_valid",
            Failure::WrongToken => "wrong_token",
            Failure::OtherRoom => "other_room",
            Failure::NotGranted => "not_granted",
        }
    }

    fn index(self) -> usize {
        Failure::ALL
            .iter()
            .position(|f| *f == self)
            .expect("ALL lists every reason")
    }

    /// 401 (no usable credential) or 403 (a credential that does not reach).
    pub fn status(self) -> u16 {
        match self {
            Failure::OtherRoom | Failure::NotGranted => 403,
            _ => 401,
        }
    }

    /// The one line a client is told: enough to fix its own mistake, nothing about keys.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Missing => "this needs Authorization: Bearer <token>",
            Failure::Malformed
            | Failure::UnknownKey
            | Failure::BadSignature
            | Failure::WrongToken => "invalid credentials",
            Failure::Expired => "the token has expired",
            Failure::NotYetValid => "the token is not valid yet",
            Failure::OtherRoom => "the credentials are for another room",
            Failure::NotGranted => "the credentials do not allow this",
        }
    }
}

/// Refusals counted by reason (`secrelay_auth_failures_total`).
#[derive(Debug, Default)]
pub struct AuthStats {
    failures: [AtomicU64; Failure::ALL.len()],
}

impl AuthStats {
    /// Counts one refusal.
    pub fn count(&self, f: Failure) {
        self.failures[f.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Every reason with its count.
    pub fn by_reason(&self) -> Vec<(&'static str, u64)> {
        Failure::ALL
            .iter()
            .map(|f| (f.name(), self.failures[f.index()].load(Ordering::Relaxed)))
            .collect()
    }
}

/// A verified access token: who, and what it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// `sub`.
    pub identity: String,
    /// `grants`.
    pub grants: Grants,
}

/// Who is asking, once the credential is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No credential.
    Anonymous,
    /// The admin key.
    Admin,
    /// The room token of the room the request names.
    RoomToken,
    /// An access token.
    Token(Verified),
}

impl Caller {
    /// The identity to name the participant with: a token's `sub`.
    pub fn identity(&self) -> Option<&str> {
        match self {
            Caller::Token(v) => Some(&v.identity),
            _ => None,
        }
    }

    /// Whether it came with a credential the gateway verified (anything but anonymous).
    pub fn authenticated(&self) -> bool {
        !matches!(self, Caller::Anonymous)
    }
}

/// What a request asks to do in a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Send media (WHIP).
    Publish,
    /// Receive media (WHEP).
    Subscribe,
    /// Both (room joins, telephony legs).
    Join,
    /// Either (the TURN servers a session of either kind needs before it offers).
    Media,
    /// Act on a session made by `owner` (its identity; `None` when made without a token):
    /// its holder, or the room's admin.
    Own(Option<&'a str>),
    /// Change the room or others' sessions.
    Admin,
    /// See the room and its participants.
    List,
}

/// A secret from the configuration: wiped from memory when dropped, never printed.
#[derive(Clone, Default)]
pub struct Secret(Zeroizing<String>);

/// Written out as `"<redacted>"`: a configuration serialized (its reference, a dump) never
/// carries a secret.
impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret::from)
    }
}

impl Secret {
    /// The secret's text.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A fresh random secret: 32 bytes from the OS, in hex.
    pub fn random() -> Secret {
        let mut b = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut b[..]).expect("the OS random source works");
        let mut hex = Zeroizing::new(String::with_capacity(64));
        for x in b.iter() {
            use std::fmt::Write as _;
            let _ = write!(hex, "{x:02x}");
        }
        Secret(hex)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(Zeroizing::new(s.to_owned()))
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(Zeroizing::new(s))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        same_secret(self.0.as_bytes(), other.0.as_bytes())
    }
}

impl Eq for Secret {}

/// Compares without stopping at the first difference (timing says nothing of where two secrets
/// differ; their lengths are not secret).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The room-level settings the policy needs.
#[derive(Debug, Clone, Default)]
struct RoomPolicy {
    token: Option<Secret>,
    open: bool,
}

/// The credentials the gateway accepts and what each reaches: built from the configuration,
/// replaced whole on reload.
pub struct Policy {
    keys: HashMap<String, DecodingKey>,
    admin_key: Option<Secret>,
    token: Option<Secret>,
    rooms: HashMap<String, RoomPolicy>,
    validation: Validation,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&String> = self.keys.keys().collect();
        keys.sort();
        f.debug_struct("Policy")
            .field("keys", &keys)
            .field("admin_key", &self.admin_key.is_some())
            .field("token", &self.token.is_some())
            .field("rooms", &self.rooms.len())
            .finish()
    }
}

/// The claim that names the signing key when the header has no `kid`.
#[derive(Deserialize)]
struct KeyHint {
    #[serde(default)]
    iss: Option<String>,
}

impl Policy {
    /// The policy of a configuration: `api_keys`, `admin_key`, `token`, the rooms' `token` and
    /// `open`, `token_leeway_secs`.
    pub fn new(config: &super::ServeConfig) -> Policy {
        let keys = config
            .api_keys
            .iter()
            // Empty secrets are refused by `ServeConfig::check`, the one error `from_secret` has.
            .filter_map(|(id, secret)| {
                DecodingKey::from_secret(secret.expose().as_bytes())
                    .ok()
                    .map(|k| (id.clone(), k))
            })
            .collect();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = config.token_leeway_secs;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Policy {
            keys,
            admin_key: config.admin_key.clone(),
            token: config.token.clone(),
            rooms: config
                .rooms
                .iter()
                .map(|(name, r)| {
                    (
                        name.clone(),
                        RoomPolicy {
                            token: r.token.clone(),
                            open: r.open,
                        },
                    )
                })
                .collect(),
            validation,
        }
    }

    /// Whether anonymous callers may publish and view in `room`: it is marked open, or the
    /// gateway has no access tokens and no token covers the room. Never an ng call.
    pub fn room_open(&self, room: &str) -> bool {
        if room.starts_with(CALL_ROOM_PREFIX) {
            return false;
        }
        match self.rooms.get(room) {
            Some(r) if r.open => true,
            r => {
                self.keys.is_empty() && self.token.is_none() && r.is_none_or(|r| r.token.is_none())
            }
        }
    }

    /// Whether rooms without a token of their own need a credential (`api_keys` or `token`
    /// set); otherwise anyone who reaches the gateway may publish and view in them, and
    /// `serve` says so at start.
    pub fn closes_rooms(&self) -> bool {
        !self.keys.is_empty() || self.token.is_some()
    }

    /// The admin key, if one is set.
    pub fn admin_key(&self) -> Option<&Secret> {
        self.admin_key.as_ref()
    }

    /// The room token that covers `room` (its own, else the gateway's); never an ng call's.
    fn room_token(&self, room: &str) -> Option<&Secret> {
        if room.starts_with(CALL_ROOM_PREFIX) {
            return None;
        }
        self.rooms
            .get(room)
            .and_then(|r| r.token.as_ref())
            .or(self.token.as_ref())
    }

    /// Who sent `authorization` (the header's value, if any), about `room` when the request
    /// names one (a room token is checked against that room only).
    pub fn identify(
        &self,
        authorization: Option<&[u8]>,
        room: Option<&str>,
    ) -> Result<Caller, Failure> {
        let Some(value) = authorization else {
            return Ok(Caller::Anonymous);
        };
        if value.len() > MAX_CREDENTIAL_LEN {
            return Err(Failure::Malformed);
        }
        let credential = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Failure::Malformed)?;
        if self
            .admin_key
            .as_ref()
            .is_some_and(|k| same_secret(credential.as_bytes(), k.expose().as_bytes()))
        {
            return Ok(Caller::Admin);
        }
        if let Some(t) = room.and_then(|r| self.room_token(r)) {
            if same_secret(credential.as_bytes(), t.expose().as_bytes()) {
                return Ok(Caller::RoomToken);
            }
        }
        if credential.bytes().filter(|&b| b == b'.').count() == 2 {
            return self.verify(credential).map(Caller::Token);
        }
        Err(Failure::WrongToken)
    }

    /// Verifies an access token: a known key, HS256 only, the signature, the time claims.
    pub fn verify(&self, token: &str) -> Result<Verified, Failure> {
        if self.keys.is_empty() {
            return Err(Failure::UnknownKey);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| Failure::Malformed)?;
        let kid = match header.kid {
            Some(k) => k,
            None => {
                // The key from `iss`, read before the signature is checked (only to pick the
                // key: the claims are believed only once it verifies).
                let hint: KeyHint = jsonwebtoken::dangerous::insecure_decode_claims(token)
                    .map_err(|_| Failure::Malformed)?;
                hint.iss.ok_or(Failure::UnknownKey)?
            }
        };
        let key = self.keys.get(&kid).ok_or(Failure::UnknownKey)?;
        let data = jsonwebtoken::decode::<Claims>(token, key, &self.validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::ExpiredSignature => Failure::Expired,
                K::ImmatureSignature => Failure::NotYetValid,
                K::Base64(_) | K::Json(_) | K::Utf8(_) | K::InvalidToken => Failure::Malformed,
                _ => Failure::BadSignature,
            }
        })?;
        let c = data.claims;
        if !valid_identity(&c.sub) || (c.grants.room.is_some() && c.grants.room_prefix.is_some()) {
            return Err(Failure::BadSignature);
        }
        Ok(Verified {
            identity: c.sub,
            grants: c.grants,
        })
    }

    /// Whether `caller` may do `need` in `room`.
    pub fn allow(&self, caller: &Caller, room: &str, need: Need<'_>) -> Result<(), Failure> {
        match caller {
            Caller::Admin => Ok(()),
            // The simple mode: the room's token (matched against this very room by `identify`)
            // is every right in the room.
            Caller::RoomToken => Ok(()),
            Caller::Anonymous => {
                let open = self.room_open(room);
                match need {
                    Need::Publish
                    | Need::Subscribe
                    | Need::Join
                    | Need::Media
                    | Need::Own(None)
                        if open =>
                    {
                        Ok(())
                    }
                    _ => Err(Failure::Missing),
                }
            }
            Caller::Token(v) => {
                if !v.grants.covers(room) {
                    return Err(Failure::OtherRoom);
                }
                let g = &v.grants;
                let granted = match need {
                    Need::Publish => g.publish,
                    Need::Subscribe => g.subscribe,
                    Need::Join => g.publish && g.subscribe,
                    Need::Media => g.publish || g.subscribe,
                    Need::Own(owner) => g.admin || owner == Some(v.identity.as_str()),
                    Need::Admin => g.admin,
                    Need::List => g.list || g.admin,
                };
                if granted {
                    Ok(())
                } else {
                    Err(Failure::NotGranted)
                }
            }
        }
    }

    /// Whether `caller` reaches `room` at all (before it is told whether a session there
    /// exists): the admin key, the room's token, a token whose grant covers the room, or
    /// anyone in an open room.
    pub fn reach(&self, caller: &Caller, room: &str) -> Result<(), Failure> {
        match caller {
            Caller::Admin | Caller::RoomToken => Ok(()),
            Caller::Token(v) if v.grants.covers(room) => Ok(()),
            Caller::Token(_) => Err(Failure::OtherRoom),
            Caller::Anonymous if self.room_open(room) => Ok(()),
            Caller::Anonymous => Err(Failure::Missing),
        }
    }

    /// Whether `caller` may see the list of rooms (which ones is [`Policy::lists`]'s answer).
    pub fn allow_room_list(&self, caller: &Caller) -> Result<(), Failure> {
        match caller {
            Caller::Admin => Ok(()),
            Caller::Token(v) if v.grants.list || v.grants.admin => Ok(()),
            Caller::Token(_) => Err(Failure::NotGranted),
            Caller::RoomToken => Err(Failure::NotGranted),
            Caller::Anonymous => Err(Failure::Missing),
        }
    }

    /// Whether `caller` may read the whole gateway's figures (`/metrics`): the admin key, or a
    /// token with `admin` over every room.
    pub fn allow_metrics(&self, caller: &Caller) -> Result<(), Failure> {
        self.allow_whole_gateway(caller)
    }

    /// Whether `caller` may act on the whole node (drain it from a cluster): the same callers
    /// as [`Policy::allow_metrics`].
    pub fn allow_node_control(&self, caller: &Caller) -> Result<(), Failure> {
        self.allow_whole_gateway(caller)
    }

    fn allow_whole_gateway(&self, caller: &Caller) -> Result<(), Failure> {
        match caller {
            Caller::Admin => Ok(()),
            Caller::Token(v) if v.grants.admin && v.grants.every_room() => Ok(()),
            Caller::Token(_) | Caller::RoomToken => Err(Failure::NotGranted),
            Caller::Anonymous => Err(Failure::Missing),
        }
    }

    /// Which rooms of a listing `caller` sees (after [`Policy::allow_room_list`]).
    pub fn lists(&self, caller: &Caller, room: &str) -> bool {
        match caller {
            Caller::Admin => true,
            Caller::Token(v) => v.grants.covers(room),
            _ => false,
        }
    }

    /// The secret of API key `id`, for signing (webhooks, the demo's tokens).
    pub fn signing_key(config: &super::ServeConfig, id: &str) -> Option<Secret> {
        config.api_keys.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{RoomConfig, ServeConfig};

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn config() -> ServeConfig {
        let mut c = ServeConfig::default();
        c.api_keys.insert("k1".into(), SECRET.into());
        c.admin_key = Some("admin-admin-admin-admin-admin-admin".into());
        c.rooms.insert(
            "lobby".into(),
            RoomConfig {
                open: true,
                ..RoomConfig::default()
            },
        );
        c
    }

    fn token(grants: Grants, exp_in: i64) -> String {
        let now = unix_now() as i64;
        mint(
            "k1",
            SECRET.as_bytes(),
            &Claims {
                iss: None,
                sub: "alice".into(),
                exp: (now + exp_in) as u64,
                nbf: None,
                iat: Some(now as u64),
                grants,
            },
        )
        .unwrap()
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    #[test]
    fn a_token_verifies_and_its_grants_decide() {
        let p = Policy::new(&config());
        let t = token(
            Grants {
                room: Some("a".into()),
                subscribe: true,
                ..Grants::default()
            },
            60,
        );
        let c = p.identify(Some(&bearer(&t)), Some("a")).unwrap();
        assert_eq!(c.identity(), Some("alice"));
        assert_eq!(p.allow(&c, "a", Need::Subscribe), Ok(()));
        assert_eq!(p.allow(&c, "a", Need::Publish), Err(Failure::NotGranted));
        assert_eq!(p.allow(&c, "a", Need::Join), Err(Failure::NotGranted));
        assert_eq!(p.allow(&c, "b", Need::Subscribe), Err(Failure::OtherRoom));
        assert_eq!(p.allow(&c, "a", Need::Own(Some("alice"))), Ok(()));
        assert_eq!(
            p.allow(&c, "a", Need::Own(Some("bob"))),
            Err(Failure::NotGranted)
        );
        assert_eq!(p.allow(&c, "a", Need::Own(None)), Err(Failure::NotGranted));
        assert_eq!(p.allow_metrics(&c), Err(Failure::NotGranted));
    }

    #[test]
    fn expired_forged_unknown_and_none_tokens_are_refused() {
        let p = Policy::new(&config());
        let expired = token(Grants::default(), -3600);
        assert_eq!(
            p.identify(Some(&bearer(&expired)), None),
            Err(Failure::Expired)
        );
        let early = {
            let now = unix_now();
            mint(
                "k1",
                SECRET.as_bytes(),
                &Claims {
                    iss: None,
                    sub: "a".into(),
                    exp: now + 7200,
                    nbf: Some(now + 3600),
                    iat: None,
                    grants: Grants::default(),
                },
            )
            .unwrap()
        };
        assert_eq!(
            p.identify(Some(&bearer(&early)), None),
            Err(Failure::NotYetValid)
        );
        let good = token(Grants::default(), 60);
        // Another key's signature.
        let other = mint(
            "k1",
            b"ffffffffffffffffffffffffffffffffffff",
            &Claims {
                iss: None,
                sub: "alice".into(),
                exp: unix_now() + 60,
                nbf: None,
                iat: None,
                grants: Grants::default(),
            },
        )
        .unwrap();
        assert_eq!(
            p.identify(Some(&bearer(&other)), None),
            Err(Failure::BadSignature)
        );
        // A key the gateway does not hold.
        let unknown = mint(
            "k9",
            SECRET.as_bytes(),
            &Claims {
                iss: None,
                sub: "alice".into(),
                exp: unix_now() + 60,
                nbf: None,
                iat: None,
                grants: Grants::default(),
            },
        )
        .unwrap();
        assert_eq!(
            p.identify(Some(&bearer(&unknown)), None),
            Err(Failure::UnknownKey)
        );
        // alg none: the good token's claims, an unsigned header.
        let mut parts = good.split('.');
        let _ = parts.next();
        let claims = parts.next().unwrap();
        let none_header = {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#)
        };
        let unsigned = format!("{none_header}.{claims}.");
        assert!(p.identify(Some(&bearer(&unsigned)), None).is_err());
        // HS512 with the right secret: only HS256 is taken.
        let mut h = Header::new(Algorithm::HS512);
        h.kid = Some("k1".into());
        let hs512 = jsonwebtoken::encode(
            &h,
            &Claims {
                iss: None,
                sub: "alice".into(),
                exp: unix_now() + 60,
                nbf: None,
                iat: None,
                grants: Grants::default(),
            },
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            p.identify(Some(&bearer(&hs512)), None),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            p.identify(Some(b"Basic abc"), None),
            Err(Failure::Malformed)
        );
        assert_eq!(
            p.identify(Some(b"Bearer nope"), None),
            Err(Failure::WrongToken)
        );
        let long = vec![b'a'; MAX_CREDENTIAL_LEN + 1];
        assert_eq!(p.identify(Some(&long), None), Err(Failure::Malformed));
    }

    #[test]
    fn a_key_named_by_iss_verifies_too() {
        let p = Policy::new(&config());
        let claims = Claims {
            iss: Some("k1".into()),
            sub: "carol".into(),
            exp: unix_now() + 60,
            nbf: None,
            iat: None,
            grants: Grants::default(),
        };
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(
            p.identify(Some(&bearer(&t)), None).unwrap().identity(),
            Some("carol")
        );
    }

    #[test]
    fn anonymous_callers_reach_open_rooms_only_and_never_calls() {
        let p = Policy::new(&config());
        let a = Caller::Anonymous;
        assert_eq!(p.allow(&a, "lobby", Need::Publish), Ok(()));
        assert_eq!(p.allow(&a, "lobby", Need::Own(None)), Ok(()));
        assert_eq!(
            p.allow(&a, "lobby", Need::Own(Some("alice"))),
            Err(Failure::Missing)
        );
        assert_eq!(p.allow(&a, "lobby", Need::Admin), Err(Failure::Missing));
        assert_eq!(p.allow(&a, "other", Need::Subscribe), Err(Failure::Missing));
        // Nothing configured: rooms are open, calls are not.
        let open = Policy::new(&ServeConfig::default());
        assert!(!open.closes_rooms());
        assert_eq!(open.allow(&a, "any", Need::Join), Ok(()));
        assert_eq!(
            open.allow(&a, "call:abc", Need::Join),
            Err(Failure::Missing)
        );
        assert_eq!(open.allow_room_list(&a), Err(Failure::Missing));
    }

    #[test]
    fn calls_are_reached_only_by_grants_that_name_them() {
        let every = Grants {
            admin: true,
            ..Grants::default()
        };
        assert!(every.covers("room"));
        assert!(!every.covers("call:abc@host"));
        let calls = Grants {
            room_prefix: Some("call:".into()),
            admin: true,
            ..Grants::default()
        };
        assert!(calls.covers("call:abc@host"));
        let empty_prefix = Grants {
            room_prefix: Some(String::new()),
            ..Grants::default()
        };
        assert!(!empty_prefix.covers("call:abc"));
        assert!(empty_prefix.covers("x"));
    }

    #[test]
    fn room_tokens_reach_their_room_only() {
        let mut c = ServeConfig::default();
        c.rooms.insert(
            "b".into(),
            RoomConfig {
                token: Some("tok-b".into()),
                ..RoomConfig::default()
            },
        );
        let p = Policy::new(&c);
        assert_eq!(
            p.identify(Some(b"Bearer tok-b"), Some("b")),
            Ok(Caller::RoomToken)
        );
        assert_eq!(
            p.identify(Some(b"Bearer tok-b"), Some("a")),
            Err(Failure::WrongToken)
        );
        assert!(p.room_open("a"));
        assert!(!p.room_open("b"));
        assert_eq!(
            p.allow_room_list(&Caller::RoomToken),
            Err(Failure::NotGranted)
        );
    }

    #[test]
    fn secrets_compare_and_never_print() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert_eq!(format!("{:?}", Secret::from("hunter2")), "Secret(…)");
    }
}
