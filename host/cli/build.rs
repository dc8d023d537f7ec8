//! Link settings for the confinement helper, whose start-up every confined server pays.

fn main() {
    // Packed relative relocations (DT_RELR): the helper's ~7,000 relative relocations
    // shrink from 24 bytes each to a bitmap, so the loader reads a few hundred bytes
    // instead of ~170 KB at every start. Needs glibc 2.36, as the rest of this build does.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bin=aegis-confine-helper=-Wl,-z,pack-relative-relocs");
    }
}
