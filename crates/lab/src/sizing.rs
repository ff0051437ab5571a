//! The sizing summary: what one core of the machine the lab ran on carries, computed from the
//! studies of the run (never from defaults), each figure linked to the table row or plot it
//! comes from.
//!
//! [`summarize`] is a pure function of a [`LabOutput`]: it reads
//! - `srtp` (`srtp_per_packet`): unprotect + protect per packet per profile → relayed calls per
//!   core;
//! - `codec` (`codec_transcode_per_leg`, `codec_per_frame`, `codec_mix_per_leg`): transcoded
//!   calls per core per codec pair, mixed-room members per core per codec;
//! - `handshake` (`handshake_phases`): DTLS-SRTP server handshakes per second per core per
//!   certificate type, and what a reconnect storm costs;
//! - `tls` (`tls_rates`): TLS handshakes per server CPU-second;
//!
//! and ends with a verdict: which of codec, cipher and handshake dominates the cost of a
//! browser-to-telephone call. A line whose study did not run names the study to run instead.
//!
//! The model (stated in the summary itself and in `docs/lab.md`):
//! - audio in 20 ms packets: [`PACKETS_PER_S`] packets per second each way;
//! - a call is two legs through the relay: each packet is unprotected once (the sender's
//!   context) and protected once (the receiver's), both directions, so one call costs
//!   2 × 50 × (unprotect + protect) per second;
//! - one core is one second of CPU per second, entirely given to the work named (no
//!   socket I/O, no scheduling headroom): the figures are ceilings, not recommended loads.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::frame::{format_num, Cell, LabOutput, StudyReport, Table};
use crate::report::Anchors;

/// Packets per second each way for 20 ms audio packets.
pub const PACKETS_PER_S: f64 = 50.0;
/// µs of audio per packet (20 ms).
const FRAME_US: f64 = 1e6 / PACKETS_PER_S;
/// The call length used to weigh a call's one-off handshake against its per-packet costs in
/// the verdict (3 minutes, a common mean holding time of a telephone call).
pub const CALL_S: f64 = 180.0;
/// Reconnect storms costed: this many participants reconnecting at once.
pub const STORMS: [u64; 2] = [1_000, 10_000];
/// The SRTP profile the codec study protects with, and the one mixing is costed with.
pub const DEFAULT_PROFILE: &str = "AES_CM_128_HMAC_SHA1_80";
/// lab srtp's packet labels: a 20 ms G.711 (or G.722) packet and an Opus 32 kbit/s one.
const G711_PACKET: &str = "audio 172 B";
const OPUS_PACKET: &str = "opus 100 B";

/// What the summary says, for the JSON (`sizing`) and the report's first screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sizing {
    /// The model and its assumptions, one sentence each.
    pub model: Vec<String>,
    /// Which of codec, cipher and handshake dominates a call's cost here.
    pub verdict: Verdict,
    /// The sections: relayed calls per SRTP profile, transcoded calls, mixed rooms, DTLS
    /// handshakes and storms, TLS handshakes.
    pub sections: Vec<Section>,
}

/// The verdict sentence and the figures it was computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// `codec`, `cipher` or `handshake`; absent when a study it needs did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dominant: Option<String>,
    /// The sentence a reader sees.
    pub sentence: String,
    /// The figures (µs of one core per call): `codec_us`, `cipher_us`, `handshake_us`, and
    /// `break_even_s` (the call length at which the handshake equals the SRTP).
    pub figures: BTreeMap<String, Figure>,
    /// The studies to run for a verdict, when some are missing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

/// One part of the summary: a small table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// Stable id: `relay`, `transcoding`, `mixing`, `dtls_handshakes`, `tls_handshakes`.
    pub id: String,
    /// Heading.
    pub title: String,
    /// The columns, in order; each line's figures are keyed by them.
    pub columns: Vec<Column>,
    /// The lines.
    pub lines: Vec<Line>,
    /// When the section could not be computed: which study to run (e.g. "`secrelay lab
    /// codec`"), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// How the section's figures were computed, in one or two sentences.
    pub how: String,
}

/// A column of a section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// Key in each line's figures.
    pub key: String,
    /// Header.
    pub label: String,
    /// Unit of its figures (absent for text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The column's name in the short text summary `lab all` prints (absent: not printed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short: Option<String>,
}

/// A line of a section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// What the line is about (a profile, a codec pair, a certificate type).
    pub label: String,
    /// Figures by column key.
    pub figures: BTreeMap<String, Figure>,
}

/// One figure: a number or a text, and where it was read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The text (an engine's name, a reason a number is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The table rows and plots it was computed from.
    pub sources: Vec<Source>,
}

/// Where a figure comes from: a table row or a plot of a study of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The study (`srtp`, `codec`, …).
    pub study: String,
    /// The table's id, for a table row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The row's index in the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row: Option<usize>,
    /// The plot's id, for a plot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot: Option<String>,
    /// The HTML id of that row or plot in the run's `report.html` (empty until
    /// [`Sizing::link`] fills it).
    pub anchor: String,
}

impl Source {
    fn row(study: &str, table: &str, row: usize) -> Source {
        Source {
            study: study.into(),
            table: Some(table.into()),
            row: Some(row),
            plot: None,
            anchor: String::new(),
        }
    }
    fn plot(study: &str, plot: &str) -> Source {
        Source {
            study: study.into(),
            table: None,
            row: None,
            plot: Some(plot.into()),
            anchor: String::new(),
        }
    }
    /// What the link is to, for a tooltip.
    pub fn describe(&self) -> String {
        match (&self.table, self.row, &self.plot) {
            (Some(t), Some(r), _) => format!("lab {}: table {t}, row {}", self.study, r + 1),
            (Some(t), None, _) => format!("lab {}: table {t}", self.study),
            (_, _, Some(p)) => format!("lab {}: plot {p}", self.study),
            _ => format!("lab {}", self.study),
        }
    }
}

impl Figure {
    fn num(value: f64, sources: Vec<Source>) -> Figure {
        Figure {
            value: Some(value),
            text: None,
            sources,
        }
    }
    fn text(text: impl Into<String>, sources: Vec<Source>) -> Figure {
        Figure {
            value: None,
            text: Some(text.into()),
            sources,
        }
    }
    /// The figure as a person reads it.
    pub fn render(&self) -> String {
        match (self.value, &self.text) {
            (Some(v), _) => format_num(v),
            (None, Some(t)) => t.clone(),
            (None, None) => String::new(),
        }
    }
}

fn col(key: &str, label: &str, unit: Option<&str>) -> Column {
    Column {
        key: key.into(),
        label: label.into(),
        unit: unit.map(Into::into),
        short: None,
    }
}

impl Column {
    /// Printed in the short text summary as `short value`.
    fn short(mut self, short: &str) -> Column {
        self.short = Some(short.into());
        self
    }
}

/// A study's table, if the study ran and has it.
fn table<'a>(output: &'a LabOutput, study: &str, id: &str) -> Option<&'a Table> {
    output
        .studies
        .iter()
        .find(|s| s.study == study)
        .and_then(|s: &StudyReport| s.table(id))
}

fn ran(output: &LabOutput, study: &str) -> bool {
    output.studies.iter().any(|s| s.study == study)
}

fn text<'a>(row: &'a BTreeMap<String, Cell>, key: &str) -> Option<&'a str> {
    match row.get(key) {
        Some(Cell::Text(t)) => Some(t),
        _ => None,
    }
}

fn num(row: &BTreeMap<String, Cell>, key: &str) -> Option<f64> {
    row.get(key)
        .and_then(Cell::as_f64)
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// Says which study to run, and why.
fn missing(study: &str, command: &str, what: &str) -> String {
    format!("`{study}` was not in this run: run `{command}` to fill {what}.")
}

/// The summary of a run, links not yet filled (see [`Sizing::link`]).
pub fn compute(output: &LabOutput) -> Sizing {
    let relay = relay(output);
    let srtp = Srtp::read(output);
    let transcoding = transcoding(output);
    let mixing = mixing(output, &srtp);
    let dtls = dtls(output);
    let tls = tls(output);
    let verdict = verdict(output);
    Sizing {
        model: vec![
            format!(
                "Audio in 20 ms packets: {} packets per second each way.",
                format_num(PACKETS_PER_S)
            ),
            "A call is two legs through this relay: every packet is unprotected once (the sender's SRTP context) and protected once (the receiver's), in both directions.".into(),
            "One core gives one CPU-second per second to the work named, nothing else (no socket I/O, kernel or scheduling headroom): these are ceilings measured on this machine, not recommended loads.".into(),
            format!(
                "A handshake is weighed against a call of {} minutes; a reconnect storm is that many participants each making one handshake with this server.",
                format_num(CALL_S / 60.0)
            ),
        ],
        verdict,
        sections: vec![relay, transcoding, mixing, dtls, tls],
    }
}

/// The summary of a run with every link filled: [`compute`], then [`Sizing::link`] against
/// the ids the run's report gives its tables and plots.
pub fn summarize(output: &LabOutput) -> Sizing {
    let mut s = compute(output);
    s.link(&Anchors::plan(output));
    s
}

impl Sizing {
    /// Every figure's sources, for checking and linking.
    pub fn sources_mut(&mut self) -> impl Iterator<Item = &mut Source> {
        self.verdict
            .figures
            .values_mut()
            .chain(
                self.sections
                    .iter_mut()
                    .flat_map(|s| s.lines.iter_mut())
                    .flat_map(|l| l.figures.values_mut()),
            )
            .flat_map(|f| f.sources.iter_mut())
    }

    /// Every figure's sources.
    pub fn sources(&self) -> impl Iterator<Item = &Source> {
        self.verdict
            .figures
            .values()
            .chain(
                self.sections
                    .iter()
                    .flat_map(|s| s.lines.iter())
                    .flat_map(|l| l.figures.values()),
            )
            .flat_map(|f| f.sources.iter())
    }

    /// Fills each source's `anchor` with the id the report gives its row or plot (a
    /// source the report has no element for keeps an empty anchor, and is shown unlinked).
    pub fn link(&mut self, anchors: &Anchors) {
        for s in self.sources_mut() {
            let id = match (&s.table, &s.plot) {
                (Some(t), _) => anchors.table(&s.study, t, s.row),
                (None, Some(p)) => anchors.plot(&s.study, p),
                (None, None) => anchors.section(&s.study),
            };
            s.anchor = id.unwrap_or_default().to_string();
        }
    }

    /// The short summary for a terminal: the verdict, then per section its headline figures
    /// (the report and the JSON have all of them, with their sources).
    pub fn render_text(&self) -> String {
        let mut out = String::from("== Sizing: what one core of this machine carries ==\n\n");
        let _ = writeln!(out, "{}\n", self.verdict.sentence);
        for s in &self.sections {
            let _ = writeln!(out, "{}", s.title);
            if let Some(m) = &s.missing {
                let _ = writeln!(out, "  {m}");
            }
            for l in &s.lines {
                let figs: Vec<String> = s
                    .columns
                    .iter()
                    .filter_map(|c| {
                        let short = c.short.as_deref()?;
                        let f = l.figures.get(&c.key)?;
                        Some(format!("{short} {}", f.render()))
                    })
                    .collect();
                let _ = writeln!(out, "  {}: {}", l.label, figs.join(", "));
            }
        }
        out
    }
}

/// Calls per core from the SRTP work of one relayed packet (unprotect + protect, ns).
fn calls_per_core_ns(relay_ns: f64) -> f64 {
    1e9 / (2.0 * PACKETS_PER_S * relay_ns)
}

/// One way of doing a profile's SRTP on one core, with its unprotect + protect per packet
/// (ns) at the G.711 and Opus sizes and the rows they come from.
struct Candidate {
    name: String,
    g711: (f64, Vec<Source>),
    opus: Option<(f64, Vec<Source>)>,
}

/// secrelay's stacks (one per crypto provider) from `srtp_per_packet`.
fn stack_candidates(t: &Table, profile: &str) -> Vec<Candidate> {
    let at = |stack: &str, packet: &str| {
        t.rows.iter().enumerate().find_map(|(i, r)| {
            (text(r, "profile") == Some(profile)
                && text(r, "packet") == Some(packet)
                && text(r, "stack") == Some(stack))
            .then(|| {
                Some((
                    num(r, "protect_ns")? + num(r, "unprotect_ns")?,
                    vec![Source::row("srtp", "srtp_per_packet", i)],
                ))
            })
            .flatten()
        })
    };
    let mut out = Vec::new();
    for r in &t.rows {
        let Some(stack) = text(r, "stack").filter(|s| s.starts_with("secrelay")) else {
            continue;
        };
        if text(r, "profile") != Some(profile)
            || text(r, "packet") != Some(G711_PACKET)
            || out.iter().any(|c: &Candidate| c.name == stack)
        {
            continue;
        }
        if let Some(g711) = at(stack, G711_PACKET) {
            out.push(Candidate {
                name: stack.to_string(),
                g711,
                opus: at(stack, OPUS_PACKET),
            });
        }
    }
    out
}

/// secrelay's single-core batch engines from `srtp_engine_sizes` (threaded engines use more
/// than one core and are left out), in the setup with the most contexts (a relay carrying
/// thousands of calls) and batches of 64.
fn engine_candidates(t: &Table, profile: &str) -> Vec<Candidate> {
    let rows: Vec<(usize, &BTreeMap<String, Cell>)> = t
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            text(r, "profile") == Some(profile)
                && num(r, "batch") == Some(64.0)
                && text(r, "engine").is_some_and(|e| !e.starts_with("threaded"))
        })
        .collect();
    let Some(contexts) = rows
        .iter()
        .filter_map(|(_, r)| num(r, "contexts"))
        .max_by(f64::total_cmp)
    else {
        return Vec::new();
    };
    let at = |engine: &str, packet: &str| {
        let one = |op: &str| {
            rows.iter().find_map(|(i, r)| {
                (text(r, "engine") == Some(engine)
                    && text(r, "packet") == Some(packet)
                    && text(r, "op") == Some(op)
                    && num(r, "contexts") == Some(contexts))
                .then(|| num(r, "ns_per_packet").map(|v| (v, *i)))
                .flatten()
            })
        };
        let (p, pi) = one("protect")?;
        let (u, ui) = one("unprotect")?;
        Some((
            p + u,
            vec![
                Source::row("srtp", "srtp_engine_sizes", pi),
                Source::row("srtp", "srtp_engine_sizes", ui),
            ],
        ))
    };
    let mut out: Vec<Candidate> = Vec::new();
    for (_, r) in &rows {
        let Some(engine) = text(r, "engine") else {
            continue;
        };
        if out
            .iter()
            .any(|c| c.name.starts_with(&format!("{engine} engine")))
        {
            continue;
        }
        if let Some(g711) = at(engine, "172 B") {
            out.push(Candidate {
                name: format!(
                    "{engine} engine (batches of 64 over {} contexts)",
                    format_num(contexts)
                ),
                g711,
                opus: at(engine, "100 B"),
            });
        }
    }
    out
}

/// The relay section: per SRTP profile, secrelay's cheapest way of doing unprotect +
/// protect of a G.711 packet on one core, and calls per core at the G.711 and Opus sizes.
fn relay(output: &LabOutput) -> Section {
    let mut section = Section {
        id: "relay".into(),
        title: "Relay only (SRTP in, SRTP out): concurrent calls per core, per SRTP profile".into(),
        columns: vec![
            col("engine", "best secrelay engine here", None).short("with"),
            col("relay_ns", "unprotect + protect, G.711 packet", Some("ns")),
            col("calls_g711", "calls per core, G.711/G.722 20 ms (172 B)", Some("calls"))
                .short("G.711 calls"),
            col("calls_opus", "calls per core, Opus 32 kbit/s 20 ms (100 B)", Some("calls"))
                .short("Opus calls"),
        ],
        lines: Vec::new(),
        missing: None,
        how: format!(
            "From lab srtp: per profile, the cheapest unprotect + protect of a 172-byte packet among secrelay's stacks (one per crypto provider, per-packet table) and its single-core batch engines (by-size table, batches of 64 over the most contexts measured; threaded engines use more than one core and are left out); calls per core = 1 s ÷ (2 directions × {} packets/s × (unprotect + protect)), at 172 B (G.711, G.722) and at 100 B (Opus) with that engine.",
            format_num(PACKETS_PER_S)
        ),
    };
    let Some(t) = table(output, "srtp", "srtp_per_packet") else {
        section.missing = Some(missing(
            "srtp",
            "secrelay lab srtp",
            "calls per core per SRTP profile",
        ));
        return section;
    };
    let sizes = table(output, "srtp", "srtp_engine_sizes");
    let mut profiles: Vec<&str> = Vec::new();
    for r in &t.rows {
        if let Some(p) = text(r, "profile") {
            if !profiles.contains(&p) {
                profiles.push(p);
            }
        }
    }
    for profile in profiles {
        let mut candidates = stack_candidates(t, profile);
        if let Some(sizes) = sizes {
            candidates.extend(engine_candidates(sizes, profile));
        }
        let best = candidates
            .into_iter()
            .min_by(|a, b| a.g711.0.total_cmp(&b.g711.0));
        let mut figures = BTreeMap::new();
        match best {
            Some(c) => {
                let (relay_ns, src) = c.g711;
                figures.insert("engine".into(), Figure::text(c.name, src.clone()));
                figures.insert("relay_ns".into(), Figure::num(relay_ns, src.clone()));
                figures.insert(
                    "calls_g711".into(),
                    Figure::num(calls_per_core_ns(relay_ns), src),
                );
                if let Some((ns, src)) = c.opus {
                    figures.insert("calls_opus".into(), Figure::num(calls_per_core_ns(ns), src));
                }
            }
            None => {
                figures.insert(
                    "engine".into(),
                    Figure::text("no secrelay stack measured this profile", Vec::new()),
                );
            }
        }
        section.lines.push(Line {
            label: profile.to_string(),
            figures,
        });
    }
    section
}

/// SRTP per packet (unprotect + protect, µs) for mixing: the default stack, the default profile.
struct Srtp {
    g711: Option<(f64, usize)>,
    opus: Option<(f64, usize)>,
}

impl Srtp {
    fn read(output: &LabOutput) -> Srtp {
        let t = table(output, "srtp", "srtp_per_packet");
        let at = |packet: &str| {
            let t = t?;
            t.rows.iter().enumerate().find_map(|(i, r)| {
                (text(r, "profile") == Some(DEFAULT_PROFILE)
                    && text(r, "packet") == Some(packet)
                    && text(r, "stack") == Some("secrelay"))
                .then(|| Some(((num(r, "protect_ns")? + num(r, "unprotect_ns")?) / 1e3, i)))
                .flatten()
            })
        };
        Srtp {
            g711: at(G711_PACKET),
            opus: at(OPUS_PACKET),
        }
    }
}

/// A transcoding pipeline's label split into its codecs: "Opus 48 kHz → PCMU (48 → 8 kHz)"
/// gives ("Opus 48 kHz", "PCMU").
fn pipeline_codecs(label: &str) -> Option<(String, String)> {
    let base = label.split(" (").next()?;
    let (from, to) = base.split_once(" → ")?;
    Some((from.trim().to_string(), to.trim().to_string()))
}

/// The transcoding section: per codec pair, calls per core with both directions transcoded
/// (decode, resample, re-frame, encode) plus SRTP on both legs.
fn transcoding(output: &LabOutput) -> Section {
    let mut section = Section {
        id: "transcoding".into(),
        title: "With transcoding: concurrent calls per core, per codec pair".into(),
        columns: vec![
            col("call_us", "codec + SRTP per 20 ms of a call", Some("µs")),
            col("codec_share_pct", "codec's share", Some("%")),
            col("calls", "calls per core", Some("calls")).short("calls"),
        ],
        lines: Vec::new(),
        missing: None,
        how: format!(
            "From lab codec's transcoding table: a call between codecs A and B sends one 20 ms packet each way per 20 ms, one through the A → B pipeline and one through B → A, each with SRTP unprotect in and protect out ({DEFAULT_PROFILE}); calls per core = 20 ms ÷ the sum. A pair whose reverse direction the study does not time shows one-way legs per core instead."
        ),
    };
    let Some(t) = table(output, "codec", "codec_transcode_per_leg") else {
        section.missing = Some(missing(
            "codec",
            "secrelay lab codec",
            "transcoded calls per core",
        ));
        return section;
    };
    // (from, to, transcode µs, SRTP µs, row)
    let legs: Vec<(String, String, f64, f64, usize)> = t
        .rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let (from, to) = pipeline_codecs(text(r, "pipeline")?)?;
            Some((from, to, num(r, "transcode_us")?, num(r, "srtp_us")?, i))
        })
        .collect();
    let mut done: Vec<usize> = Vec::new();
    for (k, (from, to, tc, srtp, row)) in legs.iter().enumerate() {
        if done.contains(&k) {
            continue;
        }
        done.push(k);
        let back = legs
            .iter()
            .enumerate()
            .find(|(j, l)| !done.contains(j) && l.0 == *to && l.1 == *from);
        let mut figures = BTreeMap::new();
        let label;
        match back {
            Some((j, (_, _, tc2, srtp2, row2))) => {
                done.push(j);
                label = format!("{from} ↔ {to}");
                let src = vec![
                    Source::row("codec", "codec_transcode_per_leg", *row),
                    Source::row("codec", "codec_transcode_per_leg", *row2),
                    Source::plot("codec", "codec_vs_srtp_per_leg"),
                ];
                let call = tc + srtp + tc2 + srtp2;
                figures.insert("call_us".into(), Figure::num(call, src.clone()));
                figures.insert(
                    "codec_share_pct".into(),
                    Figure::num((tc + tc2) / call * 100.0, src.clone()),
                );
                figures.insert("calls".into(), Figure::num(FRAME_US / call, src));
            }
            None => {
                label = format!("{from} → {to} (one way)");
                let src = vec![
                    Source::row("codec", "codec_transcode_per_leg", *row),
                    Source::plot("codec", "codec_vs_srtp_per_leg"),
                ];
                let leg = tc + srtp;
                figures.insert("call_us".into(), Figure::num(leg, src.clone()));
                figures.insert(
                    "codec_share_pct".into(),
                    Figure::num(tc / leg * 100.0, src.clone()),
                );
                figures.insert(
                    "calls".into(),
                    Figure::text(
                        format!(
                            "reverse not timed; {} one-way {from} → {to} legs",
                            format_num(FRAME_US / leg)
                        ),
                        src,
                    ),
                );
            }
        }
        section.lines.push(Line { label, figures });
    }
    section
}

/// The codec whose encode and decode a mixing bus at `rate` Hz is costed with (as named in
/// lab codec's per-frame table), and its packet.
fn mix_codec(rate: f64) -> Option<(&'static str, Option<i32>, bool)> {
    // (codec, its setting in the per-frame table, whether its packet is Opus's 100 B)
    match rate as u32 {
        8000 => Some(("PCMU", None, false)),
        16_000 => Some(("G.722", None, false)),
        48_000 => Some(("Opus 48 kHz mono", Some(10), true)),
        _ => None,
    }
}

/// The mixing section: per bus (codec, members), members per core and N-party calls per
/// core, each member's packet unprotected, decoded, mixed (N−1), encoded and protected.
fn mixing(output: &LabOutput, srtp: &Srtp) -> Section {
    let mut section = Section {
        id: "mixing".into(),
        title: "With mixing (N−1, as for telephones): members and calls per core, per codec".into(),
        columns: vec![
            col("member_us", "per member per 20 ms", Some("µs")),
            col("members", "members per core", Some("members")).short("members"),
            col("calls", "calls of that many members per core", Some("calls")).short("calls"),
        ],
        lines: Vec::new(),
        missing: None,
        how: format!(
            "Per member and 20 ms: SRTP unprotect + protect of its packet (lab srtp, {DEFAULT_PROFILE}, secrelay's default stack; 172 B for G.711 and G.722, 100 B for Opus), one decode and one encode (lab codec's per-frame table, secrelay's codecs; Opus 48 kHz mono, complexity 10, 32 kbit/s), and its share of the mixer's tick (lab codec's mixing table, the bus at the codec's rate); members per core = 20 ms ÷ that; calls = members ÷ members per room."
        ),
    };
    let mut need = Vec::new();
    if !ran(output, "codec") {
        need.push("`secrelay lab codec`");
    }
    if !ran(output, "srtp") {
        need.push("`secrelay lab srtp`");
    }
    if !need.is_empty() {
        section.missing = Some(format!(
            "Needs lab codec (codec and mixer cost) and lab srtp (SRTP per packet): run {} to fill mixed-room members per core.",
            need.join(" and ")
        ));
        return section;
    }
    let (Some(frames), Some(mix)) = (
        table(output, "codec", "codec_per_frame"),
        table(output, "codec", "codec_mix_per_leg"),
    ) else {
        section.missing = Some("lab codec ran without its per-frame or mixing table.".into());
        return section;
    };
    for (m, r) in mix.rows.iter().enumerate() {
        let (Some(rate), Some(n), Some(per_leg)) =
            (num(r, "rate"), num(r, "members"), num(r, "per_leg_us"))
        else {
            continue;
        };
        let Some((codec, complexity, opus)) = mix_codec(rate) else {
            continue;
        };
        let label = format!("{codec}, rooms of {}", format_num(n));
        let mut figures = BTreeMap::new();
        let setting = complexity.map(|c| format!("complexity {c}"));
        let frame = frames.rows.iter().enumerate().find(|(_, f)| {
            text(f, "codec") == Some(codec)
                && text(f, "implementation") == Some("secrelay")
                && setting
                    .as_deref()
                    .is_none_or(|s| text(f, "setting") == Some(s))
                && (!opus || num(f, "kbps") == Some(32.0))
        });
        let coded = frame.and_then(|(i, f)| Some((num(f, "encode_us")? + num(f, "decode_us")?, i)));
        let packet = if opus { srtp.opus } else { srtp.g711 };
        match (coded, packet) {
            (Some((codec_us, fi)), Some((srtp_us, si))) => {
                let src = vec![
                    Source::row("codec", "codec_mix_per_leg", m),
                    Source::row("codec", "codec_per_frame", fi),
                    Source::row("srtp", "srtp_per_packet", si),
                ];
                let member = per_leg + codec_us + srtp_us;
                let members = FRAME_US / member;
                figures.insert("member_us".into(), Figure::num(member, src.clone()));
                figures.insert("members".into(), Figure::num(members, src.clone()));
                figures.insert("calls".into(), Figure::num(members / n, src));
            }
            (None, _) => {
                figures.insert(
                    "members".into(),
                    Figure::text(format!("lab codec has no secrelay {codec} row"), Vec::new()),
                );
            }
            (_, None) => {
                figures.insert(
                    "members".into(),
                    Figure::text(
                        format!("lab srtp has no {DEFAULT_PROFILE} row for this packet"),
                        Vec::new(),
                    ),
                );
            }
        }
        section.lines.push(Line { label, figures });
    }
    section
}

/// Per certificate type, the cheapest measured ECDHE suite's server CPU per DTLS handshake.
fn dtls_rows(t: &Table) -> Vec<(String, f64, usize)> {
    let mut certs: Vec<(String, f64, usize)> = Vec::new();
    for (i, r) in t.rows.iter().enumerate() {
        let (Some(cert), Some(us)) = (text(r, "cert"), num(r, "server_us")) else {
            continue;
        };
        if text(r, "status") != Some("measured")
            || !text(r, "kx").is_some_and(|k| k.starts_with("ECDHE"))
        {
            continue;
        }
        match certs.iter_mut().find(|c| c.0 == cert) {
            Some(c) if us < c.1 => *c = (cert.to_string(), us, i),
            Some(_) => {}
            None => certs.push((cert.to_string(), us, i)),
        }
    }
    certs
}

fn storm_columns() -> Vec<Column> {
    STORMS
        .iter()
        .map(|n| {
            col(
                &format!("storm_{n}_s"),
                &format!("storm of {} reconnects", format_num(*n as f64)),
                Some("core-s"),
            )
            .short(&format!("core-seconds for {}", format_num(*n as f64)))
        })
        .collect()
}

fn storm_figures(figures: &mut BTreeMap<String, Figure>, server_us: f64, src: &[Source]) {
    for n in STORMS {
        figures.insert(
            format!("storm_{n}_s"),
            Figure::num(n as f64 * server_us / 1e6, src.to_vec()),
        );
    }
}

/// The DTLS section: per certificate type, server handshakes per second per core and the
/// reconnect storms in seconds of one core.
fn dtls(output: &LabOutput) -> Section {
    let mut columns = vec![
        col("suite", "suite (engine)", None),
        col("server_us", "server CPU per handshake", Some("µs")),
        col("per_s", "handshakes per second per core", Some("/s")).short("handshakes/s"),
    ];
    columns.extend(storm_columns());
    let mut section = Section {
        id: "dtls_handshakes".into(),
        title: "Reconnect storms: DTLS-SRTP handshakes per core, per certificate type".into(),
        columns,
        lines: Vec::new(),
        missing: None,
        how: "From lab handshake's phase table (DTLS 1.2, mutual authentication with both certificates of the row's type, in memory): per certificate type, the measured ECDHE suite with the least server CPU per handshake; handshakes per second per core = 1 s ÷ that; a storm of N reconnects costs N × that of one core (the server's cookie exchange included; the clients' side and the network's delay are not on this core).".into(),
    };
    let Some(t) = table(output, "handshake", "handshake_phases") else {
        section.missing = Some(missing(
            "handshake",
            "secrelay lab handshake --in-memory",
            "DTLS handshakes per core and reconnect storms",
        ));
        return section;
    };
    for (cert, us, i) in dtls_rows(t) {
        let r = &t.rows[i];
        let src = vec![
            Source::row("handshake", "handshake_phases", i),
            Source::plot("handshake", "handshake_phases"),
        ];
        let mut figures = BTreeMap::new();
        figures.insert(
            "suite".into(),
            Figure::text(
                format!(
                    "{} ({})",
                    text(r, "suite").unwrap_or("?"),
                    text(r, "engine").unwrap_or("?")
                ),
                src.clone(),
            ),
        );
        figures.insert("server_us".into(), Figure::num(us, src.clone()));
        figures.insert("per_s".into(), Figure::num(1e6 / us, src.clone()));
        storm_figures(&mut figures, us, &src);
        section.lines.push(Line {
            label: cert,
            figures,
        });
    }
    section
}

/// The TLS section: secrelay's HTTPS server, handshakes per server CPU-second per scenario.
fn tls(output: &LabOutput) -> Section {
    let mut columns = vec![
        col("server_us", "server CPU per handshake", Some("µs")),
        col("per_s", "handshakes per server CPU-second", Some("/s")).short("handshakes/s"),
    ];
    columns.extend(storm_columns());
    let mut section = Section {
        id: "tls_handshakes".into(),
        title: "TLS handshakes (signaling, HTTPS): per core, per certificate type".into(),
        columns,
        lines: Vec::new(),
        missing: None,
        how: "From lab handshake --tls's rates table, secrelay's HTTPS server (one core, a real TCP client on loopback): handshakes per server CPU-second per scenario; a storm of N reconnects costs N ÷ that of one core.".into(),
    };
    let Some(t) = table(output, "tls", "tls_rates") else {
        section.missing = Some(missing(
            "tls",
            "secrelay lab handshake --tls",
            "TLS handshakes per core",
        ));
        return section;
    };
    for (i, r) in t.rows.iter().enumerate() {
        if text(r, "server") != Some("secrelay") {
            continue;
        }
        let (Some(scenario), Some(per_s)) = (text(r, "scenario"), num(r, "per_cpu_s")) else {
            continue;
        };
        let src = vec![
            Source::row("tls", "tls_rates", i),
            Source::plot("tls", "tls_handshakes_per_cpu_s"),
        ];
        let us = 1e6 / per_s;
        let mut figures = BTreeMap::new();
        figures.insert("server_us".into(), Figure::num(us, src.clone()));
        figures.insert("per_s".into(), Figure::num(per_s, src.clone()));
        storm_figures(&mut figures, us, &src);
        section.lines.push(Line {
            label: scenario.to_string(),
            figures,
        });
    }
    section
}

/// The verdict: a browser (Opus 48 kHz, DTLS-SRTP with an ECDSA P-256 certificate) calling a
/// telephone (PCMU) through this gateway for [`CALL_S`] seconds: the transcoding, the SRTP
/// and the one DTLS handshake, in µs of one core.
fn verdict(output: &LabOutput) -> Verdict {
    let mut missing_studies = Vec::new();
    if !ran(output, "codec") {
        missing_studies.push("`secrelay lab codec`".to_string());
    }
    if !ran(output, "handshake") {
        missing_studies.push("`secrelay lab handshake --in-memory`".to_string());
    }
    let none = |sentence: String, missing: Vec<String>| Verdict {
        dominant: None,
        sentence,
        figures: BTreeMap::new(),
        missing,
    };
    if !missing_studies.is_empty() {
        return none(
            format!(
                "Which of codec, cipher and handshake dominates a call needs lab codec (codec and SRTP per packet) and lab handshake (DTLS per handshake): run {} for the verdict.",
                missing_studies.join(" and ")
            ),
            missing_studies,
        );
    }
    let legs = table(output, "codec", "codec_transcode_per_leg").map(|t| {
        t.rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let (from, to) = pipeline_codecs(text(r, "pipeline")?)?;
                Some((from, to, num(r, "transcode_us")?, num(r, "srtp_us")?, i))
            })
            .collect::<Vec<_>>()
    });
    let leg = |from: &str, to: &str| {
        legs.as_ref()?
            .iter()
            .find(|l| l.0 == from && l.1 == to)
            .cloned()
    };
    let hs = table(output, "handshake", "handshake_phases")
        .and_then(|t| dtls_rows(t).into_iter().find(|c| c.0 == "ecdsa-p256"));
    let (Some(a), Some(b), Some((_, hs_us, hs_row))) =
        (leg("Opus 48 kHz", "PCMU"), leg("PCMU", "Opus 48 kHz"), hs)
    else {
        return none(
            "No verdict: this run's lab codec has no Opus 48 kHz ↔ PCMU transcoding rows with SRTP beside them, or lab handshake no measured ECDSA P-256 row.".into(),
            Vec::new(),
        );
    };
    let packets = PACKETS_PER_S * CALL_S;
    let codec_us = (a.2 + b.2) * packets;
    let cipher_us = (a.3 + b.3) * packets;
    let handshake_us = hs_us;
    let codec_src = vec![
        Source::row("codec", "codec_transcode_per_leg", a.4),
        Source::row("codec", "codec_transcode_per_leg", b.4),
        Source::plot("codec", "codec_vs_srtp_per_leg"),
    ];
    let hs_src = vec![
        Source::row("handshake", "handshake_phases", hs_row),
        Source::plot("handshake", "handshake_phases"),
    ];
    // The call length at which the handshake costs as much as the SRTP so far.
    let break_even_s = handshake_us / ((a.3 + b.3) * PACKETS_PER_S);
    let parts = [
        ("codec", codec_us),
        ("cipher", cipher_us),
        ("handshake", handshake_us),
    ];
    let (dominant, top) = parts
        .iter()
        .copied()
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .expect("three parts");
    let second = parts
        .iter()
        .filter(|p| p.0 != dominant)
        .map(|p| p.1)
        .max_by(f64::total_cmp)
        .unwrap_or(0.0);
    let ms = |us: f64| format_num(us / 1e3);
    let what = match dominant {
        "codec" => "the codec (transcoding)",
        "cipher" => "the cipher (SRTP)",
        _ => "the handshake (DTLS)",
    };
    let sentence = format!(
        "On this machine {what} dominates the cost of a call: a {min}-minute call from a browser (Opus 48 kHz, DTLS-SRTP, ECDSA P-256) to a telephone (PCMU) through this gateway costs {c} ms of one core in transcoding, {s} ms in SRTP ({DEFAULT_PROFILE}) and {h} ms in its one DTLS handshake; {what} is {ratio}× the next. The handshake costs as much as the first {be} s of the call's SRTP, so on a relayed call without transcoding it outweighs the SRTP of calls shorter than that, and in a reconnect storm.",
        min = format_num(CALL_S / 60.0),
        c = ms(codec_us),
        s = ms(cipher_us),
        h = ms(handshake_us),
        ratio = format_num(top / second.max(f64::MIN_POSITIVE)),
        be = format_num(break_even_s),
    );
    let mut figures = BTreeMap::new();
    figures.insert("codec_us".into(), Figure::num(codec_us, codec_src.clone()));
    figures.insert(
        "cipher_us".into(),
        Figure::num(cipher_us, codec_src.clone()),
    );
    figures.insert(
        "handshake_us".into(),
        Figure::num(handshake_us, hs_src.clone()),
    );
    let mut be_src = codec_src;
    be_src.extend(hs_src);
    figures.insert("break_even_s".into(), Figure::num(break_even_s, be_src));
    Verdict {
        dominant: Some(dominant.into()),
        sentence,
        figures,
        missing: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Method, Plot, PlotKind};
    use crate::machine::Machine;

    fn method() -> Method {
        Method {
            timed: "synthetic".into(),
            quick: true,
            smoke: false,
            warmup_ms: 0.0,
            runs: 1,
            run_ms: 0.0,
            harness_overhead_ns: 0.0,
            spread: String::new(),
            instructions: String::new(),
            machine: Machine {
                cpu_model: "test CPU".into(),
                cores: 2,
                cpu_features: Vec::new(),
                memory_gib: 1.0,
                os: "test".into(),
            },
            versions: BTreeMap::new(),
            date: "2026-01-01T00:00:00Z".into(),
            elapsed_s: 0.0,
        }
    }

    fn plot(id: &str) -> Plot {
        Plot {
            id: id.into(),
            title: id.into(),
            kind: PlotKind::Bars,
            x_label: String::new(),
            y_label: String::new(),
            log_y: false,
            categories: vec!["a".into()],
            series: Vec::new(),
        }
    }

    fn study(name: &str, tables: Vec<Table>, plots: Vec<&str>) -> StudyReport {
        StudyReport {
            study: name.into(),
            title: format!("study {name}"),
            seeds: Vec::new(),
            method: method(),
            tables,
            plots: plots.into_iter().map(plot).collect(),
            notes: Vec::new(),
        }
    }

    fn srtp() -> StudyReport {
        let mut t = Table::new("srtp_per_packet", "per packet");
        let row = |profile: &str, packet: &str, stack: &str, p: f64, u: f64| {
            vec![
                ("profile", Cell::text(profile)),
                ("packet", Cell::text(packet)),
                ("stack", Cell::text(stack)),
                ("protect_ns", Cell::num(p)),
                ("unprotect_ns", Cell::num(u)),
            ]
        };
        let cm = DEFAULT_PROFILE;
        t.push(row(cm, "opus 100 B", "secrelay", 300.0, 400.0)); // 0
        t.push(row(cm, "audio 172 B", "secrelay", 400.0, 600.0)); // 1: 1,000 ns
        t.push(row(cm, "opus 100 B", "secrelay/openssl", 200.0, 300.0)); // 2: 500 ns
        t.push(row(cm, "audio 172 B", "secrelay/openssl", 300.0, 500.0)); // 3: 800 ns, best
                                                                          // A peer is cheaper, but the summary sizes secrelay.
        t.push(row(cm, "audio 172 B", "libsrtp 2 + OpenSSL", 100.0, 100.0)); // 4
        t.push(row(
            "AEAD_AES_128_GCM",
            "audio 172 B",
            "secrelay",
            2000.0,
            3000.0,
        )); // 5
            // A stack that could not run the profile.
        t.push(vec![
            ("profile", Cell::text("NULL_HMAC_SHA1_80")),
            ("packet", Cell::text("audio 172 B")),
            ("stack", Cell::text("secrelay")),
            ("protect_ns", Cell::not_offered("no")),
            ("unprotect_ns", Cell::not_offered("no")),
        ]); // 6
        study(
            "srtp",
            vec![t],
            vec!["srtp_cost_vs_size_aes_cm_128_hmac_sha1_80"],
        )
    }

    fn codec() -> StudyReport {
        let mut frames = Table::new("codec_per_frame", "per frame");
        let frame = |codec: &str, setting: &str, imp: &str, kbps: f64, e: f64, d: f64| {
            vec![
                ("codec", Cell::text(codec)),
                ("setting", Cell::text(setting)),
                ("implementation", Cell::text(imp)),
                ("kbps", Cell::num(kbps)),
                ("encode_us", Cell::num(e)),
                ("decode_us", Cell::num(d)),
            ]
        };
        frames.push(frame("PCMU", "", "textbook G.711", 64.0, 40.0, 80.0)); // 0
        frames.push(frame("PCMU", "", "secrelay", 64.0, 2.0, 3.0)); // 1
        frames.push(frame(
            "Opus 48 kHz mono",
            "complexity 10",
            "secrelay",
            32.0,
            500.0,
            100.0,
        )); // 2
        let mut legs = Table::new("codec_transcode_per_leg", "per leg");
        let leg = |p: &str, t: f64, s: f64| {
            vec![
                ("pipeline", Cell::text(p)),
                ("transcode_us", Cell::num(t)),
                ("srtp_us", Cell::num(s)),
            ]
        };
        legs.push(leg("Opus 48 kHz → PCMU (48 → 8 kHz)", 250.0, 20.0)); // 0
        legs.push(leg("G.722 → PCMU (16 → 8 kHz)", 100.0, 30.0)); // 1
        legs.push(leg("PCMU → Opus 48 kHz (8 → 48 kHz)", 700.0, 20.0)); // 2
        let mut mix = Table::new("codec_mix_per_leg", "mixing");
        mix.push([
            ("rate", Cell::num(8000.0)),
            ("members", Cell::num(3.0)),
            ("per_leg_us", Cell::num(20.0)),
        ]);
        mix.push([
            ("rate", Cell::num(48000.0)),
            ("members", Cell::num(10.0)),
            ("per_leg_us", Cell::num(25.0)),
        ]);
        study(
            "codec",
            vec![frames, legs, mix],
            vec!["codec_vs_srtp_per_leg", "codec_realtime_factor"],
        )
    }

    fn handshake() -> StudyReport {
        let mut t = Table::new("handshake_phases", "phases");
        let row = |suite: &str, cert: &str, kx: &str, status: &str, server: Option<f64>| {
            let mut r = vec![
                ("suite", Cell::text(suite)),
                ("cert", Cell::text(cert)),
                ("engine", Cell::text("dimpl")),
                ("kx", Cell::text(kx)),
                ("status", Cell::text(status)),
            ];
            if let Some(s) = server {
                r.push(("server_us", Cell::num(s)));
            }
            r
        };
        t.push(row(
            "ECDHE-ECDSA-A",
            "rsa-2048",
            "ECDHE X25519",
            "not applicable",
            None,
        )); // 0
        t.push(row(
            "ECDHE-ECDSA-A",
            "ecdsa-p256",
            "ECDHE X25519",
            "measured",
            Some(250.0),
        )); // 1
        t.push(row(
            "ECDHE-ECDSA-B",
            "ecdsa-p256",
            "ECDHE X25519",
            "measured",
            Some(200.0),
        )); // 2
        t.push(row(
            "ECDHE-RSA-A",
            "rsa-2048",
            "ECDHE X25519",
            "measured",
            Some(700.0),
        )); // 3
            // DHE is dearer and not what a WebRTC peer negotiates: never the figure.
        t.push(row(
            "DHE-RSA-A",
            "rsa-2048",
            "DHE ffdhe2048",
            "measured",
            Some(100.0),
        )); // 4
        study("handshake", vec![t], vec!["handshake_phases"])
    }

    fn tls() -> StudyReport {
        let mut t = Table::new("tls_rates", "rates");
        for (server, scenario, per) in [
            ("nginx", "TLS 1.3 full ecdsa-p256", 3000.0),
            ("secrelay", "TLS 1.3 full ecdsa-p256", 2500.0),
            ("secrelay", "TLS 1.3 resumed ecdsa-p256", 10000.0),
        ] {
            t.push([
                ("server", Cell::text(server)),
                ("scenario", Cell::text(scenario)),
                ("per_cpu_s", Cell::num(per)),
            ]);
        }
        study("tls", vec![t], vec!["tls_handshakes_per_cpu_s"])
    }

    fn output(studies: Vec<StudyReport>) -> LabOutput {
        LabOutput {
            secrelay: "test".into(),
            studies,
            sizing: None,
        }
    }

    fn section<'a>(s: &'a Sizing, id: &str) -> &'a Section {
        s.sections.iter().find(|x| x.id == id).expect(id)
    }

    fn fig<'a>(sec: &'a Section, line: &str, key: &str) -> &'a Figure {
        let l = sec
            .lines
            .iter()
            .find(|l| l.label == line)
            .unwrap_or_else(|| panic!("{}: no line {line:?}", sec.id));
        l.figures
            .get(key)
            .unwrap_or_else(|| panic!("{}/{line}: no {key}", sec.id))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn nothing_ran_names_every_study_and_makes_up_nothing() {
        let s = compute(&output(Vec::new()));
        assert_eq!(s.verdict.dominant, None);
        assert!(s.verdict.figures.is_empty());
        assert!(s.verdict.missing.iter().any(|m| m.contains("lab codec")));
        assert!(s
            .verdict
            .missing
            .iter()
            .any(|m| m.contains("lab handshake")));
        for (id, command) in [
            ("relay", "secrelay lab srtp"),
            ("transcoding", "secrelay lab codec"),
            ("mixing", "secrelay lab codec"),
            ("dtls_handshakes", "secrelay lab handshake --in-memory"),
            ("tls_handshakes", "secrelay lab handshake --tls"),
        ] {
            let sec = section(&s, id);
            assert!(sec.lines.is_empty(), "{id} has no figure without its study");
            let m = sec
                .missing
                .as_deref()
                .unwrap_or_else(|| panic!("{id} says what is missing"));
            assert!(m.contains(command), "{id}: {m:?} names {command}");
        }
        assert_eq!(s.sources().count(), 0);
    }

    #[test]
    fn relay_calls_per_profile_from_the_cheapest_secrelay_stack() {
        let s = compute(&output(vec![srtp()]));
        let relay = section(&s, "relay");
        assert_eq!(relay.missing, None);
        let labels: Vec<&str> = relay.lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            [DEFAULT_PROFILE, "AEAD_AES_128_GCM", "NULL_HMAC_SHA1_80"]
        );
        // secrelay/openssl: 300 + 500 ns per relayed packet; 100 packets a second per call.
        let engine = fig(relay, DEFAULT_PROFILE, "engine");
        assert_eq!(engine.text.as_deref(), Some("secrelay/openssl"));
        assert_eq!(engine.sources[0].row, Some(3));
        assert_eq!(fig(relay, DEFAULT_PROFILE, "relay_ns").value, Some(800.0));
        assert!(close(
            fig(relay, DEFAULT_PROFILE, "calls_g711").value.unwrap(),
            1e9 / (100.0 * 800.0)
        ));
        // Opus packets with the same stack (row 2): 200 + 300 ns.
        let opus = fig(relay, DEFAULT_PROFILE, "calls_opus");
        assert!(close(opus.value.unwrap(), 1e9 / (100.0 * 500.0)));
        assert_eq!(opus.sources[0].row, Some(2));
        assert!(close(
            fig(relay, "AEAD_AES_128_GCM", "calls_g711").value.unwrap(),
            1e9 / (100.0 * 5000.0)
        ));
        // No Opus row for GCM: no figure rather than a guess.
        assert!(!relay.lines[1].figures.contains_key("calls_opus"));
        // A profile no secrelay stack measured says so, with no number.
        let null = &relay.lines[2];
        assert!(null.figures.values().all(|f| f.value.is_none()));
        // The other sections still say what to run.
        assert!(section(&s, "transcoding").missing.is_some());
        assert!(section(&s, "mixing")
            .missing
            .as_deref()
            .unwrap()
            .contains("lab codec"));
    }

    #[test]
    fn a_single_core_batch_engine_can_be_the_best() {
        let mut st = srtp();
        let mut t = Table::new("srtp_engine_sizes", "by size");
        let row = |engine: &str, op: &str, packet: &str, contexts: f64, ns: f64| {
            vec![
                ("profile", Cell::text(DEFAULT_PROFILE)),
                ("op", Cell::text(op)),
                ("packet", Cell::text(packet)),
                ("batch", Cell::num(64.0)),
                ("contexts", Cell::num(contexts)),
                ("engine", Cell::text(engine)),
                ("ns_per_packet", Cell::num(ns)),
            ]
        };
        // Cheaper with few contexts, and a threaded engine cheaper still: neither counts.
        t.push(row("serial", "protect", "172 B", 64.0, 50.0)); // 0
        t.push(row("serial", "unprotect", "172 B", 64.0, 50.0)); // 1
        t.push(row("threaded×2 simd", "protect", "172 B", 4096.0, 10.0)); // 2
        t.push(row("threaded×2 simd", "unprotect", "172 B", 4096.0, 10.0)); // 3
        t.push(row("simd (AVX-512)", "protect", "172 B", 4096.0, 200.0)); // 4
        t.push(row("simd (AVX-512)", "unprotect", "172 B", 4096.0, 300.0)); // 5
        t.push(row("simd (AVX-512)", "protect", "100 B", 4096.0, 150.0)); // 6
        t.push(row("simd (AVX-512)", "unprotect", "100 B", 4096.0, 150.0)); // 7
        t.push(row("serial", "protect", "172 B", 4096.0, 900.0)); // 8
        t.push(row("serial", "unprotect", "172 B", 4096.0, 900.0)); // 9
        st.tables.push(t);
        let s = compute(&output(vec![st]));
        let relay = section(&s, "relay");
        let engine = fig(relay, DEFAULT_PROFILE, "engine");
        assert_eq!(
            engine.text.as_deref(),
            Some("simd (AVX-512) engine (batches of 64 over 4,096 contexts)")
        );
        let rows: Vec<Option<usize>> = engine.sources.iter().map(|s| s.row).collect();
        assert_eq!(rows, [Some(4), Some(5)]);
        assert_eq!(fig(relay, DEFAULT_PROFILE, "relay_ns").value, Some(500.0));
        assert!(close(
            fig(relay, DEFAULT_PROFILE, "calls_opus").value.unwrap(),
            1e9 / (100.0 * 300.0)
        ));
        // A profile the engines were not run for keeps its best stack.
        assert_eq!(
            fig(relay, "AEAD_AES_128_GCM", "engine").text.as_deref(),
            Some("secrelay")
        );
    }

    #[test]
    fn transcoding_pairs_both_directions_and_says_when_one_is_missing() {
        let s = compute(&output(vec![codec()]));
        let t = section(&s, "transcoding");
        let pair = "Opus 48 kHz ↔ PCMU";
        let call = 250.0 + 20.0 + 700.0 + 20.0;
        assert_eq!(fig(t, pair, "call_us").value, Some(call));
        assert!(close(fig(t, pair, "calls").value.unwrap(), 20_000.0 / call));
        assert!(close(
            fig(t, pair, "codec_share_pct").value.unwrap(),
            950.0 / call * 100.0
        ));
        let rows: Vec<Option<usize>> = fig(t, pair, "calls")
            .sources
            .iter()
            .map(|s| s.row)
            .collect();
        assert_eq!(rows, [Some(0), Some(2), None]);
        let one_way = fig(t, "G.722 → PCMU (one way)", "calls");
        assert_eq!(one_way.value, None, "no call figure from one direction");
        assert_eq!(
            one_way.text.as_deref(),
            Some("reverse not timed; 154 one-way G.722 → PCMU legs")
        );
        // Mixing needs lab srtp's SRTP per packet too, and says so.
        let m = section(&s, "mixing");
        assert!(m.lines.is_empty());
        assert!(m.missing.as_deref().unwrap().contains("secrelay lab srtp"));
        assert!(!m
            .missing
            .as_deref()
            .unwrap()
            .contains("secrelay lab codec`"));
    }

    #[test]
    fn mixing_members_per_core_per_codec() {
        let s = compute(&output(vec![srtp(), codec()]));
        let m = section(&s, "mixing");
        assert_eq!(m.missing, None);
        // PCMU: mix 20 + encode 2 + decode 3 + SRTP 1 µs (secrelay, 172 B).
        let member = 20.0 + 5.0 + 1.0;
        let line = "PCMU, rooms of 3";
        assert!(close(fig(m, line, "member_us").value.unwrap(), member));
        assert!(close(
            fig(m, line, "members").value.unwrap(),
            20_000.0 / member
        ));
        assert!(close(
            fig(m, line, "calls").value.unwrap(),
            20_000.0 / member / 3.0
        ));
        let src: Vec<(&str, Option<&str>, Option<usize>)> = fig(m, line, "members")
            .sources
            .iter()
            .map(|s| (s.study.as_str(), s.table.as_deref(), s.row))
            .collect();
        assert_eq!(
            src,
            [
                ("codec", Some("codec_mix_per_leg"), Some(0)),
                ("codec", Some("codec_per_frame"), Some(1)),
                ("srtp", Some("srtp_per_packet"), Some(1)),
            ]
        );
        // Opus: mix 25 + 500 + 100 + SRTP 0.7 µs (secrelay, 100 B).
        let opus = 25.0 + 600.0 + 0.7;
        assert!(close(
            fig(m, "Opus 48 kHz mono, rooms of 10", "members")
                .value
                .unwrap(),
            20_000.0 / opus
        ));
    }

    #[test]
    fn handshakes_and_storms_per_certificate_type() {
        let s = compute(&output(vec![handshake(), tls()]));
        let d = section(&s, "dtls_handshakes");
        let labels: Vec<&str> = d.lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["ecdsa-p256", "rsa-2048"]);
        // The cheaper ECDSA suite (row 2); RSA's ECDHE row, never the DHE one.
        assert_eq!(fig(d, "ecdsa-p256", "server_us").value, Some(200.0));
        assert_eq!(fig(d, "ecdsa-p256", "per_s").value, Some(5000.0));
        assert_eq!(fig(d, "ecdsa-p256", "per_s").sources[0].row, Some(2));
        assert!(close(
            fig(d, "ecdsa-p256", "storm_1000_s").value.unwrap(),
            0.2
        ));
        assert!(close(
            fig(d, "ecdsa-p256", "storm_10000_s").value.unwrap(),
            2.0
        ));
        assert_eq!(fig(d, "rsa-2048", "server_us").value, Some(700.0));
        assert!(close(
            fig(d, "rsa-2048", "storm_10000_s").value.unwrap(),
            7.0
        ));
        let t = section(&s, "tls_handshakes");
        let labels: Vec<&str> = t.lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            ["TLS 1.3 full ecdsa-p256", "TLS 1.3 resumed ecdsa-p256"]
        );
        assert!(close(
            fig(t, "TLS 1.3 full ecdsa-p256", "storm_10000_s")
                .value
                .unwrap(),
            4.0
        ));
        assert_eq!(
            fig(t, "TLS 1.3 full ecdsa-p256", "per_s").sources[0].row,
            Some(1)
        );
        // Without lab codec there is no verdict, and it says what to run.
        assert_eq!(s.verdict.dominant, None);
        assert_eq!(s.verdict.missing, ["`secrelay lab codec`"]);
    }

    #[test]
    fn verdict_weighs_codec_cipher_and_handshake() {
        let s = compute(&output(vec![codec(), handshake()]));
        let v = &s.verdict;
        let packets = PACKETS_PER_S * CALL_S;
        assert_eq!(v.figures["codec_us"].value, Some(950.0 * packets));
        assert_eq!(v.figures["cipher_us"].value, Some(40.0 * packets));
        assert_eq!(v.figures["handshake_us"].value, Some(200.0));
        assert!(close(
            v.figures["break_even_s"].value.unwrap(),
            200.0 / (40.0 * 50.0)
        ));
        assert_eq!(v.dominant.as_deref(), Some("codec"));
        assert!(
            v.sentence.contains("the codec (transcoding) dominates"),
            "{}",
            v.sentence
        );
        assert!(v.missing.is_empty());

        // Cheap codecs and a dear handshake: the handshake dominates.
        let mut c = codec();
        for r in &mut c.tables[1].rows {
            r.insert("transcode_us".into(), Cell::num(0.001));
            r.insert("srtp_us".into(), Cell::num(0.001));
        }
        let s = compute(&output(vec![c, handshake()]));
        assert_eq!(s.verdict.dominant.as_deref(), Some("handshake"));
    }

    #[test]
    fn every_link_names_an_element_of_the_report() {
        let out = output(vec![srtp(), codec(), handshake(), tls()]);
        let s = summarize(&out);
        assert!(s.sources().count() > 20);
        for src in s.sources() {
            assert!(!src.anchor.is_empty(), "{src:?} has an anchor");
        }
        let dir = tempfile::tempdir().unwrap();
        crate::report::write(dir.path(), &out).unwrap();
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        for src in s.sources() {
            assert!(
                html.contains(&format!("id=\"{}\"", src.anchor)),
                "{} is an id in the page",
                src.anchor
            );
            assert!(html.contains(&format!("href=\"#{}\"", src.anchor)));
        }
        // The summary opens the page: before the contents and every study.
        let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at("id=\"sizing\"") < at("class=\"toc\""));
        assert!(at("id=\"sizing\"") < at("id=\"study-srtp\""));
        // Rows link by position: the row a source names is that row of its table.
        let row = s.sections[0].lines[0].figures["engine"].sources[0]
            .anchor
            .clone();
        assert_eq!(row, "row-srtp-srtp_per_packet-3");
        let text = s.render_text();
        assert!(text.contains(&s.verdict.sentence));
        assert!(
            text.contains("AES_CM_128_HMAC_SHA1_80: with secrelay/openssl, G.711 calls 12,500, Opus calls 20,000"),
            "{text}"
        );
    }

    #[test]
    fn the_json_carries_the_summary_and_reads_back() {
        let mut out = output(vec![srtp(), codec()]);
        out.sizing = Some(summarize(&out));
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json["sizing"]["sections"][0]["id"], "relay");
        assert!(json["sizing"]["verdict"]["missing"][0]
            .as_str()
            .unwrap()
            .contains("lab handshake"));
        let back: LabOutput = serde_json::from_value(json).unwrap();
        assert_eq!(back.sizing, out.sizing);
        // A file from before the summary still reads.
        let old = serde_json::json!({"secrelay": "0", "studies": []});
        assert!(serde_json::from_value::<LabOutput>(old)
            .unwrap()
            .sizing
            .is_none());
    }
}
