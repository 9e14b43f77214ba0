// The Llama architecture's kernels: RMSNorm (eps = 1e-5), rotary position
// embeddings (Hugging Face's rotate-half layout) and the SwiGLU gate.
// RMSNorm: one workgroup per row, the row's sums by a fixed tree in
// workgroup memory; the weight gradient by a workgroup of 32 × 4
// invocations per 32 channels, invocation (x, y) summing rows y, y + 4, …
// in order and (x, 0) adding the four partials in order (no atomics).
// RoPE: one invocation per channel pair of a head of a row, in place; the
// angle pos·θ^(−2i/hs) is reduced to [−π, π] before cos and sin.
// SwiGLU: one invocation per output element.

const WG: u32 = 128u;
const EPS: f32 = 1e-5;
const TWO_PI: f32 = 6.2831855;

struct Args {
    rows: u32,
    c: u32,
    inp_base: u32,
    out_base: u32,
    dout_base: u32,
    stat_base: u32,
    // rope: positions per sequence, heads rotated (q then k), head size,
    // floats per row, first row of the window, log2 θ, direction (±1 as f32 bits)
    t: u32,
    heads: u32,
    hs: u32,
    width: u32,
    row0: u32,
    log2_theta: f32,
    sign: f32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // forward out | dinp | rope tensor
@group(0) @binding(2) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> inp: array<f32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
// RMSNorm's weight gradient (only `rmsnorm_backward_params` binds it).
@group(0) @binding(6) var<storage, read_write> dweight: array<f32>;

var<workgroup> red: array<f32, WG>;

fn tree_sum(lid: u32, x: f32) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            red[lid] += red[lid + stride];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn rmsnorm_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x;
    let x0 = args.inp_base + row * args.c;
    var ss = 0.0;
    for (var j = lid; j < args.c; j += WG) {
        let x = inp[x0 + j];
        ss = fma(x, x, ss);
    }
    let rs = 1.0 / sqrt(tree_sum(lid, ss) / f32(args.c) + EPS);
    let o0 = args.out_base + row * args.c;
    for (var j = lid; j < args.c; j += WG) {
        out[o0 + j] = inp[x0 + j] * rs * weight[j];
    }
    if (lid == 0u) {
        rstd[args.stat_base + row] = rs;
    }
}

// out is dinp: dinp += rs·w·d − x·rs³·mean(w·d·x).
@compute @workgroup_size(WG)
fn rmsnorm_backward_input(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x;
    let x0 = args.inp_base + row * args.c;
    let d0 = args.dout_base + row * args.c;
    let rs = rstd[args.stat_base + row];
    var dot = 0.0;
    for (var j = lid; j < args.c; j += WG) {
        dot = fma(weight[j] * dout[d0 + j], inp[x0 + j], dot);
    }
    let coef = rs * rs * rs * tree_sum(lid, dot) / f32(args.c);
    let o0 = args.out_base + row * args.c;
    for (var j = lid; j < args.c; j += WG) {
        out[o0 + j] += rs * weight[j] * dout[d0 + j] - inp[x0 + j] * coef;
    }
}

const PCOLS: u32 = 32u;
const PLANES: u32 = 4u; // PCOLS · PLANES = WG: the partials live in `red`

@compute @workgroup_size(32, 4)
fn rmsnorm_backward_params(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let j = wid.x * PCOLS + lid.x;
    var dw = 0.0;
    if (j < args.c) {
        for (var r = lid.y; r < args.rows; r += PLANES) {
            let x = inp[args.inp_base + r * args.c + j];
            dw = fma(dout[args.dout_base + r * args.c + j] * x, rstd[args.stat_base + r], dw);
        }
    }
    red[lid.y * PCOLS + lid.x] = dw;
    workgroupBarrier();
    if (lid.y == 0u && j < args.c) {
        var s = 0.0;
        for (var l = 0u; l < PLANES; l++) {
            s += red[l * PCOLS + lid.x];
        }
        dweight[j] += s;
    }
}

// In place on `out`: pair (i, i + hs/2) of head `head` of window row `r`
// rotated by sign·pos·θ^(−2i/hs), pos = (row0 + r) mod t.
@compute @workgroup_size(64)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let half = args.hs / 2u;
    let k = gid.x;
    if (k >= half * args.heads) {
        return;
    }
    let r = wid.y;
    let head = k / half;
    let i = k % half;
    let pos = (args.row0 + r) % args.t;
    let inv_freq = exp2(-f32(2u * i) / f32(args.hs) * args.log2_theta);
    let a = f32(pos) * inv_freq;
    let angle = a - TWO_PI * floor(a / TWO_PI + 0.5);
    let cs = cos(angle);
    let sn = args.sign * sin(angle);
    let at = args.out_base + r * args.width + head * args.hs + i;
    let x0 = out[at];
    let x1 = out[at + half];
    out[at] = x0 * cs - x1 * sn;
    out[at + half] = x1 * cs + x0 * sn;
}

// out(rows, c) = silu(gate)·up; inp rows are [gate (c) | up (c)].
@compute @workgroup_size(256)
fn swiglu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let j = gid.x;
    if (j >= args.c) {
        return;
    }
    let r = wid.y;
    let g = inp[args.inp_base + r * 2u * args.c + j];
    let u = inp[args.inp_base + r * 2u * args.c + args.c + j];
    let sig = 1.0 / (1.0 + exp(-g));
    out[args.out_base + r * args.c + j] = g * sig * u;
}

// out is dinp (rows, 2c), written: [dgate | dup] of silu(gate)·up given dout.
@compute @workgroup_size(256)
fn swiglu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let j = gid.x;
    if (j >= args.c) {
        return;
    }
    let r = wid.y;
    let at = args.inp_base + r * 2u * args.c + j;
    let g = inp[at];
    let u = inp[at + args.c];
    let d = dout[args.dout_base + r * args.c + j];
    let sig = 1.0 / (1.0 + exp(-g));
    let o = args.out_base + r * 2u * args.c + j;
    out[o] = d * u * sig * (1.0 + g * (1.0 - sig));
    out[o + args.c] = d * g * sig;
}
