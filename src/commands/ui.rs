//! Progress display on stderr: an indicatif bar on a terminal, plain log lines on request, or
//! nothing.
//!
//! `--progress=auto` draws a bar only when stderr is a terminal that understands cursor
//! movement; on a terminal whose `TERM` is unset or `dumb` it falls back to plain lines, and
//! anywhere else (a pipe, a file, a CI log) it draws nothing. `--progress=bar` draws the bar
//! even then, for whoever wants the escape sequences in a log. The bar is cleared before the
//! command prints its result or error, so no redraw lands on top of them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use airlock::display::human;
use airlock::progress::{Phase, Progress};

use super::term::{self, shown};
use crate::cli::ProgressArg;

/// How often `--progress=plain` prints a line.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Redraws per second of the live bar.
const BAR_HZ: u8 = 10;

/// No ETA before a phase has run this long: the first rate measured is not the real one.
const ETA_AFTER: Duration = Duration::from_secs(3);

/// Set once a signal ends the command: nothing more is drawn (the signal thread has cleared
/// the bar and prints its report).
static SILENCED: AtomicBool = AtomicBool::new(false);

/// What the signal thread needs to take the live bar off the screen for good.
#[derive(Clone)]
pub struct Screen(Option<Arc<Mutex<Option<ProgressBar>>>>);

impl Screen {
    /// Clears the live bar (or spinner) and stops every later draw, so what is printed next is
    /// not drawn over and no bar is left frozen on the screen.
    pub fn silence(&self) {
        SILENCED.store(true, Ordering::SeqCst);
        if let Some(slot) = &self.0
            && let Some(bar) = slot.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            bar.finish_and_clear();
        }
    }
}

fn silenced() -> bool {
    SILENCED.load(Ordering::SeqCst)
}

/// The progress sink handed to the library.
pub struct Ui {
    display: Display,
    /// The subcommand, to name its phases the way an operator thinks of them.
    command: &'static str,
    /// Whether a damage map may be drawn on stderr (not with `--json` or `--quiet`).
    damage_maps: bool,
}

enum Display {
    /// A live bar, a new one for each phase. `forced` draws even where indicatif would hide
    /// the bar (not a terminal, `TERM=dumb`).
    Bar {
        bar: Arc<Mutex<Option<ProgressBar>>>,
        forced: bool,
    },
    Plain(Mutex<Plain>),
    Silent,
}

/// State of the plain logger: the phase, its size, progress, and when it last printed.
struct Plain {
    label: String,
    total: u64,
    done: u64,
    item: String,
    started: Instant,
    printed: Instant,
}

/// What the display would be for these flags and this stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Bar,
    Plain,
    Silent,
}

fn choose(arg: ProgressArg, quiet: bool, stderr_is_terminal: bool, term_is_dumb: bool) -> Choice {
    if quiet {
        return Choice::Silent;
    }
    match arg {
        ProgressArg::None => Choice::Silent,
        ProgressArg::Plain => Choice::Plain,
        ProgressArg::Bar => Choice::Bar,
        ProgressArg::Auto if !stderr_is_terminal => Choice::Silent,
        ProgressArg::Auto if term_is_dumb => Choice::Plain,
        ProgressArg::Auto => Choice::Bar,
    }
}

/// The operator's name for a library phase.
fn label(command: &str, phase: Phase) -> String {
    match (command, phase) {
        ("unpack", Phase::Stream) => "unpack".to_string(),
        ("verify", Phase::Stream) => "deep check".to_string(),
        (_, Phase::VerifyVolumes) => "volumes".to_string(),
        (_, p) => p.name(),
    }
}

impl Ui {
    /// Picks the display from the flags and whether stderr is a terminal.
    pub fn new(arg: ProgressArg, quiet: bool, command: &'static str) -> Ui {
        let choice = choose(
            arg,
            quiet,
            std::io::stderr().is_terminal(),
            console::is_dumb(),
        );
        let display = match choice {
            Choice::Silent => Display::Silent,
            Choice::Plain => Display::Plain(Mutex::new(Plain {
                label: String::new(),
                total: 0,
                done: 0,
                item: String::new(),
                started: Instant::now(),
                printed: Instant::now(),
            })),
            Choice::Bar => Display::Bar {
                bar: Arc::new(Mutex::new(None)),
                forced: arg == ProgressArg::Bar,
            },
        };
        Ui {
            display,
            command,
            damage_maps: false,
        }
    }

    /// Lets [`Progress::damage`] draw its map on stderr when stderr is a terminal wide enough.
    pub fn with_damage_maps(mut self, on: bool) -> Ui {
        self.damage_maps = on;
        self
    }

    /// The handle the signal thread clears the screen with.
    pub fn screen(&self) -> Screen {
        Screen(match &self.display {
            Display::Bar { bar, .. } => Some(Arc::clone(bar)),
            _ => None,
        })
    }

    /// Says what the command is busy with between phases (the scrypt work of decrypting a key):
    /// a spinner on the bar display, which the next phase or [`Ui::clear`] removes; a line in
    /// plain mode.
    pub fn note(&self, what: &str) {
        if silenced() {
            return;
        }
        match &self.display {
            Display::Bar { bar, forced } => {
                let mut slot = bar.lock().expect("progress lock");
                if silenced() {
                    return;
                }
                if let Some(old) = slot.take() {
                    old.finish_and_clear();
                }
                let target = if *forced {
                    ProgressDrawTarget::term_like_with_hz(
                        Box::new(console::Term::buffered_stderr()),
                        BAR_HZ,
                    )
                } else {
                    ProgressDrawTarget::stderr_with_hz(BAR_HZ)
                };
                let spinner = ProgressBar::with_draw_target(None, target)
                    .with_style(
                        ProgressStyle::with_template("{spinner} {wide_msg}")
                            .expect("valid template"),
                    )
                    .with_message(shown(what));
                spinner.tick();
                spinner.enable_steady_tick(Duration::from_millis(1000 / u64::from(BAR_HZ)));
                *slot = Some(spinner);
            }
            Display::Plain(_) => term::err_line(&format!("airlock: {what}")),
            Display::Silent => {}
        }
    }

    /// Takes a live bar off the screen; called before the result or error is printed.
    pub fn clear(&self) {
        if let Display::Bar { bar, .. } = &self.display
            && let Some(bar) = bar.lock().expect("progress lock").take()
        {
            bar.finish_and_clear();
        }
    }

    /// Draws a damaged bundle's map (`repair`), for the operator to see where the damage is
    /// while the work goes on.
    pub fn show_damage(&self, map: &airlock::bundle::damage::DamageMap) {
        if !self.damage_maps {
            return;
        }
        let Some(cols) = super::damage_map::terminal_width(&console::Term::stderr()) else {
            return;
        };
        if let Some(lines) = super::damage_map::draw(map, cols) {
            self.clear();
            for line in &lines {
                term::err_line(line);
            }
        }
    }
}

/// A bar for one phase, fully set up before its first draw.
fn new_bar(label: String, total: u64, forced: bool) -> ProgressBar {
    // indicatif hides a stderr target that is not a terminal (or is `dumb`); with
    // `--progress=bar` the operator asked for the bar regardless.
    let term = console::Term::buffered_stderr();
    let width = term.size_checked().map_or(80, |(_, cols)| cols);
    let target = if forced {
        ProgressDrawTarget::term_like_with_hz(Box::new(term), BAR_HZ)
    } else {
        ProgressDrawTarget::stderr_with_hz(BAR_HZ)
    };
    let style = ProgressStyle::with_template(bar_template(width))
        .expect("valid template")
        .progress_chars("=> ")
        .with_key(
            "settled_eta",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                if let Some(secs) =
                    settled_eta(state.elapsed(), state.pos(), state.len().unwrap_or(0))
                {
                    let _ = write!(w, " ETA {}", eta_text(secs));
                }
            },
        );
    ProgressBar::with_draw_target(Some(total), target)
        .with_style(style)
        .with_prefix(shown(&label))
}

/// The bar's two lines for a terminal `width` columns wide. Every line fits: the phase label and
/// the current file (model paths are long; `wide_msg` cuts the name to what is left), then the
/// bar and its numbers, with fewer numbers as the terminal narrows. A line that wraps breaks the
/// redraw, so the fixed parts of each layout stay below the width it is chosen for.
fn bar_template(width: u16) -> &'static str {
    // Widest numbers: "1023.99 GiB/1023.99 GiB" (23), "1023.99 MiB/s" (13), " ETA 59 min 59 s" (16).
    match width {
        // 11 + 2 + 23 + 1 + 13 + 16 = 66 fixed columns, a bar of 14 or more.
        80.. => {
            "{prefix:>10} {wide_msg}\n           [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec}{settled_eta}"
        }
        // 2 + 5 + 13 + 16 = 36 fixed columns: the percentage instead of the byte counts.
        44..80 => "{prefix} {wide_msg}\n[{wide_bar}] {percent:>3}% {bytes_per_sec}{settled_eta}",
        // No bar: the percentage, the rate and the ETA, 4 + 2 + 13 + 16 = 35 columns.
        36..44 => "{prefix} {wide_msg}\n{percent:>3}% {bytes_per_sec}{settled_eta}",
        _ => "{wide_msg}\n{percent:>3}%",
    }
}

/// How long the rest of a phase will take at its average rate so far, once that rate means
/// something: not in the first seconds, when the first buffers fill at memory speed, nor before
/// anything moved.
fn settled_eta(elapsed: Duration, done: u64, total: u64) -> Option<f64> {
    if elapsed < ETA_AFTER || done == 0 || done >= total {
        return None;
    }
    let rate = done as f64 / elapsed.as_secs_f64();
    Some((total - done) as f64 / rate)
}

fn plain_line(p: &Plain) -> String {
    let secs = p.started.elapsed().as_secs_f64().max(0.001);
    let rate = p.done as f64 / secs;
    let percent = if p.total == 0 {
        100.0
    } else {
        p.done as f64 * 100.0 / p.total as f64
    };
    let eta = match settled_eta(p.started.elapsed(), p.done, p.total) {
        Some(secs) => format!(", ETA {}", eta_text(secs)),
        None => String::new(),
    };
    let item = if p.item.is_empty() {
        String::new()
    } else {
        format!(", {}", p.item)
    };
    format!(
        "airlock: {}: {} of {} ({percent:.0}%), {}/s{eta}{item}",
        p.label,
        human(p.done),
        human(p.total),
        human(rate as u64),
    )
}

fn eta_text(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

impl Progress for Ui {
    /// On a terminal (stdin and stderr both), asks on stderr for the medium and waits for
    /// Enter; `q` or end of input stops. Off a terminal nobody can answer: `false` at once.
    fn ask_for_medium(&self, request: &airlock::progress::MediumRequest<'_>) -> bool {
        use std::io::BufRead;
        if silenced() || !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
            return false;
        }
        self.clear();
        let listed = match request.missing {
            [one] => one.clone(),
            [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
            [] => return false,
        };
        let which = match &request.hint {
            Some(m) => format!("{m} (it holds {listed})"),
            None => format!("the medium holding {listed}"),
        };
        let dirs: Vec<String> = request
            .looked_in
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        if let Some(c) = &request.complaint {
            term::err_line(&format!("airlock: {c}"));
        }
        term::err_line(&format!(
            "airlock: {listed} is on none of {}.",
            dirs.join(", ")
        ));
        term::ask(&format!(
            "airlock: put in {which}, mounted so that {} holds it, and press Enter (q and Enter to stop): ",
            dirs.join(" or ")
        ));
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => false,
            Ok(_) => !line.trim().eq_ignore_ascii_case("q"),
        }
    }

    fn start(&self, phase: Phase, total: u64) {
        let label = label(self.command, phase);
        match &self.display {
            Display::Bar { bar, forced } => {
                // A new phase gets a new bar: its own length, no file from the last phase, a
                // fresh rate and ETA.
                // The last phase's bar, if an error cut it short, goes first: two bars
                // drawing on one terminal would each leave lines the other cannot clear.
                let mut slot = bar.lock().expect("progress lock");
                if silenced() {
                    return;
                }
                if let Some(old) = slot.take() {
                    old.finish_and_clear();
                }
                let fresh = new_bar(label, total, *forced);
                fresh.tick();
                *slot = Some(fresh);
            }
            Display::Plain(_) if silenced() => {}
            Display::Plain(state) => {
                let mut p = state.lock().expect("progress lock");
                *p = Plain {
                    label,
                    total,
                    done: 0,
                    item: String::new(),
                    started: Instant::now(),
                    printed: Instant::now(),
                };
                term::err_line(&format!(
                    "airlock: {}: {} to process",
                    p.label,
                    human(total)
                ));
            }
            Display::Silent => {}
        }
    }

    fn advance(&self, bytes: u64) {
        match &self.display {
            Display::Bar { bar, .. } => {
                if let Some(bar) = &*bar.lock().expect("progress lock") {
                    bar.inc(bytes);
                }
            }
            Display::Plain(state) => {
                let mut p = state.lock().expect("progress lock");
                p.done += bytes;
                if p.printed.elapsed() >= PLAIN_EVERY && !silenced() {
                    p.printed = Instant::now();
                    term::err_line(&plain_line(&p));
                }
            }
            Display::Silent => {}
        }
    }

    fn item(&self, name: &str) {
        match &self.display {
            Display::Bar { bar, .. } => {
                if let Some(bar) = &*bar.lock().expect("progress lock") {
                    bar.set_message(shown(name));
                }
            }
            Display::Plain(state) => {
                let mut p = state.lock().expect("progress lock");
                p.item.clear();
                p.item.push_str(name);
            }
            Display::Silent => {}
        }
    }

    fn note(&self, line: &str) {
        if silenced() {
            return;
        }
        match &self.display {
            Display::Bar { .. } => {
                self.clear();
                term::err_line(&format!("airlock: {line}"));
            }
            Display::Plain(_) => term::err_line(&format!("airlock: {line}")),
            Display::Silent => {}
        }
    }

    fn finish(&self) {
        match &self.display {
            Display::Bar { .. } => self.clear(),
            Display::Plain(_) if silenced() => {}
            Display::Plain(state) => {
                let p = state.lock().expect("progress lock");
                let secs = p.started.elapsed().as_secs_f64();
                term::err_line(&format!(
                    "airlock: {}: done, {} in {secs:.1} s ({}/s)",
                    p.label,
                    human(p.done),
                    human((p.done as f64 / secs.max(0.001)) as u64)
                ));
            }
            Display::Silent => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_draws_only_on_a_capable_terminal() {
        use Choice::*;
        use ProgressArg as A;
        assert_eq!(choose(A::Auto, false, true, false), Bar);
        assert_eq!(choose(A::Auto, false, true, true), Plain);
        assert_eq!(choose(A::Auto, false, false, false), Silent);
        assert_eq!(choose(A::Bar, false, false, true), Bar);
        assert_eq!(choose(A::Plain, false, false, false), Plain);
        assert_eq!(choose(A::None, false, true, false), Silent);
        for arg in [A::Auto, A::Bar, A::Plain, A::None] {
            assert_eq!(choose(arg, true, true, false), Silent, "{arg:?}");
        }
    }

    #[test]
    fn phases_have_operator_names() {
        assert_eq!(label("unpack", Phase::Stream), "unpack");
        assert_eq!(label("verify", Phase::Stream), "deep check");
        assert_eq!(label("verify", Phase::VerifyVolumes), "volumes");
        assert_eq!(label("pack", Phase::Pack), "pack");
        assert_eq!(
            label("verify", Phase::VerifyParityVolumes),
            "verify parity volumes"
        );
        assert_eq!(label("copy", Phase::CopyToMedium(2)), "copy to medium 2");
    }

    #[test]
    fn plain_lines_carry_progress_rate_eta_and_file() {
        let p = Plain {
            label: "pack".into(),
            total: 4 << 30,
            done: 1 << 30,
            item: "weights/model.safetensors".into(),
            started: Instant::now() - Duration::from_secs(10),
            printed: Instant::now(),
        };
        let line = plain_line(&p);
        assert!(
            line.starts_with("airlock: pack: 1.0 GiB of 4.0 GiB (25%), 102.4 MiB/s, ETA 30 s"),
            "{line}"
        );
        let early = Plain {
            started: Instant::now(),
            ..p
        };
        assert!(
            !plain_line(&early).contains("ETA"),
            "{}",
            plain_line(&early)
        );
        assert!(line.ends_with(", weights/model.safetensors"), "{line}");
        assert!(!line.contains('\r'));
        assert_eq!(eta_text(3725.0), "1 h 2 min");
    }

    #[test]
    fn no_eta_until_the_rate_has_settled() {
        let s = Duration::from_secs;
        // The first seconds measure buffers filling, not the disk: no estimate.
        assert_eq!(
            settled_eta(Duration::from_millis(200), 1 << 20, 4 << 30),
            None
        );
        assert_eq!(settled_eta(s(2), 1 << 30, 4 << 30), None);
        assert_eq!(settled_eta(s(10), 0, 4 << 30), None);
        assert_eq!(settled_eta(s(10), 4 << 30, 4 << 30), None);
        assert_eq!(settled_eta(s(10), 1 << 30, 4 << 30), Some(30.0));
    }

    #[test]
    fn every_bar_layout_fits_its_width() {
        // The widest values each placeholder can print, and the layout's fixed text.
        let widest = |t: &str| {
            t.replace("{prefix:>10}", "deep check")
                .replace("{prefix}", "deep check")
                .replace("{bytes}", "1023.99 GiB")
                .replace("{total_bytes}", "1023.99 GiB")
                .replace("{bytes_per_sec}", "1023.99 MiB/s")
                .replace("{percent:>3}", "100")
                .replace("{settled_eta}", " ETA 59 min 59 s")
                .replace("{wide_msg}", "")
                .replace("{wide_bar}", "")
        };
        for width in [20u16, 35, 36, 40, 43, 44, 50, 79, 80, 100, 160] {
            for line in widest(bar_template(width)).lines() {
                assert!(
                    line.chars().count() <= usize::from(width),
                    "{width} columns: {line:?} ({} columns)",
                    line.chars().count()
                );
            }
        }
    }
}
