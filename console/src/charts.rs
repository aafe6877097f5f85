//! Line charts as inline SVG, rendered on the server: axes, labels, an optional stock line, and the plotted points as data attributes.

use maud::{html, Markup, PreEscaped};

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 170.0;

/// The plot area's edges in the chart (y grows downwards), each named once rather than
/// worked out from the margins wherever a line starts or ends there.
struct Plot {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

/// Margins: the y labels on the left, the x labels and the axis title below.
const PLOT: Plot = Plot {
    left: 46.0,
    right: WIDTH - 10.0,
    top: 12.0,
    bottom: HEIGHT - 30.0,
};

/// One line of a chart: its legend and its points (x, y), x ascending.
pub struct Line {
    pub label: &'static str,
    /// The CSS class that colours it (`line-a`, `line-b`).
    pub class: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A chart: its element id, its title and one-line summary (shown, and given to screen
/// readers), the axes' labels, its lines (the first one's points are the `data-series`),
/// an optional horizontal limit (the stock) and further data attributes.
pub struct Chart {
    pub id: String,
    pub title: String,
    pub summary: String,
    pub x_label: &'static str,
    pub y_label: &'static str,
    pub lines: Vec<Line>,
    pub limit: Option<(&'static str, f64)>,
    pub data: Vec<(&'static str, String)>,
    /// Filled under the first line.
    pub area: bool,
}

/// `v` as the charts write numbers: whole ones without a fraction, others to three
/// decimals at most.
pub fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Points as `x:y` pairs separated by spaces.
pub fn series_text(points: &[(f64, f64)]) -> String {
    points
        .iter()
        .map(|(x, y)| format!("{}:{}", num(*x), num(*y)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` safe inside a double-quoted attribute.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten at or above `v` (at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * power)
}

pub fn render(c: &Chart) -> Markup {
    let first = c.lines.first().map(|l| l.points.as_slice()).unwrap_or(&[]);
    let x_max = c
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_top = nice_ceiling(
        c.lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .chain(c.limit.map(|l| l.1))
            .fold(0.0f64, f64::max),
    );
    let (pw, ph) = (PLOT.right - PLOT.left, PLOT.bottom - PLOT.top);
    let sx = |x: f64| PLOT.left + x / x_max * pw;
    let sy = |y: f64| PLOT.bottom - y / y_top * ph;
    let path = |pts: &[(f64, f64)]| {
        pts.iter()
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last = first.last().map_or(0.0, |p| p.1);
    let title_id = format!("{}-title", c.id);
    let desc_id = format!("{}-desc", c.id);
    // maud names attributes statically; the data attributes vary, so the opening tag is
    // written here, every value escaped.
    let mut open = format!(
        r#"<svg id="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-labelledby="{} {}" data-series="{}" data-last="{}" data-points="{}""#,
        escape(&c.id),
        escape(&title_id),
        escape(&desc_id),
        series_text(first),
        num(last),
        first.len()
    );
    for (name, value) in &c.data {
        open.push_str(&format!(r#" data-{name}="{}""#, escape(value)));
    }
    open.push('>');
    html! {
        figure.chart {
            figcaption { strong { (c.title) } " " span.muted { (c.summary) } }
            (PreEscaped(open))
            title id=(title_id) { (c.title) }
            desc id=(desc_id) { (c.summary) }
            // Grid and y labels: zero, half and the top.
            @for frac in [0.0, 0.5, 1.0] {
                line.grid x1=(PLOT.left) x2=(PLOT.right) y1=(sy(y_top * frac)) y2=(sy(y_top * frac)) {}
                text.tick x=(PLOT.left - 4.0) y=(sy(y_top * frac) + 4.0) text-anchor="end" { (num(y_top * frac)) }
            }
            line.axis x1=(PLOT.left) x2=(PLOT.left) y1=(PLOT.top) y2=(PLOT.bottom) {}
            line.axis x1=(PLOT.left) x2=(PLOT.right) y1=(PLOT.bottom) y2=(PLOT.bottom) {}
            text.tick x=(PLOT.left) y=(HEIGHT - 16.0) text-anchor="start" { "0" }
            text.tick x=(PLOT.right) y=(HEIGHT - 16.0) text-anchor="end" { (num(x_max.round())) }
            text.label x=(PLOT.left + pw / 2.0) y=(HEIGHT - 3.0) text-anchor="middle" { (c.x_label) }
            text.label x="10" y=(PLOT.top + ph / 2.0) text-anchor="middle"
                transform=(format!("rotate(-90 10 {})", PLOT.top + ph / 2.0)) { (c.y_label) }
            @if let Some((label, v)) = c.limit {
                line.limit x1=(PLOT.left) x2=(PLOT.right) y1=(sy(v)) y2=(sy(v)) {}
                text.limit-label x=(PLOT.right - 2.0) y=(sy(v) - 3.0) text-anchor="end" { (label) " " (num(v)) }
            }
            @if c.area && first.len() > 1 {
                polygon.area points=(format!("{:.1},{:.1} {} {:.1},{:.1}", sx(first[0].0), sy(0.0), path(first), sx(first[first.len() - 1].0), sy(0.0))) {}
            }
            @for l in &c.lines {
                @if l.points.len() > 1 {
                    polyline class=(l.class) points=(path(&l.points)) {}
                } @else if let Some((x, y)) = l.points.first() {
                    circle class=(l.class) cx=(format!("{:.1}", sx(*x))) cy=(format!("{:.1}", sy(*y))) r="2.5" {}
                }
            }
            (PreEscaped("</svg>"))
            @if c.lines.len() > 1 {
                div.legend {
                    @for l in &c.lines { span class=(format!("key {}", l.class)) { (l.label) } " " }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_series() {
        for (v, written) in [(3.0, "3"), (0.5, "0.5"), (1.0 / 3.0, "0.333")] {
            assert_eq!(num(v), written, "{v}");
        }
        assert_eq!(series_text(&[(0.0, 0.0), (2.0, 1.5)]), "0:0 2:1.5");
        for (v, ceiling) in [(7.0, 10.0), (16.0, 20.0), (0.0, 1.0)] {
            assert_eq!(nice_ceiling(v), ceiling, "{v}");
        }
    }

    #[test]
    fn renders_attributes() {
        let html = render(&Chart {
            id: "chart-1-sold".into(),
            title: "Units sold".into(),
            summary: "3 of 8".into(),
            x_label: "seconds",
            y_label: "units",
            lines: vec![Line {
                label: "sold",
                class: "line-a",
                points: vec![(0.0, 0.0), (1.0, 2.0), (2.0, 3.0)],
            }],
            limit: Some(("stock", 8.0)),
            data: vec![("bucket-secs", "1".into())],
            area: true,
        })
        .into_string();
        assert!(html.contains(r#"id="chart-1-sold""#), "{html}");
        assert!(html.contains(r#"data-series="0:0 1:2 2:3""#), "{html}");
        assert!(html.contains(r#"data-last="3""#), "{html}");
        assert!(html.contains(r#"data-points="3""#), "{html}");
        assert!(html.contains(r#"data-bucket-secs="1""#), "{html}");
        assert!(
            html.contains("<title id=\"chart-1-sold-title\">Units sold</title>"),
            "{html}"
        );
    }
}
