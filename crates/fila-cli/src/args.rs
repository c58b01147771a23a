//! The command line as the commands read it: positionals and options,
//! the connection's flags and the client they make, receipts.

use super::*;

/// The command line, split into positionals and `--flag value` options.
pub(super) struct Args {
    pub(super) positional: Vec<String>,
    pub(super) options: Vec<(String, Option<String>)>,
}

pub(super) const SWITCHES: [&str; 7] = [
    "--dlq",
    "--json",
    "--if-exists",
    "--tls",
    "--receive",
    "--send",
    "--preview",
];

/// Options every command takes.
pub(super) const CONNECTION_FLAGS: [&str; 8] = [
    "--addr",
    "--token",
    "--json",
    "--tls",
    "--ca",
    "--cert",
    "--key",
    "--server-name",
];

impl Args {
    pub(super) fn parse(raw: Vec<String>) -> Result<Args, Failure> {
        let mut positional = Vec::new();
        let mut options = Vec::new();
        let mut it = raw.into_iter();
        while let Some(a) = it.next() {
            if let Some(stripped) = a.strip_prefix("--") {
                if stripped.is_empty() {
                    positional.extend(it.by_ref());
                    break;
                }
                if SWITCHES.contains(&a.as_str()) {
                    options.push((a, None));
                } else {
                    let v = it
                        .next()
                        .ok_or_else(|| Failure::Usage(format!("{a} needs a value")))?;
                    options.push((a, Some(v)));
                }
            } else {
                positional.push(a);
            }
        }
        Ok(Args {
            positional,
            options,
        })
    }

    pub(super) fn flag(&self, name: &str) -> bool {
        self.options.iter().any(|(k, _)| k == name)
    }

    pub(super) fn value(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    pub(super) fn values(&self, name: &str) -> Vec<&str> {
        self.options
            .iter()
            .filter(|(k, _)| k == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }

    pub(super) fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, Failure> {
        self.value(name)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| Failure::Usage(format!("{name}: {v:?} is not a number")))
            })
            .transpose()
    }

    pub(super) fn pos(&self, i: usize, what: &str) -> Result<&str, Failure> {
        self.positional
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| Failure::Usage(format!("missing {what}")))
    }

    pub(super) fn check_known(&self, known: &[&str]) -> Result<(), Failure> {
        for (k, _) in &self.options {
            if !known.contains(&k.as_str()) && !CONNECTION_FLAGS.contains(&k.as_str()) {
                return Err(Failure::Usage(format!("unknown option {k}")));
            }
        }
        Ok(())
    }
}

/// The receipts given from positional `from` on (at least one).
pub(super) fn receipts_from(a: &Args, from: usize) -> Result<Vec<Receipt>, Failure> {
    let receipts = a.positional[from..]
        .iter()
        .map(|r| parse_receipt(r))
        .collect::<Result<Vec<_>, _>>()?;
    if receipts.is_empty() {
        return Err(Failure::Usage("missing receipts".into()));
    }
    Ok(receipts)
}

pub(super) fn parse_receipt(s: &str) -> Result<Receipt, Failure> {
    let bad = || {
        Failure::Usage(format!(
            "{s:?} is not a receipt ({} hex digits)",
            2 * fila_client::RECEIPT_LEN
        ))
    };
    if s.len() != 2 * fila_client::RECEIPT_LEN || !s.is_ascii() {
        return Err(bad());
    }
    let mut r = [0u8; fila_client::RECEIPT_LEN];
    for (i, b) in r.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).map_err(|_| bad())?;
    }
    Ok(r)
}

pub(super) fn connect(a: &Args) -> Result<Client, Failure> {
    Ok(Client::connect(client_options(a)?)?)
}

/// The client's options the flags and the environment give.
pub(super) fn client_options(a: &Args) -> Result<ClientOptions, Failure> {
    let addr = a
        .value("--addr")
        .map(str::to_owned)
        .or_else(|| std::env::var("FILA_ADDR").ok())
        .unwrap_or_else(|| "127.0.0.1:7700".into());
    let mut options = ClientOptions::new(addr);
    if fila_client::TlsOptions::wanted(a.flag("--tls")) || options.tls.is_some() {
        options.tls = Some(fila_client::TlsOptions::from_settings(|f| {
            a.value(f).map(str::to_owned)
        }));
    } else if ["--ca", "--cert", "--key", "--server-name"]
        .iter()
        .any(|f| a.value(f).is_some())
    {
        return Err(Failure::Usage(
            "--ca, --cert, --key and --server-name need TLS (--tls, or a filas:// address)".into(),
        ));
    }
    if let Some(t) = a
        .value("--token")
        .map(str::to_owned)
        .or_else(|| std::env::var("FILA_TOKEN").ok())
    {
        options = options.token(t);
    }
    Ok(options)
}

pub(super) fn qref(name: &str, dlq: bool) -> QueueRef {
    QueueRef {
        name: name.into(),
        dlq,
    }
}
