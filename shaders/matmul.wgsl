// Matmul family: C(M,N) = [C +] [bias] + A(M,K) · B(K,N), register- and
// workgroup-tiled. Every operand is a strided view (element (i,k) of A lives at
// a_base + i*a_rs + k*a_cs), so one kernel serves the NT (forward), NN (input
// gradient) and TN (weight gradient) layouts; the loads pick the coalesced
// order from whichever stride is 1. Tile sizes are the consts below; the host
// rewrites these lines with the configuration chosen for the adapter and
// the run's precision. Each invocation owns a 4 × 4 register tile: THREAD_M
// and THREAD_N must be 4.

const TILE_M: u32 = 64u;
const TILE_N: u32 = 64u;
const TILE_K: u32 = 16u;
const THREAD_M: u32 = 4u;
const THREAD_N: u32 = 4u;
const ROUND_F16: bool = false;

const WG_X: u32 = TILE_N / THREAD_N;
const WG_Y: u32 = TILE_M / THREAD_M;
const THREADS: u32 = WG_X * WG_Y;

var<workgroup> a_tile: array<f32, TILE_K * TILE_M>; // [k][m]
var<workgroup> b_tile: array<f32, TILE_K * TILE_N>; // [k][n]

// f16 mode (the host sets ROUND_F16): inputs rounded as the cooperative
// kernel's fragments hold them.
fn round_input(v: f32) -> f32 {
    if (ROUND_F16) {
        return round_to_f16(v);
    }
    return v;
}

fn load_a(row0: u32, k0: u32, lid: u32) {
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
        a_tile[kk * TILE_M + i] = round_input(a_at(row0 + i, k0 + kk));
    }
}

fn load_b(col0: u32, k0: u32, lid: u32) {
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
        b_tile[kk * TILE_N + j] = round_input(b_at(k0 + kk, col0 + j));
    }
}

@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lx = lid3.x;
    let ly = lid3.y;
    let lid = ly * WG_X + lx;
    let row0 = wid.y * TILE_M;
    let col0 = wid.x * TILE_N;

    // The 4 × 4 register tile as four vec4 rows, not a dynamically indexed
    // array (a driver may keep such an array in local memory, not registers).
    // Each element still sums fma(a, b, acc) over k in order, so the bits are
    // those of a scalar loop.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);

    for (var k0 = 0u; k0 < args.k; k0 += TILE_K) {
        load_a(row0, k0, lid);
        load_b(col0, k0, lid);
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk++) {
            let ak = kk * TILE_M + ly;
            let bk = kk * TILE_N + lx;
            let b = vec4<f32>(b_tile[bk], b_tile[bk + WG_X], b_tile[bk + 2u * WG_X], b_tile[bk + 3u * WG_X]);
            acc0 = fma(vec4<f32>(a_tile[ak]), b, acc0);
            acc1 = fma(vec4<f32>(a_tile[ak + WG_Y]), b, acc1);
            acc2 = fma(vec4<f32>(a_tile[ak + 2u * WG_Y]), b, acc2);
            acc3 = fma(vec4<f32>(a_tile[ak + 3u * WG_Y]), b, acc3);
        }
        workgroupBarrier();
    }

    var acc = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var tm = 0u; tm < THREAD_M; tm++) {
        for (var tn = 0u; tn < THREAD_N; tn++) {
            store_c(row0 + tm * WG_Y + ly, col0 + tn * WG_X + lx, acc[tm][tn]);
        }
    }
}
