//! `aegis-verify`: the auditor's build of `aegis verify`, with nothing else in it.

use clap::Parser;
use std::process::ExitCode;

/// Check an Aegis record file offline: Verified, Indeterminate or Tampered.
///
/// The same report, byte for byte, and the same exit code as `aegis verify`.
#[derive(Parser)]
#[command(name = "aegis-verify", version, after_help = aegis_verify::after_help("aegis-verify"))]
struct Cli {
    #[command(flatten)]
    args: aegis_verify::VerifyArgs,
}

fn main() -> ExitCode {
    match Cli::try_parse() {
        Ok(cli) => ExitCode::from(aegis_verify::run(&cli.args)),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() {
                aegis_verify::exit::TAMPERED_OR_USAGE
            } else {
                0
            })
        }
    }
}
