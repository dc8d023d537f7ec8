//! The file sink runs the sink conformance kit.
//!
//! The sticky-failure check is declared not applicable, with the reason: the sink
//! writes only a regular file of its own (it refuses `/dev/null`, which would refuse
//! `fsync`), and an ordinary test machine has no regular file whose `fsync` fails
//! without root and a device-mapper error target. The rule itself (a failed fsync
//! stops every later append and sync) is tested inside the crate, in
//! `a_failed_fsync_stops_every_later_append_and_sync`.

use aegis_sink_conformance::{Check, NotApplicable, Subject, run};
use aegis_sink_file::FileSink;
use aegis_station_api::PluginError;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Default)]
struct File {
    dirs: Vec<tempfile::TempDir>,
}

impl File {
    fn last(&self) -> PathBuf {
        self.dirs.last().expect("fresh first").path().join("r.aarl")
    }
}

impl Subject for File {
    type Sink = FileSink;
    fn fresh(&mut self) -> Result<FileSink, PluginError> {
        self.dirs.push(tempfile::tempdir().expect("tempdir"));
        FileSink::open(&self.last())
    }
    fn reopen(&mut self) -> Option<Result<FileSink, PluginError>> {
        Some(FileSink::open(&self.last()))
    }
    fn tear(&mut self) -> Result<Vec<u8>, NotApplicable> {
        let half = b"{\"c\":3,\"cut".to_vec();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.last())
            .expect("open the store");
        f.write_all(&half).expect("write half a line");
        Ok(half)
    }
    fn failing(&mut self) -> Result<Result<FileSink, PluginError>, NotApplicable> {
        Err(NotApplicable(
            "no regular file on a test machine refuses fsync without root; the rule is \
             tested in the crate (a_failed_fsync_stops_every_later_append_and_sync)"
                .into(),
        ))
    }
}

#[test]
fn file_sink_conforms() {
    let report = run(&mut File::default()).unwrap_or_else(|e| panic!("{e}"));
    print!("{report}");
    for check in [Check::Paging, Check::AllOrNothing, Check::TornTail] {
        assert!(report.passed(check), "{check}");
    }
}
