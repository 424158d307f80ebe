//! POLYVAL (RFC 8452 §3), the universal hash of AES-GCM-SIV, which the
//! datagram MAC ([`crate::mac`]) runs over every datagram sent and received.
//!
//! Our own loops on x86-64, the `polyval` crate elsewhere. The crate
//! (0.6 and 0.7) multiplies one to four blocks per reduction with 128-bit
//! carry-less multiplies; over a datagram of 1,472 bytes it took 0.78 us here
//! where these take 0.30 with 128-bit multiplies and eight blocks per
//! reduction, and 0.13 with 512-bit ones (VPCLMULQDQ) and sixteen, and a
//! datagram is hashed twice (sealed, checked). On a CPU with VPCLMULQDQ but
//! not AVX-512 (AMD Zen 3), the whole MAC of 1,472 bytes took 0.30-0.32 us
//! with 256-bit multiplies (three a block, by Karatsuba) against 0.50 with
//! 128-bit ones, and of 64,000 bytes 6.6-7.4 against 14.2-15.3 (7.5-9.3
//! with four 256-bit multiplies a block; `bulkwire bench mac`). The crate
//! stays the portable path and the tests' reference.
//!
//! The arithmetic: a block is an element of GF(2^128) modulo
//! x^128 + x^127 + x^126 + x^121 + 1, bit i of the little-endian 128-bit
//! number the coefficient of x^i; dot(a, b) = a b x^-128. POLYVAL over
//! blocks X_1..X_n is S_n with S_0 = 0, S_j = dot(S_{j-1} + X_j, H). Since
//! dot(dot(a, H), H) = dot(a, dot(H, H)), k blocks fold into one step,
//! S_{j+k} = sum over i of dot(X'_i, H^(k+1-i)) with X'_1 = S_j + X_{j+1}
//! and the powers taken with dot, and as the reduction by x^-128 is linear
//! the k unreduced products are added first and reduced once.

/// The hash key with what the CPU can do with it.
#[derive(Clone)]
pub(crate) struct Key {
    backend: Backend,
    /// H^1 to H^16 (dot powers), for the carry-less backends.
    powers: [u128; 16],
    portable: polyval::Polyval,
}

/// How blocks are multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// 512-bit carry-less multiplies, four blocks each, sixteen blocks per
    /// reduction (x86-64 with AVX-512F and VPCLMULQDQ).
    Wide,
    /// 256-bit carry-less multiplies, two blocks each, sixteen blocks per
    /// reduction (x86-64 with AVX2 and VPCLMULQDQ, but not AVX-512F: AMD's
    /// Zen 3, Intel's Alder Lake).
    Ymm,
    /// 128-bit carry-less multiplies, eight blocks per reduction (x86-64
    /// with PCLMULQDQ).
    Clmul,
    /// The `polyval` crate (its own detection of ARMv8 or x86 carry-less
    /// multiplies, else a constant-time software multiply).
    Portable,
}

impl Backend {
    /// Whether this CPU can run the backend.
    pub(crate) fn supported(self) -> bool {
        match self {
            Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Clmul => std::arch::is_x86_feature_detected!("pclmulqdq"),
            #[cfg(target_arch = "x86_64")]
            Backend::Wide => {
                Backend::Clmul.supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("vpclmulqdq")
            }
            #[cfg(target_arch = "x86_64")]
            Backend::Ymm => {
                Backend::Clmul.supported()
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("vpclmulqdq")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every backend this CPU runs, fastest first.
    #[cfg(test)]
    pub(crate) fn all_supported() -> Vec<Backend> {
        [Backend::Wide, Backend::Ymm, Backend::Clmul, Backend::Portable].into_iter().filter(|b| b.supported()).collect()
    }

    /// The fastest backend this CPU runs.
    pub(crate) fn best() -> Backend {
        [Backend::Wide, Backend::Ymm, Backend::Clmul].into_iter().find(|b| b.supported()).unwrap_or(Backend::Portable)
    }
}

impl Key {
    /// The key `h` with `backend`, or the portable one where this CPU cannot
    /// run it.
    pub(crate) fn with(h: [u8; 16], backend: Backend) -> Key {
        use polyval::universal_hash::KeyInit;
        let backend = if backend.supported() { backend } else { Backend::Portable };
        let mut powers = [0u128; 16];
        #[cfg(target_arch = "x86_64")]
        if backend != Backend::Portable {
            // SAFETY: PCLMULQDQ is present (every backend but the portable
            // one checked it above).
            powers = unsafe { x86::powers(u128::from_le_bytes(h)) };
        }
        Key { backend, powers, portable: polyval::Polyval::new(&h.into()) }
    }

    #[cfg(test)]
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// A hash of nothing yet under this key.
    pub(crate) fn hasher(&self) -> Hasher<'_> {
        Hasher { key: self, acc: 0, portable: None, pending: [0; 16], filled: 0 }
    }

    /// POLYVAL of whole blocks (`blocks.len()` a multiple of 16), folded
    /// with as few reductions as the backend can (one for up to 15 blocks
    /// with carry-less multiplies).
    pub(crate) fn hash_blocks(&self, blocks: &[u8]) -> [u8; 16] {
        assert_eq!(blocks.len() % 16, 0, "POLYVAL hashes whole blocks");
        let mut acc = 0;
        let mut portable = None;
        self.blocks(&mut acc, &mut portable, blocks);
        result(acc, portable)
    }

    /// Folds whole blocks (`data.len()` a multiple of 16) into `acc`, or
    /// into `portable` for the portable backend.
    fn blocks(&self, acc: &mut u128, portable: &mut Option<polyval::Polyval>, data: &[u8]) {
        debug_assert_eq!(data.len() % 16, 0);
        match self.backend {
            // SAFETY: `Key::with` only keeps a backend the CPU supports.
            #[cfg(target_arch = "x86_64")]
            Backend::Wide => *acc = unsafe { x86::blocks_wide(&self.powers, *acc, data) },
            #[cfg(target_arch = "x86_64")]
            Backend::Ymm => *acc = unsafe { x86::blocks_ymm(&self.powers, *acc, data) },
            #[cfg(target_arch = "x86_64")]
            Backend::Clmul => *acc = unsafe { x86::blocks(&self.powers, *acc, data) },
            _ => {
                use polyval::universal_hash::UniversalHash;
                portable.get_or_insert_with(|| self.portable.clone()).update_padded(data);
            }
        }
    }
}

/// POLYVAL of bytes given in pieces, as if one after the other, zero-padded
/// to a whole block at the end.
pub(crate) struct Hasher<'k> {
    key: &'k Key,
    acc: u128,
    portable: Option<polyval::Polyval>,
    /// Bytes of a block not yet whole.
    pending: [u8; 16],
    filled: usize,
}

impl Hasher<'_> {
    pub(crate) fn update(&mut self, mut data: &[u8]) {
        if self.filled > 0 {
            let take = (16 - self.filled).min(data.len());
            self.pending[self.filled..self.filled + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled < 16 {
                return;
            }
            let block = self.pending;
            self.key.blocks(&mut self.acc, &mut self.portable, &block);
            self.filled = 0;
        }
        let whole = data.len() & !15;
        if whole > 0 {
            self.key.blocks(&mut self.acc, &mut self.portable, &data[..whole]);
        }
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    /// POLYVAL of what was given, zero-padded, followed by the block `last`.
    pub(crate) fn finish_with(mut self, last: [u8; 16]) -> [u8; 16] {
        let mut tail = [0u8; 32];
        let start = if self.filled > 0 {
            tail[..self.filled].copy_from_slice(&self.pending[..self.filled]);
            0
        } else {
            16
        };
        tail[16..].copy_from_slice(&last);
        self.key.blocks(&mut self.acc, &mut self.portable, &tail[start..]);
        result(self.acc, self.portable)
    }
}

/// The hash folded so far: the portable backend's where it ran, else `acc`.
fn result(acc: u128, portable: Option<polyval::Polyval>) -> [u8; 16] {
    use polyval::universal_hash::UniversalHash;
    portable.map_or(acc.to_le_bytes(), |portable| portable.finalize().into())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The carry-less backends. Every function needs PCLMULQDQ, the
    //! `_wide` ones also AVX-512F and VPCLMULQDQ, the `_ymm` one AVX2 and
    //! VPCLMULQDQ, which the caller checks.
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn load(v: u128) -> __m128i {
        _mm_loadu_si128((&v as *const u128).cast())
    }

    #[inline(always)]
    unsafe fn store(v: __m128i) -> u128 {
        let mut out = 0u128;
        _mm_storeu_si128((&mut out as *mut u128).cast(), v);
        out
    }

    /// The 256-bit carry-less product of `a` and `b` as its low, high and
    /// middle (cross) 128-bit terms.
    #[inline(always)]
    unsafe fn wide(a: __m128i, b: __m128i) -> (__m128i, __m128i, __m128i) {
        let lo = _mm_clmulepi64_si128(a, b, 0x00);
        let hi = _mm_clmulepi64_si128(a, b, 0x11);
        let mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
        (lo, hi, mid)
    }

    /// A product from [`wide`] (or a sum of them) times x^-128 modulo the
    /// POLYVAL polynomial: the low half folded up twice by multiples of
    /// x^127 + x^126 + x^121 + 1 (the Montgomery reduction of Gueron's
    /// AES-GCM-SIV implementation).
    #[inline(always)]
    unsafe fn reduce(lo: __m128i, hi: __m128i, mid: __m128i) -> __m128i {
        let low = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
        let high = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
        let poly = _mm_set_epi64x(0xc200_0000_0000_0000_u64 as i64, 1);
        let low = _mm_xor_si128(_mm_shuffle_epi32(low, 0x4e), _mm_clmulepi64_si128(low, poly, 0x10));
        let low = _mm_xor_si128(_mm_shuffle_epi32(low, 0x4e), _mm_clmulepi64_si128(low, poly, 0x10));
        _mm_xor_si128(low, high)
    }

    /// H^1 to H^16.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn powers(h: u128) -> [u128; 16] {
        let h1 = load(h);
        let mut power = h1;
        let mut out = [h; 16];
        for slot in out.iter_mut().skip(1) {
            let (lo, hi, mid) = wide(power, h1);
            power = reduce(lo, hi, mid);
            *slot = store(power);
        }
        out
    }

    /// Folds the `k` (at most 16) blocks at `data` into `acc` with one
    /// reduction.
    #[inline(always)]
    unsafe fn fold(powers: &[u128; 16], acc: __m128i, data: *const u8, k: usize) -> __m128i {
        let first = _mm_xor_si128(acc, _mm_loadu_si128(data.cast()));
        let (mut lo, mut hi, mut mid) = wide(first, load(powers[k - 1]));
        for i in 1..k {
            let (l, h, m) = wide(_mm_loadu_si128(data.add(16 * i).cast()), load(powers[k - 1 - i]));
            lo = _mm_xor_si128(lo, l);
            hi = _mm_xor_si128(hi, h);
            mid = _mm_xor_si128(mid, m);
        }
        reduce(lo, hi, mid)
    }

    /// Folds whole blocks into `acc`: eight per reduction while sixteen or
    /// more are left, then the rest (up to fifteen) in one.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn blocks(powers: &[u128; 16], acc: u128, data: &[u8]) -> u128 {
        let mut acc = load(acc);
        let mut rest = data;
        while rest.len() >= 256 {
            acc = fold(powers, acc, rest.as_ptr(), 8);
            rest = &rest[128..];
        }
        if rest.len() >= 16 {
            acc = fold(powers, acc, rest.as_ptr(), rest.len() / 16);
        }
        store(acc)
    }

    /// Folds whole blocks into `acc`: sixteen per reduction, four to each
    /// 512-bit multiply, then the rest as [`blocks`] does.
    #[target_feature(enable = "pclmulqdq,sse2,avx2,avx512f,vpclmulqdq")]
    pub(super) unsafe fn blocks_wide(powers: &[u128; 16], acc: u128, data: &[u8]) -> u128 {
        if data.len() < 256 {
            return blocks(powers, acc, data);
        }
        // Lane j of key[i] is H^(16 - 4i - j), matching block 4i + j.
        let lanes = |i: usize| {
            let top = 15 - 4 * i;
            let low = _mm256_set_m128i(load(powers[top - 1]), load(powers[top]));
            let high = _mm256_set_m128i(load(powers[top - 3]), load(powers[top - 2]));
            _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1)
        };
        let key = [lanes(0), lanes(1), lanes(2), lanes(3)];
        let mut acc = load(acc);
        let mut chunks = data.chunks_exact(256);
        for chunk in &mut chunks {
            let at = chunk.as_ptr();
            let first = _mm512_xor_si512(_mm512_loadu_si512(at.cast()), _mm512_zextsi128_si512(acc));
            let mut lo = _mm512_clmulepi64_epi128(first, key[0], 0x00);
            let mut hi = _mm512_clmulepi64_epi128(first, key[0], 0x11);
            let mut mid = _mm512_xor_si512(
                _mm512_clmulepi64_epi128(first, key[0], 0x10),
                _mm512_clmulepi64_epi128(first, key[0], 0x01),
            );
            for (i, k) in key.iter().enumerate().skip(1) {
                let x = _mm512_loadu_si512(at.add(64 * i).cast());
                lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, *k, 0x00));
                hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, *k, 0x11));
                // 0x96: the exclusive or of all three.
                mid = _mm512_ternarylogic_epi64(
                    mid,
                    _mm512_clmulepi64_epi128(x, *k, 0x10),
                    _mm512_clmulepi64_epi128(x, *k, 0x01),
                    0x96,
                );
            }
            acc = reduce(lanes_sum(lo), lanes_sum(hi), lanes_sum(mid));
        }
        blocks(powers, store(acc), chunks.remainder())
    }

    /// Folds whole blocks into `acc`: sixteen per reduction, two to each
    /// 256-bit multiply (three multiplies a pair), then the rest as
    /// [`blocks`] does.
    #[target_feature(enable = "pclmulqdq,sse2,avx,avx2,vpclmulqdq")]
    pub(super) unsafe fn blocks_ymm(powers: &[u128; 16], acc: u128, data: &[u8]) -> u128 {
        if data.len() < 256 {
            return blocks(powers, acc, data);
        }
        // Lane j of key[i] is H^(16 - 2i - j), matching block 2i + j; of
        // folded[i], its two halves' exclusive or, for the cross terms by
        // Karatsuba: three multiplies a block, not four.
        let mut key = [_mm256_setzero_si256(); 8];
        let mut folded = [_mm256_setzero_si256(); 8];
        for i in 0..8 {
            let top = 15 - 2 * i;
            key[i] = _mm256_set_m128i(load(powers[top - 1]), load(powers[top]));
            folded[i] = _mm256_xor_si256(key[i], _mm256_shuffle_epi32(key[i], 0x4e));
        }
        let mut acc = load(acc);
        let mut chunks = data.chunks_exact(256);
        for chunk in &mut chunks {
            let at = chunk.as_ptr();
            let (mut lo, mut hi, mut mid) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
            for i in 0..8 {
                let mut x = _mm256_loadu_si256(at.add(32 * i).cast());
                if i == 0 {
                    x = _mm256_xor_si256(x, _mm256_zextsi128_si256(acc));
                }
                lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(x, key[i], 0x00));
                hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(x, key[i], 0x11));
                let x_folded = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e));
                mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128(x_folded, folded[i], 0x00));
            }
            let (lo, hi) = (halves_sum(lo), halves_sum(hi));
            // (a0 + a1)(b0 + b1) = a0 b0 + a1 b1 + the cross terms.
            let mid = _mm_xor_si128(halves_sum(mid), _mm_xor_si128(lo, hi));
            acc = reduce(lo, hi, mid);
        }
        blocks(powers, store(acc), chunks.remainder())
    }

    /// The exclusive or of a 256-bit register's two 128-bit lanes.
    #[inline(always)]
    unsafe fn halves_sum(z: __m256i) -> __m128i {
        _mm_xor_si128(_mm256_castsi256_si128(z), _mm256_extracti128_si256(z, 1))
    }

    /// The exclusive or of a 512-bit register's four 128-bit lanes.
    #[inline(always)]
    unsafe fn lanes_sum(z: __m512i) -> __m128i {
        let a = _mm_xor_si128(_mm512_castsi512_si128(z), _mm512_extracti32x4_epi32(z, 1));
        let b = _mm_xor_si128(_mm512_extracti32x4_epi32(z, 2), _mm512_extracti32x4_epi32(z, 3));
        _mm_xor_si128(a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polyval::universal_hash::{KeyInit, UniversalHash};
    use proptest::prelude::*;

    fn reference(h: [u8; 16], data: &[u8], last: [u8; 16]) -> [u8; 16] {
        let mut p = polyval::Polyval::new(&h.into());
        p.update_padded(data);
        p.update(&[last.into()]);
        p.finalize().into()
    }

    fn hex(s: &str) -> [u8; 16] {
        std::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
    }

    #[test]
    fn the_rfc_example() {
        // RFC 8452, appendix A: POLYVAL(H, X_1, X_2).
        let h = hex("25629347589242761d31f826ba4b757b");
        let x1 = hex("4f4f95668c83dfb6401762bb2d01a262");
        let x2 = hex("d1a24ddd2721d006bbe45f20d3c9f362");
        for backend in Backend::all_supported() {
            let key = Key::with(h, backend);
            assert_eq!(key.backend(), backend);
            let mut hasher = key.hasher();
            hasher.update(&x1);
            assert_eq!(hasher.finish_with(x2), hex("f7a3b47b846119fae5b7866cf5e5b77e"), "{backend:?}");
        }
    }

    #[test]
    fn every_length_to_a_few_hundred_blocks() {
        let h: [u8; 16] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        let data: Vec<u8> = (0..16 * 300 + 15).map(|i: usize| (i * 131 + i / 7) as u8).collect();
        let last = [0xa5; 16];
        for backend in Backend::all_supported() {
            let key = Key::with(h, backend);
            for len in (0..=data.len()).step_by(5).chain(16 * 256 - 1..16 * 256 + 17) {
                let mut hasher = key.hasher();
                hasher.update(&data[..len]);
                assert_eq!(hasher.finish_with(last), reference(h, &data[..len], last), "{backend:?} {len}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_key_any_pieces(h in any::<[u8; 16]>(), data in proptest::collection::vec(any::<u8>(), 0..3000),
                              cuts in proptest::collection::vec(any::<usize>(), 0..5), last in any::<[u8; 16]>()) {
            let expected = reference(h, &data, last);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            for backend in Backend::all_supported() {
                let key = Key::with(h, backend);
                let mut hasher = key.hasher();
                let mut from = 0;
                for &cut in cuts.iter().chain([data.len()].iter()) {
                    hasher.update(&data[from..cut]);
                    from = cut;
                }
                prop_assert_eq!(hasher.finish_with(last), expected, "{:?}", backend);
            }
        }
    }
}
