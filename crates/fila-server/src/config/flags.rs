//! Command-line flags: each sets the configuration key of its name (with
//! dashes), over the file's.

use std::path::PathBuf;

use super::{addr, client_auth, Config, ConfigError, LogFormat, Sync};

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
                "--azure-listen" => {
                    let v = value("--azure-listen")?;
                    self.azure_listen = addr("--azure-listen", &v)?;
                }
                "--console-listen" => {
                    let v = value("--console-listen")?;
                    self.console_listen = addr("--console-listen", &v)?;
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
                "--tls-cert" => self.tls_cert = Some(PathBuf::from(value("--tls-cert")?)),
                "--tls-key" => self.tls_key = Some(PathBuf::from(value("--tls-key")?)),
                "--tls-client-ca" => {
                    self.tls_client_ca = Some(PathBuf::from(value("--tls-client-ca")?))
                }
                "--tls-client-auth" => {
                    self.tls_client_auth =
                        client_auth("--tls-client-auth", &value("--tls-client-auth")?)?
                }
                "--tls-handshake-timeout-secs" => {
                    self.tls_handshake_timeout_secs = number(
                        "--tls-handshake-timeout-secs",
                        value("--tls-handshake-timeout-secs")?,
                    )?
                }
                "--allow-plaintext" => self.allow_plaintext = true,
                "--log-format" => {
                    self.log_format = LogFormat::parse("--log-format", &value("--log-format")?)?
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
}

/// The text of `fila-server --help`.
pub const HELP: &str = "\
fila-server: the fila message-queue server

usage: fila-server [--config FILE] [flags]

With no arguments it listens on 127.0.0.1:7700 (the SQS-compatible API on
127.0.0.1:9324, metrics on 127.0.0.1:7701, the web console on
127.0.0.1:7702) with one shard and one event
loop per core. Flags override the file.

  --config FILE             TOML file (keys as the flags, with underscores)
  --listen ADDR             protocol address        [127.0.0.1:7700]
  --metrics-listen ADDR     Prometheus /metrics, or \"off\" [127.0.0.1:7701]
  --sqs-listen ADDR         the SQS-compatible HTTP API, or \"off\"
                            [127.0.0.1:9324]
  --azure-listen ADDR       the Azure Queue Storage API (docs/azure.md),
                            or \"off\"                [127.0.0.1:10001]
  --console-listen ADDR     the web console (docs/console.md), or \"off\"
                            [127.0.0.1:7702]
  --shards N                engine shards (on a cluster, each
                            partition's engine's)   [cores]
  --event-loops N           event loop threads      [cores]
  --sqs-threads N           no effect (the event loops serve the SQS API)
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
  --tls-cert FILE           with --tls-key: every listener speaks TLS
                            with this certificate chain (PEM)
  --tls-key FILE            its private key (PEM)
  --tls-client-ca FILE      client certificates these CAs signed stand
                            for the tokens whose `certificates` name them
  --tls-client-auth MODE    optional: a client may still use a token;
                            required: no certificate, no connection
                            [optional]
  --tls-handshake-timeout-secs N
                            close TLS connections whose handshake has not
                            ended this long after opening  [10]
  --allow-plaintext         listen off loopback without TLS (warned)
  --log FILTER              log filter              [info]
  --log-format FORMAT       text, or json (one object a line) [text]

SIGHUP (or `fila reload`) re-reads the tokens and the TLS files.
  --help, --version
";
