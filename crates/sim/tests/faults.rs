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
        return Err(format!("seed {seed}: {}", outcome.errors.join("; ")));
    }
    if !outcome.completed {
        return Err(format!(
            "seed {seed}: stalled: {}/{} messages delivered by {} ({:?}, {} ranks, {} buffers)\n{:?}",
            outcome.delivered,
            outcome.expected,
            outcome.ended,
            scenario.strategy,
            scenario.plan.ranks,
            scenario.packet_buffers,
            outcome.protocol
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
