//! The fused attention kernels against the materialised reference, on every
//! instruction-set path, with rows shorter and longer than a key block.

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
        AttentionShape { b: 2, t: 5, c: 12, nh: 3 },
        AttentionShape { b: 1, t: 1, c: 8, nh: 2 },
        AttentionShape { b: 2, t: 70, c: 16, nh: 2 },
        AttentionShape { b: 1, t: 150, c: 64, nh: 1 },
    ];
    for isa in Isa::supported_paths() {
        for (n, s) in shapes.into_iter().enumerate() {
            let AttentionShape { b, t, c, nh } = s;
            let what = format!("{isa} {s:?}");
            let qkv = values(b * t * 3 * c, 10 + n as u64, 2.0);
            let (mut want_out, mut att) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
            reference_forward(Isa::Portable, &mut want_out, &mut att, &qkv, s);
            let (mut out, mut lse) = (vec![0.0; b * t * c], vec![0.0; scratch_len(s)]);
            forward(isa, &mut out, &mut lse, &qkv, s);
            assert_close(&format!("{what} out"), &out, &want_out, 1e-6, 1e-5);
            // every probability recomputed from its row's logsumexp
            let hs = c / nh;
            for bh in 0..b * nh {
                let (bi, h) = (bh / nh, bh % nh);
                for q in 0..t {
                    for k in 0..=q {
                        let qv = &qkv[(bi * t + q) * 3 * c + h * hs..][..hs];
                        let kv = &qkv[(bi * t + k) * 3 * c + c + h * hs..][..hs];
                        let sc: f32 = qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f32>() / (hs as f32).sqrt();
                        let p = (sc - lse[bh * t + q]).exp();
                        let w = att[(bh * t + q) * t + k];
                        assert!((p - w).abs() <= 1e-5 + 1e-4 * w, "{what} p[{bh},{q},{k}]: {p} vs {w}");
                    }
                }
            }
            let dout = values(b * t * c, 20 + n as u64, 1.0);
            let mut want_d = values(b * t * 3 * c, 30 + n as u64, 0.1);
            let mut got_d = want_d.clone();
            reference_backward(Isa::Portable, &mut want_d, &dout, &qkv, &att, s);
            backward(isa, true, &mut got_d, &dout, &qkv, &lse, s);
            assert_close(&format!("{what} dqkv"), &got_d, &want_d, 1e-5, 1e-4);
        }
    }
}

#[test]
fn fused_attention_is_bit_identical_across_thread_counts() {
    let s = AttentionShape { b: 2, t: 90, c: 32, nh: 4 };
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
    let s = AttentionShape { b: 1, t: 37, c: 128, nh: 2 };
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
