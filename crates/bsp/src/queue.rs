//! The BSMP queue: messages sent in one superstep, readable in the next.

use std::ops::Range;

/// One message: its tag and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub tag: &'a [u8],
    pub payload: &'a [u8],
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub buffer: usize,
    pub tag: Range<usize>,
    pub payload: Range<usize>,
    /// The payload where it lies outside the buffers (address and length):
    /// in the sender's arena, which stays as it is until the next sync.
    pub elsewhere: Option<(usize, usize)>,
}

impl Entry {
    fn len(&self) -> usize {
        self.elsewhere.map_or(self.payload.len(), |(_, len)| len)
    }

    fn message<'a>(&self, buffers: &'a [Vec<u8>]) -> Message<'a> {
        let b = &buffers[self.buffer];
        let payload = match self.elsewhere {
            // SAFETY: the layer that made the entry promises `len` readable
            // bytes at `at` for as long as the queue lasts (see `Entry::elsewhere`).
            Some((at, len)) if len > 0 => unsafe { std::slice::from_raw_parts(at as *const u8, len) },
            Some(_) => &[],
            None => &b[self.payload.clone()],
        };
        Message { tag: &b[self.tag.clone()], payload }
    }
}

/// The messages of one superstep. They stay where they arrived (the
/// received streams), so `bsp_hpmove` can hand out pointers into them that
/// are valid until the next sync.
#[derive(Debug, Default)]
pub struct Queue {
    buffers: Vec<Vec<u8>>,
    entries: Vec<Entry>,
    next: usize,
    bytes_left: usize,
}

impl Queue {
    pub(crate) fn new(buffers: Vec<Vec<u8>>, entries: Vec<Entry>) -> Queue {
        let bytes_left = entries.iter().map(Entry::len).sum();
        Queue { buffers, entries, next: 0, bytes_left }
    }

    /// The buffers the messages lay in, for reuse once the queue is over.
    pub(crate) fn into_buffers(self) -> Vec<Vec<u8>> {
        self.buffers
    }

    /// Messages not yet moved.
    pub fn len(&self) -> usize {
        self.entries.len() - self.next
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Payload bytes of the messages not yet moved.
    pub fn bytes(&self) -> usize {
        self.bytes_left
    }

    /// The first message not yet moved.
    pub fn peek(&self) -> Option<Message<'_>> {
        self.entries.get(self.next).map(|e| e.message(&self.buffers))
    }

    /// Takes the first message off the queue.
    pub fn pop(&mut self) -> Option<Message<'_>> {
        let e = self.entries.get(self.next)?;
        self.next += 1;
        self.bytes_left -= e.len();
        Some(e.message(&self.buffers))
    }

    /// An iterator that takes the messages off the queue as it yields them.
    pub fn drain(&mut self) -> Messages<'_> {
        Messages {
            buffers: &self.buffers,
            entries: &self.entries,
            next: &mut self.next,
            bytes_left: &mut self.bytes_left,
        }
    }
}

/// Takes messages off the queue, in order of arrival (by sender, then by
/// the order they were sent).
pub struct Messages<'a> {
    buffers: &'a [Vec<u8>],
    entries: &'a [Entry],
    next: &'a mut usize,
    bytes_left: &'a mut usize,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        let e = self.entries.get(*self.next)?;
        *self.next += 1;
        *self.bytes_left -= e.len();
        Some(e.message(self.buffers))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.entries.len() - *self.next;
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_taken_in_order() {
        let buf = b"t1hello t2world".to_vec();
        let far = b"elsewhere".to_vec();
        let entries = vec![
            Entry { buffer: 0, tag: 0..2, payload: 2..8, elsewhere: None },
            Entry { buffer: 0, tag: 0..0, payload: 0..0, elsewhere: Some((far.as_ptr() as usize, 4)) },
            Entry { buffer: 0, tag: 8..10, payload: 10..15, elsewhere: None },
        ];
        let mut q = Queue::new(vec![buf], entries);
        assert_eq!((q.len(), q.bytes()), (3, 15));
        assert_eq!(q.peek().unwrap().tag, b"t1");
        assert_eq!(q.pop().unwrap().payload, b"hello ");
        assert_eq!((q.peek().unwrap().tag, q.peek().unwrap().payload), (&b""[..], &b"else"[..]));
        assert_eq!(q.pop().unwrap().payload, b"else");
        assert_eq!((q.len(), q.bytes()), (1, 5));
        let rest: Vec<_> = q.drain().map(|m| m.payload.to_vec()).collect();
        assert_eq!(rest, vec![b"world".to_vec()]);
        assert!(q.is_empty() && q.pop().is_none() && q.bytes() == 0);
    }
}
