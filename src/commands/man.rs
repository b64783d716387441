//! `airlock man [COMMAND]`: the manual pages, airlock(1) and airlock-COMMAND(1). clap_mangen
//! renders what the `--help` text already says (synopsis, description, options); this module
//! adds what help leaves out: exit status, environment, examples and the see-also list.

use clap::CommandFactory;

use airlock::error::Error;

use super::Output;
use crate::cli::{Cli, MAN_PAGES};

/// `airlock completions SHELL`: the completion script clap writes for the command line.
pub(super) fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut cmd, "airlock", &mut text);
    text
}

/// `completions` and `man` under `--json`: refused. Their output is a script or a roff page;
/// wrapping it in JSON would serve no one, and printing it unwrapped would break the
/// one-document promise of --json.
pub(super) fn not_json(name: &str) -> Output {
    let error = Error::Usage(format!(
        "{name} prints {}, not JSON: run it without --json",
        if name == "man" {
            "a roff man page"
        } else {
            "a shell script"
        }
    ));
    Output {
        error: Some(error),
        ..Output::default()
    }
}

/// One variable of the ENVIRONMENT section and the commands it matters to.
struct EnvVar {
    name: &'static str,
    commands: &'static [&'static str],
    text: &'static str,
}

const ENVIRONMENT: &[EnvVar] = &[
    EnvVar {
        name: "DOCKER_CONFIG",
        commands: &["push", "unpack"],
        text: "The directory of the docker config.json whose credential helpers (credHelpers, credsStore: docker-credential-NAME get) and `auths` entries give registry credentials (default ~/.docker).",
    },
    EnvVar {
        name: "AIRLOCK_REGISTRY_STALL",
        commands: &["push", "unpack"],
        text: "The stall deadline of registry transfers, BYTES/SECONDS (default 32768/60): a transfer that moves fewer than BYTES in SECONDS of waiting on the registry is ended (exit 1); SECONDS is also the deadline for a request's response headers, all its tries together. A malformed value is a usage error.",
    },
    EnvVar {
        name: "AIRLOCK_TRUST",
        commands: &["verify", "unpack", "check", "repair", "push", "cosign"],
        text: "A trusted public key file (.pub) or a directory of them, or a TUF root.json, used when no --trust is given. One path, not split on colons. check uses it only for a directory that holds .airlock (an install); a directory airlock never installed is linted only.",
    },
    EnvVar {
        name: "SOURCE_DATE_EPOCH",
        commands: &["pack", "sign"],
        text: "Seconds since 1970-01-01 UTC to record instead of the current time (pack: the manifest's created field; sign: the timestamp of the trusted comment), for reproducible output. A value that is not a number is a usage error.",
    },
    EnvVar {
        name: "HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME",
        commands: &["pack"],
        text: "Where pack --hf-repo finds the Hugging Face cache when --hf-cache is not given, in this order, as huggingface_hub finds it ($HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub).",
    },
    EnvVar {
        name: "TERM",
        commands: &["pack", "verify", "unpack", "check"],
        text: "With --progress auto on a terminal: unset or dumb gives plain progress lines instead of a live bar.",
    },
];

/// The exit codes every command shares, then what 3 means for each command.
fn exit_status(command: Option<&str>) -> Vec<(&'static str, String)> {
    let three = match command {
        None => Some(
            "the bundle, an installed model or a model failed verification, or an install would downgrade",
        ),
        Some("pack") => Some(
            "the model checks found errors (pack with --no-model-checks to record them as warnings instead)",
        ),
        Some("verify") => Some(
            "the bundle failed verification: signature, trust, manifest, a volume or (with --deep) a file; or a signed FILE's signatures do not verify or fall short of the trust root's threshold",
        ),
        Some("unpack") => Some(
            "the bundle failed verification, or the install would downgrade an installed version",
        ),
        Some("copy") => Some(
            "the bundle failed verification, a medium holds another bundle or a file airlock did not make, or a medium gave back other bytes than were written (counterfeit or failing)",
        ),
        Some("inspect") => Some("the manifest is malformed"),
        Some("repair") => Some(
            "the bundle failed verification, or some damage has no intact copy and is beyond its parity (nothing was changed; the message lists the volumes to copy again)",
        ),
        Some("push") => Some("the bundle failed verification (nothing was uploaded)"),
        Some("trust") => Some(
            "trust show: the root is not signed by the threshold of its root keys, has expired, or (with --previous) is not a valid rotation; trust rotate/sign: the root read is not valid",
        ),
        Some("cosign") => {
            Some("the bundle's manifest is malformed or unsigned, or FILE.minisig is malformed")
        }
        Some("check") => Some(
            "the tree differs from its receipt, the receipt's signature fails, the model checks found errors, or the Hugging Face cache is damaged",
        ),
        Some(_) => None,
    };
    let mut codes = vec![
        ("0", "success".to_string()),
        (
            "1",
            "operational error: I/O, a path that does not exist or cannot be read (an unmounted medium is not tampering), no space, an unusable key file or a wrong password".to_string(),
        ),
        (
            "2",
            "usage error: bad arguments, or something in the way (an output that already exists)".to_string(),
        ),
    ];
    if let Some(t) = three {
        codes.push(("3", t.to_string()));
    }
    codes.push((
        "101",
        "a bug in airlock: a panic, or an internal error (an invariant of airlock's own code broken; the message starts with internal error: and the hint asks for a report)".to_string(),
    ));
    if matches!(command, None | Some("pack" | "unpack" | "repair" | "push")) {
        codes.push((
            "130, 143",
            "interrupted by SIGINT (Ctrl-C) or SIGTERM: the work directories were removed first, and the message (with --json, the document) says what was removed and what was kept".to_string(),
        ));
    }
    codes
}

fn examples(command: Option<&str>) -> &'static [(&'static str, &'static str)] {
    match command {
        None => &[
            (
                "Make a key pair once, on the signing machine:",
                "airlock keygen -o release",
            ),
            (
                "Pack and sign a model on the staging host, in volumes that fit a FAT32 stick:",
                "airlock pack ./llama -o /media/usb/llama --key release.key --volume-size fat32",
            ),
            (
                "On the target, verify and install:",
                "airlock unpack /media/usb/llama --trust /etc/airlock/trust --dest /srv/models/llama",
            ),
            (
                "Re-check the installed model later:",
                "airlock check /srv/models/llama --trust /etc/airlock/trust",
            ),
        ],
        Some("keygen") => &[
            (
                "A password-protected pair, release.pub and release.key:",
                "airlock keygen -o release",
            ),
            (
                "For automation, the password from a file:",
                "airlock keygen -o ci --password-file /run/secrets/pw",
            ),
        ],
        Some("pack") => &[
            (
                "Pack a directory:",
                "airlock pack ./llama -o llama-v3 --key release.key --version 3",
            ),
            (
                "Volumes that fit a FAT32 medium, no compression:",
                "airlock pack ./llama -o /media/usb/llama --key release.key --volume-size fat32 --compress none",
            ),
            (
                "From the Hugging Face cache, checking every file against its blob name:",
                "airlock pack --hf-repo org/model --revision main -o model --key release.key",
            ),
        ],
        Some("verify") => &[
            (
                "Check the signature and every volume on the medium:",
                "airlock verify /media/usb/llama --trust /etc/airlock/trust",
            ),
            (
                "Also decompress and check every file:",
                "airlock verify /media/usb/llama --trust /etc/airlock/trust --deep",
            ),
            (
                "Check the next airlock release: FILE.minisig and, under a root, its co-signatures:",
                "airlock verify airlock-0.2.0-x86_64-linux --trust /etc/airlock/root.json",
            ),
        ],
        Some("copy") => &[
            (
                "Onto one stick, read back from the device:",
                "airlock copy llama-bundle /media/usb --trust release.pub",
            ),
            (
                "Over three sticks, whole volumes in order; then verify them together:",
                "airlock copy llama-bundle /media/a /media/b /media/c --trust release.pub",
            ),
        ],
        Some("unpack") => &[
            (
                "Install into a new directory:",
                "airlock unpack llama-v3 --trust /etc/airlock/trust --dest /srv/models/llama",
            ),
            (
                "Upgrade an install atomically:",
                "airlock unpack llama-v4 --trust /etc/airlock/trust --dest /srv/models/llama --replace",
            ),
            (
                "Into a Hugging Face cache:",
                "airlock unpack model --trust /etc/airlock/trust --hf-cache ~/.cache/huggingface/hub",
            ),
        ],
        Some("inspect") => &[
            (
                "What a bundle holds (signature not checked):",
                "airlock inspect /media/usb/llama",
            ),
            (
                "Checksums for sha256sum -c after a manual recovery:",
                "airlock inspect /media/usb/llama --sha256sums > SHA256SUMS",
            ),
        ],
        Some("check") => &[
            (
                "Re-hash an installed model against its signed receipt:",
                "airlock check /srv/models/llama --trust /etc/airlock/trust",
            ),
            ("Lint any model directory:", "airlock check ./llama"),
            (
                "Every blob of a Hugging Face cache against its name:",
                "airlock check --hf-cache ~/.cache/huggingface/hub",
            ),
        ],
        Some("sign") => &[
            (
                "Sign airlock's release binary; stock minisign verifies it on the target:",
                "airlock sign airlock --key release.key",
            ),
            ("On the target:", "minisign -Vm airlock -p release.pub"),
        ],
        Some("repair") => &[
            (
                "Rebuild damaged volumes from parity, in place:",
                "airlock repair /var/tmp/llama --trust /etc/airlock/trust",
            ),
            (
                "From read-only media, combining two damaged copies:",
                "airlock repair /media/cdrom/llama --from /media/usb/llama -o /var/tmp/llama",
            ),
        ],
        Some("push") => &[
            (
                "On the landing host, verify the bundle in full and publish it:",
                "airlock push llama-v3 oci://registry.site:5000/models/llama:3 --trust /etc/airlock/trust",
            ),
            (
                "On each node, install from the registry:",
                "airlock unpack oci://registry.site:5000/models/llama:3 --trust /etc/airlock/trust --dest /srv/models/llama",
            ),
        ],
        Some("trust") => &[
            (
                "Make a root: bundles need 2 of the 3 release officers, the root needs 2 of the security team's 3 keys:",
                "airlock trust init --out root.json --key alice.pub --key bob.pub --key carol.pub --threshold 2 --root-key sec1.pub --root-key sec2.pub --root-key sec3.pub --root-threshold 2 --expires 2027-06-30",
            ),
            (
                "Each root key holder signs, on their own offline machine:",
                "airlock trust sign root.json --key sec1.key",
            ),
            (
                "Who can do what until when, and whether it is signed well enough:",
                "airlock trust show root.json",
            ),
            (
                "Rotate: version N+1 without bob, signed by the old and the new root keys, carried by the next bundle:",
                "airlock trust rotate root.json --out root2.json --key alice.pub --key carol.pub --key dave.pub --expires 2028-06-30",
            ),
        ],
        Some("cosign") => &[
            (
                "A second release officer co-signs the bundle on their own machine:",
                "airlock cosign /media/usb/llama-v3 --key bob.key",
            ),
            (
                "Or the next airlock release (writes airlock-0.2.0-x86_64-linux.KEYID.minisig):",
                "airlock cosign airlock-0.2.0-x86_64-linux --key bob.key --trust root.json",
            ),
        ],
        Some("completions") => &[(
            "bash:",
            "airlock completions bash > /etc/bash_completion.d/airlock",
        )],
        Some(_) => &[],
    }
}

/// Escapes text for roff: backslashes, a leading dot or quote, and hyphens (so that options
/// copied from the page are plain ASCII minus signs).
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

fn section(out: &mut String, title: &str) {
    if title.contains(' ') {
        out.push_str(&format!(".SH \"{title}\"\n"));
    } else {
        out.push_str(&format!(".SH {title}\n"));
    }
}

fn tagged(out: &mut String, tag: &str, text: &str) {
    out.push_str(&format!(
        ".TP\n\\fB{}\\fR\n{}\n",
        roff_text(tag),
        roff_text(text)
    ));
}

/// The extra sections for the page of `command` (None: airlock itself).
fn extra_sections(command: Option<&str>) -> String {
    let mut out = String::new();
    section(&mut out, "EXIT STATUS");
    for (code, text) in exit_status(command) {
        tagged(&mut out, code, &text);
    }
    let vars: Vec<&EnvVar> = ENVIRONMENT
        .iter()
        .filter(|v| command.is_none_or(|c| v.commands.contains(&c)))
        .collect();
    if !vars.is_empty() {
        section(&mut out, "ENVIRONMENT");
        for v in vars {
            tagged(&mut out, v.name, v.text);
        }
    }
    let examples = examples(command);
    if !examples.is_empty() {
        section(&mut out, "EXAMPLES");
        for (what, line) in examples {
            out.push_str(&format!(
                ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
                roff_text(what),
                roff_text(line)
            ));
        }
    }
    section(&mut out, "SEE ALSO");
    let mut pages: Vec<String> = std::iter::once("airlock".to_string())
        .chain(MAN_PAGES.iter().map(|c| format!("airlock-{c}")))
        .filter(|p| Some(p.as_str()) != command.map(|c| format!("airlock-{c}")).as_deref())
        .filter(|p| command.is_some() || p != "airlock")
        .map(|p| format!("\\fB{}\\fR(1)", roff_text(&p)))
        .collect();
    pages.push("\\fBminisign\\fR(1)".to_string());
    out.push_str(&pages.join(", "));
    out.push_str(
        "\n.PP\ndocs/CLI.md (every flag, error kind and JSON field), docs/RUNBOOK.md and docs/FORMAT.md in airlock's source.\n",
    );
    out
}

/// For a command with subcommands (`trust`): a SUBCOMMANDS section with each one's synopsis,
/// description and options, as clap_mangen renders them for a page of its own (issue 33 item
/// 9: `airlock man trust` listed no subcommand's options). The global options are on the page
/// already and are not repeated.
fn subcommand_sections(cmd: &clap::Command) -> String {
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        .collect();
    let mut out = String::new();
    if subs.is_empty() {
        return out;
    }
    section(&mut out, "SUBCOMMANDS");
    for sub in subs {
        let name = sub
            .get_bin_name()
            .map_or_else(|| sub.get_name().to_string(), str::to_string);
        let man = clap_mangen::Man::new(sub.clone());
        let mut page = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = man.render_synopsis_section(&mut page);
        let _ = man.render_description_section(&mut page);
        let _ = man.render_options_section(&mut page);
        out.push_str(&format!(".SS \"{}\"\n", roff_text(&name)));
        let mut global = false;
        for line in String::from_utf8_lossy(&page).lines() {
            if let Some(title) = line.strip_prefix(".SH ") {
                global = title.contains("GLOBAL");
                match title {
                    "DESCRIPTION" => out.push_str(".PP\n"),
                    "OPTIONS" => out.push_str(".PP\nOptions:\n"),
                    _ => {}
                }
                continue;
            }
            if !global {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The roff text of airlock(1), or of airlock-COMMAND(1).
pub fn page(command: Option<&str>) -> Vec<u8> {
    let mut root = Cli::command();
    root.build();
    let (cmd, title) = match command {
        None => (root.clone(), "airlock".to_string()),
        Some(name) => {
            let sub = root
                .find_subcommand(name)
                .expect("MAN_PAGES names subcommands")
                .clone()
                .display_name(format!("airlock-{name}"))
                .version(env!("CARGO_PKG_VERSION"));
            (sub, format!("airlock-{name}"))
        }
    };
    let man = clap_mangen::Man::new(cmd.clone())
        .title(title)
        .source(format!("airlock {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    let _ = man.render_options_section(&mut out);
    if command.is_none() {
        let _ = man.render_subcommands_section(&mut out);
    } else {
        out.extend_from_slice(subcommand_sections(&cmd).as_bytes());
    }
    out.extend_from_slice(extra_sections(command).as_bytes());
    let _ = man.render_version_section(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_lists_the_exit_code_of_a_bug_as_cli_md_does() {
        let code = airlock::error::EXIT_INTERNAL.to_string();
        for command in std::iter::once(None).chain(MAN_PAGES.iter().map(|c| Some(*c))) {
            assert!(
                exit_status(command).iter().any(|(c, _)| *c == code),
                "{command:?}: EXIT STATUS lacks {code}"
            );
        }
        let cli = include_str!("../../docs/CLI.md");
        assert!(
            cli.contains(&format!("| {code} | A bug in airlock")),
            "docs/CLI.md's exit codes lack {code}"
        );
    }

    #[test]
    fn every_page_has_options_exit_status_and_examples() {
        for command in std::iter::once(None).chain(MAN_PAGES.iter().map(|c| Some(*c))) {
            let text = String::from_utf8(page(command)).unwrap();
            for needle in [
                ".SH OPTIONS",
                ".SH \"EXIT STATUS\"",
                ".SH EXAMPLES",
                ".SH \"SEE ALSO\"",
            ] {
                assert!(text.contains(needle), "{command:?} lacks {needle}");
            }
            let title = command.map_or("airlock".to_string(), |c| format!("airlock-{c}"));
            assert!(text.contains(&format!(".TH {title} 1")), "{command:?}");
        }
        let verify = String::from_utf8(page(Some("verify"))).unwrap();
        assert!(
            verify.contains("AIRLOCK_TRUST") && verify.contains("\\-\\-deep"),
            "{verify}"
        );
        assert!(!verify.contains("SOURCE_DATE_EPOCH"));
    }

    /// Issue 33 item 9: `airlock man trust` named its subcommands but none of their options.
    #[test]
    fn a_page_with_subcommands_gives_each_ones_options() {
        let text = String::from_utf8(page(Some("trust"))).unwrap();
        assert!(text.contains(".SH SUBCOMMANDS"), "{text}");
        for (sub, option) in [
            ("init", "\\-\\-root\\-threshold"),
            ("sign", "\\-\\-key"),
            ("show", "\\-\\-previous"),
            ("rotate", "\\-\\-expires"),
        ] {
            let heading = format!(".SS \"airlock trust {sub}\"");
            let at = text
                .find(&heading)
                .unwrap_or_else(|| panic!("no {heading} in {text}"));
            let rest = &text[at + heading.len()..];
            let body = &rest[..rest
                .find(".SS ")
                .or_else(|| rest.find(".SH "))
                .unwrap_or(rest.len())];
            assert!(body.contains(".TP"), "{sub}: {body}");
            assert!(body.contains(option), "{sub} lacks {option}: {body}");
            assert!(!body.contains("GLOBAL"), "{body}");
        }
        // Pages without subcommands are as before.
        let verify = String::from_utf8(page(Some("verify"))).unwrap();
        assert!(!verify.contains(".SH SUBCOMMANDS"));
    }

    #[test]
    fn roff_text_is_escaped() {
        assert_eq!(roff_text(".hidden --x a\\b"), "\\&.hidden \\-\\-x a\\eb");
    }
}
