//! The web console without its sockets (docs/console.md): its pages and
//! actions (the overview, a queue, its messages, settings, redrive, move
//! tasks, purge: [`page::route`]), HTML written with every value escaped
//! ([`html`]), sign-in sessions with their CSRF tokens and cookies
//! ([`session`]), the figures sampled each second for the charts
//! ([`history`]), and the one script and style sheet ([`assets`]). The
//! pages ask the server for what they show and do through a
//! [`page::Backend`]: the server (`fila-server`'s `server/console/`) serves
//! the pages over HTTP, authorizes and runs their requests on the shards'
//! owners, and knows its own figures. No sockets, no threads here.

#![forbid(unsafe_code)]

mod actions;
pub mod history;
pub mod html;
mod messages;
pub mod page;
pub mod pages;
pub mod session;

/// The console's static files, served as they are.
pub mod assets {
    /// The style sheet (`/assets/console.css`).
    pub const CSS: &str = include_str!("assets/console.css");
    /// The script that refreshes the parts of a page marked live
    /// (`/assets/console.js`).
    pub const JS: &str = include_str!("assets/console.js");
}
