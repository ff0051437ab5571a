//! `secrelay lab failover`: how long the ng calls of a gateway killed with SIGKILL are silent
//! before its standby carries them, what they lose meanwhile, and what keeping them costs the
//! directory.
//!
//! Everything runs on this machine: a Redis server of its own (Debian's `redis-server`), the
//! standby node `b` (`cluster_takeover = ["a"]`) and, for each run, node `a`, both
//! `secrelay serve` processes sharing a sealing key and a DTLS certificate. Each run opens
//! calls through `a`'s ng socket between pairs of phones on loopback (plain, SDES AES-CM-80 and
//! SDES AES-GCM-128 in turn, each phone sending a 20 ms packet) and from phones to simulated
//! browsers (DTLS-SRTP), lets them talk, counts Redis's writes while they are steady, kills `a`
//! and measures, per call, the time from the kill until both of its sides hear the other again
//! and the packets lost meanwhile; then ends the calls through `b`'s ng socket. `a`'s media
//! addresses are 127.0.0.2, which `b` may bind too: on one machine, what keepalived does when
//! it moves a virtual address to the standby. A browser restarts ICE with a re-INVITE to `b`'s
//! ng socket once it heard nothing for [`NOTICE`], and again while `b` refuses it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use secrelay_srtp::Profile;
use secrelay_testkit::ng::Ng;
use secrelay_testkit::participant::SimParticipant;
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
/// How long a simulated browser hears nothing before it restarts ICE through its signaling
/// (what an application watching its audio does; Chromium's own `disconnected` comes later).
pub const NOTICE: Duration = Duration::from_secs(1);
/// How often a browser sends its re-INVITE again while the standby refuses it (it has not
/// taken the call yet).
const RETRY: Duration = Duration::from_millis(200);
/// The kind of a call with a WebRTC side, in the tables.
const WEBRTC_KIND: &str = "WebRTC (ICE restart)";

/// How the study runs.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    /// The secrelay binary the nodes run.
    pub exe: PathBuf,
    /// Runs (a node started, its calls opened, the node killed).
    pub runs: usize,
    /// Calls per run between phones (plain and SDES in turn).
    pub calls: usize,
    /// Calls per run from a phone to a simulated browser (DTLS-SRTP), whose browser restarts
    /// ICE through the standby's ng socket once it heard nothing for [`NOTICE`].
    pub webrtc_calls: usize,
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

    /// What each side had heard at the mark ([`PhoneCall::heard`]).
    pub fn heard_at_mark(&self) -> (usize, usize) {
        self.heard_at_mark
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

/// A phone calling a browser through a gateway's ng socket (`transport-protocol:
/// UDP/TLS/RTP/SAVPF`): the phone, the simulated browser (the DTLS client, on its own clock),
/// and what each sent and heard since the mark.
pub struct WebRtcCall {
    /// Its call-id.
    pub id: String,
    /// The phone that called.
    pub phone: SocketPhone,
    /// The browser that answered.
    pub browser: SimParticipant,
    /// Packets the phone sent since [`WebRtcCall::mark`], and the browser's count then.
    sent: (usize, u64),
    heard_at_mark: (usize, u64),
    /// When the browser last heard something new, and when it may send its re-INVITE next.
    last_heard: Instant,
    next_try: Instant,
    /// Whether its ICE restart went through since the mark.
    pub restarted: bool,
}

impl WebRtcCall {
    /// Opens call `id` through the ng socket `ng` (tags `caller`, the phone, and `callee`);
    /// the browser's send instants count from `epoch`.
    pub fn open(ng: &mut Ng, id: &str, epoch: Instant) -> anyhow::Result<WebRtcCall> {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut phone = SocketPhone::bind(local, None, 0x7e1e)?;
        let mut offer = ng_command("offer", id, None, Some(&phone.phone.offer()));
        offer.extend([
            (
                "transport-protocol".into(),
                Bencode::str("UDP/TLS/RTP/SAVPF"),
            ),
            ("ICE".into(), Bencode::str("force")),
        ]);
        let to_browser = ng.call(offer)?["sdp"].clone();
        let (browser, answer) =
            SimParticipant::answer_gateway_offer(&to_browser, id, local, epoch)?;
        let mut back = ng_command("answer", id, Some("callee"), Some(&answer));
        back.push(("ICE".into(), Bencode::str("remove")));
        let to_phone = ng.call(back)?["sdp"].clone();
        phone
            .phone
            .accept_answer(&to_phone)
            .map_err(|e| anyhow!(e))?;
        let now = Instant::now();
        Ok(WebRtcCall {
            id: id.to_owned(),
            phone,
            browser,
            sent: (0, 0),
            heard_at_mark: (0, 0),
            last_heard: now,
            next_try: now,
            restarted: false,
        })
    }

    /// The phone's packet and the browser's due ones (its own clock), then what came.
    pub fn exchange(&mut self) -> anyhow::Result<()> {
        let heard = self.browser.received();
        self.browser.step(Instant::now())?;
        self.phone.send(&[0x5a; 160])?;
        self.sent.0 += 1;
        self.phone.read();
        if self.browser.received() != heard {
            self.last_heard = Instant::now();
        }
        Ok(())
    }

    /// What each side heard so far: (the phone of the browser, the browser of the phone).
    pub fn heard(&self) -> (usize, u64) {
        (self.phone.phone.received.len(), self.browser.received())
    }

    /// Starts counting from now.
    pub fn mark(&mut self) {
        self.phone.read();
        self.sent = (0, self.browser.sent);
        self.heard_at_mark = self.heard();
        self.restarted = false;
    }

    /// Whether both sides heard the other since the mark.
    pub fn heard_since_mark(&self) -> bool {
        let (p, b) = self.heard();
        p > self.heard_at_mark.0 && b > self.heard_at_mark.1
    }

    /// Packets sent since the mark and not heard: (the phone's, the browser's).
    pub fn lost_since_mark(&self) -> [usize; 2] {
        let (p, b) = self.heard();
        let browser_sent = (self.browser.sent - self.sent.1) as usize;
        [
            self.sent
                .0
                .saturating_sub((b - self.heard_at_mark.1) as usize),
            browser_sent.saturating_sub(p - self.heard_at_mark.0),
        ]
    }

    /// What the browser does once it heard nothing for [`NOTICE`]: its re-INVITE with new ICE
    /// credentials through `ng` (every [`RETRY`] while refused), and the phone's answer to our
    /// new offer. Whether it went through (now or before).
    pub fn restart_when_silent(&mut self, ng: &mut Ng) -> anyhow::Result<bool> {
        let now = Instant::now();
        if self.restarted || now < self.next_try || now - self.last_heard < NOTICE {
            return Ok(self.restarted);
        }
        self.next_try = now + RETRY;
        self.restarted = self.restart_ice(ng)?;
        Ok(self.restarted)
    }

    /// The browser's re-INVITE that restarts ICE, through ng at `ng`, and the phone's answer
    /// to our new offer; `false` when it was refused (the call is not taken over yet).
    pub fn restart_ice(&mut self, ng: &mut Ng) -> anyhow::Result<bool> {
        let offer = self.browser.restart_offer()?;
        let Ok(r) = ng.call(secrelay_testkit::ng::command(
            "offer",
            &self.id,
            "callee",
            Some("caller"),
            Some(&offer),
        )) else {
            return Ok(false);
        };
        let answer = self
            .phone
            .phone
            .answer_offer(&r["sdp"])
            .map_err(|e| anyhow!(e))?;
        let back = ng.call(secrelay_testkit::ng::command(
            "answer",
            &self.id,
            "callee",
            Some("caller"),
            Some(&answer),
        ))?;
        self.browser.take_restart_answer(&back["sdp"])?;
        Ok(true)
    }
}

/// One round of packets over `calls` and `webrtc`, then the rest of the packet interval.
fn round(calls: &mut [PhoneCall], webrtc: &mut [WebRtcCall]) -> anyhow::Result<()> {
    let start = Instant::now();
    for c in calls.iter_mut() {
        c.exchange()?;
    }
    for c in webrtc.iter_mut() {
        c.exchange()?;
    }
    std::thread::sleep(PACKET_EVERY.saturating_sub(start.elapsed()));
    Ok(())
}

/// Rounds of packets for `d`.
fn talk(calls: &mut [PhoneCall], webrtc: &mut [WebRtcCall], d: Duration) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        round(calls, webrtc)?;
    }
    Ok(())
}

/// What every node of the study shares: the directory, the lease, the sealing key and the
/// DTLS certificate (a browser's association goes on at the node that takes its call).
struct Shared<'a> {
    redis: &'a RedisServer,
    lease: f64,
    dir: &'a Path,
}

impl Shared<'_> {
    /// The configuration of node `name`: its ng socket and signaling on loopback, and
    /// `extra`.
    fn config(&self, name: &str, extra: &str) -> String {
        let file = |f: &str| self.dir.join(f).display().to_string();
        format!(
            "http = \"127.0.0.1:0\"\nudp = \"127.0.0.1:0\"\nng = \"127.0.0.1:0\"\nworkers = 1\n\
             cluster_redis = \"{}\"\ncluster_node = \"{name}\"\ncluster_lease_secs = {:?}\n\
             cluster_state_key = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
            self.redis.url(),
            self.lease,
            file("state.key"),
            file("media.pem"),
            file("media.key"),
        )
    }
}

/// Runs the study.
pub fn run(o: &FailoverOptions) -> anyhow::Result<FailoverReport> {
    if o.runs == 0 || o.calls + o.webrtc_calls == 0 {
        bail!("--runs, and --calls or --webrtc-calls, must be at least 1");
    }
    let redis = RedisServer::start(0).ok_or_else(|| {
        anyhow!("redis-server could not start: install Debian's redis-server (scripts/setup does)")
    })?;
    let dir = tempfile::tempdir().context("a directory for the sealing key")?;
    let mut raw = [0u8; 32];
    getrandom_04::fill(&mut raw).map_err(|e| anyhow!("random key: {e}"))?;
    std::fs::write(
        dir.path().join("state.key"),
        raw.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    )
    .context("writing the sealing key")?;
    let cert = secrelay_dtls::Certificate::self_signed(secrelay_dtls::KeyType::EcdsaP256, "media")
        .map_err(|e| anyhow!("the nodes' DTLS certificate: {e}"))?;
    let (pem, cert_key) = cert.to_pem();
    std::fs::write(dir.path().join("media.pem"), pem).context("writing the certificate")?;
    std::fs::write(dir.path().join("media.key"), cert_key.as_bytes())
        .context("writing the certificate's key")?;
    let shared = Shared {
        redis: &redis,
        lease: o.lease_secs,
        dir: dir.path(),
    };
    let standby = Node::start(
        &o.exe,
        &shared.config(
            "b",
            "rtp_ports = \"48000-49999\"\ncluster_takeover = [\"a\"]\ncluster_standby = true\n",
        ),
    )?;
    let mut runs = Vec::new();
    for i in 0..o.runs {
        let r = one_run(o, &shared, standby.ng, i)?;
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
    shared: &Shared<'_>,
    standby_ng: SocketAddr,
    run: usize,
) -> anyhow::Result<RunResult> {
    let redis = shared.redis;
    let a = Node::start(
        &o.exe,
        &shared.config(
            "a",
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
    let epoch = Instant::now();
    let mut webrtc = (0..o.webrtc_calls)
        .map(|n| {
            WebRtcCall::open(
                &mut ng,
                &format!("lab-failover-{run}-webrtc-{n}@lab"),
                epoch,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Set-up: until every phone and browser hears the other, then until the directory has
    // taken no write for two seconds (the SRTP marks of the new streams, the sequence numbers'
    // rollover and the browsers' keys are read once a second, and read late on a loaded
    // machine: a write of the set-up must not land in the steady count).
    let heard = Instant::now() + Duration::from_secs(10);
    while calls.iter().any(|c| c.heard().0 == 0 || c.heard().1 == 0)
        || webrtc.iter().any(|c| c.heard().0 == 0 || c.heard().1 == 0)
    {
        if Instant::now() > heard {
            bail!("the calls through node a are silent");
        }
        round(&mut calls, &mut webrtc)?;
    }
    let (mut last, mut quiet_since) = (redis.calls("hset"), Instant::now());
    let settled_by = Instant::now() + Duration::from_secs(8);
    while quiet_since.elapsed() < Duration::from_secs(2) && Instant::now() < settled_by {
        talk(&mut calls, &mut webrtc, Duration::from_millis(250))?;
        let writes = redis.calls("hset");
        if writes != last {
            (last, quiet_since) = (writes, Instant::now());
        }
    }
    let setup_writes = redis.calls("hset") - before_setup;
    let steady_from = Instant::now();
    talk(&mut calls, &mut webrtc, o.steady)?;
    let steady_writes = redis.calls("hset") - before_setup - setup_writes;
    let steady_s = steady_from.elapsed().as_secs_f64();
    let killed = a.kill();
    for c in calls.iter_mut() {
        c.mark();
    }
    for c in webrtc.iter_mut() {
        c.mark();
    }
    let mut ng_b = Ng::new(standby_ng)?;
    let mut silent: Vec<Option<Duration>> = vec![None; calls.len() + webrtc.len()];
    while silent.iter().any(Option::is_none) && killed.elapsed() < GIVE_UP {
        round(&mut calls, &mut webrtc)?;
        for c in webrtc.iter_mut() {
            c.restart_when_silent(&mut ng_b)?;
        }
        let now_heard = calls
            .iter()
            .map(PhoneCall::heard_since_mark)
            .chain(webrtc.iter().map(WebRtcCall::heard_since_mark));
        for (s, h) in silent.iter_mut().zip(now_heard) {
            if s.is_none() && h {
                *s = Some(killed.elapsed());
            }
        }
    }
    talk(&mut calls, &mut webrtc, Duration::from_millis(400))?;
    std::thread::sleep(Duration::from_millis(50));
    for c in calls.iter_mut() {
        c.caller.read();
        c.callee.read();
    }
    for c in webrtc.iter_mut() {
        c.exchange()?;
    }
    let kinds_lost = calls
        .iter()
        .enumerate()
        .map(|(n, c)| (KINDS[n % KINDS.len()].0, c.lost_since_mark()))
        .chain(webrtc.iter().map(|c| (WEBRTC_KIND, c.lost_since_mark())));
    let results: Vec<CallResult> = kinds_lost
        .zip(&silent)
        .map(|((kind, lost), s)| CallResult {
            kind: kind.to_owned(),
            silent_ms: s.map(|d| d.as_secs_f64() * 1e3),
            lost,
        })
        .collect();
    let not_taken = silent.iter().filter(|s| s.is_none()).count();
    let ids = calls
        .iter()
        .map(|c| &c.id)
        .chain(webrtc.iter().map(|c| &c.id));
    for (id, s) in ids.zip(&silent) {
        if s.is_some() {
            ng_b.call(ng_command("delete", id, None, None))
                .with_context(|| format!("deleting {id} on the standby"))?;
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

/// What keeping the calls cost the directory: writes at set-up, and while steady.
fn writes_table(setup: u64, steady: u64, calls_total: usize, steady_call_min: f64) -> Table {
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
    writes
}

impl FailoverReport {
    /// Silence after the kill and loss, per kind of call and for all.
    fn silence_table(&self) -> Table {
        let q = crate::handshake::quantile;
        let mut silence = Table::new(
            "failover_silence",
            "From the kill to both sides hearing each other again, per call",
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
        let kinds = KINDS.iter().map(|(k, _)| *k).chain([WEBRTC_KIND, "all"]);
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
        silence
    }

    /// Each run's median and slowest call, as a table and as lines.
    fn runs_table_and_plot(&self) -> (Table, Plot) {
        let q = crate::handshake::quantile;
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
        (runs, plot)
    }

    /// The study: silence after the kill and loss per kind of call, the directory's writes,
    /// and each run.
    pub fn study(&self, o: &FailoverOptions, elapsed_s: f64) -> StudyReport {
        let q = crate::handshake::quantile;
        let silence = self.silence_table();
        let all: Vec<&CallResult> = self.runs.iter().flat_map(|r| &r.calls).collect();
        let calls_total: usize = self.runs.iter().map(|r| r.calls.len()).sum();
        let setup: u64 = self.runs.iter().map(|r| r.setup_writes).sum();
        let steady: u64 = self.runs.iter().map(|r| r.steady_writes).sum();
        let steady_call_min: f64 = self
            .runs
            .iter()
            .map(|r| r.calls.len() as f64 * r.steady_s / 60.0)
            .sum();
        let writes = writes_table(setup, steady, calls_total, steady_call_min);
        let (runs, plot) = self.runs_table_and_plot();
        let silences = |webrtc: bool| {
            let mut ms: Vec<f64> = all
                .iter()
                .filter(|c| (c.kind == WEBRTC_KIND) == webrtc)
                .filter_map(|c| c.silent_ms)
                .collect();
            ms.sort_by(f64::total_cmp);
            ms
        };
        let (phone_ms, webrtc_ms) = (silences(false), silences(true));
        let notes = vec![
            format!(
                "Lease {:.1} s: a standby finds the lease gone at its first renewal after it ran out (every third of the lease), so the silence is about the lease plus up to a third of it, plus the calls' replay; p99 {:.0} ms against the 2,000 ms target for plain and SDES calls.",
                self.lease_secs,
                q(&phone_ms, 0.99)
            ),
            format!(
                "A call with a WebRTC side is heard again once its browser restarted ICE through the standby (its DTLS association goes on there, no handshake): the browser sends its re-INVITE after {} ms without audio (what an application watching its audio does) and again every {} ms while the standby has not taken the call; p99 {:.0} ms against the 3,000 ms target.",
                NOTICE.as_millis(),
                RETRY.as_millis(),
                q(&webrtc_ms, 0.99)
            ),
            format!(
                "While the calls were steady the directory took {steady} writes ({:.2} per call per minute; the target is none): a call's state is written when it changes, and an SDES call's SRTP marks move every 2^14 packets of each phone's stream, so at 20 ms per packet at most two writes per 5.5 minutes (0.37 a minute), too rare for this window to see.",
                steady as f64 / steady_call_min
            ),
        ];
        StudyReport {
            study: "failover".into(),
            title: "Failover: a killed gateway's ng calls on its standby".into(),
            seeds: Vec::new(),
            method: Method {
                timed: format!(
                    "Per call, from the SIGKILL of node a (its process waited for) until each of its two sides (phones, or a phone and a simulated browser) has heard a packet of the other sent after the kill; each side sends one packet every {} ms. Node b (cluster_takeover = [\"a\"]) and a Redis server of the study's own run throughout; node a is started again for each run.",
                    PACKET_EVERY.as_millis()
                ),
                quick: o.quick,
                smoke: false,
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
