//! The SQLite sink runs the sink conformance kit through the plugin boundary, the way
//! the host calls the library it loads.
//!
//! Its failing medium is SQLite refusing the insert: a trigger another connection adds
//! aborts every insert, as SQLite aborts one on a full disk (which a test cannot make
//! without privileges). The sink sees SQLite's own error through its own code path.

use aegis_sink_conformance::{Boundary, Check, NotApplicable, Subject, run};
use aegis_station_api::PluginError;
use std::path::PathBuf;

#[derive(Default)]
struct Sqlite {
    dirs: Vec<tempfile::TempDir>,
}

impl Sqlite {
    fn last(&self) -> PathBuf {
        self.dirs.last().expect("fresh first").path().join("a.db")
    }

    fn open(&self) -> Result<Boundary, PluginError> {
        let config = format!("path = {:?}", self.last());
        aegis_sink_sqlite::plugin_module().new_audit_sink()(config.as_str().into())
            .into_result()
            .map(Boundary)
    }
}

impl Subject for Sqlite {
    type Sink = Boundary;
    fn fresh(&mut self) -> Result<Boundary, PluginError> {
        self.dirs.push(tempfile::tempdir().expect("tempdir"));
        self.open()
    }
    fn reopen(&mut self) -> Option<Result<Boundary, PluginError>> {
        Some(self.open())
    }
    fn tear(&mut self) -> Result<Vec<u8>, NotApplicable> {
        Err(NotApplicable(
            "each line is one row inserted in its own transaction: SQLite keeps a row whole or not at all, so no half line can be left"
                .into(),
        ))
    }
    fn failing(&mut self) -> Result<Result<Boundary, PluginError>, NotApplicable> {
        let sink = match self.fresh() {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let other = rusqlite::Connection::open(self.last()).expect("second connection");
        other
            .execute_batch(
                "CREATE TRIGGER full BEFORE INSERT ON aegis_lines
                 BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
            )
            .expect("add the trigger");
        Ok(Ok(sink))
    }
}

#[test]
fn sqlite_sink_conforms() {
    let report = run(&mut Sqlite::default()).unwrap_or_else(|e| panic!("{e}"));
    print!("{report}");
    for check in [Check::Paging, Check::AllOrNothing, Check::StickyFailure] {
        assert!(report.passed(check), "{check}");
    }
}
