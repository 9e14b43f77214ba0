//! Host side of attention.cu (flash-style causal attention): the tile size
//! each kernel runs at, its grid, and the launch order. The forward keeps one
//! logsumexp per (b, h, t) row in `att`; the backward's row sums D live in a
//! scratch buffer of the same size between its two kernels.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::launch::{launch, u};
use super::{CudaBackend, CudaTensor, Scratch};
use crate::compute::AttentionShape;

/// Threads per block (attention.cu's ATT_THREADS).
const THREADS: u32 = 64;
/// Dynamic shared memory a block may use without opting in.
const SHARED_BYTES: usize = 48 << 10;

/// The three kernels of attention.cu.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Forward,
    BackwardQ,
    BackwardKv,
}

/// A kernel's tiles: `tq` query rows and `tk` key rows (multiples of 4,
/// the kernels' register blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    tq: usize,
    tk: usize,
}

impl Kernel {
    /// Floats of shared memory at `tiles` for head size `hs` (attention.cu's
    /// layouts: [rows][hq + 1] tiles, [tq][tk + 1] score tiles, row vectors).
    fn shared_floats(self, Tiles { tq, tk }: Tiles, hs: usize) -> usize {
        let hp = hs.next_multiple_of(4) + 1;
        match self {
            Kernel::Forward => 2 * tq * hp + 2 * tk * hp + tq * (tk + 1) + 3 * tq,
            Kernel::BackwardQ => 3 * tq * hp + 2 * tk * hp + tq * (tk + 1) + 2 * tq,
            Kernel::BackwardKv => 4 * tk * hp + 2 * tq * hp + 2 * tq * (tk + 1) + 2 * tq,
        }
    }

    /// The largest tiles, from 32 rows down, whose shared memory fits in
    /// `SHARED_BYTES`: square for the forward and dq, twice as many keys
    /// as queries for dk and dv (whose key tiles stay resident) down to
    /// 4 × 4. Heads of up to 508 channels fit.
    fn tiles(self, hs: usize) -> Tiles {
        let fits = |t: &Tiles| 4 * self.shared_floats(*t, hs) <= SHARED_BYTES;
        let found = match self {
            Kernel::Forward | Kernel::BackwardQ => {
                [32, 16, 8, 4].into_iter().map(|n| Tiles { tq: n, tk: n }).find(fits)
            }
            Kernel::BackwardKv => {
                let halves = [32, 16, 8].into_iter().map(|n| Tiles { tq: n / 2, tk: n });
                halves.chain([Tiles { tq: 4, tk: 4 }]).find(fits)
            }
        };
        found.unwrap_or_else(|| {
            panic!("attention head size {hs}: {self:?}'s smallest tiles need more than {SHARED_BYTES} bytes of shared memory")
        })
    }

    /// Grid (`blocks` × tiles of t) and arguments (tq, tk) for `s`.
    fn config(self, s: AttentionShape, blocks: usize) -> (LaunchConfig, u32, u32) {
        let hs = s.head_size();
        let tiles = self.tiles(hs);
        let rows = match self {
            Kernel::BackwardKv => tiles.tk,
            _ => tiles.tq,
        };
        let grid = u32::try_from(s.t.div_ceil(rows).max(1)).ok().filter(|&n| n <= 65_535);
        let grid = grid.unwrap_or_else(|| panic!("sequence of {}: attention grid too large", s.t));
        let cfg = LaunchConfig {
            grid_dim: (u(blocks.max(1)), grid, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: u(4 * self.shared_floats(tiles, hs)),
        };
        (cfg, u(tiles.tq), u(tiles.tk))
    }
}

impl CudaBackend {
    pub(super) fn attention_forward_impl(
        &self,
        out: &mut CudaTensor,
        lse: &mut CudaTensor,
        qkv: &CudaTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { b, t, c, nh, nkv } = s;
        assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups: {s:?}");
        let scale = 1.0 / (s.head_size() as f32).sqrt();
        let (tu, cu, nhu, nkvu) = (u(t), u(c), u(nh), u(nkv));
        let (cfg, tq, tk) = Kernel::Forward.config(s, b * nh);
        launch!(self, "flash_forward", cfg;
            &mut out.buf, &mut lse.buf, &qkv.buf, &tu, &cu, &nhu, &nkvu, &scale, &tq, &tk);
    }

    pub(super) fn attention_backward_impl(
        &self,
        dqkv: &mut CudaTensor,
        dout: &CudaTensor,
        qkv: &CudaTensor,
        lse: &CudaTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { b, t, c, nh, nkv } = s;
        assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups: {s:?}");
        let scale = 1.0 / (s.head_size() as f32).sqrt();
        let (tu, cu, nhu, nkvu) = (u(t), u(c), u(nh), u(nkv));
        let mut guard = self.scratch(Scratch::row_sums_slot, s.rows());
        let Some(dsum) = guard.row_sums.as_mut() else { unreachable!("scratch() fills the slot") };
        let (cfg, tq, tk) = Kernel::BackwardQ.config(s, b * nh);
        launch!(self, "flash_backward_q", cfg;
            &mut dqkv.buf, &mut *dsum, &dout.buf, &qkv.buf, &lse.buf, &tu, &cu, &nhu, &nkvu, &scale, &tq, &tk);
        let (cfg, tq, tk) = Kernel::BackwardKv.config(s, b * nkv);
        launch!(self, "flash_backward_kv", cfg;
            &mut dqkv.buf, &*dsum, &dout.buf, &qkv.buf, &lse.buf, &tu, &cu, &nhu, &nkvu, &scale, &tq, &tk);
    }
}

#[cfg(test)]
mod tests {
    use super::{Kernel, Tiles, SHARED_BYTES};

    #[test]
    fn tiles_fit_in_shared_memory_and_shrink_with_the_head() {
        for k in [Kernel::Forward, Kernel::BackwardQ, Kernel::BackwardKv] {
            for hs in [1, 4, 6, 64, 70, 128, 256, 508] {
                let t = k.tiles(hs);
                assert!(t.tq % 4 == 0 && t.tk % 4 == 0, "{k:?} hs {hs}: {t:?}");
                assert!(4 * k.shared_floats(t, hs) <= SHARED_BYTES, "{k:?} hs {hs}: {t:?}");
                let larger = Tiles { tq: 2 * t.tq, tk: 2 * t.tk };
                assert!(t.tk == 32 || 4 * k.shared_floats(larger, hs) > SHARED_BYTES, "{k:?} hs {hs}: {t:?}");
            }
        }
        // GPT-2's and the Llama presets' 64-channel heads take the largest tiles.
        assert_eq!(Kernel::Forward.tiles(64), Tiles { tq: 32, tk: 32 });
        assert_eq!(Kernel::BackwardQ.tiles(64), Tiles { tq: 32, tk: 32 });
        assert_eq!(Kernel::BackwardKv.tiles(64), Tiles { tq: 16, tk: 32 });
    }
}
