//! Which thread owns which part of a GEMM's C: a grid of row ranges (in
//! MR-tiles) by column ranges (in NR-strips), one part per thread for the
//! whole GEMM. Each thread packs everything it reads itself, so no packed
//! line one core writes is read by the other: when the host runs the two
//! vCPUs of the benchmark VM on different dies (train/handoff.rs), every
//! such line costs a cross-die round trip, and sharing one packed A or B
//! between the threads cost GEMMs up to a third of their rate
//! (docs/benchmarks.md, eighth and ninth sessions).
//!
//! Owning a part means packing more: threads that split the rows each pack
//! the whole B panel, threads that split the columns each pack the whole of
//! A. [`Partition::new`] picks the grid whose busiest part costs least,
//! counting its tiles and what it packs (nothing for an operand read in
//! place or from a weight image).

/// Cost of packing one value of A or B, in multiply-adds of the kernel
/// (packing moves about one value every half cycle; the kernels do 16 to
/// 32 multiply-adds a cycle).
const PACK_COST: usize = 16;

/// A grid of `row_parts × col_parts` parts over `tiles` MR-tiles of rows and
/// `strips` NR-strips of columns; part `p` is row range `p / col_parts`,
/// column range `p % col_parts`, each split as evenly as whole tiles and
/// strips allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Partition {
    pub row_parts: usize,
    pub col_parts: usize,
    tiles: usize,
    strips: usize,
}

/// What one part holds: MR-tiles `tiles.0..tiles.1`, NR-strips `strips.0..strips.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Part {
    pub tiles: (usize, usize),
    pub strips: (usize, usize),
}

/// Shape facts the choice weighs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Work {
    /// Rows and columns of C, in tiles and strips, and their sizes.
    pub tiles: usize,
    pub strips: usize,
    pub mr: usize,
    pub nr: usize,
    /// Columns per B panel (A is packed again for each panel a part spans).
    pub panel: usize,
    /// Whether A, B are packed per call (false: read in place or from an image).
    pub pack_a: bool,
    pub pack_b: bool,
}

impl Partition {
    /// The grid of at most `threads` parts whose busiest part costs least
    /// (ties to more row parts: the per-row ops that follow a GEMM split
    /// rows the same way).
    pub fn new(work: Work, threads: usize) -> Partition {
        let threads = threads.max(1);
        let mut best =
            (usize::MAX, Partition { row_parts: 1, col_parts: 1, tiles: work.tiles, strips: work.strips });
        for row_parts in (1..=threads.min(work.tiles).max(1)).rev() {
            for col_parts in (1..=(threads / row_parts).min(work.strips).max(1)).rev() {
                let p = Partition { row_parts, col_parts, tiles: work.tiles, strips: work.strips };
                let cost = p.busiest_cost(work);
                if cost < best.0 {
                    best = (cost, p);
                }
            }
        }
        best.1
    }

    pub fn parts(&self) -> usize {
        self.row_parts * self.col_parts
    }

    /// The tiles and strips part `p` owns.
    pub fn part(&self, p: usize) -> Part {
        let (r, c) = (p / self.col_parts, p % self.col_parts);
        Part { tiles: even(r, self.row_parts, self.tiles), strips: even(c, self.col_parts, self.strips) }
    }

    /// Multiply-adds per step of k of the largest part, with its packing.
    fn busiest_cost(&self, w: Work) -> usize {
        let rows = self.tiles.div_ceil(self.row_parts) * w.mr;
        let cols = self.strips.div_ceil(self.col_parts) * w.nr;
        let panels = cols.div_ceil(w.panel);
        let pack = usize::from(w.pack_a) * rows * panels + usize::from(w.pack_b) * cols;
        rows * cols + PACK_COST * pack
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
        Work { tiles: m.div_ceil(mr), strips: n.div_ceil(nr), mr, nr, panel: 1536, pack_a, pack_b }
    }

    #[test]
    fn parts_cover_c_once() {
        for (tiles, strips, threads) in [(19, 24, 2), (74, 32, 2), (1, 1, 2), (3, 50, 4), (43, 16, 3)] {
            let w = Work { tiles, strips, mr: 14, nr: 32, panel: 1536, pack_a: true, pack_b: true };
            let p = Partition::new(w, threads);
            assert!(p.parts() <= threads && p.parts() >= 1, "{p:?}");
            let mut seen = vec![0u8; tiles * strips];
            for i in 0..p.parts() {
                let Part { tiles: (t0, t1), strips: (s0, s1) } = p.part(i);
                assert!(t1 > t0 && s1 > s0, "{p:?} part {i} is empty");
                for t in t0..t1 {
                    for s in s0..s1 {
                        seen[t * strips + s] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{p:?}: not every tile once");
        }
    }

    #[test]
    fn the_cheaper_operand_is_packed_twice() {
        // B·T = 256 rows are 19 tiles of 14: two row parts would do 10 and
        // 9 tiles, so the columns split, each part packing A whole.
        let p = Partition::new(work(256, 768, 14, 32, true, false), 2);
        assert_eq!((p.row_parts, p.col_parts), (1, 2));
        assert_eq!(p.part(1), Part { tiles: (0, 19), strips: (12, 24) });
        // The same with A read in place: nothing is packed twice either way.
        let p = Partition::new(work(256, 768, 14, 32, false, false), 2);
        assert_eq!((p.row_parts, p.col_parts), (1, 2));
        // A weight gradient, 3072 rows by 768: the rows split, each part
        // packing the (smaller) B panel.
        let p = Partition::new(work(3072, 768, 14, 32, true, true), 2);
        assert_eq!((p.row_parts, p.col_parts), (2, 1));
        // 280 rows, 20 tiles: two row parts of 10, the tie goes to rows.
        let p = Partition::new(work(280, 280, 14, 32, false, false), 2);
        assert_eq!((p.row_parts, p.col_parts), (2, 1));
        // 200 × 300 on four threads: a 2 × 2 grid packs less than 4 × 1 or 1 × 4.
        let p = Partition::new(work(200, 300, 14, 32, true, true), 4);
        assert_eq!((p.row_parts, p.col_parts), (2, 2));
        // One thread: one part.
        assert_eq!(Partition::new(work(1024, 1024, 14, 32, true, true), 1).parts(), 1);
        // One tile of rows: the columns split.
        let p = Partition::new(work(6, 1024, 6, 16, true, true), 2);
        assert_eq!((p.row_parts, p.col_parts), (1, 2));
    }
}
