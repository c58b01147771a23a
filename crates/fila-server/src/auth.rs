//! Access control: tokens, each with grants of permissions on a queue name
//! or a name prefix.

use fila_proto::Request;

/// What a grant allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// Put and cancel scheduled messages.
    Send,
    /// Receive, peek, and act on received messages by receipt.
    Receive,
    /// Create, change, delete, purge, stats, redrive.
    Manage,
}

impl Permission {
    /// `send`, `receive` or `manage`.
    pub fn parse(s: &str) -> Option<Permission> {
        match s {
            "send" => Some(Permission::Send),
            "receive" => Some(Permission::Receive),
            "manage" => Some(Permission::Manage),
            _ => None,
        }
    }
}

/// Permissions on a queue name, or on names starting with a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pattern: String,
    prefix: bool,
    send: bool,
    receive: bool,
    manage: bool,
}

impl Grant {
    /// `queues` is a name or `prefix*` (`*` alone: every queue).
    pub fn new(queues: &str, permissions: &[Permission]) -> Grant {
        let (pattern, prefix) = match queues.strip_suffix('*') {
            Some(p) => (p.to_owned(), true),
            None => (queues.to_owned(), false),
        };
        Grant {
            pattern,
            prefix,
            send: permissions.contains(&Permission::Send),
            receive: permissions.contains(&Permission::Receive),
            manage: permissions.contains(&Permission::Manage),
        }
    }

    fn covers(&self, queue: &str) -> bool {
        if self.prefix {
            queue.starts_with(&self.pattern)
        } else {
            queue == self.pattern
        }
    }

    fn allows(&self, p: Permission) -> bool {
        match p {
            Permission::Send => self.send,
            Permission::Receive => self.receive,
            Permission::Manage => self.manage,
        }
    }
}

/// One configured token: its secret, its access key id, the certificate
/// names that stand for it, its grants.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// What a client presents in an auth frame (none: only a client
    /// certificate stands for it).
    secret: Option<String>,
    /// The access key id for SigV4 (the SQS API), if it has one.
    id: Option<String>,
    /// Names a verified client certificate may carry to stand for it.
    certificates: Vec<String>,
    grants: Vec<Grant>,
}

/// The configured tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenTable {
    entries: Vec<Entry>,
}

/// A token that a connection presented, by its index in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenId(usize);

impl TokenTable {
    /// Adds a token.
    pub fn add(&mut self, token: String, grants: Vec<Grant>) {
        self.add_with_id(None, token, grants);
    }

    /// Adds a token with an access key id: an SQS request signed (SigV4)
    /// with that id and the token as the secret acts with its grants.
    pub fn add_with_id(&mut self, id: Option<String>, token: String, grants: Vec<Grant>) {
        self.add_entry(id, Some(token), Vec::new(), grants);
    }

    /// Adds a token that a client certificate carrying one of
    /// `certificates` (a DNS or URI subject alternative name, or the
    /// subject's common name) stands for; `secret`, if any, works too.
    pub fn add_entry(
        &mut self,
        id: Option<String>,
        secret: Option<String>,
        certificates: Vec<String>,
        grants: Vec<Grant>,
    ) {
        self.entries.push(Entry {
            secret,
            id,
            certificates,
            grants,
        });
    }

    /// The token whose access key id is `id`, and its secret (ids are not
    /// secret: a plain comparison).
    pub fn by_id(&self, id: &str) -> Option<(TokenId, &str)> {
        self.entries.iter().enumerate().find_map(|(i, e)| {
            (e.id.as_deref() == Some(id))
                .then_some(e.secret.as_deref())
                .flatten()
                .map(|s| (TokenId(i), s))
        })
    }

    /// The first token that one of a client certificate's names stands
    /// for.
    pub fn by_certificate(&self, names: &[String]) -> Option<TokenId> {
        self.entries
            .iter()
            .position(|e| e.certificates.iter().any(|c| names.contains(c)))
            .map(TokenId)
    }

    /// Whether no token is configured (no authentication).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The token with this text. Compares every token, each over every
    /// byte presented whatever the lengths, so the time taken depends on
    /// neither where a guess first differs nor whether its length is right.
    pub fn find(&self, presented: &str) -> Option<TokenId> {
        let mut found = None;
        for (i, e) in self.entries.iter().enumerate() {
            let Some(token) = &e.secret else {
                continue;
            };
            if constant_time_eq(token.as_bytes(), presented.as_bytes()) && found.is_none() {
                found = Some(TokenId(i));
            }
        }
        found
    }

    /// The access key id of `token`, if it has one (how the console names
    /// who is signed in without showing a secret).
    pub fn id_of(&self, token: TokenId) -> Option<&str> {
        self.entries.get(token.0)?.id.as_deref()
    }

    /// Whether `token` may do `p` on every queue (a grant on `*`): what
    /// server-wide actions (a reload) need.
    pub fn allows_all(&self, token: TokenId, p: Permission) -> bool {
        self.entries[token.0]
            .grants
            .iter()
            .any(|g| g.prefix && g.pattern.is_empty() && g.allows(p))
    }

    /// Whether `token` may do `p` on `queue`.
    pub fn allows(&self, token: TokenId, queue: &str, p: Permission) -> bool {
        self.entries[token.0]
            .grants
            .iter()
            .any(|g| g.covers(queue) && g.allows(p))
    }

    /// Whether `token` may see `queue` at all (for listing).
    pub fn sees(&self, token: TokenId, queue: &str) -> bool {
        self.entries[token.0].grants.iter().any(|g| g.covers(queue))
    }

    /// The names starting with `prefix` that `token` may see, as ranges to
    /// list: (a prefix every name of the range starts with, whether the
    /// range is that one exact name). A list walks these and nothing else,
    /// so its page and its cursor hold only names the token may see.
    pub fn visible_ranges(&self, token: TokenId, prefix: &str) -> Vec<Range> {
        let mut ranges: Vec<Range> = self.entries[token.0]
            .grants
            .iter()
            .filter_map(|g| {
                if !g.prefix {
                    return g.pattern.starts_with(prefix).then(|| Range {
                        prefix: g.pattern.clone(),
                        exact: true,
                    });
                }
                if g.pattern.starts_with(prefix) {
                    Some(Range {
                        prefix: g.pattern.clone(),
                        exact: false,
                    })
                } else if prefix.starts_with(&g.pattern) {
                    Some(Range {
                        prefix: prefix.to_owned(),
                        exact: false,
                    })
                } else {
                    None
                }
            })
            .collect();
        ranges.sort_unstable_by(|a, b| a.prefix.cmp(&b.prefix));
        ranges.dedup();
        ranges
    }
}

/// Whether `secret` and `guess` are equal, in a time that depends only on
/// the guess's length: every byte of the guess is compared (against the
/// secret's bytes, cycled), with no early exit.
fn constant_time_eq(secret: &[u8], guess: &[u8]) -> bool {
    let mut diff = (secret.len() ^ guess.len()) as u64;
    for (i, g) in guess.iter().enumerate() {
        let s = if secret.is_empty() {
            0
        } else {
            secret[i % secret.len()]
        };
        diff |= u64::from(s ^ g);
    }
    std::hint::black_box(diff) == 0
}

/// Queue names to list: those starting with `prefix`, or exactly it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// Every name of the range starts with it.
    pub prefix: String,
    /// The range is this one name.
    pub exact: bool,
}

impl Range {
    /// Every name starting with `prefix`.
    pub fn all(prefix: &str) -> Range {
        Range {
            prefix: prefix.to_owned(),
            exact: false,
        }
    }
}

/// The queue and permission a request needs, if any.
pub fn needs(req: &Request) -> Option<(&str, Permission)> {
    Some((crate::ops::queue_of(req)?, crate::ops::of(req).grant?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_match_names_and_prefixes() {
        let mut t = TokenTable::default();
        t.add(
            "a".into(),
            vec![
                Grant::new("orders-*", &[Permission::Send]),
                Grant::new("audit", &[Permission::Manage]),
            ],
        );
        let id = t.find("a").unwrap();
        assert!(t.allows(id, "orders-eu", Permission::Send));
        assert!(!t.allows(id, "orders-eu", Permission::Receive));
        assert!(t.allows(id, "audit", Permission::Manage));
        assert!(!t.allows(id, "audit-2", Permission::Manage));
        assert!(t.find("b").is_none());
        assert!(t.find("").is_none());
        assert!(t.find("aa").is_none(), "a longer guess");
        assert!(constant_time_eq(b"secret", b"secret"));
        for guess in ["", "s", "secre", "secreT", "secrets", "secretsecret"] {
            assert!(!constant_time_eq(b"secret", guess.as_bytes()), "{guess}");
        }
        assert!(!constant_time_eq(b"", b"x") && constant_time_eq(b"", b""));
        assert!(t.sees(id, "orders-x") && !t.sees(id, "billing"));
    }

    #[test]
    fn a_token_is_found_by_its_access_key_id() {
        let mut t = TokenTable::default();
        t.add("plain".into(), vec![]);
        t.add_with_id(
            Some("app".into()),
            "secret".into(),
            vec![Grant::new("*", &[Permission::Send])],
        );
        let (id, secret) = t.by_id("app").unwrap();
        assert_eq!(secret, "secret");
        assert_eq!(Some(id), t.find("secret"));
        assert!(t.allows(id, "q", Permission::Send));
        assert!(t.by_id("plain").is_none() && t.by_id("").is_none());
    }

    #[test]
    fn a_certificate_name_stands_for_its_token_and_a_secretless_token_is_never_found_by_text() {
        let mut t = TokenTable::default();
        t.add("plain".into(), vec![]);
        t.add_entry(
            None,
            None,
            vec!["worker-1.example".into(), "spiffe://fila/w".into()],
            vec![Grant::new("*", &[Permission::Manage])],
        );
        let id = t
            .by_certificate(&["other".into(), "spiffe://fila/w".into()])
            .unwrap();
        assert!(t.allows(id, "q", Permission::Manage) && t.allows_all(id, Permission::Manage));
        assert!(t.by_certificate(&["worker-2.example".into()]).is_none());
        assert!(t.by_certificate(&[]).is_none());
        assert!(t.find("").is_none(), "no secret is not an empty secret");
        let plain = t.find("plain").unwrap();
        assert!(!t.allows_all(plain, Permission::Manage));
    }
}
