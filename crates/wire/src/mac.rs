//! Datagram authentication with the job key.

use std::hash::Hasher;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes256;
use siphasher::sip128::{Hasher128, SipHasher24};
use subtle::ConstantTimeEq;

use crate::header::HEADER_LEN;
use crate::polyval;

/// Bytes of MAC at the end of every datagram (the 128-bit tag of
/// AES-256-GCM-SIV).
pub const MAC_LEN: usize = 16;

/// What a datagram's MAC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Header and payload: a datagram altered anywhere is rejected. The MAC
    /// is the tag of AES-256-GCM-SIV ([`DatagramMac`]) under a key derived
    /// for this use (keyed BLAKE3 authenticates the rendezvous).
    Datagram,
    /// The header alone (which holds the payload's length), by
    /// SipHash-2-4 with a 128-bit output under a key derived for this use,
    /// so a datagram sealed one way never passes as the other. SipHash is a
    /// keyed pseudorandom function made for short inputs: over the 44-byte
    /// header it takes about 23 ns here, where the datagram MAC takes about
    /// 51 (most of it the one AES block) and keyed BLAKE3 about 82
    /// (`bulkwire bench mac`), and every datagram is sealed once and
    /// checked once.
    ///
    /// Only for a job whose sockets are all on loopback: there the kernel
    /// hands each datagram from socket to socket in memory; no other
    /// socket can bind a job socket's port (the runtime sets neither
    /// SO_REUSEADDR nor SO_REUSEPORT), and reading loopback traffic or
    /// sending under another socket's address takes raw sockets, that is
    /// CAP_NET_RAW in the job's network namespace. So what anyone else can
    /// send is a made-up header, which the MAC still rejects. The payload
    /// is then not hashed twice per datagram: with 8 processes on 2 cores,
    /// hashing (by SipHash) was a quarter of all CPU time in a total
    /// exchange. Where processes holding CAP_NET_RAW share
    /// the network namespace and are not trusted (root aside, for example
    /// containers of one pod granted it), a job should keep
    /// [`Coverage::Datagram`].
    Header,
}

/// The MAC of [`Coverage::Datagram`]: the tag of AES-256-GCM-SIV (RFC 8452)
/// with the datagram as associated data, no plaintext, and a fixed nonce,
/// [`DatagramMac::NONCE`].
///
/// GCM-SIV is resistant to a repeated nonce: with nothing to encrypt, its tag
/// is AES of POLYVAL of the data, a universal hash under a secret key
/// followed by a block cipher, which is a pseudorandom function of the data
/// and so a MAC, whatever the nonce; a forgery succeeds with probability
/// about (blocks hashed) / 2^128 per try. Deterministic, it needs no counter
/// in the datagram, and a resent datagram is sealed anew as any other.
///
/// Why not SipHash-2-4-128, the MAC before it: over a datagram of 1,472
/// bytes SipHash takes about 0.57 us here where this takes 0.17-0.18
/// (POLYVAL with carry-less multiplies, [`crate::polyval`]; one AES block;
/// `bulkwire bench mac`), and every datagram is sealed once and checked
/// once. Keyed BLAKE3 takes 1.5 (a datagram is too short for its parallel
/// chunks). Over a 44-byte header alone SipHash is the faster
/// ([`Coverage::Header`]).
#[derive(Clone)]
struct DatagramMac {
    hash: polyval::Key,
    cipher: Aes256,
}

impl DatagramMac {
    /// The nonce every datagram is sealed with.
    const NONCE: [u8; 12] = *b"bulkwire dg\0";

    /// The MAC under the key-generating key `key`: the message
    /// authentication and encryption keys derived from it for
    /// [`DatagramMac::NONCE`] as RFC 8452 §4 derives them for every nonce.
    fn new(key: &[u8; 32]) -> Self {
        Self::with(key, polyval::Backend::best())
    }

    /// [`DatagramMac::new`] with POLYVAL computed by `backend`.
    fn with(key: &[u8; 32], backend: polyval::Backend) -> Self {
        let generator = Aes256::new(key.into());
        let derived = |counter: u32| {
            let mut block = [0u8; 16];
            block[..4].copy_from_slice(&counter.to_le_bytes());
            block[4..].copy_from_slice(&Self::NONCE);
            let mut block = block.into();
            generator.encrypt_block(&mut block);
            let half: [u8; 8] = block[..8].try_into().expect("8 of 16 bytes");
            half
        };
        let mut hash_key = [0u8; 16];
        let mut cipher_key = [0u8; 32];
        for (i, half) in hash_key.chunks_exact_mut(8).chain(cipher_key.chunks_exact_mut(8)).enumerate() {
            half.copy_from_slice(&derived(i as u32));
        }
        DatagramMac { hash: polyval::Key::with(hash_key, backend), cipher: Aes256::new(&cipher_key.into()) }
    }

    /// The tag of `head` followed by `parts`.
    fn tag(&self, head: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let len = head.len() + parts.iter().map(|part| part.len()).sum::<usize>();
        // The length block: bits of associated data, then of plaintext (none).
        let mut lengths = [0u8; 16];
        lengths[..8].copy_from_slice(&(len as u64 * 8).to_le_bytes());
        let mut s = self.hash.hash(head, parts, lengths);
        for (byte, nonce) in s.iter_mut().zip(Self::NONCE) {
            *byte ^= nonce;
        }
        s[15] &= 0x7f;
        let mut block = s.into();
        self.cipher.encrypt_block(&mut block);
        block.into()
    }
}

/// How this CPU computes the datagram MAC's POLYVAL: `vpclmulqdq` (512-bit
/// carry-less multiplies), `vpclmulqdq-256`, `pclmulqdq` (128-bit) or
/// `polyval crate`.
pub fn mac_polyval() -> &'static str {
    match polyval::Backend::best() {
        polyval::Backend::Wide => "vpclmulqdq",
        polyval::Backend::Ymm => "vpclmulqdq-256",
        polyval::Backend::Clmul => "pclmulqdq",
        polyval::Backend::Portable => "polyval crate",
    }
}

/// Context of the key derived for [`Coverage::Header`].
const HEADER_KEY_CONTEXT: &str = "bulkwire 2026 datagram MAC over the header only, on loopback";
/// Context of the key derived for [`Coverage::Datagram`].
const DATAGRAM_KEY_CONTEXT: &str = "bulkwire 2026 datagram MAC, AES-256-GCM-SIV over header and payload";

/// The secret shared by the processes of one job. Every datagram carries a MAC
/// computed with it, so packets from another job or from a forger are rejected.
#[derive(Clone)]
pub struct JobKey {
    bytes: [u8; 32],
    coverage: Coverage,
    /// What seals datagrams, under a key derived from `bytes` for the
    /// coverage.
    sealer: Sealer,
}

/// The MAC of a [`Coverage`] under its key.
#[derive(Clone)]
enum Sealer {
    Datagram(Box<DatagramMac>),
    /// SipHash-2-4-128's key.
    Header([u8; 16]),
}

impl Sealer {
    fn new(job: &[u8; 32], coverage: Coverage) -> Sealer {
        match coverage {
            Coverage::Datagram => {
                Sealer::Datagram(Box::new(DatagramMac::new(&blake3::derive_key(DATAGRAM_KEY_CONTEXT, job))))
            }
            Coverage::Header => {
                let key = blake3::derive_key(HEADER_KEY_CONTEXT, job);
                Sealer::Header(key[..16].try_into().expect("16 of 32 bytes"))
            }
        }
    }
}

impl JobKey {
    pub const LEN: usize = 32;

    /// A key whose datagram MACs cover whole datagrams.
    pub fn new(bytes: [u8; 32]) -> Self {
        JobKey { bytes, coverage: Coverage::Datagram, sealer: Sealer::new(&bytes, Coverage::Datagram) }
    }

    /// The same key, with datagram MACs covering `coverage` (see
    /// [`Coverage::Header`] for when less than the whole is safe).
    pub fn covering(self, coverage: Coverage) -> Self {
        if coverage == self.coverage {
            return self;
        }
        JobKey { coverage, sealer: Sealer::new(&self.bytes, coverage), ..self }
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
        let (header, payload) = body.split_at(body.len().min(HEADER_LEN));
        self.datagram_tag_parts(header, &[payload])
    }

    /// [`JobKey::datagram_tag`] of the datagram whose header is `header`
    /// and whose payload, kept elsewhere, is `payload`.
    pub fn datagram_tag_split(&self, header: &[u8], payload: &[u8]) -> [u8; MAC_LEN] {
        self.datagram_tag_parts(header, &[payload])
    }

    /// [`JobKey::datagram_tag`] of the datagram whose header is `header`
    /// and whose payload lies in `parts`, one after the other.
    pub fn datagram_tag_parts(&self, header: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        match &self.sealer {
            Sealer::Datagram(mac) => mac.tag(header, parts),
            // SipHash-2-4-128 of the header (of all of it, if shorter).
            Sealer::Header(key) => {
                let mut hasher = SipHasher24::new_with_key(key);
                hasher.write(&header[..header.len().min(HEADER_LEN)]);
                hasher.finish128().as_bytes()
            }
        }
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
    fn the_mac_is_the_tag_of_aes_256_gcm_siv() {
        use aes_gcm_siv::aead::{AeadInPlace, KeyInit};
        use aes_gcm_siv::Aes256GcmSiv;
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            // xorshift64: varied keys and bytes, the same every run
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in (0..300).chain([1024, 1471, 1472, 1473, 8972, 65_000]) {
            let key: [u8; 32] = std::array::from_fn(|_| next() as u8);
            let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let reference = Aes256GcmSiv::new(&key.into())
                .encrypt_in_place_detached(&DatagramMac::NONCE.into(), &body, &mut [])
                .expect("no plaintext to encrypt");
            let cut = (next() as usize) % (len + 1);
            let (head, rest) = body.split_at(cut);
            let (a, b) = rest.split_at(rest.len() / 2);
            for backend in polyval::Backend::all_supported() {
                let mac = DatagramMac::with(&key, backend);
                assert_eq!(mac.tag(head, &[a, b])[..], reference[..], "{backend:?}, {len} bytes cut at {cut}");
            }
        }
    }

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
