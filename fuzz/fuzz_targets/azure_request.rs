//! Azure Queue API requests on any bytes: the input is read as a request
//! line (`METHOD /path?query`), header lines (`name: value`) up to an
//! empty line, and a body. Reading it (the URI, its parameters, metadata
//! headers and XML bodies), checking its signature or SAS against the
//! development account, and writing an answer or an error never panic; a
//! request that reads names an account; every error has a status of an
//! error; the XML reader takes any body within its bounds, and text it
//! escapes reads back the same.
#![no_main]

use fila_azure::{auth, read, write_reply, xml, Common, Query, Reply};
use libfuzzer_sys::fuzz_target;

#[path = "shared/http_head.rs"]
mod http_head;

fuzz_target!(|data: &[u8]| {
    let Some((head_text, body)) = http_head::split(data) else {
        return;
    };
    let head = http_head::head(head_text);
    let mut out = Vec::new();
    let common = Common::of(&head);
    match read(&head, body) {
        Ok(call) => {
            assert!(!call.account.is_empty());
            write_reply(&mut out, &Ok(Reply::empty(204)), &common, 0, false, true);
        }
        Err(e) => {
            assert!(e.status() >= 400, "{e}");
            write_reply(&mut out, &Err(e), &common, 0, false, false);
        }
    }
    if let Ok(q) = Query::parse(head.query) {
        let peer = (std::net::IpAddr::from([127, 0, 0, 1]), false);
        let keys = |account: &str| (account == auth::DEV_ACCOUNT).then(|| ((), auth::dev_key()));
        if let Err(e) = auth::authenticate(&head, auth::DEV_ACCOUNT, &q, 1_796_000_000_000, peer, keys) {
            assert!(e.status() >= 400);
        }
    }
    if let Ok(doc) = xml::parse(body) {
        assert!(!doc.name.is_empty());
    }
    if let Ok(text) = std::str::from_utf8(body) {
        if xml::is_xml_text(text) {
            let mut written = String::new();
            xml::element(&mut written, "T", text);
            assert_eq!(xml::parse(written.as_bytes()).expect("escaped text reads").text, text);
        }
    }
});
