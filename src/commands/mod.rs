//! One function per subcommand. This layer, and only this layer, prints: a command returns an
//! [`Output`] (JSON fields, human lines, warnings, maybe an error) and [`run`] renders it.

mod check;
mod copy;
mod damage_map;
mod files;
mod interrupt;
mod keygen;
mod man;
mod pack;
mod push;
mod repair;
mod secret;
mod sign;
mod term;
mod trust;
mod ui;
mod unpack;
mod values;
mod verify_file;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use airlock::bundle::open;
use airlock::display::human;
use airlock::error::{EXIT_OK, Error, Result};
use airlock::trust::{Clock, Policy, TRUST_ENV, TrustSource};
use airlock::verify::{self, DeepOutcome, Depth};

use crate::cli::{Cli, Command, ProgressArg, TrustArgs};
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
    /// The bundle and trust flags the error's hint names instead of its placeholders.
    pub hint_paths: airlock::error::HintPaths,
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
        Command::Copy(a) => a.progress.progress,
        Command::Unpack(a) => a.progress.progress,
        Command::Check(a) => a.progress.progress,
        Command::Repair(a) => a.progress.progress,
        Command::Push(a) => a.progress.progress,
        _ => None,
    }
    .or(cli.progress)
    .unwrap_or(ProgressArg::Auto);
    let ui = Ui::new(progress, quiet, name).with_damage_maps(!json && !quiet);
    let hint_paths = hint_paths_of(&cli.command);
    let result = match cli.command {
        Command::Keygen(a) => keygen::run(a),
        Command::Pack(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_pack(&a));
            pack::run(*a, &ui)
        }
        Command::Verify(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_reading(name));
            verify(a.bundle, &a.trust, a.deep, a.cached, &ui)
        }
        Command::Copy(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_copy(&a));
            copy::run(a, &ui)
        }
        Command::Unpack(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_unpack(&a));
            unpack::run(a, &ui)
        }
        Command::Inspect(a) => inspect(&a.bundle, a.sha256sums),
        Command::Check(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_reading(name));
            check::run(a, &ui)
        }
        Command::Sign(a) => sign::run(a, &ui),
        Command::Repair(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_repair(&a));
            repair::run(a, &ui)
        }
        Command::Push(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_push(&a));
            push::run(a, &ui)
        }
        Command::Cosign(a) => trust::cosign(a, &ui),
        Command::Trust(a) => trust::run(a, &ui),
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
    let mut out = result.unwrap_or_else(|e| Output {
        error: Some(e),
        ..Output::default()
    });
    out.hint_paths = hint_paths;
    interrupt::claim_output_for_result();
    ui.clear();
    render(name, out, json, quiet)
}

/// Writes a finished text (a completion script, a man page) to stdout. A reader that stops
/// early (`airlock man | head -1`) is not an error: exit quietly, as other Unix tools do.
fn print_text(text: &[u8]) -> u8 {
    match term::out_generated(text) {
        Ok(()) => EXIT_OK,
        Err(e) => stdout_failed(EXIT_OK, &e),
    }
}

/// A result that could not be written (a full disk behind `> FILE`) is not a success.
fn stdout_failed(code: u8, e: &std::io::Error) -> u8 {
    term::err_line(&format!("airlock: error: standard output: {e}"));
    if code == EXIT_OK {
        airlock::error::EXIT_OPERATIONAL
    } else {
        code
    }
}

/// A path as one shell word: as it is when it needs no quoting, else in single quotes.
pub(crate) fn shell_word(p: &Path) -> String {
    let text = p.display().to_string();
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// What the hints of a command's errors name instead of `BUNDLE` and `--trust KEY`: the bundle
/// directories and `--trust` flags of its command line (issue 33 item 10).
pub(crate) fn hint_paths(bundles: &[&Path], trust: &TrustArgs) -> airlock::error::HintPaths {
    airlock::error::HintPaths {
        bundle: bundles.iter().map(|b| shell_word(b)).collect(),
        trust: Some(
            trust
                .trust
                .iter()
                .map(|t| format!(" --trust {}", shell_word(t)))
                .collect(),
        ),
    }
}

fn hint_paths_of(command: &Command) -> airlock::error::HintPaths {
    let dirs = |first: &PathBuf, more: &[PathBuf]| -> Vec<PathBuf> {
        std::iter::once(first).chain(more).cloned().collect()
    };
    let (bundles, trust) = match command {
        Command::Verify(a) => (a.bundle.clone(), &a.trust),
        Command::Unpack(a) if !airlock::oci::pull::is_reference(&a.bundle) => {
            (dirs(&a.bundle, &a.more), &a.trust)
        }
        Command::Repair(a) => (dirs(&a.bundle, &a.more), &a.trust),
        Command::Push(a) => (a.bundle.clone(), &a.trust),
        Command::Copy(a) => (vec![a.bundle.clone()], &a.trust),
        _ => return airlock::error::HintPaths::default(),
    };
    let refs: Vec<&Path> = bundles.iter().map(PathBuf::as_path).collect();
    hint_paths(&refs, trust)
}

/// The subcommand's name as the JSON `command` field gives it.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Keygen(_) => "keygen",
        Command::Pack(_) => "pack",
        Command::Verify(_) => "verify",
        Command::Copy(_) => "copy",
        Command::Unpack(_) => "unpack",
        Command::Inspect(_) => "inspect",
        Command::Check(_) => "check",
        Command::Sign(_) => "sign",
        Command::Repair(_) => "repair",
        Command::Push(_) => "push",
        Command::Cosign(_) => "cosign",
        Command::Trust(_) => "trust",
        Command::Completions { .. } => "completions",
        Command::Man { .. } => "man",
    }
}

/// Prints the result: one JSON document on stdout, or human lines on stdout and warnings and
/// the error on stderr. Returns the exit code. `main` uses it for argument-parsing errors too,
/// so every `--json` failure has the same shape.
///
/// Every line for a person goes out through [`term`], escaped (`airlock::display`): the lines,
/// the warnings, the error and its hint. In a JSON document the text meant for a person
/// (`warnings`, `error.message`, `error.hint`) is escaped the same way, so `jq -r` prints it as
/// safely as the human mode does; the other values are data and stay exact.
pub fn render(command: &str, out: Output, json: bool, quiet: bool) -> u8 {
    use airlock::display::escape;
    let mut code = out.error.as_ref().map_or(EXIT_OK, Error::exit_code);
    let hint = out.error.as_ref().and_then(|e| e.hint_at(&out.hint_paths));
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
        let warnings: Vec<_> = out.warnings.iter().map(|w| escape(w)).collect();
        doc.insert("warnings".into(), json!(warnings));
        if let Some(e) = &out.error {
            doc.insert(
                "error".into(),
                json!({
                    "kind": e.kind(),
                    "message": escape(&e.to_string()),
                    "hint": hint.as_ref().map(|h| escape(h).into_owned()),
                }),
            );
        }
        let mut text = serde_json::to_string_pretty(&Value::Object(doc)).expect("json");
        text.push('\n');
        if let Err(e) = term::out_json(&text) {
            code = stdout_failed(code, &e);
        }
    } else {
        if !quiet {
            if let Err(e) = term::out_lines(&out.lines) {
                code = stdout_failed(code, &e);
            }
            for w in &out.warnings {
                term::err_line(&format!("airlock: warning: {w}"));
            }
        }
        if let Some(e) = &out.error {
            term::err_line(&format!("airlock: error: {e}"));
            if let Some(h) = &hint {
                term::err_line(&format!("airlock: hint: {h}"));
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

/// Resolves `--trust` and `AIRLOCK_TRUST` into the one trust source (the rule lives in
/// [`airlock::trust`]).
pub fn trust_source(args: &TrustArgs) -> Result<TrustSource> {
    TrustSource::resolve(&args.trust, std::env::var_os(TRUST_ENV))
}

/// The clock root expiry is checked against: this machine's, or `--assume-now DATE`.
pub fn trust_clock(assume_now: Option<&str>) -> Result<Clock> {
    match assume_now {
        None => Ok(Clock::system()),
        Some(text) => airlock::trust::time::parse_arg(text)
            .map(Clock::assumed)
            .map_err(|e| Error::Usage(format!("--assume-now: {e}"))),
    }
}

/// Loads the trust policy a command cannot do without.
pub fn load_trust(args: &TrustArgs) -> Result<Policy> {
    trust_source(args)?.require_at(trust_clock(args.assume_now.as_deref())?)
}

/// What every command that verifies with a policy reports about it: the clock override (loud),
/// an expiry coming soon, history links that did not verify, who signed and which root
/// version vouched.
pub(crate) fn report_trust(out: &mut Output, policy: &Policy, info: &open::TrustInfo) {
    if let Some(w) = policy.clock.warning() {
        out.warnings.insert(0, w);
    }
    let effective = info.policy.as_ref().unwrap_or(policy);
    out.warnings.extend(effective.expiry_warning());
    if let Some(tr) = &policy.root {
        out.warnings.extend(tr.notes.iter().cloned());
        out.set("trust_root_version", tr.root.version);
    }
    out.set("signers", &info.signers);
    out.set("threshold", effective.threshold);
    if effective.root.is_some() || info.signers.len() > 1 {
        out.line(format!(
            "signed by {} of the {} required: {}",
            info.signers.len(),
            effective.threshold,
            info.signers
                .iter()
                .map(|s| s.key.clone())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(u) = &info.update {
        out.set(
            "trust_update",
            json!({"from": u.from, "to": u.to(), "applied": false}),
        );
    }
}

/// After a successful install: writes the root update the bundle carried (the root file given
/// with --trust, atomically, its history beside it) and says so.
pub(crate) fn apply_trust_update(
    out: &mut Output,
    policy: &Policy,
    info: &open::TrustInfo,
) -> Result<()> {
    let Some(u) = &info.update else {
        return Ok(());
    };
    match airlock::trust::update::apply(policy, u) {
        Ok(Some(applied)) => {
            out.line(format!(
                "OK   trust root {} updated from version {} to version {} (earlier versions kept in {})",
                applied.path.display(),
                applied.from,
                applied.to,
                applied.history.display()
            ));
            out.set(
                "trust_update",
                json!({"from": applied.from, "to": applied.to, "applied": true, "root": applied.path, "history": applied.history}),
            );
            Ok(())
        }
        Ok(None) => {
            out.warnings.push(format!(
                "the bundle's trust root version {} was not written: the root file is already at that version or later",
                u.to()
            ));
            Ok(())
        }
        Err(e) => {
            out.warnings.push(
                "the model was installed, but the trust root update it carried was not written"
                    .to_string(),
            );
            Err(e)
        }
    }
}

/// On SIGINT or SIGTERM, removes this process's work directories (never a destination),
/// clears the progress bar, says what was removed and what was `kept`, and exits 130 or 143
/// (`interrupt.rs`). Installed for the commands that create work directories, and for
/// `verify` and `check`, which report that they changed nothing.
fn exit_cleanly_on_signals(ui: &Ui, command: &'static str, json: bool, quiet: bool, kept: String) {
    interrupt::install(interrupt::OnSignal {
        command,
        json,
        quiet,
        kept,
        screen: ui.screen(),
    });
}

/// The most a password file is read: a password is one line; `/dev/zero` or a multi-gigabyte
/// file given by mistake must not be read to the end.
const PASSWORD_FILE_CAP: u64 = 64 << 10;

/// Reads a password from the first line of a file. A FIFO (`--password-file <(pass show k)`)
/// works; at most [`PASSWORD_FILE_CAP`] bytes are read.
pub fn password_from_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let file = airlock::fsio::open_operator_stream(path).map_err(|e| Error::io(path, e))?;
    let mut text = zeroize::Zeroizing::new(Vec::new());
    file.take(PASSWORD_FILE_CAP + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(path, e))?;
    if text.len() as u64 > PASSWORD_FILE_CAP && !text[..PASSWORD_FILE_CAP as usize].contains(&b'\n')
    {
        return Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not a password file: no line break in its first {} KiB",
                    PASSWORD_FILE_CAP >> 10
                ),
            ),
        ));
    }
    let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(zeroize::Zeroizing::new(line.to_vec()))
}

/// Whether a finding the packer recorded is an error: the model was packed broken on purpose
/// (`--no-model-checks`), which every command that reads the bundle says again.
fn recorded_error(w: &airlock::manifest::Warning) -> bool {
    airlock::inspect::codes::severity(&w.code) == airlock::inspect::Severity::Error
}

/// The findings the packer recorded in the signed manifest, for a command that reads the
/// bundle: the JSON's `recorded_findings` lists them all; an error (the model packed broken
/// with `--no-model-checks`) is a warning every time, as it always was; the warnings are said
/// once, by the pack, and then only counted, with where to read them (issue 33 item 6: every
/// command that read the demo's bundle repeated its norm-weights warning).
pub(crate) fn recorded_findings(
    out: &mut Output,
    m: &airlock::manifest::Manifest,
    bundle: Option<&Path>,
) {
    out.set("recorded_findings", &m.warnings);
    out.warnings.extend(recorded_errors(m));
    out.lines.extend(recorded_clause(m, bundle));
}

/// `2 model-check warnings recorded at pack time, not repeated here (`airlock inspect B` lists
/// them)`, or `None` when none was recorded.
pub(crate) fn recorded_clause(
    m: &airlock::manifest::Manifest,
    bundle: Option<&Path>,
) -> Option<String> {
    let n = m.warnings.iter().filter(|w| !recorded_error(w)).count();
    let (warnings, them) = match n {
        0 => return None,
        1 => ("warning", "it"),
        _ => ("warnings", "them"),
    };
    Some(format!(
        "{n} model-check {warnings} recorded at pack time, not repeated here ({})",
        match bundle {
            Some(b) => format!("`airlock inspect {}` lists {them}", shell_word(b)),
            None => format!("--json lists {them} under recorded_findings"),
        }
    ))
}

/// The errors the packer recorded, as warnings.
fn recorded_errors(m: &airlock::manifest::Manifest) -> impl Iterator<Item = String> + '_ {
    recorded_warnings(m)
        .zip(&m.warnings)
        .filter(|(_, w)| recorded_error(w))
        .map(|(text, _)| text)
}

/// The findings the packer recorded in the signed manifest, as warnings: `inspect` lists them.
pub(crate) fn recorded_warnings(
    m: &airlock::manifest::Manifest,
) -> impl Iterator<Item = String> + '_ {
    m.warnings.iter().map(|w| {
        format!(
            "recorded at pack time: {}: {} ({})",
            w.path, w.problem, w.code
        )
    })
}

/// `airlock verify`: the library's verdict, rendered.
fn verify(
    bundles: Vec<PathBuf>,
    trust: &TrustArgs,
    deep: bool,
    cached: bool,
    ui: &Ui,
) -> Result<Output> {
    let trust = load_trust(trust)?;
    let bundle = bundles[0].clone();
    if verify_file::is_file(&bundle) {
        if bundles.len() > 1 {
            return Err(Error::Usage(format!(
                "{} is one file, checked by its signature alone: give it alone",
                bundle.display()
            )));
        }
        if deep {
            return Err(Error::Usage(format!(
                "--deep checks the files inside a bundle; {} is one file, checked by its signature alone",
                bundle.display()
            )));
        }
        return verify_file::run(&bundle, &trust);
    }
    let mut out = Output::default();
    let mut opened = open::open_media(&bundles, &trust)?;
    opened.media.set_read(if cached {
        airlock::fsio::MediumRead::Cached
    } else {
        airlock::fsio::MediumRead::Device
    });
    report_trust(&mut out, &trust, &opened.trust);
    if let Some(u) = &opened.trust.update {
        out.line(format!(
            "the bundle carries trust root version {} (verified against version {}); unpack applies it, verify leaves the root file as it is",
            u.to(),
            u.from
        ));
    }
    let depth = if deep { Depth::Deep } else { Depth::Volumes };
    let verdict = verify::verify(&opened, depth, ui);
    let m = &opened.manifest;
    out.warnings
        .extend(verdict.signature_warnings.iter().cloned());
    out.warnings.extend(recorded_errors(m));
    out.set("bundle", &bundle);
    out.set("media", opened.media.dirs());
    out.set("name", &m.name);
    out.set("version", m.version);
    out.set("format_version", m.format_version);
    out.set("signer", opened.signer.key_id_hex());
    out.set("manifest_sha256", &opened.manifest_sha256);
    out.set("deep", deep);
    out.set("recorded_findings", &verdict.recorded_warnings);
    for s in verdict.stray_others() {
        out.warnings.push(format!("{}: {}", s.name, s.problem()));
    }
    out.set("volumes_checked", verdict.volumes_checked);
    out.set("bad_volumes", &verdict.bad_volumes);
    out.set("parity_volumes_checked", verdict.parity_checked);
    out.set("bad_parity_volumes", &verdict.bad_parity);
    // Whether the damage can be rebuilt from parity: null when there is nothing to rebuild.
    let damaged = !verdict.is_ok();
    out.set(
        "repairable",
        damaged.then(|| verdict.repair.as_ref().is_some_and(|r| r.repairable)),
    );
    out.set("parity_assessment", &verdict.repair);
    out.set(
        "stray_volumes",
        verdict.stray_volumes().map(|s| &s.name).collect::<Vec<_>>(),
    );
    if let Some(outcome) = &verdict.deep {
        match outcome {
            DeepOutcome::Completed { bad_files } => {
                out.set("deep_completed", true);
                out.set("files_checked", m.files.len());
                out.set("bad_files", bad_files);
            }
            DeepOutcome::StoppedAtDamage(reason) => {
                out.set("deep_completed", false);
                out.set("bad_files", Vec::<String>::new());
                out.warnings
                    .push(format!("the deep check stopped at the damage: {reason}"));
            }
            DeepOutcome::Failed(_) => {
                out.set("deep_completed", false);
                out.set("bad_files", Vec::<String>::new());
            }
        }
    }
    if let Some(base) = &m.base {
        delta_summary(&mut out, m, base);
        if deep {
            let c = airlock::delta::Counts::of(m);
            out.warnings.push(format!(
                "delta: the stream and its {} patch(es) were checked against their digests; the {} file(s) taken from or rebuilt against the base ({} of {}) can only be checked on install, against {} version {}",
                c.patched_files,
                c.copied_files + c.patched_files,
                human(c.copied_bytes + c.patched_bytes),
                human(m.totals.file_bytes),
                base.name,
                base.version
            ));
        }
    }
    report_reads(&mut out, &verdict);
    if verdict.is_ok() {
        let recorded_errors = m.warnings.iter().filter(|w| recorded_error(w)).count();
        let recorded = recorded_clause(m, Some(&bundle));
        out.line(format!(
            "OK   {} version {}: signature by {}, {} volume(s), {}{}{}{}{}",
            m.name,
            m.version,
            opened.signer.key_id_hex(),
            m.volumes.len(),
            human(m.totals.volume_bytes),
            match &m.parity {
                Some(p) => format!(
                    " + {} parity volume(s), {}",
                    p.volumes.len(),
                    human(p.volumes.iter().map(|v| v.size).sum())
                ),
                None => String::new(),
            },
            if deep && m.base.is_some() {
                let c = airlock::delta::Counts::of(m);
                format!(
                    ", {} carried file(s) and {} patch(es) checked",
                    c.carried_files, c.patched_files
                )
            } else if deep {
                format!(", {} files checked", m.files.len())
            } else {
                String::new()
            },
            if !verdict.reads.is_empty() && verdict.all_from_medium() {
                ", read from the medium"
            } else if verdict.reads.is_empty() {
                ""
            } else {
                ", NOT all read from the medium (see the warnings)"
            },
            match recorded_errors {
                0 => String::new(),
                1 => "; 1 model-check finding recorded at pack time (see the warning)".into(),
                n => format!("; {n} model-check findings recorded at pack time (see the warnings)"),
            } + &recorded.map(|r| format!("; {r}")).unwrap_or_default()
        ));
        return Ok(out);
    }
    // On a terminal, a map of the damage first (issue 25 item 13); pipes get the list alone.
    if let (Some(map), Some(cols)) = (
        &verdict.damage,
        damage_map::terminal_width(&console::Term::stdout()),
    ) && let Some(lines) = damage_map::draw(map, cols)
    {
        out.lines.extend(lines);
    }
    for p in verdict.bad_volumes.iter().chain(&verdict.bad_parity) {
        out.line(format!("BAD  {}: {}", p.volume, p.problem));
    }
    if let Some(r) = &verdict.repair {
        out.line(r.describe());
    }
    for s in verdict.stray_volumes() {
        out.line(format!("BAD  {}: {}", s.name, s.problem()));
    }
    for f in verdict.bad_files() {
        out.line(format!("BAD  file {f}: content fails its sha256"));
    }
    out.error = verdict.into_error();
    Ok(out)
}

/// Where verify's bytes came from: `read_from` ("medium", "page-cache" or "mixed") and each
/// volume not read from the medium with why, in the JSON; a warning per reason otherwise
/// (issue 32: a green verify of the page cache says nothing about the stick).
fn report_reads(out: &mut Output, verdict: &verify::Verdict) {
    let from_medium = verdict
        .reads
        .iter()
        .filter(|r| r.read_from.from_medium())
        .count();
    let summary = if from_medium == verdict.reads.len() {
        "medium"
    } else if from_medium == 0 {
        "page-cache"
    } else {
        "mixed"
    };
    out.set("read_from", summary);
    out.set("volumes_read_from_medium", from_medium);
    let others: Vec<_> = verdict
        .reads
        .iter()
        .filter(|r| !r.read_from.from_medium())
        .collect();
    out.set("not_read_from_medium", &others);
    let mut by_reason: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in &others {
        by_reason
            .entry(r.why.as_deref().unwrap_or("not from the medium"))
            .or_default()
            .push(&r.volume);
    }
    for (why, volumes) in by_reason {
        out.warnings.push(format!(
            "{} not read from the medium: {why}",
            match volumes.as_slice() {
                [one] => format!("{one} was"),
                [first, .., last] => format!("{} volumes ({first} to {last}) were", volumes.len()),
                [] => continue,
            }
        ));
    }
    for n in &verdict.copy_notes {
        out.warnings.push(n.clone());
    }
}

/// The `base` of a delta and how its files travel, for verify and inspect.
fn delta_summary(
    out: &mut Output,
    m: &airlock::manifest::Manifest,
    base: &airlock::manifest::Base,
) {
    let c = airlock::delta::Counts::of(m);
    out.set("base", base);
    out.set("delta", c);
    out.line(format!(
        "base:        delta of {} version {} (manifest sha256 {})",
        base.name, base.version, base.manifest_sha256
    ));
    out.line(format!(
        "delta:       {} file(s) carried ({}), {} taken from the base ({}), {} patched ({} from {} of patches)",
        c.carried_files,
        human(c.carried_bytes),
        c.copied_files,
        human(c.copied_bytes),
        c.patched_files,
        human(c.patched_bytes),
        human(c.patch_bytes)
    ));
}

fn inspect(bundle: &Path, sha256sums: bool) -> Result<Output> {
    let (m, bytes, sig) = open::read_unverified(bundle)?;
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
            .map(|v| match &v.sha256 {
                Some(sha) => json!({"name": v.name, "size": v.size, "sha256": sha}),
                None => json!({"name": v.name, "size": v.size}),
            })
            .collect::<Vec<_>>(),
    );
    out.set("directories", &m.directories);
    out.set("files", &m.files);
    if let Some(src) = &m.source {
        out.set("source", src);
    }
    out.warnings.extend(recorded_warnings(&m));
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
    if let Some(base) = &m.base {
        delta_summary(&mut out, &m, base);
    }
    if let Some(v) = &m.values {
        out.set("values", v);
        out.line(format!("values:      {}", values::summary(v)));
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
        let digest = v.sha256.as_deref().map_or_else(
            || format!("{} chunk digest(s)", v.chunks.len()),
            str::to_string,
        );
        out.line(format!("  {}  {:>14}  {digest}", v.name, v.size));
    }
    if let Some(p) = &m.parity {
        out.set("parity", p);
        out.line(format!(
            "parity:      {} volume(s) ({}), {} of {} units per stripe, {} stripes ({})",
            p.volumes.len(),
            human(p.volumes.iter().map(|v| v.size).sum()),
            p.recovery_units,
            p.data_units + p.recovery_units,
            p.stripes,
            p.algorithm
        ));
        for v in &p.volumes {
            out.line(format!(
                "  {}  {:>14}  {} chunk digest(s)",
                v.name,
                v.size,
                v.chunks.len()
            ));
        }
    }
    out.line("files:".to_string());
    for f in &m.files {
        out.line(format!(
            "  {:>14}  {}{}{}",
            f.size,
            f.path,
            if f.executable { " (executable)" } else { "" },
            match (&f.from, f.patch()) {
                (None, _) => String::new(),
                (Some(fr), None) => format!(" (from the base: {})", fr.path),
                (Some(fr), Some((size, _))) => format!(
                    " (patched from the base's {}: {size}-byte {} patch)",
                    fr.path,
                    fr.map.as_deref().unwrap_or("?")
                ),
            }
        ));
    }
    if m.files.is_empty() {
        out.line("  (none)".to_string());
    }
    Ok(out)
}
