//! `bulkwire sim reliability`: one workload under several loss patterns, for
//! each loss-recovery strategy, in the simulator.

use std::time::Duration;

use bulkwire_bench::rows::{opt, Report, Row};
use bulkwire_proto::Strategy;
use bulkwire_sim::workload::{run as run_scenario, Plan, Scenario};
use bulkwire_sim::{LinkParams, LossModel};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Messages sent one way, from rank 0 to rank 1.
    #[arg(long, default_value_t = 2000)]
    pub messages: usize,
    /// Bytes per message.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// One-way propagation delay of the link, microseconds.
    #[arg(long, default_value_t = 50)]
    pub delay_us: u64,
    /// Link rate, Mbit/s.
    #[arg(long, default_value_t = 1000)]
    pub rate_mbps: u64,
}

const BENCH: &str = "reliability";

fn scenarios() -> Vec<(String, LossModel)> {
    let mut s: Vec<(String, LossModel)> = [0.0, 0.01, 0.05, 0.10, 0.20]
        .into_iter()
        .map(|p| (format!("{:.0}% random", p * 100.0), if p == 0.0 { LossModel::None } else { LossModel::Random(p) }))
        .collect();
    // Loss episodes of 50 us: about four full-size packets at 1 Gbit/s.
    s.push(("5% bursty".into(), LossModel::bursty(0.05, Duration::from_micros(50))));
    s
}

/// How many runs [`measure`] makes (for a progress bar).
pub fn runs() -> usize {
    scenarios().len() * 2
}

/// Rows of table `reliability`: per loss pattern and strategy, what
/// arrived, what the network lost, what was resent and the
/// acknowledgements spent. `progress` hears of each run as it ends.
pub fn measure(args: &Args, progress: &mut dyn FnMut(&str)) -> Result<Report, String> {
    if args.messages == 0 {
        return Err("--messages must be at least 1".into());
    }
    if args.size > 4 << 20 {
        return Err("--size is limited to 4 MiB (max_message_size)".into());
    }
    if args.rate_mbps == 0 {
        return Err("--rate-mbps must be positive".into());
    }
    let mut rows = Vec::new();
    for (label, loss) in scenarios() {
        for strategy in [Strategy::HoleFilling, Strategy::GoBackN] {
            let mut link = LinkParams {
                delay: Duration::from_micros(args.delay_us),
                rate_bps: args.rate_mbps * 1_000_000,
                nic_bps: args.rate_mbps * 1_000_000,
                ..LinkParams::default()
            };
            link.faults.loss = loss;
            let mut scenario = Scenario::new(args.seed, Plan::bulk(args.messages, args.size), link);
            scenario.strategy = strategy;
            let o = run_scenario(&scenario, Duration::from_secs(600));
            let p = &o.protocol;
            let lost = o.network.lost_total();
            let row = Row::new(BENCH, "sim", strategy.to_string(), 2)
                .size(args.size)
                .with("loss", label.as_str())
                .with("expected_messages", o.expected)
                .with("delivered_messages", o.delivered)
                .with("wrong_or_duplicate_messages", o.errors.len())
                .with("data_packets", p.data_sent)
                .with("lost_packets", lost)
                .with("lost_data_packets", o.network.data_lost)
                .with("retransmitted_packets", p.retransmissions)
                .with_opt(
                    "retransmitted_per_lost_ratio",
                    (o.network.data_lost > 0).then(|| p.retransmissions as f64 / o.network.data_lost as f64),
                )
                .with("explicit_ack_packets", p.explicit_acks_sent)
                .with(
                    "explicit_acks_per_100_data_ratio",
                    100.0 * p.explicit_acks_sent as f64 / p.data_sent.max(1) as f64,
                )
                .with("prod_packets", p.prods_sent)
                .with("completion_ms", o.completion.as_secs_f64() * 1e3)
                .with("completed", o.completed);
            rows.push(row);
            progress(&format!("{label}, {strategy}"));
        }
    }
    Ok(Report { rows, notes: Vec::new() })
}

/// Whether every run delivered every message exactly once.
pub fn all_delivered(report: &Report) -> bool {
    report
        .table(BENCH)
        .all(|r| r.field("completed") == Some(&true.into()) && r.num("wrong_or_duplicate_messages") == Some(0.0))
}

pub fn table(args: &Args, report: &Report) -> String {
    let mut o = format!(
        "# one-way bulk transfer: {} messages of {} B, rank 0 -> rank 1, {} Mbit/s, {} us one way, seed {}\n",
        args.messages, args.size, args.rate_mbps, args.delay_us, args.seed
    );
    o.push_str(&format!(
        "{:<12} {:<13} {:>11} {:>8} {:>7} {:>9} {:>7} {:>9} {:>12} {:>6} {:>10}\n",
        "loss",
        "strategy",
        "delivered",
        "data",
        "lost",
        "data lost",
        "retx",
        "retx/lost",
        "acks/100data",
        "prods",
        "time (ms)"
    ));
    for r in report.table(BENCH) {
        let n = |name: &str| r.num(name).unwrap_or(f64::NAN);
        o.push_str(&format!(
            "{:<12} {:<13} {:>5}/{:<5} {:>8} {:>7} {:>9} {:>7} {:>9} {:>12.2} {:>6} {:>10.2}\n",
            r.text("loss").unwrap_or("-"),
            r.what,
            n("delivered_messages"),
            n("expected_messages"),
            n("data_packets"),
            n("lost_packets"),
            n("lost_data_packets"),
            n("retransmitted_packets"),
            opt(r.num("retransmitted_per_lost_ratio"), 2),
            n("explicit_acks_per_100_data_ratio"),
            n("prod_packets"),
            n("completion_ms")
        ));
    }
    o
}
