//! GPT-2's pre-tokenizer: splits text into the pieces that BPE then encodes
//! one by one, with the semantics of OpenAI's pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//!
//! Why the `regex` crate plus a hand-written rule instead of `fancy-regex` or a
//! fully hand-written splitter: the pattern needs exact Unicode General_Category
//! classes (`\p{L}`, `\p{N}`), which `std` does not expose (`char::is_alphabetic`
//! is the broader Alphabetic property and would mis-split Indic scripts), and
//! `regex` ships those tables. Its only unsupported piece is the lookahead in
//! `\s+(?!\S)`, whose whole effect is one rule: a run of two or more whitespace
//! characters followed by a non-space gives its last character back to the next
//! piece (so " world" keeps its space). Implementing that rule by hand keeps
//! the matcher a guaranteed linear-time automaton on arbitrary input, where
//! `fancy-regex` would run the lookaround alternative in its backtracking VM.

use regex::Regex;

/// The pattern without the lookahead alternative; see the module comment.
const PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// Splits text into GPT-2 pre-token pieces.
#[derive(Clone, Debug)]
pub(crate) struct Gpt2PreTokenizer {
    regex: Regex,
}

impl Gpt2PreTokenizer {
    pub(crate) fn new() -> Result<Self, regex::Error> {
        Ok(Self { regex: Regex::new(PATTERN)? })
    }

    /// The pieces of `text`, in order; their concatenation is `text`.
    pub(crate) fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut pieces = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let Some(found) = self.regex.find_at(text, start) else {
                // Every character matches one alternative, so this is unreachable
                // in practice; keep the rest as one piece rather than lose text.
                pieces.push(&text[start..]);
                break;
            };
            let mut end = found.end();
            let piece = &text[start..end];
            if piece.chars().all(char::is_whitespace) {
                if let Some(next) = text[end..].chars().next() {
                    if !next.is_whitespace() && piece.chars().nth(1).is_some() {
                        // `\s+(?!\S)`: leave the last whitespace char for the next piece.
                        end -= piece.chars().next_back().map_or(0, char::len_utf8);
                    }
                }
            }
            pieces.push(&text[start..end]);
            start = end;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        Gpt2PreTokenizer::new().unwrap().split(text)
    }

    #[test]
    fn splits_words_with_their_leading_space() {
        assert_eq!(split("Hello world"), ["Hello", " world"]);
        assert_eq!(split("Hello, world!"), ["Hello", ",", " world", "!"]);
    }

    #[test]
    fn splits_contractions_numbers_and_symbols() {
        assert_eq!(split("it's 2024's"), ["it", "'s", " 2024", "'s"]);
        assert_eq!(split("x=3.14"), ["x", "=", "3", ".", "14"]);
    }

    #[test]
    fn whitespace_runs_give_their_last_char_to_the_next_word() {
        assert_eq!(split("a   b"), ["a", "  ", " b"]);
        assert_eq!(split("a\n\n\nb"), ["a", "\n\n", "\n", "b"]);
        assert_eq!(split("a \tb"), ["a", " ", "\t", "b"]);
        assert_eq!(split("end  "), ["end", "  "]);
        assert_eq!(split("  start"), [" ", " start"]);
    }

    #[test]
    fn uses_unicode_letter_classes() {
        assert_eq!(split("naïve café"), ["naïve", " café"]);
        assert_eq!(split("日本語"), ["日本語"]);
        // A Devanagari vowel sign is Alphabetic but not a Letter (it is Mc).
        assert_eq!(split("कि"), ["क", "ि"]);
    }

    #[test]
    fn pieces_concatenate_to_the_input() {
        let text = "  Mixed\t\ttext, with 123 numbers;\n\n  and   émojis 🚀 ok  ";
        assert_eq!(split(text).concat(), text);
    }
}
