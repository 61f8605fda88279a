//! RAID5/6 parity arithmetic: generating P and Q for a row of data stripes
//! and rebuilding a data stripe from what is left of its row.
//!
//! The layout is the one btrfs (and Linux md's `lib/raid6`) uses. For data
//! stripes `D_0 .. D_{k-1}` of a row:
//!
//! * `P = D_0 ^ D_1 ^ ... ^ D_{k-1}` (byte-wise XOR);
//! * `Q = g^0·D_0 ^ g^1·D_1 ^ ... ^ g^{k-1}·D_{k-1}`, computed byte-wise in
//!   GF(2^8) with the reducing polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d)
//!   and the generator `g = 2`.
//!
//! Everything here is pure computation on byte slices; reading the stripes
//! is up to the caller (`disk_io`).

use std::fmt;

/// The field's reducing polynomial, with its x^8 term.
const POLY: u16 = 0x11d;

/// `EXP[i] = g^i` for `i` in `0..510` (doubled so sums of two logarithms
/// need no reduction) and `LOG[x]` its inverse for `x != 0`.
struct Tables {
    exp: [u8; 510],
    log: [u8; 256],
}

const fn build_tables() -> Tables {
    let mut exp = [0u8; 510];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    Tables { exp, log }
}

static TABLES: Tables = build_tables();

/// `a · b` in GF(2^8).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    TABLES.exp[TABLES.log[a as usize] as usize + TABLES.log[b as usize] as usize]
}

/// The multiplicative inverse of `a` (`a` must not be 0).
pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "0 has no inverse in GF(2^8)");
    TABLES.exp[255 - TABLES.log[a as usize] as usize]
}

/// `g^e` for the generator `g = 2`: the Q coefficient of data stripe `e`.
pub fn gf_pow2(e: usize) -> u8 {
    TABLES.exp[e % 255]
}

/// `dst ^= src`.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s);
}

/// `dst ^= c · src`, byte-wise in GF(2^8).
pub fn mul_xor_into(dst: &mut [u8], src: &[u8], c: u8) {
    assert_eq!(dst.len(), src.len());
    match c {
        0 => {}
        1 => xor_into(dst, src),
        _ => {
            let row = mul_table(c);
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, s)| *d ^= row[*s as usize]);
        }
    }
}

/// `buf = c · buf`, byte-wise in GF(2^8).
pub fn scale(buf: &mut [u8], c: u8) {
    if c != 1 {
        let row = mul_table(c);
        buf.iter_mut().for_each(|b| *b = row[*b as usize]);
    }
}

/// `c · x` for every byte `x`.
fn mul_table(c: u8) -> [u8; 256] {
    let mut row = [0u8; 256];
    for (x, r) in row.iter_mut().enumerate() {
        *r = gf_mul(c, x as u8);
    }
    row
}

/// Computes P (and Q when asked) of the data stripes `data`, all of the
/// same length as `p` (and `q`).
pub fn gen_parity(data: &[&[u8]], p: &mut [u8], q: Option<&mut [u8]>) {
    p.fill(0);
    for d in data {
        xor_into(p, d);
    }
    if let Some(q) = q {
        q.fill(0);
        for (j, d) in data.iter().enumerate() {
            mul_xor_into(q, d, gf_pow2(j));
        }
    }
}

/// Why a data stripe could not be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildError {
    /// More of the row is missing than its parity can make up for.
    TooManyMissing {
        missing_data: usize,
        have_p: bool,
        have_q: bool,
    },
    /// The row does not fit the profile, or the buffers differ in length.
    BadRow(String),
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildError::TooManyMissing {
                missing_data,
                have_p,
                have_q,
            } => write!(
                f,
                "{missing_data} data stripes missing with P {} and Q {}",
                if *have_p { "present" } else { "missing" },
                if *have_q { "present" } else { "missing" }
            ),
            RebuildError::BadRow(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for RebuildError {}

/// Computes data stripe `want` of a row into `out`.
///
/// `stripes` is the row in btrfs order: the data stripes `0..k`, then P,
/// then Q when `nparity == 2`. `None` marks a stripe that is missing or
/// that must not be used; the caller chooses which parity a rebuild uses by
/// leaving the other out. Cases, for `want` missing:
///
/// * it is the only data stripe missing and P is present: XOR with P;
/// * it is the only data stripe missing, P is not but Q is: from Q;
/// * one other data stripe is missing too, P and Q are present: from both.
///
/// Anything else is [`RebuildError::TooManyMissing`]. When `want` is
/// present it is copied.
pub fn rebuild_data(
    stripes: &[Option<&[u8]>],
    nparity: usize,
    want: usize,
    out: &mut [u8],
) -> Result<(), RebuildError> {
    let n = stripes.len();
    if !(1..=2).contains(&nparity) || n <= nparity || want >= n - nparity {
        return Err(RebuildError::BadRow(format!(
            "row of {n} stripes with {nparity} parity, want data stripe {want}"
        )));
    }
    if let Some(s) = stripes.iter().flatten().find(|s| s.len() != out.len()) {
        return Err(RebuildError::BadRow(format!(
            "stripe of {} bytes for a {}-byte rebuild",
            s.len(),
            out.len()
        )));
    }
    let ndata = n - nparity;
    if let Some(s) = stripes[want] {
        out.copy_from_slice(s);
        return Ok(());
    }
    let missing: Vec<usize> = (0..ndata).filter(|&j| stripes[j].is_none()).collect();
    let p = stripes[ndata];
    let q = if nparity == 2 {
        stripes[ndata + 1]
    } else {
        None
    };
    let present = || (0..ndata).filter_map(|j| stripes[j].map(|s| (j, s)));
    match (missing.len(), p, q) {
        (1, Some(p), _) => {
            out.copy_from_slice(p);
            for (_, d) in present() {
                xor_into(out, d);
            }
        }
        (1, None, Some(q)) => {
            // Q ^ sum of the present g^j·D_j leaves g^want·D_want.
            out.copy_from_slice(q);
            for (j, d) in present() {
                mul_xor_into(out, d, gf_pow2(j));
            }
            scale(out, gf_inv(gf_pow2(want)));
        }
        (2, Some(p), Some(q)) => {
            let other = missing[0] + missing[1] - want;
            // With the present stripes taken out: pxy = D_w ^ D_o and
            // qxy = g^w·D_w ^ g^o·D_o, so qxy ^ g^o·pxy = (g^w ^ g^o)·D_w.
            let mut pxy = p.to_vec();
            out.copy_from_slice(q);
            for (j, d) in present() {
                xor_into(&mut pxy, d);
                mul_xor_into(out, d, gf_pow2(j));
            }
            let (gw, go) = (gf_pow2(want), gf_pow2(other));
            mul_xor_into(out, &pxy, go);
            scale(out, gf_inv(gw ^ go));
        }
        _ => {
            return Err(RebuildError::TooManyMissing {
                missing_data: missing.len(),
                have_p: p.is_some(),
                have_q: q.is_some(),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Multiplication by shift-and-reduce, independent of the tables.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut r = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            let hi = a & 0x80 != 0;
            a <<= 1;
            if hi {
                a ^= (POLY & 0xff) as u8;
            }
            b >>= 1;
        }
        r
    }

    /// Deterministic pseudo-random bytes (xorshift).
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn field_arithmetic() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(gf_mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(gf_mul(a, gf_inv(a)), 1, "inverse of {a}");
            }
        }
        assert_eq!(gf_mul(0x80, 2), 0x1d);
        // g = 2 generates the whole multiplicative group.
        let mut seen = [false; 256];
        for e in 0..255 {
            let v = gf_pow2(e);
            assert!(!seen[v as usize], "g^{e} repeats");
            seen[v as usize] = true;
        }
        assert_eq!(gf_pow2(255), 1);
    }

    #[test]
    fn q_matches_horner_form() {
        // lib/raid6 evaluates Q from the highest data stripe down:
        // q = D_last; q = 2q ^ D_z for z = last-1 .. 0.
        let data: Vec<Vec<u8>> = (0..5).map(|i| noise(i, 333)).collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let (mut p, mut q) = (vec![0; 333], vec![0; 333]);
        gen_parity(&refs, &mut p, Some(&mut q));
        for i in 0..333 {
            let mut h = data[4][i];
            let mut x = data[4][i];
            for z in (0..4).rev() {
                h = slow_mul(h, 2) ^ data[z][i];
                x ^= data[z][i];
            }
            assert_eq!((p[i], q[i]), (x, h), "byte {i}");
        }
        // Two stripes of ones: Q = 1 ^ 2.
        let ones = [1u8; 4];
        gen_parity(&[&ones, &ones], &mut p[..4], Some(&mut q[..4]));
        assert_eq!((p[0], q[0]), (0, 3));
    }

    /// Builds a row, knocks out every set of up to `nparity + 1` stripes and
    /// checks each data stripe rebuilds exactly when it is possible.
    fn knock_out_all(ndata: usize, nparity: usize, len: usize) {
        let data: Vec<Vec<u8>> = (0..ndata)
            .map(|i| noise((ndata * 10 + i) as u64, len))
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let (mut p, mut q) = (vec![0; len], vec![0; len]);
        gen_parity(&refs, &mut p, (nparity == 2).then_some(&mut q[..]));
        let mut row: Vec<&[u8]> = refs.clone();
        row.push(&p);
        if nparity == 2 {
            row.push(&q);
        }
        let n = row.len();
        let mut out = vec![0u8; len];
        for mask in 0u32..(1 << n) {
            let gone = mask.count_ones() as usize;
            if gone > nparity + 1 {
                continue;
            }
            let stripes: Vec<Option<&[u8]>> = (0..n)
                .map(|i| (mask & (1 << i) == 0).then_some(row[i]))
                .collect();
            for (want, expect) in data.iter().enumerate() {
                let lost_data = (0..ndata).filter(|j| mask & (1 << j) != 0).count();
                let have_p = mask & (1 << ndata) == 0;
                let have_q = nparity == 2 && mask & (1 << (ndata + 1)) == 0;
                let possible = mask & (1 << want) == 0
                    || match lost_data {
                        1 => have_p || have_q,
                        2 => have_p && have_q,
                        _ => false,
                    };
                out.fill(0xaa);
                let r = rebuild_data(&stripes, nparity, want, &mut out);
                if possible {
                    r.unwrap_or_else(|e| panic!("mask {mask:b} want {want}: {e}"));
                    assert_eq!(&out, expect, "mask {mask:b} want {want}");
                } else {
                    assert!(
                        matches!(r, Err(RebuildError::TooManyMissing { .. })),
                        "mask {mask:b} want {want}: {r:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn raid5_rebuilds() {
        for ndata in 1..=5 {
            knock_out_all(ndata, 1, 4096 + 7);
        }
    }

    #[test]
    fn raid6_rebuilds() {
        for ndata in 1..=6 {
            knock_out_all(ndata, 2, 4096 + 7);
        }
    }

    #[test]
    fn raid6_wide_row() {
        // Coefficients g^j for high j are exercised too.
        knock_out_all(13, 2, 64);
    }

    #[test]
    fn bad_rows_are_rejected() {
        let a = [0u8; 8];
        let mut out = [0u8; 8];
        assert!(rebuild_data(&[Some(&a[..]), None], 1, 1, &mut out).is_err());
        assert!(rebuild_data(&[Some(&a[..])], 1, 0, &mut out).is_err());
        assert!(rebuild_data(&[None, Some(&a[..4])], 1, 0, &mut out).is_err());
        assert!(rebuild_data(&[None, Some(&a[..])], 3, 0, &mut out).is_err());
    }
}
