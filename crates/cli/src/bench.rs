//! `bulkwire bench`: benchmarks, each figure beside references measured in
//! the same run between the same two processes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use bulkwire_comm::{CommError, Source, Tag, World};
use serde::{Deserialize, Serialize};

#[derive(clap::Subcommand, Debug)]
pub enum Bench {
    /// Half round-trip latency between two ranks, 0 B to 4 MiB, beside raw
    /// UDP (busy-poll and blocking) and TCP (TCP_NODELAY) ping-pong.
    Pingpong(PingpongArgs),
}

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct PingpongArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Round trips per size (fewer for large sizes).
    #[arg(long, default_value_t = 2000)]
    pub iterations: u32,
    /// Largest size, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_size: usize,
}

pub fn run(bench: &Bench) -> Result<i32, String> {
    let Bench::Pingpong(args) = bench;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let spec = serde_json::to_string(args).map_err(|e| e.to_string())?;
    let launch = crate::launch::Args::local(2, vec![exe.to_string_lossy().into_owned(), "__bench-rank".into(), spec]);
    crate::launch::run(&launch)
}

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// The benchmark's arguments, as JSON.
    spec: String,
}

pub fn rank(args: &RankArgs) -> Result<(), String> {
    let spec: PingpongArgs = serde_json::from_str(&args.spec).map_err(|e| format!("bad benchmark spec: {e}"))?;
    pingpong(&spec).map_err(|e| e.to_string())
}

/// One row: half round trip in microseconds (median over the round trips).
#[derive(Debug, Serialize)]
struct Row {
    size: usize,
    bulkwire_us: f64,
    udp_busy_poll_us: Option<f64>,
    udp_blocking_us: Option<f64>,
    tcp_nodelay_us: f64,
}

fn sizes(max: usize) -> Vec<usize> {
    let mut s = vec![0, 8];
    let mut x = 64;
    while x <= max {
        s.push(x);
        x *= 4;
    }
    if *s.last().expect("nonempty") != max && max > 8 {
        s.push(max);
    }
    s
}

fn rounds(iterations: u32, size: usize) -> usize {
    let budget = (256 << 20) / size.max(1); // at most ~256 MiB moved per size
    (iterations as usize).min(budget).max(10)
}

fn median_half_rtt(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2] / 2.0 * 1e6
}

const ADDR: i32 = 100;
const PING: i32 = 101;

fn pingpong(spec: &PingpongArgs) -> Result<(), CommError> {
    let world = World::init()?;
    if world.size() != 2 {
        world.abort("pingpong needs exactly 2 ranks");
        return Ok(());
    }
    let me = world.rank();
    let peer = 1 - me;
    // The reference sockets, on the same interface, exchanged through bulkwire.
    let udp = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    let tcp_listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
    let mine = format!("{} {}", udp.local_addr().map_err(io)?, tcp_listener.local_addr().map_err(io)?);
    world.send(peer, ADDR, mine.as_bytes())?;
    let (_, theirs) = world.recv(Source::Rank(peer), Tag::Is(ADDR))?;
    let theirs = String::from_utf8_lossy(&theirs).into_owned();
    let mut parts = theirs.split(' ');
    let peer_udp: SocketAddr = parts.next().and_then(|a| a.parse().ok()).expect("peer address");
    let peer_tcp: SocketAddr = parts.next().and_then(|a| a.parse().ok()).expect("peer address");
    udp.connect(peer_udp).map_err(io)?;
    let mut tcp = if me == 0 {
        std::thread::sleep(Duration::from_millis(50));
        TcpStream::connect(peer_tcp).map_err(io)?
    } else {
        tcp_listener.accept().map_err(io)?.0
    };
    tcp.set_nodelay(true).map_err(io)?;
    world.barrier()?;

    let mut rows = Vec::new();
    for size in sizes(spec.max_size) {
        let n = rounds(spec.iterations, size);
        let data = vec![7u8; size];
        // bulkwire
        let mut samples = Vec::with_capacity(n);
        world.barrier()?;
        for _ in 0..n + n / 10 {
            let t = Instant::now();
            if me == 0 {
                world.send(1, PING, &data)?;
                let (_, got) = world.recv(Source::Rank(1), Tag::Is(PING))?;
                debug_assert_eq!(got.len(), size);
            } else {
                let (_, got) = world.recv(Source::Rank(0), Tag::Is(PING))?;
                world.send(0, PING, &got)?;
            }
            samples.push(t.elapsed().as_secs_f64());
        }
        let bulkwire = median_half_rtt(samples.split_off(n / 10));
        world.barrier()?;
        let udp_fits = size <= 65_000;
        let busy = if udp_fits { Some(udp_pingpong(&udp, me, &data, n, true).map_err(io)?) } else { None };
        world.barrier()?;
        let blocking = if udp_fits { Some(udp_pingpong(&udp, me, &data, n, false).map_err(io)?) } else { None };
        world.barrier()?;
        let tcp_us = tcp_pingpong(&mut tcp, me, &data, n).map_err(io)?;
        world.barrier()?;
        rows.push(Row {
            size,
            bulkwire_us: bulkwire,
            udp_busy_poll_us: busy,
            udp_blocking_us: blocking,
            tcp_nodelay_us: tcp_us,
        });
    }
    if me == 0 {
        if spec.json {
            println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialise"));
        } else {
            print_table(&rows);
        }
    }
    world.finalize()
}

fn io(e: std::io::Error) -> CommError {
    CommError::Runtime(e.into())
}

fn udp_pingpong(udp: &UdpSocket, me: u32, data: &[u8], n: usize, busy: bool) -> std::io::Result<f64> {
    udp.set_nonblocking(busy)?;
    udp.set_read_timeout(if busy { None } else { Some(Duration::from_secs(2)) })?;
    let mut buf = vec![0u8; 65_536];
    let recv = |buf: &mut [u8]| -> std::io::Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match udp.recv(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::hint::spin_loop()
                }
                Err(e) => return Err(e),
            }
        }
    };
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n + n / 10 {
        let t = Instant::now();
        if me == 0 {
            udp.send(data)?;
            recv(&mut buf)?;
        } else {
            let got = recv(&mut buf)?;
            udp.send(&buf[..got])?;
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(median_half_rtt(samples.split_off(n / 10)))
}

fn tcp_pingpong(tcp: &mut TcpStream, me: u32, data: &[u8], n: usize) -> std::io::Result<f64> {
    // A stream cannot carry an empty message: the 0-byte row sends 1 byte.
    let data = if data.is_empty() { &[0u8][..] } else { data };
    let mut buf = vec![0u8; data.len()];
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n + n / 10 {
        let t = Instant::now();
        if me == 0 {
            tcp.write_all(data)?;
            tcp.read_exact(&mut buf)?;
        } else {
            tcp.read_exact(&mut buf)?;
            tcp.write_all(&buf)?;
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(median_half_rtt(samples.split_off(n / 10)))
}

fn print_table(rows: &[Row]) {
    println!("# half round trip, median, microseconds; 2 ranks on this machine over loopback");
    println!(
        "{:>9} {:>12} {:>14} {:>14} {:>12} {:>16}",
        "size", "bulkwire", "udp busy-poll", "udp blocking", "tcp nodelay", "bulkwire/udp-bp"
    );
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    for r in rows {
        let ratio = r.udp_busy_poll_us.map_or("-".to_string(), |u| format!("{:.2}", r.bulkwire_us / u));
        println!(
            "{:>9} {:>12.2} {:>14} {:>14} {:>12.2} {:>16}",
            r.size,
            r.bulkwire_us,
            opt(r.udp_busy_poll_us),
            opt(r.udp_blocking_us),
            r.tcp_nodelay_us,
            ratio
        );
    }
}
