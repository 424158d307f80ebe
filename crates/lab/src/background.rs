//! `bulkwire lab background`: background traffic for the namespace test
//! bed, as seed 000 §4.1 loads its switch: exponential ON-OFF sources, each
//! sending full datagrams at its peak rate while ON, some of them in the
//! premium class (DSCP EF), together offering `load` times the bottleneck's
//! rate on average.
//!
//! The sources share one thread and one clock; each has its own socket, so
//! the premium ones can carry their own DSCP. Waits shorter than a
//! scheduler tick are spun, longer ones slept, so that a 100 Mbit/s port
//! sees its datagrams about 0.1 ms apart rather than in bursts per tick.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bulkwire_bench::rows::{Report, Row};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Where the datagrams go (`ADDR` or `ADDR:PORT`; port 9, discard, by
    /// default); several, comma-separated, each get the whole load (as many
    /// ports loaded at once).
    #[arg(long)]
    pub to: String,
    /// The bottleneck's rate, as tc writes it (100mbit, 1gbit).
    #[arg(long, value_parser = bulkwire_bsp::parse_rate)]
    pub rate: f64,
    /// Mean offered load ρ, as a multiple of the rate.
    #[arg(long, default_value_t = 0.8)]
    pub load: f64,
    /// ON-OFF sources (per address).
    #[arg(long, default_value_t = 10)]
    pub sources: u32,
    /// Sources that send in the premium class (DSCP EF), of `sources`.
    #[arg(long, default_value_t = 0)]
    pub premium_sources: u32,
    /// Mean ON and OFF period, milliseconds (exponential).
    #[arg(long, default_value_t = 10.0)]
    pub mean_ms: f64,
    /// How long to send, seconds.
    #[arg(long = "for", default_value_t = 10.0)]
    pub seconds: f64,
    /// Seconds to wait before sending.
    #[arg(long, default_value_t = 0.0)]
    pub after: f64,
    /// Payload bytes per datagram.
    #[arg(long, default_value_t = 1400)]
    pub size: usize,
    /// Seed of the ON-OFF periods (same seed, same pattern).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The address to send from (the bridge's, 10.90.0.254, on the test bed).
    #[arg(long)]
    pub from: Option<std::net::IpAddr>,
}

/// IP header bytes counted towards the rate besides the payload (IPv4 and UDP).
const HEADERS: usize = 28;
/// The DSCP EF code point in the IPv4 TOS byte, as bulkwire's premium sockets set it.
const EF_TOS: u32 = 0xb8;

struct Source {
    socket: UdpSocket,
    to: SocketAddr,
    premium: bool,
    on: bool,
    /// When the current period ends.
    until: Instant,
    /// When the next datagram is due (while ON).
    next: Instant,
    rng: ChaCha8Rng,
    sent: u64,
}

/// Sends the background traffic and returns what was sent, as a row of
/// table `background`.
pub fn run(args: &Args) -> Result<Report, String> {
    run_until(args, &std::sync::atomic::AtomicBool::new(false))
}

/// [`run`], ending early once `stop` is raised (when the job it loads
/// the network for has ended).
pub fn run_until(args: &Args, stop: &std::sync::atomic::AtomicBool) -> Result<Report, String> {
    if !(args.load > 0.0 && args.load.is_finite()) || args.sources == 0 || args.premium_sources > args.sources {
        return Err("need a positive --load, at least one source, and no more premium sources than sources".into());
    }
    if !(args.mean_ms > 0.0 && args.seconds > 0.0 && args.after >= 0.0) || args.size == 0 || args.size > 65_000 {
        return Err("--mean-ms and --for must be positive, --after not negative, --size 1 to 65000".into());
    }
    let targets = args
        .to
        .split(',')
        .map(|t| match t.trim().parse::<SocketAddr>() {
            Ok(a) => Ok(a),
            Err(_) => format!("{}:9", t.trim()).parse().map_err(|_| format!("--to {t:?}: not an address")),
        })
        .collect::<Result<Vec<SocketAddr>, String>>()?;
    // Sources ON half the time: each sends at twice its share while ON.
    let bits = ((args.size + HEADERS) * 8) as f64;
    let gap = Duration::from_secs_f64(bits / (2.0 * args.load * args.rate / args.sources as f64));
    let mean = args.mean_ms / 1e3;
    std::thread::sleep(Duration::from_secs_f64(args.after));
    let start = Instant::now();
    let mut sources = Vec::new();
    for (t, i) in (0..targets.len()).flat_map(|t| (0..args.sources).map(move |i| (t, i))) {
        let to = targets[t];
        let bind: SocketAddr = match args.from {
            Some(ip) => (ip, 0).into(),
            None if to.is_ipv4() => ([0, 0, 0, 0], 0).into(),
            None => ([0u16; 8], 0).into(),
        };
        let socket = UdpSocket::bind(bind).map_err(|e| format!("cannot open a socket on {bind}: {e}"))?;
        let premium = i < args.premium_sources;
        if premium {
            socket2::SockRef::from(&socket)
                .set_tos(EF_TOS)
                .map_err(|e| format!("cannot mark a premium source: {e}"))?;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
        rng.set_stream(u64::from(i) + ((t as u64) << 32));
        // Each source starts ON or OFF with even odds, in a period of random length.
        let on = rng.random_bool(0.5);
        let until = start + exponential(&mut rng, mean);
        sources.push(Source { socket, to, premium, on, until, next: start, rng, sent: 0 });
    }
    let payload = vec![0u8; args.size];
    let end = start + Duration::from_secs_f64(args.seconds);
    loop {
        let now = Instant::now();
        if now >= end || stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let mut due = end;
        for s in &mut sources {
            while now >= s.until {
                s.on = !s.on;
                s.next = s.until;
                s.until += exponential(&mut s.rng, mean);
            }
            while s.on && s.next <= now && s.next < s.until {
                // A full socket buffer loses the datagram, as the port would.
                let _ = s.socket.send_to(&payload, s.to);
                s.sent += 1;
                s.next += gap;
            }
            due = due.min(if s.on && s.next < s.until { s.next } else { s.until });
        }
        wait_until(due);
    }
    let seconds = start.elapsed().as_secs_f64();
    let count = |premium: bool| sources.iter().filter(|s| s.premium == premium).map(|s| s.sent).sum::<u64>();
    let (ordinary, premium) = (count(false), count(true));
    let bytes = (ordinary + premium) * (args.size + HEADERS) as u64;
    let row = Row::new("background", "udp", "on-off", args.sources * targets.len() as u32)
        .load(args.load)
        .size(args.size)
        .with("sent_datagrams", ordinary + premium)
        .with("premium_datagrams", premium)
        .with("offered_mb_per_s", bytes as f64 / seconds / 1e6)
        .with("offered_load_share", bytes as f64 * 8.0 / seconds / args.rate / targets.len() as f64)
        .with("time_s", seconds);
    Ok(Report { rows: vec![row], notes: Vec::new() })
}

/// The table, as text.
pub fn table(report: &Report) -> String {
    let mut o = String::from("# background: ON-OFF sources, datagrams sent and the load they offered\n");
    for r in report.table("background") {
        let n = |name: &str| r.num(name).unwrap_or(f64::NAN);
        o.push_str(&format!(
            "{} sources, {:.0} datagrams ({:.0} premium) in {:.2} s: {:.1} MB/s, load {:.2} of the rate (asked {:.2})\n",
            r.procs,
            n("sent_datagrams"),
            n("premium_datagrams"),
            n("time_s"),
            n("offered_mb_per_s"),
            n("offered_load_share"),
            r.load.unwrap_or(f64::NAN)
        ));
    }
    o
}

/// An exponential period of mean `mean` seconds.
fn exponential(rng: &mut ChaCha8Rng, mean: f64) -> Duration {
    let u: f64 = rng.random::<f64>();
    Duration::from_secs_f64(-mean * (1.0 - u).ln())
}

/// Sleeps most of the way to `due` and spins the rest: a sleep overshoots
/// by tens of microseconds, longer than the gap between datagrams.
fn wait_until(due: Instant) {
    let left = due.saturating_duration_since(Instant::now());
    if left > Duration::from_micros(200) {
        std::thread::sleep(left - Duration::from_micros(150));
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sources_offer_the_load_asked_for() {
        // 50 Mbit/s at load 0.5 for 0.3 s, to a socket that discards.
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        let args = Args {
            to: sink.local_addr().unwrap().to_string(),
            rate: 50e6,
            load: 0.5,
            sources: 4,
            premium_sources: 1,
            mean_ms: 5.0,
            seconds: 0.3,
            after: 0.0,
            size: 1000,
            seed: 3,
            from: None,
        };
        let report = run(&args).unwrap();
        let row = &report.rows[0];
        let load = row.num("offered_load_share").unwrap();
        // ON-OFF periods of 5 ms over 0.3 s: the mean wanders a little.
        assert!((0.3..0.7).contains(&load), "{row:?}");
        let premium = row.num("premium_datagrams").unwrap();
        assert!(premium > 0.0 && premium < row.num("sent_datagrams").unwrap(), "{row:?}");
        assert!(run(&Args { premium_sources: 5, ..args.clone() }).is_err());
        assert!(run(&Args { to: "nowhere".into(), ..args }).unwrap_err().contains("not an address"));
    }
}
