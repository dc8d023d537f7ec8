//! `aegis-gateway`'s integration tests as one test binary (each module was a target of its
//! own, and each linked the whole crate and its dependencies again). Run one topic with
//! a filter: `cargo test -p aegis-gateway --test all -- http_direct::`.

mod direct_vs_rmcp;
mod http_direct;
mod server;
