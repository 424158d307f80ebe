//! Seed 003's asynchronous iterative solver in a page: `A x + b = 0` by
//! Jacobi's iteration, the rows split among the processes, `x` in a shared
//! segment that every process reads locally and writes its rows of with
//! slow writes, sweeping without waiting for anybody. Once every change a
//! process sees is small, a fence makes the replicas equal and each process
//! checks its rows; the sweeps go on until every check holds.
//!
//!   cargo build --release -p bulkwire-dsm --example solver
//!   bulkwire run -n 4 target/release/examples/solver [n]
//!
//! The system has a known answer (`x*_i = sin i`, `b = −A x*`, `a_ij =
//! 1/(1 + |i − j|)` off the diagonal, the diagonal 1.2 times the rest of its
//! row); the program checks it finds it. `BULKWIRE_DSM_FLUSH=warp` (the
//! default) or a number of writes chooses how writes are flushed.
//! `bulkwire bench solver` and `bulkwire lab solver` measure the same
//! method against BSP and Open MPI.

use bulkwire_comm::World;
use bulkwire_dsm::{Dsm, Semantics};

const TOLERANCE: f64 = 1e-10;

fn a(i: usize, j: usize, n: usize) -> f64 {
    if i != j {
        return 1.0 / (1.0 + i.abs_diff(j) as f64);
    }
    1.2 * (0..n).filter(|&k| k != i).map(|k| a(i, k, n)).sum::<f64>()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(400), |s| s.parse())?;
    let world = World::init()?;
    let (me, procs) = (world.rank() as usize, world.size() as usize);
    let (lo, hi) = (n * me / procs, n * (me + 1) / procs);
    // This process's rows of A and b.
    let rows: Vec<Vec<f64>> = (lo..hi).map(|i| (0..n).map(|j| a(i, j, n)).collect()).collect();
    let answer: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
    let b: Vec<f64> = rows.iter().map(|row| -row.iter().zip(&answer).map(|(a, x)| a * x).sum::<f64>()).collect();

    let dsm = Dsm::new(&world)?;
    let x = dsm.map::<f64>("x", n)?;
    let status = dsm.map::<f64>("status", procs)?;
    let check = dsm.map::<f64>("check", procs)?;
    status.write(me, f64::INFINITY, Semantics::Slow)?;
    dsm.fence()?;

    let sweep = |x: &[f64], out: &mut [f64]| -> f64 {
        let mut change: f64 = 0.0;
        for (k, row) in rows.iter().enumerate() {
            let i = lo + k;
            let dot: f64 = row.iter().zip(x).map(|(a, x)| a * x).sum::<f64>() - row[i] * x[i];
            out[k] = -(b[k] + dot) / row[i];
            change = change.max((out[k] - x[i]).abs());
        }
        change
    };
    let (mut local, mut mine, mut seen) = (vec![0.0; n], vec![0.0; hi - lo], vec![0.0; procs]);
    let start = std::time::Instant::now();
    let mut sweeps = 0;
    loop {
        loop {
            x.read_into(0, &mut local)?;
            let change = sweep(&local, &mut mine);
            sweeps += 1;
            x.write_slice(lo, &mine, Semantics::Slow)?;
            status.write(me, change, Semantics::Slow)?;
            status.read_into(0, &mut seen)?;
            if seen.iter().all(|&c| c < TOLERANCE) {
                break;
            }
        }
        dsm.fence()?;
        x.read_into(0, &mut local)?;
        check.write(me, sweep(&local, &mut mine), Semantics::Slow)?;
        dsm.fence()?;
        check.read_into(0, &mut seen)?;
        if seen.iter().all(|&c| c < TOLERANCE) {
            break;
        }
    }
    x.read_into(0, &mut local)?;
    let error = local.iter().zip(&answer).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    if error > 1e-7 {
        world.abort(&format!("solver: process {me}'s answer is off by {error:e}"));
        std::process::exit(1);
    }
    let stats = dsm.stats();
    println!(
        "process {me}: {sweeps} sweeps in {:.3} s, error {error:.1e}; {} batches, {} writes coalesced, threshold {:.0}",
        start.elapsed().as_secs_f64(),
        stats.batches_sent,
        stats.coalesced,
        stats.threshold
    );
    world.barrier()?;
    Ok(())
}
