//! Static voting (Gifford's weighted voting, seed 004 §4.2, Figure 10):
//! every process is a file server holding a replica of each of `--files`
//! files and issues `--requests` reads and writes of files chosen at random.
//! A request posts a vote request to the group; every other server answers
//! with its replica's version and value; a read takes the newest value of a
//! read quorum, a write needs a write quorum (r + w > N, w > N / 2) and
//! posts the new value to the group, which every replica applies if it is
//! newer. Requests start at random processes, so the broadcasts have no
//! common root: they are group posts, received like messages (what the
//! seed says MPI_Bcast could not do).
//!
//! Versions are (counter, writer's rank), so that concurrent writes of one
//! file are ordered without the seed's lock manager; a replica keeps the
//! newest it has seen.
//!
//!     bulkwire run -n 8 target/release/examples/voting [--p2p] [--requests 500] [--files 50] [--json]
//!
//! With `--p2p` the same program sends each vote request and each commit
//! to every other process point to point instead of posting it. At the end
//! every replica of every file must hold the same version and value, and
//! every read a process made must have seen its own earlier writes; the
//! program says so, or fails.

use std::collections::HashMap;

use bulkwire_comm::{Completion, Request, Source, Tag, World};
use bulkwire_groups::{Group, Groups, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOTE_REQUEST: i32 = 1;
const VOTE: i32 = 2;
const COMMIT: i32 = 3;
const DONE: i32 = 4;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A message: its sender, tag and bytes.
type Message = (u32, i32, Vec<u8>);

/// (counter, writer), compared in that order; (0, 0) is the initial value.
type Version = (u64, u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Replica {
    version: Version,
    value: u64,
}

struct Server<'a> {
    world: &'a World,
    group: Option<Group<'a>>,
    /// The receive always posted: votes (posts carry the rest), or in
    /// point-to-point mode every message.
    posted: Option<Request>,
    replicas: Vec<Replica>,
    done: usize,
    broadcasts: u64,
}

impl Server<'_> {
    /// Sends `data` with `tag` to every other process: one post, or a loop
    /// of sends.
    fn broadcast(&mut self, tag: i32, data: &[u8]) -> Result<()> {
        self.broadcasts += 1;
        match &self.group {
            Some(g) => g.post(tag, data)?,
            None => {
                for to in (0..self.world.size()).filter(|&r| r != self.world.rank()) {
                    self.world.send(to, tag, data)?;
                }
            }
        }
        Ok(())
    }

    /// The next message that came: a vote (if `votes`), a vote request, a
    /// commit or a process's end.
    fn poll(&mut self, votes: bool) -> Result<Option<Message>> {
        if let Some(g) = &self.group {
            if let Some(p) = g.try_recv(Source::Any, Tag::Any)? {
                return Ok(Some((p.from, p.tag, p.data)));
            }
            if !votes {
                return Ok(None);
            }
        }
        let tag = if self.group.is_some() { Tag::Is(VOTE) } else { Tag::Any };
        let world = self.world;
        let r = match &mut self.posted {
            Some(r) => r,
            None => self.posted.insert(world.irecv(Source::Any, tag)?),
        };
        if let Some(Completion::Received(s, d)) = world.test(r)? {
            self.posted = None;
            return Ok(Some((s.source, s.tag, d)));
        }
        Ok(None)
    }

    /// Answers a vote request, applies a commit, counts an end.
    fn serve(&mut self, from: u32, tag: i32, data: &[u8]) -> Result<()> {
        match tag {
            VOTE_REQUEST => {
                let (id, file) = (u64_at(data, 0), u32_at(data, 8) as usize);
                let r = self.replicas[file];
                let mut vote = id.to_le_bytes().to_vec();
                vote.extend_from_slice(&r.version.0.to_le_bytes());
                vote.extend_from_slice(&r.version.1.to_le_bytes());
                vote.extend_from_slice(&r.value.to_le_bytes());
                self.world.send(from, VOTE, &vote)?;
            }
            COMMIT => {
                let file = u32_at(data, 0) as usize;
                let version = (u64_at(data, 4), u32_at(data, 12));
                if version > self.replicas[file].version {
                    self.replicas[file] = Replica { version, value: u64_at(data, 16) };
                }
            }
            DONE => self.done += 1,
            other => return Err(format!("unexpected tag {other} from rank {from}").into()),
        }
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |name: &str, default: usize| -> usize {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map_or(default, |v| v.parse().expect(name))
    };
    let (p2p, json) = (args.iter().any(|a| a == "--p2p"), args.iter().any(|a| a == "--json"));
    let (requests, files) = (value_of("--requests", 500), value_of("--files", 50).max(1));
    let world = World::init()?;
    let groups = Groups::new(&world)?;
    let all = groups.world();
    let (me, n) = (world.rank(), world.size());
    let write_quorum = n as usize / 2 + 1;
    let read_quorum = n as usize + 1 - write_quorum;
    let mut server = Server {
        world: &world,
        group: (!p2p).then_some(all),
        posted: None,
        replicas: vec![Replica { version: (0, 0), value: 0 }; files],
        done: 0,
        broadcasts: 0,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1998 + me as u64);
    all.barrier()?;
    let start = world.wtime();
    let (mut reads, mut writes) = (0u64, 0u64);
    let mut own_writes: HashMap<usize, Version> = HashMap::new();
    for id in 0..requests as u64 {
        let file = rng.random_range(0..files);
        let write = rng.random_bool(0.3);
        let mut ask = id.to_le_bytes().to_vec();
        ask.extend_from_slice(&(file as u32).to_le_bytes());
        server.broadcast(VOTE_REQUEST, &ask)?;
        // This replica votes too; the others' votes come while this
        // process serves everyone else's requests. Late votes of earlier
        // requests are dropped by their number.
        let quorum = if write { write_quorum } else { read_quorum };
        let mut best = server.replicas[file];
        let mut votes = 1;
        while votes < quorum {
            match server.poll(true)? {
                Some((_, VOTE, v)) => {
                    if u64_at(&v, 0) == id {
                        votes += 1;
                        let version = (u64_at(&v, 8), u32_at(&v, 16));
                        if version > best.version {
                            best = Replica { version, value: u64_at(&v, 20) };
                        }
                    }
                }
                Some((from, tag, data)) => server.serve(from, tag, &data)?,
                None => std::thread::yield_now(),
            }
        }
        if let Some(&mine) = own_writes.get(&file) {
            if best.version < mine {
                world.abort(&format!("rank {me}: a read of file {file} missed this process's own write"));
            }
        }
        if write {
            let version = (best.version.0 + 1, me);
            let value = rng.random::<u64>();
            let mut commit = (file as u32).to_le_bytes().to_vec();
            commit.extend_from_slice(&version.0.to_le_bytes());
            commit.extend_from_slice(&version.1.to_le_bytes());
            commit.extend_from_slice(&value.to_le_bytes());
            server.broadcast(COMMIT, &commit)?;
            if version > server.replicas[file].version {
                server.replicas[file] = Replica { version, value };
            }
            own_writes.insert(file, version);
            writes += 1;
        } else {
            reads += 1;
        }
    }
    // A process's end comes after its last commit, from the same sender:
    // once every other process has ended, every commit has been applied.
    // Votes are no longer awaited (the others may finish first; a receive
    // for a vote would then fail, as nothing could match it).
    server.broadcast(DONE, &[])?;
    while server.done < n as usize - 1 {
        match server.poll(false)? {
            Some((_, VOTE, _)) => {}
            Some((from, tag, data)) => server.serve(from, tag, &data)?,
            None => std::thread::yield_now(),
        }
    }
    let seconds = world.wtime() - start;
    // Every replica of every file must agree.
    let mine: Vec<u64> = server.replicas.iter().flat_map(|r| [r.version.0, r.version.1 as u64, r.value]).collect();
    let mut all_replicas = vec![0u64; if me == 0 { mine.len() * n as usize } else { 0 }];
    all.gather(0, bytemuck::cast_slice(&mine), bytemuck::cast_slice_mut(&mut all_replicas))?;
    let mut totals = [reads, writes, server.broadcasts];
    all.reduce(0, &mut totals, Op::Sum)?;
    let mut slowest = [seconds];
    all.reduce(0, &mut slowest, Op::Max)?;
    if me == 0 {
        let agree = all_replicas.chunks(mine.len()).all(|c| c == mine.as_slice());
        if !agree {
            world.abort("the replicas disagree at the end");
        }
        let how = if p2p { "p2p" } else { "groups" };
        if json {
            println!(
                "[{{\"bench\": \"voting\", \"source\": \"bulkwire\", \"what\": \"{how}\", \"procs\": {n}, \
                 \"requests_count\": {}, \"reads_count\": {}, \"writes_count\": {}, \"broadcasts_count\": {}, \
                 \"files_count\": {files}, \"seconds\": {:.4}, \"replicas_agree\": {agree}}}]",
                totals[0] + totals[1],
                totals[0],
                totals[1],
                totals[2],
                slowest[0]
            );
        } else {
            println!(
                "static voting ({how}): {n} servers, {} requests ({} reads, {} writes) on {files} files in {:.3} s; \
                 quorums r={read_quorum} w={write_quorum}; {} broadcasts; every replica agrees",
                totals[0] + totals[1],
                totals[0],
                totals[1],
                slowest[0],
                totals[2]
            );
        }
    }
    world.finalize()?;
    Ok(())
}
