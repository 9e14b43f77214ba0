//! The fused attention kernels against the materialised reference, on every
//! instruction-set path, with rows shorter and longer than a key block, and
//! with key/value heads shared by groups of query heads (GQA).

use super::*;

fn values(len: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut rng = crate::model::rng::Rng::new(seed);
    (0..len).map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * amp).collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= atol + rtol * w.abs(), "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn fused_attention_matches_the_materialised_reference_on_every_path() {
    let shapes = [
        AttentionShape::mha(2, 5, 12, 3),
        AttentionShape::mha(1, 1, 8, 2),
        AttentionShape::mha(2, 70, 16, 2),
        AttentionShape::mha(1, 150, 64, 1),
        AttentionShape { b: 2, t: 37, c: 16, nh: 4, nkv: 2 },
        AttentionShape { b: 1, t: 70, c: 24, nh: 6, nkv: 1 },
    ];
    for isa in Isa::supported_paths() {
        for (n, s) in shapes.into_iter().enumerate() {
            let AttentionShape { b, t, c, nh, nkv } = s;
            let w = s.qkv_width();
            let what = format!("{isa} {s:?}");
            let qkv = values(b * t * w, 10 + n as u64, 2.0);
            let (mut want_out, mut att) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
            reference_forward(Isa::Portable, &mut want_out, &mut att, &qkv, s);
            let (mut out, mut lse) = (vec![0.0; b * t * c], vec![0.0; scratch_len(s)]);
            forward(isa, &mut out, &mut lse, &qkv, s);
            assert_close(&format!("{what} out"), &out, &want_out, 1e-6, 1e-5);
            // every probability recomputed from its row's logsumexp
            let hs = c / nh;
            for bh in 0..b * nh {
                let (bi, h) = (bh / nh, bh % nh);
                let kvh = h / (nh / nkv);
                for q in 0..t {
                    for k in 0..=q {
                        let qv = &qkv[(bi * t + q) * w + h * hs..][..hs];
                        let kv = &qkv[(bi * t + k) * w + c + kvh * hs..][..hs];
                        let sc: f32 = qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f32>() / (hs as f32).sqrt();
                        let p = (sc - lse[bh * t + q]).exp();
                        let w = att[(bh * t + q) * t + k];
                        assert!((p - w).abs() <= 1e-5 + 1e-4 * w, "{what} p[{bh},{q},{k}]: {p} vs {w}");
                    }
                }
            }
            let dout = values(b * t * c, 20 + n as u64, 1.0);
            let mut want_d = values(b * t * w, 30 + n as u64, 0.1);
            let mut got_d = want_d.clone();
            reference_backward(Isa::Portable, &mut want_d, &dout, &qkv, &att, s);
            backward(isa, true, &mut got_d, &dout, &qkv, &lse, s);
            assert_close(&format!("{what} dqkv"), &got_d, &want_d, 1e-5, 1e-4);
        }
    }
}

#[test]
fn fused_attention_is_bit_identical_across_thread_counts() {
    let s = AttentionShape::mha(2, 90, 32, 4);
    let qkv = values(2 * 90 * 96, 5, 1.5);
    let dout = values(2 * 90 * 32, 6, 1.0);
    let run = |threads: usize, isa: Isa| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
        pool.install(|| {
            let (mut out, mut lse, mut d) =
                (vec![0.0; 2 * 90 * 32], vec![0.0; scratch_len(s)], vec![0.0; 2 * 90 * 96]);
            forward(isa, &mut out, &mut lse, &qkv, s);
            backward(isa, true, &mut d, &dout, &qkv, &lse, s);
            (out, lse, d)
        })
    };
    for isa in Isa::supported_paths() {
        assert_eq!(run(1, isa), run(3, isa), "{isa}");
    }
}

#[test]
fn fused_attention_gives_the_same_bits_on_every_path() {
    let s = AttentionShape::mha(1, 37, 128, 2);
    let qkv = values(37 * 3 * 128, 7, 1.5);
    let dout = values(37 * 128, 8, 1.0);
    let run = |isa: Isa| {
        let (mut out, mut lse, mut d) =
            (vec![0.0; 37 * 128], vec![0.0; scratch_len(s)], vec![0.0; 37 * 3 * 128]);
        forward(isa, &mut out, &mut lse, &qkv, s);
        backward(isa, true, &mut d, &dout, &qkv, &lse, s);
        [out, lse, d].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
    };
    let want = run(Isa::Portable);
    for isa in Isa::supported_paths() {
        assert!(run(isa) == want, "{isa} differs from portable");
    }
}

/// Grouped-query attention is multi-head attention with each key/value head
/// repeated for its group: the same outputs, and the repeated heads'
/// gradients summed give the shared head's.
#[test]
fn grouped_query_attention_equals_repeated_key_value_heads() {
    let (b, t, nh, nkv, hs) = (2, 19, 4, 2, 8);
    let c = nh * hs;
    let gqa = AttentionShape { b, t, c, nh, nkv };
    let mha = AttentionShape::mha(b, t, c, nh);
    let qkv = values(b * t * gqa.qkv_width(), 41, 1.5);
    // Each row's k and v heads repeated for their groups.
    let group = nh / nkv;
    let mut wide = vec![0.0; b * t * 3 * c];
    for row in 0..b * t {
        let (src, dst) = (&qkv[row * gqa.qkv_width()..], &mut wide[row * 3 * c..]);
        dst[..c].copy_from_slice(&src[..c]);
        for h in 0..nh {
            for part in 1..3 {
                let from = c + ((part - 1) * nkv + h / group) * hs;
                dst[part * c + h * hs..][..hs].copy_from_slice(&src[from..][..hs]);
            }
        }
    }
    let dout = values(b * t * c, 42, 1.0);
    for isa in Isa::supported_paths() {
        let (mut out_g, mut lse_g) = (vec![0.0; b * t * c], vec![0.0; scratch_len(gqa)]);
        forward(isa, &mut out_g, &mut lse_g, &qkv, gqa);
        let (mut out_m, mut lse_m) = (vec![0.0; b * t * c], vec![0.0; scratch_len(mha)]);
        forward(isa, &mut out_m, &mut lse_m, &wide, mha);
        assert_eq!(out_g, out_m, "{isa}: outputs");
        let mut d_g = vec![0.0; b * t * gqa.qkv_width()];
        backward(isa, false, &mut d_g, &dout, &qkv, &lse_g, gqa);
        let mut d_m = vec![0.0; b * t * 3 * c];
        backward(isa, false, &mut d_m, &dout, &wide, &lse_m, mha);
        for row in 0..b * t {
            let (g, m) = (&d_g[row * gqa.qkv_width()..], &d_m[row * 3 * c..]);
            assert_eq!(&g[..c], &m[..c], "{isa}: dq of row {row}");
            for part in 1..3 {
                for kvh in 0..nkv {
                    for j in 0..hs {
                        let want: f32 = (0..group).map(|i| m[part * c + (kvh * group + i) * hs + j]).sum();
                        let got = g[c + ((part - 1) * nkv + kvh) * hs + j];
                        assert!(
                            (got - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                            "{isa}: part {part} row {row}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
