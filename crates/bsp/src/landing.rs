//! Landing puts as their pieces arrive (phase 6), instead of after the
//! transfer (see `Bsp::transfer`).
//!
//! A [`Lander`] reads one sender's stream piece by piece: each put
//! record's header (which may be split between pieces) names where its
//! data goes, and the data is written there as it comes, the piece's
//! buffer then free to take the next datagram. At the first record that
//! is not a put (a message, a get's reply, a direct put), or a put the
//! process may not land (an unknown registration, out of the area's
//! bounds), the lander stops: that record and the rest of the stream land
//! after the transfer as before, in the standard's order, and the error,
//! if any, is reported there as before.
//!
//! Whether a stream may land early at all is the sync's decision: only
//! where nothing that lands after it could be overwritten by it.

use crate::repackaging::PUT_HEADER;

/// Where a process's puts may land.
pub(crate) trait Areas {
    /// Where `len` bytes at `offset` of registration `slot` go, if the
    /// process may put there: an opaque area and the offset in it.
    fn resolve(&self, slot: u32, offset: u64, len: u64) -> Option<(crate::registry::Area, usize)>;
    /// Writes `bytes` at `at` of `area` (resolved, so within it).
    fn write(&mut self, area: crate::registry::Area, at: usize, bytes: &[u8]);
    /// The address of byte `at` of `area` (resolved), where the area lies
    /// at one for the whole sync and may be written there by others than
    /// [`Areas::write`] (a datagram read there straight): `None` if not.
    fn address(&self, area: crate::registry::Area, at: usize) -> Option<usize>;
}

/// The put whose data is landing: where its next byte goes (and its
/// address, where [`Areas::address`] gave one), and how many are left.
#[derive(Debug)]
struct Put {
    area: crate::registry::Area,
    at: usize,
    left: usize,
    addr: Option<usize>,
}

/// One sender's stream, landing as it comes.
#[derive(Debug, Default)]
pub(crate) struct Lander {
    /// The bytes of a put's header read so far, where a piece ended inside it.
    header: Vec<u8>,
    /// The put whose data is landing.
    put: Option<Put>,
    /// Bytes of puts landed.
    pub landed: u64,
}

/// What [`Lander::feed`] did with a piece.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Landed all of it (or kept the start of a header it ends in).
    All,
    /// Stopped at a record that lands after the transfer: the rest of the
    /// stream is `header` followed by the piece from `at` on.
    Stopped { header: Vec<u8>, at: usize },
}

impl Lander {
    /// Lands what it can of the next piece of the stream.
    pub fn feed(&mut self, piece: &[u8], areas: &mut impl Areas) -> Fed {
        let mut pos = 0;
        while pos < piece.len() {
            if let Some(put) = &mut self.put {
                let n = put.left.min(piece.len() - pos);
                areas.write(put.area, put.at, &piece[pos..pos + n]);
                pos += n;
                self.advance(n);
                continue;
            }
            if self.header.is_empty() && !is_put(piece[pos]) {
                return Fed::Stopped { header: Vec::new(), at: pos };
            }
            let n = (PUT_HEADER - self.header.len()).min(piece.len() - pos);
            self.header.extend_from_slice(&piece[pos..pos + n]);
            pos += n;
            if self.header.len() < PUT_HEADER {
                continue;
            }
            let h = &self.header;
            let slot = u32::from_le_bytes(h[1..5].try_into().expect("4 bytes"));
            let offset = u64::from_le_bytes(h[5..13].try_into().expect("8 bytes"));
            let len = u64::from_le_bytes(h[13..21].try_into().expect("8 bytes"));
            match areas.resolve(slot, offset, len) {
                Some((area, at)) => {
                    self.header.clear();
                    // Resolved: within an area, so within memory.
                    let addr = areas.address(area, at);
                    self.put = (len > 0).then_some(Put { area, at, left: len as usize, addr });
                }
                None => return Fed::Stopped { header: std::mem::take(&mut self.header), at: pos },
            }
        }
        Fed::All
    }

    /// `n` bytes (at most those left) of the put whose data is landing
    /// have landed.
    fn advance(&mut self, n: usize) {
        let Some(put) = &mut self.put else { return };
        put.at += n;
        put.left -= n;
        put.addr = put.addr.map(|a| a + n);
        self.landed += n as u64;
        if put.left == 0 {
            self.put = None;
        }
    }

    /// Where in memory the next bytes of the put whose data is landing go,
    /// and how many are left: for reading them there straight, where the
    /// area lies at an address ([`Areas::address`]).
    pub fn place(&self) -> Option<(usize, usize)> {
        let put = self.put.as_ref()?;
        Some((put.addr?, put.left))
    }

    /// The next `n` bytes of the stream were the put's data, read straight
    /// to where they go ([`Lander::place`]): `false` (nothing changed) if
    /// no put whose data is landing has that many left, or its area has
    /// no address.
    pub fn skip(&mut self, n: usize) -> bool {
        match &self.put {
            Some(put) if put.addr.is_some() && put.left >= n => {
                self.advance(n);
                true
            }
            _ => n == 0,
        }
    }

    /// Whether the stream may end here: not inside a record.
    pub fn between_records(&self) -> bool {
        self.header.is_empty() && self.put.is_none()
    }
}

fn is_put(kind: u8) -> bool {
    kind == crate::repackaging::PUT || kind == crate::repackaging::HPPUT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Area;
    use crate::repackaging::{self, parse_parts, Record};

    /// Areas by slot, each `len` bytes.
    struct Memory(Vec<Vec<u8>>);

    impl Areas for Memory {
        fn resolve(&self, slot: u32, offset: u64, len: u64) -> Option<(Area, usize)> {
            let area = self.0.get(slot as usize)?;
            let end = offset.checked_add(len)?;
            (end <= area.len() as u64)
                .then_some((Area { addr: slot as usize, len: area.len(), owned: None }, offset as usize))
        }
        fn write(&mut self, area: Area, at: usize, bytes: &[u8]) {
            self.0[area.addr][at..at + bytes.len()].copy_from_slice(bytes);
        }
        /// Slot and offset, not an address: these tests only follow it.
        fn address(&self, area: Area, at: usize) -> Option<usize> {
            Some((area.addr << 32) + at)
        }
    }

    /// Feeds `stream` cut at `cuts`; returns the rest that did not land.
    fn feed_cut(stream: &[u8], cuts: &[usize], memory: &mut Memory) -> (Vec<u8>, Lander) {
        let mut lander = Lander::default();
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < stream.len()));
        bounds.push(stream.len());
        for w in bounds.windows(2) {
            if let Fed::Stopped { header, at } = lander.feed(&stream[w[0]..w[1]], memory) {
                let mut rest = header;
                rest.extend_from_slice(&stream[w[0] + at..]);
                return (rest, lander);
            }
        }
        (Vec::new(), lander)
    }

    #[test]
    fn puts_land_wherever_the_pieces_are_cut() {
        let mut stream = Vec::new();
        repackaging::put(&mut stream, 0, 2, b"abcdef");
        repackaging::put(&mut stream, 1, 0, b"");
        repackaging::put(&mut stream, 1, 1, &[7; 40]);
        repackaging::put(&mut stream, 0, 0, b"xy");
        for a in 0..stream.len() {
            for b in a..stream.len() {
                let mut memory = Memory(vec![vec![0; 10], vec![0; 41]]);
                let (rest, lander) = feed_cut(&stream, &[a, b], &mut memory);
                assert!(rest.is_empty());
                assert!(lander.between_records());
                assert_eq!(lander.landed, 48);
                assert_eq!(memory.0[0], b"xyabcdef\0\0");
                assert_eq!(memory.0[1][1..], [7; 40]);
            }
        }
    }

    #[test]
    fn the_first_record_that_is_not_a_put_is_left_with_the_rest() {
        let mut stream = Vec::new();
        repackaging::put(&mut stream, 0, 0, b"abc");
        let rest_at = stream.len();
        repackaging::send(&mut stream, b"t", b"message");
        repackaging::put(&mut stream, 0, 3, b"def");
        for cut in 0..stream.len() {
            let mut memory = Memory(vec![vec![0; 6]]);
            let (rest, _) = feed_cut(&stream, &[cut], &mut memory);
            assert_eq!(rest, stream[rest_at..]);
            assert_eq!(memory.0[0], b"abc\0\0\0", "the put after the message waits for it");
            let records = parse_parts(&[&rest], 0).unwrap();
            assert!(matches!(records[0], Record::Send { .. }));
        }
    }

    #[test]
    fn a_put_that_may_not_land_is_left_whole_with_its_header() {
        let mut stream = Vec::new();
        repackaging::put(&mut stream, 0, 0, b"ab");
        let rest_at = stream.len();
        repackaging::put(&mut stream, 0, 5, b"too far");
        repackaging::put(&mut stream, 9, 0, b"no such slot");
        for cut in 0..stream.len() {
            let mut memory = Memory(vec![vec![0; 6]]);
            let (rest, lander) = feed_cut(&stream, &[cut], &mut memory);
            assert_eq!(rest, stream[rest_at..], "cut at {cut}");
            assert_eq!(lander.landed, 2);
            assert_eq!(memory.0[0], b"ab\0\0\0\0");
        }
    }

    #[test]
    fn bytes_read_where_the_put_goes_are_skipped() {
        let mut stream = Vec::new();
        repackaging::put(&mut stream, 0, 2, &[7; 30]);
        repackaging::put(&mut stream, 0, 0, b"ab");
        let data_at = PUT_HEADER;
        let mut memory = Memory(vec![vec![0; 40]]);
        let mut lander = Lander::default();
        assert_eq!(lander.place(), None, "no put yet");
        assert_eq!(lander.feed(&stream[..data_at + 4], &mut memory), Fed::All);
        // Slot 0 of area 0, at 2 + 4: 26 bytes left.
        assert_eq!(lander.place(), Some((6, 26)));
        assert!(!lander.skip(27), "more than the put has left");
        // 20 of them read there (not by the lander), then the rest fed.
        memory.0[0][6..26].fill(7);
        assert!(lander.skip(20));
        assert_eq!(lander.place(), Some((26, 6)));
        assert_eq!(lander.feed(&stream[data_at + 24..], &mut memory), Fed::All);
        assert!(lander.between_records());
        assert_eq!(lander.landed, 32);
        assert_eq!(memory.0[0][..2], *b"ab");
        assert!(memory.0[0][2..32].iter().all(|&b| b == 7));
        assert!(!lander.skip(1), "between records");
        assert!(lander.skip(0));
    }

    #[test]
    fn a_stream_cut_inside_a_record_is_not_between_records() {
        let mut stream = Vec::new();
        repackaging::put(&mut stream, 0, 0, b"abcd");
        for end in 1..stream.len() {
            let mut memory = Memory(vec![vec![0; 4]]);
            let (_, lander) = feed_cut(&stream[..end], &[], &mut memory);
            assert!(!lander.between_records(), "ends at {end}");
        }
    }
}
