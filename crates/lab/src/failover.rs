//! `secrelay lab failover`: how long the telephony calls of a gateway killed with SIGKILL are
//! silent before its standby carries them, what they lose meanwhile, and what keeping them
//! costs the directory.
//!
//! Everything runs on this machine: a Redis server of its own (Debian's `redis-server`), the
//! standby node `b` (`cluster_takeover = ["a"]`) and, for each run, node `a`, both
//! `secrelay serve` processes sharing a sealing key. Each run opens calls through `a`'s ng
//! socket between pairs of phones on loopback (plain, SDES AES-CM-80 and SDES AES-GCM-128 in
//! turn, each phone sending a 20 ms packet), lets them talk, counts Redis's writes while they
//! are steady, kills `a` and measures, per call, the time from the kill until both of its
//! phones hear the other again and the packets lost meanwhile; then ends the calls through
//! `b`'s ng socket. `a`'s media addresses are 127.0.0.2, which `b` may bind too: on one
//! machine, what keepalived does when it moves a virtual address to the standby.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use secrelay_srtp::Profile;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::phone::SocketPhone;
use secrelay_testkit::redis::RedisServer;
use secrelay_wire::bencode::Bencode;
use serde::Serialize;

use crate::frame::{Cell, Method, Plot, PlotKind, Series, StudyReport, Table};

/// The address the node that dies carries its calls' media on.
const MEDIA_A: &str = "127.0.0.2";
/// One packet per phone this often (G.711's 20 ms).
const PACKET_EVERY: Duration = Duration::from_millis(20);
/// The longest a call may stay silent before it counts as not taken over.
const GIVE_UP: Duration = Duration::from_secs(30);

/// How the study runs.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    /// The secrelay binary the nodes run.
    pub exe: PathBuf,
    /// Runs (a node started, its calls opened, the node killed).
    pub runs: usize,
    /// Calls per run.
    pub calls: usize,
    /// `cluster_lease_secs` of both nodes.
    pub lease_secs: f64,
    /// How long calls talk before the kill, the steady part of which Redis writes are counted
    /// over.
    pub steady: Duration,
    /// Fewer, shorter runs.
    pub quick: bool,
    /// A line of progress per run on stderr.
    pub progress: bool,
}

/// The kinds of call a run opens, in turn.
const KINDS: [(&str, Option<Profile>); 3] = [
    ("plain", None),
    (
        "SDES AES_CM_128_HMAC_SHA1_80",
        Some(Profile::AesCm128HmacSha1_80),
    ),
    ("SDES AEAD_AES_128_GCM", Some(Profile::AeadAes128Gcm)),
];

/// One call of a run, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct CallResult {
    /// Its kind (`plain`, `SDES …`).
    pub kind: String,
    /// From the kill until both phones heard the other again, ms (`None`: never, within
    /// 30 s).
    pub silent_ms: Option<f64>,
    /// Packets sent after the kill and never heard, each way (caller's, callee's).
    pub lost: [usize; 2],
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Its calls.
    pub calls: Vec<CallResult>,
    /// Redis writes (HSET) while the calls were set up: offers, answers, first SRTP marks.
    pub setup_writes: u64,
    /// Redis writes while the calls were steady, and over how long.
    pub steady_writes: u64,
    /// Seconds the steady writes were counted over.
    pub steady_s: f64,
    /// Calls never heard again within 30 s of the kill.
    pub not_taken: usize,
}

/// Everything the study measured.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    /// Each run.
    pub runs: Vec<RunResult>,
    /// `cluster_lease_secs`.
    pub lease_secs: f64,
}

/// A `secrelay serve` node of the study (killed when dropped).
struct Node {
    child: Child,
    ng: SocketAddr,
    _config: tempfile::NamedTempFile,
}

impl Node {
    /// Starts `exe serve` with `config` (TOML) and waits for its banner's ng address.
    fn start(exe: &Path, config: &str) -> anyhow::Result<Node> {
        use std::io::Write as _;
        let mut file = tempfile::NamedTempFile::new().context("a node's config file")?;
        file.write_all(config.as_bytes())
            .context("writing a node's config file")?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(file.path())
            .args(["--log", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let (banner, seen) = crate::soak::read_banner(&mut child, "node")?;
        let Some(ng) = banner.and_then(|b| b.ng) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the node's banner named no ng address: {seen}");
        };
        Ok(Node {
            child,
            ng,
            _config: file,
        })
    }

    /// SIGKILL: nothing released, nothing said.
    fn kill(mut self) -> Instant {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Instant::now()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An ng request of a call (`from-tag` "caller").
fn ng_command(
    name: &str,
    call: &str,
    to: Option<&str>,
    sdp: Option<&str>,
) -> Vec<(String, Bencode)> {
    secrelay_testkit::ng::command(name, call, "caller", to, sdp)
}

/// A call between two phones on loopback through a gateway's ng socket, each phone sending a
/// packet of its own marker (the caller 0xc1, the callee 0xb0) when asked.
pub struct PhoneCall {
    /// Its call-id.
    pub id: String,
    /// The phone that offered.
    pub caller: SocketPhone,
    /// The phone that answered.
    pub callee: SocketPhone,
    /// Packets each sent since [`PhoneCall::mark`] (caller's, callee's).
    pub sent: [usize; 2],
    heard_at_mark: (usize, usize),
}

impl PhoneCall {
    /// Opens call `id` through the ng socket `ng`: plain, or SDES with `sdes`; the phones'
    /// sequence numbers start at `seq`.
    pub fn open(
        ng: &mut Ng,
        id: &str,
        sdes: Option<Profile>,
        ssrc: u32,
        seq: u16,
    ) -> anyhow::Result<PhoneCall> {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut caller = SocketPhone::bind(local, sdes, ssrc)?;
        let mut callee = SocketPhone::bind(local, sdes, ssrc ^ 0x8000_0000)?;
        caller.phone.seq = seq;
        callee.phone.seq = seq;
        let offer = ng_command("offer", id, None, Some(&caller.phone.offer()));
        let to_callee = ng.call(offer)?["sdp"].clone();
        let answer = callee
            .phone
            .answer_offer(&to_callee)
            .map_err(|e| anyhow!(e))?;
        let to_caller =
            ng.call(ng_command("answer", id, Some("callee"), Some(&answer)))?["sdp"].clone();
        caller
            .phone
            .accept_answer(&to_caller)
            .map_err(|e| anyhow!(e))?;
        Ok(PhoneCall {
            id: id.to_owned(),
            caller,
            callee,
            sent: [0; 2],
            heard_at_mark: (0, 0),
        })
    }

    /// One packet each way, then what came.
    pub fn exchange(&mut self) -> anyhow::Result<()> {
        self.caller.send(&[0xc1; 160])?;
        self.callee.send(&[0xb0; 160])?;
        self.sent[0] += 1;
        self.sent[1] += 1;
        self.caller.read();
        self.callee.read();
        Ok(())
    }

    /// What each side heard of the other: (caller heard, callee heard).
    pub fn heard(&self) -> (usize, usize) {
        (self.caller.heard(0xb0), self.callee.heard(0xc1))
    }

    /// Starts counting from now: what was sent and heard so far is set aside.
    pub fn mark(&mut self) {
        self.caller.read();
        self.callee.read();
        self.sent = [0; 2];
        self.heard_at_mark = self.heard();
    }

    /// Whether both phones heard the other since the mark.
    pub fn heard_since_mark(&self) -> bool {
        let (x, y) = self.heard();
        x > self.heard_at_mark.0 && y > self.heard_at_mark.1
    }

    /// Packets sent since the mark and not heard: (the caller's, the callee's).
    pub fn lost_since_mark(&self) -> [usize; 2] {
        let (x, y) = self.heard();
        [
            self.sent[0].saturating_sub(y - self.heard_at_mark.1),
            self.sent[1].saturating_sub(x - self.heard_at_mark.0),
        ]
    }
}

/// One round of packets over `calls`, then the rest of the packet interval.
fn round(calls: &mut [PhoneCall]) -> anyhow::Result<()> {
    let start = Instant::now();
    for c in calls.iter_mut() {
        c.exchange()?;
    }
    std::thread::sleep(PACKET_EVERY.saturating_sub(start.elapsed()));
    Ok(())
}

/// Rounds of packets for `d`.
fn talk(calls: &mut [PhoneCall], d: Duration) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        round(calls)?;
    }
    Ok(())
}

/// The configuration of node `name`: its ng socket and signaling on loopback, media on
/// `media` in `ports`, in the cluster of `redis` with lease `lease`, sealing with `key`.
fn node_config(name: &str, redis: &str, lease: f64, key: &Path, extra: &str) -> String {
    format!(
        "http = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\nng = \"127.0.0.1:0\"\nworkers = 1\n\
         cluster_redis = \"{redis}\"\ncluster_node = \"{name}\"\ncluster_lease_secs = {lease:?}\n\
         cluster_state_key = \"{}\"\n{extra}",
        key.display()
    )
}

/// Runs the study.
pub fn run(o: &FailoverOptions) -> anyhow::Result<FailoverReport> {
    if o.runs == 0 || o.calls == 0 {
        bail!("--runs and --calls must be at least 1");
    }
    let redis = RedisServer::start(0).ok_or_else(|| {
        anyhow!("redis-server could not start: install Debian's redis-server (scripts/setup does)")
    })?;
    let dir = tempfile::tempdir().context("a directory for the sealing key")?;
    let key = dir.path().join("state.key");
    let mut raw = [0u8; 32];
    getrandom_04::fill(&mut raw).map_err(|e| anyhow!("random key: {e}"))?;
    std::fs::write(
        &key,
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    )
    .context("writing the sealing key")?;
    let url = redis.url();
    let standby = Node::start(
        &o.exe,
        &node_config(
            "b",
            &url,
            o.lease_secs,
            &key,
            "rtp_ports = \"48000-49999\"\ncluster_takeover = [\"a\"]\ncluster_standby = true\n",
        ),
    )?;
    let mut runs = Vec::new();
    for i in 0..o.runs {
        let r = one_run(o, &redis, &key, standby.ng, i)?;
        if o.progress {
            let slowest = r
                .calls
                .iter()
                .filter_map(|c| c.silent_ms)
                .fold(0.0, f64::max);
            eprintln!(
                "failover run {}/{}: {} calls, the slowest heard again {slowest:.0} ms after the kill, {} not taken over",
                i + 1,
                o.runs,
                r.calls.len(),
                r.not_taken
            );
        }
        runs.push(r);
    }
    drop(standby);
    Ok(FailoverReport {
        runs,
        lease_secs: o.lease_secs,
    })
}

/// One run: node `a` started, its calls opened and steady, `a` killed, the calls followed until
/// they are heard again (or given up), then ended through the standby.
fn one_run(
    o: &FailoverOptions,
    redis: &RedisServer,
    key: &Path,
    standby_ng: SocketAddr,
    run: usize,
) -> anyhow::Result<RunResult> {
    let a = Node::start(
        &o.exe,
        &node_config(
            "a",
            &redis.url(),
            o.lease_secs,
            key,
            &format!("interfaces = [\"{MEDIA_A}\"]\nrtp_ports = \"46000-47999\"\n"),
        ),
    )?;
    let registered = Instant::now() + Duration::from_secs(10);
    while redis.cli(&["EXISTS", "secrelay:node:a"]) != "1" {
        if Instant::now() > registered {
            bail!("node a never registered in the directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before_setup = redis.calls("hset");
    let mut ng = Ng::new(a.ng)?;
    let mut calls = Vec::with_capacity(o.calls);
    for n in 0..o.calls {
        let (_, sdes) = KINDS[n % KINDS.len()];
        // Sequence numbers that roll over while the call is steady.
        let seq = 65_535 - 20;
        let ssrc = (run as u32) << 16 | n as u32;
        calls.push(PhoneCall::open(
            &mut ng,
            &format!("lab-failover-{run}-{n}@lab"),
            sdes,
            ssrc,
            seq,
        )?);
    }
    // Set-up: until every phone hears the other, and a second and a half more (the SRTP
    // marks of the new streams are read once a second).
    let heard = Instant::now() + Duration::from_secs(10);
    while calls.iter().any(|c| c.heard().0 == 0 || c.heard().1 == 0) {
        if Instant::now() > heard {
            bail!("the calls through node a are silent");
        }
        round(&mut calls)?;
    }
    talk(&mut calls, Duration::from_millis(1500))?;
    let setup_writes = redis.calls("hset") - before_setup;
    let steady_from = Instant::now();
    talk(&mut calls, o.steady)?;
    let steady_writes = redis.calls("hset") - before_setup - setup_writes;
    let steady_s = steady_from.elapsed().as_secs_f64();
    let killed = a.kill();
    for c in calls.iter_mut() {
        c.mark();
    }
    let mut silent: Vec<Option<Duration>> = vec![None; calls.len()];
    while silent.iter().any(Option::is_none) && killed.elapsed() < GIVE_UP {
        round(&mut calls)?;
        for (s, c) in silent.iter_mut().zip(&calls) {
            if s.is_none() && c.heard_since_mark() {
                *s = Some(killed.elapsed());
            }
        }
    }
    talk(&mut calls, Duration::from_millis(400))?;
    std::thread::sleep(Duration::from_millis(50));
    for c in calls.iter_mut() {
        c.caller.read();
        c.callee.read();
    }
    let results: Vec<CallResult> = calls
        .iter()
        .enumerate()
        .zip(&silent)
        .map(|((n, c), s)| CallResult {
            kind: KINDS[n % KINDS.len()].0.to_owned(),
            silent_ms: s.map(|d| d.as_secs_f64() * 1e3),
            lost: c.lost_since_mark(),
        })
        .collect();
    let not_taken = silent.iter().filter(|s| s.is_none()).count();
    let mut ng_b = Ng::new(standby_ng)?;
    for (c, s) in calls.iter().zip(&silent) {
        if s.is_some() {
            ng_b.call(ng_command("delete", &c.id, None, None))
                .with_context(|| format!("deleting {} on the standby", c.id))?;
        }
    }
    Ok(RunResult {
        calls: results,
        setup_writes,
        steady_writes,
        steady_s,
        not_taken,
    })
}

impl FailoverReport {
    /// The study: silence after the kill and loss per kind of call, the directory's writes,
    /// and each run.
    pub fn study(&self, o: &FailoverOptions, elapsed_s: f64) -> StudyReport {
        let q = crate::handshake::quantile;
        let mut silence = Table::new(
            "failover_silence",
            "From the kill to both phones hearing each other again, per call",
        )
        .col("kind", "calls")
        .col_unit("calls", "calls", "")
        .col_unit("p50", "p50", "ms")
        .col_unit("p99", "p99", "ms")
        .col_unit("max", "max", "ms")
        .col_unit("lost_mean", "lost each way (mean)", "packets")
        .col_unit("lost_max", "lost each way (max)", "packets")
        .col_unit("not_taken", "not taken over", "");
        let all: Vec<&CallResult> = self.runs.iter().flat_map(|r| &r.calls).collect();
        let kinds = KINDS.iter().map(|(k, _)| *k).chain(["all"]);
        for kind in kinds {
            let these: Vec<&&CallResult> = all
                .iter()
                .filter(|c| kind == "all" || c.kind == kind)
                .collect();
            if these.is_empty() {
                continue;
            }
            let mut ms: Vec<f64> = these.iter().filter_map(|c| c.silent_ms).collect();
            ms.sort_by(f64::total_cmp);
            let lost: Vec<f64> = these
                .iter()
                .flat_map(|c| c.lost.iter().map(|l| *l as f64))
                .collect();
            silence.push([
                ("kind", Cell::text(kind)),
                ("calls", (these.len() as f64).into()),
                ("p50", Cell::num(q(&ms, 0.5))),
                ("p99", Cell::num(q(&ms, 0.99))),
                ("max", Cell::num(ms.last().copied().unwrap_or(f64::NAN))),
                (
                    "lost_mean",
                    Cell::num(lost.iter().sum::<f64>() / lost.len() as f64),
                ),
                (
                    "lost_max",
                    Cell::num(lost.iter().copied().fold(0.0, f64::max)),
                ),
                (
                    "not_taken",
                    (these.iter().filter(|c| c.silent_ms.is_none()).count() as f64).into(),
                ),
            ]);
        }
        let calls_total: usize = self.runs.iter().map(|r| r.calls.len()).sum();
        let setup: u64 = self.runs.iter().map(|r| r.setup_writes).sum();
        let steady: u64 = self.runs.iter().map(|r| r.steady_writes).sum();
        let steady_call_min: f64 = self
            .runs
            .iter()
            .map(|r| r.calls.len() as f64 * r.steady_s / 60.0)
            .sum();
        let mut writes = Table::new(
            "failover_writes",
            "What keeping the calls costs the directory (Redis HSET)",
        )
        .col("phase", "phase")
        .col_unit("writes", "writes", "")
        .col_unit("per_call", "per call", "")
        .col_unit("per_call_minute", "per call per minute", "");
        writes.push([
            (
                "phase",
                Cell::text("set-up (offer, answer, first SRTP marks, a SEQ rollover)"),
            ),
            ("writes", (setup as f64).into()),
            ("per_call", Cell::num(setup as f64 / calls_total as f64)),
            ("per_call_minute", Cell::text("-")),
        ]);
        writes.push([
            ("phase", Cell::text("steady (talking)")),
            ("writes", (steady as f64).into()),
            ("per_call", Cell::num(steady as f64 / calls_total as f64)),
            (
                "per_call_minute",
                Cell::num(steady as f64 / steady_call_min),
            ),
        ]);
        let mut runs = Table::new("failover_runs", "Each run")
            .col_unit("run", "run", "")
            .col_unit("calls", "calls", "")
            .col_unit("p50", "p50", "ms")
            .col_unit("max", "slowest", "ms")
            .col_unit("not_taken", "not taken over", "");
        let mut p50s = Vec::new();
        let mut maxes = Vec::new();
        for (i, r) in self.runs.iter().enumerate() {
            let mut ms: Vec<f64> = r.calls.iter().filter_map(|c| c.silent_ms).collect();
            ms.sort_by(f64::total_cmp);
            let (p50, max) = (q(&ms, 0.5), ms.last().copied().unwrap_or(f64::NAN));
            p50s.push((i as f64 + 1.0, p50));
            maxes.push((i as f64 + 1.0, max));
            runs.push([
                ("run", ((i + 1) as f64).into()),
                ("calls", (r.calls.len() as f64).into()),
                ("p50", Cell::num(p50)),
                ("max", Cell::num(max)),
                ("not_taken", (r.not_taken as f64).into()),
            ]);
        }
        let plot = Plot {
            id: "failover_silence".into(),
            title: "From the kill to media again, per run".into(),
            kind: PlotKind::Lines,
            x_label: "run".into(),
            y_label: "ms".into(),
            log_y: false,
            categories: Vec::new(),
            series: vec![
                Series {
                    name: "median call".into(),
                    points: p50s,
                },
                Series {
                    name: "slowest call".into(),
                    points: maxes,
                },
            ],
        };
        let mut all_ms: Vec<f64> = all.iter().filter_map(|c| c.silent_ms).collect();
        all_ms.sort_by(f64::total_cmp);
        let notes = vec![
            format!(
                "Lease {:.1} s: a standby finds the lease gone at its first renewal after it ran out (every third of the lease), so the silence is about the lease plus up to a third of it, plus the calls' replay; p99 {:.0} ms against the 2,000 ms target for plain and SDES calls.",
                self.lease_secs,
                q(&all_ms, 0.99)
            ),
            format!(
                "While the calls were steady the directory took {steady} writes ({:.2} per call per minute; the target is none): a call's state is written when it changes, and an SDES call's SRTP marks move every 2^14 packets of each phone's stream, so at 20 ms per packet at most two writes per 5.5 minutes (0.37 a minute), too rare for this window to see.",
                steady as f64 / steady_call_min
            ),
        ];
        StudyReport {
            study: "failover".into(),
            title: "Failover: a killed gateway's telephony calls on its standby".into(),
            seeds: Vec::new(),
            method: Method {
                timed: format!(
                    "Per call, from the SIGKILL of node a (its process waited for) until each of its two phones has heard a packet of the other sent after the kill; phones send one packet each way every {} ms. Node b (cluster_takeover = [\"a\"]) and a Redis server of the study's own run throughout; node a is started again for each run.",
                    PACKET_EVERY.as_millis()
                ),
                quick: o.quick,
                warmup_ms: 1500.0,
                runs: self.runs.len(),
                run_ms: o.steady.as_secs_f64() * 1e3,
                harness_overhead_ns: 0.0,
                spread: "quantiles over every call of every run".into(),
                instructions: "not counted".into(),
                machine: crate::machine::Machine::detect(),
                versions: crate::versions(),
                date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                elapsed_s,
            },
            tables: vec![silence, writes, runs],
            plots: vec![plot],
            notes,
        }
    }
}
