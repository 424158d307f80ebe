//! The rendezvous: processes of a job meet at the launcher, exchange
//! addresses, and keep the connection as a control channel (heartbeats,
//! failure reports, the order to stop).
//!
//! Messages are lines over TCP: 32 hexadecimal digits of MAC (the job key over
//! the JSON that follows), a space, a JSON object. A line with a bad MAC, or
//! of another job, ends the connection.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use bulkwire_wire::{JobKey, MAC_LEN};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::env::JobEnv;

/// Messages from a rank to the launcher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToLauncher {
    Hello {
        job: u64,
        rank: u32,
        size: u32,
        pid: u32,
        ordinary: SocketAddr,
        premium: SocketAddr,
        /// The largest datagram this rank's interface carries in one frame.
        #[serde(default)]
        max_datagram: usize,
        /// The boot id of the kernel the rank runs on (empty: unknown).
        /// Ranks on one kernel share its cores, whatever network namespace
        /// (host of a test bed, container) each is in.
        #[serde(default)]
        kernel: String,
        /// The wire format the rank's datagrams are in
        /// (`bulkwire_wire::VERSION`); 0 from a build before ranks said it.
        /// The launcher stops a job whose ranks differ: they would drop
        /// each other's every datagram.
        #[serde(default)]
        wire: u8,
    },
    Heartbeat,
    /// The rank stops the job: a peer is unreachable, or the program failed.
    Failed {
        reason: String,
    },
    /// The rank has finished cleanly.
    Finished,
    /// What the rank's traffic to each peer was, sent before `Finished`
    /// when the job asked for statistics (`BULKWIRE_STATS`).
    Stats {
        peers: Vec<PeerReport>,
    },
}

/// One rank's traffic to one peer over the job, by path (datagrams, whole
/// with header and MAC), and the latency engines' counters toward it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReport {
    pub peer: u32,
    pub ordinary_data_packets: u64,
    pub ordinary_data_bytes: u64,
    pub premium_data_packets: u64,
    pub premium_data_bytes: u64,
    /// Acknowledgements, prods and LSTATs (probes and clock exchanges are
    /// counted apart, below).
    pub ordinary_control_bytes: u64,
    pub premium_control_bytes: u64,
    pub retransmitted_packets: u64,
    pub explicit_acks: u64,
    pub prods: u64,
    pub lstats: u64,
    /// Switches of this rank's data toward the peer.
    pub switches_to_premium: u64,
    pub switches_to_ordinary: u64,
    pub probes_sent: u64,
    /// The peer's probes this rank saw lost.
    pub probes_lost: u64,
    /// Times this rank's data to the peer started on the premium path after
    /// a silence, until the peer answered a probe (adaptive paths with
    /// samples that age).
    #[serde(default)]
    pub confirmations: u64,
    pub clock_exchanges: u64,
    /// Feedback sent to the peer, bytes by kind.
    pub ack_bytes: u64,
    pub prod_bytes: u64,
    pub lstat_bytes: u64,
    pub probe_bytes: u64,
    pub clock_sync_bytes: u64,
    /// Warp rate control: feedback this rank returned to the peer (bytes),
    /// feedback it received from the peer, and datagrams to the peer that
    /// waited for the pacer.
    #[serde(default)]
    pub warp_bytes: u64,
    #[serde(default)]
    pub warp_feedback_received: u64,
    #[serde(default)]
    pub paced: u64,
    /// Through shared memory (a peer on this host): messages and their
    /// bytes, messages the peer read from this rank's memory (one copy),
    /// and wake-ups sent to the peer.
    #[serde(default)]
    pub shm_messages: u64,
    #[serde(default)]
    pub shm_bytes: u64,
    #[serde(default)]
    pub shm_single_copy: u64,
    #[serde(default)]
    pub shm_wakeups: u64,
    /// Bytes this rank copied from the peer's arena and from its stage,
    /// where they lay (BSP's puts and get replies on one host).
    #[serde(default)]
    pub shm_arena_read_bytes: u64,
    #[serde(default)]
    pub shm_stage_read_bytes: u64,
    /// Over UDP with segmentation offload: datagrams to the peer that left
    /// in segmented sends (GSO), and datagrams from the peer that came in
    /// coalesced reads (GRO).
    #[serde(default)]
    pub offload_sent: u64,
    #[serde(default)]
    pub offload_received: u64,
    /// Data datagrams from the peer read straight into the buffer of the
    /// message they continue.
    #[serde(default)]
    pub read_in_place: u64,
    /// Messages from the peer reassembled in the buffer of the receive
    /// that waited for them.
    #[serde(default)]
    pub placed: u64,
    /// Best-effort data from the peer (posts of groups in best-effort
    /// mode): packets that never came (lost, or came after a later one),
    /// and messages dropped for a piece missing.
    #[serde(default)]
    pub best_effort_lost: u64,
    #[serde(default)]
    pub best_effort_abandoned: u64,
}

/// Messages from the launcher to a rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRank {
    /// Everyone's addresses, by rank: `(ordinary, premium)`, and the
    /// largest datagram every rank's interface carries (0: no limit given).
    Table {
        job: u64,
        peers: Vec<(SocketAddr, SocketAddr)>,
        #[serde(default)]
        max_datagram: usize,
        /// By rank: how many ranks of the job run on its kernel (empty
        /// where the launcher does not say).
        #[serde(default)]
        kernels: Vec<u32>,
    },
    /// Stop now: another rank failed.
    Abort { reason: String },
    /// A rank has finished: nothing more will come from it.
    PeerFinished { rank: u32 },
    /// Every rank has finished: leave.
    Release,
}

/// Writes one authenticated message.
pub fn write_msg<T: Serialize>(w: &mut impl Write, key: &JobKey, msg: &T) -> io::Result<()> {
    let body = serde_json::to_string(msg).map_err(io::Error::other)?;
    let tag: String = key.tag(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let line = format!("{tag} {body}\n");
    w.write_all(line.as_bytes())?;
    w.flush()
}

/// Reads one authenticated message; `Ok(None)` at the end of the stream.
pub fn read_msg<T: DeserializeOwned>(r: &mut impl BufRead, key: &JobKey) -> io::Result<Option<T>> {
    let mut line = String::new();
    // Bound the line so a stranger cannot make us buffer without end.
    let n = r.by_ref().take(64 * 1024).read_line(&mut line)?;
    if n == 0 {
        return Ok(None);
    }
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("rendezvous: {why}"));
    let line = line.strip_suffix('\n').ok_or_else(|| invalid("line too long or cut short"))?;
    let (tag_hex, body) = line.split_once(' ').ok_or_else(|| invalid("malformed line"))?;
    let tag = decode_hex(tag_hex).ok_or_else(|| invalid("malformed MAC"))?;
    if tag.len() != MAC_LEN || !key.verify(body.as_bytes(), &tag) {
        return Err(invalid("bad MAC: not a member of this job"));
    }
    serde_json::from_str(body).map(Some).map_err(|e| invalid(&format!("malformed message: {e}")))
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// A rank's end of the control connection.
#[derive(Debug)]
pub struct Control {
    pub writer: TcpStream,
    pub reader: BufReader<TcpStream>,
    key: JobKey,
}

impl Control {
    /// Connects to the launcher; returns the local address the connection
    /// uses, which names the interface the job's sockets bind to.
    pub fn connect(env: &JobEnv) -> io::Result<(Control, IpAddr)> {
        let stream = TcpStream::connect_timeout(&env.rendezvous, Duration::from_secs(10)).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot reach the launcher's rendezvous at {}: {e}", env.rendezvous))
        })?;
        stream.set_nodelay(true)?;
        let ip = stream.local_addr()?.ip();
        let reader = BufReader::new(stream.try_clone()?);
        Ok((Control { writer: stream, reader, key: env.key.clone() }, ip))
    }

    pub fn send(&mut self, msg: &ToLauncher) -> io::Result<()> {
        write_msg(&mut self.writer, &self.key, msg)
    }

    pub fn recv(&mut self) -> io::Result<Option<ToRank>> {
        read_msg(&mut self.reader, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_forgeries_fail() {
        let key = JobKey::new([9; 32]);
        let mut buf = Vec::new();
        let msg = ToRank::Abort { reason: "rank 1 died".into() };
        write_msg(&mut buf, &key, &msg).unwrap();
        assert_eq!(read_msg::<ToRank>(&mut &buf[..], &key).unwrap(), Some(msg));
        assert!(read_msg::<ToRank>(&mut &buf[..], &JobKey::new([8; 32])).is_err());
        let mut forged = buf.clone();
        let n = forged.len();
        forged[n - 3] ^= 1;
        assert!(read_msg::<ToRank>(&mut &forged[..], &key).is_err());
        assert_eq!(read_msg::<ToRank>(&mut &b""[..], &key).unwrap(), None);
        assert!(read_msg::<ToRank>(&mut &b"zz {}\n"[..], &key).is_err());
    }
}
