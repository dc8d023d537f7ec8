//! The station API as an older plugin was built against it: `station-api/src/lib.rs`
//! with `PolicyEvaluator::evaluate_axes_indexed` cut out by `build.rs`.
include!(concat!(env!("OUT_DIR"), "/lib.rs"));
