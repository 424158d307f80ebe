//! `bulkwire monitor`: link utilisation from the kernel's counters, as seed
//! 001 measured its production Ethernets: traffic summed over a fixed
//! interval (10 s there), utilisation as a share of the link's capacity, and
//! its distribution over the run as a histogram in tenths of the capacity
//! ("Histogram of ESC Ethernet", Figure 3) beside mean and peaks.
//!
//! Every interval the monitor reads each watched interface's counters from
//! `/sys/class/net/IFACE/statistics/` and, with `tc -s -j`, each of its
//! qdiscs and classes; a sample is the increase of each counter between two
//! readings over the time between them. A counter that went down (a wrap,
//! or the interface made anew) gives no sample for that interval.
//!
//! Utilisation is a rate over a capacity. An interface's capacity is its
//! `--speed`, else `--capacity`, else the speed the kernel reports (none for
//! loopback; 10 Gbit/s for a veth, whatever shapes it); its utilisation is
//! that of its busier direction. A class's capacity is its ceiling (htb's
//! `ceil`, else its `rate`), else its interface's; qdiscs report rates,
//! drops and backlog only.
//!
//! The parsers of the kernel's and tc's text are pure functions, tested on
//! output captured from iproute2 6.1 (whose `tc class show` prints text even
//! when asked for JSON) and 6.15.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bulkwire_bench::rows::{self, Report, Row};
use serde_json::Value;

use crate::plot::{write_png, Line, Panel, PALETTE};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Interfaces to watch (default: every interface but lo).
    #[arg(value_name = "IFACE")]
    pub ifaces: Vec<String>,
    /// Time between samples: 1s, 500ms, 100ms.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// How long to sample (30s, 10m, 1h); without it, until the command of
    /// --during exits, or Ctrl-C.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// The capacity of one interface, as tc writes rates (eth0=100mbit);
    /// repeat for others. Wins over --capacity and the kernel's speed.
    #[arg(long, value_name = "IFACE=RATE", value_parser = parse_speed_arg)]
    pub speed: Vec<(String, f64)>,
    /// The capacity of every interface without --speed (100mbit, 1gbit),
    /// instead of the speed the kernel reports.
    #[arg(long, value_name = "RATE", value_parser = bulkwire_bsp::parse_rate)]
    pub capacity: Option<f64>,
    /// Write the time series (a row per interface, qdisc and class and
    /// interval, table `monitor-trace`) to this CSV file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw utilisation and rate against time and the histogram of
    /// utilisation into monitor-*.png in this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// Parses a duration as people write it (`1s`, `500ms`, `10m`, `1h30m`);
/// zero is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}); write for example 1s, 500ms or 10m"))?;
    if d.is_zero() {
        return Err(format!("{text:?}: a duration longer than zero is needed"));
    }
    Ok(d)
}

/// Parses `IFACE=RATE` (`eth0=100mbit`).
pub fn parse_speed_arg(text: &str) -> Result<(String, f64), String> {
    let (iface, rate) =
        text.split_once('=').ok_or_else(|| format!("{text:?}: write IFACE=RATE, for example eth0=100mbit"))?;
    if iface.trim().is_empty() {
        return Err(format!("{text:?}: no interface before '='"));
    }
    Ok((iface.trim().to_string(), bulkwire_bsp::parse_rate(rate)?))
}

/// The interface counters read, in `/sys/class/net/IFACE/statistics/`.
pub const COUNTERS: [&str; 8] =
    ["rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors"];

/// The counters of a qdisc or a class, as tc names them.
pub const TC_COUNTERS: [&str; 4] = ["bytes", "packets", "drops", "overlimits"];

/// One reading of an interface's [`COUNTERS`].
pub type Counters = [u64; 8];

/// Parses a counter file of sysfs: one unsigned decimal number.
pub fn parse_counter(text: &str) -> Result<u64, String> {
    let t = text.trim();
    t.parse().map_err(|_| format!("{t:?} is not a counter (an unsigned whole number)"))
}

/// Parses `/sys/class/net/IFACE/speed` (Mbit/s) into bits per second:
/// `None` unless it is a positive number (loopback refuses the read, a
/// link that is down or a virtual one may say -1).
pub fn parse_speed(text: &str) -> Option<f64> {
    let mbit: i64 = text.trim().parse().ok()?;
    (mbit > 0).then_some(mbit as f64 * 1e6)
}

/// A qdisc's or a class's counters, as `tc -s` prints them.
#[derive(Clone, Debug, PartialEq)]
pub struct TcStats {
    /// A class (`tc class show`), else a qdisc.
    pub class: bool,
    /// htb, pfifo, fq_codel, …
    pub kind: String,
    /// A class's id (`1:10`) or a qdisc's handle (`10:`).
    pub handle: String,
    /// `None` at the root.
    pub parent: Option<String>,
    pub bytes: u64,
    pub packets: u64,
    pub drops: u64,
    pub overlimits: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
    /// The most a class may send, bits per second: htb's `ceil`, else its `rate`.
    pub ceil_bits_per_s: Option<f64>,
}

impl TcStats {
    fn counters(&self) -> [u64; 4] {
        [self.bytes, self.packets, self.drops, self.overlimits]
    }
}

/// Parses the output of `tc -s -j class show` or `tc -s -j qdisc show`:
/// JSON where tc prints it, else tc's text (iproute2 before 6.2 ignores
/// `-j` for classes). Entries printed without statistics are left out; a
/// `noqueue` qdisc, which holds nothing and counts nothing, too.
pub fn parse_tc(text: &str) -> Result<Vec<TcStats>, String> {
    let t = text.trim_start();
    let all = if t.is_empty() {
        Vec::new()
    } else if t.starts_with('[') {
        parse_tc_json(t)?
    } else {
        parse_tc_text(t)
    };
    Ok(all.into_iter().filter(|s| s.class || s.kind != "noqueue").collect())
}

fn parse_tc_json(text: &str) -> Result<Vec<TcStats>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("tc printed JSON that does not parse: {e}"))?;
    let list = value.as_array().ok_or("tc printed JSON that is not a list")?;
    let mut out = Vec::new();
    for o in list {
        // A class names its kind "class", a qdisc "kind".
        let (class, kind) = match (o.get("class").and_then(Value::as_str), o.get("kind").and_then(Value::as_str)) {
            (Some(k), _) => (true, k),
            (None, Some(k)) => (false, k),
            (None, None) => return Err(format!("an entry of tc's JSON with neither class nor kind: {o}")),
        };
        // Classes keep their statistics in "stats", qdiscs beside the rest.
        let stats = o.get("stats").filter(|s| s.is_object()).unwrap_or(o);
        let n = |key: &str| stats.get(key).and_then(Value::as_u64);
        let (Some(bytes), Some(packets)) = (n("bytes"), n("packets")) else { continue };
        let root = o.get("root").and_then(Value::as_bool).unwrap_or(false);
        // htb prints its rates in bytes per second.
        let ceil = if class {
            ["ceil", "rate"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_f64))
                .filter(|r| *r > 0.0)
                .map(|r| r * 8.0)
        } else {
            None
        };
        out.push(TcStats {
            class,
            kind: kind.to_string(),
            handle: o.get("handle").and_then(Value::as_str).unwrap_or("").to_string(),
            parent: if root { None } else { o.get("parent").and_then(Value::as_str).map(str::to_string) },
            bytes,
            packets,
            drops: n("drops").unwrap_or(0),
            overlimits: n("overlimits").unwrap_or(0),
            backlog_bytes: n("backlog").unwrap_or(0),
            backlog_packets: n("qlen").unwrap_or(0),
            ceil_bits_per_s: ceil,
        });
    }
    Ok(out)
}

/// tc's text: a line `class KIND ID (root | parent P) … [rate R] [ceil C] …`
/// or `qdisc KIND HANDLE (root | parent P) …`, then ` Sent B bytes P pkt
/// (dropped D, overlimits O requeues Q)` and ` backlog Bb Pp requeues Q`.
fn parse_tc_text(text: &str) -> Vec<TcStats> {
    let mut out = Vec::new();
    let mut current: Option<(TcStats, bool)> = None;
    for line in text.lines() {
        let words: Vec<&str> =
            line.split_whitespace().map(|w| w.trim_matches(|c| c == '(' || c == ')' || c == ',')).collect();
        match words.first().copied() {
            Some(first @ ("class" | "qdisc")) if words.len() >= 3 => {
                if let Some((s, true)) = current.take() {
                    out.push(s);
                }
                let class = first == "class";
                let after = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)).copied();
                let ceil = if class {
                    after("ceil").or_else(|| after("rate")).and_then(|r| bulkwire_bsp::parse_rate(r).ok())
                } else {
                    None
                };
                let stats = TcStats {
                    class,
                    kind: words[1].to_string(),
                    handle: words[2].to_string(),
                    parent: if words.get(3) == Some(&"root") { None } else { after("parent").map(str::to_string) },
                    bytes: 0,
                    packets: 0,
                    drops: 0,
                    overlimits: 0,
                    backlog_bytes: 0,
                    backlog_packets: 0,
                    ceil_bits_per_s: ceil,
                };
                current = Some((stats, false));
            }
            Some("Sent") => {
                if let Some((s, seen)) = current.as_mut() {
                    let before = |key: &str| {
                        words
                            .iter()
                            .position(|w| *w == key)
                            .and_then(|i| i.checked_sub(1))
                            .and_then(|i| words[i].parse().ok())
                    };
                    let after =
                        |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)?.parse().ok());
                    if let (Some(bytes), Some(packets)) = (before("bytes"), before("pkt")) {
                        (s.bytes, s.packets) = (bytes, packets);
                        s.drops = after("dropped").unwrap_or(0);
                        s.overlimits = after("overlimits").unwrap_or(0);
                        *seen = true;
                    }
                }
            }
            Some("backlog") => {
                if let Some((s, _)) = current.as_mut() {
                    s.backlog_bytes = words.get(1).and_then(|w| parse_tc_size(w)).unwrap_or(0);
                    s.backlog_packets =
                        words.get(2).and_then(|w| w.strip_suffix('p')).and_then(|p| p.parse().ok()).unwrap_or(0);
                }
            }
            _ => {}
        }
    }
    if let Some((s, true)) = current {
        out.push(s);
    }
    out
}

/// A size as tc prints it: `92288b`, `88Kb`, `1.5Mb` (binary multiples).
fn parse_tc_size(word: &str) -> Option<u64> {
    let lower = word.to_ascii_lowercase();
    let number = lower.strip_suffix('b')?;
    let (digits, scale) = match number.chars().last()? {
        'k' => (&number[..number.len() - 1], 1024.0),
        'm' => (&number[..number.len() - 1], 1024.0 * 1024.0),
        'g' => (&number[..number.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (number, 1.0),
    };
    let value: f64 = digits.parse().ok()?;
    (value >= 0.0 && value.is_finite()).then(|| (value * scale).round() as u64)
}

/// Where the counters are read.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// A directory laid out as `/sys/class/net`.
    pub net: PathBuf,
    /// The tc program; `None` reads no qdisc or class.
    pub tc: Option<PathBuf>,
}

impl Default for Kernel {
    fn default() -> Kernel {
        Kernel { net: PathBuf::from("/sys/class/net"), tc: Some(PathBuf::from("tc")) }
    }
}

/// Why tc gave nothing.
enum TcError {
    /// No tc program.
    Absent,
    /// tc ran and failed, or printed what does not parse.
    Failed(String),
}

impl Kernel {
    /// Every interface, sorted by name (the directories: bonding adds a
    /// file `bonding_masters` beside them).
    pub fn interfaces(&self) -> Result<Vec<String>, String> {
        let entries = std::fs::read_dir(&self.net)
            .map_err(|e| format!("cannot list the interfaces in {}: {e}", self.net.display()))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// An interface's [`COUNTERS`]; the error names the counter's file.
    pub fn counters(&self, iface: &str) -> Result<Counters, String> {
        let dir = self.net.join(iface).join("statistics");
        let mut counters = [0; 8];
        for (slot, name) in counters.iter_mut().zip(COUNTERS) {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{iface}: cannot read the counter {}: {e}", path.display()))?;
            *slot = parse_counter(&text).map_err(|e| format!("{iface}: {}: {e}", path.display()))?;
        }
        Ok(counters)
    }

    /// The link speed the kernel reports, bits per second, where it does.
    pub fn speed(&self, iface: &str) -> Option<f64> {
        std::fs::read_to_string(self.net.join(iface).join("speed")).ok().and_then(|t| parse_speed(&t))
    }

    /// An interface's qdiscs and classes, each with when tc read it (as it
    /// exited: most of its time goes to starting).
    fn tc(&self, iface: &str) -> Result<Vec<(Instant, TcStats)>, TcError> {
        let Some(tc) = &self.tc else { return Ok(Vec::new()) };
        let mut all = Vec::new();
        for what in ["qdisc", "class"] {
            let out = match Command::new(tc).args(["-s", "-j", what, "show", "dev", iface]).output() {
                Ok(out) => out,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(TcError::Absent),
                Err(e) => return Err(TcError::Failed(format!("cannot run {}: {e}", tc.display()))),
            };
            if !out.status.success() {
                let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
                return Err(TcError::Failed(format!("`tc -s -j {what} show dev {iface}` failed: {said}")));
            }
            let at = Instant::now();
            let parsed = parse_tc(&String::from_utf8_lossy(&out.stdout))
                .map_err(|e| TcError::Failed(format!("`tc -s -j {what} show dev {iface}`: {e}")))?;
            all.extend(parsed.into_iter().map(|s| (at, s)));
        }
        Ok(all)
    }
}

/// What a series measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Interface,
    Qdisc,
    Class,
}

/// The capacity utilisation is measured against, and where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub bits_per_s: f64,
    /// `--speed`, `--capacity`, `kernel` (the interface's speed), `ceil`
    /// (the class's), or `interface` (a class with its interface's).
    pub from: &'static str,
}

/// One interval of one series.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The end of the interval, seconds from the first reading.
    pub time_s: f64,
    /// The time between the two readings: for qdiscs and classes, between
    /// tc's, which come a little after the interfaces'.
    pub interval_s: f64,
    /// The increase of each counter ([`COUNTERS`] or [`TC_COUNTERS`]), or
    /// `None` where it went down.
    pub deltas: Vec<Option<u64>>,
    /// A qdisc's or class's queue at the end of the interval: bytes, packets.
    pub backlog: Option<(u64, u64)>,
}

impl Sample {
    /// Counter `i` per second.
    pub fn rate(&self, i: usize) -> Option<f64> {
        self.deltas[i].map(|d| d as f64 / self.interval_s)
    }
}

/// The samples of one interface, qdisc or class.
#[derive(Clone, Debug)]
pub struct Series {
    /// `eth0`; a class `eth0:1:10`; a qdisc `eth0:10:` (its handle), with
    /// `@PARENT` where qdiscs of the interface share a handle.
    pub what: String,
    pub kind: Kind,
    /// `interface`, or tc's kind and `qdisc` or `class` (`htb class`).
    pub label: String,
    pub capacity: Option<Capacity>,
    pub samples: Vec<Sample>,
}

impl Series {
    /// Bits per second over a sample: the busier direction of an interface.
    pub fn bits_per_s(&self, s: &Sample) -> Option<f64> {
        match self.kind {
            Kind::Interface => Some(s.rate(0)?.max(s.rate(1)?) * 8.0),
            Kind::Qdisc | Kind::Class => Some(s.rate(0)? * 8.0),
        }
    }

    /// Utilisation over a sample, where the capacity is known (and, for an
    /// interface, both directions were measured).
    pub fn utilisation(&self, s: &Sample) -> Option<f64> {
        Some(self.bits_per_s(s)? / self.capacity?.bits_per_s)
    }

    /// Total of counter `i` over the samples where it was measured, and
    /// the seconds those samples cover.
    fn total(&self, i: usize) -> (u64, f64) {
        self.samples
            .iter()
            .filter_map(|s| Some((s.deltas[i]?, s.interval_s)))
            .fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}

/// Mean (weighted by interval), median, p90, p99 and max of a series'
/// utilisation, and the share of samples in each tenth of the capacity
/// (the last tenth holding everything from 90%, above 100% too).
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub samples: usize,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub histogram: [f64; 10],
}

/// The distribution of `(utilisation, interval_s)` samples; `None` without any.
pub fn distribution(samples: &[(f64, f64)]) -> Option<Distribution> {
    if samples.is_empty() {
        return None;
    }
    let time: f64 = samples.iter().map(|s| s.1).sum();
    let mean = samples.iter().map(|s| s.0 * s.1).sum::<f64>() / time;
    let mut sorted: Vec<f64> = samples.iter().map(|s| s.0).collect();
    sorted.sort_by(f64::total_cmp);
    let mut counts = [0usize; 10];
    for &u in &sorted {
        counts[((u * 10.0).floor().max(0.0) as usize).min(9)] += 1;
    }
    let histogram = counts.map(|c| c as f64 / sorted.len() as f64);
    Some(Distribution {
        samples: sorted.len(),
        mean,
        median: percentile(&sorted, 50.0),
        p90: percentile(&sorted, 90.0),
        p99: percentile(&sorted, 99.0),
        max: sorted[sorted.len() - 1],
        histogram,
    })
}

/// The `p`-th percentile of sorted values, by nearest rank.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One reading of everything watched.
struct Reading {
    at: Instant,
    /// Per watched interface; `None` where its counters could not be read.
    counters: Vec<Option<Counters>>,
    /// Per watched interface, each qdisc and class with when tc read it.
    tc: Vec<Vec<(Instant, TcStats)>>,
}

/// The sampler: the interfaces watched, the last reading and the series so far.
pub struct Monitor {
    kernel: Kernel,
    ifaces: Vec<String>,
    capacities: Vec<Option<Capacity>>,
    start: Instant,
    last: Reading,
    series: Vec<Series>,
    index: HashMap<String, usize>,
    /// Warnings given, so that each is given once.
    warned: HashSet<String>,
    /// Warnings not yet taken by [`Monitor::take_warnings`].
    fresh: Vec<String>,
    notes: Vec<String>,
    interval: Duration,
}

impl Monitor {
    /// Checks the interfaces and capacities asked for and takes the first
    /// reading, at `now`. An unknown interface or an unreadable counter is an
    /// error here; later, an interface that cannot be read is left out
    /// with a warning until it can be again.
    pub fn new(args: &Args, kernel: Kernel, now: Instant) -> Result<Monitor, String> {
        let all = kernel.interfaces()?;
        let mut ifaces: Vec<String> = Vec::new();
        if args.ifaces.is_empty() {
            ifaces = all.iter().filter(|i| *i != "lo").cloned().collect();
            if ifaces.is_empty() {
                return Err("no network interface but lo; name lo to watch it".into());
            }
        }
        for iface in &args.ifaces {
            if !all.contains(iface) {
                return Err(format!("no network interface {iface:?} (there are: {})", all.join(", ")));
            }
            if !ifaces.contains(iface) {
                ifaces.push(iface.clone());
            }
        }
        for (iface, _) in &args.speed {
            if !ifaces.contains(iface) {
                return Err(format!(
                    "--speed {iface}=…: {iface:?} is not among the interfaces watched ({})",
                    ifaces.join(", ")
                ));
            }
        }
        let mut notes = Vec::new();
        let capacities: Vec<Option<Capacity>> = ifaces
            .iter()
            .map(|iface| {
                let given = args.speed.iter().rev().find(|(i, _)| i == iface);
                let capacity = match (given, args.capacity, kernel.speed(iface)) {
                    (Some(&(_, bits_per_s)), _, _) => Some(Capacity { bits_per_s, from: "--speed" }),
                    (None, Some(bits_per_s), _) => Some(Capacity { bits_per_s, from: "--capacity" }),
                    (None, None, Some(bits_per_s)) => Some(Capacity { bits_per_s, from: "kernel" }),
                    (None, None, None) => None,
                };
                if capacity.is_none() {
                    notes.push(format!(
                        "{iface}: no utilisation, the kernel gives no speed for it (--speed {iface}=RATE or --capacity RATE gives one)"
                    ));
                }
                capacity
            })
            .collect();
        let mut counters = Vec::new();
        for iface in &ifaces {
            counters.push(Some(kernel.counters(iface)?));
        }
        // The files asked for, before a long run rather than after it.
        if let Some(path) = &args.csv {
            std::fs::File::create(path).map_err(|e| format!("--csv {}: {e}", path.display()))?;
        }
        if let Some(dir) = &args.plot {
            std::fs::create_dir_all(dir).map_err(|e| format!("--plot {}: {e}", dir.display()))?;
        }
        let mut m = Monitor {
            kernel,
            ifaces,
            capacities,
            start: now,
            last: Reading { at: now, counters, tc: Vec::new() },
            series: Vec::new(),
            index: HashMap::new(),
            warned: HashSet::new(),
            fresh: Vec::new(),
            notes,
            interval: args.interval,
        };
        m.last.tc = m.read_tc(now, Instant::now());
        for (i, iface) in m.ifaces.clone().iter().enumerate() {
            m.series_index(iface.clone(), Kind::Interface, "interface".into(), m.capacities[i]);
        }
        Ok(m)
    }

    /// The interfaces watched.
    pub fn interfaces(&self) -> &[String] {
        &self.ifaces
    }

    /// The series so far, interfaces first, then qdiscs and classes as they
    /// were first seen.
    pub fn series(&self) -> &[Series] {
        &self.series
    }

    /// When the last reading was taken.
    pub fn last_reading(&self) -> Instant {
        self.last.at
    }

    /// Warnings since the last call, each given once in the run.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.fresh)
    }

    fn warn(&mut self, key: String, text: String) {
        if self.warned.insert(key) {
            self.notes.push(text.clone());
            self.fresh.push(text);
        }
    }

    /// The qdiscs and classes of every interface, their times on the clock
    /// of `now`, which the clock reads as `real`.
    fn read_tc(&mut self, now: Instant, real: Instant) -> Vec<Vec<(Instant, TcStats)>> {
        let mut all = Vec::new();
        for iface in self.ifaces.clone() {
            if self.warned.contains("tc absent") {
                all.push(Vec::new());
                continue;
            }
            match self.kernel.tc(&iface) {
                Ok(stats) => all.push(stats.into_iter().map(|(at, s)| (now + (at - real), s)).collect()),
                Err(TcError::Absent) => {
                    self.warn("tc absent".into(), "tc not found: qdiscs and classes are not sampled".into());
                    all.push(Vec::new());
                }
                Err(TcError::Failed(e)) => {
                    self.warn(format!("tc {iface}"), format!("{e}; the qdiscs and classes of {iface} are left out"));
                    all.push(Vec::new());
                }
            }
        }
        all
    }

    fn series_index(&mut self, what: String, kind: Kind, label: String, capacity: Option<Capacity>) -> usize {
        if let Some(&i) = self.index.get(&what) {
            return i;
        }
        self.index.insert(what.clone(), self.series.len());
        self.series.push(Series { what, kind, label, capacity, samples: Vec::new() });
        self.series.len() - 1
    }

    /// Reads every counter now and adds a sample to each series that was
    /// read both now and last time.
    pub fn sample(&mut self) {
        self.sample_at(Instant::now());
    }

    /// As [`Monitor::sample`], with the reading taken as of `now`.
    pub fn sample_at(&mut self, now: Instant) {
        let real = Instant::now();
        let mut counters = Vec::new();
        for iface in self.ifaces.clone() {
            match self.kernel.counters(&iface) {
                Ok(c) => {
                    self.warned.remove(&format!("counters {iface}"));
                    counters.push(Some(c));
                }
                Err(e) => {
                    self.warn(format!("counters {iface}"), format!("{e}; left out while it cannot be read"));
                    counters.push(None);
                }
            }
        }
        let tc = self.read_tc(now, real);
        let reading = Reading { at: now, counters, tc };
        let interval_s = now.saturating_duration_since(self.last.at).as_secs_f64();
        if interval_s <= 0.0 {
            return;
        }
        let time_s = now.saturating_duration_since(self.start).as_secs_f64();
        for (i, iface) in self.ifaces.clone().iter().enumerate() {
            if let (Some(before), Some(after)) = (self.last.counters[i], reading.counters[i]) {
                let deltas = before.iter().zip(&after).map(|(b, a)| a.checked_sub(*b)).collect();
                let s = self.index[iface];
                self.series[s].samples.push(Sample { time_s, interval_s, deltas, backlog: None });
            }
            let previous = self.last.tc.get(i).cloned().unwrap_or_default();
            let current: Vec<TcStats> = reading.tc[i].iter().map(|(_, s)| s.clone()).collect();
            for (at, now_stats) in &reading.tc[i] {
                let same = |o: &&(Instant, TcStats)| {
                    o.1.class == now_stats.class && o.1.handle == now_stats.handle && o.1.parent == now_stats.parent
                };
                let Some((then, before)) = previous.iter().find(same) else { continue };
                let interval_s = at.saturating_duration_since(*then).as_secs_f64();
                if interval_s <= 0.0 {
                    continue;
                }
                let what = tc_name(iface, now_stats, &current);
                let (kind, label) = match now_stats.class {
                    true => (Kind::Class, format!("{} class", now_stats.kind)),
                    false => (Kind::Qdisc, format!("{} qdisc", now_stats.kind)),
                };
                let capacity = match (kind, now_stats.ceil_bits_per_s, self.capacities[i]) {
                    (Kind::Class, Some(bits_per_s), _) => Some(Capacity { bits_per_s, from: "ceil" }),
                    (Kind::Class, None, Some(c)) => Some(Capacity { bits_per_s: c.bits_per_s, from: "interface" }),
                    _ => None,
                };
                let s = self.series_index(what, kind, label, capacity);
                let deltas =
                    before.counters().iter().zip(now_stats.counters()).map(|(b, a)| a.checked_sub(*b)).collect();
                let backlog = Some((now_stats.backlog_bytes, now_stats.backlog_packets));
                self.series[s].samples.push(Sample { time_s, interval_s, deltas, backlog });
            }
        }
        self.last = reading;
    }

    /// The last interval in one line: each interface's rates and
    /// utilisation, and each class's and qdisc's that carried traffic or
    /// dropped.
    pub fn live_line(&self) -> String {
        let Some(time) = self.series.iter().filter_map(|s| s.samples.last()).map(|s| s.time_s).reduce(f64::max) else {
            return String::new();
        };
        let mut line = format!("{time:7.1} s");
        for series in &self.series {
            let Some(s) = series.samples.last().filter(|s| s.time_s == time) else { continue };
            let util = series.utilisation(s).map(|u| format!(" {:.0}%", u * 100.0)).unwrap_or_default();
            match series.kind {
                Kind::Interface => {
                    let rate = |i| s.rate(i).map_or("?".into(), |r| human_rate(r * 8.0));
                    let _ = write!(line, " | {} rx {} tx {}{util}", series.what, rate(0), rate(1));
                    let drops = s.deltas[4].unwrap_or(0) + s.deltas[5].unwrap_or(0);
                    if drops > 0 {
                        let _ = write!(line, " drops {drops}");
                    }
                }
                Kind::Qdisc | Kind::Class => {
                    let drops = s.deltas[2].unwrap_or(0);
                    let backlog = s.backlog.map_or(0, |b| b.0);
                    if s.deltas[0].unwrap_or(0) == 0 && drops == 0 && backlog == 0 {
                        continue;
                    }
                    let rate = s.rate(0).map_or("?".into(), |r| human_rate(r * 8.0));
                    let _ = write!(line, " | {} {rate}{util}", series.what);
                    if drops > 0 {
                        let _ = write!(line, " drops {drops}");
                    }
                    if backlog > 0 {
                        let _ = write!(line, " backlog {backlog} B");
                    }
                }
            }
        }
        line
    }

    /// The summary: a row of table `monitor` per series.
    pub fn report(&self) -> Report {
        let interval_s = self.interval.as_secs_f64();
        let mut rows = Vec::new();
        for series in &self.series {
            let time_s: f64 = series.samples.iter().map(|s| s.interval_s).sum();
            let mut row = Row::new("monitor", "kernel", series.what.as_str(), 0)
                .with("kind", series.label.as_str())
                .with("samples_count", series.samples.len())
                .with("interval_s", interval_s)
                .with("time_s", time_s);
            let per_s = |i: usize| {
                let (count, seconds) = series.total(i);
                (seconds > 0.0).then(|| count as f64 / seconds)
            };
            match series.kind {
                Kind::Interface => {
                    row = row
                        .with_opt("rx_bits_per_s", per_s(0).map(|r| r * 8.0))
                        .with_opt("tx_bits_per_s", per_s(1).map(|r| r * 8.0))
                        .with_opt("rx_packets_per_s", per_s(2))
                        .with_opt("tx_packets_per_s", per_s(3))
                        .with("rx_bytes", series.total(0).0)
                        .with("tx_bytes", series.total(1).0)
                        .with("rx_drops_packets", series.total(4).0)
                        .with("tx_drops_packets", series.total(5).0)
                        .with("drops_packets", series.total(4).0 + series.total(5).0)
                        .with("rx_errors_packets", series.total(6).0)
                        .with("tx_errors_packets", series.total(7).0);
                }
                Kind::Qdisc | Kind::Class => {
                    let backlogs: Vec<(u64, u64)> = series.samples.iter().filter_map(|s| s.backlog).collect();
                    let mean_backlog = (!backlogs.is_empty())
                        .then(|| backlogs.iter().map(|b| b.0 as f64).sum::<f64>() / backlogs.len() as f64);
                    row = row
                        .with_opt("bits_per_s", per_s(0).map(|r| r * 8.0))
                        .with_opt("packets_per_s", per_s(1))
                        .with("sent_bytes", series.total(0).0)
                        .with("drops_packets", series.total(2).0)
                        .with("overlimits_count", series.total(3).0)
                        .with_opt("backlog_mean_bytes", mean_backlog)
                        .with("backlog_max_bytes", backlogs.iter().map(|b| b.0).max().unwrap_or(0))
                        .with("backlog_max_packets", backlogs.iter().map(|b| b.1).max().unwrap_or(0));
                }
            }
            if let Some(c) = series.capacity {
                row = row.with("capacity_bits_per_s", c.bits_per_s).with("capacity_from", c.from);
                let utilisation: Vec<(f64, f64)> =
                    series.samples.iter().filter_map(|s| Some((series.utilisation(s)?, s.interval_s))).collect();
                if let Some(d) = distribution(&utilisation) {
                    row = row
                        .with("utilisation_mean_share", d.mean)
                        .with("utilisation_median_share", d.median)
                        .with("utilisation_p90_share", d.p90)
                        .with("utilisation_p99_share", d.p99)
                        .with("utilisation_max_share", d.max);
                    for (k, share) in d.histogram.iter().enumerate() {
                        row = row.with(&format!("utilisation_{}_{}_share", k * 10, k * 10 + 10), *share);
                    }
                }
            }
            rows.push(row);
        }
        Report { rows, notes: self.notes.clone() }
    }

    /// The time series: a row of table `monitor-trace` per series and sample.
    pub fn trace(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for series in &self.series {
            for s in &series.samples {
                let mut row = Row::new("monitor-trace", "kernel", series.what.as_str(), 0)
                    .with("kind", series.label.as_str())
                    .with("time_s", s.time_s)
                    .with("interval_s", s.interval_s);
                match series.kind {
                    Kind::Interface => {
                        for (i, name) in COUNTERS.iter().enumerate() {
                            let (what, scale) = match name.strip_suffix("_bytes") {
                                Some(dir) => (format!("{dir}_bits_per_s"), 8.0),
                                None => (format!("{}_per_s", name.replace("dropped", "drops")), 1.0),
                            };
                            row = row.with_opt(&what, s.rate(i).map(|r| r * scale));
                        }
                    }
                    Kind::Qdisc | Kind::Class => {
                        row = row
                            .with_opt("bits_per_s", s.rate(0).map(|r| r * 8.0))
                            .with_opt("packets_per_s", s.rate(1))
                            .with_opt("drops_per_s", s.rate(2))
                            .with_opt("overlimits_per_s", s.rate(3))
                            .with_opt("backlog_bytes", s.backlog.map(|b| b.0))
                            .with_opt("backlog_packets", s.backlog.map(|b| b.1));
                    }
                }
                if let Some(c) = series.capacity {
                    row = row
                        .with("capacity_bits_per_s", c.bits_per_s)
                        .with_opt("utilisation_share", series.utilisation(s));
                }
                rows.push(row);
            }
        }
        rows
    }

    /// Draws into `dir`: monitor-rate.png (each interface's busier
    /// direction and each class's rate against time), and where a capacity
    /// is known monitor-utilisation.png (utilisation against time) and
    /// monitor-histogram.png (the share of samples in each tenth of the
    /// capacity, as seed 001's Figure 3).
    pub fn plot(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let shown: Vec<&Series> =
            self.series.iter().filter(|s| s.kind != Kind::Qdisc && !s.samples.is_empty()).collect();
        let end = shown.iter().filter_map(|s| s.samples.last()).map(|s| s.time_s).fold(0.0, f64::max).max(1e-3);
        let colour = |i: usize| PALETTE[i % PALETTE.len()];
        let mut files = Vec::new();

        let lines: Vec<Line> = shown
            .iter()
            .enumerate()
            .map(|(i, s)| Line {
                label: s.what.clone(),
                points: s.samples.iter().filter_map(|x| Some((x.time_s, s.bits_per_s(x)? / 1e6))).collect(),
                colour: colour(i),
                reference: false,
            })
            .collect();
        let top = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max);
        let panel = Panel {
            title: "rate (an interface's busier direction)".into(),
            x_label: "time (s)".into(),
            y_label: "Mbit/s".into(),
            x: 0.0..end,
            y: 0.0..(top * 1.1).max(1e-3),
            lines,
        };
        files.push(dir.join("monitor-rate.png"));
        write_png(files.last().expect("pushed"), &[panel], 900, 480)?;

        let with_capacity: Vec<(usize, &Series)> =
            shown.iter().enumerate().filter(|(_, s)| s.capacity.is_some()).map(|(i, s)| (i, *s)).collect();
        if with_capacity.is_empty() {
            return Ok(files);
        }
        let lines: Vec<Line> = with_capacity
            .iter()
            .map(|(i, s)| Line {
                label: s.what.clone(),
                points: s.samples.iter().filter_map(|x| Some((x.time_s, 100.0 * s.utilisation(x)?))).collect(),
                colour: colour(*i),
                reference: false,
            })
            .collect();
        let top = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(100.0, f64::max);
        let panel = Panel {
            title: "utilisation".into(),
            x_label: "time (s)".into(),
            y_label: "% of capacity".into(),
            x: 0.0..end,
            y: 0.0..top * 1.05,
            lines,
        };
        files.push(dir.join("monitor-utilisation.png"));
        write_png(files.last().expect("pushed"), &[panel], 900, 480)?;

        // Each histogram as the outline of its bars.
        let mut lines = Vec::new();
        for (i, s) in &with_capacity {
            let samples: Vec<(f64, f64)> =
                s.samples.iter().filter_map(|x| Some((s.utilisation(x)?, x.interval_s))).collect();
            let Some(d) = distribution(&samples) else { continue };
            let mut points = vec![(0.0, 0.0)];
            for (k, share) in d.histogram.iter().enumerate() {
                points.push((k as f64 * 10.0, share * 100.0));
                points.push((k as f64 * 10.0 + 10.0, share * 100.0));
            }
            points.push((100.0, 0.0));
            lines.push(Line { label: s.what.clone(), points, colour: colour(*i), reference: false });
        }
        let top = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max);
        let top = (top * 1.15).clamp(10.0, 105.0);
        let panel = Panel {
            title: "histogram of utilisation".into(),
            x_label: "% of capacity (the last tenth: 90% and above)".into(),
            y_label: "% of samples".into(),
            x: 0.0..100.0,
            y: 0.0..top,
            lines,
        };
        files.push(dir.join("monitor-histogram.png"));
        write_png(files.last().expect("pushed"), &[panel], 900, 480)?;
        Ok(files)
    }
}

/// The name of a qdisc or class of `iface` among `all` of its own: a
/// class `IFACE:ID` (`eth0:1:10`), a qdisc `IFACE:HANDLE` (`eth0:10:`), and
/// `IFACE:HANDLE@PARENT` where several qdiscs have that handle (the
/// children of mq all print `0:`).
pub fn tc_name(iface: &str, stats: &TcStats, all: &[TcStats]) -> String {
    let shared = !stats.class && all.iter().filter(|o| !o.class && o.handle == stats.handle).count() > 1;
    match shared {
        false => format!("{iface}:{}", stats.handle),
        true => format!("{iface}:{}@{}", stats.handle, stats.parent.as_deref().unwrap_or("root")),
    }
}

/// What the monitor tells while it runs.
pub enum Progress<'a> {
    /// The line of an interval that ended.
    Sample(&'a str),
    /// Something that could not be read.
    Warning(&'a str),
}

/// What a run gives: the summary, the files written, and why others could
/// not be.
pub struct Outcome {
    pub report: Report,
    pub files: Vec<PathBuf>,
    pub errors: Vec<String>,
}

/// Samples every interval from the monitor's first reading until
/// `--for` has passed or `stop` says so (the command of `--during` exited,
/// or Ctrl-C), then writes the CSV file and plots asked for. An interval
/// cut short by `stop` is kept when it lasted at least half an interval.
pub fn run(
    mut monitor: Monitor,
    args: &Args,
    stop: &mut dyn FnMut() -> bool,
    tell: &mut dyn FnMut(Progress<'_>),
) -> Outcome {
    let start = monitor.last_reading();
    let end = args.duration.map(|d| start + d);
    let mut tick = 1u32;
    loop {
        let due = start + args.interval * tick;
        let due = end.map_or(due, |end| due.min(end));
        let stopped = wait_until(due, stop);
        let now = Instant::now();
        if stopped && now.saturating_duration_since(monitor.last_reading()) < args.interval / 2 {
            break;
        }
        monitor.sample_at(now);
        for w in monitor.take_warnings() {
            tell(Progress::Warning(&w));
        }
        tell(Progress::Sample(&monitor.live_line()));
        if stopped || end.is_some_and(|end| now >= end) {
            break;
        }
        // After a stall (the machine suspended, say), the next tick to come.
        while start + args.interval * tick <= now {
            tick += 1;
        }
    }
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    if let Some(path) = &args.csv {
        match crate::write(path, &rows::csv(&monitor.trace())) {
            Ok(()) => files.push(path.clone()),
            Err(e) => errors.push(e),
        }
    }
    if let Some(dir) = &args.plot {
        match monitor.plot(dir) {
            Ok(written) => files.extend(written),
            Err(e) => errors.push(e),
        }
    }
    Outcome { report: monitor.report(), files, errors }
}

/// Waits until `due`, asking `stop` every 20 ms; whether it said stop.
fn wait_until(due: Instant, stop: &mut dyn FnMut() -> bool) -> bool {
    loop {
        if stop() {
            return true;
        }
        let now = Instant::now();
        if now >= due {
            return false;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(20)));
    }
}

/// A rate in bits per second, in kbit/s, Mbit/s or Gbit/s.
fn human_rate(bits_per_s: f64) -> String {
    match bits_per_s {
        r if r >= 1e9 => format!("{:.2} Gbit/s", r / 1e9),
        r if r >= 1e6 => format!("{:.1} Mbit/s", r / 1e6),
        r => format!("{:.0} kbit/s", r / 1e3),
    }
}

/// The summary as text: rates, drops and utilisation per series, then the
/// histograms of utilisation.
pub fn table(report: &Report) -> String {
    let rows: Vec<&Row> = report.table("monitor").collect();
    let num = |r: &Row, name: &str| r.num(name);
    let mut o = String::new();
    let (samples, interval, time) = rows
        .first()
        .map(|r| {
            (
                num(r, "samples_count").unwrap_or(0.0),
                num(r, "interval_s").unwrap_or(0.0),
                num(r, "time_s").unwrap_or(0.0),
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "# monitor: {samples:.0} samples of {} over {time:.1} s; rates are means, utilisation a share of the capacity",
        humantime::format_duration(Duration::from_secs_f64(interval))
    );
    let width = rows.iter().map(|r| r.what.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        o,
        "{:<width$}  {:<13} {:>11} {:>10} {:>10} {:>8}  {:>5} {:>6} {:>5} {:>5} {:>5}",
        "what", "kind", "capacity", "rx Mbit/s", "tx Mbit/s", "drops", "mean", "median", "p90", "p99", "max"
    );
    let pct = |r: &Row, name: &str| num(r, name).map_or("-".to_string(), |u| format!("{:.1}", u * 100.0));
    let mbit = |x: Option<f64>| x.map_or("-".to_string(), |b| format!("{:.2}", b / 1e6));
    for r in &rows {
        let (rx, tx) = match r.text("kind") {
            Some("interface") => (num(r, "rx_bits_per_s"), num(r, "tx_bits_per_s")),
            _ => (None, num(r, "bits_per_s")),
        };
        let capacity = num(r, "capacity_bits_per_s").map_or("-".to_string(), |c| human_rate(c).replace(".0 ", " "));
        let _ = writeln!(
            o,
            "{:<width$}  {:<13} {:>11} {:>10} {:>10} {:>8}  {:>5} {:>6} {:>5} {:>5} {:>5}",
            r.what,
            r.text("kind").unwrap_or(""),
            capacity,
            mbit(rx),
            mbit(tx),
            num(r, "drops_packets").map_or("-".to_string(), |d| format!("{d:.0}")),
            pct(r, "utilisation_mean_share"),
            pct(r, "utilisation_median_share"),
            pct(r, "utilisation_p90_share"),
            pct(r, "utilisation_p99_share"),
            pct(r, "utilisation_max_share"),
        );
    }
    let with_histogram: Vec<&&Row> = rows.iter().filter(|r| r.num("utilisation_0_10_share").is_some()).collect();
    if !with_histogram.is_empty() {
        let _ = writeln!(
            o,
            "\n# utilisation histogram: % of samples in each tenth of the capacity (90-100: 90% and above)"
        );
        let _ = write!(o, "{:<width$} ", "what");
        for k in 0..10 {
            let _ = write!(o, " {:>6}", format!("{}-{}", k * 10, k * 10 + 10));
        }
        o.push('\n');
        for r in with_histogram {
            let _ = write!(o, "{:<width$} ", r.what);
            for k in 0..10 {
                let share = r.num(&format!("utilisation_{}_{}_share", k * 10, k * 10 + 10)).unwrap_or(0.0);
                let _ = write!(o, " {:>6.1}", share * 100.0);
            }
            o.push('\n');
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASS_JSON_6_15: &str = include_str!("../testdata/monitor/tc-6.15-class-htb.json");
    const QDISC_JSON_6_15: &str = include_str!("../testdata/monitor/tc-6.15-qdisc-htb.json");
    const CLASS_TEXT_6_1: &str = include_str!("../testdata/monitor/tc-6.1-class-htb.txt");
    const QDISC_JSON_6_1: &str = include_str!("../testdata/monitor/tc-6.1-qdisc-htb.json");
    const QDISC_TEXT_6_1: &str = include_str!("../testdata/monitor/tc-6.1-qdisc-htb.txt");
    const QDISC_PFIFO_FAST_TEXT_6_1: &str = include_str!("../testdata/monitor/tc-6.1-qdisc-pfifo_fast.txt");
    const QDISC_LO_JSON_6_1: &str = include_str!("../testdata/monitor/tc-6.1-qdisc-lo.json");

    /// Whether `x` is `want`, but for rounding.
    fn near(x: Option<f64>, want: f64) -> bool {
        x.is_some_and(|x| (x - want).abs() <= 1e-9 * want.abs().max(1.0))
    }

    fn find<'a>(all: &'a [TcStats], handle: &str) -> &'a TcStats {
        all.iter().find(|s| s.handle == handle).unwrap_or_else(|| panic!("no {handle} in {all:?}"))
    }

    #[test]
    fn counters_and_speeds_parse_or_say_why_not() {
        assert_eq!(parse_counter("123456789012\n"), Ok(123_456_789_012));
        assert!(parse_counter("").unwrap_err().contains("not a counter"));
        assert!(parse_counter("-5").is_err());
        assert!(parse_counter("12 34").is_err());
        assert_eq!(parse_speed("10000\n"), Some(10e9));
        assert_eq!(parse_speed("100"), Some(100e6));
        assert_eq!(parse_speed("-1\n"), None);
        assert_eq!(parse_speed("0"), None);
        assert_eq!(parse_speed(""), None);
        assert_eq!(parse_speed("unknown"), None);
    }

    #[test]
    fn durations_and_speeds_of_the_command_line() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert!(parse_duration("0s").unwrap_err().contains("longer than zero"));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("fast").unwrap_err().contains("\"fast\" is not a duration"));
        assert!(parse_duration("10").is_err(), "a number without a unit is refused");
        assert_eq!(parse_speed_arg("eth0=100mbit"), Ok(("eth0".to_string(), 100e6)));
        assert!(parse_speed_arg("eth0").unwrap_err().contains("IFACE=RATE"));
        assert!(parse_speed_arg("=1gbit").unwrap_err().contains("no interface"));
        assert!(parse_speed_arg("eth0=fast").is_err());
    }

    /// Captured from iproute2 6.15 during a flood through an htb port with
    /// two classes (1:10 premium, 1:20 best effort with a full queue).
    #[test]
    fn classes_from_json() {
        let all = parse_tc(CLASS_JSON_6_15).unwrap();
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|s| s.class && s.kind == "htb"));
        let best = find(&all, "1:20");
        assert_eq!(best.parent.as_deref(), Some("1:1"));
        assert_eq!((best.bytes, best.packets, best.drops, best.overlimits), (15_518_102, 10_771, 7_195, 3_477));
        assert_eq!((best.backlog_bytes, best.backlog_packets), (90_846, 63));
        assert_eq!(best.ceil_bits_per_s, Some(100e6));
        let root = find(&all, "1:1");
        assert_eq!(root.parent, None);
        assert_eq!(root.ceil_bits_per_s, Some(100e6));
        assert_eq!(find(&all, "1:10").drops, 0);
    }

    /// iproute2 6.1 prints classes as text even with -j.
    #[test]
    fn classes_from_text() {
        let all = parse_tc(CLASS_TEXT_6_1).unwrap();
        assert_eq!(all.len(), 3);
        let best = find(&all, "1:20");
        assert!(best.class && best.kind == "htb");
        assert_eq!(best.parent.as_deref(), Some("1:1"));
        assert_eq!((best.bytes, best.packets, best.drops, best.overlimits), (15_633_462, 10_851, 7_251, 3_500));
        assert_eq!((best.backlog_bytes, best.backlog_packets), (92_288, 64));
        assert_eq!(best.ceil_bits_per_s, Some(100e6));
        let premium = find(&all, "1:10");
        assert_eq!((premium.bytes, premium.packets, premium.drops), (1_773_660, 1_230, 0));
        assert_eq!(find(&all, "1:1").parent, None);
    }

    #[test]
    fn qdiscs_from_json_and_text() {
        for text in [QDISC_JSON_6_1, QDISC_JSON_6_15] {
            let all = parse_tc(text).unwrap();
            assert_eq!(all.iter().map(|s| s.handle.as_str()).collect::<Vec<_>>(), ["1:", "10:", "20:"]);
            assert!(all.iter().all(|s| !s.class && s.ceil_bits_per_s.is_none()));
            assert_eq!(find(&all, "1:").parent, None);
            let fifo = find(&all, "20:");
            assert_eq!((fifo.kind.as_str(), fifo.parent.as_deref()), ("pfifo", Some("1:20")));
            assert!(fifo.drops > 1000 && fifo.backlog_bytes > 90_000 && fifo.backlog_packets >= 63, "{fifo:?}");
        }
        let all = parse_tc(QDISC_TEXT_6_1).unwrap();
        assert_eq!(all.len(), 3);
        let fifo = find(&all, "20:");
        assert_eq!((fifo.bytes, fifo.packets, fifo.drops, fifo.backlog_bytes), (22_677_842, 15_739, 10_535, 0));
        assert_eq!(find(&all, "1:").overlimits, 6_954);
        let all = parse_tc(QDISC_PFIFO_FAST_TEXT_6_1).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].kind.as_str(), all[0].parent.as_deref(), all[0].packets), ("pfifo_fast", None, 3107));
        // Loopback's noqueue holds and counts nothing.
        assert_eq!(parse_tc(QDISC_LO_JSON_6_1).unwrap(), []);
    }

    #[test]
    fn tc_output_that_says_nothing_or_does_not_parse() {
        assert_eq!(parse_tc(""), Ok(vec![]));
        assert_eq!(parse_tc("[]\n"), Ok(vec![]));
        assert!(parse_tc("[{\"kind\":").unwrap_err().contains("does not parse"));
        assert!(parse_tc("[{\"bytes\":1}]").unwrap_err().contains("neither class nor kind"));
        // Without -s there are no counters: nothing to sample.
        assert_eq!(parse_tc(r#"[{"class":"htb","handle":"1:1","root":true,"rate":12500000}]"#), Ok(vec![]));
        assert_eq!(parse_tc("class htb 1:1 root rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b\n"), Ok(vec![]));
        assert_eq!(parse_tc("something else entirely\n"), Ok(vec![]));
    }

    #[test]
    fn sizes_as_tc_prints_them() {
        assert_eq!(parse_tc_size("92288b"), Some(92_288));
        assert_eq!(parse_tc_size("88Kb"), Some(88 * 1024));
        assert_eq!(parse_tc_size("2Mb"), Some(2 * 1024 * 1024));
        assert_eq!(parse_tc_size("0b"), Some(0));
        assert_eq!(parse_tc_size("64p"), None);
    }

    #[test]
    fn the_distribution_of_utilisation() {
        // 0.05 ten times, 0.35 five times, 0.95 four times, 1.2 once (a
        // capacity set too low): 20 samples of 1 s.
        let mut samples = vec![(0.05, 1.0); 10];
        samples.extend([(0.35, 1.0); 5]);
        samples.extend([(0.95, 1.0); 4]);
        samples.push((1.2, 1.0));
        let d = distribution(&samples).unwrap();
        assert_eq!(d.samples, 20);
        assert!((d.mean - (0.5 + 1.75 + 3.8 + 1.2) / 20.0).abs() < 1e-12);
        assert_eq!((d.median, d.p90, d.p99, d.max), (0.05, 0.95, 1.2, 1.2));
        let mut expect = [0.0; 10];
        (expect[0], expect[3], expect[9]) = (0.5, 0.25, 0.25);
        for (got, want) in d.histogram.iter().zip(expect) {
            assert!((got - want).abs() < 1e-12, "{:?}", d.histogram);
        }
        // The mean weighs each sample by its interval.
        let d = distribution(&[(0.2, 1.0), (0.8, 0.5)]).unwrap();
        assert!((d.mean - 0.4).abs() < 1e-12);
        assert_eq!(distribution(&[]), None);
    }

    /// A directory laid out as /sys/class/net, for the tests.
    struct FakeNet(PathBuf);

    impl FakeNet {
        fn new(name: &str) -> FakeNet {
            let dir = std::env::temp_dir().join(format!("bulkwire-monitor-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            FakeNet(dir)
        }

        fn set(&self, iface: &str, counters: Counters, speed: &str) {
            let dir = self.0.join(iface).join("statistics");
            std::fs::create_dir_all(&dir).unwrap();
            for (name, value) in COUNTERS.iter().zip(counters) {
                std::fs::write(dir.join(name), format!("{value}\n")).unwrap();
            }
            std::fs::write(self.0.join(iface).join("speed"), speed).unwrap();
        }

        fn kernel(&self) -> Kernel {
            Kernel { net: self.0.clone(), tc: None }
        }
    }

    impl Drop for FakeNet {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn args(ifaces: &[&str]) -> Args {
        Args {
            ifaces: ifaces.iter().map(|s| s.to_string()).collect(),
            interval: Duration::from_secs(1),
            duration: None,
            speed: Vec::new(),
            capacity: None,
            csv: None,
            plot: None,
        }
    }

    #[test]
    fn rates_utilisation_and_a_reset_from_the_counters() {
        let net = FakeNet::new("rates");
        net.set("eth9", [0; 8], "100\n");
        net.set("lo", [0; 8], "");
        std::fs::write(net.0.join("bonding_masters"), "\n").unwrap();
        let t0 = Instant::now();
        let mut m = Monitor::new(&args(&[]), net.kernel(), t0).unwrap();
        assert_eq!(m.interfaces(), ["eth9"], "every interface but lo");
        // 1 s: 5 MB in (40 Mbit/s of 100), 1 MB out, 2 drops in.
        net.set("eth9", [5_000_000, 1_000_000, 4000, 1000, 2, 0, 0, 0], "100\n");
        m.sample_at(t0 + Duration::from_secs(1));
        // 2 s: the interface was made anew, its counters from zero: no sample of it.
        net.set("eth9", [1000, 500, 2, 1, 0, 0, 0, 0], "100\n");
        m.sample_at(t0 + Duration::from_secs(2));
        // 2.5 s: 2.5 MB in, over half a second: 40 Mbit/s again.
        net.set("eth9", [2_501_000, 500, 2002, 1, 0, 0, 0, 0], "100\n");
        m.sample_at(t0 + Duration::from_millis(2500));
        let series = &m.series()[0];
        assert_eq!(series.samples.len(), 3);
        let reset = &series.samples[1];
        assert!(reset.deltas[..4].iter().all(Option::is_none), "{reset:?}");
        assert_eq!(series.utilisation(reset), None);
        assert!(near(series.utilisation(&series.samples[0]), 0.4));
        assert!(near(series.utilisation(&series.samples[2]), 0.4));
        let report = m.report();
        let row = report.find("monitor", "kernel", "eth9", None).unwrap();
        assert_eq!(row.text("kind"), Some("interface"));
        assert_eq!(row.num("samples_count"), Some(3.0));
        // 7.5 MB over the 1.5 s measured.
        assert!(near(row.num("rx_bits_per_s"), 40e6), "{row:?}");
        assert_eq!(row.num("rx_bytes"), Some(7.5e6));
        assert_eq!(row.num("drops_packets"), Some(2.0));
        assert_eq!(row.num("capacity_bits_per_s"), Some(100e6));
        assert_eq!(row.text("capacity_from"), Some("kernel"));
        assert!(near(row.num("utilisation_mean_share"), 0.4), "{row:?}");
        assert_eq!(row.num("utilisation_40_50_share"), Some(1.0));
        let trace = m.trace();
        assert_eq!(trace.len(), 3);
        assert!(near(trace[0].num("rx_bits_per_s"), 40e6));
        assert_eq!(trace[0].num("rx_drops_per_s"), Some(2.0));
        assert_eq!(trace[1].num("rx_bits_per_s"), None, "the reset is left out, not negative");
        assert_eq!(trace[1].num("utilisation_share"), None);
        assert!(m.live_line().contains("eth9 rx 40.0 Mbit/s tx 0 kbit/s 40%"), "{}", m.live_line());
        assert!(table(&report).contains("eth9"), "{}", table(&report));
    }

    #[test]
    fn capacities_come_from_speed_then_capacity_then_the_kernel() {
        let net = FakeNet::new("capacity");
        net.set("a0", [0; 8], "1000\n");
        net.set("b0", [0; 8], "-1\n");
        net.set("c0", [0; 8], "10000\n");
        let mut a = args(&["a0", "b0", "c0"]);
        a.speed = vec![("a0".into(), 100e6)];
        let m = Monitor::new(&a, net.kernel(), Instant::now()).unwrap();
        let capacities: Vec<_> = m.series().iter().map(|s| s.capacity).collect();
        assert_eq!(capacities[0], Some(Capacity { bits_per_s: 100e6, from: "--speed" }));
        assert_eq!(capacities[1], None);
        assert_eq!(capacities[2], Some(Capacity { bits_per_s: 10e9, from: "kernel" }));
        assert!(m.report().notes.iter().any(|n| n.starts_with("b0: no utilisation")), "{:?}", m.report().notes);
        a.capacity = Some(20e6);
        let m = Monitor::new(&a, net.kernel(), Instant::now()).unwrap();
        let from: Vec<_> = m.series().iter().map(|s| s.capacity.unwrap().from).collect();
        assert_eq!(from, ["--speed", "--capacity", "--capacity"]);
    }

    #[test]
    fn what_cannot_be_watched_is_named() {
        let net = FakeNet::new("errors");
        net.set("eth9", [0; 8], "100\n");
        let err = Monitor::new(&args(&["eth7"]), net.kernel(), Instant::now()).err().unwrap();
        assert!(err.contains("no network interface \"eth7\"") && err.contains("eth9"), "{err}");
        let mut a = args(&["eth9"]);
        a.speed = vec![("eth8".into(), 1e9)];
        let err = Monitor::new(&a, net.kernel(), Instant::now()).err().unwrap();
        assert!(err.contains("eth8") && err.contains("not among the interfaces watched"), "{err}");
        net.set("lo", [0; 8], "");
        std::fs::write(net.0.join("lo/statistics/tx_errors"), "garbage").unwrap();
        let err = Monitor::new(&args(&["lo"]), net.kernel(), Instant::now()).err().unwrap();
        assert!(err.contains("lo/statistics/tx_errors") && err.contains("not a counter"), "{err}");
        std::fs::remove_file(net.0.join("lo/statistics/tx_errors")).unwrap();
        let err = Monitor::new(&args(&["lo"]), net.kernel(), Instant::now()).err().unwrap();
        assert!(err.contains("cannot read the counter") && err.contains("tx_errors"), "{err}");
        std::fs::remove_dir_all(net.0.join("eth9")).unwrap();
        let err = Monitor::new(&args(&[]), net.kernel(), Instant::now()).err().unwrap();
        assert!(err.contains("no network interface but lo"), "{err}");
    }

    #[test]
    fn an_interface_that_goes_away_is_left_out_with_one_warning() {
        let net = FakeNet::new("gone");
        net.set("eth9", [0; 8], "100\n");
        let t0 = Instant::now();
        let mut m = Monitor::new(&args(&["eth9"]), net.kernel(), t0).unwrap();
        std::fs::remove_dir_all(net.0.join("eth9")).unwrap();
        m.sample_at(t0 + Duration::from_secs(1));
        m.sample_at(t0 + Duration::from_secs(2));
        let warnings = m.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("eth9") && warnings[0].contains("left out"), "{warnings:?}");
        net.set("eth9", [100; 8], "100\n");
        m.sample_at(t0 + Duration::from_secs(3));
        net.set("eth9", [1100; 8], "100\n");
        m.sample_at(t0 + Duration::from_secs(4));
        // Only the interval between the two readings after it came back.
        let samples = &m.series()[0].samples;
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].deltas, vec![Some(1000); 8]);
    }

    #[test]
    fn qdiscs_that_share_a_handle_are_told_apart_by_their_parent() {
        // As mq's children print (made up: no multiqueue device here).
        let text = r#"[{"kind":"mq","handle":"0:","root":true,"bytes":10,"packets":1},
            {"kind":"fq_codel","handle":"0:","parent":":1","bytes":6,"packets":1},
            {"kind":"fq_codel","handle":"0:","parent":":2","bytes":4,"packets":1}]"#;
        let all = parse_tc(text).unwrap();
        let names: Vec<String> = all.iter().map(|s| tc_name("eth0", s, &all)).collect();
        assert_eq!(names, ["eth0:0:@root", "eth0:0:@:1", "eth0:0:@:2"]);
        let all = parse_tc(QDISC_JSON_6_15).unwrap();
        let names: Vec<String> = all.iter().map(|s| tc_name("bwp2", s, &all)).collect();
        assert_eq!(names, ["bwp2:1:", "bwp2:10:", "bwp2:20:"]);
        let all = parse_tc(CLASS_TEXT_6_1).unwrap();
        assert_eq!(tc_name("bwp2", find(&all, "1:20"), &all), "bwp2:1:20");
    }

    /// A tc that prints `qdisc-IFACE` and `class-IFACE` from its directory.
    fn fake_tc(net: &FakeNet) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let tc = net.0.join("tc");
        std::fs::write(&tc, "#!/bin/sh\n# -s -j WHAT show dev IFACE\ncat \"$(dirname \"$0\")/$3-$6\"\n").unwrap();
        std::fs::set_permissions(&tc, std::fs::Permissions::from_mode(0o755)).unwrap();
        tc
    }

    #[test]
    fn classes_and_qdiscs_are_sampled_through_tc() {
        let net = FakeNet::new("tc");
        net.set("bwp2", [0; 8], "10000\n");
        let kernel = Kernel { tc: Some(fake_tc(&net)), ..net.kernel() };
        std::fs::write(net.0.join("qdisc-bwp2"), QDISC_TEXT_6_1).unwrap();
        std::fs::write(net.0.join("class-bwp2"), CLASS_TEXT_6_1).unwrap();
        let t0 = Instant::now();
        let mut m = Monitor::new(&args(&["bwp2"]), kernel, t0).unwrap();
        // One second later: 1:20 sent 10 MB more (80 Mbit/s of its ceil of
        // 100) and dropped 100 more; its queue holds 40 packets.
        let later = CLASS_TEXT_6_1
            .replace("Sent 15633462 bytes 10851 pkt (dropped 7251,", "Sent 25633462 bytes 17851 pkt (dropped 7351,")
            .replace("backlog 92288b 64p", "backlog 57680b 40p");
        std::fs::write(net.0.join("class-bwp2"), later).unwrap();
        m.sample_at(t0 + Duration::from_secs(1));
        let whats: Vec<&str> = m.series().iter().map(|s| s.what.as_str()).collect();
        assert_eq!(whats, ["bwp2", "bwp2:1:", "bwp2:10:", "bwp2:20:", "bwp2:1:10", "bwp2:1:1", "bwp2:1:20"]);
        let report = m.report();
        let best = report.find("monitor", "kernel", "bwp2:1:20", None).unwrap();
        assert_eq!(best.text("kind"), Some("htb class"));
        // tc's readings are timed as it runs, a few ms either way.
        let within = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 0.05 * want);
        assert!(within(best.num("bits_per_s"), 80e6), "{best:?}");
        assert!(within(best.num("utilisation_mean_share"), 0.8), "{best:?}");
        assert_eq!(best.text("capacity_from"), Some("ceil"));
        assert_eq!(best.num("drops_packets"), Some(100.0));
        assert_eq!(best.num("backlog_max_packets"), Some(40.0));
        let fifo = report.find("monitor", "kernel", "bwp2:20:", None).unwrap();
        assert_eq!(
            (fifo.text("kind"), fifo.num("bits_per_s"), fifo.num("utilisation_mean_share")),
            (Some("pfifo qdisc"), Some(0.0), None)
        );
        let line = m.live_line();
        let class = line.split(" | ").find(|part| part.starts_with("bwp2:1:20 ")).unwrap_or_else(|| panic!("{line}"));
        assert!(class.ends_with("% drops 100 backlog 57680 B"), "{line}");
        // tc failing for an interface: one warning, no classes.
        std::fs::remove_file(net.0.join("class-bwp2")).unwrap();
        m.sample_at(t0 + Duration::from_secs(2));
        m.sample_at(t0 + Duration::from_secs(3));
        let warnings = m.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("tc -s -j class show dev bwp2") && warnings[0].contains("left out"),
            "{warnings:?}"
        );
        // No tc at all: one warning, interfaces still sampled.
        let kernel = Kernel { tc: Some(net.0.join("no-such-tc")), ..net.kernel() };
        let mut m = Monitor::new(&args(&["bwp2"]), kernel, t0).unwrap();
        m.sample_at(t0 + Duration::from_secs(1));
        assert_eq!(m.take_warnings(), ["tc not found: qdiscs and classes are not sampled"]);
        assert_eq!(m.series().len(), 1);
        assert_eq!(m.series()[0].samples.len(), 1);
    }
}
