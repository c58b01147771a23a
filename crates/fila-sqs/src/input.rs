//! An operation's input as the parameter readers see it: a `Value` (the
//! query protocol's form made into one, or any request read by
//! [`crate::read`]), or a [`Doc`] read from a JSON body that borrows its
//! text from the body — the message operations' way, with no `String` per
//! key or value.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// What the parameter readers ask of an input and its parts.
pub trait Input: Sized {
    /// A field of an object (`None` when absent, or not an object).
    fn get(&self, name: &str) -> Option<&Self>;
    /// Whether it is JSON's `null`.
    fn is_null(&self) -> bool;
    /// Its text, when it is a string.
    fn as_str(&self) -> Option<&str>;
    /// A whole number that fits in `u64`, when it is one.
    fn as_u64(&self) -> Option<u64>;
    /// Its items, when it is an array.
    fn as_array(&self) -> Option<&[Self]>;
    /// Its fields in order, when it is an object.
    fn fields(&self) -> Option<Vec<(&str, &Self)>>;
    /// How an error message shows it: as JSON.
    fn shown(&self) -> String;
}

impl Input for Value {
    fn get(&self, name: &str) -> Option<&Value> {
        Value::get(self, name)
    }
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }
    fn as_u64(&self) -> Option<u64> {
        Value::as_u64(self)
    }
    fn as_array(&self) -> Option<&[Value]> {
        Value::as_array(self).map(Vec::as_slice)
    }
    fn fields(&self) -> Option<Vec<(&str, &Value)>> {
        self.as_object()
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// A JSON value read from a body, its strings borrowed from it where they
/// need no unescaping.
#[derive(Clone, Debug, PartialEq)]
pub enum Doc<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    Str(Cow<'a, str>),
    /// An array.
    Array(Vec<Doc<'a>>),
    /// An object: its fields in the order they came (a repeated name: the
    /// last one counts, as for a `Value`).
    Object(Vec<(Cow<'a, str>, Doc<'a>)>),
}

impl<'a> Doc<'a> {
    /// Reads a JSON body.
    pub fn parse(body: &'a [u8]) -> Result<Doc<'a>, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The same as a `Value`.
    pub fn to_value(&self) -> Value {
        match self {
            Doc::Null => Value::Null,
            Doc::Bool(b) => Value::Bool(*b),
            Doc::Number(n) => Value::Number(n.clone()),
            Doc::Str(s) => Value::String(s.to_string()),
            Doc::Array(a) => Value::Array(a.iter().map(Doc::to_value).collect()),
            Doc::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

impl Input for Doc<'_> {
    fn get(&self, name: &str) -> Option<&Self> {
        match self {
            Doc::Object(fields) => fields.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Doc::Str(s) => Some(s),
            _ => None,
        }
    }
    fn as_u64(&self) -> Option<u64> {
        match self {
            Doc::Number(n) => n.as_u64(),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Self]> {
        match self {
            Doc::Array(a) => Some(a),
            _ => None,
        }
    }
    fn fields(&self) -> Option<Vec<(&str, &Self)>> {
        let Doc::Object(fields) = self else {
            return None;
        };
        // A name given twice counts once, with its last value (as a
        // `Value`'s map keeps it), in name order (as a `Value`'s map
        // iterates). Sorted, not searched: a body of many fields costs
        // n log n, never n².
        let mut out: Vec<(usize, &str, &Self)> = fields
            .iter()
            .enumerate()
            .map(|(at, (k, v))| (at, k.as_ref(), v))
            .collect();
        // By name, the latest of a name first; then the first of each
        // name kept.
        out.sort_unstable_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)));
        out.dedup_by(|later, kept| later.1 == kept.1);
        Some(out.into_iter().map(|(_, k, v)| (k, v)).collect())
    }
    fn shown(&self) -> String {
        self.to_value().to_string()
    }
}

impl<'de> Deserialize<'de> for Doc<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Doc<'de>, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }
    fn visit_none<E>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Doc<'de>, E> {
        Ok(Doc::Bool(b))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(n.into()))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Doc<'de>, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Doc::Null, Doc::Number))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<'de>, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key::<Key<'de>>()? {
            fields.push((key.0, map.next_value()?));
        }
        Ok(Doc::Object(fields))
    }
}

/// An object's field name, borrowed when it needs no unescaping.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_body_reads_the_same_as_a_value_with_its_text_borrowed() {
        let body = br#"{"QueueUrl":"http://h/000000000000/q","Entries":[{"Id":"a","MessageBody":"x\ny","DelaySeconds":3}],"n":-1.5,"t":true,"z":null,"QueueUrl":"last"}"#;
        let doc = Doc::parse(body).unwrap();
        let value: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(doc.to_value(), value);
        assert_eq!(doc.get("QueueUrl").and_then(Input::as_str), Some("last"));
        let entry = &doc.get("Entries").and_then(Input::as_array).unwrap()[0];
        assert!(matches!(
            entry.get("Id"),
            Some(Doc::Str(Cow::Borrowed("a")))
        ));
        // Escaped text is unescaped into a string of its own.
        assert!(matches!(
            entry.get("MessageBody"),
            Some(Doc::Str(Cow::Owned(_)))
        ));
        assert_eq!(entry.get("DelaySeconds").and_then(Input::as_u64), Some(3));
        assert_eq!(doc.get("n").map(Input::shown), Some("-1.5".into()));
        assert!(doc.get("z").is_some_and(Input::is_null));
        // Fields: each name once, its last value, in name order — as a
        // `Value`'s map has them.
        let shown = |f: Vec<(&str, &Doc)>| {
            f.into_iter()
                .map(|(k, v)| format!("{k}={}", v.shown()))
                .collect::<Vec<_>>()
        };
        let doc = Doc::parse(br#"{"b":1,"a":2,"b":3,"c":4,"a":5}"#).unwrap();
        assert_eq!(shown(doc.fields().unwrap()), ["a=5", "b=3", "c=4"]);
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<u64>().prop_map(|n| Value::Number(n.into())),
            "[a-z\"\\\\\n\u{e9}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[A-Za-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any JSON reads the same as a `Doc` as as a `Value`, and every
        /// reader's answer agrees.
        #[test]
        fn a_doc_agrees_with_a_value(v in json()) {
            let body = serde_json::to_vec(&v).unwrap();
            let doc = Doc::parse(&body).unwrap();
            prop_assert_eq!(doc.to_value(), v.clone());
            prop_assert_eq!(doc.shown(), Input::shown(&v));
            prop_assert_eq!(doc.as_str(), Input::as_str(&v));
            prop_assert_eq!(doc.as_u64(), Input::as_u64(&v));
            prop_assert_eq!(Input::is_null(&doc), Input::is_null(&v));
            let doc_names = doc.fields().map(|f| f.into_iter().map(|(k, _)| k.to_owned()).collect::<Vec<_>>());
            let value_names = Input::fields(&v).map(|f| f.into_iter().map(|(k, _)| k.to_owned()).collect::<Vec<_>>());
            prop_assert_eq!(doc_names, value_names);
            if let Value::Object(m) = &v {
                for k in m.keys() {
                    prop_assert_eq!(doc.get(k).map(Doc::to_value), Input::get(&v, k).cloned());
                }
            }
        }
    }
}
