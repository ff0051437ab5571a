//! What the server counts: every refusal and every dropped packet by reason, the allocations,
//! the relayed packets and bytes each way. Atomics shared by the shards; read by whoever
//! exports them (the gateway's `/metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! reasons {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident => $s:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $v,)*
        }
        impl $name {
            /// Every reason, in the order [`Self::index`] numbers them.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            /// The reason's name as `/metrics` labels it.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            /// Its position in [`Self::ALL`].
            pub fn index(self) -> usize {
                self as usize
            }
        }
    };
}

reasons! {
    /// Why a request was answered with an error (other than the first challenge, which every
    /// client gets and is counted in [`Stats::challenges`]).
    Refusal {
        /// 400: an attribute missing or malformed.
        BadRequest => "bad_request",
        /// 401: a USERNAME that is not `EXPIRY:IDENTITY`.
        BadUsername => "bad_username",
        /// 401: a credential past its expiry.
        ExpiredCredential => "expired_credential",
        /// 401: MESSAGE-INTEGRITY that does not verify (a forged or mistyped password).
        BadIntegrity => "bad_integrity",
        /// 438: a nonce that is stale, forged, or from another address.
        StaleNonce => "stale_nonce",
        /// 441: a request on an allocation with another credential than the allocation's.
        WrongCredentials => "wrong_credentials",
        /// 437: an Allocate on a 5-tuple that has one, or a request on one that has none.
        AllocationMismatch => "allocation_mismatch",
        /// 442: a relay other than UDP asked for.
        UnsupportedTransport => "unsupported_transport",
        /// 440/443: an address family the relay does not serve, or a peer of another family.
        AddressFamily => "address_family",
        /// 420: a comprehension-required attribute we do not know.
        UnknownAttribute => "unknown_attribute",
        /// 486: the credential's identity holds its most allocations.
        QuotaCredential => "quota_credential",
        /// 486: the source address holds its most allocations.
        QuotaSource => "quota_source",
        /// 486: the server holds its most allocations.
        QuotaTotal => "quota_total",
        /// 508: no relay port free.
        NoRelayPort => "no_relay_port",
        /// 508: an allocation's most permissions or channels.
        Capacity => "capacity",
        /// 403: a peer that is not one of the gateway's own media addresses (no open relay).
        ForbiddenPeer => "forbidden_peer",
        /// 400: a channel bound to another peer, or a peer to another channel.
        ChannelConflict => "channel_conflict",
    }
}

reasons! {
    /// Why a packet was dropped without an answer.
    Dropped {
        /// Not STUN or ChannelData, or malformed.
        Malformed => "malformed",
        /// A datagram longer than the server relays ([`crate::core::MAX_DATAGRAM`]): from a
        /// client, for the peer, or on a relay port; dropped whole, not cut.
        TooLarge => "too_large",
        /// An indication or response from a client, or a request of a method we do not serve.
        Unexpected => "unexpected",
        /// Data (ChannelData or Send) on a 5-tuple with no allocation.
        NoAllocation => "no_allocation",
        /// ChannelData on a channel not bound (or expired).
        UnknownChannel => "unknown_channel",
        /// Data to or from a peer with no permission installed (or expired).
        NoPermission => "no_permission",
        /// A Send indication to an address that is not one of the gateway's own.
        ForbiddenPeer => "forbidden_peer",
        /// A datagram on a relay from an address that is not one of the gateway's own.
        UnknownPeer => "unknown_peer",
        /// A stream client's queue was full (a slow reader).
        QueueFull => "queue_full",
        /// The operating system refused the send (buffer full).
        SendFailed => "send_failed",
        /// A TCP connection over the bounds (in all, per source), closed at accept.
        ConnectionLimit => "connection_limit",
    }
}

reasons! {
    /// How an allocation ended.
    Ended {
        /// Its lifetime ran out without a Refresh.
        Expired => "expired",
        /// The client deleted it (Refresh with LIFETIME 0).
        Deleted => "deleted",
        /// Its client's TCP or TLS connection closed.
        Closed => "closed",
    }
}

/// The counters.
#[derive(Debug, Default)]
pub struct Stats {
    refusals: [AtomicU64; Refusal::ALL.len()],
    drops: [AtomicU64; Dropped::ALL.len()],
    ended: [AtomicU64; Ended::ALL.len()],
    /// Requests without a credential answered 401 with a nonce (the first step of every
    /// client's authentication).
    pub challenges: AtomicU64,
    /// Allocations made.
    pub allocations_made: AtomicU64,
    /// Packets relayed from clients to peers.
    pub to_peer_packets: AtomicU64,
    /// Their payload bytes.
    pub to_peer_bytes: AtomicU64,
    /// Packets relayed from peers to clients.
    pub to_client_packets: AtomicU64,
    /// Their payload bytes.
    pub to_client_bytes: AtomicU64,
    /// Stream (TCP, TLS) connections open now.
    pub streams_open: AtomicU64,
}

impl Stats {
    /// Counts a refusal.
    pub fn refused(&self, r: Refusal) {
        self.refusals[r.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a drop.
    pub fn dropped(&self, d: Dropped) {
        self.drops[d.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts an allocation's end.
    pub fn ended(&self, e: Ended) {
        self.ended[e.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Refusals so far, by reason.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .map(|r| (r.name(), self.refusals[r.index()].load(Ordering::Relaxed)))
            .collect()
    }
    /// Drops so far, by reason.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        Dropped::ALL
            .iter()
            .map(|d| (d.name(), self.drops[d.index()].load(Ordering::Relaxed)))
            .collect()
    }
    /// Allocations ended so far, by how.
    pub fn ends(&self) -> Vec<(&'static str, u64)> {
        Ended::ALL
            .iter()
            .map(|e| (e.name(), self.ended[e.index()].load(Ordering::Relaxed)))
            .collect()
    }
    /// One refusal's count.
    pub fn refusal(&self, r: Refusal) -> u64 {
        self.refusals[r.index()].load(Ordering::Relaxed)
    }
    /// One drop reason's count.
    pub fn drop_count(&self, d: Dropped) -> u64 {
        self.drops[d.index()].load(Ordering::Relaxed)
    }
    pub(crate) fn relayed(&self, to_peer: bool, bytes: usize) {
        let (p, b) = if to_peer {
            (&self.to_peer_packets, &self.to_peer_bytes)
        } else {
            (&self.to_client_packets, &self.to_client_bytes)
        };
        p.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}
