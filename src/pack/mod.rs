//! Packing: a model (a directory or a Hugging Face snapshot, [`source`]) → a plan (the whole
//! model, or a delta over a base, [`plan`] and [`base`]) → the volume writer (tar → zstd →
//! volumes, chunk digests, [`write`]) → the parity writer ([`parity`]) → the seal (manifest,
//! signature, [`seal`]), all inside `BUNDLE.partial/`, a private work directory locked from
//! birth and removed on failure or a signal, renamed to `BUNDLE` in one step at the end.
//!
//! Each stage knows only its own job: the writer writes the entries it is given and knows
//! nothing of deltas; the plan decides, and completes the manifest's lists from the writer's
//! digests; the seal builds, checks and signs the manifest.

pub mod base;
pub mod parity;
pub mod plan;
pub mod prepare;
pub mod seal;
pub mod source;
pub mod write;

use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use base::BaseSource;
pub use source::{Model, ModelSpec};
pub use write::Compress;

use crate::delta::Counts;
use crate::error::{Error, Result};
use crate::fsio;
use crate::inspect::{Finding, values};
use crate::manifest::{
    self, Compression, FileEntry, HfSource, Manifest, Stream, Totals, Volume, Warning,
};
use crate::progress::Progress;
use crate::scan::ScanEntry;
use crate::scheme::{Scheme, Signer};
use crate::staging::{self, Staging};
use crate::tar;

/// Everything `pack` needs besides the model, resolved.
pub struct PackOptions<'a> {
    /// The bundle directory to create.
    pub out: PathBuf,
    /// What signs the manifest (`manifest.json.minisig`): any scheme's [`Signer`] (airlock's
    /// minisign key is [`crate::scheme::MinisignSigner`]).
    pub key: &'a dyn Signer,
    /// Bundle name.
    pub name: String,
    /// Bundle version.
    pub version: u64,
    /// Compression.
    pub compress: Compress,
    /// Largest volume, bytes.
    pub volume_size: u64,
    /// Chunk size for per-chunk digests; `None`: 64 MiB, or with parity the parity unit
    /// chosen for the volume size (FORMAT.md 17.4).
    pub chunk_size: Option<u64>,
    /// Creation time, seconds since the epoch.
    pub created_unix: i64,
    /// Model-check warnings to record.
    pub warnings: Vec<Warning>,
    /// Parity to add (`pack --parity`; FORMAT.md section 17): a share of the data or a number
    /// of lost volumes to survive.
    pub parity: Option<crate::parity::Ask>,
    /// Pack a delta against this base (docs/FORMAT.md section 16).
    pub base: Option<BaseSource>,
    /// TUF root versions to carry (`pack --trust-update`; FORMAT.md section 18), checked by
    /// the caller.
    pub trust_update: Vec<crate::trust::update::RootFile>,
    /// The value scan during the read pass (`None`: `pack --no-value-scan`).
    pub values: Option<ValueScan<'a>>,
    /// The model checks the scan left to the read pass ([`Model::checks_left`]).
    pub left_checks: LeftChecks<'a>,
    /// OpenSSF Model Signing: sign with this key, check the publisher's signature (FORMAT.md
    /// section 19).
    pub oms: crate::oms::pack::Sealing,
}

/// The value scan ([`crate::inspect::values`]) of a pack: run in the pass that reads every
/// byte, its findings decided on at the end of that pass, before anything is sealed.
pub struct ValueScan<'a> {
    /// Record error findings as warnings and go on (`--no-model-checks`) instead of refusing.
    pub skip_errors: bool,
    /// Receives every finding of the scan, whether the pack then goes on or refuses.
    pub findings: &'a mut Vec<Finding>,
}

/// The model checks the scan left to the read pass ([`Model::checks_left`]: small files past
/// its kept bytes, checked on the handle that reads their bytes, their one open): decided on at
/// the end of that pass, before the value scan's findings and before anything is sealed, as
/// [`Model::check`]'s are before the pack (a refusal names the same first error and count: the
/// scan's checks found none, or the files were checked then, [`Model::check_left`]).
#[derive(Default)]
pub struct LeftChecks<'a> {
    /// Record error findings as warnings and go on (`--no-model-checks`) instead of refusing.
    pub skip_errors: bool,
    /// Receives every finding of those checks, whether the pack then goes on or refuses
    /// (`None`: not kept).
    pub findings: Option<&'a mut Vec<Finding>>,
}

/// Result of a pack.
pub struct Packed {
    /// The manifest written.
    pub manifest: Manifest,
    /// SHA-256 of manifest.json.
    pub manifest_sha256: String,
    /// For a delta: how the files travel.
    pub delta: Option<Counts>,
    /// What the operator should know (base files not used).
    pub notes: Vec<String>,
}

/// Packs `model` into the bundle directory `opts.out`.
///
/// The work happens in `BUNDLE.partial/`, a [`Staging`] directory (private, locked from
/// birth, removed on failure and on SIGINT/SIGTERM); once the signature is on disk it becomes
/// `BUNDLE` in one rename.
///
/// The model's entries are taken (`model.entries` is empty afterwards, whatever the outcome
/// once the volumes are written): each file's path moves into its manifest entry, so a model of
/// a million files does not hold its paths twice.
pub fn pack(
    model: &mut Model,
    mut opts: PackOptions<'_>,
    progress: &dyn Progress,
) -> Result<Packed> {
    let out = &opts.out;
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; choose a new bundle directory",
            out.display()
        )));
    }
    let parent = fsio::parent_dir(out);
    let Some(out_name) = out.file_name().and_then(|n| n.to_str()) else {
        return Err(Error::Usage(format!(
            "{}: not a usable bundle name",
            out.display()
        )));
    };
    let checks_left = model.checks_left();
    let mut left = crate::inspect::TreeChecks::default();
    if checks_left && opts.base.is_some() {
        // A delta takes files from its base without reading them: their checks run now.
        crate::scan::check_left(&model.root, &mut model.entries, &mut left);
    }
    check_manifest_fits(model, &opts)?;
    if let Some(e) = model
        .entries
        .iter()
        .find(|e| manifest::uses_delta_dir(e.path()))
    {
        return Err(Error::Source {
            path: PathBuf::from(e.path()),
            reason: format!(
                "uses the name {:?}, reserved for the patches of delta bundles",
                manifest::DELTA_DIR
            ),
        });
    }
    let partial_name = format!("{out_name}.partial");
    let partial = parent.join(&partial_name);
    let staging = match Staging::create_named(&parent, &partial_name) {
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            if !remove_abandoned_partial(&parent, &partial_name) {
                return Err(Error::Usage(format!(
                    "{} exists and is not a stale airlock pack (another pack may be running); remove it or choose another name",
                    partial.display()
                )));
            }
            Staging::create_named(&parent, &partial_name)?
        }
        other => other?,
    };
    let dir = staging.path();
    let level = match opts.compress {
        Compress::Zstd { level, .. } => level,
        Compress::None => 3,
    };
    let scan_values = opts.values.is_some();
    let (stream, plan) = plan::plan(
        model,
        opts.base.as_mut(),
        &opts.name,
        opts.version,
        &dir,
        level,
        scan_values,
        progress,
    )?;
    let chunk_size = opts.chunk_size_for(stream_estimate(&stream));
    let mut written = write::write(
        &stream,
        &dir,
        &write::WriteOptions {
            compress: opts.compress,
            volume_size: opts.volume_size,
            chunk_size,
            scan_values,
            // The parity pass reads the volumes back.
            drop_written: opts.parity.is_none(),
        },
        progress,
    )?;
    drop(stream);
    // The bytes the scan kept for the read pass are written: let them go before the manifest
    // is built beside the entries (64 MiB of them).
    for e in &mut model.entries {
        if let ScanEntry::File { prefetched, .. } = e {
            *prefetched = None;
        }
    }
    let stream_size = written.stream_size;
    let volumes = written.volumes.clone();
    let chunk_checks = std::mem::take(&mut written.chunk_checks);
    left.merge(std::mem::take(&mut written.files.checks));
    // What the seal needs of the model's entries, before they are taken.
    let repo_files = repo_file_counts(model);
    let hf = model.hf.is_some() || !model.repos.is_empty();
    let completed = plan.finish(
        std::mem::take(&mut model.entries),
        std::mem::take(&mut model.etags),
        hf,
        written,
    )?;
    let mut warnings = opts.warnings.clone();
    // The findings of the checks left to the read pass and the value findings exist only now:
    // refuse before sealing (the work directory goes with the error), or record them with the
    // other findings.
    if checks_left {
        let (findings, too_long) = left
            .finish(&model.root)
            .map_err(|e| Error::io(&model.root, e))?;
        // The scan leaves no file whose path is too long for the checks.
        debug_assert!(too_long.is_empty(), "{too_long:?}");
        if let Some(kept) = opts.left_checks.findings.as_mut() {
            kept.extend(findings.iter().cloned());
        }
        warnings.extend(source::gate(&findings, opts.left_checks.skip_errors)?);
        warnings.sort_by(|a, b| (&a.path, &a.code).cmp(&(&b.path, &b.code)));
    }
    let recorded_values = match opts.values.as_mut() {
        Some(scan) => {
            let findings: Vec<Finding> = completed
                .values
                .iter()
                .flat_map(|(path, v)| v.findings(path))
                .collect();
            scan.findings.extend(findings.iter().cloned());
            warnings.extend(source::gate(&findings, scan.skip_errors)?);
            warnings.sort_by(|a, b| (&a.path, &a.code).cmp(&(&b.path, &b.code)));
            values_record(&completed.values)
        }
        None => None,
    };
    let parity = match opts.parity {
        Some(ask) => Some(parity::write_parity(
            &dir,
            &volumes,
            &chunk_checks,
            chunk_size,
            opts.volume_size,
            ask,
            progress,
        )?),
        None => None,
    };
    let compression = match opts.compress {
        Compress::None => Compression {
            algorithm: "none".into(),
            level: None,
        },
        Compress::Zstd { level, .. } => Compression {
            algorithm: "zstd".into(),
            level: Some(level),
        },
    };
    // The etags of the repositories' files: a directory beside them records none.
    // Moved, not copied, to the one place that records them (a million of them).
    let mut etags = completed.etags.unwrap_or_default();
    let repo_etags: Vec<String> = match (&model.dir, model.repos.is_empty()) {
        (_, true) => Vec::new(),
        (Some((name, _)), false) => completed
            .files
            .iter()
            .zip(std::mem::take(&mut etags))
            .filter(|(f, _)| f.path.split('/').next() != Some(name.as_str()))
            .map(|(_, e)| e)
            .collect(),
        (None, false) => std::mem::take(&mut etags),
    };
    let sealed = seal::seal(
        seal::Parts {
            name: opts.name.clone(),
            version: opts.version,
            created_unix: opts.created_unix,
            compression,
            stream_size,
            chunk_size,
            volumes,
            directories: completed.directories,
            files: completed.files,
            warnings,
            source: model.hf.as_ref().map(|hf| HfSource {
                etags,
                ..hf.source()
            }),
            repos: repos_record(model, &repo_files, repo_etags),
            dir: model
                .dir
                .as_ref()
                .map(|(name, _)| manifest::DirPart { path: name.clone() }),
            parity,
            base: plan.base().cloned(),
            trust_update: crate::trust::update::carry(&dir, &opts.trust_update)?,
            values: recorded_values,
            oms: std::mem::take(&mut opts.oms),
        },
        opts.key,
        &dir,
    )?;
    rustix::fs::fchmod(staging.fd(), rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(|e| Error::io(&partial, e.into()))?;
    staging.into_place(out)?;
    Ok(Packed {
        manifest: sealed.manifest,
        manifest_sha256: sealed.manifest_sha256,
        delta: plan.counts(),
        notes: opts.base.map(|b| b.notes).unwrap_or_default(),
    })
}

/// How many files of `model.entries` each repository of a model of several snapshots
/// ([`Model::repos`]) holds, in order.
fn repo_file_counts(model: &Model) -> Vec<usize> {
    model
        .repos
        .iter()
        .map(|hf| {
            let prefix = format!("{}/", hf.folder());
            model
                .entries
                .iter()
                .filter(|e| matches!(e, ScanEntry::File { path, .. } if path.starts_with(&prefix)))
                .count()
        })
        .collect()
}

/// The manifest's `repos` for a model of several snapshots ([`Model::repos`]): each
/// repository's folder and source, with the etags of its files (`counts` of them, from
/// [`repo_file_counts`]), taken in order from `etags` (one per file of the model, in bundle
/// order). A repository whose files `etags` does not reach gets fewer (the manifest size
/// estimate, which calibrates on short lists).
fn repos_record(model: &Model, counts: &[usize], etags: Vec<String>) -> Vec<manifest::Repo> {
    let mut out = Vec::with_capacity(model.repos.len());
    let mut etags = etags.into_iter();
    for (hf, &count) in model.repos.iter().zip(counts) {
        out.push(manifest::Repo {
            path: hf.folder(),
            source: HfSource {
                etags: etags.by_ref().take(count).collect(),
                ..hf.source()
            },
        });
    }
    out
}

/// The manifest's `values` from the scans (absent when no file was scanned).
fn values_record(scans: &[(String, values::FileScan)]) -> Option<manifest::Values> {
    if scans.is_empty() {
        return None;
    }
    Some(manifest::Values {
        rules: values::RULES,
        files: scans
            .iter()
            .map(|(path, v)| file_values(path, &v.summary))
            .collect(),
    })
}

/// One file's entry of the manifest's `values`.
pub fn file_values(path: &str, s: &values::Summary) -> manifest::FileValues {
    manifest::FileValues {
        path: path.to_string(),
        format: s.format.to_string(),
        tensors: s.tensors,
        checked: s.checked,
        nan: s.nan,
        inf: s.inf,
        zero_tensors: s.zero_tensors,
        constant_tensors: s.constant_tensors,
        zero_regions: s.zero_regions,
    }
}

impl PackOptions<'_> {
    /// The chunk size for a stream of about `stream` bytes ([`parity::chunk_size`]).
    pub(crate) fn chunk_size_for(&self, stream: u64) -> u64 {
        parity::chunk_size(
            self.chunk_size,
            self.parity.is_some(),
            self.volume_size,
            stream,
        )
    }
}

/// The uncompressed size of a stream of `entries` (an upper bound of its payload but for
/// zstd's few bytes of framing), to choose the parity unit before it is written.
fn stream_estimate(stream: &write::Stream<'_>) -> u64 {
    stream
        .iter()
        .map(|e| match e {
            write::StreamEntry::Dir(p) => manifest::entry_stream_size(&p, true, 0),
            write::StreamEntry::File { path, size, .. } => {
                manifest::entry_stream_size(&path, false, size)
            }
        })
        .map(|s| s.unwrap_or(u64::MAX))
        .fold(2 * tar::BLOCK as u64, u64::saturating_add)
}

/// Counts the bytes written to it.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The size `manifest.json` would have for `opts`, from the scan alone: every field but the
/// digests is known before packing, the digests have fixed lengths, and the volume list is
/// sized for the largest payload the stream can compress to. An upper bound within a few
/// bytes per volume (but for the value findings of the files the scan did not open:
/// [`may_have_values`]).
///
/// The per-file and per-directory lists are not built: the pretty JSON of an entry of a list
/// is the same text wherever it stands but for its path and size, so a handful of small
/// manifests (no entry, one, two of each kind) give the constant parts and every entry adds
/// its own path's and size's lengths. The bytes counted are the bytes a manifest built with
/// every entry serializes to (a test holds the two to each other); at a million files the
/// whole-manifest estimate took a second and a quarter of a gigabyte.
pub(crate) fn manifest_size_estimate(model: &Model, opts: &PackOptions<'_>) -> u64 {
    // The files the value scan may read (its records and findings are bounded per file).
    let mut scanned = Vec::new();
    let mut stream: u64 = 2 * tar::BLOCK as u64;
    // The variable parts of the lists: the JSON strings' lengths and the sizes' digits.
    let (mut files, mut dirs, mut file_text, mut dir_text) = (0u64, 0u64, 0u64, 0u64);
    for e in &model.entries {
        if opts.values.is_some() && may_have_values(e, &model.root) {
            scanned.push(e.path());
        }
        match e {
            ScanEntry::Dir { path } => {
                stream = stream
                    .saturating_add(manifest::entry_stream_size(path, true, 0).unwrap_or(u64::MAX));
                dirs += 1;
                dir_text += json_string_len(path);
            }
            ScanEntry::File {
                path,
                size,
                executable,
                ..
            } => {
                stream = stream.saturating_add(
                    manifest::entry_stream_size(path, false, *size).unwrap_or(u64::MAX),
                );
                files += 1;
                file_text += json_string_len(path) + decimal_len(*size) + u64::from(!*executable);
            }
        }
    }
    let m = |files: usize, dirs: usize| -> u64 {
        let file = FileEntry {
            path: String::new(),
            size: 0,
            sha256: "0".repeat(64),
            executable: true,
            from: None,
        };
        estimate_manifest(
            model,
            opts,
            stream,
            &scanned,
            vec![file; files],
            vec![String::new(); dirs],
        )
    };
    // An entry of the calibration lists has the path "" (2 bytes of JSON), the size 0 (one
    // digit) and `executable: true` (a byte shorter than false).
    let none = m(0, 0);
    let (file1, file2) = (m(1, 0), m(2, 0));
    let (dir1, dir2) = (m(0, 1), m(0, 2));
    let per_file = file2 - file1;
    let per_dir = dir2 - dir1;
    let mut size = none;
    if files > 0 {
        size += (file1 - none - per_file) + files * (per_file - 3) + file_text;
    }
    if dirs > 0 {
        size += (dir1 - none - per_dir) + dirs * (per_dir - 2) + dir_text;
    }
    // A delta adds `base` (under 200 bytes) and at most one `from` object per file: the path
    // again (JSON-escaped, at most 6 bytes per byte) and about 250 bytes of fields and digest.
    let delta = match &opts.base {
        None => 0,
        Some(_) => model
            .entries
            .iter()
            .map(|e| match e {
                ScanEntry::File { path, .. } => 250 + 6 * path.len() as u64,
                ScanEntry::Dir { .. } => 0,
            })
            .sum::<u64>()
            .saturating_add(200),
    };
    (size + 1).saturating_add(delta)
}

/// The length of `s` as a JSON string, quotes and escapes included.
fn json_string_len(s: &str) -> u64 {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, s).expect("counting never fails");
    counter.0
}

/// The number of decimal digits of `n`.
fn decimal_len(n: u64) -> u64 {
    u64::from(n.checked_ilog10().unwrap_or(0) + 1)
}

/// The size of the pretty JSON of the manifest [`manifest_size_estimate`] bounds, with `files`
/// and `directories` as its lists (and as many etags as files for a cache snapshot).
fn estimate_manifest(
    model: &Model,
    opts: &PackOptions<'_>,
    stream: u64,
    scanned: &[&str],
    files: Vec<FileEntry>,
    directories: Vec<String>,
) -> u64 {
    let digest = "0".repeat(64);
    // zstd's worst case for one frame (ZSTD_COMPRESSBOUND: size + size/256 + at most 64
    // bytes below 128 KiB), plus the frame header.
    let payload = match opts.compress {
        Compress::None => stream,
        Compress::Zstd { .. } => stream.saturating_add(stream >> 8).saturating_add(128),
    };
    let chunk_size = opts.chunk_size_for(stream);
    let count = payload.div_ceil(opts.volume_size.max(1)).max(1);
    let volumes: Vec<Volume> = (0..count)
        .map(|i| {
            let size = opts.volume_size.min(payload - i * opts.volume_size);
            Volume {
                name: manifest::volume_name(i as usize, count as usize),
                size,
                sha256: None,
                chunks: vec![digest.clone(); size.div_ceil(chunk_size) as usize],
            }
        })
        .collect();
    let parity = opts
        .parity
        .and_then(|p| parity::estimate(&volumes, chunk_size, opts.volume_size, p));
    let m = Manifest {
        format: manifest::FORMAT_ID.into(),
        format_version: manifest::FORMAT_VERSION,
        name: opts.name.clone(),
        version: opts.version,
        created: manifest::rfc3339(opts.created_unix),
        tool: format!("airlock {}", env!("CARGO_PKG_VERSION")),
        compression: Compression {
            algorithm: "zstd".into(),
            level: Some(19),
        },
        stream: Stream { size: stream },
        chunk_size,
        volumes,
        totals: Totals {
            files: u64::MAX,
            directories: u64::MAX,
            file_bytes: u64::MAX,
            volume_bytes: u64::MAX,
        },
        warnings: value_warnings_bound(opts, scanned),
        source: model.hf.as_ref().map(|hf| HfSource {
            etags: vec![digest.clone(); files.len()],
            ..hf.source()
        }),
        // The etags of every file, whichever repository it is in, counted once.
        repos: repos_record(
            model,
            &repo_file_counts(model),
            vec![digest.clone(); files.len()],
        ),
        dir: model
            .dir
            .as_ref()
            .map(|(name, _)| manifest::DirPart { path: name.clone() }),
        parity,
        base: None,
        trust_update: crate::trust::update::manifest_entry(&opts.trust_update),
        // Every file the scan may read, with the longest format name and counts.
        values: opts.values.as_ref().and_then(|_| {
            let most = values::Summary {
                format: "safetensors",
                tensors: u64::MAX,
                checked: u64::MAX,
                nan: u64::MAX,
                inf: u64::MAX,
                zero_tensors: u64::MAX,
                constant_tensors: u64::MAX,
                zero_regions: u64::MAX,
            };
            let records: Vec<manifest::FileValues> = scanned
                .iter()
                .map(|path| file_values(path, &most))
                .collect();
            (!records.is_empty()).then_some(manifest::Values {
                rules: u32::MAX,
                files: records,
            })
        }),
        oms: oms_estimate(&opts.oms),
        directories,
        files,
    };
    let mut counter = Counter(0);
    serde_json::to_writer_pretty(&mut counter, &m).expect("counting never fails");
    counter.0
}

/// The recorded model-check warnings, and with the value scan the most its findings can add:
/// one per code for every file it may read (`scanned`), each with the longest problem, every
/// character escaped.
fn value_warnings_bound(opts: &PackOptions<'_>, scanned: &[&str]) -> Vec<Warning> {
    let mut warnings = opts.warnings.clone();
    for path in scanned {
        for _ in 0..values::MAX_FINDINGS_PER_FILE {
            warnings.push(Warning {
                path: path.to_string(),
                code: "x".repeat(20),
                problem: "\"".repeat(values::MAX_PROBLEM_BYTES),
            });
        }
    }
    warnings
}

/// Whether the value scan may read the model file `e`: as its name or first bytes say
/// ([`crate::inspect::format::identify`]), from what the scan found when it opened the file,
/// else from the bytes it kept, else from the first bytes read now; a file that cannot be read
/// now may be (the read pass decides, and refuses a file that changed).
///
/// A file whose checks the scan left to the read pass ([`ScanEntry::File::checks_left`]: a
/// small file past its kept bytes, with no shard index, config, safetensors or GGUF name) is
/// not opened for this (it would be its second open, a third of the pack of a million small
/// files): it is counted as not read. Should such files hold values after all, what their findings add to the manifest is
/// held to the limit by the seal's own check, which refuses before anything is signed.
fn may_have_values(e: &ScanEntry, root: &Path) -> bool {
    use crate::inspect::format;
    let ScanEntry::File {
        path,
        size,
        prefetched,
        has_values,
        checks_left,
        ..
    } = e
    else {
        return false;
    };
    if *checks_left {
        return false;
    }
    if let Some(known) = has_values {
        return *known;
    }
    match prefetched {
        Some(p) => format::has_values_in(path, p.bytes(), *size),
        None => crate::scan::open_source(&e.source(root).expect("a file"), path)
            .and_then(|f| format::has_values(path, &f, *size))
            .unwrap_or(true),
    }
}

/// The `oms` object the manifest will get, its digests zeros (their length is fixed).
fn oms_estimate(o: &crate::oms::pack::Sealing) -> Option<manifest::Oms> {
    let digest = "0".repeat(64);
    let signature = o.emit.as_ref().map(|_| manifest::OmsSignature {
        name: manifest::OMS_SIGNATURE_NAME_BESIDE_PUBLISHER.into(),
        size: u64::MAX,
        sha256: digest.clone(),
    });
    let publisher = o.publisher.as_ref().map(|p| manifest::OmsPublisher {
        signature: p.path.clone(),
        method: "certificate".into(),
        signer: digest.clone(),
    });
    (signature.is_some() || publisher.is_some()).then_some(manifest::Oms {
        signature,
        publisher,
    })
}

/// Refuses, before anything is written, a model whose manifest would be larger than readers
/// accept (FORMAT.md, section 2): airlock never writes a bundle it would refuse to read.
fn check_manifest_fits(model: &Model, opts: &PackOptions<'_>) -> Result<()> {
    let estimate = manifest_size_estimate(model, opts);
    if estimate > manifest::MAX_MANIFEST_BYTES {
        return Err(manifest_too_large(model, opts, estimate));
    }
    Ok(())
}

fn manifest_too_large(model: &Model, opts: &PackOptions<'_>, size: u64) -> Error {
    let files = model
        .entries
        .iter()
        .filter(|e| matches!(e, ScanEntry::File { .. }))
        .count();
    Error::ManifestTooLarge {
        path: opts.out.clone(),
        reason: format!(
            "cannot pack this model: its manifest would be {size} bytes ({files} files, {} entries in all), more than the {}-byte limit every reader enforces",
            model.entries.len(),
            manifest::MAX_MANIFEST_BYTES
        ),
    }
}

/// Removes `PARENT/NAME.partial` if a pack of this user left it: either its lock is free (the
/// pack died while writing), or it has no lock and is complete (the pack died between removing
/// its lock and the final rename, leaving a signed bundle under the work name).
fn remove_abandoned_partial(parent: &Path, name: &str) -> bool {
    let partial = parent.join(name);
    let Ok(parent_fd) = fsio::open_dir_path(parent, fsio::Follow::Final) else {
        return false;
    };
    match staging::remove_if_stale(&parent_fd, name, &partial, false) {
        Ok(true) => return true,
        Ok(false) => {}
        Err(_) => return false,
    }
    is_complete_bundle(&partial) && staging::remove_tree(&partial).is_ok()
}

/// Whether `dir` is a directory of this user holding exactly a manifest that parses, its
/// signature, and the volumes the manifest lists at their listed sizes: a finished pack.
fn is_complete_bundle(dir: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return false;
    }
    let Ok(bytes) = fsio::read_regular_capped(
        &dir.join(manifest::MANIFEST_NAME),
        manifest::MAX_MANIFEST_BYTES,
        false,
    ) else {
        return false;
    };
    let Ok(m) = Manifest::parse(&bytes) else {
        return false;
    };
    let Ok(sig) = fsio::read_regular_capped(&dir.join(manifest::SIGNATURE_NAME), 64 << 10, false)
    else {
        return false;
    };
    if crate::scheme::Minisign.signer_of(&sig).is_err() {
        return false;
    }
    let Ok(rd) = crate::fsio::list_dir(dir, crate::fsio::Follow::Final) else {
        return false;
    };
    let mut seen = 0;
    for (name, _) in rd {
        let Some(name) = name.to_str() else {
            return false;
        };
        if name == manifest::MANIFEST_NAME
            || name == manifest::SIGNATURE_NAME
            || crate::trust::update::is_listed_root(&m, name)
            || crate::oms::is_listed(&m, name)
        {
            continue;
        }
        let Some(v) = m.volumes.iter().find(|v| v.name == name) else {
            return false;
        };
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(vm) if vm.is_file() && vm.len() == v.size => seen += 1,
            _ => return false,
        }
    }
    seen == m.volumes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SecretKey;

    fn options<'a>(out: PathBuf, key: &'a SecretKey, compress: Compress) -> PackOptions<'a> {
        PackOptions {
            out,
            key,
            name: "m".into(),
            version: 1,
            compress,
            volume_size: 4096,
            chunk_size: Some(4096),
            created_unix: 0,
            warnings: vec![],
            parity: None,
            base: None,
            trust_update: vec![],
            values: None,
            left_checks: Default::default(),
            oms: Default::default(),
        }
    }

    /// The estimate counts, without building them, the bytes a manifest holding every file and
    /// directory with zero digests serializes to: the same count, to the byte, as that
    /// manifest's own serialization, for names that need escaping, empty and large files,
    /// executables, and a cache snapshot's etags.
    #[test]
    fn manifest_size_estimate_counts_what_the_whole_lists_serialize_to() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("m");
        std::fs::create_dir_all(root.join("a \"b\"/c\u{e9}")).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        std::fs::write(root.join("a \"b\"/c\u{e9}/x\u{202e}.txt"), vec![7u8; 12345]).unwrap();
        std::fs::write(root.join("run.sh"), b"#!/bin/sh").unwrap();
        std::fs::set_permissions(
            root.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let key = SecretKey::generate().unwrap();
        let whole = |model: &Model, opts: &PackOptions<'_>| {
            let mut stream = 2 * tar::BLOCK as u64;
            let (mut files, mut dirs) = (Vec::new(), Vec::new());
            for e in &model.entries {
                match e {
                    ScanEntry::Dir { path } => {
                        stream += manifest::entry_stream_size(path, true, 0).unwrap();
                        dirs.push(path.clone());
                    }
                    ScanEntry::File {
                        path,
                        size,
                        executable,
                        ..
                    } => {
                        stream += manifest::entry_stream_size(path, false, *size).unwrap();
                        files.push(FileEntry {
                            path: path.clone(),
                            size: *size,
                            sha256: "0".repeat(64),
                            executable: *executable,
                            from: None,
                        });
                    }
                }
            }
            estimate_manifest(model, opts, stream, &[], files, dirs) + 1
        };
        let mut model = Model::open(&ModelSpec::Dir(root.clone())).unwrap();
        for compress in [
            Compress::None,
            Compress::Zstd {
                level: 3,
                workers: 0,
            },
        ] {
            let opts = options(dir.path().join("b"), &key, compress);
            assert_eq!(manifest_size_estimate(&model, &opts), whole(&model, &opts));
        }
        model.hf = Some(source::HfOrigin {
            cache: dir.path().into(),
            repo_id: "org/name".into(),
            repo_type: "model".into(),
            revision: "main".into(),
            snapshot: crate::hfcache::Snapshot {
                repo_folder: dir.path().into(),
                commit: "c".repeat(40),
                dir: root.clone(),
                entries: vec![],
                etags: vec![],
                listed: false,
                missing: vec![],
                notes: vec![],
                checked: Ok((vec![], vec![])),
            },
        });
        let opts = options(dir.path().join("b"), &key, Compress::None);
        assert_eq!(manifest_size_estimate(&model, &opts), whole(&model, &opts));
        // No file, no directory.
        model.entries.clear();
        assert_eq!(manifest_size_estimate(&model, &opts), whole(&model, &opts));
    }

    /// A small file travels as the scan read it, the bytes the model checks saw, even when it
    /// is rewritten before the read pass; a large one is read again and its change refused.
    #[test]
    fn small_files_travel_as_the_scan_read_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("m");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("small.txt"), b"as scanned").unwrap();
        std::fs::write(root.join("large.bin"), vec![1u8; 100 << 10]).unwrap();
        let key = SecretKey::generate().unwrap();
        let mut model = Model::open(&ModelSpec::Dir(root.clone())).unwrap();
        std::fs::write(root.join("small.txt"), b"rewritten!").unwrap();
        let out = dir.path().join("b");
        let packed = pack(
            &mut model,
            options(out.clone(), &key, Compress::None),
            &crate::progress::Silent,
        )
        .unwrap();
        let small = packed.manifest.files.iter().find(|f| f.path == "small.txt");
        let want = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"as scanned"));
        assert_eq!(small.map(|f| f.sha256.as_str()), Some(want.as_str()));
        let stream: Vec<u8> = packed
            .manifest
            .volumes
            .iter()
            .flat_map(|v| std::fs::read(out.join(&v.name)).unwrap())
            .collect();
        assert!(stream.windows(10).any(|w| w == b"as scanned"));
        assert!(!stream.windows(10).any(|w| w == b"rewritten!"));

        std::fs::write(root.join("large.bin"), vec![2u8; 99 << 10]).unwrap();
        let mut model = Model::open(&ModelSpec::Dir(root.clone())).unwrap();
        std::fs::write(root.join("large.bin"), vec![2u8; 98 << 10]).unwrap();
        let err = pack(
            &mut model,
            options(dir.path().join("b2"), &key, Compress::None),
            &crate::progress::Silent,
        )
        .err()
        .expect("a changed large file fails the pack");
        assert!(
            matches!(&err, Error::SourceChanged { path, .. } if path.ends_with("large.bin")),
            "{err}"
        );
    }

    /// The value scan reads a model file by its first bytes as well as by its name (issue 36
    /// item 6): a GGUF holding NaN named `model.bin` and a safetensors file named `weights`
    /// are scanned and their findings recorded, and the manifest's bound counts them, whether
    /// the scan told which files those are or the estimate reads their first bytes itself.
    #[test]
    fn model_files_under_other_names_are_scanned_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("m");
        std::fs::create_dir(&root).unwrap();
        let fixture = |name: &str| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures/values");
            std::fs::read(path.join(name)).unwrap()
        };
        std::fs::write(root.join("model.bin"), fixture("nan-f32.gguf")).unwrap();
        std::fs::write(root.join("weights"), fixture("nan-f16.safetensors")).unwrap();
        std::fs::write(root.join("notes.txt"), b"a text file").unwrap();
        let key = SecretKey::generate().unwrap();
        let mut model = Model::open(&ModelSpec::Dir(root.clone())).unwrap();
        let mut blind = Model::open(&ModelSpec::Dir(root)).unwrap();
        for e in &mut blind.entries {
            if let ScanEntry::File {
                prefetched,
                has_values,
                ..
            } = e
            {
                *prefetched = None;
                *has_values = None;
            }
        }
        let mut findings = Vec::new();
        let mut opts = options(dir.path().join("b"), &key, Compress::None);
        opts.values = Some(ValueScan {
            skip_errors: true,
            findings: &mut findings,
        });
        let estimate = manifest_size_estimate(&model, &opts);
        assert_eq!(manifest_size_estimate(&blind, &opts), estimate);
        let packed = pack(&mut model, opts, &crate::progress::Silent).unwrap();
        let actual = packed.manifest.to_bytes().len() as u64;
        assert!(estimate >= actual, "estimate {estimate} < actual {actual}");
        let scanned: Vec<(&str, &str)> = packed
            .manifest
            .values
            .as_ref()
            .unwrap()
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.format.as_str()))
            .collect();
        assert_eq!(scanned, [("model.bin", "gguf"), ("weights", "safetensors")]);
        let recorded: Vec<(&str, &str)> = packed
            .manifest
            .warnings
            .iter()
            .map(|w| (w.path.as_str(), w.code.as_str()))
            .collect();
        assert_eq!(
            recorded,
            [("model.bin", "tensor-nan"), ("weights", "tensor-nan")]
        );
    }

    #[test]
    fn manifest_size_estimate_is_an_upper_bound_close_to_the_real_size() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("m");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        for i in 0..40u32 {
            let bytes: Vec<u8> = (0..i * 997)
                .map(|b| (b.wrapping_mul(2654435761) >> 7) as u8)
                .collect();
            std::fs::write(root.join(format!("sub/f{i}.bin")), bytes).unwrap();
        }
        std::fs::write(root.join("sub/deeper/\u{e9}t\u{e9} \"quoted\".txt"), b"x").unwrap();
        let key = SecretKey::generate().unwrap();
        for (i, compress) in [
            Compress::None,
            Compress::Zstd {
                level: 3,
                workers: 0,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let mut model = Model::open(&ModelSpec::Dir(root.clone())).unwrap();
            let opts = options(dir.path().join(format!("b{i}")), &key, compress);
            let estimate = manifest_size_estimate(&model, &opts);
            let packed = pack(&mut model, opts, &crate::progress::Silent).unwrap();
            let actual = packed.manifest.to_bytes().len() as u64;
            assert!(estimate >= actual, "estimate {estimate} < actual {actual}");
            // Uncompressed, the payload is known exactly: only the digits of the totals and
            // the level differ. Compressed, the bound is for incompressible data.
            if i == 0 {
                assert!(
                    estimate - actual < 256,
                    "estimate {estimate}, actual {actual}"
                );
            }
        }
    }
}
