//! Property tests: batch verification passes a batch only when `verify_strict` accepts
//! every signature in it, and the verifier's verdict and first finding over a file of
//! damaged and adversarial signatures are the ones strict gives line by line.
//!
//! The adversarial cases are the ones a batch equation can get wrong: a torsioned `R`
//! with `S` recomputed (the cofactored equation holds, strict's does not), small-order
//! `R`, non-canonical encodings of `R`, `S + ℓ`, and keys with a torsion component
//! (under which some signatures are strictly valid).

mod support;

use aegis_record::json::{self, Object, Value};
use aegis_record::key::{VerifyingKey, verify_batch};
use aegis_record::line::LineBody as _;
use aegis_record::verify::{
    Options, SignatureProblem, Tampered, Verdict, verify, verify_line_by_line,
};
use aegis_record::{LineHash, PublicKey, Signature, seal};
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use proptest::prelude::*;
use sha2::{Digest as _, Sha512};

/// ℓ, the order of the base point, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// A signer that knows its secret scalar, so it can make signatures no library makes.
#[derive(Clone, Debug)]
struct Signer {
    a: Scalar,
    /// `[a]B + T` for a torsion point `T` (the identity for an ordinary key).
    public: [u8; 32],
}

impl Signer {
    /// `key_torsion` indexes EIGHT_TORSION: 0 is an ordinary key, 1..8 add a torsion
    /// point of order 8, 4, 8, 2, 8, 4, 8.
    fn new(seed: u64, key_torsion: usize) -> Signer {
        let a = Scalar::from_bytes_mod_order_wide(&Sha512::digest(seed.to_le_bytes()).into());
        let point = B * a + EIGHT_TORSION[key_torsion];
        Signer {
            a,
            public: point.compress().to_bytes(),
        }
    }

    fn challenge(&self, r: &[u8; 32], message: &[u8]) -> Scalar {
        let h = Sha512::new()
            .chain_update(r)
            .chain_update(self.public)
            .chain_update(message);
        Scalar::from_bytes_mod_order_wide(&h.finalize().into())
    }

    /// `R = [nonce]B + extra`, `S = nonce + k·a` with `k` over that `R`.
    fn sign_with(&self, message: &[u8], nonce: Scalar, extra: EdwardsPoint) -> [u8; 64] {
        let r = (B * nonce + extra).compress().to_bytes();
        let s = nonce + self.challenge(&r, message) * self.a;
        join(r, s.to_bytes())
    }

    fn verifying_key(&self) -> VerifyingKey {
        VerifyingKey::new(&PublicKey::from_bytes(self.public)).expect("not small order")
    }

    fn strict(&self, message: &[u8], sig: &[u8; 64]) -> bool {
        self.verifying_key()
            .verify_strict(message, &Signature::from_bytes(*sig))
    }

    /// A signature strict accepts. Under a torsioned key that needs `[k]T = 0`, so
    /// nonces are tried until one gives it (one in eight at worst).
    fn valid(&self, message: &[u8], nonce: u64) -> [u8; 64] {
        (0..)
            .map(|i| {
                self.sign_with(
                    message,
                    Scalar::from(nonce + 1000 * i + 1),
                    EdwardsPoint::default(),
                )
            })
            .find(|sig| self.strict(message, sig))
            .expect("some nonce works")
    }
}

fn join(r: [u8; 32], s: [u8; 32]) -> [u8; 64] {
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&r);
    sig[32..].copy_from_slice(&s);
    sig
}

/// How one line's signature is damaged.
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// One bit of the signature flipped.
    FlipBit(u16),
    /// S + ℓ: the same signature, spelled non-canonically.
    SPlusL,
    /// R one of the eight small-order points, S = k·a (the lax equation holds for the
    /// identity).
    SmallOrderR(usize),
    /// R = [r]B + T for a torsion point T, S recomputed over that R: the cofactored
    /// equation holds, strict's does not.
    TorsionedR(usize),
    /// R spelled with y ≥ p (y − p one of 0..19) or as x = 0 with the sign bit set.
    NonCanonicalR(u8, bool),
    /// R bytes that may not decode at all.
    RandomR([u8; 32]),
    /// A valid signature over another message.
    OtherMessage,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => Just(Damage::None),
        1 => (0u16..512).prop_map(Damage::FlipBit),
        1 => Just(Damage::SPlusL),
        1 => (0usize..8).prop_map(Damage::SmallOrderR),
        2 => (1usize..8).prop_map(Damage::TorsionedR),
        1 => (0u8..19, any::<bool>()).prop_map(|(y, s)| Damage::NonCanonicalR(y, s)),
        1 => any::<[u8; 32]>().prop_map(Damage::RandomR),
        1 => Just(Damage::OtherMessage),
    ]
}

fn make(signer: &Signer, message: &[u8], nonce: u64, damage: &Damage) -> [u8; 64] {
    let valid = signer.valid(message, nonce);
    let lax = |r: [u8; 32]| join(r, (signer.challenge(&r, message) * signer.a).to_bytes());
    match damage {
        Damage::None => valid,
        Damage::FlipBit(bit) => {
            let mut sig = valid;
            sig[usize::from(*bit / 8)] ^= 1 << (bit % 8);
            sig
        }
        Damage::SPlusL => {
            let mut sig = valid;
            let mut carry = 0u16;
            for i in 0..32 {
                let sum = u16::from(sig[32 + i]) + u16::from(L[i]) + carry;
                sig[32 + i] = sum as u8;
                carry = sum >> 8;
            }
            sig
        }
        Damage::SmallOrderR(t) => lax(EIGHT_TORSION[*t].compress().to_bytes()),
        Damage::TorsionedR(t) => {
            signer.sign_with(message, Scalar::from(nonce + 7), EIGHT_TORSION[*t])
        }
        Damage::NonCanonicalR(y, sign) => {
            // p + y, little-endian: p = 2^255 − 19.
            let mut r = [0xffu8; 32];
            r[31] = 0x7f;
            r[0] = 0xed + y;
            if *sign {
                // Or the identity (x = 0) with its sign bit set.
                r = [0u8; 32];
                r[0] = 1;
                r[31] = 0x80;
            }
            lax(r)
        }
        Damage::RandomR(r) => lax(*r),
        Damage::OtherMessage => signer.valid(b"another message", nonce),
    }
}

/// A one-session file of `lines` signed lines after the open (the last a close), each
/// signature made by `signer` and damaged as `damaged` says; and the seq of the first
/// line strict rejects.
fn build_file(signer: &Signer, lines: u64, damaged: &[(u64, Damage)]) -> (Vec<u8>, Option<u64>) {
    let key_id = PublicKey::from_bytes(signer.public).key_id();
    let mut file = Vec::new();
    let mut tail = LineHash::GENESIS;
    let mut first_bad = None;
    for seq in 0..=lines {
        let (ty, body) = if seq == 0 {
            let mut o = Object::new();
            o.insert("public_key", PublicKey::from_bytes(signer.public));
            ("open", o)
        } else if seq == lines {
            ("close", Object::new())
        } else {
            let call = format!("call-{seq}");
            ("outcome", support::unrun_outcome(&call, "tool").to_object())
        };
        // The chain members as the writer puts them, then the signature's.
        let sealed = seal(ty, body, seq, tail, None).expect("seal");
        let Ok(Value::Object(mut body)) = json::parse(&sealed.bytes) else {
            unreachable!("a sealed line is an object")
        };
        body.insert("key_id", key_id);
        let message = body.to_canonical();
        let hurt = damaged
            .iter()
            .find(|(at, _)| *at == seq)
            .map_or(Damage::None, |(_, d)| d.clone());
        let sig = make(signer, &message, seq, &hurt);
        if first_bad.is_none() && !signer.strict(&message, &sig) {
            first_bad = Some(seq);
        }
        body.insert(
            "signature",
            Value::String(Signature::from_bytes(sig).to_hex()),
        );
        let bytes = body.to_canonical();
        tail = LineHash::of_line(&bytes);
        file.extend_from_slice(&bytes);
        file.push(b'\n');
    }
    (file, first_bad)
}

/// Mostly ordinary keys, so that most batches are ones the batch path decides.
fn key_torsion() -> impl Strategy<Value = usize> {
    prop_oneof![8 => Just(0usize), 1 => 1usize..8]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A batch passes exactly when strict accepts every item, for torsion-free keys;
    /// under a torsioned key it never passes (strict decides those).
    #[test]
    fn batch_agrees_with_strict(
        items in proptest::collection::vec((0u64..3, key_torsion(), damage(), any::<u64>()), 1..12),
    ) {
        let signers: Vec<Signer> = items.iter().map(|(seed, t, _, _)| Signer::new(*seed, *t)).collect();
        let keys: Vec<VerifyingKey> = signers.iter().map(Signer::verifying_key).collect();
        let messages: Vec<Vec<u8>> = items.iter().map(|(_, _, _, n)| format!("message {n}").into_bytes()).collect();
        let sigs: Vec<Signature> = items.iter().zip(&signers).zip(&messages)
            .map(|(((_, _, d, n), s), m)| Signature::from_bytes(make(s, m, *n % 1000, d)))
            .collect();
        let batch: Vec<_> = keys.iter().zip(&messages).zip(&sigs).map(|((k, m), s)| (k, &m[..], s)).collect();
        let strict = batch.iter().all(|(k, m, s)| k.verify_strict(m, s));
        let torsion_free = keys.iter().all(VerifyingKey::is_torsion_free);
        prop_assert_eq!(torsion_free, items.iter().all(|(_, t, _, _)| *t == 0));
        let passed = verify_batch(&batch);
        prop_assert!(!passed || strict, "the batch passed what strict rejects");
        prop_assert_eq!(passed, strict && torsion_free);
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Over a whole file, the verdict and the first finding are strict's, for every
    /// thread count, across batch boundaries (2048 signed lines a batch; below 192 the
    /// workers check line by line).
    #[test]
    fn file_first_finding_is_stricts(
        key_torsion in key_torsion(),
        lines in 1usize..4500,
        damaged in proptest::collection::vec((0usize..4500, damage()), 0..4),
    ) {
        let signer = Signer::new(7, key_torsion);
        // Positions as a share of the file, so that damage lands inside it.
        let damaged: Vec<(u64, Damage)> = damaged
            .into_iter()
            .map(|(at, d)| ((at % (lines + 1)) as u64, d))
            .collect();
        let (file, first_bad) = build_file(&signer, lines as u64, &damaged);
        let options = Options { trust: None, threads: 1, approvers: None };
        let reference = verify_line_by_line(&file[..], &options).expect("in memory");
        for threads in [1, 2, 3] {
            let report = verify(&file[..], &Options { trust: None, threads, approvers: None }).expect("in memory");
            prop_assert_eq!(&report, &reference, "the same report as strict line by line");
            match (first_bad, report.verdict()) {
                (None, Verdict::Verified(_)) => {}
                (Some(seq), Verdict::Tampered(Tampered::BadSignature { at, line, problem })) => {
                    prop_assert_eq!(at.seq, seq);
                    prop_assert_eq!(*line, seq + 1);
                    prop_assert_eq!(problem, &SignatureProblem::DoesNotVerify);
                    let before = report.coverage().map(|p| p.seq);
                    prop_assert_eq!(before, seq.checked_sub(1), "coverage ends just before");
                }
                (expected, verdict) => prop_assert!(false, "expected first bad {:?}, got {:?}", expected, verdict),
            }
        }
    }
}

/// A torsioned `R` of order 2 with `S` recomputed, in a batch the workers check as
/// one: the random combination alone misses it half the time, so without the torsion
/// test some of these runs would report Verified.
#[test]
fn order_two_torsion_in_a_full_batch_is_found_every_time() {
    let signer = Signer::new(3, 0);
    let (file, first_bad) = build_file(&signer, 1100, &[(700, Damage::TorsionedR(4))]);
    assert_eq!(first_bad, Some(700));
    for run in 0..24 {
        let report = verify(
            &file[..],
            &Options {
                trust: None,
                threads: 2,
                approvers: None,
            },
        )
        .expect("in memory");
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::BadSignature { line: 701, .. })
            ),
            "run {run}: {}",
            report.headline()
        );
    }
}

/// The small-order points and the non-canonical spellings really are what the damage
/// names say: otherwise the properties above would test less than they claim.
#[test]
fn adversarial_inputs_are_what_they_claim() {
    for (i, t) in EIGHT_TORSION.iter().enumerate() {
        assert!(t.is_small_order());
        assert_eq!(i == 0, t.is_torsion_free());
    }
    // At least one y ≥ p spelling decodes, so batches meet one.
    let decodes = (0u8..19)
        .filter(|y| {
            let mut r = [0xffu8; 32];
            r[31] = 0x7f;
            r[0] = 0xed + y;
            CompressedEdwardsY(r).decompress().is_some()
        })
        .count();
    assert!(decodes > 0);
    // A torsioned R with S recomputed satisfies the cofactored equation, not strict's.
    let signer = Signer::new(1, 0);
    let sig = signer.sign_with(b"m", Scalar::from(5u8), EIGHT_TORSION[4]);
    assert!(!signer.strict(b"m", &sig));
    let r = CompressedEdwardsY(sig[..32].try_into().unwrap())
        .decompress()
        .unwrap();
    let s = Scalar::from_canonical_bytes(sig[32..].try_into().unwrap()).unwrap();
    let a = CompressedEdwardsY(signer.public).decompress().unwrap();
    let k = signer.challenge(&sig[..32].try_into().unwrap(), b"m");
    assert_eq!(
        (B * s - r - a * k).mul_by_cofactor(),
        EdwardsPoint::default()
    );
    // Under a torsioned key, strictly valid signatures exist, and batches leave them to strict.
    let torsioned = Signer::new(1, 4);
    let valid = torsioned.valid(b"m", 1);
    let key = torsioned.verifying_key();
    assert!(!key.is_torsion_free());
    let sig = Signature::from_bytes(valid);
    assert!(key.verify_strict(b"m", &sig));
    assert!(!verify_batch(&[(&key, &b"m"[..], &sig)]));
}
