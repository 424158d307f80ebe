//! Typed buffers and the operations that combine them in a reduction.

use bytemuck::Pod;

/// A number a reduction can combine. Integers add and multiply wrapping
/// (MPI leaves overflow undefined; here it never panics).
pub trait Element: Pod + PartialOrd + Send + Sync + 'static {
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn add(self, other: Self) -> Self { self.wrapping_add(other) }
            fn mul(self, other: Self) -> Self { self.wrapping_mul(other) }
        }
    )*};
}
integers!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn add(self, other: Self) -> Self { self + other }
            fn mul(self, other: Self) -> Self { self * other }
        }
    )*};
}
floats!(f32, f64);

/// How a reduction combines the members' buffers, element by element. A
/// user function combines `other` into `acc`; like every operation here it
/// must be associative and commutative: the algorithms combine in the order
/// their trees and rings give (the same order at every run, so results are
/// reproducible).
#[derive(Clone, Copy)]
pub enum Op<T> {
    Sum,
    Prod,
    Min,
    Max,
    User(fn(acc: &mut [T], other: &[T])),
}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Min => "min",
            Op::Max => "max",
            Op::User(_) => "user function",
        })
    }
}

impl<T: Element> Op<T> {
    /// `acc[i] = acc[i] op other[i]`.
    pub fn combine(&self, acc: &mut [T], other: &[T]) {
        debug_assert_eq!(acc.len(), other.len());
        match self {
            Op::Sum => acc.iter_mut().zip(other).for_each(|(a, &b)| *a = a.add(b)),
            Op::Prod => acc.iter_mut().zip(other).for_each(|(a, &b)| *a = a.mul(b)),
            Op::Min => acc.iter_mut().zip(other).for_each(|(a, &b)| {
                if b < *a {
                    *a = b
                }
            }),
            Op::Max => acc.iter_mut().zip(other).for_each(|(a, &b)| {
                if b > *a {
                    *a = b
                }
            }),
            Op::User(f) => f(acc, other),
        }
    }

    /// Combines bytes from the network (any alignment) into `acc`.
    pub fn combine_bytes(&self, acc: &mut [T], other: &[u8]) {
        let mut tmp = vec![T::zeroed(); acc.len()];
        bytemuck::cast_slice_mut::<T, u8>(&mut tmp).copy_from_slice(other);
        self.combine(acc, &tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_combine_element_by_element() {
        let mut a = [1i32, 5, -3];
        Op::Sum.combine(&mut a, &[2, 2, 2]);
        assert_eq!(a, [3, 7, -1]);
        Op::Max.combine(&mut a, &[0, 9, 0]);
        assert_eq!(a, [3, 9, 0]);
        Op::Min.combine(&mut a, &[4, 1, 4]);
        assert_eq!(a, [3, 1, 0]);
        Op::User(|acc: &mut [i32], o: &[i32]| acc.iter_mut().zip(o).for_each(|(a, b)| *a |= b))
            .combine(&mut a, &[4, 4, 4]);
        assert_eq!(a, [7, 5, 4]);
        let mut x = [i8::MAX];
        Op::Sum.combine(&mut x, &[1]);
        assert_eq!(x, [i8::MIN]);
        let mut f = [1.5f64, 2.0];
        Op::Prod.combine_bytes(&mut f, bytemuck::cast_slice(&[2.0f64, 0.25]));
        assert_eq!(f, [3.0, 0.5]);
    }
}
