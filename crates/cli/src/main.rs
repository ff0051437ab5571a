//! The `secrelay` command line: argument parsing and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod ca;
mod capture;
#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "lab")]
mod lab;
#[cfg(feature = "lab")]
mod lab_compare;
#[cfg(feature = "lab")]
mod lab_failover;
#[cfg(feature = "lab")]
mod lab_flood;
#[cfg(feature = "lab")]
mod lab_gateway;
#[cfg(feature = "lab")]
mod lab_handshake;
#[cfg(feature = "lab")]
mod lab_ng_compare;
#[cfg(feature = "lab")]
mod lab_overload;
#[cfg(feature = "lab")]
mod lab_soak;
#[cfg(feature = "lab")]
mod lab_turn;
#[cfg(feature = "lab")]
mod lab_xdp;
mod logs;
mod no_lab;
mod serve;
mod token;

/// What `secrelay lab` takes: the studies, or (built without them) anything, refused.
#[cfg(feature = "lab")]
type LabCli = lab::LabCommand;
#[cfg(not(feature = "lab"))]
type LabCli = no_lab::NoLab;

/// What `secrelay demo` takes: the demo's flags, or (built without it) anything, refused.
#[cfg(feature = "demo")]
type DemoCli = demo::DemoArgs;
#[cfg(not(feature = "demo"))]
type DemoCli = no_lab::NoDemo;

#[cfg(feature = "demo")]
fn run_demo(a: &DemoCli) -> anyhow::Result<()> {
    demo::run(a)
}

#[cfg(not(feature = "demo"))]
fn run_demo(a: &DemoCli) -> anyhow::Result<()> {
    no_lab::run_demo(a)
}

#[cfg(feature = "lab")]
fn run_lab(c: LabCli) -> anyhow::Result<()> {
    lab::run(c)
}

#[cfg(not(feature = "lab"))]
fn run_lab(c: LabCli) -> anyhow::Result<()> {
    no_lab::run(c)
}

/// `secrelay --version`: the version, the git commit it was built from and the cargo profile
/// (`build.rs`).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SECRELAY_COMMIT"),
    ", ",
    env!("SECRELAY_PROFILE"),
    " build)"
);

/// The build, as `/metrics` reports it (`secrelay_build_info`).
fn build_info() -> secrelay_gateway::server::BuildInfo {
    secrelay_gateway::server::BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        commit: env!("SECRELAY_COMMIT").into(),
        profile: env!("SECRELAY_PROFILE").into(),
    }
}

/// secrelay: a secure real-time media gateway and the lab that measures what its security costs.
#[derive(Parser, Debug)]
#[command(name = "secrelay", version = LONG_VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// SRTP tools: decrypt or encrypt captures, make keys, list profiles.
    #[command(subcommand)]
    Srtp(SrtpCommand),
    /// The gateway: WebRTC participants over WHIP, WHEP and room joins on one UDP port.
    Serve(serve::ServeArgs),
    /// A gateway in-process with simulated participants calling through it over real sockets.
    Demo(DemoCli),
    /// Private CA for lab set-ups, and certificate fingerprints for SDP.
    #[command(subcommand)]
    Ca(ca::CaCommand),
    /// Access tokens for the gateway's signaling, signed with one of its API keys.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// The studies, re-measured here beside the libraries people use: tables, JSON, HTML report.
    #[command(subcommand)]
    Lab(LabCli),
    /// Write the manual pages (roff): secrelay.1 on stdout, or with --dir one page per command.
    Manpage {
        /// Write secrelay.1 and secrelay-COMMAND.1 for every command into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The manual pages of the command line as built (`lab` only with the lab).
fn manpage(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| anyhow::anyhow!("--dir {}: {e}", d.display()))?;
            clap_mangen::generate_to(cmd, d)
                .map_err(|e| anyhow::anyhow!("--dir {}: {e}", d.display()))
        }
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            Ok(())
        }
    }
}

#[derive(Subcommand, Debug)]
enum SrtpCommand {
    /// Decrypt the SRTP/SRTCP packets of a pcap or pcapng capture.
    Decrypt(CaptureArgs),
    /// Encrypt the RTP/RTCP packets of a pcap or pcapng capture.
    Encrypt(CaptureArgs),
    /// Print a fresh random master key and salt in SDES inline form.
    Keygen {
        /// Profile, e.g. AES_CM_128_HMAC_SHA1_80.
        #[arg(long, default_value = "AES_CM_128_HMAC_SHA1_80")]
        profile: String,
    },
    /// List the supported profiles with their key, salt and tag lengths.
    Profiles,
}

/// Flags shared by `srtp decrypt` and `srtp encrypt`.
#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// SRTP profile as in SDP a=crypto, e.g. AES_CM_128_HMAC_SHA1_80 or AEAD_AES_128_GCM.
    #[arg(long)]
    pub profile: String,
    /// SDES key: base64 of master key‖salt, with or without "inline:" and a |lifetime.
    /// Decrypt takes it more than once (a call's two directions): each SSRC is bound to the
    /// first key its packets authenticate with.
    #[arg(long, required = true)]
    pub key: Vec<String>,
    /// Input capture (pcap or pcapng).
    #[arg(long = "in", value_name = "IN")]
    pub input: PathBuf,
    /// Output capture, written in the input's format.
    #[arg(long = "out", value_name = "OUT")]
    pub output: PathBuf,
    /// Rollover counter every stream starts with (for a capture taken mid-call).
    #[arg(long)]
    pub roc: Option<u32>,
    /// Only packets to or from this UDP port are processed; others pass through.
    #[arg(long)]
    pub port: Option<u16>,
    /// Print the counters as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn main() -> ExitCode {
    secrelay_gateway::server::BuildInfo::set(build_info());
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Srtp(SrtpCommand::Decrypt(a)) => capture::run(capture::Mode::Decrypt, &a),
        Command::Srtp(SrtpCommand::Encrypt(a)) => capture::run(capture::Mode::Encrypt, &a),
        Command::Srtp(SrtpCommand::Keygen { profile }) => capture::keygen(&profile),
        Command::Srtp(SrtpCommand::Profiles) => {
            capture::print_profiles();
            Ok(())
        }
        Command::Serve(a) => serve::run(&a),
        Command::Demo(a) => run_demo(&a),
        Command::Ca(c) => ca::run(&c),
        Command::Token(c) => token::run(c),
        Command::Lab(c) => run_lab(c),
        Command::Manpage { dir } => manpage(dir.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("secrelay: {e:#}");
            ExitCode::FAILURE
        }
    }
}
