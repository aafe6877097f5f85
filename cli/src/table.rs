//! Plain text tables and number formats for the terminal.

use std::time::Duration;

/// Renders rows as left-aligned columns under a header, separated by two spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.push(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  "),
    );
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// Prints `items` as a table under `header`, one row each, then `more` (how to ask
/// for the next page) when there may be one.
pub fn print_page<T>(
    header: &[&str],
    items: &[T],
    row: impl Fn(&T) -> Vec<String>,
    more: Option<String>,
) {
    let rows: Vec<Vec<String>> = items.iter().map(row).collect();
    println!("{}", render(header, &rows));
    if let Some(more) = more {
        println!("{more}");
    }
}

/// Label/value pairs, values right-aligned: the demo's result table.
pub fn key_values(rows: &[(&str, String)]) -> String {
    let kw = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let vw = rows
        .iter()
        .map(|(_, v)| v.chars().count())
        .max()
        .unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("  {k:<kw$}  {v:>vw$}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Minor units as a decimal amount: 12900 -> "129.00".
pub fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    format!("{sign}{}.{:02}", m / 100, m % 100)
}

/// A duration in milliseconds with one decimal below 10 ms.
pub fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_has_two_decimals_and_no_float() {
        assert_eq!(money(12_900), "129.00");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(-101), "-1.01");
        assert_eq!(money(i64::MIN), "-92233720368547758.08");
    }

    #[test]
    fn tables_align() {
        let t = render(&["a", "bb"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "a     bb\n----  --\nlong  x");
    }
}
