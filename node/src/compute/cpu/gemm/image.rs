//! Weight images: a matmul weight packed once into the B panels the bf16
//! GEMM reads, so the products that read the weight (the forward `out = inp
//! · Wᵀ`, the input gradient `dinp = dout · W`) pack only their activations.
//!
//! A packed B (`k × n`) is `ImageLayout` order: KC-deep blocks of k, each
//! holding all of n's NR-wide strips (`steps × NR` slots each), so the panel
//! for columns `jc..` and depth `pc..` is one contiguous run. A weight W
//! (`oc × c`, row-major) has two images, one per product: `Nt` packs B = Wᵀ
//! (k = c, n = oc), `Nn` packs B = W (k = oc, n = c). `WeightImage` keeps
//! both in one buffer, after a pad that puts them on a 64-byte boundary, and
//! writes them tile by tile (32 rows of W × one KC block of its columns), so
//! AdamW can write each tile's images while the freshly updated tile is in
//! cache (`kernels::adamw_update_imaged`) instead of the GEMMs packing W
//! from memory twice a step. Images hold what packing per call would write,
//! bit for bit, so a GEMM gives the same C either way.
//!
//! Every plan has images: bf16 pairs on AVX-512-BF16 in bf16 precision (a
//! slot holds two values of W, half of W's bytes), f32 strips otherwise
//! (32 wide on AVX-512, 16 on AVX2 and portable; bf16 precision there
//! keeps the rounded values in f32 slots). Tiles are written with non-temporal stores
//! (`pack_to` with `stream`, one `sfence` per tile): the next step's GEMMs
//! read them, long after AdamW, whose time goes to memory traffic, has
//! moved on.

use super::pack::{fence_streams, pack_to, PackMode};
use super::{GemmOpts, MatRef, Plan};
use crate::compute::cpu::isa::Isa;

/// Rows of W in one tile: one or two NR strips of the `Nt` image (NR 32
/// or 16), 32 steps (16 pair-steps) of the `Nn` image.
const TILE_ROWS: usize = 32;

/// Where a packed `k × n` B keeps its panels (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    k: usize,
    n: usize,
    kc: usize,
    nr: usize,
    mode: PackMode,
}

impl ImageLayout {
    /// The layout `opts`' plan reads, or None when a tile of W would not
    /// be whole strips of one image and whole steps of one K block of the
    /// other (no plan so far).
    pub fn new(k: usize, n: usize, opts: GemmOpts) -> Option<ImageLayout> {
        let plan = Plan::new(opts);
        let fits = TILE_ROWS.is_multiple_of(plan.nr) && plan.kc.is_multiple_of(TILE_ROWS);
        fits.then_some(ImageLayout { k, n, kc: plan.kc, nr: plan.nr, mode: plan.mode })
    }

    fn steps(&self, kc: usize) -> usize {
        self.mode.steps(kc)
    }

    fn strips(&self) -> usize {
        self.n.div_ceil(self.nr)
    }

    /// Slots (f32-sized) the packed B takes.
    pub fn len(&self) -> usize {
        let blocks = self.k / self.kc;
        self.strips() * self.nr * (blocks * self.steps(self.kc) + self.steps(self.k % self.kc))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset of strip `strip` of the block starting at depth `pc` (a
    /// multiple of KC).
    fn strip_offset(&self, pc: usize, strip: usize) -> usize {
        let block_steps = self.steps(self.kc.min(self.k - pc));
        (pc / self.kc) * self.strips() * self.nr * self.steps(self.kc) + strip * self.nr * block_steps
    }

    /// Offset of the panel for columns from `jc` (a multiple of NR) at depth `pc`.
    pub(super) fn panel_offset(&self, jc: usize, pc: usize) -> usize {
        self.strip_offset(pc, jc / self.nr)
    }
}

/// The two images of one `oc × c` weight, in one buffer of `buffer_len`
/// slots: a pad to the first 64-byte boundary, the `Nt` image, the `Nn`
/// image, and last the pad's length (so a buffer moved elsewhere still reads
/// right, only unaligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightImage {
    oc: usize,
    c: usize,
    nt: ImageLayout,
    nn: ImageLayout,
    isa: Isa,
}

/// Slots of pad room before the images (64 bytes).
const PAD: usize = 16;

impl WeightImage {
    /// The images `opts`' GEMMs read for an `oc × c` weight, or None when
    /// its plan has no image layout (or the weight is empty).
    pub fn new(oc: usize, c: usize, opts: GemmOpts) -> Option<WeightImage> {
        if oc == 0 || c == 0 {
            return None;
        }
        let (nt, nn) = (ImageLayout::new(c, oc, opts)?, ImageLayout::new(oc, c, opts)?);
        Some(WeightImage { oc, c, nt, nn, isa: Plan::new(opts).isa })
    }

    /// Slots a buffer for these images needs.
    pub fn buffer_len(&self) -> usize {
        PAD + self.nt.len() + self.nn.len() + 1
    }

    /// The pad's length in `buf` (written by `begin_write`).
    fn pad(&self, buf: &[f32]) -> usize {
        assert!(buf.len() >= self.buffer_len(), "weight image: buffer too short");
        let pad = buf[buf.len() - 1].to_bits() as usize;
        assert!(pad < PAD, "weight image: buffer never written");
        pad
    }

    /// The `Nt` image (B = Wᵀ, for `out = inp · Wᵀ`).
    pub fn nt<'a>(&self, buf: &'a [f32]) -> &'a [f32] {
        let pad = self.pad(buf);
        &buf[pad..pad + self.nt.len()]
    }

    /// The `Nn` image (B = W, for `dinp = dout · W`).
    pub fn nn<'a>(&self, buf: &'a [f32]) -> &'a [f32] {
        let pad = self.pad(buf);
        &buf[pad + self.nt.len()..pad + self.nt.len() + self.nn.len()]
    }

    /// Sets the pad for `buf`'s address and returns the writer of its tiles.
    pub fn begin_write<'a>(&self, buf: &'a mut [f32]) -> ImageWriter<'a> {
        assert!(buf.len() >= self.buffer_len(), "weight image: buffer too short");
        let pad = buf.as_ptr().align_offset(64).min(PAD - 1);
        let last = buf.len() - 1;
        buf[last] = f32::from_bits(pad as u32);
        ImageWriter { image: *self, base: buf[pad..].as_mut_ptr(), _buf: std::marker::PhantomData }
    }

    /// Rows of W per chunk: a chunk is `tiles_per_chunk` tiles side by side.
    pub const CHUNK_ROWS: usize = TILE_ROWS;

    /// Tiles per row chunk of W (its KC blocks of columns).
    pub fn tiles_per_chunk(&self) -> usize {
        self.c.div_ceil(self.nt.kc)
    }

    /// The columns of W tile `tile` of a chunk covers.
    pub fn tile_columns(&self, tile: usize) -> std::ops::Range<usize> {
        let c0 = tile * self.nt.kc;
        c0..(c0 + self.nt.kc).min(self.c)
    }

    /// Writes the whole of both images from `w` (parallel over row chunks).
    pub fn write(&self, buf: &mut [f32], w: &[f32]) {
        use rayon::prelude::*;
        assert!(w.len() >= self.oc * self.c, "weight image: weight too short");
        let writer = self.begin_write(buf);
        w[..self.oc * self.c].par_chunks(Self::CHUNK_ROWS * self.c).enumerate().for_each(|(ch, rows)| {
            for tile in 0..self.tiles_per_chunk() {
                writer.write_tile(rows, ch * TILE_ROWS, tile);
            }
        });
    }
}

/// Writes the tiles of one buffer's images; tiles may be written from any
/// thread, in any order, each at most once per write.
pub struct ImageWriter<'a> {
    image: WeightImage,
    base: *mut f32,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: tiles own disjoint slots of the buffer (`write_tile`), so writers
// on several threads never touch the same slot.
unsafe impl Send for ImageWriter<'_> {}
unsafe impl Sync for ImageWriter<'_> {}

impl ImageWriter<'_> {
    /// Writes both images' slots for tile `tile` (columns `tile_columns`) of
    /// the row chunk `rows` of W (`≤ 32` whole rows of `c`, starting at row
    /// `oc0`, a multiple of 32).
    pub fn write_tile(&self, rows: &[f32], oc0: usize, tile: usize) {
        let WeightImage { oc, c, nt, nn, isa } = self.image;
        assert!(oc0.is_multiple_of(TILE_ROWS) && oc0 < oc, "weight image: chunk not on a tile row");
        let h = TILE_ROWS.min(oc - oc0);
        assert!(rows.len() >= h * c, "weight image: chunk too short");
        let cols = self.image.tile_columns(tile);
        let (c0, width) = (cols.start, cols.len());
        let w = |rs, cs| MatRef { data: rows, rs, cs };
        // Nt: the strips from oc0/NR of the block at depth c0 (one with NR
        // 32, two with 16; consecutive strips of a block are contiguous):
        // the chunk's rows along k.
        let at = nt.strip_offset(c0, oc0 / nt.nr);
        let len = h.div_ceil(nt.nr) * nt.steps(width) * nt.nr;
        // SAFETY: (block c0, strips of rows oc0..oc0+h) are this tile's
        // alone; they lie inside the Nt image, which the buffer holds
        // (`begin_write`).
        let dst = unsafe { std::slice::from_raw_parts_mut(self.base.add(at), len) };
        pack_to(isa, dst, w(c, 1), 0, h, c0, width, nt.nr, nt.mode, true);
        // Nn: steps q0.. of every strip under columns c0..c0+width in the
        // block holding row oc0: the chunk's rows are k, in pairs.
        let pc = oc0 - oc0 % nn.kc;
        let q0 = nn.steps(oc0 - pc);
        let steps = nn.steps(h);
        for strip in c0 / nn.nr..(c0 + width).div_ceil(nn.nr) {
            let at = nt.len() + nn.strip_offset(pc, strip) + q0 * nn.nr;
            let j0 = strip * nn.nr;
            // SAFETY: (row chunk, strip) owns steps q0..q0+steps of the
            // strip; they lie inside the Nn image, after the Nt image.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.base.add(at), steps * nn.nr) };
            pack_to(isa, dst, w(1, c), j0, nn.nr.min(c - j0), 0, h, nn.nr, nn.mode, true);
        }
        // One fence for the tile's packs (nine at C256), not one each.
        fence_streams();
    }
}
