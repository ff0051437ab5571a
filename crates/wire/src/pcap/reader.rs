//! Capture reading (pcap and pcapng), streaming or from a slice.

use std::io::Read;

use byteorder_slice::{BigEndian, LittleEndian};
use pcap_file::pcap::{PcapParser, RawPcapPacket};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::blocks::{
    ENHANCED_PACKET_BLOCK, INTERFACE_DESCRIPTION_BLOCK, PACKET_BLOCK, SECTION_HEADER_BLOCK,
    SIMPLE_PACKET_BLOCK,
};
use pcap_file::pcapng::{Block, PcapNgParser, RawBlock};
use pcap_file::{Endianness, PcapError, TsResolution};

use super::format::{pcap_link_type, FormatInner, NgInterface};
use super::{BlockOrigin, CaptureError, CaptureFormat, CapturedPacket, LinkType};

enum Inner<R: Read> {
    Pcap(PcapStream<R>),
    PcapNg {
        reader: NgStream<R>,
        /// Global index of interface 0 of the current section.
        section_base: usize,
    },
}

/// Reads packets one by one from a pcap or pcapng stream.
///
/// The format is detected from the magic number. Frames that are not
/// well-formed UDP come back as packets with [`CapturedPacket::udp`] =
/// `None` and a [`CapturedPacket::not_udp_reason`]; a malformed file
/// (bad magic, truncated header/record/block, invalid block) yields one
/// `Err` and then the iteration ends.
///
/// For pcapng, interface descriptions may appear between packets; the
/// [`format`](Self::format) grows as they are read.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    format: CaptureFormat,
    done: bool,
}

impl<R: Read> std::fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.format)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

const PCAP_MAGICS: [u32; 4] = [0xA1B2_C3D4, 0xD4C3_B2A1, 0xA1B2_3C4D, 0x4D3C_B2A1];

impl<R: Read> CaptureReader<R> {
    /// Detects the format and reads the file header (pcap global header or
    /// first pcapng section header).
    pub fn new(reader: R) -> Result<Self, CaptureError> {
        let mut input = Buffered::new(reader);
        input.fill(|b| b.len() < 4).map_err(CaptureError::Io)?;
        let magic: [u8; 4] = match input.rest().get(..4) {
            Some(&[a, b, c, d]) => [a, b, c, d],
            _ => return Err(CaptureError::TooShort),
        };
        let m = u32::from_be_bytes(magic);
        if PCAP_MAGICS.contains(&m) {
            input
                .fill(|b| matches!(PcapParser::new(b), Err(PcapError::IncompleteBuffer)))
                .map_err(CaptureError::Io)?;
            let rest = input.rest();
            let (rem, parser) = PcapParser::new(rest).map_err(CaptureError::from_pcap)?;
            input.used = rest.len() - rem.len();
            let format = CaptureFormat {
                inner: FormatInner::Pcap(parser.header()),
            };
            Ok(CaptureReader {
                inner: Inner::Pcap(PcapStream { parser, input }),
                format,
                done: false,
            })
        } else if m == SECTION_HEADER_BLOCK {
            input
                .fill(|b| matches!(PcapNgParser::new(b), Err(PcapError::IncompleteBuffer)))
                .map_err(CaptureError::Io)?;
            let rest = input.rest();
            let (rem, parser) = PcapNgParser::new(rest).map_err(CaptureError::from_pcap)?;
            input.used = rest.len() - rem.len();
            let format = CaptureFormat {
                inner: FormatInner::PcapNg {
                    section: parser.section().clone(),
                    interfaces: Vec::new(),
                },
            };
            Ok(CaptureReader {
                inner: Inner::PcapNg {
                    reader: NgStream { parser, input },
                    section_base: 0,
                },
                format,
                done: false,
            })
        } else {
            Err(CaptureError::UnknownFormat { magic })
        }
    }

    /// The format read so far (for pcapng, the interfaces seen so far).
    pub fn format(&self) -> &CaptureFormat {
        &self.format
    }

    /// Consumes the reader and returns the format.
    pub fn into_format(self) -> CaptureFormat {
        self.format
    }

    /// Returns the next packet, `None` at the end of the file, or an error
    /// for a malformed file (after which it returns `None`).
    pub fn next_packet(&mut self) -> Option<Result<CapturedPacket, CaptureError>> {
        if self.done {
            return None;
        }
        let res = match &mut self.inner {
            Inner::Pcap(reader) => next_pcap(reader, &self.format),
            Inner::PcapNg {
                reader,
                section_base,
            } => next_pcapng(reader, section_base, &mut self.format),
        };
        match res {
            Some(Ok(p)) => Some(Ok(p)),
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e))
            }
            None => {
                self.done = true;
                None
            }
        }
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CapturedPacket, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_packet()
    }
}

/// Something that yields raw classic pcap records.
trait PcapSource {
    fn next_raw(&mut self) -> Option<Result<RawPcapPacket<'_>, PcapError>>;
}

/// A reader's bytes, buffered as far as the next record or block needs. pcap-file's own
/// readers hold a buffer of 8 MB each, whatever the capture's size; this one grows from 64 KiB
/// only as far as the largest record or block asks, and the slice parsers read from it.
struct Buffered<R> {
    reader: R,
    buf: Vec<u8>,
    /// Where the unread bytes start.
    pos: usize,
    /// Bytes the item last returned took: dropped at the next [`Buffered::fill`] (until then
    /// the item borrows them).
    used: usize,
    eof: bool,
}

/// Most bytes buffered for one record or block: past it the parser is given what there is
/// (and says the item is incomplete). pcap-file's readers stop at 8 MB.
const MAX_ITEM: usize = 64 << 20;
/// The least a read asks for.
const READ_CHUNK: usize = 64 << 10;

impl<R: Read> Buffered<R> {
    fn new(reader: R) -> Self {
        Buffered {
            reader,
            buf: Vec::new(),
            pos: 0,
            used: 0,
            eof: false,
        }
    }

    /// The bytes not yet taken.
    fn rest(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// The next item `parse` reads, once `fill` has buffered it; `None` at the end.
    fn next_item<'a, T>(
        &'a mut self,
        incomplete: impl Fn(&[u8]) -> bool,
        parse: impl FnOnce(&'a [u8]) -> Result<(&'a [u8], T), PcapError>,
    ) -> Option<Result<T, PcapError>> {
        if let Err(e) = self.fill(incomplete) {
            return Some(Err(PcapError::IoError(e)));
        }
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return None;
        }
        Some(parse(rest).map(|(rem, item)| {
            self.used = rest.len() - rem.len();
            item
        }))
    }

    /// Drops what the last item took, then reads until `incomplete` says the unread bytes
    /// hold the next item, the input ends, or [`MAX_ITEM`] bytes are unread.
    fn fill(&mut self, incomplete: impl Fn(&[u8]) -> bool) -> std::io::Result<()> {
        self.pos += std::mem::take(&mut self.used);
        loop {
            let rest = &self.buf[self.pos..];
            if self.eof || rest.len() >= MAX_ITEM || (!rest.is_empty() && !incomplete(rest)) {
                return Ok(());
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            let old = self.buf.len();
            self.buf.resize(old + old.max(READ_CHUNK), 0);
            let r = self.reader.read(&mut self.buf[old..]);
            self.buf.truncate(old + *r.as_ref().unwrap_or(&0));
            match r {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Classic pcap records from a reader.
struct PcapStream<R> {
    parser: PcapParser,
    input: Buffered<R>,
}

impl<R: Read> PcapSource for PcapStream<R> {
    fn next_raw(&mut self) -> Option<Result<RawPcapPacket<'_>, PcapError>> {
        let parser = &self.parser;
        self.input.next_item(
            |b| matches!(parser.next_raw_packet(b), Err(PcapError::IncompleteBuffer)),
            |b| parser.next_raw_packet(b),
        )
    }
}

/// Classic pcap records straight from a slice (no 8 MB read buffer).
struct PcapSlice<'a> {
    parser: PcapParser,
    rest: &'a [u8],
}

impl PcapSource for PcapSlice<'_> {
    fn next_raw(&mut self) -> Option<Result<RawPcapPacket<'_>, PcapError>> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.parser.next_raw_packet(self.rest).map(|(rem, p)| {
            self.rest = rem;
            p
        }))
    }
}

/// Something that yields raw pcapng blocks and tracks the current section.
trait NgSource {
    fn next_raw(&mut self) -> Option<Result<RawBlock<'_>, PcapError>>;
    fn endianness(&self) -> Endianness;
    fn interfaces(&self) -> &[InterfaceDescriptionBlock<'static>];
}

/// pcapng blocks from a reader.
struct NgStream<R> {
    parser: PcapNgParser,
    input: Buffered<R>,
}

impl<R: Read> NgSource for NgStream<R> {
    fn next_raw(&mut self) -> Option<Result<RawBlock<'_>, PcapError>> {
        // Whether a block is all there, asked of the stateless block parser: the section's
        // parser takes in each section and interface it returns.
        let big = matches!(self.parser.section().endianness, Endianness::Big);
        let incomplete = |b: &[u8]| {
            let r = if big {
                RawBlock::from_slice::<BigEndian>(b).map(|_| ())
            } else {
                RawBlock::from_slice::<LittleEndian>(b).map(|_| ())
            };
            matches!(r, Err(PcapError::IncompleteBuffer))
        };
        let parser = &mut self.parser;
        self.input
            .next_item(incomplete, |b| parser.next_raw_block(b))
    }
    fn endianness(&self) -> Endianness {
        self.parser.section().endianness
    }
    fn interfaces(&self) -> &[InterfaceDescriptionBlock<'static>] {
        self.parser.interfaces()
    }
}

/// pcapng blocks straight from a slice (no 8 MB read buffer).
struct NgSlice<'a> {
    parser: PcapNgParser,
    rest: &'a [u8],
}

impl NgSource for NgSlice<'_> {
    fn next_raw(&mut self) -> Option<Result<RawBlock<'_>, PcapError>> {
        if self.rest.is_empty() {
            return None;
        }
        Some(self.parser.next_raw_block(self.rest).map(|(rem, b)| {
            self.rest = rem;
            b
        }))
    }
    fn endianness(&self) -> Endianness {
        self.parser.section().endianness
    }
    fn interfaces(&self) -> &[InterfaceDescriptionBlock<'static>] {
        self.parser.interfaces()
    }
}

/// Reads a whole capture from memory with pcap-file's slice parsers.
pub(crate) fn read_slice(
    bytes: &[u8],
) -> Result<(CaptureFormat, Vec<CapturedPacket>), CaptureError> {
    let magic: [u8; 4] = match bytes.get(..4) {
        Some(&[a, b, c, d]) => [a, b, c, d],
        _ => return Err(CaptureError::TooShort),
    };
    let m = u32::from_be_bytes(magic);
    let mut packets = Vec::new();
    if PCAP_MAGICS.contains(&m) {
        let (rest, parser) = PcapParser::new(bytes).map_err(CaptureError::from_pcap)?;
        let format = CaptureFormat {
            inner: FormatInner::Pcap(parser.header()),
        };
        let mut src = PcapSlice { parser, rest };
        while let Some(p) = next_pcap(&mut src, &format) {
            packets.push(p?);
        }
        Ok((format, packets))
    } else if m == SECTION_HEADER_BLOCK {
        let (rest, parser) = PcapNgParser::new(bytes).map_err(CaptureError::from_pcap)?;
        let mut format = CaptureFormat {
            inner: FormatInner::PcapNg {
                section: parser.section().clone(),
                interfaces: Vec::new(),
            },
        };
        let mut src = NgSlice { parser, rest };
        let mut section_base = 0;
        while let Some(p) = next_pcapng(&mut src, &mut section_base, &mut format) {
            packets.push(p?);
        }
        Ok((format, packets))
    } else {
        Err(CaptureError::UnknownFormat { magic })
    }
}

fn next_pcap<S: PcapSource>(
    reader: &mut S,
    format: &CaptureFormat,
) -> Option<Result<CapturedPacket, CaptureError>> {
    let FormatInner::Pcap(header) = &format.inner else {
        return None;
    };
    let link_type = pcap_link_type(header);
    let frac_ns: u64 = match header.ts_resolution {
        TsResolution::MicroSecond => 1_000,
        TsResolution::NanoSecond => 1,
    };
    let raw = match reader.next_raw()? {
        Ok(raw) => raw,
        Err(e) => return Some(Err(CaptureError::from_pcap(e))),
    };
    // Lenient: a fraction >= 1 s (invalid, but seen in the wild) carries
    // into the seconds instead of failing the file.
    let ts = u64::from(raw.ts_sec) * 1_000_000_000 + u64::from(raw.ts_frac) * frac_ns;
    Some(Ok(CapturedPacket::from_parts(
        link_type,
        0,
        ts,
        raw.orig_len,
        raw.data.to_vec(),
        BlockOrigin::PcapRecord,
    )))
}

/// What a raw pcapng block turned out to be, extracted while the block
/// still borrows the reader.
enum NgItem {
    NewSection,
    NewInterface,
    Packet(CapturedPacket),
    Skip,
}

fn next_pcapng<S: NgSource>(
    reader: &mut S,
    section_base: &mut usize,
    format: &mut CaptureFormat,
) -> Option<Result<CapturedPacket, CaptureError>> {
    loop {
        let endianness = reader.endianness();
        let section_ifaces = reader.interfaces().len();
        let item = match reader.next_raw()? {
            Ok(raw) => packet_from_block(raw, endianness, section_ifaces, *section_base, format),
            Err(e) => Err(CaptureError::from_pcap(e)),
        };
        let FormatInner::PcapNg { interfaces, .. } = &mut format.inner else {
            return None;
        };
        match item {
            Err(e) => return Some(Err(e)),
            Ok(NgItem::NewSection) => *section_base = interfaces.len(),
            Ok(NgItem::NewInterface) => {
                if let Some(idb) = reader.interfaces().last() {
                    interfaces.push(NgInterface::new(idb.clone()));
                }
            }
            Ok(NgItem::Packet(p)) => return Some(Ok(p)),
            Ok(NgItem::Skip) => {}
        }
    }
}

fn packet_from_block(
    raw: RawBlock<'_>,
    endianness: Endianness,
    section_ifaces: usize,
    section_base: usize,
    format: &CaptureFormat,
) -> Result<NgItem, CaptureError> {
    match raw.type_ {
        SECTION_HEADER_BLOCK => return Ok(NgItem::NewSection),
        INTERFACE_DESCRIPTION_BLOCK => return Ok(NgItem::NewInterface),
        ENHANCED_PACKET_BLOCK | SIMPLE_PACKET_BLOCK | PACKET_BLOCK => {}
        _ => return Ok(NgItem::Skip),
    }
    let block = match endianness {
        Endianness::Big => raw.try_into_block::<BigEndian>(),
        Endianness::Little => raw.try_into_block::<LittleEndian>(),
    }
    .map_err(CaptureError::from_pcap)?;
    let FormatInner::PcapNg { interfaces, .. } = &format.inner else {
        return Ok(NgItem::Skip);
    };
    let interface = |local: u32| -> Result<(u32, &NgInterface), CaptureError> {
        let local_idx =
            usize::try_from(local).map_err(|_| CaptureError::UnknownInterface(local))?;
        if local_idx >= section_ifaces {
            return Err(CaptureError::UnknownInterface(local));
        }
        let global = section_base + local_idx;
        let iface = interfaces
            .get(global)
            .ok_or(CaptureError::UnknownInterface(local))?;
        let global = u32::try_from(global).map_err(|_| CaptureError::UnknownInterface(local))?;
        Ok((global, iface))
    };
    let packet = match block {
        Block::EnhancedPacket(epb) => {
            let (global, iface) = interface(epb.interface_id)?;
            // pcap-file hands the raw 64-bit timestamp over as "nanoseconds"
            // without applying if_tsresol.
            let raw_ts = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
            let mut p = CapturedPacket::from_parts(
                LinkType(u32::from(iface.idb.linktype)),
                global,
                iface.unit.raw_to_ns(raw_ts, iface.offset_s),
                epb.original_len,
                epb.data.into_owned(),
                BlockOrigin::Enhanced,
            );
            p.set_original_raw_ts(raw_ts);
            p.epb_options = epb.options.into_iter().map(|o| o.into_owned()).collect();
            p
        }
        Block::Packet(pb) => {
            let (global, iface) = interface(u32::from(pb.interface_id))?;
            let mut p = CapturedPacket::from_parts(
                LinkType(u32::from(iface.idb.linktype)),
                global,
                iface.unit.raw_to_ns(pb.timestamp, iface.offset_s),
                pb.original_len,
                pb.data.into_owned(),
                BlockOrigin::Obsolete,
            );
            p.set_original_raw_ts(pb.timestamp);
            p
        }
        Block::SimplePacket(spb) => {
            let (global, iface) = interface(0)?;
            // pcap-file includes the block padding in the data: the captured
            // length is min(original length, snap length).
            let mut len = spb.data.len().min(spb.original_len as usize);
            if iface.idb.snaplen != 0 {
                len = len.min(iface.idb.snaplen as usize);
            }
            CapturedPacket::from_parts(
                LinkType(u32::from(iface.idb.linktype)),
                global,
                0,
                spb.original_len,
                spb.data.get(..len).unwrap_or_default().to_vec(),
                BlockOrigin::Simple,
            )
        }
        _ => return Ok(NgItem::Skip),
    };
    Ok(NgItem::Packet(packet))
}

impl CaptureError {
    pub(crate) fn from_pcap(e: PcapError) -> Self {
        match e {
            PcapError::IncompleteBuffer => CaptureError::Truncated,
            PcapError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                CaptureError::Truncated
            }
            PcapError::IoError(io) => CaptureError::Io(io),
            PcapError::InvalidField(what) => CaptureError::Malformed(what),
            PcapError::Utf8Error(_) | PcapError::FromUtf8Error(_) => {
                CaptureError::Malformed("invalid UTF-8 in a pcapng string option")
            }
            PcapError::InvalidInterfaceId(id) => CaptureError::UnknownInterface(id),
        }
    }
}
