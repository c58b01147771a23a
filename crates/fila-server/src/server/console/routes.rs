//! A console request from its head to its answer: the static files, the
//! sign-in, the session and its CSRF token, then the page or the action
//! its path names.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tracing::{debug, warn};

use super::html::{self, Html};
use super::session::{self, cookie, same_secret, set_cookie};
use super::{answer, visitor, Console, Who, BODY_BYTES_MAX, BODY_SECS};
use fila_console::page::{param, route, Outcome, Params};
use fila_sqs::query::parse_form;

use fila_console::assets::{CSS, JS};

/// A connection past [`super::CONNECTIONS_MAX`]: one 503, then closed.
#[cfg(not(loom))]
pub(super) async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "The console serves its most connections now; try again shortly.\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        use tokio::io::AsyncReadExt;
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        // Closed with its request unread, the socket would reset and the
        // answer could be lost: the request is read (a little of it, for
        // a second at most) after the answer's end is sent.
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            if matches!(stream.read(&mut sink).await, Ok(0) | Err(_)) {
                break;
            }
        }
    })
    .await;
}

fn text(status: StatusCode, s: &str) -> Response<Full<Bytes>> {
    answer(status, "text/plain; charset=utf-8", s.as_bytes().to_vec())
}

fn see_other(to: &str, cookies: &[String]) -> Response<Full<Bytes>> {
    let mut r = answer(
        StatusCode::SEE_OTHER,
        "text/plain; charset=utf-8",
        Vec::new(),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(to) {
        r.headers_mut().insert(hyper::header::LOCATION, v);
    }
    add_cookies(&mut r, cookies);
    r
}

fn add_cookies(r: &mut Response<Full<Bytes>>, cookies: &[String]) {
    for c in cookies {
        if let Ok(v) = hyper::header::HeaderValue::from_str(c) {
            r.headers_mut().append(hyper::header::SET_COOKIE, v);
        }
    }
}

/// Whether a POST comes from the console's own pages: its `Origin` (when
/// the browser sends one) is this host's, and `Sec-Fetch-Site` (when
/// sent) says same-origin.
fn same_origin(parts: &hyper::http::request::Parts, secure: bool) -> bool {
    let h = &parts.headers;
    let host = h.get(hyper::header::HOST).and_then(|v| v.to_str().ok());
    if let Some(origin) = h.get(hyper::header::ORIGIN) {
        let scheme = if secure { "https" } else { "http" };
        let ok = match (origin.to_str().ok(), host) {
            (Some(o), Some(host)) => o == format!("{scheme}://{host}"),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    match h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        None | Some("same-origin") | Some("none") => true,
        Some(_) => false,
    }
}

/// One request, answered.
pub(super) async fn handle(
    console: &Console,
    req: Request<Incoming>,
    peer: SocketAddr,
    secure: bool,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let get = parts.method == Method::GET || parts.method == Method::HEAD;
    let post = parts.method == Method::POST;
    if get {
        match path.as_str() {
            "/static/console.css" => {
                return answer(StatusCode::OK, "text/css; charset=utf-8", CSS.into())
            }
            "/static/console.js" => {
                return answer(StatusCode::OK, "text/javascript; charset=utf-8", JS.into())
            }
            "/favicon.ico" => return text(StatusCode::NOT_FOUND, "none"),
            _ => {}
        }
    } else if !post {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "The console takes GET and POST.",
        );
    }
    let query = match parse_form(parts.uri.query().unwrap_or("").as_bytes()) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e.message),
    };
    let form = if post {
        if !same_origin(&parts, secure) {
            return text(
                StatusCode::FORBIDDEN,
                "Refused: the form was not sent from the console's own pages.",
            );
        }
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > BODY_BYTES_MAX as u64) {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("A form is at most {BODY_BYTES_MAX} bytes."),
            );
        }
        match read_form(body).await {
            Ok(f) => f,
            Err((status, why)) => return text(status, &why),
        }
    } else {
        Vec::new()
    };
    let access = console.shared.live.load();
    if path == "/signin" {
        return signin(console, &parts, &form, &access, peer, secure).await;
    }
    let now = Instant::now();
    let mut cookies = Vec::new();
    let live_refresh = parts.headers.contains_key("x-fila-live");
    let found = cookie(&crate::server::headers_of(&parts), &console.cookie).and_then(|id| {
        let mut sessions = console.sessions.borrow_mut();
        let s = sessions.get(id, now)?;
        // A session's token must still be one of the last reload's: one
        // a reload removed (or tokens configured since an anonymous
        // session began) ends it.
        let token = match (&s.token, access.tokens.is_empty()) {
            (None, true) => Ok(None),
            (Some(t), false) => access.tokens.find(t).map(Some).ok_or(()),
            _ => Err(()),
        };
        let Ok(token) = token else {
            sessions.end(id);
            return None;
        };
        let flash = if live_refresh { None } else { s.flash.take() };
        Some((
            visitor(
                id.to_owned(),
                s.csrf.clone(),
                Who {
                    access: access.clone(),
                    token,
                },
            ),
            flash,
        ))
    });
    let (visitor, flash) = match found {
        Some(v) => v,
        None if access.tokens.is_empty() && get => {
            // No tokens: the console is on loopback; a session begins by
            // itself (its CSRF token is what it is for).
            let id = console.sessions.borrow_mut().begin(None, now);
            cookies.push(set_cookie(&console.cookie, &id, secure, None));
            let csrf = console
                .sessions
                .borrow_mut()
                .get(&id, now)
                .map(|s| s.csrf.clone())
                .unwrap_or_default();
            (
                visitor(
                    id,
                    csrf,
                    Who {
                        access: access.clone(),
                        token: None,
                    },
                ),
                None,
            )
        }
        None if get => return see_other("/signin", &[]),
        None => {
            return text(
                StatusCode::FORBIDDEN,
                "Refused: no session (it ended, or the server restarted); sign in again.",
            )
        }
    };
    if post {
        let sent = param(&form, "csrf").unwrap_or("");
        if !same_secret(sent, &visitor.csrf) {
            debug!(%peer, path, "console form without its CSRF token refused");
            return text(
                StatusCode::FORBIDDEN,
                "Refused: the form's CSRF token is missing or wrong (reload the page and try again).",
            );
        }
    }
    if post && path == "/signout" {
        console.sessions.borrow_mut().end(&visitor.session);
        let clear = set_cookie(&console.cookie, "", secure, Some(0));
        let to = if access.tokens.is_empty() {
            "/"
        } else {
            "/signin"
        };
        return see_other(to, &[clear]);
    }
    let outcome = route(console, &visitor, post, &path, &query, &form).await;
    match outcome {
        Outcome::Page {
            status,
            title,
            body,
        } => {
            let page = html::page(
                &title,
                Some((&visitor.label, &visitor.csrf)),
                flash.as_ref(),
                &body,
            );
            let status =
                StatusCode::from_u16(status.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut r = answer(status, "text/html; charset=utf-8", page.into_bytes());
            add_cookies(&mut r, &cookies);
            r
        }
        Outcome::Redirect { to, flash } => {
            if let Some(s) = console.sessions.borrow_mut().get(&visitor.session, now) {
                s.flash = flash;
            }
            see_other(&to, &cookies)
        }
    }
}

/// A form body: within [`BODY_BYTES_MAX`] and [`BODY_SECS`], decoded.
async fn read_form(body: Incoming) -> Result<Params, (StatusCode, String)> {
    let collected = tokio::time::timeout(
        Duration::from_secs(BODY_SECS),
        Limited::new(body, BODY_BYTES_MAX).collect(),
    )
    .await;
    let bytes = match collected {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(_)) => {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("A form is at most {BODY_BYTES_MAX} bytes."),
            ))
        }
        Err(_) => {
            return Err((
                StatusCode::REQUEST_TIMEOUT,
                format!("The form was not sent within {BODY_SECS} s."),
            ))
        }
    };
    parse_form(&bytes).map_err(|e| (StatusCode::BAD_REQUEST, e.message))
}

/// The sign-in page and its form: a token in, a session out. The form
/// carries a CSRF token of its own, also in a short-lived cookie (no
/// session exists yet); failures count against the address.
async fn signin(
    console: &Console,
    parts: &hyper::http::request::Parts,
    form: &Params,
    access: &crate::live::Access,
    peer: SocketAddr,
    secure: bool,
) -> Response<Full<Bytes>> {
    if access.tokens.is_empty() {
        return see_other("/", &[]);
    }
    let now = Instant::now();
    let show = |status: StatusCode, error: Option<&str>| {
        let pre = session::random_id();
        let mut h = Html::default();
        h.el("h1", "", "Sign in");
        h.el(
            "p",
            "muted",
            "Sign in with one of the server's tokens; what you may see and do follows its grants.",
        );
        h.raw("<form method=\"post\" action=\"/signin\" class=\"signin\">");
        h.hidden("csrf", &pre);
        h.raw("<label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" autofocus></label>");
        h.button("Sign in", false).raw("</form>");
        let flash = error.map(|e| (false, e.to_owned()));
        let page = html::page("Sign in", None, flash.as_ref(), &h.finish());
        let mut r = answer(status, "text/html; charset=utf-8", page.into_bytes());
        add_cookies(
            &mut r,
            &[set_cookie(&console.pre_cookie, &pre, secure, Some(600))],
        );
        r
    };
    if parts.method != Method::POST {
        return show(StatusCode::OK, None);
    }
    let pre = cookie(&crate::server::headers_of(parts), &console.pre_cookie).unwrap_or("");
    let sent = param(form, "csrf").unwrap_or("");
    if pre.is_empty() || !same_secret(pre, sent) {
        return show(
            StatusCode::FORBIDDEN,
            Some("The sign-in form was stale or not the console's own; try again."),
        );
    }
    if let Some(left) = console.guard.borrow_mut().blocked(peer.ip(), now) {
        return show(
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "Too many failed sign-ins from this address; try again in {} s.",
                left.as_secs().max(1)
            )),
        );
    }
    let token = param(form, "token").unwrap_or("");
    if access.tokens.find(token).is_none() {
        let blocked = console.guard.borrow_mut().failed(peer.ip(), now);
        if let Some(b) = blocked {
            warn!(%peer, block_secs = b.as_secs(), "too many failed console sign-ins: this address is refused for a while");
        }
        return show(
            StatusCode::UNAUTHORIZED,
            Some("That token is not one of the server's."),
        );
    }
    let id = console
        .sessions
        .borrow_mut()
        .begin(Some(token.to_owned()), now);
    see_other(
        "/",
        &[
            set_cookie(&console.cookie, &id, secure, None),
            set_cookie(&console.pre_cookie, "", secure, Some(0)),
        ],
    )
}
