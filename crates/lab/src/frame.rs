//! What every study produces: tables, plots and the method, in one serializable report.
//!
//! A study fills a [`StudyReport`]; the frame prints its tables, writes its JSON and hands it
//! to the HTML report. Cells are numbers, text, or an explicit "not offered" with a reason,
//! so an algorithm a library lacks is shown as such instead of silently dropped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;

/// One study's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyReport {
    /// Short name, as on the command line (`srtp`, `crypto`, …).
    pub study: String,
    /// Human title.
    pub title: String,
    /// Which seed documents it re-runs (`000_…`).
    pub seeds: Vec<String>,
    /// How it was measured.
    pub method: Method,
    /// The tables, in the order a reader should see them.
    pub tables: Vec<Table>,
    /// Plots (rendered by the HTML report).
    pub plots: Vec<Plot>,
    /// Findings worth a sentence (e.g. "the tampered packet was rejected").
    pub notes: Vec<String>,
}

/// How a study was measured: enough to repeat it and to judge it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Method {
    /// What one timed operation is, and what is outside the timing.
    pub timed: String,
    /// Whether `--quick` was given (fewer, shorter runs).
    pub quick: bool,
    /// Whether `--smoke` was given (each measurement as short as it can be: figures not fit
    /// to read).
    #[serde(default)]
    pub smoke: bool,
    /// Warm-up before each measurement, in milliseconds.
    pub warmup_ms: f64,
    /// Timed runs per measurement; the median is reported, with the spread.
    pub runs: usize,
    /// Target length of one run, in milliseconds.
    pub run_ms: f64,
    /// Harness cost of one empty operation in ns, already subtracted from every figure.
    pub harness_overhead_ns: f64,
    /// How the spread is expressed.
    pub spread: String,
    /// How instruction counts were obtained, or why there are none.
    pub instructions: String,
    /// The machine.
    pub machine: Machine,
    /// Library versions (crate versions from Cargo.lock, runtime version strings).
    pub versions: BTreeMap<String, String>,
    /// When the study ran (RFC 3339, UTC).
    pub date: String,
    /// Wall time the study took, in seconds.
    pub elapsed_s: f64,
}

/// A table cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cell {
    /// A measured figure (always finite).
    Num(f64),
    /// Text (a name, a verdict).
    Text(String),
    /// The library or stack does not offer this; the reason says how we know.
    NotOffered {
        /// Why, e.g. "OpenSSL 3 refuses RC4 without the legacy provider".
        not_offered: String,
    },
}

impl Cell {
    /// A number, or "not offered" with the reason when it is not finite.
    pub fn num(v: f64) -> Cell {
        if v.is_finite() {
            Cell::Num(v)
        } else {
            Cell::NotOffered {
                not_offered: "no finite measurement".into(),
            }
        }
    }
    /// Text.
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }
    /// Not offered, with the reason.
    pub fn not_offered(reason: impl Into<String>) -> Cell {
        Cell::NotOffered {
            not_offered: reason.into(),
        }
    }
    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Num(v) => Some(*v),
            _ => None,
        }
    }
    fn render(&self) -> String {
        match self {
            Cell::Num(v) => format_num(*v),
            Cell::Text(s) => s.clone(),
            Cell::NotOffered { not_offered } => not_offered_label(not_offered).into(),
        }
    }
}

/// What a "not offered" cell shows in a table: "not applicable" or "refused" when its reason
/// says so (a combination that cannot exist, or one the stack turns down), "not offered"
/// otherwise. The reason itself goes in the JSON and the report's tooltip.
pub fn not_offered_label(reason: &str) -> &'static str {
    if reason.starts_with("not applicable") {
        "not applicable"
    } else if reason.starts_with("refused") {
        "refused"
    } else {
        "not offered"
    }
}

impl From<f64> for Cell {
    fn from(v: f64) -> Cell {
        Cell::num(v)
    }
}
impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::text(s)
    }
}
impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

/// Formats a figure for a human table: thousands separated, 3 significant digits for
/// small numbers.
pub fn format_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        let s = format!("{:.0}", v);
        let (sign, digits) = s.strip_prefix('-').map(|d| ("-", d)).unwrap_or(("", &s));
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        format!("{sign}{out}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        // Counts (and whole figures) print without decimals.
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3}")
    }
}

/// A column: a key (used in JSON rows) and a label with its unit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    /// Key in each row's map.
    pub key: String,
    /// Header shown to people.
    pub label: String,
    /// Unit, if the column holds figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// A table: columns and rows (each row a map from column key to cell).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Table {
    /// Stable id (tests look rows up by it).
    pub id: String,
    /// Title shown above it.
    pub title: String,
    /// Columns in display order.
    pub columns: Vec<Column>,
    /// Rows in display order.
    pub rows: Vec<BTreeMap<String, Cell>>,
}

impl Table {
    /// An empty table.
    pub fn new(id: impl Into<String>, title: impl Into<String>) -> Table {
        Table {
            id: id.into(),
            title: title.into(),
            columns: Vec::new(),
            rows: Vec::new(),
        }
    }
    /// Adds a text column.
    pub fn col(mut self, key: &str, label: &str) -> Table {
        self.columns.push(Column {
            key: key.into(),
            label: label.into(),
            unit: None,
        });
        self
    }
    /// Adds a figure column with its unit.
    pub fn col_unit(mut self, key: &str, label: &str, unit: &str) -> Table {
        self.columns.push(Column {
            key: key.into(),
            label: label.into(),
            unit: Some(unit.into()),
        });
        self
    }
    /// Appends a row from (key, cell) pairs.
    pub fn push<I, K, C>(&mut self, cells: I)
    where
        I: IntoIterator<Item = (K, C)>,
        K: Into<String>,
        C: Into<Cell>,
    {
        self.rows.push(
            cells
                .into_iter()
                .map(|(k, c)| (k.into(), c.into()))
                .collect(),
        );
    }
    /// Rows whose `key` column holds the text `value`.
    pub fn rows_where<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
    ) -> impl Iterator<Item = &'a BTreeMap<String, Cell>> + 'a {
        self.rows
            .iter()
            .filter(move |r| matches!(r.get(key), Some(Cell::Text(t)) if t == value))
    }
    /// Renders the table as aligned text for a terminal.
    pub fn render_text(&self) -> String {
        let headers: Vec<String> = self
            .columns
            .iter()
            .map(|c| match &c.unit {
                Some(u) if !u.is_empty() => format!("{} ({u})", c.label),
                _ => c.label.clone(),
            })
            .collect();
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                self.columns
                    .iter()
                    .map(|c| r.get(&c.key).map(Cell::render).unwrap_or_default())
                    .collect()
            })
            .collect();
        let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in &cells {
            for (i, c) in row.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let numeric: Vec<bool> = self.columns.iter().map(|c| c.unit.is_some()).collect();
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        let line = |out: &mut String, row: &[String]| {
            for (i, c) in row.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    out.push_str("  ");
                }
                if numeric[i] {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(c);
                } else {
                    out.push_str(c);
                    if i + 1 < row.len() {
                        out.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push('\n');
        };
        line(&mut out, &headers);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&mut out, &rule);
        for row in &cells {
            line(&mut out, row);
        }
        out
    }
}

/// A plot for the report. Values are plain numbers; the report draws them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plot {
    /// Stable id (also the PNG's file name).
    pub id: String,
    /// Title.
    pub title: String,
    /// What kind of chart.
    pub kind: PlotKind,
    /// Label of the x axis (or of the categories).
    pub x_label: String,
    /// Label of the y axis, with its unit.
    pub y_label: String,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Categories for bar charts (x positions), empty for line charts.
    pub categories: Vec<String>,
    /// Data series.
    pub series: Vec<Series>,
}

/// Chart kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlotKind {
    /// Grouped bars: one group per category, one bar per series. A point's x is its category
    /// index when every x of the series is a distinct whole number below the number of
    /// categories (so a series may skip a category); otherwise `points[i]` is category i and
    /// x is ignored.
    Bars,
    /// Lines with markers through (x, y) points.
    Lines,
}

/// One data series.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points: (x, y). For bars, x is the category index (see [`PlotKind::Bars`]).
    pub points: Vec<(f64, f64)>,
}

impl StudyReport {
    /// The table with this id.
    pub fn table(&self, id: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.id == id)
    }
    /// Everything a person reads in a terminal: tables and notes.
    pub fn render_text(&self) -> String {
        let mut out = format!("== {} ==\n\n", self.title);
        for t in &self.tables {
            out.push_str(&t.render_text());
            out.push('\n');
        }
        for n in &self.notes {
            let _ = writeln!(out, "* {n}");
        }
        out
    }
}

/// What `lab … --json` writes: the reports of the studies that ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabOutput {
    /// secrelay's version.
    pub secrelay: String,
    /// One entry per study, in the order they ran.
    pub studies: Vec<StudyReport>,
    /// What one core of this machine carries, computed from these studies (see
    /// [`crate::sizing`]); absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizing: Option<crate::sizing::Sizing>,
}
