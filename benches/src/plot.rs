//! SVG plots (plotters, SVG backend only): latency CDFs, throughput over time, one
//! value per trial (failover times per kill) against a target, and labelled bars.

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

/// Latency against percentile, the x axis stretched towards the tail (p50, p90, p99,
/// p99.9, p99.99 equally spaced), one line per histogram (microseconds).
///
/// # Errors
/// The file cannot be written.
pub fn latency_cdf(
    path: &Path,
    title: &str,
    series: &[(&str, &Histogram<u64>)],
) -> anyhow::Result<()> {
    let series: Vec<_> = series.iter().filter(|(_, h)| !h.is_empty()).collect();
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let ymax = series.iter().map(|(_, h)| h.value_at_quantile(0.9999)).max().unwrap_or(1).max(1)
        as f64
        / 1000.0
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..4f64, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(5)
        .x_label_formatter(&|x| {
            let q = 1.0 - 10f64.powf(-x);
            format!("{}%", (q * 1e4).round() / 1e2)
        })
        .draw()
        .map_err(err)?;
    for (i, (name, h)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = (0..=400).map(|k| {
            let x = k as f64 / 100.0;
            (x, h.value_at_quantile(1.0 - 10f64.powf(-x)) as f64 / 1000.0)
        });
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Lines of (seconds, value).
///
/// # Errors
/// The file cannot be written.
pub fn timeline(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xmax = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.0)).fold(1.0, f64::max);
    let ymax = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(err)?;
    chart.configure_mesh().x_desc("seconds").y_desc(y_desc).draw().map_err(err)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One marker per trial: (trial number, value) for each series, and a horizontal line
/// at `target` (label, value) when given.
///
/// # Errors
/// The file cannot be written.
pub fn trials(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    target: Option<(&str, f64)>,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xmax = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.0)).fold(1.0, f64::max) + 1.0;
    let ymax = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .chain(target.map(|t| t.1))
        .fold(0.1, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(err)?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(err)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(points.iter().map(|&(x, y)| Circle::new((x, y), 5, color.filled())))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    }
    if let Some((name, value)) = target {
        chart
            .draw_series(LineSeries::new([(0.0, value), (xmax, value)], RED.stroke_width(1)))
            .map_err(err)?
            .label(name)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One bar per `(label, value)`, with the value written above it, and a horizontal line
/// at `target` (label, value) when given.
///
/// # Errors
/// The file cannot be written.
pub fn bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    bars: &[(&str, f64)],
    target: Option<(&str, f64)>,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = bars.len().max(1);
    let ymax = bars.iter().map(|b| b.1).chain(target.map(|t| t.1)).fold(0.1, f64::max) * 1.2;
    let labels: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            // A label under the middle of each bar only.
            let i = x.floor();
            if (x - i - 0.5).abs() < 0.01 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    for (i, (_, v)) in bars.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let x = i as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *v)],
                color.filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{v:.2}"),
                (x + 0.35, *v + ymax * 0.02),
                ("sans-serif", 14),
            )))
            .map_err(err)?;
    }
    if let Some((name, value)) = target {
        chart
            .draw_series(LineSeries::new([(0.0, value), (n as f64, value)], RED.stroke_width(1)))
            .map_err(err)?
            .label(name)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(1)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
