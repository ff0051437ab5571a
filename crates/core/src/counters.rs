//! The gateway's one counter model.
//!
//! Every member of a room keeps one [`Counters`]; a room's, a shard's and the whole server's
//! figures are sums of the same type (members that left are added to a retired set, so totals
//! never go down), and `/api`, `/metrics` and the demo read those sums. A datagram or copy that
//! is not delivered is counted once, under one [`DropReason`], at the member it concerns (or
//! at the edge when no member does). Why a session ended is an [`EndReason`]. Both are enums
//! matched exhaustively: a new reason is a compile error wherever reasons are shown.

use std::fmt;
use std::ops::{Index, IndexMut};

use secrelay_datachannel::{Discard, Discards};

/// Why a datagram, or a copy of one, was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// From an address no member owns, and not a STUN check naming one.
    UnknownSource,
    /// SRTP/SRTCP with a wrong authentication tag.
    AuthFailed,
    /// SRTP/SRTCP replayed or too old for the replay window.
    Replayed,
    /// Malformed: a header that does not parse, or SRTP too short for its tag.
    Malformed,
    /// DTLS or SRTP from an address ICE has not validated.
    UnvalidatedSource,
    /// SRTP before the DTLS handshake gave the keys.
    BeforeKeys,
    /// STUN refused by the ICE agent (not a Binding request, wrong credentials or integrity).
    StunRejected,
    /// A datagram of a kind the member does not take (ZRTP, TURN channel data, RTP too short
    /// for a header; STUN or DTLS on a telephony leg; DTLS before the member's DTLS starts; a
    /// ClientHello to a telephony leg that is the DTLS client).
    UnknownKind,
    /// Arrived for a member that had closed.
    AfterClose,
    /// A copy not forwarded: the receiver did not negotiate the codec.
    NoCodec,
    /// A copy not forwarded: the receiver was not connected yet.
    ReceiverNotReady,
    /// Media from a member that only subscribes.
    NotPublisher,
    /// A copy the receiver's SRTP context refused to protect (key exhausted, too large).
    ProtectFailed,
    /// Received by one worker for a member of another whose queue was full.
    HandoffQueueFull,
    /// `sendmmsg` failed for the datagram.
    SendFailed,
    /// Dropped because the gateway's own code panicked on it (a bug; the worker goes on).
    InternalError,
    /// An SRTP error of another kind (a context refusing the packet for a reason not above).
    SrtpOther,
    /// Media on a plain RTP leg from a source it has not latched to (the hijack guard); on a
    /// DTLS-SRTP telephony leg, a record from a source no handshake of the port runs with (not
    /// the signalled address when we are the client; not a ClientHello, or after the handshake,
    /// when we are the server).
    UnlatchedSource,
    /// A padding-only retransmission packet (a sender's bandwidth probe): nothing to forward.
    PaddingOnly,
    /// A copy not forwarded: the receiver demultiplexes by section (it agreed on `mid`) and has
    /// no receive section free for the stream (one comes with a renegotiation).
    NoSlot,
    /// Audio to transcode or mix whose payload did not decode (malformed or truncated).
    Undecodable,
    /// A new DTLS handshake not started because its worker is overloaded (admission control:
    /// the peer retransmits, and it is taken once the load falls).
    Overload,
    /// Media on a telephony leg's port from a remote address the port's previous leg latched
    /// to or sent to, within the quarantine after that leg ended (a phone that never got the
    /// BYE, or someone who learnt the port): neither latched nor relayed.
    StaleSource,
    /// In the DTLS range but not DTLS records (a header, version, type or length that does not
    /// parse), or, once the member's handshake is done, protected records its association
    /// took nothing from (failing authentication, replayed).
    DtlsBadRecord,
    /// Once the member's handshake is done, a record of a handshake its association took
    /// nothing from: a plaintext alert, change_cipher_spec or handshake message (nothing
    /// authenticates those any more), a protected handshake message not answered,
    /// application data (DTLS-SRTP carries none): stale, duplicated or forged.
    DtlsAfterHandshake,
    /// A ClientHello once the member's handshake is done: no new handshake on a live
    /// association, and no answer.
    ClientHelloAfterHandshake,
    /// Once the member's handshake is done, a datagram that would have our last flight sent
    /// again within one retransmission interval of the last time it was: answered at most once
    /// per interval (no reflector).
    DtlsRetransmitLimited,
    /// Empty, or a first byte in none of RFC 7983's ranges: no protocol a media port carries.
    Unclassified,
    /// Media of a new SSRC from a member that already publishes as many streams as a member
    /// may ([`crate::room::MAX_STREAMS`]), none of them idle long enough to give up.
    TooManyStreams,
    /// For a browser reached over ICE-TCP whose connection's send queue was full (it reads
    /// slower than its media comes): the datagram dropped whole, never part of one, so the
    /// stream stays framed; the receiver learns of it as of any loss.
    TcpQueueFull,
    /// For a browser reached over ICE-TCP: a datagram that waited in its connection's send
    /// queue longer than real-time media is worth (the browser reads slower than its media
    /// comes), dropped whole before it was written, so what the browser gets is recent.
    TcpQueueStale,
    /// On the AF_XDP media path: a frame that is not a UDP datagram we take (an Ethernet, IP
    /// or UDP header whose length or checksum does not check out, an IP fragment), or one to
    /// an address its port is not bound on.
    BadFrame,
    /// On a DTLS-SRTP telephony leg (we the server): the handshake with a source the SDP did not
    /// signal failed (its certificate not the SDP's fingerprint, an alert, a timeout), so that
    /// source's handshake ended alone; the leg's others go on. Counted once per handshake.
    DtlsRejected,
    /// On a DTLS-SRTP telephony leg (we the server): a ClientHello that returned our cookie
    /// from another IP address while the port already runs as many handshakes as it takes at
    /// once, none of them done.
    HandshakeLimit,
    /// Media (not telephone-events) from a member whose media the signaling blocked (ng
    /// `block media`), or whose media it silenced in a format with no silence to write (video,
    /// AMR, a format the gateway only relays).
    MediaBlocked,
    /// Telephone-events from a member whose DTMF the signaling blocked (ng `block DTMF`).
    DtmfBlocked,
    /// Audio for a member that media is being played to (ng `play media`): what it would have
    /// heard is not sent while the file plays in its place.
    PlayedOver,
}

impl DropReason {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [DropReason; 37] = [
        DropReason::UnknownSource,
        DropReason::AuthFailed,
        DropReason::Replayed,
        DropReason::Malformed,
        DropReason::UnvalidatedSource,
        DropReason::BeforeKeys,
        DropReason::StunRejected,
        DropReason::UnknownKind,
        DropReason::AfterClose,
        DropReason::NoCodec,
        DropReason::ReceiverNotReady,
        DropReason::NotPublisher,
        DropReason::ProtectFailed,
        DropReason::HandoffQueueFull,
        DropReason::SendFailed,
        DropReason::InternalError,
        DropReason::SrtpOther,
        DropReason::UnlatchedSource,
        DropReason::PaddingOnly,
        DropReason::NoSlot,
        DropReason::Undecodable,
        DropReason::Overload,
        DropReason::StaleSource,
        DropReason::DtlsBadRecord,
        DropReason::DtlsAfterHandshake,
        DropReason::ClientHelloAfterHandshake,
        DropReason::DtlsRetransmitLimited,
        DropReason::Unclassified,
        DropReason::TooManyStreams,
        DropReason::TcpQueueFull,
        DropReason::TcpQueueStale,
        DropReason::BadFrame,
        DropReason::DtlsRejected,
        DropReason::HandshakeLimit,
        DropReason::MediaBlocked,
        DropReason::DtmfBlocked,
        DropReason::PlayedOver,
    ];

    /// The label in `/metrics` (`secrelay_drops_total{reason=…}`), the API and the demo.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::UnknownSource => "unknown_source",
            DropReason::AuthFailed => "auth_failed",
            DropReason::Replayed => "replayed",
            DropReason::Malformed => "malformed",
            DropReason::UnvalidatedSource => "unvalidated_source",
            DropReason::BeforeKeys => "before_keys",
            DropReason::StunRejected => "stun_rejected",
            DropReason::UnknownKind => "unknown_kind",
            DropReason::AfterClose => "after_close",
            DropReason::NoCodec => "no_codec",
            DropReason::ReceiverNotReady => "receiver_not_ready",
            DropReason::NotPublisher => "not_publisher",
            DropReason::ProtectFailed => "protect_failed",
            DropReason::HandoffQueueFull => "handoff_queue_full",
            DropReason::SendFailed => "send_failed",
            DropReason::InternalError => "internal_error",
            DropReason::SrtpOther => "srtp_other",
            DropReason::UnlatchedSource => "unlatched_source",
            DropReason::PaddingOnly => "padding_only",
            DropReason::NoSlot => "no_slot",
            DropReason::Undecodable => "undecodable",
            DropReason::Overload => "overload",
            DropReason::StaleSource => "stale_source",
            DropReason::DtlsBadRecord => "dtls_bad_record",
            DropReason::DtlsAfterHandshake => "dtls_after_handshake",
            DropReason::ClientHelloAfterHandshake => "client_hello_after_handshake",
            DropReason::DtlsRetransmitLimited => "dtls_retransmit_limited",
            DropReason::Unclassified => "unclassified",
            DropReason::TooManyStreams => "too_many_streams",
            DropReason::TcpQueueFull => "tcp_queue_full",
            DropReason::TcpQueueStale => "tcp_queue_stale",
            DropReason::BadFrame => "bad_frame",
            DropReason::DtlsRejected => "dtls_rejected",
            DropReason::HandshakeLimit => "handshake_limit",
            DropReason::MediaBlocked => "media_blocked",
            DropReason::DtmfBlocked => "dtmf_blocked",
            DropReason::PlayedOver => "played_over",
        }
    }

    /// The reason a DTLS endpoint dropped a datagram for.
    pub fn of_dtls(d: secrelay_dtls::Discard) -> DropReason {
        use secrelay_dtls::Discard as D;
        match d {
            D::Finished => DropReason::AfterClose,
            D::Malformed | D::Unauthenticated => DropReason::DtlsBadRecord,
            D::ClientHelloAfterHandshake => DropReason::ClientHelloAfterHandshake,
            D::AfterHandshake | D::ApplicationData => DropReason::DtlsAfterHandshake,
            D::RetransmitLimited => DropReason::DtlsRetransmitLimited,
            _ => DropReason::DtlsBadRecord,
        }
    }

    /// The reason an SRTP or SRTCP unprotect failed with.
    pub fn of_unprotect(e: secrelay_srtp::Error) -> DropReason {
        use secrelay_srtp::Error as E;
        match e {
            E::AuthFailed => DropReason::AuthFailed,
            E::ReplayDuplicate | E::ReplayOld => DropReason::Replayed,
            E::TooShort | E::BadHeader => DropReason::Malformed,
            _ => DropReason::SrtpOther,
        }
    }

    fn index(self) -> usize {
        // `ALL` lists every variant once, in declaration order (a unit test checks).
        self as usize
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Drops, one count per [`DropReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drops([u64; DropReason::ALL.len()]);

impl Default for Drops {
    fn default() -> Drops {
        Drops([0; DropReason::ALL.len()])
    }
}

impl Index<DropReason> for Drops {
    type Output = u64;
    fn index(&self, r: DropReason) -> &u64 {
        &self.0[r.index()]
    }
}

impl IndexMut<DropReason> for Drops {
    fn index_mut(&mut self, r: DropReason) -> &mut u64 {
        &mut self.0[r.index()]
    }
}

impl Drops {
    /// Every reason with its count, zeros included, in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (*r, self[*r]))
    }

    /// All drops together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// What one member counts; sums of it count rooms, shards and the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// SRTP/SRTCP packets unprotected (received from the member).
    pub packets_in: u64,
    /// Their bytes, as received.
    pub bytes_in: u64,
    /// SRTP/SRTCP packets protected and queued (sent to the member).
    pub packets_out: u64,
    /// Their bytes, as sent.
    pub bytes_out: u64,
    /// STUN datagrams received from the member.
    pub stun_in: u64,
    /// DTLS datagrams handed to the member's DTLS endpoint.
    pub dtls_in: u64,
    /// Media packets from the member routed to its room.
    pub routed: u64,
    /// Copies of others' media routed to the member.
    pub forwarded: u64,
    /// Of those, copies sent outside a receive slot (under an SSRC its answer does not
    /// announce: it offered fewer receiving sections of the kind than the room has senders).
    pub unslotted: u64,
    /// Of those, copies transcoded for it (or mixed): audio of a codec it did not take,
    /// decoded and encoded again in one it did.
    pub transcoded: u64,
    /// Audio packets from the member decoded to be transcoded or mixed: once per packet,
    /// however many receivers and formats.
    pub decoded: u64,
    /// Audio packets encoded from the member's decoded stream (or, in a mixing room, for the
    /// member's mix): once per receiving format, not once per receiver.
    pub encoded: u64,
    /// What was not delivered, by reason.
    pub drops: Drops,
    /// RTCP feedback the member took part in.
    pub feedback: FeedbackCounters,
    /// Data-channel messages.
    pub data: DataCounters,
}

/// What a member's data channels (WebRTC, SCTP over DTLS) carried, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DataCounters {
    /// Messages the participant sent that the room may relay.
    pub messages_in: u64,
    /// Bytes of those.
    pub bytes_in: u64,
    /// Messages the participant sent over its rate limit, dropped.
    pub rate_limited: u64,
    /// Messages sent to the participant.
    pub messages_out: u64,
    /// Bytes of those.
    pub bytes_out: u64,
    /// Messages for the participant not sent: its association is gone, its channel's buffer
    /// is full, the message is over its limit, or too many waited for the association.
    pub dropped_out: u64,
    /// What the participant's SCTP association dropped of what it sent, by reason (packets
    /// that do not parse or belong to no association, DCEP messages that break RFC 8832,
    /// channels refused, messages too large or on no channel), as the association counts them.
    #[serde(serialize_with = "discards_by_reason")]
    pub discarded: Discards,
}

/// [`Discards`] as a map from reason name to count.
fn discards_by_reason<S: serde::Serializer>(d: &Discards, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(Discard::ALL.len()))?;
    for reason in Discard::ALL {
        m.serialize_entry(reason.name(), &d.get(reason))?;
    }
    m.end()
}

impl DataCounters {
    /// Adds `other` into these.
    pub fn add(&mut self, other: &DataCounters) {
        let DataCounters {
            messages_in,
            bytes_in,
            rate_limited,
            messages_out,
            bytes_out,
            dropped_out,
            discarded,
        } = other;
        self.messages_in += messages_in;
        self.bytes_in += bytes_in;
        self.rate_limited += rate_limited;
        self.messages_out += messages_out;
        self.bytes_out += bytes_out;
        self.dropped_out += dropped_out;
        self.discarded.add(discarded);
    }
}

/// RTCP feedback (RFC 4585, 4588, 5104) one member took part in, as a receiver (it asked) and
/// as a publisher (it was asked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FeedbackCounters {
    /// Keyframe requests (PLI, FIR) the member sent about streams it receives.
    pub keyframe_requests_in: u64,
    /// Keyframe requests sent to the member for its streams (a receiver's, or a new
    /// subscriber's), one per interval however many receivers asked.
    pub keyframe_requests_out: u64,
    /// Requests for the member's streams merged into one already sent within the interval.
    pub keyframe_requests_merged: u64,
    /// Packets the member asked for again (sequence numbers in its NACKs).
    pub nacked: u64,
    /// Packets sent to the member again from the retransmission buffer (RTX, or the packet
    /// itself where RTX was not agreed).
    pub retransmitted: u64,
    /// Packets the member asked for that the buffer no longer holds.
    pub nack_misses: u64,
    /// Packets asked of the member: receivers NACKed what the gateway itself never got.
    pub nacks_upstream: u64,
    /// Retransmissions (RTX) received from the member, relayed as the packets they repair.
    pub rtx_in: u64,
    /// Retransmissions sent to the member as bandwidth probes (to see whether it can take a
    /// higher simulcast layer).
    pub probe_packets: u64,
}

impl FeedbackCounters {
    fn add(&mut self, o: &FeedbackCounters) {
        let FeedbackCounters {
            keyframe_requests_in,
            keyframe_requests_out,
            keyframe_requests_merged,
            nacked,
            retransmitted,
            nack_misses,
            nacks_upstream,
            rtx_in,
            probe_packets,
        } = o;
        self.keyframe_requests_in += keyframe_requests_in;
        self.keyframe_requests_out += keyframe_requests_out;
        self.keyframe_requests_merged += keyframe_requests_merged;
        self.nacked += nacked;
        self.retransmitted += retransmitted;
        self.nack_misses += nack_misses;
        self.nacks_upstream += nacks_upstream;
        self.rtx_in += rtx_in;
        self.probe_packets += probe_packets;
    }
}

impl Counters {
    /// Adds `other` into these.
    pub fn add(&mut self, other: &Counters) {
        let Counters {
            packets_in,
            bytes_in,
            packets_out,
            bytes_out,
            stun_in,
            dtls_in,
            routed,
            forwarded,
            unslotted,
            transcoded,
            decoded,
            encoded,
            drops,
            feedback,
            data,
        } = other;
        self.packets_in += packets_in;
        self.bytes_in += bytes_in;
        self.packets_out += packets_out;
        self.bytes_out += bytes_out;
        self.stun_in += stun_in;
        self.dtls_in += dtls_in;
        self.routed += routed;
        self.forwarded += forwarded;
        self.unslotted += unslotted;
        self.transcoded += transcoded;
        self.decoded += decoded;
        self.encoded += encoded;
        self.data.add(data);
        for (a, b) in self.drops.0.iter_mut().zip(drops.0) {
            *a += b;
        }
        self.feedback.add(feedback);
    }

    /// One drop for `reason`.
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason] += 1;
    }
}

/// Why a session (a member) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// No authenticated ICE check within the consent timeout.
    ConsentExpired,
    /// The DTLS handshake or association failed.
    DtlsFailed,
    /// The peer's certificate did not match the offer's fingerprint.
    FingerprintMismatch,
    /// The peer sent close_notify.
    CloseNotify,
    /// Removed through the control plane (HTTP DELETE).
    Deleted,
    /// Closed by the server's shutdown.
    Shutdown,
    /// Abandoned with its room after a panic in the gateway's own code (a bug).
    InternalError,
    /// A telephony leg received no media for its media timeout.
    MediaTimeout,
    /// Ended here without a word to its peer, its call kept for another node to take over
    /// (a hand-over, a clean stop): the peer's DTLS association goes on there.
    HandedOver,
    /// A viewer served at this node of a room another node owns, whose link to that node
    /// broke: ended (with close_notify) so that its client joins again.
    SourceLost,
}

impl EndReason {
    /// Every reason, in the order the metrics list them.
    pub const ALL: [EndReason; 10] = [
        EndReason::ConsentExpired,
        EndReason::DtlsFailed,
        EndReason::FingerprintMismatch,
        EndReason::CloseNotify,
        EndReason::Deleted,
        EndReason::Shutdown,
        EndReason::InternalError,
        EndReason::MediaTimeout,
        EndReason::HandedOver,
        EndReason::SourceLost,
    ];

    /// The label in `/metrics` (`secrelay_sessions_closed_total{reason=…}`) and the API.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::ConsentExpired => "consent_expired",
            EndReason::DtlsFailed => "dtls_failed",
            EndReason::FingerprintMismatch => "fingerprint_mismatch",
            EndReason::CloseNotify => "close_notify",
            EndReason::Deleted => "deleted",
            EndReason::Shutdown => "shutdown",
            EndReason::InternalError => "internal_error",
            EndReason::MediaTimeout => "media_timeout",
            EndReason::HandedOver => "handed_over",
            EndReason::SourceLost => "source_lost",
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Sessions ended, one count per [`EndReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ends([u64; EndReason::ALL.len()]);

impl Index<EndReason> for Ends {
    type Output = u64;
    fn index(&self, r: EndReason) -> &u64 {
        &self.0[r as usize]
    }
}

impl IndexMut<EndReason> for Ends {
    fn index_mut(&mut self, r: EndReason) -> &mut u64 {
        &mut self.0[r as usize]
    }
}

impl Ends {
    /// Every reason with its count, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (EndReason, u64)> + '_ {
        EndReason::ALL.iter().map(|r| (*r, self[*r]))
    }
}

/// What a shard counts: its members' [`Counters`] summed (those that left included), the drops
/// no member owns, and its sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardCounters {
    /// Media and drops, all members and the edge.
    pub media: Counters,
    /// DTLS-SRTP handshakes that finished.
    pub handshakes_ok: u64,
    /// Handshakes that failed (DTLS failure or fingerprint mismatch before keys).
    pub handshakes_failed: u64,
    /// Sessions ended, by reason.
    pub ended: Ends,
    /// Engine calls that unprotected a batch of received media.
    pub srtp_batches: u64,
    /// Datagrams unprotected in those calls.
    pub srtp_batched: u64,
    /// Members now.
    pub members: u64,
    /// Members whose DTLS-SRTP is up now.
    pub connected: u64,
    /// Rooms now.
    pub rooms: u64,
    /// Video streams with a retransmission buffer now (one per publisher stream received).
    pub retransmit_streams: u64,
    /// Bytes those buffers hold now ([`crate::feedback::RetransmitBuffer::bytes`]).
    pub retransmit_bytes: u64,
    /// The members' part of `media`, and members now, by the kind each member joined as
    /// ([`crate::leg::LegKind::index`]). The pipes' entry ([`crate::leg::LegKind::Pipe`]:
    /// mirrored publishers, and what came in through them) is not part of `media`, `members`
    /// or `connected`: those count participants.
    pub by_leg: [LegCounters; crate::leg::LegKind::COUNT],
    /// Packets handed to pipes: a home room's publishers' packets, once per replica.
    pub piped_out: u64,
}

/// One kind of member's share of a shard's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LegCounters {
    /// Members of this kind now.
    pub members: u64,
    /// Their counters (those that left included).
    pub media: Counters,
}

impl ShardCounters {
    /// Adds a room's counters (a room that went, or one summed into a snapshot), in all and by
    /// kind of member.
    pub fn add_room(&mut self, room: &crate::room::Room) {
        for (k, c) in room.counters_by_kind().iter().enumerate() {
            if k != crate::leg::LegKind::Pipe.index() {
                self.media.add(c);
            }
            self.by_leg[k].media.add(c);
        }
    }

    /// Adds `other` (another shard) into these.
    pub fn add(&mut self, other: &ShardCounters) {
        self.media.add(&other.media);
        self.handshakes_ok += other.handshakes_ok;
        self.handshakes_failed += other.handshakes_failed;
        for (a, b) in self.ended.0.iter_mut().zip(other.ended.0) {
            *a += b;
        }
        self.srtp_batches += other.srtp_batches;
        self.srtp_batched += other.srtp_batched;
        self.members += other.members;
        self.connected += other.connected;
        self.rooms += other.rooms;
        self.retransmit_streams += other.retransmit_streams;
        self.retransmit_bytes += other.retransmit_bytes;
        self.piped_out += other.piped_out;
        for (a, b) in self.by_leg.iter_mut().zip(&other.by_leg) {
            a.members += b.members;
            a.media.add(&b.media);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_once_in_declaration_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r}");
        }
        for (i, r) in EndReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r}");
        }
        let mut names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::ALL.len());
    }

    #[test]
    fn sums_add_every_field() {
        let mut a = Counters {
            packets_in: 1,
            bytes_in: 2,
            packets_out: 3,
            bytes_out: 4,
            stun_in: 5,
            dtls_in: 6,
            routed: 7,
            forwarded: 8,
            unslotted: 9,
            transcoded: 11,
            decoded: 12,
            encoded: 13,
            drops: Drops::default(),
            feedback: FeedbackCounters {
                retransmitted: 10,
                ..FeedbackCounters::default()
            },
            data: DataCounters {
                messages_in: 1,
                bytes_in: 2,
                rate_limited: 3,
                messages_out: 4,
                bytes_out: 5,
                dropped_out: 6,
                discarded: Default::default(),
            },
        };
        a.drop(DropReason::Replayed);
        let mut sum = Counters::default();
        sum.add(&a);
        sum.add(&a);
        assert_eq!(sum.packets_in, 2);
        assert_eq!(sum.unslotted, 18);
        assert_eq!((sum.transcoded, sum.decoded, sum.encoded), (22, 24, 26));
        assert_eq!(sum.feedback.retransmitted, 20);
        let d = sum.data;
        assert_eq!(
            (d.messages_in, d.bytes_in, d.rate_limited),
            (2, 4, 6),
            "data"
        );
        assert_eq!((d.messages_out, d.bytes_out, d.dropped_out), (8, 10, 12));
        assert_eq!(sum.drops[DropReason::Replayed], 2);
        assert_eq!(sum.drops.total(), 2);
        let mut s = ShardCounters::default();
        s.ended[EndReason::Deleted] += 1;
        let mut t = ShardCounters::default();
        t.add(&s);
        t.add(&s);
        assert_eq!(t.ended[EndReason::Deleted], 2);
    }

    #[test]
    fn srtp_errors_map_to_reasons() {
        use secrelay_srtp::Error as E;
        assert_eq!(
            DropReason::of_unprotect(E::AuthFailed),
            DropReason::AuthFailed
        );
        assert_eq!(DropReason::of_unprotect(E::ReplayOld), DropReason::Replayed);
        assert_eq!(DropReason::of_unprotect(E::TooShort), DropReason::Malformed);
    }
}
