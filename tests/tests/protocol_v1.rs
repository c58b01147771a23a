//! Issue 37: version 1 of the wire protocol (as of 5db3f1f) is still
//! spoken. `tests/fixtures/protocol-v1/requests.txt` holds request frames
//! as a version-1 client encodes them (frozen: encoded by fila-proto at
//! 5db3f1f); this test sends them to a real server over a raw socket and
//! reads every answer with a strict reader of version 1's layouts written
//! here from that version's docs/protocol.md: each body consumed exactly,
//! every header saying version 1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fila_tests::TestServer;

/// The fixture's frames by name.
fn frames() -> Vec<(String, Vec<u8>)> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/protocol-v1/requests.txt");
    std::fs::read_to_string(path)
        .expect("the fixture")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, hex) = l.split_once(' ').expect("name and hex");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (name.to_owned(), bytes)
        })
        .collect()
}

/// A version-1 body, read strictly.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        assert!(self.0.len() >= n, "the body ends early");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn str(&mut self) -> String {
        let n = self.u16() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    fn bytes(&mut self) -> Vec<u8> {
        let n = self.u32() as usize;
        self.take(n).to_vec()
    }
    fn opt(&mut self) -> bool {
        match self.u8() {
            0 => false,
            1 => true,
            b => panic!("an option's byte is {b}"),
        }
    }
    fn end(&self) {
        assert!(self.0.is_empty(), "{} bytes left over", self.0.len());
    }
}

/// A version-1 `message`: (payload, attributes, channel, receipt).
type V1Message = (
    Vec<u8>,
    Vec<(String, String)>,
    Option<String>,
    Option<[u8; 32]>,
);

fn message(b: &mut Body<'_>) -> V1Message {
    b.take(16 + 8); // id, seq
    let payload = b.bytes();
    let attributes = (0..b.u16()).map(|_| (b.str(), b.str())).collect();
    let channel = b.opt().then(|| b.str());
    b.take(3 * 8); // inserted, expires, next visible
    b.u32();
    let state = b.u8();
    assert!((1..=5).contains(&state), "state {state}");
    let receipt = b.opt().then(|| b.take(32).try_into().unwrap());
    if b.opt() {
        b.str();
        b.u64();
        b.u8();
        b.str();
        b.str();
        b.u32();
    }
    (payload, attributes, channel, receipt)
}

/// Version 1's `settings`: the ten fields.
fn settings(b: &mut Body<'_>) -> [u64; 4] {
    let visibility = b.u64();
    let max_deliveries = u64::from(b.u32());
    b.u64();
    b.u32();
    b.u64();
    b.opt();
    if b.opt() {
        b.str();
    }
    b.u64();
    let max_bytes = b.u64();
    let pct = u64::from(b.u8());
    b.end();
    [visibility, max_deliveries, max_bytes, pct]
}

/// Sends `frame` and reads its answer's body, checking the header.
fn call(s: &mut TcpStream, frame: &[u8]) -> Vec<u8> {
    s.write_all(frame).unwrap();
    let mut head = [0u8; 16];
    s.read_exact(&mut head).unwrap();
    let len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len - 12];
    s.read_exact(&mut body).unwrap();
    assert_eq!(head[4], 1, "the answer is of version 1");
    assert_eq!(head[5], frame[5], "the request's opcode");
    assert_eq!(&head[8..16], &frame[8..16], "the request's id");
    let flags = u16::from_be_bytes([head[6], head[7]]);
    assert_eq!(
        flags,
        1,
        "a plain answer, not an error: {:?}",
        String::from_utf8_lossy(&body)
    );
    body
}

#[test]
fn a_version_1_client_creates_updates_puts_receives_deletes_peeks_and_reads_stats() {
    let s = TestServer::start();
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let frames = frames();
    let frame = |name: &str| {
        frames
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} in the fixture"))
            .1
            .clone()
    };

    let answer = call(&mut c, &frame("hello"));
    let b = &mut Body(&answer);
    assert!(b.str().starts_with("fila-server/"));
    assert_eq!(b.u8(), 1, "a hello naming no version speaks version 1");
    b.u32();
    b.end();

    let answer = call(&mut c, &frame("create"));
    assert_eq!(answer, [1], "created");
    let answer = call(&mut c, &frame("get"));
    assert_eq!(settings(&mut Body(&answer)), [60_000, 3, 1 << 30, 50]);
    let answer = call(&mut c, &frame("update"));
    assert_eq!(settings(&mut Body(&answer)), [45_000, 3, 1 << 20, 50]);

    let answer = call(&mut c, &frame("put"));
    let b = &mut Body(&answer);
    assert_eq!(b.u16(), 2);
    for _ in 0..2 {
        assert_eq!(b.u8(), 0, "stored");
        b.take(24);
    }
    b.end();

    let answer = call(&mut c, &frame("receive"));
    let b = &mut Body(&answer);
    assert_eq!(b.u16(), 2);
    let got: Vec<V1Message> = (0..2).map(|_| message(b)).collect();
    b.end();
    let one = got.iter().find(|m| m.0 == b"one").expect("one");
    let two = got.iter().find(|m| m.0 == b"two").expect("two");
    assert_eq!(one.1, vec![("k".to_string(), "v".to_string())]);
    assert_eq!(one.2.as_deref(), Some("c1"));

    // The frozen frames carry a receipt of zeros at offset 24.
    let with_receipt = |name: &str, r: [u8; 32]| {
        let mut f = frame(name);
        assert_eq!(&f[24..56], &[0; 32]);
        f[24..56].copy_from_slice(&r);
        f
    };
    let answer = call(&mut c, &with_receipt("visibility", one.3.unwrap()));
    let b = &mut Body(&answer);
    assert_eq!((b.u16(), b.u8()), (1, 0), "released");
    b.u64();
    b.end();
    let answer = call(&mut c, &with_receipt("delete", two.3.unwrap()));
    assert_eq!(answer, [0, 1, 0], "deleted");

    let answer = call(&mut c, &frame("peek"));
    let b = &mut Body(&answer);
    assert_eq!(b.u16(), 1);
    let left = message(b);
    b.end();
    assert_eq!((left.0.as_slice(), left.3), (&b"one"[..], None));

    let answer = call(&mut c, &frame("stats"));
    let b = &mut Body(&answer);
    let stats: Vec<u64> = (0..13).map(|_| b.u64()).collect();
    b.end();
    // visible 1, in flight 0; puts 2, deliveries 2, deletes 1.
    assert_eq!((stats[0], stats[1]), (1, 0));
    assert_eq!((stats[7], stats[8], stats[9]), (2, 2, 1));

    let answer = call(&mut c, &frame("list"));
    let b = &mut Body(&answer);
    assert_eq!(b.u16(), 1);
    assert_eq!(b.str(), "v1q");
    assert!(!b.opt(), "no next page");
    b.end();
    assert!(call(&mut c, &frame("purge")).is_empty());
    assert!(call(&mut c, &frame("drop")).is_empty());
}

/// A hello names the newest version a client speaks; the server answers
/// the one it will use, and refuses a frame of a version it does not speak
/// naming those it does.
#[test]
fn the_hello_negotiates_and_an_unknown_version_is_refused_saying_which_are_spoken() {
    let s = TestServer::start();
    let mut c = s.client();
    let (server, _) = c.hello().unwrap();
    assert!(server.starts_with("fila-server/"));
    let mut raw = TcpStream::connect(s.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (max, answered) in [(2u8, 2u8), (3, 3), (4, 4), (5, 5), (6, 6), (9, 6), (1, 1)] {
        // hello, version 2 frame: str "t", u8 max.
        let frame = [
            0, 0, 0, 16, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 1, b't', max,
        ];
        raw.write_all(&frame).unwrap();
        let mut answer = [0u8; 16];
        raw.read_exact(&mut answer).unwrap();
        let len = u32::from_be_bytes(answer[..4].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 12];
        raw.read_exact(&mut body).unwrap();
        assert_eq!(answer[4], 2, "answered in the frame's version");
        let b = &mut Body(&body);
        b.str();
        assert_eq!(b.u8(), answered, "a client speaking up to {max}");
        b.u32();
        b.end();
    }
    // A frame of version 7: unsupported_version (102), naming 1 to 6, in
    // version 1 (every client reads it), and the connection closes.
    let frame = [0, 0, 0, 12, 7, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8];
    raw.write_all(&frame).unwrap();
    let mut rest = Vec::new();
    raw.read_to_end(&mut rest).unwrap();
    assert_eq!(rest[4], 1);
    let b = &mut Body(&rest[16..]);
    assert_eq!(b.u16(), 102);
    let why = b.str();
    assert!(why.contains("versions 1 to 6"), "{why}");
}
