//! Counters.

use bulkwire_wire::{PacketType, RejectCounters};

/// Counters of one channel (one direction pair between two ranks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Data packets sent for the first time.
    pub data_sent: u64,
    /// Data packets accepted (in order or held out of order).
    pub data_received: u64,
    /// Of those, packets whose data was read straight into the buffer of
    /// the message it continues, or where an aim said
    /// ([`crate::Endpoint::handle_landed`], [`crate::Endpoint::aim`]).
    pub read_in_place: u64,
    /// Messages reassembled in the buffer of the receive that waited for
    /// them ([`crate::Endpoint::place`]).
    pub placed: u64,
    /// Data packets sent again.
    pub retransmissions: u64,
    pub explicit_acks_sent: u64,
    pub explicit_acks_received: u64,
    pub prods_sent: u64,
    pub prods_received: u64,
    /// Data packets discarded on arrival: no free buffer, out of order under
    /// go-back-N, or too far ahead.
    pub drops: u64,
    /// Data packets that had already arrived.
    pub duplicates: u64,
    /// On a best-effort channel: packets gone past without (lost, or come
    /// after a later one), and messages dropped for a piece missing.
    pub skipped: u64,
    pub messages_abandoned: u64,
    /// Packets whose piggybacked acknowledgement field freed send buffers.
    pub implicit_acks: u64,
    /// Sent packets freed because the layer above proved them delivered
    /// (a BSP barrier: seed 002's coarse-grained acknowledgement by
    /// superstep colour), with no acknowledgement from the peer.
    pub colour_acks: u64,
    /// Times the sender asked for an acknowledgement because its buffers were
    /// about to run out.
    pub ack_requests: u64,
    /// Tail probes sent after the retransmission timeout.
    pub timeouts: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Datagrams of this channel (data, acknowledgements, prods, LSTAT) by
    /// the path they were handed to.
    pub ordinary: PathStats,
    pub premium: PathStats,
    pub lstats_sent: u64,
    pub lstats_received: u64,
    /// Feedback sent, in bytes of whole datagrams, by kind (seed 000
    /// counts feedback apart from data: it is premium traffic paid for).
    pub feedback: FeedbackBytes,
}

/// Bytes of feedback datagrams sent, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedbackBytes {
    pub acks: u64,
    pub prods: u64,
    pub lstats: u64,
    /// The latency monitor's probes and the clock exchanges (the
    /// endpoint's, not a channel's: counted per peer in [`LatencyStats`]).
    pub probes: u64,
    pub clock_sync: u64,
    /// Warp rate feedback (the endpoint's, counted per peer).
    pub warp: u64,
}

impl FeedbackBytes {
    pub fn add(&mut self, o: &FeedbackBytes) {
        self.acks += o.acks;
        self.prods += o.prods;
        self.lstats += o.lstats;
        self.probes += o.probes;
        self.clock_sync += o.clock_sync;
        self.warp += o.warp;
    }

    /// Counts a feedback datagram of `packet_type` (its second byte) and `len` bytes.
    pub(crate) fn record(&mut self, packet_type: u8, len: usize) {
        let len = len as u64;
        match packet_type {
            t if t == PacketType::Ack as u8 => self.acks += len,
            t if t == PacketType::Prod as u8 => self.prods += len,
            t if t == PacketType::Lstat as u8 => self.lstats += len,
            t if t == PacketType::Probe as u8 => self.probes += len,
            t if t == PacketType::ClockSync as u8 => self.clock_sync += len,
            t if t == PacketType::Warp as u8 => self.warp += len,
            _ => {}
        }
    }
}

impl ChannelStats {
    pub fn add(&mut self, o: &ChannelStats) {
        self.data_sent += o.data_sent;
        self.data_received += o.data_received;
        self.read_in_place += o.read_in_place;
        self.placed += o.placed;
        self.retransmissions += o.retransmissions;
        self.explicit_acks_sent += o.explicit_acks_sent;
        self.explicit_acks_received += o.explicit_acks_received;
        self.prods_sent += o.prods_sent;
        self.prods_received += o.prods_received;
        self.drops += o.drops;
        self.duplicates += o.duplicates;
        self.skipped += o.skipped;
        self.messages_abandoned += o.messages_abandoned;
        self.implicit_acks += o.implicit_acks;
        self.colour_acks += o.colour_acks;
        self.ack_requests += o.ack_requests;
        self.timeouts += o.timeouts;
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.ordinary.add(&o.ordinary);
        self.premium.add(&o.premium);
        self.lstats_sent += o.lstats_sent;
        self.lstats_received += o.lstats_received;
        self.feedback.add(&o.feedback);
    }
}

/// Datagrams and bytes (whole datagrams, header and MAC included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    pub packets: u64,
    pub bytes: u64,
}

impl PathCounters {
    pub fn add(&mut self, o: &PathCounters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }

    pub(crate) fn record(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

/// What was sent on one path class. The premium share of the bytes is what
/// a user pays for; the paper counts data (its ABR) apart from feedback
/// (its VBR), so the two are kept apart here too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Data packets, first transmissions and retransmissions.
    pub data: PathCounters,
    /// Everything else: acknowledgements, prods, LSTAT, probes, clock sync.
    pub control: PathCounters,
}

impl PathStats {
    pub fn add(&mut self, o: &PathStats) {
        self.data.add(&o.data);
        self.control.add(&o.control);
    }

    pub fn total(&self) -> PathCounters {
        PathCounters { packets: self.data.packets + self.control.packets, bytes: self.data.bytes + self.control.bytes }
    }
}

/// Counters of the latency engines toward one peer (or summed over peers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyStats {
    /// Probes this endpoint sent to the peer.
    pub probes_sent: u64,
    /// Probes from the peer that arrived (in order; older ones are ignored).
    pub probes_received: u64,
    /// Probes from the peer not seen TL after their expected time.
    pub probes_lost: u64,
    /// Latency samples taken from probes and from data on the ordinary path.
    pub samples: u64,
    /// Samples above TM, and below Tm.
    pub samples_high: u64,
    pub samples_low: u64,
    /// Mode decisions this endpoint, as receiver, sent to the peer by LSTAT
    /// (first sends, not repeats).
    pub decisions: u64,
    /// LSTATs sent again because the peer had not applied the decision.
    pub lstat_repeats: u64,
    /// Switches of this endpoint's sending mode toward the peer.
    pub switches_to_high: u64,
    pub switches_to_low: u64,
    /// Times this endpoint, as sender, held data on the premium path after a
    /// silence until the receiver answered a probe
    /// ([`crate::LatencyConfig::sample_lifetime`]), and answers it gave as
    /// receiver.
    pub confirmations: u64,
    pub answers: u64,
    /// Clock exchanges this endpoint started, and replies that gave a sample.
    pub clock_requests: u64,
    pub clock_samples: u64,
    /// Bytes of probes and of clock exchanges (requests and replies) sent.
    pub feedback: FeedbackBytes,
}

impl LatencyStats {
    pub fn add(&mut self, o: &LatencyStats) {
        self.probes_sent += o.probes_sent;
        self.probes_received += o.probes_received;
        self.probes_lost += o.probes_lost;
        self.samples += o.samples;
        self.samples_high += o.samples_high;
        self.samples_low += o.samples_low;
        self.decisions += o.decisions;
        self.lstat_repeats += o.lstat_repeats;
        self.switches_to_high += o.switches_to_high;
        self.switches_to_low += o.switches_to_low;
        self.confirmations += o.confirmations;
        self.answers += o.answers;
        self.clock_requests += o.clock_requests;
        self.clock_samples += o.clock_samples;
        self.feedback.add(&o.feedback);
    }

    /// Mode switches in both directions.
    pub fn switches(&self) -> u64 {
        self.switches_to_high + self.switches_to_low
    }
}

/// Counters of a whole endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Sum over channels.
    pub channels: ChannelStats,
    /// Datagrams rejected before reaching a channel, by reason.
    pub rejected: RejectCounters,
    /// Authenticated datagrams that broke the protocol (a faulty peer).
    pub protocol_violations: u64,
    /// Datagrams of a type this version does not handle yet (or latency
    /// engine packets while the engines are off).
    pub unhandled: u64,
    /// Every datagram sent, channel and endpoint packets alike (probes and
    /// clock sync belong to no channel), by path.
    pub ordinary: PathStats,
    pub premium: PathStats,
    /// The latency engines, summed over peers.
    pub latency: LatencyStats,
}
