//! Allocation quotas shared by the shards: in all, per credential identity, per source (an
//! IPv4 address, an IPv6 /64). A [`Ticket`] holds one allocation's share and gives it back when
//! dropped, so an allocation that ends, however it ends, frees its quota.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::stats::Refusal;

/// The bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Allocations at once in all.
    pub total: usize,
    /// Per credential identity (the part of the username after `EXPIRY:`).
    pub per_identity: usize,
    /// Per source address (IPv4) or /64 (IPv6).
    pub per_source: usize,
}

/// Where an allocation's client comes from, as the per-source quota counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 address (IPv4-mapped IPv6 included).
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
}

impl SourceKey {
    /// The key of `ip`.
    pub fn of(ip: IpAddr) -> SourceKey {
        match ip {
            IpAddr::V4(a) => SourceKey::V4(a.octets()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => SourceKey::V4(v4.octets()),
                None => {
                    let mut p = [0u8; 8];
                    p.copy_from_slice(&a.octets()[..8]);
                    SourceKey::V6(p)
                }
            },
        }
    }
}

#[derive(Default)]
struct Held {
    total: usize,
    identities: HashMap<Box<[u8]>, usize>,
    sources: HashMap<SourceKey, usize>,
}

/// The quotas and what is held against them.
pub struct Quotas {
    limits: QuotaLimits,
    held: Mutex<Held>,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas")
            .field("limits", &self.limits)
            .field("held", &self.held())
            .finish()
    }
}

/// One allocation's share of the quotas.
pub struct Ticket {
    quotas: Arc<Quotas>,
    identity: Box<[u8]>,
    source: SourceKey,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("source", &self.source)
            .finish()
    }
}

impl Quotas {
    /// Quotas with these bounds, nothing held.
    pub fn new(limits: QuotaLimits) -> Arc<Quotas> {
        Arc::new(Quotas {
            limits,
            held: Mutex::new(Held::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocations held now.
    pub fn held(&self) -> usize {
        self.lock().total
    }

    /// A share for one more allocation of `identity` from `source`, or the quota it would pass.
    pub fn take(self: &Arc<Self>, identity: &[u8], source: IpAddr) -> Result<Ticket, Refusal> {
        let source = SourceKey::of(source);
        let mut h = self.lock();
        if h.total >= self.limits.total {
            return Err(Refusal::QuotaTotal);
        }
        if h.identities.get(identity).copied().unwrap_or(0) >= self.limits.per_identity {
            return Err(Refusal::QuotaCredential);
        }
        if h.sources.get(&source).copied().unwrap_or(0) >= self.limits.per_source {
            return Err(Refusal::QuotaSource);
        }
        h.total += 1;
        *h.identities.entry(identity.into()).or_insert(0) += 1;
        *h.sources.entry(source).or_insert(0) += 1;
        Ok(Ticket {
            quotas: self.clone(),
            identity: identity.into(),
            source,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut h = self.quotas.lock();
        h.total = h.total.saturating_sub(1);
        if let Some(n) = h.identities.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                h.identities.remove(&self.identity);
            }
        }
        if let Some(n) = h.sources.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                h.sources.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quota_refuses_past_its_bound_and_tickets_give_back() {
        let q = Quotas::new(QuotaLimits {
            total: 3,
            per_identity: 2,
            per_source: 2,
        });
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let _t1 = q.take(b"alice", a).unwrap();
        let t2 = q.take(b"alice", b).unwrap();
        assert_eq!(q.take(b"alice", b).unwrap_err(), Refusal::QuotaCredential);
        let _t3 = q.take(b"bob", a).unwrap();
        assert_eq!(q.take(b"carol", b).unwrap_err(), Refusal::QuotaTotal);
        drop(t2);
        assert_eq!(q.take(b"carol", a).unwrap_err(), Refusal::QuotaSource);
        let _t4 = q.take(b"carol", b).unwrap();
        assert_eq!(q.held(), 3);
        // One /64: the same source.
        let v6a: IpAddr = "2001:db8::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        assert_eq!(SourceKey::of(v6a), SourceKey::of(v6b));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(SourceKey::of(mapped), SourceKey::of(a));
    }
}
