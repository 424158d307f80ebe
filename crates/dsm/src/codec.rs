//! The shared memory's messages as bytes (little-endian), and their
//! decoding, which checks every length: a message from the network never
//! makes a replica panic.

use crate::element::ElemType;

/// One write: element `index` of segment `seg` becomes `bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub seg: u32,
    pub index: u64,
    pub bits: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The sender mapped segment `seg`.
    Map { seg: u32, len: u64, elem: ElemType, name: String },
    /// Slow and PRAM writes, in the order to apply them; `sent` is the
    /// sender's clock (ns) at the flush, for warp.
    Batch { sent: u64, entries: Vec<Entry> },
    /// A coherent write, to the sequencer.
    CoherentRequest(Entry),
    /// A coherent write with its place `global` in the one order.
    Coherent { global: u64, writer: u32, entry: Entry },
    /// The sender's fence marker.
    Fence { epoch: u64 },
}

const MAP: u8 = 1;
const BATCH: u8 = 2;
const COHERENT_REQUEST: u8 = 3;
const COHERENT: u8 = 4;
const FENCE: u8 = 5;

const ENTRY_LEN: usize = 20;
pub const COHERENT_REQUEST_LEN: usize = 1 + ENTRY_LEN;
/// The longest segment name.
pub const MAX_NAME: usize = 255;

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    out.extend_from_slice(&e.seg.to_le_bytes());
    out.extend_from_slice(&e.index.to_le_bytes());
    out.extend_from_slice(&e.bits.to_le_bytes());
}

pub fn encode(m: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    match m {
        Message::Map { seg, len, elem, name } => {
            let name = &name.as_bytes()[..name.len().min(MAX_NAME)];
            out.push(MAP);
            out.extend_from_slice(&seg.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.push(elem.code());
            out.push(name.len() as u8);
            out.extend_from_slice(name);
        }
        Message::Batch { sent, entries } => {
            out.reserve(13 + entries.len() * ENTRY_LEN);
            out.push(BATCH);
            out.extend_from_slice(&sent.to_le_bytes());
            out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for e in entries {
                put_entry(&mut out, e);
            }
        }
        Message::CoherentRequest(e) => {
            out.push(COHERENT_REQUEST);
            put_entry(&mut out, e);
        }
        Message::Coherent { global, writer, entry } => {
            out.push(COHERENT);
            out.extend_from_slice(&global.to_le_bytes());
            out.extend_from_slice(&writer.to_le_bytes());
            put_entry(&mut out, entry);
        }
        Message::Fence { epoch } => {
            out.push(FENCE);
            out.extend_from_slice(&epoch.to_le_bytes());
        }
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("{} bytes where {n} were due", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn entry(&mut self) -> Result<Entry, String> {
        Ok(Entry { seg: self.u32()?, index: self.u64()?, bits: self.u64()? })
    }
}

pub fn decode(bytes: &[u8]) -> Result<Message, String> {
    let mut r = Reader(bytes);
    let m = match r.u8()? {
        MAP => {
            let seg = r.u32()?;
            let len = r.u64()?;
            let code = r.u8()?;
            let elem = ElemType::from_code(code).ok_or_else(|| format!("element type {code} is unknown"))?;
            let n = r.u8()? as usize;
            let name = String::from_utf8(r.take(n)?.to_vec()).map_err(|_| "a segment name not in UTF-8".to_string())?;
            Message::Map { seg, len, elem, name }
        }
        BATCH => {
            let sent = r.u64()?;
            let count = r.u32()? as usize;
            if r.0.len() != count * ENTRY_LEN {
                return Err(format!("a batch of {count} writes in {} bytes", r.0.len()));
            }
            let entries = (0..count).map(|_| r.entry()).collect::<Result<Vec<_>, _>>()?;
            Message::Batch { sent, entries }
        }
        COHERENT_REQUEST => Message::CoherentRequest(r.entry()?),
        COHERENT => Message::Coherent { global: r.u64()?, writer: r.u32()?, entry: r.entry()? },
        FENCE => Message::Fence { epoch: r.u64()? },
        other => return Err(format!("message kind {other} is unknown")),
    };
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the message", r.0.len()));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn messages() -> Vec<Message> {
        let e = Entry { seg: 3, index: 1 << 40, bits: u64::MAX };
        vec![
            Message::Map { seg: 0, len: 1000, elem: ElemType::F64, name: "halo".into() },
            Message::Batch { sent: 12345, entries: vec![e, Entry { seg: 0, index: 0, bits: 0 }] },
            Message::Batch { sent: 0, entries: vec![] },
            Message::CoherentRequest(e),
            Message::Coherent { global: 7, writer: 2, entry: e },
            Message::Fence { epoch: 9 },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in messages() {
            assert_eq!(decode(&encode(&m)), Ok(m.clone()), "{m:?}");
        }
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        for m in messages() {
            let bytes = encode(&m);
            for n in 0..bytes.len() {
                assert!(decode(&bytes[..n]).is_err(), "{m:?} cut at {n}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode(&longer).is_err(), "{m:?} with a byte more");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
