// LayerNorm family over rows of `c` channels (eps = 1e-5).
// Forward and the input gradient: one workgroup per row, row statistics by a
// fixed tree in workgroup memory. Weight and bias gradients: a workgroup of
// 32 × 4 invocations per 32 channels, invocation (x, y) summing rows y,
// y + 4, … of channel x in order and (x, 0) adding the four partials in
// order of y: no atomics and a fixed summation order.

const WG: u32 = 128u;
const EPS: f32 = 1e-5;

struct Args {
    rows: u32,
    c: u32,
    row0: u32,
    inp_base: u32,
    out_base: u32,
    dout_base: u32,
    stat_base: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // forward out | dinp
@group(0) @binding(2) var<storage, read_write> mean: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> inp: array<f32>;
@group(0) @binding(5) var<storage, read> weight: array<f32>;
@group(0) @binding(6) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<storage, read> dout: array<f32>;

// Backward, parameter gradients (only `layernorm_backward_params` binds these).
@group(0) @binding(8) var<storage, read_write> dweight: array<f32>;
@group(0) @binding(9) var<storage, read_write> dbias: array<f32>;

var<workgroup> red_a: array<f32, WG>;
var<workgroup> red_b: array<f32, WG>;

fn tree_sum2(lid: u32, a: f32, b: f32) -> vec2<f32> {
    red_a[lid] = a;
    red_b[lid] = b;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            red_a[lid] += red_a[lid + stride];
            red_b[lid] += red_b[lid + stride];
        }
        workgroupBarrier();
    }
    let r = vec2<f32>(red_a[0], red_b[0]);
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn layernorm_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = args.row0 + wid.x;
    let x0 = args.inp_base + row * args.c;
    let cf = f32(args.c);
    var s = 0.0;
    for (var j = lid; j < args.c; j += WG) {
        s += inp[x0 + j];
    }
    let mu = tree_sum2(lid, s, 0.0).x / cf;
    var ss = 0.0;
    for (var j = lid; j < args.c; j += WG) {
        let d = inp[x0 + j] - mu;
        ss = fma(d, d, ss);
    }
    let var_ = tree_sum2(lid, ss, 0.0).x / cf;
    let rs = 1.0 / sqrt(var_ + EPS);
    let o0 = args.out_base + row * args.c;
    for (var j = lid; j < args.c; j += WG) {
        out[o0 + j] = (inp[x0 + j] - mu) * rs * weight[j] + bias[j];
    }
    if (lid == 0u) {
        mean[args.stat_base + row] = mu;
        rstd[args.stat_base + row] = rs;
    }
}

// out is dinp: dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd.
@compute @workgroup_size(WG)
fn layernorm_backward_input(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = args.row0 + wid.x;
    let x0 = args.inp_base + row * args.c;
    let d0 = args.dout_base + row * args.c;
    let mu = mean[args.stat_base + row];
    let rs = rstd[args.stat_base + row];
    var a = 0.0;
    var b = 0.0;
    for (var j = lid; j < args.c; j += WG) {
        let norm = (inp[x0 + j] - mu) * rs;
        let dnorm = weight[j] * dout[d0 + j];
        a += dnorm;
        b = fma(dnorm, norm, b);
    }
    let sums = tree_sum2(lid, a, b) / f32(args.c);
    let o0 = args.out_base + row * args.c;
    for (var j = lid; j < args.c; j += WG) {
        let norm = (inp[x0 + j] - mu) * rs;
        let dnorm = weight[j] * dout[d0 + j];
        out[o0 + j] += (dnorm - sums.x - norm * sums.y) * rs;
    }
}

// Rows [row0, row0 + rows): a workgroup per PCOLS channels, PLANES row lanes.
const PCOLS: u32 = 32u;
const PLANES: u32 = 4u; // PCOLS · PLANES = WG: the partials live in red_a, red_b

@compute @workgroup_size(32, 4)
fn layernorm_backward_params(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let j = wid.x * PCOLS + lid.x;
    var dw = 0.0;
    var db = 0.0;
    if (j < args.c) {
        for (var r = lid.y; r < args.rows; r += PLANES) {
            let row = args.row0 + r;
            let mu = mean[args.stat_base + row];
            let rs = rstd[args.stat_base + row];
            let d = dout[args.dout_base + row * args.c + j];
            dw += (inp[args.inp_base + row * args.c + j] - mu) * rs * d;
            db += d;
        }
    }
    red_a[lid.y * PCOLS + lid.x] = dw;
    red_b[lid.y * PCOLS + lid.x] = db;
    workgroupBarrier();
    if (lid.y == 0u && j < args.c) {
        var sw = 0.0;
        var sb = 0.0;
        for (var l = 0u; l < PLANES; l++) {
            sw += red_a[l * PCOLS + lid.x];
            sb += red_b[l * PCOLS + lid.x];
        }
        dweight[j] += sw;
        dbias[j] += sb;
    }
}
