//! TLS for the clients: the server's certificate checked against a CA file
//! and the name the client dialed (or the one given), and a client
//! certificate to present when the server maps certificates to tokens.
//! rustls with the ring provider, as the server.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::ClientError;

/// How to speak TLS to the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates (PEM) the server's certificate must chain to.
    /// Required: fila does not read the system's store.
    pub ca: Option<PathBuf>,
    /// A client certificate chain (PEM) to present, with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the host of
    /// the address).
    pub server_name: Option<String>,
}

fn tls_error(message: String) -> ClientError {
    ClientError::Tls(message)
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| tls_error(format!("{what} {}: {e}", path.display())))
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bytes = read_file(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            tls_error(format!(
                "{what} {}: not PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(tls_error(format!(
            "{what} {}: no CERTIFICATE found",
            path.display()
        )));
    }
    Ok(certs)
}

impl TlsOptions {
    /// The options of a command line: `setting` answers a flag's value
    /// (`--ca`, `--cert`, `--key`, `--server-name`); the first three fall
    /// back to `$FILA_CA`, `$FILA_CERT`, `$FILA_KEY`.
    pub fn from_settings(setting: impl Fn(&str) -> Option<String>) -> TlsOptions {
        let or_env = |flag: &str, var: &str| {
            setting(flag).or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()))
        };
        TlsOptions {
            ca: or_env("--ca", "FILA_CA").map(Into::into),
            cert: or_env("--cert", "FILA_CERT").map(Into::into),
            key: or_env("--key", "FILA_KEY").map(Into::into),
            server_name: setting("--server-name"),
        }
    }

    /// Whether a command line asks for TLS: its `--tls` switch, or
    /// `$FILA_TLS` set to `1` or `true`.
    pub fn wanted(switch: bool) -> bool {
        switch || std::env::var("FILA_TLS").is_ok_and(|v| v == "1" || v == "true")
    }

    /// The rustls configuration these options describe.
    pub fn config(&self) -> Result<Arc<ClientConfig>, ClientError> {
        let ca = self.ca.as_ref().ok_or_else(|| {
            tls_error(
                "a CA file is needed to check the server's certificate (--ca, FILA_CA)".into(),
            )
        })?;
        let mut roots = RootCertStore::empty();
        for c in certs("CA", ca)? {
            roots
                .add(c)
                .map_err(|e| tls_error(format!("CA {}: {e}", ca.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| tls_error(e.to_string()))?
            .with_root_certificates(roots);
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = certs("client certificate", cert)?;
                let bytes = read_file("client key", key)?;
                let key_der = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                    tls_error(format!(
                        "client key {}: no private key found ({e})",
                        key.display()
                    ))
                })?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| tls_error(format!("client certificate and key: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(tls_error(
                "a client certificate needs its key, and a key its certificate (--cert with --key)"
                    .into(),
            )),
        };
        Ok(Arc::new(config))
    }

    /// The name to check the server's certificate against, for `addr`
    /// (`host:port`).
    pub fn name_for(&self, addr: &str) -> Result<ServerName<'static>, ClientError> {
        let host = match &self.server_name {
            Some(n) => n.as_str(),
            None => host_of(addr),
        };
        ServerName::try_from(host.to_owned())
            .map_err(|e| tls_error(format!("server name {host:?}: {e}")))
    }
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    addr.rsplit_once(':').map_or(addr, |(h, _)| h)
}

/// What a TLS connection is made with: the configuration and the name to
/// check.
pub(crate) type TlsSetup = (Arc<ClientConfig>, ServerName<'static>);

/// A client's TLS configuration, built from its options on first use and
/// kept: the CA and certificate files are read once, not at every
/// reconnect (a failure is not kept: the next connect reads them again).
/// The name to check is the one of the address connected to now — after
/// following `not_leader` to another node, that node's host.
#[derive(Default)]
pub(crate) struct TlsCache(std::sync::Mutex<Option<Option<Arc<ClientConfig>>>>);

impl TlsCache {
    pub(crate) fn get(
        &self,
        options: &crate::ClientOptions,
    ) -> Result<Option<TlsSetup>, ClientError> {
        let Some(tls) = &options.tls else {
            return Ok(None);
        };
        let name = tls.name_for(&options.addr)?;
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(config)) = kept.as_ref() {
            return Ok(Some((config.clone(), name)));
        }
        let config = tls.config()?;
        *kept = Some(Some(config.clone()));
        Ok(Some((config, name)))
    }
}

/// A blocking connection: clear text or TLS.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// Over `tcp`: TLS when `tls` is given (the handshake happens on the
    /// first read or write).
    pub(crate) fn new(
        tcp: TcpStream,
        tls: Option<(&Arc<ClientConfig>, ServerName<'static>)>,
    ) -> Result<Transport, ClientError> {
        Ok(match tls {
            None => Transport::Plain(tcp),
            Some((config, name)) => {
                let conn = ClientConnection::new(config.clone(), name)
                    .map_err(|e| tls_error(e.to_string()))?;
                Transport::Tls(Box::new(StreamOwned::new(conn, tcp)))
            }
        })
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.flush(),
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        if let Transport::Tls(t) = self {
            // close_notify, as far as the socket takes it now.
            t.conn.send_close_notify();
            let _ = t.sock.set_nonblocking(true);
            let _ = t.conn.write_tls(&mut t.sock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_taken_from_the_address() {
        assert_eq!(host_of("example.com:7700"), "example.com");
        assert_eq!(host_of("127.0.0.1:7700"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7700"), "::1");
        assert_eq!(host_of("bare"), "bare");
    }

    #[test]
    fn tls_without_a_ca_or_with_half_a_client_certificate_is_one_clear_line() {
        let e = TlsOptions::default().config().unwrap_err().to_string();
        assert!(e.contains("a CA file is needed"), "{e}");
        let o = TlsOptions {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let e = o.config().unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/ca.pem") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn the_name_checked_is_the_host_connected_to_now() {
        // A CA to read: the configuration is built once and kept.
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("fila-client-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ca.pem");
        std::fs::write(&path, ca.pem()).unwrap();
        let mut options = crate::ClientOptions::new("a.example:7700").tls(TlsOptions {
            ca: Some(path.clone()),
            ..TlsOptions::default()
        });
        let cache = TlsCache::default();
        let (first, name) = cache.get(&options).unwrap().unwrap();
        assert_eq!(name, ServerName::try_from("a.example").unwrap());
        // The client followed `not_leader` to another node: its host is
        // the name checked there, with the same configuration.
        options.addr = "b.example:7710".into();
        std::fs::remove_file(&path).unwrap();
        let (kept, name) = cache.get(&options).unwrap().unwrap();
        assert_eq!(name, ServerName::try_from("b.example").unwrap());
        assert!(Arc::ptr_eq(&first, &kept), "the configuration is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
