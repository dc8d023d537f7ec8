//! Keys that prove nothing are never evidence (SPEC §5.4): a key whose seed is
//! published — the development key and every key that signs the spec's vectors — never
//! signs a durable record, and the refusal names the key and leaves no file behind.
//! Variants: the development key given explicitly (not only as the fallback), each
//! vector seed, a record file that already holds an honest session.

use aegis_record::key::{PUBLISHED_TEST_KEYS, SigningKey};
use aegis_runtime::Host;
use aegis_runtime::audit::RetentionError;
use aegis_runtime::pipeline::OpenError;
use aegis_suites::{SUITE, suite_builder};

fn open_with(dir: &std::path::Path, key: Option<SigningKey>) -> Result<Host, OpenError> {
    std::fs::write(dir.join("policy.yaml"), "version: 1\ndefault: allow\n").unwrap();
    let (builder, _) = suite_builder(dir);
    let builder = builder.policy_file(SUITE, &dir.join("policy.yaml"));
    match key {
        Some(key) => builder.signing_key(key).open(),
        None => builder.open(),
    }
}

#[test]
fn every_published_key_is_refused_by_name_for_a_durable_record() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.aarl");
    for published in PUBLISHED_TEST_KEYS {
        let key = SigningKey::from_seed(published.seed);
        let Err(err) = open_with(dir.path(), Some(key.clone())) else {
            panic!("the {} signed a durable record", published.name);
        };
        assert!(
            matches!(
                err,
                OpenError::Retention(RetentionError::PublishedKeyOnDurable { .. })
            ),
            "{err}"
        );
        let said = err.to_string();
        assert!(said.contains(published.name), "{said}");
        assert!(said.contains(&key.key_id().to_hex()), "{said}");
        assert!(
            !said.contains("no signing key was given"),
            "a key was given: {said}"
        );
        assert!(!record.exists(), "a refused open leaves no empty record");
    }
}

/// A record that already holds an honest session is left exactly as it was.
#[test]
fn a_refused_published_key_leaves_an_existing_record_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.aarl");
    let honest = open_with(dir.path(), Some(SigningKey::generate().unwrap())).unwrap();
    honest.into_audit().unwrap().session.close().unwrap();
    let before = std::fs::read(&record).unwrap();
    assert!(!before.is_empty());
    for published in PUBLISHED_TEST_KEYS {
        assert!(open_with(dir.path(), Some(SigningKey::from_seed(published.seed))).is_err());
        assert_eq!(std::fs::read(&record).unwrap(), before);
    }
}
