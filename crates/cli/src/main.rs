//! The `bulkwire` command.

mod bench;
mod demo;
mod hosts;
mod launch;
mod plot;
mod profile;
mod reliability;
mod service_switching;
mod warp;

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
        placement: bench::Placement,
        #[command(subcommand)]
        bench: bench::Bench,
    },
    /// One rank of a benchmark job (started by `bulkwire bench`).
    #[command(hide = true, name = "__bench-rank")]
    BenchRank(bench::RankArgs),
    /// Where a BSP job's time went, per superstep, from the traces it wrote
    /// with BULKWIRE_PROFILE=FILE; `--plot out.png` draws them.
    Profile(profile::Args),
    /// Experiments in the deterministic network simulator.
    Sim {
        #[command(subcommand)]
        experiment: SimCommand,
    },
}

#[derive(Subcommand)]
enum SimCommand {
    /// Loss recovery under random and bursty loss: hole filling against go-back-N.
    Reliability(reliability::Args),
    /// Warp rate control: n senders into one FCFS server (seed 003 §3, §6.2).
    Warp(warp::Args),
    /// Latency-adaptive switching between ordinary and premium service on a
    /// congested cell switch (seed 000 §4).
    ServiceSwitching(service_switching::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => launch::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::DemoRank(args) => demo::rank(&args).map(|()| 0),
        Command::Bench { bench, placement } => bench::run(&bench, &placement),
        Command::BenchRank(args) => bench::rank(&args).map(|()| 0),
        Command::Profile(args) => profile::run(&args).map(|()| 0),
        Command::Sim { experiment: SimCommand::Reliability(args) } => reliability::run(&args).map(|()| 0),
        Command::Sim { experiment: SimCommand::Warp(args) } => warp::run(&args).map(|()| 0),
        Command::Sim { experiment: SimCommand::ServiceSwitching(args) } => service_switching::run(&args).map(|()| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("bulkwire: {e}");
            std::process::exit(1);
        }
    }
}
