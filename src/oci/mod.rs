//! Publishing a verified bundle into an OCI registry, and reading it back (issue 14, "fleet").
//!
//! Behind the air gap a site already runs an OCI registry (CNCF distribution, Harbor, zot).
//! The landing host verifies a bundle once and publishes it there as a CNCF ModelPack
//! artifact ([`modelpack`]): one raw layer per model file, whose digest is the file's SHA-256
//! from the signed airlock manifest, so versions share their unchanged files as blobs and a
//! re-push uploads nothing the registry has. The signed `manifest.json` and its minisign
//! signature travel as two layers of their own media types, so a node needs nothing but the
//! registry and its trust directory, and registries without the referrers API work.
//!
//! A node never trusts the registry: it fetches the airlock manifest and signature, verifies
//! them with the code that verifies a bundle, then fetches each file's blob *by the digest
//! the signed manifest gives* and checks size and SHA-256 itself as the bytes stream through
//! the pipeline into any target.
//!
//! This module is the client and the artifact only: [`client`] (a small blocking registry
//! client on `ureq` with rustls; see docs/ARCHITECTURE.md for why not an async OCI crate),
//! [`auth`], [`reference`], [`modelpack`] (the artifact made from a verified bundle) and
//! [`trust`] (its co-signature and root layers). The registry as a pipeline source is
//! [`crate::source::registry`]; as a pipeline target (`push`), with a repository as a delta's
//! base, [`crate::unpack::registry`] and [`crate::unpack::registry_base`].

pub mod auth;
pub mod client;
pub mod modelpack;
pub mod reference;
pub mod trust;

pub use client::{Registry, RegistryOptions};
pub use reference::Reference;
