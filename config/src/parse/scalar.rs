//! YAML 1.1 scalar resolution, as PyYAML's resolver and constructors have it: tags, null,
//! booleans, integers (of any size, through Python-only stand-ins), floats, timestamps and
//! `!!binary`. Both YAML readers resolve their scalars here, and the JSON reader makes its big
//! integers' stand-ins here too.

use serde_json::{Number, Value};
use yaml_rust2::parser::Tag;
use yaml_rust2::scanner::TScalarStyle;

use super::py_only_value;

/// The prefix of YAML's core tags (`!!str` is `tag:yaml.org,2002:str`).
pub(super) const CORE_TAG: &str = "tag:yaml.org,2002:";

/// Why a scalar has no value; the texts are PyYAML's constructors'.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ScalarError {
    /// A tag upstream's loader has no constructor for (the whole tag).
    #[error("could not determine a constructor for the tag '{0}'")]
    NoConstructor(String),
    /// `!!bool` on a text that is no YAML 1.1 boolean.
    #[error("invalid boolean '{0}'")]
    Bool(String),
    /// `!!int` on a text that is no YAML 1.1 integer.
    #[error("invalid integer '{0}'")]
    Int(String),
    /// `!!timestamp` on a text that is no YAML 1.1 timestamp.
    #[error("invalid timestamp '{0}'")]
    Timestamp(String),
    /// `!!binary` on a text that is not base64.
    #[error("failed to convert base64 data: '{0}'")]
    Binary(String),
    /// `!!float` on a text that is no YAML 1.1 number.
    #[error("invalid float '{0}'")]
    Float(String),
}

/// The scalar `text` as its tag, or as YAML 1.1's implicit resolution, says (taken whole when
/// it stays a string).
pub(super) fn resolve_scalar(
    text: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
) -> Result<Value, ScalarError> {
    if let Some(tag) = tag {
        let text = text.as_str();
        if tag.handle == "!" && tag.suffix.is_empty() {
            return Ok(Value::String(text.to_owned()));
        }
        if tag.handle != CORE_TAG {
            return Err(ScalarError::NoConstructor(format!(
                "{}{}",
                tag.handle, tag.suffix
            )));
        }
        let owned = || text.to_owned();
        return match tag.suffix.as_str() {
            "str" => Ok(Value::String(text.to_owned())),
            "null" => Ok(Value::Null),
            "bool" => yaml_bool(text)
                .map(Value::Bool)
                .ok_or_else(|| ScalarError::Bool(owned())),
            "int" => yaml_int(text).ok_or_else(|| ScalarError::Int(owned())),
            "timestamp" => yaml_timestamp(text)
                .map(|class| py_only_value(class, Value::String(text.to_owned())))
                .ok_or_else(|| ScalarError::Timestamp(owned())),
            "binary" => base64_decode(text)
                .map(|bytes| py_only_value("bytes", Value::String(py_bytes_repr(&bytes))))
                .ok_or_else(|| ScalarError::Binary(owned())),
            "float" => yaml_float(text)
                .or_else(|| yaml_int(text))
                .ok_or_else(|| ScalarError::Float(owned())),
            other => Err(ScalarError::NoConstructor(format!("{CORE_TAG}{other}"))),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(Value::String(text));
    }
    // Every implicit type but text (null, booleans, numbers, timestamps, `.inf`, `<<`, `=`)
    // starts with a sign, a digit, a dot, one of these letters or a symbol: most names and
    // words are text at once.
    if text
        .as_bytes()
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() && !b"nNtTfFyYoO".contains(c))
    {
        return Ok(Value::String(text));
    }
    if text == "<<" {
        // PyYAML resolves `<<` to the merge tag, which upstream's loader cannot construct
        return Err(ScalarError::NoConstructor(format!("{CORE_TAG}merge")));
    }
    if text == "=" {
        // likewise the YAML 1.1 value tag
        return Err(ScalarError::NoConstructor(format!("{CORE_TAG}value")));
    }
    if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Value::Null);
    }
    if let Some(b) = yaml_bool(&text) {
        return Ok(Value::Bool(b));
    }
    if let Some(class) = yaml_timestamp(&text) {
        return Ok(py_only_value(class, Value::String(text)));
    }
    if let Some(v) = yaml_int(&text) {
        return Ok(v);
    }
    if let Some(v) = yaml_float(&text) {
        return Ok(v);
    }
    Ok(Value::String(text))
}

/// Standard base64 (whitespace ignored, padding optional), for `!!binary`.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(compact).ok()
}

/// Python's `str(bytes)`: `b'…'` with non-printable bytes escaped.
fn py_bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = format!("b{quote}");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            _ if char::from(b) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push(quote);
    out
}

/// PyYAML's YAML 1.1 timestamp resolver: `yyyy-mm-dd` is a date, with a time part a datetime
/// (the class name of the Python value).
fn yaml_timestamp(t: &str) -> Option<&'static str> {
    // `s` is 1 to `max` ASCII digits (exactly `max` when `exact`)
    let num = |s: &str, max: usize, exact: bool| {
        let len_ok = if exact {
            s.len() == max
        } else {
            (1..=max).contains(&s.len())
        };
        len_ok && s.bytes().all(|c| c.is_ascii_digit())
    };
    let b = t.as_bytes();
    // both forms start with a four-digit year and a dash
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return None;
    }
    if b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && num(&t[..4], 4, true)
        && num(&t[5..7], 2, true)
        && num(&t[8..], 2, true)
    {
        return Some("datetime.date");
    }
    // [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(\.[0-9]*)?
    //   ([ \t]*(Z|[-+][0-9]{1,2}(:[0-9]{2})?))?
    let (date, rest) = t.split_at(t.find(['T', 't', ' ', '\t'])?);
    let date: Vec<&str> = date.split('-').collect();
    let date_ok =
        matches!(date[..], [y, m, d] if num(y, 4, true) && num(m, 2, false) && num(d, 2, false));
    let rest = match rest.strip_prefix(['T', 't']) {
        Some(r) => r,
        None => rest.trim_start_matches([' ', '\t']),
    };
    let time_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let (time, zone) = rest.split_at(time_end);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let hms: Vec<&str> = hms.split(':').collect();
    let time_ok = matches!(hms[..], [h, m, s] if num(h, 2, false) && num(m, 2, true) && num(s, 2, true))
        && frac.bytes().all(|c| c.is_ascii_digit());
    let zone = zone.trim_start_matches([' ', '\t']);
    let zone_ok = zone.is_empty() || zone == "Z" || {
        let z = zone.strip_prefix(['+', '-']).unwrap_or("");
        let (zh, zm) = z.split_once(':').unwrap_or((z, "00"));
        num(zh, 2, false) && num(zm, 2, true)
    };
    (date_ok && time_ok && zone_ok).then_some("datetime.datetime")
}

fn yaml_bool(t: &str) -> Option<bool> {
    match t {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// The sign of a number as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sign {
    /// No sign, or `+`.
    Plus,
    /// `-`.
    Minus,
}

impl Sign {
    /// How the sign prefixes a number's text: `-` or nothing.
    fn prefix(self) -> &'static str {
        match self {
            Sign::Plus => "",
            Sign::Minus => "-",
        }
    }
}

/// A number's sign and the text after it.
fn split_sign(t: &str) -> (Sign, &str) {
    match t.as_bytes().first() {
        Some(b'-') => (Sign::Minus, &t[1..]),
        Some(b'+') => (Sign::Plus, &t[1..]),
        _ => (Sign::Plus, t),
    }
}

/// An integer as JSON holds it; beyond 64 bits, the stand-in for a Python int (PyYAML's ints
/// are unbounded).
fn int_value(sign: Sign, magnitude: u128) -> Option<Value> {
    let fits = match sign {
        Sign::Minus => i64::try_from(magnitude).map(|m| Value::from(-m)).ok(),
        Sign::Plus => u64::try_from(magnitude).map(Value::from).ok(),
    };
    Some(fits.unwrap_or_else(|| big_int(sign, &magnitude.to_string())))
}

/// The stand-in for an integer beyond 64 bits, from its decimal digits.
pub(super) fn big_int(sign: Sign, digits: &str) -> Value {
    let digits = digits.trim_start_matches('0');
    py_only_value("int", Value::String(format!("{}{digits}", sign.prefix())))
}

/// PyYAML's YAML 1.1 int resolver: binary, octal, decimal, hex and base-60, `_` allowed.
fn yaml_int(t: &str) -> Option<Value> {
    let (sign, body) = split_sign(t);
    let parse_radix = |digits: &str, radix: u32| -> Option<u128> {
        let cleaned: String = digits.chars().filter(|c| *c != '_').collect();
        if cleaned.is_empty() {
            // PyYAML: "0b_" resolves as int but then fails to construct; treat as not-an-int
            return None;
        }
        u128::from_str_radix(&cleaned, radix).ok()
    };
    let all = |s: &str, f: fn(char) -> bool| !s.is_empty() && s.chars().all(|c| f(c) || c == '_');
    if let Some(d) = body.strip_prefix("0b") {
        if all(d, |c| c == '0' || c == '1') {
            return int_value(sign, parse_radix(d, 2)?);
        }
        return None;
    }
    if let Some(d) = body.strip_prefix("0x") {
        if all(d, |c| c.is_ascii_hexdigit()) {
            return int_value(sign, parse_radix(d, 16)?);
        }
        return None;
    }
    if body == "0" {
        return Some(Value::from(0));
    }
    if let Some(d) = body.strip_prefix('0') {
        if all(d, |c| ('0'..='7').contains(&c)) {
            return int_value(sign, parse_radix(d, 8)?);
        }
        return None;
    }
    if body.starts_with(|c: char| ('1'..='9').contains(&c)) {
        if all(body, |c| c.is_ascii_digit()) {
            return match parse_radix(body, 10) {
                Some(m) => int_value(sign, m),
                None => Some(big_int(sign, &body.replace('_', ""))),
            };
        }
        // base 60: [1-9][0-9_]*(:[0-5]?[0-9])+
        let mut parts = body.split(':');
        let first = parts.next()?;
        if !all(first, |c| c.is_ascii_digit()) {
            return None;
        }
        let mut acc = parse_radix(first, 10)?;
        let mut any = false;
        for p in parts {
            let ok = matches!(p.len(), 1 | 2)
                && p.chars().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || p.as_bytes()[0] <= b'5');
            if !ok {
                return None;
            }
            acc = acc.checked_mul(60)?.checked_add(p.parse::<u128>().ok()?)?;
            any = true;
        }
        if any {
            return int_value(sign, acc);
        }
    }
    None
}

/// PyYAML's YAML 1.1 float resolver (a dot is required; exponents need a sign).
fn yaml_float(t: &str) -> Option<Value> {
    let (sign, body) = split_sign(t);
    // JSON cannot hold infinities and NaN: Python-only stand-ins
    if matches!(body, ".inf" | ".Inf" | ".INF") {
        let text = format!("{}inf", sign.prefix());
        return Some(py_only_value("float", Value::String(text)));
    }
    if matches!(t, ".nan" | ".NaN" | ".NAN") {
        return Some(py_only_value("float", Value::String("nan".into())));
    }
    let digits_ = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c == '_');
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => {
            let exp = &body[i + 1..];
            let (_, exp_digits) = split_sign(exp);
            if !(exp.starts_with(['+', '-'])
                && !exp_digits.is_empty()
                && exp_digits.chars().all(|c| c.is_ascii_digit()))
            {
                return None;
            }
            (&body[..i], Some(exp))
        }
        None => (body, None),
    };
    let (int_part, frac) = mantissa.split_once('.')?;
    let valid = if int_part.is_empty() {
        // \.[0-9][0-9_]* — no sign allowed in this alternative
        sign == Sign::Plus
            && !t.starts_with('+')
            && frac.starts_with(|c: char| c.is_ascii_digit())
            && digits_(frac)
    } else if int_part.contains(':') {
        exponent.is_none() && digits_(frac) && int_part.starts_with(|c: char| c.is_ascii_digit())
    } else {
        int_part.starts_with(|c: char| c.is_ascii_digit()) && digits_(int_part) && digits_(frac)
    };
    if !valid {
        return None;
    }
    let value = if int_part.contains(':') {
        let mut acc = 0f64;
        for (i, p) in int_part.split(':').enumerate() {
            let p: String = p.chars().filter(|c| *c != '_').collect();
            let ok =
                i == 0 || (matches!(p.len(), 1 | 2) && (p.len() == 1 || p.as_bytes()[0] <= b'5'));
            if !ok || p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            acc = acc * 60.0 + p.parse::<f64>().ok()?;
        }
        let frac: String = frac.chars().filter(|c| *c != '_').collect();
        acc + format!("0.{frac}0").parse::<f64>().ok()?
    } else {
        let cleaned: String = format!(
            "{int_part}.{frac}{}",
            exponent.map(|e| format!("e{e}")).unwrap_or_default()
        )
        .chars()
        .filter(|c| *c != '_')
        .collect();
        let cleaned = if cleaned.starts_with('.') {
            format!("0{cleaned}")
        } else {
            cleaned
        };
        let cleaned = cleaned.replace(".e", ".0e");
        let cleaned = if cleaned.ends_with('.') {
            format!("{cleaned}0")
        } else {
            cleaned
        };
        cleaned.parse::<f64>().ok()?
    };
    let value = match sign {
        Sign::Plus => value,
        Sign::Minus => -value,
    };
    Number::from_f64(value).map(Value::Number)
}
