// AdamW (decoupled weight decay) over a window of `n` parameters. The gradient
// is scaled first by the clip factor the grad-norm kernel left on the device
// in stats[scale_slot]; the bias corrections come precomputed from the host.

struct Args {
    n: u32,
    param_base: u32,
    grad_base: u32,
    m_base: u32,
    v_base: u32,
    scale_slot: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias_correction1: f32,
    bias_correction2: f32,
}

@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;

@compute @workgroup_size(256)
fn adamw_update(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= args.n) {
        return;
    }
    let g = grad[args.grad_base + i] * stats[args.scale_slot];
    let mi = args.beta1 * m[args.m_base + i] + (1.0 - args.beta1) * g;
    let vi = args.beta2 * v[args.v_base + i] + (1.0 - args.beta2) * g * g;
    m[args.m_base + i] = mi;
    v[args.v_base + i] = vi;
    let mhat = mi / args.bias_correction1;
    let vhat = vi / args.bias_correction2;
    let p = param[args.param_base + i];
    param[args.param_base + i] = p - args.lr * (mhat / (sqrt(vhat) + args.eps) + args.weight_decay * p);
}
