//! The HTML report: one self-contained file with a section per study.
//!
//! `DIR/report.html` holds everything inline (CSS, SVG plots, a small render-check script),
//! so it can be mailed or archived as one file; each plot is also written as
//! `DIR/<plot id>.png`. Every string that comes from a study is escaped by the templating
//! (maud escapes by default; only our own CSS, script and the SVG plotters produced are
//! inserted raw, and plotters escapes the text it puts in the SVG).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use anyhow::Context as _;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::frame::{format_num, Cell, LabOutput, Method, StudyReport, Table};
use crate::machine::Machine;
use crate::sizing::{Figure, Sizing};

mod plot;

pub use plot::{render_png, render_svg};

/// Writes `dir/report.html` and one `dir/<plot id>.png` per plot.
pub fn write(dir: &Path, output: &LabOutput) -> anyhow::Result<()> {
    let plan = Anchors::plan(output);
    let mut sections = Vec::new();
    for (study, names) in output.studies.iter().zip(&plan.studies) {
        let mut plots = Vec::new();
        for (p, (png, anchor)) in study.plots.iter().zip(&names.plots) {
            let svg = render_svg(p).with_context(|| format!("drawing plot {:?} as SVG", p.id))?;
            let path = dir.join(png);
            render_png(p, &path).with_context(|| format!("writing {}", path.display()))?;
            plots.push(RenderedPlot {
                anchor: anchor.clone(),
                title: &p.title,
                svg,
                png: png.clone(),
            });
        }
        sections.push(study_section(study, &plots, names));
    }
    let mut sizing = output
        .sizing
        .clone()
        .unwrap_or_else(|| crate::sizing::compute(output));
    sizing.link(&plan);
    let page = page(output, &sizing, &sections);
    let path = dir.join("report.html");
    std::fs::write(&path, page.into_string())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The element ids (and PNG file names) the report gives every study, table, table row and
/// plot of a run: computed from the run alone, so the sizing summary's links, made before
/// the page is written, name the ids the page will carry.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    studies: Vec<StudyAnchors>,
}

/// A table's ids: its own and one per row.
#[derive(Debug, Clone)]
struct TableAnchors {
    id: String,
    anchor: String,
    rows: Vec<String>,
}

/// One study's ids.
#[derive(Debug, Clone)]
struct StudyAnchors {
    study: String,
    section: String,
    tables: Vec<TableAnchors>,
    /// Per plot: (PNG file name, anchor), in the study's order.
    plots: Vec<(String, String)>,
    plot_ids: Vec<String>,
    method: String,
}

impl Anchors {
    /// The ids of every element of `output`'s report.
    pub fn plan(output: &LabOutput) -> Anchors {
        let mut files = FileNames::default();
        let studies = output
            .studies
            .iter()
            .map(|s| {
                let plots = s
                    .plots
                    .iter()
                    .map(|p| (files.unique(&p.id), files.anchor("plot", &s.study, &p.id)))
                    .collect();
                let section = files.anchor("study", &s.study, "");
                let tables = s
                    .tables
                    .iter()
                    .map(|t| {
                        let anchor = files.anchor("table", &s.study, &t.id);
                        let rows = (0..t.rows.len())
                            .map(|i| files.anchor("row", &s.study, &format!("{}-{i}", t.id)))
                            .collect();
                        TableAnchors {
                            id: t.id.clone(),
                            anchor,
                            rows,
                        }
                    })
                    .collect();
                let method = files.anchor("method", &s.study, "");
                StudyAnchors {
                    study: s.study.clone(),
                    section,
                    tables,
                    plots,
                    plot_ids: s.plots.iter().map(|p| p.id.clone()).collect(),
                    method,
                }
            })
            .collect();
        Anchors { studies }
    }

    fn study(&self, study: &str) -> Option<&StudyAnchors> {
        self.studies.iter().find(|s| s.study == study)
    }

    /// The id of a study's section.
    pub fn section(&self, study: &str) -> Option<&str> {
        self.study(study).map(|s| s.section.as_str())
    }

    /// The id of a table, or of one of its rows (index in the table's rows).
    pub fn table(&self, study: &str, table: &str, row: Option<usize>) -> Option<&str> {
        let t = self.study(study)?.tables.iter().find(|t| t.id == table)?;
        match row {
            None => Some(&t.anchor),
            Some(i) => t.rows.get(i).map(String::as_str),
        }
    }

    /// The id of a plot's figure.
    pub fn plot(&self, study: &str, plot: &str) -> Option<&str> {
        let s = self.study(study)?;
        let i = s.plot_ids.iter().position(|p| p == plot)?;
        Some(s.plots[i].1.as_str())
    }
}

/// A plot ready for the page.
struct RenderedPlot<'a> {
    anchor: String,
    title: &'a str,
    svg: String,
    png: String,
}

/// File names and element ids derived from study data: safe characters only, unique.
#[derive(Default)]
struct FileNames {
    used: HashSet<String>,
}

impl FileNames {
    /// `<id>.png`, with the id reduced to `[A-Za-z0-9_.-]` and made unique.
    fn unique(&mut self, id: &str) -> String {
        let base = safe_name(id);
        let mut name = format!("{base}.png");
        let mut n = 2;
        while !self.used.insert(name.clone()) {
            name = format!("{base}-{n}.png");
            n += 1;
        }
        name
    }
    /// A unique HTML id for an element of a study.
    fn anchor(&mut self, kind: &str, study: &str, id: &str) -> String {
        let base = if id.is_empty() {
            format!("{kind}-{}", safe_name(study))
        } else {
            format!("{kind}-{}-{}", safe_name(study), safe_name(id))
        };
        let mut name = base.clone();
        let mut n = 2;
        while !self.used.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        name
    }
}

/// `s` with every character outside `[A-Za-z0-9_.-]` replaced by `_` (never empty, never
/// starting with a dot).
fn safe_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

/// One study's section, with what the table of contents needs.
struct Section {
    anchor: String,
    title: String,
    entries: Vec<(String, String)>,
    body: Markup,
}

fn study_section(study: &StudyReport, plots: &[RenderedPlot<'_>], ids: &StudyAnchors) -> Section {
    let anchor = ids.section.clone();
    let tables: Vec<(&TableAnchors, &Table)> = ids.tables.iter().zip(&study.tables).collect();
    let mut entries: Vec<(String, String)> = tables
        .iter()
        .map(|(a, t)| (a.anchor.clone(), t.title.clone()))
        .collect();
    entries.extend(
        plots
            .iter()
            .map(|p| (p.anchor.clone(), p.title.to_string())),
    );
    let method_anchor = ids.method.clone();
    entries.push((method_anchor.clone(), "Method".into()));
    let body = html! {
        section.study id=(anchor) {
            h2 { (study.title) " " span.tag { "lab " (study.study) } }
            p.meta {
                @if !study.seeds.is_empty() {
                    "Re-runs seed" @if study.seeds.len() > 1 { "s" } " " (study.seeds.join(", ")) ". "
                }
                "Ran " (study.method.date) " in " (format_num(study.method.elapsed_s)) " s"
                @if study.method.smoke {
                    " with " code { "--smoke" } " (a check that the study runs: each measurement about a millisecond, figures not fit to read)"
                } @else if study.method.quick {
                    " with " code { "--quick" } " (fewer, shorter runs: figures are noisier)"
                }
                "."
            }
            @for (a, t) in &tables { (table(&a.anchor, &a.rows, t)) }
            @for p in plots {
                figure.plot id=(p.anchor) {
                    (PreEscaped(&p.svg))
                    figcaption { (p.title) " — " a href=(p.png) { "PNG" } }
                }
            }
            @if !study.notes.is_empty() {
                h3 { "Notes" }
                ul.notes { @for n in &study.notes { li { (n) } } }
            }
            details.method id=(method_anchor) {
                summary { "Method" }
                (method(&study.method))
            }
        }
    };
    Section {
        anchor,
        title: study.title.clone(),
        entries,
        body,
    }
}

fn table(anchor: &str, row_ids: &[String], t: &Table) -> Markup {
    html! {
        h3 id=(anchor) { (t.title) }
        div.table-wrap {
            table {
                thead { tr {
                    @for c in &t.columns {
                        th.num[c.unit.is_some()] {
                            (c.label)
                            @if let Some(u) = c.unit.as_deref().filter(|u| !u.is_empty()) { br; span.unit { (u) } }
                        }
                    }
                } }
                tbody {
                    @for (row, id) in t.rows.iter().zip(row_ids) { tr id=(id) {
                        @for c in &t.columns {
                            @match row.get(&c.key) {
                                Some(Cell::Num(v)) => td.num title=(v) { (format_num(*v)) },
                                Some(Cell::Text(s)) => td.num[c.unit.is_some()] { (s) },
                                Some(Cell::NotOffered { not_offered }) => td.na title=(not_offered) { (crate::frame::not_offered_label(not_offered)) },
                                None => td.missing { },
                            }
                        }
                    } }
                }
            }
        }
    }
}

fn method(m: &Method) -> Markup {
    html! {
        dl {
            dt { "Timed" } dd { (m.timed) }
            dt { "Runs" } dd {
                (m.runs) " timed runs of about " (format_num(m.run_ms)) " ms each after "
                (format_num(m.warmup_ms)) " ms of warm-up; the median is reported"
                @if m.smoke { " (" code { "--smoke" } ")" } @else if m.quick { " (" code { "--quick" } ")" }
            }
            dt { "Spread" } dd { (m.spread) }
            dt { "Harness overhead" } dd { (format_num(m.harness_overhead_ns)) " ns per operation, already subtracted from every figure" }
            dt { "Instruction counts" } dd { (m.instructions) }
            dt { "Machine" } dd { (machine_line(&m.machine)) }
            dt { "Date" } dd { (m.date) ", " (format_num(m.elapsed_s)) " s wall time" }
            dt { "Versions" } dd { (versions(&m.versions)) }
        }
    }
}

fn machine_line(m: &Machine) -> String {
    format!(
        "{}, {} logical CPUs, {} GiB, {}",
        m.cpu_model,
        m.cores,
        format_num(m.memory_gib),
        m.os
    )
}

fn versions(v: &BTreeMap<String, String>) -> Markup {
    html! {
        ul.chips { @for (name, ver) in v { li { span.name { (name) } " " (ver) } } }
    }
}

/// A figure of the sizing summary, linked to the row or plot it comes from (the first
/// source on the figure itself, the others as numbered links after it).
fn figure(f: &Figure) -> Markup {
    let mut linked = f.sources.iter().filter(|s| !s.anchor.is_empty());
    let first = linked.next();
    html! {
        @match first {
            Some(s) => a href={ "#" (s.anchor) } title=(s.describe()) { (f.render()) },
            None => (f.render()),
        }
        @for (i, s) in linked.enumerate() {
            " " a.src href={ "#" (s.anchor) } title=(s.describe()) { "[" (i + 2) "]" }
        }
    }
}

/// Text with `backticked` commands set as code.
fn ticks(s: &str) -> Markup {
    html! {
        @for (i, part) in s.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

/// How the verdict's figures are named beside it.
fn verdict_label(key: &str) -> String {
    match key {
        "codec_us" => "transcoding µs".into(),
        "cipher_us" => "SRTP µs".into(),
        "handshake_us" => "handshake µs".into(),
        "break_even_s" => "break-even s".into(),
        k => k.replace('_', " "),
    }
}

/// The first screen: the verdict, then what one core carries, each figure linked to its row
/// or plot.
fn sizing_section(s: &Sizing) -> Markup {
    html! {
        section.sizing #sizing {
            h2 { "Sizing: what one core of this machine carries" }
            p.verdict {
                @match s.verdict.figures.is_empty() {
                    true => (ticks(&s.verdict.sentence)),
                    false => {
                        (s.verdict.sentence) " "
                        span.sources {
                            "(from: "
                            @for (i, (k, f)) in s.verdict.figures.iter().enumerate() {
                                @if i > 0 { ", " }
                                (verdict_label(k)) " " (figure(f))
                            }
                            ")"
                        }
                    }
                }
            }
            @for sec in &s.sections {
                h3 id={ "sizing-" (sec.id) } { (sec.title) }
                @if let Some(m) = &sec.missing { p.missing { (ticks(m)) } }
                @if !sec.lines.is_empty() {
                    div.table-wrap { table {
                        thead { tr {
                            th { }
                            @for c in &sec.columns {
                                th.num[c.unit.is_some()] {
                                    (c.label)
                                    @if let Some(u) = c.unit.as_deref() { br; span.unit { (u) } }
                                }
                            }
                        } }
                        tbody { @for l in &sec.lines { tr {
                            th { (l.label) }
                            @for c in &sec.columns {
                                @match l.figures.get(&c.key) {
                                    Some(f) => td.num[f.value.is_some()] { (figure(f)) },
                                    None => td.missing { },
                                }
                            }
                        } } }
                    } }
                }
                p.how { (sec.how) }
            }
            details.model {
                summary { "The model" }
                ul { @for m in &s.model { li { (m) } } }
            }
        }
    }
}

fn page(output: &LabOutput, sizing: &Sizing, sections: &[Section]) -> Markup {
    let generated = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let machine = output
        .studies
        .first()
        .map(|s| s.method.machine.clone())
        .unwrap_or_else(Machine::detect);
    let mut all_versions: BTreeMap<String, String> = BTreeMap::new();
    for s in &output.studies {
        for (k, v) in &s.method.versions {
            all_versions.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let key_versions: BTreeMap<String, String> = all_versions
        .iter()
        .filter(|(k, _)| k.contains("runtime") || *k == "secrelay" || *k == "valgrind")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "secrelay lab report" }
                style { (PreEscaped(CSS)) }
                script { (PreEscaped(RENDER_CHECK)) }
            }
            body {
                header {
                    h1 { "secrelay lab report" }
                    p.meta { (machine_line(&machine)) ", " (output.studies.len()) " "
                        @if output.studies.len() == 1 { "study" } @else { "studies" } ", generated " (generated) "." }
                }
                (sizing_section(sizing))
                section.facts {
                    h2 { "The run" }
                    dl.facts {
                        dt { "Generated" } dd { (generated) }
                        dt { "secrelay" } dd { (output.secrelay) }
                        dt { "Machine" } dd { (machine_line(&machine)) }
                        dt { "CPU features" } dd {
                            @if machine.cpu_features.is_empty() { "none of the crypto-relevant ones detected" }
                            @else { ul.chips { @for f in &machine.cpu_features { li { (f) } } } }
                        }
                        dt { "Versions" } dd {
                            (versions(&key_versions))
                            @if all_versions.len() > key_versions.len() {
                                details { summary { "all " (all_versions.len()) " versions" } (versions(&all_versions)) }
                            }
                        }
                    }
                }
                nav.toc {
                    h2 { "Contents" }
                    @if sections.is_empty() { p { "No study ran." } }
                    ol { @for s in sections {
                        li {
                            a href={ "#" (s.anchor) } { (s.title) }
                            ul { @for (a, t) in &s.entries { li { a href={ "#" (a) } { (t) } } } }
                        }
                    } }
                }
                main { @for s in sections { (s.body) } }
                footer {
                    p { "Render check (filled in by the page's script when it loads):" }
                    pre #render-check { "not run: scripts disabled" }
                }
            }
        }
    }
}

/// The page's style: readable tables that scroll sideways when wide, plots scaled to fit.
const CSS: &str = r#"
:root { --fg:#1d2433; --muted:#5b6475; --line:#d9dee8; --bg:#ffffff; --band:#f5f7fb; --accent:#2057a8; --na:#8a5a00; --na-bg:#fff6e0; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 1.5rem 2rem 4rem; color: var(--fg); background: var(--bg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 1.8rem; margin: 0 0 .5rem; }
h2 { font-size: 1.4rem; margin: 2.5rem 0 .3rem; border-bottom: 2px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1.1rem; margin: 1.6rem 0 .4rem; }
a { color: var(--accent); }
code { font: .9em ui-monospace, "DejaVu Sans Mono", monospace; background: var(--band); padding: 0 .2em; border-radius: 3px; }
.tag { font: .8rem ui-monospace, "DejaVu Sans Mono", monospace; color: var(--muted); background: var(--band);
  border: 1px solid var(--line); border-radius: 4px; padding: .05rem .4rem; vertical-align: middle; }
.meta { color: var(--muted); margin: 0; }
dl.facts, .method dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: .5rem 0; }
dt { font-weight: 600; color: var(--muted); }
dd { margin: 0; }
ul.chips { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: .3rem; }
ul.chips li { background: var(--band); border: 1px solid var(--line); border-radius: 4px; padding: 0 .4rem; font-size: .85rem; }
ul.chips .name { color: var(--muted); }
nav.toc { background: var(--band); border: 1px solid var(--line); border-radius: 6px; padding: .5rem 1.2rem; margin: 1.5rem 0; }
nav.toc h2 { border: 0; margin: .3rem 0; font-size: 1.1rem; }
nav.toc ul { font-size: .9rem; }
.table-wrap { overflow-x: auto; max-width: 100%; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; width: max-content; min-width: 100%; font-size: .9rem; }
th, td { padding: .3rem .7rem; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: var(--band); position: sticky; top: 0; vertical-align: bottom; }
th .unit { font-weight: 400; color: var(--muted); font-size: .8rem; }
tbody tr:nth-child(even) { background: #fafbfd; }
tbody tr:hover { background: #eef3fb; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.na { color: var(--na); background: var(--na-bg); font-style: italic; text-align: center; cursor: help; }
figure.plot { margin: 1.5rem 0; }
figure.plot svg { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: .85rem; margin-top: .3rem; }
ul.notes li { margin: .2rem 0; }
details.method { margin: 1.2rem 0; border: 1px solid var(--line); border-radius: 6px; padding: .4rem .9rem; background: var(--band); }
details.method summary { cursor: pointer; font-weight: 600; }
section.sizing { border: 2px solid var(--accent); border-radius: 8px; padding: .2rem 1.2rem 1rem; margin: 1.5rem 0; }
section.sizing h2 { margin-top: .8rem; }
section.sizing h3 { font-size: 1rem; margin: 1rem 0 .3rem; }
section.sizing table { width: 100%; }
section.sizing th, section.sizing td { white-space: normal; }
section.sizing tbody th, section.sizing tbody td { vertical-align: top; }
section.sizing thead th { font-weight: 600; font-size: .8rem; }
section.sizing tbody th { background: none; position: static; font-weight: 600; white-space: nowrap; }
p.verdict { font-size: 1.05rem; font-weight: 600; }
p.verdict .sources { font-weight: 400; font-size: .85rem; color: var(--muted); }
p.how, p.missing { color: var(--muted); font-size: .85rem; margin: .3rem 0; }
p.missing { color: var(--na); }
a.src { font-size: .75rem; vertical-align: super; }
tr:target, figure:target { outline: 3px solid var(--accent); }
footer { margin-top: 3rem; color: var(--muted); font-size: .8rem; }
#render-check { background: var(--band); padding: .4rem; border-radius: 4px; white-space: pre-wrap; }
"#;

/// Checks, once the page has loaded, that every SVG has a non-zero rendered size, and
/// collects script errors; writes both as JSON into `#render-check` (read by the tests).
const RENDER_CHECK: &str = r#"
(function () {
  var errors = [];
  function show(result) {
    var out = document.getElementById("render-check");
    if (out) { out.textContent = JSON.stringify(result); }
  }
  var last = null;
  window.onerror = function (message, source, line) {
    errors.push(String(message) + (line ? " (line " + line + ")" : ""));
    if (last) { last.errors = errors; show(last); }
  };
  window.addEventListener("load", function () {
    var svgs = document.querySelectorAll("svg");
    var nonzero = 0, zero = [];
    for (var i = 0; i < svgs.length; i++) {
      var r = svgs[i].getBoundingClientRect();
      if (r.width > 0 && r.height > 0) { nonzero++; }
      else { zero.push(svgs[i].parentNode && svgs[i].parentNode.id || ("svg #" + i)); }
    }
    last = { svgs: svgs.length, nonzero: nonzero, zero: zero, errors: errors };
    show(last);
  });
})();
"#;
