//! The ng control socket (`secrelay serve --ng ADDR`): rtpengine's protocol for SIP proxies
//! (Kamailio's and OpenSIPS's `rtpengine` modules), over UDP.
//!
//! A call maps to a two-member room. `offer` carries the caller's SDP: the caller's side is
//! remembered, and a member facing the callee is made as an *offer* of ours (a port pair of
//! its own, our address, and for SDES a key of ours per suite; or, with `transport-protocol:
//! UDP/TLS/RTP/SAVPF`, a WebRTC offer: ICE-lite, DTLS `actpass`, on the shared UDP port) whose
//! SDP is the reply, for the proxy to send on to the callee. `answer` carries the callee's SDP:
//! the callee's member takes it, and a member facing the caller is made from the caller's SDP,
//! restricted to the codecs the callee took, whose answer is the reply. So each side gets the
//! kind of leg its SDP and the flags ask for (plain RTP, SDES-SRTP, or WebRTC, on either
//! side), and media between them is unprotected with one side's keys and protected with the
//! other's.
//!
//! Replies are cached by cookie for a while: a proxy retransmitting a request over UDP gets the
//! same reply, not a second call. Malformed messages, unknown commands, missing keys, SDP
//! without media and impossible transports get `result: error` with an `error-reason`, are
//! counted, and never panic anything.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use secrelay_srtp::Profile;
use secrelay_wire::bencode::{ng_decode, ng_encode, Bencode};
use secrelay_wire::sdp::parse_offer;
use secrelay_wire::sdp_rtp::{parse_rtp, RtpDescription};

use super::ng_codecs::{caller_keeps, plan};
use super::{Gateway, JoinError, JoinKind, Who};
use crate::leg::{CodecId, RtpOfferSpec, WebRtcOfferSection};
use secrelay_wire::ng::{error_reply, parse, reply, Dtls, Flags, Ice, OfferAnswer, Request};

/// Why an offer has nothing for the callee.
const NO_CODEC: &str =
    "the offer has no codec the gateway relays or transcodes (opus, PCMU, PCMA, G722)";

/// How long a reply is kept for retransmissions of its request.
const REPLY_CACHE_FOR: Duration = Duration::from_secs(30);
/// Most replies kept.
const REPLY_CACHE_MAX: usize = 16_384;

/// One call: the caller's side as offered, the callee's member, and the caller's once made.
#[derive(Debug, Clone)]
struct Call {
    room: String,
    from_tag: String,
    to_tag: Option<String>,
    /// The caller's SDP and flags, for its member at `answer` time.
    caller_sdp: String,
    caller_flags: Flags,
    /// The member facing the callee, and our offer to it.
    callee_id: String,
    callee_offer: String,
    /// Whether the callee's member is a WebRTC leg (its answer is WebRTC SDP).
    callee_webrtc: bool,
    /// The caller's codecs its side keeps to be transcoded, whatever the callee takes (the
    /// `codec` manipulations).
    caller_transcodes: Vec<CodecId>,
    /// The member facing the caller, and our answer to it, once answered.
    caller: Option<(String, String)>,
    /// The last new offer in the answered call (a re-INVITE from either side).
    reoffer: Option<Reoffer>,
    created: Instant,
}

/// A new offer in an answered call: from whom, and what each side gets.
#[derive(Debug, Clone)]
struct Reoffer {
    /// The offering side's tag and SDP.
    from_tag: String,
    sdp: String,
    /// Our new offer to the other side (the reply to the `offer`), and that side's member.
    offer: String,
    answerer: String,
    /// Our answer to the offering side (the reply to the `answer`), and whether it was
    /// answered.
    answer: String,
    answered: bool,
}

/// The configuration's `ng_allow` (checked when the configuration was).
fn gateway_allow(gateway: &Gateway) -> Vec<ipnet::IpNet> {
    gateway.config().ng_allowed().unwrap_or_default()
}

/// The ng server's state.
pub(crate) struct Ng {
    gateway: Arc<Gateway>,
    calls: HashMap<String, Call>,
    replies: HashMap<(SocketAddr, Vec<u8>), (Vec<u8>, Instant)>,
    reply_order: VecDeque<((SocketAddr, Vec<u8>), Instant)>,
    sdes_suites: Vec<Profile>,
    /// `ng_allow`: the sources taken; empty: any.
    allow: Vec<ipnet::IpNet>,
}

impl Ng {
    pub fn new(gateway: Arc<Gateway>, sdes_suites: Vec<Profile>) -> Ng {
        Ng {
            calls: HashMap::new(),
            replies: HashMap::new(),
            reply_order: VecDeque::new(),
            sdes_suites,
            allow: gateway_allow(&gateway),
            gateway,
        }
    }

    /// Whether a datagram from `from` is taken (`ng_allow`).
    fn allowed(&self, from: SocketAddr) -> bool {
        let ip = match from.ip() {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
            v4 => v4,
        };
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }

    /// Serves the socket until the runtime ends.
    pub async fn serve(mut self, socket: tokio::net::UdpSocket) {
        let mut buf = vec![0u8; 65_536];
        // Calls whose members all ended on their own (media timeout, lost consent) are swept
        // as often as a member can time out, at most every 30 s.
        let every =
            Duration::from_secs_f64(self.gateway.config().media_timeout_secs.clamp(1.0, 30.0));
        let mut prune = tokio::time::interval(every);
        loop {
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { continue };
                    if !self.allowed(from) {
                        // Unanswered: a reply to a forged source would reflect at it.
                        self.gateway.stats().ng_not_allowed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(source = %from.ip(), "ng datagram from outside ng_allow");
                        continue;
                    }
                    let out = self.message(from, &buf[..n]).await;
                    let _ = socket.send_to(&out, from).await;
                }
                _ = prune.tick() => self.prune().await,
            }
        }
    }

    /// One datagram in, its reply out.
    pub async fn message(&mut self, from: SocketAddr, msg: &[u8]) -> Vec<u8> {
        let stats = self.gateway.stats().clone();
        stats.ng_requests.fetch_add(1, Ordering::Relaxed);
        let (cookie, body) = match ng_decode(msg) {
            Ok((c, b)) => (c.to_vec(), b),
            Err(e) => {
                stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                // A reply needs a cookie: the message's first word, when it has one.
                let cookie = msg.split(|b| *b == b' ').next().unwrap_or(b"0");
                let cookie = String::from_utf8_lossy(&cookie[..cookie.len().min(64)]);
                return ng_encode(&cookie, &error_reply(&format!("malformed message: {e}")));
            }
        };
        let key = (from, cookie.clone());
        if let Some((r, _)) = self.replies.get(&key) {
            return r.clone();
        }
        let reply_body = match parse(&body) {
            Ok(req) => match self.request(req).await {
                Ok(r) => r,
                Err(why) => {
                    stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                    error_reply(&why)
                }
            },
            Err(e) => {
                stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                error_reply(&e.to_string())
            }
        };
        let out = ng_encode(&String::from_utf8_lossy(&cookie), &reply_body);
        self.remember(key, out.clone());
        stats
            .ng_calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
        out
    }

    fn remember(&mut self, key: (SocketAddr, Vec<u8>), out: Vec<u8>) {
        let now = Instant::now();
        self.expire_replies(now);
        self.replies.insert(key.clone(), (out, now));
        self.reply_order.push_back((key, now));
    }

    /// Forgets replies older than [`REPLY_CACHE_FOR`], and the oldest beyond
    /// [`REPLY_CACHE_MAX`].
    fn expire_replies(&mut self, now: Instant) {
        while let Some((k, t)) = self.reply_order.front() {
            if now.duration_since(*t) < REPLY_CACHE_FOR && self.replies.len() < REPLY_CACHE_MAX {
                break;
            }
            self.replies.remove(k);
            self.reply_order.pop_front();
        }
    }

    /// Forgets calls whose members have all ended (a media timeout, a lost consent) without a
    /// `delete`, and replies kept past their time (a proxy that stopped sending would otherwise
    /// leave the last 30 s of replies in memory until its next request).
    async fn prune(&mut self) {
        self.expire_replies(Instant::now());
        let rooms: Vec<String> = self.calls.values().map(|c| c.room.clone()).collect();
        for room in rooms {
            if self.gateway.rooms(Some(&room)).await.is_empty() {
                self.calls.retain(|_, c| c.room != room);
            }
        }
        self.gateway
            .stats()
            .ng_calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
    }

    async fn request(&mut self, req: Request) -> Result<Bencode, String> {
        match req {
            Request::Ping => Ok(reply(vec![("result", Bencode::str("pong"))])),
            Request::Offer(o) => self.offer(o).await,
            Request::Answer(a) => self.answer(a).await,
            Request::Delete {
                call_id,
                from_tag,
                to_tag,
            } => self.delete(&call_id, from_tag, to_tag).await,
            Request::Query { call_id } => self.query(&call_id).await,
            Request::List { limit } => {
                let mut ids: Vec<&String> = self.calls.keys().collect();
                ids.sort();
                let calls = ids
                    .into_iter()
                    .take(limit.unwrap_or(usize::MAX))
                    .map(|c| Bencode::str(c))
                    .collect();
                Ok(reply(vec![
                    ("result", Bencode::str("ok")),
                    ("calls", Bencode::List(calls)),
                ]))
            }
            Request::Statistics => {
                let t = self.gateway.stats().totals();
                let current = reply(vec![
                    ("sessionsown", Bencode::Int(self.calls.len() as i64)),
                    ("sessionstotal", Bencode::Int(self.calls.len() as i64)),
                    ("participants", Bencode::Int(t.participants as i64)),
                ]);
                let total = reply(vec![
                    ("forwardedpackets", Bencode::Int(t.media_forwarded as i64)),
                    ("routedpackets", Bencode::Int(t.media_routed as i64)),
                    ("droppedpackets", Bencode::Int(t.drops as i64)),
                ]);
                Ok(reply(vec![
                    ("result", Bencode::str("ok")),
                    (
                        "statistics",
                        reply(vec![
                            ("currentstatistics", current),
                            ("totalstatistics", total),
                        ]),
                    ),
                ]))
            }
            other => Err(format!("command not supported: {other:?}")),
        }
    }

    /// `offer`: the member facing the callee, made as our offer.
    async fn offer(&mut self, o: OfferAnswer) -> Result<Bencode, String> {
        if let Some(c) = self.calls.get(&o.call_id).cloned() {
            if c.from_tag == o.from_tag && c.caller_sdp == o.sdp && c.reoffer.is_none() {
                // The same offer again (a retransmission under a new cookie): the same reply.
                return Ok(sdp_reply(&c.callee_offer, &[]));
            }
            return self.reoffer(c, o).await;
        }
        // A new call: a new room and two legs, refused while its worker sheds joins.
        self.gateway.admit(&format!("call:{}", o.call_id))?;
        let caller = parse_rtp(&o.sdp).map_err(|e| format!("the offer's SDP: {e}"))?;
        let section = caller
            .sections
            .iter()
            .find(|s| s.port != 0 && s.kind == secrelay_wire::sdp::MediaKind::Audio)
            .ok_or("the offer's SDP has no audio section with a port")?;
        let mut warnings = o.flags.ignored.clone();
        let transport = match (&o.flags.transport, &section.transport) {
            (Some(t), _) => t.clone(),
            (None, t) if t.is_plain() || t.is_sdes() => t.clone(),
            (None, t) => {
                return Err(format!(
                    "the caller speaks {}: say which transport the callee gets (transport-protocol: RTP/AVP or RTP/SAVP); offering WebRTC towards a callee is not supported yet",
                    t.as_str()
                ))
            }
        };
        if transport.is_dtls() {
            return self.offer_webrtc(o, section, warnings).await;
        }
        if o.flags.ice == Some(Ice::Force) {
            warnings.push("ICE=force: a telephony callee gets no ICE".into());
        }
        let suites: Vec<Profile> = if transport.is_sdes() {
            if o.flags.sdes_off {
                return Err(format!(
                    "transport-protocol {} needs SDES, and SDES is off",
                    transport.as_str()
                ));
            }
            let named = |names: &[String]| {
                names
                    .iter()
                    .map(|n| {
                        n.parse::<Profile>()
                            .map_err(|_| format!("SDES: unknown suite {n:?}"))
                    })
                    .collect::<Result<Vec<Profile>, String>>()
            };
            let only = named(&o.flags.sdes_only)?;
            let no = named(&o.flags.sdes_no)?;
            let base = if only.is_empty() {
                self.sdes_suites.clone()
            } else {
                only
            };
            base.into_iter().filter(|p| !no.contains(p)).collect()
        } else {
            Vec::new()
        };
        let plan = plan(&section.codecs, &o.flags.codec);
        warnings.extend(plan.warnings);
        if plan.towards_callee.is_empty() {
            return Err(NO_CODEC.into());
        }
        let spec = RtpOfferSpec {
            transport,
            codecs: plan.towards_callee,
            suites,
            rtcp_mux: o.flags.rtcp_mux.offer || o.flags.rtcp_mux.require,
            ptime: o.flags.ptime.or(section.ptime),
        };
        let room = format!("call:{}", o.call_id);
        let j = self
            .gateway
            .offer_rtp(&room, spec, Who::default())
            .await
            .map_err(|e| join_reason(&e))?;
        self.calls.insert(
            o.call_id.clone(),
            Call {
                room,
                from_tag: o.from_tag,
                to_tag: None,
                caller_sdp: o.sdp,
                caller_flags: o.flags,
                callee_id: j.id,
                callee_offer: j.answer.clone(),
                callee_webrtc: false,
                caller_transcodes: plan.caller_transcodes,
                caller: None,
                reoffer: None,
                created: Instant::now(),
            },
        );
        Ok(sdp_reply(&j.answer, &warnings))
    }

    /// `offer` towards a WebRTC callee (`transport-protocol: UDP/TLS/RTP/SAVPF`): a WebRTC
    /// member that offers the caller's audio codecs we relay, ICE-lite and DTLS `actpass`.
    async fn offer_webrtc(
        &mut self,
        o: OfferAnswer,
        section: &secrelay_wire::sdp_rtp::RtpSection,
        mut warnings: Vec<String>,
    ) -> Result<Bencode, String> {
        if o.flags.dtls == Some(Dtls::Off) {
            return Err("transport-protocol UDP/TLS/RTP/SAVPF needs DTLS, and DTLS is off".into());
        }
        if let Some(d) = o.flags.dtls {
            // An offer lets the answerer choose (RFC 5763 §5): ours says actpass.
            warnings.push(format!("DTLS={d:?}: our WebRTC offer says actpass"));
        }
        if o.flags.ice == Some(Ice::Remove) {
            warnings.push("ICE=remove: a WebRTC callee needs ICE".into());
        }
        let plan = plan(&section.codecs, &o.flags.codec);
        warnings.extend(plan.warnings);
        if plan.towards_callee.is_empty() {
            return Err(NO_CODEC.into());
        }
        if o.flags.ptime.is_some() {
            warnings.push("ptime: a WebRTC callee gets no a=ptime".into());
        }
        let sections = vec![WebRtcOfferSection {
            kind: secrelay_wire::sdp::MediaKind::Audio,
            direction: secrelay_wire::sdp::Direction::SendRecv,
            codecs: plan.towards_callee.into_iter().map(|(_, c)| c).collect(),
        }];
        let room = format!("call:{}", o.call_id);
        let j = self
            .gateway
            .offer_webrtc(&room, sections, Who::default())
            .await
            .map_err(|e| join_reason(&e))?;
        self.calls.insert(
            o.call_id.clone(),
            Call {
                room,
                from_tag: o.from_tag,
                to_tag: None,
                caller_sdp: o.sdp,
                caller_flags: o.flags,
                callee_id: j.id,
                callee_offer: j.answer.clone(),
                callee_webrtc: true,
                caller_transcodes: plan.caller_transcodes,
                caller: None,
                reoffer: None,
                created: Instant::now(),
            },
        );
        Ok(sdp_reply(&j.answer, &warnings))
    }

    /// A new offer in an answered call (a re-INVITE from either side: new address, codecs,
    /// direction or keys): the offering side's member takes it (its answer kept for the
    /// `answer`), and the other side's member makes a new offer of ours, the reply. Telephony
    /// members only.
    async fn reoffer(&mut self, call: Call, o: OfferAnswer) -> Result<Bencode, String> {
        if let Some(r) = &call.reoffer {
            if r.from_tag == o.from_tag && r.sdp == o.sdp {
                // A retransmission: the same reply.
                return Ok(sdp_reply(&r.offer, &[]));
            }
            if !r.answered {
                return Err("a new offer in this call still waits for its answer".into());
            }
        }
        let Some((caller_id, _)) = &call.caller else {
            return Err(
                "a new offer before the call was answered (only the first offer's retransmissions are taken)"
                    .into(),
            );
        };
        let (offerer, answerer) = if o.from_tag == call.from_tag {
            (caller_id.clone(), call.callee_id.clone())
        } else if call.to_tag.as_deref() == Some(o.from_tag.as_str()) {
            (call.callee_id.clone(), caller_id.clone())
        } else {
            return Err(format!(
                "from-tag {:?} is neither side of this call",
                o.from_tag
            ));
        };
        let sdp = parse_rtp(&o.sdp).map_err(|e| format!("the offer's SDP: {e}"))?;
        if sdp
            .sections
            .iter()
            .any(|s| s.port != 0 && s.transport.is_dtls())
        {
            return Err(
                "a new offer with DTLS (WebRTC) in an answered call is not supported yet".into(),
            );
        }
        // Our offer to the other side first: if that side cannot take one (a WebRTC member),
        // nothing has changed yet.
        let offer = self
            .gateway
            .reoffer_rtp(&call.room, &answerer)
            .await
            .map_err(|e| join_reason(&e))?;
        let answer = match self.gateway.update_rtp(&call.room, &offerer, sdp).await {
            Ok(Some(answer)) => answer,
            Ok(None) => return Err("the offering side had an offer of ours pending".into()),
            Err(e) => return Err(join_reason(&e)),
        };
        if let Some(c) = self.calls.get_mut(&o.call_id) {
            if o.from_tag == c.from_tag {
                c.caller_sdp = o.sdp.clone();
            }
            c.reoffer = Some(Reoffer {
                from_tag: o.from_tag,
                sdp: o.sdp,
                offer: offer.clone(),
                answerer,
                answer,
                answered: false,
            });
        }
        Ok(sdp_reply(&offer, &o.flags.ignored))
    }

    /// `answer`: the callee's member takes its answer; the caller's member is made, with the
    /// codecs the callee took. After a new offer in the answered call, the other side's answer
    /// to it.
    async fn answer(&mut self, a: OfferAnswer) -> Result<Bencode, String> {
        let call = self
            .calls
            .get(&a.call_id)
            .cloned()
            .ok_or_else(|| format!("unknown call-id {:?}", a.call_id))?;
        if let Some(r) = call.reoffer.as_ref().filter(|r| r.from_tag == a.from_tag) {
            if !r.answered {
                let sdp = parse_rtp(&a.sdp).map_err(|e| format!("the answer's SDP: {e}"))?;
                match self.gateway.update_rtp(&call.room, &r.answerer, sdp).await {
                    Ok(None) => {}
                    Ok(Some(_)) => {
                        return Err("the answering side had no offer of ours pending".into())
                    }
                    Err(e) => return Err(join_reason(&e)),
                }
                if let Some(c) = self.calls.get_mut(&a.call_id) {
                    if let Some(r) = c.reoffer.as_mut() {
                        r.answered = true;
                    }
                }
            }
            return Ok(sdp_reply(&r.answer, &a.flags.ignored));
        }
        if call.from_tag != a.from_tag {
            return Err(format!(
                "from-tag {:?} is not this call's caller",
                a.from_tag
            ));
        }
        if let Some((_, sdp)) = &call.caller {
            // Answered already (a retransmission under a new cookie): the same reply.
            return Ok(sdp_reply(sdp, &[]));
        }
        let taken = if call.callee_webrtc {
            let callee =
                parse_offer(&a.sdp).map_err(|e| format!("the answer's WebRTC SDP: {e}"))?;
            self.gateway
                .answer_webrtc(&call.room, &call.callee_id, callee)
                .await
        } else {
            let callee = parse_rtp(&a.sdp).map_err(|e| format!("the answer's SDP: {e}"))?;
            self.gateway
                .answer_rtp(&call.room, &call.callee_id, callee)
                .await
        }
        .map_err(|e| join_reason(&e))?;
        let ids: Vec<CodecId> = taken.iter().map(|(id, _)| *id).collect();
        let mut warnings = a.flags.ignored.clone();
        let caller_rtp =
            parse_rtp(&call.caller_sdp).map_err(|e| format!("the offer's SDP: {e}"))?;
        let dtls = caller_rtp
            .sections
            .iter()
            .any(|s| s.port != 0 && s.transport.is_dtls());
        let (id, sdp) = if dtls {
            // A WebRTC caller: a WebRTC leg answers its offer, with the callee's codecs.
            let mut offer = parse_offer(&call.caller_sdp)
                .map_err(|e| format!("the offer's WebRTC SDP: {e}"))?;
            for m in &mut offer.media {
                m.codecs.retain(|c| {
                    CodecId::of(c).is_some_and(|id| caller_keeps(id, &ids, &call.caller_transcodes))
                });
            }
            let j = self
                .gateway
                .join(&call.room, offer, JoinKind::Join, Who::default())
                .await
                .map_err(|e| join_reason(&e))?;
            (j.id, j.answer)
        } else {
            let mut offer: RtpDescription = caller_rtp;
            for s in &mut offer.sections {
                s.codecs.retain(|c| {
                    CodecId::of(c).is_some_and(|id| caller_keeps(id, &ids, &call.caller_transcodes))
                });
                if let Some(p) = call.caller_flags.ptime_reverse {
                    s.ptime = Some(p);
                }
                if call.caller_flags.has("SIP-source-address") {
                    if let Some(ip) = call.caller_flags.received_from {
                        s.address = Some(ip);
                    }
                }
            }
            if call.caller_flags.transport.is_some() {
                warnings.push(
                    "the caller's side keeps the caller's transport; transport-protocol applies to the callee".into(),
                );
            }
            let j = self
                .gateway
                .join_rtp(&call.room, offer, Who::default())
                .await
                .map_err(|e| join_reason(&e))?;
            (j.id, j.answer)
        };
        if let Some(c) = self.calls.get_mut(&a.call_id) {
            c.to_tag = a.to_tag.clone();
            c.caller = Some((id, sdp.clone()));
        }
        Ok(sdp_reply(&sdp, &warnings))
    }

    async fn delete(
        &mut self,
        call_id: &str,
        from_tag: Option<String>,
        to_tag: Option<String>,
    ) -> Result<Bencode, String> {
        let call = self
            .calls
            .get(call_id)
            .ok_or_else(|| format!("unknown call-id {call_id:?}"))?;
        if from_tag
            .as_ref()
            .is_some_and(|t| *t != call.from_tag && Some(t) != call.to_tag.as_ref())
            && to_tag
                .as_ref()
                .is_some_and(|t| *t != call.from_tag && Some(t) != call.to_tag.as_ref())
        {
            return Err("no such tag in this call".into());
        }
        let call = self.calls.remove(call_id).expect("the call was just found");
        self.gateway.leave(&call.room, &call.callee_id).await;
        if let Some((id, _)) = &call.caller {
            self.gateway.leave(&call.room, id).await;
        }
        Ok(reply(vec![
            ("result", Bencode::str("ok")),
            (
                "created",
                Bencode::Int(call.created.elapsed().as_secs() as i64),
            ),
        ]))
    }

    async fn query(&mut self, call_id: &str) -> Result<Bencode, String> {
        let call = self
            .calls
            .get(call_id)
            .ok_or_else(|| format!("unknown call-id {call_id:?}"))?;
        let rooms = self.gateway.rooms(Some(&call.room)).await;
        let members = rooms
            .first()
            .map(|r| r.participants.clone())
            .unwrap_or_default();
        let side = |id: &str| {
            members.iter().find(|p| p.id == id).map(|p| {
                reply(vec![
                    ("leg", Bencode::str(p.leg)),
                    ("state", Bencode::str(&p.state)),
                    ("packets-in", Bencode::Int(p.packets_in as i64)),
                    ("bytes-in", Bencode::Int(p.bytes_in as i64)),
                    ("packets-out", Bencode::Int(p.packets_out as i64)),
                    ("bytes-out", Bencode::Int(p.bytes_out as i64)),
                    ("errors", Bencode::Int(p.drops.values().sum::<u64>() as i64)),
                ])
            })
        };
        let mut tags = Vec::new();
        if let Some((id, _)) = &call.caller {
            if let Some(d) = side(id) {
                tags.push((call.from_tag.as_str(), d));
            }
        }
        if let Some(d) = side(&call.callee_id) {
            tags.push((call.to_tag.as_deref().unwrap_or("callee"), d));
        }
        Ok(reply(vec![
            ("result", Bencode::str("ok")),
            (
                "created",
                Bencode::Int(call.created.elapsed().as_secs() as i64),
            ),
            ("tags", reply(tags)),
        ]))
    }
}

fn sdp_reply(sdp: &str, warnings: &[String]) -> Bencode {
    let mut e = vec![("result", Bencode::str("ok")), ("sdp", Bencode::str(sdp))];
    let joined;
    if !warnings.is_empty() {
        joined = format!("not acted on: {}", warnings.join(", "));
        e.push(("warning", Bencode::str(&joined)));
    }
    reply(e)
}

fn join_reason(e: &JoinError) -> String {
    match e {
        JoinError::Unacceptable(why) => why.clone(),
        JoinError::ShuttingDown => "the gateway is shutting down".into(),
        JoinError::Full(why) => format!("the gateway is full: {why}"),
    }
}
