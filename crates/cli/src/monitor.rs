//! `bulkwire monitor`: the sampler of `bulkwire_lab::monitor` with a live
//! line per interval, Ctrl-C, and a command to sample around (`--during`).

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bulkwire_lab::monitor::{self, Kernel, Monitor, Progress};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(clap::Args, Debug)]
pub struct MonitorArgs {
    #[command(flatten)]
    monitor: monitor::Args,
    /// Print the summary as JSON rows (table `monitor`) instead of a table;
    /// the output of --during's command then goes to standard error.
    #[arg(long)]
    json: bool,
    /// No live line per interval.
    #[arg(long, short)]
    quiet: bool,
    /// Run this command and sample while it runs; the monitor ends when it
    /// exits and exits with its status. Everything after --during is the
    /// command and its arguments.
    #[arg(long, value_name = "CMD", num_args = 1.., allow_hyphen_values = true)]
    during: Vec<String>,
}

/// Runs the monitor; returns 0, or the exit status of --during's command.
pub fn run(args: &MonitorArgs) -> Result<i32, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let terminate = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()).map_err(|e| e.to_string())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone()).map_err(|e| e.to_string())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, terminate.clone()).map_err(|e| e.to_string())?;
    // The first reading, before the command starts, checks what was asked for.
    let sampler = Monitor::new(&args.monitor, Kernel::default(), Instant::now())?;
    let mut child = match args.during.split_first() {
        Some((program, rest)) => Some(start(program, rest, args.json)?),
        None => None,
    };
    let mut status: Option<ExitStatus> = None;
    let mut should_stop = || {
        if let (Some(c), None) = (child.as_mut(), status) {
            status = c.try_wait().ok().flatten();
        }
        status.is_some() || stop.load(Ordering::Relaxed)
    };

    let bar = live_bar(args);
    let mut tell = |p: Progress<'_>| match p {
        Progress::Warning(w) => match &bar {
            Some(bar) => bar.println(format!("bulkwire monitor: {w}")),
            None => eprintln!("bulkwire monitor: {w}"),
        },
        Progress::Sample(line) if !args.quiet => match &bar {
            Some(bar) => {
                if let (Some(d), Some(len)) = (args.monitor.duration, bar.length()) {
                    bar.set_position((bar.elapsed().as_secs_f64() / d.as_secs_f64() * len as f64) as u64);
                }
                bar.set_message(line.to_string());
                bar.tick();
            }
            None => eprintln!("{line}"),
        },
        Progress::Sample(_) => {}
    };
    let outcome = monitor::run(sampler, &args.monitor, &mut should_stop, &mut tell);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    crate::measure::Format { json: args.json, csv: false }.print(&outcome.report, monitor::table);
    if !outcome.files.is_empty() {
        eprintln!("wrote {}", outcome.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    for e in &outcome.errors {
        eprintln!("bulkwire monitor: {e}");
    }
    let failed = if outcome.errors.is_empty() { 0 } else { 1 };
    let Some(mut c) = child else { return Ok(failed) };
    let status = match status {
        Some(s) => s,
        None => {
            if terminate.load(Ordering::Relaxed) {
                // SAFETY: kill(2) on the child we started and have not reaped.
                unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            } else {
                eprintln!("bulkwire monitor: sampling over; waiting for {} to exit", args.during[0]);
            }
            c.wait().map_err(|e| format!("waiting for {}: {e}", args.during[0]))?
        }
    };
    // The command's failure first; else the monitor's own.
    match status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)) {
        0 => Ok(failed),
        code => Ok(code),
    }
}

/// Starts --during's command; with --json its standard output goes to
/// standard error, so that standard output stays JSON.
fn start(program: &str, rest: &[String], json: bool) -> Result<Child, String> {
    let mut command = Command::new(program);
    command.args(rest);
    if json {
        let stderr = std::io::stderr().as_fd().try_clone_to_owned().map_err(|e| e.to_string())?;
        command.stdout(Stdio::from(stderr));
    }
    command.spawn().map_err(|e| format!("--during: cannot start {program}: {e}"))
}

/// A bar over --for (a spinner without it) carrying the live line, where
/// standard error is a terminal; elsewhere the lines are printed.
fn live_bar(args: &MonitorArgs) -> Option<ProgressBar> {
    if args.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match args.monitor.duration {
        Some(_) => {
            ProgressBar::new(1000).with_style(ProgressStyle::with_template("{bar:20} {msg}").expect("valid template"))
        }
        None => ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template")),
    };
    Some(bar)
}
