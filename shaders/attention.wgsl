// Causal multi-head attention over qkv (b, t, (nh + 2·nkv)·hs) laid out
// [q (nh heads) | k (nkv heads) | v (nkv heads)], query head h reading
// key/value head h / (nh / nkv) (grouped-query attention; nkv = nh is
// GPT-2's [q | k | v] of c each), keeping the softmaxed scores att
// (b, nh, t, t) for the backward pass.
// One workgroup per (query row, batch·head). Reductions (row max and sum,
// softmax dot) use a fixed tree in workgroup memory; the backward first
// writes the score gradients to a scratch tensor, then a second dispatch has
// each workgroup own one row's q, k and v gradients, so nothing is scattered
// and no atomics are needed.

const WG: u32 = 64u;
const NEG_BIG: f32 = -3.0e38;

struct Args {
    t: u32,
    c: u32,
    nh: u32,
    hs: u32,
    scale: f32,
    qkv_base: u32,
    out_base: u32,
    att_base: u32,
    att_in_base: u32,
    dout_base: u32,
    nkv: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // forward out | dqkv
@group(0) @binding(2) var<storage, read_write> scores: array<f32>; // forward att | backward dpre scratch
@group(0) @binding(3) var<storage, read> qkv: array<f32>;
@group(0) @binding(4) var<storage, read> att: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;

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

// Floats of one position's qkv row.
fn width() -> u32 {
    return args.c + 2u * args.nkv * args.hs;
}

// Column of part (0 q, 1 k, 2 v) of query head h: its own q, its group's k and v.
fn column(part: u32, h: u32) -> u32 {
    if (part == 0u) {
        return h * args.hs;
    }
    let kvh = h / (args.nh / args.nkv);
    return args.c + ((part - 1u) * args.nkv + kvh) * args.hs;
}

// Element `d` of part (0 q, 1 k, 2 v) for batch b, position t, query head h.
fn qkv_at(b: u32, t: u32, part: u32, h: u32, d: u32) -> f32 {
    return qkv[args.qkv_base + (b * args.t + t) * width() + column(part, h) + d];
}

fn dout_at(b: u32, t: u32, h: u32, d: u32) -> f32 {
    return dout[args.dout_base + (b * args.t + t) * args.c + h * args.hs + d];
}

@compute @workgroup_size(WG)
fn attention_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.x;
    let bh = wid.y;
    let b = bh / args.nh;
    let h = bh % args.nh;
    let row = args.att_base + (bh * args.t + t) * args.t;
    var local_max = NEG_BIG;
    for (var t2 = lid; t2 <= t; t2 += WG) {
        var s = 0.0;
        for (var d = 0u; d < args.hs; d++) {
            s = fma(qkv_at(b, t, 0u, h, d), qkv_at(b, t2, 1u, h, d), s);
        }
        s *= args.scale;
        scores[row + t2] = s;
        local_max = max(local_max, s);
    }
    let row_max = tree(lid, local_max, true);
    var local_sum = 0.0;
    for (var t2 = lid; t2 <= t; t2 += WG) {
        let e = exp(scores[row + t2] - row_max);
        scores[row + t2] = e;
        local_sum += e;
    }
    let inv = 1.0 / tree(lid, local_sum, false);
    for (var t2 = lid; t2 < args.t; t2 += WG) {
        if (t2 <= t) {
            scores[row + t2] *= inv;
        } else {
            scores[row + t2] = 0.0;
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var d = lid; d < args.hs; d += WG) {
        var acc = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            acc = fma(scores[row + t2], qkv_at(b, t2, 2u, h, d), acc);
        }
        out[args.out_base + (b * args.t + t) * args.c + h * args.hs + d] = acc;
    }
}

// scores <- dpre[t, t2] = att[t, t2] * (datt[t2] - Σ att·datt) * scale, t2 <= t.
@compute @workgroup_size(WG)
fn attention_backward_scores(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.x;
    let bh = wid.y;
    let b = bh / args.nh;
    let h = bh % args.nh;
    let row = (bh * args.t + t) * args.t;
    var local_dot = 0.0;
    for (var t2 = lid; t2 <= t; t2 += WG) {
        var datt = 0.0;
        for (var d = 0u; d < args.hs; d++) {
            datt = fma(dout_at(b, t, h, d), qkv_at(b, t2, 2u, h, d), datt);
        }
        scores[args.att_base + row + t2] = datt;
        local_dot = fma(att[args.att_in_base + row + t2], datt, local_dot);
    }
    let s_dot = tree(lid, local_dot, false);
    for (var t2 = lid; t2 <= t; t2 += WG) {
        let a = att[args.att_in_base + row + t2];
        scores[args.att_base + row + t2] = a * (scores[args.att_base + row + t2] - s_dot) * args.scale;
    }
}

// Workgroup r owns dq[r] of one query head, and dk[r], dv[r] of its
// key/value head when it is the first of its group (summed over the group's
// heads in order):
// dq[r] += Σ_{t2<=r} dpre[r,t2] k[t2]; dk[r] += Σ_heads Σ_{t>=r} dpre[t,r] q[t];
// dv[r] += Σ_heads Σ_{t>=r} att[t,r] dout[t].
@compute @workgroup_size(WG)
fn attention_backward_qkv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = wid.x;
    let bh = wid.y;
    let b = bh / args.nh;
    let h = bh % args.nh;
    let head = bh * args.t * args.t;
    let group = args.nh / args.nkv;
    let row = args.out_base + (b * args.t + r) * width();
    for (var d = lid; d < args.hs; d += WG) {
        var dq = 0.0;
        for (var t2 = 0u; t2 <= r; t2++) {
            dq = fma(scores[args.att_base + head + r * args.t + t2], qkv_at(b, t2, 1u, h, d), dq);
        }
        out[row + column(0u, h) + d] += dq;
        if (h % group == 0u) {
            var dk = 0.0;
            var dv = 0.0;
            for (var g = 0u; g < group; g++) {
                let hg = h + g;
                let head_g = (bh + g) * args.t * args.t;
                for (var t = r; t < args.t; t++) {
                    dk = fma(scores[args.att_base + head_g + t * args.t + r], qkv_at(b, t, 0u, hg, d), dk);
                    dv = fma(att[args.att_in_base + head_g + t * args.t + r], dout_at(b, t, hg, d), dv);
                }
            }
            out[row + column(1u, h) + d] += dk;
            out[row + column(2u, h) + d] += dv;
        }
    }
}
