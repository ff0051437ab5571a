//! The README's quick start, followed as written: the commands of its "Try it on this machine"
//! block are read from README.md and run on this checkout, so a README command that stops
//! working fails this test. The gateway (`cargo run --release -p secrelay -- serve …`) is this
//! build's `secrelay` started in the background; its banner must give the room page, WHIP and
//! WHEP URLs; the room page then loads in headless Chromium (two tabs that see and hear each
//! other), and headless Chromium publishes with WHIP while a WHEP viewer decodes the video.
//! Each other command must exit 0.
//!
//! Three liberties, all about ports other tests may hold: the README's `127.0.0.1:8080` becomes
//! an ephemeral port (every command is given the address the gateway bound), the test pages'
//! port 8081 a free one (in the gateway's `--cors-origin` and the driver's `--page-port`
//! alike), and a `serve` without `--udp` (media on UDP 40000) gets `--udp 0.0.0.0:0`.
//!
//! The metrics `docs/operations.md` tells operators to watch must exist in this gateway's
//! `/metrics`, checked on the same gateway.
//!
//! Chromium, Python and the interop venv come from `scripts/setup`; where one is missing the
//! test says SKIPPED, except under CI, where it fails.

// scripts/run-tests: alone (headless Chromium plays media here; a second heavy test
// executable beside it would disturb the browser's timing)

mod lab_support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab_support::missing;

const TEST: &str = "the_readme_quick_start_runs_as_written";
/// The address the README's commands use for the gateway.
const README_ADDR: &str = "127.0.0.1:8080";
/// The port the README's WHIP/WHEP test pages are served on (the origin the gateway allows).
const README_PAGE_PORT: &str = "8081";
const PREFIX: &str = "cargo run --release -p secrelay --";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The commands of the first `sh` block under "### Try it on this machine": comment lines
/// dropped, `\` continuations joined.
fn quick_start_commands(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n### Try it on this machine\n")
        .nth(1)
        .expect("README.md has a \"### Try it on this machine\" section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a ```sh block in it");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

/// The gateway the README starts, killed on drop; what it logs is kept.
struct Gateway {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
    /// The admin key it made and wrote to the file its banner names.
    admin: String,
    /// The port the test pages are served on in place of the README's.
    page_port: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_gateway(command: &str) -> Gateway {
    let page_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port for the test pages")
        .port()
        .to_string();
    let mut args: Vec<String> = command[PREFIX.len()..]
        .split_whitespace()
        .map(|a| {
            a.replace(README_ADDR, "127.0.0.1:0").replace(
                &format!("127.0.0.1:{README_PAGE_PORT}"),
                &format!("127.0.0.1:{page_port}"),
            )
        })
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{command}");
    if !args.iter().any(|a| a == "--udp") {
        args.extend(["--udp".into(), "0.0.0.0:0".into()]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_secrelay"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("secrelay serve starts");
    let (banner, log) = secrelay_gateway::server::banner::read_child_banner(&mut child);
    let text = log.lock().unwrap().clone();
    let banner =
        banner.unwrap_or_else(|| panic!("`{command}` printed no banner with its address:\n{text}"));
    let url = banner
        .url()
        .unwrap_or_else(|| panic!("`{command}` printed no banner with its address:\n{text}"));
    // The operator's routes take the admin key the banner names the file of.
    let key_file = banner
        .admin_key_file
        .unwrap_or_else(|| panic!("the banner names no admin key file:\n{text}"));
    let admin = std::fs::read_to_string(&key_file)
        .unwrap_or_else(|e| panic!("{}: {e}", key_file.display()))
        .trim()
        .to_owned();
    // What the README promises the banner says.
    for path in ["/room/NAME", "/whip/NAME", "/whep/NAME"] {
        assert!(
            text.contains(&format!("{url}{path}")),
            "the banner has no {url}{path}:\n{text}"
        );
    }
    Gateway {
        child,
        url,
        log,
        admin,
        page_port,
    }
}

/// Runs one README command (the gateway's address put in), within `limit`; its output.
fn run(command: &str, gateway: &Gateway, limit: Duration) -> Result<String, String> {
    let command = command
        .replace(&format!("http://{README_ADDR}"), &gateway.url)
        .replace(
            &format!("--page-port {README_PAGE_PORT}"),
            &format!("--page-port {}", gateway.page_port),
        );
    let mut words = command.split_whitespace();
    let program = words.next().expect("a command");
    let mut child = Command::new(program)
        .args(words)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{command}`: {e}"))?;
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (
        reader.join().unwrap_or_default(),
        err_reader.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => Ok(stdout),
        Some(s) => Err(format!(
            "`{command}` failed ({s}):\n{stdout}\n{stderr}\ngateway:\n{}",
            gateway.log.lock().unwrap()
        )),
        None => Err(format!(
            "`{command}` ran past {limit:?}:\n{stdout}\n{stderr}\ngateway:\n{}",
            gateway.log.lock().unwrap()
        )),
    }
}

/// The peers the commands need: their programs (relative ones from the repository) and
/// Chromium.
fn peers_present(commands: &[String]) -> bool {
    for c in commands.iter().filter(|c| !c.starts_with(PREFIX)) {
        let program = c.split_whitespace().next().unwrap_or_default();
        let found = if program.contains('/') {
            repo().join(program).exists()
        } else {
            Command::new(program)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !found {
            missing(TEST, &format!("no {program} (scripts/setup makes it)"));
            return false;
        }
    }
    let chromium = std::env::var_os("SECRELAY_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        missing(TEST, "no Chromium (Debian package chromium)");
        return false;
    }
    true
}

/// GETs an operator's route with the gateway's admin key.
fn get(url: &str, admin: &str) -> String {
    ureq::get(url)
        .header("Authorization", &format!("Bearer {admin}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .body_mut()
        .read_to_string()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// Every `secrelay_*` and `process_*` name docs/operations.md writes is one `/metrics` has.
fn operations_metrics_exist(metrics: &str) {
    let doc = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let mut names: Vec<&str> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        // A metric's name goes on with a letter (`secrelay_0.1.0_amd64.deb` is a package's).
        .filter(|w| {
            ["secrelay_", "process_"].iter().any(|p| {
                w.strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_lowercase()))
            })
        })
        .collect();
    // The workspace's crate names (`secrelay_gateway`, log targets) are not metrics.
    let crates: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .unwrap()
        .filter_map(|e| {
            let toml = std::fs::read_to_string(e.ok()?.path().join("Cargo.toml")).ok()?;
            let name = toml.lines().find_map(|l| l.strip_prefix("name = "))?;
            Some(name.trim_matches('"').replace('-', "_"))
        })
        .collect();
    names.retain(|n| !crates.iter().any(|c| c == n));
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 10, "{names:?}");
    let missing: Vec<&&str> = names.iter().filter(|n| !metrics.contains(**n)).collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md names metrics /metrics lacks: {missing:?}"
    );
}

#[test]
fn the_readme_quick_start_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let commands = quick_start_commands(&readme);
    assert!(commands.len() >= 3, "{commands:?}");
    assert!(
        commands[0].starts_with(&format!("{PREFIX} serve")),
        "the quick start begins with the gateway: {commands:?}"
    );
    assert!(
        commands.iter().any(|c| c.contains("chromium_room.py"))
            && commands.iter().any(|c| c.contains("chromium_av.py")),
        "the room page and a WHIP/WHEP client: {commands:?}"
    );
    if !peers_present(&commands) {
        return;
    }
    let gateway = start_gateway(&commands[0]);
    for c in &commands[1..] {
        assert!(!c.starts_with(PREFIX), "one gateway per quick start: {c}");
        let out = run(c, &gateway, Duration::from_secs(240)).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("`{c}`: {}", out.lines().last().unwrap_or_default());
    }
    // The scripts left; the gateway kept nothing, and did the handshakes.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let rooms = get(&format!("{}/api/rooms", gateway.url), &gateway.admin);
        if rooms.contains("\"rooms\":[]") {
            break;
        }
        assert!(Instant::now() < end, "rooms left behind: {rooms}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = get(&format!("{}/metrics", gateway.url), &gateway.admin);
    let ok = metrics
        .lines()
        .find_map(|l| l.strip_prefix("secrelay_handshakes_total{result=\"ok\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        ok >= 4.0,
        "two room pages and WHIP and WHEP: {ok} handshakes"
    );
    operations_metrics_exist(&metrics);
}

#[test]
fn the_quick_start_block_is_found_and_read_as_commands() {
    let text = "x\n### Try it on this machine\n\n```sh\n# one\ncargo run --release -p secrelay -- serve \\\n  --http 127.0.0.1:8080\n\nb c\n```\n```sh\nnot this\n```\n";
    assert_eq!(
        quick_start_commands(text),
        [
            "cargo run --release -p secrelay -- serve --http 127.0.0.1:8080",
            "b c"
        ]
    );
}
