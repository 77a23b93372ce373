//! How admin commands print: aligned tables for people, `--format json` or
//! `--format yaml` for scripts.
//!
//! A command builds its answer once as a [`serde_json::Value`] and a
//! [`Table`] of the columns a person wants; [`Output::print`] picks one. JSON
//! and YAML carry every field (the table may leave some out), so scripts
//! never parse the table.

use std::fmt::Write as _;

use serde_json::Value;

tokio::task_local! {
    /// Set by [`capture`]: the documents [`Output::print`] would have printed.
    static CAPTURED: std::cell::RefCell<Vec<Value>>;
}

/// Runs a command with its JSON documents kept instead of printed, and
/// returns them with the command's result. The web console (`crate::console`)
/// answers with exactly what `--format json` prints this way: one code path
/// makes both, so they cannot drift apart.
pub async fn capture<F>(command: F) -> (Vec<Value>, anyhow::Result<()>)
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    CAPTURED
        .scope(std::cell::RefCell::new(Vec::new()), async move {
            let result = command.await;
            let docs = CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()));
            (docs, result)
        })
        .await
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns (the default).
    #[default]
    Table,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
}

/// Rows under a header, printed with each column as wide as its widest cell.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names (printed upper-case, as kafka-topics and rpk do).
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_ascii_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: ToString,
    {
        self.rows.push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, columns two spaces apart; trailing blanks trimmed.
    pub fn render(&self) -> String {
        let columns = self.headers.len().max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut widths = vec![0usize; columns];
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = line.get(i).map(String::as_str).unwrap_or("");
                let _ = write!(text, "{cell:<width$}  ");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Where a command's answer goes, in the chosen format.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// The format asked for.
    pub format: Format,
}

impl Output {
    /// Prints `value` as JSON or YAML, or `table` (and `notes` under it) for people.
    pub fn print(&self, value: &Value, table: &Table, notes: &[String]) {
        if CAPTURED.try_with(|c| c.borrow_mut().push(value.clone())).is_ok() {
            return;
        }
        match self.format {
            Format::Json => println!(
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into())
            ),
            Format::Yaml => print!("{}", to_yaml(value)),
            Format::Table => {
                print!("{}", table.render());
                for note in notes {
                    println!("{note}");
                }
            }
        }
    }

    /// Prints a one-line confirmation for people, or `value` for scripts.
    pub fn done(&self, value: &Value, message: &str) {
        match self.format {
            Format::Table => println!("{message}"),
            _ => self.print(value, &Table::default(), &[]),
        }
    }
}

/// `value` as a YAML block document. Strings that YAML would read as
/// something else (numbers, booleans, null, text with `:` or `#`...) are
/// quoted as JSON strings, which YAML accepts.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Array(items) if items.is_empty() => out.push_str("[]\n"),
        Value::Object(map) if map.is_empty() => out.push_str("{}\n"),
        Value::Array(_) | Value::Object(_) => write_block(&mut out, value, 0),
        scalar => {
            out.push_str(&yaml_scalar(scalar));
            out.push('\n');
        }
    }
    out
}

fn write_block(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let key = yaml_string(key);
                match v {
                    Value::Object(m) if !m.is_empty() => {
                        let _ = writeln!(out, "{pad}{key}:");
                        write_block(out, v, indent + 2);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}{key}:");
                        write_block(out, v, indent);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}{key}: {}", yaml_scalar(v));
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        // The first key goes on the dash's line, the rest under it.
                        let mut nested = String::new();
                        write_block(&mut nested, item, indent + 2);
                        let body = nested.strip_prefix(&" ".repeat(indent + 2)).unwrap_or(&nested);
                        let _ = write!(out, "{pad}- {body}");
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}-");
                        write_block(out, item, indent + 2);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}- {}", yaml_scalar(item));
                    }
                }
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}{}", yaml_scalar(scalar));
        }
    }
}

fn yaml_scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => yaml_string(s),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

fn yaml_string(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' '))
        && !s.starts_with(['-', ' ', '.'])
        && !s.ends_with(' ')
        && s.parse::<f64>().is_err()
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n" | "~"
        );
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_aligns_its_columns() {
        let mut t = Table::new(&["topic", "partitions"]);
        t.row(["orders", "3"]);
        t.row(["a-much-longer-name", "12"]);
        assert_eq!(
            t.render(),
            "TOPIC               PARTITIONS\norders              3\na-much-longer-name  12\n"
        );
    }

    #[test]
    fn yaml_nests_lists_of_objects_and_quotes_what_would_change_type() {
        let v = json!({"group": "g1", "partitions": [{"topic": "t", "partition": 0, "lag": 5}, {"topic": "t", "partition": 1, "lag": null}],
                       "state": "Stable", "id": "007", "note": "a: b", "empty": []});
        let text = to_yaml(&v);
        assert_eq!(
            text,
            "empty: []\ngroup: g1\nid: \"007\"\nnote: \"a: b\"\npartitions:\n- lag: 5\n  partition: 0\n  topic: t\n- lag: null\n  partition: 1\n  topic: t\nstate: Stable\n"
        );
    }
}
