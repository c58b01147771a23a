//! Configuration: embedded defaults, a TOML file, command-line flags — each
//! overriding the one before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::auth::TokenTable;
use crate::tls::{ClientAuth, TlsFiles};

mod cluster;
mod file;
mod flags;
#[cfg(test)]
mod tests;

pub use cluster::{ClusterConfig, ClusterMember};
pub use flags::HELP;

/// A configuration that could not be used, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this config.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// A flag or setting has a bad value.
    #[error("{0}")]
    Invalid(String),
}

/// What the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The protocol's address.
    pub listen: SocketAddr,
    /// The metrics endpoint's address; `None` turns it off.
    pub metrics_listen: Option<SocketAddr>,
    /// The SQS-compatible HTTP API's address (docs/sqs.md); `None` turns
    /// it off.
    pub sqs_listen: Option<SocketAddr>,
    /// The Azure Queue Storage API's address (docs/azure.md); `None`
    /// turns it off.
    pub azure_listen: Option<SocketAddr>,
    /// The web console's address (docs/console.md); `None` turns it off.
    pub console_listen: Option<SocketAddr>,
    /// Engine shards (one per core by default); on a cluster node, each
    /// partition's leader engine's.
    pub shards: usize,
    /// Event loop threads (one per core by default).
    pub event_loops: usize,
    /// No effect since the event loops serve the SQS API; accepted (and
    /// warned about when set) so that older command lines and files still
    /// start the server.
    pub sqs_threads: usize,
    /// Open connections at most; more are accepted and closed at once.
    pub max_connections: usize,
    /// The largest frame a client may send.
    pub max_frame_bytes: usize,
    /// Answers buffered per connection before the server stops reading it.
    pub max_output_bytes: usize,
    /// Idle connections (nothing read, nothing parked) are closed after
    /// this many seconds; 0 never.
    pub idle_timeout_secs: u64,
    /// How long a shutdown waits for answers to be written (at most 3600).
    pub shutdown_grace_secs: u64,
    /// With tokens configured, a connection that has not authenticated
    /// this many seconds after it opened is closed.
    pub auth_timeout_secs: u64,
    /// Receives one connection may have parked at once.
    pub max_parked_per_connection: usize,
    /// Receives parked on the whole server at once.
    pub max_parked: usize,
    /// Bytes all stored messages may hold (payload, attributes and 192
    /// bytes of bookkeeping each, dead-letter records, channels); puts
    /// past it are refused.
    pub max_stored_bytes: u64,
    /// Queues the server may hold.
    pub max_queues: u64,
    /// Queues whose per-queue series /metrics lists (the first by name);
    /// the rest are counted in `fila_metrics_queues_omitted`.
    pub metrics_max_queues: usize,
    /// Serve /metrics to peers off loopback without a token.
    pub metrics_public: bool,
    /// Log filter (`info`, `debug`, `fila_server=debug,warn`, ...).
    pub log: String,
    /// Access tokens; empty means no authentication, loopback only.
    pub tokens: TokenTable,
    /// Where the log and snapshots live.
    pub data_dir: PathBuf,
    /// When a change is on disk (docs/durability.md).
    pub sync: Sync,
    /// With `sync = "interval"`: how often the log is synced, ms.
    pub sync_interval_ms: u64,
    /// Free space the data directory's disk keeps beyond the next
    /// snapshot's size: below it puts are refused (`resource_exhausted`,
    /// disk full) while receives, deletes and snapshots go on.
    pub disk_reserve_bytes: u64,
    /// The size of a log segment (each is made whole, ahead of need).
    pub segment_bytes: u64,
    /// With `tls_key`: every listener speaks TLS with this certificate
    /// chain (PEM).
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// CAs whose client certificates stand for tokens (PEM).
    pub tls_client_ca: Option<PathBuf>,
    /// With a client CA: whether clients must present a certificate.
    pub tls_client_auth: ClientAuth,
    /// A TLS connection that has not finished its handshake this many
    /// seconds after it opened is closed.
    pub tls_handshake_timeout_secs: u64,
    /// Listen off loopback without TLS (a warning is logged).
    pub allow_plaintext: bool,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// This node's place in a cluster; `None`: a single node.
    pub cluster: Option<ClusterConfig>,
    /// The command line this configuration came from (what a reload reads
    /// again); empty when it was built in code.
    pub args: Vec<String>,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line (the fields of each event).
    Json,
}

impl LogFormat {
    fn parse(field: &str, v: &str) -> Result<LogFormat, ConfigError> {
        match v {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(ConfigError::Invalid(format!(
                "{field}: {v:?} is not one of text, json"
            ))),
        }
    }
}

fn client_auth(field: &str, v: &str) -> Result<ClientAuth, ConfigError> {
    match v {
        "optional" => Ok(ClientAuth::Optional),
        "required" => Ok(ClientAuth::Required),
        _ => Err(ConfigError::Invalid(format!(
            "{field}: {v:?} is not one of optional, required"
        ))),
    }
}

/// When a change is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Every answer that changed something waits for its records to be
    /// synced (group commit).
    Always,
    /// The log is synced every `sync_interval_ms`; answers do not wait.
    Interval,
    /// Nothing is written: a restart loses everything.
    None,
}

impl Sync {
    fn parse(field: &str, v: &str) -> Result<Sync, ConfigError> {
        match v {
            "always" => Ok(Sync::Always),
            "interval" => Ok(Sync::Interval),
            "none" => Ok(Sync::None),
            _ => Err(ConfigError::Invalid(format!(
                "{field}: {v:?} is not one of always, interval, none"
            ))),
        }
    }
}

/// The data directory when none is configured: `$XDG_DATA_HOME/fila`, else
/// `$HOME/.local/share/fila`, else `./fila-data`.
pub fn default_data_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(d) = var("XDG_DATA_HOME") {
        return PathBuf::from(d).join("fila");
    }
    if let Some(h) = var("HOME") {
        return PathBuf::from(h).join(".local/share/fila");
    }
    PathBuf::from("fila-data")
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Half of the machine's memory (from /proc/meminfo), else 1 GiB: the
/// default budget of stored messages.
fn default_stored_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024 / 2)
        })
        .filter(|b| *b > 0)
        .unwrap_or(1 << 30)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7700".parse().expect("literal"),
            metrics_listen: Some("127.0.0.1:7701".parse().expect("literal")),
            sqs_listen: Some("127.0.0.1:9324".parse().expect("literal")),
            azure_listen: Some("127.0.0.1:10001".parse().expect("literal")),
            console_listen: Some("127.0.0.1:7702".parse().expect("literal")),
            shards: cores(),
            event_loops: cores(),
            sqs_threads: 0,
            max_connections: 10_000,
            max_frame_bytes: fila_proto::FRAME_LEN_DEFAULT,
            max_output_bytes: 8 << 20,
            idle_timeout_secs: 300,
            shutdown_grace_secs: 10,
            auth_timeout_secs: 10,
            max_parked_per_connection: 1_000,
            max_parked: 100_000,
            max_stored_bytes: default_stored_bytes(),
            max_queues: 100_000,
            metrics_max_queues: 1_000,
            metrics_public: false,
            log: "info".into(),
            tokens: TokenTable::default(),
            data_dir: default_data_dir(),
            sync: Sync::Always,
            sync_interval_ms: 100,
            disk_reserve_bytes: 128 << 20,
            segment_bytes: 64 << 20,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_client_auth: ClientAuth::Optional,
            tls_handshake_timeout_secs: 10,
            allow_plaintext: false,
            log_format: LogFormat::Text,
            cluster: None,
            args: Vec::new(),
        }
    }
}

fn addr(field: &str, value: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if value.is_empty() || value == "off" {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| {
        ConfigError::Invalid(format!(
            "{field}: {value:?} is not an address like 127.0.0.1:7700"
        ))
    })
}

impl Config {
    /// The whole configuration from a command line: defaults, then the
    /// `--config` file if any, then the flags.
    pub fn from_args(args: &[String]) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(i) = args.iter().position(|a| a == "--config") {
            let path = args
                .get(i + 1)
                .ok_or_else(|| ConfigError::Invalid("--config needs a value".into()))?;
            config.merge_file(Path::new(path))?;
        }
        config.merge_flags(args)?;
        config.validate()?;
        config.args = args.to_vec();
        Ok(config)
    }

    /// The TLS files, when TLS is configured.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
            client_auth: self.tls_client_auth,
        })
    }

    /// Every listener's address, by its setting's name.
    fn listeners(&self) -> [(&'static str, Option<SocketAddr>); 5] {
        [
            ("listen", Some(self.listen)),
            ("sqs_listen", self.sqs_listen),
            ("azure_listen", self.azure_listen),
            ("metrics_listen", self.metrics_listen),
            ("console_listen", self.console_listen),
        ]
    }

    /// The TLS settings' rules, and the rule that a listener off loopback
    /// speaks TLS unless `allow_plaintext`.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ConfigError::Invalid(
                "tls_cert and tls_key go together: set both, or neither".into(),
            ));
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return Err(ConfigError::Invalid(
                "tls_client_ca needs TLS: set tls_cert and tls_key too".into(),
            ));
        }
        if self.tls_client_auth == ClientAuth::Required && self.tls_client_ca.is_none() {
            return Err(ConfigError::Invalid(
                "tls_client_auth = \"required\" needs tls_client_ca".into(),
            ));
        }
        if !(1..=300).contains(&self.tls_handshake_timeout_secs) {
            return Err(ConfigError::Invalid(format!(
                "tls_handshake_timeout_secs must be 1..=300 (got {})",
                self.tls_handshake_timeout_secs
            )));
        }
        if self.tls_cert.is_none() && !self.allow_plaintext {
            for (name, a) in self.listeners() {
                if let Some(a) = a.filter(|a| !a.ip().is_loopback()) {
                    return Err(ConfigError::Invalid(format!(
                        "{name} {a}: off loopback fila speaks TLS (set tls_cert and tls_key), or set allow_plaintext = true"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Listeners off loopback in clear text (allowed by `allow_plaintext`;
    /// the server warns of each at start).
    pub fn plaintext_off_loopback(&self) -> Vec<(&'static str, SocketAddr)> {
        if self.tls_cert.is_some() {
            return Vec::new();
        }
        self.listeners()
            .into_iter()
            .filter_map(|(n, a)| Some((n, a.filter(|a| !a.ip().is_loopback())?)))
            .collect()
    }

    /// Checks values that have no meaning, and the rule that a server
    /// without tokens listens on loopback only.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        if self.shards == 0 {
            self.shards = cores();
        }
        if self.event_loops == 0 {
            self.event_loops = cores();
        }
        if self.shards > 1024 || self.event_loops > 1024 {
            return Err(ConfigError::Invalid(
                "shards and event_loops are at most 1024".into(),
            ));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "max_connections must be at least 1".into(),
            ));
        }
        if self.max_frame_bytes < 1024 || self.max_frame_bytes > fila_proto::FRAME_LEN_LIMIT {
            return Err(ConfigError::Invalid(format!(
                "max_frame_bytes must be 1024..={}",
                fila_proto::FRAME_LEN_LIMIT
            )));
        }
        if self.max_output_bytes < crate::limits::OUTPUT_BYTES_MIN {
            return Err(ConfigError::Invalid(format!(
                "max_output_bytes must be at least {} (room for two of the largest answers)",
                crate::limits::OUTPUT_BYTES_MIN
            )));
        }
        if self.sync == Sync::Interval && !(1..=60_000).contains(&self.sync_interval_ms) {
            return Err(ConfigError::Invalid(format!(
                "sync_interval_ms must be 1..=60000 (got {})",
                self.sync_interval_ms
            )));
        }
        if !(1 << 20..=1 << 30).contains(&self.segment_bytes) {
            return Err(ConfigError::Invalid(format!(
                "segment_bytes must be 1 MiB..=1 GiB (got {})",
                self.segment_bytes
            )));
        }
        if self.sync != Sync::None && self.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid(
                "data_dir: a durable server needs a directory (or sync = \"none\")".into(),
            ));
        }
        let bounded = [
            ("shutdown_grace_secs", self.shutdown_grace_secs, 3_600),
            ("idle_timeout_secs", self.idle_timeout_secs, 86_400 * 365),
            ("auth_timeout_secs", self.auth_timeout_secs, 3_600),
        ];
        for (name, value, max) in bounded {
            if value > max {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be 0..={max} (got {value})"
                )));
            }
        }
        if self.auth_timeout_secs == 0 {
            return Err(ConfigError::Invalid(
                "auth_timeout_secs must be at least 1".into(),
            ));
        }
        for (name, value) in [
            (
                "max_parked_per_connection",
                self.max_parked_per_connection as u64,
            ),
            ("max_parked", self.max_parked as u64),
            ("max_queues", self.max_queues),
            ("max_stored_bytes", self.max_stored_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid(format!("{name} must be at least 1")));
            }
        }
        if self.tokens.is_empty() {
            if let Some(m) = self.metrics_listen.filter(|m| !m.ip().is_loopback()) {
                return Err(ConfigError::Invalid(format!(
                    "metrics_listen {m}: without tokens metrics are served on loopback only (add [[tokens]] to the config)"
                )));
            }
        }
        if self.tokens.is_empty() {
            if let Some(a) = self.sqs_listen.filter(|a| !a.ip().is_loopback()) {
                return Err(ConfigError::Invalid(format!(
                    "sqs_listen {a}: without tokens the SQS API listens on loopback only (add [[tokens]] to the config)"
                )));
            }
        }
        if self.tokens.is_empty() {
            if let Some(a) = self.azure_listen.filter(|a| !a.ip().is_loopback()) {
                return Err(ConfigError::Invalid(format!(
                    "azure_listen {a}: without tokens the Azure Queue API listens on loopback only (add [[tokens]] to the config)"
                )));
            }
        }
        if self.tokens.is_empty() {
            if let Some(a) = self.console_listen.filter(|a| !a.ip().is_loopback()) {
                return Err(ConfigError::Invalid(format!(
                    "console_listen {a}: without tokens the console listens on loopback only (add [[tokens]] to the config)"
                )));
            }
        }
        if self.tokens.is_empty() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "listen {}: without tokens the server listens on loopback only (add [[tokens]] to the config)",
                self.listen
            )));
        }
        self.validate_cluster()?;
        self.validate_tls()
    }
}
