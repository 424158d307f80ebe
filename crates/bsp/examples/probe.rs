//! Measures the BSP parameters of this machine and network: l, the cost of
//! an empty superstep, and g, the cost per byte of an h-relation, by timing
//! supersteps in which every process sends and receives h bytes (a total
//! exchange of h / (p - 1) bytes per pair) for growing h, and fitting
//! T(h) = g h + l by least squares.
//!
//! `bulkwire run -n 4 target/debug/examples/probe [max_h_bytes] [repetitions]`

use bulkwire_bsp::{Bsp, BspError};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<(), BspError> {
    let mut bsp = Bsp::begin()?;
    let (pid, p) = (bsp.pid(), bsp.nprocs());
    let max_h: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let reps: usize = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(10);
    let others = (p - 1).max(1) as usize;
    let inbox = bsp.register::<u8>((max_h / others + 1) * p as usize)?;
    bsp.sync()?;

    let mut empty = Vec::new();
    for _ in 0..reps {
        let t = bsp.time();
        bsp.sync()?;
        empty.push(bsp.time() - t);
    }
    let l = median(empty);

    let mut points = Vec::new();
    let mut h = 1024.min(max_h);
    while h <= max_h {
        let per_pair = h / others;
        let data = vec![pid as u8; per_pair];
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = bsp.time();
            for k in 1..p {
                let to = (pid + k) % p;
                bsp.put(to, &data, &inbox, pid as usize * per_pair)?;
            }
            bsp.sync()?;
            times.push(bsp.time() - t);
        }
        // Every other process's bytes arrived where it put them.
        let area = bsp.area(&inbox);
        if let Some(q) =
            (0..p).find(|&q| q != pid && area[q as usize * per_pair..][..per_pair].iter().any(|&b| b != q as u8))
        {
            bsp.abort(&format!("the bytes from process {q} did not arrive (h = {h})"));
        }
        points.push(((per_pair * others) as f64, median(times)));
        h *= 4;
    }
    // Least squares fit of T = g h + l over the points.
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (sxx, sxy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x * x, b + x * y));
    let g = if points.len() > 1 { (n * sxy - sx * sy) / (n * sxx - sx * sx) } else { 0.0 };
    let fitted_l = (sy - g * sx) / n;
    // On a busy machine noise can outweigh small h; only nonsense is an error.
    if !(g.is_finite() && l.is_finite() && l > 0.0) {
        bsp.abort(&format!("implausible parameters g={g} l={l}"));
    }
    if pid == 0 {
        // One size gives no slope, and noise can make a small one negative.
        let g_text = if points.len() < 2 {
            "g not measured (one h; give a larger max_h)".to_string()
        } else if g <= 0.0 {
            "g not resolved (the times do not grow with h)".to_string()
        } else {
            format!("g = {:.3} ns/byte ({:.0} MB/s per process)", g * 1e9, 1e-6 / g)
        };
        println!("p = {p}: l = {:.1} us (empty sync), {g_text}, fitted l = {:.1} us", l * 1e6, fitted_l * 1e6);
        for (h, t) in &points {
            println!("  h = {:>9} bytes: {:>9.1} us", h, t * 1e6);
        }
    }
    bsp.end()
}
