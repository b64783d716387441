//! JSON for TUF metadata: a strict reader, the OLPC canonical form that signatures cover, and
//! the file layout python-tuf writes.
//!
//! A TUF signature covers the *canonical* JSON of the `signed` object, not the file's bytes, so
//! the reader must see exactly the object every other implementation sees. Two things would let
//! two readers disagree, and both are refused here: a key repeated in one object (serde_json's
//! own `Value` keeps the last one silently; Python's `json` does the same, another parser may
//! keep the first) and a number that is not an integer (canonical JSON has no floats, and a
//! float cannot be re-encoded byte for byte).
//!
//! The canonical form is securesystemslib's `encode_canonical` (`securesystemslib/formats.py`),
//! which python-tuf's `CanonicalJSONSerializer` uses: object keys sorted by code point, no
//! whitespace, integers in decimal, and strings between quotes with only `\` and `"` escaped;
//! every other character, control characters and non-ASCII included, is written as its UTF-8
//! bytes.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value as TUF metadata may hold it: no floats, no duplicate keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer (JSON allows any; this holds what fits in 64 bits, signed or not).
    Int(i128),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, keys in code-point order (the order canonical JSON writes them in).
    Object(BTreeMap<String, Value>),
}

impl Value {
    /// The object's fields, if this is an object.
    pub fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Str(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value without floats or duplicate keys")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Err(E::custom(format!(
            "the number {v} is not an integer (canonical JSON has no floats, and integers beyond 64 bits are refused)"
        )))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(de::Error::custom(format!(
                    "the key {} appears twice in one object",
                    crate::display::quote(&k)
                )));
            }
            let v: Value = map.next_value()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Parses one JSON document strictly: UTF-8 without a byte-order mark, nothing after the value,
/// no duplicate keys, no floats.
pub fn parse(bytes: &[u8]) -> Result<Value, JsonError> {
    serde_json::from_slice(bytes).map_err(|e| JsonError {
        category: e.classify(),
        reason: crate::display::json_error(&e),
    })
}

/// Why a document is not JSON as TUF writes it ([`parse`]): the kind of fault, and the
/// parser's reason bounded for a message ([`crate::display::json_error`]), its `Display`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// Syntax, data (a duplicate key, a float), an early end of file, or I/O.
    pub category: serde_json::error::Category,
    reason: String,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for JsonError {}

/// The OLPC canonical JSON of `v`, as securesystemslib's `encode_canonical` writes it (then
/// encoded as UTF-8, as python-tuf does before signing).
pub fn canonical(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Str(s) => canonical_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            out.push(b'{');
            // BTreeMap<String> iterates in byte order of the UTF-8 keys, which is code-point
            // order: the order of Python's sorted() on str keys.
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_string(k, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
    }
}

fn canonical_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for b in s.bytes() {
        if b == b'\\' || b == b'"' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// The file layout python-tuf's `JSONSerializer` writes (`json.dumps(indent=1,
/// separators=(",", ": "), sort_keys=True)`, ASCII only), plus a final newline. Any layout
/// would do, since signatures cover the canonical form; this one lets python-tuf rewrite an
/// airlock root without changing a byte.
pub fn pretty(v: &Value) -> Vec<u8> {
    let mut out = String::new();
    write_pretty(v, 0, &mut out);
    out.push('\n');
    out.into_bytes()
}

fn indent(level: usize, out: &mut String) {
    out.push('\n');
    for _ in 0..level {
        out.push(' ');
    }
}

fn write_pretty(v: &Value, level: usize, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Str(s) => ascii_string(s, out),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(level + 1, out);
                write_pretty(item, level + 1, out);
            }
            indent(level, out);
            out.push(']');
        }
        Value::Object(fields) if fields.is_empty() => out.push_str("{}"),
        Value::Object(fields) => {
            out.push('{');
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(level + 1, out);
                ascii_string(k, out);
                out.push_str(": ");
                write_pretty(item, level + 1, out);
            }
            indent(level, out);
            out.push('}');
        }
    }
}

/// A string as Python's `json.dumps` writes it with `ensure_ascii=True`.
pub(crate) fn ascii_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        String::from_utf8(canonical(&parse(text.as_bytes()).unwrap())).unwrap()
    }

    #[test]
    fn canonical_form_matches_securesystemslib() {
        // The doctests of securesystemslib's encode_canonical.
        assert_eq!(canon(r#""""#), r#""""#);
        assert_eq!(canon("[1, 2, 3]"), "[1,2,3]");
        assert_eq!(canon("[]"), "[]");
        assert_eq!(canon(r#"{"A": [99]}"#), r#"{"A":[99]}"#);
        assert_eq!(canon(r#"{"x" : 3, "y" : 2}"#), r#"{"x":3,"y":2}"#);
        // Keys sorted by code point, nested; only quote and backslash escaped; control and
        // non-ASCII characters written raw.
        assert_eq!(
            canon(r#"{"b": {"z": null, "a": true}, "a": "q\"\\\n\u00e9", "B": -7}"#),
            "{\"B\":-7,\"a\":\"q\\\"\\\\\n\u{e9}\",\"b\":{\"a\":true,\"z\":null}}"
        );
        assert_eq!(
            canon(r#"{"é": 1, "z": 2, "Z": 3}"#),
            "{\"Z\":3,\"z\":2,\"é\":1}"
        );
    }

    #[test]
    fn duplicate_keys_and_floats_are_refused() {
        use serde_json::error::Category;
        let e = parse(br#"{"a": 1, "b": {"k": 1, "k": 2}}"#).unwrap_err();
        assert_eq!(e.category, Category::Data, "{e}");
        assert!(e.to_string().contains("appears twice"), "{e}");
        let e = parse(br#"{"threshold": 1.0}"#).unwrap_err();
        assert_eq!(e.category, Category::Data, "{e}");
        assert!(e.to_string().contains("not an integer"), "{e}");
        assert!(parse(br#"{"v": 18446744073709551616}"#).is_err());
        assert_eq!(parse(b"{").unwrap_err().category, Category::Eof);
        assert!(parse(b"\xef\xbb\xbf{}").is_err());
        assert!(parse(b"{} {}").is_err());
        assert_eq!(
            parse(b"18446744073709551615").unwrap(),
            Value::Int(u64::MAX.into())
        );
    }

    #[test]
    fn pretty_layout_is_pythons() {
        let v = parse(br#"{"b": [], "a": {"x": [1, "\u00e9\n"], "e": {}}}"#).unwrap();
        // json.dumps(v, indent=1, separators=(",", ": "), sort_keys=True)
        assert_eq!(
            String::from_utf8(pretty(&v)).unwrap(),
            "{\n \"a\": {\n  \"e\": {},\n  \"x\": [\n   1,\n   \"\\u00e9\\n\"\n  ]\n },\n \"b\": []\n}\n"
        );
    }
}
