//! The console's one test binary: its server over real connections.

mod serve;
