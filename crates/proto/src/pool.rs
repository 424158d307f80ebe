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

    pub(crate) fn give(&mut self, mut buf: Vec<u8>) {
        debug_assert!(self.out > 0);
        self.out -= 1;
        buf.clear();
        self.free.push(buf);
    }
}
