//! Latency histograms (nanoseconds, 1 ns to 60 s, three significant digits) and their summary
//! in microseconds.

use hdrhistogram::Histogram;
use serde::Serialize;

/// An empty latency histogram, in nanoseconds.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Latency figures in µs.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (µs, fraction of samples at or below), for the CDF plots.
    pub cdf: Vec<(f64, f64)>,
}

impl Latency {
    /// The summary of `h`.
    pub fn of(h: &Histogram<u64>) -> Latency {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let cdf = (0..=200).map(|i| i as f64 / 200.0).map(|q| (us(q), q)).collect();
        Latency {
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1000.0,
            cdf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_reads_the_histogram_in_microseconds() {
        let mut h = histogram();
        for ns in [1_000, 2_000, 3_000, 100_000] {
            h.record(ns).unwrap();
        }
        let l = Latency::of(&h);
        assert!((l.p50_us - 2.0).abs() < 0.01, "{}", l.p50_us);
        assert!((l.max_us - 100.0).abs() < 0.1, "{}", l.max_us);
        assert_eq!(l.cdf.first().map(|c| c.1), Some(0.0));
        assert_eq!(l.cdf.last().map(|c| c.1), Some(1.0));
    }
}
