//! `ExponentialMapping::index` against OpenTelemetry's bucket definition
//! in exact integer arithmetic, next to the irrational boundaries where a
//! logarithm alone can pick the neighbouring bucket.

use num_bigint::BigUint;
use tailguard::mapping::ExponentialMapping;
use tailguard::IndexMapping;

/// Whether `v^(2^scale) ≤ 2^k`, exactly (`v` positive and normal).
fn power_at_most(v: f64, scale: u32, k: i64) -> bool {
    let bits = v.to_bits();
    let m = (bits & ((1 << 52) - 1)) | (1 << 52);
    let e = ((bits >> 52) & 0x7ff) as i64 - 1075;
    // v^(2^s) = m^(2^s) · 2^(e·2^s) ≤ 2^k  ⇔  m^(2^s) ≤ 2^(k − e·2^s).
    let shift = k - e * (1i64 << scale);
    if shift < 0 {
        return false;
    }
    BigUint::from(m).pow(1u32 << scale) <= BigUint::from(1u8) << (shift as u64)
}

/// The specification's bucket of `v` at `scale`: the `i` with
/// `base^i < v ≤ base^(i+1)`, i.e. `2^i < v^(2^s) ≤ 2^(i+1)`.
fn exact_index(v: f64, scale: u32, guess: i32) -> i32 {
    for i in [guess - 1, guess, guess + 1] {
        let i = i64::from(i);
        if !power_at_most(v, scale, i) && power_at_most(v, scale, i + 1) {
            return i as i32;
        }
    }
    panic!("{v:e} at scale {scale}: more than one bucket from {guess}");
}

#[test]
fn values_next_to_irrational_boundaries_land_in_their_own_bucket() {
    // Found by a review: 1 ulp below a boundary, the logarithm said the
    // bucket above.
    let v = f64::from_bits(0x40DE_A4AF_A2A4_90D9);
    assert_eq!(ExponentialMapping::new(6).unwrap().index(v), 955);
    let v = f64::from_bits(0x3FEE_A4AF_A2A4_90D9);
    assert_eq!(ExponentialMapping::new(4).unwrap().index(v), -2);
    // Scales 1 to 9 (the big integers stay small enough for a debug
    // build): the doubles around boundaries spread over the binade (up to
    // 64 a scale), three on each side.
    let mut checked = 0;
    for scale in 1..=9u32 {
        let m = ExponentialMapping::new(scale as i32).unwrap();
        let subs = 1i64 << scale;
        let step = (subs / 64).max(1);
        for j in (1..subs).step_by(step as usize) {
            for e in [-3i64, 7] {
                let k = e * subs + j;
                let near = (k as f64 / subs as f64).exp2();
                let mut v = near;
                for _ in 0..3 {
                    v = v.next_down();
                }
                for _ in 0..7 {
                    let got = m.index(v);
                    assert_eq!(
                        got,
                        exact_index(v, scale, got),
                        "{v:e} ({:#x}) at scale {scale}",
                        v.to_bits()
                    );
                    checked += 1;
                    v = v.next_up();
                }
            }
        }
    }
    assert!(checked > 3_000, "{checked}");
}
