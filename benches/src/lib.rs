//! Shared fixtures for the benches (see `benches/`).
