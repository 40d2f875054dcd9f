//! A small JSON tree: parse, look up, build and write. Numbers keep their
//! text, so what a guest passes through comes out as it came in.

use std::fmt::Write as _;

/// A JSON value. Objects keep their members in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A number, as its JSON text.
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// An error parsing JSON: where and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub offset: usize,
    pub reason: &'static str,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "json: offset {}: {}", self.offset, self.reason)
    }
}

static NULL: Value = Value::Null;

impl Value {
    /// Parses one JSON document.
    pub fn parse(b: &[u8]) -> Result<Value, ParseError> {
        let mut p = Parser { b, i: 0, depth: 0 };
        p.ws();
        let v = p.value()?;
        p.ws();
        if p.i != b.len() {
            return Err(p.err("trailing data after the document"));
        }
        Ok(v)
    }

    /// An empty object.
    pub fn object() -> Value {
        Value::Object(Vec::new())
    }

    /// An empty array.
    pub fn array() -> Value {
        Value::Array(Vec::new())
    }

    /// Sets member key of an object (replacing one of that name) and
    /// returns the object, for chaining. On anything else it does nothing.
    pub fn with(mut self, key: &str, v: impl Into<Value>) -> Value {
        self.set(key, v);
        self
    }

    /// Sets member key of an object, replacing one of that name.
    pub fn set(&mut self, key: &str, v: impl Into<Value>) {
        if let Value::Object(members) = self {
            let v = v.into();
            match members.iter_mut().find(|(k, _)| k == key) {
                Some(m) => m.1 = v,
                None => members.push((key.to_string(), v)),
            }
        }
    }

    /// Appends v to an array. On anything else it does nothing.
    pub fn push(&mut self, v: impl Into<Value>) {
        if let Value::Array(items) = self {
            items.push(v.into());
        }
    }

    /// Member key of an object; Null when there is none.
    pub fn get(&self, key: &str) -> &Value {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or(&NULL),
            _ => &NULL,
        }
    }

    /// The value at a path of object members, such as ["spec", "size"];
    /// Null when a step is missing.
    pub fn path(&self, path: &[&str]) -> &Value {
        path.iter().fold(self, |v, k| v.get(k))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The string, or "" for anything else.
    pub fn str_or_empty(&self) -> &str {
        self.as_str().unwrap_or("")
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A number that is an integer (also written as 3.0 or 3e2).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.parse::<i64>().ok().or_else(|| {
                let f = n.parse::<f64>().ok()?;
                if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
                    Some(f as i64)
                } else {
                    None
                }
            }),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// The items of an array; empty for anything else.
    pub fn items(&self) -> &[Value] {
        match self {
            Value::Array(items) => items,
            _ => &[],
        }
    }

    /// The members of an object; empty for anything else.
    pub fn members(&self) -> &[(String, Value)] {
        match self {
            Value::Object(members) => members,
            _ => &[],
        }
    }

    /// Writes the value as compact JSON.
    pub fn write_to(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(n),
            Value::String(s) => write_string(out, s),
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_to(out);
                }
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k);
                    out.push(':');
                    v.write_to(out);
                }
                out.push('}');
            }
        }
    }

    /// The value as compact JSON.
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_to(&mut s);
        s
    }
}

/// Writes s as a JSON string. Runs of bytes that need no escape are
/// copied whole: a guest's fuel goes to its logic, not to its output.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: &str = match c {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            c if c < 0x20 => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", c);
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::Number(n.to_string())
    }
}
impl From<i32> for Value {
    fn from(n: i32) -> Value {
        Value::Number(n.to_string())
    }
}
impl From<usize> for Value {
    fn from(n: usize) -> Value {
        Value::Number(n.to_string())
    }
}
impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Value {
        Value::Array(items)
    }
}
impl From<&Value> for Value {
    fn from(v: &Value) -> Value {
        v.clone()
    }
}

/// The deepest nesting the parser accepts: a request nested deeper is
/// refused instead of overflowing the guest's stack.
const MAX_DEPTH: usize = 512;

/// The end of the run of string bytes from i that need no decoding: the
/// index of the first '"', '\\' or control character, or b.len(). It
/// tests eight bytes at a time, which matters most in wasm, where every
/// load is bounds-checked.
fn plain_run(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Nonzero when a byte of w is below n (n <= 0x80).
    let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGH;
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7]]);
        if below(w, 0x20) | below(w ^ (ONES * b'"' as u64), 1) | below(w ^ (ONES * b'\\' as u64), 1) != 0 {
            break;
        }
        i += 8;
    }
    while i < b.len() && !matches!(b[i], b'"' | b'\\' | 0..=0x1f) {
        i += 1;
    }
    i
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, reason: &'static str) -> ParseError {
        ParseError { offset: self.i, reason }
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn lit(&mut self, word: &[u8], v: Value) -> Result<Value, ParseError> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'{') => self.nested(|p| p.object()),
            Some(b'[') => self.nested(|p| p.array()),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.lit(b"true", Value::Bool(true)),
            Some(b'f') => self.lit(b"false", Value::Bool(false)),
            Some(b'n') => self.lit(b"null", Value::Null),
            Some(c) if *c == b'-' || c.is_ascii_digit() => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Value, ParseError>) -> Result<Value, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Result<Value, ParseError> {
        self.i += 1; // {
        let mut members = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a member name"));
            }
            let k = self.string()?;
            self.ws();
            if self.b.get(self.i) != Some(&b':') {
                return Err(self.err("expected ':'"));
            }
            self.i += 1;
            self.ws();
            let v = self.value()?;
            members.push((k, v));
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self) -> Result<Value, ParseError> {
        self.i += 1; // [
        let mut items = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value()?);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.i < p.b.len() && p.b[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i > s
        };
        if !digits(self) {
            return Err(self.err("invalid number"));
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        if matches!(self.b.get(self.i), Some(b'e') | Some(b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+') | Some(b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        // ASCII by construction.
        Ok(Value::Number(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self.b.get(self.i..self.i + 4).ok_or_else(|| self.err("short \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| self.err("invalid \\u escape"))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // "
        let mut out: Vec<u8> = Vec::new();
        loop {
            // Runs of bytes that need no decoding are copied whole: most
            // strings are one run, and cost one allocation.
            let run = self.i;
            self.i = plain_run(self.b, self.i);
            out.extend_from_slice(&self.b[run..self.i]);
            let c = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.b[self.i..].starts_with(b"\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                } else {
                                    cp = 0xFFFD;
                                }
                            }
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => return Err(self.err("invalid escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(self.err("control character in string")),
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("invalid UTF-8 in string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_order_numbers_and_text() {
        let doc = r#"{"b":1,"a":[true,false,null,-0.5e3,12345678901234567890],"s":"q\"\\\n\t\u0001é😀","o":{}}"#;
        let v = Value::parse(doc.as_bytes()).unwrap();
        assert_eq!(v.get("a").items()[4], Value::Number("12345678901234567890".into()));
        assert_eq!(v.get("s").as_str(), Some("q\"\\\n\t\u{1}é😀"));
        assert_eq!(v.to_json(), r#"{"b":1,"a":[true,false,null,-0.5e3,12345678901234567890],"s":"q\"\\\n\t\u0001é😀","o":{}}"#);
    }

    /// plain_run finds what a byte-by-byte scan finds, wherever the byte
    /// that ends the run falls in or across the eight-byte words, and
    /// whatever the bytes around it (UTF-8 continuation bytes included).
    #[test]
    fn plain_run_agrees_with_a_byte_scan() {
        let slow = |b: &[u8], mut i: usize| {
            while i < b.len() && !matches!(b[i], b'"' | b'\\' | 0..=0x1f) {
                i += 1;
            }
            i
        };
        let fillers: [u8; 8] = [b'a', b' ', 0x7f, 0x80, 0xc3, 0xff, b'!', 0x21];
        let enders: [u8; 6] = [b'"', b'\\', 0x00, 0x1f, b'\n', 0x19];
        for len in 0..40 {
            for start in 0..len.min(9) + 1 {
                for (fi, &f) in fillers.iter().enumerate() {
                    let mut b: Vec<u8> = (0..len).map(|k| if (k + fi) % 3 == 0 { f } else { fillers[(k + fi) % 8] }).collect();
                    assert_eq!(plain_run(&b, start), slow(&b, start), "no ender, len {} from {}", len, start);
                    for at in start..len {
                        for &e in &enders {
                            let keep = b[at];
                            b[at] = e;
                            assert_eq!(plain_run(&b, start), slow(&b, start), "{:#x} at {} of {}, from {}: {:?}", e, at, len, start, b);
                            b[at] = keep;
                        }
                    }
                }
            }
        }
        assert_eq!(Value::parse(r#""a long string of plain bytes \u00e9 then \"quoted\" text é""#.as_bytes()).unwrap().as_str(), Some("a long string of plain bytes é then \"quoted\" text é"));
    }

    #[test]
    fn surrogate_pairs_decode() {
        let v = Value::parse(br#""\ud83d\ude00 \u00e9""#).unwrap();
        assert_eq!(v.as_str(), Some("😀 é"));
    }

    #[test]
    fn bad_documents_are_refused_with_where() {
        for (doc, reason) in [
            (&b"{} x"[..], "trailing data after the document"),
            (b"\"abc", "unterminated string"),
            (b"\"\\x\"", "invalid escape"),
            (b"[1,]", "unexpected character"),
            (b"{\"a\" 1}", "expected ':'"),
            (b"\"a\x01\"", "control character in string"),
            (b"-", "invalid number"),
            (b"1.", "invalid number"),
            (b"tru", "invalid literal"),
            (b"", "unexpected end of input"),
        ] {
            let e = Value::parse(doc).unwrap_err();
            assert_eq!(e.reason, reason, "{:?}", String::from_utf8_lossy(doc));
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(Value::parse(deep.as_bytes()).unwrap_err().reason, "nested too deeply");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(Value::parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn lookups_and_numbers() {
        let v = Value::parse(br#"{"spec":{"size":3,"big":3e2,"frac":2.5,"s":"x"}}"#).unwrap();
        assert_eq!(v.path(&["spec", "size"]).as_i64(), Some(3));
        assert_eq!(v.path(&["spec", "big"]).as_i64(), Some(300));
        assert_eq!(v.path(&["spec", "frac"]).as_i64(), None);
        assert_eq!(v.path(&["spec", "frac"]).as_f64(), Some(2.5));
        assert!(v.path(&["spec", "missing", "deeper"]).is_null());
        assert_eq!(v.path(&["spec", "s"]).as_i64(), None);
        assert_eq!(v.path(&["spec", "size"]).str_or_empty(), "");
    }

    #[test]
    fn set_replaces_and_with_chains() {
        let mut v = Value::object().with("a", 1).with("b", "x");
        v.set("a", 2);
        assert_eq!(v.to_json(), r#"{"a":2,"b":"x"}"#);
        let mut a = Value::array();
        a.push("y");
        a.push(Value::Null);
        assert_eq!(a.to_json(), r#"["y",null]"#);
    }
}
