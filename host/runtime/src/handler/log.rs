//! Logs a handler emits through its context: kept whole, bounded, counted when dropped.

use super::{HostContext, MAX_LOG_BYTES, MAX_LOG_LINES};
use std::sync::PoisonError;

/// How loud a log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something looks wrong.
    Warn,
    /// Progress.
    Info,
    /// Detail.
    Debug,
}

impl LogLevel {
    /// The level's lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// One log line a handler emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: LogLevel,
    /// Its message, whole.
    pub message: String,
}

/// The log lines a context kept, and how many it dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logs {
    /// Kept lines, in order.
    pub lines: Vec<LogLine>,
    /// Bytes of message kept (at most [`MAX_LOG_BYTES`]).
    pub bytes: usize,
    /// Lines dropped whole because a bound was reached.
    pub dropped: u64,
}

impl HostContext {
    /// Keeps a log line for the pipeline to report. A line that would pass
    /// [`MAX_LOG_BYTES`] or [`MAX_LOG_LINES`] is dropped whole and counted, never cut.
    pub fn log_emit(&self, level: LogLevel, message: &str) {
        let mut logs = self.logs.lock().unwrap_or_else(PoisonError::into_inner);
        if logs.lines.len() >= MAX_LOG_LINES || logs.bytes + message.len() > MAX_LOG_BYTES {
            logs.dropped += 1;
            return;
        }
        logs.bytes += message.len();
        logs.lines.push(LogLine {
            level,
            message: message.to_owned(),
        });
    }

    /// The log lines kept so far, and how many were dropped.
    pub fn logs(&self) -> Logs {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
