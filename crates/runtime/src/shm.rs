//! The shared-memory path between processes of a job on one host.
//!
//! Every process creates one file in `/dev/shm` before it says hello to the
//! launcher: a header, then one ring per possible sender (a
//! single-producer, single-consumer byte ring; untouched rings of ranks on
//! other hosts cost address space, not memory). Once the peer table has
//! come, every file of the job exists; a process opens each peer's, and a
//! peer whose file carries this process's host identity (the kernel's boot
//! id, its network and mount namespaces and the user: processes in
//! different network namespaces are different hosts, as the namespace test
//! bed means them to be) is reached through its file from then on, for
//! every message of every channel, in both directions. Its owner unlinks a
//! file once every peer on the host has attached; the launcher removes what
//! a process killed before that left.
//!
//! The rings carry records of 16-byte headers: pieces of a message (its
//! first piece gives the whole length), and for large messages a
//! descriptor that the receiver reads straight from the sender's memory
//! with `process_vm_readv(2)` (one copy) and answers with a record that
//! lets the sender free the buffer, or tells the layer above that lent its
//! own buffer ([`Shm::lend`]; a few bytes of the message's end, a tag,
//! travel in the descriptor) that the buffer is its own again. Where the
//! kernel refuses that (a ptrace policy), the message goes through the
//! ring in pieces.
//!
//! After the header each file has a board: two slots in which its owner
//! posts its contribution to a collective of the whole job ([`Shm::post`]:
//! the BSP barrier's reduction, `World::barrier`'s arrival), which every
//! peer reads where it lies instead of receiving a message from each
//! process.
//!
//! After the rings each file has an arena ([`Shm::arena`]): memory its
//! owner writes and its peers read where it lies, for a layer above that
//! knows when they have read it (BSP's puts, [`SHM_ARENA`]).
//!
//! Beside its file a process may have a stage ([`Shm::stage`],
//! [`crate::stage`]): a memory file of its own, published in its header,
//! that a peer told to read there maps and copies from rather than reading
//! the process's memory with `process_vm_readv` (BSP's buffered large
//! puts, [`SHM_STAGE`]).
//!
//! No reliability machinery runs here: nothing is lost between processes
//! of one host. A record becomes visible to its reader only once it is
//! written whole (the ring's tail is stored after the data, with release
//! order), so a sender that dies mid-message leaves at most an unfinished
//! message, never a wrong one; the launcher notices the death and stops the
//! job. Everything read from a ring is checked as anything from the
//! network is: a malformed record is a protocol violation of its sender.
//!
//! Waking a reader that sleeps in poll(2) on its sockets: it raises a flag
//! in its header before it sleeps and looks at its doorbell once more; a
//! sender rings the doorbell after every record and, finding the flag
//! raised, lowers it and sends an empty datagram to the reader's ordinary
//! socket. A spinning reader costs its senders no system call. (Not a
//! futex: a process that sleeps waits at once for its peers on other
//! hosts, its timers and the launcher, on descriptors in one poll(2), and a
//! futex cannot be among them; an eventfd would have to be passed between
//! processes. The socket is already in that poll.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bulkwire_proto::SendError;

use crate::engine::{Deferral, Inbound, LentMessage, Remote};

/// How this process reaches a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Rings in shared memory (the peer runs on this host).
    Shm,
    /// UDP datagrams, through the reliable channels of `proto`.
    Udp,
}

impl Transport {
    /// `shm` or `udp`, as benchmark rows name them.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Udp => "udp",
        }
    }
}

/// `BULKWIRE_SHM=0` turns the path off (every peer over UDP); so does
/// injected loss (`BULKWIRE_TEST_DROP`) unless `BULKWIRE_SHM=1` is given.
pub const SHM: &str = "BULKWIRE_SHM";
/// `BULKWIRE_SHM_CMA=0` sends large messages through the rings too, rather
/// than letting the receiver read them from the sender's memory.
pub const SHM_CMA: &str = "BULKWIRE_SHM_CMA";
/// Bytes of one ring (a power of two, at least 64 KiB); by default 2 MiB
/// with up to 8 processes per host, less beyond, within 256 MiB a host.
pub const SHM_RING: &str = "BULKWIRE_SHM_RING";
/// `BULKWIRE_SHM_SPLIT=0` leaves the whole copy of a lent message to its
/// reader, rather than asking its lender to write the second half meanwhile.
pub const SHM_SPLIT: &str = "BULKWIRE_SHM_SPLIT";

/// Bytes of each process's arena ([`Shm::arena`]); 0 for none.
pub const SHM_ARENA: &str = "BULKWIRE_SHM_ARENA";
/// `BULKWIRE_SHM_STAGE=0` leaves every process without a stage
/// ([`Shm::stage`]): BSP's buffered direct puts are then read with
/// `process_vm_readv` from the sender's heap.
pub const SHM_STAGE: &str = "BULKWIRE_SHM_STAGE";

/// The arena's size unless [`SHM_ARENA`] says otherwise: BSP takes half a
/// superstep (a superstep's puts of up to 1 MiB to the processes of the
/// host go through it), and only the pages it writes take memory.
pub const ARENA_DEFAULT: usize = 2 << 20;

const MAGIC: u64 = u64::from_le_bytes(*b"bwshm\0\0\x01");
const VERSION: u32 = 7;
/// The file's header: fixed fields, the doorbell and the sleep flags on
/// lines of their own, the host identity.
const HEADER: usize = 4096;
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_SLOTS: usize = 12;
const H_RING: usize = 16;
const H_PID: usize = 24;
const H_HOST_LEN: usize = 28;
const H_PROBE: usize = 32;
const H_ARENA: usize = 40;
/// This process's stage ([`crate::stage`]): its generation (0 for none,
/// stored last), its descriptor, where it lies in this process's memory,
/// its length.
const H_STAGE_GEN: usize = 48;
const H_STAGE_FD: usize = 52;
const H_STAGE_BASE: usize = 56;
const H_STAGE_LEN: usize = 64;
const H_DOORBELL: usize = 128;
/// Sleep flags, one a thread that may sleep in poll(2) on the sockets
/// ([`Sleeper`]): raised before it sleeps, lowered when it wakes or by the
/// peer that wakes it.
const H_SLEEPING: usize = 256;
const H_HOST: usize = 512;
const HOST_MAX: usize = 1024;
/// The board, after the header: two slots in which this process posts its
/// contributions to a collective of the job's processes (the BSP barrier's
/// reduction, `World::barrier`'s arrival; see [`Shm::post`]) for each peer
/// on this host to read where
/// they lie, instead of a message to each. Post number `seq` goes into slot
/// `seq % 2`: its number (stored last, with release order), its length, its
/// bytes, and which collective it belongs to (its kind, [`Kind`]). A
/// process overwrites a slot only two posts later, once it has read every
/// peer's next post, which each peer makes only after reading this one.
const BOARD: usize = HEADER;
const BOARD_SLOT: usize = 4096;
const B_SEQ: usize = 0;
const B_LEN: usize = 8;
const B_KIND: usize = 16;
const B_DATA: usize = 64;
/// The longest post.
pub const POST_MAX: usize = BOARD_SLOT - B_DATA;
/// Where the rings begin.
const RINGS: usize = BOARD + 2 * BOARD_SLOT;
/// The control block in front of each ring: the reader's position, the
/// writer's, what each says of itself, and the writer's request to share a
/// copy, on separate cache lines.
const CONTROL: usize = 320;
const C_HEAD: usize = 0;
const C_TAIL: usize = 64;
const C_ATTACHED: usize = 128;
/// Set by the writer when the ring had no room for its next record: the
/// reader that frees room then wakes it.
const C_FULL: usize = 160;
/// Set by the reader: it can read this writer's memory (single copy).
const C_CMA: usize = 192;
/// The writer, reading a message the reader lent it, asks the reader to
/// write part of it into the writer's buffer meanwhile (see
/// [`read_shared`]): a state word (a sequence number above [`SPLIT_STATE`]),
/// then the lender's token, where the part lies in the lender's memory,
/// where it goes in the writer's, and its length.
const C_SPLIT: usize = 256;
const SPLIT_STATE: u64 = 3;
/// No request (or one taken back, or one whose write failed).
const SPLIT_NONE: u64 = 0;
const SPLIT_ASKED: u64 = 1;
/// The lender is writing.
const SPLIT_WRITING: u64 = 2;
const SPLIT_WRITTEN: u64 = 3;

/// Record header: length u32, kind u8, flags u8, channel u16, extra u64.
const RECORD: usize = 16;
const PAD: u8 = 1;
const DATA: u8 = 2;
const LARGE: u8 = 3;
const DONE: u8 = 4;
/// The end of the message whose first record (of several) comes next (up
/// to [`SUFFIX_MAX`] bytes): by it a receive knows the message for its own
/// before the rest comes ([`Dest`]).
const TAIL: u8 = 5;
const FIRST: u8 = 1;
const LAST: u8 = 2;
/// The value at the address a process publishes for its peers to test
/// whether they can read its memory.
const PROBE: u64 = 0x6277_7072_6f62_6521;

/// Messages of at least the ring's size (and this many bytes) go by
/// descriptor, read by the receiver from the sender's memory, where the
/// receiver can; smaller ones through the ring. Two copies through a ring
/// that stays in the caches beat one `process_vm_readv`, which pins the
/// sender's pages, up to about that size (ping-pong through 2 MiB rings,
/// same run: 64 KiB 5.9 against 18.9 us, 1 MiB 78 against 125 us; 4 MiB
/// 770 against 620 us).
pub(crate) const LARGE_FROM: usize = 256 << 10;
/// A message whose sender waits for it later, with others (a window of
/// borrowed sends, as `MPI_Isend`'s), is lent from this size where its
/// reader has yet to read what went before it ([`Shm::lends_in_stream`]):
/// the reader then reads it once, from the caller's buffer, where through
/// the ring both processes would copy it. Streaming (`bench bw --transport
/// shm --no-mpi`, two runs each of a scratch build that lent every message
/// from 16, 32 or 64 KiB, behind or not, without shared copies):
/// from 64 KiB 12.3-13.3 GB/s at 64 KiB against 10.8-11.1 through the
/// ring, 23.8-25.1 at 256 KiB against 13.7-18.2; lent from 16 or 32 KiB,
/// 5.4-8.3 at 16 KiB against 10.1-10.3.
pub(crate) const STREAM_LEND_FROM: usize = 64 << 10;
/// A lent message from this size up is copied by both processes at once,
/// where the lender is awake: its reader reads the first half while the
/// lender writes the second into the reader's buffer. One process copies
/// at 8-9 GB/s here, two at about twice that (4 MiB in one
/// `process_vm_readv`: 318-383 us; half read, half written by another
/// thread at the same time: 176-187 us). From the size a stream lends:
/// 64 KiB messages streamed (`bench bw --transport shm --no-mpi`, five
/// alternating pairs) 12.8-15.5 GB/s shared against 9.5-13.8 read alone.
const SPLIT_FROM: usize = STREAM_LEND_FROM;
/// Bytes a large-message record may carry after the address and length:
/// the end of the message, inline. A layer that frames its messages with a
/// trailer (a tag) lends the caller's data as it is and sends the trailer
/// here, rather than copying the data to append it.
pub(crate) const SUFFIX_MAX: usize = 64;

/// Settings of the path, from the environment.
#[derive(Clone, Debug)]
pub(crate) struct ShmOptions {
    pub ring: usize,
    pub cma: bool,
    pub split: bool,
    pub arena: usize,
    /// Whether this process makes a stage when asked for one.
    pub stage: bool,
}

impl ShmOptions {
    /// `None` when `BULKWIRE_SHM=0`; an error for a value that makes no sense.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, local_size: u32) -> Result<Option<ShmOptions>, String> {
        match lookup(SHM).as_deref().map(str::trim) {
            // Injected loss is the network's: a job that asks for it wants
            // its peers on this host reached over the network too.
            None | Some("" | "auto") if lookup(crate::DROP).is_some_and(|v| !v.trim().is_empty()) => return Ok(None),
            None | Some("" | "1" | "auto" | "on") => {}
            Some("0" | "off") => return Ok(None),
            Some(other) => return Err(format!("{SHM}={other:?}: expected 0 or 1")),
        }
        let cma = crate::env::switch(SHM_CMA, lookup(SHM_CMA).as_deref(), true)?;
        let split = crate::env::switch(SHM_SPLIT, lookup(SHM_SPLIT).as_deref(), true)?;
        let ring = match lookup(SHM_RING) {
            Some(v) => {
                let n: usize = v.trim().parse().map_err(|_| format!("{SHM_RING}={v:?}: not a number of bytes"))?;
                if !n.is_power_of_two() || !(64 << 10..=1 << 30).contains(&n) {
                    return Err(format!("{SHM_RING}={n}: expected a power of two from 65536 to 1073741824"));
                }
                n
            }
            None => {
                let l = local_size.max(2) as usize;
                let share = (256usize << 20) / (l * (l - 1));
                let share = share.clamp(64 << 10, 2 << 20);
                1 << (usize::BITS - 1 - share.leading_zeros())
            }
        };
        let arena = match lookup(SHM_ARENA) {
            Some(v) => {
                let n: usize = v.trim().parse().map_err(|_| format!("{SHM_ARENA}={v:?}: not a number of bytes"))?;
                if n != 0 && (!n.is_multiple_of(8192) || n > 1 << 32) {
                    return Err(format!("{SHM_ARENA}={n}: expected 0 or a multiple of 8192 up to 4294967296"));
                }
                n
            }
            None => ARENA_DEFAULT,
        };
        let stage = crate::env::switch(SHM_STAGE, lookup(SHM_STAGE).as_deref(), true)?;
        Ok(Some(ShmOptions { ring, cma, split, arena, stage }))
    }

    /// Bytes of the file system the files of `local` processes of one host
    /// take with these settings once every pair's rings are in use (they
    /// are made resident when the peers attach) and every arena is full.
    pub fn host_bytes(&self, local: u32) -> u64 {
        let l = u64::from(local.max(1));
        l * (RINGS as u64 + (l - 1) * (CONTROL + self.ring) as u64 + self.arena as u64)
    }

    /// These settings, made to fit in `free` bytes for `local` processes:
    /// the rings halved (down to 64 KiB), then no arena; an error that
    /// says so where even that does not fit. A shared-memory file system
    /// too small for what its pages are asked to hold kills the process
    /// that touches the first page past it (SIGBUS), as a container's
    /// 64 MiB `/dev/shm` would a job of 8 processes with 2 MiB rings.
    pub fn fit(&self, free: u64, local: u32) -> Result<ShmOptions, String> {
        let mut o = self.clone();
        while o.host_bytes(local) > free && o.ring > 64 << 10 {
            o.ring /= 2;
        }
        if o.host_bytes(local) > free {
            o.arena = 0;
        }
        let need = o.host_bytes(local);
        if need > free {
            return Err(format!(
                "/dev/shm has {} free and {local} processes need {} even with 64 KiB rings and no arena",
                bytes(free),
                bytes(need)
            ));
        }
        Ok(o)
    }
}

/// `n` bytes in KiB below 1 MiB, else in MiB (rounded down).
pub(crate) fn bytes(n: u64) -> String {
    match n < 1 << 20 {
        true => format!("{} KiB", n >> 10),
        false => format!("{} MiB", n >> 20),
    }
}

/// Bytes free in the file system that holds the files ([`file_path`]).
pub(crate) fn free_bytes() -> io::Result<u64> {
    let path = std::ffi::CString::new("/dev/shm").expect("no NUL");
    // SAFETY: a valid path and a zeroed statvfs for the kernel to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// A shared mapping of a whole file.
struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; every access to what others write
// goes through atomics or copies after an acquire load.
unsafe impl Send for Region {}

impl Region {
    fn map(file: &File, len: usize) -> io::Result<Region> {
        // SAFETY: a fresh shared mapping of `len` bytes of an open file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region { ptr: ptr.cast(), len })
    }

    /// Makes the pages of bytes `at..at + len` present and writable in this
    /// mapping now (`MADV_POPULATE_WRITE`), allocating them in the file if
    /// need be. A ring's first pass otherwise faults on each of its pages
    /// at both ends: with 8 processes on 2 cores, 16 KiB messages took over
    /// a millisecond each until their rings had been written once (`bench
    /// total-exchange`). Best effort: a kernel without it (before 5.14)
    /// faults the pages in as they are used.
    fn populate(&self, at: usize, len: usize) {
        const PAGE: usize = 4096;
        let start = at / PAGE * PAGE;
        let end = (at + len).div_ceil(PAGE).saturating_mul(PAGE).min(self.len);
        if start < end {
            // SAFETY: the range lies within this mapping; populating pages
            // changes no byte of them.
            unsafe { libc::madvise(self.ptr.add(start).cast(), end - start, libc::MADV_POPULATE_WRITE) };
        }
    }

    fn u64(&self, at: usize) -> &AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= self.len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned).
        unsafe { &*(self.ptr.add(at) as *const AtomicU64) }
    }

    fn u32(&self, at: usize) -> &AtomicU32 {
        assert!(at.is_multiple_of(4) && at + 4 <= self.len);
        // SAFETY: in bounds and aligned.
        unsafe { &*(self.ptr.add(at) as *const AtomicU32) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring inside a region: `base` is its control block.
#[derive(Clone, Copy)]
struct Ring {
    base: usize,
    size: usize,
}

impl Ring {
    fn data(&self) -> usize {
        self.base + CONTROL
    }
}

/// This process's own file.
struct Own {
    region: Region,
    path: PathBuf,
    unlinked: bool,
    ring: usize,
    /// Where the arena lies in the file, and its length.
    arena: usize,
    arena_len: usize,
    /// Kept alive for the address published in the header.
    _probe: Box<u64>,
    job: u64,
    /// The stage, where one was asked for ([`Shm::stage`]), and whether
    /// one may be made.
    stage: Option<crate::stage::Stage>,
    stage_on: bool,
    /// The last stage's generation (never used again: a peer may still map
    /// one it let go of).
    stage_gen: u32,
}

/// A peer on this host.
struct Peer {
    pid: i32,
    /// The ring this process writes, in the peer's file.
    w: Writer,
    /// The ring in this process's file that the peer writes.
    inbound: Ring,
    /// Reader's state: the head.
    head: u64,
    queue: VecDeque<Out>,
    /// Bytes of messages queued, and lent (read from this process's
    /// memory by the peer, not yet acknowledged): both count against the
    /// send budget.
    queued: usize,
    lent: usize,
    /// Messages the peer is to read from this process's memory, not yet
    /// acknowledged.
    reading: usize,
    /// Tokens of this peer's large messages read, to acknowledge.
    done: VecDeque<u64>,
    partial: Option<Partial>,
    /// The end of the peer's next message, where a [`TAIL`] record told it.
    tail: Option<Vec<u8>>,
    /// This process can read the peer's memory.
    cma_from: bool,
    /// Requests to share a copy made of the peer so far ([`C_SPLIT`]).
    splits: u64,
    /// The peer's ordinary socket (where a wake-up goes).
    wake_to: std::net::SocketAddr,
    /// Where the peer's arena lies in its file, and its length.
    arena: usize,
    arena_len: usize,
    /// The peer's stage, mapped, and the generation that could not be.
    stage: Option<crate::stage::View>,
    stage_failed: u32,
}

impl Peer {
    /// The `len` bytes at `addr` in this peer's memory where they lie in
    /// its stage, through this process's mapping of it (made, or made
    /// again for a new generation, here); `None` where they do not, or the
    /// stage cannot be mapped (the caller reads them from the peer's
    /// memory then, as from anywhere else).
    fn staged(&mut self, job: u64, rank: u32, addr: u64, len: usize) -> Option<&[u8]> {
        let theirs = &self.w.theirs;
        let gen = theirs.u32(H_STAGE_GEN).load(Ordering::Acquire);
        if gen == 0 || gen == self.stage_failed {
            return None;
        }
        if self.stage.as_ref().is_none_or(|v| v.gen() != gen) {
            self.stage = None;
            let fd = theirs.u32(H_STAGE_FD).load(Ordering::Relaxed);
            let base = theirs.u64(H_STAGE_BASE).load(Ordering::Relaxed);
            let stage_len = usize::try_from(theirs.u64(H_STAGE_LEN).load(Ordering::Relaxed)).ok()?;
            match crate::stage::View::open(self.pid, job, rank, gen, fd, base, stage_len) {
                Ok(view) => self.stage = Some(view),
                Err(_) => {
                    // Not tried again for this generation; its bytes are
                    // read from the peer's memory, as without a stage.
                    self.stage_failed = gen;
                    return None;
                }
            }
        }
        self.stage.as_ref()?.slice(addr, len)
    }
}

/// The writing end of a ring in a peer's file.
struct Writer {
    /// The peer's file: its header and the rings.
    theirs: Region,
    out: Ring,
    /// The tail, and the head as last read.
    tail: u64,
    head_seen: u64,
}

struct Out {
    channel: u16,
    data: Vec<u8>,
    /// Where the message begins in `data` (room left for a header).
    start: usize,
    /// Bytes of the message written so far.
    sent: usize,
    /// Bytes at the message's start that were written before it was queued
    /// ([`Shm::send_parts`]), and are not in `data`.
    base: usize,
    /// A message in memory this process does not own ([`Shm::lend`]):
    /// `data[start..]` is then only its inline end.
    loan: Option<Loan>,
}

/// Where a lent message lies, and the token its reader answers with.
#[derive(Clone, Copy)]
struct Loan {
    addr: u64,
    len: usize,
    token: u64,
}

/// A large message's buffer, kept until its reader says it has read it
/// (empty for a message lent from memory the layer above holds: its bytes
/// count against no budget here).
struct Lent {
    to: u32,
    len: usize,
    /// Where the message's body lies in this process's memory, and its
    /// length: what its reader may ask this process to write.
    at: u64,
    size: usize,
    _data: Vec<u8>,
}

struct Partial {
    channel: u16,
    total: usize,
    /// Bytes of it that came so far.
    got: usize,
    /// Bytes at its start that go into the receive's buffer ([`Dest`]);
    /// `data` holds the rest.
    placed: usize,
    data: Vec<u8>,
}

/// A receive's own buffer, into which the next message from one peer on
/// this host is written as it comes out of the ring
/// ([`crate::Engine::defer_into`]), rather than into a buffer of its own
/// that the receive would then copy.
#[derive(Debug)]
pub(crate) struct Dest {
    pub ptr: *mut u8,
    pub cap: usize,
    pub from: u32,
    pub state: DestState,
}

// SAFETY: the buffer is the receive's, lent to the engine (whichever thread
// holds it) until the receive ends the deferral.
unsafe impl Send for Dest {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DestState {
    Free,
    /// A message is being written into it (the peer's partial one).
    Filling,
    /// It holds the start of a message in the inbox.
    Holding,
}

/// What went through the path, for the job's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmStats {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    /// Of those, messages read by the receiver from this process's memory.
    pub single_copy: u64,
    /// Of those, messages read from a caller's own buffer ([`Shm::lend`]),
    /// not from a copy the runtime made.
    pub lent: u64,
    /// Messages from this peer that went straight into a receive's own
    /// buffer: lent, and read from the peer's memory ([`Shm::read_lent`]),
    /// or written there out of the ring as they came ([`Dest`]).
    pub read_in_place: u64,
    /// Messages lent by this peer whose copy it shared: it wrote their
    /// second half into this process's buffer while this process read the
    /// first ([`SPLIT_FROM`]).
    pub shared_copies: u64,
    pub wakeups_sent: u64,
    /// Bytes this process copied from the peer's arena and from its stage
    /// where they lay (BSP's puts and get replies through them; a message
    /// read where it lies in the arena is the layer above's to count).
    pub arena_read_bytes: u64,
    pub stage_read_bytes: u64,
}

impl std::fmt::Debug for Shm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shm").field("me", &self.me).field("local", &self.local).finish_non_exhaustive()
    }
}

pub(crate) struct Shm {
    me: u32,
    own: Own,
    /// Indexed by rank; `None` for ranks on other hosts (and this one).
    peers: Vec<Option<Peer>>,
    local: Vec<u32>,
    last_doorbell: u64,
    /// The last scan stopped early (a full inbox): scan again even if the
    /// doorbell did not ring.
    rescan: bool,
    /// Buffers of large messages, kept until their receivers read them.
    lent: HashMap<u64, Lent>,
    /// Tokens of messages lent from the layer above's memory
    /// ([`Shm::lend`]) that their readers have not answered yet.
    loans: HashSet<u64>,
    next_token: u64,
    /// Lent messages in the inbox left unread ([`Deferral`]).
    deferred: usize,
    cma: bool,
    split: bool,
    pub stats: Vec<ShmStats>,
    /// Peers to send a wake-up datagram to.
    pub wake: Vec<std::net::SocketAddr>,
    /// The number of this process's last post on the board.
    posts: u64,
    /// The post whose peers' counterparts this process may be waiting for:
    /// it does not sleep while they are all there (see [`Shm::may_sleep`]).
    awaited: Option<u64>,
    /// Buffers of small messages, written into rings or handed back by the
    /// layer above ([`Shm::keep_buffer`]), for the next messages read: a
    /// message read is otherwise a new allocation, freed by whoever takes
    /// it. (A BSP total exchange among 8 processes sends and receives 7
    /// such messages in every process at every superstep.)
    spare: Vec<Vec<u8>>,
    /// Something was queued for a local peer (a message, or the answer to
    /// one lent) since a flush last found every queue empty.
    pending: bool,
}

/// The room of the buffers [`Shm`] keeps for messages read: small ones;
/// the runtime's receive batch keeps those of datagrams, from 64 KiB.
const SPARE_ROOM: std::ops::Range<usize> = 64..65_536;
/// How many it keeps, beyond two for each local peer.
const SPARE_MIN: usize = 16;

/// Which collective a post on the board belongs to: a process reads its
/// peers' posts by the number of its own, and their kinds must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The BSP sync's barrier: the reduction.
    BspSync = 1,
    /// `World::barrier`: nothing but the arrival.
    Barrier = 2,
}

impl Kind {
    fn name(code: u32) -> String {
        match code {
            1 => "a bsp_sync".into(),
            2 => "a barrier".into(),
            other => format!("of unknown kind {other}"),
        }
    }
}

/// Where post number `seq` lies in its poster's file.
fn board_slot(seq: u64) -> usize {
    BOARD + (seq % 2) as usize * BOARD_SLOT
}

/// A thread that may sleep in poll(2) on the sockets, each with a sleep
/// flag of its own ([`H_SLEEPING`]): with one flag for both, the progress
/// thread, waking from its own poll while the application thread slept in
/// its own, lowered the flag that thread slept on, and a writer then woke
/// nobody (the thread slept to its poll's limit, 20 ms). Shown by a unit
/// test; not seen in a job's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sleeper {
    /// The application thread that waits in poll(2) on the sockets.
    Poller,
    /// The progress thread.
    Progress,
}

impl Sleeper {
    const ALL: [Sleeper; 2] = [Sleeper::Poller, Sleeper::Progress];

    fn flag(self) -> usize {
        H_SLEEPING + 4 * self as usize
    }
}

/// Lowers the sleep flags raised in `theirs` (a peer's region); whether any
/// was (the peer then needs a wake-up datagram: one wakes every thread of
/// it that sleeps, all polling the same sockets). Each flag is read first,
/// then swapped, so that a flag already lowered costs no write.
fn lower_sleep_flags(theirs: &Region) -> bool {
    let mut raised = false;
    for who in Sleeper::ALL {
        let sleeping = theirs.u32(who.flag());
        raised |= sleeping.load(Ordering::SeqCst) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0;
    }
    raised
}

/// Whether a thread of the peer whose region is `theirs` sleeps in poll(2).
fn asleep(theirs: &Region) -> bool {
    Sleeper::ALL.iter().any(|who| theirs.u32(who.flag()).load(Ordering::Acquire) != 0)
}

fn peer_of(peers: &[Option<Peer>], rank: u32) -> &Peer {
    peers[rank as usize].as_ref().expect("a local peer")
}

fn file_path(job: u64, rank: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/bulkwire-{job:016x}-{rank}"))
}

/// The files of job `job` left in `/dev/shm` (by processes killed before
/// they unlinked theirs): for the launcher to remove.
pub fn leftover_files(job: u64) -> Vec<PathBuf> {
    let prefix = format!("bulkwire-{job:016x}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter(|d| d.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .map(|d| d.path())
        .collect()
}

/// What makes two processes one host for this path.
fn host_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = |name: &str| std::fs::metadata(format!("/proc/self/ns/{name}")).map(|m| m.ino()).unwrap_or(0);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    format!("{}/net:{}/mnt:{}/uid:{}", boot.trim(), ns("net"), ns("mnt"), uid)
}

fn align(n: usize) -> usize {
    (n + RECORD - 1) & !(RECORD - 1)
}

impl Shm {
    /// Creates this process's file, before the rendezvous. `None` (and why)
    /// where the host has no shared-memory file system or the file cannot
    /// be made: the job then runs over UDP alone.
    pub fn create(job: u64, rank: u32, size: u32, options: &ShmOptions) -> Result<Shm, String> {
        let path = file_path(job, rank);
        let slot = CONTROL + options.ring;
        let arena = RINGS + size as usize * slot;
        let len = arena + options.arena;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let made = (|| {
            file.set_len(len as u64)?;
            Region::map(&file, len)
        })();
        let region = match made {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(format!("{}: {e}", path.display()));
            }
        };
        let host = host_identity();
        let host = &host.as_bytes()[..host.len().min(HOST_MAX)];
        let probe = Box::new(PROBE);
        // SAFETY: the header lies within the fresh mapping, which no other
        // process reads before the magic number is stored below.
        unsafe {
            std::ptr::copy_nonoverlapping(host.as_ptr(), region.ptr.add(H_HOST), host.len());
        }
        region.u32(H_VERSION).store(VERSION, Ordering::Relaxed);
        region.u32(H_SLOTS).store(size, Ordering::Relaxed);
        region.u64(H_RING).store(options.ring as u64, Ordering::Relaxed);
        region.u32(H_PID).store(std::process::id(), Ordering::Relaxed);
        region.u32(H_HOST_LEN).store(host.len() as u32, Ordering::Relaxed);
        region.u64(H_PROBE).store(&*probe as *const u64 as u64, Ordering::Relaxed);
        region.u64(H_ARENA).store(options.arena as u64, Ordering::Relaxed);
        region.u64(H_MAGIC).store(MAGIC, Ordering::Release);
        if options.cma {
            // Where a ptrace policy (Yama) restricts who may read this
            // process's memory, let the job's processes do it.
            // SAFETY: prctl with integer arguments; fails harmlessly without Yama.
            unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        }
        Ok(Shm {
            me: rank,
            own: Own {
                region,
                path,
                unlinked: false,
                ring: options.ring,
                arena,
                arena_len: options.arena,
                _probe: probe,
                job,
                stage: None,
                stage_on: options.stage,
                stage_gen: 0,
            },
            peers: (0..size).map(|_| None).collect(),
            local: Vec::new(),
            last_doorbell: 0,
            rescan: false,
            lent: HashMap::new(),
            loans: HashSet::new(),
            deferred: 0,
            next_token: 1,
            cma: options.cma,
            split: options.split,
            stats: vec![ShmStats::default(); size as usize],
            wake: Vec::new(),
            posts: 0,
            awaited: None,
            spare: Vec::new(),
            pending: false,
        })
    }

    /// Keeps `buffer`, whose bytes its owner is done with, for a message
    /// read later, if it is of the small kind kept and fewer than the most
    /// are kept; else hands it back.
    pub fn keep_buffer(&mut self, buffer: Vec<u8>) -> Option<Vec<u8>> {
        keep_spare(&mut self.spare, SPARE_MIN + 2 * self.local.len(), buffer)
    }

    /// Opens the files of the peers on this host, once the peer table has
    /// come (every process of the job made its file before it said hello).
    pub fn attach(&mut self, job: u64, ordinary: &[std::net::SocketAddr]) {
        let mine = self.own.region.clone_header_host();
        for rank in 0..self.peers.len() as u32 {
            if rank == self.me {
                continue;
            }
            if let Some(peer) = self.open_peer(job, rank, &mine, ordinary[rank as usize]) {
                self.local.push(rank);
                self.peers[rank as usize] = Some(peer);
            }
        }
    }

    fn open_peer(&self, job: u64, rank: u32, host: &[u8], wake_to: std::net::SocketAddr) -> Option<Peer> {
        let file = OpenOptions::new().read(true).write(true).open(file_path(job, rank)).ok()?;
        let meta = file.metadata().ok()?;
        // SAFETY: getuid has no preconditions.
        if meta.uid() != unsafe { libc::getuid() } || meta.mode() & 0o077 != 0 || (meta.len() as usize) < RINGS {
            return None;
        }
        let len = meta.len() as usize;
        let theirs = Region::map(&file, len).ok()?;
        if theirs.u64(H_MAGIC).load(Ordering::Acquire) != MAGIC
            || theirs.u32(H_VERSION).load(Ordering::Relaxed) != VERSION
        {
            return None;
        }
        if theirs.clone_header_host() != host {
            return None;
        }
        let slots = theirs.u32(H_SLOTS).load(Ordering::Relaxed) as usize;
        let ring = theirs.u64(H_RING).load(Ordering::Relaxed) as usize;
        let arena_len = theirs.u64(H_ARENA).load(Ordering::Relaxed) as usize;
        let arena = RINGS + slots * (CONTROL + ring);
        if !ring.is_power_of_two()
            || ring < 4096
            || slots != self.peers.len()
            || arena.checked_add(arena_len) != Some(len)
        {
            return None;
        }
        let pid = theirs.u32(H_PID).load(Ordering::Relaxed) as i32;
        let out = Ring { base: RINGS + self.me as usize * (CONTROL + ring), size: ring };
        let inbound = Ring { base: RINGS + rank as usize * (CONTROL + self.own.ring), size: self.own.ring };
        let probe = theirs.u64(H_PROBE).load(Ordering::Relaxed);
        let cma_from = self.cma && read_remote(pid, probe, 8, &[]).is_ok_and(|b| b == PROBE.to_ne_bytes());
        // The two rings between this pair, present at both ends before use.
        self.own.region.populate(inbound.base, CONTROL + inbound.size);
        theirs.populate(out.base, CONTROL + out.size);
        self.own.region.u32(inbound.base + C_CMA).store(cma_from as u32, Ordering::Release);
        theirs.u32(out.base + C_ATTACHED).store(1, Ordering::Release);
        let tail = theirs.u64(out.base + C_TAIL).load(Ordering::Acquire);
        Some(Peer {
            pid,
            w: Writer { theirs, out, tail, head_seen: tail },
            inbound,
            head: 0,
            queue: VecDeque::new(),
            queued: 0,
            lent: 0,
            reading: 0,
            done: VecDeque::new(),
            partial: None,
            tail: None,
            cma_from,
            splits: 0,
            wake_to,
            arena,
            arena_len,
            stage: None,
            stage_failed: 0,
        })
    }

    pub fn is_local(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).is_some_and(Option::is_some)
    }

    /// Every other process of the job is on this host.
    pub fn all_local(&self) -> bool {
        self.local.len() + 1 == self.peers.len()
    }

    /// Whether a message of `len` bytes to `to` (a local peer) is taken now:
    /// a queue of up to `budget` bytes per peer; a message of any size
    /// when nothing waits.
    pub fn check(&self, to: u32, len: usize, budget: usize) -> Result<(), SendError> {
        let peer = self.peers[to as usize].as_ref().expect("a local peer");
        let held = peer.queued + peer.lent;
        if held > 0 && held + len > budget {
            return Err(SendError::WouldBlock);
        }
        Ok(())
    }

    /// Sends `data` then `suffix` to `to` (a local peer) as one message:
    /// what the ring has room for now is written straight from them, and
    /// only the rest is copied, to wait in the queue. (Behind a queue, or
    /// where the message goes by descriptor, it is copied whole.)
    pub fn send_parts(&mut self, to: u32, channel: u16, data: &[u8], suffix: &[u8]) {
        let len = data.len() + suffix.len();
        let peer = self.peers[to as usize].as_ref().expect("a local peer");
        let by_descriptor = len >= LARGE_FROM.max(peer.w.out.size) && self.single_copy_to(to);
        if !peer.queue.is_empty() || by_descriptor {
            let mut whole = Vec::with_capacity(len);
            whole.extend_from_slice(data);
            whole.extend_from_slice(suffix);
            return self.send(to, channel, whole, 0);
        }
        let stats = &mut self.stats[to as usize];
        stats.messages_sent += 1;
        stats.bytes_sent += len as u64;
        let peer = self.peers[to as usize].as_mut().expect("a local peer");
        let max_piece = peer.w.out.size / 4 - RECORD;
        // The bytes `at..at + n` of `data` then `suffix`, as two slices.
        let parts = |at: usize, n: usize| {
            let d = &data[at.min(data.len())..(at + n).min(data.len())];
            let s = &suffix[at.saturating_sub(data.len())..(at + n).saturating_sub(data.len())];
            (d, s)
        };
        let mut sent = 0;
        let mut wrote = false;
        loop {
            let piece = (len - sent).min(max_piece);
            let mut flags = 0;
            if sent == 0 {
                flags |= FIRST;
            }
            if sent + piece == len {
                flags |= LAST;
            }
            if flags == FIRST {
                let k = SUFFIX_MAX.min(len);
                let (d, s) = parts(len - k, k);
                if !peer.w.write_parts(TAIL, 0, channel, 0, d, s) {
                    break;
                }
            }
            let (d, s) = parts(sent, piece);
            if !peer.w.write_parts(DATA, flags, channel, len as u64, d, s) {
                break;
            }
            wrote = true;
            sent += piece;
            if sent == len {
                break;
            }
        }
        if sent < len || !wrote {
            let (d, s) = parts(sent, len - sent);
            let mut rest = Vec::with_capacity(len - sent);
            rest.extend_from_slice(d);
            rest.extend_from_slice(s);
            peer.queued += rest.len();
            peer.queue.push_back(Out { channel, data: rest, start: 0, sent, base: sent, loan: None });
            self.pending = true;
        }
        if wrote {
            self.publish(to);
        }
    }

    /// Queues `data[start..]` for `to` (a local peer) and writes what fits.
    pub fn send(&mut self, to: u32, channel: u16, data: Vec<u8>, start: usize) {
        let len = data.len() - start;
        let stats = &mut self.stats[to as usize];
        stats.messages_sent += 1;
        stats.bytes_sent += len as u64;
        let peer = self.peers[to as usize].as_mut().expect("a local peer");
        peer.queued += len;
        peer.queue.push_back(Out { channel, data, start, sent: 0, base: 0, loan: None });
        self.pending = true;
        self.push(to);
    }

    /// Whether a message of `len` bytes to `to` goes by descriptor, read by
    /// `to` from this process's memory (a local peer that said it can): one
    /// [`Shm::lend`] takes. From the ring's size up; from half of it where
    /// copies are shared ([`SPLIT_FROM`]): a lender waits for its answer,
    /// so it writes half while the reader reads the other. Streaming 1 MiB
    /// messages with 2 MiB rings (`bench bw`, two runs each): 13.6-22.1
    /// GB/s lent, 8.1-8.2 through the ring; a ping-pong of them is slower
    /// lent (64-65 us against 50-55), still twice as fast as Open MPI's
    /// shared memory. Shorter ones, from [`LARGE_FROM`], where the ring has
    /// no room for them now (a stream that outruns its reader), rather than
    /// copied into the queue to wait: streaming 256 KiB messages (`bench bw
    /// --transport shm`, six alternating pairs) 15.2-20.7 GB/s against
    /// 5.9-8.6 through the ring and the queue. (From 64 KiB, no gain: 7.0-7.5
    /// against 7.7-9.8; only lent whole, through rings of 128 KiB, did
    /// 64 KiB messages go at 11.7-12.0.)
    pub fn lends(&self, to: u32, len: usize) -> bool {
        let Some(peer) = self.peers.get(to as usize).and_then(Option::as_ref) else { return false };
        if len < LARGE_FROM || !self.single_copy_to(to) {
            return false;
        }
        let ring = match self.split {
            true => peer.w.out.size / 2,
            false => peer.w.out.size,
        };
        len >= LARGE_FROM.max(ring) || !peer.queue.is_empty() || !peer.w.has_room(len)
    }

    /// [`Shm::lends`], and more, for a message whose sender waits for it
    /// later ([`STREAM_LEND_FROM`]): from that size where `to` has yet to
    /// read what went before it (a stream), not where it has read all (a
    /// message and its answer: two copies through the ring, made in turn,
    /// are then the faster).
    pub fn lends_in_stream(&self, to: u32, len: usize) -> bool {
        let Some(peer) = self.peers.get(to as usize).and_then(Option::as_ref) else { return false };
        let behind = peer.reading > 0 || !peer.queue.is_empty() || peer.w.unread();
        self.lends(to, len) || (len >= STREAM_LEND_FROM && behind && self.single_copy_to(to))
    }

    /// Queues for `to` a message of the `len` bytes at `addr` in this
    /// process's memory followed by `suffix` (at most [`SUFFIX_MAX`] bytes),
    /// without copying them: `to` reads them from there
    /// ([`Shm::lends`] must hold). Returns the token that
    /// [`Shm::returned`] answers for. What `to` receives is what that memory
    /// holds when it reads it: the caller leaves it unchanged until then.
    pub fn lend(&mut self, to: u32, channel: u16, addr: u64, len: usize, suffix: &[u8]) -> u64 {
        assert!(suffix.len() <= SUFFIX_MAX, "a suffix of {} bytes", suffix.len());
        let token = self.next_token;
        self.next_token += 1;
        self.loans.insert(token);
        let stats = &mut self.stats[to as usize];
        stats.messages_sent += 1;
        stats.bytes_sent += (len + suffix.len()) as u64;
        let peer = self.peers[to as usize].as_mut().expect("a local peer");
        let loan = Some(Loan { addr, len, token });
        peer.queue.push_back(Out { channel, data: suffix.to_vec(), start: 0, sent: 0, base: 0, loan });
        self.pending = true;
        self.push(to);
        token
    }

    /// Whether the reader of the message lent with `token` has read it (or
    /// it was never lent): its memory is then the caller's again.
    pub fn returned(&self, token: u64) -> bool {
        !self.loans.contains(&token)
    }

    /// Whether the process of `rank`, a local peer, still exists.
    pub fn peer_alive(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).and_then(Option::as_ref).is_some_and(|peer| process_exists(peer.pid))
    }

    /// Writes what waits for `to`: acknowledgements of large messages
    /// first, then queued messages in order, as far as the ring has room.
    fn push(&mut self, to: u32) {
        let peer = self.peers[to as usize].as_mut().expect("a local peer");
        let mut wrote = false;
        while let Some(&token) = peer.done.front() {
            if !peer.w.write(DONE, 0, 0, token, &[]) {
                break;
            }
            peer.done.pop_front();
            wrote = true;
        }
        let single_copy = peer.w.theirs.u32(peer.w.out.base + C_CMA).load(Ordering::Acquire) == 1;
        let max_piece = peer.w.out.size / 4 - RECORD;
        while let Some(out) = peer.queue.front_mut() {
            if let Some(loan) = out.loan {
                let suffix = &out.data[out.start..];
                let mut payload = [0u8; 16 + SUFFIX_MAX];
                payload[..8].copy_from_slice(&loan.addr.to_le_bytes());
                payload[8..16].copy_from_slice(&(loan.len as u64).to_le_bytes());
                payload[16..16 + suffix.len()].copy_from_slice(suffix);
                if !peer.w.write(LARGE, 0, out.channel, loan.token, &payload[..16 + suffix.len()]) {
                    break;
                }
                self.stats[to as usize].single_copy += 1;
                self.stats[to as usize].lent += 1;
                peer.queue.pop_front();
                self.lent.insert(loan.token, Lent { to, len: 0, at: loan.addr, size: loan.len, _data: Vec::new() });
                peer.reading += 1;
                wrote = true;
                continue;
            }
            let held = out.data.len() - out.start;
            let len = out.base + held;
            if out.sent == 0 && len >= LARGE_FROM.max(peer.w.out.size) && single_copy {
                let token = self.next_token;
                // The message's end goes in the record, as a lent message's
                // suffix: a layer's trailer, by which a receive may know it
                // for its own before reading the rest (see `Deferral`).
                let message = &out.data[out.start..];
                let (body, tail) = message.split_at(message.len() - SUFFIX_MAX.min(message.len()));
                let (at, size) = (body.as_ptr() as u64, body.len());
                let mut payload = [0u8; 16 + SUFFIX_MAX];
                payload[..8].copy_from_slice(&at.to_le_bytes());
                payload[8..16].copy_from_slice(&(size as u64).to_le_bytes());
                payload[16..16 + tail.len()].copy_from_slice(tail);
                if !peer.w.write(LARGE, 0, out.channel, token, &payload[..16 + tail.len()]) {
                    break;
                }
                self.next_token += 1;
                self.stats[to as usize].single_copy += 1;
                let out = peer.queue.pop_front().expect("the front");
                peer.queued -= len;
                peer.lent += len;
                peer.reading += 1;
                self.lent.insert(token, Lent { to, len, at, size, _data: out.data });
                wrote = true;
                continue;
            }
            let piece = (len - out.sent).min(max_piece);
            let mut flags = 0;
            if out.sent == 0 {
                flags |= FIRST;
            }
            if out.sent + piece == len {
                flags |= LAST;
            }
            if flags == FIRST {
                let message = &out.data[out.start..];
                if !peer.w.write(TAIL, 0, out.channel, 0, &message[message.len() - SUFFIX_MAX.min(message.len())..]) {
                    break;
                }
            }
            let from = out.start + out.sent - out.base;
            if !peer.w.write(DATA, flags, out.channel, len as u64, &out.data[from..from + piece]) {
                break;
            }
            wrote = true;
            out.sent += piece;
            if out.sent == len {
                peer.queued -= held;
                let out = peer.queue.pop_front().expect("the front");
                keep_spare(&mut self.spare, SPARE_MIN + 2 * self.local.len(), out.data);
            }
        }
        if wrote {
            self.publish(to);
        }
    }

    /// Makes what was written into `to`'s ring visible to it, and wakes it
    /// if it sleeps.
    fn publish(&mut self, to: u32) {
        let peer = self.peers[to as usize].as_mut().expect("a local peer");
        peer.w.theirs.u64(peer.w.out.base + C_TAIL).store(peer.w.tail, Ordering::Release);
        // The doorbell, then the sleep flag: sequentially consistent with
        // the reader's flag, then doorbell (see `may_sleep`).
        peer.w.theirs.u64(H_DOORBELL).fetch_add(1, Ordering::SeqCst);
        if lower_sleep_flags(&peer.w.theirs) {
            self.stats[to as usize].wakeups_sent += 1;
            self.wake.push(peer.wake_to);
        }
    }

    /// Writes what waits for every local peer: none where nothing was
    /// queued since the last flush left every queue empty (a flush comes
    /// with every call on the engine and every turn of a wait).
    pub fn flush(&mut self) {
        if !self.pending {
            return;
        }
        let mut left = false;
        for i in 0..self.local.len() {
            let to = self.local[i];
            let peer = self.peers[to as usize].as_ref().expect("a local peer");
            if !peer.queue.is_empty() || !peer.done.is_empty() {
                self.push(to);
                let peer = self.peers[to as usize].as_ref().expect("a local peer");
                left |= !peer.queue.is_empty() || !peer.done.is_empty();
            }
        }
        self.pending = left;
    }

    /// Reads what the local peers wrote into `inbox` while it holds fewer
    /// than `limit` bytes (counted in `inbox_bytes`). Returns whether
    /// anything was read, or the violation of a peer.
    pub fn poll(
        &mut self,
        inbox: &mut VecDeque<Inbound>,
        inbox_bytes: &mut usize,
        limit: usize,
        max_message: usize,
        defer: Option<&Deferral>,
        mut dest: Option<&mut Dest>,
    ) -> Result<bool, String> {
        self.unlink_when_attached();
        let doorbell = self.own.region.u64(H_DOORBELL).load(Ordering::Acquire);
        if doorbell == self.last_doorbell && !self.rescan {
            return Ok(false);
        }
        self.last_doorbell = doorbell;
        self.rescan = false;
        let mut moved = false;
        let mut acknowledge = Vec::new();
        for i in 0..self.local.len() {
            let from = self.local[i];
            let peer = self.peers[from as usize].as_mut().expect("a local peer");
            let ring = peer.inbound;
            let region = &self.own.region;
            // The peer, reading a message this process lent it, asks it to
            // write the rest into its buffer meanwhile.
            let request = region.u64(ring.base + C_SPLIT);
            let asked = request.load(Ordering::Acquire);
            if asked & SPLIT_STATE == SPLIT_ASKED {
                let field = |k: usize| region.u64(ring.base + C_SPLIT + 8 * k).load(Ordering::Relaxed);
                let (token, src, dst, len) = (field(1), field(2), field(3), field(4));
                let within = self.lent.get(&token).is_some_and(|l| {
                    l.to == from && src >= l.at && src.checked_add(len).is_some_and(|end| end <= l.at + l.size as u64)
                });
                // Claimed only if the request is still the one read (its
                // sequence number): the peer may have taken it back, or
                // asked anew, meanwhile.
                let claim = asked - SPLIT_ASKED + SPLIT_WRITING;
                if request.compare_exchange(asked, claim, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    let wrote = within && write_remote_raw(peer.pid, src, dst, len as usize).is_ok();
                    let state = if wrote { SPLIT_WRITTEN } else { SPLIT_NONE };
                    request.store(asked - SPLIT_ASKED + state, Ordering::Release);
                    if !within {
                        return Err(format!(
                            "rank {from} broke the protocol: shared memory: asked to write what was not lent to it"
                        ));
                    }
                }
            }
            let tail = region.u64(ring.base + C_TAIL).load(Ordering::Acquire);
            let start_head = peer.head;
            let mut held = false;
            while peer.head != tail {
                if *inbox_bytes >= limit {
                    self.rescan = true;
                    break;
                }
                let bad = |why: &str| Err(format!("rank {from} broke the protocol: shared memory: {why}"));
                let available = tail.wrapping_sub(peer.head);
                if available > ring.size as u64 || available < RECORD as u64 {
                    return bad("the ring's positions are inconsistent");
                }
                let at = (peer.head as usize) & (ring.size - 1);
                let mut header = [0u8; RECORD];
                // SAFETY: `at + RECORD <= ring.size` (records are aligned to
                // RECORD and the ring's size is a multiple), within the
                // mapping; the writer does not touch published records.
                unsafe {
                    std::ptr::copy_nonoverlapping(region.ptr.add(ring.data() + at), header.as_mut_ptr(), RECORD);
                }
                let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
                let (kind, flags) = (header[4], header[5]);
                let channel = u16::from_le_bytes(header[6..8].try_into().expect("2 bytes"));
                let extra = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
                if kind == PAD {
                    let skip = (ring.size - at) as u64;
                    if skip > available {
                        return bad("a padding record runs past the data");
                    }
                    peer.head = peer.head.wrapping_add(skip);
                    continue;
                }
                let size = RECORD + align(len);
                if size as u64 > available || at + size > ring.size {
                    return bad("a record runs past the data");
                }
                // SAFETY: checked to lie within the ring just above.
                let payload = unsafe { std::slice::from_raw_parts(region.ptr.add(ring.data() + at + RECORD), len) };
                match kind {
                    DATA => {
                        if flags & FIRST != 0 {
                            if peer.partial.is_some() {
                                return bad("a message begins inside another");
                            }
                            let total = extra as usize;
                            if total > max_message {
                                return bad("a message longer than the largest allowed");
                            }
                            // Into the receive's buffer, all but its end (a
                            // layer's trailer), where that end (all of it
                            // here, or told before) says it is the receive's.
                            let tail = peer.tail.take();
                            let end = match flags & LAST != 0 {
                                true => payload,
                                false => tail.as_deref().unwrap_or_default(),
                            };
                            let placed = match (defer, dest.as_deref_mut()) {
                                (Some(defer), Some(d))
                                    if d.state == DestState::Free
                                        && total > defer.tail
                                        && defer.covers(from, channel, end) =>
                                {
                                    d.state = DestState::Filling;
                                    d.cap.min(total - defer.tail)
                                }
                                _ => 0,
                            };
                            let data = spare_buffer(&mut self.spare, total - placed);
                            peer.partial = Some(Partial { channel, total, got: 0, placed, data });
                        }
                        let Some(p) = peer.partial.as_mut() else { return bad("a piece outside any message") };
                        if p.channel != channel || p.got + len > p.total {
                            return bad("a piece does not fit its message");
                        }
                        let placing = p.placed.saturating_sub(p.got).min(len);
                        if placing > 0 {
                            let d = dest.as_deref().expect("placed only where there is a buffer");
                            // SAFETY: `p.got + placing <= p.placed <= d.cap`:
                            // within the receive's buffer, which is the
                            // engine's until the deferral ends.
                            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), d.ptr.add(p.got), placing) };
                        }
                        p.data.extend_from_slice(&payload[placing..]);
                        p.got += len;
                        if flags & LAST != 0 {
                            let p = peer.partial.take().expect("just matched");
                            if p.got != p.total {
                                return bad("a message ended short");
                            }
                            let msg = match dest.as_deref_mut() {
                                Some(d) if p.placed > 0 => {
                                    if defer.is_some_and(|x| x.covers(from, channel, &p.data)) {
                                        d.state = DestState::Holding;
                                        held = true;
                                        self.stats[from as usize].read_in_place += 1;
                                        let lent = LentMessage { len: p.placed, remote: None };
                                        Inbound { from, channel, data: p.data, start: 0, lent: Some(lent), aimed: 0 }
                                    } else {
                                        // Not the receive's: taken out of its buffer.
                                        d.state = DestState::Free;
                                        Inbound::new(from, channel, d.take(p.placed, &p.data), 0)
                                    }
                                }
                                _ => Inbound::new(from, channel, p.data, 0),
                            };
                            *inbox_bytes += msg.data.capacity();
                            inbox.push_back(msg);
                        }
                    }
                    LARGE => {
                        if !(16..=16 + SUFFIX_MAX).contains(&len) || peer.partial.is_some() {
                            return bad("a malformed large-message record");
                        }
                        let addr = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
                        let total = u64::from_le_bytes(payload[8..16].try_into().expect("8 bytes")) as usize;
                        let suffix = &payload[16..];
                        if total > max_message.saturating_sub(suffix.len()) {
                            return bad("a message longer than the largest allowed");
                        }
                        if defer.is_some_and(|d| d.covers(from, channel, suffix)) {
                            // Left where it is: the receive that wants it
                            // reads it into its own buffer.
                            let remote = Some(Remote { addr, token: extra });
                            let lent = LentMessage { len: total, remote };
                            let data = suffix.to_vec();
                            *inbox_bytes += data.capacity();
                            inbox.push_back(Inbound { from, channel, data, start: 0, lent: Some(lent), aimed: 0 });
                            self.deferred += 1;
                        } else {
                            let (data, shared) = read_whole(peer, self.split, extra, addr, total, suffix)
                                .map_err(|e| read_failed(from, e))?;
                            self.stats[from as usize].shared_copies += shared as u64;
                            *inbox_bytes += data.capacity();
                            inbox.push_back(Inbound::new(from, channel, data, 0));
                            peer.done.push_back(extra);
                            self.pending = true;
                            acknowledge.push(from);
                        }
                    }
                    TAIL => {
                        if len > SUFFIX_MAX || peer.partial.is_some() {
                            return bad("a malformed record of a message's end");
                        }
                        peer.tail = Some(payload.to_vec());
                    }
                    DONE => match self.lent.get(&extra) {
                        Some(lent) if lent.to == from => {
                            peer.lent -= lent.len;
                            peer.reading -= 1;
                            self.lent.remove(&extra);
                            self.loans.remove(&extra);
                        }
                        _ => return bad("an acknowledgement of no message"),
                    },
                    _ => return bad("a record of an unknown kind"),
                }
                peer.head = peer.head.wrapping_add(size as u64);
                if held {
                    // The receive has its message in its own buffer: what
                    // follows stays in the ring for the next receive to
                    // take there the same way, not copied into a buffer of
                    // its own first (a stream of 64 KiB messages into
                    // `recv_into`: one copy on each side, not two here).
                    self.rescan = true;
                    break;
                }
            }
            if peer.head != start_head {
                region.u64(ring.base + C_HEAD).store(peer.head, Ordering::SeqCst);
                moved = true;
                // A writer that found the ring full waits for this room: ring
                // its doorbell, and wake it if it sleeps.
                let full = region.u32(ring.base + C_FULL);
                if full.load(Ordering::SeqCst) != 0 && full.swap(0, Ordering::SeqCst) != 0 {
                    peer.w.theirs.u64(H_DOORBELL).fetch_add(1, Ordering::SeqCst);
                    if lower_sleep_flags(&peer.w.theirs) {
                        self.stats[from as usize].wakeups_sent += 1;
                        self.wake.push(peer.wake_to);
                    }
                }
            }
        }
        for to in acknowledge {
            self.push(to);
        }
        Ok(moved)
    }

    /// Reads the first `dst.len()` bytes (at most all) of `lent`, a message
    /// from `from` left unread when it came, into `dst`, and tells its
    /// sender it was read (whether or not the read succeeded: its memory
    /// is its own again either way).
    pub fn read_lent(&mut self, from: u32, len: usize, lent: &Remote, dst: &mut [u8]) -> Result<(), String> {
        let n = dst.len().min(len);
        // SAFETY: `dst` holds `n` bytes.
        let read = self.read_with(from, lent, |peer, split| unsafe {
            read_shared(peer, split, lent.token, lent.addr, dst.as_mut_ptr(), n).map(|shared| ((), shared))
        });
        self.stats[from as usize].read_in_place += 1;
        read
    }

    /// [`Shm::read_lent`] of the whole message into a buffer of its own,
    /// followed by `suffix`.
    pub fn read_lent_whole(&mut self, from: u32, len: usize, lent: &Remote, suffix: &[u8]) -> Result<Vec<u8>, String> {
        self.read_with(from, lent, |peer, split| read_whole(peer, split, lent.token, lent.addr, len, suffix))
    }

    /// Reads `lent` from `from` (a local peer: only they lend) by `read`,
    /// which says whether the peer shared the copy; counts that, and tells
    /// the peer the message was read (whether or not the read succeeded:
    /// its memory is its own again either way).
    fn read_with<T>(
        &mut self,
        from: u32,
        lent: &Remote,
        read: impl FnOnce(&mut Peer, bool) -> io::Result<(T, bool)>,
    ) -> Result<T, String> {
        let peer = self.peers[from as usize].as_mut().expect("only local peers lend");
        let result = read(peer, self.split);
        self.stats[from as usize].shared_copies += result.as_ref().is_ok_and(|&(_, shared)| shared) as u64;
        self.answer(from, lent.token);
        result.map(|(data, _)| data).map_err(|e| read_failed(from, e))
    }

    /// The receive whose buffer `dest` is has ended: what is in it goes into
    /// buffers of their own. A message being written into it continues in
    /// its own buffer; the start of one in the inbox is for the engine to
    /// move ([`DestState::Holding`]).
    pub fn unplace(&mut self, dest: &mut Dest) {
        if dest.state != DestState::Filling {
            return;
        }
        dest.state = DestState::Free;
        let Some(p) = self.peers.get_mut(dest.from as usize).and_then(Option::as_mut).and_then(|p| p.partial.as_mut())
        else {
            return;
        };
        let mut data = Vec::with_capacity(p.total);
        // SAFETY: the first `min(got, placed)` bytes of the buffer were
        // written with this message's start.
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(dest.ptr, p.got.min(p.placed)) });
        data.extend_from_slice(&p.data);
        p.data = data;
        p.placed = 0;
    }

    /// Tells `from` that its message lent with `token`, left unread when it
    /// came, has been read.
    fn answer(&mut self, from: u32, token: u64) {
        self.deferred -= 1;
        if let Some(peer) = self.peers.get_mut(from as usize).and_then(Option::as_mut) {
            peer.done.push_back(token);
            self.pending = true;
            self.push(from);
        }
    }

    /// Messages left unread when they came and not read since.
    pub fn deferred(&self) -> usize {
        self.deferred
    }

    /// Before `who` sleeps in poll(2) on the sockets: raises its flag, which
    /// makes senders wake this process, and says whether it may sleep
    /// (nothing came meanwhile).
    pub fn may_sleep(&mut self, who: Sleeper) -> bool {
        self.own.region.u32(who.flag()).store(1, Ordering::SeqCst);
        // Every peer's counterpart of the last post there: the wait for
        // them ends at its next look. Else a peer that posts after this
        // finds the flag raised (see `post`).
        if self.counterparts_posted() {
            self.awaited = None;
            return false;
        }
        !self.doorbell_rang() && !self.rescan
    }

    /// Whether every local peer has posted its counterpart of this
    /// process's last post that it still awaits.
    fn counterparts_posted(&self) -> bool {
        self.awaited.is_some_and(|seq| {
            let at = board_slot(seq) + B_SEQ;
            self.local.iter().all(|&r| peer_of(&self.peers, r).w.theirs.u64(at).load(Ordering::SeqCst) >= seq)
        })
    }

    /// Whether a peer rang the doorbell since this process last read its
    /// rings.
    fn doorbell_rang(&self) -> bool {
        self.own.region.u64(H_DOORBELL).load(Ordering::SeqCst) != self.last_doorbell
    }

    /// After a sleep in poll(2) that lasted to its limit: whether it should
    /// have been woken, what it waited for having come meanwhile (every
    /// peer's counterpart of this process's last post is on the board, or
    /// a peer rang the doorbell since this process last read its rings).
    pub fn missed_wakeup(&self) -> bool {
        self.counterparts_posted() || self.doorbell_rang()
    }

    /// Posts `bytes` on the board as this process's next contribution to a
    /// collective that every process of the job makes in the same order,
    /// and returns its number, by which the peers on this host read it
    /// ([`Shm::read_post`]). Peers asleep in poll(2) are woken. `None` if
    /// `bytes` is longer than [`POST_MAX`].
    pub fn post(&mut self, kind: Kind, bytes: &[u8]) -> Option<u64> {
        if bytes.len() > POST_MAX {
            return None;
        }
        let seq = self.posts + 1;
        let at = board_slot(seq);
        let region = &self.own.region;
        // SAFETY: the bytes fit the slot, within the mapping; no peer reads
        // it before its number is stored below, nor after the number of the
        // post two later is (see [`BOARD`]).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.ptr.add(at + B_DATA), bytes.len()) };
        region.u64(at + B_LEN).store(bytes.len() as u64, Ordering::Relaxed);
        region.u32(at + B_KIND).store(kind as u32, Ordering::Relaxed);
        // The number, then each peer's sleep flag: sequentially consistent
        // with a sleeper's flag, then its look at the board (`may_sleep`).
        region.u64(at + B_SEQ).store(seq, Ordering::SeqCst);
        self.posts = seq;
        self.awaited = Some(seq);
        for i in 0..self.local.len() {
            let to = self.local[i];
            let peer = peer_of(&self.peers, to);
            if lower_sleep_flags(&peer.w.theirs) {
                self.stats[to as usize].wakeups_sent += 1;
                self.wake.push(peer.wake_to);
            }
        }
        Some(seq)
    }

    /// Copies post number `seq` of `rank` (a peer on this host) into `dst`
    /// if the peer has made it, and says whether it has. A later post
    /// there, or a length beyond [`POST_MAX`], is the peer's violation; a
    /// post of another kind than this process's own number `seq` means the
    /// two called the job's collectives in different orders.
    pub fn read_post(&self, rank: u32, seq: u64, kind: Kind, dst: &mut Vec<u8>) -> Result<bool, String> {
        let peer = self.peers.get(rank as usize).and_then(Option::as_ref).ok_or("a process on another host")?;
        let at = board_slot(seq);
        let theirs = &peer.w.theirs;
        match theirs.u64(at + B_SEQ).load(Ordering::Acquire) {
            found if found < seq => return Ok(false),
            found if found > seq => return Err(format!("post {found} on its board where {seq} was awaited")),
            _ => {}
        }
        let len = theirs.u64(at + B_LEN).load(Ordering::Relaxed);
        let theirs_kind = theirs.u32(at + B_KIND).load(Ordering::Relaxed);
        if theirs_kind != kind as u32 {
            let named = Kind::name(theirs_kind);
            return Err(format!(
                "its collective number {seq} is {named} where this process's is {}: the processes called the job's \
                 collectives in different orders",
                Kind::name(kind as u32)
            ));
        }
        if len > POST_MAX as u64 {
            return Err(format!("a post of {len} bytes on its board (at most {POST_MAX})"));
        }
        dst.clear();
        // SAFETY: within the peer's mapping (its length was checked when it
        // was opened); the peer leaves the slot alone until this process
        // posts again (see [`BOARD`]).
        dst.extend_from_slice(unsafe { std::slice::from_raw_parts(theirs.ptr.add(at + B_DATA), len as usize) });
        Ok(true)
    }

    /// `who` woke from its sleep: lowers its flag (the other thread's, if
    /// it sleeps on, stays raised).
    pub fn awake(&self, who: Sleeper) {
        self.own.region.u32(who.flag()).store(0, Ordering::Relaxed);
    }

    /// Nothing waits to be written and no buffer is lent.
    pub fn is_idle(&self) -> bool {
        self.lent.is_empty()
            && self.local.iter().all(|&r| {
                let p = self.peers[r as usize].as_ref().expect("a local peer");
                p.queue.is_empty() && p.done.is_empty()
            })
    }

    /// Once every local peer has opened this process's file, its name is
    /// no longer needed: unlinked, it goes with the last mapping.
    fn unlink_when_attached(&mut self) {
        if self.own.unlinked {
            return;
        }
        let region = &self.own.region;
        let all = self.local.iter().all(|&r| {
            let p = self.peers[r as usize].as_ref().expect("a local peer");
            region.u32(p.inbound.base + C_ATTACHED).load(Ordering::Acquire) == 1
        });
        if all {
            self.unlink();
        }
    }

    pub fn unlink(&mut self) {
        if !self.own.unlinked {
            let _ = std::fs::remove_file(&self.own.path);
            self.own.unlinked = true;
        }
    }

    /// Whether this process reads `rank`'s large messages from its memory.
    pub fn single_copy_from(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).and_then(Option::as_ref).is_some_and(|p| p.cma_from)
    }

    /// Whether `rank` reads this process's memory (it said so in its file
    /// once it had tried).
    pub fn single_copy_to(&self, rank: u32) -> bool {
        self.peers
            .get(rank as usize)
            .and_then(Option::as_ref)
            .is_some_and(|p| p.w.theirs.u32(p.w.out.base + C_CMA).load(Ordering::Acquire) == 1)
    }

    /// Copies `dst.len()` bytes at `addr` in `rank`'s memory into `dst` (one
    /// copy), for a layer above that told `rank` where to read
    /// ([`Shm::single_copy_from`] must hold): from this process's mapping of
    /// `rank`'s stage where they lie in it ([`Shm::stage`]), else by the
    /// kernel (`process_vm_readv`). Returns whether they came from the
    /// stage.
    pub fn read_from(&mut self, rank: u32, addr: u64, dst: &mut [u8]) -> io::Result<bool> {
        let job = self.own.job;
        match self.peers.get_mut(rank as usize).and_then(Option::as_mut) {
            Some(p) if p.cma_from => {
                if let Some(src) = p.staged(job, rank, addr, dst.len()) {
                    dst.copy_from_slice(src);
                    self.stats[rank as usize].stage_read_bytes += dst.len() as u64;
                    return Ok(true);
                }
                read_remote_into(p.pid, addr, dst).map(|()| false)
            }
            _ => Err(io::Error::new(io::ErrorKind::Unsupported, "not a peer whose memory this process reads")),
        }
    }

    /// This process's stage, at least `at_least` bytes (where it lies and
    /// its length): memory of this process that its peers on the host read
    /// by mapping it rather than with `process_vm_readv` ([`Shm::read_from`]
    /// of an address in it). A stage too small is replaced by a larger one
    /// (its length rounded up to 2 MiB), so the caller must know that no
    /// peer reads the one it had any more. An error where none may be made
    /// (`BULKWIRE_SHM_STAGE=0`) or the memory cannot be had.
    pub fn stage(&mut self, at_least: usize) -> Result<(*mut u8, usize), String> {
        if let Some(stage) = self.own.stage.as_ref().filter(|s| s.len() >= at_least) {
            return Ok((stage.ptr(), stage.len()));
        }
        if !self.own.stage_on {
            return Err(format!("{SHM_STAGE}=0"));
        }
        let len = at_least.max(1).checked_next_multiple_of(crate::stage::STAGE_UNIT).ok_or("too large a stage")?;
        let gen = self.own.stage_gen.checked_add(1).ok_or("no stage generation left")?;
        self.own.stage_gen = gen;
        let region = &self.own.region;
        // Readers see no stage while it changes, then the whole of the new one.
        region.u32(H_STAGE_GEN).store(0, Ordering::Release);
        self.own.stage = None;
        let stage = crate::stage::Stage::create(self.own.job, self.me, gen, len)
            .map_err(|e| format!("a stage of {len} bytes: {e}"))?;
        region.u32(H_STAGE_FD).store(stage.fd() as u32, Ordering::Relaxed);
        region.u64(H_STAGE_BASE).store(stage.ptr() as u64, Ordering::Relaxed);
        region.u64(H_STAGE_LEN).store(stage.len() as u64, Ordering::Relaxed);
        region.u32(H_STAGE_GEN).store(gen, Ordering::Release);
        let made = (stage.ptr(), stage.len());
        self.own.stage = Some(stage);
        Ok(made)
    }

    /// Lets go of this process's stage and of its mappings of its peers'
    /// (each holds the pages of a stage its owner let go of), for a caller
    /// that knows nobody reads them any more.
    pub fn release_stages(&mut self) {
        self.own.region.u32(H_STAGE_GEN).store(0, Ordering::Release);
        self.own.stage = None;
        for peer in self.peers.iter_mut().flatten() {
            peer.stage = None;
        }
    }

    /// This process's arena: memory in its file that its peers on this
    /// host read where it lies ([`Shm::read_arena`]); empty where there is
    /// none ([`SHM_ARENA`]). What it holds, and when peers may read it, is
    /// the business of the layer that writes it.
    pub fn arena(&self) -> (*mut u8, usize) {
        // SAFETY: the arena lies within the mapping.
        (unsafe { self.own.region.ptr.add(self.own.arena) }, self.own.arena_len)
    }

    /// The length of `rank`'s arena, 0 for none (or a peer not on this host).
    pub fn arena_of(&self, rank: u32) -> usize {
        self.peers.get(rank as usize).and_then(Option::as_ref).map_or(0, |p| p.arena_len)
    }

    /// Where `rank`'s arena lies in this process's mapping of its file, and
    /// its length, for a layer above that reads it in place (the mapping
    /// lasts as long as this path).
    pub fn arena_view(&self, rank: u32) -> Option<(*const u8, usize)> {
        let peer = self.peers.get(rank as usize).and_then(Option::as_ref)?;
        // SAFETY: the arena lies within the mapping of the peer's file.
        Some((unsafe { peer.w.theirs.ptr.add(peer.arena) }, peer.arena_len))
    }

    /// Copies `dst.len()` bytes from `at` in `rank`'s arena into `dst`.
    pub fn read_arena(&mut self, rank: u32, at: u64, dst: &mut [u8]) -> Result<(), String> {
        let Some(peer) = self.peers.get(rank as usize).and_then(Option::as_ref) else {
            return Err(format!("rank {rank} is not on this host"));
        };
        let within = usize::try_from(at)
            .ok()
            .and_then(|at| at.checked_add(dst.len()).map(|end| (at, end)))
            .filter(|&(_, end)| end <= peer.arena_len);
        let Some((at, _)) = within else {
            return Err(format!(
                "{} bytes from {at} lie outside rank {rank}'s arena of {} bytes",
                dst.len(),
                peer.arena_len
            ));
        };
        // SAFETY: checked to lie within the peer's arena, which lies within
        // the mapping of its file. The peer may write there meanwhile (it
        // must not, by the layer's protocol): bytes, never a crash.
        unsafe {
            std::ptr::copy_nonoverlapping(peer.w.theirs.ptr.add(peer.arena + at), dst.as_mut_ptr(), dst.len());
        }
        self.stats[rank as usize].arena_read_bytes += dst.len() as u64;
        Ok(())
    }

    pub fn local_peers(&self) -> &[u32] {
        &self.local
    }

    pub fn ring_bytes(&self) -> usize {
        self.own.ring
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        self.unlink();
    }
}

impl Region {
    fn clone_header_host(&self) -> Vec<u8> {
        let n = (self.u32(H_HOST_LEN).load(Ordering::Relaxed) as usize).min(HOST_MAX);
        // SAFETY: the host identity lies within the header.
        unsafe { std::slice::from_raw_parts(self.ptr.add(H_HOST), n) }.to_vec()
    }
}

impl Writer {
    /// Writes one record if the ring has room for it (after padding to the
    /// ring's end where it does not fit before it). The tail is published
    /// by the caller.
    fn write(&mut self, kind: u8, flags: u8, channel: u16, extra: u64, payload: &[u8]) -> bool {
        self.write_parts(kind, flags, channel, extra, payload, &[])
    }

    /// Whether a message of `len` bytes would go into the ring whole now:
    /// its records (of at most a quarter of the ring, and the record of its
    /// end), and room to spare for padding at the ring's end, fit beside
    /// what the reader has not taken yet.
    /// Whether the reader has yet to read some of what was written.
    fn unread(&self) -> bool {
        self.theirs.u64(self.out.base + C_HEAD).load(Ordering::Acquire) != self.tail
    }

    fn has_room(&self, len: usize) -> bool {
        let head = self.theirs.u64(self.out.base + C_HEAD).load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head) as usize;
        let records = len.div_ceil(self.out.size / 4 - RECORD) + 1;
        let need = 2 * len + records * (RECORD + SUFFIX_MAX + 8);
        used.saturating_add(need) <= self.out.size
    }

    /// [`Writer::write`] of a record whose payload is `a` then `b`.
    fn write_parts(&mut self, kind: u8, flags: u8, channel: u16, extra: u64, a: &[u8], b: &[u8]) -> bool {
        let len = a.len() + b.len();
        let size = RECORD + align(len);
        let ring = self.out;
        let at = (self.tail as usize) & (ring.size - 1);
        let to_end = ring.size - at;
        let need = if size > to_end { to_end + size } else { size };
        if self.tail.wrapping_sub(self.head_seen) as usize + need > ring.size {
            self.head_seen = self.theirs.u64(ring.base + C_HEAD).load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_seen) as usize + need > ring.size {
                // Full: ask the reader to wake this process when it frees
                // room (the flag, then the head once more, sequentially
                // consistent with the reader's head, then flag).
                self.theirs.u32(ring.base + C_FULL).store(1, Ordering::SeqCst);
                self.head_seen = self.theirs.u64(ring.base + C_HEAD).load(Ordering::SeqCst);
            }
            let used = self.tail.wrapping_sub(self.head_seen) as usize;
            // A reader that moved its head past the tail has broken its
            // ring: write no more into it.
            if used > ring.size || used + need > ring.size {
                return false;
            }
        }
        let base = ring.data();
        if size > to_end {
            self.put_header(base + at, 0, PAD, 0, 0, 0);
            self.tail = self.tail.wrapping_add(to_end as u64);
        }
        let at = (self.tail as usize) & (ring.size - 1);
        self.put_header(base + at, len as u32, kind, flags, channel, extra);
        // SAFETY: the record, `a` then `b`, lies within the ring (room checked
        // above), which only this process writes.
        unsafe {
            let to = self.theirs.ptr.add(base + at + RECORD);
            std::ptr::copy_nonoverlapping(a.as_ptr(), to, a.len());
            std::ptr::copy_nonoverlapping(b.as_ptr(), to.add(a.len()), b.len());
        }
        self.tail = self.tail.wrapping_add(size as u64);
        true
    }

    fn put_header(&self, at: usize, len: u32, kind: u8, flags: u8, channel: u16, extra: u64) {
        let mut h = [0u8; RECORD];
        h[0..4].copy_from_slice(&len.to_le_bytes());
        h[4] = kind;
        h[5] = flags;
        h[6..8].copy_from_slice(&channel.to_le_bytes());
        h[8..16].copy_from_slice(&extra.to_le_bytes());
        assert!(at + RECORD <= self.theirs.len);
        // SAFETY: in bounds (checked), in the ring this process writes.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), self.theirs.ptr.add(at), RECORD) };
    }
}

impl Dest {
    /// The first `placed` bytes of the buffer, then `rest`, in a buffer of
    /// their own.
    pub fn take(&self, placed: usize, rest: &[u8]) -> Vec<u8> {
        let mut data = Vec::with_capacity(placed + rest.len());
        // SAFETY: the caller says the first `placed` bytes were written.
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(self.ptr, placed.min(self.cap)) });
        data.extend_from_slice(rest);
        data
    }
}

/// Why reading a message from `from`'s memory failed.
fn read_failed(from: u32, e: io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ESRCH) => format!("rank {from} is gone (its process ended mid-message)"),
        _ => format!("rank {from}: reading a message from its memory failed: {e}"),
    }
}

/// Whether process `pid` exists.
fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Reads the `len` bytes at `addr` in `peer`'s memory, a message it lent
/// with `token`, to `dst`. From [`SPLIT_FROM`] up, where `split` is on, the
/// peer can write this process's memory and it is awake (not asleep in
/// poll(2)), it asks the peer to write the second half meanwhile
/// ([`C_SPLIT`]), and takes the request back if the peer has not begun by
/// the time the first half is read (it then reads the rest itself). Returns
/// whether the peer wrote its half; does not return while it may still be
/// writing.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes until this returns.
unsafe fn read_shared(
    peer: &mut Peer,
    split: bool,
    token: u64,
    addr: u64,
    dst: *mut u8,
    len: usize,
) -> io::Result<bool> {
    let w = &peer.w;
    let asks = split
        && len >= SPLIT_FROM
        && w.theirs.u32(w.out.base + C_CMA).load(Ordering::Acquire) == 1
        && !asleep(&w.theirs);
    if !asks {
        return read_remote_raw(peer.pid, addr, dst, len).map(|()| false);
    }
    let half = (len / 2) & !4095;
    peer.splits += 1;
    let seq = peer.splits << 2;
    let at = w.out.base + C_SPLIT;
    for (k, v) in [token, addr + half as u64, dst as u64 + half as u64, (len - half) as u64].into_iter().enumerate() {
        w.theirs.u64(at + 8 * (k + 1)).store(v, Ordering::Relaxed);
    }
    let state = w.theirs.u64(at);
    state.store(seq | SPLIT_ASKED, Ordering::Release);
    w.theirs.u64(H_DOORBELL).fetch_add(1, Ordering::SeqCst);
    let first = read_remote_raw(peer.pid, addr, dst, half);
    // SAFETY: within the `len` bytes at `dst`.
    let rest = || read_remote_raw(peer.pid, addr + half as u64, unsafe { dst.add(half) }, len - half);
    if state.compare_exchange(seq | SPLIT_ASKED, seq | SPLIT_NONE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        first?;
        return rest().map(|()| false);
    }
    // The peer is writing: wait until it has written (or failed to, then
    // the rest is read here).
    let mut turns = 0u32;
    loop {
        let now = state.load(Ordering::Acquire);
        if now == seq | SPLIT_WRITTEN {
            return first.map(|()| true);
        }
        if now == seq | SPLIT_NONE {
            first?;
            return rest().map(|()| false);
        }
        if now != seq | SPLIT_WRITING {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the lender broke the protocol of a shared copy"));
        }
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(1024) {
            if !process_exists(peer.pid) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Keeps `buffer` in `spare` if it is of the small kind kept
/// ([`SPARE_ROOM`]) and fewer than `most` are kept (else frees it); hands
/// back one of another kind.
fn keep_spare(spare: &mut Vec<Vec<u8>>, most: usize, mut buffer: Vec<u8>) -> Option<Vec<u8>> {
    if !SPARE_ROOM.contains(&buffer.capacity()) {
        return Some(buffer);
    }
    if spare.len() < most {
        buffer.clear();
        spare.push(buffer);
    }
    None
}

/// A buffer for `len` bytes: the last one kept in `spare` if it has the
/// room, and not four times as much beyond 4 KiB (a message taken may be
/// kept long; the spares of one kind of message are alike), else a new
/// one.
fn spare_buffer(spare: &mut Vec<Vec<u8>>, len: usize) -> Vec<u8> {
    match spare.last() {
        Some(b) if (len..=(4 * len).max(4096)).contains(&b.capacity()) => spare.pop().expect("the last"),
        _ => Vec::with_capacity(len),
    }
}

/// [`read_shared`] into a buffer of its own, followed by `suffix`; and
/// whether the peer wrote half of it.
fn read_whole(
    peer: &mut Peer,
    split: bool,
    token: u64,
    addr: u64,
    len: usize,
    suffix: &[u8],
) -> io::Result<(Vec<u8>, bool)> {
    // Not zeroed first: the kernel writes every byte before it is read.
    let mut data: Vec<u8> = Vec::with_capacity(len + suffix.len());
    // SAFETY: the capacity reserved just above.
    let shared = unsafe { read_shared(peer, split, token, addr, data.spare_capacity_mut().as_mut_ptr().cast(), len)? };
    // SAFETY: every one of the `len` bytes was written (read_shared returns
    // Ok only once they are).
    unsafe { data.set_len(len) };
    data.extend_from_slice(suffix);
    Ok((data, shared))
}

/// Writes the `len` bytes at `src` in this process to `dst` in process
/// `pid`; `src` must be valid for reads of `len` bytes.
fn write_remote_raw(pid: i32, src: u64, dst: u64, len: usize) -> io::Result<()> {
    copy_remote(pid, src as *mut u8, dst, len, true)
}

/// Reads `len` bytes at `addr` in process `pid` (one copy, by the kernel),
/// then appends `suffix`.
fn read_remote(pid: i32, addr: u64, len: usize, suffix: &[u8]) -> io::Result<Vec<u8>> {
    // Not zeroed first: the kernel writes every byte before it is read (a
    // memset of the whole message would be a second pass over it).
    let mut data: Vec<u8> = Vec::with_capacity(len + suffix.len());
    read_remote_raw(pid, addr, data.spare_capacity_mut().as_mut_ptr().cast(), len)?;
    // SAFETY: the kernel wrote all `len` bytes (read_remote_raw returns Ok
    // only once it has), within the capacity reserved above.
    unsafe { data.set_len(len) };
    data.extend_from_slice(suffix);
    Ok(data)
}

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst`.
fn read_remote_into(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    read_remote_raw(pid, addr, dst.as_mut_ptr(), dst.len())
}

/// Reads `len` bytes at `addr` in process `pid` to `dst`, which must be
/// valid for writes of `len` bytes.
fn read_remote_raw(pid: i32, addr: u64, dst: *mut u8, len: usize) -> io::Result<()> {
    copy_remote(pid, dst, addr, len, false)
}

/// Copies `len` bytes between `local` in this process and `remote` in
/// process `pid`: to `remote` where `write`, else from it (one copy, by the
/// kernel), in as many calls as it takes.
fn copy_remote(pid: i32, local: *mut u8, remote: u64, len: usize, write: bool) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        // SAFETY: `local + done` stays within the `len` bytes the caller gave.
        let near = libc::iovec { iov_base: unsafe { local.add(done) }.cast(), iov_len: len - done };
        let far = libc::iovec { iov_base: (remote as usize + done) as *mut libc::c_void, iov_len: len - done };
        // SAFETY: `near` describes memory the caller lends us (only read
        // when writing); the kernel checks `far`.
        let n = unsafe {
            match write {
                true => libc::process_vm_writev(pid, &near, 1, &far, 1, 0),
                false => libc::process_vm_readv(pid, &near, 1, &far, 1, 0),
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "nothing copied"));
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkwire_proto::TailFilter;

    fn options(ring: usize) -> ShmOptions {
        ShmOptions { ring, cma: true, split: true, arena: 64 << 10, stage: true }
    }

    fn pair(ring: usize) -> (Shm, Shm) {
        let job = crate::new_job_id();
        let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut a = Shm::create(job, 0, 2, &options(ring)).unwrap();
        let mut b = Shm::create(job, 1, 2, &options(ring)).unwrap();
        a.attach(job, &[addr, addr]);
        b.attach(job, &[addr, addr]);
        (a, b)
    }

    fn drain(s: &mut Shm) -> Vec<Inbound> {
        let mut inbox = VecDeque::new();
        let mut bytes = 0;
        s.poll(&mut inbox, &mut bytes, usize::MAX, 1 << 30, None, None).unwrap();
        inbox.into()
    }

    /// A receive's buffer ([`Dest`]) takes only the message whose end its
    /// deferral covers, told by the end that comes before the first of
    /// its records (or within its only one); the others come whole in
    /// buffers of their own, and the buffer outside the message is left
    /// alone.
    #[test]
    fn only_the_message_a_receive_waits_for_goes_into_its_buffer() {
        let (mut a, mut b) = pair(64 << 10);
        let message = |n: usize, tag: u8| -> Vec<u8> {
            let mut m: Vec<u8> = (0..n).map(|k| (k * 13 + n) as u8).collect();
            m.extend_from_slice(&[tag; 4]);
            m
        };
        // Several records (the ring's pieces are 16 KiB), one record, and
        // one the buffer cannot hold but in part.
        let sent = [message(40 << 10, 1), message(40 << 10, 2), message(1000, 2), message(100 << 10, 2)];
        let deferral = Deferral {
            channel: 3,
            from: Some(0),
            tail: 4,
            filter: TailFilter { ends_with: Some(vec![2; 4]), not_ending_with: None },
        };
        let mut buf = vec![0xAAu8; 60 << 10];
        let mut got = Vec::new();
        for m in &sent {
            a.send(1, 3, m.clone(), 0);
            let mut dest = Dest { ptr: buf.as_mut_ptr(), cap: buf.len(), from: 0, state: DestState::Free };
            let mut inbox = VecDeque::new();
            for _ in 0..10_000 {
                let mut bytes = 0;
                b.poll(&mut inbox, &mut bytes, usize::MAX, 1 << 30, Some(&deferral), Some(&mut dest)).unwrap();
                drain(&mut a);
                a.flush();
                if !inbox.is_empty() && a.is_idle() {
                    break;
                }
            }
            let msg = inbox.pop_front().expect("the message came");
            let placed = msg.lent.as_ref().map(|l| {
                assert!(l.remote.is_none());
                assert_eq!(dest.state, DestState::Holding);
                l.len
            });
            if placed.is_none() {
                assert_eq!(dest.state, DestState::Free);
            }
            got.push((placed, dest.take(placed.unwrap_or(0), &msg.data)));
            // Nothing past what was placed.
            assert!(buf[placed.unwrap_or(0)..].iter().all(|&x| x == 0xAA), "written past the message");
            buf.fill(0xAA);
        }
        let placed: Vec<Option<usize>> = got.iter().map(|g| g.0).collect();
        assert_eq!(placed, [None, Some(40 << 10), Some(1000), Some(60 << 10)]);
        for (g, m) in got.iter().zip(&sent) {
            assert_eq!(&g.1, m);
        }
    }

    /// Behind the message written into a receive's buffer the ring is
    /// left as it is: the next messages stay there for the receives that
    /// follow, each written into its own buffer the same way, rather than
    /// read out into buffers of their own at once.
    #[test]
    fn the_messages_behind_a_receive_s_stay_in_the_ring() {
        let (mut a, mut b) = pair(256 << 10);
        let sent: Vec<Vec<u8>> = (0..3u8).map(|k| [vec![k; 20 << 10], vec![7; 4]].concat()).collect();
        for m in &sent {
            a.send(1, 3, m.clone(), 0);
        }
        let deferral = Deferral {
            channel: 3,
            from: Some(0),
            tail: 4,
            filter: TailFilter { ends_with: Some(vec![7; 4]), not_ending_with: None },
        };
        for m in &sent {
            let mut buf = vec![0u8; 24 << 10];
            let mut dest = Dest { ptr: buf.as_mut_ptr(), cap: buf.len(), from: 0, state: DestState::Free };
            let mut inbox = VecDeque::new();
            b.poll(&mut inbox, &mut 0, usize::MAX, 1 << 30, Some(&deferral), Some(&mut dest)).unwrap();
            assert_eq!(inbox.len(), 1, "one message, the rest left in the ring");
            assert_eq!(dest.state, DestState::Holding);
            let msg = inbox.pop_front().unwrap();
            let placed = msg.lent.as_ref().map(|l| l.len).expect("in the receive's buffer");
            assert_eq!(&dest.take(placed, &msg.data), m);
        }
        assert!(drain(&mut b).is_empty());
        // Without a receive's buffer, everything is read out.
        for m in &sent {
            a.send(1, 3, m.clone(), 0);
        }
        assert_eq!(drain(&mut b).len(), 3);
    }

    #[test]
    fn processes_of_one_host_find_each_other_and_unlink_their_files() {
        let (mut a, mut b) = pair(64 << 10);
        assert!(a.is_local(1) && b.is_local(0) && a.all_local());
        assert!(!a.is_local(0));
        drain(&mut a);
        drain(&mut b);
        assert!(!a.own.path.exists() && !b.own.path.exists());
    }

    #[test]
    fn messages_of_every_size_arrive_whole_and_in_order() {
        let (mut a, mut b) = pair(64 << 10);
        let sizes = [0usize, 1, 15, 16, 17, 1000, 16 << 10, 40 << 10, 200 << 10, 300 << 10, 1 << 20, 3];
        let mut expected = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
            expected.push(data.clone());
            a.send(1, i as u16, data, 0);
        }
        let mut got = Vec::new();
        for _ in 0..10_000 {
            got.extend(drain(&mut b));
            drain(&mut a);
            a.flush();
            if got.len() == sizes.len() && a.is_idle() {
                break;
            }
        }
        assert_eq!(got.len(), sizes.len());
        for (i, m) in got.iter().enumerate() {
            assert_eq!((m.from, m.channel), (0, i as u16));
            assert_eq!(m.data, expected[i]);
        }
        assert!(a.is_idle());
        assert!(a.stats[1].single_copy >= 2);
    }

    #[test]
    fn small_buffers_given_back_or_written_out_are_read_into_again() {
        let (mut a, mut b) = pair(64 << 10);
        // Given back by the layer above: the next message read of about
        // its size goes into it, whole and with its own bytes.
        let kept = Vec::<u8>::with_capacity(1000);
        let at = kept.as_ptr();
        assert!(b.keep_buffer(kept).is_none());
        assert!(b.keep_buffer(Vec::with_capacity(100 << 10)).is_some(), "a datagram's is not kept here");
        a.send(1, 0, vec![7; 600], 0);
        let got = drain(&mut b);
        assert_eq!((got[0].data.as_ptr(), &got[0].data[..]), (at, &[7u8; 600][..]));
        // A short message is not read into one four times too large.
        let large = Vec::<u8>::with_capacity(40 << 10);
        let at = large.as_ptr();
        assert!(b.keep_buffer(large).is_none());
        a.send(1, 0, vec![8; 200], 0);
        let got = drain(&mut b);
        assert_ne!(got[0].data.as_ptr(), at);
        assert_eq!(got[0].data, [8; 200]);
        // Written into the ring: the sender's own buffer is what it reads
        // its next message into.
        let sent = vec![9u8; 900];
        let at = sent.as_ptr();
        b.send(0, 0, sent, 0);
        assert_eq!(drain(&mut a)[0].data, [9; 900]);
        a.send(1, 0, vec![1; 10], 0);
        let got = drain(&mut b);
        assert_eq!((got[0].data.as_ptr(), &got[0].data[..]), (at, &[1u8; 10][..]));
    }

    /// A message of a stream (its reader yet to read what went before) is
    /// lent from [`STREAM_LEND_FROM`], a message alone only as
    /// [`Shm::lends`] says.
    #[test]
    fn a_stream_lends_from_64_kib_where_its_reader_is_behind() {
        let (mut a, mut b) = pair(2 << 20);
        let len = STREAM_LEND_FROM;
        assert!(!a.lends_in_stream(1, len) && !a.lends(1, len), "alone: through the ring");
        a.send(1, 0, vec![1; 100], 0);
        assert!(a.lends_in_stream(1, len) && !a.lends_in_stream(1, len - 1) && !a.lends(1, len));
        assert_eq!(drain(&mut b).len(), 1);
        assert!(!a.lends_in_stream(1, len), "read out");
        let data = vec![3u8; len];
        let token = a.lend(1, 0, data.as_ptr() as u64, len, b"");
        assert_eq!(drain(&mut b)[0].data, data);
        // Read, the answer not yet seen: still behind.
        assert!(a.lends_in_stream(1, len) && !a.returned(token));
        drain(&mut a);
        assert!(a.returned(token) && !a.lends_in_stream(1, len));
    }

    #[test]
    fn a_lent_message_is_read_from_the_lender_s_memory_with_its_suffix() {
        let (mut a, mut b) = pair(64 << 10);
        let data: Vec<u8> = (0..300usize << 10).map(|k| (k * 13) as u8).collect();
        assert!(a.lends(1, data.len()) && !a.lends(1, 100 << 10) && !a.lends(0, data.len()));
        // Queued behind a message sent before it, whose order it keeps.
        a.send(1, 0, vec![1, 2, 3], 0);
        let token = a.lend(1, 2, data.as_ptr() as u64, data.len(), b"tail");
        assert!(!a.returned(token) && !a.is_idle());
        let got = drain(&mut b);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].channel, &got[0].data[..]), (0, &[1u8, 2, 3][..]));
        assert_eq!(got[1].channel, 2);
        assert_eq!(got[1].data.len(), data.len() + 4);
        assert!(got[1].data[..data.len()] == data[..] && &got[1].data[data.len()..] == b"tail");
        assert!(!a.returned(token), "lent until the reader's answer is read");
        drain(&mut a);
        assert!(a.returned(token) && a.is_idle());
        assert_eq!(a.stats[1].single_copy, 1);
        assert!(a.peer_alive(1));
    }

    /// A message shorter than half the ring goes through the ring while it
    /// has room, and is lent where it has not (or where messages wait for
    /// room already), behind what was sent before it.
    #[test]
    fn a_message_is_lent_where_the_ring_has_no_room_for_it() {
        let (mut a, mut b) = pair(1 << 20);
        let len = 300 << 10;
        assert!(!a.lends(1, len), "through the ring while it has room");
        a.send(1, 0, vec![7u8; 700 << 10], 0);
        assert!(a.lends(1, len) && !a.lends(1, 200 << 10) && !a.lends(0, len));
        let data: Vec<u8> = (0..len).map(|k| (k * 11 + k / 251) as u8).collect();
        let token = a.lend(1, 2, data.as_ptr() as u64, len, b"tail");
        let mut got = Vec::new();
        for _ in 0..10_000 {
            got.extend(drain(&mut b));
            drain(&mut a);
            a.flush();
            if got.len() == 2 && a.is_idle() {
                break;
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].channel, got[0].data.len()), (0, 700 << 10));
        assert!(got[0].data.iter().all(|&x| x == 7));
        assert_eq!(got[1].channel, 2);
        assert!(got[1].data[..len] == data[..] && &got[1].data[len..] == b"tail");
        assert!(a.returned(token) && a.stats[1].lent == 1);
        assert!(!a.lends(1, len), "the ring has room again");
    }

    /// A lent message from [`SPLIT_FROM`] up is copied by both ends at
    /// once when the lender is awake: the reader reads the first half, the
    /// lender writes the second into the reader's buffer. (The test above
    /// covers a lender that is not polling: the reader takes the request
    /// back and reads it all.)
    #[test]
    fn a_lender_that_is_awake_writes_half_of_what_it_lent() {
        let (mut a, mut b) = pair(64 << 10);
        let data: Vec<u8> = (0..4usize << 20).map(|k| (k * 7 + k / 4099) as u8).collect();
        let data = std::sync::Arc::new(data);
        // Enough that a lender thread the machine kept from its poll now
        // and then still writes some half (eight failed once on a busy
        // machine, every other run passing).
        const MESSAGES: usize = 32;
        let lent = data.clone();
        // The lender lends one message at a time and polls until it is read.
        let lender = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            for _ in 0..MESSAGES {
                let token = a.lend(1, 2, lent.as_ptr() as u64, lent.len(), b"tail");
                while !a.returned(token) && std::time::Instant::now() < deadline {
                    drain(&mut a);
                }
            }
            a.stats[1].single_copy
        });
        let mut got = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while got < MESSAGES && std::time::Instant::now() < deadline {
            for m in drain(&mut b) {
                assert!(m.data[..data.len()] == data[..] && &m.data[data.len()..] == b"tail");
                got += 1;
            }
        }
        assert_eq!(lender.join().unwrap(), MESSAGES as u64);
        assert_eq!(got, MESSAGES);
        // Asked every time; written by the lender unless it had not begun
        // when the reader's half was read (a lender thread slow to come back
        // to its poll, on a busy machine): at least once in 32.
        assert_eq!(b.peers[0].as_ref().unwrap().splits, MESSAGES as u64);
        assert!(b.stats[0].shared_copies >= 1, "{:?}", b.stats[0]);
    }

    /// A request to write what was never lent is the asker's violation, and
    /// nothing is written.
    #[test]
    fn a_request_to_write_what_was_not_lent_is_a_violation() {
        let (mut a, b) = pair(64 << 10);
        let data = vec![5u8; 300 << 10];
        let token = a.lend(1, 2, data.as_ptr() as u64, data.len(), b"");
        let mut target = vec![0u8; 4096];
        let w = &b.peers[0].as_ref().unwrap().w;
        let at = w.out.base + C_SPLIT;
        // Past the end of the lent message.
        let fields = [token, data.as_ptr() as u64 + 4096, target.as_mut_ptr() as u64, data.len() as u64];
        for (k, v) in fields.into_iter().enumerate() {
            w.theirs.u64(at + 8 * (k + 1)).store(v, Ordering::Relaxed);
        }
        w.theirs.u64(at).store(4 | SPLIT_ASKED, Ordering::Release);
        w.theirs.u64(H_DOORBELL).fetch_add(1, Ordering::SeqCst);
        let mut inbox = VecDeque::new();
        let err = a.poll(&mut inbox, &mut 0, usize::MAX, 1 << 30, None, None).unwrap_err();
        assert!(err.contains("rank 1 broke the protocol") && err.contains("not lent"), "{err}");
        assert_eq!(w.theirs.u64(at).load(Ordering::Acquire), 4 | SPLIT_NONE);
        assert!(target.iter().all(|&x| x == 0));
    }

    #[test]
    fn parts_go_straight_into_the_ring_and_what_finds_no_room_waits_copied() {
        let (mut a, mut b) = pair(64 << 10);
        // Empty, a few bytes, several pieces, then more than the ring has
        // room left for (its rest waits, copied), and one behind it.
        let sizes = [0usize, 5, 40 << 10, 100 << 10, 3];
        let mut expected = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
            let suffix = [i as u8; 4];
            expected.push((i as u16, [&data[..], &suffix[..]].concat()));
            a.send_parts(1, i as u16, &data, &suffix);
        }
        assert!(!a.is_idle(), "the ring cannot hold all of it at once");
        let mut got = Vec::new();
        for _ in 0..1000 {
            got.extend(drain(&mut b).into_iter().map(|m| (m.channel, m.data)));
            a.flush();
            if got.len() == sizes.len() {
                break;
            }
        }
        assert_eq!(got, expected);
        assert!(a.is_idle());
        assert_eq!(a.stats[1].messages_sent, 5);
    }

    #[test]
    fn a_full_ring_holds_messages_back_until_read() {
        let (mut a, mut b) = pair(64 << 10);
        for i in 0..100u32 {
            a.send(1, 0, i.to_le_bytes().repeat(1000), 0);
        }
        assert!(!a.is_idle());
        let mut got = 0u32;
        while got < 100 {
            for m in drain(&mut b) {
                assert_eq!(m.data, got.to_le_bytes().repeat(1000));
                got += 1;
            }
            a.flush();
        }
    }

    #[test]
    fn a_writer_waiting_for_room_is_woken_when_the_reader_frees_it() {
        let (mut a, mut b) = pair(64 << 10);
        // More than the ring holds: the rest waits in the writer.
        for i in 0..40u32 {
            a.send(1, 0, i.to_le_bytes().repeat(1000), 0);
        }
        assert!(!a.is_idle());
        drain(&mut a);
        assert!(a.may_sleep(Sleeper::Poller), "nothing came for the writer yet");
        let got = drain(&mut b).len();
        assert!(got > 0 && got < 40);
        assert_eq!(b.wake.len(), 1, "the sleeping writer is woken once room is free");
        assert!(!a.may_sleep(Sleeper::Poller), "its doorbell rang");
        let mut total = got;
        while total < 40 {
            a.flush();
            total += drain(&mut b).len();
        }
        assert_eq!(total, 40);
    }

    #[test]
    fn a_corrupt_record_is_the_writer_s_violation() {
        let (mut a, mut b) = pair(64 << 10);
        a.send(1, 0, vec![1, 2, 3], 0);
        // The writer claims a record longer than the ring.
        let ring = b.peers[0].as_ref().unwrap().inbound;
        b.own.region.u32(ring.data()).store(1 << 30, Ordering::Relaxed);
        let mut inbox = VecDeque::new();
        let mut bytes = 0;
        let err = b.poll(&mut inbox, &mut bytes, usize::MAX, 1 << 20, None, None).unwrap_err();
        assert!(err.starts_with("rank 0 broke the protocol") && err.contains("runs past"), "{err}");
        assert!(inbox.is_empty());
    }

    #[test]
    fn a_sleeping_reader_is_woken_once() {
        let (mut a, mut b) = pair(64 << 10);
        drain(&mut b);
        assert!(b.may_sleep(Sleeper::Poller));
        a.send(1, 0, vec![9], 0);
        assert_eq!(a.wake.len(), 1);
        a.send(1, 0, vec![9], 0);
        assert_eq!(a.wake.len(), 1, "a reader already woken is not woken again");
        assert!(!b.may_sleep(Sleeper::Poller), "what came meanwhile keeps the reader up");
        assert_eq!(drain(&mut b).len(), 2);
        assert!(b.may_sleep(Sleeper::Poller));
    }

    /// Two threads of a process may sleep in poll(2) at once, the
    /// application's and the progress thread: one waking lowers its own
    /// flag, not the other's, and a post still wakes the one asleep.
    #[test]
    fn a_thread_that_wakes_leaves_the_other_s_sleep_flag_raised() {
        let (mut a, mut b) = pair(64 << 10);
        assert_eq!(b.post(Kind::Barrier, b"b"), Some(1));
        drain(&mut b);
        assert!(b.may_sleep(Sleeper::Poller));
        assert!(b.may_sleep(Sleeper::Progress));
        b.awake(Sleeper::Progress);
        assert_eq!(a.post(Kind::Barrier, b"a"), Some(1));
        assert_eq!(a.wake.len(), 1, "the poller, still asleep, is woken");
        // Woken once: both flags are down, and a flag raised again is
        // seen by the next post.
        assert!(!asleep(&a.peers[1].as_ref().unwrap().w.theirs));
        b.awake(Sleeper::Poller);
        assert!(!b.may_sleep(Sleeper::Poller), "a's post is there");
        assert!(b.may_sleep(Sleeper::Progress));
        assert_eq!(a.post(Kind::Barrier, b"a2"), Some(2));
        assert_eq!(a.wake.len(), 2);
    }

    /// A small shared-memory file system takes smaller rings, then no
    /// arena, then nothing (the job goes over UDP).
    #[test]
    fn the_settings_shrink_to_fit_the_file_system() {
        let o = ShmOptions { ring: 2 << 20, cma: true, split: true, arena: ARENA_DEFAULT, stage: true };
        let mib = 1u64 << 20;
        // 8 processes: 7 rings of 2 MiB and an arena each, 8 × 16 MiB and a bit.
        assert!(o.host_bytes(8) > 128 * mib && o.host_bytes(8) < 129 * mib);
        assert_eq!(o.fit(1 << 40, 8).unwrap().ring, 2 << 20);
        // A container's 64 MiB: rings of 512 KiB and the arena.
        let fits = o.fit(64 * mib, 8).unwrap();
        assert_eq!((fits.ring, fits.arena), (512 << 10, ARENA_DEFAULT));
        assert!(fits.host_bytes(8) <= 64 * mib);
        // 8 MiB for 4: the smallest rings, and no arena.
        let fits = o.fit(8 * mib, 4).unwrap();
        assert_eq!((fits.ring, fits.arena), (64 << 10, 0));
        let e = o.fit(mib / 2, 4).unwrap_err();
        assert!(e.contains("/dev/shm has 512 KiB free and 4 processes need 819 KiB"), "{e}");
        assert!(free_bytes().unwrap() > 0);
    }

    #[test]
    fn a_peer_reads_the_arena_where_it_lies_and_nothing_outside() {
        let (a, mut b) = pair(64 << 10);
        let (ptr, len) = a.arena();
        assert_eq!(len, 64 << 10);
        assert_eq!(b.arena_of(0), len);
        let bytes: Vec<u8> = (0..1000).map(|k| (k * 7) as u8).collect();
        // SAFETY: within the arena.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(len - 1000), 1000) };
        let mut got = vec![0u8; 1000];
        b.read_arena(0, (len - 1000) as u64, &mut got).unwrap();
        assert_eq!(got, bytes);
        assert_eq!(b.stats[0].arena_read_bytes, 1000);
        let past = b.read_arena(0, (len - 999) as u64, &mut got).unwrap_err();
        assert!(past.contains("outside rank 0's arena of 65536 bytes"), "{past}");
        assert!(b.read_arena(0, u64::MAX, &mut got).is_err());
        assert!(b.read_arena(1, 0, &mut got).unwrap_err().contains("not on this host"));
        // Without one, nothing is readable.
        let job = crate::new_job_id();
        let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        let none = ShmOptions { arena: 0, ..options(64 << 10) };
        let mut c = Shm::create(job, 0, 2, &none).unwrap();
        let mut d = Shm::create(job, 1, 2, &options(64 << 10)).unwrap();
        c.attach(job, &[addr, addr]);
        d.attach(job, &[addr, addr]);
        assert_eq!((c.arena().1, d.arena_of(0), c.arena_of(1)), (0, 0, 64 << 10));
        assert!(d.read_arena(0, 0, &mut got[..1]).is_err());
        d.read_arena(0, 0, &mut []).unwrap();
    }

    /// What a peer reads where it lies in a stage comes from its mapping
    /// of the stage, anything else from the owner's memory; a larger stage
    /// replaces a smaller one and is mapped anew; after a release nothing
    /// of the old stage is there to read; and without stages every read is
    /// the kernel's.
    #[test]
    fn a_peer_reads_the_stage_through_its_mapping() {
        let (mut a, mut b) = pair(64 << 10);
        assert!(b.single_copy_from(0), "this test reads its own process's memory");
        let (ptr, len) = a.stage(100).unwrap();
        assert_eq!(len, crate::stage::STAGE_UNIT);
        // The same stage while it is large enough.
        assert_eq!(a.stage(len).unwrap(), (ptr, len));
        let fill = |ptr: *mut u8, len: usize, salt: u8| {
            // SAFETY: the stage's own mapping.
            let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            bytes.iter_mut().enumerate().for_each(|(i, v)| *v = (i % 253) as u8 ^ salt);
        };
        fill(ptr, len, 1);
        let mut got = vec![0u8; 5000];
        assert!(b.read_from(0, ptr as u64 + 777, &mut got).unwrap(), "read from the stage");
        assert!(got.iter().enumerate().all(|(i, &v)| v == ((i + 777) % 253) as u8 ^ 1));
        // Outside it (here, the tail end and past it): the kernel reads.
        let heap = vec![9u8; 5000];
        assert!(!b.read_from(0, heap.as_ptr() as u64, &mut got).unwrap());
        assert!(got.iter().all(|&v| v == 9));
        // A larger stage, under a new generation.
        let (bigger, big_len) = a.stage(len + 1).unwrap();
        assert_eq!(big_len, 2 * crate::stage::STAGE_UNIT);
        fill(bigger, big_len, 2);
        assert!(b.read_from(0, bigger as u64 + len as u64, &mut got).unwrap());
        assert!(got.iter().enumerate().all(|(i, &v)| v == ((i + len) % 253) as u8 ^ 2));
        assert_eq!(b.stats[0].stage_read_bytes, 2 * 5000, "what the kernel read is not counted");
        // A stage that cannot be mapped (here its descriptor published
        // wrong) is read by the kernel, and not tried again.
        let (third, third_len) = a.stage(big_len + 1).unwrap();
        fill(third, third_len, 3);
        a.own.region.u32(H_STAGE_FD).store(0, Ordering::Relaxed);
        for _ in 0..2 {
            assert!(!b.read_from(0, third as u64 + 5, &mut got).unwrap(), "by the kernel");
            assert!(got.iter().enumerate().all(|(i, &v)| v == ((i + 5) % 253) as u8 ^ 3));
        }
        assert_eq!(b.stats[0].stage_read_bytes, 2 * 5000);
        // Released: the old addresses are nobody's.
        a.release_stages();
        assert!(b.read_from(0, third as u64, &mut got).is_err());
        assert_eq!(b.stats[0].stage_read_bytes, 2 * 5000);
        // Without stages.
        let job = crate::new_job_id();
        let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut c = Shm::create(job, 0, 2, &ShmOptions { stage: false, ..options(64 << 10) }).unwrap();
        c.attach(job, &[addr, addr]);
        assert!(c.stage(1).unwrap_err().contains("BULKWIRE_SHM_STAGE=0"));
    }

    #[test]
    fn posts_on_the_board_are_read_by_number_and_wake_a_sleeper() {
        let (mut a, mut b) = pair(64 << 10);
        let mut got = Vec::new();
        assert_eq!(b.read_post(0, 1, Kind::BspSync, &mut got), Ok(false), "nothing posted yet");
        // b waits for a's counterpart of its own first post, asleep.
        assert_eq!(b.post(Kind::BspSync, b"from b"), Some(1));
        drain(&mut b);
        assert!(b.may_sleep(Sleeper::Poller));
        assert_eq!(a.post(Kind::BspSync, b"first"), Some(1));
        assert_eq!(a.wake.len(), 1, "a sleeper is woken by a post");
        assert!(!b.may_sleep(Sleeper::Poller), "every counterpart is there: no sleep");
        assert!(b.may_sleep(Sleeper::Poller), "the wait for them ended");
        assert_eq!(b.read_post(0, 1, Kind::BspSync, &mut got), Ok(true));
        assert_eq!(got, b"first");
        assert_eq!(a.read_post(1, 1, Kind::BspSync, &mut got), Ok(true));
        assert_eq!(got, b"from b");
        // The next post goes into the other slot: the first stays readable.
        assert_eq!(a.post(Kind::BspSync, &[7; POST_MAX]), Some(2));
        assert_eq!(b.read_post(0, 1, Kind::BspSync, &mut got), Ok(true));
        assert_eq!(got, b"first");
        assert_eq!(b.read_post(0, 2, Kind::BspSync, &mut got), Ok(true));
        assert_eq!(got, vec![7; POST_MAX]);
        assert_eq!(b.read_post(0, 3, Kind::BspSync, &mut got), Ok(false));
        assert_eq!(a.post(Kind::BspSync, &[0; POST_MAX + 1]), None, "too long for a post");
        assert_eq!(a.post(Kind::Barrier, b""), Some(3), "a post refused takes no number");
        // A post two ahead of the one awaited, or a length beyond a slot,
        // is the poster's violation.
        assert!(b.read_post(0, 1, Kind::BspSync, &mut got).unwrap_err().contains("post 3"));
        let wrong = b.read_post(0, 3, Kind::BspSync, &mut got).unwrap_err();
        assert!(wrong.contains("is a barrier where this process's is a bsp_sync"), "{wrong}");
        assert_eq!(b.read_post(0, 3, Kind::Barrier, &mut got), Ok(true));
        assert!(got.is_empty());
        a.own.region.u64(board_slot(3) + B_LEN).store(POST_MAX as u64 + 1, Ordering::Relaxed);
        assert!(b.read_post(0, 3, Kind::Barrier, &mut got).unwrap_err().contains("bytes on its board"));
    }

    #[test]
    fn settings_are_checked() {
        let look = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(ShmOptions::from_lookup(look(&[(SHM, "0")]), 4).unwrap().is_none());
        assert!(ShmOptions::from_lookup(look(&[(crate::DROP, "0.05")]), 4).unwrap().is_none());
        assert!(ShmOptions::from_lookup(look(&[(crate::DROP, "0.05"), (SHM, "1")]), 4).unwrap().is_some());
        assert_eq!(ShmOptions::from_lookup(look(&[]), 2).unwrap().unwrap().ring, 2 << 20);
        assert_eq!(ShmOptions::from_lookup(look(&[]), 64).unwrap().unwrap().ring, 64 << 10);
        assert!(ShmOptions::from_lookup(look(&[(SHM, "maybe")]), 2).unwrap_err().contains("BULKWIRE_SHM"));
        assert!(ShmOptions::from_lookup(look(&[(SHM_RING, "100000")]), 2).unwrap_err().contains("power of two"));
        assert_eq!(ShmOptions::from_lookup(look(&[]), 2).unwrap().unwrap().arena, ARENA_DEFAULT);
        assert_eq!(ShmOptions::from_lookup(look(&[(SHM_ARENA, "0")]), 2).unwrap().unwrap().arena, 0);
        assert_eq!(ShmOptions::from_lookup(look(&[(SHM_ARENA, " 65536 ")]), 2).unwrap().unwrap().arena, 65536);
        for bad in ["100", "-1", "lots", "8589934592"] {
            let e = ShmOptions::from_lookup(|k: &str| (k == SHM_ARENA).then(|| bad.to_string()), 2).unwrap_err();
            assert!(e.starts_with("BULKWIRE_SHM_ARENA="), "{e}");
        }
        assert!(ShmOptions::from_lookup(look(&[]), 2).unwrap().unwrap().stage);
        assert!(!ShmOptions::from_lookup(look(&[(SHM_STAGE, "0")]), 2).unwrap().unwrap().stage);
        assert!(ShmOptions::from_lookup(look(&[(SHM_STAGE, "sometimes")]), 2)
            .unwrap_err()
            .contains("BULKWIRE_SHM_STAGE"));
    }
}
