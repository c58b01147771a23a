//! What a reload changes while the server runs: the tokens (with their
//! grants and certificate names) and the TLS configuration (certificate,
//! key, client CA), swapped whole.
//!
//! Readers take the current [`Access`] (an `Arc`) and keep it; each event
//! loop checks the generation (one atomic load) at each connection's turn
//! and takes the new one when it moved, so a request is always checked
//! against the tokens of one reload, and a connection whose token is gone
//! is told so at its next request. A reload that fails (a file that does
//! not parse, a certificate that does not match its key) changes nothing
//! and says why in one line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tracing::{info, warn};

use crate::auth::TokenTable;
use crate::config::Config;
use crate::tls::{self, TlsError};

/// The tokens and TLS configuration of one reload.
pub struct Access {
    /// Which reload this is (0: the start).
    pub generation: u64,
    /// The tokens.
    pub tokens: TokenTable,
    /// The TLS configuration new connections take, when TLS is on.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Why a reload changed nothing, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The configuration could not be read again.
    #[error("reload: {0}; the configuration in use is kept")]
    Config(#[from] crate::ConfigError),
    /// A TLS file could not be used.
    #[error("reload: {0}; the configuration in use is kept")]
    Tls(#[from] TlsError),
    /// The change needs a restart.
    #[error("reload: {0} needs a restart; the configuration in use is kept")]
    NeedsRestart(&'static str),
}

/// What a reload put in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Its generation.
    pub generation: u64,
    /// Tokens now configured.
    pub tokens: usize,
    /// Whether TLS is on.
    pub tls: bool,
}

/// The current [`Access`], swapped by reloads.
pub struct Live {
    generation: AtomicU64,
    current: RwLock<Arc<Access>>,
    /// The configuration of the last reload (reloads one at a time).
    config: Mutex<Config>,
    /// A cluster node's TLS towards its peers, reloaded with the rest.
    #[cfg(not(loom))]
    peer_tls: Mutex<Option<fila_cluster::peer::PeerTls>>,
}

impl Live {
    /// The access of `config`: its tokens, its TLS files read.
    pub fn new(config: &Config) -> Result<Live, TlsError> {
        let tls = match config.tls_files() {
            Some(files) => Some(tls::server_config(&files)?),
            None => None,
        };
        Ok(Live {
            generation: AtomicU64::new(0),
            current: RwLock::new(Arc::new(Access {
                generation: 0,
                tokens: config.tokens.clone(),
                tls,
            })),
            config: Mutex::new(config.clone()),
            #[cfg(not(loom))]
            peer_tls: Mutex::new(None),
        })
    }

    /// A cluster node's TLS towards its peers: a reload reads the node's
    /// certificate and the cluster's CA again and puts them in place for
    /// the peer connections made after it.
    #[cfg(not(loom))]
    pub fn set_peer_tls(&self, tls: fila_cluster::peer::PeerTls) {
        *self.peer_tls.lock().unwrap_or_else(|e| e.into_inner()) = Some(tls);
    }

    /// The generation of the current access.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current access.
    pub fn load(&self) -> Arc<Access> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the configuration again (its command line and file; without
    /// one, the same TLS files) and puts its tokens and TLS configuration
    /// in place, or changes nothing and says why.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let mut last = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = if last.args.is_empty() {
            last.clone()
        } else {
            Config::from_args(&last.args)?
        };
        if fresh.tokens.is_empty() != last.tokens.is_empty() {
            return Err(ReloadError::NeedsRestart(
                "turning authentication on or off (tokens configured or none)",
            ));
        }
        if fresh.tls_cert.is_some() != last.tls_cert.is_some() {
            return Err(ReloadError::NeedsRestart("turning TLS on or off"));
        }
        let tls = match fresh.tls_files() {
            Some(files) => Some(tls::server_config(&files)?),
            None => None,
        };
        let peer = match (
            &fresh.tls_cert,
            &fresh.tls_key,
            fresh.cluster.as_ref().and_then(|c| c.tls_ca.as_ref()),
        ) {
            (Some(cert), Some(key), Some(ca)) => Some(tls::peer_configs(cert, key, ca)?),
            _ => None,
        };
        #[cfg(loom)]
        drop(peer);
        let mut others = fresh.clone();
        others.tokens = last.tokens.clone();
        (others.tls_cert, others.tls_key) = (last.tls_cert.clone(), last.tls_key.clone());
        (others.tls_client_ca, others.tls_client_auth) =
            (last.tls_client_ca.clone(), last.tls_client_auth);
        if let (Some(o), Some(l)) = (others.cluster.as_mut(), last.cluster.as_ref()) {
            o.tls_ca = l.tls_ca.clone();
        }
        if others != *last {
            warn!("reload: only tokens and TLS files change while running; other settings changed in the configuration take effect at the next restart");
        }
        let generation = self.generation() + 1;
        let reloaded = Reloaded {
            generation,
            tokens: fresh.tokens.len(),
            tls: tls.is_some(),
        };
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Access {
            generation,
            tokens: fresh.tokens.clone(),
            tls,
        });
        self.generation.store(generation, Ordering::Release);
        #[cfg(not(loom))]
        if let (Some(handle), Some((server, client))) = (
            self.peer_tls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref(),
            peer,
        ) {
            handle.set(server, client);
        }
        // Other settings stay as they were started.
        last.tokens = fresh.tokens;
        (last.tls_cert, last.tls_key) = (fresh.tls_cert, fresh.tls_key);
        (last.tls_client_ca, last.tls_client_auth) = (fresh.tls_client_ca, fresh.tls_client_auth);
        if let (Some(l), Some(f)) = (last.cluster.as_mut(), fresh.cluster) {
            l.tls_ca = f.tls_ca;
        }
        info!(
            generation,
            tokens = reloaded.tokens,
            tls = reloaded.tls,
            "reloaded tokens and TLS files"
        );
        Ok(reloaded)
    }
}
