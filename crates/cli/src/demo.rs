//! `bulkwire demo`: a small job, on this machine unless `--hosts` says
//! otherwise. Each rank passes a token around a ring, then all meet in
//! barriers; rank 0 prints a latency summary.

use bulkwire_comm::{CommError, Source, Tag, World};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of processes.
    #[arg(short = 'n', long = "np", default_value_t = 4)]
    ranks: u32,
    /// Ring steps (and barriers) to time.
    #[arg(long, default_value_t = 2000)]
    iterations: u32,
    /// Bytes passed at each ring step.
    #[arg(long, default_value_t = 8)]
    size: usize,
    /// Where the ranks run (this machine by default).
    #[command(flatten)]
    placement: crate::measure::Placement,
    /// Which paths carry the data (as `bulkwire run --paths`).
    #[arg(long, value_enum)]
    paths: Option<bulkwire_launch::launch::PathsChoice>,
    /// Print every rank's traffic to every peer at the end (as `bulkwire run --stats`).
    #[arg(long)]
    stats: bool,
}

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    #[arg(long)]
    iterations: u32,
    #[arg(long)]
    size: usize,
}

pub fn run(args: &Args) -> Result<i32, String> {
    if args.ranks < 2 {
        return Err("the demo needs at least 2 ranks".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut launch = bulkwire_launch::launch::Args::local(
        args.ranks,
        vec![
            exe.to_string_lossy().into_owned(),
            "__demo-rank".into(),
            "--iterations".into(),
            args.iterations.to_string(),
            "--size".into(),
            args.size.to_string(),
        ],
    );
    launch.hosts = args.placement.hosts.clone();
    launch.ssh = args.placement.ssh.clone();
    launch.bind = args.placement.bind;
    launch.paths = args.paths;
    launch.stats = args.stats;
    bulkwire_launch::launch::run(&launch)
}

const RING: i32 = 1;
const REPORT: i32 = 2;

pub fn rank(args: &RankArgs) -> Result<(), String> {
    ring(args).map_err(|e| e.to_string())
}

fn ring(args: &RankArgs) -> Result<(), CommError> {
    let world = World::init()?;
    let (rank, size) = (world.rank(), world.size());
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let iterations = args.iterations.max(1) as usize;

    world.barrier()?;
    let mut steps = Vec::with_capacity(iterations);
    let mut payload = vec![0u8; args.size.max(8)];
    for i in 0..iterations {
        payload[..4].copy_from_slice(&(i as u32).to_le_bytes());
        payload[4..8].copy_from_slice(&rank.to_le_bytes());
        let start = world.wtime();
        world.send(right, RING, &payload)?;
        let (status, got) = world.recv(Source::Rank(left), Tag::Is(RING))?;
        steps.push(world.wtime() - start);
        let expected = ((i as u32).to_le_bytes(), left.to_le_bytes());
        if status.source != left || got.len() != payload.len() || got[..4] != expected.0 || got[4..8] != expected.1 {
            world.abort(&format!("rank {rank}: ring message {i} from rank {left} is wrong"));
            return Ok(());
        }
    }
    let start = world.wtime();
    for _ in 0..iterations {
        world.barrier()?;
    }
    let barrier = (world.wtime() - start) / iterations as f64;

    steps.sort_by(|a, b| a.total_cmp(b));
    let summary = [steps[0], steps[steps.len() / 2], steps[steps.len() * 99 / 100], barrier];
    if rank != 0 {
        let bytes: Vec<u8> = summary.iter().flat_map(|x| x.to_le_bytes()).collect();
        world.send(0, REPORT, &bytes)?;
    } else {
        println!(
            "bulkwire demo: {size} ranks, {iterations} ring steps of {} bytes, {iterations} barriers",
            payload.len()
        );
        println!(
            "{:>5} {:>14} {:>14} {:>14} {:>14}",
            "rank", "ring min (us)", "ring med (us)", "ring p99 (us)", "barrier (us)"
        );
        let mut rows = vec![(0, summary)];
        for _ in 1..size {
            let (status, bytes) = world.recv(Source::Any, Tag::Is(REPORT))?;
            let mut s = [0f64; 4];
            for (k, chunk) in bytes.chunks_exact(8).take(4).enumerate() {
                s[k] = f64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            }
            rows.push((status.source, s));
        }
        rows.sort_by_key(|r| r.0);
        for (r, s) in rows {
            println!("{r:>5} {:>14.1} {:>14.1} {:>14.1} {:>14.1}", s[0] * 1e6, s[1] * 1e6, s[2] * 1e6, s[3] * 1e6);
        }
        println!("every ring message arrived intact and in order");
    }
    world.finalize()
}
