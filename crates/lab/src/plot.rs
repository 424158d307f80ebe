//! PNG line charts for the experiments, with plotters.
//!
//! Text (titles, axis names, tick labels, legends) needs a TrueType font. None
//! is built in: the first of `BULKWIRE_PLOT_FONT` and a few usual system font
//! files that exists is used (on Debian, `apt-get install fonts-dejavu-core`).
//! Without one the charts are drawn without text, so a plot never fails for
//! want of a font; `BULKWIRE_PLOT_FONT=none` forces that.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Font files tried in order (Debian/Ubuntu, Fedora, Arch, macOS).
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Colours that stay apart on white.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(90, 90, 90),
];

/// Whether text can be drawn (a font was found and registered).
pub fn has_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let chosen = std::env::var("BULKWIRE_PLOT_FONT").ok();
        if chosen.as_deref() == Some("none") {
            return false;
        }
        let candidates = chosen.iter().map(String::as_str).chain(FONT_FILES.iter().copied());
        for file in candidates {
            if let Ok(bytes) = std::fs::read(file) {
                // Registered fonts live for the whole process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line of a chart.
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub colour: RGBColor,
    /// Dashed and thin: a reference rather than a measurement.
    pub reference: bool,
}

/// One chart.
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: Range<f64>,
    pub y: Range<f64>,
    pub lines: Vec<Line>,
}

/// How an axis places its values: evenly, or by their logarithm (of base
/// 2, whose ticks fall on powers of two, or 10). A logarithmic axis needs
/// a range above zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Axis {
    #[default]
    Linear,
    Log2,
    Log10,
}

/// Draws `panels` side by side into a PNG of `width` × `height` pixels.
pub fn write_png(path: &Path, panels: &[Panel], width: u32, height: u32) -> Result<(), String> {
    write_png_on(path, panels, width, height, (Axis::Linear, Axis::Linear))
}

/// [`write_png`] with the axes placed as `axes` (x, y) say.
pub fn write_png_on(path: &Path, panels: &[Panel], width: u32, height: u32, axes: (Axis, Axis)) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel, axes).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area<'_>, panel: &Panel, axes: (Axis, Axis)) -> Result<(), Box<dyn std::error::Error>> {
    let log = |range: &Range<f64>, base: f64| range.clone().log_scale().base(base);
    let base = |axis: Axis| if axis == Axis::Log2 { 2.0 } else { 10.0 };
    let (x, y) = (panel.x.clone(), panel.y.clone());
    match axes {
        (Axis::Linear, Axis::Linear) => draw_on(area, panel, x, y, axes),
        (Axis::Linear, b) => draw_on(area, panel, x, log(&y, base(b)), axes),
        (a, Axis::Linear) => draw_on(area, panel, log(&x, base(a)), y, axes),
        (a, b) => draw_on(area, panel, log(&x, base(a)), log(&y, base(b)), axes),
    }
}

/// A tick label of a logarithmic axis: whole numbers without decimals,
/// others to three significant digits.
fn log_tick(v: &f64) -> String {
    if *v >= 1.0 && (v - v.round()).abs() < 1e-6 * v {
        format!("{v:.0}")
    } else {
        let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
        format!("{v:.decimals$}")
    }
}

fn draw_on<X, Y>(
    area: &Area<'_>,
    panel: &Panel,
    x: X,
    y: Y,
    axes: (Axis, Axis),
) -> Result<(), Box<dyn std::error::Error>>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let text = has_font();
    let mut builder = ChartBuilder::on(area);
    builder.margin(14).x_label_area_size(if text { 42 } else { 8 }).y_label_area_size(if text { 58 } else { 8 });
    if text {
        builder.caption(&panel.title, ("sans-serif", 17));
    }
    let mut chart = builder.build_cartesian_2d(x, y)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE).bold_line_style(RGBColor(225, 225, 225));
    if text {
        mesh.x_desc(&panel.x_label).y_desc(&panel.y_label).label_style(("sans-serif", 13));
        if axes.0 != Axis::Linear {
            mesh.x_label_formatter(&log_tick);
        }
        if axes.1 != Axis::Linear {
            mesh.y_label_formatter(&log_tick);
        }
    } else {
        // No tick labels at all: even an empty one asks for a font. The grid
        // goes with them, so draw a coarse one by hand below.
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    if !text {
        let grid = RGBColor(225, 225, 225);
        let (x, y) = (&panel.x, &panel.y);
        for k in 1..10 {
            let gx = x.start + (x.end - x.start) * k as f64 / 10.0;
            let gy = y.start + (y.end - y.start) * k as f64 / 10.0;
            chart.draw_series(LineSeries::new([(gx, y.start), (gx, y.end)], grid))?;
            chart.draw_series(LineSeries::new([(x.start, gy), (x.end, gy)], grid))?;
        }
    }
    for line in &panel.lines {
        let colour = line.colour;
        let points = line.points.iter().copied();
        let drawn = if line.reference {
            chart.draw_series(DashedLineSeries::new(points, 6, 4, colour.stroke_width(1)))?
        } else {
            chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?
        };
        if text && !line.label.is_empty() {
            drawn
                .label(line.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
    }
    if text && panel.lines.iter().any(|l| !l.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(190, 190, 190))
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    Ok(())
}

/// Vertical bars of ± `half` around each `(x, y, half)`, with ticks
/// `tick` wide at both ends: confidence intervals drawn as unlabelled lines.
pub fn error_bars(points: &[(f64, f64, f64)], colour: RGBColor, tick: f64) -> Vec<Line> {
    let mut lines = Vec::new();
    for &(x, y, half) in points.iter().filter(|p| p.2 > 0.0) {
        let (lo, hi) = (y - half, y + half);
        for segment in
            [vec![(x, lo), (x, hi)], vec![(x - tick, lo), (x + tick, lo)], vec![(x - tick, hi), (x + tick, hi)]]
        {
            lines.push(Line { label: String::new(), points: segment, colour, reference: false });
        }
    }
    lines
}
