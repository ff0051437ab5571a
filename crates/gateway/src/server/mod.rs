//! The server: packet workers on one UDP port, HTTP signaling and operations, shutdown.
//!
//! * [`Gateway`]: the workers (one per core by default, each a thread with its own
//!   SO_REUSEPORT socket on the shared port and a [`Shard`] that decides everything about its
//!   rooms) and the handle the control plane talks to them through. Rooms are hashed to
//!   workers; a datagram the kernel delivers to another worker's socket is handed to the owner
//!   through a bounded queue, with the class it was given when it was read.
//! * `http`: WHIP, WHEP, room joins, the JSON API, `/metrics` and `/healthz` (axum), served
//!   over HTTPS ([`tls`]: rustls on aws-lc-rs) and, when asked for, plain HTTP, by accept loops
//!   that bound and time out what a connection may cost before it is useful.
//! * [`Server`]: both, started together, stopped together (stop admitting, close_notify to
//!   every participant, send it, exit).
//! * [`ServeConfig`]: the configuration (TOML keys and command-line flags).
//! * [`Totals`], [`HistogramSnapshot`]: what the server counted, summed over its workers.
//!
//! The workers, their UDP batches, the routing directory and the stats' internals are private:
//! an embedder starts a [`Server`] (or a [`Gateway`] without HTTP), talks to it through these
//! handles, and drives a [`Shard`] directly when it wants the gateway's decisions without its
//! I/O.

pub mod auth;
pub mod banner;
mod call_state;
mod cluster;
pub mod config;
mod directory;
pub mod error;
mod http;
mod interfaces;
mod linger;
mod listener;
mod ng;
mod ng_call;
mod ng_codecs;
mod ng_gate;
mod ng_media;
mod ng_sdp;
mod ng_stats;
mod ng_webrtc;
mod node_pipes;
pub mod per_source;
mod ports;
pub mod process;
mod recording;
mod stats;
pub mod tls;
mod tls_hmac;
mod turn;
pub mod webhooks;
mod xdp;

/// Entry points of the fuzz targets (`fuzz/`) into parsing that is otherwise private: not an
/// API.
#[doc(hidden)]
pub mod fuzzing {
    use std::sync::{Arc, OnceLock};

    /// The HTTP API's JSON request bodies, as the handlers parse and check them: `which`
    /// picks one (0 `PATCH /api/rooms/{room}`, 1 `PUT …/layer`, 2 `POST
    /// /rooms/{room}/rtp/offer`, 3 `PATCH /api/rooms/{room}/participants/{id}`, 4 `POST
    /// …/participants/{id}/media`); what it asks for, or the reason a client gets 400.
    pub fn http_json_body(which: u8, body: &[u8]) -> Result<String, super::ApiError> {
        super::http::parse_json_body(which, body)
    }

    /// A call's state as a node reads it from the cluster's directory for call `c1`
    /// (`sealed`: under a fixed key, else in clear): the call-id and the members' count it
    /// holds, or why it is refused.
    pub fn call_state(
        sealed: bool,
        text: &str,
    ) -> Result<(String, usize), super::call_state::StateError> {
        static KEY: OnceLock<super::call_state::Sealer> = OnceLock::new();
        let sealer = if sealed {
            KEY.get_or_init(|| {
                super::call_state::Sealer::with_key(&"5a".repeat(32)).expect("a 64-hex-digit key")
            })
        } else {
            &super::call_state::Sealer::Clear
        };
        let state = sealer.open("c1", text)?;
        Ok((
            state.call_id.clone(),
            state.members.len() + state.pins().len(),
        ))
    }

    /// A node pipe's datagram as the receiving node reads it (`kind` 0), opened with a fixed
    /// key (the packet's length, or `None` when its header or tag does not check), or a link's
    /// control frame (`kind` 1: its message, or why it is none).
    pub fn node_pipe(kind: u8, data: &[u8]) -> Result<String, String> {
        use super::node_pipes::{data as data_frames, datagram, parse_control, Control};
        if kind & 1 == 1 {
            return match parse_control(data)? {
                // Its messages read as the receiving node reads them.
                Control::Data { msgs, .. } => {
                    let (msgs, bad) = data_frames::messages(msgs);
                    Ok(format!("{} messages, {bad} unreadable", msgs.len()))
                }
                c => Ok(format!("{c:?}")),
            };
        }
        static KEY: OnceLock<datagram::LinkKey> = OnceLock::new();
        let key = KEY.get_or_init(|| datagram::LinkKey::new(&[0x5a; datagram::KEY_LEN]));
        let h = datagram::Header::read(data).ok_or("no header")?;
        let mut d = data.to_vec();
        let r = key.open(&h, &mut d).ok_or("bad tag")?;
        Ok(format!("{h:?}: {} bytes", r.len()))
    }

    /// An `Authorization` value as the signaling resolves it, against a policy with one API
    /// key (`fuzz` = [`FUZZ_API_SECRET`]), an admin key and a room token (room `tokened`,
    /// token `room-token`): the caller it names (its identity and grants), or the refusal's
    /// reason. `room` is the room the request names, if any.
    pub fn access_credential(value: &[u8], room: Option<&str>) -> Result<String, &'static str> {
        static POLICY: OnceLock<super::auth::Policy> = OnceLock::new();
        let policy = POLICY.get_or_init(|| {
            let mut c = super::ServeConfig::default();
            c.api_keys.insert("fuzz".into(), FUZZ_API_SECRET.into());
            c.admin_key = Some("fuzz-admin-key-0123456789abcdef0123".into());
            c.rooms.insert(
                "tokened".into(),
                super::RoomConfig {
                    token: Some("room-token".into()),
                    open: false,
                },
            );
            super::auth::Policy::new(&c)
        });
        let caller = policy.identify(Some(value), room).map_err(|f| f.name())?;
        if let Some(r) = room {
            // Every decision answers, whatever the caller.
            for need in [
                super::auth::Need::Publish,
                super::auth::Need::Subscribe,
                super::auth::Need::Join,
                super::auth::Need::Admin,
                super::auth::Need::List,
                super::auth::Need::Own(Some("x")),
                super::auth::Need::Own(None),
            ] {
                let _ = policy.allow(&caller, r, need);
            }
            let _ = policy.reach(&caller, r);
        }
        let _ = (
            policy.allow_room_list(&caller),
            policy.allow_metrics(&caller),
        );
        Ok(format!("{caller:?}"))
    }

    /// The secret of the fuzz target's API key (`fuzz`), for seeds signed with it.
    pub const FUZZ_API_SECRET: &str = "fuzz-secret-0123456789abcdef0123456789";

    /// Bytes from a TCP client into a fresh TLS server connection of the HTTPS front, made as
    /// `secrelay serve` makes it (its default configuration: TLS 1.3 and 1.2, ECDSA P-256
    /// from a throw-away CA, tickets, ALPN): records read and processed in the pieces `cuts`
    /// gives, its replies drained. Ok with the handshake's state, or the failure's name as
    /// the listener counts it (`secrelay_tls_handshake_failures_total{reason}`).
    pub fn tls_front(data: &[u8], cuts: &[u8]) -> Result<&'static str, &'static str> {
        static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
        let config = CONFIG.get_or_init(|| {
            super::tls::Tls::new(&super::ServeConfig::default())
                .expect("the default HTTPS configuration builds")
                .server_config()
        });
        let mut conn = rustls::ServerConnection::new(config.clone())
            .map_err(|e| super::tls::TlsFailure::of_rustls(&e).name())?;
        let mut rest = data;
        let mut cut = cuts.iter().cycle();
        let mut sink = Vec::new();
        while !rest.is_empty() {
            let n = match cut.next() {
                Some(&c) => usize::from(c).clamp(1, rest.len()),
                None => rest.len(),
            };
            let (piece, after) = rest.split_at(n);
            rest = after;
            let mut r = piece;
            while !r.is_empty() {
                match conn.read_tls(&mut r) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => return Err(super::tls::TlsFailure::of_io(&e).name()),
                }
                conn.process_new_packets()
                    .map_err(|e| super::tls::TlsFailure::of_rustls(&e).name())?;
                while conn.wants_write() {
                    sink.clear();
                    if conn.write_tls(&mut sink).is_err() {
                        break;
                    }
                }
            }
        }
        Ok(if conn.is_handshaking() {
            "handshaking"
        } else {
            "established"
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The fuzz target's seeds reach past the parsing: a signed token names its caller,
        /// the admin key and the room token theirs.
        #[test]
        fn the_access_fuzz_seeds_name_callers() {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fuzz/seeds/access_token");
            let room = |pick: u8| match pick {
                0 => None,
                1 => Some("lobby"),
                _ => Some("tokened"),
            };
            for (file, want) in [
                ("valid-token-lobby", "seed"),
                ("admin-key", "Admin"),
                ("room-token", "RoomToken"),
            ] {
                let data = std::fs::read(dir.join(file)).unwrap();
                let got = access_credential(&data[1..], room(data[0])).unwrap();
                assert!(got.contains(want), "{file}: {got}");
            }
            assert_eq!(access_credential(b"Bearer x.y.z", None), Err("malformed"));
        }

        #[test]
        fn json_bodies_parse_as_the_handlers_do_and_say_why_not() {
            let ok = http_json_body(0, br#"{"mix": true, "speakers": 3}"#).unwrap();
            assert!(ok.contains("speakers: 3"), "{ok}");
            let e = http_json_body(0, br#"{"speakers": 3}"#).unwrap_err();
            assert!(e.reason().contains("speakers"), "{e}");
            assert_eq!(e.status().as_u16(), 400);
            assert!(http_json_body(1, br#"{"rid": "h"}"#).is_ok());
            let e = http_json_body(2, br#"{"transport": "UDP/TLS/RTP/SAVPF"}"#).unwrap_err();
            assert!(e.reason().contains("transport"), "{e}");
            assert!(http_json_body(2, b"").is_err());
        }

        #[test]
        fn the_tls_front_answers_a_client_hello_and_names_what_is_not_tls() {
            let client = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
            let mut c =
                rustls::ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap())
                    .unwrap();
            let mut hello = Vec::new();
            c.write_tls(&mut hello).unwrap();
            assert_eq!(tls_front(&hello, &[]), Ok("handshaking"));
            // In pieces of 7 and 1 bytes: the same.
            assert_eq!(tls_front(&hello, &[7, 1]), Ok("handshaking"));
            assert_eq!(tls_front(b"GET / HTTP/1.1\r\n\r\n", &[]), Err("not_tls"));
        }
    }
}
mod udp;
mod worker;

pub use call_state::StateError;
pub use cluster::{DirectoryError, HandoverError};
pub use error::ApiError;
pub use ng::ForwardError;
pub use ports::PortError;
pub use worker::Notice;

use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use secrelay_dtls::{Certificate, LocalCertificate};
use secrelay_wire::sdp::Offer;
use tokio::sync::oneshot;

use crate::admission::Shed;
use crate::ice_lite::{Credentials, IceConfig};
use crate::leg::{
    CodecId, RtpConfig, RtpLegOptions, RtpOfferSpec, WebRtcConfig, WebRtcOfferSection,
};
use crate::rtcp::RtcpConfig;
use crate::shard::{ControlError, Shard, ShardConfig};
pub use crate::shard::{
    JoinError, JoinKind, Joined, JoinedRtp, Lifecycle, ParticipantSnapshot, RoomLimits,
    RoomSnapshot, Who,
};
use crate::transcode::MixSettings;
pub use banner::{Banner, BannerReader, Trust};
pub use config::{ConfigError, MediaIo, RoomConfig, ServeConfig};
use directory::Directory;
use http::GatePatch;
use ports::PortPool;
pub use process::BuildInfo;
use secrelay_wire::sdp_rtp::RtpDescription;
use stats::WorkerStats;
pub use stats::{
    GatewayStats, HistogramSnapshot, LegTotals, TlsHandshakeLabels, TlsStats, TlsTotals, Totals,
};
pub use tls::{Tls, TlsCertificateInfo, TlsFailure};
use worker::{Command, Peer, Shared, Worker};

/// Why the server could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// The address the host candidate announces when none is configured: the UDP address if it is
/// specific, else the source address the kernel would use toward the default route (no packet
/// is sent), else loopback.
/// Whether a socket bound on `bound` takes peers that reach it at `ip`: an unspecified IPv6
/// address is dual-stack, an unspecified IPv4 one takes IPv4, a specific one its own family.
fn reaches(bound: IpAddr, ip: IpAddr) -> bool {
    match bound {
        IpAddr::V6(b) if b.is_unspecified() => true,
        b => b.is_ipv4() == ip.is_ipv4(),
    }
}

fn default_announce(udp: SocketAddr) -> IpAddr {
    if !udp.ip().is_unspecified() {
        return udp.ip();
    }
    let probe = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|_| s))
        .and_then(|s| s.local_addr());
    match probe {
        Ok(a) if !a.ip().is_unspecified() => a.ip(),
        _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// The packet workers and the way to reach them.
pub struct Gateway {
    config: ServeConfig,
    shared: Arc<Shared>,
    stats: Arc<GatewayStats>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    udp_addr: SocketAddr,
    candidate: SocketAddr,
    /// Every UDP host candidate (`candidate` first).
    candidates: Vec<SocketAddr>,
    /// The passive ICE-TCP candidates, when `ice_tcp` is set.
    tcp_candidates: Vec<SocketAddr>,
    admitting: AtomicBool,
    /// Viewers joining on each worker now (counted with its participants where the next one
    /// goes).
    joining: Vec<std::sync::atomic::AtomicUsize>,
    fingerprint: String,
    /// Telephony legs' media interfaces (`interfaces`), the first the default.
    interfaces: Vec<interfaces::Interface>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("udp", &self.udp_addr)
            .field("workers", &self.shared.peers.len())
            .finish()
    }
}

/// The DTLS certificate: `cert` and `key` read from their files, else one made now of the
/// configured key type.
fn load_certificate(config: &ServeConfig) -> Result<Certificate, StartError> {
    match (&config.cert, &config.key) {
        (Some(c), Some(k)) => {
            let cert_pem = std::fs::read_to_string(c)
                .map_err(|e| StartError(format!("cert {}: {e}", c.display())))?;
            let key_pem = std::fs::read_to_string(k)
                .map_err(|e| StartError(format!("key {}: {e}", k.display())))?;
            Certificate::from_pem(&cert_pem, &key_pem)
                .map_err(|e| StartError(format!("cert {}: {e}", c.display())))
        }
        _ => {
            let kt = config.key_type().map_err(|e| StartError(e.0))?;
            Certificate::self_signed(kt, "secrelay-gateway")
                .map_err(|e| StartError(format!("generating a {kt} certificate: {e}")))
        }
    }
}

/// The media sockets, one per worker, on the configured address (one port, SO_REUSEPORT),
/// and the address bound.
fn bind_media_sockets(
    config: &ServeConfig,
    n: usize,
) -> Result<(Vec<std::net::UdpSocket>, SocketAddr), StartError> {
    udp::ensure_free(config.udp).map_err(|e| {
        StartError(if e.kind() == std::io::ErrorKind::AddrInUse {
            format!(
                "udp {}: the port is already in use by another process (another \
                 secrelay serve?); give this gateway a media port of its own (--udp, `udp`)",
                config.udp
            )
        } else {
            format!("udp {}: {e}", config.udp)
        })
    })?;
    let first = udp::bind_reuseport(config.udp)
        .map_err(|e| StartError(format!("udp {}: {e}", config.udp)))?;
    if let Some(kept) = udp::capped_receive_buffer(&first) {
        tracing::warn!(
            asked = udp::SHARED_BUFFER,
            kept,
            "the media socket's receive buffer is smaller than asked: the kernel caps it at \
             net.core.rmem_max, and a burst larger than it is dropped before the gateway reads \
             it (raise it: sysctl -w net.core.rmem_max=16777216)"
        );
    }
    let udp_addr = first
        .local_addr()
        .map_err(|e| StartError(format!("udp {}: {e}", config.udp)))?;
    let mut sockets = vec![first];
    for _ in 1..n {
        sockets.push(
            udp::bind_reuseport(udp_addr)
                .map_err(|e| StartError(format!("udp {udp_addr} (worker socket): {e}")))?,
        );
    }
    Ok((sockets, udp_addr))
}

/// The media port's host candidate (`announce`'s, else the bound address's) and all of them:
/// with `announce_ipv6`'s on a dual-stack socket.
fn host_candidates(config: &ServeConfig, udp_addr: SocketAddr) -> (SocketAddr, Vec<SocketAddr>) {
    let candidate = SocketAddr::new(
        config
            .announce
            .unwrap_or_else(|| default_announce(udp_addr)),
        udp_addr.port(),
    );
    // The host candidates: `announce`'s, and `announce_ipv6`'s on a dual-stack socket.
    let mut candidates = vec![candidate];
    candidates.extend(
        config
            .announce_ipv6
            .map(|ip| SocketAddr::new(ip.into(), udp_addr.port()))
            .filter(|c| *c != candidate),
    );
    (candidate, candidates)
}

/// What every worker's shard is made with: our certificate, the WebRTC and telephony legs'
/// settings with their candidates (`candidate` the first host one), RTCP, codecs and room
/// limits.
fn shard_config(
    config: &ServeConfig,
    certificate: &Certificate,
    (candidate, candidates): (SocketAddr, &[SocketAddr]),
    tcp_candidates: &[SocketAddr],
) -> Result<ShardConfig, StartError> {
    Ok(ShardConfig {
        certificate: LocalCertificate::from(certificate),
        webrtc: WebRtcConfig {
            ice: IceConfig {
                consent_timeout: config.consent_timeout(),
                ..IceConfig::default()
            },
            candidates: candidates.to_vec(),
            tcp_candidates: tcp_candidates.to_vec(),
            srtp_profiles: config.profiles().map_err(|e| StartError(e.0))?,
            data_channels: config.data_limits().map_err(|e| StartError(e.0))?,
            ..WebRtcConfig::default()
        },
        rtp: RtpConfig {
            announce: candidate.ip(),
            sdes_suites: config.sdes_profiles().map_err(|e| StartError(e.0))?,
            latch: config.latch().map_err(|e| StartError(e.0))?,
            media_timeout: Duration::from_secs_f64(config.media_timeout_secs),
            strict_source: config.strict_source,
            ..RtpConfig::default()
        },
        rtcp: RtcpConfig {
            interval: Duration::from_secs_f64(config.rtcp_interval_secs),
            ..RtcpConfig::default()
        },
        codecs: secrelay_media::Registry::with_opus(secrelay_media::registry::OpusSettings {
            complexity: config.opus_complexity,
            ..Default::default()
        }),
        limits: RoomLimits {
            members: config.max_participants_per_room,
            reserved_for_authenticated: config.reserved_for_authenticated,
            // Per worker: each keeps the settings of the rooms it owns.
            settings: config.max_room_settings,
        },
    })
}

/// What the workers and the control plane share: the routing directory, the XDP filter (with
/// `xdp`), the telephony ports, the workers' `peers`, the recorder (with `recording_dir`),
/// the admission policy.
fn shared_state(
    config: &ServeConfig,
    udp_addr: SocketAddr,
    media_io: MediaIo,
    peers: Vec<worker::Peer>,
) -> Result<Arc<Shared>, StartError> {
    let (lo, hi) = config.rtp_port_range().map_err(|e| StartError(e.0))?;
    let xdp = if config.xdp.is_empty() {
        None
    } else {
        let attach = config.xdp_attach().map_err(|e| StartError(e.0))?;
        let gate = xdp::Gate::attach(&config.xdp, attach, udp_addr.port(), (lo, hi))
            .map_err(|e| StartError(format!("xdp: {e}{}", xdp::hint(&e.to_string()))))?;
        Some(Arc::new(gate))
    };
    let recorder = match &config.recording_dir {
        Some(dir) => Some(Arc::new(recording::Recorder::start(dir).map_err(|e| {
            StartError(format!("recording_dir {}: {e}", dir.display()))
        })?)),
        None => None,
    };
    Ok(Arc::new(Shared {
        directory: Directory::new(xdp.clone()),
        xsk_interfaces: if media_io == MediaIo::AfXdp {
            config.xdp.clone()
        } else {
            Vec::new()
        },
        node_pipes: std::sync::OnceLock::new(),
        xdp,
        ports: PortPool::new(
            lo,
            hi,
            Duration::from_secs_f64(config.rtp_port_quarantine_secs),
        ),
        bind_ip: udp_addr.ip(),
        peers,
        ended: std::sync::Mutex::default(),
        notices: std::sync::Mutex::default(),
        lifecycle: std::sync::OnceLock::new(),
        lifecycle_dropped: std::sync::atomic::AtomicU64::new(0),
        recorder,
        clips: Default::default(),
        ice_tcp_open: std::sync::atomic::AtomicUsize::new(0),
        placed: std::sync::Mutex::default(),
        admission: config.admission(),
    }))
}

/// With `ice_tcp`: its listener and the TCP candidates (the host candidates it reaches, on its
/// port).
fn ice_tcp_port(
    config: &ServeConfig,
    candidates: &[SocketAddr],
) -> Result<(Option<std::net::TcpListener>, Vec<SocketAddr>), StartError> {
    Ok(match config.ice_tcp {
        Some(a) => {
            let (l, port) =
                worker::bind_ice_tcp(a).map_err(|e| StartError(format!("ice_tcp {a}: {e}")))?;
            let tcp = candidates
                .iter()
                .filter(|c| reaches(a.ip(), c.ip()))
                .map(|c| SocketAddr::new(c.ip(), port))
                .collect();
            (Some(l), tcp)
        }
        None => (None, Vec::new()),
    })
}

/// Starts worker `i` on a thread of its own with its socket, ICE-TCP listener (the first
/// worker's), poll and inbox, and returns once it runs, or why it could not start. The worker
/// is built on its thread: its recvmmsg/sendmmsg headers hold raw pointers and never leave it.
fn spawn_worker(
    i: usize,
    (socket, listener, poll, inbox): (
        std::net::UdpSocket,
        Option<std::net::TcpListener>,
        mio::Poll,
        worker::Inbox,
    ),
    (sh, st): (Arc<Shared>, Arc<WorkerStats>),
    shard: Shard,
    media_io: MediaIo,
) -> Result<std::thread::JoinHandle<()>, StartError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let t = std::thread::Builder::new()
        .name(format!("secrelay-worker-{i}"))
        .spawn(move || {
            match Worker::new(i, socket, listener, poll, inbox, sh, st, shard, media_io) {
                Ok(w) => {
                    let _ = ready_tx.send(Ok(()));
                    w.run();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| StartError(format!("worker {i} thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(t),
        Ok(Err(e)) => Err(StartError(format!("worker {i}: {e}"))),
        Err(_) => Err(StartError(format!("worker {i} ended while starting"))),
    }
}

impl Gateway {
    /// Binds the media port and starts the workers.
    pub fn start(config: ServeConfig) -> Result<Arc<Gateway>, StartError> {
        config.check().map_err(|e| StartError(e.0))?;
        let certificate = load_certificate(&config)?;
        let fingerprint = certificate.fingerprint().to_string();
        let n = config.worker_count();
        let (sockets, udp_addr) = bind_media_sockets(&config, n)?;
        let (candidate, candidates) = host_candidates(&config, udp_addr);
        let (mut ice_tcp, tcp_candidates) = ice_tcp_port(&config, &candidates)?;
        let interfaces = interfaces::configured(&config.interfaces, udp_addr.ip(), candidate.ip())
            .map_err(|e| StartError(e.to_string()))?;
        let shard_config = shard_config(
            &config,
            &certificate,
            (candidate, &candidates),
            &tcp_candidates,
        )?;
        let setting = config.media_io_setting().map_err(|e| StartError(e.0))?;
        if setting == Some(MediaIo::AfXdp) {
            config.af_xdp_check().map_err(|e| StartError(e.0))?;
        }
        let (media_io, why_not) = udp::choose_media_io(setting).map_err(StartError)?;
        if let Some(why) = why_not {
            tracing::info!(reason = %why, "io_uring not used: the workers use recvmmsg/sendmmsg");
        }
        let mut peers = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..n {
            let (peer, inbox, poll) =
                worker::channels().map_err(|e| StartError(format!("worker poll: {e}")))?;
            peers.push(peer);
            inboxes.push((inbox, poll));
        }
        let shared = shared_state(&config, udp_addr, media_io, peers)?;
        let worker_stats: Vec<Arc<WorkerStats>> =
            (0..n).map(|_| Arc::new(WorkerStats::default())).collect();
        let stats = Arc::new(GatewayStats {
            workers: worker_stats.clone(),
            ..GatewayStats::default()
        });
        let mut threads = Vec::new();
        for (i, (socket, (inbox, poll))) in sockets.into_iter().zip(inboxes).enumerate() {
            let shard = Shard::new(
                shard_config.clone(),
                config.engine().map_err(|e| StartError(e.0))?,
            )
            .with_index(i);
            // The first worker listens for ICE-TCP (connections go on to their members').
            if let Some(inode) = udp::inode(&socket) {
                worker_stats[i].socket_opened(inode);
            }
            let io = (socket, ice_tcp.take(), poll, inbox);
            let state = (shared.clone(), worker_stats[i].clone());
            threads.push(spawn_worker(i, io, state, shard, media_io)?);
        }
        tracing::info!(
            udp = %udp_addr,
            candidate = %candidate,
            workers = n,
            media_io = media_io.name(),
            "media port open"
        );
        for c in &candidates[1..] {
            tracing::info!(candidate = %c, "media port announced also");
        }
        for c in &tcp_candidates {
            tracing::info!(candidate = %c, "ICE-TCP port open");
        }
        Ok(Arc::new(Gateway {
            config,
            shared,
            stats,
            threads: Mutex::new(threads),
            udp_addr,
            candidate,
            candidates,
            tcp_candidates,
            admitting: AtomicBool::new(true),
            joining: (0..n)
                .map(|_| std::sync::atomic::AtomicUsize::new(0))
                .collect(),
            fingerprint,
            interfaces,
        }))
    }

    /// Telephony legs' media interfaces, the first the default.
    pub(crate) fn interfaces(&self) -> &[interfaces::Interface] {
        &self.interfaces
    }

    /// The bound media address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp_addr
    }

    /// The host candidate written into answers.
    pub fn candidate(&self) -> SocketAddr {
        self.candidate
    }

    /// Every UDP host candidate written into answers (the first is [`Gateway::candidate`]).
    pub fn candidates(&self) -> &[SocketAddr] {
        &self.candidates
    }

    /// The passive ICE-TCP candidates written into answers (none without `ice_tcp`).
    pub fn tcp_candidates(&self) -> &[SocketAddr] {
        &self.tcp_candidates
    }

    /// Our certificate's fingerprint (`sha-256 AB:…`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The XDP filter in front of the media ports, when one is attached.
    pub(crate) fn xdp(&self) -> Option<&Arc<xdp::Gate>> {
        self.shared.xdp.as_ref()
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<GatewayStats> {
        &self.stats
    }

    /// Whether new participants are admitted (false once shutdown began).
    pub fn admitting(&self) -> bool {
        self.admitting.load(Ordering::Acquire)
    }

    /// Sizes of the routing directory (ufrags, addresses): zero once everybody left.
    pub fn directory_sizes(&self) -> (usize, usize) {
        self.shared.directory.sizes()
    }

    /// Sends the rooms' and members' lifecycle ([`Lifecycle`]) to `tx` from now on; `false`
    /// if something already watches it. An event that finds `tx` full is dropped and counted
    /// ([`Gateway::lifecycle_dropped`]): the workers never wait for a watcher.
    pub(crate) fn watch_lifecycle(&self, tx: tokio::sync::mpsc::Sender<Lifecycle>) -> bool {
        self.shared.lifecycle.set(tx).is_ok()
    }

    /// Lifecycle events dropped because their watcher's queue was full.
    pub fn lifecycle_dropped(&self) -> u64 {
        self.shared.lifecycle_dropped.load(Ordering::Relaxed)
    }

    /// Ids of the participants that ended since the last call (any reason: DELETE, consent,
    /// DTLS failure, shutdown).
    pub fn take_ended(&self) -> Vec<String> {
        self.shared.take_ended()
    }

    /// Ids of ended participants not taken yet by [`Gateway::take_ended`]: a server's HTTP
    /// side takes them every few seconds, so this stays small whatever the traffic.
    pub fn ended_backlog(&self) -> usize {
        self.shared
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Participants on each worker now (a spread room's viewers on the workers they joined).
    pub fn participants_by_worker(&self) -> Vec<usize> {
        // Each worker publishes its participants after every command (a join, a leave), and
        // all its counters every 200 ms.
        self.stats
            .workers
            .iter()
            .map(|w| w.shard().members as usize)
            .collect()
    }

    /// The index of the worker that owns `room` (rooms are hashed to workers by name).
    pub fn worker_index(&self, room: &str) -> usize {
        room_worker(room, self.shared.peers.len())
    }

    fn worker_for(&self, room: &str) -> &Peer {
        &self.shared.peers[self.worker_index(room)]
    }

    /// Admission control for a new room or leg in `room` ([`crate::admission`]): Err with the
    /// reason when the worker that owns it sheds joins (its load is past `shed_joins_at`).
    pub fn admit(&self, room: &str) -> Result<(), ApiError> {
        let i = self.worker_index(room);
        let w = &self.stats.workers[i];
        if w.shed() >= Shed::Joins {
            return Err(ApiError::Busy(format!(
                "the gateway is overloaded (the worker for this room is {:.0} % busy): retry later",
                w.load() * 100.0
            )));
        }
        Ok(())
    }

    /// Runs `f` on the worker that owns `room` (given the worker, the instant and the room's
    /// name): every control operation on a room goes this way, one shard method each. `None`
    /// when the worker is gone (shutting down).
    async fn on_room<T: Send + 'static>(
        &self,
        room: &str,
        f: impl FnOnce(&mut Worker, std::time::Instant, &str) -> T + Send + 'static,
    ) -> Option<T> {
        self.on_worker(self.worker_index(room), room, f).await
    }

    /// [`Gateway::on_room`] on worker `at` (a participant's, [`Gateway::member_worker`]).
    async fn on_worker<T: Send + 'static>(
        &self,
        at: usize,
        room: &str,
        f: impl FnOnce(&mut Worker, std::time::Instant, &str) -> T + Send + 'static,
    ) -> Option<T> {
        let name = room.to_owned();
        self.shared.peers[at]
            .run(move |w, now| f(w, now, &name))
            .await
    }

    /// Runs `f` with the shard, the instant, the room's name and `id` on the worker participant
    /// `id` of `room` is on ([`Gateway::member_worker`]); `None` when the worker is gone.
    async fn on_member<T: Send + 'static>(
        &self,
        room: &str,
        id: &str,
        f: impl FnOnce(&mut Shard, std::time::Instant, &str, &str) -> T + Send + 'static,
    ) -> Option<T> {
        let at = self.member_worker(room, id);
        let id = id.to_owned();
        self.on_worker(at, room, move |w, now, room| {
            f(w.shard_mut(), now, room, &id)
        })
        .await
    }

    /// The worker participant `id` of `room` is on: its room's, unless it is a viewer the room
    /// spread to another ([`ServeConfig::spread_viewers`]).
    fn member_worker(&self, room: &str, id: &str) -> usize {
        let placed = self.shared.placed.lock().unwrap_or_else(|e| e.into_inner());
        placed
            .get(id)
            .copied()
            .unwrap_or_else(|| self.worker_index(room))
    }

    /// A join-like operation: refused while shutting down, counted when it made a participant.
    async fn join_on<T: Send + 'static, E: From<JoinError> + Send + 'static>(
        &self,
        room: &str,
        f: impl FnOnce(&mut Worker, std::time::Instant, &str) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E> {
        if !self.admitting() {
            return Err(JoinError::ShuttingDown.into());
        }
        let r = self
            .on_room(room, f)
            .await
            .unwrap_or(Err(JoinError::ShuttingDown.into()));
        if r.is_ok() {
            self.stats.joins.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Makes a participant for `offer` in `room`, for `who` (a viewer on the worker with the
    /// fewest participants, when the room spreads its viewers: its data-channel messages are
    /// piped between the room's workers).
    pub async fn join(
        &self,
        room: &str,
        offer: Offer,
        kind: JoinKind,
        who: Who,
    ) -> Result<Joined, JoinError> {
        if kind == JoinKind::Whep {
            if let Some(at) = self.viewer_worker(room) {
                return self.join_viewer_on(room, at, offer, who).await;
            }
        }
        self.join_on(room, move |w, now, room| {
            w.shard_mut().join(now, room, &offer, kind, &who)
        })
        .await
    }

    /// The worker a new viewer of `room` joins on when that is not the room's own: the one
    /// with the fewest participants (those joining counted), when viewers are spread.
    fn viewer_worker(&self, room: &str) -> Option<usize> {
        let workers = self.shared.peers.len();
        if !self.config.spread_viewers || workers < 2 {
            return None;
        }
        let home = self.worker_index(room);
        let loads: Vec<(usize, bool)> = (0..workers)
            .map(|w| {
                let members = self.stats.workers[w].shard().members as usize;
                let takes = self.stats.workers[w].shed() < Shed::Joins;
                (members + self.joining[w].load(Ordering::Relaxed), takes)
            })
            .collect();
        least_loaded(&loads, home).filter(|&best| best != home)
    }

    /// Whether a new participant of `room` is taken (a worker shedding joins refuses it, 503):
    /// the room's own worker decides, but a viewer that may be spread ([`Gateway::join`]) is
    /// taken while any worker takes joins, and goes there.
    pub fn admit_join(&self, room: &str, spreads: bool) -> Result<(), ApiError> {
        let home = self.admit(room);
        let workers = self.stats.workers.len();
        if home.is_ok() || !spreads || !self.config.spread_viewers || workers < 2 {
            return home;
        }
        let any = (0..workers).any(|w| self.stats.workers[w].shed() < Shed::Joins);
        if any {
            Ok(())
        } else {
            home
        }
    }

    /// Joins a viewer of `room` on worker `at`: the room's worker attaches a pipe to `at` and
    /// posts the replica's opening and the join there itself ([`Worker::join_viewer`]), so
    /// nothing it tells `at` about the room later can overtake them. Joins on the room's
    /// worker instead when the room is not spread (not there yet, or mixing).
    async fn join_viewer_on(
        &self,
        room: &str,
        at: usize,
        offer: Offer,
        who: Who,
    ) -> Result<Joined, JoinError> {
        if !self.admitting() {
            return Err(JoinError::ShuttingDown);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.joining[at].fetch_add(1, Ordering::Relaxed);
        let name = room.to_owned();
        self.worker_for(room)
            .run(move |w, now| w.join_viewer(now, &name, at, (offer, who), tx))
            .await;
        let r = rx.await.unwrap_or(Err(JoinError::ShuttingDown));
        self.joining[at].fetch_sub(1, Ordering::Relaxed);
        if r.is_ok() {
            self.stats.joins.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Makes a WebRTC participant in `room` that offers `sections` to its peer (a SIP proxy's
    /// call towards a browser): its id and our offer (in [`Joined::answer`]).
    pub async fn offer_webrtc(
        &self,
        room: &str,
        sections: Vec<WebRtcOfferSection>,
        who: Who,
    ) -> Result<Joined, JoinError> {
        self.join_on(room, move |w, now, room| {
            w.shard_mut().offer_webrtc(now, room, &sections, &who)
        })
        .await
    }

    /// The peer's answer to a WebRTC participant's offer: the codecs it took.
    pub async fn answer_webrtc(
        &self,
        room: &str,
        id: &str,
        answer: Offer,
    ) -> Result<Vec<(CodecId, u8)>, JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.answer_webrtc(now, room, id, &answer)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Makes a telephony participant (plain RTP or SDES-SRTP) for `offer` in `room`, on a port
    /// pair of its own.
    pub async fn join_rtp(
        &self,
        room: &str,
        offer: RtpDescription,
        who: Who,
    ) -> Result<JoinedRtp, ApiError> {
        self.join_rtp_with(room, offer, RtpLegOptions::default(), who)
            .await
    }

    /// [`Gateway::join_rtp`] with `options` for the leg (the ng protocol's legs).
    pub async fn join_rtp_with(
        &self,
        room: &str,
        offer: RtpDescription,
        options: RtpLegOptions,
        who: Who,
    ) -> Result<JoinedRtp, ApiError> {
        self.join_on(room, move |w, now, room| {
            w.with_leg_ports(now, options, |shard, ports, options| {
                shard.join_rtp_with(now, room, &offer, ports, options, &who)
            })
        })
        .await
    }

    /// Makes a telephony participant in `room` that offers `spec` to a phone (a SIP proxy's
    /// `offer`): its id and our offer.
    pub async fn offer_rtp(
        &self,
        room: &str,
        spec: RtpOfferSpec,
        who: Who,
    ) -> Result<JoinedRtp, ApiError> {
        self.offer_rtp_with(room, spec, RtpLegOptions::default(), who)
            .await
    }

    /// [`Gateway::offer_rtp`] with `options` for the leg (the ng protocol's legs).
    pub async fn offer_rtp_with(
        &self,
        room: &str,
        spec: RtpOfferSpec,
        options: RtpLegOptions,
        who: Who,
    ) -> Result<JoinedRtp, ApiError> {
        if !self.admitting() {
            return Err(JoinError::ShuttingDown.into());
        }
        self.on_room(room, move |w, now, room| {
            w.with_leg_ports(now, options, |shard, ports, options| {
                shard.offer_rtp_with(now, room, &spec, ports, options, &who)
            })
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown.into()))
    }

    /// The phone's answer to a telephony participant's offer: the codecs it took.
    pub async fn answer_rtp(
        &self,
        room: &str,
        id: &str,
        answer: RtpDescription,
    ) -> Result<Vec<(CodecId, u8)>, JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.answer_rtp(now, room, id, &answer)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// SDP from a telephony participant's phone, in the call: the answer to our offer
    /// (`None`), or a new offer (re-INVITE: new address, codecs, direction or keys) and our
    /// answer to it.
    pub async fn update_rtp(
        &self,
        room: &str,
        id: &str,
        sdp: RtpDescription,
    ) -> Result<Option<String>, JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.update_rtp(now, room, id, &sdp)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// A new offer of ours to a telephony participant's phone, in the call (the other side
    /// of a re-INVITE); its answer comes to [`Gateway::update_rtp`].
    pub async fn reoffer_rtp(&self, room: &str, id: &str) -> Result<String, JoinError> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.reoffer_rtp(room, id)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// A new offer from WebRTC member `id`'s peer in its session (a re-INVITE: hold, an ICE
    /// restart): our answer ([`Shard::update_webrtc`]).
    pub async fn update_webrtc(
        &self,
        room: &str,
        id: &str,
        offer: Offer,
    ) -> Result<String, JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.update_webrtc(now, room, id, &offer)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Whether comfort noise crosses for telephony member `id` of `room` from now on
    /// ([`Shard::set_cn_transcode`]).
    pub async fn set_cn_transcode(&self, room: &str, id: &str, on: bool) -> Result<(), JoinError> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.set_cn_transcode(room, id, on)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Takes back the new offer of ours member `id` of `room` waits to answer
    /// ([`Shard::withdraw_offer`]).
    pub async fn withdraw_offer(&self, room: &str, id: &str) -> bool {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.withdraw_offer(room, id)
        })
        .await
        .unwrap_or(false)
    }

    /// A new offer of ours to WebRTC member `id`'s peer, in its session (the other side of a
    /// re-INVITE); its answer comes to [`Gateway::answer_reoffer`].
    pub async fn reoffer_webrtc(&self, room: &str, id: &str) -> Result<String, JoinError> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.reoffer_webrtc(room, id)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Gives telephony member `id` of `room` what it `kept` on the node that died: the keys
    /// of ours its crypto lines carry, its DTLS-SRTP keys, its SRTP streams' marks (see
    /// [`crate::leg::RtpLeg::restore_keys`], [`crate::leg::RtpLeg::resume_dtls`] and
    /// [`crate::leg::RtpLeg::resume_srtp`]).
    pub(crate) async fn restore_rtp(
        &self,
        room: &str,
        id: &str,
        kept: crate::leg::Resume,
    ) -> Result<(), JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.restore_rtp(now, room, id, &kept)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// The marks of members `ids` ([`Shard::leg_marks`]), by id, from every worker.
    pub(crate) async fn leg_marks(
        &self,
        ids: Vec<String>,
    ) -> std::collections::HashMap<String, crate::leg::LegMarks> {
        let ids = std::sync::Arc::new(ids);
        let mut all = std::collections::HashMap::new();
        for p in &self.shared.peers {
            let ids = ids.clone();
            all.extend(
                p.run(move |w, _| w.shard_mut().leg_marks(&ids))
                    .await
                    .unwrap_or_default(),
            );
        }
        all
    }

    /// WebRTC member `id` of `room` takes the keys and SRTP streams of the leg it replaces
    /// (a call taken over: [`Shard::resume_webrtc`]).
    pub(crate) async fn resume_webrtc(
        &self,
        room: &str,
        id: &str,
        marks: crate::leg::WebRtcMarks,
        srtp: Vec<crate::leg::SrtpMark>,
    ) -> Result<(), JoinError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.resume_webrtc(now, room, id, &marks, &srtp)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Opens participant `id`'s events channel: our new offers for it arrive on the receiver
    /// (one channel per participant: a second replaces the first). `None` if there is no such
    /// WebRTC participant.
    pub async fn listen(
        &self,
        room: &str,
        id: &str,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<worker::Notice>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned(), tx);
        let ok = self
            .on_member(room, id, move |shard, _, room, id| shard.listen(room, id))
            .await
            .unwrap_or(false);
        if !ok {
            self.shared
                .notices
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
            return None;
        }
        Some(rx)
    }

    /// Participant `id`'s answer to our new offer (of revision `revision`, if it says): the
    /// sections it took. Err: why it was not taken.
    pub async fn answer_reoffer(
        &self,
        room: &str,
        id: &str,
        answer: Offer,
        revision: Option<u64>,
    ) -> Result<usize, JoinError> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.answer_reoffer(room, id, &answer, revision)
        })
        .await
        .unwrap_or(Err(JoinError::ShuttingDown))
    }

    /// Sets `room` to mix its audio (each member hears the sum of the others, N−1) or to relay
    /// and transcode it; kept for the room if it is made later. Err: too many rooms' settings
    /// kept, or shutting down.
    pub async fn set_mixing(
        &self,
        room: &str,
        mix: Option<MixSettings>,
    ) -> Result<(), ControlError> {
        self.on_room(room, move |w, _, room| w.shard_mut().set_mixing(room, mix))
            .await
            .unwrap_or(Err(ControlError::ShuttingDown))
    }

    /// Sets which simulcast layer participant `id` is sent of `publisher`'s (all when `None`):
    /// the layer `rid`, or the estimate's choice with `None`. Err: the reason.
    pub async fn set_layer(
        &self,
        room: &str,
        id: &str,
        publisher: Option<String>,
        rid: Option<String>,
    ) -> Result<(), ControlError> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.set_layer(now, room, id, publisher.as_deref(), rid.as_deref())
        })
        .await
        .unwrap_or(Err(ControlError::ShuttingDown))
    }

    /// Sends `msg` from the server to participant `to` of `room`, or to every participant of
    /// it with data channels: how many were sent it.
    pub async fn send_data(
        &self,
        room: &str,
        to: Option<String>,
        msg: secrelay_core::leg::DataMessage,
    ) -> Result<usize, ControlError> {
        let at = match &to {
            Some(id) => self.member_worker(room, id),
            None => self.worker_index(room),
        };
        self.on_worker(at, room, move |w, now, room| {
            w.shard_mut().send_data(now, room, to.as_deref(), &msg)
        })
        .await
        .unwrap_or(Err(ControlError::ShuttingDown))
    }

    /// Telephony ports in use (none once every telephony leg ended).
    pub fn rtp_ports_in_use(&self) -> usize {
        self.shared.ports.in_use()
    }

    /// Ends a participant with close_notify; `false` if there was none by that id in `room`.
    pub async fn leave(&self, room: &str, id: &str) -> bool {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.leave(now, room, id)
        })
        .await
        .unwrap_or(false)
    }

    /// Ends a participant without a word to its peer, its call handed to another node
    /// ([`Shard::hand_off`]); `false` if there was none by that id in `room`.
    pub(crate) async fn hand_off(&self, room: &str, id: &str) -> bool {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.hand_off(now, room, id)
        })
        .await
        .unwrap_or(false)
    }

    /// Marks a participant whose call is kept for another node: when this node stops, it ends
    /// without a word to its peer ([`Shard::keep_quiet`]).
    pub(crate) async fn keep_quiet(&self, room: &str, id: &str) -> bool {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.keep_quiet(room, id)
        })
        .await
        .unwrap_or(false)
    }

    /// Makes participant `id` of `room` a listener of participant `publisher` alone
    /// ([`Shard::listen_to`]); `false` if either is not there.
    pub(crate) async fn listen_to(&self, room: &str, id: &str, publisher: &str) -> bool {
        let publisher = publisher.to_owned();
        self.on_member(room, id, move |shard, _, room, id| {
            shard.listen_to(room, id, &publisher)
        })
        .await
        .unwrap_or(false)
    }

    /// Sets what of participant `id`'s media `room` passes on ([`Shard::set_gate`]); `false`
    /// if there is none by that id.
    pub(crate) async fn set_gate(
        &self,
        room: &str,
        id: &str,
        gate: secrelay_core::room::Gate,
    ) -> bool {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.set_gate(room, id, gate)
        })
        .await
        .unwrap_or(false)
    }

    /// Sets the gate fields `patch` names of participant `id` of `room`, the others as they
    /// were ([`Shard::change_gate`]); its gate now, `None` if there is none by that id.
    pub(crate) async fn patch_gate(
        &self,
        room: &str,
        id: &str,
        patch: GatePatch,
    ) -> Option<secrelay_core::room::Gate> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.change_gate(room, id, |g| patch.apply(g))
        })
        .await
        .flatten()
    }

    /// The audio `media` names, for `play media`: a file from `media_dir` (decoded once while
    /// it is unchanged) or a file's contents ([`ng_media`]).
    pub(crate) async fn clip(
        &self,
        media: secrelay_wire::ng::MediaFile,
    ) -> Result<Arc<secrelay_media::clip::Clip>, ApiError> {
        let mut clips = self.shared.clips.lock().await;
        clips.load(self.config.media_dir.as_deref(), media).await
    }

    /// The call recorder, when `recording_dir` is set.
    pub(crate) fn recorder(&self) -> Option<&recording::Recorder> {
        // (Read by the ng server and /metrics.)
        self.shared.recorder.as_deref()
    }

    /// Records what participant `id` of `room` sends under `key`, or stops with `None`
    /// ([`Shard::set_recording`]); `false` if there is none by that id.
    pub(crate) async fn set_recording(&self, room: &str, id: &str, key: Option<u64>) -> bool {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.set_recording(room, id, key)
        })
        .await
        .unwrap_or(false)
    }

    /// Queues `digit` to be played as participant `id` of `room` sends its audio
    /// ([`Shard::play_dtmf`]); `None` when the gateway is shutting down.
    pub(crate) async fn play_dtmf(
        &self,
        room: &str,
        id: &str,
        digit: secrelay_core::room::DtmfDigit,
    ) -> Option<Result<(), secrelay_core::room::PlayError>> {
        self.on_member(room, id, move |shard, _, room, id| {
            shard.play_dtmf(room, id, digit)
        })
        .await
    }

    /// Plays `media` to participant `id` of `room` ([`Shard::play_media`]): how long one play
    /// lasts; `None` when the gateway is shutting down.
    pub(crate) async fn play_media(
        &self,
        room: &str,
        id: &str,
        media: secrelay_core::room::PlayMedia,
    ) -> Option<Result<std::time::Duration, secrelay_core::room::PlayError>> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.play_media(now, room, id, media)
        })
        .await
    }

    /// Stops what is played to participant `id` of `room` ([`Shard::stop_media`]).
    pub(crate) async fn stop_media(&self, room: &str, id: &str) -> Option<Option<Option<u64>>> {
        self.on_member(room, id, |shard, _, room, id| shard.stop_media(room, id))
            .await
    }

    /// Ends every member of `room` and gives their last figures (an ng call's media section
    /// ending), in one trip to the room's worker.
    pub(crate) async fn end_room(&self, room: &str) -> Vec<ParticipantSnapshot> {
        self.on_room(room, |w, now, room| w.end_room(now, room))
            .await
            .unwrap_or_default()
    }

    /// ICE restart with the peer's new credentials: our new ones, or `None` for an unknown
    /// participant.
    pub async fn ice_restart(
        &self,
        room: &str,
        id: &str,
        remote: Credentials,
    ) -> Option<Credentials> {
        self.on_member(room, id, move |shard, now, room, id| {
            shard.ice_restart(now, room, id, remote)
        })
        .await
        .flatten()
    }

    /// The names of the rooms on any worker, sorted, each once (no participant's figures
    /// gathered: what a cluster node renews its rooms from).
    pub(crate) async fn room_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for p in &self.shared.peers {
            let these = p.run(|w, _| {
                w.shard_mut()
                    .room_names()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            });
            names.extend(these.await.unwrap_or_default());
        }
        names.sort();
        names.dedup();
        names
    }

    /// Every room (sorted by name), or one; a room spread over workers is one room, its
    /// participants and counts from all of them.
    pub async fn rooms(&self, only: Option<&str>) -> Vec<RoomSnapshot> {
        let mut out: Vec<RoomSnapshot> = Vec::new();
        for p in &self.shared.peers {
            let room = only.map(str::to_owned);
            let rooms = p.run(move |w, now| w.snapshot(now, room.as_deref()));
            out.extend(rooms.await.unwrap_or_default());
        }
        // Stable: a spread room's parts stay in worker order.
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|part, first| {
            if part.name != first.name {
                return false;
            }
            first.participants.append(&mut part.participants);
            first.routed_in += part.routed_in;
            first.forwarded += part.forwarded;
            first.transcoded += part.transcoded;
            first.mixing |= part.mixing;
            if first.mix.is_none() {
                first.mix = part.mix.take();
            }
            true
        });
        // A replica whose viewers all left, waiting for its close, is no room to show.
        out.retain(|r| !r.participants.is_empty() || only.is_some_and(|n| n == r.name));
        out
    }

    /// Stops admitting and closes every participant with close_notify; those listening on
    /// their events channel are told why first (`closing`).
    pub async fn drain(&self) {
        self.admitting.store(false, Ordering::Release);
        for tx in self
            .shared
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = tx.send(Notice {
                event: "closing",
                data: r#"{"reason": "the gateway is shutting down"}"#.into(),
            });
        }
        for p in &self.shared.peers {
            let _ = p.run(|w, now| w.shard_mut().drain(now)).await;
        }
    }

    /// Ends the worker threads (after [`Gateway::drain`] for a clean exit).
    pub fn stop(&self) {
        self.admitting.store(false, Ordering::Release);
        if let Some(p) = self.shared.node_pipes.get() {
            p.stop();
        }
        for p in &self.shared.peers {
            if p.commands.send(Command::Stop).is_ok() {
                let _ = p.waker.wake();
            }
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// The worker of `workers` that owns `room` (by its name's hash).
fn room_worker(room: &str, workers: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    room.hash(&mut h);
    (h.finish() % workers.max(1) as u64) as usize
}

/// Of the workers that take joins (`loads[w]`: participants, and whether it takes joins), the
/// one with the fewest participants, ties going to the room's own (`home`: no pipe needed);
/// `None` when none takes joins.
fn least_loaded(loads: &[(usize, bool)], home: usize) -> Option<usize> {
    (0..loads.len())
        .filter(|&w| loads[w].1)
        .min_by_key(|&w| (loads[w].0, w != home))
}

/// The gateway and its signaling server (HTTPS, and plain HTTP when asked for; the ng control
/// socket when configured), the signaling on threads of its own.
pub struct Server {
    gateway: Arc<Gateway>,
    access: Arc<http::Access>,
    http_addr: Option<SocketAddr>,
    https_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    ng_addr: Option<SocketAddr>,
    tls: Option<Arc<Tls>>,
    turn: Option<Arc<turn::TurnService>>,
    shutdown: Option<oneshot::Sender<()>>,
    http_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("http", &self.http_addr)
            .field("https", &self.https_addr)
            .field("gateway", &self.gateway)
            .finish()
    }
}

/// This node's membership of the cluster `cluster_redis` names (none without it); its URL is
/// `cluster_url`, else `bound` (the signaling's own address), and its ng address `cluster_ng`,
/// else `ng` (the ng socket's, when it names one address).
fn join_cluster(
    config: &ServeConfig,
    gateway: &Arc<Gateway>,
    (bound, ng): (Option<String>, Option<SocketAddr>),
) -> Result<Option<Joining>, StartError> {
    let Some(node) = config.cluster_node().map_err(|e| StartError(e.0))? else {
        return Ok(None);
    };
    let url = config
        .cluster_url
        .clone()
        .or(bound)
        .ok_or_else(|| StartError("cluster_url: no signaling address to name".into()))?;
    let lease = Duration::from_secs_f64(config.cluster_lease_secs);
    let redis = config.cluster_redis.as_deref().unwrap_or_default();
    let ng = config.cluster_ng.or(ng);
    let pipes = match config.cluster_pipe {
        Some(_) => {
            let (p, listener) =
                node_pipes::NodePipes::start(config, node, gateway.shared.peers.clone())?;
            let _ = gateway.shared.node_pipes.set(p.clone());
            Some((p, listener))
        }
        None => None,
    };
    let c = cluster::Cluster::new(
        redis,
        (
            node.to_owned(),
            url.clone(),
            ng,
            pipes.as_ref().map(|(p, _)| p.addr()),
        ),
        lease,
        gateway.clone(),
        keeping(config)?,
        config.cluster_standby,
    )
    .map_err(|e| StartError(format!("cluster_redis {redis:?}: {e}")))?;
    tracing::info!(node, url, "cluster node: directory at cluster_redis");
    Ok(Some(Joining { cluster: c, pipes }))
}

/// A node's membership of its cluster, as it starts: the directory's side, and its pipes to
/// the other nodes with their listener (served on the signaling's runtime).
struct Joining {
    cluster: Arc<cluster::Cluster>,
    pipes: Option<(Arc<node_pipes::NodePipes>, std::net::TcpListener)>,
}

/// Which calls the node keeps for a standby, and takes over (`cluster_state_key`,
/// `cluster_state_clear`, `cluster_takeover`).
fn keeping(config: &ServeConfig) -> Result<cluster::Keeping, StartError> {
    let sealer =
        match (&config.cluster_state_key, config.cluster_state_clear) {
            (Some(path), _) => {
                let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                    StartError(format!("cluster_state_key {}: {e}", path.display()))
                })?);
                Some(call_state::Sealer::with_key(&text).map_err(|e| {
                    StartError(format!("cluster_state_key {}: {e}", path.display()))
                })?)
            }
            (None, true) => Some(call_state::Sealer::Clear),
            (None, false) => None,
        };
    if sealer.is_none() && !config.cluster_takeover.is_empty() {
        return Err(StartError(
            "cluster_takeover needs the calls' states: set cluster_state_key (or cluster_state_clear)"
                .into(),
        ));
    }
    Ok(cluster::Keeping {
        sealer,
        takeover_of: config.cluster_takeover.clone(),
    })
}

fn bind_tcp(
    what: &str,
    addr: SocketAddr,
) -> Result<(std::net::TcpListener, SocketAddr), StartError> {
    let l =
        std::net::TcpListener::bind(addr).map_err(|e| StartError(format!("{what} {addr}: {e}")))?;
    let bound = l
        .local_addr()
        .map_err(|e| StartError(format!("{what} {addr}: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| StartError(format!("{what} {addr}: {e}")))?;
    Ok((l, bound))
}

/// The ng socket, with `ng` (non-blocking, for the signaling's runtime).
fn bind_ng(gateway: &Gateway) -> Result<Option<UdpSocket>, StartError> {
    Ok(match gateway.config().ng {
        Some(a) => {
            let s = UdpSocket::bind(a).map_err(|e| StartError(format!("ng {a}: {e}")))?;
            s.set_nonblocking(true)
                .map_err(|e| StartError(format!("ng {a}: {e}")))?;
            Some(s)
        }
        None => None,
    })
}

/// Warns, once up, of settings that leave rooms open to anyone, the ng socket (at `ng`) open
/// to any source, or calls that cannot go on at another node.
fn warn_of_unsafe_settings(access: &http::Access, config: &ServeConfig, ng: Option<SocketAddr>) {
    if let Some(a) = ng {
        if !a.ip().is_loopback() && config.ng_allow.is_empty() {
            tracing::warn!(ng = %a, "the ng socket takes commands from any source: set ng_allow to the SIP proxies' addresses");
        }
    }
    if !access.policy().closes_rooms() {
        tracing::warn!("no api_keys, admin_key or token configured: anyone who reaches the signaling may publish and view in any room (docs/security.md)");
    }
    let keeps_calls = config.cluster_state_key.is_some() || config.cluster_state_clear;
    if config.cluster_redis.is_some() && keeps_calls && config.cert.is_none() {
        tracing::warn!("calls are kept for other nodes, but this node's DTLS certificate is made at start: a call with a WebRTC side cannot go on at another node (give every node the same `cert` and `key`)");
    }
}

/// A listener's TLS (HTTPS) and, on it, the TURN service it also carries.
type FrontTls = (Arc<Tls>, Option<Arc<turn::TurnService>>);

/// The signaling, as its thread runs it: the HTTP(S) listeners and the metrics one, the ng
/// socket, the cluster's directory and pipes, the router's tasks; until `shutdown`, then the
/// gateway drained and the node out of its cluster.
struct SignalingRun {
    gateway: Arc<Gateway>,
    signaling: Arc<ServeConfig>,
    app: axum::Router,
    metrics: axum::Router,
    tasks: Vec<http::Task>,
    cluster: Option<Arc<cluster::Cluster>>,
    pipes: Option<(Arc<node_pipes::NodePipes>, std::net::TcpListener)>,
    ng: Option<(UdpSocket, ng::Ng)>,
    metrics_listener: Option<std::net::TcpListener>,
    /// Each listener with its TLS, for HTTPS.
    listeners: Vec<(std::net::TcpListener, Option<FrontTls>)>,
    shutdown: oneshot::Receiver<()>,
}

impl SignalingRun {
    /// Runs on this thread until shutdown: on a current-thread runtime by default (the
    /// signaling's accept loops, handshakes and requests away from the media workers), on
    /// `http_threads` threads when more are configured.
    fn run_on_own_runtime(self) {
        let threads = self.signaling.http_threads.max(1);
        let rt = if threads == 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("secrelay-http")
                .enable_all()
                .build()
        };
        match rt {
            Ok(rt) => rt.block_on(self.run()),
            Err(e) => tracing::error!(error = %e, "signaling runtime did not start"),
        }
    }

    async fn run(self) {
        let SignalingRun {
            gateway: g,
            signaling,
            app,
            metrics,
            tasks,
            cluster,
            pipes,
            ng,
            metrics_listener,
            listeners,
            shutdown,
        } = self;
        for t in tasks {
            tokio::spawn(t);
        }
        if let Some(c) = &cluster {
            tokio::spawn(c.clone().run());
        }
        if let Some((p, listener)) = pipes {
            tokio::spawn(p.serve(listener));
        }
        if let Some((socket, server)) = ng {
            match tokio::net::UdpSocket::from_std(socket) {
                Ok(s) => {
                    tokio::spawn(server.serve(s));
                }
                Err(e) => tracing::error!(error = %e, "ng socket"),
            }
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let capacity = listener::Capacity {
            connections: Arc::new(tokio::sync::Semaphore::new(signaling.max_connections)),
            sources: per_source::PerSource::new(signaling.source_limits()),
        };
        let routed = metrics_listener
            .map(|l| (l, metrics, None, "metrics listener"))
            .into_iter()
            .chain(
                listeners
                    .into_iter()
                    .map(|(l, tls)| (l, app.clone(), tls, "signaling listener")),
            );
        let mut loops = tokio::task::JoinSet::new();
        for (l, router, tls, what) in routed {
            match tokio::net::TcpListener::from_std(l) {
                Ok(l) => {
                    loops.spawn(listener::serve(
                        l,
                        router,
                        tls,
                        signaling.clone(),
                        g.stats().clone(),
                        capacity.clone(),
                        stop_rx.clone(),
                    ));
                }
                Err(e) => tracing::error!(error = %e, "{what}"),
            }
        }
        let _ = shutdown.await;
        // The calls' states stay as they are for the standby (or the next start): ending the
        // members below must not remove them.
        if let Some(c) = &cluster {
            c.stop_keeping();
        }
        g.drain().await;
        if let Some(c) = &cluster {
            c.leave().await;
        }
        let _ = stop_tx.send(true);
        while loops.join_next().await.is_some() {}
    }
}

impl Server {
    /// Starts the workers and the signaling (HTTPS unless only plain HTTP is configured; see
    /// [`ServeConfig::listeners`]). Without an `admin_key` one is made ([`Server::admin_key`]).
    pub fn start(mut config: ServeConfig) -> Result<Server, StartError> {
        let listeners = config.listeners();
        config.check().map_err(|e| StartError(e.0))?;
        if config.admin_key.is_none() {
            config.admin_key = Some(auth::Secret::random());
        }
        let tls = match listeners.https {
            Some(_) => Some(Arc::new(
                Tls::new(&config).map_err(|e| StartError(format!("https: {e}")))?,
            )),
            None => None,
        };
        let signaling = Arc::new(config.clone());
        let gateway = Gateway::start(config)?;
        let stop_on_error = |e: StartError| {
            gateway.stop();
            e
        };
        let http = listeners
            .http
            .map(|a| bind_tcp("http", a))
            .transpose()
            .map_err(stop_on_error)?;
        let https = listeners
            .https
            .map(|a| bind_tcp("https", a))
            .transpose()
            .map_err(stop_on_error)?;
        let metrics_listener = signaling
            .metrics
            .map(|a| bind_tcp("metrics", a))
            .transpose()
            .map_err(stop_on_error)?;
        let ng_socket = bind_ng(&gateway).map_err(stop_on_error)?;
        let ng_addr = ng_socket.as_ref().and_then(|s| s.local_addr().ok());
        let http_addr = http.as_ref().map(|(_, a)| *a);
        let https_addr = https.as_ref().map(|(_, a)| *a);
        let metrics_addr = metrics_listener.as_ref().map(|(_, a)| *a);
        let turn =
            turn::TurnService::start(&signaling, &gateway, https_addr).map_err(stop_on_error)?;
        let bound = https_addr
            .map(|a| format!("https://{a}"))
            .or(http_addr.map(|a| format!("http://{a}")));
        let ng_reached = ng_addr.filter(|a| !a.ip().is_unspecified());
        let joining =
            join_cluster(&signaling, &gateway, (bound, ng_reached)).map_err(stop_on_error)?;
        let (cluster, pipes) = match joining {
            Some(j) => (Some(j.cluster), j.pipes),
            None => (None, None),
        };
        let ng = ng_socket.map(|s| {
            let server = ng::Ng::new(
                gateway.clone(),
                gateway.config().sdes_profiles().unwrap_or_default(),
            );
            (s, server.with_cluster(cluster.clone()))
        });
        let turn_tls = turn.clone().filter(|_| signaling.turn_tls);
        let mut bound = Vec::new();
        bound.extend(http.map(|(l, _)| (l, None)));
        bound.extend(https.map(|(l, _)| (l, tls.clone().map(|t| (t, turn_tls)))));
        let (tx, rx) = oneshot::channel::<()>();
        let access = Arc::new(http::Access::new(auth::Policy::new(&signaling)));
        let http::Signaling {
            router: app,
            tasks,
            metrics,
        } = http::router(
            gateway.clone(),
            access.clone(),
            turn.clone(),
            cluster.clone(),
        )
        .map_err(|e| {
            gateway.stop();
            StartError(e.0)
        })?;
        let run = SignalingRun {
            gateway: gateway.clone(),
            signaling,
            app,
            metrics,
            tasks,
            cluster,
            pipes,
            ng,
            metrics_listener: metrics_listener.map(|(l, _)| l),
            listeners: bound,
            shutdown: rx,
        };
        let t = std::thread::Builder::new()
            .name("secrelay-http".into())
            .spawn(move || run.run_on_own_runtime())
            .map_err(|e| StartError(format!("HTTP thread: {e}")))?;
        tracing::info!(http = ?http_addr, https = ?https_addr, metrics = ?metrics_addr, ng = ?ng_addr, "signaling open");
        warn_of_unsafe_settings(&access, gateway.config(), ng_addr);
        Ok(Server {
            gateway,
            access,
            http_addr,
            https_addr,
            metrics_addr,
            ng_addr,
            tls,
            turn,
            shutdown: Some(tx),
            http_thread: Some(t),
        })
    }

    /// What `secrelay serve` prints once it is up: the URLs to use, the CA to trust, the
    /// media port ([`banner`]).
    pub fn banner(&self) -> Banner {
        let g = &self.gateway;
        let b = BuildInfo::get();
        let tls = self.tls.as_ref().filter(|_| self.https_addr.is_some());
        let info = tls.map(|t| t.info());
        let trust = match (&info, &g.config().tls_ca_dir) {
            (Some(i), _) if i.trust_anchor.is_some() => {
                i.trust_anchor.clone().map(Trust::Throwaway)
            }
            (Some(_), Some(dir)) => Some(Trust::CaDir(dir.join(secrelay_dtls::ca::CA_CERT_FILE))),
            _ => None,
        };
        Banner {
            build: format!(
                "secrelay {}, commit {}, {} build",
                b.version, b.commit, b.profile
            ),
            https: self
                .https_addr
                .zip(info.as_ref())
                .map(|(a, i)| (a, format!("{} certificate from {}", i.key, i.source))),
            names: info.map(|i| i.names).unwrap_or_default(),
            trust,
            http: self.http_addr,
            udp: g.udp_addr(),
            candidate: g.candidate(),
            workers: g.config().worker_count(),
            ng: self.ng_addr,
            metrics: self.metrics_addr,
            admin_key_file: None,
            rooms_open: !self.access.policy().closes_rooms(),
        }
    }

    /// The plain HTTP address, when plain HTTP was asked for.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The HTTPS address, when HTTPS is served.
    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https_addr
    }

    /// The ng control socket's address, when one is configured.
    pub fn ng_addr(&self) -> Option<SocketAddr> {
        self.ng_addr
    }

    /// The admin key in force (configured, or made at start), for the operator's tools.
    pub fn admin_key(&self) -> auth::Secret {
        self.access
            .policy()
            .admin_key()
            .cloned()
            .expect("Server::start always sets an admin key")
    }

    /// The metrics listener's address (`metrics`), when one is configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Puts the credentials of `config` in force from the next request on: `api_keys`,
    /// `admin_key`, `token`, the rooms' tokens and `open` (the rest of `config` is not
    /// re-read). Err: `config` does not check; the credentials in force stay.
    pub fn reload_access(&self, config: &ServeConfig) -> Result<(), ConfigError> {
        config.check()?;
        let mut config = config.clone();
        if config.admin_key.is_none() {
            // The key made at start stays: the file the operator was given still works.
            config.admin_key = Some(self.admin_key());
        }
        self.access.replace(auth::Policy::new(&config));
        tracing::info!(
            keys = config.api_keys.len(),
            admin_key = config.admin_key.is_some(),
            "access credentials reloaded"
        );
        Ok(())
    }

    /// The signaling's base URL: `https://ip:port` when HTTPS is served, else `http://ip:port`.
    pub fn url(&self) -> String {
        match (self.https_addr, self.http_addr) {
            (Some(a), _) => format!("https://{a}"),
            (None, Some(a)) => format!("http://{a}"),
            (None, None) => unreachable!("a server has at least one signaling listener"),
        }
    }

    /// The plain HTTP base URL, when plain HTTP was asked for.
    pub fn http_url(&self) -> Option<String> {
        self.http_addr.map(|a| format!("http://{a}"))
    }

    /// The HTTPS side's TLS state (its certificate, its reload), when HTTPS is served.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    /// The embedded TURN server (its addresses, counters, credentials), when one is
    /// configured.
    pub fn turn(&self) -> Option<&secrelay_turn::TurnServer> {
        self.turn.as_deref().map(turn::TurnService::server)
    }

    /// Builds the HTTPS certificate again from its source (PEM files read again, or a fresh
    /// certificate issued) and presents it from the next handshake on; counted in `/metrics`.
    /// On error the certificate in use stays. Returns the new certificate's fingerprint.
    pub fn reload_tls(&self) -> Result<String, ConfigError> {
        let Some(tls) = &self.tls else {
            return Err(ConfigError(
                "no HTTPS listener to reload a certificate for".into(),
            ));
        };
        let stats = &self.gateway.stats().tls;
        match tls.reload() {
            Ok(fp) => {
                stats.reloads_ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(fingerprint = %fp, "HTTPS certificate reloaded");
                Ok(fp)
            }
            Err(e) => {
                stats.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "HTTPS certificate reload failed; the one in use stays");
                Err(e)
            }
        }
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Graceful shutdown: stop admitting, close_notify to every participant, finish the HTTP
    /// requests in flight, wait `drain_secs` for the last datagrams, stop the workers.
    pub fn shutdown(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.http_thread.take() {
            let _ = t.join();
        }
        if let Some(t) = &self.turn {
            t.stop();
        }
        std::thread::sleep(Duration::from_secs_f64(
            self.gateway.config().drain_secs.min(10.0),
        ));
        self.gateway.stop();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.http_thread.is_some() {
            self.stop_inner();
        }
    }
}

#[cfg(test)]
mod placement_tests {
    use super::least_loaded;

    /// A spread room's new viewer goes to the least loaded worker that takes joins, ties to
    /// the room's own; a worker that sheds joins is passed over however idle it is.
    #[test]
    fn a_viewer_goes_to_the_least_loaded_worker_that_takes_joins() {
        assert_eq!(least_loaded(&[(5, true), (3, true)], 0), Some(1));
        assert_eq!(
            least_loaded(&[(3, true), (3, true)], 0),
            Some(0),
            "a tie: home"
        );
        assert_eq!(
            least_loaded(&[(3, true), (3, true)], 1),
            Some(1),
            "a tie: home"
        );
        assert_eq!(
            least_loaded(&[(9, true), (0, false), (4, true)], 0),
            Some(2),
            "the idle one sheds"
        );
        assert_eq!(
            least_loaded(&[(0, false), (7, true)], 0),
            Some(1),
            "home sheds"
        );
        assert_eq!(least_loaded(&[(0, false), (0, false)], 0), None);
    }
}
