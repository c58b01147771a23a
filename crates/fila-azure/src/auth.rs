//! Who sent a request: a SharedKey or SharedKeyLite signature by an
//! account's key, or a shared access signature (a service SAS for one
//! queue, or an account SAS) made with it. What a SAS allows is checked
//! per operation ([`Sas::allows`]); what the account's token allows is
//! the server's to check, per fila request.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{AzureError, Code};
use crate::request::Query;
use crate::time;
use fila_http::Head;

/// How far a request's date may be from the server's clock.
pub const SKEW_MS: u64 = 15 * 60 * 1000;

/// The development account every Azure SDK knows
/// (`UseDevelopmentStorage=true`).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Its key, as the SDKs and Azurite publish it.
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// [`DEV_KEY`] decoded: the HMAC key its signatures are made with.
pub fn dev_key() -> Vec<u8> {
    B64.decode(DEV_KEY).expect("the published key is base64")
}

/// What a SAS reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SasScope {
    /// A service SAS: this one queue.
    Queue(String),
    /// An account SAS: these resource types (`s` service, `c` queues,
    /// `o` messages).
    Account {
        /// The `srt` letters.
        resource_types: String,
    },
}

/// A verified shared access signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sas {
    /// What it reaches.
    pub scope: SasScope,
    /// Its permission letters (`sp`; empty when a stored policy gives
    /// them).
    pub permissions: String,
    /// When it starts (ms), if it says.
    pub start_ms: Option<u64>,
    /// When it ends (ms), if it says (a service SAS with a stored policy
    /// may leave it to the policy).
    pub expiry_ms: Option<u64>,
    /// The stored access policy it names (`si`), if any.
    pub identifier: Option<String>,
}

/// What an operation needs of a SAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// The letter of a service SAS that allows it (`None`: no service
    /// SAS does).
    pub service: Option<char>,
    /// The letter of an account SAS that allows it.
    pub account: char,
    /// The account SAS's resource type it is of.
    pub resource_type: char,
}

impl Sas {
    /// Whether it allows an operation that needs `need`, on `queue`,
    /// with `permissions` (its own, or its stored policy's).
    pub fn allows(
        &self,
        need: Need,
        queue: Option<&str>,
        permissions: &str,
    ) -> Result<(), AzureError> {
        let denied = || {
            AzureError::new(
                Code::AuthorizationPermissionMismatch,
                "This request is not authorized to perform this operation using this permission.",
            )
        };
        match &self.scope {
            SasScope::Queue(q) => {
                if queue != Some(q.as_str()) {
                    return Err(AzureError::new(
                        Code::AuthorizationFailure,
                        format!("This request is not authorized to perform this operation: the SAS is for queue {q}."),
                    ));
                }
                match need.service {
                    Some(letter) if permissions.contains(letter) => Ok(()),
                    _ => Err(denied()),
                }
            }
            SasScope::Account { resource_types } => {
                if !resource_types.contains(need.resource_type) {
                    return Err(AzureError::new(
                        Code::AuthorizationResourceTypeMismatch,
                        "This request is not authorized to perform this operation using this resource type.",
                    ));
                }
                if permissions.contains(need.account) {
                    Ok(())
                } else {
                    Err(denied())
                }
            }
        }
    }

    /// Whether `now_ms` is within `start` and `expiry`.
    pub fn check_time(
        start: Option<u64>,
        expiry: Option<u64>,
        now_ms: u64,
    ) -> Result<(), AzureError> {
        let Some(expiry) = expiry else {
            return Err(failed(
                "the signature names no expiry (se), nor does its policy",
            ));
        };
        if now_ms >= expiry || start.is_some_and(|s| now_ms < s) {
            return Err(failed("Signed expiry time or start time does not include the time of the request: the signature is not valid now"));
        }
        Ok(())
    }
}

/// Who a request is from: the account's token, and the SAS it came
/// with if it came with one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal<T> {
    /// The token the account is.
    pub token: T,
    /// The SAS, when it was one.
    pub sas: Option<Sas>,
}

fn failed(why: impl std::fmt::Display) -> AzureError {
    AzureError::new(
        Code::AuthenticationFailed,
        format!("Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature. {why}"),
    )
}

/// HMAC-SHA256 of `text` with `key`.
fn mac(key: &[u8], text: &str) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    m.update(text.as_bytes());
    m
}

/// The base64 signature of `text` by `key`, as the SDKs make it.
pub fn sign(key: &[u8], text: &str) -> String {
    B64.encode(mac(key, text).finalize().into_bytes())
}

/// Whether `signature` (base64) is `key`'s of `text`, compared in
/// constant time.
fn verify(key: &[u8], text: &str, signature: &str) -> bool {
    match B64.decode(signature) {
        Ok(sig) => mac(key, text).verify_slice(&sig).is_ok(),
        Err(_) => false,
    }
}

/// Authenticates a request to `account` (the path's first segment):
/// its `Authorization` header, else its SAS, else it is refused.
/// `peer` is the client's address and whether it came over TLS (a SAS
/// may name either). `keys` gives an account's token and key (the base64-decoded key).
pub fn authenticate<T>(
    head: &Head<'_>,
    account: &str,
    query: &Query,
    now_ms: u64,
    peer: (core::net::IpAddr, bool),
    keys: impl Fn(&str) -> Option<(T, Vec<u8>)>,
) -> Result<Principal<T>, AzureError> {
    if let Some(auth) = head.headers.text("authorization") {
        let (scheme, rest) = auth
            .split_once(' ')
            .ok_or_else(|| failed("The Authorization header is not SharedKey or SharedKeyLite."))?;
        let lite = match scheme {
            "SharedKey" => false,
            "SharedKeyLite" => true,
            _ => return Err(failed(format!("Authorization scheme {scheme} is not supported (SharedKey, SharedKeyLite, or a SAS)."))),
        };
        let (signer, signature) = rest
            .trim()
            .split_once(':')
            .ok_or_else(|| failed("The Authorization header names no account."))?;
        if signer != account {
            return Err(failed(format!(
                "The signing account {signer} is not the account {account} of the URI."
            )));
        }
        check_date(head, now_ms)?;
        let (token, key) =
            keys(account).ok_or_else(|| failed(format!("No account is named {account}.")))?;
        let texts = if lite {
            string_to_sign_lite(head, account, query)
        } else {
            string_to_sign(head, account, query)
        };
        if texts.iter().any(|t| verify(&key, t, signature)) {
            return Ok(Principal { token, sas: None });
        }
        return Err(failed(format!(
            "The MAC signature found in the HTTP request '{signature}' is not the same as any computed signature."
        )));
    }
    if let Some(sig) = query.get("sig") {
        return sas(head, account, query, sig, now_ms, peer, keys);
    }
    Err(AzureError::new(
        Code::AuthenticationFailed,
        "Server failed to authenticate the request: it has no Authorization header and no shared access signature.",
    ))
}

/// The request's `x-ms-date` (or `Date`) is there and within
/// [`SKEW_MS`] of now.
fn check_date(head: &Head<'_>, now_ms: u64) -> Result<(), AzureError> {
    let date = head
        .headers
        .text("x-ms-date")
        .or_else(|| head.headers.text("date"))
        .ok_or_else(|| failed("Request date header not specified (x-ms-date)."))?;
    let at = time::parse_rfc1123(date).ok_or_else(|| {
        AzureError::new(Code::InvalidHeaderValue, format!("The value for one of the HTTP headers is not in the correct format: x-ms-date {date}"))
    })?;
    if at.abs_diff(now_ms) > SKEW_MS {
        return Err(failed(format!(
            "Request date header too old or too far ahead: {date} (the server's time is {}).",
            time::rfc1123(now_ms)
        )));
    }
    Ok(())
}

/// A header's value for signing ("" when absent; `content-length` 0 as
/// absent).
fn signed_header<'a>(head: &Head<'a>, name: &str) -> &'a str {
    let v = head.headers.text(name).unwrap_or("").trim();
    if name == "content-length" && v == "0" {
        ""
    } else {
        v
    }
}

/// The `x-ms-` headers, lowercase, `name:value\n` each, in the service's
/// order; the byte order too when it differs (an SDK may sort either way).
fn canonical_headers(head: &Head<'_>) -> Vec<String> {
    // A value's bytes read as Latin-1, as HTTP/1.1 clients send text
    // that is not ASCII (the operation refuses such metadata by name).
    let mut headers: Vec<(String, String)> = head
        .headers
        .iter()
        .filter_map(|(n, v)| {
            let n = n.to_ascii_lowercase();
            let v: String = v.iter().map(|&b| char::from(b)).collect();
            n.starts_with("x-ms-").then(|| (n, v.trim().to_owned()))
        })
        .collect();
    let join = |hs: &[(String, String)]| {
        let mut out = String::with_capacity(hs.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
        for (n, v) in hs {
            out.push_str(n);
            out.push(':');
            out.push_str(v);
            out.push('\n');
        }
        out
    };
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let plain = join(&headers);
    // Most often the two orders agree: one string then.
    let agree = headers
        .windows(2)
        .all(|w| service_order(&w[0].0, &w[1].0) != std::cmp::Ordering::Greater);
    if agree {
        return vec![plain];
    }
    headers.sort_by(|a, b| service_order(&a.0, &b.0));
    vec![join(&headers), plain]
}

/// The order the service sorts header names in: hyphens count only when
/// the names are otherwise equal, and then the one whose first hyphen
/// comes later sorts first.
fn service_order(a: &str, b: &str) -> std::cmp::Ordering {
    let strip = |s: &str| s.bytes().filter(|&c| c != b'-').collect::<Vec<u8>>();
    strip(a).cmp(&strip(b)).then_with(|| {
        let first = |s: &str| s.find('-').unwrap_or(usize::MAX);
        first(b).cmp(&first(a)).then_with(|| a.cmp(b))
    })
}

/// `/account/path` and the query's parameters, lowercase, sorted, one
/// `\nname:value` each (values of a repeated name joined by commas).
fn canonical_resource(head: &Head<'_>, account: &str, query: &Query) -> String {
    let mut out = format!("/{account}{}", head.path);
    let mut names: Vec<String> = query
        .pairs
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let values: Vec<&str> = query
            .pairs
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&name))
            .map(|(_, v)| v.as_str())
            .collect();
        out.push('\n');
        out.push_str(&name);
        out.push(':');
        out.push_str(&values.join(","));
    }
    out
}

/// SharedKey's strings to sign (one per header order, see
/// [`canonical_headers`]).
pub fn string_to_sign(head: &Head<'_>, account: &str, query: &Query) -> Vec<String> {
    let mut start = format!("{}\n", head.method);
    for name in [
        "content-encoding",
        "content-language",
        "content-length",
        "content-md5",
        "content-type",
        "date",
        "if-modified-since",
        "if-match",
        "if-none-match",
        "if-unmodified-since",
        "range",
    ] {
        start.push_str(signed_header(head, name));
        start.push('\n');
    }
    let resource = canonical_resource(head, account, query);
    canonical_headers(head)
        .into_iter()
        .map(|h| format!("{start}{h}{resource}"))
        .collect()
}

/// SharedKeyLite's strings to sign.
pub fn string_to_sign_lite(head: &Head<'_>, account: &str, query: &Query) -> Vec<String> {
    let mut start = format!("{}\n", head.method);
    for name in ["content-md5", "content-type", "date"] {
        start.push_str(signed_header(head, name));
        start.push('\n');
    }
    let mut resource = format!("/{account}{}", head.path);
    if let Some(comp) = query.get("comp") {
        resource.push_str("?comp=");
        resource.push_str(comp);
    }
    canonical_headers(head)
        .into_iter()
        .map(|h| format!("{start}{h}{resource}"))
        .collect()
}

/// A SAS: its signature checked, its times and protocol; what it allows
/// is checked per operation.
fn sas<T>(
    head: &Head<'_>,
    account: &str,
    query: &Query,
    sig: &str,
    now_ms: u64,
    (ip, tls): (core::net::IpAddr, bool),
    keys: impl Fn(&str) -> Option<(T, Vec<u8>)>,
) -> Result<Principal<T>, AzureError> {
    let q = |n: &str| query.get(n).unwrap_or("");
    let version = q("sv");
    if version.is_empty() {
        return Err(failed("The SAS names no version (sv)."));
    }
    let (token, key) =
        keys(account).ok_or_else(|| failed(format!("No account is named {account}.")))?;
    let when = |name: &str| -> Result<Option<u64>, AzureError> {
        match query.get(name) {
            None | Some("") => Ok(None),
            Some(t) => time::parse_iso8601(t)
                .map(Some)
                .ok_or_else(|| failed(format!("{name} {t} is not an ISO 8601 time."))),
        }
    };
    let (start_ms, expiry_ms) = (when("st")?, when("se")?);
    let identifier = query.get("si").filter(|s| !s.is_empty()).map(str::to_owned);
    let (text, scope) = if query.get("ss").is_some() {
        if !q("ss").contains('q') {
            return Err(AzureError::new(
                Code::AuthorizationFailure,
                "This request is not authorized: the account SAS does not name the queue service (ss).",
            ));
        }
        let mut text = format!(
            "{account}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
            q("sp"),
            q("ss"),
            q("srt"),
            q("st"),
            q("se"),
            q("sip"),
            q("spr"),
            version
        );
        if version >= "2020-12-06" {
            text.push('\n');
        }
        (
            text,
            SasScope::Account {
                resource_types: q("srt").to_owned(),
            },
        )
    } else {
        let queue = queue_of(head.path);
        let text = format!(
            "{}\n{}\n{}\n/queue/{account}/{queue}\n{}\n{}\n{}\n{}",
            q("sp"),
            q("st"),
            q("se"),
            q("si"),
            q("sip"),
            q("spr"),
            version
        );
        (text, SasScope::Queue(queue))
    };
    if !verify(&key, &text, sig) {
        return Err(failed("Signature did not match: the SAS was not made with this account's key, or was changed."));
    }
    if q("spr") == "https" && !tls {
        return Err(AzureError::new(
            Code::AuthorizationFailure,
            "This request is not authorized: the SAS allows HTTPS only (spr=https).",
        ));
    }
    if !q("sip").is_empty() && !ip_in(q("sip"), ip) {
        return Err(AzureError::new(
            Code::AuthorizationFailure,
            format!(
                "This request is not authorized: the SAS allows addresses {} only.",
                q("sip")
            ),
        ));
    }
    if identifier.is_none() {
        Sas::check_time(start_ms, expiry_ms, now_ms)?;
    }
    Ok(Principal {
        token,
        sas: Some(Sas {
            scope,
            permissions: q("sp").to_owned(),
            start_ms,
            expiry_ms,
            identifier,
        }),
    })
}

/// Whether `ip` is the address or within the range `a-b` that `sip`
/// names (an address that does not read matches nothing).
fn ip_in(sip: &str, ip: core::net::IpAddr) -> bool {
    let ip = match ip {
        core::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(core::net::IpAddr::V6(v6), core::net::IpAddr::V4),
        v4 => v4,
    };
    let (lo, hi) = sip.split_once('-').unwrap_or((sip, sip));
    match (
        lo.parse::<core::net::IpAddr>(),
        hi.parse::<core::net::IpAddr>(),
    ) {
        (Ok(lo), Ok(hi)) => lo <= ip && ip <= hi,
        _ => false,
    }
}

/// The queue a path names (`/account/queue/...`), lowercase as a service
/// SAS's resource is.
fn queue_of(path: &str) -> String {
    let decoded = String::from_utf8_lossy(&fila_http::percent_decode(path, false)).into_owned();
    decoded
        .trim_start_matches('/')
        .split('/')
        .nth(1)
        .unwrap_or("")
        .to_ascii_lowercase()
}
