//! One computation per key at a time: concurrent askers for the same chunk
//! table or chunk wait for the first one's work and take its result from
//! the cache it fills, instead of each reading and hashing the same bytes.
//!
//! A key has a gate only while someone holds or waits on it, so the map
//! never holds more keys than there are callers at that moment.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Gates by key.
#[derive(Debug)]
pub struct Flights<K> {
    gates: Mutex<HashMap<K, Arc<Mutex<()>>>>,
}

impl<K> Default for Flights<K> {
    fn default() -> Self {
        Self { gates: Mutex::new(HashMap::new()) }
    }
}

impl<K: Eq + Hash + Clone> Flights<K> {
    /// `cached()` when it has the value (an earlier flight left it there);
    /// otherwise `work()`, run by one caller per key at a time: the others
    /// wait for it, then look in the cache again. A failed or uncached
    /// result makes the next caller work again.
    pub fn once<T, E>(
        &self,
        key: &K,
        cached: impl Fn() -> Option<T>,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        if let Some(v) = cached() {
            return Ok(v);
        }
        let gate = self.lock_map().entry(key.clone()).or_default().clone();
        let result = {
            let _turn = gate.lock().unwrap_or_else(PoisonError::into_inner);
            match cached() {
                Some(v) => Ok(v),
                None => work(),
            }
        };
        let mut gates = self.lock_map();
        // Ours and the map's: nobody else holds or waits on this gate
        // (others clone it only under the map's lock).
        if Arc::strong_count(&gate) == 2 {
            gates.remove(key);
        }
        result
    }

    /// Keys with a gate now.
    pub fn len(&self) -> usize {
        self.lock_map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock_map(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<Mutex<()>>>> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn concurrent_askers_share_one_computation_and_leave_no_gate() {
        let flights = Arc::new(Flights::<u32>::default());
        let cache = Arc::new(Mutex::new(None::<u64>));
        let runs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (flights, cache, runs) = (flights.clone(), cache.clone(), runs.clone());
                std::thread::spawn(move || {
                    flights.once(
                        &7,
                        || *cache.lock().expect("cache"),
                        || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(50));
                            *cache.lock().expect("cache") = Some(42);
                            Ok::<u64, ()>(42)
                        },
                    )
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().expect("thread"), Ok(42));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one computation for eight askers");
        assert!(flights.is_empty(), "no gate is kept once nobody asks");
    }

    #[test]
    fn a_failure_is_not_kept() {
        let flights = Flights::<u32>::default();
        assert_eq!(flights.once(&1, || None::<u8>, || Err("disk")), Err("disk"));
        assert_eq!(flights.once(&1, || None, || Ok::<u8, &str>(3)), Ok(3));
        assert!(flights.is_empty());
    }
}
