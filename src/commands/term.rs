//! The one place the binary writes to stdout and stderr.
//!
//! Every line for a person (result lines, warnings, the error and its hint, progress lines,
//! the medium prompt, password prompts) is passed through [`airlock::display::escape`] here,
//! whatever built it: a message that quotes a file name, a tensor name or a registry's answer
//! cannot move the cursor, rewrite the line above, write the clipboard or turn the rest of the
//! line around. A JSON document keeps its values exact ([`airlock::display::escape_json`]).
//! `airlock::display`'s test `only_the_terminal_module_prints` fails when anything else in
//! `src/` writes to stdout or stderr.

use std::io::{self, Write};

use airlock::display::{escape, escape_json};

/// What a person is shown of `text`: escaped. For text handed to something that draws it
/// (the progress bar's file name and phase, a password prompt).
pub fn shown(text: &str) -> String {
    escape(text).into_owned()
}

/// Writes `lines` to stdout, one a line, each escaped.
pub fn out_lines(lines: &[String]) -> io::Result<()> {
    let mut text = String::new();
    for l in lines {
        text.push_str(&escape(l));
        text.push('\n');
    }
    out_raw(text.as_bytes())
}

/// Writes one JSON document to stdout, the characters a terminal acts on as `\u` escapes.
pub fn out_json(text: &str) -> io::Result<()> {
    out_raw(escape_json(text).as_bytes())
}

/// Writes text airlock generated whole (a completion script, a man page) to stdout as it is.
pub fn out_generated(bytes: &[u8]) -> io::Result<()> {
    out_raw(bytes)
}

/// Writes and flushes `bytes` to stdout, treating a closed pipe as done.
fn out_raw(bytes: &[u8]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes one line to stderr, escaped. A stderr nobody reads any more loses the line.
pub fn err_line(line: &str) {
    let mut text = escape(line).into_owned();
    text.push('\n');
    let mut stderr = io::stderr().lock();
    let _ = stderr
        .write_all(text.as_bytes())
        .and_then(|()| stderr.flush());
}

/// Writes a question to stderr, escaped, without a line end (the answer is typed after it).
pub fn ask(question: &str) {
    let mut stderr = io::stderr().lock();
    let _ = stderr
        .write_all(escape(question).as_bytes())
        .and_then(|()| stderr.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_leaves_plain_names() {
        assert_eq!(
            shown("weights/model.safetensors"),
            "weights/model.safetensors"
        );
        assert_eq!(shown("a\u{1b}[2K\u{202e}"), "a\\x1b[2K\\u{202e}");
    }
}
