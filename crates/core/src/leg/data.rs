//! A WebRTC leg's data channels: the SCTP association over its DTLS association, and what the
//! room relays through it.
//!
//! [`DataLink`] wraps one [`DataChannels`] (SCTP and DCEP, sans-IO) with what a room needs:
//! messages the participant sent, kept with their channel's label and kind for the room to
//! relay ([`DataLink::take`]); messages for the participant, sent on its channel of the same
//! label, opened on first use with the sender's channel settings ([`DataLink::send`]); a
//! token bucket per participant on messages and bytes (what goes over is dropped and
//! counted); and messages for a participant whose association is not up yet, held (bounded)
//! until it is.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crate::counters::DataCounters;
use secrelay_datachannel::{
    ChannelEvent, ChannelId, ChannelSpec, Config, DataChannelError, DataChannels, Discards,
    MessageKind, Negotiated, Side,
};

/// Limits on what one participant's data channels carry.
#[derive(Debug, Clone, PartialEq)]
pub struct DataLimits {
    /// The largest message, in bytes, either way (our SDP's `a=max-message-size`).
    pub max_message_size: usize,
    /// Messages per second a participant may send into the room (the bucket holds two
    /// seconds' worth); more are dropped and counted.
    pub messages_per_second: u32,
    /// Bytes per second a participant may send into the room (the bucket holds two seconds'
    /// worth, and at least one largest message); more are dropped and counted.
    pub bytes_per_second: u64,
    /// Channels every participant has agreed on out of band (W3C `negotiated: true`): open on
    /// their stream ids without DCEP once its association is up, relayed by label as any.
    pub negotiated: Vec<Negotiated>,
}

impl Default for DataLimits {
    fn default() -> Self {
        DataLimits {
            max_message_size: 262_144,
            messages_per_second: 500,
            bytes_per_second: 2 << 20,
            negotiated: Vec::new(),
        }
    }
}

/// One message a participant sent on a data channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataMessage {
    /// The channel it came on: label, ordering, reliability (a receiver's channel of the same
    /// label is opened with these). Shared by the channel's messages.
    pub spec: Arc<ChannelSpec>,
    /// Text or binary.
    pub kind: MessageKind,
    /// The message.
    pub data: Vec<u8>,
}

/// Messages held for a participant whose SCTP association is not up yet.
const WAITING_MAX: usize = 256;

/// A token bucket over messages and bytes.
#[derive(Debug)]
struct Bucket {
    messages: f64,
    bytes: f64,
    at: Instant,
}

impl Bucket {
    fn new(limits: &DataLimits, now: Instant) -> Bucket {
        let (m, b) = Bucket::capacity(limits);
        Bucket {
            messages: m,
            bytes: b,
            at: now,
        }
    }

    fn capacity(limits: &DataLimits) -> (f64, f64) {
        let m = 2.0 * f64::from(limits.messages_per_second);
        let b = (2.0 * limits.bytes_per_second as f64).max(limits.max_message_size as f64);
        (m, b)
    }

    /// Takes one message of `len` bytes if both buckets hold enough.
    fn take(&mut self, limits: &DataLimits, now: Instant, len: usize) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        let (cap_m, cap_b) = Bucket::capacity(limits);
        self.messages = (self.messages + dt * f64::from(limits.messages_per_second)).min(cap_m);
        self.bytes = (self.bytes + dt * limits.bytes_per_second as f64).min(cap_b);
        let len = len as f64;
        if self.messages >= 1.0 && self.bytes >= len {
            self.messages -= 1.0;
            self.bytes -= len;
            true
        } else {
            false
        }
    }
}

/// A leg's data channels. See the [module documentation](self).
pub struct DataLink {
    channels: DataChannels,
    limits: DataLimits,
    bucket: Bucket,
    /// What the participant sent, for the room.
    inbox: VecDeque<DataMessage>,
    /// Open channels by label (the first of each label: the one the room's messages of that
    /// label go out on).
    by_label: HashMap<String, ChannelId>,
    /// The settings of the channels messages came on, shared by their messages.
    specs: HashMap<ChannelId, Arc<ChannelSpec>>,
    /// Messages for the participant held until its association is up.
    waiting: VecDeque<DataMessage>,
    /// The largest message the participant takes (its SDP's `a=max-message-size`).
    peer_max: usize,
    /// The association's discards already added to the member's counters.
    discards_counted: Discards,
    last_now: Instant,
}

impl std::fmt::Debug for DataLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLink")
            .field("connected", &self.channels.is_connected())
            .field("channels", &self.by_label.len())
            .finish()
    }
}

impl DataLink {
    /// Data channels on a DTLS association where we are `side`, towards a participant whose
    /// SDP announced `peer_max` (`a=max-message-size`, RFC 8841 §6: `None` when absent, which
    /// means 64 KiB; 0 for any size).
    pub fn new(
        limits: DataLimits,
        side: Side,
        peer_max: Option<u64>,
        now: Instant,
    ) -> Result<DataLink, secrelay_datachannel::ConfigError> {
        let config = Config {
            max_message_size: limits.max_message_size,
            negotiated: limits.negotiated.clone(),
            ..Config::default()
        };
        Ok(DataLink {
            channels: DataChannels::new(config, side, now)?,
            bucket: Bucket::new(&limits, now),
            limits,
            inbox: VecDeque::new(),
            by_label: HashMap::new(),
            specs: HashMap::new(),
            waiting: VecDeque::new(),
            discards_counted: Discards::default(),
            peer_max: match peer_max {
                None => 65_536,
                Some(0) => usize::MAX,
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            },
            last_now: now,
        })
    }

    /// An SCTP packet the peer sent (one DTLS application-data record); what it led to is
    /// counted in `c`.
    pub fn handle_packet(&mut self, now: Instant, packet: &[u8], c: &mut DataCounters) {
        self.last_now = self.last_now.max(now);
        self.channels.handle_packet(now, packet);
        self.on_events(c);
    }

    /// Fires SCTP's timers.
    pub fn handle_timeout(&mut self, now: Instant, c: &mut DataCounters) {
        self.last_now = self.last_now.max(now);
        self.channels.handle_timeout(now);
        self.on_events(c);
    }

    /// When [`DataLink::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.channels.poll_timeout()
    }

    /// The next SCTP packet to send to the peer (as one DTLS application-data record).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.channels.poll_transmit(self.last_now)
    }

    /// The next message the participant sent, for the room to relay, with the time of the
    /// input it came in (the time to send it on with).
    pub fn take(&mut self) -> Option<(DataMessage, Instant)> {
        Some((self.inbox.pop_front()?, self.last_now))
    }

    /// Sends `msg` (another participant's) on this participant's channel with its label,
    /// opening one with the sender's settings if there is none; held while the association is
    /// not up. Queues SCTP packets ([`DataLink::poll_transmit`]); counted in `c`.
    pub fn send(&mut self, msg: &DataMessage, c: &mut DataCounters) {
        if msg.data.len() > self.peer_max {
            // It would refuse it: the message is dropped here, counted.
            c.dropped_out += 1;
            return;
        }
        if !self.channels.is_connected() {
            if self.waiting.len() < WAITING_MAX {
                self.waiting.push_back(msg.clone());
            } else {
                c.dropped_out += 1;
            }
            return;
        }
        match self.send_now(msg) {
            Ok(()) => {
                c.messages_out += 1;
                c.bytes_out += msg.data.len() as u64;
            }
            Err(_) => c.dropped_out += 1,
        }
    }

    fn send_now(&mut self, msg: &DataMessage) -> Result<(), DataChannelError> {
        let id = match self.by_label.get(&msg.spec.label) {
            Some(id) => *id,
            None => {
                let id = self.channels.open(ChannelSpec::clone(&msg.spec))?;
                self.by_label.insert(msg.spec.label.clone(), id);
                id
            }
        };
        self.channels.send(id, msg.kind, &msg.data)
    }

    /// What the participant's channels did, and what we made of it.
    fn on_events(&mut self, c: &mut DataCounters) {
        let discards = *self.channels.counters().discards();
        c.discarded.add(&discards.since(&self.discards_counted));
        self.discards_counted = discards;
        while let Some(e) = self.channels.poll_event() {
            match e {
                ChannelEvent::Connected => {
                    for msg in std::mem::take(&mut self.waiting) {
                        self.send(&msg, c);
                    }
                }
                ChannelEvent::Opened { id, spec } => {
                    self.by_label.entry(spec.label).or_insert(id);
                }
                ChannelEvent::Message { id, kind, data } => self.on_message(id, kind, data, c),
                ChannelEvent::Closed { id } => {
                    self.by_label.retain(|_, c| *c != id);
                    self.specs.remove(&id);
                }
                ChannelEvent::Acked { .. } | ChannelEvent::Disconnected => {}
            }
        }
    }

    fn on_message(
        &mut self,
        id: ChannelId,
        kind: MessageKind,
        data: Vec<u8>,
        c: &mut DataCounters,
    ) {
        let spec = match self.specs.get(&id) {
            Some(spec) => Arc::clone(spec),
            None => {
                let Some(spec) = self.channels.channel(id) else {
                    return;
                };
                let spec = Arc::new(spec.clone());
                self.specs.insert(id, Arc::clone(&spec));
                spec
            }
        };
        if !self.bucket.take(&self.limits, self.last_now, data.len()) {
            c.rate_limited += 1;
            return;
        }
        c.messages_in += 1;
        c.bytes_in += data.len() as u64;
        self.inbox.push_back(DataMessage { spec, kind, data });
    }

    /// Whether the SCTP association is up.
    pub fn is_connected(&self) -> bool {
        self.channels.is_connected()
    }

    /// The labels of the participant's open channels.
    pub fn labels(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_label.keys().map(String::as_str)
    }

    /// The SCTP and DCEP layer's own counters (malformed input, refusals).
    pub fn channel_counters(&self) -> &secrelay_datachannel::Counters {
        self.channels.counters()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrelay_datachannel::Reliability;

    use super::*;

    fn limits() -> DataLimits {
        DataLimits {
            max_message_size: 1000,
            messages_per_second: 10,
            bytes_per_second: 5000,
            negotiated: Vec::new(),
        }
    }

    #[test]
    fn the_bucket_takes_two_seconds_worth_then_refills_with_time() {
        let t0 = Instant::now();
        let l = limits();
        let mut b = Bucket::new(&l, t0);
        // 20 messages (two seconds of 10/s), 10 000 bytes (two seconds of 5 000/s).
        let taken = (0..30).filter(|_| b.take(&l, t0, 100)).count();
        assert_eq!(taken, 20);
        assert!(!b.take(&l, t0 + Duration::from_millis(50), 1));
        // A second later: ten more messages.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..30).filter(|_| b.take(&l, t1, 10)).count(), 10);
        // Bytes bound too: 5 000 per second, a 1 000-byte message five times a second.
        let mut b = Bucket::new(&l, t0);
        assert_eq!((0..30).filter(|_| b.take(&l, t0, 1000)).count(), 10);
    }

    #[test]
    fn messages_for_a_participant_wait_for_its_association_bounded() {
        let now = Instant::now();
        let mut link = DataLink::new(limits(), Side::Server, Some(100), now).unwrap();
        let mut c = DataCounters::default();
        let msg = DataMessage {
            spec: Arc::new(ChannelSpec {
                label: "chat".into(),
                protocol: String::new(),
                ordered: true,
                reliability: Reliability::Reliable,
                priority: 256,
            }),
            kind: MessageKind::Text,
            data: b"hi".to_vec(),
        };
        for _ in 0..WAITING_MAX + 5 {
            link.send(&msg, &mut c);
        }
        assert!(!link.is_connected());
        assert_eq!(link.waiting.len(), WAITING_MAX);
        assert_eq!((c.dropped_out, c.messages_out), (5, 0));
        // Larger than the participant's a=max-message-size (100 here): not even held.
        let big = DataMessage {
            data: vec![0; 101],
            ..msg.clone()
        };
        link.send(&big, &mut c);
        assert_eq!(c.dropped_out, 6);
        // Nothing goes out before the association is up.
        assert!(link.poll_transmit().is_none());
    }

    #[test]
    fn what_the_association_drops_is_counted_once_by_reason() {
        use secrelay_datachannel::Discard;
        let now = Instant::now();
        let mut link = DataLink::new(limits(), Side::Server, None, now).unwrap();
        let mut c = DataCounters::default();
        // Too short for an SCTP common header, then one with a bad checksum.
        link.handle_packet(now, &[1, 2, 3], &mut c);
        let mut bad = vec![0u8; 28];
        bad[12] = 1; // an INIT chunk, the checksum left zero
        link.handle_packet(now, &bad, &mut c);
        assert_eq!(c.discarded.get(Discard::MalformedPacket), 2);
        // Timers and later packets add only what is new.
        link.handle_timeout(now, &mut c);
        link.handle_packet(now, &[9], &mut c);
        assert_eq!(c.discarded.get(Discard::MalformedPacket), 3);
        assert_eq!(c.discarded.total(), 3);
    }
}
