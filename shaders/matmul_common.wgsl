// What every matmul kernel shares (every storage access of theirs goes
// through a_at, b_at and store_c); the host appends it to each one's source
// (pipelines::kernel_source; module-scope declarations may come in any
// order, and a kernel's `enable` directives must stay first). C(M,N) = [C +] [bias] + A(M,K) · B(K,N)
// over strided views: element (i,k) of A lives at a_base + i*a_rs + k*a_cs.

struct Args {
    m: u32,
    n: u32,
    k: u32,
    flags: u32, // bit 0: accumulate into C, bit 1: add bias(N)
    a_base: u32,
    a_rs: u32,
    a_cs: u32,
    b_base: u32,
    b_rs: u32,
    b_cs: u32,
    c_base: u32,
    c_rs: u32,
    bias_base: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> c_out: array<f32>;
@group(0) @binding(2) var<storage, read> a_in: array<f32>;
@group(0) @binding(3) var<storage, read> b_in: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

// Element (i, k) of A and (k, j) of B: 0 outside the product (a tile's rows,
// columns or k past M, N or K), so partial tiles multiply as whole ones.
fn a_at(i: u32, k: u32) -> f32 {
    if (i < args.m && k < args.k) {
        return a_in[args.a_base + i * args.a_rs + k * args.a_cs];
    }
    return 0.0;
}

fn b_at(k: u32, j: u32) -> f32 {
    if (j < args.n && k < args.k) {
        return b_in[args.b_base + k * args.b_rs + j * args.b_cs];
    }
    return 0.0;
}

// Writes the sum v for output (i, j) of C, adding the bias and accumulating
// into C as the flags say; outside the product it writes nothing.
fn store_c(i: u32, j: u32, v: f32) {
    if (i >= args.m || j >= args.n) {
        return;
    }
    let at = args.c_base + i * args.c_rs + j;
    var out = v;
    if ((args.flags & 2u) != 0u) {
        out += bias[args.bias_base + j];
    }
    if ((args.flags & 1u) != 0u) {
        out += c_out[at];
    }
    c_out[at] = out;
}

// v rounded to the nearest f16 (ties to even), saturating at ±65504, kept in
// an f32: what every kernel's f16 mode multiplies, so the tiled kernels and
// the cooperative one's f16 fragments hold the same values (the conversion
// to f16 after it is exact, whatever the driver's rounding mode). In bits,
// not through pack2x16float, which naga allows only with f16-in-f32 support
// and which leaves out-of-range values undefined.
fn round_to_f16(v: f32) -> f32 {
    let c = clamp(v, -65504.0, 65504.0);
    if (abs(c) < 6.103515625e-5) {
        // f16 subnormals: multiples of 2^-24.
        return round(c * 16777216.0) / 16777216.0;
    }
    let bits = bitcast<u32>(c);
    return bitcast<f32>((bits + 0xfffu + ((bits >> 13u) & 1u)) & 0xffffe000u);
}
