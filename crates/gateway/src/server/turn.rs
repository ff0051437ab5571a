//! The embedded TURN server ([`secrelay_turn`]) as `secrelay serve` runs it: started beside
//! the media workers when a `turn_*` listener is configured, its only peer the gateway's own
//! media address (no open relay); credentials minted per participant and handed out in the
//! answers' `Link` headers and by `GET /rooms/{room}/ice-servers`; TLS connections on the HTTPS
//! port that speak TURN handed to it ([`tell_apart`]); its counters in `/metrics`.
//!
//! TURN over TLS on the HTTPS port is told apart after the handshake, not by SNI or by ALPN
//! alone: Chromium (libwebrtc) offers no ALPN on a `turns:` connection, and browsers' HTTPS
//! always offers `h2`/`http/1.1`. So a connection that chose `h2` or `http/1.1` is HTTPS at
//! once, one that chose `stun.turn` (RFC 7443) is TURN, and one that chose none is TURN when
//! its first byte has the top two bits clear (a STUN message: every TURN client's first message
//! is an Allocate or a Binding request), else HTTPS (a method name starts with a letter).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::encoding::DescriptorEncoder;
use secrelay_turn::core::{CoreConfig, Peer};
use secrelay_turn::{QuotaLimits, TurnConfig, TurnServer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use zeroize::Zeroizing;

use super::stats::{counter, gauge, labelled_counters};
use super::{Gateway, ServeConfig, StartError};

/// The TURN server and what the signaling needs to hand out its URLs and credentials.
pub(crate) struct TurnService {
    server: TurnServer,
    host: Option<String>,
    fallback_host: String,
    udp_port: Option<u16>,
    tcp_port: Option<u16>,
    tls_port: Option<u16>,
    ttl: u64,
}

impl std::fmt::Debug for TurnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnService")
            .field("server", &self.server)
            .field("tls_port", &self.tls_port)
            .finish_non_exhaustive()
    }
}

/// A host for a URL: an IPv6 address in brackets.
fn url_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

/// The gateway's media address as clients name it, and as this host reaches it.
fn media_peer(gateway: &Gateway) -> Peer {
    let bound = gateway.udp_addr();
    let local = if bound.ip().is_unspecified() {
        SocketAddr::new(secrelay_turn::server::loopback_of(bound.ip()), bound.port())
    } else {
        bound
    };
    Peer {
        advertised: gateway.candidate(),
        local,
    }
}

impl TurnService {
    /// Starts the TURN server when `config` asks for one; `https` is the bound HTTPS address
    /// (the `turns:` URLs' port when `turn_tls`).
    pub(crate) fn start(
        config: &ServeConfig,
        gateway: &Gateway,
        https: Option<SocketAddr>,
    ) -> Result<Option<Arc<TurnService>>, StartError> {
        if !config.turn_enabled() {
            return Ok(None);
        }
        let relay_ports = config
            .turn_relay_port_range()
            .map_err(|e| StartError(e.0))?;
        let secret = match &config.turn_secret {
            Some(s) => Zeroizing::new(s.expose().as_bytes().to_vec()),
            None => Zeroizing::new(super::auth::Secret::random().expose().as_bytes().to_vec()),
        };
        let peer = media_peer(gateway);
        let server = TurnServer::start(TurnConfig {
            udp: config.turn_udp,
            tcp: config.turn_tcp,
            threads: config.turn_threads,
            relay_ports,
            core: CoreConfig {
                peers: vec![peer],
                relayed_ip: Some(peer.advertised.ip()),
                max_lifetime: Duration::from_secs(config.turn_max_lifetime_secs),
                max_permissions: 8,
                max_channels: 8,
            },
            quotas: QuotaLimits {
                total: config.turn_max_allocations,
                per_identity: config.turn_allocations_per_credential,
                per_source: config.turn_allocations_per_source,
            },
            secret,
            realm: config.turn_realm.clone(),
            stream_queue: 256,
            // With the media workers: off where they are told to use recvmmsg/sendmmsg.
            io_uring: !matches!(
                config.media_io_setting(),
                Ok(Some(super::config::MediaIo::Mmsg))
            ),
            gather: Duration::from_micros(config.turn_gather_us),
        })
        .map_err(|e| StartError(format!("TURN: {e}")))?;
        tracing::info!(udp = ?server.udp_addr(), tcp = ?server.tcp_addr(), tls = config.turn_tls, peer = %peer.advertised, io_uring_shards = server.io_uring_shards(), "TURN open");
        Ok(Some(Arc::new(TurnService {
            host: config.turn_host.clone(),
            fallback_host: url_host(gateway.candidate().ip()),
            udp_port: server.udp_addr().map(|a| a.port()),
            tcp_port: server.tcp_addr().map(|a| a.port()),
            tls_port: https.filter(|_| config.turn_tls).map(|a| a.port()),
            ttl: config.turn_credential_ttl_secs,
            server,
        })))
    }

    /// The TURN server.
    pub(crate) fn server(&self) -> &TurnServer {
        &self.server
    }

    /// The URLs and a fresh credential for `identity`; `host` is the host the client's request
    /// named, used unless `turn_host` is set.
    pub(crate) fn ice_servers(&self, host: Option<&str>, identity: &str) -> IceServers {
        let host = self.host.as_deref().or(host).unwrap_or(&self.fallback_host);
        let mut urls = Vec::new();
        if let Some(p) = self.udp_port {
            urls.push(format!("turn:{host}:{p}?transport=udp"));
        }
        if let Some(p) = self.tcp_port {
            urls.push(format!("turn:{host}:{p}?transport=tcp"));
        }
        if let Some(p) = self.tls_port {
            urls.push(format!("turns:{host}:{p}?transport=tcp"));
        }
        let expires = secrelay_turn::Now::current().unix + self.ttl;
        let m = self.server.credentials().mint(identity, expires);
        IceServers {
            urls,
            username: m.username,
            credential: m.password,
            expires,
        }
    }

    /// Serves a TLS connection of the HTTPS listener that turned out to speak TURN.
    pub(crate) async fn serve_stream<S>(&self, stream: S, peer: SocketAddr, prefix: &[u8])
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        self.server.serve_stream(stream, peer, prefix).await;
    }

    /// Stops the TURN server.
    pub(crate) fn stop(&self) {
        self.server.stop();
    }
}

/// TURN URLs and one credential for them.
pub(crate) struct IceServers {
    pub urls: Vec<String>,
    pub username: String,
    pub credential: Zeroizing<String>,
    pub expires: u64,
}

impl IceServers {
    /// `Link` header values (RFC 9725 §4.6), one per URL.
    pub(crate) fn links(&self) -> Vec<String> {
        self.urls
            .iter()
            .map(|u| {
                format!(
                    "<{u}>; rel=\"ice-server\"; username=\"{}\"; credential=\"{}\"; credential-type=\"password\"",
                    self.username,
                    self.credential.as_str()
                )
            })
            .collect()
    }

    /// The JSON the room page passes to `RTCPeerConnection` (`iceServers`), with the expiry.
    pub(crate) fn json(&self) -> serde_json::Value {
        let servers = if self.urls.is_empty() {
            Vec::new()
        } else {
            vec![serde_json::json!({
                "urls": self.urls,
                "username": self.username,
                "credential": self.credential.as_str(),
            })]
        };
        serde_json::json!({ "iceServers": servers, "expires": self.expires })
    }
}

/// The identity a credential is minted for: the characters of `name` a username can carry
/// plainly (letters, digits, `.`, `_`, `@`, `-`, at most 64), else a random one.
pub(crate) fn identity(name: Option<&str>) -> String {
    let clean: String = name
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
        .take(64)
        .collect();
    if clean.is_empty() {
        let mut b = [0u8; 6];
        let _ = getrandom::fill(&mut b);
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!("anon-{hex}")
    } else {
        clean
    }
}

/// The host of a request's authority (`example.com:443` → `example.com`, `[::1]:8443` →
/// `[::1]`), if it is one a URL can carry.
pub(crate) fn request_host(authority: &str) -> Option<String> {
    let a: axum::http::uri::Authority = authority.parse().ok()?;
    let host = a.host();
    (!host.is_empty()).then(|| host.to_owned())
}

/// What an HTTPS connection turned out to be.
pub(crate) enum Hello<S> {
    /// TURN, with the bytes already read.
    Turn(S, Vec<u8>),
    /// HTTP, the bytes already read put back in front.
    Http(Prefixed<S>),
    /// Nothing came within the deadline, or the connection closed.
    Closed,
}

/// Tells a TLS connection's TURN from its HTTP (see the module's documentation): by ALPN, or
/// by its first byte, waiting at most `wait` for it.
pub(crate) async fn tell_apart<S: AsyncRead + Unpin>(
    mut stream: S,
    alpn: Option<&[u8]>,
    wait: Duration,
) -> Hello<S> {
    match alpn {
        Some(b"stun.turn") => return Hello::Turn(stream, Vec::new()),
        Some(_) => return Hello::Http(Prefixed::new(stream, Vec::new())),
        None => {}
    }
    let mut first = vec![0u8; 2048];
    match tokio::time::timeout(wait, stream.read(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {
            first.truncate(n);
            if first[0] & 0xC0 == 0 {
                Hello::Turn(stream, first)
            } else {
                Hello::Http(Prefixed::new(stream, first))
            }
        }
        _ => Hello::Closed,
    }
}

/// A stream whose first bytes were read already: they are read again first.
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(inner: S, prefix: Vec<u8>) -> Prefixed<S> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: super::linger::IntoTcp> super::linger::IntoTcp for Prefixed<S> {
    fn into_tcp(self) -> tokio::net::TcpStream {
        self.inner.into_tcp()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The TURN server's counters in `/metrics`.
#[derive(Debug)]
pub(crate) struct TurnCollector(pub Arc<TurnService>);

impl prometheus_client::collector::Collector for TurnCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.0.server.stats();
        gauge(
            &mut e,
            "secrelay_turn_allocations",
            "TURN allocations held now",
            self.0.server.allocations() as u64,
        )?;
        counter(
            &mut e,
            "secrelay_turn_allocations_made",
            "TURN allocations made",
            s.allocations_made.load(Relaxed),
        )?;
        labelled_counters(
            &mut e,
            "secrelay_turn_allocations_ended",
            "TURN allocations ended, by how (expired: no Refresh in time; deleted: the client's Refresh with lifetime 0; closed: its TCP or TLS connection closed)",
            "how",
            &s.ends(),
        )?;
        counter(
            &mut e,
            "secrelay_turn_challenges",
            "TURN requests without a credential answered 401 with a nonce (every client's first step)",
            s.challenges.load(Relaxed),
        )?;
        labelled_counters(
            &mut e,
            "secrelay_turn_refusals",
            "TURN requests refused, by reason (bad_request 400; bad_username, expired_credential, bad_integrity 401; forbidden_peer 403: a peer other than the gateway's media address; unknown_attribute 420; allocation_mismatch 437; stale_nonce 438; address_family 440/443; wrong_credentials 441; unsupported_transport 442; quota_credential, quota_source, quota_total 486; no_relay_port, capacity 508; channel_conflict 400)",
            "reason",
            &s.refusals(),
        )?;
        labelled_counters(
            &mut e,
            "secrelay_turn_drops",
            "TURN packets dropped without an answer, by reason",
            "reason",
            &s.drops(),
        )?;
        labelled_counters(
            &mut e,
            "secrelay_turn_relayed_packets",
            "Packets the TURN relay carried, by direction (to_peer: from clients to the gateway's media socket; to_client: back)",
            "direction",
            &[
                ("to_peer", s.to_peer_packets.load(Relaxed)),
                ("to_client", s.to_client_packets.load(Relaxed)),
            ],
        )?;
        labelled_counters(
            &mut e,
            "secrelay_turn_relayed_bytes",
            "Payload bytes the TURN relay carried, by direction",
            "direction",
            &[
                ("to_peer", s.to_peer_bytes.load(Relaxed)),
                ("to_client", s.to_client_bytes.load(Relaxed)),
            ],
        )?;
        gauge(
            &mut e,
            "secrelay_turn_streams_open",
            "TURN TCP and TLS connections open now",
            s.streams_open.load(Relaxed),
        )?;
        gauge(
            &mut e,
            "secrelay_turn_io_uring_threads",
            "TURN threads whose UDP sockets go through an io_uring (the others use epoll)",
            self.0.server.io_uring_shards() as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_identities() {
        assert_eq!(
            request_host("example.com:8443").as_deref(),
            Some("example.com")
        );
        assert_eq!(request_host("[::1]:8443").as_deref(), Some("[::1]"));
        assert_eq!(request_host("10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(request_host("bad host"), None);
        assert_eq!(identity(Some("alice@example.com")), "alice@example.com");
        assert_eq!(identity(Some("a:b c\"d")), "abcd");
        assert!(identity(None).starts_with("anon-"));
        assert!(identity(Some("::")).starts_with("anon-"));
    }

    #[tokio::test]
    async fn turn_and_http_are_told_apart_by_alpn_or_first_byte() {
        let wait = Duration::from_millis(200);
        let stun = [0u8, 3, 0, 0, 0x21, 0x12, 0xa4, 0x42];
        assert!(matches!(tell_apart(&stun[..], None, wait).await, Hello::Turn(_, b) if b == stun));
        let http = b"GET / HTTP/1.1\r\n\r\n";
        let Hello::Http(mut p) = tell_apart(&http[..], None, wait).await else {
            panic!()
        };
        let mut back = Vec::new();
        p.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, http, "the bytes read to decide are read again");
        assert!(matches!(
            tell_apart(&stun[..], Some(b"h2"), wait).await,
            Hello::Http(_)
        ));
        assert!(
            matches!(tell_apart(&http[..], Some(b"stun.turn"), wait).await, Hello::Turn(_, b) if b.is_empty())
        );
        assert!(matches!(
            tell_apart(&b""[..], None, wait).await,
            Hello::Closed
        ));
    }
}
