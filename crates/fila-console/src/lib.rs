//! The web console's parts that need no server (docs/console.md): pages'
//! HTML written with every value escaped ([`html`]), sign-in sessions with
//! their CSRF tokens and cookies ([`session`]), the figures sampled each
//! second for the charts ([`history`]), and the one script and style sheet
//! ([`assets`]). No sockets, no threads: the server (`fila-server`'s
//! `server/console/`) serves the pages, reads the figures from the shards'
//! owners, and runs the actions.

#![forbid(unsafe_code)]

pub mod history;
pub mod html;
pub mod session;

/// The console's static files, served as they are.
pub mod assets {
    /// The style sheet (`/assets/console.css`).
    pub const CSS: &str = include_str!("assets/console.css");
    /// The script that refreshes the parts of a page marked live
    /// (`/assets/console.js`).
    pub const JS: &str = include_str!("assets/console.js");
}
