//! The one integration test binary: drives the real `airlock` executable.

mod cli;
mod compose;
mod crash;
mod delta;
mod format_exact;
mod hfcache;
mod hostile;
mod interop;
mod long_paths;
mod model_checks;
mod oci;
mod oci_safety;
mod parity;
mod parity_units;
mod receipt_links;
mod repair_safety;
mod roundtrip;
mod safety_mem;
mod sign_safety;
mod support;
mod tamper;
mod tar_crate;
mod trust_root;
mod ux;
mod verdict;
mod workflow_checks;
