// Matmul family, wide register tile: C(M,N) = [C +] [bias] + A(M,K) · B(K,N)
// with the arguments, bindings and bits of matmul.wgsl (each output sums
// fma(a, b, acc) over k in order), for large grids on hardware GPUs. A
// workgroup of 16 × 16 invocations owns a 128 × 128 block of C; each
// invocation owns 8 × 8 outputs: rows 4·ty..4·ty+3 and 64+4·ty..64+4·ty+3,
// columns likewise from tx, so its four workgroup-memory reads per k are
// whole vec4s that neighbouring invocations take side by side. The next K
// tile's global loads are issued into registers before the current tile is
// multiplied, so their latency hides behind the arithmetic.

const TILE: u32 = 128u;
const TILE_K: u32 = 8u;
const THREADS: u32 = 256u;
const PER_THREAD: u32 = TILE * TILE_K / THREADS; // 4 elements of A and of B
const ROUND_F16: bool = false; // rewritten by the host in f16 mode
const VEC_ROW: u32 = TILE / 4u; // vec4s in one k row of a tile
// A k row's stride in vec4s: one more than the row, so the 8 invocations that
// stage one row's 8 k values write 8 different banks.
const VEC_STRIDE: u32 = VEC_ROW + 1u;

var<workgroup> a_tile: array<vec4<f32>, TILE_K * VEC_STRIDE>; // [k][m / 4]
var<workgroup> b_tile: array<vec4<f32>, TILE_K * VEC_STRIDE>; // [k][n / 4]

// f16 mode (the host sets ROUND_F16): inputs rounded as the cooperative
// kernel's fragments hold them.
fn round_input(v: f32) -> f32 {
    if (ROUND_F16) {
        return round_to_f16(v);
    }
    return v;
}

// Element e of this invocation's share of a tile: (row or column, k). The
// walk follows whichever stride is 1, so a subgroup's loads are coalesced.
fn a_coord(idx: u32) -> vec2<u32> {
    if (args.a_cs == 1u) {
        return vec2<u32>(idx / TILE_K, idx % TILE_K);
    }
    return vec2<u32>(idx % TILE, idx / TILE);
}

fn b_coord(idx: u32) -> vec2<u32> {
    if (args.b_cs == 1u) {
        return vec2<u32>(idx % TILE, idx / TILE);
    }
    return vec2<u32>(idx / TILE_K, idx % TILE_K);
}

fn fetch_a(row0: u32, k0: u32, lid: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var e = 0u; e < PER_THREAD; e++) {
        let at = a_coord(lid + e * THREADS);
        v[e] = a_at(row0 + at.x, k0 + at.y);
    }
    return v;
}

fn fetch_b(col0: u32, k0: u32, lid: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var e = 0u; e < PER_THREAD; e++) {
        let at = b_coord(lid + e * THREADS);
        v[e] = b_at(k0 + at.y, col0 + at.x);
    }
    return v;
}

fn stage(va: vec4<f32>, vb: vec4<f32>, lid: u32) {
    for (var e = 0u; e < PER_THREAD; e++) {
        let at = a_coord(lid + e * THREADS);
        a_tile[at.y * VEC_STRIDE + at.x / 4u][at.x % 4u] = round_input(va[e]);
        let bt = b_coord(lid + e * THREADS);
        b_tile[bt.y * VEC_STRIDE + bt.x / 4u][bt.x % 4u] = round_input(vb[e]);
    }
}

fn write_row(gi: u32, col0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    for (var t = 0u; t < 4u; t++) {
        store_c(gi, col0 + t, lo[t]);
        store_c(gi, col0 + 64u + t, hi[t]);
    }
}

@compute @workgroup_size(16, 16, 1)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let tx = lid3.x;
    let ty = lid3.y;
    let lid = ty * 16u + tx;
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;

    // Row r of the register tile in two vec4s (columns 4·tx.. and 64+4·tx..),
    // named, not an indexed array, so they stay in registers.
    var c0l = vec4<f32>(0.0);
    var c0h = vec4<f32>(0.0);
    var c1l = vec4<f32>(0.0);
    var c1h = vec4<f32>(0.0);
    var c2l = vec4<f32>(0.0);
    var c2h = vec4<f32>(0.0);
    var c3l = vec4<f32>(0.0);
    var c3h = vec4<f32>(0.0);
    var c4l = vec4<f32>(0.0);
    var c4h = vec4<f32>(0.0);
    var c5l = vec4<f32>(0.0);
    var c5h = vec4<f32>(0.0);
    var c6l = vec4<f32>(0.0);
    var c6h = vec4<f32>(0.0);
    var c7l = vec4<f32>(0.0);
    var c7h = vec4<f32>(0.0);

    var va = fetch_a(row0, 0u, lid);
    var vb = fetch_b(col0, 0u, lid);
    for (var k0 = 0u; k0 < args.k; k0 += TILE_K) {
        stage(va, vb, lid);
        workgroupBarrier();
        if (k0 + TILE_K < args.k) {
            va = fetch_a(row0, k0 + TILE_K, lid);
            vb = fetch_b(col0, k0 + TILE_K, lid);
        }
        for (var kk = 0u; kk < TILE_K; kk++) {
            let a_lo = a_tile[kk * VEC_STRIDE + ty];
            let a_hi = a_tile[kk * VEC_STRIDE + 16u + ty];
            let b_lo = b_tile[kk * VEC_STRIDE + tx];
            let b_hi = b_tile[kk * VEC_STRIDE + 16u + tx];
            c0l = fma(vec4<f32>(a_lo.x), b_lo, c0l);
            c0h = fma(vec4<f32>(a_lo.x), b_hi, c0h);
            c1l = fma(vec4<f32>(a_lo.y), b_lo, c1l);
            c1h = fma(vec4<f32>(a_lo.y), b_hi, c1h);
            c2l = fma(vec4<f32>(a_lo.z), b_lo, c2l);
            c2h = fma(vec4<f32>(a_lo.z), b_hi, c2h);
            c3l = fma(vec4<f32>(a_lo.w), b_lo, c3l);
            c3h = fma(vec4<f32>(a_lo.w), b_hi, c3h);
            c4l = fma(vec4<f32>(a_hi.x), b_lo, c4l);
            c4h = fma(vec4<f32>(a_hi.x), b_hi, c4h);
            c5l = fma(vec4<f32>(a_hi.y), b_lo, c5l);
            c5h = fma(vec4<f32>(a_hi.y), b_hi, c5h);
            c6l = fma(vec4<f32>(a_hi.z), b_lo, c6l);
            c6h = fma(vec4<f32>(a_hi.z), b_hi, c6h);
            c7l = fma(vec4<f32>(a_hi.w), b_lo, c7l);
            c7h = fma(vec4<f32>(a_hi.w), b_hi, c7h);
        }
        workgroupBarrier();
    }

    let r0 = row0 + 4u * ty;
    let r1 = row0 + 64u + 4u * ty;
    let cb = col0 + 4u * tx;
    write_row(r0, cb, c0l, c0h);
    write_row(r0 + 1u, cb, c1l, c1h);
    write_row(r0 + 2u, cb, c2l, c2h);
    write_row(r0 + 3u, cb, c3l, c3h);
    write_row(r1, cb, c4l, c4h);
    write_row(r1 + 1u, cb, c5l, c5h);
    write_row(r1 + 2u, cb, c6l, c6h);
    write_row(r1 + 3u, cb, c7l, c7h);
}
