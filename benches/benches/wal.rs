//! `wal/encode/...`: appending records to the log's pending buffer (no I/O),
//! per record. `wal/commit/...`: a group commit on the real file system (in
//! the temp directory): N records of 200 bytes appended, then written and
//! synced with one `fdatasync`; throughput is records made durable.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fila_wal::{FsStorage, Log, LogOptions, SimDisk};

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("wal");
    let body = vec![0x5Au8; 200];
    g.throughput(Throughput::Elements(1_000));
    g.bench_function("encode/1000x200B", |b| {
        b.iter_batched(
            || Log::open(SimDisk::new(1), LogOptions::default()).unwrap().0,
            |mut log| {
                for _ in 0..1_000 {
                    black_box(log.append(1, &body).unwrap());
                }
                log
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn commit(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("fila-wal-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut log, _) = Log::open(FsStorage::new(&dir).unwrap(), LogOptions::default()).unwrap();
    let body = vec![0x5Au8; 200];
    let mut g = c.benchmark_group("wal");
    for group in [1u64, 16, 256] {
        g.throughput(Throughput::Elements(group));
        g.bench_function(format!("commit/fdatasync/{group}x200B"), |b| {
            b.iter(|| {
                for _ in 0..group {
                    log.append(1, &body).unwrap();
                }
                black_box(log.commit().unwrap())
            })
        });
    }
    g.finish();
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, encode, commit);
criterion_main!(benches);
