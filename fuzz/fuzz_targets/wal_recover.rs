//! Recovery on any bytes: one to three segments whose record regions (and,
//! when the first byte says so, whose headers) are the fuzzer's. Opening
//! never panics; what it accepts is consecutive records, and opening again
//! after it cut a torn tail gives the same records and no torn tail.
#![no_main]

use fila_wal::{segment_header, segment_name, Log, LogOptions, SimDisk, Storage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let segments = usize::from(mode % 3) + 1;
    let raw_headers = mode & 0x80 != 0;
    let mut disk = SimDisk::new(1);
    let chunk = rest.len() / segments + 1;
    let mut first_lsn = 1;
    for (i, part) in rest.chunks(chunk).enumerate() {
        let name = segment_name(i as u64 + 1);
        disk.create(&name).unwrap();
        if !raw_headers {
            disk.append(&name, &segment_header(i as u64 + 1, first_lsn))
                .unwrap();
            first_lsn += 3;
        }
        disk.append(&name, part).unwrap();
    }
    let options = LogOptions {
        segment_bytes: 4096,
    };
    if let Ok((log, recovered)) = Log::open(disk, options) {
        for pair in recovered.records.windows(2) {
            assert_eq!(pair[1].lsn, pair[0].lsn + 1, "consecutive LSNs");
        }
        let (_, again) = Log::open(log.into_storage(), options).expect("opens again");
        assert_eq!(again.records, recovered.records, "recovery is idempotent");
        assert_eq!(again.snapshot, recovered.snapshot, "recovery is idempotent");
        assert_eq!(again.torn, None, "a torn tail is cut for good");
    }
});
