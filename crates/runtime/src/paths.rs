//! Which path class carries a job's data (seed 000's three services), from
//! the job's settings:
//!
//! - `BULKWIRE_PATHS=ordinary`: data on the best-effort path;
//! - `premium`: all data on the premium path (DSCP EF, `SO_PRIORITY`);
//! - `adaptive`: the Latency Monitoring Engine probes the ordinary path of
//!   every pair and the ECE moves a pair's data to the premium path while
//!   its one-way latency is high (`proto::ece`).
//!
//! Unset, a job is adaptive where the premium path is distinct: its
//! sockets leave the host (on loopback both paths are the same memory
//! copy) and carry a DSCP other than 0. Elsewhere it is ordinary.
//!
//! Adaptive thresholds: each pair's TM and Tm follow its base latency,
//! taken as the least of its first [`CALIBRATION_SAMPLES`] latency samples
//! but at least [`LEAST_BASE`] (`LatencyConfig::from_base_latency`'s rule:
//! TM twice the base, Tm one and a half times). `BULKWIRE_LATENCY_HIGH_US` and `BULKWIRE_LATENCY_LOW_US`
//! set them instead (both, Tm below TM). Probes go every
//! `BULKWIRE_LATENCY_INTERVAL_MS` (default 10 ms), which is also the loss
//! threshold TL; clocks are resynchronised every ten intervals.
//!
//! A sample of the ordinary path is believed until the next one, as in the
//! paper, unless `BULKWIRE_LATENCY_LIFETIME_MS` says for how long
//! (`LatencyConfig::sample_lifetime`; `off` is the default): then, while a
//! pair's data is on the premium path, probes follow it that often, and
//! data after a longer silence starts on the premium path until the
//! receiver answers a probe. It is off by default because a premium class
//! is often slower than the ordinary one for a burst: on the test bed's
//! port (premium guaranteed a fifth of the rate) bursts of 20 KB after
//! 25 ms of silence sent three quarters of their datagrams on premium
//! before the answer came, and the ordinary ones overtook them.

use std::time::Duration;

use bulkwire_proto::{Config, LatencyConfig};

pub const PATHS: &str = "BULKWIRE_PATHS";
pub const HIGH: &str = "BULKWIRE_LATENCY_HIGH_US";
pub const LOW: &str = "BULKWIRE_LATENCY_LOW_US";
pub const INTERVAL: &str = "BULKWIRE_LATENCY_INTERVAL_MS";
pub const LIFETIME: &str = "BULKWIRE_LATENCY_LIFETIME_MS";

/// Samples from which each pair's base latency is taken.
pub const CALIBRATION_SAMPLES: u32 = 32;

/// The least base latency believed: below it, a process's wait for its
/// turn on a core would pass for congestion. On a 2-core host with both
/// ranks spinning and other work, one-way samples on an idle path reached
/// 100-300 us (a calibrated base of 50 us made the pair switch every few
/// milliseconds); a drop-tail queue of 64 full frames at 100 Mbit/s adds
/// 8 ms.
const LEAST_BASE: Duration = Duration::from_micros(250);

/// The job's choice of paths for data.
#[derive(Clone, Debug, PartialEq)]
pub enum Paths {
    Ordinary,
    Premium,
    Adaptive(LatencyConfig),
}

impl Paths {
    /// Reads the setting from `lookup` (the environment, or a map in tests);
    /// `distinct`: whether the premium path differs from the ordinary one.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, distinct: bool) -> Result<Paths, String> {
        let choice = lookup(PATHS).map(|v| v.trim().to_ascii_lowercase());
        let number = |name: &str| -> Result<Option<u64>, String> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(format!("{name}={v:?}: expected a positive whole number")),
                },
            }
        };
        let choice = match choice.as_deref() {
            None | Some("") if distinct => Some("adaptive".to_string()),
            _ => choice,
        };
        match choice.as_deref() {
            None | Some("" | "ordinary") => Ok(Paths::Ordinary),
            Some("premium") => Ok(Paths::Premium),
            Some("adaptive") => {
                let interval = Duration::from_millis(number(INTERVAL)?.unwrap_or(10));
                let mut cfg = LatencyConfig {
                    monitor_interval: interval,
                    loss_threshold: interval,
                    poll_interval: interval,
                    clock_sync_period: Some(interval * 10),
                    calibration_samples: CALIBRATION_SAMPLES,
                    least_base: LEAST_BASE,
                    sample_lifetime: None,
                    ..LatencyConfig::from_base_latency(LEAST_BASE)
                };
                match lookup(LIFETIME).map(|v| v.trim().to_ascii_lowercase()) {
                    None => {}
                    Some(v) if v == "off" => cfg.sample_lifetime = None,
                    Some(v) => match v.parse::<u64>() {
                        Ok(ms) if ms > 0 => cfg.sample_lifetime = Some(Duration::from_millis(ms)),
                        _ => return Err(format!("{LIFETIME}={v:?}: expected a positive whole number of ms, or off")),
                    },
                }
                match (number(HIGH)?, number(LOW)?) {
                    (None, None) => {}
                    (Some(high), Some(low)) if low < high => {
                        cfg.high_threshold = Duration::from_micros(high);
                        cfg.low_threshold = Duration::from_micros(low);
                        cfg.calibration_samples = 0;
                    }
                    (Some(_), Some(_)) => return Err(format!("{LOW} must be below {HIGH}")),
                    _ => return Err(format!("{HIGH} and {LOW} go together")),
                }
                Ok(Paths::Adaptive(cfg))
            }
            Some(other) => Err(format!("{PATHS}={other:?}: expected ordinary, premium or adaptive")),
        }
    }

    /// Configures an endpoint for this choice.
    pub fn apply(&self, config: &mut Config) {
        match self {
            Paths::Ordinary => {}
            Paths::Premium => config.premium_only = true,
            Paths::Adaptive(latency) => config.latency = Some(latency.clone()),
        }
    }

    /// A line for people: which paths the job's data takes.
    pub fn describe(&self) -> String {
        match self {
            Paths::Ordinary => "data on the ordinary path (best effort)".into(),
            Paths::Premium => "data on the premium path".into(),
            Paths::Adaptive(c) if c.calibration_samples > 0 => format!(
                "adaptive paths: data on the ordinary path while its one-way latency is low, on the premium path \
                 while it is high (TM and Tm from each pair's base latency, the least of its first {} samples; \
                 probes every {:?}{})",
                c.calibration_samples,
                c.monitor_interval,
                lifetime(c)
            ),
            Paths::Adaptive(c) => format!(
                "adaptive paths: data on the premium path while the ordinary path's one-way latency is above \
                 {:?}, back below {:?} (probes every {:?}{})",
                c.high_threshold,
                c.low_threshold,
                c.monitor_interval,
                lifetime(c)
            ),
        }
    }
}

/// How long a sample is believed, for [`Paths::describe`].
fn lifetime(c: &LatencyConfig) -> String {
    match c.sample_lifetime {
        Some(l) => format!(
            ", and every {l:?} while data is on the premium path; data after {l:?} of silence starts on the \
             premium path until a probe is answered"
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(vars: &[(&str, &str)]) -> Result<Paths, String> {
        Paths::from_lookup(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()), false)
    }

    #[test]
    fn unset_means_adaptive_where_the_premium_path_is_distinct() {
        let none = |_: &str| None;
        assert!(matches!(Paths::from_lookup(none, true), Ok(Paths::Adaptive(_))));
        assert_eq!(Paths::from_lookup(none, false), Ok(Paths::Ordinary));
        let ordinary = |name: &str| (name == PATHS).then(|| "ordinary".to_string());
        assert_eq!(Paths::from_lookup(ordinary, true), Ok(Paths::Ordinary), "a choice wins");
    }

    #[test]
    fn the_setting_is_read_and_checked() {
        assert_eq!(paths(&[]), Ok(Paths::Ordinary));
        assert_eq!(paths(&[(PATHS, "Premium ")]), Ok(Paths::Premium));
        let Ok(Paths::Adaptive(c)) = paths(&[(PATHS, "adaptive")]) else { panic!("adaptive") };
        assert_eq!((c.calibration_samples, c.monitor_interval), (CALIBRATION_SAMPLES, Duration::from_millis(10)));
        assert!(c.validate().is_ok());
        let Ok(Paths::Adaptive(c)) = paths(&[(PATHS, "adaptive"), (HIGH, "500"), (LOW, "300"), (INTERVAL, "5")]) else {
            panic!("adaptive with thresholds")
        };
        assert_eq!((c.high_threshold, c.low_threshold), (Duration::from_micros(500), Duration::from_micros(300)));
        assert_eq!((c.calibration_samples, c.loss_threshold), (0, Duration::from_millis(5)));
        assert!(paths(&[(PATHS, "fast")]).unwrap_err().contains("ordinary, premium or adaptive"));
        assert!(paths(&[(PATHS, "adaptive"), (HIGH, "500")]).unwrap_err().contains("go together"));
        assert!(paths(&[(PATHS, "adaptive"), (HIGH, "300"), (LOW, "300")]).unwrap_err().contains("below"));
        assert!(paths(&[(PATHS, "adaptive"), (INTERVAL, "0")]).is_err());
    }

    #[test]
    fn samples_are_believed_until_the_next_unless_set() {
        let lifetime = |vars: &[(&str, &str)]| match paths(vars) {
            Ok(Paths::Adaptive(c)) => Ok(c.sample_lifetime),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(lifetime(&[(PATHS, "adaptive")]), Ok(None));
        assert_eq!(lifetime(&[(PATHS, "adaptive"), (LIFETIME, "7")]), Ok(Some(Duration::from_millis(7))));
        assert_eq!(lifetime(&[(PATHS, "adaptive"), (LIFETIME, " Off")]), Ok(None));
        for bad in ["0", "-1", "2.5", "soon"] {
            let e = lifetime(&[(PATHS, "adaptive"), (LIFETIME, bad)]).unwrap_err();
            assert!(e.contains(LIFETIME) && e.contains("or off"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_choice_configures_the_endpoint() {
        let config = || Config::new(1, bulkwire_wire::JobKey::new([1; 32]), 0, 2);
        let mut c = config();
        Paths::Premium.apply(&mut c);
        assert!(c.premium_only && c.latency.is_none() && c.validate().is_ok());
        let mut c = config();
        paths(&[(PATHS, "adaptive")]).unwrap().apply(&mut c);
        assert!(!c.premium_only && c.latency.is_some() && c.validate().is_ok());
    }
}
