//! `--offline-ready`: everything the common loaders look for that is not there.
//!
//! A model can pass every format check and still fail to load on the far side of the air gap,
//! because a loader looks for a file the model never had, or for another repository. Each rule
//! here follows what the loader's own code reads (transformers 5, peft, sentence-transformers,
//! diffusers, llama.cpp's split naming; see docs/CLI.md, "Offline readiness"):
//!
//! - transformers `from_pretrained`: `config.json` beside the weights and weights beside a
//!   config that names an architecture; the tokenizer's files for its class
//!   (`tokenization_utils_base.py`: `tokenizer.json`, else the class's `vocab_files_names`,
//!   converted); a chat template for a generating model (`chat_template.jinja`,
//!   `chat_template.json`, `additional_chat_templates/`, or `chat_template` in
//!   `tokenizer_config.json`); the `auto_map` modules and, recursively, every module they import
//!   relatively (`dynamic_module_utils.get_relative_imports`: `import .x` and
//!   `from .x import`, each fetched as `x.py` from the same repository).
//! - peft: `adapter_config.json`'s `base_model_name_or_path` at its `revision`, and the adapter's
//!   weights.
//! - sentence-transformers: each module of `modules.json` and the files its `load` reads
//!   (`Pooling`: `PATH/config.json`; `Dense`: its config and weights; `Normalize`: nothing).
//! - diffusers: each component of `model_index.json` (`[library, class]`) and its subfolder's
//!   config (`scheduler_config.json` for a scheduler, `config.json` and weights for a model,
//!   tokenizer files for a tokenizer, `preprocessor_config.json` for a feature extractor or
//!   image processor).
//! - GGUF: every split `NAME-0000N-of-0000M.gguf` from 1 to M (llama.cpp's `llama_split_path`).
//!
//! Another repository the model needs counts as there when the cache it will load from holds it
//! at a revision that resolves offline (`refs/<revision>` naming a commit whose snapshot
//! exists, as huggingface_hub resolves it with no network). Where that cache is known
//! ([`Deps::Cache`]: `check --hf-cache C --hf-repo R --offline-ready`) a repository it lacks is
//! an error; otherwise ([`Deps::Elsewhere`]: a directory, or `pack`) the need is a warning that
//! names the repository to carry too.
//!
//! Errors are what certainly fails the loader; warnings what depends on the caller (which
//! loader it uses, what it passes, what is installed where it runs). Reads are bounded, no link
//! is followed out of the tree, and every name a file supplies is escaped before it is quoted.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::names::{self as hfnames};
use super::snapshot::{RefState, read_ref};
use crate::display::escape_bounded;
use crate::inspect::{Finding, Resolved, Tree, codes};

/// JSON configs and Python modules are kilobytes; a larger one is not read.
const MAX_READ: u64 = 4 * 1024 * 1024;
/// How many relatively imported modules are followed before stopping (a repository with more
/// is not a model).
const MAX_MODULES: usize = 256;
/// How long a name quoted in a message may be.
const QUOTE: usize = 200;

/// Where the repositories a model needs (a PEFT adapter's base, `auto_map` code from another
/// repository) are looked for.
#[derive(Clone, Copy, Debug)]
pub enum Deps<'a> {
    /// The Hugging Face cache the model loads from: a repository it lacks is an error. Every
    /// repository needed is recorded in the [`Needs`] too, so [`check_cached`] follows them.
    Cache(&'a Path, &'a Needs),
    /// Not known here (a directory, or a pack whose target cache is on the other side): each
    /// repository needed is a warning naming it.
    Elsewhere,
    /// A pack (as [`Deps::Elsewhere`]), which records every repository needed in the [`Needs`]
    /// and warns only of those the bundle does not carry.
    Pack(&'a Needs),
}

/// What a pack carries and what its models need ([`Deps::Pack`]).
#[derive(Debug, Default)]
pub struct Needs {
    /// The repository ids the bundle carries (of type model).
    pub carried: Vec<String>,
    /// Every repository needed, as named (id, revision): a PEFT adapter's base, another
    /// repository's `auto_map` code.
    pub found: std::cell::RefCell<Vec<(String, String)>>,
}

impl Needs {
    /// Records `repo_id` at `revision` as needed; whether the bundle carries it.
    fn need(&self, repo_id: &str, revision: &str) -> bool {
        let mut found = self.found.borrow_mut();
        let need = (repo_id.to_string(), revision.to_string());
        if !found.contains(&need) {
            found.push(need);
        }
        self.carried.iter().any(|c| c == repo_id)
    }
}

/// The offline-readiness findings of the model at `base` (relative to `root`, `/`-separated;
/// empty for `root` itself). Findings name files relative to `base`.
///
/// # Errors
///
/// An I/O error other than a missing file or a broken link.
pub fn check(root: &Path, base: &str, deps: Deps<'_>) -> io::Result<Vec<Finding>> {
    check_model(root, base, deps, None)
}

/// [`check`] of a model whose `.gguf` files (relative to it) are known, `gguf`: a pack has
/// just walked it, and its split-shard rule then walks no tree again (a dataset of a million
/// files).
///
/// # Errors
///
/// As [`check`].
pub fn check_listed(
    root: &Path,
    base: &str,
    deps: Deps<'_>,
    gguf: Vec<String>,
) -> io::Result<Vec<Finding>> {
    check_model(root, base, deps, Some(gguf))
}

fn check_model(
    root: &Path,
    base: &str,
    deps: Deps<'_>,
    gguf: Option<Vec<String>>,
) -> io::Result<Vec<Finding>> {
    let model = Model {
        tree: Tree::new(root)?,
        root: root.to_path_buf(),
        base: base.trim_matches('/').to_string(),
        deps,
        gguf,
    };
    let mut findings = Vec::new();
    model.check(&mut findings)?;
    findings.sort_by(|a, b| (&a.path, a.code, &a.problem).cmp(&(&b.path, b.code, &b.problem)));
    findings.dedup_by(|a, b| a.path == b.path && a.code == b.code && a.problem == b.problem);
    Ok(findings)
}

/// `check --hf-cache C --hf-repo R --offline-ready`: the repository's `main` (or `revision`)
/// as the loaders resolve it offline, then [`check`] of its snapshot with the cache as the
/// place of every other repository. Findings name files relative to the snapshot; a revision
/// that does not resolve is one error on `refs/<revision>`.
///
/// # Errors
///
/// As [`check`].
pub fn check_cached(
    cache: &Path,
    repo_type: &str,
    repo_id: &str,
    revision: &str,
) -> io::Result<Vec<Finding>> {
    let folder = hfnames::repo_folder_name(repo_type, repo_id);
    match resolve_offline(cache, &folder, revision) {
        Ok(commit) => {
            let needs = Needs::default();
            let mut out = check(
                cache,
                &format!("{folder}/snapshots/{commit}"),
                Deps::Cache(cache, &needs),
            )?;
            follow_needs(cache, repo_id, revision, needs, &mut out)?;
            Ok(out)
        }
        Err(why) => Ok(vec![Finding::error(
            codes::OFFLINE_REVISION_UNRESOLVED,
            &format!("refs/{}", escape_bounded(revision, QUOTE)),
            format!(
                "does not lead to a snapshot of {} offline: {why}, so from_pretrained(\"{}\") \
                 (revision {}) fails without network",
                quote(&format!("{repo_id}@{revision}")),
                escape_bounded(repo_id, QUOTE),
                quote(revision)
            ),
            "unpack the bundle into this cache again (or download the repository at that \
             revision), then check again",
        )]),
    }
}

/// How many needed repositories [`follow_needs`] checks before stopping.
const MAX_NEEDED: usize = 64;

/// The repositories a checked model needs, followed transitively as the loaders would load
/// them (a PEFT adapter's base, and that base's own `auto_map` code in a third repository, as
/// `pack --with-dependencies` adds them): each one that resolves offline in `cache` is checked
/// like the model itself, its findings added to `out` under its snapshot's path in the cache
/// (`models--ORG--NAME/snapshots/COMMIT/FILE`) and its problem saying which repository needs
/// it. One that does not resolve already has its `offline-repo-missing` error.
fn follow_needs(
    cache: &Path,
    repo_id: &str,
    revision: &str,
    needs: Needs,
    out: &mut Vec<Finding>,
) -> io::Result<()> {
    let mut seen = BTreeSet::from([(repo_id.to_string(), revision.to_string())]);
    let mut queue: Vec<((String, String), String)> = needs
        .found
        .into_inner()
        .into_iter()
        .map(|n| (n, repo_id.to_string()))
        .collect();
    queue.reverse();
    while let Some(((id, rev), by)) = queue.pop() {
        if !seen.insert((id.clone(), rev.clone())) || seen.len() > MAX_NEEDED {
            continue;
        }
        if hfnames::check_repo_id(&id).is_err() {
            continue;
        }
        let folder = hfnames::repo_folder_name("model", &id);
        let Ok(commit) = resolve_offline(cache, &folder, &rev) else {
            continue;
        };
        let at = format!("{folder}/snapshots/{commit}");
        let inner = Needs::default();
        for f in check(cache, &at, Deps::Cache(cache, &inner))? {
            out.push(Finding {
                path: format!("{at}/{}", f.path),
                problem: format!(
                    "{} (this is {} at revision {}, which {} needs)",
                    f.problem,
                    quote(&id),
                    quote(&rev),
                    quote(&by)
                ),
                ..f
            });
        }
        let mut more: Vec<_> = inner
            .found
            .into_inner()
            .into_iter()
            .map(|n| (n, id.clone()))
            .collect();
        more.reverse();
        // Depth-first keeps each chain's findings together; `seen` stops cycles.
        queue.extend(more);
    }
    Ok(())
}

/// Why a revision does not resolve offline ([`resolve_offline`]); its `Display` is the reason
/// a finding gives, the names in it bounded and escaped.
#[derive(Debug)]
enum Unresolved {
    /// The revision is not a safe path under `refs/`.
    NotARef { revision: String },
    /// The repository's folder is there, `refs/<revision>` is not.
    NoRef { folder: String, revision: String },
    /// The repository's folder is not there.
    NoFolder { folder: String },
    /// The ref file is not a commit id (the reason, from [`read_ref`]).
    BadRef { revision: String, why: String },
    /// Reading the ref file failed.
    Read(crate::error::Error),
    /// The commit has no snapshot folder.
    NoSnapshot { folder: String, commit: String },
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |revision: &str| escape_bounded(revision, QUOTE);
        match self {
            Self::NotARef { revision } => {
                write!(
                    f,
                    "the revision `{}` cannot name a ref file",
                    shown(revision)
                )
            }
            Self::NoRef { folder, revision } => {
                write!(f, "the cache has {folder} but no refs/{}", shown(revision))
            }
            Self::NoFolder { folder } => write!(f, "the cache has no {folder}"),
            Self::BadRef { revision, why } => write!(f, "refs/{} {why}", shown(revision)),
            Self::Read(e) => write!(f, "{e}"),
            Self::NoSnapshot { folder, commit } => {
                write!(f, "{folder} has no snapshots/{commit}/")
            }
        }
    }
}

/// The commit `revision` resolves to in `CACHE/folder` with no network, as huggingface_hub
/// does it offline: a 40-hex commit as it is, else `refs/<revision>` read unstripped; either
/// way its `snapshots/<commit>/` must exist. Why not otherwise.
fn resolve_offline(cache: &Path, folder: &str, revision: &str) -> Result<String, Unresolved> {
    let repo = cache.join(folder);
    let commit = if hfnames::is_commit(revision) {
        revision.to_string()
    } else {
        if hfnames::check_revision(revision).is_err() {
            return Err(Unresolved::NotARef {
                revision: revision.to_string(),
            });
        }
        match read_ref(&repo.join("refs").join(revision)) {
            Ok(RefState::Commit(c)) => c,
            Ok(RefState::Missing) => {
                return Err(if repo.is_dir() {
                    Unresolved::NoRef {
                        folder: folder.to_string(),
                        revision: revision.to_string(),
                    }
                } else {
                    Unresolved::NoFolder {
                        folder: folder.to_string(),
                    }
                });
            }
            Ok(RefState::Bad(why)) => {
                return Err(Unresolved::BadRef {
                    revision: revision.to_string(),
                    why,
                });
            }
            Err(e) => return Err(Unresolved::Read(e)),
        }
    };
    let snapshot = repo.join("snapshots").join(&commit);
    match std::fs::symlink_metadata(&snapshot) {
        Ok(m) if m.is_dir() => Ok(commit),
        _ => Err(Unresolved::NoSnapshot {
            folder: folder.to_string(),
            commit,
        }),
    }
}

struct Model<'a> {
    tree: Tree,
    root: PathBuf,
    base: String,
    deps: Deps<'a>,
    /// The model's `.gguf` files, relative to it, when the caller knows them (`None`: walked).
    gguf: Option<Vec<String>>,
}

/// A file of the model, by where it leads.
enum Found {
    File(PathBuf),
    Absent,
}

/// The weight files transformers' `from_pretrained` looks for, in its order.
const TRANSFORMERS_WEIGHTS: &[&str] = &[
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
];

/// The weight files a diffusers model component loads.
const DIFFUSERS_WEIGHTS: &[&str] = &[
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.safetensors.index.json",
    "diffusion_pytorch_model.bin",
    "diffusion_pytorch_model.bin.index.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
];

/// The files a tokenizer can be built from without `tokenizer.json`, by kind.
const SENTENCEPIECE_FILES: &[&str] =
    &["tokenizer.model", "spiece.model", "sentencepiece.bpe.model"];

/// What a tokenizer class needs besides `tokenizer.json`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TokenizerKind {
    /// Only `tokenizer.json` (`PreTrainedTokenizerFast`, `TokenizersBackend`, GPT-NeoX, ...).
    JsonOnly,
    /// Byte-level BPE: `vocab.json` and `merges.txt`.
    Bpe,
    /// WordPiece: `vocab.txt`.
    WordPiece,
    /// SentencePiece: a `.model` file, converted with the `sentencepiece` package.
    SentencePiece,
    /// A class this table does not know: any of the above.
    Unknown,
}

/// The tokenizer classes of the common families, by what they are built from.
fn tokenizer_kind(class: &str) -> TokenizerKind {
    let class = class.strip_suffix("Fast").unwrap_or(class);
    match class {
        "PreTrainedTokenizer"
        | "PreTrainedTokenizerBase"
        | "PreTrainedTokenizerFast"
        | "TokenizersBackend"
        | "GPTNeoXTokenizer"
        | "BloomTokenizer"
        | "FalconTokenizer" => TokenizerKind::JsonOnly,
        "GPT2Tokenizer"
        | "Qwen2Tokenizer"
        | "RobertaTokenizer"
        | "BartTokenizer"
        | "CLIPTokenizer"
        | "CodeGenTokenizer"
        | "LongformerTokenizer"
        | "BlenderbotTokenizer"
        | "MvpTokenizer"
        | "LEDTokenizer"
        | "WhisperTokenizer"
        | "OpenAIGPTTokenizer" => TokenizerKind::Bpe,
        "BertTokenizer"
        | "DistilBertTokenizer"
        | "ElectraTokenizer"
        | "MPNetTokenizer"
        | "SqueezeBertTokenizer"
        | "FunnelTokenizer"
        | "LxmertTokenizer"
        | "MobileBertTokenizer"
        | "RetriBertTokenizer"
        | "LayoutLMTokenizer" => TokenizerKind::WordPiece,
        "LlamaTokenizer"
        | "CodeLlamaTokenizer"
        | "T5Tokenizer"
        | "GemmaTokenizer"
        | "XLMRobertaTokenizer"
        | "AlbertTokenizer"
        | "CamembertTokenizer"
        | "MT5Tokenizer"
        | "MBartTokenizer"
        | "MBart50Tokenizer"
        | "PegasusTokenizer"
        | "BigBirdTokenizer"
        | "XLNetTokenizer"
        | "BarthezTokenizer"
        | "ReformerTokenizer"
        | "NllbTokenizer"
        | "UdopTokenizer"
        | "SeamlessM4TTokenizer"
        | "SiglipTokenizer" => TokenizerKind::SentencePiece,
        _ => TokenizerKind::Unknown,
    }
}

/// Whether a model of these `architectures` generates text (so a chat caller needs a template).
fn generates_text(config: &Value) -> bool {
    config
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter().filter_map(Value::as_str).any(|arch| {
                arch.ends_with("ForCausalLM")
                    || arch.ends_with("LMHeadModel")
                    || arch.ends_with("ForConditionalGeneration")
            })
        })
}

/// What a model takes in besides tokens, by its config: its processor's loader reads
/// `preprocessor_config.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Modality {
    Vision,
    Audio,
}

/// Architecture names (suffixes of `*For...`) whose inputs are images.
const VISION_HEADS: &[&str] = &[
    "ForImageClassification",
    "ForObjectDetection",
    "ForSemanticSegmentation",
    "ForInstanceSegmentation",
    "ForUniversalSegmentation",
    "ForImageSegmentation",
    "ForDepthEstimation",
    "ForImageTextToText",
    "ForVision2Seq",
    "ForZeroShotImageClassification",
    "ForZeroShotObjectDetection",
    "ForVideoClassification",
    "ForMaskGeneration",
    "ForMaskedImageModeling",
    "ForImageToImage",
    "ForKeypointDetection",
];

/// Architecture names whose inputs are sound.
const AUDIO_HEADS: &[&str] = &[
    "ForAudioClassification",
    "ForCTC",
    "ForSpeechSeq2Seq",
    "ForAudioFrameClassification",
    "ForXVector",
];

impl Modality {
    /// A vision model: a `vision_config`, an image geometry (`image_size` and `num_channels`,
    /// as ViT, ConvNeXT, Swin, DeiT and BEiT write), or a vision head. An audio model: an
    /// `audio_config`, mel bins (Whisper) or a convolutional feature encoder (`conv_dim`,
    /// wav2vec2, HuBERT, WavLM), or an audio head. A text model is neither.
    fn of(config: &Value) -> Option<Modality> {
        let has = |key: &str| config.get(key).is_some_and(|v| !v.is_null());
        let heads = |list: &[&str]| {
            config
                .get("architectures")
                .and_then(Value::as_array)
                .is_some_and(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .any(|arch| list.iter().any(|h| arch.ends_with(h)))
                })
        };
        if has("vision_config") || (has("image_size") && has("num_channels")) || heads(VISION_HEADS)
        {
            Some(Modality::Vision)
        } else if has("audio_config")
            || has("num_mel_bins")
            || has("conv_dim")
            || heads(AUDIO_HEADS)
        {
            Some(Modality::Audio)
        } else {
            None
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Modality::Vision => "a vision",
            Modality::Audio => "an audio",
        }
    }

    fn input(self) -> &'static str {
        match self {
            Modality::Vision => "images",
            Modality::Audio => "sound",
        }
    }

    fn loader(self) -> &'static str {
        match self {
            Modality::Vision => "transformers (AutoImageProcessor, AutoProcessor, pipelines)",
            Modality::Audio => "transformers (AutoFeatureExtractor, AutoProcessor, pipelines)",
        }
    }

    /// The keys of `processor_config.json` the loader takes the config from.
    fn nested_keys(self) -> &'static [&'static str] {
        match self {
            Modality::Vision => &["image_processor"],
            Modality::Audio => &["feature_extractor", "audio_processor"],
        }
    }
}

/// `dir/name` with `dir` possibly empty.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn quote(text: &str) -> String {
    format!("`{}`", escape_bounded(text, QUOTE))
}

/// The last component of a dotted Python path (`sentence_transformers.models.Pooling`).
fn last_segment(class_ref: &str) -> &str {
    class_ref.rsplit('.').next().unwrap_or(class_ref)
}

/// A relative path inside the model: no root, no `..`, no empty component.
fn inside(rel: &str) -> bool {
    rel.is_empty() || crate::inspect::is_plain_relative(rel)
}

impl Model<'_> {
    /// The path of `rel` (relative to the model) in the tree.
    fn full(&self, rel: &str) -> String {
        join(&self.base, rel)
    }

    fn find(&self, rel: &str) -> io::Result<Found> {
        if !inside(rel) || rel.is_empty() {
            return Ok(Found::Absent);
        }
        Ok(match self.tree.resolve(&self.full(rel))? {
            Resolved::File { target, .. } => Found::File(target),
            // A dangling or escaping link is reported by the format checks; for a loader it
            // is not there (offline) or not in the bundle.
            _ => Found::Absent,
        })
    }

    fn exists(&self, rel: &str) -> io::Result<bool> {
        Ok(matches!(self.find(rel)?, Found::File(_)))
    }

    fn any_exists(&self, dir: &str, names: &[&str]) -> io::Result<Option<String>> {
        for name in names {
            let rel = join(dir, name);
            if self.exists(&rel)? {
                return Ok(Some(rel));
            }
        }
        Ok(None)
    }

    /// Whether `rel` is a directory of the tree (not through a link that leaves it).
    fn is_dir(&self, rel: &str) -> io::Result<bool> {
        if !inside(rel) {
            return Ok(false);
        }
        if rel.is_empty() {
            return Ok(true);
        }
        Ok(
            matches!(self.tree.resolve(&self.full(rel))?, Resolved::NotAFile)
                && self.root.join(self.full(rel)).is_dir(),
        )
    }

    /// The bytes of `rel` (at most [`MAX_READ`]), `None` when it is not there or larger.
    fn read(&self, rel: &str) -> io::Result<Option<Vec<u8>>> {
        let Found::File(target) = self.find(rel)? else {
            return Ok(None);
        };
        match crate::fsio::read_capped(&target, MAX_READ, crate::fsio::Follow::Never) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) => {
                let e = io::Error::from(e);
                if e.kind() == io::ErrorKind::FileTooLarge {
                    Ok(None)
                } else {
                    Err(crate::inspect::with_path(&target, e))
                }
            }
        }
    }

    /// `rel` parsed as JSON: `None` when absent; a finding (and `None`) when it is not JSON.
    fn json(&self, rel: &str, loader: &str, out: &mut Vec<Finding>) -> io::Result<Option<Value>> {
        let Some(bytes) = self.read(rel)? else {
            return Ok(None);
        };
        match serde_json::from_slice(&bytes) {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                // config.json and tokenizer_config.json have their own format check.
                let name = rel.rsplit('/').next().unwrap_or(rel);
                if name != "config.json" && name != "tokenizer_config.json" {
                    out.push(Finding::error(
                        codes::OFFLINE_FILE_MISSING,
                        rel,
                        format!("is not valid JSON ({e}), so {loader} cannot read it"),
                        format!("download {} again, then pack again", quote(name)),
                    ));
                }
                Ok(None)
            }
        }
    }

    /// Names of the entries of the directory `rel` (not following a link out of the tree).
    fn list(&self, rel: &str) -> io::Result<Vec<String>> {
        if !self.is_dir(rel)? {
            return Ok(Vec::new());
        }
        let dir = self.root.join(self.full(rel));
        let mut names = Vec::new();
        let entries = match crate::fsio::list_dir(&dir, crate::fsio::Follow::Final) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(crate::inspect::with_path(&dir, e.into())),
        };
        for (name, _) in entries {
            if let Some(name) = name.to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn check(&self, out: &mut Vec<Finding>) -> io::Result<()> {
        let model_index = self.json("model_index.json", "diffusers", out)?;
        let modules = self.json("modules.json", "sentence-transformers", out)?;
        let adapter = self.json("adapter_config.json", "peft", out)?;
        if let Some(index) = &model_index {
            self.diffusers(index, out)?;
        }
        if let Some(modules) = &modules {
            self.sentence_transformers(modules, out)?;
        }
        if let Some(adapter) = &adapter {
            self.peft(adapter, out)?;
        }
        // The transformers model at the root: a diffusers pipeline has none there, a PEFT
        // adapter brings only its own weights.
        if model_index.is_none() && adapter.is_none() {
            self.transformers("", out)?;
        } else if adapter.is_some() {
            // An adapter repository often carries the tokenizer the caller loads with it.
            self.tokenizer("", None, false, out)?;
        }
        self.gguf_splits(out)?;
        Ok(())
    }

    /// A transformers model in `dir`: config and weights, tokenizer, chat template, remote code.
    fn transformers(&self, dir: &str, out: &mut Vec<Finding>) -> io::Result<()> {
        let config_rel = join(dir, "config.json");
        let config = self.json(&config_rel, "transformers", out)?;
        let weights = self.any_exists(dir, TRANSFORMERS_WEIGHTS)?;
        match (&config, &weights) {
            (None, Some(w)) if !self.exists(&config_rel)? => out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                w,
                format!(
                    "has no config.json beside it: transformers (AutoConfig, AutoModel*.from_pretrained) \
                     needs {} to build the model",
                    quote(&config_rel)
                ),
                "download config.json with the weights (it is in the repository), then pack again",
            )),
            (Some(c), None) if c.get("architectures").is_some() => out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                &config_rel,
                format!(
                    "names the architecture {} but no weights are beside it: transformers \
                     (AutoModel*.from_pretrained) looks for {} and finds none",
                    c.get("architectures")
                        .and_then(Value::as_array)
                        .and_then(|a| a.first())
                        .and_then(Value::as_str)
                        .map_or_else(|| "?".to_string(), quote),
                    TRANSFORMERS_WEIGHTS
                        .iter()
                        .map(|w| quote(&join(dir, w)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "download the weights too (model.safetensors, or every shard and its index), \
                 then pack again",
            )),
            _ => {}
        }
        if let Some(config) = &config {
            self.remote_code(&config_rel, config, out)?;
            self.processor(dir, &config_rel, config, out)?;
        }
        self.tokenizer(dir, config.as_ref(), true, out)?;
        Ok(())
    }

    /// The image processor or feature extractor of a vision or audio model in `dir`.
    /// transformers' `AutoImageProcessor` / `AutoFeatureExtractor` (and `AutoProcessor` and
    /// the pipelines, through them) read `processor_config.json`'s nested `image_processor`
    /// (`feature_extractor` or `audio_processor`) first, then `preprocessor_config.json`; with
    /// neither they raise `Can't load image processor` / `feature extractor`. A caller that
    /// feeds the model tensors it made itself needs neither: a warning.
    fn processor(
        &self,
        dir: &str,
        config_rel: &str,
        config: &Value,
        out: &mut Vec<Finding>,
    ) -> io::Result<()> {
        let Some(modality) = Modality::of(config) else {
            return Ok(());
        };
        if self.exists(&join(dir, "preprocessor_config.json"))? {
            return Ok(());
        }
        let processor_rel = join(dir, "processor_config.json");
        if let Some(processor) = self.json(&processor_rel, modality.loader(), out)?
            && modality
                .nested_keys()
                .iter()
                .any(|k| processor.get(k).is_some_and(Value::is_object))
        {
            return Ok(());
        }
        out.push(Finding::warning(
            codes::OFFLINE_PROCESSOR_MISSING,
            config_rel,
            format!(
                "describes {} model and no {} is beside it (nor a {} with {}): {} fails for a \
                 caller that feeds it {}",
                modality.kind(),
                quote(&join(dir, "preprocessor_config.json")),
                quote(&processor_rel),
                modality
                    .nested_keys()
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                modality.loader(),
                modality.input(),
            ),
            "carry preprocessor_config.json from the model's repository (download it with the \
             weights), or have the caller build its own processor",
        ));
        Ok(())
    }

    /// The tokenizer in `dir`: its class's files, its own remote code, and a chat template
    /// where the model generates text.
    /// `auto`: loaded with AutoTokenizer, which in transformers 5 reads `config.json` first
    /// (`AutoConfig.from_pretrained`, then `PreTrainedConfig.from_pretrained`) even when
    /// `tokenizer_config.json` names the class; a diffusers pipeline or a PEFT adapter's caller
    /// loads the class itself.
    fn tokenizer(
        &self,
        dir: &str,
        config: Option<&Value>,
        auto: bool,
        out: &mut Vec<Finding>,
    ) -> io::Result<()> {
        let tc_rel = join(dir, "tokenizer_config.json");
        let tc = self.json(&tc_rel, "transformers (AutoTokenizer)", out)?;
        let json_rel = join(dir, "tokenizer.json");
        let has_json = self.exists(&json_rel)?;
        let Some(tc) = tc else {
            // No tokenizer config: a tokenizer.json alone is read by PreTrainedTokenizerFast;
            // nothing here says a tokenizer is expected at all.
            return Ok(());
        };
        if let Some(Value::Object(m)) = tc.get("auto_map")
            && m.contains_key("AutoTokenizer")
        {
            // Custom tokenizer code: the config check finds its module; its files are its own.
            self.remote_code(&tc_rel, &tc, out)?;
            return Ok(());
        }
        let config_rel = join(dir, "config.json");
        if auto && !self.exists(&config_rel)? {
            out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                &tc_rel,
                format!(
                    "has no {} beside it: transformers' AutoTokenizer.from_pretrained reads the \
                     model's config first (AutoConfig) to choose the tokenizer, and fails without it",
                    quote(&config_rel)
                ),
                "download config.json with the tokenizer (it is in the repository), then pack again",
            ));
        }
        let class = tc
            .get("tokenizer_class")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = tokenizer_kind(class);
        let shown_class = if class.is_empty() {
            "the tokenizer".to_string()
        } else {
            quote(class)
        };
        if !has_json && kind != TokenizerKind::JsonOnly {
            let spm = self.any_exists(dir, SENTENCEPIECE_FILES)?;
            let bpe =
                self.exists(&join(dir, "vocab.json"))? && self.exists(&join(dir, "merges.txt"))?;
            let wordpiece = self.exists(&join(dir, "vocab.txt"))?;
            let other = self.any_exists(dir, &["tekken.json", "tiktoken.model"])?;
            let enough = match kind {
                TokenizerKind::Bpe => bpe,
                TokenizerKind::WordPiece => wordpiece,
                TokenizerKind::SentencePiece => spm.is_some(),
                _ => spm.is_some() || bpe || wordpiece || other.is_some(),
            };
            if !enough {
                let wanted = match kind {
                    TokenizerKind::Bpe => "vocab.json and merges.txt",
                    TokenizerKind::WordPiece => "vocab.txt",
                    TokenizerKind::SentencePiece => "tokenizer.model (SentencePiece)",
                    _ => "tokenizer.model, vocab.json and merges.txt, or vocab.txt",
                };
                out.push(Finding::error(
                    codes::OFFLINE_TOKENIZER_FILES_MISSING,
                    &tc_rel,
                    format!(
                        "configures {shown_class}, but neither {} nor {wanted} is beside it: \
                         transformers (AutoTokenizer.from_pretrained) has nothing to build it from",
                        quote(&json_rel)
                    ),
                    "download tokenizer.json (or the tokenizer's vocabulary files) with the \
                     model, then pack again",
                ));
            } else if let Some(spm) = spm.filter(|_| !bpe && !wordpiece && other.is_none()) {
                out.push(Finding::warning(
                    codes::OFFLINE_TOKENIZER_NEEDS_CONVERSION,
                    &tc_rel,
                    format!(
                        "configures {shown_class} with no {}: transformers (AutoTokenizer) \
                         converts {} and needs the sentencepiece and protobuf packages \
                         installed where it loads",
                        quote(&json_rel),
                        quote(&spm)
                    ),
                    "carry tokenizer.json too (save the tokenizer once with \
                     save_pretrained where sentencepiece is installed), or install \
                     sentencepiece and protobuf on the target",
                ));
            }
        } else if !has_json {
            out.push(Finding::error(
                codes::OFFLINE_TOKENIZER_FILES_MISSING,
                &tc_rel,
                format!(
                    "configures {shown_class}, which is built from {} alone, and it is not \
                     there: transformers (AutoTokenizer.from_pretrained) fails",
                    quote(&json_rel)
                ),
                "download tokenizer.json with the model, then pack again",
            ));
        }
        if config.is_some_and(generates_text) && !self.has_chat_template(dir, &tc)? {
            out.push(Finding::warning(
                codes::OFFLINE_CHAT_TEMPLATE_MISSING,
                &tc_rel,
                format!(
                    "has no chat template (no chat_template in it, no {}, \
                     chat_template.json or additional_chat_templates/ beside it): \
                     transformers' apply_chat_template fails for a caller that chats with \
                     this generating model",
                    quote(&join(dir, "chat_template.jinja"))
                ),
                "carry the chat template of the model's instruct release \
                 (chat_template.jinja), or have the caller pass chat_template=",
            ));
        }
        Ok(())
    }

    fn has_chat_template(&self, dir: &str, tc: &Value) -> io::Result<bool> {
        if tc.get("chat_template").is_some_and(|t| !t.is_null()) {
            return Ok(true);
        }
        if self
            .any_exists(dir, &["chat_template.jinja", "chat_template.json"])?
            .is_some()
        {
            return Ok(true);
        }
        Ok(self
            .list(&join(dir, "additional_chat_templates"))?
            .iter()
            .any(|n| n.ends_with(".jinja")))
    }

    /// The `auto_map` code of `config_rel`: each local module's relative imports (the module
    /// itself is the format check's), and, in a known cache, each other repository's module.
    fn remote_code(
        &self,
        config_rel: &str,
        config: &Value,
        out: &mut Vec<Finding>,
    ) -> io::Result<()> {
        let Some(Value::Object(auto_map)) = config.get("auto_map") else {
            return Ok(());
        };
        let dir = config_rel.rsplit_once('/').map_or("", |(d, _)| d);
        let mut local = BTreeSet::new();
        let mut remote: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for value in auto_map.values() {
            let references: Vec<&str> = match value {
                Value::String(s) => vec![s.as_str()],
                Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            for reference in references {
                if let Some((repo, rest)) = reference.split_once("--") {
                    if let Some((module, _)) = rest.rsplit_once('.') {
                        remote
                            .entry(repo.to_string())
                            .or_default()
                            .insert(format!("{module}.py"));
                    }
                } else if let Some((module, _)) = reference.rsplit_once('.') {
                    local.insert(join(dir, &format!("{module}.py")));
                }
            }
        }
        // Breadth-first over the relative imports, as get_relative_import_files does.
        let mut seen: BTreeSet<String> = local.clone();
        let mut queue: Vec<String> = local.into_iter().collect();
        while let Some(module) = queue.pop() {
            if seen.len() > MAX_MODULES {
                break;
            }
            let Some(bytes) = self.read(&module)? else {
                continue; // The format check reports a missing auto_map module.
            };
            let text = String::from_utf8_lossy(&bytes);
            for top in absolute_imports(&text) {
                let sibling = join(dir, &format!("{top}.py"));
                let cached = top == "transformers_modules";
                let sibling_there = inside(&sibling) && self.exists(&sibling)?;
                if !(cached || sibling_there) {
                    continue; // A package the target's environment provides, or not.
                }
                out.push(Finding::error(
                    codes::OFFLINE_REMOTE_CODE_ABSOLUTE_IMPORT,
                    &module,
                    if cached {
                        "imports from `transformers_modules`, transformers' cache of code it \
                         loaded before: a fresh target has nothing there, so the import fails"
                            .to_string()
                    } else {
                        format!(
                            "imports {} by its plain name, not relatively: transformers \
                             (trust_remote_code=True) checks for an installed package {} \
                             (check_imports) and never loads {}, so the load fails with \
                             \"requires the following packages that were not found\"",
                            quote(&top),
                            quote(&top),
                            quote(&sibling)
                        )
                    },
                    if cached {
                        "import the code from its own repository relatively (`from .x import`), \
                         or name the other repository in auto_map (`ORG/REPO--module.Class`)"
                            .to_string()
                    } else {
                        format!(
                            "import it relatively (`from .{} import ...`) in the repository's code",
                            escape_bounded(&top, QUOTE)
                        )
                    },
                ));
            }
            for imported in relative_imports(&text) {
                let file = join(dir, &format!("{imported}.py"));
                if !inside(&file) || !seen.insert(file.clone()) {
                    continue;
                }
                if self.exists(&file)? {
                    queue.push(file);
                } else {
                    out.push(Finding::error(
                        codes::OFFLINE_REMOTE_CODE_IMPORT_MISSING,
                        &module,
                        format!(
                            "imports {} from its own repository (`from .{} import ...`), but {} \
                             is not there: transformers (trust_remote_code=True) fetches it and \
                             fails offline",
                            quote(&format!(".{imported}")),
                            escape_bounded(&imported, QUOTE),
                            quote(&file)
                        ),
                        format!(
                            "download {} (every .py file of the repository) with the model, \
                             then pack again",
                            quote(&file)
                        ),
                    ));
                }
            }
        }
        if let Deps::Pack(needs) = self.deps {
            for repo in remote.keys() {
                needs.need(repo, hfnames::DEFAULT_REVISION);
            }
        }
        if let Deps::Cache(cache, needs) = self.deps {
            for repo in remote.keys() {
                needs.need(repo, hfnames::DEFAULT_REVISION);
            }
            for (repo, modules) in remote {
                for module in modules {
                    self.need_repo(
                        cache,
                        config_rel,
                        "transformers (auto_map, trust_remote_code=True)",
                        &repo,
                        "main",
                        &module,
                        out,
                    );
                }
            }
        }
        Ok(())
    }

    /// In a known cache: that `repo_id` resolves offline at `revision` and its snapshot has
    /// `file`; an error finding on `rel` otherwise.
    #[allow(clippy::too_many_arguments)]
    fn need_repo(
        &self,
        cache: &Path,
        rel: &str,
        loader: &str,
        repo_id: &str,
        revision: &str,
        file: &str,
        out: &mut Vec<Finding>,
    ) {
        let shown = quote(repo_id);
        if hfnames::check_repo_id(repo_id).is_err() {
            out.push(Finding::error(
                codes::OFFLINE_REPO_MISSING,
                rel,
                format!("names {shown}, which is not a repository id {loader} can load"),
                "fix the name, or have the caller load that part from a path",
            ));
            return;
        }
        let folder = hfnames::repo_folder_name("model", repo_id);
        let problem = match resolve_offline(cache, &folder, revision) {
            Ok(commit) => {
                let at = format!("{folder}/snapshots/{commit}/{file}");
                if crate::inspect::is_plain_relative(file)
                    && matches!(
                        Tree::new(cache).and_then(|t| t.resolve(&at)),
                        Ok(Resolved::File { .. })
                    )
                {
                    return;
                }
                format!(
                    "needs {shown} (revision {}), whose cached snapshot {commit} has no {}",
                    quote(revision),
                    quote(file)
                )
            }
            Err(why) => format!(
                "needs {shown} at revision {} and the cache cannot give it offline ({why})",
                quote(revision)
            ),
        };
        out.push(Finding::error(
            codes::OFFLINE_REPO_MISSING,
            rel,
            format!("{problem}: {loader} fails without network"),
            format!(
                "pack {shown} as well and unpack it into the same cache (airlock pack --hf-repo {})",
                escape_bounded(repo_id, QUOTE)
            ),
        ));
    }

    /// A PEFT adapter: its weights, and its base model.
    fn peft(&self, adapter: &Value, out: &mut Vec<Finding>) -> io::Result<()> {
        let rel = "adapter_config.json";
        if self
            .any_exists("", &["adapter_model.safetensors", "adapter_model.bin"])?
            .is_none()
        {
            out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                rel,
                "has no `adapter_model.safetensors` (or `adapter_model.bin`) beside it: peft \
                 (PeftModel.from_pretrained) has no adapter weights to load",
                "download the adapter's weights with its config, then pack again",
            ));
        }
        // peft's load_peft_weights, given a repository id, asks the hub whether the adapter's
        // safetensors file exists (`file_exists`, no fallback to the cache) unless
        // HF_HUB_OFFLINE is set: with no network the load fails however complete the cache is.
        out.push(Finding::warning(
            codes::OFFLINE_NEEDS_HUB_OFFLINE,
            rel,
            "is loaded by peft, whose `load_peft_weights` asks the hub whether the adapter's \
             weights exist (huggingface_hub `file_exists`, which does not fall back to the cache) \
             when it loads by repository id: with no network that fails unless HF_HUB_OFFLINE=1 \
             is set where it loads",
            "set HF_HUB_OFFLINE=1 in the environment that loads the adapter (or load it from \
             its snapshot path)",
        ));
        let base = adapter
            .get("base_model_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("");
        let revision = adapter
            .get("revision")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .unwrap_or(hfnames::DEFAULT_REVISION);
        if base.is_empty() {
            out.push(Finding::warning(
                codes::OFFLINE_REPO_NEEDED,
                rel,
                "names no base_model_name_or_path: peft's AutoPeftModel cannot load the adapter \
                 by itself, the caller must pass the base model",
                "set base_model_name_or_path, or load with PeftModel.from_pretrained(base, ...)",
            ));
            return Ok(());
        }
        let shown = quote(base);
        if base.starts_with('/') || base.starts_with('.') || base.starts_with('~') {
            out.push(Finding::warning(
                codes::OFFLINE_REPO_NEEDED,
                rel,
                format!(
                    "names the base model by a path on the machine that trained it, {shown}: \
                     peft's AutoPeftModel loads it from there, which exists on the target only \
                     if the caller put it there"
                ),
                "set base_model_name_or_path to the base's repository id and carry that \
                 repository too, or load with PeftModel.from_pretrained(base, ...)",
            ));
            return Ok(());
        }
        match self.deps {
            Deps::Cache(cache, needs) => {
                needs.need(base, revision);
                self.need_repo(
                    cache,
                    rel,
                    "peft (AutoPeftModel*.from_pretrained)",
                    base,
                    revision,
                    "config.json",
                    out,
                )
            }
            Deps::Pack(needs) if needs.need(base, revision) => {}
            Deps::Elsewhere | Deps::Pack(_) => out.push(Finding::warning(
                codes::OFFLINE_REPO_NEEDED,
                rel,
                format!(
                    "needs its base model {shown} (revision {}): peft's AutoPeftModel loads it \
                     from the cache, so the target's cache must hold it too",
                    quote(revision)
                ),
                format!(
                    "pack {shown} as well and unpack both into the same cache; \
                     `airlock check --hf-cache C --hf-repo R --offline-ready` on the target \
                     then says whether it is there"
                ),
            )),
        }
        Ok(())
    }

    /// sentence-transformers: each module of `modules.json` and what its `load` reads.
    fn sentence_transformers(&self, modules: &Value, out: &mut Vec<Finding>) -> io::Result<()> {
        let rel = "modules.json";
        let Some(list) = modules.as_array() else {
            out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                rel,
                "is not a list of modules: sentence-transformers cannot read it",
                "download modules.json again, then pack again",
            ));
            return Ok(());
        };
        for module in list {
            let path = module.get("path").and_then(Value::as_str).unwrap_or("");
            let class_ref = module.get("type").and_then(Value::as_str).unwrap_or("");
            let class = last_segment(class_ref);
            let path = path.trim_end_matches('/');
            if !inside(path) {
                out.push(Finding::error(
                    codes::OFFLINE_ST_MODULE_MISSING,
                    rel,
                    format!(
                        "lists the module {} at {}, a path outside the model, which \
                         sentence-transformers refuses",
                        quote(class_ref),
                        quote(path)
                    ),
                    "fix modules.json (module paths are relative to the model)",
                ));
                continue;
            }
            let wanted: Vec<&str> = match class {
                "Normalize" => Vec::new(),
                "Transformer" if path.is_empty() => Vec::new(), // The root's model, checked below.
                "Transformer" => vec!["config.json"],
                "Pooling"
                | "Dense"
                | "LayerNorm"
                | "WeightedLayerPooling"
                | "CNN"
                | "LSTM"
                | "WordEmbeddings"
                | "BoW"
                | "StaticEmbedding" => vec!["config.json"],
                // A module of its own code: what it reads is its own business.
                _ => {
                    continue;
                }
            };
            for name in wanted {
                let file = join(path, name);
                if !self.exists(&file)? {
                    out.push(Finding::error(
                        codes::OFFLINE_ST_MODULE_MISSING,
                        rel,
                        format!(
                            "lists the module {} in {}, but {} is not there: \
                             sentence-transformers (SentenceTransformer(...)) cannot build it",
                            quote(class_ref),
                            quote(&format!("{path}/")),
                            quote(&file)
                        ),
                        format!(
                            "download the module's folder {} with the model, then pack again",
                            quote(&format!("{path}/"))
                        ),
                    ));
                }
            }
            if class == "Dense"
                && self
                    .any_exists(path, &["model.safetensors", "pytorch_model.bin"])?
                    .is_none()
            {
                out.push(Finding::error(
                    codes::OFFLINE_ST_MODULE_MISSING,
                    rel,
                    format!(
                        "lists the Dense module in {}, which has no weights \
                         (model.safetensors or pytorch_model.bin): sentence-transformers \
                         cannot build it",
                        quote(&format!("{path}/"))
                    ),
                    format!(
                        "download the module's folder {} with the model, then pack again",
                        quote(&format!("{path}/"))
                    ),
                ));
            }
            if class == "Transformer" && !path.is_empty() {
                self.transformers(path, out)?;
            }
        }
        Ok(())
    }

    /// diffusers: each component of `model_index.json` and its subfolder.
    fn diffusers(&self, index: &Value, out: &mut Vec<Finding>) -> io::Result<()> {
        let rel = "model_index.json";
        let Some(components) = index.as_object() else {
            out.push(Finding::error(
                codes::OFFLINE_FILE_MISSING,
                rel,
                "is not a JSON object: diffusers (DiffusionPipeline.from_pretrained) cannot read it",
                "download model_index.json again, then pack again",
            ));
            return Ok(());
        };
        for (name, value) in components {
            if name.starts_with('_') {
                continue;
            }
            let Some([Value::String(library), Value::String(class)]) =
                value.as_array().map(Vec::as_slice)
            else {
                continue; // [null, null]: an optional component left out on purpose.
            };
            if !inside(name) || name.contains('/') {
                continue;
            }
            let component = format!(
                "{} {}",
                escape_bounded(library, QUOTE),
                escape_bounded(class, QUOTE)
            );
            let (wanted, what): (Vec<&str>, &str) = if class.contains("Scheduler") {
                (vec!["scheduler_config.json"], "its scheduler_config.json")
            } else if class.contains("Tokenizer") {
                (
                    vec![
                        "tokenizer.json",
                        "vocab.json",
                        "tokenizer.model",
                        "spiece.model",
                        "vocab.txt",
                    ],
                    "tokenizer files",
                )
            } else if class.contains("FeatureExtractor")
                || class.contains("ImageProcessor")
                || class.contains("Processor")
            {
                (
                    vec!["preprocessor_config.json"],
                    "its preprocessor_config.json",
                )
            } else {
                (vec!["config.json"], "its config.json")
            };
            let missing_folder = !self.is_dir(name)?;
            let missing = missing_folder || self.any_exists(name, &wanted)?.is_none();
            if missing {
                out.push(Finding::error(
                    codes::OFFLINE_DIFFUSERS_COMPONENT_MISSING,
                    rel,
                    format!(
                        "lists the component {} ({component}), but {}: diffusers \
                         (DiffusionPipeline.from_pretrained) cannot load it",
                        quote(name),
                        if missing_folder {
                            format!("the folder {} is not there", quote(&format!("{name}/")))
                        } else {
                            format!("{} has no {what}", quote(&format!("{name}/")))
                        }
                    ),
                    format!(
                        "download the {} folder with the pipeline, then pack again",
                        quote(&format!("{name}/"))
                    ),
                ));
                continue;
            }
            if !class.contains("Scheduler")
                && !class.contains("Tokenizer")
                && !class.contains("Processor")
                && !class.contains("FeatureExtractor")
                && self.any_exists(name, DIFFUSERS_WEIGHTS)?.is_none()
            {
                out.push(Finding::error(
                    codes::OFFLINE_DIFFUSERS_COMPONENT_MISSING,
                    rel,
                    format!(
                        "lists the component {} ({component}), but {} has no weights: diffusers \
                         (DiffusionPipeline.from_pretrained) cannot load it",
                        quote(name),
                        quote(&format!("{name}/"))
                    ),
                    format!(
                        "download the {} folder's weights with the pipeline, then pack again",
                        quote(&format!("{name}/"))
                    ),
                ));
            }
            if class.contains("Tokenizer") {
                self.tokenizer(name, None, false, out)?;
            }
        }
        Ok(())
    }

    /// GGUF splits (`NAME-0000N-of-0000M.gguf`, anywhere in the model): every one from 1 to M.
    /// The model's files named `*.gguf`, relative to it: as the caller listed them, or found
    /// by a walk that follows no link (at most eight folders deep, leaving out `.no_exist`
    /// and `.airlock`), in name order.
    fn gguf_files(&self) -> Vec<String> {
        if let Some(listed) = &self.gguf {
            return listed.clone();
        }
        let start = self.root.join(&self.base);
        walkdir::WalkDir::new(&start)
            .follow_links(false)
            .min_depth(1)
            .max_depth(8)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.file_name() != ".no_exist" && e.file_name() != ".airlock")
            .filter_map(|entry| entry.ok())
            .filter(|e| {
                !e.file_type().is_dir() && e.file_name().as_encoded_bytes().ends_with(b".gguf")
            })
            .map(|e| crate::inspect::relative_name(&start, e.path()))
            .collect()
    }

    fn gguf_splits(&self, out: &mut Vec<Finding>) -> io::Result<()> {
        let mut groups: BTreeMap<(String, u32), (BTreeSet<u32>, String)> = BTreeMap::new();
        for rel in self.gguf_files() {
            let Some((prefix, n, m)) = split_name(&rel) else {
                continue;
            };
            if !self.exists(&rel)? {
                continue;
            }
            let group = groups
                .entry((prefix, m))
                .or_insert_with(|| (BTreeSet::new(), rel.clone()));
            group.0.insert(n);
            if n < split_name(&group.1).map_or(u32::MAX, |s| s.1) {
                group.1 = rel;
            }
        }
        for ((prefix, m), (have, first)) in groups {
            let absent: Vec<String> = (1..=m)
                .filter(|n| !have.contains(n))
                .take(8)
                .map(|n| quote(&format!("{prefix}-{n:05}-of-{m:05}.gguf")))
                .collect();
            let missing = (1..=m).filter(|n| !have.contains(n)).count();
            if missing == 0 {
                continue;
            }
            out.push(Finding::error(
                codes::OFFLINE_GGUF_SPLIT_MISSING,
                &first,
                format!(
                    "is one of {m} GGUF splits, and {missing} of them {} not there: {}{}: \
                     llama.cpp loads every split of {} and fails",
                    if missing == 1 { "is" } else { "are" },
                    absent.join(", "),
                    if missing > absent.len() { ", ..." } else { "" },
                    quote(&format!("{prefix}-*-of-{m:05}.gguf"))
                ),
                "download every split, then pack again",
            ));
        }
        Ok(())
    }
}

/// `(prefix, N, M)` of a llama.cpp split name `PREFIX-0000N-of-0000M.gguf`.
fn split_name(rel: &str) -> Option<(String, u32, u32)> {
    let stem = rel.strip_suffix(".gguf")?;
    let (head, m) = stem.rsplit_once("-of-")?;
    let (prefix, n) = head.rsplit_once('-')?;
    if n.len() != 5 || m.len() != 5 || !n.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (n, m): (u32, u32) = (n.parse().ok()?, m.parse().ok()?);
    (n >= 1 && n <= m && m <= 99_999).then(|| (prefix.to_string(), n, m))
}

/// The modules a Python file imports relatively, as transformers'
/// `dynamic_module_utils.get_relative_imports` finds them: `import .x` alone on its line, and
/// `from .x import ...`. Only names of identifier characters and dots are kept (the loader
/// fetches `x.py` literally).
fn relative_imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        let name = if let Some(rest) = line.strip_prefix("import") {
            let rest = rest.trim_start();
            if rest.len() == line.len() - "import".len() {
                continue; // `importx`: no whitespace after the keyword.
            }
            match rest.trim_end().strip_prefix('.') {
                Some(n) if !n.contains(char::is_whitespace) => n,
                _ => continue,
            }
        } else if let Some(rest) = line.strip_prefix("from") {
            let trimmed = rest.trim_start();
            if trimmed.len() == rest.len() {
                continue;
            }
            let Some(after_dot) = trimmed.strip_prefix('.') else {
                continue;
            };
            let Some((name, tail)) = after_dot.split_once(char::is_whitespace) else {
                continue;
            };
            if !tail.trim_start().starts_with("import") || name.is_empty() {
                continue;
            }
            name
        } else {
            continue;
        };
        if !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            && !name.starts_with('.')
        {
            found.insert(name.to_string());
        }
    }
    found
}

/// The top-level modules a Python file imports by absolute name, as transformers'
/// `dynamic_module_utils.get_imports` finds them (the modules `check_imports` requires to be
/// installed): `import a.b, c as d` and `from a.b import x` anywhere, except in a `try` block
/// (with its handlers) and in an `if` whose condition calls an `is_...` function
/// (`if is_flash_attn_2_available():`, with its `elif`/`else`), and not in a triple-quoted
/// string. `get_imports` reads the syntax tree; this reads lines and indentation, which agree
/// for code written one statement per line.
fn absolute_imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    // Skipping the block opened at this indentation (a `try` or a guarded `if`).
    let mut skip: Option<(usize, &[&str])> = None;
    let mut in_string: Option<&str> = None;
    for raw in text.lines() {
        if let Some(q) = in_string {
            if raw.matches(q).count() % 2 == 1 {
                in_string = None;
            }
            continue;
        }
        let line = raw.trim_start();
        let indent = raw.len() - line.len();
        for q in ["\"\"\"", "'''"] {
            if line.matches(q).count() % 2 == 1 {
                in_string = Some(q);
            }
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((at, continues)) = skip {
            let word = line
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next();
            if indent > at || (indent == at && word.is_some_and(|w| continues.contains(&w))) {
                continue;
            }
            skip = None;
        }
        let keyword = |k: &str| {
            line.strip_prefix(k)
                .is_some_and(|r| r.starts_with([' ', '\t', ':', '(']))
        };
        if keyword("try") {
            skip = Some((indent, &["except", "else", "finally"][..]));
            continue;
        }
        if keyword("if") && calls_is_function(line) {
            skip = Some((indent, &["elif", "else"][..]));
            continue;
        }
        for statement in line.split(';') {
            let statement = statement.trim();
            if let Some(rest) = statement.strip_prefix("import ") {
                for part in rest.split(',') {
                    let name = part.split_whitespace().next().unwrap_or("");
                    insert_top(&mut found, name);
                }
            } else if let Some(rest) = statement.strip_prefix("from ") {
                let rest = rest.trim_start();
                let name = rest.split_whitespace().next().unwrap_or("");
                if rest[name.len()..].trim_start().starts_with("import") {
                    insert_top(&mut found, name);
                }
            }
        }
    }
    found
}

/// Records the top module of `name` (`a` of `a.b`), unless it is relative or not a name.
fn insert_top(found: &mut BTreeSet<String>, name: &str) {
    let top = name.split('.').next().unwrap_or("");
    if !top.is_empty() && top.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        found.insert(top.to_string());
    }
}

/// Whether an `if` line calls a bare function whose name begins `is_` (transformers skips
/// such blocks: `is_flash_attn_2_available()`, `is_torch_available()`, the
/// `transformers.utils.import_utils` checks).
fn calls_is_function(line: &str) -> bool {
    let bytes = line.as_bytes();
    line.match_indices("is_").any(|(at, _)| {
        let bare = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b'.');
        let rest = &line[at..];
        let name_len = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        bare && rest[name_len..].trim_start().starts_with('(')
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::testutil::tree;
    use crate::inspect::{Severity, codes};

    /// The findings, less peft's standing HF_HUB_OFFLINE warning (tested on its own).
    fn run(files: &[(&str, &[u8])]) -> Vec<Finding> {
        let dir = tree(files);
        without_hub_offline(check(dir.path(), "", Deps::Elsewhere).unwrap())
    }

    fn without_hub_offline(f: Vec<Finding>) -> Vec<Finding> {
        f.into_iter()
            .filter(|f| f.code != codes::OFFLINE_NEEDS_HUB_OFFLINE)
            .collect()
    }

    fn codes_paths(f: &[Finding]) -> Vec<(&str, &str, Severity)> {
        f.iter()
            .map(|f| (f.code, f.path.as_str(), f.severity))
            .collect()
    }

    const LLAMA: &[u8] = br#"{"model_type":"llama","architectures":["LlamaForCausalLM"]}"#;

    #[test]
    fn relative_imports_as_transformers_reads_them() {
        let text = "import os\nfrom .utils import x\n  from .sub.mod import (a,\nimport .helpers\nfrom . import y\nfrom ..up import z\nimportx\nfrom .a-b import c\n";
        let got: Vec<String> = relative_imports(text).into_iter().collect();
        assert_eq!(got, ["helpers", "sub.mod", "utils"]);
    }

    #[test]
    fn split_names() {
        assert_eq!(
            split_name("m/q4-00002-of-00003.gguf"),
            Some(("m/q4".into(), 2, 3))
        );
        assert_eq!(split_name("q4-2-of-3.gguf"), None);
        assert_eq!(split_name("q4-00004-of-00003.gguf"), None);
        assert_eq!(split_name("q4-00000-of-00003.gguf"), None);
        assert_eq!(split_name("model.gguf"), None);
    }

    #[test]
    fn a_complete_causal_lm_is_ready() {
        let f = run(&[
            ("config.json", LLAMA),
            ("model.safetensors", b"x"),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"LlamaTokenizer"}"#,
            ),
            ("tokenizer.json", b"{}"),
            ("chat_template.jinja", b"{{ messages }}"),
        ]);
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn tokenizer_files_by_class() {
        let f = run(&[
            ("config.json", LLAMA),
            ("model.safetensors", b"x"),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"GPT2Tokenizer","chat_template":"x"}"#,
            ),
            ("vocab.json", b"{}"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_TOKENIZER_FILES_MISSING,
                "tokenizer_config.json",
                Severity::Error
            )]
        );
        assert!(
            f[0].problem.contains("vocab.json and merges.txt"),
            "{}",
            f[0].problem
        );
        let f = run(&[
            ("config.json", br#"{"model_type":"gpt2"}"#),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"GPT2Tokenizer"}"#,
            ),
            ("vocab.json", b"{}"),
            ("merges.txt", b"#"),
        ]);
        assert!(f.is_empty(), "{f:#?}");
        let f = run(&[
            ("config.json", br#"{"model_type":"llama"}"#),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"LlamaTokenizerFast"}"#,
            ),
            ("tokenizer.model", b"x"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_TOKENIZER_NEEDS_CONVERSION,
                "tokenizer_config.json",
                Severity::Warning
            )]
        );
        let f = run(&[
            ("config.json", br#"{"model_type":"x"}"#),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"PreTrainedTokenizerFast"}"#,
            ),
            ("vocab.txt", b"a"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_TOKENIZER_FILES_MISSING,
                "tokenizer_config.json",
                Severity::Error
            )]
        );
        // transformers 5's AutoTokenizer reads config.json first, whatever tokenizer_config says.
        let f = run(&[
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"PreTrainedTokenizerFast"}"#,
            ),
            ("tokenizer.json", b"{}"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_FILE_MISSING,
                "tokenizer_config.json",
                Severity::Error
            )]
        );
        assert!(f[0].problem.contains("`config.json`"), "{}", f[0].problem);
    }

    #[test]
    fn a_peft_adapter_loaded_by_id_needs_hf_hub_offline() {
        let dir = tree(&[
            (
                "adapter_config.json",
                br#"{"base_model_name_or_path":"org/base"}"#,
            ),
            ("adapter_model.safetensors", b"x"),
        ]);
        let f = check(dir.path(), "", Deps::Elsewhere).unwrap();
        let hub: Vec<_> = f
            .iter()
            .filter(|f| f.code == codes::OFFLINE_NEEDS_HUB_OFFLINE)
            .collect();
        assert_eq!(hub.len(), 1, "{f:#?}");
        assert_eq!(hub[0].severity, Severity::Warning);
        assert!(
            hub[0].problem.contains("`load_peft_weights`"),
            "{}",
            hub[0].problem
        );
    }

    #[test]
    fn vision_and_audio_models_need_their_processor_config() {
        const VIT: &[u8] =
            br#"{"architectures":["ViTForImageClassification"],"image_size":32,"num_channels":3}"#;
        const W2V: &[u8] =
            br#"{"architectures":["Wav2Vec2ForSequenceClassification"],"conv_dim":[8]}"#;
        const LLAVA: &[u8] =
            br#"{"architectures":["LlavaForConditionalGeneration"],"vision_config":{}}"#;
        const WHISPER: &[u8] =
            br#"{"architectures":["WhisperForConditionalGeneration"],"num_mel_bins":80}"#;
        for config in [VIT, W2V, LLAVA, WHISPER] {
            let bare = [
                ("config.json", config),
                ("model.safetensors", b"x".as_slice()),
            ];
            let f = run(&bare);
            let warnings: Vec<_> = codes_paths(&f)
                .into_iter()
                .filter(|(c, _, _)| *c == codes::OFFLINE_PROCESSOR_MISSING)
                .collect();
            assert_eq!(
                warnings,
                [(
                    codes::OFFLINE_PROCESSOR_MISSING,
                    "config.json",
                    Severity::Warning
                )],
                "{}",
                String::from_utf8_lossy(config)
            );
            let mut with = bare.to_vec();
            with.push(("preprocessor_config.json", b"{}"));
            assert!(
                !codes_paths(&run(&with))
                    .iter()
                    .any(|(c, _, _)| *c == codes::OFFLINE_PROCESSOR_MISSING),
                "{}",
                String::from_utf8_lossy(config)
            );
        }
        // processor_config.json counts only with the nested config the loader reads.
        let vit = |processor: &'static [u8]| {
            run(&[
                ("config.json", VIT),
                ("model.safetensors", b"x"),
                ("processor_config.json", processor),
            ])
        };
        assert!(
            vit(br#"{"image_processor":{"image_processor_type":"ViTImageProcessor"}}"#).is_empty()
        );
        assert_eq!(
            codes_paths(&vit(br#"{"processor_class":"ViTProcessor"}"#)),
            [(
                codes::OFFLINE_PROCESSOR_MISSING,
                "config.json",
                Severity::Warning
            )]
        );
        assert_eq!(
            codes_paths(&vit(br#"{"feature_extractor":{}}"#)),
            [(
                codes::OFFLINE_PROCESSOR_MISSING,
                "config.json",
                Severity::Warning
            )],
            "an audio key does not serve an image model"
        );
        let w2v = run(&[
            ("config.json", W2V),
            ("model.safetensors", b"x"),
            ("processor_config.json", br#"{"audio_processor":{}}"#),
        ]);
        assert!(w2v.is_empty(), "{w2v:?}");
        // Text models are neither, whatever their head.
        for text in [
            br#"{"architectures":["BertForPreTraining"]}"#.as_slice(),
            br#"{"architectures":["T5ForConditionalGeneration"]}"#,
            br#"{"architectures":["LlamaForCausalLM"]}"#,
        ] {
            assert!(
                !codes_paths(&run(&[("config.json", text), ("model.safetensors", b"x")]))
                    .iter()
                    .any(|(c, _, _)| *c == codes::OFFLINE_PROCESSOR_MISSING)
            );
        }
    }

    #[test]
    fn chat_template_for_generating_models_only() {
        let base: Vec<(&str, &[u8])> = vec![
            ("model.safetensors", b"x"),
            (
                "tokenizer_config.json",
                br#"{"tokenizer_class":"GPT2Tokenizer"}"#,
            ),
            ("tokenizer.json", b"{}"),
        ];
        let mut causal = base.clone();
        causal.push(("config.json", LLAMA));
        let f = run(&causal);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_CHAT_TEMPLATE_MISSING,
                "tokenizer_config.json",
                Severity::Warning
            )]
        );
        for extra in ["additional_chat_templates/tool.jinja", "chat_template.json"] {
            let mut with = causal.clone();
            with.push((extra, b"x"));
            assert!(run(&with).is_empty(), "{extra}");
        }
        let mut encoder = base.clone();
        encoder.push(("config.json", br#"{"architectures":["BertModel"]}"#));
        assert!(run(&encoder).is_empty());
    }

    #[test]
    fn config_and_weights_go_together() {
        let f = run(&[("model.safetensors", b"x")]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_FILE_MISSING,
                "model.safetensors",
                Severity::Error
            )]
        );
        let f = run(&[("config.json", LLAMA)]);
        assert_eq!(
            codes_paths(&f),
            [(codes::OFFLINE_FILE_MISSING, "config.json", Severity::Error)]
        );
        // A config without an architecture (a tokenizer or code repository) needs no weights.
        assert!(run(&[("config.json", br#"{"model_type":"x"}"#)]).is_empty());
    }

    #[test]
    fn remote_code_relative_imports_are_followed() {
        let config = br#"{"auto_map":{"AutoModel":"modeling_x.XModel"}}"#;
        let f = run(&[
            ("config.json", config),
            ("modeling_x.py", b"from .helpers import h\nimport torch\n"),
            ("helpers.py", b"from .deeper import d\n"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_REMOTE_CODE_IMPORT_MISSING,
                "helpers.py",
                Severity::Error
            )]
        );
        assert!(f[0].problem.contains("`deeper.py`"), "{}", f[0].problem);
        let f = run(&[
            ("config.json", config),
            ("modeling_x.py", b"from .helpers import h\n"),
            ("helpers.py", b"from .modeling_x import XModel\n"),
        ]);
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn absolute_imports_as_get_imports_reads_them() {
        let text = "import os, torch.nn as nn\nfrom helpers import h\nfrom .rel import r\n\
            from . import y\nimport transformers_modules.org.x\ndef f():\n    import inner\n\
            try:\n    import optional_a\nexcept ImportError:\n    import optional_b\n\
            else:\n    import optional_c\nimport after_try\n\
            if is_flash_attn_2_available():\n    import flash_attn\nelif x:\n    import other\n\
            else:\n    import other2\nif torch.cuda.is_available():\n    import cuda_only\n\
            \"\"\"\nimport in_docstring\n\"\"\"\nx = 1; import semi\nimportant = 1\n";
        let got: Vec<String> = absolute_imports(text).into_iter().collect();
        // `torch.cuda.is_available()` is an attribute call, which transformers does not skip.
        assert_eq!(
            got,
            [
                "after_try",
                "cuda_only",
                "helpers",
                "inner",
                "os",
                "semi",
                "torch",
                "transformers_modules"
            ]
        );
    }

    #[test]
    fn remote_code_imports_of_siblings_by_plain_name_are_errors() {
        let config = br#"{"auto_map":{"AutoModel":"modeling_x.XModel"}}"#;
        let f = run(&[
            ("config.json", config),
            (
                "modeling_x.py",
                b"import torch\nimport helpers\nfrom .rel import r\n",
            ),
            (
                "rel.py",
                b"from transformers_modules.org.other.abc.mod import M\ntry:\n    import helpers\nexcept ImportError:\n    pass\n",
            ),
            ("helpers.py", b"x = 1\n"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [
                (
                    codes::OFFLINE_REMOTE_CODE_ABSOLUTE_IMPORT,
                    "modeling_x.py",
                    Severity::Error
                ),
                (
                    codes::OFFLINE_REMOTE_CODE_ABSOLUTE_IMPORT,
                    "rel.py",
                    Severity::Error
                ),
            ]
        );
        assert!(f[0].problem.contains("`helpers.py`"), "{}", f[0].problem);
        assert!(
            f[1].problem.contains("transformers_modules"),
            "{}",
            f[1].problem
        );
        // A plain import of a package that is not a file of the repository is the target
        // environment's business, not reported.
        let f = run(&[
            ("config.json", config),
            ("modeling_x.py", b"import torch\nimport einops\n"),
        ]);
        assert!(f.is_empty(), "{f:#?}");
    }

    /// `check --hf-cache --offline-ready` follows what each needed repository needs in turn:
    /// an adapter's base whose `auto_map` code is in a third repository.
    #[test]
    fn needs_are_followed_transitively_in_a_cache() {
        let adapter = br#"{"base_model_name_or_path":"org/base","peft_type":"LORA"}"#;
        let base_config = br#"{"auto_map":{"AutoModel":"org/code--modeling_x.XModel"}}"#;
        let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
        let files = [
            (
                format!("models--org--lora/snapshots/{a}/adapter_config.json"),
                adapter.to_vec(),
            ),
            (
                format!("models--org--lora/snapshots/{a}/adapter_model.safetensors"),
                b"x".to_vec(),
            ),
            ("models--org--lora/refs/main".into(), a.clone().into_bytes()),
            (
                format!("models--org--base/snapshots/{b}/config.json"),
                base_config.to_vec(),
            ),
            ("models--org--base/refs/main".into(), b.clone().into_bytes()),
        ];
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let dir = tree(&refs);
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        let want = format!("models--org--base/snapshots/{b}/config.json");
        assert_eq!(
            codes_paths(&f),
            [(codes::OFFLINE_REPO_MISSING, want.as_str(), Severity::Error)]
        );
        assert!(
            f[0].problem.contains("the cache has no models--org--code")
                && f[0].problem.contains("which `org/lora` needs"),
            "{}",
            f[0].problem
        );
        // The third repository in the cache, with a module whose sibling import is missing.
        let code = dir.path().join(format!("models--org--code/snapshots/{c}"));
        std::fs::create_dir_all(&code).unwrap();
        std::fs::create_dir_all(dir.path().join("models--org--code/refs")).unwrap();
        std::fs::write(dir.path().join("models--org--code/refs/main"), &c).unwrap();
        std::fs::write(code.join("modeling_x.py"), b"x = 1\n").unwrap();
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        assert!(f.is_empty(), "{f:#?}");
        // A cycle (the code repository's own config naming the adapter) ends.
        std::fs::write(
            code.join("config.json"),
            br#"{"auto_map":{"AutoModel":"org/lora--m.M"}}"#,
        )
        .unwrap();
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].code, codes::OFFLINE_REPO_MISSING);
        assert!(f[0].problem.contains("has no `m.py`"), "{}", f[0].problem);
    }

    #[test]
    fn peft_base_is_a_warning_unless_the_cache_is_known() {
        let adapter = br#"{"base_model_name_or_path":"org/base","peft_type":"LORA"}"#;
        let f = run(&[
            ("adapter_config.json", adapter),
            ("adapter_model.safetensors", b"x"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_REPO_NEEDED,
                "adapter_config.json",
                Severity::Warning
            )]
        );
        assert!(f[0].problem.contains("`org/base`"), "{}", f[0].problem);

        // In a cache: absent, then present at main.
        let commit = "a".repeat(40);
        let snap = format!("models--org--lora/snapshots/{commit}");
        let files = [
            (format!("{snap}/adapter_config.json"), adapter.to_vec()),
            (format!("{snap}/adapter_model.safetensors"), b"x".to_vec()),
            (
                "models--org--lora/refs/main".to_string(),
                commit.clone().into_bytes(),
            ),
        ];
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let dir = tree(&refs);
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_REPO_MISSING,
                "adapter_config.json",
                Severity::Error
            )]
        );
        assert!(
            f[0].problem.contains("the cache has no models--org--base"),
            "{}",
            f[0].problem
        );
        let base = "b".repeat(40);
        std::fs::create_dir_all(
            dir.path()
                .join(format!("models--org--base/snapshots/{base}")),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("models--org--base/refs")).unwrap();
        std::fs::write(dir.path().join("models--org--base/refs/main"), &base).unwrap();
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        assert!(
            f[0].problem.contains("has no `config.json`"),
            "{}",
            f[0].problem
        );
        std::fs::write(
            dir.path()
                .join(format!("models--org--base/snapshots/{base}/config.json")),
            b"{}",
        )
        .unwrap();
        assert!(
            without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap())
                .is_empty()
        );
        // A ref with a newline does not resolve offline.
        std::fs::write(
            dir.path().join("models--org--base/refs/main"),
            format!("{base}\n"),
        )
        .unwrap();
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "main").unwrap());
        assert_eq!(f[0].code, codes::OFFLINE_REPO_MISSING);
        // The repository's own revision.
        let f = without_hub_offline(check_cached(dir.path(), "model", "org/lora", "v2").unwrap());
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_REVISION_UNRESOLVED,
                "refs/v2",
                Severity::Error
            )]
        );
    }

    #[test]
    fn sentence_transformers_modules() {
        let modules = br#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#;
        let base: Vec<(&str, &[u8])> = vec![
            ("modules.json", modules),
            ("config.json", br#"{"architectures":["BertModel"]}"#),
            ("model.safetensors", b"x"),
        ];
        let f = run(&base);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_ST_MODULE_MISSING,
                "modules.json",
                Severity::Error
            )]
        );
        assert!(
            f[0].problem.contains("`1_Pooling/config.json`"),
            "{}",
            f[0].problem
        );
        let mut with = base.clone();
        with.push(("1_Pooling/config.json", b"{}"));
        assert!(run(&with).is_empty());
        let bad = br#"[{"path":"../x","type":"sentence_transformers.models.Pooling"}]"#;
        assert_eq!(
            run(&[("modules.json", bad)])[0].code,
            codes::OFFLINE_ST_MODULE_MISSING
        );
    }

    #[test]
    fn diffusers_components() {
        let index = br#"{"_class_name":"DDPMPipeline","unet":["diffusers","UNet2DModel"],
            "scheduler":["diffusers","DDPMScheduler"],"safety_checker":[null,null]}"#;
        let f = run(&[
            ("model_index.json", index),
            ("unet/config.json", b"{}"),
            ("unet/diffusion_pytorch_model.safetensors", b"x"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_DIFFUSERS_COMPONENT_MISSING,
                "model_index.json",
                Severity::Error
            )]
        );
        assert!(f[0].problem.contains("`scheduler/`"), "{}", f[0].problem);
        let f = run(&[
            ("model_index.json", index),
            ("unet/config.json", b"{}"),
            ("scheduler/scheduler_config.json", b"{}"),
        ]);
        assert!(f[0].problem.contains("has no weights"), "{}", f[0].problem);
    }

    #[test]
    fn gguf_splits_must_all_be_there() {
        let f = run(&[
            ("q-00001-of-00003.gguf", b"x"),
            ("q-00003-of-00003.gguf", b"x"),
        ]);
        assert_eq!(
            codes_paths(&f),
            [(
                codes::OFFLINE_GGUF_SPLIT_MISSING,
                "q-00001-of-00003.gguf",
                Severity::Error
            )]
        );
        assert!(
            f[0].problem.contains("`q-00002-of-00003.gguf`"),
            "{}",
            f[0].problem
        );
        assert!(
            run(&[
                ("q-00001-of-00002.gguf", b"x"),
                ("q-00002-of-00002.gguf", b"x")
            ])
            .is_empty()
        );
    }

    /// Names a file supplies are escaped where they are quoted.
    #[test]
    fn hostile_names_are_escaped() {
        let adapter = "{\"base_model_name_or_path\":\"org/\\u001b[31mred\"}";
        let f = run(&[
            ("adapter_config.json", adapter.as_bytes()),
            ("adapter_model.bin", b"x"),
        ]);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(!f[0].problem.contains('\u{1b}'), "{}", f[0].problem);
    }
}
