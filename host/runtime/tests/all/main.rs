//! `aegis-runtime`'s integration tests as one test binary (each module was a target of its
//! own, and each linked the whole crate and its dependencies again). Run one topic with
//! a filter: `cargo test -p aegis-runtime --test all -- capability::`.

mod capability;
mod handler;
mod plugin_abi;
mod rate;
mod sandbox;
mod store;
