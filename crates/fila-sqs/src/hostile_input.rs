//! What a hostile client can send the parsers: anything, and nothing
//! panics (each is an answer or a typed error).

use proptest::prelude::*;

use crate::{attrs, query, sigv4};

/// Form-like text: names of the flattened shapes, dots, numbers,
/// escapes.
fn form() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        Just("Action".to_owned()),
        Just("Attribute".to_owned()),
        Just("MessageAttribute".to_owned()),
        Just("SendMessageBatchRequestEntry".to_owned()),
        Just("Tag".to_owned()),
        Just("Name".to_owned()),
        Just("Value".to_owned()),
        Just("Key".to_owned()),
        "[0-9]{1,3}",
        "[ -~]{0,6}",
    ];
    proptest::collection::vec(
        (proptest::collection::vec(part, 1..8), "[ -~%+]{0,12}"),
        0..40,
    )
    .prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(key, v)| format!("{}={v}", key.join(".")))
            .collect::<Vec<_>>()
            .join("&")
    })
}

proptest! {
    #[test]
    fn forms_parse_or_are_refused(text in form(), path in "[/a-z0-9]{0,20}") {
        if let Ok(params) = query::parse_form(text.as_bytes()) {
            let _ = query::input(&params, &path);
        }
    }

    #[test]
    fn bytes_as_a_form_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(params) = query::parse_form(&bytes) {
            let _ = query::input(&params, "/");
        }
    }

    #[test]
    fn authorization_headers_and_names_parse_or_are_refused(s in "[ -~]{0,120}") {
        let _ = sigv4::parse_authorization(&s);
        let _ = sigv4::parse_timestamp(&s);
        let _ = sigv4::canonical_query(&s);
        let _ = attrs::name_of_url(&s);
        let _ = attrs::name_of_arn(&s);
        let _ = attrs::receipt_of(&s);
    }

    #[test]
    fn message_attributes_of_any_json_are_checked(
        json in proptest::collection::vec(any::<u8>(), 0..120),
        names in proptest::collection::vec("[a-zA-Z.]{0,6}", 0..12),
        types in proptest::collection::vec(
            prop_oneof![
                Just("String"), Just("Number"), Just("Binary"),
                Just("Number.x"), Just("Weird"), Just("")
            ],
            0..12,
        ),
    ) {
        // Random bytes read as JSON, and well-formed maps of random
        // names, types and values.
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&json) {
            let _ = attrs::parse_message_attributes(Some(&v));
        }
        let map: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .zip(types.iter().cycle())
            .map(|(n, t)| {
                (n.clone(), serde_json::json!({
                    "DataType": t, "StringValue": n, "BinaryValue": n
                }))
            })
            .collect();
        if let Ok(parsed) = attrs::parse_message_attributes(Some(&serde_json::Value::Object(map))) {
            // What was taken goes round through fila's attributes.
            let fila = attrs::to_fila(&parsed, None);
            let pairs: Vec<(Box<str>, Box<str>)> = fila
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect();
            let (back, _) = attrs::from_fila(&pairs);
            prop_assert_eq!(back, parsed);
        }
    }
}
