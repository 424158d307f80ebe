//! The free queue of packet buffers.

/// Packet payload buffers, recycled so that the steady state allocates
/// nothing. `limit` bounds how many may be out at once: that bound is the
/// protocol's memory bound and the trigger of back-pressure.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Vec<Vec<u8>>,
    capacity: usize,
    out: usize,
    limit: usize,
}

impl BufferPool {
    pub(crate) fn new(limit: usize, capacity: usize) -> Self {
        BufferPool { free: Vec::new(), capacity, out: 0, limit }
    }

    pub(crate) fn available(&self) -> usize {
        self.limit - self.out
    }

    pub(crate) fn in_use(&self) -> usize {
        self.out
    }

    /// Bytes of the buffers on the free list.
    pub(crate) fn free_bytes(&self) -> usize {
        self.free.capacity() * std::mem::size_of::<Vec<u8>>() + self.free.iter().map(Vec::capacity).sum::<usize>()
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// An empty buffer, or `None` when all are in use.
    pub(crate) fn take(&mut self) -> Option<Vec<u8>> {
        if self.out == self.limit {
            return None;
        }
        self.out += 1;
        Some(self.free.pop().unwrap_or_else(|| Vec::with_capacity(self.capacity)))
    }

    /// Takes back a buffer that was out. One smaller than the pool's
    /// buffers (a framed message kept as a packet's payload) is dropped
    /// rather than recycled, so that every recycled buffer still takes a
    /// whole packet without growing.
    pub(crate) fn give(&mut self, buf: Vec<u8>) {
        debug_assert!(self.out > 0);
        self.out -= 1;
        self.recycle(buf);
    }

    /// Takes back a packet's payload, which may still be shared with a
    /// datagram waiting to be sent: then only the count comes back, and the
    /// buffer is freed by whoever drops it last.
    pub(crate) fn give_shared(&mut self, payload: std::sync::Arc<Vec<u8>>) {
        match std::sync::Arc::try_unwrap(payload) {
            Ok(buf) => self.give(buf),
            Err(_) => {
                debug_assert!(self.out > 0);
                self.out -= 1;
            }
        }
    }

    /// Counts back in a packet whose payload was a piece of a message's
    /// buffer (which is not the pool's: it is freed with its last piece).
    pub(crate) fn give_shared_piece(&mut self) {
        debug_assert!(self.out > 0);
        self.out -= 1;
    }

    /// Puts a buffer on the free list without counting one back in: the
    /// one [`BufferPool::take`] handed out when its slot went to another
    /// buffer.
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() >= self.capacity {
            buf.clear();
            self.free.push(buf);
        }
    }
}

/// Accounting of received message bytes held for the application.
///
/// Complete messages waiting for `poll_event` (`ready`) may only grow while
/// they stay within the limit, except that an application that has taken
/// everything can always receive the next packet's messages; so
/// `ready <= limit + max_payload`, and the application's pace is the
/// back-pressure.
///
/// Messages in reassembly (`partial`, counted at their declared length) are
/// never held back: at most one per channel, each at most `max_message_size`.
/// Holding them back against a shared budget would couple channels — a
/// reassembly waiting for its continuation, which waits for a send buffer
/// held by a channel whose packets wait for that budget — and deadlock.
#[derive(Debug)]
pub(crate) struct RecvBudget {
    pub ready: usize,
    pub partial: usize,
    pub limit: usize,
}

/// What one in-sequence packet would do to the budget.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Admission {
    /// Bytes of the messages it completes.
    pub completes: usize,
    /// Reservation of the reassembly it finishes.
    pub finishes: usize,
    /// Reservation of the reassembly it starts.
    pub starts: usize,
}

impl RecvBudget {
    pub(crate) fn admits(&self, a: &Admission) -> bool {
        a.completes == 0 || self.ready == 0 || self.ready + a.completes <= self.limit
    }

    pub(crate) fn apply(&mut self, a: &Admission) {
        self.ready += a.completes;
        self.partial = self.partial - a.finishes + a.starts;
    }
}
