//! The signaling's accept loops: plain HTTP and HTTPS on the signaling runtime's threads,
//! apart from the media workers.
//!
//! Each accepted connection takes a slot of `max_connections`, else it is closed at once. On
//! the HTTPS port it also takes a slot of `tls_max_handshakes` for its handshake, which must
//! finish within `tls_handshake_timeout_secs`: a flood of half-open handshakes or a client that
//! trickles its bytes (slowloris) costs at most that many handshakes' state for at most that
//! long, and every handshake that does not finish is counted by reason. A finished
//! connection is served by hyper (HTTP/1.1, or HTTP/2 when ALPN chose `h2`) with a deadline
//! for each request's headers; the router adds one for the body and the answer. The first
//! request must begin within `http_request_timeout_secs` of the connection (of its handshake
//! on HTTPS), else the connection is closed and counted: hyper's header deadline starts only
//! once it has told HTTP/1.1 from HTTP/2, which takes a first byte, so without it a client
//! that connects and sends nothing would hold one of `max_connections` slots for ever. A
//! connection hyper is done with drains what its client still sends before it closes
//! ([`super::linger`]), so an answer sent before the request was read (`413`) is not lost to
//! a reset. On an HTTPS listener shared with TURN (`turn_tls`), a finished handshake is first
//! told apart ([`super::turn::tell_apart`]): a TURN client's connection goes to the TURN
//! server, still holding its connection slots.

use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::config::ServeConfig;
use super::http::CorsOrigins;
use super::linger::{self, Linger};
use super::per_source::{PerSource, SourceSlot};
use super::stats::{GatewayStats, TlsHandshakeLabels};
use super::tls::{version_name, Tls, TlsFailure};
use super::turn::{tell_apart, Hello, TurnService};

/// What the server's listeners share: the `max_connections` slots and the per-source limits.
#[derive(Clone)]
pub(crate) struct Capacity {
    pub connections: Arc<Semaphore>,
    pub sources: Arc<PerSource>,
}

/// What every connection of one listener shares.
struct Shared {
    app: Router,
    stats: Arc<GatewayStats>,
    builder: auto::Builder<TokioExecutor>,
    connections: Arc<Semaphore>,
    /// The per-source limits, shared with the server's other listener.
    sources: Arc<PerSource>,
    handshakes: Arc<Semaphore>,
    handshake_timeout: Duration,
    /// `http_request_timeout_secs`: also how long a connection may wait for its first byte.
    request_timeout: Duration,
    tls: Option<(TlsAcceptor, Arc<Tls>)>,
    /// For the `429`s made here, before the router's CORS layer.
    cors: CorsOrigins,
    /// Closed connections draining what their clients still send (`linger`), at most
    /// `max_connections` at once.
    lingering: Arc<Semaphore>,
    /// `max_body_bytes`: an HTTP/2 request declaring more is drained, then refused here.
    max_body: usize,
    /// The TURN server TLS connections that speak TURN go to (`turn_tls`).
    turn: Option<Arc<TurnService>>,
}

/// How long a shutdown waits for the connections in progress to finish their requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

fn builder(config: &ServeConfig) -> auto::Builder<TokioExecutor> {
    let timeout = Duration::from_secs_f64(config.http_request_timeout_secs);
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    // Over TLS, whatever ALPN chose; on plain HTTP, HTTP/2 only with prior knowledge (h2c).
    // hyper tells them apart by the preface. Without `http2`: HTTP/1.1 only.
    if !config.http2 {
        b = b.http1_only();
    }
    b
}

/// Serves `listener` (over TLS when `tls` says so, sharing it with TURN when it names a TURN
/// server) until `shutdown` turns true, then lets the connections in progress finish (at most
/// [`SHUTDOWN_GRACE`]).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<(Arc<Tls>, Option<Arc<TurnService>>)>,
    config: Arc<ServeConfig>,
    stats: Arc<GatewayStats>,
    Capacity {
        connections,
        sources,
    }: Capacity,
    mut shutdown: watch::Receiver<bool>,
) {
    let shared = Arc::new(Shared {
        app,
        stats,
        builder: builder(&config),
        connections,
        sources,
        handshakes: Arc::new(Semaphore::new(config.tls_max_handshakes)),
        handshake_timeout: Duration::from_secs_f64(config.tls_handshake_timeout_secs),
        request_timeout: Duration::from_secs_f64(config.http_request_timeout_secs),
        turn: tls.as_ref().and_then(|(_, turn)| turn.clone()),
        tls: tls.map(|(t, _)| (TlsAcceptor::from(t.server_config()), t)),
        cors: CorsOrigins::new(&config.cors_origins),
        lingering: Arc::new(Semaphore::new(config.max_connections)),
        max_body: config.max_body_bytes,
    });
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((tcp, peer)) => admit(&shared, tcp, peer, graceful.watcher()),
            Err(e) => {
                // Out of file descriptors (EMFILE/ENFILE) or a connection reset before accept:
                // nothing to do for that one; give the system a moment on resource errors.
                tracing::debug!(error = %e, "accept");
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                ) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open after the shutdown grace period");
    }
}

/// The body of [`TOO_MANY_CONNECTIONS`]; a macro so that the response can be built with
/// `concat!` and its length checked when compiling.
macro_rules! too_many_connections_body {
    () => {
        "too many connections open from this address (max_connections_per_source)"
    };
}

/// What a plain HTTP connection over its source's limit is told before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = concat!(
    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n",
    "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 72\r\n",
    "Connection: close\r\n\r\n",
    too_many_connections_body!()
)
.as_bytes();
// The Content-Length above is written by hand: editing the body without it fails the build.
const _: () = assert!(too_many_connections_body!().len() == 72);

/// Takes one accepted connection: a slot of its source's and one of the server's, or a
/// refusal, then a task of its own.
fn admit(shared: &Arc<Shared>, tcp: TcpStream, peer: SocketAddr, watcher: Watcher) {
    let Some(source_slot) = shared.sources.connect(peer.ip()) else {
        shared
            .stats
            .tls
            .source_connections_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(source = %peer.ip(), "connection over max_connections_per_source");
        if shared.tls.is_none() {
            // Best effort, never waiting: the socket's send buffer is empty.
            let _ = tcp.try_write(TOO_MANY_CONNECTIONS);
        }
        return;
    };
    let Ok(conn_slot) = shared.connections.clone().try_acquire_owned() else {
        match shared.tls {
            Some(_) => shared.stats.tls.failed(TlsFailure::Busy),
            None => {
                shared
                    .stats
                    .tls
                    .http_refused_busy
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    };
    let _ = tcp.set_nodelay(true);
    let shared = shared.clone();
    shared
        .stats
        .tls
        .connections_open
        .fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let source = Arc::new(source_slot);
        match &shared.tls {
            None => {
                let io = first_byte_within(&shared, Linger::new(tcp, shared.lingering.clone()));
                serve_connection(&shared, io, source, peer, watcher).await
            }
            Some((acceptor, _)) => {
                if let Some(stream) = handshake(&shared, acceptor, tcp, peer).await {
                    serve_tls(&shared, stream, source, peer, watcher).await;
                }
            }
        }
        shared
            .stats
            .tls
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
        drop(conn_slot);
    });
}

/// A finished TLS connection: HTTPS, or on a listener shared with TURN, TURN when it speaks it.
async fn serve_tls(
    shared: &Arc<Shared>,
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    source: Arc<SourceSlot>,
    peer: SocketAddr,
    watcher: Watcher,
) {
    let stream = match &shared.turn {
        None => stream,
        Some(turn) => {
            let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            match tell_apart(stream, alpn.as_deref(), shared.request_timeout).await {
                Hello::Turn(stream, prefix) => {
                    turn.serve_stream(stream, peer, &prefix).await;
                    return;
                }
                Hello::Http(stream) => {
                    let stream = Linger::new(stream, shared.lingering.clone());
                    let io = first_byte_within(shared, stream);
                    return serve_connection(shared, io, source, peer, watcher).await;
                }
                Hello::Closed => {
                    shared
                        .stats
                        .tls
                        .http_idle_closed
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    let stream = Linger::new(stream, shared.lingering.clone());
    let io = first_byte_within(shared, stream);
    serve_connection(shared, io, source, peer, watcher).await;
}

/// The TLS handshake of one connection, within its deadline; counted either way.
async fn handshake(
    shared: &Shared,
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let tls = &shared.stats.tls;
    let Ok(slot) = shared.handshakes.clone().try_acquire_owned() else {
        tls.failed(TlsFailure::Busy);
        return None;
    };
    tls.in_flight.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let r = tokio::time::timeout(shared.handshake_timeout, acceptor.accept(tcp)).await;
    tls.in_flight.fetch_sub(1, Ordering::Relaxed);
    drop(slot);
    match r {
        Ok(Ok(stream)) => {
            let c = stream.get_ref().1;
            let labels = TlsHandshakeLabels {
                version: version_name(c.protocol_version()),
                resumed: matches!(c.handshake_kind(), Some(rustls::HandshakeKind::Resumed)),
                suite: c
                    .negotiated_cipher_suite()
                    .and_then(|s| s.suite().as_str())
                    .unwrap_or("other"),
                group: c
                    .negotiated_key_exchange_group()
                    .and_then(|g| g.name().as_str())
                    .unwrap_or("none"),
                alpn: match c.alpn_protocol() {
                    Some(b"h2") => "h2",
                    Some(b"http/1.1") => "http/1.1",
                    Some(b"stun.turn") => "stun.turn",
                    Some(_) => "other",
                    None => "none",
                },
            };
            tls.finished(labels, started.elapsed());
            Some(stream)
        }
        Ok(Err(e)) => {
            let why = TlsFailure::of_io(&e);
            tracing::debug!(%peer, reason = why.name(), error = %e, "TLS handshake failed");
            tls.failed(why);
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            tls.failed(TlsFailure::Timeout);
            None
        }
    }
}

fn first_byte_within<I>(shared: &Arc<Shared>, io: I) -> TokioIo<FirstByteDeadline<I>> {
    TokioIo::new(FirstByteDeadline {
        io,
        deadline: Some(Box::pin(tokio::time::sleep(shared.request_timeout))),
        shared: shared.clone(),
    })
}

/// A connection whose reads fail with `TimedOut` if no byte has arrived by the deadline (then
/// counted in `http_idle_closed`); after the first byte it is the connection itself.
struct FirstByteDeadline<I> {
    io: I,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    shared: Arc<Shared>,
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstByteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else {
            return r;
        };
        match r {
            Poll::Ready(Ok(())) if buf.filled().len() > before => this.deadline = None,
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                this.deadline = None;
                this.shared
                    .stats
                    .tls
                    .http_idle_closed
                    .fetch_add(1, Ordering::Relaxed);
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request began within http_request_timeout_secs",
                )));
            }
            _ => {}
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstByteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serves HTTP on one connection (plain or TLS) until it closes; each request first takes a
/// token of its source's (`requests_per_source`).
async fn serve_connection<I>(
    shared: &Shared,
    io: TokioIo<I>,
    source: Arc<SourceSlot>,
    peer: SocketAddr,
    watcher: Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let app = shared.app.clone();
    let sources = shared.sources.clone();
    let stats = shared.stats.clone();
    let cors = shared.cors.clone();
    let (max_body, deadline) = (shared.max_body, shared.request_timeout);
    let client = super::http::ClientAddr(peer.ip());
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(client);
        let limited = sources.request(&source).err().map(|wait| {
            stats.http_refused.fetch_add(1, Ordering::Relaxed);
            stats
                .tls
                .source_requests_limited
                .fetch_add(1, Ordering::Relaxed);
            let mut r = too_many_requests(wait);
            cors.add_headers(req.headers().get(hyper::header::ORIGIN), r.headers_mut());
            r
        });
        let oversized = linger::oversized_h2(&req, max_body);
        let (app, stats, cors) = (app.clone(), stats.clone(), cors.clone());
        async move {
            match (limited, oversized) {
                (Some(refused), _) => Ok(refused),
                (None, Some(declared)) => {
                    stats.http_refused.fetch_add(1, Ordering::Relaxed);
                    let origin = req.headers().get(hyper::header::ORIGIN).cloned();
                    linger::drain_body(req.into_body(), deadline).await;
                    let mut r = linger::too_large(max_body, declared);
                    cors.add_headers(origin.as_ref(), r.headers_mut());
                    Ok(r)
                }
                (None, None) => app.oneshot(req.map(axum::body::Body::new)).await,
            }
        }
    });
    let conn = shared.builder.serve_connection(io, service).into_owned();
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

/// `429` for a source that spent its `requests_per_source`, with the whole seconds until it may
/// ask again.
fn too_many_requests(wait: Duration) -> axum::response::Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut r = axum::response::Response::new(axum::body::Body::from(
        "too many requests from this address (requests_per_source)\n",
    ));
    *r.status_mut() = hyper::StatusCode::TOO_MANY_REQUESTS;
    let h = r.headers_mut();
    h.insert(hyper::header::RETRY_AFTER, secs.into());
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
