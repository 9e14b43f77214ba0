//! Keeps rayon's workers awake for the length of a training step, as
//! OpenMP's active wait policy keeps PyTorch's: a step is hundreds of short
//! parallel ops, and a worker that falls asleep between two of them is woken
//! by a futex whose latency (tens of microseconds on a busy or virtual
//! machine) the op then waits for. Each other worker runs a `keep_awake` job
//! for the step: it takes the step's parallel work as it appears (rayon's
//! `yield_now`) and otherwise spins, giving its core to other OS threads
//! now and then (a node's network threads).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// This thread already runs a `keep_awake` job further up its stack.
    static KEEPING_AWAKE: Cell<bool> = const { Cell::new(false) };
}

/// Idle spins between two OS yields.
const SPINS_PER_YIELD: u32 = 64;

/// Runs `step` on a worker of rayon's global pool with the pool's other
/// workers kept awake until it returns (or unwinds).
pub fn with_awake_workers<R: Send>(step: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|scope| {
        /// Ends the other workers' spinning however `step` leaves.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let owner = rayon::current_thread_index();
        let done = &done;
        for _ in 1..rayon::current_num_threads() {
            scope.spawn(move |_| keep_awake(owner, done));
        }
        let _done = Done(done);
        step()
    })
}

/// Takes the pool's work until `done`. Returns at once on the step's own
/// thread, or on one already keeping awake: there it would sit on top of a
/// wait that only its own return can end.
fn keep_awake(owner: Option<usize>, done: &AtomicBool) {
    if rayon::current_thread_index() == owner || KEEPING_AWAKE.get() {
        return;
    }
    KEEPING_AWAKE.set(true);
    #[cfg(test)]
    tests::KEPT_AWAKE.fetch_add(1, Ordering::Relaxed);
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        if let Some(rayon::Yield::Executed) = rayon::yield_now() {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle.is_multiple_of(SPINS_PER_YIELD) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    KEEPING_AWAKE.set(false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::atomic::AtomicUsize;

    /// `keep_awake` jobs that ran their loop.
    pub(super) static KEPT_AWAKE: AtomicUsize = AtomicUsize::new(0);

    /// Nested parallel work, a panic inside the step, and pools of one to
    /// four threads all finish (a `keep_awake` on the wrong thread would hang
    /// here); the other workers keep awake and take the step's work.
    #[test]
    fn steps_finish_and_spread_over_the_workers() {
        for threads in 1..=4 {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            KEPT_AWAKE.store(0, Ordering::Relaxed);
            let (sum, workers) = pool.install(|| {
                with_awake_workers(|| {
                    let workers = std::sync::Mutex::new(std::collections::BTreeSet::new());
                    let sum: u64 = (0..2000u64)
                        .into_par_iter()
                        .map(|i| {
                            workers.lock().expect("lock").insert(rayon::current_thread_index());
                            (0..20_000u64)
                                .into_par_iter()
                                .map(|j| std::hint::black_box(i * j) % 7)
                                .sum::<u64>()
                        })
                        .sum();
                    (sum, workers.into_inner().expect("lock").len())
                })
            });
            let want: u64 = (0..2000u64).map(|i| (0..20_000u64).map(|j| i * j % 7).sum::<u64>()).sum();
            assert_eq!(sum, want, "{threads} threads");
            assert!(workers >= threads.min(2), "{threads} threads: work ran on {workers} workers");
            if threads > 1 {
                assert!(KEPT_AWAKE.load(Ordering::Relaxed) > 0, "{threads} threads: no worker kept awake");
            }
            let panicked = pool.install(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    with_awake_workers(|| panic!("step failed"));
                }))
            });
            assert!(panicked.is_err(), "{threads} threads: the step's panic reaches the caller");
        }
    }
}
