//! The SQS operations' way to the shards: `fila_sqs::run` checks each
//! request's parameters, makes its fila requests and writes its answer;
//! here each fila request is authorized for the caller's token and sent
//! through the gateway. docs/sqs.md lists what differs from SQS.

use fila_proto::{Request, Response};
use fila_sqs::{Answer, Caller};

use super::error::{Kind, SqsError};
use super::gateway::{Gateway, Reply};
use crate::auth::TokenId;
use crate::dispatch::{self, Caller as Grants};

/// Who asks, and where the request was sent (for queue URLs).
pub(in crate::server) struct Context<'a> {
    pub(in crate::server) gateway: &'a Gateway,
    /// The tokens `token` was found in (one reload's).
    pub(in crate::server) tokens: &'a crate::auth::TokenTable,
    pub(in crate::server) token: Option<TokenId>,
    pub(in crate::server) host: &'a str,
}

impl Caller for Context<'_> {
    async fn call(&self, request: Request, room: usize) -> Result<Answer, SqsError> {
        let grants = Grants {
            tokens: self.tokens,
            token: self.token,
        };
        if let Some(Response::Error(e)) = dispatch::authorize(&grants, &request) {
            return Err(SqsError::new(Kind::AccessDenied, e.message));
        }
        let token = self.token.map(|t| (self.tokens, t));
        Ok(match self.gateway.call(request, token, room).await? {
            Reply::Answer(dispatch::Answer::Wire(r)) => Answer::Wire(r),
            Reply::Answer(dispatch::Answer::Messages(_, ms)) | Reply::Late(Ok(ms)) => {
                Answer::Messages(ms)
            }
            Reply::Late(Err(e)) => Answer::Engine(e),
        })
    }

    fn host(&self) -> &str {
        self.host
    }

    fn begin_purge(&self, queue: &str) -> Result<(), SqsError> {
        self.gateway.begin_purge(queue)
    }

    fn forget_purge(&self, queue: &str) {
        self.gateway.forget_purge(queue)
    }
}
