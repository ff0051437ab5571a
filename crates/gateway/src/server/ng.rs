//! The ng control socket (`secrelay serve --ng ADDR`): rtpengine's protocol for SIP proxies
//! (Kamailio's and OpenSIPS's `rtpengine` modules), over UDP.
//!
//! A call between telephony sides (plain RTP, SDES-SRTP) is kept as rtpengine keeps one, media
//! section by media section ([`super::ng_call`]): every format passes through as it came
//! unless the flags ask for transcoding, and each reply is the request's own SDP rewritten as
//! rtpengine rewrites it ([`super::ng_sdp`]), so a proxy that swaps rtpengine for secrelay
//! keeps the SDP its phones saw. A call with a WebRTC side (DTLS-SRTP) is one room of two
//! members ([`super::ng_webrtc`]).
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

use base64::Engine as _;
use secrelay_srtp::Profile;
use secrelay_wire::bencode::{ng_decode, ng_encode, Bencode};
use secrelay_wire::ng::{
    error_reply, parse, reply, GateRequest, Ice, OfferAnswer, PlayDtmfRequest, RecordingAction,
    Request, SubscribeRequest,
};
use secrelay_wire::sdp_doc::SdpDoc;
use secrelay_wire::sdp_rtp::Transport;

use super::call_state::{CallState, Held, Pins, Step, MAX_STEPS};
use super::cluster::{Cluster, HandoverError, Placement};
use super::interfaces::Interface;
use super::ng_call::{Ctx, SectionCall, Side};
use super::ng_gate::CallGates;
use super::ng_stats;
use super::ng_webrtc::WebRtcCall;
use super::{ApiError, Gateway};
use crate::leg::{LegMarks, Resume};
use secrelay_core::shard::ControlError;

/// Why an offer has nothing for the callee.
pub(super) const NO_CODEC: &str =
    "the offer has no codec the gateway relays or transcodes (opus, PCMU, PCMA, G722)";

/// How long a reply is kept for retransmissions of its request.
const REPLY_CACHE_FOR: Duration = Duration::from_secs(30);
/// How often the SRTP marks of the calls kept for a standby are read: a mark moves every 2^14
/// packets of a stream, so even a 1,000 packet/s stream is written well within its quarter.
const MARKS_EVERY: Duration = Duration::from_secs(1);
/// How long a call taken over is tried again while it cannot be made (a virtual address that
/// keepalived has not moved here yet).
const TAKEOVER_RETRY: Duration = Duration::from_secs(30);
/// Most replies kept.
const REPLY_CACHE_MAX: usize = 16_384;

/// A call: between telephony sides, section by section; or with a WebRTC side.
#[derive(Debug, Clone)]
pub(super) enum Call {
    Sections(Box<SectionCall>),
    WebRtc(Box<WebRtcCall>),
}

impl Call {
    fn created(&self) -> Instant {
        match self {
            Call::Sections(c) => c.created,
            Call::WebRtc(c) => c.created,
        }
    }

    fn tags(&self) -> (String, Option<String>) {
        match self {
            Call::Sections(c) => (c.from_tag.clone(), c.to_tag.clone()),
            Call::WebRtc(c) => (c.from_tag.clone(), c.to_tag.clone()),
        }
    }

    /// The members, with their rooms and the tag of the side each faces.
    pub(super) fn members(&self) -> Vec<(String, String, Option<String>)> {
        match self {
            Call::Sections(c) => c
                .members()
                .into_iter()
                .map(|(room, id, side)| {
                    let tag = match side {
                        Side::A => Some(c.from_tag.clone()),
                        Side::B => c.to_tag.clone(),
                    };
                    (room, id, tag)
                })
                .collect(),
            Call::WebRtc(c) => {
                let mut v = vec![(c.room.clone(), c.callee_id.clone(), c.to_tag.clone())];
                if let Some((id, _)) = &c.caller {
                    v.push((c.room.clone(), id.clone(), Some(c.from_tag.clone())));
                }
                v
            }
        }
    }

    /// Its members as a recording writes their packets: (room, id, the address the packets
    /// come from, the gateway's address they come to). A telephony section's side comes from
    /// the address its SDP gives; a WebRTC call's members, whose peers' addresses ICE chose,
    /// are written from the gateway's own address (port 0), to the port each is bound to
    /// (`shared_port` for a WebRTC member).
    fn recorded_members(
        &self,
        ours: std::net::IpAddr,
        shared_port: u16,
    ) -> Vec<(String, String, SocketAddr, SocketAddr)> {
        let unknown = SocketAddr::from((ours, 0));
        match self {
            Call::Sections(c) => c
                .report_sections()
                .into_iter()
                .flat_map(|s| [s.a, s.b])
                .flatten()
                .map(|m| {
                    let from = m.endpoint.unwrap_or(unknown);
                    (m.room, m.id, from, (ours, m.local_port).into())
                })
                .collect(),
            Call::WebRtc(c) => {
                let port = |k: usize| c.rtp[k].map_or(shared_port, |a| a.port());
                let mut v = vec![(
                    c.room.clone(),
                    c.callee_id.clone(),
                    unknown,
                    (ours, port(0)).into(),
                )];
                if let Some((id, _)) = &c.caller {
                    v.push((c.room.clone(), id.clone(), unknown, (ours, port(1)).into()));
                }
                v
            }
        }
    }
}

/// A random mark of 12 hex digits for `loop-protect`, or a subscription's tag.
fn loop_mark() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The configuration's `ng_allow` (checked when the configuration was).
fn gateway_allow(gateway: &Gateway) -> Vec<ipnet::IpNet> {
    gateway.config().ng_allowed().unwrap_or_default()
}

/// The ng server's state.
pub(crate) struct Ng {
    pub(super) gateway: Arc<Gateway>,
    pub(super) calls: HashMap<String, Call>,
    replies: HashMap<(SocketAddr, Vec<u8>), (Vec<u8>, Instant)>,
    reply_order: VecDeque<((SocketAddr, Vec<u8>), Instant)>,
    pub(super) sdes_suites: Vec<Profile>,
    /// `ng_allow`: the sources taken; empty: any.
    allow: Vec<ipnet::IpNet>,
    /// The `a=rtpengine:` mark `loop-protect` writes, to know our own SDP coming back.
    loop_mark: String,
    /// The cluster this gateway is a node of: commands for a call another node owns go there.
    cluster: Option<Arc<Cluster>>,
    /// Per telephony call kept for a standby, the requests that shaped it.
    steps: HashMap<String, Vec<Step>>,
    /// Calls taken over that could not be made yet, and until when they are tried again.
    takeovers_waiting: Vec<(CallState, Instant)>,
    /// The marks (SRTP streams, ICE) of the kept calls' members, by member id, as last read.
    marks: HashMap<String, LegMarks>,
    /// While a call taken over from another node is made again: where its members are bound,
    /// and that node's media interfaces.
    replaying: Option<(Pins, Vec<Interface>)>,
    /// The calls' `block …`/`silence …` settings ([`super::ng_gate`]), for calls that had one.
    gates: HashMap<String, CallGates>,
    /// The calls being recorded (or paused), by call-id.
    recordings: HashMap<String, CallRecording>,
}

/// A call's recording ([`super::recording`]).
#[derive(Debug, Clone)]
struct CallRecording {
    /// Its key at the recorder.
    key: u64,
    /// Each member's key, by (room, member id).
    members: HashMap<(String, String), u64>,
    /// Recording now (else paused).
    on: bool,
}

impl Ng {
    pub fn new(gateway: Arc<Gateway>, sdes_suites: Vec<Profile>) -> Ng {
        Ng {
            calls: HashMap::new(),
            replies: HashMap::new(),
            reply_order: VecDeque::new(),
            sdes_suites,
            allow: gateway_allow(&gateway),
            loop_mark: loop_mark(),
            gateway,
            cluster: None,
            steps: HashMap::new(),
            marks: HashMap::new(),
            takeovers_waiting: Vec::new(),
            replaying: None,
            gates: HashMap::new(),
            recordings: HashMap::new(),
        }
    }

    /// The same, as a node of `cluster`: a command for a call another node owns is forwarded
    /// to that node's ng socket and its answer relayed; a new call is placed through the
    /// directory.
    pub fn with_cluster(mut self, cluster: Option<Arc<Cluster>>) -> Ng {
        self.cluster = cluster;
        self
    }

    /// Where a command goes when another node owns its call: that node's ng socket, or why it
    /// cannot go there. `None`: answered here (no cluster, a call of ours, a new call placed
    /// here, a command about no call, or the directory does not answer).
    async fn owner_elsewhere(&self, req: &Request) -> Option<Result<SocketAddr, ForwardError>> {
        let cluster = self.cluster.as_ref()?;
        let call = req.call_id()?;
        if self.calls.contains_key(call) {
            return None;
        }
        let room = format!("call:{call}");
        let placed = match req {
            Request::Offer(_) => cluster.place(&room).await,
            _ => cluster.owner(&room).await,
        };
        match placed {
            Placement::Here => None,
            Placement::Elsewhere { ng: Some(at), .. } => Some(Ok(at)),
            Placement::Elsewhere { node, .. } => {
                Some(Err(ForwardError::NoSocket(call.to_owned(), node)))
            }
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
        let mut takeovers = self.cluster.as_ref().and_then(|c| c.takeovers());
        let mut handovers = self.cluster.as_ref().and_then(|c| c.handover_requests());
        // Where the kept calls' SRTP streams stand is read this often, and written when it moved.
        let mut marks = tokio::time::interval(MARKS_EVERY);
        marks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let taken = async {
                match takeovers.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            let handover = async {
                match handovers.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(states) = taken => self.take_over(states).await,
                Some((to, reply)) = handover => {
                    let r = self.hand_over(&to).await;
                    let _ = reply.send(r);
                }
                _ = marks.tick(), if !self.steps.is_empty() || !self.takeovers_waiting.is_empty() => {
                    self.retry_takeovers().await;
                    self.refresh_marks().await;
                }
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
            Ok(req) => match self.owner_elsewhere(&req).await {
                Some(Ok(at)) => match forward(msg, at).await {
                    // The owner's reply, cookie and all, as it wrote it.
                    Ok(out) => {
                        self.remember(key, out.clone());
                        return out;
                    }
                    Err(why) => {
                        stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                        error_reply(&ApiError::from(why).reason())
                    }
                },
                Some(Err(why)) => {
                    stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                    error_reply(&ApiError::from(why).reason())
                }
                None => {
                    let kept = self.kept_change(&req);
                    let r = self.request(req).await;
                    if let Some((call_id, shaping)) = kept {
                        let step = shaping.then_some(&r).and_then(|r| r.as_ref().ok());
                        self.keep(&call_id, step.map(|reply| (&body, reply)));
                    }
                    match r {
                        Ok(r) => r,
                        Err(why) => {
                            stats.ng_errors.fetch_add(1, Ordering::Relaxed);
                            error_reply(&why.reason())
                        }
                    }
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
        let mut gone = Vec::new();
        for (id, call) in &self.calls {
            let members = call.members();
            let mut alive = members.is_empty();
            for (room, member, _) in &members {
                let rooms = self.gateway.rooms(Some(room)).await;
                if rooms
                    .iter()
                    .any(|r| r.participants.iter().any(|p| p.id == *member))
                {
                    alive = true;
                    break;
                }
            }
            if !alive {
                gone.push(id.clone());
            }
        }
        for id in gone {
            // Its sides ended on their own; its subscribers end with it.
            if let Some(Call::Sections(mut c)) = self.calls.remove(&id) {
                c.drop_listeners(&self.ctx(), None).await;
            }
            self.gates.remove(&id);
            self.end_recording(&id);
            self.keep(&id, None);
        }
        self.gateway
            .stats()
            .ng_calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
    }

    /// For a request that may change a call kept for a standby: its call-id, and whether it
    /// shapes the call (an offer or an answer, kept to be replayed; a `delete` only ends it).
    fn kept_change(&self, req: &Request) -> Option<(String, bool)> {
        if !self.cluster.as_ref().is_some_and(|c| c.keeps_calls()) {
            return None;
        }
        match req {
            Request::Offer(o) | Request::Answer(o) => Some((o.call_id.clone(), true)),
            // Replayed too: a standby's members stop what this node's stopped, and its
            // recording goes on (in a file of the standby's).
            Request::Gate(g) => Some((g.call_id.clone(), true)),
            Request::Recording { call_id, .. } => Some((call_id.clone(), true)),
            Request::Delete { call_id, .. } => Some((call_id.clone(), false)),
            _ => None,
        }
    }

    /// Writes call `call_id`'s state for a standby as it is now, after `step` (the request as
    /// it came and our reply) when one shaped it; a call that is gone, or that is not kept
    /// (a WebRTC call, one renegotiated past [`MAX_STEPS`]), is forgotten.
    fn keep(&mut self, call_id: &str, step: Option<(&Bencode, &Bencode)>) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        let (created_at, members) = match self.calls.get(call_id) {
            Some(Call::Sections(call)) => (call.created_at, call.held(&self.marks)),
            Some(Call::WebRtc(call)) => (
                std::time::SystemTime::now() - call.created.elapsed(),
                call.held(&self.marks, self.gateway.udp_addr().ip()),
            ),
            None => {
                // Gone: forgotten, if it was kept (an offer that made no call never was: no
                // write for it).
                if self.steps.remove(call_id).is_some() {
                    cluster.keep_call(call_id, None);
                }
                return;
            }
        };
        let steps = self.steps.entry(call_id.to_owned()).or_default();
        if let Some((request, reply)) = step {
            let mut message = Vec::new();
            request.encode(&mut message);
            let message = base64::engine::general_purpose::STANDARD.encode(message);
            let reply = reply
                .get("sdp")
                .and_then(Bencode::as_text)
                .unwrap_or_default();
            // A request sent again changes nothing, and is not replayed twice.
            if steps.last().is_none_or(|s| s.message != message) {
                steps.push(Step { message, reply });
            }
        }
        if steps.len() > MAX_STEPS {
            tracing::warn!(
                call_id,
                steps = steps.len(),
                "call renegotiated too often to be kept for a standby"
            );
            self.steps.remove(call_id);
            cluster.keep_call(call_id, None);
            return;
        }
        let state = CallState {
            call_id: call_id.to_owned(),
            created_at_ms: created_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            interfaces: self.gateway.interfaces().to_vec(),
            steps: steps.clone(),
            members,
        };
        cluster.keep_call(call_id, Some(&state));
    }

    /// Reads where the kept calls' SRTP streams stand, and writes each call whose marks moved.
    async fn refresh_marks(&mut self) {
        // The kept calls' members: (call-id, room, member id).
        let members: Vec<(String, String, String)> = self
            .steps
            .keys()
            .filter_map(|id| Some((id, self.calls.get(id)?)))
            .flat_map(|(id, c)| {
                c.members()
                    .into_iter()
                    .map(move |(room, m, _)| (id.clone(), room, m))
            })
            .collect();
        let ids = members.iter().map(|(_, _, m)| m.clone()).collect();
        let now = self.gateway.leg_marks(ids).await;
        let mut moved: Vec<&str> = Vec::new();
        for (call, room, m) in &members {
            let (was, is) = (self.marks.get(m), now.get(m));
            if was != is && moved.last() != Some(&call.as_str()) {
                moved.push(call);
            }
            if is.is_some_and(|k| k.webrtc.is_some()) && was.is_none_or(|k| k.webrtc.is_none()) {
                // A connected WebRTC member of a kept call: a clean stop leaves its browser's
                // DTLS association for the node that takes the call.
                self.gateway.keep_quiet(room, m).await;
            }
        }
        let moved: Vec<String> = moved.into_iter().map(str::to_owned).collect();
        self.marks = now;
        for id in moved {
            self.keep(&id, None);
        }
    }

    /// Hands every telephony call kept here to node `to` (`POST /api/cluster/handover`): each
    /// ended here first, its ports given back, then its state handed over for `to` to take at
    /// its next renewal. How many went.
    async fn hand_over(&mut self, to: &str) -> Result<usize, HandoverError> {
        let cluster = self.cluster.clone().ok_or(HandoverError::KeepsNoCalls)?;
        cluster.check_receiver(to).await?;
        let ids: Vec<String> = self.steps.keys().cloned().collect();
        for id in &ids {
            self.steps.remove(id);
            if let Some(c) = self.calls.remove(id) {
                self.drop_call(c).await;
            }
        }
        self.gateway
            .stats()
            .ng_calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
        cluster.hand_over(to, &ids).await
    }

    /// Makes again the calls taken over from a node that died (see [`super::call_state`]); a
    /// call that cannot be made yet (its address not moved here yet, say) is tried again every
    /// second for [`TAKEOVER_RETRY`], then counted, logged and dropped.
    async fn take_over(&mut self, states: Vec<CallState>) {
        let until = Instant::now() + TAKEOVER_RETRY;
        for state in states {
            self.take_one(state, until).await;
        }
        // The members made again are new ones: their marks (SRTP, ICE) are read now and
        // written with their calls, so that a state handed on at once is whole.
        self.refresh_marks().await;
    }

    /// The calls taken over that could not be made yet, tried again.
    async fn retry_takeovers(&mut self) {
        for (state, until) in std::mem::take(&mut self.takeovers_waiting) {
            self.take_one(state, until).await;
        }
    }

    async fn take_one(&mut self, state: CallState, until: Instant) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        let call_id = state.call_id.clone();
        let r = self.replay(&state).await;
        self.replaying = None;
        match r {
            Ok(()) => {
                cluster.calls_taken_over.fetch_add(1, Ordering::Relaxed);
                self.steps.insert(call_id.clone(), state.steps.clone());
                self.keep(&call_id, None);
            }
            Err(why) => {
                if let Some(c) = self.calls.remove(&call_id) {
                    self.drop_call(c).await;
                }
                // Another certificate here than the browser's or phone's DTLS association
                // knows: no retry makes it one.
                let other_certificate = matches!(
                    why,
                    ApiError::Join(
                        crate::shard::JoinError::WebRtc(crate::leg::WebRtcError::OtherCertificate)
                            | crate::shard::JoinError::Rtp(
                                crate::leg::RtpLegError::OtherCertificate
                            )
                    )
                );
                if Instant::now() < until && !other_certificate {
                    tracing::debug!(call_id, error = %why, "a call taken over cannot be made yet: tried again");
                    self.takeovers_waiting.push((state, until));
                } else {
                    cluster.takeover_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(call_id, error = %why, "a call taken over could not be made again");
                    cluster.keep_call(&call_id, None);
                }
            }
        }
        self.gateway
            .stats()
            .ng_calls
            .store(self.calls.len() as u64, Ordering::Relaxed);
    }

    /// Ends call `c`'s members here, without a word to their peers (its state is another
    /// node's to make again), and gives their ports back.
    async fn drop_call(&self, c: Call) {
        match c {
            Call::Sections(mut c) => c.drop_members(&self.ctx()).await,
            Call::WebRtc(c) => {
                for (room, id, _) in Call::WebRtc(c).members() {
                    self.gateway.hand_off(&room, &id).await;
                }
            }
        }
    }

    /// Makes call `state` again: its requests replayed with its members pinned to their
    /// addresses and the other node's interfaces, then its keys given back to its legs.
    async fn replay(&mut self, state: &CallState) -> Result<(), ApiError> {
        if self.calls.contains_key(&state.call_id) {
            return Err(ApiError::internal("a call of that call-id is here already"));
        }
        self.replaying = Some((state.pins(), state.interfaces.clone()));
        let (mut offer_reply, mut answer_reply) = (None, None);
        for step in &state.steps {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(&step.message)
                .map_err(|e| ApiError::internal(format!("a kept request: {e}")))?;
            let body = Bencode::decode(&raw)
                .map_err(|e| ApiError::internal(format!("a kept request: {e}")))?;
            let req =
                parse(&body).map_err(|e| ApiError::internal(format!("a kept request: {e}")))?;
            let (offer, answer) = (
                matches!(req, Request::Offer(_)),
                matches!(req, Request::Answer(_)),
            );
            let recording = matches!(req, Request::Recording { .. });
            match self.request(req).await {
                // A node that does not record (no recording_dir) takes the call anyway.
                Err(e) if recording => tracing::warn!(
                    call_id = state.call_id,
                    error = %e.reason(),
                    "a call taken over is not recorded here"
                ),
                r => {
                    r?;
                }
            }
            if answer {
                answer_reply = Some(step.reply.as_str());
            } else if offer {
                offer_reply = Some(step.reply.as_str());
            }
            if let Some(c) = self.webrtc_mut(&state.call_id) {
                c.restore_reply(answer, &step.reply);
            }
        }
        let call = match self.calls.get_mut(&state.call_id) {
            Some(Call::Sections(call)) => call,
            Some(Call::WebRtc(call)) => {
                let call = call.clone();
                return self.resume_webrtc(&call, state).await;
            }
            None => return Err(ApiError::internal("its requests made no call")),
        };
        call.created_at = std::time::UNIX_EPOCH + Duration::from_millis(state.created_at_ms);
        let rekey = call.restore(&state.members, offer_reply, answer_reply);
        for (room, id, held) in rekey {
            self.restore_keys(&room, &id, &held).await?;
        }
        Ok(())
    }

    /// Telephony member `id` of `room`, made again, takes the keys of ours its phone holds and
    /// its SRTP streams' marks, as `held` kept them.
    async fn restore_keys(&self, room: &str, id: &str, held: &Held) -> Result<(), ApiError> {
        let kept = Resume {
            crypto: held
                .crypto
                .iter()
                .cloned()
                .map(zeroize::Zeroizing::new)
                .collect(),
            srtp: held.srtp.clone(),
            ice: None,
            dtls: held.dtls.clone(),
        };
        self.gateway.restore_rtp(room, id, kept).await?;
        Ok(())
    }

    /// After WebRTC call `call` was made again from its requests: each WebRTC member takes
    /// the keys, streams, session and SSRCs of the leg it replaces (its browser restarts ICE
    /// towards this node through its signaling and goes on with its DTLS association), each
    /// SDES member the keys its phone holds.
    async fn resume_webrtc(&self, call: &WebRtcCall, state: &CallState) -> Result<(), ApiError> {
        let pins = state.pins();
        for (id, side) in call.member_sides() {
            if let Some((marks, srtp)) = pins.webrtc(&call.room, side) {
                self.gateway
                    .resume_webrtc(&call.room, &id, marks, srtp)
                    .await?;
                self.gateway.keep_quiet(&call.room, &id).await;
            } else if let Some(h) = state
                .members
                .iter()
                .find(|h| h.side == side && (!h.crypto.is_empty() || h.dtls.is_some()))
            {
                self.restore_keys(&call.room, &id, h).await?;
            }
        }
        Ok(())
    }

    async fn request(&mut self, req: Request) -> Result<Bencode, ApiError> {
        match req {
            Request::Ping => Ok(reply(vec![("result", Bencode::str("pong"))])),
            Request::Offer(o) => {
                let (call_id, record) = (o.call_id.clone(), o.flags.record_call);
                let r = self.offer(o).await?;
                self.made_members(&call_id, record).await?;
                Ok(r)
            }
            Request::Answer(a) => {
                let (call_id, record) = (a.call_id.clone(), a.flags.record_call);
                let r = self.answer(a).await?;
                self.made_members(&call_id, record).await?;
                Ok(r)
            }
            Request::Recording { call_id, action } => self.recording(&call_id, action).await,
            Request::Gate(g) => self.gate(g).await,
            Request::PlayDtmf(p) => self.play_dtmf(p).await,
            Request::PlayMedia(p) => self.play_media(p).await,
            Request::StopMedia { call_id, from_tag } => {
                self.stop_media(&call_id, from_tag.as_deref()).await
            }
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
            Request::Statistics => Ok(self.statistics()),
            Request::Publish(p) => self.publish(p).await,
            Request::SubscribeRequest(r) => self.subscribe_request(r).await,
            Request::SubscribeAnswer {
                call_id,
                to_tag,
                sdp,
                flags,
            } => {
                let mut call = self.take_section_call(&call_id)?;
                let r = call
                    .subscribe_answer(&self.ctx(), &to_tag, &sdp, &flags)
                    .await;
                self.calls.insert(call_id, Call::Sections(call));
                r.map(|()| reply(vec![("result", Bencode::str("ok"))]))
            }
            Request::Unsubscribe { call_id, to_tag } => {
                let mut call = self.take_section_call(&call_id)?;
                let found = call.unsubscribe(&self.ctx(), &to_tag).await;
                self.calls.insert(call_id, Call::Sections(call));
                match found {
                    true => Ok(reply(vec![("result", Bencode::str("ok"))])),
                    false => Err(ApiError::not_found(format!(
                        "no subscription {to_tag:?} in this call"
                    ))),
                }
            }
            other => Err(ApiError::bad(format!("command not supported: {other:?}"))),
        }
    }

    fn statistics(&self) -> Bencode {
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
        reply(vec![
            ("result", Bencode::str("ok")),
            (
                "statistics",
                reply(vec![
                    ("currentstatistics", current),
                    ("totalstatistics", total),
                ]),
            ),
        ])
    }

    pub(super) fn ctx(&self) -> Ctx<'_> {
        Ctx {
            gateway: &self.gateway,
            interfaces: self
                .replaying
                .as_ref()
                .map_or(self.gateway.interfaces(), |(_, i)| i.as_slice()),
            loop_mark: &self.loop_mark,
            sdes_suites: &self.sdes_suites,
            pins: self.replaying.as_ref().map(|(p, _)| p),
        }
    }

    /// `offer`: a new call, or a new offer in one.
    async fn offer(&mut self, o: OfferAnswer) -> Result<Bencode, ApiError> {
        let mut call = match self.calls.remove(&o.call_id) {
            Some(Call::Sections(c)) => c,
            Some(webrtc @ Call::WebRtc(_)) => {
                self.calls.insert(o.call_id.clone(), webrtc);
                return self.webrtc_offer(o).await;
            }
            None if wants_webrtc(&o) => return self.webrtc_offer(o).await,
            None => {
                // A new call, refused while its worker sheds joins.
                self.gateway.admit(&format!("call:{}", o.call_id))?;
                Box::new(SectionCall::new(&o.call_id, &o.from_tag))
            }
        };
        let fresh = call.to_tag.is_none() && call.members().is_empty();
        let r = self.section_offer(&mut call, &o).await;
        if r.is_err() && fresh {
            call.drop_members(&self.ctx()).await;
        } else {
            self.calls.insert(o.call_id.clone(), Call::Sections(call));
        }
        r
    }

    async fn section_offer(
        &self,
        call: &mut SectionCall,
        o: &OfferAnswer,
    ) -> Result<Bencode, ApiError> {
        if self.looped(o) {
            // Our own SDP back (a proxy that routes the call through itself): passed on as it
            // came, as rtpengine passes it.
            return Ok(sdp_reply(&o.sdp, &[]));
        }
        let side = match call.side_of(&o.from_tag) {
            Some(s) => s,
            None if call.to_tag.is_none() => {
                return Err(ApiError::bad(format!(
                    "from-tag {:?}: this call's offer waits for its answer",
                    o.from_tag
                )))
            }
            None => {
                return Err(ApiError::bad(format!(
                    "from-tag {:?} is neither side of this call",
                    o.from_tag
                )))
            }
        };
        if let Some(sdp) = call.repeated(false, &o.from_tag, &o.sdp, &o.flags) {
            return Ok(sdp_reply(&sdp, &[]));
        }
        let sdp = call
            .offer(&self.ctx(), side, &o.from_tag, &o.sdp, &o.flags)
            .await?;
        let mut warnings = o.flags.ignored.clone();
        warnings.extend(call.warnings.iter().cloned());
        Ok(sdp_reply(&sdp, &warnings))
    }

    /// `answer`: the answer to the offer that waits.
    async fn answer(&mut self, a: OfferAnswer) -> Result<Bencode, ApiError> {
        let mut call = match self.calls.remove(&a.call_id) {
            Some(Call::Sections(c)) => c,
            Some(webrtc @ Call::WebRtc(_)) => {
                self.calls.insert(a.call_id.clone(), webrtc);
                return self.webrtc_answer(a).await;
            }
            None => {
                return Err(ApiError::not_found(format!(
                    "unknown call-id {:?}",
                    a.call_id
                )))
            }
        };
        let r = self.section_answer(&mut call, &a).await;
        self.calls.insert(a.call_id.clone(), Call::Sections(call));
        r
    }

    async fn section_answer(
        &self,
        call: &mut SectionCall,
        a: &OfferAnswer,
    ) -> Result<Bencode, ApiError> {
        if self.looped(a) {
            return Ok(sdp_reply(&a.sdp, &[]));
        }
        // The answer's from-tag is the offerer's (side A's for the first offer, either side's
        // for a new one); its to-tag is the answerer's.
        let answerer = a.to_tag.clone().unwrap_or_default();
        if call.side_of(&a.from_tag).is_none() {
            return Err(ApiError::bad(format!(
                "from-tag {:?} is neither side of this call",
                a.from_tag
            )));
        }
        if let Some(sdp) = call.repeated(true, &answerer, &a.sdp, &a.flags) {
            return Ok(sdp_reply(&sdp, &[]));
        }
        let sdp = call
            .answer(&self.ctx(), &answerer, &a.sdp, &a.flags)
            .await?;
        Ok(sdp_reply(&sdp, &a.flags.ignored))
    }

    /// Whether a `loop-protect` request carries our own mark: the SDP came from us.
    fn looped(&self, r: &OfferAnswer) -> bool {
        r.flags.has("loop-protect")
            && SdpDoc::parse(&r.sdp)
                .is_ok_and(|d| d.session_attribute("rtpengine") == Some(self.loop_mark.as_str()))
    }

    pub(super) fn webrtc_mut(&mut self, call_id: &str) -> Option<&mut WebRtcCall> {
        match self.calls.get_mut(call_id) {
            Some(Call::WebRtc(c)) => Some(c.as_mut()),
            _ => None,
        }
    }

    async fn delete(
        &mut self,
        call_id: &str,
        from_tag: Option<String>,
        to_tag: Option<String>,
    ) -> Result<Bencode, ApiError> {
        let call = self
            .calls
            .get(call_id)
            .ok_or_else(|| ApiError::not_found(format!("unknown call-id {call_id:?}")))?;
        let (from, to) = call.tags();
        let known = |t: &Option<String>| {
            t.as_ref()
                .is_none_or(|t| *t == from || Some(t) == to.as_ref())
        };
        if !known(&from_tag) && !known(&to_tag) {
            return Err(ApiError::not_found("no such tag in this call"));
        }
        let call = self.calls.remove(call_id).expect("the call was just found");
        self.gates.remove(call_id);
        self.end_recording(call_id);
        // The figures as they stand when the call ends: what a CDR script reads.
        let mut entries = vec![("result", Bencode::str("ok"))];
        match &call {
            Call::Sections(c) => entries.extend(self.section_report(c, true).await),
            Call::WebRtc(c) => {
                entries.push((
                    "created",
                    Bencode::Int(c.created.elapsed().as_secs() as i64),
                ));
                for (room, id, _) in call.members() {
                    self.gateway.leave(&room, &id).await;
                }
            }
        }
        Ok(reply(entries))
    }

    /// Call `call_id`, one of telephony sides (subscriptions are to those), taken out of the
    /// calls for a request to change it; the caller puts it back.
    fn take_section_call(&mut self, call_id: &str) -> Result<Box<SectionCall>, ApiError> {
        match self.calls.remove(call_id) {
            Some(Call::Sections(c)) => Ok(c),
            Some(webrtc) => {
                self.calls.insert(call_id.to_owned(), webrtc);
                Err(ApiError::bad(
                    "subscriptions to a call with a WebRTC side are not supported",
                ))
            }
            None => Err(ApiError::not_found(format!("unknown call-id {call_id:?}"))),
        }
    }

    /// `query`'s `subscriptions`: per subscription's tag, the tags it hears, whether it was
    /// answered, how many media sections it hears, and the packets and bytes sent to it.
    async fn subscriptions_report(&self, c: &SectionCall) -> Bencode {
        let mut out = Vec::new();
        for s in c.subscriptions() {
            let (mut packets, mut bytes) = (0, 0);
            for (room, id) in &s.members {
                let rooms = self.gateway.rooms(Some(room)).await;
                let found = rooms
                    .iter()
                    .flat_map(|r| &r.participants)
                    .find(|p| p.id == *id);
                if let Some(p) = found {
                    (packets, bytes) = (packets + p.packets_out, bytes + p.bytes_out);
                }
            }
            let hears = s.hears.iter().map(|t| Bencode::str(t)).collect();
            let d = reply(vec![
                ("from-tags", Bencode::List(hears)),
                ("answered", Bencode::Int(i64::from(s.answered))),
                ("media-sections", Bencode::Int(s.members.len() as i64)),
                ("packets", Bencode::Int(packets as i64)),
                ("bytes", Bencode::Int(bytes as i64)),
            ]);
            out.push((s.tag.into_bytes(), d));
        }
        Bencode::Dict(out)
    }

    /// `publish`: a side that sends without an offer/answer, in a call of its own or as the
    /// second side of a published call; the reply is our `recvonly` answer.
    async fn publish(&mut self, p: OfferAnswer) -> Result<Bencode, ApiError> {
        let mut call = match self.calls.remove(&p.call_id) {
            Some(Call::Sections(c)) => c,
            Some(webrtc) => {
                self.calls.insert(p.call_id.clone(), webrtc);
                return Err(ApiError::bad(
                    "publishing into a call with a WebRTC side is not supported",
                ));
            }
            None => {
                self.gateway.admit(&format!("call:{}", p.call_id))?;
                Box::new(SectionCall::new(&p.call_id, &p.from_tag))
            }
        };
        let fresh = call.members().is_empty();
        let r = call
            .publish(&self.ctx(), &p.from_tag, &p.sdp, &p.flags)
            .await;
        if r.is_err() && fresh {
            call.drop_members(&self.ctx()).await;
        } else {
            self.calls.insert(p.call_id.clone(), Call::Sections(call));
        }
        r.map(|sdp| sdp_reply(&sdp, &p.flags.ignored))
    }

    /// `subscribe request`: a subscription to the chosen sides of a call (by `from-tag`,
    /// `from-tags` or `all`); the reply is our `sendonly` offer to the subscriber, with the
    /// tags it hears and its own.
    async fn subscribe_request(&mut self, r: SubscribeRequest) -> Result<Bencode, ApiError> {
        let mut call = self.take_section_call(&r.call_id)?;
        let made = self.subscribe_to(&mut call, &r).await;
        self.calls.insert(r.call_id.clone(), Call::Sections(call));
        made
    }

    /// [`Ng::subscribe_request`] in `call`, taken out of the calls meanwhile.
    async fn subscribe_to(
        &self,
        call: &mut SectionCall,
        r: &SubscribeRequest,
    ) -> Result<Bencode, ApiError> {
        let tags: Vec<String> = if r.all {
            [Some(call.from_tag.clone()), call.to_tag.clone()]
                .into_iter()
                .flatten()
                .collect()
        } else {
            r.from_tags.clone()
        };
        let sides = tags
            .iter()
            .map(|t| {
                call.side_of(t)
                    .ok_or_else(|| ApiError::not_found(format!("no tag {t:?} in this call")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let to_tag = r.to_tag.clone().unwrap_or_else(loop_mark);
        if call.side_of(&to_tag).is_some() {
            return Err(ApiError::bad(format!(
                "to-tag {to_tag:?} is a side of this call, not a subscription"
            )));
        }
        let sdp = call
            .subscribe(&self.ctx(), &sides, &to_tag, &r.flags)
            .await?;
        let mut entries = vec![
            ("result", Bencode::str("ok")),
            ("sdp", Bencode::str(&sdp)),
            ("to-tag", Bencode::str(&to_tag)),
            (
                "from-tags",
                Bencode::List(tags.iter().map(|t| Bencode::str(t)).collect()),
            ),
        ];
        let joined;
        if !r.flags.ignored.is_empty() {
            joined = format!("not acted on: {}", r.flags.ignored.join(", "));
            entries.push(("warning", Bencode::str(&joined)));
        }
        Ok(reply(entries))
    }

    /// `block media`, `silence media`, `block DTMF` and their `unblock`s: the call's settings
    /// changed ([`CallGates`]) and given to its members.
    async fn gate(&mut self, g: GateRequest) -> Result<Bencode, ApiError> {
        let call = self
            .calls
            .get(&g.call_id)
            .ok_or_else(|| ApiError::not_found(format!("unknown call-id {:?}", g.call_id)))?;
        let (from, to) = call.tags();
        let other = |t: &str| {
            if t == from {
                to.clone()
            } else if Some(t) == to.as_deref() {
                Some(from.clone())
            } else {
                None
            }
        };
        if let Some(tag) = &g.from_tag {
            let Some(far) = other(tag) else {
                return Err(ApiError::not_found(format!("no tag {tag:?} in this call")));
            };
            if g.to_tag.as_ref().is_some_and(|t| *t != far) {
                return Err(ApiError::not_found(
                    "the to-tag is not the from-tag's other side in this call",
                ));
            }
        }
        self.gates.entry(g.call_id.clone()).or_default().apply(&g);
        self.push_gates(&g.call_id).await;
        if self.gates.get(&g.call_id).is_some_and(CallGates::is_open) {
            self.gates.remove(&g.call_id);
        }
        Ok(reply(vec![("result", Bencode::str("ok"))]))
    }

    /// `play DTMF`: the digit queued at the members that take the chosen participant's packets
    /// (every participant's with `all`), to go to the other side as if the participant sent
    /// it. Err: no such call or tag, or no audio member of the participant could send it (the
    /// reason).
    async fn play_dtmf(&mut self, p: PlayDtmfRequest) -> Result<Bencode, ApiError> {
        let members = self.chosen_members(&p.call_id, p.from_tag.as_deref())?;
        let digit = secrelay_core::room::DtmfDigit {
            event: p.event,
            duration_ms: p.duration_ms,
            volume: p.volume,
            pause_ms: p.pause_ms,
        };
        let (mut played, mut refused) = (0, None);
        for (room, id) in members {
            match self.gateway.play_dtmf(&room, &id, digit).await {
                Some(Ok(())) => played += 1,
                Some(Err(why)) => refused = Some(why),
                None => return Err(ApiError::Control(ControlError::ShuttingDown)),
            }
        }
        match (played, refused) {
            (0, Some(why)) => Err(ApiError::Play(why)),
            _ => Ok(reply(vec![("result", Bencode::str("ok"))])),
        }
    }

    /// After an offer or answer (which may have made members): the call's settings given to
    /// its members, and its recording to them (begun first when the request said `record call`
    /// and the gateway records).
    async fn made_members(&mut self, call_id: &str, record: bool) -> Result<(), ApiError> {
        self.push_gates(call_id).await;
        if record && self.gateway.recorder().is_some() {
            self.recording(call_id, RecordingAction::Start).await?;
        } else if self.recordings.get(call_id).is_some_and(|r| r.on) {
            self.push_recording(call_id).await;
        }
        Ok(())
    }

    /// `start recording`, `stop recording`, `pause recording` ([`super::recording`]).
    async fn recording(
        &mut self,
        call_id: &str,
        action: RecordingAction,
    ) -> Result<Bencode, ApiError> {
        let Some(recorder) = self.gateway.recorder() else {
            return Err(ApiError::bad(
                "call recording needs recording_dir (secrelay serve --recording-dir DIR)",
            ));
        };
        let Some(call) = self.calls.get(call_id) else {
            return Err(ApiError::not_found(format!("unknown call-id {call_id:?}")));
        };
        let (from_tag, to_tag) = call.tags();
        match action {
            RecordingAction::Start => {
                if !self.recordings.contains_key(call_id) {
                    let key = recorder.key();
                    let about = serde_json::json!({
                        "call_id": call_id,
                        "from_tag": from_tag,
                        "to_tag": to_tag,
                        "started": std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0.0, |d| d.as_secs_f64()),
                    });
                    let file = recorder.open(key, call_id, about);
                    tracing::info!(call_id, file = %file.display(), "recording");
                    self.recordings.insert(
                        call_id.to_owned(),
                        CallRecording {
                            key,
                            members: HashMap::new(),
                            on: true,
                        },
                    );
                }
                if let Some(r) = self.recordings.get_mut(call_id) {
                    r.on = true;
                }
                self.push_recording(call_id).await;
            }
            RecordingAction::Pause | RecordingAction::Stop => {
                if let Some(r) = self.recordings.get_mut(call_id) {
                    r.on = false;
                    let members: Vec<(String, String)> = r.members.keys().cloned().collect();
                    for (room, id) in members {
                        self.gateway.set_recording(&room, &id, None).await;
                    }
                }
                if action == RecordingAction::Stop {
                    self.end_recording(call_id);
                }
            }
        }
        Ok(reply(vec![("result", Bencode::str("ok"))]))
    }

    /// Gives each member of recorded call `call_id` its key (a new member a new one, its
    /// addresses told to the recorder): what it sends is recorded from now on.
    async fn push_recording(&mut self, call_id: &str) {
        let (Some(recorder), Some(call), Some(rec)) = (
            self.gateway.recorder(),
            self.calls.get(call_id),
            self.recordings.get_mut(call_id),
        ) else {
            return;
        };
        let shared = self.gateway.udp_addr();
        let mut given = Vec::new();
        for (room, id, from, to) in call.recorded_members(shared.ip(), shared.port()) {
            let key = *rec
                .members
                .entry((room.clone(), id.clone()))
                .or_insert_with(|| {
                    let key = recorder.key();
                    recorder.stream(key, rec.key, from, to);
                    key
                });
            given.push((room, id, key));
        }
        for (room, id, key) in given {
            self.gateway.set_recording(&room, &id, Some(key)).await;
        }
    }

    /// Ends call `call_id`'s recording, if it has one: its file closed.
    fn end_recording(&mut self, call_id: &str) {
        if let (Some(r), Some(recorder)) =
            (self.recordings.remove(call_id), self.gateway.recorder())
        {
            recorder.close(r.key);
        }
    }

    /// Gives each member of call `call_id` what its settings stop of the participant it faces
    /// (after a change, and after an offer or answer that may have made members).
    async fn push_gates(&self, call_id: &str) {
        let (Some(gates), Some(call)) = (self.gates.get(call_id), self.calls.get(call_id)) else {
            return;
        };
        for (room, id, tag) in call.members() {
            self.gateway
                .set_gate(&room, &id, gates.of(tag.as_deref()))
                .await;
        }
    }

    /// A telephony call's figures in rtpengine's structure ([`ng_stats`]); with `end`, its
    /// members are ended as their figures are taken (one trip per section).
    async fn section_report(&self, c: &SectionCall, end: bool) -> Vec<(&'static str, Bencode)> {
        let sections = c.report_sections();
        let mut rooms: Vec<String> = sections
            .iter()
            .flat_map(|s| [&s.a, &s.b])
            .flatten()
            .map(|m| m.room.clone())
            .collect();
        rooms.dedup();
        let mut snapshots = HashMap::new();
        for room in rooms {
            let members = if end {
                self.gateway.end_room(&room).await
            } else {
                self.gateway
                    .rooms(Some(&room))
                    .await
                    .into_iter()
                    .flat_map(|r| r.participants)
                    .collect()
            };
            for p in members {
                snapshots.insert((room.clone(), p.id.clone()), p);
            }
        }
        ng_stats::report(
            &sections,
            &snapshots,
            (&c.from_tag, c.to_tag.as_deref()),
            (c.created_at, c.last_signal),
            self.gateway.udp_addr().ip(),
        )
    }

    async fn query(&mut self, call_id: &str) -> Result<Bencode, ApiError> {
        let call = self
            .calls
            .get(call_id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("unknown call-id {call_id:?}")))?;
        if let Call::Sections(c) = &call {
            let mut entries = vec![("result", Bencode::str("ok"))];
            entries.extend(self.section_report(c, false).await);
            entries.push(("subscriptions", self.subscriptions_report(c).await));
            return Ok(reply(entries));
        }
        let mut tags: Vec<(String, Bencode)> = Vec::new();
        for (room, id, tag) in call.members() {
            let rooms = self.gateway.rooms(Some(&room)).await;
            let Some(p) = rooms
                .first()
                .and_then(|r| r.participants.iter().find(|p| p.id == id))
            else {
                continue;
            };
            let d = reply(vec![
                ("leg", Bencode::str(p.leg)),
                ("state", Bencode::str(&p.state)),
                ("packets-in", Bencode::Int(p.packets_in as i64)),
                ("bytes-in", Bencode::Int(p.bytes_in as i64)),
                ("packets-out", Bencode::Int(p.packets_out as i64)),
                ("bytes-out", Bencode::Int(p.bytes_out as i64)),
                ("errors", Bencode::Int(p.drops.values().sum::<u64>() as i64)),
            ]);
            tags.push((tag.unwrap_or_else(|| "callee".into()), d));
        }
        Ok(reply(vec![
            ("result", Bencode::str("ok")),
            (
                "created",
                Bencode::Int(call.created().elapsed().as_secs() as i64),
            ),
            (
                "tags",
                Bencode::Dict(tags.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect()),
            ),
        ]))
    }
}

/// Whether an offer makes a call with a WebRTC side: the flags ask for DTLS-SRTP towards the
/// callee, or the caller offers it.
/// How long the node a command is forwarded to has to answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);

/// Forwards an ng datagram as it came to the ng socket at `to` (another node of the cluster,
/// which owns its call) and brings back its reply as it is.
async fn forward(msg: &[u8], to: SocketAddr) -> Result<Vec<u8>, ForwardError> {
    let any: SocketAddr = if to.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let fail = |e: std::io::Error| ForwardError::Io(to, e);
    let socket = tokio::net::UdpSocket::bind(any).await.map_err(fail)?;
    socket.connect(to).await.map_err(fail)?;
    socket.send(msg).await.map_err(fail)?;
    let mut buf = vec![0u8; 65_536];
    match tokio::time::timeout(FORWARD_TIMEOUT, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => {
            buf.truncate(n);
            Ok(buf)
        }
        Ok(Err(e)) => Err(fail(e)),
        Err(_) => Err(ForwardError::Timeout(to)),
    }
}

/// Why a command for a call another node owns was not forwarded to that node.
#[derive(Debug)]
pub enum ForwardError {
    /// The call's node has no ng socket for the cluster (`cluster_ng`): the call, the node.
    NoSocket(String, String),
    /// Sending to or reading from the node's socket failed.
    Io(SocketAddr, std::io::Error),
    /// The node did not answer within the deadline.
    Timeout(SocketAddr),
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::NoSocket(call, node) => write!(
                f,
                "call {call:?} is on node {node}, which has no ng socket for the cluster (cluster_ng)"
            ),
            ForwardError::Io(to, e) => write!(f, "forwarding to the call's node at {to}: {e}"),
            ForwardError::Timeout(to) => write!(
                f,
                "the call's node at {to} did not answer within {FORWARD_TIMEOUT:?}"
            ),
        }
    }
}

impl std::error::Error for ForwardError {}

/// Whether an offer makes a call with a WebRTC side (ICE and DTLS-SRTP on the shared port,
/// [`super::ng_webrtc`]): the offerer's SDP has a DTLS section with ICE credentials (a
/// browser), or the flags ask for a DTLS transport towards the callee without removing ICE.
/// DTLS-SRTP without ICE (a SIP phone's, RFC 5763) is a telephony leg's, on ports of its own.
fn wants_webrtc(o: &OfferAnswer) -> bool {
    let dtls_flag = o.flags.transport.as_ref().is_some_and(Transport::is_dtls);
    if dtls_flag && o.flags.ice != Some(Ice::Remove) {
        return true;
    }
    SdpDoc::parse(&o.sdp).is_ok_and(|d| {
        d.media.iter().any(|m| {
            m.port != 0
                && Transport::parse(&m.proto).is_dtls()
                && secrelay_wire::sdp_rtp::ice_credentials(&d, m).is_some()
        })
    })
}

pub(super) fn sdp_reply(sdp: &str, warnings: &[String]) -> Bencode {
    let mut e = vec![("result", Bencode::str("ok")), ("sdp", Bencode::str(sdp))];
    let joined;
    if !warnings.is_empty() {
        joined = format!("not acted on: {}", warnings.join(", "));
        e.push(("warning", Bencode::str(&joined)));
    }
    reply(e)
}
