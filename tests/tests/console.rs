//! The web console over real HTTP, the way a browser and an attacker meet
//! it: a form without its CSRF token (or from another origin) changes
//! nothing; hostile payloads, attributes and reasons come back as text;
//! sign-in by token and what a token's grants allow; the security headers;
//! the limits on connections and bodies. (tests/console/ drives the same
//! console in a real browser.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use fila_client::PutEntry;
use fila_server::auth::{Grant, Permission};
use fila_tests::TestServer;

/// An answer: status, headers (lowercased names), body.
struct Http {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn cookie(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "set-cookie")
            .filter_map(|(_, v)| v.split(';').next()?.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned())
    }

    /// The CSRF token the page's forms carry.
    fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").expect("a form") + 19;
        self.body[at..at + 64].to_owned()
    }
}

/// One request on its own connection (`Connection: close`).
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Http {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    Http {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn console(s: &TestServer) -> SocketAddr {
    s.server().console_addr().expect("the console is on")
}

/// The console's session and sign-in cookie names: with its port, so two
/// servers on one host keep their sessions apart.
fn names(addr: SocketAddr) -> (String, String) {
    (
        format!("fila_session_{}", addr.port()),
        format!("fila_signin_{}", addr.port()),
    )
}

/// A session's cookie header and its CSRF token (no tokens: the first
/// page begins one).
fn session(addr: SocketAddr) -> (String, String) {
    let page = http(addr, "GET", "/", &[], "");
    assert_eq!(page.status, 200, "{}", page.body);
    let (name, _) = names(addr);
    let id = page.cookie(&name).expect("a session cookie");
    (format!("{name}={id}"), page.csrf())
}

/// A browser's session with the console: its cookie and CSRF token.
struct Session {
    addr: SocketAddr,
    cookie: String,
    csrf: String,
}

impl Session {
    fn begin(addr: SocketAddr) -> Session {
        let (cookie, csrf) = session(addr);
        Session { addr, cookie, csrf }
    }

    fn get(&self, path: &str) -> Http {
        http(self.addr, "GET", path, &[("Cookie", &self.cookie)], "")
    }

    /// Posts `fields` with the session's CSRF token, as the console's own
    /// form does; answers the page its answer sends the browser to.
    fn post(&self, path: &str, fields: &str) -> Http {
        let body = format!("csrf={}&{fields}", self.csrf);
        let r = http(self.addr, "POST", path, &[("Cookie", &self.cookie)], &body);
        assert_eq!(r.status, 303, "{path}: {}", r.body);
        self.get(r.header("location").expect("where to"))
    }
}

/// The text of a page's flash message and whether it is an error.
fn flash(page: &Http) -> Option<(bool, &str)> {
    let (error, at) = match page.body.find("<p class=\"flash error\"") {
        Some(at) => (true, at),
        None => (false, page.body.find("<p class=\"flash ok\"")?),
    };
    let text = &page.body[at..];
    let start = text.find('>')? + 1;
    let end = text.find("</p>")?;
    Some((error, &text[start..end]))
}

fn put(s: &TestServer, queue: &str, payloads: &[&str]) {
    let mut c = s.client();
    c.create_queue(queue, Default::default()).unwrap(); // idempotent
    let entries: Vec<PutEntry> = payloads
        .iter()
        .map(|p| PutEntry {
            payload: p.as_bytes().to_vec().into(),
            ..PutEntry::default()
        })
        .collect();
    for r in c.put(queue, entries).unwrap() {
        r.unwrap();
    }
}

fn visible(s: &TestServer, queue: &str) -> u64 {
    s.client().stats(queue).unwrap().visible
}

#[test]
fn a_form_without_its_csrf_token_or_from_elsewhere_changes_nothing() {
    let s = TestServer::start();
    let addr = console(&s);
    put(&s, "jobs", &["a", "b"]);
    let (cookie, csrf) = session(addr);
    let cookie_h = ("Cookie", cookie.as_str());
    // No token, a wrong one, another session's, another origin.
    let (_, other_csrf) = session(addr);
    for (body, extra) in [
        ("confirm=jobs".to_owned(), None),
        (format!("confirm=jobs&csrf={}", "0".repeat(64)), None),
        (format!("confirm=jobs&csrf={other_csrf}"), None),
        (
            format!("confirm=jobs&csrf={csrf}"),
            Some(("Origin", "http://evil.example")),
        ),
        (
            format!("confirm=jobs&csrf={csrf}"),
            Some(("Sec-Fetch-Site", "cross-site")),
        ),
    ] {
        let mut headers = vec![cookie_h];
        headers.extend(extra);
        let r = http(addr, "POST", "/queues/jobs/purge", &headers, &body);
        assert_eq!(r.status, 403, "{body} {extra:?}: {}", r.body);
        assert!(r.body.contains("Refused"), "{}", r.body);
        assert_eq!(visible(&s, "jobs"), 2, "nothing purged");
    }
    // No session at all.
    let r = http(
        addr,
        "POST",
        "/queues/jobs/purge",
        &[],
        &format!("confirm=jobs&csrf={csrf}"),
    );
    assert_eq!(r.status, 403);
    // The right name is asked for too.
    let r = http(
        addr,
        "POST",
        "/queues/jobs/purge",
        &[cookie_h],
        &format!("confirm=job&csrf={csrf}"),
    );
    assert_eq!(r.status, 303);
    assert_eq!(visible(&s, "jobs"), 2);
    // The console's own form, from its own origin, works.
    let origin = format!("http://{addr}");
    let r = http(
        addr,
        "POST",
        "/queues/jobs/purge",
        &[cookie_h, ("Origin", origin.as_str())],
        &format!("confirm=jobs&csrf={csrf}"),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/queues/jobs"));
    assert_eq!(visible(&s, "jobs"), 0, "purged");
    let page = http(addr, "GET", "/queues/jobs", &[cookie_h], "");
    assert!(page.body.contains("The queue was purged."), "{}", page.body);
}

#[test]
fn hostile_payloads_attributes_and_reasons_are_shown_as_text() {
    let s = TestServer::start();
    let addr = console(&s);
    let script = "<script>alert(1)</script>";
    let img = "\"><img src=x onerror=alert(1)>";
    put(&s, "evil", &[script, img]);
    let mut c = s.client();
    let e = PutEntry {
        payload: "attrs".into(),
        attributes: vec![(img.into(), script.into())],
        ..PutEntry::default()
    };
    c.put("evil", vec![e]).unwrap().remove(0).unwrap();
    c.dead_letter_seq("evil", 1, script, img).unwrap();
    let (cookie, _) = session(addr);
    let cookie_h = [("Cookie", cookie.as_str())];
    let pages = [
        "/queues/evil/messages",
        "/queues/evil/messages?dlq=1",
        "/queues/evil/messages/1?dlq=1",
        "/queues/evil/messages/2",
        "/queues/evil/messages/2?view=hex",
        "/queues/evil/messages/2?view=json",
        "/queues/evil/messages/3",
    ];
    for page in pages {
        let r = http(addr, "GET", page, &cookie_h, "");
        assert_eq!(r.status, 200, "{page}: {}", r.body);
        assert!(!r.body.contains("<script>alert"), "{page}: {}", r.body);
        assert!(!r.body.contains("<img"), "{page}: {}", r.body);
        assert!(!r.body.contains("onerror=alert(1)>"), "{page}");
    }
    let dlq = http(addr, "GET", "/queues/evil/messages/1?dlq=1", &cookie_h, "").body;
    assert!(
        dlq.contains("consumer: &lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dlq}"
    );
    assert!(
        dlq.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "{dlq}"
    );
    let attrs = http(addr, "GET", "/queues/evil/messages/3", &cookie_h, "").body;
    assert!(
        attrs.contains("<td>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</td><td>&lt;script&gt;")
    );
    // Every page carries the policy that would stop a script anyway.
    let r = http(addr, "GET", "/queues/evil", &cookie_h, "");
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[test]
fn sign_in_takes_a_token_and_a_tokens_grants_decide_what_it_sees_and_does() {
    let s = TestServer::with(|c| {
        c.tokens.add(
            "admin-token".into(),
            vec![Grant::new(
                "*",
                &[Permission::Manage, Permission::Send, Permission::Receive],
            )],
        );
        c.tokens.add(
            "reader-token".into(),
            vec![Grant::new("orders", &[Permission::Receive])],
        );
    });
    let addr = console(&s);
    let mut admin = s.client_with_token("admin-token").unwrap();
    admin.create_queue("orders", Default::default()).unwrap();
    admin.create_queue("secret", Default::default()).unwrap();
    admin
        .put(
            "orders",
            vec![PutEntry {
                payload: "o".into(),
                ..PutEntry::default()
            }],
        )
        .unwrap();
    // No session: to the sign-in page.
    let r = http(addr, "GET", "/", &[], "");
    assert_eq!((r.status, r.header("location")), (303, Some("/signin")));
    let form = http(addr, "GET", "/signin", &[], "");
    let (session_name, pre_name) = names(addr);
    let pre = form.cookie(&pre_name).unwrap();
    let pre_h = format!("{pre_name}={pre}");
    let signin = |token: &str| {
        http(
            addr,
            "POST",
            "/signin",
            &[("Cookie", pre_h.as_str())],
            &format!("csrf={}&token={token}", form.csrf()),
        )
    };
    let wrong = signin("guess");
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("not one of the server"));
    assert!(wrong.cookie(&session_name).is_none());
    // The sign-in form's own CSRF token is needed too.
    let r = http(addr, "POST", "/signin", &[], "token=reader-token");
    assert_eq!(r.status, 403);
    let ok = signin("reader-token");
    assert_eq!(ok.status, 303, "{}", ok.body);
    let cookie = format!("{session_name}={}", ok.cookie(&session_name).unwrap());
    let set = ok
        .headers
        .iter()
        .find(|(k, v)| k == "set-cookie" && v.starts_with(&format!("{session_name}=")))
        .unwrap();
    assert!(set.1.contains("HttpOnly") && set.1.contains("SameSite=Strict"));
    let cookie_h = ("Cookie", cookie.as_str());
    // It sees only what its grants cover: orders, not secret.
    let home = http(addr, "GET", "/", &[cookie_h], "");
    assert!(home.body.contains("/queues/orders"), "{}", home.body);
    assert!(!home.body.contains("secret"), "{}", home.body);
    // It may browse orders (receive) but not manage it.
    let r = http(addr, "GET", "/queues/orders/messages", &[cookie_h], "");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http(addr, "GET", "/queues/orders/purge", &[cookie_h], "");
    assert_eq!(r.status, 403);
    assert!(r.body.contains("forbidden"), "{}", r.body);
    let csrf = r.csrf();
    let r = http(
        addr,
        "POST",
        "/queues/orders/purge",
        &[cookie_h],
        &format!("csrf={csrf}&confirm=orders"),
    );
    assert_eq!(r.status, 303);
    let after = http(addr, "GET", "/queues/orders/messages", &[cookie_h], "");
    assert!(after.body.contains("forbidden"), "{}", after.body);
    assert_eq!(admin.stats("orders").unwrap().visible, 1, "not purged");
    let r = http(addr, "GET", "/queues/secret/messages", &[cookie_h], "");
    assert_eq!(r.status, 403);
    // Signed out, the session is gone.
    let r = http(
        addr,
        "POST",
        "/signout",
        &[cookie_h],
        &format!("csrf={csrf}"),
    );
    assert_eq!((r.status, r.header("location")), (303, Some("/signin")));
    let r = http(addr, "GET", "/", &[cookie_h], "");
    assert_eq!(r.status, 303);
}

#[test]
fn an_operator_deletes_dead_letters_and_redrives_from_the_console() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "work", &["one", "two", "three"]);
    let page = b.post("/queues/work/messages/1/delete", "");
    assert_eq!(flash(&page), Some((false, "Message 1 deleted.")));
    let page = b.post(
        "/queues/work/messages/2/dead-letter",
        "reason=stuck&description=by+hand",
    );
    assert_eq!(flash(&page), Some((false, "Message 2 dead-lettered.")));
    let stats = s.client().stats("work").unwrap();
    assert_eq!((stats.visible, stats.dead_lettered), (1, 1));
    let page = b.get("/queues/work/messages?dlq=1").body;
    assert!(
        page.contains("consumer: stuck") && page.contains("by hand"),
        "{page}"
    );
    assert!(!page.contains("Later messages"), "nothing is left: {page}");
    let page = b.post("/queues/work/redrive", "rate=10&max=");
    let (error, said) = flash(&page).unwrap();
    assert!(!error && said.starts_with("Redrive started"), "{said}");
    assert!(page.body.contains("redrive of the DLQ"), "{}", page.body);
    assert_eq!(s.client().stats("work").unwrap().visible, 2, "redriven");
    // A message that is gone says so.
    let page = b.post("/queues/work/messages/1/delete", "");
    let (error, said) = flash(&page).unwrap();
    assert!(
        error && said.contains("no held message with sequence number 1"),
        "{said}"
    );
}

#[test]
fn a_filtered_redrive_is_previewed_then_started_from_the_console() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "jobs", &["one", "two", "three"]);
    let forms = [
        ("2", "timeout", "upstream+504"),
        ("3", "bad_input", "field+x"),
    ];
    for (seq, reason, description) in forms {
        b.post(
            &format!("/queues/jobs/messages/{seq}/dead-letter"),
            &format!("reason={reason}&description={description}"),
        );
    }
    let queue_page = b.get("/queues/jobs").body;
    assert!(
        queue_page.contains("formaction=\"/queues/jobs/redrive-preview\"")
            && queue_page.contains("name=\"reason\""),
        "{queue_page}"
    );
    // The preview (a GET, as the form's Preview button sends it): one
    // match, shown; nothing moved.
    let preview = b.get("/queues/jobs/redrive-preview?csrf=x&rate=5&max=&attr=&reason=timeout&text=&since=1h&until=");
    assert_eq!(preview.status, 200, "{}", preview.body);
    assert!(
        preview
            .body
            .contains("1 dead letters would go back (only: reason timeout, failed at or after")
            && preview.body.contains("consumer: timeout")
            && preview.body.contains("upstream 504")
            && !preview.body.contains("field x"),
        "{}",
        preview.body
    );
    assert_eq!(s.client().stats("jobs").unwrap().dead_lettered, 2);
    // Its form carries the filter, the age made a time.
    assert!(
        preview.body.contains("name=\"since\" value=\""),
        "{}",
        preview.body
    );
    assert!(!preview.body.contains("name=\"since\" value=\"1h\""));
    let page = b.post("/queues/jobs/redrive", "rate=5&max=&reason=timeout&since=0");
    let (error, said) = flash(&page).unwrap();
    assert!(
        !error
            && said.starts_with(
                "Redrive started (only: reason timeout, failed at or after 0 ms): 1 moved now"
            ),
        "{said}"
    );
    assert!(
        page.body
            .contains("redrive of the DLQ (only: reason timeout"),
        "{}",
        page.body
    );
    let stats = s.client().stats("jobs").unwrap();
    assert_eq!((stats.visible, stats.dead_lettered), (2, 1));
    // A bad filter is said, and nothing moves.
    let page = b.post("/queues/jobs/redrive", "rate=5&since=yesterday");
    let (error, said) = flash(&page).unwrap();
    assert!(error && said.contains("since"), "{said}");
    let bad = b.get("/queues/jobs/redrive-preview?attr=novalue");
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(s.client().stats("jobs").unwrap().dead_lettered, 1);
}

/// The home page's server figures count the HTTP APIs' requests: an Azure request with
/// no signature shows as refused, the SQS API's as answered.
#[test]
fn the_server_page_counts_sqs_and_azure_requests() {
    let s = TestServer::start();
    let addr = console(&s);
    let row = |page: &Http| {
        let at = page.body.find("HTTP API requests").expect("the row");
        page.body[at..at + 300].to_owned()
    };
    let before = http(addr, "GET", "/", &[], "");
    assert_eq!(before.status, 200, "{}", before.body);
    assert!(
        row(&before).contains("SQS: 0 answered, 0 with an error, 0 unauthenticated; Azure: 0 answered, 0 with an error, 0 unauthenticated"),
        "{}",
        row(&before)
    );
    let azure = s.server().azure_addr().expect("the Azure API is on");
    let refused = http(azure, "GET", "/devstoreaccount1?comp=list", &[], "");
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.header("x-ms-error-code"),
        Some("AuthenticationFailed")
    );
    let sqs = s.server().sqs_addr().expect("the SQS API is on");
    let listed = http(sqs, "POST", "/", &[], "Action=ListQueues");
    assert_eq!(listed.status, 200, "{}", listed.body);
    let after = http(addr, "GET", "/", &[], "");
    let row = row(&after);
    assert!(row.contains("SQS: 1 answered, 0 with an error"), "{row}");
    assert!(
        row.contains("Azure: 0 answered, 0 with an error, 1 unauthenticated"),
        "{row}"
    );
}

#[test]
fn the_console_bounds_its_connections_and_bodies() {
    let s = TestServer::start();
    let addr = console(&s);
    // Idle connections up to the limit...
    let mut held: Vec<TcpStream> = (0..fila_server::console::CONNECTIONS_MAX)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // (each is taken in once the console accepted it: a request on the
    // last one proves every one before it was)
    let mut last = held.last().unwrap().try_clone().unwrap();
    last.write_all(b"GET /static/console.css HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 12];
    last.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
    // ...do not keep the console from a newcomer: it takes the place of
    // the one idle the longest, which is closed.
    let r = http(addr, "GET", "/", &[], "");
    assert_eq!(r.status, 200, "{}", r.body);
    let oldest = &mut held[0];
    oldest
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut one = [0u8; 1];
    assert!(
        matches!(oldest.read(&mut one), Ok(0) | Err(_)),
        "the longest idle connection was closed"
    );
    drop(held);
    drop(last);
    // A form declared past its limit is refused before any of it is read.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /queues/q/purge HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        fila_server::console::BODY_BYTES_MAX + 1
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 413");
}

#[test]
fn settings_are_saved_field_by_field_and_a_bad_value_changes_nothing() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "tuned", &[]);
    let page = b.post(
        "/queues/tuned/settings",
        "visibility_timeout_ms=60000&max_deliveries=5&ordered=true&dead_letter_target=",
    );
    assert_eq!(
        flash(&page),
        Some((false, "Saved: visibility_timeout_ms, ordered."))
    );
    let got = s.client().get_queue("tuned").unwrap();
    assert_eq!((got.visibility_timeout_ms, got.ordered), (60_000, true));
    for (bad, field) in [
        ("visibility_timeout_ms=soon", "visibility_timeout_ms"),
        ("max_deliveries=-1", "max_deliveries"),
        ("ordered=maybe", "ordered"),
        // Past a limit: the engine's own error.
        (
            "visibility_timeout_ms=999999999999",
            "visibility_timeout_ms",
        ),
    ] {
        let page = b.post("/queues/tuned/settings", bad);
        let (error, said) = flash(&page).unwrap_or_else(|| panic!("{bad}: no flash"));
        assert!(error && said.contains(field), "{bad}: {said}");
    }
    let got = s.client().get_queue("tuned").unwrap();
    assert_eq!(
        (got.visibility_timeout_ms, got.max_deliveries, got.ordered),
        (60_000, 5, true),
        "nothing changed"
    );
}

/// The retry policy is four fields of the settings form, and the queue's
/// page counts the leases that waited for it.
#[test]
fn the_retry_policy_is_set_from_the_settings_form_and_its_retries_shown() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "retried", &["work"]);
    let page = b.post(
        "/queues/retried/settings",
        "retry_initial_ms=3600000&retry_multiplier_pct=150&retry_max_ms=7200000&retry_jitter_pct=10",
    );
    assert_eq!(
        flash(&page),
        Some((
            false,
            "Saved: retry_initial_ms, retry_multiplier_pct, retry_max_ms, retry_jitter_pct."
        ))
    );
    let mut c = s.client();
    let got = c.get_queue("retried").unwrap();
    assert_eq!(
        (
            got.retry_initial_ms,
            got.retry_multiplier_pct,
            got.retry_max_ms,
            got.retry_jitter_pct
        ),
        (3_600_000, 150, 7_200_000, 10)
    );
    let page = b.post("/queues/retried/settings", "retry_max_ms=1000");
    let (error, said) = flash(&page).expect("a flash");
    assert!(error && said.contains("retry_max_ms"), "{said}");
    let leased = c.receive("retried", 1, Some(0)).unwrap();
    let queue = fila_client::QueueRef {
        name: "retried".into(),
        dlq: false,
    };
    c.release(&queue, &[leased[0].receipt.unwrap()]).unwrap();
    let page = b.get("/queues/retried");
    assert!(
        page.body
            .contains("name=\"retry_initial_ms\" value=\"3600000\""),
        "the form shows the policy"
    );
    assert!(
        page.body
            .contains("<th>Since start: leases ended, waiting for a retry</th><td>1</td>"),
        "the page counts the retry"
    );
}

/// A queue's receiving and sending are paused and resumed with a button
/// each; the page says which are paused.
#[test]
fn a_queue_is_paused_and_resumed_from_its_page() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "held", &["work"]);
    let page = b.get("/queues/held");
    assert!(
        page.body.contains("<th>Receiving</th><td>running</td>"),
        "the pause section"
    );
    let page = b.post("/queues/held/pause", "half=receive&to=pause");
    assert_eq!(flash(&page), Some((false, "Receiving paused.")));
    let mut c = s.client();
    assert!(c.get_queue("held").unwrap().paused.receive);
    assert!(c.receive("held", 1, Some(0)).unwrap().is_empty());
    let page = b.get("/queues/held");
    assert!(
        page.body.contains("<th>Receiving</th><td>paused</td>"),
        "shown paused"
    );
    assert!(page.body.contains("value=\"resume\""), "a resume button");
    for bad in ["half=both&to=pause", "half=receive&to=stop", ""] {
        let page = b.post("/queues/held/pause", bad);
        let (error, _) = flash(&page).unwrap_or_else(|| panic!("{bad}: no flash"));
        assert!(error, "{bad}");
    }
    let page = b.post("/queues/held/pause", "half=receive&to=resume");
    assert_eq!(flash(&page), Some((false, "Receiving resumed.")));
    assert_eq!(c.receive("held", 1, Some(0)).unwrap().len(), 1);
}

/// A message's page shows its failed attempts.
#[test]
fn a_messages_page_shows_its_failed_attempts() {
    let s = TestServer::start();
    let b = Session::begin(console(&s));
    put(&s, "tried", &["work"]);
    let mut c = s.client();
    let m = c.receive("tried", 1, Some(0)).unwrap().remove(0);
    let queue = fila_client::QueueRef {
        name: "tried".into(),
        dlq: false,
    };
    c.release_with(&queue, &[m.receipt.unwrap()], "timeout", "<b>upstream</b>")
        .unwrap();
    let page = b.get(&format!("/queues/tried/messages/{}", m.seq));
    assert!(
        page.body.contains("<h2>Failed attempts</h2>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<td>released</td>"), "{}", page.body);
    assert!(page.body.contains("<td>timeout</td>"));
    assert!(
        page.body.contains("&lt;b&gt;upstream&lt;/b&gt;"),
        "shown as text"
    );
}

#[test]
fn a_page_of_large_messages_stops_at_its_room_and_links_to_the_rest() {
    let s = TestServer::start();
    let addr = console(&s);
    let big = "x".repeat(250_000);
    let payloads: Vec<&str> = (0..30).map(|_| big.as_str()).collect();
    for chunk in payloads.chunks(10) {
        put(&s, "large", chunk);
    }
    let page = Session::begin(addr).get("/queues/large/messages");
    assert_eq!(page.status, 200);
    let rows = page.body.matches("<td class=\"payload\">").count();
    assert!((1..30).contains(&rows), "{rows} rows");
    assert!(page.body.contains("Later messages"), "a link to the rest");
    let room = fila_server::console::ANSWER_ROOM;
    assert!(rows * 250_000 <= 2 * room + 250_000, "{rows} rows");
}

#[test]
fn two_servers_on_one_host_keep_their_console_sessions_apart() {
    let (a, b) = (TestServer::start(), TestServer::start());
    let (ca, cb) = (console(&a), console(&b));
    let (cookie_a, _) = session(ca);
    let (cookie_b, _) = session(cb);
    assert_ne!(names(ca).0, names(cb).0);
    // A browser sends both (cookies are not kept apart by port): each
    // console takes its own.
    let both = format!("{cookie_a}; {cookie_b}");
    for addr in [ca, cb] {
        let r = http(addr, "GET", "/", &[("Cookie", both.as_str())], "");
        assert_eq!(r.status, 200);
        assert!(
            r.cookie(&names(addr).0).is_none(),
            "no new session was begun"
        );
    }
}
