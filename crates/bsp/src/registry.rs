//! Registrations: collective, matched across processes by order, in effect
//! from the next sync; the most recent registration of an address wins.
//!
//! Each registration gets a slot number when `push_reg` is called, from a
//! free list that every process walks in the same order. Processes that
//! make the same sequence of `push_reg` and `pop_reg` calls therefore give
//! the same registration the same slot, and a put names its target by slot.
//! The sequence itself is checked at the sync (its digest travels in the
//! barrier), so processes that differ learn it there.

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Push(Slot),
    Pop(Slot),
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
        let state = &mut self.slots[slot as usize].0;
        *state = if *state == State::Pushed { State::PushedPopped } else { State::Popped };
        self.ops.push(Op::Pop(slot));
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
    pub fn digest(&self) -> (u64, u32, u32) {
        // FNV-1a over the sequence; a pop also names its slot, so popping
        // different registrations is a difference too.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |x: u64| {
            for b in x.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        let (mut pushes, mut pops) = (0, 0);
        for op in &self.ops {
            match *op {
                Op::Push(_) => {
                    pushes += 1;
                    mix(1);
                }
                Op::Pop(s) => {
                    pops += 1;
                    mix(2 << 32 | u64::from(s));
                }
            }
        }
        (h, pushes, pops)
    }

    /// The sync: this superstep's pops and pushes take effect. Returns the
    /// owned areas that are no longer registered.
    pub fn apply(&mut self) -> Vec<usize> {
        let mut released = Vec::new();
        for op in std::mem::take(&mut self.ops) {
            match op {
                Op::Push(s) => self.slots[s as usize].0 = State::Active,
                Op::Pop(s) => {
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
