//! Terminal colour, decided once from `--color`: `always`, `never`, or `auto` (the
//! default): only when stdout is a terminal, `NO_COLOR` is unset or empty and `TERM` is
//! not `dumb`. An explicit `--color always` wins over `NO_COLOR`, as no-color.org asks.

use std::io::IsTerminal as _;

/// `--color WHEN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    /// On a terminal, unless NO_COLOR is set or TERM is dumb.
    Auto,
    /// Always, even into a pipe or with NO_COLOR.
    Always,
    /// Never.
    Never,
}

static WHEN: std::sync::OnceLock<When> = std::sync::OnceLock::new();

/// Records the operator's `--color` for [`colour`].
pub fn set(when: When) {
    let _ = WHEN.set(when);
}

/// Whether to colour output.
pub fn colour() -> bool {
    match WHEN.get().copied().unwrap_or(When::Auto) {
        When::Always => true,
        When::Never => false,
        When::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// Paints text with an ANSI style when colour is on.
#[derive(Clone, Copy)]
pub struct Painter {
    on: bool,
}

impl Painter {
    /// A painter following [`colour`].
    pub fn detect() -> Painter {
        Painter { on: colour() }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Bold.
    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Green: a good outcome.
    pub fn good(self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Red: a refusal or tampering.
    pub fn bad(self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Yellow: undecidable.
    pub fn warn(self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Dim: detail.
    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}
