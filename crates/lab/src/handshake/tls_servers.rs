//! The servers of the TLS study, each a process of its own pinned to one core (`taskset -c`),
//! on loopback, with the same certificate files: secrelay's HTTPS signaling server
//! (`secrelay serve --https`, one media worker), nginx (Debian's package, started with a
//! generated configuration: one worker, TLS 1.3 and 1.2, a shared session cache and tickets),
//! OpenSSL's `s_server -www` (one connection at a time, its own session cache and tickets), and
//! secrelay's DTLS-SRTP server (`secrelay lab handshake-server`) for the DTLS side.
//!
//! Each server's CPU time (user + system, every process and thread of it) and resident
//! memory come from `/proc`; each server's own count of handshakes comes from where it keeps
//! one: secrelay's `/metrics`, `s_server -www`'s status page (`SSL_CTX_sess_*`), nginx's
//! `stub_status` (connections accepted: nginx counts no TLS handshakes of its own), the DTLS
//! server's counters on stderr.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rustls::pki_types::{CertificateDer, ServerName};

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `secrelay serve --https`.
    Secrelay,
    /// nginx.
    Nginx,
    /// `openssl s_server -www`.
    SServer,
    /// `secrelay lab handshake-server` (DTLS-SRTP over UDP).
    SecrelayDtls,
}

impl ServerKind {
    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Secrelay => "secrelay",
            ServerKind::Nginx => "nginx",
            ServerKind::SServer => "openssl s_server",
            ServerKind::SecrelayDtls => "secrelay DTLS",
        }
    }
}

/// Where nginx is: `$SECRELAY_NGINX`, else `/usr/sbin/nginx` (Debian's package).
pub fn nginx_binary() -> Option<PathBuf> {
    let p = std::env::var_os("SECRELAY_NGINX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"));
    p.exists().then_some(p)
}

/// Why a server cannot run here, if it cannot.
pub fn unavailable(kind: ServerKind) -> Option<String> {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    match kind {
        ServerKind::Nginx => match nginx_binary() {
            Some(_) => None,
            None => Some("not offered: nginx is not installed (Debian package nginx; scripts/setup installs it, or set SECRELAY_NGINX)".into()),
        },
        ServerKind::SServer => (!ok("openssl", "version"))
            .then(|| "not offered: the openssl command is not installed (Debian package openssl)".into()),
        _ => None,
    }
}

/// The certificate files every server is given.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The leaf (PEM; the CA is the client's to have).
    pub cert: PathBuf,
    /// Its key (PKCS#8 PEM).
    pub key: PathBuf,
    /// The CA certificate (DER), for the clients that verify.
    pub ca_der: Vec<u8>,
    /// `ecdsa-p256`, `rsa-2048`, …
    pub key_type: String,
}

/// A running server, stopped on drop.
pub struct ServerProc {
    /// Which.
    pub kind: ServerKind,
    /// Where it listens.
    pub addr: SocketAddr,
    child: Child,
    log: Arc<Mutex<String>>,
    ca_der: Vec<u8>,
    /// secrelay's admin key (its `/metrics` needs it).
    admin: Option<secrelay_testkit::AdminKeyFile>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes of the tree rooted at `pid` (it and its descendants).
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for e in entries.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            // pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|x| x.parse().ok()) {
                    parent_of.push((p, ppid));
                }
            }
        }
    }
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        for (p, pp) in &parent_of {
            if *pp == parent && !all.contains(p) {
                all.push(*p);
            }
        }
        i += 1;
    }
    all
}

/// CPU seconds (user + system) of a process, all its threads.
fn cpu_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state(0) ppid(1) … utime(11) stime(12), in clock ticks.
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Resident memory of a process, KiB.
fn rss_of(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0.0)
}

/// A port free on loopback now (for servers that cannot be told to pick one).
fn free_tcp_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn pinned(core: Option<usize>, program: &Path) -> Command {
    match core {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string()]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Keeps reading a child's output into `log` (so that the pipe never fills); calls `first`
/// with each line until it returns something.
fn follow<R: std::io::Read + Send + 'static, T: Send + 'static>(
    r: R,
    log: Arc<Mutex<String>>,
    first: impl Fn(&str) -> Option<T> + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if !sent {
                if let Some(v) = first(&line) {
                    let _ = tx.send(v);
                    sent = true;
                }
            }
            let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
            if l.len() < 1 << 20 {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
    rx
}

/// Waits until a TCP connection to `addr` is accepted (the server is up).
fn wait_tcp(addr: SocketAddr, child: &mut Child, log: &Arc<Mutex<String>>) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            bail!(
                "exited ({st}) before listening on {addr}:\n{}",
                log.lock().unwrap_or_else(|e| e.into_inner())
            );
        }
        if Instant::now() > end {
            bail!("not listening on {addr} after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl ServerProc {
    /// `secrelay serve --https` (this executable), one media worker, with `files`.
    pub fn secrelay(
        exe: &Path,
        files: &CertFiles,
        core: Option<usize>,
    ) -> anyhow::Result<ServerProc> {
        Self::secrelay_under(exe, files, core, None)
    }

    /// The same, run under `under` (a valgrind command line) when given.
    pub fn secrelay_under(
        exe: &Path,
        files: &CertFiles,
        core: Option<usize>,
        under: Option<&[String]>,
    ) -> anyhow::Result<ServerProc> {
        let mut cmd = match under {
            Some(valgrind) => {
                let mut c = pinned(core, Path::new(&valgrind[0]));
                c.args(&valgrind[1..]).arg(exe);
                c
            }
            None => pinned(core, exe),
        };
        let admin = secrelay_testkit::AdminKeyFile::new()?;
        cmd.args([
            "serve",
            "--https",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--log",
            "warn",
        ])
        .arg("--admin-key-file")
        .arg(admin.path())
        .arg("--tls-cert")
        .arg(&files.cert)
        .arg("--tls-key")
        .arg(&files.key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting secrelay serve")?;
        let log = Arc::new(Mutex::new(String::new()));
        let rx = follow(
            child.stderr.take().context("stderr piped")?,
            log.clone(),
            |line| secrelay_gateway::server::BannerReader::of_line(line).https,
        );
        let addr = rx.recv_timeout(Duration::from_secs(120)).map_err(|_| {
            anyhow::anyhow!(
                "secrelay serve printed no HTTPS address:\n{}",
                log.lock().unwrap_or_else(|e| e.into_inner())
            )
        })?;
        wait_tcp(addr, &mut child, &log)?;
        Ok(ServerProc {
            kind: ServerKind::Secrelay,
            addr,
            child,
            log,
            ca_der: files.ca_der.clone(),
            admin: Some(admin),
            _dir: None,
        })
    }

    /// nginx with a generated configuration: one worker, TLS 1.3 and 1.2, X25519, P-256 and
    /// P-384, a shared session cache (session ids) and tickets, `stub_status` at
    /// `/nginx_status`, an access log of TLS version and reuse per request. With `callgrind`
    /// (a valgrind command line), nginx runs as one process without a master, under it.
    pub fn nginx(
        files: &CertFiles,
        core: Option<usize>,
        under: Option<&[String]>,
    ) -> anyhow::Result<ServerProc> {
        let binary = nginx_binary().context("nginx is not installed")?;
        let dir = tempfile::Builder::new()
            .prefix("secrelay-lab-nginx-")
            .tempdir()?;
        let port = free_tcp_port()?;
        let d = dir.path().display().to_string();
        let conf = format!(
            r#"daemon off;
master_process {master};
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    log_format counted '$ssl_protocol $ssl_session_reused $status';
    access_log {d}/access.log counted;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl backlog=4096;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ecdh_curve X25519:prime256v1:secp384r1;
        ssl_session_cache shared:SSL:20m;
        ssl_session_timeout 1h;
        ssl_session_tickets on;
        location = /nginx_status {{ stub_status; }}
        location / {{ return 200 "ok\n"; }}
    }}
}}
"#,
            master = if under.is_some() { "off" } else { "on" },
            cert = files.cert.display(),
            key = files.key.display(),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let mut cmd = match under {
            Some(valgrind) => {
                let mut c = pinned(core, Path::new(&valgrind[0]));
                c.args(&valgrind[1..]).arg(&binary);
                c
            }
            None => pinned(core, &binary),
        };
        cmd.arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting nginx")?;
        let log = Arc::new(Mutex::new(String::new()));
        let _ = follow(
            child.stderr.take().context("stderr piped")?,
            log.clone(),
            |_| None::<()>,
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        wait_tcp(addr, &mut child, &log).map_err(|e| {
            let err = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            anyhow::anyhow!("nginx: {e}\n{err}")
        })?;
        Ok(ServerProc {
            kind: ServerKind::Nginx,
            addr,
            child,
            log,
            ca_der: files.ca_der.clone(),
            admin: None,
            _dir: Some(dir),
        })
    }

    /// `openssl s_server -www` with `files`, X25519, P-256 and P-384, TLS 1.3 and 1.2.
    pub fn s_server(
        files: &CertFiles,
        core: Option<usize>,
        under: Option<&[String]>,
    ) -> anyhow::Result<ServerProc> {
        let port = free_tcp_port()?;
        let mut cmd = match under {
            Some(valgrind) => {
                let mut c = pinned(core, Path::new(&valgrind[0]));
                c.args(&valgrind[1..]).arg("/usr/bin/openssl");
                c
            }
            None => pinned(core, Path::new("openssl")),
        };
        cmd.args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&files.cert)
            .arg("-key")
            .arg(&files.key)
            .args(["-groups", "X25519:P-256:P-384"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting openssl s_server")?;
        let log = Arc::new(Mutex::new(String::new()));
        let _ = follow(
            child.stdout.take().context("stdout piped")?,
            log.clone(),
            |_| None::<()>,
        );
        let _ = follow(
            child.stderr.take().context("stderr piped")?,
            log.clone(),
            |_| None::<()>,
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        wait_tcp(addr, &mut child, &log).map_err(|e| anyhow::anyhow!("openssl s_server: {e}"))?;
        Ok(ServerProc {
            kind: ServerKind::SServer,
            addr,
            child,
            log,
            ca_der: files.ca_der.clone(),
            admin: None,
            _dir: None,
        })
    }

    /// `secrelay lab handshake-server` (this executable) with a fresh certificate of
    /// `cert_type`, counters on stderr every second.
    pub fn dtls(exe: &Path, cert_type: &str, core: Option<usize>) -> anyhow::Result<ServerProc> {
        let mut cmd = pinned(core, exe);
        cmd.args([
            "lab",
            "handshake-server",
            "--listen",
            "127.0.0.1:0",
            "--cert-type",
            cert_type,
            "--max-in-flight",
            "10000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .context("starting secrelay lab handshake-server")?;
        let log = Arc::new(Mutex::new(String::new()));
        let _ = follow(
            child.stderr.take().context("stderr piped")?,
            log.clone(),
            |_| None::<()>,
        );
        let rx = follow(
            child.stdout.take().context("stdout piped")?,
            log.clone(),
            |line| {
                line.strip_prefix("listening ")?
                    .trim()
                    .parse::<SocketAddr>()
                    .ok()
            },
        );
        let addr = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
            anyhow::anyhow!(
                "lab handshake-server printed no address:\n{}",
                log.lock().unwrap_or_else(|e| e.into_inner())
            )
        })?;
        Ok(ServerProc {
            kind: ServerKind::SecrelayDtls,
            addr,
            child,
            log,
            ca_der: Vec::new(),
            admin: None,
            _dir: None,
        })
    }

    /// What one [`ServerProc::counted`] adds to the count it reads (its own connection).
    pub fn reading_cost(&self) -> u64 {
        u64::from(self.kind != ServerKind::SecrelayDtls)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds (user + system) of every process of the server.
    pub fn cpu_s(&self) -> f64 {
        tree(self.pid()).into_iter().map(cpu_of).sum()
    }

    /// Resident memory of every process of the server, KiB. Through `taskset` the server is
    /// the child's own process (taskset execs it).
    pub fn rss_kib(&self) -> f64 {
        tree(self.pid()).into_iter().map(rss_of).sum()
    }

    /// nginx's access log so far (one line per request: TLS version, `r` when the session was
    /// reused or `.`, status), when this is nginx.
    pub fn access_log(&self) -> Option<String> {
        let dir = self._dir.as_ref()?;
        std::fs::read_to_string(dir.path().join("access.log")).ok()
    }

    /// secrelay's admin key, for its `/metrics`.
    fn admin_key(&self) -> Option<&str> {
        self.admin.as_ref().map(secrelay_testkit::AdminKeyFile::key)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The server's own count of what it served so far: (full handshakes, resumed handshakes)
    /// where it tells them apart, or (connections accepted, 0) for nginx, which counts no
    /// handshakes. Reading it over TLS costs one more full handshake (or connection), counted
    /// in the first figure: the difference between two reads is what happened in between
    /// plus [`ServerProc::reading_cost`].
    pub fn counted(&self) -> anyhow::Result<(u64, u64)> {
        match self.kind {
            ServerKind::Secrelay => {
                let m = https_get(self.addr, &self.ca_der, "/metrics", self.admin_key())?;
                let mut full = 0;
                let mut resumed = 0;
                for l in m
                    .lines()
                    .filter(|l| l.starts_with("secrelay_tls_handshakes_total{"))
                {
                    let n: u64 = l
                        .rsplit(' ')
                        .next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if l.contains("kind=\"resumed\"") {
                        resumed += n;
                    } else {
                        full += n;
                    }
                }
                Ok((full, resumed))
            }
            ServerKind::SServer => {
                let page = https_get(self.addr, &self.ca_der, "/", None)?;
                let num = |what: &str| -> anyhow::Result<u64> {
                    page.lines()
                        .find(|l| l.trim_end().ends_with(what))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("s_server's page has no {what:?}:\n{page}"))
                };
                let finished = num("server accepts that finished")?;
                let hits = num("session cache hits")?;
                Ok((finished.saturating_sub(hits), hits))
            }
            ServerKind::Nginx => {
                let page = https_get(self.addr, &self.ca_der, "/nginx_status", None)?;
                // "Active connections: N\nserver accepts handled requests\n A H R\n…"
                let accepts = page
                    .lines()
                    .nth(2)
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .with_context(|| format!("nginx's stub_status page:\n{page}"))?;
                Ok((accepts, 0))
            }
            ServerKind::SecrelayDtls => {
                let log = self.log();
                let completed = log
                    .lines()
                    .rev()
                    .find_map(|l| {
                        l.split("completed ")
                            .nth(1)?
                            .split_whitespace()
                            .next()?
                            .parse::<u64>()
                            .ok()
                    })
                    .unwrap_or(0);
                Ok((completed, 0))
            }
        }
    }
}

/// One HTTPS GET over HTTP/1.1 (`Connection: close`), the server verified against `ca_der`
/// under its IP address; the body.
pub fn https_get(
    addr: SocketAddr,
    ca_der: &[u8],
    path: &str,
    bearer: Option<&str>,
) -> anyhow::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .context("the CA certificate")?;
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::IpAddress(addr.ip().into()))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let auth = bearer
        .map(|b| format!("Authorization: Bearer {b}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e).with_context(|| format!("GET https://{addr}{path}")),
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET https://{addr}{path}: no HTTP response"))?;
    if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        bail!(
            "GET https://{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok(body)
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}
