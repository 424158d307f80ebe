//! Byte encoding of the groups' messages. Hand-written: a few integers,
//! names and rank lists, read with every length checked against what is
//! left, so that a message from the network can only be refused, never
//! read past its end or make a huge allocation.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("a message ends early")]
    Short,
    #[error("a message has {0} bytes too many")]
    Trailing(usize),
    #[error("unknown {0} {1}")]
    Unknown(&'static str, u8),
    #[error("a name that is not UTF-8")]
    Name,
}

#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.bytes.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A name of at most 255 bytes (longer ones are refused before this).
    pub fn str(&mut self, s: &str) -> &mut Writer {
        let s = &s.as_bytes()[..s.len().min(255)];
        self.u8(s.len() as u8);
        self.bytes.extend_from_slice(s);
        self
    }

    pub fn ranks(&mut self, ranks: &[u32]) -> &mut Writer {
        self.u32(ranks.len() as u32);
        for &r in ranks {
            self.u32(r);
        }
        self
    }
}

pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Short);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn str(&mut self) -> Result<String, DecodeError> {
        let len = self.u8()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| DecodeError::Name)
    }

    pub fn ranks(&mut self) -> Result<Vec<u32>, DecodeError> {
        let n = self.u32()? as usize;
        // The count is checked against the bytes there before anything is
        // allocated.
        if n > self.bytes.len() / 4 {
            return Err(DecodeError::Short);
        }
        (0..n).map(|_| self.u32()).collect()
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    pub fn end(&self) -> Result<(), DecodeError> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}
