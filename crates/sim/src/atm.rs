//! The network of seed 000 §4.1: hosts on 155 Mb/s links to one
//! output-queued cell switch, with background traffic on the port toward the
//! receiving task, two priority levels in a shared buffer, push-out of
//! ordinary cells, and explicit-rate (ERICA) control of the premium class.
//!
//! [`AtmNetwork`] implements [`Network`], so the same `proto::Endpoint` that
//! runs on real sockets runs over it. A datagram becomes a cell class:
//!
//! | datagram | class | switch priority |
//! | --- | --- | --- |
//! | data on `Path::Ordinary` | [`CellClass::Ordinary`] (the paper's UBR) | low |
//! | data on `Path::Premium` | [`CellClass::Premium`] (ABR, ERICA-controlled, peak 50 Mb/s) | low |
//! | anything else on `Path::Premium` (acks, prods, status, LSTAT, clock) | [`CellClass::Feedback`] (VBR) | high |
//! | anything else on `Path::Ordinary` (latency probes) | [`CellClass::Ordinary`] | low |
//!
//! [`DataClass::AllPremium`] sends every data datagram as premium whatever
//! its path: the paper's "ABR only" baseline, where the AAL's one data
//! connection is an ABR one.
//!
//! A datagram of `n` bytes is cut into `ceil(n / 48)` cells of 53 bytes (no
//! AAL5 trailer: the datagram's MAC already does the CRC's work). It arrives
//! when its last cell leaves the switch, and is lost if any of its cells is
//! dropped, as an AAL5 frame is. The paper's AAL uses one-cell frames so that
//! a lost cell costs exactly one retransmitted cell; a bulkwire datagram has
//! 60 bytes of header and MAC, more than a cell's payload, so it needs at
//! least two cells and one lost cell loses them all (see
//! `docs/EXPERIMENTS.md`, "Service switching").
//!
//! # The switch
//!
//! Each host has an output port on the switch, a 155 Mb/s link toward it.
//! A port sends one cell per cell time (2.735 µs), the high-priority queue
//! first. Both queues share `buffer_cells`. A cell that finds the buffer full
//! is dropped (drop-tail), except that a premium or feedback cell pushes out
//! the most recently queued ordinary cell, if there is one, and takes its
//! place. The port toward the receiving task also carries the background:
//! ON-OFF sources with exponential ON and OFF times, each sending at its peak
//! rate while ON; some are ordinary, the others premium sources under ERICA.
//!
//! # ERICA and the premium sources
//!
//! Every port runs ERICA (Jain et al.): over each measurement interval (30
//! cells arriving) it measures the premium input rate, the high-priority
//! rate and the number of active premium connections, and from them the
//! premium capacity (target utilisation × what the high-priority class
//! leaves), the overload factor z and the fair share. Each forward resource
//! management (RM) cell gets the explicit rate max(fair share, CCR / z),
//! capped at the capacity, and carries it back to its source, which sets its
//! allowed cell rate (ACR) as in ATM Forum TM 4.0: at most ACR + RIF·PCR, at
//! most the explicit rate, at most the peak rate. A source sends an RM cell
//! after every Nrm − 1 data cells and falls back to its initial rate after
//! ADTF without sending. The explicit rate is stamped when the RM cell
//! reaches the port and returns to the source a fixed reverse delay later;
//! the backward RM cell itself is not queued (the reverse ports carry no
//! background).
//!
//! # How fates are decided
//!
//! The `Network` trait delivers a datagram, or not, when it is sent. So when
//! a host sends, the port is brought up to that instant, the new cells are
//! added to its arrivals, and a copy of the port is run forward until they
//! have all left or been dropped; that decides the delivery time or the
//! loss. The copy sees the background exactly (it draws from the port's own
//! random stream, which the real port will draw identically) and every host
//! cell already sent; it cannot see host cells sent later. In the real
//! switch a later feedback cell could overtake a queued cell (one cell time
//! each) and a later premium cell could push out a queued ordinary cell of
//! the same task. The task sends well under 1% of the port's cells, so this
//! is rare; the real port does see those later cells and their effect on
//! everything after them.
//!
//! Everything random draws from [`AtmConfig::seed`], each port from its own
//! stream of it; the simulator's own stream is not used, so a seed gives the
//! same background whatever the hosts do.

use std::collections::BTreeMap;
use std::time::Duration;

use bulkwire_proto::{Path, Time};
use bulkwire_wire::PacketType;
use rand::Rng;
use serde::Serialize;

use crate::network::{Datagram, Delivery, NetStats, Network};
use crate::rng::{self, SimRng, Stream};

/// Link rate of every link, bits per second (the paper's 155 Mb/s).
pub const LINK_BPS: f64 = 155e6;
/// Bytes of a cell on the wire.
pub const CELL_BYTES: usize = 53;
/// Bytes of a cell's payload.
pub const CELL_PAYLOAD: usize = 48;
const CELL_BITS: u128 = CELL_BYTES as u128 * 8;
const LINK_BPS_INT: u128 = 155_000_000;

/// The slot (cell time on a link) in which `t` falls.
pub fn slot_of(t: Time) -> u64 {
    (t.as_nanos() as u128 * LINK_BPS_INT / (CELL_BITS * 1_000_000_000)) as u64
}

/// The start of `slot`, rounded up to the nanosecond.
pub fn slot_start(slot: u64) -> Time {
    Time::from_nanos((slot as u128 * CELL_BITS * 1_000_000_000).div_ceil(LINK_BPS_INT) as u64)
}

/// One cell time on a 155 Mb/s link.
pub fn cell_time() -> Duration {
    Duration::from_nanos((CELL_BITS * 1_000_000_000 / LINK_BPS_INT) as u64)
}

/// Cells needed for a datagram of `bytes`.
pub fn cells_for(bytes: usize) -> usize {
    bytes.div_ceil(CELL_PAYLOAD).max(1)
}

/// Service class of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum CellClass {
    /// The guaranteed class (the paper's VBR): high priority, carries feedback.
    Feedback,
    /// Premium data (ABR): low priority, never pushed out, rate set by ERICA.
    Premium,
    /// Ordinary data (UBR): low priority, pushed out when the buffer is full.
    Ordinary,
}

impl CellClass {
    pub const ALL: [CellClass; 3] = [CellClass::Feedback, CellClass::Premium, CellClass::Ordinary];

    fn index(self) -> usize {
        self as usize
    }

    fn high_priority(self) -> bool {
        self == CellClass::Feedback
    }
}

/// Which class carries data datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum DataClass {
    /// By the path the endpoint chose: ordinary on `Path::Ordinary`, premium
    /// on `Path::Premium`.
    ByPath,
    /// Premium whatever the path (the "premium only" baseline).
    AllPremium,
}

/// The premium (ABR) source parameters, as in ATM Forum TM 4.0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AbrParams {
    /// Peak cell rate, bits per second (Table 1: 50 Mb/s).
    pub peak_bps: f64,
    /// Initial cell rate, bits per second (TM 4.0 default: the peak rate).
    pub initial_bps: f64,
    /// Floor of the allowed rate, bits per second (TM 4.0's TCR, 10 cells/s).
    pub min_bps: f64,
    /// Rate increase factor: the ACR grows by at most RIF·PCR per RM cell.
    pub rate_increase: f64,
    /// An RM cell after every `nrm - 1` data cells (Table 1: 32).
    pub nrm: u32,
    /// After this long without sending, the ACR falls back to the initial
    /// rate (Table 1: 0.5 s).
    pub adtf: Duration,
}

impl Default for AbrParams {
    fn default() -> Self {
        AbrParams {
            peak_bps: 50e6,
            initial_bps: 50e6,
            min_bps: 10.0 * CELL_BITS as f64,
            rate_increase: 1.0 / 16.0,
            nrm: 32,
            adtf: Duration::from_millis(500),
        }
    }
}

/// ERICA parameters of a port (Table 1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EricaParams {
    /// Fraction of the capacity the premium class is steered to.
    pub target_utilisation: f64,
    /// Cells arriving at the port per measurement interval.
    pub interval_cells: u32,
}

impl Default for EricaParams {
    fn default() -> Self {
        EricaParams { target_utilisation: 0.9, interval_cells: 30 }
    }
}

/// The background on the congested port: `sources` exponential ON-OFF
/// sources, `premium_sources` of them under ERICA, the rest ordinary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Background {
    pub sources: usize,
    pub premium_sources: usize,
    /// Rate of a source while ON, as a fraction of the link rate.
    pub peak: f64,
    /// Mean ON time.
    pub mean_on: Duration,
    /// ρ: the mean offered load of all sources together, as a fraction of the
    /// link rate. The mean OFF time follows from it.
    pub load: f64,
}

impl Background {
    /// The experiments' background at load `load`: ten sources, half of them
    /// premium, each at a quarter of the link rate while ON for 10 ms on
    /// average (about 900 cells, a buffer's worth), so that the link
    /// overflows only when five or more are ON together.
    pub fn paper(load: f64) -> Background {
        Background { sources: 10, premium_sources: 5, peak: 0.25, mean_on: Duration::from_millis(10), load }
    }

    /// Fraction of time a source is ON.
    pub fn duty_cycle(&self) -> f64 {
        (self.load / (self.sources as f64 * self.peak)).clamp(0.0, 1.0)
    }

    /// Mean OFF time giving the configured load.
    pub fn mean_off(&self) -> Duration {
        let d = self.duty_cycle();
        if d <= 0.0 {
            return Duration::MAX;
        }
        self.mean_on.mul_f64((1.0 - d) / d)
    }
}

/// The whole network.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AtmConfig {
    pub hosts: usize,
    /// Shared buffer of each output port, cells.
    pub buffer_cells: usize,
    /// Propagation delay of each link (host to switch, switch to host).
    pub propagation: Duration,
    /// The host whose port carries the background, if any.
    pub congested_port: Option<usize>,
    pub background: Background,
    pub abr: AbrParams,
    pub erica: EricaParams,
    pub data_class: DataClass,
    /// Seed of the network's own random stream (the background).
    pub seed: u64,
}

impl AtmConfig {
    /// Two hosts (the sending task 0 and the receiving task 1), the
    /// background on the port toward task 1 at load `load`, Table 1's ABR
    /// and ERICA parameters, a 1,000-cell shared buffer (2.7 ms at 155 Mb/s;
    /// the paper does not give its size) and 5 µs links (1 km of fibre).
    pub fn paper(seed: u64, load: f64, data_class: DataClass) -> AtmConfig {
        AtmConfig {
            hosts: 2,
            buffer_cells: 1000,
            propagation: Duration::from_micros(5),
            congested_port: Some(1),
            background: Background::paper(load),
            abr: AbrParams::default(),
            erica: EricaParams::default(),
            data_class,
            seed,
        }
    }
}

// ----- premium sources -------------------------------------------------

/// The rate state of one premium (ABR) source.
#[derive(Clone, Debug)]
pub struct AbrSource {
    params: AbrParams,
    /// Allowed cell rate, bits per second.
    acr: f64,
    /// Cells sent, RM cells included (every `nrm`-th is an RM cell).
    cells: u64,
    /// When the last cell left.
    last_cell: Option<Time>,
    /// The earliest time the next cell may leave.
    next_free: Time,
}

impl AbrSource {
    pub fn new(params: AbrParams) -> AbrSource {
        AbrSource { acr: params.initial_bps, params, cells: 0, last_cell: None, next_free: Time::ZERO }
    }

    /// Allowed cell rate, bits per second.
    pub fn acr(&self) -> f64 {
        self.acr
    }

    /// A backward RM cell carrying explicit rate `er` (bits per second) arrived.
    pub fn feedback(&mut self, er: f64) {
        let p = &self.params;
        self.acr = (self.acr + p.rate_increase * p.peak_bps).min(er).min(p.peak_bps).max(p.min_bps);
    }

    /// Sends one cell that is ready at `ready`: returns when it leaves and
    /// whether it is an RM cell (then the data cell must try again).
    fn next_cell(&mut self, ready: Time) -> (Time, bool) {
        if self.last_cell.is_some_and(|last| ready.since(last) > self.params.adtf) {
            self.acr = self.acr.min(self.params.initial_bps);
        }
        let at = ready.max(self.next_free);
        self.next_free = at + Duration::from_secs_f64(CELL_BITS as f64 / self.acr);
        self.last_cell = Some(at);
        self.cells += 1;
        (at, self.cells % self.params.nrm as u64 == 1)
    }
}

// ----- the output port -------------------------------------------------

/// What a queued cell is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Occupant {
    Background(CellClass),
    Host { datagram: u64, class: CellClass },
}

impl Occupant {
    fn class(self) -> CellClass {
        match self {
            Occupant::Background(c) | Occupant::Host { class: c, .. } => c,
        }
    }
}

/// `count` consecutive cells of the same kind (the queues are run-length
/// encoded, so copying a port is cheap).
#[derive(Clone, Copy, Debug)]
struct Run {
    occupant: Occupant,
    count: u32,
}

#[derive(Clone, Debug, Default)]
struct Queue {
    runs: std::collections::VecDeque<Run>,
    len: usize,
}

impl Queue {
    fn push(&mut self, occupant: Occupant) {
        self.len += 1;
        if let Some(last) = self.runs.back_mut() {
            if last.occupant == occupant {
                last.count += 1;
                return;
            }
        }
        self.runs.push_back(Run { occupant, count: 1 });
    }

    fn pop(&mut self) -> Option<Occupant> {
        let front = self.runs.front_mut()?;
        let occupant = front.occupant;
        front.count -= 1;
        if front.count == 0 {
            self.runs.pop_front();
        }
        self.len -= 1;
        Some(occupant)
    }

    /// Removes the most recently queued ordinary cell.
    fn push_out_ordinary(&mut self) -> Option<Occupant> {
        let i = self.runs.iter().rposition(|r| r.occupant.class() == CellClass::Ordinary)?;
        let run = &mut self.runs[i];
        let occupant = run.occupant;
        run.count -= 1;
        if run.count == 0 {
            self.runs.remove(i);
            // Join the neighbours if they are now of one kind.
            if i > 0 && i < self.runs.len() && self.runs[i - 1].occupant == self.runs[i].occupant {
                self.runs[i - 1].count += self.runs[i].count;
                self.runs.remove(i);
            }
        }
        self.len -= 1;
        Some(occupant)
    }
}

/// One ON-OFF background source.
#[derive(Clone, Debug)]
struct OnOffSource {
    /// `Some` for a premium source: its rate state and its ERICA connection.
    abr: Option<(AbrSource, usize)>,
    on: bool,
    /// Slot (fractional) at which the current ON or OFF period ends.
    until: f64,
    /// Slot of the next cell generated while ON.
    next_gen: f64,
    /// Cells generated and not yet sent (premium sources, held back by ERICA).
    backlog: u64,
    /// Slot before which a premium source may not send.
    next_emit: f64,
}

/// ERICA's measurements and their results for one port.
#[derive(Clone, Debug)]
struct Erica {
    params: EricaParams,
    start: u64,
    cells: u32,
    premium_cells: u32,
    feedback_cells: u32,
    /// Interval in which each connection last sent, by connection index.
    seen: Vec<u64>,
    interval: u64,
    active: u32,
    /// Results of the last closed interval, bits per second.
    capacity: f64,
    overload: f64,
    fair_share: f64,
}

impl Erica {
    fn new(params: EricaParams, connections: usize) -> Erica {
        let capacity = params.target_utilisation * LINK_BPS;
        Erica {
            params,
            start: 0,
            cells: 0,
            premium_cells: 0,
            feedback_cells: 0,
            seen: vec![u64::MAX; connections],
            interval: 0,
            active: 0,
            capacity,
            overload: 0.0,
            fair_share: capacity,
        }
    }

    fn arrival(&mut self, slot: u64, class: CellClass, connection: Option<usize>) {
        self.cells += 1;
        match class {
            CellClass::Premium => self.premium_cells += 1,
            CellClass::Feedback => self.feedback_cells += 1,
            CellClass::Ordinary => {}
        }
        if let Some(c) = connection {
            if c >= self.seen.len() {
                self.seen.resize(c + 1, u64::MAX);
            }
            if self.seen[c] != self.interval {
                self.seen[c] = self.interval;
                self.active += 1;
            }
        }
        if self.cells >= self.params.interval_cells {
            self.close(slot + 1);
        }
    }

    fn close(&mut self, slot: u64) {
        let span = (slot - self.start).max(1) as f64 * CELL_BITS as f64 / LINK_BPS; // seconds
        let cell_rate = |cells: u32| cells as f64 * CELL_BITS as f64 / span;
        let high = cell_rate(self.feedback_cells).min(LINK_BPS);
        self.capacity = self.params.target_utilisation * (LINK_BPS - high);
        self.overload = cell_rate(self.premium_cells) / self.capacity.max(1.0);
        self.fair_share = self.capacity / self.active.max(1) as f64;
        self.start = slot;
        self.cells = 0;
        self.premium_cells = 0;
        self.feedback_cells = 0;
        self.active = 0;
        self.interval += 1;
    }

    /// The explicit rate for a connection currently sending at `ccr`.
    fn explicit_rate(&self, ccr: f64) -> f64 {
        let vc_share = if self.overload > 0.0 { ccr / self.overload } else { f64::INFINITY };
        self.fair_share.max(vc_share).min(self.capacity)
    }
}

/// A host cell on its way to a port.
#[derive(Clone, Copy, Debug)]
struct HostArrival {
    datagram: u64,
    class: CellClass,
    /// An RM cell: the current cell rate of its connection and the host
    /// pair the explicit rate goes back to.
    rm: Option<(f64, usize)>,
    /// The ERICA connection of a premium cell.
    connection: Option<usize>,
}

/// The fate of the cells of one watched datagram.
#[derive(Clone, Copy, Debug, Default)]
struct Watch {
    datagram: u64,
    remaining: usize,
    dropped: usize,
    last_departure: u64,
}

/// Counts per class at a port, host and background cells apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassCounts {
    pub arrived: u64,
    pub dropped: u64,
    /// Of `dropped`: pushed out of the queue by a premium or feedback cell.
    pub pushed_out: u64,
    pub departed: u64,
}

/// What a port saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortStats {
    /// By class: feedback, premium, ordinary.
    pub background: [ClassCounts; 3],
    pub host: [ClassCounts; 3],
    pub slots: u64,
    pub busy_slots: u64,
    pub max_queue: usize,
}

/// One output port: a 155 Mb/s link, two priority queues in a shared buffer,
/// ERICA, and the background sources that feed it.
#[derive(Clone, Debug)]
pub struct OutputPort {
    buffer_cells: usize,
    /// The next slot to process.
    slot: u64,
    high: Queue,
    low: Queue,
    sources: Vec<OnOffSource>,
    mean_on_slots: f64,
    mean_off_slots: f64,
    /// Slots between two cells of a source while ON.
    source_spacing: f64,
    /// Explicit rates on their way back to background sources: (slot, source, rate).
    returning: std::collections::VecDeque<(u64, usize, f64)>,
    return_slots: u64,
    erica: Erica,
    rng: SimRng,
    /// Host cells not yet arrived, by (slot, order).
    arrivals: BTreeMap<(u64, u64), HostArrival>,
    order: u64,
    watch: Option<Watch>,
    /// Explicit rates for host connections: (slot stamped, host pair, rate).
    host_feedback: Vec<(u64, usize, f64)>,
    stats: PortStats,
}

impl OutputPort {
    /// A port with `background` (none if `background` is `None`), drawn
    /// from `rng`.
    pub fn new(
        buffer_cells: usize,
        background: Option<&Background>,
        abr: &AbrParams,
        erica: &EricaParams,
        return_delay: Duration,
        mut rng: SimRng,
    ) -> OutputPort {
        let slot_secs = CELL_BITS as f64 / LINK_BPS;
        let (mean_on_slots, mean_off_slots, source_spacing) = match background {
            Some(b) if b.duty_cycle() > 0.0 => (
                b.mean_on.as_secs_f64() / slot_secs,
                if b.duty_cycle() >= 1.0 { 0.0 } else { b.mean_off().as_secs_f64() / slot_secs },
                1.0 / b.peak.clamp(1e-9, 1.0),
            ),
            _ => (0.0, 0.0, 1.0),
        };
        let mut sources = Vec::new();
        if let Some(b) = background.filter(|b| b.duty_cycle() > 0.0) {
            let duty = b.duty_cycle();
            for i in 0..b.sources {
                // Start in the stationary state, so there is no warm-up.
                let on = rng.random_bool(duty);
                let mean = if on { mean_on_slots } else { mean_off_slots };
                let until = exponential(&mut rng, mean);
                let premium = i < b.premium_sources;
                sources.push(OnOffSource {
                    abr: premium.then(|| (AbrSource::new(abr.clone()), i)),
                    on,
                    until,
                    next_gen: if on { rng.random::<f64>() * source_spacing } else { until },
                    backlog: 0,
                    next_emit: 0.0,
                });
            }
        }
        OutputPort {
            buffer_cells,
            slot: 0,
            high: Queue::default(),
            low: Queue::default(),
            erica: Erica::new(erica.clone(), sources.len()),
            sources,
            mean_on_slots,
            mean_off_slots,
            source_spacing,
            returning: Default::default(),
            return_slots: (return_delay.as_secs_f64() / slot_secs).ceil() as u64,
            rng,
            arrivals: BTreeMap::new(),
            order: 0,
            watch: None,
            host_feedback: Vec::new(),
            stats: PortStats::default(),
        }
    }

    pub fn stats(&self) -> &PortStats {
        &self.stats
    }

    /// Cells queued now.
    pub fn queued(&self) -> usize {
        self.high.len + self.low.len
    }

    /// The allowed rates of the premium background sources, bits per second.
    pub fn background_rates(&self) -> Vec<f64> {
        self.sources.iter().filter_map(|s| s.abr.as_ref().map(|(a, _)| a.acr())).collect()
    }

    /// A host cell will arrive at `at`.
    fn add_arrival(&mut self, at: Time, cell: HostArrival) {
        self.order += 1;
        self.arrivals.insert((slot_of(at), self.order), cell);
    }

    /// Processes every slot before `slot`.
    pub fn advance_to(&mut self, slot: u64) {
        while self.slot < slot {
            if self.queued() == 0 {
                // Nothing to send: jump to the next slot in which something arrives.
                let next = self.next_arrival_slot().min(slot);
                if next > self.slot {
                    self.stats.slots += next - self.slot;
                    self.slot = next;
                    continue;
                }
            }
            self.step();
        }
    }

    /// Runs until the watched datagram's cells have all left or been dropped.
    fn resolve_watch(&mut self) -> Watch {
        while self.watch.is_some_and(|w| w.remaining > 0) {
            let next = self.slot + 1;
            self.advance_to(next);
        }
        self.watch.take().expect("watched")
    }

    fn next_arrival_slot(&self) -> u64 {
        let mut next = f64::INFINITY;
        for s in &self.sources {
            next = next.min(s.until);
            if s.on {
                next = next.min(s.next_gen);
            }
            if s.backlog > 0 {
                next = next.min(s.next_emit);
            }
        }
        let mut slot = if next.is_finite() { next.max(0.0) as u64 } else { u64::MAX };
        if let Some((&(s, _), _)) = self.arrivals.first_key_value() {
            slot = slot.min(s);
        }
        if let Some(&(s, _, _)) = self.returning.front() {
            slot = slot.min(s);
        }
        slot
    }

    /// One slot: what arrives in it, then one cell leaves.
    fn step(&mut self) {
        let slot = self.slot;
        while self.returning.front().is_some_and(|r| r.0 <= slot) {
            let (_, source, er) = self.returning.pop_front().expect("checked");
            if let Some((abr, _)) = self.sources[source].abr.as_mut() {
                abr.feedback(er);
            }
        }
        let end = (slot + 1) as f64;
        for i in 0..self.sources.len() {
            self.source_arrivals(i, slot, end);
        }
        while let Some(entry) = self.arrivals.first_entry() {
            if entry.key().0 > slot {
                break;
            }
            let cell = entry.remove();
            self.host_arrival(slot, cell);
        }
        self.stats.slots += 1;
        self.stats.max_queue = self.stats.max_queue.max(self.queued());
        let departed = if self.high.len > 0 { self.high.pop() } else { self.low.pop() };
        if let Some(occupant) = departed {
            self.stats.busy_slots += 1;
            self.counts(occupant).departed += 1;
            self.resolve(occupant, Some(slot));
        }
        self.slot += 1;
    }

    fn source_arrivals(&mut self, i: usize, slot: u64, end: f64) {
        let spacing = self.source_spacing;
        loop {
            let s = &mut self.sources[i];
            let mut generated = 0;
            if s.on {
                while s.next_gen < end && s.next_gen < s.until {
                    s.next_gen += spacing;
                    generated += 1;
                }
            }
            if s.abr.is_some() {
                s.backlog += generated;
            } else {
                for _ in 0..generated {
                    self.enqueue(slot, Occupant::Background(CellClass::Ordinary), None);
                }
            }
            let s = &mut self.sources[i];
            if s.until >= end {
                break;
            }
            s.on = !s.on;
            let mean = if s.on { self.mean_on_slots } else { self.mean_off_slots };
            let start = s.until;
            s.until = start + exponential(&mut self.rng, mean);
            if s.on {
                s.next_gen = start;
            }
        }
        let s = &mut self.sources[i];
        let Some((abr, connection)) = s.abr.as_mut() else { return };
        if s.backlog == 0 || s.next_emit >= end {
            return;
        }
        // One premium cell in this slot, paced at min(ACR, peak).
        let now = slot_start(slot);
        let (_, rm) = abr.next_cell(now);
        let spacing = (LINK_BPS / abr.acr()).max(self.source_spacing);
        s.next_emit = s.next_emit.max(slot as f64) + spacing;
        let connection = *connection;
        let ccr = abr.acr();
        if !rm {
            s.backlog -= 1;
        }
        if self.enqueue(slot, Occupant::Background(CellClass::Premium), Some(connection)) && rm {
            let er = self.erica.explicit_rate(ccr);
            self.returning.push_back((slot + self.return_slots, i, er));
        }
    }

    fn host_arrival(&mut self, slot: u64, cell: HostArrival) {
        let occupant = Occupant::Host { datagram: cell.datagram, class: cell.class };
        if self.enqueue(slot, occupant, cell.connection) {
            if let Some((ccr, pair)) = cell.rm {
                let er = self.erica.explicit_rate(ccr);
                self.host_feedback.push((slot, pair, er));
            }
        }
    }

    /// A cell arrives: queued (true) or dropped.
    fn enqueue(&mut self, slot: u64, occupant: Occupant, connection: Option<usize>) -> bool {
        let class = occupant.class();
        self.erica.arrival(slot, class, connection.filter(|_| class == CellClass::Premium));
        self.counts(occupant).arrived += 1;
        if self.queued() >= self.buffer_cells {
            let victim = if class == CellClass::Ordinary { None } else { self.low.push_out_ordinary() };
            let Some(victim) = victim else {
                self.counts(occupant).dropped += 1;
                self.resolve(occupant, None);
                return false;
            };
            let counts = self.counts(victim);
            counts.dropped += 1;
            counts.pushed_out += 1;
            self.resolve(victim, None);
        }
        if class.high_priority() {
            self.high.push(occupant);
        } else {
            self.low.push(occupant);
        }
        true
    }

    fn counts(&mut self, occupant: Occupant) -> &mut ClassCounts {
        match occupant {
            Occupant::Background(c) => &mut self.stats.background[c.index()],
            Occupant::Host { class, .. } => &mut self.stats.host[class.index()],
        }
    }

    /// A cell left at the end of `departed`, or was dropped (`None`).
    fn resolve(&mut self, occupant: Occupant, departed: Option<u64>) {
        let Occupant::Host { datagram, .. } = occupant else { return };
        let Some(w) = self.watch.as_mut().filter(|w| w.datagram == datagram) else { return };
        w.remaining -= 1;
        match departed {
            Some(slot) => w.last_departure = w.last_departure.max(slot),
            None => w.dropped += 1,
        }
    }
}

fn exponential(rng: &mut SimRng, mean: f64) -> f64 {
    let u: f64 = 1.0 - rng.random::<f64>();
    -mean * u.ln()
}

// ----- the network -----------------------------------------------------

/// What the task's cells did, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TaskClassStats {
    /// Cells of data datagrams.
    pub data_cells: u64,
    pub data_cells_lost: u64,
    /// Cells of other datagrams (acks, prods, status, probes).
    pub control_cells: u64,
    pub control_cells_lost: u64,
    pub datagrams: u64,
    pub datagrams_lost: u64,
}

/// What the hosts' traffic did in the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AtmStats {
    /// By class: feedback, premium, ordinary.
    pub classes: [TaskClassStats; 3],
    /// RM cells the hosts' premium connections sent.
    pub rm_cells: u64,
}

impl AtmStats {
    pub fn class(&self, class: CellClass) -> &TaskClassStats {
        &self.classes[class.index()]
    }
}

/// Hosts on one cell switch: see the module documentation.
#[derive(Debug)]
pub struct AtmNetwork {
    config: AtmConfig,
    /// The output port toward each host.
    ports: Vec<OutputPort>,
    nic_busy: Vec<Time>,
    /// The premium connection of each ordered pair of hosts.
    connections: Vec<AbrSource>,
    /// Explicit rates on their way back to host connections: (time, pair, rate).
    returning: Vec<(Time, usize, f64)>,
    next_datagram: u64,
    stats: AtmStats,
    net: NetStats,
}

impl AtmNetwork {
    pub fn new(config: AtmConfig) -> AtmNetwork {
        let return_delay = config.propagation * 2 + cell_time();
        let ports = (0..config.hosts)
            .map(|h| {
                let background = (config.congested_port == Some(h)).then_some(&config.background);
                let rng = rng::stream(config.seed, Stream::Port(h));
                OutputPort::new(config.buffer_cells, background, &config.abr, &config.erica, return_delay, rng)
            })
            .collect();
        AtmNetwork {
            ports,
            nic_busy: vec![Time::ZERO; config.hosts],
            connections: (0..config.hosts * config.hosts).map(|_| AbrSource::new(config.abr.clone())).collect(),
            returning: Vec::new(),
            next_datagram: 0,
            stats: AtmStats::default(),
            net: NetStats::default(),
            config,
        }
    }

    pub fn config(&self) -> &AtmConfig {
        &self.config
    }

    pub fn port(&self, host: usize) -> &OutputPort {
        &self.ports[host]
    }

    pub fn task_stats(&self) -> &AtmStats {
        &self.stats
    }

    /// The allowed rate of the premium connection `from -> to`, bits per second.
    pub fn premium_rate(&self, from: usize, to: usize) -> f64 {
        self.connections[from * self.config.hosts + to].acr()
    }

    /// Brings every port up to `now` (for statistics at the end of a run).
    pub fn advance_to(&mut self, now: Time) {
        for port in &mut self.ports {
            port.advance_to(slot_of(now));
        }
    }

    fn class_of(&self, path: Path, packet_type: Option<u8>) -> CellClass {
        let data = packet_type == Some(PacketType::Data as u8);
        match (path, data, self.config.data_class) {
            (_, true, DataClass::AllPremium) | (Path::Premium, true, _) => CellClass::Premium,
            (Path::Premium, false, _) => CellClass::Feedback,
            (Path::Ordinary, _, _) => CellClass::Ordinary,
        }
    }

    /// Explicit rates stamped up to `now` reach their sources.
    fn collect_feedback(&mut self, now: Time) {
        let return_delay = self.config.propagation * 2 + cell_time();
        for port in &mut self.ports {
            for (slot, pair, er) in port.host_feedback.drain(..) {
                self.returning.push((slot_start(slot) + return_delay, pair, er));
            }
        }
        self.returning.sort_by_key(|r| r.0);
        let due = self.returning.iter().take_while(|r| r.0 <= now).count();
        for (_, pair, er) in self.returning.drain(..due) {
            self.connections[pair].feedback(er);
        }
    }
}

impl Network for AtmNetwork {
    fn send(&mut self, now: Time, datagram: Datagram, _rng: &mut SimRng, out: &mut Vec<Delivery>) {
        let Datagram { from, to, path, bytes } = datagram;
        let hosts = self.config.hosts;
        if from >= hosts || to >= hosts || from == to {
            return;
        }
        // The switch and every premium source first catch up with `now`.
        for port in &mut self.ports {
            port.advance_to(slot_of(now));
        }
        self.collect_feedback(now);

        let packet_type = bytes.get(1).copied();
        let class = self.class_of(path, packet_type);
        let is_data = packet_type == Some(PacketType::Data as u8);
        let cells = cells_for(bytes.len());
        let id = self.next_datagram;
        self.next_datagram += 1;
        let pair = from * hosts + to;
        // Connection numbers at a port: background sources first, then host pairs.
        let connection = self.ports[to].sources.len() + pair;

        let start = now.max(self.nic_busy[from]);
        let cell = cell_time();
        let propagation = self.config.propagation;
        let mut sent = 0;
        for i in 0..cells {
            let ready = start + cell * (i as u32 + 1);
            let leaves = if class == CellClass::Premium {
                loop {
                    let (at, rm) = self.connections[pair].next_cell(ready);
                    if !rm {
                        break at;
                    }
                    let ccr = self.connections[pair].acr();
                    self.stats.rm_cells += 1;
                    let rm =
                        HostArrival { datagram: u64::MAX, class, rm: Some((ccr, pair)), connection: Some(connection) };
                    self.ports[to].add_arrival(at + propagation, rm);
                }
            } else {
                ready
            };
            let cell = HostArrival { datagram: id, class, rm: None, connection: Some(connection) };
            self.ports[to].add_arrival(leaves + propagation, cell);
            sent += 1;
        }
        self.nic_busy[from] = start + cell * cells as u32;

        // Decide this datagram's fate on a copy of the port.
        let mut copy = self.ports[to].clone();
        copy.host_feedback.clear();
        copy.watch = Some(Watch { datagram: id, remaining: sent, dropped: 0, last_departure: 0 });
        let fate = copy.resolve_watch();

        let s = &mut self.stats.classes[class.index()];
        s.datagrams += 1;
        self.net.sent += 1;
        if is_data {
            s.data_cells += cells as u64;
            s.data_cells_lost += fate.dropped as u64;
        } else {
            s.control_cells += cells as u64;
            s.control_cells_lost += fate.dropped as u64;
        }
        if fate.dropped > 0 {
            s.datagrams_lost += 1;
            self.net.queue_drops += 1;
            self.net.data_lost += is_data as u64;
            return;
        }
        self.net.delivered += 1;
        let at = slot_start(fate.last_departure + 1) + propagation;
        out.push(Delivery { at, to, path, bytes });
    }

    fn ready_at(&self, now: Time, host: usize) -> Time {
        self.nic_busy.get(host).map_or(now, |&t| t.max(now))
    }

    fn stats(&self) -> NetStats {
        self.net
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn bare_port(buffer: usize) -> OutputPort {
        let rng = SimRng::seed_from_u64(1);
        OutputPort::new(buffer, None, &AbrParams::default(), &EricaParams::default(), Duration::from_micros(10), rng)
    }

    fn host(datagram: u64, class: CellClass) -> Occupant {
        Occupant::Host { datagram, class }
    }

    #[test]
    fn feedback_cells_leave_before_queued_data() {
        let mut port = bare_port(100);
        for d in 0..3 {
            port.enqueue(0, host(d, CellClass::Ordinary), None);
        }
        port.enqueue(0, host(7, CellClass::Premium), None);
        port.enqueue(0, host(9, CellClass::Feedback), None);
        let order: Vec<Occupant> =
            std::iter::from_fn(|| if port.high.len > 0 { port.high.pop() } else { port.low.pop() }).collect();
        assert_eq!(order[0], host(9, CellClass::Feedback));
        // Premium and ordinary data share one FIFO.
        assert_eq!(order[1..4], [0, 1, 2].map(|d| host(d, CellClass::Ordinary))[..]);
        assert_eq!(order[4..], [host(7, CellClass::Premium)]);
    }

    #[test]
    fn a_full_buffer_drops_ordinary_cells_and_premium_or_feedback_push_out_the_newest_ordinary_one() {
        let mut port = bare_port(4);
        assert!(port.enqueue(0, host(1, CellClass::Ordinary), None));
        assert!(port.enqueue(0, host(2, CellClass::Premium), None));
        assert!(port.enqueue(0, host(3, CellClass::Ordinary), None));
        assert!(port.enqueue(0, host(4, CellClass::Feedback), None));
        // Full: the buffer is shared by both priority levels.
        assert_eq!(port.queued(), 4);
        assert!(!port.enqueue(0, host(5, CellClass::Ordinary), None), "drop-tail for ordinary cells");
        assert!(port.enqueue(0, host(6, CellClass::Premium), None), "premium pushes out");
        assert_eq!(port.stats.host[CellClass::Ordinary.index()].pushed_out, 1);
        assert!(port.enqueue(0, host(7, CellClass::Feedback), None), "feedback pushes out");
        assert_eq!(port.queued(), 4);
        let low: Vec<Occupant> = std::iter::from_fn(|| port.low.pop()).collect();
        // Ordinary cells 3 then 1 were pushed out, newest first; nothing
        // ordinary is left, so now even a premium cell is dropped.
        assert_eq!(low, vec![host(2, CellClass::Premium), host(6, CellClass::Premium)]);
        let mut port = bare_port(2);
        port.enqueue(0, host(1, CellClass::Premium), None);
        port.enqueue(0, host(2, CellClass::Feedback), None);
        assert!(!port.enqueue(0, host(3, CellClass::Feedback), None));
        assert_eq!(port.stats.host[CellClass::Feedback.index()].dropped, 1);
    }

    #[test]
    fn push_out_keeps_runs_merged() {
        let mut q = Queue::default();
        let bg = Occupant::Background(CellClass::Premium);
        q.push(bg);
        q.push(host(1, CellClass::Ordinary));
        q.push(bg);
        assert_eq!(q.push_out_ordinary(), Some(host(1, CellClass::Ordinary)));
        assert_eq!(q.runs.len(), 1);
        assert_eq!(q.len, 2);
        assert_eq!(q.push_out_ordinary(), None);
    }

    fn two_hosts(buffer: usize) -> AtmNetwork {
        let mut config = AtmConfig::paper(3, 0.0, DataClass::ByPath);
        config.buffer_cells = buffer;
        config.congested_port = None;
        AtmNetwork::new(config)
    }

    fn data_datagram(len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        bytes[1] = PacketType::Data as u8;
        bytes
    }

    fn send(net: &mut AtmNetwork, now: Time, path: Path, bytes: Vec<u8>) -> Option<Delivery> {
        let mut rng = SimRng::seed_from_u64(0);
        let mut out = Vec::new();
        net.send(now, Datagram { from: 0, to: 1, path, bytes }, &mut rng, &mut out);
        assert!(out.len() <= 1);
        out.pop()
    }

    #[test]
    fn a_datagram_is_cut_into_cells_and_arrives_with_its_last_cell() {
        assert_eq!(cells_for(0), 1);
        assert_eq!(cells_for(48), 1);
        assert_eq!(cells_for(49), 2);
        assert_eq!(cells_for(240), 5);
        let mut net = two_hosts(100);
        let now = Time::from_nanos(1_000_000);
        let d = send(&mut net, now, Path::Ordinary, data_datagram(240)).expect("delivered");
        // Five cells through the host's interface, the last one through the
        // switch port, two links.
        let ideal = now + cell_time() * 6 + net.config().propagation * 2;
        assert!(d.at.since(ideal) < Duration::from_nanos(10) && ideal.since(d.at) < cell_time(), "{} vs {ideal}", d.at);
        let s = net.task_stats().class(CellClass::Ordinary);
        assert_eq!((s.data_cells, s.datagrams, s.datagrams_lost), (5, 1, 0));
    }

    #[test]
    fn a_datagram_is_lost_when_any_of_its_cells_is_dropped() {
        let mut net = two_hosts(10);
        net.config.propagation = Duration::ZERO;
        let now = Time::from_nanos(1_000_000);
        net.advance_to(now);
        for _ in 0..10 {
            net.ports[1].low.push(Occupant::Background(CellClass::Ordinary));
        }
        // One more cell arrives with the datagram's first, to fill the place
        // the first departure frees.
        let filler = HostArrival { datagram: u64::MAX, class: CellClass::Ordinary, rm: None, connection: None };
        net.ports[1].add_arrival(now + cell_time(), filler);
        // The first cell finds the buffer full; the next four find the one
        // place each departure frees.
        assert!(send(&mut net, now, Path::Ordinary, data_datagram(240)).is_none());
        let s = *net.task_stats().class(CellClass::Ordinary);
        assert_eq!((s.data_cells, s.data_cells_lost, s.datagrams_lost), (5, 1, 1));
        // A premium datagram pushes ordinary cells out instead.
        let later = now + cell_time() * 100;
        net.advance_to(later);
        for _ in 0..10 - net.ports[1].queued() {
            net.ports[1].low.push(Occupant::Background(CellClass::Ordinary));
        }
        assert!(send(&mut net, later, Path::Premium, data_datagram(240)).is_some());
        assert_eq!(net.task_stats().class(CellClass::Premium).data_cells_lost, 0);
        // Acknowledgements and other control packets on the premium path go
        // in the feedback class.
        assert!(send(&mut net, later, Path::Premium, vec![0u8; 90]).is_some());
        assert_eq!(net.task_stats().class(CellClass::Feedback).control_cells, 2);
    }

    #[test]
    fn premium_only_puts_data_on_the_premium_class_and_paces_it_at_the_peak_rate() {
        let mut config = AtmConfig::paper(3, 0.0, DataClass::AllPremium);
        config.congested_port = None;
        let mut net = AtmNetwork::new(config);
        let now = Time::from_nanos(1_000_000);
        let first = send(&mut net, now, Path::Ordinary, data_datagram(480)).expect("delivered");
        let second = send(&mut net, now, Path::Ordinary, data_datagram(480)).expect("delivered");
        let s = net.task_stats().class(CellClass::Premium);
        assert_eq!((s.data_cells, s.datagrams), (20, 2));
        // 10 cells (and the first RM cell) at 50 Mb/s.
        let spacing = second.at.since(first.at).as_secs_f64();
        let expected = 10.0 * CELL_BITS as f64 / 50e6;
        assert!((spacing / expected - 1.0).abs() < 0.15, "{spacing} against {expected}");
        assert_eq!(net.task_stats().rm_cells, 1);
    }

    fn load_port(background: Background, buffer: usize, seconds: f64) -> OutputPort {
        let rng = SimRng::seed_from_u64(5);
        let mut port = OutputPort::new(
            buffer,
            Some(&background),
            &AbrParams::default(),
            &EricaParams::default(),
            cell_time(),
            rng,
        );
        port.advance_to(slot_of(Time::from_nanos((seconds * 1e9) as u64)));
        port
    }

    #[test]
    fn on_off_sources_offer_the_configured_mean_load() {
        for load in [0.3, 0.7, 1.1] {
            let background = Background { premium_sources: 0, ..Background::paper(load) };
            let port = load_port(background, 1_000_000, 10.0);
            let arrived: u64 = port.stats.background.iter().map(|c| c.arrived).sum();
            let offered = arrived as f64 / port.stats.slots as f64;
            assert!((offered / load - 1.0).abs() < 0.06, "ρ = {load}: offered {offered}");
        }
    }

    #[test]
    fn overload_loses_ordinary_cells_and_push_out_spares_the_premium_ones() {
        let port = load_port(Background::paper(1.1), 1000, 5.0);
        let ordinary = port.stats.background[CellClass::Ordinary.index()];
        let premium = port.stats.background[CellClass::Premium.index()];
        assert!(ordinary.dropped as f64 > 0.05 * ordinary.arrived as f64, "{ordinary:?}");
        assert!(ordinary.pushed_out > 0);
        assert_eq!(premium.dropped, 0, "{premium:?}");
        let utilisation = port.stats.busy_slots as f64 / port.stats.slots as f64;
        assert!(utilisation > 0.9, "{utilisation}");
    }

    #[test]
    fn erica_converges_to_the_fair_share() {
        let abr = AbrParams::default();
        for sources in [4usize, 5, 8] {
            // Greedy premium sources: always ON at the link rate, held back
            // only by ERICA.
            let background = Background {
                sources,
                premium_sources: sources,
                peak: 1.0,
                mean_on: Duration::from_secs(100),
                load: sources as f64,
            };
            let port = load_port(background, 100_000, 0.5);
            let fair = (0.9 * LINK_BPS / sources as f64).min(abr.peak_bps);
            for rate in port.background_rates() {
                assert!((rate / fair - 1.0).abs() < 0.1, "{sources} sources: {rate} against {fair}");
            }
            let start = port.stats.slots;
            let mut port = port;
            let sent = port.stats.background[CellClass::Premium.index()].departed;
            port.advance_to(slot_of(Time::from_nanos(1_000_000_000)));
            let utilisation = (port.stats.background[CellClass::Premium.index()].departed - sent) as f64
                / (port.stats.slots - start) as f64;
            assert!((utilisation - 0.9).abs() < 0.05, "{sources} sources: utilisation {utilisation}");
        }
    }

    #[test]
    fn a_premium_source_falls_back_to_its_initial_rate_after_adtf_idle() {
        let params = AbrParams { initial_bps: 10e6, ..AbrParams::default() };
        let mut source = AbrSource::new(params);
        source.feedback(60e6);
        assert!((source.acr() - 13.125e6).abs() < 1.0, "RIF·PCR at most per RM cell: {}", source.acr());
        for _ in 0..20 {
            source.feedback(40e6);
        }
        assert_eq!(source.acr(), 40e6);
        source.next_cell(Time::from_nanos(1_000));
        source.next_cell(Time::from_nanos(400_000_000));
        assert_eq!(source.acr(), 40e6, "idle less than ADTF");
        source.next_cell(Time::from_nanos(1_000_000_000));
        assert_eq!(source.acr(), 10e6, "idle more than ADTF");
    }

    #[test]
    fn a_seed_gives_one_background() {
        let a = load_port(Background::paper(0.9), 1000, 0.5);
        let b = load_port(Background::paper(0.9), 1000, 0.5);
        assert_eq!(a.stats, b.stats);
    }
}
