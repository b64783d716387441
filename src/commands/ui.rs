//! Progress display: an indicatif bar on a terminal, plain log lines on request, or nothing.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use airlock::error::human;
use airlock::progress::Progress;

use crate::cli::ProgressArg;

/// How often `--progress=plain` prints a line.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// The progress sink handed to the library.
pub enum Ui {
    /// Live bar.
    Bar(ProgressBar),
    /// Plain log lines.
    Plain(PlainState),
    /// Nothing.
    Silent,
}

/// State of the plain logger.
pub struct PlainState {
    phase: Mutex<(String, u64, Instant, Instant)>,
    done: AtomicU64,
}

impl Ui {
    /// Picks the display from the flags and whether stderr is a terminal.
    pub fn new(arg: ProgressArg, quiet: bool) -> Ui {
        if quiet {
            return Ui::Silent;
        }
        match arg {
            ProgressArg::None => Ui::Silent,
            ProgressArg::Plain => Ui::Plain(PlainState {
                phase: Mutex::new((String::new(), 0, Instant::now(), Instant::now())),
                done: AtomicU64::new(0),
            }),
            ProgressArg::Auto if !std::io::stderr().is_terminal() => Ui::Silent,
            ProgressArg::Auto | ProgressArg::Bar => {
                let bar =
                    ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {wide_msg}",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                Ui::Bar(bar)
            }
        }
    }
}

impl Progress for Ui {
    fn start(&self, phase: &str, total: u64) {
        match self {
            Ui::Bar(bar) => {
                bar.reset();
                bar.set_length(total);
                bar.set_position(0);
                bar.set_prefix(phase.to_string());
            }
            Ui::Plain(state) => {
                let mut p = state.phase.lock().expect("progress lock");
                *p = (phase.to_string(), total, Instant::now(), Instant::now());
                state.done.store(0, Ordering::Relaxed);
                eprintln!("airlock: {phase}: {} to process", human(total));
            }
            Ui::Silent => {}
        }
    }

    fn advance(&self, bytes: u64) {
        match self {
            Ui::Bar(bar) => bar.inc(bytes),
            Ui::Plain(state) => {
                let done = state.done.fetch_add(bytes, Ordering::Relaxed) + bytes;
                let mut p = state.phase.lock().expect("progress lock");
                if p.3.elapsed() >= PLAIN_EVERY {
                    p.3 = Instant::now();
                    let secs = p.2.elapsed().as_secs_f64().max(0.001);
                    eprintln!(
                        "airlock: {}: {} of {} ({:.0}%), {}/s",
                        p.0,
                        human(done),
                        human(p.1),
                        if p.1 == 0 {
                            100.0
                        } else {
                            done as f64 * 100.0 / p.1 as f64
                        },
                        human((done as f64 / secs) as u64)
                    );
                }
            }
            Ui::Silent => {}
        }
    }

    fn item(&self, name: &str) {
        if let Ui::Bar(bar) = self {
            bar.set_message(name.to_string());
        }
    }

    fn finish(&self) {
        match self {
            Ui::Bar(bar) => bar.finish_and_clear(),
            Ui::Plain(state) => {
                let p = state.phase.lock().expect("progress lock");
                eprintln!(
                    "airlock: {}: done, {} in {:.1} s",
                    p.0,
                    human(state.done.load(Ordering::Relaxed)),
                    p.2.elapsed().as_secs_f64()
                );
            }
            Ui::Silent => {}
        }
    }
}
