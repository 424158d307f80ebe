//! The shared memory for C programs (`include/bulkwire.h`), over the
//! runtime of the running BSP section, as the groups are: segments mapped
//! by name, read locally, written slow, PRAM or coherent, and a fence.
//! Every call returns 0 (or a handle) on success and -1 on an error, whose
//! message `bw_error` returns.

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use bulkwire_dsm::{Dsm, DsmError, DsmSettings, ElemType, SegId, Semantics, Storage};
use bulkwire_runtime::Runtime;

use crate::groups::{fail, text};
use crate::{state, Phase};

struct Mapped {
    id: SegId,
    storage: Arc<Storage>,
}

/// The shared memory of the running section and its segments, by handle.
/// It borrows the section's runtime, which lives in the section's boxed
/// `Bsp` until `bsp_end`, which drops it first ([`end`]).
static DSM: Mutex<Option<(Dsm<'static>, Vec<Mapped>)>> = Mutex::new(None);

/// Drops the shared memory before the section's runtime goes.
pub(crate) fn end() {
    DSM.lock().unwrap_or_else(|e| e.into_inner()).take();
}

fn with_dsm(call: &str, f: impl FnOnce(&Dsm<'static>, &mut Vec<Mapped>) -> Result<c_int, DsmError>) -> c_int {
    let rt: *const Runtime = match &*state() {
        Phase::Running(bsp) => bsp.runtime(),
        _ => return fail(format!("{call}: no BSP section is running (call bsp_begin first)")),
    };
    let mut guard = DSM.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        // SAFETY: as for the groups: the runtime lives in the running
        // section's boxed Bsp until bsp_end, which drops this first.
        let rt: &'static Runtime = unsafe { &*rt };
        match DsmSettings::from_env().and_then(|s| Dsm::with_settings(rt, s)) {
            Ok(d) => *guard = Some((d, Vec::new())),
            Err(e) => return fail(format!("{call}: {e}")),
        }
    }
    let (dsm, segments) = guard.as_mut().expect("started above");
    match f(dsm, segments) {
        Ok(r) => r,
        Err(e) => fail(e.to_string()),
    }
}

fn elem(ty: c_int) -> Result<ElemType, DsmError> {
    Ok(match ty {
        0 => ElemType::I32,
        1 => ElemType::U32,
        2 => ElemType::I64,
        3 => ElemType::U64,
        4 => ElemType::F32,
        5 => ElemType::F64,
        other => return Err(DsmError::Setting { var: "bw_seg_map", why: format!("{other} is not a bw_type") }),
    })
}

fn semantics(call: &'static str, s: c_int) -> Result<Semantics, DsmError> {
    match s {
        0 => Ok(Semantics::Slow),
        1 => Ok(Semantics::Pram),
        2 => Ok(Semantics::Coherent),
        other => Err(DsmError::Setting { var: call, why: format!("{other} is not a bw_semantics") }),
    }
}

fn size_of(e: ElemType) -> usize {
    match e {
        ElemType::I8 | ElemType::U8 => 1,
        ElemType::I16 | ElemType::U16 => 2,
        ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
        ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
    }
}

/// The element at `p` (of the segment's type) as its bits.
///
/// # Safety
///
/// `p` points to one readable element of type `e`.
unsafe fn load(e: ElemType, p: *const u8) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: the caller's promise; an unaligned copy of its bytes.
    unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), size_of(e)) };
    match e {
        ElemType::I32 => i32::from_ne_bytes(b[..4].try_into().expect("4")) as i64 as u64,
        ElemType::F32 => u64::from(u32::from_ne_bytes(b[..4].try_into().expect("4"))),
        ElemType::U32 => u64::from(u32::from_ne_bytes(b[..4].try_into().expect("4"))),
        _ => u64::from_ne_bytes(b),
    }
}

/// Stores the bits of an element at `p`.
///
/// # Safety
///
/// `p` points to one writable element of type `e`.
unsafe fn store(e: ElemType, bits: u64, p: *mut u8) {
    let b = bits.to_ne_bytes();
    let bytes: [u8; 8] = match e {
        ElemType::I32 | ElemType::U32 | ElemType::F32 => {
            let mut four = [0u8; 8];
            four[..4].copy_from_slice(&(bits as u32).to_ne_bytes());
            four
        }
        _ => b,
    };
    // SAFETY: the caller's promise; an unaligned copy.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, size_of(e)) };
}

fn segment(segments: &[Mapped], call: &'static str, handle: c_int) -> Result<(SegId, Arc<Storage>), DsmError> {
    usize::try_from(handle)
        .ok()
        .and_then(|h| segments.get(h))
        .map(|m| (m.id, m.storage.clone()))
        .ok_or(DsmError::NotMapped { call, seg: handle.max(0) as u32, mapped: segments.len() })
}

fn check_range(call: &'static str, s: &Storage, start: usize, count: usize) -> Result<(), DsmError> {
    match start.checked_add(count) {
        Some(end) if end <= s.len() => Ok(()),
        _ => Err(DsmError::OutOfRange {
            call,
            name: s.name.clone(),
            index: start.saturating_add(count.max(1)).saturating_sub(1) as u64,
            len: s.len(),
        }),
    }
}

/// Maps the segment `name` of `count` elements of `type` (every process,
/// in the same order); returns its handle.
///
/// # Safety
///
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn bw_seg_map(name: *const c_char, ty: c_int, count: usize) -> c_int {
    // SAFETY: the caller's promise.
    let name = match unsafe { text(name, "segment name") } {
        Ok(n) => n.to_string(),
        Err(e) => return fail(format!("bw_seg_map: {e}")),
    };
    with_dsm("bw_seg_map", |dsm, segments| {
        let (id, storage) = dsm.map_raw(&name, elem(ty)?, count)?;
        segments.push(Mapped { id, storage });
        Ok((segments.len() - 1) as c_int)
    })
}

/// Writes `count` elements from `values` at `start` of segment `seg`.
///
/// # Safety
///
/// `values` points to `count` elements of the segment's type.
#[no_mangle]
pub unsafe extern "C" fn bw_seg_write(
    seg: c_int,
    start: usize,
    values: *const c_void,
    count: usize,
    sem: c_int,
) -> c_int {
    with_dsm("bw_seg_write", |dsm, segments| {
        let (id, storage) = segment(segments, "bw_seg_write", seg)?;
        check_range("bw_seg_write", &storage, start, count)?;
        let semantics = semantics("bw_seg_write", sem)?;
        if count > 0 && values.is_null() {
            return Err(DsmError::Setting { var: "bw_seg_write", why: format!("a null buffer of {count} elements") });
        }
        let size = size_of(storage.elem);
        // SAFETY: the caller's promise: `count` elements at `values`.
        let bits: Vec<u64> =
            (0..count).map(|i| unsafe { load(storage.elem, values.cast::<u8>().add(i * size)) }).collect();
        dsm.write_raw(id, start, &bits, semantics)?;
        Ok(0)
    })
}

/// Reads `count` elements at `start` of segment `seg` into `values`.
///
/// # Safety
///
/// `values` points to room for `count` elements of the segment's type.
#[no_mangle]
pub unsafe extern "C" fn bw_seg_read(seg: c_int, start: usize, values: *mut c_void, count: usize) -> c_int {
    with_dsm("bw_seg_read", |_, segments| {
        let (_, storage) = segment(segments, "bw_seg_read", seg)?;
        check_range("bw_seg_read", &storage, start, count)?;
        if count > 0 && values.is_null() {
            return Err(DsmError::Setting { var: "bw_seg_read", why: format!("a null buffer of {count} elements") });
        }
        let size = size_of(storage.elem);
        for i in 0..count {
            // SAFETY: the caller's promise: room for `count` elements.
            unsafe { store(storage.elem, storage.load(start + i), values.cast::<u8>().add(i * size)) };
        }
        Ok(0)
    })
}

/// Collective: returns once every write issued anywhere before the fence
/// is applied here.
#[no_mangle]
pub extern "C" fn bw_fence() -> c_int {
    with_dsm("bw_fence", |dsm, _| dsm.fence().map(|()| 0))
}

/// Sends this process's buffered writes now.
#[no_mangle]
pub extern "C" fn bw_flush() -> c_int {
    with_dsm("bw_flush", |dsm, _| dsm.flush().map(|()| 0))
}
