//! Cross-core handoff: how long two threads take to pass a cache line back
//! and forth, which says where the host has put this machine's CPUs. On the
//! 2-vCPU benchmark VM it is about 60 ns while the two share an L3 and about
//! 350 ns while the host runs them on different dies, the state that slows
//! every training step (docs/benchmarks.md, eighth session). `bench train`
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
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
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
    let total = TRIPS * BATCHES as u32;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..total {
                if !wait_for(2 * i + 1) {
                    return;
                }
                flag.store(2 * i + 2, Ordering::Release);
            }
        });
        let mut batches = Vec::with_capacity(BATCHES);
        for b in 0..BATCHES as u32 {
            let start = Instant::now();
            for i in b * TRIPS..(b + 1) * TRIPS {
                flag.store(2 * i + 1, Ordering::Release);
                if !wait_for(2 * i + 2) {
                    return None;
                }
            }
            batches.push(start.elapsed().as_secs_f64() * 1e9 / f64::from(TRIPS));
        }
        batches.sort_by(f64::total_cmp);
        Some(batches[BATCHES / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two threads on two CPUs pass the value back and forth in well under
    /// a microsecond; on one CPU there is nothing to measure.
    #[test]
    fn a_round_trip_takes_nanoseconds_not_scheduler_slices() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        match round_trip_ns(Duration::from_secs(5)) {
            Some(ns) => assert!(ns > 1.0 && ns < 20_000.0, "round trip {ns} ns"),
            None => assert_eq!(cpus, 1, "no answer from the second thread on {cpus} CPUs"),
        }
    }
}
