// Reductions, deterministic: no atomics, two passes in a fixed order.
// Pass 1 (`reduce_partials`): each workgroup sums (or sums the squares of) one
// block of BLOCK consecutive elements with a fixed tree and writes one
// partial. Pass 2 (`reduce_final`): one workgroup folds the partials the same
// way into out[out_base] * scale. `grad_clip_scale` turns the per-tensor
// squared norms into the global norm and the clipping factor.
// `reduce_columns` adds the column sums of an (n, cols) window into out (the
// bias gradient): a workgroup of 32 × 8 invocations per 32 columns,
// invocation (x, y) summing rows y, y + 8, … of column x in order and (x, 0)
// adding the eight partials in order of y.

const WG: u32 = 256u;
const ITEMS: u32 = 16u;
const BLOCK: u32 = WG * ITEMS;

struct Args {
    n: u32,
    inp_base: u32,
    out_base: u32,
    square: u32,
    scale: f32,
    norm_slot: u32,
    scale_slot: u32,
    max_norm: f32,
    cols: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;

var<workgroup> scratch: array<f32, WG>;

fn tree_sum(lid: u32, x: f32) -> f32 {
    scratch[lid] = x;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            scratch[lid] += scratch[lid + stride];
        }
        workgroupBarrier();
    }
    return scratch[0];
}

@compute @workgroup_size(WG)
fn reduce_partials(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let start = wid.x * BLOCK;
    var acc = 0.0;
    for (var r = 0u; r < ITEMS; r++) {
        let i = start + r * WG + lid;
        if (i < args.n) {
            let x = inp[args.inp_base + i];
            if (args.square != 0u) {
                acc = fma(x, x, acc);
            } else {
                acc += x;
            }
        }
    }
    let total = tree_sum(lid, acc);
    if (lid == 0u) {
        out[args.out_base + wid.x] = total;
    }
}

@compute @workgroup_size(WG)
fn reduce_final(@builtin(local_invocation_index) lid: u32) {
    var acc = 0.0;
    for (var i = lid; i < args.n; i += WG) {
        acc += inp[args.inp_base + i];
    }
    let total = tree_sum(lid, acc);
    if (lid == 0u) {
        out[args.out_base] = total * args.scale;
    }
}

@compute @workgroup_size(1)
fn grad_clip_scale() {
    var total = 0.0;
    for (var i = 0u; i < args.n; i++) {
        total += inp[args.inp_base + i];
    }
    // Gradients held 1/scale times their value (a loss scale; 1 without).
    let norm = sqrt(total) * args.scale;
    out[args.norm_slot] = norm;
    var factor = 1.0;
    if (args.max_norm > 0.0 && norm > args.max_norm) {
        factor = args.max_norm / (norm + 1e-6);
    }
    out[args.scale_slot] = args.scale * factor;
}

// out[j] += Σ_i inp[i * cols + j]; a workgroup per COLS columns, LANES row lanes.
const COLS: u32 = 32u;
const LANES: u32 = 8u; // COLS · LANES = WG: the partials live in scratch

@compute @workgroup_size(32, 8)
fn reduce_columns(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let j = wid.x * COLS + lid.x;
    var acc = 0.0;
    if (j < args.cols) {
        for (var i = lid.y; i < args.n; i += LANES) {
            acc += inp[args.inp_base + i * args.cols + j];
        }
    }
    scratch[lid.y * COLS + lid.x] = acc;
    workgroupBarrier();
    if (lid.y == 0u && j < args.cols) {
        var sum = 0.0;
        for (var l = 0u; l < LANES; l++) {
            sum += scratch[l * COLS + lid.x];
        }
        out[args.out_base + j] += sum;
    }
}
