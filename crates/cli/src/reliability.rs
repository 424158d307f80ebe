//! `bulkwire sim reliability`: one workload under several loss patterns, for
//! each loss-recovery strategy, in the simulator.

use std::time::Duration;

use bulkwire_proto::Strategy;
use bulkwire_sim::workload::{run as run_scenario, Plan, Scenario};
use bulkwire_sim::{LinkParams, LossModel};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Seed of the simulation (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Messages sent one way, from rank 0 to rank 1.
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// Bytes per message.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// One-way propagation delay of the link, microseconds.
    #[arg(long, default_value_t = 50)]
    delay_us: u64,
    /// Link rate, Mbit/s.
    #[arg(long, default_value_t = 1000)]
    rate_mbps: u64,
}

/// One row of the table.
#[derive(Debug, Serialize)]
pub struct Row {
    pub loss: String,
    pub strategy: String,
    pub messages_expected: usize,
    pub messages_delivered: usize,
    pub wrong_or_duplicate: usize,
    pub data_packets: u64,
    pub lost_by_network: u64,
    pub data_lost_by_network: u64,
    pub retransmitted: u64,
    pub retransmitted_per_lost: Option<f64>,
    pub explicit_acks: u64,
    pub explicit_acks_per_100_data: f64,
    pub prods: u64,
    pub completion_ms: f64,
    pub completed: bool,
}

fn scenarios() -> Vec<(String, LossModel)> {
    let mut s: Vec<(String, LossModel)> = [0.0, 0.01, 0.05, 0.10, 0.20]
        .into_iter()
        .map(|p| (format!("{:.0}% random", p * 100.0), if p == 0.0 { LossModel::None } else { LossModel::Random(p) }))
        .collect();
    // Loss episodes of 50 us: about four full-size packets at 1 Gbit/s.
    s.push(("5% bursty".into(), LossModel::bursty(0.05, Duration::from_micros(50))));
    s
}

pub fn measure(args: &Args, progress: &ProgressBar) -> Result<Vec<Row>, String> {
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
            progress.set_message(format!("{label}, {strategy}"));
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
            rows.push(Row {
                loss: label.clone(),
                strategy: strategy.to_string(),
                messages_expected: o.expected,
                messages_delivered: o.delivered,
                wrong_or_duplicate: o.errors.len(),
                data_packets: p.data_sent,
                lost_by_network: lost,
                data_lost_by_network: o.network.data_lost,
                retransmitted: p.retransmissions,
                retransmitted_per_lost: (o.network.data_lost > 0)
                    .then(|| p.retransmissions as f64 / o.network.data_lost as f64),
                explicit_acks: p.explicit_acks_sent,
                explicit_acks_per_100_data: 100.0 * p.explicit_acks_sent as f64 / p.data_sent.max(1) as f64,
                prods: p.prods_sent,
                completion_ms: o.completion.as_secs_f64() * 1e3,
                completed: o.completed,
            });
            progress.inc(1);
        }
    }
    Ok(rows)
}

pub fn run(args: &Args) -> Result<(), String> {
    let progress = ProgressBar::new((scenarios().len() * 2) as u64);
    progress.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("valid template"));
    let rows = measure(args, &progress)?;
    progress.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    } else {
        print_table(args, &rows);
    }
    if rows.iter().any(|r| !r.completed || r.wrong_or_duplicate > 0) {
        return Err("a run did not deliver every message exactly once".into());
    }
    Ok(())
}

fn print_table(args: &Args, rows: &[Row]) {
    println!(
        "# one-way bulk transfer: {} messages of {} B, rank 0 -> rank 1, {} Mbit/s, {} us one way, seed {}",
        args.messages, args.size, args.rate_mbps, args.delay_us, args.seed
    );
    println!(
        "{:<12} {:<13} {:>11} {:>8} {:>7} {:>9} {:>7} {:>9} {:>12} {:>6} {:>10}",
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
    );
    for r in rows {
        let ratio = r.retransmitted_per_lost.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<12} {:<13} {:>5}/{:<5} {:>8} {:>7} {:>9} {:>7} {:>9} {:>12.2} {:>6} {:>10.2}",
            r.loss,
            r.strategy,
            r.messages_delivered,
            r.messages_expected,
            r.data_packets,
            r.lost_by_network,
            r.data_lost_by_network,
            r.retransmitted,
            ratio,
            r.explicit_acks_per_100_data,
            r.prods,
            r.completion_ms
        );
    }
}
