//! XML as the Queue service speaks it: answers written with their text
//! escaped, and request bodies (a message, stored access policies,
//! service properties) read by a small reader of bounded work — no DTD,
//! no entity but the five predefined ones and character references, at
//! most [`DEPTH_MAX`] levels and [`ELEMENTS_MAX`] elements.

use crate::error::{AzureError, Code};

/// What every XML answer starts with.
pub const DECLARATION: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>";
/// The deepest nesting of elements a request body may have.
pub const DEPTH_MAX: usize = 16;
/// The most elements a request body may have.
pub const ELEMENTS_MAX: usize = 1024;

/// Appends `text` to `out` with `&`, `<`, `>`, `"` and `'` escaped.
pub fn escape_into(text: &str, out: &mut String) {
    out.reserve(text.len());
    // Runs of plain text are copied whole; only the six characters below
    // are written one by one (all ASCII: a run ends on a character's end).
    let mut run = 0;
    for (i, b) in text.bytes().enumerate() {
        let escaped = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&apos;",
            // A carriage return would be read back as a line feed.
            b'\r' => "&#xD;",
            _ => continue,
        };
        out.push_str(&text[run..i]);
        out.push_str(escaped);
        run = i + 1;
    }
    out.push_str(&text[run..]);
}

/// Whether `text` can travel as XML 1.0 character data (no control
/// character other than tab, line feed and carriage return, no
/// non-character U+FFFE or U+FFFF).
pub fn is_xml_text(text: &str) -> bool {
    text.chars().all(is_xml_char)
}

fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// Appends `<name>text</name>`.
pub fn element(out: &mut String, name: &str, text: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    escape_into(text, out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// An element read from a request body: its name, the text directly in
/// it, and its child elements (attributes are read and dropped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Element {
    /// Its name.
    pub name: String,
    /// Its text (entities and character references resolved, CDATA
    /// taken as it is).
    pub text: String,
    /// Its children, in order.
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The children named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

fn bad(why: impl std::fmt::Display) -> AzureError {
    AzureError::new(
        Code::InvalidXmlDocument,
        format!("XML specified is not syntactically valid: {why}"),
    )
}

/// Reads a whole document: its one root element.
pub fn parse(body: &[u8]) -> Result<Element, AzureError> {
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8"))?;
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let mut r = Reader {
        s: text.as_bytes(),
        src: text,
        at: 0,
        elements: 0,
    };
    r.prolog()?;
    if r.peek() != Some(b'<') {
        return Err(bad("no root element"));
    }
    let root = r.element(1)?;
    r.misc()?;
    if r.at != r.s.len() {
        return Err(bad("content after the root element"));
    }
    Ok(root)
}

struct Reader<'a> {
    s: &'a [u8],
    src: &'a str,
    at: usize,
    elements: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn starts(&self, p: &str) -> bool {
        self.s[self.at..].starts_with(p.as_bytes())
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    /// Skips past the next `end`.
    fn skip_past(&mut self, end: &str) -> Result<(), AzureError> {
        match self.src[self.at..].find(end) {
            Some(i) => {
                self.at += i + end.len();
                Ok(())
            }
            None => Err(bad(format!("unterminated construct (no {end})"))),
        }
    }

    /// The declaration, comments and space before the root.
    fn prolog(&mut self) -> Result<(), AzureError> {
        self.skip_space();
        if self.starts("<?xml") {
            self.skip_past("?>")?;
        }
        self.misc()
    }

    /// Comments and space; a DTD or processing instruction is refused.
    fn misc(&mut self) -> Result<(), AzureError> {
        loop {
            self.skip_space();
            if self.starts("<!--") {
                self.skip_past("-->")?;
            } else if self.starts("<!") {
                return Err(bad("document type declarations are not accepted"));
            } else if self.starts("<?") {
                return Err(bad("processing instructions are not accepted"));
            } else {
                return Ok(());
            }
        }
    }

    fn name(&mut self) -> Result<String, AzureError> {
        let start = self.at;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':') || c >= 0x80 {
                self.at += 1;
            } else {
                break;
            }
        }
        if self.at == start {
            return Err(bad("a name was expected"));
        }
        Ok(self.src[start..self.at].to_owned())
    }

    /// An element starting at `<`, at nesting `depth`.
    fn element(&mut self, depth: usize) -> Result<Element, AzureError> {
        if depth > DEPTH_MAX {
            return Err(bad(format!("elements nest deeper than {DEPTH_MAX}")));
        }
        self.elements += 1;
        if self.elements > ELEMENTS_MAX {
            return Err(bad(format!("more than {ELEMENTS_MAX} elements")));
        }
        self.at += 1; // '<'
        let name = self.name()?;
        // Attributes: read and dropped.
        loop {
            self.skip_space();
            match self.peek() {
                Some(b'/') => {
                    self.at += 1;
                    if self.peek() != Some(b'>') {
                        return Err(bad("'>' expected"));
                    }
                    self.at += 1;
                    return Ok(Element {
                        name,
                        ..Element::default()
                    });
                }
                Some(b'>') => {
                    self.at += 1;
                    break;
                }
                Some(_) => {
                    self.name()?;
                    self.skip_space();
                    if self.peek() != Some(b'=') {
                        return Err(bad("'=' expected after an attribute's name"));
                    }
                    self.at += 1;
                    self.skip_space();
                    let quote = self.peek().filter(|q| matches!(q, b'"' | b'\''));
                    let Some(q) = quote else {
                        return Err(bad("an attribute's value must be quoted"));
                    };
                    self.at += 1;
                    let end = self.s[self.at..].iter().position(|&c| c == q);
                    let Some(end) = end else {
                        return Err(bad("unterminated attribute value"));
                    };
                    if self.s[self.at..self.at + end].contains(&b'<') {
                        return Err(bad("'<' in an attribute value"));
                    }
                    self.at += end + 1;
                }
                None => return Err(bad("unterminated start tag")),
            }
        }
        let mut element = Element {
            name,
            ..Element::default()
        };
        loop {
            match self.peek() {
                None => return Err(bad(format!("element {} is not closed", element.name))),
                Some(b'<') => {
                    if self.starts("</") {
                        self.at += 2;
                        let end = self.name()?;
                        if end != element.name {
                            return Err(bad(format!(
                                "end tag {end} does not match {}",
                                element.name
                            )));
                        }
                        self.skip_space();
                        if self.peek() != Some(b'>') {
                            return Err(bad("'>' expected"));
                        }
                        self.at += 1;
                        return Ok(element);
                    } else if self.starts("<![CDATA[") {
                        self.at += 9;
                        let Some(end) = self.src[self.at..].find("]]>") else {
                            return Err(bad("unterminated CDATA section"));
                        };
                        let cdata = &self.src[self.at..self.at + end];
                        if !is_xml_text(cdata) {
                            return Err(bad("a character XML does not allow"));
                        }
                        element.text.push_str(cdata);
                        self.at += end + 3;
                    } else if self.starts("<!--") {
                        self.skip_past("-->")?;
                    } else if self.starts("<!") || self.starts("<?") {
                        return Err(bad(
                            "declarations and processing instructions are not accepted",
                        ));
                    } else {
                        let child = self.element(depth + 1)?;
                        element.children.push(child);
                    }
                }
                Some(b'&') => {
                    let c = self.reference()?;
                    element.text.push(c);
                }
                Some(_) => {
                    let start = self.at;
                    while !matches!(self.peek(), None | Some(b'<' | b'&')) {
                        self.at += 1;
                    }
                    let run = &self.src[start..self.at];
                    if !is_xml_text(run) {
                        return Err(bad("a character XML does not allow"));
                    }
                    if run.contains('\r') {
                        // Line ends are normalized, as XML reads them.
                        element
                            .text
                            .push_str(&run.replace("\r\n", "\n").replace('\r', "\n"));
                    } else {
                        element.text.push_str(run);
                    }
                }
            }
        }
    }

    /// An entity or character reference at `&`.
    fn reference(&mut self) -> Result<char, AzureError> {
        let rest = &self.src[self.at..];
        // Bytes, not characters: the look is bounded wherever a character
        // ends (`;` is ASCII, so where it is found a character ends).
        let look = &rest.as_bytes()[..rest.len().min(12)];
        let Some(end) = look.iter().position(|&b| b == b';') else {
            return Err(bad("an '&' that starts no reference"));
        };
        let name = &rest[1..end];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = name.strip_prefix("#x") {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#') {
                    dec.parse::<u32>().ok()
                } else {
                    return Err(bad(format!("entity &{name}; is not defined")));
                };
                code.and_then(char::from_u32)
                    .filter(|c| is_xml_char(*c))
                    .ok_or_else(|| bad(format!("&{name}; is not a character XML allows")))?
            }
        };
        self.at += end + 1;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_with_its_entities_and_cdata() {
        let e = parse(
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<QueueMessage><MessageText>a &lt;b&gt; &amp; &#233;&#x41;<![CDATA[<x>]]></MessageText></QueueMessage>",
        )
        .unwrap();
        assert_eq!(e.name, "QueueMessage");
        assert_eq!(e.child("MessageText").unwrap().text, "a <b> & \u{e9}A<x>");
        let e = parse(b"<A x='1' y=\"2\"><B/><B>t</B><!-- c --></A>").unwrap();
        assert_eq!(e.all("B").count(), 2);
        assert_eq!(e.all("B").nth(1).unwrap().text, "t");
    }

    #[test]
    fn hostile_documents_are_refused_by_name() {
        let deep = "<a>".repeat(DEPTH_MAX + 1) + &"</a>".repeat(DEPTH_MAX + 1);
        let wide = format!("<a>{}</a>", "<b/>".repeat(ELEMENTS_MAX));
        for (doc, why) in [
            (
                "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
                "document type",
            ),
            ("<a>&x;</a>", "not defined"),
            ("<a>&#0;</a>", "not a character"),
            ("<a>\u{1}</a>", "does not allow"),
            ("<a><b></a>", "does not match"),
            ("<a>", "not closed"),
            ("<a></a><b/>", "after the root"),
            ("<a x=1/>", "quoted"),
            ("text", "no root"),
            ("<?pi x?><a/>", "processing instructions"),
            (deep.as_str(), "deeper"),
            (wide.as_str(), "elements"),
        ] {
            let e = parse(doc.as_bytes()).unwrap_err();
            assert_eq!(e.code, Code::InvalidXmlDocument);
            assert!(e.message.contains(why), "{doc}: {}", e.message);
        }
        assert!(parse(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn an_ampersand_before_a_wide_character_is_refused_not_a_panic() {
        // The reference's bounded look ended inside a two-byte character
        // (found by the azure_request fuzz target).
        let e = parse("<T>&amp;&amp;\n\u{7a3}&amp;</T>".as_bytes()).unwrap();
        assert_eq!(e.text, "&&\n\u{7a3}&");
        assert!(parse("<T>&aaaaaaaa\u{7a3}\u{7a3};</T>".as_bytes()).is_err());
    }

    #[test]
    fn text_is_escaped_so_it_reads_back() {
        let text = "a<b>&\"c' \r\nd";
        let mut out = String::new();
        element(&mut out, "T", text);
        let back = parse(out.as_bytes()).unwrap();
        assert_eq!(back.text, text);
        assert!(is_xml_text("tab\tok"));
        assert!(!is_xml_text("nul\0"));
    }
}
