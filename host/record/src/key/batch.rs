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
    // z_i (16 bytes each), then each point's subset mask (ROUNDS bits).
    let mut random = vec![0u8; (16 + ROUNDS / 8) * n];
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

/// Whether `[ℓ]P` is the identity, exactly: `[ℓ − 1]P = −P`. The same answer as
/// curve25519-dalek's `EdwardsPoint::is_torsion_free`, whose constant-time
/// multiplication is slower and buys nothing here: every point checked is public. The
/// torsion test runs this [`ROUNDS`] times per batch.
pub(super) fn torsion_free(p: &EdwardsPoint) -> bool {
    EdwardsPoint::vartime_multiscalar_mul([-Scalar::ONE], [p]) == -p
}

/// Whether every point is torsion-free, except with probability at most 2^-ROUNDS that
/// it says so when one is not. `masks` holds [`ROUNDS`] random bits per point: bit `j`
/// of point `i` puts it in round `j`'s subset.
///
/// The rounds go eight at a time, one byte of each point's mask: each point is added
/// to the bucket of its byte (one addition per point and group), then each round's sum
/// is read off the 256 buckets by folding them in half once per bit (about 500
/// additions per group, whatever the number of points).
fn torsion_free_all(points: &[EdwardsPoint], masks: &[u8]) -> bool {
    let mut buckets = [EdwardsPoint::identity(); 256];
    (0..ROUNDS / 8).all(|group| {
        group_sums(points, masks, group, &mut buckets)
            .iter()
            .all(torsion_free)
    })
}

/// The sums of rounds `8·group + j`, `j` = 0..8: round `8·group + j` takes the points
/// whose mask byte `group` has bit `7 − j` set.
fn group_sums(
    points: &[EdwardsPoint],
    masks: &[u8],
    group: usize,
    buckets: &mut [EdwardsPoint; 256],
) -> [EdwardsPoint; 8] {
    buckets.fill(EdwardsPoint::identity());
    for (point, mask) in points.iter().zip(masks.chunks_exact(ROUNDS / 8)) {
        let byte = usize::from(mask[group]);
        if byte != 0 {
            buckets[byte] += point;
        }
    }
    // buckets[b] sums the points whose byte, within the bits not yet folded away, is b.
    // The points with the top remaining bit set are the upper half; folding the upper
    // half onto the lower drops that bit for the next round.
    let mut sums = [EdwardsPoint::identity(); 8];
    let mut width = 256;
    for sum in &mut sums {
        let half = width / 2;
        *sum = buckets[half..width].iter().sum();
        for b in 1..half {
            let upper = buckets[b + half];
            buckets[b] += upper;
        }
        width = half;
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::constants::EIGHT_TORSION;

    /// Each of the 128 rounds sums exactly the points its mask bit names: a torsioned
    /// point in round `j` alone is found, and one in no round is not (so the masks, not
    /// luck, decide).
    #[test]
    fn every_round_reads_its_own_subset() {
        let points: Vec<EdwardsPoint> = (1u64..=5)
            .map(|i| ED25519_BASEPOINT_POINT * Scalar::from(i))
            .collect();
        let mut torsioned = points.clone();
        torsioned[3] += EIGHT_TORSION[4];
        let bytes = ROUNDS / 8;
        // Every clean point in every round: their sums are torsion-free.
        let full = vec![0xffu8; bytes * points.len()];
        assert!(torsion_free_all(&points, &full));
        for round in 0..ROUNDS {
            let mut masks = full.clone();
            let own = &mut masks[3 * bytes..4 * bytes];
            own.fill(0);
            own[round / 8] = 0x80 >> (round % 8);
            assert!(!torsion_free_all(&torsioned, &masks), "round {round}");
        }
        let mut masks = full;
        masks[3 * bytes..4 * bytes].fill(0);
        assert!(torsion_free_all(&torsioned, &masks));
    }

    /// The folded sums equal the sums taken point by point, for arbitrary masks.
    #[test]
    fn folded_sums_are_the_subset_sums() {
        let points: Vec<EdwardsPoint> = (1u64..=40)
            .map(|i| ED25519_BASEPOINT_POINT * Scalar::from(i * 7919))
            .collect();
        let bytes = ROUNDS / 8;
        // A fixed, irregular pattern (a linear congruential sequence).
        let masks: Vec<u8> = (0u32..(bytes * points.len()) as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut buckets = [EdwardsPoint::identity(); 256];
        for group in 0..bytes {
            let sums = group_sums(&points, &masks, group, &mut buckets);
            for (j, sum) in sums.iter().enumerate() {
                let naive: EdwardsPoint = points
                    .iter()
                    .zip(masks.chunks_exact(bytes))
                    .filter(|(_, m)| m[group] & (0x80 >> j) != 0)
                    .map(|(p, _)| p)
                    .sum();
                assert_eq!(*sum, naive, "group {group}, bit {j}");
            }
        }
    }

    /// The variable-time test answers as the library's constant-time one, for a clean
    /// point with each of the eight torsion points added.
    #[test]
    fn torsion_free_is_the_librarys_test() {
        let clean = ED25519_BASEPOINT_POINT * Scalar::from(7919u64);
        for (i, t) in EIGHT_TORSION.iter().enumerate() {
            let p = clean + t;
            assert_eq!(torsion_free(&p), p.is_torsion_free(), "torsion point {i}");
            assert_eq!(torsion_free(&p), i == 0, "torsion point {i}");
        }
    }

    #[test]
    fn canonical_y_is_below_p() {
        let mut p = [0xffu8; 32];
        p[31] = 0x7f;
        p[0] = 0xec; // p − 1
        assert!(canonical_y(&p));
        p[0] = 0xed; // p
        assert!(!canonical_y(&p));
        p[31] = 0xff; // p with the sign bit set
        assert!(!canonical_y(&p));
        assert!(canonical_y(&[0u8; 32]));
    }
}
