//! SIGINT (Ctrl-C) and SIGTERM during `pack`, `unpack`, `repair`, `push` and `copy`: the work
//! directories are removed ([`airlock::staging::interrupt`]), the progress bar is taken off the
//! screen, and one report says what was removed and what was kept (one JSON document under
//! `--json`, with `error.kind` `interrupted`); then the process exits 130 or 143. `verify` and
//! `check` make no work directory but report the same way (issue 33 item 7: they used to die
//! silently, with no JSON document), saying that they changed nothing.
//!
//! The report and the command's own result never both print: whichever comes first owns the
//! output. The main thread, finding that a signal came first, waits for the exit the signal
//! thread performs; a signal that arrives while the result is being printed exits at once,
//! printing nothing more.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use airlock::error::Error;

use super::Output;
use super::ui::Screen;
use crate::cli::{CopyArgs, PackArgs, PushArgs, RepairArgs, UnpackArgs};

/// Who prints: nobody yet, the command's result, or the signal report.
static OUTPUT: AtomicU8 = AtomicU8::new(FREE);
const FREE: u8 = 0;
const RESULT: u8 = 1;
const REPORT: u8 = 2;

/// Called by the main thread before it prints the command's result: returns when the result
/// may be printed, and never after a signal (whose thread prints its report and exits).
pub(super) fn claim_output_for_result() {
    if OUTPUT
        .compare_exchange(FREE, RESULT, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        loop {
            std::thread::park();
        }
    }
}

/// What the signal thread needs to report.
pub(super) struct OnSignal {
    /// The command's name, for the JSON document.
    pub command: &'static str,
    /// `--json`.
    pub json: bool,
    /// `-q`.
    pub quiet: bool,
    /// What stays as it was, as this command knows it.
    pub kept: String,
    /// The progress display, to clear.
    pub screen: Screen,
}

/// Installs the SIGINT/SIGTERM handler (the `signal-hook` crate's iterator thread, so no
/// `unsafe` of ours).
pub(super) fn install(on: OnSignal) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            on.screen.silence();
            let held = airlock::staging::interrupt();
            if OUTPUT
                .compare_exchange(FREE, REPORT, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                std::process::exit(128 + signal);
            }
            // Work directories beside a relative path are `./NAME`: shown as the operator
            // would name them.
            let removed: Vec<PathBuf> = held
                .removed
                .iter()
                .map(|p| p.strip_prefix(".").unwrap_or(p).to_path_buf())
                .collect();
            let resumable: Vec<PathBuf> = held
                .kept
                .iter()
                .map(|p| p.strip_prefix(".").unwrap_or(p).to_path_buf())
                .collect();
            let kept = if resumable.is_empty() {
                on.kept
            } else {
                format!(
                    "kept {} with the files verified so far: rerun the same command to resume; {}",
                    resumable
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    on.kept
                )
            };
            let mut out = Output::default();
            out.set("kept_for_resume", &resumable);
            out.set(
                "signal",
                if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                },
            );
            out.set("removed", &removed);
            out.set("kept", &kept);
            out.error = Some(Error::Interrupted {
                signal,
                removed,
                kept,
            });
            // The report may not be writable (stderr a pipe whose reader is gone): printing
            // panics then, and a panic here would leave the main thread parked for ever. The
            // exit comes whatever the printing did.
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                super::render(on.command, out, on.json, on.quiet)
            }))
            .map_or(128 + signal, i32::from);
            std::process::exit(code);
        }
    });
}

/// `PATH is as it was` or `PATH was not created`, as it stands when the command starts.
fn as_it_was(path: &Path) -> String {
    if std::fs::symlink_metadata(path).is_ok() {
        format!("{} is as it was", path.display())
    } else {
        format!("{} was not created", path.display())
    }
}

/// What an interrupted `verify` or `check` keeps: everything, since they only read.
pub(super) fn kept_by_reading(command: &str) -> String {
    format!("nothing was changed: {command} only reads")
}

/// What an interrupted `copy` keeps.
pub(super) fn kept_by_copy(a: &CopyArgs) -> String {
    format!(
        "{} is untouched; on the media, every volume already under its name was written whole and is kept: the same command copies the rest",
        a.bundle.display()
    )
}

/// What an interrupted `pack` keeps.
pub(super) fn kept_by_pack(a: &PackArgs) -> String {
    format!("{}; the model is untouched", as_it_was(&a.output))
}

/// What an interrupted `unpack` keeps.
pub(super) fn kept_by_unpack(a: &UnpackArgs) -> String {
    if let Some(cache) = &a.hf_cache {
        format!(
            "the Hugging Face cache {} is as it was (a move into it in progress was finished or undone first)",
            cache.display()
        )
    } else if let Some(layout) = &a.oci_layout {
        format!(
            "the OCI image layout {layout}: its index.json is as it was (verified blobs already moved in stay, unreferenced, and a later unpack reuses them)"
        )
    } else if let Some(dest) = &a.dest {
        as_it_was(dest)
    } else {
        "the destination is as it was".into()
    }
}

/// What an interrupted `repair` keeps.
pub(super) fn kept_by_repair(a: &RepairArgs) -> String {
    match &a.output {
        Some(out) => format!(
            "{}; the bundle {} is untouched",
            as_it_was(out),
            a.bundle.display()
        ),
        None => format!(
            "in {}, volumes already repaired and renamed into place stay repaired, the others are as they were",
            a.bundle.display()
        ),
    }
}

/// What an interrupted `push` keeps.
pub(super) fn kept_by_push(a: &PushArgs) -> String {
    format!(
        "{} is as it was (the tag is written last); blobs already uploaded stay in the registry, unreferenced, and the next push reuses them",
        a.target
    )
}
