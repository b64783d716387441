#![no_main]
//! What a registry sends, on arbitrary bytes: the image manifest (finding the airlock layers),
//! the ModelPack config's `config.json` reading, token and error bodies, `WWW-Authenticate`
//! challenges, `Content-Range` answers and the manifest digest checks. No panic, no huge
//! allocation (run under a memory cap), and the invariants the client relies on.
use airlock::oci::{auth, client, modelpack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 8 {
        0 => {
            if let Ok((m, s)) = modelpack::airlock_layers(rest) {
                for l in [&m, &s] {
                    let hex = l.digest.strip_prefix("sha256:").expect("a sha256 digest");
                    assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
                    assert_eq!(hex, hex.to_ascii_lowercase());
                }
            }
        }
        1 => {
            let _ = modelpack::precision_of(rest);
        }
        2 => {
            if let Ok(token) = client::parse_token_answer(rest) {
                assert!(!token.is_empty());
                assert!(token.bytes().all(|b| (0x21..=0x7e).contains(&b)));
            }
        }
        3 => {
            // At most 200 characters of the body, each shown as itself or as an escape of at
            // most 9 (`\u{e007f}`), nothing a terminal acts on.
            let line = client::error_text(&text);
            assert!(line.chars().count() <= 200 * 9);
            assert!(!line.contains(airlock::display::needs_escape));
        }
        4 => {
            if let Some(auth::Challenge::Bearer { realm, .. }) = auth::parse_challenge(&text) {
                let reg = client::origin("https://registry.site:5000").expect("an origin");
                let _ = client::realm_may_get_credentials(&realm, &reg, which & 8 != 0);
            }
        }
        5 => {
            // The first 8 bytes: the offset asked for; the rest: the Content-Range answer.
            if rest.len() >= 8 {
                let offset = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
                let header = String::from_utf8_lossy(&rest[8..]);
                if let Ok(skip) = client::range_skip(which & 8 != 0, Some(&header), offset) {
                    assert!(skip <= offset);
                }
            }
        }
        6 => {
            // Manifest bytes against a stated digest (the first line) and their own pin.
            let (stated, bytes) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (String::from_utf8_lossy(&rest[..i]).into_owned(), &rest[i + 1..]),
                None => (String::new(), rest),
            };
            let own = modelpack::digest_of(bytes);
            assert!(client::check_manifest_digest(bytes, Some(&own), None).is_ok());
            if client::check_manifest_digest(bytes, None, Some(&stated)).is_ok()
                && stated.trim().starts_with("sha256:")
            {
                assert!(stated.trim().eq_ignore_ascii_case(&own));
            }
        }
        _ => {
            if let Some(o) = client::origin(&text) {
                assert!(client::same_origin(&o, &text));
            }
        }
    }
});
