"""bulkwire for Python: messages, groups and collectives, and BSP for
programs started by ``bulkwire run`` (or ``python -m bulkwire.run``).

The calls follow mpi4py's conventions: lower-case methods move Python
objects (pickled), upper-case ones move buffers (NumPy arrays,
``bytearray``, ``array.array``, anything with the buffer protocol) without
pickling::

    import bulkwire
    world = bulkwire.World()
    if world.rank == 0:
        world.send({"step": 1}, dest=1, tag=7)
    elif world.rank == 1:
        print(world.recv(source=0, tag=7))
    total = world.allreduce(world.rank, op=bulkwire.SUM)

A process joins its job on the first ``World()`` (or ``bsp()``), leaves it
cleanly when the interpreter exits, and stops the whole job, with the
reason, on an uncaught exception. Every waiting call releases the
interpreter lock and ends with ``KeyboardInterrupt`` on Ctrl-C. Errors of
the runtime are raised as :class:`Error` with the runtime's own message.
"""

from __future__ import annotations

import atexit
import functools
import operator
import pickle
import struct
import sys
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from . import _bulkwire
from ._bulkwire import Error, Request

__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "IN_PLACE",
    "BSP",
    "Error",
    "Group",
    "MAX",
    "MIN",
    "Op",
    "PROD",
    "Request",
    "SharedMemory",
    "SUM",
    "Status",
    "World",
    "Wtime",
    "bsp",
]

#: Receive from any rank.
ANY_SOURCE = -1
#: Receive any tag.
ANY_TAG = -1


class _InPlace:
    def __repr__(self) -> str:
        return "bulkwire.IN_PLACE"


#: As the send buffer of ``Reduce``/``Allreduce``: the receive buffer holds
#: this process's contribution and is overwritten with the result.
IN_PLACE = _InPlace()

_PICKLE = pickle.HIGHEST_PROTOCOL


class Op:
    """A reduction: applied natively, element by element, to buffers of
    numbers, and as ``fn(a, b)`` to Python objects."""

    def __init__(self, name: Optional[str], fn: Callable[[Any, Any], Any]):
        self.name = name
        self.fn = fn

    def __call__(self, a: Any, b: Any) -> Any:
        return self.fn(a, b)

    def __repr__(self) -> str:
        return f"bulkwire.Op({self.name or self.fn!r})"


SUM = Op("sum", operator.add)
PROD = Op("prod", operator.mul)
MIN = Op("min", min)
MAX = Op("max", max)

OpLike = Union[Op, Callable[[Any, Any], Any]]


def _op(op: OpLike) -> Op:
    if isinstance(op, Op):
        return op
    if callable(op):
        return Op(None, op)
    raise TypeError(f"op: expected bulkwire.SUM, PROD, MIN, MAX or a function of two arguments, got {op!r}")


class Status:
    """What a receive got: ``source``, ``tag`` and ``count`` (bytes)."""

    def __init__(self) -> None:
        self.source = ANY_SOURCE
        self.tag = ANY_TAG
        self.count = 0

    def _set(self, source: int, tag: int, count: int) -> None:
        self.source, self.tag, self.count = source, tag, count

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_count(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Status(source={self.source}, tag={self.tag}, count={self.count})"


# ----- joining and leaving ---------------------------------------------------

_failed = False
_original_excepthook = sys.excepthook


def _excepthook(kind, value, traceback) -> None:
    """An uncaught exception stops the whole job, not just this rank: the
    others would otherwise wait for it forever."""
    global _failed
    _original_excepthook(kind, value, traceback)
    if _bulkwire.joined() and not _failed:
        _failed = True
        rank = _bulkwire.World().rank
        _bulkwire.fail(f"rank {rank}: {kind.__name__}: {value}")


def _at_exit() -> None:
    if _bulkwire.joined() and not _failed:
        _bulkwire.finalize()


def _join() -> None:
    if not _bulkwire.joined():
        _bulkwire.join()
        sys.excepthook = _excepthook
        atexit.register(_at_exit)


def Wtime() -> float:
    """Seconds since this process joined its job."""
    return World().wtime()


# ----- collectives, shared by the world and groups --------------------------


def _copy_into(dst: Any, src: Any) -> None:
    d, s = memoryview(dst).cast("B"), memoryview(src).cast("B")
    if d.nbytes != s.nbytes:
        raise ValueError(f"the send buffer has {s.nbytes} bytes, the receive buffer {d.nbytes}: they must match")
    d[:] = s


def _writable_copy(buf: Any) -> Any:
    if hasattr(buf, "copy") and hasattr(buf, "dtype"):
        return buf.copy()
    view = memoryview(buf)
    return memoryview(bytearray(view.tobytes())).cast(view.format)


def _numpy_blocks(buf: Any, count: int):
    import numpy

    flat = numpy.frombuffer(memoryview(buf).cast("B"), dtype=numpy.asarray(memoryview(buf)).dtype)
    return flat.reshape(count, -1)


class _Collectives:
    """Collective calls of a set of processes (the job, or a group): every
    member calls each of them, in the same order. Roots are job ranks."""

    _native: Any

    def _me(self) -> int:
        raise NotImplementedError

    def _size(self) -> int:
        raise NotImplementedError

    def _position(self) -> int:
        raise NotImplementedError

    # --- barrier

    def barrier(self) -> None:
        """Returns when every member has entered the barrier."""
        self._native.barrier()

    Barrier = barrier

    # --- buffers

    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Copies ``root``'s ``buf`` into every member's ``buf`` (one size)."""
        self._native.bcast(root, buf)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: OpLike = SUM, root: int = 0) -> None:
        """Combines every member's ``sendbuf`` element by element into
        ``root``'s ``recvbuf`` (``sendbuf`` may be ``IN_PLACE`` at the root)."""
        op = _op(op)
        if self._me() == root:
            if recvbuf is None:
                raise ValueError("Reduce: the root needs a receive buffer")
            if sendbuf is not IN_PLACE:
                _copy_into(recvbuf, sendbuf)
            work = recvbuf
        else:
            if sendbuf is IN_PLACE:
                raise ValueError("Reduce: IN_PLACE is for the root only")
            work = _writable_copy(sendbuf)
        if op.name is not None:
            self._native.reduce(root, work, op.name)
            return
        blocks = self._gather_blocks(work, root)
        if blocks is not None:
            _copy_into(work, functools.reduce(op.fn, blocks))

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: OpLike = SUM) -> None:
        """Combines every member's ``sendbuf`` element by element into every
        member's ``recvbuf`` (``sendbuf`` may be ``IN_PLACE``)."""
        op = _op(op)
        if sendbuf is not IN_PLACE:
            _copy_into(recvbuf, sendbuf)
        if op.name is not None:
            self._native.allreduce(recvbuf, op.name)
            return
        n = self._size()
        gathered = bytearray(memoryview(recvbuf).nbytes * n)
        self._native.allgather(recvbuf, gathered)
        view = memoryview(recvbuf)
        import numpy

        blocks = numpy.frombuffer(gathered, dtype=numpy.asarray(view).dtype).reshape(n, -1)
        _copy_into(recvbuf, functools.reduce(op.fn, list(blocks)))

    def _gather_blocks(self, buf: Any, root: int):
        n = self._size()
        nbytes = memoryview(buf).nbytes
        gathered = bytearray(nbytes * n) if self._me() == root else None
        self._native.gather(root, buf, gathered)
        if gathered is None:
            return None
        import numpy

        return list(numpy.frombuffer(gathered, dtype=numpy.asarray(memoryview(buf)).dtype).reshape(n, -1))

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """Every member's ``sendbuf`` lands in ``root``'s ``recvbuf``, one
        block per member in member order (``recvbuf`` is only used at the root)."""
        self._native.gather(root, sendbuf, recvbuf if self._me() == root else None)

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """``root``'s ``sendbuf`` (one block of ``len(recvbuf)`` bytes per
        member) is dealt out, block i to the member at position i."""
        self._native.scatter(root, sendbuf if self._me() == root else None, recvbuf)

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Every member's ``sendbuf`` lands in every member's ``recvbuf``."""
        self._native.allgather(sendbuf, recvbuf)

    # --- objects

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """``root``'s ``obj``, at every member."""
        length = bytearray(8)
        data = b""
        if self._me() == root:
            data = pickle.dumps(obj, _PICKLE)
            length[:] = struct.pack("<q", len(data))
        self._native.bcast(root, length)
        buf = bytearray(data) if self._me() == root else bytearray(struct.unpack("<q", length)[0])
        self._native.bcast(root, buf)
        return obj if self._me() == root else pickle.loads(buf)

    def _lengths(self, n: int) -> list[int]:
        lengths = bytearray(8 * self._size())
        self._native.allgather(struct.pack("<q", n), lengths)
        return list(struct.unpack(f"<{self._size()}q", lengths))

    def gather(self, obj: Any, root: int = 0) -> Optional[list]:
        """Every member's ``obj``, as a list in member order at ``root``
        (``None`` elsewhere)."""
        data = pickle.dumps(obj, _PICKLE)
        lengths = self._lengths(len(data))
        width = max(lengths)
        out = bytearray(width * len(lengths)) if self._me() == root else None
        self._native.gather(root, data.ljust(width, b"\0"), out)
        if out is None:
            return None
        return [pickle.loads(out[i * width : i * width + n]) for i, n in enumerate(lengths)]

    def allgather(self, obj: Any) -> list:
        """Every member's ``obj``, as a list in member order, at every member."""
        data = pickle.dumps(obj, _PICKLE)
        lengths = self._lengths(len(data))
        width = max(lengths)
        out = bytearray(width * len(lengths))
        self._native.allgather(data.ljust(width, b"\0"), out)
        return [pickle.loads(out[i * width : i * width + n]) for i, n in enumerate(lengths)]

    def scatter(self, objs: Optional[Sequence[Any]] = None, root: int = 0) -> Any:
        """Item i of ``root``'s sequence ``objs``, at the member at position i."""
        n = self._size()
        lengths = bytearray(8 * n)
        send = None
        if self._me() == root:
            if objs is None or len(objs) != n:
                got = "None" if objs is None else f"{len(objs)} items"
                raise ValueError(f"scatter: the root needs one item per member ({n}), got {got}")
            datas = [pickle.dumps(o, _PICKLE) for o in objs]
            lengths[:] = struct.pack(f"<{n}q", *map(len, datas))
        self._native.bcast(root, lengths)
        sizes = struct.unpack(f"<{n}q", lengths)
        width = max(sizes)
        if self._me() == root:
            send = b"".join(d.ljust(width, b"\0") for d in datas)
        out = bytearray(width)
        self._native.scatter(root, send, out)
        return pickle.loads(out[: sizes[self._position()]])

    def reduce(self, obj: Any, op: OpLike = SUM, root: int = 0) -> Any:
        """``op`` folded over every member's ``obj`` in member order, at
        ``root`` (``None`` elsewhere)."""
        items = self.gather(obj, root)
        return None if items is None else functools.reduce(_op(op).fn, items)

    def allreduce(self, obj: Any, op: OpLike = SUM) -> Any:
        """``op`` folded over every member's ``obj`` in member order, at
        every member (each folds the same list, so all get the same value)."""
        return functools.reduce(_op(op).fn, self.allgather(obj))


# ----- the job -----------------------------------------------------------------


class World(_bulkwire.World, _Collectives):
    """This process's job: ``rank``, ``size``, messages and collectives of all
    ranks. ``World()`` joins the job on its first call and returns the same
    object afterwards.

    The buffer calls ``Send(buf, dest, tag=0)``, ``Recv(buf, source=ANY_SOURCE,
    tag=ANY_TAG, status=None)``, ``Isend`` and ``Irecv`` are the native
    module's, without a Python layer between."""

    _instance: Optional["World"] = None

    def __new__(cls) -> "World":
        if cls._instance is None:
            _join()
            self = super().__new__(cls)
            self._native = _bulkwire.Group.world()
            cls._instance = self
        return cls._instance

    def _me(self) -> int:
        return self.rank

    def _size(self) -> int:
        return self.size

    def _position(self) -> int:
        return self.rank

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def Wtime(self) -> float:
        return self.wtime()

    # --- objects

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Sends ``obj`` (pickled); returns once it is queued."""
        self.Send(pickle.dumps(obj, _PICKLE), dest, tag)

    def recv(self, buf: None = None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None) -> Any:
        """Receives an object from ``source`` with ``tag``."""
        return pickle.loads(self._recv_bytes(source, tag, status))

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        """Starts sending ``obj``."""
        return self.Isend(pickle.dumps(obj, _PICKLE), dest, tag)

    def irecv(self, buf: None = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Posts a receive of an object; the request's ``wait()`` returns it."""
        return self._irecv_decoded(source, tag, pickle.loads)

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE, recvtag: int = ANY_TAG,
                 status: Optional[Status] = None) -> Any:
        """Sends ``sendobj`` to ``dest`` and receives an object from ``source``."""
        request = self.irecv(source=source, tag=recvtag)
        self.send(sendobj, dest, sendtag)
        return request.wait(status)

    # --- groups

    def create_group(self, name: str, members: Sequence[int]) -> "Group":
        """Creates a group called ``name`` of this process and ``members``
        (job ranks); the others find it with :meth:`find_group`."""
        return Group(_bulkwire.Group.create(name, list(members)))

    def join_group(self, name: str) -> "Group":
        """Joins the group called ``name``."""
        return Group(_bulkwire.Group.join(name))

    def find_group(self, name: str) -> "Group":
        """Waits until this process is a member of a group called ``name``."""
        return Group(_bulkwire.Group.find(name))

    def Abort(self, reason: str = "aborted") -> None:
        """Stops every process of the job with ``reason``; this one exits."""
        global _failed
        _failed = True
        _bulkwire.fail(f"rank {self.rank}: {reason}")
        sys.exit(1)

    def __repr__(self) -> str:
        return f"bulkwire.World(rank={self.rank}, size={self.size})"


class Group(_Collectives):
    """A group of processes that changes at run time (create, join, leave,
    destroy) and runs collectives among its members. Roots, ``members`` and
    ``position`` refer to job ranks in the group's current view."""

    def __init__(self, native: Any):
        self._native = native
        self._rank = World().rank

    @property
    def name(self) -> str:
        return self._native.view()[0]

    @property
    def view(self) -> int:
        """The number of the current view (1 at creation, +1 per change)."""
        return self._native.view()[1]

    @property
    def members(self) -> list[int]:
        """Job ranks of the members, in view order."""
        return self._native.view()[2]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def position(self) -> int:
        """This process's position in ``members``."""
        return self.members.index(self._rank)

    def _me(self) -> int:
        return self._rank

    def _size(self) -> int:
        return self.size

    def _position(self) -> int:
        return self.position

    def wait_members(self, n: int) -> list[int]:
        """Waits until the view has ``n`` members; returns them."""
        return self._native.wait_members(n)

    def leave(self) -> None:
        self._native.leave()

    def destroy(self) -> None:
        self._native.destroy()

    def set_algorithm(self, op: str, algorithm: Optional[str] = None) -> None:
        """How this group runs ``op`` (``"bcast"``, ``"allreduce"``, …):
        ``"flat"``, ``"tree"``, ``"binomial"``, ``"chain"``,
        ``"scatter-allgather"`` or ``"ring"``; ``None`` for the automatic choice."""
        self._native.set_algorithm(op, algorithm)

    def set_delivery(self, delivery: str) -> None:
        """``"sent"`` (default) or ``"confirmed"``: a broadcast's root returns
        once every member has the data (acknowledgements merged up the tree)."""
        self._native.set_delivery(delivery)

    def Multicast(self, buf: Any, root: int, targets: Sequence[int]) -> None:
        """A broadcast from ``root`` to ``targets`` only (they alone call it)."""
        self._native.multicast(root, list(targets), buf)

    def post(self, obj: Any, tag: int = 0) -> None:
        """Sends ``obj`` to every other member without a common call."""
        self._native.post(tag, pickle.dumps(obj, _PICKLE))

    def recv_post(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Optional[Status] = None,
                  block: bool = True) -> Any:
        """The next post (an object); with ``block=False``, ``None`` if none came."""
        got = self._native.recv_post(source, tag, block)
        if got is None:
            return None
        data, src, t = got
        if status is not None:
            status._set(src, t, len(data))
        return pickle.loads(data)

    def set_latest_only(self, on: bool = True) -> None:
        """Only the newest post of each poster and tag counts (see the Rust docs)."""
        self._native.set_latest_only(on)

    def set_best_effort(self, on: bool = True) -> None:
        """Posts are sent once per hop and never resent: a lost post stays lost (see the Rust docs)."""
        self._native.set_best_effort(on)

    def __repr__(self) -> str:
        name, view, members = self._native.view()
        return f"bulkwire.Group({name!r}, view={view}, members={members})"


# ----- shared memory ---------------------------------------------------------------


class SharedMemory(_bulkwire.SharedMemory):
    """Shared memory across the job's processes (seed 003's Mermera):
    segments of numbers replicated at every process, read locally, written
    with one of three semantics::

        mem = bulkwire.SharedMemory()            # every process
        x = mem.map("x", 1000, dtype="float64")  # every process, same order
        x.write(world.rank, 1.5, semantics="pram")
        mem.fence()                              # every write so far is everywhere
        print(x[0])

    ``"slow"`` writes of one writer to one location are seen in order (a
    later one may replace an earlier one not yet sent); ``"pram"`` writes of
    one writer are all seen in order; ``"coherent"`` writes are seen in one
    order by every process, and the call returns once its write has its
    place there. Writes of different kinds are ordered only by ``fence()``.
    ``x.write_array(start, array, semantics)`` and ``x.read_into(array,
    start)`` move NumPy arrays of the segment's dtype. ``BULKWIRE_DSM_FLUSH``
    chooses how waiting writes are flushed (``warp``, the default, or a
    number of writes)."""

    def __new__(cls) -> "SharedMemory":
        World()
        return super().__new__(cls)


# ----- BSP -----------------------------------------------------------------------


class BSP:
    """A BSP section of every process of the job, as a context manager::

        with bulkwire.bsp() as bsp:
            x = numpy.zeros(bsp.nprocs)
            bsp.push_reg(x)
            bsp.sync()
            bsp.put((bsp.pid + 1) % bsp.nprocs, numpy.array([bsp.pid], float), x, offset=bsp.pid)
            bsp.sync()

    Leaving the block ends the section (``bsp_end``); leaving it by an
    exception stops the job, as the others would wait in their sync. Puts
    and gets name registered arrays and count ``offset`` in their elements.
    """

    def __init__(self) -> None:
        self._bsp: Any = None

    def __enter__(self) -> "BSP":
        World()
        self._bsp = _bulkwire.Bsp()
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        global _failed
        if kind is None:
            self._bsp.end()
        elif not _failed:
            _failed = True
            _bulkwire.fail(f"bsp: process {self._bsp.pid}: {kind.__name__}: {value}")
        return False

    def _active(self) -> Any:
        if self._bsp is None or not self._bsp.active:
            raise Error("the BSP section is not running (use `with bulkwire.bsp() as bsp:`)")
        return self._bsp

    @property
    def pid(self) -> int:
        return self._active().pid

    @property
    def nprocs(self) -> int:
        return self._active().nprocs

    def time(self) -> float:
        """Seconds since the section began."""
        return self._active().time()

    def sync(self) -> None:
        """Ends the superstep: puts and gets land, messages arrive."""
        self._active().sync()

    def push_reg(self, array: Any) -> None:
        """Registers ``array`` (collective: every process registers its own,
        in the same order); usable from the next sync."""
        self._active().push_reg(array)

    def pop_reg(self, array: Any) -> None:
        self._active().pop_reg(array)

    def put(self, pid: int, src: Any, dst: Any, offset: int = 0) -> None:
        """Copies ``src`` now into process ``pid``'s registered ``dst`` at
        element ``offset``; it lands at the end of the sync."""
        self._active().put(pid, src, dst, offset)

    def get(self, pid: int, src: Any, dst: Any, offset: int = 0) -> None:
        """Fills ``dst`` from process ``pid``'s registered ``src`` at element
        ``offset``, as it is at the end of this superstep, by the end of the sync."""
        self._active().get(pid, src, dst, offset)

    def set_tagsize(self, size: int) -> int:
        """The tag size (bytes) of messages from the next sync; returns the old one."""
        return self._active().set_tagsize(size)

    def send(self, pid: int, payload: Any, tag: Any = b"") -> None:
        """Sends the bytes of ``payload`` with ``tag`` (of the tag size) to
        ``pid``'s queue, where they are after the sync."""
        self._active().send(pid, tag, payload)

    def qsize(self) -> tuple[int, int]:
        """``(messages, payload bytes)`` waiting."""
        return self._active().qsize()

    def move(self) -> Optional[tuple[bytes, bytes]]:
        """Takes the first waiting message: ``(tag, payload)``, or ``None``."""
        return self._active().move()

    def messages(self) -> Iterator[tuple[bytes, bytes]]:
        """Takes the waiting messages, in order."""
        while (m := self.move()) is not None:
            yield m


def bsp() -> BSP:
    """A BSP section, for ``with bulkwire.bsp() as bsp:``."""
    return BSP()
