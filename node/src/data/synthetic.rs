//! The seeded synthetic corpus: word-like text whose entropy rate is known
//! exactly, so the best achievable loss of a byte-level model is known.
//!
//! A seeded lexicon of lowercase words is joined by a first-order Markov chain
//! (each word has a few seeded successors), and each word is followed by a
//! separator (" ", ", ", ". ", "\n") drawn independently. Spelling is fixed once
//! a word is chosen, so a model needs the preceding bytes to predict the next one:
//! the start of a word depends on the previous word, its rest on its own prefix.
//!
//! Entropy rate: letters and separators are disjoint, so the byte stream
//! determines the (word, separator) stream and vice versa. By renewal-reward,
//! with π the chain's stationary distribution,
//!   H = Σ_i π_i (H(P_i·) + H(sep)) / Σ_i π_i Σ_j P_ij (len(w_j) + E[len(sep)])  nats/byte,
//! which is nats per token under the byte tokenizer.

use std::collections::HashSet;

use super::error::DataError;
use super::rng::SplitMix64;

/// Separators after each word and their probabilities (disjoint from letters).
const SEPARATORS: [(&[u8], f64); 4] = [(b" ", 0.6), (b", ", 0.15), (b". ", 0.15), (b"\n", 0.1)];
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
/// Upper bounds that keep building the language cheap (dense solve is O(words³)).
const MAX_WORDS: usize = 512;
const MAX_WORD_LEN: usize = 16;

/// The parameters of a synthetic language. The default is what `--data synthetic` means.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SyntheticSpec {
    /// Seeds the lexicon and the transition probabilities (the language itself,
    /// not the sampled stream, which the loaders seed).
    pub seed: u64,
    /// Lexicon size.
    pub words: usize,
    /// Shortest word, in letters.
    pub min_word_len: usize,
    /// Longest word, in letters.
    pub max_word_len: usize,
    /// Successors per word (out-degree of the chain), including the two ring
    /// edges that make it irreducible and aperiodic.
    pub successors: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        Self { seed: 0, words: 48, min_word_len: 2, max_word_len: 4, successors: 12 }
    }
}

impl SyntheticSpec {
    /// Sets one `key=value` field as written in a data spec (`seed`, `words`,
    /// `min_len`, `max_len`, `successors`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = || {
            value.trim().parse::<u64>().map_err(|_| format!("`{key}` needs a whole number, got `{value}`"))
        };
        let small = || number().map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        match key.trim() {
            "seed" => self.seed = number()?,
            "words" => self.words = small()?,
            "min_len" => self.min_word_len = small()?,
            "max_len" => self.max_word_len = small()?,
            "successors" => self.successors = small()?,
            other => {
                return Err(format!(
                    "unknown synthetic option `{other}` (known: seed, words, min_len, max_len, successors)"
                ))
            }
        }
        Ok(())
    }

    /// Checks the parameters describe a language that can be built.
    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |reason: String| Err(DataError::BadSynthetic { reason });
        if !(3..=MAX_WORDS).contains(&self.words) {
            return bad(format!("words must be in 3..={MAX_WORDS}, got {}", self.words));
        }
        if self.min_word_len < 1 || self.max_word_len > MAX_WORD_LEN || self.min_word_len > self.max_word_len
        {
            return bad(format!(
                "word lengths must satisfy 1 <= min_len <= max_len <= {MAX_WORD_LEN}, got {}..={}",
                self.min_word_len, self.max_word_len
            ));
        }
        if !(2..=self.words).contains(&self.successors) {
            return bad(format!("successors must be in 2..=words ({}), got {}", self.words, self.successors));
        }
        // Distinct words must be plentiful enough for rejection sampling to finish fast.
        let possible: u64 = (self.min_word_len..=self.max_word_len)
            .map(|len| 26u64.saturating_pow(len as u32))
            .fold(0, u64::saturating_add);
        if possible < 4 * self.words as u64 {
            return bad(format!(
                "only {possible} words of these lengths exist; allow longer words or use fewer"
            ));
        }
        Ok(())
    }

    /// Builds the language: lexicon, chain, stationary distribution, entropy rate.
    pub fn build(&self) -> Result<SyntheticLanguage, DataError> {
        self.validate()?;
        SyntheticLanguage::build(self)
    }
}

/// One outgoing edge of the word chain.
#[derive(Clone, Copy, Debug)]
struct Transition {
    word: u32,
    prob: f64,
    cumulative: f64,
}

/// A built synthetic language: sampling and exact entropy.
#[derive(Clone, Debug)]
pub struct SyntheticLanguage {
    spec: SyntheticSpec,
    lexicon: Vec<Vec<u8>>,
    transitions: Vec<Vec<Transition>>,
    stationary: Vec<f64>,
    stationary_cumulative: Vec<f64>,
    longest_step: usize,
    entropy_rate: f64,
}

fn separator_entropy() -> f64 {
    SEPARATORS.iter().map(|(_, p)| -p * p.ln()).sum()
}

fn mean_separator_len() -> f64 {
    SEPARATORS.iter().map(|(s, p)| p * s.len() as f64).sum()
}

fn pick_separator(u: f64) -> &'static [u8] {
    let mut acc = 0.0;
    for (sep, p) in SEPARATORS {
        acc += p;
        if u < acc {
            return sep;
        }
    }
    SEPARATORS[0].0
}

impl SyntheticLanguage {
    fn build(spec: &SyntheticSpec) -> Result<Self, DataError> {
        let mut rng = SplitMix64::new(spec.seed ^ 0x5359_4e54_4845_5449); // "SYNTHETI"
        let n = spec.words;
        let mut seen = HashSet::with_capacity(n);
        let mut lexicon = Vec::with_capacity(n);
        while lexicon.len() < n {
            let span = (spec.max_word_len - spec.min_word_len + 1) as u64;
            let len = spec.min_word_len + rng.below(span) as usize;
            let word: Vec<u8> = (0..len).map(|_| ALPHABET[rng.below(26) as usize]).collect();
            if seen.insert(word.clone()) {
                lexicon.push(word);
            }
        }

        let mut transitions = Vec::with_capacity(n);
        for i in 0..n {
            // Ring edges i→i+1 and i→i+2 give cycles of lengths n and n−1:
            // the chain is irreducible and aperiodic, so π exists and is unique.
            let mut targets = vec![(i + 1) % n, (i + 2) % n];
            while targets.len() < spec.successors {
                let j = rng.below(n as u64) as usize;
                if !targets.contains(&j) {
                    targets.push(j);
                }
            }
            let weights: Vec<f64> = targets.iter().map(|_| 0.5 + rng.next_f64()).collect();
            let total: f64 = weights.iter().sum();
            let mut cumulative = 0.0;
            let edges = targets
                .iter()
                .zip(&weights)
                .map(|(&word, &w)| {
                    cumulative += w / total;
                    Transition { word: word as u32, prob: w / total, cumulative }
                })
                .collect();
            transitions.push(edges);
        }

        let stationary = stationary_distribution(&transitions)?;
        let mut acc = 0.0;
        let stationary_cumulative = stationary
            .iter()
            .map(|p| {
                acc += p;
                acc
            })
            .collect();

        let (h_sep, len_sep) = (separator_entropy(), mean_separator_len());
        let (mut nats_per_word, mut bytes_per_word) = (0.0, 0.0);
        for (i, edges) in transitions.iter().enumerate() {
            let h: f64 = edges.iter().map(|e| -e.prob * e.prob.ln()).sum();
            let len: f64 =
                edges.iter().map(|e| e.prob * (lexicon[e.word as usize].len() as f64 + len_sep)).sum();
            nats_per_word += stationary[i] * (h + h_sep);
            bytes_per_word += stationary[i] * len;
        }
        let longest_sep = SEPARATORS.iter().map(|(s, _)| s.len()).max().unwrap_or(1);
        let longest_step = lexicon.iter().map(Vec::len).max().unwrap_or(1) + longest_sep;
        Ok(Self {
            spec: spec.clone(),
            lexicon,
            transitions,
            stationary,
            stationary_cumulative,
            longest_step,
            entropy_rate: nats_per_word / bytes_per_word,
        })
    }

    /// The exact entropy rate in nats per byte (= per token, byte tokenizer).
    pub fn entropy_rate(&self) -> f64 {
        self.entropy_rate
    }

    pub fn spec(&self) -> &SyntheticSpec {
        &self.spec
    }

    /// The chain's stationary distribution over words (lexicon order).
    pub fn stationary(&self) -> &[f64] {
        &self.stationary
    }

    /// The words of the language.
    pub fn lexicon(&self) -> impl Iterator<Item = &str> {
        self.lexicon.iter().map(|w| std::str::from_utf8(w).unwrap_or(""))
    }

    fn next_word(&self, from: usize, rng: &mut SplitMix64) -> usize {
        let u = rng.next_f64();
        let edges = &self.transitions[from];
        edges.iter().find(|e| u < e.cumulative).or(edges.last()).map_or(0, |e| e.word as usize)
    }

    /// Fills `out` with bytes of the stationary byte process, as if cut at a
    /// uniformly random position of an infinitely long text: a (previous word,
    /// word, separator) step is drawn with probability ∝ π_i·P_ij·p_s·(its
    /// length) by rejection, then a uniform offset inside it.
    pub(crate) fn sample_window(&self, rng: &mut SplitMix64, out: &mut [u32]) {
        let (mut word, step) = loop {
            let u = rng.next_f64();
            let prev = self.stationary_cumulative.partition_point(|&c| c <= u).min(self.lexicon.len() - 1);
            let word = self.next_word(prev, rng);
            let sep = pick_separator(rng.next_f64());
            let len = self.lexicon[word].len() + sep.len();
            if rng.below(self.longest_step as u64) < len as u64 {
                break (word, [self.lexicon[word].as_slice(), sep].concat());
            }
        };
        let offset = rng.below(step.len() as u64) as usize;
        let mut filled = 0;
        for &b in &step[offset..] {
            if filled == out.len() {
                return;
            }
            out[filled] = u32::from(b);
            filled += 1;
        }
        while filled < out.len() {
            word = self.next_word(word, rng);
            let sep = pick_separator(rng.next_f64());
            for &b in self.lexicon[word].iter().chain(sep) {
                if filled == out.len() {
                    return;
                }
                out[filled] = u32::from(b);
                filled += 1;
            }
        }
    }

    /// Generates `len` bytes of text from `seed` (for examples and tests).
    pub fn sample_text(&self, seed: u64, len: usize) -> String {
        let mut ids = vec![0u32; len];
        self.sample_window(&mut SplitMix64::new(seed), &mut ids);
        ids.iter().map(|&b| char::from(b as u8)).collect()
    }

    /// The true model's mean −ln p per byte over the complete words of `text`
    /// (the bytes before the first separator are skipped). `None` if the text
    /// is not from this language.
    pub fn mean_log_loss(&self, text: &[u8]) -> Option<f64> {
        let index: std::collections::HashMap<&[u8], usize> =
            self.lexicon.iter().enumerate().map(|(i, w)| (w.as_slice(), i)).collect();
        let mut steps = split_steps(text).into_iter();
        let (first, _) = steps.next()?;
        let mut prev = *index.get(first)?;
        let (mut nats, mut bytes) = (0.0, 0usize);
        for (word, sep) in steps {
            let id = *index.get(word)?;
            let p_word = self.transitions[prev].iter().find(|e| e.word as usize == id)?.prob;
            let p_sep = SEPARATORS.iter().find(|(s, _)| *s == sep)?.1;
            nats -= p_word.ln() + p_sep.ln();
            bytes += word.len() + sep.len();
            prev = id;
        }
        (bytes > 0).then(|| nats / bytes as f64)
    }
}

/// Splits text into (word, separator) steps, dropping the leading partial
/// step and a trailing one without its full separator.
fn split_steps(text: &[u8]) -> Vec<(&[u8], &[u8])> {
    let is_letter = |b: &u8| b.is_ascii_lowercase();
    let start = text.iter().position(|b| !is_letter(b)).unwrap_or(text.len());
    let start = start + text[start..].iter().position(is_letter).unwrap_or(text.len() - start);
    let mut steps = Vec::new();
    let mut i = start;
    while i < text.len() {
        let word_end = i + text[i..].iter().position(|b| !is_letter(b)).unwrap_or(text.len() - i);
        let sep_end = word_end + text[word_end..].iter().position(is_letter).unwrap_or(text.len() - word_end);
        if sep_end == text.len() {
            break; // the last separator may be cut short
        }
        steps.push((&text[i..word_end], &text[word_end..sep_end]));
        i = sep_end;
    }
    steps
}

/// Solves π·P = π, Σπ = 1 by Gaussian elimination with partial pivoting on
/// (Pᵀ − I) with one row replaced by the normalisation, then checks the result.
fn stationary_distribution(transitions: &[Vec<Transition>]) -> Result<Vec<f64>, DataError> {
    let n = transitions.len();
    let mut a = vec![0.0f64; n * (n + 1)]; // augmented n × (n+1), row-major
    let at = |r: usize, c: usize| r * (n + 1) + c;
    for (i, edges) in transitions.iter().enumerate() {
        for e in edges {
            a[at(e.word as usize, i)] += e.prob; // row j: Σ_i π_i P_ij
        }
        a[at(i, i)] -= 1.0;
    }
    for c in 0..=n {
        a[at(n - 1, c)] = 1.0;
    }
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&x, &y| a[at(x, col)].abs().total_cmp(&a[at(y, col)].abs())).unwrap_or(col);
        if a[at(pivot, col)].abs() < 1e-12 {
            return Err(DataError::BadSynthetic {
                reason: "the word chain has no unique stationary distribution".into(),
            });
        }
        if pivot != col {
            for c in 0..=n {
                a.swap(at(pivot, c), at(col, c));
            }
        }
        for r in 0..n {
            if r != col {
                let factor = a[at(r, col)] / a[at(col, col)];
                if factor != 0.0 {
                    for c in col..=n {
                        a[at(r, c)] -= factor * a[at(col, c)];
                    }
                }
            }
        }
    }
    let pi: Vec<f64> = (0..n).map(|i| a[at(i, n)] / a[at(i, i)]).collect();
    let mut residual = 0.0f64;
    let mut next = vec![0.0; n];
    for (i, edges) in transitions.iter().enumerate() {
        for e in edges {
            next[e.word as usize] += pi[i] * e.prob;
        }
    }
    for (p, q) in pi.iter().zip(&next) {
        residual = residual.max((p - q).abs());
    }
    if residual > 1e-12 || pi.iter().any(|&p| p.is_nan() || p <= 0.0) {
        return Err(DataError::BadSynthetic {
            reason: format!("stationary solve failed (residual {residual:e})"),
        });
    }
    Ok(pi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_floor_is_modest_and_below_the_limit() {
        let lang = SyntheticSpec::default().build().unwrap();
        let floor = lang.entropy_rate();
        assert!(floor <= 2.5, "floor {floor}");
        assert!((0.5..1.5).contains(&floor), "floor {floor} should leave a learnable gap to ln 256");
    }

    #[test]
    fn exact_entropy_rate_matches_the_empirical_log_loss() {
        for seed in [0, 7] {
            let lang = SyntheticSpec { seed, ..SyntheticSpec::default() }.build().unwrap();
            let text = lang.sample_text(99, 2_000_000);
            let empirical = lang.mean_log_loss(text.as_bytes()).expect("text parses as this language");
            let exact = lang.entropy_rate();
            assert!((empirical - exact).abs() < 0.01, "seed {seed}: empirical {empirical} vs exact {exact}");
        }
    }

    #[test]
    fn stationary_distribution_is_a_fixed_point() {
        let lang = SyntheticSpec { words: 100, successors: 5, ..SyntheticSpec::default() }.build().unwrap();
        let sum: f64 = lang.stationary.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
        assert!(lang.stationary.iter().all(|&p| p > 0.0));
    }

    #[test]
    fn language_and_samples_are_deterministic_in_the_seed() {
        let a = SyntheticSpec::default().build().unwrap();
        let b = SyntheticSpec::default().build().unwrap();
        assert_eq!(a.lexicon().collect::<Vec<_>>(), b.lexicon().collect::<Vec<_>>());
        assert_eq!(a.entropy_rate().to_bits(), b.entropy_rate().to_bits());
        assert_eq!(a.sample_text(5, 1000), b.sample_text(5, 1000));
        assert_ne!(a.sample_text(5, 1000), a.sample_text(6, 1000));
        let c = SyntheticSpec { seed: 1, ..SyntheticSpec::default() }.build().unwrap();
        assert_ne!(a.lexicon().collect::<Vec<_>>(), c.lexicon().collect::<Vec<_>>());
    }

    #[test]
    fn samples_are_words_and_separators() {
        let lang = SyntheticSpec::default().build().unwrap();
        let text = lang.sample_text(3, 5000);
        assert!(text.bytes().all(|b| b.is_ascii_lowercase() || b" ,.\n".contains(&b)));
        let words: HashSet<&str> = lang.lexicon().collect();
        for w in text.split(|c: char| !c.is_ascii_lowercase()).skip(1).filter(|w| !w.is_empty()) {
            assert!(words.contains(w) || text.ends_with(w), "{w:?} not in lexicon");
        }
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        let bad = [
            SyntheticSpec { words: 2, ..SyntheticSpec::default() },
            SyntheticSpec { successors: 1, ..SyntheticSpec::default() },
            SyntheticSpec { min_word_len: 5, max_word_len: 3, ..SyntheticSpec::default() },
            SyntheticSpec { min_word_len: 1, max_word_len: 1, words: 20, ..SyntheticSpec::default() },
        ];
        for spec in bad {
            assert!(matches!(spec.build(), Err(DataError::BadSynthetic { .. })), "{spec:?}");
        }
        let mut spec = SyntheticSpec::default();
        assert!(spec.set("seed", "9").is_ok());
        assert_eq!(spec.seed, 9);
        assert!(spec.set("colour", "red").is_err());
        assert!(spec.set("words", "many").is_err());
    }
}
