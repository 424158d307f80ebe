//! Typed errors: every one names the process, the call and the reason.

/// The BSPlib call an error comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    Begin,
    Init,
    End,
    Abort,
    Sync,
    PushReg,
    PopReg,
    Put,
    HpPut,
    Get,
    HpGet,
    SetTagsize,
    Send,
    Qsize,
    GetTag,
    Move,
    HpMove,
}

impl Call {
    /// The standard's name of the call.
    pub fn name(self) -> &'static str {
        match self {
            Call::Begin => "bsp_begin",
            Call::Init => "bsp_init",
            Call::End => "bsp_end",
            Call::Abort => "bsp_abort",
            Call::Sync => "bsp_sync",
            Call::PushReg => "bsp_push_reg",
            Call::PopReg => "bsp_pop_reg",
            Call::Put => "bsp_put",
            Call::HpPut => "bsp_hpput",
            Call::Get => "bsp_get",
            Call::HpGet => "bsp_hpget",
            Call::SetTagsize => "bsp_set_tagsize",
            Call::Send => "bsp_send",
            Call::Qsize => "bsp_qsize",
            Call::GetTag => "bsp_get_tag",
            Call::Move => "bsp_move",
            Call::HpMove => "bsp_hpmove",
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A misuse, or a failure of the job, seen by process `pid` in `call`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bsp: process {pid}: {call}: {reason}")]
pub struct BspError {
    pub pid: u32,
    pub call: Call,
    pub reason: Reason,
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("process {pid} does not exist (there are {nprocs} processes, 0 to {})", .nprocs - 1)]
    NoSuchProcess { pid: i64, nprocs: u32 },
    #[error("{what} is negative ({value})")]
    Negative { what: &'static str, value: i64 },
    #[error("{what} is too large ({value})")]
    TooLarge { what: &'static str, value: u64 },
    #[error("address {addr:#x} is not registered{}", if *.pending { " (its registration takes effect at the next bsp_sync)" } else { "" })]
    NotRegistered { addr: usize, pending: bool },
    #[error("{access} of {len} bytes at offset {offset} lies outside the {size} bytes process {owner} registered (registration #{slot})")]
    OutOfBounds { access: String, offset: u64, len: u64, size: usize, owner: u32, slot: u32 },
    #[error("registration #{slot} is not in effect on process {owner} (the processes' registrations differ)")]
    UnknownRegistration { slot: u32, owner: u32 },
    #[error("registrations differ between processes: {detail}")]
    RegistrationsDiffer { detail: String },
    #[error("tag sizes differ between processes: process {a} asks for {a_size} bytes, process {b} for {b_size}")]
    TagSizesDiffer { a: u32, a_size: u64, b: u32, b_size: u64 },
    #[error(
        "every process must call bsp_set_tagsize alike in a superstep: process {a} called it {a_calls} times, \
         process {b} {b_calls}"
    )]
    TagSizeCallsDiffer { a: u32, a_calls: u32, b: u32, b_calls: u32 },
    #[error("the tag has {len} bytes but the tag size is {tagsize}")]
    TagLength { len: usize, tagsize: usize },
    #[error("the message queue is empty")]
    EmptyQueue,
    #[error("process {ended} called bsp_end while process {synced} called bsp_sync: they disagree on the number of supersteps (this is superstep {superstep})")]
    SyncMismatch { ended: u32, synced: u32, superstep: u64 },
    #[error("process {peer} left the job while this process waited for it in superstep {superstep} ({phase})")]
    PeerGone { peer: u32, superstep: u64, phase: &'static str },
    #[error("process {peer} sent a malformed message: {why}")]
    Malformed { peer: u32, why: String },
    /// A put or a get's reply that process `peer` left in its memory (`what`).
    #[error("reading {what} of process {peer} from its memory: {why}")]
    DirectRead { peer: u32, what: &'static str, why: String },
    #[error("bsp_end was already called")]
    Ended,
    #[error("bsp_begin has not been called")]
    NotBegun,
    #[error("bsp_begin was already called")]
    AlreadyBegun,
    #[error("an earlier error stopped this process: {0}")]
    Failed(Box<BspError>),
    #[error("the registered area was registered with another element type")]
    WrongType,
    #[error("{0}")]
    Runtime(String),
    #[error("{0}")]
    Invalid(String),
}
