//! PNG plots of the results: throughput against clients, latency CDFs, and the lease table's
//! size as keys come and go.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::Result;
use crate::workloads::Point;

/// The TrueType font the labels are drawn with (Debian's fonts-dejavu-core).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Makes the font available to plotters; once, before any plot.
pub fn init_font() -> Result<()> {
    let bytes: &'static [u8] =
        Box::leak(std::fs::read(FONT).map_err(|e| format!("{FONT}: {e}"))?.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| "cannot load the plot font")?;
    Ok(())
}

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(80, 80, 80),
    ];
    COLORS[i % COLORS.len()]
}

/// Operations per second against clients, one line per contender (log-scaled y).
pub fn throughput(path: &Path, title: &str, points: &[Point]) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for p in points {
        if !names.contains(&p.contender.as_str()) {
            names.push(&p.contender);
        }
    }
    let max_clients = points.iter().map(|p| p.clients).max().unwrap_or(1) as f64;
    let max_rate = points.iter().map(|p| p.per_second).fold(1.0, f64::max);
    let min_rate = points.iter().map(|p| p.per_second).fold(f64::MAX, f64::min).max(1.0);
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (1f64..max_clients * 1.1).log_scale(),
            (min_rate / 2.0..max_rate * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("concurrent clients")
        .y_desc("operations per second")
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, name) in names.iter().enumerate() {
        let c = color(i);
        let series: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.contender == *name)
            .map(|p| (p.clients as f64, p.per_second))
            .collect();
        chart
            .draw_series(LineSeries::new(series.clone(), c.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(series.into_iter().map(|(x, y)| Circle::new((x, y), 4, c.filled())))?;
    }
    finish(chart, &root, SeriesLabelPosition::LowerRight)
}

/// Latency CDFs (µs, log-scaled x), one line per point.
pub fn cdf(path: &Path, title: &str, points: &[Point]) -> Result<()> {
    let max_us = points.iter().flat_map(|p| p.latency.cdf.iter().map(|c| c.0)).fold(1.0, f64::max);
    let min_us =
        points.iter().flat_map(|p| p.latency.cdf.iter().map(|c| c.0)).fold(f64::MAX, f64::min).max(1.0);
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((min_us / 1.5..max_us * 1.5).log_scale(), 0f64..1.0)?;
    chart
        .configure_mesh()
        .x_desc("latency (µs)")
        .y_desc("fraction of operations")
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, p) in points.iter().enumerate() {
        let c = color(i);
        let label = format!("{} ({} clients)", p.contender, p.clients);
        chart
            .draw_series(LineSeries::new(
                p.latency.cdf.iter().map(|&(x, q)| (x.max(min_us), q)),
                c.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    finish(chart, &root, SeriesLabelPosition::LowerRight)
}

/// Named lines on linear axes (y from 0): quantities against another.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<()> {
    let all = || series.iter().flat_map(|(_, points)| points.iter());
    let max_x = all().map(|p| p.0).fold(1.0, f64::max);
    let max_y = all().map(|p| p.1).fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (1100, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..max_x * 1.02, 0f64..max_y * 1.15)?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).label_style(("sans-serif", 15)).draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    // Sizes grow to the right: the legend goes where the lines are not.
    finish(chart, &root, SeriesLabelPosition::UpperLeft)
}

/// The legend, then the file.
fn finish<'a, X: Ranged, Y: Ranged>(
    mut chart: ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    legend: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(legend)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
