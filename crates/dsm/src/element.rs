//! The element types a segment can hold: numbers of at most 8 bytes, each
//! kept as the bits of a 64-bit word so that a read is one atomic load.

/// A segment's element type, as announced to the other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl ElemType {
    pub const ALL: [ElemType; 10] = [
        ElemType::I8,
        ElemType::U8,
        ElemType::I16,
        ElemType::U16,
        ElemType::I32,
        ElemType::U32,
        ElemType::I64,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ElemType::I8 => "i8",
            ElemType::U8 => "u8",
            ElemType::I16 => "i16",
            ElemType::U16 => "u16",
            ElemType::I32 => "i32",
            ElemType::U32 => "u32",
            ElemType::I64 => "i64",
            ElemType::U64 => "u64",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
        }
    }

    pub fn code(self) -> u8 {
        ElemType::ALL.iter().position(|&t| t == self).expect("listed") as u8
    }

    pub fn from_code(code: u8) -> Option<ElemType> {
        ElemType::ALL.get(code as usize).copied()
    }
}

/// A number a segment holds.
pub trait Element: Copy + Send + Sync + 'static {
    const TYPE: ElemType;
    fn to_bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
}

macro_rules! integers {
    ($($t:ty => $e:ident),*) => {$(
        impl Element for $t {
            const TYPE: ElemType = ElemType::$e;
            fn to_bits(self) -> u64 { self as u64 }
            fn from_bits(bits: u64) -> Self { bits as $t }
        }
    )*};
}
integers!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

impl Element for f32 {
    const TYPE: ElemType = ElemType::F32;
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl Element for f64 {
    const TYPE: ElemType = ElemType::F64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_survive_their_bits() {
        assert_eq!(i8::from_bits((-5i8).to_bits()), -5);
        assert_eq!(i64::from_bits(i64::MIN.to_bits()), i64::MIN);
        assert_eq!(u16::from_bits(65535u16.to_bits()), 65535);
        assert_eq!(<f32 as Element>::from_bits(Element::to_bits(-1.5f32)), -1.5);
        assert!(<f64 as Element>::from_bits(Element::to_bits(f64::NAN)).is_nan());
        for t in ElemType::ALL {
            assert_eq!(ElemType::from_code(t.code()), Some(t));
        }
        assert_eq!(ElemType::from_code(10), None);
    }
}
