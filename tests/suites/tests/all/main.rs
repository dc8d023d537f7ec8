//! The end-to-end suites as one test binary: each module was a test target of its own,
//! and each linked wasmtime and the whole host again. One module per topic, as
//! wasmtime's own `tests/all`. Run one with a filter: `cargo test -p aegis-suites --test
//! all -- deny::`.
//!
//! Two suites stay binaries of their own, because each changes what the whole process
//! shares: `native_code` sets the working directory, and `relay_memory` counts every
//! allocation through a global allocator.

mod adversarial;
mod approvals;
mod approvals_desk;
mod awaited_call;
mod ceilings;
mod deny;
mod gateway;
mod owned_call;
mod policy_axes;
mod published_keys;
mod record_binds;
mod record_failure;
mod roots_by_handle;
mod stress;
