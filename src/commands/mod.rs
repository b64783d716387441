//! One function per subcommand. This layer, and only this layer, prints: a command returns an
//! [`Output`] (JSON fields, human lines, warnings, maybe an error) and [`run`] renders it.

mod check;
mod copy;
mod damage_map;
mod files;
mod inspect;
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
mod verify;
mod verify_file;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use airlock::bundle::open;
use airlock::error::{EXIT_OK, Error, Result};
use airlock::trust::{Clock, Policy, TRUST_ENV, TrustSource};

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
            verify::run(a.bundle, &a.trust, a.deep, a.cached, &ui)
        }
        Command::Copy(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_copy(&a));
            copy::run(a, &ui)
        }
        Command::Unpack(a) => {
            exit_cleanly_on_signals(&ui, name, json, quiet, interrupt::kept_by_unpack(&a));
            unpack::run(a, &ui)
        }
        Command::Inspect(a) => inspect::run(&a.bundle, a.sha256sums),
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
            return render(name, man::not_json(name), true, quiet);
        }
        Command::Completions { shell } => return print_text(&man::completions(shell)),
        Command::Man { command } => return print_text(&man::page(command.as_deref())),
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
        Command::Unpack(a) if !airlock::source::registry::is_reference(&a.bundle) => {
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

/// Reads a password from the first line of a file ([`airlock::signing::read_password_file`]:
/// a FIFO works, the read is bounded).
pub fn password_from_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    airlock::signing::read_password_file(path)
}

/// Whether a finding the packer recorded is an error: the model was packed broken on purpose
/// (`--no-model-checks`), which every command that reads the bundle says again.
pub(crate) fn recorded_error(w: &airlock::manifest::Warning) -> bool {
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
pub(crate) fn recorded_errors(
    m: &airlock::manifest::Manifest,
) -> impl Iterator<Item = String> + '_ {
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
