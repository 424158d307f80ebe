//! One UDP socket per path class.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use bulkwire_proto::{Landing, Path, SharedPayload};
use bulkwire_wire::{Header, HEADER_LEN, MAC_LEN, OVERHEAD};
use socket2::{Domain, Protocol, Socket, Type};

/// How the premium path is marked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// DSCP of the premium socket (46 = Expedited Forwarding).
    pub premium_dscp: u8,
    /// Linux `SO_PRIORITY` of the premium socket (0 to 6 without privileges).
    pub premium_priority: u32,
    /// Kernel buffer sizes asked for; the kernel may grant less.
    pub buffer_bytes: usize,
    /// A second interface for the premium path (`BULKWIRE_PREMIUM_IFACE`):
    /// the premium socket is bound to its address, so that premium
    /// datagrams take that network.
    pub premium_iface: Option<String>,
    /// Segmentation offload (`BULKWIRE_GSO`, on by default): runs of
    /// equal datagrams to one peer leave in one send (UDP GSO) and arrive
    /// in one read (UDP GRO), where the kernel has them.
    pub offload: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            premium_dscp: 46,
            premium_priority: 6,
            buffer_bytes: 4 << 20,
            premium_iface: None,
            offload: true,
        }
    }
}

impl SocketOptions {
    /// Defaults overridden by `BULKWIRE_PREMIUM_DSCP`,
    /// `BULKWIRE_PREMIUM_PRIORITY` and `BULKWIRE_PREMIUM_IFACE`.
    pub fn from_env() -> io::Result<SocketOptions> {
        let mut o = SocketOptions::default();
        if let Ok(v) = std::env::var("BULKWIRE_PREMIUM_DSCP") {
            o.premium_dscp = v.trim().parse().ok().filter(|d| *d < 64).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("BULKWIRE_PREMIUM_DSCP={v:?}: a DSCP is 0 to 63"))
            })?;
        }
        if let Ok(v) = std::env::var("BULKWIRE_PREMIUM_PRIORITY") {
            o.premium_priority = v.trim().parse().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("BULKWIRE_PREMIUM_PRIORITY={v:?}: not a number"))
            })?;
        }
        if let Ok(v) = std::env::var("BULKWIRE_PREMIUM_IFACE") {
            let name = v.trim();
            if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
                let why = format!("BULKWIRE_PREMIUM_IFACE={v:?}: not an interface name");
                return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
            }
            o.premium_iface = Some(name.to_string());
        }
        o.offload = crate::env::switch("BULKWIRE_GSO", std::env::var("BULKWIRE_GSO").ok().as_deref(), true)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        Ok(o)
    }
}

/// The sockets of one process: `ordinary` (best effort) and `premium`.
#[derive(Debug)]
pub struct PathSockets {
    pub ordinary: UdpSocket,
    pub premium: UdpSocket,
    /// Why the premium path is not distinct from the ordinary one, if it
    /// is not: its interface has no address or is down (then the premium
    /// socket is bound beside the ordinary one), or, on the same interface,
    /// the DSCP or the priority was refused (then the premium path is the
    /// ordinary one under another port).
    pub premium_unavailable: Option<String>,
    /// The premium socket is bound to another interface than the ordinary one.
    pub premium_elsewhere: bool,
    /// The kernel segments a send of several datagrams (UDP_SEGMENT, Linux 4.18).
    pub segmentation: bool,
    /// The kernel may deliver a run of datagrams in one read (UDP_GRO, Linux 5.0).
    pub coalescing: bool,
}

impl PathSockets {
    /// Binds both sockets to `ip` (the interface the job uses, never the
    /// wildcard address), on ports the system chooses, and marks the
    /// premium one. A mark the system refuses is not an error: the job
    /// still runs, on a premium path that is not distinct
    /// (`premium_unmarked` says why).
    pub fn bind(ip: IpAddr, options: &SocketOptions) -> io::Result<PathSockets> {
        let ordinary = open(ip, options)?;
        let (premium_ip, missing) = match &options.premium_iface {
            None => (ip, None),
            Some(name) => match address_of(name, ip) {
                Ok(address) => (address, None),
                Err(why) => (ip, Some(why)),
            },
        };
        let premium = open(premium_ip, options)?;
        let premium_elsewhere = premium_ip != ip;
        // Marks matter less on a network of its own; a mark refused there
        // leaves the path distinct all the same.
        let unmarked = mark(&premium, premium_ip, options).err().filter(|_| !premium_elsewhere);
        let segmentation = options.offload && segmentation_supported(&ordinary) && segmentation_supported(&premium);
        // Both sockets or neither: what either delivers is read alike.
        let coalescing = options.offload && set_coalescing(&ordinary, true) && set_coalescing(&premium, true);
        if !coalescing {
            set_coalescing(&ordinary, false);
        }
        Ok(PathSockets {
            ordinary,
            premium,
            premium_unavailable: missing.or(unmarked),
            premium_elsewhere,
            segmentation,
            coalescing,
        })
    }

    /// Has the kernel note when each datagram reaches either socket
    /// (`SO_TIMESTAMPNS`), for [`RecvBatch::set_stamping`]; whether it
    /// took that on both.
    pub fn stamp_arrivals(&self) -> bool {
        [&self.ordinary, &self.premium]
            .into_iter()
            .all(|socket| set_int(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1))
    }

    pub fn socket(&self, path: Path) -> &UdpSocket {
        match path {
            Path::Ordinary => &self.ordinary,
            Path::Premium => &self.premium,
        }
    }

    /// The smaller of the two kernel receive buffers, as the kernel reports
    /// it (on Linux, twice what it lets datagrams fill).
    pub fn recv_buffer_bytes(&self) -> io::Result<usize> {
        let ordinary = socket2::SockRef::from(&self.ordinary).recv_buffer_size()?;
        let premium = socket2::SockRef::from(&self.premium).recv_buffer_size()?;
        Ok(ordinary.min(premium))
    }

    pub fn addrs(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.ordinary.local_addr()?, self.premium.local_addr()?))
    }
}

/// Buffers for reading many datagrams with one recvmmsg(2): a burst of
/// small datagrams costs one system call, not one each. A datagram's
/// buffer may be taken away ([`RecvBatch::datagram_mut`]): it is replaced
/// before the next read, by a buffer given back ([`RecvBatch::recycle`])
/// when there is one. With coalescing on ([`RecvBatch::set_coalescing`],
/// the sockets' `UDP_GRO`), a buffer may hold a run of datagrams of one
/// sender laid end to end ([`RecvBatch::segment_size`]).
#[derive(Debug)]
pub struct RecvBatch {
    /// Each as long as the datagram last read into it.
    buffers: Vec<Vec<u8>>,
    /// Buffers given back, the last one first: it is the likeliest still
    /// in the cache (measured: see `RecvBatch::recycle`).
    spare: Vec<Vec<u8>>,
    /// The most buffers kept in `spare`: two batches' worth, or as many as
    /// the last [`RecvBatch::recycle_many`] kept of those it gave back,
    /// and never fewer than `floor` ([`RecvBatch::keep_at_least`]).
    spare_limit: usize,
    floor: usize,
    /// Buffers taken fresh from the allocator since the first batch's.
    made: u64,
    coalescing: bool,
    /// The size of the datagrams in each buffer of the last read, where
    /// it holds more than one.
    segments: [usize; RecvBatch::MAX],
    /// The last read was a landing read: the datagrams' lengths.
    landing: bool,
    lengths: [usize; RecvBatch::MAX],
    /// Buffers the last read filled.
    read: usize,
    /// The iovecs of a run's landing read ([`Landing::run`]), kept for
    /// the next.
    run_iovecs: RunIovecs,
    /// The slots the last run's landing read had iovecs for.
    run_slots: usize,
    /// The last read brought something: the next takes a whole batch.
    wide: bool,
    /// Reads the kernel's receive time of each datagram
    /// ([`RecvBatch::set_stamping`]).
    stamping: bool,
    /// How long before the last read returned the kernel received each of
    /// its buffers' datagrams, in nanoseconds (`u64::MAX`: not known).
    ages: [u64; RecvBatch::MAX],
}

/// Room for any datagram UDP allows.
const DATAGRAM_ROOM: usize = 65_536;

/// Room for the control messages a read may bring (`UDP_GRO`'s segment
/// size, 24 bytes, and `SO_TIMESTAMPNS`'s time, 32), in words so that it
/// is aligned as the kernel's headers are.
const CONTROL_WORDS: usize = 8;

/// An age past this is a clock that was set meanwhile, not a datagram
/// that waited: it is not used.
const MAX_AGE: Duration = Duration::from_secs(10);

impl RecvBatch {
    /// Most datagrams one read takes.
    pub const MAX: usize = 16;

    /// Bytes of each buffer: room for any datagram UDP allows, or a run
    /// of them the kernel coalesced.
    pub const ROOM: usize = DATAGRAM_ROOM;

    /// Room for `count` (at most [`RecvBatch::MAX`]) datagrams of any size UDP allows.
    pub fn new(count: usize) -> RecvBatch {
        let count = count.clamp(1, Self::MAX);
        RecvBatch {
            buffers: (0..count).map(|_| Vec::with_capacity(DATAGRAM_ROOM)).collect(),
            spare: Vec::new(),
            spare_limit: 2 * count,
            floor: 2 * count,
            made: 0,
            coalescing: false,
            segments: [0; Self::MAX],
            landing: false,
            lengths: [0; Self::MAX],
            read: 0,
            run_iovecs: RunIovecs(Vec::new()),
            run_slots: 0,
            wide: true,
            stamping: false,
            ages: [u64::MAX; Self::MAX],
        }
    }

    /// Reads the kernel's receive time of each datagram (the sockets read
    /// from must have `SO_TIMESTAMPNS` on: [`PathSockets::stamp_arrivals`]).
    pub fn set_stamping(&mut self, on: bool) {
        self.stamping = on;
    }

    /// How long before the last read returned the kernel received the
    /// datagrams of its `i`th buffer (a coalesced run shares one time),
    /// with stamping on and the stamp sound.
    pub fn age(&self, i: usize) -> Option<Duration> {
        Some(self.ages[i]).filter(|&a| a != u64::MAX).map(Duration::from_nanos)
    }

    /// Reads the segment size the kernel gives with a run of datagrams
    /// (the sockets read from must have `UDP_GRO` on: [`PathSockets::coalescing`]).
    pub fn set_coalescing(&mut self, on: bool) {
        self.coalescing = on;
    }

    /// Takes back a buffer that held a datagram taken away, once its
    /// contents are no longer needed, to read a later datagram into. Only
    /// buffers with room for any datagram (and not more than twice that)
    /// are kept, at most two batches' worth (or as many as the last
    /// [`RecvBatch::recycle_many`] gave back, or the floor of
    /// [`RecvBatch::keep_at_least`], whichever is more); others are freed.
    ///
    /// A buffer just read from is likely still in the cache, unlike memory
    /// fresh from the allocator: 8 processes on 2 cores exchanging 16 KiB
    /// per pair took 0.85x as long with buffers given back after their
    /// puts landed (median of ten alternating pairs; docs/BENCHMARKS.md).
    pub fn recycle(&mut self, mut buffer: Vec<u8>) {
        let room = buffer.capacity();
        if (DATAGRAM_ROOM..=2 * DATAGRAM_ROOM).contains(&room) && self.spare.len() < self.spare_limit {
            buffer.clear();
            self.spare.push(buffer);
        }
    }

    /// [`RecvBatch::recycle`] of `buffers`, all the buffers of something
    /// received that the caller is done with at once (a BSP superstep's
    /// streams), kept however many they are, until a later call gives back
    /// fewer (then as many as that one, or the floor: two batches' worth
    /// unless [`RecvBatch::keep_at_least`] raised it). Whoever
    /// received that much at once is likely to again: a stream of 2 GiB is
    /// about 33,000 datagrams of 64 KB, each taking a buffer as it arrives,
    /// and buffers taken fresh from the allocator were new pages, which
    /// the kernel faulted in and cleared as the datagrams were read into
    /// them: a BSP put of 2 GiB between two processes over loopback took
    /// 2.0-2.2 s in its first timed supersteps, the reads faulting in
    /// 57,000-111,000 pages each, against 0.64-0.66 s (about 730 faults)
    /// with every buffer kept.
    /// The buffers given back now are taken first, and older ones still
    /// kept only fill the pool up to the limit: the new ones are the
    /// likelier to be in the cache.
    pub fn recycle_many(&mut self, buffers: impl Iterator<Item = Vec<u8>>) {
        let older = std::mem::take(&mut self.spare);
        self.spare_limit = usize::MAX;
        for buffer in buffers {
            self.recycle(buffer);
        }
        let given = self.spare.len();
        self.spare_limit = given.max(self.floor);
        let room = self.spare_limit - given;
        let mut kept: Vec<Vec<u8>> = older.into_iter().rev().take(room).collect();
        kept.reverse();
        kept.append(&mut self.spare);
        self.spare = kept;
    }

    /// Keeps at least `n` buffers given back from now on: a receiver that
    /// gives each back as soon as it is done with it (a BSP put landing as
    /// it arrives) needs as many as it holds at once, which
    /// [`RecvBatch::recycle`]'s two batches' worth may not be, and
    /// [`RecvBatch::recycle_many`]'s count never sees.
    pub fn keep_at_least(&mut self, n: usize) {
        self.floor = self.floor.max(n);
        self.spare_limit = self.spare_limit.max(self.floor);
    }

    pub fn capacity(&self) -> usize {
        self.buffers.len()
    }

    /// How many buffers were taken fresh from the allocator, beyond the
    /// first batch's, because none given back was there.
    pub fn made(&self) -> u64 {
        self.made
    }

    /// Reads what `socket` holds, up to the capacity, without waiting;
    /// returns how many buffers were filled (an error when none was).
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.read(socket, None)
    }

    /// [`RecvBatch::recv`] of at most `landing`'s slots, each datagram read
    /// in three pieces: its first [`Landing::head`] bytes into its buffer,
    /// the next into the slot's region (in the buffer of the message in
    /// reassembly), the rest behind, in its buffer where it would follow
    /// the region were that region in it. See [`RecvBatch::landed`] and
    /// [`RecvBatch::gather_from`].
    ///
    /// # Safety
    ///
    /// `landing`'s regions are valid for writes (the endpoint lends them
    /// until its next call other than `handle_landed`).
    pub unsafe fn recv_landing(&mut self, socket: &UdpSocket, landing: &Landing) -> io::Result<usize> {
        self.read(socket, Some(landing))
    }

    fn read(&mut self, socket: &UdpSocket, landing: Option<&Landing>) -> io::Result<usize> {
        // One datagram at a time while reads find nothing (the turns of a
        // spinning wait, where a ping-pong's next datagram comes alone),
        // the whole batch once one came (a burst drains in few calls).
        let count = match landing {
            // All of a run's slots are the first buffer's.
            Some(landing) if landing.run() => 1,
            Some(landing) => landing.slots().min(self.buffers.len()),
            None if self.wide => self.buffers.len(),
            None => 1,
        };
        // On the stack, and only the first `count` of each written: this
        // runs on every turn of a spinning wait.
        let mut iovecs = [const { MaybeUninit::<[libc::iovec; 3]>::uninit() }; Self::MAX];
        // Only the kernel writes these, and only with coalescing on.
        let mut controls = [const { MaybeUninit::<[u64; CONTROL_WORDS]>::uninit() }; Self::MAX];
        let mut headers = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; Self::MAX];
        // Every write goes through these pointers, each to an element of
        // its own (k < count ≤ MAX).
        let iov_at = iovecs.as_mut_ptr().cast::<[libc::iovec; 3]>();
        let control_at = controls.as_mut_ptr().cast::<[u64; CONTROL_WORDS]>();
        let header_at = headers.as_mut_ptr().cast::<libc::mmsghdr>();
        for k in 0..count {
            let b = &mut self.buffers[k];
            b.clear();
            if b.capacity() < DATAGRAM_ROOM {
                // Taken away with its datagram (or new): one given back, or
                // a fresh one, not cleared, since the kernel writes it.
                *b = self.spare.pop().unwrap_or_else(|| {
                    self.made += 1;
                    Vec::with_capacity(DATAGRAM_ROOM)
                });
            }
            let base = b.as_mut_ptr();
            let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 3];
            let parts = match landing {
                None => {
                    iov[0] = libc::iovec { iov_base: base.cast(), iov_len: b.capacity() };
                    1
                }
                Some(landing) if landing.run() => {
                    self.run_slots = run_iovecs(&mut self.run_iovecs.0, base, b.capacity(), landing);
                    self.run_iovecs.0.len()
                }
                Some(landing) => {
                    let (place, room) = landing.region(k);
                    // Room for any datagram: the head, the region, and the
                    // buffer's room from where the region would end in it.
                    let behind = landing.head() + room;
                    // A region is at most a datagram's data, and a datagram
                    // at most 65,507 bytes: `behind` is within the room.
                    debug_assert!(behind <= b.capacity());
                    iov[0] = libc::iovec { iov_base: base.cast(), iov_len: landing.head() };
                    iov[1] = libc::iovec { iov_base: place.cast(), iov_len: room };
                    // SAFETY: `behind` is within the capacity (above).
                    let rest = unsafe { base.add(behind) };
                    iov[2] = libc::iovec { iov_base: rest.cast(), iov_len: b.capacity() - behind };
                    3
                }
            };
            // SAFETY: an all-zero mmsghdr is a valid empty header; k < MAX,
            // so each write lands in its own element of the arrays.
            unsafe {
                iov_at.add(k).write(iov);
                let mut h: libc::mmsghdr = std::mem::zeroed();
                h.msg_hdr.msg_iov = match landing.is_some_and(Landing::run) {
                    true => self.run_iovecs.0.as_mut_ptr(),
                    false => iov_at.add(k).cast(),
                };
                h.msg_hdr.msg_iovlen = parts;
                if self.coalescing || self.stamping {
                    h.msg_hdr.msg_control = control_at.add(k).cast();
                    h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; CONTROL_WORDS]>();
                }
                header_at.add(k).write(h);
            }
        }
        // One datagram (a spinning wait's turn) and no control message
        // wanted: recv(2), which copies no message header and no iovec in
        // from user space. Measured (a C loop on an empty socket): 290 ns
        // a call against recvmsg's 400; an 8 B ping-pong over UDP
        // 4.5-4.6 against 4.8 us half round trip.
        let plain = count == 1 && landing.is_none() && !self.stamping;
        // SAFETY: the first `count` headers are written; each points to
        // iovecs over a live buffer's capacity or (the caller says) a
        // region lent for writes, and with coalescing to a live control
        // buffer of the stated length; the kernel writes at most that much
        // into each (a plain read: at most the first buffer's capacity,
        // into it).
        let n = unsafe {
            match count {
                1 if plain => {
                    let b = &mut self.buffers[0];
                    let got = libc::recv(socket.as_raw_fd(), b.as_mut_ptr().cast(), b.capacity(), libc::MSG_DONTWAIT);
                    if got < 0 {
                        -1
                    } else {
                        (*header_at).msg_len = got as libc::c_uint;
                        1
                    }
                }
                // One datagram (a spinning wait's turn): recvmsg, without
                // recvmmsg's loop around it.
                1 => {
                    let header = &mut *header_at;
                    let got = libc::recvmsg(socket.as_raw_fd(), &mut header.msg_hdr, libc::MSG_DONTWAIT);
                    // An empty datagram (a wake-up) is a datagram read.
                    if got < 0 {
                        -1
                    } else {
                        header.msg_len = got as libc::c_uint;
                        1
                    }
                }
                _ => libc::recvmmsg(
                    socket.as_raw_fd(),
                    header_at,
                    count as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                ),
            }
        };
        self.landing = false;
        self.read = 0;
        if n < 0 {
            self.wide = false;
            return Err(io::Error::last_os_error());
        }
        self.wide = true;
        let n = n as usize;
        self.read = n;
        // The kernel stamps with the system's clock: ages are taken against
        // it, read once per read.
        let wall = match self.stamping {
            true => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok(),
            false => None,
        };
        for k in 0..n {
            // SAFETY: written above (k < n ≤ count), and by the kernel since.
            let h = unsafe { &*header_at.add(k) };
            let b = &mut self.buffers[k];
            let len = h.msg_len as usize;
            match landing {
                // SAFETY: the kernel wrote msg_len bytes (at most the
                // capacity) at the start of this buffer.
                None => unsafe { b.set_len(len.min(b.capacity())) },
                // Put together by `gather` if need be.
                Some(_) => self.lengths[k] = len,
            }
            let whole = if landing.is_some() { len } else { b.len() };
            let (segment, stamp) = match self.coalescing || self.stamping {
                // A run the kernel coalesced (`UDP_GRO`) is then known by
                // its length alone: the first datagram names its own.
                true if plain => (self.coalescing.then(|| Header::named_length(b)).flatten(), None),
                true => read_controls(&h.msg_hdr),
                false => (None, None),
            };
            self.segments[k] = segment.filter(|&s| s < whole).unwrap_or(0);
            // A stamp after the clock read that followed it, or long before:
            // the clock was set meanwhile.
            let age = wall.zip(stamp).and_then(|(wall, stamp)| wall.checked_sub(stamp)).filter(|&a| a < MAX_AGE);
            self.ages[k] = age.map_or(u64::MAX, |a| a.as_nanos() as u64);
        }
        self.landing = landing.is_some();
        Ok(n)
    }

    /// Datagram `j` of the last read, a landing read, where it was read as
    /// slot `j`'s: its first bytes (up to [`Landing::head`]), how many
    /// bytes of the slot's region it filled, and its bytes after the
    /// region. A landing read either reads a datagram per buffer (slot `j`
    /// in buffer `j`) or, with [`Landing::run`], a run of them into the
    /// first buffer (slot `j` where datagram `j` of the run lies). `None`
    /// past the datagrams read or the slots, and where a datagram was not
    /// read as its slot's: a buffer of one datagram per slot holds a run
    /// (the kernel coalesced it anyway), or a run's datagrams are not a
    /// full slot's length (or are longer: then parts of one lie in the
    /// next slot's region).
    pub fn landed(&self, j: usize, landing: &Landing) -> Option<(&[u8], usize, &[u8])> {
        debug_assert!(self.landing);
        let (buffer, start, end) = if landing.run() {
            let len = self.lengths[0];
            // The kernel names the datagrams' length where it coalesced them.
            let size = Some(self.segments[0]).filter(|&s| s > 0).unwrap_or(len);
            let full = landing.head() + landing.region(0).1 + Landing::TAIL;
            let start = j * size;
            if j >= self.run_slots || start >= len || size > full || (j > 0 && size != full) {
                return None;
            }
            (0, start, (start + size).min(len))
        } else {
            if j >= self.read || self.segments[j] > 0 {
                return None;
            }
            (j, 0, self.lengths[j])
        };
        let room = landing.region(j).1;
        let (head, data, tail) = cut(end - start, landing, room);
        let behind = start + landing.head() + room;
        let b = &self.buffers[buffer];
        // SAFETY: the read put the slot's head and tail into the buffer
        // where they lie in what it read (`run_iovecs`, or the head at the
        // start and the tail at `behind`), within its capacity.
        unsafe {
            Some((
                std::slice::from_raw_parts(b.as_ptr().add(start), head),
                data,
                std::slice::from_raw_parts(b.as_ptr().add(behind), tail),
            ))
        }
    }

    /// Puts the datagrams of the last read, a landing read, together in
    /// their buffers from slot `j` on (those before it were handled in
    /// place): [`RecvBatch::datagram_mut`] then gives each buffer from the
    /// returned one on whole, from its start, a run with its segment size.
    /// Returns how many buffers are done with: `j` where a datagram was
    /// read per buffer; for a run's read 0, or 1 where the run ends before
    /// slot `j` (an empty datagram, a wake-up, is left as it is: empty, and
    /// not done with).
    ///
    /// # Safety
    ///
    /// `landing` is the one read into, and its regions from slot `j` on
    /// are still valid (nothing the endpoint lent them for was freed
    /// since).
    pub unsafe fn gather_from(&mut self, j: usize, landing: &Landing) -> usize {
        debug_assert!(self.landing);
        if !landing.run() {
            for k in j..self.read {
                // SAFETY: as the caller says.
                unsafe { self.gather(k, landing) };
            }
            return j;
        }
        let len = self.lengths[0];
        let from = j.saturating_mul(self.segment_size(0).unwrap_or(len));
        if from >= len && from > 0 {
            return 1;
        }
        let full = landing.head() + landing.region(0).1 + Landing::TAIL;
        let b = &mut self.buffers[0];
        for i in 0..self.run_slots {
            let (place, room) = landing.region(i);
            // Where the region's bytes lie in the run.
            let at = i * full + landing.head();
            let (lo, hi) = (at.max(from), (at + room).min(len));
            if lo < hi {
                // SAFETY: the read wrote the region up to the run's end
                // (`hi - at` bytes); they go where they lie in the run,
                // within the buffer's capacity (`len` is at most that).
                unsafe {
                    std::ptr::copy_nonoverlapping(place.add(lo - at).cast_const(), b.as_mut_ptr().add(lo), hi - lo)
                };
            }
        }
        // SAFETY: every byte from `from` to `len` was written, by the read
        // or just above; they move to the start (rarely: a run in place up
        // to the end of a message or an aim, and after it others).
        unsafe {
            if from > 0 {
                std::ptr::copy(b.as_ptr().add(from), b.as_mut_ptr(), len - from);
            }
            b.set_len(len - from);
        }
        self.lengths[0] = len - from;
        0
    }

    /// Puts the `k`th datagram of the last read, a landing read of a
    /// datagram per buffer, together in its buffer.
    ///
    /// # Safety
    ///
    /// As [`RecvBatch::gather_from`]'s.
    unsafe fn gather(&mut self, k: usize, landing: &Landing) {
        let (place, room) = landing.region(k);
        let (head, data, tail) = cut(self.lengths[k], landing, room);
        let b = &mut self.buffers[k];
        // SAFETY: the region held `data` bytes the kernel wrote; they move
        // to just behind the head, within the capacity, and the tail (if
        // any, only when the region was filled) lies right behind them.
        unsafe {
            std::ptr::copy_nonoverlapping(place.cast_const(), b.as_mut_ptr().add(head), data);
            b.set_len(head + data + tail);
        }
    }

    /// The `i`th datagram of the last read.
    #[cfg(test)]
    fn datagram(&self, i: usize) -> &[u8] {
        &self.buffers[i]
    }

    /// The `i`th buffer of the last read, which the caller may take: one
    /// datagram, or with [`RecvBatch::segment_size`] a run of them.
    pub fn datagram_mut(&mut self, i: usize) -> &mut Vec<u8> {
        &mut self.buffers[i]
    }

    /// Where the `i`th buffer of the last read holds several datagrams:
    /// the size of each but the last (which may be shorter).
    pub fn segment_size(&self, i: usize) -> Option<usize> {
        Some(self.segments[i]).filter(|&s| s > 0)
    }
}

/// How a datagram of `len` bytes read as a slot's lies: its bytes before
/// the slot's region (at most [`Landing::head`]), in the region (at most
/// `room`), and after it.
fn cut(len: usize, landing: &Landing, room: usize) -> (usize, usize, usize) {
    let head = len.min(landing.head());
    let data = (len - head).min(room);
    (head, data, len - head - data)
}

/// The iovecs of a run's landing read.
#[derive(Debug)]
struct RunIovecs(Vec<libc::iovec>);

// SAFETY: their pointers are written before each read, for it alone, and
// not followed otherwise.
unsafe impl Send for RunIovecs {}

/// Fills `iovecs` for a run's landing read ([`Landing::run`]) into a
/// buffer at `base` of `room` bytes: for each slot a datagram's head, the
/// slot's region and its tail, the heads and tails in the buffer where
/// they would lie were the run read whole into it; then the buffer's room
/// after the last slot's. Returns how many slots it has (those that fit).
fn run_iovecs(iovecs: &mut Vec<libc::iovec>, base: *mut u8, room: usize, landing: &Landing) -> usize {
    iovecs.clear();
    // Where the buffer's next piece starts.
    let mut own = 0;
    let mut slots = 0;
    for i in 0..landing.slots() {
        let (place, len) = landing.region(i);
        let head_end = own + (if i == 0 { 0 } else { Landing::TAIL }) + landing.head();
        if head_end + len + Landing::TAIL > room {
            break;
        }
        iovecs.push(libc::iovec { iov_base: base.wrapping_add(own).cast(), iov_len: head_end - own });
        iovecs.push(libc::iovec { iov_base: place.cast(), iov_len: len });
        own = head_end + len;
        slots += 1;
    }
    iovecs.push(libc::iovec { iov_base: base.wrapping_add(own).cast(), iov_len: room - own });
    slots
}

/// What a read's control messages say: the segment size of a coalesced
/// run (`UDP_GRO`), and when the kernel received it, as time since the
/// Unix epoch on the system's clock (`SO_TIMESTAMPNS`).
fn read_controls(header: &libc::msghdr) -> (Option<usize>, Option<Duration>) {
    let (mut segment, mut stamp) = (None, None);
    if header.msg_control.is_null() || header.msg_controllen == 0 {
        return (segment, stamp);
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of the control
    // buffer with whole control messages; the CMSG macros stay within it,
    // and each message's data is as long as its type says.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        while !cmsg.is_null() {
            let (level, kind) = ((*cmsg).cmsg_level, (*cmsg).cmsg_type);
            if level == libc::SOL_UDP && kind == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                segment = usize::try_from(size).ok().filter(|&s| s > 0);
            } else if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                if let (Ok(secs), Ok(nanos)) = (u64::try_from(t.tv_sec), u32::try_from(t.tv_nsec)) {
                    stamp = (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos));
                }
            }
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    (segment, stamp)
}

/// Datagrams waiting to go out, sent with one sendmmsg(2) per run of the
/// same path: a burst costs one system call, not one per datagram (a
/// datagram alone on its path goes by sendto(2), cheaper still). With
/// segmentation on ([`SendBatch::set_segmentation`]), consecutive
/// datagrams to one peer of one size (the last may be shorter) go as one
/// message that the kernel cuts into them (UDP GSO): one trip through the
/// network stack for the run instead of one per datagram.
#[derive(Debug)]
pub struct SendBatch {
    buffers: Vec<Vec<u8>>,
    /// The datagram in each of the first buffers.
    queued: Vec<Queued>,
    segmentation: bool,
    /// Datagrams sent in segmented sends, by the rank they went to.
    segmented: Vec<u64>,
    /// Room to put the queued datagrams in order ([`SendBatch::group`]),
    /// kept so that it allocates once.
    order: Vec<usize>,
    first: Vec<usize>,
    moved: Vec<Option<Queued>>,
    moved_buffers: Vec<Vec<u8>>,
    /// A lone datagram put together, header, payload and MAC, for
    /// `sendto(2)` ([`SendBatch::send_alone`]).
    alone: Vec<u8>,
}

#[derive(Debug)]
struct Queued {
    path: Path,
    rank: u32,
    to: socket2::SockAddr,
    /// Bytes written in the buffer.
    len: usize,
    /// A payload that goes between the buffer's header and its MAC
    /// ([`bulkwire_proto::Endpoint::poll_transmit_shared`]), read by the
    /// kernel where it lies instead of first copied into the buffer.
    shared: Option<SharedPayload>,
}

impl Queued {
    /// The datagram's length on the wire.
    fn wire_len(&self) -> usize {
        match &self.shared {
            None => self.len,
            Some(payload) => HEADER_LEN + payload.len() + MAC_LEN,
        }
    }
}

/// Most datagrams the kernel cuts one send into (`UDP_MAX_SEGMENTS` of
/// Linux 4.18; later kernels take more).
const MAX_SEGMENTS: usize = 64;

/// Most bytes one segmented send carries: the largest UDP payload over IPv4.
const MAX_SEGMENTED_BYTES: usize = 65_507;

/// The longest datagram with a shared payload sent alone by `sendto(2)`
/// rather than by `sendmmsg(2)` ([`SendBatch::send_alone`]): copying a
/// shared payload of up to this much costs less than `sendmmsg`'s own work.
const ALONE_MAX: usize = 2_048;

impl SendBatch {
    /// Most datagrams one send takes.
    pub const MAX: usize = 64;

    /// Room for `count` (at most [`SendBatch::MAX`]) datagrams of `max_datagram` bytes.
    pub fn new(count: usize, max_datagram: usize) -> SendBatch {
        let count = count.clamp(1, Self::MAX);
        SendBatch {
            buffers: vec![vec![0; max_datagram]; count],
            queued: Vec::with_capacity(count),
            segmentation: false,
            segmented: Vec::new(),
            order: Vec::with_capacity(count),
            first: Vec::with_capacity(count),
            moved: Vec::with_capacity(count),
            moved_buffers: Vec::with_capacity(count),
            alone: Vec::with_capacity(ALONE_MAX),
        }
    }

    /// Sends runs of datagrams as one segmented message (the kernel must
    /// have UDP GSO: [`PathSockets::segmentation`]). Where a send is
    /// refused for it, segmentation turns itself off.
    pub fn set_segmentation(&mut self, on: bool) {
        self.segmentation = on;
    }

    /// Datagrams to `rank` that went in segmented sends so far.
    pub fn segmented(&self, rank: u32) -> u64 {
        self.segmented.get(rank as usize).copied().unwrap_or(0)
    }

    pub fn is_full(&self) -> bool {
        self.queued.len() == self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The buffer the next datagram is to be written into (the batch must not be full).
    pub fn next_buffer(&mut self) -> &mut [u8] {
        &mut self.buffers[self.queued.len()]
    }

    /// Queues the datagram just written into [`SendBatch::next_buffer`]:
    /// `len` bytes, or with a `shared` payload the header before it and the
    /// MAC after it.
    /// `rank` names the peer at `to`, for the counts.
    pub fn push(&mut self, path: Path, rank: u32, to: SocketAddr, len: usize, shared: Option<SharedPayload>) {
        debug_assert!(shared.is_none() || len == OVERHEAD);
        self.queued.push(Queued { path, rank, to: to.into(), len, shared });
    }

    /// Sends the datagrams at the front that share a path. Returns how many
    /// went; `WouldBlock` when the socket took none. On any other error the
    /// first datagram is dropped (the protocol recovers it) and the error
    /// returned.
    pub fn send(&mut self, sockets: &PathSockets) -> io::Result<usize> {
        if self.segmentation {
            self.group();
        }
        loop {
            match self.send_once(sockets) {
                // A segmented send refused (a route whose MTU is smaller
                // than a datagram, a device without checksum offload):
                // the same datagrams again, one by one.
                Err(Refused::Segmented) => self.segmentation = false,
                Err(Refused::Other(error)) => return Err(error),
                Ok(n) => return Ok(n),
            }
        }
    }

    fn send_once(&mut self, sockets: &PathSockets) -> Result<usize, Refused> {
        let Some(path) = self.queued.first().map(|q| q.path) else { return Ok(0) };
        let run = self.queued.iter().take_while(|q| q.path == path).count();
        // Copied together only up to ALONE_MAX; a datagram in one buffer
        // needs no copy at any length.
        let alone = &self.queued[0];
        if run == 1 && (alone.shared.is_none() || alone.wire_len() <= ALONE_MAX) {
            return self.send_alone(sockets.socket(path));
        }
        // On the stack, and left uninitialised but for what is used: this
        // runs for every message sent (a small message's send fills one
        // header and one iovec of 12 KiB). Up to five parts a datagram:
        // header, a shared payload's record header, bytes and trailer, MAC.
        let mut iovecs = [const { MaybeUninit::<libc::iovec>::uninit() }; 5 * Self::MAX];
        let mut controls = [const { MaybeUninit::<[u64; CONTROL_WORDS]>::uninit() }; Self::MAX];
        let mut headers = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; Self::MAX];
        // All writes go through these pointers, each to an element not
        // yet written: `parts` < 5 × datagrams and `messages` ≤ datagrams,
        // and a batch holds at most `MAX` datagrams.
        let iov = iovecs.as_mut_ptr().cast::<libc::iovec>();
        let ctl = controls.as_mut_ptr().cast::<[u64; CONTROL_WORDS]>();
        let hdr = headers.as_mut_ptr().cast::<libc::mmsghdr>();
        debug_assert!(run <= Self::MAX);
        // Datagrams in each message.
        let mut counts = [0usize; Self::MAX];
        let (mut messages, mut i, mut parts) = (0, 0, 0);
        while i < run {
            let first = &self.queued[i];
            let size = first.wire_len();
            let mut end = i + 1;
            let mut bytes = size;
            if self.segmentation {
                // Every datagram but the last of a run is `size` long.
                while end < run
                    && end - i < MAX_SEGMENTS
                    && self.queued[end].to == first.to
                    && self.queued[end - 1].wire_len() == size
                    && self.queued[end].wire_len() <= size
                    && bytes + self.queued[end].wire_len() <= MAX_SEGMENTED_BYTES
                {
                    bytes += self.queued[end].wire_len();
                    end += 1;
                }
            }
            let from = parts;
            for (q, buffer) in self.queued[i..end].iter().zip(&mut self.buffers[i..end]) {
                let buf = buffer.as_mut_ptr();
                // SAFETY: within the arrays (above); the MAC lies within
                // the buffer, behind the header; the kernel only reads
                // through the shared payload's pointer.
                unsafe {
                    match &q.shared {
                        None => {
                            iov.add(parts).write(libc::iovec { iov_base: buf.cast(), iov_len: q.len });
                            parts += 1;
                        }
                        Some(payload) => {
                            iov.add(parts).write(libc::iovec { iov_base: buf.cast(), iov_len: HEADER_LEN });
                            parts += 1;
                            for part in payload.parts() {
                                if !part.is_empty() {
                                    let at = part.as_ptr() as *mut libc::c_void;
                                    iov.add(parts).write(libc::iovec { iov_base: at, iov_len: part.len() });
                                    parts += 1;
                                }
                            }
                            let mac = buf.add(HEADER_LEN).cast();
                            iov.add(parts).write(libc::iovec { iov_base: mac, iov_len: MAC_LEN });
                            parts += 1;
                        }
                    }
                }
            }
            // SAFETY: an all-zero mmsghdr is a valid empty header.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            let h = &mut m.msg_hdr;
            // SAFETY: within the array (above).
            h.msg_iov = unsafe { iov.add(from) };
            h.msg_iovlen = parts - from;
            h.msg_name = first.to.as_ptr() as *mut libc::c_void;
            h.msg_namelen = first.to.len();
            if end - i > 1 {
                // SAFETY: within the array (above); CMSG_SPACE of a u16
                // fits `CONTROL_WORDS` words; the control buffer is then
                // live, aligned, zeroed and as long as `msg_controllen`,
                // room for one control message of a u16.
                unsafe {
                    let control = ctl.add(messages);
                    control.write([0; CONTROL_WORDS]);
                    h.msg_control = control.cast();
                    h.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize;
                    debug_assert!(h.msg_controllen <= std::mem::size_of::<[u64; CONTROL_WORDS]>());
                    let cmsg = libc::CMSG_FIRSTHDR(h);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), size as u16);
                }
            }
            // SAFETY: within the array (above).
            unsafe { hdr.add(messages).write(m) };
            counts[messages] = end - i;
            messages += 1;
            i = end;
        }
        crate::cycles::mark(crate::cycles::Point::Syscall);
        // SAFETY: the first `messages` headers are written; each names a
        // live address and iovecs (written) over live buffers of the stated
        // lengths (the shared payloads are held by `self.queued`), and a
        // live control buffer where it has one, for the duration of the call.
        let n = unsafe { libc::sendmmsg(sockets.socket(path).as_raw_fd(), hdr, messages as libc::c_uint, 0) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::WouldBlock {
                return Err(Refused::Other(error));
            }
            if counts[0] > 1 && matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EIO | libc::EMSGSIZE)) {
                return Err(Refused::Segmented);
            }
            self.consume(1);
            return Err(Refused::Other(error));
        }
        let sent = counts[..n as usize].iter().sum();
        let mut at = 0;
        for &count in &counts[..n as usize] {
            if count > 1 {
                let rank = self.queued[at].rank as usize;
                if self.segmented.len() <= rank {
                    self.segmented.resize(rank + 1, 0);
                }
                self.segmented[rank] += count as u64;
            }
            at += count;
        }
        self.consume(sent);
        Ok(sent)
    }

    /// Puts the queued datagrams of each path and peer together where the
    /// first of them was queued, each group's in the order they were queued,
    /// so that a peer's run leaves in one segmented send: the endpoint takes
    /// its channels in turn, a datagram each, so a BSP total exchange
    /// queues datagrams to every peer interleaved (between 8 test-bed hosts,
    /// almost none went segmented). What one peer receives on a path keeps
    /// its order, and what was queued first (a probe, whose timestamp says
    /// when it left) still leaves first.
    fn group(&mut self) {
        let n = self.queued.len();
        if n < 3 {
            return;
        }
        let key = |q: &Queued| (q.path as u8, q.rank);
        // Each datagram's group named by the index of its first datagram:
        // sorted by key (stably), a group's first is its earliest.
        self.order.clear();
        self.order.extend(0..n);
        let queued = &self.queued;
        self.order.sort_by_key(|&i| key(&queued[i]));
        self.first.clear();
        self.first.resize(n, 0);
        for k in 0..n {
            let i = self.order[k];
            let same = k > 0 && key(&queued[self.order[k - 1]]) == key(&queued[i]);
            self.first[i] = if same { self.first[self.order[k - 1]] } else { i };
        }
        if self.first.is_sorted() {
            return;
        }
        // Stable: within a group, the order queued.
        self.order.clear();
        self.order.extend(0..n);
        let first = &self.first;
        self.order.sort_by_key(|&i| first[i]);
        self.moved.clear();
        self.moved.extend(self.queued.drain(..).map(Some));
        self.moved_buffers.clear();
        for &i in &self.order {
            self.queued.push(self.moved[i].take().expect("each index once"));
            self.moved_buffers.push(std::mem::take(&mut self.buffers[i]));
        }
        for (slot, buffer) in self.buffers.iter_mut().zip(self.moved_buffers.drain(..)) {
            *slot = buffer;
        }
    }

    /// Sends the first datagram, alone on its path, by `sendto(2)` from one
    /// buffer: a shared payload (of a datagram at most [`ALONE_MAX`] long)
    /// is copied between its header and MAC first. The kernel's
    /// `sendmmsg(2)` of one message costs more than the copy: a C loop
    /// sending 88 B over loopback took 3.50-3.54 us a datagram by `sendto`,
    /// 3.69-3.75 by `sendmmsg` of one iovec and 3.77-3.87 of three (what a
    /// small message's header, payload and MAC are), every datagram's way
    /// through the loopback included; this is the way of every answer in a
    /// ping-pong.
    fn send_alone(&mut self, socket: &UdpSocket) -> Result<usize, Refused> {
        let q = &self.queued[0];
        let buffer = &self.buffers[0];
        let datagram: &[u8] = match &q.shared {
            None => &buffer[..q.len],
            Some(payload) => {
                self.alone.clear();
                self.alone.extend_from_slice(&buffer[..HEADER_LEN]);
                for part in payload.parts() {
                    self.alone.extend_from_slice(part);
                }
                self.alone.extend_from_slice(&buffer[HEADER_LEN..OVERHEAD]);
                &self.alone
            }
        };
        crate::cycles::mark(crate::cycles::Point::Syscall);
        // SAFETY: the datagram and the address are live for the call and
        // of the lengths given.
        let n = unsafe {
            libc::sendto(
                socket.as_raw_fd(),
                datagram.as_ptr().cast(),
                datagram.len(),
                0,
                q.to.as_ptr().cast(),
                q.to.len(),
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::WouldBlock {
                self.consume(1);
            }
            return Err(Refused::Other(error));
        }
        self.consume(1);
        Ok(1)
    }

    fn consume(&mut self, n: usize) {
        self.queued.drain(..n);
        // The sent datagrams' buffers move to the back, ready for reuse.
        self.buffers.rotate_left(n);
    }
}

/// Why a send failed.
enum Refused {
    /// A segmented send, which the same datagrams may take one by one.
    Segmented,
    Other(io::Error),
}

/// Whether the kernel segments sends on `socket` (it knows `UDP_SEGMENT`).
fn segmentation_supported(socket: &UdpSocket) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and `len` is `value`'s size.
    let got = unsafe {
        libc::getsockopt(socket.as_raw_fd(), libc::SOL_UDP, libc::UDP_SEGMENT, (&raw mut value).cast(), &mut len)
    };
    got == 0
}

/// Turns `UDP_GRO` on or off; whether the kernel took it.
fn set_coalescing(socket: &UdpSocket, on: bool) -> bool {
    set_int(socket, libc::SOL_UDP, libc::UDP_GRO, libc::c_int::from(on))
}

/// Sets a socket option that takes an int; whether the kernel took it.
fn set_int(socket: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: `value` is live for the call and its size is given.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    set == 0
}

/// The MTU of the interface that has address `ip`, if it can be found.
pub fn interface_mtu(ip: IpAddr) -> Option<usize> {
    let name = interface_of(ip)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?.trim().parse().ok()
}

/// The name of the interface that has address `ip`.
pub(crate) fn interface_of(ip: IpAddr) -> Option<String> {
    if_addrs::get_if_addrs().ok()?.into_iter().find(|i| i.ip() == ip).map(|i| i.name)
}

/// The address of interface `name` in the family of `like`, if the
/// interface exists, has one and is not down.
fn address_of(name: &str, like: IpAddr) -> Result<IpAddr, String> {
    use if_addrs::IfOperStatus;
    let all = if_addrs::get_if_addrs().map_err(|e| format!("the interfaces cannot be listed: {e}"))?;
    let of: Vec<_> = all.into_iter().filter(|i| i.name == name).collect();
    let Some(first) = of.first() else {
        return Err(format!("interface {name} has no address (or does not exist)"));
    };
    if matches!(first.oper_status, IfOperStatus::Down | IfOperStatus::LowerLayerDown | IfOperStatus::NotPresent) {
        return Err(format!("interface {name} is down"));
    }
    of.iter()
        .find(|i| i.ip().is_ipv4() == like.is_ipv4() && !i.is_link_local())
        .map(|i| i.ip())
        .ok_or_else(|| format!("interface {name} has no {} address", if like.is_ipv4() { "IPv4" } else { "IPv6" }))
}

/// Marks the job's control connection (the launcher's end and the
/// rank's) like the premium path: heartbeats are the control plane, and a
/// flood that fills the ordinary class must not delay them. Without the
/// mark, the launcher's acknowledgements crossing a congested port were
/// lost often enough that TCP's backed-off retransmissions held a rank's
/// heartbeats for over 3 s, and the launcher stopped a healthy job as
/// hung. Best effort: a mark the system refuses leaves the connection
/// unmarked.
pub fn mark_control(stream: &std::net::TcpStream, options: &SocketOptions) {
    if let Ok(addr) = stream.local_addr() {
        let _ = mark(stream, addr.ip(), options);
    }
}

/// Marks `socket`'s packets as premium: DSCP (for the network) and
/// `SO_PRIORITY` (the host's own queues first); an error says which was
/// refused.
fn mark<S: std::os::fd::AsFd + AsRawFd>(socket: &S, ip: IpAddr, options: &SocketOptions) -> Result<(), String> {
    let premium_ref = socket2::SockRef::from(socket);
    let tos = (options.premium_dscp as u32) << 2;
    let marked = match ip {
        IpAddr::V4(_) => premium_ref.set_tos(tos),
        IpAddr::V6(_) => premium_ref.set_tclass_v6(tos),
    };
    marked.map_err(|e| format!("DSCP {}: {e}", options.premium_dscp))?;
    let priority = options.premium_priority as libc::c_int;
    if !set_int(socket, libc::SOL_SOCKET, libc::SO_PRIORITY, priority) {
        return Err(format!("SO_PRIORITY {priority}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

fn open(ip: IpAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    let domain = if ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    // Larger kernel buffers absorb bursts; failures only mean smaller ones.
    let _ = socket.set_recv_buffer_size(options.buffer_bytes);
    let _ = socket.set_send_buffer_size(options.buffer_bytes);
    socket.set_nonblocking(true)?;
    // Never SO_REUSEADDR nor SO_REUSEPORT: no other socket may share the
    // port and take datagrams meant for it (on loopback the MAC covers
    // only headers, see bulkwire_wire::Coverage::Header).
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nobody_else_can_bind_a_path_socket_s_port() {
        let sockets = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        let (ordinary, premium) = sockets.addrs().unwrap();
        for addr in [ordinary, premium] {
            for reuse in [false, true] {
                let other = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
                other.set_reuse_address(reuse).unwrap();
                other.set_reuse_port(reuse).unwrap();
                let err = other.bind(&addr.into()).expect_err("a second socket bound the same port");
                assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{addr} reuse {reuse}: {err}");
            }
        }
    }

    #[test]
    fn the_control_connection_is_marked_at_both_ends() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let rank = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (launcher, _) = listener.accept().unwrap();
        let options = SocketOptions { premium_dscp: 34, ..SocketOptions::default() };
        for end in [&rank, &launcher] {
            assert_eq!(socket2::SockRef::from(end).tos().unwrap(), 0);
            mark_control(end, &options);
            assert_eq!(socket2::SockRef::from(end).tos().unwrap(), 34 << 2);
        }
    }

    #[test]
    fn premium_socket_is_marked() {
        let s = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        assert_eq!(socket2::SockRef::from(&s.premium).tos().unwrap(), 46 << 2);
        assert_eq!(socket2::SockRef::from(&s.ordinary).tos().unwrap(), 0);
        let (o, p) = s.addrs().unwrap();
        assert!(o.ip().is_loopback() && p.ip().is_loopback() && o.port() != p.port());
    }

    #[test]
    fn a_batch_reads_several_datagrams_at_once() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = RecvBatch::new(4);
        for i in 0..6u8 {
            tx.send_to(&vec![i; 100 + i as usize], rx.local_addr().unwrap()).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 4);
        assert_eq!(batch.datagram(3), &[3u8; 103][..]);
        assert_eq!(batch.recv(&rx).unwrap(), 2);
        assert_eq!(batch.datagram(0), &[4u8; 104][..]);
        assert_eq!(batch.datagram(1), &[5u8; 105][..]);
        // After a read that found nothing, one datagram at a time (the
        // turns of a spinning wait), then the whole batch again.
        assert_eq!(batch.recv(&rx).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        for i in 0..3u8 {
            tx.send_to(&[i; 10], rx.local_addr().unwrap()).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        assert_eq!(batch.recv(&rx).unwrap(), 2);
        assert_eq!((batch.datagram(0), batch.datagram(1)), (&[1u8; 10][..], &[2u8; 10][..]));
        assert_eq!(batch.recv(&rx).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        tx.send_to(&[5u8; 105], rx.local_addr().unwrap()).unwrap();
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        // A buffer taken away with its datagram is replaced for the next read.
        let taken = std::mem::take(batch.datagram_mut(0));
        assert_eq!(taken, vec![5u8; 105]);
        tx.send_to(&[6u8; 60_000], rx.local_addr().unwrap()).unwrap();
        tx.send_to(&[7u8; 7], rx.local_addr().unwrap()).unwrap();
        assert_eq!(batch.recv(&rx).unwrap(), 2);
        assert_eq!((batch.datagram(0), batch.datagram(1)), (&[6u8; 60_000][..], &[7u8; 7][..]));
    }

    #[test]
    fn a_buffer_given_back_takes_a_later_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let mut batch = RecvBatch::new(2);
        tx.send_to(&[1u8; 20_000], to).unwrap();
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        let taken = std::mem::take(batch.datagram_mut(0));
        let (at, room) = (taken.as_ptr(), taken.capacity());
        // Too small or too large for the pool: freed, not kept.
        batch.recycle(Vec::with_capacity(100));
        batch.recycle(Vec::with_capacity(4 * DATAGRAM_ROOM));
        batch.recycle(taken);
        assert_eq!(batch.spare.len(), 1);
        tx.send_to(&[2u8; 300], to).unwrap();
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        assert_eq!(batch.datagram(0), &[2u8; 300][..]);
        let reused = batch.datagram_mut(0);
        assert_eq!((reused.as_ptr(), reused.capacity()), (at, room), "read into the buffer given back");
        assert_eq!(batch.made(), 0, "no buffer made: the one given back took the datagram");
        // At most two batches' worth wait in the pool.
        for _ in 0..10 {
            batch.recycle(Vec::with_capacity(DATAGRAM_ROOM));
        }
        assert_eq!(batch.spare.len(), 4);
    }

    #[test]
    fn buffers_given_back_together_are_all_kept_until_fewer_come_back() {
        let mut batch = RecvBatch::new(2);
        let buffers = |n: usize| (0..n).map(|_| Vec::with_capacity(DATAGRAM_ROOM)).collect::<Vec<_>>();
        batch.recycle_many(buffers(50).into_iter());
        assert_eq!(batch.spare.len(), 50, "all of a large superstep's buffers kept for the next");
        // One at a time, still up to that many.
        batch.recycle(Vec::with_capacity(DATAGRAM_ROOM));
        assert_eq!(batch.spare.len(), 50);
        // Fewer given back at once: the pool shrinks to that many, the
        // ones just given back.
        let ten = buffers(10);
        let given: Vec<*const u8> = ten.iter().map(|b| b.as_ptr()).collect();
        batch.recycle_many(ten.into_iter());
        assert_eq!(batch.spare.len(), 10);
        assert_eq!(batch.spare.iter().map(|b| b.as_ptr()).collect::<Vec<_>>(), given, "the older ones freed");
        batch.recycle_many(buffers(1).into_iter());
        assert_eq!(batch.spare.len(), 4, "never below two batches' worth");
        // Buffers too small or too large are not kept, nor counted.
        batch.recycle_many(vec![Vec::with_capacity(100), Vec::with_capacity(4 * DATAGRAM_ROOM)].into_iter());
        assert_eq!(batch.spare.len(), 4);
    }

    #[test]
    fn a_pool_kept_at_least_so_large_stays_so_large() {
        let mut batch = RecvBatch::new(2);
        let buffers = |n: usize| (0..n).map(|_| Vec::with_capacity(DATAGRAM_ROOM)).collect::<Vec<_>>();
        batch.keep_at_least(20);
        for b in buffers(30) {
            batch.recycle(b);
        }
        assert_eq!(batch.spare.len(), 20, "one at a time, up to the floor");
        // A smaller give-back all at once does not shrink it below.
        batch.recycle_many(buffers(3).into_iter());
        assert_eq!(batch.spare.len(), 20);
        // A larger one keeps all, then falls back to the floor.
        batch.recycle_many(buffers(40).into_iter());
        assert_eq!(batch.spare.len(), 40);
        batch.recycle_many(buffers(1).into_iter());
        assert_eq!(batch.spare.len(), 20);
        // A lower floor asked later does not lower it.
        batch.keep_at_least(5);
        batch.recycle_many(buffers(1).into_iter());
        assert_eq!(batch.spare.len(), 20);
    }

    /// A process's sockets and a plain socket that receives what they send.
    fn sockets_and_receiver() -> (PathSockets, UdpSocket, SocketAddr) {
        let sockets = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        let rx = receiver();
        let to = rx.local_addr().unwrap();
        (sockets, rx, to)
    }

    /// A socket on loopback whose reads give up after 5 s.
    fn receiver() -> UdpSocket {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        rx
    }

    /// A batch of 16 datagrams of up to 1,000 B that sends runs segmented.
    fn segmenting_batch() -> SendBatch {
        let mut batch = SendBatch::new(16, 1000);
        batch.set_segmentation(true);
        batch
    }

    /// Queues datagram `i` of `lens` to each of `peers` in turn on the
    /// ordinary path, as the endpoint does with a channel to each
    /// ([`to_peer`]).
    fn queue_in_turn(batch: &mut SendBatch, lens: &[usize], peers: &[(u32, SocketAddr)]) {
        for (i, &len) in lens.iter().enumerate() {
            for &(rank, at) in peers {
                batch.next_buffer()[..len].copy_from_slice(&to_peer(i, len, rank));
                batch.push(Path::Ordinary, rank, at, len, None);
            }
        }
    }

    /// [`datagram`] `i` to `rank`, which its first byte names.
    fn to_peer(i: usize, len: usize, rank: u32) -> Vec<u8> {
        let mut d = datagram(i, len);
        d[0] = rank as u8;
        d
    }

    #[test]
    fn a_batch_sends_runs_of_one_path_in_order() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = SendBatch::new(4, 1000);
        for (i, path) in [Path::Ordinary, Path::Ordinary, Path::Premium, Path::Ordinary].into_iter().enumerate() {
            batch.next_buffer()[..10].fill(i as u8);
            batch.push(path, 1, to, 10, None);
        }
        assert!(batch.is_full());
        assert_eq!(batch.send(&sockets).unwrap(), 2);
        assert_eq!(batch.send(&sockets).unwrap(), 1);
        assert_eq!(batch.send(&sockets).unwrap(), 1);
        assert!(batch.is_empty());
        let (o, p) = sockets.addrs().unwrap();
        let mut buf = [0u8; 100];
        for (i, from) in [o, o, p, o].into_iter().enumerate() {
            let (n, sender) = rx.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], sender), (&[i as u8; 10][..], from));
        }
    }

    /// Queues datagram `i` of `lens` (see [`datagram`]) to `to`.
    fn queue(batch: &mut SendBatch, lens: &[usize], to: SocketAddr) {
        for (i, &len) in lens.iter().enumerate() {
            batch.next_buffer()[..len].copy_from_slice(&datagram(i, len));
            batch.push(Path::Ordinary, 1, to, len, None);
        }
    }

    /// The `i`th test datagram, `len` bytes of `i`; one long enough for a
    /// header names its length where a header does.
    fn datagram(i: usize, len: usize) -> Vec<u8> {
        let mut d = vec![i as u8; len];
        if len >= HEADER_LEN + MAC_LEN {
            d[6..8].copy_from_slice(&((len - HEADER_LEN - MAC_LEN) as u16).to_be_bytes());
        }
        d
    }

    #[test]
    fn runs_of_equal_datagrams_leave_in_segmented_sends_and_arrive_as_sent() {
        let (sockets, rx, to) = sockets_and_receiver();
        assert!(sockets.segmentation, "this kernel has UDP GSO (Linux 4.18 and later)");
        let mut batch = segmenting_batch();
        // A run of five and a shorter last one; a datagram after a short
        // one starts a run of its own; another destination too.
        let lens = [300, 300, 300, 300, 300, 40, 300, 300];
        queue(&mut batch, &lens, to);
        let other = receiver();
        batch.next_buffer()[..20].fill(9);
        batch.push(Path::Ordinary, 2, other.local_addr().unwrap(), 20, None);
        assert_eq!(batch.send(&sockets).unwrap(), 9);
        assert!(batch.is_empty());
        assert_eq!((batch.segmented(1), batch.segmented(2)), (8, 0));
        let mut buf = [0u8; 2000];
        for (i, &len) in lens.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &datagram(i, len)[..], "datagram {i}, whole and in order");
        }
        let n = other.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[9; 20]);
    }

    #[test]
    fn datagrams_to_peers_in_turn_leave_in_a_segmented_send_per_peer() {
        let (sockets, rx, to) = sockets_and_receiver();
        let other = receiver();
        let mut batch = segmenting_batch();
        // One datagram to each peer in turn, a shorter last one to each.
        let lens = [300, 300, 300, 300, 100];
        queue_in_turn(&mut batch, &lens, &[(1, to), (2, other.local_addr().unwrap())]);
        // A premium datagram to the first peer after them goes on its own.
        batch.next_buffer()[..20].fill(7);
        batch.push(Path::Premium, 1, to, 20, None);
        let mut sent = 0;
        while !batch.is_empty() {
            sent += batch.send(&sockets).unwrap();
        }
        assert_eq!(sent, 11);
        assert_eq!((batch.segmented(1), batch.segmented(2)), (5, 5), "a run to each peer");
        let mut buf = [0u8; 2000];
        for (rank, socket) in [(1, &rx), (2, &other)] {
            for (i, &len) in lens.iter().enumerate() {
                let n = socket.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &to_peer(i, len, rank)[..], "datagram {i} to {rank}, whole and in order");
            }
        }
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[7; 20]);
    }

    #[test]
    fn a_datagram_queued_before_the_runs_leaves_before_them() {
        let (sockets, rx, to) = sockets_and_receiver();
        let other = receiver();
        let mut batch = segmenting_batch();
        // A probe on the premium path first (its timestamp says when it
        // left), then data to two peers in turn on the ordinary path.
        batch.next_buffer()[..20].fill(7);
        batch.push(Path::Premium, 1, to, 20, None);
        queue_in_turn(&mut batch, &[300; 3], &[(2, other.local_addr().unwrap()), (1, to)]);
        assert_eq!(batch.send(&sockets).unwrap(), 1, "the probe leaves first, on its own");
        assert_eq!(batch.send(&sockets).unwrap(), 6);
        assert_eq!((batch.segmented(1), batch.segmented(2)), (3, 3));
        let mut buf = [0u8; 2000];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[7; 20], "the probe arrived first");
        for i in 0..3 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &to_peer(i, 300, 1)[..]);
        }
    }

    #[test]
    fn a_coalesced_read_is_split_into_the_datagrams_sent() {
        let (sockets, _, _) = sockets_and_receiver();
        let receiver = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        assert!(receiver.coalescing, "this kernel has UDP GRO (Linux 5.0 and later)");
        let mut batch = SendBatch::new(16, 1000);
        batch.set_segmentation(true);
        let lens = [200, 200, 200, 200, 50];
        let sent: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &len)| datagram(i, len)).collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // Read by recvmmsg, which brings the segment size, and one at a
        // time by recv, where the first datagram's header names it.
        for room in [4, 1] {
            queue(&mut batch, &lens, receiver.ordinary.local_addr().unwrap());
            assert_eq!(batch.send(&sockets).unwrap(), 5);
            let mut reads = RecvBatch::new(room);
            reads.set_coalescing(true);
            let mut got = Vec::new();
            let mut buffers = 0;
            while got.len() < lens.len() && std::time::Instant::now() < deadline {
                let Ok(n) = reads.recv(&receiver.ordinary) else { continue };
                for i in 0..n {
                    buffers += 1;
                    match reads.segment_size(i) {
                        Some(size) => got.extend(reads.datagram(i).chunks(size).map(<[u8]>::to_vec)),
                        None => got.push(reads.datagram(i).to_vec()),
                    }
                }
            }
            assert_eq!(got, sent, "read {room} at a time");
            assert_eq!(buffers, 1, "the run came in one read, as one buffer");
        }
        // Without coalescing the same run comes datagram by datagram.
        let mut plain = RecvBatch::new(8);
        let (_, rx, to) = sockets_and_receiver();
        queue(&mut batch, &lens, to);
        assert_eq!(batch.send(&sockets).unwrap(), 5);
        let mut got = Vec::new();
        while got.len() < lens.len() && std::time::Instant::now() < deadline {
            let Ok(n) = plain.recv(&rx) else { continue };
            for i in 0..n {
                assert_eq!(plain.segment_size(i), None);
                got.push(plain.datagram(i).to_vec());
            }
        }
        assert_eq!(got, sent);
    }

    #[test]
    fn a_stamped_read_says_how_long_its_datagrams_waited() {
        let (sockets, _, _) = sockets_and_receiver();
        let receiver = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        let to = receiver.ordinary.local_addr().unwrap();
        let mut batch = SendBatch::new(16, 1000);
        let wait = Duration::from_millis(30);
        let read = |reads: &mut RecvBatch| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                match reads.recv(&receiver.ordinary) {
                    Ok(n) => return n,
                    Err(_) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                    Err(e) => panic!("nothing came: {e}"),
                }
            }
        };
        // Unstamped: no age.
        let mut reads = RecvBatch::new(4);
        reads.set_coalescing(receiver.coalescing);
        queue(&mut batch, &[100], to);
        batch.send(&sockets).unwrap();
        assert_eq!(read(&mut reads), 1);
        assert_eq!(reads.age(0), None);
        // Stamped: a datagram left waiting 30 ms is read as that old, never
        // older than it is. The kernel turns stamping on for the whole
        // system a little after the first socket asks (deferred work);
        // until then a datagram is stamped as it is read (age about zero).
        assert!(receiver.stamp_arrivals(), "the kernel stamps receive times");
        reads.set_stamping(true);
        let mut ages = Vec::new();
        while ages.len() < 20 && ages.last().is_none_or(|&a| a < wait) {
            let sent = std::time::Instant::now();
            queue(&mut batch, &[100], to);
            batch.send(&sockets).unwrap();
            std::thread::sleep(wait);
            assert_eq!(read(&mut reads), 1);
            let age = reads.age(0).expect("stamped");
            // The age is on the system's clock, which time keeping may set
            // by a little meanwhile (one run read an age of 30.6 ms where
            // less had passed by the monotonic clock): within 2 ms.
            let elapsed = sent.elapsed();
            assert!(age <= elapsed + Duration::from_millis(2), "{age:?} older than the datagram ({elapsed:?})");
            assert_eq!(reads.datagram(0), &datagram(0, 100)[..]);
            ages.push(age);
        }
        assert!(ages.last().is_some_and(|&a| a >= wait), "never stamped on arrival: {ages:?}");
        // A run of datagrams coalesced in one buffer shares one stamp.
        batch.set_segmentation(receiver.coalescing);
        queue(&mut batch, &[200, 200, 200], to);
        batch.send(&sockets).unwrap();
        let n = read(&mut reads);
        let age = reads.age(0).expect("stamped");
        assert!(age < wait, "read as soon as it came: {age:?}");
        assert!((0..n).all(|i| reads.age(i).is_some()));
    }

    #[test]
    fn a_segmented_send_the_kernel_refuses_goes_datagram_by_datagram() {
        let (sockets, rx, to) = sockets_and_receiver();
        // The kernel refuses to segment for a socket that sends without
        // UDP checksums.
        assert!(set_int(&sockets.ordinary, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1));
        let mut batch = SendBatch::new(16, 1000);
        batch.set_segmentation(true);
        let lens = [100, 100, 100];
        queue(&mut batch, &lens, to);
        assert_eq!(batch.send(&sockets).unwrap(), 3);
        assert!(!batch.segmentation, "segmentation turned itself off");
        assert_eq!(batch.segmented(1), 0);
        let mut buf = [0u8; 2000];
        for (i, &len) in lens.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &datagram(i, len)[..]);
        }
    }

    #[test]
    fn a_shared_payload_goes_between_header_and_mac() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = SendBatch::new(2, 1000);
        let payload = SharedPayload::whole(vec![7; 300]);
        let head = batch.next_buffer();
        head[..HEADER_LEN].fill(1);
        head[HEADER_LEN..OVERHEAD].fill(2);
        batch.push(Path::Ordinary, 1, to, OVERHEAD, Some(payload.clone()));
        batch.next_buffer()[..5].fill(3);
        batch.push(Path::Ordinary, 1, to, 5, None);
        assert_eq!(payload.holders(), 2);
        assert_eq!(batch.send(&sockets).unwrap(), 2);
        assert_eq!(payload.holders(), 1, "the batch let go of the payload it sent");
        let mut buf = [0u8; 1000];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], [vec![1; HEADER_LEN], vec![7; 300], vec![2; MAC_LEN]].concat());
        assert_eq!(rx.recv(&mut buf).unwrap(), 5);
    }

    #[test]
    fn a_segmented_run_of_shared_payloads_arrives_as_sent() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = segmenting_batch();
        // Shared payloads of 300 B, one datagram in its own buffer of the
        // same length among them, and a shorter last one: one segmented
        // send, each datagram from where its pieces lie.
        let payloads: Vec<SharedPayload> =
            (0..5).map(|i| SharedPayload::whole(vec![10 + i as u8; if i == 4 { 100 } else { 300 }])).collect();
        let mut sent = Vec::new();
        for (i, payload) in payloads.iter().enumerate() {
            if i == 2 {
                let len = OVERHEAD + 300;
                batch.next_buffer()[..len].fill(9);
                batch.push(Path::Ordinary, 1, to, len, None);
                sent.push(vec![9; len]);
            }
            let head = batch.next_buffer();
            head[..HEADER_LEN].fill(1 + i as u8);
            head[HEADER_LEN..OVERHEAD].fill(2);
            batch.push(Path::Ordinary, 1, to, OVERHEAD, Some(payload.clone()));
            let [_, bytes, _] = payload.parts();
            sent.push([vec![1 + i as u8; HEADER_LEN], bytes.to_vec(), vec![2; MAC_LEN]].concat());
        }
        assert_eq!(batch.send(&sockets).unwrap(), 6);
        assert_eq!(batch.segmented(1), 6, "one segmented send");
        assert!(payloads.iter().all(|p| p.holders() == 1), "the batch let go of the payloads it sent");
        let mut buf = [0u8; 2000];
        for (i, datagram) in sent.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &datagram[..], "datagram {i}, whole and in order");
        }
    }

    #[test]
    fn a_lone_datagram_arrives_whole_whether_copied_together_or_not() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = SendBatch::new(2, 64_000);
        let (o, p) = sockets.addrs().unwrap();
        let mut buf = vec![0u8; 65_536];
        // Below ALONE_MAX copied together for sendto(2), above it sent in
        // parts; on either path, alone in the batch.
        for (len, path, from) in
            [(9, Path::Premium, p), (ALONE_MAX - OVERHEAD, Path::Ordinary, o), (5_000, Path::Ordinary, o)]
        {
            let payload = SharedPayload::whole((0..len).map(|i| i as u8).collect());
            let head = batch.next_buffer();
            head[..HEADER_LEN].fill(1);
            head[HEADER_LEN..OVERHEAD].fill(2);
            batch.push(path, 1, to, OVERHEAD, Some(payload.clone()));
            assert_eq!(batch.send(&sockets).unwrap(), 1);
            assert!(batch.is_empty());
            assert_eq!(payload.holders(), 1, "the batch let go of the payload it sent");
            let (n, sender) = rx.recv_from(&mut buf).unwrap();
            let sent = [vec![1; HEADER_LEN], (0..len).map(|i| i as u8).collect(), vec![2; MAC_LEN]].concat();
            assert_eq!((&buf[..n], sender), (&sent[..], from), "{len} B");
        }
        // Not shared, alone: from its buffer, at any length.
        for len in [40, 5_000] {
            batch.next_buffer()[..len].fill(4);
            batch.push(Path::Ordinary, 1, to, len, None);
            assert_eq!(batch.send(&sockets).unwrap(), 1);
            assert_eq!(rx.recv(&mut buf).unwrap(), len);
            assert!(buf[..len].iter().all(|&b| b == 4), "{len} B");
        }
    }

    /// Datagrams of an Ethernet frame sent as one segmented send and read
    /// as one coalesced run into the places of a message in reassembly
    /// (`RecvBatch::recv_landing` of a run's landing): each datagram of
    /// the run lies in its slot's pieces; led by one out of turn, the run
    /// is put together as it was sent.
    #[test]
    fn a_run_is_read_into_its_slots_or_put_together_as_sent() {
        use bulkwire_proto::{Config, Endpoint, Landed, Time};
        use bulkwire_wire::JobKey;
        const FRAME: usize = 1_472;
        let ip = "127.0.0.1".parse().unwrap();
        let (tx_sockets, rx_sockets) = (
            PathSockets::bind(ip, &SocketOptions::default()).unwrap(),
            PathSockets::bind(ip, &SocketOptions::default()).unwrap(),
        );
        if !(tx_sockets.segmentation && rx_sockets.coalescing) {
            eprintln!("no UDP GSO and GRO here: nothing to test");
            return;
        }
        let to = rx_sockets.addrs().unwrap().0;
        let config = |rank| {
            let mut c = Config::new(7, JobKey::new([3; 32]), rank, 2);
            c.max_datagram = FRAME;
            c
        };
        let (mut a, mut b) = (Endpoint::new(config(0)).unwrap(), Endpoint::new(config(1)).unwrap());
        b.read_runs(Some(RecvBatch::ROOM));
        let message: Vec<u8> = (0..100_000u32).map(|i| ((i * 7) ^ (i >> 9)) as u8).collect();
        a.send(1, 0, &message).unwrap();
        let mut buf = vec![0; 65_536];
        let mut sent = Vec::new();
        while let Some(t) = a.poll_transmit(Time::ZERO, &mut buf) {
            sent.push(buf[..t.len].to_vec());
        }
        assert!(sent.len() > 60 && sent[..sent.len() - 1].iter().all(|d| d.len() == FRAME));
        // The first opens the message: the rest have places.
        b.handle_datagram(Time::ZERO, &sent[0]);
        let mut rx = RecvBatch::new(RecvBatch::MAX);
        rx.set_coalescing(true);
        let mut tx = SendBatch::new(64, FRAME);
        tx.set_segmentation(true);
        let mut send_run = |run: &[Vec<u8>]| {
            for d in run {
                tx.next_buffer()[..d.len()].copy_from_slice(d);
                tx.push(Path::Ordinary, 1, to, d.len(), None);
            }
            while !tx.is_empty() {
                tx.send(&tx_sockets).unwrap();
            }
            // On loopback, at once.
            std::thread::sleep(Duration::from_millis(20));
        };
        let socket = rx_sockets.socket(Path::Ordinary);
        // Led by a datagram out of turn (the first again): none in place,
        // and the run put together as it was sent.
        let run = [&sent[..1], &sent[1..21]].concat();
        send_run(&run);
        let landing = b.landing(RecvBatch::MAX).expect("a landing for the message");
        assert!(landing.run() && landing.slots() >= 21, "{landing:?}");
        // SAFETY: the places are lent until the next call on `b` but
        // handle_landed.
        assert_eq!(unsafe { rx.recv_landing(socket, &landing) }.unwrap(), 1);
        assert_eq!(rx.segment_size(0), Some(FRAME), "coalesced");
        let (head, data, tail) = rx.landed(0, &landing).unwrap();
        assert_eq!(unsafe { b.handle_landed(Time::ZERO, &landing, 0, head, data, tail) }, Landed::Elsewhere);
        // SAFETY: as above.
        assert_eq!(unsafe { rx.gather_from(0, &landing) }, 0);
        assert!(rx.datagram_mut(0)[..] == run.concat()[..], "the run as it was sent");
        for d in rx.datagram_mut(0).chunks(FRAME) {
            b.handle_datagram(Time::ZERO, d);
        }
        // The next twenty in turn, then two more: the twenty in place, the
        // rest of the run put together from the third of those on.
        let run = &sent[21..41];
        send_run(run);
        let landing = b.landing(RecvBatch::MAX).expect("a landing for the message");
        assert_eq!(unsafe { rx.recv_landing(socket, &landing) }.unwrap(), 1);
        for (j, sent) in run.iter().enumerate() {
            let (head, data, tail) = rx.landed(j, &landing).unwrap();
            let (place, _) = landing.region(j);
            // SAFETY: the read wrote `data` bytes there.
            let region = unsafe { std::slice::from_raw_parts(place.cast_const(), data) };
            assert!([head, region, tail].concat() == *sent, "datagram {j} in its slot's pieces");
            assert_eq!(unsafe { b.handle_landed(Time::ZERO, &landing, j, head, data, tail) }, Landed::InPlace);
        }
        assert!(rx.landed(run.len(), &landing).is_none(), "past the run");
        assert_eq!(unsafe { rx.gather_from(run.len(), &landing) }, 1, "nothing left");
        let run = &sent[41..46];
        send_run(&[&sent[41..43], &sent[41..46]].concat());
        let landing = b.landing(RecvBatch::MAX).expect("a landing for the message");
        assert_eq!(unsafe { rx.recv_landing(socket, &landing) }.unwrap(), 1);
        for j in 0..2 {
            let (head, data, tail) = rx.landed(j, &landing).unwrap();
            assert_eq!(unsafe { b.handle_landed(Time::ZERO, &landing, j, head, data, tail) }, Landed::InPlace);
        }
        let (head, data, tail) = rx.landed(2, &landing).unwrap();
        assert_eq!(unsafe { b.handle_landed(Time::ZERO, &landing, 2, head, data, tail) }, Landed::Elsewhere);
        assert_eq!(unsafe { rx.gather_from(2, &landing) }, 0);
        assert!(rx.datagram_mut(0)[..] == run.concat()[..], "the run from its third datagram on");
        // An empty datagram (a wake-up) stays one.
        tx_sockets.socket(Path::Ordinary).send_to(&[], to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let landing = b.landing(RecvBatch::MAX).expect("a landing for the message");
        assert_eq!(unsafe { rx.recv_landing(socket, &landing) }.unwrap(), 1);
        assert!(rx.landed(0, &landing).is_none());
        assert_eq!(unsafe { rx.gather_from(0, &landing) }, 0);
        assert!(rx.datagram_mut(0).is_empty());
    }

    #[test]
    fn the_loopback_interface_has_an_mtu() {
        assert!(interface_mtu("127.0.0.1".parse().unwrap()).is_some_and(|mtu| mtu >= 1280));
        assert_eq!(interface_mtu("192.0.2.77".parse().unwrap()), None);
    }
}
