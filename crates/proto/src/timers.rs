//! The deadlines of an endpoint's timers, by slot (a channel or a latency
//! link), in a min-heap: finding the next one, or the due ones, costs in
//! proportion to what changed, not to how many slots there are.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::Time;

/// A min-heap of `(deadline, slot)` with lazy deletion: an entry counts
/// only while its time is the slot's registered deadline. A slot whose
/// state may have changed is marked dirty; [`Timers::refresh`] asks the
/// dirty slots their deadline again before the heap is read.
#[derive(Debug)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Time, usize)>>,
    /// By slot: the deadline it has in the heap.
    registered: Vec<Option<Time>>,
    /// Slots to ask again, each once (`in_dirty`).
    dirty: Vec<usize>,
    in_dirty: Vec<bool>,
    /// Deadlines asked since made: the timers' work.
    pub(crate) asked: u64,
}

impl Timers {
    /// `slots` slots without deadlines: mark those that have one.
    pub(crate) fn new(slots: usize) -> Timers {
        Timers {
            heap: BinaryHeap::new(),
            registered: vec![None; slots],
            dirty: Vec::new(),
            in_dirty: vec![false; slots],
            asked: 0,
        }
    }

    /// The state of `slot` may have changed its deadline.
    pub(crate) fn mark(&mut self, slot: usize) {
        if !self.in_dirty[slot] {
            self.in_dirty[slot] = true;
            self.dirty.push(slot);
        }
    }

    /// Registers the deadline of every dirty slot, `deadline(slot)`.
    pub(crate) fn refresh(&mut self, mut deadline: impl FnMut(usize) -> Option<Time>) {
        // The list keeps its capacity: marking and refreshing happen at
        // every packet, and a list freed here was allocated again at the
        // next mark (two endpoints passing an 8 B message back and forth
        // took 8% longer a message).
        let mut dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            self.in_dirty[slot] = false;
            self.asked += 1;
            let at = deadline(slot);
            if at != self.registered[slot] {
                self.registered[slot] = at;
                if let Some(at) = at {
                    self.heap.push(Reverse((at, slot)));
                }
            }
        }
        dirty.clear();
        self.dirty = dirty;
        // Stale entries whose time is later than every live one stay until
        // they come to the top: rebuild when they outnumber the slots.
        if self.heap.len() > 2 * self.registered.len() + 64 {
            let live = self.registered.iter().enumerate().filter_map(|(slot, at)| at.map(|at| Reverse((at, slot))));
            self.heap = live.collect();
        }
    }

    /// The earliest registered deadline (dirty slots not counted: refresh first).
    pub(crate) fn next(&mut self) -> Option<Time> {
        while let Some(&Reverse((at, slot))) = self.heap.peek() {
            if self.registered[slot] == Some(at) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the slots due at `now` off the heap, in slot order, and marks
    /// them dirty (their deadlines are asked again at the next refresh).
    pub(crate) fn take_due(&mut self, now: Time) -> Vec<usize> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, slot))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            if self.registered[slot] == Some(at) {
                self.registered[slot] = None;
                self.mark(slot);
                due.push(slot);
            }
        }
        due.sort_unstable();
        due
    }

    /// The bytes of its vectors.
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.heap.capacity() * size_of::<Reverse<(Time, usize)>>()
            + self.registered.capacity() * size_of::<Option<Time>>()
            + self.dirty.capacity() * size_of::<usize>()
            + self.in_dirty.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Time {
        Time::from_nanos(ns)
    }

    #[test]
    fn the_next_deadline_follows_changes_and_stale_entries_are_skipped() {
        let mut deadlines = [Some(at(30)), None, Some(at(10))];
        let mut t = Timers::new(3);
        (0..3).for_each(|s| t.mark(s));
        t.refresh(|s| deadlines[s]);
        assert_eq!(t.next(), Some(at(10)));
        deadlines[2] = Some(at(50));
        t.mark(2);
        t.refresh(|s| deadlines[s]);
        assert_eq!(t.next(), Some(at(30)));
        deadlines[1] = Some(at(20));
        t.mark(1);
        t.mark(1);
        t.refresh(|s| deadlines[s]);
        assert_eq!(t.next(), Some(at(20)));
        assert_eq!(t.take_due(at(30)), [0, 1]);
        deadlines[0] = None;
        deadlines[1] = None;
        t.refresh(|s| deadlines[s]);
        assert_eq!(t.next(), Some(at(50)));
        assert_eq!(t.take_due(at(40)), Vec::<usize>::new());
    }

    #[test]
    fn a_deadline_that_comes_back_is_due_once() {
        let mut deadlines = [Some(at(10))];
        let mut t = Timers::new(1);
        t.mark(0);
        t.refresh(|s| deadlines[s]);
        deadlines[0] = Some(at(20));
        t.mark(0);
        t.refresh(|s| deadlines[s]);
        deadlines[0] = Some(at(10));
        t.mark(0);
        t.refresh(|s| deadlines[s]);
        assert_eq!(t.take_due(at(15)), [0]);
        assert_eq!(t.take_due(at(15)), Vec::<usize>::new());
    }

    #[test]
    fn stale_entries_do_not_pile_up() {
        let mut t = Timers::new(2);
        for i in 0..10_000 {
            t.mark(0);
            t.refresh(|s| (s == 0).then(|| at(1_000_000 - i)));
        }
        assert!(t.heap.len() <= 2 * 2 + 64 + 1);
        assert_eq!(t.next(), Some(at(1_000_000 - 9_999)));
    }
}
