//! Page-cache residency of `check` (issue 37): hashing an install read cold drops the pages
//! it brought in behind its reads (the 16 GiB cold check spent more system time taking fresh
//! page cache than the single-stream peer spent reading), and a warm install stays cached (a
//! check of a warm model must not evict it). Residency is read with `RWF_NOWAIT` reads; on a
//! memory file system the cache is all there is, and nothing may be dropped.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::support::{Env, pseudo_random};

/// Values in the weights file: more than two drop intervals (`writeback::DROP_BEHIND`,
/// 32 MiB) of F32, the file not a whole number of read pieces.
const VALUES: usize = (20 << 20) + 12_345;

/// Whether the page of `f` at `offset` is in the page cache (a read that may not wait for the
/// device fails with `EAGAIN` when it is not).
fn cached_at(f: &File, offset: u64) -> bool {
    let mut b = [0u8; 1];
    match rustix::io::preadv2(
        f,
        &mut [io::IoSliceMut::new(&mut b)],
        offset,
        rustix::io::ReadWriteFlags::NOWAIT,
    ) {
        Ok(n) => n == 1,
        Err(rustix::io::Errno::AGAIN) => false,
        Err(e) => panic!("preadv2: {e}"),
    }
}

/// Offsets spread over a file of `len` bytes: inside the first and second drop intervals, its
/// last byte. Not its first MiBs: the model checks and the value scan read the header before
/// the hash does (through the page cache, with the kernel's read-ahead), and those few pages
/// stay.
fn probes(len: u64) -> [u64; 4] {
    [12 << 20, 20 << 20, (48 << 20) + 1, len - 1]
}

/// A safetensors file of one F32 tensor of [`VALUES`] finite values, neither constant nor
/// zero-filled: a model file the value scan reads in full.
fn safetensors() -> Vec<u8> {
    let header = format!(
        "{{\"w\":{{\"dtype\":\"F32\",\"shape\":[{VALUES}],\"data_offsets\":[0,{}]}}}}",
        VALUES * 4
    );
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for i in 0..VALUES as u64 {
        let v = (i.wrapping_mul(2_654_435_761) % 100_000) as f32 / 1000.0 + 0.5;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Written back and dropped from the page cache.
fn make_cold(path: &Path) {
    let f = File::open(path).unwrap();
    f.sync_all().unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

/// Read in full, so every page is cached.
fn make_warm(path: &Path) {
    assert!(std::fs::read(path).unwrap().len() > 64 << 20);
}

fn on_memory_fs(path: &Path) -> bool {
    let f = File::open(path).unwrap();
    rustix::fs::fstatfs(&f).unwrap().f_type as u64 == 0x0102_1994
}

/// Runs `check`, then says which probes of `path` are cached.
fn check_then_cached(env: &Env, args: &[&str], path: &Path) -> Vec<bool> {
    env.ok(args);
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    probes(len).iter().map(|&at| cached_at(&f, at)).collect()
}

fn assert_residency(env: &Env, args: &[&str], path: &Path) {
    // (No probe before a check: a probe of a page not cached starts the read-ahead.)
    make_warm(path);
    assert_eq!(
        check_then_cached(env, args, path),
        vec![true; 4],
        "a check of a warm {} evicted it ({args:?})",
        path.display()
    );
    make_cold(path);
    let memory = on_memory_fs(path);
    assert_eq!(
        check_then_cached(env, args, path),
        vec![memory; 4],
        "a check of a cold {} left what it read in the page cache ({args:?})",
        path.display()
    );
}

fn big_model(env: &Env) {
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    env.write("m/model.safetensors", &safetensors());
    env.write("m/small.bin", &pseudo_random(1000, 7));
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
    ]);
}

/// `check DIR --trust`: the receipt comparison hashes every installed file (with the value
/// scan riding on it), and `check DIR` without a receipt scans the model files by itself.
#[test]
fn check_of_an_install_read_cold_drops_what_it_read_and_keeps_a_warm_one() {
    let env = Env::new();
    big_model(&env);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "out"]);
    let installed = env.path("out/model.safetensors");
    assert_residency(&env, &["check", "out", "--trust", "k.pub"], &installed);
    assert_residency(
        &env,
        &["check", "out", "--trust", "k.pub", "--no-value-scan"],
        &installed,
    );
    // Without a receipt: the value scan reads the model files itself.
    env.write("plain/config.json", b"{\"model_type\": \"test\"}\n");
    let copy = env.path("plain/model.safetensors");
    std::fs::copy(&installed, &copy).unwrap();
    assert_residency(&env, &["check", "plain"], &copy);
}

/// `check --hf-cache`: every blob hashed against its name.
#[test]
fn check_of_a_cache_read_cold_drops_what_it_read_and_keeps_a_warm_one() {
    let env = Env::new();
    big_model(&env);
    env.ok(&[
        "unpack",
        "b",
        "--trust",
        "k.pub",
        "--hf-cache",
        "cache",
        "--hf-repo",
        "org/big",
    ]);
    let blobs = env.path("cache/models--org--big/blobs");
    let blob = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).unwrap().len() > 64 << 20)
        .expect("the big blob");
    assert_residency(&env, &["check", "--hf-cache", "cache"], &blob);
}
