//! How a stack's live bytes grow over a series of samples: `steady`, `levelling`, `linear` or
//! `accelerating`, as the edLeak paper classifies allocation sites (constant, logarithmic,
//! linear, exponential), but decided from a handful of samples.
//!
//! The rule, with `first` and `last` the bytes at the first and last sample and `peak` the
//! most bytes the stack held in the series:
//!
//! - **unknown** with fewer than two samples: one sample says nothing of how a stack grows.
//! - **steady** when the net change `|last - first|` is at most 2% of `peak`: the stack holds
//!   what it held.
//! - With two samples there is no curvature to see: any other change is **linear**.
//! - Otherwise the series is cut at its middle sample into an early and a late half (the middle
//!   sample belongs to both), and the growth rate of each half is its least-squares slope in
//!   bytes per second, taken in the direction of the net change (so a stack that shrinks is
//!   judged by how its shrinking goes). Comparing the two slopes is the series' second
//!   difference, relative to its slope:
//!   - **levelling** when the late rate is under half the early one: it grows ever slower, as a
//!     cache filling up does;
//!   - **accelerating** when the late rate is over twice the early one, or the early half did
//!     not grow at all;
//!   - **linear** in between.
//!
//! Halves rather than neighbouring samples, so that one noisy interval does not flip the class;
//! factors of two, so that the jitter of a real process growing at a constant rate stays linear.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Unknown,
    Steady,
    Levelling,
    Linear,
    Accelerating,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Unknown => "unknown",
            Class::Steady => "steady",
            Class::Levelling => "levelling",
            Class::Linear => "linear",
            Class::Accelerating => "accelerating",
        }
    }
}

/// Classifies `(seconds, bytes)` samples, in time order.
pub fn classify(series: &[(f64, u64)]) -> Class {
    let (Some(&(_, first)), Some(&(_, last))) = (series.first(), series.last()) else {
        return Class::Unknown;
    };
    if series.len() < 2 {
        return Class::Unknown;
    }
    let peak = series.iter().map(|s| s.1).max().unwrap_or(0);
    let net = last as f64 - first as f64;
    if net.abs() <= peak as f64 * 0.02 {
        return Class::Steady;
    }
    if series.len() == 2 {
        return Class::Linear;
    }
    let mid = series.len() / 2;
    let sign = net.signum();
    let early = sign * slope(&series[..=mid]);
    let late = sign * slope(&series[mid..]);
    if early <= 0.0 {
        Class::Accelerating
    } else if late < early / 2.0 {
        Class::Levelling
    } else if late > early * 2.0 {
        Class::Accelerating
    } else {
        Class::Linear
    }
}

/// Least-squares slope of bytes over seconds.
fn slope(points: &[(f64, u64)]) -> f64 {
    let n = points.len() as f64;
    let mt = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mb = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for &(t, b) in points {
        num += (t - mt) * (b as f64 - mb);
        den += (t - mt) * (t - mt);
    }
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(f: impl Fn(f64) -> f64) -> Vec<(f64, u64)> {
        (0..8)
            .map(|i| i as f64 * 0.5)
            .map(|t| (t, f(t).round() as u64))
            .collect()
    }

    #[test]
    fn the_four_shapes() {
        assert_eq!(classify(&series(|_| 1_000_000.0)), Class::Steady);
        assert_eq!(
            classify(&series(|t| 1e6 + 500.0 * t)),
            Class::Steady,
            "0.2% is noise"
        );
        assert_eq!(classify(&series(|t| 4096.0 * 100.0 * t)), Class::Linear);
        assert_eq!(
            classify(&series(|t| 4e6 * (1.0 - (-t).exp2()))),
            Class::Levelling,
            "a cache filling, its rate halving every second"
        );
        assert_eq!(classify(&series(|t| 1e5 * (t * 1.5).exp2())), Class::Accelerating);
        assert_eq!(classify(&series(|t| 1e4 * t * t + 1e5)), Class::Accelerating);
        // A shrinking stack is judged by how it shrinks.
        assert_eq!(classify(&series(|t| 1e6 - 1e5 * t)), Class::Linear);
    }

    #[test]
    fn jitter_keeps_a_constant_rate_linear() {
        let wobble = [
            0.0, 30_000.0, -25_000.0, 20_000.0, -30_000.0, 25_000.0, -20_000.0, 10_000.0,
        ];
        let s: Vec<(f64, u64)> = (0..8)
            .map(|i| {
                (
                    i as f64 * 0.5,
                    (200_000.0 * i as f64 + 100_000.0 + wobble[i]) as u64,
                )
            })
            .collect();
        assert_eq!(classify(&s), Class::Linear);
    }

    #[test]
    fn short_series() {
        assert_eq!(classify(&[]), Class::Unknown);
        assert_eq!(
            classify(&[(0.0, 5)]),
            Class::Unknown,
            "not steady before a second sample"
        );
        assert_eq!(classify(&[(0.0, 5), (1.0, 5)]), Class::Steady);
        assert_eq!(classify(&[(0.0, 5), (1.0, 500)]), Class::Linear);
        assert_eq!(classify(&[(0.0, 0), (1.0, 0), (2.0, 500)]), Class::Accelerating);
    }
}
