//! Warp rate control of a job's senders (seed 003 §3, `proto::rate`), from
//! the job's settings:
//!
//! - `BULKWIRE_RATE_CONTROL=warp`: every process paces what it sends to
//!   each peer under Warp; `off` (the default) sends as fast as the buffers
//!   allow. A program can also put single peers under control at run time
//!   ([`crate::Runtime::set_rate_control`]).
//! - `BULKWIRE_WARP_CAPACITY`: the capacity of the bottleneck the senders
//!   share (a receiver's port, a rate-limited link), as tc writes rates:
//!   `100mbit`, `1gbit`, `500kbit`, or bits per second. Unset: the speed
//!   the kernel reports for the job's interface, or 1 Gbit/s where it
//!   reports none (loopback, most virtual interfaces). Warp only slows
//!   senders down, so they start at this capacity and never exceed it: a
//!   capacity far above the real bottleneck leaves the first feedbacks to
//!   bring them down, one far below it wastes the link.
//! - `BULKWIRE_WARP_LOOP_US`: the loop delay τ that sets Warp's gain (a
//!   round trip under load plus a feedback interval); default 4 ms.

use std::time::Duration;

use bulkwire_proto::RateControl;

pub const RATE_CONTROL: &str = "BULKWIRE_RATE_CONTROL";
pub const CAPACITY: &str = "BULKWIRE_WARP_CAPACITY";
pub const LOOP: &str = "BULKWIRE_WARP_LOOP_US";

/// The capacity assumed where neither the setting nor the interface gives one.
pub const DEFAULT_CAPACITY_BITS: f64 = 1e9;

/// Parses a link rate in bits per second: a number with an optional
/// `kbit`, `mbit` or `gbit` suffix (as tc(8) writes them), e.g. `100mbit`.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim().to_ascii_lowercase();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (&t[..], ""),
    };
    let scale = match unit {
        "" | "bit" => 1e0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        other => return Err(format!("{text:?}: unknown unit {other:?} (bit, kbit, mbit or gbit)")),
    };
    let value: f64 = number.trim().parse().map_err(|_| format!("{text:?}: not a rate (for example 100mbit)"))?;
    let rate = value * scale;
    if !rate.is_finite() || rate < 1e3 {
        return Err(format!("{text:?}: a link rate of at least 1kbit is needed"));
    }
    Ok(rate)
}

/// What the job's settings ask for, from `lookup` (the environment, or a
/// map in tests). `interface_bits`: the speed of the job's interface, bits
/// per second, where the kernel says.
pub fn from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
    interface_bits: Option<f64>,
) -> Result<Option<RateControl>, String> {
    match lookup(RATE_CONTROL).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "off" | "none") => Ok(None),
        Some("warp") => Ok(Some(control(&lookup, interface_bits)?)),
        Some(other) => Err(format!("{RATE_CONTROL}={other:?}: expected warp or off")),
    }
}

/// The job's Warp parameters, whether or not it turns Warp on: what
/// [`crate::Runtime::set_rate_control`] uses for single peers.
pub fn control(lookup: &impl Fn(&str) -> Option<String>, interface_bits: Option<f64>) -> Result<RateControl, String> {
    let bits = match lookup(CAPACITY) {
        Some(v) => parse_rate(&v).map_err(|e| format!("{CAPACITY}: {e}"))?,
        None => interface_bits.unwrap_or(DEFAULT_CAPACITY_BITS),
    };
    let mut control = RateControl::with_capacity(bits / 8.0);
    if let Some(v) = lookup(LOOP) {
        match v.trim().parse::<u64>() {
            Ok(us) if us > 0 => control.loop_delay = Duration::from_micros(us),
            _ => return Err(format!("{LOOP}={v:?}: expected a positive whole number of microseconds")),
        }
    }
    Ok(control)
}

/// A line for people: what the job's senders do.
pub fn describe(control: Option<&RateControl>) -> String {
    match control {
        None => "rate control off: senders go as fast as their buffers allow".into(),
        Some(c) => format!(
            "Warp rate control: each sender paced from at most {:.1} Mbit/s (the shared bottleneck's capacity), \
             slowed by the warp its receivers return every {:?}, loop delay {:?}",
            c.capacity * 8.0 / 1e6,
            c.feedback_interval,
            c.loop_delay
        ),
    }
}

/// The speed the kernel reports for interface `name`, bits per second
/// (`/sys/class/net/NAME/speed`, in Mbit/s; virtual interfaces report
/// nothing or -1).
pub fn interface_speed(name: &str) -> Option<f64> {
    let mbit: i64 = std::fs::read_to_string(format!("/sys/class/net/{name}/speed")).ok()?.trim().parse().ok()?;
    (mbit > 0).then_some(mbit as f64 * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)], interface: Option<f64>) -> Result<Option<RateControl>, String> {
        from_lookup(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()), interface)
    }

    #[test]
    fn off_unless_asked_and_the_capacity_from_setting_interface_or_default() {
        assert_eq!(read(&[], Some(1e8)), Ok(None));
        assert_eq!(read(&[(RATE_CONTROL, "off")], None), Ok(None));
        let c = read(&[(RATE_CONTROL, "Warp")], None).unwrap().unwrap();
        assert_eq!(c.capacity, DEFAULT_CAPACITY_BITS / 8.0);
        let c = read(&[(RATE_CONTROL, "warp")], Some(1e8)).unwrap().unwrap();
        assert_eq!(c.capacity, 1e8 / 8.0, "the interface's speed");
        let c = read(&[(RATE_CONTROL, "warp"), (CAPACITY, "20mbit"), (LOOP, "2000")], Some(1e8)).unwrap().unwrap();
        assert_eq!((c.capacity, c.loop_delay), (20e6 / 8.0, Duration::from_millis(2)), "the setting wins");
        assert!(read(&[(RATE_CONTROL, "tcp")], None).unwrap_err().contains("expected warp or off"));
        assert!(read(&[(RATE_CONTROL, "warp"), (CAPACITY, "lots")], None).unwrap_err().contains(CAPACITY));
        assert!(read(&[(RATE_CONTROL, "warp"), (LOOP, "0")], None).unwrap_err().contains(LOOP));
    }
}
