//! The transport between a benchmark's processes on one host, chosen by
//! `--transport` (`bench pingpong`, `bench bw`, `bench total-exchange`,
//! `bench put`): bulkwire's shared-memory path or UDP (`BULKWIRE_SHM=1` or
//! `0` in the ranks' environment), and Open MPI's shared memory or TCP
//! beside it.
//!
//! bulkwire's rows say in `what` the transport the runtime reached the
//! measured peer by (`Runtime::transport`), and in `requested_transport`
//! the one the job asked for: a job that asked for shared memory but ran
//! over UDP says so.

use bulkwire_runtime::{Runtime, Transport};
use serde::{Deserialize, Serialize};

use crate::mpi::MpiTransport;
use crate::rows::{Report, Row};

/// Turns bulkwire's shared-memory path between processes of one host on
/// (`1`, or unset) or off (`0`).
pub const SHM: &str = bulkwire_runtime::SHM;

/// The column of bulkwire's rows that names the transport the job asked for.
pub const REQUESTED: &str = "requested_transport";

/// The column that names the transport a row was measured over, where its
/// `what` names something else (the algorithm of `bench bcast`).
pub const TRANSPORT: &str = "transport";

/// What `--transport` takes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// bulkwire with BULKWIRE_SHM=1, Open MPI over its shared memory.
    Shm,
    /// bulkwire with BULKWIRE_SHM=0, Open MPI over TCP.
    Udp,
    /// Both, one bulkwire job after the other.
    Both,
}

/// `--transport`, shared by the benchmarks between two or more processes.
#[derive(clap::Args, Debug, Clone, Default, Serialize, Deserialize)]
pub struct TransportArgs {
    /// Which transport joins the processes: shm (bulkwire's shared memory,
    /// BULKWIRE_SHM=1; Open MPI's btl vader or sm), udp (BULKWIRE_SHM=0;
    /// Open MPI over TCP) or both (bulkwire's job twice). By default both on
    /// this machine, udp with --hosts.
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    pub transport: Option<Choice>,
    /// Set by the launching process in every job after the first: the
    /// references that do not depend on bulkwire's transport (raw UDP and
    /// TCP) are measured in the first job only.
    #[arg(skip)]
    #[serde(default)]
    pub references_done: bool,
}

impl TransportArgs {
    /// The choice, or the default where the ranks run (`remote`: on hosts
    /// given with --hosts).
    fn choice(&self, remote: bool) -> Choice {
        self.transport.unwrap_or(if remote { Choice::Udp } else { Choice::Both })
    }

    /// The transports bulkwire's jobs ask for, one job each, in order.
    pub fn jobs(&self, remote: bool) -> Vec<Transport> {
        match self.choice(remote) {
            Choice::Shm => vec![Transport::Shm],
            Choice::Udp => vec![Transport::Udp],
            Choice::Both => vec![Transport::Shm, Transport::Udp],
        }
    }

    /// The spec of one of those jobs: its transport fixed, and whether it
    /// measures the references (the first job does).
    pub fn for_job(&self, transport: Transport, first: bool) -> TransportArgs {
        let transport = Some(match transport {
            Transport::Shm => Choice::Shm,
            Transport::Udp => Choice::Udp,
        });
        TransportArgs { transport, references_done: !first }
    }

    /// The transports of the Open MPI reference beside the jobs: shared
    /// memory where bulkwire asks for its own, TCP where it asks for UDP.
    /// Shared memory joins the processes of one host only.
    pub fn mpi(&self, remote: bool) -> Vec<MpiTransport> {
        match self.choice(remote) {
            _ if remote => vec![MpiTransport::Tcp],
            Choice::Shm => vec![MpiTransport::Shm],
            Choice::Udp => vec![MpiTransport::Tcp],
            Choice::Both => vec![MpiTransport::Shm, MpiTransport::Tcp],
        }
    }

    /// The transport this job asked for: its spec's, or else what its
    /// environment says (BULKWIRE_SHM=0 is UDP, anything else shared memory).
    pub fn requested(&self) -> Transport {
        match self.transport {
            Some(Choice::Shm) => Transport::Shm,
            Some(Choice::Udp) => Transport::Udp,
            Some(Choice::Both) | None => match std::env::var(SHM).as_deref() {
                Ok("0") => Transport::Udp,
                _ => Transport::Shm,
            },
        }
    }

    /// The value of BULKWIRE_SHM that asks for `transport`.
    pub fn env_value(transport: Transport) -> &'static str {
        match transport {
            Transport::Shm => "1",
            Transport::Udp => "0",
        }
    }
}

/// How this process reaches each of `peers`, as rows name it: `shm` or
/// `udp` where all agree, `shm+udp` where some are reached each way.
pub(crate) fn reached(runtime: &Runtime, peers: impl IntoIterator<Item = u32>) -> &'static str {
    let (mut shm, mut udp) = (false, false);
    for peer in peers {
        match runtime.transport(peer) {
            Transport::Shm => shm = true,
            Transport::Udp => udp = true,
        }
    }
    match (shm, udp) {
        (true, true) => "shm+udp",
        (true, false) => Transport::Shm.as_str(),
        _ => Transport::Udp.as_str(),
    }
}

/// The transport a row was measured over: its [`TRANSPORT`] column, or
/// else its `what` or the first part of it (`udp, latin, pacing on`).
pub fn of_row(row: &Row) -> &str {
    row.text(TRANSPORT).unwrap_or_else(|| row.what.split(", ").next().unwrap_or_default())
}

/// A note for each job of `rows` that ran over another transport than it
/// asked for.
pub(crate) fn notes(rows: &[Row]) -> Vec<String> {
    let mut notes = Vec::new();
    for row in rows.iter().filter(|r| r.source == "bulkwire") {
        let Some(requested) = row.text(REQUESTED) else { continue };
        let note = match requested {
            "shm" => format!("bulkwire's job asked for shm ({SHM}=1) and ran over {}", of_row(row)),
            _ => format!("bulkwire's job asked for {requested} ({SHM}=0) and ran over {}", of_row(row)),
        };
        if of_row(row) != requested && !notes.contains(&note) {
            notes.push(note);
        }
    }
    notes
}

/// The label of a bulkwire job's column or rows in a table: the transport
/// it ran over, and the one it asked for where they differ.
pub(crate) fn label(row: &Row) -> String {
    match row.text(REQUESTED) {
        Some(requested) if requested != of_row(row) => format!("{} (asked {requested})", of_row(row)),
        _ => of_row(row).to_string(),
    }
}

/// bulkwire's rows among `rows`, a list per job (per requested transport),
/// in the order the jobs ran.
pub(crate) fn jobs<'a>(rows: &[&'a Row]) -> Vec<Vec<&'a Row>> {
    let mut jobs: Vec<Vec<&Row>> = Vec::new();
    for &row in rows.iter().filter(|r| r.source == "bulkwire") {
        match jobs.iter_mut().find(|job| job[0].text(REQUESTED) == row.text(REQUESTED)) {
            Some(job) => job.push(row),
            None => jobs.push(vec![row]),
        }
    }
    jobs
}

/// The lines under a table's title that say what its transports are: the
/// setting of each bulkwire job, where the references ran, and the btl of
/// each Open MPI run.
pub(crate) fn legend(report: &Report, bench: &str) -> String {
    let rows: Vec<&Row> = report.table(bench).collect();
    let jobs = jobs(&rows);
    let mut o = String::new();
    let settings: Vec<String> = jobs
        .iter()
        .filter_map(|job| {
            let value = match job[0].text(REQUESTED)? {
                "udp" => 0,
                _ => 1,
            };
            Some(format!("bulkwire {}: {SHM}={value}", label(job[0])))
        })
        .collect();
    if !settings.is_empty() {
        o.push_str(&format!(
            "# {} (each named by the transport its runtime reached the peer by)\n",
            settings.join("; ")
        ));
    }
    let raw: Vec<&&Row> = rows.iter().filter(|r| r.source == "udp" || r.source == "tcp").collect();
    if jobs.len() > 1 && !raw.is_empty() {
        // References that belong to one job's transport say which.
        let mut asked: Vec<&str> = raw.iter().filter_map(|r| r.text(REQUESTED)).collect();
        asked.dedup();
        match asked.is_empty() {
            true => o.push_str("# raw udp and tcp: measured in the first job\n"),
            false => o.push_str(&format!("# raw udp: measured in the job asking for {}\n", asked.join(", "))),
        }
    }
    let mut btls: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.source == "mpi") {
        let btl = format!("open mpi {}: btl {}", of_row(r), r.text("btl").unwrap_or("?"));
        if !btls.contains(&btl) {
            btls.push(btl);
        }
    }
    if !btls.is_empty() {
        o.push_str(&format!("# {}\n", btls.join("; ")));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choose(transport: Option<Choice>) -> TransportArgs {
        TransportArgs { transport, references_done: false }
    }

    #[test]
    fn both_on_one_host_and_udp_across_hosts_by_default() {
        assert_eq!(choose(None).jobs(false), [Transport::Shm, Transport::Udp]);
        assert_eq!(choose(None).jobs(true), [Transport::Udp]);
        assert_eq!(choose(None).mpi(false), [MpiTransport::Shm, MpiTransport::Tcp]);
        assert_eq!(choose(None).mpi(true), [MpiTransport::Tcp]);
        assert_eq!(choose(Some(Choice::Shm)).jobs(true), [Transport::Shm]);
        assert_eq!(choose(Some(Choice::Shm)).mpi(false), [MpiTransport::Shm]);
        assert_eq!(choose(Some(Choice::Shm)).mpi(true), [MpiTransport::Tcp]);
        assert_eq!(choose(Some(Choice::Udp)).mpi(false), [MpiTransport::Tcp]);
    }

    #[test]
    fn a_job_is_given_its_transport_and_only_the_first_measures_the_references() {
        let both = choose(Some(Choice::Both));
        let first = both.for_job(Transport::Shm, true);
        let second = both.for_job(Transport::Udp, false);
        assert_eq!((first.requested(), first.references_done), (Transport::Shm, false));
        assert_eq!((second.requested(), second.references_done), (Transport::Udp, true));
        assert_eq!(TransportArgs::env_value(Transport::Shm), "1");
        assert_eq!(TransportArgs::env_value(Transport::Udp), "0");
    }

    #[test]
    fn a_job_that_ran_over_another_transport_says_so() {
        let row = |what: &str, requested: &str| Row::new("x", "bulkwire", what, 2).with(REQUESTED, requested);
        let rows = [row("udp", "shm"), row("udp", "shm"), row("udp, empty sync", "udp"), row("shm", "shm")];
        assert_eq!(notes(&rows), ["bulkwire's job asked for shm (BULKWIRE_SHM=1) and ran over udp"]);
        assert_eq!(label(&rows[0]), "udp (asked shm)");
        assert_eq!(label(&rows[2]), "udp");
        assert_eq!(of_row(&rows[2]), "udp");
        let refs: Vec<&Row> = rows.iter().collect();
        let jobs = jobs(&refs);
        assert_eq!(jobs.iter().map(Vec::len).collect::<Vec<_>>(), [3, 1]);
    }
}
