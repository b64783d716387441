//! The half of `pack` that needs no key (issue 34 item 3): the output's place, where the model
//! is, the model with the repositories it needs, a delta's base, the bundle's name, the model
//! checks, the publisher's OMS signature, the compression and the trust roots to carry, each
//! checked before the key is unlocked, so a typo is reported at once and not after the
//! password and its seconds of scrypt. [`prepare`] returns what it found as a [`Prepared`] the
//! command renders; [`Ready`] is what [`super::pack`] then takes with the key.

use std::path::{Path, PathBuf};

use super::base::BaseSource;
use super::source::{self, HfOrigin, RepoAsk};
use super::{Compress, Model, ModelSpec, write};
use crate::error::{Error, Result};
use crate::hfcache;
use crate::inspect::Finding;
use crate::keys::PublicKey;
use crate::manifest::{self, Manifest, Warning};
use crate::oms::{self, TrustMaterial};
use crate::scan::ScanEntry;
use crate::trust::update::RootFile;

/// The bundle directory must not exist yet, and the directory it goes in must.
pub fn check_output(output: &Path) -> Result<()> {
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

/// The repositories `--hf-repo` names (repeatable; `ORG/NAME@REV` names a revision, `revision`
/// is `--revision`, for one repository only; `TYPE:ORG/NAME` names the repository type, the
/// prefix `unpack --repo` takes), each of `repo_type` (`--repo-type`) when it has no prefix.
pub fn repo_asks(
    given: &[String],
    revision: Option<&str>,
    repo_type: &str,
) -> Result<Vec<RepoAsk>> {
    let mut asks = Vec::with_capacity(given.len());
    for one in given {
        let (name, at) = match one.split_once('@') {
            Some((id, rev)) => (id, Some(rev)),
            None => (one.as_str(), None),
        };
        let (typ, repo_id) = match name.split_once(':') {
            Some((typ, id)) => {
                hfcache::check_repo_type(typ).map_err(|why| {
                    Error::Usage(format!(
                        "--hf-repo {one}: {why}, the prefix of TYPE:ORG/NAME"
                    ))
                })?;
                (typ, id)
            }
            None => (repo_type, name),
        };
        let revision = match (at, revision) {
            (Some(_), Some(_)) => {
                return Err(Error::Usage(format!(
                    "--hf-repo {one} names a revision and --revision names another: give one"
                )));
            }
            (Some(""), None) => {
                return Err(Error::Usage(format!(
                    "--hf-repo {one}: nothing after @ (ORG/NAME@REV names a branch, tag or commit)"
                )));
            }
            (Some(rev), None) => rev.to_string(),
            (None, Some(rev)) if given.len() == 1 => rev.to_string(),
            (None, Some(_)) => {
                return Err(Error::Usage(
                    "--revision applies to one --hf-repo: with several, give each its revision as ORG/NAME@REV".into(),
                ));
            }
            (None, None) => hfcache::DEFAULT_REVISION.to_string(),
        };
        hfcache::check_repo_id(repo_id)
            .map_err(|why| Error::Usage(format!("--hf-repo {one}: {why}")))?;
        asks.push(RepoAsk {
            repo_id: repo_id.to_string(),
            repo_type: typ.to_string(),
            revision,
        });
    }
    Ok(asks)
}

impl ModelSpec {
    /// The model a pack reads: the directory `dir` when `asks` is empty, else the one snapshot
    /// or the several of the cache `cache`.
    pub fn of(dir: Option<PathBuf>, cache: Option<PathBuf>, mut asks: Vec<RepoAsk>) -> ModelSpec {
        match asks.len() {
            0 => ModelSpec::Dir(dir.expect("a model directory when no repository is named")),
            _ if dir.is_some() => ModelSpec::HfSnapshots {
                cache,
                repos: asks,
                dir,
            },
            1 => {
                let ask = asks.pop().expect("one");
                ModelSpec::HfSnapshot {
                    cache,
                    repo_id: ask.repo_id,
                    repo_type: ask.repo_type,
                    revision: ask.revision,
                }
            }
            _ => ModelSpec::HfSnapshots {
                cache,
                repos: asks,
                dir: None,
            },
        }
    }
}

/// How to compress (`--compress`, `--level`, `--threads`).
#[derive(Clone, Copy, Debug)]
pub enum CompressAsk {
    /// Store the stream.
    None,
    /// zstd at `level` on `workers` threads.
    Zstd {
        /// The level.
        level: i32,
        /// Worker threads.
        workers: u32,
    },
    /// zstd, unless a sample of the model's large files says it would save too little.
    Auto {
        /// The level.
        level: i32,
        /// Worker threads.
        workers: u32,
    },
}

/// The OMS material the flags name that needs no secret key: the signing certificate and its
/// chain (`--oms-signing-cert`, `--oms-signing-chain`) and the publisher's trust
/// (`--oms-trust` or `--oms-cert-chain`) for the signature `--oms-signature` names.
#[derive(Clone, Debug, Default)]
pub struct OmsAsk {
    /// `--oms-signing-cert`.
    pub signing_cert: Option<PathBuf>,
    /// `--oms-signing-chain`.
    pub signing_chain: Vec<PathBuf>,
    /// `--oms-trust`.
    pub trust: Option<PathBuf>,
    /// `--oms-cert-chain`.
    pub cert_chain: Vec<PathBuf>,
    /// `--oms-signature`.
    pub signature: Option<String>,
}

/// What `pack` asks for, besides the key.
#[derive(Clone, Debug)]
pub struct Request {
    /// Where the model is.
    pub model: ModelSpec,
    /// `--with-dependencies`: add every repository the models need from the same cache.
    pub with_dependencies: bool,
    /// `--base`: a delta over this bundle or installed directory.
    pub base: Option<PathBuf>,
    /// `--name`.
    pub name: Option<String>,
    /// `--version`.
    pub version: u64,
    /// `--no-model-checks`: error findings are recorded as warnings.
    pub no_model_checks: bool,
    /// The value scan runs in the pack's read pass (not `--no-value-scan`).
    pub value_scan: bool,
    /// The compression.
    pub compress: CompressAsk,
    /// OMS.
    pub oms: OmsAsk,
    /// `--trust-update`: the TUF root files to carry.
    pub trust_update: Vec<PathBuf>,
}

/// Where the bundle's name came from when it is not the model's own: a delta's base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameFromBase {
    /// The base's version.
    pub version: u64,
    /// The model's own name.
    pub own: String,
    /// Whether the model's own name is its repository id (else its directory's name).
    pub repository: bool,
}

/// What [`prepare`] found: the model and everything checked about it before the key.
pub struct Prepared {
    /// The model, with the repositories `--with-dependencies` added.
    pub model: Model,
    /// The repositories added (`id@revision`), in the order they were.
    pub dependencies_added: Vec<String>,
    /// The base's manifest (`--base`), read but not yet verified.
    pub base: Option<Manifest>,
    /// The bundle's name.
    pub name: String,
    /// Set when the name is the base's, not the model's own.
    pub name_from_base: Option<NameFromBase>,
    /// Files the model checks did not check (their path is too long).
    pub unchecked: Vec<String>,
    /// What the model checks found.
    pub findings: Vec<Finding>,
    /// What the pack takes once the key is unlocked, or the error the model checks' findings
    /// stop it with (they are the detail behind it).
    pub ready: std::result::Result<Ready, Error>,
}

/// What the part after the key takes from [`prepare`].
pub struct Ready {
    /// The model checks' findings to record.
    pub warnings: Vec<Warning>,
    /// The publisher's OMS signature, verified and compared with the model.
    pub publisher: Option<oms::pack::Publisher>,
    /// The signing certificate and its chain (DER, signing certificate first) for `--oms-key`.
    pub oms_chain: Vec<Vec<u8>>,
    /// The compression chosen.
    pub compress: Compress,
    /// The trust root files to carry, read (checked against the key once it is unlocked).
    pub trust_update: Vec<(PathBuf, Vec<u8>)>,
    /// The weight files the value scan will read in the pack's one read (count, bytes): what
    /// the password prompt announces. `None` without the value scan.
    pub value_scan: Option<(u64, u64)>,
    /// `--base`, checked against the key by [`Ready::with_key`].
    pub base: Option<PathBuf>,
}

/// The OMS material of `ask`: the signing chain and the publisher's trust.
fn oms_material(ask: &OmsAsk) -> Result<(Vec<Vec<u8>>, Option<TrustMaterial>)> {
    let chain = match &ask.signing_cert {
        Some(cert) => {
            let mut chain = oms::load_certificates(std::slice::from_ref(cert))?;
            chain.truncate(1);
            chain.extend(oms::load_certificates(&ask.signing_chain)?);
            chain.into_iter().map(|c| c.der).collect()
        }
        None => Vec::new(),
    };
    let trust = TrustMaterial::load(ask.trust.as_deref(), &ask.cert_chain)?;
    if ask.signature.is_some() && trust.is_none() {
        return Err(Error::Usage(
            "--oms-signature names the publisher's OMS signature for --oms-trust or --oms-cert-chain; give one of them".into(),
        ));
    }
    Ok((chain, trust))
}

/// Everything of a pack that needs no key, in this order: the OMS material, the model (with
/// the repositories it needs), the base, the name, the model checks; then, unless the model
/// checks refused, the publisher's OMS signature, the compression and the trust roots to carry.
/// The output's place ([`check_output`]) and the key files are checked before, by the caller.
pub fn prepare(req: Request) -> Result<Prepared> {
    let (oms_chain, oms_trust) = oms_material(&req.oms)?;
    let (mut model, dependencies_added) = open_model(req.with_dependencies, req.model.clone())?;
    if model.dir.is_some() && req.base.is_some() {
        return Err(Error::Usage(
            "--base with a model directory and --hf-repo: a delta of a directory and repositories does not exist (FORMAT.md section 14.4): pack a full bundle".into(),
        ));
    }
    let base = req.base.as_deref().map(super::base::precheck).transpose()?;
    if let Some(bm) = &base
        && bm.repos.is_empty() != model.repos.is_empty()
    {
        // Each repository of a delta of several is a delta of the same repository of the
        // base (FORMAT.md section 14.4): a base of one model has no repositories to match.
        let (this, that) = if model.repos.is_empty() {
            ("one model", "several repositories")
        } else {
            ("several repositories", "one model")
        };
        return Err(Error::Usage(format!(
            "--base {}: that bundle carries {that} and this one {this}; a delta keeps the shape of its base (FORMAT.md section 14.4): pack a full bundle",
            req.base.as_deref().unwrap_or(Path::new("")).display()
        )));
    }
    if let Some(bm) = &base
        && !model.repos.is_empty()
        && !model.repos.iter().any(|r| {
            let folder = hfcache::repo_folder_name(&r.repo_type, &r.repo_id);
            bm.repos.iter().any(|b| b.path == folder)
        })
    {
        return Err(Error::Usage(format!(
            "--base {}: that bundle has none of these repositories, so there is nothing to make a delta of (FORMAT.md section 14.4): pack a full bundle",
            req.base.as_deref().unwrap_or(Path::new("")).display()
        )));
    }
    let (name, name_from_base) = bundle_name(req.name.as_deref(), &model, base.as_ref());
    manifest::check_name(&name).map_err(|why| Error::Usage(format!("--name {why}")))?;
    if let Some(bm) = &base {
        super::base::check_same_model(bm, &name, req.version)?;
    }
    // The checks the scan left to the read pass (small files past its kept bytes) run now
    // when the ones it ran refuse the model: the refusal counts and names every error, as it
    // would had the scan checked every file.
    if model.check_errors() {
        model.check_left();
    }
    let (findings, unchecked) = model.check()?;
    let ready = match source::gate(&findings, req.no_model_checks) {
        Ok(warnings) => Ok(ready(
            &req,
            warnings,
            oms_chain,
            oms_trust.as_ref(),
            &model,
        )?),
        Err(e) => Err(e),
    };
    Ok(Prepared {
        model,
        dependencies_added,
        base,
        name,
        name_from_base,
        unchecked,
        findings,
        ready,
    })
}

/// The rest of [`prepare`] once the model checks let the pack go on: the publisher's OMS
/// signature, the compression, the trust roots to carry, what the value scan will read.
fn ready(
    req: &Request,
    warnings: Vec<Warning>,
    oms_chain: Vec<Vec<u8>>,
    oms_trust: Option<&TrustMaterial>,
    model: &Model,
) -> Result<Ready> {
    let publisher = match oms_trust {
        Some(t) => {
            let rel = req
                .oms
                .signature
                .as_deref()
                .unwrap_or(manifest::OMS_SIGNATURE_NAME);
            Some(oms::pack::check_publisher(
                &model.entries,
                &model.root,
                rel,
                t,
            )?)
        }
        None => None,
    };
    let compress = compression(req.compress, model)?;
    let trust_update = req
        .trust_update
        .iter()
        .map(|p| crate::trust::update::read_root(p).map(|(_, bytes)| (p.clone(), bytes)))
        .collect::<Result<Vec<_>>>()?;
    let value_scan = req.value_scan.then(|| value_scan_ahead(model));
    Ok(Ready {
        warnings,
        publisher,
        oms_chain,
        compress,
        trust_update,
        value_scan,
        base: req.base.clone(),
    })
}

/// What the half after the key checks with the signer's public key before anything is
/// written: the trust roots to carry, and a delta's base, verified against the signer.
pub struct Keyed {
    /// The trust roots to carry, each checked: signed by its own root keys, the versions
    /// following one another, the last naming the signer.
    pub trust_update: Vec<RootFile>,
    /// A delta's base (`--base`), opened and verified against the signer, with the snapshot of
    /// the model that holds its content where it has none of its own.
    pub base: Option<BaseSource>,
    /// What the operator should know about the base (signed by another key, no content).
    pub notes: Vec<String>,
}

impl Ready {
    /// The checks that need the signer's public key, in this order: the trust roots to carry
    /// ([`crate::trust::update::check_for_pack`]), then the base ([`BaseSource::open`]).
    pub fn with_key(&self, model: &Model, signer: &PublicKey) -> Result<Keyed> {
        let trust_update = crate::trust::update::check_for_pack(
            &self.trust_update,
            signer,
            crate::trust::Clock::system(),
        )?;
        let mut notes = Vec::new();
        let base = match &self.base {
            Some(path) => {
                let b = BaseSource::open(path, signer)?.with_snapshot_of(model);
                notes.extend(b.notes.iter().cloned());
                notes.extend(b.no_content_note());
                Some(b)
            }
            None => None,
        };
        Ok(Keyed {
            trust_update,
            base,
            notes,
        })
    }
}

/// The receipt airlock left in the cache when it installed `commit` of the snapshot `hf`
/// (issue 33 item 9): that commit's blob names were written by airlock's install from its
/// bundle's signed manifest, not by a download. `None` when airlock did not install it (or the
/// trace cannot be read: the names are then the hub's, as far as airlock knows).
pub fn installed_receipt(hf: &HfOrigin, commit: &str) -> Option<PathBuf> {
    hfcache::receipts(&hf.snapshot.repo_folder)
        .unwrap_or_default()
        .into_iter()
        .find(|(c, _)| c == commit)
        .map(|(_, dir)| dir)
}

/// Opens the model `spec` names; with `with_dependencies`, adds to it every repository its
/// models need that it lacks, from the same cache (never the network), until nothing more is
/// needed. Returns the model and the repositories added (id@revision).
fn open_model(with_dependencies: bool, spec: ModelSpec) -> Result<(Model, Vec<String>)> {
    let mut model = Model::open(&spec)?;
    let mut added = Vec::new();
    if !with_dependencies {
        return Ok((model, added));
    }
    let (cache, mut asks, dir) = match spec {
        ModelSpec::HfSnapshot {
            cache,
            repo_id,
            repo_type,
            revision,
        } => (
            cache,
            vec![RepoAsk {
                repo_id,
                repo_type,
                revision,
            }],
            None,
        ),
        ModelSpec::HfSnapshots { cache, repos, dir } => (cache, repos, dir),
        ModelSpec::Dir(_) => return Ok((model, added)),
    };
    // Each round adds what the models packed so far need; a repository is added once, so the
    // rounds end.
    loop {
        let needed = model.needed_repos()?;
        if needed.is_empty() {
            return Ok((model, added));
        }
        for (repo_id, revision) in needed {
            let cache_dir = model
                .hf
                .as_ref()
                .or(model.repos.first())
                .map(|h| h.cache.clone())
                .unwrap_or_default();
            if let Err(e) = hfcache::check_repo_id(&repo_id) {
                return Err(Error::Usage(format!(
                    "--with-dependencies: a packed model needs {:?}, which is not a repository id ({e}); pack without --with-dependencies, or fix the model's reference",
                    crate::display::escape(&repo_id)
                )));
            }
            // Only what this cache holds, at a revision that resolves with no network. A probe:
            // it keeps no bytes (and leaves the small files' checks, which the pack's own walk
            // of the repository runs).
            let probe = crate::scan::PrefetchBudget::new(0);
            if let Err(e) = hfcache::open_snapshot(&cache_dir, "model", &repo_id, &revision, &probe)
            {
                return Err(Error::NotCached {
                    path: cache_dir.join(hfcache::repo_folder_name("model", &repo_id)),
                    reason: format!(
                        "{repo_id}@{revision} is needed by a packed model (--with-dependencies) and cannot be taken from this cache, which airlock reads without network: {e}"
                    ),
                });
            }
            added.push(format!("{repo_id}@{revision}"));
            asks.push(RepoAsk {
                repo_id,
                repo_type: "model".into(),
                revision,
            });
        }
        model = Model::open(&ModelSpec::HfSnapshots {
            cache: cache.clone(),
            repos: asks.clone(),
            dir: dir.clone(),
        })?;
    }
}

/// The bundle's name: `name` (`--name`), else a delta's base's name (a delta keeps the name of
/// the model it updates, and the directory of a new version is often named differently, such
/// as `Llama-3-8B-v4`), else the model's own (its directory or repository).
fn bundle_name(
    name: Option<&str>,
    model: &Model,
    base: Option<&Manifest>,
) -> (String, Option<NameFromBase>) {
    if let Some(name) = name {
        return (name.to_string(), None);
    }
    let own = model.default_name();
    match base {
        Some(bm) if bm.name != own => (
            bm.name.clone(),
            Some(NameFromBase {
                version: bm.version,
                own,
                repository: model.hf.is_some(),
            }),
        ),
        _ => (own, None),
    }
}

/// The compression `ask` names (`Auto` samples the model's large files).
fn compression(ask: CompressAsk, model: &Model) -> Result<Compress> {
    Ok(match ask {
        CompressAsk::None => Compress::None,
        CompressAsk::Zstd { level, workers } => Compress::Zstd { level, workers },
        CompressAsk::Auto { level, workers } => {
            match write::estimate_saving(&model.entries, &model.root)? {
                Some(saving) if saving < write::AUTO_MIN_SAVING => Compress::None,
                _ => Compress::Zstd { level, workers },
            }
        }
    })
}

/// The weight files the value scan reads (count, bytes): it reads every value, so it runs in
/// the pack's one read of the model, after the key is unlocked; a second read before the
/// password prompt would double the time of every pack (issue 33 item 11).
fn value_scan_ahead(model: &Model) -> (u64, u64) {
    model
        .entries
        .iter()
        .filter_map(|e| match e {
            ScanEntry::File {
                path,
                size,
                has_values,
                ..
            } if has_values.unwrap_or_else(|| {
                crate::inspect::format::by_name(path)
                    .is_some_and(crate::inspect::Format::has_values)
            }) =>
            {
                Some(*size)
            }
            _ => None,
        })
        .fold((0u64, 0u64), |(n, total), size| (n + 1, total + size))
}
