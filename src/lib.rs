//! airlock: carry machine-learning models across an air gap with every byte verified.
//!
//! The library holds all the logic; the `airlock` binary parses arguments, prints and maps
//! errors to exit codes. Data flows one way: scan → manifest → bundle write, and bundle read →
//! verify → install. See `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]

pub mod bundle;
pub mod delta;
pub mod entries;
pub mod error;
pub mod fsinfo;
pub mod fsio;
pub mod hfcache;
pub mod inspect;
pub mod keys;
pub mod manifest;
pub mod oci;
pub mod oms;
pub mod pack;
pub mod parity;
pub mod paths;
pub mod pipeline;
pub mod progress;
pub mod receipt;
pub mod repair;
pub mod scan;
pub mod size;
pub mod staging;
pub mod tar;
pub mod trust;
pub mod unpack;
pub mod verify;
pub mod writeback;
