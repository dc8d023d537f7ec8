//! The console's one test binary: its server over real connections, fed by real
//! record files as a host writes them and a real approvals queue.

mod approvals;
mod client;
mod live;
mod serve;
