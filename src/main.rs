//! The `airlock` binary: parse, run one command, print, exit with the documented code.

// As the library: no `unsafe` (signals go through signal-hook's iterator thread).
#![forbid(unsafe_code)]

mod cli;
mod commands;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let json = args.iter().any(|a| a == "--json");
    let cli = match cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                // Help and version are text for a person, with or without --json.
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand && !json {
                // `airlock` alone: the help, on stderr, as a usage error.
                let _ = e.print();
                return ExitCode::from(airlock::error::EXIT_USAGE);
            }
            // Reported like every other error: `airlock: error: ...` and `airlock: hint: ...`
            // in human mode, the usual document with --json.
            let command = subcommand_in(&args);
            let (message, hint) = usage_text(&e.to_string(), command.unwrap_or_default());
            let out = commands::Output {
                error: Some(airlock::error::Error::Arguments { message, hint }),
                ..commands::Output::default()
            };
            return ExitCode::from(commands::render(
                command.unwrap_or_default(),
                out,
                json,
                false,
            ));
        }
    };
    ExitCode::from(commands::run(cli))
}

/// Every subcommand's name, as the JSON `command` field gives it.
const SUBCOMMANDS: [&str; 14] = [
    "keygen",
    "pack",
    "verify",
    "copy",
    "unpack",
    "inspect",
    "check",
    "sign",
    "repair",
    "push",
    "cosign",
    "trust",
    "completions",
    "man",
];

/// The subcommand named on a command line that failed to parse, if there is one: the first
/// word that is not a global option or its value.
fn subcommand_in(args: &[OsString]) -> Option<&'static str> {
    let mut words = args.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(word) = words.next() {
        match word {
            "--" => return None,
            "--progress" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return SUBCOMMANDS.into_iter().find(|name| *name == w),
        }
    }
    None
}

/// Splits clap's error text into a one-line message and a hint: the tips clap offers, the
/// usage line and where to read more.
fn usage_text(text: &str, command: &str) -> (String, String) {
    let mut message = String::new();
    let mut tips = Vec::new();
    let mut usage = None;
    for (i, block) in text.trim().split("\n\n").enumerate() {
        let block = block.trim();
        if i == 0 {
            let mut lines = block.lines();
            message = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string();
            let rest: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
            if !rest.is_empty() {
                message = format!("{} {}", message, rest.join(", "));
            }
        } else if let Some(tip) = block.strip_prefix("tip: ") {
            tips.push(tip.to_string());
        } else if let Some(u) = block.strip_prefix("Usage: ") {
            let words: Vec<&str> = u.split_whitespace().filter(|w| *w != "--json").collect();
            usage = Some(words.join(" "));
        }
    }
    let help = if command.is_empty() {
        "airlock --help".to_string()
    } else {
        format!("airlock {command} --help")
    };
    let mut hint = tips.join("; ");
    if !hint.is_empty() {
        hint.push_str("; ");
    }
    match usage {
        Some(u) => hint.push_str(&format!("usage: {u} (see `{help}`)")),
        None => hint.push_str(&format!("see `{help}`")),
    }
    (message, hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_a_message_and_a_hint() {
        let text = "error: the following required arguments were not provided:\n  --output <OUTPUT>\n  <MODEL_DIR>\n\nUsage: airlock pack --output <OUTPUT> --json <MODEL_DIR>\n\nFor more information, try '--help'.\n";
        let (m, h) = usage_text(text, "pack");
        assert_eq!(
            m,
            "the following required arguments were not provided: --output <OUTPUT>, <MODEL_DIR>"
        );
        assert_eq!(
            h,
            "usage: airlock pack --output <OUTPUT> <MODEL_DIR> (see `airlock pack --help`)"
        );
        let text = "error: unexpected argument '--forse' found\n\n  tip: a similar argument exists: '--force'\n\nUsage: airlock keygen --out <OUT> --force\n\nFor more information, try '--help'.\n";
        let (m, h) = usage_text(text, "keygen");
        assert_eq!(m, "unexpected argument '--forse' found");
        assert!(
            h.starts_with("a similar argument exists: '--force'; usage: "),
            "{h}"
        );
    }

    #[test]
    fn finds_the_subcommand_after_global_options() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            subcommand_in(&a(&[
                "airlock",
                "--progress",
                "plain",
                "--json",
                "pack",
                "-x"
            ])),
            Some("pack")
        );
        assert_eq!(
            subcommand_in(&a(&["airlock", "--json", "frobnicate"])),
            None
        );
        assert_eq!(subcommand_in(&a(&["airlock", "--json"])), None);
    }

    #[test]
    fn subcommand_list_matches_the_cli() {
        let cmd = <cli::Cli as clap::CommandFactory>::command();
        let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
        assert_eq!(names, SUBCOMMANDS);
    }
}
