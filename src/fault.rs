//! A fault of airlock itself met where the plumbing carries `io::Error`s (a helper thread that
//! panicked or stopped): [`fault`] wraps it as an `io::Error` whose inner error is a [`Fault`],
//! and `Error::io` (the one place an `io::Error` becomes an [`crate::error::Error`]) turns it
//! into `Error::Internal` (exit 101, kind `internal`), not an I/O error (exit 1).

use std::io;

/// An invariant of airlock's own code was broken; the text says which.
#[derive(Debug)]
pub struct Fault(pub String);

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "internal error: {}", self.0)
    }
}

impl std::error::Error for Fault {}

/// `what` as an `io::Error` that `Error::io` reports as an internal error.
pub fn fault(what: impl Into<String>) -> io::Error {
    io::Error::other(Fault(what.into()))
}

/// The fault `e` carries, if it is one made by [`fault`].
pub fn fault_of(e: &io::Error) -> Option<&Fault> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<Fault>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_survives_the_io_plumbing_and_says_it_is_internal() {
        let e = fault("the writeback thread panicked");
        assert_eq!(
            e.to_string(),
            "internal error: the writeback thread panicked"
        );
        assert_eq!(
            fault_of(&e).map(|f| f.0.as_str()),
            Some("the writeback thread panicked")
        );
        // Another error with words inside, and the system's error: neither is a fault.
        assert!(fault_of(&io::Error::new(io::ErrorKind::InvalidData, "disk on fire")).is_none());
        assert!(fault_of(&io::Error::from_raw_os_error(5)).is_none());
        assert!(fault_of(&io::ErrorKind::NotFound.into()).is_none());
    }

    /// ARCHITECTURE.md, "Errors and exit codes": a bug is 101, kind `internal`, as docs/CLI.md's
    /// table of exit codes says.
    #[test]
    fn a_fault_is_a_bug_exit_101_as_the_cli_reference_says() {
        let e = crate::error::Error::io("/x", fault("the writer thread stopped"));
        assert_eq!((e.exit_code(), e.kind()), (101, "internal"));
        assert!(e.to_string().starts_with("internal error:"), "{e}");
        let cli = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CLI.md"),
        )
        .unwrap();
        assert!(
            cli.lines()
                .any(|l| l.starts_with("| 101 |") && l.ends_with("| `internal` |")),
            "docs/CLI.md's exit code table has no row 101 for `internal`"
        );
    }
}
