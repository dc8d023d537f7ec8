//! `aegis console`: a web page over a record, served from this binary on loopback.

use crate::CliError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `aegis console`'s arguments.
#[derive(clap::Args)]
pub struct ConsoleArgs {
    /// The record file to show and its trust options, as `aegis verify` takes them: it
    /// is verified so each time the page asks.
    #[command(flatten)]
    record: aegis_verify::VerifyArgs,
    /// Where to serve the page: a loopback address and port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8767")]
    http: SocketAddr,
    /// A file whose first line is the token the page's API requires (mode 0600, as
    /// `aegis gateway --token-file`). Without one, a fresh token is made for this run.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// Serves the console until SIGINT or SIGTERM. The address to open, with the token in
/// its fragment, goes to stderr.
pub fn console(a: &ConsoleArgs) -> Result<u8, CliError> {
    let token = match &a.token_file {
        Some(path) => {
            aegis_http::read_token(path).map_err(|e| CliError::Unreadable(e.to_string()))?
        }
        None => fresh_token()?,
    };
    let [record] = a.record.paths.as_slice() else {
        return Err(CliError::Usage(
            "console shows one record: give one file".into(),
        ));
    };
    let trust =
        aegis_verify::trust_slice(&a.record).map_err(|e| CliError::Unreadable(e.to_string()))?;
    let console = aegis_console::Console {
        record: record.clone(),
        trust,
    };
    let warn: aegis_http::Warn = Arc::new(|w: &str| crate::say(format_args!("aegis: {w}")));
    let shown = token.clone();
    aegis_console::run(
        console,
        (a.http, false),
        Arc::from(token),
        warn,
        move |bound| {
            crate::say(format_args!(
                "aegis: console at http://{bound}/#token={shown} (SIGINT or SIGTERM stops it)"
            ));
        },
    )
    .map_err(|e| CliError::ServeFailed(e.to_string()))?;
    Ok(crate::exit::OK)
}

/// 32 random bytes as hex: the token of a run given no token file.
fn fresh_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::Refused(format!("no randomness for a token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
