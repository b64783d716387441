//! The plan of a pack: what the volume writer streams, and how the manifest's files are
//! completed afterwards. A full bundle streams the model as it is; a delta (`pack --base`,
//! docs/FORMAT.md section 16) decides how each file of the new version reaches the target.
//!
//! Per file, in this order: *copy* when some base file has the same size and SHA-256 (the base
//! file at the same path first); *xor* when the base has a file at the same path whose content
//! is on this host ([`BaseSource::contents`]: opened by the untrusted-tree rules and checked
//! against the base manifest) and the patch is smaller than the file (map `safetensors` when
//! both are safetensors files that line up, else `bytes`); *carried* otherwise. Patches are
//! encoded front to back into files in the bundle's work directory (their size must be known
//! before their tar header is written), then streamed like any file and removed before the
//! bundle is renamed into place. Memory stays flat whatever the model size.
//!
//! The writer ([`super::write`]) writes the plan it is given and knows nothing of deltas.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::base::{self, BaseSource};
use super::source::Model;
use super::write::{self, Source, Stream, StreamEntry, Written};
use crate::delta::Counts;
use crate::delta::patch::{self, Map};
use crate::error::{Error, Result};
use crate::fsio;
use crate::hfcache::EtagCheck;
use crate::inspect::values::{FileScan, Layout, Scanner};
use crate::manifest::{self, Base, FileEntry, From};
use crate::progress::Progress;
use crate::scan::ScanEntry;

/// How one file of the new version travels.
#[derive(Debug)]
enum Decision {
    Carry,
    Copy {
        sha256: String,
        etag: Option<String>,
        from: String,
        values: Option<FileScan>,
    },
    Xor {
        sha256: String,
        etag: Option<String>,
        from: From,
        values: Option<FileScan>,
    },
}

/// What a delta decided.
struct DeltaPlan {
    base: Base,
    decisions: Vec<Decision>,
    /// The paths of the files its stream holds, in stream order (carried files and patches).
    streamed: Vec<String>,
    /// Where the patches were written; removed by [`Plan::finish`].
    patch_dir: PathBuf,
    counts: Counts,
}

/// What [`plan`] decided besides the stream: how to complete the manifest after it is written.
pub struct Plan {
    delta: Option<DeltaPlan>,
}

/// The manifest's lists, completed from what was written.
pub struct Completed {
    /// Directories.
    pub directories: Vec<String>,
    /// Files.
    pub files: Vec<FileEntry>,
    /// For a Hugging Face snapshot: each file's etag, in order.
    pub etags: Option<Vec<String>>,
    /// The value scans of the model files (with the writer's `scan_values`), in bundle order.
    pub values: Vec<(String, FileScan)>,
}

impl Plan {
    /// The `base` object of a delta.
    pub fn base(&self) -> Option<&Base> {
        self.delta.as_ref().map(|d| &d.base)
    }

    /// For a delta: how its files travel.
    pub fn counts(&self) -> Option<Counts> {
        self.delta.as_ref().map(|d| d.counts)
    }

    /// The manifest's directories, files and etags from the model's `entries` (taken: each
    /// file's path moves into its manifest entry, so a million paths are not held twice) and
    /// what was written (the digests read while streaming); `hf` when the model is from a
    /// Hugging Face cache (the etags are recorded; `expected`, the model's etag checks, taken
    /// too: a file whose etag the read pass checked equal to the expected one gets that one,
    /// [`write::WrittenFiles::etags`]). Removes the patch files.
    pub fn finish(
        &self,
        entries: Vec<ScanEntry>,
        expected: Vec<EtagCheck>,
        hf: bool,
        written: Written,
    ) -> Result<Completed> {
        let mut expected = expected.into_iter();
        // The etag of the next file: the one the read pass computed, else the one it checked.
        let mut etag_of = move |computed: Option<String>| {
            let want = expected.next();
            computed.or(match want {
                Some(EtagCheck::Expect(e)) => Some(e.to_string()),
                _ => None,
            })
        };
        let Some(delta) = &self.delta else {
            let write::WrittenFiles {
                sha256: digests,
                etags: etags_of,
                values: values_of,
                // Taken and decided on by `pack` before.
                checks: _,
            } = written.files;
            let count = digests.len();
            // Both lists are let go of as they are read: the model's entries and the digests
            // shrink while the manifest's list grows (a million files).
            let mut digests = Shrinking::new(digests);
            let mut etags_of = etags_of.into_iter().peekable();
            let mut values_of = values_of.into_iter().peekable();
            let mut files = Vec::with_capacity(count);
            let mut etags = hf.then(|| Vec::with_capacity(count));
            let mut values = Vec::new();
            for e in Shrinking::new(entries) {
                let ScanEntry::File {
                    path,
                    size,
                    executable,
                    ..
                } = e
                else {
                    continue;
                };
                let index = files.len();
                let sha256 = digests.next().ok_or_else(|| internal(&path))?;
                if let Some((_, v)) = values_of.next_if(|(i, _)| *i == index) {
                    values.push((path.clone(), *v));
                }
                let etag = etag_of(etags_of.next_if(|(i, _)| *i == index).map(|(_, e)| e));
                if let Some(etags) = &mut etags {
                    etags.push(etag.unwrap_or_default());
                }
                files.push(FileEntry {
                    path,
                    size,
                    sha256: hex::encode(sha256),
                    executable,
                    from: None,
                });
            }
            return Ok(Completed {
                directories: written.directories,
                files,
                etags,
                values,
            });
        };
        let mut by_path: HashMap<&str, write::WrittenFile> = delta
            .streamed
            .iter()
            .map(String::as_str)
            .zip(written.files.into_files())
            .collect();
        let mut files = Vec::with_capacity(delta.decisions.len());
        let mut etags = Vec::with_capacity(delta.decisions.len());
        let mut scans = Vec::new();
        let model_files = entries.into_iter().filter_map(|e| match e {
            ScanEntry::File {
                path,
                size,
                executable,
                ..
            } => Some((path, size, executable)),
            ScanEntry::Dir { .. } => None,
        });
        for (index, ((path, size, executable), d)) in model_files.zip(&delta.decisions).enumerate()
        {
            let (sha256, etag, from, scan) = match d {
                Decision::Carry => {
                    let f = by_path
                        .remove(path.as_str())
                        .ok_or_else(|| internal(&path))?;
                    (hex::encode(f.sha256), f.etag, None, f.values.map(|v| *v))
                }
                Decision::Copy {
                    sha256,
                    etag,
                    from,
                    values,
                } => (
                    sha256.clone(),
                    etag.clone(),
                    Some(From {
                        path: from.clone(),
                        op: manifest::OP_COPY.into(),
                        map: None,
                        patch_size: None,
                        patch_sha256: None,
                    }),
                    values.clone(),
                ),
                Decision::Xor {
                    sha256,
                    etag,
                    from,
                    values,
                } => {
                    let p = manifest::patch_path(index);
                    let f = by_path.remove(p.as_str()).ok_or_else(|| internal(&p))?;
                    if Some(hex::encode(f.sha256)) != from.patch_sha256 {
                        return Err(Error::SourceChanged {
                            path: delta.patch_dir.join(index.to_string()),
                            what: "the patch changed between its encoding and the stream".into(),
                        });
                    }
                    (
                        sha256.clone(),
                        etag.clone(),
                        Some(from.clone()),
                        values.clone(),
                    )
                }
            };
            if let Some(scan) = scan {
                scans.push((path.clone(), scan));
            }
            etags.push(etag_of(etag).unwrap_or_default());
            files.push(FileEntry {
                path,
                size,
                sha256,
                executable,
                from: from.map(Box::new),
            });
        }
        crate::staging::remove_tree(&delta.patch_dir)
            .map_err(|e| Error::io(&delta.patch_dir, e))?;
        let directories = written
            .directories
            .into_iter()
            .filter(|d| d != manifest::DELTA_DIR)
            .collect();
        Ok(Completed {
            directories,
            files,
            etags: hf.then_some(etags),
            values: scans,
        })
    }
}

/// The items of a list, in order, its memory given back as they are taken (every
/// [`Shrinking::EVERY`] items): a list of a million entries is not held whole until the list
/// made from it is complete.
struct Shrinking<T>(Vec<T>);

impl<T> Shrinking<T> {
    const EVERY: usize = 1 << 16;

    fn new(mut list: Vec<T>) -> Self {
        list.reverse();
        Shrinking(list)
    }
}

impl<T> Iterator for Shrinking<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let item = self.0.pop()?;
        if self.0.len().is_multiple_of(Self::EVERY) {
            self.0.shrink_to_fit();
        }
        Some(item)
    }
}

/// The model's entries as the writer takes them, each file with its etag check, read as they
/// are streamed (not copied into a list).
fn model_stream(model: &Model) -> Stream<'_> {
    Stream::Model {
        entries: &model.entries,
        etags: &model.etags,
        root: &model.root,
    }
}

/// Counts and hashes what passes through.
struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Plans the pack of `model` as `name` version `version`: the whole model, or with `base` a
/// delta whose patches are written under `work` (the bundle's work directory) at zstd
/// `level`. With `scan_values`, the files a delta does not stream are value-scanned in the
/// pass that hashes or patches them.
#[allow(clippy::too_many_arguments)]
pub fn plan<'m>(
    model: &'m Model,
    base: Option<&mut BaseSource>,
    name: &str,
    version: u64,
    work: &Path,
    level: i32,
    scan_values: bool,
    progress: &dyn Progress,
) -> Result<(Stream<'m>, Plan)> {
    let Some(base) = base else {
        return Ok((model_stream(model), Plan { delta: None }));
    };
    base::check_same_model(&base.manifest, name, version)?;
    let patch_dir = work.join("delta-patches");
    let patch_fd = crate::durable::mkdir_at(
        &crate::durable::open_dir(work)?,
        work,
        "delta-patches",
        0o700,
    )?;
    let remove_patch = |index: usize, out_path: &Path| {
        rustix::fs::unlinkat(&patch_fd, index.to_string(), rustix::fs::AtFlags::empty())
            .map_err(|e| Error::io(out_path, e.into()))
    };
    let (decisions, candidates, unhashed, mut counts) = copies(model, base, scan_values, progress)?;
    let wanted: Vec<&str> = candidates.iter().map(|(_, e)| e.path()).collect();
    let mut base_content = base.contents(&wanted, work, progress)?;
    let by_content = content_index(&base.manifest);
    // Pass 2: a patch for each candidate, kept when it is smaller than the file.
    let mut decisions = decisions;
    let mut patches = Vec::new();
    for (index, e) in candidates {
        let ScanEntry::File { path, size, .. } = e else {
            continue;
        };
        let source = &*e.source(&model.root).expect("a file");
        let Some(old) = base_content.remove(path.as_str()) else {
            // Not hashed in pass 1 and nothing to patch from after all: it may still be a
            // copy of another base file.
            if unhashed.contains(&index)
                && let Some(copy) = copy_of_another(model, index, e, &by_content, scan_values)?
            {
                decisions[index] = copy;
                counts.copied_files += 1;
                counts.copied_bytes += size;
            }
            continue;
        };
        progress.item(path);
        let out_path = patch_dir.join(index.to_string());
        let encoded = encode_patch(source, path, *size, &old, &out_path, level, scan_values)?;
        let from = encoded.xor_from(path);
        let Encoded { enc, scanner, .. } = encoded;
        progress.advance(*size);
        if unhashed.contains(&index)
            && let Some(from) = copy_from(&by_content, path, *size, &enc.new_sha256)
        {
            // Visibly different from the base file at its path, but a copy of another one
            // (shards renamed): found from the digest the patch pass made.
            remove_patch(index, &out_path)?;
            let etag = etag_of_patched(model, index, source, path, *size, &enc.new_sha256)?;
            decisions[index] = Decision::Copy {
                sha256: enc.new_sha256,
                etag,
                from,
                values: scanner.and_then(Scanner::finish),
            };
            counts.copied_files += 1;
            counts.copied_bytes += size;
            continue;
        }
        if enc.patch_size >= *size {
            remove_patch(index, &out_path)?;
            continue;
        }
        // Decisions are per model file, so `index` is the file's index too.
        let etag = etag_of_patched(model, index, source, path, *size, &enc.new_sha256)?;
        decisions[index] = Decision::Xor {
            sha256: enc.new_sha256,
            etag,
            values: scanner.and_then(Scanner::finish),
            from,
        };
        counts.patched_files += 1;
        counts.patched_bytes += size;
        counts.patch_bytes += enc.patch_size;
        patches.push(StreamEntry::File {
            path: manifest::patch_path(index).into(),
            source: Source::At(out_path.into()),
            size: enc.patch_size,
            executable: false,
            etag: None,
            prefetched: None,
            checks_left: false,
            seen: None,
        });
    }
    let extracted = work.join("delta-base");
    if extracted.exists() {
        crate::staging::remove_tree(&extracted).map_err(|e| Error::io(&extracted, e))?;
    }
    progress.finish();
    let stream = delta_stream(model, &decisions, patches, &mut counts);
    let streamed = stream
        .iter()
        .filter_map(|e| match e {
            StreamEntry::File { path, .. } => Some(path.to_string()),
            StreamEntry::Dir(_) => None,
        })
        .collect();
    let bm = &base.manifest;
    Ok((
        Stream::Listed(stream),
        Plan {
            delta: Some(DeltaPlan {
                streamed,
                base: Base {
                    name: bm.name.clone(),
                    version: bm.version,
                    manifest_sha256: base.manifest_sha256.clone(),
                },
                decisions,
                patch_dir,
                counts,
            }),
        },
    ))
}

/// The model file `e` (the `index`-th), hashed now: a copy of the base file of the same size
/// and digest when `by_content` has one.
fn copy_of_another(
    model: &Model,
    index: usize,
    e: &ScanEntry,
    by_content: &ContentIndex<'_>,
    scan_values: bool,
) -> Result<Option<Decision>> {
    let ScanEntry::File { path, size, .. } = e else {
        return Ok(None);
    };
    let source = &*e.source(&model.root).expect("a file");
    let (sha256, etag, values) = digest(source, path, *size, model.etag(index), scan_values)?;
    Ok(
        copy_from(by_content, path, *size, &sha256).map(|from| Decision::Copy {
            sha256,
            etag,
            from,
            values,
        }),
    )
}

/// A patch written by [`encode_patch`].
struct Encoded {
    enc: patch::Encoded,
    map: Map,
    patch_sha256: String,
    /// The value scan of the new file, fed by the patch pass.
    scanner: Option<Scanner>,
}

impl Encoded {
    /// The manifest's `from` of a file patched from its base file at `path`.
    fn xor_from(&self, path: &str) -> From {
        From {
            path: path.to_string(),
            op: manifest::OP_XOR.into(),
            map: Some(
                match self.map {
                    Map::Bytes => "bytes",
                    Map::Safetensors => "safetensors",
                }
                .into(),
            ),
            patch_size: Some(self.enc.patch_size),
            patch_sha256: Some(self.patch_sha256.clone()),
        }
    }
}

/// Writes to `out_path` the patch that rebuilds the model file `path` (at `source`, `size`
/// bytes by the scan) from `old`, its base file, at zstd `level`; with `scan_values`, value-scans
/// the new file in the same read. A file whose size changed since the scan fails the pack.
fn encode_patch(
    source: &Path,
    path: &str,
    size: u64,
    old: &std::fs::File,
    out_path: &Path,
    level: i32,
    scan_values: bool,
) -> Result<Encoded> {
    let (new, _) =
        fsio::open_regular(source, fsio::Follow::Final).map_err(|e| Error::io(source, e.into()))?;
    let map = if patch::safetensors_pair(&new, old) {
        Map::Safetensors
    } else {
        Map::Bytes
    };
    let out = fsio::create_new(out_path, 0o600).map_err(|e| Error::io(out_path, e.into()))?;
    let writer = HashingWriter {
        inner: BufWriter::with_capacity(1 << 20, out),
        hash: Sha256::new(),
    };
    let mut scanner = match scan_values {
        true => Layout::of(path, &new, size)
            .map_err(|e| Error::io(source, e))?
            .map(Scanner::new),
        false => None,
    };
    let mut observe = |piece: &[u8]| {
        if let Some(s) = &mut scanner {
            s.update(piece);
        }
    };
    let (writer, enc) = patch::encode_observed(&new, old, map, level, writer, &mut observe)
        .map_err(|e| Error::io(source, io::Error::other(PatchNotMade(e))))?;
    let patch_sha256 = hex::encode(writer.hash.finalize());
    writer
        .inner
        .into_inner()
        .map_err(|e| Error::io(out_path, e.into_error()))?;
    let len = new.metadata().map_err(|e| Error::io(source, e))?.len();
    if len != size {
        return Err(Error::SourceChanged {
            path: source.to_path_buf(),
            what: format!("size went from {size} to {len} bytes since the scan"),
        });
    }
    Ok(Encoded {
        enc,
        map,
        patch_sha256,
        scanner,
    })
}

/// A delta's stream: the directories and the carried files in bundle order, and the patches
/// under `.airlock-delta/`; counts the carried files.
fn delta_stream<'m>(
    model: &'m Model,
    decisions: &[Decision],
    patches: Vec<StreamEntry<'m>>,
    counts: &mut Counts,
) -> Vec<StreamEntry<'m>> {
    let mut stream = Vec::new();
    let mut index = 0;
    for e in write::model_entries(&model.entries, &model.etags, &model.root) {
        match &e {
            StreamEntry::Dir(_) => stream.push(e),
            StreamEntry::File { size, .. } => {
                if matches!(decisions[index], Decision::Carry) {
                    counts.carried_files += 1;
                    counts.carried_bytes += size;
                    stream.push(e);
                }
                index += 1;
            }
        }
    }
    if !patches.is_empty() {
        stream.push(StreamEntry::Dir(manifest::DELTA_DIR.into()));
        stream.extend(patches);
    }
    stream.sort_by(|a, b| crate::paths::bundle_order(a.path(), b.path()));
    stream
}

/// The base files by size and SHA-256.
struct ContentIndex<'b> {
    files: HashMap<(u64, &'b str), Vec<&'b FileEntry>>,
    /// A base of several repositories (FORMAT.md section 14.4): a file is a copy only of a
    /// file of its own repository (the same top-level directory).
    per_repo: bool,
}

fn content_index(bm: &manifest::Manifest) -> ContentIndex<'_> {
    let mut files: HashMap<(u64, &str), Vec<&FileEntry>> = HashMap::new();
    for f in &bm.files {
        files
            .entry((f.size, f.sha256.as_str()))
            .or_default()
            .push(f);
    }
    ContentIndex {
        files,
        per_repo: !bm.repos.is_empty(),
    }
}

/// The top-level directory of a path with at least two components.
fn top(path: &str) -> Option<&str> {
    path.split_once('/').map(|(first, _)| first)
}

/// The base file the new file `path` (`size` bytes, `sha256`) is a copy of, if any: the one
/// at the same path first; for a base of several repositories, one of the same repository.
fn copy_from(by_content: &ContentIndex<'_>, path: &str, size: u64, sha256: &str) -> Option<String> {
    let same = by_content.files.get(&(size, sha256))?;
    let mut allowed = same
        .iter()
        .filter(|b| !by_content.per_repo || (top(&b.path).is_some() && top(&b.path) == top(path)));
    let first = allowed.clone().next()?;
    let from = allowed.find(|b| b.path == path).unwrap_or(first);
    Some(from.path.clone())
}

/// Why a file's patch against its base could not be made (typed inside the `io::Error` of the
/// error naming the file, kind `Other`; the patch codec's error is its source).
#[derive(Debug, thiserror::Error)]
#[error("cannot make the patch against its base: {0}")]
struct PatchNotMade(#[source] patch::PatchError);

#[cfg(test)]
thread_local! {
    /// How many times this thread's planner hashed a new file outside the patch pass.
    static HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// [`write::digest_and_scan`], counted in tests.
fn digest(
    source: &Path,
    path: &str,
    size: u64,
    etag: Option<&crate::hfcache::EtagCheck>,
    scan_values: bool,
) -> Result<(String, Option<String>, Option<FileScan>)> {
    #[cfg(test)]
    HASHED.with(|n| n.set(n.get() + 1));
    write::digest_and_scan(source, path, size, etag, scan_values)
}

/// Whether the new file at `source` visibly differs from the base file at `path`
/// ([`BaseSource::sample_differs`]); `false` when either cannot be read for the sample.
fn sample_differs(base: &BaseSource, source: &Path, path: &str, size: u64) -> bool {
    crate::scan::open_source(source, path).is_ok_and(|new| base.sample_differs(path, size, &new))
}

/// Pass 1: every file that is a copy of a base file (same size and SHA-256), and the files a
/// patch may be made for (the base has the same path). Returns one decision per model file,
/// the candidates (decision index, entry), the candidates not hashed here, and the counts so
/// far.
///
/// A file of the same size as the base file at its path that visibly differs from it (three
/// sampled pieces) is not hashed here: it is a patch candidate, and the patch pass hashes it
/// as it reads it and looks for a copy then, so a changed file is read once, not twice (once
/// to hash, once to patch).
#[allow(clippy::type_complexity)]
fn copies<'m>(
    model: &'m Model,
    base: &BaseSource,
    scan_values: bool,
    progress: &dyn Progress,
) -> Result<(
    Vec<Decision>,
    Vec<(usize, &'m ScanEntry)>,
    std::collections::HashSet<usize>,
    Counts,
)> {
    let bm = &base.manifest;
    let by_path: HashMap<&str, &FileEntry> =
        bm.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let by_content = content_index(bm);
    let sizes: std::collections::HashSet<u64> = bm.files.iter().map(|f| f.size).collect();
    let total: u64 = model
        .entries
        .iter()
        .map(|e| match e {
            ScanEntry::File { size, .. } => *size,
            ScanEntry::Dir { .. } => 0,
        })
        .sum();
    progress.start(crate::progress::Phase::Delta, total);
    let mut decisions = Vec::new();
    let mut candidates = Vec::new();
    let mut unhashed = std::collections::HashSet::new();
    let mut counts = Counts::default();
    for e in &model.entries {
        let ScanEntry::File { path, size, .. } = e else {
            continue;
        };
        let source = &*e.source(&model.root).expect("a file");
        progress.item(path);
        if sizes.contains(size) {
            if by_path.get(path.as_str()).is_some_and(|b| b.size == *size)
                && sample_differs(base, source, path, *size)
            {
                unhashed.insert(decisions.len());
                candidates.push((decisions.len(), e));
                decisions.push(Decision::Carry);
                continue;
            }
            let (sha256, etag, values) = digest(
                source,
                path,
                *size,
                model.etag(decisions.len()),
                scan_values,
            )?;
            if let Some(from) = copy_from(&by_content, path, *size, &sha256) {
                decisions.push(Decision::Copy {
                    sha256: sha256.clone(),
                    etag,
                    from,
                    values,
                });
                counts.copied_files += 1;
                counts.copied_bytes += size;
                progress.advance(*size);
                continue;
            }
        }
        if by_path.contains_key(path.as_str()) {
            candidates.push((decisions.len(), e));
        }
        decisions.push(Decision::Carry);
    }
    Ok((decisions, candidates, unhashed, counts))
}

/// The etag of a patched file of a Hugging Face snapshot: its SHA-256 (from the patch pass)
/// for a large file, else its git blob id, read again (a small file).
fn etag_of_patched(
    model: &Model,
    file_index: usize,
    source: &Path,
    path: &str,
    size: u64,
    sha256: &str,
) -> Result<Option<String>> {
    let Some(check) = model.etag(file_index) else {
        return Ok(None);
    };
    let needs_git = match check {
        crate::hfcache::EtagCheck::Expect(e) => {
            crate::hfcache::EtagKind::of(e) == Some(crate::hfcache::EtagKind::GitSha1)
        }
        crate::hfcache::EtagCheck::Compute => {
            crate::hfcache::EtagKind::for_size(size) == crate::hfcache::EtagKind::GitSha1
        }
    };
    if needs_git {
        return Ok(digest(source, path, size, Some(check), false)?.1);
    }
    if let crate::hfcache::EtagCheck::Expect(want) = check
        && **want != *sha256
    {
        return Err(Error::BlobMismatch {
            repo_path: path.to_string(),
            blob: source.to_path_buf(),
            etag: want.to_string(),
            actual: sha256.to_string(),
        });
    }
    Ok(Some(sha256.to_string()))
}

fn internal(path: &str) -> Error {
    Error::Internal(format!(
        "the delta plan and the stream disagree about {path:?}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lists `finish` reads give their items in order, whatever their length against the
    /// shrinking step, and give their memory back as they go.
    #[test]
    fn shrinking_lists_give_their_items_in_order() {
        for n in [
            0,
            1,
            Shrinking::<u32>::EVERY - 1,
            Shrinking::<u32>::EVERY * 2 + 3,
        ] {
            let list: Vec<u32> = (0..n as u32).collect();
            let mut it = Shrinking::new(list.clone());
            let got: Vec<u32> = it.by_ref().take(n / 2 + 1).collect();
            if n > Shrinking::<u32>::EVERY {
                assert!(it.0.capacity() < n, "{n}: not shrunk");
            }
            let rest: Vec<u32> = it.collect();
            assert_eq!([got, rest].concat(), list, "{n}");
        }
    }

    /// The writer's etags, kept by index beside one digest a file, go back to their files.
    #[test]
    fn written_etags_go_back_to_their_files() {
        let written = write::WrittenFiles {
            sha256: vec![[1; 32], [2; 32], [3; 32]],
            etags: vec![(0, "a".into()), (2, "c".into())],
            values: Vec::new(),
            checks: Default::default(),
        };
        let files = written.into_files();
        let got: Vec<(u8, Option<&str>)> = files
            .iter()
            .map(|f| (f.sha256[0], f.etag.as_deref()))
            .collect();
        assert_eq!(got, [(1, Some("a")), (2, None), (3, Some("c"))]);
    }
    use crate::keys::SecretKey;
    use crate::pack::{Compress, ModelSpec, PackOptions};

    /// `len` bytes no compressor can shrink (SHA-256 in counter mode).
    fn bytes(seed: u32, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 32);
        for i in 0u32.. {
            if out.len() >= len {
                break;
            }
            out.extend(Sha256::digest(
                [seed.to_le_bytes(), i.to_le_bytes()].concat(),
            ));
        }
        out.truncate(len);
        out
    }

    /// Installs `files` as version 1 the way `unpack` leaves it (the files and the receipt).
    fn installed_base(dir: &Path, files: &[(&str, Vec<u8>)], key: &SecretKey) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, content) in files {
            std::fs::write(dir.join(name), content).unwrap();
        }
        let mut model = Model::open(&ModelSpec::Dir(dir.to_path_buf())).unwrap();
        let out = dir.with_extension("bundle");
        crate::pack::pack(
            &mut model,
            PackOptions {
                out: out.clone(),
                key,
                name: "m".into(),
                version: 1,
                compress: Compress::None,
                volume_size: 1 << 30,
                chunk_size: Some(1 << 20),
                created_unix: 0,
                warnings: vec![],
                parity: None,
                base: None,
                trust_update: vec![],
                oms: Default::default(),
                values: None,
                left_checks: Default::default(),
            },
            &crate::progress::Silent,
        )
        .unwrap();
        std::fs::create_dir(dir.join(".airlock")).unwrap();
        for name in [manifest::MANIFEST_NAME, manifest::SIGNATURE_NAME] {
            std::fs::copy(out.join(name), dir.join(".airlock").join(name)).unwrap();
        }
    }

    /// A changed file of the same size as its base file is read once, by the patch pass that
    /// hashes it, not hashed first to look for a copy and read again to patch it; unchanged
    /// files are hashed once and found as copies; a file whose content moved to another name
    /// (visibly different from the base file at its own path) is still found as a copy.
    #[test]
    fn a_changed_file_of_the_same_size_is_read_once() {
        let t = tempfile::tempdir().unwrap();
        let key = SecretKey::generate().unwrap();
        let (a, b, c) = (bytes(1, 300_000), bytes(2, 300_000), bytes(3, 200_000));
        installed_base(
            &t.path().join("v1"),
            &[
                ("a.bin", a.clone()),
                ("b.bin", b.clone()),
                ("c.bin", c.clone()),
            ],
            &key,
        );
        // Version 2: a.bin changed in a few places (same size), b.bin unchanged, c.bin
        // rewritten (same size, a copy of nothing, no patch smaller than itself).
        let v2 = t.path().join("v2");
        std::fs::create_dir(&v2).unwrap();
        let mut a2 = a.clone();
        for i in (0..a2.len()).step_by(1000) {
            a2[i] ^= 0x5a;
        }
        let c2 = bytes(9, c.len());
        std::fs::write(v2.join("a.bin"), &a2).unwrap();
        std::fs::write(v2.join("b.bin"), &b).unwrap();
        std::fs::write(v2.join("c.bin"), &c2).unwrap();
        // Same size as b.bin and visibly different from the base file at its path (none):
        // hashed, found as a copy of b.bin.
        std::fs::write(v2.join("e.bin"), &b).unwrap();
        let model = Model::open(&ModelSpec::Dir(v2.clone())).unwrap();
        let mut base = BaseSource::open(&t.path().join("v1"), &key.public_key()).unwrap();
        let work = t.path().join("work");
        std::fs::create_dir(&work).unwrap();
        HASHED.with(|n| n.set(0));
        let plan = plan(
            &model,
            Some(&mut base),
            "m",
            2,
            &work,
            3,
            true,
            &crate::progress::Silent,
        )
        .unwrap();
        // b.bin and e.bin hashed to find their copies; a.bin and c.bin (changed) not.
        assert_eq!(
            HASHED.with(|n| n.get()),
            2,
            "changed files hashed before patching"
        );
        let d = &plan.1.delta.as_ref().unwrap().decisions;
        let sha = |v: &[u8]| hex::encode(Sha256::digest(v));
        match &d[0] {
            Decision::Xor { sha256, from, .. } => {
                assert_eq!(*sha256, sha(&a2));
                assert_eq!(from.path, "a.bin");
            }
            other => panic!("a.bin: {other:?}"),
        }
        assert!(
            matches!(&d[1], Decision::Copy { from, .. } if from == "b.bin"),
            "{:?}",
            d[1]
        );
        assert!(
            matches!(&d[3], Decision::Copy { from, .. } if from == "b.bin"),
            "{:?}",
            d[3]
        );
        // c.bin: its patch is no smaller than the file, so it travels whole and the writer
        // hashes it.
        assert!(matches!(&d[2], Decision::Carry), "{:?}", d[2]);
    }

    /// A file whose content moved to another name of the same size (shards renamed) is
    /// visibly different from the base file at its own path, so it is not hashed before the
    /// patch pass; the patch pass finds it as a copy from its digest.
    #[test]
    fn a_renamed_file_is_still_a_copy() {
        let t = tempfile::tempdir().unwrap();
        let key = SecretKey::generate().unwrap();
        let (a, b) = (bytes(1, 300_000), bytes(2, 300_000));
        installed_base(
            &t.path().join("v1"),
            &[("a.bin", a.clone()), ("b.bin", b.clone())],
            &key,
        );
        let v2 = t.path().join("v2");
        std::fs::create_dir(&v2).unwrap();
        std::fs::write(v2.join("a.bin"), &b).unwrap();
        std::fs::write(v2.join("b.bin"), &a).unwrap();
        let model = Model::open(&ModelSpec::Dir(v2.clone())).unwrap();
        let mut base = BaseSource::open(&t.path().join("v1"), &key.public_key()).unwrap();
        let work = t.path().join("work");
        std::fs::create_dir(&work).unwrap();
        HASHED.with(|n| n.set(0));
        let plan = plan(
            &model,
            Some(&mut base),
            "m",
            2,
            &work,
            3,
            true,
            &crate::progress::Silent,
        )
        .unwrap();
        assert_eq!(HASHED.with(|n| n.get()), 0);
        let d = &plan.1.delta.as_ref().unwrap().decisions;
        assert!(
            matches!(&d[0], Decision::Copy { from, .. } if from == "b.bin"),
            "{:?}",
            d[0]
        );
        assert!(
            matches!(&d[1], Decision::Copy { from, .. } if from == "a.bin"),
            "{:?}",
            d[1]
        );
        assert!(!work.join("delta-patches/0").exists());
    }
}
