//! `secrelay lab …`: argument parsing for the lab; the studies live in `secrelay-lab`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Flags every study takes.
#[derive(Args, Debug, Clone)]
pub struct StudyArgs {
    /// Fewer, shorter runs: first looks (figures are noisier).
    #[arg(long)]
    pub quick: bool,
    /// Every measurement as short as it can be (1 ms of warm-up, 3 runs of about 1 ms;
    /// instruction counts over one operation), over --quick's sweeps: a check that the study
    /// and its report are made end to end, as the tests run it. The figures are not fit to
    /// read, and the report says so.
    #[arg(long)]
    pub smoke: bool,
    /// Write the results, with the method, as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write report.html, PNG plots and results.json into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

/// `lab gpu`'s flags: the study's, and the GPU engine's settings where they should differ
/// from the lab's defaults (a host thread per core, 4 lanes of 1,024 packets, blocks of 256,
/// the compiler's register count, every batch on the device), to try a setting on a GPU
/// machine without a rebuild.
#[derive(Args, Debug, Clone)]
pub struct GpuArgs {
    #[command(flatten)]
    pub study: StudyArgs,
    /// Host threads a batch is split over (default: one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub host_threads: Option<u32>,
    /// Lanes (CUDA streams, each with its own staging memory) per host thread (default 4);
    /// the callers' table gives each caller this many lanes too.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub lanes: Option<u32>,
    /// Packets per lane launch (default 1,024); the callers' table splits each caller's batch
    /// over its lanes instead, and the kernels-alone table keeps its 16,384.
    #[arg(long, value_name = "PACKETS", value_parser = clap::value_parser!(u32).range(1..=32_768))]
    pub chunk: Option<u32>,
    /// Threads per block of the packet kernel, a multiple of 32 (default 256).
    #[arg(long, value_name = "THREADS", value_parser = block_threads)]
    pub block: Option<u32>,
    /// Cap on the packet kernel's registers per thread (default: the compiler's choice).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(16..=255))]
    pub max_registers: Option<u32>,
    /// In the calls curve, batches of fewer packets run on the CPU instead (default 0: every
    /// batch on the device); the throughput tables keep every packet on the device.
    #[arg(long, value_name = "PACKETS")]
    pub cpu_below: Option<u32>,
}

impl GpuArgs {
    fn settings(&self) -> secrelay_lab::GpuSettings {
        let size = |n: Option<u32>| n.map(|n| n as usize);
        secrelay_lab::GpuSettings {
            host_threads: size(self.host_threads),
            lanes: size(self.lanes),
            chunk: size(self.chunk),
            block: self.block,
            max_registers: self.max_registers,
            cpu_below: size(self.cpu_below),
        }
    }
}

/// `--block`: 32 to 1,024 threads, a multiple of 32 (a warp's width).
fn block_threads(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if (32..=1024).contains(&n) && n.is_multiple_of(32) {
        Ok(n)
    } else {
        Err(format!("{n} is not a multiple of 32 from 32 to 1024"))
    }
}

/// The lab's studies.
// Parsed once per process: the handshake variant's size (its many flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Every study, then DIR/report.html (DIR defaults to ./lab-report).
    All(StudyArgs),
    /// SRTP protect/unprotect per packet: every profile, audio/Opus/video sizes, secrelay beside libsrtp and others.
    Srtp(StudyArgs),
    /// One RSA/ECDSA key generation or signature, as SRTP audio/video packets and seconds of media.
    Amortization(StudyArgs),
    /// One flipped bit per cipher and mode on raw, G.711 and Opus voice; SRTP rejects the packet (002 b).
    Biterror(StudyArgs),
    /// DTLS-SRTP handshakes: a load generator against a server (--target), or both sides in
    /// memory beside OpenSSL and pion/dtls (--in-memory); with --tls, TLS over TCP: the load
    /// generator (--target), or the study of secrelay's HTTPS server beside nginx and
    /// openssl s_server.
    Handshake(crate::lab_handshake::HandshakeArgs),
    /// A DTLS-SRTP server on one UDP socket for many clients at once, with a keylog.
    HandshakeServer(crate::lab_handshake::HandshakeServerArgs),
    /// Concurrent G.711 calls: per-packet delay added by SRTP (per engine) and by the gateway (003).
    Calls(StudyArgs),
    /// The GPU engine alone: `lab srtp`'s GPU rows and `lab calls`' SRTP-only curves of the GPU
    /// and threaded engines, without the rest of those studies (for a session on a GPU machine).
    Gpu(GpuArgs),
    /// Codecs per 20 ms frame (G.711, G.722, AMR, Opus, each beside a peer), transcoding and N−1 mixing per leg, beside SRTP (002 c).
    Codec(StudyArgs),
    /// Simulated WebRTC participants against a running gateway (secrelay serve): loss, relay
    /// latency, and the gateway's CPU per packet and memory per participant.
    GatewayLoad(crate::lab_gateway::GatewayLoadArgs),
    /// More calls offered than a running gateway carries: what admission control sheds (503
    /// with Retry-After, deferred handshakes) and whether established calls keep their quality.
    Overload(crate::lab_overload::OverloadArgs),
    /// Hostile traffic at a gateway (started here, or --target) while established rooms relay
    /// and new participants join, without and with the flood: DTLS ClientHello and STUN
    /// floods (`handshake`), forged, replayed and garbage SRTP (`srtp`).
    Flood(crate::lab_flood::FloodArgs),
    /// secrelay's gateway and rtpengine relaying SRTP→SRTP with re-encryption at the same
    /// offered packet rates: CPU per relayed packet, loss.
    RelayCompare(crate::lab_compare::RelayCompareArgs),
    /// rtpengine and secrelay answering the same ng requests: rtpengine's own test scripts'
    /// offers and answers replayed against both and the SDPs compared (the same media
    /// sections, lines, text), or offer/answer/delete at rising rates (--load).
    NgCompare(crate::lab_ng_compare::NgCompareArgs),
    /// secrelay's TURN server beside coturn's in the same run, one relay thread each:
    /// allocations and relayed packets per CPU-second of each server's process.
    Turn(crate::lab_turn::TurnArgs),
    /// What a spoofed flood costs the receiving machine with the XDP filter in front of the
    /// media ports (native, generic) and without it, runs alternated, over a veth pair into a
    /// network namespace of its own (needs root).
    Xdp(crate::lab_xdp::XdpArgs),
    /// Calls of every kind of leg (WebRTC, WHIP/WHEP, SDES and plain phones, ng calls)
    /// joining and leaving a gateway for a while; its memory, descriptors, participants, rooms
    /// and ports sampled every second; fails unless nothing remains after every call left.
    Soak(crate::lab_soak::SoakArgs),
    /// A gateway's telephony calls through its death: node a (started here, with a Redis of
    /// the study's own) killed with SIGKILL, its standby b taking the calls over; the silence
    /// per call from the kill, the packets lost, and the directory's writes per call.
    Failover(crate::lab_failover::FailoverArgs),
    /// The HTML report (report.html, PNG plots, results.json) in --out DIR from results that
    /// `--json` wrote, on this machine or another (a GPU machine's `lab gpu`).
    Report {
        /// The results files (`--json` output or an earlier report's results.json), in order.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Where report.html, its plots and results.json go.
        #[arg(long, value_name = "DIR", default_value = "lab-report")]
        out: PathBuf,
    },
    /// Asymmetric crypto per operation: RSA, ECDSA, EdDSA, ECDH(E) key generation, sign, verify, exchange, in aws-lc-rs, OpenSSL and RustCrypto.
    Crypto(StudyArgs),
    /// secrelay's TURN server alone, for `lab turn` (internal).
    #[command(name = "__turn-server", hide = true)]
    TurnServer(crate::lab_turn::TurnServerArgs),
    /// Child process for heap per operation under DHAT (internal).
    #[command(name = "__mem", hide = true)]
    Mem {
        /// Study whose operation runs.
        study: String,
        /// Operation id.
        id: String,
    },
    /// Child process for instruction counts under callgrind (internal).
    #[command(name = "__count", hide = true)]
    Count {
        /// Study whose counted operations run.
        study: String,
        /// Quick mode.
        #[arg(long)]
        quick: bool,
        /// Smoke mode: each region runs its operation once.
        #[arg(long)]
        smoke: bool,
    },
}

/// Runs a lab command.
pub fn run(cmd: LabCommand) -> anyhow::Result<()> {
    let mut engine = secrelay_dtls::EngineChoice::Auto;
    let mut gpu = secrelay_lab::GpuSettings::default();
    let (names, args) = match cmd {
        LabCommand::Count {
            study,
            quick,
            smoke,
        } => return secrelay_lab::count_child(&study, quick, smoke),
        LabCommand::Mem { study, id } => return secrelay_lab::mem_child(&study, &id),
        LabCommand::All(mut a) => {
            a.out.get_or_insert_with(|| PathBuf::from("lab-report"));
            (vec!["all".to_string()], a)
        }
        LabCommand::Srtp(a) => (vec!["srtp".to_string()], a),
        LabCommand::Amortization(a) => (vec!["amortization".to_string()], a),
        LabCommand::Biterror(a) => (vec!["biterror".to_string()], a),
        LabCommand::HandshakeServer(a) => return crate::lab_handshake::server(&a),
        LabCommand::Handshake(a) => match crate::lab_handshake::load(&a)? {
            crate::lab_handshake::HandshakeRun::InMemory(study_args, e) => {
                engine = e;
                (vec!["handshake".to_string()], study_args)
            }
            crate::lab_handshake::HandshakeRun::TlsStudy(study_args) => {
                (vec!["tls".to_string()], study_args)
            }
            crate::lab_handshake::HandshakeRun::Done => return Ok(()),
        },
        LabCommand::Crypto(a) => (vec!["crypto".to_string()], a),
        LabCommand::Calls(a) => (vec!["calls".to_string()], a),
        LabCommand::Gpu(a) => {
            gpu = a.settings();
            (vec!["gpu".to_string()], a.study)
        }
        LabCommand::Codec(a) => (vec!["codec".to_string()], a),
        LabCommand::GatewayLoad(a) => return crate::lab_gateway::run(&a),
        LabCommand::Overload(a) => return crate::lab_overload::run(&a),
        LabCommand::RelayCompare(a) => return crate::lab_compare::run(&a),
        LabCommand::NgCompare(a) => return crate::lab_ng_compare::run(&a),
        LabCommand::Soak(a) => return crate::lab_soak::run(&a),
        LabCommand::Failover(a) => return crate::lab_failover::run(&a),
        LabCommand::Flood(a) => return crate::lab_flood::run(&a),
        LabCommand::Turn(a) => return crate::lab_turn::run(&a),
        LabCommand::Xdp(a) => return crate::lab_xdp::run(&a),
        LabCommand::Report { files, out } => {
            secrelay_lab::report_from(&files, &out)?;
            eprintln!("report: {}", out.join("report.html").display());
            return Ok(());
        }
        LabCommand::TurnServer(a) => return crate::lab_turn::server(&a),
    };
    let opts = secrelay_lab::Options {
        quick: args.quick || args.smoke,
        smoke: args.smoke,
        json: args.json,
        out: args.out,
        self_exe: std::env::current_exe().ok(),
        no_progress: args.no_progress,
        engine,
        gpu,
    };
    secrelay_lab::run(&names, &opts)?;
    Ok(())
}
