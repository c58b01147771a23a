//! `fila-server`: runs the server until SIGINT or SIGTERM; SIGHUP reloads
//! the tokens and the TLS files (a failed reload keeps what is in use and
//! logs why in one line).
//!
//! A panic on any thread (an event loop, the log writer, the metrics endpoint)
//! is a bug that may have left state half-changed: the process prints it
//! and exits with status 70 rather than go on half alive. A failed write or
//! sync of the log stops the server with status 74.

use fila_server::{Config, LogFormat, Server, HELP};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing_subscriber::EnvFilter;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    if args.iter().any(|a| a == "--version" || a == "-V") {
        println!("fila-server {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--check-data") {
        let Some(dir) = args.get(i + 1) else {
            eprintln!("fila-server: --check-data needs a directory");
            std::process::exit(2);
        };
        match fila_server::check_data(std::path::Path::new(dir)) {
            Ok(r) => {
                println!(
                    "{dir}: ok: snapshot at LSN {}, {} records after it ({} bytes), {} queues, {} messages",
                    r.snapshot_lsn.map_or("none".to_string(), |l| l.to_string()),
                    r.records,
                    r.record_bytes,
                    r.queues,
                    r.messages
                );
                if let Some(t) = &r.torn {
                    println!(
                        "{dir}: a torn write ends the log: {} bytes at byte {} of {} ({}); \
                         a start cuts it off (it was never synced, so never acknowledged)",
                        t.bytes, t.offset, t.file, t.why
                    );
                }
                return;
            }
            Err(e) => {
                eprintln!("fila-server: {e}");
                std::process::exit(1);
            }
        }
    }
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fila-server: {e}");
            std::process::exit(2);
        }
    };
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        eprintln!("fila-server: a thread panicked; stopping the process");
        std::process::exit(70);
    }));
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_target(false)
            .with_current_span(false)
            .init(),
    }
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fila-server: cannot watch signals: {e}");
            std::process::exit(1);
        }
    };
    let server = match Server::start(config.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fila-server: {e}");
            std::process::exit(1);
        }
    };
    // Tests of the panic rule: a debug build panics on a thread of its own
    // when asked to.
    #[cfg(debug_assertions)]
    if std::env::var_os("FILA_TEST_PANIC").is_some() {
        std::thread::spawn(|| panic!("FILA_TEST_PANIC is set"));
    }
    let stop = server.stop_handle();
    let signal_thread = std::thread::Builder::new()
        .name("fila-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGHUP {
                    // A failure is logged where it happens; the server goes on.
                    let _ = stop.reload();
                    continue;
                }
                stop.stop();
                return;
            }
        });
    if let Err(e) = signal_thread {
        eprintln!("fila-server: the signal thread could not start: {e}");
        std::process::exit(1);
    }
    if let Some(why) = server.wait() {
        eprintln!("fila-server: {why}");
        std::process::exit(74);
    }
}
