//! Shared pieces of the workspace's tests and benches: building the plugin cdylibs the
//! tests load, once per test binary, and what a fixture guest answers when all is well.
//!
//! `cargo test` builds library crates as test harnesses and does not produce the `.so`
//! of a cdylib-only crate, so the tests ask cargo for them, in the profile the test
//! binary itself was built with.
//!
//! This crate is a dev-dependency only (`publish = false`). It used to be a file that
//! each test pulled in with `#[path]`, which compiled it once per test binary with its
//! own lint and dead-code settings; a crate is compiled once and checked like any other.
//!
//! [`postgres`] gives tests a real, throwaway PostgreSQL cluster; [`lines`] the
//! record lines tests write into records of their own.

pub mod lines;
pub mod postgres;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Every plugin library a test may load.
pub const PLUGIN_PACKAGES: &[&str] = &[
    "aegis-sink-file-plugin",
    "aegis-sink-memory-plugin",
    "aegis-sink-sqlite",
    "aegis-sink-postgres",
    "aegis-policy-static-plugin",
    "aegis-policy-yaml-plugin",
    "aegis-policy-cedar-plugin",
    "aegis-confine-landlock-plugin",
    "aegis-test-plugin-misbehaving",
    "aegis-test-plugin-incompatible-layout",
    "aegis-test-plugin-incompatible-major",
];

/// The directory the test binary's profile builds into (target/debug or release).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target/<profile>")
        .to_owned()
}

/// The path of `package`'s cdylib, built if needed.
pub fn cdylib(package: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("build").current_dir(env!("CARGO_MANIFEST_DIR"));
        if artifact_dir().ends_with("release") {
            cmd.arg("--release");
        }
        for p in PLUGIN_PACKAGES {
            cmd.args(["-p", p]);
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "building the plugin cdylibs failed");
    });
    artifact_dir().join(format!("lib{}.so", package.replace('-', "_")))
}

/// The auditor's verify-only binary `aegis-verify` (package `aegis-verify`), built if
/// needed in the test binary's profile: a test of another package cannot name it with
/// `CARGO_BIN_EXE_…`.
pub fn verify_only_binary() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-p", "aegis-verify", "--bin", "aegis-verify"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if artifact_dir().ends_with("release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "building aegis-verify failed");
    });
    artifact_dir().join("aegis-verify")
}

/// The plugin built against a deliberately altered copy of the station API, from the
/// separate workspace `tests/plugin-abi/altered-api`, in its own target directory.
pub fn altered_api_plugin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            separate_workspace("altered-api", "altered-abi", "aegis_test_plugin_altered")
        })
        .clone()
}

/// The real YAML policy station built against the station API as it was before
/// `evaluate_axes_indexed` was added (the shape an older plugin has), from the separate
/// workspace `tests/plugin-abi/previous-api`, in its own target directory.
pub fn previous_api_yaml_plugin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            separate_workspace(
                "previous-api",
                "previous-abi",
                "aegis_test_plugin_yaml_before_indexed",
            )
        })
        .clone()
}

/// Builds the workspace `tests/plugin-abi/<dir>` into `target/<target_sub>` in the test
/// binary's profile, and answers the path of its cdylib `lib<lib>.so`.
fn separate_workspace(dir: &str, target_sub: &str, lib: &str) -> PathBuf {
    let profile_dir = artifact_dir();
    let target = profile_dir.parent().expect("target dir").join(target_sub);
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../plugin-abi")
        .join(dir)
        .join("Cargo.toml");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target);
    let sub = if profile_dir.ends_with("release") {
        cmd.arg("--release");
        "release"
    } else {
        "debug"
    };
    let status = cmd.status().expect("cargo runs");
    assert!(status.success(), "building the plugin in {dir} failed");
    target.join(sub).join(format!("lib{lib}.so"))
}

/// What the fixture guest `world-remember` returns when no call's memory reached it:
/// zeros where it looks at blank memory (at 32 KiB and at 2 MiB), then the 64 bytes of
/// its own data segment (at 48 KiB) as the module's image holds them.
pub fn remember_fresh() -> Vec<u8> {
    let mut fresh = vec![0u8; 128];
    fresh.extend_from_slice(b"the module's own data, as every call must find it, 64 bytes long");
    fresh
}
