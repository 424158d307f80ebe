//! Phase 5 of the sync: pacing (seed 002 §3).
//!
//! After the reduction every process knows who sends to whom and, from the
//! schedule, how many senders will target each receiver in each round. A
//! receiver's socket holds `receiver_packets` packets; when c senders aim
//! at it at once, each may keep only its share in flight, or the socket
//! overflows and the packets are lost and sent again. The pacer therefore
//! hands the protocol at most `receiver_packets / c` packets beyond what
//! has been acknowledged, and marks the packet that fills the window as
//! the end of a phase, so the receiver acknowledges it at once rather than
//! the sender stalling until a timeout (the fine-grained scheme of §4.4).

/// How many packets may be unacknowledged toward a receiver that `contention`
/// senders target at once, when its socket holds `receiver_packets`.
pub fn window(receiver_packets: usize, contention: u32, pacing: bool) -> usize {
    if !pacing {
        return usize::MAX;
    }
    (receiver_packets / contention.max(1) as usize).max(1)
}

/// Packets in flight: those sent and not acknowledged, plus those queued
/// in the protocol and not yet cut (rounded up).
pub fn in_flight(sent_unacked: usize, queued_bytes: usize, packet_bytes: usize) -> usize {
    sent_unacked + queued_bytes.div_ceil(packet_bytes.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_senders_share_of_the_receiver() {
        assert_eq!(window(64, 1, true), 64);
        assert_eq!(window(64, 7, true), 9);
        assert_eq!(window(4, 7, true), 1, "never below one packet");
        assert_eq!(window(64, 7, false), usize::MAX);
        assert_eq!(in_flight(3, 0, 1000), 3);
        assert_eq!(in_flight(3, 1, 1000), 4);
        assert_eq!(in_flight(0, 2000, 1000), 2);
    }
}
