// GELU family (tanh approximation), elementwise over a window of `n` floats.
// The tanh argument is clamped to ±TANH_CLAMP (as on the CPU backend) so no
// driver's tanh ever sees an argument where it could overflow; the backward
// treats the clamped region as flat (derivative of tanh is 0 there).

const GELU_SCALE: f32 = 0.7978846; // sqrt(2/pi)
const TANH_CLAMP: f32 = 10.0;

struct Args {
    n: u32,
    out_base: u32,
    inp_base: u32,
    dout_base: u32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;

fn tanh_arg(x: f32) -> f32 {
    return GELU_SCALE * (x + 0.044715 * x * x * x);
}

@compute @workgroup_size(256)
fn gelu_forward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= args.n) {
        return;
    }
    let x = inp[args.inp_base + i];
    let u = clamp(tanh_arg(x), -TANH_CLAMP, TANH_CLAMP);
    out[args.out_base + i] = 0.5 * x * (1.0 + tanh(u));
}

// out is dinp here: dinp += gelu'(inp) * dout.
@compute @workgroup_size(256)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= args.n) {
        return;
    }
    let x = inp[args.inp_base + i];
    let u = tanh_arg(x);
    let th = tanh(clamp(u, -TANH_CLAMP, TANH_CLAMP));
    var sech2 = 0.0;
    if (abs(u) < TANH_CLAMP) {
        sech2 = 1.0 - th * th;
    }
    let grad = 0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
    out[args.out_base + i] += grad * dout[args.dout_base + i];
}
