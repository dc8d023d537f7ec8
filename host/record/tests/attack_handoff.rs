//! Attacks on the key hand-off (spec/SPEC.md §6.3 `key_handoff`, §8.3–8.5, §8.13):
//! forged trust, hand-off chains across sessions, keys coming back after a hand-off,
//! hand-offs in odd places, non-canonical and torsioned next keys, and the batch path
//! against the line-by-line path. Files are sealed line by line with `seal`, so a test
//! can write what no conforming writer would.
//!
//! Written by an attack review; the four claims it found broken were fixed after it
//! (a retired key reported as continuing, a key listed once per hand-off, a
//! non-canonical key encoding, a published key plus torsion not labelled), and their
//! tests now pin the fixes. The others pin claims that held.

mod support;

use aegis_record::json::Object;
use aegis_record::line::{KeyHandoffLine, LineBody};
use aegis_record::verify::{
    HandoffProblem, KeyChangeKind, Options, Report, Tampered, TrustAnchor, Verdict, verify,
    verify_line_by_line,
};
use aegis_record::*;
use support::vectors::{key, outsider, rotated};

/// Writes sealed lines: sessions, hand-offs and anything else, signed by whatever key a
/// test names.
struct File {
    out: Vec<u8>,
    seq: u64,
    tail: LineHash,
    /// The hash of the last line in the file, for the next open's back-reference.
    last: Option<LineHash>,
}

impl File {
    fn new() -> File {
        File {
            out: Vec::new(),
            seq: 0,
            tail: LineHash::GENESIS,
            last: None,
        }
    }

    fn push(&mut self, ty: &str, body: Object, signer: &SigningKey) {
        let sealed = seal(ty, body, self.seq, self.tail, Some(signer)).unwrap();
        self.seq += 1;
        self.tail = sealed.hash;
        self.last = Some(sealed.hash);
        self.out.extend_from_slice(&sealed.bytes);
        self.out.push(b'\n');
    }

    /// An open line publishing `public` (signed by `signer`), linked to the file's last
    /// line unless `prev` says otherwise.
    fn open_as(&mut self, public: PublicKey, signer: &SigningKey, prev: Option<Option<LineHash>>) {
        self.seq = 0;
        self.tail = LineHash::GENESIS;
        let mut o = Object::new();
        o.insert("public_key", public);
        if let Some(p) = prev.unwrap_or(self.last) {
            o.insert("prev_session_tail", p);
        }
        self.push("open", o, signer);
    }

    fn open(&mut self, k: &SigningKey) {
        self.open_as(k.public_key(), k, None);
    }

    fn hand_off(&mut self, signer: &SigningKey, next: PublicKey) {
        self.push("key_handoff", KeyHandoffLine::to(next).to_object(), signer);
    }

    fn hand_off_raw(&mut self, signer: &SigningKey, next: [u8; 32], next_id: KeyId) {
        let h = KeyHandoffLine {
            next_public_key: PublicKey::from_bytes(next),
            next_key_id: next_id,
        };
        self.push("key_handoff", h.to_object(), signer);
    }

    fn call(&mut self, signer: &SigningKey, id: &str) {
        let intent = support::intent_for(id, "echo");
        let sealed = seal("intent", intent.to_object(), self.seq, self.tail, None).unwrap();
        self.seq += 1;
        self.tail = sealed.hash;
        self.last = Some(sealed.hash);
        self.out.extend_from_slice(&sealed.bytes);
        self.out.push(b'\n');
        self.push(
            "outcome",
            support::unrun_outcome(id, "echo").to_object(),
            signer,
        );
    }

    fn close(&mut self, signer: &SigningKey) {
        self.push("close", Object::new(), signer);
    }
}

/// Both paths, which must agree; the batch path's report is returned.
fn check(bytes: &[u8], trust: Option<&[&SigningKey]>) -> Report {
    let trust: Option<Vec<TrustAnchor>> =
        trust.map(|keys| keys.iter().map(|k| k.public_key().into()).collect());
    let options = Options {
        trust,
        threads: 2,
        approvers: None,
    };
    let batch = verify(bytes, &options).unwrap();
    let single = verify_line_by_line(bytes, &options).unwrap();
    assert_eq!(batch, single, "the batch and line-by-line paths disagree");
    batch
}

fn untrusted_at(report: &Report, line: u64) -> bool {
    matches!(report.verdict(), Verdict::Tampered(Tampered::UntrustedKey { line: l, .. }) if *l == line)
}

/// Claim (§8.13): trust passes only through a hand-off from a trusted key. A session
/// opened by an outsider that hands to a key, and a later session opened with that key,
/// give the outsider nothing: the first open is already untrusted.
#[test]
fn a_handoff_in_an_untrusted_session_vouches_for_nothing() {
    let (k, r, o) = (key(), rotated(), outsider());
    let mut f = File::new();
    f.open(&o);
    f.hand_off(&o, r.public_key());
    f.close(&r);
    f.open(&r);
    f.call(&r, "c");
    f.close(&r);
    assert!(untrusted_at(&check(&f.out, Some(&[&k])), 1));
    // The same with a trusted session first: the outsider's open is still refused,
    // and the hand-off after it is never reached.
    let mut f = File::new();
    f.open(&k);
    f.close(&k);
    f.open(&o);
    f.hand_off(&o, r.public_key());
    f.close(&r);
    assert!(untrusted_at(&check(&f.out, Some(&[&k])), 3));
}

/// Claim (§8.13): a hand-off in a session whose open key is untrusted is never reached
/// in a pinned walk, even when a trusted key hands to that same key later in the file.
#[test]
fn an_untrusted_open_is_not_rescued_by_a_later_handoff_to_its_key() {
    let (k, o) = (key(), outsider());
    let mut f = File::new();
    f.open(&o);
    f.hand_off(&o, k.public_key());
    f.close(&k);
    f.open(&k);
    f.hand_off(&k, o.public_key());
    f.close(&o);
    assert!(untrusted_at(&check(&f.out, Some(&[&k])), 1));
    assert_eq!(
        check(&f.out, None).verdict(),
        &Verdict::Verified(Trust::Unpinned)
    );
}

/// Claim (§8.13): a hand-off chain across sessions passes trust forwards, one link at a
/// time; a session that opens with a handed-to key must still link to the file's last
/// line (absent or wrong back-reference is session_boundary, not trust).
#[test]
fn a_handed_to_key_must_still_link_to_the_chain() {
    let (k, r) = (key(), rotated());
    let mut f = File::new();
    f.open(&k);
    f.hand_off(&k, r.public_key());
    f.close(&r);
    let good = f.last;
    for prev in [None, Some(LineHash::GENESIS)] {
        let mut g = File {
            out: f.out.clone(),
            seq: 0,
            tail: LineHash::GENESIS,
            last: good,
        };
        g.open_as(r.public_key(), &r, Some(prev));
        g.close(&r);
        let report = check(&g.out, Some(&[&k]));
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::SessionBoundary { line: 4, .. })
            ),
            "{}",
            report.headline()
        );
    }
    // A file that starts with the handed-to key, claiming the hand-off's session as
    // its predecessor (the front cut off): not trusted, and a boundary problem first.
    let mut g = File::new();
    g.open_as(r.public_key(), &r, Some(good));
    g.close(&r);
    let report = check(&g.out, Some(&[&k]));
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::SessionBoundary { line: 1, .. })
        ),
        "{}",
        report.headline()
    );
}

/// Claim (§8.5): after each hand-off only the key it names signs; two hand-offs in one
/// session move the key twice, and either earlier key signing after them is
/// key_mismatch, in both paths.
#[test]
fn two_handoffs_in_one_session_leave_only_the_last_key_in_force() {
    let (k, r, o) = (key(), rotated(), outsider());
    let build = |late: &SigningKey| {
        let mut f = File::new();
        f.open(&k);
        f.hand_off(&k, r.public_key());
        f.call(&r, "a");
        f.hand_off(&r, o.public_key());
        f.call(late, "b");
        f.close(&o);
        f.out
    };
    let report = check(&build(&o), Some(&[&k]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
    let via: Vec<_> = report
        .trusted_through_handoff()
        .iter()
        .map(|t| (t.key_id, t.from))
        .collect();
    assert_eq!(
        via,
        vec![(r.key_id(), k.key_id()), (o.key_id(), r.key_id())]
    );
    for old in [&k, &r] {
        let report = check(&build(old), Some(&[&k]));
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::KeyMismatch { line: 7, .. })
            ),
            "{}",
            report.headline()
        );
    }
}

/// Claim (§6.3, §8.5): a hand-off straight after the open, and one after a close (which
/// the verifier accepts, §8.2), both move the key: the old key signing next is
/// key_mismatch, the next key verifies.
#[test]
fn a_handoff_right_after_open_or_after_close_moves_the_key() {
    let (k, r) = (key(), rotated());
    for after_close in [false, true] {
        let build = |late: &SigningKey| {
            let mut f = File::new();
            f.open(&k);
            if after_close {
                f.close(&k);
            }
            f.hand_off(&k, r.public_key());
            f.close(late);
            f.out
        };
        let report = check(&build(&r), Some(&[&k]));
        assert_eq!(
            report.verdict(),
            &Verdict::Verified(Trust::Pinned),
            "{}",
            report.headline()
        );
        let line = if after_close { 4 } else { 3 };
        let report = check(&build(&k), Some(&[&k]));
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::KeyMismatch { line: l, .. }) if *l == line
            ),
            "{}",
            report.headline()
        );
    }
}

/// Documented non-guarantee (§8.13, §11): a hand-off does not revoke. A later session
/// that re-opens with the old key verifies, pinned to the old key, and the report names
/// the change as unannounced. Pinned to the next key alone, the file is untrusted.
#[test]
fn the_old_key_reopening_after_a_handoff_is_named_unannounced() {
    let (k, r) = (key(), rotated());
    let mut f = File::new();
    f.open(&k);
    f.hand_off(&k, r.public_key());
    f.close(&r);
    f.open(&k);
    f.call(&k, "after");
    f.close(&k);
    let report = check(&f.out, Some(&[&k]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
    let last = report.key_changes().last().unwrap();
    assert_eq!(last.kind, KeyChangeKind::Unannounced);
    assert_eq!((last.from, last.to), (r.key_id(), k.key_id()));
    assert!(report.to_text().contains(&format!(
        "key_unannounced session 1 from {} to {} (not the key the latest key_handoff names)\n",
        r.key_id(),
        k.key_id()
    )));
    assert!(untrusted_at(&check(&f.out, Some(&[&r])), 1));
}

/// BROKEN (report, §9.2 item 8 / §8.4 step 6): a key that was handed to once and then
/// handed *away* from (k → r, then r → o) can re-open a later session, and the report
/// calls that `key_continues … handed off at session 0` — the same label an announced
/// rotation gets — where the same comeback by the first key (never handed to) is
/// `key_unannounced`. The retired key is exactly the one a rotation moves away from
/// (because it may be compromised), and nothing in the file says the holder of `o`
/// handed back to `r`; the reader was told the change was announced. (Found by an
/// attack review; now only the file's latest hand-off continues, SPEC §8.4.)
#[test]
fn a_retired_key_coming_back_is_not_reported_as_continuing() {
    let (k, r, o) = (key(), rotated(), outsider());
    let mut f = File::new();
    f.open(&k);
    f.hand_off(&k, r.public_key());
    f.close(&r);
    f.open(&r);
    f.hand_off(&r, o.public_key());
    f.close(&o);
    // Whoever holds the retired key r appends a session of their own.
    f.open(&r);
    f.call(&r, "comeback");
    f.close(&r);
    let report = check(&f.out, None);
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    let last = report.key_changes().last().unwrap();
    assert_eq!(
        last.kind,
        KeyChangeKind::Unannounced,
        "{}",
        report.to_text()
    );
    assert_eq!((last.from, last.to), (o.key_id(), r.key_id()));
}

/// Claim (§9.2 item 9): the report lists each key accepted through a hand-off. A key
/// handed to twice (k → r, r → k, k → r) is one key accepted; it is listed once per
/// hand-off before the fix.
#[test]
fn a_key_handed_to_twice_is_listed_once_as_trusted_through_a_handoff() {
    let (k, r) = (key(), rotated());
    let mut f = File::new();
    f.open(&k);
    f.hand_off(&k, r.public_key());
    f.hand_off(&r, k.public_key());
    f.hand_off(&k, r.public_key());
    f.close(&r);
    let report = check(&f.out, Some(&[&k]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
    assert_eq!(report.trusted_through_handoff().len(), 1);
}

/// Claim (§8.3 step 12): `next_key_id` must be the key id of `next_public_key` as
/// written. The key id of the key the line does not name, of the signer, or of the key
/// id itself, is bad_key_handoff.
#[test]
fn a_key_id_for_another_key_is_a_bad_handoff() {
    let (k, r, o) = (key(), rotated(), outsider());
    for wrong in [
        o.key_id(),
        k.key_id(),
        KeyId::from_bytes(*r.key_id().as_bytes()),
    ] {
        if wrong == r.key_id() {
            continue;
        }
        let mut f = File::new();
        f.open(&k);
        f.hand_off_raw(&k, *r.public_key().as_bytes(), wrong);
        f.close(&r);
        let report = check(&f.out, None);
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::BadKeyHandoff {
                    line: 2,
                    problem: HandoffProblem::KeyIdMismatch,
                    ..
                })
            ),
            "{}",
            report.headline()
        );
    }
}

/// p = 2^255 − 19, little-endian.
fn p_plus(y: u8) -> [u8; 32] {
    // p + y for y < 19: 0xed + y in the low byte, 0xff…, 0x7f at the top.
    let mut b = [0xff; 32];
    b[0] = 0xed + y;
    b[31] = 0x7f;
    b
}

/// A y below 19 whose canonical encoding decodes to a point of large order (so its
/// non-canonical encoding y + p exists); with its canonical bytes.
fn small_y_point() -> Option<(u8, [u8; 32])> {
    use curve25519_dalek::edwards::CompressedEdwardsY;
    (2u8..19).find_map(|y| {
        let mut b = [0u8; 32];
        b[0] = y;
        let p = CompressedEdwardsY(b).decompress()?;
        (!p.is_small_order()).then_some((y, b))
    })
}

/// BROKEN (§6.3: `next_public_key` "MUST be a valid Ed25519 point"; RFC 8032 §5.1.3:
/// decoding fails when y ≥ p): a `next_public_key` whose y is written non-canonically
/// (y + p) is accepted as a next key; it is a second key id for the same point as its
/// canonical encoding. `VerifyingKey::new` (host/record/src/key.rs) takes
/// `ed25519_dalek::VerifyingKey::from_bytes`, which reduces y mod p. Low severity: no
/// one holds the secret of a point with y < 19, so nothing can be signed after such a
/// hand-off; an open line with such a key is accepted the same way.
#[test]
fn a_non_canonical_next_key_is_not_a_point() {
    let k = key();
    let (y, canonical) = small_y_point().expect("some y < 19 is on the curve");
    let bytes = p_plus(y);
    assert_ne!(bytes, canonical);
    let mut f = File::new();
    f.open(&k);
    f.hand_off_raw(&k, bytes, PublicKey::from_bytes(bytes).key_id());
    let report = check(&f.out, None);
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::BadKeyHandoff {
                line: 2,
                problem: HandoffProblem::NotAPoint,
                ..
            })
        ),
        "{}",
        report.headline()
    );
}

/// Claim (§6.3): a next key that is a small-order point in any encoding — canonical,
/// the sign bit set on x = 0, or y written as y + p — is bad_key_handoff (small order),
/// never a key in force.
#[test]
fn every_encoding_of_a_small_order_point_is_refused_as_a_next_key() {
    let k = key();
    let mut one = [0u8; 32];
    one[0] = 1;
    let mut one_signed = one;
    one_signed[31] |= 0x80;
    let mut minus_one = p_plus(0);
    minus_one[0] = 0xec; // p − 1
    let mut minus_one_signed = minus_one;
    minus_one_signed[31] |= 0x80;
    for bytes in [
        one,
        one_signed,
        p_plus(1),
        minus_one,
        minus_one_signed,
        [0u8; 32],
        p_plus(0),
    ] {
        let mut f = File::new();
        f.open(&k);
        f.hand_off_raw(&k, bytes, PublicKey::from_bytes(bytes).key_id());
        f.close(&k);
        let report = check(&f.out, None);
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::BadKeyHandoff {
                    line: 2,
                    problem: HandoffProblem::SmallOrder | HandoffProblem::NotAPoint,
                    ..
                })
            ),
            "{:02x?}: {}",
            bytes,
            report.headline()
        );
    }
}

/// Claim (§8.5, §8.11): a batch that spans hand-offs checks each signature under the
/// key in force at its line. A file long enough for the batch path (≥ 192 signatures
/// in one batch) with a hand-off every few lines verifies in both paths, and one line
/// signed by the key before the latest hand-off is the same finding in both.
#[test]
fn long_files_with_many_handoffs_agree_across_paths() {
    let keys: Vec<SigningKey> = (1u8..=5).map(|i| SigningKey::from_seed([i; 32])).collect();
    for wrong in [None, Some(150usize), Some(299)] {
        let mut f = File::new();
        f.open(&keys[0]);
        let mut in_force = 0usize;
        let mut bad_line = None;
        for i in 0..300usize {
            if i % 7 == 3 {
                let next = (in_force + 1) % keys.len();
                f.hand_off(&keys[in_force], keys[next].public_key());
                in_force = next;
            }
            let signer = if Some(i) == wrong {
                // The key before the latest hand-off: its signature would verify under
                // it, but it is not in force.
                &keys[(in_force + keys.len() - 1) % keys.len()]
            } else {
                &keys[in_force]
            };
            f.call(signer, &format!("c{i}"));
            if Some(i) == wrong {
                bad_line = Some(f.out.iter().filter(|&&b| b == b'\n').count() as u64);
            }
        }
        f.close(&keys[in_force]);
        let report = check(&f.out, Some(&[&keys[0]]));
        match bad_line {
            None => assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned)),
            Some(line) => assert!(
                matches!(
                    report.verdict(),
                    Verdict::Tampered(Tampered::KeyMismatch { line: l, .. }) if *l == line
                ),
                "{}",
                report.headline()
            ),
        }
    }
}

/// Claim (§8.5): the `key_id` a line carries must be the key in force, and the
/// signature must verify under that key. A line that names the key in force but is
/// signed by the previous key (its signature is valid under that one) is bad_signature
/// in both paths, also past the batch threshold.
#[test]
fn a_line_naming_the_new_key_but_signed_by_the_old_fails_in_both_paths() {
    let (k, r) = (key(), rotated());
    let mut f = File::new();
    f.open(&k);
    f.hand_off(&k, r.public_key());
    for i in 0..250 {
        f.call(&r, &format!("c{i}"));
    }
    // Seal a close under r, then replace its signature with k's over the same input.
    let unsigned = seal("close", Object::new(), f.seq, f.tail, None).unwrap();
    let mut obj = match aegis_record::json::parse_line(&unsigned.bytes).unwrap().0 {
        aegis_record::json::Value::Object(o) => o,
        _ => unreachable!(),
    };
    obj.insert("key_id", r.key_id());
    let sig = k.sign(&obj.to_canonical());
    obj.insert("signature", aegis_record::json::Value::String(sig.to_hex()));
    f.out.extend_from_slice(&obj.to_canonical());
    f.out.push(b'\n');
    let lines = f.out.iter().filter(|&&b| b == b'\n').count() as u64;
    let report = check(&f.out, Some(&[&k]));
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::BadSignature { line: l, .. }) if *l == lines
        ),
        "{}",
        report.headline()
    );
}

/// A key with a torsion component: `[a]B + T` for a point `T` of order 8, and the
/// scalar `a` of `seed`. Whoever holds `seed` can sign under it (below); no one else can.
struct Torsioned {
    a: curve25519_dalek::scalar::Scalar,
    public: [u8; 32],
}

impl Torsioned {
    fn of(seed: [u8; 32]) -> Torsioned {
        use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
        use sha2::{Digest, Sha512};
        let h = Sha512::digest(seed);
        let mut bytes: [u8; 32] = h[..32].try_into().unwrap();
        bytes[0] &= 248;
        bytes[31] &= 127;
        bytes[31] |= 64;
        let a = curve25519_dalek::scalar::Scalar::from_bytes_mod_order(bytes);
        let point = ED25519_BASEPOINT_POINT * a + EIGHT_TORSION[1];
        Torsioned {
            a,
            public: point.compress().to_bytes(),
        }
    }

    /// A signature strict verification accepts under the torsioned key: the nonce is
    /// ground until the challenge is a multiple of 8, so `[k]T` vanishes.
    fn sign(&self, message: &[u8]) -> [u8; 64] {
        use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
        use curve25519_dalek::scalar::Scalar;
        use sha2::{Digest, Sha512};
        for i in 0u64.. {
            let r = Scalar::from_bytes_mod_order_wide(
                &Sha512::new()
                    .chain_update(b"torsion nonce")
                    .chain_update(i.to_le_bytes())
                    .chain_update(message)
                    .finalize()
                    .into(),
            );
            let big_r = (ED25519_BASEPOINT_POINT * r).compress().to_bytes();
            let k = Scalar::from_bytes_mod_order_wide(
                &Sha512::new()
                    .chain_update(big_r)
                    .chain_update(self.public)
                    .chain_update(message)
                    .finalize()
                    .into(),
            );
            if k.to_bytes()[0] & 7 != 0 {
                continue;
            }
            let s = r + k * self.a;
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&big_r);
            sig[32..].copy_from_slice(&s.to_bytes());
            return sig;
        }
        unreachable!()
    }

    fn key_id(&self) -> KeyId {
        PublicKey::from_bytes(self.public).key_id()
    }
}

impl File {
    /// A line signed under a torsioned key (key_id and signature set by hand).
    fn push_torsioned(&mut self, ty: &str, body: Object, t: &Torsioned) {
        let unsigned = seal(ty, body, self.seq, self.tail, None).unwrap();
        let mut obj = match aegis_record::json::parse_line(&unsigned.bytes).unwrap().0 {
            aegis_record::json::Value::Object(o) => o,
            _ => unreachable!(),
        };
        obj.insert("key_id", t.key_id());
        let sig = Signature::from_hex(&encode(&t.sign(&obj.to_canonical()))).unwrap();
        obj.insert("signature", aegis_record::json::Value::String(sig.to_hex()));
        let bytes = obj.to_canonical();
        let hash = LineHash::of_line(&bytes);
        self.seq += 1;
        self.tail = hash;
        self.last = Some(hash);
        self.out.extend_from_slice(&bytes);
        self.out.push(b'\n');
    }
}

fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Claim (§8.5, §8.11): the batch path and strict agree under a key in force that has a
/// torsion component (the batch leaves such a key to strict). The holder of `k` hands
/// to `[a]B + T`, which only they can sign under, and signs ~250 lines under it: both
/// paths verify; one line with a corrupted signature is the same finding in both. The
/// hand-off is accepted: it is not the key in force (other bytes), and strict accepts a
/// key of mixed order — it hands the record to no one new.
#[test]
fn a_torsioned_next_key_is_checked_alike_in_both_paths() {
    let seed = [42u8; 32];
    let k = SigningKey::from_seed(seed);
    let t = Torsioned::of(seed);
    assert_ne!(t.public, *k.public_key().as_bytes());
    for corrupt in [None, Some(120usize)] {
        let mut f = File::new();
        f.open(&k);
        f.hand_off_raw(&k, t.public, t.key_id());
        let mut bad_line = None;
        for i in 0..250usize {
            let intent = support::intent_for(&format!("c{i}"), "echo");
            let sealed = seal("intent", intent.to_object(), f.seq, f.tail, None).unwrap();
            f.seq += 1;
            f.tail = sealed.hash;
            f.out.extend_from_slice(&sealed.bytes);
            f.out.push(b'\n');
            let body = support::unrun_outcome(&format!("c{i}"), "echo").to_object();
            if Some(i) == corrupt {
                // Signed under the untorsioned key with the torsioned key's id.
                let unsigned = seal("outcome", body, f.seq, f.tail, None).unwrap();
                let mut obj = match aegis_record::json::parse_line(&unsigned.bytes).unwrap().0 {
                    aegis_record::json::Value::Object(o) => o,
                    _ => unreachable!(),
                };
                obj.insert("key_id", t.key_id());
                let sig = k.sign(&obj.to_canonical());
                obj.insert("signature", aegis_record::json::Value::String(sig.to_hex()));
                let bytes = obj.to_canonical();
                f.seq += 1;
                f.tail = LineHash::of_line(&bytes);
                f.out.extend_from_slice(&bytes);
                f.out.push(b'\n');
                bad_line = Some(f.out.iter().filter(|&&b| b == b'\n').count() as u64);
            } else {
                f.push_torsioned("outcome", body, &t);
            }
        }
        f.push_torsioned("close", Object::new(), &t);
        let report = check(&f.out, Some(&[&k]));
        match bad_line {
            None => assert_eq!(
                report.verdict(),
                &Verdict::Verified(Trust::Pinned),
                "{}",
                report.headline()
            ),
            Some(line) => assert!(
                matches!(
                    report.verdict(),
                    Verdict::Tampered(Tampered::BadSignature { line: l, .. }) if *l == line
                ),
                "{}",
                report.headline()
            ),
        }
    }
}

/// BROKEN (report, §8 "A record signed by a key in PUBLISHED_TEST_KEYS is labelled as
/// proving nothing about its author"): the label goes by key id, so the development
/// key plus a torsion point — which anyone can sign under, the seed being published —
/// is not labelled. Unpinned, such a record reads `Verified (unpinned)` with no
/// published-key warning. Low severity: unpinned proves nothing anyway, and a pin
/// never holds such a key unless an operator put it there (or a trusted key handed to
/// it). Fault: host/record/src/key.rs `published_test_key_id` compares key ids only.
#[test]
fn a_published_key_plus_torsion_is_labelled_as_published() {
    let seed = *b"aegis development key: worthless";
    assert!(SigningKey::from_seed(seed).public_key().is_development());
    let t = Torsioned::of(seed);
    let mut f = File::new();
    let mut open = Object::new();
    open.insert("public_key", PublicKey::from_bytes(t.public));
    f.push_torsioned("open", open, &t);
    f.push_torsioned("close", Object::new(), &t);
    let report = check(&f.out, None);
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert!(
        !report.published_test_keys().is_empty(),
        "{}",
        report.to_text()
    );
}

/// Claim (§6.3 member types): `next_public_key` and `next_key_id` are 64 lowercase hex
/// characters. Another spelling of the same bytes (upper case), a shorter or longer
/// string, or another JSON type is malformed, never a second name for the same key.
#[test]
fn a_next_key_spelled_otherwise_is_malformed() {
    use aegis_record::json::Value;
    let (k, r) = (key(), rotated());
    let pk = r.public_key().to_hex();
    let id = r.key_id().to_hex();
    let spellings: [(Value, Value); 5] = [
        (Value::String(pk.to_uppercase()), Value::String(id.clone())),
        (Value::String(pk.clone()), Value::String(id.to_uppercase())),
        (Value::String(format!("{pk}00")), Value::String(id.clone())),
        (
            Value::String(pk[..62].to_owned()),
            Value::String(id.clone()),
        ),
        (
            Value::String(pk.clone()),
            Value::Array(vec![Value::String(id.clone())]),
        ),
    ];
    for (next_pk, next_id) in spellings {
        let mut body = Object::new();
        body.insert("next_public_key", next_pk);
        body.insert("next_key_id", next_id);
        let mut f = File::new();
        f.open(&k);
        f.push("key_handoff", body, &k);
        f.close(&r);
        let report = check(&f.out, None);
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::Malformed { line: 2, .. })
            ),
            "{}",
            report.headline()
        );
    }
}

/// Claim (§8.3 step 12): a key id written for the canonical encoding of a point, next
/// to a non-canonical encoding of that point, is bad_key_handoff (key ids are over the
/// bytes as written).
#[test]
fn a_key_id_for_another_encoding_of_the_point_is_a_bad_handoff() {
    let k = key();
    let (y, canonical) = small_y_point().expect("some y < 19 is on the curve");
    let mut f = File::new();
    f.open(&k);
    f.hand_off_raw(&k, p_plus(y), PublicKey::from_bytes(canonical).key_id());
    let report = check(&f.out, None);
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::BadKeyHandoff {
                line: 2,
                problem: HandoffProblem::KeyIdMismatch,
                ..
            })
        ),
        "{}",
        report.headline()
    );
}
