//! The `bulkwire` command: argument parsing, launching and printing. The
//! benchmarks live in `bulkwire-bench`, the experiments in `bulkwire-lab`.

mod demo;
mod measure;
mod monitor;

use bulkwire_launch::launch;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "bulkwire", version, about = "A communication runtime for parallel programs on shared networks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a program as a job of N processes on this machine.
    Run(launch::Args),
    /// A small job on this machine: a ring exchange and a barrier on 4 ranks,
    /// with a latency summary.
    Demo(demo::Args),
    /// One rank of the demo job (started by `bulkwire demo`).
    #[command(hide = true, name = "__demo-rank")]
    DemoRank(demo::RankArgs),
    /// Benchmarks, each beside references measured in the same run.
    Bench {
        #[command(flatten)]
        placement: measure::Placement,
        #[command(flatten)]
        format: measure::Format,
        #[command(subcommand)]
        bench: bulkwire_bench::Bench,
    },
    /// One rank of a benchmark job (started by `bulkwire bench`).
    #[command(hide = true, name = "__bench-rank")]
    BenchRank(measure::RankArgs),
    /// Where a BSP job's time went, per superstep, from the traces it wrote
    /// with BULKWIRE_PROFILE=FILE; `--plot out.png` draws them.
    Profile(measure::ProfileArgs),
    /// Tools for the namespace test bed (scripts/netns-testbed.sh).
    Lab {
        #[command(flatten)]
        format: measure::Format,
        #[command(subcommand)]
        tool: measure::LabTool,
    },
    /// Link utilisation from the kernel's counters: rates, drops and
    /// utilisation per interface, qdisc and class every interval, and their
    /// distribution at the end (seed 001).
    Monitor(monitor::MonitorArgs),
    /// Experiments in the deterministic network simulator.
    Sim {
        #[command(flatten)]
        format: measure::Format,
        #[command(subcommand)]
        experiment: measure::Experiment,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => launch::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::DemoRank(args) => demo::rank(&args).map(|()| 0),
        Command::Bench { bench, placement, format } => measure::bench(&bench, &placement, format),
        Command::BenchRank(args) => measure::bench_rank(&args).map(|()| 0),
        Command::Profile(args) => measure::profile(&args).map(|()| 0),
        Command::Sim { experiment, format } => measure::sim(&experiment, format).map(|()| 0),
        Command::Lab { tool, format } => measure::lab(&tool, format).map(|()| 0),
        Command::Monitor(args) => monitor::run(&args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("bulkwire: {e}");
            std::process::exit(1);
        }
    }
}
