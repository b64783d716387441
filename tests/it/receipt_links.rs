//! A `.airlock` that is a symbolic link is not a receipt (issue 26, item 12b): it used to lend
//! another install's signed receipt to whatever directory held the link, so `unpack --replace`
//! would replace (remove) that directory, and `pack --base` and a delta install took it as the
//! base.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::*;

/// `real` holds a genuine install of `m` version 1 (from bundle `b1`); `victim` holds a copy
/// of the same files (or anything else) and `.airlock -> ../real/.airlock`.
fn linked_receipt(env: &Env) {
    env.model("v1");
    env.ok(&[
        "pack",
        "v1",
        "-o",
        "b1",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "1",
    ]);
    env.ok(&["unpack", "b1", "--trust", "k.pub", "--dest", "real"]);
    env.model("victim");
    env.write("victim/precious.txt", b"not a model file\n");
    symlink("../real/.airlock", env.path("victim/.airlock")).unwrap();
    // Version 2: one file changed.
    env.model("v2");
    env.write("v2/weights/part-2.bin", &pseudo_random(123_457, 99));
}

#[test]
fn unpack_replace_refuses_a_directory_whose_receipt_is_a_link() {
    let env = Env::new();
    linked_receipt(&env);
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "b2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
    ]);
    let before = tree(&env.path("victim"));
    let real = tree(&env.path("real"));
    let text = env.fails(
        1,
        &[
            "unpack",
            "b2",
            "--trust",
            "k.pub",
            "--dest",
            "victim",
            "--replace",
        ],
    );
    assert!(text.contains("holds no airlock receipt"), "{text}");
    assert!(
        tree(&env.path("victim")) == before,
        "the directory was changed"
    );
    assert!(
        tree(&env.path("real")) == real,
        "the real install was changed"
    );
    assert!(
        fs::symlink_metadata(env.path("victim/.airlock"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // check does not take it as a receipt either.
    env.fails(3, &["check", "victim", "--trust", "k.pub"]);
    // The genuine install is replaced as before.
    env.ok(&[
        "unpack",
        "b2",
        "--trust",
        "k.pub",
        "--dest",
        "real",
        "--replace",
    ]);
}

#[test]
fn a_linked_receipt_is_not_a_delta_base() {
    let env = Env::new();
    linked_receipt(&env);
    // pack --base: refused, no bundle.
    let text = env.fails(
        2,
        &[
            "pack",
            "v2",
            "-o",
            "d2",
            "--key",
            "k.key",
            "--name",
            "m",
            "--version",
            "2",
            "--base",
            "victim",
        ],
    );
    assert!(text.contains("victim"), "{text}");
    env.assert_nothing_packed("d2");
    // A delta made from the genuine install, unpacked onto the directory with the linked
    // receipt (holding the very files of version 1): refused, nothing changed.
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "d2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "real",
    ]);
    fs::remove_dir_all(env.path("victim")).unwrap();
    env.model("victim");
    symlink("../real/.airlock", env.path("victim/.airlock")).unwrap();
    let before = tree(&env.path("victim"));
    let text = env.fails(
        3,
        &[
            "unpack",
            "d2",
            "--trust",
            "k.pub",
            "--dest",
            "victim",
            "--replace",
        ],
    );
    assert!(text.contains("holds no airlock receipt"), "{text}");
    assert!(
        tree(&env.path("victim")) == before,
        "the directory was changed"
    );
    // Onto the genuine install it applies.
    env.ok(&[
        "unpack",
        "d2",
        "--trust",
        "k.pub",
        "--dest",
        "real",
        "--replace",
    ]);
    assert_eq!(
        tree_without_receipt(&env.path("real")),
        tree(&env.path("v2"))
    );
}
