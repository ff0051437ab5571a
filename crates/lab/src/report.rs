//! The HTML report: one self-contained file with a section per study.

use std::path::Path;

use crate::frame::LabOutput;

/// Writes `dir/report.html`.
pub fn write(dir: &Path, output: &LabOutput) -> anyhow::Result<()> {
    let mut html = String::from("<!doctype html><meta charset=utf-8><title>secrelay lab</title>");
    for s in &output.studies {
        html.push_str(&format!(
            "<h2>{}</h2><pre>{}</pre>",
            s.title,
            s.render_text()
        ));
    }
    std::fs::write(dir.join("report.html"), html)?;
    Ok(())
}
