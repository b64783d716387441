//! A test run in a child copy of this test binary whose address space is capped (`RLIMIT_AS`),
//! so an allocation sized from a hostile length fails the child instead of passing on a machine
//! with memory to spare. Used by the property tests of the parsers (`parse_fuzz`) and of the
//! model formats (`inspect::fuzz`); on the ground floor, so neither reaches the other.

use std::process::Command;

/// Set in a capped child to its cap in bytes.
const CHILD_ENV: &str = "AIRLOCK_CAPPED_CHILD";

/// Runs the ignored test `child` of this binary in a child process whose address space is
/// capped at `cap` bytes (the child calls [`cap_address_space`] first), and returns its
/// stderr (the figures).
pub(crate) fn run_capped_child(child: &str, cap: u64) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            child,
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, cap.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("1 passed"), "child ran nothing:\n{stdout}");
    // The figures, for `--nocapture` (SECURITY.md section 8 quotes them).
    for line in stderr.lines().filter(|l| l.starts_with("fuzz ")) {
        eprintln!("{line}");
    }
    stderr.into_owned()
}

/// Caps this (child) process's address space at what [`run_capped_child`] asked for.
pub(crate) fn cap_address_space() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    let asked: u64 = std::env::var(CHILD_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("run through the parent test");
    let old = getrlimit(Resource::As);
    let cap = old.maximum.map_or(asked, |m| m.min(asked));
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(cap),
            maximum: old.maximum,
        },
    )
    .unwrap();
    // The cap is in force: a reservation of twice the cap fails rather than succeeding lazily.
    assert!(
        Vec::<u8>::new()
            .try_reserve_exact(2 * cap as usize)
            .is_err()
    );
}
