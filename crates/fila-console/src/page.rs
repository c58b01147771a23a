//! What the console's pages need of the server and give back: the
//! [`Backend`] that runs their requests and knows the server's figures,
//! who asks ([`Visitor`]), a request's [`Params`], and what a page or an
//! action comes to ([`Outcome`]).

use std::cell::RefCell;
use std::future::Future;

use fila_core::Message;
use fila_proto::{Request, Response};

use crate::history::History;
use crate::html::Html;

/// What the pages ask of the server.
pub trait Backend {
    /// Runs `req` for `v` (authorized by its token's grants first): the
    /// wire answer, or the error's text.
    fn call(&self, v: &Visitor, req: Request) -> impl Future<Output = Result<Response, String>>;
    /// A peek for `v`: the messages, or the error's text.
    fn peek(
        &self,
        v: &Visitor,
        queue: &str,
        dlq: bool,
        from_seq: u64,
        max: u8,
    ) -> impl Future<Output = Result<Vec<Message>, String>>;
    /// The figures sampled for the charts.
    fn history(&self) -> &RefCell<History>;
    /// The server's figures as the overview shows them: each a label and
    /// its value in words.
    fn server_rows(&self) -> Vec<(&'static str, String)>;
}

/// The bytes of messages one page's answer may carry.
pub const ANSWER_ROOM: usize = 2 << 20;

/// What a token may do on a queue (the server's grants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// Put and cancel scheduled messages.
    Send,
    /// Receive, peek, and act on received messages.
    Receive,
    /// Create, change, delete, purge, stats, redrive.
    Manage,
}

/// Whether a visitor's token grants a permission on a queue.
pub type Grants = Box<dyn Fn(&str, Permission) -> bool>;

/// Who asks: a live session, its CSRF token, and its token's grants.
pub struct Visitor {
    /// The session's id.
    pub session: String,
    /// The session's CSRF token (every form carries it).
    pub csrf: String,
    /// Who it is, in words, for the page's bar.
    pub label: String,
    /// Whether its token grants a permission on a queue.
    pub grants: Grants,
    /// What the server knows of who it is (its token), for the server's
    /// own use in [`Backend::call`].
    pub who: Box<dyn std::any::Any>,
}

impl Visitor {
    /// Whether its token grants `p` on `queue`.
    pub fn may(&self, queue: &str, p: Permission) -> bool {
        (self.grants)(queue, p)
    }
}

/// An HTTP status, as the pages give it (the server writes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusCode(pub u16);

impl StatusCode {
    /// 200.
    pub const OK: StatusCode = StatusCode(200);
    /// 400.
    pub const BAD_REQUEST: StatusCode = StatusCode(400);
    /// 403.
    pub const FORBIDDEN: StatusCode = StatusCode(403);
    /// 404.
    pub const NOT_FOUND: StatusCode = StatusCode(404);
    /// 409.
    pub const CONFLICT: StatusCode = StatusCode(409);
    /// 500.
    pub const INTERNAL_SERVER_ERROR: StatusCode = StatusCode(500);
}

/// What a route comes to.
pub enum Outcome {
    /// A page: its status, title and body.
    Page {
        /// Its status.
        status: StatusCode,
        /// Its title.
        title: String,
        /// Its body's HTML.
        body: String,
    },
    /// See another page (after an action), with a message for it.
    Redirect {
        /// Where.
        to: String,
        /// Whether it went well, and what to say.
        flash: Option<(bool, String)>,
    },
}

impl Outcome {
    /// A page.
    pub fn page(title: impl Into<String>, body: String) -> Outcome {
        Outcome::Page {
            status: StatusCode::OK,
            title: title.into(),
            body,
        }
    }

    /// A page that says why the request was refused.
    pub fn refused(status: StatusCode, why: &str) -> Outcome {
        let mut h = Html::default();
        h.el("h1", "", "Refused").el("p", "refusal", why);
        h.raw("<p><a href=\"/\">Back to the queues</a></p>");
        Outcome::Page {
            status,
            title: "Refused".into(),
            body: h.finish(),
        }
    }

    /// A page for a request the server refused with `e`: forbidden when
    /// the token's grants refused it, else not found.
    pub fn failed(e: &str) -> Outcome {
        let status = if e.starts_with("forbidden") {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::NOT_FOUND
        };
        Outcome::refused(status, e)
    }

    /// Back to `to`, saying how it went.
    pub fn done(to: String, result: Result<String, String>) -> Outcome {
        Outcome::Redirect {
            to,
            flash: Some(match result {
                Ok(m) => (true, m),
                Err(m) => (false, m),
            }),
        }
    }
}

/// A request's query or form parameters.
pub type Params = Vec<(String, String)>;

/// The first value of `name`.
pub fn param<'a>(p: &'a Params, name: &str) -> Option<&'a str> {
    p.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The page or action a path names (`post`: sent as a POST, with `form`).
pub async fn route(
    console: &impl Backend,
    v: &Visitor,
    post: bool,
    path: &str,
    query: &Params,
    form: &Params,
) -> Outcome {
    use crate::{actions, messages, pages};
    if path == "/" && !post {
        return pages::overview(console, v, query).await;
    }
    let Some(rest) = path.strip_prefix("/queues/") else {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such page.");
    };
    let mut parts = rest.split('/');
    let name = parts.next().unwrap_or("");
    if fila_core::validate_queue_name("queue", name).is_err() {
        return Outcome::refused(StatusCode::NOT_FOUND, "No such page.");
    }
    let rest: Vec<&str> = parts.collect();
    match (post, rest.as_slice()) {
        (false, []) => pages::queue(console, v, name, query).await,
        (true, ["settings"]) => actions::settings(console, v, name, form).await,
        (true, ["redrive"]) => actions::redrive(console, v, name, form).await,
        (false, ["redrive-preview"]) => actions::redrive_preview(console, v, name, query).await,
        (true, ["pause"]) => actions::pause(console, v, name, form).await,
        (true, ["moves", id, "cancel"]) => actions::cancel_move(console, v, name, id).await,
        (false, ["purge"]) => actions::purge_confirm(v, name, query),
        (true, ["purge"]) => actions::purge(console, v, name, form).await,
        (false, ["messages"]) => messages::browse(console, v, name, query).await,
        (false, ["messages", seq]) => messages::detail(console, v, name, seq, query).await,
        (true, ["messages", seq, "delete"]) => messages::delete(console, v, name, seq, form).await,
        (true, ["messages", seq, "dead-letter"]) => {
            messages::dead_letter(console, v, name, seq, form).await
        }
        _ => Outcome::refused(StatusCode::NOT_FOUND, "No such page."),
    }
}
