//! Inner product of two distributed vectors: each process sums its block,
//! puts its partial sum to every process, and after one sync every process
//! adds the partial sums. Checks the result against the closed form.
//!
//! `bulkwire run -n 4 target/debug/examples/inner_product [n]`

use bulkwire_bsp::{Bsp, BspError};

fn main() -> Result<(), BspError> {
    let mut bsp = Bsp::begin()?;
    let (pid, p) = (bsp.pid() as usize, bsp.nprocs() as usize);
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let partial = bsp.register::<f64>(p)?;
    bsp.sync()?;

    // Block distribution: process `pid` holds elements [lo, hi).
    let (lo, hi) = (pid * n / p, (pid + 1) * n / p);
    let x: Vec<f64> = (lo..hi).map(|i| (i % 10) as f64).collect();
    let y: Vec<f64> = (lo..hi).map(|i| (i % 3) as f64).collect();
    let start = bsp.time();
    let mine: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    for to in 0..p as u32 {
        bsp.put(to, &[mine], &partial, pid)?;
    }
    bsp.sync()?;
    let total: f64 = bsp.area(&partial).iter().sum();
    let took = bsp.time() - start;

    let expect: f64 = (0..n).map(|i| ((i % 10) * (i % 3)) as f64).sum();
    if total != expect {
        bsp.abort(&format!("inner product {total}, expected {expect}"));
    }
    if pid == 0 {
        println!("inner product of {n} elements on {p} processes: {total} (correct) in {:.3} ms", took * 1e3);
    }
    bsp.end()
}
