//! Round-trip estimation (RFC 6298 smoothing) from echoed timestamps.

use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    srtt: Duration,
    rttvar: Duration,
    has_sample: bool,
    min_rto: Duration,
    max_rto: Duration,
}

impl RttEstimator {
    pub(crate) fn new(initial: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator { srtt: initial, rttvar: initial / 2, has_sample: false, min_rto, max_rto }
    }

    pub(crate) fn sample(&mut self, rtt: Duration) {
        if !self.has_sample {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
            self.has_sample = true;
            return;
        }
        let diff = self.srtt.abs_diff(rtt);
        self.rttvar = (self.rttvar * 3 + diff) / 4;
        self.srtt = (self.srtt * 7 + rtt) / 8;
    }

    /// The smoothed round trip: the "one round-trip estimate" of the protocol.
    pub(crate) fn srtt(&self) -> Duration {
        self.srtt
    }

    /// How long to wait for an answer before probing again.
    pub(crate) fn rto(&self) -> Duration {
        (self.srtt + 4 * self.rttvar).clamp(self.min_rto, self.max_rto)
    }

    pub(crate) fn max_rto(&self) -> Duration {
        self.max_rto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_and_clamps() {
        let mut r = RttEstimator::new(Duration::from_millis(1), Duration::from_micros(200), Duration::from_secs(1));
        for _ in 0..50 {
            r.sample(Duration::from_micros(100));
        }
        assert!(r.srtt() < Duration::from_micros(110));
        assert_eq!(r.rto(), Duration::from_micros(200));
        r.sample(Duration::from_secs(10));
        assert_eq!(r.rto(), Duration::from_secs(1));
    }
}
