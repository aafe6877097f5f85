//! A product's five charts on the drop page: units sold against stock, checkouts per second, answer latency, the waitlist and payments needing attention.

use maud::{html, Markup};

use crate::{
    charts::{self, num, series_text, Chart, Line},
    desk::DropSeries,
    history::Sample,
};

/// The charts of product `id`: `series` from its payments (`None`: none answered yet),
/// `samples` the page's own samples of its waitlist and attention count, `stock` its
/// units in all (`None`: the order service did not answer).
pub fn product(
    id: i64,
    series: Option<&DropSeries>,
    samples: &[Sample],
    stock: Option<i64>,
) -> Markup {
    let empty = DropSeries::default();
    let s = series.unwrap_or(&empty);
    html! {
        div.charts id=(format!("charts-{id}")) {
            (charts::render(&sold(id, s, stock)))
            (charts::render(&checkouts(id, s)))
            (charts::render(&latency(id, s)))
            (charts::render(&sampled(id, samples, "waitlist", "Waitlist", "members waiting", |s| s.waiting)))
            (charts::render(&sampled(id, samples, "attention", "Needing attention", "payments", |s| s.attention)))
        }
    }
}

fn sold(id: i64, s: &DropSeries, stock: Option<i64>) -> Chart {
    let mut total = 0;
    let mut points = Vec::with_capacity(s.buckets.len() + 1);
    if !s.buckets.is_empty() {
        points.push((0.0, 0.0));
    }
    for b in &s.buckets {
        total += b.completed;
        points.push(((b.offset_secs + s.bucket_secs) as f64, total as f64));
    }
    let summary = match stock {
        Some(units) => format!("{total} of {units} units sold."),
        None => format!("{total} units sold."),
    };
    Chart {
        id: format!("chart-{id}-sold"),
        title: "Units sold".into(),
        summary,
        x_label: "seconds into the drop",
        y_label: "units",
        lines: vec![Line {
            label: "sold",
            class: "line-a",
            points,
        }],
        limit: stock.map(|u| ("stock", u as f64)),
        data: vec![("total", total.to_string())],
        area: true,
    }
}

fn checkouts(id: i64, s: &DropSeries) -> Chart {
    let width = s.bucket_secs.max(1);
    let points: Vec<(f64, f64)> = s
        .buckets
        .iter()
        .map(|b| (b.offset_secs as f64, b.completed as f64 / width as f64))
        .collect();
    let peak = points.iter().map(|p| p.1).fold(0.0, f64::max);
    Chart {
        id: format!("chart-{id}-checkouts"),
        title: "Checkouts per second".into(),
        summary: format!("Peak {} a second, over {width} s buckets.", num(peak)),
        x_label: "seconds into the drop",
        y_label: "checkouts / s",
        lines: vec![Line {
            label: "checkouts",
            class: "line-a",
            points,
        }],
        limit: None,
        data: vec![("bucket-secs", width.to_string())],
        area: true,
    }
}

fn latency(id: i64, s: &DropSeries) -> Chart {
    let line = |pick: fn(&crate::desk::Bucket) -> Option<f64>| -> Vec<(f64, f64)> {
        s.buckets
            .iter()
            .filter_map(|b| pick(b).map(|ms| (b.offset_secs as f64, (ms * 10.0).round() / 10.0)))
            .collect()
    };
    let p50 = line(|b| b.p50_ms);
    let p95 = line(|b| b.p95_ms);
    let ms = |v: Option<f64>| v.map_or("none".to_owned(), |v| format!("{v:.1}"));
    let summary = match (s.p50_ms, s.p95_ms) {
        (Some(a), Some(b)) => format!("Whole drop: p50 {a:.1} ms, p95 {b:.1} ms."),
        _ => "No payment answered yet.".to_owned(),
    };
    let p95_text = series_text(&p95);
    Chart {
        id: format!("chart-{id}-latency"),
        title: "Answer latency".into(),
        summary,
        x_label: "seconds into the drop",
        y_label: "ms",
        lines: vec![
            Line {
                label: "p50",
                class: "line-a",
                points: p50,
            },
            Line {
                label: "p95",
                class: "line-b",
                points: p95,
            },
        ],
        limit: None,
        data: vec![
            ("series-p95", p95_text),
            ("p50", ms(s.p50_ms)),
            ("p95", ms(s.p95_ms)),
        ],
        area: false,
    }
}

fn sampled(
    id: i64,
    samples: &[Sample],
    name: &str,
    title: &str,
    unit: &'static str,
    value: fn(&Sample) -> i64,
) -> Chart {
    let start = samples.first().map(|s| s.at);
    let points: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| {
            let secs = start.map_or(0, |t0| (s.at - t0).num_milliseconds()) as f64 / 1000.0;
            ((secs * 10.0).round() / 10.0, value(s) as f64)
        })
        .collect();
    let now = samples.last().map_or(0, value);
    Chart {
        id: format!("chart-{id}-{name}"),
        title: title.into(),
        summary: format!("{now} now; sampled as this page refreshes."),
        x_label: "seconds of samples",
        y_label: unit,
        lines: vec![Line {
            label: "now",
            class: if name == "attention" {
                "line-b"
            } else {
                "line-a"
            },
            points,
        }],
        limit: None,
        data: Vec::new(),
        area: true,
    }
}
