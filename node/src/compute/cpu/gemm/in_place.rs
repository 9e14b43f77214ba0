//! fp32 GEMMs that read both operands where they lie, with no packing: A
//! stored along its rows (`rs == 1`: each step's `MR` values contiguous)
//! and B along n (`cs == 1`: each step's `NR` values contiguous), the
//! layout of the weight gradient `dW = doutᵀ · inp`, whose two operands
//! packing would otherwise copy whole every step. The AVX-512 kernel
//! (`avx512_strided`) steps through them `a.cs` and `b.rs` apart. K is
//! still taken a KC block at a time, and each element's products in the
//! same order, so the bits are those of the packed path.

use rayon::prelude::*;

use super::{Init, MatRef, Plan, SharedBias, SharedC};
use crate::compute::cpu::microkernel as mk;

/// Runs `C (init)= A·B` in place and returns true where `plan` has the
/// strided kernel and A and B have the layouts above; false (nothing done)
/// otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_in_place(
    plan: &Plan,
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
) -> bool {
    let Some(kernel) = plan.strided_kernel else { return false };
    if a.rs != 1 || b.cs != 1 || m == 0 || n == 0 || k == 0 {
        return false;
    }
    let (mr, nr) = (plan.mr, plan.nr);
    // The kernel reads exactly A's rows (each strip in `pieces`) and B's
    // columns (masked past n).
    if (k - 1) * a.cs + m > a.data.len() || (k - 1) * b.rs + n > b.data.len() {
        return false;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "gemm: C too small");
    let tiles = m.div_ceil(mr);
    let strips = n.div_ceil(nr);
    let threads = rayon::current_num_threads().max(1);
    // Row blocks of at most mc_tiles tiles, and column groups enough for
    // every thread to have work when there are few row blocks.
    let row_blocks = tiles.div_ceil(plan.mc_tiles);
    let groups = threads.div_ceil(row_blocks).min(strips).max(1);
    let cptr = SharedC(c.as_mut_ptr());
    let bias = SharedBias(match init {
        Init::Bias(bias) => bias.as_ptr(),
        _ => std::ptr::null(),
    });
    let accumulate = matches!(init, Init::Accumulate);
    (0..row_blocks * groups).into_par_iter().for_each(|task| {
        let (blk, g) = (task / groups, task % groups);
        let (t0, t1) = (blk * tiles / row_blocks, (blk + 1) * tiles / row_blocks);
        let (s0, s1) = (g * strips / groups, (g + 1) * strips / groups);
        for pc in (0..k).step_by(plan.kc) {
            let kc = plan.kc.min(k - pc);
            let first = pc == 0 && !accumulate;
            for j0 in (s0 * nr..(s1 * nr).min(n)).step_by(nr) {
                let w = nr.min(n - j0);
                let bias = bias.get();
                let bias = if first && !bias.is_null() { bias.wrapping_add(j0) } else { std::ptr::null() };
                let tile_rows = (t0 * mr..(t1 * mr).min(m)).step_by(mr).flat_map(|i0| {
                    pieces(mr.min(m - i0)).scan(i0, |at, h| {
                        *at += h;
                        Some((*at - h, h))
                    })
                });
                for (i0, h) in tile_rows {
                    // SAFETY: A's tile rows and B's columns lie inside their
                    // buffers (checked above); this task alone owns rows
                    // i0..i0+h, columns j0..j0+w of C; the plan names this
                    // kernel only where the CPU runs it.
                    unsafe {
                        kernel(
                            kc,
                            a.data.as_ptr().add(pc * a.cs + i0),
                            a.cs,
                            b.data.as_ptr().add(pc * b.rs + j0),
                            b.rs,
                            cptr.at(i0 * ldc + j0),
                            ldc,
                            h,
                            w,
                            first,
                            bias,
                        )
                    };
                }
            }
        }
    });
    true
}

/// A strip of `h` rows as tiles the kernel reads exactly (`h` itself when
/// it is 1–4, 8 or 14, else 8s and 4s and the last 1–3 rows), so no tile
/// reads rows past A's last one. Split tiles sum the same products in the
/// same order, so the bits are the same.
fn pieces(mut h: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let piece = match h {
            0 => return None,
            _ if mk::strided_rows_read(h) == h => h,
            8.. => 8,
            _ => 4,
        };
        h -= piece;
        Some(piece)
    })
}
