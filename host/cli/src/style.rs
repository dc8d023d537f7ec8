//! Terminal colour, decided once: only when stdout is a terminal, `NO_COLOR` is unset
//! and `TERM` is not `dumb`.

use std::io::IsTerminal as _;

/// Whether to colour output.
pub fn colour() -> bool {
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
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
