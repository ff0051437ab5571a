//! A SIP proxy's side of rtpengine's ng control protocol (bencode over UDP, a cookie per
//! request): commands sent, replies read. Used against rtpengine itself by the lab and against
//! secrelay's ng socket by the tests.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use secrelay_wire::bencode::{ng_decode, ng_encode, Bencode};

/// The string and integer values of the top-level dictionary of an ng reply (`result`, `sdp`,
/// `error-reason`, `duration`, …; integers in decimal); lists and dictionaries are left out. The reply is decoded by
/// `secrelay_wire::bencode` (bounded nesting, errors that say where).
pub fn reply_strings(reply: &[u8]) -> anyhow::Result<HashMap<String, String>> {
    let (_, body) = ng_decode(reply).map_err(|e| anyhow!("ng reply: {e}"))?;
    let Bencode::Dict(entries) = body else {
        bail!("ng reply is not a dictionary");
    };
    Ok(entries
        .iter()
        .filter_map(|(k, v)| {
            let text = match v {
                Bencode::Int(n) => n.to_string(),
                other => other.as_text()?,
            };
            Some((String::from_utf8_lossy(k).into_owned(), text))
        })
        .collect())
}

/// The entries of an ng command about a call: `command`, `call-id`, `from-tag`, and `to-tag`
/// and `sdp` where given.
pub fn command(
    name: &str,
    call: &str,
    from_tag: &str,
    to_tag: Option<&str>,
    sdp: Option<&str>,
) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".into(), Bencode::str(name)),
        ("call-id".into(), Bencode::str(call)),
        ("from-tag".into(), Bencode::str(from_tag)),
    ];
    if let Some(t) = to_tag {
        d.push(("to-tag".into(), Bencode::str(t)));
    }
    if let Some(sdp) = sdp {
        d.push(("sdp".into(), Bencode::str(sdp)));
    }
    d
}

/// An ng control connection (the proxy's end).
pub struct Ng {
    socket: UdpSocket,
    target: SocketAddr,
    cookie: u64,
}

/// secrelay with `config`, its HTTP, shared media and ng sockets on loopback (ports the kernel
/// picks) and a short drain, and an ng client of it: what the ng tests start (each sets its
/// own `workers`, `rtp_ports` and the rest in `config`).
pub fn serve_on_loopback(
    config: secrelay_gateway::server::ServeConfig,
) -> (secrelay_gateway::server::Server, Ng) {
    let server = secrelay_gateway::server::Server::start(secrelay_gateway::server::ServeConfig {
        http: Some((std::net::Ipv4Addr::LOCALHOST, 0).into()),
        udp: (std::net::Ipv4Addr::LOCALHOST, 0).into(),
        ng: Some((std::net::Ipv4Addr::LOCALHOST, 0).into()),
        drain_secs: 0.1,
        ..config
    })
    .expect("secrelay starts on loopback");
    let ng = Ng::new(server.ng_addr().expect("an ng socket")).expect("an ng client");
    (server, ng)
}

impl Ng {
    /// A client of the ng port at `target` (the kernel picks the source address towards it:
    /// a loopback one for a target on loopback).
    pub fn new(target: SocketAddr) -> anyhow::Result<Ng> {
        let local = if target.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let socket = UdpSocket::bind(local).context("ng socket")?;
        socket.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(Ng {
            socket,
            target,
            cookie: 1,
        })
    }

    /// Sends a command, returns the reply's strings; an error result names its reason.
    pub fn call(
        &mut self,
        dict: Vec<(String, Bencode)>,
    ) -> anyhow::Result<HashMap<String, String>> {
        self.cookie += 1;
        let body = Bencode::Dict(dict.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect());
        let msg = ng_encode(&format!("{:x}", self.cookie), &body);
        self.socket.send_to(&msg, self.target)?;
        let mut buf = vec![0u8; 65536];
        let n = self
            .socket
            .recv(&mut buf)
            .with_context(|| format!("no ng reply from {}", self.target))?;
        let r = reply_strings(&buf[..n])?;
        match r.get("result").map(String::as_str) {
            Some("ok") | Some("pong") => Ok(r),
            other => bail!(
                "ng {other:?}: {}",
                r.get("error-reason").cloned().unwrap_or_default()
            ),
        }
    }
}

impl Ng {
    /// Sends a command and returns the whole reply, whatever its result.
    pub fn raw(&mut self, dict: Vec<(String, Bencode)>) -> anyhow::Result<Bencode> {
        self.cookie += 1;
        let body = Bencode::Dict(dict.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect());
        let msg = ng_encode(&format!("{:x}", self.cookie), &body);
        self.send_raw(&msg)
    }

    /// Sends bytes as they are (a test of bad input) and returns the decoded reply.
    pub fn send_raw(&mut self, msg: &[u8]) -> anyhow::Result<Bencode> {
        self.socket.send_to(msg, self.target)?;
        let mut buf = vec![0u8; 65536];
        let n = self
            .socket
            .recv(&mut buf)
            .with_context(|| format!("no ng reply from {}", self.target))?;
        let (_, body) = ng_decode(&buf[..n]).map_err(|e| anyhow!("ng reply: {e}"))?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_strings_keeps_the_top_level_strings() {
        let r = reply_strings(b"x d3:sdp3:v=06:result2:ok4:listl1:ai3ee5:countd1:ai1ee1:ni-7ee")
            .unwrap();
        assert_eq!(r["sdp"], "v=0");
        assert_eq!(r["result"], "ok");
        assert_eq!(r["n"], "-7");
        assert_eq!(r.len(), 3);
        assert!(reply_strings(b"x d3:sdp99:short").is_err());
        assert!(reply_strings(b"nocookie").is_err());
        assert!(reply_strings(b"x l1:ae").is_err());
    }
}
