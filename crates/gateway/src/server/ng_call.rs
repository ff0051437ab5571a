//! An ng call between plain-RTP and SDES-SRTP sides, kept as rtpengine keeps one: every media
//! section of the SDP (audio, video, any other RTP section) is relayed between the same section
//! of the two sides, as a room of its own with one member facing each side, on ports of its
//! own, every format passed on as it came unless the flags ask for transcoding. Each reply is
//! the request's own SDP rewritten ([`super::ng_sdp`]): our ports, address and keys, the rest
//! as the peer wrote it.
//!
//! Side A made the call's first offer (its `from-tag`), side B answered it (its `to-tag`).
//! An offer waits in [`Pending`] for its answer. The offer makes the members facing the side
//! it goes to; the answer makes the members facing the offering side, answering its offer
//! with the formats the other side took. A new offer in an answered call (a re-INVITE from
//! either side: hold, a new address, new keys) renegotiates the members it finds, on their
//! ports; a section it adds gets a room of its own.

use std::time::Instant;

use secrelay_dtls::HashAlgorithm;
use secrelay_srtp::Profile;
use secrelay_wire::ng::{CodecFlags, Dtls, Flags, Ice};
use secrelay_wire::sdp::{Codec, Direction};
use secrelay_wire::sdp_doc::{Media, SdpDoc};
use secrelay_wire::sdp_rtp::{
    ice_credentials, rtp_section, static_rtpmap, RtpDescription, Transport,
};

use std::collections::HashMap;

use super::call_state::{Held, Pins};
use super::interfaces::{choose, Interface};
use super::ng_codecs::{
    answer_strips, answered_in, caller_keeps, is_event_like, is_event_name, plan, set_amr_mode,
    CodecPlan,
};
use super::ng_sdp::{
    codecs_of, direction_of, held, rewrite, CodecOut, IceOut, Relayed, Rewrite, SectionOut,
};
use super::{ApiError, Gateway, Who};

mod subscriptions;
use crate::leg::{CodecId, DtlsChoice, IceMode, LegMarks, RtpLegOptions, RtpOfferSpec};

/// Which side of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum Side {
    /// The side of the call's first offer.
    A,
    /// The side that answered it.
    B,
}

impl Side {
    /// Its place in per-side arrays: A 0, B 1.
    fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What a member's own SDP says of it: what ours towards its side writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Local {
    port: u16,
    /// The transport towards its side.
    proto: String,
    rtcp_mux: bool,
    /// Its `a=crypto` values (our offer's, one per suite; or the one our answer took).
    crypto: Vec<String>,
    /// The formats its SDP lists.
    formats: Vec<String>,
    /// Its ICE (credentials and candidates), when it does ICE with its phone.
    ice: Option<IceOut>,
    /// Its `a=setup` and `a=fingerprint` values, when keyed by DTLS-SRTP.
    dtls: Option<(String, String)>,
}

/// The `a=crypto` values of the first section with a port of an SDP of ours.
pub(super) fn crypto_lines(sdp: &str) -> Vec<String> {
    local_of(sdp).map(|l| l.crypto).unwrap_or_default()
}

/// What our leg wrote for its section: a scan of its own SDP (one section with a port, as the
/// leg writes it), not a full parse, as it runs for every member made.
fn local_of(sdp: &str) -> Result<Local, ApiError> {
    let mut local: Option<Local> = None;
    for line in sdp.lines() {
        if let Some(m) = line.strip_prefix("m=") {
            if local.is_some() {
                break;
            }
            let mut f = m.split_whitespace();
            let port: u16 = f.nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            if port != 0 {
                local = Some(Local {
                    port,
                    proto: f.next().unwrap_or_default().to_owned(),
                    formats: f.map(str::to_owned).collect(),
                    ..Local::default()
                });
            }
        } else if let Some(l) = local.as_mut() {
            if line == "a=rtcp-mux" {
                l.rtcp_mux = true;
            } else if let Some(c) = line.strip_prefix("a=crypto:") {
                l.crypto.push(c.to_owned());
            } else if let Some(v) = line.strip_prefix("a=ice-ufrag:") {
                l.ice.get_or_insert_with(IceOut::default).ufrag = v.to_owned();
            } else if let Some(v) = line.strip_prefix("a=ice-pwd:") {
                l.ice.get_or_insert_with(IceOut::default).pwd = v.to_owned();
            } else if let Some(v) = line.strip_prefix("a=candidate:") {
                let ice = l.ice.get_or_insert_with(IceOut::default);
                ice.candidates.push(v.to_owned());
            } else if let Some(v) = line.strip_prefix("a=setup:") {
                l.dtls.get_or_insert_with(Default::default).0 = v.to_owned();
            } else if let Some(v) = line.strip_prefix("a=fingerprint:") {
                l.dtls.get_or_insert_with(Default::default).1 = v.to_owned();
            }
        }
    }
    local.ok_or_else(|| ApiError::internal("a leg's own SDP has no section with a port"))
}

/// A member of a section's room.
#[derive(Debug, Clone)]
struct Member {
    id: String,
    local: Local,
    /// Where its side said it receives (the section's address and port), if it said.
    endpoint: Option<std::net::SocketAddr>,
}

/// Where section `m` (the `i`th of `doc`) receives, if it says.
fn endpoint_of(doc: &SdpDoc, i: usize) -> Option<std::net::SocketAddr> {
    let ip = doc.address_of(i).filter(|ip| !ip.is_unspecified())?;
    Some(std::net::SocketAddr::new(ip, doc.media.get(i)?.port))
}

/// A media section of the call.
#[derive(Debug, Clone)]
struct Section {
    room: String,
    /// The member facing side A, and the one facing side B.
    a: Option<Member>,
    b: Option<Member>,
}

impl Section {
    fn facing(&mut self, side: Side) -> &mut Option<Member> {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }
}

/// What became of a section in an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// Passed on as it came (not relayed over UDP).
    AsIs,
    /// Rejected (port 0).
    Rejected,
    /// Relayed; the offerer's formats its member keeps to be transcoded (empty: none).
    Relayed(Vec<CodecId>),
}

/// An offer that waits for its answer.
#[derive(Debug, Clone)]
struct Pending {
    by: Side,
    offer: SdpDoc,
    flags: Flags,
    fates: Vec<Fate>,
    /// For a new offer in an answered call: each section's offerer member as renegotiated.
    renegotiated: Vec<Option<Local>>,
}

/// A request as it came (tag, SDP, flags) and our reply to it.
#[derive(Debug, Clone)]
struct Repeat {
    tag: String,
    sdp: String,
    flags: Flags,
    reply: String,
}

/// A section as the call's statistics report it.
#[derive(Debug, Clone)]
pub(crate) struct ReportSection {
    pub index: usize,
    pub media: String,
    pub a: Option<ReportMember>,
    pub b: Option<ReportMember>,
}

/// A member as the call's statistics report it.
#[derive(Debug, Clone)]
pub(crate) struct ReportMember {
    pub room: String,
    pub id: String,
    pub local_port: u16,
    pub rtcp_mux: bool,
    pub protocol: String,
    pub endpoint: Option<std::net::SocketAddr>,
}

/// What the ng server gives a call to act with.
pub(crate) struct Ctx<'a> {
    pub gateway: &'a Gateway,
    /// The media interfaces, the first the default.
    pub interfaces: &'a [Interface],
    /// The SDES suites the gateway takes, most preferred first.
    pub sdes_suites: &'a [Profile],
    /// This gateway's `loop-protect` mark.
    pub loop_mark: &'a str,
    /// Where each member is bound, while a call taken over from another node is made again.
    pub pins: Option<&'a Pins>,
}

impl Ctx<'_> {
    /// `options` for member `side` of `room`, bound where it was and resuming what it had
    /// when it is pinned (a call taken over).
    /// `options` for a telephony member of a call with a WebRTC side, on the media interface
    /// the request's `direction` entry `at` names (else the first of the family the request's
    /// `address-family` asks for, or of `family`): bound there, announcing its advertised
    /// address, as a telephony call's members are. Unchanged without media interfaces.
    pub(super) fn on_interface(
        &self,
        flags: &Flags,
        at: usize,
        family: Option<bool>,
        options: RtpLegOptions,
    ) -> RtpLegOptions {
        let (name, asked) = wanted(flags, at);
        match self
            .interfaces
            .get(choose(self.interfaces, name, asked.or(family)))
        {
            Some(i) => RtpLegOptions {
                bind: Some(i.local),
                announce: Some(i.advertised),
                ..options
            },
            None => options,
        }
    }

    /// `options` for member `side` of `room` of a call being taken over: bound where it was
    /// and resuming what it had; one that announces its own address (`options.announce`)
    /// announces that address's interface's (or the address itself, when the call came from a
    /// node of other interfaces), so that its phone keeps sending where it is bound.
    pub(super) fn pinned(&self, room: &str, side: Side, options: RtpLegOptions) -> RtpLegOptions {
        match self.pins.and_then(|p| p.of(room, side)) {
            Some((at, resume)) => {
                let announce = options.announce.map(|_| {
                    self.interfaces
                        .iter()
                        .find(|i| i.local == at.ip())
                        .map_or(at.ip(), |i| i.advertised)
                });
                RtpLegOptions {
                    at: Some(at),
                    resume: Some(resume),
                    announce,
                    ..options
                }
            }
            None => options,
        }
    }
}

/// A call.
#[derive(Debug, Clone)]
pub(crate) struct SectionCall {
    pub created: Instant,
    /// When the call was made, and last signalled (an offer or answer), on the wall clock.
    pub created_at: std::time::SystemTime,
    pub last_signal: std::time::SystemTime,
    call_id: String,
    /// Side A's tag, and side B's once it answered.
    pub from_tag: String,
    pub to_tag: Option<String>,
    sections: Vec<Section>,
    /// The media interface each side's members are on, once chosen (kept as it was: a call
    /// taken over from another node keeps that node's).
    iface_a: Option<Interface>,
    iface_b: Option<Interface>,
    pending: Option<Pending>,
    /// The last offer answered (a later answer to it is taken too).
    answered: Option<Pending>,
    /// What the last offer's reply warns of (flags not acted on).
    pub warnings: Vec<String>,
    /// The last offer and answer and our reply to each, for a request sent again under a new
    /// cookie (a SIP retransmission the proxy passes on): the same reply, the same ports.
    last_offer: Option<Repeat>,
    last_answer: Option<Repeat>,
    /// The last SDP each side sent (A's, B's): what a subscription to that side mirrors.
    sent: [Option<SdpDoc>; 2],
    /// Its subscriptions (`subscribe request`), each a participant of its own.
    subscriptions: Vec<subscriptions::Subscription>,
}

/// Whether the side that gets SDP `doc`'s section `m` rewritten does ICE with us: as the
/// message's `ICE` flag says (`optional` forces it in an offer, not in an `answer`), else
/// (rtpengine's default) when that SDP had ICE credentials.
fn ice_towards(flags: &Flags, doc: &SdpDoc, m: &Media, answer: bool) -> IceMode {
    match flags.ice {
        Some(Ice::Force) => IceMode::Force,
        Some(Ice::Optional) if !answer => IceMode::Force,
        Some(Ice::Remove) => IceMode::Off,
        _ if ice_credentials(doc, m).is_some() => IceMode::Force,
        _ => IceMode::Off,
    }
}

/// The transport towards the other side: the flag's, else the section's.
fn transport_towards(m: &Media, flags: &Flags) -> Transport {
    flags
        .transport
        .clone()
        .unwrap_or_else(|| Transport::parse(&m.proto))
}

/// Whether the gateway relays a section on its own ports: RTP, SDES-SRTP, or DTLS-SRTP
/// without ICE, each way.
fn relayable(m: &Media, towards: &Transport) -> bool {
    let from = Transport::parse(&m.proto);
    let served = |t: &Transport| t.is_plain() || t.is_sdes() || t.is_dtls();
    m.port != 0 && served(&from) && served(towards)
}

/// The transport our answer to the offerer (section `xm`) names: its offer's, unless the
/// answer's flags say otherwise (rtpengine's): `transport-protocol: accept` passes the
/// answerer's own on (section `m`); a transport that keys as the offerer's does (plain, SDES
/// or DTLS, with or without feedback) is named as given.
fn answered_proto(xm: &Media, m: &Media, flags: &Flags) -> String {
    let offered = Transport::parse(&xm.proto);
    let keys = |t: &Transport| (t.is_plain(), t.is_sdes(), t.is_dtls());
    match &flags.transport {
        _ if flags.transport_accept => m.proto.clone(),
        Some(t) if keys(t) == keys(&offered) => t.as_str().to_owned(),
        _ => xm.proto.clone(),
    }
}

/// Whether the leg towards a side on `towards` is keyed by DTLS-SRTP: a DTLS transport, or
/// SRTP with `SDES: off` (rtpengine offers DTLS-SRTP on `RTP/SAVP[F]` then).
fn dtls_towards(towards: &Transport, flags: &Flags) -> bool {
    towards.is_dtls() || (towards.is_sdes() && flags.sdes_off)
}

/// How a leg keyed by DTLS-SRTP is made: our fingerprint's hash as `DTLS-fingerprint` names
/// it; answering the offerer's `actpass`, the server's role where `DTLS-reverse: passive`
/// asks for it (else the client's, as rtpengine answers).
fn dtls_choice(flags: &Flags) -> DtlsChoice {
    let hash = flags
        .dtls_fingerprint
        .as_deref()
        .and_then(|h| h.parse::<HashAlgorithm>().ok())
        .unwrap_or_default();
    DtlsChoice {
        passive: flags.dtls_reverse == Some(Dtls::Passive),
        hash,
    }
}

/// How a leg that makes our offer towards a side on `towards` is made, for section `m` of that
/// side's SDP (or the SDP a subscription mirrors) with codec plan `p`, on interface `iface`
/// doing ICE as `ice` says: its offer's spec, and its options.
fn offer_leg(
    ctx: &Ctx<'_>,
    m: &Media,
    towards: &Transport,
    p: &CodecPlan,
    flags: &Flags,
    (iface, ice): (Option<&Interface>, IceMode),
) -> Result<(RtpOfferSpec, RtpLegOptions), ApiError> {
    let rtcp_mux = (m.has("rtcp-mux") && !flags.rtcp_mux.demux)
        || flags.rtcp_mux.offer
        || flags.rtcp_mux.require;
    let only_dtls = dtls_towards(towards, flags);
    let (suites, sdes_tags) = match only_dtls {
        true => Default::default(),
        false => offered_suites(ctx, m, towards, flags)?,
    };
    // Towards SRTP, DTLS-SRTP is offered beside SDES unless `DTLS: off` (rtpengine's
    // default: the answer takes either).
    let dtls = (only_dtls || (towards.is_sdes() && flags.dtls != Some(Dtls::Off)))
        .then(|| dtls_choice(flags));
    let spec = RtpOfferSpec {
        transport: towards.clone(),
        codecs: p.towards_callee.clone(),
        suites,
        rtcp_mux,
        ptime: flags.ptime.or(ptime_of(m)),
    };
    let options = RtpLegOptions {
        passthrough: true,
        kind: media_kind(m),
        sdes_suites: None,
        sdes_tags,
        bind: iface.map(|i| i.local),
        announce: iface.map(|i| i.advertised),
        ice,
        dtmf_transcode: p.dtmf_transcode,
        cn_transcode: p.cn_transcode,
        amr_mode: p.amr_mode,
        dtls,
        ..RtpLegOptions::default()
    };
    Ok((spec, options))
}

/// What our offer writes for a section whose leg (its own SDP read as `local`) offered
/// `spec`: its port, transport, keys and ICE, `codecs`, in `direction`.
fn offered_out(
    local: &Local,
    spec: &RtpOfferSpec,
    codecs: Vec<CodecOut>,
    direction: Option<Direction>,
) -> SectionOut {
    SectionOut::Relayed(Box::new(Relayed {
        port: local.port,
        rtcp_port: Some(local.port.wrapping_add(1)),
        proto: spec.transport.as_str().to_owned(),
        codecs: Some(codecs),
        direction,
        rtcp_mux: spec.rtcp_mux,
        crypto: local.crypto.clone(),
        dtls: local.dtls.clone(),
        ptime: spec.ptime,
        ice: local.ice.clone(),
        mid: None,
    }))
}

/// A section of a peer's SDP as a leg takes it (that section alone).
fn description_of(doc: &SdpDoc, m: &Media) -> RtpDescription {
    let s = rtp_section(doc, m);
    RtpDescription {
        session_address: s.address,
        sections: vec![s],
    }
}

impl SectionCall {
    /// A call side A (`from_tag`) opens with its first offer.
    pub fn new(call_id: &str, from_tag: &str) -> SectionCall {
        SectionCall {
            created: Instant::now(),
            created_at: std::time::SystemTime::now(),
            last_signal: std::time::SystemTime::now(),
            call_id: call_id.to_owned(),
            from_tag: from_tag.to_owned(),
            to_tag: None,
            sections: Vec::new(),
            iface_a: None,
            iface_b: None,
            pending: None,
            answered: None,
            warnings: Vec::new(),
            last_offer: None,
            last_answer: None,
            sent: [None, None],
            subscriptions: Vec::new(),
        }
    }

    /// The side a tag is, if it is one of the call's.
    pub fn side_of(&self, tag: &str) -> Option<Side> {
        if tag == self.from_tag {
            Some(Side::A)
        } else if self.to_tag.as_deref() == Some(tag) {
            Some(Side::B)
        } else {
            None
        }
    }

    /// What the call's statistics report: per section its index (from 1), media type,
    /// protocol and, per side, its member (room, id, local port, and where the side receives).
    pub fn report_sections(&self) -> Vec<ReportSection> {
        let doc = self.answered.as_ref().or(self.pending.as_ref());
        self.sections
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let m = doc.and_then(|p| p.offer.media.get(i));
                let side = |member: &Option<Member>| {
                    member.as_ref().map(|m| ReportMember {
                        room: s.room.clone(),
                        id: m.id.clone(),
                        local_port: m.local.port,
                        rtcp_mux: m.local.rtcp_mux,
                        protocol: m.local.proto.clone(),
                        endpoint: m.endpoint,
                    })
                };
                ReportSection {
                    index: i + 1,
                    media: m.map_or_else(|| "audio".to_owned(), |m| m.media.clone()),
                    a: side(&s.a),
                    b: side(&s.b),
                }
            })
            .collect()
    }

    /// Every member, by room.
    pub fn members(&self) -> Vec<(String, String, Side)> {
        let mut v = Vec::new();
        for s in &self.sections {
            for (m, side) in [(&s.a, Side::A), (&s.b, Side::B)] {
                if let Some(m) = m {
                    v.push((s.room.clone(), m.id.clone(), side));
                }
            }
        }
        v
    }

    /// Each member as its phone knows it (where it is bound, our crypto lines, where its SRTP
    /// streams and its ICE stand by `marks`, by member id): what a standby needs to take the
    /// call over.
    pub fn held(&self, marks: &HashMap<String, LegMarks>) -> Vec<Held> {
        let mut v = Vec::new();
        for s in &self.sections {
            for (m, side, iface) in [
                (&s.a, Side::A, &self.iface_a),
                (&s.b, Side::B, &self.iface_b),
            ] {
                if let (Some(m), Some(iface)) = (m, iface) {
                    v.push(Held {
                        room: s.room.clone(),
                        side,
                        rtp: std::net::SocketAddr::new(iface.local, m.local.port),
                        crypto: m.local.crypto.clone(),
                        srtp: marks.get(&m.id).map(|k| k.srtp.clone()).unwrap_or_default(),
                        ice: marks.get(&m.id).and_then(|k| k.ice.clone()),
                        webrtc: None,
                        dtls: marks.get(&m.id).and_then(|k| k.dtls.clone()),
                    });
                }
            }
        }
        v
    }

    /// After the call was made again from its requests (taken over from another node): each
    /// member takes the crypto lines its phone holds, and a request sent again gets the reply
    /// the other node gave (`offer_reply`, `answer_reply`). The SDES members' rooms and ids
    /// with what they held, for their legs to take their keys and SRTP state back.
    pub fn restore(
        &mut self,
        held: &[Held],
        offer_reply: Option<&str>,
        answer_reply: Option<&str>,
    ) -> Vec<(String, String, Held)> {
        let mut rekey = Vec::new();
        for h in held {
            let Some(s) = self.sections.iter_mut().find(|s| s.room == h.room) else {
                continue;
            };
            let room = s.room.clone();
            if let Some(m) = s.facing(h.side).as_mut() {
                m.local.crypto.clone_from(&h.crypto);
                if !h.crypto.is_empty() || h.dtls.is_some() {
                    rekey.push((room, m.id.clone(), h.clone()));
                }
            }
        }
        for (repeat, reply) in [
            (&mut self.last_offer, offer_reply),
            (&mut self.last_answer, answer_reply),
        ] {
            if let (Some(r), Some(text)) = (repeat.as_mut(), reply) {
                r.reply = text.to_owned();
            }
        }
        rekey
    }

    fn room(&self, i: usize) -> String {
        format!("call:{}:{i}", self.call_id)
    }

    /// An offer or answer sent again (the same tag, SDP and flags): our reply again.
    pub fn repeated(&self, answer: bool, tag: &str, sdp: &str, flags: &Flags) -> Option<String> {
        let last = if answer {
            &self.last_answer
        } else {
            &self.last_offer
        };
        last.as_ref()
            .filter(|r| r.tag == tag && r.sdp == sdp && r.flags == *flags)
            .map(|r| r.reply.clone())
    }
}

/// The formats our SDP lists for a section `m` (its formats read as `parsed`): those of
/// `chosen` (the offer's, and any added for transcoding), each with the lines the offer gave it
/// when the same payload type names the same codec there (its `a=rtpmap` written from the
/// codec, whose channel count the plan may have left out), else our own.
fn codec_outs(m: &Media, parsed: &[Codec], chosen: &[(CodecId, Codec)]) -> Vec<CodecOut> {
    let lines = codecs_of(m);
    chosen
        .iter()
        .map(|(_, c)| {
            let pt = c.pt.to_string();
            let same = parsed
                .iter()
                .any(|o| o.pt == c.pt && o.is(&c.name, c.clock_rate));
            match lines.iter().find(|o| same && o.pt == pt) {
                Some(o) => CodecOut {
                    rtpmap: o.rtpmap.as_ref().map(|_| c.encoding()),
                    ..o.clone()
                },
                None => CodecOut {
                    rtpmap: Some(c.encoding()),
                    fmtp: c.fmtp.clone(),
                    rtcp_fb: Vec::new(),
                    pt,
                },
            }
        })
        .collect()
}

/// The direction a section's SDP states, as rtpengine passes it on: a section on hold by the
/// old convention (`c=0.0.0.0`, [`held`]) receives nothing, whatever its attribute says.
fn direction_passed(doc: &SdpDoc, i: usize, flags: &Flags) -> Option<Direction> {
    if flags.has("original-sendrecv") {
        return None;
    }
    let m = &doc.media[i];
    let d = direction_of(doc, m);
    Some(match (held(doc, i), d) {
        (true, Direction::SendRecv) => Direction::SendOnly,
        (true, Direction::RecvOnly) => Direction::Inactive,
        (_, d) => d,
    })
}

fn ptime_of(m: &Media) -> Option<u32> {
    m.attributes("ptime")
        .flatten()
        .find_map(|v| v.trim().parse().ok())
}

fn media_kind(m: &Media) -> secrelay_wire::sdp::MediaKind {
    rtp_section_kind(&m.media)
}

fn rtp_section_kind(name: &str) -> secrelay_wire::sdp::MediaKind {
    use secrelay_wire::sdp::MediaKind;
    match name {
        "audio" => MediaKind::Audio,
        "video" => MediaKind::Video,
        "application" => MediaKind::Application,
        other => MediaKind::Other(other.to_owned()),
    }
}

/// rtpengine's SDES suites, most preferred first: what it appends to an offer after the
/// suites the other side offered (those of them the gateway has and the configuration enables
/// are offered here; AES-192, F8 and the 32-bit NULL suite are not implemented).
const SUITE_ORDER: [&str; 12] = [
    "AEAD_AES_256_GCM",
    "AEAD_AES_128_GCM",
    "AES_256_CM_HMAC_SHA1_80",
    "AES_256_CM_HMAC_SHA1_32",
    "AES_192_CM_HMAC_SHA1_80",
    "AES_192_CM_HMAC_SHA1_32",
    "AES_CM_128_HMAC_SHA1_80",
    "AES_CM_128_HMAC_SHA1_32",
    "F8_128_HMAC_SHA1_80",
    "F8_128_HMAC_SHA1_32",
    "NULL_HMAC_SHA1_80",
    "NULL_HMAC_SHA1_32",
];

/// A crypto line's tag and suite name.
fn crypto_tag_suite(value: &str) -> Option<(u32, &str)> {
    let mut f = value.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?))
}

/// The SDES suites our offer towards the other side carries, and their tags, as rtpengine
/// offers them: the suites the offering side offered (section `m`) first, with its tags, then
/// the others in rtpengine's order, numbered on from the highest tag of the offer; `SDES:
/// no-…` and `only-…` leave suites out.
fn offered_suites(
    ctx: &Ctx<'_>,
    m: &Media,
    towards: &Transport,
    flags: &Flags,
) -> Result<(Vec<Profile>, Vec<u32>), ApiError> {
    // Opportunistic SRTP (RFC 8643) towards a plain side: the offer's own crypto lines on
    // `RTP/AVP` carried on, or `OSRTP: offer`.
    let from = Transport::parse(&m.proto);
    let osrtp = towards.is_plain() && !flags.sdes_off && (flags.osrtp_offer || opportunistic(m));
    if !towards.is_sdes() && !osrtp {
        return Ok((Vec::new(), Vec::new()));
    }
    if flags.sdes_off {
        return Err(ApiError::bad(format!(
            "transport-protocol {} needs SDES, and SDES is off",
            towards.as_str()
        )));
    }
    // Tags are numbered as rtpengine numbers them, over every suite it knows that the flags
    // leave (so an answer written for rtpengine's offer names the same tags); the suites the
    // gateway does not have, or that its configuration does not enable, are then left out.
    let named = |names: &[String]| -> Vec<String> {
        names
            .iter()
            .map(|n| n.trim().to_ascii_uppercase())
            .collect()
    };
    let (only, no) = (named(&flags.sdes_only), named(&flags.sdes_no));
    let wanted = |name: &str| {
        let name = name.to_ascii_uppercase();
        !no.contains(&name) && (only.is_empty() || only.contains(&name))
    };
    let ours = |name: &str| {
        name.parse::<Profile>()
            .ok()
            .filter(|p| ctx.sdes_suites.contains(p))
    };
    let (mut suites, mut tags) = (Vec::new(), Vec::new());
    let mut seen: Vec<String> = Vec::new();
    let mut next = 1;
    if from.is_sdes() || from.is_plain() {
        for (tag, suite) in m
            .attributes("crypto")
            .flatten()
            .filter_map(crypto_tag_suite)
        {
            next = next.max(tag.saturating_add(1));
            let up = suite.to_ascii_uppercase();
            if wanted(&up) && !seen.contains(&up) {
                seen.push(up.clone());
                if let Some(p) = ours(&up) {
                    suites.push(p);
                    tags.push(tag);
                }
            }
        }
    }
    for name in SUITE_ORDER {
        if wanted(name) && !seen.iter().any(|s| s == name) {
            if let Some(p) = ours(name) {
                suites.push(p);
                tags.push(next);
            }
            next += 1;
        }
    }
    Ok((suites, tags))
}

/// Whether section `m` offers opportunistic SRTP (RFC 8643): crypto lines on `RTP/AVP[F]`.
fn opportunistic(m: &Media) -> bool {
    Transport::parse(&m.proto).is_plain() && m.has("crypto")
}

/// The SDES suites a member answering side `m`'s offer prefers: the one the other side took
/// (`took`), then the offer's own in its order, then the gateway's; those the offer's `SDES:
/// no-…` and `only-…` flags leave out are not taken (rtpengine answers with the first suite
/// they leave).
fn answer_suites(ctx: &Ctx<'_>, m: &Media, took: Option<Profile>, flags: &Flags) -> Vec<Profile> {
    let mut v: Vec<Profile> = took.into_iter().collect();
    for c in m.attributes("crypto").flatten() {
        let suite = c.split_whitespace().nth(1).unwrap_or("");
        if let Ok(p) = suite.parse::<Profile>() {
            if ctx.sdes_suites.contains(&p) && !v.contains(&p) {
                v.push(p);
            }
        }
    }
    for p in ctx.sdes_suites {
        if !v.contains(p) {
            v.push(*p);
        }
    }
    let named = |names: &[String], p: &Profile| {
        names
            .iter()
            .any(|n| n.trim().eq_ignore_ascii_case(p.sdp_name()))
    };
    v.retain(|p| {
        !named(&flags.sdes_no, p) && (flags.sdes_only.is_empty() || named(&flags.sdes_only, p))
    });
    v
}

/// The suite of the first `a=crypto` line of section `m`, if the gateway has it.
fn first_suite(m: &Media) -> Option<Profile> {
    m.attributes("crypto")
        .flatten()
        .next()
        .and_then(|c| c.split_whitespace().nth(1)?.parse().ok())
}

/// Our reply's SDP: `doc` rewritten with `outs`, announcing `iface` (else the gateway's
/// address), as the request's `flags` ask.
fn reply_sdp(
    ctx: &Ctx<'_>,
    doc: &SdpDoc,
    iface: Option<&Interface>,
    flags: &Flags,
    outs: &[SectionOut],
) -> String {
    rewrite(
        doc,
        &Rewrite {
            address: iface.map_or_else(|| ctx.gateway.candidate().ip(), |i| i.advertised),
            replace_origin: flags.replaces("origin"),
            replace_null: flags.replaces("zero-address"),
            sections: outs,
            loop_mark: flags.has("loop-protect").then_some(ctx.loop_mark),
        },
    )
}

/// The interface a request asks for the side of its `direction` entry `at`: that entry's
/// name, and the family `address-family` asks for (`IP6` or not; it is the family towards the
/// other side, the offer's recipient, so it applies to entry 1 only).
fn wanted(flags: &Flags, at: usize) -> (Option<&str>, Option<bool>) {
    let name = flags.direction.get(at).map(String::as_str);
    let asked = flags
        .address_family
        .as_deref()
        .filter(|_| at == 1)
        .map(|f| f == "IP6");
    (name, asked)
}

/// The address family an SDP's sections receive on: IPv6 or not (`None`: it names none).
fn family_of(doc: &SdpDoc) -> Option<bool> {
    (0..doc.media.len()).find_map(|i| doc.address_of(i).map(|ip| ip.is_ipv6()))
}

/// How the first answer in a section is taken ([`SectionCall::answer_first`]).
struct AnswerHow<'a> {
    /// The offerer's formats kept to be transcoded.
    transcodes: &'a [CodecId],
    /// The offerer's side's interface.
    iface: Option<&'a Interface>,
    /// ICE towards the offerer.
    ice: IceMode,
    /// The offerer's opportunistic SRTP answered with SDES.
    osrtp: bool,
    /// `single codec`: the offerer answered in one codec.
    single_codec: bool,
    /// The answer's own codec flags (its `strip`, kept by `offer` and `except`).
    codec: &'a CodecFlags,
}

/// The offerer's section `desc` as its member takes it once the answerer (its section `m`)
/// took `ids`: the formats it is answered in (those the answer took of its own, relayed; else,
/// transcoded, the one `accept`/`consume` name or its first the gateway transcodes; one with
/// `single codec`), and the packet time, RTCP mux and address the offer's flags set. Whether
/// the answer's formats are relayed as they are (no transcoding).
/// Telephone-events beside one audio codec: those at its clock, when there are any (an
/// offerer answered in AMR-WB gets its 16 kHz events, not its 8 kHz ones, as rtpengine answers).
fn keep_events_at_clock_of_audio(codecs: &mut Vec<Codec>) {
    let Some(clock) = codecs
        .iter()
        .find(|c| !is_event_like(c))
        .map(|c| c.clock_rate)
    else {
        return;
    };
    let event = |c: &Codec| c.name.eq_ignore_ascii_case("telephone-event");
    if codecs.iter().any(|c| event(c) && c.clock_rate == clock) {
        codecs.retain(|c| !event(c) || c.clock_rate == clock);
    }
}

/// Comfort noise the gateway keeps on a side is listed right after the audio codecs, before
/// the telephone-events, as rtpengine answers.
fn cn_before_events(codecs: &mut Vec<Codec>) {
    let Some(k) = codecs
        .iter()
        .position(|c| CodecId::of(c) == Some(CodecId::ComfortNoise))
    else {
        return;
    };
    let events = codecs
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case("telephone-event"))
        .unwrap_or(codecs.len());
    if events < k {
        let cn = codecs.remove(k);
        codecs.insert(events, cn);
    }
}

/// A renegotiated answer to the offerer (`codecs`, the answer's section `m`'s own): the
/// offerer's comfort noise (its section `xm` of `offer`) added after the audio, before the telephone-events,
/// when its re-offer's flags keep it on its side (`transcodes`) and the answer has none but an
/// 8 kHz codec the gateway transcodes, as a first answer keeps it ([`offerer_takes`]).
fn keep_callers_cn(
    codecs: &mut Vec<CodecOut>,
    (doc, m): (&SdpDoc, &Media),
    (offer, xm): (&SdpDoc, &Media),
    transcodes: &[CodecId],
) {
    if !transcodes.contains(&CodecId::ComfortNoise) {
        return;
    }
    let answered: Vec<CodecId> = rtp_section(doc, m)
        .codecs
        .iter()
        .map(CodecId::passthrough)
        .collect();
    let clock = CodecId::ComfortNoise.clock_rate();
    if answered.contains(&CodecId::ComfortNoise)
        || !answered
            .iter()
            .any(|t| t.is_transcodable() && t.clock_rate() == clock)
    {
        return;
    }
    let Some(cn) = rtp_section(offer, xm)
        .codecs
        .into_iter()
        .find(|c| CodecId::of(c) == Some(CodecId::ComfortNoise))
    else {
        return;
    };
    let at = codecs
        .iter()
        .position(|c| {
            c.rtpmap
                .as_deref()
                .is_some_and(|r| r.to_ascii_lowercase().starts_with("telephone-event/"))
        })
        .unwrap_or(codecs.len());
    codecs.insert(
        at,
        CodecOut {
            pt: cn.pt.to_string(),
            rtpmap: Some(cn.encoding()),
            fmtp: cn.fmtp.clone(),
            rtcp_fb: Vec::new(),
        },
    );
}

fn offerer_takes(
    desc: &mut RtpDescription,
    m: &Media,
    ids: &[CodecId],
    pending: &Pending,
    how: &AnswerHow<'_>,
) -> bool {
    let offered: Vec<CodecId> = desc.sections[0]
        .codecs
        .iter()
        .map(CodecId::passthrough)
        .collect();
    let transcodes = how.transcodes;
    // `accept`/`consume` name what the offerer is answered in, transcoded if need be.
    let accepted = answered_in(&desc.sections[0].codecs, &pending.flags.codec, ids);
    // What the answer took of the offer's own formats is relayed as it is: no transcoding
    // unless the answer took no audio codec the offer had.
    let direct = accepted.is_none()
        && ids
            .iter()
            .any(|id| !id.is_supplemental() && offered.contains(id));
    // The offerer's comfort noise kept on its side though the answer has none (`consume`,
    // `accept`, `always transcode`): made into noise and from silence by the gateway.
    let own_cn = !ids.contains(&CodecId::ComfortNoise)
        && transcodes.contains(&CodecId::ComfortNoise)
        && ids
            .iter()
            .any(|t| t.is_transcodable() && t.clock_rate() == CodecId::ComfortNoise.clock_rate());
    // Relayed, but the answer also took a codec we added: what it sends in that one is
    // transcoded to the offerer's first codec the gateway transcodes, which the offerer is then
    // answered in too (written before the events, [`answer_codecs`], as rtpengine answers).
    let added_taken = ids
        .iter()
        .any(|id| id.is_transcodable() && !offered.contains(id));
    for s in &mut desc.sections {
        let first_transcoded = (direct && added_taken)
            .then(|| {
                s.codecs
                    .iter()
                    .find(|c| CodecId::of(c).is_some_and(|id| id.is_transcodable()))
                    .cloned()
            })
            .flatten();
        s.codecs.retain(|c| {
            let id = CodecId::passthrough(c);
            match accepted {
                // Events only at the clock of the codec answered in.
                Some(a) => {
                    id == a
                        || (id.is_supplemental()
                            && c.clock_rate == a.clock_rate()
                            && caller_keeps(id, ids, transcodes))
                }
                None if direct => ids.contains(&id) || (own_cn && id == CodecId::ComfortNoise),
                None => caller_keeps(id, ids, transcodes),
            }
        });
        if let Some(c) = first_transcoded.filter(|c| !s.codecs.contains(c)) {
            s.codecs.push(c);
        }
        // The answer's `strip` (less what its `offer` and `except` keep), unless it would
        // leave no audio codec.
        if s.codecs
            .iter()
            .any(|c| !is_event_like(c) && !answer_strips(how.codec, c))
        {
            s.codecs.retain(|c| !answer_strips(how.codec, c));
        }
        // Transcoded, the offerer is answered in one codec (its first the gateway
        // transcodes), as rtpengine answers; `single codec` asks the same of a relayed
        // answer. Telephone events and comfort noise stay beside it.
        if !direct || how.single_codec {
            let mut first = true;
            s.codecs
                .retain(|c| is_event_like(c) || std::mem::replace(&mut first, false));
            keep_events_at_clock_of_audio(&mut s.codecs);
        }
        if own_cn {
            cn_before_events(&mut s.codecs);
        }
        if let Some(p) = pending.flags.ptime_reverse {
            s.ptime = Some(p);
        }
        // RTCP is muxed towards the offerer as the answerer took it, unless this side's
        // flags accept or require it regardless, or demux it (the offerer's mux taken,
        // the answerer's ports apart).
        let mux = pending.flags.rtcp_mux;
        s.rtcp_mux &= m.has("rtcp-mux") || mux.accept || mux.require || mux.demux;
        if pending.flags.has("SIP-source-address") {
            if let Some(ip) = pending.flags.received_from {
                s.address = Some(ip);
            }
        }
    }
    direct
}

impl SectionCall {
    /// The interface of `side`'s members: kept once chosen unless the request names one (its
    /// `direction` entry `at`, `address-family`); else chosen by name and by the family of
    /// `doc` (the SDP whose side the members face, when known).
    fn interface(
        &mut self,
        ctx: &Ctx<'_>,
        side: Side,
        flags: &Flags,
        at: usize,
        family: Option<bool>,
    ) -> Option<Interface> {
        let slot = match side {
            Side::A => &mut self.iface_a,
            Side::B => &mut self.iface_b,
        };
        let (name, asked) = wanted(flags, at);
        if let (Some(k), None, None) = (slot.as_ref(), name, asked) {
            return Some(k.clone());
        }
        let k = ctx
            .interfaces
            .get(choose(ctx.interfaces, name, asked.or(family)))
            .cloned();
        slot.clone_from(&k);
        k
    }

    fn section(&mut self, i: usize) -> &mut Section {
        while self.sections.len() <= i {
            let room = self.room(self.sections.len());
            self.sections.push(Section {
                room,
                a: None,
                b: None,
            });
        }
        &mut self.sections[i]
    }

    /// Takes both members of section `i` out of its room.
    async fn drop_section(&mut self, ctx: &Ctx<'_>, i: usize) {
        let Some(s) = self.sections.get_mut(i) else {
            return;
        };
        let room = s.room.clone();
        for m in [s.a.take(), s.b.take()].into_iter().flatten() {
            ctx.gateway.leave(&room, &m.id).await;
        }
        // The section's listeners go with it: a section made again has new members.
        self.drop_listeners(ctx, Some(i)).await;
    }

    /// Takes every member out of its room (the call ends, or starts over).
    pub async fn drop_members(&mut self, ctx: &Ctx<'_>) {
        for i in 0..self.sections.len() {
            self.drop_section(ctx, i).await;
        }
    }

    /// An offer from side `by` (tag `tag`): our offer to the other side (the reply's SDP).
    pub async fn offer(
        &mut self,
        ctx: &Ctx<'_>,
        by: Side,
        tag: &str,
        sdp: &str,
        flags: &Flags,
    ) -> Result<String, ApiError> {
        let doc = SdpDoc::parse(sdp).map_err(|e| ApiError::bad(format!("the offer's SDP: {e}")))?;
        if self.to_tag.is_none() {
            // An offer before any answer (the first, or one that replaces it while it is
            // open: a fork, an early re-offer): the call starts over with it.
            self.drop_members(ctx).await;
            self.sections.clear();
        }
        let mut outs = Vec::new();
        let mut fates = Vec::new();
        let mut renegotiated = Vec::new();
        self.warnings.clear();
        let iface = self.interface(ctx, by.other(), flags, 1, family_of(&doc));
        for i in 0..doc.media.len() {
            let (out, fate, local) = self
                .offer_section(ctx, by, &doc, i, flags, iface.as_ref())
                .await?;
            outs.push(out);
            fates.push(fate);
            renegotiated.push(local);
        }
        for i in doc.media.len()..self.sections.len() {
            self.drop_section(ctx, i).await;
        }
        let text = reply_sdp(ctx, &doc, iface.as_ref(), flags, &outs);
        self.last_signal = std::time::SystemTime::now();
        self.sent[by.index()] = Some(doc.clone());
        self.pending = Some(Pending {
            by,
            offer: doc,
            flags: flags.clone(),
            fates,
            renegotiated,
        });
        self.last_offer = Some(Repeat {
            tag: tag.to_owned(),
            sdp: sdp.to_owned(),
            flags: flags.clone(),
            reply: text.clone(),
        });
        Ok(text)
    }

    /// Section `i` of an offer from `by`: what our offer writes, its fate and (a new offer in
    /// an answered call) the offerer's member as renegotiated.
    async fn offer_section(
        &mut self,
        ctx: &Ctx<'_>,
        by: Side,
        doc: &SdpDoc,
        i: usize,
        flags: &Flags,
        iface: Option<&Interface>,
    ) -> Result<(SectionOut, Fate, Option<Local>), ApiError> {
        let m = &doc.media[i];
        // The flag's transport, else the one the other side already has, else the offer's.
        let towards = match (&flags.transport, self.sections.get(i)) {
            (None, Some(s)) => match by {
                Side::A => &s.b,
                Side::B => &s.a,
            }
            .as_ref()
            .map_or_else(
                || transport_towards(m, flags),
                |y| Transport::parse(&y.local.proto),
            ),
            _ => transport_towards(m, flags),
        };
        if m.port == 0 {
            self.drop_section(ctx, i).await;
            return Ok((SectionOut::Rejected, Fate::Rejected, None));
        }
        if m.proto.to_ascii_uppercase().starts_with("TCP") {
            return Ok((SectionOut::AsIs, Fate::AsIs, None));
        }
        if !relayable(m, &towards) {
            self.drop_section(ctx, i).await;
            return Ok((SectionOut::Rejected, Fate::Rejected, None));
        }
        // Both members there, the other side's on the same transport: a renegotiation on
        // their ports; else the section starts over (a new transport towards the other side
        // needs a new leg).
        let s = self.section(i).clone();
        let same_transport = s
            .clone()
            .facing(by.other())
            .as_ref()
            .is_some_and(|y| Transport::parse(&y.local.proto) == towards);
        if s.a.is_some() && s.b.is_some() && same_transport {
            return self.renegotiate(ctx, by, doc, i, flags).await;
        }
        self.drop_section(ctx, i).await;
        let codecs = rtp_section(doc, m).codecs;
        let empty = Default::default();
        let audio = m.media.eq_ignore_ascii_case("audio");
        let p = plan(&codecs, if audio { &flags.codec } else { &empty });
        for w in &p.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
        let ice = ice_towards(flags, doc, m, false);
        let (spec, options) = offer_leg(ctx, m, &towards, &p, flags, (iface, ice))?;
        let room = self.section(i).room.clone();
        let options = ctx.pinned(&room, by.other(), options);
        let j = ctx
            .gateway
            .offer_rtp_with(&room, spec.clone(), options, Who::default())
            .await?;
        let local = local_of(&j.answer)?;
        *self.section(i).facing(by.other()) = Some(Member {
            id: j.id,
            local: local.clone(),
            endpoint: None,
        });
        let direction = direction_passed(doc, i, flags);
        let out = offered_out(
            &local,
            &spec,
            codec_outs(m, &codecs, &p.towards_callee),
            direction,
        );
        Ok((out, Fate::Relayed(p.caller_transcodes), None))
    }

    /// Section `i` of a new offer from `by` in an answered call: the offerer's member takes
    /// it, the other side's makes a new offer of ours, on the same ports.
    async fn renegotiate(
        &mut self,
        ctx: &Ctx<'_>,
        by: Side,
        doc: &SdpDoc,
        i: usize,
        flags: &Flags,
    ) -> Result<(SectionOut, Fate, Option<Local>), ApiError> {
        let m = &doc.media[i];
        let s = self.section(i).clone();
        let (Some(x), Some(y)) = (
            s.clone().facing(by).clone(),
            s.clone().facing(by.other()).clone(),
        ) else {
            return Err(ApiError::internal("a section without its members"));
        };
        // Our offer to the other side first: if it cannot take one, nothing has changed yet.
        let offer = ctx.gateway.reoffer_rtp(&s.room, &y.id).await?;
        let y_local = local_of(&offer)?;
        let taken = match ctx
            .gateway
            .update_rtp(&s.room, &x.id, description_of(doc, m))
            .await
        {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(ApiError::bad(
                "the offering side had an offer of ours pending",
            )),
            Err(e) => Err(e.into()),
        };
        let answer = match taken {
            Ok(answer) => answer,
            Err(e) => {
                // Refused: our offer to the other side will get no answer.
                ctx.gateway.withdraw_offer(&s.room, &y.id).await;
                return Err(e);
            }
        };
        let x_local = local_of(&answer)?;
        let sec = self.section(i);
        if let Some(mm) = sec.facing(by.other()) {
            mm.local = y_local.clone();
        }
        if let Some(mm) = sec.facing(by) {
            mm.local = x_local.clone();
        }
        // The re-offer's codecs as the codec flags make them (a proxy repeats its first
        // offer's flags on a re-INVITE), as the first offer's were.
        let audio = m.media.eq_ignore_ascii_case("audio");
        let (codecs, transcodes) = if audio && !flags.codec.is_empty() {
            let parsed = rtp_section(doc, m).codecs;
            let p = plan(&parsed, &flags.codec);
            if p.cn_transcode {
                // Comfort noise the re-offer's flags add or keep crosses from now on.
                ctx.gateway.set_cn_transcode(&s.room, &y.id, true).await?;
            }
            let outs = codec_outs(m, &parsed, &p.towards_callee);
            (outs, p.caller_transcodes)
        } else {
            (codecs_of(m), Vec::new())
        };
        let out = SectionOut::Relayed(Box::new(Relayed {
            port: y_local.port,
            rtcp_port: Some(y_local.port.wrapping_add(1)),
            proto: y_local.proto.clone(),
            codecs: Some(codecs),
            direction: direction_passed(doc, i, flags),
            rtcp_mux: y_local.rtcp_mux,
            crypto: y_local.crypto,
            dtls: y_local.dtls,
            ptime: ptime_of(m),
            ice: y_local.ice,
            mid: None,
        }));
        Ok((out, Fate::Relayed(transcodes), Some(x_local)))
    }
}

impl SectionCall {
    /// The answer (tag `tag`) to the offer that waits: our answer to the offerer (the reply's
    /// SDP).
    pub async fn answer(
        &mut self,
        ctx: &Ctx<'_>,
        tag: &str,
        sdp: &str,
        flags: &Flags,
    ) -> Result<String, ApiError> {
        // Without an offer waiting, a later answer to the last one (an early dialog's 183,
        // then its 200 with other codecs; a fork's answer under a new to-tag) is taken again.
        let pending = self
            .pending
            .clone()
            .or_else(|| self.answered.clone())
            .ok_or(ApiError::bad("no offer in this call waits for an answer"))?;
        let doc =
            SdpDoc::parse(sdp).map_err(|e| ApiError::bad(format!("the answer's SDP: {e}")))?;
        let iface = self.interface(
            ctx,
            pending.by,
            &pending.flags,
            0,
            family_of(&pending.offer),
        );
        let mut outs = Vec::new();
        for (i, fate) in pending.fates.iter().enumerate() {
            let out = match (fate, doc.media.get(i)) {
                (Fate::AsIs, Some(_)) => SectionOut::AsIs,
                (Fate::Relayed(transcodes), Some(_)) => {
                    let to = (transcodes.as_slice(), iface.as_ref());
                    self.answer_section(ctx, &pending, &doc, i, to, flags)
                        .await?
                }
                _ => {
                    self.drop_section(ctx, i).await;
                    SectionOut::Rejected
                }
            };
            outs.push(out);
        }
        let text = reply_sdp(ctx, &doc, iface.as_ref(), flags, &outs);
        self.last_signal = std::time::SystemTime::now();
        self.sent[pending.by.other().index()] = Some(doc);
        if self.pending.is_none() || self.to_tag.is_none() {
            // The first answer, or a later one under a new to-tag: that branch answers now.
            self.to_tag = Some(tag.to_owned());
        }
        self.answered = self.pending.take().or(self.answered.take());
        // A renegotiation is done once answered: a later answer is taken as a first one.
        if let Some(a) = self.answered.as_mut() {
            a.renegotiated.iter_mut().for_each(|r| *r = None);
        }
        self.last_answer = Some(Repeat {
            tag: tag.to_owned(),
            sdp: sdp.to_owned(),
            flags: flags.clone(),
            reply: text.clone(),
        });
        Ok(text)
    }

    /// Section `i` of the answer: the answering side's member takes it, the offerer's member
    /// is made (or, renegotiated, already was) with the formats the answer took.
    async fn answer_section(
        &mut self,
        ctx: &Ctx<'_>,
        pending: &Pending,
        doc: &SdpDoc,
        i: usize,
        (transcodes, iface): (&[CodecId], Option<&Interface>),
        flags: &Flags,
    ) -> Result<SectionOut, ApiError> {
        let m = &doc.media[i];
        let by = pending.by;
        let room = self.section(i).room.clone();
        let Some(y) = self.section(i).facing(by.other()).clone() else {
            return Ok(SectionOut::Rejected);
        };
        if m.port == 0 {
            self.drop_section(ctx, i).await;
            return Ok(SectionOut::Rejected);
        }
        let xm = &pending.offer.media[i];
        let reverse = pending.flags.ptime_reverse;
        // The offer's ptime flag changed the packet time towards the answerer, or the codec
        // flags may put the gateway's transcoder between the two: the offerer is answered with
        // its own (where the answerer said none), as rtpengine answers.
        let c = &pending.flags.codec;
        let may_transcode = [&c.transcode, &c.mask, &c.consume, &c.accept]
            .iter()
            .any(|l| !l.is_empty());
        let ptime = match (reverse, pending.flags.ptime) {
            (Some(p), _) => Some(p),
            (None, Some(_)) => ptime_of(xm),
            (None, None) if may_transcode => ptime_of(m).or_else(|| ptime_of(xm)),
            (None, None) => ptime_of(m),
        };
        let renegotiated = pending.renegotiated.get(i).cloned().flatten();
        let (x_local, codecs) = match renegotiated {
            Some(local) => {
                match ctx
                    .gateway
                    .update_rtp(&room, &y.id, description_of(doc, m))
                    .await
                {
                    Ok(None) => {}
                    Ok(Some(_)) => {
                        return Err(ApiError::bad("the answering side had no offer of ours"))
                    }
                    Err(e) => return Err(e.into()),
                }
                let mut codecs = codecs_of(m);
                keep_callers_cn(&mut codecs, (doc, m), (&pending.offer, xm), transcodes);
                (local, codecs)
            }
            None => {
                let ice = ice_towards(flags, doc, m, true);
                // The offerer's opportunistic SRTP is answered with SDES when the answerer
                // took it, or `OSRTP: accept` asks.
                let osrtp = opportunistic(xm) && (m.has("crypto") || flags.osrtp_accept);
                let how = AnswerHow {
                    transcodes,
                    iface,
                    ice,
                    osrtp,
                    single_codec: flags.has("single-codec"),
                    codec: &flags.codec,
                };
                self.answer_first(ctx, pending, doc, i, how, &room, &y)
                    .await?
            }
        };
        Ok(SectionOut::Relayed(Box::new(Relayed {
            port: x_local.port,
            rtcp_port: Some(if x_local.rtcp_mux {
                x_local.port
            } else {
                x_local.port.wrapping_add(1)
            }),
            proto: answered_proto(xm, m, flags),
            codecs: Some(codecs),
            direction: direction_passed(doc, i, flags),
            rtcp_mux: x_local.rtcp_mux,
            crypto: x_local.crypto,
            dtls: x_local.dtls,
            ptime,
            ice: x_local.ice,
            mid: xm.attributes("mid").flatten().next().map(str::to_owned),
        })))
    }

    /// The first answer in section `i`: the answering side's member `y` takes it; the
    /// offerer's member answers the offer with the formats that answer took (and those kept
    /// to be transcoded). Its SDP, and the formats our answer lists.
    #[allow(clippy::too_many_arguments)]
    async fn answer_first(
        &mut self,
        ctx: &Ctx<'_>,
        pending: &Pending,
        doc: &SdpDoc,
        i: usize,
        how: AnswerHow<'_>,
        room: &str,
        y: &Member,
    ) -> Result<(Local, Vec<CodecOut>), ApiError> {
        let m = &doc.media[i];
        let xm = &pending.offer.media[i];
        if let Some(y) = self.section(i).facing(pending.by.other()) {
            y.endpoint = endpoint_of(doc, i);
        }
        let taken = ctx
            .gateway
            .answer_rtp(room, &y.id, description_of(doc, m))
            .await?;
        let ids: Vec<CodecId> = taken.iter().map(|(id, _)| *id).collect();
        let mut desc = description_of(&pending.offer, xm);
        let direct = offerer_takes(&mut desc, m, &ids, pending, &how);
        let AnswerHow {
            iface, ice, osrtp, ..
        } = how;
        // `set: AMR-WB/16000/1/23850`: what the offerer is sent transcoded AMR in.
        let amr_mode = set_amr_mode(
            &rtp_section(&pending.offer, xm).codecs,
            &pending.flags.codec,
        )
        .0;
        let options = ctx.pinned(
            room,
            pending.by,
            RtpLegOptions {
                passthrough: true,
                kind: media_kind(xm),
                sdes_suites: Some(answer_suites(ctx, xm, first_suite(m), &pending.flags)),
                sdes_tags: Vec::new(),
                bind: iface.map(|i| i.local),
                announce: iface.map(|i| i.advertised),
                ice,
                osrtp,
                amr_mode,
                dtls: rtp_section(&pending.offer, xm)
                    .keyed_by_dtls()
                    .then(|| dtls_choice(&pending.flags)),
                ..RtpLegOptions::default()
            },
        );
        let existing = self.section(i).facing(pending.by).clone();
        let (id, answer) = match existing {
            // A later answer to the same offer: the offerer's member answers it again, on its
            // ports, with what this answer took.
            Some(x) => match ctx.gateway.update_rtp(room, &x.id, desc).await {
                Ok(Some(answer)) => (x.id, answer),
                Ok(None) => {
                    return Err(ApiError::bad(
                        "the offering side had an offer of ours pending",
                    ))
                }
                Err(e) => return Err(e.into()),
            },
            None => {
                let j = ctx
                    .gateway
                    .join_rtp_with(room, desc, options, Who::default())
                    .await?;
                (j.id, j.answer)
            }
        };
        let local = local_of(&answer)?;
        *self.section(i).facing(pending.by) = Some(Member {
            id,
            local: local.clone(),
            endpoint: endpoint_of(&pending.offer, i),
        });
        // With codecs masked the offerer's side is the transcoder's, and is answered in its
        // own formats as it wrote them (rtpengine's codec handler); else relayed, in the
        // answer's.
        let masked =
            !pending.flags.codec.mask.is_empty() || !pending.flags.codec.consume.is_empty();
        let codecs = answer_codecs(m, xm, &local.formats, direct && !masked);
        Ok((local, codecs))
    }
}

/// The formats of our answer to the offerer (section `xm` of its offer), `formats` those its
/// member took: relayed (`as_answered`), as the answer (section `m`) wrote them, then, before
/// the events, the offer's own that a codec we added is transcoded to; else as the offer wrote
/// them.
fn answer_codecs(m: &Media, xm: &Media, formats: &[String], as_answered: bool) -> Vec<CodecOut> {
    let offered = codecs_of(xm);
    let as_offered = |f: &String| offered.iter().find(|c| c.pt == *f).cloned();
    if !as_answered {
        return formats.iter().filter_map(as_offered).collect();
    }
    let mut v: Vec<CodecOut> = codecs_of(m)
        .into_iter()
        .filter(|c| formats.contains(&c.pt))
        .collect();
    let rest: Vec<CodecOut> = formats
        .iter()
        .filter(|f| !v.iter().any(|c| c.pt == **f))
        .filter_map(as_offered)
        .collect();
    // Named by its `a=rtpmap`, or RFC 3551's for a static type (CN's 13).
    let event_like = |c: &CodecOut| {
        c.rtpmap
            .clone()
            .or_else(|| static_rtpmap(&c.pt))
            .is_some_and(|r| is_event_name(r.split('/').next().unwrap_or_default()))
    };
    let at = v.iter().position(event_like).unwrap_or(v.len());
    v.splice(at..at, rest);
    v
}
