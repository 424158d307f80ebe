//! Phase 5 of the sync: pacing (seed 002 §3).
//!
//! After the reduction every process knows who sends to whom and, from the
//! schedule, how many senders will target each receiver in each round.
//! Two limits follow from that global load:
//!
//! - packets in flight: a receiver's socket holds `receiver_packets`
//!   packets; when c senders aim at it at once, each may keep only its
//!   share in flight, or the socket overflows and the packets are lost and
//!   sent again. The pacer hands the protocol at most `receiver_packets / c`
//!   packets beyond what has been acknowledged, and marks the packet that
//!   fills the window as the end of a phase, so the receiver acknowledges
//!   it at once rather than the sender stalling until a timeout (the
//!   fine-grained scheme of §4.4);
//! - rate, where the link rate is known (`BULKWIRE_BSP_RATE`): a port
//!   that c senders feed at once drains at the link rate, so each injects
//!   at 1/c of it, and no sender injects faster than its own link. The
//!   applied load then stays just below what the network carries, instead
//!   of overflowing a switch port's queue (or the sender's own) and losing
//!   packets.

use std::time::{Duration, Instant};

pub use bulkwire_runtime::rate::parse_rate;

/// A token bucket over the bytes a sender puts on the wire: at most
/// `burst` bytes at once, then `bytes_per_s`. A packet goes whenever the
/// bucket is not in debt, so a packet larger than the bucket still goes.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_s: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Pacer {
    /// A full bucket for `bits_per_s`, holding about a millisecond of
    /// sending and at least two packets of `packet` bytes.
    pub fn new(bits_per_s: f64, packet: usize, now: Instant) -> Pacer {
        let bytes_per_s = bits_per_s / 8.0;
        let burst = (bytes_per_s / 1000.0).max(2.0 * packet as f64);
        Pacer { bytes_per_s, burst, tokens: burst, last: now }
    }

    /// Takes `bytes` if the bucket allows them now; otherwise says how long
    /// until it does. From now on the bucket fills at `bits_per_s` (the
    /// share of the port of the destination these bytes are for).
    pub fn take(&mut self, bytes: usize, bits_per_s: f64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        self.bytes_per_s = bits_per_s / 8.0;
        if self.tokens < 0.0 {
            return Err(Duration::from_secs_f64(-self.tokens / self.bytes_per_s));
        }
        self.tokens -= bytes as f64;
        Ok(())
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.bytes_per_s).min(self.burst);
        self.last = now;
    }
}

/// The rate at which to send to a receiver that `contention` senders
/// target at once, on links of `link` bits per second.
pub fn share(link: f64, contention: u32) -> f64 {
    link / contention.max(1) as f64
}

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

    #[test]
    fn rates_are_read_as_tc_writes_them() {
        assert_eq!(parse_rate("100mbit"), Ok(100e6));
        assert_eq!(parse_rate(" 1.5Gbit "), Ok(1.5e9));
        assert_eq!(parse_rate("64kbit"), Ok(64e3));
        assert_eq!(parse_rate("2000000"), Ok(2e6));
        assert!(parse_rate("100mb").unwrap_err().contains("unknown unit"));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0mbit").is_err());
        assert!(parse_rate("-5mbit").is_err());
        assert!(parse_rate("nanmbit").is_err());
        assert_eq!(share(100e6, 4), 25e6);
        assert_eq!(share(100e6, 0), 100e6);
    }

    #[test]
    fn the_pacer_keeps_to_its_rate_after_a_burst() {
        let t0 = Instant::now();
        // 8 Mbit/s is 1 MB/s: a burst of 2 packets of 1000 bytes (1 ms is less).
        let mut p = Pacer::new(8e6, 1000, t0);
        assert_eq!(p.take(1000, 8e6, t0), Ok(()));
        assert_eq!(p.take(1000, 8e6, t0), Ok(()));
        assert_eq!(p.take(1000, 8e6, t0), Ok(()), "the bucket is empty, not in debt: one more goes");
        let wait = p.take(1000, 8e6, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(1), "1000 bytes of debt at 1 MB/s");
        let later = t0 + wait;
        assert_eq!(p.take(1000, 8e6, later), Ok(()));
        assert!(p.take(1000, 8e6, later).is_err());
        // Over a second, about a second's worth goes (plus the burst).
        let mut sent = 0;
        let mut now = later;
        while now < later + Duration::from_secs(1) {
            match p.take(1000, 8e6, now) {
                Ok(()) => sent += 1000,
                Err(w) => now += w,
            }
        }
        assert!((998_000..=1_003_000).contains(&sent), "{sent}");
        // Half the rate: half the bytes.
        let (start, mut sent) = (now, 0);
        while now < start + Duration::from_secs(1) {
            match p.take(1000, 4e6, now) {
                Ok(()) => sent += 1000,
                Err(w) => now += w,
            }
        }
        assert!((498_000..=503_000).contains(&sent), "{sent}");
    }
}
