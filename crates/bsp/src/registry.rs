//! Registrations: collective, matched across processes by order, in effect
//! from the next sync; the most recent registration of an address wins.
//!
//! Each registration gets a slot number when `push_reg` is called, from a
//! free list that every process walks in the same order. Processes that
//! make the same sequence of `push_reg` and `pop_reg` calls therefore give
//! the same registration the same slot, and a put names its target by slot.
//! The sequence itself is checked at the sync (its digest travels in the
//! barrier), so processes that differ learn it there.
//!
//! A process that takes no part in a registration passes NULL, and may do
//! so for several registrations at once; its `pop_reg(NULL)` then cannot
//! tell which of them the others pop. It removes the most recent for the
//! time being and leaves the digest to the processes that know; after the
//! barrier it takes the choice that makes its sequence theirs
//! ([`Registry::settle`]).

use rustc_hash::FxHashMap as HashMap;

use crate::error::Reason;

pub(crate) type Slot = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Pushed in this superstep: in effect from the next sync.
    Pushed,
    /// Pushed and popped in this superstep: never in effect.
    PushedPopped,
    Active,
    /// Popped in this superstep: still usable until the next sync.
    Popped,
}

/// A registered area of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Area {
    /// The address the program registered (its identity for put and get).
    pub addr: usize,
    pub len: usize,
    /// An area owned by the safe API: its index among `Bsp`'s owned areas.
    pub owned: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Push(Slot),
    Pop(Slot),
    /// A pop of NULL while several registrations of NULL could be meant:
    /// `slot` is the one removed for now (the most recent), `candidates`
    /// every one that was in effect or pushed before it in this superstep
    /// and not removed by another pop than of NULL, most recent first.
    PopNull {
        slot: Slot,
        candidates: Vec<Slot>,
    },
}

impl Op {
    /// The value the digest mixes in for the operation.
    fn word(&self) -> u64 {
        match *self {
            Op::Push(_) => 1,
            Op::Pop(s) | Op::PopNull { slot: s, .. } => 2 << 32 | u64::from(s),
        }
    }
}

/// Choices of NULL pops tried at most before the sync calls the choice
/// ambiguous (k pops among n registrations of NULL: n!/(n-k)! choices).
const MAX_CHOICES: usize = 1 << 16;

/// FNV-1a over the operations' words.
fn digest_of(words: impl Iterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in words {
        for b in x.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Vec<(State, Area)>,
    free: Vec<Slot>,
    /// The slots registered at an address, oldest first.
    by_addr: HashMap<usize, Vec<Slot>>,
    /// This superstep's calls, in order.
    ops: Vec<Op>,
}

impl Registry {
    pub fn push(&mut self, area: Area) -> Slot {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (State::Pushed, area);
                s
            }
            None => {
                self.slots.push((State::Pushed, area));
                (self.slots.len() - 1) as Slot
            }
        };
        // Areas owned by the safe API are named by their handle, never by
        // address (empty ones may share one).
        if area.owned.is_none() {
            self.by_addr.entry(area.addr).or_default().push(slot);
        }
        self.ops.push(Op::Push(slot));
        slot
    }

    /// Marks the most recent registration of `addr` for removal at the next
    /// sync. Pushes and pops take effect there in the order they were made,
    /// so the most recent may be one pushed in this superstep: then it is
    /// never in effect.
    pub fn pop(&mut self, addr: usize) -> Result<Slot, Reason> {
        let slot = self.most_recent(addr, |s| matches!(s, State::Active | State::Pushed))?;
        if addr == 0 {
            // Registrations of NULL another NULL pop of this superstep
            // removed for now may be the ones the others meant there.
            let taken_for_now: Vec<Slot> = self
                .ops
                .iter()
                .filter_map(|op| match op {
                    Op::PopNull { slot, .. } => Some(*slot),
                    _ => None,
                })
                .collect();
            let stack = self.by_addr.get(&0).map(Vec::as_slice).unwrap_or(&[]);
            let candidates: Vec<Slot> = stack
                .iter()
                .rev()
                .copied()
                .filter(|s| {
                    matches!(self.slots[*s as usize].0, State::Active | State::Pushed) || taken_for_now.contains(s)
                })
                .collect();
            if candidates.len() > 1 {
                self.mark(slot, true);
                self.ops.push(Op::PopNull { slot, candidates });
                return Ok(slot);
            }
        }
        self.mark_popped(slot);
        Ok(slot)
    }

    /// Marks registration `slot` for removal at the next sync.
    pub fn pop_slot(&mut self, slot: Slot) -> Result<(), Reason> {
        match self.slots.get(slot as usize) {
            Some((State::Active | State::Pushed, _)) => {
                self.mark_popped(slot);
                Ok(())
            }
            Some((_, area)) => Err(Reason::NotRegistered { addr: area.addr, pending: false }),
            None => Err(Reason::NotRegistered { addr: 0, pending: false }),
        }
    }

    fn mark_popped(&mut self, slot: Slot) {
        self.mark(slot, true);
        self.ops.push(Op::Pop(slot));
    }

    /// Marks `slot` popped in this superstep, or (`popped` false) takes
    /// the mark back.
    fn mark(&mut self, slot: Slot, popped: bool) {
        let state = &mut self.slots[slot as usize].0;
        *state = match (*state, popped) {
            (State::Pushed, true) => State::PushedPopped,
            (State::Active, true) => State::Popped,
            (State::PushedPopped, false) => State::Pushed,
            (State::Popped, false) => State::Active,
            (other, _) => other,
        };
    }

    /// Whether a pop of NULL in this superstep could mean several
    /// registrations: the process then takes the others' choice at the sync.
    pub fn undecided(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::PopNull { .. }))
    }

    /// After the barrier: gives the undecided pops of NULL the registrations
    /// that make this superstep's sequence's digest `target` (the other
    /// processes'). Returns false where no choice does (the processes
    /// differ), or where too many choices would have to be tried.
    pub fn settle(&mut self, target: u64) -> bool {
        let nulls: Vec<usize> = (0..self.ops.len()).filter(|&i| matches!(self.ops[i], Op::PopNull { .. })).collect();
        let mut words: Vec<u64> = self.ops.iter().map(Op::word).collect();
        let mut chosen: Vec<Slot> = Vec::with_capacity(nulls.len());
        let mut tried = 0;
        if !self.choose(&nulls, &mut words, &mut chosen, target, &mut tried) {
            return false;
        }
        // Take back the marks made for now, then make the chosen ones.
        for &i in &nulls {
            if let Op::PopNull { slot, .. } = self.ops[i] {
                self.mark(slot, false);
            }
        }
        for (&i, &new) in nulls.iter().zip(&chosen) {
            if let Op::PopNull { slot, .. } = &mut self.ops[i] {
                *slot = new;
            }
            self.mark(new, true);
        }
        true
    }

    /// Depth-first over the choices of the NULL pops at `nulls[chosen.len()..]`.
    fn choose(
        &self,
        nulls: &[usize],
        words: &mut [u64],
        chosen: &mut Vec<Slot>,
        target: u64,
        tried: &mut usize,
    ) -> bool {
        let Some(&i) = nulls.get(chosen.len()) else {
            *tried += 1;
            return digest_of(words.iter().copied()) == target;
        };
        let Op::PopNull { candidates, .. } = &self.ops[i] else { unreachable!("nulls index NULL pops") };
        for &c in candidates {
            if chosen.contains(&c) || *tried >= MAX_CHOICES {
                continue;
            }
            words[i] = 2 << 32 | u64::from(c);
            chosen.push(c);
            if self.choose(nulls, words, chosen, target, tried) {
                return true;
            }
            chosen.pop();
        }
        false
    }

    /// The registration a put or get at `addr` names.
    pub fn resolve(&self, addr: usize) -> Result<Slot, Reason> {
        self.most_recent(addr, |s| matches!(s, State::Active | State::Popped))
    }

    fn most_recent(&self, addr: usize, usable: impl Fn(State) -> bool) -> Result<Slot, Reason> {
        let stack = self.by_addr.get(&addr).map(Vec::as_slice).unwrap_or(&[]);
        match stack.iter().rev().find(|&&s| usable(self.slots[s as usize].0)) {
            Some(&s) => Ok(s),
            None => {
                let pending = stack.iter().any(|&s| self.slots[s as usize].0 == State::Pushed);
                Err(Reason::NotRegistered { addr, pending })
            }
        }
    }

    /// The area of a registration in effect in this superstep.
    pub fn area(&self, slot: Slot) -> Option<Area> {
        match self.slots.get(slot as usize) {
            Some(&(State::Active | State::Popped, area)) => Some(area),
            _ => None,
        }
    }

    /// A digest of this superstep's calls, and how many pushes and pops.
    /// A pop also names its slot, so popping different registrations is a
    /// difference too.
    pub fn digest(&self) -> (u64, u32, u32) {
        let pushes = self.ops.iter().filter(|op| matches!(op, Op::Push(_))).count() as u32;
        (digest_of(self.ops.iter().map(Op::word)), pushes, self.ops.len() as u32 - pushes)
    }

    /// The sync: this superstep's pops and pushes take effect. Returns the
    /// owned areas that are no longer registered.
    pub fn apply(&mut self) -> Vec<usize> {
        let mut released = Vec::new();
        for op in std::mem::take(&mut self.ops) {
            match op {
                Op::Push(s) => self.slots[s as usize].0 = State::Active,
                Op::Pop(s) | Op::PopNull { slot: s, .. } => {
                    let (state, area) = &mut self.slots[s as usize];
                    *state = State::Free;
                    if let Some(stack) = self.by_addr.get_mut(&area.addr) {
                        stack.retain(|&x| x != s);
                        if stack.is_empty() {
                            self.by_addr.remove(&area.addr);
                        }
                    }
                    released.extend(area.owned);
                    self.free.push(s);
                }
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(addr: usize, len: usize) -> Area {
        Area { addr, len, owned: None }
    }

    #[test]
    fn registration_takes_effect_at_the_sync_and_the_most_recent_wins() {
        let mut r = Registry::default();
        let a = r.push(area(100, 8));
        assert_eq!(r.resolve(100), Err(Reason::NotRegistered { addr: 100, pending: true }));
        r.apply();
        assert_eq!(r.resolve(100), Ok(a));
        let b = r.push(area(100, 16));
        assert_eq!(r.resolve(100), Ok(a));
        r.apply();
        assert_eq!(r.resolve(100), Ok(b));
        assert_eq!(r.area(b).unwrap().len, 16);
        // Popping removes the most recent; it stays usable until the sync.
        assert_eq!(r.pop(100), Ok(b));
        assert_eq!(r.resolve(100), Ok(b));
        r.apply();
        assert_eq!(r.resolve(100), Ok(a));
        assert_eq!(r.pop(100), Ok(a));
        assert_eq!(r.pop(100), Err(Reason::NotRegistered { addr: 100, pending: false }));
    }

    #[test]
    fn a_pop_may_name_a_push_of_the_same_superstep() {
        let mut r = Registry::default();
        let old = r.push(area(100, 8));
        r.apply();
        // Pushes and pops take effect at the sync in the order they were
        // made: the new registration of 100 is the most recent, and the pop
        // removes it before it is ever in effect.
        let new = r.push(area(100, 16));
        let other = r.push(area(200, 4));
        assert_eq!(r.pop(100), Ok(new));
        assert_eq!(r.resolve(100), Ok(old), "still the old one in this superstep");
        r.apply();
        assert_eq!(r.resolve(100), Ok(old));
        assert_eq!(r.area(old).unwrap().len, 8);
        assert_eq!(r.resolve(200), Ok(other));
        // A push and its pop alone leave nothing behind.
        let gone = r.push(area(300, 4));
        assert_eq!(r.pop(300), Ok(gone));
        assert_eq!(r.pop(300), Err(Reason::NotRegistered { addr: 300, pending: false }));
        r.apply();
        assert_eq!(r.resolve(300), Err(Reason::NotRegistered { addr: 300, pending: false }));
        assert_eq!(r.pop_slot(gone), Err(Reason::NotRegistered { addr: 300, pending: false }));
    }

    #[test]
    fn a_pop_of_null_takes_the_registration_the_others_popped() {
        // Process 0 registers 100 and 200; process 1 NULL for both.
        let (mut zero, mut one) = (Registry::default(), Registry::default());
        let (a, b) = (zero.push(area(100, 4)), zero.push(area(200, 4)));
        assert_eq!((one.push(area(0, 0)), one.push(area(0, 0))), (a, b));
        zero.apply();
        one.apply();
        // Process 0 pops the older; process 1's NULL could be either.
        assert_eq!(zero.pop(100), Ok(a));
        assert_eq!(one.pop(0), Ok(b), "the most recent, for now");
        assert!(one.undecided() && !zero.undecided());
        assert_ne!(one.digest(), zero.digest());
        assert!(one.settle(zero.digest().0));
        assert_eq!(one.digest(), zero.digest());
        // Its marks follow the choice: b stays, a goes at the sync.
        assert_eq!(one.resolve(0), Ok(b));
        one.apply();
        zero.apply();
        assert_eq!(one.pop(0), Ok(b), "one registration of NULL left: a plain pop");
        assert!(!one.undecided());
        // Both free lists give the next push the same slot.
        zero.pop(200).unwrap();
        one.apply();
        zero.apply();
        assert_eq!(one.push(area(7, 1)), zero.push(area(8, 1)));
    }

    #[test]
    fn several_pops_of_null_take_distinct_registrations() {
        let (mut zero, mut one) = (Registry::default(), Registry::default());
        for addr in [100, 200, 300] {
            zero.push(area(addr, 4));
            one.push(area(0, 0));
        }
        zero.apply();
        one.apply();
        // Process 0 pops 100 and 300; process 1 pops NULL twice.
        zero.pop(100).unwrap();
        zero.pop(300).unwrap();
        one.pop(0).unwrap();
        one.pop(0).unwrap();
        assert!(one.settle(zero.digest().0));
        assert_eq!(one.digest(), zero.digest());
        one.apply();
        assert_eq!(one.pop(0), Ok(1), "the registration process 0 kept (200)");
        // No choice matches a sequence with another number of pops.
        let mut two = Registry::default();
        two.push(area(0, 0));
        two.push(area(0, 0));
        two.apply();
        two.pop(0).unwrap();
        assert!(!two.settle(zero.digest().0));
    }

    #[test]
    fn same_calls_give_same_slots_and_digests() {
        let run = |addrs: &[usize]| {
            let mut r = Registry::default();
            let mut slots = vec![];
            for &a in addrs {
                slots.push(r.push(area(a, 4)));
            }
            let mut digests = vec![r.digest()];
            r.apply();
            r.pop(addrs[0]).unwrap();
            digests.push(r.digest());
            r.apply();
            slots.push(r.push(area(7, 1)));
            (slots, digests)
        };
        // Addresses differ between processes; slots and digests do not.
        assert_eq!(run(&[10, 20, 30]), run(&[11, 21, 31]));
        assert_ne!(run(&[10, 20, 30]).1[0], run(&[10, 20]).1[0]);
    }
}
