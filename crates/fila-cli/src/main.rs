//! `fila`: the command-line tool. Talks to a server with fila-client;
//! prints tables for people and JSON (`--json`) for scripts.
//!
//! Exit codes: 0 done; 1 the server refused the request, or an entry of a
//! batch failed; 2 the command line is wrong; 3 the server could not be
//! reached or the connection broke.

use std::io::Read;
use std::process::ExitCode;

use bytes::Bytes;
mod args;
mod cluster;
mod moves;
mod output;
mod settings;

use args::*;
use moves::*;
use settings::*;

use fila_client::{
    Availability, Client, ClientError, ClientOptions, Fields, Halves, Message, MoveFilter,
    PutEntry, QueueRef, Receipt, ReceiveRef, SettingsPatch,
};
use output::{json_str, print_entries, print_messages, print_pairs, print_settings};

const USAGE: &str = "\
fila: the fila command-line tool

usage: fila [--addr ADDR] [--token TOKEN] [--tls] [--ca FILE]
            [--cert FILE --key FILE] [--json] COMMAND ...

  queue create NAME [settings]     create a queue (idempotent)
  queue get NAME                   show its settings
  queue update NAME [settings]     change settings
  queue list [PREFIX]              list queues
  queue stats NAME                 counts and counters
  queue purge NAME [--dlq]         remove every message (of the DLQ)
  queue pause NAME [--receive] [--send]
                                   pause receiving, sending, or (neither
                                   named) both: receives find nothing
                                   (waiting ones wait), puts are refused
  queue resume NAME [--receive] [--send]
                                   resume them (neither named: both)
  queue delete NAME [--if-exists]  delete the queue (--if-exists: a missing
                                   queue is no error)
  put QUEUE [MESSAGE ...]          put messages (or --file PATH, or stdin
        [--channel C] [--delay MS] [--at MS] [--ttl MS] [--attr K=V ...]
        [--dedup-id ID] [--group G] [--priority N]
                                   when no message is given: one per line;
                                   --dedup-id: a resend within the queue's
                                   dedup window stores nothing; --group: the
                                   messages join group G in the order given;
                                   --priority: level N, 1 ..= the queue's
                                   priority levels, higher served first)
  receive QUEUE [--max N] [--visibility MS] [--wait MS] [--channel F] [--dlq]
                                   (without --wait: the queue's default wait)
  delete QUEUE RECEIPT ... [--dlq]
  visibility QUEUE RECEIPT MS [--dlq]   set a lease's timeout (0 releases)
  release QUEUE RECEIPT ... [--dlq] [--reason R] [--description D]
                                   end leases as failed (a nack): each
                                   message comes back after the queue's
                                   retry policy's delay (at once without);
                                   the reason is kept in its attempts
  defer QUEUE RECEIPT
  receive-deferred QUEUE SEQ ... [--visibility MS]
  peek QUEUE [--from SEQ] [--max N] [--dlq]   (with each message's failed attempts)
  dead-letter QUEUE RECEIPT [--reason R] [--description D]
  redrive QUEUE [--max N] [--rate PER_SECOND] [FILTER] [--preview]
                                   (rate 1-10000; without: 10000 now, the
                                   rest 10000 a second)
  move QUEUE [--to Q] [--max N] [--rate PER_SECOND] [FILTER] [--preview]
                                   move the queue's visible messages out (a
                                   dead-letter target's: each back to the
                                   queue it came from, or all to --to)
        FILTER: --attr K=V ... (each attribute with that value) --reason R
        (a reason it failed for: max_deliveries, expired, consumer, or a
        consumer's reason) --text T (in a consumer's reason or description)
        --since TIME --until TIME (when it failed: dead-lettered, else put;
        TIME is ms since the epoch or an age: 90s, 30m, 2h, 7d)
        --preview: count what it would take and show the first 20; moves
        nothing
  moves QUEUE                      its move tasks and redrives, with progress
  move-cancel QUEUE ID             cancel a running move task
  cancel QUEUE SEQ                 cancel a scheduled message
  delete-seq QUEUE SEQ [--dlq]     delete one message whatever its state
                                   (an operator's delete; manage)
  dead-letter-seq QUEUE SEQ [--reason R] [--description D]
                                   dead-letter one message whatever its state
  channels QUEUE [--after NAME] [--max N]
                                   channels with messages ready, and backlog
  server-stats
  cluster status                   a cluster node's view: members, leader,
                                   log indexes, each member's lag, then
                                   each partition's leader, log and
                                   replicas (asked of the node --addr
                                   names; docs/cluster.md)
  cluster add ID --peer HOST:PORT --client HOST:PORT [--wait SECS]
                                   add a node as a learner (of the
                                   partitions short of replicas) and wait
                                   (60 s; 0: not) until it has caught up
                                   in each of its groups
  cluster promote ID               make a caught-up learner a voter
  cluster remove ID                take a voter or a learner out (its
                                   replicas placed on the members left)
  cluster move FROM TO --peer HOST:PORT --client HOST:PORT
                                   move FROM's replicas to node TO: added,
                                   promoted once caught up, FROM removed
  cluster transfer [--to ID]       hand every group's leadership to voter
                                   ID; without --to, every group the node
                                   --addr names leads hands over (to the
                                   voter furthest along); cluster changes
                                   are made in every group they concern
                                   and need manage on every queue
  reload                           the server reads its tokens and TLS
                                   files again (manage on every queue)

settings: --visibility-timeout MS --max-deliveries N --retention MS
  --max-message-bytes N --receive-wait MS --dead-letter-on-expiration BOOL
  --dead-letter-target QUEUE|none --max-messages N --max-bytes N
  --channel-capacity PCT --queue-delay MS (a put without --delay waits
  this long) --tag KEY=VALUE ... --untag KEY ... --dedup-window MS (how
  long a dedup id is remembered, 1000..=86400000) --content-dedup BOOL (puts
  without a dedup id are deduplicated by payload and attributes) --ordered
  BOOL (every put must name a --group) --priority-levels N (1-10: the levels a
  put may name) --priority-fairness N (every N-th delivery while lower
  levels wait comes from one of them, in turn; 0 = strict)
  --retry-initial MS (a lease that ends without a delete — expired, or
  released — makes the message wait this long; 0 = off) --retry-multiplier
  X (each later retry waits X times the one before, 1-10, e.g. 1.5)
  --retry-max MS (the longest wait) --retry-jitter PCT (up to this share of
  a wait taken off, 0-100) --attempt-history N (failed attempts each message
  keeps, 0-32; peek shows them)

The address and token default to $FILA_ADDR (127.0.0.1:7700) and $FILA_TOKEN.
ADDR is HOST:PORT, fila://HOST:PORT, or filas://HOST:PORT (TLS, as --tls);
a cluster's nodes as HOST:PORT,HOST:PORT,...: the first that answers.
TLS: --ca (or $FILA_CA) is the CA the server's certificate must chain to;
the name checked is the address's host (--server-name to name another);
--cert and --key ($FILA_CERT, $FILA_KEY) present a client certificate.
$FILA_TLS=1 is --tls.
Exit codes: 0 done, 1 refused by the server, 2 usage, 3 cannot reach it.
";

enum Failure {
    Usage(String),
    Refused(String),
    Unreachable(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        match e {
            ClientError::Server { .. } | ClientError::Unexpected { .. } => {
                Failure::Refused(e.to_string())
            }
            other => Failure::Unreachable(other.to_string()),
        }
    }
}

type Out = Result<bool, Failure>;

fn run(a: Args) -> Out {
    let json = a.flag("--json");
    let cmd = a.pos(0, "a command (see fila --help)")?.to_owned();
    match cmd.as_str() {
        "queue" => {
            let sub = a.pos(1, "a queue subcommand")?.to_owned();
            match sub.as_str() {
                "create" | "update" => {
                    a.check_known(&SETTINGS_FLAGS)?;
                    let name = a.pos(2, "a queue name")?;
                    let p = patch(&a)?;
                    let mut c = connect(&a)?;
                    if sub == "create" {
                        let created = c.create_queue(name, p)?;
                        if json {
                            println!("{{\"name\":{},\"created\":{created}}}", json_str(name));
                        } else if created {
                            println!("created queue {name}");
                        } else {
                            println!("queue {name} exists with these settings");
                        }
                    } else {
                        let s = c.update_queue(name, p)?;
                        print_settings(json, name, &s);
                    }
                }
                "get" => {
                    a.check_known(&[])?;
                    let name = a.pos(2, "a queue name")?;
                    let s = connect(&a)?.get_queue(name)?;
                    print_settings(json, name, &s);
                }
                "list" => {
                    a.check_known(&[])?;
                    let prefix = a.positional.get(2).map_or("", String::as_str);
                    let names = connect(&a)?.list_queues(prefix)?;
                    if json {
                        let n: Vec<String> = names.iter().map(|n| json_str(n)).collect();
                        println!("[{}]", n.join(","));
                    } else if names.is_empty() {
                        println!("(no queues)");
                    } else {
                        for n in names {
                            println!("{n}");
                        }
                    }
                }
                "stats" => {
                    a.check_known(&[])?;
                    let name = a.pos(2, "a queue name")?;
                    let s = connect(&a)?.stats(name)?;
                    print_pairs(
                        json,
                        &[
                            ("visible".into(), s.visible),
                            ("in_flight".into(), s.in_flight),
                            ("delayed".into(), s.delayed),
                            ("deferred".into(), s.deferred),
                            ("dead_lettered".into(), s.dead_lettered),
                            ("bytes".into(), s.bytes),
                            ("oldest_age_ms".into(), s.oldest_age_ms),
                            ("puts".into(), s.puts),
                            ("deliveries".into(), s.deliveries),
                            ("deletes".into(), s.deletes),
                            ("expiries".into(), s.expiries),
                            ("dead_letterings".into(), s.dead_letterings),
                            ("redriven".into(), s.redriven),
                            ("dedup_entries".into(), s.dedup_entries),
                            ("groups".into(), s.groups),
                            ("groups_in_flight".into(), s.groups_in_flight),
                            ("retries".into(), s.retries),
                        ],
                    );
                }
                verb @ ("pause" | "resume") => {
                    a.check_known(&["--receive", "--send"])?;
                    let name = a.pos(2, "a queue name")?;
                    // Neither named: both.
                    let (receive, send) = (a.flag("--receive"), a.flag("--send"));
                    let halves = if receive || send {
                        Halves { receive, send }
                    } else {
                        Halves::BOTH
                    };
                    let mut c = connect(&a)?;
                    let now = if verb == "pause" {
                        c.pause_queue(name, halves)?
                    } else {
                        c.resume_queue(name, halves)?
                    };
                    if json {
                        println!(
                            "{{\"name\":{},\"receive_paused\":{},\"send_paused\":{}}}",
                            json_str(name),
                            now.receive,
                            now.send
                        );
                    } else {
                        let what = match (now.receive, now.send) {
                            (true, true) => "receiving and sending paused",
                            (true, false) => "receiving paused",
                            (false, true) => "sending paused",
                            (false, false) => "not paused",
                        };
                        println!("{name}: {what}");
                    }
                }
                "purge" => {
                    a.check_known(&["--dlq"])?;
                    let name = a.pos(2, "a queue name")?;
                    connect(&a)?.purge(name, a.flag("--dlq"))?;
                    if !json {
                        println!(
                            "purged {name}{}",
                            if a.flag("--dlq") { " (DLQ)" } else { "" }
                        );
                    }
                }
                "delete" => {
                    a.check_known(&["--if-exists"])?;
                    let name = a.pos(2, "a queue name")?;
                    if a.flag("--if-exists") {
                        connect(&a)?.delete_queue_if_exists(name)?;
                    } else {
                        connect(&a)?.delete_queue(name)?;
                    }
                    if !json {
                        println!("deleted queue {name}");
                    }
                }
                other => {
                    return Err(Failure::Usage(format!(
                        "unknown queue subcommand {other:?}"
                    )))
                }
            }
            Ok(true)
        }
        "put" => {
            a.check_known(&[
                "--file",
                "--channel",
                "--delay",
                "--at",
                "--ttl",
                "--attr",
                "--dedup-id",
                "--group",
                "--priority",
            ])?;
            let queue = a.pos(1, "a queue name")?.to_owned();
            let mut payloads: Vec<Bytes> = a.positional[2..]
                .iter()
                .map(|m| Bytes::from(m.clone().into_bytes()))
                .collect();
            if let Some(path) = a.value("--file") {
                let data = std::fs::read(path)
                    .map_err(|e| Failure::Usage(format!("cannot read {path}: {e}")))?;
                payloads.push(Bytes::from(data));
            }
            if payloads.is_empty() {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| Failure::Usage(format!("cannot read stdin: {e}")))?;
                payloads = text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(|l| Bytes::from(l.to_owned()))
                    .collect();
            }
            let availability = match (a.number::<u64>("--delay")?, a.number::<u64>("--at")?) {
                (Some(_), Some(_)) => {
                    return Err(Failure::Usage("give --delay or --at, not both".into()))
                }
                (Some(d), None) => Availability::DelayMs(d),
                (None, Some(t)) => Availability::At(t),
                (None, None) => Availability::Now,
            };
            let attributes = attrs(&a)?;
            let ttl_ms = a.number("--ttl")?;
            let dedup_id = a.value("--dedup-id").map(str::to_owned);
            let priority: Option<u8> = a.number("--priority")?;
            if dedup_id.is_some() && payloads.len() != 1 {
                return Err(Failure::Usage(
                    "--dedup-id names one message: put one message with it".into(),
                ));
            }
            let entries: Vec<PutEntry> = payloads
                .into_iter()
                .map(|payload| PutEntry {
                    payload,
                    attributes: attributes.clone(),
                    channel: a.value("--channel").map(str::to_owned),
                    availability,
                    ttl_ms,
                    dedup_id: dedup_id.clone(),
                    group: a.value("--group").map(str::to_owned),
                    priority,
                })
                .collect();
            let results = connect(&a)?.put_many(&queue, entries)?;
            Ok(print_entries(json, "message", &results, |ack| {
                format!("\"id\":\"{:032x}\",\"seq\":{}", ack.id, ack.seq)
            }))
        }
        "receive" => {
            a.check_known(&["--max", "--visibility", "--wait", "--channel", "--dlq"])?;
            let queue = a.pos(1, "a queue name")?;
            let ms = connect(&a)?.receive_with(ReceiveRef {
                queue,
                dlq: a.flag("--dlq"),
                max_messages: a.number("--max")?.unwrap_or(1),
                visibility_ms: a.number("--visibility")?,
                // Without --wait, the queue's receive_wait_default applies.
                wait_ms: a.number("--wait")?,
                channel: a.value("--channel"),
                fields: Fields::ALL,
            })?;
            print_messages(json, &ms);
            Ok(true)
        }
        "delete" => {
            a.check_known(&["--dlq"])?;
            let queue = a.pos(1, "a queue name")?;
            let receipts = receipts_from(&a, 2)?;
            let results = connect(&a)?.delete_from(&qref(queue, a.flag("--dlq")), &receipts)?;
            Ok(print_entries(json, "receipt", &results, |_| {
                "\"deleted\":true".into()
            }))
        }
        "release" => {
            a.check_known(&["--dlq", "--reason", "--description"])?;
            let queue = a.pos(1, "a queue name")?;
            let receipts = receipts_from(&a, 2)?;
            let results = connect(&a)?.release_with(
                &qref(queue, a.flag("--dlq")),
                &receipts,
                a.value("--reason").unwrap_or(""),
                a.value("--description").unwrap_or(""),
            )?;
            Ok(print_entries(json, "receipt", &results, |t| {
                format!("\"next_visible_at_ms\":{t}")
            }))
        }
        "visibility" => {
            a.check_known(&["--dlq"])?;
            let queue = a.pos(1, "a queue name")?;
            let receipt = parse_receipt(a.pos(2, "a receipt")?)?;
            let ms: u64 = a
                .pos(3, "a timeout in ms")?
                .parse()
                .map_err(|_| Failure::Usage("the timeout is a number of ms".into()))?;
            let results =
                connect(&a)?.update_visibility(&qref(queue, a.flag("--dlq")), &[(receipt, ms)])?;
            Ok(print_entries(json, "receipt", &results, |t| {
                format!("\"next_visible_at_ms\":{t}")
            }))
        }
        "defer" => {
            a.check_known(&[])?;
            let queue = a.pos(1, "a queue name")?;
            let receipt = parse_receipt(a.pos(2, "a receipt")?)?;
            connect(&a)?.defer(queue, receipt)?;
            if !json {
                println!("deferred");
            }
            Ok(true)
        }
        "receive-deferred" => {
            a.check_known(&["--visibility"])?;
            let queue = a.pos(1, "a queue name")?;
            let seqs = a.positional[2..]
                .iter()
                .map(|s| {
                    s.parse::<u64>()
                        .map_err(|_| Failure::Usage(format!("{s:?} is not a sequence number")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let results = connect(&a)?.receive_deferred(queue, &seqs, a.number("--visibility")?)?;
            let ok = results.iter().all(|r| r.is_ok());
            let got: Vec<Message> = results
                .iter()
                .filter_map(|r| r.as_ref().ok().cloned())
                .collect();
            print_messages(json, &got);
            for (seq, r) in seqs.iter().zip(&results) {
                if let Err(e) = r {
                    eprintln!("fila: sequence number {seq}: {e}");
                }
            }
            Ok(ok)
        }
        "peek" => {
            a.check_known(&["--from", "--max", "--dlq"])?;
            let queue = a.pos(1, "a queue name")?;
            // With each message's failed attempts: a peek is a debugging look.
            let ms = connect(&a)?.peek_with(
                qref(queue, a.flag("--dlq")),
                a.number("--from")?.unwrap_or(0),
                a.number("--max")?.unwrap_or(20),
                Fields::ALL.with(Fields::ATTEMPTS),
            )?;
            print_messages(json, &ms);
            Ok(true)
        }
        "dead-letter" => {
            a.check_known(&["--reason", "--description"])?;
            let queue = a.pos(1, "a queue name")?;
            let receipt = parse_receipt(a.pos(2, "a receipt")?)?;
            connect(&a)?.dead_letter(
                queue,
                receipt,
                a.value("--reason").unwrap_or("cli"),
                a.value("--description").unwrap_or(""),
            )?;
            if !json {
                println!("dead-lettered");
            }
            Ok(true)
        }
        "redrive" => {
            a.check_known(&[
                "--max",
                "--rate",
                "--attr",
                "--reason",
                "--text",
                "--since",
                "--until",
                "--preview",
            ])?;
            let queue = a.pos(1, "a queue name")?;
            let filter = move_filter(&a)?;
            if a.flag("--preview") {
                preview(&mut connect(&a)?, json, queue, true, None, &filter)?;
                return Ok(true);
            }
            let (moved, scheduled) = connect(&a)?.redrive_where(
                queue,
                a.number("--max")?,
                a.number("--rate")?,
                &filter,
            )?;
            if json {
                println!("{{\"moved\":{moved},\"scheduled\":{scheduled}}}");
            } else {
                println!("moved {moved}, {scheduled} more scheduled");
            }
            Ok(true)
        }
        "move" => {
            a.check_known(&[
                "--to",
                "--max",
                "--rate",
                "--attr",
                "--reason",
                "--text",
                "--since",
                "--until",
                "--preview",
            ])?;
            let queue = a.pos(1, "a queue name")?;
            let filter = move_filter(&a)?;
            if a.flag("--preview") {
                let to = a.value("--to");
                preview(&mut connect(&a)?, json, queue, false, to, &filter)?;
                return Ok(true);
            }
            let task = connect(&a)?.start_move_where(
                queue,
                a.value("--to"),
                a.number("--max")?,
                a.number("--rate")?,
                &filter,
            )?;
            output::print_moves(json, &[task]);
            Ok(true)
        }
        "moves" => {
            a.check_known(&[])?;
            let queue = a.pos(1, "a queue name")?;
            let tasks = connect(&a)?.list_moves(queue)?;
            output::print_moves(json, &tasks);
            Ok(true)
        }
        "move-cancel" => {
            a.check_known(&[])?;
            let queue = a.pos(1, "a queue name")?;
            let id: u64 = a
                .pos(2, "a task number")?
                .parse()
                .map_err(|_| Failure::Usage("not a task number".into()))?;
            let task = connect(&a)?.cancel_move(queue, id)?;
            output::print_moves(json, &[task]);
            Ok(true)
        }
        "delete-seq" | "dead-letter-seq" => {
            let dead_letter = cmd == "dead-letter-seq";
            if dead_letter {
                a.check_known(&["--reason", "--description"])?;
            } else {
                a.check_known(&["--dlq"])?;
            }
            let queue = a.pos(1, "a queue name")?;
            let seq: u64 = a
                .pos(2, "a sequence number")?
                .parse()
                .map_err(|_| Failure::Usage("not a sequence number".into()))?;
            let mut c = connect(&a)?;
            if dead_letter {
                c.dead_letter_seq(
                    queue,
                    seq,
                    a.value("--reason").unwrap_or("cli"),
                    a.value("--description").unwrap_or(""),
                )?;
            } else {
                c.delete_seq(queue, a.flag("--dlq"), seq)?;
            }
            if !json {
                let done = if dead_letter {
                    "dead-lettered"
                } else {
                    "deleted"
                };
                println!("{done} {seq}");
            }
            Ok(true)
        }
        "channels" => {
            a.check_known(&["--after", "--max"])?;
            let queue = a.pos(1, "a queue name")?;
            let (channels, next) = connect(&a)?.channels(
                queue,
                a.value("--after").unwrap_or(""),
                a.number("--max")?.unwrap_or(100),
            )?;
            output::print_channels(json, &channels, next.as_deref());
            Ok(true)
        }
        "cancel" => {
            a.check_known(&[])?;
            let queue = a.pos(1, "a queue name")?;
            let seq: u64 = a
                .pos(2, "a sequence number")?
                .parse()
                .map_err(|_| Failure::Usage("not a sequence number".into()))?;
            connect(&a)?.cancel_scheduled(queue, seq)?;
            if !json {
                println!("cancelled {seq}");
            }
            Ok(true)
        }
        "cluster" => cluster::run(&a, json),
        "server-stats" => {
            a.check_known(&[])?;
            let pairs = connect(&a)?.server_stats()?;
            print_pairs(json, &pairs);
            Ok(true)
        }
        "reload" => {
            a.check_known(&[])?;
            let r = connect(&a)?.reload()?;
            if json {
                println!(
                    "{{\"generation\":{},\"tokens\":{},\"tls\":{}}}",
                    r.generation, r.tokens, r.tls
                );
            } else {
                println!(
                    "reloaded (generation {}): {} tokens, TLS {}",
                    r.generation,
                    r.tokens,
                    if r.tls { "on" } else { "off" }
                );
            }
            Ok(true)
        }
        other => Err(Failure::Usage(format!(
            "unknown command {other:?} (see fila --help)"
        ))),
    }
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.is_empty()
        || raw
            .iter()
            .any(|a| a == "--help" || a == "-h" || a == "help")
    {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let result = Args::parse(raw).and_then(run);
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Failure::Refused(m)) => {
            eprintln!("fila: {m}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(m)) => {
            eprintln!("fila: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Unreachable(m)) => {
            eprintln!("fila: {m}");
            ExitCode::from(3)
        }
    }
}
