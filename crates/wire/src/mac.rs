//! Datagram authentication with the job key.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher24};
use subtle::ConstantTimeEq;

use crate::header::HEADER_LEN;

/// Bytes of MAC at the end of every datagram (SipHash-2-4 with a 128-bit
/// output).
pub const MAC_LEN: usize = 16;

/// What a datagram's MAC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Header and payload: a datagram altered anywhere is rejected. The MAC
    /// is SipHash-2-4 with a 128-bit output under a key derived for this
    /// use (keyed BLAKE3 authenticates the rendezvous). SipHash is a keyed
    /// pseudorandom function, secure as a MAC at any length and fastest on
    /// short inputs; over a datagram of 1,472 bytes it takes about 0.6 us
    /// where keyed BLAKE3 takes about 1.6 (one block after another: a
    /// datagram is too short for BLAKE3's parallel chunks), and every
    /// datagram is sealed once and checked once.
    Datagram,
    /// The header alone (which holds the payload's length), by SipHash-2-4
    /// with a 128-bit output under a key derived for this use, so a
    /// datagram sealed one way never passes as the other. SipHash is a
    /// keyed pseudorandom function made for short inputs: over the 60-byte
    /// header it takes about 35 ns where keyed BLAKE3 takes about 90 (one
    /// compression, behind a hasher's setup and finalisation), and every
    /// datagram is sealed once and checked once.
    ///
    /// Only for a job whose sockets are all on loopback: there the kernel
    /// hands each datagram from socket to socket in memory; no other
    /// socket can bind a job socket's port (the runtime sets neither
    /// SO_REUSEADDR nor SO_REUSEPORT), and reading loopback traffic or
    /// sending under another socket's address takes raw sockets, that is
    /// CAP_NET_RAW in the job's network namespace. So what anyone else can
    /// send is a made-up header, which the MAC still rejects. The payload
    /// is then not hashed twice per datagram: with 8 processes on 2 cores,
    /// hashing was a quarter of all CPU time in a total exchange. Where
    /// processes holding CAP_NET_RAW share the network namespace and are
    /// not trusted (root aside, for example containers of one pod granted
    /// it), a job should keep [`Coverage::Datagram`].
    Header,
}

/// Context of the key derived for [`Coverage::Header`].
const HEADER_KEY_CONTEXT: &str = "bulkwire 2026 datagram MAC over the header only, on loopback";
/// Context of the key derived for [`Coverage::Datagram`].
const DATAGRAM_KEY_CONTEXT: &str = "bulkwire 2026 datagram MAC over header and payload";

/// The secret shared by the processes of one job. Every datagram carries a MAC
/// computed with it, so packets from another job or from a forger are rejected.
#[derive(Clone)]
pub struct JobKey {
    bytes: [u8; 32],
    coverage: Coverage,
    /// The key that seals datagrams, derived from `bytes` for the
    /// coverage (SipHash takes its first 16 bytes).
    datagram_key: [u8; 32],
}

impl JobKey {
    pub const LEN: usize = 32;

    /// A key whose datagram MACs cover whole datagrams.
    pub fn new(bytes: [u8; 32]) -> Self {
        JobKey { bytes, coverage: Coverage::Datagram, datagram_key: bytes }.covering(Coverage::Datagram)
    }

    /// The same key, with datagram MACs covering `coverage` (see
    /// [`Coverage::Header`] for when less than the whole is safe).
    pub fn covering(self, coverage: Coverage) -> Self {
        let datagram_key = match coverage {
            Coverage::Datagram => blake3::derive_key(DATAGRAM_KEY_CONTEXT, &self.bytes),
            Coverage::Header => blake3::derive_key(HEADER_KEY_CONTEXT, &self.bytes),
        };
        JobKey { coverage, datagram_key, ..self }
    }

    pub fn coverage(&self) -> Coverage {
        self.coverage
    }

    /// Parses a key written as 64 hexadecimal digits (how the launcher passes it
    /// in the environment).
    pub fn from_hex(text: &str) -> Option<Self> {
        let text = text.trim().as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            key[i] = (hi * 16 + lo) as u8;
        }
        Some(JobKey::new(key))
    }

    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The MAC of all of `data` under this key (authenticates the
    /// rendezvous; datagrams use [`JobKey::datagram_tag`]).
    pub fn tag(&self, data: &[u8]) -> [u8; MAC_LEN] {
        truncated_mac(&self.bytes, data)
    }

    /// Constant-time check of `tag` against the MAC of `data`.
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        same_tag(self.tag(data), tag)
    }

    /// The MAC of a datagram's header and payload (`body`), over what this
    /// key's [`Coverage`] says.
    pub fn datagram_tag(&self, body: &[u8]) -> [u8; MAC_LEN] {
        match self.coverage {
            Coverage::Datagram => self.datagram_tag_parts(body, &[]),
            Coverage::Header => self.header_mac(body),
        }
    }

    /// A SipHash-2-4-128 hasher under the datagram key.
    fn hasher(&self) -> SipHasher24 {
        let key: &[u8; 16] = self.datagram_key[..16].try_into().expect("16 of 32 bytes");
        SipHasher24::new_with_key(key)
    }

    /// The MAC of [`Coverage::Header`]: SipHash-2-4-128 of the first
    /// [`HEADER_LEN`] bytes of `datagram` (all of it, if shorter).
    fn header_mac(&self, datagram: &[u8]) -> [u8; MAC_LEN] {
        let mut hasher = self.hasher();
        hasher.write(&datagram[..datagram.len().min(HEADER_LEN)]);
        hasher.finish128().as_bytes()
    }

    /// [`JobKey::datagram_tag`] of the datagram whose header is `header`
    /// and whose payload, kept elsewhere, is `payload`.
    pub fn datagram_tag_split(&self, header: &[u8], payload: &[u8]) -> [u8; MAC_LEN] {
        self.datagram_tag_parts(header, &[payload])
    }

    /// [`JobKey::datagram_tag`] of the datagram whose header is `header`
    /// and whose payload lies in `parts`, one after the other.
    pub fn datagram_tag_parts(&self, header: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        if self.coverage == Coverage::Header {
            return self.header_mac(header);
        }
        let mut hasher = self.hasher();
        hasher.write(header);
        for part in parts {
            hasher.write(part);
        }
        hasher.finish128().as_bytes()
    }

    /// Constant-time check of a datagram's `tag`.
    pub fn verify_datagram(&self, body: &[u8], tag: &[u8]) -> bool {
        same_tag(self.datagram_tag(body), tag)
    }

    /// [`JobKey::verify_datagram`] of a datagram whose header is `header`
    /// and whose payload lies in `parts`.
    pub fn verify_datagram_parts(&self, header: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        same_tag(self.datagram_tag_parts(header, parts), tag)
    }
}

/// Whether `tag` is `expected`, in constant time: the two compared as one
/// 128-bit number (subtle's comparison of byte slices puts an optimisation
/// barrier on every byte, about 13 ns a datagram here).
fn same_tag(expected: [u8; MAC_LEN], tag: &[u8]) -> bool {
    let Ok(tag) = <[u8; MAC_LEN]>::try_from(tag) else { return false };
    u128::from_le_bytes(expected).ct_eq(&u128::from_le_bytes(tag)).into()
}

fn truncated_mac(key: &[u8; 32], data: &[u8]) -> [u8; MAC_LEN] {
    let hash = blake3::keyed_hash(key, data);
    let mut tag = [0u8; MAC_LEN];
    tag.copy_from_slice(&hash.as_bytes()[..MAC_LEN]);
    tag
}

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("JobKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let key = JobKey::new(std::array::from_fn(|i| i as u8 * 7));
        let again = JobKey::from_hex(&key.to_hex()).unwrap();
        assert_eq!(key.bytes, again.bytes);
        assert!(JobKey::from_hex("zz").is_none());
        assert!(JobKey::from_hex(&"g".repeat(64)).is_none());
    }

    #[test]
    fn tag_depends_on_key_and_data() {
        let a = JobKey::new([1; 32]);
        let b = JobKey::new([2; 32]);
        assert_ne!(a.tag(b"x"), b.tag(b"x"));
        assert_ne!(a.tag(b"x"), a.tag(b"y"));
        assert!(a.verify(b"x", &a.tag(b"x")));
        assert!(!a.verify(b"x", &b.tag(b"x")));
    }

    #[test]
    fn header_coverage_covers_the_header_under_its_own_key() {
        let whole = JobKey::new([5; 32]);
        let head = whole.clone().covering(Coverage::Header);
        let body: Vec<u8> = (0..HEADER_LEN as u8 + 40).collect();
        let tag = head.datagram_tag(&body);
        // The payload is not covered; every header byte is.
        let mut other_payload = body.clone();
        other_payload[HEADER_LEN + 3] ^= 1;
        assert!(head.verify_datagram(&other_payload, &tag));
        for i in 0..HEADER_LEN {
            let mut forged = body.clone();
            forged[i] ^= 0x80;
            assert!(!head.verify_datagram(&forged, &tag), "header byte {i} is not covered");
        }
        // Neither coverage accepts the other's MAC, even for a bare header.
        let bare = &body[..HEADER_LEN];
        assert!(!whole.verify_datagram(bare, &head.datagram_tag(bare)));
        assert!(!head.verify_datagram(bare, &whole.datagram_tag(bare)));
        assert!(!whole.verify_datagram(&body, &tag));
        // The rendezvous MAC stays over all the data with the job's key,
        // apart from either datagram key.
        assert_eq!(head.tag(b"rendezvous"), whole.tag(b"rendezvous"));
        assert_ne!(whole.datagram_tag(&body), whole.tag(&body));
    }

    #[test]
    fn datagram_coverage_covers_every_byte_however_the_payload_lies() {
        let key = JobKey::new([9; 32]);
        let body: Vec<u8> = (0..1472u32).map(|i| (i * 31) as u8).collect();
        let tag = key.datagram_tag(&body);
        assert!(key.verify_datagram(&body, &tag));
        for i in (0..body.len()).step_by(7).chain([body.len() - 1]) {
            let mut forged = body.clone();
            forged[i] ^= 1;
            assert!(!key.verify_datagram(&forged, &tag), "byte {i} is not covered");
        }
        // A payload in parts, split anywhere, has the MAC of the whole.
        let (header, payload) = body.split_at(HEADER_LEN);
        for cut in [0, 1, 7, 8, 9, 700, payload.len()] {
            let (a, b) = payload.split_at(cut);
            assert_eq!(key.datagram_tag_parts(header, &[a, b]), tag, "cut at {cut}");
            assert!(key.verify_datagram_parts(header, &[a, &[], b], &tag));
        }
        assert_eq!(key.datagram_tag_split(header, payload), tag);
        // Truncated, extended or under another job's key: rejected.
        assert!(!key.verify_datagram(&body[..body.len() - 1], &tag));
        assert!(!key.verify_datagram(&[&body[..], &[0]].concat(), &tag));
        assert!(!JobKey::new([8; 32]).verify_datagram(&body, &tag));
        assert!(!key.verify_datagram(&body, &tag[..15]));
    }
}
