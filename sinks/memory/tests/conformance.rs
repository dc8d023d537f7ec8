//! The memory sink runs the sink conformance kit, directly and through the plugin
//! boundary the host calls it across.

use aegis_sink_conformance::{Boundary, Check, NotApplicable, Subject, run};
use aegis_sink_memory::{MemorySink, plugin_module};
use aegis_station_api::PluginError;

/// A volatile store: nothing to reopen, tear or break.
struct Memory<S>(fn() -> Result<S, PluginError>);

impl<S: aegis_station_api::Sink> Subject for Memory<S> {
    type Sink = S;
    fn fresh(&mut self) -> Result<S, PluginError> {
        (self.0)()
    }
    fn reopen(&mut self) -> Option<Result<S, PluginError>> {
        None
    }
    fn tear(&mut self) -> Result<Vec<u8>, NotApplicable> {
        Err(NotApplicable(
            "volatile: every store starts empty, so no earlier process can leave half a line"
                .into(),
        ))
    }
    fn failing(&mut self) -> Result<Result<S, PluginError>, NotApplicable> {
        Err(NotApplicable(
            "no medium: an append is a push onto a vector and sync has nothing to flush".into(),
        ))
    }
}

#[test]
fn memory_sink_conforms() {
    let report = run(&mut Memory(|| MemorySink::from_config(""))).unwrap_or_else(|e| panic!("{e}"));
    print!("{report}");
    assert!(report.passed(Check::Paging) && report.passed(Check::AllOrNothing));
}

#[test]
fn memory_sink_conforms_through_the_boundary() {
    let report = run(&mut Memory(|| {
        plugin_module().new_audit_sink()("".into())
            .into_result()
            .map(Boundary)
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    print!("{report}");
    assert!(report.passed(Check::Paging) && report.passed(Check::AllOrNothing));
}
