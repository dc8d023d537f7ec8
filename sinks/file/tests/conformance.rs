//! The file sink runs the sink conformance kit. Its failing medium is a real one:
//! `/dev/null` accepts every write and refuses `fsync` (EINVAL), the shape of a lost
//! writeback, through the sink's own fsync path. (`/dev/full`, a full disk, is no use
//! here: reading it back yields zeros without end.)

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
        Ok(FileSink::open(std::path::Path::new("/dev/null")))
    }
}

#[test]
fn file_sink_conforms_with_fsync_refused() {
    let report = run(&mut File::default()).unwrap_or_else(|e| panic!("{e}"));
    print!("{report}");
    for check in [
        Check::Paging,
        Check::AllOrNothing,
        Check::StickyFailure,
        Check::TornTail,
    ] {
        assert!(report.passed(check), "{check}");
    }
}
