//! `bulkwire._bulkwire`: the native half of the Python package. The
//! package's Python half (`python/bulkwire/__init__.py`) gives it mpi4py's
//! shape: objects pickled by the lower-case calls, buffers (NumPy arrays,
//! `bytearray`, anything with the buffer protocol) by the upper-case ones.
//! Here every call takes bytes or buffers only.
//!
//! A process joins its job once ([`join`]), on first use; the job's
//! runtime then serves the point-to-point calls, the groups and any number
//! of BSP sections one after another, and is finished at interpreter exit
//! (or failed, on an uncaught exception; the Python half arranges both).
//!
//! Every call that may wait releases the interpreter lock while it waits,
//! so other Python threads run, and ends with `KeyboardInterrupt` when the
//! user presses Ctrl-C: a flag raised by SIGINT beside Python's own handler
//! ends the runtime's waits ([`bulkwire_runtime::Runtime::set_interrupt`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bulkwire_bsp::Bsp as RustBsp;
use bulkwire_comm::{CommError, Completion, Source, Tag, World as RustWorld};
use bulkwire_groups::{Algorithm, Delivery, GroupId, Groups, Op, Operation, WORLD};
// A buffer's element type, for reductions and the shared memory alike.
use bulkwire_dsm::ElemType as Kind;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

// Named `bulkwire.Error`, where programs meet it.
pyo3::create_exception!(
    bulkwire,
    Error,
    PyException,
    "An error of the bulkwire runtime; its message is the Rust error's, naming the call and the cause."
);

/// The job as this process joined it: leaked, as it lives until the
/// process ends (the interpreter finishes it at exit).
struct Job {
    world: &'static RustWorld,
    groups: &'static Groups<'static>,
    interrupt: Arc<AtomicBool>,
}

static JOB: OnceLock<Job> = OnceLock::new();
static JOINING: Mutex<()> = Mutex::new(());

fn job() -> PyResult<&'static Job> {
    JOB.get().ok_or_else(|| Error::new_err("this process has not joined its job: call bulkwire.World() first"))
}

/// Joins the job this process was started in (`bulkwire run`): the
/// rendezvous, then the groups layer, which every process starts. Later
/// calls return at once.
#[pyfunction]
fn join(py: Python<'_>) -> PyResult<()> {
    let _one = JOINING.lock().unwrap_or_else(|e| e.into_inner());
    if JOB.get().is_some() {
        return Ok(());
    }
    let interrupt = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, interrupt.clone())
        .map_err(|e| Error::new_err(format!("cannot watch for Ctrl-C: {e}")))?;
    let (world, groups) = py
        .detach(|| -> Result<_, String> {
            let world: &'static RustWorld = Box::leak(Box::new(RustWorld::init().map_err(|e| e.to_string())?));
            world.runtime().set_interrupt(interrupt.clone());
            let groups: &'static Groups<'static> = Box::leak(Box::new(Groups::new(world).map_err(|e| e.to_string())?));
            Ok((world, groups))
        })
        .map_err(Error::new_err)?;
    let _ = JOB.set(Job { world, groups, interrupt });
    Ok(())
}

/// Whether this process has joined its job.
#[pyfunction]
fn joined() -> bool {
    JOB.get().is_some()
}

/// Leaves the job cleanly: waits until what this process sent is
/// delivered and every rank has finished. Called at interpreter exit.
#[pyfunction]
fn finalize(py: Python<'_>) -> PyResult<()> {
    let Some(job) = JOB.get() else { return Ok(()) };
    blocking(py, job, || job.world.runtime().finish().map_err(|e| e.to_string()))
}

/// Tells the launcher this rank failed: the job stops, printing `reason`.
#[pyfunction]
fn fail(reason: &str) {
    if let Some(job) = JOB.get() {
        job.world.abort(reason);
    }
}

/// Runs `f` without the interpreter lock, as a call that Ctrl-C
/// interrupts; a pending `KeyboardInterrupt` wins over the error that the
/// interruption caused.
fn blocking<R: Send>(py: Python<'_>, job: &Job, f: impl FnOnce() -> Result<R, String> + Send) -> PyResult<R> {
    job.interrupt.store(false, Ordering::SeqCst);
    match py.detach(f) {
        Ok(r) => Ok(r),
        Err(message) => {
            py.check_signals()?;
            Err(Error::new_err(message))
        }
    }
}

// ----- buffers -------------------------------------------------------------

/// A buffer of a Python object, held while a call uses its memory.
struct Buf {
    buf: PyUntypedBuffer,
}

impl Buf {
    fn read(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Buf> {
        let buf = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: expected a buffer (bytes, bytearray, a NumPy array…), got {}",
                type_name(obj)
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "{what}: the buffer is not contiguous (use numpy.ascontiguousarray)"
            )));
        }
        Ok(Buf { buf })
    }

    fn write(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Buf> {
        let b = Buf::read(obj, what)?;
        if b.buf.readonly() {
            return Err(PyValueError::new_err(format!("{what}: the buffer is read-only")));
        }
        Ok(b)
    }

    fn addr(&self) -> usize {
        self.buf.buf_ptr() as usize
    }

    fn len(&self) -> usize {
        self.buf.len_bytes()
    }

    fn item_size(&self) -> usize {
        self.buf.item_size()
    }

    /// The element type, for reductions.
    fn kind(&self, what: &str) -> PyResult<Kind> {
        let format = self.buf.format().to_string_lossy().into_owned();
        let code = format.trim_start_matches(['@', '=', '<']);
        Ok(match (code, self.item_size()) {
            ("b", 1) => Kind::I8,
            ("B", 1) => Kind::U8,
            ("h", 2) => Kind::I16,
            ("H", 2) => Kind::U16,
            ("i" | "l", 4) => Kind::I32,
            ("I" | "L", 4) => Kind::U32,
            ("l" | "q", 8) => Kind::I64,
            ("L" | "Q", 8) => Kind::U64,
            ("f", 4) => Kind::F32,
            ("d", 8) => Kind::F64,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "{what}: cannot reduce elements of format {format:?} ({} bytes): int8 to int64, uint8 to uint64, \
                     float32 and float64 in the machine's byte order can be",
                    self.item_size()
                )))
            }
        })
    }
}

/// The bytes of a Python object for a point-to-point call: a plain
/// contiguous export (`PyBUF_SIMPLE`), without the format, shape and
/// strides that [`Buf`] asks for, and without its allocation: these calls
/// move bytes only, and their cost per message is what Python adds to the
/// runtime's latency.
struct Bytes<'py> {
    view: pyo3::ffi::Py_buffer,
    _held: std::marker::PhantomData<Python<'py>>,
}

impl<'py> Bytes<'py> {
    fn get(obj: &Bound<'py, PyAny>, writable: bool, what: &str) -> PyResult<Bytes<'py>> {
        use pyo3::ffi;
        let flags = if writable { ffi::PyBUF_WRITABLE } else { ffi::PyBUF_SIMPLE };
        let mut view = ffi::Py_buffer::new();
        // SAFETY: `obj` is a live object (the GIL is held, as `Bound`
        // proves); `view` is released in `Drop` if the call succeeds.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) } == 0 {
            return Ok(Bytes { view, _held: std::marker::PhantomData });
        }
        // Say why in our words: which of the calls' conditions failed.
        let _ = PyErr::take(obj.py());
        let b = Buf::read(obj, what)?;
        if writable && b.buf.readonly() {
            return Err(PyValueError::new_err(format!("{what}: the buffer is read-only")));
        }
        Err(PyValueError::new_err(format!("{what}: the buffer is not contiguous (use numpy.ascontiguousarray)")))
    }

    fn addr(&self) -> usize {
        self.view.buf as usize
    }

    fn len(&self) -> usize {
        self.view.len as usize
    }
}

impl Drop for Bytes<'_> {
    fn drop(&mut self) {
        // SAFETY: exported by PyObject_GetBuffer in `get`, released once;
        // the GIL is held for the lifetime 'py.
        unsafe { pyo3::ffi::PyBuffer_Release(&mut self.view) };
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// # Safety
///
/// `addr..addr + len` must be memory of a buffer held for the slice's life.
unsafe fn bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    std::slice::from_raw_parts(addr as *const u8, len)
}

/// # Safety
///
/// As [`bytes`], and the buffer is writable and nobody else's meanwhile.
#[allow(clippy::mut_from_ref)]
unsafe fn bytes_mut<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(addr as *mut u8, len)
}

#[derive(Clone, Copy)]
enum OpName {
    Sum,
    Prod,
    Min,
    Max,
}

impl OpName {
    fn parse(name: &str) -> PyResult<OpName> {
        match name {
            "sum" => Ok(OpName::Sum),
            "prod" => Ok(OpName::Prod),
            "min" => Ok(OpName::Min),
            "max" => Ok(OpName::Max),
            other => Err(PyValueError::new_err(format!("{other:?} is not a reduction: sum, prod, min or max"))),
        }
    }

    fn op<T>(self) -> Op<T> {
        match self {
            OpName::Sum => Op::Sum,
            OpName::Prod => Op::Prod,
            OpName::Min => Op::Min,
            OpName::Max => Op::Max,
        }
    }
}

/// Runs `f` on the buffer's memory as a slice of its element type.
macro_rules! typed {
    ($kind:expr, $addr:expr, $len:expr, |$s:ident| $body:expr) => {{
        fn cast<T: bulkwire_groups::Element>(addr: usize, len: usize) -> Result<&'static mut [T], String> {
            let size = std::mem::size_of::<T>();
            if addr % std::mem::align_of::<T>() != 0 || len % size != 0 {
                return Err("the buffer is not aligned to its elements".into());
            }
            // SAFETY: the caller holds the buffer, writable, for the call;
            // alignment and length checked above; every bit pattern is a
            // value of these number types.
            Ok(unsafe { std::slice::from_raw_parts_mut(addr as *mut T, len / size) })
        }
        match $kind {
            Kind::I8 => cast::<i8>($addr, $len).and_then(|$s| $body),
            Kind::U8 => cast::<u8>($addr, $len).and_then(|$s| $body),
            Kind::I16 => cast::<i16>($addr, $len).and_then(|$s| $body),
            Kind::U16 => cast::<u16>($addr, $len).and_then(|$s| $body),
            Kind::I32 => cast::<i32>($addr, $len).and_then(|$s| $body),
            Kind::U32 => cast::<u32>($addr, $len).and_then(|$s| $body),
            Kind::I64 => cast::<i64>($addr, $len).and_then(|$s| $body),
            Kind::U64 => cast::<u64>($addr, $len).and_then(|$s| $body),
            Kind::F32 => cast::<f32>($addr, $len).and_then(|$s| $body),
            Kind::F64 => cast::<f64>($addr, $len).and_then(|$s| $body),
        }
    }};
}

// ----- point to point -------------------------------------------------------

fn source(rank: i64, size: u32) -> PyResult<Source> {
    match rank {
        -1 => Ok(Source::Any),
        r if (0..i64::from(size)).contains(&r) => Ok(Source::Rank(r as u32)),
        r => Err(PyValueError::new_err(format!("source {r} does not exist: the job has ranks 0 to {}", size - 1))),
    }
}

fn tag(tag: i64) -> PyResult<Tag> {
    match tag {
        -1 => Ok(Tag::Any),
        t if (0..=i64::from(i32::MAX)).contains(&t) => Ok(Tag::Is(t as i32)),
        t => Err(PyValueError::new_err(format!("tag {t}: tags are 0 to {} (ANY_TAG = -1 in receives)", i32::MAX))),
    }
}

fn send_tag(t: i64) -> PyResult<i32> {
    match tag(t)? {
        Tag::Is(t) => Ok(t),
        Tag::Any => Err(PyValueError::new_err("a send needs a tag of 0 or more (ANY_TAG is for receives)")),
    }
}

fn dest(rank: i64, size: u32) -> PyResult<u32> {
    u32::try_from(rank).ok().filter(|&r| r < size).ok_or_else(|| {
        PyValueError::new_err(format!("rank {rank} does not exist: the job has ranks 0 to {}", size - 1))
    })
}

/// Sets a `bulkwire.Status`'s fields, if one was given.
fn set_status(status: Option<&Bound<'_, PyAny>>, source: u32, tag: i32, count: usize) -> PyResult<()> {
    if let Some(st) = status.filter(|st| !st.is_none()) {
        st.setattr("source", source)?;
        st.setattr("tag", tag)?;
        st.setattr("count", count)?;
    }
    Ok(())
}

/// The process's view of its job: rank, size, time, and messages of
/// buffers. `bulkwire.World` subclasses it with the calls on objects.
#[pyclass(frozen, subclass, module = "bulkwire._bulkwire")]
struct World;

#[pymethods]
impl World {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        py: Python<'_>,
        _args: &Bound<'_, pyo3::types::PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<World> {
        join(py)?;
        Ok(World)
    }

    #[getter]
    fn rank(&self) -> PyResult<u32> {
        Ok(job()?.world.rank())
    }

    #[getter]
    fn size(&self) -> PyResult<u32> {
        Ok(job()?.world.size())
    }

    /// Seconds since this process joined the job.
    fn wtime(&self) -> PyResult<f64> {
        Ok(job()?.world.wtime())
    }

    /// Sends the bytes of `buf` (any contiguous buffer) to `dest`; returns
    /// once they are queued (the buffer may then be reused). One longer than
    /// the runtime's largest message (16 MiB) goes in pieces once its
    /// receiver has matched it: the call returns after that.
    #[pyo3(name = "Send", signature = (buf, dest, tag=0))]
    fn send(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: i64, tag: i64) -> PyResult<()> {
        let job = job()?;
        let to = self::dest(dest, job.world.size())?;
        let tag = send_tag(tag)?;
        let b = Bytes::get(buf, false, "Send")?;
        let (addr, len) = (b.addr(), b.len());
        // SAFETY: `b` holds the memory until the call returns.
        let data = unsafe { bytes(addr, len) };
        // A message too long to go whole goes in pieces, each copied from
        // the buffer as it leaves: without the interpreter, and without a
        // copy of all of it first. One of `LEND_FROM` bytes or more to a
        // peer over UDP is sent from the buffer by the blocking send (which
        // returns once every packet is acknowledged), where `isend` would
        // copy it first (`python -m bulkwire.bench pingpong` over UDP, three
        // alternating runs: the Python loop less the Rust one at 4 MiB
        // -180 to -80 us, against +943 to +1,066 copying). Not to a peer on
        // this host: lending there took 381-507 us at 1 MiB against 91-114
        // copied first (three runs each, not understood yet).
        let lends = || {
            len >= bulkwire_runtime::LEND_FROM && job.world.runtime().transport(to) == bulkwire_runtime::Transport::Udp
        };
        if len > job.world.largest_whole() || lends() {
            return blocking(py, job, || job.world.send(to, tag, data).map_err(|e| e.to_string()));
        }
        // From 4 KiB to a peer over UDP: from the buffer, then copied.
        if job.world.send_now(to, tag, data).map_err(|e| Error::new_err(e.to_string()))? {
            return Ok(());
        }
        // A send that finds room returns at once: only one that must wait
        // for it lets go of the interpreter.
        let mut request = job.world.isend(to, tag, data).map_err(|e| Error::new_err(e.to_string()))?;
        if job.world.test(&mut request).map_err(|e| Error::new_err(e.to_string()))?.is_none() {
            blocking(py, job, || job.world.wait(request).map(drop).map_err(|e| e.to_string()))?;
        }
        Ok(())
    }

    /// Starts sending the bytes of `buf`, which the request borrows until
    /// it completes (as `MPI_Isend` and mpi4py's `Isend` do: leave the
    /// buffer unchanged until `wait` or a true `test`). A message at least
    /// as long as the shared-memory ring to a process on this host is read
    /// by it from `buf` itself, one copy in all; others are copied now.
    /// A request dropped before it completes waits for it.
    #[pyo3(name = "Isend", signature = (buf, dest, tag=0))]
    fn isend(&self, buf: &Bound<'_, PyAny>, dest: i64, tag: i64) -> PyResult<Request> {
        let job = job()?;
        let to = self::dest(dest, job.world.size())?;
        let tag = send_tag(tag)?;
        let held = Buf::read(buf, "Isend")?;
        // SAFETY: `held` keeps the memory exported until it is dropped,
        // which `Borrow` does only after the send that borrows it.
        let data: &'static [u8] = unsafe { bytes(held.addr(), held.len()) };
        let send = job.world.isend_borrowed(to, tag, data).map_err(|e| Error::new_err(e.to_string()))?;
        Ok(Request::borrowing(send, held))
    }

    /// Receives a message into the writable buffer `buf` (a message longer
    /// than it is an error, and is consumed; the buffer then holds its
    /// start). `-1` is any source or tag. A message a process on this host
    /// lends is read from its memory straight into `buf`; one from a given
    /// source over UDP that comes while this waits is reassembled in `buf`.
    #[pyo3(name = "Recv", signature = (buf, source=-1, tag=-1, status=None))]
    fn recv(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        source: i64,
        tag: i64,
        status: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let job = job()?;
        let (from, tag) = (self::source(source, job.world.size())?, self::tag(tag)?);
        let b = Bytes::get(buf, true, "Recv")?;
        let (addr, len) = (b.addr(), b.len());
        let st = blocking(py, job, || {
            // SAFETY: `b` holds the writable export until after the
            // receive, which alone writes it meanwhile.
            let dst = unsafe { bytes_mut(addr, len) };
            job.world.recv_into(from, tag, dst).map_err(|e| match e {
                CommError::Truncated { from, len, capacity } => format!(
                    "Recv: the message from rank {from} has {len} bytes, the buffer {capacity}: it was truncated"
                ),
                other => other.to_string(),
            })
        })?;
        drop(b);
        set_status(status, st.source, st.tag, st.len)
    }

    /// Posts a receive into `buf`, which the request fills when it completes.
    #[pyo3(name = "Irecv", signature = (buf, source=-1, tag=-1))]
    fn irecv(&self, buf: &Bound<'_, PyAny>, source: i64, tag: i64) -> PyResult<Request> {
        let job = job()?;
        let (from, tag) = (self::source(source, job.world.size())?, self::tag(tag)?);
        Bytes::get(buf, true, "Irecv")?;
        let request = job.world.irecv(from, tag).map_err(|e| Error::new_err(e.to_string()))?;
        Ok(Request::new(request, Then::Fill(buf.clone().unbind())))
    }

    /// Receives a message as `bytes`.
    #[pyo3(signature = (source=-1, tag=-1, status=None))]
    fn _recv_bytes<'py>(
        &self,
        py: Python<'py>,
        source: i64,
        tag: i64,
        status: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let job = job()?;
        let (from, tag) = (self::source(source, job.world.size())?, self::tag(tag)?);
        let (st, data) = blocking(py, job, || job.world.recv(from, tag).map_err(|e| e.to_string()))?;
        set_status(status, st.source, st.tag, data.len())?;
        Ok(PyBytes::new(py, &data))
    }

    /// Posts a receive whose request returns `decode(bytes)`.
    #[pyo3(signature = (source, tag, decode))]
    fn _irecv_decoded(&self, source: i64, tag: i64, decode: Py<PyAny>) -> PyResult<Request> {
        let job = job()?;
        let (from, tag) = (self::source(source, job.world.size())?, self::tag(tag)?);
        let request = job.world.irecv(from, tag).map_err(|e| Error::new_err(e.to_string()))?;
        Ok(Request::new(request, Then::Decode(decode)))
    }

    /// Returns when every rank has entered the barrier.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        blocking(py, job, || job.world.barrier().map_err(|e| e.to_string()))
    }

    /// Messages this process lent to peers on this host: read by them
    /// from the caller's own buffer (a blocking `Send`, or an `Isend`, of
    /// at least the ring's size), not from a copy.
    fn _shm_lent(&self) -> PyResult<u64> {
        Ok(job()?.world.runtime().shm_stats().lent)
    }

    /// Messages lent to this process by peers on this host that a `Recv`
    /// read from their memory straight into its buffer.
    fn _shm_read_in_place(&self) -> PyResult<u64> {
        Ok(job()?.world.runtime().shm_stats().read_in_place)
    }

    /// How this process reaches `peer`: `shm` (shared memory, on this
    /// host) or `udp`.
    fn _transport(&self, peer: i64) -> PyResult<&'static str> {
        let job = job()?;
        let peer = dest(peer, job.world.size())?;
        Ok(job.world.runtime().transport(peer).as_str())
    }

    /// The ping-pong of `python -m bulkwire.bench`, in Rust on this
    /// runtime: the seconds of each of `iterations` round trips of `size`
    /// bytes with `peer` (the lower rank starts).
    fn _pingpong_rust(&self, py: Python<'_>, peer: i64, size: usize, iterations: usize) -> PyResult<Vec<f64>> {
        let job = job()?;
        let peer = dest(peer, job.world.size())?;
        blocking(py, job, || {
            let world = job.world;
            let data = vec![0u8; size];
            let mut times = Vec::with_capacity(iterations);
            let err = |e: bulkwire_comm::CommError| e.to_string();
            for _ in 0..iterations {
                let start = std::time::Instant::now();
                if world.rank() < peer {
                    world.send(peer, 1, &data).map_err(err)?;
                    world.recv(Source::Rank(peer), Tag::Is(1)).map_err(err)?;
                } else {
                    world.recv(Source::Rank(peer), Tag::Is(1)).map_err(err)?;
                    world.send(peer, 1, &data).map_err(err)?;
                }
                times.push(start.elapsed().as_secs_f64());
            }
            Ok(times)
        })
    }
}

/// Copies a received message into a receive buffer of `len` bytes at
/// `addr`, exported writable by the caller.
fn into(addr: usize, len: usize, data: &[u8], source: u32, tag: i32) -> PyResult<()> {
    if data.len() > len {
        return Err(Error::new_err(format!(
            "Recv: the message from rank {source} with tag {tag} has {} bytes, the buffer {len}: it was truncated away",
            data.len(),
        )));
    }
    // SAFETY: the caller holds the writable export; `data` fits.
    unsafe { bytes_mut(addr, data.len()) }.copy_from_slice(data);
    Ok(())
}

/// What a request does with a message it received.
enum Then {
    /// A send: nothing.
    Nothing,
    /// Copies it into this buffer.
    Fill(Py<PyAny>),
    /// Returns this function of its bytes (`pickle.loads`).
    Decode(Py<PyAny>),
}

/// A send or receive under way: `wait()` completes it and returns what it
/// received (`None` for a send or a receive into a buffer).
#[pyclass(frozen, module = "bulkwire._bulkwire")]
struct Request {
    pending: Mutex<Option<bulkwire_comm::Request>>,
    /// A send that borrows its buffer (`Isend`), until it completes.
    borrowed: Mutex<Option<Borrow>>,
    then: Then,
}

/// A borrowing send and the buffer it reads: the send is dropped (which
/// waits for it) before the buffer is let go.
struct Borrow {
    send: bulkwire_comm::BorrowedSend<'static>,
    _buffer: Buf,
}

impl Request {
    fn new(request: bulkwire_comm::Request, then: Then) -> Request {
        Request { pending: Mutex::new(Some(request)), borrowed: Mutex::new(None), then }
    }

    fn borrowing(send: bulkwire_comm::BorrowedSend<'static>, buffer: Buf) -> Request {
        let borrowed = Mutex::new(Some(Borrow { send, _buffer: buffer }));
        Request { pending: Mutex::new(None), borrowed, then: Then::Nothing }
    }

    fn take_borrowed(&self) -> Option<Borrow> {
        self.borrowed.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn take(&self) -> PyResult<bulkwire_comm::Request> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::new_err("request was already completed"))
    }

    fn finish<'py>(
        &self,
        py: Python<'py>,
        c: Completion,
        status: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Completion::Received(st, data) = c else { return Ok(py.None().into_bound(py)) };
        set_status(status, st.source, st.tag, data.len())?;
        match &self.then {
            Then::Nothing => Ok(PyBytes::new(py, &data).into_any()),
            Then::Fill(buf) => {
                let b = Bytes::get(buf.bind(py), true, "Irecv")?;
                into(b.addr(), b.len(), &data, st.source, st.tag)?;
                Ok(py.None().into_bound(py))
            }
            Then::Decode(f) => f.bind(py).call1((PyBytes::new(py, &data),)),
        }
    }
}

#[pymethods]
impl Request {
    /// Waits until the request completes; returns what it received.
    #[pyo3(signature = (status=None))]
    fn wait<'py>(&self, py: Python<'py>, status: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let job = job()?;
        if let Some(Borrow { send, _buffer }) = self.take_borrowed() {
            blocking(py, job, || send.wait().map_err(|e| e.to_string()))?;
            return Ok(py.None().into_bound(py));
        }
        let request = self.take()?;
        let c = blocking(py, job, || job.world.wait(request).map_err(|e| e.to_string()))?;
        self.finish(py, c, status)
    }

    /// `(True, result)` once the request has completed (the result as
    /// `wait`'s), `(False, None)` before.
    #[pyo3(signature = (status=None))]
    fn test<'py>(&self, py: Python<'py>, status: Option<&Bound<'_, PyAny>>) -> PyResult<(bool, Bound<'py, PyAny>)> {
        let job = job()?;
        {
            let mut borrowed = self.borrowed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = borrowed.as_mut() {
                let done = b.send.test().map_err(|e| Error::new_err(e.to_string()));
                if !matches!(done, Ok(false)) {
                    *borrowed = None;
                }
                return Ok((done?, py.None().into_bound(py)));
            }
        }
        let done = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let Some(request) = pending.as_mut() else {
                return Err(Error::new_err("request was already completed"));
            };
            let done = job.world.test(request).map_err(|e| Error::new_err(e.to_string()))?;
            if done.is_some() {
                *pending = None;
            }
            done
        };
        match done {
            Some(c) => Ok((true, self.finish(py, c, status)?)),
            None => Ok((false, py.None().into_bound(py))),
        }
    }

    /// Waits for every request of `requests`; returns their results in order.
    #[staticmethod]
    #[pyo3(signature = (requests, statuses=None))]
    fn waitall<'py>(
        py: Python<'py>,
        requests: Vec<Bound<'py, Request>>,
        statuses: Option<Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if let Some(st) = statuses.as_ref().filter(|st| st.len() != requests.len()) {
            return Err(PyValueError::new_err(format!(
                "waitall: {} requests but {} statuses",
                requests.len(),
                st.len()
            )));
        }
        let mut results = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            results.push(r.get().wait(py, statuses.as_ref().map(|st| &st[i]))?);
        }
        Ok(results)
    }

    /// Whether the request has completed (waited for, or tested true).
    #[getter]
    fn done(&self) -> bool {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).is_none()
            && self.borrowed.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}

// ----- groups --------------------------------------------------------------

/// A group this process is a member of (`WORLD` is every process). Roots
/// and members are job ranks.
#[pyclass(frozen, module = "bulkwire._bulkwire")]
struct Group {
    id: GroupId,
}

fn group_err(e: bulkwire_groups::GroupError) -> String {
    e.to_string()
}

#[pymethods]
impl Group {
    /// The group of every process of the job.
    #[staticmethod]
    fn world() -> PyResult<Group> {
        job()?;
        Ok(Group { id: WORLD })
    }

    /// Creates a group called `name` of this process and `members`.
    #[staticmethod]
    fn create(py: Python<'_>, name: String, members: Vec<u32>) -> PyResult<Group> {
        let job = job()?;
        let g = blocking(py, job, || job.groups.create(&name, &members).map_err(group_err))?;
        Ok(Group { id: g.id() })
    }

    /// Joins the group called `name`.
    #[staticmethod]
    fn join(py: Python<'_>, name: String) -> PyResult<Group> {
        let job = job()?;
        let g = blocking(py, job, || job.groups.join(&name).map_err(group_err))?;
        Ok(Group { id: g.id() })
    }

    /// Waits until this process is a member of a group called `name`.
    #[staticmethod]
    fn find(py: Python<'_>, name: String) -> PyResult<Group> {
        let job = job()?;
        let g = blocking(py, job, || job.groups.find(&name).map_err(group_err))?;
        Ok(Group { id: g.id() })
    }

    /// `(name, view number, members)` as this process has the group now.
    fn view(&self) -> PyResult<(String, u32, Vec<u32>)> {
        let view = job()?.groups.group(self.id).view().map_err(|e| Error::new_err(e.to_string()))?;
        Ok((view.name, view.number, view.members))
    }

    /// Waits until the group's view has `n` members: its members.
    fn wait_members(&self, py: Python<'_>, n: usize) -> PyResult<Vec<u32>> {
        let job = job()?;
        let g = job.groups.group(self.id);
        blocking(py, job, || g.wait_members(n).map(|v| v.members).map_err(group_err))
    }

    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        blocking(py, job, || g.leave().map_err(group_err))
    }

    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        blocking(py, job, || g.destroy().map_err(group_err))
    }

    /// Chooses the algorithm of `op` (`None`: the automatic choice).
    #[pyo3(signature = (op, algorithm=None))]
    fn set_algorithm(&self, op: &str, algorithm: Option<&str>) -> PyResult<()> {
        let op: Operation = op.parse().map_err(PyValueError::new_err)?;
        let algorithm: Option<Algorithm> =
            algorithm.map(|a| a.parse::<Algorithm>()).transpose().map_err(PyValueError::new_err)?;
        job()?.groups.group(self.id).set_algorithm(op, algorithm).map_err(|e| Error::new_err(e.to_string()))
    }

    /// `"sent"` or `"confirmed"`: when a broadcast's root returns.
    fn set_delivery(&self, delivery: &str) -> PyResult<()> {
        let delivery: Delivery = delivery.parse().map_err(PyValueError::new_err)?;
        job()?.groups.group(self.id).set_delivery(delivery).map_err(|e| Error::new_err(e.to_string()))
    }

    fn bcast(&self, py: Python<'_>, root: u32, buf: &Bound<'_, PyAny>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let b = Buf::write(buf, "Bcast")?;
        let (addr, len) = (b.addr(), b.len());
        // SAFETY: `b` holds the writable memory until the call returns.
        blocking(py, job, || g.bcast(root, unsafe { bytes_mut(addr, len) }).map_err(group_err))
    }

    fn multicast(&self, py: Python<'_>, root: u32, targets: Vec<u32>, buf: &Bound<'_, PyAny>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let b = Buf::write(buf, "multicast")?;
        let (addr, len) = (b.addr(), b.len());
        // SAFETY: as in `bcast`.
        blocking(py, job, || g.multicast(root, &targets, unsafe { bytes_mut(addr, len) }).map_err(group_err))
    }

    /// Reduces every member's `buf` into `root`'s, element by element.
    fn reduce(&self, py: Python<'_>, root: u32, buf: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let op = OpName::parse(op)?;
        let b = Buf::write(buf, "Reduce")?;
        let (kind, addr, len) = (b.kind("Reduce")?, b.addr(), b.len());
        blocking(py, job, || typed!(kind, addr, len, |s| g.reduce(root, s, op.op()).map_err(group_err)))
    }

    /// Reduces every member's `buf` into every member's.
    fn allreduce(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, op: &str) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let op = OpName::parse(op)?;
        let b = Buf::write(buf, "Allreduce")?;
        let (kind, addr, len) = (b.kind("Allreduce")?, b.addr(), b.len());
        blocking(py, job, || typed!(kind, addr, len, |s| g.allreduce(s, op.op()).map_err(group_err)))
    }

    /// Every member's `send` lands in `root`'s `recv` (n blocks, view order).
    #[pyo3(signature = (root, send, recv=None))]
    fn gather(
        &self,
        py: Python<'_>,
        root: u32,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let s = Buf::read(send, "Gather")?;
        let r = recv.map(|r| Buf::write(r, "Gather")).transpose()?;
        let (sa, sl) = (s.addr(), s.len());
        let (ra, rl) = r.as_ref().map_or((0, 0), |r| (r.addr(), r.len()));
        // SAFETY: `s` and `r` hold their memory until the call returns.
        blocking(py, job, || g.gather(root, unsafe { bytes(sa, sl) }, unsafe { bytes_mut(ra, rl) }).map_err(group_err))
    }

    /// `root`'s `send` (n blocks of `len(recv)` bytes) is dealt out.
    #[pyo3(signature = (root, send, recv))]
    fn scatter(
        &self,
        py: Python<'_>,
        root: u32,
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let s = send.map(|s| Buf::read(s, "Scatter")).transpose()?;
        let r = Buf::write(recv, "Scatter")?;
        let (sa, sl) = s.as_ref().map_or((0, 0), |s| (s.addr(), s.len()));
        let (ra, rl) = (r.addr(), r.len());
        // SAFETY: as in `gather`.
        blocking(py, job, || g.scatter(root, unsafe { bytes(sa, sl) }, unsafe { bytes_mut(ra, rl) }).map_err(group_err))
    }

    /// Every member's `send` lands in every member's `recv`, in view order.
    fn allgather(&self, py: Python<'_>, send: &Bound<'_, PyAny>, recv: &Bound<'_, PyAny>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let s = Buf::read(send, "Allgather")?;
        let r = Buf::write(recv, "Allgather")?;
        let (sa, sl, ra, rl) = (s.addr(), s.len(), r.addr(), r.len());
        // SAFETY: as in `gather`.
        blocking(py, job, || g.allgather(unsafe { bytes(sa, sl) }, unsafe { bytes_mut(ra, rl) }).map_err(group_err))
    }

    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        blocking(py, job, || g.barrier().map_err(group_err))
    }

    /// Sends `data` to every other member without a common call (a post).
    fn post(&self, py: Python<'_>, tag: i64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let tag = send_tag(tag)?;
        let b = Buf::read(data, "post")?;
        let (addr, len) = (b.addr(), b.len());
        // SAFETY: `b` holds the memory until the call returns.
        blocking(py, job, || g.post(tag, unsafe { bytes(addr, len) }).map_err(group_err))
    }

    /// The next post from `source` with `tag` (-1: any): `(bytes, source,
    /// tag)`; with `block=False`, `None` if none has come.
    #[pyo3(signature = (source, tag, block=true))]
    fn recv_post<'py>(
        &self,
        py: Python<'py>,
        source: i64,
        tag: i64,
        block: bool,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u32, i32)>> {
        let job = job()?;
        let g = job.groups.group(self.id);
        let (from, tag) = (self::source(source, job.world.size())?, self::tag(tag)?);
        let post = blocking(py, job, || {
            if block {
                g.recv(from, tag).map(Some).map_err(group_err)
            } else {
                g.try_recv(from, tag).map_err(group_err)
            }
        })?;
        Ok(post.map(|p| (PyBytes::new(py, &p.data), p.from, p.tag)))
    }

    /// Latest-value mode for this group's posts.
    fn set_latest_only(&self, on: bool) -> PyResult<()> {
        job()?.groups.group(self.id).set_latest_only(on).map_err(|e| Error::new_err(e.to_string()))
    }

    /// Best-effort mode for the posts this process makes.
    fn set_best_effort(&self, on: bool) -> PyResult<()> {
        job()?.groups.group(self.id).set_best_effort(on).map_err(|e| Error::new_err(e.to_string()))
    }

    /// Acknowledgements of confirmed broadcasts this process received.
    fn acks_received(&self) -> PyResult<u64> {
        Ok(job()?.groups.stats().acks_received)
    }
}

// ----- BSP -----------------------------------------------------------------

/// A BSP computation of every process of the job, on the job's runtime.
#[pyclass(unsendable, module = "bulkwire._bulkwire")]
struct Bsp {
    bsp: Option<RustBsp>,
    /// Registered buffers by address, most recent last: their exports keep
    /// the arrays from being resized or freed while registered.
    regs: HashMap<usize, Vec<Buf>>,
    /// Buffers that must live until the end of the next sync: popped
    /// registrations, and the destinations of gets.
    until_sync: Vec<Buf>,
}

/// `&mut Bsp` crossing into the call that runs without the interpreter
/// lock: the closure runs on this same thread, before the call returns.
struct OnThisThread<'a>(&'a mut RustBsp);
// SAFETY: see above; nothing of the Bsp leaves this thread.
unsafe impl Send for OnThisThread<'_> {}

impl Bsp {
    fn bsp(&mut self) -> PyResult<&mut RustBsp> {
        self.bsp.as_mut().ok_or_else(|| Error::new_err("this BSP section has ended"))
    }

    fn registered(&self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<(usize, usize)> {
        let b = Buf::read(obj, what)?;
        match self.regs.get(&b.addr()) {
            Some(bufs) if !bufs.is_empty() => Ok((b.addr(), b.item_size())),
            _ => Err(Error::new_err(format!(
                "{what}: the array is not registered (call push_reg on every process first)"
            ))),
        }
    }
}

fn bsp_err(e: bulkwire_bsp::BspError) -> PyErr {
    Error::new_err(e.to_string())
}

#[pymethods]
impl Bsp {
    /// `bsp_begin` with every process of the job.
    #[new]
    fn new(py: Python<'_>) -> PyResult<Bsp> {
        join(py)?;
        let job = job()?;
        let rt = job.world.runtime();
        let bsp = blocking(py, job, || RustBsp::begin_on(rt).map_err(|e| e.to_string()))?;
        Ok(Bsp { bsp: Some(bsp), regs: HashMap::new(), until_sync: Vec::new() })
    }

    #[getter]
    fn pid(&mut self) -> PyResult<u32> {
        Ok(self.bsp()?.pid())
    }

    #[getter]
    fn nprocs(&mut self) -> PyResult<u32> {
        Ok(self.bsp()?.nprocs())
    }

    /// Seconds since the section began.
    fn time(&mut self) -> PyResult<f64> {
        Ok(self.bsp()?.time())
    }

    /// Registers the writable contiguous buffer `array` (collective; in
    /// effect from the next sync).
    fn push_reg(&mut self, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = Buf::write(array, "push_reg")?;
        let (addr, len) = (b.addr(), b.len());
        // SAFETY: the export in `regs` keeps the memory valid while it is
        // registered; the array is only touched by this thread.
        unsafe { self.bsp()?.push_reg_raw(addr as *const u8, len) }.map_err(bsp_err)?;
        self.regs.entry(addr).or_default().push(b);
        Ok(())
    }

    /// Removes the most recent registration of `array` (from the next sync).
    fn pop_reg(&mut self, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = Buf::read(array, "pop_reg")?;
        let addr = b.addr();
        self.bsp()?.pop_reg_raw(addr as *const u8).map_err(bsp_err)?;
        if let Some(held) = self.regs.get_mut(&addr).and_then(Vec::pop) {
            self.until_sync.push(held);
        }
        Ok(())
    }

    /// Copies `src` now into process `pid`'s registered `dst`, at element
    /// `offset` of it, at the end of the sync.
    #[pyo3(signature = (pid, src, dst, offset=0))]
    fn put(&mut self, pid: u32, src: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let (dst_addr, item) = self.registered(dst, "put")?;
        let s = Buf::read(src, "put")?;
        let bsp = self.bsp()?;
        // SAFETY: `s` holds the source, which is copied now.
        unsafe { bsp.put_raw(pid, s.addr() as *const u8, dst_addr as *const u8, offset * item, s.len()) }
            .map_err(bsp_err)
    }

    /// Fills `dst` with `len(dst)` bytes of process `pid`'s registered
    /// `src` from element `offset`, as they are at the end of this
    /// superstep, by the end of the sync.
    #[pyo3(signature = (pid, src, dst, offset=0))]
    fn get(&mut self, pid: u32, src: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let (src_addr, item) = self.registered(src, "get")?;
        let d = Buf::write(dst, "get")?;
        let bsp = self.bsp()?;
        // SAFETY: `until_sync` holds the destination until the sync ends.
        unsafe { bsp.get_raw(pid, src_addr as *const u8, offset * item, d.addr() as *mut u8, d.len()) }
            .map_err(bsp_err)?;
        self.until_sync.push(d);
        Ok(())
    }

    /// Sets the tag size of messages from the next sync; returns the old one.
    fn set_tagsize(&mut self, size: usize) -> PyResult<usize> {
        self.bsp()?.set_tagsize(size).map_err(bsp_err)
    }

    /// Sends `payload` with `tag` (of the tag size) to `pid`'s queue.
    fn send(&mut self, pid: u32, tag: &Bound<'_, PyAny>, payload: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = Buf::read(tag, "send")?;
        let p = Buf::read(payload, "send")?;
        let bsp = self.bsp()?;
        // SAFETY: both buffers are held for the call, which copies them.
        bsp.send(pid, unsafe { bytes(t.addr(), t.len()) }, unsafe { bytes(p.addr(), p.len()) }).map_err(bsp_err)
    }

    /// `(messages, payload bytes)` waiting in the queue.
    fn qsize(&mut self) -> PyResult<(usize, usize)> {
        Ok(self.bsp()?.qsize())
    }

    /// Takes the first message of the queue: `(tag, payload)` as bytes, or
    /// `None` when the queue is empty.
    #[pyo3(name = "move")]
    fn move_message<'py>(&mut self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let bsp = self.bsp()?;
        Ok(bsp.messages().next().map(|m| (PyBytes::new(py, m.tag), PyBytes::new(py, m.payload))))
    }

    /// Ends the superstep.
    fn sync(&mut self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        let bsp = OnThisThread(self.bsp()?);
        blocking(py, job, move || {
            let bsp = bsp;
            bsp.0.sync().map_err(|e| e.to_string())
        })?;
        self.until_sync.clear();
        Ok(())
    }

    /// `bsp_end`: the last sync. The job's runtime stays, for later calls.
    fn end(&mut self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        let bsp = self.bsp.take().ok_or_else(|| Error::new_err("this BSP section has ended"))?;
        blocking(py, job, move || bsp.end().map_err(|e| e.to_string()))?;
        self.until_sync.clear();
        self.regs.clear();
        Ok(())
    }

    /// Whether the section is still running.
    #[getter]
    fn active(&self) -> bool {
        self.bsp.is_some()
    }
}

// ----- shared memory ---------------------------------------------------------

fn dsm_err(e: bulkwire_dsm::DsmError) -> String {
    e.to_string()
}

fn semantics(name: &str) -> PyResult<bulkwire_dsm::Semantics> {
    name.parse().map_err(PyValueError::new_err)
}

fn elem_type(dtype: &str) -> PyResult<bulkwire_dsm::ElemType> {
    use bulkwire_dsm::ElemType as E;
    Ok(match dtype {
        "int8" => E::I8,
        "uint8" => E::U8,
        "int16" => E::I16,
        "uint16" => E::U16,
        "int32" => E::I32,
        "uint32" => E::U32,
        "int64" => E::I64,
        "uint64" => E::U64,
        "float32" => E::F32,
        "float64" => E::F64,
        other => {
            return Err(PyValueError::new_err(format!(
                "{other:?} is not a segment type: int8 to int64, uint8 to uint64, float32 or float64"
            )))
        }
    })
}

/// A Python number as the bits of an element of type `t`.
fn to_bits(value: &Bound<'_, PyAny>, t: bulkwire_dsm::ElemType) -> PyResult<u64> {
    use bulkwire_dsm::{ElemType as E, Element};
    Ok(match t {
        E::F32 => Element::to_bits(value.extract::<f32>()?),
        E::F64 => Element::to_bits(value.extract::<f64>()?),
        E::I8 => Element::to_bits(value.extract::<i8>()?),
        E::U8 => Element::to_bits(value.extract::<u8>()?),
        E::I16 => Element::to_bits(value.extract::<i16>()?),
        E::U16 => Element::to_bits(value.extract::<u16>()?),
        E::I32 => Element::to_bits(value.extract::<i32>()?),
        E::U32 => Element::to_bits(value.extract::<u32>()?),
        E::I64 => Element::to_bits(value.extract::<i64>()?),
        E::U64 => Element::to_bits(value.extract::<u64>()?),
    })
}

/// An element's bits as a Python number.
fn from_bits(py: Python<'_>, bits: u64, t: bulkwire_dsm::ElemType) -> PyResult<Py<PyAny>> {
    use bulkwire_dsm::{ElemType as E, Element};
    Ok(match t {
        E::F32 => <f32 as Element>::from_bits(bits).into_pyobject(py)?.into_any().unbind(),
        E::F64 => <f64 as Element>::from_bits(bits).into_pyobject(py)?.into_any().unbind(),
        E::I8 | E::I16 | E::I32 | E::I64 => {
            let v: i64 = match t {
                E::I8 => i64::from(<i8 as Element>::from_bits(bits)),
                E::I16 => i64::from(<i16 as Element>::from_bits(bits)),
                E::I32 => i64::from(<i32 as Element>::from_bits(bits)),
                _ => <i64 as Element>::from_bits(bits),
            };
            v.into_pyobject(py)?.into_any().unbind()
        }
        _ => bits_unsigned(bits, t).into_pyobject(py)?.into_any().unbind(),
    })
}

fn bits_unsigned(bits: u64, t: bulkwire_dsm::ElemType) -> u64 {
    use bulkwire_dsm::ElemType as E;
    match t {
        E::U8 => bits & 0xff,
        E::U16 => bits & 0xffff,
        E::U32 => bits & 0xffff_ffff,
        _ => bits,
    }
}

/// The bits of one element of type `kind` in machine order at `c`, as
/// [`bulkwire_dsm::Element::to_bits`] gives them (signed types keep their
/// sign).
fn element_bits(kind: bulkwire_dsm::ElemType, c: &[u8]) -> u64 {
    use bulkwire_dsm::{ElemType as E, Element};
    match kind {
        E::I8 => Element::to_bits(i8::from_ne_bytes([c[0]])),
        E::U8 => u64::from(c[0]),
        E::I16 => Element::to_bits(i16::from_ne_bytes([c[0], c[1]])),
        E::U16 => u64::from(u16::from_ne_bytes([c[0], c[1]])),
        E::I32 => Element::to_bits(i32::from_ne_bytes(c[..4].try_into().expect("4"))),
        E::U32 | E::F32 => u64::from(u32::from_ne_bytes(c[..4].try_into().expect("4"))),
        E::I64 | E::U64 | E::F64 => u64::from_ne_bytes(c[..8].try_into().expect("8")),
    }
}

/// This process's shared memory (seed 003's Mermera): every process of the
/// job makes one, then maps the same segments in the same order.
#[pyclass(frozen, subclass, module = "bulkwire._bulkwire")]
struct SharedMemory {
    dsm: bulkwire_dsm::Dsm<'static>,
}

#[pymethods]
impl SharedMemory {
    #[new]
    fn new(py: Python<'_>) -> PyResult<SharedMemory> {
        join(py)?;
        let job = job()?;
        let settings = bulkwire_dsm::DsmSettings::from_env().map_err(|e| Error::new_err(e.to_string()))?;
        let dsm = bulkwire_dsm::Dsm::with_settings(job.world.runtime(), settings)
            .map_err(|e| Error::new_err(e.to_string()))?;
        Ok(SharedMemory { dsm })
    }

    /// Maps the segment `name` of `count` elements of `dtype` (zeros at first).
    #[pyo3(signature = (name, count, dtype="float64"))]
    fn map(slf: &Bound<'_, SharedMemory>, name: &str, count: usize, dtype: &str) -> PyResult<Segment> {
        let t = elem_type(dtype)?;
        let (id, storage) = slf.get().dsm.map_raw(name, t, count).map_err(|e| Error::new_err(e.to_string()))?;
        Ok(Segment { memory: slf.clone().unbind(), id, storage, dtype: dtype.to_string() })
    }

    /// Collective: returns once every write issued anywhere before it is
    /// visible here.
    fn fence(&self, py: Python<'_>) -> PyResult<()> {
        let job = job()?;
        blocking(py, job, || self.dsm.fence().map_err(dsm_err))
    }

    /// Sends this process's buffered writes now.
    fn flush(&self) -> PyResult<()> {
        self.dsm.flush().map_err(|e| Error::new_err(e.to_string()))
    }

    /// Counters: batches sent, writes coalesced, the flush threshold, ….
    fn stats(&self) -> std::collections::HashMap<&'static str, f64> {
        let s = self.dsm.stats();
        std::collections::HashMap::from([
            ("batches_sent", s.batches_sent as f64),
            ("entries_sent", s.entries_sent as f64),
            ("coalesced", s.coalesced as f64),
            ("applied", s.applied as f64),
            ("threshold", s.threshold),
            ("last_warp", s.last_warp),
        ])
    }
}

/// A segment of the shared memory: `seg[i]` reads element `i` from this
/// process's replica; `write` writes with a semantics.
#[pyclass(frozen, module = "bulkwire._bulkwire")]
struct Segment {
    memory: Py<SharedMemory>,
    id: bulkwire_dsm::SegId,
    storage: Arc<bulkwire_dsm::Storage>,
    dtype: String,
}

impl Segment {
    /// The element type of array `b`, which must be the segment's.
    fn same_type(&self, call: &str, b: &Buf) -> PyResult<bulkwire_dsm::ElemType> {
        let kind = b.kind(call)?;
        if kind != self.storage.elem {
            return Err(PyTypeError::new_err(format!(
                "{call}: segment {:?} holds {}, the array {}",
                self.storage.name,
                self.storage.elem.name(),
                kind.name()
            )));
        }
        Ok(kind)
    }

    fn index(&self, call: &str, i: isize) -> PyResult<usize> {
        let len = self.storage.len() as isize;
        let at = if i < 0 { i + len } else { i };
        if !(0..len).contains(&at) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "{call}: index {i} is out of range: segment {:?} has {len} elements",
                self.storage.name
            )));
        }
        Ok(at as usize)
    }
}

#[pymethods]
impl Segment {
    fn __len__(&self) -> usize {
        self.storage.len()
    }

    fn __getitem__(&self, py: Python<'_>, i: isize) -> PyResult<Py<PyAny>> {
        let at = self.index("read", i)?;
        from_bits(py, self.storage.load(at), self.storage.elem)
    }

    #[getter]
    fn name(&self) -> String {
        self.storage.name.clone()
    }

    #[getter]
    fn dtype(&self) -> String {
        self.dtype.clone()
    }

    /// Writes `value` at `index`: `semantics` is "slow", "pram" or "coherent".
    #[pyo3(signature = (index, value, semantics="slow"))]
    fn write(&self, py: Python<'_>, index: isize, value: &Bound<'_, PyAny>, semantics: &str) -> PyResult<()> {
        let at = self.index("write", index)?;
        let bits = to_bits(value, self.storage.elem)?;
        let sem = self::semantics(semantics)?;
        let memory = self.memory.get();
        let job = job()?;
        blocking(py, job, || memory.dsm.write_raw(self.id, at, &[bits], sem).map_err(dsm_err))
    }

    /// Writes the array `values` (of the segment's dtype) from `start` on.
    #[pyo3(signature = (start, values, semantics="slow"))]
    fn write_array(&self, py: Python<'_>, start: usize, values: &Bound<'_, PyAny>, semantics: &str) -> PyResult<()> {
        let b = Buf::read(values, "write_array")?;
        let kind = self.same_type("write_array", &b)?;
        let sem = self::semantics(semantics)?;
        let size = b.item_size();
        // SAFETY: `b` holds the contiguous memory for the call.
        let raw = unsafe { bytes(b.addr(), b.len()) };
        let bits: Vec<u64> = raw.chunks_exact(size).map(|c| element_bits(kind, c)).collect();
        let memory = self.memory.get();
        let job = job()?;
        blocking(py, job, || memory.dsm.write_raw(self.id, start, &bits, sem).map_err(dsm_err))
    }

    /// Copies elements `start..start + len(out)` into the array `out` (of
    /// the segment's dtype).
    #[pyo3(signature = (out, start=0))]
    fn read_into(&self, out: &Bound<'_, PyAny>, start: usize) -> PyResult<()> {
        let b = Buf::write(out, "read_into")?;
        self.same_type("read_into", &b)?;
        let size = b.item_size();
        let count = b.len() / size;
        if start.checked_add(count).is_none_or(|end| end > self.storage.len()) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "read_into: elements {start} to {} are out of range: segment {:?} has {}",
                start + count,
                self.storage.name,
                self.storage.len()
            )));
        }
        // SAFETY: `b` holds the writable memory for the call.
        let out = unsafe { bytes_mut(b.addr(), b.len()) };
        for (i, chunk) in out.chunks_exact_mut(size).enumerate() {
            let bits = self.storage.load(start + i);
            match size {
                1 => chunk.copy_from_slice(&(bits as u8).to_ne_bytes()),
                2 => chunk.copy_from_slice(&(bits as u16).to_ne_bytes()),
                4 => chunk.copy_from_slice(&(bits as u32).to_ne_bytes()),
                _ => chunk.copy_from_slice(&bits.to_ne_bytes()),
            }
        }
        Ok(())
    }
}

// ----- the launcher --------------------------------------------------------

#[derive(clap::Parser)]
#[command(name = "python -m bulkwire.run", about = "Runs a program as a job of N processes (as `bulkwire run`)")]
struct RunCommand {
    #[command(flatten)]
    args: bulkwire_launch::Args,
}

/// `bulkwire run` with `argv` (its first word the command's name): starts
/// the job, waits for it, and returns its exit status. A program that is a
/// Python script (`prog.py`), or `-m module` or `-c code`, is run by
/// `interpreter`.
#[pyfunction]
#[pyo3(signature = (argv, interpreter=None))]
fn launch(py: Python<'_>, argv: Vec<String>, interpreter: Option<String>) -> i32 {
    use clap::Parser;
    let mut command = match RunCommand::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let program = &command.args.command[0];
    if let Some(python) = interpreter.filter(|_| program.ends_with(".py") || program == "-m" || program == "-c") {
        command.args.command.insert(0, python);
    }
    match py.detach(|| bulkwire_launch::run(&command.args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bulkwire: {e}");
            1
        }
    }
}

#[pymodule]
fn _bulkwire(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<World>()?;
    m.add_class::<Request>()?;
    m.add_class::<Group>()?;
    m.add_class::<Bsp>()?;
    m.add_class::<SharedMemory>()?;
    m.add_class::<Segment>()?;
    m.add_function(wrap_pyfunction!(join, m)?)?;
    m.add_function(wrap_pyfunction!(joined, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(fail, m)?)?;
    m.add_function(wrap_pyfunction!(launch, m)?)?;
    Ok(())
}
