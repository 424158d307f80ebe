//! How the C library's allocator treats the memory the runtime frees.
//!
//! Every superstep or burst of messages allocates and frees buffers of the
//! size of its streams: packets kept until acknowledged, received
//! messages, a BSP process's outgoing streams. glibc gives the top of its
//! heap back to the system once more than 128 KiB of it is free, and the
//! next burst takes it back page by page, each page a fault and a page of
//! zeros. With 8 processes on 2 cores exchanging 16 KiB per pair that was
//! 2.5 `brk` calls and 8 page faults per exchange, and keeping the memory
//! made exchanges 5% faster (eight alternating runs of 3,000, every one
//! faster). So the runtime keeps up to [`TRIM_THRESHOLD`] of freed memory
//! in the process, as MPI libraries commonly do (and raises glibc's mmap
//! threshold to the most its own adjustment would reach, which setting the
//! trim threshold stops: large buffers are reused too, not mapped and
//! unmapped each time).
//!
//! `BULKWIRE_MALLOC=system` leaves the allocator alone, and so does any
//! setting of glibc's own (`GLIBC_TUNABLES` with `glibc.malloc.`, or a
//! `MALLOC_*_` variable): the user's choice wins.

use std::io;

/// Freed memory kept in the process at most.
pub const TRIM_THRESHOLD: usize = 64 << 20;
/// Allocations at least this large are mapped on their own: glibc's
/// largest dynamic threshold on 64-bit systems.
pub const MMAP_THRESHOLD: usize = 32 << 20;

/// The variable that chooses: `keep` (the default) or `system`.
pub const MALLOC: &str = "BULKWIRE_MALLOC";

/// Applies the setting of [`MALLOC`]; returns whether the allocator was
/// told to keep freed memory.
pub fn keep_freed_memory() -> io::Result<bool> {
    let setting = std::env::var(MALLOC).ok();
    match setting.as_deref().map(str::trim) {
        None | Some("" | "keep") => {}
        Some("system") => return Ok(false),
        Some(other) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{MALLOC}={other:?}: expected keep or system"),
            ))
        }
    }
    let user_tuned = std::env::vars_os().any(|(name, value)| {
        let name = name.to_string_lossy();
        (name.starts_with("MALLOC_") && name.ends_with('_'))
            || (name == "GLIBC_TUNABLES" && value.to_string_lossy().contains("glibc.malloc."))
    });
    if user_tuned {
        return Ok(false);
    }
    Ok(set())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() -> bool {
    // SAFETY: mallopt takes an option and a value and has no other
    // preconditions; it may be called at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() -> bool {
    false
}
