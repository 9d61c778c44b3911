//! The exact α check shared by the sketch fuzz targets.

/// Whether `|est − x| <= a·|x|` exactly (`0 < a < 1`, `x` normal or 0):
/// the product's error split off by a fused multiply-add, the sum's by
/// TwoSum, the sign of the exact total read off Shewchuk's expansion.
pub fn within(est: f64, x: f64, a: f64) -> bool {
    if x == 0.0 {
        return est == 0.0;
    }
    let (e, m) = (est * x.signum(), x.abs());
    if !(e > 0.0 && e < 2.0 * m) {
        return false;
    }
    // Scale so that m is in [1, 2): exact, and a·m stays far from underflow.
    let k = ((m.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let (h, l) = (-k / 2, -k - (-k / 2));
    let p2 = |k: i32| f64::from_bits(((1023 + k) as u64) << 52);
    let (e, m) = (e * p2(h) * p2(l), m * p2(h) * p2(l));
    let p = a * m;
    let pe = a.mul_add(m, -p);
    let terms = if e >= m {
        [p, pe, -e, m]
    } else {
        [p, pe, e, -m]
    };
    let mut expansion: Vec<f64> = Vec::new();
    for t in terms {
        let mut q = t;
        let mut next = Vec::new();
        for &c in &expansion {
            let s = q + c;
            let bb = s - q;
            let err = (q - (s - bb)) + (c - bb);
            if err != 0.0 {
                next.push(err);
            }
            q = s;
        }
        next.push(q);
        expansion = next;
    }
    expansion
        .iter()
        .rev()
        .find(|&&c| c != 0.0)
        .is_none_or(|&c| c > 0.0)
}
