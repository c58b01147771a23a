//! The query protocol, for SDKs still pinned to it: a form-encoded
//! request (`Action=SendMessage&QueueUrl=...`, in a POST body or a GET's
//! query) becomes the JSON protocol's input, the same operation runs, and
//! its output is written as the query protocol's XML.
//!
//! The form's flattened names map onto the JSON members: `Attribute.N.Name`
//! / `.Value` → `Attributes`, `MessageAttribute.N.Name` / `.Value.*` →
//! `MessageAttributes`, `Tag.N.Key` / `.Value` → tags, `AttributeName.N` →
//! `AttributeNames`, `<Op>RequestEntry.N.*` → `Entries`, and so on.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Kind, SqsError};
use crate::sigv4::decode;

/// The XML namespace of SQS's query answers.
const XMLNS: &str = "http://queue.amazonaws.com/doc/2012-11-05/";
/// Parameters one form may carry (10 entries of 10 attributes of 4 fields
/// each, and room).
const PARAMS_MAX: usize = 1000;

/// A form's parameters, decoded.
pub fn parse_form(form: &[u8]) -> Result<Vec<(String, String)>, SqsError> {
    let text =
        std::str::from_utf8(form).map_err(|_| SqsError::invalid("The form is not UTF-8 text."))?;
    let mut out = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        if out.len() == PARAMS_MAX {
            return Err(SqsError::invalid(format!(
                "A request has at most {PARAMS_MAX} parameters."
            )));
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = String::from_utf8(decode(k))
            .map_err(|_| SqsError::invalid("A parameter name is not UTF-8."))?;
        let v = String::from_utf8(decode(v))
            .map_err(|_| SqsError::invalid(format!("The parameter {k} is not UTF-8.")))?;
        out.push((k, v));
    }
    Ok(out)
}

/// A tree of the form's dotted names: a leaf, or members by name (numbers
/// are list positions, kept in order).
#[derive(Debug, Default)]
struct Node {
    value: Option<String>,
    members: BTreeMap<Key, Node>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
enum Key {
    Index(u32),
    Name(String),
}

fn tree(params: &[(String, String)]) -> Result<Node, SqsError> {
    let mut root = Node::default();
    for (k, v) in params {
        let mut node = &mut root;
        for (depth, part) in k.split('.').enumerate() {
            if depth >= 6 {
                return Err(SqsError::invalid(format!(
                    "The parameter name {k} is too deep."
                )));
            }
            let key = match part.parse::<u32>() {
                Ok(i) if i >= 1 => Key::Index(i),
                _ => Key::Name(part.to_owned()),
            };
            node = node.members.entry(key).or_default();
        }
        node.value = Some(v.clone());
    }
    Ok(root)
}

/// The members of a list node (`Name.1`, `Name.2`, ...), in order.
fn items(node: &Node) -> impl Iterator<Item = &Node> {
    node.members
        .iter()
        .filter(|(k, _)| matches!(k, Key::Index(_)))
        .map(|(_, n)| n)
}

fn leaf(node: &Node, name: &str) -> Option<String> {
    node.members
        .get(&Key::Name(name.to_owned()))
        .and_then(|n| n.value.clone())
}

/// A `{Name|Key, Value}` list as a map (`Value` a leaf, or for message
/// attributes a structure).
fn map_of(node: &Node, key: &str, structured: bool) -> Value {
    let mut out = Map::new();
    for item in items(node) {
        let Some(name) = leaf(item, key) else {
            continue;
        };
        let value = match item.members.get(&Key::Name("Value".into())) {
            Some(v) if structured => structure(v),
            Some(v) => Value::String(v.value.clone().unwrap_or_default()),
            None => Value::Null,
        };
        out.insert(name, value);
    }
    Value::Object(out)
}

fn list_of(node: &Node) -> Value {
    Value::Array(
        items(node)
            .map(|n| Value::String(n.value.clone().unwrap_or_default()))
            .collect(),
    )
}

/// A node as the JSON protocol's structure, the flattened names renamed.
fn structure(node: &Node) -> Value {
    let mut out = Map::new();
    for (k, n) in &node.members {
        let Key::Name(name) = k else { continue };
        let (json_name, v) = match name.as_str() {
            "Attribute" => ("Attributes".to_owned(), map_of(n, "Name", false)),
            "MessageAttribute" => ("MessageAttributes".to_owned(), map_of(n, "Name", true)),
            "MessageSystemAttribute" => (
                "MessageSystemAttributes".to_owned(),
                map_of(n, "Name", true),
            ),
            "Tag" => ("Tags".to_owned(), map_of(n, "Key", false)),
            "AttributeName" => ("AttributeNames".to_owned(), list_of(n)),
            "MessageAttributeName" => ("MessageAttributeNames".to_owned(), list_of(n)),
            "MessageSystemAttributeName" => ("MessageSystemAttributeNames".to_owned(), list_of(n)),
            "TagKey" => ("TagKeys".to_owned(), list_of(n)),
            "AWSAccountId" => ("AWSAccountIds".to_owned(), list_of(n)),
            "ActionName" => ("Actions".to_owned(), list_of(n)),
            entries if entries.ends_with("RequestEntry") => (
                "Entries".to_owned(),
                Value::Array(items(n).map(structure).collect()),
            ),
            _ => match &n.value {
                Some(v) if n.members.is_empty() => (name.clone(), Value::String(v.clone())),
                _ => (name.clone(), structure(n)),
            },
        };
        out.insert(json_name, v);
    }
    Value::Object(out)
}

/// The operation a form names and its input as the JSON protocol's.
/// `path` is the request's path: the query protocol may name the queue
/// there instead of in `QueueUrl`.
pub fn input(params: &[(String, String)], path: &str) -> Result<(String, Value), SqsError> {
    let root = tree(params)?;
    let action = leaf(&root, "Action")
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            SqsError::new(
                Kind::MissingAction,
                "The request must contain the parameter Action.",
            )
        })?;
    let mut input = structure(&root);
    if let Value::Object(m) = &mut input {
        m.remove("Action");
        m.remove("Version");
        // CreateQueue's tags are `tags` in the JSON protocol.
        if action == "CreateQueue" {
            if let Some(t) = m.remove("Tags") {
                m.insert("tags".into(), t);
            }
        }
        if !m.contains_key("QueueUrl") && path.trim_matches('/').contains('/') {
            m.insert("QueueUrl".into(), Value::String(path.to_owned()));
        }
    }
    Ok((action, input))
}

/// Escapes text for XML (a carriage return as a reference, so parsers
/// keep it).
fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn element(name: &str, v: &Value, op: &str, out: &mut String) {
    match (name, v) {
        // Flattened maps.
        ("Attributes", Value::Object(m)) | ("Tags", Value::Object(m)) => {
            let (tag, key) = if name == "Tags" {
                ("Tag", "Key")
            } else {
                ("Attribute", "Name")
            };
            for (k, v) in m {
                out.push_str(&format!("<{tag}><{key}>"));
                escape(k, out);
                out.push_str(&format!("</{key}><Value>"));
                escape(&text_of(v), out);
                out.push_str(&format!("</Value></{tag}>"));
            }
        }
        ("MessageAttributes", Value::Object(m)) => {
            for (k, v) in m {
                out.push_str("<MessageAttribute><Name>");
                escape(k, out);
                out.push_str("</Name><Value>");
                if let Value::Object(fields) = v {
                    for (f, fv) in fields {
                        element(f, fv, op, out);
                    }
                }
                out.push_str("</Value></MessageAttribute>");
            }
        }
        // Flattened lists.
        (_, Value::Array(items)) => {
            let member = match name {
                "QueueUrls" | "queueUrls" => "QueueUrl".to_owned(),
                "Messages" => "Message".to_owned(),
                "Failed" => "BatchResultErrorEntry".to_owned(),
                "Successful" => format!("{op}ResultEntry"),
                "Results" => format!("{op}ResultEntry"),
                other => other.to_owned(),
            };
            for item in items {
                element(&member, item, op, out);
            }
        }
        (_, Value::Object(m)) => {
            out.push_str(&format!("<{name}>"));
            for (k, v) in m {
                element(k, v, op, out);
            }
            out.push_str(&format!("</{name}>"));
        }
        _ => {
            out.push_str(&format!("<{name}>"));
            escape(&text_of(v), out);
            out.push_str(&format!("</{name}>"));
        }
    }
}

/// An operation's output as the query protocol's answer.
pub fn answer(op: &str, output: &Value, request_id: &str) -> String {
    let mut out = String::with_capacity(512);
    out.push_str(&format!(
        "<?xml version=\"1.0\"?><{op}Response xmlns=\"{XMLNS}\">"
    ));
    match output {
        Value::Object(m) if !m.is_empty() => {
            out.push_str(&format!("<{op}Result>"));
            for (k, v) in m {
                element(k, v, op, &mut out);
            }
            out.push_str(&format!("</{op}Result>"));
        }
        _ => {}
    }
    out.push_str(&format!(
        "<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{op}Response>"
    ));
    out
}

/// An error as the query protocol's answer.
pub fn error(e: &SqsError, request_id: &str) -> String {
    let mut out = String::from("<?xml version=\"1.0\"?><ErrorResponse xmlns=\"");
    out.push_str(XMLNS);
    out.push_str("\"><Error><Type>");
    out.push_str(e.fault());
    out.push_str("</Type><Code>");
    out.push_str(e.code());
    out.push_str("</Code><Message>");
    escape(&e.message, &mut out);
    out.push_str(&format!(
        "</Message><Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(s: &str) -> Vec<(String, String)> {
        parse_form(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_send_with_attributes_becomes_the_json_input() {
        let (op, got) = super::input(
            &form("Action=SendMessage&Version=2012-11-05&QueueUrl=http%3A%2F%2Fh%2F000000000000%2Fq&MessageBody=a+b%26c&DelaySeconds=5&MessageAttribute.1.Name=n&MessageAttribute.1.Value.DataType=Number&MessageAttribute.1.Value.StringValue=7&MessageAttribute.2.Name=b&MessageAttribute.2.Value.DataType=Binary&MessageAttribute.2.Value.BinaryValue=AAE%3D"),
            "/",
        )
        .unwrap();
        assert_eq!(op, "SendMessage");
        assert_eq!(
            got,
            json!({
                "QueueUrl": "http://h/000000000000/q",
                "MessageBody": "a b&c",
                "DelaySeconds": "5",
                "MessageAttributes": {
                    "n": {"DataType": "Number", "StringValue": "7"},
                    "b": {"DataType": "Binary", "BinaryValue": "AAE="},
                },
            })
        );
    }

    #[test]
    fn batches_lists_maps_and_a_queue_named_by_the_path() {
        let (op, got) = super::input(
            &form("Action=DeleteMessageBatch&DeleteMessageBatchRequestEntry.2.Id=b&DeleteMessageBatchRequestEntry.2.ReceiptHandle=r2&DeleteMessageBatchRequestEntry.1.Id=a&DeleteMessageBatchRequestEntry.1.ReceiptHandle=r1"),
            "/000000000000/q",
        )
        .unwrap();
        assert_eq!(op, "DeleteMessageBatch");
        assert_eq!(
            got,
            json!({
                "QueueUrl": "/000000000000/q",
                "Entries": [{"Id": "a", "ReceiptHandle": "r1"}, {"Id": "b", "ReceiptHandle": "r2"}],
            })
        );
        let (_, got) = super::input(
            &form("Action=CreateQueue&QueueName=q&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=40&Tag.1.Key=team&Tag.1.Value=x"),
            "/",
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"QueueName": "q", "Attributes": {"VisibilityTimeout": "40"}, "tags": {"team": "x"}})
        );
        let (_, got) = super::input(
            &form("Action=ReceiveMessage&QueueUrl=u&AttributeName.1=All&MessageAttributeName.1=a.*&MaxNumberOfMessages=10"),
            "/",
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"QueueUrl": "u", "AttributeNames": ["All"], "MessageAttributeNames": ["a.*"], "MaxNumberOfMessages": "10"})
        );
        assert!(super::input(&form("QueueUrl=u"), "/").is_err());
        let empty = super::input(&form("Action=&QueueUrl=u"), "/").unwrap_err();
        assert_eq!(empty.kind, Kind::MissingAction);
    }

    #[test]
    fn outputs_are_written_as_the_query_protocols_xml() {
        let xml = answer(
            "ReceiveMessage",
            &json!({"Messages": [{
                "MessageId": "m", "Body": "<x> & \r",
                "Attributes": {"SentTimestamp": "1"},
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "7"}},
            }]}),
            "rid",
        );
        assert_eq!(
            xml,
            "<?xml version=\"1.0\"?><ReceiveMessageResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><ReceiveMessageResult><Message><Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute><Body>&lt;x&gt; &amp; &#xD;</Body><MessageAttribute><Name>n</Name><Value><DataType>Number</DataType><StringValue>7</StringValue></Value></MessageAttribute><MessageId>m</MessageId></Message></ReceiveMessageResult><ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></ReceiveMessageResponse>"
        );
        let xml = answer(
            "SendMessageBatch",
            &json!({"Successful": [{"Id": "a"}], "Failed": [{"Id": "b", "SenderFault": true}]}),
            "r",
        );
        assert!(
            xml.contains("<SendMessageBatchResultEntry><Id>a</Id></SendMessageBatchResultEntry>")
        );
        assert!(xml.contains("<BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault></BatchResultErrorEntry>"));
        let xml = answer("DeleteQueue", &json!({}), "r");
        assert!(!xml.contains("DeleteQueueResult"));
    }
}
