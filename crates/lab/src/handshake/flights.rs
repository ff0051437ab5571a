//! What a handshake puts on the wire (`004_…`): the flights of one TLS and one DTLS handshake
//! per version, suite and certificate type, both sides in memory, with the bytes of each
//! flight and how many TCP segments (TLS) or datagrams (DTLS) it takes at the MTU.
//!
//! TLS runs secrelay's HTTPS server configuration ([`secrelay_gateway::server::tls`]) against
//! a rustls client; DTLS runs two secrelay endpoints (mutual certificates, as WebRTC does).
//! A flight is what one side sends before it waits for the other. TCP segments are counted at
//! the MSS the MTU leaves with IPv4 and TCP timestamps (MTU − 52); DTLS datagrams are the
//! endpoint's own (it fragments to its configured MTU).

use std::sync::Arc;
use std::time::Instant;

use rustls::client::{ClientSessionMemoryCache, Resumption};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::ResolvesServerCert;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use secrelay_dtls::{
    Certificate, CipherSuite, EcdheGroup, Endpoint, EndpointConfig, LocalCertificate, Output,
    PeerAuth, Role,
};
use secrelay_gateway::server::ServeConfig;

/// Who sent a flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// One flight: who sent it, its bytes on the wire (record headers included, IP and TCP/UDP
/// headers not), and its packets (TCP segments at the MSS, or the DTLS datagrams).
#[derive(Debug, Clone, Copy)]
pub struct Flight {
    /// Who sent it.
    pub from: Sender,
    /// Bytes.
    pub bytes: usize,
    /// Packets.
    pub packets: usize,
}

/// One handshake's flights.
#[derive(Debug, Clone)]
pub struct Flights {
    /// The flights up to both sides' end of the handshake.
    pub handshake: Vec<Flight>,
    /// What follows (TLS 1.3 session tickets), if anything.
    pub after: Vec<Flight>,
}

impl Flights {
    /// Bytes the client sent.
    pub fn client_bytes(&self) -> usize {
        self.handshake
            .iter()
            .filter(|f| f.from == Sender::Client)
            .map(|f| f.bytes)
            .sum()
    }
    /// Bytes the server sent.
    pub fn server_bytes(&self) -> usize {
        self.handshake
            .iter()
            .filter(|f| f.from == Sender::Server)
            .map(|f| f.bytes)
            .sum()
    }
    /// `C 517 (1) → S 1203 (1) → …`: each flight's bytes and packets.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .handshake
            .iter()
            .map(|f| {
                format!(
                    "{} {} ({})",
                    if f.from == Sender::Client { "C" } else { "S" },
                    f.bytes,
                    f.packets
                )
            })
            .collect();
        for f in &self.after {
            parts.push(format!("then S {} ({}) tickets", f.bytes, f.packets));
        }
        parts.join(" → ")
    }
    /// Round trips before the client may send data (client flights that wait for an answer).
    pub fn round_trips(&self) -> usize {
        self.handshake
            .iter()
            .filter(|f| f.from == Sender::Server)
            .count()
    }
}

/// The TCP MSS at `mtu` with IPv4 and TCP timestamps.
pub fn mss(mtu: usize) -> usize {
    mtu.saturating_sub(52).max(1)
}

fn drain_client(c: &mut ClientConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while c.wants_write() {
        if c.write_tls(&mut out).is_err() {
            break;
        }
    }
    out
}

fn drain_server(s: &mut ServerConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while s.wants_write() {
        if s.write_tls(&mut out).is_err() {
            break;
        }
    }
    out
}

fn feed_server(s: &mut ServerConnection, mut bytes: &[u8]) -> Result<(), String> {
    while !bytes.is_empty() {
        s.read_tls(&mut bytes).map_err(|e| e.to_string())?;
        s.process_new_packets()
            .map_err(|e| format!("server: {e}"))?;
    }
    Ok(())
}

fn feed_client(c: &mut ClientConnection, mut bytes: &[u8]) -> Result<(), String> {
    while !bytes.is_empty() {
        c.read_tls(&mut bytes).map_err(|e| e.to_string())?;
        c.process_new_packets()
            .map_err(|e| format!("client: {e}"))?;
    }
    Ok(())
}

/// One TLS handshake over memory; whether it was resumed, and its flights.
pub fn tls_handshake(
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
    mtu: usize,
) -> Result<(bool, Flights), String> {
    let mut c = ClientConnection::new(
        client.clone(),
        ServerName::try_from("localhost").map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let mut s = ServerConnection::new(server.clone()).map_err(|e| e.to_string())?;
    let seg = mss(mtu);
    let flight = |from, bytes: usize| Flight {
        from,
        bytes,
        packets: bytes.div_ceil(seg),
    };
    let mut handshake = Vec::new();
    let mut after = Vec::new();
    for _ in 0..10 {
        let out = drain_client(&mut c);
        if !out.is_empty() {
            handshake.push(flight(Sender::Client, out.len()));
            feed_server(&mut s, &out)?;
        }
        let out = drain_server(&mut s);
        if !out.is_empty() {
            let f = flight(Sender::Server, out.len());
            if c.is_handshaking() {
                handshake.push(f);
            } else {
                after.push(f);
            }
            feed_client(&mut c, &out)?;
        }
        if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() && !s.wants_write() {
            let resumed = matches!(c.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
            return Ok((resumed, Flights { handshake, after }));
        }
    }
    Err("the handshake did not finish in 10 exchanges".into())
}

/// secrelay's HTTPS server configuration around one certificate.
pub fn secrelay_server_config(cert: &Certificate) -> Result<Arc<ServerConfig>, String> {
    #[derive(Debug)]
    struct One(Arc<rustls::sign::CertifiedKey>);
    impl ResolvesServerCert for One {
        fn resolve(
            &self,
            _: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
    }
    let leaf_only = vec![CertificateDer::from(cert.der().to_vec())];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.private_key_der().to_vec().into());
    let ck = secrelay_gateway::server::tls::certified_key(leaf_only, key).map_err(|e| e.0)?;
    secrelay_gateway::server::tls::server_config(&ServeConfig::default(), Arc::new(One(ck)))
        .map(Arc::new)
        .map_err(|e| e.0)
}

/// A verifying client for `version`, offering `suite` and `group` only, keeping sessions.
pub fn tls_client(
    ca: &[u8],
    version: super::tls_load::TlsVersion,
    suite: &str,
    group: &str,
) -> anyhow::Result<Arc<ClientConfig>> {
    let provider =
        super::tls_load::client_provider(version, &[suite.to_string()], &[group.to_string()])?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.to_vec()))?;
    let mut c = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[match version {
            super::tls_load::TlsVersion::Tls13 => &rustls::version::TLS13,
            super::tls_load::TlsVersion::Tls12 => &rustls::version::TLS12,
        }])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.resumption = Resumption::store(Arc::new(ClientSessionMemoryCache::new(16)));
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// One DTLS 1.2 handshake between two secrelay endpoints over memory (both with a certificate
/// of `cert`'s type, as WebRTC peers), `suite` and `group` only; the flights (datagrams as
/// the endpoint cut them at `mtu`).
pub fn dtls_handshake(
    client_cert: &Certificate,
    server_cert: &Certificate,
    suite: CipherSuite,
    group: EcdheGroup,
    mtu: usize,
) -> Result<Flights, String> {
    let now = Instant::now();
    let config = |role, cert: &Certificate| {
        let mut c =
            EndpointConfig::new(role, LocalCertificate::from(cert), PeerAuth::AnyCertificate);
        c.mtu = mtu;
        c.cipher_suites = vec![suite];
        c.ecdhe_groups = vec![group];
        c
    };
    let mut client =
        Endpoint::new(config(Role::Client, client_cert), now).map_err(|e| e.to_string())?;
    let mut server =
        Endpoint::new(config(Role::Server, server_cert), now).map_err(|e| e.to_string())?;
    let mut handshake = Vec::new();
    let mut connected = (false, false);
    let drain = |ep: &mut Endpoint, done: &mut bool| -> Result<Vec<Vec<u8>>, String> {
        let mut out = Vec::new();
        while let Some(o) = ep.poll_output() {
            match o {
                Output::Transmit(d) => out.push(d),
                Output::Timeout(_) => break,
                Output::Event(secrelay_dtls::Event::Connected { .. }) => *done = true,
                Output::Event(secrelay_dtls::Event::Failed(r)) => return Err(r.to_string()),
                Output::Event(_) => {}
            }
        }
        Ok(out)
    };
    let mut to_server = drain(&mut client, &mut connected.0)?;
    for _ in 0..12 {
        if !to_server.is_empty() {
            handshake.push(Flight {
                from: Sender::Client,
                bytes: to_server.iter().map(Vec::len).sum(),
                packets: to_server.len(),
            });
        }
        let mut to_client = Vec::new();
        for d in to_server.drain(..) {
            server.handle_datagram(now, &d);
            to_client.extend(drain(&mut server, &mut connected.1)?);
        }
        if !to_client.is_empty() {
            handshake.push(Flight {
                from: Sender::Server,
                bytes: to_client.iter().map(Vec::len).sum(),
                packets: to_client.len(),
            });
        }
        for d in to_client {
            client.handle_datagram(now, &d);
            to_server.extend(drain(&mut client, &mut connected.0)?);
        }
        if connected == (true, true) && to_server.is_empty() {
            return Ok(Flights {
                handshake,
                after: Vec::new(),
            });
        }
    }
    Err("the DTLS handshake did not finish in 12 exchanges".into())
}

/// The server side's time per handshake of rustls with `server`'s configuration, over memory
/// (no sockets, no runtime): `n` handshakes against `client`, only the server's calls timed
/// (ClientConnection work is outside), median over the handshakes, ns. With `resume`, each
/// timed handshake resumes the session the previous one gave.
pub fn tls_server_ns(
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
    n: usize,
    resume: bool,
) -> Result<f64, String> {
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(n);
    // One untimed handshake first: it leaves a session for the first resumption.
    let _ = tls_handshake(server, client, 1500)?;
    for _ in 0..n {
        let mut c =
            ClientConnection::new(client.clone(), name.clone()).map_err(|e| e.to_string())?;
        let mut spent = std::time::Duration::ZERO;
        let t = Instant::now();
        let mut s = ServerConnection::new(server.clone()).map_err(|e| e.to_string())?;
        spent += t.elapsed();
        for _ in 0..10 {
            let out = drain_client(&mut c);
            let t = Instant::now();
            if !out.is_empty() {
                feed_server(&mut s, &out)?;
            }
            let back = drain_server(&mut s);
            spent += t.elapsed();
            if !back.is_empty() {
                feed_client(&mut c, &back)?;
            }
            if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() && !s.wants_write() {
                break;
            }
        }
        if c.is_handshaking() || s.is_handshaking() {
            return Err("the in-memory handshake did not finish".into());
        }
        let resumed = matches!(c.handshake_kind(), Some(rustls::HandshakeKind::Resumed));
        if resumed != resume {
            return Err(format!("expected resumed = {resume}, got {resumed}"));
        }
        times.push(spent.as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
