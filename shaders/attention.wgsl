// Causal self-attention with grouped-query heads, flash-style: no T × T
// matrix is kept (the algorithm of shaders/cuda/attention.cu). qkv is
// (b, t, W) laid out [q (nh heads) | k (nkv heads) | v (nkv heads)] with
// W = c + 2·nkv·hs; query head h reads key/value head h / (nh / nkv). The
// forward runs an online softmax over tiles of keys and saves one logsumexp
// per (b, h, t) row; the backward recomputes each probability from it, in
// two kernels: dq with each row's D = Σ p·(dout·v), then dk and dv.
//
// Tiles of rows live in workgroup memory as [rows][HQ + 1] (HQ: the head
// size rounded up to 4, zeros past hs). Products of tiles are register
// blocked: each invocation sums a 4 × 4 block of outputs. The host writes
// TQ, TK, HQ and SMEM in per kernel and head size (compute/attention_tiles.rs
// picks tiles that fit the adapter's workgroup memory). Every sum runs in a
// fixed order, and each output has one owner: deterministic, no atomics.

const THREADS: u32 = 64u;
const TQ: u32 = 32u;
const TK: u32 = 32u;
const HQ: u32 = 64u;
const SMEM: u32 = 1u;
const HP: u32 = HQ + 1u;
const SP: u32 = TK + 1u;
const NEG_BIG: f32 = -3.0e38;

struct Args {
    t: u32,
    c: u32,
    nh: u32,
    hs: u32,
    scale: f32,
    qkv_base: u32,
    out_base: u32,
    rows_base: u32,
    lse_base: u32,
    dout_base: u32,
    nkv: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // forward out | dqkv
@group(0) @binding(2) var<storage, read_write> rows: array<f32>; // forward lse | backward D
@group(0) @binding(3) var<storage, read> qkv: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;

var<workgroup> sm: array<f32, SMEM>;

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

// sm[dst + r·HP + d] = part `part` (0 q, 1 k, 2 v) of head h at position
// row0 + r of batch row b; 0 past t and past hs.
fn load_rows(dst: u32, lid: u32, b: u32, row0: u32, n: u32, part: u32, h: u32) {
    for (var i = lid; i < n * HQ; i += THREADS) {
        let r = i / HQ;
        let d = i % HQ;
        let t = row0 + r;
        var x = 0.0;
        if (t < args.t && d < args.hs) {
            x = qkv[args.qkv_base + (b * args.t + t) * width() + column(part, h) + d];
        }
        sm[dst + r * HP + d] = x;
    }
}

// As load_rows, from dout (b, t, c).
fn load_dout_rows(dst: u32, lid: u32, b: u32, row0: u32, n: u32, h: u32) {
    for (var i = lid; i < n * HQ; i += THREADS) {
        let r = i / HQ;
        let d = i % HQ;
        let t = row0 + r;
        var x = 0.0;
        if (t < args.t && d < args.hs) {
            x = dout[args.dout_base + (b * args.t + t) * args.c + h * args.hs + d];
        }
        sm[dst + r * HP + d] = x;
    }
}

// acc[a][b] += Σ_k sm[x + a·sx + k] · sm[y + b·sy + k] (rows by rows).
fn rows_by_rows(x: u32, sx: u32, y: u32, sy: u32, n: u32) -> array<vec4<f32>, 4> {
    var acc: array<vec4<f32>, 4>;
    for (var k = 0u; k < n; k++) {
        let yb = vec4(sm[y + k], sm[y + sy + k], sm[y + 2u * sy + k], sm[y + 3u * sy + k]);
        for (var a = 0u; a < 4u; a++) {
            acc[a] = fma(vec4(sm[x + a * sx + k]), yb, acc[a]);
        }
    }
    return acc;
}

// acc[a][b] += Σ_k sm[x + a·sx + k] · sm[y + k·sy + b] (rows by columns).
fn rows_by_cols(acc_in: array<vec4<f32>, 4>, x: u32, sx: u32, y: u32, sy: u32, n: u32) -> array<vec4<f32>, 4> {
    var acc = acc_in;
    for (var k = 0u; k < n; k++) {
        let o = y + k * sy;
        let yb = vec4(sm[o], sm[o + 1u], sm[o + 2u], sm[o + 3u]);
        for (var a = 0u; a < 4u; a++) {
            acc[a] = fma(vec4(sm[x + a * sx + k]), yb, acc[a]);
        }
    }
    return acc;
}

// acc[a][b] += Σ_k sm[x + k·sx + a] · sm[y + k·sy + b] (columns by columns).
fn cols_by_cols(acc_in: array<vec4<f32>, 4>, x: u32, sx: u32, y: u32, sy: u32, n: u32) -> array<vec4<f32>, 4> {
    var acc = acc_in;
    for (var k = 0u; k < n; k++) {
        let o = y + k * sy;
        let yb = vec4(sm[o], sm[o + 1u], sm[o + 2u], sm[o + 3u]);
        for (var a = 0u; a < 4u; a++) {
            acc[a] = fma(vec4(sm[x + k * sx + a]), yb, acc[a]);
        }
    }
    return acc;
}

// The 4 × 4 block at (r0, c0) of the [.][s] tile at t.
fn block_load(t: u32, s: u32, r0: u32, c0: u32) -> array<vec4<f32>, 4> {
    var acc: array<vec4<f32>, 4>;
    for (var a = 0u; a < 4u; a++) {
        let o = t + (r0 + a) * s + c0;
        acc[a] = vec4(sm[o], sm[o + 1u], sm[o + 2u], sm[o + 3u]);
    }
    return acc;
}

fn block_store(acc: array<vec4<f32>, 4>, t: u32, s: u32, r0: u32, c0: u32) {
    for (var a = 0u; a < 4u; a++) {
        let o = t + (r0 + a) * s + c0;
        sm[o] = acc[a].x;
        sm[o + 1u] = acc[a].y;
        sm[o + 2u] = acc[a].z;
        sm[o + 3u] = acc[a].w;
    }
}

// out (b, t, c), rows ← lse (b, nh, t). Workgroups (b·nh, query tiles): one
// owns TQ query rows of a head and walks the key tiles (TK = TQ) up to its
// diagonal.
@compute @workgroup_size(THREADS)
fn attention_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wid.x;
    let b = bh / args.nh;
    let h = bh % args.nh;
    let t0 = wid.y * TQ;
    let q = 0u;
    let k = q + TQ * HP;
    let v = k + TK * HP;
    let o = v + TK * HP;
    let s = o + TQ * HP;
    let m = s + TQ * SP;
    let l = m + TQ;
    let alpha = l + TQ;
    load_rows(q, lid, b, t0, TQ, 0u, h);
    for (var i = lid; i < TQ * HP; i += THREADS) {
        sm[o + i] = 0.0;
    }
    for (var r = lid; r < TQ; r += THREADS) {
        sm[m + r] = NEG_BIG;
        sm[l + r] = 0.0;
    }
    for (var u0 = 0u; u0 < t0 + TQ && u0 < args.t; u0 += TK) {
        load_rows(k, lid, b, u0, TK, 1u, h);
        load_rows(v, lid, b, u0, TK, 2u, h);
        workgroupBarrier();
        for (var i = lid; i < (TQ / 4u) * (TK / 4u); i += THREADS) {
            let r0 = i / (TK / 4u) * 4u;
            let j0 = i % (TK / 4u) * 4u;
            var acc = rows_by_rows(q + r0 * HP, HP, k + j0 * HP, HP, HQ);
            for (var a = 0u; a < 4u; a++) {
                for (var c = 0u; c < 4u; c++) {
                    var x = acc[a][c] * args.scale;
                    if (u0 + j0 + c > t0 + r0 + a) {
                        x = NEG_BIG;
                    }
                    sm[s + (r0 + a) * SP + j0 + c] = x;
                }
            }
        }
        workgroupBarrier();
        // Key 0 is in the first tile and comes before every row, so m is a
        // real score from the first tile on; a later tile wholly past a
        // row's diagonal gives it p = 0 and alpha = 1.
        for (var r = lid; r < TQ; r += THREADS) {
            var mx = sm[m + r];
            for (var j = 0u; j < TK; j++) {
                mx = max(mx, sm[s + r * SP + j]);
            }
            var sum = 0.0;
            for (var j = 0u; j < TK; j++) {
                let p = exp(sm[s + r * SP + j] - mx);
                sm[s + r * SP + j] = p;
                sum += p;
            }
            let al = exp(sm[m + r] - mx);
            sm[alpha + r] = al;
            sm[l + r] = sm[l + r] * al + sum;
            sm[m + r] = mx;
        }
        workgroupBarrier();
        for (var i = lid; i < (TQ / 4u) * (HQ / 4u); i += THREADS) {
            let r0 = i / (HQ / 4u) * 4u;
            let d0 = i % (HQ / 4u) * 4u;
            var acc = block_load(o, HP, r0, d0);
            for (var a = 0u; a < 4u; a++) {
                acc[a] *= sm[alpha + r0 + a];
            }
            acc = rows_by_cols(acc, s + r0 * SP, SP, v + d0, HP, TK);
            block_store(acc, o, HP, r0, d0);
        }
        workgroupBarrier();
    }
    for (var i = lid; i < TQ * args.hs; i += THREADS) {
        let r = i / args.hs;
        let d = i % args.hs;
        let t = t0 + r;
        if (t < args.t) {
            out[args.out_base + (b * args.t + t) * args.c + h * args.hs + d] = sm[o + r * HP + d] / sm[l + r];
        }
    }
    for (var r = lid; r < TQ; r += THREADS) {
        let t = t0 + r;
        if (t < args.t) {
            rows[args.rows_base + bh * args.t + t] = sm[m + r] + log(sm[l + r]);
        }
    }
}

// dq (+= into out, the dqkv window) and each row's D (into rows).
// Workgroups (b·nh, query tiles of TQ); two passes over the key tiles
// (TK = TQ) up to the diagonal: the first sums D, the second dq.
@compute @workgroup_size(THREADS)
fn attention_backward_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bh = wid.x;
    let b = bh / args.nh;
    let h = bh % args.nh;
    let t0 = wid.y * TQ;
    let q = 0u;
    let dO = q + TQ * HP;
    let dq = dO + TQ * HP;
    let k = dq + TQ * HP;
    let v = k + TK * HP;
    let p = v + TK * HP;
    let ls = p + TQ * SP;
    let dd = ls + TQ;
    load_rows(q, lid, b, t0, TQ, 0u, h);
    load_dout_rows(dO, lid, b, t0, TQ, h);
    for (var i = lid; i < TQ * HP; i += THREADS) {
        sm[dq + i] = 0.0;
    }
    for (var r = lid; r < TQ; r += THREADS) {
        var x = 0.0;
        if (t0 + r < args.t) {
            x = lse[args.lse_base + bh * args.t + t0 + r];
        }
        sm[ls + r] = x;
        sm[dd + r] = 0.0;
    }
    for (var sweep = 0u; sweep < 2u; sweep++) {
        for (var u0 = 0u; u0 < t0 + TQ && u0 < args.t; u0 += TK) {
            load_rows(k, lid, b, u0, TK, 1u, h);
            load_rows(v, lid, b, u0, TK, 2u, h);
            workgroupBarrier();
            for (var i = lid; i < (TQ / 4u) * (TK / 4u); i += THREADS) {
                let r0 = i / (TK / 4u) * 4u;
                let j0 = i % (TK / 4u) * 4u;
                var sc = rows_by_rows(q + r0 * HP, HP, k + j0 * HP, HP, HQ);
                var dp = rows_by_rows(dO + r0 * HP, HP, v + j0 * HP, HP, HQ);
                for (var a = 0u; a < 4u; a++) {
                    for (var c = 0u; c < 4u; c++) {
                        let r = r0 + a;
                        var pr = 0.0;
                        if (u0 + j0 + c <= t0 + r) {
                            pr = exp(sc[a][c] * args.scale - sm[ls + r]);
                        }
                        // First pass: p·dp, summed into D; second: the score gradient.
                        var x = pr * dp[a][c];
                        if (sweep == 1u) {
                            x = pr * (dp[a][c] - sm[dd + r]);
                        }
                        sm[p + r * SP + j0 + c] = x;
                    }
                }
            }
            workgroupBarrier();
            if (sweep == 0u) {
                for (var r = lid; r < TQ; r += THREADS) {
                    var acc = sm[dd + r];
                    for (var j = 0u; j < TK; j++) {
                        acc += sm[p + r * SP + j];
                    }
                    sm[dd + r] = acc;
                }
            } else {
                for (var i = lid; i < (TQ / 4u) * (HQ / 4u); i += THREADS) {
                    let r0 = i / (HQ / 4u) * 4u;
                    let d0 = i % (HQ / 4u) * 4u;
                    let acc = rows_by_cols(block_load(dq, HP, r0, d0), p + r0 * SP, SP, k + d0, HP, TK);
                    block_store(acc, dq, HP, r0, d0);
                }
            }
            workgroupBarrier();
        }
    }
    let w = width();
    for (var i = lid; i < TQ * args.hs; i += THREADS) {
        let r = i / args.hs;
        let d = i % args.hs;
        let t = t0 + r;
        if (t < args.t) {
            let at = args.out_base + (b * args.t + t) * w + column(0u, h) + d;
            out[at] += sm[dq + r * HP + d] * args.scale;
        }
    }
    for (var r = lid; r < TQ; r += THREADS) {
        if (t0 + r < args.t) {
            rows[args.rows_base + bh * args.t + t0 + r] = sm[dd + r];
        }
    }
}

// dk and dv (+= into out, the dqkv window) of key/value head g.
// Workgroups (b·nkv, key tiles of TK); one owns TK keys and walks, for each
// query head of g's group in order, the query tiles of TQ from its diagonal
// to the end.
@compute @workgroup_size(THREADS)
fn attention_backward_kv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.x / args.nkv;
    let g = wid.x % args.nkv;
    let per_kv = args.nh / args.nkv;
    let u0 = wid.y * TK;
    let k = 0u;
    let v = k + TK * HP;
    let dk = v + TK * HP;
    let dv = dk + TK * HP;
    let q = dv + TK * HP;
    let dO = q + TQ * HP;
    let p = dO + TQ * HP;
    let ds = p + TQ * SP;
    let ls = ds + TQ * SP;
    let dd = ls + TQ;
    // The group's first query head reads this key/value head.
    load_rows(k, lid, b, u0, TK, 1u, g * per_kv);
    load_rows(v, lid, b, u0, TK, 2u, g * per_kv);
    for (var i = lid; i < TK * HP; i += THREADS) {
        sm[dk + i] = 0.0;
        sm[dv + i] = 0.0;
    }
    for (var h = g * per_kv; h < (g + 1u) * per_kv; h++) {
        let bh = b * args.nh + h;
        for (var t0 = u0; t0 < args.t; t0 += TQ) {
            load_rows(q, lid, b, t0, TQ, 0u, h);
            load_dout_rows(dO, lid, b, t0, TQ, h);
            for (var r = lid; r < TQ; r += THREADS) {
                var x = 0.0;
                var y = 0.0;
                if (t0 + r < args.t) {
                    x = lse[args.lse_base + bh * args.t + t0 + r];
                    y = rows[args.rows_base + bh * args.t + t0 + r];
                }
                sm[ls + r] = x;
                sm[dd + r] = y;
            }
            workgroupBarrier();
            for (var i = lid; i < (TQ / 4u) * (TK / 4u); i += THREADS) {
                let r0 = i / (TK / 4u) * 4u;
                let j0 = i % (TK / 4u) * 4u;
                var sc = rows_by_rows(q + r0 * HP, HP, k + j0 * HP, HP, HQ);
                var dp = rows_by_rows(dO + r0 * HP, HP, v + j0 * HP, HP, HQ);
                for (var a = 0u; a < 4u; a++) {
                    for (var c = 0u; c < 4u; c++) {
                        let r = r0 + a;
                        let j = j0 + c;
                        var pr = 0.0;
                        if (t0 + r < args.t && u0 + j <= t0 + r) {
                            pr = exp(sc[a][c] * args.scale - sm[ls + r]);
                        }
                        sm[p + r * SP + j] = pr;
                        sm[ds + r * SP + j] = pr * (dp[a][c] - sm[dd + r]);
                    }
                }
            }
            workgroupBarrier();
            for (var i = lid; i < (TK / 4u) * (HQ / 4u); i += THREADS) {
                let j0 = i / (HQ / 4u) * 4u;
                let d0 = i % (HQ / 4u) * 4u;
                let gv = cols_by_cols(block_load(dv, HP, j0, d0), p + j0, SP, dO + d0, HP, TQ);
                block_store(gv, dv, HP, j0, d0);
                let gk = cols_by_cols(block_load(dk, HP, j0, d0), ds + j0, SP, q + d0, HP, TQ);
                block_store(gk, dk, HP, j0, d0);
            }
            workgroupBarrier();
        }
    }
    let w = width();
    let kvc = args.nkv * args.hs;
    for (var i = lid; i < TK * args.hs; i += THREADS) {
        let j = i / args.hs;
        let d = i % args.hs;
        let t = u0 + j;
        if (t < args.t) {
            let at = args.out_base + (b * args.t + t) * w + args.c + g * args.hs + d;
            out[at] += sm[dk + j * HP + d] * args.scale;
            out[at + kvc] += sm[dv + j * HP + d];
        }
    }
}
