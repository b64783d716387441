//! The damage map (issue 25 item 13): on a terminal, `verify` and `repair` draw one row per
//! volume and one cell per unit (or the worst of a few), with a legend; narrow terminals, pipes
//! and `--json` get the list alone, as before. The terminal is a real pseudo-terminal made by
//! `script` (util-linux), sized with `stty`.

use std::fs;
use std::process::Command;

use crate::support::{Env, pseudo_random};

/// A 4 MiB model packed in 1 MiB volumes with 25% parity (4 KiB units, 256 a volume).
fn packed(env: &Env) {
    env.write("m/weights.bin", &pseudo_random(4 << 20, 5));
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    env.ok(&[
        "pack",
        "m",
        "-o",
        "b",
        "--key",
        "k.key",
        "--compress",
        "none",
        "--volume-size",
        "1M",
        "--parity",
        "25%",
    ]);
}

/// `airlock ARGS` on a pseudo-terminal `cols` columns wide: its exit code and everything it
/// wrote (stdout and stderr both go to the terminal).
fn on_terminal(env: &Env, cols: u16, args: &str) -> (i32, String) {
    on_terminal_sized(env, 50, cols, args)
}

/// [`on_terminal`] on a terminal that reports `rows` and `cols` (0 and 0: a serial console).
fn on_terminal_sized(env: &Env, rows: u16, cols: u16, args: &str) -> (i32, String) {
    let cmd = format!(
        "stty cols {cols} rows {rows}; exec {} {args}",
        env!("CARGO_BIN_EXE_airlock")
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(env.path(""))
        .env_remove("COLUMNS")
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    (out.status.code().unwrap_or(-1), text)
}

fn flip(env: &Env, rel: &str, offset: usize) {
    let p = env.path(rel);
    let mut bytes = fs::read(&p).unwrap();
    for b in &mut bytes[offset..offset + 4] {
        *b ^= 0x5a;
    }
    fs::write(p, bytes).unwrap();
}

/// A row of the map: the cells after the volume's name.
fn row<'a>(text: &'a str, name: &str) -> &'a str {
    let prefix = format!("  {name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::trim_start))
        .unwrap_or_else(|| panic!("no row for {name} in {text}"))
}

#[test]
fn verify_draws_the_map_on_a_terminal_and_the_list_elsewhere() {
    let env = Env::new();
    packed(&env);
    let kept = fs::read(env.path("b/data.001")).unwrap();
    fs::remove_file(env.path("b/data.001")).unwrap();

    let (code, text) = on_terminal(&env, 100, "verify b --trust k.pub");
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("damage map, one cell per 4 units of 4.0 KiB"),
        "{text}"
    );
    // 256 units in cells of 4: the lost volume is rebuildable throughout, the others intact.
    assert_eq!(row(&text, "data.001"), "r".repeat(64));
    assert_eq!(row(&text, "data.000"), ".".repeat(64));
    assert!(row(&text, "parity.000").chars().all(|c| c == '.'));
    assert!(text.contains("  . intact  r rebuildable\n"), "{text}");
    // The list stays, after the map.
    assert!(text.contains("BAD  data.001: is missing"), "{text}");

    // Four flipped bytes are one cell, where they are.
    let (code, text) = {
        fs::write(env.path("b/data.001"), &kept).unwrap();
        flip(&env, "b/data.003", 500_000);
        on_terminal(&env, 100, "verify b --trust k.pub")
    };
    assert_eq!(code, 3, "{text}");
    assert_eq!(row(&text, "data.001"), ".".repeat(64));
    let d3 = row(&text, "data.003");
    assert_eq!(d3.matches('r').count(), 1, "{d3}");
    assert_eq!(d3.find('r'), Some(500_000 / 16384), "{d3}");
    fs::remove_file(env.path("b/data.001")).unwrap();

    // A narrow terminal, a pipe, --json: no map, the list as before.
    let (code, narrow) = on_terminal(&env, 30, "verify b --trust k.pub");
    assert_eq!(code, 3);
    assert!(!narrow.contains("damage map"), "{narrow}");
    assert!(narrow.contains("BAD  data.001: is missing"), "{narrow}");
    let piped = env.run(&["verify", "b", "--trust", "k.pub"]);
    let piped = String::from_utf8_lossy(&piped.stdout);
    assert!(!piped.contains("damage map"), "{piped}");
    assert!(piped.contains("BAD  data.001: is missing"), "{piped}");
    let (_, json) = on_terminal(&env, 100, "verify b --trust k.pub --json --progress none");
    assert!(!json.contains("damage map"), "{json}");
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON document");
    assert_eq!(v["bad_volumes"].as_array().unwrap().len(), 2, "{v}");
    assert!(v.get("damage").is_none(), "{v}");
}

/// Issue 33 item 7. Before: a terminal that reports 0 rows and 0 columns (a serial console)
/// got no map, as a pipe does. Now the map is drawn for 80 columns there (or `COLUMNS`).
#[test]
fn a_terminal_that_reports_no_size_gets_the_map_at_80_columns() {
    let env = Env::new();
    packed(&env);
    fs::remove_file(env.path("b/data.001")).unwrap();
    let (code, text) = on_terminal_sized(&env, 0, 0, "verify b --trust k.pub");
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("damage map"), "{text}");
    // 256 units in 65 columns of cells: 4 units a cell.
    assert_eq!(row(&text, "data.001"), "r".repeat(64));
    let map = &text[text.find("damage map").unwrap()..];
    for l in map
        .lines()
        .take_while(|l| l.starts_with("  ") || l.starts_with("damage map"))
    {
        assert!(l.len() < 80, "{l:?}");
    }
    let (code, text) = on_terminal_sized(&env, 0, 0, "repair b --trust k.pub");
    assert_eq!(code, 0, "{text}");
    assert_eq!(row(&text, "data.001"), "r".repeat(64));
}

#[test]
fn the_map_tells_beyond_repair_from_rebuildable() {
    let env = Env::new();
    packed(&env);
    // 25% over 4 volumes rebuilds one lost volume, not two.
    fs::remove_file(env.path("b/data.000")).unwrap();
    fs::remove_file(env.path("b/data.002")).unwrap();
    let (code, text) = on_terminal(&env, 100, "verify b --trust k.pub");
    assert_eq!(code, 3, "{text}");
    assert!(row(&text, "data.000").contains('X'), "{text}");
    assert!(text.contains("X beyond repair"), "{text}");
    assert_eq!(row(&text, "data.001"), ".".repeat(64));
}

#[test]
fn repair_draws_the_map_before_it_starts() {
    let env = Env::new();
    packed(&env);
    let lost = fs::read(env.path("b/data.002")).unwrap();
    fs::remove_file(env.path("b/data.002")).unwrap();
    let (code, text) = on_terminal(&env, 100, "repair b --trust k.pub");
    assert_eq!(code, 0, "{text}");
    let map = text.find("damage map").unwrap_or_else(|| panic!("{text}"));
    let done = text.find("OK   repaired data.002").expect("repaired");
    assert!(map < done, "{text}");
    assert_eq!(row(&text, "data.002"), "r".repeat(64));
    assert_eq!(fs::read(env.path("b/data.002")).unwrap(), lost);

    // Piped, no map.
    fs::remove_file(env.path("b/data.002")).unwrap();
    let out = env.ok(&["repair", "b", "--trust", "k.pub"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("damage map"), "{all}");
}
