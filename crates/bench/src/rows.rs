//! The row format of every benchmark and experiment.
//!
//! A result is a list of flat rows. Every row names the table it belongs to
//! (`bench`), who measured it (`source`: `bulkwire`, `udp`, `tcp`, `mpi`,
//! `sim`, `paper`, …), the variant (`what`: an algorithm, order, mode or
//! trace; empty where there is one), the processes (`procs`), the message
//! size (`size_bytes`) and the offered load (`load`) where they apply, then
//! its own columns, each named with its unit (`median_us`, `mb_per_s`,
//! `sent_bytes`, `loss_share`, `mode_switches_count`, …) and, where an
//! experiment has confidence intervals, `<metric>_lo` and `<metric>_hi`.
//! The same rows feed the printed table, `--json`, `--csv` and the plots.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One cell of a row beyond the fixed columns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl Value {
    /// The value as a number (booleans are 0 or 1; text is not a number).
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            Value::Int(i) => Some(*i as f64),
            Value::Float(x) => Some(*x),
            Value::Text(_) => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Text(s) => f.write_str(s),
        }
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}

impl From<u64> for Value {
    fn from(x: u64) -> Value {
        i64::try_from(x).map_or(Value::Float(x as f64), Value::Int)
    }
}

impl From<usize> for Value {
    fn from(x: usize) -> Value {
        Value::from(x as u64)
    }
}

impl From<u32> for Value {
    fn from(x: u32) -> Value {
        Value::Int(i64::from(x))
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}

/// One row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub bench: String,
    pub source: String,
    pub what: String,
    pub procs: u32,
    pub size_bytes: Option<u64>,
    pub load: Option<f64>,
    /// The row's own columns, in the order they are printed.
    pub fields: Vec<(String, Value)>,
}

/// The fixed columns, in order.
const FIXED: [&str; 6] = ["bench", "source", "what", "procs", "size_bytes", "load"];

impl Row {
    pub fn new(bench: &str, source: &str, what: impl Into<String>, procs: u32) -> Row {
        Row {
            bench: bench.into(),
            source: source.into(),
            what: what.into(),
            procs,
            size_bytes: None,
            load: None,
            fields: Vec::new(),
        }
    }

    pub fn size(mut self, bytes: usize) -> Row {
        self.size_bytes = Some(bytes as u64);
        self
    }

    pub fn load(mut self, load: f64) -> Row {
        self.load = Some(load);
        self
    }

    /// Adds a column (replacing one of the same name). `name` carries the unit.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Row {
        self.set(name, value);
        self
    }

    /// Adds a column where there is a value.
    pub fn with_opt<T: Into<Value>>(self, name: &str, value: Option<T>) -> Row {
        match value {
            Some(v) => self.with(name, v),
            None => self,
        }
    }

    /// Adds `name` with `name_lo` and `name_hi`: an estimate and its
    /// confidence interval.
    pub fn with_interval(self, name: &str, mean: f64, half_width: f64) -> Row {
        self.with(name, mean)
            .with(&format!("{name}_lo"), mean - half_width)
            .with(&format!("{name}_hi"), mean + half_width)
    }

    pub fn set(&mut self, name: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.fields.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.fields.push((name.to_string(), value)),
        }
    }

    /// A column beyond the fixed ones.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// A column as a number.
    pub fn num(&self, name: &str) -> Option<f64> {
        self.field(name).and_then(Value::number)
    }

    /// A column as text.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.field(name) {
            Some(Value::Text(s)) => Some(s),
            _ => None,
        }
    }

    /// Every column, fixed ones first, as (name, value); absent ones left out.
    pub fn columns(&self) -> Vec<(String, Value)> {
        let mut c = vec![
            ("bench".to_string(), Value::from(self.bench.as_str())),
            ("source".to_string(), Value::from(self.source.as_str())),
            ("what".to_string(), Value::from(self.what.as_str())),
            ("procs".to_string(), Value::from(self.procs)),
        ];
        if let Some(s) = self.size_bytes {
            c.push(("size_bytes".into(), Value::from(s)));
        }
        if let Some(l) = self.load {
            c.push(("load".into(), Value::from(l)));
        }
        c.extend(self.fields.iter().cloned());
        c
    }
}

impl Serialize for Row {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let columns = self.columns();
        let mut map = serializer.serialize_map(Some(columns.len()))?;
        for (name, value) in &columns {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Row, D::Error> {
        deserializer.deserialize_map(RowVisitor)
    }
}

/// Reads a row's columns in the order they come, so that a row read back
/// prints as it was written.
struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = Row;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row: an object with bench, source, what and procs")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row, A::Error> {
        let mut row = Row::new("", "", "", 0);
        let mut seen = [false; 4];
        while let Some(name) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            let text = |v: Value| match v {
                Value::Text(s) => Ok(s),
                other => Err(de::Error::custom(format!("{name} must be text, not {other}"))),
            };
            let number = |v: &Value| v.number().ok_or_else(|| de::Error::custom(format!("{name} must be a number")));
            match name.as_str() {
                "bench" => (row.bench, seen[0]) = (text(value)?, true),
                "source" => (row.source, seen[1]) = (text(value)?, true),
                "what" => (row.what, seen[2]) = (text(value)?, true),
                "procs" => match value {
                    Value::Int(n) => (row.procs, seen[3]) = (u32::try_from(n).map_err(de::Error::custom)?, true),
                    _ => return Err(de::Error::custom("procs must be a whole number")),
                },
                "size_bytes" => match value {
                    Value::Int(n) => row.size_bytes = Some(u64::try_from(n).map_err(de::Error::custom)?),
                    _ => return Err(de::Error::custom("size_bytes must be a whole number")),
                },
                "load" => row.load = Some(number(&value)?),
                _ => row.fields.push((name, value)),
            }
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(de::Error::custom(format!("a row without {}", FIXED[missing])));
        }
        Ok(row)
    }
}

/// What a benchmark or an experiment reports: its rows, and notes for a
/// reader of the table (printed as `# …` lines under it, or on standard
/// error beside JSON and CSV).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    /// The rows of table `bench`.
    pub fn table(&self, bench: &str) -> impl Iterator<Item = &Row> {
        let bench = bench.to_string();
        self.rows.iter().filter(move |r| r.bench == bench)
    }

    /// The first row of `bench` from `source` with variant `what`, and size
    /// `size` where one is given.
    pub fn find(&self, bench: &str, source: &str, what: &str, size: Option<u64>) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.bench == bench && r.source == source && r.what == what && (size.is_none() || r.size_bytes == size)
        })
    }

    /// The rows as a JSON list.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.rows).expect("rows serialise")
    }

    /// The rows as CSV: one header of every column any row has (fixed ones
    /// first, the rest in the order they first appear), a line per row.
    pub fn csv(&self) -> String {
        csv(&self.rows)
    }
}

/// `rows` as CSV (see [`Report::csv`]).
pub fn csv<'a>(rows: impl IntoIterator<Item = &'a Row>) -> String {
    let rows: Vec<&Row> = rows.into_iter().collect();
    let mut header: Vec<String> = FIXED.iter().map(|s| s.to_string()).collect();
    for row in &rows {
        for (name, _) in &row.fields {
            if !header.contains(name) {
                header.push(name.clone());
            }
        }
    }
    let mut out = header.join(",");
    out.push('\n');
    for row in rows {
        let columns = row.columns();
        let cells: Vec<String> = header
            .iter()
            .map(|name| columns.iter().find(|(n, _)| n == name).map_or_else(String::new, |(_, v)| csv_cell(v)))
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

fn csv_cell(v: &Value) -> String {
    let text = v.to_string();
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// `x` with `decimals`, or "-" where there is no figure.
pub fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Row {
        Row::new("pingpong", "udp", "busy-poll", 2)
            .size(64)
            .with("median_us", 3.5)
            .with("sent_bytes", 640u64)
            .with("completed", true)
            .with("trace", "pde1")
    }

    #[test]
    fn a_row_is_flat_json_in_column_order_and_reads_back() {
        let row = sample();
        let json = serde_json::to_string(&row).unwrap();
        assert_eq!(
            json,
            r#"{"bench":"pingpong","source":"udp","what":"busy-poll","procs":2,"size_bytes":64,"median_us":3.5,"sent_bytes":640,"completed":true,"trace":"pde1"}"#
        );
        assert_eq!(serde_json::from_str::<Row>(&json).unwrap(), row);
    }

    #[test]
    fn a_row_without_its_fixed_columns_is_refused() {
        let err = serde_json::from_str::<Row>(r#"{"bench":"x","source":"sim","what":""}"#).unwrap_err();
        assert!(err.to_string().contains("without procs"), "{err}");
        assert!(serde_json::from_str::<Row>(r#"{"bench":1,"source":"sim","what":"","procs":1}"#).is_err());
        assert!(serde_json::from_str::<Row>(r#"{"bench":"x","source":"sim","what":"","procs":-1}"#).is_err());
    }

    #[test]
    fn csv_has_every_column_of_every_row() {
        let report = Report {
            rows: vec![sample(), Row::new("pingpong", "tcp", "a, b", 2).load(0.5).with("p99_us", 9.0)],
            notes: vec![],
        };
        let csv = report.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "bench,source,what,procs,size_bytes,load,median_us,sent_bytes,completed,trace,p99_us");
        assert_eq!(lines[1], "pingpong,udp,busy-poll,2,64,,3.5,640,true,pde1,");
        assert_eq!(lines[2], "pingpong,tcp,\"a, b\",2,,0.5,,,,,9");
    }

    #[test]
    fn an_interval_is_three_columns() {
        let row = Row::new("x", "sim", "", 1).with_interval("latency_ms", 2.0, 0.5);
        assert_eq!(
            (row.num("latency_ms"), row.num("latency_ms_lo"), row.num("latency_ms_hi")),
            (Some(2.0), Some(1.5), Some(2.5))
        );
    }
}
