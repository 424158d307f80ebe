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
    /// H^16 down to H^1 (dot powers), then 0, for the carry-less backends:
    /// in a group of `k` blocks folded with one reduction, block `i`
    /// (from 0) is multiplied by H^(k-i), `desc[16 - k + i]`, so that a
    /// group's keys lie one after the other, as its blocks do.
    desc: [u128; 17],
    /// Each of `desc`'s two 64-bit halves' exclusive or (in the low half):
    /// the key's factor of Karatsuba's middle product.
    folded: [u128; 17],
    portable: polyval::Polyval,
}

/// How blocks are multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// 512-bit carry-less multiplies, four blocks each, sixteen blocks per
    /// reduction (x86-64 with AVX-512F and VPCLMULQDQ); a shorter group
    /// as [`Backend::Ymm`] does.
    Wide,
    /// 256-bit carry-less multiplies, two blocks each (three multiplies a
    /// pair, by Karatsuba), sixteen blocks per reduction (x86-64 with AVX2
    /// and VPCLMULQDQ, but not AVX-512F: AMD's Zen 3, Intel's Alder Lake).
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
            Backend::Wide => Backend::Ymm.supported() && std::arch::is_x86_feature_detected!("avx512f"),
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

    /// Blocks folded with one reduction.
    fn group(self) -> usize {
        match self {
            Backend::Clmul => 8,
            _ => 16,
        }
    }
}

impl Key {
    /// The key `h` with `backend`, or the portable one where this CPU cannot
    /// run it.
    pub(crate) fn with(h: [u8; 16], backend: Backend) -> Key {
        use polyval::universal_hash::KeyInit;
        let backend = if backend.supported() { backend } else { Backend::Portable };
        let (mut desc, mut folded) = ([0u128; 17], [0u128; 17]);
        #[cfg(target_arch = "x86_64")]
        if backend != Backend::Portable {
            // SAFETY: PCLMULQDQ is present (every backend but the portable
            // one checked it above).
            let powers = unsafe { x86::powers(u128::from_le_bytes(h)) };
            for (i, power) in powers.iter().rev().enumerate() {
                desc[i] = *power;
                folded[i] = (power ^ (power >> 64)) as u64 as u128;
            }
        }
        Key { backend, desc, folded, portable: polyval::Polyval::new(&h.into()) }
    }

    #[cfg(test)]
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// POLYVAL of `head` and then `parts`, one after the other, zero-padded
    /// to a whole block, followed by the block `last`.
    ///
    /// The blocks are folded in groups of the backend's blocks per
    /// reduction, the first group the short one, so that the last, with
    /// the padding and `last`, is whole: one reduction per group and no
    /// more, however the bytes are cut. A run of groups is read where it
    /// lies when one piece holds it; a group across pieces, and the last,
    /// is put together first (at most 256 bytes, once per cut).
    pub(crate) fn hash(&self, head: &[u8], parts: &[&[u8]], last: [u8; 16]) -> [u8; 16] {
        let piece = |i: usize| if i == 0 { head } else { parts[i - 1] };
        let pieces = parts.len() + 1;
        let len = head.len() + parts.iter().map(|part| part.len()).sum::<usize>();
        let per = self.backend.group();
        let mut left = len.div_ceil(16) + 1;
        let mut k = match left % per {
            0 => per,
            short => short,
        };
        let (mut acc, mut portable) = (0, None);
        let mut gathered = [0u8; 256];
        // The next byte: in piece `at.0`, at `at.1`.
        let mut at = (0, 0);
        while left > 0 {
            while at.0 < pieces && at.1 == piece(at.0).len() {
                at = (at.0 + 1, 0);
            }
            let within = if at.0 < pieces { piece(at.0).len() - at.1 } else { 0 };
            if left > k && within >= 16 * k {
                // This group and as many whole ones after it as the piece
                // holds (never the last: the piece's bytes end before the
                // padding and `last`).
                let more = ((within - 16 * k) / (16 * per)).min((left - k) / per - 1);
                let bytes = 16 * (k + per * more);
                let run = &piece(at.0)[at.1..at.1 + bytes];
                prefetch_ahead(run);
                self.fold(&mut acc, &mut portable, run, k);
                at.1 += bytes;
                left -= k + per * more;
            } else {
                // The last group holds the rest of the bytes, the padding
                // and `last`; any other is whole bytes.
                let bytes = 16 * k;
                let want = if left == k { bytes - 16 } else { bytes };
                let mut filled = 0;
                while filled < want && at.0 < pieces {
                    let from = &piece(at.0)[at.1..];
                    let take = from.len().min(want - filled);
                    gathered[filled..filled + take].copy_from_slice(&from[..take]);
                    filled += take;
                    at = if take == from.len() { (at.0 + 1, 0) } else { (at.0, at.1 + take) };
                }
                gathered[filled..want].fill(0);
                if left == k {
                    gathered[want..bytes].copy_from_slice(&last);
                }
                self.fold(&mut acc, &mut portable, &gathered[..bytes], k);
                left -= k;
            }
            k = per;
        }
        use polyval::universal_hash::UniversalHash;
        portable.map_or(acc.to_le_bytes(), |portable: polyval::Polyval| portable.finalize().into())
    }

    /// Folds whole blocks into `acc` (or into `portable` for the portable
    /// backend): the first `k` with one reduction, then the rest (a whole
    /// number of the backend's groups) a group per reduction.
    fn fold(&self, acc: &mut u128, portable: &mut Option<polyval::Polyval>, data: &[u8], k: usize) {
        // What the loops read (a few instructions a call, not a block).
        assert!(
            (1..=16).contains(&k)
                && data.len() >= 16 * k
                && (data.len() - 16 * k).is_multiple_of(16 * self.backend.group())
        );
        match self.backend {
            // SAFETY: `Key::with` only keeps a backend the CPU supports;
            // `data` is `k` blocks and whole groups (asserted above).
            #[cfg(target_arch = "x86_64")]
            Backend::Wide => *acc = unsafe { x86::fold_wide(&self.desc, &self.folded, *acc, data, k) },
            #[cfg(target_arch = "x86_64")]
            Backend::Ymm => *acc = unsafe { x86::fold_ymm(&self.desc, &self.folded, *acc, data, k) },
            #[cfg(target_arch = "x86_64")]
            Backend::Clmul => *acc = unsafe { x86::fold_clmul(&self.desc, *acc, data, k) },
            _ => {
                use polyval::universal_hash::UniversalHash;
                portable.get_or_insert_with(|| self.portable.clone()).update_padded(data);
            }
        }
    }
}

/// How far past the bytes being hashed [`prefetch_ahead`] asks for the
/// bytes to come: about the next datagram's but one. A sender hashes a
/// large message's pieces in turn, a datagram's at a time between its
/// other work, and the pieces come from memory the core has not read
/// lately (a stream of 4 MiB messages between two test-bed hosts,
/// alternating runs: making a datagram, MAC and packet, took 1,990-2,360
/// cycles without it in seven runs, 1,530-1,830 asking 1 KiB ahead in
/// four, 1,520-1,710 at 2 KiB in five, 1,680-1,860 at 4 KiB in two).
const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU to bring into its cache the bytes [`PREFETCH_AHEAD`] past
/// each line of `run`: where the next pieces to be hashed most often lie.
/// A hint only: nothing is read into the program, and an address past
/// the end of the buffer does not fault.
#[inline(always)]
fn prefetch_ahead(run: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..run.len()).step_by(64) {
        let at = run.as_ptr().wrapping_add(PREFETCH_AHEAD + offset);
        // SAFETY: PREFETCHT0 (SSE, which every x86-64 CPU has) reads
        // nothing into registers and never faults, whatever the address.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = run;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The carry-less backends. Every function needs PCLMULQDQ, the
    //! `_ymm` ones also AVX2 and VPCLMULQDQ, the `_wide` one AVX-512F too,
    //! which the caller checks. `data` is `k` blocks (at most 16) and then
    //! whole groups (16 blocks each; 8 for [`fold_clmul`]), which the
    //! caller makes sure of.
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
    /// reduction, by 128-bit multiplies.
    #[inline(always)]
    unsafe fn group(desc: &[u128; 17], acc: __m128i, data: *const u8, k: usize) -> __m128i {
        let first = _mm_xor_si128(acc, _mm_loadu_si128(data.cast()));
        let (mut lo, mut hi, mut mid) = wide(first, load(desc[16 - k]));
        for i in 1..k {
            let (l, h, m) = wide(_mm_loadu_si128(data.add(16 * i).cast()), load(desc[16 - k + i]));
            lo = _mm_xor_si128(lo, l);
            hi = _mm_xor_si128(hi, h);
            mid = _mm_xor_si128(mid, m);
        }
        reduce(lo, hi, mid)
    }

    /// Folds `k` blocks, then groups of eight, each with one reduction.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn fold_clmul(desc: &[u128; 17], acc: u128, data: &[u8], k: usize) -> u128 {
        let mut acc = group(desc, load(acc), data.as_ptr(), k);
        for chunk in data[16 * k..].chunks_exact(128) {
            acc = group(desc, acc, chunk.as_ptr(), 8);
        }
        store(acc)
    }

    /// Folds the `k` (1 to 16) blocks at `data` into `acc` with one
    /// reduction, two to each 256-bit multiply, the cross terms by
    /// Karatsuba (three multiplies a pair, not four); an odd block last,
    /// alone in its register, its pair's key 0.
    #[inline(always)]
    unsafe fn group_ymm(desc: &[u128; 17], folded: &[u128; 17], acc: __m128i, data: *const u8, k: usize) -> __m128i {
        // Blocks 2j and 2j + 1 take the keys at 16 - k + 2j and the next
        // (0 past the last block).
        let keys = desc.as_ptr().add(16 - k).cast::<u8>();
        let keys_folded = folded.as_ptr().add(16 - k).cast::<u8>();
        let (mut lo, mut hi, mut mid) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
        let mut j = 0;
        while 2 * j < k {
            let mut x = match 2 * j + 1 < k {
                true => _mm256_loadu_si256(data.add(32 * j).cast()),
                false => _mm256_zextsi128_si256(_mm_loadu_si128(data.add(32 * j).cast())),
            };
            if j == 0 {
                x = _mm256_xor_si256(x, _mm256_zextsi128_si256(acc));
            }
            let key = _mm256_loadu_si256(keys.add(32 * j).cast());
            let key_folded = _mm256_loadu_si256(keys_folded.add(32 * j).cast());
            lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(x, key, 0x00));
            hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(x, key, 0x11));
            let x_folded = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e));
            mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128(x_folded, key_folded, 0x00));
            j += 1;
        }
        let (lo, hi) = (halves_sum(lo), halves_sum(hi));
        // (a0 + a1)(b0 + b1) = a0 b0 + a1 b1 + the cross terms.
        let mid = _mm_xor_si128(halves_sum(mid), _mm_xor_si128(lo, hi));
        reduce(lo, hi, mid)
    }

    /// Folds `k` blocks, then groups of sixteen, each with one reduction,
    /// by 256-bit multiplies.
    #[target_feature(enable = "pclmulqdq,sse2,avx,avx2,vpclmulqdq")]
    pub(super) unsafe fn fold_ymm(desc: &[u128; 17], folded: &[u128; 17], acc: u128, data: &[u8], k: usize) -> u128 {
        let mut acc = group_ymm(desc, folded, load(acc), data.as_ptr(), k);
        for chunk in data[16 * k..].chunks_exact(256) {
            acc = group_ymm(desc, folded, acc, chunk.as_ptr(), 16);
        }
        store(acc)
    }

    /// Folds `k` blocks as [`fold_ymm`] does, then groups of sixteen, each
    /// with one reduction, four blocks to each 512-bit multiply.
    #[target_feature(enable = "pclmulqdq,sse2,avx,avx2,avx512f,vpclmulqdq")]
    pub(super) unsafe fn fold_wide(desc: &[u128; 17], folded: &[u128; 17], acc: u128, data: &[u8], k: usize) -> u128 {
        let mut acc = group_ymm(desc, folded, load(acc), data.as_ptr(), k);
        // Lane j of key[i] is H^(16 - 4i - j), matching block 4i + j.
        let key: [__m512i; 4] = std::array::from_fn(|i| _mm512_loadu_si512(desc.as_ptr().add(4 * i).cast()));
        for chunk in data[16 * k..].chunks_exact(256) {
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
        store(acc)
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
            assert_eq!(key.hash(&x1, &[], x2), hex("f7a3b47b846119fae5b7866cf5e5b77e"), "{backend:?}");
        }
    }

    #[test]
    fn every_length_to_a_few_hundred_blocks_in_pieces() {
        let h: [u8; 16] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        let data: Vec<u8> = (0..16 * 300 + 15).map(|i: usize| (i * 131 + i / 7) as u8).collect();
        let last = [0xa5; 16];
        for backend in Backend::all_supported() {
            let key = Key::with(h, backend);
            for len in (0..=data.len()).step_by(5).chain(16 * 256 - 1..16 * 256 + 17) {
                let expected = reference(h, &data[..len], last);
                let data = &data[..len];
                assert_eq!(key.hash(data, &[], last), expected, "{backend:?} {len} whole");
                // As a datagram is cut: a header, the data, the rest.
                let (head, rest) = data.split_at(len.min(44));
                let (middle, tail) = rest.split_at(rest.len() - rest.len().min(20));
                assert_eq!(key.hash(head, &[middle, tail], last), expected, "{backend:?} {len} cut");
                assert_eq!(key.hash(&[], &[data, &[]], last), expected, "{backend:?} {len} after nothing");
            }
        }
    }

    proptest! {
        #[test]
        fn any_key_any_pieces(h in any::<[u8; 16]>(), data in proptest::collection::vec(any::<u8>(), 0..6000),
                              cuts in proptest::collection::vec(any::<usize>(), 0..5), last in any::<[u8; 16]>()) {
            let expected = reference(h, &data, last);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([data.len()].iter()) {
                pieces.push(&data[from..cut]);
                from = cut;
            }
            for backend in Backend::all_supported() {
                let key = Key::with(h, backend);
                prop_assert_eq!(key.hash(pieces[0], &pieces[1..], last), expected, "{:?}", backend);
            }
        }
    }
}
