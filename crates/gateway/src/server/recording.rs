//! Call recording (`recording_dir`; ng `start recording`, `stop recording`, `pause recording`,
//! `record call`): each recorded call is a pcap file (raw IP, nanosecond timestamps) of every RTP
//! packet each side sent, decrypted (plain RTP, as the member read it, before anything the
//! call's settings stop), written as a UDP datagram from the side's address to the gateway's
//! port, and a JSON file beside it saying what the file holds. Wireshark plays the streams.
//!
//! The workers put recorded packets on a bounded queue and never wait: a full queue drops the
//! packet and counts it (`secrelay_lifecycle_events_dropped_total{queue="recording"}`). One thread writes the files; an
//! error on a file (the disk full) ends that call's recording, logged with its path, and the
//! call goes on. The files are the calls' media in clear: they are made readable by the
//! gateway's user only (0600, in a folder made 0700 when the gateway makes it).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use secrelay_wire::pcap::{
    udp_frame, CaptureFormat, CaptureWriter, CapturedPacket, LinkType, PcapPrecision,
};

/// Packets waiting for the writer at most.
const QUEUE: usize = 16_384;
/// How often the open files are flushed.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What the writer is told.
#[derive(Debug)]
enum Msg {
    /// A call's recording begins: its file's path without the extension, and what its JSON
    /// file says.
    Open {
        call: u64,
        stem: PathBuf,
        about: serde_json::Value,
    },
    /// A member of the call, its packets keyed `key`: from `src` to `dst`.
    Stream {
        key: u64,
        call: u64,
        src: SocketAddr,
        dst: SocketAddr,
    },
    /// A packet of the member keyed `key`.
    Packet {
        key: u64,
        at: Instant,
        packet: Vec<u8>,
    },
    /// The call's recording ends: its file closed.
    Close { call: u64 },
}

/// The recorder: where recordings go, and the writer's queue.
#[derive(Debug)]
pub(crate) struct Recorder {
    dir: PathBuf,
    tx: SyncSender<Msg>,
    next: AtomicU64,
    dropped: AtomicU64,
}

impl Recorder {
    /// A recorder writing into `dir` (made if it is not there, readable by its owner only),
    /// its writer thread started.
    pub fn start(dir: &Path) -> std::io::Result<Recorder> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || write_loop(rx))?;
        Ok(Recorder {
            dir: dir.to_owned(),
            tx,
            next: AtomicU64::new(1),
            dropped: AtomicU64::new(0),
        })
    }

    /// A fresh key (a call's, or a member's).
    pub fn key(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Begins call `call`'s file, named after `call_id` (what a file name may hold of it) and
    /// a random suffix, its JSON file saying `about`; the file's path.
    pub fn open(&self, call: u64, call_id: &str, about: serde_json::Value) -> PathBuf {
        let name: String = call_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(96)
            .collect();
        let mut r = [0u8; 4];
        getrandom::fill(&mut r).expect("the OS random source works");
        let suffix: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let stem = self.dir.join(format!("{name}-{suffix}"));
        let path = stem.with_extension("pcap");
        self.send(Msg::Open { call, stem, about });
        path
    }

    /// Member `key` of call `call`: its packets from `src` to `dst`.
    pub fn stream(&self, key: u64, call: u64, src: SocketAddr, dst: SocketAddr) {
        self.send(Msg::Stream {
            key,
            call,
            src,
            dst,
        });
    }

    /// Ends call `call`'s recording.
    pub fn close(&self, call: u64) {
        self.send(Msg::Close { call });
    }

    /// A recorded member's packet, from a worker: queued, or dropped and counted when the
    /// writer is behind.
    pub fn packet(&self, key: u64, at: Instant, packet: Vec<u8>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Packet { key, at, packet })
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Packets dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// A control message: these wait for room (they are few, and a lost one loses a file).
    fn send(&self, m: Msg) {
        let _ = self.tx.send(m);
    }
}

/// A call's open recording.
struct CallFile {
    pcap: PathBuf,
    writer: CaptureWriter<FileHandle>,
    /// The same file, to flush it now and then (the capture writer keeps its own handle).
    file: FileHandle,
    about: serde_json::Value,
    packets: u64,
}

/// A buffered file both the capture writer and the writer thread hold.
#[derive(Clone)]
struct FileHandle(std::rc::Rc<std::cell::RefCell<BufWriter<File>>>);

impl std::io::Write for FileHandle {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// The writer: its files, its members, and the clock to stamp packets with.
struct Writer {
    calls: HashMap<u64, CallFile>,
    streams: HashMap<u64, (u64, SocketAddr, SocketAddr)>,
    /// An instant and the wall-clock time it was.
    epoch: (Instant, SystemTime),
}

fn write_loop(rx: Receiver<Msg>) {
    let mut w = Writer {
        calls: HashMap::new(),
        streams: HashMap::new(),
        epoch: (Instant::now(), SystemTime::now()),
    };
    loop {
        match rx.recv_timeout(FLUSH_EVERY) {
            Ok(m) => w.take(m),
            Err(RecvTimeoutError::Timeout) => w.flush(),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for call in w.calls.keys().copied().collect::<Vec<_>>() {
        w.close(call);
    }
}

impl Writer {
    fn take(&mut self, m: Msg) {
        match m {
            Msg::Open { call, stem, about } => self.open(call, &stem, about),
            Msg::Stream {
                key,
                call,
                src,
                dst,
            } => {
                self.streams.insert(key, (call, src, dst));
            }
            Msg::Packet { key, at, packet } => self.write(key, at, &packet),
            Msg::Close { call } => self.close(call),
        }
    }

    fn open(&mut self, call: u64, stem: &Path, about: serde_json::Value) {
        if self.calls.contains_key(&call) {
            return;
        }
        let pcap = stem.with_extension("pcap");
        let format = CaptureFormat::new_pcap(LinkType::RAW, PcapPrecision::Nano, 65_535);
        let made = private_file(&pcap)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let handle =
                    FileHandle(std::rc::Rc::new(std::cell::RefCell::new(BufWriter::new(f))));
                CaptureWriter::new(handle.clone(), &format)
                    .map(|w| (w, handle))
                    .map_err(|e| e.to_string())
            });
        match made {
            Ok((writer, handle)) => {
                let file = CallFile {
                    pcap,
                    writer,
                    file: handle,
                    about,
                    packets: 0,
                };
                write_about(&file, None);
                self.calls.insert(call, file);
            }
            Err(e) => {
                tracing::warn!(file = %pcap.display(), error = %e, "a recording could not start")
            }
        }
    }

    fn write(&mut self, key: u64, at: Instant, packet: &[u8]) {
        let Some(&(call, src, dst)) = self.streams.get(&key) else {
            return;
        };
        let Some(file) = self.calls.get_mut(&call) else {
            return;
        };
        let when = self.epoch.1 + at.saturating_duration_since(self.epoch.0);
        let ns = when
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let frame = CapturedPacket::new(LinkType::RAW, ns, udp_frame(src, dst, packet));
        if let Err(e) = file.writer.write_packet(&frame) {
            tracing::warn!(file = %file.pcap.display(), error = %e, "a recording failed: it ends");
            self.calls.remove(&call);
            return;
        }
        file.packets += 1;
    }

    fn close(&mut self, call: u64) {
        self.streams.retain(|_, (c, ..)| *c != call);
        let Some(file) = self.calls.remove(&call) else {
            return;
        };
        write_about(&file, Some(SystemTime::now()));
        if let Err(e) = file.writer.finish() {
            tracing::warn!(file = %file.pcap.display(), error = %e, "a recording did not close cleanly");
        }
    }

    fn flush(&mut self) {
        use std::io::Write;
        for f in self.calls.values_mut() {
            let _ = f.file.flush();
        }
    }
}

/// A new file (truncated if it was there) its owner alone reads: a recording is the call's
/// media in clear.
fn private_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Writes a call's JSON file beside its pcap file: what it is about, the file, and (once it
/// ended) when it ended and how many packets it holds.
fn write_about(file: &CallFile, ended: Option<SystemTime>) {
    let mut about = file.about.clone();
    if let Some(o) = about.as_object_mut() {
        o.insert(
            "pcap".into(),
            file.pcap
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .into(),
        );
        if let Some(t) = ended {
            let secs = t
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            o.insert("ended".into(), secs.into());
            o.insert("packets".into(), file.packets.into());
        }
    }
    let path = file.pcap.with_extension("json");
    let written = private_file(&path).and_then(|mut f| {
        use std::io::Write;
        f.write_all(format!("{about:#}\n").as_bytes())
    });
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), error = %e, "a recording's JSON file could not be written");
    }
}
