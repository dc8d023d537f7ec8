//! Writes `station-api/src/lib.rs` to OUT_DIR without the lines between its
//! `// previous-api: cut from here` and `// previous-api: end of cut.` markers (the
//! trait method added after the API an older plugin has), and builds `author.rs` with
//! `cfg(aegis_api_before_indexed)`, which drops its wrapper for that method.
use std::path::PathBuf;

fn main() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../station-api/src")
        .canonicalize()
        .expect("station-api/src");
    let (lib, author) = (src.join("lib.rs"), src.join("author.rs"));
    println!("cargo:rerun-if-changed={}", lib.display());
    println!("cargo:rerun-if-changed={}", author.display());
    println!("cargo:rustc-cfg=aegis_api_before_indexed");
    let text = std::fs::read_to_string(&lib).expect("station-api/src/lib.rs");
    let (mut out, mut cutting, mut cuts) = (String::new(), false, 0);
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("// previous-api: cut from here") {
            (cutting, cuts) = (true, cuts + 1);
        } else if t.starts_with("// previous-api: end of cut") {
            cutting = false;
        } else if cutting || t.starts_with("//!") {
            // Cut, or an inner doc comment, which `include!` does not accept.
        } else if t == "mod author;" {
            out += &format!("#[path = {:?}]\nmod author;\n", author.display().to_string());
        } else {
            out += line;
            out.push('\n');
        }
    }
    assert!(cuts == 1 && !cutting, "expected one marked cut in {}", lib.display());
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("lib.rs");
    std::fs::write(dest, out).expect("writes lib.rs");
}
