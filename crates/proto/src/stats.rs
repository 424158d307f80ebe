//! Counters.

use bulkwire_wire::RejectCounters;

/// Counters of one channel (one direction pair between two ranks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Data packets sent for the first time.
    pub data_sent: u64,
    /// Data packets accepted (in order or held out of order).
    pub data_received: u64,
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
    /// Packets whose piggybacked acknowledgement field freed send buffers.
    pub implicit_acks: u64,
    /// Times the sender asked for an acknowledgement because its buffers were
    /// about to run out.
    pub ack_requests: u64,
    /// Tail probes sent after the retransmission timeout.
    pub timeouts: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl ChannelStats {
    pub fn add(&mut self, o: &ChannelStats) {
        self.data_sent += o.data_sent;
        self.data_received += o.data_received;
        self.retransmissions += o.retransmissions;
        self.explicit_acks_sent += o.explicit_acks_sent;
        self.explicit_acks_received += o.explicit_acks_received;
        self.prods_sent += o.prods_sent;
        self.prods_received += o.prods_received;
        self.drops += o.drops;
        self.duplicates += o.duplicates;
        self.implicit_acks += o.implicit_acks;
        self.ack_requests += o.ack_requests;
        self.timeouts += o.timeouts;
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
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
    /// Datagrams of a type this version does not handle yet.
    pub unhandled: u64,
}
