#!/usr/bin/env python3
"""Turns scripts/compare.sh's JSON lines into the tables of docs/benchmarks.md
(between the "compare" markers, replacing what was there)."""

import json
import statistics
import sys

results, doc, machine, commit, versions, messages, rate, rate_secs, rounds, queues, secs = sys.argv[1:12]

rows = [json.loads(l) for l in open(results) if l.strip()]
failed = [r["failed"] for r in rows if "failed" in r]
reports = [(r["round"], r["report"]) for r in rows if "report" in r]
for r in rows:
    # long-poll-idle's report names no system: the run does.
    if "report" in r and "system" not in r["report"]:
        r["report"]["system"] = r["system"]
floors = [r["floor"] for r in rows if "floor" in r]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def by(scenario):
    out = {}
    for rnd, rep in reports:
        if rep["scenario"] == scenario:
            out.setdefault(rep["system"], []).append((rnd, rep))
    return out


def cpu_us(rep):
    s = rep.get("server")
    return s["cpu_us_per_message"] if s else float("nan")


def fmt(x, digits=0):
    if x != x:  # nan
        return "–"
    return f"{x:,.{digits}f}".replace(",", " ")


lines = []
lines.append("<!-- compare:begin (written by scripts/compare.sh; edits here are overwritten) -->")
lines.append("")
lines.append("## Side by side: fila and its peers (scripts/compare.sh)")
lines.append("")
lines.append(f"Machine: {machine}. Commit `{commit}`. Peers: {versions}. Every system on")
lines.append("127.0.0.1 of the same machine as the load generator, one after the other, "
             f"{rounds} round(s) interleaved (each system once, then again).")
lines.append("")
lines.append("```sh")
lines.append("scripts/compare.sh")
lines.append("```")
lines.append("")
lines.append(f"**Lifecycle**: 4 producers (batches of 20, 8 in flight), 4 consumers (receive 20,")
lines.append(f"delete them, 4 deletes in flight), 100-byte messages, {messages} messages. msg/s is")
lines.append("messages put, received and deleted per second; server CPU from /proc.")
lines.append("")
lines.append("| system | msg/s (rounds) | median msg/s | server CPU µs/msg | msgs per server CPU s | end to end p99 (ms) |")
lines.append("|---|---|---|---|---|---|")
life = by("lifecycle")
best_peer = None
for system, runs in life.items():
    rates = [r["messages_per_s"] for _, r in runs]
    cpu = median([cpu_us(r) for _, r in runs])
    per_cpu = 1e6 / cpu if cpu == cpu and cpu > 0 else float("nan")
    p99 = median([r["end_to_end_us"]["p99"] / 1000 for _, r in runs])
    lines.append(f"| {system} | {', '.join(fmt(x) for x in rates)} | {fmt(median(rates))} | "
                 f"{fmt(cpu, 2)} | {fmt(per_cpu)} | {fmt(p99, 1)} |")
    if not system.startswith("fila") and (best_peer is None or median(rates) > best_peer[1]):
        best_peer = (system, median(rates), per_cpu)
lines.append("")
if best_peer:
    for system, runs in life.items():
        if system.startswith("fila"):
            r = median([x["messages_per_s"] for _, x in runs])
            lines.append(f"- {system}: {r / best_peer[1]:.2f}× the best peer's throughput "
                         f"({best_peer[0]}, {fmt(best_peer[1])} msg/s).")
    lines.append("")
if floors:
    fps = median([f["frames_per_s"] for f in floors])
    lines.append("**Loopback floor**: an echo over the same kind of sockets, no queue: 4 connections")
    lines.append(f"with 8 frames of 2 400 bytes in flight (a put of 20 × 100 B is about that size): "
                 f"{fmt(fps)} frames/s (rounds: {', '.join(fmt(f['frames_per_s']) for f in floors)}), "
                 f"round trip p50 {fmt(median([f['rtt_us']['p50'] for f in floors]))} µs, "
                 f"p99 {fmt(median([f['rtt_us']['p99'] for f in floors]))} µs.")
    for system, runs in life.items():
        put_fps = median([r["put_us"]["count"] / r["seconds"] for _, r in runs if r["seconds"] > 0])
        lines.append(f"- {system}: its producers' puts made {fmt(put_fps)} frames/s, "
                     f"{100 * put_fps / fps:.1f} % of the floor (while its consumers shared the machine).")
    lines.append("")
lines.append(f"**Fixed rate**: {rate} messages a second for {rate_secs} s (4 producers putting one")
lines.append("message at a time on a schedule, 4 consumers); latency from the scheduled send time to")
lines.append("the receive (no coordinated omission), medians of the rounds.")
lines.append("")
lines.append("| system | achieved msg/s | e2e p50 (ms) | p99 (ms) | p99.9 (ms) | max (ms) | server CPU µs/msg |")
lines.append("|---|---|---|---|---|---|---|")
for system, runs in by("fixed-rate").items():
    e = lambda k: median([r["end_to_end_us"][k] / 1000 for _, r in runs])
    lines.append(f"| {system} | {fmt(median([r['messages_per_s'] for _, r in runs]))} | "
                 f"{fmt(e('p50'), 2)} | {fmt(e('p99'), 2)} | {fmt(e('p99.9'), 2)} | "
                 f"{fmt(e('max'), 1)} | {fmt(median([cpu_us(r) for _, r in runs]), 1)} |")
lines.append("")


def rate_table(scenario, extra_header, extra):
    """A table of msg/s per round and their median, server CPU a message,
    and one more column (`extra` of a system's runs)."""
    lines.append(f"| system | msg/s (rounds) | median msg/s | server CPU µs/msg | {extra_header} |")
    lines.append("|---|---|---|---|---|")
    for system, runs in by(scenario).items():
        rates = [r["messages_per_s"] for _, r in runs]
        lines.append(f"| {system} | {', '.join(fmt(x) for x in rates)} | {fmt(median(rates))} | "
                     f"{fmt(median([cpu_us(r) for _, r in runs]), 2)} | {extra(runs)} |")
    lines.append("")


def rss_mib(rep):
    s = rep.get("server")
    return s["peak_rss_bytes"] / 2**20 if s else float("nan")


lines.append(f"**Fan-in**: 16 producers (batches of 20, 8 in flight), one consumer, {messages} messages.")
lines.append("")
rate_table("fan-in", "end to end p99 (ms)",
           lambda runs: fmt(median([r["end_to_end_us"]["p99"] / 1000 for _, r in runs]), 1))
lines.append(f"**Many queues**: the lifecycle over {queues} queues (producers put each batch to the next")
lines.append("queue; each consumer cycles over its own share, moving on when a receive comes back empty).")
lines.append("fila and Redis only (one stream per queue); see \"What the peers do not do\".")
lines.append("")
rate_table("many-queues", "server peak RSS (MiB)",
           lambda runs: fmt(median([rss_mib(r) for _, r in runs]), 0))
lines.append(f"**Redelivery**: 100 000 messages put, 4 consumers that never delete, a 1 s lease")
lines.append(f"(beanstalkd's time-to-run, JetStream's ack wait), for {secs} s: every delivery after the")
lines.append("first of a message is a lease that ran out. Not Redis: a stream redelivers only through")
lines.append("XAUTOCLAIM, a different code path.")
lines.append("")
lines.append("| system | deliveries/s (rounds) | median | deliveries per message | server CPU µs/delivery |")
lines.append("|---|---|---|---|---|")
for system, runs in by("redelivery").items():
    rates = [r["messages_per_s"] for _, r in runs]
    per = median([r["consumed"] / r["produced"] for _, r in runs if r["produced"]])
    lines.append(f"| {system} | {', '.join(fmt(x) for x in rates)} | {fmt(median(rates))} | "
                 f"{fmt(per, 2)} | {fmt(median([cpu_us(r) for _, r in runs]), 2)} |")
lines.append("")
idle = by("long-poll-idle")
if idle:
    lines.append(f"**Long-poll idle** (fila): 10 000 receives parked on an empty queue (20 a connection)")
    lines.append(f"for {secs} s while one more connection puts, receives and deletes a message every")
    lines.append("10 ms on another queue. The peers have no such test here: a blocking read in Redis or")
    lines.append("beanstalkd takes a connection of its own.")
    lines.append("")
    lines.append("| system | server CPU (% of a core) | server RSS (MiB) | probe p50 (µs) | probe p99 (µs) |")
    lines.append("|---|---|---|---|---|")
    for system, runs in idle.items():
        srv = [r["server"] for _, r in runs if r.get("server")]
        lines.append(f"| {system} | {fmt(median([x['cpu_pct'] for x in srv]), 2)} | "
                     f"{fmt(median([x['rss_bytes_peak'] / 2**20 for x in srv]), 0)} | "
                     f"{fmt(median([r['probe_us']['p50'] for _, r in runs]))} | "
                     f"{fmt(median([r['probe_us']['p99'] for _, r in runs]))} |")
    lines.append("")
if failed:
    lines.append("Runs that failed: " + ", ".join(failed) + ".")
    lines.append("")
# Plots: SVG bar charts next to the doc.
import os

img_dir = os.path.join(os.path.dirname(doc), "img")
os.makedirs(img_dir, exist_ok=True)


def bars(path, title, unit, series, groups):
    """series: [(label, [value per group])]; groups: group names."""
    width, left, bar_h, gap = 760, 230, 14, 6
    rows = len(series) * (len(groups) * bar_h + gap)
    height = rows + 70
    vmax = max([v for _, vs in series for v in vs if v == v] + [1])
    colors = ["#3b6ea5", "#e08a2e", "#5a9e4b", "#b5485d"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="18" font-size="13" font-weight="bold">{title}</text>']
    for gi, g in enumerate(groups):
        out.append(f'<rect x="{left + gi * 120}" y="28" width="10" height="10" fill="{colors[gi % 4]}"/>'
                   f'<text x="{left + gi * 120 + 14}" y="37">{g}</text>')
    y = 50
    for label, vs in series:
        out.append(f'<text x="{left - 6}" y="{y + len(groups) * bar_h / 2 + 4}" text-anchor="end">{label}</text>')
        for gi, v in enumerate(vs):
            w = 0 if v != v else (width - left - 90) * v / vmax
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" fill="{colors[gi % 4]}"/>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar_h - 4}">{fmt(v, 2 if v < 10 else 0)} {unit}</text>')
            y += bar_h
        y += gap
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


bars(os.path.join(img_dir, "compare-throughput.svg"),
     "Lifecycle throughput (median of rounds)", "msg/s",
     [(s, [median([r["messages_per_s"] for _, r in runs])]) for s, runs in life.items()],
     ["msg/s"])
fixed_rows = by("fixed-rate")
bars(os.path.join(img_dir, "compare-latency.svg"),
     f"End-to-end latency at {rate} msg/s (median of rounds)", "ms",
     [(s, [median([r["end_to_end_us"][k] / 1000 for _, r in runs]) for k in ("p50", "p99", "p99.9")])
      for s, runs in fixed_rows.items()],
     ["p50", "p99", "p99.9"])
lines.append("![lifecycle throughput](img/compare-throughput.svg)")
lines.append("")
lines.append("![end-to-end latency at a fixed rate](img/compare-latency.svg)")
lines.append("")
lines.append("<!-- compare:end -->")
section = "\n".join(lines) + "\n"

text = open(doc).read()
begin = text.find("<!-- compare:begin")
end = text.find("<!-- compare:end -->")
if begin >= 0 and end >= 0:
    text = text[:begin] + section + text[end + len("<!-- compare:end -->") + 1:]
else:
    text = text.rstrip("\n") + "\n\n" + section
open(doc, "w").write(text)
