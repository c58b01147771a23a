//! The Azure Queue Storage API, served by the event loops beside the
//! binary protocol and the SQS API (docs/azure.md is the user's
//! reference).
//!
//! Loop 0 accepts from the Azure socket and deals the connections to
//! every loop; a loop frames their requests with `fila_http::Framer` as it
//! frames SQS ones (`front/http.rs`, with this dialect's limits) and
//! answers them in order. What a request means — its URI and parameters,
//! SharedKey, SharedKeyLite and SAS, every operation's fila requests and
//! answer — is the dialect crate `fila_azure`, which does no I/O. This
//! module holds what joins the two: the limits, the accounts and their
//! keys (the tokens, or the development account), the grants of each fila
//! request an operation makes, the service properties set, each loop's
//! queues' retentions read in the last second (for Put Message's answer,
//! without a settings request per put), and the
//! [`AzureCaller`] a loop polls an operation with, through the exchange
//! the SQS API's operations use (`sqs::LoopCaller`).
//!
//! Accounts: without tokens, the development account `devstoreaccount1`
//! with its published key, with every grant; with tokens, each token with
//! an `id` is an account of that name whose key is the token's secret in
//! base64, with the token's grants.
//!
//! Limits, per connection: those of the SQS API (`sqs`), but a body of at
//! most [`BODY_BYTES_MAX`] (a message's text is at most 64 KiB once read,
//! `fila_azure::request::MESSAGE_BYTES_MAX`); request bodies count in the
//! same server-wide room as SQS ones.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fila_azure::auth::{dev_key, Principal, DEV_ACCOUNT};
use fila_azure::{AzureError, Call, Code, Head};
use fila_proto::{Request, Response};
use tracing::debug;

use crate::auth::TokenId;
use crate::dispatch::{self, Caller as Grants};
use crate::live::Access;
use crate::server::sqs;

/// The most bytes of an Azure request's body: a 64 KiB message's text
/// with every character escaped, and room for its XML.
pub const BODY_BYTES_MAX: usize = 512 << 10;

/// The framer's limits for an Azure connection.
pub(in crate::server) const LIMITS: fila_http::Limits = fila_http::Limits {
    head_bytes: sqs::HEAD_BYTES_MAX,
    headers: sqs::HEADERS_MAX,
    body_bytes: BODY_BYTES_MAX,
};

/// Service properties set per account (kept in memory: a restart forgets
/// them, docs/azure.md).
pub(in crate::server) type Properties = Mutex<HashMap<String, Vec<u8>>>;

/// The most accounts whose service properties are kept.
const PROPERTIES_MAX: usize = 1024;

/// How long a queue's retention, read for a Put Message's answer, is
/// taken as current.
const RETENTION_FRESH: Duration = Duration::from_secs(1);
/// The most queues whose retention a loop keeps (past it they are all
/// forgotten).
const RETENTIONS_MAX: usize = 1024;

thread_local! {
    /// Queues' retentions as this loop read them lately, with when.
    static RETENTIONS: RefCell<HashMap<String, (u64, Instant)>> = RefCell::default();
}

/// The time now, ms since the Unix epoch.
pub(in crate::server) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Reads and authenticates a request: its operation, and the account's
/// token (`None`: no tokens, every grant) with its SAS. Signature
/// failures count in `fila_azure_auth_failures_total`.
pub(in crate::server) fn admit(
    metrics: &crate::metrics::Metrics,
    access: &Access,
    head: &Head<'_>,
    body: &[u8],
    peer: SocketAddr,
    tls: bool,
) -> Result<(Call, Principal<Option<TokenId>>), AzureError> {
    let tokens = &access.tokens;
    let keys = |account: &str| -> Option<(Option<TokenId>, Vec<u8>)> {
        if tokens.is_empty() {
            (account == DEV_ACCOUNT).then(|| (None, dev_key()))
        } else {
            tokens
                .by_id(account)
                .map(|(id, secret)| (Some(id), secret.as_bytes().to_vec()))
        }
    };
    let result = fila_azure::admit(head, body, now_ms(), (peer.ip(), tls), keys);
    if let Err(e) = &result {
        if matches!(e.code, Code::AuthenticationFailed) {
            metrics.azure.auth_failures.fetch_add(1, Ordering::Relaxed);
            debug!(%peer, error = %e.message, "Azure request not authenticated");
        }
    }
    result
}

/// Whether the request's failure was its authentication's (counted per
/// address, as the binary protocol's are).
pub(in crate::server) fn failed_auth(e: &AzureError) -> bool {
    e.code == Code::AuthenticationFailed
}

/// The caller of an Azure operation, polled by a loop (see
/// `sqs::LoopCaller`: the same exchange).
pub(in crate::server) struct AzureCaller {
    pub(in crate::server) access: Arc<Access>,
    pub(in crate::server) token: Option<TokenId>,
    pub(in crate::server) host: String,
    pub(in crate::server) properties: Arc<Properties>,
}

impl fila_azure::Caller for AzureCaller {
    async fn call(&self, request: Request, room: usize) -> Result<fila_azure::Answer, AzureError> {
        let grants = Grants {
            tokens: &self.access.tokens,
            token: self.token,
        };
        if let Some(Response::Error(e)) = dispatch::authorize(&grants, &request) {
            return Err(AzureError::new(
                Code::AuthorizationFailure,
                format!(
                    "This request is not authorized to perform this operation: {}",
                    e.message
                ),
            ));
        }
        sqs::leave_call(request, room);
        Ok(match sqs::Answered.await {
            fila_sqs::Answer::Wire(r) => fila_azure::Answer::Wire(r),
            fila_sqs::Answer::Messages(ms) => fila_azure::Answer::Messages(ms),
            fila_sqs::Answer::Engine(e) => fila_azure::Answer::Engine(e),
        })
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn host(&self) -> &str {
        &self.host
    }

    fn properties(&self, account: &str) -> Option<Vec<u8>> {
        let p = self.properties.lock().unwrap_or_else(|p| p.into_inner());
        p.get(account).cloned()
    }

    fn recent_retention(&self, queue: &str) -> Option<u64> {
        RETENTIONS.with(|r| {
            r.borrow()
                .get(queue)
                .filter(|(_, at)| at.elapsed() < RETENTION_FRESH)
                .map(|(ms, _)| *ms)
        })
    }

    fn keep_retention(&self, queue: &str, retention_ms: Option<u64>) {
        RETENTIONS.with(|r| {
            let mut r = r.borrow_mut();
            match retention_ms {
                Some(ms) => {
                    if r.len() >= RETENTIONS_MAX && !r.contains_key(queue) {
                        r.clear();
                    }
                    r.insert(queue.to_owned(), (ms, Instant::now()));
                }
                None => {
                    r.remove(queue);
                }
            }
        });
    }

    fn set_properties(&self, account: &str, xml: Vec<u8>) {
        let mut p = self.properties.lock().unwrap_or_else(|p| p.into_inner());
        if p.len() < PROPERTIES_MAX || p.contains_key(account) {
            p.insert(account.to_owned(), xml);
        }
    }
}
