//! Roots are held by handle: in one long-lived pipeline, a call that rearranges a
//! directory another tool holds as a root cannot send that tool's next call elsewhere.
//!
//! Tool A holds a write root `W`; tool B holds a read root `W/ref`, holding
//! `data.txt` = `original`. Next to `W` sits `outside/data.txt` = `secret`. Call 1 (A,
//! a host handler: host code, which can touch the file system as it likes) rearranges
//! `W/ref`; call 2 (B) reads `data.txt` in its root. B must never return `secret` (or
//! the contents of an impostor directory): it is refused, naming the root, or it reads
//! the original directory; either way the record verifies and says so.
//!
//! Each variant runs with B as a sandboxed wasm tool (`read-file`, given the file's
//! absolute path under its root) and as a Model B host handler (reading through its
//! context).
//!
//! Checked against the code before roots were held (roots re-resolved by path on each
//! call): the symlink variants returned `secret` and the rename variant `impostor`, in
//! both the sandbox and the handler context.

use aegis_record::ExecutionOutcome;
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallClass, CallRecord};
use aegis_suites::{Harness, wasm_tool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// What call 1 does to `W/ref`.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// Removes it and puts a relative symlink to `../outside` in its place.
    RemoveThenSymlink,
    /// Renames it away (inside `W`) and puts a relative symlink to `../outside` in
    /// its place.
    RenameThenSymlink,
    /// Renames it away and makes a new directory in its place, with its own
    /// `data.txt` = `impostor`.
    RenameThenNewDir,
    /// Removes it.
    Remove,
}

impl Swap {
    fn apply(self, w: &Path) -> std::io::Result<()> {
        let target = w.join("ref");
        match self {
            Swap::RemoveThenSymlink | Swap::Remove => std::fs::remove_dir_all(&target)?,
            Swap::RenameThenSymlink | Swap::RenameThenNewDir => {
                std::fs::rename(&target, w.join("ref-old"))?
            }
        }
        match self {
            Swap::RemoveThenSymlink | Swap::RenameThenSymlink => {
                std::os::unix::fs::symlink("../outside", &target)
            }
            Swap::RenameThenNewDir => {
                std::fs::create_dir(&target)?;
                std::fs::write(target.join("data.txt"), "impostor")
            }
            Swap::Remove => Ok(()),
        }
    }

    /// Whether the original directory still exists (somewhere) after the swap.
    fn keeps_original(self) -> bool {
        matches!(self, Swap::RenameThenSymlink | Swap::RenameThenNewDir)
    }
}

/// How B reads.
#[derive(Clone, Copy, Debug)]
enum Reader {
    Sandbox,
    Handler,
}

struct Setup {
    harness: Harness,
    /// The canonical `W/ref`, as registered.
    root: PathBuf,
    /// Holds `W` and `outside` until the test ends.
    _base: tempfile::TempDir,
}

fn setup(swap: Swap, reader: Reader) -> Setup {
    let base = tempfile::tempdir().unwrap();
    // Canonical from the start, so paths compare with the record's.
    let base_path = std::fs::canonicalize(base.path()).unwrap();
    let w = base_path.join("W");
    let root = w.join("ref");
    let outside = base_path.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("data.txt"), "original").unwrap();
    std::fs::write(outside.join("data.txt"), "secret").unwrap();

    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    let swap_w = w.clone();
    handlers.insert(
        "a".into(),
        Arc::new(move |_ctx, _| {
            swap.apply(&swap_w).map_err(|e| e.to_string())?;
            Ok(b"swapped".to_vec())
        }),
    );
    let host_tool = |id: &str, read: Vec<PathBuf>, write: Vec<PathBuf>| ToolManifest {
        id: id.into(),
        kind: ToolKind::Host,
        fs_read: read,
        fs_write: write,
        net: Vec::new(),
        limits: DEFAULT_LIMITS,
    };
    let b = match reader {
        Reader::Sandbox => wasm_tool("b", "read-file", &[&root], &[], DEFAULT_LIMITS),
        Reader::Handler => {
            handlers.insert(
                "b".into(),
                Arc::new(|ctx, _| {
                    let mut f = ctx
                        .open_read(Path::new("data.txt"))
                        .map_err(|e| e.to_string())?;
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut out).map_err(|e| e.to_string())?;
                    Ok(out)
                }),
            );
            host_tool("b", vec![root.clone()], Vec::new())
        }
    };
    let tools = vec![host_tool("a", Vec::new(), vec![w.clone()]), b];
    let harness = Harness::new(ALLOW_ALL, tools, handlers);
    Setup {
        harness,
        root,
        _base: base,
    }
}

fn call_b(s: &Setup) -> CallRecord {
    let file = s.root.join("data.txt");
    let file = file.to_str().unwrap();
    s.harness.call_args("b", b"", &[file])
}

/// Runs one variant: B reads `original` first, A swaps, B either is refused naming the
/// root or reads `original` again; never `secret` or `impostor`.
fn run(swap: Swap, reader: Reader) {
    let s = setup(swap, reader);
    let before = call_b(&s);
    assert_eq!(before.class(), CallClass::Success, "{swap:?} {reader:?}");
    assert_eq!(before.output.as_deref(), Some(&b"original"[..]));

    let a = s.harness.call("a", b"");
    assert_eq!(a.class(), CallClass::Success, "{:?}", a.outcome.execution);

    let after = call_b(&s);
    let output = after.output.clone().unwrap_or_default();
    let shown = String::from_utf8_lossy(&output);
    assert!(
        !shown.contains("secret") && !shown.contains("impostor"),
        "{swap:?} {reader:?}: call 2 read outside its root: {shown:?}"
    );
    if swap.keeps_original() {
        // The held directory is the original one, wherever it now is.
        assert_eq!(after.class(), CallClass::Success, "{swap:?} {reader:?}");
        assert_eq!(after.output.as_deref(), Some(&b"original"[..]));
    } else {
        // The original directory is gone: refused when execution starts, naming the
        // root, before the tool was handed anything.
        assert_eq!(
            after.class(),
            CallClass::HostDenied,
            "{swap:?} {reader:?}: {:?}",
            after.outcome
        );
        let ExecutionOutcome::HostDenied { reason } = &after.outcome.execution else {
            unreachable!()
        };
        assert!(
            reason.contains(&s.root.display().to_string()) && reason.contains("removed"),
            "{reason}"
        );
        assert_eq!(after.output, None);
    }
    let call_id = after.outcome.call_id.clone();
    let checked = s.harness.finish();
    // What the caller was told is what the verified record says.
    assert_eq!(checked.outcome(&call_id), &after.outcome);
}

#[test]
fn a_root_swapped_for_a_symlink_out_after_removal_is_refused_in_the_sandbox() {
    run(Swap::RemoveThenSymlink, Reader::Sandbox);
}

#[test]
fn a_root_swapped_for_a_symlink_out_after_removal_is_refused_in_a_handler() {
    run(Swap::RemoveThenSymlink, Reader::Handler);
}

#[test]
fn a_root_renamed_away_and_replaced_by_a_symlink_out_stays_the_original_in_the_sandbox() {
    run(Swap::RenameThenSymlink, Reader::Sandbox);
}

#[test]
fn a_root_renamed_away_and_replaced_by_a_symlink_out_stays_the_original_in_a_handler() {
    run(Swap::RenameThenSymlink, Reader::Handler);
}

#[test]
fn a_root_renamed_away_and_replaced_by_a_new_directory_stays_the_original_in_the_sandbox() {
    run(Swap::RenameThenNewDir, Reader::Sandbox);
}

#[test]
fn a_root_renamed_away_and_replaced_by_a_new_directory_stays_the_original_in_a_handler() {
    run(Swap::RenameThenNewDir, Reader::Handler);
}

#[test]
fn a_removed_root_is_refused_naming_it_in_the_sandbox() {
    run(Swap::Remove, Reader::Sandbox);
}

#[test]
fn a_removed_root_is_refused_naming_it_in_a_handler() {
    run(Swap::Remove, Reader::Handler);
}
