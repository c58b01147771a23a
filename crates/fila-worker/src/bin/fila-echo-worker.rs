//! fila-echo-worker: a small worker to try the runtime with, and the one
//! the tests kill. For every message of `--queue` it waits `--work-ms`,
//! then puts "echo: <payload>" on `--out` (when given); a payload of
//! "fail" fails, so retries and the poison queue can be watched.
//!
//! ```sh
//! fila-echo-worker --addr 127.0.0.1:7700 --queue jobs --out done [--config worker.toml]
//! ```

use std::time::Duration;

use fila_client::{ClientOptions, TlsOptions};
use fila_worker::{Delivery, HandlerError, Outputs, Settings, Worker};

const HELP: &str = "\
fila-echo-worker: echo every message of a queue to another

usage: fila-echo-worker --queue NAME [flags]

  --addr ADDR       the server                      [127.0.0.1:7700]
  --token TOKEN     access token                    [$FILA_TOKEN]
  --tls             speak TLS (also a filas:// address) [$FILA_TLS=1]
  --ca FILE         the CA of the server's certificate [$FILA_CA]
  --cert FILE       a client certificate to present   [$FILA_CERT]
  --key FILE        its key                           [$FILA_KEY]
  --server-name N   the name the server's certificate carries
                    (default: the address's host)
  --queue NAME      the queue to work
  --out NAME        where to put \"echo: <payload>\" (none: only delete)
  --work-ms N       how long each message takes     [0]
  --config FILE     settings: [defaults] and [queues.NAME] sections
  --dev             the development profile (polls back off to 2 s)
";

fn main() {
    // Warnings (poison messages, failed polls) on stderr; RUST_LOG to
    // change.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("fila-echo-worker: {e}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let queue = get("--queue").ok_or("--queue is required (see --help)")?;
    let mut options = ClientOptions::new(get("--addr").unwrap_or_else(|| "127.0.0.1:7700".into()));
    options.token = get("--token").or_else(|| std::env::var("FILA_TOKEN").ok());
    if TlsOptions::wanted(args.iter().any(|a| a == "--tls")) || options.tls.is_some() {
        options.tls = Some(TlsOptions::from_settings(get));
    }
    let work = Duration::from_millis(
        get("--work-ms")
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("--work-ms: {v:?} is not a number"))
            })
            .transpose()?
            .unwrap_or(0),
    );
    let settings = match get("--config") {
        Some(path) => Settings::from_file(path, &queue).map_err(|e| e.to_string())?,
        None if args.iter().any(|a| a == "--dev") => Settings::dev(),
        None => Settings::default(),
    };
    let out = get("--out");
    let handler = move |d: Delivery, text: String| {
        let out = out.clone();
        async move {
            tokio::time::sleep(work).await;
            if text == "fail" {
                return Err(HandlerError::msg(format!(
                    "asked to fail (try {})",
                    d.dequeue_count
                )));
            }
            let mut outputs = Outputs::new();
            if let Some(out) = out {
                outputs.push(out, format!("echo: {text}"));
            }
            Ok(outputs)
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(Worker::new(options).queue(&queue, settings, handler).run())
        .map_err(|e| e.to_string())?;
    eprintln!("fila-echo-worker: stopped");
    Ok(())
}
