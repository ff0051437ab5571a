//! [`DataChannels`]: one SCTP association (sctp-proto) and the channels on it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sctp_proto::{
    Association, AssociationHandle, ClientConfig, DatagramEvent, Endpoint, EndpointConfig, Event,
    Payload, PayloadProtocolIdentifier as Ppid, ReliabilityType, ServerConfig, StreamEvent,
    Transmit, TransportConfig,
};

use crate::counters::{Counters, Discard, Refusal};
use crate::dcep::{self, Message};
use crate::{
    ChannelEvent, ChannelId, ChannelSpec, Config, ConfigError, DataChannelError, MessageKind,
    Reliability, Side,
};

/// sctp-proto keys associations by socket address; one engine is one association over one
/// DTLS connection, so a fixed address stands for the peer (it never reaches the wire).
const PEER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 5000));

/// Peer INITs that may each start a second association (dropped: see [`Discard::StrayInit`])
/// while ours is still in its handshake; past this, INITs are dropped before sctp-proto sees
/// them, so a peer cannot grow its association table.
const MAX_STRAY_INITS: u32 = 4;

/// RTO.Initial of RFC 9260 §16 (1 s; sctp-proto's default is RFC 4960's 3 s).
const RTO_INITIAL_MS: u64 = 1000;

/// The receive buffer floor (sctp-proto's own default).
const MIN_RECEIVE_BUFFER: usize = 1 << 20;

/// The data channels of one DTLS association: see the crate documentation for the drive
/// contract.
pub struct DataChannels {
    config: Config,
    side: Side,
    endpoint: Endpoint,
    assoc: Option<Assoc>,
    connected: bool,
    /// The association ended (or could not start): final.
    finished: bool,
    channels: BTreeMap<u16, Channel>,
    /// Stream ids whose reset has not completed: not to be opened again yet.
    resetting: BTreeSet<u16>,
    stray_inits: u32,
    transmits: VecDeque<Vec<u8>>,
    events: VecDeque<ChannelEvent>,
    counters: Counters,
    last_now: Instant,
}

struct Assoc {
    handle: AssociationHandle,
    inner: Association,
}

struct Channel {
    spec: ChannelSpec,
    state: ChannelState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelState {
    /// We sent DATA_CHANNEL_OPEN; messages may go (ordered) before the ACK (RFC 8832 §6).
    AwaitingAck,
    Open,
    /// Our stream reset is out; waiting for the peer's, which closes the channel.
    Closing,
}

impl DataChannels {
    /// An engine for one DTLS association on which we play `side`. A [`Side::Client`] starts
    /// the association at once: drain [`poll_transmit`](Self::poll_transmit) for its INIT.
    pub fn new(config: Config, side: Side, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let transport = Arc::new(transport_config(&config));
        let mut server = ServerConfig::new();
        server.transport = Arc::clone(&transport);
        // Both sides take a server config: an INIT reaching an endpoint without one panics
        // in sctp-proto, and a browser that is DTLS server sends INIT too.
        let endpoint = Endpoint::new(Arc::new(EndpointConfig::new()), Some(Arc::new(server)));
        let mut me = DataChannels {
            config,
            side,
            endpoint,
            assoc: None,
            connected: false,
            finished: false,
            channels: BTreeMap::new(),
            resetting: BTreeSet::new(),
            stray_inits: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            last_now: now,
        };
        if side == Side::Client {
            let mut client = ClientConfig::new();
            client.transport = transport;
            let started = me.guarded(|me| me.endpoint.connect(client, PEER).ok());
            match started.flatten() {
                Some((handle, inner)) => me.assoc = Some(Assoc { handle, inner }),
                // A fresh endpoint with valid ports does not refuse; if it ever does, the
                // association is over before it began.
                None => me.disconnect(false),
            }
        }
        Ok(me)
    }

    /// Feeds one SCTP packet (the payload of one DTLS application-data record).
    pub fn handle_packet(&mut self, now: Instant, sctp_packet: &[u8]) {
        let now = self.clock(now);
        self.counters.packets_in += 1;
        if self.finished {
            self.counters.discard(Discard::AfterDisconnect);
            return;
        }
        if self.is_stray_init(sctp_packet) {
            self.counters.discard(Discard::StrayInit);
            return;
        }
        if self.is_tagged_first_packet(sctp_packet) {
            self.counters.discard(Discard::MalformedPacket);
            return;
        }
        self.guarded(|me| me.feed(now, sctp_packet));
    }

    /// Runs the association's timers (retransmission, delayed SACK) due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        if self.finished {
            return;
        }
        self.guarded(|me| {
            if let Some(assoc) = &mut me.assoc {
                assoc.inner.handle_timeout(now);
            }
            me.pump();
        });
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.assoc.as_ref().and_then(|a| a.inner.poll_timeout())
    }

    /// The next SCTP packet to send as DTLS application data.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.transmits.is_empty() && !self.finished {
            let now = self.clock(now);
            self.guarded(|me| me.gather(now));
        }
        let packet = self.transmits.pop_front()?;
        self.counters.packets_out += 1;
        Some(packet)
    }

    /// The next event, in the order things happened.
    pub fn poll_event(&mut self) -> Option<ChannelEvent> {
        self.events.pop_front()
    }

    /// Opens a channel: sends DATA_CHANNEL_OPEN on the lowest free stream id of our parity.
    /// Messages may be sent on it at once (RFC 8832 §6); [`ChannelEvent::Acked`] follows
    /// when the peer accepts. Until then messages go ordered whatever `spec.ordered` says, so
    /// none can overtake the OPEN.
    pub fn open(&mut self, spec: ChannelSpec) -> Result<ChannelId, DataChannelError> {
        let open = dcep::encode_open(&spec).map_err(DataChannelError::InvalidSpec)?;
        if !self.is_connected() {
            return Err(DataChannelError::NotConnected);
        }
        let id = self
            .free_stream_id()
            .ok_or(DataChannelError::NoFreeStream)?;
        self.guarded(|me| me.open_stream(id, spec, open))
            .unwrap_or(Err(DataChannelError::NotConnected))
    }

    /// Sends one message. An empty message goes as RFC 8831 §6.6 says (PPID 56 or 57 and
    /// one zero byte).
    pub fn send(
        &mut self,
        id: ChannelId,
        kind: MessageKind,
        data: &[u8],
    ) -> Result<(), DataChannelError> {
        let max = self.config.max_message_size;
        if data.len() > max {
            self.counters.refuse(Refusal::TooLarge);
            return Err(DataChannelError::TooLarge {
                len: data.len(),
                max,
            });
        }
        if !self.is_sendable(id) {
            self.counters.refuse(Refusal::UnknownChannel);
            return Err(DataChannelError::UnknownChannel(id));
        }
        self.guarded(|me| me.write(id, kind, data))
            .unwrap_or(Err(DataChannelError::NotConnected))
    }

    /// Closes a channel: resets its outgoing stream (RFC 8831 §6.7). Nothing more can be
    /// sent; [`ChannelEvent::Closed`] follows once the peer resets its side.
    pub fn close(&mut self, id: ChannelId) -> Result<(), DataChannelError> {
        if !self.is_sendable(id) {
            return Err(DataChannelError::UnknownChannel(id));
        }
        self.guarded(|me| me.reset_stream(id.0))
            .ok_or(DataChannelError::NotConnected)
    }

    /// What an open channel is (as opened by us, or as the peer's OPEN said).
    pub fn channel(&self, id: ChannelId) -> Option<&ChannelSpec> {
        self.channels
            .get(&id.0)
            .filter(|c| c.state != ChannelState::Closing)
            .map(|c| &c.spec)
    }

    /// Open channels, by id.
    pub fn channels(&self) -> impl Iterator<Item = (ChannelId, &ChannelSpec)> + '_ {
        self.channels
            .iter()
            .filter(|(_, c)| c.state != ChannelState::Closing)
            .map(|(&id, c)| (ChannelId(id), &c.spec))
    }

    /// Bytes a channel holds unsent or unacknowledged (0 for an unknown channel). Takes
    /// `&mut self` because sctp-proto's stream accessor does.
    pub fn buffered(&mut self, id: ChannelId) -> usize {
        if !self.channels.contains_key(&id.0) {
            return 0;
        }
        self.guarded(|me| {
            me.assoc
                .as_mut()
                .and_then(|a| a.inner.stream(id.0).ok())
                .and_then(|s| s.buffered_amount().ok())
                .unwrap_or(0)
        })
        .unwrap_or(0)
    }

    /// Whether the association is up.
    pub fn is_connected(&self) -> bool {
        self.connected && self.assoc.is_some()
    }

    /// Our DTLS role.
    pub fn side(&self) -> Side {
        self.side
    }

    /// What was seen and done so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.last_now {
            self.last_now = now;
        }
        self.last_now
    }

    /// Runs `f` (which calls into sctp-proto) so that a panic ends the association instead of
    /// the process.
    fn guarded<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| f(&mut *self))) {
            Ok(r) => Some(r),
            Err(_) => {
                self.counters.panics_caught += 1;
                self.disconnect(false);
                None
            }
        }
    }

    /// An INIT (verification tag 0, RFC 9260 §8.5.1) that sctp-proto would take as the start
    /// of another association, once ours no longer needs any: after the handshake, or past
    /// [`MAX_STRAY_INITS`]. Only the common header's tag is read; the endpoint parses the rest.
    fn is_stray_init(&self, packet: &[u8]) -> bool {
        let tag_is_zero = packet.get(4..8) == Some(&[0, 0, 0, 0][..]);
        tag_is_zero
            && self.assoc.is_some()
            && (self.connected || self.stray_inits >= MAX_STRAY_INITS)
    }

    /// Before any association, only an INIT may come, and an INIT carries verification tag 0
    /// (RFC 9260 §8.5.1); sctp-proto would start an association on an INIT with any tag.
    fn is_tagged_first_packet(&self, packet: &[u8]) -> bool {
        self.assoc.is_none() && packet.get(4..8).is_some_and(|tag| tag != [0, 0, 0, 0])
    }

    fn feed(&mut self, now: Instant, packet: &[u8]) {
        let handled = self
            .endpoint
            .handle(now, PEER, None, None, Bytes::copy_from_slice(packet));
        match handled {
            None => self.counters.discard(Discard::MalformedPacket),
            Some((handle, DatagramEvent::AssociationEvent(event))) => match &mut self.assoc {
                Some(assoc) if assoc.handle == handle => assoc.inner.handle_event(event),
                _ => self.counters.discard(Discard::MalformedPacket),
            },
            // Ours stays: a DTLS client keeps the association it started (the peer answers
            // our INIT as RFC 9260 §5.2.1 says), a DTLS server the first it accepted.
            Some((_, DatagramEvent::NewAssociation(_))) if self.assoc.is_some() => {
                self.stray_inits += 1;
                self.counters.discard(Discard::StrayInit);
            }
            Some((handle, DatagramEvent::NewAssociation(inner))) => {
                self.assoc = Some(Assoc { handle, inner });
            }
        }
        self.pump();
    }

    fn gather(&mut self, now: Instant) {
        while let Some(t) = self.endpoint.poll_transmit() {
            queue_transmit(&mut self.transmits, t);
        }
        if let Some(assoc) = &mut self.assoc {
            if let Some(t) = assoc.inner.poll_transmit(now) {
                queue_transmit(&mut self.transmits, t);
            }
        }
        // Sending can abandon partially reliable messages and release buffer space.
        self.pump();
    }

    /// Moves sctp-proto's endpoint events and application events along.
    fn pump(&mut self) {
        if let Some(assoc) = &mut self.assoc {
            while let Some(e) = assoc.inner.poll_endpoint_event() {
                if let Some(back) = self.endpoint.handle_event(assoc.handle, e) {
                    assoc.inner.handle_event(back);
                }
            }
        }
        while let Some(event) = self.assoc.as_mut().and_then(|a| a.inner.poll()) {
            self.on_event(event);
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Connected if !self.connected => {
                self.connected = true;
                self.events.push_back(ChannelEvent::Connected);
                self.open_negotiated();
            }
            Event::HandshakeFailed { .. } | Event::AssociationLost { .. } => self.disconnect(true),
            Event::Stream(e) => self.on_stream_event(e),
            _ => {}
        }
    }

    fn on_stream_event(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Opened { .. } => {
                // The streams are read by id on `Readable`; empty the accept queue.
                if let Some(assoc) = &mut self.assoc {
                    while assoc.inner.accept_stream().is_some() {}
                }
            }
            StreamEvent::Readable { id } => self.read_stream(id),
            StreamEvent::Finished { id } => {
                self.resetting.insert(id);
                self.finish_channel(id);
            }
            StreamEvent::ResetComplete { id } => {
                self.resetting.remove(&id);
                self.finish_channel(id);
            }
            // The id stays in `resetting`: sctp-proto keeps it out of use.
            StreamEvent::ResetFailed { id, .. } => self.finish_channel(id),
            _ => {}
        }
    }

    /// Ends the association: every channel closed, then [`ChannelEvent::Disconnected`].
    /// `flush` first takes what sctp-proto still has to send (an ABORT); not after a panic.
    fn disconnect(&mut self, flush: bool) {
        if flush {
            let now = self.last_now;
            if let Some(t) = self.assoc.as_mut().and_then(|a| a.inner.poll_transmit(now)) {
                queue_transmit(&mut self.transmits, t);
            }
        }
        self.assoc = None;
        self.connected = false;
        if self.finished {
            return;
        }
        self.finished = true;
        for id in std::mem::take(&mut self.channels).into_keys() {
            self.counters.channels_closed += 1;
            self.events
                .push_back(ChannelEvent::Closed { id: ChannelId(id) });
        }
        self.resetting.clear();
        self.events.push_back(ChannelEvent::Disconnected);
    }

    fn finish_channel(&mut self, id: u16) {
        if self.channels.remove(&id).is_some() {
            self.counters.channels_closed += 1;
            self.events
                .push_back(ChannelEvent::Closed { id: ChannelId(id) });
        }
    }

    fn read_stream(&mut self, id: u16) {
        while let Some((ppi, data)) = self.read_message(id) {
            match data {
                Some(data) => self.on_message(id, ppi, data),
                None => self.counters.discard(Discard::TooLarge),
            }
        }
    }

    /// The next whole message on stream `id`: its PPID and bytes, or `None` for the bytes of
    /// a message over `max_message_size` (read and dropped).
    fn read_message(&mut self, id: u16) -> Option<(Ppid, Option<Vec<u8>>)> {
        let mut stream = self.assoc.as_mut()?.inner.stream(id).ok()?;
        let chunks = stream.read_sctp().ok()??;
        let len = chunks.len();
        if len > self.config.max_message_size {
            return Some((chunks.ppi, None));
        }
        let mut data = vec![0; len];
        let n = chunks.read(&mut data).ok()?;
        data.truncate(n);
        Some((chunks.ppi, Some(data)))
    }

    fn on_message(&mut self, id: u16, ppi: Ppid, data: Vec<u8>) {
        let kind = match ppi {
            Ppid::Dcep => return self.on_dcep(id, &data),
            Ppid::String | Ppid::StringEmpty => MessageKind::Text,
            Ppid::Binary | Ppid::BinaryEmpty => MessageKind::Binary,
            _ => return self.counters.discard(Discard::UnknownPpid),
        };
        let open = self
            .channels
            .get(&id)
            .is_some_and(|c| c.state != ChannelState::Closing);
        if !open {
            self.counters.discard(Discard::UnknownChannel);
            // A stream that never carried an OPEN is closed (and sctp-proto forgets it).
            if !self.channels.contains_key(&id) {
                self.reset_stream(id);
            }
            return;
        }
        // RFC 8831 §6.6: an empty message travels as one byte under PPID 56 or 57.
        let data = match ppi {
            Ppid::StringEmpty | Ppid::BinaryEmpty => Vec::new(),
            _ => data,
        };
        self.counters.messages_in += 1;
        self.counters.bytes_in += data.len() as u64;
        self.events.push_back(ChannelEvent::Message {
            id: ChannelId(id),
            kind,
            data,
        });
    }

    fn on_dcep(&mut self, id: u16, data: &[u8]) {
        match dcep::parse(data) {
            Ok(Message::Open(spec)) => self.on_open(id, spec),
            Ok(Message::Ack) => self.on_ack(id),
            Err(_) => {
                self.counters.discard(Discard::MalformedDcep);
                // RFC 8832 §6: a DATA_CHANNEL_OPEN that is not well formed closes the stream.
                if !self.channels.contains_key(&id) {
                    self.reset_stream(id);
                }
            }
        }
    }

    /// A peer's DATA_CHANNEL_OPEN: accepted (ACK on the same stream, the stream set to the
    /// channel's reliability) or refused (the stream reset, no ACK), as RFC 8832 §6 says.
    fn on_open(&mut self, id: u16, spec: ChannelSpec) {
        self.counters.dcep_opens_received += 1;
        let peer_parity = match self.side {
            Side::Client => 1,
            Side::Server => 0,
        };
        let acceptable = id % 2 == peer_parity
            && id < self.config.max_channels
            && !self.channels.contains_key(&id)
            && !self.resetting.contains(&id);
        let acked = acceptable && self.ack_open(id, &spec).is_some();
        if !acked {
            self.counters.discard(Discard::RefusedOpen);
            self.reset_stream(id);
            return;
        }
        self.counters.dcep_acks_sent += 1;
        self.counters.channels_opened += 1;
        self.channels.insert(
            id,
            Channel {
                spec: spec.clone(),
                state: ChannelState::Open,
            },
        );
        self.events.push_back(ChannelEvent::Opened {
            id: ChannelId(id),
            spec,
        });
    }

    fn ack_open(&mut self, id: u16, spec: &ChannelSpec) -> Option<()> {
        let mut stream = self.assoc.as_mut()?.inner.stream(id).ok()?;
        // The stream is new, so still reliable and ordered, as DCEP must be (RFC 8832 §6).
        stream
            .write_sctp(&Bytes::from_static(&dcep::ACK), Ppid::Dcep)
            .ok()?;
        let (kind, value) = reliability_params(spec.reliability);
        stream
            .set_reliability_params(!spec.ordered, kind, value)
            .ok()
    }

    fn on_ack(&mut self, id: u16) {
        let Some(channel) = self
            .channels
            .get_mut(&id)
            .filter(|c| c.state == ChannelState::AwaitingAck)
        else {
            return self.counters.discard(Discard::UnexpectedDcep);
        };
        channel.state = ChannelState::Open;
        self.counters.dcep_acks_received += 1;
        if !channel.spec.ordered {
            // The peer has the OPEN: messages may now go unordered (RFC 8832 §6).
            let (kind, value) = reliability_params(channel.spec.reliability);
            if let Some(mut stream) = self.assoc.as_mut().and_then(|a| a.inner.stream(id).ok()) {
                let _ = stream.set_reliability_params(true, kind, value);
            }
        }
        self.events
            .push_back(ChannelEvent::Acked { id: ChannelId(id) });
    }

    fn is_sendable(&self, id: ChannelId) -> bool {
        self.channels
            .get(&id.0)
            .is_some_and(|c| c.state != ChannelState::Closing)
    }

    /// The lowest stream id of our parity (RFC 8832 §6) below `max_channels` that no channel,
    /// pending reset or sctp-proto stream holds.
    fn free_stream_id(&self) -> Option<u16> {
        let first = match self.side {
            Side::Client => 0,
            Side::Server => 1,
        };
        let in_sctp: BTreeSet<u16> = self
            .assoc
            .as_ref()
            .map(|a| a.inner.stream_ids().into_iter().collect())
            .unwrap_or_default();
        (first..self.config.max_channels).step_by(2).find(|id| {
            !self.channels.contains_key(id) && !self.resetting.contains(id) && !in_sctp.contains(id)
        })
    }

    fn open_stream(
        &mut self,
        id: u16,
        spec: ChannelSpec,
        open: Vec<u8>,
    ) -> Result<ChannelId, DataChannelError> {
        let assoc = self.assoc.as_mut().ok_or(DataChannelError::NotConnected)?;
        let mut stream = assoc
            .inner
            .open_stream(id, Ppid::Binary)
            .map_err(DataChannelError::Sctp)?;
        // A new stream is reliable and ordered, as DCEP must be (RFC 8832 §6).
        stream
            .write_sctp(&Bytes::from(open), Ppid::Dcep)
            .map_err(DataChannelError::Sctp)?;
        // Ordered until the ACK: an unordered message could overtake the OPEN.
        let (kind, value) = reliability_params(spec.reliability);
        stream
            .set_reliability_params(false, kind, value)
            .map_err(DataChannelError::Sctp)?;
        self.counters.dcep_opens_sent += 1;
        self.counters.channels_opened += 1;
        self.channels.insert(
            id,
            Channel {
                spec,
                state: ChannelState::AwaitingAck,
            },
        );
        Ok(ChannelId(id))
    }

    /// The channels agreed on out of band ([`Config::negotiated`]), opened on their stream ids
    /// without DATA_CHANNEL_OPEN once the association is up (a stream the peer's data opened
    /// already is taken as it is), each reported as opened.
    fn open_negotiated(&mut self) {
        for n in self.config.negotiated.clone() {
            let Some(assoc) = self.assoc.as_mut() else {
                return;
            };
            let stream = match assoc.inner.open_stream(n.id, Ppid::Binary) {
                Ok(s) => Ok(s),
                Err(_) => assoc.inner.stream(n.id),
            };
            let Ok(mut stream) = stream else {
                continue;
            };
            let (kind, value) = reliability_params(n.spec.reliability);
            if stream
                .set_reliability_params(!n.spec.ordered, kind, value)
                .is_err()
            {
                continue;
            }
            self.counters.channels_opened += 1;
            self.channels.insert(
                n.id,
                Channel {
                    spec: n.spec.clone(),
                    state: ChannelState::Open,
                },
            );
            self.events.push_back(ChannelEvent::Opened {
                id: ChannelId(n.id),
                spec: n.spec,
            });
        }
    }

    fn write(
        &mut self,
        id: ChannelId,
        kind: MessageKind,
        data: &[u8],
    ) -> Result<(), DataChannelError> {
        let assoc = self.assoc.as_mut().ok_or(DataChannelError::NotConnected)?;
        let mut stream = assoc
            .inner
            .stream(id.0)
            .map_err(|_| DataChannelError::UnknownChannel(id))?;
        let (ppi, payload) = framing(kind, data);
        let buffered = stream.buffered_amount().unwrap_or(0);
        let max = self.config.max_buffered;
        if buffered.saturating_add(payload.len()) > max {
            self.counters.refuse(Refusal::BufferFull);
            return Err(DataChannelError::BufferFull {
                buffered,
                len: data.len(),
                max,
            });
        }
        stream
            .write_with_ppi(payload, ppi)
            .map_err(DataChannelError::Sctp)?;
        self.counters.messages_out += 1;
        self.counters.bytes_out += data.len() as u64;
        Ok(())
    }

    /// Resets stream `id` (RFC 8831 §6.7): a channel on it is closing; the peer's reset in
    /// turn closes it ([`StreamEvent::Finished`]).
    fn reset_stream(&mut self, id: u16) {
        if let Some(channel) = self.channels.get_mut(&id) {
            channel.state = ChannelState::Closing;
        }
        if !self.resetting.insert(id) {
            return;
        }
        let stream = self.assoc.as_mut().and_then(|a| a.inner.stream(id).ok());
        match stream {
            Some(mut stream) => {
                // Fails only when the association is not established, which ends it anyway.
                let _ = stream.close();
            }
            None => {
                self.resetting.remove(&id);
                self.finish_channel(id);
            }
        }
    }
}

/// The association's limits. The receive buffer (twice `max_message_size`, at least 1 MiB)
/// is what bounds reassembly: a message over `max_message_size` that fits it is reassembled
/// and then dropped and counted here; one that does not fit it exhausts it, and sctp-proto
/// aborts the association with an ABORT (Out of Resource) the peer sees. sctp-proto's own
/// per-message limit stays out of the way: a message over it ends the association without a
/// word to the peer, which would go on retransmitting.
fn transport_config(config: &Config) -> TransportConfig {
    let receive_buffer = (2 * config.max_message_size).max(MIN_RECEIVE_BUFFER);
    // Both fit: `Config::validate` caps the message size at 64 MiB.
    let receive_buffer = u32::try_from(receive_buffer).unwrap_or(u32::MAX);
    let max_message = u32::try_from(config.max_message_size).unwrap_or(u32::MAX);
    TransportConfig::default()
        .with_max_receive_buffer_size(receive_buffer)
        .with_max_receive_message_size(u32::MAX)
        .with_max_send_message_size(max_message)
        .with_max_num_outbound_streams(config.max_channels)
        .with_max_num_inbound_streams(config.max_channels)
        // WebRTC leaves giving up on the peer to ICE and DTLS consent (sctp-proto's advice).
        .with_max_init_retransmits(None)
        .with_rto_initial_ms(RTO_INITIAL_MS)
        .with_local_port(config.local_port)
        .with_remote_port(config.remote_port)
}

fn reliability_params(reliability: Reliability) -> (ReliabilityType, u32) {
    match reliability {
        Reliability::Reliable => (ReliabilityType::Reliable, 0),
        Reliability::MaxRetransmits(n) => (ReliabilityType::Rexmit, n),
        Reliability::MaxLifetime(d) => (
            ReliabilityType::Timed,
            u32::try_from(d.as_millis()).unwrap_or(u32::MAX),
        ),
    }
}

/// The PPID and payload of a user message (RFC 8831 §6.6).
fn framing(kind: MessageKind, data: &[u8]) -> (Ppid, &[u8]) {
    const EMPTY: &[u8] = &[0];
    match (kind, data.is_empty()) {
        (MessageKind::Text, false) => (Ppid::String, data),
        (MessageKind::Text, true) => (Ppid::StringEmpty, EMPTY),
        (MessageKind::Binary, false) => (Ppid::Binary, data),
        (MessageKind::Binary, true) => (Ppid::BinaryEmpty, EMPTY),
    }
}

fn queue_transmit(queue: &mut VecDeque<Vec<u8>>, transmit: Transmit) {
    if let Payload::RawEncode(packets) = transmit.payload {
        queue.extend(packets.into_iter().map(|p| p.to_vec()));
    }
}
