//! The one integration test binary: drives the real `airlock` executable.

mod cli;
mod crash;
mod delta;
mod hfcache;
mod hostile;
mod interop;
mod model_checks;
mod oci;
mod parity;
mod roundtrip;
mod safety_mem;
mod support;
mod tamper;
mod tar_crate;
mod ux;
mod verdict;
mod workflow_checks;
