//! Access control over the wire: no token, a wrong token, a token without
//! the permission (`forbidden`, nothing changed).

use fila_client::{ClientError, ErrorCode, PutEntry, SettingsPatch};
use fila_server::auth::{Grant, Permission};
use fila_tests::TestServer;

fn server() -> TestServer {
    TestServer::with(|c| {
        c.tokens.add(
            "admin-token".into(),
            vec![Grant::new(
                "*",
                &[Permission::Manage, Permission::Send, Permission::Receive],
            )],
        );
        c.tokens.add(
            "writer-token".into(),
            vec![Grant::new("orders-*", &[Permission::Send])],
        );
        c.tokens.add(
            "reader-token".into(),
            vec![Grant::new("orders-eu", &[Permission::Receive])],
        );
    })
}

fn code(e: ClientError) -> ErrorCode {
    e.code()
        .unwrap_or_else(|| panic!("a server error, got {e}"))
}

#[test]
fn without_a_token_every_request_is_unauthenticated() {
    let s = server();
    let mut c = s.client();
    assert_eq!(
        code(c.list_queues("").unwrap_err()),
        ErrorCode::UNAUTHENTICATED
    );
    assert_eq!(
        code(c.put_one("orders-eu", "x").unwrap_err()),
        ErrorCode::UNAUTHENTICATED
    );
    assert!(c.hello().is_ok(), "hello needs no token");
}

#[test]
fn a_wrong_token_is_unauthenticated() {
    let s = server();
    let e = s.client_with_token("not-a-token").err().expect("refused");
    assert_eq!(code(e), ErrorCode::UNAUTHENTICATED);
}

#[test]
fn permissions_are_per_queue_name_or_prefix_and_a_forbidden_request_changes_nothing() {
    let s = server();
    let mut admin = s.client_with_token("admin-token").unwrap();
    admin
        .create_queue("orders-eu", SettingsPatch::default())
        .unwrap();
    admin
        .create_queue("billing", SettingsPatch::default())
        .unwrap();

    let mut writer = s.client_with_token("writer-token").unwrap();
    writer.put_one("orders-eu", "o1").unwrap();
    assert_eq!(
        code(writer.put_one("billing", "b1").unwrap_err()),
        ErrorCode::FORBIDDEN
    );
    assert_eq!(
        code(writer.receive("orders-eu", 1, Some(0)).unwrap_err()),
        ErrorCode::FORBIDDEN
    );
    assert_eq!(
        code(
            writer
                .create_queue("orders-us", SettingsPatch::default())
                .unwrap_err()
        ),
        ErrorCode::FORBIDDEN
    );
    assert_eq!(
        code(writer.purge("orders-eu", false).unwrap_err()),
        ErrorCode::FORBIDDEN
    );
    assert_eq!(
        writer.list_queues("").unwrap(),
        vec!["orders-eu"],
        "only what the token covers"
    );

    let mut reader = s.client_with_token("reader-token").unwrap();
    let got = reader.receive("orders-eu", 5, Some(0)).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        code(
            reader
                .put(
                    "orders-eu",
                    vec![PutEntry {
                        payload: "r".into(),
                        ..PutEntry::default()
                    }]
                )
                .unwrap_err()
        ),
        ErrorCode::FORBIDDEN
    );

    // Nothing the forbidden requests asked for happened.
    assert_eq!(admin.stats("billing").unwrap().puts, 0);
    assert_eq!(admin.stats("orders-eu").unwrap().puts, 1);
    assert_eq!(admin.list_queues("").unwrap(), vec!["billing", "orders-eu"]);
    assert_eq!(admin.stats("orders-eu").unwrap().in_flight, 1);
}

/// A list pages over what the token may see: neither the page nor its
/// cursor ever names a queue outside the token's grants (the cursor used
/// to be the last name of the unfiltered page).
#[test]
fn a_list_and_its_cursor_name_only_queues_the_token_may_see() {
    let s = server();
    let mut admin = s.client_with_token("admin-token").unwrap();
    for q in [
        "a-secret",
        "b-secret",
        "orders-eu",
        "orders-us",
        "orders-zz",
        "p-secret",
        "zz-secret",
    ] {
        admin.create_queue(q, SettingsPatch::default()).unwrap();
    }
    for (token, want) in [
        ("writer-token", vec!["orders-eu", "orders-us", "orders-zz"]),
        ("reader-token", vec!["orders-eu"]),
    ] {
        let mut c = s.client_with_token(token).unwrap();
        for limit in 1..=4u16 {
            let mut seen = Vec::new();
            let mut after = String::new();
            for _ in 0..20 {
                let (names, next) = c.list_queues_page("", &after, limit).unwrap();
                for n in names.iter().chain(next.iter()) {
                    assert!(!n.contains("secret"), "{token} limit {limit}: {n} leaked");
                }
                seen.extend(names);
                match next {
                    Some(n) => after = n,
                    None => break,
                }
            }
            assert_eq!(seen, want, "{token} limit {limit}");
        }
        // A prefix narrows what it may see.
        let (names, next) = c.list_queues_page("orders-e", "", 0).unwrap();
        assert_eq!((names, next), (vec!["orders-eu".to_string()], None));
    }
}
