//! `secrelay lab ng-compare`: rtpengine and secrelay answering the same ng requests. With
//! scripts (rtpengine's `t/auto-daemon-tests*.pl`, from its source tree), their offers and
//! answers replayed against both and the SDPs compared; with `--load`, offer/answer/delete
//! at rising rates against each.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use secrelay_lab::client::ng_compare::{
    check_binary, figures, load_row, read_scripts, replay, Case, Daemons, Interface, LoadRow,
};

/// Flags of `secrelay lab ng-compare`.
#[derive(Args, Debug)]
pub struct NgCompareArgs {
    /// rtpengine's test scripts (`t/auto-daemon-tests*.pl` of its source): their offers and
    /// answers are replayed. Read at run time; not shipped with secrelay.
    pub scripts: Vec<PathBuf>,
    /// The rtpengine binary (Debian's rtpengine-daemon).
    #[arg(long, default_value = "/usr/bin/rtpengine")]
    pub rtpengine: PathBuf,
    /// The secrelay binary to compare (default: this one), e.g. a release build without the
    /// lab (`cargo build --release -p secrelay --no-default-features`) for `--load`.
    #[arg(long)]
    pub secrelay: Option<PathBuf>,
    /// Media interfaces both daemons get, `LOCAL[!ADVERTISED]`, comma-separated (rtpengine's
    /// tests announce 203.0.113.1 and 2001:db8:4321::1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1!203.0.113.1,::1!2001:db8:4321::1"
    )]
    pub interfaces: Vec<String>,
    /// Do not pass the interfaces to secrelay (a build older than `serve --interface`: it gets
    /// the first interface's addresses only).
    #[arg(long)]
    pub no_secrelay_interfaces: bool,
    /// More arguments for rtpengine (repeat the flag).
    #[arg(long = "rtpengine-arg", allow_hyphen_values = true)]
    pub rtpengine_args: Vec<String>,
    /// More arguments for `secrelay serve` (repeat the flag).
    #[arg(long = "secrelay-arg", allow_hyphen_values = true)]
    pub secrelay_args: Vec<String>,
    /// Only calls with a request whose test name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Write every case's differences here (default: the first 40 to standard output).
    #[arg(long)]
    pub diffs: Option<PathBuf>,
    /// Write the cases (or load rows) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Load instead: calls (offer, answer, delete) per second, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub load: Vec<f64>,
    /// Seconds per daemon and rate under `--load`.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
}

fn daemons(a: &NgCompareArgs) -> Result<Daemons> {
    check_binary(&a.rtpengine, "--rtpengine")?;
    let interfaces = a
        .interfaces
        .iter()
        .map(|s| {
            s.parse::<Interface>()
                .map_err(|e| anyhow!("--interfaces: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Daemons {
        rtpengine: a.rtpengine.clone(),
        secrelay: match &a.secrelay {
            Some(p) => {
                check_binary(p, "--secrelay")?;
                p.clone()
            }
            None => std::env::current_exe()?,
        },
        interfaces,
        rtpengine_args: a.rtpengine_args.clone(),
        secrelay_args: a.secrelay_args.clone(),
        secrelay_interfaces: !a.no_secrelay_interfaces,
    })
}

/// A case's report: where, what each said, what differs.
fn case_text(c: &Case) -> String {
    let level = if c.exact {
        "exact"
    } else if c.lines {
        "lines"
    } else if c.sections {
        "sections"
    } else if c.secrelay.result == "ok" {
        "ok"
    } else {
        "error"
    };
    let mut s = format!(
        "{}:{} {} {:?} [{level}]\n",
        c.file, c.line, c.command, c.name
    );
    for d in &c.diff {
        s.push_str("    ");
        s.push_str(d);
        s.push('\n');
    }
    s
}

fn conformance(a: &NgCompareArgs, d: &Daemons) -> Result<()> {
    let suite = read_scripts(&a.scripts)?;
    let mut rtpengine = d.start("rtpengine")?;
    let mut secrelay = d.start("secrelay")?;
    let cases = replay(&suite, &mut rtpengine, &mut secrelay, a.only.as_deref());
    let f = figures(&cases, suite.skipped.len());
    let scope: Vec<&Case> = cases.iter().filter(|c| c.in_scope()).collect();
    let misses: Vec<&&Case> = scope.iter().filter(|c| !c.exact).collect();
    match &a.diffs {
        Some(p) => {
            let mut text: String = misses.iter().map(|c| case_text(c)).collect();
            text.push_str("\nleft out of the replay:\n");
            for k in &suite.skipped {
                text.push_str(&format!("{}:{} {}: {}\n", k.file, k.line, k.command, k.why));
            }
            std::fs::write(p, text).map_err(|e| anyhow!("--diffs {}: {e}", p.display()))?;
        }
        None => misses
            .iter()
            .take(40)
            .for_each(|c| print!("{}", case_text(c))),
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&cases)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    println!(
        "offers and answers replayed: {} ({} left out: computed at run time); rtpengine answered {} with SDP, \
         {} of them asking for T.38, recording or DTMF injection (not counted): {} cases",
        f.replayed,
        f.skipped,
        f.cases + f.out_of_scope,
        f.out_of_scope,
        f.cases
    );
    println!(
        "{:<10} {:>8} {:>16} {:>16} {:>10}",
        "", "reply ok", "same sections", "same lines", "exact SDP"
    );
    println!(
        "{:<10} {:>7.1}% {:>15.1}% {:>15.1}% {:>9.1}%",
        "secrelay",
        f.percent(f.ok),
        f.percent(f.sections),
        f.percent(f.lines),
        f.percent(f.exact)
    );
    println!(
        "{:<10} {:>8} {:>15.1}% {:>15.1}% {:>9.1}%   (the script the reference where the rtpengine run here departs from it)",
        "by script",
        "",
        f.percent(f.by_reference[0]),
        f.percent(f.by_reference[1]),
        f.percent(f.by_reference[2])
    );
    let of_script = |n: usize| 100.0 * n as f64 / f.script_cases.max(1) as f64;
    println!(
        "media sections as the scripts expect them ({} cases with an expected SDP): \
         rtpengine run here {:.1}%, secrelay {:.1}%",
        f.script_cases,
        of_script(f.script_rtpengine),
        of_script(f.script_secrelay)
    );
    Ok(())
}

fn load(a: &NgCompareArgs, d: &Daemons) -> Result<()> {
    let mut rows: Vec<LoadRow> = Vec::new();
    let mut first = 0;
    for which in ["rtpengine", "secrelay"] {
        let mut r = d.start(which)?;
        for &rate in &a.load {
            eprintln!("ng-compare: {which}, {rate} calls/s …");
            rows.push(load_row(&mut r, rate, a.duration, first)?);
            first += 1_000_000;
        }
    }
    println!(
        "{:<10} {:>9} {:>9} {:>11} {:>12} {:>12} {:>7} {:>12}",
        "daemon",
        "offered/s",
        "calls/s",
        "requests/s",
        "o+a p50 µs",
        "o+a p99 µs",
        "errors",
        "CPU µs/req"
    );
    for r in &rows {
        println!(
            "{:<10} {:>9.0} {:>9.1} {:>11.1} {:>12.0} {:>12.0} {:>7} {:>12.1}",
            r.daemon,
            r.offered_calls_per_sec,
            r.calls_per_sec,
            r.requests_per_sec,
            r.offer_answer_us[0],
            r.offer_answer_us[1],
            r.errors,
            r.cpu_us_per_request
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)
            .map_err(|e| anyhow!("--json {}: {e}", p.display()))?;
    }
    Ok(())
}

/// Runs the comparison.
pub fn run(a: &NgCompareArgs) -> Result<()> {
    let d = daemons(a)?;
    if !a.load.is_empty() {
        return load(a, &d);
    }
    if a.scripts.is_empty() {
        bail!("give rtpengine's test scripts (t/auto-daemon-tests*.pl), or --load RATES");
    }
    conformance(a, &d)
}
