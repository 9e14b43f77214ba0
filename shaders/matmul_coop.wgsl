// Matmul family on cooperative matrices (tensor cores, WMMA, simdgroup
// matrices): C(M,N) = [C +] [bias] + A(M,K) · B(K,N) with f16 inputs and f32
// accumulation, the arguments and bindings of matmul.wgsl. A and B stay f32
// in memory; each K tile of 32 is staged into workgroup memory rounded to
// f16 (ties to even, saturating at ±65504, as the tiled kernels' f16 mode
// rounds), and
// every subgroup multiplies its 32 × 32 block of C as 2 × 2 16×16 fragments.
// The host picks it only where the adapter has 16×16×16 f16→f32 subgroup
// matrices and 32-wide subgroups (a subgroup is invocations 32·s..32·s+31),
// and rewrites SG_M and SG_N for the tile it wants. The sum over k is the
// hardware's order: the same on every run on one GPU, not the tiled
// kernels' bits.

enable f16;
enable wgpu_cooperative_matrix;

const SG_M: u32 = 2u; // subgroups along M
const SG_N: u32 = 2u; // subgroups along N
const TILE_M: u32 = 32u * SG_M;
const TILE_N: u32 = 32u * SG_N;
const TILE_K: u32 = 32u;
const THREADS: u32 = 32u * SG_M * SG_N;
// Row strides of the staged tiles in halves: 8 past the row keeps every
// fragment row 16-byte aligned and spreads a fragment's rows over banks.
const A_STRIDE: u32 = TILE_K + 8u;
const B_STRIDE: u32 = TILE_N + 8u;

var<workgroup> a_tile: array<f16, TILE_M * A_STRIDE>; // [m][k]
var<workgroup> b_tile: array<f16, TILE_K * B_STRIDE>; // [k][n]
var<workgroup> c_stage: array<f32, 256u * SG_M * SG_N>; // one 16×16 fragment per subgroup

fn to_f16(v: f32) -> f16 {
    return f16(round_to_f16(v));
}

fn stage_a(row0: u32, k0: u32, lid: u32) {
    for (var idx = lid; idx < TILE_M * TILE_K; idx += THREADS) {
        var i: u32;
        var kk: u32;
        if (args.a_cs == 1u) {
            i = idx / TILE_K;
            kk = idx % TILE_K;
        } else {
            kk = idx / TILE_M;
            i = idx % TILE_M;
        }
        a_tile[i * A_STRIDE + kk] = to_f16(a_at(row0 + i, k0 + kk));
    }
}

fn stage_b(col0: u32, k0: u32, lid: u32) {
    for (var idx = lid; idx < TILE_N * TILE_K; idx += THREADS) {
        var j: u32;
        var kk: u32;
        if (args.b_cs == 1u) {
            kk = idx / TILE_N;
            j = idx % TILE_N;
        } else {
            j = idx / TILE_K;
            kk = idx % TILE_K;
        }
        b_tile[kk * B_STRIDE + j] = to_f16(b_at(k0 + kk, col0 + j));
    }
}

// Writes the 16×16 fragment a subgroup stored at c_stage[base..] to C's
// block at (row, col); each of the 32 invocations writes 8 of its elements.
fn write_fragment(base: u32, row: u32, col: u32, lane: u32) {
    for (var idx = lane; idx < 256u; idx += 32u) {
        store_c(row + idx / 16u, col + idx % 16u, c_stage[base + idx]);
    }
}

@compute @workgroup_size(THREADS, 1, 1)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row0 = wid.y * TILE_M;
    let col0 = wid.x * TILE_N;
    let sg = lid / 32u;
    let lane = lid % 32u;
    let sm = sg / SG_N;
    let sn = sg % SG_N;

    var acc00 = coop_mat16x16<f32, C>();
    var acc01 = coop_mat16x16<f32, C>();
    var acc10 = coop_mat16x16<f32, C>();
    var acc11 = coop_mat16x16<f32, C>();

    let sa = A_STRIDE;
    let sb = B_STRIDE;
    for (var k0 = 0u; k0 < args.k; k0 += TILE_K) {
        stage_a(row0, k0, lid);
        stage_b(col0, k0, lid);
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk += 16u) {
            let ia0 = sm * 32u * A_STRIDE + kk;
            let ia1 = ia0 + 16u * A_STRIDE;
            let ib0 = kk * B_STRIDE + sn * 32u;
            let ib1 = ib0 + 16u;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a_tile[ia0], sa);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a_tile[ia1], sa);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[ib0], sb);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[ib1], sb);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
        }
        workgroupBarrier();
    }

    // Out through this subgroup's staging fragment, one accumulator at a time.
    let base = sg * 256u;
    let s16 = 16u;
    let row = row0 + sm * 32u;
    let col = col0 + sn * 32u;
    coopStoreT(acc00, &c_stage[base], s16);
    workgroupBarrier();
    write_fragment(base, row, col, lane);
    workgroupBarrier();
    coopStoreT(acc01, &c_stage[base], s16);
    workgroupBarrier();
    write_fragment(base, row, col + 16u, lane);
    workgroupBarrier();
    coopStoreT(acc10, &c_stage[base], s16);
    workgroupBarrier();
    write_fragment(base, row + 16u, col, lane);
    workgroupBarrier();
    coopStoreT(acc11, &c_stage[base], s16);
    workgroupBarrier();
    write_fragment(base, row + 16u, col + 16u, lane);
}
