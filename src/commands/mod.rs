//! One function per subcommand. This layer, and only this layer, prints: a command returns an
//! [`Output`] (JSON fields, human lines, warnings, maybe an error) and [`run`] renders it.

mod check;
mod files;
mod keygen;
mod man;
mod pack;
mod secret;
mod sign;
mod ui;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use airlock::bundle::read::{self, Mode, NullSink};
use airlock::error::{EXIT_OK, Error, Result, human};
use airlock::install::{self, UnpackOptions};
use airlock::install_hf::{self, HfUnpackOptions, SnapshotState};
use airlock::keys::{self, PublicKey};

use crate::cli::{Cli, Command, ProgressArg, TrustArgs, UnpackArgs};
use ui::Ui;

/// What a command produced.
#[derive(Default)]
pub struct Output {
    /// Fields of the JSON document.
    pub json: Map<String, Value>,
    /// Lines for stdout in human mode.
    pub lines: Vec<String>,
    /// Warnings (stderr in human mode, `warnings` in JSON).
    pub warnings: Vec<String>,
    /// The error that ends the command, if any.
    pub error: Option<Error>,
}

impl Output {
    fn set(&mut self, key: &str, value: impl serde::Serialize) {
        self.json.insert(
            key.to_string(),
            serde_json::to_value(value).expect("serialisable"),
        );
    }
    fn line(&mut self, s: impl Into<String>) {
        self.lines.push(s.into());
    }
}

/// Runs the parsed command line and returns the exit code.
pub fn run(cli: Cli) -> u8 {
    let name = command_name(&cli.command);
    let (json, quiet) = (cli.global.json, cli.global.quiet);
    // `--progress` after the command name wins over one before it.
    let progress = match &cli.command {
        Command::Pack(a) => a.progress.progress,
        Command::Verify(a) => a.progress.progress,
        Command::Unpack(a) => a.progress.progress,
        Command::Check(a) => a.progress.progress,
        _ => None,
    }
    .or(cli.progress)
    .unwrap_or(ProgressArg::Auto);
    let ui = Ui::new(progress, quiet, name);
    let result = match cli.command {
        Command::Keygen(a) => keygen::run(a),
        Command::Pack(a) => pack::run(a, &ui),
        Command::Verify(a) => verify(a.bundle, &a.trust, a.deep, &ui),
        Command::Unpack(a) => unpack_command(a, &ui),
        Command::Inspect(a) => inspect(&a.bundle, a.sha256sums),
        Command::Check(a) => check::run(a, &ui),
        Command::Sign(a) => sign::run(a, &ui),
        Command::Completions { .. } | Command::Man { .. } if json => {
            // Their output is a script or a roff page; wrapping it in JSON would serve no one,
            // and printing it unwrapped would break the one-document promise of --json.
            let error = Error::Usage(format!(
                "{name} prints {}, not JSON: run it without --json",
                if name == "man" {
                    "a roff man page"
                } else {
                    "a shell script"
                }
            ));
            return render(
                name,
                Output {
                    error: Some(error),
                    ..Output::default()
                },
                true,
                quiet,
            );
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, "airlock", &mut text);
            return print_text(&text);
        }
        Command::Man { command } => {
            return print_text(&man::page(command.as_deref()));
        }
    };
    let out = result.unwrap_or_else(|e| Output {
        error: Some(e),
        ..Output::default()
    });
    ui.clear();
    render(name, out, json, quiet)
}

/// Writes a finished text (a completion script, a man page) to stdout. A reader that stops
/// early (`airlock man | head -1`) is not an error: exit quietly, as other Unix tools do.
fn print_text(text: &[u8]) -> u8 {
    match write_stdout(text) {
        Ok(()) => EXIT_OK,
        Err(e) => stdout_failed(EXIT_OK, &e),
    }
}

/// A result that could not be written (a full disk behind `> FILE`) is not a success.
fn stdout_failed(code: u8, e: &std::io::Error) -> u8 {
    eprintln!("airlock: error: standard output: {e}");
    if code == EXIT_OK {
        airlock::error::EXIT_OPERATIONAL
    } else {
        code
    }
}

/// Writes and flushes `bytes` to stdout, treating a closed pipe as done.
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The subcommand's name as the JSON `command` field gives it.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Keygen(_) => "keygen",
        Command::Pack(_) => "pack",
        Command::Verify(_) => "verify",
        Command::Unpack(_) => "unpack",
        Command::Inspect(_) => "inspect",
        Command::Check(_) => "check",
        Command::Sign(_) => "sign",
        Command::Completions { .. } => "completions",
        Command::Man { .. } => "man",
    }
}

/// Prints the result: one JSON document on stdout, or human lines on stdout and warnings and
/// the error on stderr. Returns the exit code. `main` uses it for argument-parsing errors too,
/// so every `--json` failure has the same shape.
pub fn render(command: &str, out: Output, json: bool, quiet: bool) -> u8 {
    let mut code = out.error.as_ref().map_or(EXIT_OK, Error::exit_code);
    if json {
        let mut doc = Map::new();
        if !command.is_empty() {
            doc.insert("command".into(), json!(command));
        }
        doc.insert("ok".into(), json!(code == EXIT_OK));
        doc.insert("exit_code".into(), json!(code));
        for (k, v) in out.json {
            doc.insert(k, v);
        }
        doc.insert("warnings".into(), json!(out.warnings));
        if let Some(e) = &out.error {
            doc.insert(
                "error".into(),
                json!({ "kind": e.kind(), "message": e.to_string(), "hint": e.hint() }),
            );
        }
        let mut text = serde_json::to_string_pretty(&Value::Object(doc)).expect("json");
        text.push('\n');
        if let Err(e) = write_stdout(text.as_bytes()) {
            code = stdout_failed(code, &e);
        }
    } else {
        if !quiet {
            let mut text = String::new();
            for l in &out.lines {
                text.push_str(l);
                text.push('\n');
            }
            if let Err(e) = write_stdout(text.as_bytes()) {
                code = stdout_failed(code, &e);
            }
            for w in &out.warnings {
                eprintln!("airlock: warning: {w}");
            }
        }
        if let Some(e) = &out.error {
            eprintln!("airlock: error: {e}");
            if let Some(h) = e.hint() {
                eprintln!("airlock: hint: {h}");
            }
        }
    }
    code
}

/// Refuses flags given without the flag they belong to. clap's `requires` cannot say this
/// here: it is skipped when the required flag conflicts with another one present
/// (clap-rs/clap#4520), which is exactly the case for the Hugging Face cache flags.
pub fn only_with(anchor: &str, anchor_present: bool, flags: &[(&str, bool)]) -> Result<()> {
    if anchor_present {
        return Ok(());
    }
    match flags.iter().find(|(_, present)| *present) {
        Some((flag, _)) => Err(Error::Usage(format!(
            "{flag} can only be used with {anchor}"
        ))),
        None => Ok(()),
    }
}

/// Loads the trust set from `--trust` (or `AIRLOCK_TRUST`).
pub fn load_trust(args: &TrustArgs) -> Result<Vec<PublicKey>> {
    let mut paths = args.trust.clone();
    if paths.is_empty()
        && let Some(env) = std::env::var_os("AIRLOCK_TRUST")
    {
        paths.push(PathBuf::from(env));
    }
    if paths.is_empty() {
        return Err(Error::Usage(
            "no trusted keys: pass --trust KEY.pub (or a directory of .pub files), or set AIRLOCK_TRUST".into(),
        ));
    }
    let mut out: Vec<(PublicKey, PathBuf)> = Vec::new();
    for p in &paths {
        let keys = keys::load_trust(p).map_err(|e| Error::Key {
            path: p.clone(),
            source: e,
        })?;
        for k in keys {
            match out.iter().find(|(o, _)| o.key_id == k.key_id) {
                None => out.push((k, p.clone())),
                Some((o, _)) if o.key == k.key => {}
                Some((_, first)) => {
                    // Two different keys claiming one id: which one "wins" must not depend on
                    // the order of the flags.
                    return Err(Error::Key {
                        path: p.clone(),
                        source: keys::KeyError::ConflictingKeyId {
                            key_id: k.key_id_hex(),
                            first: first.clone(),
                            second: p.clone(),
                        },
                    });
                }
            }
        }
    }
    Ok(out.into_iter().map(|(k, _)| k).collect())
}

/// Reads a password from the first line of a file.
pub fn password_from_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    let text = zeroize::Zeroizing::new(std::fs::read(path).map_err(|e| Error::io(path, e))?);
    let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(zeroize::Zeroizing::new(line.to_vec()))
}

fn verify(bundle: PathBuf, trust: &TrustArgs, deep: bool, ui: &Ui) -> Result<Output> {
    let trust = load_trust(trust)?;
    let mut out = Output::default();
    let opened = read::open(&bundle, &trust)?;
    out.warnings.extend(opened.warnings.iter().cloned());
    let m = &opened.manifest;
    out.set("bundle", &bundle);
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("signer", opened.signer.key_id_hex());
    out.set("manifest_sha256", &opened.manifest_sha256);
    out.set("deep", deep);
    // verify --deep in one pass: the stream checks every chunk digest while it reads (on a
    // thread of its own), so when the volumes are all there and the stream finds nothing wrong
    // with them, a separate read of every volume would prove nothing more. Any volume problem
    // falls back to the full per-volume check for the report.
    let mut streamed = None;
    if deep && read::volumes_look_complete(&opened) {
        streamed = Some(read::stream(&opened, Mode::Collect, &mut NullSink, ui));
    }
    let problems = match &streamed {
        Some(Ok(report)) if report.volume_problems.is_empty() => read::extra_problems(&opened),
        _ => read::check_volumes(&opened, ui),
    };
    let (fatal, extra): (Vec<_>, Vec<_>) = problems
        .into_iter()
        .partition(|p| p.index > 0 || read::is_volume_like(&p.volume));
    for p in &extra {
        out.warnings.push(format!("{}: {}", p.volume, p.problem));
    }
    out.set("volumes_checked", m.volumes.len());
    out.set("bad_volumes", &fatal);
    let mut bad_files = Vec::new();
    if deep {
        let streamed =
            streamed.unwrap_or_else(|| read::stream(&opened, Mode::Collect, &mut NullSink, ui));
        let completed = match streamed {
            Ok(report) => {
                bad_files = report.bad_files;
                true
            }
            Err(e) if fatal.is_empty() => {
                out.set("deep_completed", false);
                out.set("bad_files", &bad_files);
                out.error = Some(e);
                return Ok(out);
            }
            Err(e) => {
                out.warnings
                    .push(format!("the deep check stopped at the damage: {e}"));
                false
            }
        };
        out.set("deep_completed", completed);
        if completed {
            out.set("files_checked", m.files.len());
        }
        out.set("bad_files", &bad_files);
    }
    if !fatal.is_empty() {
        for p in &fatal {
            out.line(format!("BAD  {}: {}", p.volume, p.problem));
        }
        for f in &bad_files {
            out.line(format!("BAD  file {f}: content fails its sha256"));
        }
        out.error = Some(read::volumes_error(&fatal, m.volumes.len(), true));
        return Ok(out);
    }
    if !bad_files.is_empty() {
        for f in &bad_files {
            out.line(format!("BAD  file {f}: content fails its sha256"));
        }
        out.error = Some(Error::BadFile {
            path: bad_files.join(", "),
            reason: format!(
                "{} file(s) fail their sha256 although every volume matches",
                bad_files.len()
            ),
        });
        return Ok(out);
    }
    out.line(format!(
        "OK   {} version {}: signature by {}, {} volume(s), {}{}",
        m.name,
        m.version,
        opened.signer.key_id_hex(),
        m.volumes.len(),
        human(m.totals.volume_bytes),
        if deep {
            format!(", {} files checked", m.files.len())
        } else {
            String::new()
        }
    ));
    Ok(out)
}

/// Verifies the bundle's signature for an unpack and starts its output.
fn open_for_unpack(bundle: &Path, trust: &TrustArgs) -> Result<(read::Opened, Output)> {
    let trust = load_trust(trust)?;
    let mut out = Output::default();
    let opened = read::open(bundle, &trust)?;
    out.warnings.extend(opened.warnings.iter().cloned());
    let m = &opened.manifest;
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("signer", opened.signer.key_id_hex());
    Ok((opened, out))
}

/// What every install reports: stale staging it removed and model-check findings.
fn report_install(
    out: &mut Output,
    cleaned_stale: &[PathBuf],
    findings: &[airlock::inspect::Finding],
) {
    for p in cleaned_stale {
        out.warnings.push(format!(
            "removed stale staging directory {} left by an interrupted unpack",
            p.display()
        ));
    }
    for f in findings {
        out.warnings.push(format!(
            "model check: {}: {} ({})",
            f.path, f.problem, f.fix
        ));
    }
}

fn unpack(bundle: &Path, trust: &TrustArgs, opts: UnpackOptions, ui: &Ui) -> Result<Output> {
    let (opened, mut out) = open_for_unpack(bundle, trust)?;
    let m = &opened.manifest;
    let installed = install::unpack(&opened, &opts, ui)?;
    report_install(&mut out, &installed.cleaned_stale, &installed.findings);
    out.set("findings", &installed.findings);
    out.set("dest", &installed.dest);
    out.set("replaced", installed.replaced);
    out.set("previous_version", installed.previous_version);
    out.set("files", m.totals.files);
    out.set("bytes", m.totals.file_bytes);
    out.line(format!(
        "OK   installed {} version {} into {} ({} files, {})",
        m.name,
        m.version,
        installed.dest.display(),
        m.totals.files,
        human(m.totals.file_bytes)
    ));
    Ok(out)
}

fn unpack_command(a: UnpackArgs, ui: &Ui) -> Result<Output> {
    only_with(
        "--hf-cache",
        a.hf_cache.is_some(),
        &[
            ("--hf-repo", a.hf_repo.is_some()),
            ("--revision", a.revision.is_some()),
            ("--repo-type", a.repo_type.is_some()),
        ],
    )?;
    match a.hf_cache {
        Some(cache) => unpack_hf(
            &a.bundle,
            &a.trust,
            HfUnpackOptions {
                cache: std::path::absolute(&cache).map_err(|e| Error::io(&cache, e))?,
                repo_id: a.hf_repo,
                repo_type: a.repo_type.map(|t| t.as_str().to_string()),
                revision: a.revision,
                check_space: !a.no_space_check,
            },
            ui,
        ),
        None => unpack(
            &a.bundle,
            &a.trust,
            UnpackOptions {
                dest: a.dest.expect("clap requires --dest without --hf-cache"),
                replace: a.replace,
                allow_downgrade: a.allow_downgrade,
                check_space: !a.no_space_check,
            },
            ui,
        ),
    }
}

fn unpack_hf(bundle: &Path, trust: &TrustArgs, opts: HfUnpackOptions, ui: &Ui) -> Result<Output> {
    let (opened, mut out) = open_for_unpack(bundle, trust)?;
    let m = &opened.manifest;
    let installed = install_hf::unpack_to_cache(&opened, &opts, ui)?;
    report_install(&mut out, &installed.cleaned_stale, &installed.findings);
    for b in &installed.blobs_repaired {
        out.warnings.push(format!(
            "{} did not hash to its name and was replaced by the verified copy from the bundle",
            b.display()
        ));
    }
    if installed.commit_derived {
        out.warnings.push(format!(
            "the bundle was packed from a directory, so it has no hub commit: installed as commit {} (the first 40 hex digits of its manifest's sha256)",
            installed.commit
        ));
    }
    if installed.ref_path.is_none() {
        out.warnings.push(
            "no ref was written: the revision is the commit itself, so huggingface_hub finds it only by commit id; pass --revision main (or another branch or tag) to name it".to_string(),
        );
    }
    if let Some(old) = &installed.previous_commit {
        out.warnings.push(format!(
            "refs/{} named commit {old:?}; it now names {}",
            installed.revision, installed.commit
        ));
    }
    if let Value::Object(fields) = serde_json::to_value(&installed).expect("serialisable") {
        out.json.extend(fields);
    }
    out.set("files", m.totals.files);
    out.set("bytes", m.totals.file_bytes);
    let state = match installed.snapshot_state {
        SnapshotState::Created => "new snapshot",
        SnapshotState::Merged => "added to the existing snapshot",
        SnapshotState::Unchanged => "the snapshot already held every file",
    };
    out.line(format!(
        "OK   installed {} version {} into the Hugging Face cache {} as {} {} (revision {}, commit {}): {} files ({}); {}, {} new blob(s), {} reused",
        m.name,
        m.version,
        installed.cache.display(),
        installed.repo_type,
        installed.repo_id,
        installed.revision,
        installed.commit,
        m.totals.files,
        human(m.totals.file_bytes),
        state,
        installed.blobs_written,
        installed.blobs_reused,
    ));
    Ok(out)
}

fn inspect(bundle: &Path, sha256sums: bool) -> Result<Output> {
    let (m, bytes, sig) = read::read_unverified(bundle)?;
    let mut out = Output::default();
    if sha256sums {
        for f in &m.files {
            out.line(format!("{}  {}", f.sha256, f.path));
        }
        out.set("sha256sums", out.lines.clone());
        return Ok(out);
    }
    use sha2::Digest;
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("created", &m.created);
    out.set("signer", sig.as_ref().map(|s| s.key_id_hex()));
    out.set("signature_verified", false);
    out.set("manifest_sha256", hex::encode(sha2::Sha256::digest(&bytes)));
    out.set("compression", &m.compression);
    out.set("totals", &m.totals);
    out.set(
        "volumes",
        m.volumes
            .iter()
            .map(|v| json!({"name": v.name, "size": v.size, "sha256": v.sha256}))
            .collect::<Vec<_>>(),
    );
    out.set("directories", &m.directories);
    out.set("files", &m.files);
    if let Some(src) = &m.source {
        out.set("source", src);
    }
    out.warnings.extend(
        m.warnings
            .iter()
            .map(|w| format!("recorded at pack time: {}: {}", w.path, w.problem)),
    );
    out.line(format!("name:        {}", m.name));
    out.line(format!("version:     {}", m.version));
    out.line(format!("created:     {}", m.created));
    out.line(format!(
        "signer:      {} (not verified; use `airlock verify`)",
        sig.as_ref()
            .map_or("NONE (no manifest.json.minisig)".into(), |s| s.key_id_hex())
    ));
    if let Some(src) = &m.source {
        out.line(format!(
            "source:      Hugging Face {} {}, revision {}, commit {}",
            src.repo_type, src.repo_id, src.revision, src.commit
        ));
    }
    out.line(format!(
        "compression: {}{}",
        m.compression.algorithm,
        m.compression
            .level
            .map(|l| format!(" level {l}"))
            .unwrap_or_default()
    ));
    out.line(format!(
        "contents:    {} files, {} directories, {}",
        m.totals.files,
        m.totals.directories,
        human(m.totals.file_bytes)
    ));
    out.line(format!(
        "volumes:     {} ({})",
        m.volumes.len(),
        human(m.totals.volume_bytes)
    ));
    for v in &m.volumes {
        out.line(format!("  {}  {:>14}  {}", v.name, v.size, v.sha256));
    }
    out.line("files:".to_string());
    for f in &m.files {
        out.line(format!(
            "  {:>14}  {}{}",
            f.size,
            f.path,
            if f.executable { " (executable)" } else { "" }
        ));
    }
    if m.files.is_empty() {
        out.line("  (none)".to_string());
    }
    Ok(out)
}
