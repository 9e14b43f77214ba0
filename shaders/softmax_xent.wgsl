// Fused softmax + cross-entropy over the first `v` of `vp` columns per row.
// Forward: one workgroup per row; max and sum by a fixed tree; padded
// columns get probability 0; the loss is ln(sum) + max - logit[target], taken
// from the logits so it keeps precision when a probability underflows.
// Backward: one invocation per (row, column): dlogits += (p - onehot) * dloss.

const WG: u32 = 256u;
const NEG_BIG: f32 = -3.0e38;

struct Args {
    rows: u32,
    v: u32,
    vp: u32,
    row0: u32,
    logits_base: u32,
    probs_base: u32,
    losses_base: u32,
    dloss: f32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> probs: array<f32>; // forward probs | backward dlogits
@group(0) @binding(2) var<storage, read_write> losses: array<f32>;
@group(0) @binding(3) var<storage, read> logits: array<f32>; // forward logits | backward probs
@group(0) @binding(4) var<storage, read> targets: array<u32>;

var<workgroup> red: array<f32, WG>;

fn tree(lid: u32, x: f32, take_max: bool) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            if (take_max) {
                red[lid] = max(red[lid], red[lid + stride]);
            } else {
                red[lid] += red[lid + stride];
            }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(WG)
fn softmax_xent_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = wid.x;
    let l0 = args.logits_base + r * args.vp;
    let p0 = args.probs_base + r * args.vp;
    var local_max = NEG_BIG;
    for (var j = lid; j < args.v; j += WG) {
        local_max = max(local_max, logits[l0 + j]);
    }
    let row_max = tree(lid, local_max, true);
    var local_sum = 0.0;
    for (var j = lid; j < args.v; j += WG) {
        let e = exp(logits[l0 + j] - row_max);
        probs[p0 + j] = e;
        local_sum += e;
    }
    let sum = tree(lid, local_sum, false);
    let inv = 1.0 / sum;
    for (var j = lid; j < args.vp; j += WG) {
        if (j < args.v) {
            probs[p0 + j] *= inv;
        } else {
            probs[p0 + j] = 0.0;
        }
    }
    if (lid == 0u) {
        let tgt = min(targets[args.row0 + r], args.v - 1u);
        losses[args.losses_base + r] = log(sum) + row_max - logits[l0 + tgt];
    }
}

// probs binding is dlogits here, logits binding is probs.
@compute @workgroup_size(WG)
fn softmax_xent_backward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if (j >= args.v || r >= args.rows) {
        return;
    }
    let tgt = targets[args.row0 + r];
    var ind = 0.0;
    if (j == tgt) {
        ind = 1.0;
    }
    let at = args.probs_base + r * args.vp + j;
    probs[at] += (logits[args.logits_base + r * args.vp + j] - ind) * args.dloss;
}
