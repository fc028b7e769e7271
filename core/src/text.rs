//! Text made fit for a condition, an Event or a log line. Pure.

/// The most characters of a server's own words that go into a condition, an Event or a log.
pub const OUTSIDE_TEXT_CHARS: usize = 300;

/// Text a server we do not control chose (an error's message), made fit for a condition, an
/// Event or a log line: control characters (new lines, escapes) become spaces and it is cut
/// at [`OUTSIDE_TEXT_CHARS`], marked `…`. Pure.
pub fn outside_text(text: &str) -> String {
    let mut cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(OUTSIDE_TEXT_CHARS + 1)
        .collect();
    if cleaned.chars().count() > OUTSIDE_TEXT_CHARS {
        cleaned = cleaned.chars().take(OUTSIDE_TEXT_CHARS).collect();
        cleaned.push('…');
    }
    cleaned
}

/// `text` cut to at most `limit` bytes, on a character boundary.
pub fn cut_to_bytes(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
