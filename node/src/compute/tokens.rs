//! The token upload both device backends (wgpu, CUDA) share: a batch's ids
//! laid out with the grouping the encoder backward needs to sum each
//! token's rows in a fixed order without float atomics.

/// The words of a token buffer of `capacity` ids for `ids` (at most
/// `capacity` of them are used): the ids, their positions sorted by token
/// (stable), each distinct token, and where its positions start — each
/// section `capacity` words long, the last one word longer. Returns the
/// words and the number of distinct tokens.
pub fn token_layout(ids: &[u32], capacity: usize) -> (Vec<u32>, usize) {
    let n = ids.len().min(capacity);
    let ids = &ids[..n];
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&p| ids[p as usize]); // stable: positions stay in order
    let mut group_token = Vec::new();
    let mut group_start = Vec::new();
    for (k, &p) in order.iter().enumerate() {
        let tok = ids[p as usize];
        if group_token.last() != Some(&tok) {
            group_token.push(tok);
            group_start.push(k as u32);
        }
    }
    group_start.push(n as u32);
    let groups = group_token.len();
    let mut words = vec![0u32; 4 * capacity + 1];
    words[..n].copy_from_slice(ids);
    words[capacity..capacity + n].copy_from_slice(&order);
    words[2 * capacity..2 * capacity + groups].copy_from_slice(&group_token);
    words[3 * capacity..3 * capacity + groups + 1].copy_from_slice(&group_start);
    (words, groups)
}

#[cfg(test)]
mod tests {
    use super::token_layout;

    #[test]
    fn tokens_are_grouped_stably_by_id() {
        let (w, groups) = token_layout(&[5, 2, 5, 9, 2], 6);
        assert_eq!(groups, 3);
        assert_eq!(w.len(), 25);
        assert_eq!(&w[..5], &[5, 2, 5, 9, 2]);
        assert_eq!(&w[6..11], &[1, 4, 0, 2, 3], "positions sorted by token, stable");
        assert_eq!(&w[12..15], &[2, 5, 9]);
        assert_eq!(&w[18..22], &[0, 2, 4, 5]);
        // More ids than the buffer holds: only the first `capacity` are laid out.
        let (w, groups) = token_layout(&[3, 3, 1], 2);
        assert_eq!((w.len(), groups), (9, 1));
        assert_eq!(&w[..2], &[3, 3]);
    }
}
