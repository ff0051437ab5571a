//! Plots drawn with plotters: grouped bars and lines with markers, each as SVG text (for
//! inlining in the page) and as PNG (with the embedded DejaVu Sans font, so text renders
//! the same on a machine without fonts).

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle, FontTransform, Palette, Palette99};

use crate::frame::{format_num, Plot, PlotKind};

/// DejaVu Sans (Bitstream Vera license, see `assets/DejaVuSans.LICENSE`): the font the PNGs
/// are drawn with and the SVG text is laid out with.
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
/// The family name plotters looks the font up by (the SVG names it, so browsers use their own sans).
const FAMILY: &str = "sans-serif";

const WIDTH: u32 = 800;
const HEIGHT: u32 = 400;
/// Height of the x-axis area (tick labels and the axis description) when labels are level.
const X_AREA: u32 = 48;
/// Longest label or legend entry drawn before it is cut with an ellipsis.
const MAX_LABEL_CHARS: usize = 28;
/// Longest category label (bars) before it is cut.
const MAX_CATEGORY_CHARS: usize = 36;
/// Approximate advance of one character at the label size, for layout.
const CHAR_W: f64 = 7.0;
const LEGEND_ROW: u32 = 20;
/// Appended to the legend entry of a series with nothing to draw.
const NO_DATA: &str = " (no data)";

/// Categorical colors (the "tab10" set) for the first ten series, then plotters' 99-color palette.
const COLORS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

fn color(i: usize) -> RGBColor {
    match COLORS.get(i) {
        Some(c) => *c,
        None => {
            let (r, g, b) = Palette99::COLORS[(i - COLORS.len()) % Palette99::COLORS.len()];
            RGBColor(r, g, b)
        }
    }
}

fn register_fonts() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded DejaVu Sans font could not be parsed"))
    }
}

/// The plot as an SVG document (a string to inline in HTML).
pub fn render_svg(plot: &Plot) -> anyhow::Result<String> {
    register_fonts()?;
    let data = Prepared::new(plot);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, data.size).into_drawing_area();
        draw(&root, plot, &data)?;
        root.present()?;
    }
    Ok(svg)
}

/// The plot as a PNG file at `path`.
pub fn render_png(plot: &Plot, path: &Path) -> anyhow::Result<()> {
    register_fonts()?;
    let data = Prepared::new(plot);
    let root = BitMapBackend::new(path, data.size).into_drawing_area();
    draw(&root, plot, &data)?;
    root.present()?;
    Ok(())
}

/// `s` cut to `max` characters, with an ellipsis when cut.
fn fit(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// What the drawing needs, computed once from the plot: finite points only (positive ones
/// on a log axis), bars mapped to categories, the axis ranges and the image size.
struct Prepared {
    /// Per series: its points (for bars, x is the category index).
    series: Vec<Vec<(f64, f64)>>,
    /// Category labels (bars), cut to fit.
    labels: Vec<String>,
    x: Range<f64>,
    y: Range<f64>,
    size: (u32, u32),
    legend_w: u32,
    x_area: u32,
    rotate: bool,
    /// Points left out (not finite, or not positive on a log axis).
    dropped: usize,
}

impl Prepared {
    fn new(plot: &Plot) -> Prepared {
        let mut dropped = 0;
        let keep =
            |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!plot.log_y || y > 0.0);
        let series: Vec<Vec<(f64, f64)>> = match plot.kind {
            PlotKind::Lines => plot
                .series
                .iter()
                .map(|s| {
                    let mut pts: Vec<(f64, f64)> = s.points.iter().copied().filter(keep).collect();
                    dropped += s.points.len() - pts.len();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    pts
                })
                .collect(),
            PlotKind::Bars => {
                let n = category_count(plot);
                plot.series
                    .iter()
                    .map(|s| {
                        let by_x = bars_indexed_by_x(&s.points, n);
                        let pts: Vec<(f64, f64)> = s
                            .points
                            .iter()
                            .enumerate()
                            .map(|(i, &(x, y))| (if by_x { x } else { i as f64 }, y))
                            .filter(|&(i, y)| (i as usize) < n && keep(&(0.0, y)))
                            .collect();
                        dropped += s.points.len() - pts.len();
                        pts
                    })
                    .collect()
            }
        };
        let labels: Vec<String> = match plot.kind {
            PlotKind::Bars => (0..category_count(plot))
                .map(|i| match plot.categories.get(i) {
                    Some(c) => fit(c, MAX_CATEGORY_CHARS),
                    None => (i + 1).to_string(),
                })
                .collect(),
            PlotKind::Lines => Vec::new(),
        };
        let all = || series.iter().flatten();
        let x = match plot.kind {
            PlotKind::Bars => 0.0..labels.len().max(1) as f64,
            PlotKind::Lines => {
                let lo = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
                let hi = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
                padded(lo, hi)
            }
        };
        let y = {
            let lo = all().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let hi = all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            if plot.log_y {
                log_range(lo, hi)
            } else {
                linear_range(lo, hi)
            }
        };

        let legend_chars = plot
            .series
            .iter()
            .zip(&series)
            .map(|(s, pts)| {
                fit(&s.name, MAX_LABEL_CHARS).chars().count()
                    + if pts.is_empty() { NO_DATA.len() } else { 0 }
            })
            .max();
        let legend_w =
            legend_chars.map_or(0, |c| ((c as f64 * CHAR_W) as u32 + 44).clamp(110, 260));
        // Level labels when they fit under their group, otherwise rotated a quarter turn.
        let plot_w = (WIDTH - legend_w).saturating_sub(90) as f64;
        let widest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64 * CHAR_W;
        let rotate = !labels.is_empty() && widest + 6.0 > plot_w / labels.len() as f64;
        // The estimate errs wide; rotated labels need about 85% of it.
        let x_area = if rotate {
            (widest * 0.85) as u32 + 40
        } else {
            X_AREA
        };
        let legend_h = 50 + LEGEND_ROW * plot.series.len() as u32;
        let height = (HEIGHT + x_area - X_AREA).max(legend_h);
        Prepared {
            series,
            labels,
            x,
            y,
            size: (WIDTH, height),
            legend_w,
            x_area,
            rotate,
            dropped,
        }
    }
}

fn category_count(plot: &Plot) -> usize {
    let longest = plot
        .series
        .iter()
        .map(|s| s.points.len())
        .max()
        .unwrap_or(0);
    if plot.categories.is_empty() {
        longest
    } else {
        plot.categories.len()
    }
}

/// Whether a bar series gives its category in x (distinct whole numbers below `n`) rather
/// than by position, so a series may skip a category it has no figure for.
fn bars_indexed_by_x(points: &[(f64, f64)], n: usize) -> bool {
    let mut seen = vec![false; n];
    points.iter().all(|&(x, _)| {
        let whole = x.fract() == 0.0 && x >= 0.0 && x < n as f64;
        whole && !std::mem::replace(&mut seen[x as usize], true)
    })
}

/// An x range around `lo..hi` with a little room on both sides (and some width when all
/// points share one x, or there are none).
fn padded(lo: f64, hi: f64) -> Range<f64> {
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    if lo == hi {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return lo - d..hi + d;
    }
    let pad = (hi - lo) * 0.03;
    lo - pad..hi + pad
}

/// A linear y range that includes zero and leaves room above the highest point.
fn linear_range(lo: f64, hi: f64) -> Range<f64> {
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    if lo == hi {
        return 0.0..1.0;
    }
    let pad = (hi - lo) * 0.08;
    (if lo < 0.0 { lo - pad } else { lo })..(if hi > 0.0 { hi + pad } else { hi })
}

/// A log y range from the decade at or below the lowest point to the one at or above the
/// highest.
fn log_range(lo: f64, hi: f64) -> Range<f64> {
    if !lo.is_finite() || !hi.is_finite() {
        return 1.0..10.0;
    }
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    lo..hi
}

/// The x axis of a bar chart: one unit per category, labels at the middle of each.
#[derive(Clone)]
struct Categories {
    n: usize,
}

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let f = value / self.n.max(1) as f64;
        limit.0 + ((limit.1 - limit.0) as f64 * f).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.n).map(|i| i as f64 + 0.5).collect()
    }
    fn range(&self) -> Range<f64> {
        0.0..self.n as f64
    }
}

fn draw<DB>(root: &DrawingArea<DB, Shift>, plot: &Plot, data: &Prepared) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let body = root.titled(
        &fit(&plot.title, 90),
        (FAMILY, 18).into_font().color(&BLACK),
    )?;
    let (chart_area, legend_area) = body.split_horizontally(data.size.0 - data.legend_w);
    let (y0, y1) = (data.y.start, data.y.end);
    match (plot.kind, plot.log_y) {
        (PlotKind::Bars, false) => bars(&chart_area, plot, data, y0..y1)?,
        (PlotKind::Bars, true) => bars(&chart_area, plot, data, (y0..y1).log_scale())?,
        (PlotKind::Lines, false) => lines(&chart_area, plot, data, y0..y1)?,
        (PlotKind::Lines, true) => lines(&chart_area, plot, data, (y0..y1).log_scale())?,
    }
    legend(&legend_area, plot, data)?;
    if data.series.iter().all(Vec::is_empty) {
        let (w, h) = chart_area.dim_in_pixel();
        let style = (FAMILY, 16).into_font().color(&RGBColor(0x80, 0x80, 0x80));
        let style = style.pos(Pos::new(HPos::Center, VPos::Center));
        chart_area.draw_text("no data", &style, (w as i32 / 2, h as i32 / 2))?;
    }
    Ok(())
}

/// Applies the axes common to both kinds of chart.
fn mesh_style<'a, 'b, DB, X, Y>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    plot: &Plot,
) -> plotters::chart::MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(fit(&plot.x_label, 80))
        .y_desc(fit(&plot.y_label, 50))
        .label_style((FAMILY, 12))
        .axis_desc_style((FAMILY, 14))
        .max_light_lines(4)
        .light_line_style(RGBColor(0xee, 0xf0, 0xf4))
        .bold_line_style(RGBColor(0xd8, 0xdc, 0xe4));
    mesh
}

/// An axis tick: like the tables, without trailing zeros ("50", not "50.0").
fn axis_label(v: &f64) -> String {
    let s = format_num(*v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn bars<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    plot: &Plot,
    data: &Prepared,
    y: Y,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let n = data.labels.len();
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(data.x_area)
        .y_label_area_size(72)
        .build_cartesian_2d(Categories { n: n.max(1) }, y)?;
    // Rotated labels are drawn below (plotters centers axis labels on their tick, which
    // would put half of a rotated one inside the chart); level ones by plotters.
    let label = |v: &f64| {
        if data.rotate {
            String::new()
        } else {
            data.labels
                .get(v.floor() as usize)
                .cloned()
                .unwrap_or_default()
        }
    };
    let mut mesh = mesh_style(&mut chart, plot);
    mesh.disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&label)
        .y_label_formatter(&axis_label);
    mesh.draw()?;
    if data.rotate {
        let (bx, by) = area.get_base_pixel();
        let style = (FAMILY, 12)
            .into_font()
            .color(&BLACK)
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (i, l) in data.labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, data.y.start));
            area.draw_text(l, &style, (x - bx, y - by + 8))?;
        }
    }

    // Bars start at the bottom of a log axis, at zero on a linear one.
    let base = if plot.log_y { data.y.start } else { 0.0 };
    let k = data.series.len().max(1) as f64;
    let group = 0.8;
    for (j, pts) in data.series.iter().enumerate() {
        let fill = color(j).filled();
        chart.draw_series(pts.iter().map(|&(i, v)| {
            let x0 = i + (1.0 - group) / 2.0 + group * j as f64 / k;
            Rectangle::new([(x0, base), (x0 + group / k, v)], fill)
        }))?;
    }
    Ok(())
}

fn lines<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    plot: &Plot,
    data: &Prepared,
    y: Y,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(data.x_area)
        .y_label_area_size(72)
        .build_cartesian_2d(data.x.clone(), y)?;
    let mut mesh = mesh_style(&mut chart, plot);
    mesh.x_label_formatter(&axis_label)
        .y_label_formatter(&axis_label);
    mesh.draw()?;
    for (j, pts) in data.series.iter().enumerate() {
        let c = color(j);
        chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?;
        // A marker per point where points are few; a long time series (a soak's samples) would
        // be a smear of them.
        if pts.len() <= MAX_MARKED_POINTS {
            draw_markers(&mut chart, j, pts)?;
        }
    }
    Ok(())
}

/// Most points of a line series that get a marker each.
const MAX_MARKED_POINTS: usize = 60;

/// Markers for series `j`: the shape changes every ten series so colors that repeat still differ.
fn draw_markers<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    j: usize,
    pts: &[(f64, f64)],
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let c = color(j);
    match marker(j) {
        0 => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?,
        1 => chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 5, c.filled())))?,
        2 => chart.draw_series(pts.iter().map(|&p| Cross::new(p, 4, c.stroke_width(2))))?,
        _ => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.stroke_width(2))))?,
    };
    Ok(())
}

fn marker(j: usize) -> usize {
    (j / COLORS.len()) % 4
}

/// The legend, in its own column right of the chart: a swatch (bars) or a line with the
/// series' marker (lines), and the name; a series without points says so.
fn legend<DB>(area: &DrawingArea<DB, Shift>, plot: &Plot, data: &Prepared) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    if data.legend_w == 0 {
        return Ok(());
    }
    let text = (FAMILY, 12).into_font().color(&BLACK);
    let muted = (FAMILY, 11).into_font().color(&RGBColor(0x70, 0x70, 0x70));
    let max_chars = ((data.legend_w as f64 - 44.0) / CHAR_W).max(4.0) as usize;
    let top = 16;
    for (j, s) in plot.series.iter().enumerate() {
        let y = top + (j as u32 * LEGEND_ROW) as i32;
        let c = color(j);
        match plot.kind {
            PlotKind::Bars => {
                area.draw(&Rectangle::new([(4, y - 6), (20, y + 6)], c.filled()))?;
            }
            PlotKind::Lines => {
                area.draw(&PathElement::new(vec![(2, y), (24, y)], c.stroke_width(2)))?;
                match marker(j) {
                    0 => area.draw(&Circle::new((13, y), 4, c.filled()))?,
                    1 => area.draw(&TriangleMarker::new((13, y), 5, c.filled()))?,
                    2 => area.draw(&Cross::new((13, y), 4, c.stroke_width(2)))?,
                    _ => area.draw(&Circle::new((13, y), 4, c.stroke_width(2)))?,
                }
            }
        }
        let empty = data.series.get(j).is_none_or(Vec::is_empty);
        let name = if empty {
            format!(
                "{}{NO_DATA}",
                fit(&s.name, max_chars.saturating_sub(NO_DATA.len()).max(4))
            )
        } else {
            fit(&s.name, max_chars)
        };
        area.draw_text(&name, &text, (30, y - 7))?;
    }
    if data.dropped > 0 {
        let y = top + (plot.series.len() as u32 * LEGEND_ROW) as i32 + 4;
        let why = if plot.log_y {
            "≤ 0 or not finite"
        } else {
            "not finite"
        };
        area.draw_text(
            &format!("{} point(s) left out:", data.dropped),
            &muted,
            (4, y),
        )?;
        area.draw_text(why, &muted, (4, y + 14))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Series;

    #[test]
    fn bars_by_index_or_by_position() {
        assert!(
            bars_indexed_by_x(&[(0.0, 1.0), (2.0, 3.0)], 3),
            "distinct indexes: by x, skipping one"
        );
        assert!(
            !bars_indexed_by_x(&[(0.0, 1.0), (0.0, 3.0)], 3),
            "repeated x: by position"
        );
        assert!(
            !bars_indexed_by_x(&[(0.5, 1.0)], 3),
            "fractional x: by position"
        );
        assert!(
            !bars_indexed_by_x(&[(3.0, 1.0)], 3),
            "x past the categories: by position"
        );
    }

    #[test]
    fn ranges_hold_the_data() {
        assert_eq!(log_range(3.0, 4500.0), 1.0..10000.0);
        assert_eq!(log_range(100.0, 100.0), 100.0..1000.0);
        assert_eq!(log_range(f64::INFINITY, f64::NEG_INFINITY), 1.0..10.0);
        let r = linear_range(5.0, 50.0);
        assert!(r.start == 0.0 && r.end > 50.0);
        let r = linear_range(-5.0, -1.0);
        assert!(r.start < -5.0 && r.end == 0.0);
        let r = padded(172.0, 172.0);
        assert!(r.start < 172.0 && r.end > 172.0);
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        assert_eq!(axis_label(&50.0), "50");
        assert_eq!(axis_label(&0.5), "0.5");
        assert_eq!(axis_label(&12000.0), "12,000");
    }

    #[test]
    fn non_finite_and_non_positive_points_are_left_out() {
        let plot = Plot {
            id: "p".into(),
            title: "t".into(),
            kind: PlotKind::Lines,
            x_label: "x".into(),
            y_label: "y".into(),
            log_y: true,
            categories: Vec::new(),
            series: vec![Series {
                name: "s".into(),
                points: vec![(3.0, 1.0), (1.0, 0.0), (2.0, f64::NAN), (0.0, 2.0)],
            }],
        };
        let p = Prepared::new(&plot);
        assert_eq!(p.series[0], vec![(0.0, 2.0), (3.0, 1.0)], "kept in x order");
        assert_eq!(p.dropped, 2);
        let svg = render_svg(&plot).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("2 point(s) left out"));
    }
}
