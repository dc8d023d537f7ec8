//! The pinned official MCP peers (tests/mcp-peers/install.sh), installed once per
//! machine into `<target dir>/mcp-peers`; a failed install fails the test naming them.
//! Used by the tests that drive them (`crate::common::peers`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the peers are, installing them first if need be.
pub fn peers_dir() -> &'static Path {
    static PEERS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let peers = PEERS.get_or_init(|| {
        // The binary sits in <target>/debug; the peers go beside the build outputs.
        let target = Path::new(env!("CARGO_BIN_EXE_aegis"))
            .parent()
            .and_then(Path::parent)
            .expect("the target dir")
            .to_path_buf();
        let prefix = target.join("mcp-peers");
        let out = Command::new("bash")
            .arg(repo().join("tests/mcp-peers/install.sh"))
            .arg(&prefix)
            .output()
            .map_err(|e| format!("cannot run tests/mcp-peers/install.sh: {e}"))?;
        if out.status.success() {
            Ok(prefix)
        } else {
            Err(format!(
                "installing the MCP peers pinned in tests/mcp-peers/install.sh (mcp==2.3.0 \
                 from PyPI; server-everything, server-filesystem, conformance and node@22 \
                 from npm) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    match peers {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}
