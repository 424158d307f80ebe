//! The `bulkwire` command.

mod reliability;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "bulkwire", version, about = "A communication runtime for parallel programs on shared networks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim { experiment: SimCommand::Reliability(args) } => reliability::run(&args),
    };
    if let Err(e) = result {
        eprintln!("bulkwire: {e}");
        std::process::exit(1);
    }
}
