//! `bulkwire run --stats`: every rank's traffic to every peer, as each rank
//! reported it when it finished.

use std::collections::BTreeMap;

use bulkwire_bench::rows::{Report, Row};
use bulkwire_runtime::rendezvous::PeerReport;

/// The statistics as a table for people.
pub fn table(reports: &BTreeMap<u32, Vec<PeerReport>>) -> String {
    let mut o = String::from(
        "bulkwire run: traffic by rank and peer: data datagrams by path, feedback kB by kind (headers \
         included), switches of the rank's data toward the peer; asked: data started on the premium path \
         after a silence until the peer answered a probe\n",
    );
    let header = [
        "to", "ordinary", "ord MB", "premium", "prem MB", "prem %", "acks", "prods", "lstat", "probes", "clock",
        "switches", "resent", "probes", "lost", "asked",
    ];
    let widths = [6, 10, 9, 10, 9, 7, 8, 8, 8, 8, 8, 9, 7, 7, 5, 6];
    let line = |cells: Vec<String>| -> String {
        let cells: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:>w$}")).collect();
        cells.join(" ") + "\n"
    };
    o.push_str(&line(header.iter().map(|h| h.to_string()).collect()));
    let warp = reports.values().flatten().any(|p| p.warp_bytes + p.warp_feedback_received > 0);
    for (rank, peers) in reports {
        for p in peers {
            let data = p.ordinary_data_bytes + p.premium_data_bytes;
            let share = if data == 0 { 0.0 } else { 100.0 * p.premium_data_bytes as f64 / data as f64 };
            let kb = |bytes: u64| format!("{:.1}", bytes as f64 / 1e3);
            o.push_str(&line(vec![
                format!("{rank}>{}", p.peer),
                p.ordinary_data_packets.to_string(),
                format!("{:.3}", p.ordinary_data_bytes as f64 / 1e6),
                p.premium_data_packets.to_string(),
                format!("{:.3}", p.premium_data_bytes as f64 / 1e6),
                format!("{share:.1}%"),
                kb(p.ack_bytes),
                kb(p.prod_bytes),
                kb(p.lstat_bytes),
                kb(p.probe_bytes),
                kb(p.clock_sync_bytes),
                format!("+{} -{}", p.switches_to_premium, p.switches_to_ordinary),
                p.retransmitted_packets.to_string(),
                p.probes_sent.to_string(),
                p.probes_lost.to_string(),
                p.confirmations.to_string(),
            ]));
        }
    }
    section(
        &mut o,
        reports,
        "shared memory (peers on the rank's host): messages and MB, messages read by the peer from the \
         rank's memory (one copy), wake-ups sent",
        &[("to", 6), ("messages", 10), ("MB", 9), ("one copy", 10), ("wake-ups", 9)],
        |p| p.shm_messages > 0,
        |p| {
            let mb = format!("{:.3}", p.shm_bytes as f64 / 1e6);
            vec![p.shm_messages.to_string(), mb, p.shm_single_copy.to_string(), p.shm_wakeups.to_string()]
        },
    );
    section(
        &mut o,
        reports,
        "shared memory read where it lies (BSP's puts and get replies on the host): MB the rank copied from \
         the peer's arena and from its stage",
        &[("from", 6), ("arena MB", 10), ("stage MB", 10)],
        |p| p.shm_arena_read_bytes + p.shm_stage_read_bytes > 0,
        |p| {
            let mb = |bytes: u64| format!("{:.3}", bytes as f64 / 1e6);
            vec![mb(p.shm_arena_read_bytes), mb(p.shm_stage_read_bytes)]
        },
    );
    section(
        &mut o,
        reports,
        "UDP reads and sends: datagrams to the peer that left in segmented sends (GSO); from the peer, \
         datagrams that came in coalesced reads (GRO), data datagrams read straight into the buffer of \
         the message they continue, and messages reassembled in the buffer of the receive that waited",
        &[("to", 6), ("segmented", 10), ("coalesced", 10), ("in place", 10), ("into recv", 10)],
        |p| p.offload_sent + p.offload_received + p.read_in_place + p.placed > 0,
        |p| {
            let counts = [p.offload_sent, p.offload_received, p.read_in_place, p.placed];
            counts.iter().map(u64::to_string).collect()
        },
    );
    section(
        &mut o,
        reports,
        "best-effort data from the peer, not resent: packets that never came (or came after a later one), \
         messages dropped for a piece missing",
        &[("from", 6), ("lost", 9), ("dropped", 9)],
        |p| p.best_effort_lost + p.best_effort_abandoned > 0,
        |p| vec![p.best_effort_lost.to_string(), p.best_effort_abandoned.to_string()],
    );
    if warp {
        section(
            &mut o,
            reports,
            "Warp rate control: feedback kB the rank returned to the peer, feedback datagrams it got \
             from the peer, datagrams to the peer that waited for the pacer",
            &[("to", 6), ("warp kB", 9), ("feedback", 9), ("paced", 9)],
            |_| true,
            |p| {
                let kb = format!("{:.1}", p.warp_bytes as f64 / 1e3);
                vec![kb, p.warp_feedback_received.to_string(), p.paced.to_string()]
            },
        );
    }
    o
}

/// A section of the table, where any pair has what `shown` looks for: a
/// title, a header of `columns` (name, width), and a line for each such
/// pair: the pair, then `cells`. The first column names the pair as the
/// first column's name says: `to` (rank>peer) or `from` (peer>rank).
fn section(
    o: &mut String,
    reports: &BTreeMap<u32, Vec<PeerReport>>,
    title: &str,
    columns: &[(&str, usize)],
    shown: impl Fn(&PeerReport) -> bool,
    cells: impl Fn(&PeerReport) -> Vec<String>,
) {
    if !reports.values().flatten().any(&shown) {
        return;
    }
    let line = |cells: Vec<String>| -> String {
        let cells: Vec<String> = cells.iter().zip(columns).map(|(c, (_, w))| format!("{c:>w$}")).collect();
        cells.join(" ") + "\n"
    };
    o.push_str(title);
    o.push('\n');
    o.push_str(&line(columns.iter().map(|(name, _)| name.to_string()).collect()));
    let from = columns[0].0 == "from";
    for (rank, peers) in reports {
        for p in peers.iter().filter(|p| shown(p)) {
            let pair = if from { format!("{}>{rank}", p.peer) } else { format!("{rank}>{}", p.peer) };
            o.push_str(&line([vec![pair], cells(p)].concat()));
        }
    }
}

/// The statistics as rows: table `job`, a row per rank and peer.
pub fn json(reports: &BTreeMap<u32, Vec<PeerReport>>, ranks: u32) -> String {
    let rows = reports
        .iter()
        .flat_map(|(rank, peers)| {
            peers.iter().map(move |p| {
                Row::new("job", "bulkwire", format!("rank {rank} to rank {}", p.peer), ranks)
                    .with("rank", *rank)
                    .with("peer", p.peer)
                    .with("ordinary_data_packets", p.ordinary_data_packets)
                    .with("ordinary_data_bytes", p.ordinary_data_bytes)
                    .with("premium_data_packets", p.premium_data_packets)
                    .with("premium_data_bytes", p.premium_data_bytes)
                    .with("ordinary_control_bytes", p.ordinary_control_bytes)
                    .with("premium_control_bytes", p.premium_control_bytes)
                    .with("retransmitted_packets", p.retransmitted_packets)
                    .with("explicit_ack_packets", p.explicit_acks)
                    .with("prod_packets", p.prods)
                    .with("lstat_packets", p.lstats)
                    .with("switches_to_premium_count", p.switches_to_premium)
                    .with("switches_to_ordinary_count", p.switches_to_ordinary)
                    .with("probe_packets", p.probes_sent)
                    .with("lost_probe_packets", p.probes_lost)
                    .with("confirmations_count", p.confirmations)
                    .with("clock_exchanges_count", p.clock_exchanges)
                    .with("ack_bytes", p.ack_bytes)
                    .with("prod_bytes", p.prod_bytes)
                    .with("lstat_bytes", p.lstat_bytes)
                    .with("probe_bytes", p.probe_bytes)
                    .with("clock_sync_bytes", p.clock_sync_bytes)
                    .with("warp_bytes", p.warp_bytes)
                    .with("warp_feedback_packets", p.warp_feedback_received)
                    .with("paced_count", p.paced)
                    .with("shm_messages_count", p.shm_messages)
                    .with("shm_bytes", p.shm_bytes)
                    .with("shm_single_copy_count", p.shm_single_copy)
                    .with("shm_wakeups_count", p.shm_wakeups)
                    .with("shm_arena_read_bytes", p.shm_arena_read_bytes)
                    .with("shm_stage_read_bytes", p.shm_stage_read_bytes)
                    .with("segmented_packets", p.offload_sent)
                    .with("coalesced_packets", p.offload_received)
                    .with("read_in_place_packets", p.read_in_place)
                    .with("placed_messages", p.placed)
                    .with("best_effort_lost_packets", p.best_effort_lost)
                    .with("best_effort_dropped_count", p.best_effort_abandoned)
            })
        })
        .collect();
    Report { rows, notes: Vec::new() }.json() + "\n"
}
