//! Datagram authentication with the job key.

use subtle::ConstantTimeEq;

/// Bytes of MAC at the end of every datagram (a truncated keyed BLAKE3).
pub const MAC_LEN: usize = 16;

/// The secret shared by the processes of one job. Every datagram carries a MAC
/// computed with it, so packets from another job or from a forger are rejected.
#[derive(Clone)]
pub struct JobKey([u8; 32]);

impl JobKey {
    pub const LEN: usize = 32;

    pub fn new(bytes: [u8; 32]) -> Self {
        JobKey(bytes)
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
        Some(JobKey(key))
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The MAC of `data` under this key (also authenticates the rendezvous).
    pub fn tag(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let hash = blake3::keyed_hash(&self.0, data);
        let mut tag = [0u8; MAC_LEN];
        tag.copy_from_slice(&hash.as_bytes()[..MAC_LEN]);
        tag
    }

    /// Constant-time check of `tag` against the MAC of `data`.
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        self.tag(data).ct_eq(tag).into()
    }
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
        assert_eq!(key.0, again.0);
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
}
