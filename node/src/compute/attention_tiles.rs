//! Tile sizes of the flash-style attention kernels the GPU backends share
//! (shaders/cuda/attention.cu and shaders/attention.wgsl, one algorithm):
//! which tiles each kernel takes for a head size within a device's shared
//! (workgroup) memory, and how many floats of it they use.

/// The three kernels: the forward, dq with the row sums D, and dk with dv.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlashKernel {
    Forward,
    BackwardQ,
    BackwardKv,
}

/// A kernel's tiles: `tq` query rows and `tk` key rows, multiples of 4
/// (the kernels' 4 × 4 register blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tiles {
    pub tq: usize,
    pub tk: usize,
}

/// The head size rounded up to the register blocks' 4 (the kernels' hq).
pub fn padded_head(hs: usize) -> usize {
    hs.next_multiple_of(4)
}

impl FlashKernel {
    pub const ALL: [FlashKernel; 3] = [FlashKernel::Forward, FlashKernel::BackwardQ, FlashKernel::BackwardKv];

    /// Floats of shared memory at `tiles` for head size `hs`: the kernels'
    /// [rows][hq + 1] tiles, [tq][tk + 1] score tiles and row vectors.
    pub fn shared_floats(self, Tiles { tq, tk }: Tiles, hs: usize) -> usize {
        let hp = padded_head(hs) + 1;
        match self {
            FlashKernel::Forward => 2 * tq * hp + 2 * tk * hp + tq * (tk + 1) + 3 * tq,
            FlashKernel::BackwardQ => 3 * tq * hp + 2 * tk * hp + tq * (tk + 1) + 2 * tq,
            FlashKernel::BackwardKv => 4 * tk * hp + 2 * tq * hp + 2 * tq * (tk + 1) + 2 * tq,
        }
    }

    /// The largest tiles, from 32 rows down, whose shared memory fits in
    /// `limit_bytes`: square for the forward and dq, twice as many keys as
    /// queries for dk and dv (whose key tiles stay resident) down to 4 × 4;
    /// None when not even 4 × 4 fits (with 48 KiB, heads past 508 channels).
    pub fn tiles(self, hs: usize, limit_bytes: usize) -> Option<Tiles> {
        let fits = |t: &Tiles| 4 * self.shared_floats(*t, hs) <= limit_bytes;
        match self {
            FlashKernel::Forward | FlashKernel::BackwardQ => {
                [32, 16, 8, 4].into_iter().map(|n| Tiles { tq: n, tk: n }).find(fits)
            }
            FlashKernel::BackwardKv => {
                let halves = [32, 16, 8].into_iter().map(|n| Tiles { tq: n / 2, tk: n });
                halves.chain([Tiles { tq: 4, tk: 4 }]).find(fits)
            }
        }
    }

    /// The rows one block (workgroup) owns: query rows, or key rows for dk and dv.
    pub fn block_rows(self, t: Tiles) -> usize {
        match self {
            FlashKernel::BackwardKv => t.tk,
            _ => t.tq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FlashKernel, Tiles};

    const LIMIT: usize = 48 << 10;

    #[test]
    fn tiles_fit_in_shared_memory_and_shrink_with_the_head() {
        for k in FlashKernel::ALL {
            for hs in [1, 4, 6, 64, 70, 128, 256, 508] {
                let t = k.tiles(hs, LIMIT).expect("a tile fits");
                assert!(t.tq % 4 == 0 && t.tk % 4 == 0, "{k:?} hs {hs}: {t:?}");
                assert!(4 * k.shared_floats(t, hs) <= LIMIT, "{k:?} hs {hs}: {t:?}");
                let larger = Tiles { tq: 2 * t.tq, tk: 2 * t.tk };
                assert!(t.tk == 32 || 4 * k.shared_floats(larger, hs) > LIMIT, "{k:?} hs {hs}: {t:?}");
            }
        }
        // GPT-2's and the Llama presets' 64-channel heads take the largest tiles.
        assert_eq!(FlashKernel::Forward.tiles(64, LIMIT), Some(Tiles { tq: 32, tk: 32 }));
        assert_eq!(FlashKernel::BackwardQ.tiles(64, LIMIT), Some(Tiles { tq: 32, tk: 32 }));
        assert_eq!(FlashKernel::BackwardKv.tiles(64, LIMIT), Some(Tiles { tq: 16, tk: 32 }));
        assert_eq!(FlashKernel::BackwardKv.tiles(600, LIMIT), None);
        // A 16 KiB device (wgpu's default limit) still runs 64-channel heads.
        assert!(FlashKernel::ALL.iter().all(|k| k.tiles(64, 16 << 10).is_some()));
    }
}
