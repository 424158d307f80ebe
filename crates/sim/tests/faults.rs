//! The proof under faults: random workloads over random faulty networks, one
//! per seed, each checked for exactly-once, intact, in-order delivery, memory
//! within bounds and no stall while the network is connected.

use std::time::Duration;

use bulkwire_sim::workload::{random_scenario, run, Outcome, Scenario};

/// Simulated time allowed after the last partition heals. Back-off is capped
/// at `max_rto` (1 s), so a live protocol finishes well within this.
const LIMIT: Duration = Duration::from_secs(30);

fn check(seed: u64) -> Result<Outcome, String> {
    let scenario: Scenario = random_scenario(seed);
    let outcome = run(&scenario, LIMIT);
    if !outcome.errors.is_empty() {
        return Err(format!(
            "seed {seed}: {} (replay: cargo run --release -p bulkwire-sim --example replay -- {seed})",
            outcome.errors.join("; ")
        ));
    }
    if !outcome.completed {
        return Err(format!(
            "seed {seed}: stalled: {}/{} messages delivered by {} ({:?}, {} ranks, {} buffers)\n{:?}\n{}",
            outcome.delivered,
            outcome.expected,
            outcome.ended,
            scenario.strategy,
            scenario.plan.ranks,
            scenario.packet_buffers,
            outcome.protocol,
            outcome.diagnosis
        ));
    }
    Ok(outcome)
}

fn sweep(seeds: std::ops::Range<u64>) {
    let mut failures = Vec::new();
    let mut lost = 0;
    let mut retransmitted = 0;
    for seed in seeds.clone() {
        match check(seed) {
            Ok(o) => {
                lost += o.network.lost_total();
                retransmitted += o.protocol.retransmissions;
            }
            Err(e) => failures.push(e),
        }
        if failures.len() >= 5 {
            break;
        }
    }
    assert!(failures.is_empty(), "{} failing seeds, first ones:\n{}", failures.len(), failures.join("\n"));
    // The faults really happened and were really recovered from.
    assert!(lost > 0 && retransmitted > 0, "the sweep injected no loss");
    eprintln!("{} seeds: {lost} packets lost by the network, {retransmitted} retransmitted", seeds.end - seeds.start);
}

fn seeds_from_env(default: u64) -> u64 {
    std::env::var("BULKWIRE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[test]
fn random_workloads_over_faulty_networks() {
    sweep(0..seeds_from_env(2000));
}

#[test]
#[ignore = "long: 100,000 seeds"]
fn random_workloads_over_faulty_networks_long() {
    sweep(0..seeds_from_env(100_000));
}

#[test]
fn same_seed_same_run() {
    for seed in [3, 17, 99] {
        let a = run(&random_scenario(seed), LIMIT);
        let b = run(&random_scenario(seed), LIMIT);
        assert_eq!(a.completion, b.completion);
        assert_eq!(a.ended, b.ended);
        assert_eq!(a.events, b.events);
        assert_eq!(a.network, b.network);
        assert_eq!(a.protocol, b.protocol);
    }
}

mod faults_are_real {
    use super::*;
    use bulkwire_proto::Time;
    use bulkwire_sim::workload::Plan;
    use bulkwire_sim::{Faults, LinkParams, LossModel};

    fn bulk_over(faults: Faults) -> Outcome {
        let link = LinkParams { faults, ..LinkParams::default() };
        let outcome = run(&Scenario::new(5, Plan::bulk(300, 3000), link), LIMIT);
        assert!(outcome.completed, "{:?}\n{}", outcome.errors, outcome.diagnosis);
        outcome
    }

    #[test]
    fn corruption_is_caught_by_the_mac() {
        let o = bulk_over(Faults { corrupt: 0.05, ..Faults::default() });
        let bad_mac: u64 = o.endpoints.iter().map(|e| e.rejected.bad_mac).sum();
        assert!(o.network.corrupted > 10);
        // A flipped bit in the length or version fields is rejected before the MAC.
        let rejected: u64 = o.endpoints.iter().map(|e| e.rejected.total()).sum();
        assert_eq!(rejected, o.network.corrupted);
        assert!(bad_mac * 10 >= o.network.corrupted * 8, "{bad_mac} of {}", o.network.corrupted);
    }

    #[test]
    fn duplicates_are_delivered_once() {
        let o = bulk_over(Faults { duplicate: 0.1, ..Faults::default() });
        assert!(o.network.duplicated > 10);
        assert!(o.protocol.duplicates >= o.network.duplicated);
    }

    #[test]
    fn reordering_is_tolerated() {
        let o = bulk_over(Faults { reorder: 0.1, ..Faults::default() });
        assert!(o.network.reordered > 10);
    }

    #[test]
    fn a_partition_heals_and_the_transfer_completes() {
        let start = Time::from_nanos(2_000_000);
        let end = Time::from_nanos(300_000_000);
        let o = bulk_over(Faults { partitions: vec![(start, end)], ..Faults::default() });
        assert!(o.network.partitioned > 0);
        assert!(o.completion > end);
    }

    #[test]
    fn bursty_loss_comes_in_bursts_at_the_asked_rate() {
        let o = bulk_over(Faults { loss: LossModel::bursty(0.05, Duration::from_micros(100)), ..Faults::default() });
        let rate = o.network.lost as f64 / o.network.sent as f64;
        assert!((0.01..0.15).contains(&rate), "loss rate {rate}");
    }
}
