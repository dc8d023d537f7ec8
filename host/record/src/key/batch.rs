//! Batch verification with exactly the strict verdicts.
//!
//! A batch passes only if `verify_strict` would accept every one of its signatures,
//! except with probability at most 2^-127 over this process's own randomness (the
//! signer cannot influence it). A batch that fails says nothing about which signature
//! is bad: the caller checks each one with `verify_strict`, in order, so verdicts and the
//! first finding are strict's own.
//!
//! Strict accepts `(R, S)` on message `M` under key `A` when `S < ℓ`, `R` decodes and is
//! not of small order, and the canonical encoding of `[S]B − [k]A` (with
//! `k = SHA-512(R ‖ A ‖ M) mod ℓ`) equals the 32 bytes of `R`. The batch checks:
//! - per key, once: `A` is torsion-free (a key with a torsion component is left to
//!   strict, line by line); strict already refused small-order keys at decoding;
//! - per signature, exactly: `S < ℓ`; `R`'s bytes are a canonical encoding (`y < p`;
//!   the two encodings with `x = 0` are of small-order points, refused next); `R`
//!   decodes; `R` is not of small order;
//! - `R` torsion-free, for all signatures at once: [`ROUNDS`] random subsets, each sum
//!   multiplied by `ℓ` must be the identity. A point `R` with a torsion component `T ≠ 0`
//!   is in a subset with probability 1/2, and then that subset's torsion is nonzero in at
//!   least one of the two cases "in" / "out" (the rest being fixed), so each round misses
//!   with probability at most 1/2 and all miss with at most 2^-128;
//! - the equation `Σ zᵢ(Rᵢ − [Sᵢ]B + [kᵢ]A) = 0` with independent uniform 128-bit `zᵢ`,
//!   the `A` terms collapsed into one scalar per key. All terms are then in the
//!   prime-order subgroup, so a nonzero term makes the sum vanish for at most one value
//!   of its `zᵢ` (`2^128 < ℓ`): probability at most 2^-128.
//!
//! When both hold, each `Rᵢ = [Sᵢ]B − [kᵢ]A` as points, and since `Rᵢ`'s bytes are its
//! canonical encoding, strict's byte comparison holds too. A valid batch always passes:
//! every check is exact for it.

use super::{Signature, VerifyingKey};
use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{Identity, IsIdentity, VartimeMultiscalarMul};
use sha2::{Digest, Sha512};

/// Independent subset rounds of the torsion test: each misses a torsioned `R` with
/// probability at most 1/2. Each costs one scalar multiplication, whatever the batch's
/// size, so batches of fewer than about 200 signatures cost more than strict checks.
pub const ROUNDS: usize = 128;

/// Points per table in the subset sums: each chunk's 2^CHUNK subset sums are built once
/// and shared by every round (about 32 additions per point instead of 64).
const CHUNK: usize = 6;

/// One signature to check: its key, message and signature.
pub type Item<'a> = (&'a VerifyingKey, &'a [u8], &'a Signature);

/// Whether `verify_strict` accepts every item, except with probability at most 2^-127
/// that it says so of a batch strict would not accept (see the module documentation).
/// `false` also when a key has a torsion component or the operating system's random
/// source fails: then check each item with [`VerifyingKey::verify_strict`].
pub fn verify_batch(items: &[Item<'_>]) -> bool {
    if items.is_empty() {
        return true;
    }
    let n = items.len();
    // z_i (16 bytes each), then one byte per (chunk, round) for the subset masks.
    let chunks = n.div_ceil(CHUNK);
    let mut random = vec![0u8; 16 * n + chunks * ROUNDS];
    if getrandom::fill(&mut random).is_err() {
        return false;
    }
    let (z_bytes, masks) = random.split_at(16 * n);

    let mut points = Vec::with_capacity(n + 8);
    let mut scalars = Vec::with_capacity(n + 8);
    // Keys met in this batch with their collapsed scalar Σ z_i k_i.
    let mut keys: Vec<(&VerifyingKey, Scalar)> = Vec::new();
    let mut s_sum = Scalar::ZERO;
    for ((key, message, signature), z) in items.iter().zip(z_bytes.chunks_exact(16)) {
        if !key.torsion_free {
            return false;
        }
        let bytes = signature.as_bytes();
        let r_bytes: [u8; 32] = bytes[..32].try_into().expect("32 bytes");
        let s_bytes: [u8; 32] = bytes[32..].try_into().expect("32 bytes");
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_bytes)) else {
            return false;
        };
        if !canonical_y(&r_bytes) {
            return false;
        }
        let Some(r) = CompressedEdwardsY(r_bytes).decompress() else {
            return false;
        };
        if r.is_small_order() {
            return false;
        }
        let mut h = Sha512::new();
        h.update(r_bytes);
        h.update(key.inner.as_bytes());
        h.update(message);
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        let mut wide = [0u8; 32];
        wide[..16].copy_from_slice(z);
        let z = Scalar::from_bytes_mod_order(wide);
        s_sum += z * s;
        match keys.iter_mut().find(|(seen, _)| seen.point == key.point) {
            Some((_, acc)) => *acc += z * k,
            None => keys.push((key, z * k)),
        }
        points.push(r);
        scalars.push(z);
    }
    if !torsion_free_all(&points, masks) {
        return false;
    }
    // Σ z_i R_i − [Σ z_i S_i]B + Σ_A [Σ z_i k_i]A = 0.
    points.push(ED25519_BASEPOINT_POINT);
    scalars.push(-s_sum);
    for (key, acc) in keys {
        points.push(key.point);
        scalars.push(acc);
    }
    EdwardsPoint::vartime_multiscalar_mul(&scalars, &points).is_identity()
}

/// Whether the 255 bits of `y` (the sign bit aside) are below p = 2^255 − 19.
fn canonical_y(bytes: &[u8; 32]) -> bool {
    // y ≥ p only when bytes 1..31 are all 0xff, the top byte (sign bit cleared) is 0x7f
    // and the lowest byte is at least 0xed.
    !(bytes[31] & 0x7f == 0x7f && bytes[1..31].iter().all(|&b| b == 0xff) && bytes[0] >= 0xed)
}

/// Whether `[ℓ]P` is the identity, exactly: `[ℓ − 1]P = −P`.
pub(super) fn torsion_free(p: &EdwardsPoint) -> bool {
    EdwardsPoint::vartime_multiscalar_mul([-Scalar::ONE], [p]) == -p
}

/// Whether every point is torsion-free, except with probability at most 2^-ROUNDS that
/// it says so when one is not. `masks` holds one random byte per (chunk, round).
fn torsion_free_all(points: &[EdwardsPoint], masks: &[u8]) -> bool {
    let mut sums = [EdwardsPoint::identity(); ROUNDS];
    let mut table = [EdwardsPoint::identity(); 1 << CHUNK];
    for (chunk, masks) in points.chunks(CHUNK).zip(masks.chunks_exact(ROUNDS)) {
        let width = chunk.len();
        // table[m] = the sum of the chunk's points whose bit is set in m.
        for m in 1..(1usize << width) {
            let low = m.trailing_zeros() as usize;
            let rest = m & (m - 1);
            table[m] = if rest == 0 {
                chunk[low]
            } else {
                table[rest] + chunk[low]
            };
        }
        let all = (1usize << width) - 1;
        for (sum, &mask) in sums.iter_mut().zip(masks) {
            let m = usize::from(mask) & all;
            if m != 0 {
                *sum += table[m];
            }
        }
    }
    sums.iter().all(torsion_free)
}
