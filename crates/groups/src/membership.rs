//! The membership protocol of dynamic groups, sans IO (seed 004 §3).
//!
//! Roles, as in NCS:
//! - the **directory** (NCS's master group server) is rank 0: it maps group
//!   names to group numbers and to the group's server, and hands out the
//!   numbers;
//! - each group's **server** (NCS's local group server) is its creator at
//!   first; it alone orders the group's membership changes, so every member
//!   sees the same sequence of views. When the server leaves, the first
//!   remaining member of the view takes over, named in the view itself.
//!
//! A process asks for a change (create, join, leave, destroy); the server
//! answers every member with the new [`View`]. Messages travel between
//! pairs of processes on reliable channels that keep each pair's order
//! (`bulkwire_proto`), and nothing more is assumed: messages of different
//! pairs may arrive in any order. A request reaching a process that is not
//! (or not yet) the server is forwarded to the server it knows, or kept
//! until it knows the view the request was made in.
//!
//! Input: [`Membership::create`] and the other requests, and
//! [`Membership::handle`] for each message that arrives. Output:
//! [`Membership::poll_transmit`] (messages to send) and
//! [`Membership::poll_event`] (views, departures, refusals). No clock: the
//! protocol has no timers, since the channels below retransmit.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::codec::{DecodeError, Reader, Writer};

pub type Rank = u32;

/// A group's number, handed out by the directory; 0 is the whole job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

/// The group of every process of the job, which exists from the start.
pub const WORLD: GroupId = GroupId(0);

/// The rank that keeps the directory of group names.
pub const DIRECTORY: Rank = 0;

/// A group's membership at one moment: every member sees the same views,
/// in the same order, from the view that added it to the one it left in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub group: GroupId,
    pub name: String,
    /// 1 for the view the group was created with, then one more per change.
    pub number: u32,
    /// In the order they joined; the creator and the listed members first.
    pub members: Vec<Rank>,
    /// The member that orders the group's changes.
    pub server: Rank,
    /// What made this view from the one before.
    pub change: Change,
}

/// What changed from one view to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The first view: the creator and the members it listed.
    Created,
    Joined(Rank),
    Left(Rank),
}

impl View {
    pub fn contains(&self, rank: Rank) -> bool {
        self.members.contains(&rank)
    }

    /// `rank`'s position in the member list.
    pub fn position(&self, rank: Rank) -> Option<usize> {
        self.members.iter().position(|&m| m == rank)
    }
}

/// What a process asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Create,
    Join,
    Leave,
    Destroy,
}

impl std::fmt::Display for RequestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RequestKind::Create => "create",
            RequestKind::Join => "join",
            RequestKind::Leave => "leave",
            RequestKind::Destroy => "destroy",
        })
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    NameTaken,
    NoSuchGroup,
    AlreadyMember,
    NotMember,
    Destroyed,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::NameTaken => "a group of that name exists",
            Refusal::NoSuchGroup => "no group has that name",
            Refusal::AlreadyMember => "this process is already a member",
            Refusal::NotMember => "this process is not a member",
            Refusal::Destroyed => "the group was destroyed",
        })
    }
}

/// What the protocol tells its process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new view of a group this process is a member of (also the first
    /// one, when it was created with or joined the group).
    View(View),
    /// This process left `group`; `after` is the last view it was in.
    Left { group: GroupId, name: String, after: u32 },
    /// `group` no longer exists; this process was a member.
    Destroyed { group: GroupId, name: String },
    /// A request of this process was refused.
    Refused { kind: RequestKind, name: String, why: Refusal },
}

/// The protocol's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Creator to directory.
    Register { name: String, members: Vec<Rank> },
    /// Joiner to directory.
    Lookup { name: String },
    /// Directory to creator.
    Registered { name: String, group: GroupId, members: Vec<Rank> },
    /// A change asked of the group's server by `by`, made while `by` knew
    /// view `known` (0 when the directory forwards a join).
    Change { group: GroupId, kind: RequestKind, by: Rank, known: u32 },
    /// Server to members: the new view.
    NewView(View),
    /// Server to a member that left.
    Left { group: GroupId, name: String, after: u32 },
    /// Server to members, and to the directory: the group ended after view
    /// `last`, of which the receiver is a member if `member`.
    Destroyed { group: GroupId, name: String, last: u32, member: bool },
    /// To a process whose request was refused.
    Refused { kind: RequestKind, name: String, why: Refusal },
    /// Server to directory: `server` orders the group's changes from view
    /// `number` on.
    Moved { group: GroupId, server: Rank, number: u32 },
}

/// The directory's record of a live group: its server as of view
/// `number` (moves reported by servers that leave may arrive in any order).
#[derive(Debug)]
struct Served {
    server: Rank,
    number: u32,
}

/// One process's part in the protocol.
#[derive(Debug)]
pub struct Membership {
    me: Rank,
    size: u32,
    /// At [`DIRECTORY`] only: live group names, and the groups' servers.
    names: BTreeMap<String, GroupId>,
    servers: BTreeMap<GroupId, Served>,
    next_group: u32,
    /// The groups this process is a member of, by their latest view.
    views: BTreeMap<GroupId, View>,
    /// Groups known to be destroyed, with their names.
    gone: BTreeMap<GroupId, String>,
    /// Requests for groups this process does not yet know well enough.
    deferred: Vec<Message>,
    /// Views that came before the views they follow (they come from
    /// different servers when a server leaves), with their senders.
    ahead: BTreeMap<(GroupId, u32), (Rank, View)>,
    /// This process's departures, told by the server, waiting for the
    /// views before them: the server, the name, the last view.
    leaving: BTreeMap<GroupId, (Rank, String, u32)>,
    /// Destructions that wait for views still on their way: the names and
    /// the last views.
    ending: BTreeMap<GroupId, (String, u32)>,
    /// Creations asked of the directory and not yet answered: how many
    /// of each name.
    creating: BTreeMap<String, u32>,
    out: VecDeque<(Rank, Message)>,
    events: VecDeque<Event>,
}

/// A request that cannot even be sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("rank {rank} does not exist: the job has ranks 0 to {}", .size - 1)]
    NoSuchRank { rank: Rank, size: u32 },
    #[error("a group name is 1 to 255 bytes: {0:?}")]
    BadName(String),
    #[error("this process is not a member of group {0}")]
    NotMember(u32),
    #[error("the job's group of every process cannot be left or destroyed")]
    World,
}

impl Membership {
    pub fn new(me: Rank, size: u32) -> Membership {
        let mut m = Membership {
            me,
            size,
            names: BTreeMap::new(),
            next_group: 1,
            views: BTreeMap::new(),
            servers: BTreeMap::new(),
            gone: BTreeMap::new(),
            deferred: Vec::new(),
            ahead: BTreeMap::new(),
            leaving: BTreeMap::new(),
            ending: BTreeMap::new(),
            creating: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
        };
        let members = (0..size).collect();
        let world = View { group: WORLD, name: "world".into(), number: 1, members, server: 0, change: Change::Created };
        m.views.insert(WORLD, world);
        m
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    /// The latest view of `group` if this process is a member.
    pub fn view(&self, group: GroupId) -> Option<&View> {
        self.views.get(&group)
    }

    /// The groups this process is a member of.
    pub fn groups(&self) -> impl Iterator<Item = &View> {
        self.views.values()
    }

    /// Whether `group` is known to have been destroyed.
    pub fn is_gone(&self, group: GroupId) -> bool {
        self.gone.contains_key(&group)
    }

    /// Asks for a new group `name` with this process and `members` in it.
    pub fn create(&mut self, name: &str, members: &[Rank]) -> Result<(), RequestError> {
        check_name(name)?;
        let mut list = vec![self.me];
        for &m in members {
            if m >= self.size {
                return Err(RequestError::NoSuchRank { rank: m, size: self.size });
            }
            if !list.contains(&m) {
                list.push(m);
            }
        }
        *self.creating.entry(name.to_string()).or_default() += 1;
        self.send(DIRECTORY, Message::Register { name: name.to_string(), members: list });
        Ok(())
    }

    /// Asks to join the group called `name`.
    pub fn join(&mut self, name: &str) -> Result<(), RequestError> {
        check_name(name)?;
        self.send(DIRECTORY, Message::Lookup { name: name.to_string() });
        Ok(())
    }

    /// Asks to leave `group`.
    pub fn leave(&mut self, group: GroupId) -> Result<(), RequestError> {
        self.change(group, RequestKind::Leave)
    }

    /// Asks for `group` to be destroyed.
    pub fn destroy(&mut self, group: GroupId) -> Result<(), RequestError> {
        self.change(group, RequestKind::Destroy)
    }

    fn change(&mut self, group: GroupId, kind: RequestKind) -> Result<(), RequestError> {
        if group == WORLD {
            return Err(RequestError::World);
        }
        let view = self.views.get(&group).ok_or(RequestError::NotMember(group.0))?;
        let (server, known) = (view.server, view.number);
        self.send(server, Message::Change { group, kind, by: self.me, known });
        Ok(())
    }

    /// The next message to send, and to whom.
    pub fn poll_transmit(&mut self) -> Option<(Rank, Message)> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A message from `from`. Anything a correct peer would not send is
    /// ignored and reported as an error (the process goes on).
    pub fn handle(&mut self, from: Rank, message: Message) -> Result<(), &'static str> {
        if from >= self.size {
            return Err("a message from a rank outside the job");
        }
        match message {
            Message::Register { name, members } => self.on_register(from, name, members),
            Message::Lookup { name } => self.on_lookup(from, name),
            Message::Registered { name, group, members } => self.on_registered(from, name, group, members),
            change @ Message::Change { .. } => {
                self.on_change(change);
                Ok(())
            }
            Message::NewView(view) => self.on_view(from, view),
            Message::Left { group, name, after } => {
                let Some(view) = self.views.get(&group) else { return Ok(()) };
                if view.number > after {
                    return Err("a departure before the view installed");
                }
                // Views that came from an earlier server may still be on
                // their way: the departure waits for them.
                self.leaving.insert(group, (from, name, after));
                self.leave_if_due(group)
            }
            Message::Destroyed { group, name, last, member } => {
                if self.me == DIRECTORY {
                    self.names.retain(|_, g| *g != group);
                    self.servers.remove(&group);
                }
                // A member installs every view it is in (and gets the posts
                // of those views) before the group ends: views from an
                // earlier server may still be on their way.
                let behind = self.views.get(&group).is_none_or(|v| v.number < last);
                if member && behind {
                    self.ending.insert(group, (name, last));
                } else {
                    self.end_here(group, name);
                }
                Ok(())
            }
            Message::Refused { kind, name, why } => {
                if kind == RequestKind::Create {
                    self.answered(&name);
                }
                self.events.push_back(Event::Refused { kind, name, why });
                Ok(())
            }
            Message::Moved { group, server, number } => {
                if self.me != DIRECTORY || server >= self.size {
                    return Err("a server move sent to a process that is not the directory");
                }
                if let Some(entry) = self.servers.get_mut(&group).filter(|e| e.number < number) {
                    (entry.server, entry.number) = (server, number);
                }
                self.retry_deferred();
                Ok(())
            }
        }
    }

    fn on_register(&mut self, from: Rank, name: String, members: Vec<Rank>) -> Result<(), &'static str> {
        if self.me != DIRECTORY {
            return Err("a registration sent to a process that is not the directory");
        }
        if members.first() != Some(&from) || members.iter().any(|&m| m >= self.size) || check_name(&name).is_err() {
            return Err("a malformed registration");
        }
        if self.names.contains_key(&name) {
            self.send(from, Message::Refused { kind: RequestKind::Create, name, why: Refusal::NameTaken });
            return Ok(());
        }
        let group = GroupId(self.next_group);
        self.next_group += 1;
        self.names.insert(name.clone(), group);
        self.servers.insert(group, Served { server: from, number: 1 });
        self.send(from, Message::Registered { name, group, members });
        Ok(())
    }

    fn on_lookup(&mut self, from: Rank, name: String) -> Result<(), &'static str> {
        if self.me != DIRECTORY {
            return Err("a lookup sent to a process that is not the directory");
        }
        match self.names.get(&name) {
            Some(&group) => {
                let server = self.servers[&group].server;
                self.send(server, Message::Change { group, kind: RequestKind::Join, by: from, known: 0 });
            }
            None => self.send(from, Message::Refused { kind: RequestKind::Join, name, why: Refusal::NoSuchGroup }),
        }
        Ok(())
    }

    fn on_registered(
        &mut self,
        from: Rank,
        name: String,
        group: GroupId,
        members: Vec<Rank>,
    ) -> Result<(), &'static str> {
        if from != DIRECTORY || !self.answered(&name) || members.first() != Some(&self.me) {
            return Err("a registration answer nobody asked for");
        }
        if members.iter().any(|&m| m >= self.size) || self.views.contains_key(&group) {
            return Err("a malformed registration answer");
        }
        let view = View { group, name, number: 1, members, server: self.me, change: Change::Created };
        self.announce(&view);
        self.install(view);
        Ok(())
    }

    /// Counts an answer to a creation of `name`; false if none was asked.
    fn answered(&mut self, name: &str) -> bool {
        match self.creating.get_mut(name) {
            Some(1) => self.creating.remove(name).is_some(),
            Some(n) => {
                *n -= 1;
                true
            }
            None => false,
        }
    }

    fn on_view(&mut self, from: Rank, view: View) -> Result<(), &'static str> {
        let fresh = view.number >= 1
            && view.members.iter().all(|&m| m < self.size)
            && view.contains(self.me)
            && view.contains(view.server)
            && !has_duplicates(&view.members);
        if !fresh || view.group == WORLD {
            return Err("a malformed view");
        }
        // A view comes from the server that made it: the previous view's
        // server (a server that leaves names its successor in the view). A
        // view that does not follow the one installed waits for it; the
        // first view of a member is the one that added it.
        let follows = match self.views.get(&view.group) {
            Some(old) if old.number >= view.number => return Err("a view older than the one installed"),
            Some(old) if old.number + 1 == view.number => {
                if old.server != from {
                    return Err("a view from a process that is not the group's server");
                }
                true
            }
            Some(_) => false,
            None => match view.change {
                Change::Created | Change::Joined(_) if from != view.server => {
                    return Err("a first view from a process that is not its server")
                }
                Change::Created => true,
                Change::Joined(r) => r == self.me,
                Change::Left(_) => false,
            },
        };
        if !follows {
            self.ahead.insert((view.group, view.number), (from, view));
            return Ok(());
        }
        self.install(view);
        Ok(())
    }

    /// Installs the views held back that now follow the installed one.
    fn install_ahead(&mut self, group: GroupId) {
        let Some(number) = self.views.get(&group).map(|v| v.number) else { return };
        let stale: Vec<_> = self.ahead.range((group, 0)..=(group, number)).map(|(k, _)| *k).collect();
        for k in stale {
            self.ahead.remove(&k);
        }
        if let Some((from, view)) = self.ahead.remove(&(group, number + 1)) {
            // Checked like any view; a bad one is dropped.
            let _ = self.on_view(from, view);
        }
    }

    fn install(&mut self, view: View) {
        let (group, number) = (view.group, view.number);
        self.gone.remove(&group);
        self.views.insert(group, view.clone());
        self.events.push_back(Event::View(view));
        // A bad departure was refused when it came; nothing to report here.
        let _ = self.leave_if_due(group);
        self.install_ahead(group);
        if let Some((name, _)) = self.ending.remove(&group).filter(|(_, last)| number >= *last) {
            self.end_here(group, name);
        }
        self.retry_deferred();
    }

    /// The group is destroyed: its view goes, and later requests for it are
    /// refused.
    fn end_here(&mut self, group: GroupId, name: String) {
        if self.views.remove(&group).is_some() {
            self.events.push_back(Event::Destroyed { group, name: name.clone() });
        }
        self.ahead.retain(|k, _| k.0 != group);
        self.ending.remove(&group);
        self.gone.insert(group, name);
        self.retry_deferred();
    }

    /// Leaves `group` if the server said so and its last view is installed.
    fn leave_if_due(&mut self, group: GroupId) -> Result<(), &'static str> {
        let (Some(view), Some((_, _, after))) = (self.views.get(&group), self.leaving.get(&group)) else {
            return Ok(());
        };
        if view.number < *after {
            return Ok(());
        }
        let (from, name, after) = self.leaving.remove(&group).expect("checked");
        if view.server != from {
            return Err("a departure not from the group's server");
        }
        self.views.remove(&group);
        self.ahead.retain(|k, _| k.0 != group || k.1 > after);
        self.events.push_back(Event::Left { group, name, after });
        // The view that adds this process again may have come first (from
        // another server): it is the next view here.
        let rejoined = self
            .ahead
            .range((group, 0)..=(group, u32::MAX))
            .find_map(|(k, (_, v))| matches!(v.change, Change::Joined(r) if r == self.me).then_some(*k));
        if let Some((from, view)) = rejoined.and_then(|k| self.ahead.remove(&k)) {
            // Checked like any view; a bad one is dropped.
            let _ = self.on_view(from, view);
        }
        self.retry_deferred();
        Ok(())
    }

    fn retry_deferred(&mut self) {
        for change in std::mem::take(&mut self.deferred) {
            self.on_change(change);
        }
    }

    /// A change asked of this process as the group's server.
    fn on_change(&mut self, change: Message) {
        let Message::Change { group, kind, by, known } = change else { return };
        if by >= self.size {
            return;
        }
        let Some(view) = self.views.get(&group) else {
            if let Some(name) = self.gone.get(&group) {
                let name = name.clone();
                self.send(by, Message::Refused { kind, name, why: Refusal::Destroyed });
            } else if self.ahead.range((group, 0)..=(group, u32::MAX)).next().is_some() {
                // A view naming this process is on its way.
                self.deferred.push(change);
            } else if self.me != DIRECTORY {
                // This process left the group: the directory knows where
                // its server is now.
                self.send(DIRECTORY, change);
            } else if let Some(served) = self.servers.get(&group) {
                let server = served.server;
                if server == self.me {
                    // The move this process reported is being handled.
                    self.deferred.push(change);
                } else {
                    self.send(server, change);
                }
            }
            return;
        };
        if view.number < known {
            self.deferred.push(change);
            return;
        }
        if view.server != self.me {
            let server = view.server;
            self.send(server, change);
            return;
        }
        let mut next = view.clone();
        next.number += 1;
        match kind {
            RequestKind::Join if view.contains(by) => {
                let name = view.name.clone();
                self.send(by, Message::Refused { kind, name, why: Refusal::AlreadyMember });
            }
            RequestKind::Join => {
                next.members.push(by);
                next.change = Change::Joined(by);
                self.announce(&next);
                self.install(next);
            }
            RequestKind::Leave | RequestKind::Destroy if !view.contains(by) => {
                let name = view.name.clone();
                self.send(by, Message::Refused { kind, name, why: Refusal::NotMember });
            }
            RequestKind::Leave => {
                let (name, after) = (view.name.clone(), view.number);
                next.members.retain(|&m| m != by);
                next.change = Change::Left(by);
                if next.members.is_empty() {
                    // The last member (this server) left: the group ends
                    // with it.
                    self.send(by, Message::Left { group, name: name.clone(), after });
                    self.gone.insert(group, name.clone());
                    self.send(DIRECTORY, Message::Destroyed { group, name, last: after, member: false });
                    return;
                }
                if by == self.me {
                    next.server = next.members[0];
                    self.send(DIRECTORY, Message::Moved { group, server: next.server, number: next.number });
                }
                self.announce(&next);
                self.send(by, Message::Left { group, name, after });
                if by != self.me {
                    self.install(next);
                }
            }
            RequestKind::Destroy => self.end(group),
            RequestKind::Create => {}
        }
    }

    /// Sends `view` to its members other than this process.
    fn announce(&mut self, view: &View) {
        for &m in &view.members {
            if m != self.me {
                self.out.push_back((m, Message::NewView(view.clone())));
            }
        }
    }

    /// Destroys `group`, served here: every member and the directory hear it.
    fn end(&mut self, group: GroupId) {
        let Some(view) = self.views.get(&group) else { return };
        let (name, last, members) = (view.name.clone(), view.number, view.members.clone());
        if !members.contains(&DIRECTORY) {
            self.send(DIRECTORY, Message::Destroyed { group, name: name.clone(), last, member: false });
        }
        for m in members {
            self.send(m, Message::Destroyed { group, name: name.clone(), last, member: true });
        }
    }

    /// Queues `message` for `to`; a message to this process is handled at
    /// once, as if it had arrived.
    fn send(&mut self, to: Rank, message: Message) {
        if to == self.me {
            // Only correct messages are made here: an error is a bug.
            let handled = self.handle(to, message);
            debug_assert!(handled.is_ok(), "{handled:?}");
        } else {
            self.out.push_back((to, message));
        }
    }
}

fn check_name(name: &str) -> Result<(), RequestError> {
    if name.is_empty() || name.len() > 255 {
        return Err(RequestError::BadName(name.to_string()));
    }
    Ok(())
}

fn has_duplicates(members: &[Rank]) -> bool {
    let set: BTreeSet<_> = members.iter().collect();
    set.len() != members.len()
}

// ----- encoding ------------------------------------------------------------

impl Message {
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Message::Register { name, members } => {
                w.u8(1).str(name).ranks(members);
            }
            Message::Lookup { name } => {
                w.u8(2).str(name);
            }
            Message::Registered { name, group, members } => {
                w.u8(3).str(name).u32(group.0).ranks(members);
            }
            Message::Change { group, kind, by, known } => {
                w.u8(4).u32(group.0).u8(*kind as u8).u32(*by).u32(*known);
            }
            Message::NewView(v) => {
                w.u8(5).u32(v.group.0).str(&v.name).u32(v.number).ranks(&v.members).u32(v.server);
                match v.change {
                    Change::Created => w.u8(0).u32(0),
                    Change::Joined(r) => w.u8(1).u32(r),
                    Change::Left(r) => w.u8(2).u32(r),
                };
            }
            Message::Left { group, name, after } => {
                w.u8(6).u32(group.0).str(name).u32(*after);
            }
            Message::Destroyed { group, name, last, member } => {
                w.u8(7).u32(group.0).str(name).u32(*last).u8(u8::from(*member));
            }
            Message::Refused { kind, name, why } => {
                w.u8(8).u8(*kind as u8).str(name).u8(*why as u8);
            }
            Message::Moved { group, server, number } => {
                w.u8(9).u32(group.0).u32(*server).u32(*number);
            }
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Message, DecodeError> {
        let message = match r.u8()? {
            1 => Message::Register { name: r.str()?, members: r.ranks()? },
            2 => Message::Lookup { name: r.str()? },
            3 => Message::Registered { name: r.str()?, group: GroupId(r.u32()?), members: r.ranks()? },
            4 => Message::Change { group: GroupId(r.u32()?), kind: kind(r.u8()?)?, by: r.u32()?, known: r.u32()? },
            5 => Message::NewView(View {
                group: GroupId(r.u32()?),
                name: r.str()?,
                number: r.u32()?,
                members: r.ranks()?,
                server: r.u32()?,
                change: match (r.u8()?, r.u32()?) {
                    (0, _) => Change::Created,
                    (1, rank) => Change::Joined(rank),
                    (2, rank) => Change::Left(rank),
                    (other, _) => return Err(DecodeError::Unknown("view change", other)),
                },
            }),
            6 => Message::Left { group: GroupId(r.u32()?), name: r.str()?, after: r.u32()? },
            7 => Message::Destroyed { group: GroupId(r.u32()?), name: r.str()?, last: r.u32()?, member: r.u8()? == 1 },
            8 => Message::Refused { kind: kind(r.u8()?)?, name: r.str()?, why: refusal(r.u8()?)? },
            9 => Message::Moved { group: GroupId(r.u32()?), server: r.u32()?, number: r.u32()? },
            other => return Err(DecodeError::Unknown("membership message", other)),
        };
        r.end()?;
        Ok(message)
    }
}

fn kind(b: u8) -> Result<RequestKind, DecodeError> {
    Ok(match b {
        0 => RequestKind::Create,
        1 => RequestKind::Join,
        2 => RequestKind::Leave,
        3 => RequestKind::Destroy,
        other => return Err(DecodeError::Unknown("request kind", other)),
    })
}

fn refusal(b: u8) -> Result<Refusal, DecodeError> {
    Ok(match b {
        0 => Refusal::NameTaken,
        1 => Refusal::NoSuchGroup,
        2 => Refusal::AlreadyMember,
        3 => Refusal::NotMember,
        4 => Refusal::Destroyed,
        other => return Err(DecodeError::Unknown("refusal", other)),
    })
}
