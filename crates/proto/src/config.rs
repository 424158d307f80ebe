//! Endpoint configuration.

use std::time::Duration;

use bulkwire_wire::{JobKey, OVERHEAD, RECORD_HEADER_LEN};

use crate::rate::RateControl;

/// How a channel recovers from loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Selective retransmission of exactly the missing packets, learned from
    /// the piggybacked acknowledgement and end-of-hole fields (seed 002 §4.3).
    #[default]
    HoleFilling,
    /// The receiver discards packets that arrive out of order and the sender
    /// resends everything from the first missing packet on. Kept for
    /// comparison.
    GoBackN,
    /// Nothing is resent or acknowledged (seed 004's unreliable mode, for
    /// data of which only the latest value counts). Each packet leaves
    /// once and its buffer is free at once; the receiver delivers the
    /// messages of what arrives, in order, and goes past what does not: a
    /// packet that comes after a later one, and a message with a piece
    /// missing, are dropped and counted ([`crate::ChannelStats::skipped`]).
    BestEffort,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::HoleFilling => "hole-filling",
            Strategy::GoBackN => "go-back-n",
            Strategy::BestEffort => "best-effort",
        })
    }
}

/// Everything an [`crate::Endpoint`] needs to know; `Config::new` gives
/// defaults for a LAN.
#[derive(Clone, Debug)]
pub struct Config {
    /// Job identifier carried in every datagram.
    pub job: u64,
    /// The key that authenticates every datagram of the job.
    pub key: JobKey,
    /// This process's rank and the number of ranks in the job.
    pub rank: u32,
    pub ranks: u32,
    /// Channels between each pair of ranks.
    pub channels: u16,
    /// Largest datagram this endpoint sends (path MTU minus IP/UDP headers).
    pub max_datagram: usize,
    /// n, the packet buffers of the process: half for packets sent and not yet
    /// acknowledged, half for packets received out of order.
    pub packet_buffers: usize,
    /// Bytes of messages accepted by `send` but not yet packetised.
    pub send_buffer_bytes: usize,
    /// Bytes of received messages (complete or in reassembly) not yet taken
    /// by `poll_event`.
    pub recv_buffer_bytes: usize,
    /// Largest message `send` accepts (and a peer may announce).
    pub max_message_size: usize,
    /// Loss recovery strategy of every channel (can be changed per channel).
    pub strategy: Strategy,
    /// Round trip assumed before the first measurement.
    pub initial_rtt: Duration,
    /// Bounds of the retransmission and prod timeouts.
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Out-of-order arrivals tolerated before a hole is reported by a prod,
    /// as a fraction of the round trip (reordering tolerance).
    pub reorder_fraction: f64,
    /// Latency-adaptive path switching (LME/ECE, seed 000 §3): `None`, the
    /// default, sends all data on the ordinary path and costs nothing;
    /// `Some` probes the ordinary path and moves data to the premium path
    /// while its latency is high.
    pub latency: Option<LatencyConfig>,
    /// All data on the premium path (the paper's premium-only service), for
    /// comparison; excludes `latency`.
    pub premium_only: bool,
    /// Warp rate control of every peer this endpoint sends to (seed 003 §3,
    /// [`crate::rate`]): `None`, the default, sends as fast as the buffers
    /// allow. A receiver answers senders under control whatever it is set to.
    pub rate_control: Option<RateControl>,
}

/// Parameters of the Latency Monitoring Engine, the clock resynchronisation
/// and the Effective Communication Engine (seed 000 §3, Table 2).
///
/// "Latency" is the one-way delay of the ordinary path: the arrival time of a
/// probe or data packet minus the sender's timestamp mapped onto the
/// receiver's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyConfig {
    /// A probe leaves on the ordinary path this often.
    pub monitor_interval: Duration,
    /// TL: a probe not seen this long after its expected time is lost.
    pub loss_threshold: Duration,
    /// TM: a latency above this switches the sender to high-latency mode.
    pub high_threshold: Duration,
    /// Tm (< TM): a latency below this switches it back. Between the two the
    /// mode stays as it is, so a latency hovering near one threshold does not
    /// make the sender flap.
    pub low_threshold: Duration,
    /// The sender asks for status (the SSCOP POLL) at least this often while
    /// data is unacknowledged: it caps the back-off of the tail probe.
    pub poll_interval: Duration,
    /// Period of the clock exchange on the premium path; `None` trusts the
    /// clocks as they are (simulation with perfect clocks, as in the paper).
    pub clock_sync_period: Option<Duration>,
    /// Latency samples from which each peer's TM and Tm are derived, from
    /// the least of them by [`LatencyConfig::from_base_latency`]'s rule,
    /// before any decision; 0 uses `high_threshold` and `low_threshold` as
    /// given. A real network's base latency is not known in advance.
    pub calibration_samples: u32,
    /// The least base latency calibration believes: below it, a process's
    /// wait for a core would pass for congestion.
    pub least_base: Duration,
    /// How long a sample of the ordinary path is believed; `None` believes
    /// it until the next one, as the paper's engine does. With `Some(age)`:
    /// in high-latency mode, while data flows, probes leave every `age`
    /// instead of every monitoring interval, so the data returns to the
    /// ordinary path soon after its queue drains; in low-latency mode,
    /// data that follows more than `age` of silence on the ordinary path
    /// starts on the premium path, and stays there until the receiver
    /// answers a probe that asks for it (a probe with
    /// `Flags::ACK_REQUESTED`): the first burst after a gap does not
    /// meet, on the ordinary path, a queue that built up unseen.
    pub sample_lifetime: Option<Duration>,
}

impl LatencyConfig {
    /// Defaults for a path whose one-way latency, measured unloaded, is
    /// `base` (propagation, transmission and a quiet queue).
    ///
    /// TM is twice the base: a queue as long again as the whole unloaded
    /// path means congestion, not noise. Tm is 1.5 times the base, halfway
    /// back, which leaves a band wide enough against flapping. Probes go every
    /// 1000 base latencies (the ratio of Table 2: 0.1 s against a TM of
    /// 100 us), at least every millisecond and at most every 100 ms, so that
    /// probing costs under a thousandth of the path; TL and the poll interval
    /// equal the monitoring interval, as in Table 2. Clocks are
    /// resynchronised every ten monitoring intervals: with crystal drifts of
    /// tens of ppm and a fitted drift, the residual error then stays well
    /// below the base latency. A sample is believed for a fifth of the
    /// monitoring interval ([`LatencyConfig::sample_lifetime`]).
    pub fn from_base_latency(base: Duration) -> LatencyConfig {
        let base = base.max(Duration::from_micros(1));
        let interval = (base * 1000).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let Thresholds { high, low } = Thresholds::for_base(base);
        LatencyConfig {
            monitor_interval: interval,
            loss_threshold: interval,
            high_threshold: high,
            low_threshold: low,
            poll_interval: interval,
            clock_sync_period: Some(interval * 10),
            calibration_samples: 0,
            least_base: Duration::ZERO,
            sample_lifetime: Some(interval / 5),
        }
    }

    /// The values of the paper's Table 2 (seed 000 §4.1), with clocks taken
    /// as perfect, as its simulation does.
    pub fn table2() -> LatencyConfig {
        LatencyConfig {
            monitor_interval: Duration::from_millis(100),
            loss_threshold: Duration::from_millis(100),
            high_threshold: Duration::from_micros(100),
            low_threshold: Duration::from_micros(90),
            poll_interval: Duration::from_millis(100),
            clock_sync_period: None,
            calibration_samples: 0,
            least_base: Duration::ZERO,
            sample_lifetime: None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [self.monitor_interval, self.loss_threshold, self.high_threshold, self.poll_interval];
        if positive.iter().any(Duration::is_zero)
            || self.clock_sync_period.is_some_and(|p| p.is_zero())
            || self.sample_lifetime.is_some_and(|a| a.is_zero())
        {
            return Err(ConfigError::BadLatencyConfig("intervals and thresholds must be positive"));
        }
        if self.low_threshold >= self.high_threshold {
            return Err(ConfigError::BadLatencyConfig("the low threshold Tm must lie below the high threshold TM"));
        }
        Ok(())
    }
}

/// TM and Tm: above `high` a latency is high, below `low` low again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub high: Duration,
    pub low: Duration,
}

impl Thresholds {
    /// The thresholds `cfg` gives.
    pub fn of(cfg: &LatencyConfig) -> Thresholds {
        Thresholds { high: cfg.high_threshold, low: cfg.low_threshold }
    }

    /// The thresholds for a path whose base latency is `base`: TM twice
    /// the base, Tm one and a half times (see
    /// [`LatencyConfig::from_base_latency`]).
    pub fn for_base(base: Duration) -> Thresholds {
        let base = base.max(Duration::from_micros(1));
        Thresholds { high: base * 2, low: base * 3 / 2 }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a job needs at least one rank, and rank {rank} must be below {ranks}")]
    BadRank { rank: u32, ranks: u32 },
    #[error("at least one channel per pair is needed")]
    NoChannels,
    #[error("max_datagram {0} leaves no room for a record (at least {min} bytes)", min = OVERHEAD + RECORD_HEADER_LEN + 1)]
    DatagramTooSmall(usize),
    #[error("max_datagram {0} exceeds the largest UDP datagram (65507)")]
    DatagramTooLarge(usize),
    #[error("packet_buffers {0} must be at least 4 (two to send, two to receive)")]
    TooFewBuffers(usize),
    #[error("{which} ({bytes} bytes) must be at least max_message_size ({max})")]
    BufferBelowMessage { which: &'static str, bytes: usize, max: usize },
    #[error("max_message_size {0} exceeds 4 GiB - 1")]
    MessageTooLarge(usize),
    #[error("a message's end sent ahead is at most {max} bytes, not {0}", max = crate::channel::TAIL_AHEAD_MAX)]
    TailAheadTooLong(usize),
    #[error("timeouts must satisfy 0 < min_rto <= max_rto and initial_rtt > 0")]
    BadTimeouts,
    #[error("reorder_fraction must lie in [0, 1]")]
    BadReorderFraction,
    #[error("latency configuration: {0}")]
    BadLatencyConfig(&'static str),
    #[error("rate control: {0}")]
    BadRateControl(&'static str),
}

impl Config {
    pub fn new(job: u64, key: JobKey, rank: u32, ranks: u32) -> Config {
        Config {
            job,
            key,
            rank,
            ranks,
            channels: 1,
            max_datagram: 1472,
            packet_buffers: 1024,
            send_buffer_bytes: 8 << 20,
            recv_buffer_bytes: 8 << 20,
            max_message_size: 4 << 20,
            strategy: Strategy::HoleFilling,
            initial_rtt: Duration::from_millis(1),
            min_rto: Duration::from_micros(200),
            max_rto: Duration::from_secs(1),
            reorder_fraction: 0.25,
            latency: None,
            premium_only: false,
            rate_control: None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ranks == 0 || self.rank >= self.ranks {
            return Err(ConfigError::BadRank { rank: self.rank, ranks: self.ranks });
        }
        if self.channels == 0 {
            return Err(ConfigError::NoChannels);
        }
        if self.max_datagram <= OVERHEAD + RECORD_HEADER_LEN {
            return Err(ConfigError::DatagramTooSmall(self.max_datagram));
        }
        if self.max_datagram > bulkwire_wire::MAX_DATAGRAM {
            return Err(ConfigError::DatagramTooLarge(self.max_datagram));
        }
        if self.packet_buffers < 4 {
            return Err(ConfigError::TooFewBuffers(self.packet_buffers));
        }
        if self.max_message_size > u32::MAX as usize {
            return Err(ConfigError::MessageTooLarge(self.max_message_size));
        }
        for (which, bytes) in
            [("send_buffer_bytes", self.send_buffer_bytes), ("recv_buffer_bytes", self.recv_buffer_bytes)]
        {
            if bytes < self.max_message_size {
                return Err(ConfigError::BufferBelowMessage { which, bytes, max: self.max_message_size });
            }
        }
        if self.min_rto.is_zero() || self.min_rto > self.max_rto || self.initial_rtt.is_zero() {
            return Err(ConfigError::BadTimeouts);
        }
        if !(0.0..=1.0).contains(&self.reorder_fraction) {
            return Err(ConfigError::BadReorderFraction);
        }
        if self.premium_only && self.latency.is_some() {
            return Err(ConfigError::BadLatencyConfig("premium-only data needs no latency monitor"));
        }
        if let Some(latency) = &self.latency {
            latency.validate()?;
            if self.max_payload() < bulkwire_wire::LSTAT_FIXED_LEN.max(bulkwire_wire::CLOCK_SYNC_PAYLOAD_LEN) {
                return Err(ConfigError::BadLatencyConfig("max_datagram leaves no room for an LSTAT"));
            }
        }
        if let Some(control) = &self.rate_control {
            control.validate().map_err(ConfigError::BadRateControl)?;
        }
        Ok(())
    }

    /// Payload bytes per data packet.
    pub fn max_payload(&self) -> usize {
        self.max_datagram - OVERHEAD
    }

    /// Buffers for packets sent and not yet acknowledged (n/2).
    pub fn send_buffers(&self) -> usize {
        self.packet_buffers / 2
    }

    /// Buffers for packets received out of order (n/2).
    pub fn recv_buffers(&self) -> usize {
        self.packet_buffers - self.send_buffers()
    }

    /// A receiver sends an explicit acknowledgement only when asked and when
    /// at least n/(2p) packets arrived since its last one (seed 002 §4.4).
    pub fn explicit_ack_threshold(&self) -> u32 {
        (self.packet_buffers / (2 * self.ranks as usize)).max(1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::new(1, JobKey::new([0; 32]), 0, 2)
    }

    #[test]
    fn latency_defaults_follow_the_base_latency() {
        let c = LatencyConfig::from_base_latency(Duration::from_micros(50));
        assert_eq!((c.high_threshold, c.low_threshold), (Duration::from_micros(100), Duration::from_micros(75)));
        assert_eq!((c.monitor_interval, c.loss_threshold), (Duration::from_millis(50), Duration::from_millis(50)));
        assert_eq!(c.clock_sync_period, Some(Duration::from_millis(500)));
        // Probing stays between every millisecond and every 100 ms.
        assert_eq!(LatencyConfig::from_base_latency(Duration::ZERO).monitor_interval, Duration::from_millis(1));
        assert_eq!(
            LatencyConfig::from_base_latency(Duration::from_secs(1)).monitor_interval,
            Duration::from_millis(100)
        );
        let t = LatencyConfig::table2();
        assert_eq!((t.high_threshold, t.low_threshold), (Duration::from_micros(100), Duration::from_micros(90)));
        assert_eq!(t.clock_sync_period, None);
    }

    #[test]
    fn latency_config_is_validated() {
        let mut c = config();
        assert!(c.latency.is_none(), "off by default");
        c.latency = Some(LatencyConfig::table2());
        assert_eq!(c.validate(), Ok(()));
        let mut l = LatencyConfig::table2();
        l.low_threshold = l.high_threshold;
        c.latency = Some(l);
        assert!(matches!(c.validate(), Err(ConfigError::BadLatencyConfig(_))));
        c.latency = Some(LatencyConfig { clock_sync_period: Some(Duration::ZERO), ..LatencyConfig::table2() });
        assert!(matches!(c.validate(), Err(ConfigError::BadLatencyConfig(_))));
        c.latency = Some(LatencyConfig::table2());
        c.max_datagram = OVERHEAD + RECORD_HEADER_LEN + 1;
        assert!(matches!(c.validate(), Err(ConfigError::BadLatencyConfig(_))));
    }
}
