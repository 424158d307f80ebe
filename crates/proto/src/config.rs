//! Endpoint configuration.

use std::time::Duration;

use bulkwire_wire::{JobKey, OVERHEAD, RECORD_HEADER_LEN};

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
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::HoleFilling => "hole-filling",
            Strategy::GoBackN => "go-back-n",
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
    #[error("timeouts must satisfy 0 < min_rto <= max_rto and initial_rtt > 0")]
    BadTimeouts,
    #[error("reorder_fraction must lie in [0, 1]")]
    BadReorderFraction,
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
