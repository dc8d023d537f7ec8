//! What confinement adds to starting a program: the same `/bin/true` spawned and waited
//! for, bare and through the confinement helper (the `aegis` binary re-executed as
//! `aegis __confine-exec`, which confines itself with `confine-landlock` — rule paths,
//! Landlock, capabilities, seccomp — reports, waits for the go and execs).
//!
//! - `start/bare`: `Command::new("/bin/true").status()`.
//! - `start/bare_fd_mapped`: the same with one descriptor mapped into the child
//!   (`command-fds`, whose `pre_exec` hook makes std fork instead of `posix_spawn`): what
//!   handing the helper its report channel as a descriptor would cost. The helper
//!   connects to an abstract socket instead, and is started with `posix_spawn`.
//! - `start/confined`: `confine::spawn` through `aegis-confine-helper` (what `aegis`
//!   starts) with the exec-support plan `aegis confine` uses, `Confined::start`, wait
//!   [confined − bare ≤ 3 ms].
//! - `start/confined_by_aegis`: the same through the full `aegis` binary re-executed as
//!   `aegis __confine-exec` (the fallback when the helper binary is missing).
//! - `start/helper_only`, `start/aegis_only`: each helper started and refusing before it
//!   confines (a backend that does not exist): the cost of executing that binary alone.
//!
//! Before timing, one confined start must report full enforcement and exit 0.
//!
//! Run with `cargo bench -p aegis --bench confine`; results in
//! `benches/results/confine.md`.

use aegis_runtime::confine::{self, Grants, Plan};
use criterion::Criterion;
use std::path::Path;
use std::process::{Command, Stdio};

const AEGIS: &str = env!("CARGO_BIN_EXE_aegis");
const HELPER: &str = env!("CARGO_BIN_EXE_aegis-confine-helper");
const TRUE: &str = "/bin/true";

fn plan() -> Plan {
    let profile = aegis_runtime::Profile::embedded("linux-confined").expect("embedded");
    Plan::for_program(&profile, Path::new(TRUE), Grants::default()).expect("a plan")
}

fn confined_true(helper: &str, plan: &Plan) {
    let confined = confine::spawn(Path::new(helper), plan, Path::new(TRUE), &[], |c| {
        c.stdin(Stdio::null());
    })
    .expect("confined");
    let status = confined.start().expect("started").wait().expect("waited");
    assert!(status.success());
}

fn main() {
    let plan = plan();
    for helper in [HELPER, AEGIS] {
        let confined = confine::spawn(Path::new(helper), &plan, Path::new(TRUE), &[], |_| {})
            .expect("the helper confines /bin/true");
        assert_eq!(confined.report().enforcement, "full");
        assert!(confined.start().unwrap().wait().unwrap().success());
    }

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("start");
    group.bench_function("bare", |b| {
        b.iter(|| {
            let status = Command::new(TRUE).stdin(Stdio::null()).status().unwrap();
            assert!(status.success());
        });
    });
    group.bench_function("bare_fd_mapped", |b| {
        use command_fds::{CommandFdExt, FdMapping};
        b.iter(|| {
            let (_reader, writer) = std::io::pipe().unwrap();
            let mut command = Command::new(TRUE);
            command
                .stdin(Stdio::null())
                .fd_mappings(vec![FdMapping {
                    parent_fd: writer.into(),
                    child_fd: 3,
                }])
                .unwrap();
            assert!(command.status().unwrap().success());
        });
    });
    group.bench_function("confined", |b| b.iter(|| confined_true(HELPER, &plan)));
    group.bench_function("confined_by_aegis", |b| {
        b.iter(|| confined_true(AEGIS, &plan))
    });
    let refused = Plan {
        backend: "builtin:no-such-backend".into(),
        ..plan.clone()
    };
    for (id, helper) in [("helper_only", HELPER), ("aegis_only", AEGIS)] {
        group.bench_function(id, |b| {
            b.iter(|| {
                let e = confine::spawn(Path::new(helper), &refused, Path::new(TRUE), &[], |_| {});
                assert!(e.is_err());
            });
        });
    }
    group.finish();
    c.final_summary();
}
