//! One UDP socket per path class.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use bulkwire_proto::{Path, SharedPayload};
use bulkwire_wire::{HEADER_LEN, MAC_LEN, OVERHEAD};
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
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions { premium_dscp: 46, premium_priority: 6, buffer_bytes: 4 << 20, premium_iface: None }
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
        Ok(PathSockets { ordinary, premium, premium_unavailable: missing.or(unmarked), premium_elsewhere })
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
/// when there is one.
#[derive(Debug)]
pub struct RecvBatch {
    /// Each as long as the datagram last read into it.
    buffers: Vec<Vec<u8>>,
    /// Buffers given back, the last one first: it is the likeliest still
    /// in the cache (measured: see `RecvBatch::recycle`).
    spare: Vec<Vec<u8>>,
}

/// Room for any datagram UDP allows.
const DATAGRAM_ROOM: usize = 65_536;

impl RecvBatch {
    /// Most datagrams one read takes.
    pub const MAX: usize = 16;

    /// Room for `count` (at most [`RecvBatch::MAX`]) datagrams of any size UDP allows.
    pub fn new(count: usize) -> RecvBatch {
        let count = count.clamp(1, Self::MAX);
        RecvBatch { buffers: (0..count).map(|_| Vec::with_capacity(DATAGRAM_ROOM)).collect(), spare: Vec::new() }
    }

    /// Takes back a buffer that held a datagram taken away, once its
    /// contents are no longer needed, to read a later datagram into. Only
    /// buffers with room for any datagram (and not more than twice that)
    /// are kept, at most two batches' worth; others are freed.
    ///
    /// A buffer just read from is likely still in the cache, unlike memory
    /// fresh from the allocator: 8 processes on 2 cores exchanging 16 KiB
    /// per pair took 0.85x as long with buffers given back after their
    /// puts landed (median of ten alternating pairs; docs/BENCHMARKS.md).
    pub fn recycle(&mut self, mut buffer: Vec<u8>) {
        let room = buffer.capacity();
        if (DATAGRAM_ROOM..=2 * DATAGRAM_ROOM).contains(&room) && self.spare.len() < 2 * self.buffers.len() {
            buffer.clear();
            self.spare.push(buffer);
        }
    }

    pub fn capacity(&self) -> usize {
        self.buffers.len()
    }

    /// Reads what `socket` holds, up to the capacity, without waiting;
    /// returns how many datagrams were read (an error when none was).
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        // On the stack: this runs on every turn of a spinning wait.
        let mut iovecs = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; Self::MAX];
        // SAFETY: an all-zero mmsghdr is a valid empty header.
        let mut headers: [libc::mmsghdr; Self::MAX] = unsafe { std::mem::zeroed() };
        let count = self.buffers.len();
        for ((h, iov), b) in headers.iter_mut().zip(iovecs.iter_mut()).zip(self.buffers.iter_mut()) {
            b.clear();
            if b.capacity() < DATAGRAM_ROOM {
                // Taken away with its datagram (or new): one given back, or
                // a fresh one, not cleared, since the kernel writes it.
                *b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(DATAGRAM_ROOM));
            }
            *iov = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.capacity() };
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every header points to one iovec over a live buffer's
        // capacity; the kernel writes at most that much into each.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        for (b, h) in self.buffers.iter_mut().zip(&headers[..n]) {
            // SAFETY: the kernel wrote msg_len bytes (at most the capacity)
            // at the start of this buffer.
            unsafe { b.set_len((h.msg_len as usize).min(b.capacity())) };
        }
        Ok(n)
    }

    /// The `i`th datagram of the last read.
    #[cfg(test)]
    fn datagram(&self, i: usize) -> &[u8] {
        &self.buffers[i]
    }

    /// The `i`th datagram of the last read, in a buffer the caller may take.
    pub fn datagram_mut(&mut self, i: usize) -> &mut Vec<u8> {
        &mut self.buffers[i]
    }
}

/// Datagrams waiting to go out, sent with one sendmmsg(2) per run of the
/// same path: a burst costs one system call, not one per datagram.
#[derive(Debug)]
pub struct SendBatch {
    buffers: Vec<Vec<u8>>,
    /// The datagram in each of the first buffers.
    queued: Vec<Queued>,
}

#[derive(Debug)]
struct Queued {
    path: Path,
    to: socket2::SockAddr,
    /// Bytes written in the buffer.
    len: usize,
    /// A payload that goes between the buffer's header and its MAC
    /// ([`bulkwire_proto::Endpoint::poll_transmit_shared`]), read by the
    /// kernel where it lies instead of first copied into the buffer.
    shared: Option<SharedPayload>,
}

impl SendBatch {
    /// Most datagrams one send takes.
    pub const MAX: usize = 16;

    /// Room for `count` (at most [`SendBatch::MAX`]) datagrams of `max_datagram` bytes.
    pub fn new(count: usize, max_datagram: usize) -> SendBatch {
        let count = count.clamp(1, Self::MAX);
        SendBatch { buffers: vec![vec![0; max_datagram]; count], queued: Vec::with_capacity(count) }
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
    pub fn push(&mut self, path: Path, to: SocketAddr, len: usize, shared: Option<SharedPayload>) {
        debug_assert!(shared.is_none() || len == OVERHEAD);
        self.queued.push(Queued { path, to: to.into(), len, shared });
    }

    /// Sends the datagrams at the front that share a path. Returns how many
    /// went; `WouldBlock` when the socket took none. On any other error the
    /// first datagram is dropped (the protocol recovers it) and the error
    /// returned.
    pub fn send(&mut self, sockets: &PathSockets) -> io::Result<usize> {
        let Some(path) = self.queued.first().map(|q| q.path) else { return Ok(0) };
        let run = self.queued.iter().take_while(|q| q.path == path).count();
        // On the stack: this runs for every message sent. Up to three parts
        // a datagram: header, shared payload, MAC.
        let mut iovecs = [[libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 3]; Self::MAX];
        // SAFETY: an all-zero mmsghdr is a valid empty header.
        let mut headers: [libc::mmsghdr; Self::MAX] = unsafe { std::mem::zeroed() };
        for (i, (q, iov)) in self.queued[..run].iter().zip(iovecs.iter_mut()).enumerate() {
            let buf = self.buffers[i].as_mut_ptr();
            let parts = match &q.shared {
                None => {
                    iov[0] = libc::iovec { iov_base: buf.cast(), iov_len: q.len };
                    1
                }
                Some(payload) => {
                    iov[0] = libc::iovec { iov_base: buf.cast(), iov_len: HEADER_LEN };
                    // The kernel only reads through this pointer.
                    iov[1] = libc::iovec { iov_base: payload.as_ptr() as *mut libc::c_void, iov_len: payload.len() };
                    // SAFETY: the MAC lies within the buffer, behind the header.
                    iov[2] = libc::iovec { iov_base: unsafe { buf.add(HEADER_LEN) }.cast(), iov_len: MAC_LEN };
                    3
                }
            };
            headers[i].msg_hdr.msg_iov = iov.as_mut_ptr();
            headers[i].msg_hdr.msg_iovlen = parts;
            headers[i].msg_hdr.msg_name = q.to.as_ptr() as *mut libc::c_void;
            headers[i].msg_hdr.msg_namelen = q.to.len();
        }
        // SAFETY: each header names a live address and iovecs over live
        // buffers of the stated lengths (the shared payloads are held by
        // `self.queued`), for the duration of the call.
        let n =
            unsafe { libc::sendmmsg(sockets.socket(path).as_raw_fd(), headers.as_mut_ptr(), run as libc::c_uint, 0) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::WouldBlock {
                self.consume(1);
            }
            return Err(error);
        }
        self.consume(n as usize);
        Ok(n as usize)
    }

    fn consume(&mut self, n: usize) {
        self.queued.drain(..n);
        // The sent datagrams' buffers move to the back, ready for reuse.
        self.buffers.rotate_left(n);
    }
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
    // SAFETY: setsockopt with a valid fd and a pointer to a c_int of the right size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PRIORITY,
            (&priority as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
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
        assert_eq!(batch.recv(&rx).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        for i in 0..6u8 {
            tx.send_to(&vec![i; 100 + i as usize], rx.local_addr().unwrap()).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 4);
        assert_eq!(batch.datagram(3), &[3u8; 103][..]);
        assert_eq!(batch.recv(&rx).unwrap(), 2);
        assert_eq!(batch.datagram(0), &[4u8; 104][..]);
        assert_eq!(batch.datagram(1), &[5u8; 105][..]);
        // A buffer taken away with its datagram is replaced for the next read.
        let taken = std::mem::take(batch.datagram_mut(1));
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
        // At most two batches' worth wait in the pool.
        for _ in 0..10 {
            batch.recycle(Vec::with_capacity(DATAGRAM_ROOM));
        }
        assert_eq!(batch.spare.len(), 4);
    }

    /// A process's sockets and a plain socket that receives what they send.
    fn sockets_and_receiver() -> (PathSockets, UdpSocket, SocketAddr) {
        let sockets = PathSockets::bind("127.0.0.1".parse().unwrap(), &SocketOptions::default()).unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let to = rx.local_addr().unwrap();
        (sockets, rx, to)
    }

    #[test]
    fn a_batch_sends_runs_of_one_path_in_order() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = SendBatch::new(4, 1000);
        for (i, path) in [Path::Ordinary, Path::Ordinary, Path::Premium, Path::Ordinary].into_iter().enumerate() {
            batch.next_buffer()[..10].fill(i as u8);
            batch.push(path, to, 10, None);
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

    #[test]
    fn a_shared_payload_goes_between_header_and_mac() {
        let (sockets, rx, to) = sockets_and_receiver();
        let mut batch = SendBatch::new(2, 1000);
        let payload: SharedPayload = std::sync::Arc::new(vec![7; 300]);
        let head = batch.next_buffer();
        head[..HEADER_LEN].fill(1);
        head[HEADER_LEN..OVERHEAD].fill(2);
        batch.push(Path::Ordinary, to, OVERHEAD, Some(payload.clone()));
        batch.next_buffer()[..5].fill(3);
        batch.push(Path::Ordinary, to, 5, None);
        assert_eq!(std::sync::Arc::strong_count(&payload), 2);
        assert_eq!(batch.send(&sockets).unwrap(), 2);
        assert_eq!(std::sync::Arc::strong_count(&payload), 1, "the batch let go of the payload it sent");
        let mut buf = [0u8; 1000];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], [vec![1; HEADER_LEN], vec![7; 300], vec![2; MAC_LEN]].concat());
        assert_eq!(rx.recv(&mut buf).unwrap(), 5);
    }

    #[test]
    fn the_loopback_interface_has_an_mtu() {
        assert!(interface_mtu("127.0.0.1".parse().unwrap()).is_some_and(|mtu| mtu >= 1280));
        assert_eq!(interface_mtu("192.0.2.77".parse().unwrap()), None);
    }
}
