//! The file-level description of a capture: pcap global header or pcapng
//! section header plus interface descriptions, and timestamp conversion.

use pcap_file::pcap::PcapHeader;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::SectionHeaderBlock;
use pcap_file::{DataLink, Endianness, TsResolution};

use super::LinkType;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CaptureKind {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// Timestamp precision of a classic pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PcapPrecision {
    /// Microseconds (magic 0xA1B2C3D4).
    Micro,
    /// Nanoseconds (magic 0xA1B23C4D).
    Nano,
}

/// Units per second of a pcapng interface's timestamps (`if_tsresol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TsUnit {
    /// 10^n units per second.
    Pow10(u8),
    /// 2^n units per second.
    Pow2(u8),
}

impl TsUnit {
    fn from_tsresol(v: u8) -> Self {
        if v & 0x80 != 0 {
            TsUnit::Pow2(v & 0x7f)
        } else {
            TsUnit::Pow10(v)
        }
    }

    /// Converts a raw pcapng timestamp to nanoseconds since the epoch,
    /// saturating on overflow.
    pub(crate) fn raw_to_ns(self, raw: u64, offset_s: i64) -> u64 {
        let raw = u128::from(raw);
        let ns: u128 = match self {
            TsUnit::Pow10(k) if k <= 9 => raw * 10u128.pow(u32::from(9 - k)),
            TsUnit::Pow10(k) => 10u128
                .checked_pow(u32::from(k - 9))
                .map_or(0, |div| raw / div),
            // raw < 2^64 and 1e9 < 2^30: the product fits.
            TsUnit::Pow2(n) => (raw * NANOS_PER_SEC) >> n,
        };
        let ns = ns as i128 + i128::from(offset_s) * NANOS_PER_SEC as i128;
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// Converts nanoseconds since the epoch to a raw timestamp, or `None`
    /// if it does not fit in 64 bits of this unit.
    pub(crate) fn ns_to_raw(self, ns: u64, offset_s: i64) -> Option<u64> {
        let t = i128::from(ns) - i128::from(offset_s) * NANOS_PER_SEC as i128;
        let t = u128::try_from(t).ok()?;
        let raw = match self {
            TsUnit::Pow10(k) if k <= 9 => t / 10u128.pow(u32::from(9 - k)),
            TsUnit::Pow10(k) => t.checked_mul(10u128.checked_pow(u32::from(k - 9))?)?,
            TsUnit::Pow2(n) => {
                // Round up so that raw -> ns -> raw is the identity for
                // units coarser than a nanosecond.
                let scaled = t.checked_mul(1u128.checked_shl(u32::from(n))?)?;
                scaled.div_ceil(NANOS_PER_SEC)
            }
        };
        u64::try_from(raw).ok()
    }
}

/// A pcapng interface description plus its decoded timestamp settings.
#[derive(Debug, Clone)]
pub(crate) struct NgInterface {
    pub(crate) idb: InterfaceDescriptionBlock<'static>,
    pub(crate) unit: TsUnit,
    pub(crate) offset_s: i64,
}

impl NgInterface {
    pub(crate) fn new(idb: InterfaceDescriptionBlock<'static>) -> Self {
        let mut unit = TsUnit::Pow10(6);
        let mut offset_s = 0;
        for opt in &idb.options {
            match opt {
                InterfaceDescriptionOption::IfTsResol(v) => unit = TsUnit::from_tsresol(*v),
                InterfaceDescriptionOption::IfTsOffset(v) => offset_s = *v as i64,
                _ => {}
            }
        }
        NgInterface {
            idb,
            unit,
            offset_s,
        }
    }

    fn link_type(&self) -> LinkType {
        LinkType(u32::from(self.idb.linktype))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum FormatInner {
    Pcap(PcapHeader),
    PcapNg {
        section: SectionHeaderBlock<'static>,
        interfaces: Vec<NgInterface>,
    },
}

/// Everything needed to write packets back in the format they were read
/// in: the pcap global header (link type, precision, byte order, snap
/// length), or the first pcapng section header and every interface
/// description seen so far (with options, e.g. `if_tsresol`).
///
/// For pcapng files with several sections, interfaces are numbered across
/// the whole file (section by section) and written back into one section.
#[derive(Debug, Clone)]
pub struct CaptureFormat {
    pub(crate) inner: FormatInner,
}

impl CaptureFormat {
    /// A new classic pcap format (version 2.4, native byte order).
    pub fn new_pcap(link_type: LinkType, precision: PcapPrecision, snaplen: u32) -> Self {
        CaptureFormat {
            inner: FormatInner::Pcap(PcapHeader {
                snaplen,
                datalink: DataLink::from(link_type.0),
                ts_resolution: match precision {
                    PcapPrecision::Micro => TsResolution::MicroSecond,
                    PcapPrecision::Nano => TsResolution::NanoSecond,
                },
                endianness: Endianness::native(),
                ..PcapHeader::default()
            }),
        }
    }

    /// A new pcapng format (native byte order) without interfaces; add them
    /// with [`add_interface`](Self::add_interface).
    pub fn new_pcapng() -> Self {
        CaptureFormat {
            inner: FormatInner::PcapNg {
                section: SectionHeaderBlock {
                    endianness: Endianness::native(),
                    ..SectionHeaderBlock::default()
                },
                interfaces: Vec::new(),
            },
        }
    }

    /// Adds a pcapng interface with nanosecond timestamps (`if_tsresol` 9)
    /// and returns its index, or `None` for a classic pcap format (which has
    /// exactly one implicit interface) or a link type above 65535.
    pub fn add_interface(&mut self, link_type: LinkType, snaplen: u32) -> Option<u32> {
        let FormatInner::PcapNg { interfaces, .. } = &mut self.inner else {
            return None;
        };
        let link = u16::try_from(link_type.0).ok()?;
        let index = u32::try_from(interfaces.len()).ok()?;
        let mut idb = InterfaceDescriptionBlock::new(DataLink::from(u32::from(link)), snaplen);
        idb.options.push(InterfaceDescriptionOption::IfTsResol(9));
        interfaces.push(NgInterface::new(idb));
        Some(index)
    }

    /// The container format.
    pub fn kind(&self) -> CaptureKind {
        match self.inner {
            FormatInner::Pcap(_) => CaptureKind::Pcap,
            FormatInner::PcapNg { .. } => CaptureKind::PcapNg,
        }
    }

    /// The timestamp precision of a classic pcap file (`None` for pcapng,
    /// where each interface has its own resolution).
    pub fn pcap_precision(&self) -> Option<PcapPrecision> {
        match &self.inner {
            FormatInner::Pcap(h) => Some(match h.ts_resolution {
                TsResolution::MicroSecond => PcapPrecision::Micro,
                TsResolution::NanoSecond => PcapPrecision::Nano,
            }),
            FormatInner::PcapNg { .. } => None,
        }
    }

    /// Whether the file's headers are big-endian.
    pub fn is_big_endian(&self) -> bool {
        let e = match &self.inner {
            FormatInner::Pcap(h) => h.endianness,
            FormatInner::PcapNg { section, .. } => section.endianness,
        };
        e == Endianness::Big
    }

    /// Number of interfaces (always 1 for classic pcap).
    pub fn interface_count(&self) -> usize {
        match &self.inner {
            FormatInner::Pcap(_) => 1,
            FormatInner::PcapNg { interfaces, .. } => interfaces.len(),
        }
    }

    /// Link type of an interface.
    pub fn link_type(&self, interface: u32) -> Option<LinkType> {
        match &self.inner {
            FormatInner::Pcap(h) => (interface == 0).then(|| pcap_link_type(h)),
            FormatInner::PcapNg { interfaces, .. } => interfaces
                .get(usize::try_from(interface).ok()?)
                .map(NgInterface::link_type),
        }
    }

    /// Snap length of an interface (0 means unlimited).
    pub fn snaplen(&self, interface: u32) -> Option<u32> {
        match &self.inner {
            FormatInner::Pcap(h) => (interface == 0).then_some(h.snaplen),
            FormatInner::PcapNg { interfaces, .. } => interfaces
                .get(usize::try_from(interface).ok()?)
                .map(|i| i.idb.snaplen),
        }
    }

    /// Raises the snap length of every interface to at least `min` (0, which
    /// means unlimited, is kept). Use before writing packets that were made
    /// longer than the original snap length allows.
    pub fn raise_snaplen(&mut self, min: u32) {
        let raise = |s: &mut u32| {
            if *s != 0 && *s < min {
                *s = min;
            }
        };
        match &mut self.inner {
            FormatInner::Pcap(h) => raise(&mut h.snaplen),
            FormatInner::PcapNg { interfaces, .. } => {
                for i in interfaces {
                    raise(&mut i.idb.snaplen);
                }
            }
        }
    }
}

/// The link type of a classic pcap header; the upper bits of the field
/// (FCS length flags) are ignored.
pub(crate) fn pcap_link_type(h: &PcapHeader) -> LinkType {
    LinkType(u32::from(h.datalink) & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::TsUnit;

    #[test]
    fn ts_units_round_trip() {
        for unit in [
            TsUnit::Pow10(6),
            TsUnit::Pow10(9),
            TsUnit::Pow10(0),
            TsUnit::Pow2(10),
            TsUnit::Pow2(20),
            TsUnit::Pow2(29),
        ] {
            for raw in [0u64, 1, 7, 1_700_000_000, 1_700_000_123_456, 999_999_999] {
                let ns = unit.raw_to_ns(raw, 0);
                if ns == u64::MAX {
                    continue; // saturated: beyond year 2554
                }
                assert_eq!(unit.ns_to_raw(ns, 0), Some(raw), "{unit:?} {raw}");
            }
        }
        assert_eq!(TsUnit::Pow10(6).raw_to_ns(1_500_000, 0), 1_500_000_000);
        assert_eq!(TsUnit::Pow10(6).raw_to_ns(0, 10), 10_000_000_000);
        assert_eq!(TsUnit::Pow10(6).ns_to_raw(10_000_000_000, 10), Some(0));
        assert_eq!(TsUnit::Pow10(6).ns_to_raw(0, 10), None);
        assert_eq!(TsUnit::Pow10(12).raw_to_ns(1_000, 0), 1);
        assert_eq!(TsUnit::Pow10(127).raw_to_ns(u64::MAX, 0), 0);
        assert_eq!(TsUnit::Pow2(127).raw_to_ns(u64::MAX, 0), 0);
        assert_eq!(TsUnit::Pow10(0).raw_to_ns(u64::MAX, 0), u64::MAX);
        assert_eq!(TsUnit::Pow10(0).raw_to_ns(0, i64::MIN), 0);
        assert_eq!(TsUnit::Pow2(127).ns_to_raw(u64::MAX, 0), None);
    }
}
