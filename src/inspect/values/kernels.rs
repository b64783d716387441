//! The hot loops of the value scan: branch-free reductions over whole elements, one pass each.
//!
//! A float tensor's bytes are folded into three words: the OR of every element (zero when the
//! tensor is all zero), the OR of every element XOR the tensor's first element (zero when it is
//! constant) and the OR of `(element & magnitude mask) + bias`, whose top bit is set exactly
//! when some element's magnitude is at or above the format's Inf/NaN threshold (the bias is
//! `top bit - threshold`, so no sum overflows and no sum of a finite value reaches the top
//! bit). Only a piece whose third word says so is read again, element by element, to count and
//! place the NaN and Inf values: a healthy checkpoint never takes that path. The loops have no
//! branch per element and compile to SIMD on the baseline x86-64 and aarch64 targets.

use super::{Acc, Blocks, Float, Scale};

/// What a float format calls special: magnitudes at or above `threshold` are Inf (exactly
/// `inf`, when the format has one) or NaN.
#[derive(Clone, Copy)]
struct Spec {
    mask: u64,
    threshold: u64,
    inf: Option<u64>,
}

fn spec(f: Float) -> Spec {
    let (mask, threshold, inf) = match f {
        Float::F64 => (
            0x7fff_ffff_ffff_ffff,
            0x7ff0_0000_0000_0000,
            Some(0x7ff0_0000_0000_0000),
        ),
        Float::F32 => (0x7fff_ffff, 0x7f80_0000, Some(0x7f80_0000)),
        Float::F16 => (0x7fff, 0x7c00, Some(0x7c00)),
        Float::Bf16 => (0x7fff, 0x7f80, Some(0x7f80)),
        // OCP FP8 E4M3 ("fn"): no infinities, S.1111.111 is NaN.
        Float::E4m3 => (0x7f, 0x7f, None),
        // OCP FP8 E5M2: IEEE-like, S.11111.00 is Inf, S.11111.xx (xx > 0) NaN.
        Float::E5m2 => (0x7f, 0x7c, Some(0x7c)),
    };
    Spec {
        mask,
        threshold,
        inf,
    }
}

macro_rules! float_kernel {
    ($name:ident, $reduce:ident, $t:ty, $n:literal) => {
        /// (OR of elements, OR of element XOR `first`, OR of biased magnitudes).
        fn $reduce<const BE: bool>(s: &[[u8; $n]], first: $t, mask: $t, bias: $t) -> ($t, $t, $t) {
            let (mut nz, mut diff, mut special): ($t, $t, $t) = (0, 0, 0);
            for c in s {
                let x = if BE {
                    <$t>::from_be_bytes(*c)
                } else {
                    <$t>::from_le_bytes(*c)
                };
                nz |= x;
                diff |= x ^ first;
                special |= (x & mask).wrapping_add(bias);
            }
            (nz, diff, special)
        }

        /// Folds the whole elements `s` (a multiple of the element size) into `acc`.
        fn $name(s: &[u8], be: bool, spec: Spec, acc: &mut Acc) {
            let (elements, rest) = s.as_chunks::<$n>();
            debug_assert!(rest.is_empty());
            let Some(first_bytes) = elements.first() else {
                return;
            };
            let load = |c: &[u8; $n]| {
                if be {
                    <$t>::from_be_bytes(*c)
                } else {
                    <$t>::from_le_bytes(*c)
                }
            };
            if acc.units == 0 {
                acc.first = load(first_bytes) as u64;
            }
            let first = acc.first as $t;
            let top: $t = 1 << (<$t>::BITS - 1);
            let (mask, threshold) = (spec.mask as $t, spec.threshold as $t);
            let bias = top - threshold;
            let (nz, diff, special) = if be {
                $reduce::<true>(elements, first, mask, bias)
            } else {
                $reduce::<false>(elements, first, mask, bias)
            };
            acc.nz |= nz as u64;
            acc.diff |= diff as u64;
            if special & top != 0 {
                for (i, c) in elements.iter().enumerate() {
                    let x = load(c);
                    let magnitude = x & mask;
                    if magnitude >= threshold {
                        let index = acc.units + i as u64;
                        if spec.inf == Some(magnitude as u64) {
                            acc.inf(index, x & top != 0);
                        } else {
                            acc.nan(index);
                        }
                    }
                }
            }
            acc.units += elements.len() as u64;
        }
    };
}

float_kernel!(scan_u8, reduce_u8, u8, 1);
float_kernel!(scan_u16, reduce_u16, u16, 2);
float_kernel!(scan_u32, reduce_u32, u32, 4);
float_kernel!(scan_u64, reduce_u64, u64, 8);

/// Folds whole elements of a float tensor into `acc`.
pub(super) fn float(f: Float, be: bool, s: &[u8], acc: &mut Acc) {
    let spec = spec(f);
    match f.size() {
        1 => scan_u8(s, be, spec, acc),
        2 => scan_u16(s, be, spec, acc),
        4 => scan_u32(s, be, spec, acc),
        _ => scan_u64(s, be, spec, acc),
    }
}

/// Folds whole quantized blocks into `acc`: every byte into the all-zero flag, and each
/// block's scales checked (a NaN or Inf scale makes every value of its block NaN or Inf).
pub(super) fn blocks(b: Blocks, be: bool, s: &[u8], acc: &mut Acc) {
    acc.nz |= or_bytes(s);
    let mut special = false;
    for block in s.chunks_exact(b.bytes) {
        for &(scale, _) in b.scales {
            special |= scale_special(scale, be, block);
        }
    }
    if special {
        for (i, block) in s.chunks_exact(b.bytes).enumerate() {
            let index = acc.units + i as u64;
            for &(scale, _) in b.scales {
                if let Some(inf_sign) = classify_scale(scale, be, block) {
                    match inf_sign {
                        Some(negative) => acc.inf(index, negative),
                        None => acc.nan(index),
                    }
                }
            }
        }
    }
    acc.units += (s.len() / b.bytes) as u64;
}

fn u16_at(block: &[u8], at: usize, be: bool) -> u16 {
    let b = [block[at], block[at + 1]];
    if be {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

fn u32_at(block: &[u8], at: usize, be: bool) -> u32 {
    let b = [block[at], block[at + 1], block[at + 2], block[at + 3]];
    if be {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

fn scale_special(scale: Scale, be: bool, block: &[u8]) -> bool {
    match scale {
        Scale::F16(at) => u16_at(block, at, be) & 0x7fff >= 0x7c00,
        Scale::F32(at) => u32_at(block, at, be) & 0x7fff_ffff >= 0x7f80_0000,
        Scale::E8m0(at) => block[at] == 0xff,
    }
}

/// `None`: finite. `Some(None)`: NaN. `Some(Some(negative))`: Inf.
fn classify_scale(scale: Scale, be: bool, block: &[u8]) -> Option<Option<bool>> {
    match scale {
        Scale::F16(at) => {
            let x = u16_at(block, at, be);
            match x & 0x7fff {
                0x7c00 => Some(Some(x & 0x8000 != 0)),
                m if m > 0x7c00 => Some(None),
                _ => None,
            }
        }
        Scale::F32(at) => {
            let x = u32_at(block, at, be);
            match x & 0x7fff_ffff {
                0x7f80_0000 => Some(Some(x & 0x8000_0000 != 0)),
                m if m > 0x7f80_0000 => Some(None),
                _ => None,
            }
        }
        // E8M0 has no sign and no infinity: 0xFF is its NaN.
        Scale::E8m0(at) => (block[at] == 0xff).then_some(None),
    }
}

/// Non-zero when any byte of `s` is.
pub(super) fn or_bytes(s: &[u8]) -> u64 {
    let (words, rest) = s.as_chunks::<8>();
    let mut acc = words.iter().fold(0u64, |a, w| a | u64::from_ne_bytes(*w));
    for &b in rest {
        acc |= u64::from(b);
    }
    acc
}

/// How many bytes at the start of `s` are zero.
pub(super) fn leading_zeros(s: &[u8]) -> usize {
    let (blocks, _) = s.as_chunks::<64>();
    let mut start = 0;
    for block in blocks {
        if or_bytes(block) != 0 {
            break;
        }
        start += 64;
    }
    start + s[start..].iter().take_while(|&&b| b == 0).count()
}

/// How many bytes at the end of `s` are zero.
pub(super) fn trailing_zeros(s: &[u8]) -> usize {
    let (_, blocks) = s.as_rchunks::<64>();
    let mut end = s.len();
    for block in blocks.iter().rev() {
        if or_bytes(block) != 0 {
            break;
        }
        end -= 64;
    }
    s.len() - end + s[..end].iter().rev().take_while(|&&b| b == 0).count()
}
