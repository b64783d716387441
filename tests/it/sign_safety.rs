//! `airlock sign -o` never replaces the secret key or the file it signs, whatever name it is
//! given (issue 26, item 11): `-o KEY --force` overwrote the key with exit 0.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::Env;

#[test]
fn sign_output_that_is_the_key_or_the_signed_file_is_refused_even_with_force() {
    let env = Env::new();
    env.write("f.bin", b"release binary\n");
    let key = fs::read(env.path("k.key")).unwrap();
    symlink("k.key", env.path("key-link")).unwrap();
    fs::hard_link(env.path("k.key"), env.path("key-hard")).unwrap();
    symlink("f.bin", env.path("file-link")).unwrap();
    let cases: [(&str, &str, &str); 7] = [
        ("k.key", "k.key", "the secret key"),
        ("./k.key", "k.key", "the secret key"),
        ("key-link", "k.key", "the secret key"),
        ("key-hard", "k.key", "the secret key"),
        ("k.key", "key-link", "the secret key"),
        ("f.bin", "k.key", "the file being signed"),
        ("file-link", "k.key", "the file being signed"),
    ];
    for (out, key_arg, what) in cases {
        for force in [true, false] {
            let mut args = vec!["sign", "f.bin", "--key", key_arg, "-o", out];
            if force {
                args.push("--force");
            }
            let text = env.fails(2, &args);
            assert!(text.contains(what), "{args:?}: {text}");
            assert_eq!(fs::read(env.path("k.key")).unwrap(), key, "{args:?}");
            assert_eq!(fs::read(env.path("f.bin")).unwrap(), b"release binary\n");
        }
    }
    assert!(
        fs::symlink_metadata(env.path("key-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Ordinary outputs are still written.
    env.ok(&["sign", "f.bin", "--key", "k.key", "-o", "f.sig", "--force"]);
    env.ok(&["sign", "f.bin", "--key", "k.key"]);
    assert!(env.path("f.bin.minisig").is_file());
    assert_eq!(fs::read(env.path("k.key")).unwrap(), key);
}
