//! Cross-core handoff: how long two threads take to pass a cache line back
//! and forth, which says where the host has put this machine's CPUs. On the
//! 2-vCPU benchmark VM it is about 60 ns while the two share an L3 and about
//! 350 ns while the host runs them on different dies, the state that slows
//! every training step (docs/benchmarks.md, "CPU backend vs PyTorch"). `bench train`
//! prints it beside its figures, so rounds taken in the two states can be
//! told apart.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Round trips per batch, and batches (the median batch is reported).
const TRIPS: u32 = 2000;
const BATCHES: usize = 5;
/// A waiter checks the clock once per this many spins.
const SPINS_PER_CHECK: u32 = 1024;

/// The median round-trip time in nanoseconds of a value passed between this
/// thread and a second one, or None on one CPU or when the second thread
/// does not answer within `patience` (it was not scheduled beside this one).
pub fn round_trip_ns(patience: Duration) -> Option<f64> {
    median_round_trip_ns(TRIPS, BATCHES, patience)
}

/// [`round_trip_ns`] over `batches` batches of `trips` round trips.
fn median_round_trip_ns(trips: u32, batches: usize, patience: Duration) -> Option<f64> {
    if trips == 0 || batches == 0 || std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let flag = AtomicU32::new(0);
    let give_up = AtomicBool::new(false);
    let deadline = Instant::now() + patience;
    // Waits until `flag` holds `want`; false once the deadline has passed.
    let wait_for = |want: u32| {
        let mut spins = 0u32;
        while flag.load(Ordering::Acquire) != want {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPINS_PER_CHECK)
                && (give_up.load(Ordering::Relaxed) || Instant::now() > deadline)
            {
                give_up.store(true, Ordering::Relaxed);
                return false;
            }
        }
        true
    };
    let total = trips.saturating_mul(batches as u32);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..total {
                if !wait_for(2 * i + 1) {
                    return;
                }
                flag.store(2 * i + 2, Ordering::Release);
            }
        });
        let mut times = Vec::with_capacity(batches);
        for b in 0..batches as u32 {
            let start = Instant::now();
            for i in b * trips..(b + 1) * trips {
                flag.store(2 * i + 1, Ordering::Release);
                if !wait_for(2 * i + 2) {
                    return None;
                }
            }
            times.push(start.elapsed().as_secs_f64() * 1e9 / f64::from(trips));
        }
        times.sort_by(f64::total_cmp);
        Some(times[batches / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With two CPUs the second thread answers every trip and the median
    /// is a positive time (a few round trips, and a patience that covers a
    /// scheduler slice per trip, as tests run beside other tests); with one
    /// there is nothing to measure.
    #[test]
    fn every_trip_is_answered_and_timed() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let got = median_round_trip_ns(40, 3, Duration::from_secs(60));
        match cpus {
            1 => assert_eq!(got, None),
            _ => {
                let ns = got.expect("the second thread answered every trip");
                assert!(ns.is_finite() && ns > 0.0, "round trip {ns} ns");
            }
        }
        assert_eq!(median_round_trip_ns(0, 3, Duration::from_secs(1)), None, "no trips, no time");
    }
}
