//! AWS Signature Version 4, checked as the server: the canonical request
//! rebuilt from what arrived, the string to sign, the key derived from the
//! token's secret, and the signature compared in constant time. Only the
//! `Authorization` header form (what the SDKs send); the request's
//! `x-amz-date` within [`SKEW_SECS`] of the server's clock.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::attrs::hex;
use crate::error::{Kind, SqsError};
use crate::{Head, Headers};

/// How far a request's timestamp may be from the server's clock.
pub const SKEW_SECS: u64 = 15 * 60;
/// The service name a credential scope must name.
pub const SERVICE: &str = "sqs";

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// What the `Authorization` header says.
#[derive(Debug, PartialEq, Eq)]
pub struct Authorization<'a> {
    /// The access key id (a token's id in fila).
    pub key_id: &'a str,
    /// `YYYYMMDD`.
    pub date: &'a str,
    /// The credential scope's region.
    pub region: &'a str,
    /// The credential scope's service (`sqs`).
    pub service: &'a str,
    /// Lower-case header names, in the order given (sorted by the signer).
    pub signed_headers: Vec<&'a str>,
    /// The signature, in hex.
    pub signature: &'a str,
}

fn incomplete(what: &str) -> SqsError {
    SqsError::new(
        Kind::IncompleteSignature,
        format!("The Authorization header is not a valid AWS Signature Version 4: {what}."),
    )
}

/// Parses `AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/SERVICE/aws4_request,
/// SignedHeaders=a;b, Signature=hex`.
pub fn parse_authorization(header: &str) -> Result<Authorization<'_>, SqsError> {
    let rest = header
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| incomplete("it must start with AWS4-HMAC-SHA256"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        } else if !part.is_empty() {
            return Err(incomplete("an unknown part"));
        }
    }
    let credential = credential.ok_or_else(|| incomplete("no Credential"))?;
    let signed = signed.ok_or_else(|| incomplete("no SignedHeaders"))?;
    let signature = signature.ok_or_else(|| incomplete("no Signature"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(incomplete(
            "the Credential is not ID/DATE/REGION/SERVICE/aws4_request",
        ));
    };
    if key_id.is_empty() || region.is_empty() || date.len() != 8 {
        return Err(incomplete("the Credential's scope is malformed"));
    }
    let signed_headers: Vec<&str> = signed.split(';').collect();
    if signed_headers.iter().any(|h| h.is_empty()) || !signed_headers.contains(&"host") {
        return Err(incomplete("SignedHeaders must name host"));
    }
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(incomplete("the Signature is not 64 hex digits"));
    }
    Ok(Authorization {
        key_id,
        date,
        region,
        service,
        signed_headers,
        signature,
    })
}

/// A request as the signature covers it.
pub struct Signed<'a> {
    /// The method.
    pub method: &'a str,
    /// The path as sent (percent-encoded).
    pub path: &'a str,
    /// The query as sent, without `?`.
    pub query: &'a str,
    /// Its headers.
    pub headers: &'a Headers<'a>,
    /// Its body.
    pub body: &'a [u8],
}

/// Percent-encodes everything but the unreserved characters (and `/` when
/// `keep_slash`), as SigV4 asks.
fn encode(s: &[u8], keep_slash: bool, out: &mut String) {
    for &b in s {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Decodes `%XX` (and `+` as a space, as the form encoding and the SDKs'
/// query parsers do).
pub fn decode(s: &str) -> Vec<u8> {
    fila_http::percent_decode(s, true)
}

/// The path with `.` and `..` segments and repeated slashes taken out,
/// then encoded again (the signer encodes the already encoded path).
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for s in path.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut normal = String::from("/");
    normal.push_str(&segments.join("/"));
    if path.ends_with('/') && !segments.is_empty() {
        normal.push('/');
    }
    let mut out = String::with_capacity(normal.len());
    encode(normal.as_bytes(), true, &mut out);
    out
}

/// The query's pairs decoded, sorted by name then value, encoded.
pub fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let (mut ke, mut ve) = (String::new(), String::new());
            encode(&decode(k), false, &mut ke);
            encode(&decode(v), false, &mut ve);
            (ke, ve)
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// A header's values joined by commas, each trimmed with inner runs of
/// spaces made one.
fn header_value(headers: &Headers<'_>, name: &str) -> Result<String, SqsError> {
    let mut values = Vec::new();
    for v in headers.get_all(name) {
        let v = std::str::from_utf8(v).map_err(|_| incomplete("a signed header is not text"))?;
        values.push(v.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    if values.is_empty() {
        return Err(incomplete(&format!("the signed header {name} is missing")));
    }
    Ok(values.join(","))
}

/// The canonical request of `req` under `auth`.
pub fn canonical_request(req: &Signed<'_>, auth: &Authorization<'_>) -> Result<String, SqsError> {
    let mut out = String::with_capacity(256);
    out.push_str(req.method);
    out.push('\n');
    out.push_str(&canonical_uri(req.path));
    out.push('\n');
    out.push_str(&canonical_query(req.query));
    out.push('\n');
    for name in &auth.signed_headers {
        out.push_str(name);
        out.push(':');
        out.push_str(&header_value(req.headers, name)?);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&auth.signed_headers.join(";"));
    out.push('\n');
    out.push_str(&hex(&Sha256::digest(req.body)));
    Ok(out)
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// The signature of a canonical request, as the signer with `secret`
/// computes it.
pub fn signature(
    secret: &str,
    auth: &Authorization<'_>,
    timestamp: &str,
    canonical: &str,
) -> String {
    let scope = format!(
        "{}/{}/{}/aws4_request",
        auth.date, auth.region, auth.service
    );
    let to_sign = format!(
        "{ALGORITHM}\n{timestamp}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), auth.date.as_bytes());
    let k_region = hmac(&k_date, auth.region.as_bytes());
    let k_service = hmac(&k_region, auth.service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    hex(&hmac(&k_signing, to_sign.as_bytes()))
}

/// Seconds since the epoch of `YYYYMMDDTHHMMSSZ`.
pub fn parse_timestamp(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, se) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = (y as i64, mo as i64);
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + (h * 3600 + mi * 60 + se) as i64).ok()
}

/// Whether two signatures are equal, in a time that depends only on their
/// length.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Checks a request's signature with `secret`, its timestamp against
/// `now` (seconds since the epoch).
pub fn verify(
    req: &Signed<'_>,
    auth: &Authorization<'_>,
    secret: &str,
    now: u64,
) -> Result<(), SqsError> {
    let timestamp = req
        .headers
        .text("x-amz-date")
        .ok_or_else(|| incomplete("the request has no X-Amz-Date header"))?;
    let at = parse_timestamp(timestamp)
        .ok_or_else(|| incomplete("X-Amz-Date is not YYYYMMDDTHHMMSSZ"))?;
    if !timestamp.starts_with(auth.date) {
        return Err(SqsError::new(
            Kind::SignatureDoesNotMatch,
            "The Credential's date is not the date of X-Amz-Date.",
        ));
    }
    if at.abs_diff(now) > SKEW_SECS {
        return Err(SqsError::new(
            Kind::RequestExpired,
            format!(
                "Signature expired: {timestamp} is more than {} minutes from the server's time.",
                SKEW_SECS / 60
            ),
        ));
    }
    let canonical = canonical_request(req, auth)?;
    if !same(
        &signature(secret, auth, timestamp, &canonical),
        auth.signature,
    ) {
        return Err(SqsError::new(
            Kind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key (the token) and signing method.",
        ));
    }
    Ok(())
}

/// Checks a whole request's SigV4 signature at `now` (seconds since the
/// epoch): its `Authorization` header read, its scope's service checked,
/// the secret of its access key id found by `secret_of` (which also gives
/// what the caller keeps of the signer), and the signature verified.
pub fn check<'t, T>(
    head: &Head<'_>,
    body: &[u8],
    now: u64,
    secret_of: impl FnOnce(&str) -> Option<(T, &'t str)>,
) -> Result<T, SqsError> {
    let header = head
        .headers
        .get("authorization")
        .ok_or_else(|| {
            SqsError::new(
                Kind::MissingAuthenticationToken,
                "Request is missing Authentication Token (sign it with SigV4: the access key id names a token, the token is the secret).",
            )
        })?;
    let header = std::str::from_utf8(header).map_err(|_| {
        SqsError::new(
            Kind::IncompleteSignature,
            "The Authorization header is not text.",
        )
    })?;
    let auth = parse_authorization(header)?;
    if auth.service != SERVICE {
        return Err(SqsError::new(
            Kind::SignatureDoesNotMatch,
            format!("Credential should be scoped to correct service: '{SERVICE}'."),
        ));
    }
    let (signer, secret) = secret_of(auth.key_id).ok_or_else(|| {
        SqsError::new(
            Kind::InvalidClientTokenId,
            "The security token included in the request is invalid (no token has this access key id).",
        )
    })?;
    let signed = Signed {
        method: head.method,
        path: head.path,
        query: head.query,
        headers: &head.headers,
        body,
    };
    verify(&signed, &auth, secret, now)?;
    Ok(signer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const SUITE_DATE: &str = "20150830T123600Z";

    fn headers<'a>(pairs: &[(&'a str, &'a str)]) -> Headers<'a> {
        Headers::new(pairs.iter().map(|(k, v)| (*k, v.as_bytes())).collect())
    }

    /// A vector of AWS's SigV4 test suite (service `service`, region
    /// us-east-1, AKIDEXAMPLE): the published signature must verify, and
    /// any change of the request must not.
    fn suite(
        method: &str,
        path: &str,
        query: &str,
        extra: &[(&str, &str)],
        body: &[u8],
        signed: &str,
        expected: &str,
    ) {
        let mut pairs = vec![
            ("host", "example.amazonaws.com"),
            ("x-amz-date", SUITE_DATE),
        ];
        pairs.extend_from_slice(extra);
        let h = headers(&pairs);
        let header = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders={signed}, Signature={expected}"
        );
        let auth = parse_authorization(&header).unwrap();
        assert_eq!(auth.key_id, "AKIDEXAMPLE");
        let req = Signed {
            method,
            path,
            query,
            headers: &h,
            body,
        };
        let now = parse_timestamp(SUITE_DATE).unwrap();
        verify(&req, &auth, SUITE_SECRET, now).unwrap();
        assert_eq!(
            verify(&req, &auth, "another secret", now).unwrap_err().kind,
            Kind::SignatureDoesNotMatch
        );
        let other = Signed {
            body: b"tampered",
            ..req
        };
        assert_eq!(
            verify(&other, &auth, SUITE_SECRET, now).unwrap_err().kind,
            Kind::SignatureDoesNotMatch
        );
    }

    #[test]
    fn the_aws_test_suite_vectors_verify() {
        suite(
            "GET",
            "/",
            "",
            &[],
            b"",
            "host;x-amz-date",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        );
        suite(
            "POST",
            "/",
            "",
            &[],
            b"",
            "host;x-amz-date",
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        );
        suite(
            "GET",
            "/",
            "Param2=value2&Param1=value1",
            &[],
            b"",
            "host;x-amz-date",
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        );
        suite(
            "POST",
            "/",
            "Param1=value1",
            &[],
            b"",
            "host;x-amz-date",
            "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
        );
        suite(
            "POST",
            "/",
            "",
            &[("content-type", "application/x-www-form-urlencoded")],
            b"Param1=value1",
            "content-type;host;x-amz-date",
            "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
        );
    }

    #[test]
    fn a_request_signed_by_botocore_for_sqs_verifies() {
        // Signed by botocore 1.44's SigV4Auth (service sqs, eu-west-1),
        // the way boto3 signs a SendMessage.
        let body =
            br#"{"QueueUrl":"http://127.0.0.1:9324/000000000000/orders","MessageBody":"hi"}"#;
        let h = headers(&[
            ("content-type", "application/x-amz-json-1.0"),
            ("host", "127.0.0.1:9324"),
            ("x-amz-date", "20261201T120000Z"),
            ("x-amz-target", "AmazonSQS.SendMessage"),
            ("x-amzn-query-mode", "true"),
        ]);
        let header = "AWS4-HMAC-SHA256 Credential=fila-app/20261201/eu-west-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target;x-amzn-query-mode, Signature=defeb7c88a1b751ea0d798403ba60aa88d39a592bf7b5de83266dcc282c8e425";
        let auth = parse_authorization(header).unwrap();
        let req = Signed {
            method: "POST",
            path: "/",
            query: "",
            headers: &h,
            body,
        };
        let canonical = canonical_request(&req, &auth).unwrap();
        assert!(
            canonical.ends_with("b19332b86c59cba13e8a9fd991044fa02b9cd44902ede6b4c37499d0b96a8c70")
        );
        let now = parse_timestamp("20261201T120000Z").unwrap();
        verify(&req, &auth, "s3cret token with spaces", now).unwrap();
        // Fifteen minutes either side is taken; more is expired.
        verify(&req, &auth, "s3cret token with spaces", now + SKEW_SECS).unwrap();
        verify(&req, &auth, "s3cret token with spaces", now - SKEW_SECS).unwrap();
        assert_eq!(
            verify(&req, &auth, "s3cret token with spaces", now + SKEW_SECS + 1)
                .unwrap_err()
                .kind,
            Kind::RequestExpired
        );
    }

    #[test]
    fn check_reads_the_header_finds_the_secret_and_verifies() {
        let body =
            br#"{"QueueUrl":"http://127.0.0.1:9324/000000000000/orders","MessageBody":"hi"}"#;
        let signed = "AWS4-HMAC-SHA256 Credential=fila-app/20261201/eu-west-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target;x-amzn-query-mode, Signature=defeb7c88a1b751ea0d798403ba60aa88d39a592bf7b5de83266dcc282c8e425";
        let request = |authorization: Option<&'static str>| {
            let mut pairs = vec![
                ("content-type", "application/x-amz-json-1.0"),
                ("host", "127.0.0.1:9324"),
                ("x-amz-date", "20261201T120000Z"),
                ("x-amz-target", "AmazonSQS.SendMessage"),
                ("x-amzn-query-mode", "true"),
            ];
            pairs.extend(authorization.map(|a| ("Authorization", a)));
            Head {
                method: "POST",
                path: "/",
                query: "",
                headers: headers(&pairs),
            }
        };
        let now = parse_timestamp("20261201T120000Z").unwrap();
        let secret_of = |id: &str| (id == "fila-app").then_some((7u32, "s3cret token with spaces"));
        assert_eq!(
            check(&request(Some(signed)), body, now, secret_of).unwrap(),
            7
        );
        let kind = |head: &Head<'_>, body: &[u8], now: u64| {
            check(head, body, now, secret_of).unwrap_err().kind
        };
        assert_eq!(
            kind(&request(None), body, now),
            Kind::MissingAuthenticationToken
        );
        assert_eq!(
            kind(&request(Some(signed)), b"{}", now),
            Kind::SignatureDoesNotMatch
        );
        assert_eq!(
            kind(&request(Some(signed)), body, now + SKEW_SECS + 1),
            Kind::RequestExpired
        );
        let other_service = signed.replace("/sqs/", "/sns/").leak();
        assert_eq!(
            kind(&request(Some(other_service)), body, now),
            Kind::SignatureDoesNotMatch
        );
        let other_key = signed.replace("fila-app", "nobody").leak();
        assert_eq!(
            kind(&request(Some(other_key)), body, now),
            Kind::InvalidClientTokenId
        );
    }

    #[test]
    fn malformed_authorization_headers_are_incomplete() {
        for bad in [
            "",
            "AWS4-HMAC-SHA1 Credential=a/20150830/r/s/aws4_request, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20150830/r/s, SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000",
            "AWS4-HMAC-SHA256 Credential=a/20150830/r/s/aws4_request, SignedHeaders=x-amz-date, Signature=0000000000000000000000000000000000000000000000000000000000000000",
            "AWS4-HMAC-SHA256 Credential=a/20150830/r/s/aws4_request, SignedHeaders=host, Signature=zz",
            "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(parse_authorization(bad).unwrap_err().kind, Kind::IncompleteSignature, "{bad}");
        }
    }

    #[test]
    fn timestamps_parse_to_epoch_seconds() {
        assert_eq!(parse_timestamp("19700101T000000Z"), Some(0));
        assert_eq!(parse_timestamp("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_timestamp("20240229T235959Z"), Some(1_709_251_199));
        for bad in [
            "20150830T123600",
            "2015-08-30T12:36:00Z",
            "20151330T123600Z",
            "2015083xT123600Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_and_queries_are_made_canonical_as_the_signers_do() {
        assert_eq!(canonical_uri("/"), "/");
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/a/./b/../c//d/"), "/a/c/d/");
        assert_eq!(canonical_uri("/a%20b"), "/a%2520b");
        assert_eq!(canonical_query("b=2&a=1&a=0"), "a=0&a=1&b=2");
        assert_eq!(canonical_query("k=a%20b&x"), "k=a%20b&x=");
        assert_eq!(canonical_query("k=a+b~"), "k=a%20b~");
    }
}
