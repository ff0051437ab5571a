//! Entry points of the fuzz targets (`fuzz/`): untrusted bytes through the core as a server
//! meets them, from clients (datagrams and stream frames) and from peers, with an allocation,
//! a permission and a channel already in place so that the data paths are reached. Not an API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::auth::{Credentials, Nonces};
use crate::client::{self, Reply, Signer};
use crate::core::{Client, ClientKey, Core, CoreConfig, Io, Now, Out, Peer, Shared};
use crate::framing::Framer;
use crate::proto::{method, HEADROOM, TAILROOM};
use crate::quota::{QuotaLimits, Quotas};
use crate::stats::Stats;

const SECRET: &[u8] = b"the fuzz targets' shared secret";
const MEDIA: ([u8; 4], u16) = ([203, 0, 113, 5], 40_000);
const MEDIA_LOCAL: ([u8; 4], u16) = ([127, 0, 0, 1], 40_000);

struct NoIo;

impl Io<u64, SocketAddr> for NoIo {
    fn open_relay(&mut self, _: bool, _: bool, _: ClientKey, id: u64) -> Option<(u64, SocketAddr)> {
        Some((id, SocketAddr::from(([127, 0, 0, 1], 50_000))))
    }
    fn sink(&mut self, c: &Client) -> SocketAddr {
        c.addr
    }
}

/// A core with one UDP client and one stream client each holding an allocation, a permission
/// for the gateway's media address and channel 0x4000 to it.
struct Bed {
    core: Core<u64, SocketAddr>,
    now: Now,
    udp: Client,
    stream: Client,
}

fn client(i: u8) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, i], 5000))
}

impl Bed {
    fn new() -> Bed {
        let shared = Arc::new(Shared {
            config: CoreConfig {
                peers: vec![Peer {
                    advertised: MEDIA.into(),
                    local: MEDIA_LOCAL.into(),
                }],
                relayed_ip: None,
                max_lifetime: Duration::from_secs(3600),
                max_permissions: 4,
                max_channels: 4,
            },
            credentials: Credentials::new(SECRET, "fuzz"),
            nonces: Nonces::new(),
            quotas: Quotas::new(QuotaLimits {
                total: 8,
                per_identity: 8,
                per_source: 8,
            }),
            stats: Arc::new(Stats::default()),
        });
        let mut bed = Bed {
            core: Core::new(shared),
            now: Now {
                at: Instant::now(),
                unix: 1_700_000_000,
            },
            udp: Client {
                key: ClientKey::Udp {
                    client: client(1),
                    local: client(100),
                },
                addr: client(1),
            },
            stream: Client {
                key: ClientKey::Stream(1),
                addr: client(2),
            },
        };
        for c in [bed.udp, bed.stream] {
            bed.allocate(c);
        }
        bed
    }

    fn send(&mut self, c: Client, data: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; 1500];
        match self
            .core
            .handle_client(self.now, c, data, &mut out, &mut NoIo)
        {
            Out::Reply(b) => Some(b.to_vec()),
            _ => None,
        }
    }

    fn allocate(&mut self, c: Client) {
        let mut buf = [0u8; 512];
        let n = client::bare_request(&mut buf, method::ALLOCATE, [1; 12], client::allocate_body)
            .expect("fits");
        let Some(Reply::Error {
            realm: Some(realm),
            nonce: Some(nonce),
            ..
        }) = self.send(c, &buf[..n]).and_then(|r| client::read(&r, None))
        else {
            return;
        };
        let m = self
            .core
            .shared()
            .credentials
            .mint("fuzz", self.now.unix + 3600);
        let s = Signer::new(&m.username, &m.password, &realm, &nonce);
        if let Some(n) = s.request(&mut buf, method::ALLOCATE, [2; 12], client::allocate_body) {
            let _ = self.send(c, &buf[..n]);
        }
        let bind = client::channel_bind_body(0x4000, MEDIA.into());
        if let Some(n) = s.request(&mut buf, method::CHANNEL_BIND, [3; 12], bind) {
            let _ = self.send(c, &buf[..n]);
        }
    }

    fn peer_sends(&mut self, key: ClientKey, relay: u64, from: SocketAddr, data: &[u8]) {
        let mut buf = vec![0u8; HEADROOM + data.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + data.len()].copy_from_slice(data);
        let range = HEADROOM..HEADROOM + data.len();
        let _ = self
            .core
            .from_peer(self.now, &key, relay, from, &mut buf, range);
    }
}

/// Messages cut from `data` (a length byte, a byte that picks who sends, then the bytes): from
/// the allocated UDP client, from a stranger, from the stream client, or to a relay from the
/// media address or another one; time moves on between some of them.
pub fn messages(data: &[u8]) {
    let mut bed = Bed::new();
    let mut rest = data;
    while let [len, pick, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (msg, after) = tail.split_at(n);
        rest = after;
        match pick % 6 {
            0 => drop(bed.send(bed.udp, msg)),
            1 => {
                let stranger = Client {
                    key: ClientKey::Udp {
                        client: client(9),
                        local: client(100),
                    },
                    addr: client(9),
                };
                drop(bed.send(stranger, msg));
            }
            2 => drop(bed.send(bed.stream, msg)),
            3 => bed.peer_sends(bed.udp.key, 1, MEDIA_LOCAL.into(), msg),
            4 => bed.peer_sends(bed.stream.key, 2, client(7), msg),
            _ => {
                bed.now.at += Duration::from_secs(u64::from(*pick) * 4);
                bed.now.unix += u64::from(*pick) * 4;
                bed.core.sweep(bed.now);
            }
        }
    }
}

/// A stream client's bytes, read in the pieces `cuts` gives, framed and handled; false when the
/// stream is not TURN (the server closes it).
pub fn stream(data: &[u8], cuts: &[u8]) -> bool {
    let mut bed = Bed::new();
    let mut framer = Framer::new();
    let mut rest = data;
    let mut cut = cuts.iter().cycle();
    while !rest.is_empty() {
        let room = framer.spare();
        let want = cut.next().map_or(rest.len(), |&c| usize::from(c).max(1));
        let n = want.min(rest.len()).min(room.len());
        room[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        framer.filled(n);
        loop {
            match framer.next_frame() {
                Ok(Some(r)) => {
                    let frame = framer.bytes()[r].to_vec();
                    let _ = bed.send(bed.stream, &frame);
                }
                Ok(None) => break,
                Err(_) => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bed_has_its_allocations_and_relays_channel_data() {
        let mut bed = Bed::new();
        assert_eq!(bed.core.allocations(), 2);
        let mut buf = [0u8; 64];
        let n = client::channel_data(&mut buf, 0x4000, b"payload", false).unwrap();
        let mut out = [0u8; 64];
        let r = bed
            .core
            .handle_client(bed.now, bed.udp, &buf[..n], &mut out, &mut NoIo);
        assert!(matches!(
            r,
            Out::ToPeer {
                payload: b"payload",
                ..
            }
        ));
        messages(&[3, 0, 1, 2, 3, 5, 3, 0x40, 0, 0, 1, 9]);
        assert!(stream(&[0x40, 0, 0, 1, 7, 0, 0, 0], &[1, 2]));
        assert!(!stream(b"\xff\xff\xff\xff", &[]));
    }
}
