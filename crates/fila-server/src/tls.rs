//! TLS: the server's certificate and key, the client-certificate check,
//! and a non-blocking TLS stream over a mio socket driven by readiness.
//!
//! One crypto provider, *ring*, chosen explicitly (and installed as the
//! process default at start): it builds in a fraction of aws-lc-rs's time
//! on a small machine (no cmake, no C++ toolchain), its AES-GCM and
//! ChaCha20 are as fast on x86-64 and aarch64 for fila's record sizes, and
//! fila makes no FIPS claim (aws-lc-rs's FIPS module would be the reason to
//! switch). TLS 1.3 and 1.2 are offered.
//!
//! A [`Stream`] is a socket, plain or TLS. The TLS one reads records only
//! while the socket has them and writes only while the socket takes them
//! (never a blocking `complete_io`): the caller's event loop drives it.
//! What rustls holds is bounded: at most [`TLS_SEND_HELD`] bytes of
//! plaintext handed to it and not yet written (counted in the
//! connection's output), one record being read, and at most 16 KiB of
//! decrypted plaintext, which [`Stream::read`] hands on before reading
//! more.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use mio::net::TcpStream;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// Plaintext handed to rustls at once, and held by it until written.
pub const TLS_SEND_HELD: usize = 64 << 10;
/// Records read in one [`Stream::read`] that yield no plaintext before the
/// peer is taken for hostile (a handshake needs a handful).
const RECORDS_WITHOUT_DATA_MAX: usize = 64;
/// The largest PEM file read.
const PEM_FILE_MAX: u64 = 1 << 20;

/// A TLS file or setting that could not be used, in one line.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{field} {path}: {source}")]
    Read {
        /// The setting naming the file.
        field: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A file holds no usable PEM of the kind needed.
    #[error("{field} {path}: {message}")]
    Pem {
        /// The setting naming the file.
        field: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("TLS: {0}")]
    Rustls(String),
}

/// The crypto provider every TLS configuration of the process uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs [`provider`] as the process default (once; a later call, or one
/// after another crate installed one, changes nothing).
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Whether client certificates are asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Asked for; a client without one may still authenticate with a token.
    Optional,
    /// Required: a client without a certificate the CA signed is refused
    /// in the handshake.
    Required,
}

/// The TLS files of a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the server's first.
    pub cert: std::path::PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
    /// CAs whose client certificates are accepted (PEM), if any.
    pub client_ca: Option<std::path::PathBuf>,
    /// With a client CA: whether a certificate is required.
    pub client_auth: ClientAuth,
}

fn read_pem(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let err = |source| TlsError::Read {
        field,
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > PEM_FILE_MAX {
        return Err(TlsError::Pem {
            field,
            path: path.display().to_string(),
            message: format!("larger than {PEM_FILE_MAX} bytes"),
        });
    }
    Ok(bytes)
}

/// The certificates of a PEM file (at least one).
pub fn load_certs(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(field, path)?;
    let pem_err = |message: String| TlsError::Pem {
        field,
        path: path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(pem_err("no CERTIFICATE found".into()));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn load_key(field: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem(field, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        field,
        path: path.display().to_string(),
        message: format!("no private key found ({e})"),
    })
}

/// The CA certificates of the PEM file `path` (setting `field`).
fn ca_roots(field: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in load_certs(field, path)? {
        roots.add(ca).map_err(|e| TlsError::Pem {
            field,
            path: path.display().to_string(),
            message: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// The server's TLS configuration from its files: the certificate and key
/// (which must match), and the client CA when there is one.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = load_certs("tls_cert", &files.cert)?;
    let key = load_key("tls_key", &files.key)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = ca_roots("tls_client_ca", path)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match files.client_auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                ClientAuth::Required => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Rustls(format!("tls_client_ca: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(format!("tls_cert and tls_key: {e}")))?;
    Ok(Arc::new(config))
}

/// TLS between a cluster's nodes: the listener's side (this node's
/// certificate and key, no client certificates — a peer proves itself with
/// the cluster's secret inside) and the caller's (the certificates of the
/// other nodes must chain to the CAs of `ca`).
pub fn peer_configs(
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> Result<(Arc<ServerConfig>, Arc<rustls::ClientConfig>), TlsError> {
    let chain = load_certs("tls_cert", cert)?;
    let key = load_key("tls_key", key)?;
    let provider = provider();
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(format!("tls_cert and tls_key: {e}")))?;
    let roots = ca_roots("cluster.tls_ca", ca)?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((Arc::new(server), Arc::new(client)))
}

/// The names a client certificate stands for: its subject alternative
/// names of type DNS and URI, and its subject's common name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    /// Every name, SANs first.
    pub names: Vec<String>,
}

impl CertNames {
    /// The names of a DER certificate (none when it cannot be parsed; it
    /// was verified already, so that does not happen in practice).
    pub fn of(der: &CertificateDer<'_>) -> CertNames {
        let Ok(cert) = webpki::EndEntityCert::try_from(der) else {
            return CertNames::default();
        };
        let mut names: Vec<String> = cert.valid_dns_names().map(str::to_owned).collect();
        names.extend(cert.valid_uri_names().map(str::to_owned));
        if let Some(cn) = common_name(cert.subject()) {
            names.push(cn);
        }
        CertNames { names }
    }
}

/// The common name (OID 2.5.4.3) of a DER subject (the contents of its
/// RDNSequence), if it has one as a UTF-8, printable or IA5 string.
pub fn common_name(subject: &[u8]) -> Option<String> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (tag, set, rest) = der_item(rdns)?;
        rdns = rest;
        if tag != 0x31 {
            return None;
        }
        let mut atvs = set;
        while !atvs.is_empty() {
            let (tag, atv, rest) = der_item(atvs)?;
            atvs = rest;
            if tag != 0x30 {
                return None;
            }
            let (oid_tag, oid, value) = der_item(atv)?;
            let (value_tag, value, _) = der_item(value)?;
            // UTF8String, PrintableString, IA5String.
            if oid_tag == 0x06 && oid == CN && matches!(value_tag, 0x0c | 0x13 | 0x16) {
                return String::from_utf8(value.to_vec()).ok();
            }
        }
    }
    None
}

/// One DER item: its tag, its contents, what follows it.
fn der_item(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// A connection's socket: plain, or TLS.
pub enum Stream {
    /// Clear text.
    Plain(TcpStream),
    /// TLS (boxed: rustls's state is large).
    Tls(Box<Tls>),
}

/// A TLS connection over a non-blocking socket.
pub struct Tls {
    tcp: TcpStream,
    session: ServerConnection,
    /// Plaintext handed to rustls and not yet written to the socket.
    unsent: usize,
    /// The handshake's end has been reported ([`Stream::handshake_done`]).
    reported: bool,
}

impl Stream {
    /// A TLS stream over `tcp` with `config`.
    pub fn tls(tcp: TcpStream, config: Arc<ServerConfig>) -> Result<Stream, TlsError> {
        let mut session =
            ServerConnection::new(config).map_err(|e| TlsError::Rustls(e.to_string()))?;
        session.set_buffer_limit(Some(TLS_SEND_HELD));
        Ok(Stream::Tls(Box::new(Tls {
            tcp,
            session,
            unsent: 0,
            reported: false,
        })))
    }

    /// The socket, to register with a poll.
    pub fn socket(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.tcp,
        }
    }

    /// Whether this is a TLS stream.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Whether a TLS handshake is still under way.
    pub fn handshaking(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t.session.is_handshaking(),
        }
    }

    /// Once, when a TLS handshake has just ended: the client's certificate
    /// names (`Some(None)` without one).
    pub fn handshake_done(&mut self) -> Option<Option<CertNames>> {
        let Stream::Tls(t) = self else {
            return None;
        };
        if t.reported || t.session.is_handshaking() {
            return None;
        }
        t.reported = true;
        Some(
            t.session
                .peer_certificates()
                .and_then(|c| c.first())
                .map(CertNames::of),
        )
    }

    /// Reads plaintext: `Ok(0)` at the end of the stream (the peer's
    /// close_notify or its closing the socket), `WouldBlock` when the
    /// socket has nothing more now. A TLS error is `InvalidData`, after
    /// the alert saying why was queued (written by [`Stream::write_from`]).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let t = match self {
            Stream::Plain(s) => return s.read(buf),
            Stream::Tls(t) => t,
        };
        for _ in 0..RECORDS_WITHOUT_DATA_MAX {
            match t.session.reader().read(buf) {
                Ok(n) => return Ok(n),
                // The socket closed without close_notify: an end all the
                // same (frames carry their own lengths).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match t.session.read_tls(&mut t.tcp) {
                Ok(0) => {
                    // Whatever was decrypted is taken first; then the end.
                    let _ = t.session.process_new_packets();
                    return match t.session.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(_) => Ok(0),
                    };
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = t.session.process_new_packets() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many TLS records without data",
        ))
    }

    /// Writes `out` until it is empty or the socket would block (through
    /// rustls, which holds at most [`TLS_SEND_HELD`] at once); for TLS also
    /// what the handshake has to send. `Err`: the connection failed.
    pub fn write_from(&mut self, out: &mut BytesMut) -> io::Result<()> {
        let t = match self {
            Stream::Plain(s) => {
                while !out.is_empty() {
                    match s.write(out) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => out.advance(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                return Ok(());
            }
            Stream::Tls(t) => t,
        };
        loop {
            while t.session.wants_write() {
                match t.session.write_tls(&mut t.tcp) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            t.unsent = 0;
            if out.is_empty() || t.session.is_handshaking() {
                return Ok(());
            }
            let n = out.len().min(TLS_SEND_HELD);
            let took = t.session.writer().write(&out[..n])?;
            if took == 0 {
                return Ok(());
            }
            out.advance(took);
            t.unsent = took;
        }
    }

    /// Plaintext handed to rustls and not yet on the socket.
    pub fn unsent(&self) -> usize {
        match self {
            Stream::Plain(_) => 0,
            Stream::Tls(t) => t.unsent,
        }
    }

    /// Whether TLS has bytes of its own to write (handshake, alerts, the
    /// records of [`Stream::unsent`]).
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t.session.wants_write(),
        }
    }

    /// Before closing: a TLS stream sends close_notify (as much as the
    /// socket takes now; nothing waits for it).
    pub fn close_notify(&mut self) {
        if let Stream::Tls(t) = self {
            t.session.send_close_notify();
            let mut none = BytesMut::new();
            let _ = self.write_from(&mut none);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_name_is_read_from_a_der_subject() {
        // SEQUENCE contents: SET { SEQ { OID O, "Acme" } }, SET { SEQ { OID CN, "worker-1" } }
        let mut subject = Vec::new();
        for (oid_last, value) in [(0x0a_u8, "Acme"), (0x03, "worker-1")] {
            let mut atv = vec![0x06, 0x03, 0x55, 0x04, oid_last, 0x0c, value.len() as u8];
            atv.extend_from_slice(value.as_bytes());
            let mut seq = vec![0x30, atv.len() as u8];
            seq.extend(atv);
            subject.extend([0x31, seq.len() as u8]);
            subject.extend(seq);
        }
        assert_eq!(common_name(&subject).as_deref(), Some("worker-1"));
        assert_eq!(
            common_name(&subject[..subject.len() - 2]),
            None,
            "cut short"
        );
        assert_eq!(common_name(&[]), None);
        assert_eq!(
            common_name(&[0x31, 0x85, 1, 1, 1, 1, 1]),
            None,
            "a huge length"
        );
    }

    #[test]
    fn missing_and_broken_files_are_one_clear_line() {
        let dir = std::env::temp_dir().join(format!("fila-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a pem file\n").unwrap();
        let files = TlsFiles {
            cert: dir.join("absent.pem"),
            key: garbage.clone(),
            client_ca: None,
            client_auth: ClientAuth::Optional,
        };
        let e = server_config(&files).unwrap_err().to_string();
        assert!(
            e.starts_with("tls_cert ") && e.contains("absent.pem"),
            "{e}"
        );
        let e = load_certs("tls_cert", &garbage).unwrap_err().to_string();
        assert!(e.contains("no CERTIFICATE found"), "{e}");
        let e = load_key("tls_key", &garbage).unwrap_err().to_string();
        assert!(
            e.contains("no private key found") && !e.contains('\n'),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
