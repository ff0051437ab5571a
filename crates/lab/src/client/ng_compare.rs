//! `secrelay lab ng-compare`: rtpengine and secrelay answering the same ng requests, side by
//! side. Two parts:
//!
//! * **Conformance**: the offer/answer sequences of rtpengine's own test scripts
//!   ([`super::ng_suite`]) replayed against both daemons, each request to both, and each
//!   `offer` and `answer` whose reply from rtpengine is `ok` compared at three levels
//!   ([`super::sdp_compare`]): the same media sections, the same lines in any order, the same
//!   text. Both daemons are started here with the same interfaces, each announcing the same
//!   advertised addresses, so addresses compare as they are.
//! * **Load**: offer, answer and delete of fresh calls at rising rates against each daemon, one
//!   thread each: the offer+answer latency and the daemon's CPU per request from `/proc`.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde::Serialize;

use super::load::proc_sample;
use super::ng_suite::{Step, Suite};
use super::rtpengine::{Bencode, Ng};
use super::sdp_compare::{compare, Agreement};

/// A media interface both daemons get: where they bind, and what they announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// The local address media ports are bound on.
    pub local: IpAddr,
    /// The address written into SDP.
    pub advertised: IpAddr,
}

impl std::str::FromStr for Interface {
    type Err = String;

    /// `LOCAL` or `LOCAL!ADVERTISED`, as rtpengine's `--interface` writes it.
    fn from_str(s: &str) -> Result<Interface, String> {
        let (l, a) = s.split_once('!').unwrap_or((s, s));
        let parse = |x: &str| {
            x.trim()
                .parse::<IpAddr>()
                .map_err(|e| format!("{x:?} in interface {s:?}: {e}"))
        };
        Ok(Interface {
            local: parse(l)?,
            advertised: parse(a)?,
        })
    }
}

/// How the two daemons are started.
#[derive(Debug, Clone)]
pub struct Daemons {
    /// The rtpengine binary.
    pub rtpengine: PathBuf,
    /// The secrelay binary (`serve` is run).
    pub secrelay: PathBuf,
    /// The interfaces, the first the default.
    pub interfaces: Vec<Interface>,
    /// More arguments for rtpengine.
    pub rtpengine_args: Vec<String>,
    /// More arguments for `secrelay serve`.
    pub secrelay_args: Vec<String>,
    /// Give secrelay the interfaces (`--interface`); off for a build older than that flag,
    /// which then gets the first interface's addresses only.
    pub secrelay_interfaces: bool,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A started daemon and an ng client of it.
pub struct Running {
    /// `rtpengine` or `secrelay`.
    pub name: &'static str,
    child: KillOnDrop,
    /// The ng client.
    pub ng: Ng,
}

impl Running {
    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

fn free_udp_port() -> anyhow::Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Daemons {
    fn rtpengine_command(&self, ng: &str) -> Command {
        let mut c = Command::new(&self.rtpengine);
        c.args([
            "--config-file=none",
            &format!("--listen-ng={ng}"),
            "--foreground",
            "--log-stderr",
            "--log-level=3",
            "--table=-1",
            "--num-threads=1",
            "--port-min=30000",
            "--port-max=39999",
        ]);
        for i in &self.interfaces {
            if i.local == i.advertised {
                c.arg(format!("--interface={}", i.local));
            } else {
                c.arg(format!("--interface={}!{}", i.local, i.advertised));
            }
        }
        c.args(&self.rtpengine_args);
        c
    }

    fn secrelay_command(&self, ng: &str) -> Command {
        let mut c = Command::new(&self.secrelay);
        let first = self.interfaces.first();
        let udp = first.map_or_else(
            || "127.0.0.1:0".to_owned(),
            |i| SocketAddr::new(i.local, 0).to_string(),
        );
        c.args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--udp",
            &udp,
            "--workers",
            "1",
            "--log",
            "warn",
            "--ng",
            ng,
            "--rtp-ports",
            "40000-49999",
        ]);
        if let Some(i) = first {
            c.args(["--announce", &i.advertised.to_string()]);
        }
        if self.secrelay_interfaces {
            for i in &self.interfaces {
                c.arg(format!("--interface={}!{}", i.local, i.advertised));
            }
        }
        c.args(&self.secrelay_args);
        c
    }

    /// Starts `which` (`rtpengine` or `secrelay`) and waits for it to answer `ping`.
    pub fn start(&self, which: &'static str) -> anyhow::Result<Running> {
        let port = free_udp_port()?;
        let listen = format!("127.0.0.1:{port}");
        let mut command = match which {
            "rtpengine" => self.rtpengine_command(&listen),
            _ => self.secrelay_command(&listen),
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {which}"))?;
        let mut running = Running {
            name: which,
            child: KillOnDrop(child),
            ng: Ng::new(SocketAddr::from(([127, 0, 0, 1], port)))?,
        };
        let up = Instant::now() + Duration::from_secs(10);
        while running
            .ng
            .call(vec![("command".into(), Bencode::str("ping"))])
            .is_err()
        {
            if let Ok(Some(status)) = running.child.0.try_wait() {
                bail!("{which} exited at start ({status}): run it by hand to see why");
            }
            if Instant::now() > up {
                bail!("{which} did not answer ping on {listen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(running)
    }
}

/// A daemon's reply to a request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reply {
    /// `result` (`ok`, `error`, …), or `no reply`.
    pub result: String,
    /// `sdp`.
    pub sdp: Option<String>,
    /// `error-reason`, or why there was no reply.
    pub reason: Option<String>,
    /// `warning`.
    pub warning: Option<String>,
}

impl Reply {
    fn of(r: anyhow::Result<Bencode>) -> Reply {
        match r {
            Err(e) => Reply {
                result: "no reply".into(),
                reason: Some(e.to_string()),
                ..Reply::default()
            },
            Ok(b) => {
                let text = |k: &str| b.get(k).and_then(Bencode::as_text);
                Reply {
                    result: text("result").unwrap_or_default(),
                    sdp: text("sdp"),
                    reason: text("error-reason"),
                    warning: text("warning"),
                }
            }
        }
    }

    fn ok(&self) -> bool {
        self.result == "ok"
    }
}

/// One compared request.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// The script and line.
    pub file: String,
    /// The line of the request.
    pub line: usize,
    /// `offer` or `answer`.
    pub command: String,
    /// The test's name.
    pub name: String,
    /// rtpengine's reply.
    pub rtpengine: Reply,
    /// secrelay's.
    pub secrelay: Reply,
    /// How far secrelay's SDP agrees with rtpengine's (both `ok`), at each level.
    pub sections: bool,
    /// The same lines in any order.
    pub lines: bool,
    /// The same text.
    pub exact: bool,
    /// What differs (`-`: rtpengine's only, `+`: secrelay's only).
    pub diff: Vec<String>,
    /// What the request asks for that secrelay leaves out (T.38, recording, DTMF injection;
    /// [`Step::out_of_scope`]), if anything.
    pub out_of_scope: Option<&'static str>,
    /// Whether each daemon's SDP has the media sections the script expects back
    /// ([`Step::expected`]): `None` when the script expects none (or a daemon gave none).
    pub script: Option<ScriptAgreement>,
}

/// Each daemon's SDP against the one the script's authors expect (with its placeholders for
/// ports and keys, which the comparison writes as its own; their rtpengine had every codec
/// built in, which the one run here may not: Debian's decodes AMR but cannot encode it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ScriptAgreement {
    /// How far rtpengine's SDP agrees with the expected one.
    pub rtpengine: Agreement,
    /// And secrelay's.
    pub secrelay: Agreement,
}

impl Case {
    /// A case: rtpengine answered it with SDP.
    pub fn answered(&self) -> bool {
        self.rtpengine.ok() && self.rtpengine.sdp.is_some()
    }

    /// In scope: a case whose request asks for nothing secrelay leaves out.
    pub fn in_scope(&self) -> bool {
        self.answered() && self.out_of_scope.is_none()
    }

    /// How far secrelay's SDP agrees with the reference: rtpengine's; and where the rtpengine
    /// run here departs from the media sections its script expects (a codec its build lacks),
    /// the script's too, at each level whichever of the two it matches.
    pub fn by_reference(&self) -> Agreement {
        let live = Agreement {
            sections: self.sections,
            lines: self.lines,
            exact: self.exact,
        };
        match self.script {
            Some(a) if !a.rtpengine.sections => Agreement {
                sections: live.sections || a.secrelay.sections,
                lines: live.lines || a.secrelay.lines,
                exact: live.exact || a.secrelay.exact,
            },
            _ => live,
        }
    }
}

/// The conformance figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// Offers and answers read from the scripts and replayed.
    pub replayed: usize,
    /// Of those, answered by rtpengine with SDP and in scope: the cases the figures below
    /// count.
    pub cases: usize,
    /// Answered by rtpengine with SDP but asking for what secrelay leaves out (T.38,
    /// recording, DTMF injection): not counted.
    pub out_of_scope: usize,
    /// Requests left out of the replay (a value computed at run time; see the skipped list).
    pub skipped: usize,
    /// secrelay replied `ok` with SDP.
    pub ok: usize,
    /// The same media sections.
    pub sections: usize,
    /// The same lines in any order.
    pub lines: usize,
    /// The exact SDP.
    pub exact: usize,
    /// Of the cases, those the script writes the SDP it expects for.
    pub script_cases: usize,
    /// Of those, rtpengine's SDP had the media sections the script expects.
    pub script_rtpengine: usize,
    /// And secrelay's.
    pub script_secrelay: usize,
    /// The same media sections, lines and text as the reference ([`Case::by_reference`]).
    pub by_reference: [usize; 3],
}

impl Figures {
    /// `n` as a percentage of the cases.
    pub fn percent(&self, n: usize) -> f64 {
        if self.cases == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.cases as f64
        }
    }
}

/// A request as sent: the helpers' tags, then the flags and SDP.
fn request(step: &Step, call_id: &str) -> Vec<(String, Bencode)> {
    let mut d = vec![
        ("command".to_owned(), Bencode::str(&step.command)),
        ("call-id".to_owned(), Bencode::str(call_id)),
    ];
    if let Some(t) = &step.from_tag {
        d.push(("from-tag".into(), Bencode::str(t)));
    }
    if let Some(t) = &step.to_tag {
        d.push(("to-tag".into(), Bencode::str(t)));
    }
    d.extend(step.body.iter().cloned());
    d
}

/// `scope`: what the request, or the offer it answers, asks for that secrelay leaves out.
fn judge(
    step: &Step,
    scope: Option<&'static str>,
    file: &str,
    rtpengine: Reply,
    secrelay: Reply,
) -> Case {
    let mut agreement = Agreement::default();
    let mut diff = Vec::new();
    match (&rtpengine.sdp, &secrelay.sdp) {
        (Some(r), Some(s)) if rtpengine.ok() && secrelay.ok() => {
            (agreement, diff) = compare(r, s);
        }
        _ if !secrelay.ok() => diff.push(format!(
            "secrelay {}: {}",
            secrelay.result,
            secrelay.reason.as_deref().unwrap_or("")
        )),
        _ => {}
    }
    let as_expected = |expected: &str, reply: &Reply| match &reply.sdp {
        Some(s) if reply.ok() => compare(expected, s).0,
        _ => Agreement::default(),
    };
    let script = step.expected.as_deref().map(|e| ScriptAgreement {
        rtpengine: as_expected(e, &rtpengine),
        secrelay: as_expected(e, &secrelay),
    });
    Case {
        file: file.to_owned(),
        line: step.line,
        command: step.command.clone(),
        name: step.name.clone(),
        rtpengine,
        secrelay,
        sections: agreement.sections,
        lines: agreement.lines,
        exact: agreement.exact,
        diff,
        out_of_scope: scope,
        script,
    }
}

/// Replays `suite` against both daemons: every offer and answer compared.
pub fn replay(
    suite: &Suite,
    rtpengine: &mut Running,
    secrelay: &mut Running,
    only: Option<&str>,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for call in &suite.calls {
        if only.is_some_and(|o| !call.steps.iter().any(|s| s.name.contains(o))) {
            continue;
        }
        let call_id = format!("{}-{}", call.file, call.call_id);
        // An answer is out of scope with the offer it answers (T.38 gatewaying's audio answer).
        let mut offer_scope = None;
        for step in &call.steps {
            let req = request(step, &call_id);
            let r = Reply::of(rtpengine.ng.raw(req.clone()));
            let s = Reply::of(secrelay.ng.raw(req));
            let scope = match step.command.as_str() {
                "offer" => {
                    offer_scope = step.out_of_scope();
                    offer_scope
                }
                "answer" => step.out_of_scope().or(offer_scope),
                _ => continue,
            };
            cases.push(judge(step, scope, &call.file, r, s));
        }
        for d in [&mut *rtpengine, &mut *secrelay] {
            let _ = d.ng.raw(vec![
                ("command".into(), Bencode::str("delete")),
                ("call-id".into(), Bencode::str(&call_id)),
            ]);
        }
    }
    cases
}

/// The figures of `cases`, with `skipped` requests left out of the replay.
pub fn figures(cases: &[Case], skipped: usize) -> Figures {
    let scope: Vec<&Case> = cases.iter().filter(|c| c.in_scope()).collect();
    Figures {
        replayed: cases.len(),
        cases: scope.len(),
        out_of_scope: cases
            .iter()
            .filter(|c| c.answered() && !c.in_scope())
            .count(),
        skipped,
        ok: scope
            .iter()
            .filter(|c| c.secrelay.ok() && c.secrelay.sdp.is_some())
            .count(),
        sections: scope.iter().filter(|c| c.sections).count(),
        lines: scope.iter().filter(|c| c.lines).count(),
        exact: scope.iter().filter(|c| c.exact).count(),
        script_cases: scope.iter().filter(|c| c.script.is_some()).count(),
        script_rtpengine: scope
            .iter()
            .filter(|c| c.script.is_some_and(|a| a.rtpengine.sections))
            .count(),
        script_secrelay: scope
            .iter()
            .filter(|c| c.script.is_some_and(|a| a.secrelay.sections))
            .count(),
        by_reference: [
            |a: Agreement| a.sections,
            |a: Agreement| a.lines,
            |a: Agreement| a.exact,
        ]
        .map(|level| scope.iter().filter(|c| level(c.by_reference())).count()),
    }
}

/// One daemon at one offered rate of calls.
#[derive(Debug, Clone, Serialize)]
pub struct LoadRow {
    /// `rtpengine` or `secrelay`.
    pub daemon: String,
    /// Calls offered per second (each an offer, an answer and a delete).
    pub offered_calls_per_sec: f64,
    /// Calls completed per second.
    pub calls_per_sec: f64,
    /// Requests answered per second (three per call).
    pub requests_per_sec: f64,
    /// Offer+answer round trip, µs: median, 99th percentile.
    pub offer_answer_us: [f64; 2],
    /// Requests answered with an error (or not at all).
    pub errors: u64,
    /// The daemon's CPU per request, µs (user and kernel, from `/proc`).
    pub cpu_us_per_request: f64,
}

const LOAD_OFFER: &str = "v=0\r\no=- 1545997027 1 IN IP4 198.51.100.1\r\ns=load\r\nt=0 0\r\n\
m=audio 2000 RTP/AVP 0 8 101\r\nc=IN IP4 198.51.100.1\r\na=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-15\r\na=sendrecv\r\n";
const LOAD_ANSWER: &str = "v=0\r\no=- 1545997028 1 IN IP4 198.51.100.3\r\ns=load\r\nt=0 0\r\n\
m=audio 2002 RTP/AVP 0 101\r\nc=IN IP4 198.51.100.3\r\na=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-15\r\na=sendrecv\r\n";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One call's three requests; the offer+answer round trip, and how many failed.
fn one_call(ng: &mut Ng, n: u64) -> (Duration, u64) {
    let cid = format!("load-{n}");
    let oa = |cmd: &str, sdp: &str| {
        let mut d = vec![
            ("command".to_owned(), Bencode::str(cmd)),
            ("call-id".to_owned(), Bencode::str(&cid)),
            ("from-tag".to_owned(), Bencode::str("a")),
            ("sdp".to_owned(), Bencode::str(sdp)),
        ];
        if cmd == "answer" {
            d.push(("to-tag".into(), Bencode::str("b")));
        }
        d
    };
    let ok = |r: anyhow::Result<Bencode>| {
        r.ok()
            .and_then(|b| b.get("result").and_then(Bencode::as_text))
            .is_some_and(|t| t == "ok")
    };
    let t0 = Instant::now();
    let mut errors = u64::from(!ok(ng.raw(oa("offer", LOAD_OFFER))));
    errors += u64::from(!ok(ng.raw(oa("answer", LOAD_ANSWER))));
    let took = t0.elapsed();
    errors += u64::from(!ok(ng.raw(vec![
        ("command".into(), Bencode::str("delete")),
        ("call-id".into(), Bencode::str(&cid)),
    ])));
    (took, errors)
}

/// Calls at `rate` per second for `secs` against `d`, paced (one request at a time: the
/// latency is the daemon's own plus loopback, with no queue of ours in front).
pub fn load_row(d: &mut Running, rate: f64, secs: f64, first: u64) -> anyhow::Result<LoadRow> {
    let pid = d.pid();
    let before = proc_sample(pid)?;
    let start = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let due = start + gap * u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (t, e) = one_call(&mut d.ng, first + n);
        lat.push(t.as_secs_f64() * 1e6);
        errors += e;
        n += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = proc_sample(pid)?;
    lat.sort_by(f64::total_cmp);
    let requests = 3 * n;
    Ok(LoadRow {
        daemon: d.name.into(),
        offered_calls_per_sec: rate,
        calls_per_sec: n as f64 / elapsed,
        requests_per_sec: requests as f64 / elapsed,
        offer_answer_us: [percentile(&lat, 0.5), percentile(&lat, 0.99)],
        errors,
        cpu_us_per_request: (after.cpu_secs - before.cpu_secs) * 1e6 / requests.max(1) as f64,
    })
}

/// Reads the scripts at `paths`.
pub fn read_scripts(paths: &[PathBuf]) -> anyhow::Result<Suite> {
    let mut suite = Suite::default();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| anyhow!("{}: {e}", p.display()))?;
        let name = p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let s = super::ng_suite::read_suite(&name, &text);
        suite.calls.extend(s.calls);
        suite.skipped.extend(s.skipped);
    }
    Ok(suite)
}

/// Whether the binary `p` exists (`what` names the flag that gave it).
pub fn check_binary(p: &Path, what: &str) -> anyhow::Result<()> {
    if !p.exists() {
        bail!("{what} {}: not found", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(result: &str, sdp: Option<&str>) -> Reply {
        Reply {
            result: result.into(),
            sdp: sdp.map(str::to_owned),
            reason: None,
            warning: None,
        }
    }

    #[test]
    fn requests_out_of_scope_are_counted_apart_from_the_cases() {
        let sdp = "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
        let step = |body: Vec<(String, Bencode)>| Step {
            line: 1,
            command: "offer".into(),
            name: "x".into(),
            from_tag: None,
            to_tag: None,
            body,
            expected: None,
        };
        let ok = || reply("ok", Some(sdp));
        let plain = judge(&step(vec![]), None, "t.pl", ok(), ok());
        let t38 = step(vec![(
            "T.38".into(),
            Bencode::List(vec![Bencode::str("decode")]),
        )]);
        let fax = judge(&t38, t38.out_of_scope(), "t.pl", ok(), reply("error", None));
        let refused = judge(&step(vec![]), None, "t.pl", reply("error", None), ok());
        assert_eq!(fax.out_of_scope, Some("T.38"));
        let f = figures(&[plain, fax, refused], 2);
        assert_eq!(
            (
                f.replayed,
                f.cases,
                f.out_of_scope,
                f.skipped,
                f.ok,
                f.exact
            ),
            (3, 1, 1, 2, 1, 1),
            "{f:?}"
        );
        assert_eq!(f.percent(f.exact), 100.0);
    }

    #[test]
    fn where_the_rtpengine_run_here_departs_from_its_script_the_script_is_the_reference() {
        let sdp = |fmts: &str| {
            format!("v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP {fmts}\r\n")
        };
        let step = |expected: &str| Step {
            line: 1,
            command: "offer".into(),
            name: "x".into(),
            from_tag: None,
            to_tag: None,
            body: Vec::new(),
            expected: Some(expected.replace("4000", "PORT")),
        };
        let ok = |fmts: &str| reply("ok", Some(&sdp(fmts)));
        // The build run here lacks a codec the script adds (8 96): secrelay adds it.
        let lacking = judge(&step(&sdp("8 96")), None, "t.pl", ok("8"), ok("8 96"));
        assert_eq!(
            lacking
                .script
                .map(|a| (a.rtpengine.sections, a.secrelay.sections)),
            Some((false, true))
        );
        assert!(!lacking.sections);
        // Where both agree with the script, the daemon is the reference as before.
        let agreeing = judge(&step(&sdp("0")), None, "t.pl", ok("0"), ok("8"));
        let f = figures(&[lacking, agreeing], 0);
        assert_eq!(
            (f.sections, f.by_reference, f.script_cases),
            (0, [1, 1, 1], 2)
        );
        assert_eq!((f.script_rtpengine, f.script_secrelay), (1, 1));
    }
}
