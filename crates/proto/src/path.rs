//! The two path classes between every pair of processes.
//!
//! Channels send on them, the latency engines choose between them and the
//! endpoint hands them to its caller, so they live apart from all three.

/// The path class a datagram should travel on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// Best effort: data while latency is low, and latency probes always.
    Ordinary,
    /// Priority class: control traffic (acknowledgements, prods, LSTAT,
    /// clock sync), and data in high-latency mode.
    Premium,
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Path::Ordinary => "ordinary",
            Path::Premium => "premium",
        })
    }
}
