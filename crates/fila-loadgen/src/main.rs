//! # fila-loadgen: the load generator
//!
//! fila-loadgen owns the workloads and their measurement: producer and
//! consumer connections on threads of their own, end-to-end latency from a
//! timestamp carried in each payload, HdrHistogram percentiles per
//! operation, the server's CPU and memory from /proc when it runs on this
//! machine, a progress line, a table or `--json`. Systems are adapters
//! behind [`target::Target`]: fila and its peers.
//!
//! ```sh
//! fila-loadgen --scenario lifecycle --producers 4 --consumers 4 --messages 1000000
//! fila-loadgen --scenario fixed-rate --rate 10000 --duration 30 --server-pid $(pgrep fila-server)
//! ```

mod connect;
mod floor;
mod idle;
mod lease_ends;
mod lease_storm;
mod nodes;
mod peers;
mod report;
mod target;
mod workload;

use std::time::Duration;

use target::{Fila, Target};
use workload::Load;

const HELP: &str = "\
fila-loadgen: load a fila server and measure it

usage: fila-loadgen [flags]

  --system NAME        fila, sqs (fila's SQS API: --addr is its listener,
                       127.0.0.1:9324), azure (fila's Azure Queue API,
                       its listener, 127.0.0.1:10001, the development
                       account), redis (Streams), beanstalkd,
                       nats (JetStream)
                                                      [fila]
  --addr ADDR          the server (a cluster's node, or several a,b,c:
                       each queue's requests go to its
                       partition's leader, and follow
                       it when it moves)              [127.0.0.1:7700]
  --nats-storage KIND  memory or file (JetStream)     [memory]
  --token TOKEN        access token                   [$FILA_TOKEN]
  --tls                fila: speak TLS (or a filas:// address), with
                       --ca FILE (the server certificate's CA, $FILA_CA),
                       --cert FILE --key FILE (a client certificate),
                       --server-name NAME          [$FILA_TLS=1]
  --dedup-ids          fila: every put carries a deduplication id of its
                       own (what remembering them costs;
                       on a cluster a put whose outcome
                       a lost leadership left unknown
                       is then sent again)
  --groups N           fila: puts go round N message groups (each group
                       delivered in order, one leased at a time)
  --retry-initial MS   fila: the queues get a retry policy of this first
                       wait (a lease that runs out waits before it comes
                       back)
  --attempt-history N  fila: the failed attempts each message keeps (the
                       server's default, 10, unless given)
  --label TEXT         added to the system's name in reports (a sync mode)
  --all-fields         fila: receive every field of a message (by default
                       a receive asks for the payload and receipt only)
  --scenario NAME      lifecycle: producers put as fast as acknowledged,
                       consumers receive and delete; fixed-rate: producers
                       put --rate messages a second on a schedule and
                       latency counts from the schedule; fan-in: the
                       lifecycle with 16 producers and 1 consumer unless
                       given; many-queues: the lifecycle over --queues
                       queues; redelivery: consumers never delete, the
                       leases (--visibility, 1000 ms unless given) run out
                       and messages come back until --duration ends;
                       long-poll-idle (fila): --waiters receives parked
                       over --consumers connections (20 a connection
                       unless given) for
                       --duration (20 s unless given), the server's CPU and
                       memory and a probe's round trip meanwhile; floor: no
                       server, an echo over loopback sockets with
                       --producers connections, --depth frames of --size
                       bytes in flight, for --duration seconds; connect
                       (fila): --producers threads open connections
                       (TCP, with --tls a full handshake, auth, a hello,
                       the close) for --duration (10 s unless given):
                       connections a second; lease-ends (fila):
                       --waiters receives (100 unless given), each on a
                       queue of its own, wait for a message leased for
                       500 ms to --visibility (7000 unless given): how
                       late each is answered after the lease's end, for
                       --duration; lease-storm (fila): --messages
                       leases in flight at once (taken for an hour, then
                       each changed to end 1 s to --visibility from then,
                       60000 unless given), --consumers long-polling them
                       back: how late each came back after its lease's
                       end (all, and those ending after every end was
                       given); with --rate, a producer and a consumer busy
                       beside at that rate (0 unless given)
                       [lifecycle]
  --queues N           queues of many-queues          [10000]
  --waiters N          parked receives of long-poll-idle [10000]
  --producers N        producer connections           [4]
  --consumers N        consumer connections           [4]
  --messages N         messages to put in all         [1000000]
  --duration SECS      stop after this long anyway    [60]
  --size BYTES         payload size, at least 8       [100]
  --batch N            messages per put, 1-20         [20]
  --depth N            puts in flight per producer    [8]
  --ack-depth N        deletes in flight per consumer [4]
                       (0: a delete is answered before the next receive
                       is sent, one request in flight; fila and Redis)
  --rate N             messages a second (fixed-rate) [10000]
  --visibility MS      receive visibility timeout     [30000]
  --wait MS            receive long-poll wait         [100]
  --queue NAME         queue to use (emptied first)   [loadgen]
  --server-pid PID     read the server's CPU and memory from /proc
  --json               one JSON object instead of the table
  --quiet              no progress line
  --help
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    if args
        .windows(2)
        .any(|w| w[0] == "--scenario" && w[1] == "floor")
    {
        return floor_main(&args);
    }
    if args
        .windows(2)
        .any(|w| w[0] == "--scenario" && w[1] == "long-poll-idle")
    {
        return idle_main(&args);
    }
    if args
        .windows(2)
        .any(|w| w[0] == "--scenario" && w[1] == "connect")
    {
        return connect_main(&args);
    }
    if args
        .windows(2)
        .any(|w| w[0] == "--scenario" && w[1] == "lease-ends")
    {
        return lease_ends_main(&args);
    }
    if args
        .windows(2)
        .any(|w| w[0] == "--scenario" && w[1] == "lease-storm")
    {
        return lease_storm_main(&args);
    }
    let (target, load, json) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("fila-loadgen: {e}");
            std::process::exit(2);
        }
    };
    match workload::run(&*target, &load) {
        Ok(report) if json => println!("{}", report.json()),
        Ok(report) => print!("{}", report.table()),
        Err(e) => {
            eprintln!("fila-loadgen: {e}");
            std::process::exit(1);
        }
    }
}

/// The loopback floor (no server): `--producers`, `--depth`, `--size`,
/// `--duration`, `--json`.
fn floor_main(args: &[String]) {
    let get = |flag: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map_or(Some(default), |v| v.parse().ok())
            .unwrap_or_else(|| {
                eprintln!("fila-loadgen: {flag} needs a whole number");
                std::process::exit(2);
            })
    };
    let (connections, depth, size, secs) = (
        get("--producers", 4).max(1) as usize,
        get("--depth", 8).max(1) as usize,
        get("--size", 2_400).max(1) as usize,
        get("--duration", 5).max(1),
    );
    match floor::run(connections, depth, size, secs) {
        Ok(f) if args.iter().any(|a| a == "--json") => println!(
            "{{\"scenario\":\"floor\",\"connections\":{connections},\"depth\":{depth},\"frame_bytes\":{size},\"frames_per_s\":{:.0},\"rtt_us\":{{\"p50\":{},\"p99\":{},\"p99.9\":{}}}}}",
            f.frames_per_s, f.rtt_us[0], f.rtt_us[1], f.rtt_us[2]
        ),
        Ok(f) => println!(
            "loopback floor: {connections} connections, {depth} frames of {size} B in flight: {:.0} frames/s; round trip p50 {} µs, p99 {} µs, p99.9 {} µs",
            f.frames_per_s, f.rtt_us[0], f.rtt_us[1], f.rtt_us[2]
        ),
        Err(e) => {
            eprintln!("fila-loadgen: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs a scenario of fila alone (`name`) from its parsed flags, and prints
/// its report or exits 1 saying why.
fn fila_only_main(
    args: &[String],
    name: &str,
    scenario: impl FnOnce(&Fila, &Load, bool) -> Result<String, String>,
) {
    let run = || -> Result<String, String> {
        let (target, load, json) = parse(args)?;
        let Some(fila) = target.fila() else {
            return Err(format!("{name} runs against fila only (--system fila)"));
        };
        scenario(fila, &load, json)
    };
    match run() {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("fila-loadgen: {e}");
            std::process::exit(1);
        }
    }
}

/// connect: fila only, connections opened a second.
fn connect_main(args: &[String]) {
    fila_only_main(args, "connect", |fila, load, json| {
        let r = connect::run(fila, load.producers, load.duration, load.server_pid)?;
        Ok(if json {
            r.json(load.producers) + "\n"
        } else {
            r.table(load.producers)
        })
    })
}

/// long-poll-idle: fila only, on the async client.
fn idle_main(args: &[String]) {
    fila_only_main(args, "long-poll-idle", |fila, load, json| {
        let r = idle::run(
            fila,
            &load.queue,
            load.waiters,
            load.consumers,
            load.duration,
            load.server_pid,
        )?;
        Ok(if json { r.json() + "\n" } else { r.table() })
    })
}

/// lease-ends: fila only, on the async client.
fn lease_ends_main(args: &[String]) {
    fila_only_main(args, "lease-ends", |fila, load, json| {
        let r = lease_ends::run(
            fila,
            &load.queue,
            load.waiters,
            load.consumers,
            load.visibility_ms,
            load.duration,
        )?;
        Ok(if json { r.json() + "\n" } else { r.table() })
    })
}

/// lease-storm: fila only, on the async client.
fn lease_storm_main(args: &[String]) {
    fila_only_main(args, "lease-storm", |fila, load, json| {
        let r = lease_storm::run(
            fila,
            &load.queue,
            load.messages,
            load.consumers,
            load.visibility_ms,
            load.rate,
            load.duration,
        )?;
        Ok(if json { r.json() + "\n" } else { r.table() })
    })
}

const SCENARIOS: [&str; 9] = [
    "lifecycle",
    "fixed-rate",
    "fan-in",
    "many-queues",
    "redelivery",
    "long-poll-idle",
    "connect",
    "lease-ends",
    "lease-storm",
];

fn parse(args: &[String]) -> Result<(Box<dyn Target>, Load, bool), String> {
    let mut target = Fila {
        addr: "127.0.0.1:7700".into(),
        token: std::env::var("FILA_TOKEN").ok().filter(|t| !t.is_empty()),
        tls: None,
        dedup_ids: false,
        groups: 0,
        retry_initial_ms: 0,
        attempt_history: None,
        label: String::new(),
        fields: fila_client::Fields::PAYLOAD_AND_RECEIPT,
        routes: Default::default(),
    };
    let mut system = "fila".to_string();
    let mut nats_storage = "memory".to_string();
    let mut load = Load {
        scenario: "lifecycle".into(),
        queues: 10_000,
        waiters: 10_000,
        producers: 4,
        consumers: 4,
        messages: 1_000_000,
        size: 100,
        batch: 20,
        depth: 8,
        ack_depth: 4,
        rate: 10_000,
        visibility_ms: 30_000,
        wait_ms: 100,
        duration: Duration::from_secs(60),
        queue: "loadgen".into(),
        server_pid: None,
        progress: true,
    };
    let mut json = false;
    let mut tls_flags: Vec<(String, String)> = Vec::new();
    let given: Vec<&str> = args
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number"))
        };
        match flag.as_str() {
            "--addr" => target.addr = value()?,
            "--system" => system = value()?,
            "--nats-storage" => nats_storage = value()?,
            "--token" => target.token = Some(value()?),
            "--tls" => tls_flags.push(("--tls".into(), String::new())),
            "--dedup-ids" => target.dedup_ids = true,
            "--groups" => target.groups = number(value()?)?,
            "--retry-initial" => target.retry_initial_ms = number(value()?)?,
            "--attempt-history" => target.attempt_history = Some(number(value()?)? as u32),
            "--ca" | "--cert" | "--key" | "--server-name" => {
                let v = value()?;
                tls_flags.push((flag.clone(), v));
            }
            "--label" => target.label = value()?,
            "--scenario" => load.scenario = value()?,
            "--producers" => load.producers = number(value()?)? as usize,
            "--consumers" => load.consumers = number(value()?)? as usize,
            "--messages" => load.messages = number(value()?)?,
            "--duration" => load.duration = Duration::from_secs(number(value()?)?),
            "--size" => load.size = number(value()?)? as usize,
            "--batch" => load.batch = number(value()?)? as usize,
            "--depth" => load.depth = number(value()?)? as usize,
            "--ack-depth" => load.ack_depth = number(value()?)? as usize,
            "--rate" => load.rate = number(value()?)?,
            "--visibility" => load.visibility_ms = number(value()?)?,
            "--wait" => load.wait_ms = number(value()?)?,
            "--queue" => load.queue = value()?,
            "--queues" => load.queues = number(value()?)? as usize,
            "--waiters" => load.waiters = number(value()?)? as usize,
            "--server-pid" => load.server_pid = Some(number(value()?)? as u32),
            "--all-fields" => target.fields = fila_client::Fields::ALL,
            "--json" => json = true,
            "--quiet" => load.progress = false,
            other => return Err(format!("unknown flag {other:?} (see --help)")),
        }
    }
    if !SCENARIOS.contains(&load.scenario.as_str()) {
        return Err(format!(
            "--scenario: {:?} is not one of {}, floor",
            load.scenario,
            SCENARIOS.join(", ")
        ));
    }
    // Each scenario's own defaults, for the flags not given.
    let unset = |flag: &str| !given.contains(&flag);
    match load.scenario.as_str() {
        "fan-in" => {
            if unset("--producers") {
                load.producers = 16;
            }
            if unset("--consumers") {
                load.consumers = 1;
            }
        }
        "redelivery" if unset("--visibility") => load.visibility_ms = 1_000,
        "connect" if unset("--duration") => load.duration = Duration::from_secs(10),
        "long-poll-idle" => {
            if unset("--consumers") {
                load.consumers = load.waiters.div_ceil(idle::PER_CONNECTION);
            }
            if unset("--duration") {
                load.duration = Duration::from_secs(20);
            }
        }
        "lease-storm" => {
            if unset("--visibility") {
                load.visibility_ms = 60_000;
            }
            if unset("--rate") {
                load.rate = 0;
            }
            if unset("--duration") {
                load.duration = Duration::from_secs(180);
            }
        }
        "lease-ends" => {
            if unset("--waiters") {
                load.waiters = 100;
            }
            if unset("--visibility") {
                load.visibility_ms = 7_000;
            }
            if unset("--consumers") {
                load.consumers = load.waiters.div_ceil(idle::PER_CONNECTION);
            }
            if unset("--duration") {
                load.duration = Duration::from_secs(30);
            }
        }
        _ => {}
    }
    if load.queues == 0 || load.waiters == 0 {
        return Err("--queues and --waiters must be at least 1".into());
    }
    // (lease-storm's --rate 0: nothing busy beside the leases.)
    let no_rate = load.rate == 0 && load.scenario != "lease-storm";
    if load.producers == 0 || load.consumers == 0 || load.depth == 0 || no_rate {
        return Err("--producers, --consumers, --depth and --rate must be at least 1".into());
    }
    if load.batch == 0 || load.batch > fila_client::limits::BATCH_LEN_MAX {
        return Err(format!(
            "--batch must be 1..={}",
            fila_client::limits::BATCH_LEN_MAX
        ));
    }
    if load.size < 8 {
        return Err("--size must be at least 8 (the payload carries its send time)".into());
    }
    if load.wait_ms > fila_client::limits::WAIT_MS_MAX {
        return Err(format!(
            "--wait must be at most {} ms",
            fila_client::limits::WAIT_MS_MAX
        ));
    }
    if json {
        load.progress = false;
    }
    let switch = tls_flags.iter().any(|(f, _)| f == "--tls");
    if fila_client::TlsOptions::wanted(switch) || target.addr.starts_with("filas://") {
        target.tls = Some(fila_client::TlsOptions::from_settings(|f| {
            tls_flags
                .iter()
                .rev()
                .find(|(k, _)| k == f)
                .map(|(_, v)| v.clone())
        }));
    } else if !tls_flags.is_empty() {
        return Err("--ca, --cert, --key and --server-name need --tls".into());
    }
    let addr = target.addr.clone();
    let label = target.label.clone();
    let target: Box<dyn Target> = match system.as_str() {
        "fila" => {
            target.go_to_leader(load.scenario != "floor");
            Box::new(target)
        }
        "redis" => Box::new(peers::redis::Redis { addr, label }),
        "sqs" => Box::new(peers::sqs::Sqs { addr, label }),
        "azure" => Box::new(peers::azure::Azure { addr, label }),
        "beanstalkd" => Box::new(peers::beanstalkd::Beanstalkd {
            addr,
            label,
            tube: format!("{}-{}", load.queue, std::process::id()),
            ttr_s: load.visibility_ms.div_ceil(1_000),
        }),
        "nats" => {
            if !["memory", "file"].contains(&nats_storage.as_str()) {
                return Err(format!(
                    "--nats-storage: {nats_storage:?} is not one of memory, file"
                ));
            }
            Box::new(peers::nats::Nats {
                addr,
                storage: nats_storage,
                ack_wait_ms: load.visibility_ms,
            })
        }
        other => {
            return Err(format!(
                "--system: {other:?} is not one of fila, sqs, azure, redis, beanstalkd, nats"
            ))
        }
    };
    Ok((target, load, json))
}
