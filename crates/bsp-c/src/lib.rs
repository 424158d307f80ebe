//! The BSPlib C ABI: `libbsp.so` and `libbsp.a`, the functions declared in
//! `include/bsp.h`.
//!
//! A thin layer, as BSPonMPI's: each function checks what only C can get
//! wrong (null pointers, negative sizes and pids, calls outside
//! `bsp_begin`…`bsp_end`) and hands the rest to [`bulkwire_bsp::Bsp`], which
//! checks the BSPlib semantics (registrations, bounds, tag sizes, superstep
//! counts). Any misuse ends the whole job: the message names the process,
//! the call and the reason, and the process exits with status 1, which the
//! launcher passes on to every other process. Nothing a program passes can
//! make the library crash or hang.
//!
//! The standard's calling discipline is single-threaded (one thread per
//! process makes the calls), so one lock around the process's [`Bsp`] costs
//! nothing and keeps the state sound should a program break that rule.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use bulkwire_bsp::{Bsp, BspError, Call, Reason};

mod dsm;
mod groups;

/// Where the process is in its one SPMD part.
pub(crate) enum Phase {
    NotBegun,
    Running(Box<Bsp>),
    Ended,
}

static STATE: Mutex<Phase> = Mutex::new(Phase::NotBegun);
/// Set once the process is on its way out, so that the exit handler does
/// not report an exit the library itself chose.
static LEAVING: AtomicBool = AtomicBool::new(false);

pub(crate) fn state() -> MutexGuard<'static, Phase> {
    // A panic while the lock was held has already ended the process's part;
    // the state is still what it was.
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// This process's number in the job, for messages before `bsp_begin`.
fn job_rank() -> u32 {
    bulkwire_runtime::JobEnv::from_env().map_or(0, |env| env.rank)
}

/// Ends the job because of `error`: prints it, stops every process, exits 1.
fn fail_with(bsp: Option<&Bsp>, error: BspError) -> ! {
    LEAVING.store(true, Ordering::SeqCst);
    match bsp {
        // The runtime tells the launcher, which stops the other processes.
        Some(bsp) => bsp.fail(&error),
        None => {
            eprintln!("{error}");
            std::process::exit(1)
        }
    }
}

/// Ends the job for a call made before `bsp_begin` or after `bsp_end`
/// (named by its C name: enquiries have no [`Call`] of their own).
fn fail_outside(call: &str, reason: Reason) -> ! {
    LEAVING.store(true, Ordering::SeqCst);
    eprintln!("bsp: process {}: {call}: {reason}", job_rank());
    std::process::exit(1)
}

/// Runs `f` on the running [`Bsp`]; any error ends the job.
fn with_bsp<R>(call: &str, f: impl FnOnce(&mut Bsp) -> Result<R, BspError>) -> R {
    let mut guard = state();
    match &mut *guard {
        Phase::Running(bsp) => match f(bsp) {
            Ok(r) => r,
            Err(e) => fail_with(Some(bsp), e),
        },
        Phase::NotBegun => fail_outside(call, Reason::NotBegun),
        Phase::Ended => fail_outside(call, Reason::Ended),
    }
}

/// A size argument as a `usize`, or the error a negative one is.
fn size(bsp: &Bsp, call: Call, what: &'static str, value: c_int) -> Result<usize, BspError> {
    usize::try_from(value).map_err(|_| bsp.error(call, Reason::Negative { what, value: i64::from(value) }))
}

/// A pid argument, checked against the number of processes.
fn pid(bsp: &Bsp, call: Call, value: c_int) -> Result<u32, BspError> {
    match u32::try_from(value) {
        Ok(p) if p < bsp.nprocs() => Ok(p),
        _ => Err(bsp.error(call, Reason::NoSuchProcess { pid: i64::from(value), nprocs: bsp.nprocs() })),
    }
}

/// The error for a null `what` where `len` bytes were to be read or written.
fn not_null(bsp: &Bsp, call: Call, what: &str, ptr: *const c_void, len: usize) -> Result<(), BspError> {
    if ptr.is_null() && len > 0 {
        return Err(
            bsp.error(call, Reason::Invalid(format!("{what} is a null pointer but {len} bytes were asked for")))
        );
    }
    Ok(())
}

fn null_argument(bsp: &Bsp, call: Call, what: &str) -> BspError {
    bsp.error(call, Reason::Invalid(format!("{what} is a null pointer")))
}

// ----- starting and ending ----------------------------------------------------

/// Reports a process that leaves (returns from `main`, calls `exit`) inside
/// its SPMD part: the others would otherwise wait for it at their next sync.
extern "C" fn at_exit() {
    if LEAVING.load(Ordering::SeqCst) {
        return;
    }
    // The lock is free unless a call is exiting, which sets LEAVING first.
    let Ok(mut guard) = STATE.try_lock() else { return };
    if let Phase::Running(bsp) = std::mem::replace(&mut *guard, Phase::Ended) {
        // Dropping a Bsp that has not ended tells the job this process left
        // without bsp_end; the launcher then stops every process.
        drop(bsp);
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
}

#[no_mangle]
pub extern "C" fn bsp_begin(maxprocs: c_int) {
    let mut guard = state();
    match &*guard {
        Phase::NotBegun => {}
        Phase::Running(_) | Phase::Ended => fail_outside("bsp_begin", Reason::AlreadyBegun),
    }
    // Only process 0's argument counts (the standard's rule, which bsp_init
    // relies on); the engine checks it once every process has it.
    match Bsp::begin_requested(i64::from(maxprocs)) {
        Ok(bsp) => *guard = Phase::Running(Box::new(bsp)),
        Err(e) => fail_with(None, e),
    }
    // SAFETY: registering a handler that only reads this library's state.
    unsafe { atexit(at_exit) };
}

#[no_mangle]
pub extern "C" fn bsp_end() {
    // The groups borrow the section's runtime: they go first.
    groups::end();
    dsm::end();
    let mut guard = state();
    let bsp = match std::mem::replace(&mut *guard, Phase::Ended) {
        Phase::Running(bsp) => bsp,
        Phase::NotBegun => fail_outside("bsp_end", Reason::NotBegun),
        Phase::Ended => fail_outside("bsp_end", Reason::Ended),
    };
    let pid = bsp.pid();
    if let Err(e) = bsp.end() {
        // `end` consumed the Bsp; its drop has already told the job why.
        fail_with(None, e);
    }
    drop(guard);
    if pid != 0 {
        // The standard: after bsp_end only process 0 goes on with main.
        LEAVING.store(true, Ordering::SeqCst);
        std::process::exit(0);
    }
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_init(spmd: Option<extern "C" fn()>, _argc: c_int, _argv: *mut *mut c_char) {
    let Some(spmd) = spmd else {
        fail_outside("bsp_init", Reason::Invalid("the SPMD function is a null pointer".into()))
    };
    if !matches!(*state(), Phase::NotBegun) {
        fail_outside("bsp_init", Reason::Invalid("bsp_init must come before bsp_begin".into()));
    }
    // Processes other than 0 run the SPMD function here and leave; process 0
    // returns to main, which calls the SPMD function itself.
    if let Err(e) = Bsp::init(|| spmd()) {
        fail_with(None, e);
    }
}

/// `bsp_abort` and `bsp_vabort`, defined in C (`abort.c`) because they take
/// variable arguments. Rust exports only the symbols Rust defines from a
/// shared library, so these two are defined here as jumps to the C
/// functions: a jump leaves every argument register and the stack as the
/// caller set them, which is what a variadic call needs.
mod vararg {
    extern "C" {
        fn bulkwire_bsp_abort_c();
        fn bulkwire_bsp_vabort_c();
    }

    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn bsp_abort() {
        #[cfg(target_arch = "x86_64")]
        core::arch::naked_asm!("jmp {}", sym bulkwire_bsp_abort_c);
        #[cfg(target_arch = "aarch64")]
        core::arch::naked_asm!("b {}", sym bulkwire_bsp_abort_c);
    }

    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn bsp_vabort() {
        #[cfg(target_arch = "x86_64")]
        core::arch::naked_asm!("jmp {}", sym bulkwire_bsp_vabort_c);
        #[cfg(target_arch = "aarch64")]
        core::arch::naked_asm!("b {}", sym bulkwire_bsp_vabort_c);
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("bsp_abort's trampoline is written for x86_64 and aarch64 only");

/// Called by `abort.c` with the formatted message of `bsp_abort`.
///
/// # Safety
///
/// `message` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn bulkwire_bsp_abort_message(message: *const c_char) -> ! {
    let text = CStr::from_ptr(message).to_string_lossy();
    // A message ends with a newline by habit; the job's report adds its own.
    let text = text.trim_end_matches('\n');
    LEAVING.store(true, Ordering::SeqCst);
    // try_lock: bsp_abort may be called from an exit handler or signal-free
    // error path while another call holds the lock on this thread.
    if let Ok(guard) = STATE.try_lock() {
        if let Phase::Running(bsp) = &*guard {
            bsp.abort(text);
        }
    }
    eprintln!("bsp_abort: process {}: {text}", job_rank());
    std::process::exit(1)
}

// ----- enquiry ------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn bsp_nprocs() -> c_int {
    let guard = state();
    match &*guard {
        Phase::Running(bsp) => bsp.nprocs() as c_int,
        // Before bsp_begin (and after bsp_end): the processes available.
        Phase::NotBegun | Phase::Ended => match Bsp::available() {
            Ok(n) => n as c_int,
            Err(e) => fail_outside("bsp_nprocs", e.reason),
        },
    }
}

#[no_mangle]
pub extern "C" fn bsp_pid() -> c_int {
    with_bsp("bsp_pid", |bsp| Ok(bsp.pid() as c_int))
}

#[no_mangle]
pub extern "C" fn bsp_time() -> f64 {
    with_bsp("bsp_time", |bsp| Ok(bsp.time()))
}

// ----- supersteps -------------------------------------------------------------

#[no_mangle]
pub extern "C" fn bsp_sync() {
    with_bsp("bsp_sync", Bsp::sync)
}

// ----- DRMA ---------------------------------------------------------------------

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_push_reg(ident: *const c_void, nbytes: c_int) {
    with_bsp("bsp_push_reg", |bsp| {
        let len = size(bsp, Call::PushReg, "the size", nbytes)?;
        // NULL with size 0 is the standard's way for a process with nothing
        // to register to take part; NULL with bytes would let puts write
        // near address 0.
        not_null(bsp, Call::PushReg, "the registered address", ident, len)?;
        // SAFETY: the program keeps the area valid while it is registered, as
        // the standard requires.
        unsafe { bsp.push_reg_raw(ident.cast(), len) }
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_pop_reg(ident: *const c_void) {
    with_bsp("bsp_pop_reg", |bsp| bsp.pop_reg_raw(ident.cast()))
}

/// Checks the arguments shared by the four DRMA calls; returns the pid,
/// offset and length.
fn drma_args(
    bsp: &Bsp,
    call: Call,
    to: c_int,
    local: (&str, *const c_void),
    offset: c_int,
    nbytes: c_int,
) -> Result<(u32, usize, usize), BspError> {
    let p = pid(bsp, call, to)?;
    let offset = size(bsp, call, "the offset", offset)?;
    let len = size(bsp, call, "the number of bytes", nbytes)?;
    not_null(bsp, call, local.0, local.1, len)?;
    Ok((p, offset, len))
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_put(pid: c_int, src: *const c_void, dst: *mut c_void, offset: c_int, nbytes: c_int) {
    with_bsp("bsp_put", |bsp| {
        let (p, offset, len) = drma_args(bsp, Call::Put, pid, ("the source", src), offset, nbytes)?;
        // SAFETY: src is not null (checked) and the program gives len readable bytes.
        unsafe { bsp.put_raw(p, src.cast(), dst.cast_const().cast(), offset, len) }
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_hpput(pid: c_int, src: *const c_void, dst: *mut c_void, offset: c_int, nbytes: c_int) {
    with_bsp("bsp_hpput", |bsp| {
        let (p, offset, len) = drma_args(bsp, Call::HpPut, pid, ("the source", src), offset, nbytes)?;
        // SAFETY: as bsp_put; the program leaves src alone until the sync.
        unsafe { bsp.hpput_raw(p, src.cast(), dst.cast_const().cast(), offset, len) }
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_get(pid: c_int, src: *const c_void, offset: c_int, dst: *mut c_void, nbytes: c_int) {
    with_bsp("bsp_get", |bsp| {
        let (p, offset, len) = drma_args(bsp, Call::Get, pid, ("the destination", dst.cast_const()), offset, nbytes)?;
        // SAFETY: dst is not null (checked); the program keeps len bytes there
        // writable until the sync.
        unsafe { bsp.get_raw(p, src.cast(), offset, dst.cast(), len) }
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_hpget(pid: c_int, src: *const c_void, offset: c_int, dst: *mut c_void, nbytes: c_int) {
    with_bsp("bsp_hpget", |bsp| {
        let (p, offset, len) = drma_args(bsp, Call::HpGet, pid, ("the destination", dst.cast_const()), offset, nbytes)?;
        // SAFETY: as bsp_get.
        unsafe { bsp.hpget_raw(p, src.cast(), offset, dst.cast(), len) }
    })
}

// ----- BSMP ---------------------------------------------------------------------

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_set_tagsize(tag_nbytes: *mut c_int) {
    with_bsp("bsp_set_tagsize", |bsp| {
        if tag_nbytes.is_null() {
            return Err(null_argument(bsp, Call::SetTagsize, "tag_nbytes"));
        }
        // SAFETY: not null; the program passes a pointer to an int.
        let wanted = unsafe { *tag_nbytes };
        let new = size(bsp, Call::SetTagsize, "the tag size", wanted)?;
        let old = bsp.set_tagsize(new)?;
        // SAFETY: as above.
        unsafe { *tag_nbytes = old as c_int };
        Ok(())
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_send(pid: c_int, tag: *const c_void, payload: *const c_void, payload_nbytes: c_int) {
    with_bsp("bsp_send", |bsp| {
        let p = self::pid(bsp, Call::Send, pid)?;
        let len = size(bsp, Call::Send, "the payload size", payload_nbytes)?;
        not_null(bsp, Call::Send, "the payload", payload, len)?;
        not_null(bsp, Call::Send, "the tag", tag, bsp.tagsize())?;
        // SAFETY: neither pointer is null where bytes are read; the program
        // gives tagsize bytes of tag and len bytes of payload.
        unsafe { bsp.send_raw(p, tag.cast(), payload.cast(), len) }
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_qsize(nmessages: *mut c_int, accum_nbytes: *mut c_int) {
    with_bsp("bsp_qsize", |bsp| {
        if nmessages.is_null() {
            return Err(null_argument(bsp, Call::Qsize, "nmessages"));
        }
        if accum_nbytes.is_null() {
            return Err(null_argument(bsp, Call::Qsize, "accum_nbytes"));
        }
        let (n, bytes) = bsp.qsize();
        // SAFETY: both checked not null; the program passes pointers to ints.
        unsafe {
            *nmessages = clamp(n);
            *accum_nbytes = clamp(bytes);
        }
        Ok(())
    })
}

/// A count for an int result (a queue beyond 2 GiB reports INT_MAX).
fn clamp(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_get_tag(status: *mut c_int, tag: *mut c_void) {
    with_bsp("bsp_get_tag", |bsp| {
        if status.is_null() {
            return Err(null_argument(bsp, Call::GetTag, "status"));
        }
        let (len, tag_bytes) = match bsp.get_tag() {
            // The tag has the size in effect when it was sent, in the last
            // superstep, which is the size the queue's tags have (the
            // Oxford toolset's bsp_set_tagsize: "the tag size of messages in
            // the system queue is prescribed by the tag size that was valid
            // in the previous superstep").
            Some(m) => (clamp(m.payload.len()), m.tag.to_vec()),
            None => (-1, Vec::new()),
        };
        not_null(bsp, Call::GetTag, "the tag", tag.cast_const(), tag_bytes.len())?;
        // SAFETY: status is not null; tag is not null when bytes are copied,
        // and the program gives room for the tag size's bytes there.
        unsafe {
            *status = len;
            std::ptr::copy_nonoverlapping(tag_bytes.as_ptr(), tag.cast::<u8>(), tag_bytes.len());
        }
        Ok(())
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_move(payload: *mut c_void, reception_nbytes: c_int) {
    with_bsp("bsp_move", |bsp| {
        let room = size(bsp, Call::Move, "the reception size", reception_nbytes)?;
        let waiting = bsp.get_tag().map(|m| m.payload.len());
        let Some(waiting) = waiting else { return Err(bsp.error(Call::Move, Reason::EmptyQueue)) };
        let len = room.min(waiting);
        not_null(bsp, Call::Move, "the payload buffer", payload.cast_const(), len)?;
        let buf: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: not null; the program gives reception_nbytes >= len
            // writable bytes at payload.
            unsafe { std::slice::from_raw_parts_mut(payload.cast(), len) }
        };
        bsp.move_message(buf).map(drop)
    })
}

/// # Safety
///
/// The pointers are what `bsp.h` says they are (null is checked where the
/// standard allows it or a misuse could pass it).
#[no_mangle]
pub unsafe extern "C" fn bsp_hpmove(tag_ptr: *mut *mut c_void, payload_ptr: *mut *mut c_void) -> c_int {
    with_bsp("bsp_hpmove", |bsp| {
        if tag_ptr.is_null() {
            return Err(null_argument(bsp, Call::HpMove, "tag_ptr_buf"));
        }
        if payload_ptr.is_null() {
            return Err(null_argument(bsp, Call::HpMove, "payload_ptr_buf"));
        }
        let Some(m) = bsp.hpmove_raw() else { return Ok(-1) };
        // SAFETY: both checked not null; the program passes pointers to pointers.
        unsafe {
            *tag_ptr = m.tag.cast_mut().cast();
            *payload_ptr = m.payload.cast_mut().cast();
        }
        Ok(clamp(m.payload_len))
    })
}
