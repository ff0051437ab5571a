//! Capture writer: writes packets in the same format they were read in.

use std::borrow::Cow;
use std::io::Write;
use std::time::Duration;

use pcap_file::pcap::{PcapWriter, RawPcapPacket};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::TsResolution;

use super::format::{pcap_link_type, FormatInner, NgInterface};
use super::{BlockOrigin, CaptureFormat, CapturedPacket, WriteError};

enum Inner<W: Write> {
    Pcap(PcapWriter<W>, pcap_file::pcap::PcapHeader),
    PcapNg {
        writer: PcapNgWriter<W>,
        interfaces: Vec<NgInterface>,
    },
}

/// Writes packets to an [`impl Write`](std::io::Write) in a given
/// [`CaptureFormat`] (normally the one they were read in): classic pcap with
/// the same header (link type, precision, byte order, snap length), or
/// pcapng with the same section options and interface descriptions.
///
/// Timestamps are kept: unchanged pcapng timestamps are written back with
/// their exact raw value. pcapng packets from Simple Packet Blocks stay
/// Simple Packet Blocks (when they belong to interface 0); obsolete Packet
/// Blocks become Enhanced Packet Blocks. Non-packet pcapng blocks (name
/// resolution, statistics, custom blocks) are not carried over.
///
/// Nothing is written atomically: write into a `Vec<u8>` or a temporary
/// file and rename it yourself.
pub struct CaptureWriter<W: Write> {
    inner: Inner<W>,
}

impl<W: Write> std::fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureWriter").finish_non_exhaustive()
    }
}

fn within_snaplen(len: usize, snaplen: u32) -> Result<(), WriteError> {
    if snaplen != 0 && len > snaplen as usize {
        Err(WriteError::ExceedsSnaplen { len, snaplen })
    } else {
        Ok(())
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header (and, for pcapng, every interface description
    /// in `format`).
    pub fn new(writer: W, format: &CaptureFormat) -> Result<Self, WriteError> {
        let inner = match &format.inner {
            FormatInner::Pcap(header) => {
                let w = PcapWriter::with_header(writer, *header).map_err(WriteError::from_pcap)?;
                Inner::Pcap(w, *header)
            }
            FormatInner::PcapNg {
                section,
                interfaces: _,
            } => {
                let mut section = section.clone();
                // Block sizes change when payloads change: the section
                // length is no longer known.
                section.section_length = -1;
                let writer = PcapNgWriter::with_section_header(writer, section)
                    .map_err(WriteError::from_pcap)?;
                let mut w = CaptureWriter {
                    inner: Inner::PcapNg {
                        writer,
                        interfaces: Vec::new(),
                    },
                };
                w.add_new_interfaces(format)?;
                return Ok(w);
            }
        };
        Ok(CaptureWriter { inner })
    }

    /// Writes the interface descriptions of `format` that this writer has
    /// not written yet (pcapng only; a no-op for pcap). Call it when
    /// streaming from a [`CaptureReader`](super::CaptureReader) whose format
    /// grew after this writer was created.
    pub fn add_new_interfaces(&mut self, format: &CaptureFormat) -> Result<(), WriteError> {
        let (
            Inner::PcapNg {
                writer, interfaces, ..
            },
            FormatInner::PcapNg {
                interfaces: wanted, ..
            },
        ) = (&mut self.inner, &format.inner)
        else {
            return Ok(());
        };
        for iface in wanted.iter().skip(interfaces.len()) {
            writer
                .write_pcapng_block(iface.idb.clone())
                .map_err(WriteError::from_pcap)?;
            interfaces.push(iface.clone());
        }
        Ok(())
    }

    /// Writes one packet.
    ///
    /// Fails if the packet's interface or link type does not match the
    /// format, if its timestamp cannot be represented, or if it is longer
    /// than the snap length (see [`CaptureFormat::raise_snaplen`]).
    pub fn write_packet(&mut self, packet: &CapturedPacket) -> Result<(), WriteError> {
        let data = packet.data();
        let orig_len = packet
            .orig_len()
            .max(u32::try_from(data.len()).unwrap_or(u32::MAX));
        let incl_len = u32::try_from(data.len()).map_err(|_| WriteError::ExceedsSnaplen {
            len: data.len(),
            snaplen: u32::MAX,
        })?;
        match &mut self.inner {
            Inner::Pcap(w, header) => {
                if packet.interface() != 0 {
                    return Err(WriteError::UnknownInterface(packet.interface()));
                }
                let link = pcap_link_type(header);
                if packet.link_type() != link {
                    return Err(WriteError::LinkTypeMismatch {
                        interface: 0,
                        expected: link,
                        found: packet.link_type(),
                    });
                }
                within_snaplen(data.len(), header.snaplen)?;
                let ns = packet.timestamp_ns();
                let ts_sec = u32::try_from(ns / 1_000_000_000)
                    .map_err(|_| WriteError::TimestampOutOfRange(ns))?;
                let sub = (ns % 1_000_000_000) as u32;
                let ts_frac = match header.ts_resolution {
                    TsResolution::MicroSecond => sub / 1_000,
                    TsResolution::NanoSecond => sub,
                };
                let raw = RawPcapPacket {
                    ts_sec,
                    ts_frac,
                    incl_len,
                    orig_len,
                    data: Cow::Borrowed(data),
                };
                w.write_raw_packet(&raw).map_err(WriteError::from_pcap)?;
            }
            Inner::PcapNg { writer, interfaces } => {
                let index = packet.interface();
                let iface = usize::try_from(index)
                    .ok()
                    .and_then(|i| interfaces.get(i))
                    .ok_or(WriteError::UnknownInterface(index))?;
                let link = super::LinkType(u32::from(iface.idb.linktype));
                if packet.link_type() != link {
                    return Err(WriteError::LinkTypeMismatch {
                        interface: index,
                        expected: link,
                        found: packet.link_type(),
                    });
                }
                within_snaplen(data.len(), iface.idb.snaplen)?;
                // An SPB has no timestamp, and its captured length is
                // implied: min(original length, snap length). Write one only
                // when that gives back exactly this packet; otherwise fall
                // back to an EPB.
                let snap = iface.idb.snaplen;
                let implied_len = if snap == 0 {
                    orig_len
                } else {
                    orig_len.min(snap)
                };
                if packet.origin == BlockOrigin::Simple
                    && index == 0
                    && implied_len == incl_len
                    && packet.timestamp_ns() == 0
                {
                    let spb = SimplePacketBlock {
                        original_len: orig_len,
                        data: Cow::Borrowed(data),
                    };
                    writer
                        .write_pcapng_block(spb)
                        .map_err(WriteError::from_pcap)?;
                    return Ok(());
                }
                let ns = packet.timestamp_ns();
                let raw_ts = match packet.original_raw_ts {
                    Some((raw, read_ns)) if read_ns == ns => raw,
                    _ => iface
                        .unit
                        .ns_to_raw(ns, iface.offset_s)
                        .ok_or(WriteError::TimestampOutOfRange(ns))?,
                };
                let options: Vec<EnhancedPacketOption<'_>> = if packet.modified {
                    // A packet hash no longer matches modified data.
                    packet
                        .epb_options
                        .iter()
                        .filter(|o| !matches!(o, EnhancedPacketOption::Hash(_)))
                        .cloned()
                        .collect()
                } else {
                    packet.epb_options.clone()
                };
                let epb = EnhancedPacketBlock {
                    interface_id: index,
                    // pcap-file writes `as_nanos()` verbatim as the raw
                    // 64-bit timestamp.
                    timestamp: Duration::from_nanos(raw_ts),
                    original_len: orig_len,
                    data: Cow::Borrowed(data),
                    options,
                };
                writer
                    .write_pcapng_block(epb)
                    .map_err(WriteError::from_pcap)?;
            }
        }
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> Result<W, WriteError> {
        let mut w = match self.inner {
            Inner::Pcap(w, _) => w.into_writer(),
            Inner::PcapNg { writer, .. } => writer.into_inner(),
        };
        w.flush().map_err(WriteError::Io)?;
        Ok(w)
    }
}

impl WriteError {
    fn from_pcap(e: pcap_file::PcapError) -> Self {
        match e {
            pcap_file::PcapError::IoError(io) => WriteError::Io(io),
            pcap_file::PcapError::InvalidInterfaceId(id) => WriteError::UnknownInterface(id),
            pcap_file::PcapError::InvalidField(what) => WriteError::Invalid(what),
            _ => WriteError::Invalid("unexpected pcap-file error"),
        }
    }
}
