//! `aegis-confine-helper`: the confinement helper alone (see
//! `aegis_runtime::confine`). Started by `aegis` with the report and go descriptors;
//! run by hand it refuses with exit 125.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(
        aegis_runtime::confine::helper_main().unwrap_or(aegis_runtime::confine::EXIT_REFUSED),
    )
}
