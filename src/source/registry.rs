//! A registry as a bundle source (`airlock unpack oci://...`): the artifact `airlock push`
//! published, verified as a bundle is, fed through the pipeline to any target
//! ([`crate::pipeline`]) with every rule that target has.
//!
//! The registry is not trusted. First the airlock manifest and its signature are fetched
//! (bounded) from their layers and verified against the trust set with the very code that
//! verifies a bundle ([`crate::bundle::open::verify_signed_bytes`]); nothing else is read
//! before that. Then each file is fetched by the digest the *signed* manifest gives (never by
//! what the registry's own manifest lists) and fed through a [`Verifier`] of the signed
//! manifest, its size and SHA-256 checked as the bytes pass: a byte too many, too few or
//! different fails the install (exit 3) and nothing is installed. An artifact is always the
//! complete tree (a delta is pushed as the whole new version), so it installs anywhere. A transfer
//! that breaks is resumed from the byte it reached (`Range`), a few times; a registry that
//! stays down fails the install (exit 1), nothing installed.
//!
//! Large files are fetched one after the other, in bundle order, each streamed straight into its
//! staged file (no second copy on disk); small files are fetched ahead, a few at once, into a
//! bounded amount of memory (see `fill`), so a model of many small files is not one round trip
//! per file.

use std::collections::HashSet;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::bundle::open::{MAX_SIGNATURE_BYTES, Opened, Origin, open_parts};
use crate::entries::{Blame, EntrySink, Mode, RawEntry, Verifier};
use crate::error::{Error, RegistryNext, Result};
use crate::keys::PublicKey;
use crate::manifest::{self, Expected, FileEntry, Manifest};
use crate::oci::Registry;
use crate::oci::modelpack::{self, Layer};
use crate::pipeline::{Fed, Source};
use crate::progress::Progress;
use crate::trust::policy::SigFile;

/// Tries to fetch one file (the first and each resume).
const TRIES: u32 = 4;

fn artifact(registry: &Registry, reason: impl Into<String>) -> Error {
    Error::Artifact {
        reference: registry.reference.to_string(),
        reason: reason.into(),
    }
}

/// Fetches a small layer whole and checks it against its descriptor's digest and size.
fn fetch_small(registry: &Registry, layer: &Layer, cap: u64, what: &str) -> Result<Vec<u8>> {
    if layer.size > cap {
        return Err(artifact(
            registry,
            format!(
                "its {what} layer declares {} bytes, more than the {cap}-byte limit",
                layer.size
            ),
        ));
    }
    // Read to the descriptor's size + 1, never to the limit: a small blob costs its size.
    let bytes = registry
        .blob_bytes(&layer.digest, layer.size)?
        .ok_or_else(|| {
            artifact(
                registry,
                format!("its {what} blob {} is missing", layer.digest),
            )
        })?;
    if modelpack::digest_of(&bytes) != layer.digest || bytes.len() as u64 != layer.size {
        return Err(artifact(
            registry,
            format!(
                "its {what} blob does not match its descriptor {}",
                layer.digest
            ),
        ));
    }
    Ok(bytes)
}

/// Fetches the artifact's airlock manifest and signature and verifies them against `trust`.
/// Nothing else is read from the registry before this succeeds.
pub fn open(registry: &Registry, trust: &[PublicKey]) -> Result<Opened> {
    open_with(registry, &crate::trust::Policy::any_of(trust))
}

/// [`open`] with a trust policy: the co-signature and trust-root layers are fetched (bounded)
/// and checked exactly as a bundle directory's files are.
pub fn open_with(registry: &Registry, policy: &crate::trust::Policy) -> Result<Opened> {
    let reference = registry.reference.to_string();
    let (image, _media_type) = registry.get_manifest()?.ok_or_else(|| Error::Registry {
        registry: registry.reference.registry.clone(),
        reason: format!("{reference}: no such tag (or repository) in the registry"),
        next: RegistryNext::Do(format!(
            "check the reference's repository and tag; if they are right, the bundle was not published there yet: push it from the landing host (`airlock push BUNDLE {reference} --trust KEY`), then unpack again"
        )),
    })?;
    let (mlayer, slayer) =
        modelpack::airlock_layers(&image).map_err(|why| artifact(registry, why.to_string()))?;
    let bytes = fetch_small(
        registry,
        &mlayer,
        manifest::MAX_MANIFEST_BYTES,
        "airlock manifest",
    )?;
    let sig = fetch_small(registry, &slayer, MAX_SIGNATURE_BYTES, "airlock signature")?;
    let mpath = PathBuf::from(format!("{reference}#{}", modelpack::manifest_layer_path()));
    let spath = PathBuf::from(format!("{reference}#{}", modelpack::signature_layer_path()));
    let text = String::from_utf8(sig).map_err(|_| Error::BadSignature {
        path: spath.clone(),
        reason: "is not UTF-8 text".into(),
    })?;
    let (cosigs, notes, roots) = crate::oci::trust::fetch_all(registry, &image, policy)?;
    let primary = SigFile { path: spath, text };
    let mut opened = open_parts(
        Origin::Registry(reference.clone()),
        &mpath,
        bytes,
        primary,
        cosigs,
        roots,
        notes,
        policy,
    )?;
    // The OMS signature the signed manifest lists, fetched by its signed digest (never by
    // what the registry's manifest says) to its signed size.
    if let Some(s) = opened
        .manifest
        .oms
        .as_ref()
        .and_then(|o| o.signature.as_ref())
    {
        let path = PathBuf::from(format!("{reference}#{}", s.name));
        let bytes = registry
            .blob_bytes(&format!("sha256:{}", s.sha256), s.size)?
            .ok_or_else(|| {
                artifact(
                    registry,
                    format!(
                        "its OMS signature {} (sha256:{}) is missing, though the signed manifest lists it",
                        s.name, s.sha256
                    ),
                )
            })?;
        opened.oms = Some(crate::oms::check_carried(&opened.manifest, &path, bytes)?);
    }
    Ok(opened)
}

/// Streams one file's blob into `out`, resuming a broken transfer where it stopped. It counts
/// the bytes (a blob longer than the signed size is cut off there, so a buffer stays bounded);
/// `out` is the verifier, which checks the content.
fn fetch_file(
    registry: &Registry,
    f: &FileEntry,
    out: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let digest = format!("sha256:{}", f.sha256);
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (mut reader, mut skip) = registry.open_blob(&digest, got)?;
        let broke = loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Some(e),
            };
            let mut chunk = &buf[..n];
            if skip > 0 {
                let s = skip.min(n as u64) as usize;
                chunk = &chunk[s..];
                skip -= s as u64;
            }
            if got + chunk.len() as u64 > f.size {
                return Err(artifact(
                    registry,
                    format!(
                        "{}: blob {digest} holds more than the {} bytes the signed manifest gives",
                        f.path, f.size
                    ),
                ));
            }
            out(chunk)?;
            got += chunk.len() as u64;
        };
        match broke {
            None => return Ok(()),
            Some(_) if attempt < TRIES => {
                std::thread::sleep(Duration::from_millis(250 << attempt));
            }
            Some(e) => {
                return Err(registry.failed(format!(
                    "reading blob {digest} ({}) broke at byte {got} of {}, {TRIES} times: {e}",
                    f.path, f.size
                )));
            }
        }
    }
}

/// Files at most this large are fetched ahead, several at once, into memory.
const PREFETCH_MAX_FILE: u64 = 8 << 20;
/// Bytes of fetched-ahead files held at once (memory stays bounded whatever the model).
const PREFETCH_BUDGET: u64 = 64 << 20;
/// Small files in flight at once, besides the large file streaming.
const PREFETCH_WORKERS: usize = 4;

/// The queue the prefetch workers take small files from, in bundle order, each taking its
/// bytes out of the budget first. Taking in order is what makes it deadlock-free: the file the
/// installer waits for is always taken before any later one, so it never waits for budget held
/// by files behind it.
struct Queue {
    next: usize,
    used: u64,
    cancelled: bool,
}

/// Feeds the whole tree, in bundle order, from the registry through a verifier into `sink`.
/// Large files stream straight through; small ones (config, tokenizer, shards of a few MiB)
/// are fetched ahead by a few workers into a bounded amount of memory. A file the sink
/// already [`EntrySink::holds`] (a blob the layout has, a file not among the repositories
/// `unpack --repo` chose, one an interrupted install staged and proved) is not fetched: each
/// file is a blob of its own, so any one can be left out, and it counts as delivered.
fn fill(
    m: &Manifest,
    registry: &Registry,
    reference: &str,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<()> {
    let mut skipped: HashSet<&str> = HashSet::new();
    for f in &m.files {
        if sink.holds(f)? {
            skipped.insert(f.path.as_str());
        }
    }
    let fetched = |f: &&FileEntry| !skipped.contains(f.path.as_str());
    progress.start(
        crate::progress::Phase::Download,
        m.files.iter().filter(fetched).map(|f| f.size).sum(),
    );
    let small: Vec<&FileEntry> = m
        .files
        .iter()
        .filter(fetched)
        .filter(|f| f.size <= PREFETCH_MAX_FILE)
        .collect();
    let (txs, rxs): (Vec<_>, Vec<_>) = small
        .iter()
        .map(|_| crossbeam_channel::bounded::<Result<Vec<u8>>>(1))
        .unzip();
    let queue = Mutex::new(Queue {
        next: 0,
        used: 0,
        cancelled: false,
    });
    let ready = Condvar::new();
    let result = std::thread::scope(|scope| {
        for _ in 0..PREFETCH_WORKERS.min(small.len()) {
            scope.spawn(|| {
                loop {
                    let (i, f) = {
                        let mut q = queue.lock().expect("not poisoned");
                        loop {
                            if q.cancelled || q.next >= small.len() {
                                return;
                            }
                            let f = small[q.next];
                            if q.used == 0 || q.used + f.size <= PREFETCH_BUDGET {
                                q.used += f.size;
                                q.next += 1;
                                break (q.next - 1, f);
                            }
                            q = ready.wait(q).expect("not poisoned");
                        }
                    };
                    let mut bytes = Vec::with_capacity(f.size as usize);
                    let fetched = fetch_file(registry, f, &mut |b| {
                        bytes.extend_from_slice(b);
                        Ok(())
                    })
                    .map(|()| bytes);
                    let _ = txs[i].send(fetched);
                }
            });
        }
        let mut next_small = 0;
        let installed = (|| {
            let entries: Vec<Expected<'_>> = m
                .expected_entries()
                .into_iter()
                .filter(|e| match e {
                    Expected::Dir(_) => true,
                    Expected::File(f) => fetched(f),
                })
                .collect();
            let mut v = Verifier::new(
                entries.clone(),
                Mode::Strict,
                Blame::Registry(reference),
                sink,
                progress,
            );
            for entry in &entries {
                v.entry(RawEntry::of(entry))?;
                match entry {
                    Expected::Dir(_) => {}
                    Expected::File(f) if f.size <= PREFETCH_MAX_FILE => {
                        let bytes = rxs[next_small]
                            .recv()
                            .expect("a worker answers every file it takes")?;
                        next_small += 1;
                        for chunk in bytes.chunks(1 << 20) {
                            v.data(chunk)?;
                        }
                        v.end()?;
                        drop(bytes);
                        queue.lock().expect("not poisoned").used -= f.size;
                        ready.notify_all();
                    }
                    Expected::File(f) => {
                        fetch_file(registry, f, &mut |b| v.data(b))?;
                        v.end()?;
                    }
                }
            }
            v.finish().map(drop)
        })();
        // Whatever happened, the workers stop taking files.
        queue.lock().expect("not poisoned").cancelled = true;
        ready.notify_all();
        installed
    });
    progress.finish();
    result
}

/// A registry artifact as a pipeline source: opened (its signature verified) by [`open`].
pub struct RegistrySource<'r> {
    opened: Opened,
    registry: &'r Registry,
    reference: String,
}

impl<'r> RegistrySource<'r> {
    /// Fetches and verifies the artifact's airlock manifest ([`open_with`]).
    pub fn open(registry: &'r Registry, policy: &crate::trust::Policy) -> Result<Self> {
        Ok(RegistrySource {
            opened: open_with(registry, policy)?,
            registry,
            reference: registry.reference.to_string(),
        })
    }
}

impl Source for RegistrySource<'_> {
    fn opened(&self) -> &Opened {
        &self.opened
    }
    fn complete(&self) -> bool {
        true
    }
    fn feed(&self, sink: &mut dyn EntrySink, progress: &dyn Progress) -> Result<Fed> {
        fill(
            &self.opened.manifest,
            self.registry,
            &self.reference,
            sink,
            progress,
        )?;
        Ok(Fed::default())
    }
    fn reads_from(&self, _start: usize) -> String {
        ", fetching only the files not held".to_string()
    }
}

/// Whether `path` (an unpack argument) is a registry reference.
pub fn is_reference(path: &std::path::Path) -> bool {
    path.to_str().is_some_and(crate::oci::reference::is_oci)
}
