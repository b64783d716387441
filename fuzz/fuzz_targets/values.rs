#![no_main]
//! The value scan (`airlock::inspect::values`): the layout from a hostile safetensors or GGUF
//! header, and the scanner fed the file in pieces of any size.
//!
//! Input: one byte choosing the piece size, then the file. Invariants: no panic, no hang,
//! memory within the cap scripts/fuzz.sh sets (a layout holds a few words per tensor, never a
//! tensor); the result does not depend on how the bytes are cut (pieces of the chosen size,
//! one byte at a time for a short file, and `scan_file`'s 1 MiB reads agree); the counts are
//! consistent (no more checked, all-zero or constant tensors than tensors) and the findings
//! bounded (one per code, each problem at most `MAX_PROBLEM_BYTES`).
use std::fs::File;
use std::io::Write;

use airlock::inspect::values::{self, Layout, Scanner};
use libfuzzer_sys::fuzz_target;

/// A file of this process, rewritten for each input.
fn scratch(bytes: &[u8]) -> File {
    let path = std::env::temp_dir().join(format!("airlock-fuzz-values-{}", std::process::id()));
    let mut f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
    f
}

fn scan(layout: Layout, bytes: &[u8], piece: usize) -> Option<values::FileScan> {
    let mut s = Scanner::new(layout);
    for chunk in bytes.chunks(piece) {
        s.update(chunk);
    }
    s.finish()
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let file = scratch(bytes);
    let len = bytes.len() as u64;
    let Ok(Some(layout)) = Layout::read(&file, len) else {
        return;
    };
    let piece = [1usize, 2, 3, 7, 64, 291, 4096, 65_536][usize::from(sel & 7)];
    let cut = scan(layout.clone(), bytes, piece);
    let whole = values::scan_file("", &file, len, &|_| {}).unwrap();
    assert_eq!(cut, whole, "pieces of {piece} bytes and scan_file disagree");
    if bytes.len() <= 4096 {
        assert_eq!(scan(layout, bytes, 1), whole, "byte by byte");
    }
    if let Some(s) = whole {
        let c = &s.summary;
        assert!(c.checked <= c.tensors);
        assert!(c.zero_tensors + c.constant_tensors <= c.checked);
        let findings = s.findings("model.safetensors");
        assert!(findings.len() <= values::MAX_FINDINGS_PER_FILE);
        for f in &findings {
            assert!(f.problem.len() <= values::MAX_PROBLEM_BYTES, "{}", f.problem.len());
        }
    }
});
