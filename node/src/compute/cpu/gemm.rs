//! Cache-blocked, multi-threaded GEMM for the CPU backend.
//!
//! `C (+)= A · B` with arbitrary row/column strides on A and B, so one routine
//! serves the three layouts the model needs (NT forward, NN and TN backward).
//! Structure (Goto/BLIS): B is packed into `KC × NC` panels of `NR`-wide
//! strips (in parallel), A into `MC × KC` blocks of `MR`-tall strips, and a
//! register-tiled `MR × NR` micro-kernel of the chosen instruction-set path
//! (`microkernel`) runs over the packed data (packing itself: `pack`). In bf16
//! precision the packing rounds the inputs to bfloat16 (pairs of k for
//! `vdpbf16ps`), so there is no extra conversion pass. In fp32 on AVX-512,
//! operands already laid out as a kernel reads them are not packed: an A
//! stored along k whose rows do not alias in L1 (`ARows::InPlace`), and
//! both operands of A-along-rows times B-along-n (`in_place`, the weight
//! gradients). Each K block of a panel is cut into units, blocks of rows
//! or groups of columns (`schedule`), that the threads take as they come
//! for them; each thread packs what it reads itself, so no packed data
//! crosses cores. The K blocks run in order, one after another, so every
//! element of C sees the same sums in the same order whatever the thread
//! count or units: each path is deterministic.
//!
//! Pack buffers are per thread and reused across calls (64-byte aligned), so a
//! training step allocates nothing here.

use std::cell::RefCell;
use std::thread::LocalKey;

use rayon::prelude::*;

use super::isa::{Isa, Precision};
use super::microkernel::{self as mk, KernelFn};
use super::simd;
pub use image::{ImageLayout, WeightImage};
use pack::{pack, pack_rows, PackMode};
use schedule::{Claims, Schedule, Unit, Work};

mod image;
mod in_place;
mod pack;
mod schedule;

/// Width of one packed B panel (columns).
const NC: usize = 1536;
/// Rows of C below which the NT layout skips packing (row · column dots).
const SMALL_M: usize = 4;
/// Depth of a bf16 K block on every path (256 pairs of the AVX-512-BF16 kernel).
const BF16_KC: usize = 512;

/// A read-only matrix view: element (i, j) lives at `data[i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl MatRef<'_> {
    #[cfg(test)]
    #[inline(always)]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// What C starts from.
#[derive(Clone, Copy)]
pub enum Init<'a> {
    /// `C = A·B`.
    Overwrite,
    /// `C += A·B`.
    Accumulate,
    /// `C = A·B + bias` (one bias value per column of C).
    Bias(&'a [f32]),
}

/// Which kernels a GEMM runs: the instruction-set path and input precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmOpts {
    pub isa: Isa,
    pub precision: Precision,
}

impl Default for GemmOpts {
    fn default() -> Self {
        GemmOpts { isa: Isa::widest(), precision: Precision::Fp32 }
    }
}

/// The kernel and blocking one `GemmOpts` resolves to.
#[derive(Clone, Copy)]
struct Plan {
    mr: usize,
    nr: usize,
    /// Depth of one panel in k (a B strip of `KC·NR` stays in L1).
    kc: usize,
    /// Tiles of MR rows per A block (the block stays in L2).
    mc_tiles: usize,
    mode: PackMode,
    kernel: KernelFn,
    /// The kernel reading A packed in rows (`mk::A_ROW` apart), where the
    /// path has one: used when A is stored along k, which then packs as
    /// row copies instead of a transpose, or is read in place (fp32).
    row_kernel: Option<KernelFn>,
    /// Rows of A the row kernel reads for a tile of `h` rows (at least `h`).
    rows_read: fn(usize) -> usize,
    /// The kernel reading A and B where they lie (`in_place`), where the
    /// path has one (fp32 on AVX-512).
    strided_kernel: Option<mk::StridedFn>,
    /// The path packing runs on (the kernel's).
    isa: Isa,
}

impl Plan {
    fn new(opts: GemmOpts) -> Plan {
        // A path the CPU lacks never reaches a kernel: fall back to portable.
        let isa = if opts.isa.supported() { opts.isa } else { Isa::Portable };
        let bf16 = opts.precision == Precision::Bf16;
        let rounded = if bf16 { PackMode::F32RoundedBf16 } else { PackMode::F32 };
        // bf16 blocks are 512 deep on every path: each block's sum is added to
        // C as a whole, so equal blocks (and pairs summed in ascending k) give
        // every path the same bits (the products of bf16 values are exact).
        let kc = if bf16 { BF16_KC } else { 256 };
        let narrow = |kernel: KernelFn, row_kernel: Option<KernelFn>| Plan {
            mr: mk::MR_6,
            nr: mk::NR_16,
            kc,
            mc_tiles: 16,
            mode: rounded,
            kernel,
            // fp32 only: bf16's 512-deep blocks do not fit a packed row.
            row_kernel: row_kernel.filter(|_| rounded.steps(kc) == mk::A_ROW),
            rows_read: mk::avx2_rows_read,
            strided_kernel: None,
            isa,
        };
        match isa {
            Isa::Portable => narrow(mk::portable, None),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => narrow(mk::avx2, Some(mk::avx2_a_rows)),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Bf16 if bf16 => Plan {
                mr: mk::MR_14,
                nr: mk::NR_32,
                kc: BF16_KC,
                mc_tiles: 10,
                mode: PackMode::Bf16Pairs,
                kernel: mk::avx512bf16,
                row_kernel: Some(mk::avx512bf16_a_rows),
                rows_read: mk::tile_rows_read,
                strided_kernel: None,
                isa,
            },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx512Bf16 => Plan {
                mr: mk::MR_14,
                nr: mk::NR_32,
                kc,
                mc_tiles: 10,
                mode: rounded,
                kernel: mk::avx512,
                // Packed rows hold one K block of `mk::A_ROW` steps (fp32's;
                // bf16's 512-deep blocks in f32 slots are twice that).
                row_kernel: (rounded.steps(kc) == mk::A_ROW).then_some(mk::avx512_a_rows as KernelFn),
                rows_read: mk::tile_rows_read,
                strided_kernel: (!bf16).then_some(mk::avx512_strided as mk::StridedFn),
                isa,
            },
            #[cfg(not(target_arch = "x86_64"))]
            _ => narrow(mk::portable, None),
        }
    }
}

/// 64 bytes of packed floats (the pack buffers' unit, for alignment).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

thread_local! {
    static PACK_A: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
    static PACK_B: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's pack buffer of at least `len` floats (a fresh
/// one if the buffer is in use further up this thread's stack).
fn with_scratch<R>(
    key: &'static LocalKey<RefCell<Vec<Line>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    let lines = len.div_ceil(16);
    let view = |v: &mut Vec<Line>| {
        // SAFETY: `Line` is 16 plain f32s with no padding (repr C, 64 bytes).
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut f32, len) }
    };
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < lines {
                v.resize(lines, Line([0.0; 16]));
            }
            f(view(&mut v))
        }
        Err(_) => {
            let mut v = vec![Line([0.0; 16]); lines];
            f(view(&mut v))
        }
    })
}

/// `C[m×n] (+)= A[m×k]·B[k×n]`, C row-major with leading dimension `ldc`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    opts: GemmOpts,
) {
    gemm_from(m, n, k, a, BInput::Matrix(b), c, ldc, init, opts)
}

/// [`gemm`] with B already packed (`image::pack_b` for the same `k`, `n`
/// and `opts`): the panels are read in place, nothing of B is packed.
///
/// # Panics
/// When `b` was not packed for this `k`, `n` and plan (`ImageLayout::new`).
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed_b(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: &[f32],
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    opts: GemmOpts,
) {
    let layout = ImageLayout::new(k, n, opts).expect("gemm: this plan reads no packed B");
    assert!(b.len() >= layout.len(), "gemm: packed B too short");
    gemm_from(m, n, k, a, BInput::Packed(b, layout), c, ldc, init, opts)
}

/// Where B's panels come from.
#[derive(Clone, Copy)]
enum BInput<'a> {
    /// Packed panel by panel, per call.
    Matrix(MatRef<'a>),
    /// Packed beforehand, in `ImageLayout` order.
    Packed(&'a [f32], ImageLayout),
}

#[allow(clippy::too_many_arguments)]
fn gemm_from(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: BInput<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    opts: GemmOpts,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "gemm: C too small");
    if let Init::Bias(bias) = init {
        assert!(bias.len() >= n, "gemm: bias too short");
    }
    if k == 0 {
        for row in c.chunks_mut(ldc).take(m) {
            match init {
                Init::Overwrite => row[..n].fill(0.0),
                Init::Bias(bias) => row[..n].copy_from_slice(&bias[..n]),
                Init::Accumulate => {}
            }
        }
        return;
    }
    if let BInput::Matrix(b) = b {
        if m < SMALL_M && a.cs == 1 && b.rs == 1 && opts.precision == Precision::Fp32 {
            return gemm_small_nt(m, n, k, a, b, c, ldc, init, opts.isa);
        }
    }
    let plan = Plan::new(opts);
    if let BInput::Matrix(b) = b {
        if in_place::gemm_in_place(&plan, m, n, k, a, b, c, ldc, init) {
            return;
        }
    }
    let (mr, nr) = (plan.mr, plan.nr);
    let a_rows = ARows::for_a(&plan, a, m, k);
    let threads = rayon::current_num_threads().max(1);
    let steps_kc = plan.mode.steps(plan.kc);
    let cptr = SharedC(c.as_mut_ptr());
    let bias = SharedBias(match init {
        Init::Bias(bias) => bias.as_ptr(),
        _ => std::ptr::null(),
    });
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let work = Work {
            tiles: m.div_ceil(mr),
            strips: nc.div_ceil(nr),
            mr,
            nr,
            mc_tiles: plan.mc_tiles,
            pack_a: !matches!(a_rows, ARows::InPlace(_)),
            pack_b: matches!(b, BInput::Matrix(_)),
        };
        let schedule = Schedule::new(work, threads);
        let (unit_tiles, unit_strips) = schedule.largest_unit();
        // Each thread's pack buffers: A (a unit's rows, or all of them with
        // units of columns) and B (the whole panel with units of rows, or a
        // unit's strips).
        let a_len = match a_rows {
            ARows::InPlace(_) => 0,
            _ => steps_kc * unit_tiles * mr,
        };
        let b_len = match b {
            BInput::Matrix(_) => steps_kc * unit_strips * nr,
            BInput::Packed(..) => 0,
        };
        let tasks = threads.min(schedule.units());
        for pc in (0..k).step_by(plan.kc) {
            let kc = plan.kc.min(k - pc);
            let block = Block { jc, panel: nc, pc, kc, first: pc == 0 && !matches!(init, Init::Accumulate) };
            let claims = Claims::new(schedule.units(), tasks);
            (0..tasks).into_par_iter().for_each(|task| {
                with_scratch(&PACK_B, b_len, |bpack| {
                    with_scratch(&PACK_A, a_len, |apack| {
                        let take = || claims.take(task);
                        // SAFETY: each unit is taken by one task only (`Claims`),
                        // units cover disjoint tiles and strips of C, and C holds
                        // m rows of ldc (checked above).
                        unsafe {
                            run_units(
                                &plan, &schedule, take, block, m, a, a_rows, b, apack, bpack, cptr, ldc, bias,
                            )
                        };
                    })
                })
            });
        }
    }
}

/// Where in the GEMM one round of units is: the panel's `panel` columns
/// from `jc`, K block `pc..pc+kc`, and whether it is the first block C sees.
#[derive(Clone, Copy)]
struct Block {
    jc: usize,
    panel: usize,
    pc: usize,
    kc: usize,
    first: bool,
}

/// Runs the units `take` hands this thread for one K block of one panel,
/// packing in its own buffers what it reads: with units of rows, the
/// whole B panel (once) and each unit's A block; with units of columns,
/// all of A (once) and each unit's B strips.
///
/// # Safety
/// No other thread runs the same unit; `c` addresses m rows `ldc` apart.
#[allow(clippy::too_many_arguments)]
unsafe fn run_units(
    plan: &Plan,
    schedule: &Schedule,
    mut take: impl FnMut() -> Option<usize>,
    blk: Block,
    m: usize,
    a: MatRef<'_>,
    a_rows: ARows,
    b: BInput<'_>,
    apack: &mut [f32],
    bpack: &mut [f32],
    c: SharedC,
    ldc: usize,
    bias: SharedBias,
) {
    let (mr, nr) = (plan.mr, plan.nr);
    let Block { jc, panel, pc, kc, first } = blk;
    let steps = plan.mode.steps(kc);
    let a_layout = a_rows.layout(plan, steps);
    let whole_a = matches!(schedule, Schedule::Columns { .. });
    let (mut a_ready, mut b_ready) = (false, false);
    while let Some(u) = take() {
        let Unit { tiles: (t0, t1), strips: (s0, s1) } = schedule.unit(u);
        let (ic, rows) = (t0 * mr, (t1 * mr).min(m) - t0 * mr);
        let (j0, j1) = (jc + s0 * nr, jc + (s1 * nr).min(panel));
        let nc = j1 - j0;
        // B: the unit's strips, from the image, or packed (the whole panel
        // once with units of rows, each unit's strips with units of columns).
        let bp: &[f32] = match b {
            BInput::Packed(image, layout) => &image[layout.panel_offset(j0, pc)..],
            BInput::Matrix(bm) => {
                // Bᵀ as a matrix whose rows are B's columns: B strips pack like A strips.
                let bt = MatRef { data: bm.data, rs: bm.cs, cs: bm.rs };
                if whole_a {
                    pack(plan.isa, bpack, bt, j0, nc, pc, kc, nr, plan.mode);
                    &bpack[..]
                } else {
                    if !b_ready {
                        pack(plan.isa, bpack, bt, jc, panel, pc, kc, nr, plan.mode);
                        b_ready = true;
                    }
                    &bpack[s0 * steps * nr..]
                }
            }
        };
        // A: the unit's rows, in place, or packed (all of A once with units
        // of columns, each unit's block with units of rows).
        let ap: &[f32] = match a_rows {
            ARows::InPlace(_) => &a.data[ic * a.rs + pc..],
            _ if whole_a => {
                if !a_ready {
                    pack_a(plan, a_rows, apack, a, 0, m, pc, kc);
                    a_ready = true;
                }
                &apack[..]
            }
            _ => {
                pack_a(plan, a_rows, apack, a, ic, rows, pc, kc);
                &apack[..]
            }
        };
        let bias = if first && !bias.get().is_null() { bias.get().add(j0) } else { std::ptr::null() };
        macro_block(plan, a_layout, rows, nc, steps, ap, bp, c.at(ic * ldc + j0), ldc, first, bias);
    }
}

/// How A's strips are packed for one GEMM: as the kernel's steps (`MR`
/// values per step), or in rows for the `_a_rows` kernel, or not at all:
/// an fp32 A stored along k is already rows, which the fp32 `_a_rows`
/// kernel reads in place, this many slots apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ARows {
    Steps,
    Rows,
    InPlace(usize),
}

/// Row strides (in floats) that A is not read in place at, nor at their
/// multiples: 14 rows 2 KiB apart fall into two of L1's 4 KiB-periodic
/// sets, seven lines to a set, and 4 KiB apart all into one, more than its
/// ways (8). At 1024 floats, reading in place ran the small shape's GEMMs
/// at 124 GFLOP/s against 195 packed; at 256 and 768 (four sets) in place
/// ran 225 and 221 against 227 and 195.
const IN_PLACE_ALIAS: usize = 512;

/// An A strip's kernel and length (slots between strips) for one K block,
/// and the slots between its rows (for a row kernel).
#[derive(Clone, Copy)]
struct ALayout {
    kernel: KernelFn,
    strip: usize,
    a_row: usize,
}

impl ARows {
    /// Rows where the plan has a row kernel and A (`m × k`) is stored along
    /// k; in place where the plan is fp32, the rows do not alias in L1 (see
    /// [`IN_PLACE_ALIAS`]) and the kernel's reads past A's last row (a tile
    /// of `h` rows reads `plan.rows_read(h)`) stay inside `a.data`.
    fn for_a(plan: &Plan, a: MatRef<'_>, m: usize, k: usize) -> ARows {
        if a.cs != 1 || plan.row_kernel.is_none() {
            return ARows::Steps;
        }
        debug_assert_eq!(plan.mode.steps(plan.kc), mk::A_ROW, "a packed row holds one K block");
        let last = (m - 1) / plan.mr * plan.mr;
        let read = last + (plan.rows_read)(m - last);
        let inside = (read - 1) * a.rs + k <= a.data.len();
        if plan.mode == PackMode::F32 && inside && !a.rs.is_multiple_of(IN_PLACE_ALIAS) {
            ARows::InPlace(a.rs)
        } else {
            ARows::Rows
        }
    }

    /// The layout for a K block of `steps` steps.
    fn layout(self, plan: &Plan, steps: usize) -> ALayout {
        match (self, plan.row_kernel) {
            (ARows::Rows, Some(kernel)) => ALayout { kernel, strip: plan.mr * mk::A_ROW, a_row: mk::A_ROW },
            (ARows::InPlace(row), Some(kernel)) => ALayout { kernel, strip: plan.mr * row, a_row: row },
            _ => ALayout { kernel: plan.kernel, strip: steps * plan.mr, a_row: 0 },
        }
    }
}

/// Packs rows `ic..ic+rows` of A (k from `pc`, `kc` of them) in `rows`' layout.
#[allow(clippy::too_many_arguments)]
fn pack_a(
    plan: &Plan,
    rows_layout: ARows,
    dst: &mut [f32],
    a: MatRef<'_>,
    ic: usize,
    rows: usize,
    pc: usize,
    kc: usize,
) {
    match rows_layout {
        ARows::Rows | ARows::InPlace(_) => {
            pack_rows(plan.isa, dst, a, ic, rows, pc, kc, plan.mr, mk::A_ROW, plan.mode)
        }
        ARows::Steps => pack(plan.isa, dst, a, ic, rows, pc, kc, plan.mr, plan.mode),
    }
}

/// C's base pointer shared with the tasks that own disjoint row blocks.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: each task writes only its own rows of C.
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}
impl SharedC {
    fn at(self, off: usize) -> *mut f32 {
        // SAFETY: callers pass offsets inside C.
        unsafe { self.0.add(off) }
    }
}

#[derive(Clone, Copy)]
struct SharedBias(*const f32);
// SAFETY: read-only.
unsafe impl Send for SharedBias {}
unsafe impl Sync for SharedBias {}
impl SharedBias {
    fn get(self) -> *const f32 {
        self.0
    }
}

/// Runs the micro-kernel over one packed A block and one packed B panel.
///
/// # Safety
/// `c` addresses `rows × nc` floats with row stride `ldc` owned by the caller.
#[allow(clippy::too_many_arguments)]
unsafe fn macro_block(
    plan: &Plan,
    a_layout: ALayout,
    rows: usize,
    nc: usize,
    steps: usize,
    apack: &[f32],
    bpack: &[f32],
    c: *mut f32,
    ldc: usize,
    first: bool,
    bias: *const f32,
) {
    let (mr, nr) = (plan.mr, plan.nr);
    for (sj, j0) in (0..nc).step_by(nr).enumerate() {
        let bs = &bpack[sj * steps * nr..(sj + 1) * steps * nr];
        let w = nr.min(nc - j0);
        let bias_j = if bias.is_null() { bias } else { bias.add(j0) };
        for (si, i0) in (0..rows).step_by(mr).enumerate() {
            let as_ = &apack[si * a_layout.strip..];
            let h = mr.min(rows - i0);
            // SAFETY: the strips hold steps·MR and steps·NR packed values (or A,
            // read in place, holds every row the kernel reads: `ARows::for_a`); the
            // tile's h × w corner lies inside the caller's block of C; the
            // plan only names kernels the CPU supports.
            (a_layout.kernel)(
                steps,
                as_.as_ptr(),
                a_layout.a_row,
                bs.as_ptr(),
                c.add(i0 * ldc + j0),
                ldc,
                h,
                w,
                first,
                bias_j,
            );
        }
    }
}

/// NT layout with a handful of rows (sampling, generation): each element is
/// one dot product of contiguous rows, with no packing (it would cost as much
/// as the product itself). Columns are split across threads.
#[allow(clippy::too_many_arguments)]
fn gemm_small_nt(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    isa: Isa,
) {
    const CHUNK: usize = 256;
    for i in 0..m {
        let arow = &a.data[i * a.rs..][..k];
        c[i * ldc..i * ldc + n].par_chunks_mut(CHUNK).enumerate().for_each(|(ch, out)| {
            for (jj, o) in out.iter_mut().enumerate() {
                let j = ch * CHUNK + jj;
                let d = simd::dot(isa, arow, &b.data[j * b.cs..][..k]);
                *o = match init {
                    Init::Overwrite => d,
                    Init::Accumulate => *o + d,
                    Init::Bias(bias) => d + bias[j],
                };
            }
        });
    }
}

#[cfg(test)]
mod tests;
