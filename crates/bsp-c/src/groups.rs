//! Groups and collectives for C programs (`include/bulkwire.h`), over the
//! runtime of the running BSP section: a BSPlib program uses groups
//! between `bsp_begin` and `bsp_end`, and so does any C program that opens
//! a section for them. Every call returns 0 (or a count) on success and -1
//! on an error, whose message `bw_error` returns.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;

use bulkwire_comm::{Source, Tag};
use bulkwire_groups::{Algorithm, Delivery, Element, Group, GroupError, GroupId, Groups, Op, Operation};
use bulkwire_runtime::Runtime;

use crate::{state, Phase};

/// The groups of the running section. They borrow its runtime, which lives
/// in the section's boxed `Bsp` until `bsp_end`, which drops them first
/// ([`end`]).
static GROUPS: Mutex<Option<Groups<'static>>> = Mutex::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Drops the groups before the section's runtime goes.
pub(crate) fn end() {
    GROUPS.lock().unwrap_or_else(|e| e.into_inner()).take();
}

pub(crate) fn fail(message: String) -> c_int {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    -1
}

/// Runs `f` on the section's groups (started at the first call).
fn with_groups(call: &str, f: impl FnOnce(&Groups<'static>) -> Result<c_int, GroupError>) -> c_int {
    let rt: *const Runtime = match &*state() {
        Phase::Running(bsp) => bsp.runtime(),
        _ => return fail(format!("{call}: no BSP section is running (call bsp_begin first)")),
    };
    let mut guard = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        // SAFETY: the runtime lives in the running section's boxed Bsp,
        // which neither moves nor drops before bsp_end, and bsp_end drops
        // these groups (`end`) before it ends the section.
        let rt: &'static Runtime = unsafe { &*rt };
        match Groups::on_runtime(rt) {
            Ok(g) => *guard = Some(g),
            Err(e) => return fail(format!("{call}: {e}")),
        }
    }
    let groups = guard.as_ref().expect("started above");
    match f(groups) {
        Ok(r) => r,
        Err(e) => fail(e.to_string()),
    }
}

fn group<'g>(groups: &'g Groups<'static>, handle: c_int) -> Group<'g> {
    groups.group(GroupId(handle.max(0) as u32))
}

/// # Safety
///
/// `ptr` points to `len` readable (and, if `mutable`, writable) bytes, or
/// `len` is 0.
unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Result<&'a [u8], GroupError> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(GroupError::BadArgument { call: "bulkwire", what: format!("a null buffer of {len} bytes") });
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast(), len) })
}

/// # Safety
///
/// As [`bytes`], writable.
unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize) -> Result<&'a mut [u8], GroupError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(GroupError::BadArgument { call: "bulkwire", what: format!("a null buffer of {len} bytes") });
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast(), len) })
}

/// # Safety
///
/// `s` is a NUL-terminated string or null.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, GroupError> {
    if s.is_null() {
        return Err(GroupError::BadArgument { call: "bulkwire", what: format!("a null {what}") });
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| GroupError::BadArgument { call: "bulkwire", what: format!("a {what} that is not UTF-8") })
}

fn rank(r: c_int, what: &str) -> Result<u32, GroupError> {
    u32::try_from(r).map_err(|_| GroupError::BadArgument { call: "bulkwire", what: format!("{what} {r} is negative") })
}

/// The message of the calling thread's last error ("" if none).
#[no_mangle]
pub extern "C" fn bw_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The group of every process of the job.
#[no_mangle]
pub extern "C" fn bw_group_world() -> c_int {
    0
}

/// # Safety
///
/// `name` is a NUL-terminated string; `members` points to `count` ranks.
#[no_mangle]
pub unsafe extern "C" fn bw_group_create(name: *const c_char, members: *const c_int, count: c_int) -> c_int {
    with_groups("bw_group_create", |g| {
        // SAFETY: the caller's promise.
        let name = unsafe { text(name, "group name") }?;
        let count = usize::try_from(count).unwrap_or(0);
        // SAFETY: the caller's promise.
        let raw = unsafe { bytes(members.cast(), count * 4) }?;
        let list: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| rank(c_int::from_ne_bytes(c.try_into().expect("4 bytes")), "member"))
            .collect::<Result<_, _>>()?;
        Ok(g.create(name, &list)?.id().0 as c_int)
    })
}

/// # Safety
///
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn bw_group_join(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    with_groups("bw_group_join", |g| Ok(g.join(unsafe { text(name, "group name") }?)?.id().0 as c_int))
}

/// # Safety
///
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn bw_group_find(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    with_groups("bw_group_find", |g| Ok(g.find(unsafe { text(name, "group name") }?)?.id().0 as c_int))
}

#[no_mangle]
pub extern "C" fn bw_group_leave(group: c_int) -> c_int {
    with_groups("bw_group_leave", |g| self::group(g, group).leave().map(|_| 0))
}

#[no_mangle]
pub extern "C" fn bw_group_destroy(group: c_int) -> c_int {
    with_groups("bw_group_destroy", |g| self::group(g, group).destroy().map(|_| 0))
}

/// Members in this process's view of the group.
#[no_mangle]
pub extern "C" fn bw_group_size(group: c_int) -> c_int {
    with_groups("bw_group_size", |g| Ok(self::group(g, group).size()? as c_int))
}

/// This process's position in the group's member list.
#[no_mangle]
pub extern "C" fn bw_group_position(group: c_int) -> c_int {
    with_groups("bw_group_position", |g| Ok(self::group(g, group).position()? as c_int))
}

/// Waits until the group's view has `count` members.
#[no_mangle]
pub extern "C" fn bw_group_wait_members(group: c_int, count: c_int) -> c_int {
    with_groups("bw_group_wait_members", |g| {
        self::group(g, group).wait_members(usize::try_from(count).unwrap_or(0)).map(|_| 0)
    })
}

/// # Safety
///
/// `op` and `algorithm` are NUL-terminated strings (`algorithm` may be
/// null: the automatic choice).
#[no_mangle]
pub unsafe extern "C" fn bw_group_set_algorithm(group: c_int, op: *const c_char, algorithm: *const c_char) -> c_int {
    with_groups("bw_group_set_algorithm", |g| {
        let bad = |why: String| GroupError::BadArgument { call: "bw_group_set_algorithm", what: why };
        // SAFETY: the caller's promise.
        let op: Operation = unsafe { text(op, "collective") }?.parse().map_err(bad)?;
        let algorithm: Option<Algorithm> = match algorithm.is_null() {
            true => None,
            // SAFETY: the caller's promise.
            false => Some(unsafe { text(algorithm, "algorithm") }?.parse().map_err(bad)?),
        };
        self::group(g, group).set_algorithm(op, algorithm).map(|_| 0)
    })
}

/// `confirmed` non-zero: a broadcast's root returns once every member has it.
#[no_mangle]
pub extern "C" fn bw_group_set_confirmed(group: c_int, confirmed: c_int) -> c_int {
    let delivery = if confirmed != 0 { Delivery::Confirmed } else { Delivery::Sent };
    with_groups("bw_group_set_confirmed", |g| self::group(g, group).set_delivery(delivery).map(|_| 0))
}

/// `on` non-zero: latest-value mode for the group's posts (only the newest
/// post of each poster and tag not yet received is kept).
#[no_mangle]
pub extern "C" fn bw_group_set_latest_only(group: c_int, on: c_int) -> c_int {
    with_groups("bw_group_set_latest_only", |g| self::group(g, group).set_latest_only(on != 0).map(|_| 0))
}

/// `on` non-zero: best-effort mode for the posts this process makes (sent
/// once per hop, never resent; a lost post stays lost).
#[no_mangle]
pub extern "C" fn bw_group_set_best_effort(group: c_int, on: c_int) -> c_int {
    with_groups("bw_group_set_best_effort", |g| self::group(g, group).set_best_effort(on != 0).map(|_| 0))
}

/// # Safety
///
/// `buf` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn bw_bcast(group: c_int, root: c_int, buf: *mut c_void, len: usize) -> c_int {
    with_groups("bw_bcast", |g| {
        // SAFETY: the caller's promise.
        let buf = unsafe { bytes_mut(buf, len) }?;
        self::group(g, group).bcast(rank(root, "root")?, buf).map(|_| 0)
    })
}

#[no_mangle]
pub extern "C" fn bw_barrier(group: c_int) -> c_int {
    with_groups("bw_barrier", |g| self::group(g, group).barrier().map(|_| 0))
}

/// Element types of a reduction (`bw_type` in bulkwire.h).
fn reduce_as<T: Element>(g: &Group<'_>, root: Option<u32>, buf: &mut [u8], op: c_int) -> Result<c_int, GroupError> {
    let op = match op {
        0 => Op::Sum,
        1 => Op::Prod,
        2 => Op::Min,
        3 => Op::Max,
        other => return Err(GroupError::BadArgument { call: "bw_reduce", what: format!("op {other} is not a bw_op") }),
    };
    // Copied into elements of `T`: the caller's buffer need not be aligned.
    let n = buf.len() / std::mem::size_of::<T>() * std::mem::size_of::<T>();
    let mut values = vec![<T as bytemuck::Zeroable>::zeroed(); n / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut values).copy_from_slice(&buf[..n]);
    match root {
        Some(r) => g.reduce(r, &mut values, op)?,
        None => g.allreduce(&mut values, op)?,
    }
    buf[..n].copy_from_slice(bytemuck::cast_slice(&values));
    Ok(0)
}

fn reduce(
    call: &'static str,
    group: c_int,
    root: Option<c_int>,
    buf: *mut c_void,
    count: usize,
    ty: c_int,
    op: c_int,
) -> c_int {
    with_groups(call, |g| {
        let size = match ty {
            0 | 1 | 4 => 4,
            2 | 3 | 5 => 8,
            other => return Err(GroupError::BadArgument { call, what: format!("type {other} is not a bw_type") }),
        };
        // SAFETY: the caller's promise (bulkwire.h): `count` elements.
        let buf = unsafe { bytes_mut(buf, count * size) }?;
        let g = self::group(g, group);
        let root = root.map(|r| rank(r, "root")).transpose()?;
        match ty {
            0 => reduce_as::<i32>(&g, root, buf, op),
            1 => reduce_as::<u32>(&g, root, buf, op),
            2 => reduce_as::<i64>(&g, root, buf, op),
            3 => reduce_as::<u64>(&g, root, buf, op),
            4 => reduce_as::<f32>(&g, root, buf, op),
            _ => reduce_as::<f64>(&g, root, buf, op),
        }
    })
}

/// # Safety
///
/// `buf` points to `count` writable elements of type `ty`.
#[no_mangle]
pub unsafe extern "C" fn bw_reduce(
    group: c_int,
    root: c_int,
    buf: *mut c_void,
    count: usize,
    ty: c_int,
    op: c_int,
) -> c_int {
    reduce("bw_reduce", group, Some(root), buf, count, ty, op)
}

/// # Safety
///
/// `buf` points to `count` writable elements of type `ty`.
#[no_mangle]
pub unsafe extern "C" fn bw_allreduce(group: c_int, buf: *mut c_void, count: usize, ty: c_int, op: c_int) -> c_int {
    reduce("bw_allreduce", group, None, buf, count, ty, op)
}

/// # Safety
///
/// `send` points to `len` bytes; at the root `recv` points to `len` times
/// the group's size writable bytes.
#[no_mangle]
pub unsafe extern "C" fn bw_gather(
    group: c_int,
    root: c_int,
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
) -> c_int {
    with_groups("bw_gather", |g| {
        let grp = self::group(g, group);
        let root = rank(root, "root")?;
        // SAFETY: the caller's promise.
        let send = unsafe { bytes(send, len) }?;
        let here = grp.view()?.members.get(grp.position()?) == Some(&root);
        let total = if here { len * grp.size()? } else { 0 };
        // SAFETY: the caller's promise.
        let recv = unsafe { bytes_mut(recv, total) }?;
        grp.gather(root, send, recv).map(|_| 0)
    })
}

/// # Safety
///
/// At the root `send` points to `len` times the group's size bytes; `recv`
/// points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn bw_scatter(
    group: c_int,
    root: c_int,
    send: *const c_void,
    recv: *mut c_void,
    len: usize,
) -> c_int {
    with_groups("bw_scatter", |g| {
        let grp = self::group(g, group);
        let root = rank(root, "root")?;
        let here = grp.view()?.members.get(grp.position()?) == Some(&root);
        // SAFETY: the caller's promise.
        let send = unsafe { bytes(send, if here { len * grp.size()? } else { 0 }) }?;
        // SAFETY: the caller's promise.
        let recv = unsafe { bytes_mut(recv, len) }?;
        grp.scatter(root, send, recv).map(|_| 0)
    })
}

/// # Safety
///
/// `send` points to `len` bytes, `recv` to `len` times the group's size
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn bw_allgather(group: c_int, send: *const c_void, len: usize, recv: *mut c_void) -> c_int {
    with_groups("bw_allgather", |g| {
        let grp = self::group(g, group);
        // SAFETY: the caller's promise.
        let send = unsafe { bytes(send, len) }?;
        // SAFETY: the caller's promise.
        let recv = unsafe { bytes_mut(recv, len * grp.size()?) }?;
        grp.allgather(send, recv).map(|_| 0)
    })
}

/// # Safety
///
/// `data` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn bw_post(group: c_int, tag: c_int, data: *const c_void, len: usize) -> c_int {
    with_groups("bw_post", |g| {
        // SAFETY: the caller's promise.
        let data = unsafe { bytes(data, len) }?;
        self::group(g, group).post(tag, data).map(|_| 0)
    })
}

/// Waits for a post from `source` (-1: any) with `tag` (-1: any) and copies
/// at most `capacity` bytes of it into `buf`; returns its length (more than
/// `capacity` if it was cut) and sets `*from` and `*tag_out` if not null.
///
/// # Safety
///
/// `buf` points to `capacity` writable bytes; `from` and `tag_out` are null
/// or point to an int.
#[no_mangle]
pub unsafe extern "C" fn bw_recv(
    group: c_int,
    source: c_int,
    tag: c_int,
    buf: *mut c_void,
    capacity: usize,
    from: *mut c_int,
    tag_out: *mut c_int,
) -> c_int {
    with_groups("bw_recv", |g| {
        let source = if source < 0 { Source::Any } else { Source::Rank(source as u32) };
        let tag = if tag < 0 { Tag::Any } else { Tag::Is(tag) };
        let post = self::group(g, group).recv(source, tag)?;
        // SAFETY: the caller's promise.
        let out = unsafe { bytes_mut(buf, capacity.min(post.data.len())) }?;
        out.copy_from_slice(&post.data[..out.len()]);
        if !from.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *from = post.from as c_int };
        }
        if !tag_out.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *tag_out = post.tag };
        }
        Ok(post.data.len().min(c_int::MAX as usize) as c_int)
    })
}
