//! `secrelay serve`'s logs as an operator's log shipper reads them: `--log-format json` makes
//! every line of stderr a JSON object (the start-up banner too); a session logs one INFO line
//! when it starts and one when it ends, with its reason; an SDP attribute the parser skips
//! (Chrome's `a=rtcp-xr`) is a DEBUG line naming the attribute, never a WARN; `RUST_LOG` is
//! honoured when `--log` is not given, and `--log` wins over it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `secrelay serve` with JSON logs, killed on drop; its stderr lines come through `lines`.
struct Serve {
    child: Child,
    url: String,
    lines: Receiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(rust_log: Option<&str>, extra: &[&str]) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_secrelay"));
        cmd.args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--udp",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--log-format",
            "json",
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(v) = rust_log {
            cmd.env("RUST_LOG", v);
        }
        let mut child = cmd.spawn().expect("secrelay serve starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut s = Serve {
            child,
            url: String::new(),
            lines,
        };
        let ready = s
            .until(|v| v["fields"]["message"] == "ready")
            .expect("the banner as one JSON line");
        s.url = ready["fields"]["url"].as_str().expect("its url").to_owned();
        s
    }

    /// Reads JSON lines (each must be one) until `want` holds for one, or 20 s pass.
    fn until(&self, mut want: impl FnMut(&Value) -> bool) -> Result<Value, Vec<Value>> {
        let end = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                    if want(&v) {
                        return Ok(v);
                    }
                    seen.push(v);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(seen)
    }

    /// Every JSON line that comes within `d`.
    fn during(&self, d: Duration) -> Vec<Value> {
        let end = Instant::now() + d;
        let mut seen = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            seen.push(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")),
            );
        }
        seen
    }

    /// A WHIP publisher's offer (Chrome's, with `a=rtcp-xr` as Chrome writes it), then its
    /// DELETE: a session that starts and ends.
    fn whip_session(&self, room: &str) {
        let client = secrelay_testkit::memory::SimClient::new(7);
        let offer = client.offer().replacen(
            "a=rtcp-mux\r\n",
            "a=rtcp-mux\r\na=rtcp-xr:rcvr-rtt=all\r\n",
            1,
        );
        assert!(offer.contains("a=rtcp-xr"), "{offer}");
        let mut r = ureq::post(&format!("{}/whip/{room}", self.url))
            .header("Content-Type", "application/sdp")
            .send(&offer)
            .expect("201");
        assert_eq!(
            r.status(),
            201,
            "{}",
            r.body_mut().read_to_string().unwrap()
        );
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .expect("a Location")
            .to_owned();
        ureq::delete(&format!("{}{location}", self.url))
            .call()
            .expect("DELETE");
    }
}

fn message(v: &Value) -> &str {
    v["fields"]["message"].as_str().unwrap_or_default()
}

#[test]
fn json_logs_say_when_each_session_starts_and_ends_and_skipped_sdp_is_debug() {
    let s = Serve::start(None, &["--log", "debug"]);
    s.whip_session("logs");
    let mut seen = Vec::new();
    let ended = s
        .until(|v| {
            seen.push(v.clone());
            message(v) == "session ended"
        })
        .unwrap_or_else(|rest| panic!("no session-end line: {rest:?}"));
    seen.extend(s.during(Duration::from_millis(300)));
    let started = seen
        .iter()
        .find(|v| message(v) == "session started")
        .unwrap_or_else(|| panic!("no session-start line: {seen:?}"));
    assert_eq!(started["level"], "INFO", "{started}");
    assert_eq!(started["fields"]["room"], "logs", "{started}");
    assert_eq!(started["fields"]["kind"], "whip", "{started}");
    assert_eq!(ended["level"], "INFO", "{ended}");
    assert_eq!(
        ended["fields"]["session"], started["fields"]["session"],
        "{ended}"
    );
    assert_eq!(ended["fields"]["kind"], "whip", "{ended}");
    assert_eq!(ended["fields"]["reason"], "deleted", "{ended}");
    // The attribute the parser skipped: one DEBUG line that names it, and nothing at WARN.
    let xr: Vec<&Value> = seen
        .iter()
        .filter(|v| v.to_string().contains("rtcp-xr"))
        .collect();
    assert!(
        xr.iter().any(|v| v["level"] == "DEBUG"
            && v["fields"]["attribute"]
                .as_str()
                .is_some_and(|a| a.contains("rtcp-xr"))),
        "no DEBUG line names a=rtcp-xr: {xr:?}"
    );
    assert!(xr.iter().all(|v| v["level"] == "DEBUG"), "{xr:?}");
    let warnings: Vec<&Value> = seen.iter().filter(|v| v["level"] == "WARN").collect();
    assert!(warnings.is_empty(), "a join logged warnings: {warnings:?}");
}

#[test]
fn rust_log_is_honoured_and_the_flag_wins_over_it() {
    // RUST_LOG=warn and no --log: no INFO line for the session.
    let s = Serve::start(Some("warn"), &[]);
    s.whip_session("quiet");
    let lines = s.during(Duration::from_secs(2));
    assert!(
        lines.iter().all(|v| v["level"] != "INFO"),
        "RUST_LOG=warn let INFO through: {lines:?}"
    );
    drop(s);
    // --log info beside RUST_LOG=warn: the flag wins.
    let s = Serve::start(Some("warn"), &["--log", "info"]);
    s.whip_session("loud");
    s.until(|v| message(v) == "session started")
        .expect("--log info wins over RUST_LOG=warn");
    drop(s);
    // RUST_LOG alone, asking for more than the default.
    let s = Serve::start(Some("info"), &[]);
    s.whip_session("env");
    s.until(|v| message(v) == "session started")
        .expect("RUST_LOG=info honoured");
}
