//! Console sessions: who is signed in, by a random id in an HttpOnly,
//! SameSite=Strict cookie; each with its own CSRF token, which every form
//! that changes anything carries and every POST must match.
//!
//! A session keeps the token's text, not its place in the token table:
//! each request looks the token up in the tokens of the last reload, so a
//! token removed by a reload ends its sessions at once. Without tokens a
//! session is anonymous (the console is on loopback, as the other
//! listeners). At most [`SESSIONS_MAX`] live at once (the least recently
//! used goes first); one ends [`IDLE`] after its last request, and
//! [`LIFETIME`] after it began whatever it did.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fila_http::Headers;

/// Sessions held at once.
pub const SESSIONS_MAX: usize = 256;
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The session cookie's name, before the console's port: cookies are not
/// kept apart by port, and two servers on one host (a cluster's nodes)
/// must not overwrite each other's sessions.
pub const COOKIE: &str = "fila_session";
/// The cookie of a sign-in form (its CSRF token, before any session).
pub const PRE_COOKIE: &str = "fila_signin";

/// The names of the session and sign-in cookies of a console on `port`.
pub fn cookie_names(port: u16) -> (String, String) {
    (format!("{COOKIE}_{port}"), format!("{PRE_COOKIE}_{port}"))
}

/// 32 random bytes as hex.
pub fn random_id() -> String {
    let mut b = [0u8; 32];
    if getrandom::fill(&mut b).is_err() {
        // No randomness is no session: an id nobody can guess is the
        // whole of its safety.
        panic!("the operating system gave no random bytes");
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// One signed-in browser.
pub struct Session {
    /// The token it signed in with (`None`: the server has no tokens).
    pub token: Option<String>,
    /// What its forms carry.
    pub csrf: String,
    /// A message for its next page (whether it is good news, the text).
    pub flash: Option<(bool, String)>,
    began: Instant,
    seen: Instant,
}

/// Every session, by id.
#[derive(Default)]
pub struct Sessions {
    by_id: HashMap<String, Session>,
}

impl Sessions {
    /// Begins a session for `token`; answers its id. The least recently
    /// used session ends when [`SESSIONS_MAX`] are live.
    pub fn begin(&mut self, token: Option<String>, now: Instant) -> String {
        self.expire(now);
        if self.by_id.len() >= SESSIONS_MAX {
            if let Some(oldest) = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(id, _)| id.clone())
            {
                self.by_id.remove(&oldest);
            }
        }
        let id = random_id();
        self.by_id.insert(
            id.clone(),
            Session {
                token,
                csrf: random_id(),
                flash: None,
                began: now,
                seen: now,
            },
        );
        id
    }

    /// The live session `id`, marked as used now.
    pub fn get(&mut self, id: &str, now: Instant) -> Option<&mut Session> {
        let live = self.by_id.get(id).is_some_and(|s| {
            now.duration_since(s.seen) < IDLE && now.duration_since(s.began) < LIFETIME
        });
        if !live {
            self.by_id.remove(id);
            return None;
        }
        let s = self.by_id.get_mut(id)?;
        s.seen = now;
        Some(s)
    }

    /// Ends session `id`.
    pub fn end(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// Sessions live now.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        self.by_id.retain(|_, s| {
            now.duration_since(s.seen) < IDLE && now.duration_since(s.began) < LIFETIME
        });
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(headers: &Headers<'a>, name: &str) -> Option<&'a str> {
    headers
        .get_all("cookie")
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, the whole site,
/// `Secure` over TLS; `max_age` 0 removes it.
pub fn set_cookie(name: &str, value: &str, secure: bool, max_age: Option<u64>) -> String {
    let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_end_when_idle_or_old_and_the_least_used_makes_room() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        let a = s.begin(Some("tok".into()), t0);
        assert_eq!(a.len(), 64);
        assert!(s.get(&a, t0 + IDLE / 2).is_some());
        assert!(s.get(&a, t0 + IDLE / 2 + IDLE).is_none(), "idle too long");
        let b = s.begin(None, t0);
        let mut t = t0;
        for _ in 0..100 {
            t += IDLE / 2;
            if t.duration_since(t0) >= LIFETIME {
                break;
            }
            assert!(s.get(&b, t).is_some());
        }
        assert!(s.get(&b, t0 + LIFETIME).is_none(), "past its lifetime");
        let first = s.begin(None, t0);
        for i in 0..SESSIONS_MAX {
            s.begin(None, t0 + Duration::from_millis(1 + i as u64));
        }
        assert_eq!(s.len(), SESSIONS_MAX);
        assert!(
            s.get(&first, t0 + Duration::from_secs(1)).is_none(),
            "made room"
        );
        assert!(s.get("not an id", t0).is_none());
    }

    #[test]
    fn cookies_are_found_by_name_and_set_strict() {
        let h = Headers::new(vec![
            ("Cookie", b"a=1; fila_session=abc"),
            ("accept", b"*/*"),
            ("cookie", b"b=2"),
        ]);
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        let c = set_cookie(COOKIE, "x", true, None);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(same_secret("abc", "abc") && !same_secret("abc", "abd") && !same_secret("a", "ab"));
    }
}
