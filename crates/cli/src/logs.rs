//! The log flags `serve` and `demo` share, and the subscriber they install: stderr, text or
//! JSON lines, filtered by `--log`, else `RUST_LOG`, else the command's default.

use anyhow::{anyhow, Result};
use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event (ANSI colours on a terminal only).
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message and the
    /// event's own fields), for a log shipper.
    Json,
}

/// `--log` and `--log-format`.
#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log filter in tracing's syntax (`info`, `warn,secrelay_core=debug`). Given, it wins
    /// over RUST_LOG; without it RUST_LOG is used when set, else the command's default
    /// (serve: info, demo: warn).
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
    /// Log line format: text, or json (one object per line).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// Libraries whose logs a peer controls, off unless a filter names them: webrtc-sdp logs every
/// SDP line it skips (a browser's `a=rtcp-xr`, on every join) whole, at WARN
/// (`secrelay_wire::sdp` logs the attribute's name at DEBUG instead); sctp-proto logs a
/// participant's bad SCTP packets at WARN and ERROR, as often as it sends them
/// (`secrelay_datachannel` counts them by reason instead).
const QUIET_TARGETS: [(&str, &str); 2] = [
    ("webrtc_sdp", "webrtc_sdp=off"),
    ("sctp_proto", "sctp_proto=off"),
];

/// The filter text in force and where it came from (`--log`, `RUST_LOG`, `default`).
pub fn filter_source(
    flag: Option<&str>,
    env: Option<&str>,
    default: &str,
) -> (String, &'static str) {
    match (flag, env.filter(|e| !e.trim().is_empty())) {
        (Some(f), _) => (f.to_owned(), "--log"),
        (None, Some(e)) => (e.to_owned(), "RUST_LOG"),
        (None, None) => (default.to_owned(), "default"),
    }
}

/// Builds the filter: the text given, plus [`QUIET_TARGETS`] unless it names them.
pub fn filter(text: &str, source: &str) -> Result<EnvFilter> {
    let mut f = EnvFilter::builder()
        .parse(text)
        .map_err(|e| anyhow!("{source} {text:?}: {e}"))?;
    for (target, directive) in QUIET_TARGETS {
        if !text.contains(target) {
            f = f.add_directive(directive.parse().expect("a valid directive"));
        }
    }
    Ok(f)
}

impl LogArgs {
    /// Installs the subscriber (stderr); `default` is the command's filter.
    pub fn init(&self, default: &str) -> Result<()> {
        let env = std::env::var("RUST_LOG").ok();
        let (text, source) = filter_source(self.log.as_deref(), env.as_deref(), default);
        let filter = filter(&text, source)?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        // A second init (a test that runs two commands in one process) keeps the first.
        let _ = match self.log_format {
            LogFormat::Text => builder
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .try_init(),
            LogFormat::Json => builder
                .json()
                .with_current_span(false)
                .with_span_list(false)
                .try_init(),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_rust_log_which_wins_over_the_default() {
        assert_eq!(
            filter_source(Some("debug"), Some("trace"), "info"),
            ("debug".into(), "--log")
        );
        assert_eq!(
            filter_source(None, Some("trace"), "info"),
            ("trace".into(), "RUST_LOG")
        );
        assert_eq!(
            filter_source(None, Some("  "), "info"),
            ("info".into(), "default")
        );
        assert_eq!(
            filter_source(None, None, "warn"),
            ("warn".into(), "default")
        );
    }

    #[test]
    fn a_bad_filter_names_where_it_came_from() {
        let e = filter("secrelay=notalevel", "RUST_LOG")
            .unwrap_err()
            .to_string();
        assert!(e.contains("RUST_LOG") && e.contains("notalevel"), "{e}");
        // webrtc-sdp and sctp-proto quiet unless named.
        let quiet = filter("info", "--log").unwrap().to_string();
        assert!(quiet.contains("webrtc_sdp=off") && quiet.contains("sctp_proto=off"));
        assert!(!filter("sctp_proto=debug", "--log")
            .unwrap()
            .to_string()
            .contains("sctp_proto=off"));
        assert!(!filter("webrtc_sdp=warn", "--log")
            .unwrap()
            .to_string()
            .contains("webrtc_sdp=off"));
    }
}
