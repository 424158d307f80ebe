//! The collectives of a group, on the data plane.
//!
//! Every data message starts with a header: kind, group, view, the
//! collective's number in the view, a step (the round of a ring), the
//! offset of its piece and the size of the whole buffer, which lets a
//! member whose buffer differs say so instead of waiting. Large buffers
//! travel in pieces of at most [`PIECE`] bytes, which the trees and chains
//! pass on as they arrive (pipelining).
//!
//! A transfer of more than one piece is a rendezvous: the first piece goes
//! at once, the rest once the receiver has said (READY on the control
//! plane) that it has begun the collective. A member that runs ahead of
//! another thus leaves at most one piece per transfer waiting at the
//! other's inbox, which all its senders share: 64 MiB sent ahead into a
//! process still in the previous collective filled that inbox and stopped
//! the messages it was waiting for.

use std::ops::Range;

use bulkwire_comm::{Source, Tag};
use bulkwire_runtime::{Engine, Inbound};

use crate::element::{Element, Op};
use crate::group::{Ctx, Delivery, Group, GroupError, Posted, State, ACK, BARRIER, CONTROL, DATA, PIECE, READY};
use crate::membership::{GroupId, Rank, RequestKind, View};
use crate::schedule::{binomial_span, split, subtree_span, tree, Algorithm, Operation};

const HEADER: usize = 1 + 4 + 4 + 4 + 4 + 8 + 8;

// Data-plane message kinds.
const BCAST: u8 = 1;
const REDUCE: u8 = 2;
const GATHER: u8 = 3;
const SCATTER: u8 = 4;
const RING_REDUCE: u8 = 5;
const RING_GATHER: u8 = 6;
const SPREAD: u8 = 7;

#[derive(Clone, Copy, Debug)]
struct Head {
    step: u32,
    offset: u64,
    total: u64,
}

fn frame(ctx: &Ctx, kind: u8, step: u32, offset: usize, total: usize, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + payload.len());
    v.push(kind);
    v.extend_from_slice(&ctx.group.0.to_le_bytes());
    v.extend_from_slice(&ctx.view.number.to_le_bytes());
    v.extend_from_slice(&ctx.op.to_le_bytes());
    v.extend_from_slice(&step.to_le_bytes());
    v.extend_from_slice(&(offset as u64).to_le_bytes());
    v.extend_from_slice(&(total as u64).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn head(d: &[u8]) -> Head {
    Head {
        step: u32::from_le_bytes(d[13..17].try_into().expect("4 bytes")),
        offset: u64::from_le_bytes(d[17..25].try_into().expect("8 bytes")),
        total: u64::from_le_bytes(d[25..33].try_into().expect("8 bytes")),
    }
}

fn is(ctx: &Ctx, kind: u8, d: &[u8]) -> bool {
    d.len() >= 13
        && d[0] == kind
        && d[1..5] == ctx.group.0.to_le_bytes()
        && d[5..9] == ctx.view.number.to_le_bytes()
        && d[9..13] == ctx.op.to_le_bytes()
}

/// The next data message of this collective of `kind` from `from` (at
/// `step`, if given): its header and the message (payload after HEADER).
fn take(e: &mut Engine, ctx: &Ctx, kind: u8, from: Rank, step: Option<u32>) -> Option<(Head, Inbound)> {
    let m = e.take(|m| {
        let d = &m.data[m.start..];
        m.channel == DATA
            && m.from == from
            && is(ctx, kind, d)
            && step.is_none_or(|s| d.len() >= HEADER && head(d).step == s)
    })?;
    let d = &m.data[m.start..];
    if d.len() < HEADER {
        // Too short for its header: dropped like any malformed message.
        return Some((Head { step: u32::MAX, offset: u64::MAX, total: u64::MAX }, m));
    }
    Some((head(d), m))
}

fn payload(m: &Inbound) -> &[u8] {
    &m.data[(m.start + HEADER).min(m.data.len())..]
}

/// Messages a range of `len` bytes travels in (one at least, so that the
/// receiver always hears the sender's size).
fn pieces(len: usize, piece: usize) -> usize {
    len.div_ceil(piece).max(1)
}

/// Sends `range` of `buf` to `to`, a piece at a time as the transport
/// takes them. `offset` in each piece is from the range's start.
struct Outgoing {
    to: Rank,
    kind: u8,
    step: u32,
    range: Range<usize>,
    sent: usize,
    messages: usize,
    total: usize,
    /// The receiver is in the collective: the pieces after the first may go.
    cleared: bool,
}

impl Outgoing {
    fn new(to: Rank, kind: u8, step: u32, range: Range<usize>, total: usize) -> Outgoing {
        let messages = pieces(range.len(), PIECE);
        Outgoing { to, kind, step, messages, range, sent: 0, total, cleared: messages == 1 }
    }

    fn done(&self) -> bool {
        self.sent == self.messages
    }

    /// Sends the pieces within the first `ready` bytes of the range.
    fn send(&mut self, g: &Group<'_>, e: &mut Engine, st: &mut State, ctx: &Ctx, buf: &[u8], ready: usize) {
        while !self.done() && st_room(st) {
            if self.sent == 1 && !self.cleared {
                if !take_control(e, ctx, READY, self.to, self.step) {
                    return;
                }
                self.cleared = true;
            }
            let start = self.sent * PIECE;
            let end = (start + PIECE).min(self.range.len());
            if end > ready && !self.range.is_empty() {
                return;
            }
            let piece = &buf[self.range.start + start..self.range.start + end];
            let bytes = frame(ctx, self.kind, self.step, start, self.total, piece);
            g.groups.send(e, st, self.to, DATA, bytes);
            self.sent += 1;
        }
    }
}

/// Whether more may be queued: a bounded queue keeps a large broadcast
/// from copying all of itself into memory at once.
fn st_room(st: &State) -> bool {
    st.queued() < 16
}

/// Receives a range of `len` bytes from `from`, piece by piece, in order.
struct Incoming {
    from: Rank,
    kind: u8,
    step: u32,
    len: usize,
    got: usize,
    messages: usize,
    /// Whether the sender was told to send the pieces after the first.
    asked: bool,
}

impl Incoming {
    fn new(from: Rank, kind: u8, step: u32, len: usize) -> Incoming {
        let messages = pieces(len, PIECE);
        Incoming { from, kind, step, len, got: 0, messages, asked: messages == 1 }
    }

    fn done(&self) -> bool {
        self.got == self.messages
    }

    /// Bytes of the range received so far.
    fn ready(&self) -> usize {
        (self.got * PIECE).min(self.len)
    }

    /// Takes the pieces that came, handing each to `put(offset, bytes)`.
    fn receive(
        &mut self,
        g: &Group<'_>,
        (e, st): (&mut Engine, &mut State),
        ctx: &Ctx,
        total: usize,
        mut put: impl FnMut(usize, &[u8]),
    ) -> Result<(), GroupError> {
        if !self.asked {
            self.asked = true;
            g.groups.send(e, st, self.from, CONTROL, control(ctx, READY, self.step));
        }
        while !self.done() {
            let Some((h, m)) = take(e, ctx, self.kind, self.from, Some(self.step)) else { return Ok(()) };
            if h.total != total as u64 {
                let theirs = usize::try_from(h.total).unwrap_or(usize::MAX);
                return Err(GroupError::SizeMismatch { call: ctx.call, rank: self.from, mine: total, theirs });
            }
            let data = payload(&m);
            let offset = self.got * PIECE;
            let expected = (self.len - offset.min(self.len)).min(PIECE);
            if h.offset != offset as u64 || data.len() != expected {
                return Err(GroupError::Malformed { call: ctx.call, rank: self.from });
            }
            put(offset, data);
            self.got += 1;
        }
        Ok(())
    }
}

impl<'g> Group<'g> {
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// The group's view as this process has it now.
    pub fn view(&self) -> Result<View, GroupError> {
        self.groups.current_view("group view", self.id)
    }

    /// How many members the group has in this process's view.
    pub fn size(&self) -> Result<usize, GroupError> {
        Ok(self.view()?.members.len())
    }

    /// This process's position in the view's member list.
    pub fn position(&self) -> Result<usize, GroupError> {
        let view = self.view()?;
        Ok(view.position(self.groups.rt.rank()).expect("a member"))
    }

    /// Waits until the group's view has `n` members.
    pub fn wait_members(&self, n: usize) -> Result<View, GroupError> {
        let (id, call) = (self.id, "group wait_members");
        self.groups.wait(|st| match st.membership.view(id) {
            Some(v) if v.members.len() == n => Ok(Some(v.clone())),
            Some(_) => Ok(None),
            None => Err(GroupError::NotMember { call, group: id.0.to_string() }),
        })
    }

    /// How this group runs `op` on `bytes` per member among its present
    /// members: the algorithm set for it, else the job's
    /// (`BULKWIRE_GROUP_ALGORITHM`), else the automatic choice.
    pub fn algorithm(&self, op: Operation, bytes: usize) -> Result<Algorithm, GroupError> {
        Ok(self.groups.algorithm(self.id, op, bytes, self.size()?))
    }

    /// Chooses how this group runs `op` (`None`: the automatic choice).
    pub fn set_algorithm(&self, op: Operation, algorithm: Option<Algorithm>) -> Result<(), GroupError> {
        if let Some(a) = algorithm.filter(|a| !a.supports(op)) {
            return Err(GroupError::Unsupported { call: "group set_algorithm", algorithm: a, op: op.name() });
        }
        self.groups.set_local("group set_algorithm", self.id, |l| l.set_algorithm(op, algorithm))
    }

    /// Chooses when this group's broadcasts return at the root.
    pub fn set_delivery(&self, delivery: Delivery) -> Result<(), GroupError> {
        self.groups.set_local("group set_delivery", self.id, |l| l.set_delivery(delivery))
    }

    /// Leaves the group; returns once the server has taken this process
    /// out of the view.
    pub fn leave(self) -> Result<(), GroupError> {
        self.change("group leave", RequestKind::Leave)
    }

    /// Destroys the group for every member.
    pub fn destroy(self) -> Result<(), GroupError> {
        self.change("group destroy", RequestKind::Destroy)
    }

    fn change(&self, call: &'static str, kind: RequestKind) -> Result<(), GroupError> {
        let id = self.id;
        let name = self.groups.name_of(id);
        self.groups.request_change(call, id, kind)?;
        self.groups.wait(|st| {
            if st.membership.view(id).is_none() {
                return Ok(Some(()));
            }
            match st.take_refusal(kind) {
                Some(why) => Err(GroupError::Refused { call, name: name.clone(), why }),
                None => Ok(None),
            }
        })
    }

    // ----- posts -----------------------------------------------------------

    /// Sends `data` to every other member of the group's current view, down
    /// a binary tree rooted here, without the others calling anything
    /// together (seed 004's NCS_mcast): each receives it with
    /// [`Group::recv`]. Members pass posts on as they come, in their calls
    /// or, while they compute, on the runtime's progress thread. Each
    /// member of the view gets each post once, and one poster's posts of
    /// one view in the order posted (posts of different views take
    /// different trees).
    pub fn post(&self, tag: i32, data: &[u8]) -> Result<(), GroupError> {
        self.groups.post("group post", self.id, tag, data)
    }

    /// Latest-value mode for this group's posts (`on`), for data of which
    /// only the newest value counts (a position, a best bound, a load): a
    /// post not yet received here is replaced by a newer one of the same
    /// poster and tag, and one still waiting for room in the transport
    /// likewise, so a slow reader sees the newest value and memory stays
    /// bounded. Every post still travels reliably hop by hop; what is
    /// dropped is only what is superseded. Off by default (every post is
    /// delivered).
    pub fn set_latest_only(&self, on: bool) -> Result<(), GroupError> {
        self.groups.set_local("group set_latest_only", self.id, |l| l.set_latest(on))
    }

    /// Best-effort mode for the posts this process makes and passes on
    /// (`on`; seed 004's unreliable mode): each hop of the tree sends a
    /// post once, with no acknowledgement and no resending, so a post lost
    /// on a hop is lost for the members below it, and the others still
    /// get the posts after it without waiting. For data where only the
    /// latest value counts, with [`Group::set_latest_only`]; what a job
    /// lost shows in `bulkwire run --stats`. Between processes of one host
    /// (shared memory) nothing is lost. A post is passed on the way it
    /// came, whatever the relay's own mode. Off by default: every post
    /// arrives.
    pub fn set_best_effort(&self, on: bool) -> Result<(), GroupError> {
        self.groups.set_local("group set_best_effort", self.id, |l| l.set_best_effort(on))
    }

    /// Waits for the next post from `source` with `tag`.
    pub fn recv(&self, source: Source, tag: Tag) -> Result<Posted, GroupError> {
        let post = self.groups.take_post("group recv", self.id, true, |p| accepts(source, tag, p))?;
        Ok(post.expect("a blocking receive returns a post"))
    }

    /// The next post from `source` with `tag` if one has come.
    pub fn try_recv(&self, source: Source, tag: Tag) -> Result<Option<Posted>, GroupError> {
        self.groups.take_post("group try_recv", self.id, false, |p| accepts(source, tag, p))
    }

    // ----- broadcast -------------------------------------------------------

    /// Copies `root`'s `buf` into every member's `buf` (all of one size).
    pub fn bcast(&self, root: Rank, buf: &mut [u8]) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group bcast", self.id, None)?;
        self.broadcast(&ctx, root, buf)
    }

    /// Copies `root`'s `buf` to the members in `targets`: a broadcast among
    /// `root` and `targets` alone, which they (and only they) call.
    pub fn multicast(&self, root: Rank, targets: &[Rank], buf: &mut [u8]) -> Result<(), GroupError> {
        let call = "group multicast";
        let view = self.view()?;
        let me = self.groups.rt.rank();
        let mut set: Vec<Rank> = view.members.iter().copied().filter(|m| *m == root || targets.contains(m)).collect();
        for &t in targets.iter().chain([&root]) {
            if !view.contains(t) {
                return Err(not_member(call, t, &view));
            }
        }
        if !set.contains(&me) {
            return Err(GroupError::BadArgument { call, what: format!("rank {me} is neither the root nor a target") });
        }
        set.dedup();
        let ctx = self.groups.begin(call, self.id, Some(&set))?;
        self.broadcast(&ctx, root, buf)
    }

    fn broadcast(&self, ctx: &Ctx, root: Rank, buf: &mut [u8]) -> Result<(), GroupError> {
        let root_pos = root_position(ctx, root)?;
        if ctx.n() == 1 {
            return Ok(());
        }
        match self.groups.algorithm(self.id, Operation::Bcast, buf.len(), ctx.n()) {
            Algorithm::ScatterAllgather if buf.len() >= ctx.n() => self.scatter_allgather(ctx, root_pos, buf),
            Algorithm::ScatterAllgather | Algorithm::Ring => self.tree_bcast(ctx, root_pos, Algorithm::Binomial, buf),
            a => self.tree_bcast(ctx, root_pos, a, buf),
        }
    }

    /// A broadcast down a tree, pipelined piece by piece; with confirmed
    /// delivery, each member acknowledges to its parent once it and its
    /// subtree have everything.
    fn tree_bcast(&self, ctx: &Ctx, root_pos: usize, algorithm: Algorithm, buf: &mut [u8]) -> Result<(), GroupError> {
        let r = ctx.relative(root_pos);
        let (parent, children) = tree(algorithm, ctx.n(), r);
        let parent = parent.map(|p| ctx.rank_at(root_pos, p));
        let children: Vec<Rank> = children.iter().map(|&c| ctx.rank_at(root_pos, c)).collect();
        let total = buf.len();
        let mut incoming = parent.map(|p| Incoming::new(p, BCAST, 0, total));
        let mut outgoing: Vec<Outgoing> =
            children.iter().map(|&c| Outgoing::new(c, BCAST, 0, 0..total, total)).collect();
        let confirmed = self.groups.delivery(self.id) == Delivery::Confirmed;
        let mut acked = vec![false; children.len()];
        let mut ack_sent = false;
        self.groups.run(ctx, |e, st| {
            if let Some(inc) = &mut incoming {
                inc.receive(self, (e, st), ctx, total, |off, data| buf[off..off + data.len()].copy_from_slice(data))?;
            }
            let ready = incoming.as_ref().map_or(total, |i| i.ready());
            for out in &mut outgoing {
                out.send(self, e, st, ctx, buf, ready);
            }
            if confirmed {
                for (i, &c) in children.iter().enumerate() {
                    if !acked[i] && take_control(e, ctx, ACK, c, 0) {
                        acked[i] = true;
                        st.stats.acks_received += 1;
                    }
                }
            }
            let have_all = incoming.as_ref().is_none_or(|i| i.done()) && outgoing.iter().all(|o| o.done());
            let subtree_has_it = !confirmed || acked.iter().all(|&a| a);
            if have_all && subtree_has_it {
                if let (true, Some(p), false) = (confirmed, parent, ack_sent) {
                    ack_sent = true;
                    st.stats.acks_sent += 1;
                    self.groups.send(e, st, p, CONTROL, control(ctx, ACK, 0));
                }
                if st.queued() == 0 {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        })
    }

    /// A broadcast as a binomial scatter of n segments and a ring
    /// allgather: each link carries about the whole message once.
    fn scatter_allgather(&self, ctx: &Ctx, root_pos: usize, buf: &mut [u8]) -> Result<(), GroupError> {
        let n = ctx.n();
        let total = buf.len();
        let segs = split(total, n);
        let r = ctx.relative(root_pos);
        let (parent, children) = tree(Algorithm::Binomial, n, r);
        // The bytes of the segments of the binomial subtree rooted at `c`.
        let span = |c: usize| segs[c].start..segs[c + binomial_span(n, c) - 1].end;
        let mut incoming = parent.map(|p| Incoming::new(ctx.rank_at(root_pos, p), SPREAD, 0, span(r).len()));
        let mut scatter: Vec<Outgoing> =
            children.iter().map(|&c| Outgoing::new(ctx.rank_at(root_pos, c), SPREAD, 0, span(c), total)).collect();
        let mine = span(r).start;
        self.groups.run(ctx, |e, st| {
            if let Some(inc) = &mut incoming {
                inc.receive(self, (e, st), ctx, total, |off, data| {
                    buf[mine + off..mine + off + data.len()].copy_from_slice(data)
                })?;
            }
            let ready = incoming.as_ref().map_or(span(r).len(), |i| i.ready());
            for out in &mut scatter {
                let ready_here = (mine + ready).saturating_sub(out.range.start);
                out.send(self, e, st, ctx, buf, ready_here);
            }
            let done = incoming.as_ref().is_none_or(|i| i.done()) && scatter.iter().all(|o| o.done());
            Ok(done.then_some(()))
        })?;
        let left = ctx.rank_at(root_pos, (r + n - 1) % n);
        let right = ctx.rank_at(root_pos, (r + 1) % n);
        self.ring_gather(ctx, &segs, r, (left, right), buf, total)?;
        if self.groups.delivery(self.id) == Delivery::Confirmed {
            self.confirm(ctx, root_pos)?;
        }
        Ok(())
    }

    /// Confirmed delivery after a broadcast that was not a tree: each
    /// member acknowledges to its parent in a binomial tree once its
    /// children have, so the root hears one acknowledgement per child.
    fn confirm(&self, ctx: &Ctx, root_pos: usize) -> Result<(), GroupError> {
        let (parent, children) = tree(Algorithm::Binomial, ctx.n(), ctx.relative(root_pos));
        let parent = parent.map(|p| ctx.rank_at(root_pos, p));
        let children: Vec<Rank> = children.iter().map(|&c| ctx.rank_at(root_pos, c)).collect();
        let mut acked = vec![false; children.len()];
        let mut sent = false;
        self.groups.run(ctx, |e, st| {
            for (i, &c) in children.iter().enumerate() {
                if !acked[i] && take_control(e, ctx, ACK, c, 0) {
                    acked[i] = true;
                    st.stats.acks_received += 1;
                }
            }
            if !acked.iter().all(|&a| a) {
                return Ok(None);
            }
            if let (Some(p), false) = (parent, sent) {
                sent = true;
                st.stats.acks_sent += 1;
                self.groups.send(e, st, p, CONTROL, control(ctx, ACK, 0));
            }
            Ok((st.queued() == 0).then_some(()))
        })
    }

    /// The allgather of a ring: at step s, member `pos` passes segment
    /// `pos - s` to its right and takes segment `pos - s - 1` from its
    /// left; after n - 1 steps every member has every segment.
    fn ring_gather(
        &self,
        ctx: &Ctx,
        segs: &[Range<usize>],
        pos: usize,
        (left, right): (Rank, Rank),
        buf: &mut [u8],
        total: usize,
    ) -> Result<(), GroupError> {
        let n = segs.len();
        let mut step = 0usize;
        let mut ring_in: Option<Incoming> = None;
        let mut ring_out: Option<Outgoing> = None;
        self.groups.run(ctx, |e, st| {
            while step < n - 1 {
                let send_seg = (pos + n - step) % n;
                let recv_seg = (pos + n - step - 1) % n;
                let out = ring_out.get_or_insert_with(|| {
                    Outgoing::new(right, RING_GATHER, step as u32, segs[send_seg].clone(), total)
                });
                out.send(self, e, st, ctx, buf, usize::MAX);
                let inc =
                    ring_in.get_or_insert_with(|| Incoming::new(left, RING_GATHER, step as u32, segs[recv_seg].len()));
                let at = segs[recv_seg].start;
                inc.receive(self, (e, st), ctx, total, |off, data| {
                    buf[at + off..at + off + data.len()].copy_from_slice(data)
                })?;
                if !(inc.done() && out.done()) {
                    return Ok(None);
                }
                ring_in = None;
                ring_out = None;
                step += 1;
            }
            Ok((st.queued() == 0).then_some(()))
        })
    }

    // ----- reductions ------------------------------------------------------

    /// Combines every member's `buf` with `op`; the result lands in
    /// `root`'s `buf` (the others' are left as they were).
    pub fn reduce<T: Element>(&self, root: Rank, buf: &mut [T], op: Op<T>) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group reduce", self.id, None)?;
        let root_pos = root_position(&ctx, root)?;
        let bytes = std::mem::size_of_val(buf);
        let algorithm = match self.groups.algorithm(self.id, Operation::Reduce, bytes, ctx.n()) {
            Algorithm::ScatterAllgather | Algorithm::Ring => Algorithm::Binomial,
            a => a,
        };
        let result = self.tree_reduce(&ctx, root_pos, algorithm, buf, op)?;
        if let Some(result) = result {
            buf.copy_from_slice(&result);
        }
        Ok(())
    }

    /// Combines every member's `buf` with `op`, into every member's `buf`.
    pub fn allreduce<T: Element>(&self, buf: &mut [T], op: Op<T>) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group allreduce", self.id, None)?;
        if ctx.n() == 1 {
            return Ok(());
        }
        let bytes = std::mem::size_of_val(buf);
        match self.groups.algorithm(self.id, Operation::Allreduce, bytes, ctx.n()) {
            Algorithm::Ring if buf.len() >= ctx.n() => self.ring_allreduce(&ctx, buf, op),
            a => {
                let a =
                    if matches!(a, Algorithm::Ring | Algorithm::ScatterAllgather) { Algorithm::Binomial } else { a };
                if let Some(result) = self.tree_reduce(&ctx, 0, a, buf, op)? {
                    buf.copy_from_slice(&result);
                }
                self.tree_bcast(&ctx, 0, a, bytemuck::cast_slice_mut(buf))
            }
        }
    }

    /// Reduces up a tree, pipelined piece by piece; children are combined
    /// in the tree's order, so every run gives the same bits. Returns the
    /// result at the root.
    fn tree_reduce<T: Element>(
        &self,
        ctx: &Ctx,
        root_pos: usize,
        algorithm: Algorithm,
        buf: &[T],
        op: Op<T>,
    ) -> Result<Option<Vec<T>>, GroupError> {
        let size = std::mem::size_of::<T>().max(1);
        let per_piece = (PIECE / size).max(1);
        let count = buf.len().div_ceil(per_piece).max(1);
        let total = std::mem::size_of_val(buf);
        let r = ctx.relative(root_pos);
        let (parent, children) = tree(algorithm, ctx.n(), r);
        let parent = parent.map(|p| ctx.rank_at(root_pos, p));
        let children: Vec<Rank> = children.iter().map(|&c| ctx.rank_at(root_pos, c)).collect();
        let mut acc = buf.to_vec();
        let mut combined = 0usize;
        let mut sent = 0usize;
        let piece = |i: usize| i * per_piece..((i + 1) * per_piece).min(buf.len());
        // The rendezvous of a transfer of several pieces (module docs).
        let mut asked = count == 1;
        let mut cleared = count == 1;
        let mut arrived: Vec<std::collections::VecDeque<(Head, Inbound)>> = vec![Default::default(); children.len()];
        self.groups.run(ctx, |e, st| {
            if !asked {
                asked = true;
                for &c in &children {
                    self.groups.send(e, st, c, CONTROL, control(ctx, READY, 0));
                }
            }
            // Every piece that came is taken at once: left in the
            // runtime's inbox, which all senders share, one child's pieces
            // could fill it while this member waits for another child's.
            for (i, &c) in children.iter().enumerate() {
                while let Some((h, m)) = take(e, ctx, REDUCE, c, None) {
                    if h.total != total as u64 {
                        let theirs = usize::try_from(h.total).unwrap_or(usize::MAX);
                        return Err(GroupError::SizeMismatch { call: ctx.call, rank: c, mine: total, theirs });
                    }
                    arrived[i].push_back((h, m));
                }
            }
            // Piece `combined` from every child, combined in the tree's order.
            while combined < count && arrived.iter().all(|q| !q.is_empty()) {
                let range = piece(combined);
                let want = range.len() * size;
                for (i, &c) in children.iter().enumerate() {
                    let (h, m) = arrived[i].pop_front().expect("checked above");
                    let data = payload(&m);
                    if h.offset != (range.start * size) as u64 || data.len() != want {
                        return Err(GroupError::Malformed { call: ctx.call, rank: c });
                    }
                    op.combine_bytes(&mut acc[range.clone()], data);
                }
                combined += 1;
            }
            if let Some(p) = parent {
                if sent == 1 && !cleared {
                    cleared = take_control(e, ctx, READY, p, 0);
                }
                while sent < combined && st_room(st) && (sent == 0 || cleared) {
                    let range = piece(sent);
                    let bytes: &[u8] = bytemuck::cast_slice(&acc[range.clone()]);
                    let message = frame(ctx, REDUCE, 0, range.start * size, total, bytes);
                    self.groups.send(e, st, p, DATA, message);
                    sent += 1;
                }
            }
            let done = combined == count && (parent.is_none() || sent == count) && st.queued() == 0;
            Ok(done.then_some(()))
        })?;
        Ok(parent.is_none().then_some(acc))
    }

    /// Allreduce around a ring: a reduce-scatter (after n - 1 steps member
    /// `me` holds segment `me + 1` combined from everyone), then the ring's
    /// allgather of those segments.
    fn ring_allreduce<T: Element>(&self, ctx: &Ctx, buf: &mut [T], op: Op<T>) -> Result<(), GroupError> {
        let n = ctx.n();
        let size = std::mem::size_of::<T>().max(1);
        let total = std::mem::size_of_val(buf);
        let segs: Vec<Range<usize>> = split(buf.len(), n).into_iter().map(|s| s.start * size..s.end * size).collect();
        let me = ctx.me;
        let left = ctx.view.members[(me + n - 1) % n];
        let right = ctx.view.members[(me + 1) % n];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let mut step = 0usize;
        let mut ring_in: Option<Incoming> = None;
        let mut ring_out: Option<Outgoing> = None;
        // A step sends one segment and combines another into this member's
        // buffer, each piece as it arrives.
        self.groups.run(ctx, |e, st| {
            while step < n - 1 {
                let (send_seg, recv_seg) = ((me + n - step) % n, (me + n - step - 1) % n);
                let out = ring_out.get_or_insert_with(|| {
                    Outgoing::new(right, RING_REDUCE, step as u32, segs[send_seg].clone(), total)
                });
                out.send(self, e, st, ctx, bytes, usize::MAX);
                let inc =
                    ring_in.get_or_insert_with(|| Incoming::new(left, RING_REDUCE, step as u32, segs[recv_seg].len()));
                let at = segs[recv_seg].start;
                inc.receive(self, (e, st), ctx, total, |off, data| {
                    // Copied out and back: `T` needs an alignment the wire
                    // does not give.
                    let target = &mut bytes[at + off..at + off + data.len()];
                    let mut acc: Vec<T> = vec![T::zeroed(); data.len() / size];
                    bytemuck::cast_slice_mut::<T, u8>(&mut acc).copy_from_slice(target);
                    op.combine_bytes(&mut acc, data);
                    target.copy_from_slice(bytemuck::cast_slice(&acc));
                })?;
                if !(out.done() && inc.done()) {
                    return Ok(None);
                }
                ring_in = None;
                ring_out = None;
                step += 1;
            }
            Ok((st.queued() == 0).then_some(()))
        })?;
        self.ring_gather(ctx, &segs, (me + 1) % n, (left, right), bytes, total)
    }

    // ----- gather, scatter, allgather ---------------------------------------

    /// Every member's `send` (all of one size) lands in `root`'s `recv`, in
    /// view order; `recv` is only used at the root.
    pub fn gather(&self, root: Rank, send: &[u8], recv: &mut [u8]) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group gather", self.id, None)?;
        let root_pos = root_position(&ctx, root)?;
        let (n, len) = (ctx.n(), send.len());
        if ctx.me == root_pos && recv.len() != n * len {
            return Err(size_arg(ctx.call, "recv", n, len, recv.len()));
        }
        let algorithm = self.spanning_tree(Operation::Gather, len, n);
        let relative = self.tree_gather(&ctx, root_pos, algorithm, send)?;
        if ctx.me == root_pos {
            for r in 0..n {
                let p = (root_pos + r) % n;
                recv[p * len..(p + 1) * len].copy_from_slice(&relative[r * len..(r + 1) * len]);
            }
        }
        Ok(())
    }

    /// The tree a gather or scatter runs on: flat if chosen, else binomial
    /// (the trees whose subtrees are consecutive positions).
    fn spanning_tree(&self, op: Operation, len: usize, n: usize) -> Algorithm {
        match self.groups.algorithm(self.id, op, len, n) {
            Algorithm::Flat => Algorithm::Flat,
            _ => Algorithm::Binomial,
        }
    }

    /// Gathers the members' `send` up a tree, each subtree's blocks in
    /// relative order; returns them at the root (this process's span
    /// elsewhere).
    fn tree_gather(
        &self,
        ctx: &Ctx,
        root_pos: usize,
        algorithm: Algorithm,
        send: &[u8],
    ) -> Result<Vec<u8>, GroupError> {
        let (n, len) = (ctx.n(), send.len());
        let r = ctx.relative(root_pos);
        let span = |c: usize| subtree_span(algorithm, n, c);
        let (parent, children) = tree(algorithm, n, r);
        let mut mine = vec![0u8; span(r) * len];
        mine[..len].copy_from_slice(send);
        let mut incoming: Vec<(usize, Incoming)> = children
            .iter()
            .map(|&c| (c - r, Incoming::new(ctx.rank_at(root_pos, c), GATHER, 0, span(c) * len)))
            .collect();
        let mut outgoing = parent.map(|p| Outgoing::new(ctx.rank_at(root_pos, p), GATHER, 0, 0..mine.len(), len));
        self.groups.run(ctx, |e, st| {
            for (at, inc) in &mut incoming {
                let base = *at * len;
                inc.receive(self, (e, st), ctx, len, |off, data| {
                    mine[base + off..base + off + data.len()].copy_from_slice(data)
                })?;
            }
            if !incoming.iter().all(|(_, i)| i.done()) {
                return Ok(None);
            }
            if let Some(out) = &mut outgoing {
                out.send(self, e, st, ctx, &mine, usize::MAX);
                if !out.done() {
                    return Ok(None);
                }
            }
            Ok((st.queued() == 0).then_some(()))
        })?;
        Ok(mine)
    }

    /// `root`'s `send` (n blocks of `recv.len()` bytes, in view order) is
    /// dealt out: block i to the member at position i.
    pub fn scatter(&self, root: Rank, send: &[u8], recv: &mut [u8]) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group scatter", self.id, None)?;
        let root_pos = root_position(&ctx, root)?;
        let (n, len) = (ctx.n(), recv.len());
        if ctx.me == root_pos && send.len() != n * len {
            return Err(size_arg(ctx.call, "send", n, len, send.len()));
        }
        let algorithm = self.spanning_tree(Operation::Scatter, len, n);
        let r = ctx.relative(root_pos);
        let span = |c: usize| subtree_span(algorithm, n, c);
        let (parent, children) = tree(algorithm, n, r);
        // This process's span of blocks, in relative order.
        let mut mine = vec![0u8; span(r) * len];
        if parent.is_none() {
            for rel in 0..n {
                let p = (root_pos + rel) % n;
                mine[rel * len..(rel + 1) * len].copy_from_slice(&send[p * len..(p + 1) * len]);
            }
        }
        let mut incoming = parent.map(|p| Incoming::new(ctx.rank_at(root_pos, p), SCATTER, 0, mine.len()));
        let mut outgoing: Vec<Outgoing> = children
            .iter()
            .map(|&c| Outgoing::new(ctx.rank_at(root_pos, c), SCATTER, 0, (c - r) * len..(c - r + span(c)) * len, len))
            .collect();
        self.groups.run(&ctx, |e, st| {
            if let Some(inc) = &mut incoming {
                inc.receive(self, (e, st), &ctx, len, |off, data| mine[off..off + data.len()].copy_from_slice(data))?;
                if !inc.done() {
                    return Ok(None);
                }
            }
            for out in &mut outgoing {
                out.send(self, e, st, &ctx, &mine, usize::MAX);
            }
            Ok((outgoing.iter().all(|o| o.done()) && st.queued() == 0).then_some(()))
        })?;
        recv.copy_from_slice(&mine[..len]);
        Ok(())
    }

    /// Every member's `send` lands in every member's `recv`, in view order.
    pub fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group allgather", self.id, None)?;
        let (n, len) = (ctx.n(), send.len());
        if recv.len() != n * len {
            return Err(size_arg(ctx.call, "recv", n, len, recv.len()));
        }
        let me = ctx.me;
        recv[me * len..(me + 1) * len].copy_from_slice(send);
        if n == 1 {
            return Ok(());
        }
        if self.groups.algorithm(self.id, Operation::Allgather, len, n) == Algorithm::Flat {
            let relative = self.tree_gather(&ctx, 0, Algorithm::Binomial, send)?;
            if me == 0 {
                recv.copy_from_slice(&relative);
            }
            return self.tree_bcast(&ctx, 0, Algorithm::Binomial, recv);
        }
        let left = ctx.view.members[(me + n - 1) % n];
        let right = ctx.view.members[(me + 1) % n];
        let blocks: Vec<Range<usize>> = (0..n).map(|b| b * len..(b + 1) * len).collect();
        self.ring_gather(&ctx, &blocks, me, (left, right), recv, len)
    }

    /// Returns when every member has entered the barrier (dissemination:
    /// ⌈log2 n⌉ rounds, on the control plane).
    pub fn barrier(&self) -> Result<(), GroupError> {
        let ctx = self.groups.begin("group barrier", self.id, None)?;
        let (n, me) = (ctx.n(), ctx.me);
        let mut distance = 1usize;
        let mut round = 0u32;
        let mut sent = false;
        self.groups.run(&ctx, |e, st| {
            while distance < n {
                if !sent {
                    let to = ctx.view.members[(me + distance) % n];
                    self.groups.send(e, st, to, CONTROL, control(&ctx, BARRIER, round));
                    sent = true;
                }
                let from = ctx.view.members[(me + n - distance) % n];
                if !take_control(e, &ctx, BARRIER, from, round) {
                    return Ok(None);
                }
                distance *= 2;
                round += 1;
                sent = false;
            }
            Ok((st.queued() == 0).then_some(()))
        })
    }
}

/// A control-plane message of a collective: kind, group, view, number, round.
fn control(ctx: &Ctx, kind: u8, round: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(17);
    v.push(kind);
    v.extend_from_slice(&ctx.group.0.to_le_bytes());
    v.extend_from_slice(&ctx.view.number.to_le_bytes());
    v.extend_from_slice(&ctx.op.to_le_bytes());
    v.extend_from_slice(&round.to_le_bytes());
    v
}

/// Takes the control message `control(ctx, kind, round)` from `from` if it
/// came (looked for at every turn of a wait: built on the stack).
fn take_control(e: &mut Engine, ctx: &Ctx, kind: u8, from: Rank, round: u32) -> bool {
    let mut want = [0u8; 17];
    want[0] = kind;
    for (i, x) in [ctx.group.0, ctx.view.number, ctx.op, round].into_iter().enumerate() {
        want[1 + 4 * i..5 + 4 * i].copy_from_slice(&x.to_le_bytes());
    }
    debug_assert_eq!(want[..], control(ctx, kind, round)[..]);
    e.take(|m| m.channel == CONTROL && m.from == from && m.data[m.start..] == want[..]).is_some()
}

fn accepts(source: Source, tag: Tag, p: &Posted) -> bool {
    let from = matches!(source, Source::Any) || source == Source::Rank(p.from);
    from && (matches!(tag, Tag::Any) || tag == Tag::Is(p.tag))
}

/// `root`'s position in the collective's view, or the error naming the call.
fn root_position(ctx: &Ctx, root: Rank) -> Result<usize, GroupError> {
    ctx.view.position(root).ok_or_else(|| not_member(ctx.call, root, &ctx.view))
}

fn not_member(call: &'static str, rank: Rank, view: &View) -> GroupError {
    GroupError::RankNotMember {
        call,
        rank,
        group: format!("{:?} ({})", view.name, view.group.0),
        view: view.number,
        members: view.members.clone(),
    }
}

fn size_arg(call: &'static str, which: &str, n: usize, len: usize, got: usize) -> GroupError {
    GroupError::BadArgument {
        call,
        what: format!("{which} has {got} bytes; {n} members of {len} bytes need {}", n * len),
    }
}
