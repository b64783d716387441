#![no_main]
//! The manifest parser and validator on arbitrary bytes: no panic, no overflow, no huge
//! allocation; whatever parses must round-trip through its canonical bytes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = airlock::manifest::Manifest::parse(data) {
        let again = airlock::manifest::Manifest::parse(&m.to_bytes()).expect("canonical bytes parse");
        assert_eq!(again, m);
        let _ = m.expected_entries();
    }
});
