//! The `aegis` binary's integration tests, as one test binary: each module was a test
//! target of its own, and each linked wasmtime and the whole host again (most of CI's
//! link time and of `target/`). One module per topic, as wasmtime's own `tests/all`.
//!
//! Run one topic with a filter: `cargo test -p aegis --test all -- wrap::`.

mod common;

mod approvals;
mod approvals_peers;
mod approvals_run;
mod approvals_store;
mod cedar;
mod confine;
mod console;
mod console_browser;
mod exit_codes;
mod gateway;
mod gateway_approvals;
mod interrupt;
mod log;
mod operator_cli;
mod operator_profile;
mod operator_safety;
mod pins;
mod plugins;
mod readme;
mod recheck;
mod rotate;
mod run;
mod shared_record;
mod store;
mod terminal;
mod verify;
mod verify_only;
mod wrap;
mod wrap_peers;
