use bulkwire_sim::workload::{random_scenario, run};
use std::time::{Duration, Instant};
fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    for seed in args[0]..args[1] {
        if seed % 50 == 0 {
            eprintln!("at {seed}");
        }
        let s = random_scenario(seed);
        let t = Instant::now();
        let o = run(&s, Duration::from_secs(30));
        let el = t.elapsed();
        if !o.completed || el > Duration::from_millis(200) {
            println!("seed {seed}: completed={} {}/{} ended={} events={} wall={:?} strat={:?} bufs={} ranks={} loss={:?} errors={:?}\n  {:?}", o.completed, o.delivered, o.expected, o.ended, o.events, el, s.strategy, s.packet_buffers, s.plan.ranks, s.link.faults.loss, o.errors.first(), o.protocol);
            if args.len() > 2 {
                println!("{}", o.diagnosis);
                println!("{:?}", o.network);
                for e in &o.endpoints {
                    println!("{:?} viol {} unh {}", e.rejected, e.protocol_violations, e.unhandled);
                }
                println!("{:?}", s.link);
            }
        }
    }
}
