//! A queue binding's settings: from code (`Settings::default()`, then
//! fields) and from a TOML file with one section per queue, like the Azure
//! trigger's host.json:
//!
//! ```toml
//! [defaults]             # every queue, unless its section says otherwise
//! max_polling_interval_ms = 2000
//!
//! [queues.resize]
//! batch_size = 8
//! max_dequeue_count = 3
//! message_encoding = "base64"
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::WorkerError;

/// How producers encoded the payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// As it is.
    #[default]
    None,
    /// Base64 text (standard alphabet, padding optional), as the Azure
    /// trigger expects by default; decoded before the handler sees it.
    Base64,
}

/// How one queue is worked. Every default is the Azure queue trigger's.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Messages fetched at once, 1–20 (16).
    pub batch_size: u8,
    /// Fetch the next batch when this many or fewer run (batch_size / 2);
    /// at most batch_size + threshold run at once.
    pub new_batch_threshold: usize,
    /// The longest wait between polls after empty or failed ones (1 min).
    pub max_polling_interval: Duration,
    /// The lease taken on each message, renewed while its handler runs
    /// (10 min).
    pub visibility_timeout: Duration,
    /// When a failed message is visible again (0: released as failed, so
    /// the queue's retry policy decides; at once without one).
    pub visibility_timeout_on_failure: Duration,
    /// A message delivered more times than this goes to `<queue>-poison`
    /// (5).
    pub max_dequeue_count: u32,
    /// How producers encoded payloads.
    pub message_encoding: Encoding,
    /// A receive's long-poll wait: an empty one is polled again at once (the
    /// server did the waiting); also the longest a stop waits for the poll
    /// in flight (2 s).
    pub long_poll: Duration,
    /// How long a stop waits for running handlers (30 s).
    pub shutdown_deadline: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            batch_size: 16,
            new_batch_threshold: 8,
            max_polling_interval: Duration::from_secs(60),
            visibility_timeout: Duration::from_secs(600),
            visibility_timeout_on_failure: Duration::ZERO,
            max_dequeue_count: 5,
            message_encoding: Encoding::None,
            long_poll: Duration::from_secs(2),
            shutdown_deadline: Duration::from_secs(30),
        }
    }
}

impl Settings {
    /// The development profile: polls back off to 2 s at most.
    pub fn dev() -> Settings {
        Settings {
            max_polling_interval: Duration::from_secs(2),
            ..Settings::default()
        }
    }

    /// Checks the ranges; a bad setting is named.
    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |field: &'static str, why: String| Err(WorkerError::Setting { field, why });
        if !(1..=20).contains(&self.batch_size) {
            return bad(
                "batch_size",
                format!("must be 1..=20 (got {})", self.batch_size),
            );
        }
        if self.new_batch_threshold > usize::from(self.batch_size) {
            return bad(
                "new_batch_threshold",
                format!(
                    "must be at most batch_size {} (got {})",
                    self.batch_size, self.new_batch_threshold
                ),
            );
        }
        if self.max_dequeue_count == 0 {
            return bad("max_dequeue_count", "must be at least 1".into());
        }
        if self.visibility_timeout < Duration::from_secs(1) {
            return bad(
                "visibility_timeout",
                "must be at least 1 s (it is renewed at a third of it)".into(),
            );
        }
        let max = Duration::from_millis(fila_client::limits::WAIT_MS_MAX);
        if self.long_poll > max {
            return bad("long_poll", format!("must be at most {max:?}"));
        }
        Ok(())
    }

    /// The settings of `queue` in a config file: its section over
    /// `[defaults]` over [`Settings::default`].
    pub fn from_file(path: impl AsRef<Path>, queue: &str) -> Result<Settings, WorkerError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| WorkerError::Config {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Settings::from_toml(&text, queue).map_err(|e| match e {
            WorkerError::Config { why, .. } => WorkerError::Config {
                path: path.display().to_string(),
                why,
            },
            other => other,
        })
    }

    /// Like [`Settings::from_file`], from the file's text.
    pub fn from_toml(text: &str, queue: &str) -> Result<Settings, WorkerError> {
        let file: File = toml::from_str(text).map_err(|e| WorkerError::Config {
            path: "(text)".into(),
            why: e.to_string(),
        })?;
        let mut s = Settings::default();
        file.defaults.apply(&mut s);
        if let Some(q) = file.queues.get(queue) {
            q.apply(&mut s);
        }
        // The threshold follows the batch size unless set.
        if file.defaults.new_batch_threshold.is_none()
            && file
                .queues
                .get(queue)
                .and_then(|q| q.new_batch_threshold)
                .is_none()
        {
            s.new_batch_threshold = usize::from(s.batch_size) / 2;
        }
        s.validate()?;
        Ok(s)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: Section,
    #[serde(default)]
    queues: BTreeMap<String, Section>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    batch_size: Option<u8>,
    new_batch_threshold: Option<usize>,
    max_polling_interval_ms: Option<u64>,
    visibility_timeout_ms: Option<u64>,
    visibility_timeout_on_failure_ms: Option<u64>,
    max_dequeue_count: Option<u32>,
    message_encoding: Option<Encoding>,
    long_poll_ms: Option<u64>,
    shutdown_deadline_ms: Option<u64>,
}

impl Section {
    fn apply(&self, s: &mut Settings) {
        let ms = Duration::from_millis;
        if let Some(v) = self.batch_size {
            s.batch_size = v;
        }
        if let Some(v) = self.new_batch_threshold {
            s.new_batch_threshold = v;
        }
        if let Some(v) = self.max_polling_interval_ms {
            s.max_polling_interval = ms(v);
        }
        if let Some(v) = self.visibility_timeout_ms {
            s.visibility_timeout = ms(v);
        }
        if let Some(v) = self.visibility_timeout_on_failure_ms {
            s.visibility_timeout_on_failure = ms(v);
        }
        if let Some(v) = self.max_dequeue_count {
            s.max_dequeue_count = v;
        }
        if let Some(v) = self.message_encoding {
            s.message_encoding = v;
        }
        if let Some(v) = self.long_poll_ms {
            s.long_poll = ms(v);
        }
        if let Some(v) = self.shutdown_deadline_ms {
            s.shutdown_deadline = ms(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_section_wins_over_defaults_and_the_threshold_follows_the_batch() {
        let text = r#"
            [defaults]
            max_polling_interval_ms = 2000
            batch_size = 10

            [queues.resize]
            batch_size = 8
            max_dequeue_count = 3
            message_encoding = "base64"
        "#;
        let s = Settings::from_toml(text, "resize").unwrap();
        assert_eq!(s.batch_size, 8);
        assert_eq!(s.new_batch_threshold, 4);
        assert_eq!(s.max_dequeue_count, 3);
        assert_eq!(s.message_encoding, Encoding::Base64);
        assert_eq!(s.max_polling_interval, Duration::from_secs(2));
        let other = Settings::from_toml(text, "other").unwrap();
        assert_eq!((other.batch_size, other.new_batch_threshold), (10, 5));
        assert_eq!(other.visibility_timeout, Duration::from_secs(600));
    }

    #[test]
    fn bad_files_and_values_are_named() {
        let e = Settings::from_toml("[queues.q]\nbatch_size = 30\n", "q").unwrap_err();
        assert!(e.to_string().contains("batch_size"), "{e}");
        let e = Settings::from_toml("[queues.q]\nbatch_sise = 3\n", "q").unwrap_err();
        assert!(e.to_string().contains("batch_sise"), "{e}");
        let e = Settings::from_file("/nonexistent/fila-worker.toml", "q").unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/fila-worker.toml"),
            "{e}"
        );
    }

    #[test]
    fn the_defaults_are_the_azure_triggers() {
        let s = Settings::default();
        assert_eq!(
            (s.batch_size, s.new_batch_threshold, s.max_dequeue_count),
            (16, 8, 5)
        );
        assert_eq!(s.visibility_timeout, Duration::from_secs(600));
        assert_eq!(s.visibility_timeout_on_failure, Duration::ZERO);
        assert_eq!(Settings::dev().max_polling_interval, Duration::from_secs(2));
        s.validate().unwrap();
    }
}
