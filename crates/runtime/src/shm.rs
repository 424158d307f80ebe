//! The shared-memory path between processes of a job on one host.

/// How this process reaches a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Rings in shared memory (the peer runs on this host).
    Shm,
    /// UDP datagrams, through the reliable channels of `proto`.
    Udp,
}

impl Transport {
    /// `shm` or `udp`, as benchmark rows name them.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Udp => "udp",
        }
    }
}
