//! `secrelay serve`'s start-up banner: what a person needs to use the gateway it just started
//! (the room page, WHIP and WHEP URLs, the CA to trust and how, the media port, the ng socket),
//! a few lines on stderr; and the reader that the lab and the tests use to find the addresses
//! in it, next to the writer so that the two agree.
//!
//! ```text
//! secrelay serve: ready (secrelay 0.1.0, commit 7092fa7c1d2e, release build)
//!   page     https://127.0.0.1:8443/room/NAME  (any room name; a form at https://127.0.0.1:8443/)
//!   WHIP     https://127.0.0.1:8443/whip/NAME  (publish: OBS or any WHIP client)
//!   WHEP     https://127.0.0.1:8443/whep/NAME  (play)
//!   HTTPS    127.0.0.1:8443  (ecdsa-p256 certificate from a throw-away private CA)
//!   names    localhost, 127.0.0.1, ::1
//!   CA       /tmp/secrelay-https-ca-Ab12/ca.pem
//!            a throw-away CA, removed at exit: clients trust this file, e.g.
//!            curl --cacert /tmp/secrelay-https-ca-Ab12/ca.pem https://127.0.0.1:8443/healthz
//!            (for browsers and a CA that lasts: docs/operations.md, "TLS and the private CA")
//!   media    UDP 0.0.0.0:40000, announced to peers as 192.0.2.10:40000; 2 workers
//!   ng       UDP 127.0.0.1:2223  (rtpengine's ng protocol, for SIP proxies)
//!   admin    key in /tmp/secrelay-admin-Cd34/admin.key  (/api and /metrics: Authorization: Bearer <key>)
//!   access   rooms open to anyone who reaches this address (no api_keys or token: docs/security.md)
//!   metrics  https://127.0.0.1:8443/metrics  (with the admin key)
//!   stop     Ctrl-C or SIGTERM: every session gets close_notify; SIGHUP reloads the certificate and credentials
//! ```
//!
//! A line that starts with two spaces and a label carries one fact; the `stop` line ends the
//! banner.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The first words of the banner's first line.
pub const BANNER_START: &str = "secrelay serve: ready";

/// Where clients' trust in the HTTPS certificate comes from, when the gateway knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The throw-away private CA made at start: its certificate, removed at exit.
    Throwaway(PathBuf),
    /// A private CA directory made by `secrelay ca init`: its `ca.pem`.
    CaDir(PathBuf),
}

impl Trust {
    /// The CA certificate clients trust.
    pub fn path(&self) -> &PathBuf {
        match self {
            Trust::Throwaway(p) | Trust::CaDir(p) => p,
        }
    }
}

/// What the banner says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Banner {
    /// The build (`secrelay 0.1.0, commit …, release build`).
    pub build: String,
    /// The HTTPS listener and what it presents.
    pub https: Option<(SocketAddr, String)>,
    /// The names an issued HTTPS certificate is valid for.
    pub names: Vec<String>,
    /// The CA clients trust, when the gateway issued its HTTPS certificate.
    pub trust: Option<Trust>,
    /// The plain HTTP listener, when asked for.
    pub http: Option<SocketAddr>,
    /// The media port.
    pub udp: SocketAddr,
    /// The address announced to peers (the host candidate).
    pub candidate: SocketAddr,
    /// Packet workers.
    pub workers: usize,
    /// The ng control socket.
    pub ng: Option<SocketAddr>,
    /// The metrics listener (`metrics`), when one is configured.
    pub metrics: Option<SocketAddr>,
    /// The file the admin key made at start was written to (none when it was configured).
    pub admin_key_file: Option<PathBuf>,
    /// Rooms without a token of their own are open to anyone (no `api_keys`, no `token`).
    pub rooms_open: bool,
}

/// The URL base clients use for a listener: its address, or when it listens on every address
/// (`0.0.0.0`, `::`), the announced one.
fn base(scheme: &str, listen: SocketAddr, candidate: SocketAddr) -> String {
    let ip = if listen.ip().is_unspecified() {
        candidate.ip()
    } else {
        listen.ip()
    };
    format!("{scheme}://{}", SocketAddr::new(ip, listen.port()))
}

/// Column of the values.
const LABEL: usize = 9;

impl Banner {
    /// The signaling's base URL (HTTPS when served, else plain HTTP).
    pub fn url(&self) -> String {
        match (&self.https, self.http) {
            (Some((a, _)), _) => base("https", *a, self.candidate),
            (None, Some(a)) => base("http", a, self.candidate),
            (None, None) => String::new(),
        }
    }
}

fn line(f: &mut fmt::Formatter<'_>, label: &str, value: &str) -> fmt::Result {
    writeln!(f, "  {label:<LABEL$}{value}")
}

fn more(f: &mut fmt::Formatter<'_>, value: &str) -> fmt::Result {
    writeln!(f, "  {:<LABEL$}{value}", "")
}

/// The certificate's names, as many to a line as fit.
fn names(f: &mut fmt::Formatter<'_>, names: &[String]) -> fmt::Result {
    let mut rows: Vec<String> = Vec::new();
    for n in names {
        match rows.last_mut() {
            Some(r) if r.len() + n.len() + 2 <= 80 => {
                r.push_str(", ");
                r.push_str(n);
            }
            _ => rows.push(n.clone()),
        }
    }
    for (i, r) in rows.iter().enumerate() {
        let r = if i + 1 < rows.len() {
            format!("{r},")
        } else {
            r.clone()
        };
        if i == 0 {
            line(f, "names", &r)?;
        } else {
            more(f, &r)?;
        }
    }
    Ok(())
}

impl fmt::Display for Banner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{BANNER_START} ({})", self.build)?;
        let url = self.url();
        if !url.is_empty() {
            line(
                f,
                "page",
                &format!("{url}/room/NAME  (any room name; a form at {url}/)"),
            )?;
            line(
                f,
                "WHIP",
                &format!("{url}/whip/NAME  (publish: OBS or any WHIP client)"),
            )?;
            line(f, "WHEP", &format!("{url}/whep/NAME  (play)"))?;
        }
        if let Some((a, cert)) = &self.https {
            line(f, "HTTPS", &format!("{a}  ({cert})"))?;
        }
        names(f, &self.names)?;
        match &self.trust {
            Some(Trust::Throwaway(p)) => {
                line(f, "CA", &p.display().to_string())?;
                more(
                    f,
                    "a throw-away CA, removed at exit: clients trust this file, e.g.",
                )?;
                more(f, &format!("curl --cacert {} {url}/healthz", p.display()))?;
                more(
                    f,
                    "(for browsers and a CA that lasts: docs/operations.md, \"TLS and the private CA\")",
                )?;
            }
            Some(Trust::CaDir(p)) => {
                line(f, "CA", &p.display().to_string())?;
                more(
                    f,
                    &format!(
                        "the private CA the certificate is issued by: curl --cacert {} {url}/healthz",
                        p.display()
                    ),
                )?;
            }
            None => {}
        }
        if let Some(a) = self.http {
            line(f, "HTTP", &format!("{a}  (plain HTTP)"))?;
        }
        line(
            f,
            "media",
            &format!(
                "UDP {}, announced to peers as {}; {} worker{}",
                self.udp,
                self.candidate,
                self.workers,
                if self.workers == 1 { "" } else { "s" }
            ),
        )?;
        if let Some(a) = self.ng {
            line(
                f,
                "ng",
                &format!("UDP {a}  (rtpengine's ng protocol, for SIP proxies)"),
            )?;
        }
        if let Some(p) = &self.admin_key_file {
            line(
                f,
                "admin",
                &format!(
                    "key in {}  (/api and /metrics: Authorization: Bearer <key>)",
                    p.display()
                ),
            )?;
        }
        line(
            f,
            "access",
            if self.rooms_open {
                "rooms open to anyone who reaches this address (no api_keys or token: docs/security.md)"
            } else {
                "rooms need a token (api_keys or token; docs/security.md)"
            },
        )?;
        match self.metrics {
            Some(a) => line(
                f,
                "metrics",
                &format!("http://{a}/metrics  (no credential)"),
            )?,
            None if !url.is_empty() => line(
                f,
                "metrics",
                &format!("{url}/metrics  (with the admin key)"),
            )?,
            None => {}
        }
        line(
            f,
            "stop",
            "Ctrl-C or SIGTERM: every session gets close_notify; SIGHUP reloads the certificate and credentials",
        )
    }
}

/// The addresses a banner gives, read line by line from the gateway's stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BannerReader {
    /// The HTTPS listener.
    pub https: Option<SocketAddr>,
    /// The CA certificate clients trust.
    pub ca: Option<PathBuf>,
    /// The plain HTTP listener.
    pub http: Option<SocketAddr>,
    /// The media port.
    pub udp: Option<SocketAddr>,
    /// The ng control socket.
    pub ng: Option<SocketAddr>,
    /// The file holding the admin key made at start.
    pub admin_key_file: Option<PathBuf>,
    started: bool,
    done: bool,
}

impl BannerReader {
    /// Takes one line of the gateway's stderr (log lines around the banner are skipped); true
    /// once the banner is whole.
    pub fn feed(&mut self, text: &str) -> bool {
        if text.starts_with(BANNER_START) {
            self.started = true;
            return self.done;
        }
        if !self.started || self.done {
            return self.done;
        }
        let Some(rest) = text.strip_prefix("  ") else {
            return false;
        };
        let Some((label, value)) = rest.split_once(' ') else {
            return false;
        };
        let value = value.trim_start();
        let first = || value.split_whitespace().next().unwrap_or_default();
        match label {
            "HTTPS" => self.https = first().parse().ok(),
            "HTTP" => self.http = first().parse().ok(),
            "CA" => self.ca = Some(PathBuf::from(value.trim_end())),
            "media" => {
                self.udp = value
                    .strip_prefix("UDP ")
                    .and_then(|v| v.split([',', ' ']).next())
                    .and_then(|a| a.parse().ok())
            }
            "ng" => {
                self.ng = value
                    .strip_prefix("UDP ")
                    .and_then(|v| first_of(v).parse().ok())
            }
            "admin" => {
                self.admin_key_file = value
                    .strip_prefix("key in ")
                    .and_then(|v| v.split("  (").next())
                    .map(PathBuf::from)
            }
            "stop" => self.done = true,
            _ => {}
        }
        self.done
    }

    /// What one line of a banner says, read on its own (a caller that looks for one fact line
    /// by line).
    pub fn of_line(line: &str) -> BannerReader {
        let mut b = BannerReader {
            started: true,
            ..BannerReader::default()
        };
        b.feed(line);
        b
    }

    /// Whether the banner's last line has been read.
    pub fn done(&self) -> bool {
        self.done
    }

    /// The signaling's base URL as the listener's own address (`https://…` when HTTPS is
    /// served, else `http://…`).
    pub fn url(&self) -> Option<String> {
        self.https
            .map(|a| format!("https://{a}"))
            .or_else(|| self.http.map(|a| format!("http://{a}")))
    }

    /// Reads lines until the banner is whole; every line read (the banner's and any log line
    /// before it) is passed to `seen`. None when the lines end first.
    pub fn read<I, E>(lines: &mut I, mut seen: impl FnMut(&str)) -> Option<BannerReader>
    where
        I: Iterator<Item = Result<String, E>>,
    {
        let mut b = BannerReader::default();
        for l in lines {
            let l = l.ok()?;
            seen(&l);
            if b.feed(&l) {
                return Some(b);
            }
        }
        None
    }
}

/// A gateway's log as a child process printed it: every line of its stderr, kept.
pub type ChildLog = std::sync::Arc<std::sync::Mutex<String>>;

/// The banner of a `secrelay serve` child whose stderr is piped (`None` if it printed none, or
/// its stderr was not piped), and its log: what it printed until the banner was whole and,
/// from a thread that keeps reading (so that the pipe never fills), everything after.
pub fn read_child_banner(child: &mut std::process::Child) -> (Option<BannerReader>, ChildLog) {
    use std::io::BufRead;
    let log = ChildLog::default();
    let Some(stderr) = child.stderr.take() else {
        return (None, log);
    };
    let mut lines = std::io::BufReader::new(stderr).lines();
    let push = |log: &ChildLog, l: &str| {
        let mut text = log.lock().unwrap_or_else(|e| e.into_inner());
        text.push_str(l);
        text.push('\n');
    };
    let banner = BannerReader::read(&mut lines, |l| push(&log, l));
    let keep = log.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            push(&keep, &l);
        }
    });
    (banner, log)
}

fn first_of(v: &str) -> &str {
    v.split_whitespace().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banner() -> Banner {
        Banner {
            build: "secrelay 0.1.0, commit abc, debug build".into(),
            https: Some((
                "0.0.0.0:8443".parse().unwrap(),
                "ecdsa-p256 certificate from a throw-away private CA".into(),
            )),
            names: (0..12).map(|i| format!("192.0.2.{i}")).collect(),
            trust: Some(Trust::Throwaway("/tmp/x y/ca.pem".into())),
            http: Some("127.0.0.1:8080".parse().unwrap()),
            udp: "0.0.0.0:40000".parse().unwrap(),
            candidate: "192.0.2.10:40000".parse().unwrap(),
            workers: 2,
            ng: Some("127.0.0.1:2223".parse().unwrap()),
            metrics: None,
            admin_key_file: Some("/tmp/a/admin.key".into()),
            rooms_open: true,
        }
    }

    #[test]
    fn what_the_banner_writes_its_reader_reads() {
        let text = format!("2026-11-28 INFO media port open\n{}", banner());
        let mut r = BannerReader::default();
        let done: Vec<bool> = text.lines().map(|l| r.feed(l)).collect();
        assert_eq!(done.iter().filter(|d| **d).count(), 1, "{text}");
        assert!(*done.last().unwrap());
        assert_eq!(r.https, Some("0.0.0.0:8443".parse().unwrap()));
        assert_eq!(r.http, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(r.ca, Some(PathBuf::from("/tmp/x y/ca.pem")));
        assert_eq!(r.udp, Some("0.0.0.0:40000".parse().unwrap()));
        assert_eq!(r.ng, Some("127.0.0.1:2223".parse().unwrap()));
        assert_eq!(r.admin_key_file, Some(PathBuf::from("/tmp/a/admin.key")));
        let http = text.lines().find(|l| l.starts_with("  HTTP ")).unwrap();
        assert_eq!(
            BannerReader::of_line(http).url().as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(BannerReader::of_line("2026 INFO HTTP on").url(), None);
    }

    #[test]
    fn urls_name_the_announced_address_when_listening_on_every_one() {
        let b = banner();
        let text = b.to_string();
        assert!(text.contains("https://192.0.2.10:8443/room/NAME"), "{text}");
        assert!(text.contains("https://192.0.2.10:8443/whip/NAME"), "{text}");
        assert!(text.contains("curl --cacert /tmp/x y/ca.pem https://192.0.2.10:8443/healthz"));
        assert!(text.contains("192.0.2.0, 192.0.2.1"), "{text}");
        assert!(text.contains("192.0.2.11\n"), "{text}");
        // A few short lines, not one long one.
        assert!(text.lines().count() >= 8, "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 110), "{text}");
        let v6 = Banner {
            https: Some(("[::]:8443".parse().unwrap(), "x".into())),
            candidate: "[2001:db8::1]:40000".parse().unwrap(),
            ..banner()
        };
        assert_eq!(v6.url(), "https://[2001:db8::1]:8443");
    }
}
