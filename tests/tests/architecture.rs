//! ARCHITECTURE.md stays true: every file it names exists, and every type,
//! function or constant it names (in backticks) is in the code.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

/// Every file below `dir` (but target and .git), relative to the root.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name == ".git" || name == "node_modules" {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The words of the sources (Rust and Python).
fn words(sources: &[PathBuf]) -> HashSet<String> {
    let mut out = HashSet::new();
    for p in sources {
        let Ok(text) = std::fs::read_to_string(p) else {
            continue;
        };
        for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !w.is_empty() {
                out.insert(w.to_owned());
            }
        }
    }
    out
}

/// What the document puts in backticks.
fn quoted(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(q), Some(_)) = (parts.next(), parts.next()) {
            out.push(q.to_owned());
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    let s = s.strip_suffix("()").unwrap_or(s);
    !s.is_empty()
        && s.split("::").all(|seg| {
            let mut chars = seg.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// Whether `s` reads as a name in code (not a plain English word): it has
/// a `::`, an underscore or a capital (a type).
fn looks_like_code(s: &str) -> bool {
    s.contains("::") || s.contains('_') || s.chars().any(|c| c.is_ascii_uppercase())
}

#[test]
fn every_file_and_name_architecture_md_quotes_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut all = Vec::new();
    files(&root, &mut all);
    // Names come from the Rust code and the Python client's.
    let code: Vec<PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs" || e == "py"))
        .cloned()
        .collect();
    let known = words(&code);
    let relative: Vec<String> = all
        .iter()
        .filter_map(|p| p.strip_prefix(&root).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let mut missing = Vec::new();
    for q in quoted(&doc) {
        let q = q.trim();
        if q.starts_with('/') {
            // An HTTP path.
            continue;
        }
        if let Some(dir) = q.strip_suffix('/') {
            let found = relative
                .iter()
                .any(|r| r.starts_with(&format!("{dir}/")) || r.contains(&format!("/{dir}/")));
            if !found {
                missing.push(format!("directory {q}"));
            }
            continue;
        }
        let file_like = q.contains('/')
            || [".rs", ".md", ".toml", ".sh"]
                .iter()
                .any(|ext| q.ends_with(ext));
        if file_like && !q.contains(' ') {
            // A path from the root, or the tail of one (a file named in its
            // crate's table).
            let found = relative.iter().any(|r| {
                r == q || r.ends_with(&format!("/{q}")) || r.starts_with(&format!("{q}/"))
            });
            if !found {
                missing.push(format!("file {q}"));
            }
            continue;
        }
        if is_identifier(q) && looks_like_code(q) {
            let last = q
                .strip_suffix("()")
                .unwrap_or(q)
                .rsplit("::")
                .next()
                .unwrap();
            if !known.contains(last) {
                missing.push(format!("name {q}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what is not there: {missing:#?}"
    );
}

/// The dialect crates have no I/O: ARCHITECTURE.md says a dialect (the
/// binary protocol's `fila-proto`, HTTP's framing `fila-http`, the SQS
/// API's `fila-sqs`, the Azure Queue API's `fila-azure`) is bytes in and
/// bytes out, and the server owns the sockets. None of them depends
/// on an I/O runtime or reaches the network, files or threads.
#[test]
fn the_dialect_crates_have_no_io() {
    let root = root();
    for krate in [
        "fila-proto",
        "fila-http",
        "fila-sqs",
        "fila-azure",
        "fila-console",
    ] {
        let dir = root.join("crates").join(krate);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .map(|d| d.split("\n[").next().unwrap_or(""))
            .unwrap_or("");
        for io in [
            "tokio",
            "mio",
            "hyper",
            "rustls",
            "fila-server",
            "fila-store",
            "fila-wal",
        ] {
            assert!(
                !deps.lines().any(|l| l.trim_start().starts_with(io)),
                "{krate} depends on {io}"
            );
        }
        let mut sources = Vec::new();
        files(&dir.join("src"), &mut sources);
        for p in sources {
            let text = std::fs::read_to_string(&p).unwrap();
            for io in [
                "std::net",
                "std::fs",
                "std::thread",
                "std::process",
                "TcpStream",
            ] {
                assert!(!text.contains(io), "{} uses {io}", p.display());
            }
        }
    }
}

/// The SQS and Azure Queue APIs are served by the event loops
/// (ARCHITECTURE.md, "Threads and what each owns"): the server's SQS and
/// Azure code and the loops' HTTP front end run no runtime, spawn no
/// thread and take no HTTP library but fila-http's framer.
#[test]
fn the_sqs_api_runs_on_the_event_loops() {
    let server = root().join("crates/fila-server/src/server");
    let mut sources = Vec::new();
    files(&server.join("sqs"), &mut sources);
    files(&server.join("azure"), &mut sources);
    sources.push(server.join("front/http.rs"));
    assert!(sources.len() >= 3, "{sources:?}");
    for p in sources {
        let text = std::fs::read_to_string(&p).unwrap();
        for thread in ["tokio", "hyper", "std::thread", "spawn", "Mutex<AuthGuard"] {
            assert!(!text.contains(thread), "{} uses {thread}", p.display());
        }
    }
    let front = std::fs::read_to_string(server.join("front/http.rs")).unwrap();
    assert!(
        front.contains("fila_http::Framer"),
        "the loops frame SQS requests with fila-http"
    );
}

/// fila-server reaches a cluster's Raft groups through fila-cluster's
/// interface only (ARCHITECTURE.md, `crates/fila-cluster`): it does not
/// depend on openraft, and no code of it names openraft's items.
#[test]
fn the_server_does_not_name_openraft() {
    let dir = root().join("crates/fila-server");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        !manifest
            .lines()
            .any(|l| l.trim_start().starts_with("openraft")),
        "fila-server depends on openraft"
    );
    let mut sources = Vec::new();
    files(&dir.join("src"), &mut sources);
    files(&dir.join("tests"), &mut sources);
    for p in sources {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("openraft::"),
            "{} names openraft",
            p.display()
        );
    }
}

/// The names of the threads the server's crates start, from the code: a
/// `.name(..)` given to a thread's builder (a name made with `format!`
/// has its `{..}` as `i`) or a runtime's `thread_name`, and the
/// console's `spawn_runtime`. Test code and the loom model are left out.
fn thread_names_in_code() -> HashSet<String> {
    let mut sources = Vec::new();
    for krate in ["fila-server", "fila-store", "fila-cluster", "fila-wal"] {
        files(&root().join("crates").join(krate).join("src"), &mut sources);
    }
    let mut names = HashSet::new();
    for p in sources {
        if p.file_name().is_some_and(|n| n == "loom_model.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for marker in [".name(", "thread_name(", "spawn_runtime("] {
            for (at, _) in code.match_indices(marker) {
                let rest = &code[at + marker.len()..];
                let Some(open) = rest.find('"') else { continue };
                // The literal must be this call's first argument.
                if rest[..open].contains(')') || rest[..open].contains(';') {
                    continue;
                }
                let lit = &rest[open + 1..];
                let Some(close) = lit.find('"') else { continue };
                let mut name = lit[..close].to_string();
                while let (Some(a), Some(b)) = (name.find('{'), name.find('}')) {
                    name.replace_range(a..=b, "i");
                }
                if name.starts_with("fila-") {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// ARCHITECTURE.md's "Threads and what each owns" names every thread the
/// server starts, and every thread it names is started by the code.
#[test]
fn every_thread_the_server_starts_is_named_here() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("## Threads and what each owns")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("ARCHITECTURE.md has a section on threads");
    let in_doc: HashSet<String> = quoted(section)
        .into_iter()
        .filter(|q| q.starts_with("fila-") && !q.contains(' ') && !q.contains('/'))
        .collect();
    let in_code = thread_names_in_code();
    assert!(in_code.len() >= 7, "threads found in the code: {in_code:?}");
    let undocumented: Vec<_> = in_code.difference(&in_doc).collect();
    assert!(
        undocumented.is_empty(),
        "threads the server starts that ARCHITECTURE.md does not name: {undocumented:?}"
    );
    let gone: Vec<_> = in_doc.difference(&in_code).collect();
    assert!(
        gone.is_empty(),
        "threads ARCHITECTURE.md names that no code starts: {gone:?}"
    );
}
