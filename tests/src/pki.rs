//! Certificates minted for tests (rcgen): a CA, server certificates for
//! names, client certificates for names, expired ones, written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate authority that signs test certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// Its certificate, as a PEM file.
    pub cert: PathBuf,
}

/// A certificate and its key, as PEM files.
pub struct Minted {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// How a minted certificate is made.
pub struct Leaf<'a> {
    /// Subject alternative names: DNS names, IP addresses, `spiffe://`
    /// URIs (told apart by their form).
    pub names: &'a [&'a str],
    /// The subject's common name.
    pub common_name: &'a str,
    /// For a client (client auth) rather than a server.
    pub client: bool,
    /// Already expired.
    pub expired: bool,
}

impl TestCa {
    /// A new CA named `name`, its certificate written to `dir/<file>.pem`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a CA");
        let cert = dir.join(format!("{}.pem", file_name(name)));
        std::fs::write(&cert, issuer.pem()).expect("write the CA");
        TestCa { issuer, cert }
    }

    /// A certificate this CA signs, written to `dir/<file>.crt|.key`.
    pub fn mint(&self, dir: &Path, file: &str, leaf: Leaf<'_>) -> Minted {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        for n in leaf.names {
            let san = if let Ok(ip) = n.parse() {
                SanType::IpAddress(ip)
            } else if n.contains("://") {
                SanType::URI(n.to_string().try_into().expect("a URI"))
            } else {
                SanType::DnsName(n.to_string().try_into().expect("a DNS name"))
            };
            params.subject_alt_names.push(san);
        }
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name);
        params.extended_key_usages = vec![if leaf.client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if leaf.expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let minted = Minted {
            cert: dir.join(format!("{file}.crt")),
            key: dir.join(format!("{file}.key")),
        };
        std::fs::write(&minted.cert, cert.pem()).expect("write the certificate");
        std::fs::write(&minted.key, key.serialize_pem()).expect("write the key");
        minted
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self, dir: &Path, file: &str) -> Minted {
        self.mint(
            dir,
            file,
            Leaf {
                names: &["localhost", "127.0.0.1"],
                common_name: "fila test server",
                client: false,
                expired: false,
            },
        )
    }

    /// A client certificate with common name `name` (and no SAN).
    pub fn client(&self, dir: &Path, name: &str) -> Minted {
        self.mint(
            dir,
            &file_name(name),
            Leaf {
                names: &[],
                common_name: name,
                client: true,
                expired: false,
            },
        )
    }
}

fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// A raw rustls client connection to `localhost` that trusts the CAs of the
/// PEM file `ca` (none: no CA at all, for a client that only writes its
/// ClientHello), for tests that speak TLS below the fila clients.
pub fn rustls_connection(ca: Option<&Path>) -> rustls::ClientConnection {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).expect("the CA file") {
            roots.add(c.expect("a certificate")).expect("a CA");
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("a connection")
}
