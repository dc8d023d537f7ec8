//! Test support shared by the integration tests of this crate.
#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod vectors;

use std::path::PathBuf;

/// The repository's `spec/vectors` directory.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}
