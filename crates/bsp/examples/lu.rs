//! LU decomposition without pivoting of a diagonally dominant n × n matrix,
//! rows distributed cyclically (row i on process i mod p). In step k the
//! owner of row k puts it to every process; after the sync each process
//! eliminates column k from its rows below k. Checks L U = A row by row.
//!
//! `bulkwire run -n 4 target/debug/examples/lu [n]`

use bulkwire_bsp::{Bsp, BspError};

fn a(i: usize, j: usize, n: usize) -> f64 {
    if i == j {
        2.0 * n as f64
    } else {
        ((i * 7 + j * 3) % 11) as f64 / 11.0
    }
}

fn main() -> Result<(), BspError> {
    let mut bsp = Bsp::begin()?;
    let (pid, p) = (bsp.pid() as usize, bsp.nprocs() as usize);
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    // Every pivot row (the rows of U), as they are broadcast.
    let pivots = bsp.register::<f64>(n * n)?;
    bsp.sync()?;

    let start = bsp.time();
    let mine: Vec<usize> = (pid..n).step_by(p).collect();
    // Each local row holds L (left of the diagonal) and U (the rest).
    let mut rows: Vec<Vec<f64>> = mine.iter().map(|&i| (0..n).map(|j| a(i, j, n)).collect()).collect();
    for k in 0..n {
        if k % p == pid {
            let row = &rows[k / p];
            for to in 0..p as u32 {
                bsp.put(to, &row[k..], &pivots, k * n + k)?;
            }
        }
        bsp.sync()?;
        let pivot = &bsp.area(&pivots)[k * n..(k + 1) * n];
        for (r, &i) in rows.iter_mut().zip(&mine) {
            if i > k {
                let factor = r[k] / pivot[k];
                r[k] = factor;
                for j in k + 1..n {
                    r[j] -= factor * pivot[j];
                }
            }
        }
    }
    let took = bsp.time() - start;

    // Check: row i of L U is A's row i.
    let u = bsp.area(&pivots);
    let mut worst: f64 = 0.0;
    for (r, &i) in rows.iter().zip(&mine) {
        for j in 0..n {
            let mut sum = if i <= j { u[i * n + j] } else { 0.0 };
            for k in 0..i.min(j + 1) {
                sum += r[k] * u[k * n + j];
            }
            worst = worst.max((sum - a(i, j, n)).abs());
        }
    }
    if worst.is_nan() || worst >= 1e-9 * n as f64 {
        bsp.abort(&format!("L U differs from A by {worst}"));
    }
    if pid == 0 {
        println!(
            "LU of a {n} x {n} matrix on {p} processes: |LU - A| <= {worst:.1e} (correct) in {:.1} ms, {n} supersteps",
            took * 1e3
        );
    }
    bsp.end()
}
