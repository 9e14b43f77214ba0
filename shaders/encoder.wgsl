// Encoder family: token + position embedding and its gradients.
// The token-embedding table may be split into row windows [v0, v1) when the
// adapter cannot bind it whole; each dispatch touches only tokens inside its
// window. The token buffer holds, after the ids, the positions grouped by
// token (stable order) so the backward sums each token's rows in position
// order without atomics, exactly as the CPU backend does.
//
// tokens layout: ids[bt] | order[bt] | group_token[groups] | group_start[groups + 1]

struct Args {
    c: u32,
    t: u32,
    row0: u32,
    rows: u32,
    v0: u32,
    v1: u32,
    out_base: u32,
    wte_base: u32,
    wpe_base: u32,
    dout_base: u32,
    order_off: u32,
    group_token_off: u32,
    group_start_off: u32,
    group0: u32,
    groups: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // encoded | dwte | dwpe
@group(0) @binding(2) var<storage, read> tokens: array<u32>;
@group(0) @binding(3) var<storage, read> wte: array<f32>;
@group(0) @binding(4) var<storage, read> wpe: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;

// out[row, :] = wte[tok, :] + wpe[row % t, :] for rows whose token is in [v0, v1).
@compute @workgroup_size(64)
fn encoder_forward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ch = gid.x;
    let r = gid.y;
    if (ch >= args.c || r >= args.rows) {
        return;
    }
    let row = args.row0 + r;
    let tok = tokens[row];
    if (tok < args.v0 || tok >= args.v1) {
        return;
    }
    let pos = row % args.t;
    out[args.out_base + r * args.c + ch] =
        wte[args.wte_base + (tok - args.v0) * args.c + ch] + wpe[args.wpe_base + pos * args.c + ch];
}

// out is dwpe: dwpe[t, ch] += Σ_b dout[b, t, ch], batch rows in order.
@compute @workgroup_size(64)
fn encoder_backward_positions(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ch = gid.x;
    let pos = gid.y;
    if (ch >= args.c || pos >= args.t) {
        return;
    }
    let at = args.out_base + pos * args.c + ch;
    var acc = out[at];
    for (var b = 0u; b < args.rows / args.t; b++) {
        acc += dout[args.dout_base + (b * args.t + pos) * args.c + ch];
    }
    out[at] = acc;
}

// out is dwte's window [v0, v1): dwte[tok, ch] += dout[p, ch] for each
// position p holding tok, positions in order.
@compute @workgroup_size(64)
fn encoder_backward_tokens(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ch = gid.x;
    let g = args.group0 + gid.y;
    if (ch >= args.c || gid.y >= args.groups) {
        return;
    }
    let tok = tokens[args.group_token_off + g];
    if (tok < args.v0 || tok >= args.v1) {
        return;
    }
    let at = args.out_base + (tok - args.v0) * args.c + ch;
    var acc = out[at];
    let end = tokens[args.group_start_off + g + 1u];
    for (var k = tokens[args.group_start_off + g]; k < end; k++) {
        let p = tokens[args.order_off + k];
        acc += dout[args.dout_base + p * args.c + ch];
    }
    out[at] = acc;
}
