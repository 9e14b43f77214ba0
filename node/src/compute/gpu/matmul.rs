//! Host side of matmul.wgsl: the three layouts the model needs as strided
//! views of one tiled kernel, and the plan that splits M, N and K so every
//! operand window fits the adapter's binding limit (K splits accumulate in
//! order, so results stay deterministic).

use super::pipelines::Kernel;
use super::{GpuBackend, GpuTensor};
use crate::compute::{MatmulLayout, MatmulShape};

/// A strided matrix view: element (i, j) at `i*rs + j*cs`.
#[derive(Clone, Copy)]
struct Operand<'a> {
    buffer: &'a wgpu::Buffer,
    rs: usize,
    cs: usize,
}

impl Operand<'_> {
    fn span(&self, rows: usize, cols: usize) -> usize {
        Strides { rs: self.rs, cs: self.cs }.span(rows, cols)
    }
    fn strides(&self) -> Strides {
        Strides { rs: self.rs, cs: self.cs }
    }
}

#[derive(Clone, Copy, Debug)]
struct Strides {
    rs: usize,
    cs: usize,
}

impl Strides {
    /// Elements spanned by a `rows × cols` block.
    fn span(&self, rows: usize, cols: usize) -> usize {
        (rows.max(1) - 1) * self.rs + (cols.max(1) - 1) * self.cs + 1
    }
}

fn op(t: &GpuTensor, rs: usize, cs: usize) -> Operand<'_> {
    Operand { buffer: &t.buffer, rs, cs }
}

/// Block sizes (mb, nb, kb) so each operand window fits `max_elems` and the
/// grid fits `max_tiles_m × max_tiles_n` workgroups.
fn plan(
    m: usize,
    n: usize,
    k: usize,
    ops: [Strides; 3],
    max_elems: usize,
    tile: (usize, usize, usize),
) -> (usize, usize, usize) {
    let [a, b, c] = ops;
    let (mut mb, mut nb, mut kb) = (m.max(1), n.max(1), k.max(1));
    let halve = |x: usize, t: usize| if x > t { x.div_ceil(2).div_ceil(t) * t } else { x.div_ceil(2) };
    loop {
        let (sa, sb, sc) = (a.span(mb, kb), b.span(kb, nb), c.span(mb, nb));
        let grid_ok = mb.div_ceil(tile.0) <= tile.2 && nb.div_ceil(tile.1) <= tile.2;
        if sa <= max_elems && sb <= max_elems && sc <= max_elems && grid_ok {
            return (mb, nb, kb);
        }
        if mb == 1 && nb == 1 && kb == 1 {
            return (1, 1, 1); // a single row stride exceeds the limit: bind what we can
        }
        // Shrink the dimension contributing most to the largest overflow.
        let dims = [
            (sa > max_elems && mb > 1, mb * a.rs, 0),
            (sa > max_elems && kb > 1, kb * a.cs, 2),
            (sb > max_elems && kb > 1, kb * b.rs, 2),
            (sb > max_elems && nb > 1, nb * b.cs, 1),
            (sc > max_elems && mb > 1, mb * c.rs, 0),
            (sc > max_elems && nb > 1, nb * c.cs, 1),
            (!grid_ok && mb.div_ceil(tile.0) > tile.2, usize::MAX, 0),
            (!grid_ok && nb.div_ceil(tile.1) > tile.2, usize::MAX, 1),
        ];
        let pick = dims.iter().filter(|d| d.0).max_by_key(|d| d.1).map(|d| d.2);
        match pick {
            Some(0) => mb = halve(mb, tile.0),
            Some(1) => nb = halve(nb, tile.1),
            Some(_) => kb = halve(kb, 16),
            None => {
                mb = halve(mb, tile.0);
                nb = halve(nb, tile.1);
                kb = halve(kb, 16);
            }
        }
    }
}

impl GpuBackend {
    /// One linear-layer product in `layout` (see `MatmulLayout`); `bias` is
    /// used by `Nt` only.
    pub fn matmul(
        &self,
        layout: MatmulLayout,
        out: &mut GpuTensor,
        x: &GpuTensor,
        y: &GpuTensor,
        bias: Option<&GpuTensor>,
        s: MatmulShape,
    ) {
        let MatmulShape { n, c, oc } = s;
        // C(M,N) (+)= A(M,K) · B(K,N)
        let (m, nn, k, a, b, cc, accumulate) = match layout {
            MatmulLayout::Nt => (n, oc, c, op(x, c, 1), op(y, 1, c), op(out, oc, 1), false),
            MatmulLayout::Nn => (n, c, oc, op(x, oc, 1), op(y, c, 1), op(out, c, 1), true),
            MatmulLayout::Tn => (oc, c, n, op(x, 1, oc), op(y, c, 1), op(out, c, 1), true),
        };
        let bias = if layout == MatmulLayout::Nt { bias } else { None };
        self.gemm(m, nn, k, a, b, cc, bias, accumulate);
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Operand<'_>,
        b: Operand<'_>,
        c: Operand<'_>,
        bias: Option<&GpuTensor>,
        accumulate: bool,
    ) {
        if m == 0 || n == 0 {
            return;
        }
        let t = self.matmul_tiles(m, n);
        let tile = (t.tile_m as usize, t.tile_n as usize, self.max_groups as usize);
        let (mb, nb, kb) = plan(m, n, k, [a.strides(), b.strides(), c.strides()], self.rules.max_elems, tile);
        let pipeline = self.pipeline(Kernel::Matmul(t));
        for m0 in (0..m).step_by(mb) {
            let m1 = (m0 + mb).min(m);
            for n0 in (0..n).step_by(nb) {
                let n1 = (n0 + nb).min(n);
                let c_lo = m0 * c.rs + n0;
                let (cv, cb) = self.rules.window(c.buffer, c_lo, c_lo + c.span(m1 - m0, n1 - n0));
                // K = 0: C = bias (or unchanged when accumulating) via one empty step.
                let k_steps: Vec<usize> = if k == 0 { vec![0] } else { (0..k).step_by(kb).collect() };
                for k0 in k_steps {
                    let k1 = (k0 + kb).min(k);
                    let a_lo = m0 * a.rs + k0 * a.cs;
                    let b_lo = k0 * b.rs + n0 * b.cs;
                    let (av, ab) = self.rules.window(a.buffer, a_lo, a_lo + a.span(m1 - m0, k1 - k0));
                    let (bv, bb) = self.rules.window(b.buffer, b_lo, b_lo + b.span(k1 - k0, n1 - n0));
                    let first = k0 == 0;
                    let (biasv, biasb, with_bias) = match bias {
                        Some(bt) if first => {
                            let (v, base) = self.rules.window(&bt.buffer, n0, n1);
                            (v, base, true)
                        }
                        _ => (self.rules.window(&self.dummy, 0, 1).0, 0, false),
                    };
                    let flags = u32::from(accumulate || !first) | (u32::from(with_bias) << 1);
                    let args = [
                        (m1 - m0) as u32,
                        (n1 - n0) as u32,
                        (k1 - k0) as u32,
                        flags,
                        ab,
                        a.rs as u32,
                        a.cs as u32,
                        bb,
                        b.rs as u32,
                        b.cs as u32,
                        cb,
                        c.rs as u32,
                        biasb,
                    ];
                    let views = [(1, cv), (2, av), (3, bv), (4, biasv)];
                    let groups = ((n1 - n0).div_ceil(tile.1) as u32, (m1 - m0).div_ceil(tile.0) as u32, 1);
                    self.rec.dispatch(&pipeline, &args, &views, groups);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fits(m: usize, n: usize, k: usize, ops: [Strides; 3], lim: usize) {
        let tile = (64, 64, 65535);
        let (mb, nb, kb) = plan(m, n, k, ops, lim, tile);
        let [a, b, c] = ops;
        assert!(a.span(mb, kb) <= lim && b.span(kb, nb) <= lim && c.span(mb, nb) <= lim, "{mb} {nb} {kb}");
        assert!(mb <= m && nb <= n && kb <= k);
    }

    #[test]
    fn plan_splits_until_every_window_fits() {
        let (n, c, oc) = (64, 768, 50304); // gpt2-124m logits, B·T = 64
        let s = |rs, cs| Strides { rs, cs };
        let lim = (128 << 20) / 4;
        fits(n, oc, c, [s(c, 1), s(1, c), s(oc, 1)], lim); // NT
        fits(n, c, oc, [s(oc, 1), s(c, 1), s(c, 1)], lim); // NN
        fits(oc, c, n, [s(1, oc), s(c, 1), s(c, 1)], lim); // TN
                                                           // a tiny limit forces splits of every dimension
        fits(37, 29, 23, [s(23, 1), s(1, 23), s(29, 1)], 64);
        fits(29, 23, 37, [s(1, 29), s(23, 1), s(23, 1)], 64);
        assert_eq!(plan(8, 8, 8, [s(8, 1), s(1, 8), s(8, 1)], 1 << 20, (64, 64, 65535)), (8, 8, 8));
    }
}
