//! Command-line definitions (clap derive). The doc comments are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Carry machine-learning models across an air gap with every byte verified.
///
/// Exit codes: 0 success; 1 operational error (I/O, a path that does not exist or cannot be read,
/// no space, wrong password); 2 usage error; 3 the bundle or model failed verification.
/// `airlock man COMMAND` prints a command's manual page.
#[derive(Parser, Debug)]
#[command(name = "airlock", version, max_term_width = 100)]
pub struct Cli {
    /// The options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Progress on stderr for pack, verify, unpack and check: auto, bar, plain or none.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        help_heading = "Global options",
        hide_possible_values = true
    )]
    pub progress: Option<ProgressArg>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted by every command, before or after its name. Listed after each command's
/// own flags, one line each.
#[derive(Args, Debug)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// Print one JSON document on stdout, also on failure.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print nothing but errors.
    #[arg(long, short, global = true)]
    pub quiet: bool,
}

/// `--progress` for the commands that report progress (pack, verify, unpack, check).
#[derive(Args, Debug)]
pub struct ProgressArgs {
    /// Progress on stderr: auto (a bar on a terminal), bar, plain (log lines) or none
    /// [default: auto].
    #[arg(long, value_enum, value_name = "WHEN", hide_possible_values = true)]
    pub progress: Option<ProgressArg>,
}

/// `--progress` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// A bar when stderr is a terminal (plain lines if TERM is dumb), nothing otherwise.
    Auto,
    /// A bar, even when stderr is not a terminal.
    Bar,
    /// Plain log lines: each phase's start and end, and every 5 seconds between.
    Plain,
    /// No progress output.
    None,
}

/// `--compress` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressArg {
    /// zstd (the default).
    Zstd,
    /// No compression: volumes hold the plain tar stream.
    None,
    /// zstd if samples of the large files compress by at least 3% at level 1, else none.
    Auto,
}

/// `--repo-type` values: the Hugging Face repository types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RepoTypeArg {
    /// A model repository (`models--org--name`).
    Model,
    /// A dataset repository (`datasets--org--name`).
    Dataset,
    /// A Space (`spaces--org--name`).
    Space,
    /// A kernel repository (`kernels--org--name`).
    Kernel,
}

impl RepoTypeArg {
    /// The name huggingface_hub uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RepoTypeArg::Model => "model",
            RepoTypeArg::Dataset => "dataset",
            RepoTypeArg::Space => "space",
            RepoTypeArg::Kernel => "kernel",
        }
    }
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a minisign-compatible signing key pair (PREFIX.pub, PREFIX.key).
    Keygen(KeygenArgs),
    /// Pack a model directory, or a snapshot from the Hugging Face cache, into a signed bundle.
    Pack(Box<PackArgs>),
    /// Verify a bundle in place, read-only: signature, then every volume (or one file's
    /// FILE.minisig, e.g. the next airlock release).
    Verify(VerifyArgs),
    /// Write a verified bundle onto one or more mounted media, whole volumes in order, each
    /// read back from the device against its signed digests.
    Copy(CopyArgs),
    /// Verify and install a bundle (or a registry artifact) into a directory, a Hugging Face cache
    /// or an OCI image layout, atomically.
    Unpack(UnpackArgs),
    /// Show what a bundle holds without hashing anything.
    Inspect(InspectArgs),
    /// Re-verify an installed model against its receipt and lint its files, or re-check every
    /// blob of a Hugging Face cache against its name.
    Check(CheckArgs),
    /// Sign a file (FILE.minisig) the way `minisign -S` does, e.g. an airlock release binary.
    Sign(SignArgs),
    /// Restore damaged or missing volumes of a bundle from its parity and from other copies.
    Repair(RepairArgs),
    /// Verify a bundle in full, then publish it to an OCI registry as a ModelPack artifact.
    Push(PushArgs),
    /// Add one more signer's signature to a bundle (manifest.json.KEYID.minisig) or to a signed
    /// file (FILE.KEYID.minisig), for roots that require several; the volumes are not touched.
    Cosign(CosignArgs),
    /// Make, sign, inspect and rotate a TUF trust root (root.json): who may sign bundles, how
    /// many of them must, who may change that, until when.
    Trust(TrustCommandArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff) on stdout: airlock's, or one command's.
    Man {
        /// The command whose page to print (airlock-COMMAND(1)); none: airlock(1).
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(MAN_PAGES))]
        command: Option<String>,
    },
}

/// The commands that have a manual page of their own.
pub const MAN_PAGES: [&str; 13] = [
    "keygen",
    "pack",
    "verify",
    "copy",
    "unpack",
    "inspect",
    "check",
    "sign",
    "repair",
    "push",
    "cosign",
    "trust",
    "completions",
];

/// `airlock sign`.
#[derive(Args, Debug)]
pub struct SignArgs {
    /// The file to sign.
    pub file: PathBuf,
    /// The secret key to sign with.
    #[arg(long, value_name = "SECRET_KEY")]
    pub key: PathBuf,
    /// Read the key's password from the first line of this file.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Where to write the signature [default: FILE.minisig]. A second signer's co-signature is
    /// FILE.KEYID.minisig: `airlock cosign FILE` writes it under that name.
    #[arg(long, short, value_name = "SIGNATURE")]
    pub output: Option<PathBuf>,
    /// The signature's trusted comment [default: timestamp:SECONDS<TAB>file:NAME<TAB>hashed, as
    /// minisign writes it].
    #[arg(long, short = 't', value_name = "TEXT")]
    pub trusted_comment: Option<String>,
    /// Overwrite an existing signature file.
    #[arg(long)]
    pub force: bool,
}

/// `airlock keygen`.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Write PREFIX.pub and PREFIX.key.
    #[arg(long, short)]
    pub out: PathBuf,
    /// Store the secret key without a password (like `minisign -G -W`).
    #[arg(long)]
    pub unencrypted: bool,
    /// Read the password from the first line of this file instead of asking on the terminal.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Overwrite existing key files.
    #[arg(long)]
    pub force: bool,
}

/// Where the trusted public keys come from.
#[derive(Args, Debug)]
pub struct TrustArgs {
    /// A trusted .pub file or a directory of them (repeatable), or a TUF root.json (alone: the
    /// bundle needs the threshold of its targets role). Default: $AIRLOCK_TRUST.
    #[arg(long, value_name = "PUBKEY")]
    pub trust: Vec<PathBuf>,
    /// Check trust-root expiry against DATE (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) instead of
    /// this machine's clock, which is known to be wrong. Warns on every use.
    #[arg(long, value_name = "DATE")]
    pub assume_now: Option<String>,
}

/// `airlock pack`.
#[derive(Args, Debug)]
pub struct PackArgs {
    /// The model directory to pack (or use --hf-repo; with both, the directory goes beside
    /// the repositories, in a folder of its name).
    #[arg(required_unless_present = "hf_repo")]
    pub model_dir: Option<PathBuf>,
    /// The bundle directory to create (must not exist).
    #[arg(long, short)]
    pub output: PathBuf,
    /// The secret key to sign with.
    #[arg(long, value_name = "SECRET_KEY")]
    pub key: PathBuf,
    /// Read the key's password from the first line of this file.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Bundle name (default: the model directory's name, or the repository id).
    #[arg(long)]
    pub name: Option<String>,
    /// Bundle version: a whole number (1, 2, 3, ...) that goes up with each release of the model;
    /// unpack refuses to install a lower one over a higher one.
    #[arg(long = "version", value_name = "N", default_value_t = 1, value_parser = bundle_version)]
    pub bundle_version: u64,
    /// Compression of the tar stream.
    #[arg(long, value_enum, default_value_t = CompressArg::Zstd)]
    pub compress: CompressArg,
    /// zstd level (1-19).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub level: i32,
    /// Cut the stream into volumes of at most SIZE bytes: 700M, 4.5G, 4GiB, 1000MB, or `fat32`
    /// (4 GiB - 1, for a FAT32 medium). K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024;
    /// KB/MB/GB/TB of 1000; a fraction is rounded down to whole bytes. At least 4096.
    #[arg(long, value_name = "SIZE")]
    pub volume_size: Option<String>,
    /// Compression worker threads (default: the number of cores).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Pack even if the model checks find errors (they are still recorded as warnings).
    #[arg(long)]
    pub no_model_checks: bool,
    /// Do not scan the weights' values (NaN, Inf, zero-filled regions, all-zero and constant
    /// tensors) while packing: the bundle then has no `values` record, which airlock releases
    /// from before the scan need in order to read it.
    #[arg(long)]
    pub no_value_scan: bool,
    /// Pack this repository (ORG/NAME) from the Hugging Face cache instead of a directory. Every
    /// file is checked against its blob name (the hash the hub published; for a commit airlock
    /// installed there, the name its install wrote) as it is read. Repeat it to pack several
    /// repositories (an adapter and its base) into one bundle under one signature, each in a
    /// folder of its own; ORG/NAME@REV packs that repository at REV, and TYPE:ORG/NAME (TYPE
    /// one of model, dataset, space, kernel) one of that type, so a model and a dataset go
    /// into one bundle.
    #[arg(long, value_name = "[TYPE:]ORG/NAME[@REV]")]
    pub hf_repo: Vec<String>,
    /// With --hf-repo: also pack, from the same local cache and never from the network, every
    /// repository the packed models need that the bundle lacks (a PEFT adapter's base model,
    /// another repository's auto_map code), as the offline-readiness check finds them. A
    /// repository the cache does not hold stops the pack, naming it.
    #[arg(long, requires = "hf_repo")]
    pub with_dependencies: bool,
    /// With --hf-repo: the branch, tag or 40-hex commit to pack [default: main].
    #[arg(long, value_name = "REV", requires = "hf_repo")]
    pub revision: Option<String>,
    /// With --hf-repo: the cache directory. Default: as huggingface_hub finds it ($HF_HUB_CACHE,
    /// $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
    /// ~/.cache/huggingface/hub).
    #[arg(long, value_name = "DIR", requires = "hf_repo")]
    pub hf_cache: Option<PathBuf>,
    /// With --hf-repo: the repository type of each --hf-repo without a TYPE: prefix [default:
    /// model].
    #[arg(long, value_enum, requires = "hf_repo")]
    pub repo_type: Option<RepoTypeArg>,
    /// Add Reed-Solomon parity volumes (parity.000, ...) of PCT of the data, e.g. 10%: damaged
    /// or missing volumes within that budget are rebuilt by unpack and `airlock repair`.
    #[arg(long, value_name = "PCT")]
    pub parity: Option<String>,
    /// Chunk size in bytes (a power of two, 4096 to 1 GiB); for tests.
    #[arg(long, hide = true, value_name = "BYTES")]
    pub chunk_size: Option<u64>,
    /// Pack a delta: only what changed since BASE, the version the target has installed. BASE
    /// is its installed directory (its receipt) or its bundle directory (changed files are then
    /// patched), or its signed manifest.json (.minisig beside it: unchanged files are taken from
    /// the base, changed ones carried whole; with --hf-repo, changed ones are patched against
    /// the base's snapshot when the cache still holds it).
    #[arg(long, value_name = "BASE")]
    pub base: Option<PathBuf>,
    /// Carry this TUF root (root.json version N+1, signed by the root keys of version N and
    /// of its own) to the targets, which adopt it on unpack; repeat for several versions in a
    /// row. The signing key must be in its targets role.
    #[arg(long, value_name = "ROOT")]
    pub trust_update: Vec<PathBuf>,
    /// Also sign the model with OpenSSF Model Signing (OMS v1.0) with this ECDSA P-256, P-384
    /// or P-521 private key (PEM: SEC1, PKCS#8 or encrypted PKCS#8). The signature is made from
    /// the digests the pack computes (no second read), travels in the bundle, and unpack places
    /// it in the install as model.sig (model.airlock.sig when the model has a model.sig of its
    /// own), where `model_signing verify key` checks it.
    #[arg(long, value_name = "KEY.pem")]
    pub oms_key: Option<PathBuf>,
    /// The password of an encrypted --oms-key, from the first line of this file [default: the
    /// --password-file, else asked on the terminal].
    #[arg(long, value_name = "FILE", requires = "oms_key")]
    pub oms_password_file: Option<PathBuf>,
    /// Sign with the OMS certificate method: the signing certificate (PEM) of --oms-key, carried
    /// in the signature with --oms-signing-chain.
    #[arg(long, value_name = "CERT.pem", requires = "oms_key")]
    pub oms_signing_cert: Option<PathBuf>,
    /// With --oms-signing-cert: the intermediate certificates (PEM) to carry after it
    /// (repeatable).
    #[arg(long, value_name = "CHAIN.pem", requires = "oms_signing_cert")]
    pub oms_signing_chain: Vec<PathBuf>,
    /// Verify the publisher's OMS signature the model carries (model.sig, or --oms-signature)
    /// with this public key (PEM) before packing: exit 3 when it fails. The result is recorded in
    /// the signed manifest and the signature stays in the model, so the target can check the
    /// publisher too.
    #[arg(long, value_name = "PUB.pem", conflicts_with = "oms_cert_chain")]
    pub oms_trust: Option<PathBuf>,
    /// Like --oms-trust, for a publisher's signature made with the certificate method: the
    /// certificates (PEM) leading to a trusted root (repeatable).
    #[arg(long, value_name = "CHAIN.pem")]
    pub oms_cert_chain: Vec<PathBuf>,
    /// With --oms-trust or --oms-cert-chain: the publisher's signature's path in the model
    /// [default: model.sig].
    #[arg(long, value_name = "PATH")]
    pub oms_signature: Option<String>,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `airlock verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle directory, or a file signed with `airlock sign` or `minisign -S` (its
    /// signature FILE.minisig is checked, as `minisign -Vm FILE` does; under a root.json, with
    /// the co-signatures FILE.KEYID.minisig, to the root's threshold). A bundle spread over
    /// several media: the bundle directory on each (each holds the same signed manifest).
    #[arg(required = true, num_args = 1.., value_name = "BUNDLE")]
    pub bundle: Vec<PathBuf>,
    /// Trusted keys.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Also decompress and check every entry's path, type, size and sha256.
    #[arg(long)]
    pub deep: bool,
    /// Read the volumes through the page cache instead of from the medium: faster on a bundle
    /// just written, but it proves only what the cache holds, not the medium.
    #[arg(long)]
    pub cached: bool,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `airlock copy`.
#[derive(Args, Debug)]
pub struct CopyArgs {
    /// The bundle directory to copy (verified first).
    #[arg(value_name = "BUNDLE")]
    pub bundle: PathBuf,
    /// The mounted media, in the order they are filled: each gets MEDIUM/NAME/, NAME being the
    /// bundle directory's name.
    #[arg(required = true, num_args = 1.., value_name = "MEDIUM")]
    pub media: Vec<PathBuf>,
    /// Trusted keys.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `airlock repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// The bundle directory.
    pub bundle: PathBuf,
    /// A bundle spread over several media: the bundle directory on each of the others
    /// (requires -o: the repaired bundle is written whole into one directory).
    #[arg(value_name = "MORE_MEDIA")]
    pub more: Vec<PathBuf>,
    /// Trusted keys.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Write a complete repaired bundle to this new directory instead of repairing in place
    /// (for read-only media).
    #[arg(long, short, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Another copy of the same bundle to take intact chunks from (repeatable).
    #[arg(long, value_name = "OTHER_COPY")]
    pub from: Vec<PathBuf>,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `airlock unpack`.
#[derive(Args, Debug)]
pub struct UnpackArgs {
    /// The bundle directory, or a registry reference oci://HOST[:PORT]/REPOSITORY:TAG that
    /// `airlock push` published.
    pub bundle: PathBuf,
    /// A bundle spread over several media: the bundle directory on each of the others (each
    /// holds the same signed manifest; on a terminal, a volume on none of them is asked for).
    #[arg(value_name = "MORE_MEDIA")]
    pub more: Vec<PathBuf>,
    /// Trusted keys.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// The directory to install into (must not exist unless --replace).
    #[arg(
        long,
        required_unless_present_any = ["hf_cache", "oci_layout"],
        conflicts_with_all = ["hf_cache", "oci_layout"]
    )]
    pub dest: Option<PathBuf>,
    /// Atomically replace an existing destination.
    #[arg(long, conflicts_with_all = ["hf_cache", "oci_layout"])]
    pub replace: bool,
    /// Allow installing a lower version over a higher one.
    #[arg(long, conflicts_with_all = ["hf_cache", "oci_layout"])]
    pub allow_downgrade: bool,
    /// The mode of missing parents of --dest that unpack creates, in octal (e.g. 0755, 0750)
    /// [default: the mode of the nearest existing parent, without write for group and others].
    #[arg(
        long,
        value_name = "MODE",
        value_parser = parse_parent_mode,
        conflicts_with_all = ["hf_cache", "oci_layout"]
    )]
    pub parent_mode: Option<u32>,
    /// Skip the free-space check (for compressing or network filesystems whose free-space
    /// figure is meaningless); a disk that fills still fails cleanly.
    #[arg(long)]
    pub no_space_check: bool,
    /// Start clean: do not resume from what an interrupted unpack of this bundle into this
    /// destination staged (without it, a rerun keeps each staged file that proves complete
    /// against the signed manifest and reads the bundle from the first one it still needs).
    #[arg(long)]
    pub no_resume: bool,
    /// Install into this Hugging Face cache instead of a directory: blobs named by etag,
    /// snapshots/<commit>/ with relative links, refs/<revision>; created if missing.
    #[arg(long, value_name = "DIR", conflicts_with = "oci_layout")]
    pub hf_cache: Option<PathBuf>,
    /// Write the ModelPack artifact `push` publishes into this OCI image layout instead
    /// (created if missing, or updated: a new tag, shared blobs), tagged TAG (default: the
    /// bundle's version). skopeo and ORAS copy it into a registry; CRI-O mounts it.
    #[arg(long, value_name = "DIR[:TAG]")]
    pub oci_layout: Option<String>,
    /// With --hf-cache: the repository to install as (default: the one the bundle was packed
    /// from; required for a bundle packed from a directory).
    #[arg(long, value_name = "ORG/NAME", requires = "hf_cache")]
    pub hf_repo: Option<String>,
    /// With --hf-cache: the ref to point at the commit (default: the revision the bundle was
    /// packed from, else main).
    #[arg(long, value_name = "REV", requires = "hf_cache")]
    pub revision: Option<String>,
    /// With --hf-cache: the repository type (default: the bundle's, else model).
    #[arg(long, value_enum, requires = "hf_cache")]
    pub repo_type: Option<RepoTypeArg>,
    /// Of a bundle of several repositories, install only this one (repeatable: a subset).
    /// With --dest, one repository goes into the directory itself (./llama/config.json),
    /// several each into DEST/models--ORG--NAME/. The whole bundle is still read and hashed;
    /// from a registry only the chosen repositories' files are fetched.
    #[arg(
        long = "repo",
        value_name = "[TYPE:]ORG/NAME",
        conflicts_with = "oci_layout"
    )]
    pub repos: Vec<String>,
    /// With an oci:// reference: how to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// With an oci:// reference whose tag is a version (N or vN): refuse the artifact when its
    /// signed manifest is another version (without it, a warning says so).
    #[arg(long)]
    pub require_tag_version: bool,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `airlock inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The bundle directory.
    pub bundle: PathBuf,
    /// Print `sha256sum -c` lines for the unpacked model instead.
    #[arg(long)]
    pub sha256sums: bool,
}

/// `airlock check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The model directory (installed by unpack, or any model directory).
    #[arg(required_unless_present = "hf_cache", conflicts_with = "hf_cache")]
    pub dir: Option<PathBuf>,
    /// Also verify the receipt's signature against these keys (or a TUF root.json).
    #[arg(long, value_name = "PUBKEY", conflicts_with = "hf_cache")]
    pub trust: Vec<PathBuf>,
    /// Check trust-root expiry against DATE instead of this machine's clock (known to be
    /// wrong). Warns on every use.
    #[arg(long, value_name = "DATE", conflicts_with = "hf_cache")]
    pub assume_now: Option<String>,
    /// Compare sizes against the receipt only (fast); skip hashing.
    #[arg(long, conflicts_with = "hf_cache")]
    pub sizes_only: bool,
    /// Check a Hugging Face cache instead: every blob against its name (bit rot), every
    /// snapshot link against its blob, every ref against the snapshots.
    #[arg(long, value_name = "DIR")]
    pub hf_cache: Option<PathBuf>,
    /// With --hf-cache: check only this repository.
    #[arg(long, value_name = "ORG/NAME", requires = "hf_cache")]
    pub hf_repo: Option<String>,
    /// With --hf-repo: the repository type [default: model].
    #[arg(long, value_enum, requires = "hf_repo")]
    pub repo_type: Option<RepoTypeArg>,
    /// With --hf-repo: check only this revision (a branch, tag or 40-hex commit): its snapshot,
    /// its ref and the blobs its files link to [default: every snapshot].
    #[arg(long, value_name = "REV", requires = "hf_repo")]
    pub revision: Option<String>,
    /// Verify DIR against its OpenSSF Model Signing (OMS v1.0) signature with this public key
    /// (PEM), offline, with the reference tool's rules: every file signed, none changed, no
    /// unsigned file (any model directory, not only airlock installs).
    #[arg(long, value_name = "PUB.pem", conflicts_with_all = ["hf_cache", "oms_cert_chain"])]
    pub oms_trust: Option<PathBuf>,
    /// Like --oms-trust, for a signature made with the certificate method: the certificates
    /// (PEM) leading to a trusted root (repeatable).
    #[arg(long, value_name = "CHAIN.pem", conflicts_with = "hf_cache")]
    pub oms_cert_chain: Vec<PathBuf>,
    /// The OMS signature to check [default: DIR/model.sig].
    #[arg(long, value_name = "FILE")]
    pub oms_signature: Option<PathBuf>,
    /// Leave PATH (relative to DIR) out of the OMS check, as model_signing's --ignore-paths
    /// (repeatable).
    #[arg(long, value_name = "PATH")]
    pub oms_ignore: Vec<String>,
    /// Files the OMS signature does not list are not a failure (model_signing's
    /// --ignore_unsigned_files).
    #[arg(long)]
    pub oms_ignore_unsigned: bool,
    /// Do not scan the weights' values (NaN, Inf, zero-filled regions, all-zero and constant
    /// tensors). The scan rides on the read that hashes each file; --sizes-only skips it too.
    #[arg(long)]
    pub no_value_scan: bool,
    /// Also list everything the common loaders (transformers, peft, sentence-transformers,
    /// diffusers, llama.cpp) will look for that is not there, each with the loader and the file
    /// or repository it needs: errors where loading certainly fails, warnings where it depends
    /// on the caller. With --hf-cache (and --hf-repo), another repository the model needs
    /// counts as there when the cache holds it at a revision that resolves offline.
    #[arg(long)]
    pub offline_ready: bool,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// Parses `--version N`, saying what a bundle version is when N is not one.
fn bundle_version(text: &str) -> Result<u64, NotAVersion> {
    text.trim()
        .parse()
        .map_err(|_| NotAVersion(text.to_string()))
}

/// A `--version` that is not a bundle version (the text given).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a bundle version: a bundle version is a whole number (1, 2, 3, ...) that goes up with each release of the model; unpack refuses to install a lower one over a higher one (for a release name such as v2, use --name)"
)]
struct NotAVersion(String);

/// Parses `--parent-mode MODE`: octal permission bits (`0755`, `755`, `0o750`) that leave the
/// owner read, write and search.
fn parse_parent_mode(text: &str) -> Result<u32, ParentModeError> {
    let t = text.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    let not_octal = || ParentModeError::NotOctal(text.to_string());
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return Err(not_octal());
    }
    let mode = u32::from_str_radix(digits, 8).map_err(|_| not_octal())?;
    Ok(airlock::unpack::parents::check_mode(mode)?)
}

/// Why a `--parent-mode` is refused.
#[derive(Debug, thiserror::Error)]
enum ParentModeError {
    /// Not octal permission digits (the text given).
    #[error(
        "{0:?} is not an octal mode: give permission bits such as 0755 (anyone may read and enter) or 0750 (the group may)"
    )]
    NotOctal(String),
    /// Octal, but not a mode airlock can stage in.
    #[error(transparent)]
    Mode(#[from] airlock::unpack::parents::ModeError),
}

/// `airlock push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// The bundle directory (a bundle spread over several media: the bundle directory on each,
    /// each holding the same signed manifest).
    #[arg(required = true, num_args = 1.., value_name = "BUNDLE")]
    pub bundle: Vec<PathBuf>,
    /// Where to publish it: oci://HOST[:PORT]/REPOSITORY:TAG.
    #[arg(value_name = "REFERENCE", required = true)]
    pub target: String,
    /// Trusted keys: the bundle must verify against them before anything is uploaded.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// How to reach the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Progress display.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// How to reach an OCI registry. Credentials come from the docker config
/// ($DOCKER_CONFIG/config.json or ~/.docker/config.json: its credential helper for the
/// registry, else its `auths` entry).
#[derive(Args, Debug)]
pub struct RegistryArgs {
    /// Trust the CA certificates in this PEM file for the registry's TLS, besides the system
    /// roots (a site CA).
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP to the registry, without TLS (only for a registry that has none).
    #[arg(long)]
    pub plain_http: bool,
}

/// `airlock cosign`.
#[derive(Args, Debug)]
pub struct CosignArgs {
    /// The bundle directory, or a file signed with `airlock sign` (FILE.minisig beside it):
    /// the co-signature is written beside it as FILE.KEYID.minisig, which `verify FILE` counts.
    #[arg(value_name = "BUNDLE|FILE")]
    pub bundle: PathBuf,
    /// The co-signer's secret key.
    #[arg(long, value_name = "SECRET_KEY")]
    pub key: PathBuf,
    /// Read the key's password from the first line of this file.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Trusted keys or root.json: report how many signatures the bundle (or file) now has of
    /// those it needs (the bundle is not otherwise checked).
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// `airlock trust`.
#[derive(Args, Debug)]
pub struct TrustCommandArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TrustCommand,
}

/// The `trust` subcommands.
#[derive(Subcommand, Debug)]
pub enum TrustCommand {
    /// Write a new, unsigned root.json (version 1); each root key holder then signs it with
    /// `airlock trust sign`.
    Init(TrustInitArgs),
    /// Add one signature to a root.json with one secret key (each holder on their own machine).
    Sign(TrustSignArgs),
    /// Say who may sign bundles and change the root, until when, and whether the root (or a
    /// rotation from --previous) is signed well enough to be used. Exit 3 when it is not.
    Show(TrustShowArgs),
    /// Write the next version of a root (unsigned), with the key sets given or kept; it needs
    /// the signatures of the old root keys and the new ones.
    Rotate(TrustRotateArgs),
}

/// The key sets and expiry of a root.
#[derive(Args, Debug)]
pub struct RootKeyArgs {
    /// A public key (.pub) of the targets role: who may sign bundles. Repeatable.
    #[arg(long = "key", value_name = "PUBKEY")]
    pub keys: Vec<PathBuf>,
    /// How many distinct targets keys must sign a bundle.
    #[arg(long, value_name = "K")]
    pub threshold: Option<usize>,
    /// A public key (.pub) of the root role: who may sign a new root. Repeatable
    /// [default: the --key keys].
    #[arg(long = "root-key", value_name = "PUBKEY")]
    pub root_keys: Vec<PathBuf>,
    /// How many distinct root keys must sign a new root [default: --threshold].
    #[arg(long, value_name = "K")]
    pub root_threshold: Option<usize>,
    /// When the root expires: YYYY-MM-DD (midnight UTC) or YYYY-MM-DDTHH:MM:SSZ.
    #[arg(long, value_name = "DATE")]
    pub expires: String,
}

/// `airlock trust init`.
#[derive(Args, Debug)]
pub struct TrustInitArgs {
    /// The root file to write (must not exist).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Keys, thresholds, expiry.
    #[command(flatten)]
    pub keys: RootKeyArgs,
}

/// `airlock trust sign`.
#[derive(Args, Debug)]
pub struct TrustSignArgs {
    /// The root file to sign (rewritten in place, atomically).
    pub root: PathBuf,
    /// The secret key to sign with: a root key of this root, or of --previous.
    #[arg(long, value_name = "SECRET_KEY")]
    pub key: PathBuf,
    /// Read the key's password from the first line of this file.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// The version before this one, when signing a rotation with an old root key.
    #[arg(long, value_name = "ROOT")]
    pub previous: Option<PathBuf>,
}

/// `airlock trust show`.
#[derive(Args, Debug)]
pub struct TrustShowArgs {
    /// The root file.
    pub root: PathBuf,
    /// The version before this one: also check the rotation from it.
    #[arg(long, value_name = "ROOT")]
    pub previous: Option<PathBuf>,
    /// Check expiry against DATE instead of this machine's clock.
    #[arg(long, value_name = "DATE")]
    pub assume_now: Option<String>,
}

/// `airlock trust rotate`.
#[derive(Args, Debug)]
pub struct TrustRotateArgs {
    /// The root in force (version N).
    pub root: PathBuf,
    /// The new root file to write, version N+1 (must not exist).
    #[arg(long, short)]
    pub out: PathBuf,
    /// The new key sets (a set not given is kept) and expiry.
    #[command(flatten)]
    pub keys: RootKeyArgs,
}
