//! What one [`DataChannels`](crate::DataChannels) saw and did, each thing counted in one place.

/// Why something that arrived was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Discard {
    /// An SCTP packet that does not parse (too short, bad checksum, bad first chunk) or
    /// belongs to no association (verification tag unknown, or a first packet that is not an
    /// INIT). Chunks sctp-proto rejects further in are not seen here.
    MalformedPacket,
    /// An INIT after ours was answered, or past the few a handshake may meet (the association
    /// is not restarted, RFC 9260 §5.2.2).
    StrayInit,
    /// A packet after the association ended.
    AfterDisconnect,
    /// A DCEP message that breaks RFC 8832 §5 (unknown type, lengths past the end, trailing
    /// bytes, a label or protocol that is not UTF-8).
    MalformedDcep,
    /// A well-formed DATA_CHANNEL_ACK on a stream with no DATA_CHANNEL_OPEN of ours waiting.
    UnexpectedDcep,
    /// A DATA_CHANNEL_OPEN refused (RFC 8832 §6): a stream id of our parity, at or above
    /// `max_channels`, or already in use. The stream is reset.
    RefusedOpen,
    /// A message larger than `max_message_size`.
    TooLarge,
    /// A message on a stream with no open channel.
    UnknownChannel,
    /// A message whose payload protocol identifier is neither DCEP nor RFC 8831's four.
    UnknownPpid,
}

impl Discard {
    /// Its name in reports and metric labels (`malformed_packet`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Discard::MalformedPacket => "malformed_packet",
            Discard::StrayInit => "stray_init",
            Discard::AfterDisconnect => "after_disconnect",
            Discard::MalformedDcep => "malformed_dcep",
            Discard::UnexpectedDcep => "unexpected_dcep",
            Discard::RefusedOpen => "refused_open",
            Discard::TooLarge => "too_large",
            Discard::UnknownChannel => "unknown_channel",
            Discard::UnknownPpid => "unknown_ppid",
        }
    }

    /// Every reason, in counter order.
    pub const ALL: [Discard; 9] = [
        Discard::MalformedPacket,
        Discard::StrayInit,
        Discard::AfterDisconnect,
        Discard::MalformedDcep,
        Discard::UnexpectedDcep,
        Discard::RefusedOpen,
        Discard::TooLarge,
        Discard::UnknownChannel,
        Discard::UnknownPpid,
    ];
}

/// Why a message we were asked to send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Larger than `max_message_size`.
    TooLarge,
    /// No open channel with that id.
    UnknownChannel,
    /// The channel's send buffer would pass `max_buffered`.
    BufferFull,
}

impl Refusal {
    /// Every reason, in counter order.
    pub const ALL: [Refusal; 3] = [
        Refusal::TooLarge,
        Refusal::UnknownChannel,
        Refusal::BufferFull,
    ];
}

/// Arrivals dropped, by [`Discard`] reason: what one association counts, and what a gateway
/// sums over its associations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Discards([u64; Discard::ALL.len()]);

impl Discards {
    /// Those dropped for `reason`.
    pub fn get(&self, reason: Discard) -> u64 {
        self.0[reason as usize]
    }

    /// Those dropped, whatever the reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds `other` into these.
    pub fn add(&mut self, other: &Discards) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// What these counted beyond `earlier`, a copy of them taken before.
    pub fn since(&self, earlier: &Discards) -> Discards {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(earlier.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    fn count(&mut self, reason: Discard) {
        self.0[reason as usize] += 1;
    }
}

/// Counters of one association's data channels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// SCTP packets handed in ([`handle_packet`](crate::DataChannels::handle_packet)).
    pub packets_in: u64,
    /// SCTP packets handed out ([`poll_transmit`](crate::DataChannels::poll_transmit)).
    pub packets_out: u64,
    /// User messages delivered ([`ChannelEvent::Message`](crate::ChannelEvent::Message)).
    pub messages_in: u64,
    /// User messages accepted for sending.
    pub messages_out: u64,
    /// Bytes of the user messages delivered.
    pub bytes_in: u64,
    /// Bytes of the user messages accepted for sending.
    pub bytes_out: u64,
    /// DATA_CHANNEL_OPEN messages we sent.
    pub dcep_opens_sent: u64,
    /// Well-formed DATA_CHANNEL_OPEN messages received (accepted or refused).
    pub dcep_opens_received: u64,
    /// DATA_CHANNEL_ACK messages we sent.
    pub dcep_acks_sent: u64,
    /// DATA_CHANNEL_ACK messages that acknowledged a channel of ours.
    pub dcep_acks_received: u64,
    /// Channels opened, by us or the peer.
    pub channels_opened: u64,
    /// Channels closed, by either side or with the association.
    pub channels_closed: u64,
    /// Panics caught inside sctp-proto (each ended the association).
    pub panics_caught: u64,
    discards: Discards,
    refusals: [u64; Refusal::ALL.len()],
}

impl Counters {
    /// Arrivals dropped for this reason.
    pub fn discarded(&self, reason: Discard) -> u64 {
        self.discards.get(reason)
    }

    /// Arrivals dropped, whatever the reason.
    pub fn total_discarded(&self) -> u64 {
        self.discards.total()
    }

    /// Arrivals dropped, by reason.
    pub fn discards(&self) -> &Discards {
        &self.discards
    }

    /// Sends refused for this reason.
    pub fn refused(&self, reason: Refusal) -> u64 {
        self.refusals[reason as usize]
    }

    pub(crate) fn discard(&mut self, reason: Discard) {
        self.discards.count(reason);
    }

    pub(crate) fn refuse(&mut self, reason: Refusal) {
        self.refusals[reason as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter() {
        let mut c = Counters::default();
        for (i, reason) in Discard::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, i);
            c.discard(reason);
            assert_eq!(c.discarded(reason), 1);
        }
        assert_eq!(c.total_discarded(), Discard::ALL.len() as u64);
        for (i, reason) in Refusal::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, i);
            c.refuse(reason);
            assert_eq!(c.refused(reason), 1);
        }
    }
}
