//! A history checker of the shared memory's semantics: given what every
//! process wrote (in the order it wrote) and what every replica applied
//! (in the order it applied, [`crate::Replica::record`]), after a fence
//! that ended the run, it checks that
//!
//! - every applied write was issued, by the writer it is applied as;
//! - PRAM: every replica applied every PRAM write of every writer, in the
//!   order issued;
//! - slow: every replica applied, of one writer's slow writes to one
//!   location, a subsequence in the order issued that ends with the last;
//! - coherent: every replica applied every coherent write, all in one
//!   order, numbered 0, 1, 2, … in it.
//!
//! Writes are told apart by their values, which must be unique and not 0
//! (`(writer << 40) | n` does). The simulator's tests (`tests/sim.rs`) and
//! the multi-process job tests use it.

use std::collections::{BTreeMap, HashMap};

use crate::replica::{Applied, Semantics};

/// One write as its program issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    pub seg: u32,
    pub index: u64,
    pub bits: u64,
    pub semantics: Semantics,
}

/// Checks the run; `issued[w]` is writer `w`'s writes in order, `logs[r]`
/// replica `r`'s applied writes in order. The error names the replica,
/// the writer and what went wrong.
pub fn check(issued: &[Vec<Issued>], logs: &[Vec<Applied>]) -> Result<(), String> {
    let kind: HashMap<u64, (usize, Semantics)> = issued
        .iter()
        .enumerate()
        .flat_map(|(w, writes)| writes.iter().map(move |i| (i.bits, (w, i.semantics))))
        .collect();
    let mut first_coherent: Option<Vec<u64>> = None;
    for (r, log) in logs.iter().enumerate() {
        for a in log {
            match kind.get(&a.entry.bits) {
                Some(&(w, _)) if w as u32 == a.writer => {}
                Some(&(w, _)) => {
                    return Err(format!(
                        "replica {r} applied rank {w}'s write {:#x} as rank {}'s",
                        a.entry.bits, a.writer
                    ))
                }
                None => return Err(format!("replica {r} applied {:#x}, which nobody wrote", a.entry.bits)),
            }
        }
        for (w, writes) in issued.iter().enumerate() {
            let from_w = || log.iter().filter(move |a| a.writer as usize == w);
            let pram: Vec<u64> =
                from_w().filter(|a| kind[&a.entry.bits].1 == Semantics::Pram).map(|a| a.entry.bits).collect();
            let wanted: Vec<u64> = writes.iter().filter(|i| i.semantics == Semantics::Pram).map(|i| i.bits).collect();
            if pram != wanted {
                let at = pram.iter().zip(&wanted).position(|(a, b)| a != b).unwrap_or(pram.len().min(wanted.len()));
                return Err(format!(
                    "replica {r} applied rank {w}'s PRAM writes otherwise: {} of {} alike in order, then {:?} where {:?} was due",
                    at,
                    wanted.len(),
                    pram.get(at),
                    wanted.get(at)
                ));
            }
            let mut slow: BTreeMap<(u32, u64), Vec<u64>> = BTreeMap::new();
            for i in writes.iter().filter(|i| i.semantics == Semantics::Slow) {
                slow.entry((i.seg, i.index)).or_default().push(i.bits);
            }
            for (&(seg, index), wrote) in &slow {
                let got: Vec<u64> = from_w()
                    .filter(|a| {
                        kind[&a.entry.bits].1 == Semantics::Slow && (a.entry.seg, a.entry.index) == (seg, index)
                    })
                    .map(|a| a.entry.bits)
                    .collect();
                let order: HashMap<u64, usize> = wrote.iter().enumerate().map(|(k, &b)| (b, k)).collect();
                if !got.windows(2).all(|p| order[&p[0]] < order[&p[1]]) || got.last() != wrote.last() {
                    return Err(format!(
                        "replica {r} applied rank {w}'s slow writes to {seg}[{index}] as {got:x?}, issued {wrote:x?}"
                    ));
                }
            }
        }
        let globals: Vec<u64> = log.iter().filter_map(|a| a.global).collect();
        if let Some(bad) = globals.iter().enumerate().find(|(i, &g)| g != *i as u64) {
            return Err(format!("replica {r} applied coherent write {} in place {}", bad.1, bad.0));
        }
        let order: Vec<u64> = log.iter().filter(|a| a.global.is_some()).map(|a| a.entry.bits).collect();
        match &first_coherent {
            None => first_coherent = Some(order),
            Some(first) if *first != order => {
                return Err(format!("replicas 0 and {r} applied the coherent writes in different orders"))
            }
            Some(_) => {}
        }
    }
    let all = issued.iter().flatten().filter(|i| i.semantics == Semantics::Coherent).count();
    let applied = first_coherent.map_or(0, |o| o.len());
    if applied != all && !logs.is_empty() {
        return Err(format!("the replicas applied {applied} of {all} coherent writes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Entry;

    fn w(bits: u64, semantics: Semantics, index: u64) -> Issued {
        Issued { seg: 0, index, bits, semantics }
    }

    fn a(writer: u32, bits: u64, index: u64, global: Option<u64>) -> Applied {
        Applied { writer, entry: Entry { seg: 0, index, bits }, global }
    }

    #[test]
    fn it_accepts_a_good_run_and_names_what_breaks_each_rule() {
        let issued = vec![vec![
            w(1, Semantics::Pram, 0),
            w(2, Semantics::Slow, 1),
            w(3, Semantics::Slow, 1),
            w(4, Semantics::Pram, 2),
            w(5, Semantics::Coherent, 3),
        ]];
        let good = vec![a(0, 1, 0, None), a(0, 3, 1, None), a(0, 4, 2, None), a(0, 5, 3, Some(0))];
        assert_eq!(check(&issued, &[good.clone(), good.clone()]), Ok(()));
        let swapped = vec![a(0, 4, 2, None), a(0, 1, 0, None), a(0, 3, 1, None), a(0, 5, 3, Some(0))];
        assert!(check(&issued, &[good.clone(), swapped]).unwrap_err().contains("PRAM writes otherwise"));
        let stale = vec![a(0, 1, 0, None), a(0, 3, 1, None), a(0, 2, 1, None), a(0, 4, 2, None), a(0, 5, 3, Some(0))];
        assert!(check(&issued, &[stale]).unwrap_err().contains("slow writes to 0[1]"));
        let missing = vec![a(0, 1, 0, None), a(0, 3, 1, None), a(0, 4, 2, None)];
        assert!(check(&issued, &[missing]).unwrap_err().contains("applied 0 of 1 coherent"));
        let forged = vec![a(1, 1, 0, None)];
        assert!(check(&issued, &[forged]).unwrap_err().contains("as rank 1's"));
    }
}
