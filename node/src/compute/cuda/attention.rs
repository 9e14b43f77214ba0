//! Host side of attention.cu (flash-style causal attention): each kernel's
//! tiles (`attention_tiles`, within 48 KiB), its grid, and the launch order. The forward keeps one
//! logsumexp per (b, h, t) row in `att`; the backward's row sums D live in a
//! scratch buffer of the same size between its two kernels.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::launch::{launch, u};
use super::{CudaBackend, CudaTensor, Scratch};
use crate::compute::attention_tiles::FlashKernel;
use crate::compute::AttentionShape;

/// Threads per block (attention.cu's ATT_THREADS).
const THREADS: u32 = 64;
/// Dynamic shared memory a block may use without opting in.
const SHARED_BYTES: usize = 48 << 10;

/// Grid (`blocks` × tiles of t) and arguments (tq, tk) of `kernel` for `s`.
fn config(kernel: FlashKernel, s: AttentionShape, blocks: usize) -> (LaunchConfig, u32, u32) {
    let hs = s.head_size();
    let tiles = kernel.tiles(hs, SHARED_BYTES).unwrap_or_else(|| {
        panic!("attention head size {hs}: {kernel:?}'s smallest tiles need more than {SHARED_BYTES} bytes of shared memory")
    });
    let grid = u32::try_from(s.t.div_ceil(kernel.block_rows(tiles)).max(1)).ok().filter(|&n| n <= 65_535);
    let grid = grid.unwrap_or_else(|| panic!("sequence of {}: attention grid too large", s.t));
    let cfg = LaunchConfig {
        grid_dim: (u(blocks.max(1)), grid, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: u(4 * kernel.shared_floats(tiles, hs)),
    };
    (cfg, u(tiles.tq), u(tiles.tk))
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
        let (cfg, tq, tk) = config(FlashKernel::Forward, s, b * nh);
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
        let mut guard = self.scratch(Scratch::row_sums_slot, b * nh * t);
        let Some(dsum) = guard.row_sums.as_mut() else { unreachable!("scratch() fills the slot") };
        let (cfg, tq, tk) = config(FlashKernel::BackwardQ, s, b * nh);
        launch!(self, "flash_backward_q", cfg;
            &mut dqkv.buf, &mut *dsum, &dout.buf, &qkv.buf, &lse.buf, &tu, &cu, &nhu, &nkvu, &scale, &tq, &tk);
        let (cfg, tq, tk) = config(FlashKernel::BackwardKv, s, b * nkv);
        launch!(self, "flash_backward_kv", cfg;
            &mut dqkv.buf, &*dsum, &dout.buf, &qkv.buf, &lse.buf, &tu, &cu, &nhu, &nkvu, &scale, &tq, &tk);
    }
}
