//! SVG plots of the simulation (`--plot DIR`), drawn with `plotters`' SVG
//! backend: delay over time against the true quantile, tail latency
//! (1 − F on log–log axes) per strategy, and oracle sweeps.

use std::error::Error;
use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::engine::{UserRecord, MS};

/// How a line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    /// Solid, in the next palette colour.
    Solid,
    /// Dashed, in the next palette colour (a level to compare with).
    Dashed,
    /// Dashed black (the truth).
    Truth,
}

/// One named line.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub stroke: Stroke,
}

impl Series {
    /// A solid line.
    pub fn solid(name: &str, points: Vec<(f64, f64)>) -> Self {
        Self::new(name, points, Stroke::Solid)
    }

    /// A dashed line.
    pub fn dashed(name: &str, points: Vec<(f64, f64)>) -> Self {
        Self::new(name, points, Stroke::Dashed)
    }

    /// A dashed black line: the truth.
    pub fn truth(name: &str, points: Vec<(f64, f64)>) -> Self {
        Self::new(name, points, Stroke::Truth)
    }

    fn new(name: &str, points: Vec<(f64, f64)>, stroke: Stroke) -> Self {
        Self {
            name: name.to_owned(),
            points,
            stroke,
        }
    }
}

/// Colours that stay apart on white (Tableau 10, without grey and olive).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// Axis scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Linear from 0 (or the data's minimum, if negative).
    Linear,
    /// Logarithmic.
    Log,
}

/// An x–y chart.
pub struct Chart<'a> {
    /// Title.
    pub title: &'a str,
    /// X-axis label.
    pub x_label: &'a str,
    /// Y-axis label.
    pub y_label: &'a str,
    /// X scale.
    pub x: Scale,
    /// Y scale.
    pub y: Scale,
    /// Where the legend goes (away from the data).
    pub legend: SeriesLabelPosition,
    /// The lines.
    pub series: Vec<Series>,
}

const SIZE: (u32, u32) = (960, 600);

fn bounds(values: impl Iterator<Item = f64>, scale: Scale) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    match scale {
        Scale::Linear => lo.min(0.0)..(hi * 1.05).max(lo.min(0.0) + 1e-9),
        Scale::Log => (lo / 1.25)..(hi * 1.25).max(lo * 2.0),
    }
}

impl Chart<'_> {
    /// Writes the chart to `path` as SVG.
    pub fn write(&self, path: &Path) -> Result<(), Box<dyn Error>> {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let (x, y) = (bounds(xs, self.x), bounds(ys, self.y));
        match (self.x, self.y) {
            (Scale::Linear, Scale::Linear) => self.draw(path, x, y),
            (Scale::Log, Scale::Linear) => self.draw(path, x.log_scale(), y),
            (Scale::Linear, Scale::Log) => self.draw(path, x, y.log_scale()),
            (Scale::Log, Scale::Log) => self.draw(path, x.log_scale(), y.log_scale()),
        }
    }

    fn draw<X, Y>(&self, path: &Path, x: X, y: Y) -> Result<(), Box<dyn Error>>
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(self.title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let mut next = 0;
        for s in &self.series {
            let color = if s.stroke == Stroke::Truth {
                BLACK
            } else {
                next += 1;
                PALETTE[(next - 1) % PALETTE.len()]
            };
            let style = color.stroke_width(2);
            let points = s.points.iter().copied();
            let legend = move |(x, y): (i32, i32)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            };
            if s.stroke != Stroke::Solid {
                chart
                    .draw_series(DashedLineSeries::new(points, 8, 5, style))?
                    .label(s.name.as_str())
                    .legend(legend);
            } else {
                chart
                    .draw_series(LineSeries::new(points, style))?
                    .label(s.name.as_str())
                    .legend(legend);
            }
        }
        chart
            .configure_series_labels()
            .position(self.legend.clone())
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// The tail of a latency distribution as `(latency ms, 1 − F)` points, at
/// 40 points a decade of 1 − F, from 1 down to 1/n: the tail gets as many
/// points as the body. Failed user requests are left out.
pub fn survival(records: &[UserRecord]) -> Vec<(f64, f64)> {
    let mut v: Vec<u64> = records
        .iter()
        .filter(|r| !r.failed)
        .map(|r| r.latency_ns)
        .collect();
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let mut points = Vec::new();
    let floor = 1.0 / n as f64;
    for k in 0.. {
        let s = 10f64.powf(-f64::from(k) / 40.0);
        if s < floor {
            break;
        }
        // The smallest latency with at most a share s of requests above it.
        let rank = (((1.0 - s) * n as f64).ceil() as usize).clamp(1, n);
        points.push((v[rank - 1] as f64 / MS as f64, s));
    }
    points.push((v[n - 1] as f64 / MS as f64, floor));
    points
}
