//! Where the time of a hop goes: marks at named points of the way a
//! datagram takes through the runtime, read from the time-stamp counter
//! (x86-64; a monotonic clock in nanoseconds elsewhere). Compiled in only
//! with the `cycles` feature (`cargo build --release -p bulkwire --features
//! cycles`): without it [`mark`] is empty and [`report`] says nothing.
//!
//! Each thread keeps its own marks. A hop runs from [`Point::Read`], the
//! last read that brought datagrams, to [`Point::Sent`], the end of the
//! send that follows it (in a ping-pong, the answer leaving); its
//! segments are the time between consecutive marks, reported as medians
//! (over the first 131,072 of each). Every pair of consecutive
//! marks, in or out of a hop, is also summed: where a stream's time goes
//! per datagram. The process prints both as it
//! finishes ([`crate::Runtime::finish`]). An 8 B hop over loopback makes
//! ten marks, each a read of the counter and a few stores: its half
//! round trip was 6.27-6.76 us with them and 6.68-7.18 without (three
//! alternating pairs).

// Without the feature only the tests count marks.
#![cfg_attr(not(feature = "cycles"), allow(dead_code))]

/// A point on the way through the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// A read of a socket brought datagrams.
    Read,
    /// The endpoint has handled the datagrams of a read (MAC checked,
    /// acknowledgements taken, data delivered).
    Handled,
    /// A turn's delivered messages are in the inbox.
    Collected,
    /// A wait found what it waited for (a receive matched and copied).
    Matched,
    /// The application called on the engine to send.
    SendCalled,
    /// A flush found something to send.
    FlushBegan,
    /// The endpoint made a datagram (packet, header, MAC).
    Polled,
    /// The datagram joined the send batch.
    Batched,
    /// Right before the send's system call.
    Syscall,
    /// The batch's send returned.
    Sent,
}

/// How many points there are.
const POINTS: usize = Point::Sent as usize + 1;

/// The points by number.
const ALL: [Point; POINTS] = [
    Point::Read,
    Point::Handled,
    Point::Collected,
    Point::Matched,
    Point::SendCalled,
    Point::FlushBegan,
    Point::Polled,
    Point::Batched,
    Point::Syscall,
    Point::Sent,
];

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Read => "read",
            Point::Handled => "handled",
            Point::Collected => "collected",
            Point::Matched => "matched",
            Point::SendCalled => "send called",
            Point::FlushBegan => "flush",
            Point::Polled => "datagram made",
            Point::Batched => "batched",
            Point::Syscall => "syscall",
            Point::Sent => "sent",
        }
    }
}

/// Hops, and times of each segment, kept for the medians (the first this
/// many): a few MiB at most.
const HOPS_KEPT: usize = 1 << 17;

/// The marks of one thread.
#[derive(Default)]
pub(crate) struct Tally {
    /// The hop under way: its marks so far.
    hop: Vec<(Point, u64)>,
    /// Per segment of a hop (its two ends), in the order first seen.
    segments: Vec<((Point, Point), Vec<u64>)>,
    /// Whole hops, first mark to last.
    totals: Vec<u64>,
    /// Every pair of consecutive marks, by their points' numbers: sum and
    /// count (an array, not a map: a mark hashes nothing).
    pairs: [[(u64, u64); POINTS]; POINTS],
    last: Option<(Point, u64)>,
}

impl Tally {
    /// Counts the mark `point` made at `at`.
    pub(crate) fn record(&mut self, point: Point, at: u64) {
        if let Some((from, then)) = self.last {
            let sum = &mut self.pairs[from as usize][point as usize];
            sum.0 += at.saturating_sub(then);
            sum.1 += 1;
        }
        self.last = Some((point, at));
        // A hop starts at the last read that brought datagrams.
        if point == Point::Read {
            self.hop.clear();
        } else if self.hop.is_empty() {
            return;
        }
        self.hop.push((point, at));
        if point == Point::Sent {
            if self.totals.len() < HOPS_KEPT {
                for w in self.hop.windows(2) {
                    let key = (w[0].0, w[1].0);
                    let delta = w[1].1.saturating_sub(w[0].1);
                    match self.segments.iter_mut().find(|(k, _)| *k == key) {
                        // A segment may come several times a hop (each
                        // datagram of a batch).
                        Some((_, values)) if values.len() < HOPS_KEPT => values.push(delta),
                        Some(_) => {}
                        None => self.segments.push((key, vec![delta])),
                    }
                }
                self.totals.push(at.saturating_sub(self.hop[0].1));
            }
            self.hop.clear();
        }
    }

    /// The medians of the hops' segments (those in at least a tenth of the
    /// hops), and the pairs of marks that took the most in all.
    pub(crate) fn summary(&self, unit: &str) -> String {
        let hops = self.totals.len();
        let mut out = format!("{hops} hops, median {unit}:");
        for ((from, to), values) in &self.segments {
            if values.len() * 10 < hops {
                continue;
            }
            out += &format!(" {} -> {} {};", from.name(), to.name(), median(values));
        }
        out += &format!(" whole hop {}", median(&self.totals));
        let mut pairs: Vec<_> = ALL
            .iter()
            .flat_map(|&from| ALL.iter().map(move |&to| (from, to)))
            .map(|(from, to)| ((from, to), self.pairs[from as usize][to as usize]))
            .filter(|&(_, (_, count))| count > 0)
            .collect();
        pairs.sort_by_key(|&(_, (sum, _))| std::cmp::Reverse(sum));
        out += &format!("\nmost {unit} in all, mean a pair:");
        for ((from, to), (sum, count)) in pairs.into_iter().take(8) {
            out += &format!(" {} -> {} {} x {};", from.name(), to.name(), count, sum / count);
        }
        out
    }
}

fn median(values: &[u64]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

#[cfg(feature = "cycles")]
mod on {
    use super::{Point, Tally};
    use std::cell::RefCell;

    thread_local! {
        static TALLY: RefCell<Tally> = RefCell::new(Tally::default());
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) const UNIT: &str = "cycles";
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const UNIT: &str = "ns";

    #[inline(always)]
    fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: RDTSC reads the time-stamp counter; every x86-64 CPU has it.
        return unsafe { core::arch::x86_64::_rdtsc() };
        #[cfg(not(target_arch = "x86_64"))]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
        }
    }

    #[inline(always)]
    pub(super) fn mark(point: Point) {
        let at = now();
        TALLY.with(|t| t.borrow_mut().record(point, at));
    }

    pub(super) fn report() -> Option<String> {
        TALLY.with(|t| Some(t.borrow().summary(UNIT)))
    }
}

/// Marks `point` on this thread (nothing without the `cycles` feature).
#[inline(always)]
pub(crate) fn mark(_point: Point) {
    #[cfg(feature = "cycles")]
    on::mark(_point);
}

/// This thread's summary; `None` without the `cycles` feature.
pub(crate) fn report() -> Option<String> {
    #[cfg(feature = "cycles")]
    return on::report();
    #[cfg(not(feature = "cycles"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_run_from_a_read_to_a_send_and_every_pair_is_summed() {
        let mut t = Tally::default();
        // A send on its own (no read before it) is not a hop.
        t.record(Point::SendCalled, 0);
        t.record(Point::Sent, 50);
        for hop in 0..3u64 {
            let base = 1_000 * (hop + 1);
            // Reads that find nothing are not marked; of two that bring
            // datagrams, the hop starts at the second.
            t.record(Point::Read, base);
            t.record(Point::Read, base + 10);
            t.record(Point::Handled, base + 110 + hop);
            t.record(Point::Matched, base + 160 + hop);
            t.record(Point::SendCalled, base + 200 + hop);
            t.record(Point::Sent, base + 700 + hop);
        }
        let s = t.summary("cycles");
        assert!(s.starts_with("3 hops, median cycles:"), "{s}");
        assert!(s.contains("read -> handled 101;"), "{s}");
        assert!(s.contains("handled -> matched 50;"), "{s}");
        assert!(s.contains("send called -> sent 500;"), "{s}");
        assert!(s.contains("whole hop 691"), "{s}");
        // The first send's pair counts among all pairs, with the hops' own.
        assert!(s.contains("send called -> sent 4 x 387;"), "{s}");
    }

    #[cfg(feature = "cycles")]
    #[test]
    fn marks_on_a_thread_make_its_report() {
        std::thread::spawn(|| {
            for _ in 0..5 {
                mark(Point::Read);
                mark(Point::Handled);
                mark(Point::SendCalled);
                mark(Point::Sent);
            }
            let report = report().expect("the feature is on");
            assert!(report.starts_with("5 hops, median"), "{report}");
            assert!(report.contains("read -> handled"), "{report}");
        })
        .join()
        .unwrap();
    }

    #[cfg(not(feature = "cycles"))]
    #[test]
    fn without_the_feature_nothing_is_reported() {
        mark(Point::Read);
        mark(Point::Sent);
        assert!(report().is_none());
    }

    #[test]
    fn every_point_is_listed_under_its_number() {
        assert!(ALL.iter().enumerate().all(|(i, &p)| p as usize == i));
    }

    #[test]
    fn without_hops_the_summary_says_so() {
        let t = Tally::default();
        assert!(t.summary("ns").starts_with("0 hops, median ns: whole hop 0"));
    }
}
