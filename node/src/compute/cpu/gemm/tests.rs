//! GEMM tests: every layout, odd shapes, every instruction-set path and both
//! precisions against an f64 reference; determinism across thread counts.

use super::*;
use crate::compute::cpu::isa::round_bf16;

fn naive(m: usize, n: usize, k: usize, a: MatRef, b: MatRef, round: bool) -> Vec<f64> {
    let r = |x: f32| if round { round_bf16(x) as f64 } else { x as f64 };
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| r(a.at(i, p)) * r(b.at(p, j))).sum();
        }
    }
    c
}

fn fill(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
}

fn every_opts() -> Vec<GemmOpts> {
    let mut v = Vec::new();
    for isa in Isa::supported_paths() {
        for precision in [Precision::Fp32, Precision::Bf16] {
            v.push(GemmOpts { isa, precision });
        }
    }
    v
}

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (3, 40, 9),
    (7, 17, 3),
    (13, 33, 300),
    (29, 70, 513),
    (100, 530, 70),
    (14, 32, 256),
    (300, 70, 40),
    // A column split (3 tiles of 14) over many strips and several k blocks.
    (29, 530, 600),
];

#[test]
fn every_path_matches_f64_for_all_layouts_and_odd_shapes() {
    for opts in every_opts() {
        let bf16 = opts.precision == Precision::Bf16;
        for &(m, n, k) in SHAPES {
            let a_rm = fill(m * k, 1);
            let b_rm = fill(k * n, 2);
            // row-major and transposed views of the same logical matrices
            let a_cm: Vec<f32> = (0..m * k).map(|x| a_rm[(x % m) * k + x / m]).collect();
            let b_cm: Vec<f32> = (0..k * n).map(|x| b_rm[(x % k) * n + x / k]).collect();
            let a_views = [MatRef { data: &a_rm, rs: k, cs: 1 }, MatRef { data: &a_cm, rs: 1, cs: m }];
            let b_views = [MatRef { data: &b_rm, rs: n, cs: 1 }, MatRef { data: &b_cm, rs: 1, cs: k }];
            let want = naive(m, n, k, a_views[0], b_views[0], bf16);
            let bias = fill(n, 5);
            // fp32 sums of k products; bf16 products are exact in fp32
            let tol = |w: f64| 2e-6 * (k as f64).sqrt() * (1.0 + w.abs()) + 1e-6 * k as f64 * 1e-2;
            for a in a_views {
                for b in b_views {
                    let ctx = format!("{opts:?} m{m} n{n} k{k} a.rs{} b.rs{}", a.rs, b.rs);
                    let mut c = vec![0.5f32; m * n];
                    gemm(m, n, k, a, b, &mut c, n, Init::Accumulate, opts);
                    for (x, w) in c.iter().zip(&want) {
                        assert!((*x as f64 - (w + 0.5)).abs() < tol(*w), "{ctx}: {x} vs {}", w + 0.5);
                    }
                    gemm(m, n, k, a, b, &mut c, n, Init::Overwrite, opts);
                    for (x, w) in c.iter().zip(&want) {
                        assert!((*x as f64 - w).abs() < tol(*w), "{ctx}: {x} vs {w}");
                    }
                    gemm(m, n, k, a, b, &mut c, n, Init::Bias(&bias), opts);
                    for (idx, (x, w)) in c.iter().zip(&want).enumerate() {
                        let w = w + bias[idx % n] as f64;
                        assert!((*x as f64 - w).abs() < tol(w), "{ctx} bias: {x} vs {w}");
                    }
                }
            }
        }
    }
}

/// A stored along k (packed in rows, or read in place, for the `_a_rows` kernels) and
/// the same A stored along the rows (packed as steps) give the same bits:
/// the kernels form the same products in the same order either way.
#[test]
fn a_packed_in_rows_gives_the_bits_of_a_packed_in_steps() {
    for opts in every_opts() {
        for &(m, n, k) in SHAPES {
            let a_rm = fill(m * k, 1);
            let a_cm: Vec<f32> = (0..m * k).map(|x| a_rm[(x % m) * k + x / m]).collect();
            let b_rm = fill(k * n, 2);
            let b_cm: Vec<f32> = (0..k * n).map(|x| b_rm[(x % k) * n + x / k]).collect();
            let along_k = MatRef { data: &a_rm, rs: k, cs: 1 };
            let along_rows = MatRef { data: &a_cm, rs: 1, cs: m };
            for b in [MatRef { data: &b_rm, rs: n, cs: 1 }, MatRef { data: &b_cm, rs: 1, cs: k }] {
                if m < SMALL_M && b.rs == 1 && opts.precision == Precision::Fp32 {
                    continue; // dot products, no packing (another order of sums)
                }
                let run = |a| {
                    let mut c = fill(m * n, 3);
                    gemm(m, n, k, a, b, &mut c, n, Init::Accumulate, opts);
                    bits(&c)
                };
                assert_eq!(run(along_k), run(along_rows), "{opts:?} m{m} n{n} k{k} b.rs{}", b.rs);
            }
        }
    }
}

/// An fp32 A stored along k is read in place (no packing) where its rows
/// do not alias in L1 and the kernel's reads past its last row stay inside
/// the buffer, and packed otherwise; both give the bits of the same A packed from another
/// stride, on one thread (row blocks) and two (column groups).
#[test]
fn a_read_in_place_gives_the_bits_of_a_packed() {
    // packed rows' stride, a stride of its own, the 124M shape's qkv, and
    // one that aliases in L1 (packed)
    for (row, opts) in
        [mk::A_ROW, 300, 768, 1024].into_iter().flat_map(|r| every_opts().into_iter().map(move |o| (r, o)))
    {
        let plan = Plan::new(opts);
        for (m, n, k) in [
            (1, 40, 256),
            (5, 33, 200),
            (13, 70, 256),
            (14, 32, 256),
            (19, 64, 7),
            (256, 96, 256),
            (257, 40, 100),
        ] {
            // rows k + 3 apart: never A_ROW, so always packed
            let ks = k + 3;
            let tight = fill(m * ks, 4);
            let b = fill(k * n, 5);
            let b = MatRef { data: &b, rs: n, cs: 1 };
            // The same rows `row` apart: the buffer ends at the last row's
            // k-th value, or runs on past the kernel's last read.
            for extra in [0, 14 * row] {
                let mut spaced = vec![f32::NAN; (m - 1) * row + k + extra];
                for i in 0..m {
                    spaced[i * row..i * row + k].copy_from_slice(&tight[i * ks..i * ks + k]);
                }
                let a = MatRef { data: &spaced, rs: row, cs: 1 };
                let last = (m - 1) / plan.mr * plan.mr;
                let reads_past = last + (plan.rows_read)(m - last) > m;
                let want_in_place = plan.row_kernel.is_some()
                    && plan.mode == PackMode::F32
                    && (extra > 0 || !reads_past)
                    && !row.is_multiple_of(IN_PLACE_ALIAS);
                let in_place = ARows::for_a(&plan, a, m, k) == ARows::InPlace(row);
                assert_eq!(in_place, want_in_place, "{opts:?} row{row} m{m} k{k} extra{extra}");
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                    let run = |a| {
                        let mut c = fill(m * n, 6);
                        pool.install(|| gemm(m, n, k, a, b, &mut c, n, Init::Accumulate, opts));
                        bits(&c)
                    };
                    let ctx = format!("{opts:?} row{row} m{m} n{n} k{k} extra{extra} threads{threads}");
                    assert_eq!(run(a), run(MatRef { data: &tight, rs: ks, cs: 1 }), "{ctx}");
                }
            }
        }
    }
}

/// A stored along its rows and B along n (the weight gradient's layout)
/// are read in place on the fp32 AVX-512 plans; the same matrices stored
/// the other way round are packed. Both give the same bits: K blocks,
/// masked column tails, short row tiles, every `Init`, 1–3 threads.
#[test]
fn operands_read_in_place_give_the_bits_of_packed_ones() {
    let mut in_place_plans = 0;
    for opts in every_opts() {
        let plan = Plan::new(opts);
        in_place_plans += plan.strided_kernel.is_some() as usize;
        // Last strips of 1 (m = 1, 29), 5 (4 + 1: m = 5, 19), 12 (8 + 4:
        // m = 26, 12) and 4 rows (256).
        for &(m, n, k) in &[
            (1, 1, 1),
            (5, 33, 300),
            (19, 70, 513),
            (256, 96, 256),
            (29, 17, 40),
            (26, 50, 300),
            (12, 32, 64),
        ] {
            let (a_rows, b_rows) = (fill(m * k, 7), fill(k * n, 8));
            // A(i, p) and B(p, j) both ways: along rows / n, and along k.
            let a_cm: Vec<f32> = (0..m * k).map(|x| a_rows[(x % m) * k + x / m]).collect();
            let b_cm: Vec<f32> = (0..k * n).map(|x| b_rows[(x % n) * k + x / n]).collect();
            let lying = (MatRef { data: &a_cm, rs: 1, cs: m }, MatRef { data: &b_cm, rs: n, cs: 1 });
            let packed = (MatRef { data: &a_rows, rs: k, cs: 1 }, MatRef { data: &b_rows, rs: 1, cs: k });
            let bias = fill(n, 9);
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                for (name, init) in
                    [("acc", Init::Accumulate), ("over", Init::Overwrite), ("bias", Init::Bias(&bias))]
                {
                    let run = |(a, b): (MatRef, MatRef)| {
                        let mut c = fill(m * n, 10);
                        pool.install(|| gemm(m, n, k, a, b, &mut c, n, init, opts));
                        bits(&c)
                    };
                    let ctx = format!("{opts:?} m{m} n{n} k{k} {name} threads{threads}");
                    assert_eq!(run(lying), run(packed), "{ctx}");
                    let mut c = fill(m * n, 10);
                    let (a, b) = lying;
                    let ran = pool.install(|| in_place::gemm_in_place(&plan, m, n, k, a, b, &mut c, n, init));
                    assert_eq!(ran, plan.strided_kernel.is_some(), "{ctx}: read in place");
                    if ran {
                        assert_eq!(bits(&c), run(packed), "{ctx}: in place directly");
                    }
                }
            }
        }
    }
    assert_eq!(in_place_plans > 0, Isa::widest().is_avx512(), "in place exactly on the AVX-512 fp32 plans");
}

#[test]
fn bf16_really_rounds_the_inputs() {
    // 1 + 2^-9 rounds to 1 in bf16: the product must be exactly 1.
    let a = vec![1.0 + 1.0 / 512.0; 20 * 4];
    let b = vec![1.0f32; 4 * 40];
    for isa in Isa::supported_paths() {
        let mut c = vec![0f32; 20 * 40];
        let opts = GemmOpts { isa, precision: Precision::Bf16 };
        gemm(
            20,
            40,
            4,
            MatRef { data: &a, rs: 4, cs: 1 },
            MatRef { data: &b, rs: 40, cs: 1 },
            &mut c,
            40,
            Init::Overwrite,
            opts,
        );
        assert!(c.iter().all(|x| *x == 4.0), "{isa}: {}", c[0]);
        let opts = GemmOpts { isa, precision: Precision::Fp32 };
        gemm(
            20,
            40,
            4,
            MatRef { data: &a, rs: 4, cs: 1 },
            MatRef { data: &b, rs: 40, cs: 1 },
            &mut c,
            40,
            Init::Overwrite,
            opts,
        );
        assert!(c.iter().all(|x| *x > 4.0), "{isa}");
    }
}

#[test]
fn each_path_gives_the_same_bits_with_any_thread_count() {
    // Units of rows (`schedule`) on one thread and at 700 rows; 256 × 96
    // with A read in place (fp32 AVX2 and AVX-512) in units of columns on
    // 2–4 threads; k spans several K blocks.
    for (m, n, k) in [(200, 300, 600), (700, 90, 300), (256, 96, 300)] {
        let a = fill(m * k, 7);
        let b = fill(n * k, 8);
        let run = |threads: usize, opts: GemmOpts| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            pool.install(|| {
                let mut c = vec![0f32; m * n];
                let (av, bv) = (MatRef { data: &a, rs: k, cs: 1 }, MatRef { data: &b, rs: 1, cs: k });
                gemm(m, n, k, av, bv, &mut c, n, Init::Overwrite, opts);
                c
            })
        };
        for opts in every_opts() {
            let one = run(1, opts);
            for threads in 2..=4 {
                assert_eq!(one, run(threads, opts), "{opts:?} m{m} threads{threads}");
            }
        }
    }
}

/// bf16 GEMMs give the same bits on every path: products of bf16 values are
/// exact in fp32, every path adds them in ascending k (`vdpbf16ps` adds a
/// pair's high half, k, first) in blocks of the same depth (`BF16_KC`), and
/// each block's sum reaches C the same way. Values and sums stay in fp32's
/// normal range, where `vdpbf16ps`'s flushing of denormals changes nothing.
#[test]
fn bf16_gives_the_same_bits_on_every_path() {
    let spread = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter().enumerate().map(|(i, x)| x * (1.0 + (i % 7) as f32 * 13.7) + 1e-3).collect()
    };
    for &(m, n, k) in SHAPES.iter().chain(&[(40, 70, 1100), (256, 64, 512)]) {
        let a_rm = spread(fill(m * k, 11));
        let b_rm = spread(fill(k * n, 12));
        let a_cm: Vec<f32> = (0..m * k).map(|x| a_rm[(x % m) * k + x / m]).collect();
        let b_cm: Vec<f32> = (0..k * n).map(|x| b_rm[(x % k) * n + x / k]).collect();
        let bias = fill(n, 13);
        for a in [MatRef { data: &a_rm, rs: k, cs: 1 }, MatRef { data: &a_cm, rs: 1, cs: m }] {
            for b in [MatRef { data: &b_rm, rs: n, cs: 1 }, MatRef { data: &b_cm, rs: 1, cs: k }] {
                let run = |isa: Isa| {
                    let opts = GemmOpts { isa, precision: Precision::Bf16 };
                    let mut c = fill(m * n, 14);
                    gemm(m, n, k, a, b, &mut c, n, Init::Accumulate, opts);
                    let mut over = vec![0f32; m * n];
                    gemm(m, n, k, a, b, &mut over, n, Init::Overwrite, opts);
                    let mut biased = vec![0f32; m * n];
                    gemm(m, n, k, a, b, &mut biased, n, Init::Bias(&bias), opts);
                    [bits(&c), bits(&over), bits(&biased)]
                };
                let portable = run(Isa::Portable);
                for isa in Isa::supported_paths().into_iter().filter(|&isa| isa != Isa::Portable) {
                    let got = run(isa);
                    for (init, (g, p)) in
                        ["accumulate", "overwrite", "bias"].iter().zip(got.iter().zip(&portable))
                    {
                        let diff = g.iter().zip(p).filter(|(x, y)| x != y).count();
                        assert_eq!(
                            diff, 0,
                            "{isa} m{m} n{n} k{k} a.rs{} b.rs{} {init}: {diff} elements differ",
                            a.rs, b.rs
                        );
                    }
                }
            }
        }
    }
}

/// Every plan on this CPU: each has weight images (32-wide strips on
/// AVX-512, 16-wide on AVX2 and portable).
fn image_opts() -> Vec<GemmOpts> {
    let all = every_opts();
    for o in &all {
        assert!(WeightImage::new(64, 64, *o).is_some(), "{o:?}: a plan without images");
    }
    all
}

/// Weights with partial strips and tiles, odd KC tails in both images (c
/// 601: blocks of 512 and 89 in bf16 pairs, 256, 256 and 89 in f32; oc 531:
/// a last row chunk of 19 in a last block), and one of the model's
/// whole-tile shapes.
const IMAGE_SHAPES: &[(usize, usize)] = &[(45, 70), (531, 37), (70, 601), (64, 256), (1, 1)];

/// A GEMM reading a weight's images gives exactly the bits of packing the
/// weight per call, forward (NT) and input gradient (NN), on any rows (the
/// fp32 forward on fewer than `SMALL_M` rows packs nothing per call, so
/// there it is checked against the dot products' sums).
#[test]
fn weight_images_give_the_bits_of_packing_per_call() {
    for opts in image_opts() {
        images_match_packing(opts);
    }
}

fn images_match_packing(opts: GemmOpts) {
    for &(oc, c) in IMAGE_SHAPES {
        let w = fill(oc * c, 11);
        let img = WeightImage::new(oc, c, opts).expect("a plan with images");
        let mut buf = vec![f32::NAN; img.buffer_len()];
        img.write(&mut buf, &w);
        for m in [1, 19, 256] {
            let (x, dy) = (fill(m * c, 12), fill(m * oc, 13));
            let bias = fill(oc, 14);
            let ctx = format!("{opts:?} oc{oc} c{c} m{m}");
            // NT: out = x · Wᵀ + bias
            let (mut want, mut got) = (vec![0f32; m * oc], vec![f32::NAN; m * oc]);
            let (xv, wt) = (MatRef { data: &x, rs: c, cs: 1 }, MatRef { data: &w, rs: 1, cs: c });
            gemm(m, oc, c, xv, wt, &mut want, oc, Init::Bias(&bias), opts);
            gemm_packed_b(m, oc, c, xv, img.nt(&buf), &mut got, oc, Init::Bias(&bias), opts);
            if m < SMALL_M && opts.precision == Precision::Fp32 {
                // Per call, so few rows take dot products (no packing at
                // all): the same sums in another order.
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{ctx} NT: {g} vs {w}");
                }
            } else {
                assert_eq!(bits(&got), bits(&want), "{ctx} NT");
            }
            // NN: dx += dy · W
            let (mut want, mut got) = (fill(m * c, 15), fill(m * c, 15));
            let (dyv, wv) = (MatRef { data: &dy, rs: oc, cs: 1 }, MatRef { data: &w, rs: c, cs: 1 });
            gemm(m, c, oc, dyv, wv, &mut want, c, Init::Accumulate, opts);
            gemm_packed_b(m, c, oc, dyv, img.nn(&buf), &mut got, c, Init::Accumulate, opts);
            assert_eq!(bits(&got), bits(&want), "{ctx} NN");
        }
    }
}

/// Tiles written in any order, and a buffer moved to another address, give
/// the same images as one whole write.
#[test]
fn weight_images_do_not_depend_on_tile_order_or_address() {
    for opts in image_opts() {
        images_by_tile(opts);
    }
}

fn images_by_tile(opts: GemmOpts) {
    let (oc, c) = (531, 601);
    let w = fill(oc * c, 21);
    let img = WeightImage::new(oc, c, opts).expect("a plan with images");
    let mut whole = vec![0f32; img.buffer_len()];
    img.write(&mut whole, &w);
    // A buffer one float further on, written tile by tile, last tile first.
    let mut shifted = vec![f32::NAN; img.buffer_len() + 1];
    let buf = &mut shifted[1..];
    let writer = img.begin_write(buf);
    let chunks: Vec<_> = w.chunks(WeightImage::CHUNK_ROWS * c).enumerate().collect();
    for (ch, rows) in chunks.into_iter().rev() {
        for tile in (0..img.tiles_per_chunk()).rev() {
            writer.write_tile(rows, ch * WeightImage::CHUNK_ROWS, tile);
        }
    }
    assert_eq!(bits(img.nt(buf)), bits(img.nt(&whole)), "NT");
    assert_eq!(bits(img.nn(buf)), bits(img.nn(&whole)), "NN");
    let moved = buf.to_vec();
    assert_eq!(bits(img.nt(&moved)), bits(img.nt(&whole)), "NT after a move");
    assert_eq!(bits(img.nn(&moved)), bits(img.nn(&whole)), "NN after a move");
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
