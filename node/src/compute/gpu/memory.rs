//! Device memory: tensors and token buffers, the windows kernels bind (a
//! tensor larger than the adapter's binding limit is bound piecewise), and
//! the per-upload grouping of token positions the encoder backward uses.

/// An `f32` tensor in one device buffer.
pub struct GpuTensor {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) len: usize,
}

/// A token-id buffer. After the ids it holds the positions grouped by token
/// (stable) so gradients can be summed per token without atomics:
/// `ids[len] | order[len] | group_token[len] | group_start[len + 1]`.
pub struct GpuTokens {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) len: usize,
    /// Distinct tokens in the last upload.
    pub(crate) groups: usize,
}

impl GpuTokens {
    pub(crate) fn order_offset(&self) -> usize {
        self.len
    }
    pub(crate) fn group_token_offset(&self) -> usize {
        2 * self.len
    }
    pub(crate) fn group_start_offset(&self) -> usize {
        3 * self.len
    }
    /// u32 words the buffer holds.
    pub(crate) fn words(len: usize) -> usize {
        4 * len + 1
    }
}

/// A bindable byte range of a buffer.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

/// How kernels may bind buffers on this device.
#[derive(Clone, Copy, Debug)]
pub struct BindingRules {
    /// Largest number of elements one binding may span (after alignment).
    pub max_elems: usize,
    /// Required alignment of a binding's start, in bytes.
    pub align: u64,
}

impl BindingRules {
    pub fn new(max_binding_bytes: u64, align: u32) -> Self {
        let align = u64::from(align.max(4));
        // A window's start is aligned down, so leave room for that slack.
        let max_elems = (max_binding_bytes.saturating_sub(align) / 4).max(1) as usize;
        BindingRules { max_elems, align }
    }

    /// Binds elements `[start, end)` of `buffer`: the view and the index of
    /// element `start` inside it.
    pub fn window<'a>(&self, buffer: &'a wgpu::Buffer, start: usize, end: usize) -> (View<'a>, u32) {
        let start_bytes = start as u64 * 4;
        let offset = start_bytes / self.align * self.align;
        let end_bytes = (end.max(start + 1) as u64 * 4).min(buffer.size()).max(offset + 4);
        let view = View { buffer, offset, size: end_bytes - offset };
        (view, ((start_bytes - offset) / 4) as u32)
    }

    /// The whole tensor; only for tensors bounded by the model's width (biases,
    /// LayerNorm weights, position embedding, stats), never the vocabulary.
    pub fn whole<'a>(&self, t: &'a GpuTensor) -> View<'a> {
        self.window(&t.buffer, 0, t.len).0
    }
}

/// `[start, end)` ranges of at most `per` covering `0..total`.
pub fn chunks(total: usize, per: usize) -> impl Iterator<Item = (usize, usize)> {
    let per = per.max(1);
    (0..total.div_ceil(per)).map(move |i| (i * per, ((i + 1) * per).min(total)))
}

/// Host↔device tensor traffic since the backend was created (or last reset).
/// Kernel arguments (a few words per dispatch, written to a uniform arena)
/// and on-device clears are not tensor transfers and are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    pub tensor_uploads: u64,
    pub token_uploads: u64,
    pub downloads: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub submits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range() {
        assert_eq!(chunks(10, 4).collect::<Vec<_>>(), vec![(0, 4), (4, 8), (8, 10)]);
        assert_eq!(chunks(0, 4).count(), 0);
    }
}
