//! The references: raw UDP and TCP between the same processes as the
//! bulkwire figure, on the interface the job uses, measured in the same run.
//!
//! Raw UDP has no flow control: where it streams, it reports what arrived,
//! and the receiving socket's overflow counter from `/proc/net/udp`.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bulkwire_comm::{CommError, Source, Tag, World};

use crate::{io, Flow};

/// Tag of the address exchange.
const ADDR: i32 = 1000;
/// Largest payload of one reference datagram: a message above this is sent
/// as several datagrams (a UDP datagram carries at most 65,507 bytes).
pub const UDP_MAX_PAYLOAD: usize = 64_000;
/// The same kernel buffers bulkwire asks for on its sockets, so that the
/// reference is not handicapped by the default 208 KiB.
const UDP_BUFFER: libc::c_int = 4 << 20;
/// How long a receiver waits for the first datagram, and for anything at all.
const PATIENCE: Duration = Duration::from_secs(5);
/// After this long without a datagram a UDP stream is over (its end marker
/// was lost).
const SILENCE: Duration = Duration::from_millis(200);
/// A ping-pong round of several datagrams not whole after this long without
/// one is lost.
const ROUND_LOSS: Duration = Duration::from_millis(100);

/// Header of every reference datagram that is not a ping-pong payload:
/// kind, run, rank of the sender, sequence number (little-endian u32s).
const HEADER: usize = 16;
const DATA: u32 = 1;
const END: u32 = 2;
const ACK: u32 = 3;
/// A piece of a total exchange ([`Sockets::udp_total_exchange`]): its
/// sequence number is the exchange times the pieces of a message plus the
/// piece.
const EXCHANGE: u32 = 4;

/// The reference sockets of this rank.
pub struct Sockets {
    udp: UdpSocket,
    /// Every rank's reference UDP address, by rank.
    udp_addrs: Vec<SocketAddr>,
    /// TCP connections (TCP_NODELAY) to the peers asked for, by rank.
    tcp: HashMap<u32, TcpStream>,
    me: u32,
    /// Numbers the UDP measurements, so a late datagram of one is never
    /// counted in the next.
    run: u32,
}

impl Sockets {
    /// Opens a UDP socket and a TCP listener on the job's interface, learns
    /// every rank's addresses through bulkwire and connects TCP to
    /// `tcp_peers` (each of which must name this rank in turn).
    pub fn open(world: &World, tcp_peers: &[u32]) -> Result<Sockets, CommError> {
        let (me, size) = (world.rank(), world.size());
        let ip: IpAddr = world.runtime().peer_addrs(me).map_or([127, 0, 0, 1].into(), |(ordinary, _)| ordinary.ip());
        let udp = UdpSocket::bind((ip, 0)).map_err(io)?;
        for option in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
            // SAFETY: setting an int option on a socket we own.
            unsafe {
                libc::setsockopt(
                    udp.as_raw_fd(),
                    libc::SOL_SOCKET,
                    option,
                    (&UDP_BUFFER as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        let listener = TcpListener::bind((ip, 0)).map_err(io)?;
        let mine = format!("{} {}", udp.local_addr().map_err(io)?, listener.local_addr().map_err(io)?);
        for peer in (0..size).filter(|&p| p != me) {
            world.send(peer, ADDR, mine.as_bytes())?;
        }
        let mut udp_addrs = vec![udp.local_addr().map_err(io)?; size as usize];
        let mut tcp_addrs = vec![listener.local_addr().map_err(io)?; size as usize];
        for peer in (0..size).filter(|&p| p != me) {
            let (_, theirs) = world.recv(Source::Rank(peer), Tag::Is(ADDR))?;
            let theirs = String::from_utf8_lossy(&theirs).into_owned();
            let mut parts = theirs.split(' ').map(|a| a.parse::<SocketAddr>());
            match (parts.next(), parts.next()) {
                (Some(Ok(u)), Some(Ok(t))) => {
                    udp_addrs[peer as usize] = u;
                    tcp_addrs[peer as usize] = t;
                }
                _ => return Err(io(io::Error::other(format!("rank {peer} sent a bad address: {theirs:?}")))),
            }
        }
        // The lower rank connects and names itself; the listener's backlog
        // holds the connection until the other side accepts.
        let mut tcp = HashMap::new();
        for &peer in tcp_peers.iter().filter(|&&p| p > me) {
            let mut stream = TcpStream::connect(tcp_addrs[peer as usize]).map_err(io)?;
            stream.write_all(&me.to_le_bytes()).map_err(io)?;
            tcp.insert(peer, stream);
        }
        for _ in tcp_peers.iter().filter(|&&p| p < me) {
            let (mut stream, _) = listener.accept().map_err(io)?;
            let mut rank = [0u8; 4];
            stream.read_exact(&mut rank).map_err(io)?;
            tcp.insert(u32::from_le_bytes(rank), stream);
        }
        for stream in tcp.values() {
            stream.set_nodelay(true).map_err(io)?;
        }
        world.barrier()?;
        Ok(Sockets { udp, udp_addrs, tcp, me, run: 0 })
    }

    fn tcp(&self, peer: u32) -> io::Result<&TcpStream> {
        self.tcp.get(&peer).ok_or_else(|| io::Error::other(format!("no TCP connection to rank {peer}")))
    }

    /// Starts a UDP measurement on every rank: a new run number (the same
    /// everywhere) and an empty socket. Stragglers of the last measurement
    /// (end markers, repeated acknowledgements) are already in the socket,
    /// since loopback delivers within `send`; the barrier keeps anyone from
    /// sending before every socket is empty.
    fn next_run(&mut self, world: &World) -> Result<u32, CommError> {
        self.run += 1;
        self.udp.set_nonblocking(true).map_err(io)?;
        let mut buf = [0u8; 64];
        while self.udp.recv(&mut buf).is_ok() {}
        self.udp.set_nonblocking(false).map_err(io)?;
        world.barrier()?;
        Ok(self.run)
    }

    // ----- round trips -----------------------------------------------------

    /// `n` UDP round trips of `data` with `peer` (after a tenth as many to
    /// warm up); the initiator sends first. A message of one datagram goes
    /// as it is; a longer one in datagrams of at most [`UDP_MAX_PAYLOAD`]
    /// bytes ([`Sockets::udp_round_trips_large`]). Returns the round trips
    /// in seconds. `busy`: poll a non-blocking socket instead of sleeping in
    /// `recv`.
    pub fn udp_round_trips(
        &mut self,
        world: &World,
        peer: u32,
        initiator: bool,
        data: &[u8],
        n: usize,
        busy: bool,
    ) -> Result<Vec<f64>, CommError> {
        let run = self.next_run(world)?;
        let ping = UdpPing { udp: &self.udp, to: self.udp_addrs[peer as usize], initiator, n, busy };
        let samples = match data.len() > UDP_MAX_PAYLOAD {
            true => ping.large(run, data),
            false => ping.small(data),
        };
        self.udp.set_nonblocking(false).map_err(io)?;
        samples.map_err(io)
    }

    /// `n` TCP round trips of `data` with `peer` (after a tenth as many to
    /// warm up). A stream cannot carry an empty message: 0 bytes send 1.
    pub fn tcp_round_trips(&self, peer: u32, initiator: bool, data: &[u8], n: usize) -> io::Result<Vec<f64>> {
        let mut tcp = self.tcp(peer)?;
        let data = if data.is_empty() { &[0u8][..] } else { data };
        let mut buf = vec![0u8; data.len()];
        let mut samples = Vec::with_capacity(n + n / 10);
        for _ in 0..n + n / 10 {
            let t = Instant::now();
            if initiator {
                tcp.write_all(data)?;
                tcp.read_exact(&mut buf)?;
            } else {
                tcp.read_exact(&mut buf)?;
                tcp.write_all(&buf)?;
            }
            samples.push(t.elapsed().as_secs_f64());
        }
        Ok(samples.split_off(n / 10))
    }

    // ----- windowed streams (osu_bw) ---------------------------------------

    /// TCP side of a windowed stream: the sender writes `window` messages of
    /// `size` bytes and waits for a 1-byte acknowledgement, `rounds` times
    /// after one round to warm up. The sender returns the seconds taken.
    pub fn tcp_window(&self, peer: u32, sender: bool, size: usize, window: usize, rounds: usize) -> io::Result<f64> {
        let mut tcp = self.tcp(peer)?;
        let size = size.max(1);
        let mut buf = vec![7u8; size];
        let mut ack = [0u8; 1];
        let mut start = Instant::now();
        for round in 0..rounds + 1 {
            if round == 1 {
                start = Instant::now();
            }
            if sender {
                for _ in 0..window {
                    tcp.write_all(&buf)?;
                }
                tcp.read_exact(&mut ack)?;
            } else {
                for _ in 0..window {
                    tcp.read_exact(&mut buf)?;
                }
                tcp.write_all(&ack)?;
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Raw UDP side of a windowed stream: the sender blasts `window`
    /// messages of `size` bytes (each in datagrams of at most
    /// [`UDP_MAX_PAYLOAD`] bytes), then asks for an acknowledgement of the
    /// round until it gets one; lost datagrams are not sent again. The
    /// sender returns the seconds taken, the receiver the payload bytes
    /// that arrived (both after one round to warm up).
    pub fn udp_window(
        &mut self,
        world: &World,
        peer: u32,
        sender: bool,
        size: usize,
        window: usize,
        rounds: usize,
    ) -> Result<WindowResult, CommError> {
        let run = self.next_run(world)?;
        let measure = || -> io::Result<_> {
            let me = self.me;
            let (udp, to) = (&self.udp, self.udp_addrs[peer as usize]);
            let mut buf = vec![7u8; HEADER + size.clamp(1, UDP_MAX_PAYLOAD)];
            if sender {
                udp.set_read_timeout(Some(Duration::from_millis(2)))?;
                let mut start = Instant::now();
                for round in 0..rounds + 1 {
                    if round == 1 {
                        start = Instant::now();
                    }
                    for _ in 0..window {
                        let mut left = size.max(1);
                        while left > 0 {
                            let n = left.min(UDP_MAX_PAYLOAD);
                            header(&mut buf, DATA, run, me, round as u32);
                            // A full socket buffer loses the datagram, as the network would.
                            let _ = udp.send_to(&buf[..HEADER + n], to);
                            left -= n;
                        }
                    }
                    let mut asked = 0;
                    loop {
                        header(&mut buf, END, run, me, round as u32);
                        udp.send_to(&buf[..HEADER], to)?;
                        asked += 1;
                        match udp.recv(&mut buf) {
                            Ok(n) if n >= HEADER && parse(&buf) == (ACK, run, peer, round as u32) => break,
                            Ok(_) => {}
                            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                                if asked > 2500 {
                                    return Err(io::Error::other("the UDP receiver stopped acknowledging"));
                                }
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                return Ok(WindowResult::Seconds(start.elapsed().as_secs_f64()));
            }
            udp.set_read_timeout(Some(PATIENCE))?;
            let mut delivered = 0u64;
            let mut round = 0u32;
            let mut reply = [0u8; HEADER];
            buf.resize(65_536, 0);
            while round < rounds as u32 + 1 {
                let n = udp.recv(&mut buf)?;
                if n < HEADER {
                    continue;
                }
                let (kind, r, _, seq) = parse(&buf);
                if r != run {
                    continue;
                }
                match kind {
                    DATA if seq == round && round > 0 => delivered += (n - HEADER) as u64,
                    // Acknowledge this round, or again an earlier one whose
                    // acknowledgement was lost.
                    END if seq <= round => {
                        header(&mut reply, ACK, run, me, seq);
                        udp.send_to(&reply, to)?;
                        if seq == round {
                            round += 1;
                        }
                    }
                    _ => {}
                }
            }
            Ok(WindowResult::Delivered(delivered))
        };
        measure().map_err(io)
    }

    // ----- flows: K senders to one receiver (ttcp, incast) -----------------

    /// TCP flow: every sender writes `count` buffers of `len` bytes as fast
    /// as it can; the receiver reads all connections (poll) and returns what
    /// arrived and when the last byte did, counted from the call.
    pub fn tcp_flow(&self, receiver: u32, senders: &[u32], len: usize, count: usize) -> io::Result<Option<Flow>> {
        let me = self.me;
        let len = len.max(1);
        if me != receiver {
            let buf = vec![7u8; len];
            let mut tcp = self.tcp(receiver)?;
            for _ in 0..count {
                tcp.write_all(&buf)?;
            }
            return Ok(None);
        }
        let start = Instant::now();
        let streams: Vec<&TcpStream> = senders.iter().map(|&s| self.tcp(s)).collect::<io::Result<_>>()?;
        let mut left = vec![(len * count) as u64; streams.len()];
        let mut fds: Vec<libc::pollfd> =
            streams.iter().map(|s| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        let mut buf = vec![0u8; 1 << 20];
        let mut received = 0u64;
        while left.iter().any(|&l| l > 0) {
            // SAFETY: `fds` is a valid array of pollfd for its length.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, PATIENCE.as_millis() as i32) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if ready == 0 {
                return Err(io::Error::other("a TCP sender stopped sending"));
            }
            for (i, fd) in fds.iter_mut().enumerate() {
                if fd.revents == 0 {
                    continue;
                }
                let want = buf.len().min(left[i] as usize);
                // Readable: this read returns without waiting.
                let n = (&mut &*streams[i]).read(&mut buf[..want])?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a TCP sender closed early"));
                }
                left[i] -= n as u64;
                received += n as u64;
                if left[i] == 0 {
                    fd.fd = -1; // poll ignores it from now on
                }
            }
        }
        let sent = (len * count * senders.len()) as u64;
        Ok(Some(Flow::new(sent, received, start.elapsed().as_secs_f64())))
    }

    /// Raw UDP flow (ttcp -u): every sender blasts `count` messages of `len`
    /// bytes (each in datagrams of at most [`UDP_MAX_PAYLOAD`] bytes) and then
    /// a few end markers; the receiver counts what arrives until every
    /// sender's end marker has, or nothing has for a while. Returns, at the
    /// receiver, what arrived, by when the last data arrived, and the
    /// socket's overflow drops over the flow.
    pub fn udp_flow(
        &mut self,
        world: &World,
        receiver: u32,
        senders: &[u32],
        len: usize,
        count: usize,
    ) -> Result<Option<Flow>, CommError> {
        // The receiver's counter is read before the barrier: the senders
        // start the moment they leave it.
        let drops_before = udp_socket_drops(self.udp.local_addr().map_err(io)?);
        let run = self.next_run(world)?;
        let start = Instant::now();
        let measure = || -> io::Result<_> {
            let me = self.me;
            let len = len.max(1);
            let per_message = len.div_ceil(UDP_MAX_PAYLOAD);
            let udp = &self.udp;
            if me != receiver {
                let to = self.udp_addrs[receiver as usize];
                let mut buf = vec![7u8; HEADER + len.min(UDP_MAX_PAYLOAD)];
                let mut seq = 0u32;
                for _ in 0..count {
                    let mut left = len;
                    while left > 0 {
                        let n = left.min(UDP_MAX_PAYLOAD);
                        header(&mut buf, DATA, run, me, seq);
                        let _ = udp.send_to(&buf[..HEADER + n], to);
                        (left, seq) = (left - n, seq.wrapping_add(1));
                    }
                }
                // End markers can be lost in a full buffer like any datagram:
                // several, spaced, and the receiver's silence timeout behind them.
                for _ in 0..4 {
                    header(&mut buf, END, run, me, seq);
                    let _ = udp.send_to(&buf[..HEADER], to);
                    std::thread::sleep(Duration::from_millis(1));
                }
                return Ok(None);
            }
            udp.set_read_timeout(Some(PATIENCE))?;
            let mut buf = vec![0u8; 65_536];
            let mut ended = vec![false; self.udp_addrs.len()];
            let (mut received, mut datagrams) = (0u64, 0u64);
            let mut last = start;
            while senders.iter().any(|&s| !ended[s as usize]) {
                let n = match udp.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => break,
                    Err(e) => return Err(e),
                };
                if n < HEADER {
                    continue;
                }
                let (kind, r, from, _) = parse(&buf);
                if r != run || from as usize >= ended.len() {
                    continue;
                }
                if kind == DATA {
                    received += (n - HEADER) as u64;
                    datagrams += 1;
                    last = Instant::now();
                    if datagrams == 1 {
                        udp.set_read_timeout(Some(SILENCE))?;
                    }
                } else if kind == END {
                    ended[from as usize] = true;
                }
            }
            let drops = match (drops_before, udp_socket_drops(udp.local_addr()?)) {
                (Some(b), Some(a)) => Some(a.saturating_sub(b)),
                _ => None,
            };
            let sent = (len * count * senders.len()) as u64;
            let mut flow = Flow::new(sent, received, (last - start).as_secs_f64());
            flow.datagrams_sent = Some((count * per_message * senders.len()) as u64);
            flow.datagrams_received = Some(datagrams);
            flow.socket_drops = drops;
            Ok(Some(flow))
        };
        measure().map_err(io)
    }
}

impl Sockets {
    /// `rounds` total exchanges over raw UDP (after a tenth as many, at
    /// least two, to warm up): in each, every rank sends `size` bytes to
    /// every other (in datagrams of at most [`UDP_MAX_PAYLOAD`] bytes, to
    /// rank + 1, rank + 2, … in turn, as bulkwire's latin square) and then
    /// reads until it has every other rank's bytes, copying each piece to
    /// its place in an inbox (a reader learns the sender from the header).
    /// The receipts are the only synchronisation, nothing is acknowledged
    /// or resent: the floor of a total exchange over UDP between these
    /// processes. A rank is at most one exchange ahead of another (it
    /// needs the other's bytes to finish one), so a datagram belongs to
    /// this exchange or the next. Returns each exchange's time in seconds;
    /// an error if a datagram does not come within [`PATIENCE`] (raw UDP
    /// lost it) or the bytes that came are not the ones sent. `busy`: poll
    /// a non-blocking socket instead of sleeping in `recv`.
    pub fn udp_total_exchange(
        &mut self,
        world: &World,
        size: usize,
        rounds: usize,
        busy: bool,
    ) -> Result<Vec<f64>, CommError> {
        let run = self.next_run(world)?;
        let (me, p) = (self.me as usize, self.udp_addrs.len());
        let exchange = || -> io::Result<Vec<f64>> {
            let udp = &self.udp;
            udp.set_nonblocking(busy)?;
            udp.set_read_timeout(if busy { None } else { Some(PATIENCE) })?;
            let pieces = size.div_ceil(UDP_MAX_PAYLOAD).max(1);
            let piece_len = |piece: usize| (size - piece * UDP_MAX_PAYLOAD).min(UDP_MAX_PAYLOAD);
            let mut out = vec![me as u8 + 1; HEADER + size.min(UDP_MAX_PAYLOAD)];
            let mut buf = vec![0u8; 65_536];
            let mut inbox = vec![0u8; size * p];
            // Datagrams of this exchange and of the next that came.
            let mut came = [0usize; 2];
            let expected = (p - 1) * pieces;
            let warm = (rounds / 10).max(2);
            let mut samples = Vec::with_capacity(rounds + warm);
            for round in 0..(rounds + warm) as u32 {
                let t = Instant::now();
                for k in 1..p {
                    let to = self.udp_addrs[(me + k) % p];
                    for piece in 0..pieces {
                        header(&mut out, EXCHANGE, run, me as u32, round * pieces as u32 + piece as u32);
                        udp.send_to(&out[..HEADER + piece_len(piece)], to)?;
                    }
                }
                let deadline = Instant::now() + PATIENCE;
                while came[round as usize % 2] < expected {
                    let n = match udp.recv(&mut buf) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                            std::hint::spin_loop();
                            continue;
                        }
                        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                            return Err(io::Error::other(format!(
                                "raw UDP lost a datagram of exchange {round} ({} of {expected} came)",
                                came[round as usize % 2]
                            )))
                        }
                        Err(e) => return Err(e),
                    };
                    if n < HEADER {
                        continue;
                    }
                    let (kind, r, from, seq) = parse(&buf);
                    let (from, of, piece) = (from as usize, seq / pieces as u32, seq as usize % pieces);
                    if kind != EXCHANGE || r != run || from >= p || from == me || n != HEADER + piece_len(piece) {
                        continue;
                    }
                    if of != round && of != round + 1 {
                        return Err(io::Error::other(format!("exchange {of} came during exchange {round}")));
                    }
                    came[of as usize % 2] += 1;
                    inbox[from * size + piece * UDP_MAX_PAYLOAD..][..n - HEADER].copy_from_slice(&buf[HEADER..n]);
                }
                came[round as usize % 2] = 0;
                samples.push(t.elapsed().as_secs_f64());
            }
            if let Some(from) = (0..p).find(|&q| q != me && inbox[q * size..][..size].iter().any(|&b| b != q as u8 + 1))
            {
                return Err(io::Error::other(format!("raw UDP: the bytes from rank {from} are not the ones sent")));
            }
            Ok(samples.split_off(warm))
        };
        let samples = exchange();
        self.udp.set_nonblocking(false).map_err(io)?;
        samples.map_err(io)
    }
}

/// What one side of [`Sockets::udp_window`] measured.
pub enum WindowResult {
    Seconds(f64),
    Delivered(u64),
}

fn header(buf: &mut [u8], kind: u32, run: u32, rank: u32, seq: u32) {
    for (i, v) in [kind, run, rank, seq].into_iter().enumerate() {
        buf[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
}

fn parse(buf: &[u8]) -> (u32, u32, u32, u32) {
    let field = |i: usize| u32::from_le_bytes(buf[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    (field(0), field(1), field(2), field(3))
}

/// The kernel's count of datagrams dropped at the UDP socket bound to
/// `addr` because its receive buffer was full (the last column of
/// `/proc/net/udp`); `None` where it cannot be read.
pub fn udp_socket_drops(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(v4) = addr else { return None };
    // /proc/net/udp prints the address as the u32 in host order (little-endian here).
    let local = format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port());
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(1) == Some(&local.as_str()))
        .and_then(|fields| fields.last()?.parse().ok())
}

/// One ping-pong measurement of raw UDP with a peer.
struct UdpPing<'a> {
    udp: &'a UdpSocket,
    to: SocketAddr,
    initiator: bool,
    /// Round trips timed (after a tenth as many to warm up).
    n: usize,
    /// Poll a non-blocking socket rather than sleep in `recv`.
    busy: bool,
}

impl UdpPing<'_> {
    /// Round trips of a message of one datagram, sent as it is.
    fn small(&self, data: &[u8]) -> io::Result<Vec<f64>> {
        let (udp, to, initiator, n, busy) = (self.udp, self.to, self.initiator, self.n, self.busy);
        udp.set_nonblocking(busy)?;
        udp.set_read_timeout(if busy { None } else { Some(PATIENCE) })?;
        let mut buf = vec![0u8; 65_536];
        let recv = |buf: &mut [u8]| -> io::Result<usize> {
            let deadline = Instant::now() + PATIENCE;
            loop {
                match udp.recv(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::hint::spin_loop()
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let mut samples = Vec::with_capacity(n + n / 10);
        for _ in 0..n + n / 10 {
            let t = Instant::now();
            if initiator {
                udp.send_to(data, to)?;
                recv(&mut buf)?;
            } else {
                let got = recv(&mut buf)?;
                udp.send_to(&buf[..got], to)?;
            }
            samples.push(t.elapsed().as_secs_f64());
        }
        Ok(samples.split_off(n / 10))
    }

    /// Round trips of a message of several datagrams, each a header (run,
    /// round, index, count) and its piece, sent from `data` where it lies
    /// and read into the receive buffer at the piece's place where it comes
    /// in order (as bulkwire reads its datagrams): the floor of a transport
    /// over UDP, without acknowledgements or resends. A round whose
    /// datagrams do not all come within [`ROUND_LOSS`] is lost: the
    /// responder answers anyway, and the initiator leaves it out of the
    /// samples (an error if more than a tenth are lost).
    fn large(&self, run: u32, data: &[u8]) -> io::Result<Vec<f64>> {
        let (udp, initiator, n, busy) = (self.udp, self.initiator, self.n, self.busy);
        let (to, to_len) = raw_addr(self.to);
        udp.set_nonblocking(busy)?;
        udp.set_read_timeout(if busy { None } else { Some(ROUND_LOSS) })?;
        let count = data.len().div_ceil(UDP_MAX_PAYLOAD);
        let mut buf = vec![0u8; data.len()];
        let mut spare = vec![0u8; UDP_MAX_PAYLOAD];
        let fd = udp.as_raw_fd();
        let header = |round: u32, index: u32| -> [u8; 16] {
            let mut h = [0u8; 16];
            for (k, v) in [run, round, index, count as u32].into_iter().enumerate() {
                h[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
            }
            h
        };
        let send = |round: u32, message: &[u8]| -> io::Result<()> {
            for (index, piece) in message.chunks(UDP_MAX_PAYLOAD).enumerate() {
                let h = header(round, index as u32);
                let mut iov = [
                    libc::iovec { iov_base: h.as_ptr() as *mut libc::c_void, iov_len: h.len() },
                    libc::iovec { iov_base: piece.as_ptr() as *mut libc::c_void, iov_len: piece.len() },
                ];
                // SAFETY: a msghdr naming the peer's address and two
                // iovecs over memory that outlives the call.
                let r = unsafe {
                    let mut msg: libc::msghdr = std::mem::zeroed();
                    msg.msg_name = (&to as *const libc::sockaddr_storage) as *mut libc::c_void;
                    msg.msg_namelen = to_len;
                    msg.msg_iov = iov.as_mut_ptr();
                    msg.msg_iovlen = iov.len();
                    libc::sendmsg(fd, &msg, 0)
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        };
        // Reads round `round` into `buf`; whether all of it came.
        let mut receive = |round: u32, buf: &mut [u8]| -> io::Result<bool> {
            let mut got = vec![false; count];
            let (mut have, mut next) = (0, 0);
            let mut deadline = Instant::now() + ROUND_LOSS;
            while have < count {
                // The next piece in order is read straight into its
                // place; one out of order is moved to its own.
                let (target, room) = match next < count && !got[next] {
                    true => {
                        let at = next * UDP_MAX_PAYLOAD;
                        (buf[at..].as_mut_ptr(), (buf.len() - at).min(UDP_MAX_PAYLOAD))
                    }
                    false => (spare.as_mut_ptr(), spare.len()),
                };
                let mut h = [0u8; 16];
                let mut iov = [
                    libc::iovec { iov_base: h.as_mut_ptr().cast(), iov_len: h.len() },
                    libc::iovec { iov_base: target.cast(), iov_len: room },
                ];
                // SAFETY: two iovecs over buffers that outlive the call.
                let r = unsafe {
                    let mut msg: libc::msghdr = std::mem::zeroed();
                    msg.msg_iov = iov.as_mut_ptr();
                    msg.msg_iovlen = iov.len();
                    libc::recvmsg(fd, &mut msg, 0)
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                        return Err(e);
                    }
                    if Instant::now() >= deadline {
                        return Ok(false);
                    }
                    std::hint::spin_loop();
                    continue;
                }
                let field = |k: usize| u32::from_le_bytes(h[4 * k..4 * k + 4].try_into().expect("4 bytes"));
                let index = field(2) as usize;
                if (r as usize) < h.len() || field(0) != run || field(1) != round || index >= count || got[index] {
                    continue;
                }
                let (len, place) = (r as usize - h.len(), index * UDP_MAX_PAYLOAD);
                if len != (buf.len() - place).min(UDP_MAX_PAYLOAD) {
                    continue;
                }
                if target != buf[place..].as_mut_ptr() {
                    // SAFETY: `len` bytes were read to `target` (within
                    // `buf` or `spare`) and fit at `place` (checked).
                    unsafe { std::ptr::copy(target, buf[place..].as_mut_ptr(), len) };
                }
                got[index] = true;
                have += 1;
                next = index + 1;
                deadline = Instant::now() + ROUND_LOSS;
            }
            Ok(true)
        };
        let mut samples = Vec::with_capacity(n + n / 10);
        let mut lost = 0;
        for round in 0..(n + n / 10) as u32 {
            let t = Instant::now();
            let whole = if initiator {
                send(round, data)?;
                receive(round, &mut buf)?
            } else {
                let whole = receive(round, &mut buf)?;
                send(round, &buf)?;
                whole
            };
            if whole {
                samples.push(t.elapsed().as_secs_f64());
            } else {
                lost += 1;
            }
        }
        if lost > n / 10 {
            return Err(io::Error::other(format!(
                "raw UDP lost {lost} round trips of {} B in {}",
                data.len(),
                n + n / 10
            )));
        }
        let warm = (n / 10).min(samples.len().saturating_sub(1));
        Ok(samples.split_off(warm))
    }
}

/// `addr` as the C library takes it.
fn raw_addr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: a zeroed sockaddr_storage is valid; each arm writes a
    // sockaddr of its family into it, which it is large enough to hold.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
                sin6.sin6_flowinfo = a.flowinfo();
                sin6.sin6_scope_id = a.scope_id();
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        (storage, len as libc::socklen_t)
    }
}
