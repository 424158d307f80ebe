//! Who this process is, from the environment.

use std::net::SocketAddr;

use bulkwire_wire::JobKey;

/// Variables `bulkwire run` sets for every process of a job.
pub const RANK: &str = "BULKWIRE_RANK";
pub const SIZE: &str = "BULKWIRE_SIZE";
pub const JOB: &str = "BULKWIRE_JOB";
pub const KEY: &str = "BULKWIRE_KEY";
pub const RENDEZVOUS: &str = "BULKWIRE_RENDEZVOUS";
/// Processes of the job on this machine (to decide whether spinning pays).
/// The cores the job's processes on this host share (see [`host_cores`]).
pub const CORES: &str = "BULKWIRE_CORES";
pub const LOCAL_SIZE: &str = "BULKWIRE_LOCAL_SIZE";

/// Rank and size variables of the engines clusters already have, in the
/// order they are tried after bulkwire's own.
const ENGINES: [(&str, &str, &str); 4] = [
    ("SLURM", "SLURM_PROCID", "SLURM_NTASKS"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MPICH", "PMI_RANK", "PMI_SIZE"),
    ("MPICH (Hydra)", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
];

#[derive(Clone, Debug)]
pub struct JobEnv {
    pub rank: u32,
    pub size: u32,
    pub job: u64,
    pub key: JobKey,
    pub rendezvous: SocketAddr,
    pub local_size: u32,
    /// Which engine gave rank and size.
    pub engine: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum JobEnvError {
    #[error("not started by `bulkwire run`: {0} is not set (start the program with `bulkwire run -n N prog`)")]
    Missing(&'static str),
    #[error("{name}={value:?} is not valid: {why}")]
    Invalid { name: &'static str, value: String, why: &'static str },
}

impl JobEnv {
    pub fn from_env() -> Result<JobEnv, JobEnvError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the job from `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<JobEnv, JobEnvError> {
        let get = |name: &'static str| lookup(name).ok_or(JobEnvError::Missing(name));
        let parse_u32 = |name: &'static str, value: String| {
            value.trim().parse::<u32>().map_err(|_| JobEnvError::Invalid { name, value, why: "not a number" })
        };
        let (engine, rank, size) = match (lookup(RANK), lookup(SIZE)) {
            (Some(r), Some(s)) => ("bulkwire", parse_u32(RANK, r)?, parse_u32(SIZE, s)?),
            _ => {
                let found = ENGINES.iter().find_map(|&(engine, r, s)| Some((engine, r, s, lookup(r)?, lookup(s)?)));
                let Some((engine, r, s, rv, sv)) = found else { return Err(JobEnvError::Missing(RANK)) };
                (engine, parse_u32(r, rv)?, parse_u32(s, sv)?)
            }
        };
        if size == 0 || rank >= size {
            return Err(JobEnvError::Invalid { name: RANK, value: rank.to_string(), why: "rank must be below size" });
        }
        let job_text = get(JOB)?;
        let job = u64::from_str_radix(job_text.trim(), 16).map_err(|_| JobEnvError::Invalid {
            name: JOB,
            value: job_text,
            why: "not a hexadecimal job id",
        })?;
        let key_text = get(KEY)?;
        let key = JobKey::from_hex(&key_text).ok_or(JobEnvError::Invalid {
            name: KEY,
            value: "(hidden)".into(),
            why: "not 64 hexadecimal digits",
        })?;
        let rv_text = get(RENDEZVOUS)?;
        let rendezvous = rv_text.trim().parse().map_err(|_| JobEnvError::Invalid {
            name: RENDEZVOUS,
            value: rv_text,
            why: "not an address:port",
        })?;
        let local_size = match lookup(LOCAL_SIZE) {
            Some(v) => parse_u32(LOCAL_SIZE, v)?,
            None => size,
        };
        Ok(JobEnv { rank, size, job, key, rendezvous, local_size, engine })
    }
}

/// A switch from the environment variable `name`: `1` or `on`, `0` or
/// `off`; absent or empty, `default`; anything else an error that says so.
pub(crate) fn switch(name: &str, value: Option<&str>, default: bool) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(default),
        Some("1" | "on") => Ok(true),
        Some("0" | "off") => Ok(false),
        Some(other) => Err(format!("{name}={other:?}: 1 or on, 0 or off")),
    }
}

/// The cores the job's processes on this host share: `BULKWIRE_CORES`,
/// which the launcher sets (a rank bound to one core sees only that one
/// itself), else those this process may run on.
pub fn host_cores() -> u32 {
    std::env::var(CORES)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &u32| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) as u32)
}

/// The cores of the machine the kernel runs on (online, whatever this
/// process's affinity): what the job's processes on this kernel share.
pub fn kernel_cores() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).ok().filter(|&n| n > 0).unwrap_or_else(host_cores)
}

/// The running kernel's boot id (empty where it cannot be read): processes
/// with the same one run on one machine, whatever namespaces they are in.
pub fn kernel_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A fresh random job key.
pub fn new_key() -> JobKey {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    JobKey::new(bytes)
}

/// A fresh random job id.
pub fn new_job_id() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_is_on_off_or_its_default_and_nothing_else() {
        assert_eq!(switch("X", None, true), Ok(true));
        assert_eq!(switch("X", Some(" "), false), Ok(false));
        assert_eq!(switch("X", Some("on"), false), Ok(true));
        assert_eq!(switch("X", Some(" 1"), false), Ok(true));
        assert_eq!(switch("X", Some("off"), true), Ok(false));
        assert_eq!(switch("X", Some("0"), true), Ok(false));
        assert_eq!(switch("X", Some("yes"), true), Err("X=\"yes\": 1 or on, 0 or off".to_string()));
    }
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    const COMMON: [(&str, &str); 3] = [
        (JOB, "ab12"),
        (KEY, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
        (RENDEZVOUS, "127.0.0.1:4000"),
    ];

    #[test]
    fn reads_bulkwire_and_engine_variables() {
        let mut v = COMMON.to_vec();
        v.extend([(RANK, "2"), (SIZE, "4")]);
        let j = JobEnv::from_lookup(env(&v)).unwrap();
        assert_eq!((j.rank, j.size, j.job, j.engine), (2, 4, 0xab12, "bulkwire"));
        let mut v = COMMON.to_vec();
        v.extend([("SLURM_PROCID", "1"), ("SLURM_NTASKS", "3")]);
        assert_eq!(JobEnv::from_lookup(env(&v)).unwrap().engine, "SLURM");
        let mut v = COMMON.to_vec();
        v.extend([("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(JobEnv::from_lookup(env(&v)).unwrap().engine, "Open MPI");
    }

    #[test]
    fn clear_errors() {
        let e = JobEnv::from_lookup(env(&COMMON)).unwrap_err();
        assert!(e.to_string().contains("bulkwire run"), "{e}");
        let mut v = COMMON.to_vec();
        v.extend([(RANK, "4"), (SIZE, "4")]);
        assert!(JobEnv::from_lookup(env(&v)).unwrap_err().to_string().contains("below size"));
        let mut v = vec![(RANK, "0"), (SIZE, "1"), (JOB, "1"), (KEY, "short"), (RENDEZVOUS, "x")];
        let e = JobEnv::from_lookup(env(&v)).unwrap_err().to_string();
        assert!(e.contains("BULKWIRE_KEY") && !e.contains("short"), "the key is never printed: {e}");
        v[3] = (KEY, COMMON[1].1);
        assert!(JobEnv::from_lookup(env(&v)).unwrap_err().to_string().contains("BULKWIRE_RENDEZVOUS"));
    }
}
