//! SIGINT, SIGTERM and SIGHUP become a cancelled call instead of a dead process: the
//! tool is stopped, its outcome and the session's close line are written, and only then
//! does `aegis` exit, with the shell's code for the signal (128 + its number).
//!
//! Installed once the input is read (so Ctrl-C at a stdin prompt still ends `aegis`
//! at once, before anything is recorded) and before the session opens. SIGKILL cannot
//! be caught; a call it interrupts stays an intent without an outcome, which
//! `aegis verify` names as unfinished.

use aegis_runtime::CancelToken;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals caught, while it lives.
pub struct Interrupts {
    token: CancelToken,
    first: Arc<AtomicI32>,
    handle: Handle,
}

impl Interrupts {
    /// Catches the signals from now on; each cancels [`Interrupts::token`].
    ///
    /// # Errors
    /// The handlers could not be installed.
    pub fn install() -> std::io::Result<Interrupts> {
        Interrupts::install_with(|_| {})
    }

    /// [`Interrupts::install`], also handing each signal caught to `also` (after the
    /// token is cancelled): `aegis wrap` forwards them to its server.
    ///
    /// # Errors
    /// The handlers could not be installed.
    pub fn install_with(also: impl Fn(i32) + Send + 'static) -> std::io::Result<Interrupts> {
        Interrupts::catching(&[SIGINT, SIGTERM, SIGHUP], also)
    }

    /// Catches SIGINT and SIGTERM only, leaving SIGHUP its default: for `aegis gateway`,
    /// whose server stops on those two itself once it serves. (A signal caught here is
    /// never handed back to its default action, even after this is dropped, so this
    /// lives as long as the gateway.)
    ///
    /// # Errors
    /// The handlers could not be installed.
    pub fn install_stop_signals() -> std::io::Result<Interrupts> {
        Interrupts::catching(&[SIGINT, SIGTERM], |_| {})
    }

    fn catching(which: &[i32], also: impl Fn(i32) + Send + 'static) -> std::io::Result<Interrupts> {
        let mut signals = Signals::new(which)?;
        let handle = signals.handle();
        let token = CancelToken::new();
        let first = Arc::new(AtomicI32::new(0));
        let (cancel, seen) = (token.clone(), first.clone());
        std::thread::Builder::new()
            .name("aegis-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    let _ = seen.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                    cancel.cancel(name(signal));
                    also(signal);
                }
            })?;
        Ok(Interrupts {
            token,
            first,
            handle,
        })
    }

    /// Cancelled by the first signal caught.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// 128 + the first signal's number, once one was caught.
    pub fn exit_code(&self) -> Option<u8> {
        match self.first.load(Ordering::SeqCst) {
            0 => None,
            signal => u8::try_from(128 + signal).ok(),
        }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.handle.close();
    }
}

fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
