//! ng calls with a WebRTC side (DTLS-SRTP, `UDP/TLS/RTP/SAVP[F]`): a browser calling a phone,
//! or a phone's call offered to a browser (`transport-protocol: UDP/TLS/RTP/SAVPF`). The call
//! is one room of two members: the member facing the callee made as an offer of ours (a port
//! pair of its own, or, for a WebRTC callee, ICE-lite and DTLS `actpass` on the shared UDP
//! port), the member facing the caller made at `answer` from the caller's SDP, restricted to the
//! codecs the callee took. Audio only; the replies are the legs' own SDP. Calls between
//! telephony sides are kept section by section ([`super::ng_call`]).

use std::time::Instant;

use secrelay_srtp::Profile;
use secrelay_wire::bencode::Bencode;
use secrelay_wire::ng::{Dtls, Flags, Ice, OfferAnswer};
use secrelay_wire::sdp::parse_offer;
use secrelay_wire::sdp_rtp::{parse_rtp, RtpDescription, Transport};

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use super::call_state::Held;
use super::ng::{sdp_reply, Call, Ng, NO_CODEC};
use super::ng_call::{crypto_lines, Side};
use super::ng_codecs::{caller_keeps, plan};
use super::{ApiError, JoinKind, Who};
use crate::leg::{CodecId, IceMode, LegMarks, RtpLegOptions, RtpOfferSpec, WebRtcOfferSection};

/// One call: the caller's side as offered, the callee's member, and the caller's once made.
#[derive(Debug, Clone)]
pub(crate) struct WebRtcCall {
    pub(crate) room: String,
    pub(crate) from_tag: String,
    pub(crate) to_tag: Option<String>,
    /// The caller's SDP and flags, for its member at `answer` time.
    pub(crate) caller_sdp: String,
    pub(crate) caller_flags: Flags,
    /// The member facing the callee, and our offer to it.
    pub(crate) callee_id: String,
    pub(crate) callee_offer: String,
    /// Whether the callee's member is a WebRTC leg (its answer is WebRTC SDP).
    pub(crate) callee_webrtc: bool,
    /// Whether the caller's side is WebRTC (its offer has a DTLS section).
    pub(crate) caller_webrtc: bool,
    /// The caller's codecs its side keeps to be transcoded, whatever the callee takes (the
    /// `codec` manipulations).
    pub(crate) caller_transcodes: Vec<CodecId>,
    /// The member facing the caller, and our answer to it, once answered.
    pub(crate) caller: Option<(String, String)>,
    /// Where the telephony members' RTP sockets are bound (facing the callee, the caller;
    /// `None` for a WebRTC member, on the shared port), for a standby to bind them again.
    pub(crate) rtp: [Option<SocketAddr>; 2],
    /// The last new offer in the answered call (a re-INVITE from either side).
    pub(crate) reoffer: Option<Reoffer>,
    pub(crate) created: Instant,
}

/// A new offer in an answered call: from whom, and what each side gets.
#[derive(Debug, Clone)]
pub(crate) struct Reoffer {
    /// The offering side's tag and SDP.
    pub(crate) from_tag: String,
    pub(crate) sdp: String,
    /// Our new offer to the other side (the reply to the `offer`), and that side's member.
    pub(crate) offer: String,
    pub(crate) answerer: String,
    /// Our answer to the offering side (the reply to the `answer`), and whether it was
    /// answered.
    pub(crate) answer: String,
    pub(crate) answered: bool,
}

/// Whether an SDP description has a DTLS (WebRTC) section with a port.
fn dtls_in(d: &RtpDescription) -> bool {
    d.sections
        .iter()
        .any(|s| s.port != 0 && s.transport.is_dtls())
}

impl WebRtcCall {
    /// Each member as its peer knows it, for a standby to take the call over: a telephony
    /// member bound where it is with our SDP's crypto lines, its SRTP and ICE marks; a WebRTC
    /// member with its DTLS-SRTP keys and streams (`marks`, by member id), at `shared`.
    pub(crate) fn held(&self, marks: &HashMap<String, LegMarks>, shared: IpAddr) -> Vec<Held> {
        let mut members = vec![(&self.callee_id, Side::B, self.rtp[0], &self.callee_offer)];
        if let Some((id, answer)) = &self.caller {
            members.push((id, Side::A, self.rtp[1], answer));
        }
        members
            .into_iter()
            .map(|(id, side, rtp, first)| {
                let m = marks.get(id.as_str());
                Held {
                    room: self.room.clone(),
                    side,
                    rtp: rtp.unwrap_or(SocketAddr::new(shared, 0)),
                    crypto: crypto_lines(self.latest_to(id, first)),
                    srtp: m.map(|k| k.srtp.clone()).unwrap_or_default(),
                    ice: m.and_then(|k| k.ice.clone()),
                    webrtc: m.and_then(|k| k.webrtc.clone()),
                    dtls: m.and_then(|k| k.dtls.clone()),
                }
            })
            .collect()
    }

    /// Its members' ids, each with the side it faces (the callee's member faces B).
    pub(crate) fn member_sides(&self) -> Vec<(String, Side)> {
        let mut v = vec![(self.callee_id.clone(), Side::B)];
        if let Some((id, _)) = &self.caller {
            v.push((id.clone(), Side::A));
        }
        v
    }

    /// Our latest SDP to member `id`: the last new offer's (every new offer is to one side
    /// and answers the other), else `first`.
    fn latest_to<'a>(&'a self, id: &str, first: &'a str) -> &'a str {
        match &self.reoffer {
            Some(r) if r.answerer == id => &r.offer,
            Some(r) => &r.answer,
            None => first,
        }
    }

    /// After the call was made again from its requests (taken over from another node): a
    /// request's `reply` as the other node gave it, for the SDP the replay just wrote (the
    /// reply to an `answer` if `answer`, else to an `offer`), so that the request sent again
    /// gets it.
    pub(crate) fn restore_reply(&mut self, answer: bool, reply: &str) {
        let text = match (&mut self.reoffer, &mut self.caller, answer) {
            (Some(r), _, false) => &mut r.offer,
            (Some(r), _, true) => &mut r.answer,
            (None, _, false) => &mut self.callee_offer,
            (None, Some((_, a)), true) => a,
            (None, None, true) => return,
        };
        reply.clone_into(text);
    }
}

/// The transport towards the callee: the one `transport-protocol` names, else the caller's
/// when it is plain RTP or SDES (a WebRTC caller must name it).
fn callee_transport(flags: &Flags, caller: &Transport) -> Result<Transport, ApiError> {
    Ok(match (&flags.transport, caller) {
        (Some(t), _) => t.clone(),
        (None, t) if t.is_plain() || t.is_sdes() => t.clone(),
        (None, t) => {
            return Err(ApiError::bad(format!(
                "the caller speaks {}: say which transport the callee gets (transport-protocol: RTP/AVP or RTP/SAVP); offering WebRTC towards a callee is not supported yet",
                t.as_str()
            )))
        }
    })
}

/// The SDES suites offered to the callee on `transport`: ours (`ours`), or those `SDES:
/// only-…` names, less those `SDES: no-…` names; none but on an SDES transport, which `SDES:
/// off` refuses.
fn offered_suites(
    flags: &Flags,
    transport: &Transport,
    ours: &[Profile],
) -> Result<Vec<Profile>, ApiError> {
    if !transport.is_sdes() {
        return Ok(Vec::new());
    }
    if flags.sdes_off {
        return Err(ApiError::bad(format!(
            "transport-protocol {} needs SDES, and SDES is off",
            transport.as_str()
        )));
    }
    let named = |names: &[String]| {
        names
            .iter()
            .map(|n| {
                n.parse::<Profile>()
                    .map_err(|_| ApiError::bad(format!("SDES: unknown suite {n:?}")))
            })
            .collect::<Result<Vec<Profile>, ApiError>>()
    };
    let only = named(&flags.sdes_only)?;
    let no = named(&flags.sdes_no)?;
    let base = if only.is_empty() { ours.to_vec() } else { only };
    Ok(base.into_iter().filter(|p| !no.contains(p)).collect())
}

impl Ng {
    /// `offer`: the member facing the callee, made as our offer.
    pub(super) async fn webrtc_offer(&mut self, o: OfferAnswer) -> Result<Bencode, ApiError> {
        if let Some(Call::WebRtc(c)) = self.calls.get(&o.call_id).cloned() {
            if c.from_tag == o.from_tag && c.caller_sdp == o.sdp && c.reoffer.is_none() {
                // The same offer again (a retransmission under a new cookie): the same reply.
                return Ok(sdp_reply(&c.callee_offer, &[]));
            }
            return self.webrtc_reoffer(*c, o).await;
        }
        // A new call: a new room and two legs, refused while its worker sheds joins.
        self.gateway.admit(&format!("call:{}", o.call_id))?;
        let caller =
            parse_rtp(&o.sdp).map_err(|e| ApiError::bad(format!("the offer's SDP: {e}")))?;
        let section = caller
            .sections
            .iter()
            .find(|s| s.port != 0 && s.kind == secrelay_wire::sdp::MediaKind::Audio)
            .ok_or(ApiError::bad(
                "the offer's SDP has no audio section with a port",
            ))?;
        let mut warnings = o.flags.ignored.clone();
        let transport = callee_transport(&o.flags, &section.transport)?;
        if transport.is_dtls() {
            let caller_webrtc = dtls_in(&caller);
            return self
                .offer_webrtc_callee(o, section, caller_webrtc, warnings)
                .await;
        }
        let suites = offered_suites(&o.flags, &transport, &self.sdes_suites)?;
        let plan = plan(&section.codecs, &o.flags.codec);
        warnings.extend(plan.warnings);
        if plan.towards_callee.is_empty() {
            return Err(ApiError::bad(NO_CODEC));
        }
        let (dtmf_transcode, cn_transcode, amr_mode) =
            (plan.dtmf_transcode, plan.cn_transcode, plan.amr_mode);
        let spec = RtpOfferSpec {
            transport,
            codecs: plan.towards_callee,
            suites,
            rtcp_mux: o.flags.rtcp_mux.offer || o.flags.rtcp_mux.require,
            ptime: o.flags.ptime.or(section.ptime),
        };
        let room = format!("call:{}", o.call_id);
        // rtpengine's default: ICE towards the callee, since the caller did ICE.
        let ice = match o.flags.ice {
            Some(Ice::Remove) => IceMode::Off,
            _ => IceMode::Force,
        };
        // The callee's interface: `direction`'s second entry, else of the caller's family.
        let ctx = self.ctx();
        let family = section.address.map(|ip| ip.is_ipv6());
        let on = ctx.on_interface(
            &o.flags,
            1,
            family,
            RtpLegOptions {
                ice,
                dtmf_transcode,
                cn_transcode,
                amr_mode,
                ..RtpLegOptions::default()
            },
        );
        let options = ctx.pinned(&room, Side::B, on);
        let bound = self.bound_ip(&options);
        let j = self
            .gateway
            .offer_rtp_with(&room, spec, options, Who::default())
            .await?;
        self.calls.insert(
            o.call_id.clone(),
            Call::WebRtc(Box::new(WebRtcCall {
                room,
                from_tag: o.from_tag,
                to_tag: None,
                caller_sdp: o.sdp,
                caller_flags: o.flags,
                callee_id: j.id,
                callee_offer: j.answer.clone(),
                callee_webrtc: false,
                caller_webrtc: dtls_in(&caller),
                caller_transcodes: plan.caller_transcodes,
                caller: None,
                rtp: [j.ports.first().map(|p| SocketAddr::new(bound, *p)), None],
                reoffer: None,
                created: Instant::now(),
            })),
        );
        Ok(sdp_reply(&j.answer, &warnings))
    }

    /// The address a telephony member made with `options` is bound on: its exact address, its
    /// interface's, else the gateway's UDP address.
    fn bound_ip(&self, options: &RtpLegOptions) -> IpAddr {
        options
            .at
            .map(|a| a.ip())
            .or(options.bind)
            .unwrap_or_else(|| self.gateway.udp_addr().ip())
    }

    /// `offer` towards a WebRTC callee (`transport-protocol: UDP/TLS/RTP/SAVPF`): a WebRTC
    /// member that offers the caller's audio codecs we relay, ICE-lite and DTLS `actpass`.
    async fn offer_webrtc_callee(
        &mut self,
        o: OfferAnswer,
        section: &secrelay_wire::sdp_rtp::RtpSection,
        caller_webrtc: bool,
        mut warnings: Vec<String>,
    ) -> Result<Bencode, ApiError> {
        if o.flags.dtls == Some(Dtls::Off) {
            return Err(ApiError::bad(
                "transport-protocol UDP/TLS/RTP/SAVPF needs DTLS, and DTLS is off",
            ));
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
            return Err(ApiError::bad(NO_CODEC));
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
            .await?;
        self.calls.insert(
            o.call_id.clone(),
            Call::WebRtc(Box::new(WebRtcCall {
                room,
                from_tag: o.from_tag,
                to_tag: None,
                caller_sdp: o.sdp,
                caller_flags: o.flags,
                callee_id: j.id,
                callee_offer: j.answer.clone(),
                callee_webrtc: true,
                caller_webrtc,
                caller_transcodes: plan.caller_transcodes,
                caller: None,
                rtp: [None, None],
                reoffer: None,
                created: Instant::now(),
            })),
        );
        Ok(sdp_reply(&j.answer, &warnings))
    }

    /// A new offer in an answered call (a re-INVITE from either side: new address, codecs,
    /// direction or keys): the offering side's member takes it (its answer kept for the
    /// `answer`), and the other side's member makes a new offer of ours, the reply. A WebRTC
    /// side's new offer keeps its DTLS association and may restart ICE
    /// ([`crate::leg::WebRtcLeg::take_offer`]); our new offer to a WebRTC side has the
    /// sections it has.
    async fn webrtc_reoffer(
        &mut self,
        call: WebRtcCall,
        o: OfferAnswer,
    ) -> Result<Bencode, ApiError> {
        if let Some(r) = &call.reoffer {
            if r.from_tag == o.from_tag && r.sdp == o.sdp {
                // A retransmission: the same reply.
                return Ok(sdp_reply(&r.offer, &[]));
            }
            if !r.answered {
                return Err(ApiError::bad(
                    "a new offer in this call still waits for its answer",
                ));
            }
        }
        let Some((caller_id, _)) = &call.caller else {
            return Err(ApiError::bad("a new offer before the call was answered (only the first offer's retransmissions are taken)"));
        };
        let caller_webrtc = call.caller_webrtc;
        let (offerer, answerer, offerer_webrtc, answerer_webrtc) = if o.from_tag == call.from_tag {
            (
                caller_id.clone(),
                call.callee_id.clone(),
                caller_webrtc,
                call.callee_webrtc,
            )
        } else if call.to_tag.as_deref() == Some(o.from_tag.as_str()) {
            (
                call.callee_id.clone(),
                caller_id.clone(),
                call.callee_webrtc,
                caller_webrtc,
            )
        } else {
            return Err(ApiError::bad(format!(
                "from-tag {:?} is neither side of this call",
                o.from_tag
            )));
        };
        let dtls = dtls_in(
            &parse_rtp(&o.sdp).map_err(|e| ApiError::bad(format!("the offer's SDP: {e}")))?,
        );
        if dtls != offerer_webrtc {
            return Err(ApiError::bad(if offerer_webrtc {
                "the WebRTC side's new offer has no DTLS section (a side keeps its transport)"
            } else {
                "a new offer with DTLS from a telephony side (a side keeps its transport)"
            }));
        }
        // Our offer to the other side first: if that side cannot take one (an offer of ours
        // waits there), nothing has changed yet.
        let offer = if answerer_webrtc {
            self.gateway.reoffer_webrtc(&call.room, &answerer).await?
        } else {
            self.gateway.reoffer_rtp(&call.room, &answerer).await?
        };
        let answer = match self
            .offerer_takes(&call.room, &offerer, offerer_webrtc, &o.sdp)
            .await
        {
            Ok(answer) => answer,
            Err(e) => {
                // Refused: the other side's new offer will get no answer, and its next SDP is
                // an offer again.
                self.gateway.withdraw_offer(&call.room, &answerer).await;
                return Err(e);
            }
        };
        if let Some(c) = self.webrtc_mut(&o.call_id) {
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

    /// The offering side's member takes its new offer `sdp` (WebRTC or telephony): our answer.
    async fn offerer_takes(
        &self,
        room: &str,
        offerer: &str,
        webrtc: bool,
        sdp: &str,
    ) -> Result<String, ApiError> {
        if webrtc {
            let sdp = parse_offer(sdp)
                .map_err(|e| ApiError::bad(format!("the offer's WebRTC SDP: {e}")))?;
            return Ok(self.gateway.update_webrtc(room, offerer, sdp).await?);
        }
        let sdp = parse_rtp(sdp).map_err(|e| ApiError::bad(format!("the offer's SDP: {e}")))?;
        match self.gateway.update_rtp(room, offerer, sdp).await? {
            Some(answer) => Ok(answer),
            None => Err(ApiError::bad(
                "the offering side had an offer of ours pending",
            )),
        }
    }

    /// The answer to our new offer `r` in the answered call: the answering side's member takes
    /// it (a WebRTC or a telephony one), and the new offer is answered from then on.
    async fn answer_reoffer(
        &mut self,
        call: &WebRtcCall,
        r: &Reoffer,
        a: &OfferAnswer,
    ) -> Result<(), ApiError> {
        let webrtc = if r.answerer == call.callee_id {
            call.callee_webrtc
        } else {
            call.caller_webrtc
        };
        if webrtc {
            let sdp = parse_offer(&a.sdp)
                .map_err(|e| ApiError::bad(format!("the answer's WebRTC SDP: {e}")))?;
            self.gateway
                .answer_reoffer(&call.room, &r.answerer, sdp, None)
                .await?;
        } else {
            let sdp =
                parse_rtp(&a.sdp).map_err(|e| ApiError::bad(format!("the answer's SDP: {e}")))?;
            match self.gateway.update_rtp(&call.room, &r.answerer, sdp).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    return Err(ApiError::bad(
                        "the answering side had no offer of ours pending",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(c) = self.webrtc_mut(&a.call_id) {
            if let Some(r) = c.reoffer.as_mut() {
                r.answered = true;
            }
        }
        Ok(())
    }

    /// The caller's member, made once the callee answered with the codecs `ids` it took: a
    /// WebRTC leg answering a WebRTC caller's offer, else a telephony leg on the caller's
    /// interface (`caller_rtp`: its offer). Its id, its answer, and where its media port is.
    async fn join_caller(
        &mut self,
        call: &WebRtcCall,
        caller_rtp: RtpDescription,
        ids: &[CodecId],
        warnings: &mut Vec<String>,
    ) -> Result<(String, String, Option<SocketAddr>), ApiError> {
        if call.caller_webrtc {
            // A WebRTC caller: a WebRTC leg answers its offer, with the callee's codecs.
            let mut offer = parse_offer(&call.caller_sdp)
                .map_err(|e| ApiError::bad(format!("the offer's WebRTC SDP: {e}")))?;
            for m in &mut offer.media {
                m.codecs.retain(|c| {
                    CodecId::of(c).is_some_and(|id| caller_keeps(id, ids, &call.caller_transcodes))
                });
            }
            let j = self
                .gateway
                .join(&call.room, offer, JoinKind::Join, Who::default())
                .await?;
            return Ok((j.id, j.answer, None));
        }
        let mut offer = caller_rtp;
        for s in &mut offer.sections {
            s.codecs.retain(|c| {
                CodecId::of(c).is_some_and(|id| caller_keeps(id, ids, &call.caller_transcodes))
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
        // The caller's interface: `direction`'s first entry, else of the caller's family.
        let ctx = self.ctx();
        let family = offer
            .sections
            .iter()
            .find_map(|s| s.address)
            .map(|ip| ip.is_ipv6());
        let on = ctx.on_interface(&call.caller_flags, 0, family, RtpLegOptions::default());
        let options = ctx.pinned(&call.room, Side::A, on);
        let bound = self.bound_ip(&options);
        let j = self
            .gateway
            .join_rtp_with(&call.room, offer, options, Who::default())
            .await?;
        let caller_at = j.ports.first().map(|p| SocketAddr::new(bound, *p));
        Ok((j.id, j.answer, caller_at))
    }

    /// `answer`: the callee's member takes its answer; the caller's member is made, with the
    /// codecs the callee took. After a new offer in the answered call, the other side's answer
    /// to it.
    pub(super) async fn webrtc_answer(&mut self, a: OfferAnswer) -> Result<Bencode, ApiError> {
        let Some(Call::WebRtc(call)) = self.calls.get(&a.call_id).cloned() else {
            return Err(ApiError::not_found(format!(
                "unknown call-id {:?}",
                a.call_id
            )));
        };
        if let Some(r) = call.reoffer.as_ref().filter(|r| r.from_tag == a.from_tag) {
            if !r.answered {
                self.answer_reoffer(&call, r, &a).await?;
            }
            return Ok(sdp_reply(&r.answer, &a.flags.ignored));
        }
        if call.from_tag != a.from_tag {
            return Err(ApiError::bad(format!(
                "from-tag {:?} is not this call's caller",
                a.from_tag
            )));
        }
        if let Some((_, sdp)) = &call.caller {
            // Answered already (a retransmission under a new cookie): the same reply.
            return Ok(sdp_reply(sdp, &[]));
        }
        let taken = if call.callee_webrtc {
            let callee = parse_offer(&a.sdp)
                .map_err(|e| ApiError::bad(format!("the answer's WebRTC SDP: {e}")))?;
            self.gateway
                .answer_webrtc(&call.room, &call.callee_id, callee)
                .await
        } else {
            let callee =
                parse_rtp(&a.sdp).map_err(|e| ApiError::bad(format!("the answer's SDP: {e}")))?;
            self.gateway
                .answer_rtp(&call.room, &call.callee_id, callee)
                .await
        }?;
        let ids: Vec<CodecId> = taken.iter().map(|(id, _)| *id).collect();
        let mut warnings = a.flags.ignored.clone();
        let caller_rtp = parse_rtp(&call.caller_sdp)
            .map_err(|e| ApiError::bad(format!("the offer's SDP: {e}")))?;
        let (id, sdp, caller_at) = self
            .join_caller(&call, caller_rtp, &ids, &mut warnings)
            .await?;
        if let Some(c) = self.webrtc_mut(&a.call_id) {
            c.to_tag = a.to_tag.clone();
            c.caller = Some((id, sdp.clone()));
            c.rtp[1] = caller_at;
        }
        Ok(sdp_reply(&sdp, &warnings))
    }
}
