//! How the threads share one K block of a GEMM panel: C's tiles in that
//! panel are cut into units (blocks of rows, or groups of columns) that
//! the threads take one at a time, and each thread packs everything it
//! reads itself, so no packed line one core writes is read by the other.
//! When the host runs the benchmark VM's two vCPUs on different dies
//! (train/handoff.rs) every such line costs a cross-die round trip:
//! sharing one packed A or B between the threads cost GEMMs up to a third
//! of their rate (docs/benchmarks.md, "CPU backend vs PyTorch"). Each
//! task first takes the units of its own even share (`Claims`), so a
//! thread writes the same tiles of C call after call, then helps with the
//! others' shares, so a slower core (a vCPU the host runs slower, an
//! efficiency core) does less of the work.
//!
//! Packing privately means packing more: with units of rows each thread
//! packs the whole B panel (and the A blocks of its units), with units of
//! columns the whole of A (and the B strips of its units).
//! [`Schedule::new`] picks the way whose busiest thread costs least,
//! counting its share of tiles and what it packs (nothing for an operand
//! read in place or from a weight image).

/// Cost of packing one value of A or B, in multiply-adds of the kernel
/// (packing moves about one value every half cycle; the kernels do 16 to
/// 32 multiply-adds a cycle).
const PACK_COST: usize = 16;

use std::sync::atomic::{AtomicUsize, Ordering};
/// Column units per thread (enough for a slower thread to take fewer).
const COLUMN_UNITS_PER_THREAD: usize = 4;
/// Most rows of C for units of columns: every thread packs (or reads) all
/// of A's K block, 1 KiB a row (256 floats, or 256 bf16 pairs), and keeps
/// it in L2 (512 KiB to 1 MiB a core) while its units' strips pass by.
const COLUMN_MAX_ROWS: usize = 320;

/// Units of one panel: `Rows` cuts C's tiles into `blocks` blocks of rows
/// over every strip (each thread packs the whole B panel); `Columns` into
/// `groups` groups of strips over every row (each thread packs all of A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Schedule {
    Rows { blocks: usize, tiles: usize, strips: usize },
    Columns { groups: usize, tiles: usize, strips: usize },
}

/// What one unit covers: MR-tiles `tiles.0..tiles.1`, NR-strips `strips.0..strips.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Unit {
    pub tiles: (usize, usize),
    pub strips: (usize, usize),
}

/// Shape facts the choice weighs (for one panel).
#[derive(Clone, Copy, Debug)]
pub(super) struct Work {
    /// Rows of C in MR-tiles, columns of the panel in NR-strips.
    pub tiles: usize,
    pub strips: usize,
    pub mr: usize,
    pub nr: usize,
    /// Most tiles per A block (the block stays in L2).
    pub mc_tiles: usize,
    /// Whether A, B are packed per call (false: read in place or from an image).
    pub pack_a: bool,
    pub pack_b: bool,
}

impl Schedule {
    /// The units whose busiest thread costs least, ties to rows (the
    /// per-row ops that follow a GEMM split rows too). Units of columns
    /// only up to [`COLUMN_MAX_ROWS`] rows.
    pub fn new(w: Work, threads: usize) -> Schedule {
        let threads = threads.max(1);
        let (tiles, strips) = (w.tiles.max(1), w.strips.max(1));
        // Row blocks of at most mc_tiles tiles, as many as a multiple of
        // the threads where the tiles allow, so the blocks come out even.
        let blocks = tiles.div_ceil(w.mc_tiles).max(threads);
        let blocks = (blocks.div_ceil(threads) * threads).min(tiles);
        let rows = Schedule::Rows { blocks, tiles, strips };
        if threads == 1 || tiles * w.mr > COLUMN_MAX_ROWS {
            return rows;
        }
        let groups = (COLUMN_UNITS_PER_THREAD * threads).min(strips);
        let columns = Schedule::Columns { groups, tiles, strips };
        if columns.busiest_cost(w, threads) < rows.busiest_cost(w, threads) {
            columns
        } else {
            rows
        }
    }

    pub fn units(&self) -> usize {
        match *self {
            Schedule::Rows { blocks, .. } => blocks,
            Schedule::Columns { groups, .. } => groups,
        }
    }

    /// The tiles and strips unit `u` covers.
    pub fn unit(&self, u: usize) -> Unit {
        match *self {
            Schedule::Rows { blocks, tiles, strips } => {
                Unit { tiles: even(u, blocks, tiles), strips: (0, strips) }
            }
            Schedule::Columns { groups, tiles, strips } => {
                Unit { tiles: (0, tiles), strips: even(u, groups, strips) }
            }
        }
    }

    /// Most tiles and strips in one unit (pack buffer sizes).
    pub fn largest_unit(&self) -> (usize, usize) {
        match *self {
            Schedule::Rows { blocks, tiles, strips } => (tiles.div_ceil(blocks), strips),
            Schedule::Columns { groups, tiles, strips } => (tiles, strips.div_ceil(groups)),
        }
    }

    /// Multiply-adds per step of k of the busiest thread, with its packing.
    fn busiest_cost(&self, w: Work, threads: usize) -> usize {
        let (unit_tiles, unit_strips) = self.largest_unit();
        let per_thread = self.units().div_ceil(threads);
        let (rows, cols) = (unit_tiles * w.mr, unit_strips * w.nr);
        let work = per_thread * rows * cols;
        let pack = match *self {
            // Its units' A blocks, and the whole B panel.
            Schedule::Rows { strips, .. } => {
                usize::from(w.pack_a) * per_thread * rows + usize::from(w.pack_b) * strips * w.nr
            }
            // All of A, and its units' B strips.
            Schedule::Columns { tiles, .. } => {
                usize::from(w.pack_a) * tiles * w.mr + usize::from(w.pack_b) * per_thread * cols
            }
        };
        work + PACK_COST * pack
    }
}

/// Most shares [`Claims`] keeps (tasks beyond share them).
const MAX_SHARES: usize = 64;

/// A counter on a cache line of its own.
#[repr(align(64))]
struct Counter(AtomicUsize);

/// Who runs which unit of one round: `tasks` tasks, task t first taking
/// the units of share `t` (even shares of the units, in order), then those
/// left in the shares after it. Each unit goes to exactly one task.
pub(super) struct Claims {
    units: usize,
    shares: usize,
    next: [Counter; MAX_SHARES],
}

impl Claims {
    pub fn new(units: usize, tasks: usize) -> Claims {
        let shares = tasks.clamp(1, MAX_SHARES).min(units.max(1));
        let next = std::array::from_fn(|i| Counter(AtomicUsize::new(even(i.min(shares), shares, units).0)));
        Claims { units, shares, next }
    }

    /// The next unit for task `task`, or None when every unit is taken.
    pub fn take(&self, task: usize) -> Option<usize> {
        (0..self.shares).map(|i| (task + i) % self.shares).find_map(|share| {
            let end = even(share, self.shares, self.units).1;
            let counter = &self.next[share].0;
            // A load first: a share already taken costs no write to its line.
            (counter.load(Ordering::Relaxed) < end)
                .then(|| counter.fetch_add(1, Ordering::Relaxed))
                .filter(|&u| u < end)
        })
    }
}

/// Range `i` of `parts` even ranges over `0..len` (lengths differ by at most one).
pub(super) fn even(i: usize, parts: usize, len: usize) -> (usize, usize) {
    (i * len / parts, (i + 1) * len / parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(m: usize, n: usize, mr: usize, nr: usize, pack_a: bool, pack_b: bool) -> Work {
        let mc_tiles = if mr == 14 { 10 } else { 16 };
        Work { tiles: m.div_ceil(mr), strips: n.div_ceil(nr), mr, nr, mc_tiles, pack_a, pack_b }
    }

    #[test]
    fn units_cover_c_once() {
        for (m, n, mr, nr, threads) in [
            (256, 768, 14, 32, 2),
            (1024, 1024, 14, 32, 2),
            (1, 1, 6, 16, 2),
            (30, 1500, 6, 16, 4),
            (258, 256, 6, 16, 3),
        ] {
            for (pack_a, pack_b) in [(true, true), (false, true), (true, false), (false, false)] {
                let w = work(m, n, mr, nr, pack_a, pack_b);
                let s = Schedule::new(w, threads);
                let mut seen = vec![0u8; w.tiles * w.strips];
                for u in 0..s.units() {
                    let Unit { tiles: (t0, t1), strips: (s0, s1) } = s.unit(u);
                    assert!(t1 > t0 && s1 > s0, "{s:?} unit {u} is empty");
                    assert!(t1 - t0 <= s.largest_unit().0 && s1 - s0 <= s.largest_unit().1, "{s:?} unit {u}");
                    for t in t0..t1 {
                        for s in s0..s1 {
                            seen[t * w.strips + s] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{s:?}: not every tile once");
            }
        }
    }

    #[test]
    fn claims_hand_out_every_unit_once_own_share_first() {
        for (units, tasks) in [(8, 2), (7, 3), (1, 4), (100, 64), (5, 100), (0, 2)] {
            let claims = Claims::new(units, tasks);
            // Task 1 first takes its own share, in order.
            let shares = tasks.clamp(1, MAX_SHARES).min(units.max(1));
            let mut seen = vec![0u8; units];
            if units > 0 && shares > 1 {
                let first = even(1, shares, units).0;
                assert_eq!(claims.take(1), Some(first), "{units} units, {tasks} tasks");
                seen[first] += 1;
            }
            let taken = std::sync::Mutex::new(Vec::new());
            std::thread::scope(|s| {
                for t in 0..tasks.min(8) {
                    let (claims, taken) = (&claims, &taken);
                    s.spawn(move || {
                        while let Some(u) = claims.take(t) {
                            taken.lock().expect("lock").push(u);
                        }
                    });
                }
            });
            for u in taken.into_inner().expect("lock") {
                seen[u] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1), "{units} units, {tasks} tasks: {seen:?}");
            assert_eq!(claims.take(0), None);
        }
    }

    #[test]
    fn the_cheaper_operand_is_packed_twice() {
        // B·T = 256 rows are 19 tiles of 14: two row blocks would do 10 and
        // 9 tiles, so columns, each thread packing A whole, 8 groups of 3 strips.
        let s = Schedule::new(work(256, 768, 14, 32, true, false), 2);
        assert_eq!(s, Schedule::Columns { groups: 8, tiles: 19, strips: 24 });
        assert_eq!(s.unit(7), Unit { tiles: (0, 19), strips: (21, 24) });
        // The same with A read in place: nothing is packed twice either way.
        assert!(matches!(Schedule::new(work(256, 768, 14, 32, false, false), 2), Schedule::Columns { .. }));
        // 256 × 256 on AVX2 (43 tiles of 6, 16 strips of 16), A read in
        // place and B packed: rows would pack all of B twice, columns nothing.
        assert!(matches!(Schedule::new(work(256, 256, 6, 16, false, true), 2), Schedule::Columns { .. }));
        // ... and with A packed too, still columns: each thread packs A
        // (258 rows) and a quarter of B, against 2 × 66 rows of A and all
        // of B (256 columns) in row blocks.
        assert!(matches!(
            Schedule::new(work(256, 256, 6, 16, true, true), 2),
            Schedule::Columns { groups: 8, .. }
        ));
        // 1024 rows: too many for columns.
        assert!(matches!(Schedule::new(work(1024, 256, 6, 16, false, true), 2), Schedule::Rows { .. }));
        // A weight gradient, 3072 rows: rows, 22 blocks of 10 tiles.
        let s = Schedule::new(work(3072, 768, 14, 32, true, true), 2);
        assert_eq!(s, Schedule::Rows { blocks: 22, tiles: 220, strips: 24 });
        // 280 rows, 20 tiles: two row blocks of 10.
        assert_eq!(Schedule::new(work(280, 280, 14, 32, false, false), 2).units(), 2);
        // One thread: rows.
        assert!(matches!(
            Schedule::new(work(256, 768, 14, 32, true, false), 1),
            Schedule::Rows { blocks: 2, .. }
        ));
        // One tile of rows: columns.
        assert!(matches!(Schedule::new(work(6, 1024, 6, 16, true, true), 2), Schedule::Columns { .. }));
    }
}
