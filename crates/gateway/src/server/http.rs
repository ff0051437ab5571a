//! HTTP signaling and operations (axum).
//!
//! | route | what |
//! |---|---|
//! | `POST /whip/{room}` | WHIP (RFC 9725): an `application/sdp` offer publishes into the room; 201, the answer, `Location`, `ETag` |
//! | `POST /whep/{room}` | WHEP: a recvonly offer subscribes to what the room publishes, now and later |
//! | `POST /rooms/{room}/join` | a conference participant: sends and receives |
//! | `POST /rooms/{room}/rtp` | a telephony leg: a plain RTP or SDES-SRTP offer, answered from a port pair of its own; `DELETE` its `Location` to leave |
//! | `POST /rooms/{room}/rtp/offer` | a telephony leg that offers (a B2BUA's outgoing call): our SDP offer (an optional JSON body says `transport`, `codecs`, `suites`, `rtcp_mux`); `PUT` the answer on its `Location` |
//! | `PUT /rooms/{room}/rtp/{id}` | `application/sdp`: the answer to our offer (204), or a new offer in the call (re-INVITE: new address, codecs, direction or keys; 200 with our answer) |
//! | `PATCH {Location}` | trickle ICE (204) or ICE restart (200 with our new credentials), `If-Match` required |
//! | `DELETE {Location}` | leave (close_notify) |
//! | `GET {Location}/room` | the room as the participant sees it: who is in it (by name), its own layers |
//! | `GET /rooms/{room}/ice-servers` | JSON: the TURN servers and a fresh credential (`iceServers` for `RTCPeerConnection`), needs the right to publish or to subscribe there; with no TURN configured, none |
//! | `GET /api/rooms`, `GET /api/rooms/{room}` | JSON: rooms and their participants |
//! | `PATCH /api/rooms/{room}` | the room's settings (mixing) |
//! | `DELETE /api/rooms/{room}/participants/{id}` | remove a participant |
//! | `PATCH /api/rooms/{room}/participants/{id}` | what of a participant's media its room passes on (block, silence) |
//! | `PUT /api/rooms/{room}/participants/{id}/layer` | the simulcast layer a participant is sent |
//! | `POST`, `DELETE /api/rooms/{room}/participants/{id}/media` | play a file from `media_dir` to a participant, stop it |
//! | `GET /metrics` | Prometheus (OpenMetrics text) |
//! | `POST /api/cluster/handover?to=NODE` | hand this node's telephony calls to another |
//! | `GET /healthz` | 200 while admitting, 503 while draining |
//!
//! Every route but `/`, `/room/{room}` and `/healthz` checks who asks ([`super::auth`]): WHIP
//! needs `publish` in the room, WHEP `subscribe`, joins and telephony legs both; a session's
//! own routes (`{Location}…`) its holder (the same identity, or in the simple mode the room's
//! token, or in an open room whoever holds its URL) or the room's admin, and only through the
//! path it was made on; `/api/…` an `admin` or `list` grant; `/metrics` the admin key (or its
//! own listener, `metrics`). Room names are checked the same way on every route.
//!
//! Errors are the status the standard names with a one-line `text/plain` reason, each kind of
//! refusal mapped once in [`super::error::ApiError`] (which the ng socket's `error-reason`
//! shares): 400 bad SDP, JSON or room name, 401 no usable credential, 403 a credential that
//! does not reach, 404 unknown room or resource, 409 an answer no offer of ours waits for, 412
//! stale `If-Match`, 413 oversized body, 415 wrong content type, 422 an offer with nothing we
//! can answer, 428 PATCH without `If-Match`, 429 too many unfinished offers from one source,
//! 503 full, overloaded or shutting down.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use secrelay_wire::sdp::parse_offer;
use secrelay_wire::sdp_rtp::{parse_rtp, Transport};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::auth::{Caller, Failure, Need, Policy};
use super::cluster::{Cluster, Placement};
use super::error::Refused;
use super::per_source::SourceKey;
use super::stats::{StateCollector, StatsCollector};
use super::{ApiError, Gateway, JoinKind, Lifecycle, Who};
use crate::ice_lite::Credentials;
use crate::leg::{CodecId, RtpOfferSpec};
use crate::transcode::MixSettings;

/// A resource made by a POST, as PATCH and DELETE find it.
#[derive(Debug, Clone)]
struct Resource {
    room: String,
    /// The POST that made it (its path family: a WHIP session is reached only under `/whip`).
    kind: JoinKind,
    /// The identity of the token it was made with; `None` without one.
    owner: Option<String>,
    /// Where its offer came from, for the unfinished offers each source may have.
    source: Option<SourceKey>,
    /// Its security is up (telephony legs at once; WebRTC once DTLS-SRTP is done).
    connected: bool,
    etag: String,
    remote_ufrag: String,
    /// When the session ended on its own (close_notify, consent, DTLS failure): a DELETE that
    /// follows (a client closes its peer connection, then deletes) still gets 200 for a while.
    ended: Option<std::time::Instant>,
}

/// The address a request came from (set by the listener).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub std::net::IpAddr);

/// The credentials in force, replaced whole on reload, and the refusals counted.
#[derive(Debug)]
pub(crate) struct Access {
    policy: std::sync::RwLock<Arc<Policy>>,
    /// Refusals by reason.
    pub stats: super::auth::AuthStats,
}

impl Access {
    pub(crate) fn new(policy: Policy) -> Access {
        Access {
            policy: std::sync::RwLock::new(Arc::new(policy)),
            stats: super::auth::AuthStats::default(),
        }
    }

    /// The policy now.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `policy` in force from the next request on.
    pub(crate) fn replace(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}

/// The most time between two sweeps of the resource table (and of the workers' list of ended
/// participants) when no request comes.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

type Resources = Arc<Mutex<HashMap<String, Resource>>>;

#[derive(Clone)]
struct AppState {
    gateway: Arc<Gateway>,
    resources: Resources,
    registry: Arc<Registry>,
    access: Arc<Access>,
    /// How long the resource of a session that ended on its own is kept for a DELETE
    /// (`ended_resource_grace_secs`).
    grace: std::time::Duration,
    /// The embedded TURN server, whose servers and credentials answers carry.
    turn: Option<Arc<super::turn::TurnService>>,
    /// The cluster this gateway is a node of (`cluster_redis`).
    cluster: Option<Arc<Cluster>>,
}

impl AppState {
    /// The resource table, first marking sessions that ended on their own (close_notify,
    /// consent expiry, DTLS failure) and forgetting those ended longer than the grace
    /// ago, so it never outgrows the live sessions by more than a minute's worth.
    fn resources(&self) -> std::sync::MutexGuard<'_, HashMap<String, Resource>> {
        let ended = self.gateway.take_ended();
        let now = std::time::Instant::now();
        let mut r = self.resources.lock().unwrap_or_else(|e| e.into_inner());
        for id in ended {
            if let Some(res) = r.get_mut(&id) {
                res.ended.get_or_insert(now);
            }
        }
        r.retain(|_, res| res.ended.is_none_or(|t| now.duration_since(t) < self.grace));
        r
    }
}

/// Resources in the table, live and ended (kept for a DELETE within the grace), as
/// `/metrics` gauges.
#[derive(Debug)]
struct ResourcesCollector(Resources);

impl prometheus_client::collector::Collector for ResourcesCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        let (mut live, mut ended) = (0i64, 0i64);
        for r in self.0.lock().unwrap_or_else(|e| e.into_inner()).values() {
            match r.ended {
                Some(_) => ended += 1,
                None => live += 1,
            }
        }
        let mut g = encoder.encode_descriptor(
            "secrelay_http_resources",
            "Resources (Location URLs) the HTTP side holds: live, or ended on their own and kept for a DELETE within ended_resource_grace_secs",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (state, n) in [("live", live), ("ended", ended)] {
            prometheus_client::metrics::gauge::ConstGauge::new(n)
                .encode(g.encode_family(&[("state", state)])?)?;
        }
        Ok(())
    }
}

/// The origins CORS allows (`cors_origins`): for the router's CORS layer, and for the answers
/// made before the router (a source's `429`), so that a browser on another origin can read
/// those too.
#[derive(Debug, Clone)]
pub(crate) enum CorsOrigins {
    /// `*`: any origin.
    Any,
    /// These origins (entries that are not valid header values are left out).
    List(Arc<[HeaderValue]>),
}

impl CorsOrigins {
    pub(crate) fn new(origins: &[String]) -> CorsOrigins {
        if origins.iter().any(|o| o == "*") {
            CorsOrigins::Any
        } else {
            CorsOrigins::List(
                origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok())
                    .collect(),
            )
        }
    }

    fn allow(&self) -> AllowOrigin {
        match self {
            CorsOrigins::Any => AllowOrigin::any(),
            CorsOrigins::List(l) => AllowOrigin::list(l.iter().cloned()),
        }
    }

    /// Adds to `headers` what the CORS layer would for a request from `origin`: the origin
    /// allowed (`*`, or the request's when listed; nothing for another), `Vary: origin` for a
    /// list, and `Retry-After` exposed to scripts.
    pub(crate) fn add_headers(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        let allowed = match self {
            CorsOrigins::Any => Some(HeaderValue::from_static("*")),
            CorsOrigins::List(l) => {
                headers.insert(header::VARY, HeaderValue::from_static("origin"));
                origin.filter(|o| l.contains(o)).cloned()
            }
        };
        if let Some(o) = allowed {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("retry-after"),
            );
        }
    }
}

/// Refusals by reason, webhooks by result, lifecycle events dropped, as `/metrics` families.
#[derive(Debug)]
struct AccessCollector {
    access: Arc<Access>,
    hooks: Arc<super::webhooks::HookStats>,
    gateway: Arc<Gateway>,
}

impl prometheus_client::collector::Collector for AccessCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        let mut family = |name: &str, help: &str, label: &str, values: &[(&str, u64)]| {
            let mut f = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (l, n) in values {
                ConstCounter::new(*n).encode(f.encode_family(&[(label, *l)])?)?;
            }
            Ok::<_, std::fmt::Error>(())
        };
        family(
            "secrelay_auth_failures",
            "Signaling requests refused for their credentials, by reason (401: missing, malformed, unknown_key, bad_signature, expired, not_yet_valid, wrong_token; 403: other_room, not_granted)",
            "reason",
            &self.access.stats.by_reason(),
        )?;
        let h = &self.hooks;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        family(
            "secrelay_webhooks",
            "Webhook events by result: sent (2xx), retried (attempts that failed and were tried again), failed (given up), dropped (a receiver's queue was full)",
            "result",
            &[
                ("sent", load(&h.sent)),
                ("retried", load(&h.retried)),
                ("failed", load(&h.failed)),
                ("dropped", load(&h.dropped)),
            ],
        )?;
        family(
            "secrelay_lifecycle_events_dropped",
            "Room and participant events the workers could not hand on: to the signaling (its queue, webhook_queue, was full), or recorded packets to the recording's writer (behind the calls it records)",
            "queue",
            &[
                ("signaling", self.gateway.lifecycle_dropped()),
                (
                    "recording",
                    self.gateway.recorder().map_or(0, |r| r.dropped()),
                ),
            ],
        )
    }
}

/// A task of the signaling runtime.
pub(crate) type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// What [`router`] gives the server: the routes, and the tasks to run beside them on the
/// signaling runtime.
pub(crate) struct Signaling {
    pub router: Router,
    /// The routes of the metrics listener (`metrics`): `/metrics` and `/healthz`, no
    /// credential.
    pub metrics: Router,
    /// Sweeps the resource table, follows the rooms' lifecycle (sessions connecting, webhooks)
    /// and posts the webhooks.
    pub tasks: Vec<Task>,
}

/// The task that follows the rooms' lifecycle: marks sessions connected and hands every event
/// to the webhooks.
fn follow_lifecycle(
    gateway: &Gateway,
    resources: Resources,
    hooks: super::webhooks::Hooks,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Lifecycle>(gateway.config().webhook_queue);
    gateway.watch_lifecycle(tx);
    async move {
        while let Some(l) = rx.recv().await {
            if let Lifecycle::Connected { id, .. } = &l {
                if let Some(r) = resources
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(id)
                {
                    r.connected = true;
                }
            }
            hooks.notify(&l);
        }
    }
}

/// The metrics the gateway exposes: its counters and state, the signaling's resources and
/// access decisions with the webhooks', and TURN's, the cluster's and the XDP filter's where
/// they run.
fn metrics_registry(
    gateway: &Arc<Gateway>,
    access: &Arc<Access>,
    hooks: Arc<super::webhooks::HookStats>,
    resources: &Resources,
    (turn, cluster): (
        &Option<Arc<super::turn::TurnService>>,
        &Option<Arc<Cluster>>,
    ),
) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatsCollector(gateway.stats().clone())));
    registry.register_collector(Box::new(StateCollector(gateway.clone())));
    registry.register_collector(Box::new(ResourcesCollector(resources.clone())));
    registry.register_collector(Box::new(AccessCollector {
        access: access.clone(),
        hooks,
        gateway: gateway.clone(),
    }));
    if let Some(t) = &turn {
        registry.register_collector(Box::new(super::turn::TurnCollector(t.clone())));
    }
    if let Some(c) = &cluster {
        registry.register_collector(Box::new(super::cluster::ClusterCollector(c.clone())));
    }
    if let Some(g) = gateway.xdp() {
        registry.register_collector(Box::new(super::xdp::XdpCollector(g.clone())));
    }
    registry
}

/// CORS for the configured origins: the methods and headers of the API and of WHIP/WHEP.
fn cors_layer(config: &super::ServeConfig) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(CorsOrigins::new(&config.cors_origins).allow())
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PATCH,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::IF_MATCH,
        ])
        .expose_headers([
            header::LOCATION,
            header::ETAG,
            header::LINK,
            header::RETRY_AFTER,
            HeaderName::from_static("accept-patch"),
        ])
}

/// Every route of the signaling: WHIP, WHEP and room joins with their sessions, events and
/// room views; telephony legs; the admin API; the pages; metrics and health.
fn routes() -> Router<AppState> {
    Router::new()
        .route("/whip/{room}", offer_route(JoinKind::Whip))
        .route("/whep/{room}", offer_route(JoinKind::Whep))
        .route("/rooms/{room}/join", offer_route(JoinKind::Join))
        .route("/whip/{room}/{id}", session_route(JoinKind::Whip))
        .route("/whep/{room}/{id}", session_route(JoinKind::Whep))
        .route(
            "/rooms/{room}/participants/{id}",
            session_route(JoinKind::Join),
        )
        .route("/whip/{room}/{id}/events", events_route(JoinKind::Whip))
        .route("/whep/{room}/{id}/events", events_route(JoinKind::Whep))
        .route(
            "/rooms/{room}/participants/{id}/events",
            events_route(JoinKind::Join),
        )
        .route("/whip/{room}/{id}/room", room_view_route(JoinKind::Whip))
        .route("/whep/{room}/{id}/room", room_view_route(JoinKind::Whep))
        .route(
            "/rooms/{room}/participants/{id}/room",
            room_view_route(JoinKind::Join),
        )
        .route("/rooms/{room}/ice-servers", get(ice_servers))
        .route("/rooms/{room}/rtp", post(rtp_offer))
        .route("/rooms/{room}/rtp/offer", post(rtp_make_offer))
        .route(
            "/rooms/{room}/rtp/{id}",
            delete(
                |State(s): State<AppState>,
                 Path((room, id)): Path<(String, String)>,
                 headers: HeaderMap| {
                    leave_resource(s, room, id, headers, JoinKind::Rtp)
                },
            )
            .put(rtp_update),
        )
        .route("/api/rooms", get(api_rooms))
        .route("/api/cluster", get(api_cluster))
        .route(
            "/api/cluster/drain",
            post(|s, h| drain_node(s, h, true)).delete(|s, h| drain_node(s, h, false)),
        )
        .route("/api/cluster/handover", post(hand_over))
        .route("/api/rooms/{room}", get(api_room).patch(api_room_settings))
        .route(
            "/api/rooms/{room}/participants/{id}",
            delete(api_remove).patch(api_participant),
        )
        .route("/api/rooms/{room}/data", post(api_send_data))
        .route(
            "/api/rooms/{room}/participants/{id}/layer",
            axum::routing::put(api_layer),
        )
        .route(
            "/api/rooms/{room}/participants/{id}/media",
            post(api_play_media).delete(api_stop_media),
        )
        .route("/", get(index_page))
        .route("/room/{room}", get(room_page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
}

/// The router for a gateway, and the tasks to run on the signaling runtime: one sweeps the
/// resource table (every few seconds it takes the workers' list of ended participants and
/// forgets resources past their grace, so that neither grows while no request comes); one
/// follows the rooms' lifecycle (marks sessions connected, hands events to the webhooks); one
/// per webhook receiver posts its events.
pub(crate) fn router(
    gateway: Arc<Gateway>,
    access: Arc<Access>,
    turn: Option<Arc<super::turn::TurnService>>,
    cluster: Option<Arc<Cluster>>,
) -> Result<Signaling, super::config::ConfigError> {
    let resources = Resources::default();
    let hook_stats = Arc::new(super::webhooks::HookStats::default());
    let (hooks, deliveries) = super::webhooks::start(gateway.config(), hook_stats.clone())?;
    let registry = metrics_registry(&gateway, &access, hook_stats, &resources, (&turn, &cluster));
    let lifecycle = follow_lifecycle(&gateway, resources.clone(), hooks);
    let cors = cors_layer(gateway.config());
    let limit = gateway.config().max_body_bytes;
    let body_timeout =
        std::time::Duration::from_secs_f64(gateway.config().http_request_timeout_secs);
    let grace = std::time::Duration::from_secs_f64(gateway.config().ended_resource_grace_secs);
    let state = AppState {
        gateway,
        resources,
        registry: Arc::new(registry),
        access,
        grace,
        turn,
        cluster,
    };
    let sweeper = {
        let state = state.clone();
        let every = SWEEP_EVERY
            .min(grace / 2)
            .max(std::time::Duration::from_millis(100));
        async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                drop(state.resources());
            }
        }
    };
    let router = routes()
        .layer(DefaultBodyLimit::max(limit))
        // The body and the answer within the timeout of the headers, however the body trickles
        // in (a slow POST: a deadline per chunk would let one byte per chunk hold the
        // connection for hours): 408 after it.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            body_timeout,
        ))
        .layer(cors)
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            count_refusal,
        ))
        .with_state(state.clone());
    let metrics = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move { metrics_text(&s) }),
        )
        .route("/healthz", get(healthz))
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            count_refusal,
        ))
        .with_state(state);
    let mut tasks: Vec<Task> = vec![Box::pin(sweeper), Box::pin(lifecycle)];
    tasks.extend(deliveries.into_iter().map(|d| Box::pin(d) as Task));
    Ok(Signaling {
        router,
        metrics,
        tasks,
    })
}

/// Counts a refusal ([`ApiError`]'s response) in `secrelay_http_refused_total`.
async fn count_refusal(State(s): State<AppState>, r: Response) -> Response {
    if r.extensions().get::<Refused>().is_some() {
        s.gateway
            .stats()
            .http_refused
            .fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Room names: 1–64 of `[A-Za-z0-9_.-]`, the same on every route and in the room page.
fn valid_room(room: &str) -> bool {
    (1..=64).contains(&room.len())
        && room
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The name of a call the ng socket made (`call:` and its SIP Call-ID: 1–256 printable ASCII
/// characters without spaces).
fn valid_call_room(room: &str) -> bool {
    room.strip_prefix(super::auth::CALL_ROOM_PREFIX)
        .is_some_and(|id| (1..=256).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()))
}

/// What a refused room name is told, everywhere.
const ROOM_NAME_RULE: &str = "a room name is 1-64 characters of A-Z a-z 0-9 - _ .";

/// 400 unless `room` is a room name (or, where `calls` says so, an ng call's).
fn room_name(room: &str, calls: bool) -> Result<(), ApiError> {
    if valid_room(room) || (calls && valid_call_room(room)) {
        Ok(())
    } else {
        Err(ApiError::bad(ROOM_NAME_RULE))
    }
}

impl AppState {
    /// Counts a refusal and answers it (401 with `WWW-Authenticate`, or 403).
    fn deny(&self, f: Failure) -> ApiError {
        self.access.stats.count(f);
        ApiError::Denied(f)
    }

    /// Who sent the request, its credential checked against `room` when it names one.
    fn caller(
        &self,
        headers: &HeaderMap,
        room: Option<&str>,
    ) -> Result<(Arc<Policy>, Caller), ApiError> {
        let policy = self.access.policy();
        let credential = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        match policy.identify(credential, room) {
            Ok(c) => Ok((policy, c)),
            Err(f) => Err(self.deny(f)),
        }
    }

    /// The caller, if it is `room`'s admin (the room's name checked first): the `/api/…`
    /// routes that act on a room or its participants.
    fn room_admin(&self, headers: &HeaderMap, room: &str) -> Result<Caller, ApiError> {
        room_name(room, true)?;
        self.allow(headers, room, Need::Admin)
    }

    /// The caller, if it may do `need` in `room`.
    fn allow(&self, headers: &HeaderMap, room: &str, need: Need<'_>) -> Result<Caller, ApiError> {
        let (policy, caller) = self.caller(headers, Some(room))?;
        policy
            .allow(&caller, room, need)
            .map_err(|f| self.deny(f))?;
        Ok(caller)
    }

    /// The session `id` of `room`, made by a POST of `kind`, if the caller may act on it: its
    /// holder or the room's admin. Whether the session exists is said only to a caller that
    /// reaches the room. Ended sessions (within their grace) only when `ended_too`.
    fn own_resource(
        &self,
        headers: &HeaderMap,
        kind: JoinKind,
        room: &str,
        id: &str,
        ended_too: bool,
    ) -> Result<Resource, ApiError> {
        room_name(room, false)?;
        let (policy, caller) = self.caller(headers, Some(room))?;
        policy.reach(&caller, room).map_err(|f| self.deny(f))?;
        let found = self
            .resources()
            .get(id)
            .filter(|r| r.room == room && r.kind == kind && (ended_too || r.ended.is_none()))
            .cloned();
        let Some(res) = found else {
            return Err(ApiError::not_found("no such session"));
        };
        policy
            .allow(&caller, room, Need::Own(res.owner.as_deref()))
            .map_err(|f| self.deny(f))?;
        Ok(res)
    }
}

fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

/// `DELETE`, `PATCH` and `PUT` on `{Location}` of a session made by a POST of `kind`.
fn session_route(kind: JoinKind) -> axum::routing::MethodRouter<AppState> {
    delete(
        move |State(s): State<AppState>,
              Path((room, id)): Path<(String, String)>,
              headers: HeaderMap| leave_resource(s, room, id, headers, kind),
    )
    .patch(
        move |State(s): State<AppState>,
              Path((room, id)): Path<(String, String)>,
              headers: HeaderMap,
              body: Bytes| patch_resource(s, room, id, headers, body, kind),
    )
    .put(
        move |State(s): State<AppState>,
              Path((room, id)): Path<(String, String)>,
              headers: HeaderMap,
              body: Bytes| reanswer_resource(s, room, id, headers, body, kind),
    )
}

/// `GET {Location}/events` of a session made by a POST of `kind`.
fn events_route(kind: JoinKind) -> axum::routing::MethodRouter<AppState> {
    get(
        move |State(s): State<AppState>,
              Path((room, id)): Path<(String, String)>,
              headers: HeaderMap| resource_events(s, room, id, headers, kind),
    )
}

/// `GET {Location}/room` of a session made by a POST of `kind`.
fn room_view_route(kind: JoinKind) -> axum::routing::MethodRouter<AppState> {
    get(
        move |State(s): State<AppState>,
              Path((room, id)): Path<(String, String)>,
              headers: HeaderMap| resource_room(s, room, id, headers, kind),
    )
}

/// `POST /whip/{room}`, `/whep/{room}`, `/rooms/{room}/join`: one handler per kind of leg.
fn offer_route(kind: JoinKind) -> axum::routing::MethodRouter<AppState> {
    post(
        move |State(s): State<AppState>,
              Path(room): Path<String>,
              client: Option<axum::Extension<ClientAddr>>,
              uri: axum::http::Uri,
              headers: HeaderMap,
              body: Bytes| {
            let source = client.map(|c| SourceKey::of(c.0 .0));
            let asked = Asked {
                host: request_host(&uri, &headers),
                uri,
            };
            offer(s, room, headers, source, body, kind, asked)
        },
    )
}

/// What a new session of `kind` needs in its room.
fn need_of(kind: JoinKind) -> Need<'static> {
    match kind {
        JoinKind::Whip => Need::Publish,
        JoinKind::Whep => Need::Subscribe,
        JoinKind::Join | JoinKind::Rtp => Need::Join,
    }
}

/// The path of a session of `kind`.
fn location(kind: JoinKind, room: &str, id: &str) -> String {
    match kind {
        JoinKind::Join => format!("/rooms/{room}/participants/{id}"),
        JoinKind::Whip => format!("/whip/{room}/{id}"),
        JoinKind::Whep => format!("/whep/{room}/{id}"),
        JoinKind::Rtp => format!("/rooms/{room}/rtp/{id}"),
    }
}

/// What an offer's request named besides its room: the host (for TURN URLs) and the URI (for
/// a redirect to the room's node).
struct Asked {
    host: Option<String>,
    uri: axum::http::Uri,
}

async fn offer(
    s: AppState,
    room: String,
    headers: HeaderMap,
    source: Option<SourceKey>,
    body: Bytes,
    kind: JoinKind,
    Asked { host, uri }: Asked,
) -> Response {
    let caller = match admit_to_room(&s, &room, &headers, need_of(kind)) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    // A room another node owns: its offers go there, unread here, except a viewer's when
    // both nodes have pipes (it is served here through them).
    let owner = placed(&s, &room).await;
    let piped = match &owner {
        Placement::Here => None,
        Placement::Elsewhere {
            node,
            url,
            pipe: Some(addr),
            ..
        } if kind == JoinKind::Whep && s.gateway.has_node_pipes() => Some((node, url, *addr)),
        Placement::Elsewhere { node, url, .. } => return redirect((node, url), &room, &uri),
    };
    let text = match sdp_body(&headers, &body, "the offer") {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let offer = match parse_offer(text) {
        Ok(o) => o,
        Err(e) => return ApiError::bad(format!("bad SDP offer: {e}")).into_response(),
    };
    // A viewer may be spread to another worker (`Gateway::join`) or served here for another
    // node's room.
    let spreads = kind == JoinKind::Whep;
    if let Err(e) = room_for_one_more(&s, &room, &caller, source, spreads) {
        return e.into_response();
    }
    let remote_ufrag = offer.ice_ufrag.clone();
    let joined = match piped {
        Some((node, url, addr)) => {
            // Not served here after all (no link, the room not there yet): sent to its node.
            let to_owner = || redirect((node, url), &room, &uri);
            match s
                .gateway
                .join_remote(&room, (node, addr), offer, who(&caller))
                .await
            {
                Ok(Some(j)) => Ok(j),
                Ok(None) => return to_owner(),
                Err(e) => Err(e),
            }
        }
        None => {
            if let Some(to) = spread_to(&s, &room, kind, spreads).await {
                return redirect((&to.0, &to.1), &room, &uri);
            }
            s.gateway.join(&room, offer, kind, who(&caller)).await
        }
    };
    match joined {
        Ok(j) => {
            let etag = format!("\"{}\"", j.ice.ufrag);
            let location = location(kind, &room, &j.id);
            s.resources().insert(
                j.id.clone(),
                Resource {
                    room,
                    kind,
                    owner: caller.identity().map(str::to_owned),
                    source,
                    connected: false,
                    etag: etag.clone(),
                    remote_ufrag,
                    ended: None,
                },
            );
            let mut r = (StatusCode::CREATED, j.answer).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/sdp"),
            );
            if let Ok(v) = HeaderValue::from_str(&location) {
                h.insert(header::LOCATION, v);
            }
            if let Ok(v) = HeaderValue::from_str(&etag) {
                h.insert(header::ETAG, v);
            }
            h.insert(
                HeaderName::from_static("accept-patch"),
                HeaderValue::from_static("application/trickle-ice-sdpfrag"),
            );
            // The TURN servers and a credential for this participant (RFC 9725 §4.6).
            if let Some(t) = &s.turn {
                for link in t.ice_servers(host.as_deref(), &j.id).links() {
                    if let Ok(v) = HeaderValue::from_str(&link) {
                        h.append(header::LINK, v);
                    }
                }
            }
            r
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The host a request named: its URI's authority (HTTP/2), else its `Host`.
fn request_host(uri: &axum::http::Uri, headers: &HeaderMap) -> Option<String> {
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| headers.get(header::HOST)?.to_str().ok().map(str::to_owned))?;
    super::turn::request_host(&authority)
}

/// `GET /rooms/{room}/ice-servers`: the TURN servers and a fresh credential for the caller, as
/// `RTCPeerConnection` takes them (none without TURN).
async fn ice_servers(
    State(s): State<AppState>,
    Path(room): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let caller = match admit_to_room(&s, &room, &headers, Need::Media) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let body = match &s.turn {
        Some(t) => t
            .ice_servers(
                request_host(&uri, &headers).as_deref(),
                &super::turn::identity(caller.identity()),
            )
            .json(),
        None => serde_json::json!({ "iceServers": [] }),
    };
    ([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

/// Who a caller joins as: named by its token, anonymous without a credential.
fn who(caller: &Caller) -> Who {
    Who {
        name: caller.identity().map(str::to_owned),
        anonymous: !caller.authenticated(),
    }
}

/// A new session in `room`: the name is valid and the caller may do `need` there.
fn admit_to_room(
    s: &AppState,
    room: &str,
    headers: &HeaderMap,
    need: Need<'_>,
) -> Result<Caller, ApiError> {
    room_name(room, false)?;
    s.allow(headers, room, need)
}

/// The body as SDP text (`what`: how the refusal names it): `application/sdp`, UTF-8.
fn sdp_body<'b>(headers: &HeaderMap, body: &'b Bytes, what: &str) -> Result<&'b str, ApiError> {
    if !content_type_is(headers, "application/sdp") {
        return Err(ApiError::UnsupportedMediaType(
            format!("{what} must be sent as Content-Type: application/sdp").into(),
        ));
    }
    std::str::from_utf8(body).map_err(|_| ApiError::bad(format!("{what} is not UTF-8")))
}

/// Whether the gateway takes one more participant from `caller` (at `source`) in `room`: an
/// anonymous caller's source has fewer than `max_pending_offers_per_source` anonymous sessions
/// not connected yet (else 429; callers with a credential are accountable for theirs), the
/// gateway is under `max_participants` (an anonymous caller under the share not kept for
/// callers with a credential), and the room's worker is not shedding joins (else 503 with
/// `Retry-After`; a viewer that `spreads` to another worker is taken while any worker takes
/// joins: [`super::Gateway::admit_join`]). The room's own limit is the shard's to check,
/// exactly.
fn room_for_one_more(
    s: &AppState,
    room: &str,
    caller: &Caller,
    source: Option<SourceKey>,
    spreads: bool,
) -> Result<(), ApiError> {
    let config = s.gateway.config();
    let anonymous = !caller.authenticated();
    let (live, pending) = {
        let r = s.resources();
        let live = r.values().filter(|r| r.ended.is_none());
        live.fold((0u64, 0usize), |(n, p), r| {
            let mine = anonymous
                && source.is_some()
                && r.source == source
                && r.owner.is_none()
                && !r.connected;
            (n + 1, p + usize::from(mine))
        })
    };
    if anonymous && pending >= config.max_pending_offers_per_source {
        return Err(ApiError::TooManyPending { pending });
    }
    // The gauge (workers publish it a few times a second) or the sessions made here, whichever
    // is higher: a burst of offers between two publications is counted too.
    let alive = s.gateway.stats().participants().max(live);
    let limits = super::RoomLimits {
        members: config.max_participants,
        reserved_for_authenticated: config.reserved_for_authenticated,
        settings: config.max_room_settings,
    };
    let who = who(caller);
    let cap = limits.cap_for(&who) as u64;
    if alive >= cap {
        let kept = if who.anonymous && cap < limits.members as u64 {
            "; the rest is kept for participants with a token"
        } else {
            ""
        };
        return Err(ApiError::Busy(format!(
            "the gateway is full ({alive} participants{kept})"
        )));
    }
    s.gateway.admit_join(room, spreads)
}

/// `POST /rooms/{room}/rtp`: a telephony leg (plain RTP or SDES-SRTP) from an SDP offer.
async fn rtp_offer(
    State(s): State<AppState>,
    Path(room): Path<String>,
    client: Option<axum::Extension<ClientAddr>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match admit_to_room(&s, &room, &headers, Need::Join) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if let Some(r) = to_owner(&s, &room, &uri).await {
        return r;
    }
    let source = client.map(|c| SourceKey::of(c.0 .0));
    let text = match sdp_body(&headers, &body, "the offer") {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let offer = match parse_rtp(text) {
        Ok(o) => o,
        Err(e) => return ApiError::bad(format!("bad SDP offer: {e}")).into_response(),
    };
    if let Err(e) = room_for_one_more(&s, &room, &caller, source, false) {
        return e.into_response();
    }
    match s.gateway.join_rtp(&room, offer, who(&caller)).await {
        Ok(j) => rtp_created(&s, room, &caller, source, j.id, j.answer),
        Err(e) => e.into_response(),
    }
}

/// What `POST /rooms/{room}/rtp/offer` may ask for (every key optional).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OfferRequest {
    /// `RTP/AVP` (the default), `RTP/AVPF`, `RTP/SAVP` or `RTP/SAVPF`.
    transport: Option<String>,
    /// Codec names (`opus`, `PCMU`, `PCMA`), in order; the gateway's audio codecs by default.
    codecs: Option<Vec<String>>,
    /// SDES suites to offer, in order; the configured ones by default.
    suites: Option<Vec<String>>,
    /// Offer `a=rtcp-mux` (default false: RTCP on the next port).
    rtcp_mux: Option<bool>,
}

impl OfferRequest {
    fn spec(self, sdes_default: &[secrelay_srtp::Profile]) -> Result<RtpOfferSpec, ApiError> {
        let transport = Transport::parse(self.transport.as_deref().unwrap_or("RTP/AVP"));
        if !(transport.is_plain() || transport.is_sdes()) {
            return Err(ApiError::bad(format!(
                "transport {}: RTP/AVP, RTP/AVPF, RTP/SAVP or RTP/SAVPF",
                transport.as_str()
            )));
        }
        let codecs = match self.codecs {
            None => CodecId::DEFAULT_AUDIO.to_vec(),
            Some(names) => names
                .iter()
                .map(|n| {
                    CodecId::by_name(n).filter(|c| c.is_audio()).ok_or_else(|| {
                        ApiError::bad(format!(
                            "codec {n:?}: opus, PCMU, PCMA, G722 or telephone-event"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        if codecs.is_empty() {
            return Err(ApiError::bad("codecs: name at least one"));
        }
        let suites = match (transport.is_sdes(), self.suites) {
            (false, _) => Vec::new(),
            (true, None) => sdes_default.to_vec(),
            (true, Some(names)) => names
                .iter()
                .map(|n| {
                    n.parse()
                        .map_err(|e| ApiError::bad(format!("suite {n:?}: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(RtpOfferSpec {
            transport,
            codecs: codecs.into_iter().map(|c| (c, c.offer_codec())).collect(),
            suites,
            rtcp_mux: self.rtcp_mux.unwrap_or(false),
            ptime: None,
        })
    }
}

/// `POST /rooms/{room}/rtp/offer`: a telephony leg that makes the offer; 201 with it and the
/// leg's `Location`, where the answer is `PUT`.
async fn rtp_make_offer(
    State(s): State<AppState>,
    Path(room): Path<String>,
    client: Option<axum::Extension<ClientAddr>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match admit_to_room(&s, &room, &headers, Need::Join) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if let Some(r) = to_owner(&s, &room, &uri).await {
        return r;
    }
    let source = client.map(|c| SourceKey::of(c.0 .0));
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        OfferRequest::default()
    } else if !content_type_is(&headers, "application/json") {
        return ApiError::UnsupportedMediaType(
            "what to offer is sent as Content-Type: application/json (or nothing)".into(),
        )
        .into_response();
    } else {
        match serde_json::from_slice::<OfferRequest>(&body) {
            Ok(r) => r,
            Err(e) => return ApiError::bad(format!("bad request: {e}")).into_response(),
        }
    };
    let spec = match request.spec(&s.gateway.config().sdes_profiles().unwrap_or_default()) {
        Ok(spec) => spec,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = room_for_one_more(&s, &room, &caller, source, false) {
        return e.into_response();
    }
    match s.gateway.offer_rtp(&room, spec, who(&caller)).await {
        Ok(j) => rtp_created(&s, room, &caller, source, j.id, j.answer),
        Err(e) => e.into_response(),
    }
}

/// 201 for a new telephony leg: its SDP and `Location`, the resource noted for `DELETE`.
fn rtp_created(
    s: &AppState,
    room: String,
    caller: &Caller,
    source: Option<SourceKey>,
    id: String,
    sdp: String,
) -> Response {
    let location = location(JoinKind::Rtp, &room, &id);
    s.resources().insert(
        id,
        Resource {
            room,
            kind: JoinKind::Rtp,
            owner: caller.identity().map(str::to_owned),
            source,
            // A telephony leg's media is keyed (or plain) from its start.
            connected: true,
            etag: String::new(),
            remote_ufrag: String::new(),
            ended: None,
        },
    );
    let mut r = (StatusCode::CREATED, sdp).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, v);
    }
    r
}

/// `PUT /rooms/{room}/rtp/{id}`: the answer to our offer (204), or a new offer in the call
/// (200 with our answer).
async fn rtp_update(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = s.own_resource(&headers, JoinKind::Rtp, &room, &id, false) {
        return e.into_response();
    }
    let text = match sdp_body(&headers, &body, "the SDP") {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let sdp = match parse_rtp(text) {
        Ok(o) => o,
        Err(e) => return ApiError::bad(format!("bad SDP: {e}")).into_response(),
    };
    match s.gateway.update_rtp(&room, &id, sdp).await {
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(answer)) => {
            let mut r = (StatusCode::OK, answer).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/sdp"),
            );
            r
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The ICE credentials in a trickle-ice-sdpfrag body (RFC 8840), if it carries both.
fn sdpfrag_credentials(body: &str) -> Option<Credentials> {
    let mut ufrag = None;
    let mut pwd = None;
    for line in body.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("a=ice-ufrag:") {
            ufrag = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("a=ice-pwd:") {
            pwd = Some(v.trim().to_owned());
        }
    }
    Some(Credentials {
        ufrag: ufrag?,
        pwd: pwd?,
    })
}

/// `GET {Location}/events`: the participant's events channel (Server-Sent Events). While it
/// is open the gateway renegotiates when senders arrive: each `offer` event's data is JSON
/// `{"revision": N, "sdp": "…"}`, answered with `PUT {Location}`. The stream ends with the
/// session.
async fn resource_events(
    s: AppState,
    room: String,
    id: String,
    headers: HeaderMap,
    kind: JoinKind,
) -> Response {
    if let Err(e) = s.own_resource(&headers, kind, &room, &id, false) {
        return e.into_response();
    }
    let Some(rx) = s.gateway.listen(&room, &id).await else {
        return ApiError::not_found("no such WebRTC session").into_response();
    };
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let n = rx.recv().await?;
        let e = axum::response::sse::Event::default()
            .event(n.event)
            .data(n.data);
        Some((Ok::<_, std::convert::Infallible>(e), rx))
    });
    axum::response::sse::Sse::new(stream)
        .keep_alive(axum::response::sse::KeepAlive::default())
        .into_response()
}

/// `PUT {Location}` with `application/sdp`: the answer to our new offer (from the events
/// channel), `If-Match` naming its revision if the client wants the check: 204, or 400 (not
/// SDP), 409 (no offer of ours waits, or another revision), 415.
async fn reanswer_resource(
    s: AppState,
    room: String,
    id: String,
    headers: HeaderMap,
    body: Bytes,
    kind: JoinKind,
) -> Response {
    if let Err(e) = s.own_resource(&headers, kind, &room, &id, false) {
        return e.into_response();
    }
    let text = match sdp_body(&headers, &body, "the answer to our offer") {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let revision = match headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(v) => match v.trim().trim_matches('"').parse::<u64>() {
            Ok(r) => Some(r),
            Err(_) => {
                return ApiError::bad("If-Match names the offer's revision (a number)")
                    .into_response()
            }
        },
    };
    let answer = match secrelay_wire::sdp::parse_offer(text) {
        Ok(a) => a,
        Err(e) => return ApiError::bad(format!("the answer: {e}")).into_response(),
    };
    match s.gateway.answer_reoffer(&room, &id, answer, revision).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn patch_resource(
    s: AppState,
    room: String,
    id: String,
    headers: HeaderMap,
    body: Bytes,
    kind: JoinKind,
) -> Response {
    let res = match s.own_resource(&headers, kind, &room, &id, false) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if !content_type_is(&headers, "application/trickle-ice-sdpfrag") {
        return ApiError::UnsupportedMediaType(
            "PATCH takes Content-Type: application/trickle-ice-sdpfrag".into(),
        )
        .into_response();
    }
    let Some(if_match) = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) else {
        return ApiError::PreconditionRequired(
            "PATCH needs If-Match (the ETag, or * for an ICE restart)",
        )
        .into_response();
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return ApiError::bad("the fragment is not UTF-8").into_response();
    };
    let creds = sdpfrag_credentials(text);
    let restart = creds.as_ref().is_some_and(|c| c.ufrag != res.remote_ufrag);
    let tag_ok = if_match.trim() == res.etag || (restart && if_match.trim() == "*");
    if !tag_ok {
        return ApiError::PreconditionFailed("If-Match does not match the session's ETag")
            .into_response();
    }
    match creds.filter(|_| restart) {
        // New credentials: an ICE restart. Our new ones go back in a fragment.
        Some(remote) => {
            let remote_ufrag = remote.ufrag.clone();
            let Some(local) = s.gateway.ice_restart(&room, &id, remote).await else {
                s.resources().remove(&id);
                return ApiError::not_found("no such session").into_response();
            };
            let etag = format!("\"{}\"", local.ufrag);
            if let Some(r) = s.resources().get_mut(&id) {
                r.etag = etag.clone();
                r.remote_ufrag = remote_ufrag;
            }
            let mut frag = format!(
                "a=ice-lite\r\na=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
                local.ufrag, local.pwd
            );
            secrelay_wire::sdp::write_candidates(
                &mut frag,
                s.gateway.candidates(),
                s.gateway.tcp_candidates(),
            );
            frag.push_str("a=end-of-candidates\r\n");
            let mut r = (StatusCode::OK, frag).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/trickle-ice-sdpfrag"),
            );
            if let Ok(v) = HeaderValue::from_str(&etag) {
                h.insert(header::ETAG, v);
            }
            r
        }
        // Trickled candidates: an ICE-lite agent learns the peer's addresses from its checks,
        // so they are acknowledged and not needed.
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// `DELETE {Location}`: the session's holder (or the room's admin) ends it; 200, also for a
/// session that ended on its own within `ended_resource_grace_secs`.
async fn leave_resource(
    s: AppState,
    room: String,
    id: String,
    headers: HeaderMap,
    kind: JoinKind,
) -> Response {
    if let Err(e) = s.own_resource(&headers, kind, &room, &id, true) {
        return e.into_response();
    }
    remove(s, room, id, StatusCode::OK).await
}

/// Ends participant `id` of `room` and forgets its resource, if the resource is of that room.
async fn remove(s: AppState, room: String, id: String, ok: StatusCode) -> Response {
    let known = {
        let mut r = s.resources();
        let ours = r.get(&id).is_some_and(|res| res.room == room);
        ours && r.remove(&id).is_some()
    };
    if s.gateway.leave(&room, &id).await || known {
        ok.into_response()
    } else {
        ApiError::not_found("no such session").into_response()
    }
}

/// `GET {Location}/room`: the room as its participant sees it: who is in it (names, kinds of
/// leg, states, round-trip times; the others' ids are not shown: in an open room a session's
/// URL is what lets one end it), and the simulcast layers it is sent.
async fn resource_room(
    s: AppState,
    room: String,
    id: String,
    headers: HeaderMap,
    kind: JoinKind,
) -> Response {
    if let Err(e) = s.own_resource(&headers, kind, &room, &id, false) {
        return e.into_response();
    }
    let Some(snapshot) = s.gateway.rooms(Some(&room)).await.into_iter().next() else {
        return ApiError::not_found("no such room").into_response();
    };
    Json(member_view(&snapshot, &id)).into_response()
}

/// What [`resource_room`] shows participant `me` of a room.
fn member_view(room: &super::RoomSnapshot, me: &str) -> serde_json::Value {
    // Publishers are named by identity, else by their place in the list.
    let label = |pid: &str| {
        room.participants.iter().position(|p| p.id == pid).map(|i| {
            room.participants[i]
                .name
                .clone()
                .unwrap_or_else(|| format!("participant {}", i + 1))
        })
    };
    let participants: Vec<serde_json::Value> = room
        .participants
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let you = p.id == me;
            let mut v = serde_json::json!({
                "name": p.name.clone().unwrap_or_else(|| format!("participant {}", i + 1)),
                "named": p.name.is_some(),
                "you": you,
                "kind": p.kind,
                "leg": p.leg,
                "state": p.state,
                "rtt_ms": p.rtcp.rtt_ms,
            });
            if you {
                v["layers_received"] = p
                    .layers_received
                    .iter()
                    .map(|l| {
                        serde_json::json!({
                            "publisher": label(&l.publisher_id),
                            "current": l.current,
                            "target": l.target,
                        })
                    })
                    .collect();
                // Who is on each of its receive sections (the page labels its tiles so).
                v["receiving"] = p
                    .receiving
                    .iter()
                    .map(|r| serde_json::json!({"mid": r.mid, "publisher": label(&r.publisher_id)}))
                    .collect();
            }
            v
        })
        .collect();
    serde_json::json!({ "name": room.name, "participants": participants })
}

/// A new session's request for a room another node of the cluster owns: `307 Temporary
/// Redirect` to the same path there (the method and body are sent again). `None`: the room's
/// sessions are made here (no cluster, this node owns it, or the directory does not answer).
async fn to_owner(s: &AppState, room: &str, uri: &axum::http::Uri) -> Option<Response> {
    match placed(s, room).await {
        Placement::Here => None,
        Placement::Elsewhere { node, url, .. } => Some(redirect((&node, &url), room, uri)),
    }
}

/// The node a viewer of a room this node owns goes to instead, served there through the pipes:
/// a WHEP viewer that may be spread, with `cluster_spread_viewers` (to a node with fewer
/// participants than this one) or while this node drains (to the least loaded other node).
async fn spread_to(
    s: &AppState,
    room: &str,
    kind: JoinKind,
    spreads: bool,
) -> Option<(String, String)> {
    let c = s.cluster.as_ref()?;
    let policy = s.gateway.config().cluster_spread_viewers || c.draining();
    let wanted = spreads && kind == JoinKind::Whep && policy && s.gateway.has_node_pipes();
    // A room not here yet (or that mixes) takes its viewers here: another node would send
    // them back.
    if !wanted || !s.gateway.pipes_viewers(room).await {
        return None;
    }
    c.spread_to().await
}

/// Where `room`'s new sessions are made: here without a cluster.
async fn placed(s: &AppState, room: &str) -> Placement {
    match s.cluster.as_ref() {
        Some(c) => c.place(room).await,
        None => Placement::Here,
    }
}

/// `307 Temporary Redirect` to the same path at node `node`, whose signaling is at `url`.
fn redirect((node, url): (&str, &str), room: &str, uri: &axum::http::Uri) -> Response {
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let location = format!("{}{path}", url.trim_end_matches('/'));
    let mut r = (
        StatusCode::TEMPORARY_REDIRECT,
        format!("room {room} is served by node {node}\n"),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// The caller of a cluster route, let through by `allow`, with this node's cluster; or the
/// answer: 401 or 403, or 404 on a gateway that is no node of a cluster.
fn cluster_caller(
    s: &AppState,
    headers: &HeaderMap,
    allow: fn(&Policy, &Caller) -> Result<(), Failure>,
) -> Result<(Arc<Cluster>, Arc<Policy>, Caller), ApiError> {
    let (policy, caller) = s.caller(headers, None)?;
    allow(&policy, &caller).map_err(|f| s.deny(f))?;
    let cluster = s.cluster.clone().ok_or_else(|| {
        ApiError::not_found("this gateway is no node of a cluster (cluster_redis is not set)")
    })?;
    Ok((cluster, policy, caller))
}

/// `GET /api/cluster`: the nodes of the cluster, their leases and loads, and which node owns
/// which room, as the directory says now.
async fn api_cluster(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let (cluster, policy, caller) = match cluster_caller(&s, &headers, Policy::allow_room_list) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    match cluster.view().await {
        Ok(mut view) => {
            view.rooms.retain(|room, _| policy.lists(&caller, room));
            Json(view).into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /api/cluster/drain` (`draining`) and `DELETE /api/cluster/drain`: drains this node
/// from its cluster (new rooms go to the other nodes; its rooms keep their sessions and take
/// new ones until they end; `/healthz` answers 503 meanwhile) or takes it back.
async fn drain_node(State(s): State<AppState>, headers: HeaderMap, draining: bool) -> Response {
    let cluster = match cluster_caller(&s, &headers, Policy::allow_node_control) {
        Ok((cluster, _, _)) => cluster,
        Err(e) => return e.into_response(),
    };
    let written = cluster.set_draining(draining).await;
    let rooms = s.gateway.room_names().await.len();
    Json(serde_json::json!({
        "draining": draining,
        "rooms": rooms,
        // Other nodes see it at once when the directory took it, else at its next renewal.
        "directory_written": written.is_ok(),
    }))
    .into_response()
}

/// The query of `POST /api/cluster/handover`.
#[derive(serde::Deserialize)]
struct HandoverQuery {
    /// The node to hand the calls to.
    to: String,
}

/// `POST /api/cluster/handover?to=NODE`: hands every telephony call this node keeps to the
/// live node `NODE` (ended here, taken there at its next renewal: the phones hear a gap of at
/// most a third of the lease). With a drain, a node is emptied without stopping it.
async fn hand_over(
    State(s): State<AppState>,
    headers: HeaderMap,
    query: Result<axum::extract::Query<HandoverQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let cluster = match cluster_caller(&s, &headers, Policy::allow_node_control) {
        Ok((cluster, _, _)) => cluster,
        Err(e) => return e.into_response(),
    };
    let Ok(axum::extract::Query(q)) = query else {
        return ApiError::bad("?to=NODE: the node to hand the calls to").into_response();
    };
    match cluster.request_handover(&q.to).await {
        Ok(calls) => Json(serde_json::json!({ "to": q.to, "calls": calls })).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /api/rooms`: the rooms the caller's grant covers (every room for the admin key).
async fn api_rooms(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let (policy, caller) = match s.caller(&headers, None) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if let Err(f) = policy.allow_room_list(&caller) {
        return s.deny(f).into_response();
    }
    let mut rooms = s.gateway.rooms(None).await;
    rooms.retain(|r| policy.lists(&caller, &r.name));
    Json(serde_json::json!({ "rooms": rooms })).into_response()
}

async fn api_room(
    State(s): State<AppState>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = room_name(&room, true) {
        return e.into_response();
    }
    if let Err(e) = s.allow(&headers, &room, Need::List) {
        return e.into_response();
    }
    match s.gateway.rooms(Some(&room)).await.into_iter().next() {
        Some(r) => Json(r).into_response(),
        None => ApiError::not_found("no such room").into_response(),
    }
}

/// The body of `PATCH /api/rooms/{room}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RoomSettings {
    /// Mix the room's audio (N−1), or relay and transcode it.
    mix: Option<bool>,
    /// With `"mix": true`: the most talkers summed at once, the loudest (0 or absent: every
    /// member who talks).
    speakers: Option<u16>,
}

/// A `PATCH /api/rooms/{room}` body: the mixing to set (`Some(None)`: relay again), nothing
/// to change, or the reason it is refused (400).
fn room_settings(body: &[u8]) -> Result<Option<Option<MixSettings>>, ApiError> {
    let settings: RoomSettings = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!(
            "the body must be JSON {{\"mix\": true or false, \"speakers\": N (with \
             \"mix\": true; optional)}}: {e}"
        ))
    })?;
    match (settings.mix, settings.speakers) {
        (Some(true), speakers) => Ok(Some(Some(MixSettings {
            speakers: speakers.unwrap_or(0),
        }))),
        (Some(false), None) => Ok(Some(None)),
        (None, None) => Ok(None),
        (_, Some(_)) => Err(ApiError::bad(
            "\"speakers\" is a setting of a mixing room: send it with \"mix\": true",
        )),
    }
}

/// Changes a room's settings (made or not yet): 204, or 400 with the reason.
async fn api_room_settings(
    State(s): State<AppState>,
    Path(room): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    let mix = match room_settings(body.as_bytes()) {
        Ok(mix) => mix,
        Err(e) => return e.into_response(),
    };
    if let Some(mix) = mix {
        if let Err(e) = s.gateway.set_mixing(&room, mix).await {
            return ApiError::from(e).into_response();
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn api_remove(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    remove(s, room, id, StatusCode::NO_CONTENT).await
}

/// The body of `PATCH /api/rooms/{room}/participants/{id}`: what of the participant's media
/// its room passes on, each field given set, the others as they were.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GatePatch {
    /// Drop its media (everything but DTMF).
    block_media: Option<bool>,
    /// Send its audio on as silence (its other media dropped).
    silence_media: Option<bool>,
    /// Drop its DTMF (telephone-events).
    block_dtmf: Option<bool>,
}

impl GatePatch {
    /// Sets the fields it names.
    pub(crate) fn apply(self, g: &mut secrelay_core::room::Gate) {
        let set = |to: &mut bool, v: Option<bool>| *to = v.unwrap_or(*to);
        set(&mut g.block_media, self.block_media);
        set(&mut g.silence_media, self.silence_media);
        set(&mut g.block_dtmf, self.block_dtmf);
    }
}

/// A `PATCH …/participants/{id}` body, or the reason it is refused (400).
fn gate_patch(body: &[u8]) -> Result<GatePatch, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!(
            "the body must be JSON {{\"block_media\", \"silence_media\", \"block_dtmf\": \
             true or false, each optional}}: {e}"
        ))
    })
}

/// Changes what of a participant's media its room passes on (a moderator muting someone):
/// 200 with its gate now, 404 if there is no such participant, 400 with the reason.
async fn api_participant(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    let patch = match gate_patch(body.as_bytes()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    match s.gateway.patch_gate(&room, &id, patch).await {
        Some(gate) => axum::Json(serde_json::json!({ "gate": gate })).into_response(),
        None => ApiError::not_found(format!("no participant {id} in room {room}")).into_response(),
    }
}

/// The body of `POST /api/rooms/{room}/participants/{id}/media`: a file of `media_dir` to
/// play to the participant (ng `play media`'s keys, named for JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MediaPost {
    /// The file's name in `media_dir`.
    file: String,
    /// How many times to play it at most (1 unless given; without a bound when only
    /// `repeat_duration_ms` is given).
    repeat_times: Option<u32>,
    /// Play it again while less than this has passed, ms.
    repeat_duration_ms: Option<u64>,
    /// Start this many packet times into it.
    #[serde(default)]
    start_frame: u64,
}

/// A `POST …/media` body, or the reason it is refused (400).
fn media_post(body: &[u8]) -> Result<MediaPost, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!(
            "the body must be JSON {{\"file\": a file's name in media_dir, \"repeat_times\", \
             \"repeat_duration_ms\", \"start_frame\": numbers, each optional}}: {e}"
        ))
    })
}

/// Plays a file of `media_dir` to a participant in place of what it hears (an announcement):
/// 200 with one play's length, 404 if there is no such participant, 400 for a file that is
/// not there or not audio, 422 for a participant that receives no audio we encode.
async fn api_play_media(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    let post = match media_post(body.as_bytes()) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let clip = match s
        .gateway
        .clip(secrelay_wire::ng::MediaFile::File(post.file))
        .await
    {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let media = crate::room::PlayMedia {
        clip,
        start_frame: post.start_frame,
        times: secrelay_wire::ng::play_times(
            post.repeat_times.map(i64::from),
            post.repeat_duration_ms,
        ),
        repeat_for: post
            .repeat_duration_ms
            .map(std::time::Duration::from_millis),
    };
    match s.gateway.play_media(&room, &id, media).await {
        Some(Ok(length)) => {
            axum::Json(serde_json::json!({ "duration_ms": length.as_millis() as u64 }))
                .into_response()
        }
        Some(Err(e)) => ApiError::Play(e).into_response(),
        None => ApiError::Control(crate::shard::ControlError::ShuttingDown).into_response(),
    }
}

/// Stops what is played to a participant: 200 with where it was (`last_frame_pos`, packet
/// times into the file; null when nothing was played), 404 if there is no such participant.
async fn api_stop_media(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    match s.gateway.stop_media(&room, &id).await {
        Some(Some(at)) => axum::Json(serde_json::json!({ "last_frame_pos": at })).into_response(),
        Some(None) => {
            ApiError::not_found(format!("no participant {id} in room {room}")).into_response()
        }
        None => ApiError::Control(crate::shard::ControlError::ShuttingDown).into_response(),
    }
}

/// The body of `POST /api/rooms/{room}/data`: one message from the server.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DataPost {
    /// The channel's label: each receiver's channel of this label carries it (opened when it
    /// has none).
    label: String,
    /// A text message; or
    text: Option<String>,
    /// a binary one, in base64.
    binary: Option<String>,
    /// One participant (its id); everyone in the room with data channels when absent.
    to: Option<String>,
    /// Whether a channel the gateway opens for it keeps order (default true).
    #[serde(default = "yes")]
    ordered: bool,
}

fn yes() -> bool {
    true
}

/// A `POST …/data` body as the message to send and its receiver, or the reason it is refused
/// (400).
fn data_post(
    body: &[u8],
    max: usize,
) -> Result<(secrelay_core::leg::DataMessage, Option<String>), ApiError> {
    use base64::Engine as _;
    use secrelay_datachannel::{ChannelSpec, MessageKind, Reliability};
    let p: DataPost = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!("the body must be JSON {{\"label\": L, \"text\": T or \"binary\": BASE64, \"to\": id?, \"ordered\": bool?}}: {e}"))
    })?;
    let (kind, data) = match (p.text, p.binary) {
        (Some(t), None) => (MessageKind::Text, t.into_bytes()),
        (None, Some(b)) => (
            MessageKind::Binary,
            base64::engine::general_purpose::STANDARD
                .decode(b.as_bytes())
                .map_err(|e| ApiError::bad(format!("binary: not base64: {e}")))?,
        ),
        _ => return Err(ApiError::bad("give one of text and binary")),
    };
    if p.label.is_empty() || p.label.len() > 1024 {
        return Err(ApiError::bad("label: 1 to 1024 bytes"));
    }
    if data.len() > max {
        return Err(ApiError::bad(format!(
            "the message is {} bytes, more than data_max_message_size {max}",
            data.len()
        )));
    }
    let spec = ChannelSpec {
        label: p.label,
        protocol: String::new(),
        ordered: p.ordered,
        reliability: Reliability::Reliable,
        priority: 256,
    };
    let msg = secrelay_core::leg::DataMessage {
        spec: std::sync::Arc::new(spec),
        kind,
        data,
    };
    Ok((msg, p.to))
}

/// Sends a message from the server on the room's data channels: `{"sent": N}` (how many
/// participants were sent it), 400 for a bad body, 404 for an unknown participant.
async fn api_send_data(
    State(s): State<AppState>,
    Path(room): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = s.room_admin(&headers, &room) {
        return e.into_response();
    }
    let (msg, to) = match data_post(&body, s.gateway.config().data_max_message_size) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    match s.gateway.send_data(&room, to, msg).await {
        Ok(sent) => Json(serde_json::json!({ "sent": sent })).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The body of `PUT /api/rooms/{room}/participants/{id}/layer`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerChoice {
    /// The simulcast publisher (its id); every publisher's when absent.
    publisher: Option<String>,
    /// The layer's rid; the bandwidth estimate's choice again when null or absent.
    rid: Option<String>,
}

/// A `PUT …/layer` body, or the reason it is refused (400).
fn layer_choice(body: &[u8]) -> Result<LayerChoice, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!(
            "the body must be JSON {{\"publisher\": id?, \"rid\": rid or null}}: {e}"
        ))
    })
}

/// Sets which simulcast layer a participant is sent: 204, or 400/404 with the reason.
async fn api_layer(
    State(s): State<AppState>,
    Path((room, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Err(e) = room_name(&room, true) {
        return e.into_response();
    }
    // The room's admin, or the participant's own holder (its session made over HTTP).
    let owner = s
        .resources()
        .get(&id)
        .filter(|r| r.room == room && r.ended.is_none())
        .map(|r| r.owner.clone());
    let need = match &owner {
        Some(o) => Need::Own(o.as_deref()),
        None => Need::Admin,
    };
    if let Err(e) = s.allow(&headers, &room, need) {
        return e.into_response();
    }
    let choice = match layer_choice(body.as_bytes()) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    match s
        .gateway
        .set_layer(&room, &id, choice.publisher, choice.rid)
        .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /`: a form that enters a room.
async fn index_page() -> Response {
    page(include_str!("index.html"))
}

/// `GET /room/{room}`: the room's page (publish camera and microphone, see the others, live
/// statistics; no external assets).
async fn room_page(Path(room): Path<String>) -> Response {
    if let Err(e) = room_name(&room, false) {
        return e.into_response();
    }
    page(include_str!("room.html"))
}

fn page(html: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

/// `GET /metrics` on the signaling listeners: the admin key (or an admin token over every room).
async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let (policy, caller) = match s.caller(&headers, None) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if let Err(f) = policy.allow_metrics(&caller) {
        return s.deny(f).into_response();
    }
    metrics_text(&s)
}

/// The metrics in OpenMetrics text.
fn metrics_text(s: &AppState) -> Response {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        return ApiError::internal(format!("encoding metrics: {e}")).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

async fn healthz(State(s): State<AppState>) -> Response {
    let drained = s.cluster.as_ref().is_some_and(|c| c.draining());
    if s.gateway.admitting() && !drained {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    }
}

/// What the JSON bodies of the HTTP API go through before a handler acts on them, for the fuzz
/// target `http_json_bodies`: `which` picks the body (0 `PATCH /api/rooms/{room}`, 1 `PUT
/// …/layer`, 2 `POST /rooms/{room}/rtp/offer`); Ok with what it asks for, or the reason a
/// client is answered 400.
pub(crate) fn parse_json_body(which: u8, body: &[u8]) -> Result<String, ApiError> {
    match which % 5 {
        0 => room_settings(body).map(|m| format!("{m:?}")),
        1 => layer_choice(body).map(|c| format!("{c:?}")),
        3 => gate_patch(body).map(|p| format!("{p:?}")),
        4 => media_post(body).map(|p| format!("{p:?}")),
        _ => serde_json::from_slice::<OfferRequest>(body)
            .map_err(|e| ApiError::bad(format!("bad request: {e}")))?
            .spec(&[secrelay_srtp::Profile::AesCm128HmacSha1_80])
            .map(|spec| format!("{spec:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdpfrag_credentials_need_both() {
        let c = sdpfrag_credentials("a=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdefghijkl\r\n")
            .unwrap();
        assert_eq!(c.ufrag, "abcd");
        assert!(sdpfrag_credentials(
            "a=ice-ufrag:abcd\r\na=candidate:1 1 udp 1 1.2.3.4 5 typ host"
        )
        .is_none());
    }

    #[test]
    fn room_names() {
        assert!(valid_room("board-1.a_b"));
        assert!(!valid_room(""));
        assert!(!valid_room("a/b"));
        assert!(!valid_room(&"x".repeat(65)));
    }

    #[test]
    fn call_rooms_are_named_apart() {
        assert!(valid_call_room("call:a84b4c76e66710@pc33.atlanta.com"));
        assert!(!valid_call_room("call:"));
        assert!(!valid_call_room("call:with space"));
        assert!(!valid_call_room("lobby"));
        assert!(!valid_room("call:abc"));
    }
}
