//! airlock: carry machine-learning models across an air gap with every byte verified.
//!
//! The library holds all the logic; the `airlock` binary parses arguments, prints and maps
//! errors to exit codes. Every job is a source feeding a sink through the one place that checks
//! each entry against the signed manifest: `pack` (a model → a plan → the volume writer → parity
//! → the seal), and `unpack`/`push`/`verify` (a bundle on disk or in a registry →
//! [`entries::Verifier`] → a delta stage when the source carries a delta → a target: a
//! directory, a Hugging Face cache, an OCI image layout, a registry, or nothing). See
//! [`pipeline`] and `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]

pub mod bundle;
#[cfg(test)]
mod capped_child;
pub mod check;
pub mod copy;
pub mod delta;
pub mod display;
pub mod durable;
pub mod entries;
pub mod error;
pub mod fault;
pub mod fsinfo;
pub mod fsio;
pub mod hexdigest;
pub mod hfcache;
pub mod inspect;
pub mod keys;
#[cfg(test)]
mod layering;
pub mod manifest;
pub mod oci;
pub mod oms;
pub mod pack;
pub mod parity;
#[cfg(test)]
mod parse_fuzz;
pub mod paths;
pub mod pipeline;
pub mod progress;
pub mod receipt;
pub mod repair;
pub mod scan;
pub mod scheme;
pub mod signed_file;
pub mod signing;
pub mod size;
pub mod source;
#[cfg(test)]
mod source_rules;
pub mod staging;
#[cfg(test)]
mod surface;
pub mod tar;
pub mod trust;
pub mod unpack;
pub mod verify;
pub mod work;
pub mod writeback;
pub mod zstd_frame;
