//! The `airlock` binary: parse, run one command, print, exit with the documented code.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = args.iter().any(|a| a == "--json");
    let cli = match cli::Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => airlock::error::EXIT_USAGE,
            };
            if json && code != 0 {
                let doc = serde_json::json!({
                    "ok": false,
                    "exit_code": code,
                    "error": { "kind": "usage", "message": e.to_string().trim() },
                });
                println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
            } else {
                let _ = e.print();
            }
            return ExitCode::from(code);
        }
    };
    ExitCode::from(commands::run(cli))
}
