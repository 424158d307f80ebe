//! The Warp experiments show what they are meant to show: warp tracks ρ while
//! the server stays busy, the rate settles inside the stability bound and
//! oscillates outside it, and the fairness term brings ten senders together.
//! Behaviour only, on the quick lengths.

use std::sync::OnceLock;

use bulkwire_proto::STABILITY_LIMIT;
use bulkwire_sim::warp::{run, Lengths, Report, Scenario, Service};

fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| Report::measure(1, Lengths::quick(), &mut |_| {}))
}

#[test]
fn warp_tracks_rho_while_the_server_is_busy() {
    let r = report();
    assert_eq!(r.load.len(), 10);
    for p in &r.load {
        assert!((p.warp_busy - p.rho).abs() < 0.05 * p.rho.max(1.0), "busy server: {p:?}");
        if p.rho <= 0.9 {
            // Over a stationary stretch the delay does not trend: warp is 1.
            assert!((p.warp_empty - 1.0).abs() < 0.02, "empty start: {p:?}");
            assert!((p.utilisation - p.rho).abs() < 0.03, "{p:?}");
        }
        if p.rho >= 1.1 {
            assert!((p.warp_empty - p.rho).abs() < 0.05 * p.rho, "overloaded: {p:?}");
            assert!((p.utilisation - 1.0).abs() < 0.05, "{p:?}");
        }
    }
}

#[test]
fn rate_settles_inside_the_bound_and_oscillates_outside() {
    let r = report();
    assert_eq!(r.convergence.len(), 18);
    let mut settled = 0;
    let mut oscillating = 0;
    for c in r.convergence.iter().filter(|c| c.start > 1.0) {
        let what = format!(
            "{} ({:?}): predicted τε/μ {:.2}, mean {:.3} std {:.3} [{:.3}, {:.3}]",
            c.label, c.service, c.product_predicted, c.rate_mean, c.rate_std, c.rate_min, c.rate_max
        );
        if c.product_predicted < 0.9 * STABILITY_LIMIT {
            // Noise from exponential service excites the loop more as the
            // bound nears; fixed service settles exactly.
            let tolerance = if c.service == Service::Fixed { 0.01 } else { 0.15 };
            assert!(c.rate_std < tolerance && (c.rate_mean - 1.0).abs() < 0.03, "settles: {what}");
            assert!(c.utilisation > 0.97, "{what}");
            settled += 1;
        } else if c.product_predicted > 1.05 * STABILITY_LIMIT {
            assert!(c.rate_std > 0.25 && c.rate_max - c.rate_min > 0.9, "oscillates: {what}");
            oscillating += 1;
        }
    }
    assert!(settled >= 6 && oscillating >= 8, "settled {settled}, oscillating {oscillating}");
    // For a run that settled, the loop delay seen is the base delay plus the
    // standing queue, as predicted.
    let c = r.convergence.iter().find(|c| c.label == "ε ×0.25" && c.service == Service::Fixed).unwrap();
    assert!((c.product_measured - c.product_predicted).abs() < 0.05, "{c:?}");
}

#[test]
fn senders_that_start_below_capacity_stay_there() {
    for c in report().convergence.iter().filter(|c| c.start < 1.0) {
        assert!((c.rate_mean - c.start).abs() < 0.02 && (c.warp_mean - 1.0).abs() < 0.01, "{c:?}");
    }
}

#[test]
fn fairness_brings_ten_senders_together_at_full_utilisation() {
    let r = report();
    let without = r.fairness.iter().find(|f| !f.fairness).unwrap();
    let with = r.fairness.iter().find(|f| f.fairness).unwrap();
    for f in [without, with] {
        assert!((f.total - 1.0).abs() < 0.03 && f.utilisation > 0.97, "{f:?}");
    }
    // Without the term the senders keep the spread of their demands (0.1μ to
    // 0.2μ), shifted down together.
    let spread = |v: &[f64]| v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min);
    assert!(without.max_rate - without.min_rate > 0.7 * spread(&without.demands), "{without:?}");
    assert!(without.cv > 0.1, "{without:?}");
    assert!(with.cv < 0.01 && with.jain > 0.999, "{with:?}");
    assert!(with.max_rate - with.min_rate < 0.01);
    // The term moves rate between senders without adding to the total, so the
    // standing queue Warp settles with is the same.
    assert!((with.one_way_delay - without.one_way_delay).abs() < 0.1 * without.one_way_delay, "{with:?}");
}

#[test]
fn same_seed_same_run() {
    let mut s = Scenario::new(9, &[3000.0, 4000.0, 6000.0], std::time::Duration::from_millis(300));
    s.control = Some(bulkwire_proto::WarpConfig::for_path(s.service_rate, s.base_loop_delay(), 3));
    s.fairness = true;
    let (a, b) = (run(&s), run(&s));
    assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
    s.seed = 10;
    assert_ne!(format!("{:?}", run(&s).records), format!("{:?}", a.records));
}
