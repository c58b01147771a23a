//! Who sends an SQS request: with tokens, a SigV4 signature checked
//! against the token its access key id names.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use fila_sqs::Head;
use tracing::{debug, warn};

use super::error::{Kind, SqsError};
use super::gateway::Gateway;
use super::sigv4;
use crate::auth::TokenId;
use crate::guard::AuthGuard;
use crate::live::Access;

/// Who signed the request: without tokens anyone (`None`, whatever the
/// credentials); with tokens a valid SigV4 signature by a token's access
/// key id, or an error. Failures count against the peer's address as on
/// the binary protocol; a blocked address is refused before any check.
pub(super) fn authenticate(
    gateway: &Gateway,
    access: &Access,
    guard: &std::sync::Mutex<AuthGuard>,
    head: &Head<'_>,
    body: &[u8],
    peer: SocketAddr,
) -> Result<Option<TokenId>, SqsError> {
    let tokens = &access.tokens;
    if tokens.is_empty() {
        return Ok(None);
    }
    let now = Instant::now();
    let blocked = guard
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .blocked(peer.ip(), now);
    if let Some(left) = blocked {
        return Err(SqsError::new(
            Kind::RequestThrottled,
            format!(
                "Too many failed authentications from this address; try again in {} s.",
                left.as_secs().max(1)
            ),
        ));
    }
    let result = check_signature(tokens, head, body);
    if let Err(e) = &result {
        gateway
            .shared
            .metrics
            .sqs
            .auth_failures
            .fetch_add(1, Ordering::Relaxed);
        let (was, block) = {
            let mut g = guard.lock().unwrap_or_else(|p| p.into_inner());
            (
                g.blocked(peer.ip(), now).is_some(),
                g.failed(peer.ip(), now),
            )
        };
        if let (Some(block), false) = (block, was) {
            warn!(
                %peer,
                block_secs = block.as_secs(),
                "too many failed SQS authentications: requests from this address are refused for a while"
            );
        }
        debug!(%peer, error = %e.message, "SQS request not authenticated");
    }
    result.map(Some)
}

fn check_signature(
    tokens: &crate::auth::TokenTable,
    head: &Head<'_>,
    body: &[u8],
) -> Result<TokenId, SqsError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    sigv4::check(head, body, now, |key_id| tokens.by_id(key_id))
}
