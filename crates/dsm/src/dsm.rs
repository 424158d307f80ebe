//! The shared memory on a running job: a [`Replica`] driven by the
//! runtime, its messages on channel [`CHANNEL`], the writes of others
//! applied by whichever thread moves the runtime (a call of the
//! application, or the progress thread while the application computes).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bulkwire_comm::World;
use bulkwire_proto::SendError;
use bulkwire_runtime::{Engine, ProgressHook, Runtime, RuntimeError};

use crate::element::{ElemType, Element};
use crate::replica::{Config, DsmError, Flush, Replica, SegId, Semantics, Stats, Storage, QUEUED_LIMIT};

/// The runtime's channel of the shared memory.
pub const CHANNEL: u16 = 5;
/// `BULKWIRE_DSM_FLUSH`: `warp` (the default), or a fixed threshold in writes.
pub const FLUSH_VAR: &str = "BULKWIRE_DSM_FLUSH";
/// `BULKWIRE_DSM_MAX_DELAY_MS`: the longest a buffered write waits (5).
pub const DELAY_VAR: &str = "BULKWIRE_DSM_MAX_DELAY_MS";

/// How a process's shared memory flushes its writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DsmSettings {
    pub flush: Flush,
    pub max_delay: Duration,
}

impl DsmSettings {
    /// From `BULKWIRE_DSM_FLUSH` and `BULKWIRE_DSM_MAX_DELAY_MS`.
    pub fn from_env() -> Result<DsmSettings, DsmError> {
        let flush = match std::env::var(FLUSH_VAR) {
            Ok(v) => parse_flush(&v).map_err(|why| DsmError::Setting { var: FLUSH_VAR, why })?,
            Err(_) => Flush::warp(1.0),
        };
        let max_delay = match std::env::var(DELAY_VAR) {
            Ok(v) => Duration::from_millis(v.trim().parse().map_err(|_| DsmError::Setting {
                var: DELAY_VAR,
                why: format!("{v:?} is not a number of milliseconds"),
            })?),
            Err(_) => Duration::from_millis(5),
        };
        Ok(DsmSettings { flush, max_delay })
    }
}

/// `warp`, `warp:Λ0` or a number of writes.
pub fn parse_flush(text: &str) -> Result<Flush, String> {
    let text = text.trim();
    if text == "warp" {
        return Ok(Flush::warp(1.0));
    }
    if let Some(scale) = text.strip_prefix("warp:") {
        return match scale.parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Flush::warp(s)),
            _ => Err(format!("{scale:?} is not a starting Λ (a number above 0)")),
        };
    }
    match text.parse::<usize>() {
        Ok(n) => Ok(Flush::Fixed(n)),
        Err(_) => Err(format!("{text:?} is not a flush: warp, warp:Λ0, or a number of writes")),
    }
}

/// This process's shared memory.
pub struct Dsm<'w> {
    rt: &'w Runtime,
    state: Arc<Mutex<Replica>>,
}

impl<'w> Dsm<'w> {
    /// Starts the shared memory of this process, with the settings of the
    /// environment; every process of the job calls it.
    pub fn new(world: &'w World) -> Result<Dsm<'w>, DsmError> {
        Dsm::with_settings(world.runtime(), DsmSettings::from_env()?)
    }

    pub fn with_settings(rt: &'w Runtime, settings: DsmSettings) -> Result<Dsm<'w>, DsmError> {
        let config =
            Config { flush: settings.flush, max_delay: settings.max_delay, ..Config::new(rt.rank(), rt.size()) };
        let state = Arc::new(Mutex::new(Replica::new(config)));
        // The writes of others are applied while the application computes,
        // and a buffer's delay expires then too (a weak reference: once
        // the shared memory is dropped, the runtime drops the hook).
        let shared = Arc::downgrade(&state);
        rt.add_progress_hook(ProgressHook(Arc::new(move |e: &mut Engine| {
            let Some(state) = shared.upgrade() else { return false };
            let mut r = state.lock().unwrap_or_else(|e| e.into_inner());
            pump(e, &mut r);
            true
        })));
        Ok(Dsm { rt, state })
    }

    fn replica(&self) -> MutexGuard<'_, Replica> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Works on the replica once: what came is applied first, what it
    /// queued is sent after.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Replica, bulkwire_proto::Time) -> Result<R, DsmError>,
    ) -> Result<R, DsmError> {
        self.rt
            .with(|e| {
                let mut r = self.replica();
                pump(e, &mut r);
                let now = e.now();
                let result = f(&mut r, now).and_then(|v| failure(&r).map(|()| v));
                transmit(e, &mut r);
                Ok(result)
            })
            .map_err(runtime)?
    }

    fn wait<R>(&self, mut f: impl FnMut(&mut Replica) -> Option<R>) -> Result<R, DsmError> {
        self.rt
            .wait(|e| {
                let mut r = self.replica();
                pump(e, &mut r);
                if let Err(err) = failure(&r) {
                    return Ok(Some(Err(err)));
                }
                let done = f(&mut r);
                transmit(e, &mut r);
                if done.is_none() {
                    if let Some(at) = r.poll_timeout() {
                        let now = e.now();
                        e.wake_within(at.since(now));
                    }
                }
                Ok(done.map(Ok))
            })
            .map_err(runtime)?
    }

    /// Maps the segment `name` of `len` elements of `T` (zeros at first):
    /// every process maps the same segments, in the same order, with the
    /// same sizes and types; a difference is an error at every call after
    /// it is found.
    pub fn map<T: Element>(&self, name: &str, len: usize) -> Result<Segment<'_, T>, DsmError> {
        let (id, storage) = self.map_raw(name, T::TYPE, len)?;
        Ok(Segment { dsm: self, id, storage, semantics: Semantics::Slow, _t: PhantomData })
    }

    /// [`Dsm::map`] for a layer that knows the element type at run time
    /// (the C API): the segment's number and its elements.
    pub fn map_raw(&self, name: &str, elem: ElemType, len: usize) -> Result<(SegId, Arc<Storage>), DsmError> {
        if name.len() > crate::codec::MAX_NAME {
            return Err(DsmError::Setting {
                var: "map",
                why: format!("a segment name of {} bytes (at most 255)", name.len()),
            });
        }
        self.with(|r, _| {
            let id = r.map(name, elem, len)?;
            Ok((id, r.storage(id).expect("just mapped")))
        })
    }

    /// Writes the elements `bits` (each as [`Element::to_bits`] gives it)
    /// from `start` on, with `semantics`, as [`Segment::write_slice`] does.
    pub fn write_raw(&self, seg: SegId, start: usize, bits: &[u64], semantics: Semantics) -> Result<(), DsmError> {
        self.write_bits(seg, start, bits.iter().copied(), semantics)
    }

    fn write_bits(
        &self,
        seg: SegId,
        start: usize,
        bits: impl Iterator<Item = u64>,
        semantics: Semantics,
    ) -> Result<(), DsmError> {
        let last = self.with(|r, now| {
            let mut last = None;
            for (i, b) in bits.enumerate() {
                last = r.write(now, seg, (start + i) as u64, b, semantics)?.or(last);
            }
            Ok(last)
        })?;
        if let Some(ticket) = last {
            self.wait(|r| r.is_done(ticket).then_some(()))?;
        }
        self.back_pressure()
    }

    /// Waits while more than [`QUEUED_LIMIT`] bytes of writes wait for room
    /// in the transport, until half of them have gone.
    fn back_pressure(&self) -> Result<(), DsmError> {
        if self.replica().queued_bytes() <= QUEUED_LIMIT {
            return Ok(());
        }
        self.wait(|r| (r.queued_bytes() <= QUEUED_LIMIT / 2).then_some(()))
    }

    /// Sends every buffered write now.
    pub fn flush(&self) -> Result<(), DsmError> {
        self.with(|r, now| {
            r.flush(now);
            Ok(())
        })
    }

    /// Collective: returns once every write issued anywhere before any
    /// process entered this fence is applied here.
    pub fn fence(&self) -> Result<(), DsmError> {
        let epoch = self.with(|r, now| Ok(r.fence(now)))?;
        self.wait(|r| r.fence_done(epoch).then_some(()))
    }

    /// Counters of this process's shared memory.
    pub fn stats(&self) -> Stats {
        self.replica().stats()
    }

    /// Keeps a log of every write applied here from now on, for a history
    /// checker ([`crate::history`]).
    pub fn record(&self) {
        self.replica().record();
    }

    /// The writes applied here since the last call, in the order applied.
    pub fn take_log(&self) -> Vec<crate::Applied> {
        self.replica().take_log()
    }
}

/// A segment of `T`s, as this process maps it.
pub struct Segment<'d, T: Element> {
    dsm: &'d Dsm<'d>,
    id: SegId,
    storage: Arc<Storage>,
    semantics: Semantics,
    _t: PhantomData<T>,
}

impl<T: Element> Segment<'_, T> {
    pub fn len(&self) -> usize {
        self.storage.len()
    }

    pub fn is_empty(&self) -> bool {
        self.storage.is_empty()
    }

    pub fn name(&self) -> &str {
        &self.storage.name
    }

    /// The semantics of [`Segment::set`] (slow unless changed).
    pub fn set_semantics(&mut self, semantics: Semantics) {
        self.semantics = semantics;
    }

    fn range(&self, call: &'static str, index: usize, n: usize) -> Result<(), DsmError> {
        if index.checked_add(n).is_none_or(|end| end > self.len()) {
            return Err(DsmError::OutOfRange {
                call,
                name: self.storage.name.clone(),
                index: (index.saturating_add(n.max(1)) - 1) as u64,
                len: self.len(),
            });
        }
        Ok(())
    }

    /// Element `index` as this replica holds it: a load from local memory.
    pub fn read(&self, index: usize) -> Result<T, DsmError> {
        self.range("read", index, 1)?;
        Ok(T::from_bits(self.storage.load(index)))
    }

    /// Elements `start..start + out.len()` into `out`.
    pub fn read_into(&self, start: usize, out: &mut [T]) -> Result<(), DsmError> {
        self.range("read_into", start, out.len())?;
        for (i, o) in out.iter_mut().enumerate() {
            *o = T::from_bits(self.storage.load(start + i));
        }
        Ok(())
    }

    /// Writes `value` at `index` with `semantics`; a coherent write returns
    /// once it has its place in the order and is applied here.
    pub fn write(&self, index: usize, value: T, semantics: Semantics) -> Result<(), DsmError> {
        self.write_slice(index, std::slice::from_ref(&value), semantics)
    }

    /// [`Segment::write`] with the segment's semantics.
    pub fn set(&self, index: usize, value: T) -> Result<(), DsmError> {
        self.write(index, value, self.semantics)
    }

    /// Writes `values` from `start` on, one write per element, in order.
    pub fn write_slice(&self, start: usize, values: &[T], semantics: Semantics) -> Result<(), DsmError> {
        self.range("write", start, values.len())?;
        self.dsm.write_bits(self.id, start, values.iter().map(|v| v.to_bits()), semantics)
    }
}

fn runtime(e: RuntimeError) -> DsmError {
    DsmError::Runtime(e.to_string())
}

fn failure(r: &Replica) -> Result<(), DsmError> {
    match r.failure() {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

/// Applies what came for the shared memory, fires its timer, sends.
fn pump(e: &mut Engine, r: &mut Replica) {
    let now = e.now();
    while let Some(m) = e.take(|m| m.channel == CHANNEL) {
        r.handle(now, m.from, &m.data[m.start..]);
        e.recycle(m.data);
    }
    r.handle_timeout(now);
    transmit(e, r);
}

fn transmit(e: &mut Engine, r: &mut Replica) {
    while let Some((to, bytes)) = r.poll_transmit() {
        match e.check_send(to, CHANNEL, bytes.len()) {
            Ok(()) => {
                let _ = e.send_owned(to, CHANNEL, bytes);
            }
            Err(SendError::WouldBlock) => {
                r.unsend(to, bytes);
                return;
            }
            // A peer that is gone: the runtime stops the job and every
            // wait reports it.
            Err(_) => {}
        }
    }
}
