//! How SQS's names, attributes and digests map onto fila's.
//!
//! - A queue URL is `http://HOST/000000000000/NAME` (the host is the one
//!   the request was sent to, and is ignored when a URL comes back: only
//!   its last segment, the name, counts); an ARN is
//!   `arn:aws:sqs:REGION:000000000000:NAME`.
//! - A message id is fila's (a 64-bit number) as a UUID-shaped string; a
//!   receipt handle is fila's 32-byte receipt in base64.
//! - A message attribute of type `String` (or `String.<label>`) is a fila
//!   attribute of its name and value; `Number` keeps its decimal text;
//!   `Binary` is its value in base64. The types that are not plain
//!   `String` are kept in one more fila attribute, [`TYPES_KEY`]
//!   (`name=type` pairs joined by `,`), so a binary-protocol client reads
//!   every value directly and the SQS API gives back exactly the types
//!   sent. A message's `AWSTraceHeader` is the fila attribute
//!   [`TRACE_KEY`]. Names starting with `fila.` are reserved.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use md5::{Digest, Md5};
use serde_json::{json, Map, Value};

use crate::error::{Kind, SqsError};
use crate::input::Input;

/// The account every queue URL and ARN names.
pub const ACCOUNT: &str = "000000000000";
/// The region ARNs name.
pub const REGION: &str = "us-east-1";
/// The fila attribute holding the SQS types of the other attributes (those
/// not plain `String`).
pub const TYPES_KEY: &str = "fila.sqs.types";
/// The fila attribute holding a message's `AWSTraceHeader`.
pub const TRACE_KEY: &str = "fila.sqs.trace";
/// The fila attribute holding a FIFO message's `MessageDeduplicationId`.
pub const DEDUP_KEY: &str = "fila.sqs.dedup";
/// Message attributes one SQS message may carry.
pub const MESSAGE_ATTRIBUTES_MAX: usize = 10;

/// A queue's URL as seen from `host`.
pub fn queue_url(host: &str, name: &str) -> String {
    format!("http://{host}/{ACCOUNT}/{name}")
}

/// A queue's ARN.
pub fn queue_arn(name: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

/// The queue a URL names: its path is `/ACCOUNT/NAME` (the scheme and host
/// are not looked at); another account's queue does not exist here.
pub fn name_of_url(url: &str) -> Result<String, SqsError> {
    let path = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    match (segments.next(), segments.next(), segments.next()) {
        (Some(account), Some(name), None)
            if account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()) =>
        {
            if account != ACCOUNT {
                return Err(SqsError::new(
                    Kind::QueueDoesNotExist,
                    "The specified queue does not exist.",
                ));
            }
            Ok(name.to_owned())
        }
        _ => Err(SqsError::new(
            Kind::InvalidAddress,
            format!("The address {url} is not valid for this endpoint (http://HOST:PORT/{ACCOUNT}/NAME)."),
        )),
    }
}

/// The queue an ARN names.
pub fn name_of_arn(arn: &str) -> Result<String, SqsError> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "sqs", _, _, name] if !name.is_empty() => Ok((*name).to_owned()),
        _ => Err(SqsError::invalid(format!("{arn} is not a queue ARN."))),
    }
}

/// A message id as SQS shows it.
pub fn message_id(id: u128) -> String {
    let bytes = id.to_be_bytes();
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        push_hex(*b, &mut out);
    }
    out
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        push_hex(*b, &mut out);
    }
    out
}

/// Appends a byte as two lower-case hex digits.
fn push_hex(b: u8, out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.push(DIGITS[usize::from(b >> 4)] as char);
    out.push(DIGITS[usize::from(b & 15)] as char);
}

/// A receipt as a receipt handle.
pub fn receipt_handle(receipt: &[u8]) -> String {
    B64.encode(receipt)
}

/// The bytes of a handle made by [`receipt_handle`], if it is one.
pub fn bytes_of_handle(handle: &str) -> Option<Vec<u8>> {
    B64.decode(handle).ok()
}

/// A receipt handle back to a receipt; `ReceiptHandleIsInvalid` when it is
/// not one.
pub fn receipt_of(handle: &str) -> Result<fila_proto::Receipt, SqsError> {
    let invalid = || {
        SqsError::new(
            Kind::ReceiptHandleIsInvalid,
            format!("The input receipt handle \"{handle}\" is not a valid receipt handle."),
        )
    };
    let bytes = B64.decode(handle).map_err(|_| invalid())?;
    bytes.try_into().map_err(|_| invalid())
}

/// The MD5 of a message body, in hex.
pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&Md5::digest(bytes))
}

/// A message attribute as SQS carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageAttribute {
    /// `String`, `Number` or `Binary`, with an optional `.label`.
    pub data_type: String,
    /// Its value.
    pub value: AttributeValue,
}

/// A message attribute's value: text (`String`, `Number`) or bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    /// `StringValue`.
    String(String),
    /// `BinaryValue`.
    Binary(Vec<u8>),
}

/// The MD5 of message attributes as AWS computes it: for each attribute in
/// name order, the name, the data type (each with its length as 4 bytes,
/// big-endian), 1 for a string value or 2 for a binary one, then the value
/// with its length.
pub fn md5_of_attributes(attrs: &BTreeMap<String, MessageAttribute>) -> String {
    let mut buf = Vec::new();
    let put = |bytes: &[u8], buf: &mut Vec<u8>| {
        buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        buf.extend_from_slice(bytes);
    };
    for (name, a) in attrs {
        put(name.as_bytes(), &mut buf);
        put(a.data_type.as_bytes(), &mut buf);
        match &a.value {
            AttributeValue::String(s) => {
                buf.push(1);
                put(s.as_bytes(), &mut buf);
            }
            AttributeValue::Binary(b) => {
                buf.push(2);
                put(b, &mut buf);
            }
        }
    }
    md5_hex(&buf)
}

/// Whether `s` has only the characters SQS allows in a message (XML's).
pub fn valid_text(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
    })
}

/// The base type of a data type (`String`, `Number` or `Binary`), checking
/// its custom label.
fn base_type(data_type: &str) -> Result<&'static str, SqsError> {
    let (base, label) = match data_type.split_once('.') {
        Some((b, l)) => (b, Some(l)),
        None => (data_type, None),
    };
    if let Some(l) = label {
        if l.is_empty()
            || l.len() > 256
            || !l
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(SqsError::new(
                Kind::InvalidParameterValue,
                format!(
                    "The message attribute data type {data_type:?} has an invalid custom label."
                ),
            ));
        }
    }
    match base {
        "String" => Ok("String"),
        "Number" => Ok("Number"),
        "Binary" => Ok("Binary"),
        _ => Err(SqsError::new(
            Kind::InvalidParameterValue,
            format!("The message attribute data type {data_type:?} is not String, Number or Binary (with an optional .label)."),
        )),
    }
}

/// Checks a message attribute's name as SQS does, and fila's own limits.
fn check_name(name: &str) -> Result<(), SqsError> {
    let lower = name.to_ascii_lowercase();
    let bad = name.is_empty()
        || name.len() > fila_core::limits::ATTRIBUTE_KEY_LEN_MAX
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
        || lower.starts_with("aws.")
        || lower.starts_with("amazon.")
        || lower.starts_with("fila.");
    if bad {
        return Err(SqsError::new(
            Kind::InvalidParameterValue,
            format!(
                "The message attribute name {name:?} is invalid: 1..={} of letters, digits, -, _ and . (not first or last, not twice in a row), not starting with AWS., Amazon. or fila.",
                fila_core::limits::ATTRIBUTE_KEY_LEN_MAX
            ),
        ));
    }
    Ok(())
}

/// The `MessageAttributes` of a request, checked.
pub fn parse_message_attributes<I: Input>(
    v: Option<&I>,
) -> Result<BTreeMap<String, MessageAttribute>, SqsError> {
    let mut out = BTreeMap::new();
    let Some(v) = v else {
        return Ok(out);
    };
    let Some(map) = v.fields() else {
        return Err(SqsError::invalid("MessageAttributes must be a map."));
    };
    if map.len() > MESSAGE_ATTRIBUTES_MAX {
        return Err(SqsError::invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MESSAGE_ATTRIBUTES_MAX}].",
            map.len()
        )));
    }
    for (name, a) in map {
        check_name(name)?;
        let data_type = a.get("DataType").and_then(I::as_str).ok_or_else(|| {
            SqsError::invalid(format!(
                "The message attribute {name:?} must contain a DataType."
            ))
        })?;
        let value = match base_type(data_type)? {
            "Binary" => {
                let b = a.get("BinaryValue").and_then(I::as_str).ok_or_else(|| {
                    SqsError::invalid(format!(
                        "The message attribute {name:?} of type Binary must contain a BinaryValue."
                    ))
                })?;
                AttributeValue::Binary(B64.decode(b).map_err(|_| {
                    SqsError::invalid(format!(
                        "The message attribute {name:?} has a BinaryValue that is not base64."
                    ))
                })?)
            }
            base => {
                let s = a.get("StringValue").and_then(I::as_str).ok_or_else(|| {
                    SqsError::invalid(format!(
                        "The message attribute {name:?} must contain a StringValue."
                    ))
                })?;
                if s.is_empty() || !valid_text(s) {
                    return Err(SqsError::invalid(format!(
                        "The message attribute {name:?} must have a non-empty value of valid characters."
                    )));
                }
                if base == "Number" && !is_number(s) {
                    return Err(SqsError::invalid(format!(
                        "The message attribute {name:?} of type Number has the value {s:?}, not a number."
                    )));
                }
                AttributeValue::String(s.to_owned())
            }
        };
        out.insert(
            name.to_owned(),
            MessageAttribute {
                data_type: data_type.to_owned(),
                value,
            },
        );
    }
    Ok(out)
}

/// Whether `s` is a number as SQS takes one (an optional sign, digits, an
/// optional fraction and exponent; at most 38 significant digits).
fn is_number(s: &str) -> bool {
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match t.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (t, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |x: &str| x.chars().all(|c| c.is_ascii_digit());
    let exp_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    !(int.is_empty() && frac.is_empty())
        && digits(int)
        && digits(frac)
        && exp_ok
        && int.len() + frac.len() <= 38
}

/// SQS attributes (and a trace header) as fila attributes.
pub fn to_fila(
    attrs: &BTreeMap<String, MessageAttribute>,
    trace: Option<&str>,
) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(attrs.len() + 2);
    let mut types = Vec::new();
    for (name, a) in attrs {
        let value = match &a.value {
            AttributeValue::String(s) => s.clone(),
            AttributeValue::Binary(b) => B64.encode(b),
        };
        out.push((name.clone(), value));
        if a.data_type != "String" {
            types.push(format!("{name}={}", a.data_type));
        }
    }
    if !types.is_empty() {
        out.push((TYPES_KEY.to_owned(), types.join(",")));
    }
    if let Some(t) = trace {
        out.push((TRACE_KEY.to_owned(), t.to_owned()));
    }
    out
}

/// fila attributes as SQS message attributes and the trace header: the
/// types kept in [`TYPES_KEY`] (plain `String` for the others); an
/// attribute written by a binary-protocol client whose name SQS would not
/// take is left out, as is a `Binary` one that is not base64.
pub fn from_fila(
    attrs: &[(Box<str>, Box<str>)],
) -> (BTreeMap<String, MessageAttribute>, Option<String>) {
    let types: BTreeMap<&str, &str> = attrs
        .iter()
        .find(|(k, _)| &**k == TYPES_KEY)
        .map(|(_, v)| {
            v.split(',')
                .filter_map(|pair| pair.split_once('='))
                .collect()
        })
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut trace = None;
    for (k, v) in attrs {
        match &**k {
            TYPES_KEY | DEDUP_KEY => continue,
            TRACE_KEY => {
                trace = Some(v.to_string());
                continue;
            }
            _ => {}
        }
        if check_name(k).is_err() || v.is_empty() {
            continue;
        }
        let data_type = types.get(&**k).copied().unwrap_or("String");
        let value = if data_type.starts_with("Binary") {
            match B64.decode(&**v) {
                Ok(b) => AttributeValue::Binary(b),
                Err(_) => continue,
            }
        } else {
            AttributeValue::String(v.to_string())
        };
        out.insert(
            k.to_string(),
            MessageAttribute {
                data_type: data_type.to_owned(),
                value,
            },
        );
    }
    (out, trace)
}

/// Message attributes as the JSON protocol writes them.
pub fn attributes_json(attrs: &BTreeMap<String, MessageAttribute>) -> Value {
    let mut map = Map::new();
    for (name, a) in attrs {
        let v = match &a.value {
            AttributeValue::String(s) => json!({ "DataType": a.data_type, "StringValue": s }),
            AttributeValue::Binary(b) => {
                json!({ "DataType": a.data_type, "BinaryValue": B64.encode(b) })
            }
        };
        map.insert(name.clone(), v);
    }
    Value::Object(map)
}

/// Whether a message attribute named `name` is asked for by
/// `MessageAttributeNames` (`All`, `.*`, names, `prefix.*`: every name
/// starting with `prefix`, as the ReceiveMessage reference has it — "all
/// message attributes starting with a prefix, for example bar.*").
pub fn asked(names: &[String], name: &str) -> bool {
    names.iter().any(|n| {
        n == "All"
            || n == name
            || n.strip_suffix(".*")
                .is_some_and(|prefix| name.starts_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_of_attributes_matches_a_digest_computed_by_hand() {
        // One string attribute, the bytes AWS's algorithm hashes written
        // out independently of the function.
        let mut attrs = BTreeMap::new();
        attrs.insert(
            "a".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: AttributeValue::String("b".into()),
            },
        );
        let mut bytes = vec![0, 0, 0, 1, b'a', 0, 0, 0, 6];
        bytes.extend_from_slice(b"String");
        bytes.extend_from_slice(&[1, 0, 0, 0, 1, b'b']);
        assert_eq!(md5_of_attributes(&attrs), md5_hex(&bytes));
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn attributes_round_trip_through_fila_with_their_types() {
        let input = json!({
            "s": {"DataType": "String", "StringValue": "x"},
            "n": {"DataType": "Number.float", "StringValue": "-1.5e3"},
            "b": {"DataType": "Binary", "BinaryValue": B64.encode([0u8, 255, 7])},
        });
        let parsed = parse_message_attributes(Some(&input)).unwrap();
        let fila: Vec<(Box<str>, Box<str>)> = to_fila(&parsed, Some("Root=1"))
            .into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect();
        // A binary-protocol client reads the values directly.
        assert!(fila.iter().any(|(k, v)| &**k == "n" && &**v == "-1.5e3"));
        let (back, trace) = from_fila(&fila);
        assert_eq!(back, parsed);
        assert_eq!(trace.as_deref(), Some("Root=1"));
    }

    #[test]
    fn bad_attributes_are_refused() {
        for bad in [
            json!({"AWS.x": {"DataType": "String", "StringValue": "v"}}),
            json!({"fila.x": {"DataType": "String", "StringValue": "v"}}),
            json!({"x": {"DataType": "Float", "StringValue": "1"}}),
            json!({"x": {"DataType": "Number", "StringValue": "one"}}),
            json!({"x": {"DataType": "String", "StringValue": ""}}),
            json!({"x": {"DataType": "Binary", "BinaryValue": "!!"}}),
            json!({"a..b": {"DataType": "String", "StringValue": "v"}}),
        ] {
            assert!(parse_message_attributes(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_urls_and_handles() {
        assert_eq!(
            name_of_url("http://localhost:9324/000000000000/jobs").unwrap(),
            "jobs"
        );
        assert_eq!(
            name_of_url("https://sqs.eu-west-1.amazonaws.com/000000000000/q").unwrap(),
            "q"
        );
        let kind = |u: &str| name_of_url(u).unwrap_err().kind;
        assert_eq!(kind("http://host/"), Kind::InvalidAddress);
        assert_eq!(kind("http://host/123/q"), Kind::InvalidAddress);
        assert_eq!(
            kind("http://host/000000000000/q/more"),
            Kind::InvalidAddress
        );
        assert_eq!(kind("http://host/111122223333/q"), Kind::QueueDoesNotExist);
        assert_eq!(
            name_of_arn("arn:aws:sqs:us-east-1:000000000000:dlq").unwrap(),
            "dlq"
        );
        assert_eq!(message_id(255), "00000000-0000-0000-0000-0000000000ff");
        let r = [7u8; 32];
        assert_eq!(receipt_of(&receipt_handle(&r)).unwrap(), r);
        assert!(receipt_of("not base64!").is_err());
        assert!(receipt_of(&B64.encode([1u8; 5])).is_err());
        assert!(asked(&["a.*".into()], "a.b"));
        assert!(asked(&["a.*".into()], "ab"));
        assert!(asked(&["a.*".into()], "a"));
        assert!(!asked(&["a.*".into()], "ba"));
        assert!(asked(&[".*".into()], "ba"));
        assert!(asked(&["All".into()], "z"));
        assert!(valid_text("ok\tline\n"));
        assert!(!valid_text("bell\u{7}"));
    }
}
