// Residual connection, elementwise over a window of `n` floats:
// out = a + b. The backward needs no kernel: each branch's backward adds
// into the residual stream's gradient.

struct Args {
    n: u32,
    out_base: u32,
    a_base: u32,
    b_base: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;

@compute @workgroup_size(256)
fn residual_forward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= args.n) {
        return;
    }
    out[args.out_base + i] = a[args.a_base + i] + b[args.b_base + i];
}
