//! `secrelay serve`'s configuration: TOML, every field optional, the defaults run with no file.
//! Unknown keys are errors that name the key, so a typo never silently does nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrelay_dtls::KeyType;

use crate::admission::AdmissionConfig;
use secrelay_srtp::Profile;
use serde::{Deserialize, Serialize};

pub use super::auth::Secret;

/// A setting that takes one name or a list of them (`xdp = "eth0"`, `xdp = ["eth0", "eth1"]`).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// A room's settings.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoomConfig {
    /// The room's own token (the simple mode, `Authorization: Bearer <token>`): whoever holds
    /// it may publish, view, end sessions and change the room's settings. Access tokens signed
    /// with `api_keys` work beside it.
    pub token: Option<Secret>,
    /// Anyone may publish and view in this room without a credential, even on a gateway whose
    /// `api_keys` or `token` close every other room.
    #[serde(default)]
    pub open: bool,
}

/// Where the gateway posts its webhooks.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The receiver: `http://…` or `https://…` (checked against `webhook_ca`).
    pub url: String,
    /// The `api_keys` entry whose secret signs each request (a JWT in `Authorization` whose
    /// `sha256` claim is the body's hash).
    pub key: String,
    /// The events to send (`room_started`, `room_finished`, `participant_joined`,
    /// `participant_left`, `publishing_started`, `publishing_stopped`); empty: every event.
    #[serde(default)]
    pub events: Vec<String>,
}

/// A data channel every participant agrees on out of band, as a page's
/// `createDataChannel(label, {negotiated: true, id})` makes one.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NegotiatedChannel {
    /// Its SCTP stream id, the `id` both sides give it (0 to 1023).
    pub id: u16,
    /// Its label: what the room relays its messages by.
    pub label: String,
    /// Its subprotocol (empty for none).
    #[serde(default)]
    pub protocol: String,
    /// Whether its messages arrive in the order sent.
    #[serde(default = "ordered_by_default")]
    pub ordered: bool,
    /// Partially reliable: each message is retransmitted at most this many times (not with
    /// `max_lifetime_ms`). Neither: reliable.
    #[serde(default)]
    pub max_retransmits: Option<u32>,
    /// Partially reliable: each message is retransmitted for at most this many milliseconds.
    #[serde(default)]
    pub max_lifetime_ms: Option<u32>,
}

fn ordered_by_default() -> bool {
    true
}

impl NegotiatedChannel {
    /// As the data-channel engine takes it.
    fn negotiated(&self) -> Result<secrelay_datachannel::Negotiated, ConfigError> {
        use secrelay_datachannel::Reliability;
        let reliability = match (self.max_retransmits, self.max_lifetime_ms) {
            (None, None) => Reliability::Reliable,
            (Some(n), None) => Reliability::MaxRetransmits(n),
            (None, Some(ms)) => Reliability::MaxLifetime(Duration::from_millis(u64::from(ms))),
            (Some(_), Some(_)) => {
                return Err(ConfigError(format!(
                    "data_negotiated id {}: max_retransmits and max_lifetime_ms are exclusive",
                    self.id
                )))
            }
        };
        Ok(secrelay_datachannel::Negotiated {
            id: self.id,
            spec: secrelay_datachannel::ChannelSpec {
                label: self.label.clone(),
                protocol: self.protocol.clone(),
                ordered: self.ordered,
                reliability,
                priority: 256,
            },
        })
    }
}

/// Everything `secrelay serve` can be told.
///
/// `docs/configuration.md` and `packaging/secrelay.toml` are generated from these fields, their
/// doc comments and [`ServeConfig::default`] (`tests/config_reference.rs`): a doc comment here
/// is what an operator reads.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Plain HTTP signaling and operations (WHIP, WHEP, rooms, /api, /metrics, /healthz): only
    /// when asked for. With neither `http` nor `https` set, the gateway serves HTTPS on
    /// `127.0.0.1:8443`.
    pub http: Option<SocketAddr>,
    /// HTTPS for the same routes (TLS 1.3 and 1.2 with rustls on aws-lc-rs; ALPN `h2` and
    /// `http/1.1`). The certificate comes from `tls_cert`/`tls_key`, or is issued at start by
    /// the private CA in `tls_ca_dir`, or by a throw-away private CA made at start.
    pub https: Option<SocketAddr>,
    /// The one UDP address every participant's ICE, DTLS and SRTP use.
    pub udp: SocketAddr,
    /// ICE over TCP (RFC 6544, passive; datagrams framed as RFC 4571 says) on this address,
    /// for browsers on networks that let no UDP out: answers carry a `tcptype passive` host
    /// candidate (the `announce` address, this port) after the UDP one and at a lower
    /// priority, so a browser that can use UDP still does. The same ICE checks, DTLS-SRTP and
    /// media as over UDP; a connection that reads slower than its media comes has datagrams
    /// dropped whole (`tcp_queue_full`, `tcp_queue_stale` past half a second queued), never
    /// the worker held up. None by default.
    pub ice_tcp: Option<SocketAddr>,
    /// The ng control socket for SIP proxies (rtpengine's protocol, UDP); none by default.
    pub ng: Option<SocketAddr>,
    /// The addresses and networks (`10.0.0.5`, `10.0.0.0/24`, `::1`) the ng control socket takes
    /// commands from; a datagram from anywhere else is dropped unanswered and counted. ng
    /// carries no authentication (as with rtpengine): set this whenever the socket is reachable
    /// from beyond the SIP proxies. Empty (the default): any source.
    pub ng_allow: Vec<String>,
    /// Where ng calls are recorded (`start recording`, or `record call` in an offer): per
    /// call a pcap file of the RTP each side sent, decrypted, as raw IP datagrams from the
    /// side's address to the gateway's port, and a JSON file saying what it holds. Recording
    /// is refused without it. None by default.
    pub recording_dir: Option<std::path::PathBuf>,
    /// Where the audio files played to participants are read from (ng `play media`'s `file`,
    /// the HTTP API's `POST /api/rooms/{room}/participants/{id}/media`): a name is taken
    /// relative to this folder, and one that resolves outside it (`..`, an absolute path
    /// elsewhere, a link out) is refused, so a command cannot read other files of the host.
    /// Without it no file is read (ng's `blob`, the file's contents in the command, is taken
    /// either way). WAV, MP3 or FLAC, at most 64 MiB. None by default.
    pub media_dir: Option<std::path::PathBuf>,
    /// The address written as the host candidate in answers (default: `udp`'s address, or when
    /// that is unspecified, the address of the interface with the default route).
    pub announce: Option<IpAddr>,
    /// An IPv6 address written as a second host candidate, beside `announce`'s, for browsers
    /// that reach the gateway over IPv6: needs `udp` on `[::]` (one dual-stack socket takes
    /// both families; IPv4 peers keep their IPv4 addresses). ICE-TCP on `[::]` announces both
    /// too. None by default.
    pub announce_ipv6: Option<std::net::Ipv6Addr>,
    /// Packet workers (each with its own SO_REUSEPORT socket on `udp`); 0 = one per core.
    pub workers: usize,
    /// Spread a room's WHEP viewers over the workers: each viewer joins on the worker with the
    /// fewest participants, and the room's worker hands every packet its publishers send once
    /// to each other worker that holds viewers of it, which relays it to its own. A broadcast's
    /// fan-out then runs on every core instead of one. Off: a room's viewers all join on the
    /// room's worker. Rooms that mix stay on one worker.
    pub spread_viewers: bool,
    /// The directory a cluster of gateways shares: a Redis or Valkey URL
    /// (`redis://10.0.0.5:6379/0`; `redis://:PASSWORD@host:6379` with a password). Each node
    /// registers there with a lease, each room is owned by one node, and a session's offer that
    /// arrives at a node that does not own its room is redirected (307) to the owner; a new room
    /// goes to the node with the fewest participants. Not set: no cluster.
    pub cluster_redis: Option<String>,
    /// This node's name in the cluster (letters, digits, `.`, `_`, `-`; unique among the
    /// nodes). Needed with `cluster_redis`.
    pub cluster_node: Option<String>,
    /// Where the other nodes send clients for this node's rooms: the base URL of its signaling
    /// (`https://gw-a.example.com:8443`). Default: the address its signaling is bound to
    /// (HTTPS first), which only works where clients reach that address.
    pub cluster_url: Option<String>,
    /// Where the other nodes forward the ng commands of this node's calls: its ng socket's
    /// address as they reach it. An ng command for a call another node owns is forwarded there
    /// and its answer relayed, so a SIP proxy may send every command to any node. Default: `ng`
    /// when it names one address (not `0.0.0.0`).
    pub cluster_ng: Option<SocketAddr>,
    /// Seconds a node's registration and its rooms' ownership last unless renewed (renewed
    /// every third of it): how long the rooms of a node that died stay redirected to it before
    /// another node takes them.
    pub cluster_lease_secs: f64,
    /// A file holding the 256-bit key (64 hex digits: `openssl rand -hex 32`) this node seals
    /// its ng calls' states with before writing them to the directory, where a standby reads
    /// them (`cluster_takeover`). Every node that keeps or takes calls needs the same key (and,
    /// for calls with a WebRTC side, the same `cert`). Not set: calls are not kept (unless
    /// `cluster_state_clear`).
    pub cluster_state_key: Option<PathBuf>,
    /// Write the calls' states to the directory in clear (SRTP keys included), for a directory
    /// the operator trusts as much as the nodes. Ignored with `cluster_state_key`.
    pub cluster_state_clear: bool,
    /// The nodes whose ng calls this node takes over when their lease runs out: it binds each
    /// call's ports on the addresses the dead node had (moved to this machine, as keepalived
    /// moves a virtual address), makes each call again from the ng requests that made it, and
    /// gives each leg the keys its phone holds (a WebRTC leg its DTLS association's SRTP
    /// keys: its browser restarts ICE towards this node). Needs `cluster_state_key` (or
    /// `cluster_state_clear`) here and on those nodes, and for WebRTC sides the same `cert`;
    /// this node's `rtp_ports` must not overlap theirs.
    pub cluster_takeover: Vec<String>,
    /// A hot standby: new rooms and calls go to the other live nodes that are not standbys (an
    /// offer or ng call for a new room that arrives here goes there), while this node takes
    /// over the calls of `cluster_takeover` when their node dies. With no such node left it
    /// takes new rooms itself. Unlike a drained node it stays healthy (`/healthz` 200).
    pub cluster_standby: bool,
    /// Where this node's pipes to the other nodes listen (`10.0.0.5:7400`): TCP for each
    /// link's control connection (TLS, both ends authenticated by `cluster_pipe_ca`), UDP on
    /// the same port for the media. Set here and on the room's owner, a WHEP viewer of a room
    /// another node owns is served here instead of redirected: the owner sends each of the
    /// room's publishers' streams here once, sealed, whatever the number of viewers here, and
    /// this node relays it to its own. A large room's viewers then spread over the nodes that
    /// receive them. Needs `cluster_redis`, `cluster_pipe_ca`, `cluster_pipe_cert` and
    /// `cluster_pipe_key`; an address the other nodes reach (not `0.0.0.0`; port 0 picks one).
    pub cluster_pipe: Option<SocketAddr>,
    /// The CA (PEM) that issued every node's pipe certificate (`secrelay ca init`): a link is
    /// made only with a node whose certificate it issued and that names the node.
    pub cluster_pipe_ca: Option<PathBuf>,
    /// This node's pipe certificate chain (PEM): issued by `cluster_pipe_ca` for both TLS
    /// server and client use, naming the node (`secrelay ca issue --name NODE`).
    pub cluster_pipe_cert: Option<PathBuf>,
    /// The pipe certificate's private key (PEM).
    pub cluster_pipe_key: Option<PathBuf>,
    /// Spread a room's WHEP viewers over the nodes: a viewer that asks the room's own node
    /// is sent (307) to the live node with pipes that has the fewest participants, when it has
    /// fewer than this node, and is served there through the pipes. Without it a viewer is
    /// served at whichever node it reaches (a load balancer's choice). Needs `cluster_pipe`.
    pub cluster_spread_viewers: bool,
    /// Key type of the certificate generated at start (`ecdsa-p256`, `ecdsa-p384`, `rsa-2048`…).
    pub cert_type: String,
    /// A certificate chain (PEM) to use instead of a generated one; needs `key`. Nodes of a
    /// cluster that take each other's ng calls over need the same one: a browser's DTLS
    /// association goes on at the node that took its call, and it knows the fingerprint.
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PKCS#8 PEM).
    pub key: Option<PathBuf>,
    /// SRTP profiles accepted in DTLS-SRTP, most preferred first (RFC 5764 names).
    pub srtp_profiles: Vec<String>,
    /// Seconds without an authenticated ICE check before a participant is dropped (RFC 7675).
    pub consent_timeout_secs: f64,
    /// Most participants at once; more are refused with 503.
    pub max_participants: usize,
    /// Admission control: the load (CPU time a worker's thread
    /// used, as a share of wall time, 0.0–1.0) from which the worker defers new DTLS handshakes (their
    /// ClientHellos are dropped and counted as `overload`; peers retransmit). Above 1: never.
    pub shed_handshakes_at: f64,
    /// The load from which new rooms and legs in the worker's rooms are refused: 503 with
    /// `Retry-After` over HTTP(S), an ng `error` to SIP proxies. Established media is never
    /// shed. Above 1: never.
    pub shed_joins_at: f64,
    /// Largest HTTP body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// WebRTC data channels (SCTP over DTLS): a participant whose offer has a data-channel
    /// section gets one, and what it sends on a channel reaches every other participant of the
    /// room with data channels, on their channel of the same label (opened by the gateway with
    /// the sender's settings when they have none). Off: the section is rejected.
    pub data_channels: bool,
    /// Largest data-channel message, in bytes, either way (announced as
    /// `a=max-message-size`); larger ones are refused by the browser or dropped.
    pub data_max_message_size: usize,
    /// Data-channel messages per second a participant may send into its room (bursts of two
    /// seconds' worth); more are dropped and counted.
    pub data_messages_per_second: u32,
    /// Data-channel bytes per second a participant may send into its room (bursts of two
    /// seconds' worth, and at least one largest message); more are dropped and counted.
    pub data_bytes_per_second: u64,
    /// Data channels every participant agrees on out of band (`[[data_negotiated]]`, the
    /// W3C's `negotiated: true`): each participant's association opens them on their stream
    /// ids without DCEP as soon as it is up, and the room relays their messages by label like
    /// any other channel's (a participant without the channel gets one opened by DCEP). A
    /// page's channel of the same id must have the same settings. None by default.
    pub data_negotiated: Vec<NegotiatedChannel>,
    /// Origins whose pages may call the gateway from a browser (CORS), e.g.
    /// `"https://app.example.com"`; `"*"` for any. Empty (the default): none but the gateway's
    /// own pages, which need no CORS.
    pub cors_origins: Vec<String>,
    /// A token for every room that has none of its own (the simple mode; see `rooms`). Setting
    /// it closes the rooms to anonymous callers.
    pub token: Option<Secret>,
    /// API keys: key id → secret (at least 32 bytes). Access tokens (JWTs, HS256) signed with
    /// one of them, naming it in their `kid` header or `iss` claim, admit their holder with the
    /// grants they carry (`secrelay token create`). Setting any closes the rooms to anonymous
    /// callers (bar rooms marked `open`). Re-read on SIGHUP: add a key, mint with it, remove
    /// the old one, and tokens signed with the old one are refused from then on.
    pub api_keys: BTreeMap<String, Secret>,
    /// The operator's credential (`Authorization: Bearer <admin_key>`, at least 32 bytes):
    /// every room, the calls of the ng socket, the room list and `/metrics`. Re-read on
    /// SIGHUP. When unset, `secrelay serve` makes one at start and writes it to a file only its
    /// user can read.
    pub admin_key: Option<Secret>,
    /// Seconds of clock difference allowed when checking a token's `exp` and `nbf`.
    pub token_leeway_secs: u64,
    /// A plain HTTP listener for `/metrics` and `/healthz` only, with no credential (for a
    /// Prometheus scraper on a private network or loopback). Without it, `/metrics` on the
    /// signaling listeners needs the admin key.
    pub metrics: Option<SocketAddr>,
    /// Most participants in one room; more are refused with 503.
    pub max_participants_per_room: usize,
    /// The share (0.0–1.0) of `max_participants`, and of `max_participants_per_room`, that
    /// anonymous callers (in open rooms) cannot take: kept for callers with a credential, so
    /// that anonymous offers cannot lock protected rooms out.
    pub reserved_for_authenticated: f64,
    /// Sessions one source address (an IPv4 address, an IPv6 /64) may have made without a
    /// credential (in open rooms) that are not connected yet (an offer answered, no ICE and
    /// DTLS-SRTP done); more anonymous offers from it are refused with 429 until some connect
    /// or time out. Callers with a credential are not counted.
    pub max_pending_offers_per_source: usize,
    /// Rooms whose settings (`PATCH /api/rooms/{room}`) each worker keeps, whether the room
    /// exists yet or not; settings for more rooms are refused with 503.
    pub max_room_settings: usize,
    /// Webhooks: signed HTTP POSTs of room and participant events, retried with backoff.
    pub webhooks: Vec<WebhookConfig>,
    /// Events queued for the webhooks at most; past it new events are dropped and counted
    /// (media is never held up by a slow receiver).
    pub webhook_queue: usize,
    /// Attempts per event and receiver before it is given up and counted (backoff doubling from
    /// half a second).
    pub webhook_attempts: u32,
    /// Seconds a webhook receiver has to answer one attempt.
    pub webhook_timeout_secs: f64,
    /// CA certificates (PEM) that `https://` webhook receivers are checked against; default:
    /// `$SSL_CERT_FILE`, else `/etc/ssl/certs/ca-certificates.crt`.
    pub webhook_ca: Option<PathBuf>,
    /// Seconds a shutdown waits for close_notify to leave before exiting.
    pub drain_secs: f64,
    /// Rooms with settings of their own; other rooms are made on first use.
    pub rooms: BTreeMap<String, RoomConfig>,
    /// The SRTP engine each worker hands its receive batches to: `simd` (the default:
    /// multi-buffer lanes and the AES-GCM kernel where the CPU runs them in AVX-512, one
    /// packet at a time below 8; audio and video alike, no slower than `serial` at any packet
    /// size measured, `lab srtp`'s `srtp_engine_sizes`; on a CPU without AVX-512, where the
    /// lanes measured slower, each packet through the crypto provider as `serial` does, with
    /// the batch's cache hints) or `serial`.
    pub srtp_engine: String,
    /// How the workers read and write their UDP sockets (the shared media port and every
    /// telephony leg's ports): `io_uring` (one multishot receive per socket into a shared
    /// ring of buffers, each batch's sends in one submission: one system call per batch
    /// whatever the number of sockets), `mmsg` (`recvmmsg`/`sendmmsg` per ready socket, with
    /// epoll), or `auto` (the default: io_uring where the kernel allows it, checked at start
    /// by a datagram through a loopback socket; `mmsg` otherwise, and the log says why). With
    /// `io_uring` the gateway refuses to start where the kernel does not allow it. `af_xdp`
    /// (needs `xdp` naming the interfaces, and `udp` on an address of its own): the XDP filter
    /// hands the media ports' admitted datagrams to an XDP socket per worker and interface
    /// (worker N on each interface's receive queue N) as raw frames, past the kernel's IP and
    /// UDP layers; the worker checks their headers and writes its replies' Ethernet, IP and UDP
    /// headers itself, out of the interface the kernel's route to the destination goes out of,
    /// with the next hop's MAC address from the kernel's neighbour table (IPv4's or IPv6's).
    /// What does not go that way takes the worker's sockets (`mmsg`): a destination not in the
    /// neighbour table yet (the socket's send makes the kernel resolve it), one routed out of
    /// an interface `xdp` does not name, a destination of the other IP family than the
    /// sending socket's, a worker beyond an interface's queues. Telephony legs on the named
    /// `interfaces` take the path on whichever `xdp` interface their addresses are reached
    /// through. Zero-copy where the driver has it, copy mode otherwise (the log says which). The sender at the other end of a veth pair must compute its UDP checksums
    /// (`ethtool -K PEER tx off`): veth's checksum offload leaves them unfinished, and such
    /// frames are dropped (`bad_frame`).
    pub media_io: String,
    /// The network interfaces (`"eth0"`, or a list: `["eth0", "eth1"]`, a gateway bridging two
    /// networks) to put the XDP filter on: datagrams arriving there for the
    /// media ports (`udp`'s port and every port of `rtp_ports`) from sources the gateway has
    /// not admitted are dropped in the network driver, before the kernel's socket layer spends
    /// anything on them, and counted (`secrelay_xdp_datagrams_total`). Admitted: on `udp`'s
    /// port, ICE checks (STUN, authenticated by the gateway) from anyone and everything else
    /// from addresses an ICE check validated; on a telephony leg's ports, its signalled or
    /// latched source, or anyone while the leg takes any source (an SDES leg that follows its
    /// phone, a plain leg still latching); on a port without a leg, nobody. Every port of
    /// `rtp_ports` is the filter's on that interface, whatever else binds it. Needs root, or
    /// `CAP_BPF`, `CAP_NET_ADMIN` and `CAP_PERFMON` (`packaging/secrelay-xdp.conf` gives them to
    /// the systemd service); the gateway refuses to start when the kernel refuses the filter on
    /// any of them. Every interface has the same program and the same admissions. At most 8.
    /// Unset (the default): no filter.
    #[serde(deserialize_with = "one_or_many")]
    pub xdp: Vec<String>,
    /// Where the XDP filter runs: `native` (in the network driver), `generic` (at the start of
    /// the kernel's receive path, for drivers without XDP) or `auto` (the default: native where
    /// the driver has it, generic otherwise; the log and `secrelay_xdp_native` say which).
    pub xdp_mode: String,
    /// Local ports for telephony legs (plain RTP, SDES-SRTP), `"LOW-HIGH"`: each leg takes an
    /// even port for RTP and the next one for RTCP (unless RTCP is muxed), bound on `udp`'s
    /// address.
    pub rtp_ports: String,
    /// Complexity of the gateway's own Opus encoders (transcoding and mixing), 0–10: libopus's
    /// quality/CPU trade-off. 10 (libopus's default) costs about 2.5× the CPU of 5 per frame
    /// (`secrelay lab codec`); a gateway encoding many Opus streams may trade some quality for
    /// calls per core here.
    pub opus_complexity: i32,
    /// SDES suites accepted, most preferred first (RFC 4568 and RFC 6188 names). Also known:
    /// `NULL_HMAC_SHA1_80` and `NULL_HMAC_SHA1_32`, which authenticate without encrypting
    /// (rtpengine offers them; secrelay only when they are listed here).
    pub sdes_suites: Vec<String>,
    /// Where a plain RTP leg takes media from: `"signalled"` (only the address its SDP gives)
    /// or `"first-packets"` (the first source within its first `nat_latch_packets` packets,
    /// for phones behind NAT).
    pub plain_latch: String,
    /// Packets within which a plain leg latches to its first source (`first-packets`).
    pub nat_latch_packets: u32,
    /// Seconds without media before a telephony leg ends (rtpengine's timeout).
    pub media_timeout_secs: f64,
    /// Mean seconds between the gateway's RTCP reports to each member (RFC 3550's 5 s for
    /// small sessions; each randomized to 0.5–1.5 of it).
    pub rtcp_interval_secs: f64,
    /// The HTTPS certificate chain (PEM, leaf first); needs `tls_key`. Re-read on reload.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, SEC1 `EC PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY`).
    pub tls_key: Option<PathBuf>,
    /// A private CA made by `secrelay ca init` (its `ca.pem` and `ca.key`): at start and on
    /// every reload the gateway issues itself a fresh server certificate for `tls_names`
    /// (kept in memory). Clients trust the CA's `ca.pem`.
    pub tls_ca_dir: Option<PathBuf>,
    /// Key type of an issued HTTPS certificate (`ecdsa-p256` by default, `rsa-2048`, …).
    pub tls_cert_type: String,
    /// Names an issued HTTPS certificate is valid for (DNS names or IP addresses). Empty:
    /// `localhost`, `127.0.0.1`, `::1`, the HTTPS address's own IP when it is specific, the
    /// `announce` address, and when HTTPS listens on every address (`0.0.0.0`, `::`) the
    /// machine's addresses (the one toward the default route, every interface's) and its host
    /// name.
    pub tls_names: Vec<String>,
    /// TLS versions offered: `"1.3"` and/or `"1.2"`.
    pub tls_versions: Vec<String>,
    /// Key exchange groups, most preferred first (`x25519`, `secp256r1`, `secp384r1`,
    /// `x25519mlkem768`); empty: rustls' defaults for aws-lc-rs.
    pub tls_groups: Vec<String>,
    /// TLS 1.3 session tickets sent after each handshake (stateless, encrypted under a key
    /// that rotates); 0 turns tickets off (TLS 1.2 then resumes by session id only).
    pub tls_tickets: u8,
    /// Sessions kept for resumption by session id (TLS 1.2) or, without tickets, TLS 1.3.
    pub tls_session_cache: usize,
    /// Seconds a TLS handshake may take, from the accepted connection to the client's Finished;
    /// a client that has not finished by then (slowloris) is cut off and counted.
    pub tls_handshake_timeout_secs: f64,
    /// TLS handshakes in progress at most; connections beyond it are closed at once and counted
    /// (`busy`), so a flood of half-open handshakes costs a bounded amount of memory.
    pub tls_max_handshakes: usize,
    /// HTTP and HTTPS connections open at most (each costs buffers); more are closed at once.
    pub max_connections: usize,
    /// HTTP and HTTPS connections one source (an IPv4 address, an IPv6 /64) may hold open at
    /// once; more from it are closed at accept (plain HTTP first gets `429` with
    /// `Retry-After`), so one client cannot take the `max_connections` everyone shares.
    pub max_connections_per_source: usize,
    /// Requests per second one source may make on average, over all its connections; beyond
    /// it `429 Too Many Requests` with `Retry-After`. 0 (the default): no limit.
    pub requests_per_source: f64,
    /// Requests a quiet source may make at once before `requests_per_source` applies.
    pub request_burst_per_source: u32,
    /// Seconds a connection has to begin its first request (after its TLS handshake on HTTPS),
    /// a request has to send its headers, and then to send its whole body and be answered
    /// (408 after it).
    pub http_request_timeout_secs: f64,
    /// Offer HTTP/2 (ALPN `h2`) beside HTTP/1.1.
    pub http2: bool,
    /// Threads of the signaling runtime (HTTP, HTTPS, ng), apart from the media workers.
    pub http_threads: usize,
    /// Seconds the resource (`Location`) of a session that ended on its own (close_notify,
    /// lost consent, DTLS failure) still answers a DELETE with 200 before it is forgotten.
    pub ended_resource_grace_secs: f64,
    /// SDES-SRTP legs keep to the source they latched to: authenticated packets from any
    /// other source are dropped (`unlatched_source`) instead of moving the latch (rtpengine's
    /// `strict-source`; off: an SDES leg follows its phone to a new address, as after a NAT
    /// rebinding). Plain RTP legs always keep to theirs.
    pub strict_source: bool,
    /// Seconds after a telephony leg ends during which the next leg on its ports drops media
    /// from the remote addresses it latched to or sent to (`stale_source`), unless one is
    /// that leg's own signalled address; 0: none.
    pub rtp_port_quarantine_secs: f64,
    /// TURN (RFC 8656) over UDP on this address, for browsers that cannot reach `udp` directly
    /// (the relay goes only to the gateway's own media address); none by default. WHIP, WHEP
    /// and room answers then carry the TURN servers and a credential in `Link` headers, and
    /// `GET /rooms/{room}/ice-servers` hands them out as JSON (the room page's way).
    pub turn_udp: Option<SocketAddr>,
    /// TURN over TCP on this address; none by default.
    pub turn_tcp: Option<SocketAddr>,
    /// TURN over TLS on the HTTPS listener (`https`): after the TLS handshake, a connection
    /// that chose ALPN `stun.turn`, or chose none and begins with a STUN message, is served as
    /// TURN, anything else as HTTPS. With HTTPS on port 443, browsers behind firewalls that let
    /// only TCP 443 out reach the media through it.
    pub turn_tls: bool,
    /// The secret TURN credentials are minted with, at least 16 bytes (the TURN REST API's:
    /// username `EXPIRY:IDENTITY`, password base64(HMAC-SHA1(secret, username)); coturn's
    /// `static-auth-secret`). Unset: a random one made at start, so that only this gateway
    /// mints credentials. Read at start.
    pub turn_secret: Option<Secret>,
    /// The realm of TURN's long-term credentials.
    pub turn_realm: String,
    /// The host named in the TURN URLs handed to clients. Unset: the host the client's request
    /// named (its `Host`), else the `announce` address.
    pub turn_host: Option<String>,
    /// Seconds a minted TURN credential stays valid; an allocation cannot be refreshed with an
    /// expired one, so this bounds how long one session can use the relay.
    pub turn_credential_ttl_secs: u64,
    /// Ports the TURN relay sockets take, `"LOW-HIGH"`, one per allocation, bound on the host
    /// address the media socket is reached at from this machine (loopback when `udp` listens
    /// on every address).
    pub turn_relay_ports: String,
    /// TURN allocations at once, at most (more are refused with 486); also the most TURN TCP
    /// connections open at once.
    pub turn_max_allocations: usize,
    /// TURN allocations one credential's identity may hold at once.
    pub turn_allocations_per_credential: usize,
    /// TURN allocations one source (an IPv4 address, an IPv6 /64) may hold at once; also the
    /// most TURN TCP connections it may hold open.
    pub turn_allocations_per_source: usize,
    /// The longest lifetime a TURN allocation is granted per Refresh, in seconds (at least
    /// 600, the protocol's default).
    pub turn_max_lifetime_secs: u64,
    /// TURN threads, each with its own SO_REUSEPORT socket on `turn_udp` and the relays of its
    /// allocations.
    pub turn_threads: usize,
    /// On a busy TURN thread (its sockets read through io_uring, as where `media_io` allows),
    /// how long datagrams may gather before the thread wakes for fewer than a batch, in µs
    /// (0 to 10,000): the most it adds to a relayed packet's delay, against fewer wake-ups per
    /// packet (docs/benchmarks.md measures 0, 200 and 500). An idle thread wakes for the first
    /// datagram at once; kernels before 6.12 wake for every datagram.
    pub turn_gather_us: u64,
    /// Media interfaces for telephony legs, as rtpengine's `--interface` writes them:
    /// `[NAME/]LOCAL[!ADVERTISED]` (`internal/10.0.0.5`, `external/192.168.1.5!203.0.113.7`,
    /// `::1`). Legs' ports are bound on LOCAL and their SDP announces ADVERTISED; the ng
    /// protocol's `direction` flag picks an interface per side by NAME, `address-family` or
    /// the side's own address picks IPv4 or IPv6 within it. Empty: one interface, the `udp`
    /// address announced as `announce`.
    pub interfaces: Vec<String>,
}

/// How the workers read and write their UDP sockets (`media_io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaIo {
    /// io_uring: multishot receives into a provided-buffer ring, sends submitted together.
    IoUring,
    /// `recvmmsg`/`sendmmsg` on each ready socket, woken by epoll.
    Mmsg,
    /// Raw frames through an XDP socket on each `xdp` interface's receive queue of the
    /// worker's number (the XDP filter redirects the media ports' datagrams there), UDP/IP
    /// built and checked by the worker; its sockets (`recvmmsg`/`sendmmsg`) for what does not
    /// come or go that way.
    AfXdp,
}

impl MediaIo {
    /// Every path, in the order `/metrics` lists them.
    pub const ALL: [MediaIo; 3] = [MediaIo::IoUring, MediaIo::Mmsg, MediaIo::AfXdp];

    /// Its name in the configuration, the log and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            MediaIo::IoUring => "io_uring",
            MediaIo::Mmsg => "mmsg",
            MediaIo::AfXdp => "af_xdp",
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> MediaIo {
        MediaIo::ALL
            .into_iter()
            .find(|m| m.code() == code)
            .unwrap_or(MediaIo::Mmsg)
    }
}

/// Where the gateway serves HTTPS when neither `http` nor `https` is configured.
pub const DEFAULT_HTTPS: &str = "127.0.0.1:8443";

/// The signaling listeners a configuration resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listeners {
    /// Plain HTTP, when asked for.
    pub http: Option<SocketAddr>,
    /// HTTPS.
    pub https: Option<SocketAddr>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            http: None,
            https: None,
            udp: "0.0.0.0:40000".parse().expect("a valid literal address"),
            ng: None,
            ng_allow: Vec::new(),
            recording_dir: None,
            media_dir: None,
            announce: None,
            announce_ipv6: None,
            ice_tcp: None,
            workers: 0,
            spread_viewers: true,
            cluster_redis: None,
            cluster_node: None,
            cluster_url: None,
            cluster_ng: None,
            cluster_lease_secs: 6.0,
            cluster_state_key: None,
            cluster_state_clear: false,
            cluster_takeover: Vec::new(),
            cluster_standby: false,
            cluster_pipe: None,
            cluster_pipe_ca: None,
            cluster_pipe_cert: None,
            cluster_pipe_key: None,
            cluster_spread_viewers: false,
            cert_type: KeyType::EcdsaP256.name().into(),
            cert: None,
            key: None,
            srtp_profiles: secrelay_dtls::endpoint::DEFAULT_SRTP_PROFILES
                .iter()
                .map(|p| p.to_string())
                .collect(),
            consent_timeout_secs: 30.0,
            max_participants: 10_000,
            data_channels: true,
            data_max_message_size: 262_144,
            data_negotiated: Vec::new(),
            data_messages_per_second: 500,
            data_bytes_per_second: 2 << 20,
            shed_handshakes_at: AdmissionConfig::default().shed_handshakes_at,
            shed_joins_at: AdmissionConfig::default().shed_joins_at,
            max_body_bytes: 64 * 1024,
            cors_origins: Vec::new(),
            token: None,
            api_keys: BTreeMap::new(),
            admin_key: None,
            token_leeway_secs: 5,
            metrics: None,
            max_participants_per_room: 1000,
            reserved_for_authenticated: 0.2,
            max_pending_offers_per_source: 16,
            max_room_settings: 1000,
            webhooks: Vec::new(),
            webhook_queue: 10_000,
            webhook_attempts: 6,
            webhook_timeout_secs: 5.0,
            webhook_ca: None,
            drain_secs: 1.0,
            rooms: BTreeMap::new(),
            srtp_engine: "simd".into(),
            media_io: "auto".into(),
            xdp: Vec::new(),
            xdp_mode: "auto".into(),
            rtp_ports: "30000-39999".into(),
            opus_complexity: secrelay_media::opus::Opus::DEFAULT_COMPLEXITY,
            sdes_suites: secrelay_gateway_default_suites(),
            plain_latch: "signalled".into(),
            nat_latch_packets: 10,
            media_timeout_secs: 60.0,
            rtcp_interval_secs: 5.0,
            tls_cert: None,
            tls_key: None,
            tls_ca_dir: None,
            tls_cert_type: KeyType::EcdsaP256.name().into(),
            tls_names: Vec::new(),
            tls_versions: vec!["1.3".into(), "1.2".into()],
            tls_groups: Vec::new(),
            tls_tickets: 2,
            tls_session_cache: 4096,
            tls_handshake_timeout_secs: 10.0,
            tls_max_handshakes: 1024,
            max_connections: 4096,
            max_connections_per_source: 256,
            requests_per_source: 0.0,
            request_burst_per_source: 50,
            http_request_timeout_secs: 10.0,
            http2: true,
            http_threads: 1,
            ended_resource_grace_secs: 60.0,
            strict_source: false,
            rtp_port_quarantine_secs: 60.0,
            turn_udp: None,
            turn_tcp: None,
            turn_tls: false,
            turn_secret: None,
            turn_realm: "secrelay".into(),
            turn_host: None,
            turn_credential_ttl_secs: 86_400,
            turn_relay_ports: "50000-59999".into(),
            turn_max_allocations: 10_000,
            turn_allocations_per_credential: 10,
            turn_allocations_per_source: 256,
            turn_max_lifetime_secs: 3600,
            turn_threads: 1,
            turn_gather_us: secrelay_turn::server::GATHER_US,
            interfaces: Vec::new(),
        }
    }
}

fn secrelay_gateway_default_suites() -> Vec<String> {
    crate::leg::RtpConfig::default()
        .sdes_suites
        .iter()
        .map(|p| p.sdp_name().to_owned())
        .collect()
}

/// A configuration error, naming the field or file at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// `"LOW-HIGH"`: two ports, LOW < HIGH, neither 0; the error names `key`.
fn port_range(key: &str, value: &str) -> Result<(u16, u16), ConfigError> {
    let bad = || {
        ConfigError(format!(
            "{key} = {value:?}: give LOW-HIGH, two ports with LOW < HIGH (e.g. \"30000-39999\")"
        ))
    };
    let (lo, hi) = value.split_once('-').ok_or_else(bad)?;
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || lo >= hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

impl ServeConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("--config {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| ConfigError(format!("--config {}: {e}", path.display())))
    }

    /// Parses TOML text and checks it.
    pub fn from_toml(text: &str) -> Result<ServeConfig, ConfigError> {
        let c: ServeConfig = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        c.check()?;
        Ok(c)
    }

    /// This node's name when `cluster_redis` is set (and the lease, checked); `None` without a
    /// cluster.
    pub fn cluster_node(&self) -> Result<Option<&str>, ConfigError> {
        if self.cluster_redis.is_none() {
            if !self.cluster_takeover.is_empty() || self.cluster_state_key.is_some() {
                return Err(ConfigError(
                    "cluster_takeover and cluster_state_key need cluster_redis (the directory the states are kept in)".into(),
                ));
            }
            if self.cluster_standby {
                return Err(ConfigError(
                    "cluster_standby needs cluster_redis (a standby of a cluster's nodes)".into(),
                ));
            }
            if self.cluster_pipe.is_some() {
                return Err(ConfigError(
                    "cluster_pipe needs cluster_redis (the directory that says which node owns a room)".into(),
                ));
            }
            return Ok(None);
        }
        self.check_cluster_pipe()?;
        if !(self.cluster_lease_secs.is_finite() && self.cluster_lease_secs >= 0.3) {
            return Err(ConfigError(format!(
                "cluster_lease_secs = {}: must be at least 0.3 seconds",
                self.cluster_lease_secs
            )));
        }
        let name = self.cluster_node.as_deref().unwrap_or_default();
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(ConfigError(format!(
                "cluster_node = {name:?}: cluster_redis needs this node's name (1 to 64 letters, digits, '.', '_' or '-')"
            )));
        }
        Ok(Some(name))
    }

    /// `cluster_pipe` and its certificates: all or none, on an address the other nodes reach.
    fn check_cluster_pipe(&self) -> Result<(), ConfigError> {
        let files = [
            ("cluster_pipe_ca", &self.cluster_pipe_ca),
            ("cluster_pipe_cert", &self.cluster_pipe_cert),
            ("cluster_pipe_key", &self.cluster_pipe_key),
        ];
        if self.cluster_spread_viewers && self.cluster_pipe.is_none() {
            return Err(ConfigError(
                "cluster_spread_viewers needs cluster_pipe (the viewers sent to another node are served there through the pipes)".into(),
            ));
        }
        match self.cluster_pipe {
            None => match files.iter().find(|(_, f)| f.is_some()) {
                Some((name, _)) => Err(ConfigError(format!(
                    "{name} is set but cluster_pipe is not (the address the node pipes listen on)"
                ))),
                None => Ok(()),
            },
            Some(a) if a.ip().is_unspecified() => Err(ConfigError(format!(
                "cluster_pipe = {a}: needs an address the other nodes reach, not an unspecified one"
            ))),
            Some(_) => match files.iter().find(|(_, f)| f.is_none()) {
                Some((name, _)) => Err(ConfigError(format!(
                    "cluster_pipe needs {name} (the nodes' links are mutually authenticated TLS)"
                ))),
                None => Ok(()),
            },
        }
    }

    /// The data-channel limits, `None` with `data_channels` off.
    pub fn data_limits(&self) -> Result<Option<secrelay_core::leg::DataLimits>, ConfigError> {
        let max = secrelay_datachannel::Config::MAX_MESSAGE_SIZE_LIMIT;
        if self.data_max_message_size == 0 || self.data_max_message_size > max {
            return Err(ConfigError(format!(
                "data_max_message_size = {}: must be 1 to {max} bytes",
                self.data_max_message_size
            )));
        }
        if self.data_messages_per_second == 0 || self.data_bytes_per_second == 0 {
            return Err(ConfigError(format!(
                "data_messages_per_second = {}, data_bytes_per_second = {}: each must be at least 1",
                self.data_messages_per_second, self.data_bytes_per_second
            )));
        }
        let negotiated = self
            .data_negotiated
            .iter()
            .map(NegotiatedChannel::negotiated)
            .collect::<Result<Vec<_>, _>>()?;
        let engine = secrelay_datachannel::Config {
            max_message_size: self.data_max_message_size,
            negotiated,
            ..secrelay_datachannel::Config::default()
        };
        engine
            .validate()
            .map_err(|e| ConfigError(format!("data_negotiated: {}", e.reason)))?;
        Ok(self
            .data_channels
            .then_some(secrelay_core::leg::DataLimits {
                max_message_size: self.data_max_message_size,
                messages_per_second: self.data_messages_per_second,
                bytes_per_second: self.data_bytes_per_second,
                negotiated: engine.negotiated,
            }))
    }

    /// Checks the values that parse but cannot work.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.key_type()?;
        self.profiles()?;
        self.engine()?;
        self.media_io_setting()?;
        if !(self.ended_resource_grace_secs.is_finite() && self.ended_resource_grace_secs >= 0.0) {
            return Err(ConfigError(format!(
                "ended_resource_grace_secs = {}: must be 0 or a positive number of seconds",
                self.ended_resource_grace_secs
            )));
        }
        if !(self.consent_timeout_secs.is_finite() && self.consent_timeout_secs > 0.0) {
            return Err(ConfigError(format!(
                "consent_timeout_secs = {}: must be a positive number of seconds",
                self.consent_timeout_secs
            )));
        }
        if !(self.drain_secs.is_finite() && self.drain_secs >= 0.0) {
            return Err(ConfigError(format!(
                "drain_secs = {}: must be zero or more seconds",
                self.drain_secs
            )));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(ConfigError(
                "cert and key: give both (a PEM chain and its PKCS#8 key) or neither".into(),
            ));
        }
        self.data_limits()?;
        self.rtp_port_range()?;
        self.xdp_check()?;
        self.ng_allowed()?;
        self.cluster_node()?;
        if let Some(ip) = self.announce_ipv6 {
            if !(self.udp.is_ipv6() && self.udp.ip().is_unspecified()) {
                return Err(ConfigError(format!(
                    "announce_ipv6 = \"{ip}\": udp {} takes no IPv6 peers beside IPv4 ones; bind it on [::]:PORT (dual-stack)",
                    self.udp
                )));
            }
        }
        for (name, v) in [
            ("shed_handshakes_at", self.shed_handshakes_at),
            ("shed_joins_at", self.shed_joins_at),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError(format!(
                    "{name} = {v}: a share of a worker's CPU time, 0.0 to 1.0 (above 1: never)"
                )));
            }
        }
        if !(0..=10).contains(&self.opus_complexity) {
            return Err(ConfigError(format!(
                "opus_complexity = {}: must be 0 to 10",
                self.opus_complexity
            )));
        }
        self.sdes_profiles()?;
        self.latch()?;
        if !(self.rtp_port_quarantine_secs.is_finite() && self.rtp_port_quarantine_secs >= 0.0) {
            return Err(ConfigError(format!(
                "rtp_port_quarantine_secs = {}: must be 0 or a positive number of seconds",
                self.rtp_port_quarantine_secs
            )));
        }
        if !(self.media_timeout_secs.is_finite() && self.media_timeout_secs > 0.0) {
            return Err(ConfigError(format!(
                "media_timeout_secs = {}: must be a positive number of seconds",
                self.media_timeout_secs
            )));
        }
        if !(self.rtcp_interval_secs.is_finite() && self.rtcp_interval_secs >= 0.1) {
            return Err(ConfigError(format!(
                "rtcp_interval_secs = {}: must be at least 0.1 s",
                self.rtcp_interval_secs
            )));
        }
        self.tls_check()?;
        self.auth_check()?;
        self.turn_check()?;
        if self.max_body_bytes < 1024 {
            return Err(ConfigError(format!(
                "max_body_bytes = {}: an SDP offer needs at least 1024",
                self.max_body_bytes
            )));
        }
        Ok(())
    }

    /// The signaling listeners: what `http` and `https` say, or HTTPS on [`DEFAULT_HTTPS`]
    /// when neither is set (plain HTTP only when asked for).
    pub fn listeners(&self) -> Listeners {
        match (self.http, self.https) {
            (None, None) => Listeners {
                http: None,
                https: Some(DEFAULT_HTTPS.parse().expect("a valid literal address")),
            },
            (http, https) => Listeners { http, https },
        }
    }

    fn tls_check(&self) -> Result<(), ConfigError> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError(
                "tls_cert and tls_key: give both (a PEM chain and its key) or neither".into(),
            ));
        }
        if self.tls_cert.is_some() && self.tls_ca_dir.is_some() {
            return Err(ConfigError(
                "tls_cert and tls_ca_dir: one source of the HTTPS certificate, not both".into(),
            ));
        }
        self.tls_key_type()?;
        if self.tls_versions.is_empty() {
            return Err(ConfigError(
                "tls_versions: name at least one of \"1.3\", \"1.2\"".into(),
            ));
        }
        for v in &self.tls_versions {
            if !matches!(v.as_str(), "1.3" | "1.2") {
                return Err(ConfigError(format!(
                    "tls_versions: {v:?}: unknown (valid: \"1.3\", \"1.2\")"
                )));
            }
        }
        for g in &self.tls_groups {
            if !matches!(
                g.to_ascii_lowercase().as_str(),
                "x25519" | "secp256r1" | "p-256" | "secp384r1" | "p-384" | "x25519mlkem768"
            ) {
                return Err(ConfigError(format!(
                    "tls_groups: {g:?}: unknown (valid: x25519, secp256r1, secp384r1, x25519mlkem768)"
                )));
            }
        }
        for (key, v, min) in [
            (
                "tls_handshake_timeout_secs",
                self.tls_handshake_timeout_secs,
                0.05,
            ),
            (
                "http_request_timeout_secs",
                self.http_request_timeout_secs,
                0.05,
            ),
        ] {
            if !(v.is_finite() && v >= min) {
                return Err(ConfigError(format!(
                    "{key} = {v}: must be at least {min} s"
                )));
            }
        }
        for (key, v) in [
            ("tls_max_handshakes", self.tls_max_handshakes),
            ("max_connections", self.max_connections),
            (
                "max_connections_per_source",
                self.max_connections_per_source,
            ),
            (
                "request_burst_per_source",
                self.request_burst_per_source as usize,
            ),
            ("http_threads", self.http_threads),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{key} = 0: must be at least 1")));
            }
        }
        if !(self.requests_per_source.is_finite() && self.requests_per_source >= 0.0) {
            return Err(ConfigError(format!(
                "requests_per_source = {}: requests per second, 0 for no limit",
                self.requests_per_source
            )));
        }
        Ok(())
    }

    /// `ng_allow` parsed: each entry a network, a bare address its own /32 or /128.
    pub fn ng_allowed(&self) -> Result<Vec<ipnet::IpNet>, ConfigError> {
        self.ng_allow
            .iter()
            .map(|a| {
                a.parse::<ipnet::IpNet>()
                    .or_else(|_| a.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map(|n| n.trunc())
                    .map_err(|_| {
                        ConfigError(format!(
                            "ng_allow: {a:?}: not an address or a network (10.0.0.5, 10.0.0.0/24, fd00::/64)"
                        ))
                    })
            })
            .collect()
    }

    /// The per-source limits of the signaling listeners.
    pub fn source_limits(&self) -> super::per_source::SourceLimits {
        super::per_source::SourceLimits {
            connections: self.max_connections_per_source,
            requests_per_sec: self.requests_per_source,
            burst: f64::from(self.request_burst_per_source),
        }
    }

    /// The key type of an issued HTTPS certificate.
    pub fn tls_key_type(&self) -> Result<KeyType, ConfigError> {
        self.tls_cert_type.parse::<KeyType>().map_err(|e| {
            ConfigError(format!(
                "tls_cert_type = {:?}: {e} (valid: {})",
                self.tls_cert_type,
                KeyType::valid_names()
            ))
        })
    }

    /// The names an issued HTTPS certificate is for (see `tls_names`).
    pub fn tls_names_or_default(&self) -> Vec<String> {
        if !self.tls_names.is_empty() {
            return self.tls_names.clone();
        }
        let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        if let Some(a) = self.listeners().https {
            if !a.ip().is_unspecified() && !names.contains(&a.ip().to_string()) {
                names.push(a.ip().to_string());
            }
        }
        if let Some(ip) = self.announce {
            if !names.contains(&ip.to_string()) {
                names.push(ip.to_string());
            }
        }
        names
    }

    /// The certificate key type.
    pub fn key_type(&self) -> Result<KeyType, ConfigError> {
        self.cert_type.parse::<KeyType>().map_err(|e| {
            ConfigError(format!(
                "cert_type = {:?}: {e} (valid: {})",
                self.cert_type,
                KeyType::valid_names()
            ))
        })
    }

    /// The SRTP profiles, parsed.
    pub fn profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        if self.srtp_profiles.is_empty() {
            return Err(ConfigError(
                "srtp_profiles: name at least one profile".into(),
            ));
        }
        self.srtp_profiles
            .iter()
            .map(|s| {
                s.parse::<Profile>()
                    .map_err(|e| ConfigError(format!("srtp_profiles: {s:?}: {e}")))
            })
            .collect()
    }

    /// A fresh SRTP engine of the configured kind (one per worker).
    pub fn engine(&self) -> Result<Box<dyn secrelay_srtp::Engine>, ConfigError> {
        match self.srtp_engine.as_str() {
            "simd" => Ok(Box::new(secrelay_srtp::SimdEngine::new())),
            "serial" => Ok(Box::new(secrelay_srtp::SerialEngine)),
            other => Err(ConfigError(format!(
                "srtp_engine = {other:?}: unknown engine (valid: simd, serial)"
            ))),
        }
    }

    /// The media I/O asked for: `Some` path, or `None` for `auto`.
    pub fn media_io_setting(&self) -> Result<Option<MediaIo>, ConfigError> {
        match self.media_io.as_str() {
            "auto" => Ok(None),
            "io_uring" => Ok(Some(MediaIo::IoUring)),
            "mmsg" => Ok(Some(MediaIo::Mmsg)),
            "af_xdp" => Ok(Some(MediaIo::AfXdp)),
            other => Err(ConfigError(format!(
                "media_io = {other:?}: unknown (valid: auto, io_uring, mmsg, af_xdp)"
            ))),
        }
    }

    /// What the AF_XDP path needs of the final configuration (the file's with the command
    /// line's over it): `xdp` interfaces to bind on, and `udp` on an address of its own (each
    /// frame's source).
    pub fn af_xdp_check(&self) -> Result<(), ConfigError> {
        if self.xdp.is_empty() {
            return Err(ConfigError(
                "media_io = \"af_xdp\" needs xdp to name the interfaces its XDP sockets are bound on".into(),
            ));
        }
        if self.udp.ip().is_unspecified() {
            return Err(ConfigError(format!(
                "media_io = \"af_xdp\" needs udp on an address of its own, not {} (the frames it writes carry it as their source)",
                self.udp
            )));
        }
        Ok(())
    }

    /// Where the XDP filter may run (`xdp_mode`).
    pub fn xdp_attach(&self) -> Result<secrelay_xdp::Attach, ConfigError> {
        match self.xdp_mode.as_str() {
            "auto" => Ok(secrelay_xdp::Attach::Auto),
            "native" => Ok(secrelay_xdp::Attach::Native),
            "generic" => Ok(secrelay_xdp::Attach::Generic),
            other => Err(ConfigError(format!(
                "xdp_mode = {other:?}: unknown (valid: auto, native, generic)"
            ))),
        }
    }

    /// The XDP filter's settings checked: its mode, and no port of `rtp_ports` that another
    /// listener of this gateway needs open to anyone.
    fn xdp_check(&self) -> Result<(), ConfigError> {
        self.xdp_attach()?;
        if self.xdp.is_empty() {
            return Ok(());
        }
        if self.xdp.len() > secrelay_xdp::MAX_INTERFACES as usize {
            return Err(ConfigError(format!(
                "xdp: {} interfaces named; the filter takes at most {}",
                self.xdp.len(),
                secrelay_xdp::MAX_INTERFACES
            )));
        }
        for (i, iface) in self.xdp.iter().enumerate() {
            if iface.is_empty() || iface.len() > 15 || iface.contains(['/', ' ']) {
                return Err(ConfigError(format!(
                    "xdp = {iface:?}: not an interface name"
                )));
            }
            if self.xdp[..i].contains(iface) {
                return Err(ConfigError(format!("xdp: {iface:?} is named twice")));
            }
        }
        let (lo, hi) = self.rtp_port_range()?;
        let (tlo, thi) = self.turn_relay_port_range()?;
        let inside = |p: u16| (lo..=hi).contains(&p);
        let mut others: Vec<(&str, u16)> = vec![("udp", self.udp.port())];
        others.extend(self.ng.map(|a| ("ng", a.port())));
        others.extend(self.turn_udp.map(|a| ("turn_udp", a.port())));
        if let Some(clash) = others.into_iter().find(|(_, p)| *p != 0 && inside(*p)) {
            return Err(ConfigError(format!(
                "xdp: {} port {} is inside rtp_ports {lo}-{hi}, whose ports the filter closes to sources without a leg",
                clash.0, clash.1
            )));
        }
        let turn = self.turn_udp.is_some() || self.turn_tcp.is_some();
        if turn && tlo <= hi && lo <= thi {
            return Err(ConfigError(format!(
                "xdp: turn_relay_ports {tlo}-{thi} overlap rtp_ports {lo}-{hi}, whose ports the filter closes to sources without a leg"
            )));
        }
        Ok(())
    }

    /// The admission control thresholds.
    pub fn admission(&self) -> AdmissionConfig {
        AdmissionConfig {
            shed_handshakes_at: self.shed_handshakes_at,
            shed_joins_at: self.shed_joins_at,
        }
    }

    /// The telephony legs' port range (inclusive), at least one even/odd pair.
    pub fn rtp_port_range(&self) -> Result<(u16, u16), ConfigError> {
        port_range("rtp_ports", &self.rtp_ports)
    }

    /// The TURN relay port range, parsed.
    pub fn turn_relay_port_range(&self) -> Result<(u16, u16), ConfigError> {
        port_range("turn_relay_ports", &self.turn_relay_ports)
    }

    /// Whether a TURN listener is configured.
    pub fn turn_enabled(&self) -> bool {
        self.turn_udp.is_some() || self.turn_tcp.is_some() || self.turn_tls
    }

    fn turn_check(&self) -> Result<(), ConfigError> {
        self.turn_relay_port_range()?;
        if self.turn_tls && self.listeners().https.is_none() {
            return Err(ConfigError(
                "turn_tls: TURN over TLS shares the HTTPS listener, and none is configured (set https, or leave http unset)".into(),
            ));
        }
        if let Some(s) = &self.turn_secret {
            if s.expose().len() < 16 {
                return Err(ConfigError(
                    "turn_secret: at least 16 bytes (a random one is made at start when unset)"
                        .into(),
                ));
            }
        }
        if self.turn_max_lifetime_secs < 600 {
            return Err(ConfigError(format!(
                "turn_max_lifetime_secs = {}: at least 600 (TURN's default lifetime)",
                self.turn_max_lifetime_secs
            )));
        }
        if self.turn_credential_ttl_secs < 60 {
            return Err(ConfigError(format!(
                "turn_credential_ttl_secs = {}: at least 60",
                self.turn_credential_ttl_secs
            )));
        }
        if self.turn_realm.is_empty() || self.turn_realm.len() > 127 {
            return Err(ConfigError("turn_realm: 1 to 127 characters".into()));
        }
        if self.turn_gather_us > 10_000 {
            return Err(ConfigError(format!(
                "turn_gather_us = {}: at most 10000 (10 ms)",
                self.turn_gather_us
            )));
        }
        for (key, v) in [
            ("turn_max_allocations", self.turn_max_allocations),
            (
                "turn_allocations_per_credential",
                self.turn_allocations_per_credential,
            ),
            (
                "turn_allocations_per_source",
                self.turn_allocations_per_source,
            ),
            ("turn_threads", self.turn_threads),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{key} = 0: must be at least 1")));
            }
        }
        Ok(())
    }

    /// The SDES suites, parsed.
    pub fn sdes_profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        self.sdes_suites
            .iter()
            .map(|s| {
                s.parse::<Profile>()
                    .map_err(|e| ConfigError(format!("sdes_suites: {s:?}: {e}")))
            })
            .collect()
    }

    /// Where plain legs latch.
    pub fn latch(&self) -> Result<crate::leg::Latch, ConfigError> {
        match self.plain_latch.as_str() {
            "signalled" => Ok(crate::leg::Latch::Signalled),
            "first-packets" => Ok(crate::leg::Latch::FirstPackets(self.nat_latch_packets)),
            other => Err(ConfigError(format!(
                "plain_latch = {other:?}: unknown (valid: signalled, first-packets)"
            ))),
        }
    }

    /// The consent timeout.
    pub fn consent_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.consent_timeout_secs)
    }

    /// The number of workers to start.
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The room token that covers `room`, if any (its own, else `token`).
    pub fn token_for(&self, room: &str) -> Option<&str> {
        self.rooms
            .get(room)
            .and_then(|r| r.token.as_ref())
            .or(self.token.as_ref())
            .map(Secret::expose)
    }

    /// Checks the access-control keys: API key ids and secrets, the admin key, the share kept
    /// for authenticated callers, the webhooks.
    fn auth_check(&self) -> Result<(), ConfigError> {
        use super::auth::MIN_SECRET_LEN;
        for (id, secret) in &self.api_keys {
            if id.is_empty()
                || id.len() > 64
                || id.chars().any(|c| c.is_control() || c.is_whitespace())
            {
                return Err(ConfigError(format!(
                    "api_keys: key id {id:?}: 1-64 characters, no spaces"
                )));
            }
            if secret.expose().len() < MIN_SECRET_LEN {
                return Err(ConfigError(format!(
                    "api_keys.{id}: the secret is {} bytes: at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 32`)",
                    secret.expose().len()
                )));
            }
        }
        if let Some(k) = &self.admin_key {
            if k.expose().len() < MIN_SECRET_LEN {
                return Err(ConfigError(format!(
                    "admin_key: {} bytes: at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 32`)",
                    k.expose().len()
                )));
            }
        }
        if !(self.reserved_for_authenticated.is_finite()
            && (0.0..=1.0).contains(&self.reserved_for_authenticated))
        {
            return Err(ConfigError(format!(
                "reserved_for_authenticated = {}: a share, 0.0 to 1.0",
                self.reserved_for_authenticated
            )));
        }
        for (key, v) in [
            ("max_participants_per_room", self.max_participants_per_room),
            (
                "max_pending_offers_per_source",
                self.max_pending_offers_per_source,
            ),
            ("webhook_queue", self.webhook_queue),
            ("webhook_attempts", self.webhook_attempts as usize),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{key} = 0: must be at least 1")));
            }
        }
        if !(self.webhook_timeout_secs.is_finite() && self.webhook_timeout_secs >= 0.05) {
            return Err(ConfigError(format!(
                "webhook_timeout_secs = {}: must be at least 0.05 s",
                self.webhook_timeout_secs
            )));
        }
        for (i, w) in self.webhooks.iter().enumerate() {
            super::webhooks::Target::parse(&w.url)
                .map_err(|e| ConfigError(format!("webhooks[{i}].url = {:?}: {e}", w.url)))?;
            if !self.api_keys.contains_key(&w.key) {
                return Err(ConfigError(format!(
                    "webhooks[{i}].key = {:?}: not a key of api_keys (it signs the requests)",
                    w.key
                )));
            }
            for e in &w.events {
                if super::webhooks::HookEvent::from_name(e).is_none() {
                    return Err(ConfigError(format!(
                        "webhooks[{i}].events: {e:?}: unknown (valid: {})",
                        super::webhooks::HookEvent::NAMES.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(ServeConfig::from_toml("").unwrap(), ServeConfig::default());
    }

    #[test]
    fn negotiated_data_channels_are_read_and_checked() {
        use secrelay_datachannel::Reliability;
        let c = ServeConfig::from_toml(
            "[[data_negotiated]]\nid = 0\nlabel = \"chat\"\n\n\
             [[data_negotiated]]\nid = 5\nlabel = \"state\"\nordered = false\nmax_lifetime_ms = 300\n",
        )
        .unwrap();
        let limits = c.data_limits().unwrap().unwrap();
        let got: Vec<_> = limits
            .negotiated
            .iter()
            .map(|n| {
                (
                    n.id,
                    n.spec.label.as_str(),
                    n.spec.ordered,
                    n.spec.reliability,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, "chat", true, Reliability::Reliable),
                (
                    5,
                    "state",
                    false,
                    Reliability::MaxLifetime(Duration::from_millis(300))
                ),
            ]
        );
        let refused = |toml: &str| ServeConfig::from_toml(toml).unwrap_err().0;
        let both = "[[data_negotiated]]\nid = 1\nlabel = \"x\"\nmax_retransmits = 0\nmax_lifetime_ms = 1\n";
        assert!(refused(both).contains("exclusive"), "{}", refused(both));
        let twice = "[[data_negotiated]]\nid = 1\nlabel = \"x\"\n[[data_negotiated]]\nid = 1\nlabel = \"y\"\n";
        assert!(refused(twice).contains("data_negotiated: stream id 1 is given twice"));
        let high = "[[data_negotiated]]\nid = 1024\nlabel = \"x\"\n";
        assert!(refused(high).contains("not below"));
    }

    /// Workers get the multi-buffer engine unless told otherwise: every packet, video
    /// included, goes through its kernels.
    #[test]
    fn the_default_engine_is_the_multi_buffer_one() {
        let c = ServeConfig::default();
        assert_eq!(c.engine().unwrap().name(), "simd");
        let c = ServeConfig::from_toml("srtp_engine = \"serial\"").unwrap();
        assert_eq!(c.engine().unwrap().name(), "serial");
    }

    #[test]
    fn fields_and_rooms_parse() {
        let c = ServeConfig::from_toml(
            "http = \"127.0.0.1:9000\"\nworkers = 3\ntoken = \"t0\"\n[rooms.board]\ntoken = \"secret\"\n",
        )
        .unwrap();
        assert_eq!(c.http.unwrap().port(), 9000);
        // Plain HTTP asked for: no HTTPS beside it unless asked for too.
        assert_eq!(c.listeners().https, None);
        assert_eq!(c.worker_count(), 3);
        assert_eq!(c.token_for("board"), Some("secret"));
        assert_eq!(c.token_for("other"), Some("t0"));
    }

    #[test]
    fn https_is_the_default_and_http_only_when_asked_for() {
        let l = ServeConfig::default().listeners();
        assert_eq!(l.http, None);
        assert_eq!(l.https, Some(DEFAULT_HTTPS.parse().unwrap()));
        let c =
            ServeConfig::from_toml("http = \"127.0.0.1:8080\"\nhttps = \"0.0.0.0:8443\"").unwrap();
        let l = c.listeners();
        assert_eq!(l.http.unwrap().port(), 8080);
        assert_eq!(l.https.unwrap().port(), 8443);
        assert_eq!(
            ServeConfig::default().tls_names_or_default(),
            ["localhost", "127.0.0.1", "::1"]
        );
    }

    #[test]
    fn bad_tls_settings_name_the_key() {
        for (text, key) in [
            ("tls_cert = \"a.pem\"", "tls_key"),
            ("tls_versions = [\"1.1\"]", "tls_versions"),
            ("tls_versions = []", "tls_versions"),
            ("tls_groups = [\"ffdhe2048\"]", "tls_groups"),
            ("tls_cert_type = \"dsa\"", "tls_cert_type"),
            (
                "tls_handshake_timeout_secs = 0",
                "tls_handshake_timeout_secs",
            ),
            ("tls_max_handshakes = 0", "tls_max_handshakes"),
            (
                "tls_cert = \"a\"\ntls_key = \"b\"\ntls_ca_dir = \"c\"",
                "tls_ca_dir",
            ),
        ] {
            let e = ServeConfig::from_toml(text).unwrap_err().0;
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = ServeConfig::from_toml("wrokers = 2").unwrap_err().0;
        assert!(e.contains("wrokers"), "{e}");
        let e = ServeConfig::from_toml("cert_type = \"dsa\"").unwrap_err().0;
        assert!(e.contains("cert_type") && e.contains("ecdsa-p256"), "{e}");
        let e = ServeConfig::from_toml("srtp_profiles = [\"NOPE\"]")
            .unwrap_err()
            .0;
        assert!(e.contains("srtp_profiles") && e.contains("NOPE"), "{e}");
        let e = ServeConfig::from_toml("http = \"nowhere\"").unwrap_err().0;
        assert!(e.contains("http"), "{e}");
        let e = ServeConfig::from_toml("media_io = \"epoll\"")
            .unwrap_err()
            .0;
        assert!(
            e.contains("media_io") && e.contains("io_uring, mmsg"),
            "{e}"
        );
        assert_eq!(
            ServeConfig::from_toml("media_io = \"mmsg\"")
                .unwrap()
                .media_io_setting()
                .unwrap(),
            Some(MediaIo::Mmsg)
        );
        // The AF_XDP path's needs are checked on the final configuration (the command line
        // may set `udp` and `xdp` after the file).
        let af_xdp = |toml: &str| {
            let c = ServeConfig::from_toml(toml).unwrap();
            assert_eq!(c.media_io_setting().unwrap(), Some(MediaIo::AfXdp));
            c.af_xdp_check().map_err(|e| e.0)
        };
        let e = af_xdp("media_io = \"af_xdp\"").unwrap_err();
        assert!(e.contains("needs xdp to name the interfaces"), "{e}");
        let e = af_xdp("media_io = \"af_xdp\"\nxdp = \"eth0\"").unwrap_err();
        assert!(e.contains("0.0.0.0:40000"), "{e}");
        af_xdp("media_io = \"af_xdp\"\nxdp = \"eth0\"\nudp = \"10.0.0.5:40000\"").unwrap();
        af_xdp("media_io = \"af_xdp\"\nxdp = [\"eth0\", \"eth1\"]\nudp = \"10.0.0.5:40000\"")
            .unwrap();
        let refused = |toml: &str| ServeConfig::from_toml(toml).unwrap_err().0;
        let e = refused("xdp = \"eth0\"\nxdp_mode = \"offload\"");
        assert!(
            e.contains("xdp_mode") && e.contains("native, generic"),
            "{e}"
        );
        let nine: Vec<String> = (0..9).map(|i| format!("\"eth{i}\"")).collect();
        let e = refused(&format!("xdp = [{}]", nine.join(", ")));
        assert!(
            e.contains("9 interfaces named") && e.contains("at most 8"),
            "{e}"
        );
        let e = refused("xdp = \"no/such\"");
        assert!(e.contains("not an interface name"), "{e}");
        let e = refused("xdp = \"eth0\"\nudp = \"0.0.0.0:30010\"");
        assert!(
            e.contains("udp port 30010") && e.contains("rtp_ports"),
            "{e}"
        );
        let e = refused(
            "xdp = \"eth0\"\nturn_udp = \"0.0.0.0:3478\"\nturn_relay_ports = \"39000-49999\"",
        );
        assert!(e.contains("turn_relay_ports 39000-49999 overlap"), "{e}");
        // Without the filter the same ports are nobody's concern here.
        ServeConfig::from_toml("udp = \"0.0.0.0:30010\"").unwrap();
        // One interface or several.
        let one = ServeConfig::from_toml("xdp = \"eth0\"").unwrap();
        assert_eq!(one.xdp, ["eth0"]);
        let two = ServeConfig::from_toml("xdp = [\"eth0\", \"eth1\"]").unwrap();
        assert_eq!(two.xdp, ["eth0", "eth1"]);
        let e = refused("xdp = [\"eth0\", \"eth0\"]");
        assert!(e.contains("named twice"), "{e}");
        let e = refused("xdp = 3");
        assert!(e.contains("xdp"), "{e}");
        let e = ServeConfig::from_toml("srtp_engine = \"gpu\"")
            .unwrap_err()
            .0;
        assert!(e.contains("srtp_engine") && e.contains("simd"), "{e}");
        let e = ServeConfig::from_toml("cert = \"a.pem\"").unwrap_err().0;
        assert!(e.contains("key"), "{e}");
        for bad in [
            "rtp_ports = \"9-3\"",
            "rtp_ports = \"x\"",
            "rtp_ports = \"0-10\"",
        ] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(e.contains("rtp_ports"), "{e}");
        }
        let e = ServeConfig::from_toml("plain_latch = \"any\"")
            .unwrap_err()
            .0;
        assert!(e.contains("plain_latch") && e.contains("signalled"), "{e}");
        let e = ServeConfig::from_toml("sdes_suites = [\"ROT13\"]")
            .unwrap_err()
            .0;
        assert!(e.contains("sdes_suites") && e.contains("ROT13"), "{e}");
        for bad in ["opus_complexity = 11", "opus_complexity = -1"] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(
                e.contains("opus_complexity") && e.contains("0 to 10"),
                "{e}"
            );
        }
        assert_eq!(
            ServeConfig::from_toml("opus_complexity = 3")
                .unwrap()
                .opus_complexity,
            3
        );
        let e = ServeConfig::from_toml("ended_resource_grace_secs = -1")
            .unwrap_err()
            .0;
        assert!(e.contains("ended_resource_grace_secs"), "{e}");
        assert_eq!(
            ServeConfig::from_toml("ended_resource_grace_secs = 0")
                .unwrap()
                .ended_resource_grace_secs,
            0.0
        );
    }

    #[test]
    fn source_limits_and_ng_allow_parse_and_name_their_key() {
        let c = ServeConfig::from_toml(
            "max_connections_per_source = 8\nrequests_per_source = 2.5\nrequest_burst_per_source = 5\nng_allow = [\"10.0.0.5\", \"192.0.2.77/24\", \"fd00::/64\"]",
        )
        .unwrap();
        assert_eq!(c.source_limits().connections, 8);
        assert_eq!(c.source_limits().requests_per_sec, 2.5);
        assert_eq!(c.source_limits().burst, 5.0);
        let nets: Vec<String> = c
            .ng_allowed()
            .unwrap()
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(nets, ["10.0.0.5/32", "192.0.2.0/24", "fd00::/64"]);
        for (bad, key) in [
            (
                "max_connections_per_source = 0",
                "max_connections_per_source",
            ),
            ("request_burst_per_source = 0", "request_burst_per_source"),
            ("requests_per_source = -1.0", "requests_per_source"),
            ("ng_allow = [\"10.0.0.0/33\"]", "10.0.0.0/33"),
            ("ng_allow = [\"proxy.example\"]", "proxy.example"),
        ] {
            let e = ServeConfig::from_toml(bad).unwrap_err().0;
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
