#![no_main]
//! The volume → zstd → tar reader on arbitrary bytes, both compressed and plain: every entry
//! the strict reader accepts must have a safe path, and reading stops at the declared cap.
use std::io::Read;

use airlock::tar::Reader;
use libfuzzer_sys::fuzz_target;

const CAP: u64 = 16 << 20;

fn drain<R: Read>(r: R) {
    let mut tar = Reader::new(r.take(CAP));
    let mut buf = [0u8; 4096];
    while let Ok(Some(e)) = tar.next_entry() {
        assert!(airlock::paths::check_relative(&e.path).is_ok(), "{:?}", e.path);
        loop {
            match tar.read_data(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    drain(data);
    if let Ok(mut dec) = zstd::stream::read::Decoder::new(data) {
        if dec.window_log_max(27).is_ok() {
            drain(dec.single_frame());
        }
    }
});
