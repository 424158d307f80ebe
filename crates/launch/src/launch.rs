//! `bulkwire run`: starts the processes of a job on this machine, meets them
//! at a rendezvous, forwards their output and input, and stops every one of
//! them when one fails, hangs or the user interrupts.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bulkwire_runtime::rendezvous::{read_msg, write_msg, PeerReport, ToLauncher, ToRank};
use bulkwire_runtime::{mark_control, SocketOptions};
use bulkwire_runtime::{new_job_id, new_key, JOB, KEY, LOCAL_SIZE, PATHS, RANK, RENDEZVOUS, SIZE};
use bulkwire_wire::JobKey;

/// A rank that sends no heartbeat for this long is declared hung.
const HUNG_AFTER: Duration = Duration::from_secs(3);
/// After the order to stop, ranks still running are killed after this.
const GRACE: Duration = Duration::from_secs(1);

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of processes.
    #[arg(short = 'n', long = "np", default_value_t = 1)]
    pub ranks: u32,
    /// Prefix every line of output with the rank that wrote it.
    #[arg(long)]
    pub tag_output: bool,
    /// Give each rank a pseudo-terminal as its standard output, so that C's
    /// stdio flushes every line instead of buffering what goes to a pipe:
    /// output printed just before a crash or abort() is not lost. Ranks
    /// started on this machine only.
    #[arg(long)]
    pub unbuffered: bool,
    /// Address of the rendezvous; the ranks' sockets bind to the interface
    /// that reaches it. Loopback by default; with hosts, the address the
    /// first host reaches this machine by.
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
    /// Start the ranks on these hosts over ssh: comma-separated names, each
    /// optionally `name:slots` (ranks fill each host's slots in turn).
    #[arg(long, conflicts_with = "hostfile")]
    pub hosts: Option<String>,
    /// Like --hosts, from a file: one `host [slots=N]` per line (Open MPI's format).
    #[arg(long)]
    pub hostfile: Option<std::path::PathBuf>,
    /// The remote shell command for --hosts (split at spaces), e.g.
    /// `ssh -p 2222`. The job key goes to it on standard input, never on a
    /// command line.
    #[arg(long, env = "BULKWIRE_SSH", default_value = "ssh")]
    pub ssh: String,
    /// Which path class carries the job's data: ordinary (best effort),
    /// premium (DSCP EF), or adaptive (premium while the ordinary path's
    /// latency is high). As BULKWIRE_PATHS; by default adaptive where the
    /// premium path is distinct (across hosts), ordinary on one host.
    #[arg(long, value_enum)]
    pub paths: Option<PathsChoice>,
    /// Pace every sender under Warp rate control (seed 003), so that many
    /// senders into one congested receiver or port share it instead of
    /// overflowing it. As BULKWIRE_RATE_CONTROL.
    #[arg(long, value_enum)]
    pub rate_control: Option<RateChoice>,
    /// The capacity of the bottleneck the senders share, as tc writes rates
    /// (100mbit, 1gbit); Warp's senders never exceed it. As
    /// BULKWIRE_WARP_CAPACITY; by default the speed of the job's interface,
    /// or 1gbit.
    #[arg(long, value_name = "RATE", value_parser = parse_capacity)]
    pub warp_capacity: Option<String>,
    /// How processes of the job on one host reach each other: through
    /// shared memory (`on`, the default) or over UDP, as processes on
    /// different hosts do (`off`). As BULKWIRE_SHM.
    #[arg(long, value_enum)]
    pub shm: Option<ShmChoice>,
    /// Bind each rank on this machine to a core (`core`), or let the
    /// scheduler move them (`none`). By default `core`: a core of its own
    /// for each rank when they fit on the cores this command may use, as
    /// Open MPI does (two spinning ranks the scheduler put on one core pass
    /// every message by a context switch: 8 B half round trip through
    /// shared memory about 3.6 us so, 0.8 us on cores of their own); where
    /// they outnumber those cores, rank r on the (r mod n)th, as many on
    /// each (a BSP total exchange of 1 KiB a pair among 8 ranks on 2
    /// cores, eight alternating pairs: median 38.2 us bound, every run
    /// near 40; 55.8 left to the scheduler, the runs in modes of about 40,
    /// 55 and 75 us).
    #[arg(long = "bind-to", value_enum)]
    pub bind_to: Option<BindChoice>,
    /// Say which paths the job's data takes, and when a pair's data changes
    /// path (BULKWIRE_VERBOSE=1 in every rank).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// At the end, print every rank's traffic to every peer on standard
    /// error: data and control by path, switches, retransmissions, probes.
    #[arg(long)]
    pub stats: bool,
    /// Write the same statistics to this file as JSON rows (docs/BENCHMARKS.md).
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<std::path::PathBuf>,
    /// Who starts the processes: this machine (`local`), or an engine the
    /// cluster already has (`srun`, Open MPI's or MPICH's `mpirun`), which
    /// then handles placement and output.
    #[arg(long, value_enum, default_value_t = Engine::Local)]
    pub launcher: Engine,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

impl Args {
    /// A job of `ranks` processes on this machine, untagged, on loopback.
    pub fn local(ranks: u32, command: Vec<String>) -> Args {
        Args {
            ranks,
            tag_output: false,
            unbuffered: false,
            paths: None,
            rate_control: None,
            warp_capacity: None,
            shm: None,
            bind_to: None,
            verbose: false,
            stats: false,
            stats_json: None,
            bind: None,
            hosts: None,
            hostfile: None,
            ssh: "ssh".into(),
            launcher: Engine::Local,
            command,
        }
    }
}

impl Args {
    /// The job's settings given as flags, for every rank's environment.
    fn settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = Vec::new();
        if let Some(paths) = self.paths {
            settings.push((PATHS, format!("{paths:?}").to_ascii_lowercase()));
        }
        if let Some(choice) = self.rate_control {
            settings.push((bulkwire_runtime::rate::RATE_CONTROL, format!("{choice:?}").to_ascii_lowercase()));
        }
        if let Some(capacity) = &self.warp_capacity {
            settings.push((bulkwire_runtime::rate::CAPACITY, capacity.clone()));
        }
        if let Some(shm) = self.shm {
            settings.push((bulkwire_runtime::SHM, if shm == ShmChoice::On { "1" } else { "0" }.to_string()));
        }
        if self.verbose {
            settings.push(("BULKWIRE_VERBOSE", "1".to_string()));
        }
        if self.stats || self.stats_json.is_some() {
            settings.push(("BULKWIRE_STATS", "1".to_string()));
        }
        settings
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindChoice {
    Core,
    None,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmChoice {
    On,
    Off,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateChoice {
    Off,
    Warp,
}

/// Checks a capacity at the command line, so that a typo is not found by
/// every rank.
fn parse_capacity(text: &str) -> Result<String, String> {
    bulkwire_runtime::rate::parse_rate(text).map(|_| text.trim().to_string())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathsChoice {
    Ordinary,
    Premium,
    Adaptive,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Local,
    Srun,
    Mpirun,
}

enum Ev {
    /// A process this launcher started ended (a rank, or the engine).
    Exited {
        process: usize,
        status: ExitStatus,
    },
    Joined {
        rank: u32,
        stream: TcpStream,
    },
    Message {
        rank: u32,
        msg: ToLauncher,
    },
    Disconnected {
        rank: u32,
    },
    Stranger(String),
    Signal(i32),
}

struct Failure {
    code: i32,
}

/// Runs the job; returns the exit code of `bulkwire run`.
pub fn run(args: &Args) -> Result<i32, String> {
    run_job(args, None)
}

/// Runs the job and returns, besides its exit code, what rank 0 wrote on
/// its standard output (the ranks of a benchmark report through it).
pub fn run_capturing_rank_0(args: &Args) -> Result<(i32, Vec<u8>), String> {
    let captured = Arc::new(Mutex::new(Vec::new()));
    let code = run_job(args, Some(Captured(captured.clone())))?;
    let bytes = std::mem::take(&mut *captured.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((code, bytes))
}

/// A writer into memory shared with the launcher.
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn run_job(args: &Args, mut capture: Option<Captured>) -> Result<i32, String> {
    if args.ranks == 0 {
        return Err("-n must be at least 1".into());
    }
    let hosts = hosts(args)?;
    if hosts.is_some() && args.launcher != Engine::Local {
        return Err("--hosts and --hostfile start ranks over ssh; they do not go with --launcher".into());
    }
    if args.unbuffered && (hosts.is_some() || args.launcher != Engine::Local) {
        return Err("--unbuffered gives terminals to ranks this machine starts itself; elsewhere line-buffer \
                    the program's output (setvbuf, stdbuf -oL, or srun's own --unbuffered)"
            .into());
    }
    let bind = match (args.bind, &hosts) {
        (Some(ip), _) => ip,
        (None, Some(hosts)) => crate::hosts::local_address_towards(hosts)?,
        (None, None) => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    let key = new_key();
    let job = new_job_id();
    let listener = TcpListener::bind((bind, 0)).map_err(|e| format!("cannot open the rendezvous on {bind}: {e}"))?;
    let rendezvous = listener.local_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = channel();

    let signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
        .map_err(|e| format!("cannot handle signals: {e}"))?;
    spawn_signal_thread(signals, tx.clone());
    spawn_accept_thread(listener, key.clone(), job, args.ranks, tx.clone());

    let mut children = Vec::new();
    let mut outputs = Vec::new();
    let commands: Vec<(Command, String)> = match (&hosts, args.launcher) {
        (Some(hosts), _) => {
            let placement = crate::hosts::place(hosts, args.ranks);
            (0..args.ranks)
                .map(|r| {
                    let host = &hosts[placement[r as usize]].name;
                    let on_host = placement.iter().filter(|&&h| h == placement[r as usize]).count() as u32;
                    let remote = RemoteRank { rank: r, local_size: on_host, job, rendezvous };
                    Ok((ssh_command(args, host, &remote)?, format!("rank {r} on {host}")))
                })
                .collect::<Result<_, String>>()?
        }
        (None, Engine::Local) => {
            let cores = match args.bind_to {
                Some(BindChoice::None) => None,
                _ => usable_cores().filter(|c| !c.is_empty()),
            };
            (0..args.ranks)
                .map(|r| {
                    let mut cmd = rank_command(args, r);
                    if let Some(cores) = &cores {
                        bind_to_core(&mut cmd, cores[r as usize % cores.len()]);
                        cmd.env(bulkwire_runtime::CORES, cores.len().to_string());
                    }
                    (cmd, format!("rank {r}"))
                })
                .collect()
        }
        (None, engine) => vec![(engine_command(args, engine)?, engine_name(engine).to_string())],
    };
    let mut labels = Vec::new();
    for (index, (mut cmd, label)) in commands.into_iter().enumerate() {
        cmd.env(JOB, format!("{job:x}")).env(KEY, key.to_hex()).env(RENDEZVOUS, rendezvous.to_string());
        cmd.envs(args.settings());
        let terminal = match args.unbuffered {
            true => {
                let (master, slave) = terminal().map_err(|e| {
                    kill_all(&children, libc::SIGKILL);
                    format!("cannot open a terminal for {label}: {e}")
                })?;
                cmd.stdout(Stdio::from(slave));
                Some(std::fs::File::from(master))
            }
            false => None,
        };
        let mut child = spawn(cmd).map_err(|e| {
            kill_all(&children, libc::SIGKILL);
            format!("cannot start {label} ({:?}): {e}", args.command[0])
        })?;
        let prefix =
            if args.tag_output && args.launcher == Engine::Local { format!("[{index}] ") } else { String::new() };
        let out: Option<Box<dyn Read + Send>> = match terminal {
            Some(master) => Some(Box::new(master)),
            None => child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        };
        if let Some(out) = out {
            match capture.take().filter(|_| index == 0) {
                Some(into) => outputs.push(forward(out, into, prefix.clone())),
                None => outputs.push(forward(out, std::io::stdout(), prefix.clone())),
            }
        }
        if let Some(err) = child.stderr.take() {
            outputs.push(forward(err, std::io::stderr(), prefix));
        }
        if let Some(mut input) = child.stdin.take() {
            if hosts.is_some() {
                // The remote shell reads the key as its first line of input.
                let _ = writeln!(input, "{}", key.to_hex());
            }
            if index == 0 {
                forward_stdin(input);
            }
        }
        children.push(child.id());
        labels.push(label);
        spawn_wait_thread(child, index, tx.clone());
    }
    drop(tx);
    let local = args.launcher == Engine::Local;
    // What a rank printed to a pipe with C's stdio and had not flushed dies
    // with it: say so when one dies of a signal.
    let pipes = local && hosts.is_none() && !args.unbuffered;
    let (code, reports) = supervise(args.ranks, local, pipes, &children, &labels, &key, job, &rx);
    // A rank killed before every peer on its host had opened its
    // shared-memory file left the file's name behind: remove those of this
    // host (ranks unlink theirs within moments of the start otherwise).
    for leftover in bulkwire_runtime::shm_leftover_files(job) {
        let _ = std::fs::remove_file(leftover);
    }
    for t in outputs {
        let _ = t.join();
    }
    if args.stats {
        eprint!("{}", crate::stats::table(&reports));
    }
    if let Some(path) = &args.stats_json {
        std::fs::write(path, crate::stats::json(&reports, args.ranks))
            .map_err(|e| format!("cannot write the statistics to {}: {e}", path.display()))?;
    }
    Ok(code)
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Local => "local",
        Engine::Srun => "srun",
        Engine::Mpirun => "mpirun",
    }
}

/// The engine's command line. The job's variables travel in the
/// environment; only their names appear on the command line.
fn engine_command(args: &Args, engine: Engine) -> Result<Command, String> {
    let n = args.ranks.to_string();
    let mut cmd = Command::new(engine_name(engine));
    match engine {
        Engine::Local => unreachable!("local ranks are started one by one"),
        Engine::Srun => {
            cmd.args(["-n", &n, "--kill-on-bad-exit=1"]);
            if args.tag_output {
                cmd.arg("--label");
            }
        }
        Engine::Mpirun => {
            let version =
                Command::new("mpirun").arg("--version").output().map_err(|e| format!("cannot run mpirun: {e}"))?;
            let version =
                String::from_utf8_lossy(&version.stdout).into_owned() + &String::from_utf8_lossy(&version.stderr);
            if version.contains("Open MPI") || version.contains("OpenRTE") {
                cmd.args(["-np", &n, "--oversubscribe", "-x", JOB, "-x", KEY, "-x", RENDEZVOUS]);
                for (name, _) in args.settings() {
                    cmd.args(["-x", name]);
                }
                if args.tag_output {
                    cmd.arg("--tag-output");
                }
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } == 0 {
                    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                }
            } else {
                // MPICH's Hydra.
                let mut names = format!("{JOB},{KEY},{RENDEZVOUS}");
                for (name, _) in args.settings() {
                    names = format!("{names},{name}");
                }
                cmd.args(["-n", &n, "-genvlist", &names]);
                if args.tag_output {
                    cmd.arg("-prepend-rank");
                }
            }
        }
    }
    cmd.args(&args.command).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::piped());
    Ok(cmd)
}

fn hosts(args: &Args) -> Result<Option<Vec<crate::hosts::Host>>, String> {
    if let Some(list) = &args.hosts {
        return crate::hosts::parse_list(list).map(Some).map_err(|e| e.to_string());
    }
    let Some(path) = &args.hostfile else { return Ok(None) };
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the host file {}: {e}", path.display()))?;
    crate::hosts::parse_file(&path.display().to_string(), &text).map(Some).map_err(|e| e.to_string())
}

/// What a rank started over ssh is told on its command line (nothing secret).
struct RemoteRank {
    rank: u32,
    local_size: u32,
    job: u64,
    rendezvous: SocketAddr,
}

/// `ssh host sh -c '…'`: the remote shell reads the job key from its
/// standard input (so it appears on no command line, here or there), then
/// becomes the program with the job's variables set, in a directory of the
/// same name as ours if there is one.
fn ssh_command(args: &Args, host: &str, remote: &RemoteRank) -> Result<Command, String> {
    use crate::hosts::shell_quote;
    let mut ssh = args.ssh.split_whitespace();
    let program = ssh.next().ok_or("--ssh is empty")?;
    let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
    let mut script = format!(
        "cd {cwd} 2>/dev/null; IFS= read -r {KEY} || exit 1; export {KEY}; \
         exec env {JOB}={job:x} {RENDEZVOUS}={rendezvous} {RANK}={rank} {SIZE}={size} {LOCAL_SIZE}={local} \
         BULKWIRE_PARENT_DEATH=kill",
        cwd = shell_quote(&cwd),
        job = remote.job,
        rendezvous = remote.rendezvous,
        rank = remote.rank,
        size = args.ranks,
        local = remote.local_size,
    );
    // The job's settings (BULKWIRE_BSP_ORDER, BULKWIRE_PROFILE, …) go
    // along, as they do to local ranks; what the launcher sets per rank,
    // and the key, do not.
    for (name, value) in forwarded_settings(std::env::vars()) {
        script.push_str(&format!(" {name}={}", shell_quote(&value)));
    }
    for (name, value) in args.settings() {
        script.push_str(&format!(" {name}={}", shell_quote(&value)));
    }
    for word in &args.command {
        script.push(' ');
        script.push_str(&shell_quote(word));
    }
    let mut cmd = Command::new(program);
    cmd.args(ssh)
        .args(["-o", "BatchMode=yes", "-T", "--", host, "sh", "-c", &shell_quote(&script)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::piped());
    Ok(cmd)
}

/// The `BULKWIRE_*` variables of `vars` that a rank started over ssh should
/// see as a local rank would: all but the launcher's own per-rank ones and
/// the key (which travels on the standard input).
fn forwarded_settings(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    const OWN: [&str; 8] = [JOB, KEY, RENDEZVOUS, RANK, SIZE, LOCAL_SIZE, "BULKWIRE_PARENT_DEATH", "BULKWIRE_SSH"];
    vars.filter(|(name, _)| {
        name.starts_with("BULKWIRE_")
            && !OWN.contains(&name.as_str())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
    .collect()
}

fn rank_command(args: &Args, rank: u32) -> Command {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env(RANK, rank.to_string())
        .env(SIZE, args.ranks.to_string())
        .env(LOCAL_SIZE, args.ranks.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if rank == 0 { Stdio::piped() } else { Stdio::null() });
    cmd
}

/// The cores this process may run on, in order; `None` if unknown.
fn usable_cores() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set filled above.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Makes the process `cmd` starts run on `core` only (its threads too).
fn bind_to_core(cmd: &mut Command, core: usize) {
    // SAFETY: sched_setaffinity is a system call, safe between fork and
    // exec; the set is built before the fork.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(core, &mut set) };
    unsafe {
        cmd.pre_exec(move || {
            // A binding refused (a container's cpuset changed meanwhile)
            // leaves the rank unbound, not unstarted.
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // No orphans: the rank dies with the launcher, however it dies.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Copies a rank's output to ours a whole line at a time, so that lines of
/// ranks that write at once never mix (a program whose stdout is
/// unbuffered, Python's under PYTHONUNBUFFERED say, writes a line in
/// pieces); `\r` ends a line too, for progress bars. A piece without an end
/// waits for the rest, unless it grows past 64 KiB.
fn forward(
    from: impl Read + Send + 'static,
    to: impl Write + Send + 'static,
    prefix: String,
) -> thread::JoinHandle<()> {
    const LONGEST: usize = 64 << 10;
    thread::spawn(move || {
        let mut to = to;
        let mut reader = BufReader::with_capacity(LONGEST, from);
        let mut pending: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        loop {
            let chunk = match reader.fill_buf() {
                Ok([]) | Err(_) => break,
                Ok(chunk) => chunk,
            };
            let n = chunk.len();
            pending.extend_from_slice(chunk);
            reader.consume(n);
            let whole = match pending.iter().rposition(|&b| b == b'\n' || b == b'\r') {
                Some(i) => i + 1,
                None if pending.len() >= LONGEST => pending.len(),
                None => continue,
            };
            out.clear();
            for line in pending[..whole].split_inclusive(|&b| b == b'\n' || b == b'\r') {
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(line);
            }
            pending.drain(..whole);
            if to.write_all(&out).and_then(|_| to.flush()).is_err() {
                return;
            }
        }
        if !pending.is_empty() {
            out.clear();
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(&pending);
            let _ = to.write_all(&out).and_then(|_| to.flush());
        }
    })
}

fn forward_stdin(mut to: std::process::ChildStdin) {
    // Not joined: it may block on our stdin until the job ends.
    thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut to);
    });
}

fn spawn_wait_thread(mut child: Child, process: usize, tx: Sender<Ev>) {
    thread::spawn(move || {
        if let Ok(status) = child.wait() {
            let _ = tx.send(Ev::Exited { process, status });
        }
    });
}

fn spawn_signal_thread(mut signals: signal_hook::iterator::Signals, tx: Sender<Ev>) {
    thread::spawn(move || {
        for signal in signals.forever() {
            if tx.send(Ev::Signal(signal)).is_err() {
                break;
            }
        }
    });
}

fn spawn_accept_thread(listener: TcpListener, key: JobKey, job: u64, size: u32, tx: Sender<Ev>) {
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (key, tx) = (key.clone(), tx.clone());
            thread::spawn(move || serve_rank(stream, &key, job, size, &tx));
        }
    });
}

/// By rank, how many ranks run on its kernel: those that named the same
/// one (a rank that named none counts itself alone).
fn on_each_kernel(kernels: &[String]) -> Vec<u32> {
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for k in kernels.iter().filter(|k| !k.is_empty()) {
        *counts.entry(k.as_str()).or_default() += 1;
    }
    kernels.iter().map(|k| counts.get(k.as_str()).copied().unwrap_or(1)).collect()
}

/// Why a job cannot run if its ranks speak different wire formats (each
/// would drop the others' every datagram, and the job would hang): ranks
/// of different builds of bulkwire, say one per host.
fn mixed_wire(wires: &[u8]) -> Option<String> {
    let first = *wires.first()?;
    if wires.iter().all(|&w| w == first) {
        return None;
    }
    let mut by_version: Vec<(u8, Vec<usize>)> = Vec::new();
    for (rank, &w) in wires.iter().enumerate() {
        match by_version.iter_mut().find(|(v, _)| *v == w) {
            Some((_, ranks)) => ranks.push(rank),
            None => by_version.push((w, vec![rank])),
        }
    }
    let groups: Vec<String> = by_version
        .iter()
        .map(|(v, ranks)| {
            let shown: Vec<String> = ranks.iter().take(8).map(|r| r.to_string()).collect();
            let more = if ranks.len() > 8 { format!(" and {} more", ranks.len() - 8) } else { String::new() };
            let version =
                if *v == 0 { "a version from before ranks said theirs".to_string() } else { format!("version {v}") };
            let who = if ranks.len() == 1 { "rank" } else { "ranks" };
            format!("{who} {}{more}: {version}", shown.join(", "))
        })
        .collect();
    Some(format!(
        "the ranks speak different wire formats ({}), so they would drop each other's datagrams: run one build of bulkwire on every host",
        groups.join("; ")
    ))
}

/// Reads one rank's control connection: its hello, then its messages.
fn serve_rank(stream: TcpStream, key: &JobKey, job: u64, size: u32, tx: &Sender<Ev>) {
    let _ = stream.set_nodelay(true);
    // The launcher's acknowledgements travel in the premium class too (a
    // bad BULKWIRE_PREMIUM_DSCP is the ranks' error to report).
    mark_control(&stream, &SocketOptions::from_env().unwrap_or_default());
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let rank = match read_msg::<ToLauncher>(&mut reader, key) {
        Ok(Some(hello @ ToLauncher::Hello { job: j, rank, size: s, .. })) if j == job && s == size && rank < size => {
            let _ = tx.send(Ev::Message { rank, msg: hello });
            let _ = tx.send(Ev::Joined { rank, stream });
            rank
        }
        Ok(other) => {
            let _ = tx.send(Ev::Stranger(format!("a connection to the rendezvous sent {other:?}")));
            return;
        }
        Err(e) => {
            let _ = tx.send(Ev::Stranger(e.to_string()));
            return;
        }
    };
    let _ = reader.get_ref().set_read_timeout(None);
    loop {
        match read_msg::<ToLauncher>(&mut reader, key) {
            Ok(Some(msg)) => {
                if tx.send(Ev::Message { rank, msg }).is_err() {
                    return;
                }
            }
            Ok(None) | Err(_) => {
                let _ = tx.send(Ev::Disconnected { rank });
                return;
            }
        }
    }
}

fn broadcast(streams: &mut HashMap<u32, TcpStream>, key: &JobKey, msg: &ToRank) {
    for s in streams.values_mut() {
        // A rank that is gone is noticed by its reader.
        let _ = write_msg(s, key, msg);
    }
}

/// Stops the job, once: tells every rank why, and kills what is still
/// running after a grace period.
/// How long a failed rank's exit waits for what its control connection
/// still carries (see `exit_reasons` in `supervise`).
const EXIT_WAIT: Duration = Duration::from_millis(200);

fn fail(
    failure: &mut Option<Failure>,
    kill_at: &mut Option<Instant>,
    streams: &mut HashMap<u32, TcpStream>,
    key: &JobKey,
    reason: String,
    code: i32,
) {
    if failure.is_some() {
        return;
    }
    eprintln!("bulkwire run: {reason}; stopping the job");
    *failure = Some(Failure { code });
    broadcast(streams, key, &ToRank::Abort { reason });
    *kill_at = Some(Instant::now() + GRACE);
}

fn kill_all(pids: &[u32], signal: i32) {
    for &pid in pids {
        // SAFETY: kill(2) on a child we started; a stale pid is reaped only by us.
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }
}

/// How a process ended; `pipe`: its standard output was a pipe.
fn describe(status: &ExitStatus, pipe: bool) -> String {
    let sig = match (status.code(), status.signal()) {
        (Some(code), _) => return format!("exited with status {code}"),
        (None, Some(sig)) => sig,
        _ => return "ended".into(),
    };
    let how = match sig {
        libc::SIGABRT => format!("aborted (signal {sig}, SIGABRT)"),
        _ => format!("was killed by signal {sig} ({})", signal_name(sig)),
    };
    match pipe {
        true => format!(
            "{how}; its standard output was a pipe, so what it printed with C's stdio and had not flushed is \
             lost (bulkwire run --unbuffered flushes every line)"
        ),
        false => how,
    }
}

/// A pseudo-terminal (master, slave) whose output is passed on as written:
/// no "\r" added before "\n".
fn terminal() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two new descriptors; the null name, termios and
    // window size are allowed.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: a termios is plain data; tcgetattr fills it on success.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `slave` is a valid terminal descriptor.
    if unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    mode.c_oflag &= !libc::OPOST;
    mode.c_lflag &= !(libc::ECHO | libc::ICANON);
    // SAFETY: as above, with the mode read from it.
    if unsafe { libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((master, slave))
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        _ => "signal",
    }
}

fn code_of(status: &ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The launcher's main loop. `pids` are the processes this launcher
/// started: the ranks themselves (`local`), or one engine that starts them.
#[allow(clippy::too_many_arguments)]
fn supervise(
    size: u32,
    local: bool,
    pipes: bool,
    pids: &[u32],
    labels: &[String],
    key: &JobKey,
    job: u64,
    rx: &Receiver<Ev>,
) -> (i32, BTreeMap<u32, Vec<PeerReport>>) {
    let n = size as usize;
    let mut streams: HashMap<u32, TcpStream> = HashMap::new();
    let mut addrs: Vec<Option<(SocketAddr, SocketAddr)>> = vec![None; n];
    // Each rank's kernel, as it said (empty: unknown).
    let mut kernels: Vec<String> = vec![String::new(); n];
    let mut wires: Vec<u8> = vec![0; n];
    let mut last_seen = vec![Instant::now(); n];
    let mut finished = vec![false; n];
    let mut exited = vec![false; pids.len()];
    // A rank that failed usually says why on its control connection just
    // before it exits; its exit may reach this loop first. The exit's
    // reason waits for the connection's end (or EXIT_WAIT), so that the
    // rank's own word is the one given.
    let mut exit_reasons: Vec<Option<(String, i32, Instant)>> = vec![None; pids.len()];
    let mut table_sent = false;
    // The smallest datagram limit any rank reported.
    let mut max_datagram = usize::MAX;
    let mut failure: Option<Failure> = None;
    let mut kill_at: Option<Instant> = None;
    let mut reports = BTreeMap::new();

    while exited.iter().any(|e| !e) {
        let event = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match event {
            Some(Ev::Joined { rank, stream }) => {
                if streams.contains_key(&rank) || finished[rank as usize] {
                    let reason = format!("two processes claim rank {rank}");
                    fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                    continue;
                }
                last_seen[rank as usize] = Instant::now();
                streams.insert(rank, stream);
                if !table_sent && addrs.iter().all(Option::is_some) && streams.len() == n {
                    if let Some(reason) = mixed_wire(&wires) {
                        table_sent = true;
                        fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                        continue;
                    }
                    let peers: Vec<_> = addrs.iter().map(|a| a.expect("all joined")).collect();
                    let max_datagram = if max_datagram == usize::MAX { 0 } else { max_datagram };
                    let kernels = on_each_kernel(&kernels);
                    broadcast(&mut streams, key, &ToRank::Table { job, peers, max_datagram, kernels });
                    table_sent = true;
                }
            }
            Some(Ev::Message { rank, msg }) => {
                last_seen[rank as usize] = Instant::now();
                match msg {
                    ToLauncher::Hello { ordinary, premium, max_datagram: m, kernel, wire, .. } => {
                        addrs[rank as usize] = Some((ordinary, premium));
                        kernels[rank as usize] = kernel;
                        wires[rank as usize] = wire;
                        if m > 0 {
                            max_datagram = max_datagram.min(m);
                        }
                    }
                    ToLauncher::Heartbeat => {}
                    ToLauncher::Failed { reason } => {
                        fail(&mut failure, &mut kill_at, &mut streams, key, format!("rank {rank} failed: {reason}"), 1)
                    }
                    ToLauncher::Stats { peers } => {
                        reports.insert(rank, peers);
                    }
                    ToLauncher::Finished => {
                        finished[rank as usize] = true;
                        broadcast(&mut streams, key, &ToRank::PeerFinished { rank });
                        if finished.iter().all(|&f| f) {
                            broadcast(&mut streams, key, &ToRank::Release);
                        }
                    }
                }
            }
            Some(Ev::Disconnected { rank }) => {
                streams.remove(&rank);
                if let Some((reason, code, _)) = exit_reasons.get_mut(rank as usize).and_then(Option::take) {
                    fail(&mut failure, &mut kill_at, &mut streams, key, reason, code);
                }
                if !local && !finished[rank as usize] {
                    let reason = format!("rank {rank} left the job without finishing (it died or exited early)");
                    fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                }
            }
            Some(Ev::Stranger(why)) => eprintln!("bulkwire run: rejected a connection to the rendezvous: {why}"),
            Some(Ev::Exited { process, status }) => {
                exited[process] = true;
                let who = format!("{} (pid {})", labels[process], pids[process]);
                if !status.success() {
                    let reason = format!("{who} {}", describe(&status, pipes));
                    if local && streams.contains_key(&(process as u32)) {
                        exit_reasons[process] = Some((reason, code_of(&status), Instant::now() + EXIT_WAIT));
                    } else {
                        fail(&mut failure, &mut kill_at, &mut streams, key, reason, code_of(&status));
                    }
                } else if local {
                    let rank = process as u32;
                    streams.remove(&rank);
                    let joined = addrs[process].is_some();
                    if joined && !finished[process] {
                        let reason = format!("{who} exited without finishing its part of the job");
                        fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                    } else if !joined && addrs.iter().any(Option::is_some) && !table_sent {
                        let reason = format!("{who} exited before joining the job");
                        fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                    }
                } else if addrs.iter().any(Option::is_some) && !finished.iter().all(|&f| f) {
                    let reason = format!("{who} exited before every rank finished");
                    fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                }
            }
            Some(Ev::Signal(sig)) => {
                let reason = format!("interrupted by {}", signal_name(sig));
                fail(&mut failure, &mut kill_at, &mut streams, key, reason, 128 + sig);
                kill_all(pids, libc::SIGTERM);
            }
            None => {}
        }
        for waiting in exit_reasons.iter_mut().filter(|w| w.as_ref().is_some_and(|(_, _, at)| Instant::now() >= *at)) {
            let (reason, code, _) = waiting.take().expect("filtered");
            fail(&mut failure, &mut kill_at, &mut streams, key, reason, code);
        }
        for rank in 0..n {
            let alive = streams.contains_key(&(rank as u32)) && !finished[rank];
            if alive && last_seen[rank].elapsed() > HUNG_AFTER {
                let reason = format!("rank {rank} stopped responding for {HUNG_AFTER:?}: hung or stopped");
                fail(&mut failure, &mut kill_at, &mut streams, key, reason, 1);
                if local {
                    kill_all(&pids[rank..rank + 1], libc::SIGKILL);
                }
                last_seen[rank] = Instant::now();
            }
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            // The engine, told to stop, takes its tasks with it.
            let alive: Vec<u32> = (0..pids.len()).filter(|&p| !exited[p]).map(|p| pids[p]).collect();
            kill_all(&alive, if local { libc::SIGKILL } else { libc::SIGTERM });
            kill_at = Some(Instant::now() + GRACE);
        }
    }
    // The last processes' exits: no later word can come.
    for (reason, code, _) in exit_reasons.into_iter().flatten() {
        fail(&mut failure, &mut kill_at, &mut streams, key, reason, code);
    }
    (failure.map_or(0, |f| f.code), reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_of_different_wire_formats_are_named() {
        assert_eq!(mixed_wire(&[3, 3, 3]), None);
        assert_eq!(mixed_wire(&[]), None);
        let why = mixed_wire(&[3, 2, 3, 0]).unwrap();
        assert!(
            why.contains("ranks 0, 2: version 3; rank 1: version 2; rank 3: a version from before ranks said theirs"),
            "{why}"
        );
        let many = mixed_wire(&[[3].as_slice(), &[2; 10]].concat()).unwrap();
        assert!(many.contains("ranks 1, 2, 3, 4, 5, 6, 7, 8 and 2 more: version 2"), "{many}");
    }

    #[test]
    fn each_rank_hears_how_many_ranks_share_its_kernel() {
        let kernels: Vec<String> = ["a", "b", "a", "", "a", ""].iter().map(|k| k.to_string()).collect();
        // A rank that named no kernel counts itself alone, even beside
        // another that named none.
        assert_eq!(on_each_kernel(&kernels), [3, 1, 3, 1, 3, 1]);
        assert!(on_each_kernel(&[]).is_empty());
    }

    #[test]
    fn settings_go_to_ranks_over_ssh_but_not_the_key_nor_per_rank_values() {
        let vars = [
            ("BULKWIRE_BSP_ORDER", "pid"),
            ("BULKWIRE_PROFILE", "/tmp/a b"),
            (KEY, "secret"),
            (RANK, "3"),
            (JOB, "1f"),
            ("BULKWIRE_SSH", "ssh -p 22"),
            ("BULKWIRE_BAD-NAME", "x"),
            ("HOME", "/root"),
        ];
        let got = forwarded_settings(vars.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["BULKWIRE_BSP_ORDER", "BULKWIRE_PROFILE"]);
        assert_eq!(got[1].1, "/tmp/a b");
    }
}
