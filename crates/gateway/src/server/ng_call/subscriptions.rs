//! rtpengine's media subscriptions in a call of plain-RTP and SDES-SRTP sides (`publish`,
//! `subscribe request`, `subscribe answer`, `unsubscribe`).
//!
//! `publish` makes a side that sends without an offer/answer: its `sendonly` SDP is answered
//! by us, `recvonly`, with one codec per section (the first the `accept` list prefers, else the
//! first the gateway knows, else with `accept: any` the first; its telephone-events are taken
//! too, unnamed, as rtpengine takes them), and its media goes to the subscribers of its tag.
//! A call holds two sides: the first publisher is side A, a second
//! one side B.
//!
//! A subscriber is a participant of its own that
//! receives a copy of what chosen sides send, with one member per section it hears, in that
//! section's room, made a listener of the member that receives that side's media
//! ([`Gateway::listen_to`]): it hears that side alone, and what it sends goes nowhere.
//!
//! Our offer to it mirrors each chosen side's last SDP: the sections we relay, with the codecs
//! that side's member negotiated, on that side's transport (or the one `transport-protocol`
//! names), `sendonly`, the sides in the order the request named them. Its answer is taken by
//! each member in turn; as rtpengine does, an answer must take every codec offered unless
//! `allow transcoding` is in its flags (then the room transcodes what it can).

use super::*;

/// A subscription: its tag and its members.
#[derive(Debug, Clone)]
pub(super) struct Subscription {
    tag: String,
    parts: Vec<Part>,
    /// Whether its answer was taken.
    answered: bool,
}

/// A subscription as `query` reports it.
#[derive(Debug, Clone)]
pub(crate) struct SubscriptionView {
    /// Its tag.
    pub tag: String,
    /// Whether its answer was taken (media flows to it).
    pub answered: bool,
    /// The tags it hears.
    pub hears: Vec<String>,
    /// Its members: (room, id), one per section it hears.
    pub members: Vec<(String, String)>,
}

/// One section a subscription hears.
#[derive(Debug, Clone)]
struct Part {
    /// The call's section.
    section: usize,
    /// The side it hears.
    hears: Side,
    /// Its member in the section's room.
    member: Member,
    /// The codecs our offer listed.
    offered: Vec<Codec>,
}

impl SectionCall {
    /// `subscribe request`: subscription `tag` (one of the same tag ends first) to what `sides`
    /// send, in that order; our offer to the subscriber.
    pub async fn subscribe(
        &mut self,
        ctx: &Ctx<'_>,
        sides: &[Side],
        tag: &str,
        flags: &Flags,
    ) -> Result<String, ApiError> {
        self.unsubscribe(ctx, tag).await;
        let (name, asked) = wanted(flags, 1);
        let iface = ctx
            .interfaces
            .get(choose(ctx.interfaces, name, asked))
            .cloned();
        let mut offer = SdpDoc {
            session: Vec::new(),
            media: Vec::new(),
        };
        let (mut outs, mut parts) = (Vec::new(), Vec::new());
        for &side in sides {
            let made = self
                .subscribe_side(ctx, side, flags, iface.as_ref(), &mut offer)
                .await;
            match made {
                Ok(made) => {
                    for (out, part) in made {
                        outs.push(out);
                        parts.push(part);
                    }
                }
                Err(e) => {
                    leave_parts(ctx, &self.sections, parts).await;
                    return Err(e);
                }
            }
        }
        if parts.is_empty() {
            return Err(ApiError::bad(
                "the participants chosen have no media section the gateway relays",
            ));
        }
        self.subscriptions.push(Subscription {
            tag: tag.to_owned(),
            parts,
            answered: false,
        });
        Ok(reply_sdp(ctx, &offer, iface.as_ref(), flags, &outs))
    }

    /// The members hearing `side`: one per section of its last SDP that the call relays,
    /// each with what our offer writes for it; its sections added to `offer` (its session
    /// lines too, when `offer` has none yet).
    async fn subscribe_side(
        &self,
        ctx: &Ctx<'_>,
        side: Side,
        flags: &Flags,
        iface: Option<&Interface>,
        offer: &mut SdpDoc,
    ) -> Result<Vec<(SectionOut, Part)>, ApiError> {
        let doc = self.sent[side.index()]
            .as_ref()
            .ok_or_else(|| ApiError::bad(format!("side {side:?} of the call has sent no SDP")))?;
        let mut made = Vec::new();
        for (i, m) in doc.media.iter().enumerate() {
            let Some((room, publisher)) = self.sections.get(i).and_then(|s| {
                let member = match side {
                    Side::A => s.a.as_ref(),
                    Side::B => s.b.as_ref(),
                };
                member.map(|x| (s.room.clone(), x.clone()))
            }) else {
                continue;
            };
            let towards = transport_towards(m, flags);
            if !relayable(m, &towards) {
                continue;
            }
            let r = self
                .listener(ctx, (doc, m), &towards, flags, iface, (&room, &publisher))
                .await;
            match r {
                Ok((out, member, offered)) => {
                    made.push((
                        out,
                        Part {
                            section: i,
                            hears: side,
                            member,
                            offered,
                        },
                    ));
                    if offer.session.is_empty() {
                        offer.session.clone_from(&doc.session);
                    }
                    offer.media.push(m.clone());
                }
                Err(e) => {
                    let parts = made.into_iter().map(|(_, p)| p).collect();
                    leave_parts(ctx, &self.sections, parts).await;
                    return Err(e);
                }
            }
        }
        Ok(made)
    }

    /// A member of `room` hearing `publisher` (the member facing the side whose SDP section
    /// `m` is), offered on `towards`: what our offer writes for it, the member, and the codecs
    /// it offered (those `publisher` negotiated, as the codec flags change them).
    async fn listener(
        &self,
        ctx: &Ctx<'_>,
        (doc, m): (&SdpDoc, &Media),
        towards: &Transport,
        flags: &Flags,
        iface: Option<&Interface>,
        (room, publisher): (&str, &Member),
    ) -> Result<(SectionOut, Member, Vec<Codec>), ApiError> {
        let parsed = rtp_section(doc, m).codecs;
        let negotiated: Vec<Codec> = parsed
            .iter()
            .filter(|c| publisher.local.formats.contains(&c.pt.to_string()))
            .cloned()
            .collect();
        let codecs = if negotiated.is_empty() {
            parsed
        } else {
            negotiated
        };
        let empty = Default::default();
        let audio = m.media.eq_ignore_ascii_case("audio");
        let p = plan(&codecs, if audio { &flags.codec } else { &empty });
        let ice = match flags.ice {
            Some(Ice::Force) => IceMode::Force,
            _ => IceMode::Off,
        };
        let (spec, options) = offer_leg(ctx, m, towards, &p, flags, (iface, ice))?;
        let j = ctx
            .gateway
            .offer_rtp_with(room, spec.clone(), options, Who::default())
            .await?;
        if !ctx.gateway.listen_to(room, &j.id, &publisher.id).await {
            ctx.gateway.leave(room, &j.id).await;
            return Err(ApiError::internal(
                "the participant subscribed to left its room",
            ));
        }
        let local = match local_of(&j.answer) {
            Ok(l) => l,
            Err(e) => {
                ctx.gateway.leave(room, &j.id).await;
                return Err(e);
            }
        };
        let outs = codec_outs(m, &codecs, &p.towards_callee);
        let out = offered_out(&local, &spec, outs, Some(Direction::SendOnly));
        let offered = p.towards_callee.into_iter().map(|(_, c)| c).collect();
        let member = Member {
            id: j.id,
            local,
            endpoint: None,
        };
        Ok((out, member, offered))
    }

    /// `subscribe answer`: subscription `tag`'s answer, taken by its members in order (one
    /// whose section the answer rejects leaves). Once: a later answer is refused (a new
    /// `subscribe request` of the tag makes it again).
    pub async fn subscribe_answer(
        &mut self,
        ctx: &Ctx<'_>,
        tag: &str,
        sdp: &str,
        flags: &Flags,
    ) -> Result<(), ApiError> {
        let k = self
            .subscriptions
            .iter()
            .position(|s| s.tag == tag)
            .ok_or_else(|| ApiError::not_found(format!("no subscription {tag:?} in this call")))?;
        if self.subscriptions[k].answered {
            return Err(ApiError::bad(format!(
                "subscription {tag:?} was answered already (a subscribe request with its to-tag \
                 makes it again)"
            )));
        }
        let doc =
            SdpDoc::parse(sdp).map_err(|e| ApiError::bad(format!("the answer's SDP: {e}")))?;
        let parts = &self.subscriptions[k].parts;
        if doc.media.len() != parts.len() {
            return Err(ApiError::bad(format!(
                "the answer has {} media sections, our offer {}",
                doc.media.len(),
                parts.len()
            )));
        }
        let transcoding = flags.has("allow transcoding");
        for (part, m) in parts.iter().zip(&doc.media) {
            if m.port != 0 {
                takes_codecs(&part.offered, &rtp_section(&doc, m).codecs, transcoding)?;
            }
        }
        let mut sub = self.subscriptions.remove(k);
        for (i, part) in sub.parts.iter_mut().enumerate() {
            let (Some(s), Some(m)) = (self.sections.get(part.section), doc.media.get(i)) else {
                continue;
            };
            if m.port == 0 {
                continue;
            }
            let room = &s.room;
            let taken = ctx
                .gateway
                .answer_rtp(room, &part.member.id, description_of(&doc, m))
                .await;
            if let Err(e) = taken {
                // Half taken, it would hear some sections and not others: it ends.
                leave_parts(ctx, &self.sections, sub.parts).await;
                return Err(ApiError::bad(format!(
                    "the subscriber's answer: {e} (subscription {tag:?} ended)"
                )));
            }
            part.member.endpoint = endpoint_of(&doc, i);
        }
        // The sections the answer rejected are not heard; with none heard it ends.
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut sub.parts)
            .into_iter()
            .zip(&doc.media)
            .partition(|(_, m)| m.port != 0);
        let gone = gone.into_iter().map(|(p, _)| p).collect();
        leave_parts(ctx, &self.sections, gone).await;
        sub.parts = kept.into_iter().map(|(p, _)| p).collect();
        sub.answered = true;
        if !sub.parts.is_empty() {
            self.subscriptions.push(sub);
        }
        Ok(())
    }

    /// `unsubscribe`: subscription `tag` ends, its members leave; `false` if there is none.
    pub async fn unsubscribe(&mut self, ctx: &Ctx<'_>, tag: &str) -> bool {
        let Some(k) = self.subscriptions.iter().position(|s| s.tag == tag) else {
            return false;
        };
        let gone = self.subscriptions.remove(k);
        leave_parts(ctx, &self.sections, gone.parts).await;
        true
    }

    /// The subscriptions' members hearing section `section` leave (all of them with `None`:
    /// the call ended); a subscription left with none ends.
    pub(crate) async fn drop_listeners(&mut self, ctx: &Ctx<'_>, section: Option<usize>) {
        let mut gone = Vec::new();
        for s in &mut self.subscriptions {
            let (out, keep) = std::mem::take(&mut s.parts)
                .into_iter()
                .partition(|p| section.is_none_or(|i| p.section == i));
            s.parts = keep;
            gone.extend::<Vec<Part>>(out);
        }
        self.subscriptions.retain(|s| !s.parts.is_empty());
        leave_parts(ctx, &self.sections, gone).await;
    }

    /// Its subscriptions as `query` reports them.
    pub fn subscriptions(&self) -> Vec<SubscriptionView> {
        let tag_of = |side: Side| match side {
            Side::A => Some(self.from_tag.clone()),
            Side::B => self.to_tag.clone(),
        };
        let view = |s: &Subscription| {
            let mut hears: Vec<String> = Vec::new();
            for t in s.parts.iter().filter_map(|p| tag_of(p.hears)) {
                if !hears.contains(&t) {
                    hears.push(t);
                }
            }
            SubscriptionView {
                tag: s.tag.clone(),
                answered: s.answered,
                hears,
                members: s
                    .parts
                    .iter()
                    .filter_map(|p| {
                        let room = &self.sections.get(p.section)?.room;
                        Some((room.clone(), p.member.id.clone()))
                    })
                    .collect(),
            }
        };
        self.subscriptions.iter().map(view).collect()
    }
}

impl SectionCall {
    /// `publish` by `tag` (a side of its own: A, or B once A is taken; the same tag again
    /// publishes anew): our `recvonly` answer.
    pub async fn publish(
        &mut self,
        ctx: &Ctx<'_>,
        tag: &str,
        sdp: &str,
        flags: &Flags,
    ) -> Result<String, ApiError> {
        let doc = SdpDoc::parse(sdp).map_err(|e| ApiError::bad(format!("the SDP: {e}")))?;
        let side = match self.side_of(tag) {
            Some(side) => side,
            None if self.to_tag.is_none() && self.pending.is_none() => {
                self.to_tag = Some(tag.to_owned());
                Side::B
            }
            None => {
                return Err(ApiError::bad(
                    "this call has two participants already (publish in a call of its own)",
                ))
            }
        };
        let (name, asked) = wanted(flags, 0);
        let iface = ctx
            .interfaces
            .get(choose(ctx.interfaces, name, asked.or(family_of(&doc))))
            .cloned();
        let mut outs = Vec::new();
        for i in 0..doc.media.len() {
            if let Some(s) = self.sections.get_mut(i) {
                if let Some(gone) = s.facing(side).take() {
                    ctx.gateway.leave(&s.room, &gone.id).await;
                }
            }
            let out = self.publish_section(ctx, side, &doc, i, flags, iface.as_ref());
            outs.push(out.await?);
        }
        self.sent[side.index()] = Some(doc.clone());
        self.last_signal = std::time::SystemTime::now();
        Ok(reply_sdp(ctx, &doc, iface.as_ref(), flags, &outs))
    }

    /// Section `i` of a publisher's SDP: its member (facing `side`, answering it with one
    /// codec), and what our answer writes for it.
    async fn publish_section(
        &mut self,
        ctx: &Ctx<'_>,
        side: Side,
        doc: &SdpDoc,
        i: usize,
        flags: &Flags,
        iface: Option<&Interface>,
    ) -> Result<SectionOut, ApiError> {
        let m = &doc.media[i];
        let transport = Transport::parse(&m.proto);
        if !relayable(m, &transport) {
            return Ok(SectionOut::Rejected);
        }
        let mut desc = description_of(doc, m);
        let codecs = &mut desc.sections[0].codecs;
        let Some(one) = published_codec(codecs, &flags.codec.accept) else {
            return Ok(SectionOut::Rejected);
        };
        // Its telephone-events and comfort noise at that rate are taken too (and passed on to
        // its subscribers, as rtpengine passes them), though our answer names the one codec.
        codecs.retain(|c| c.pt == one.pt || (is_event_like(c) && c.clock_rate == one.clock_rate));
        let options = RtpLegOptions {
            passthrough: true,
            kind: media_kind(m),
            sdes_suites: Some(answer_suites(ctx, m, first_suite(m), flags)),
            bind: iface.map(|i| i.local),
            announce: iface.map(|i| i.advertised),
            ice: ice_towards(flags, doc, m, true),
            dtls: rtp_section(doc, m)
                .keyed_by_dtls()
                .then(|| dtls_choice(flags)),
            ..RtpLegOptions::default()
        };
        let room = self.section(i).room.clone();
        let j = ctx
            .gateway
            .join_rtp_with(&room, desc, options, Who::default())
            .await?;
        let local = local_of(&j.answer)?;
        *self.section(i).facing(side) = Some(Member {
            id: j.id,
            local: local.clone(),
            endpoint: endpoint_of(doc, i),
        });
        let pt = one.pt.to_string();
        let answered = answer_codecs(m, m, &local.formats, true);
        let Some(one_codec) = answered.into_iter().find(|c| c.pt == pt) else {
            return Err(ApiError::internal(
                "the publisher's leg did not take its codec",
            ));
        };
        Ok(SectionOut::Relayed(Box::new(Relayed {
            port: local.port,
            rtcp_port: Some(if local.rtcp_mux {
                local.port
            } else {
                local.port.wrapping_add(1)
            }),
            proto: local.proto.clone(),
            codecs: Some(vec![one_codec]),
            direction: Some(Direction::RecvOnly),
            rtcp_mux: local.rtcp_mux,
            crypto: local.crypto,
            dtls: local.dtls,
            ptime: ptime_of(m),
            ice: local.ice,
            mid: None,
        })))
    }
}

/// The one codec a published section is answered with: the first of `accept` (names, in
/// preference) it offers, else the first it offers that the gateway knows, else with `any`
/// in `accept` its first; telephone-events and comfort noise never.
fn published_codec(offered: &[Codec], accept: &[String]) -> Option<Codec> {
    let media: Vec<&Codec> = offered.iter().filter(|c| !is_event_like(c)).collect();
    let named = accept.iter().find_map(|name| {
        let name = name.split('/').next().unwrap_or_default();
        media.iter().find(|c| c.name.eq_ignore_ascii_case(name))
    });
    let known = || media.iter().find(|c| CodecId::of(c).is_some());
    let any = || media.first().filter(|_| accept.iter().any(|a| a == "any"));
    named.or_else(known).or_else(any).map(|c| (*c).clone())
}

/// Whether an answer's `answered` codecs take those our offer listed: every one (the events
/// aside), or with `transcoding` allowed one at least.
fn takes_codecs(offered: &[Codec], answered: &[Codec], transcoding: bool) -> Result<(), ApiError> {
    let taken = |c: &Codec| answered.iter().any(|a| a.is(&c.name, c.clock_rate));
    let media: Vec<&Codec> = offered.iter().filter(|c| !is_event_like(c)).collect();
    let missing: Vec<String> = media
        .iter()
        .filter(|c| !taken(c))
        .map(|c| format!("{}/{}", c.name, c.clock_rate))
        .collect();
    match (
        missing.is_empty(),
        transcoding && missing.len() < media.len(),
    ) {
        (true, _) | (false, true) => Ok(()),
        (false, false) => Err(ApiError::bad(format!(
            "the subscriber's answer does not take {} (offered; `allow transcoding` lets an \
             answer take fewer)",
            missing.join(", ")
        ))),
    }
}

/// The members of `parts` leave their sections' rooms.
async fn leave_parts(ctx: &Ctx<'_>, sections: &[Section], parts: Vec<Part>) {
    for p in parts {
        if let Some(s) = sections.get(p.section) {
            ctx.gateway.leave(&s.room, &p.member.id).await;
        }
    }
}
