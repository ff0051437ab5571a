//! The XDP filter ([`secrelay_xdp`]) as `secrelay serve` runs it: attached at start to the
//! interfaces `xdp` names (one program and one set of maps for all), the shared media port's policy `Shared` and every port of
//! `rtp_ports` `Closed`; kept current as the gateway admits sources (the [`Directory`]'s
//! validated addresses on the shared port, each telephony leg's sources on its own ports, a
//! leg's ports closed again when it ends); its counters in `/metrics`.
//!
//! A change the kernel refuses (a full map) is logged and counted
//! (`secrelay_xdp_update_errors_total`): the filter then drops what it was not told to pass,
//! which the counters show.
//!
//! [`Directory`]: super::directory::Directory

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use secrelay_core::leg::Sources;
use secrelay_xdp::{Attach, Filter, Mode, Policy};

use super::stats::{counter, gauge, labelled_counters};

/// The attached filter and the gateway's ports on it.
#[derive(Debug)]
pub(crate) struct Gate {
    filter: Filter,
    shared_port: u16,
    /// `rtp_ports`: the only ports a leg's sources are set on (a leg taken over from another
    /// node is on that node's ports, which the filter leaves alone).
    legs: std::ops::RangeInclusive<u16>,
    errors: AtomicU64,
}

impl Gate {
    /// Loads the filter, attaches it to `interface` and sets the ports' policies: the shared
    /// port `shared_port`, the telephony range `lo..=hi`. Err: what the kernel refused.
    pub fn attach(
        interfaces: &[String],
        attach: Attach,
        shared_port: u16,
        (lo, hi): (u16, u16),
    ) -> Result<Gate, secrelay_xdp::Error> {
        let mut filter = Filter::load()?;
        filter.set_policies(lo, hi, Policy::Closed)?;
        filter.set_policy(shared_port, Policy::Shared)?;
        for interface in interfaces {
            let mode = filter.attach(interface, attach)?;
            tracing::info!(interface, mode = mode.name(), shared_port, rtp_ports = %format!("{lo}-{hi}"), "XDP filter attached");
        }
        Ok(Gate {
            filter,
            shared_port,
            legs: lo..=hi,
            errors: AtomicU64::new(0),
        })
    }

    fn note(&self, r: Result<(), secrelay_xdp::Error>) {
        if let Err(e) = r {
            self.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "XDP filter not updated");
        }
    }

    /// ICE validated `addr`: its datagrams to the shared port pass.
    pub fn admit(&self, addr: SocketAddr) {
        self.note(self.filter.admit(self.shared_port, addr));
    }

    /// `addr` is no member's any more.
    pub fn revoke(&self, addr: SocketAddr) {
        self.note(self.filter.revoke(self.shared_port, addr));
    }

    /// A telephony leg's ports take datagrams from these sources now (ports outside
    /// `rtp_ports` are not the filter's).
    pub fn leg_sources(&self, ports: &[(u16, Sources)]) {
        for (port, sources) in ports.iter().filter(|(p, _)| self.legs.contains(p)) {
            let only = match sources {
                Sources::Any => None,
                Sources::Only(v) => Some(v.as_slice()),
            };
            self.note(self.filter.set_port(*port, only));
        }
    }

    /// A leg's ports are free again: they take nothing until the next leg's sources.
    pub fn close_ports(&self, ports: &[u16]) {
        for port in ports.iter().filter(|p| self.legs.contains(p)) {
            self.note(self.filter.set_port(*port, Some(&[])));
            self.note(self.filter.set_owner(*port, None));
        }
    }

    /// The AF_XDP path: what passes on receive queue `queue` of `interface` goes to the XDP
    /// socket `fd`.
    pub fn set_socket(
        &self,
        interface: &str,
        queue: u32,
        fd: std::os::fd::RawFd,
    ) -> Result<(), secrelay_xdp::Error> {
        self.filter.set_socket(interface, queue, fd)
    }

    /// The AF_XDP path: the XDP socket of `interface`'s queue `queue` is gone.
    pub fn unset_socket(&self, interface: &str, queue: u32) {
        self.note(self.filter.unset_socket(interface, queue));
    }

    /// The AF_XDP path: a leg's `ports` are read by the worker whose XDP socket is on queue
    /// `queue` (`None`: by a worker without one); on another queue their datagrams go to the
    /// leg's own socket.
    pub fn own_ports(&self, ports: &[u16], queue: Option<u32>) {
        // No queue's socket takes a port owned by a queue past the program's map.
        let queue = queue.unwrap_or(secrelay_xdp::MAX_QUEUES);
        for port in ports.iter().filter(|p| self.legs.contains(p)) {
            self.note(self.filter.set_owner(*port, Some(queue)));
        }
    }
}

/// What to add to an attach error that looks like missing privileges.
pub(crate) fn hint(error: &str) -> &'static str {
    let denied = [
        "Permission denied",
        "Operation not permitted",
        "failed to create map",
    ];
    if denied.iter().any(|d| error.contains(d)) {
        " (the filter needs root, or CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON: packaging/secrelay-xdp.conf for the systemd service)"
    } else {
        ""
    }
}

/// Exposes the filter's counters to a Prometheus registry, read on each scrape.
#[derive(Debug)]
pub(crate) struct XdpCollector(pub Arc<Gate>);

impl prometheus_client::collector::Collector for XdpCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let c = self.0.filter.counts().unwrap_or_else(|err| {
            tracing::warn!(error = %err, "reading the XDP filter's counters");
            Default::default()
        });
        labelled_counters(
            &mut e,
            "secrelay_xdp_datagrams",
            "Datagrams to the media ports the XDP filter judged, by verdict (dropped: from a source not admitted, before the socket layer; admitted: from an admitted source; open: to a leg's port that takes any source; stun: an ICE check to the shared port; fragment: an IP fragment after the first, passed)",
            "verdict",
            &[
                ("dropped", c.dropped),
                ("admitted", c.admitted),
                ("open", c.open),
                ("stun", c.stun),
                ("fragment", c.fragment),
            ],
        )?;
        counter(
            &mut e,
            "secrelay_xdp_redirected",
            "Of the datagrams the XDP filter passed, those it handed to a worker's XDP socket (media_io = af_xdp) rather than to the kernel's socket layer",
            c.xsk,
        )?;
        let mut native = e.encode_descriptor(
            "secrelay_xdp_native",
            "Per interface with the XDP filter: 1 when it runs in the network driver (native), 0 when at the start of the kernel's receive path (generic)",
            None,
            MetricType::Gauge,
        )?;
        for (interface, mode) in self.0.filter.attached() {
            let g = ConstGauge::new(i64::from(mode == Mode::Native));
            g.encode(native.encode_family(&[("interface", interface)])?)?;
        }
        gauge(
            &mut e,
            "secrelay_xdp_admitted_sources",
            "(source, port) pairs the XDP filter passes now",
            self.0.filter.admitted() as u64,
        )?;
        counter(
            &mut e,
            "secrelay_xdp_update_errors",
            "Changes to the XDP filter's maps the kernel refused (logged)",
            self.0.errors.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_permission_refusal_names_the_capabilities_and_nothing_else_does() {
        let h = super::hint(
            "the kernel refused the XDP filter: the BPF_PROG_LOAD syscall returned Permission denied (os error 13)",
        );
        assert!(h.contains("CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON"), "{h}");
        assert!(
            super::hint("loading the XDP filter: map error: failed to create map `allowed`")
                .contains("CAP_PERFMON")
        );
        assert_eq!(
            super::hint("native XDP on eth9: unknown network interface eth9"),
            ""
        );
    }
}
