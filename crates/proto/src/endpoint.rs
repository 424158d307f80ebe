//! One process's end of all its channels.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bulkwire_wire::{
    decode, decode_split, job_tag, read_record_header, seal, Accept, ClockSyncPayload, DecodeError, Flags, Header,
    LatencyStatus, PacketType, ProbePayload, WarpFeedback, HEADER_LEN, MAC_LEN, OVERHEAD, RECORD_HEADER_LEN,
};

use crate::channel::{
    Channel, InPlace, LentBytes, Payload, Placement, SendRate, Shared, SharedPayload, TailFilter, LENT_PREFIX_MAX,
    TAIL_AHEAD_MAX,
};
use crate::clock::ClockEstimate;
use crate::config::{Config, ConfigError, Strategy};
use crate::ece::{Decision, Mode, PeerLink};
use crate::event::Event;
use crate::path::Path;
use crate::pool::{BufferPool, RecvBudget};
use crate::rate::{FeedbackMaker, Pacer, RateControl, RateStats};
use crate::stats::{ChannelStats, EndpointStats, LatencyStats, PathStats};
use crate::time::Time;
use crate::timers::Timers;

/// A datagram the caller must send: `len` bytes written at the start of the
/// buffer given to [`Endpoint::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub path: Path,
    pub to: u32,
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("rank {to} does not exist (the job has {ranks} ranks)")]
    NoSuchRank { to: u32, ranks: u32 },
    #[error("channel {channel} does not exist ({channels} per pair)")]
    NoSuchChannel { channel: u16, channels: u16 },
    #[error("message of {len} bytes exceeds max_message_size ({max})")]
    TooLarge { len: usize, max: usize },
    #[error("send buffers are full; poll the endpoint and try again")]
    WouldBlock,
    #[error("the channel to rank {peer} is closed after a protocol violation")]
    Closed { peer: u32 },
    #[error("channel strategy can only change before the channel is used")]
    InUse,
    #[error("a framed message needs {RECORD_HEADER_LEN} bytes of room in front; the buffer has {len}")]
    NoHeadroom { len: usize },
}

/// Memory held by an endpoint, to check against the configured bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub send_packets: usize,
    pub recv_packets: usize,
    pub pending_bytes: usize,
    /// Complete messages waiting for `poll_event`.
    pub ready_bytes: usize,
    /// Reserved by messages in reassembly.
    pub partial_bytes: usize,
}

/// What an endpoint's structures take, in bytes, by what each part grows
/// with ([`Endpoint::footprint`]). Counted from the structures
/// (`size_of` and the capacities of their vectors and queues), not asked
/// of the allocator, whose rounding and headers come on top.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The endpoint itself (`size_of::<Endpoint>()`).
    pub endpoint: usize,
    /// How many channels it keeps: one per rank (its own included) and
    /// channel id, `ranks × channels`.
    pub channels: usize,
    /// Their fixed part: `channels × size_of` of a channel.
    pub channel_structs: usize,
    /// What the channels hold on the heap: queues, packets kept for
    /// resending or held out of order, messages being packetised or
    /// reassembled.
    pub channel_heap: usize,
    /// Per peer besides the channels: the latency links, the pacers, the
    /// Warp feedback state (one entry per rank, one per rank and channel),
    /// the flags and lists indexed by channel, the timers' heap and
    /// deadlines.
    pub peer_state: usize,
    /// Packet buffers on the pools' free lists, kept for reuse.
    pub free_buffers: usize,
    /// Events waiting for the application, with their messages.
    pub events: usize,
}

impl Footprint {
    pub fn total(&self) -> usize {
        self.endpoint + self.channel_structs + self.channel_heap + self.peer_state + self.free_buffers + self.events
    }
}

/// The reliable channels of one process, sans I/O.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    /// The answer of [`Endpoint::poll_timeout`] until the state changes:
    /// every mutating call clears it, so that a progress loop that polls
    /// an idle endpoint (all its peers reached otherwise) does not scan
    /// every channel at every turn. Checked against a fresh scan in debug
    /// builds.
    timeout_cache: std::cell::Cell<Option<Option<Time>>>,
    /// The deadlines of the channels (slot = channel index) and of the
    /// latency links (slot = `channels.len()` + peer). Every mutation of a
    /// channel or link marks its slot, so that `poll_timeout` and
    /// `handle_timeout` look only at what changed.
    timers: std::cell::RefCell<Timers>,
    accept: Accept,
    /// Indexed by `peer * channels + channel`; the slots of our own rank are unused.
    channels: Vec<Channel>,
    send_pool: BufferPool,
    recv_pool: BufferPool,
    events: VecDeque<Event>,
    recv: RecvBudget,
    pending_bytes: usize,
    send_rate: SendRate,
    /// Channels that may have something to send, in round-robin order.
    ready: VecDeque<usize>,
    in_ready: Vec<bool>,
    /// Channels with data queued but no free send buffer.
    waiting_for_buffers: Vec<usize>,
    /// Channels whose next packet waits for room in the receive buffer.
    blocked_on_recv: Vec<usize>,
    /// The latency engines, one per peer; empty while they are off.
    links: Vec<PeerLink>,
    /// Peers whose link has a probe or clock packet to send.
    link_ready: VecDeque<u32>,
    rejected: bulkwire_wire::RejectCounters,
    protocol_violations: u64,
    unhandled: u64,
    /// By channel id: messages may be delivered in place.
    in_place: Vec<bool>,
    /// Every datagram sent, by path.
    ordinary: PathStats,
    premium: PathStats,
    /// Warp rate control, by peer: the pacer of a peer under control.
    pacers: Vec<Option<Pacer>>,
    /// Channels with data to send whose pacer has no token.
    paced: Vec<usize>,
    /// Warp feedback for senders under control, and what is due to go.
    feedback: FeedbackMaker,
    feedback_due: VecDeque<(u32, WarpFeedback)>,
    feedback_sent: Vec<u64>,
    /// The channel whose message in reassembly grew last: where
    /// [`Endpoint::landing`] looks first.
    landing_hint: Option<usize>,
    /// A receive's buffer for the next message it fits ([`Endpoint::place`]),
    /// until a channel takes it; and the same, while the endpoint holds it.
    placement: Option<Placement>,
    placed_buf: Option<Placement>,
    /// Where the next whole messages of one channel may be read straight
    /// to ([`Endpoint::aim`]).
    aim: Option<Aim>,
    /// Bytes of a run of datagrams that the caller reads at once, where
    /// the kernel coalesces them ([`Endpoint::read_runs`]).
    run_room: Option<usize>,
    /// When the next datagram handed over reached this host, if the caller
    /// knows better than the time it is handled ([`Endpoint::set_arrival`]).
    arrival: Option<Time>,
    /// Some datagram's arrival time went into a sample: latency is
    /// monitored, or a peer sent under rate control.
    samples_arrivals: bool,
}

/// Where the next messages of a channel, each whole in one datagram, may
/// be read straight to ([`Endpoint::aim`]): their bytes after the first
/// `skip`, one after the other from `base`, the `len` bytes there in whole
/// datagrams' worth. It holds while the channel's next expected packet is
/// `seq`: a packet of the channel handled otherwise ends it.
#[derive(Debug)]
struct Aim {
    index: usize,
    seq: u64,
    skip: usize,
    base: *mut u8,
    len: usize,
}

// SAFETY: the region is lent to the endpoint (whichever thread holds it)
// until the caller takes it back (`Endpoint::unaim`).
unsafe impl Send for Aim {}

/// Where the data of the next datagrams of a message in reassembly may be
/// read straight to ([`Endpoint::landing`]): slot `i` is the place of the
/// `i`th next datagram's data, were they to come in order, each full. Or,
/// for an aim ([`Endpoint::aim`]), of the `i`th next whole message's bytes
/// after its first `skip`.
#[derive(Clone, Copy, Debug)]
pub struct Landing {
    /// `Some` for an aim: the bytes of each message before its place.
    skip: Option<usize>,
    index: usize,
    peer: u32,
    channel: u16,
    seq: u64,
    /// The slots are read as one run of datagrams ([`Landing::run`]).
    run: bool,
    /// Bytes of the message held, and where the place of its next bytes
    /// ends: the whole message, or the end of the part that goes into a
    /// receive's buffer ([`Endpoint::place`]), after which a datagram is
    /// put together as any other.
    offset: usize,
    total: usize,
    /// Data bytes of a full datagram.
    chunk: usize,
    slots: usize,
    /// Where byte `offset` of the message goes.
    base: *mut u8,
}

impl Landing {
    /// Bytes of a datagram before its data: its header and record header.
    pub const HEAD: usize = HEADER_LEN + RECORD_HEADER_LEN;

    /// Bytes of a datagram read before the slot's region: [`Landing::HEAD`],
    /// and for an aim the first bytes of its message.
    pub fn head(&self) -> usize {
        Self::HEAD + self.skip.unwrap_or(0)
    }

    /// How many places there are (at least one).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes of a datagram after its data: its MAC.
    pub const TAIL: usize = MAC_LEN;

    /// The slots are for the datagrams of one run that the kernel
    /// coalesced, read at once ([`Endpoint::read_runs`]): slot `i` for
    /// the run's `i`th datagram, each read as [`Landing::head`] bytes,
    /// the slot's region, then [`Landing::TAIL`] bytes. Otherwise each
    /// slot is for a read of its own.
    pub fn run(&self) -> bool {
        self.run
    }

    /// The place of slot `i` (below [`Landing::slots`]): where its data
    /// would go and its length.
    pub fn region(&self, i: usize) -> (*mut u8, usize) {
        assert!(i < self.slots, "slot {i} of {}", self.slots);
        let start = i * self.chunk;
        let len = self.chunk.min(self.total - self.offset - start);
        (self.base.wrapping_add(start), len)
    }
}

/// What became of a datagram read into a [`Landing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landed {
    /// Its data was where it belonged, and it was handled there.
    InPlace,
    /// Not for this place (another packet, or not whole in it): the caller
    /// puts it together and hands it over as any datagram. Nothing changed.
    Elsewhere,
    /// Handled, and the channel failed: the landing's places may be gone,
    /// and the datagrams read into its later slots are dropped.
    Ended,
}

/// Data of at least this many bytes a datagram makes reading it in place
/// by itself worth its bookkeeping (loopback's datagrams, not Ethernet's,
/// which are read in place only in runs: [`Endpoint::read_runs`]).
pub const LANDING_MIN_CHUNK: usize = 8 << 10;

impl Endpoint {
    pub fn new(cfg: Config) -> Result<Endpoint, ConfigError> {
        cfg.validate()?;
        let count = cfg.ranks as usize * cfg.channels as usize;
        let channels = (0..count)
            .map(|i| Channel::new((i / cfg.channels as usize) as u32, (i % cfg.channels as usize) as u16, &cfg))
            .collect();
        let pacers = (0..cfg.ranks)
            .map(|peer| {
                let control = cfg.rate_control.as_ref().filter(|_| peer != cfg.rank)?;
                Some(Pacer::new(control, cfg.max_datagram, cfg.ranks - 1))
            })
            .collect();
        let feedback = FeedbackMaker::new(
            cfg.ranks,
            cfg.channels,
            cfg.rate_control.as_ref().unwrap_or(&RateControl::default()),
            cfg.max_datagram,
        );
        let mut endpoint = Endpoint {
            timeout_cache: std::cell::Cell::new(None),
            timers: std::cell::RefCell::new(Timers::new(
                count + if cfg.latency.is_some() { cfg.ranks as usize } else { 0 },
            )),
            accept: Accept { job: cfg.job, destination: cfg.rank, ranks: cfg.ranks, channels: cfg.channels },
            channels,
            send_pool: BufferPool::new(cfg.send_buffers(), cfg.max_payload()),
            recv_pool: BufferPool::new(cfg.recv_buffers(), cfg.max_payload()),
            events: VecDeque::new(),
            recv: RecvBudget { ready: 0, partial: 0, limit: cfg.recv_buffer_bytes },
            pending_bytes: 0,
            send_rate: SendRate::default(),
            ready: VecDeque::new(),
            in_ready: vec![false; count],
            waiting_for_buffers: Vec::new(),
            blocked_on_recv: Vec::new(),
            links: if cfg.latency.is_some() {
                (0..cfg.ranks).map(|_| PeerLink::default()).collect()
            } else {
                Vec::new()
            },
            link_ready: VecDeque::new(),
            rejected: Default::default(),
            protocol_violations: 0,
            unhandled: 0,
            ordinary: PathStats::default(),
            premium: PathStats::default(),
            in_place: vec![false; cfg.channels as usize],
            pacers,
            paced: Vec::new(),
            feedback,
            feedback_due: VecDeque::new(),
            feedback_sent: vec![0; cfg.ranks as usize],
            landing_hint: None,
            placement: None,
            placed_buf: None,
            aim: None,
            run_room: None,
            arrival: None,
            samples_arrivals: false,
            cfg,
        };
        let slots = endpoint.channels.len() + endpoint.links.len();
        for slot in 0..slots {
            if endpoint.slot_timeout(slot).is_some() {
                endpoint.timers.get_mut().mark(slot);
            }
        }
        Ok(endpoint)
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn rank(&self) -> u32 {
        self.cfg.rank
    }

    // ----- application commands -----------------------------------------

    /// Queues a copy of `data` for `to` on `channel`.
    pub fn send(&mut self, to: u32, channel: u16, data: &[u8]) -> Result<(), SendError> {
        self.timeout_cache.set(None);
        self.check_send(to, channel, data.len())?;
        self.send_owned(to, channel, data.to_vec())
    }

    /// Queues `data` for `to` on `channel` without copying it. Fails with
    /// [`SendError::WouldBlock`] while the send buffer cannot take it.
    pub fn send_owned(&mut self, to: u32, channel: u16, data: Vec<u8>) -> Result<(), SendError> {
        self.timeout_cache.set(None);
        self.queue(to, channel, data, 0)
    }

    /// Queues the message `framed[RECORD_HEADER_LEN..]`, whose buffer has
    /// room for a record header in front ([`bulkwire_wire::RECORD_HEADER_LEN`]
    /// bytes, of any content). A message that fits one packet is then not
    /// copied by the endpoint at all: its buffer becomes the packet's
    /// payload, kept until acknowledged and sent where it lies (see
    /// [`Endpoint::poll_transmit_shared`]); with [`Endpoint::send_owned`]
    /// the message is copied into a packet buffer. Some spare capacity
    /// lets later small messages to the same peer share the packet without
    /// the buffer growing.
    pub fn send_framed(&mut self, to: u32, channel: u16, framed: Vec<u8>) -> Result<(), SendError> {
        self.timeout_cache.set(None);
        if framed.len() < RECORD_HEADER_LEN {
            return Err(SendError::NoHeadroom { len: framed.len() });
        }
        self.queue(to, channel, framed, RECORD_HEADER_LEN)
    }

    /// Queues the message of `prefix`, `body` and `suffix`, one after the
    /// other, without copying `body`: its packets carry pieces of it where
    /// it lies (a piece too small to be worth sharing, `prefix` and
    /// `suffix` are copied into packets; the first packet carries `prefix`
    /// in front of the first piece). The caller keeps `body` unchanged
    /// until the endpoint holds it no more: until `Arc::strong_count` of
    /// the caller's own `Arc` is one, once every packet that carries a
    /// piece of it has been acknowledged. A message to this rank itself is
    /// copied. Errors as [`Endpoint::check_send`], before anything is
    /// queued, but for the send buffer's limit: the memory is the
    /// caller's, not the endpoint's (its bytes still count against later
    /// sends, which wait behind it); and [`SendError::TooLarge`] for a
    /// prefix of more than [`LENT_PREFIX_MAX`] bytes.
    pub fn send_lent(
        &mut self,
        to: u32,
        channel: u16,
        prefix: &[u8],
        body: Arc<dyn LentBytes>,
        suffix: &[u8],
    ) -> Result<(), SendError> {
        self.timeout_cache.set(None);
        if prefix.len() > LENT_PREFIX_MAX {
            return Err(SendError::TooLarge { len: prefix.len(), max: LENT_PREFIX_MAX });
        }
        let len = prefix.len() + (*body).as_ref().len() + suffix.len();
        match self.check_send(to, channel, len) {
            Err(SendError::WouldBlock) if to != self.cfg.rank => {}
            checked => checked?,
        }
        if to == self.cfg.rank {
            let data = [prefix, (*body).as_ref(), suffix].concat();
            return self.queue(to, channel, data, 0);
        }
        let index = self.index(to, channel);
        if let Some(link) = self.link_mut(to) {
            link.activate();
        }
        self.pending_bytes += len;
        self.channel_mut(index).queue_lent(prefix.to_vec(), body, suffix.to_vec());
        self.mark_ready(index);
        Ok(())
    }

    /// Queues the message `data[headroom..]`.
    fn queue(&mut self, to: u32, channel: u16, mut data: Vec<u8>, headroom: usize) -> Result<(), SendError> {
        let len = data.len() - headroom;
        self.check_send(to, channel, len)?;
        if to == self.cfg.rank {
            // A message to oneself never touches the network.
            data.drain(..headroom);
            self.recv.ready += data.len();
            self.events.push_back(Event::Message { from: to, channel, data, start: 0 });
            return Ok(());
        }
        let index = self.index(to, channel);
        if let Some(link) = self.link_mut(to) {
            // Monitoring starts with the first message: probes then run
            // ahead of every later burst, so the mode is known when it comes.
            link.activate();
        }
        self.pending_bytes += len;
        self.channel_mut(index).queue(data, headroom);
        self.mark_ready(index);
        Ok(())
    }

    /// Whether `send` of `len` bytes would succeed now, and if not, why.
    pub fn check_send(&self, to: u32, channel: u16, len: usize) -> Result<(), SendError> {
        if to >= self.cfg.ranks {
            return Err(SendError::NoSuchRank { to, ranks: self.cfg.ranks });
        }
        if channel >= self.cfg.channels {
            return Err(SendError::NoSuchChannel { channel, channels: self.cfg.channels });
        }
        if len > self.cfg.max_message_size {
            return Err(SendError::TooLarge { len, max: self.cfg.max_message_size });
        }
        if to == self.cfg.rank {
            if self.recv.ready > 0 && self.recv.ready + len > self.cfg.recv_buffer_bytes {
                return Err(SendError::WouldBlock);
            }
            return Ok(());
        }
        if self.channels[self.index(to, channel)].failed {
            return Err(SendError::Closed { peer: to });
        }
        if self.pending_bytes + len > self.cfg.send_buffer_bytes {
            return Err(SendError::WouldBlock);
        }
        Ok(())
    }

    /// Whether a message of `len` bytes would be accepted by `send` now.
    pub fn can_send(&self, to: u32, channel: u16, len: usize) -> bool {
        self.check_send(to, channel, len).is_ok()
    }

    /// Marks the last message queued for `to` as the end of a communication
    /// phase: its packet asks for an acknowledgement at once (seed 002 §4.4).
    /// Call it after queueing the phase's last message and before polling;
    /// with nothing queued it does nothing (the tail probe then covers the
    /// last packets).
    pub fn end_phase(&mut self, to: u32, channel: u16) {
        self.timeout_cache.set(None);
        if to < self.cfg.ranks && to != self.cfg.rank && channel < self.cfg.channels {
            let index = self.index(to, channel);
            self.channel_mut(index).end_phase();
        }
    }

    /// The application waits for more from `peer` on `channel`: it knows
    /// more is coming (a barrier told it who sends to it). Unless something
    /// arrives first, the peer is prodded two retransmission timeouts from
    /// now and with exponential back-off while the wait is renewed: a receiver
    /// that misses the last packet of a phase asks for it, so the sender
    /// need not ask for an acknowledgement of it (seed 002 §4.2-4.3). Call
    /// it on every turn of the wait.
    pub fn awaiting(&mut self, now: Time, peer: u32, channel: u16) {
        self.timeout_cache.set(None);
        if peer < self.cfg.ranks && peer != self.cfg.rank && channel < self.cfg.channels {
            let index = self.index(peer, channel);
            self.channel_mut(index).awaiting(now);
        }
    }

    /// Makes the receiver of `channel` to `peer` responsible for recovery
    /// (it calls [`Endpoint::awaiting`] when it waits): the sender's tail
    /// probe, the recovery of a last packet that nobody waits for, then
    /// starts only after 16 retransmission timeouts instead of one.
    pub fn set_receiver_driven(&mut self, peer: u32, channel: u16, on: bool) {
        self.timeout_cache.set(None);
        if peer < self.cfg.ranks && peer != self.cfg.rank && channel < self.cfg.channels {
            let index = self.index(peer, channel);
            self.channel_mut(index).receiver_driven = on;
        }
    }

    /// Makes the sender of `channel` to `peer` probe by its own pace: a
    /// last packet that came a round trip or less after the one before (the
    /// end of a burst) is probed after one retransmission timeout; one that
    /// came later than that (a sparse stream, whose next packet will show a
    /// loss as a hole) only after 16. For traffic of isolated messages,
    /// where a probe after every message would send each twice and draw an
    /// acknowledgement for it.
    pub fn set_probe_by_pace(&mut self, peer: u32, channel: u16, on: bool) {
        self.timeout_cache.set(None);
        if peer < self.cfg.ranks && peer != self.cfg.rank && channel < self.cfg.channels {
            let index = self.index(peer, channel);
            self.channel_mut(index).probe_by_pace = on;
        }
    }

    /// Asks every peer holding unacknowledged packets of ours to
    /// acknowledge them now, without waiting for a timeout (before leaving
    /// a job, for instance).
    pub fn request_acknowledgements(&mut self) {
        self.timeout_cache.set(None);
        for index in 0..self.channels.len() {
            if self.channel_mut(index).request_acknowledgement() {
                self.mark_ready(index);
            }
        }
    }

    /// Chooses the loss-recovery strategy of one channel; both ends must
    /// choose the same, before the channel carries anything.
    pub fn set_strategy(&mut self, peer: u32, channel: u16, strategy: Strategy) -> Result<(), SendError> {
        self.timeout_cache.set(None);
        self.check_send(peer, channel, 0).or_else(|e| if e == SendError::WouldBlock { Ok(()) } else { Err(e) })?;
        let index = self.index(peer, channel);
        let ch = self.channel_mut(index);
        if !ch.is_fresh() {
            return Err(SendError::InUse);
        }
        ch.strategy = strategy;
        Ok(())
    }

    /// Sets the superstep colour carried by the packets sent to `peer`.
    pub fn set_colour(&mut self, peer: u32, channel: u16, colour: u8) {
        self.timeout_cache.set(None);
        if peer < self.cfg.ranks && channel < self.cfg.channels {
            let index = self.index(peer, channel);
            self.channel_mut(index).colour = colour;
        }
    }

    /// Sends `channel`'s data to `peer` on the premium path always
    /// (`on`), or on the path the pair's mode chooses: a control plane
    /// that congestion of the ordinary class must not delay (seed 004 §2).
    pub fn set_premium(&mut self, peer: u32, channel: u16, on: bool) {
        self.timeout_cache.set(None);
        if peer < self.cfg.ranks && channel < self.cfg.channels {
            let index = self.index(peer, channel);
            self.channel_mut(index).premium = on;
        }
    }

    /// The sequence number of the next new data packet to `peer` on
    /// `channel`: a mark for [`Endpoint::acknowledge_below`].
    pub fn next_sequence(&self, peer: u32, channel: u16) -> Option<u64> {
        (peer < self.cfg.ranks && channel < self.cfg.channels)
            .then(|| self.channels[self.index(peer, channel)].next_sequence())
    }

    /// The layer above knows `peer` has every packet below `seq` on
    /// `channel` (a mark taken with [`Endpoint::next_sequence`] before a
    /// barrier that proves it): frees them without an acknowledgement from
    /// the peer. This is the coarse-grained acknowledgement of seed 002
    /// §4.4; use it only with such proof, or the packets are never resent.
    /// Returns how many packets were freed.
    pub fn acknowledge_below(&mut self, now: Time, peer: u32, channel: u16, seq: u64) -> u64 {
        self.timeout_cache.set(None);
        if peer >= self.cfg.ranks || channel >= self.cfg.channels {
            return 0;
        }
        let index = self.index(peer, channel);
        let (ch, mut sh) = self.split(index);
        ch.acknowledge_below(now, seq, &mut sh)
    }

    /// True when every message sent has been acknowledged and no answer is owed.
    pub fn is_idle(&self) -> bool {
        self.channels.iter().all(Channel::is_idle)
    }

    // ----- network input --------------------------------------------------

    /// The next datagram handed over (by any of the `handle_` calls)
    /// reached this host at `at`, before it is handled: for a caller that
    /// has the kernel's receive time. The samples taken from it (one-way
    /// latency, clock exchanges, Warp's arrival ratios) then measure the
    /// network, not how late the process came to read it; a later `at`
    /// than the handling time is ignored. Everything else (timers,
    /// deadlines) still runs on the handling time.
    pub fn set_arrival(&mut self, at: Time) {
        self.arrival = Some(at);
    }

    /// Whether arrival times matter to this endpoint: it monitors latency,
    /// or some peer sent under rate control. Until then, a caller need not
    /// find out when datagrams arrived ([`Endpoint::set_arrival`]).
    pub fn samples_arrivals(&self) -> bool {
        self.samples_arrivals || !self.links.is_empty()
    }

    /// When the datagram being handled arrived (and the stamp is used up).
    fn arrived(&mut self, now: Time) -> Time {
        self.arrival.take().filter(|&at| at <= now).unwrap_or(now)
    }

    /// A datagram arrived. Anything wrong with it is counted and dropped.
    pub fn handle_datagram(&mut self, now: Time, datagram: &[u8]) {
        self.timeout_cache.set(None);
        self.handle(now, datagram, false);
    }

    /// [`Endpoint::handle_datagram`] for a caller that can give the
    /// datagram's buffer away: on a channel that takes its messages in
    /// place ([`Endpoint::set_in_place`]), a large message that fills the
    /// datagram's first record is delivered in this buffer, which is then
    /// taken (left empty), rather than copied out of it. The buffer keeps
    /// its room when the message fills at least a quarter of it, so that
    /// the caller can read another datagram into it once the message is
    /// consumed; a smaller message gives the rest back.
    pub fn handle_datagram_owned(&mut self, now: Time, datagram: &mut Vec<u8>) {
        self.timeout_cache.set(None);
        let Some(InPlace { event, len }) = self.handle(now, datagram, true) else { return };
        let start = HEADER_LEN + RECORD_HEADER_LEN;
        let mut data = std::mem::take(datagram);
        data.truncate(start + len);
        // A buffer for the largest datagram may hold a far smaller message
        // for a while: past four times the message, give back the rest
        // (glibc shrinks in place).
        if data.capacity() > 4 * data.len() {
            data.shrink_to_fit();
        }
        if let Some(Event::Message { data: slot, start: at, .. }) = self.events.get_mut(event) {
            *slot = data;
            *at = start;
        }
    }

    /// Decodes and handles a datagram; returns where a message was left to
    /// be delivered in place, if `in_place` allowed that.
    fn handle(&mut self, now: Time, datagram: &[u8], in_place: bool) -> Option<InPlace> {
        let arrived = self.arrived(now);
        let packet = match decode(datagram, &self.cfg.key, &self.accept) {
            Ok(p) => p,
            Err(e) => {
                self.reject(&e);
                return None;
            }
        };
        self.handle_decoded(now, arrived, packet.header, Payload::Bytes(packet.payload), in_place)
    }

    /// Where the data of the next datagrams of a message in reassembly
    /// would go, were they to come in order and full (at most `slots` of
    /// them, or a run's worth: [`Endpoint::read_runs`]): for a caller that
    /// reads datagrams straight there, saving the copy of reassembly
    /// ([`Endpoint::handle_landed`]). `None` when no message is in
    /// reassembly, or datagrams carry less than [`LANDING_MIN_CHUNK`] of
    /// data and are not read as runs. Where none is, the aim, if there is
    /// one ([`Endpoint::aim`]).
    ///
    /// The places are valid until the next call on this endpoint other
    /// than [`Endpoint::handle_landed`] with this landing.
    pub fn landing(&mut self, slots: usize) -> Option<Landing> {
        let chunk = self.chunk(0)?;
        let Some(index) = self.landing_hint else { return self.aimed(slots) };
        let ch = &mut self.channels[index];
        let (peer, channel) = (ch.peer, ch.id);
        let Some((seq, offset, total, base)) = ch.reassembling() else {
            self.landing_hint = None;
            return self.aimed(slots);
        };
        let (slots, run) = self.landing_slots(slots, chunk, 0)?;
        let slots = slots.min((total - offset).div_ceil(chunk));
        Some(Landing { skip: None, index, peer, channel, seq, run, offset, total, chunk, slots, base })
    }

    /// How many slots a landing whose datagrams carry `chunk` bytes in
    /// their regions (`skip` before them) has, and whether they are a
    /// run's: as many as a run's read holds where the caller reads runs
    /// and two or more fit ([`Endpoint::read_runs`]); else `slots`, each
    /// read by itself, where datagrams carry [`LANDING_MIN_CHUNK`] or more.
    fn landing_slots(&self, slots: usize, chunk: usize, skip: usize) -> Option<(usize, bool)> {
        let datagram = Landing::HEAD + skip + chunk + Landing::TAIL;
        match self.run_room.map_or(0, |room| room / datagram) {
            run if run > 1 && chunk > 0 => Some((run, true)),
            _ => (chunk >= LANDING_MIN_CHUNK && slots > 0).then_some((slots, false)),
        }
    }

    /// Has [`Endpoint::landing`] lend places as runs: the caller reads up
    /// to `room` bytes of datagrams that the kernel coalesced (UDP GRO) in
    /// one read, where each datagram's data goes to its place in turn.
    /// Datagrams of which two or more fit are then read so, among them
    /// those too small to be read in place one per system call
    /// ([`LANDING_MIN_CHUNK`]; an Ethernet frame's) and jumbo frames'.
    /// `None`: no such reads.
    pub fn read_runs(&mut self, room: Option<usize>) {
        self.run_room = room;
    }

    /// The landing of the aim, while it holds: at most `slots` whole
    /// datagrams' worth. An aim that no longer holds is dropped.
    fn aimed(&mut self, slots: usize) -> Option<Landing> {
        let a = self.aim.as_ref()?;
        let chunk = self.chunk(a.skip)?;
        let (slots, run) = self.landing_slots(slots, chunk, a.skip)?;
        let ch = &self.channels[a.index];
        if a.len < chunk || !ch.takes_whole(a.seq) {
            self.aim = None;
            return None;
        }
        let slots = slots.min(a.len / chunk);
        let (peer, channel) = (ch.peer, ch.id);
        let total = slots * chunk;
        Some(Landing {
            skip: Some(a.skip),
            index: a.index,
            peer,
            channel,
            seq: a.seq,
            run,
            offset: 0,
            total,
            chunk,
            slots,
            base: a.base,
        })
    }

    /// The bytes of a message that an aim with `skip` reads into its region
    /// ([`Endpoint::aim`]): a full datagram's data less `skip`. `None`
    /// where that is less than [`LANDING_MIN_CHUNK`] (between hosts of an
    /// Ethernet MTU) and the caller reads no runs ([`Endpoint::read_runs`]),
    /// as an aim would save too little to be worth it.
    pub fn aim_chunk(&self, skip: usize) -> Option<usize> {
        let chunk = self.chunk(skip)?;
        self.landing_slots(1, chunk, skip).map(|_| chunk)
    }

    /// A full datagram's data less `skip` bytes (a record's data is at
    /// most 64 KiB).
    fn chunk(&self, skip: usize) -> Option<usize> {
        Some(self.cfg.max_payload().checked_sub(RECORD_HEADER_LEN + skip)?.min(u16::MAX as usize))
    }

    /// Lets the next messages from `peer` on `channel`, a reliable channel,
    /// be read straight to `len` bytes at `base` as they come in order
    /// (where the caller reads datagrams there, [`Endpoint::landing`]):
    /// each message that comes whole in one datagram and is `skip` bytes
    /// longer than a full datagram's data, its bytes past the first
    /// `skip` written one message after the other. Each is then delivered
    /// as [`Event::Aimed`]. For an application that knows where the data
    /// of a stream of messages goes before it comes (a BSP put's area).
    ///
    /// The aim holds while the messages come so, and replaces an aim given
    /// before. The channel's next packet handled otherwise ends it (one
    /// that is no such message, or not read there); so does
    /// [`Endpoint::unaim`]. Returns `false`, and aims nowhere, where a
    /// message of the channel was delivered and not yet handed out
    /// ([`Endpoint::poll_event`]): the aim would not follow from what the
    /// caller has seen; or where datagrams are too small
    /// ([`Endpoint::aim_chunk`]). A datagram read to the region that turns out not
    /// to be the next (another packet, or not whole) leaves its bytes
    /// there, within the first full datagram's worth of each slot: the
    /// caller writes what belongs there later, or the region is its own.
    ///
    /// # Safety
    ///
    /// `base` is valid for writes of `len` bytes, and neither read nor
    /// written by anyone else until [`Endpoint::unaim`] has returned or
    /// the aim ended (the bytes of an [`Event::Aimed`] handed out are the
    /// caller's).
    pub unsafe fn aim(&mut self, peer: u32, channel: u16, skip: usize, base: *mut u8, len: usize) -> bool {
        self.aim = None;
        if peer >= self.cfg.ranks || channel >= self.cfg.channels || self.aim_chunk(skip).is_none() {
            return false;
        }
        let pending = self.events.iter().any(|e| match e {
            Event::Message { from, channel: c, .. }
            | Event::Placed { from, channel: c, .. }
            | Event::Aimed { from, channel: c, .. } => (*from, *c) == (peer, channel),
            _ => false,
        });
        if pending {
            return false;
        }
        let index = self.index(peer, channel);
        let seq = self.channels[index].next_expected();
        self.aim = Some(Aim { index, seq, skip, base, len });
        true
    }

    /// Ends the aim, if there is one ([`Endpoint::aim`]): the endpoint no
    /// longer writes there.
    pub fn unaim(&mut self) {
        self.aim = None;
    }

    /// A datagram read into slot `slot` of `landing`: its first
    /// [`Landing::HEAD`] bytes in `head`, the next `data_len` bytes in the
    /// slot's region, the rest (`tail`) after. Handled where its data lies
    /// if it is the datagram the slot waited for, whole (its data fills
    /// the region and its MAC is `tail`), on a channel whose state has
    /// not moved since; otherwise left alone ([`Landed::Elsewhere`]).
    ///
    /// # Safety
    ///
    /// `landing` came from [`Endpoint::landing`] on this endpoint, with no
    /// call on it since but `handle_landed` with this landing, for slots
    /// in order, and none of them [`Landed::Ended`]; the first `data_len`
    /// bytes of the slot's region were written (by the read).
    pub unsafe fn handle_landed(
        &mut self,
        now: Time,
        landing: &Landing,
        slot: usize,
        head: &[u8],
        data_len: usize,
        tail: &[u8],
    ) -> Landed {
        // Set again by a caller that hands the datagram over whole.
        let arrived = self.arrived(now);
        let (place, room) = landing.region(slot);
        if head.len() != landing.head() || data_len != room || tail.len() != MAC_LEN {
            return Landed::Elsewhere;
        }
        // SAFETY: the caller says the read wrote these bytes, within the
        // message's buffer (the region), which nothing else touches now.
        let data = unsafe { std::slice::from_raw_parts(place.cast_const(), data_len) };
        let Ok(header) = decode_split(head, data, tail, &self.cfg.key, &self.accept) else {
            // Counted when the caller hands it over whole.
            return Landed::Elsewhere;
        };
        let record: &[u8; RECORD_HEADER_LEN] = head[HEADER_LEN..Landing::HEAD].try_into().expect("length checked");
        let (message_len, offset, len) = read_record_header(record);
        // The packet the slot waited for: the channel's, next in order.
        if header.packet_type != PacketType::Data
            || header.flags.contains(Flags::BEST_EFFORT)
            || (header.source, header.channel) != (landing.peer, landing.channel)
            || header.sequence != landing.seq + slot as u64
        {
            return Landed::Elsewhere;
        }
        let ch = &self.channels[landing.index];
        let payload = match landing.skip {
            // An aim's: one whole message, its first `skip` bytes in the
            // head, the aim still where this landing was lent.
            Some(skip) => {
                let holds = self.aim.as_ref().is_some_and(|a| a.index == landing.index && a.seq == header.sequence);
                if offset != 0
                    || u32::from(len) != message_len
                    || len as usize != skip + data_len
                    || !holds
                    || !ch.takes_whole(header.sequence)
                {
                    return Landed::Elsewhere;
                }
                Payload::Aimed { head: &head[Landing::HEAD..], len: data_len }
            }
            // A reassembly's: the next piece of its message, where it stands.
            None => {
                let expected = landing.offset + slot * landing.chunk;
                if len as usize != data_len
                    || offset as usize != expected
                    || !ch.lands(header.sequence, message_len, offset, data_len)
                {
                    return Landed::Elsewhere;
                }
                Payload::Landed { message_len, offset, len: data_len }
            }
        };
        self.timeout_cache.set(None);
        self.handle_decoded(now, arrived, header, payload, false);
        let ch = &self.channels[landing.index];
        if ch.failed {
            self.aim = None;
            return Landed::Ended;
        }
        if let Some(a) = self.aim.as_mut().filter(|_| landing.skip.is_some()) {
            // Delivered (not dropped for want of room): the aim moves on.
            if ch.next_expected() > a.seq {
                a.seq += 1;
                a.base = a.base.wrapping_add(landing.chunk);
                a.len -= landing.chunk;
            }
        }
        Landed::InPlace
    }

    /// Handles a decoded packet that reached this host at `arrived` (at
    /// most `now`): its samples are taken at `arrived`.
    fn handle_decoded(
        &mut self,
        now: Time,
        arrived: Time,
        header: Header,
        payload: Payload<'_>,
        in_place: bool,
    ) -> Option<InPlace> {
        let bytes = match payload {
            Payload::Bytes(bytes) => bytes,
            Payload::Landed { .. } | Payload::Aimed { .. } => &[],
        };
        let latency_on = !self.links.is_empty();
        match header.packet_type {
            PacketType::Data if header.flags.contains(Flags::RATE_CONTROLLED) => {
                self.samples_arrivals = true;
                let sent = Time::from_nanos(header.timestamp);
                let (source, channel, sequence) = (header.source, header.channel, header.sequence);
                if let Some(feedback) = self.feedback.observe(source, channel, sequence, sent, arrived) {
                    self.feedback_due.push_back((header.source, feedback));
                }
            }
            PacketType::Data | PacketType::Ack | PacketType::Prod => {}
            PacketType::Warp => {
                self.handle_warp(now, header.source, bytes);
                return None;
            }
            PacketType::Lstat if latency_on => {}
            PacketType::Probe | PacketType::ClockSync if latency_on => {
                self.handle_link_packet(arrived, &header, bytes);
                return None;
            }
            // Status frames of other designs, or latency engine packets while
            // ours are off (a peer configured differently).
            _ => {
                self.unhandled += 1;
                return None;
            }
        }
        let index = self.index(header.source, header.channel);
        let mut lstat = None;
        if latency_on {
            match header.packet_type {
                PacketType::Data if !header.flags.contains(Flags::PREMIUM) => {
                    // A sample moves no timer of the link (probes, loss
                    // deadline, clock): its slot stays as it is.
                    let cfg = self.cfg.latency.as_ref().expect("links exist only with a latency config");
                    if let Some(decision) = self.links[header.source as usize].on_data(arrived, header.timestamp, cfg) {
                        self.issue(header.source, decision);
                    }
                }
                PacketType::Lstat => match LatencyStatus::read(bytes) {
                    Ok((status, ranges)) => {
                        if let Some(mode) = self.link_mut(header.source).expect("latency is on").on_lstat(&status) {
                            let data_path = mode.data_path();
                            self.events.push_back(Event::ModeChanged { peer: header.source, data_path });
                        }
                        lstat = Some((status, ranges));
                    }
                    Err(_) => {
                        self.fail(index, "malformed LSTAT");
                        return None;
                    }
                },
                _ => {}
            }
        }
        let freed_before = self.send_pool.available();
        let in_place = in_place && self.in_place[header.channel as usize];
        let (ch, mut sh) = self.split(index);
        sh.in_place = in_place;
        let handled = match lstat {
            Some((status, ranges)) => ch.handle_lstat(now, &header, &status, ranges, &mut sh),
            None => ch.handle_packet(now, &header, payload, &mut sh),
        };
        // A message left in place was delivered, whatever came after it.
        let claimed = sh.claimed;
        if let Err(reason) = handled {
            self.fail(index, reason);
            return claimed;
        }
        if self.channels[index].blocked_on_recv_buffer() && !self.blocked_on_recv.contains(&index) {
            self.blocked_on_recv.push(index);
        }
        if self.send_pool.available() > freed_before {
            for waiting in std::mem::take(&mut self.waiting_for_buffers) {
                self.mark_ready(waiting);
            }
        }
        // Only a channel with something to send now is offered to
        // `poll_transmit`: after a data packet whose acknowledgement waits
        // (most of them) the queue stays empty, and the caller's flush
        // neither reads the clock nor looks at the channel (in an 8 B
        // ping-pong over UDP, about 210 of the 2,500 cycles each hop spent
        // in the library).
        let free = self.send_pool.available() > 0;
        if self.channels[index].has_work(free) {
            self.mark_ready(index);
        } else if !self.in_ready[index] {
            self.park(index);
        }
        if header.packet_type == PacketType::Data && self.channels[index].may_land() {
            self.landing_hint = Some(index);
        }
        claimed
    }

    /// Reassembles the next message from `peer` on `channel` of at least
    /// `tail` bytes and at most `cap + tail` that comes in several
    /// datagrams, on a reliable channel, into the `cap` bytes at `buf`: all
    /// but its last `tail` bytes, as they come (read there straight from
    /// the socket where its datagrams come in order, [`Endpoint::landing`]).
    /// With a `filter`, only a message whose last `tail` bytes came ahead
    /// of it ([`Endpoint::set_tail_ahead`] at the sender) and pass the
    /// filter: nothing is written into `buf` outside the part of such a
    /// message that goes there (where a datagram is read there ahead of
    /// its turn, [`Endpoint::landing`], it lies within that part until the
    /// right one comes). A message from
    /// there already in reassembly is that message, if it qualifies: what
    /// came of it is copied into `buf`. It is then delivered as
    /// [`Event::Placed`], its end in the event. One buffer at a time: this
    /// replaces a buffer given before, which must have been taken back
    /// ([`Endpoint::unplace`]). A peer or channel the job does not have
    /// is given nothing.
    ///
    /// # Safety
    ///
    /// `buf` is valid for writes of `cap` bytes, and neither read nor
    /// written by anyone else until [`Endpoint::unplace`] has returned
    /// (or the message placed there has been delivered and taken).
    pub unsafe fn place(
        &mut self,
        peer: u32,
        channel: u16,
        buf: *mut u8,
        cap: usize,
        tail: usize,
        filter: Option<TailFilter>,
    ) {
        if peer >= self.cfg.ranks || channel >= self.cfg.channels {
            return;
        }
        let placement = Placement { peer, channel, ptr: buf, cap, tail, filter };
        let index = self.index(peer, channel);
        let adopted = self.channels[index].adopt(&placement);
        self.placement = (!adopted).then(|| placement.clone());
        self.placed_buf = Some(placement);
    }

    /// Messages on `channel` to every peer that take more than one
    /// datagram carry their last `n` bytes (at most [`TAIL_AHEAD_MAX`]) in
    /// their first, ahead of their first piece: a receive that places
    /// messages by their end ([`Endpoint::place`] with a filter) then knows
    /// one for its own before any of it is written. 0 (the default) sends
    /// them in order. A best-effort channel sends them in order anyway.
    pub fn set_tail_ahead(&mut self, channel: u16, n: usize) -> Result<(), ConfigError> {
        if n > TAIL_AHEAD_MAX {
            return Err(ConfigError::TailAheadTooLong(n));
        }
        for ch in self.channels.iter_mut().filter(|ch| ch.id == channel) {
            ch.tail_ahead = n;
        }
        Ok(())
    }

    /// Takes back the buffer given to [`Endpoint::place`]: a message being
    /// reassembled there goes on in a buffer of its own (its start copied
    /// there), and one delivered but not yet handed out by
    /// [`Endpoint::poll_event`] becomes an [`Event::Message`]. The endpoint
    /// no longer writes there. (A [`Event::Placed`] already handed out is
    /// the caller's.)
    pub fn unplace(&mut self) {
        self.placement = None;
        let Some(Placement { peer, channel, ptr: buf, .. }) = self.placed_buf.take() else { return };
        // The one channel that may have taken it.
        let index = self.index(peer, channel);
        self.channels[index].unplace();
        for event in self.events.iter_mut() {
            if let Event::Placed { from, channel, placed, end } = event {
                let mut data = Vec::with_capacity(*placed + end.len());
                // SAFETY: the first `placed` bytes of the buffer hold the
                // message's start (the caller's until this returns).
                data.extend_from_slice(unsafe { std::slice::from_raw_parts(buf.cast_const(), *placed) });
                data.extend_from_slice(end);
                *event = Event::Message { from: *from, channel: *channel, data, start: 0 };
            }
        }
    }

    /// Lets the messages of `channel` (with every peer) be delivered in
    /// the datagrams they came in ([`Endpoint::handle_datagram_owned`]),
    /// their headers in front: [`Event::Message`]'s `start` says where each
    /// begins. For an application that reads messages where they lie.
    pub fn set_in_place(&mut self, channel: u16, on: bool) {
        self.timeout_cache.set(None);
        if let Some(slot) = self.in_place.get_mut(channel as usize) {
            *slot = on;
        }
    }

    /// Warp feedback from a receiver: the pacer of that peer adjusts; a peer
    /// not under control ignores it (it was put under control and taken out).
    fn handle_warp(&mut self, now: Time, peer: u32, payload: &[u8]) {
        let Ok(feedback) = WarpFeedback::read(payload) else {
            self.protocol_violations += 1;
            return;
        };
        match self.pacers.get_mut(peer as usize) {
            Some(Some(pacer)) => pacer.on_feedback(now, &feedback),
            _ => self.unhandled += 1,
        }
    }

    /// Puts the data sent to `peer` under Warp rate control
    /// ([`crate::rate`]), with `control`'s parameters, or (`None`) takes it
    /// out. A pacer already running keeps its rate when `control` is the
    /// same. Unknown peers and this endpoint's own rank are ignored.
    pub fn set_rate_control(&mut self, peer: u32, control: Option<&RateControl>) {
        self.timeout_cache.set(None);
        if peer == self.cfg.rank {
            return;
        }
        let (datagram, senders) = (self.cfg.max_datagram, self.cfg.ranks - 1);
        if let Some(slot) = self.pacers.get_mut(peer as usize) {
            match control {
                Some(c) if slot.is_none() => *slot = Some(Pacer::new(c, datagram, senders)),
                Some(_) => {}
                None => {
                    *slot = None;
                    for index in std::mem::take(&mut self.paced) {
                        self.mark_ready(index);
                    }
                }
            }
        }
    }

    /// Warp rate control toward `peer`: the pacer's state, and the feedback
    /// this endpoint returned to `peer` as a receiver. `None` when neither
    /// happened.
    pub fn rate_stats(&self, peer: u32) -> Option<RateStats> {
        let sent = *self.feedback_sent.get(peer as usize)?;
        let pacer = self.pacers[peer as usize].as_ref().map(|p| p.stats);
        if pacer.is_none() && sent == 0 {
            return None;
        }
        Some(RateStats { feedback_sent: sent, ..pacer.unwrap_or_default() })
    }

    fn reject(&mut self, error: &DecodeError) {
        self.rejected.record(error);
    }

    /// A probe or clock packet that arrived at `now`: it belongs to the
    /// peer, not to a channel.
    fn handle_link_packet(&mut self, now: Time, header: &Header, payload: &[u8]) {
        let peer = header.source;
        self.mark_link(peer);
        let cfg = self.cfg.latency.as_ref().expect("links exist only with a latency config");
        let link = &mut self.links[peer as usize];
        if header.packet_type == PacketType::Probe {
            let Ok(probe) = ProbePayload::read(payload) else {
                self.protocol_violations += 1;
                return;
            };
            let answer = header.flags.contains(Flags::ACK_REQUESTED);
            if let Some(decision) = link.on_probe(now, header.timestamp, &probe, answer, cfg) {
                self.issue(peer, decision);
            }
        } else {
            let Ok(sync) = ClockSyncPayload::read(payload) else {
                self.protocol_violations += 1;
                return;
            };
            link.on_clock_sync(now, &sync);
        }
        self.mark_link_ready(peer);
    }

    /// Sends a mode decision to `peer` in LSTATs: on the pair's first open
    /// channel, and on every other channel that waits for a packet (their
    /// status shows what to resend).
    fn issue(&mut self, peer: u32, decision: Decision) {
        let first = self.index(peer, 0);
        let mut carried = false;
        for index in first..first + self.cfg.channels as usize {
            let ch = self.channel_mut(index);
            if ch.failed || (carried && !ch.is_waiting()) {
                continue;
            }
            ch.queue_lstat(decision);
            carried = true;
            self.mark_ready(index);
        }
    }

    /// Timers that are due fire: tail probes and prods.
    pub fn handle_timeout(&mut self, now: Time) {
        self.timeout_cache.set(None);
        for index in std::mem::take(&mut self.paced) {
            let peer = self.channels[index].peer as usize;
            if self.pacers[peer].as_mut().is_some_and(|p| !p.may_send(now)) {
                self.paced.push(index);
            } else {
                self.mark_ready(index);
            }
        }
        // The due channels, then the due links, as a scan in index order
        // would find them.
        let due = self.due_timers(now);
        let channels = self.channels.len();
        for &slot in &due {
            if slot < channels {
                self.channels[slot].handle_timeout(now);
                self.mark_ready(slot);
                continue;
            }
            let peer = (slot - channels) as u32;
            let cfg = self.cfg.latency.as_ref().expect("links exist only with a latency config");
            if let Some(decision) = self.links[peer as usize].handle_timeout(now, cfg) {
                self.issue(peer, decision);
            }
            self.mark_link_ready(peer);
        }
        #[cfg(debug_assertions)]
        for slot in (0..channels + self.links.len()).filter(|s| due.binary_search(s).is_err()) {
            debug_assert!(
                self.slot_timeout(slot).is_none_or(|t| t > now),
                "timer slot {slot} is due but was not handled: a mutation did not mark it"
            );
        }
    }

    /// Takes the timer slots due at `now` off the heap, in slot order,
    /// after registering the deadlines of the slots that changed; they are
    /// asked again at the next refresh.
    fn due_timers(&mut self, now: Time) -> Vec<usize> {
        let mut timers = self.timers.borrow_mut();
        timers.refresh(|slot| self.slot_timeout(slot));
        timers.take_due(now)
    }

    // ----- outputs ----------------------------------------------------------

    /// Writes the next datagram to send into `buf` (at least
    /// `config().max_datagram` bytes).
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<Transmit> {
        let (t, shared) = self.poll_transmit_shared(now, buf)?;
        let Some(payload) = shared else { return Some(t) };
        let mut tag = [0; MAC_LEN];
        tag.copy_from_slice(&buf[HEADER_LEN..OVERHEAD]);
        let end = HEADER_LEN + payload.len();
        let mut at = HEADER_LEN;
        for part in payload.parts() {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        buf[end..end + MAC_LEN].copy_from_slice(&tag);
        Some(Transmit { len: end + MAC_LEN, ..t })
    }

    /// Whether [`Endpoint::poll_transmit`] may have a datagram to give now
    /// (feedback, a probe or a channel is due); false means it has none.
    pub fn has_transmit(&self) -> bool {
        !self.feedback_due.is_empty() || !self.link_ready.is_empty() || !self.ready.is_empty()
    }

    /// [`Endpoint::poll_transmit`] for a caller that sends a datagram in
    /// parts (`sendmsg(2)` with several iovecs): a data packet's payload is
    /// then shared, not copied. With `Some(payload)`, the datagram is
    /// `buf[..HEADER_LEN]`, then the payload's two parts
    /// ([`SharedPayload::parts`]), then `buf[HEADER_LEN..t.len]` (its MAC);
    /// with `None`, `buf[..t.len]` as from `poll_transmit`. Drop the payload
    /// once the datagram is sent.
    pub fn poll_transmit_shared(&mut self, now: Time, buf: &mut [u8]) -> Option<(Transmit, Option<SharedPayload>)> {
        self.timeout_cache.set(None);
        assert!(buf.len() >= self.cfg.max_datagram, "poll_transmit needs a buffer of max_datagram bytes");
        if let Some((peer, feedback)) = self.feedback_due.pop_front() {
            let len = feedback.write(&mut buf[HEADER_LEN..]);
            let mut header = Header::new(PacketType::Warp);
            header.job = job_tag(self.cfg.job);
            header.source = self.cfg.rank;
            header.destination = peer;
            header.timestamp = now.as_nanos();
            let len = seal(&header, len, &self.cfg.key, buf).expect("buffer checked above");
            let index = self.index(peer, 0);
            let stats = &mut self.channels[index].stats;
            stats.premium.control.record(len);
            stats.feedback.record(PacketType::Warp as u8, len);
            self.feedback_sent[peer as usize] += 1;
            self.count_sent(Path::Premium, false, len);
            return Some((Transmit { path: Path::Premium, to: peer, len }, None));
        }
        // Probes first: their timestamps should say when they left.
        while let Some(peer) = self.link_ready.pop_front() {
            self.mark_link(peer);
            let link = &mut self.links[peer as usize];
            link.in_ready = false;
            if let Some((path, len)) = link.poll_transmit(now, peer, &self.cfg, buf) {
                link.stats.feedback.record(buf[1], len);
                if link.has_work() {
                    self.mark_link_ready(peer);
                }
                self.count_sent(path, false, len);
                return Some((Transmit { path, to: peer, len }, None));
            }
        }
        while let Some(index) = self.ready.pop_front() {
            let peer = self.channels[index].peer as usize;
            // Samples that age move the link's next probe as data leaves
            // (`before_data`, `sent`); without them its timers stay put.
            let aging = self.cfg.latency.as_ref().is_some_and(|l| l.sample_lifetime.is_some());
            if aging {
                self.mark_link(peer as u32);
            }
            if let (Some(cfg), Some(link)) = (self.cfg.latency.as_ref(), self.links.get_mut(peer)) {
                let ch = &self.channels[index];
                if !ch.premium && ch.has_new_data() && link.before_data(now, cfg) {
                    // The probe that asks leaves next, behind this data.
                    self.mark_link_ready(peer as u32);
                }
            }
            let pacer = self.pacers[peer].as_mut();
            let rate_controlled = pacer.is_some();
            let data_allowed = pacer.is_none_or(|p| p.may_send(now));
            let (ch, mut sh) = self.split(index);
            sh.data_allowed = data_allowed;
            sh.rate_controlled = rate_controlled;
            if let Some((path, len, shared)) = ch.poll_transmit(now, buf, &mut sh) {
                let data = buf[1] == PacketType::Data as u8;
                let wire_len = len + shared.as_ref().map_or(0, |p| p.len());
                let counters = match path {
                    Path::Ordinary => &mut ch.stats.ordinary,
                    Path::Premium => &mut ch.stats.premium,
                };
                let counters = if data { &mut counters.data } else { &mut counters.control };
                counters.record(wire_len);
                if !data {
                    ch.stats.feedback.record(buf[1], wire_len);
                }
                self.count_sent(path, data, wire_len);
                if let (Some(cfg), Some(link)) = (self.cfg.latency.as_ref(), self.links.get_mut(peer)) {
                    link.sent(now, path, data, cfg);
                }
                if let (true, Some(pacer)) = (data, self.pacers[peer].as_mut()) {
                    pacer.sent();
                }
                let ch = &self.channels[index];
                let free = self.send_pool.available() > 0;
                let to = ch.peer;
                // Round robin: a channel with more to send goes to the back.
                if ch.has_work(free) {
                    self.ready.push_back(index);
                } else {
                    self.park(index);
                }
                return Some((Transmit { path, to, len }, shared));
            }
            let free = self.send_pool.available() > 0;
            if !data_allowed && self.channels[index].has_work(free) {
                self.in_ready[index] = false;
                if !self.paced.contains(&index) {
                    self.paced.push(index);
                }
                if let Some(pacer) = self.pacers[peer].as_mut() {
                    pacer.waited();
                }
                continue;
            }
            self.park(index);
        }
        None
    }

    fn count_sent(&mut self, path: Path, data: bool, len: usize) {
        let counters = match path {
            Path::Ordinary => &mut self.ordinary,
            Path::Premium => &mut self.premium,
        };
        let counters = if data { &mut counters.data } else { &mut counters.control };
        counters.record(len);
    }

    fn park(&mut self, index: usize) {
        self.in_ready[index] = false;
        if self.channels[index].waits_for_buffers() && !self.waiting_for_buffers.contains(&index) {
            self.waiting_for_buffers.push(index);
        }
    }

    /// When `handle_timeout` should be called next.
    /// Costs in proportion to the channels and links changed since the last
    /// call (their deadlines go into a heap) and to the channels waiting for
    /// their pacers, not to the number of channels.
    pub fn poll_timeout(&self) -> Option<Time> {
        if let Some(cached) = self.timeout_cache.get() {
            debug_assert_eq!(cached, self.compute_timeout(), "a stale timeout: a mutation did not clear the cache");
            return cached;
        }
        let timeout = {
            let mut timers = self.timers.borrow_mut();
            timers.refresh(|slot| self.slot_timeout(slot));
            let paced = self.paced.iter().filter_map(|&i| self.pacers[self.channels[i].peer as usize].as_ref());
            timers.next().into_iter().chain(paced.map(Pacer::next_send)).min()
        };
        debug_assert_eq!(
            timeout,
            self.compute_timeout(),
            "the timer heap disagrees with a scan: a mutation did not mark its channel or link"
        );
        self.timeout_cache.set(Some(timeout));
        timeout
    }

    /// [`Endpoint::poll_timeout`] by a scan of every channel, pacer and
    /// latency link (O(peers × channels)): what debug builds check the
    /// timer heap against.
    fn compute_timeout(&self) -> Option<Time> {
        let paced = self.paced.iter().filter_map(|&i| self.pacers[self.channels[i].peer as usize].as_ref());
        let channels = self.channels.iter().filter_map(Channel::poll_timeout).chain(paced.map(Pacer::next_send)).min();
        if self.links.is_empty() {
            return channels;
        }
        channels.into_iter().chain(self.links.iter().filter_map(PeerLink::poll_timeout)).min()
    }

    /// How many deadlines of channels and latency links the timers asked
    /// since the endpoint was made: one per slot changed between two reads
    /// of the timers, the work that [`Endpoint::poll_timeout`] and
    /// [`Endpoint::handle_timeout`] do instead of a scan of every channel.
    pub fn timer_visits(&self) -> u64 {
        self.timers.borrow().asked
    }

    /// The next message or notice for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        self.timeout_cache.set(None);
        let taken = match &event {
            Event::Message { data, start, .. } => Some(data.len() - start),
            Event::Placed { placed, end, .. } => Some(placed + end.len()),
            Event::Aimed { head, len, .. } => Some(head.len() + len),
            _ => None,
        };
        if let Some(len) = taken {
            self.recv.ready -= len;
            if !self.blocked_on_recv.is_empty() {
                self.retry_blocked();
            }
        }
        Some(event)
    }

    /// Room freed in the receive buffer: deliver held packets that waited for it.
    fn retry_blocked(&mut self) {
        for index in std::mem::take(&mut self.blocked_on_recv) {
            let (ch, mut sh) = self.split(index);
            if let Err(reason) = ch.drain_held(&mut sh) {
                self.fail(index, reason);
                continue;
            }
            if self.channels[index].blocked_on_recv_buffer() {
                self.blocked_on_recv.push(index);
            }
        }
    }

    // ----- observation ------------------------------------------------------

    /// Peers that have acknowledged none of our outstanding data for `after`
    /// or longer, despite probes: unreachable or dead.
    pub fn unresponsive_peers(&self, now: Time, after: std::time::Duration) -> Vec<u32> {
        let mut peers: Vec<u32> =
            self.channels.iter().filter(|c| c.unanswered_for(now) >= after).map(|c| c.peer).collect();
        peers.dedup();
        peers
    }

    /// The state of every channel that is not idle, one per line: what a
    /// stalled job shows to whoever debugs it.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "rank {} {:?} ready {:?} waiting {:?} blocked {:?}\n",
            self.cfg.rank,
            self.memory(),
            self.ready,
            self.waiting_for_buffers,
            self.blocked_on_recv
        );
        for (peer, link) in self.links.iter().enumerate().filter(|(_, l)| l.mode() == Mode::HighLatency) {
            out.push_str(&format!("  peer {peer}: {} mode, {:?}\n", link.mode(), link.stats));
        }
        for ch in self.channels.iter().filter(|c| !c.is_idle() || c.is_waiting()) {
            out.push_str("  ");
            out.push_str(&ch.describe());
            out.push('\n');
        }
        out
    }

    /// The bytes its structures take now (see [`Footprint`]). An endpoint
    /// holds `ranks × channels` channels whatever it sends, and a few
    /// words per rank besides: its fixed part grows with the job.
    pub fn footprint(&self) -> Footprint {
        use std::mem::size_of;
        let lists = [&self.waiting_for_buffers, &self.blocked_on_recv, &self.paced];
        let peer_state = self.in_ready.capacity()
            + self.ready.capacity() * size_of::<usize>()
            + lists.iter().map(|l| l.capacity() * size_of::<usize>()).sum::<usize>()
            + self.links.capacity() * size_of::<PeerLink>()
            + self.links.iter().map(PeerLink::heap_bytes).sum::<usize>()
            + self.link_ready.capacity() * size_of::<u32>()
            + self.in_place.capacity()
            + self.pacers.capacity() * size_of::<Option<Pacer>>()
            + self.feedback.heap_bytes()
            + self.feedback_due.capacity() * size_of::<(u32, WarpFeedback)>()
            + self.feedback_sent.capacity() * size_of::<u64>()
            + self.timers.borrow().heap_bytes();
        let events = self.events.capacity() * size_of::<Event>()
            + self
                .events
                .iter()
                .map(|e| match e {
                    Event::Message { data, .. } => data.capacity(),
                    _ => 0,
                })
                .sum::<usize>();
        Footprint {
            endpoint: size_of::<Endpoint>(),
            channels: self.channels.len(),
            channel_structs: self.channels.capacity() * size_of::<Channel>(),
            channel_heap: self.channels.iter().map(Channel::heap_bytes).sum(),
            peer_state,
            free_buffers: self.send_pool.free_bytes() + self.recv_pool.free_bytes(),
            events,
        }
    }

    pub fn memory(&self) -> Memory {
        Memory {
            send_packets: self.send_pool.in_use(),
            recv_packets: self.recv_pool.in_use(),
            pending_bytes: self.pending_bytes,
            ready_bytes: self.recv.ready,
            partial_bytes: self.recv.partial,
        }
    }

    pub fn channel_stats(&self, peer: u32, channel: u16) -> Option<ChannelStats> {
        (peer < self.cfg.ranks && channel < self.cfg.channels).then(|| self.channels[self.index(peer, channel)].stats)
    }

    pub fn stats(&self) -> EndpointStats {
        let mut total = ChannelStats::default();
        for ch in &self.channels {
            total.add(&ch.stats);
        }
        let mut latency = LatencyStats::default();
        for link in &self.links {
            latency.add(&link.stats);
        }
        EndpointStats {
            channels: total,
            rejected: self.rejected,
            protocol_violations: self.protocol_violations,
            unhandled: self.unhandled,
            ordinary: self.ordinary,
            premium: self.premium,
            latency,
        }
    }

    // ----- latency engines (all `None` or defaults while they are off) ------

    /// The mode in which this endpoint sends data to `peer`.
    pub fn mode(&self, peer: u32) -> Mode {
        self.links.get(peer as usize).map_or(Mode::LowLatency, PeerLink::mode)
    }

    /// The mode this endpoint, as receiver, last asked `peer` to use.
    pub fn requested_mode(&self, peer: u32) -> Mode {
        self.links.get(peer as usize).map_or(Mode::LowLatency, PeerLink::requested_mode)
    }

    /// The latency engines' counters toward `peer`.
    pub fn latency_stats(&self, peer: u32) -> Option<LatencyStats> {
        self.links.get(peer as usize).map(|l| l.stats)
    }

    /// The one-way latency last measured on the ordinary path from `peer`.
    pub fn last_latency(&self, peer: u32) -> Option<Duration> {
        self.links.get(peer as usize).and_then(PeerLink::last_latency)
    }

    /// How `peer`'s clock maps onto ours, as far as this endpoint knows.
    pub fn clock_estimate(&self, peer: u32) -> Option<ClockEstimate> {
        let cfg = self.cfg.latency.as_ref()?;
        self.links.get(peer as usize).and_then(|l| l.clock_estimate(cfg))
    }

    /// A channel together with the endpoint resources it works with.
    fn split(&mut self, index: usize) -> (&mut Channel, Shared<'_>) {
        self.timers.get_mut().mark(index);
        let peer = self.channels[index].peer as usize;
        let data_path = match self.cfg.premium_only || self.channels[index].premium {
            true => Path::Premium,
            false => self.links.get(peer).map_or(Path::Ordinary, PeerLink::data_path),
        };
        let sh = Shared {
            cfg: &self.cfg,
            send_pool: &mut self.send_pool,
            recv_pool: &mut self.recv_pool,
            events: &mut self.events,
            recv: &mut self.recv,
            pending_bytes: &mut self.pending_bytes,
            send_rate: &mut self.send_rate,
            data_path,
            in_place: false,
            claimed: None,
            placement: &mut self.placement,
            data_allowed: true,
            rate_controlled: false,
        };
        (&mut self.channels[index], sh)
    }

    /// Closes a channel whose peer broke the protocol, and tells the application.
    fn fail(&mut self, index: usize, reason: &'static str) {
        self.timers.get_mut().mark(index);
        let ch = &mut self.channels[index];
        ch.failed = true;
        self.protocol_violations += 1;
        self.events.push_back(Event::ProtocolViolation { peer: ch.peer, channel: ch.id, reason });
    }

    /// A channel to change: its timers are asked again before they are read.
    fn channel_mut(&mut self, index: usize) -> &mut Channel {
        self.timers.get_mut().mark(index);
        &mut self.channels[index]
    }

    /// The latency link to `peer` (if latency is on), to change.
    fn link_mut(&mut self, peer: u32) -> Option<&mut PeerLink> {
        if (peer as usize) < self.links.len() {
            self.mark_link(peer);
        }
        self.links.get_mut(peer as usize)
    }

    fn mark_link(&mut self, peer: u32) {
        let slot = self.channels.len() + peer as usize;
        self.timers.get_mut().mark(slot);
    }

    /// The deadline of a timer slot: a channel's, or a latency link's.
    fn slot_timeout(&self, slot: usize) -> Option<Time> {
        match self.channels.get(slot) {
            Some(ch) => ch.poll_timeout(),
            None => self.links[slot - self.channels.len()].poll_timeout(),
        }
    }

    fn index(&self, peer: u32, channel: u16) -> usize {
        peer as usize * self.cfg.channels as usize + channel as usize
    }

    fn mark_link_ready(&mut self, peer: u32) {
        let link = &mut self.links[peer as usize];
        if !link.in_ready && link.has_work() {
            link.in_ready = true;
            self.link_ready.push_back(peer);
        }
    }

    fn mark_ready(&mut self, index: usize) {
        if !self.in_ready[index] {
            self.in_ready[index] = true;
            self.ready.push_back(index);
        }
    }
}
