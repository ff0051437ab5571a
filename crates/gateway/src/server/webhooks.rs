//! Webhooks: what happens in rooms (a room started or finished, a participant joined or left,
//! started or stopped publishing), posted as JSON to the receivers the configuration names.
//!
//! * **Signed**: each request carries `Authorization: Bearer <JWT>`, signed (HS256) with the
//!   receiver's `key` from `api_keys` (named in the header's `kid` and in `iss`), whose `sha256`
//!   claim is the base64 SHA-256 of the body, and whose `exp` is five minutes after it was
//!   made. A receiver checks the signature with the key's secret, then the body's hash.
//! * **In order, per receiver**: one queue per receiver; an event is posted only once the one
//!   before it was delivered or given up.
//! * **Retried**: a connection error, a timeout (`webhook_timeout_secs`) or a status outside
//!   2xx is retried after 0.5 s, 1 s, 2 s, … up to `webhook_attempts` attempts, then given up
//!   and counted.
//! * **Never in the media's way**: the workers hand events over without waiting; a receiver
//!   whose queue is full (`webhook_queue`) loses the new event, counted.
//!
//! The body:
//! ```json
//! {"id": "8f1c…", "event": "participant_joined", "created_at": 1764331200.123,
//!  "room": {"name": "lobby"},
//!  "participant": {"id": "a1b2…", "name": "alice", "kind": "join", "leg": "webrtc"}}
//! ```
//! `participant` is absent for room events; `participant_left` adds `"reason"` (why it ended,
//! as `/metrics` names it in `secrelay_sessions_closed`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::{header, Request, Uri};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use sha2::Digest as _;
use tokio::sync::mpsc;

use super::auth::Secret;
use super::config::{ConfigError, ServeConfig, WebhookConfig};
use crate::shard::{JoinKind, Lifecycle};

/// The kinds of event a receiver can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    /// A room was made.
    RoomStarted,
    /// A room's last participant left.
    RoomFinished,
    /// A participant was made.
    ParticipantJoined,
    /// A participant ended.
    ParticipantLeft,
    /// A connected participant that sends media.
    PublishingStarted,
    /// It stopped (it left).
    PublishingStopped,
}

impl HookEvent {
    /// Every event's name, as the configuration and the body name it.
    pub const NAMES: [&'static str; 6] = [
        "room_started",
        "room_finished",
        "participant_joined",
        "participant_left",
        "publishing_started",
        "publishing_stopped",
    ];

    const ALL: [HookEvent; 6] = [
        HookEvent::RoomStarted,
        HookEvent::RoomFinished,
        HookEvent::ParticipantJoined,
        HookEvent::ParticipantLeft,
        HookEvent::PublishingStarted,
        HookEvent::PublishingStopped,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        let i = Self::ALL
            .iter()
            .position(|e| *e == self)
            .expect("ALL lists every event");
        Self::NAMES[i]
    }

    /// The event named `name`.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        Self::NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
    }
}

/// A participant as a webhook names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookParticipant {
    /// Its id (the last segment of its resource URL).
    pub id: String,
    /// Its identity (an access token's subject), if it joined with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How it joined (`whip`, `whep`, `join`, `rtp`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<JoinKind>,
    /// Its kind of leg (`webrtc`, `sdes`, `plain`), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leg: Option<&'static str>,
}

/// One event, as posted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HookBody {
    /// Unique per event (a receiver that gets one twice, after a retry whose answer was lost,
    /// can tell).
    pub id: String,
    /// Its kind's name.
    pub event: &'static str,
    /// When it happened (seconds since the Unix epoch).
    pub created_at: f64,
    /// The room.
    pub room: HookRoom,
    /// The participant, for participant events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub participant: Option<HookParticipant>,
    /// Why it ended (`participant_left`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// The room of an event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookRoom {
    /// Its name.
    pub name: String,
}

impl HookBody {
    /// The webhook event for a lifecycle event (none for those no webhook reports).
    pub fn of(l: &Lifecycle, at: SystemTime) -> Option<HookBody> {
        let created_at = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let participant = |id: &str, name: &Option<String>| HookParticipant {
            id: id.to_owned(),
            name: name.clone(),
            kind: None,
            leg: None,
        };
        let (event, room, participant, reason) = match l {
            Lifecycle::RoomStarted { room } => (HookEvent::RoomStarted, room, None, None),
            Lifecycle::RoomFinished { room } => (HookEvent::RoomFinished, room, None, None),
            Lifecycle::Joined {
                room,
                id,
                name,
                kind,
                leg,
            } => (
                HookEvent::ParticipantJoined,
                room,
                Some(HookParticipant {
                    kind: Some(*kind),
                    leg: Some(leg),
                    ..participant(id, name)
                }),
                None,
            ),
            Lifecycle::Connected { .. } => return None,
            Lifecycle::Publishing {
                room,
                id,
                name,
                started,
            } => (
                if *started {
                    HookEvent::PublishingStarted
                } else {
                    HookEvent::PublishingStopped
                },
                room,
                Some(participant(id, name)),
                None,
            ),
            Lifecycle::Left {
                room,
                id,
                name,
                reason,
            } => (
                HookEvent::ParticipantLeft,
                room,
                Some(participant(id, name)),
                Some(reason.name()),
            ),
        };
        Some(HookBody {
            id: random_id(),
            event: event.name(),
            created_at,
            room: HookRoom { name: room.clone() },
            participant,
            reason,
        })
    }
}

fn random_id() -> String {
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Where a receiver is: `http://` or `https://`, host, port, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    tls: bool,
    host: String,
    port: u16,
    authority: String,
    path: String,
}

/// Why a receiver's URL is refused.
#[derive(Debug)]
pub enum UrlError {
    /// It does not parse.
    NotAUrl(axum::http::uri::InvalidUri),
    /// Not `http://` or `https://`.
    Scheme,
    /// No host.
    NoHost,
    /// `user:password@` in it.
    Credentials,
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlError::NotAUrl(e) => write!(f, "not a URL: {e}"),
            UrlError::Scheme => f.write_str("give an http:// or https:// URL"),
            UrlError::NoHost => f.write_str("the URL has no host"),
            UrlError::Credentials => {
                f.write_str("credentials in the URL are not sent: leave them out")
            }
        }
    }
}

impl std::error::Error for UrlError {}

impl Target {
    /// Parses a receiver's URL.
    pub fn parse(url: &str) -> Result<Target, UrlError> {
        let uri: Uri = url.parse().map_err(UrlError::NotAUrl)?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(UrlError::Scheme),
        };
        let authority = uri.authority().ok_or(UrlError::NoHost)?;
        if authority.as_str().contains('@') {
            return Err(UrlError::Credentials);
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(UrlError::NoHost);
        }
        Ok(Target {
            tls,
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            authority: authority.as_str().to_owned(),
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
        })
    }
}

/// What the webhooks counted (`secrelay_webhooks_total{result}`).
#[derive(Debug, Default)]
pub struct HookStats {
    /// Delivered (a 2xx answer).
    pub sent: AtomicU64,
    /// Attempts that failed and were retried.
    pub retried: AtomicU64,
    /// Given up after every attempt failed.
    pub failed: AtomicU64,
    /// Dropped because the receiver's queue was full.
    pub dropped: AtomicU64,
}

/// The receivers: each event goes to the queue of every receiver that asked for it.
#[derive(Debug, Clone)]
pub(crate) struct Hooks {
    receivers: Vec<(Vec<HookEvent>, mpsc::Sender<Arc<HookBody>>)>,
    stats: Arc<HookStats>,
}

impl Hooks {
    /// Hands a lifecycle event to the receivers that want it, never waiting.
    pub fn notify(&self, l: &Lifecycle) {
        if self.receivers.is_empty() {
            return;
        }
        let Some(body) = HookBody::of(l, SystemTime::now()) else {
            return;
        };
        let body = Arc::new(body);
        for (events, tx) in &self.receivers {
            if !events.is_empty() && !events.iter().any(|e| e.name() == body.event) {
                continue;
            }
            if tx.try_send(body.clone()).is_err() {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How one receiver is reached and signed for.
struct Receiver {
    target: Target,
    key_id: String,
    secret: Secret,
    tls: Option<tokio_rustls::TlsConnector>,
    timeout: Duration,
    attempts: u32,
    stats: Arc<HookStats>,
}

/// The receivers of `config` and the tasks that post to them (spawn each on the signaling
/// runtime). Err: a receiver that cannot be set up (its CA file), naming it.
pub(crate) fn start(
    config: &ServeConfig,
    stats: Arc<HookStats>,
) -> Result<
    (
        Hooks,
        Vec<impl std::future::Future<Output = ()> + Send + 'static>,
    ),
    ConfigError,
> {
    let mut receivers = Vec::new();
    let mut tasks = Vec::new();
    let mut roots: Option<Arc<rustls::ClientConfig>> = None;
    for (i, w) in config.webhooks.iter().enumerate() {
        let r = receiver(config, w, &mut roots, stats.clone())
            .map_err(|e| ConfigError(format!("webhooks[{i}] ({}): {e}", w.url)))?;
        let events = w
            .events
            .iter()
            .filter_map(|e| HookEvent::from_name(e))
            .collect();
        let (tx, rx) = mpsc::channel(config.webhook_queue);
        receivers.push((events, tx));
        tasks.push(deliver(r, rx));
    }
    Ok((Hooks { receivers, stats }, tasks))
}

fn receiver(
    config: &ServeConfig,
    w: &WebhookConfig,
    roots: &mut Option<Arc<rustls::ClientConfig>>,
    stats: Arc<HookStats>,
) -> Result<Receiver, ConfigError> {
    let target = Target::parse(&w.url).map_err(|e| ConfigError(e.to_string()))?;
    let secret = config
        .api_keys
        .get(&w.key)
        .cloned()
        .ok_or_else(|| ConfigError(format!("key {:?} is not in api_keys", w.key)))?;
    let tls = if target.tls {
        let cfg = match roots {
            Some(c) => c.clone(),
            None => {
                let c = client_config(config.webhook_ca.as_deref())?;
                *roots = Some(c.clone());
                c
            }
        };
        Some(tokio_rustls::TlsConnector::from(cfg))
    } else {
        None
    };
    Ok(Receiver {
        target,
        key_id: w.key.clone(),
        secret,
        tls,
        timeout: Duration::from_secs_f64(config.webhook_timeout_secs),
        attempts: config.webhook_attempts,
        stats,
    })
}

/// A TLS client trusting the certificates of `ca` (PEM), else the system's bundle.
fn client_config(ca: Option<&std::path::Path>) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let path = match ca {
        Some(p) => p.to_owned(),
        None => std::env::var_os("SSL_CERT_FILE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into()),
    };
    let text = std::fs::read(&path)
        .map_err(|e| ConfigError(format!("webhook_ca {}: {e}", path.display())))?;
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| ConfigError(format!("webhook_ca {}: {e}", path.display())))?;
        // A bundle may hold certificates rustls cannot use; the others still count.
        let _ = store.add(cert);
    }
    if store.is_empty() {
        return Err(ConfigError(format!(
            "webhook_ca {}: no usable CA certificate",
            path.display()
        )));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(format!("TLS: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The `Authorization` value of a request carrying `body`.
fn signature(key_id: &str, secret: &Secret, body: &[u8]) -> Result<String, DeliveryError> {
    #[derive(serde::Serialize)]
    struct HookClaims<'a> {
        iss: &'a str,
        sub: &'static str,
        iat: u64,
        exp: u64,
        sha256: String,
    }
    use base64::Engine as _;
    let now = super::auth::unix_now();
    let claims = HookClaims {
        iss: key_id,
        sub: "secrelay",
        iat: now,
        exp: now + 300,
        sha256: base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(body)),
    };
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(key_id.to_owned());
    let key = EncodingKey::from_secret(secret.expose().as_bytes()).map_err(DeliveryError::Sign)?;
    jsonwebtoken::encode(&header, &claims, &key)
        .map(|t| format!("Bearer {t}"))
        .map_err(DeliveryError::Sign)
}

/// Posts each event of `rx` in turn, retrying each as the module says.
async fn deliver(r: Receiver, mut rx: mpsc::Receiver<Arc<HookBody>>) {
    while let Some(body) = rx.recv().await {
        let json = match serde_json::to_vec(&*body) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(error = %e, "webhook body");
                continue;
            }
        };
        let mut delay = Duration::from_millis(500);
        let mut delivered = false;
        for attempt in 1..=r.attempts {
            match post(&r, body.event, &json).await {
                Ok(()) => {
                    delivered = true;
                    break;
                }
                Err(e) => {
                    tracing::debug!(url = %r.target.authority, attempt, error = %e, "webhook attempt failed");
                    if attempt < r.attempts {
                        r.stats.retried.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(30));
                    }
                }
            }
        }
        if delivered {
            r.stats.sent.fetch_add(1, Ordering::Relaxed);
        } else {
            r.stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(receiver = %r.target.authority, event = body.event, attempts = r.attempts, "webhook given up");
        }
    }
}

/// One attempt: a new connection, one POST, a 2xx answer.
async fn post(r: &Receiver, event: &str, body: &[u8]) -> Result<(), DeliveryError> {
    let auth = signature(&r.key_id, &r.secret, body)?;
    let request = Request::post(r.target.path.as_str())
        .header(header::HOST, r.target.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, auth)
        .header("x-secrelay-event", event)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(DeliveryError::Request)?;
    let status = tokio::time::timeout(r.timeout, async {
        let tcp = tokio::net::TcpStream::connect((r.target.host.as_str(), r.target.port))
            .await
            .map_err(DeliveryError::Connect)?;
        match &r.tls {
            Some(tls) => {
                let name = ServerName::try_from(r.target.host.clone())
                    .map_err(DeliveryError::ServerName)?;
                let stream = tls.connect(name, tcp).await.map_err(DeliveryError::Tls)?;
                send(stream, request).await
            }
            None => send(tcp, request).await,
        }
    })
    .await
    .map_err(|_| DeliveryError::Timeout)??;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(DeliveryError::Status(status))
    }
}

async fn send<S>(stream: S, request: Request<Full<Bytes>>) -> Result<u16, DeliveryError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(DeliveryError::Http)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(DeliveryError::Http)?;
    Ok(response.status().as_u16())
}

/// Why one delivery attempt failed.
#[derive(Debug)]
enum DeliveryError {
    /// The request's token could not be made.
    Sign(jsonwebtoken::errors::Error),
    /// The request could not be made.
    Request(axum::http::Error),
    /// No TCP connection.
    Connect(std::io::Error),
    /// The host is no name TLS can check.
    ServerName(rustls_pki_types::InvalidDnsNameError),
    /// The TLS handshake failed.
    Tls(std::io::Error),
    /// HTTP failed on the connection.
    Http(hyper::Error),
    /// No answer within `webhook_timeout_secs`.
    Timeout,
    /// An answer that is not 2xx.
    Status(u16),
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeliveryError::Sign(e) => write!(f, "signing: {e}"),
            DeliveryError::Request(e) => write!(f, "request: {e}"),
            DeliveryError::Connect(e) => write!(f, "connect: {e}"),
            DeliveryError::ServerName(e) => write!(f, "server name: {e}"),
            DeliveryError::Tls(e) => write!(f, "TLS: {e}"),
            DeliveryError::Http(e) => write!(f, "HTTP: {e}"),
            DeliveryError::Timeout => f.write_str("timed out"),
            DeliveryError::Status(status) => write!(f, "answered {status}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::EndReason;

    #[test]
    fn urls_parse_and_bad_ones_say_why() {
        let t = Target::parse("http://127.0.0.1:9000/hook?x=1").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port), (false, "127.0.0.1", 9000));
        assert_eq!(t.path, "/hook?x=1");
        let t = Target::parse("https://hooks.example.com").unwrap();
        assert_eq!((t.tls, t.port, t.path.as_str()), (true, 443, "/"));
        let t = Target::parse("http://[::1]:80/").unwrap();
        assert_eq!(t.host, "::1");
        assert!(Target::parse("ftp://x/").is_err());
        assert!(Target::parse("http://user:pw@x/").is_err());
        assert!(Target::parse("not a url").is_err());
    }

    #[test]
    fn bodies_name_the_event_room_and_participant() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let b = HookBody::of(
            &Lifecycle::Left {
                room: "r".into(),
                id: "p1".into(),
                name: Some("alice".into()),
                reason: EndReason::Deleted,
            },
            at,
        )
        .unwrap();
        let j = serde_json::to_value(&b).unwrap();
        assert_eq!(j["event"], "participant_left");
        assert_eq!(j["room"]["name"], "r");
        assert_eq!(j["participant"]["name"], "alice");
        assert_eq!(j["reason"], "deleted");
        assert_eq!(j["created_at"], 1_700_000_000.0);
        assert!(HookBody::of(
            &Lifecycle::Connected {
                room: "r".into(),
                id: "p".into()
            },
            at
        )
        .is_none());
        for n in HookEvent::NAMES {
            assert_eq!(HookEvent::from_name(n).unwrap().name(), n);
        }
    }

    #[test]
    fn signatures_carry_the_body_hash_and_verify_with_the_key() {
        let secret = Secret::from("0123456789abcdef0123456789abcdef");
        let auth = signature("k1", &secret, b"{}").unwrap();
        let token = auth.strip_prefix("Bearer ").unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::HS256);
        v.set_required_spec_claims(&["exp"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(
            token,
            &jsonwebtoken::DecodingKey::from_secret(secret.expose().as_bytes()).unwrap(),
            &v,
        )
        .unwrap();
        assert_eq!(data.header.kid.as_deref(), Some("k1"));
        use base64::Engine as _;
        let want = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(b"{}"));
        assert_eq!(data.claims["sha256"], want.as_str());
    }
}
