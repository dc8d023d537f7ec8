//! Builds the station API with its deliberate incompatibility switched on.
fn main() {
    println!("cargo:rustc-cfg=aegis_altered_abi");
}
