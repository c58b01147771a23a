//! Pages as text: every value a user or a client chose (queue names,
//! payloads, attributes, reasons, tokens' errors) goes through [`Html::text`]
//! or [`Html::attr`], which escape it, so it shows as those characters and
//! never as markup. Markup is only written from literals here.

use std::fmt::Write;

/// `s` with `&`, `<`, `>`, `"` and `'` escaped (text and attribute values).
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `s` percent-encoded for a URL's path segment or query value (queue
/// names are `[A-Za-z0-9_.-]`, but nothing is assumed).
pub fn url(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// A page being written.
#[derive(Default)]
pub struct Html {
    out: String,
}

impl Html {
    /// Markup from a literal of this module's callers (never user data).
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.out.push_str(markup);
        self
    }

    /// Text, escaped.
    pub fn text(&mut self, s: &str) -> &mut Self {
        self.out.push_str(&escape(s));
        self
    }

    /// `<tag class="class">text</tag>`, the text escaped.
    pub fn el(&mut self, tag: &'static str, class: &'static str, s: &str) -> &mut Self {
        let _ = write!(self.out, "<{tag}");
        if !class.is_empty() {
            let _ = write!(self.out, " class=\"{class}\"");
        }
        self.out.push('>');
        self.text(s);
        let _ = write!(self.out, "</{tag}>");
        self
    }

    /// `<a href="href">text</a>`: `href` is built by the console from
    /// escaped parts ([`url`]); it is escaped again as an attribute.
    pub fn link(&mut self, href: &str, s: &str) -> &mut Self {
        self.out.push_str("<a href=\"");
        self.text(href);
        self.out.push_str("\">");
        self.text(s);
        self.out.push_str("</a>");
        self
    }

    /// A table row of cells, each escaped.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) -> &mut Self {
        self.out.push_str("<tr>");
        for c in cells {
            self.el("td", "", c.as_ref());
        }
        self.out.push_str("</tr>");
        self
    }

    /// A table's head row.
    pub fn head_row(&mut self, cells: &[&str]) -> &mut Self {
        self.out.push_str("<tr>");
        for c in cells {
            self.el("th", "", c);
        }
        self.out.push_str("</tr>");
        self
    }

    /// `<form method="post" action="action">` with the session's CSRF
    /// token; close it with `</form>`.
    pub fn form(&mut self, action: &str, csrf: &str) -> &mut Self {
        self.out.push_str("<form method=\"post\" action=\"");
        self.text(action);
        self.out
            .push_str("\"><input type=\"hidden\" name=\"csrf\" value=\"");
        self.text(csrf);
        self.out.push_str("\">");
        self
    }

    /// A hidden form field.
    pub fn hidden(&mut self, name: &'static str, value: &str) -> &mut Self {
        let _ = write!(self.out, "<input type=\"hidden\" name=\"{name}\" value=\"");
        self.text(value);
        self.out.push_str("\">");
        self
    }

    /// A labelled text field.
    pub fn field(&mut self, label: &str, name: &'static str, value: &str) -> &mut Self {
        self.out.push_str("<label>");
        self.text(label);
        let _ = write!(self.out, " <input name=\"{name}\" value=\"");
        self.text(value);
        self.out.push_str("\"></label>");
        self
    }

    /// A submit button; `danger` styles it as one.
    pub fn button(&mut self, s: &str, danger: bool) -> &mut Self {
        self.out.push_str(if danger {
            "<button type=\"submit\" class=\"danger\">"
        } else {
            "<button type=\"submit\">"
        });
        self.text(s);
        self.out.push_str("</button>");
        self
    }

    /// A chart of `series` (each a label, a CSS class and its points,
    /// oldest first) over `span` samples: an SVG of polylines, the y scale
    /// from 0 to the largest point, with a legend.
    pub fn chart(&mut self, title: &str, span: usize, series: &[(&str, &str, Vec<u64>)]) {
        let (w, h) = (600.0f64, 120.0f64);
        let max = series
            .iter()
            .flat_map(|(_, _, p)| p.iter().copied())
            .max()
            .unwrap_or(0)
            .max(1);
        self.out.push_str("<figure class=\"chart\"><figcaption>");
        self.text(title);
        let _ = write!(self.out, " <span class=\"muted\">(max {max})</span>");
        self.out.push_str(
            "</figcaption><svg viewBox=\"0 0 600 120\" preserveAspectRatio=\"none\" role=\"img\">",
        );
        for (_, class, points) in series {
            self.polyline(class, points, span, (w, h), max);
        }
        self.out.push_str("</svg><div class=\"legend\">");
        for (label, class, points) in series {
            let _ = write!(self.out, "<span class=\"key {}\">", escape(class));
            self.text(label);
            let _ = write!(self.out, " {}</span>", points.last().copied().unwrap_or(0));
        }
        self.out.push_str("</div></figure>");
    }

    /// A sparkline of `points` over `span` samples (a table cell's chart).
    pub fn spark(&mut self, class: &str, span: usize, points: &[u64]) {
        let max = points.iter().copied().max().unwrap_or(0).max(1);
        self.out.push_str(
            "<svg class=\"spark\" viewBox=\"0 0 120 24\" preserveAspectRatio=\"none\" role=\"img\">",
        );
        self.polyline(class, points, span, (120.0, 24.0), max);
        self.out.push_str("</svg>");
    }

    /// One series as an SVG polyline in a `w` × `h` box, the newest point
    /// at the right edge, scaled to `max`.
    fn polyline(&mut self, class: &str, points: &[u64], span: usize, (w, h): (f64, f64), max: u64) {
        if points.is_empty() {
            return;
        }
        let _ = write!(self.out, "<polyline class=\"{}\" points=\"", escape(class));
        let offset = span.saturating_sub(points.len());
        let step = w / span.max(2).saturating_sub(1) as f64;
        for (i, v) in points.iter().enumerate() {
            let x = (offset + i) as f64 * step;
            let y = h - (*v as f64 * (h - 4.0) / max as f64) - 2.0;
            let _ = write!(self.out, "{x:.1},{y:.1} ");
        }
        self.out.push_str("\"/>");
    }

    /// The page written so far.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A page around `body`: the head (the stylesheet and the script, both
/// served by the console), a bar with who is signed in and a sign-out
/// form, and a flash message when one is due.
pub fn page(
    title: &str,
    who: Option<(&str, &str)>,
    flash: Option<&(bool, String)>,
    body: &str,
) -> String {
    let mut h = Html::default();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<link rel=\"stylesheet\" href=\"/static/console.css\">")
        .raw("<script src=\"/static/console.js\" defer></script><title>");
    h.text(title).raw(" · fila</title></head><body><header>");
    h.raw("<a class=\"brand\" href=\"/\">fila</a>");
    if let Some((label, csrf)) = who {
        h.raw("<span class=\"who\">").text(label).raw("</span>");
        h.form("/signout", csrf)
            .button("Sign out", false)
            .raw("</form>");
    }
    h.raw("</header><main>");
    if let Some((ok, message)) = flash {
        h.raw(if *ok {
            "<p class=\"flash ok\" role=\"status\">"
        } else {
            "<p class=\"flash error\" role=\"alert\">"
        });
        h.text(message).raw("</p>");
    }
    h.out.push_str(body);
    h.raw("</main></body></html>");
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_everywhere_it_goes() {
        let evil = "\"><img src=x onerror=alert(1)><script>alert('x')</script>&";
        let mut h = Html::default();
        h.text(evil)
            .el("td", "", evil)
            .link(&format!("/queues/{}", url(evil)), evil)
            .row(&[evil])
            .hidden("q", evil)
            .field(evil, "f", evil);
        h.chart(evil, 10, &[(evil, "visible", vec![1, 2])]);
        let out = h.finish();
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(!out.contains("\"><img"), "{out}");
        assert!(!out.contains("'x'"), "{out}");
        assert!(out.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"));
        let page = page(evil, Some((evil, evil)), Some(&(false, evil.into())), "");
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<img"), "{page}");
    }

    #[test]
    fn urls_encode_everything_but_the_unreserved() {
        assert_eq!(url("orders.fifo"), "orders.fifo");
        assert_eq!(url("a b/<\"é"), "a%20b%2F%3C%22%C3%A9");
    }
}
