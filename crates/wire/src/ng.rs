//! rtpengine's "ng" control protocol, as SIP proxies speak it (Kamailio's and OpenSIPS's
//! `rtpengine` modules): a cookie, a space and one bencoded dictionary per UDP datagram, the
//! reply under the same cookie. This module reads a request's dictionary into a typed
//! [`Request`] and builds replies; it is sans-IO (`server::ng` owns the socket).
//!
//! Keys are read as rtpengine reads them: case-insensitively, with `-`, `_` and spaces alike
//! (`transport-protocol`, `transport protocol`, `transport_protocol`). Keys and flags it does
//! not know are ignored as rtpengine ignores them; known ones it does not act on are reported
//! back as a `warning`.

use std::fmt;
use std::net::IpAddr;

use crate::bencode::Bencode;
use crate::sdp_rtp::Transport;

/// Why a request cannot be carried out; the reply's `error-reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NgError {
    /// The message is not bencode, or has no cookie (the reason).
    Malformed(String),
    /// The body is not a dictionary.
    NotADictionary,
    /// No `command` key.
    NoCommand,
    /// A command this gateway does not know (named).
    UnknownCommand(String),
    /// A key the command needs is missing (named).
    MissingKey(&'static str),
    /// A key's value is of the wrong type or not understood (the key, what was wrong).
    BadValue(&'static str, String),
    /// A command or flag of rtpengine's this gateway does not do (what it asks for, and
    /// which command or flag asked).
    Unsupported(&'static str, String),
}

impl fmt::Display for NgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NgError::Malformed(why) => write!(f, "malformed message: {why}"),
            NgError::NotADictionary => write!(f, "the message is not a dictionary"),
            NgError::NoCommand => write!(f, "no command"),
            NgError::UnknownCommand(c) => write!(f, "unknown command {c:?}"),
            NgError::MissingKey(k) => write!(f, "missing {k}"),
            NgError::BadValue(k, why) => write!(f, "bad {k}: {why}"),
            NgError::Unsupported(what, asked) => {
                write!(f, "{asked}: {what} is not supported by this media relay")
            }
        }
    }
}

impl std::error::Error for NgError {}

/// `ICE` (`remove`, `force`, or left as the SDP says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ice {
    /// Strip ICE towards the other side.
    Remove,
    /// Add ICE towards the other side.
    Force,
    /// `optional`: in an offer, add ICE towards the other side (as `Force`); in an answer,
    /// ICE towards the offerer only when the answerer's SDP had it (as the default).
    Optional,
}

/// `DTLS` (`off`, `passive`, `active`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtls {
    /// No DTLS towards the other side.
    Off,
    /// Our DTLS role towards the other side: server.
    Passive,
    /// Our DTLS role towards the other side: client.
    Active,
}

/// `rtcp-mux` options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RtcpMux {
    /// Offer RTCP muxed towards the other side.
    pub offer: bool,
    /// Require it.
    pub require: bool,
    /// Accept it from this side.
    pub accept: bool,
    /// Do not mux towards the other side.
    pub demux: bool,
}

/// The `codec` dictionary of an `offer` (and the `codec-<op>-<name>` flags that say the same),
/// as rtpengine's users drive transcoding. Each list holds codec names as given: `NAME`,
/// `NAME/CLOCK` or `NAME/CLOCK/CHANNELS` (matched case-insensitively by whoever applies
/// them), or the keywords `all` and `full` where rtpengine takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodecFlags {
    /// `strip`: removed from the offer, as if never offered.
    pub strip: Vec<String>,
    /// `mask`: removed from the offer towards the other side, still accepted from this side
    /// (to be transcoded).
    pub mask: Vec<String>,
    /// `consume`: as `mask`, and transcoding engaged.
    pub consume: Vec<String>,
    /// `accept`: kept in the offer, and accepted from this side even when the other side
    /// rejects it (`all`: every codec; the `always transcode` flag says the same).
    pub accept: Vec<String>,
    /// `except`: kept even when `strip`/`mask` say `all`.
    pub except: Vec<String>,
    /// `offer`: as `except`, and put first, in this order.
    pub offer: Vec<String>,
    /// `transcode`: as `offer`, and added when this side did not offer it (transcoded).
    pub transcode: Vec<String>,
    /// `set`: parameters of a codec this side offered, for what it is sent transcoded
    /// (`AMR-WB/16000/1/23850`: AMR-WB at 23.85 kbit/s).
    pub set: Vec<String>,
}

impl CodecFlags {
    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        *self == CodecFlags::default()
    }

    /// The list of operation `op` (`strip`, `mask`, …), if it is one.
    fn list_mut(&mut self, op: &str) -> Option<&mut Vec<String>> {
        Some(match op {
            "strip" => &mut self.strip,
            "mask" => &mut self.mask,
            "consume" => &mut self.consume,
            "accept" => &mut self.accept,
            "except" => &mut self.except,
            "offer" => &mut self.offer,
            "transcode" => &mut self.transcode,
            "set" => &mut self.set,
            _ => return None,
        })
    }
}

/// What an `offer` or `answer` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `transport-protocol`: the transport towards the other side.
    pub transport: Option<Transport>,
    /// `transport-protocol: accept` (in an answer): the offerer is answered in the
    /// answerer's transport, as it is named.
    pub transport_accept: bool,
    /// `ICE`.
    pub ice: Option<Ice>,
    /// `DTLS`.
    pub dtls: Option<Dtls>,
    /// `DTLS-reverse`: our DTLS role towards the side that sent the SDP (answering its
    /// `actpass`: `passive` makes us the server).
    pub dtls_reverse: Option<Dtls>,
    /// `DTLS-fingerprint`: the hash of the fingerprint our SDP carries (`sha-256` by default;
    /// `sha-1`, `sha-384`, `sha-512`), as named, lowercase.
    pub dtls_fingerprint: Option<String>,
    /// `SDES: off`.
    pub sdes_off: bool,
    /// `SDES: only-<suite>` (the suites to offer, in order, as named), empty for all.
    pub sdes_only: Vec<String>,
    /// `SDES: no-<suite>` (as named).
    pub sdes_no: Vec<String>,
    /// `record call: yes` (or the `record-call` flag): the call is recorded from this request
    /// on, as `start recording` does.
    pub record_call: bool,
    /// `OSRTP: offer`: offer SDES on `RTP/AVP` (opportunistic SRTP, RFC 8643) towards the
    /// other side of a plain offer.
    pub osrtp_offer: bool,
    /// `OSRTP: accept`: answer an opportunistic SRTP offer with SDES even when the other side
    /// answered without it.
    pub osrtp_accept: bool,
    /// `rtcp-mux`.
    pub rtcp_mux: RtcpMux,
    /// `received-from` (the SIP source address of the message), used with the
    /// `SIP-source-address` flag.
    pub received_from: Option<IpAddr>,
    /// The `codec` dictionary and `codec-…` flags (`always transcode` is `accept: all`).
    pub codec: CodecFlags,
    /// `ptime`: the packet time towards the other side, ms.
    pub ptime: Option<u32>,
    /// `ptime-reverse`: the packet time towards this side (in the answer to it), ms.
    pub ptime_reverse: Option<u32>,
    /// The `flags` list, lowercased.
    pub flags: Vec<String>,
    /// `replace` (normalized: `origin`, `session-connection`, `sdp-version`, `username`,
    /// `session-name`, `zero-address`).
    pub replace: Vec<String>,
    /// `direction`: the media interface (by name) of the side the request comes from, then of
    /// the other side.
    pub direction: Vec<String>,
    /// `address-family` (`IP4`, `IP6`): the family towards the other side.
    pub address_family: Option<String>,
    /// Known keys and flags this gateway does not act on (for the reply's `warning`).
    pub ignored: Vec<String>,
}

impl Flags {
    /// Whether a `flags` entry is present (case-insensitive).
    pub fn has(&self, flag: &str) -> bool {
        let want = norm(flag);
        self.flags.contains(&want)
    }

    /// Whether `replace` names `what` (normalized).
    pub fn replaces(&self, what: &str) -> bool {
        self.replace.iter().any(|r| r == what)
    }
}

/// An `offer` or `answer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferAnswer {
    /// `call-id`.
    pub call_id: String,
    /// `from-tag`: the caller's.
    pub from_tag: String,
    /// `to-tag`: the callee's (required in an answer).
    pub to_tag: Option<String>,
    /// `via-branch`, if given.
    pub via_branch: Option<String>,
    /// `sdp`.
    pub sdp: String,
    /// What the proxy asks for.
    pub flags: Flags,
}

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// `ping`: liveness.
    Ping,
    /// `offer`: the caller's SDP; the reply is the SDP for the callee.
    Offer(OfferAnswer),
    /// `answer`: the callee's SDP; the reply is the SDP for the caller.
    Answer(OfferAnswer),
    /// `delete`: end a call (or one side of it, by tag).
    Delete {
        /// `call-id`.
        call_id: String,
        /// `from-tag`, if given.
        from_tag: Option<String>,
        /// `to-tag`, if given.
        to_tag: Option<String>,
    },
    /// `query`: a call's figures.
    Query {
        /// `call-id`.
        call_id: String,
    },
    /// `list`: the calls.
    List {
        /// `limit`, if given.
        limit: Option<usize>,
    },
    /// `statistics`: the gateway's figures.
    Statistics,
    /// `block media`, `unblock media`, `silence media`, `unsilence media`, `block DTMF`,
    /// `unblock DTMF`: what of a participant's (or the whole call's) media goes on.
    Gate(GateRequest),
    /// `play DTMF`: a digit sent as if a participant had sent it.
    PlayDtmf(PlayDtmfRequest),
    /// `play media`: an audio file played to a participant.
    PlayMedia(PlayMediaRequest),
    /// `stop media`: the playback to a participant stopped.
    StopMedia {
        /// `call-id`.
        call_id: String,
        /// `from-tag`: the participant; `None` with `all`: every participant.
        from_tag: Option<String>,
    },
    /// `publish`: media sent to the gateway without an offer/answer (the SDP `sendonly`); the
    /// reply is our `recvonly` answer, and subscribers may then hear it.
    Publish(OfferAnswer),
    /// `subscribe request`: a new participant that receives a copy of the media of chosen
    /// participants; the reply is our `sendonly` offer to it.
    SubscribeRequest(SubscribeRequest),
    /// `subscribe answer`: the subscriber's answer to that offer; media flows to it once
    /// taken.
    SubscribeAnswer {
        /// `call-id`.
        call_id: String,
        /// `to-tag`: the subscription's, as the `subscribe request`'s reply named it.
        to_tag: String,
        /// `sdp`: the subscriber's answer.
        sdp: String,
        /// The flags given with it.
        flags: Flags,
    },
    /// `unsubscribe`: the subscription named by `to-tag` ends.
    Unsubscribe {
        /// `call-id`.
        call_id: String,
        /// `to-tag`: the subscription's.
        to_tag: String,
    },
    /// `start recording`, `stop recording`, `pause recording`.
    Recording {
        /// `call-id`.
        call_id: String,
        /// What to do.
        action: RecordingAction,
    },
}

/// A `subscribe request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeRequest {
    /// `call-id`.
    pub call_id: String,
    /// The participants whose media the subscriber receives (`from-tag`, then `from-tags`),
    /// in the order its SDP lists them; empty with `all`.
    pub from_tags: Vec<String>,
    /// `all` (or `all: offer-answer`): every participant of the call's offer and answer.
    pub all: bool,
    /// `to-tag`: the subscription's tag, if the proxy chose one (else the gateway makes one).
    pub to_tag: Option<String>,
    /// The flags that shape our offer to the subscriber, as an `offer`'s shape its SDP.
    pub flags: Flags,
}

/// What a recording command asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingAction {
    /// `start recording`: record the call from now on (again into its file after a pause).
    Start,
    /// `stop recording`: stop, the call's file closed.
    Stop,
    /// `pause recording` (or `stop recording` with `pause` in its flags or `pause: yes`):
    /// stop, the call's file kept open for a later `start recording`.
    Pause,
}

/// A `play DTMF` request, its values held to rtpengine's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayDtmfRequest {
    /// `call-id`.
    pub call_id: String,
    /// `from-tag`: the participant the digit is sent as (to the other side); `None` with
    /// `all`: every participant.
    pub from_tag: Option<String>,
    /// The event code, 0–15 (`code` or `digit`: a number, or one of `0`–`9`, `*`, `#`,
    /// `A`–`D`).
    pub event: u8,
    /// `duration`, ms: 250 unless given, held to 100–5000.
    pub duration_ms: u32,
    /// `volume`, as −dBm0: 8 unless given (rtpengine's −8 dB; a positive value read as
    /// negative), held to 0–63.
    pub volume: u8,
    /// `pause` after it, ms: 100 unless given, held to 100–5000.
    pub pause_ms: u32,
}

/// Where the audio a `play media` request plays comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum MediaFile {
    /// `file`: a file's name (the gateway reads it from its media folder only).
    File(String),
    /// `blob`: the file's contents.
    Blob(Vec<u8>),
}

impl std::fmt::Debug for MediaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MediaFile::File(name) => f.debug_tuple("File").field(name).finish(),
            MediaFile::Blob(b) => write!(f, "Blob({} bytes)", b.len()),
        }
    }
}

/// A `play media` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayMediaRequest {
    /// `call-id`.
    pub call_id: String,
    /// `from-tag`: the participant the media is played to; `None` with `all`: every
    /// participant.
    pub from_tag: Option<String>,
    /// `file` or `blob` (`db-id` is refused: there is no database).
    pub media: MediaFile,
    /// `repeat-times`: how many times to play it at most (at least 1; 1 unless given, or
    /// without a bound when only `repeat-duration` is given).
    pub times: u32,
    /// `repeat-duration`, ms: play it again while less than this has passed (a play under way
    /// is finished), within `times`.
    pub repeat_ms: Option<u64>,
    /// `start-pos`: the frame (packet time) to start from.
    pub start_frame: u64,
}

/// What a `block …`, `silence …` or `unblock …` command stops or lets through again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gated {
    /// Media (everything but telephone-events): `block media`.
    Media,
    /// Media replaced with silence: `silence media`.
    Silence,
    /// Telephone-events: `block DTMF`.
    Dtmf,
}

/// A `block …`/`unblock …`/`silence …`/`unsilence …` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRequest {
    /// `call-id`.
    pub call_id: String,
    /// `from-tag`: the participant whose packets (what it sends) the command is for; the
    /// whole call when absent.
    pub from_tag: Option<String>,
    /// `to-tag`: with `from-tag`, the flow to this participant only (in a call of two sides,
    /// the same flow as the from-tag's).
    pub to_tag: Option<String>,
    /// What it is about.
    pub what: Gated,
    /// Stop it (`block`, `silence`), or let it through again (`unblock`, `unsilence`, or
    /// `DTMF-security: off`).
    pub stop: bool,
    /// `all` (in `flags`, or `all: all`): a call-wide unblock lets each participant's packets
    /// through too, not only the call-wide block's.
    pub all: bool,
}

impl Request {
    /// The call the command is about, for those about one.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Request::Offer(o) | Request::Answer(o) | Request::Publish(o) => Some(&o.call_id),
            Request::Gate(g) => Some(&g.call_id),
            Request::PlayDtmf(p) => Some(&p.call_id),
            Request::PlayMedia(p) => Some(&p.call_id),
            Request::StopMedia { call_id, .. } => Some(call_id),
            Request::Recording { call_id, .. } => Some(call_id),
            Request::SubscribeRequest(r) => Some(&r.call_id),
            Request::SubscribeAnswer { call_id, .. } | Request::Unsubscribe { call_id, .. } => {
                Some(call_id)
            }
            Request::Delete { call_id, .. } | Request::Query { call_id } => Some(call_id),
            Request::Ping | Request::List { .. } | Request::Statistics => None,
        }
    }
}

/// A key or flag normalized as rtpengine compares them: lowercase, `_` and spaces as `-`.
pub fn norm(k: &str) -> String {
    k.trim()
        .chars()
        .map(|c| match c {
            '_' | ' ' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// The dictionary's entries with normalized keys.
fn entries(body: &Bencode) -> Result<Vec<(String, &Bencode)>, NgError> {
    match body {
        Bencode::Dict(d) => Ok(d
            .iter()
            .map(|(k, v)| (norm(&String::from_utf8_lossy(k)), v))
            .collect()),
        _ => Err(NgError::NotADictionary),
    }
}

fn text(key: &'static str, v: &Bencode) -> Result<String, NgError> {
    match v {
        Bencode::Str(s) => {
            String::from_utf8(s.clone()).map_err(|_| NgError::BadValue(key, "not UTF-8".into()))
        }
        Bencode::Int(n) => Ok(n.to_string()),
        _ => Err(NgError::BadValue(key, "not a string".into())),
    }
}

/// A `DTLS` or `DTLS-reverse` value.
fn dtls_role(key: &'static str, v: &Bencode) -> Result<Dtls, NgError> {
    match norm(&text(key, v)?).as_str() {
        "off" | "no" | "disable" => Ok(Dtls::Off),
        "passive" => Ok(Dtls::Passive),
        "active" => Ok(Dtls::Active),
        other => Err(NgError::BadValue(key, other.into())),
    }
}

/// A value that is a string or a list of strings, as a list.
fn list(key: &'static str, v: &Bencode) -> Result<Vec<String>, NgError> {
    match v {
        Bencode::List(items) => items.iter().map(|i| text(key, i)).collect(),
        other => Ok(vec![text(key, other)?]),
    }
}

fn parse_flags(e: &[(String, &Bencode)]) -> Result<Flags, NgError> {
    let mut f = Flags::default();
    for (k, v) in e {
        f.take(k, v)?;
    }
    Ok(f)
}

impl Flags {
    /// Takes one key of an offer or answer (its name lower-cased) into the flags: refused
    /// where its value is not one rtpengine takes, noted in `ignored` where we take it but do
    /// nothing with it; keys that are not flags are left to the caller.
    fn take(&mut self, k: &str, v: &Bencode) -> Result<(), NgError> {
        match k {
            "transport-protocol" => self.take_transport(v)?,
            "ice" => {
                self.ice = match norm(&text("ICE", v)?).as_str() {
                    "remove" => Some(Ice::Remove),
                    // (`force-relay` keeps only our candidates: we announce only ours.)
                    "force" | "force-relay" => Some(Ice::Force),
                    "optional" => Some(Ice::Optional),
                    "default" => None,
                    other => return Err(NgError::BadValue("ICE", other.into())),
                }
            }
            "dtls" => self.dtls = Some(dtls_role("DTLS", v)?),
            "dtls-reverse" => self.dtls_reverse = Some(dtls_role("DTLS-reverse", v)?),
            "dtls-fingerprint" => {
                let hash = norm(&text("DTLS-fingerprint", v)?);
                if !["sha-1", "sha-256", "sha-384", "sha-512"].contains(&hash.as_str()) {
                    return Err(NgError::BadValue("DTLS-fingerprint", hash));
                }
                self.dtls_fingerprint = Some(hash);
            }
            "sdes" => self.take_sdes(v)?,
            "osrtp" => {
                for item in list("OSRTP", v)? {
                    match norm(&item).as_str() {
                        "offer" | "offer-rfc" => self.osrtp_offer = true,
                        "accept" | "accept-rfc" => self.osrtp_accept = true,
                        _ => self.ignored.push(format!("OSRTP: {item}")),
                    }
                }
            }
            "rtcp-mux" => self.take_rtcp_mux(v)?,
            "received-from" => {
                // ["IP4", "192.0.2.1"]
                let parts = list("received-from", v)?;
                let ip = parts
                    .last()
                    .and_then(|a| a.parse::<IpAddr>().ok())
                    .ok_or_else(|| NgError::BadValue("received-from", "no IP address".into()))?;
                self.received_from = Some(ip);
            }
            "flags" => self.take_flag_list(v)?,
            "codec" => {
                for (op, val) in
                    entries(v).map_err(|_| NgError::BadValue("codec", "not a dictionary".into()))?
                {
                    let names = list("codec", val)?;
                    match self.codec.list_mut(&op) {
                        Some(l) => l.extend(names),
                        None => self.ignored.push(format!("codec: {op}")),
                    }
                }
            }
            "ptime" | "ptime-reverse" => {
                let ms = text("ptime", v)?
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|p| (1..=1000).contains(p))
                    .ok_or_else(|| NgError::BadValue("ptime", "not a packet time in ms".into()))?;
                if k == "ptime" {
                    self.ptime = Some(ms);
                } else {
                    self.ptime_reverse = Some(ms);
                }
            }
            "replace" => self.take_replace(v)?,
            "direction" => self.direction = list("direction", v)?,
            "address-family" => {
                let fam = text("address-family", v)?.trim().to_ascii_uppercase();
                if fam != "IP4" && fam != "IP6" {
                    return Err(NgError::BadValue(
                        "address-family",
                        format!("{fam:?} (IP4 or IP6)"),
                    ));
                }
                self.address_family = Some(fam);
            }
            "t.38" | "t38" => {
                return Err(NgError::Unsupported("T.38 gatewaying", "T.38".into()));
            }
            "record-call" => {
                let v = norm(&text("record-call", v)?);
                self.record_call |= matches!(v.as_str(), "yes" | "on" | "true");
            }
            "metadata" | "media-address" | "label" | "set-label" | "from-label" | "to-label" => {
                self.ignored.push(k.to_owned())
            }
            _ => {}
        }
        Ok(())
    }

    /// `transport-protocol`: one we write, or `accept` (the answerer's own).
    fn take_transport(&mut self, v: &Bencode) -> Result<(), NgError> {
        let value = text("transport-protocol", v)?;
        if norm(&value) == "accept" {
            self.transport_accept = true;
            return Ok(());
        }
        let t = Transport::parse(&value);
        if let Transport::Other(s) = &t {
            return Err(NgError::BadValue(
                "transport-protocol",
                format!("{s:?} (RTP/AVP, RTP/AVPF, RTP/SAVP, RTP/SAVPF, UDP/TLS/RTP/SAVP[F])"),
            ));
        }
        self.transport = Some(t);
        Ok(())
    }

    /// `SDES`: `off`, `only-SUITE`, `no-SUITE`; rtpengine takes it as a list only: a string
    /// there changes nothing.
    fn take_sdes(&mut self, v: &Bencode) -> Result<(), NgError> {
        if !matches!(v, Bencode::List(_)) {
            self.ignored
                .push(format!("SDES: {} (not a list)", text("SDES", v)?));
            return Ok(());
        }
        for item in list("SDES", v)? {
            let n = norm(&item);
            if n == "off" || n == "no" || n == "disable" {
                self.sdes_off = true;
            } else if let Some(s) = item.trim().strip_prefix("only-") {
                self.sdes_only.push(s.to_owned());
            } else if let Some(s) = item.trim().strip_prefix("no-") {
                self.sdes_no.push(s.to_owned());
            } else {
                self.ignored.push(format!("SDES: {item}"));
            }
        }
        Ok(())
    }

    /// `rtcp-mux`: `offer`, `require`, `accept`, `demux`.
    fn take_rtcp_mux(&mut self, v: &Bencode) -> Result<(), NgError> {
        for item in list("rtcp-mux", v)? {
            match norm(&item).as_str() {
                "offer" => self.rtcp_mux.offer = true,
                "require" => self.rtcp_mux.require = true,
                "accept" => self.rtcp_mux.accept = true,
                "demux" => self.rtcp_mux.demux = true,
                _ => self.ignored.push(format!("rtcp-mux: {item}")),
            }
        }
        Ok(())
    }

    /// `flags`: each kept lower-cased; `codec-<op>-<name>` is the codec dictionary's entry
    /// (the name kept as given), `always-transcode` accepts every codec, `record-call` records.
    fn take_flag_list(&mut self, v: &Bencode) -> Result<(), NgError> {
        for item in list("flags", v)? {
            let n = norm(&item);
            let rest = item.trim().get("codec-".len()..).unwrap_or_default();
            if let Some((op, name)) = n
                .strip_prefix("codec-")
                .and_then(|r| r.split_once('-'))
                .map(|(op, _)| (op.to_owned(), rest.get(op.len() + 1..).unwrap_or_default()))
            {
                if let Some(l) = self.codec.list_mut(&op) {
                    if !name.is_empty() {
                        l.push(name.to_owned());
                    }
                    continue;
                }
            }
            if n == "always-transcode" {
                self.codec.accept.push("all".into());
            }
            self.record_call |= n == "record-call";
            self.flags.push(n);
        }
        Ok(())
    }

    /// `replace`: the SDP fields we rewrite as rtpengine does.
    fn take_replace(&mut self, v: &Bencode) -> Result<(), NgError> {
        for item in list("replace", v)? {
            let n = norm(&item);
            match n.as_str() {
                "origin" | "session-connection" | "sdp-version" | "username" | "session-name"
                | "zero-address" => self.replace.push(n),
                _ => self.ignored.push(format!("replace: {item}")),
            }
        }
        Ok(())
    }
}

fn offer_answer(e: &[(String, &Bencode)], answer: bool) -> Result<OfferAnswer, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let call_id = text(
        "call-id",
        get("call-id").ok_or(NgError::MissingKey("call-id"))?,
    )?;
    let from_tag = text(
        "from-tag",
        get("from-tag").ok_or(NgError::MissingKey("from-tag"))?,
    )?;
    let to_tag = get("to-tag").map(|v| text("to-tag", v)).transpose()?;
    if answer && to_tag.is_none() {
        return Err(NgError::MissingKey("to-tag"));
    }
    let sdp = text("sdp", get("sdp").ok_or(NgError::MissingKey("sdp"))?)?;
    Ok(OfferAnswer {
        call_id,
        from_tag,
        to_tag,
        via_branch: get("via-branch")
            .map(|v| text("via-branch", v))
            .transpose()?,
        sdp,
        flags: parse_flags(e)?,
    })
}

/// Reads a request from its dictionary.
pub fn parse(body: &Bencode) -> Result<Request, NgError> {
    let e = entries(body)?;
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let required = |k: &'static str| text(k, get(k).ok_or(NgError::MissingKey(k))?);
    let command = norm(&text("command", get("command").ok_or(NgError::NoCommand)?)?);
    Ok(match command.as_str() {
        "ping" => Request::Ping,
        "offer" => Request::Offer(offer_answer(&e, false)?),
        "answer" => Request::Answer(offer_answer(&e, true)?),
        "delete" => Request::Delete {
            call_id: required("call-id")?,
            from_tag: get("from-tag").map(|v| text("from-tag", v)).transpose()?,
            to_tag: get("to-tag").map(|v| text("to-tag", v)).transpose()?,
        },
        "query" => Request::Query {
            call_id: required("call-id")?,
        },
        "list" => Request::List {
            limit: get("limit")
                .map(|v| match v {
                    Bencode::Int(n) if *n >= 0 => Ok(*n as usize),
                    other => text("limit", other)?
                        .parse()
                        .map_err(|_| NgError::BadValue("limit", "not a number".into())),
                })
                .transpose()?,
        },
        "statistics" => Request::Statistics,
        "block-media" | "unblock-media" | "silence-media" | "unsilence-media" | "block-dtmf"
        | "unblock-dtmf" => Request::Gate(gate(&command, &e)?),
        "play-dtmf" => Request::PlayDtmf(play_dtmf(&e)?),
        "play-media" => Request::PlayMedia(play_media(&e)?),
        "stop-media" => {
            let who = chosen(&e)?;
            if who.from_tag.is_none() && !who.all {
                return Err(NgError::MissingKey("from-tag"));
            }
            Request::StopMedia {
                call_id: who.call_id,
                from_tag: if who.all { None } else { who.from_tag },
            }
        }
        "publish" => Request::Publish(offer_answer(&e, false)?),
        "subscribe-request" => Request::SubscribeRequest(subscribe_request(&e)?),
        "subscribe-answer" => Request::SubscribeAnswer {
            call_id: required("call-id")?,
            to_tag: required("to-tag")?,
            sdp: required("sdp")?,
            flags: parse_flags(&e)?,
        },
        "unsubscribe" => Request::Unsubscribe {
            call_id: required("call-id")?,
            to_tag: required("to-tag")?,
        },
        "start-recording" | "stop-recording" | "pause-recording" => {
            let yes = |v: &Bencode| {
                text("pause", v).is_ok_and(|t| matches!(norm(&t).as_str(), "yes" | "on" | "true"))
            };
            let pause = command == "pause-recording"
                || get("pause").is_some_and(yes)
                || get("flags")
                    .map(|f| list("flags", f))
                    .transpose()?
                    .is_some_and(|f| f.iter().any(|f| norm(f) == "pause"));
            Request::Recording {
                call_id: required("call-id")?,
                action: match command.as_str() {
                    "start-recording" => RecordingAction::Start,
                    _ if pause => RecordingAction::Pause,
                    _ => RecordingAction::Stop,
                },
            }
        }
        other => match unsupported(other) {
            Some(what) => return Err(NgError::Unsupported(what, other.to_owned())),
            None => return Err(NgError::UnknownCommand(command)),
        },
    })
}

/// A `block …`/`silence …`/`unblock …` command (`command` normalized) from its entries.
fn gate(command: &str, e: &[(String, &Bencode)]) -> Result<GateRequest, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let (verb, what) = command.split_once('-').unwrap_or((command, ""));
    let what = match what {
        "media" if verb.ends_with("silence") => Gated::Silence,
        "media" => Gated::Media,
        _ => Gated::Dtmf,
    };
    let mut stop = !verb.starts_with("un");
    if let Some(mode) = get("dtmf-security").filter(|_| what == Gated::Dtmf) {
        match norm(&text("DTMF-security", mode)?).as_str() {
            "drop" => {}
            "off" => stop = false,
            other => {
                return Err(NgError::Unsupported(
                    "DTMF-security modes other than drop and off",
                    other.to_owned(),
                ))
            }
        }
    }
    let who = chosen(e)?;
    let to_tag = get("to-tag").map(|v| text("to-tag", v)).transpose()?;
    if to_tag.is_some() && who.from_tag.is_none() {
        return Err(NgError::MissingKey("from-tag"));
    }
    Ok(GateRequest {
        call_id: who.call_id,
        from_tag: who.from_tag,
        to_tag,
        what,
        stop,
        all: who.all,
    })
}

/// Who a media-control command is about: its call, the participant named by `from-tag`, and
/// whether it says `all` (the key `all: all`, or `all` in its flags).
struct Chosen {
    call_id: String,
    from_tag: Option<String>,
    all: bool,
}

/// Refuses a command that names a participant by one of `keys` (an address, a label): the
/// gateway finds participants by their tags only.
fn by_tag_only(e: &[(String, &Bencode)], keys: &[&str]) -> Result<(), NgError> {
    match e.iter().find(|(k, _)| keys.contains(&k.as_str())) {
        Some((key, _)) => Err(NgError::Unsupported(
            "selecting a participant other than by from-tag",
            key.clone(),
        )),
        None => Ok(()),
    }
}

/// Whether a command says `all`: the key `all` with one of `values` (`none`: not), or `all`
/// in its flags. Other values of the key name flows of rtpengine's subscriptions (`flows`,
/// `except-offer-answer`, …), refused.
fn says_all(e: &[(String, &Bencode)], values: &[&str]) -> Result<bool, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let mut all = match get("all").map(|v| text("all", v)).transpose()? {
        None => false,
        Some(v) => match norm(&v).as_str() {
            "none" => false,
            v if values.contains(&v) => true,
            other => {
                return Err(NgError::Unsupported(
                    "media flows other than the offer/answer's",
                    other.to_owned(),
                ))
            }
        },
    };
    if let Some(flags) = get("flags") {
        all |= list("flags", flags)?.iter().any(|f| norm(f) == "all");
    }
    Ok(all)
}

/// [`Chosen`] from a command's entries; a participant named any other way (`address`,
/// `label`) or flows of rtpengine's subscriptions (other `all` values) refused.
fn chosen(e: &[(String, &Bencode)]) -> Result<Chosen, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    by_tag_only(e, &["address", "label", "from-label", "to-label"])?;
    let all = says_all(e, &["all"])?;
    Ok(Chosen {
        call_id: text(
            "call-id",
            get("call-id").ok_or(NgError::MissingKey("call-id"))?,
        )?,
        from_tag: get("from-tag").map(|v| text("from-tag", v)).transpose()?,
        all,
    })
}

/// A `subscribe request` from its entries: the participants by `from-tag`, `from-tags` or
/// `all` (the call's offer/answer participants: `all: all`, `all: offer-answer`, or `all` in
/// the flags); flows of other kinds (`all: flows`, …) and participants named any other way
/// are refused.
fn subscribe_request(e: &[(String, &Bencode)]) -> Result<SubscribeRequest, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    by_tag_only(e, &["address", "label", "from-label", "from-labels"])?;
    let all = says_all(e, &["all", "offer-answer"])?;
    let mut from_tags = Vec::new();
    if let Some(v) = get("from-tag") {
        from_tags.push(text("from-tag", v)?);
    }
    if let Some(v) = get("from-tags") {
        for t in list("from-tags", v)? {
            if !from_tags.contains(&t) {
                from_tags.push(t);
            }
        }
    }
    if from_tags.is_empty() && !all {
        return Err(NgError::MissingKey("from-tag"));
    }
    Ok(SubscribeRequest {
        call_id: text(
            "call-id",
            get("call-id").ok_or(NgError::MissingKey("call-id"))?,
        )?,
        from_tags: if all { Vec::new() } else { from_tags },
        all,
        to_tag: get("to-tag").map(|v| text("to-tag", v)).transpose()?,
        flags: parse_flags(e)?,
    })
}

/// A whole number from a key's value (an integer, or a string of one).
fn int(key: &'static str, v: &Bencode) -> Result<i64, NgError> {
    match v {
        Bencode::Int(n) => Ok(*n),
        other => text(key, other)?
            .trim()
            .parse()
            .map_err(|_| NgError::BadValue(key, "not a number".into())),
    }
}

/// A `play DTMF` request from its entries.
fn play_dtmf(e: &[(String, &Bencode)]) -> Result<PlayDtmfRequest, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let code = get("code")
        .or_else(|| get("digit"))
        .ok_or(NgError::MissingKey("code"))?;
    let event = match code {
        Bencode::Int(n) => u8::try_from(*n).ok().filter(|n| *n <= 15),
        other => {
            let t = text("code", other)?;
            let mut chars = t.trim().chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => dtmf_code(c),
                _ => t.trim().parse::<u8>().ok().filter(|n| *n <= 15),
            }
        }
    }
    .ok_or_else(|| NgError::BadValue("code", "not a DTMF digit (0-15, 0-9, *, #, A-D)".into()))?;
    let ms = |key: &'static str, default: i64| -> Result<u32, NgError> {
        Ok(get(key)
            .map(|v| int(key, v))
            .transpose()?
            .unwrap_or(default)
            .clamp(100, 5000) as u32)
    };
    let volume = get("volume")
        .map(|v| int("volume", v))
        .transpose()?
        .unwrap_or(-8)
        .unsigned_abs()
        .min(63) as u8;
    let who = chosen(e)?;
    if who.from_tag.is_none() && !who.all {
        return Err(NgError::MissingKey("from-tag"));
    }
    Ok(PlayDtmfRequest {
        call_id: who.call_id,
        from_tag: if who.all { None } else { who.from_tag },
        event,
        duration_ms: ms("duration", 250)?,
        volume,
        pause_ms: ms("pause", 100)?,
    })
}

/// A `play media` request from its entries.
fn play_media(e: &[(String, &Bencode)]) -> Result<PlayMediaRequest, NgError> {
    let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let media =
        match (get("file"), get("blob"), get("db-id")) {
            (Some(f), _, _) => MediaFile::File(text("file", f)?),
            (None, Some(Bencode::Str(b)), _) => MediaFile::Blob(b.clone()),
            (None, Some(_), _) => return Err(NgError::BadValue("blob", "not a string".into())),
            (None, None, Some(_)) => return Err(NgError::Unsupported(
                "media from a database (give the file's name in `file` or its contents in `blob`)",
                "db-id".to_owned(),
            )),
            (None, None, None) => return Err(NgError::MissingKey("file")),
        };
    let count = |key: &'static str| -> Result<Option<i64>, NgError> {
        get(key).map(|v| int(key, v)).transpose()
    };
    let who = chosen(e)?;
    if who.from_tag.is_none() && !who.all {
        return Err(NgError::MissingKey("from-tag"));
    }
    let repeat_ms = count("repeat-duration")?
        .filter(|&ms| ms > 0)
        .map(|ms| ms as u64);
    let times = play_times(count("repeat-times")?, repeat_ms);
    Ok(PlayMediaRequest {
        call_id: who.call_id,
        from_tag: if who.all { None } else { who.from_tag },
        media,
        times,
        repeat_ms,
        start_frame: count("start-pos")?.unwrap_or(0).max(0) as u64,
    })
}

/// How many times a file is played at most, from `repeat-times` and `repeat-duration` (ms):
/// the times given (at least 1), else as rtpengine, without a bound when only a duration is
/// given (it repeats the file until the duration has passed), else once.
pub fn play_times(repeat_times: Option<i64>, repeat_ms: Option<u64>) -> u32 {
    match (repeat_times, repeat_ms) {
        (Some(n), _) => n.clamp(1, i64::from(u32::MAX)) as u32,
        (None, Some(_)) => u32::MAX,
        (None, None) => 1,
    }
}

/// The event code of a DTMF character (`0`–`9`, `*`, `#`, `A`–`D`, either case).
fn dtmf_code(c: char) -> Option<u8> {
    Some(match c.to_ascii_uppercase() {
        d @ '0'..='9' => d as u8 - b'0',
        '*' => 10,
        '#' => 11,
        l @ 'A'..='D' => 12 + (l as u8 - b'A'),
        _ => return None,
    })
}

/// What an rtpengine command this gateway does not do asks for (recording, media playback,
/// DTMF injection, …), by its normalized name.
fn unsupported(command: &str) -> Option<&'static str> {
    Some(match command {
        "start-forwarding" | "stop-forwarding" => "PCM forwarding to a recording daemon",
        "connect" => "connecting two calls' participants",
        _ => return None,
    })
}

/// A reply dictionary from its entries (keys as rtpengine writes them).
pub fn reply(entries: Vec<(&str, Bencode)>) -> Bencode {
    Bencode::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v))
            .collect(),
    )
}

/// `{"result": "error", "error-reason": …}`.
pub fn error_reply(reason: &str) -> Bencode {
    reply(vec![
        ("result", Bencode::str("error")),
        ("error-reason", Bencode::str(reason)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict(entries: &[(&str, Bencode)]) -> Bencode {
        Bencode::Dict(
            entries
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                .collect(),
        )
    }

    fn s(v: &str) -> Bencode {
        Bencode::str(v)
    }

    #[test]
    fn an_offer_as_kamailio_sends_it() {
        let r = parse(&dict(&[
            ("command", s("offer")),
            ("call-id", s("abc@host")),
            ("from-tag", s("caller")),
            ("via-branch", s("z9hG4bK1")),
            ("sdp", s("v=0\r\n")),
            ("transport protocol", s("RTP/SAVP")),
            ("ICE", s("remove")),
            ("DTLS", s("off")),
            ("DTLS-reverse", s("passive")),
            ("DTLS-fingerprint", s("SHA-1")),
            ("transport-protocol", s("accept")),
            (
                "SDES",
                Bencode::List(vec![
                    s("only-AES_CM_128_HMAC_SHA1_80"),
                    s("no-AEAD_AES_256_GCM"),
                ]),
            ),
            ("rtcp-mux", Bencode::List(vec![s("demux")])),
            (
                "replace",
                Bencode::List(vec![s("origin"), s("session-connection")]),
            ),
            (
                "received-from",
                Bencode::List(vec![s("IP4"), s("192.0.2.7")]),
            ),
            (
                "flags",
                Bencode::List(vec![s("SIP-source-address"), s("trust_address")]),
            ),
            (
                "direction",
                Bencode::List(vec![s("internal"), s("external")]),
            ),
        ]))
        .unwrap();
        let Request::Offer(o) = r else {
            panic!("{r:?}")
        };
        assert_eq!(o.call_id, "abc@host");
        assert_eq!(o.from_tag, "caller");
        assert_eq!(o.via_branch.as_deref(), Some("z9hG4bK1"));
        let f = &o.flags;
        assert_eq!(f.transport, Some(Transport::RtpSavp));
        assert_eq!(f.ice, Some(Ice::Remove));
        assert_eq!(f.dtls, Some(Dtls::Off));
        assert_eq!(f.dtls_reverse, Some(Dtls::Passive));
        assert_eq!(f.dtls_fingerprint.as_deref(), Some("sha-1"));
        assert!(f.transport_accept);
        assert_eq!(f.sdes_only, vec!["AES_CM_128_HMAC_SHA1_80".to_owned()]);
        assert_eq!(f.sdes_no, vec!["AEAD_AES_256_GCM".to_owned()]);
        assert!(f.rtcp_mux.demux);
        assert_eq!(f.received_from, Some("192.0.2.7".parse().unwrap()));
        assert!(f.has("SIP-source-address") && f.has("trust-address"));
        assert_eq!(
            f.direction,
            vec!["internal".to_owned(), "external".to_owned()]
        );
        assert!(f.ignored.is_empty(), "{:?}", f.ignored);
    }

    #[test]
    fn codec_manipulations_from_the_dictionary_and_from_flags() {
        let r = parse(&dict(&[
            ("command", s("offer")),
            ("call-id", s("c")),
            ("from-tag", s("a")),
            ("sdp", s("v=0\r\n")),
            (
                "codec",
                dict(&[
                    ("strip", Bencode::List(vec![s("all")])),
                    ("except", s("opus/48000/2")),
                    ("set", s("opus/48000/2/32000")),
                ]),
            ),
            (
                "flags",
                Bencode::List(vec![
                    s("codec-transcode-PCMA"),
                    s("codec_mask-opus"),
                    s("always transcode"),
                    s("codec-dance-PCMU"),
                ]),
            ),
            ("ptime", Bencode::Int(30)),
            ("ptime-reverse", s("20")),
        ]))
        .unwrap();
        let Request::Offer(o) = r else {
            panic!("{r:?}")
        };
        let c = &o.flags.codec;
        assert_eq!(c.strip, vec!["all".to_owned()]);
        assert_eq!(c.except, vec!["opus/48000/2".to_owned()]);
        assert_eq!(c.transcode, vec!["PCMA".to_owned()]);
        assert_eq!(c.mask, vec!["opus".to_owned()]);
        assert_eq!(c.accept, vec!["all".to_owned()]);
        assert_eq!((o.flags.ptime, o.flags.ptime_reverse), (Some(30), Some(20)));
        // An operation we do not know is a plain flag.
        assert!(o.flags.has("codec-dance-pcmu"));
        assert_eq!(c.set, vec!["opus/48000/2/32000".to_owned()]);
        assert!(o.flags.ignored.is_empty(), "{:?}", o.flags.ignored);
        assert!(matches!(
            parse(&dict(&[
                ("command", s("offer")),
                ("call-id", s("c")),
                ("from-tag", s("a")),
                ("sdp", s("")),
                ("ptime", s("soon"))
            ])),
            Err(NgError::BadValue("ptime", _))
        ));
        assert!(matches!(
            parse(&dict(&[
                ("command", s("offer")),
                ("call-id", s("c")),
                ("from-tag", s("a")),
                ("sdp", s("")),
                ("codec", s("transcode-PCMA"))
            ])),
            Err(NgError::BadValue("codec", _))
        ));
    }

    #[test]
    fn each_bad_request_says_what_is_wrong() {
        assert_eq!(parse(&s("x")), Err(NgError::NotADictionary));
        assert_eq!(parse(&dict(&[])), Err(NgError::NoCommand));
        assert_eq!(
            parse(&dict(&[("command", s("dance"))])),
            Err(NgError::UnknownCommand("dance".into()))
        );
        assert_eq!(
            parse(&dict(&[
                ("command", s("offer")),
                ("from-tag", s("a")),
                ("sdp", s(""))
            ])),
            Err(NgError::MissingKey("call-id"))
        );
        assert_eq!(
            parse(&dict(&[
                ("command", s("answer")),
                ("call-id", s("c")),
                ("from-tag", s("a")),
                ("sdp", s(""))
            ])),
            Err(NgError::MissingKey("to-tag"))
        );
        assert!(matches!(
            parse(&dict(&[
                ("command", s("offer")),
                ("call-id", s("c")),
                ("from-tag", s("a")),
                ("sdp", s("")),
                ("transport-protocol", s("TCP/MSRP"))
            ])),
            Err(NgError::BadValue("transport-protocol", _))
        ));
        assert!(matches!(
            parse(&dict(&[
                ("command", s("delete")),
                ("call-id", Bencode::List(vec![]))
            ])),
            Err(NgError::BadValue("call-id", _))
        ));
        assert_eq!(parse(&dict(&[("command", s("PING"))])), Ok(Request::Ping));
        // rtpengine's commands and flags this gateway does not do say so.
        let e = parse(&dict(&[("command", s("start forwarding"))])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "start-forwarding: PCM forwarding to a recording daemon is not supported by this media relay"
        );
        let recording = |entries: &[(&str, Bencode)]| match parse(&dict(entries)) {
            Ok(Request::Recording { action, .. }) => action,
            other => panic!("{other:?}"),
        };
        let call = ("call-id", s("c"));
        assert_eq!(
            recording(&[("command", s("start recording")), call.clone()]),
            RecordingAction::Start
        );
        assert_eq!(
            recording(&[("command", s("stop recording")), call.clone()]),
            RecordingAction::Stop
        );
        assert_eq!(
            recording(&[("command", s("pause recording")), call.clone()]),
            RecordingAction::Pause
        );
        assert_eq!(
            recording(&[
                ("command", s("stop recording")),
                call.clone(),
                ("flags", Bencode::List(vec![s("pause")]))
            ]),
            RecordingAction::Pause
        );
        assert_eq!(
            recording(&[("command", s("stop recording")), call, ("pause", s("yes"))]),
            RecordingAction::Pause
        );
        let e = parse(&dict(&[
            ("command", s("offer")),
            ("call-id", s("c")),
            ("from-tag", s("a")),
            ("sdp", s("")),
            ("T.38", Bencode::List(vec![s("decode")])),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("T.38 gatewaying"), "{e}");
    }

    #[test]
    fn play_dtmf_as_kamailio_sends_it_held_to_rtpengines_bounds() {
        let play = |entries: &[(&str, Bencode)]| match parse(&dict(entries)) {
            Ok(Request::PlayDtmf(p)) => Ok(p),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let base = [
            ("command", s("play DTMF")),
            ("call-id", s("c1")),
            ("from-tag", s("alice")),
        ];
        let with = |extra: &[(&str, Bencode)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            play(&v)
        };
        let p = with(&[("code", s("#"))]).unwrap();
        assert_eq!(
            p,
            PlayDtmfRequest {
                call_id: "c1".into(),
                from_tag: Some("alice".into()),
                event: 11,
                duration_ms: 250,
                volume: 8,
                pause_ms: 100,
            }
        );
        let p = with(&[
            ("digit", Bencode::Int(15)),
            ("duration", Bencode::Int(20)),
            ("volume", Bencode::Int(-20)),
            ("pause", s("9000")),
        ])
        .unwrap();
        assert_eq!(
            (p.event, p.duration_ms, p.volume, p.pause_ms),
            (15, 100, 20, 5000)
        );
        assert_eq!(
            with(&[("code", s("d")), ("volume", Bencode::Int(12))])
                .unwrap()
                .event,
            15
        );
        assert_eq!(with(&[("code", s("7"))]).unwrap().event, 7);
        assert_eq!(with(&[("code", s("12"))]).unwrap().event, 12);
        for bad in [s("E"), s("16"), Bencode::Int(16), s("")] {
            assert!(matches!(
                with(&[("code", bad)]),
                Err(NgError::BadValue("code", _))
            ));
        }
        assert_eq!(with(&[]), Err(NgError::MissingKey("code")));
        let p = play(&[
            ("command", s("play DTMF")),
            ("call-id", s("c1")),
            ("code", s("1")),
            ("flags", Bencode::List(vec![s("all")])),
        ])
        .unwrap();
        assert_eq!(p.from_tag, None);
        assert_eq!(
            play(&[
                ("command", s("play DTMF")),
                ("call-id", s("c1")),
                ("code", s("1"))
            ]),
            Err(NgError::MissingKey("from-tag"))
        );
    }

    #[test]
    fn block_silence_and_unblock_commands_as_kamailio_sends_them() {
        let gate = |entries: &[(&str, Bencode)]| match parse(&dict(entries)) {
            Ok(Request::Gate(g)) => Ok(g),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let g = gate(&[
            ("command", s("block media")),
            ("call-id", s("c1")),
            ("from-tag", s("alice")),
        ])
        .unwrap();
        assert_eq!(
            g,
            GateRequest {
                call_id: "c1".into(),
                from_tag: Some("alice".into()),
                to_tag: None,
                what: Gated::Media,
                stop: true,
                all: false,
            }
        );
        let g = gate(&[("command", s("unsilence media")), ("call-id", s("c1"))]).unwrap();
        assert_eq!((g.what, g.stop, g.from_tag), (Gated::Silence, false, None));
        let g = gate(&[
            ("command", s("unblock DTMF")),
            ("call-id", s("c1")),
            ("flags", Bencode::List(vec![s("all")])),
        ])
        .unwrap();
        assert_eq!((g.what, g.stop, g.all), (Gated::Dtmf, false, true));
        let g = gate(&[
            ("command", s("block DTMF")),
            ("call-id", s("c1")),
            ("DTMF-security", s("off")),
        ])
        .unwrap();
        assert!(!g.stop, "DTMF-security off unblocks");
        assert_eq!(
            gate(&[("command", s("silence_media")), ("call-id", s("c1"))])
                .unwrap()
                .what,
            Gated::Silence
        );
        // What it does not do, and what it needs, named.
        let e = gate(&[
            ("command", s("block DTMF")),
            ("call-id", s("c1")),
            ("DTMF-security", s("random")),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("DTMF-security modes"), "{e}");
        let e = gate(&[
            ("command", s("block media")),
            ("call-id", s("c1")),
            ("label", s("caller")),
        ])
        .unwrap_err();
        assert!(e.to_string().starts_with("label: selecting"), "{e}");
        assert_eq!(
            gate(&[("command", s("block media")), ("from-tag", s("a"))]),
            Err(NgError::MissingKey("call-id"))
        );
        assert_eq!(
            gate(&[
                ("command", s("block media")),
                ("call-id", s("c1")),
                ("to-tag", s("b"))
            ]),
            Err(NgError::MissingKey("from-tag"))
        );
        let e = parse(&dict(&[("command", s("start forwarding"))])).unwrap_err();
        assert!(e.to_string().contains("PCM forwarding"), "{e}");
    }

    #[test]
    fn subscriptions_read_rtpengines_keys() {
        let req = |entries: &[(&str, Bencode)]| parse(&dict(entries));
        let r = match req(&[
            ("command", s("subscribe request")),
            ("call-id", s("c1")),
            ("from-tag", s("a")),
            ("from-tags", Bencode::List(vec![s("b"), s("a")])),
            ("to-tag", s("sup")),
            ("transport-protocol", s("RTP/SAVP")),
        ]) {
            Ok(Request::SubscribeRequest(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(r.from_tags, ["a", "b"]);
        assert!(!r.all);
        assert_eq!(r.to_tag.as_deref(), Some("sup"));
        assert!(r.flags.transport.is_some());
        for all in [
            ("all", s("all")),
            ("all", s("offer-answer")),
            ("flags", Bencode::List(vec![s("all")])),
        ] {
            match req(&[
                ("command", s("subscribe_request")),
                ("call-id", s("c1")),
                all,
            ]) {
                Ok(Request::SubscribeRequest(r)) => assert!(r.all && r.from_tags.is_empty()),
                other => panic!("{other:?}"),
            }
        }
        let e = req(&[
            ("command", s("subscribe request")),
            ("call-id", s("c1")),
            ("all", s("flows")),
        ]);
        assert!(
            matches!(e, Err(NgError::Unsupported(_, ref v)) if v == "flows"),
            "{e:?}"
        );
        let e = req(&[("command", s("subscribe request")), ("call-id", s("c1"))]);
        assert_eq!(e, Err(NgError::MissingKey("from-tag")));
        let e = req(&[
            ("command", s("subscribe request")),
            ("call-id", s("c1")),
            ("label", s("x")),
        ]);
        assert!(matches!(e, Err(NgError::Unsupported(..))), "{e:?}");
        assert_eq!(
            req(&[
                ("command", s("subscribe answer")),
                ("call-id", s("c1")),
                ("to-tag", s("sup")),
                ("sdp", s("v=0")),
            ])
            .map(|r| matches!(r, Request::SubscribeAnswer { .. })),
            Ok(true)
        );
        let e = req(&[
            ("command", s("subscribe answer")),
            ("call-id", s("c1")),
            ("to-tag", s("sup")),
        ]);
        assert_eq!(e, Err(NgError::MissingKey("sdp")));
        assert_eq!(
            req(&[("command", s("unsubscribe")), ("call-id", s("c1"))]),
            Err(NgError::MissingKey("to-tag"))
        );
        let p = req(&[
            ("command", s("publish")),
            ("call-id", s("c1")),
            ("from-tag", s("p")),
            ("sdp", s("v=0")),
        ]);
        assert!(
            matches!(p, Ok(Request::Publish(ref o)) if o.from_tag == "p"),
            "{p:?}"
        );
        let e = req(&[("command", s("connect")), ("call-id", s("c1"))]).unwrap_err();
        assert!(matches!(e, NgError::Unsupported(..)), "{e:?}");
    }

    #[test]
    fn play_and_stop_media_read_rtpengines_keys() {
        let req = |entries: &[(&str, Bencode)]| parse(&dict(entries));
        let p = match req(&[
            ("command", s("play media")),
            ("call-id", s("c1")),
            ("from-tag", s("a")),
            ("file", s("hold.wav")),
            ("repeat-times", Bencode::Int(3)),
            ("repeat-duration", s("10000")),
            ("start-pos", Bencode::Int(50)),
        ]) {
            Ok(Request::PlayMedia(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            p,
            PlayMediaRequest {
                call_id: "c1".into(),
                from_tag: Some("a".into()),
                media: MediaFile::File("hold.wav".into()),
                times: 3,
                repeat_ms: Some(10_000),
                start_frame: 50,
            }
        );
        // A blob's bytes as they came (not text), to every participant with `all`.
        let p = match req(&[
            ("command", s("play_media")),
            ("call-id", s("c1")),
            ("flags", Bencode::List(vec![s("all")])),
            ("blob", Bencode::Str(vec![0xff, 0x00, 0x52])),
        ]) {
            Ok(Request::PlayMedia(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (p.from_tag, p.media, p.times, p.repeat_ms, p.start_frame),
            (None, MediaFile::Blob(vec![0xff, 0, 0x52]), 1, None, 0)
        );
        // A repeat-duration alone: as many plays as fit in it.
        let p = match req(&[
            ("command", s("play media")),
            ("call-id", s("c1")),
            ("from-tag", s("a")),
            ("file", s("moh.mp3")),
            ("repeat-duration", Bencode::Int(60_000)),
        ]) {
            Ok(Request::PlayMedia(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!((p.times, p.repeat_ms), (u32::MAX, Some(60_000)));
        let e = req(&[
            ("command", s("play media")),
            ("call-id", s("c1")),
            ("from-tag", s("a")),
            ("db-id", Bencode::Int(7)),
        ])
        .unwrap_err();
        assert!(
            e.to_string().starts_with("db-id: media from a database"),
            "{e}"
        );
        assert_eq!(
            req(&[
                ("command", s("play media")),
                ("call-id", s("c1")),
                ("from-tag", s("a"))
            ]),
            Err(NgError::MissingKey("file"))
        );
        assert_eq!(
            req(&[
                ("command", s("play media")),
                ("call-id", s("c1")),
                ("file", s("x.wav"))
            ]),
            Err(NgError::MissingKey("from-tag"))
        );
        assert_eq!(
            req(&[
                ("command", s("stop media")),
                ("call-id", s("c1")),
                ("from-tag", s("a"))
            ]),
            Ok(Request::StopMedia {
                call_id: "c1".into(),
                from_tag: Some("a".into())
            })
        );
    }
}
