//! What confinement adds to starting a program: the same `/bin/true` spawned and waited
//! for, bare and through the confinement helper (the `aegis` binary re-executed as
//! `aegis __confine-exec`, which confines itself with `confine-landlock` — rule paths,
//! Landlock, capabilities, seccomp — reports, waits for the go and execs).
//!
//! - `start/bare`: `Command::new("/bin/true").status()`.
//! - `start/confined`: `confine::spawn` with the exec-support plan `aegis confine` uses,
//!   `Confined::start`, wait [confined − bare ≤ 3 ms].
//! - `start/helper_only`: the helper started and refused before it confines (an empty
//!   plan): the cost of re-executing the `aegis` binary alone.
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
const TRUE: &str = "/bin/true";

fn plan() -> Plan {
    let profile = aegis_runtime::Profile::embedded("linux-confined").expect("embedded");
    Plan::for_program(&profile, Path::new(TRUE), Grants::default()).expect("a plan")
}

fn confined_true(plan: &Plan) {
    let confined = confine::spawn(Path::new(AEGIS), plan, Path::new(TRUE), &[], |c| {
        c.stdin(Stdio::null());
    })
    .expect("confined");
    let status = confined.start().expect("started").wait().expect("waited");
    assert!(status.success());
}

fn main() {
    let plan = plan();
    let confined = confine::spawn(Path::new(AEGIS), &plan, Path::new(TRUE), &[], |_| {})
        .expect("the helper confines /bin/true");
    assert_eq!(confined.report().enforcement, "full");
    assert!(confined.start().unwrap().wait().unwrap().success());

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("start");
    group.bench_function("bare", |b| {
        b.iter(|| {
            let status = Command::new(TRUE).stdin(Stdio::null()).status().unwrap();
            assert!(status.success());
        });
    });
    group.bench_function("confined", |b| b.iter(|| confined_true(&plan)));
    let refused = Plan {
        backend: "builtin:no-such-backend".into(),
        ..plan.clone()
    };
    group.bench_function("helper_only", |b| {
        b.iter(|| {
            let e = confine::spawn(Path::new(AEGIS), &refused, Path::new(TRUE), &[], |_| {});
            assert!(e.is_err());
        });
    });
    group.finish();
    c.final_summary();
}
