//! A telephony call's state as a cluster node keeps it in the directory, so that a standby
//! node takes the call over when its node dies (`cluster_takeover`).
//!
//! What is kept is what makes the call again, through the same code that made it: the ng
//! requests that shaped it (each offer and answer, as the proxy sent them) and, per member,
//! the address its ports are bound on, the keys of ours its phone holds (a DTLS-SRTP telephony
//! leg's: the keys its handshakes made), where its SRTP streams stand and, when it does ICE,
//! its credentials and the phone's nominations. The standby
//! replays the requests with each member pinned to its address ([`Pins`]), then gives each
//! member its keys back: the phones keep sending to the same address (moved to the standby, as
//! keepalived moves a virtual address) with the same keys, and hear the call again.
//!
//! The state holds SRTP master keys, so it is sealed (AES-256-GCM under `cluster_state_key`,
//! bound to its call-id) before it leaves the process; in clear only where the operator says
//! so (`cluster_state_clear`). Nothing of it is logged; its strings are zeroized when dropped.
//! It is written when the call changes (an offer, an answer, its end), never while it is
//! steady.

use std::collections::HashMap;
use std::net::SocketAddr;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

use super::interfaces::Interface;
use super::ng_call::Side;
use crate::leg::{DtlsMarks, IceMarks, Resume, SrtpMark, WebRtcMarks};

/// Most requests a call's state keeps: a call renegotiated more often than this is no longer
/// kept (its state is removed, and counted), rather than kept without its latest change.
pub(crate) const MAX_STEPS: usize = 64;

/// One request that shaped a call: the ng message as it came (base64 of its bencoding) and the
/// SDP of our reply to it.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Step {
    pub message: String,
    pub reply: String,
}

/// A member of the call as its phone knows it: its section's room, the side it faces, the
/// address its RTP socket is bound on (RTCP on the next port), our SDP's crypto lines, where
/// its SRTP streams stand, and its ICE.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Held {
    pub room: String,
    pub side: Side,
    pub rtp: SocketAddr,
    pub crypto: Vec<String>,
    #[serde(default)]
    pub srtp: Vec<SrtpMark>,
    /// Its ICE (our credentials, the phone's, the nominated addresses), when it did ICE.
    #[serde(default)]
    pub ice: Option<IceMarks>,
    /// A WebRTC member's DTLS-SRTP keys and what its browser knows of our SDP, once its
    /// DTLS connected (`rtp` and `crypto` are then unused).
    #[serde(default)]
    pub webrtc: Option<WebRtcMarks>,
    /// A telephony member's DTLS-SRTP keys, once its handshakes connected.
    #[serde(default)]
    pub dtls: Option<DtlsMarks>,
}

/// A call's state. See the [module documentation](self).
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct CallState {
    pub call_id: String,
    /// When the call was made (Unix milliseconds).
    pub created_at_ms: u64,
    /// The node's media interfaces, so the replay chooses for each side what the node chose.
    pub interfaces: Vec<Interface>,
    pub steps: Vec<Step>,
    pub members: Vec<Held>,
}

/// Names the call and counts what it holds: never its requests or keys.
impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState")
            .field("call_id", &self.call_id)
            .field("steps", &self.steps.len())
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl Drop for CallState {
    fn drop(&mut self) {
        for s in &mut self.steps {
            s.message.zeroize();
            s.reply.zeroize();
        }
        for m in &mut self.members {
            m.crypto.zeroize();
        }
    }
}

impl CallState {
    /// Each member as it was held, for the replay.
    pub fn pins(&self) -> Pins {
        Pins(
            self.members
                .iter()
                .map(|m| ((m.room.clone(), m.side), m.clone()))
                .collect(),
        )
    }
}

/// Each member of a call being taken over as it was held, by its room and the side it faces:
/// a member made again is bound where it was and takes its keys and SRTP state as it is made.
#[derive(Default)]
pub(crate) struct Pins(HashMap<(String, Side), Held>);

impl Pins {
    /// How many members it pins.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// What WebRTC member `side` of `room` resumes (its keys, session and SSRCs, and its
    /// streams' marks), if the call had it connected.
    pub fn webrtc(&self, room: &str, side: Side) -> Option<(WebRtcMarks, Vec<SrtpMark>)> {
        let h = self.0.get(&(room.to_owned(), side))?;
        Some((h.webrtc.clone()?, h.srtp.clone()))
    }

    /// Where telephony member `side` of `room` is bound, and what it resumes, if the call had
    /// it.
    pub fn of(&self, room: &str, side: Side) -> Option<(SocketAddr, Resume)> {
        let h = self.0.get(&(room.to_owned(), side))?;
        if h.webrtc.is_some() {
            return None;
        }
        let resume = Resume {
            crypto: h.crypto.iter().cloned().map(Zeroizing::new).collect(),
            srtp: h.srtp.clone(),
            ice: h.ice.clone(),
            dtls: h.dtls.clone(),
        };
        Some((h.rtp, resume))
    }
}

/// How call states are written: sealed under a key, or in clear.
pub(crate) enum Sealer {
    Sealed(LessSafeKey),
    Clear,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sealer::Sealed(_) => "Sealer::Sealed(..)",
            Sealer::Clear => "Sealer::Clear",
        })
    }
}

/// What a sealed state starts with (and what the sealing's additional data names).
const SEALED: &str = "sealed1:";
const CLEAR: &str = "clear1:";

impl Sealer {
    /// A sealer with the 256-bit key `hex` (64 hex digits, the content of
    /// `cluster_state_key`; white space around it is ignored).
    pub fn with_key(hex: &str) -> Result<Sealer, StateError> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StateError::Key);
        }
        let mut raw = Zeroizing::new([0u8; 32]);
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| StateError::Key)?;
        }
        let key = UnboundKey::new(&AES_256_GCM, raw.as_slice()).map_err(|_| StateError::Crypto)?;
        Ok(Sealer::Sealed(LessSafeKey::new(key)))
    }

    /// The state as written to the directory.
    pub fn seal(&self, state: &CallState) -> Result<String, StateError> {
        let json = Zeroizing::new(serde_json::to_vec(state).map_err(StateError::Json)?);
        let b64 = base64::engine::general_purpose::STANDARD;
        match self {
            Sealer::Clear => Ok(format!(
                "{CLEAR}{}",
                String::from_utf8_lossy(json.as_slice())
            )),
            Sealer::Sealed(key) => {
                let mut nonce = [0u8; NONCE_LEN];
                getrandom::fill(&mut nonce).map_err(|_| StateError::Crypto)?;
                let mut out = json.to_vec();
                key.seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad(&state.call_id).as_bytes()),
                    &mut out,
                )
                .map_err(|_| StateError::Crypto)?;
                let mut blob = nonce.to_vec();
                blob.extend_from_slice(&out);
                Ok(format!("{SEALED}{}", b64.encode(blob)))
            }
        }
    }

    /// A state read from the directory for call `call_id`. Err: not one this node can open
    /// (sealed under another key, for another call, in clear where this node seals, damaged).
    pub fn open(&self, call_id: &str, text: &str) -> Result<CallState, StateError> {
        let json: Zeroizing<Vec<u8>> = match (self, text.strip_prefix(SEALED)) {
            (Sealer::Sealed(key), Some(b64)) => {
                let mut blob = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| StateError::Damaged)?;
                if blob.len() < NONCE_LEN {
                    return Err(StateError::Damaged);
                }
                let mut nonce = [0u8; NONCE_LEN];
                nonce.copy_from_slice(&blob[..NONCE_LEN]);
                let mut sealed = blob.split_off(NONCE_LEN);
                let plain = key
                    .open_in_place(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad(call_id).as_bytes()),
                        &mut sealed,
                    )
                    .map_err(|_| StateError::DoesNotOpen)?
                    .to_vec();
                sealed.zeroize();
                Zeroizing::new(plain)
            }
            (Sealer::Clear, None) => match text.strip_prefix(CLEAR) {
                Some(json) => Zeroizing::new(json.as_bytes().to_vec()),
                None => return Err(StateError::NotAState),
            },
            (Sealer::Clear, Some(_)) => return Err(StateError::SealedHere),
            (Sealer::Sealed(_), None) => return Err(StateError::ClearHere),
        };
        let state: CallState = serde_json::from_slice(json.as_slice()).map_err(StateError::Json)?;
        if state.call_id != call_id {
            return Err(StateError::OtherCall(state.call_id.clone()));
        }
        Ok(state)
    }
}

/// Why a call's state was not sealed or opened, or a key not taken.
#[derive(Debug)]
pub enum StateError {
    /// A `cluster_state_key` that is not 64 hex digits.
    Key,
    /// The cipher or the random source failed.
    Crypto,
    /// The state's JSON does not encode or decode.
    Json(serde_json::Error),
    /// A sealed state that is not base64, or too short.
    Damaged,
    /// A sealed state that does not open under this key (another key, or not this call's).
    DoesNotOpen,
    /// Neither sealed nor in clear.
    NotAState,
    /// A sealed state on a node without a key.
    SealedHere,
    /// A state in clear on a node that takes sealed states only.
    ClearHere,
    /// The state of another call (its call-id).
    OtherCall(String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Key => {
                f.write_str("must hold 64 hex digits (a 256-bit key: `openssl rand -hex 32`)")
            }
            StateError::Crypto => f.write_str("the cipher failed"),
            StateError::Json(e) => write!(f, "call state: {e}"),
            StateError::Damaged => f.write_str("sealed state: not base64, or too short"),
            StateError::DoesNotOpen => f.write_str(
                "sealed state does not open under cluster_state_key (another key, or not this call's)",
            ),
            StateError::NotAState => f.write_str("not a call state"),
            StateError::SealedHere => {
                f.write_str("sealed state, and this node has no cluster_state_key")
            }
            StateError::ClearHere => {
                f.write_str("state in clear, and this node takes sealed states only")
            }
            StateError::OtherCall(id) => write!(f, "the state is call {id:?}'s"),
        }
    }
}

impl std::error::Error for StateError {}

/// The additional data a state is sealed with: its call-id, so a state moved to another
/// call's field does not open.
fn aad(call_id: &str) -> String {
    format!("secrelay call state 1 {call_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(call_id: &str) -> CallState {
        CallState {
            call_id: call_id.into(),
            created_at_ms: 1,
            interfaces: Vec::new(),
            steps: vec![Step {
                message: "ZDc6Y29tbWFuZDU6b2ZmZXJl".into(),
                reply: "v=0".into(),
            }],
            members: vec![Held {
                room: format!("call:{call_id}:0"),
                side: Side::B,
                rtp: "127.0.0.2:30000".parse().unwrap(),
                crypto: vec!["1 AES_CM_128_HMAC_SHA1_80 inline:KEY".into()],
                srtp: Vec::new(),
                ice: None,
                webrtc: None,
                dtls: Some(DtlsMarks {
                    fingerprint: "sha-256 AB:CD".into(),
                    profile: "AES_CM_128_HMAC_SHA1_80".into(),
                    rtp: ("inline:DTLSOURS".into(), "inline:DTLSTHEIRS".into()),
                    rtcp: None,
                }),
            }],
        }
    }

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn a_sealed_state_opens_for_its_call_under_its_key_only() {
        let s = Sealer::with_key(KEY).unwrap();
        let text = s.seal(&state("c1")).unwrap();
        assert!(text.starts_with(SEALED));
        assert!(!text.contains("inline:KEY"), "keys in clear: {text}");
        assert!(!text.contains("DTLSOURS"), "keys in clear: {text}");
        let back = s.open("c1", &text).unwrap();
        assert_eq!(back.members[0].crypto, state("c1").members[0].crypto);
        assert_eq!(back.members[0].dtls, state("c1").members[0].dtls);
        let (at, resume) = back.pins().of("call:c1:0", Side::B).unwrap();
        assert_eq!(at, back.members[0].rtp);
        assert_eq!(resume.crypto[0].as_str(), back.members[0].crypto[0]);
        assert_eq!(resume.dtls, back.members[0].dtls);
        let err = s.open("c2", &text).err().unwrap();
        assert!(matches!(err, StateError::DoesNotOpen), "{err}");
        let other = Sealer::with_key(&KEY.replace("1f", "ff")).unwrap();
        assert!(other.open("c1", &text).is_err());
        assert!(matches!(
            Sealer::Clear.open("c1", &text).unwrap_err(),
            StateError::SealedHere
        ));
        let mut bad = text.clone();
        bad.push('A');
        assert!(s.open("c1", &bad).is_err());
    }

    #[test]
    fn a_clear_state_is_taken_only_where_states_are_clear() {
        let text = Sealer::Clear.seal(&state("c1")).unwrap();
        assert!(text.starts_with(CLEAR));
        assert_eq!(Sealer::Clear.open("c1", &text).unwrap().call_id, "c1");
        let s = Sealer::with_key(KEY).unwrap();
        assert!(s
            .open("c1", &text)
            .unwrap_err()
            .to_string()
            .contains("sealed states only"));
    }

    #[test]
    fn a_state_written_before_members_kept_their_ice_still_opens() {
        let text = Sealer::Clear.seal(&state("c1")).unwrap();
        assert!(text.contains(",\"ice\":null"), "{text}");
        let older = text.replace(",\"ice\":null", "");
        let back = Sealer::Clear.open("c1", &older).unwrap();
        assert!(back.members[0].ice.is_none());
    }

    #[test]
    fn a_bad_key_names_what_is_wrong() {
        for bad in ["", "00", &"zz".repeat(32), &"00".repeat(33)] {
            assert!(
                Sealer::with_key(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("64 hex digits"),
                "{bad}"
            );
        }
        assert!(Sealer::with_key(&format!(" {KEY}\n")).is_ok());
    }
}
