//! Packet statistics per process, as in seed 002's Table 5, and the
//! per-superstep profile (`BULKWIRE_PROFILE`).

use std::fs::File;
use std::io::{BufWriter, Write};

use bulkwire_proto::ChannelStats;
use serde::Serialize;

/// The packets of bsp's channel, summed over peers (Table 5's columns and
/// a few more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PacketStats {
    /// Data packets received (Recvd).
    pub received: u64,
    /// Data packets sent for the first time.
    pub sent: u64,
    /// Acknowledgements sent as packets of their own (ExplAck).
    pub explicit_acks: u64,
    /// Data packets discarded on arrival (Drops).
    pub drops: u64,
    /// Data packets that had already arrived (Dups).
    pub duplicates: u64,
    /// Acknowledgements that rode on data going the other way.
    pub piggybacked_acks: u64,
    /// Packets still unacknowledged when the next superstep's barrier
    /// proved them delivered, freed without an acknowledgement from the
    /// peer: acknowledged by superstep colour (ImplAck).
    pub colour_acks: u64,
    pub retransmissions: u64,
    pub prods: u64,
    /// Packets that asked for an acknowledgement because the sender's
    /// buffers were about to run out (the fine-grained scheme).
    pub ack_requests: u64,
    /// Data packets read from the socket straight into the area of the
    /// put they carried (or the buffer of their message).
    pub read_in_place: u64,
}

impl PacketStats {
    pub(crate) fn add_channel(&mut self, c: &ChannelStats) {
        self.received += c.data_received;
        self.sent += c.data_sent;
        self.explicit_acks += c.explicit_acks_sent;
        self.drops += c.drops;
        self.duplicates += c.duplicates;
        self.piggybacked_acks += c.implicit_acks;
        self.colour_acks += c.colour_acks;
        self.retransmissions += c.retransmissions;
        self.prods += c.prods_sent;
        self.ack_requests += c.ack_requests;
        self.read_in_place += c.read_in_place;
    }

    fn percent(part: u64, whole: u64) -> f64 {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    }

    /// One line in the manner of Table 5.
    pub fn line(&self, pid: u32) -> String {
        format!(
            "bsp stats: process {pid}: received {} explicit-acks {:.2}% drops {} duplicates {} implicit-acks {:.2}% \
             (by superstep colour {}, piggybacked {}) sent {} retransmissions {} prods {} ack-requests {} read-in-place {}",
            self.received,
            Self::percent(self.explicit_acks, self.received),
            self.drops,
            self.duplicates,
            Self::percent(self.colour_acks, self.sent),
            self.colour_acks,
            self.piggybacked_acks,
            self.sent,
            self.retransmissions,
            self.prods,
            self.ack_requests,
            self.read_in_place,
        )
    }
}

/// One superstep of one process, as written to the profile.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SuperstepProfile {
    pub pid: u32,
    pub superstep: u64,
    /// `sync` or `end`.
    pub call: &'static str,
    pub order: &'static str,
    /// Seconds from the end of the previous sync (or `begin`) to this call.
    pub computation_s: f64,
    /// Seconds inside the sync.
    pub communication_s: f64,
    /// Bytes this process sent to and received from others (h-relation out and in).
    pub h_out: u64,
    pub h_in: u64,
    /// The largest outgoing volume of any process, known to all after the barrier.
    pub h_out_max: u64,
    /// Data packets sent and received in this superstep, and resent.
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    /// Rounds of this superstep's barrier (one after total exchanges that
    /// went before the barrier, see `Bsp::reduce`).
    pub barrier_rounds: u32,
}

/// Writes one JSON object per superstep to `FILE.<pid>`.
pub(crate) struct Profiler {
    out: BufWriter<File>,
}

impl Profiler {
    pub fn create(prefix: &str, pid: u32) -> std::io::Result<Profiler> {
        Ok(Profiler { out: BufWriter::new(File::create(format!("{prefix}.{pid}"))?) })
    }

    pub fn write(&mut self, record: &SuperstepProfile) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, record)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
