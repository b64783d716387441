//! `airlock pack`: resolve the options, check everything that needs no key, unlock the key,
//! then scan, pack and sign.

use std::path::Path;

use airlock::error::{Error, Result, human};
use airlock::hfcache;
use airlock::manifest;
use airlock::pack::{self, BaseSource, Compress, Model, ModelSpec, PackOptions, write};
use airlock::parity::Ask;
use airlock::size::parse_size;

use super::Output;
use super::secret;
use super::ui::Ui;
use crate::cli::{CompressArg, PackArgs, RepoTypeArg};

/// The smallest `--volume-size`: one tar block header and some payload.
const MIN_VOLUME_SIZE: u64 = 4096;

/// The bundle directory must not exist yet, and the directory it goes in must.
fn check_output(output: &Path) -> Result<()> {
    if std::fs::symlink_metadata(output).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; choose a new bundle directory",
            output.display()
        )));
    }
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::io(
            parent,
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
        )),
        Err(e) => Err(Error::io(parent, e)),
    }
}

pub(super) fn created_unix() -> Result<i64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
        Err(_) => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)),
    }
}

/// The sizes and shapes `pack` takes from its flags, checked.
struct Shape {
    volume_size: u64,
    chunk_size: Option<u64>,
    parity: Option<Ask>,
}

fn shape(a: &PackArgs) -> Result<Shape> {
    let volume_size = match &a.volume_size {
        Some(s) => parse_size(s).map_err(|e| Error::Usage(format!("--volume-size {e}")))?,
        None => u64::MAX,
    };
    if volume_size < MIN_VOLUME_SIZE {
        return Err(Error::Usage(format!(
            "--volume-size must be at least {MIN_VOLUME_SIZE} bytes (for a FAT32 medium, use fat32)"
        )));
    }
    let parity = a
        .parity
        .as_deref()
        .map(pack::parity::parse_ask)
        .transpose()
        .map_err(|e| Error::Usage(format!("--parity {e}")))?;
    let chunk_size = a.chunk_size;
    if let Some(c) = chunk_size
        && (!(4096..=(1 << 30)).contains(&c) || !c.is_power_of_two())
    {
        return Err(Error::Usage(format!(
            "--chunk-size {c} is not a power of two from 4096 to 1073741824"
        )));
    }
    Ok(Shape {
        volume_size,
        chunk_size,
        parity,
    })
}

/// Where the model is, from the flags.
fn model_spec(a: &PackArgs) -> Result<ModelSpec> {
    super::only_with(
        "--hf-repo",
        a.hf_repo.is_some(),
        &[
            ("--revision", a.revision.is_some()),
            ("--hf-cache", a.hf_cache.is_some()),
            ("--repo-type", a.repo_type.is_some()),
        ],
    )?;
    Ok(match &a.hf_repo {
        Some(repo_id) => ModelSpec::HfSnapshot {
            cache: a.hf_cache.clone(),
            repo_id: repo_id.clone(),
            repo_type: a
                .repo_type
                .unwrap_or(RepoTypeArg::Model)
                .as_str()
                .to_string(),
            revision: a
                .revision
                .clone()
                .unwrap_or_else(|| hfcache::DEFAULT_REVISION.to_string()),
        },
        None => ModelSpec::Dir(a.model_dir.clone().expect("clap requires MODEL_DIR")),
    })
}

/// The compression `--compress` asks for (`auto` samples the model's large files).
fn compression(a: &PackArgs, model: &Model) -> Result<Compress> {
    let workers = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let zstd = Compress::Zstd {
        level: a.level,
        workers,
    };
    Ok(match a.compress {
        CompressArg::None => Compress::None,
        CompressArg::Zstd => zstd,
        CompressArg::Auto => match write::estimate_saving(&model.entries)? {
            Some(saving) if saving < write::AUTO_MIN_SAVING => Compress::None,
            _ => zstd,
        },
    })
}

/// The model checks, rendered: every finding a warning, or with an error finding (unless
/// `--no-model-checks`) the findings as lines and the error that stops the pack.
fn gate(
    model: &Model,
    a: &PackArgs,
    out: &mut Output,
) -> Result<std::result::Result<Vec<manifest::Warning>, airlock::error::Error>> {
    let (findings, unchecked) = model.check()?;
    for p in &unchecked {
        out.warnings.push(format!(
            "model check: {p}: not checked, its path is too long for the format checks"
        ));
    }
    Ok(match pack::source::gate(&findings, a.no_model_checks) {
        Ok(w) => {
            for f in &findings {
                out.warnings
                    .push(format!("{}: {} ({})", f.path, f.problem, f.fix));
            }
            Ok(w)
        }
        // The findings are the detail behind the error: keep them.
        Err(e) => {
            out.set("findings", &findings);
            for f in &findings {
                out.line(super::check::finding_line(f));
            }
            Err(e)
        }
    })
}

/// Packs in this order: options, then every check that needs no key (output path, key and
/// password files, the source and its model checks), then the key (the scrypt work and the
/// password prompt), then the bundle. A typo is reported at once, not after a password.
pub fn run(a: PackArgs, ui: &Ui) -> Result<Output> {
    let shape = shape(&a)?;
    let spec = model_spec(&a)?;
    let created = created_unix()?;
    check_output(&a.output)?;
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let mut out = Output::default();
    let model = Model::open(&spec)?;
    out.warnings.extend(model.notes.iter().cloned());
    let name = a.name.clone().unwrap_or_else(|| model.default_name());
    manifest::check_name(&name).map_err(|why| Error::Usage(format!("--name {why}")))?;
    let warnings = match gate(&model, &a, &mut out)? {
        Ok(w) => w,
        Err(e) => {
            out.error = Some(e);
            return Ok(out);
        }
    };
    let compress = compression(&a, &model)?;
    if let Some(path) = &a.base {
        pack::base::precheck(path, &name, a.bundle_version)?;
    }
    let trust_update_files = a
        .trust_update
        .iter()
        .map(|p| airlock::trust::update::read_root(p).map(|(_, bytes)| (p.clone(), bytes)))
        .collect::<Result<Vec<_>>>()?;
    let key = secret::unlock(key_file, ui)?;
    let trust_update = airlock::trust::update::check_for_pack(
        &trust_update_files,
        &key.public_key(),
        airlock::trust::Clock::system(),
    )?;
    let base = match &a.base {
        Some(path) => {
            let b = BaseSource::open(path, &key.public_key())?.with_snapshot_of(&model);
            out.warnings.extend(b.notes.iter().cloned());
            out.warnings.extend(b.no_content_note());
            Some(b)
        }
        None => None,
    };
    let packed = pack::pack(
        &model,
        PackOptions {
            out: a.output.clone(),
            key: &key,
            name,
            version: a.bundle_version,
            compress,
            volume_size: shape.volume_size,
            chunk_size: shape.chunk_size,
            created_unix: created,
            warnings,
            parity: shape.parity,
            base,
            trust_update,
        },
        ui,
    )?;
    out.warnings.extend(packed.notes.iter().cloned());
    render(
        &mut out,
        &a,
        &model,
        &packed,
        &key.public_key(),
        shape.parity,
    );
    Ok(out)
}

/// What a finished pack reports.
fn render(
    out: &mut Output,
    a: &PackArgs,
    model: &Model,
    packed: &pack::Packed,
    signer: &airlock::keys::PublicKey,
    parity: Option<Ask>,
) {
    let m = &packed.manifest;
    out.set("bundle", &a.output);
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("manifest_sha256", &packed.manifest_sha256);
    out.set("signer", signer.key_id_hex());
    out.set("files", m.totals.files);
    out.set("file_bytes", m.totals.file_bytes);
    out.set(
        "volumes",
        m.volumes
            .iter()
            .map(|v| serde_json::json!({"name": v.name, "size": v.size}))
            .collect::<Vec<_>>(),
    );
    out.set("volume_bytes", m.totals.volume_bytes);
    out.set("compression", &m.compression.algorithm);
    if let (Some(hf), Some(src)) = (&model.hf, &m.source) {
        out.set("hf_cache", &hf.cache);
        out.set("snapshot", &hf.snapshot.dir);
        out.set(
            "source",
            serde_json::json!({
                "repo_id": src.repo_id,
                "repo_type": src.repo_type,
                "revision": src.revision,
                "commit": src.commit,
            }),
        );
        out.set("listing_checked", hf.snapshot.listed);
        out.line(format!(
            "OK   every file of {} {} at commit {} matched its blob name (the hash the hub published)",
            src.repo_type, src.repo_id, src.commit
        ));
    }
    if let Some(t) = &m.trust_update {
        let versions: Vec<u64> = t.roots.iter().map(|r| r.version).collect();
        out.set("trust_update", &versions);
        out.line(format!(
            "OK   carries trust root version(s) {} for the targets to adopt on unpack",
            versions
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let (Some(base), Some(c)) = (&m.base, &packed.delta) {
        out.set(
            "base",
            serde_json::json!({"name": base.name, "version": base.version, "manifest_sha256": base.manifest_sha256}),
        );
        out.set("delta", c);
        out.line(format!(
            "OK   delta from version {}: {} file(s) carried ({}), {} taken from the base ({}), {} patched ({} rebuilt from {} of patches)",
            base.version,
            c.carried_files,
            human(c.carried_bytes),
            c.copied_files,
            human(c.copied_bytes),
            c.patched_files,
            human(c.patched_bytes),
            human(c.patch_bytes)
        ));
    }
    out.line(format!(
        "OK   packed {} version {} into {}: {} files ({}) in {} volume(s) ({}), signed by {}",
        m.name,
        m.version,
        a.output.display(),
        m.totals.files,
        human(m.totals.file_bytes),
        m.volumes.len(),
        human(m.totals.volume_bytes),
        signer.key_id_hex()
    ));
    if let (Some(p), Some(advice)) = (&m.parity, pack::parity::advice(m, parity)) {
        let bytes: u64 = p.volumes.iter().map(|v| v.size).sum();
        out.set(
            "parity",
            serde_json::json!({
                "data_units": p.data_units,
                "recovery_units": p.recovery_units,
                "stripes": p.stripes,
                "volumes": p.volumes.len(),
                "bytes": bytes,
                "percent": advice.percent,
                "unit_size": advice.unit_size,
                "survives": advice.survives,
            }),
        );
        out.line(format!(
            "OK   parity: {} volume(s) ({}, {:.1}% of the data) in units of {}; it rebuilds {}",
            p.volumes.len(),
            human(bytes),
            advice.percent,
            human(advice.unit_size),
            survives_text(&advice.survives)
        ));
        if let Some(Ask::Percent(asked)) = parity
            && (advice.percent - asked).abs() > 1.0
        {
            out.warnings.push(format!(
                "parity is {:.1}% of the data, not the {asked}% asked: parity comes in units of {} and the bundle has only {} of them (a small bundle)",
                advice.percent,
                human(advice.unit_size),
                m.data_units()
            ));
        }
        if let Some(one) = advice.one_volume_percent {
            out.warnings.push(format!(
                "{} cannot rebuild a lost data volume: the largest of the {} is {:.1}% of the data; --parity 1vol ({one:.1}% of parity) would{}",
                parity.map_or_else(|| "this parity".to_string(), |a| format!("--parity {a}")),
                m.volumes.len(),
                largest_volume_percent(m),
                match advice.volume_size_for_one {
                    Some(s) => format!(", or --volume-size {} with the same share", size_arg(s)),
                    None => String::new(),
                }
            ));
        }
    }
}

/// What parity rebuilds, in operator terms: "any 1 whole data volume lost, or up to 24.0 MiB of
/// contiguous damage".
fn survives_text(s: &airlock::parity::Survives) -> String {
    let mut parts = Vec::new();
    if s.volumes >= 1 {
        parts.push(format!(
            "any {} whole data volume{} lost",
            s.volumes,
            if s.volumes == 1 { "" } else { "s" }
        ));
    }
    if s.per_volume_bytes > 0 {
        parts.push(format!(
            "up to {} of contiguous damage in every volume at once",
            human(s.per_volume_bytes)
        ));
    }
    parts.push(format!(
        "up to {} of contiguous damage in one place",
        human(s.contiguous_bytes)
    ));
    parts.join(", or ")
}

/// The largest data volume's share of the data, in percent.
fn largest_volume_percent(m: &manifest::Manifest) -> f64 {
    let largest = m.volumes.iter().map(|v| v.size).max().unwrap_or(0);
    largest as f64 * 100.0 / m.totals.volume_bytes.max(1) as f64
}

/// A size as `--volume-size` takes it: whole MiB as `NM`, whole KiB as `NK`, else bytes.
fn size_arg(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{}M", bytes >> 20)
    } else if bytes % 1024 == 0 {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}
