//! Text for a person, made safe for a terminal.
//!
//! Much of what airlock reports quotes something it did not write: a file name on the medium or
//! in an installed tree, a tensor name or a GGUF key, a carried root's text inside a parse
//! error, a registry's error body. Any of them can hold escape sequences that erase the `BAD`
//! line above and print a green `OK`, move the cursor, retitle the window or write the
//! operator's clipboard (OSC 52), or Unicode format characters that make a terminal show the
//! rest of the line reversed (bidi overrides) or hide characters (zero-width). [`escape`]
//! makes such text inert: every character a terminal would act on rather than show is written
//! as an escape, and everything else (letters of any script, emoji, punctuation, the
//! backslash) is left as it is, so a model name in Japanese reads as it should.
//!
//! The binary passes every line it prints for a person through [`escape`] at the one place it
//! prints (`src/commands/term.rs`), whatever built the line, so a message quoting a name needs
//! no care of its own; a test ([`tests::only_the_terminal_module_prints`]) fails when code
//! anywhere else writes to stdout or stderr. The library uses it where such text is kept for
//! later (the findings `pack` records in a manifest's `warnings`, whose free text may hold no
//! control character) and where it is cut (a registry's error text). JSON documents keep their
//! values exact: [`escape_json`] writes the same characters as JSON `\u` escapes, which a parser
//! reads back unchanged.
//!
//! Numbers for a person have their one place here too: [`human`] (binary units, disk sizes),
//! [`human_size`] (decimal units, model files), [`grouped`] (`1,234,567`), [`plural`] and
//! [`count`] (`3 repositories`).

use std::borrow::Cow;

/// Whether `c` is escaped: C0 controls but TAB (LF and CR included), DEL, C1 controls, and
/// the Unicode format characters (general category Cf, Unicode 16.0: bidi embeddings,
/// overrides and isolates, zero-width spaces and joiners, the byte order mark, invisible
/// operators, tag characters, ...) with the line and paragraph separators U+2028 and U+2029.
///
/// LF and CR are escaped: a line airlock prints is one line, and a name holding a line break
/// could otherwise print a line of its own (`OK   model version 2 ...`) under it, or return to
/// the start of the line and write over it. TAB is shown as itself: it only moves the cursor
/// forward to the next tab stop, over blank cells, so it can neither erase nor rewrite what is
/// shown, and the text airlock quotes has it by design (a minisign trusted comment is
/// `timestamp:…<TAB>file:…`, and minisign shows it as it is). Free text kept in a manifest
/// has no TAB either ([`escape_bounded`]).
pub fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{890}'..='\u{891}'
                | '\u{8e2}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}'
        )
}

/// `text` with every character of [`needs_escape`] written as an escape: `\n`, `\r`; `\x1b`
/// for the other C0 controls and DEL; `\u{9b}`, `\u{202e}` for the rest. Text with nothing to
/// escape is returned as it is.
pub fn escape(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char) {
    use std::fmt::Write;
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c if !needs_escape(c) => out.push(c),
        c if u32::from(c) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

/// [`escape`], TAB written `\t` too, cut to at most `max` bytes (at a character boundary,
/// ending in `…`): free text as a manifest holds it (FORMAT.md section 7, rule 14: no control
/// character at all, at most 4096 bytes).
pub fn escape_bounded(text: &str, max: usize) -> String {
    let mut out = escape(text).replace('\t', "\\t");
    if out.len() > max {
        let mut cut = max.saturating_sub('…'.len_utf8());
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

/// The most characters of a value another party wrote that [`quote`] shows.
pub(crate) const QUOTE_MAX: usize = 80;

/// `text` quoted for a message (as `{:?}` quotes it), cut after [`QUOTE_MAX`] characters with
/// its length said: an error names a value, it does not repeat a document (a root's `_type` or
/// a bundle's media type of 60 KB made a 60 KB message).
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        None => format!("{text:?}"),
        Some((i, _)) => format!("{:?}… ({} bytes)", &text[..i], text.len()),
    }
}

/// `text` cut after [`QUOTE_MAX`] characters (ending in `…`), unquoted: a name another party
/// chose (a key id), shown in a message as it is when it is short.
pub fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(QUOTE_MAX) {
        None => std::borrow::Cow::Borrowed(text),
        Some((i, _)) => std::borrow::Cow::Owned(format!("{}… ({} bytes)", &text[..i], text.len())),
    }
}

/// What a JSON parser found wrong with a document, without quoting the document: serde's
/// message quotes a value of the wrong type (`invalid type: string "…", expected …`), which
/// repeated a whole document in the error, or a credential helper's secret. The position is
/// kept; a message of the parser's own (a field missing, a key given twice) is kept, cut to
/// [`QUOTE_MAX`] characters.
pub fn json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let text = e.to_string();
    let head = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(h, _)| h);
    let cut = |s: &str| match s.char_indices().nth(QUOTE_MAX) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    };
    let cut3 = |s: &str| match s.char_indices().nth(3 * QUOTE_MAX) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    };
    let what = match e.classify() {
        Category::Data if head.starts_with("invalid type") || head.starts_with("invalid value") => {
            match head.rsplit_once(", expected ") {
                Some((_, expected)) => {
                    format!(
                        "a value of another type where {} was expected",
                        cut(expected)
                    )
                }
                None => "a value of another type than expected".to_string(),
            }
        }
        // The parser's own words (a field missing, a key twice, a float): a longer cut.
        Category::Data | Category::Io => cut3(head),
        Category::Syntax => format!("not JSON ({})", cut(head)),
        Category::Eof => "cut short".to_string(),
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

/// A JSON document (as serde_json writes it) with every character of [`needs_escape`] that it
/// holds raw written as a JSON `\u` escape (a surrogate pair above U+FFFF). serde_json escapes
/// the C0 controls inside strings (those left are the document's own line breaks and
/// indentation) but leaves DEL, C1 controls and format characters raw; outside strings a JSON
/// text is ASCII, so each of them is inside a string, where the escape parses back to the same
/// character: the values stay exact, and the document is safe to show on a terminal.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    let raw = |c: char| needs_escape(c) && c >= ' ';
    let Some(first) = json.find(raw) else {
        return Cow::Borrowed(json);
    };
    let mut out = String::with_capacity(json.len() + 16);
    out.push_str(&json[..first]);
    for c in json[first..].chars() {
        if raw(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A byte count the way people read disk sizes: binary units, one decimal (`14.2 GiB`), plain
/// bytes below a KiB (`512 B`). Free space, volume sizes, transfer progress.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A model file's size for people: "4.9 GB (4943852032 bytes)", or "130 bytes" below a
/// kilobyte. Decimal units, as the Hugging Face Hub shows them.
pub fn human_size(n: u64) -> String {
    if n < 1000 {
        return count(n, "byte");
    }
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    let mut value = n as f64;
    let mut unit = UNITS[0];
    for u in UNITS {
        value /= 1000.0;
        unit = u;
        if value < 999.95 {
            break;
        }
    }
    format!("{value:.1} {unit} ({n} bytes)")
}

/// `1,234,567`: digits grouped by three with commas.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The noun for `n` of it: `noun` for one, else its plural (a consonant and `y` become `ies`,
/// as in `repository`, `tensor boundary`; any other noun takes an `s`).
pub fn plural(n: u64, noun: &str) -> Cow<'_, str> {
    if n == 1 {
        return Cow::Borrowed(noun);
    }
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies").into(),
        _ => format!("{noun}s").into(),
    }
}

/// `1 blob`, `2 blobs`, `3 repositories`.
pub fn count(n: u64, noun: &str) -> String {
    format!("{n} {}", plural(n, noun))
}

/// [`count`] with the number [`grouped`]: `1,024 NaN values`.
pub fn count_grouped(n: u64, noun: &str) -> String {
    format!("{} {}", grouped(n), plural(n, noun))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units_with_one_decimal() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.0 KiB");
        assert_eq!(human(15_249_906_688), "14.2 GiB");
        assert_eq!(human(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn model_sizes_read_in_decimal_units_with_the_bytes() {
        assert_eq!(human_size(1), "1 byte");
        assert_eq!(human_size(999), "999 bytes");
        assert_eq!(human_size(1000), "1.0 kB (1000 bytes)");
        assert_eq!(human_size(4_943_852_032), "4.9 GB (4943852032 bytes)");
    }

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn nouns_take_their_plural_for_any_count_but_one() {
        assert_eq!(count(1, "blob"), "1 blob");
        assert_eq!(count(0, "blob"), "0 blobs");
        assert_eq!(count(2, "repository"), "2 repositories");
        assert_eq!(count(1, "repository"), "1 repository");
        assert_eq!(count(3, "key"), "3 keys");
        assert_eq!(count(2, "tensor boundary"), "2 tensor boundaries");
        assert_eq!(count_grouped(1024, "NaN value"), "1,024 NaN values");
        assert_eq!(count_grouped(1, "block"), "1 block");
    }

    #[test]
    fn escapes_what_a_terminal_acts_on_and_keeps_the_rest() {
        let cases = [
            ("plain ascii", "plain ascii"),
            ("モデル 名前 ü ß 🦀 \\ \" '", "モデル 名前 ü ß 🦀 \\ \" '"),
            ("a\u{1b}[2Kb", "a\\x1b[2Kb"),
            ("\u{1b}]52;c;ZXZpbA==\u{7}", "\\x1b]52;c;ZXZpbA==\\x07"),
            ("tab\there\nline\rcr", "tab\there\\nline\\rcr"),
            ("nul\0del\u{7f}", "nul\\x00del\\x7f"),
            ("csi\u{9b}31m nel\u{85}", "csi\\u{9b}31m nel\\u{85}"),
            ("bidi \u{202e}txt.exe", "bidi \\u{202e}txt.exe"),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            (
                "z\u{200b}w\u{200c}j\u{200d}l\u{200e}r\u{200f}b\u{feff}",
                "z\\u{200b}w\\u{200c}j\\u{200d}l\\u{200e}r\\u{200f}b\\u{feff}",
            ),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("tag\u{e0041}\u{e007f}", "tag\\u{e0041}\\u{e007f}"),
            ("shy\u{ad}alm\u{61c}", "shy\\u{ad}alm\\u{61c}"),
        ];
        for (raw, shown) in cases {
            assert_eq!(escape(raw), shown, "{raw:?}");
            assert!(!escape(raw).contains(needs_escape), "{raw:?}");
        }
        assert!(matches!(escape("nothing to do"), Cow::Borrowed(_)));
    }

    /// Every code point is either shown as itself or escaped into printable ASCII, and the
    /// escaped set is the one documented: Cc, Cf and the two separators (checked against the
    /// ranges of Unicode 16.0's DerivedGeneralCategory.txt, which the list copies).
    #[test]
    fn every_code_point_is_shown_or_escaped_to_printable_ascii() {
        for c in (0..=0x10_ffffu32).filter_map(char::from_u32) {
            let text = c.to_string();
            let shown = escape(&text);
            if needs_escape(c) {
                assert!(
                    shown.starts_with('\\') && shown.bytes().all(|b| (0x20..0x7f).contains(&b)),
                    "{c:?} -> {shown:?}"
                );
            } else {
                assert_eq!(shown, text);
            }
        }
        let escaped = (0..=0x10_ffffu32)
            .filter_map(char::from_u32)
            .filter(|&c| needs_escape(c))
            .count();
        // 65 Cc but TAB + 170 Cf (Unicode 16.0) + U+2028 + U+2029.
        assert_eq!(escaped, 64 + 170 + 2);
    }

    #[test]
    fn what_another_party_wrote_is_quoted_short_and_json_errors_quote_no_value() {
        assert_eq!(quote("root"), "\"root\"");
        let long = "é".repeat(100);
        let q = quote(&long);
        assert!(
            q.starts_with(&format!("{:?}", "é".repeat(QUOTE_MAX))),
            "{q}"
        );
        assert!(q.ends_with("… (200 bytes)"), "{q}");
        assert_eq!(bounded("abc"), "abc");
        assert!(bounded(&"x".repeat(1000)).len() < 100);
        let e = serde_json::from_str::<u32>("\"s3cr3t-token\"").unwrap_err();
        let m = json_error(&e);
        assert!(!m.contains("s3cr3t"), "{m}");
        assert!(
            m.starts_with("a value of another type where u32 was expected"),
            "{m}"
        );
        let e = serde_json::from_str::<Vec<u32>>("[1,").unwrap_err();
        assert_eq!(json_error(&e), "cut short at line 1 column 3");
        let e = serde_json::from_str::<u32>("s3cr3t").unwrap_err();
        assert!(
            json_error(&e).starts_with("not JSON (expected value)"),
            "{}",
            json_error(&e)
        );
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct S {
            a: u32,
        }
        let e = serde_json::from_str::<S>("{}").unwrap_err();
        assert_eq!(json_error(&e), "missing field `a` at line 1 column 2");
    }

    #[test]
    fn bounded_escapes_then_cuts_at_a_character_boundary() {
        let long = format!("{}\u{1b}\té", "a".repeat(10));
        assert_eq!(escape_bounded(&long, 100), "aaaaaaaaaa\\x1b\\té");
        let cut = escape_bounded(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 && cut.ends_with('…'), "{cut:?}");
        assert_eq!(cut, "éééé…");
    }

    /// What writes to the terminal: print macros, the standard streams, and what hands text to
    /// something that draws it (the progress bar, a password prompt).
    const PRINTING: &[&str] = &[
        "print!(",
        "println!(",
        "dbg!(",
        "io::stdout()",
        "io::stderr()",
        "Term::stdout()",
        "Term::stderr()",
        "Term::buffered_stdout()",
        "Term::buffered_stderr()",
        "set_message(",
        "with_message(",
        "with_prefix(",
        "prompt_password(",
    ];

    /// (file, call, why): what may stay outside `src/commands/term.rs`.
    const PRINT_ALLOWED: &[(&str, &str, &str)] = &[
        (
            "src/commands/ui.rs",
            "Term::buffered_stderr()",
            "the progress bar's draw target: its file name and phase are set through term::shown",
        ),
        (
            "src/commands/ui.rs",
            "Term::stderr()",
            "damage_map::terminal_width asks the terminal's width: it writes nothing",
        ),
        (
            "src/commands/verify.rs",
            "Term::stdout()",
            "damage_map::terminal_width asks the terminal's width: it writes nothing",
        ),
        (
            "src/commands/secret.rs",
            "prompt_password(",
            "the prompt is made of term::shown parts on the lines above it",
        ),
    ];

    /// Every line the binary prints for a person goes out through `src/commands/term.rs`,
    /// which escapes it ([`escape`]); the library prints nothing. A line that writes to
    /// stdout or stderr anywhere else, or hands text to the bar or a prompt without
    /// `shown(`, fails this test. Asking whether a stream is a terminal, or how wide, writes
    /// nothing; a literal prompt quotes nothing.
    #[test]
    fn only_the_terminal_module_prints() {
        let mut found = Vec::new();
        for (rel, code) in crate::source_rules::non_test_sources() {
            if rel == "src/commands/term.rs" {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for call in PRINTING {
                    let Some(at) = code.find(call) else { continue };
                    let after = &code[at + call.len()..];
                    let harmless = code.contains("is_terminal")
                        || code.contains("size_checked")
                        || code.contains("shown(")
                        || (call.ends_with('(') && !call.ends_with("!(") && after.starts_with('"'))
                        || PRINT_ALLOWED.iter().any(|(f, c, _)| *f == rel && c == call);
                    if !harmless {
                        found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "written to the terminal outside src/commands/term.rs (print through term::out_lines, \
             term::err_line or term::ask, hand drawn text through term::shown, or add the call \
             to PRINT_ALLOWED with the reason):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn json_keeps_its_values_and_loses_the_raw_characters() {
        let value = serde_json::json!({
            "name": "a\u{1b}[1Ab\u{7f}\u{9b}\u{202e}\u{200b}\u{e0041}モデル",
        });
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = escape_json(&text);
        assert!(
            !safe.contains(|c: char| needs_escape(c) && !c.is_ascii_whitespace()),
            "{safe}"
        );
        assert!(
            safe.contains(r"\u007f\u009b\u202e\u200b\udb40\udc41モデル"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
