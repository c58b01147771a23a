//! The TOML configuration file: its keys (the flags', with underscores)
//! and tokens, applied over a configuration.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{addr, client_auth, Config, ConfigError, LogFormat, Sync};
use crate::auth::{Grant, Permission};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    metrics_listen: Option<String>,
    sqs_listen: Option<String>,
    azure_listen: Option<String>,
    console_listen: Option<String>,
    shards: Option<usize>,
    event_loops: Option<usize>,
    sqs_threads: Option<usize>,
    max_connections: Option<usize>,
    max_frame_bytes: Option<usize>,
    max_output_bytes: Option<usize>,
    idle_timeout_secs: Option<u64>,
    shutdown_grace_secs: Option<u64>,
    auth_timeout_secs: Option<u64>,
    max_parked_per_connection: Option<usize>,
    max_parked: Option<usize>,
    max_stored_bytes: Option<u64>,
    max_queues: Option<u64>,
    metrics_max_queues: Option<usize>,
    metrics_public: Option<bool>,
    log: Option<String>,
    data_dir: Option<String>,
    sync: Option<String>,
    sync_interval_ms: Option<u64>,
    disk_reserve_bytes: Option<u64>,
    segment_bytes: Option<u64>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    tls_client_ca: Option<String>,
    tls_client_auth: Option<String>,
    tls_handshake_timeout_secs: Option<u64>,
    allow_plaintext: Option<bool>,
    log_format: Option<String>,
    #[serde(default)]
    tokens: Vec<FileToken>,
    cluster: Option<super::cluster::FileCluster>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    /// The access key id that names the token in SigV4-signed SQS requests.
    id: Option<String>,
    /// The secret a client presents (may be left out when `certificates`
    /// names the client certificates that stand for it).
    token: Option<String>,
    /// Names (DNS or URI subject alternative names, or the subject's
    /// common name) of client certificates that stand for this token.
    #[serde(default)]
    certificates: Vec<String>,
    #[serde(default)]
    grants: Vec<FileGrant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGrant {
    /// A queue name, or a prefix ending in `*`.
    queues: String,
    permissions: Vec<String>,
}

impl Config {
    /// Applies a TOML file over `self`.
    pub fn merge_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        self.merge_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Applies TOML text over `self`.
    pub fn merge_toml(&mut self, text: &str) -> Result<(), ConfigError> {
        let f: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<text>".into(),
            message: e.to_string().replace('\n', " "),
        })?;
        if let Some(v) = f.listen {
            self.listen = addr("listen", &v)?.ok_or_else(|| {
                ConfigError::Invalid("listen: the server needs an address".into())
            })?;
        }
        if let Some(v) = f.sqs_listen {
            self.sqs_listen = addr("sqs_listen", &v)?;
        }
        if let Some(v) = f.azure_listen {
            self.azure_listen = addr("azure_listen", &v)?;
        }
        if let Some(v) = f.console_listen {
            self.console_listen = addr("console_listen", &v)?;
        }
        if let Some(c) = f.cluster {
            self.cluster = Some(c.into_config()?);
        }
        if let Some(v) = f.metrics_listen {
            self.metrics_listen = addr("metrics_listen", &v)?;
        }
        if let Some(v) = f.shards {
            self.shards = v;
        }
        if let Some(v) = f.event_loops {
            self.event_loops = v;
        }
        if let Some(v) = f.sqs_threads {
            self.sqs_threads = v;
        }
        if let Some(v) = f.max_connections {
            self.max_connections = v;
        }
        if let Some(v) = f.max_frame_bytes {
            self.max_frame_bytes = v;
        }
        if let Some(v) = f.max_output_bytes {
            self.max_output_bytes = v;
        }
        if let Some(v) = f.idle_timeout_secs {
            self.idle_timeout_secs = v;
        }
        if let Some(v) = f.shutdown_grace_secs {
            self.shutdown_grace_secs = v;
        }
        if let Some(v) = f.auth_timeout_secs {
            self.auth_timeout_secs = v;
        }
        if let Some(v) = f.max_parked_per_connection {
            self.max_parked_per_connection = v;
        }
        if let Some(v) = f.max_parked {
            self.max_parked = v;
        }
        if let Some(v) = f.max_stored_bytes {
            self.max_stored_bytes = v;
        }
        if let Some(v) = f.max_queues {
            self.max_queues = v;
        }
        if let Some(v) = f.metrics_max_queues {
            self.metrics_max_queues = v;
        }
        if let Some(v) = f.metrics_public {
            self.metrics_public = v;
        }
        if let Some(v) = f.log {
            self.log = v;
        }
        if let Some(v) = f.data_dir {
            self.data_dir = PathBuf::from(v);
        }
        if let Some(v) = f.sync {
            self.sync = Sync::parse("sync", &v)?;
        }
        if let Some(v) = f.sync_interval_ms {
            self.sync_interval_ms = v;
        }
        if let Some(v) = f.disk_reserve_bytes {
            self.disk_reserve_bytes = v;
        }
        if let Some(v) = f.segment_bytes {
            self.segment_bytes = v;
        }
        let path = |v: String| Some(PathBuf::from(v));
        if let Some(v) = f.tls_cert {
            self.tls_cert = path(v);
        }
        if let Some(v) = f.tls_key {
            self.tls_key = path(v);
        }
        if let Some(v) = f.tls_client_ca {
            self.tls_client_ca = path(v);
        }
        if let Some(v) = f.tls_client_auth {
            self.tls_client_auth = client_auth("tls_client_auth", &v)?;
        }
        if let Some(v) = f.tls_handshake_timeout_secs {
            self.tls_handshake_timeout_secs = v;
        }
        if let Some(v) = f.allow_plaintext {
            self.allow_plaintext = v;
        }
        if let Some(v) = f.log_format {
            self.log_format = LogFormat::parse("log_format", &v)?;
        }
        for t in f.tokens {
            match &t.token {
                Some(secret) if secret.trim().is_empty() => {
                    return Err(ConfigError::Invalid(
                        "tokens: a token may not be empty".into(),
                    ));
                }
                None if t.certificates.is_empty() => {
                    return Err(ConfigError::Invalid(
                        "tokens: each needs a token, or certificates naming the client certificates that stand for it".into(),
                    ));
                }
                None if t.id.is_some() => {
                    return Err(ConfigError::Invalid(
                        "tokens: an id needs a token (the secret SigV4 signs with)".into(),
                    ));
                }
                _ => {}
            }
            if let Some(c) = t
                .certificates
                .iter()
                .find(|c| c.is_empty() || c.len() > 1024)
            {
                return Err(ConfigError::Invalid(format!(
                    "tokens: certificate name {c:?} must be 1 to 1024 characters"
                )));
            }
            let mut grants = Vec::new();
            for g in t.grants {
                let mut perms = Vec::new();
                for p in &g.permissions {
                    perms.push(Permission::parse(p).ok_or_else(|| {
                        ConfigError::Invalid(format!(
                            "tokens: permission {p:?} is not one of send, receive, manage"
                        ))
                    })?);
                }
                grants.push(Grant::new(&g.queues, &perms));
            }
            if let Some(id) = &t.id {
                let ok = (1..=128).contains(&id.len())
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !ok {
                    return Err(ConfigError::Invalid(format!(
                        "tokens: id {id:?} must be 1 to 128 letters, digits, '-', '_' or '.'"
                    )));
                }
                if self.tokens.by_id(id).is_some() {
                    return Err(ConfigError::Invalid(format!(
                        "tokens: id {id:?} names two tokens"
                    )));
                }
            }
            self.tokens.add_entry(t.id, t.token, t.certificates, grants);
        }
        Ok(())
    }
}
