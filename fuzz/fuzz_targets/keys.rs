#![no_main]
//! minisign public key, secret key (unencrypted path only: scrypt at minisign's cost would make
//! every input take a second) and signature parsers on arbitrary text.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = airlock::keys::PublicKey::parse(text);
    if let Ok(sig) = airlock::keys::Signature::parse(text) {
        let again = airlock::keys::Signature::parse(&sig.to_file_text()).expect("round trip");
        assert_eq!(again.signature, sig.signature);
    }
    if matches!(airlock::keys::SecretKey::is_encrypted(text), Ok(false)) {
        let _ = airlock::keys::SecretKey::parse(text, None);
    }
});
