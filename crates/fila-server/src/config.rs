//! Configuration: embedded defaults, a TOML file, command-line flags — each
//! overriding the one before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::auth::TokenTable;

mod file;

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
    /// Engine shards (one per core by default).
    pub shards: usize,
    /// Event loop threads (one per core by default).
    pub event_loops: usize,
    /// Threads of the SQS API, each a runtime of its own (0: half the
    /// cores, at least one).
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
    /// Applies command-line flags (after the program name) over `self`.
    /// Returns the config file named by `--config`, which the caller merges
    /// first and then applies the flags again over.
    pub fn merge_flags(&mut self, args: &[String]) -> Result<(), ConfigError> {
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| ConfigError::Invalid(format!("{name} needs a value")))
            };
            let number = |name: &str, v: String| {
                v.parse::<u64>().map_err(|_| {
                    ConfigError::Invalid(format!("{name}: {v:?} is not a whole number"))
                })
            };
            match flag.as_str() {
                "--config" => {
                    value("--config")?;
                }
                "--listen" => {
                    let v = value("--listen")?;
                    self.listen = addr("--listen", &v)?
                        .ok_or_else(|| ConfigError::Invalid("--listen needs an address".into()))?;
                }
                "--metrics-listen" => {
                    let v = value("--metrics-listen")?;
                    self.metrics_listen = addr("--metrics-listen", &v)?;
                }
                "--sqs-listen" => {
                    let v = value("--sqs-listen")?;
                    self.sqs_listen = addr("--sqs-listen", &v)?;
                }
                "--shards" => self.shards = number("--shards", value("--shards")?)? as usize,
                "--event-loops" => {
                    self.event_loops = number("--event-loops", value("--event-loops")?)? as usize
                }
                "--sqs-threads" => {
                    self.sqs_threads = number("--sqs-threads", value("--sqs-threads")?)? as usize
                }
                "--max-connections" => {
                    self.max_connections =
                        number("--max-connections", value("--max-connections")?)? as usize
                }
                "--max-frame-bytes" => {
                    self.max_frame_bytes =
                        number("--max-frame-bytes", value("--max-frame-bytes")?)? as usize
                }
                "--max-output-bytes" => {
                    self.max_output_bytes =
                        number("--max-output-bytes", value("--max-output-bytes")?)? as usize
                }
                "--idle-timeout-secs" => {
                    self.idle_timeout_secs =
                        number("--idle-timeout-secs", value("--idle-timeout-secs")?)?
                }
                "--shutdown-grace-secs" => {
                    self.shutdown_grace_secs =
                        number("--shutdown-grace-secs", value("--shutdown-grace-secs")?)?
                }
                "--auth-timeout-secs" => {
                    self.auth_timeout_secs =
                        number("--auth-timeout-secs", value("--auth-timeout-secs")?)?
                }
                "--max-parked-per-connection" => {
                    self.max_parked_per_connection = number(
                        "--max-parked-per-connection",
                        value("--max-parked-per-connection")?,
                    )? as usize
                }
                "--max-parked" => {
                    self.max_parked = number("--max-parked", value("--max-parked")?)? as usize
                }
                "--max-stored-bytes" => {
                    self.max_stored_bytes =
                        number("--max-stored-bytes", value("--max-stored-bytes")?)?
                }
                "--max-queues" => self.max_queues = number("--max-queues", value("--max-queues")?)?,
                "--metrics-max-queues" => {
                    self.metrics_max_queues =
                        number("--metrics-max-queues", value("--metrics-max-queues")?)? as usize
                }
                "--metrics-public" => self.metrics_public = true,
                "--log" => self.log = value("--log")?,
                "--data-dir" => self.data_dir = PathBuf::from(value("--data-dir")?),
                "--sync" => self.sync = Sync::parse("--sync", &value("--sync")?)?,
                "--sync-interval-ms" => {
                    self.sync_interval_ms =
                        number("--sync-interval-ms", value("--sync-interval-ms")?)?
                }
                "--disk-reserve-bytes" => {
                    self.disk_reserve_bytes =
                        number("--disk-reserve-bytes", value("--disk-reserve-bytes")?)?
                }
                "--segment-bytes" => {
                    self.segment_bytes = number("--segment-bytes", value("--segment-bytes")?)?
                }
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "unknown flag {other:?} (see fila-server --help)"
                    )))
                }
            }
        }
        Ok(())
    }

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
        Ok(config)
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
        if self.sqs_threads == 0 {
            self.sqs_threads = cores().div_ceil(2);
        }
        if self.shards > 1024 || self.event_loops > 1024 || self.sqs_threads > 1024 {
            return Err(ConfigError::Invalid(
                "shards, event_loops and sqs_threads are at most 1024".into(),
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
        if self.tokens.is_empty() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "listen {}: without tokens the server listens on loopback only (add [[tokens]] to the config)",
                self.listen
            )));
        }
        Ok(())
    }
}

/// The text of `fila-server --help`.
pub const HELP: &str = "\
fila-server: the fila message-queue server

usage: fila-server [--config FILE] [flags]

With no arguments it listens on 127.0.0.1:7700 (the SQS-compatible API on
127.0.0.1:9324, metrics on 127.0.0.1:7701) with one shard and one event
loop per core. Flags override the file.

  --config FILE             TOML file (keys as the flags, with underscores)
  --listen ADDR             protocol address        [127.0.0.1:7700]
  --metrics-listen ADDR     Prometheus /metrics, or \"off\" [127.0.0.1:7701]
  --sqs-listen ADDR         the SQS-compatible HTTP API, or \"off\"
                            [127.0.0.1:9324]
  --shards N                engine shards           [cores]
  --event-loops N           event loop threads      [cores]
  --sqs-threads N           threads of the SQS API  [half the cores]
  --max-connections N       open connections        [10000]
  --max-frame-bytes N       largest frame accepted  [25165824]
  --max-output-bytes N      answers buffered (and room held for parked
                            receives) per connection before it is
                            throttled               [8388608]
  --idle-timeout-secs N     close idle connections, 0 never [300]
  --auth-timeout-secs N     with tokens, close connections not
                            authenticated this long after opening [10]
  --shutdown-grace-secs N   how long a stop waits for answers to go out [10]
  --max-parked-per-connection N
                            receives one connection may park [1000]
  --max-parked N            receives parked on the server    [100000]
  --max-stored-bytes N      bytes all stored messages may hold (payload,
                            attributes, 192 per message, dead-letter
                            records, channels)  [half the memory]
  --max-queues N            queues on the server             [100000]
  --metrics-max-queues N    queues listed one by one in /metrics [1000]
  --metrics-public          serve /metrics off loopback without a token
  --data-dir DIR            where the log and snapshots live (made 0700,
                            its files 0600)
                            [$XDG_DATA_HOME/fila, ~/.local/share/fila,
                            or ./fila-data]
  --sync MODE               always: an answer waits until its change is
                            on disk (group commit); interval: the log is
                            synced every --sync-interval-ms and answers
                            do not wait; none: memory only, no data
                            directory used or locked  [always]
  --sync-interval-ms N      with --sync interval          [100]
  --disk-reserve-bytes N    free space the data directory's disk keeps
                            beyond the next snapshot's size; below it
                            puts are refused (disk full)  [134217728]
  --segment-bytes N         log segment size, 1 MiB..1 GiB [67108864]
  --check-data DIR          check a data directory and exit (0: it
                            would start; 1: it would not, and why)
  --log FILTER              log filter              [info]
  --help, --version
";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_listen_on_loopback_7700() {
        let c = Config::from_args(&[]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7700");
        assert_eq!(c.metrics_listen.unwrap().to_string(), "127.0.0.1:7701");
        assert!(c.shards >= 1 && c.event_loops >= 1);
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let mut c = Config::default();
        c.merge_toml(
            "listen = \"127.0.0.1:9000\"\nmax_connections = 5\nmetrics_listen = \"off\"\n",
        )
        .unwrap();
        c.merge_flags(&args(&["--max-connections", "7"])).unwrap();
        assert_eq!(
            (c.listen.port(), c.max_connections, c.metrics_listen),
            (9000, 7, None)
        );
    }

    #[test]
    fn durability_settings_come_from_the_file_and_the_flags() {
        let c = Config::from_args(&[]).unwrap();
        assert_eq!(c.sync, Sync::Always);
        assert!(c.data_dir.ends_with("fila") || c.data_dir.ends_with("fila-data"));
        let mut c = Config::default();
        c.merge_toml("sync = \"interval\"\nsync_interval_ms = 20\ndata_dir = \"/x\"\n")
            .unwrap();
        assert_eq!(
            (c.sync, c.sync_interval_ms, c.data_dir.to_str()),
            (Sync::Interval, 20, Some("/x"))
        );
        c.merge_flags(&args(&["--sync", "none", "--data-dir", "/y"]))
            .unwrap();
        assert_eq!((c.sync, c.data_dir.to_str()), (Sync::None, Some("/y")));
        let e = Config::from_args(&args(&["--sync", "sometimes"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--sync: \"sometimes\" is not one of always, interval, none"
        );
        let e = Config::from_args(&args(&["--sync", "interval", "--sync-interval-ms", "0"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sync_interval_ms must be 1..=60000"), "{e}");
    }

    #[test]
    fn bad_input_is_one_clear_line() {
        let e = Config::from_args(&args(&["--shards", "many"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--shards: \"many\" is not a whole number");
        let e = Config::from_args(&args(&["--frobnicate"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown flag"), "{e}");
        let mut c = Config::default();
        let e = c.merge_toml("lisen = 1").unwrap_err().to_string();
        assert!(e.contains("lisen") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn without_tokens_only_loopback_is_allowed() {
        let e = Config::from_args(&args(&["--listen", "0.0.0.0:7700"])).unwrap_err();
        assert!(e.to_string().contains("loopback only"));
        let mut c = Config::default();
        c.merge_toml("listen = \"0.0.0.0:7700\"\n[[tokens]]\ntoken = \"t\"\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"send\"]\n")
            .unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn metrics_off_loopback_need_tokens_and_tokens_may_not_be_empty() {
        let e = Config::from_args(&args(&["--metrics-listen", "0.0.0.0:7701"])).unwrap_err();
        assert!(
            e.to_string()
                .contains("metrics are served on loopback only"),
            "{e}"
        );
        let mut c = Config::default();
        let e = c.merge_toml("[[tokens]]\ntoken = \"\"\n").unwrap_err();
        assert!(e.to_string().contains("may not be empty"), "{e}");
    }

    #[test]
    fn values_that_would_overflow_a_timer_are_refused() {
        for flag in [
            "--shutdown-grace-secs",
            "--idle-timeout-secs",
            "--auth-timeout-secs",
        ] {
            let e = Config::from_args(&args(&[flag, &u64::MAX.to_string()])).unwrap_err();
            assert!(e.to_string().contains("must be 0..="), "{flag}: {e}");
        }
        let mut c = Config::default();
        let e = c
            .merge_toml(&format!("shutdown_grace_secs = {}\n", i64::MAX))
            .and_then(|()| c.validate())
            .unwrap_err();
        assert!(e.to_string().contains("shutdown_grace_secs"), "{e}");
        let e = Config::from_args(&args(&["--max-output-bytes", "65536"])).unwrap_err();
        assert!(e.to_string().contains("max_output_bytes"), "{e}");
    }

    #[test]
    fn unknown_permissions_are_refused() {
        let mut c = Config::default();
        let e = c
            .merge_toml("[[tokens]]\ntoken = \"t\"\n[[tokens.grants]]\nqueues = \"a\"\npermissions = [\"admin\"]\n")
            .unwrap_err();
        assert!(e.to_string().contains("\"admin\""));
    }

    #[test]
    fn token_ids_are_checked_and_unique() {
        let mut c = Config::default();
        c.merge_toml("[[tokens]]\nid = \"app-1\"\ntoken = \"t\"\n")
            .unwrap();
        assert_eq!(c.tokens.by_id("app-1").map(|(_, s)| s), Some("t"));
        for bad in ["", "has space", "slash/no"] {
            let mut c = Config::default();
            let e = c
                .merge_toml(&format!("[[tokens]]\nid = {bad:?}\ntoken = \"t\"\n"))
                .unwrap_err();
            assert!(e.to_string().contains("tokens: id"), "{bad}: {e}");
        }
        let mut c = Config::default();
        let e = c
            .merge_toml(
                "[[tokens]]\nid = \"a\"\ntoken = \"t\"\n[[tokens]]\nid = \"a\"\ntoken = \"u\"\n",
            )
            .unwrap_err();
        assert!(e.to_string().contains("names two tokens"), "{e}");
    }

    #[test]
    fn sqs_threads_default_to_half_the_cores() {
        let c = Config::from_args(&args(&["--sqs-threads", "3"])).unwrap();
        assert_eq!(c.sqs_threads, 3);
        let c = Config::from_args(&args(&[])).unwrap();
        assert_eq!(c.sqs_threads, cores().div_ceil(2));
        assert!(Config::from_args(&args(&["--sqs-threads", "2000"])).is_err());
    }
}
