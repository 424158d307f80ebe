//! Groups on a running job: the membership protocol on the control plane
//! (channel [`CONTROL`], premium path) and the collectives on the data
//! plane (channel [`DATA`], the pair's path), as seed 004 §2 separates
//! them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bulkwire_comm::World;
use bulkwire_proto::SendError;
use bulkwire_runtime::{Engine, Inbound, ProgressHook, Runtime, RuntimeError, BEST_EFFORT_CHANNEL};

use crate::codec::{Reader, Writer};
use crate::membership::{
    Change, Event, GroupId, Membership, Message, Rank, Refusal, RequestError, RequestKind, View, WORLD,
};
use crate::schedule::{self, Algorithm, Operation};

/// The runtime's channel of the groups' control plane: membership,
/// acknowledgements, barriers. Its data always takes the premium path.
pub const CONTROL: u16 = 3;
/// The runtime's channel of the groups' data.
pub const DATA: u16 = 4;

/// Largest piece of a collective's data in one message: large buffers
/// travel in pieces, which trees and chains pass on as they arrive. Each
/// relay holds a piece whole before passing it on, so a piece is the
/// pipeline's grain: on the test bed's 100 Mbit/s links a chain broadcast
/// of 256 KiB to 8 hosts took 153 ms in pieces of 256 KiB, 50 ms in pieces
/// of 64 KiB and 36 ms in pieces of 16 KiB (the link bound: 21 ms), while
/// on one host the size of the pieces changed nothing measurable from
/// 16 KiB to 256 KiB, and 16 KiB was slower over loopback UDP.
pub(crate) const PIECE: usize = 64 << 10;

/// `BULKWIRE_GROUP_ALGORITHM`: a job's choice of algorithms, as
/// `bcast=tree,allreduce=ring`; a group's own choice overrides it.
pub const ALGORITHM_VAR: &str = "BULKWIRE_GROUP_ALGORITHM";
/// `BULKWIRE_GROUP_DELIVERY`: `sent` (the default) or `confirmed`.
pub const DELIVERY_VAR: &str = "BULKWIRE_GROUP_DELIVERY";

// Control-plane message kinds (first byte).
pub(crate) const MEMBERSHIP: u8 = 1;
pub(crate) const BARRIER: u8 = 2;
pub(crate) const ACK: u8 = 3;
pub(crate) const ABORT: u8 = 4;
pub(crate) const READY: u8 = 5;
/// Data-plane kind of a post (the collectives' kinds are below it).
pub(crate) const POST: u8 = 16;

/// When a broadcast's root may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Once its data is handed to the transport, which delivers it
    /// reliably hop by hop (MPI's rule: the buffer may be reused).
    Sent,
    /// Once every member has the data: acknowledgements merge up the tree,
    /// so the root receives one per child, not one per member (seed 004
    /// §3.2, step 6).
    Confirmed,
}

impl std::str::FromStr for Delivery {
    type Err = String;
    fn from_str(s: &str) -> Result<Delivery, String> {
        match s.trim() {
            "sent" => Ok(Delivery::Sent),
            "confirmed" => Ok(Delivery::Confirmed),
            other => Err(format!("{other:?} is not a delivery: sent or confirmed")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("{call}: this process is not a member of group {group}")]
    NotMember { call: &'static str, group: String },
    #[error("{call}: rank {rank} is not a member of group {group} (view {view}: ranks {members:?})")]
    RankNotMember { call: &'static str, rank: Rank, group: String, view: u32, members: Vec<Rank> },
    #[error(
        "{call}: this process's buffer has {mine} bytes, rank {rank}'s {theirs}: every member must pass the same size"
    )]
    SizeMismatch { call: &'static str, rank: Rank, mine: usize, theirs: usize },
    #[error("{call}: rank {rank}'s buffer has {bytes} bytes, rank {other}'s {other_bytes}: every member must pass the same size")]
    SizesDiffer { call: &'static str, rank: Rank, bytes: usize, other: Rank, other_bytes: usize },
    #[error("{call}: {what}")]
    BadArgument { call: &'static str, what: String },
    #[error("{call}: group {group} went from view {from} to view {to} ({change}) while the operation was pending")]
    ViewChanged { call: &'static str, group: String, from: u32, to: u32, change: String },
    #[error("{call}: group {group} was destroyed")]
    Destroyed { call: &'static str, group: String },
    #[error("{call} {name:?}: refused: {why}")]
    Refused { call: &'static str, name: String, why: String },
    #[error("{call}: {source}")]
    Request { call: &'static str, source: RequestError },
    #[error("{call}: algorithm {algorithm} cannot run {op}")]
    Unsupported { call: &'static str, algorithm: Algorithm, op: &'static str },
    #[error("{var}: {why}")]
    Setting { var: &'static str, why: String },
    #[error("{call}: rank {rank} sent a malformed group message")]
    Malformed { call: &'static str, rank: Rank },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Counters of this process's group traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Acknowledgements of confirmed broadcasts received.
    pub acks_received: u64,
    pub acks_sent: u64,
    pub control_messages_sent: u64,
    pub data_messages_sent: u64,
    /// Group messages from peers that were not well formed, dropped.
    pub malformed: u64,
}

/// What this process keeps about a group it is a member of.
#[derive(Debug)]
pub(crate) struct Local {
    /// The view its collectives are numbered in.
    view: u32,
    /// Collectives begun in that view.
    op: u32,
    /// Multicasts begun, per set of participants.
    multicasts: HashMap<Vec<Rank>, u32>,
    algorithms: HashMap<Operation, Algorithm>,
    delivery: Option<Delivery>,
    /// Posts in latest-value mode ([`Group::set_latest_only`]).
    latest: bool,
    /// Posts sent best effort ([`Group::set_best_effort`]).
    best_effort: bool,
}

pub(crate) struct State {
    pub membership: Membership,
    local: HashMap<GroupId, Local>,
    /// Messages that found no room in the transport yet.
    outbox: VecDeque<(Rank, u16, Vec<u8>)>,
    events: VecDeque<Event>,
    pub stats: GroupStats,
    job_algorithms: HashMap<Operation, Algorithm>,
    job_delivery: Delivery,
    /// The member lists of the views of each group this process was in,
    /// kept after it leaves: posts of a view are passed on along that
    /// view's tree by every member of the view.
    history: HashMap<GroupId, BTreeMap<u32, Vec<Rank>>>,
    /// Posts delivered here and not yet received, per group.
    mailbox: HashMap<GroupId, VecDeque<Posted>>,
}

/// A message posted to a group ([`Group::post`]), as a member receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    pub from: Rank,
    pub tag: i32,
    /// The view it was posted in (the sender's view then).
    pub view: u32,
    pub data: Vec<u8>,
}

/// The groups of this process: the job's group of all processes, and the
/// groups created and joined at run time.
///
/// ```no_run
/// use bulkwire_comm::World;
/// use bulkwire_groups::{Groups, Op};
///
/// let world = World::init()?;
/// let groups = Groups::new(&world)?;
/// let all = groups.world();
/// let mut weights = vec![0.0f64; 1000];
/// all.bcast(0, bytemuck::cast_slice_mut(&mut weights))?;
/// let mut gradient = vec![1.0f64; 1000];
/// all.allreduce(&mut gradient, Op::Sum)?;
/// let evens = if world.rank() == 0 { Some(groups.create("evens", &[2, 4])?) } else { None };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Groups<'w> {
    pub(crate) rt: &'w Runtime,
    /// Shared with the runtime's progress thread ([`pump`] as its hook).
    state: Arc<Mutex<State>>,
    /// Waits of this layer under way: while one is, it pumps, and the hook
    /// does not (see [`Groups::on_runtime`]).
    waiting: Arc<AtomicU32>,
}

/// A wait of the groups layer, counted while it lasts.
struct Waiting<'a>(&'a AtomicU32);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicU32) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A group this process is a member of, as a handle for its operations.
#[derive(Clone, Copy)]
pub struct Group<'g> {
    pub(crate) groups: &'g Groups<'g>,
    pub(crate) id: GroupId,
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Group({})", self.groups.name_of(self.id))
    }
}

/// A collective under way: the view it runs in and its number there.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    pub call: &'static str,
    pub group: GroupId,
    pub view: View,
    pub op: u32,
    /// This process's position in `view.members`.
    pub me: usize,
}

impl Ctx {
    pub fn n(&self) -> usize {
        self.view.members.len()
    }

    /// The rank at relative position `r` from view position `root`.
    pub fn rank_at(&self, root: usize, r: usize) -> Rank {
        self.view.members[(root + r) % self.n()]
    }

    /// This process's position relative to view position `root`.
    pub fn relative(&self, root: usize) -> usize {
        (self.me + self.n() - root) % self.n()
    }
}

impl<'w> Groups<'w> {
    /// Starts the groups layer of this process: every process of the job
    /// calls it (the membership protocol needs each process to answer).
    pub fn new(world: &'w World) -> Result<Groups<'w>, GroupError> {
        Groups::on_runtime(world.runtime())
    }

    /// The groups layer over a runtime that another layer started (a BSP
    /// section's, for instance): the groups use channels 3 and 4 of it.
    pub fn on_runtime(rt: &'w Runtime) -> Result<Groups<'w>, GroupError> {
        let job_algorithms = parse_algorithms(std::env::var(ALGORITHM_VAR).ok().as_deref())
            .map_err(|why| GroupError::Setting { var: ALGORITHM_VAR, why })?;
        let job_delivery = match std::env::var(DELIVERY_VAR) {
            Ok(v) => v.parse().map_err(|why| GroupError::Setting { var: DELIVERY_VAR, why })?,
            Err(_) => Delivery::Sent,
        };
        let (me, size) = (rt.rank(), rt.size());
        rt.with(|e| {
            for peer in (0..size).filter(|&p| p != me) {
                e.endpoint.set_premium(peer, CONTROL, true);
                e.endpoint.set_probe_by_pace(peer, CONTROL, true);
            }
            Ok(())
        })?;
        let state = State {
            membership: Membership::new(me, size),
            local: HashMap::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            stats: GroupStats::default(),
            job_algorithms,
            job_delivery,
            history: HashMap::from([(WORLD, BTreeMap::from([(1, (0..size).collect())]))]),
            mailbox: HashMap::new(),
        };
        let state = Arc::new(Mutex::new(state));
        // While the application computes, the progress thread answers the
        // membership protocol and passes posts on: a member busy elsewhere
        // holds up neither a group's changes nor its subtree's posts. A
        // weak reference: once the groups are dropped, the hook says so
        // and the runtime drops it.
        //
        // The hook also runs in the waits of other layers (a receive, a BSP
        // sync), so that rank 0, the directory, answers while it waits
        // there. Not in this layer's own waits: they pump after looking at
        // what came, since a new view drops the older views' messages that
        // a collective of the older view may still need.
        let shared = Arc::downgrade(&state);
        let waiting = Arc::new(AtomicU32::new(0));
        let in_wait = waiting.clone();
        rt.add_progress_hook(ProgressHook(Arc::new(move |e: &mut Engine| {
            let Some(state) = shared.upgrade() else { return false };
            if in_wait.load(Ordering::SeqCst) == 0 {
                let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                pump(e, &mut st, me);
            }
            true
        })));
        Ok(Groups { rt, state, waiting })
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle for the group numbered `id` (its calls fail with a clear
    /// error if this process is not a member).
    pub fn group(&self, id: GroupId) -> Group<'_> {
        Group { groups: self, id }
    }

    /// The group of every process of the job (view 1, never changes).
    pub fn world(&self) -> Group<'_> {
        Group { groups: self, id: WORLD }
    }

    /// Creates a group called `name` with this process (its server) and
    /// `members`; returns once its first view is installed here. The other
    /// members find it with [`Groups::find`] (or in [`Groups::poll_event`]).
    pub fn create(&self, name: &str, members: &[Rank]) -> Result<Group<'_>, GroupError> {
        let call = "group create";
        self.refuse_if_member(call, name, Refusal::NameTaken)?;
        self.request(call, |m| m.create(name, members))?;
        self.await_view(call, name, RequestKind::Create)
    }

    /// Joins the group called `name`; returns once a view with this process
    /// in it is installed here.
    pub fn join(&self, name: &str) -> Result<Group<'_>, GroupError> {
        let call = "group join";
        self.refuse_if_member(call, name, Refusal::AlreadyMember)?;
        self.request(call, |m| m.join(name))?;
        self.await_view(call, name, RequestKind::Join)
    }

    /// Waits until this process is a member of a group called `name` (one
    /// another process created with it as a member, or it joined).
    pub fn find(&self, name: &str) -> Result<Group<'_>, GroupError> {
        self.wait(|st| Ok(st.membership.groups().find(|v| v.name == name && v.group != WORLD).map(|v| v.group)))
            .map(|id| Group { groups: self, id })
    }

    /// The next membership event of this process's groups, if any came.
    pub fn poll_event(&self) -> Result<Option<Event>, GroupError> {
        let rt = self.rt;
        Ok(rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            Ok(st.events.pop_front())
        })?)
    }

    /// Counters of this process's group traffic.
    pub fn stats(&self) -> GroupStats {
        self.state().stats
    }

    fn request(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut Membership) -> Result<(), RequestError>,
    ) -> Result<(), GroupError> {
        self.rt
            .with(|e| {
                let mut st = self.state();
                let result = f(&mut st.membership);
                self.pump(e, &mut st);
                Ok(result)
            })?
            .map_err(|source| GroupError::Request { call, source })
    }

    /// A member of a group called `name` already: the directory or the
    /// server would refuse the request; say so without asking them.
    fn refuse_if_member(&self, call: &'static str, name: &str, why: Refusal) -> Result<(), GroupError> {
        let rt = self.rt;
        let member = rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            let member = st.membership.groups().any(|v| v.name == name && v.group != WORLD);
            Ok(member)
        })?;
        match member {
            true => Err(GroupError::Refused { call, name: name.to_string(), why: why.to_string() }),
            false => Ok(()),
        }
    }

    fn await_view(&self, call: &'static str, name: &str, kind: RequestKind) -> Result<Group<'_>, GroupError> {
        let id = self.wait(|st| {
            if let Some(v) = st.membership.groups().find(|v| v.name == name && v.group != WORLD) {
                return Ok(Some(v.group));
            }
            // The refusal of this request, if it came.
            let refusal = st
                .events
                .iter()
                .position(|e| matches!(e, Event::Refused { kind: k, name: n, .. } if *k == kind && n == name));
            if let Some(i) = refusal {
                if let Some(Event::Refused { why, .. }) = st.events.remove(i) {
                    return Err(GroupError::Refused { call, name: name.to_string(), why: why.to_string() });
                }
            }
            Ok(None)
        })?;
        Ok(Group { groups: self, id })
    }

    /// Waits, pumping the control plane, until `f` gives a value.
    pub(crate) fn wait<R>(
        &self,
        mut f: impl FnMut(&mut State) -> Result<Option<R>, GroupError>,
    ) -> Result<R, GroupError> {
        let _counted = Waiting::enter(&self.waiting);
        self.rt.wait_both_paths(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            Ok(f(&mut st).transpose())
        })?
    }

    /// Moves the control plane along (see [`pump`]).
    pub(crate) fn pump(&self, e: &mut Engine, st: &mut State) {
        pump(e, st, self.rt.rank());
    }

    /// Posts `data` to every other member of `group`'s current view.
    pub(crate) fn post(&self, call: &'static str, group: GroupId, tag: i32, data: &[u8]) -> Result<(), GroupError> {
        let me = self.rt.rank();
        self.rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            let view = match st.membership.view(group) {
                Some(v) => v.clone(),
                None => return Ok(Err(not_here(&st, call, group))),
            };
            let mut message = Vec::with_capacity(POST_HEADER + data.len());
            message.push(POST);
            for x in [group.0, view.number, me] {
                message.extend_from_slice(&x.to_le_bytes());
            }
            message.extend_from_slice(&tag.to_le_bytes());
            message.extend_from_slice(data);
            let latest = st.local.get(&group).is_some_and(|l| l.latest);
            let channel = match st.local.get(&group).is_some_and(|l| l.best_effort) {
                true => BEST_EFFORT_CHANNEL,
                false => DATA,
            };
            for c in schedule::post_children(&view.members, me, me).expect("a member") {
                queue_post(&mut st, c, channel, message.clone(), latest);
            }
            flush(e, &mut st);
            Ok(Ok(()))
        })?
    }

    /// The first post in `group`'s mailbox that `wanted` accepts.
    pub(crate) fn take_post(
        &self,
        call: &'static str,
        group: GroupId,
        block: bool,
        mut wanted: impl FnMut(&Posted) -> bool,
    ) -> Result<Option<Posted>, GroupError> {
        let mut step = |st: &mut State| -> Result<Option<Posted>, GroupError> {
            if let Some(i) = st.mailbox.get(&group).and_then(|b| b.iter().position(&mut wanted)) {
                return Ok(st.mailbox.get_mut(&group).and_then(|b| b.remove(i)));
            }
            if st.membership.view(group).is_none() {
                return Err(not_here(st, call, group));
            }
            Ok(None)
        };
        if block {
            return self.wait(step).map(Some);
        }
        self.rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            Ok(step(&mut st))
        })?
    }

    /// Begins a collective of `group`: its view and number.
    pub(crate) fn begin(
        &self,
        call: &'static str,
        group: GroupId,
        participants: Option<&[Rank]>,
    ) -> Result<Ctx, GroupError> {
        self.rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            Ok(begin_locked(&mut st, call, group, participants, self.rt.rank()))
        })?
    }

    /// The latest view of `group` here.
    pub(crate) fn current_view(&self, call: &'static str, group: GroupId) -> Result<View, GroupError> {
        self.rt.with(|e| {
            let mut st = self.state();
            self.pump(e, &mut st);
            let name = describe(&st, group);
            Ok(match st.membership.view(group) {
                Some(v) => Ok(v.clone()),
                None if st.membership.is_gone(group) => Err(GroupError::Destroyed { call, group: name }),
                None => Err(GroupError::NotMember { call, group: name }),
            })
        })?
    }

    /// Asks the group's server to take this process out, or to destroy it.
    pub(crate) fn request_change(
        &self,
        call: &'static str,
        group: GroupId,
        kind: RequestKind,
    ) -> Result<(), GroupError> {
        self.request(call, |m| match kind {
            RequestKind::Leave => m.leave(group),
            _ => m.destroy(group),
        })
    }

    /// Queues a message (sent at once if there is room).
    pub(crate) fn send(&self, e: &mut Engine, st: &mut State, to: Rank, channel: u16, bytes: Vec<u8>) {
        if channel == DATA {
            st.stats.data_messages_sent += 1;
        } else {
            st.stats.control_messages_sent += 1;
        }
        st.outbox.push_back((to, channel, bytes));
        flush(e, st);
    }

    /// Runs `step` until it finishes, failing if the group's view changes.
    pub(crate) fn run<R>(
        &self,
        ctx: &Ctx,
        mut step: impl FnMut(&mut Engine, &mut State) -> Result<Option<R>, GroupError>,
    ) -> Result<R, GroupError> {
        let me = self.rt.rank();
        let _counted = Waiting::enter(&self.waiting);
        self.rt.wait_both_paths(|e| {
            let mut st = self.state();
            flush(e, &mut st);
            // What came is used before any view change is looked at: a
            // collective whose messages all arrived completes, even if the
            // group changed right after.
            let stepped = match step(e, &mut st) {
                Ok(None) => None,
                other => Some(other),
            };
            let result = match stepped {
                Some(result) => result,
                None => {
                    self.pump(e, &mut st);
                    if let Err(err) = check_view(&st, ctx) {
                        return Ok(Some(Err(err)));
                    }
                    match take_abort(e, ctx) {
                        Some(err) => return Ok(Some(Err(err))),
                        None => return Ok(None),
                    }
                }
            };
            if let Err(err) = &result {
                // The others would wait for this member: tell them why it
                // stopped, and they stop too.
                if let Some(abort) = abort_message(ctx, err, me) {
                    for &m in ctx.view.members.iter().filter(|&&m| m != me) {
                        self.send(e, &mut st, m, CONTROL, abort.clone());
                    }
                }
            }
            Ok(Some(result.map(|r| r.expect("a finished step"))))
        })?
    }

    pub(crate) fn name_of(&self, group: GroupId) -> String {
        let st = self.state();
        describe(&st, group)
    }

    pub(crate) fn algorithm(&self, group: GroupId, op: Operation, bytes: usize, members: usize) -> Algorithm {
        let st = self.state();
        st.local
            .get(&group)
            .and_then(|l| l.algorithms.get(&op))
            .or_else(|| st.job_algorithms.get(&op))
            .copied()
            // A host's own processes, not the network namespaces of one
            // machine: between those the links decide (8 test-bed hosts
            // behind 100 Mbit/s ports: a flat broadcast of 16 KiB took
            // 10.0 ms, a binomial tree 4.2, a chain 1.4).
            .unwrap_or_else(|| schedule::choose(op, bytes, members, self.rt.host_shares_cores()))
    }

    pub(crate) fn delivery(&self, group: GroupId) -> Delivery {
        let st = self.state();
        st.local.get(&group).and_then(|l| l.delivery).unwrap_or(st.job_delivery)
    }

    /// Applies a setting of `call` to this process's state of `group`, of
    /// which it must be a member.
    pub(crate) fn set_local(
        &self,
        call: &'static str,
        group: GroupId,
        f: impl FnOnce(&mut Local),
    ) -> Result<(), GroupError> {
        let mut st = self.state();
        let Some(view) = st.membership.view(group).map(|v| v.number) else {
            return Err(not_here(&st, call, group));
        };
        let local = st.local.entry(group).or_insert_with(|| Local::new(view));
        f(local);
        Ok(())
    }
}

impl State {
    /// Messages waiting for room in the transport.
    pub(crate) fn queued(&self) -> usize {
        self.outbox.len()
    }

    /// The reason of a refused request of `kind`, if one came.
    pub(crate) fn take_refusal(&mut self, kind: RequestKind) -> Option<String> {
        let i = self.events.iter().position(|e| matches!(e, Event::Refused { kind: k, .. } if *k == kind))?;
        match self.events.remove(i) {
            Some(Event::Refused { why, .. }) => Some(why.to_string()),
            _ => None,
        }
    }
}

impl Local {
    fn new(view: u32) -> Local {
        Local {
            view,
            op: 0,
            multicasts: HashMap::new(),
            algorithms: HashMap::new(),
            delivery: None,
            latest: false,
            best_effort: false,
        }
    }

    pub(crate) fn set_latest(&mut self, on: bool) {
        self.latest = on;
    }

    pub(crate) fn set_best_effort(&mut self, on: bool) {
        self.best_effort = on;
    }

    pub(crate) fn set_algorithm(&mut self, op: Operation, algorithm: Option<Algorithm>) {
        match algorithm {
            Some(a) => self.algorithms.insert(op, a),
            None => self.algorithms.remove(&op),
        };
    }

    pub(crate) fn set_delivery(&mut self, delivery: Delivery) {
        self.delivery = Some(delivery);
    }
}

fn begin_locked(
    st: &mut State,
    call: &'static str,
    group: GroupId,
    participants: Option<&[Rank]>,
    me: Rank,
) -> Result<Ctx, GroupError> {
    let Some(view) = st.membership.view(group).cloned() else {
        let name = describe(st, group);
        return Err(match st.membership.is_gone(group) {
            true => GroupError::Destroyed { call, group: name },
            false => GroupError::NotMember { call, group: name },
        });
    };
    let local = st.local.entry(group).or_insert_with(|| Local::new(view.number));
    if local.view != view.number {
        local.view = view.number;
        local.op = 0;
        local.multicasts.clear();
    }
    let (view, op) = match participants {
        None => {
            local.op += 1;
            (view, local.op)
        }
        Some(set) => {
            // A multicast runs among its participants alone, numbered
            // among the multicasts of the same participants.
            let count = local.multicasts.entry(set.to_vec()).or_insert(0);
            *count += 1;
            let sub = View { members: set.to_vec(), ..view };
            (sub, *count | 1 << 31)
        }
    };
    let me = view.position(me).expect("a member of the view");
    Ok(Ctx { call, group, view, op, me })
}

/// Moves the control plane along: sends what waits for room, handles
/// the membership messages that came, installs new views, passes posts
/// on. Called by every wait of the layer, and by the runtime's progress
/// thread while the application computes (`Groups::on_runtime`).
fn pump(e: &mut Engine, st: &mut State, me: Rank) {
    flush(e, st);
    while let Some(m) = e.take(|m| m.channel == CONTROL && m.data.get(m.start) == Some(&MEMBERSHIP)) {
        let handled = Message::decode(&mut Reader::new(&m.data[m.start + 1..]))
            .map_err(|_| "undecodable")
            .and_then(|msg| st.membership.handle(m.from, msg));
        if handled.is_err() {
            st.stats.malformed += 1;
        }
    }
    while let Some((to, msg)) = st.membership.poll_transmit() {
        let mut w = Writer::new();
        w.u8(MEMBERSHIP);
        msg.encode(&mut w);
        st.stats.control_messages_sent += 1;
        st.outbox.push_back((to, CONTROL, w.bytes));
    }
    while let Some(event) = st.membership.poll_event() {
        match &event {
            Event::View(v) => {
                let local = st.local.entry(v.group).or_insert_with(|| Local::new(v.number));
                local.view = v.number;
                local.op = 0;
                local.multicasts.clear();
                drop_older(e, v.group, v.number);
                st.history.entry(v.group).or_default().insert(v.number, v.members.clone());
            }
            Event::Left { group, .. } | Event::Destroyed { group, .. } => {
                // The views' history stays: posts of those views that
                // still come are passed on down their trees.
                st.local.remove(group);
                st.mailbox.remove(group);
                drop_older(e, *group, u32::MAX);
            }
            Event::Refused { .. } => {}
        }
        st.events.push_back(event);
    }
    take_posts(e, st, me);
    flush(e, st);
}

/// Delivers the posts that came for views this process was in, and
/// passes each on to its children in the view's tree rooted at the
/// poster (seed 004's multicast tree). Posts of views not yet
/// installed here wait in the inbox.
fn take_posts(e: &mut Engine, st: &mut State, me: Rank) {
    loop {
        let history = &st.history;
        let known =
            |m: &Inbound| post_of(m).is_some_and(|(g, v)| history.get(&GroupId(g)).is_some_and(|h| h.contains_key(&v)));
        let Some(m) = e.take(known) else { return };
        let d = &m.data[m.start..];
        let (g, v) = post_of(&m).expect("checked by the predicate");
        let origin = u32::from_le_bytes(d[9..13].try_into().expect("4 bytes"));
        let tag = i32::from_le_bytes(d[13..17].try_into().expect("4 bytes"));
        let members = &st.history[&GroupId(g)][&v];
        let Some(children) = schedule::post_children(members, origin, me) else {
            st.stats.malformed += 1;
            continue;
        };
        // Passed on the way it came: a best-effort post stays best effort.
        let latest = st.local.get(&GroupId(g)).is_some_and(|l| l.latest);
        for c in children {
            queue_post(st, c, m.channel, d.to_vec(), latest);
        }
        // Passed on in any case (the subtree needs it), kept only while
        // this process is a member; in latest-value mode a newer post of
        // the same poster and tag replaces one not yet received.
        if st.membership.view(GroupId(g)).is_some() {
            let data = d[POST_HEADER..].to_vec();
            let mailbox = st.mailbox.entry(GroupId(g)).or_default();
            if latest {
                mailbox.retain(|p| (p.from, p.tag) != (origin, tag));
            }
            mailbox.push_back(Posted { from: origin, tag, view: v, data });
        }
    }
}

/// Checked at every turn of a collective's wait: the names are made only
/// for an error.
fn check_view(st: &State, ctx: &Ctx) -> Result<(), GroupError> {
    let view = st.membership.view(ctx.group);
    if view.is_some_and(|v| v.number == ctx.view.number) {
        return Ok(());
    }
    let group = format!("{:?} ({})", ctx.view.name, ctx.group.0);
    match view {
        Some(v) if v.number == ctx.view.number => Ok(()),
        Some(v) => Err(GroupError::ViewChanged {
            call: ctx.call,
            group,
            from: ctx.view.number,
            to: v.number,
            change: match v.change {
                Change::Joined(r) => format!("rank {r} joined"),
                Change::Left(r) => format!("rank {r} left"),
                Change::Created => "created again".into(),
            },
        }),
        None if st.membership.is_gone(ctx.group) => Err(GroupError::Destroyed { call: ctx.call, group }),
        None => Err(GroupError::ViewChanged {
            call: ctx.call,
            group,
            from: ctx.view.number,
            to: ctx.view.number + 1,
            change: "this process left".into(),
        }),
    }
}

/// What a member that found bad input tells the others: [ABORT] group,
/// view, number, then who had which size (or who sent a malformed message).
fn abort_message(ctx: &Ctx, err: &GroupError, me: Rank) -> Option<Vec<u8>> {
    let (rank, bytes, other, other_bytes) = match err {
        GroupError::SizeMismatch { rank, mine, theirs, .. } => (me, *mine as u64, *rank, *theirs as u64),
        GroupError::Malformed { rank, .. } => (*rank, u64::MAX, *rank, u64::MAX),
        _ => return None,
    };
    let mut v = vec![ABORT];
    for x in [ctx.group.0, ctx.view.number, ctx.op, rank] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(&bytes.to_le_bytes());
    v.extend_from_slice(&other.to_le_bytes());
    v.extend_from_slice(&other_bytes.to_le_bytes());
    Some(v)
}

/// The error another member stopped this collective with, if it did.
fn take_abort(e: &mut Engine, ctx: &Ctx) -> Option<GroupError> {
    // Looked for at every turn of a wait: compared in place, nothing made.
    let (g, v, op) = (ctx.group.0.to_le_bytes(), ctx.view.number.to_le_bytes(), ctx.op.to_le_bytes());
    let ours = |d: &[u8]| d.len() >= 13 && d[0] == ABORT && d[1..5] == g && d[5..9] == v && d[9..13] == op;
    let m = e.take(|m| m.channel == CONTROL && ours(&m.data[m.start..]))?;
    let d = &m.data[m.start + 13..];
    if d.len() != 24 {
        return Some(GroupError::Malformed { call: ctx.call, rank: m.from });
    }
    let rank = u32::from_le_bytes(d[0..4].try_into().expect("4 bytes"));
    let bytes = u64::from_le_bytes(d[4..12].try_into().expect("8 bytes"));
    let other = u32::from_le_bytes(d[12..16].try_into().expect("4 bytes"));
    let other_bytes = u64::from_le_bytes(d[16..24].try_into().expect("8 bytes"));
    Some(match bytes {
        u64::MAX => GroupError::Malformed { call: ctx.call, rank },
        _ => GroupError::SizesDiffer {
            call: ctx.call,
            rank,
            bytes: bytes as usize,
            other,
            other_bytes: other_bytes.min(usize::MAX as u64) as usize,
        },
    })
}

/// Queues a post for `to` on `channel` ([`DATA`], or the best-effort
/// channel). In latest-value mode a post of the same group, view, poster
/// and tag still waiting for room in the transport is replaced by this one
/// instead.
fn queue_post(st: &mut State, to: Rank, channel: u16, bytes: Vec<u8>, latest: bool) {
    if latest {
        let same = |b: &Vec<u8>| {
            b.len() >= POST_HEADER && bytes.len() >= POST_HEADER && b[..POST_HEADER] == bytes[..POST_HEADER]
        };
        if let Some(slot) = st.outbox.iter_mut().find(|(t, ch, b)| *t == to && *ch == channel && same(b)) {
            slot.2 = bytes;
            return;
        }
    }
    st.stats.data_messages_sent += 1;
    st.outbox.push_back((to, channel, bytes));
}

/// Bytes before a post's data: kind, group, view, poster, tag.
const POST_HEADER: usize = 17;

/// The group and view of a post, if `m` is one that is well formed.
fn post_of(m: &Inbound) -> Option<(u32, u32)> {
    let d = &m.data[m.start..];
    if !(m.channel == DATA || m.channel == BEST_EFFORT_CHANNEL) || d.len() < POST_HEADER || d[0] != POST {
        return None;
    }
    Some((u32::from_le_bytes(d[1..5].try_into().ok()?), u32::from_le_bytes(d[5..9].try_into().ok()?)))
}

/// The error of a call on a group this process is not in.
fn not_here(st: &State, call: &'static str, group: GroupId) -> GroupError {
    let name = describe(st, group);
    match st.membership.is_gone(group) {
        true => GroupError::Destroyed { call, group: name },
        false => GroupError::NotMember { call, group: name },
    }
}

fn describe(st: &State, group: GroupId) -> String {
    match st.membership.view(group) {
        Some(v) => format!("{:?} ({})", v.name, group.0),
        None => format!("{}", group.0),
    }
}

/// Sends what the transport has room for, in order.
fn flush(e: &mut Engine, st: &mut State) {
    while let Some((to, channel, bytes)) = st.outbox.front() {
        match e.check_send(*to, *channel, bytes.len()) {
            Ok(()) => {
                let (to, channel, bytes) = st.outbox.pop_front().expect("front exists");
                // Checked just above; the job's failure shows elsewhere.
                let _ = e.send_owned(to, channel, bytes);
            }
            Err(SendError::WouldBlock) => return,
            Err(_) => {
                // A rank outside the job: never made here.
                st.outbox.pop_front();
            }
        }
    }
}

/// Drops the messages of `group` from views before `view`: nobody will
/// ask for them.
fn drop_older(e: &mut Engine, group: GroupId, view: u32) {
    while e.take(|m| group_view(m).is_some_and(|(g, v)| g == group.0 && v < view)).is_some() {}
}

/// The group and view a data or control message (other than membership)
/// belongs to.
fn group_view(m: &Inbound) -> Option<(u32, u32)> {
    let d = &m.data[m.start..];
    let ours = m.channel == DATA && d.first() != Some(&POST)
        || m.channel == CONTROL && d.first().is_some_and(|&k| k != MEMBERSHIP);
    if !ours || d.len() < 9 {
        return None;
    }
    let g = u32::from_le_bytes(d[1..5].try_into().expect("4 bytes"));
    let v = u32::from_le_bytes(d[5..9].try_into().expect("4 bytes"));
    Some((g, v))
}

/// Parses `bcast=tree,allreduce=ring`.
pub fn parse_algorithms(text: Option<&str>) -> Result<HashMap<Operation, Algorithm>, String> {
    let mut map = HashMap::new();
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else { return Ok(map) };
    for item in text.split(',') {
        let (op, algorithm) =
            item.split_once('=').ok_or_else(|| format!("{item:?}: expected collective=algorithm, as bcast=tree"))?;
        let (op, algorithm): (Operation, Algorithm) = (op.parse()?, algorithm.parse()?);
        if !algorithm.supports(op) {
            return Err(format!("algorithm {algorithm} cannot run {}", op.name()));
        }
        map.insert(op, algorithm);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_s_algorithm_setting_is_parsed_or_refused_with_the_reason() {
        let m = parse_algorithms(Some("bcast=tree, allreduce=ring")).unwrap();
        assert_eq!(m[&Operation::Bcast], Algorithm::BinaryTree);
        assert_eq!(m[&Operation::Allreduce], Algorithm::Ring);
        assert!(parse_algorithms(None).unwrap().is_empty());
        assert!(parse_algorithms(Some("bcast")).unwrap_err().contains("collective=algorithm"));
        assert!(parse_algorithms(Some("bcast=ring")).unwrap_err().contains("cannot run bcast"));
        assert!(parse_algorithms(Some("sort=flat")).unwrap_err().contains("not a collective"));
    }
}
