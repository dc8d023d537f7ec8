//! No native code the operator did not choose: a profile is found by name only where the
//! operator put it, a plugin path in a profile means the same file from any working
//! directory, and a plugin file is loaded only if no other user could have chosen or
//! changed which bytes those are — and the bytes loaded are the bytes hashed.

use aegis_runtime::plugin::CheckedLibrary;
use aegis_runtime::{LoadError, Plugin, Profile, ProfileError, ProfileSource, Registry};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use aegis_test_support as support;
use support::cdylib;

/// The working directory is the process's: tests that move it take this first.
static CWD: Mutex<()> = Mutex::new(());

/// Runs `f` with the working directory at `dir`, then moves back.
fn in_dir<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    let _guard = CWD.lock().unwrap_or_else(|e| e.into_inner());
    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(dir).unwrap();
    let out = f();
    std::env::set_current_dir(before).unwrap();
    out
}

/// A private (0700) directory to build layouts in.
fn private_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Copies `package`'s library to `to` (mode 0755), creating the directories on the way.
fn install(package: &str, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(cdylib(package), to).unwrap();
    chmod(to, 0o755);
    to.to_owned()
}

fn profile_text(audit_plugin: &str) -> String {
    format!(
        "name = \"planted\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\n[capability]\n[sandbox]\n[audit]\nplugin = {audit_plugin:?}\n"
    )
}

/// Regression: a plain `aegis run` in a checkout holding `./profiles/default.toml` used
/// that file, and so loaded (and ran the constructors of) the plugin it named.
#[test]
fn a_profile_planted_in_the_working_directory_is_not_found_by_name() {
    let dir = private_dir();
    let planted = dir.path().join("profiles");
    std::fs::create_dir(&planted).unwrap();
    install("aegis-test-plugin-misbehaving", &planted.join("libevil.so"));
    std::fs::write(planted.join("default.toml"), profile_text("./libevil.so")).unwrap();
    std::fs::write(planted.join("planted.toml"), profile_text("./libevil.so")).unwrap();

    in_dir(dir.path(), || {
        let p = Profile::find("default").unwrap();
        assert_eq!(p.source, ProfileSource::Embedded);
        assert_eq!(p.name, "default");
        assert!(matches!(
            Profile::find("planted"),
            Err(ProfileError::NotFound { .. })
        ));
        for listed in Profile::list() {
            let listed = listed.unwrap();
            assert!(
                !matches!(&listed.source, ProfileSource::File(f) if f.starts_with(dir.path())),
                "listed a profile from the working directory: {:?}",
                listed.source
            );
        }
        // Named as a path, the operator chose it: it is read, from where they said.
        let chosen = Profile::find("profiles/planted.toml").unwrap();
        assert_eq!(
            chosen.source,
            ProfileSource::File(
                std::path::absolute(dir.path().join("profiles/planted.toml")).unwrap()
            )
        );
    });
}

/// A relative plugin path is the profile file's neighbour, whatever the working
/// directory holds under the same name.
#[test]
fn a_relative_plugin_path_resolves_against_the_profile_file() {
    let dir = private_dir();
    let conf = dir.path().join("conf");
    install("aegis-sink-memory-plugin", &conf.join("plugins/libsink.so"));
    let profile = conf.join("p.toml");
    std::fs::write(&profile, profile_text("plugins/libsink.so")).unwrap();
    // The decoy a cwd-relative lookup would find.
    let elsewhere = dir.path().join("elsewhere");
    install(
        "aegis-policy-static-plugin",
        &elsewhere.join("plugins/libsink.so"),
    );

    let loaded = in_dir(&elsewhere, || {
        let p = Profile::read(&profile).unwrap();
        p.resolve(&Registry::new().with_search_path(vec![]), "audit", &p.audit)
            .unwrap()
    });
    assert_eq!(loaded.metadata().name, "memory-sink");

    // An embedded profile has no directory: a relative path in one is refused.
    let e = Profile::parse(
        &profile_text("plugins/libsink.so"),
        "embedded:x",
        ProfileSource::Embedded,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("embedded:x:8: audit.plugin: relative path") && e.contains("embedded"),
        "{e}"
    );
}

#[test]
fn a_symlinked_plugin_file_is_refused() {
    let dir = private_dir();
    let real = install("aegis-sink-memory-plugin", &dir.path().join("libreal.so"));
    let link = dir.path().join("liblink.so");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert!(matches!(
        Plugin::load(&link, None),
        Err(LoadError::NotRegularFile { .. })
    ));
}

/// A directory anyone may write lets anyone choose what the path names — at any depth,
/// and whether the walk reaches it directly or through a symlink.
#[test]
fn a_world_or_group_writable_directory_on_the_way_is_refused() {
    let dir = private_dir();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let open = base.join("open");
    let so = install("aegis-sink-memory-plugin", &open.join("deep/libsink.so"));
    chmod(&open, 0o777);
    match Plugin::load(&so, None) {
        Err(LoadError::DirectoryWritable { dir, mode, .. }) => {
            assert_eq!((dir, mode), (open.clone(), 0o777));
        }
        other => panic!("loaded through a world-writable directory: {other:?}"),
    }
    // Reached through a symlink that lives in a private directory.
    let private = base.join("private");
    std::fs::create_dir(&private).unwrap();
    std::os::unix::fs::symlink(&open, private.join("link")).unwrap();
    assert!(matches!(
        Plugin::load(&private.join("link/deep/libsink.so"), None),
        Err(LoadError::DirectoryWritable { .. })
    ));
    // A symlink that lives in the open directory, pointing at a private one.
    let good = base.join("good");
    install("aegis-sink-memory-plugin", &good.join("libsink.so"));
    std::os::unix::fs::symlink(&good, open.join("to-good")).unwrap();
    assert!(Plugin::load(&good.join("libsink.so"), None).is_ok());
    assert!(matches!(
        Plugin::load(&open.join("to-good/libsink.so"), None),
        Err(LoadError::DirectoryWritable { .. })
    ));

    // Group-writable counts too.
    chmod(&open, 0o775);
    assert!(matches!(
        Plugin::load(&so, None),
        Err(LoadError::DirectoryWritable { mode: 0o775, .. })
    ));
    // A sticky directory (like /tmp) does not let others rename our entries.
    chmod(&open, 0o1777);
    assert_eq!(
        Plugin::load(&so, None).unwrap().metadata().name,
        "memory-sink"
    );
}

#[test]
fn a_group_writable_plugin_file_is_refused() {
    let dir = private_dir();
    let so = install("aegis-sink-memory-plugin", &dir.path().join("libsink.so"));
    chmod(&so, 0o664);
    assert!(matches!(
        Plugin::load(&so, None),
        Err(LoadError::Writable { mode: 0o664, .. })
    ));
}

/// Only checkable with the right to give a file away: as root, a directory or file
/// handed to another user is refused.
#[test]
fn a_directory_or_file_owned_by_another_user_is_refused() {
    let dir = private_dir();
    let sub = dir.path().join("theirs");
    let so = install("aegis-sink-memory-plugin", &sub.join("libsink.so"));
    if std::os::unix::fs::chown(&so, Some(65534), None).is_err() {
        // Not root: giving a file away is refused, and so is this case's setup.
        return;
    }
    assert!(matches!(
        Plugin::load(&so, None),
        Err(LoadError::Owner { owner: 65534, .. })
    ));
    std::os::unix::fs::chown(&so, Some(0), None).unwrap();
    std::os::unix::fs::chown(&sub, Some(65534), None).unwrap();
    assert!(matches!(
        Plugin::load(&so, None),
        Err(LoadError::DirectoryOwner { owner: 65534, .. })
    ));
}

/// The rename race: a pinned file is swapped for another after it was hashed. What
/// loads is still the file that was hashed, because it is loaded through the
/// descriptor that was read, not by its path again.
#[test]
fn the_bytes_loaded_are_the_bytes_hashed() {
    let dir = private_dir();
    let path = install("aegis-sink-memory-plugin", &dir.path().join("libpinned.so"));
    let other = install(
        "aegis-policy-static-plugin",
        &dir.path().join("libother.so"),
    );
    let pin = *CheckedLibrary::open(&path, None).unwrap().sha256();

    let checked = CheckedLibrary::open(&path, Some(&pin)).unwrap();
    std::fs::rename(&other, &path).unwrap();
    let loaded = checked.load().unwrap();
    assert_eq!(loaded.metadata().name, "memory-sink");
    assert_eq!(
        loaded.origin(),
        &aegis_runtime::Origin::Library {
            path: path.clone(),
            sha256: pin
        }
    );
    // And the swapped-in file, asked for by the same pin, is refused.
    assert!(matches!(
        Plugin::load(&path, Some(&pin)),
        Err(LoadError::PinMismatch { .. })
    ));
}
