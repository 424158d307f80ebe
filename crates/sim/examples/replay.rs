//! Replays fault-test seeds and shows what happened, for debugging a seed the
//! fault sweep reports:
//!
//! ```text
//! cargo run --release -p bulkwire-sim --example replay -- 4552          # one seed
//! cargo run --release -p bulkwire-sim --example replay -- 0 100000      # a range, failures only
//! ```

use std::time::{Duration, Instant};

use bulkwire_sim::workload::{random_scenario, run};

fn main() {
    let args: Vec<u64> = match std::env::args().skip(1).map(|a| a.parse()).collect() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("usage: replay SEED [END]: {e}");
            std::process::exit(2);
        }
    };
    let (start, end, verbose) = match args[..] {
        [seed] => (seed, seed + 1, true),
        [start, end] => (start, end, false),
        _ => {
            eprintln!("usage: replay SEED [END]");
            std::process::exit(2);
        }
    };
    let mut failed = 0;
    for seed in start..end {
        let scenario = random_scenario(seed);
        let wall = Instant::now();
        let o = run(&scenario, Duration::from_secs(30));
        if verbose || !o.completed {
            failed += !o.completed as u32;
            println!(
                "seed {seed}: completed {} delivered {}/{} by {} ({} events, {:?} wall)",
                o.completed,
                o.delivered,
                o.expected,
                o.completion,
                o.events,
                wall.elapsed()
            );
            println!(
                "  {:?}, {} ranks, {} buffers\n  {:?}",
                scenario.strategy, scenario.plan.ranks, scenario.packet_buffers, scenario.link
            );
            println!("  network {:?}\n  protocol {:?}", o.network, o.protocol);
            for e in o.errors.iter().take(5) {
                println!("  error: {e}");
            }
            print!("{}", o.diagnosis);
        }
    }
    if failed > 0 {
        std::process::exit(1);
    }
}
