//! A volatile audit sink: lines live in memory and die with the process.
//!
//! # Guarantees
//! - Declares [`Retention::VOLATILE`], so the host announces that nothing is retained and
//!   names no path.
//! - An append takes exactly one line ending in a newline, like the durable sinks, and
//!   stores it whole; anything else is refused and stores nothing.
//! - Passes the sink conformance kit (`tests/conformance.rs`); a sticky failure and a
//!   torn tail do not apply, since nothing here can fail or outlive the process.
//!
//! # Non-guarantees
//! - Nothing survives the process: a record kept here is not evidence.

use aegis_station_api::{PluginError, Retention, Sink, Tail, TailKind};
use std::sync::{Mutex, PoisonError};

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "memory-sink",
        version: env!("CARGO_PKG_VERSION"),
        sink: MemorySink::from_config,
    }
}

/// Lines held in memory.
#[derive(Debug, Default)]
pub struct MemorySink {
    lines: Mutex<Vec<Vec<u8>>>,
}

/// The memory sink takes no settings.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {}

impl MemorySink {
    /// Builds the sink from its (empty) config section.
    ///
    /// # Errors
    /// Any key in the section: the sink has no settings.
    pub fn from_config(config: &str) -> Result<MemorySink, PluginError> {
        toml::from_str::<Config>(config)
            .map_err(|e| PluginError::new(aegis_station_api::ErrorKind::CONFIG, e.to_string()))?;
        Ok(MemorySink::default())
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Sink for MemorySink {
    fn retention(&self) -> Retention {
        Retention::VOLATILE
    }

    fn location(&self) -> String {
        String::new()
    }

    fn existing_tail(&self) -> Result<Tail, PluginError> {
        Ok(match self.lines().last() {
            None => Tail {
                kind: TailKind::EMPTY,
                line: Default::default(),
            },
            Some(l) => Tail {
                kind: TailKind::LINE,
                line: l.clone().into(),
            },
        })
    }

    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        // Exactly one line, as the other sinks insist: accepting two here would store
        // them as one entry that `read_lines` returns as one "line", and accepting a
        // line without its newline would let a caller's bug pass in tests against this
        // sink and fail only against a durable one.
        let Some(line) = line.strip_suffix(b"\n").filter(|l| !l.contains(&b'\n')) else {
            return Err(PluginError::new(
                aegis_station_api::ErrorKind::OTHER,
                "append takes exactly one line ending in a newline",
            ));
        };
        self.lines().push(line.to_vec());
        Ok(())
    }

    fn sync(&self) -> Result<(), PluginError> {
        Ok(())
    }

    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        let lines = self.lines();
        let start = usize::try_from(start)
            .unwrap_or(usize::MAX)
            .min(lines.len());
        let end = start.saturating_add(max as usize).min(lines.len());
        Ok(lines[start..end].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unknown_settings() {
        assert!(MemorySink::from_config("").is_ok());
        let e = MemorySink::from_config("path = \"/tmp/x\"\n").unwrap_err();
        assert!(e.message.contains("path"), "{e}");
    }

    #[test]
    fn tail_and_pages() {
        let s = MemorySink::default();
        assert_eq!(s.existing_tail().unwrap().kind, TailKind::EMPTY);
        for l in [b"a\n", b"b\n", b"c\n"] {
            s.append(l).unwrap();
        }
        let tail = s.existing_tail().unwrap();
        assert_eq!(
            (tail.kind, tail.line.as_slice()),
            (TailKind::LINE, &b"c"[..])
        );
        assert_eq!(
            s.read_lines(1, 5).unwrap(),
            vec![b"b".to_vec(), b"c".to_vec()]
        );
        assert!(s.read_lines(9, 5).unwrap().is_empty());
    }
}
